//! `block_on` returns when its closure is done: the calling thread runs the
//! closure's task and nothing else, so an unrelated task that blocks its
//! thread cannot hold the closure up.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::thread_id;
use gofer::Scheduler;

/// How long each unrelated task blocks its thread.
const BLOCK: Duration = Duration::from_secs(2);

#[test]
fn block_on_returns_when_its_closure_is_done_despite_blocking_tasks() {
    let s = Scheduler::builder()
        .min_threads(1)
        .max_threads(8)
        .name("bo-block")
        .build()
        .expect("valid config");
    // Unrelated tasks that block their thread in the kernel, queued before
    // the call: a caller thread that took one of them would be stuck in it.
    let started = Arc::new(AtomicUsize::new(0));
    let blockers: Vec<_> = (0..4)
        .map(|_| {
            let started = started.clone();
            s.spawn(move || {
                started.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(BLOCK);
            })
        })
        .collect();
    common::wait_until("a blocker runs", || started.load(Ordering::Relaxed) > 0);
    let caller = thread_id();
    let start = Instant::now();
    let (v, ran_on) = s.block_on(|| {
        // Park several times, so the caller thread is idle in between and
        // could have picked up a blocker.
        for _ in 0..5 {
            gofer::sleep(Duration::from_millis(1));
        }
        (7, thread_id())
    });
    let took = start.elapsed();
    assert_eq!(v, 7);
    assert_eq!(ran_on, caller, "the closure ran on the calling thread");
    assert!(
        took < BLOCK / 2,
        "a 5 ms closure took {took:?}: the caller ran a blocking task"
    );
    for b in blockers {
        b.join().expect("blocker");
    }
    s.shutdown();
}

#[test]
fn tasks_spawned_inside_block_on_run_on_the_schedulers_processers() {
    let s = Scheduler::builder()
        .min_threads(2)
        .name("bo-kids")
        .build()
        .expect("valid config");
    let caller = thread_id();
    let kid_threads = s.block_on(|| {
        let kids: Vec<_> = (0..100)
            .map(|_| {
                gofer::go!(|| {
                    gofer::yield_now();
                    thread_id()
                })
            })
            .collect();
        kids.into_iter()
            .map(|k| k.join().expect("kid"))
            .collect::<Vec<_>>()
    });
    assert!(
        kid_threads.iter().all(|t| *t != caller),
        "a child task ran on the block_on caller's thread"
    );
    s.shutdown();
}

#[test]
fn block_on_runs_a_closure_that_borrows_and_mutates_the_callers_data() {
    let s = gofer::Scheduler::builder().min_threads(2).build().unwrap();
    let text = String::from("one two three");
    let mut seen = Vec::new();
    // Returns a value that borrows too (`&str` into `text`).
    let first: &str = s.block_on(|| {
        for w in text.split(' ') {
            seen.push(w.len());
            gofer::yield_now(); // switches while holding the borrows
        }
        text.split(' ').next().unwrap()
    });
    assert_eq!(first, "one");
    assert_eq!(seen, [3, 3, 5]);
    // From inside a task too: the task parks until the inner one is done.
    let total = s.block_on(|| {
        let mut acc = 0usize;
        let inner = s.block_on(|| {
            acc += seen.iter().sum::<usize>();
            acc
        });
        (inner, acc)
    });
    assert_eq!(total, (11, 11));
    s.shutdown();
}

#[test]
fn a_panicking_borrowing_closure_is_re_raised_after_it_dropped_its_borrows() {
    let s = gofer::Scheduler::builder().min_threads(1).build().unwrap();
    let mut log = Vec::new();
    struct Note<'a>(&'a mut Vec<&'static str>);
    impl Drop for Note<'_> {
        fn drop(&mut self) {
            self.0.push("dropped in the task");
        }
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        s.block_on(|| {
            let _n = Note(&mut log);
            gofer::sleep(std::time::Duration::from_millis(1));
            panic!("on purpose");
        })
    }));
    assert!(r.is_err());
    assert_eq!(log, ["dropped in the task"]);
    s.shutdown();
}
