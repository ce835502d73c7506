//! JoinSet: results in completion order, `len`, `try_join_next`,
//! `cancel_all`, cancel-on-drop, and `join_next` on a plain thread.
//! Cases that could hang run in a child process with a watchdog.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{in_child, wait_until};
use gofer::chan;
use gofer::task::JoinSet;
use gofer::Scheduler;

fn sched() -> Scheduler {
    Scheduler::builder()
        .min_threads(2)
        .max_threads(2)
        .build()
        .expect("valid scheduler config")
}

#[test]
fn join_next_gives_results_in_completion_order() {
    in_child(
        module_path!(),
        "join_next_gives_results_in_completion_order",
        || {
            let s = sched();
            // Each task waits for its own go; they are released in reverse
            // spawn order, and each result is taken before the next release.
            let mut gos = Vec::new();
            let mut set = JoinSet::new();
            assert!(set.is_empty());
            for i in 0..4u32 {
                let (tx, rx) = chan::bounded::<()>(0);
                gos.push(tx);
                set.spawn_with(gofer::Builder::new().scheduler(&s), move || {
                    rx.recv().unwrap();
                    i
                })
                .unwrap();
            }
            assert_eq!(set.len(), 4);
            assert!(set.try_join_next().is_none(), "nothing finished yet");
            let mut order = Vec::new();
            for i in (0..4).rev() {
                gos[i].send(()).unwrap();
                order.push(set.join_next().expect("a task left").unwrap());
            }
            assert_eq!(order, [3, 2, 1, 0]);
            assert!(set.is_empty());
            assert!(set.join_next().is_none());
            s.shutdown();
        },
    );
}

#[test]
fn join_next_inside_a_task_and_try_join_next() {
    in_child(
        module_path!(),
        "join_next_inside_a_task_and_try_join_next",
        || {
            let s = sched();
            let sum = s.block_on(|| {
                let mut set = JoinSet::new();
                for ms in [30u64, 10, 20] {
                    set.spawn(move || {
                        gofer::sleep(Duration::from_millis(ms));
                        ms
                    });
                }
                let first = set.join_next().unwrap().unwrap();
                assert_eq!(first, 10, "the shortest sleep first");
                let mut second = None;
                wait_until("try_join_next to give the next result", || {
                    gofer::sleep(Duration::from_millis(1));
                    second = set.try_join_next();
                    second.is_some()
                });
                assert_eq!(set.len(), 1);
                let mut sum = first + second.unwrap().unwrap();
                while let Some(r) = set.join_next() {
                    sum += r.unwrap();
                }
                sum
            });
            assert_eq!(sum, 60);
            s.shutdown();
        },
    );
}

#[test]
fn cancel_all_leaves_the_tasks_to_be_joined_as_cancelled() {
    in_child(
        module_path!(),
        "cancel_all_leaves_the_tasks_to_be_joined_as_cancelled",
        || {
            let s = sched();
            let (_tx, rx) = chan::bounded::<()>(0);
            let mut set = JoinSet::new();
            for _ in 0..5 {
                let rx = rx.clone();
                set.spawn_with(gofer::Builder::new().scheduler(&s), move || {
                    let _ = rx.recv();
                    "returned"
                })
                .unwrap();
            }
            let done = set
                .spawn_with(gofer::Builder::new().scheduler(&s), || "quick")
                .unwrap();
            let _ = done;
            let first = set.join_next().unwrap();
            assert_eq!(first.unwrap(), "quick");
            set.cancel_all();
            assert_eq!(set.len(), 5);
            let mut n = 0;
            while let Some(r) = set.join_next() {
                assert!(r.unwrap_err().is_cancelled());
                n += 1;
            }
            assert_eq!(n, 5);
            s.shutdown();
        },
    );
}

#[test]
fn dropping_the_set_cancels_its_tasks() {
    in_child(module_path!(), "dropping_the_set_cancels_its_tasks", || {
        let s = sched();
        let (_tx, rx) = chan::bounded::<()>(0);
        let unwound = Arc::new(AtomicBool::new(false));
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        {
            let mut set = JoinSet::new();
            let f = Flag(unwound.clone());
            set.spawn_with(gofer::Builder::new().scheduler(&s), move || {
                let _f = f;
                let _ = rx.recv();
            })
            .unwrap();
        }
        // The scheduler's shutdown would wait for ever for the task if the
        // drop had not cancelled it.
        s.shutdown();
        assert!(unwound.load(Ordering::SeqCst));
    });
}

#[test]
fn join_next_with_id_says_which_task_each_result_came_from() {
    in_child(
        module_path!(),
        "join_next_with_id_says_which_task_each_result_came_from",
        || {
            let s = sched();
            let mut gos = Vec::new();
            let mut ids = Vec::new();
            let mut set = JoinSet::new();
            for i in 0..3u32 {
                let (tx, rx) = chan::bounded::<()>(0);
                gos.push(tx);
                let id = set
                    .spawn_with(gofer::Builder::new().scheduler(&s), move || {
                        rx.recv().unwrap();
                        if i == 1 {
                            panic!("task one fails");
                        }
                        i
                    })
                    .unwrap();
                ids.push(id);
            }
            assert!(
                set.try_join_next_with_id().is_none(),
                "nothing finished yet"
            );
            // Released in the order 2, 1, 0: each result names its task, a
            // failed one too.
            gos[2].send(()).unwrap();
            let (id, r) = set.join_next_with_id().expect("a task left");
            assert_eq!((id, r.unwrap()), (ids[2], 2));
            gos[1].send(()).unwrap();
            let (id, r) = set.join_next_with_id().expect("a task left");
            assert_eq!(id, ids[1]);
            assert!(r.unwrap_err().is_panic());
            gos[0].send(()).unwrap();
            let mut last = None;
            wait_until("try_join_next_with_id gives the last result", || {
                last = set.try_join_next_with_id();
                last.is_some()
            });
            let (id, r) = last.unwrap();
            assert_eq!((id, r.unwrap()), (ids[0], 0));
            assert!(set.join_next_with_id().is_none());
            s.shutdown();
        },
    );
}

#[test]
fn join_next_timeout_waits_at_most_its_timeout() {
    in_child(
        module_path!(),
        "join_next_timeout_waits_at_most_its_timeout",
        || {
            let s = sched();
            let (go, rx) = chan::bounded::<()>(0);
            let got = s.block_on(move || {
                let mut set = JoinSet::new();
                let id = set.spawn(move || {
                    rx.recv().unwrap();
                    5u32
                });
                // Nothing finishes: it gives up, and the task stays in the set.
                let t0 = std::time::Instant::now();
                assert!(set.join_next_timeout(Duration::from_millis(50)).is_none());
                assert!(t0.elapsed() >= Duration::from_millis(50));
                assert!(set.join_next_timeout_with_id(Duration::ZERO).is_none());
                assert_eq!(set.len(), 1);
                go.send(()).unwrap();
                let (got_id, r) = set
                    .join_next_timeout_with_id(common::PATIENCE)
                    .expect("finished in time");
                assert_eq!(got_id, id);
                // An empty set answers at once, whatever the timeout.
                assert!(set.join_next_timeout(Duration::MAX).is_none());
                r.unwrap()
            });
            assert_eq!(got, 5);
            s.shutdown();
        },
    );
}
