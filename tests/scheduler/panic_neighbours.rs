//! Panics belong to the task: while a task is parked in the middle of an
//! unwind, the other tasks of its thread see nothing of it. They answer
//! `thread::panicking()` false, the `std::sync::Mutex`es they release come
//! out unpoisoned, and (with `hooks`) they park on a std lock as usual,
//! rather than blocking the thread that the lock's holder needs.
//!
//! Each test runs in a child process with a watchdog: the old behaviour
//! hangs, or leaves std's panic counts wrong for the rest of the process.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::in_child;

/// Runs `f` in its destructor, which a panic's unwind reaches.
struct OnUnwind<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnUnwind<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

fn one_thread(name: &str) -> gofer::Scheduler {
    gofer::Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .name(name)
        .build()
        .unwrap()
}

/// H locks a std `Mutex` and parks holding it; P panics and parks in a
/// destructor; H, resumed on the same thread while P is parked, releases the
/// lock. On a thread the lock would come out clean: H never panicked.
#[test]
fn a_neighbour_parked_mid_unwind_does_not_poison_the_locks_a_task_releases() {
    in_child(
        module_path!(),
        "a_neighbour_parked_mid_unwind_does_not_poison_the_locks_a_task_releases",
        || {
            let sched = one_thread("unwind-neighbour");
            let m = Arc::new(Mutex::new(0u32));
            let (locked_tx, locked_rx) = gofer::chan::bounded::<()>(1);
            let (parked_tx, parked_rx) = gofer::chan::bounded::<()>(1);
            let (done_tx, done_rx) = gofer::chan::bounded::<()>(1);
            let h = {
                let m = m.clone();
                sched.spawn(move || {
                    let mut g = m.lock().unwrap();
                    locked_tx.send(()).unwrap();
                    // Parks holding the lock until P is parked mid-unwind.
                    parked_rx.recv().unwrap();
                    let seen = std::thread::panicking();
                    *g += 1;
                    drop(g);
                    done_tx.send(()).unwrap();
                    seen
                })
            };
            let p = sched.spawn(move || {
                locked_rx.recv().unwrap();
                let _parks = OnUnwind(move || {
                    assert!(std::thread::panicking());
                    parked_tx.send(()).unwrap();
                    // Parked mid-unwind while H runs on this thread.
                    done_rx.recv().unwrap();
                    assert!(
                        std::thread::panicking(),
                        "the unwinding task lost its own panic across a park"
                    );
                });
                panic!("P unwinds");
            });
            let seen = h.join().unwrap();
            assert!(p.join().is_err(), "P panicked");
            assert!(
                !seen,
                "a task saw panicking() true while a neighbour was parked mid-unwind"
            );
            assert!(
                !m.is_poisoned(),
                "a healthy task's lock came out poisoned by a neighbour's unwind"
            );
            sched.shutdown();
        },
    );
}

/// With `hooks`: H holds a std `Mutex` across a sleep; P panics and parks
/// in a destructor; two more tasks of the thread contend for the lock. The
/// contenders must park on the lock's futex (they are not unwinding), so
/// that H can run again and release it.
#[cfg(feature = "hooks")]
#[test]
fn tasks_contending_for_a_std_lock_beside_a_task_parked_mid_unwind_do_not_deadlock() {
    in_child(
        module_path!(),
        "tasks_contending_for_a_std_lock_beside_a_task_parked_mid_unwind_do_not_deadlock",
        || {
            let sched = one_thread("unwind-contend");
            let m = Arc::new(Mutex::new(0u32));
            let (locked_tx, locked_rx) = gofer::chan::bounded::<()>(1);
            let (parked_tx, parked_rx) = std::sync::mpsc::channel::<()>();
            let (release_tx, release_rx) = gofer::chan::bounded::<()>(1);
            let h = {
                let m = m.clone();
                sched.spawn(move || {
                    let mut g = m.lock().unwrap();
                    locked_tx.send(()).unwrap();
                    // std's sleep: parks through the hooks, lock held.
                    std::thread::sleep(Duration::from_millis(100));
                    *g += 1;
                })
            };
            let p = sched.spawn(move || {
                locked_rx.recv().unwrap();
                let _parks = OnUnwind(move || {
                    parked_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                });
                panic!("P unwinds");
            });
            parked_rx
                .recv_timeout(common::PATIENCE)
                .expect("P parks mid-unwind");
            let contenders: Vec<_> = (0..2)
                .map(|_| {
                    let m = m.clone();
                    sched.spawn(move || {
                        let mut g = m.lock().unwrap();
                        *g += 1;
                    })
                })
                .collect();
            for c in contenders {
                c.join().unwrap();
            }
            h.join().unwrap();
            release_tx.send(()).unwrap();
            assert!(p.join().is_err());
            assert!(!m.is_poisoned(), "a healthy task's lock came out poisoned");
            assert_eq!(*m.lock().unwrap(), 3);
            sched.shutdown();
        },
    );
}

/// Many tasks on two Processers: some panic and park several times in
/// their destructors (at two levels of unwind, one inside the other),
/// others lock and release std locks across yields all along. Every
/// unwinding task keeps its own panic state across each park, no healthy
/// task ever sees one, no lock comes out poisoned, and afterwards each
/// Processer's count is back to zero (a panic holding a lock there still
/// poisons it, and a healthy task sees no panic).
#[test]
fn unwinding_tasks_keep_their_panic_and_healthy_ones_never_see_it() {
    in_child(
        module_path!(),
        "unwinding_tasks_keep_their_panic_and_healthy_ones_never_see_it",
        || {
            const UNWINDERS: usize = 100;
            const HEALTHY: usize = 20;
            let sched = gofer::Scheduler::builder()
                .min_threads(2)
                .name("unwind-many")
                .build()
                .unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let lost = Arc::new(AtomicUsize::new(0));
            let seen_by_healthy = Arc::new(AtomicUsize::new(0));
            // One lock per healthy task: held across a yield, a lock two
            // tasks of a thread shared would block the thread without hooks.
            let locks: Arc<Vec<Mutex<u64>>> =
                Arc::new((0..HEALTHY).map(|_| Mutex::new(0)).collect());
            let healthy: Vec<_> = (0..HEALTHY)
                .map(|i| {
                    let (stop, seen, locks) =
                        (stop.clone(), seen_by_healthy.clone(), locks.clone());
                    sched.spawn(move || {
                        let mut rounds = 0u64;
                        while !stop.load(Ordering::Relaxed) || rounds < 10 {
                            let mut g = locks[i].lock().unwrap();
                            gofer::yield_now();
                            if std::thread::panicking() {
                                seen.fetch_add(1, Ordering::Relaxed);
                            }
                            *g += 1;
                            drop(g);
                            gofer::yield_now();
                            rounds += 1;
                        }
                    })
                })
                .collect();
            let unwinders: Vec<_> = (0..UNWINDERS)
                .map(|i| {
                    let lost = lost.clone();
                    sched.spawn(move || {
                        let outer_lost = lost.clone();
                        let _outer = OnUnwind(move || {
                            for _ in 0..3 {
                                gofer::sleep(Duration::from_micros(200));
                                if !std::thread::panicking() {
                                    outer_lost.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            if i % 2 == 0 {
                                // A second level: a panic caught inside this
                                // destructor, parking in its own unwind.
                                let inner_lost = outer_lost.clone();
                                let r = std::panic::catch_unwind(move || {
                                    let _inner = OnUnwind(move || {
                                        gofer::yield_now();
                                        gofer::sleep(Duration::from_micros(100));
                                        if !std::thread::panicking() {
                                            inner_lost.fetch_add(1, Ordering::Relaxed);
                                        }
                                    });
                                    panic!("inner");
                                });
                                assert!(r.is_err());
                                gofer::yield_now();
                                if !std::thread::panicking() {
                                    outer_lost.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        });
                        gofer::yield_now();
                        panic!("outer {i}");
                    })
                })
                .collect();
            for u in unwinders {
                assert!(u.join().is_err());
            }
            stop.store(true, Ordering::Relaxed);
            for h in healthy {
                h.join().unwrap();
            }
            assert_eq!(
                lost.load(Ordering::Relaxed),
                0,
                "unwinds lost their panic across a park"
            );
            assert_eq!(
                seen_by_healthy.load(Ordering::Relaxed),
                0,
                "healthy tasks saw a neighbour's panic"
            );
            for (i, l) in locks.iter().enumerate() {
                assert!(
                    !l.is_poisoned(),
                    "lock {i} poisoned by a neighbour's unwind"
                );
            }
            // Every Processer's count is back at zero, and works as before.
            common::check_threads_clean(&sched, 2);
            sched.shutdown();
        },
    );
}
