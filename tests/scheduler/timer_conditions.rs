//! Condition timers: `after_if_alive` and `every_if_alive` hold only a
//! `Weak` of their target, run only while it lives, never keep it alive,
//! stop by themselves once it is gone, and cancel like other timers.
//!
//! "Did not run" is observed without sleeping: a later plain timer on the
//! same one-thread scheduler is the sentinel. The timer thread handles due
//! timers in deadline order and a one-thread scheduler runs the tasks
//! pushed to it in order, so once the sentinel's task ran, a run of the
//! condition timer would have run before it.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{wait_until, PATIENCE};
use gofer::timer::{after_if_alive_on, after_on, every_if_alive_on};
use gofer::Scheduler;

fn sched(name: &str) -> Scheduler {
    Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

/// A target that counts its drops.
struct Conn {
    id: u32,
    dropped: Arc<AtomicUsize>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

fn conn(id: u32) -> (Arc<Conn>, Arc<AtomicUsize>) {
    let dropped = Arc::new(AtomicUsize::new(0));
    (
        Arc::new(Conn {
            id,
            dropped: dropped.clone(),
        }),
        dropped,
    )
}

/// Waits for the sentinel timer `after` later on `s` to run.
fn sentinel(s: &Scheduler, after: Duration) {
    let (tx, rx) = mpsc::channel();
    after_on(s, after, move || tx.send(()).expect("the test waits"));
    rx.recv_timeout(PATIENCE).expect("the sentinel fired");
}

#[test]
fn after_if_alive_runs_with_its_target_while_it_lives() {
    let s = sched("tc-alive");
    let (c, dropped) = conn(7);
    let (tx, rx) = mpsc::channel();
    let t0 = Instant::now();
    let h = after_if_alive_on(&s, &c, Duration::from_millis(20), move |c| {
        tx.send((c.id, gofer::is_coroutine()))
            .expect("the test waits")
    });
    assert_eq!(
        Arc::strong_count(&c),
        1,
        "the timer holds no strong reference"
    );
    assert!(h.is_pending());
    assert_eq!(rx.recv_timeout(PATIENCE).expect("it fired"), (7, true));
    assert!(t0.elapsed() >= Duration::from_millis(20), "fired early");
    assert!(!h.is_pending());
    assert!(!h.cancel(), "already fired");
    drop(c);
    // The run held the target until its closure returned.
    wait_until("the run released the target", || {
        dropped.load(Ordering::SeqCst) == 1
    });
    s.shutdown();
}

#[test]
fn after_if_alive_does_nothing_once_its_target_is_gone() {
    let s = sched("tc-gone");
    let (c, dropped) = conn(1);
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let h = after_if_alive_on(&s, &c, Duration::from_millis(10), move |_| {
        r.fetch_add(1, Ordering::SeqCst);
    });
    drop(c);
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "the pending timer did not keep it alive"
    );
    sentinel(&s, Duration::from_millis(40));
    assert_eq!(ran.load(Ordering::SeqCst), 0, "no run without the target");
    assert!(!h.is_pending());
    s.shutdown();
}

#[test]
fn every_if_alive_ticks_while_its_target_lives_and_then_stops_by_itself() {
    let s = sched("tc-every");
    let (c, dropped) = conn(3);
    let ticks = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel();
    let t = ticks.clone();
    let h = every_if_alive_on(&s, &c, Duration::from_millis(5), move |c| {
        assert_eq!(c.id, 3);
        t.fetch_add(1, Ordering::SeqCst);
        let _ = tx.send(());
    });
    for _ in 0..3 {
        rx.recv_timeout(PATIENCE).expect("a tick");
    }
    assert!(h.is_pending());
    assert_eq!(s.stats().timers, 1, "one pending timer");
    drop(c);
    // A tick in flight may still hold the target; the first tick after the
    // last Arc went away ends the timer.
    wait_until("the target is dropped", || {
        dropped.load(Ordering::SeqCst) == 1
    });
    wait_until("the timer ended itself", || !h.is_pending());
    assert_eq!(s.stats().timers, 0, "its heap entry is gone");
    wait_until("its hold on the scheduler is released", || {
        s.stats().alive == 0
    });
    let after_stop = ticks.load(Ordering::SeqCst);
    sentinel(&s, Duration::from_millis(30));
    assert_eq!(ticks.load(Ordering::SeqCst), after_stop, "no tick after");
    assert!(!h.cancel(), "already over");
    s.shutdown();
}

#[test]
fn condition_timers_cancel_like_other_timers() {
    let s = sched("tc-cancel");
    let (c, dropped) = conn(5);
    let ran = Arc::new(AtomicUsize::new(0));
    let (r1, r2) = (ran.clone(), ran.clone());
    let once = after_if_alive_on(&s, &c, Duration::from_millis(10), move |_| {
        r1.fetch_add(1, Ordering::SeqCst);
    });
    let every = every_if_alive_on(&s, &c, Duration::from_millis(10), move |_| {
        r2.fetch_add(1, Ordering::SeqCst);
    });
    assert!(once.cancel());
    assert!(every.cancel());
    assert!(!once.is_pending() && !every.is_pending());
    assert!(!once.cancel() && !every.cancel(), "cancelled once");
    sentinel(&s, Duration::from_millis(40));
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(Arc::strong_count(&c), 1);
    drop(c);
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
    // (The sentinel's own task may still be finishing.)
    wait_until("no hold is left on the scheduler", || s.stats().alive == 0);
    s.shutdown();
}

#[test]
fn shutdown_cancels_a_pending_condition_timer() {
    let s = sched("tc-shut");
    let (c, _dropped) = conn(9);
    let h = every_if_alive_on(&s, &c, Duration::from_secs(3600), |_| {});
    assert!(h.is_pending());
    s.shutdown(); // would wait an hour for the tick if not cancelled
    assert!(!h.is_pending());
}
