//! The per-Processer metrics of `Scheduler::stats`: counts a scenario makes
//! exact.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{wait_until, PATIENCE};
use gofer::{go, Builder, ProcesserStats, Scheduler};

/// Chaos mode (`GOFER_CHAOS_MIGRATE=1`, a CI step) moves every task that
/// switches out through another Processer's queues: no next-task slot, and
/// every requeue is a remote push.
fn chaos() -> bool {
    std::env::var_os("GOFER_CHAOS_MIGRATE").is_some_and(|v| v != "0")
}

fn one_processer(name: &str) -> Scheduler {
    Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

fn first(s: &Scheduler) -> ProcesserStats {
    let st = s.stats();
    assert_eq!(st.processers.len(), 1, "one Processer: {st:?}");
    st.processers[0].clone()
}

/// Waits until the only Processer has nothing switched in (the task that
/// completed a join has also switched out for good).
fn settle(s: &Scheduler) -> ProcesserStats {
    wait_until("the Processer to go idle", || {
        let p = first(s);
        !p.running && p.queued == 0
    });
    first(s)
}

#[test]
fn yields_on_one_processer_count_exactly() {
    let s = one_processer("metrics-yield");
    let before = settle(&s);
    const N: u64 = 1000;
    s.spawn(|| {
        for _ in 0..N {
            gofer::yield_now();
        }
    })
    .join()
    .expect("the task returned");
    let after = settle(&s);
    assert_eq!(after.yields - before.yields, N);
    assert_eq!(after.parks - before.parks, 0);
    // The first run, then one switch in after each yield.
    assert_eq!(after.switches - before.switches, N + 1);
    // Spawned from this plain thread: one push into its new queue (in
    // chaos mode, one more per yield).
    let chaos_pushes = if chaos() { N } else { 0 };
    assert_eq!(after.remote_pushes - before.remote_pushes, 1 + chaos_pushes);
    assert_eq!(after.local_queue_depth, 0);
    assert_eq!(after.remote_queue_depth, 0);
    s.shutdown();
}

#[test]
fn parks_on_one_processer_count_exactly() {
    let s = one_processer("metrics-park");
    let before = settle(&s);
    const M: u64 = 20;
    s.spawn(|| {
        for _ in 0..M {
            gofer::sleep(Duration::from_millis(1));
        }
    })
    .join()
    .expect("the task returned");
    let after = settle(&s);
    assert_eq!(after.parks - before.parks, M);
    assert_eq!(after.yields - before.yields, 0);
    assert_eq!(after.switches - before.switches, M + 1);
    s.shutdown();
}

#[test]
fn remote_pushes_from_a_plain_thread_are_counted() {
    let s = one_processer("metrics-remote");
    let before = settle(&s);
    const K: u64 = 50;
    let hs: Vec<_> = (0..K).map(|i| s.spawn(move || i)).collect();
    for h in hs {
        h.join().expect("the task returned");
    }
    let after = settle(&s);
    assert_eq!(after.remote_pushes - before.remote_pushes, K);
    s.shutdown();
}

#[test]
fn a_child_that_wakes_its_parent_runs_it_from_the_next_task_slot() {
    if chaos() {
        return; // the wake-ups go through other Processers' queues
    }
    let s = one_processer("metrics-next");
    let before = settle(&s);
    s.spawn(|| {
        // The child runs from the slot (spawned by the running task), and
        // wakes the parent parked on its join into the slot.
        go!(|| 1).join().expect("the child returned")
    })
    .join()
    .expect("the task returned");
    let after = settle(&s);
    assert!(
        after.next_slot_runs - before.next_slot_runs >= 1,
        "{before:?} -> {after:?}"
    );
    s.shutdown();
}

#[test]
fn tasks_stolen_by_an_idle_processer_show_in_its_steals() {
    if chaos() {
        return; // the children are pushed to the other Processer, not stolen
    }
    let s = Scheduler::builder()
        .min_threads(2)
        .max_threads(2)
        .name("metrics-steal")
        .build()
        .expect("valid scheduler config");
    const N: usize = 64;
    Builder::new()
        .scheduler(&s)
        .pin(0)
        .spawn(|| {
            let ran_elsewhere = Arc::new(AtomicBool::new(false));
            let me = std::thread::current().id();
            // Spawned from inside: all go to Processer 0's runnable queue.
            let kids: Vec<_> = (0..N)
                .map(|_| {
                    let ran_elsewhere = ran_elsewhere.clone();
                    go!(move || {
                        if std::thread::current().id() != me {
                            ran_elsewhere.store(true, Ordering::Release);
                        }
                    })
                })
                .collect();
            // Hold Processer 0: only a thief can run the children.
            let start = Instant::now();
            while !ran_elsewhere.load(Ordering::Acquire) {
                assert!(start.elapsed() < PATIENCE, "nothing was stolen");
                std::hint::spin_loop();
            }
            for k in kids {
                k.join().expect("child returned");
            }
        })
        .expect("pin(0) is valid")
        .join()
        .expect("the spawner returned");
    let st = s.stats();
    let thief = st
        .processers
        .iter()
        .find(|p| p.id == 1)
        .expect("Processer 1");
    assert!(thief.steals >= 1, "{st:?}");
    assert!(thief.stolen_tasks >= thief.steals, "{st:?}");
    s.shutdown();
}

#[test]
fn busy_time_grows_while_a_task_spins_and_not_while_all_sleep() {
    let s = one_processer("metrics-busy");
    let before = settle(&s);
    let spin = Duration::from_millis(100);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let h = {
        let stop = stop.clone();
        let started = started.clone();
        s.spawn(move || {
            started.store(true, Ordering::Release);
            let start = Instant::now();
            while !stop.load(Ordering::Acquire) || start.elapsed() < spin {
                std::hint::spin_loop();
            }
        })
    };
    // Read while the task still runs: the batch in progress counts.
    wait_until("the task to start", || started.load(Ordering::Acquire));
    std::thread::sleep(spin);
    let during = first(&s);
    stop.store(true, Ordering::Release);
    h.join().expect("the task returned");
    assert!(
        during.busy - before.busy >= spin / 2,
        "busy {:?} while a task spun for {spin:?}",
        during.busy - before.busy
    );
    let spun = settle(&s);
    assert!(spun.busy - before.busy >= spin);

    // All asleep: the Processer sleeps too.
    let nap = Duration::from_millis(200);
    s.spawn(move || gofer::sleep(nap))
        .join()
        .expect("the task returned");
    let after = settle(&s);
    assert!(
        after.busy - spun.busy < nap / 2,
        "busy {:?} while the only task slept {nap:?}",
        after.busy - spun.busy
    );
    s.shutdown();
}
