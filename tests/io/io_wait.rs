//! `gofer::io::wait_readable` and `wait_writable` on descriptors gofer does
//! not own (a pipe, a file, a socket of its own): from a task the task
//! parks and its thread stays free, from a thread the thread blocks; with a
//! timeout they give `TimedOut`, never earlier than asked.

use crate::net_common;

use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use gofer::io::{wait_readable, wait_writable};
use gofer::Scheduler;
use net_common::{drain_pipe, fill_pipe, pipe, recv, sched, wait_parked};

fn write_byte(w: &OwnedFd) {
    // SAFETY: writes one byte from a live buffer to an open descriptor.
    let n = unsafe { libc::write(w.as_raw_fd(), b"x".as_ptr().cast(), 1) };
    assert_eq!(n, 1, "{}", std::io::Error::last_os_error());
}

/// Runs `wait` in a task on a one-thread scheduler while another task
/// counts its own turns; returns what `wait` returned, how long it took,
/// and how many turns the other task took meanwhile (more than zero means
/// the thread was free).
fn in_task_with_a_witness<T: Send + 'static>(
    s: &Scheduler,
    wait: impl FnOnce() -> T + Send + 'static,
) -> (T, Duration, u64) {
    let waiting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let witness = {
        let (waiting, stop) = (waiting.clone(), stop.clone());
        s.spawn(move || {
            let mut during = 0;
            while !stop.load(Ordering::SeqCst) {
                if waiting.load(Ordering::SeqCst) {
                    during += 1;
                }
                gofer::yield_now();
            }
            during
        })
    };
    let waiter = s.spawn(move || {
        waiting.store(true, Ordering::SeqCst);
        let t = Instant::now();
        let r = wait();
        let took = t.elapsed();
        waiting.store(false, Ordering::SeqCst);
        stop.store(true, Ordering::SeqCst);
        (r, took)
    });
    let (r, took) = waiter.join().unwrap();
    (r, took, witness.join().unwrap())
}

/// Runs `wait(timeout)` with [`in_task_with_a_witness`] and checks that it
/// times out, never early, and that the witness ran meanwhile: the thread
/// was free.
///
/// The witness can only run once the waiter has parked, and the waiter's
/// deadline runs from the call: a thread held up between the two for the
/// whole timeout (preempted on a loaded machine, or paging in code on a
/// cold one) finds its deadline passed, times out without parking, and the
/// witness never runs, although nothing held the thread. So a round with
/// no witness turn is tried again with a four times longer timeout, twice:
/// a wait that holds the thread fails every round, whatever the timeout.
/// Needs no free core: one busy core only stretches the rounds.
fn times_out_leaving_the_thread_free(
    s: &Scheduler,
    wait: impl Fn(Duration) -> Result<(), ErrorKind> + Send + Sync + 'static,
) {
    let wait = Arc::new(wait);
    let mut timeout = Duration::from_millis(100);
    for round in 0..3 {
        let w = wait.clone();
        let (res, took, during) = in_task_with_a_witness(s, move || w(timeout));
        assert_eq!(res, Err(ErrorKind::TimedOut));
        assert!(took >= timeout, "early: {took:?}");
        if during > 0 {
            return;
        }
        println!("round {round}: no witness turn in a {timeout:?} wait taking {took:?}");
        timeout *= 4;
    }
    panic!("the waiting task held the thread in every round");
}

#[test]
fn wait_readable_on_a_pipe_times_out_in_a_task_and_leaves_the_thread_free() {
    let s = sched("wr-to", 1);
    let (r, _w) = pipe();
    times_out_leaving_the_thread_free(&s, move |timeout| {
        wait_readable(&r, Some(timeout)).map_err(|e| e.kind())
    });
    s.shutdown();
}

#[test]
fn wait_readable_on_a_pipe_wakes_a_parked_task_when_data_comes() {
    let s = sched("wr-data", 1);
    let (r, w) = pipe();
    let (tx, rx) = mpsc::channel();
    let r = Arc::new(r);
    let r2 = r.clone();
    s.spawn(move || {
        tx.send(wait_readable(&*r2, None).map_err(|e| e.kind()))
            .unwrap()
    });
    wait_parked(&s, "the waiter parks");
    write_byte(&w);
    assert_eq!(recv(&rx, "the waiter wakes"), Ok(()));
    assert_eq!(drain_pipe(&r), 1);
    // With a timeout that does not run out: data first.
    let (tx, rx) = mpsc::channel();
    let r3 = r.clone();
    s.spawn(move || {
        let t = Instant::now();
        let res = wait_readable(&*r3, Some(Duration::from_secs(60)));
        tx.send((res.map_err(|e| e.kind()), t.elapsed())).unwrap()
    });
    wait_parked(&s, "the waiter parks again");
    write_byte(&w);
    let (res, took) = recv(&rx, "the waiter wakes again");
    assert_eq!(res, Ok(()));
    assert!(took < Duration::from_secs(60));
    s.shutdown();
}

#[test]
fn wait_readable_reports_a_closed_writer_as_readable() {
    let s = sched("wr-eof", 1);
    let (r, w) = pipe();
    let (tx, rx) = mpsc::channel();
    s.spawn(move || {
        tx.send(wait_readable(&r, None).map_err(|e| e.kind()))
            .unwrap()
    });
    wait_parked(&s, "the waiter parks");
    drop(w);
    assert_eq!(recv(&rx, "the waiter wakes at the hang-up"), Ok(()));
    s.shutdown();
}

#[test]
fn wait_writable_on_a_full_pipe_times_out_then_succeeds_once_drained() {
    let s = sched("ww", 1);
    let (r, w) = pipe();
    assert!(fill_pipe(&w) > 0);
    let w = Arc::new(w);
    let timeout = Duration::from_millis(100);
    let w2 = w.clone();
    times_out_leaving_the_thread_free(&s, move |timeout| {
        wait_writable(&*w2, Some(timeout)).map_err(|e| e.kind())
    });
    // A parked writer wakes when the reader drains the pipe.
    let (tx, rx) = mpsc::channel();
    let w3 = w.clone();
    s.spawn(move || {
        tx.send(wait_writable(&*w3, None).map_err(|e| e.kind()))
            .unwrap()
    });
    wait_parked(&s, "the writer parks");
    assert!(drain_pipe(&r) > 0);
    assert_eq!(recv(&rx, "the writer wakes"), Ok(()));
    // Not full: at once.
    let w4 = w.clone();
    let res = s.spawn(move || wait_writable(&*w4, Some(timeout)).map_err(|e| e.kind()));
    assert_eq!(res.join().unwrap(), Ok(()));
    s.shutdown();
}

#[test]
fn wait_readable_and_writable_on_plain_threads_block_and_time_out() {
    let (r, w) = pipe();
    let timeout = Duration::from_millis(100);
    let t = Instant::now();
    assert_eq!(
        wait_readable(&r, Some(timeout)).map_err(|e| e.kind()),
        Err(ErrorKind::TimedOut)
    );
    assert!(t.elapsed() >= timeout);
    let writer = std::thread::spawn(move || {
        write_byte(&w);
        w
    });
    wait_readable(&r, None).expect("readable once the other thread wrote");
    let w = writer.join().unwrap();
    assert_eq!(drain_pipe(&r), 1);
    fill_pipe(&w);
    let t = Instant::now();
    assert_eq!(
        wait_writable(&w, Some(timeout)).map_err(|e| e.kind()),
        Err(ErrorKind::TimedOut)
    );
    assert!(t.elapsed() >= timeout);
    let reader = std::thread::spawn(move || {
        drain_pipe(&r);
        r
    });
    wait_writable(&w, None).expect("writable once the other thread drained");
    drop(reader.join().unwrap());
}

#[test]
fn a_regular_file_is_always_ready() {
    let s = sched("wfile", 1);
    let f = std::fs::File::open("/proc/self/exe")
        .or_else(|_| std::fs::File::open("/dev/null"))
        .unwrap();
    assert!(wait_readable(&f, Some(Duration::from_millis(10))).is_ok());
    let r = s
        .spawn(move || {
            (
                wait_readable(&f, Some(Duration::from_millis(10))).is_ok(),
                wait_writable(&f, None).is_ok(),
            )
        })
        .join()
        .unwrap();
    assert_eq!(r, (true, true));
    s.shutdown();
}

/// Two tasks wait on the same descriptor at once: both park (the thread
/// stays free) and both wake when it becomes readable.
#[test]
fn two_tasks_waiting_on_one_descriptor_both_park_and_both_wake() {
    let s = sched("wtwo", 1);
    let (r, w) = pipe();
    let r = Arc::new(r);
    let (tx, rx) = mpsc::channel();
    for _ in 0..2 {
        let (r, tx) = (r.clone(), tx.clone());
        s.spawn(move || {
            tx.send(wait_readable(&*r, None).map_err(|e| e.kind()))
                .unwrap()
        });
    }
    // Both must park: a wait that held the thread would keep the scheduler
    // from ever looking quiescent.
    wait_parked(&s, "both waiters park");
    write_byte(&w);
    assert_eq!(recv(&rx, "the first waiter wakes"), Ok(()));
    assert_eq!(recv(&rx, "the second waiter wakes"), Ok(()));
    s.shutdown();
}

/// `wait_readable` on one of gofer's own sockets while another task reads
/// the same socket: the read parks and then gets the data (it must not
/// fail because the wait holds the descriptor's place in the reactor).
///
/// The wait may not see that first write: epoll reports the wait's
/// duplicate descriptor and the socket's own registration as two items,
/// and an item the kernel harvests after the reader took the data is polled
/// again and reports no input (as `poll(2)` on a thread would not return
/// once another thread read the data first). So a second write, which
/// nobody reads, ends the wait if the first did not.
#[test]
fn wait_readable_on_a_gofer_socket_does_not_break_a_read_of_it() {
    let s = sched("wsock", 1);
    let (a, mut b) = gofer::net::unix::UnixStream::pair().unwrap();
    let a = Arc::new(a);
    let (tx, rx) = mpsc::channel();
    let a1 = a.clone();
    let tx1 = tx.clone();
    s.spawn(move || {
        let r = wait_readable(&*a1, None).map(|()| Vec::new());
        tx1.send(("wait", r.map_err(|e| e.kind()))).unwrap()
    });
    wait_parked(&s, "the waiter parks");
    let a2 = a.clone();
    s.spawn(move || {
        let mut buf = [0u8; 4];
        let r = (&*a2).read(&mut buf).map(|n| buf[..n].to_vec());
        tx.send(("read", r.map_err(|e| e.kind()))).unwrap()
    });
    wait_parked(&s, "the reader parks");
    b.write_all(b"data").unwrap();
    let mut got = vec![recv(&rx, "one of them wakes")];
    if got[0].0 == "wait" {
        got.push(recv(&rx, "the reader wakes"));
    } else {
        b.write_all(b"more").unwrap();
        got.push(recv(&rx, "the waiter wakes"));
    }
    got.sort();
    assert_eq!(
        got,
        vec![("read", Ok(b"data".to_vec())), ("wait", Ok(Vec::new()))]
    );
    s.shutdown();
}

/// `wait_readable` on a gofer socket that is already registered (a task
/// read it before) parks the task like any other wait: the thread stays
/// free.
#[test]
fn wait_readable_on_a_registered_gofer_socket_parks_the_task() {
    let s = sched("wsock-reg", 1);
    let (a, mut b) = gofer::net::unix::UnixStream::pair().unwrap();
    let a = Arc::new(a);
    let a1 = a.clone();
    let first = s.spawn(move || {
        let mut buf = [0u8; 1];
        (&*a1).read_exact(&mut buf).unwrap(); // parks: registers `a`
    });
    wait_parked(&s, "the reader parks");
    b.write_all(b"1").unwrap();
    first.join().unwrap();
    times_out_leaving_the_thread_free(&s, move |timeout| {
        wait_readable(&*a, Some(timeout)).map_err(|e| e.kind())
    });
    s.shutdown();
}
