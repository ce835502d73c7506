//! JoinSet: results in completion order, `len`, `try_join_next`,
//! `cancel_all`, cancel-on-drop, and `join_next` on a plain thread.
//! Cases that could hang run in a child process with a watchdog.

mod common;

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
    in_child("join_next_gives_results_in_completion_order", || {
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
    });
}

#[test]
fn join_next_inside_a_task_and_try_join_next() {
    in_child("join_next_inside_a_task_and_try_join_next", || {
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
    });
}

#[test]
fn cancel_all_leaves_the_tasks_to_be_joined_as_cancelled() {
    in_child(
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
    in_child("dropping_the_set_cancels_its_tasks", || {
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
