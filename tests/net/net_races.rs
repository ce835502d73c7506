//! The races of the IO manager: descriptor numbers reused after a close,
//! clones dropped under a parked task, registrations churned while their
//! events are in flight, and a scheduler shut down (or dropped) with tasks
//! parked on sockets.
//!
//! Scenarios that could hang or crash run in a child process with a
//! watchdog.

use crate::common;
use crate::net_common;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{child_scenario, describe, run_child_watched, wait_until, PATIENCE};
use gofer::net::unix::UnixStream;
use gofer::net::TcpListener;
use gofer::{Scheduler, ShutdownError};
use net_common::{recv, sched, wait_parked};

/// Runs `scenario` of `test` in a child with a watchdog; it must print
/// CHILD-OK and exit 0.
fn in_child(test: &str, scenario: &str) {
    in_child_with_env(test, scenario, &[]);
}

/// [`in_child`] with extra environment for the child (`None` removes a
/// variable).
fn in_child_with_env(test: &str, scenario: &str, env: &[(&str, Option<&str>)]) {
    let out = run_child_watched(
        module_path!(),
        test,
        scenario,
        env,
        Duration::from_secs(120),
    )
    .unwrap_or_else(|| panic!("{test}: the child hung (killed by the watchdog)"));
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("CHILD-OK"),
        "{}",
        describe(&out)
    );
}

/// A task reading `s` into a channel: `Ok(bytes)` (empty at end of stream)
/// or the error kind.
fn reader(
    sched: &Scheduler,
    s: Arc<UnixStream>,
) -> mpsc::Receiver<Result<Vec<u8>, std::io::ErrorKind>> {
    let (tx, rx) = mpsc::channel();
    sched.spawn(move || {
        let mut buf = [0u8; 64];
        let r = (&*s).read(&mut buf).map(|n| buf[..n].to_vec());
        tx.send(r.map_err(|e| e.kind())).unwrap();
    });
    rx
}

// ------------------------------------------------------------ descriptor reuse

const FD_REUSE: &str = "a_reused_descriptor_number_never_wakes_the_new_owners_task";

/// A socket is registered (a task waited on it) and dropped; a new socket
/// gets its descriptor number and a task parks on it. The old socket lives
/// on through a clone and sees traffic and a hang-up: none of that wakes
/// the new owner's task, which wakes for its own data only, and the clone
/// keeps working.
///
/// In a child process: other tests' descriptors would take the number.
#[test]
fn a_reused_descriptor_number_never_wakes_the_new_owners_task() {
    if child_scenario().as_deref() != Some("fd-reuse") {
        return in_child(FD_REUSE, "fd-reuse");
    }
    let s = sched("fdreuse", 1);
    let (a, mut a_peer) = UnixStream::pair().unwrap();
    let a_clone = Arc::new(a.try_clone().unwrap());
    let old_fd = a.as_raw_fd();
    let a = Arc::new(a);
    let first = reader(&s, a.clone());
    wait_parked(&s, "a reader parks on the old socket");
    a_peer.write_all(b"1").unwrap();
    assert_eq!(recv(&first, "the old reader wakes"), Ok(b"1".to_vec()));
    // Drop it: deregistered, its number closed (the socket stays open
    // through the clone). The finished reader's closure lets go of its
    // share when its Processer collects it.
    wait_until("the first reader lets go of the socket", || {
        Arc::strong_count(&a) == 1
    });
    drop(a);
    // Open sockets until one gets the old number (the lowest free one;
    // keep the misses open).
    let mut misses = Vec::new();
    let (c, mut c_peer) = loop {
        let (x, y) = UnixStream::pair().unwrap();
        if x.as_raw_fd() == old_fd {
            break (x, y);
        }
        if y.as_raw_fd() == old_fd {
            break (y, x);
        }
        misses.push((x, y));
        assert!(misses.len() < 16, "descriptor {old_fd} never came back");
    };
    let c = Arc::new(c);
    let new_reader = reader(&s, c.clone());
    // A witness parked on a third socket, to know when the reactor has
    // delivered what came before its own event.
    let (w, mut w_peer) = UnixStream::pair().unwrap();
    let witness = reader(&s, Arc::new(w));
    wait_parked(&s, "the new owner and the witness park");
    // Traffic and a hang-up on the old socket.
    a_peer.write_all(b"stale").unwrap();
    a_peer.shutdown(std::net::Shutdown::Both).unwrap();
    w_peer.write_all(b"w").unwrap();
    assert_eq!(recv(&witness, "the witness wakes"), Ok(b"w".to_vec()));
    wait_parked(&s, "the scheduler goes quiet again");
    assert!(
        new_reader.try_recv().is_err(),
        "the new owner's task woke with the old socket's events"
    );
    c_peer.write_all(b"new").unwrap();
    assert_eq!(
        recv(&new_reader, "the new owner wakes"),
        Ok(b"new".to_vec())
    );
    // The old socket, through its clone: its data, then its end.
    let old = reader(&s, a_clone.clone());
    assert_eq!(recv(&old, "the clone reads"), Ok(b"stale".to_vec()));
    let old = reader(&s, a_clone);
    assert_eq!(recv(&old, "the clone sees the end"), Ok(Vec::new()));
    drop(misses);
    s.shutdown();
    println!("CHILD-OK");
}

/// Two handles of one connection, each registered; a task parks on one,
/// the other is dropped (deregistered and closed): the task stays parked
/// until its own data comes.
#[test]
fn a_task_parked_on_a_clone_stays_parked_when_another_clone_is_dropped() {
    let s = sched("clonedrop", 1);
    let (a, mut peer) = UnixStream::pair().unwrap();
    let a = Arc::new(a);
    let b = Arc::new(a.try_clone().unwrap());
    // Register the clone `b` too: a task waits on it once.
    let on_b = reader(&s, b.clone());
    wait_parked(&s, "a reader parks on the clone");
    peer.write_all(b"b").unwrap();
    assert_eq!(recv(&on_b, "the clone's reader wakes"), Ok(b"b".to_vec()));
    let on_a = reader(&s, a.clone());
    let (w, mut w_peer) = UnixStream::pair().unwrap();
    let witness = reader(&s, Arc::new(w));
    wait_parked(&s, "the reader on `a` and the witness park");
    wait_until("the clone's reader lets go of it", || {
        Arc::strong_count(&b) == 1
    });
    drop(b);
    w_peer.write_all(b"w").unwrap();
    assert_eq!(recv(&witness, "the witness wakes"), Ok(b"w".to_vec()));
    wait_parked(&s, "the scheduler goes quiet again");
    assert!(
        on_a.try_recv().is_err(),
        "dropping a clone woke the task parked on the other handle"
    );
    peer.write_all(b"a").unwrap();
    assert_eq!(recv(&on_a, "the reader on `a` wakes"), Ok(b"a".to_vec()));
    s.shutdown();
}

/// Rounds of: `TASKS` tasks register fresh sockets and park; a thread
/// writes to each peer and hangs up at once while the tasks wake, read
/// and drop their sockets, so that numbers are reused while events for
/// their old owners may still be in a poll. Every task must read exactly
/// its own data; a task that never wakes fails the round.
///
/// Up to `rounds` rounds, and no new round once [`CHURN_BUDGET`] has passed
/// and at least `floor` rounds have run: a round waits on several threads
/// waking one another, and on a machine whose cores are busy with other
/// work each of those wake-ups can wait for a time slice, so that a round
/// takes many times longer than on a quiet machine without using more CPU.
fn churn(threads: usize, rounds: usize, floor: usize) {
    let s = sched("churn", threads);
    const TASKS: usize = 32;
    let start = std::time::Instant::now();
    for round in 0..rounds {
        if round >= floor && start.elapsed() >= CHURN_BUDGET {
            println!("churn: {round} of {rounds} rounds within {CHURN_BUDGET:?}");
            break;
        }
        let (parked_tx, parked_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let mut peers = Vec::new();
        for i in 0..TASKS {
            let (mine, peer) = UnixStream::pair().unwrap();
            peers.push(peer);
            let (parked_tx, done_tx) = (parked_tx.clone(), done_tx.clone());
            s.spawn(move || {
                parked_tx.send(()).unwrap();
                let mut got = Vec::new();
                (&mine).read_to_end(&mut got).expect("read");
                drop(mine);
                done_tx.send((i, got)).unwrap();
            });
        }
        for _ in 0..TASKS {
            recv(&parked_rx, "a task starts");
        }
        let writer = std::thread::spawn(move || {
            for (i, mut p) in peers.into_iter().enumerate() {
                p.write_all(format!("{round}/{i}").as_bytes()).unwrap();
            }
        });
        for _ in 0..TASKS {
            match within(&done_rx, Duration::from_secs(10)) {
                Some((i, got)) => assert_eq!(
                    String::from_utf8_lossy(&got),
                    format!("{round}/{i}"),
                    "a task read another's data"
                ),
                None => panic!("STRANDED in round {round}: {:?}", s.stats()),
            }
        }
        writer.join().unwrap();
    }
    s.shutdown();
}

/// How long [`churn`] starts new rounds for (beyond its floor): well within
/// the watchdog's limit, which then leaves room for the last round.
const CHURN_BUDGET: Duration = Duration::from_secs(45);

const CHURN: &str =
    "registrations_churned_while_their_events_are_in_flight_wake_only_their_own_tasks";

/// [`churn`] on one Processer: descriptor numbers reused while events for
/// their old owners are in flight; every task reads exactly its own data,
/// nothing crashes or hangs.
#[test]
fn registrations_churned_while_their_events_are_in_flight_wake_only_their_own_tasks() {
    if child_scenario().as_deref() == Some("churn") {
        churn(1, 300, 300);
        println!("CHILD-OK");
        return;
    }
    in_child(CHURN, "churn");
}

const CHURN2: &str = "registrations_churned_on_two_processers_wake_every_task";

/// [`churn`] on two Processers, where one may go to sleep while the other
/// holds the poller role for a poll that does not wait (the race of
/// `readiness_is_not_stranded_when_a_processer_goes_to_sleep_while_another_thread_polls`):
/// a round whose task never wakes fails it. Up to 20,000 rounds (at least
/// 1,000, however slow the machine); when that race was open, a run of 200
/// hung once in some thirty here, and runs of 20,000 stranded about one in
/// five (a whole round's 32 tasks, both Processers asleep on their futex).
#[test]
fn registrations_churned_on_two_processers_wake_every_task() {
    if child_scenario().as_deref() == Some("churn2") {
        churn(2, 20_000, 1_000);
        println!("CHILD-OK");
        return;
    }
    in_child(CHURN2, "churn2");
}

const CHURN4: &str = "registrations_churned_on_four_processers_wake_every_task";

/// [`churn`] on four Processers: a poll by one of them (or by the
/// Dispatcher) wakes tasks bound to several others at once, which go to
/// their Processers a batch each; a task missing from a batch, or a
/// Processer not told of its batch, strands a round.
#[test]
fn registrations_churned_on_four_processers_wake_every_task() {
    if child_scenario().as_deref() == Some("churn4") {
        churn(4, 2_000, 500);
        println!("CHILD-OK");
        return;
    }
    in_child(CHURN4, "churn4");
}

const DEADLINE_RACE: &str = "readiness_racing_read_deadlines_loses_no_wake_up_and_no_byte";

/// Readers on two Processers read with a read timeout (the kernel's
/// shortest, one clock tick), and every 50th ping comes after a pause of
/// half to one and a half timeouts, so that its data often lands while the
/// socket's timer entry fires, on another thread: a reader is woken by its
/// deadline just as the reactor notifies it, and leaves its wait with or
/// without the lock on the socket's waiters. Each reader answers every
/// ping with the same byte and retries on a timeout. Every ping must be
/// answered, with its own byte; a lost wake-up hangs (the watchdog's kill
/// fails the test), a reader that left its wait too early or too late
/// misreads.
#[test]
fn readiness_racing_read_deadlines_loses_no_wake_up_and_no_byte() {
    if child_scenario().as_deref() != Some("deadline_race") {
        in_child(DEADLINE_RACE, "deadline_race");
        return;
    }
    const PAIRS: usize = 16;
    const PINGS: usize = 2_000;
    let s = sched("deadline-race", 2);
    let tick = kernel_tick();
    let mut peers = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..PAIRS {
        let (mine, peer) = UnixStream::pair().unwrap();
        peers.push(peer);
        tasks.push(s.spawn(move || {
            mine.set_read_timeout(Some(tick)).unwrap();
            let (mut answered, mut timeouts) = (0usize, 0usize);
            let mut b = [0u8; 1];
            loop {
                match (&mine).read(&mut b) {
                    Ok(0) => return (answered, timeouts),
                    Ok(_) => {
                        (&mine).write_all(&b).unwrap();
                        answered += 1;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => timeouts += 1,
                    Err(e) => panic!("read: {e}"),
                }
            }
        }));
    }
    let threads: Vec<_> = peers
        .into_iter()
        .enumerate()
        .map(|(k, mut p)| {
            std::thread::spawn(move || {
                for i in 0..PINGS {
                    if i % 50 == 49 {
                        // From half a timeout to one and a half.
                        let step = (i / 50 + k) % 11;
                        std::thread::sleep(tick * (5 + step as u32) / 10);
                    }
                    let ping = (i + k) as u8;
                    p.write_all(&[ping]).unwrap();
                    let mut b = [0u8; 1];
                    p.read_exact(&mut b).unwrap();
                    assert_eq!(b[0], ping, "pair {k}: ping {i} answered with another byte");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut timeouts = 0;
    for t in tasks {
        let (answered, t) = t.join().unwrap();
        assert_eq!(answered, PINGS);
        timeouts += t;
    }
    // The race was run: deadlines did pass between pings.
    assert!(timeouts > 0, "no read timed out: the deadlines never raced");
    s.shutdown();
    println!("CHILD-OK");
}

const CANCEL_RACE: &str = "readiness_racing_cancellation_leaves_no_waiter_linked_and_loses_no_byte";

/// [`readiness_racing_cancellation_leaves_no_waiter_linked_and_loses_no_byte`]
/// on the io_uring driver (`GOFER_IO=uring`, outside chaos mode so that the
/// readers are bound and read through their rings). There a byte wakes
/// both readers' receives; one takes it, the other's retry finds nothing
/// and waits again, and a cancel that came between the wake-up and the
/// retry finds no operation (`ENOENT`): the reader must still end.
#[test]
fn ring_reads_racing_cancellation_end_and_lose_no_byte() {
    let env = [("GOFER_IO", Some("uring")), ("GOFER_CHAOS_MIGRATE", None)];
    in_child_with_env(CANCEL_RACE, "cancel_race", &env);
}

/// The kernel's clock tick, to which it rounds a socket timeout up.
fn kernel_tick() -> Duration {
    let (probe, _peer) = UnixStream::pair().unwrap();
    probe
        .set_read_timeout(Some(Duration::from_micros(1)))
        .unwrap();
    probe.read_timeout().unwrap().expect("a timeout was set")
}

/// Two readers park on one socket and are cancelled just as a byte lands
/// for them, on three Processers: the cancellation's wake-up and the
/// reactor's race on different threads (on half the sockets a read
/// deadline of one clock tick races them too). A reader leaves its wait
/// either notified (it reads the byte, then unwinds at its next wait) or
/// with its node unlinked under the socket's lock (it unwinds at once).
/// The socket outlives its readers (an `Arc`) and the next round's readers
/// park on it behind whatever is left in its waiter list, so a node left
/// linked in a dead frame, or one the reactor still wrote after its
/// reader left, is walked by a later delivery: a crash, or a reader that
/// never wakes (the watchdog). Every byte written is read exactly once:
/// the readers' count, after a last reader drains the socket to its end,
/// is what was written.
#[test]
fn readiness_racing_cancellation_leaves_no_waiter_linked_and_loses_no_byte() {
    if child_scenario().as_deref() != Some("cancel_race") {
        in_child(CANCEL_RACE, "cancel_race");
        return;
    }
    const PAIRS: usize = 6;
    const ROUNDS: usize = 3_000;
    let s = Arc::new(sched("cancel-race", 3));
    let tick = kernel_tick();
    // A reader: counts every byte it reads, until end of stream; a timeout
    // (on the sockets that have one) is retried.
    fn counting_reader(
        s: &Scheduler,
        mine: &Arc<UnixStream>,
        count: &Arc<AtomicUsize>,
    ) -> gofer::JoinHandle<()> {
        let (mine, count) = (mine.clone(), count.clone());
        s.spawn(move || {
            let mut b = [0u8; 1];
            loop {
                match (&*mine).read(&mut b) {
                    Ok(0) => return,
                    Ok(_) => {
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("read: {e}"),
                }
            }
        })
    }
    let drivers: Vec<_> = (0..PAIRS)
        .map(|k| {
            let s = s.clone();
            std::thread::spawn(move || {
                let (mine, mut peer) = UnixStream::pair().unwrap();
                if k % 2 == 1 {
                    mine.set_read_timeout(Some(tick)).unwrap();
                }
                let mine = Arc::new(mine);
                let count = Arc::new(AtomicUsize::new(0));
                let mut cancelled = 0usize;
                // Rounds where a reader read after the cancellation was
                // asked for (it was notified first, or had not looked
                // yet), and rounds whose byte was left (a cancellation
                // won).
                let (mut read_after, mut left) = (0usize, 0usize);
                for round in 0..ROUNDS {
                    let a = counting_reader(&s, &mine, &count);
                    let b = counting_reader(&s, &mine, &count);
                    // Spun delays, varied per pair and round: up to 100 us
                    // before the write, and up to 10 to 60 us (by pair)
                    // between the write and the cancellations, so that
                    // they meet the readers at every stage: starting,
                    // parking, parked, being notified, reading.
                    let spin = |us: usize| {
                        let t = Instant::now();
                        while t.elapsed() < Duration::from_micros(us as u64) {
                            std::hint::spin_loop();
                        }
                    };
                    spin((round * 7919 + k * 13) % 101);
                    peer.write_all(&[round as u8]).unwrap();
                    spin((round * 104_729 + k * 31) % (10 + 10 * k));
                    let pre = count.load(Ordering::SeqCst);
                    a.cancel();
                    b.cancel();
                    for h in [a, b] {
                        match h.join() {
                            Err(e) if e.is_cancelled() => cancelled += 1,
                            other => {
                                panic!("pair {k}, round {round}: a reader ended with {other:?}")
                            }
                        }
                    }
                    let post = count.load(Ordering::SeqCst);
                    read_after += usize::from(post > pre);
                    left += usize::from(post < round + 1);
                }
                // The last reader drains what is left, to end of stream.
                drop(peer);
                counting_reader(&s, &mine, &count).join().unwrap();
                assert_eq!(
                    count.load(Ordering::SeqCst),
                    ROUNDS,
                    "pair {k}: bytes read twice or lost"
                );
                (cancelled, read_after, left)
            })
        })
        .collect();
    let (mut cancelled, mut read_after, mut left) = (0, 0, 0);
    for d in drivers {
        let (c, r, l) = d.join().unwrap();
        (cancelled, read_after, left) = (cancelled + c, read_after + r, left + l);
    }
    assert_eq!(cancelled, PAIRS * ROUNDS * 2);
    // The race was run both ways.
    assert!(read_after > 0, "no reader read after its cancellation");
    assert!(left > 0, "no cancellation came before its byte was read");
    match Arc::try_unwrap(s) {
        Ok(s) => s.shutdown(),
        Err(_) => panic!("a driver kept the scheduler"),
    }
    println!("CHILD-OK");
}

// ------------------------------------------------------------ shutdown

const PARKED_SHUTDOWN: &str =
    "shutdown_timeout_reports_tasks_parked_on_sockets_and_they_can_still_be_released";

/// Tasks parked on sockets at shutdown: `shutdown_timeout` reports them
/// alive (neither hangs nor crashes, and frees nothing under them), they
/// still wake when their peers close, and the scheduler then shuts down.
#[test]
fn shutdown_timeout_reports_tasks_parked_on_sockets_and_they_can_still_be_released() {
    if child_scenario().as_deref() == Some("parked-shutdown") {
        let s = sched("pshut", 2);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        const PARKED: usize = 20;
        let mut peers = Vec::new();
        let mut handles = Vec::new();
        for i in 0..PARKED {
            let (a, b) = UnixStream::pair().unwrap();
            peers.push(b);
            handles.push(s.spawn(move || {
                // Something on this task's stack that must survive.
                let marker = [i as u8; 256];
                let mut got = Vec::new();
                (&a).read_to_end(&mut got).expect("read");
                assert!(marker.iter().all(|m| *m == i as u8));
                got
            }));
        }
        // One more parked in accept.
        let acceptor = s.spawn(move || l.accept().map(|(_, p)| p).map_err(|e| e.kind()));
        wait_parked(&s, "every task parks");
        let e = s
            .shutdown_timeout(Duration::from_millis(200))
            .expect_err("tasks are parked on sockets");
        match e {
            ShutdownError::TimedOut { alive, waited } => {
                assert_eq!(alive, PARKED + 1, "{e}");
                assert!(waited >= Duration::from_millis(200));
            }
            other => panic!("{other}"),
        }
        // Spawning from outside is refused now; the parked tasks live on.
        assert!(gofer::Builder::new().scheduler(&s).spawn(|| ()).is_err());
        for (i, mut p) in peers.into_iter().enumerate() {
            p.write_all(&[i as u8; 3]).unwrap();
        }
        let client = std::net::TcpStream::connect(addr).unwrap();
        for (i, h) in handles.into_iter().enumerate() {
            assert_eq!(h.join().unwrap(), vec![i as u8; 3]);
        }
        assert_eq!(acceptor.join().unwrap(), Ok(client.local_addr().unwrap()));
        s.shutdown_timeout(PATIENCE)
            .expect("every task has finished");
        assert_eq!(s.stats().alive, 0);
        println!("CHILD-OK");
        return;
    }
    in_child(PARKED_SHUTDOWN, "parked-shutdown");
}

const DETACHED: &str =
    "a_detached_scheduler_with_tasks_parked_on_sockets_exits_once_they_are_released";

/// The last handle dropped while tasks are parked on sockets: the threads
/// stay for them, the tasks wake when their peers close, and then every
/// thread exits.
#[test]
fn a_detached_scheduler_with_tasks_parked_on_sockets_exits_once_they_are_released() {
    if child_scenario().as_deref() == Some("detached") {
        let s = sched("pdetach", 2);
        let (tx, rx) = mpsc::channel();
        let mut peers = Vec::new();
        for _ in 0..10 {
            let (a, b) = UnixStream::pair().unwrap();
            peers.push(b);
            let tx = tx.clone();
            s.spawn(move || {
                let mut got = Vec::new();
                (&a).read_to_end(&mut got).expect("read");
                tx.send(got.len()).unwrap();
            });
        }
        wait_parked(&s, "every task parks");
        drop(s);
        assert!(
            !common::live_threads_named("pdetach-").is_empty(),
            "the threads stay while tasks are parked"
        );
        drop(peers);
        for _ in 0..10 {
            assert_eq!(recv(&rx, "a released task ends"), 0);
        }
        wait_until("every thread of the detached scheduler exits", || {
            common::live_threads_named("pdetach").is_empty()
        });
        println!("CHILD-OK");
        return;
    }
    in_child(DETACHED, "detached");
}

// ------------------------------------------------------------ who polls

/// Waits up to `limit` for `rx`; `None` if nothing came (the task is
/// stranded: parked with its readiness undelivered).
fn within<T>(rx: &mpsc::Receiver<T>, limit: Duration) -> Option<T> {
    rx.recv_timeout(limit).ok()
}

/// Tasks parked on sockets for many block timeouts, next to a task that
/// keeps the Dispatcher sampling: neither the parked tasks nor the
/// Processer waiting in the reactor count as a blocked thread, and no
/// extra thread starts.
#[test]
fn tasks_parked_on_sockets_and_a_processer_waiting_in_the_reactor_are_never_blocked() {
    let s = Scheduler::builder()
        .min_threads(2)
        .max_threads(4)
        .name("notblocked")
        .build()
        .unwrap();
    let mut peers = Vec::new();
    let mut readers = Vec::new();
    for _ in 0..100 {
        let (a, b) = UnixStream::pair().unwrap();
        peers.push(b);
        readers.push(s.spawn(move || {
            let mut got = Vec::new();
            (&a).read_to_end(&mut got).unwrap();
            got.len()
        }));
    }
    wait_parked(&s, "the readers park");
    // The claim is about the time the readers spend parked: counted from
    // here. (While 100 first runs start on a loaded machine, a Processer
    // may be caught for real, e.g. behind a runtime lock whose holder the
    // OS put to sleep; that is the detector doing its job, not this test's
    // subject.)
    let before = s.stats();
    // A task that yields for 30 block timeouts keeps the Dispatcher awake
    // and sampling, while the other Processer waits in the reactor.
    let spinner = s.spawn(|| {
        let start = std::time::Instant::now();
        let mut turns = 0u64;
        while start.elapsed() < Duration::from_millis(300) {
            gofer::yield_now();
            turns += 1;
        }
        turns
    });
    assert!(spinner.join().unwrap() > 0);
    let st = s.stats();
    assert_eq!(
        st.blocked_detections, before.blocked_detections,
        "before: {before:?}\nafter: {st:?}"
    );
    assert_eq!(
        st.threads_started, before.threads_started,
        "before: {before:?}\nafter: {st:?}"
    );
    drop(peers);
    for r in readers {
        assert_eq!(r.join().unwrap(), 0);
    }
    s.shutdown();
}

/// One Processer is blocked in the kernel and the other is busy with a
/// task that yields in a loop: nobody sleeps in the reactor, yet a task
/// parked on a socket still wakes for each message, runs, and answers,
/// long before the block ends.
#[test]
fn readiness_is_delivered_while_one_processer_is_blocked_and_the_other_busy() {
    // The scenario is a started task rescued from a blocked thread, so its
    // tasks are allowed to move.
    // SAFETY: they touch no thread-local across a switch (their state is in
    // their frames, sockets and channels).
    let s = unsafe {
        Scheduler::builder()
            .min_threads(2)
            .max_threads(2)
            .name("strand")
            .migrate_started_tasks(true)
    }
    .build()
    .unwrap();
    const BLOCK: Duration = Duration::from_secs(2);
    let (a, mut peer) = UnixStream::pair().unwrap();
    let echo = s.spawn(move || {
        let mut b = [0u8; 1];
        let mut n = 0;
        while (&a).read(&mut b).unwrap() == 1 {
            (&a).write_all(&b).unwrap();
            n += 1;
        }
        n
    });
    wait_parked(&s, "the echo task parks");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (started_tx, started_rx) = mpsc::channel();
    let blocker = {
        let started_tx = started_tx.clone();
        s.spawn(move || {
            started_tx.send(()).unwrap();
            common::block_thread_in_kernel(BLOCK);
        })
    };
    let spinner = {
        let stop = stop.clone();
        s.spawn(move || {
            started_tx.send(()).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                gofer::yield_now();
            }
        })
    };
    recv(&started_rx, "one of blocker and spinner starts");
    recv(&started_rx, "the other starts");
    let t0 = std::time::Instant::now();
    for i in 0..20u8 {
        peer.write_all(&[i]).unwrap();
        let mut b = [0u8; 1];
        peer.read_exact(&mut b).unwrap();
        assert_eq!(b[0], i);
    }
    let took = t0.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(
        took < BLOCK / 2,
        "20 round trips took {took:?}: readiness waited for the blocked Processer"
    );
    drop(peer);
    assert_eq!(echo.join().unwrap(), 20);
    spinner.join().unwrap();
    blocker.join().unwrap();
    s.shutdown();
}

const OTHER_SCHED: &str =
    "a_socket_first_waited_on_by_a_scheduler_that_shut_down_still_wakes_another_schedulers_task";

/// A socket is registered with the reactor of the first scheduler whose
/// task waits on it, and tasks of any scheduler may then wait on it. When
/// that first scheduler has shut down (its handle still held), nobody
/// polls its reactor any more: a task of another scheduler waiting on the
/// socket must still wake when data comes.
#[test]
fn a_socket_first_waited_on_by_a_scheduler_that_shut_down_still_wakes_another_schedulers_task() {
    if child_scenario().as_deref() == Some("other-sched") {
        let first = sched("first", 1);
        let second = sched("second", 1);
        let (a, mut peer) = UnixStream::pair().unwrap();
        let a = Arc::new(a);
        let on_first = reader(&first, a.clone());
        wait_parked(&first, "a task of the first scheduler parks");
        peer.write_all(b"1").unwrap();
        assert_eq!(recv(&on_first, "it wakes"), Ok(b"1".to_vec()));
        first.shutdown();
        let on_second = reader(&second, a.clone());
        wait_parked(&second, "a task of the second scheduler parks");
        peer.write_all(b"2").unwrap();
        match within(&on_second, Duration::from_secs(5)) {
            Some(r) => assert_eq!(r, Ok(b"2".to_vec())),
            None => panic!("STRANDED: the second scheduler's task never woke"),
        }
        second.shutdown();
        drop(first);
        println!("CHILD-OK");
        return;
    }
    in_child(OTHER_SCHED, "other-sched");
}

const RETIRED_POLLER: &str =
    "readiness_is_not_stranded_when_the_processer_holding_the_poller_role_retires";

/// Only one idle Processer waits in the reactor (the poller role); the
/// others sleep on their futex. Here the one in the reactor is an extra
/// Processer, and it retires after `idle_thread_timeout` while the core
/// Processer sleeps on its futex with a task parked on a socket: that
/// task must still wake when its data comes.
///
/// To get there: a blocker holds the core Processer in the kernel, so the
/// Dispatcher starts an extra one, which runs the reader (it parks on its
/// socket) and then, idle, takes the poller role; the blocker ends, and
/// the core Processer, finding the role taken, sleeps on its futex.
#[test]
fn readiness_is_not_stranded_when_the_processer_holding_the_poller_role_retires() {
    if child_scenario().as_deref() == Some("retired-poller") {
        // An extra Processer retires only once no started task is bound to
        // it: the tasks here are allowed to move, so that it can.
        // SAFETY: they touch no thread-local across a switch (their state
        // is in their frames, sockets and channels).
        let s = unsafe {
            Scheduler::builder()
                .min_threads(1)
                .max_threads(2)
                .idle_thread_timeout(Duration::from_millis(500))
                .name("retire")
                .migrate_started_tasks(true)
        }
        .build()
        .unwrap();
        let (a, mut peer) = UnixStream::pair().unwrap();
        let (started_tx, started_rx) = mpsc::channel();
        let blocker = s.spawn(move || {
            started_tx.send(()).unwrap();
            // In the kernel, past the reach of the `hooks` feature.
            common::block_thread_in_kernel(Duration::from_millis(100));
        });
        recv(&started_rx, "the blocker starts");
        // Queued behind the blocked core Processer: rescued onto an extra.
        let on_extra = reader(&s, Arc::new(a));
        blocker.join().unwrap();
        wait_until("the extra Processer retires", || {
            s.stats().threads_retired == 1
        });
        wait_parked(&s, "the core Processer sleeps");
        peer.write_all(b"x").unwrap();
        match within(&on_extra, Duration::from_secs(5)) {
            Some(r) => assert_eq!(r, Ok(b"x".to_vec())),
            None => panic!("STRANDED: the reader never woke after the poller retired"),
        }
        s.shutdown();
        println!("CHILD-OK");
        return;
    }
    in_child(RETIRED_POLLER, "retired-poller");
}

const TRANSIENT: &str =
    "readiness_is_not_stranded_when_a_processer_goes_to_sleep_while_another_thread_polls";

/// The poller role is also held for a moment by whoever polls without
/// waiting: the Dispatcher (when every Processer has been busy for two
/// intervals) and busy Processers. A Processer that goes to sleep in that
/// moment finds the role taken and sleeps on its futex; if the other one
/// already sleeps there too, nobody is left waiting in the reactor.
///
/// Here a task burns 150-550 us of CPU without switching (so the
/// Dispatcher polls), then parks, over and over, while a thread does
/// round trips with an echo task. Every message must be answered; a
/// stranded one shows as a read that times out after 2 s. A stress test:
/// it runs for 15 s (`GOFER_STRESS_SECS` sets another length); before a
/// Processer that finds the role held for a quick look slept only briefly
/// (`BUSY_POLL`), a 60 s run stranded in 3 runs of 4 here (after 3 to
/// 50 s).
#[test]
fn readiness_is_not_stranded_when_a_processer_goes_to_sleep_while_another_thread_polls() {
    if child_scenario().as_deref() == Some("transient") {
        let s = sched("transient", 2);
        let (a, mut b) = UnixStream::pair().unwrap();
        let echo = s.spawn(move || {
            let mut buf = [0u8; 1];
            while (&a).read(&mut buf).unwrap() == 1 {
                (&a).write_all(&buf).unwrap();
            }
        });
        let (tx, rx) = gofer::chan::bounded::<u64>(0);
        let hog = s.spawn(move || {
            while let Ok(us) = rx.recv() {
                let t = std::time::Instant::now();
                while t.elapsed() < Duration::from_micros(us) {
                    std::hint::spin_loop();
                }
            }
        });
        b.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let start = std::time::Instant::now();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut round = 0u64;
        let secs = std::env::var("GOFER_STRESS_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(15);
        while start.elapsed() < Duration::from_secs(secs) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            tx.send(150 + rng % 400).unwrap();
            // Let the hog's end and our message race.
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_micros(rng % 600) {
                std::hint::spin_loop();
            }
            b.write_all(b"x").unwrap();
            let mut buf = [0u8; 1];
            if let Err(e) = b.read_exact(&mut buf) {
                panic!("STRANDED at round {round} ({e}): {:?}", s.stats());
            }
            round += 1;
        }
        drop(tx);
        drop(b);
        echo.join().unwrap();
        hog.join().unwrap();
        s.shutdown();
        println!("CHILD-OK");
        return;
    }
    in_child(TRANSIENT, "transient");
}

const BLOCK_ON: &str =
    "a_task_parked_on_a_socket_still_wakes_after_a_block_on_that_waited_on_io_returns";

/// `block_on`'s caller thread takes the poller role when its root task
/// waits on a socket. Meanwhile a task of the scheduler parks on another
/// socket, and its Processer, finding the role taken, sleeps on its
/// futex. The root wakes, the caller thread gives the role up and leaves
/// (`block_on` returns), and unless the sleeper it wakes to search gets
/// back to sleep after that, nobody waits in the reactor any more. The
/// other task must still wake when its data comes. Ten thousand rounds; it
/// stranded in 4 runs of 6 here (after 200 to 7,400 rounds).
#[test]
fn a_task_parked_on_a_socket_still_wakes_after_a_block_on_that_waited_on_io_returns() {
    if child_scenario().as_deref() == Some("block-on") {
        let s = Scheduler::builder()
            .min_threads(1)
            .max_threads(2)
            .name("blkio")
            .build()
            .unwrap();
        for round in 0..10_000 {
            let (a1, mut b1) = UnixStream::pair().unwrap();
            let (a2, mut b2) = UnixStream::pair().unwrap();
            let on_core = reader(&s, Arc::new(a2));
            // Answer the root from a thread, after a varying delay (spun,
            // 0 to 400 us), so that the answer meets the root and the
            // other task at every stage of their parking.
            let delay = Duration::from_micros((round * 7919) % 400);
            let answer = std::thread::spawn(move || {
                let t = std::time::Instant::now();
                while t.elapsed() < delay {
                    std::hint::spin_loop();
                }
                b1.write_all(b"x").unwrap();
                b1
            });
            s.block_on(move || {
                let mut b = [0u8; 1];
                (&a1).read_exact(&mut b).unwrap();
            });
            let _b1 = answer.join().unwrap();
            b2.write_all(b"y").unwrap();
            match within(&on_core, Duration::from_secs(3)) {
                Some(r) => assert_eq!(r, Ok(b"y".to_vec())),
                None => panic!("STRANDED at round {round}: {:?}", s.stats()),
            }
        }
        s.shutdown();
        println!("CHILD-OK");
        return;
    }
    in_child(BLOCK_ON, "block-on");
}
