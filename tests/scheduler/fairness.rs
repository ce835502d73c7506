//! Fairness on one Processer: a task that yields in a loop lets tasks pushed
//! from other threads in (the new queue is looked at every 61 picks), and
//! lets tasks already queued locally run.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use common::PATIENCE;
use gofer::{go, Scheduler};

fn one_thread(name: &str) -> Scheduler {
    Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

/// Spawns a task that holds the one Processer's thread (blocked in a
/// channel receive) until the returned sender sends, and returns once it
/// runs: whatever is queued meanwhile waits for it.
fn stall(s: &Scheduler) -> (gofer::JoinHandle<()>, mpsc::Sender<()>) {
    let (stalled_tx, stalled_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let staller = s.spawn(move || {
        stalled_tx.send(()).expect("receiver alive");
        release_rx.recv_timeout(PATIENCE).expect("released");
    });
    stalled_rx.recv_timeout(PATIENCE).expect("the staller ran");
    (staller, release_tx)
}

/// The Processer looks at its new queue at least every 61 picks; allow a
/// wide margin for the picks between the push and our reading of the count.
const YIELD_BOUND: u64 = 500;

#[test]
fn yield_loop_lets_a_task_spawned_from_outside_run_within_a_bounded_number_of_yields() {
    let s = one_thread("fair-new");
    let mut worst = 0;
    for round in 0..20 {
        let flag = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let (started_tx, started_rx) = mpsc::channel();
        let (f, c) = (flag.clone(), count.clone());
        let yielder = s.spawn(move || {
            started_tx.send(()).expect("receiver alive");
            while !f.load(Ordering::Acquire) {
                c.fetch_add(1, Ordering::Relaxed);
                gofer::yield_now();
            }
        });
        started_rx
            .recv_timeout(PATIENCE)
            .expect("the yielder started");
        // Spawn from this (outside) thread: the task goes to the new queue
        // of the only Processer, which is busy with the yielder.
        let (ran_tx, ran_rx) = mpsc::channel();
        let (f, c) = (flag.clone(), count.clone());
        s.spawn(move || {
            let at_run = c.load(Ordering::Relaxed);
            f.store(true, Ordering::Release);
            ran_tx.send(at_run).expect("receiver alive");
        });
        // Read after the push: any delay of this thread only makes the
        // difference smaller, never flaky.
        let after_push = count.load(Ordering::Relaxed);
        let at_run = ran_rx
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("round {round}: the outside task was starved"));
        let yields = at_run.saturating_sub(after_push);
        worst = worst.max(yields);
        assert!(
            yields < YIELD_BOUND,
            "round {round}: {yields} yields passed before the outside task ran"
        );
        yielder.join().expect("yielder returned");
    }
    eprintln!("worst yields before an outside task ran: {worst}");
    s.shutdown();
}

#[test]
fn yield_loop_does_not_starve_tasks_queued_locally() {
    let s = one_thread("fair-local");
    let yields = s
        .spawn(|| {
            let ran = Arc::new(AtomicUsize::new(0));
            const KIDS: usize = 100;
            // Spawned from inside: they go to this Processer's runnable queue.
            for _ in 0..KIDS {
                let ran = ran.clone();
                go!(move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                });
            }
            let mut yields = 0;
            while ran.load(Ordering::SeqCst) < KIDS {
                gofer::yield_now();
                yields += 1;
                // Each yield must let at least one queued task run.
                assert!(yields <= KIDS, "{yields} yields and only {ran:?} ran");
            }
            yields
        })
        .join()
        .expect("the yielder returned");
    eprintln!("yields until 100 local tasks ran: {yields}");
    s.shutdown();
}

#[test]
fn two_yielding_tasks_on_one_thread_take_turns() {
    let s = one_thread("fair-turns");
    let log = Arc::new(Mutex::new(Vec::with_capacity(4000)));
    let l = log.clone();
    s.spawn(move || {
        // Both start from the local queue, one after the other.
        let kids: Vec<_> = (0..2u8)
            .map(|me| {
                let l = l.clone();
                go!(move || {
                    for _ in 0..1000 {
                        // The guard is dropped before the switch.
                        l.lock().expect("not poisoned").push(me);
                        gofer::yield_now();
                    }
                })
            })
            .collect();
        for k in kids {
            k.join().expect("returned");
        }
    })
    .join()
    .expect("returned");
    let log = log.lock().expect("not poisoned");
    assert_eq!(log.len(), 2000);
    let longest = log
        .chunk_by(|a, b| a == b)
        .map(<[u8]>::len)
        .max()
        .expect("non-empty");
    assert!(longest <= 2, "one task ran {longest} times in a row");
    s.shutdown();
}

/// Two tasks that wake each other (a channel ping-pong) hand the thread to
/// one another through the next-task slot; a task queued behind them must
/// still run within a few round trips (the slot wins at most 3 picks in a
/// row), not after the ping-pong ends.
#[test]
fn tasks_waking_each_other_do_not_starve_a_queued_task() {
    let s = one_thread("fair-next");
    let trips_before_it_ran = s
        .spawn(|| {
            let (ping_tx, ping_rx) = gofer::chan::unbounded::<u64>();
            let (pong_tx, pong_rx) = gofer::chan::unbounded::<u64>();
            let ponger = go!(move || {
                while let Ok(n) = ping_rx.recv() {
                    if pong_tx.send(n).is_err() {
                        return;
                    }
                }
            });
            // Start the ping-pong before the third task is queued, so that
            // it is queued behind a running exchange.
            ping_tx.send(0).expect("ponger alive");
            pong_rx.recv().expect("ponger alive");
            let ran = Arc::new(AtomicBool::new(false));
            let r = ran.clone();
            let third = go!(move || r.store(true, Ordering::SeqCst));
            let mut trips = 0u64;
            while !ran.load(Ordering::SeqCst) {
                trips += 1;
                assert!(
                    trips <= 1000,
                    "the queued task did not run in 1,000 round trips"
                );
                ping_tx.send(trips).expect("ponger alive");
                assert_eq!(pong_rx.recv().expect("ponger alive"), trips);
            }
            drop(ping_tx);
            ponger.join().expect("ponger returned");
            third.join().expect("third returned");
            trips
        })
        .join()
        .expect("the pinger returned");
    eprintln!("round trips until the queued task ran: {trips_before_it_ran}");
    assert!(
        trips_before_it_ran <= 4,
        "the queued task waited {trips_before_it_ran} round trips"
    );
    s.shutdown();
}

/// Tasks bound to a Processer (every started task is, unless it opted in to
/// migration) and woken from another thread come back through the
/// Processer's remote pinned queue. A batch of them must all run within a
/// bounded number of picks, not one per periodic look: a busy Processer
/// that took one such task every 61 picks kept the last of 100 waiting for
/// thousands of picks (at 1,000 server connections, tens of milliseconds).
#[test]
fn a_batch_of_bound_tasks_woken_from_outside_runs_within_a_bounded_number_of_yields() {
    const WOKEN: usize = 100;
    let s = one_thread("fair-bound");
    let go_on = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));

    // 1. WOKEN tasks start, hand out their handles and park: bound here.
    let (handle_tx, handle_rx) = mpsc::channel();
    let (ran_tx, ran_rx) = mpsc::channel();
    let sleepers: Vec<_> = (0..WOKEN)
        .map(|_| {
            let (handle_tx, ran_tx) = (handle_tx.clone(), ran_tx.clone());
            let (go_on, count) = (go_on.clone(), count.clone());
            s.spawn(move || {
                handle_tx.send(gofer::current()).expect("receiver alive");
                while !go_on.load(Ordering::Acquire) {
                    gofer::park();
                }
                ran_tx
                    .send(count.load(Ordering::Relaxed))
                    .expect("receiver alive");
            })
        })
        .collect();
    let handles: Vec<gofer::Task> = (0..WOKEN)
        .map(|_| handle_rx.recv_timeout(PATIENCE).expect("a task started"))
        .collect();

    // 2. A yielder keeps the only Processer busy with local work. It runs
    //    after every sleeper has parked (one thread, first in first out).
    let (started_tx, started_rx) = mpsc::channel();
    let (c, st) = (count.clone(), stop.clone());
    let yielder = s.spawn(move || {
        started_tx.send(()).expect("receiver alive");
        while !st.load(Ordering::Acquire) {
            c.fetch_add(1, Ordering::Relaxed);
            gofer::yield_now();
        }
    });
    started_rx
        .recv_timeout(PATIENCE)
        .expect("the yielder started");

    // 3. A task holds the Processer's thread while this thread wakes every
    //    sleeper, so that all of them wait in the remote queue at once.
    let (staller, release_tx) = stall(&s);
    go_on.store(true, Ordering::Release);
    for h in &handles {
        h.unpark();
    }
    let before = count.load(Ordering::Relaxed);
    release_tx.send(()).expect("the staller waits");

    let mut worst = 0;
    for _ in 0..WOKEN {
        let at_run = ran_rx
            .recv_timeout(PATIENCE)
            .expect("a woken task was starved");
        worst = worst.max(at_run.saturating_sub(before));
    }
    stop.store(true, Ordering::Release);
    staller.join().expect("staller returned");
    yielder.join().expect("yielder returned");
    for t in sleepers {
        t.join().expect("sleeper returned");
    }
    eprintln!("yields before the last of {WOKEN} woken bound tasks ran: {worst}");
    assert!(
        worst < YIELD_BOUND,
        "{worst} yields passed before the last of {WOKEN} woken bound tasks ran"
    );
    s.shutdown();
}

/// A task bound to a busy Processer and woken from another thread waits
/// behind the Processer's local queue, not for its periodic look outward:
/// the push into its remote pinned queue asks it to look at its next pick.
/// Counted in the yielder's picks, not in time: with one yielder queued
/// locally the woken task runs within a few picks, where waiting for the
/// periodic look took anything up to 61 (half of them on average).
#[test]
fn a_bound_task_woken_from_another_thread_runs_within_a_few_picks_of_a_busy_processer() {
    let s = one_thread("fair-remote");
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (c, st) = (count.clone(), stop.clone());
    let yielder = s.spawn(move || {
        while !st.load(Ordering::Acquire) {
            c.fetch_add(1, Ordering::Relaxed);
            gofer::yield_now();
        }
    });
    let mut waits = Vec::new();
    for _ in 0..40 {
        let (task_tx, task_rx) = mpsc::channel();
        let (woke_tx, woke_rx) = mpsc::channel();
        let c = count.clone();
        let sleeper = s.spawn(move || {
            task_tx.send(gofer::current()).expect("receiver alive");
            // Spurious wake-ups are allowed: park until the flag is seen.
            gofer::park();
            woke_tx
                .send(c.load(Ordering::Relaxed))
                .expect("receiver alive");
        });
        let task = task_rx.recv_timeout(PATIENCE).expect("the sleeper ran");
        // Let it park (it has started: it is bound to the one Processer).
        common::wait_until("the sleeper to park", || {
            s.dump().tasks().iter().any(|t| {
                t.id() == sleeper.id().as_u64() && t.state() == gofer::debug::TaskState::Parked
            })
        });
        let before = count.load(Ordering::Relaxed);
        task.unpark();
        let after = woke_rx.recv_timeout(PATIENCE).expect("the sleeper woke");
        waits.push(after - before);
        sleeper.join().expect("the sleeper ends");
    }
    stop.store(true, Ordering::Release);
    yielder.join().expect("the yielder ends");
    s.shutdown();
    waits.sort_unstable();
    let median = waits[waits.len() / 2];
    assert!(
        median <= 8,
        "a woken bound task waited {median} picks of the yielder (median; all: {waits:?})"
    );
}

/// A burst of sleepers comes due on a Processer while tasks keep arriving
/// from outside: once woken, the sleepers get most of the picks (three in
/// four), not half of them, so they do not fall behind their timers for as
/// long as the arrivals last (`bench/benches/sleep.rs`: 10,000 sleepers
/// whose start phase overlapped their wake-ups). Counted in picks, not
/// time: the new tasks that ran between the first sleeper and the last.
#[test]
fn woken_sleepers_get_most_picks_while_new_tasks_queue() {
    const SLEEPERS: usize = 120;
    const NEW: usize = 600;
    let s = one_thread("fair-woken");
    let new_ran = Arc::new(AtomicUsize::new(0));

    // 1. The sleepers start (bound here) and sleep to one deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(100);
    let (slept_tx, slept_rx) = mpsc::channel();
    let (ran_tx, ran_rx) = mpsc::channel();
    let sleepers: Vec<_> = (0..SLEEPERS)
        .map(|_| {
            let (slept_tx, ran_tx, new_ran) = (slept_tx.clone(), ran_tx.clone(), new_ran.clone());
            s.spawn(move || {
                slept_tx.send(()).expect("receiver alive");
                gofer::sleep_until(deadline);
                ran_tx
                    .send(new_ran.load(Ordering::Relaxed))
                    .expect("receiver alive");
            })
        })
        .collect();
    for _ in 0..SLEEPERS {
        slept_rx.recv_timeout(PATIENCE).expect("a sleeper started");
    }

    // 2. A task holds the thread past the deadline while new tasks queue
    //    from here, so that both wait at once when it lets go.
    let (staller, release_tx) = stall(&s);
    let news: Vec<_> = (0..NEW)
        .map(|_| {
            let new_ran = new_ran.clone();
            s.spawn(move || {
                new_ran.fetch_add(1, Ordering::Relaxed);
            })
        })
        .collect();
    common::wait_until("the sleepers' deadline to pass", || {
        std::time::Instant::now() > deadline
    });
    release_tx.send(()).expect("the staller waits");

    let (mut first, mut last) = (usize::MAX, 0);
    for _ in 0..SLEEPERS {
        let at_run = ran_rx
            .recv_timeout(PATIENCE)
            .expect("a woken sleeper was starved");
        first = first.min(at_run);
        last = last.max(at_run);
    }
    let between = last - first;
    staller.join().expect("staller returned");
    for t in sleepers.into_iter().chain(news) {
        t.join().expect("task returned");
    }
    s.shutdown();
    eprintln!("new tasks run among {SLEEPERS} woken sleepers: {between}");
    assert!(
        between <= SLEEPERS / 2,
        "{between} new tasks ran between the first and the last of {SLEEPERS} woken sleepers"
    );
}
