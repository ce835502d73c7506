//! The direct switch: a task that yields or parks goes straight into the
//! next ready task of its Processer (`runtime/direct.rs`). These scenarios
//! check that it is taken (`ProcesserStats::direct_switches`), that no
//! wake-up is lost or doubled across it, that a task bound or pinned to a
//! Processer never runs elsewhere, and that dumps, panics, dense stacks and
//! chaos mode keep working while tasks switch directly.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{in_child, thread_id, wait_until};
use gofer::debug::TaskState;
use gofer::{Builder, Scheduler};

fn sched(n: usize) -> Scheduler {
    common::fixed_scheduler(n)
}

/// Chaos mode (`GOFER_CHAOS_MIGRATE=1`, a CI pass over every test) moves
/// every task at every switch-out, and makes no direct switch.
fn chaos() -> bool {
    std::env::var_os("GOFER_CHAOS_MIGRATE").is_some_and(|v| v == "1")
}

/// Direct switches were made, or in chaos mode none was.
fn assert_direct_switches_made(s: &Scheduler) {
    let d = direct_switches(s);
    if chaos() {
        assert_eq!(d, 0, "a direct switch in chaos mode");
    } else {
        assert!(d > 0, "no direct switch was made");
    }
}

fn direct_switches(s: &Scheduler) -> u64 {
    s.stats().processers.iter().map(|p| p.direct_switches).sum()
}

fn switches(s: &Scheduler) -> u64 {
    s.stats().processers.iter().map(|p| p.switches).sum()
}

/// Two tasks yielding on one Processer alternate strictly, A B A B ...:
/// each yield goes into the other task (directly, nearly always), never
/// back into the yielder while the other is ready.
#[test]
fn two_yielding_tasks_alternate_and_switch_directly() {
    let s = sched(1);
    const N: usize = 2_000;
    let log = Arc::new(Mutex::new(Vec::with_capacity(2 * N)));
    // Both spawned before either runs: the Processer is busy with a gate.
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    let gate = s.spawn(move || gate_rx.recv().unwrap());
    let hs: Vec<_> = (0..2u8)
        .map(|who| {
            let log = log.clone();
            s.spawn(move || {
                for _ in 0..N {
                    log.lock().unwrap().push(who);
                    gofer::yield_now();
                }
            })
        })
        .collect();
    gate_tx.send(()).unwrap();
    gate.join().unwrap();
    for h in hs {
        h.join().unwrap();
    }
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 2 * N);
    if chaos() {
        // Every yield goes through the remote queues: no order to check.
        assert_eq!(direct_switches(&s), 0);
        s.shutdown();
        return;
    }
    // The second task may wait in the queue of new tasks for a while (the
    // loop fetches it); from its first run on they alternate strictly.
    let from = log.iter().position(|&w| w != log[0]).expect("both ran");
    let until = log.len() - (2 * N - from).min(from) - 1;
    for (i, w) in log[from..until].windows(2).enumerate() {
        assert_ne!(
            w[0],
            w[1],
            "the same task ran twice in a row at {}",
            from + i
        );
    }
    assert!(
        until - from > N,
        "too short an alternation: {from}..{until}"
    );
    let (d, all) = (direct_switches(&s), switches(&s));
    // Every yield but the loop's periodic look (1 in 61) and the first runs
    // is direct.
    assert!(
        d >= (2 * N as u64) * 9 / 10,
        "{d} direct switches of {all} for {} yields",
        2 * N
    );
    assert!(d < all);
    s.shutdown();
}

/// Many tasks on two Processers, each round a yield and then a park until
/// an outside thread hands it a ticket and unparks it; other tasks unpark
/// it too (spurious wake-ups). Every task sees every ticket exactly once,
/// and nothing hangs (a lost wake-up would: watched in a child process).
#[test]
fn yields_and_parks_across_two_processers_with_unparks_from_threads() {
    in_child(
        module_path!(),
        "yields_and_parks_across_two_processers_with_unparks_from_threads",
        || {
            let s = sched(2);
            const TASKS: usize = 64;
            const ROUNDS: u64 = 300;
            let tickets: Arc<Vec<AtomicU64>> =
                Arc::new((0..TASKS).map(|_| AtomicU64::new(0)).collect());
            let seen = Arc::new(AtomicU64::new(0));
            let handles: Arc<Mutex<Vec<Option<gofer::Task>>>> =
                Arc::new(Mutex::new(vec![None; TASKS]));
            let started = Arc::new(AtomicUsize::new(0));
            let hs: Vec<_> = (0..TASKS)
                .map(|i| {
                    let (tickets, seen, handles, started) = (
                        tickets.clone(),
                        seen.clone(),
                        handles.clone(),
                        started.clone(),
                    );
                    s.spawn(move || {
                        handles.lock().unwrap()[i] = Some(gofer::current());
                        started.fetch_add(1, Ordering::SeqCst);
                        for round in 1..=ROUNDS {
                            gofer::yield_now();
                            while tickets[i].load(Ordering::Acquire) < round {
                                gofer::park();
                            }
                            seen.fetch_add(1, Ordering::Relaxed);
                            // A spurious wake-up for a neighbour, from a task.
                            if let Some(t) = &handles.lock().unwrap()[(i + 1) % TASKS] {
                                t.unpark();
                            }
                        }
                    })
                })
                .collect();
            wait_until("every task started", || {
                started.load(Ordering::SeqCst) == TASKS
            });
            let handles: Vec<gofer::Task> = handles
                .lock()
                .unwrap()
                .iter()
                .map(|t| t.clone().expect("registered"))
                .collect();
            // Two unparking threads: each hands out the tickets of half the
            // tasks, and unparks every task (its own half with a ticket).
            let unparkers: Vec<_> = (0..2)
                .map(|k| {
                    let (tickets, handles) = (tickets.clone(), handles.clone());
                    std::thread::spawn(move || {
                        for _ in 0..ROUNDS {
                            for (i, t) in handles.iter().enumerate() {
                                if i % 2 == k {
                                    tickets[i].fetch_add(1, Ordering::Release);
                                }
                                t.unpark();
                            }
                            std::thread::yield_now();
                        }
                    })
                })
                .collect();
            for u in unparkers {
                u.join().unwrap();
            }
            for h in hs {
                h.join().unwrap();
            }
            assert_eq!(seen.load(Ordering::Relaxed), TASKS as u64 * ROUNDS);
            assert_direct_switches_made(&s);
            println!(
                "figure: {} of {} switches direct",
                direct_switches(&s),
                switches(&s)
            );
            s.shutdown();
        },
    );
}

/// Tasks are bound at their first run to the Processer that runs it; a
/// direct switch must never let one resume on another thread. Tasks of
/// two Processers ping-pong over channels (parks and unparks across
/// Processers, most switches direct) and yield; each notes its thread at
/// every resume. A pinned task does the same on Processer 1.
#[test]
fn bound_and_pinned_tasks_never_move_under_direct_switching() {
    let s = sched(2);
    const PAIRS: usize = 16;
    const ROUNDS: usize = 500;
    let moved = Arc::new(AtomicUsize::new(0));
    let pinned_moved = Arc::new(AtomicUsize::new(0));
    let mut hs = Vec::new();
    // Chaos mode moves the tasks the runtime bound (not the user's pins).
    let check = |moved: &AtomicUsize, first: std::thread::ThreadId| {
        if thread_id() != first {
            moved.fetch_add(1, Ordering::Relaxed);
        }
    };
    for p in 0..PAIRS {
        let (a_tx, a_rx) = gofer::chan::bounded::<usize>(0);
        let (b_tx, b_rx) = gofer::chan::bounded::<usize>(0);
        let pinned = p % 4 == 0;
        let m = if pinned {
            pinned_moved.clone()
        } else {
            moved.clone()
        };
        let a = move || {
            let first = thread_id();
            for i in 0..ROUNDS {
                a_tx.send(i).unwrap();
                check(&m, first);
                assert_eq!(b_rx.recv().unwrap(), i + 1);
                check(&m, first);
                gofer::yield_now();
                check(&m, first);
            }
        };
        let m = moved.clone();
        let b = move || {
            let first = thread_id();
            for _ in 0..ROUNDS {
                let v = a_rx.recv().unwrap();
                check(&m, first);
                b_tx.send(v + 1).unwrap();
                check(&m, first);
            }
        };
        if pinned {
            // One side pinned to Processer 1, by the user.
            let t = Builder::new()
                .scheduler(&s)
                .pin(1)
                .spawn(a)
                .expect("spawned");
            hs.push(t);
        } else {
            hs.push(s.spawn(a));
        }
        hs.push(s.spawn(b));
    }
    for h in hs {
        h.join().unwrap();
    }
    if !chaos() {
        assert_eq!(moved.load(Ordering::Relaxed), 0, "a started task moved");
    }
    assert_eq!(
        pinned_moved.load(Ordering::Relaxed),
        0,
        "a pinned task moved"
    );
    assert_direct_switches_made(&s);
    s.shutdown();
}

#[inline(never)]
fn user_function_that_parks_in_the_ping_pong(rx: &gofer::chan::Receiver<u64>) -> Option<u64> {
    std::hint::black_box(rx.recv().ok())
}

/// Dumps taken while tasks ping-pong: the dump walks tasks parked by a
/// direct switch (the walk reaches their closures), and the tasks then
/// resume through the walk's frame, directly or through the loop; every
/// value makes its round trip. The ping-pong goes on until 200 dumps have
/// been taken, 200 parked stacks walked and many values went round: on a
/// busy machine the OS may run the dumping thread and the Processers in
/// turn rather than together, and dumps taken while no task ran prove
/// nothing.
#[test]
fn dumps_taken_while_tasks_ping_pong_through_direct_switches() {
    in_child(
        module_path!(),
        "dumps_taken_while_tasks_ping_pong_through_direct_switches",
        || {
            let s = sched(2);
            const PAIRS: usize = 20;
            const DUMPS: u64 = 200;
            const WALKS: u64 = 200;
            let stop = Arc::new(AtomicBool::new(false));
            let (total, want) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
            let mut hs = Vec::new();
            for _ in 0..PAIRS {
                let (a_tx, a_rx) = gofer::chan::bounded::<u64>(0);
                let (b_tx, b_rx) = gofer::chan::bounded::<u64>(0);
                let (stop, total, want) = (stop.clone(), total.clone(), want.clone());
                hs.push(s.spawn(move || {
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        a_tx.send(i).unwrap();
                        let v = user_function_that_parks_in_the_ping_pong(&b_rx).unwrap();
                        total.fetch_add(v, Ordering::Relaxed);
                        want.fetch_add(i + 1, Ordering::Relaxed);
                        i += 1;
                    }
                    // Dropping `a_tx` ends the echo.
                }));
                hs.push(s.spawn(move || {
                    while let Some(v) = user_function_that_parks_in_the_ping_pong(&a_rx) {
                        if v % 64 == 63 {
                            // A longer park now and then, for the walks.
                            gofer::sleep(std::time::Duration::from_micros(300));
                        }
                        b_tx.send(v + 1).unwrap();
                    }
                }));
            }
            let (mut dumps, mut walked) = (0u64, 0u64);
            let start = std::time::Instant::now();
            // Until 200 dumps and 200 walks, and a good many round trips
            // meanwhile.
            while dumps < DUMPS || walked < WALKS || want.load(Ordering::Relaxed) < 200_000 {
                assert!(
                    start.elapsed() < common::PATIENCE,
                    "the ping-pong stalled, or no parked task's stack was walked: \
                     {walked} walks in {dumps} dumps"
                );
                let d = s.dump();
                dumps += 1;
                for t in d.tasks() {
                    if t.state() != TaskState::Parked {
                        continue;
                    }
                    assert!(t.waiting_on().is_some());
                    // Parked in the receive (the user's function) or in the
                    // send of the rendezvous: either way the walk reaches
                    // the task's closure.
                    if let Some(bt) = t.backtrace() {
                        assert!(
                            bt.contains(
                                "dumps_taken_while_tasks_ping_pong_through_direct_switches"
                            ),
                            "a walk that stops short of the task's closure:\n{bt}"
                        );
                        walked += 1;
                    }
                }
            }
            stop.store(true, Ordering::Relaxed);
            for h in hs {
                h.join().unwrap();
            }
            assert_eq!(total.load(Ordering::Relaxed), want.load(Ordering::Relaxed));
            assert_direct_switches_made(&s);
            println!("figure: {dumps} dumps, {walked} stacks walked during the ping-pong");
            s.shutdown();
        },
    );
}

/// A task that panics after switching directly many times is reported by
/// its join handle; the task it kept switching with is unharmed.
#[test]
fn a_panic_after_direct_switches_stays_in_its_task() {
    let s = sched(1);
    let other_done = Arc::new(AtomicU64::new(0));
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    let gate = s.spawn(move || gate_rx.recv().unwrap());
    let bad = s.spawn(|| {
        for _ in 0..100 {
            gofer::yield_now();
        }
        panic!("boom after yields");
    });
    let good = {
        let d = other_done.clone();
        s.spawn(move || {
            for _ in 0..1_000 {
                gofer::yield_now();
                d.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    gate_tx.send(()).unwrap();
    gate.join().unwrap();
    let err = bad.join().expect_err("the task panicked");
    assert!(format!("{err:?}").contains("boom after yields") || err.is_panic());
    good.join().unwrap();
    assert_eq!(other_done.load(Ordering::Relaxed), 1_000);
    if !chaos() {
        assert!(direct_switches(&s) >= 100);
    }
    s.shutdown();
}

#[inline(never)]
fn deep(n: usize, then: &mut dyn FnMut()) -> usize {
    let pad = std::hint::black_box([n as u8; 512]);
    if n == 0 {
        then();
        return pad[0] as usize;
    }
    deep(n - 1, then) + pad[1] as usize
}

/// Yields `n` times from about `frames` * 512 bytes deep in the stack,
/// counting them in `count`.
fn yield_deep(frames: usize, n: u64, count: &AtomicU64) {
    deep(frames, &mut || {
        for _ in 0..n {
            gofer::yield_now();
            count.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// Dense stacks (no guard page): a task parked deep in its small stack is
/// switched into by the loop, never directly (the filing would run on its
/// stack's last bytes); tasks parked shallow are switched into directly.
/// All of them run to the end with their canaries intact (a damaged one
/// aborts the process: watched in a child).
#[test]
fn dense_stacks_with_tasks_parked_near_their_limit() {
    in_child(
        module_path!(),
        "dense_stacks_with_tasks_parked_near_their_limit",
        || {
            let s = Scheduler::builder()
                .min_threads(1)
                .max_threads(1)
                .dense_stacks(true)
                .stack_size(32 * 1024)
                .build()
                .expect("a dense-stack scheduler");
            let count = Arc::new(AtomicU64::new(0));
            // Two tasks yielding to each other from about 26 KiB deep: less
            // than the direct switch's headroom is free below them.
            let run_pair = |frames: usize| {
                let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
                let gate = s.spawn(move || gate_rx.recv().unwrap());
                let hs: Vec<_> = (0..2)
                    .map(|_| {
                        let c = count.clone();
                        s.spawn(move || yield_deep(frames, 200, &c))
                    })
                    .collect();
                gate_tx.send(()).unwrap();
                gate.join().unwrap();
                for h in hs {
                    h.join().unwrap();
                }
            };
            run_pair(52);
            assert_eq!(count.load(Ordering::Relaxed), 2 * 200);
            assert_eq!(direct_switches(&s), 0, "a direct switch into a deep task");
            // The same from the top of their stacks: direct.
            run_pair(0);
            assert_eq!(count.load(Ordering::Relaxed), 4 * 200);
            assert_direct_switches_made(&s);
            println!(
                "figure: {} of {} switches direct",
                direct_switches(&s),
                switches(&s)
            );
            s.shutdown();
        },
    );
}
