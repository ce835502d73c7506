//! Work stealing: tasks queued on a busy Processer are taken by an idle one.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use common::{thread_id, PATIENCE};
use gofer::{go, Builder, Scheduler};

#[test]
fn tasks_spawned_on_a_busy_processer_are_stolen_by_an_idle_one() {
    let s = Scheduler::builder()
        .min_threads(2)
        .max_threads(2)
        .name("steal")
        .build()
        .expect("valid scheduler config");
    const N: usize = 64;
    let (stolen, total) = Builder::new()
        .scheduler(&s)
        .pin(0)
        .spawn(|| {
            let home = thread_id();
            let elsewhere = Arc::new(AtomicBool::new(false));
            // Spawned from inside: all go to Processer 0's runnable queue.
            let kids: Vec<_> = (0..N)
                .map(|_| {
                    let elsewhere = elsewhere.clone();
                    go!(move || {
                        let t = thread_id();
                        if t != home {
                            elsewhere.store(true, Ordering::Release);
                        }
                        for _ in 0..3 {
                            gofer::yield_now();
                        }
                        t
                    })
                })
                .collect();
            // Hold Processer 0 without switching: only a thief can run the
            // children until one of them reports from the other thread.
            let start = Instant::now();
            while !elsewhere.load(Ordering::Acquire) {
                assert!(
                    start.elapsed() < PATIENCE,
                    "no child was stolen by the idle Processer within {PATIENCE:?}"
                );
                std::hint::spin_loop();
            }
            let ran: Vec<_> = kids
                .into_iter()
                .map(|k| k.join().expect("child returned"))
                .collect();
            (ran.iter().filter(|t| **t != home).count(), ran.len())
        })
        .expect("pin(0) is valid")
        .join()
        .expect("the parent returned");
    assert_eq!(total, N);
    assert!(stolen >= 1, "no child ran on the other Processer");
    s.shutdown();
}

#[test]
fn migratable_tasks_woken_from_outside_towards_a_busy_processer_are_taken_by_an_idle_one() {
    woken_towards_a_busy_processer(true);
}

#[test]
fn started_tasks_woken_from_outside_towards_a_busy_processer_wait_for_it() {
    woken_towards_a_busy_processer(false);
}

/// Tasks that parked on Processer 0 are woken from a plain thread while
/// Processer 0 is busy and 1 idle. Migratable tasks are taken by the idle
/// Processer; by default a started task stays where it first ran, so they
/// wait (queued on 0, with 1 asleep) and then run on 0.
fn woken_towards_a_busy_processer(migrate: bool) {
    let b = Scheduler::builder()
        .min_threads(2)
        .max_threads(2)
        .name("stealnew");
    let b = if migrate {
        // SAFETY: the tasks touch no thread-local across a switch: their
        // only thread-local reads (`thread_id`) go through an
        // `#[inline(never)]` accessor, before and after `park`.
        unsafe { b.migrate_started_tasks(true) }
    } else {
        b
    };
    let s = b.build().expect("valid scheduler config");
    const N: usize = 50;
    let p1_busy = Arc::new(AtomicBool::new(true));
    let p0_busy = Arc::new(AtomicBool::new(true));
    let (tx, rx) = mpsc::channel();

    // 1. Occupy Processer 1 so that the sleepers below all run (and park)
    //    on Processer 0, which becomes their home.
    let b1 = p1_busy.clone();
    let t1 = tx.clone();
    let spinner1 = Builder::new()
        .scheduler(&s)
        .pin(1)
        .spawn(move || {
            t1.send(Msg::Started(thread_id())).expect("receiver alive");
            while b1.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
        })
        .expect("spawned");
    let Msg::Started(p1) = rx.recv_timeout(PATIENCE).expect("spinner 1 started") else {
        unreachable!()
    };
    let woken = Arc::new(AtomicUsize::new(0));
    let released = Arc::new(AtomicBool::new(false));
    let sleepers: Vec<_> = (0..N)
        .map(|_| {
            let tx = tx.clone();
            let woken = woken.clone();
            let released = released.clone();
            s.spawn(move || {
                tx.send(Msg::Parked(gofer::current(), thread_id()))
                    .expect("receiver alive");
                while !released.load(Ordering::Acquire) {
                    gofer::park();
                }
                let t = thread_id();
                woken.fetch_add(1, Ordering::AcqRel);
                t
            })
        })
        .collect();
    let mut parked = Vec::new();
    for _ in 0..N {
        match rx.recv_timeout(PATIENCE).expect("a sleeper started") {
            Msg::Parked(task, t) => {
                assert_ne!(t, p1, "Processer 1 was busy");
                parked.push(task);
            }
            Msg::Started(_) => unreachable!(),
        }
    }
    // 2. Now occupy Processer 0 (until every sleeper was woken) and free 1.
    let b0 = p0_busy.clone();
    let w = woken.clone();
    let t0 = tx.clone();
    let spinner0 = Builder::new()
        .scheduler(&s)
        .pin(0)
        .spawn(move || {
            t0.send(Msg::Started(thread_id())).expect("receiver alive");
            let start = Instant::now();
            while (!migrate || w.load(Ordering::Acquire) < N) && b0.load(Ordering::Acquire) {
                assert!(
                    start.elapsed() < PATIENCE,
                    "the woken tasks were not stolen"
                );
                std::hint::spin_loop();
            }
        })
        .expect("spawned");
    let Msg::Started(p0) = rx.recv_timeout(PATIENCE).expect("spinner 0 started") else {
        unreachable!()
    };
    p1_busy.store(false, Ordering::Release);
    spinner1.join().expect("spinner 1 returned");
    // 3. Wake the sleepers from this thread: they are routed to their home,
    //    the busy Processer 0, and only the idle Processer 1 can run them.
    // (Every sleeper has parked: Processer 0, their only thread, is busy.)
    released.store(true, Ordering::Release);
    for t in &parked {
        t.unpark();
    }
    if !migrate {
        // Every woken task waits on Processer 0 while 1 sleeps idle.
        common::wait_until("the woken tasks to queue on the busy Processer", || {
            let st = s.stats();
            let busy = st.processers.iter().find(|p| p.running);
            let idle = st.processers.iter().find(|p| !p.running);
            busy.is_some_and(|p| p.queued == N) && idle.is_some_and(|p| p.sleeping)
        });
        assert_eq!(
            woken.load(Ordering::Acquire),
            0,
            "a woken task ran elsewhere"
        );
        p0_busy.store(false, Ordering::Release);
    }
    for h in sleepers {
        let t = h.join().expect("sleeper returned");
        let home = if migrate { p1 } else { p0 };
        assert_eq!(t, home, "a woken task ran on the wrong Processer");
    }
    assert_ne!(p0, p1);
    p0_busy.store(false, Ordering::Release);
    spinner0.join().expect("spinner 0 returned");
    s.shutdown();
}

enum Msg {
    Started(std::thread::ThreadId),
    Parked(gofer::Task, std::thread::ThreadId),
}

/// Children spawned inside a task go to its own Processer's queue. Sleeping
/// Processers are woken to steal them one at a time (a thief that finds
/// work wakes the next), until every Processer runs one. Each child holds
/// its thread without switching until all of them run at once.
#[test]
fn children_spawned_inside_a_task_spread_to_every_idle_processer() {
    const PROCS: usize = 4;
    let s = Scheduler::builder()
        .min_threads(PROCS)
        .max_threads(PROCS)
        .name("spread")
        .build()
        .expect("valid scheduler config");
    let start = Instant::now();
    let threads = s
        .spawn(|| {
            let running = Arc::new(AtomicUsize::new(0));
            let kids: Vec<_> = (0..PROCS)
                .map(|_| {
                    let running = running.clone();
                    go!(move || {
                        running.fetch_add(1, Ordering::AcqRel);
                        let start = Instant::now();
                        while running.load(Ordering::Acquire) < PROCS {
                            assert!(
                                start.elapsed() < PATIENCE,
                                "only {running:?} of {PROCS} children ran at once"
                            );
                            std::thread::yield_now();
                        }
                        thread_id()
                    })
                })
                .collect();
            kids.into_iter()
                .map(|k| k.join().expect("a child returned"))
                .collect::<Vec<_>>()
        })
        .join()
        .expect("the parent returned");
    eprintln!("{PROCS} children ran at once after {:?}", start.elapsed());
    let mut distinct = threads.clone();
    distinct.sort_by_key(|t| format!("{t:?}"));
    distinct.dedup();
    assert_eq!(distinct.len(), PROCS, "threads: {threads:?}");
    s.shutdown();
}

/// A task that spawns one long-lived child at a time and parks between
/// spawns (a server's accept loop): each child would run on the spawner's
/// Processer as soon as the spawner parks, and be bound there for its whole
/// life. Fresh tasks are placed where fewer tasks are bound, so the
/// children end up spread over both Processers.
#[test]
fn long_lived_children_of_one_spawner_are_bound_across_processers() {
    const KIDS: usize = 400;
    let s = Scheduler::builder()
        .min_threads(2)
        .max_threads(2)
        .name("place")
        .build()
        .expect("valid scheduler config");
    let release = Arc::new(AtomicBool::new(false));
    let r = release.clone();
    let homes = s
        .spawn(move || {
            let (tx, rx) = gofer::chan::unbounded();
            let kids: Vec<_> = (0..KIDS)
                .map(|_| {
                    let (tx, r) = (tx.clone(), r.clone());
                    let kid = go!(move || {
                        tx.send(gofer::current()).expect("the spawner listens");
                        // Bound to the thread it started on: stays there.
                        let home = thread_id();
                        while !r.load(Ordering::Acquire) {
                            gofer::park();
                        }
                        assert_eq!(home, thread_id(), "a started task moved");
                        home
                    });
                    // Park until the child ran, as an accept loop parks
                    // until the next connection.
                    (kid, rx.recv().expect("the child reports"))
                })
                .collect();
            kids
        })
        .join()
        .expect("the spawner returned");
    release.store(true, Ordering::Release);
    let homes: Vec<_> = homes
        .into_iter()
        .map(|(kid, task)| {
            task.unpark();
            kid.join().expect("a child returned")
        })
        .collect();
    let first = homes[0];
    let on_first = homes.iter().filter(|&&h| h == first).count();
    let fewer = on_first.min(KIDS - on_first);
    eprintln!(
        "{KIDS} children: {on_first} on one Processer, {} on the other",
        KIDS - on_first
    );
    assert!(
        fewer >= KIDS / 4,
        "{on_first} of {KIDS} children were bound to one Processer"
    );
    s.shutdown();
}
