//! Scoped tasks: `gofer::scope` and `Scheduler::scope` let tasks borrow
//! from the caller, and return only once every task of the scope is over,
//! whether the closure returned or panicked, whether the handles were
//! joined, dropped or leaked. Panics nobody joined come out of `scope`.

use crate::common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use common::{in_child, thread_name};
use gofer::{chan, Builder, Scheduler, SpawnError};

fn sched(name: &str, threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

/// The message of a caught panic.
fn message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Counts its drops into a borrowed counter.
struct Counted<'a>(&'a AtomicUsize);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn scoped_tasks_mutate_their_own_chunks_of_a_borrowed_slice() {
    let s = sched("sc-chunks", 2);
    let mut data: Vec<u64> = (0..10_000).collect();
    let offset = 1_000u64; // shared by every task
    let sums: Vec<u64> = s.scope(|sc| {
        let handles: Vec<_> = data
            .chunks_mut(100)
            .map(|chunk| {
                sc.spawn(|| {
                    for x in chunk.iter_mut() {
                        *x += offset;
                    }
                    gofer::yield_now(); // switches while holding the borrows
                    chunk.iter().sum::<u64>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(sums.len(), 100);
    let expected: u64 = (0..10_000u64).map(|i| i + offset).sum();
    assert_eq!(sums.iter().sum::<u64>(), expected);
    assert!(data
        .iter()
        .enumerate()
        .all(|(i, &x)| x == i as u64 + offset));
    s.shutdown();
}

/// 10,000 scoped tasks, each writing its own slot, none joined: the scope
/// alone waits for them.
#[test]
fn ten_thousand_scoped_tasks_from_a_plain_thread_are_all_waited_for() {
    let s = sched("sc-many", 2);
    let mut slots = vec![0u32; 10_000];
    let ran_on_sched = AtomicUsize::new(0);
    s.scope(|sc| {
        for (i, slot) in slots.iter_mut().enumerate() {
            let ran_on_sched = &ran_on_sched;
            // The handle is dropped at once: only the scope waits.
            sc.spawn(move || {
                *slot = i as u32 + 1;
                if thread_name().starts_with("sc-many") {
                    ran_on_sched.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    assert!(slots.iter().enumerate().all(|(i, &v)| v == i as u32 + 1));
    assert_eq!(ran_on_sched.load(Ordering::Relaxed), 10_000);
    s.shutdown();
}

#[test]
fn ten_thousand_scoped_tasks_inside_a_task_park_it_and_run_on_its_scheduler() {
    let s = sched("sc-intask", 2);
    let h = s.spawn(|| {
        let mut slots = vec![0u32; 10_000];
        let on_sched = AtomicUsize::new(0);
        // gofer::scope inside a task: the tasks go to this task's scheduler.
        gofer::scope(|sc| {
            for (i, slot) in slots.iter_mut().enumerate() {
                let on_sched = &on_sched;
                sc.spawn(move || {
                    *slot = i as u32 * 2;
                    if thread_name().starts_with("sc-intask") {
                        on_sched.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        let ok = slots.iter().enumerate().all(|(i, &v)| v == i as u32 * 2);
        (ok, on_sched.load(Ordering::Relaxed))
    });
    assert_eq!(h.join().unwrap(), (true, 10_000));
    s.shutdown();
}

#[test]
fn a_joined_panic_is_an_err_and_the_scope_returns_normally() {
    let s = sched("sc-joined", 2);
    let label = String::from("boom");
    let (err, other) = s.scope(|sc| {
        let bad = sc.spawn(|| -> u32 { panic!("{label}") });
        let good = sc.spawn(|| label.len());
        (bad.join().unwrap_err(), good.join().unwrap())
    });
    assert!(err.is_panic());
    assert_eq!(message(err.into_panic().as_ref()), "boom");
    assert_eq!(other, 4);
    s.shutdown();
}

#[test]
fn an_unjoined_panic_comes_out_of_scope_after_every_other_task_finished() {
    let s = sched("sc-unjoined", 2);
    const OTHERS: usize = 8;
    let finished = AtomicUsize::new(0);
    let (tx, rx) = chan::unbounded::<()>();
    let caught = catch_unwind(AssertUnwindSafe(|| {
        s.scope(|sc| {
            let bad = sc.spawn(|| panic!("nobody joins this"));
            for _ in 0..OTHERS {
                sc.spawn(|| {
                    rx.recv().unwrap();
                    // Still running well after the panic was stored.
                    gofer::sleep(Duration::from_millis(20));
                    finished.fetch_add(1, Ordering::SeqCst);
                });
            }
            common::wait_until("the bad task finished", || bad.is_finished());
            drop(bad); // dropped, not joined
            for _ in 0..OTHERS {
                tx.send(()).unwrap();
            }
            "the closure's value"
        })
    }));
    let p = caught.expect_err("scope re-raises the unjoined panic");
    assert!(
        message(p.as_ref()).contains("scoped task panicked"),
        "{:?}",
        message(p.as_ref())
    );
    assert_eq!(finished.load(Ordering::SeqCst), OTHERS);
    s.shutdown();
}

#[test]
fn a_panicking_closure_is_re_raised_only_after_its_tasks_finished() {
    let s = sched("sc-closure", 2);
    let finished = AtomicBool::new(false);
    let caught = catch_unwind(AssertUnwindSafe(|| {
        s.scope(|sc| {
            sc.spawn(|| {
                gofer::sleep(Duration::from_millis(50));
                finished.store(true, Ordering::SeqCst);
            });
            panic!("the closure panics");
        })
    }));
    let p = caught.expect_err("the closure's panic");
    assert_eq!(message(p.as_ref()), "the closure panics");
    assert!(finished.load(Ordering::SeqCst), "scope did not wait");
    s.shutdown();
}

#[test]
fn dropped_and_leaked_handles_do_not_let_a_task_outlive_the_scope() {
    let s = sched("sc-leak", 2);
    let drops = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    let (tx, rx) = chan::unbounded::<()>();
    s.scope(|sc| {
        let task = || {
            rx.recv().unwrap();
            gofer::sleep(Duration::from_millis(20));
            finished.fetch_add(1, Ordering::SeqCst);
            Counted(&drops) // a result that borrows
        };
        let leaked = sc.spawn(task);
        std::mem::forget(leaked);
        let dropped = sc.spawn(task);
        drop(dropped);
        tx.send(()).unwrap();
        tx.send(()).unwrap();
    });
    assert_eq!(finished.load(Ordering::SeqCst), 2, "scope did not wait");
    // The dropped handle's result was dropped before the scope ended; the
    // leaked one's result is leaked with it.
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    s.shutdown();
}

#[test]
fn scopes_nest_and_scoped_tasks_spawn_in_their_own_scope() {
    let s = sched("sc-nest", 2);
    let outer_data: Vec<u64> = (1..=10).collect();
    let total = AtomicU64::new(0);
    s.scope(|outer| {
        for part in outer_data.chunks(5) {
            let total = &total;
            outer.spawn(move || {
                // A scope inside a scoped task, borrowing from both levels.
                let local = 100u64;
                gofer::scope(|inner| {
                    for x in part {
                        inner.spawn(move || total.fetch_add(x + local, Ordering::SeqCst));
                    }
                });
                // A scoped task spawning into its own (outer) scope.
                outer.spawn(move || total.fetch_add(1_000, Ordering::SeqCst));
            });
        }
    });
    assert_eq!(total.load(Ordering::SeqCst), 55 + 10 * 100 + 2 * 1_000);
    s.shutdown();
}

#[test]
fn builder_spawn_scoped_names_the_task_and_returns_spawn_errors() {
    let s = sched("sc-builder", 2);
    let closed = sched("sc-closed", 1);
    closed.shutdown();
    let data = [1, 2, 3];
    let (name, sum, refused) = s.scope(|sc| {
        let h = Builder::new()
            .name("summer")
            .spawn_scoped(sc, || data.iter().sum::<i32>())
            .unwrap();
        let name = h.name().map(String::from);
        let refused = Builder::new()
            .scheduler(&closed)
            .spawn_scoped(sc, || data.len())
            .unwrap_err();
        (name, h.join().unwrap(), refused)
    });
    assert_eq!(name.as_deref(), Some("summer"));
    assert_eq!(sum, 6);
    // The refused spawn is the caller's error, not a failure of the scope.
    assert!(matches!(refused, SpawnError::Shutdown), "{refused:?}");
    s.shutdown();
}

#[test]
fn scheduler_scope_on_one_processer_parks_the_waiting_task() {
    in_child(
        module_path!(),
        "scheduler_scope_on_one_processer_parks_the_waiting_task",
        || {
            let s = sched("sc-one", 1);
            let inner = s.clone();
            let h = s.spawn(move || {
                let (tx, rx) = chan::bounded::<u64>(0);
                let got = AtomicU64::new(0);
                // Every scoped task runs on the one Processer this task is
                // on: the scope must park this task, not block the thread.
                inner.scope(|sc| {
                    for _ in 0..8 {
                        sc.spawn(|| {
                            let v = rx.recv().unwrap();
                            got.fetch_add(v, Ordering::SeqCst);
                        });
                    }
                    let producer = sc.spawn(|| {
                        for v in 1..=8 {
                            tx.send(v).unwrap();
                        }
                    });
                    // Joining from the closure parks this task too.
                    producer.join().unwrap();
                });
                got.load(Ordering::SeqCst)
            });
            assert_eq!(h.join().unwrap(), 36);
            s.shutdown();
        },
    );
}

#[test]
fn scopes_and_scoped_handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    let s = sched("sc-traits", 1);
    let x = 5;
    let v = s.scope(|sc| {
        send_sync(sc);
        let h = sc.spawn(|| x + 1);
        send_sync(&h);
        // A handle joined from another scoped task.
        sc.spawn(move || h.join().unwrap()).join().unwrap()
    });
    assert_eq!(v, 6);
    s.shutdown();
}
