//! Saying what a blocked thread is blocked in: when a task blocks its
//! Processer's thread with started tasks behind it, the task dump and the
//! stall report show the call (a backtrace taken from that thread), the
//! tasks behind it and the fix; when every Processer is blocked at
//! `max_threads` with tasks queued that no thread is free to start,
//! `stats()` and the dump say so; and once the block ends, nothing of it
//! is shown any more.
//!
//! Each scenario blocks threads on purpose, so it runs in a child process
//! under a watchdog; every blocking call is released by the child's main
//! thread (or the parent, through the child's stdin), so each ends.

use crate::common;

use std::io::Write;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::wait_until;
use gofer::Scheduler;

/// How long the dump may take to show the blocked call once the thread is
/// marked blocked. The runtime promises well under a second; this is
/// generous for a loaded 2-core machine (symbolizing the first time reads
/// the debug info).
const SHOW_WITHIN: Duration = Duration::from_secs(10);

/// One core thread, named `<name>-0`, and room for one extra: the
/// Dispatcher runs only with `max_threads` of 2 or more.
fn scheduler(name: &str, stall_report: Option<Duration>) -> Scheduler {
    let mut b = Scheduler::builder()
        .name(name)
        .min_threads(1)
        .max_threads(2);
    if let Some(d) = stall_report {
        b = b.stall_report(d);
    }
    b.build().expect("a scheduler")
}

/// A connection pool reduced to its wait: a count of free connections
/// under a `parking_lot` mutex, and a `parking_lot` condvar to wait for
/// one (what `r2d2::Pool::get` does).
type Pool = (parking_lot::Mutex<usize>, parking_lot::Condvar);

/// Takes a connection from `pool`, waiting in `Condvar::wait` (blocking
/// the thread) while none is free.
#[inline(never)]
fn pool_get_like(pool: &Pool) -> usize {
    let mut free = pool.0.lock();
    while *free == 0 {
        pool.1.wait(&mut free);
    }
    *free -= 1;
    std::hint::black_box(*free)
}

/// Waits for a job on a std channel, blocking the thread.
#[inline(never)]
fn wait_for_job(rx: &mpsc::Receiver<u32>) -> u32 {
    std::hint::black_box(rx.recv().unwrap_or(0))
}

/// Starts task 'sleeper' on the only core thread, parked in
/// `gofer::sleep(10 ms)`, then `blocker` on that thread: once it blocks
/// it, 'sleeper', bound there, is runnable behind it.
fn with_sleeper_behind(
    s: &Scheduler,
    blocker: impl FnOnce() + Send + 'static,
) -> (gofer::JoinHandle<()>, gofer::JoinHandle<()>) {
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let b = gofer::Builder::new()
        .name("sleeper")
        .scheduler(s)
        .spawn(move || {
            started_tx.send(()).unwrap();
            gofer::sleep(Duration::from_millis(10));
        })
        .unwrap();
    started_rx.recv().unwrap();
    let a = gofer::Builder::new()
        .name("blocker")
        .scheduler(s)
        .spawn(blocker)
        .unwrap();
    (a, b)
}

/// Waits until the dump shows a blocked thread with the call it is
/// blocked in (a line containing `needle`); returns its text and how long
/// that took from the first blocked mark with a task behind it.
fn dump_showing(s: &Scheduler, needle: &str) -> (String, Duration) {
    wait_until("the thread is marked blocked with a task behind it", || {
        s.stats().tasks_behind_blocked >= 1
    });
    let marked = Instant::now();
    loop {
        let text = s.dump().to_string();
        if text.contains(needle) {
            return (text, marked.elapsed());
        }
        assert!(
            marked.elapsed() < SHOW_WITHIN,
            "the dump did not show {needle:?} within {SHOW_WITHIN:?}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_dump_names_the_condvar_wait_a_thread_is_blocked_in_and_the_fix() {
    common::in_child(
        module_path!(),
        "the_dump_names_the_condvar_wait_a_thread_is_blocked_in_and_the_fix",
        || {
            let s = scheduler("pool", None);
            let pool: std::sync::Arc<Pool> = Default::default();
            let p2 = pool.clone();
            let (a, b) = with_sleeper_behind(&s, move || {
                pool_get_like(&p2);
            });
            let (text, took) = dump_showing(&s, "pool_get_like");
            println!("figure: condvar wait shown {took:.1?} after the block was marked");
            let at = text.find("blocked in:").unwrap_or_else(|| panic!("{text}"));
            let section = &text[at..];
            let wait = section
                .find("Condvar::wait")
                .unwrap_or_else(|| panic!("{text}"));
            let user = section
                .find("pool_get_like")
                .unwrap_or_else(|| panic!("{text}"));
            // Innermost first: the wait, then the user's function.
            assert!(wait < user, "{text}");
            assert!(section[..wait].contains("parking_lot"), "{text}");
            // Not the signal handler's own frames.
            assert!(!section.contains("backtrace::"), "{text}");
            assert!(!section.contains("gofer::runtime::dump"), "{text}");
            assert!(text.contains("gofer::sync::Condvar"), "{text}");
            assert!(text.contains("gofer::unblock"), "{text}");
            assert!(
                text.contains("1 task can run only there and waits"),
                "{text}"
            );
            // The block ends: the dump no longer shows it.
            *pool.0.lock() = 1;
            pool.1.notify_all();
            a.join().unwrap();
            b.join().unwrap();
            wait_until("the thread is no longer blocked", || s.stats().blocked == 0);
            let text = s.dump().to_string();
            assert!(!text.contains("blocked in:"), "{text}");
            assert!(!text.contains("pool_get_like"), "{text}");
            s.shutdown();
        },
    );
}

#[test]
fn the_dump_names_the_std_channel_receive_a_thread_is_blocked_in() {
    common::in_child(
        module_path!(),
        "the_dump_names_the_std_channel_receive_a_thread_is_blocked_in",
        || {
            let s = scheduler("recv", None);
            let (tx, rx) = mpsc::channel::<u32>();
            let (a, b) = with_sleeper_behind(&s, move || {
                wait_for_job(&rx);
            });
            let (text, took) = dump_showing(&s, "wait_for_job");
            println!("figure: channel receive shown {took:.1?} after the block was marked");
            let at = text.find("blocked in:").unwrap_or_else(|| panic!("{text}"));
            let section = &text[at..];
            let recv = section.find("recv").unwrap_or_else(|| panic!("{text}"));
            let user = section
                .find("wait_for_job")
                .unwrap_or_else(|| panic!("{text}"));
            assert!(recv < user, "{text}");
            assert!(section[..user].contains("mpsc"), "{text}");
            assert!(text.contains("gofer::chan"), "{text}");
            tx.send(1).unwrap();
            a.join().unwrap();
            b.join().unwrap();
            wait_until("the thread is no longer blocked", || s.stats().blocked == 0);
            let text = s.dump().to_string();
            assert!(!text.contains("blocked in:"), "{text}");
            s.shutdown();
        },
    );
}

#[test]
fn every_thread_blocked_at_max_threads_with_tasks_queued_is_said() {
    common::in_child(
        module_path!(),
        "every_thread_blocked_at_max_threads_with_tasks_queued_is_said",
        || {
            const CONSUMERS: usize = 100;
            let s = Scheduler::builder()
                .name("fan")
                .min_threads(2)
                .max_threads(2)
                .build()
                .unwrap();
            // A plain thread feeds every consumer through a std channel,
            // once told to.
            let (go_tx, go_rx) = mpsc::channel::<()>();
            let mut senders = Vec::new();
            let mut handles = Vec::new();
            for _ in 0..CONSUMERS {
                let (tx, rx) = mpsc::channel::<u32>();
                senders.push(tx);
                handles.push(s.spawn(move || {
                    wait_for_job(&rx);
                }));
            }
            let feeder = std::thread::spawn(move || {
                go_rx.recv().unwrap();
                for tx in &senders {
                    tx.send(1).unwrap();
                }
            });
            wait_until("stats say every thread is blocked", || {
                s.stats().all_blocked
            });
            let st = s.stats();
            // Two consumers hold the two threads; the rest never started.
            assert!(st.tasks_queued_all_blocked >= CONSUMERS - 2 - 1, "{st:?}");
            assert!(st.tasks_queued_all_blocked <= CONSUMERS, "{st:?}");
            let (text, _) =
                dump_or_fail(&s, "every Processer thread of scheduler 'fan' is blocked");
            assert!(text.contains("(2 of max_threads 2)"), "{text}");
            assert!(text.contains("wait_for_job"), "{text}");
            go_tx.send(()).unwrap();
            feeder.join().unwrap();
            for h in handles {
                h.join().unwrap();
            }
            wait_until("the stats no longer say every thread is blocked", || {
                !s.stats().all_blocked
            });
            assert_eq!(s.stats().tasks_queued_all_blocked, 0);
            let text = s.dump().to_string();
            assert!(!text.contains("is blocked"), "{text}");
            assert!(!text.contains("blocked in:"), "{text}");
            s.shutdown();
        },
    );
}

/// Waits until the dump contains `needle` and the call a blocked thread is
/// blocked in.
fn dump_or_fail(s: &Scheduler, needle: &str) -> (String, Duration) {
    let start = Instant::now();
    loop {
        let text = s.dump().to_string();
        if text.contains(needle) && text.contains("blocked in:") {
            return (text, start.elapsed());
        }
        assert!(
            start.elapsed() < SHOW_WITHIN,
            "the dump did not show {needle:?} within {SHOW_WITHIN:?}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_stall_report_names_the_call_a_thread_is_blocked_in() {
    const NAME: &str = "the_stall_report_names_the_call_a_thread_is_blocked_in";
    const REPORT_AFTER: Duration = Duration::from_millis(200);
    if common::child_scenario().as_deref() == Some(NAME) {
        let s = scheduler("rw", Some(REPORT_AFTER));
        let pool: std::sync::Arc<Pool> = Default::default();
        let p2 = pool.clone();
        let (a, b) = with_sleeper_behind(&s, move || {
            pool_get_like(&p2);
        });
        // The parent answers once it has read the report.
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        *pool.0.lock() = 1;
        pool.1.notify_all();
        a.join().unwrap();
        b.join().unwrap();
        s.shutdown();
        println!("CHILD-OK {NAME}");
        std::process::exit(0);
    }
    let mut child = common::spawn_child_piped(module_path!(), NAME);
    let report =
        common::read_stderr_until(&mut child, "[runnable: waiting for blocked thread rw-0", 1);
    child.stdin.take().unwrap().write_all(b"done\n").unwrap();
    let (status, out) = common::wait_child(child);
    assert!(
        status.success() && out.contains(&format!("CHILD-OK {NAME}")),
        "{out}\n{report}"
    );
    let at = report
        .find("stall: thread rw-0 blocked for ")
        .unwrap_or_else(|| panic!("{report}"));
    let report = &report[at..];
    let line = report.lines().next().unwrap();
    assert!(line.contains("1 started task runnable behind it"), "{line}");
    let wait = report
        .find("Condvar::wait")
        .unwrap_or_else(|| panic!("{report}"));
    let user = report
        .find("pool_get_like")
        .unwrap_or_else(|| panic!("{report}"));
    assert!(wait < user, "{report}");
    assert!(report.contains("gofer::sync::Condvar"), "{report}");
}
