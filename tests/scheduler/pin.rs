//! Pinned tasks run only on their Processer, across yields and wake-ups.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use common::{thread_id, thread_name, PATIENCE};
use gofer::{Builder, Scheduler};

fn two_threads(name: &str) -> Scheduler {
    Scheduler::builder()
        .min_threads(2)
        .max_threads(2)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

#[test]
fn pinned_tasks_stay_on_their_processer_across_yields() {
    let s = two_threads("pin");
    let p0 = Builder::new()
        .scheduler(&s)
        .pin(0)
        .spawn(|| (thread_id(), thread_name()))
        .expect("spawned")
        .join()
        .expect("returned");
    assert_eq!(p0.1, "pin-0");
    let handles: Vec<_> = (0..1000)
        .map(|_| {
            Builder::new()
                .scheduler(&s)
                .pin(1)
                .spawn(|| {
                    let mut seen = Vec::with_capacity(11);
                    seen.push(thread_id());
                    for _ in 0..10 {
                        gofer::yield_now();
                        seen.push(thread_id());
                    }
                    seen
                })
                .expect("spawned")
        })
        .collect();
    let mut p1 = None;
    for h in handles {
        let seen = h.join().expect("returned");
        assert_eq!(seen.len(), 11);
        for t in seen {
            let first = *p1.get_or_insert(t);
            assert_eq!(t, first, "a task pinned to Processer 1 ran on two threads");
        }
    }
    let p1 = p1.expect("tasks ran");
    assert_ne!(p1, p0.0, "Processer 1 runs on its own thread");
    s.shutdown();
}

#[test]
fn pinned_tasks_spawned_from_another_processer_run_on_theirs() {
    let s = two_threads("pinx");
    let names = Builder::new()
        .scheduler(&s)
        .pin(0)
        .spawn(|| {
            let kids: Vec<_> = (0..100)
                .map(|_| {
                    gofer::go!(pin = 1, || {
                        let a = thread_name();
                        gofer::yield_now();
                        (a, thread_name())
                    })
                })
                .collect();
            let mine = thread_name();
            let theirs: Vec<_> = kids.into_iter().map(|k| k.join().expect("ok")).collect();
            (mine, theirs)
        })
        .expect("spawned")
        .join()
        .expect("returned");
    assert_eq!(names.0, "pinx-0");
    for (a, b) in names.1 {
        assert_eq!((a.as_str(), b.as_str()), ("pinx-1", "pinx-1"));
    }
    s.shutdown();
}

#[test]
fn a_pinned_task_woken_from_elsewhere_resumes_on_its_processer() {
    let s = two_threads("pinw");
    let (tx, rx) = mpsc::channel();
    let go_on = Arc::new(AtomicBool::new(false));
    let g = go_on.clone();
    let sleeper = Builder::new()
        .scheduler(&s)
        .pin(1)
        .spawn(move || {
            let before = thread_name();
            tx.send(gofer::current()).expect("receiver alive");
            while !g.load(Ordering::Acquire) {
                gofer::park();
            }
            (before, thread_name())
        })
        .expect("spawned");
    let handle = rx.recv_timeout(PATIENCE).expect("the pinned task started");
    // Wake it from a task running on Processer 0.
    let g = go_on.clone();
    Builder::new()
        .scheduler(&s)
        .pin(0)
        .spawn(move || {
            g.store(true, Ordering::Release);
            handle.unpark();
        })
        .expect("spawned")
        .join()
        .expect("returned");
    let (before, after) = sleeper.join().expect("returned");
    assert_eq!(before, "pinw-1");
    assert_eq!(after, "pinw-1");
    s.shutdown();
}
