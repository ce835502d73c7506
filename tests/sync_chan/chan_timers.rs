//! Timer channels: `after`, `at`, `tick` and `never`, as plain receivers and
//! in `select!` (and `Select`), on plain threads and inside tasks, and from
//! async code; with crossbeam-channel's semantics (one `after` message, then
//! nothing, never disconnected; ticks that do not pile up; `never` never
//! ready).
//!
//! Time bounds are generous: a message never comes before its deadline, and
//! comes at most `LATE` after it.

use crate::common;

use std::time::{Duration, Instant};

use common::{in_child, live_threads_named};
use gofer::chan::{
    after, at, never, tick, unbounded, Receiver, RecvTimeoutError, Select, TryRecvError,
};
use gofer::{select, Scheduler};

/// How late a timer message may come on a loaded machine.
const LATE: Duration = Duration::from_millis(500);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn sched(threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads)
        .build()
        .expect("valid scheduler config")
}

/// Asserts that `t` (when a message was received) is at or after `due`,
/// and not later than `LATE` after it.
fn assert_on_time(what: &str, due: Instant, t: Instant) {
    assert!(t >= due, "{what}: {:?} early", due - t);
    assert!(t - due <= LATE, "{what}: {:?} late", t - due);
}

#[test]
fn after_fires_once_on_time_then_never_again_on_a_thread() {
    let start = Instant::now();
    let rx = after(ms(50));
    assert_eq!(rx.capacity(), Some(1));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty), "not due yet");
    assert_eq!(rx.len(), 0);
    let msg = rx.recv().unwrap();
    let now = Instant::now();
    // The message is the instant it was due.
    assert_on_time("after(50ms)", start + ms(50), now);
    assert!(msg >= start + ms(50) && msg <= now, "message {msg:?}");
    // Then nothing more, and it never disconnects.
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(rx.recv_timeout(ms(30)), Err(RecvTimeoutError::Timeout));
    assert!(!rx.is_disconnected());
}

#[test]
fn after_is_ready_once_its_deadline_passed_even_unread() {
    let rx = after(ms(20));
    std::thread::sleep(ms(40));
    assert_eq!(rx.len(), 1);
    assert!(rx.is_full());
    assert!(rx.try_recv().is_ok());
    assert_eq!(rx.len(), 0);
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
}

#[test]
fn recv_timeout_on_after_times_out_before_and_succeeds_after() {
    let start = Instant::now();
    let rx = after(ms(100));
    assert_eq!(rx.recv_timeout(ms(10)), Err(RecvTimeoutError::Timeout));
    let msg = rx.recv_timeout(ms(2000)).unwrap();
    assert_on_time(
        "after(100ms) via recv_timeout",
        start + ms(100),
        Instant::now(),
    );
    assert!(msg >= start + ms(100));
}

#[test]
fn at_delivers_its_instant() {
    let when = Instant::now() + ms(30);
    let rx = at(when);
    assert_eq!(rx.recv(), Ok(when));
    assert_on_time("at", when, Instant::now());
    // An instant in the past is delivered at once.
    let past = Instant::now() - ms(10);
    assert_eq!(at(past).try_recv(), Ok(past));
}

#[test]
fn after_in_select_on_a_plain_thread() {
    let (_tx, rx) = unbounded::<i32>();
    let start = Instant::now();
    let timed_out = select! {
        recv(rx) -> _ => false,
        recv(after(ms(50))) -> t => {
            assert!(t.unwrap() >= start + ms(50));
            true
        }
    };
    assert!(timed_out);
    assert_on_time("after in select!", start + ms(50), Instant::now());
}

#[test]
fn a_ready_channel_beats_a_pending_after() {
    let (tx, rx) = unbounded::<i32>();
    let timeout = after(ms(2000));
    let h = std::thread::spawn(move || {
        std::thread::sleep(ms(20));
        tx.send(5).unwrap();
    });
    let got = select! {
        recv(rx) -> v => v.unwrap(),
        recv(timeout) -> _ => panic!("the value came first"),
    };
    assert_eq!(got, 5);
    h.join().unwrap();
    // The timer still fires later for whoever keeps it.
    assert!(timeout.recv().is_ok());
}

#[test]
fn after_in_select_inside_tasks_parks_them_without_a_thread_each() {
    in_child(
        module_path!(),
        "after_in_select_inside_tasks_parks_them_without_a_thread_each",
        || {
            const TASKS: usize = 200;
            let s = sched(2);
            let threads_before = live_threads_named("").len();
            let (ready_tx, ready_rx) = unbounded::<()>();
            let hs: Vec<_> = (0..TASKS)
                .map(|i| {
                    let ready_tx = ready_tx.clone();
                    s.spawn(move || {
                        let (_tx, rx) = unbounded::<i32>();
                        let d = ms(300 + (i as u64 % 7) * 10);
                        let start = Instant::now();
                        let timeout = after(d);
                        ready_tx.send(()).unwrap();
                        let fired = select! {
                            recv(rx) -> _ => false,
                            recv(timeout) -> _ => true,
                        };
                        assert!(fired);
                        (start + d, Instant::now())
                    })
                })
                .collect();
            // Every task is waiting now (or about to): count the threads
            // while they wait.
            for _ in 0..TASKS {
                ready_rx.recv().unwrap();
            }
            let threads_waiting = live_threads_named("").len();
            for h in hs {
                let (due, t) = h.join().unwrap();
                assert_on_time("after in a task's select!", due, t);
            }
            println!(
                "figure: {TASKS} tasks waiting on after(): {threads_before} threads before, {threads_waiting} while waiting"
            );
            assert!(
                threads_waiting <= threads_before + 4,
                "no thread per timer: {threads_before} before, {threads_waiting} while {TASKS} timers wait"
            );
            s.shutdown();
        },
    );
}

#[test]
fn tick_delivers_a_message_per_period() {
    in_child(module_path!(), "tick_delivers_a_message_per_period", || {
        let start = Instant::now();
        let rx = tick(ms(30));
        let mut last = start;
        for k in 1..=5u64 {
            let msg = rx.recv().unwrap();
            let now = Instant::now();
            // Each message comes at or after its period boundary.
            assert!(msg >= start + ms(30 * k), "tick {k} due {msg:?}");
            assert!(msg >= last, "ticks in order");
            assert!(now >= msg && now - msg <= LATE, "tick {k} late");
            last = msg;
        }
        assert!(!rx.is_disconnected());
    });
}

#[test]
fn tick_does_not_accumulate_when_nobody_reads() {
    let start = Instant::now();
    let rx = tick(ms(20));
    // Ten periods pass unread: still at most one message ready.
    std::thread::sleep(ms(200));
    assert_eq!(rx.len(), 1);
    let first = rx.try_recv().expect("one tick is ready");
    assert!(first >= start + ms(20) && first <= start + ms(40) + LATE);
    assert_eq!(
        rx.try_recv(),
        Err(TryRecvError::Empty),
        "missed ticks are not stored"
    );
    assert_eq!(rx.len(), 0);
    // The next one comes a period after the late receive.
    let taken = Instant::now();
    let next = rx.recv().unwrap();
    assert!(next >= taken, "the next tick is not one of the missed ones");
    assert!(Instant::now() - taken <= ms(20) + LATE);
}

#[test]
fn tick_in_select_inside_a_task_alongside_a_channel() {
    in_child(
        module_path!(),
        "tick_in_select_inside_a_task_alongside_a_channel",
        || {
            let s = sched(2);
            let (tx, rx) = unbounded::<u32>();
            let h = s.spawn(move || {
                let ticker = tick(ms(10));
                let mut ticks = 0u32;
                let mut values = 0u32;
                let start = Instant::now();
                while ticks < 10 || values < 3 {
                    select! {
                        recv(ticker) -> t => {
                            assert!(t.is_ok());
                            ticks += 1;
                        }
                        recv(rx) -> v => {
                            v.unwrap();
                            values += 1;
                        }
                    }
                    assert!(
                        start.elapsed() < ms(10) * 10 + LATE * 4,
                        "ticks keep coming"
                    );
                }
                (ticks, start.elapsed())
            });
            for i in 0..3 {
                tx.send(i).unwrap();
            }
            let (ticks, took) = h.join().unwrap();
            assert!(ticks >= 10);
            // Ten ticks of 10 ms cannot come in less than 100 ms.
            assert!(took >= ms(100), "ten ticks took {took:?}");
            s.shutdown();
        },
    );
}

#[test]
fn never_is_never_ready() {
    let rx: Receiver<String> = never();
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(rx.recv_timeout(ms(20)), Err(RecvTimeoutError::Timeout));
    assert!(!rx.is_disconnected());
    assert_eq!(rx.capacity(), Some(0));
    let start = Instant::now();
    let v = select! {
        recv(rx) -> _ => "never",
        default(ms(30)) => "timeout",
    };
    assert_eq!(v, "timeout");
    assert!(start.elapsed() >= ms(30));
    // An optional channel: `never` stands in for the missing one.
    let (tx, real) = unbounded::<i32>();
    tx.send(1).unwrap();
    let maybe: Option<Receiver<i32>> = std::hint::black_box(None);
    let got = select! {
        recv(maybe.unwrap_or_else(never)) -> _ => unreachable!(),
        recv(real) -> v => v.unwrap(),
    };
    assert_eq!(got, 1);
}

#[test]
fn never_and_after_in_select_inside_a_task() {
    in_child(
        module_path!(),
        "never_and_after_in_select_inside_a_task",
        || {
            let s = sched(1);
            let h = s.spawn(|| {
                let start = Instant::now();
                let nothing = never::<u8>();
                let which = select! {
                    recv(nothing) -> _ => 0,
                    recv(after(ms(40))) -> _ => 1,
                };
                (which, start.elapsed())
            });
            let (which, took) = h.join().unwrap();
            assert_eq!(which, 1);
            assert!(took >= ms(40) && took <= ms(40) + LATE, "took {took:?}");
            s.shutdown();
        },
    );
}

#[test]
fn after_in_a_dynamic_select() {
    let (_tx, rx) = unbounded::<i32>();
    let start = Instant::now();
    let timeout = after(ms(40));
    let mut sel = Select::new();
    let data = sel.recv(&rx);
    let t = sel.recv(&timeout);
    let oper = sel.select();
    assert_ne!(oper.index(), data);
    assert_eq!(oper.index(), t);
    let msg = oper.recv(&timeout).unwrap();
    assert!(msg >= start + ms(40));
    assert_on_time("after in Select", start + ms(40), Instant::now());
}

#[test]
fn timers_from_async_code() {
    in_child(module_path!(), "timers_from_async_code", || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let start = Instant::now();
            let msg = after(ms(50)).recv_async().await.unwrap();
            assert!(msg >= start + ms(50));
            assert_on_time("after via recv_async", start + ms(50), Instant::now());
            let ticker = tick(ms(20));
            for k in 1..=3u64 {
                let t = ticker.recv_async().await.unwrap();
                assert!(t >= start + ms(20 * k));
            }
            // `never` stays pending: the other branch wins.
            let nothing = never::<u8>();
            tokio::select! {
                _ = nothing.recv_async() => panic!("never is never ready"),
                _ = tokio::time::sleep(ms(20)) => {}
            }
        });
        // And from gofer's block_on_future, outside and inside a task.
        let start = Instant::now();
        gofer::block_on_future(after(ms(30)).recv_async()).unwrap();
        assert_on_time("after via block_on_future", start + ms(30), Instant::now());
        let s = sched(1);
        let took = s
            .spawn(|| {
                let start = Instant::now();
                gofer::block_on_future(after(ms(30)).recv_async()).unwrap();
                start.elapsed()
            })
            .join()
            .unwrap();
        assert!(took >= ms(30) && took <= ms(30) + LATE, "took {took:?}");
        s.shutdown();
    });
}
