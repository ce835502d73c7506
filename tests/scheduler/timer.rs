//! Timers: one-shot and recurring timers, cancellation, and sleeping tasks
//! that free their thread.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{thread_name, wait_until, PATIENCE};
use gofer::timer::{after_on, every_on};
use gofer::Scheduler;

fn sched(name: &str, threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

#[derive(Debug, PartialEq)]
enum Ev {
    Fired { co: bool, thread: String },
    Later,
}

#[test]
fn after_runs_its_closure_once_as_a_task() {
    let s = sched("tm-once", 1);
    let (tx, rx) = mpsc::channel();
    let t0 = Instant::now();
    let tx2 = tx.clone();
    let h = after_on(&s, Duration::from_millis(30), move || {
        tx2.send(Ev::Fired {
            co: gofer::is_coroutine(),
            thread: thread_name(),
        })
        .expect("receiver alive");
    });
    // A later event on the same timer service.
    let tx3 = tx.clone();
    after_on(&s, Duration::from_millis(150), move || {
        tx3.send(Ev::Later).expect("receiver alive");
    });
    drop(tx);
    let first = rx.recv_timeout(PATIENCE).expect("the timer fired");
    assert!(t0.elapsed() >= Duration::from_millis(30), "fired early");
    assert_eq!(
        first,
        Ev::Fired {
            co: true,
            thread: "tm-once-0".into()
        }
    );
    assert_eq!(
        rx.recv_timeout(PATIENCE).expect("the later timer fired"),
        Ev::Later
    );
    assert!(
        !h.is_pending(),
        "a fired one-shot timer is no longer pending"
    );
    assert!(!h.cancel(), "cancel after firing reports false");
    s.shutdown();
    // Nothing else arrived: it ran exactly once.
    assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Disconnected));
}

#[test]
fn after_inside_a_task_uses_the_tasks_scheduler() {
    let s = sched("tm-cur", 1);
    let (tx, rx) = mpsc::channel();
    s.spawn(move || {
        gofer::timer::after(Duration::from_millis(10), move || {
            tx.send(thread_name()).expect("receiver alive");
        });
    })
    .join()
    .expect("returned");
    assert_eq!(rx.recv_timeout(PATIENCE).expect("fired"), "tm-cur-0");
    s.shutdown();
}

#[test]
fn cancel_before_firing_returns_true_and_the_closure_never_runs() {
    let s = sched("tm-cancel", 1);
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let h = after_on(&s, Duration::from_secs(1), move || {
        r.store(true, Ordering::SeqCst);
    });
    assert!(h.is_pending());
    assert!(h.cancel(), "cancelled well before its deadline");
    assert!(!h.is_pending());
    assert!(!h.cancel(), "a second cancel reports false");
    // A later event: by then the cancelled deadline has long passed.
    let (tx, rx) = mpsc::channel();
    after_on(&s, Duration::from_millis(1100), move || {
        tx.send(()).expect("receiver alive");
    });
    rx.recv_timeout(PATIENCE).expect("the later timer fired");
    // Shutdown waits for any task a timer spawned.
    s.shutdown();
    assert!(!ran.load(Ordering::SeqCst), "a cancelled timer ran");
    assert_eq!(s.stats().spawned, 1, "only the later timer spawned a task");
}

#[test]
fn every_runs_repeatedly_and_stops_after_cancel() {
    let s = sched("tm-every", 1);
    let count = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    let c = count.clone();
    let period = Duration::from_millis(10);
    let t0 = Instant::now();
    let h = every_on(&s, period, move || {
        let n = c.fetch_add(1, Ordering::SeqCst) + 1;
        let _ = tx.send((n, gofer::is_coroutine()));
    });
    for want in 1..=5 {
        let (n, co) = rx.recv_timeout(PATIENCE).expect("a tick");
        assert_eq!(n, want);
        assert!(co, "each run is a task");
    }
    // Five runs, the first one period after the start.
    assert!(t0.elapsed() >= 5 * period, "ran faster than its period");
    assert!(
        h.is_pending(),
        "a recurring timer stays pending until cancelled"
    );
    assert!(h.cancel());
    assert!(!h.is_pending());
    let spawned_at_cancel = s.stats().spawned;
    // A later event, several periods on.
    let (ltx, lrx) = mpsc::channel();
    after_on(&s, 20 * period, move || {
        ltx.send(()).expect("receiver alive");
    });
    lrx.recv_timeout(PATIENCE).expect("the later timer fired");
    s.shutdown(); // every spawned run has finished
    let runs = count.load(Ordering::SeqCst);
    let spawned = s.stats().spawned;
    assert_eq!(
        runs + 1,
        spawned,
        "every spawned run ran (plus the later timer)"
    );
    // The timer thread may have been between its pending check and its
    // spawn when cancel() ran: one more run at most.
    assert!(
        spawned - 1 <= spawned_at_cancel + 1,
        "{} runs started after cancel",
        spawned - 1 - spawned_at_cancel
    );
}

#[test]
#[should_panic(expected = "period must be non-zero")]
fn every_with_a_zero_period_panics() {
    let s = sched("tm-zero", 1);
    let _ = every_on(&s, Duration::ZERO, || ());
}

#[test]
fn dropping_a_timer_handle_does_not_cancel_it() {
    let s = sched("tm-drop", 1);
    let (tx, rx) = mpsc::channel();
    drop(after_on(&s, Duration::from_millis(10), move || {
        tx.send(()).expect("receiver alive");
    }));
    rx.recv_timeout(PATIENCE)
        .expect("fired despite the dropped handle");
    s.shutdown();
}

#[test]
fn sleep_parks_the_task_not_the_thread() {
    // 100 tasks sleeping 100 ms each on one thread: together, not in turn.
    let s = sched("tm-sleep", 1);
    let d = Duration::from_millis(100);
    let t0 = Instant::now();
    let handles: Vec<_> = (0..100)
        .map(|_| {
            s.spawn(move || {
                let t = Instant::now();
                gofer::sleep(d);
                t.elapsed()
            })
        })
        .collect();
    for h in handles {
        let slept = h.join().expect("returned");
        assert!(slept >= d, "a task slept only {slept:?}");
    }
    let total = t0.elapsed();
    assert!(
        total < Duration::from_secs(3),
        "100 sleeps of {d:?} on one thread took {total:?}: the thread was blocked"
    );
    assert_eq!(s.stats().threads, 1);
    s.shutdown();
}

#[test]
fn sleep_until_a_past_deadline_returns_at_once() {
    let s = sched("tm-past", 1);
    let v = s
        .spawn(|| {
            gofer::sleep_until(Instant::now() - Duration::from_millis(1));
            gofer::sleep(Duration::ZERO);
            1
        })
        .join()
        .expect("returned");
    assert_eq!(v, 1);
    s.shutdown();
}

#[test]
fn sleep_outside_tasks_sleeps_the_thread() {
    let d = Duration::from_millis(50);
    let t0 = Instant::now();
    gofer::sleep(d);
    assert!(t0.elapsed() >= d);
}

#[test]
fn a_sleeping_task_keeps_shutdown_waiting_until_it_wakes() {
    let s = sched("tm-shut", 1);
    let woke = Arc::new(AtomicBool::new(false));
    let w = woke.clone();
    let (tx, rx) = mpsc::channel();
    s.spawn(move || {
        tx.send(()).expect("receiver alive");
        gofer::sleep(Duration::from_millis(200));
        w.store(true, Ordering::SeqCst);
    });
    rx.recv_timeout(PATIENCE).expect("started");
    s.shutdown();
    assert!(
        woke.load(Ordering::SeqCst),
        "shutdown returned before the sleeper woke"
    );
    wait_until("the timer thread exits", || {
        std::fs::read_dir("/proc/self/task")
            .map(|d| {
                !d.flatten().any(|e| {
                    std::fs::read_to_string(e.path().join("comm"))
                        .is_ok_and(|c| c.trim_end() == "tm-shut-timer")
                })
            })
            .unwrap_or(true)
    });
}
