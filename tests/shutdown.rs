//! Shutdown: a timeout too long to be a deadline, and concurrent calls.
//!
//! Each case runs in a child process with a watchdog, since the failures
//! it guards against are a panic or a wait that never ends.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::Duration;

use common::{
    child_scenario, describe, live_threads_named, run_child_watched, wait_until, PATIENCE,
};
use gofer::{Builder, Scheduler, SpawnError};

/// The watchdog's limit for one child: generous, the machine is shared.
const CHILD_LIMIT: Duration = Duration::from_secs(120);

fn sched(name: &str, threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

/// Runs `test` as a child in `scenario` and asserts that it printed
/// `CHILD-OK` and exited successfully before the watchdog fired.
fn expect_child_ok(test: &str, scenario: &str) {
    let out = run_child_watched(test, scenario, &[], CHILD_LIMIT)
        .unwrap_or_else(|| panic!("child {test}/{scenario} hung (killed after {CHILD_LIMIT:?})"));
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("CHILD-OK"),
        "{}",
        describe(&out)
    );
}

/// Whether spawning from outside is refused: shutdown has begun.
fn closing(s: &Scheduler) -> bool {
    matches!(
        Builder::new().scheduler(s).spawn(|| ()),
        Err(SpawnError::Shutdown)
    )
}

// ---------------------------------------------------------------- Duration::MAX

const MAX_TEST: &str = "shutdown_timeout_with_duration_max_means_no_deadline";

#[test]
fn shutdown_timeout_with_duration_max_means_no_deadline() {
    if child_scenario().as_deref() != Some("max") {
        return expect_child_ok(MAX_TEST, "max");
    }
    let s = sched("tomax", 2);
    let (tx, rx) = mpsc::channel();
    let release = Arc::new(AtomicBool::new(false));
    let r = release.clone();
    s.spawn(move || {
        tx.send(gofer::current()).expect("receiver alive");
        while !r.load(Ordering::Acquire) {
            gofer::park();
        }
    });
    let parked = rx.recv_timeout(PATIENCE).expect("the task started");
    let s2 = s.clone();
    let shutter = std::thread::spawn(move || s2.shutdown_timeout(Duration::MAX));
    // The call has begun (it refuses spawns from outside) and waits: with
    // no deadline it neither panics nor gives up while the task is parked.
    wait_until("shutdown has begun", || {
        closing(&s) || shutter.is_finished()
    });
    assert!(
        !shutter.is_finished(),
        "shutdown_timeout(MAX) returned early"
    );
    release.store(true, Ordering::Release);
    parked.unpark();
    assert_eq!(shutter.join().expect("shutdown_timeout panicked"), Ok(()));
    assert_eq!(s.stats().threads, 0);
    assert_eq!(live_threads_named("tomax-"), Vec::<String>::new());
    // Again on a stopped scheduler, and with other unrepresentable spans.
    assert_eq!(s.shutdown_timeout(Duration::MAX), Ok(()));
    assert_eq!(s.shutdown_timeout(Duration::from_secs(u64::MAX)), Ok(()));
    println!("CHILD-OK");
}

// ---------------------------------------------------------------- concurrent calls

const CONCURRENT_TEST: &str = "concurrent_shutdowns_both_return_after_every_thread_is_joined";

/// Rounds of two racing shutdown calls: enough to catch a late caller that
/// returns while the first is still joining.
const ROUNDS: usize = 40;

#[test]
fn concurrent_shutdowns_both_return_after_every_thread_is_joined() {
    if child_scenario().as_deref() != Some("concurrent") {
        return expect_child_ok(CONCURRENT_TEST, "concurrent");
    }
    for round in 0..ROUNDS {
        let s = sched("cshut", 4);
        // Work in flight, so that the threads are busy when the calls start.
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                s.spawn(|| {
                    for _ in 0..50 {
                        gofer::yield_now();
                    }
                })
            })
            .collect();
        let start = Arc::new(Barrier::new(2));
        let callers: Vec<_> = (0..2)
            .map(|k| {
                let (s, start) = (s.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    // Every other round, one of the two is a shutdown_timeout.
                    if k == 1 && round % 2 == 1 {
                        assert_eq!(s.shutdown_timeout(PATIENCE), Ok(()));
                    } else {
                        s.shutdown();
                    }
                    (live_threads_named("cshut-"), s.stats().threads)
                })
            })
            .collect();
        for (k, c) in callers.into_iter().enumerate() {
            let (left, threads) = c.join().expect("a shutdown call panicked");
            assert!(
                left.is_empty() && threads == 0,
                "round {round}, call {k}: returned while threads of the scheduler still ran: \
                 {left:?} ({threads} counted)"
            );
        }
        for t in tasks {
            t.join().expect("task returned");
        }
    }
    println!("CHILD-OK");
}
