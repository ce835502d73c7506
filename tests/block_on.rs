//! `block_on` returns when its closure is done: the calling thread runs the
//! closure's task and nothing else, so an unrelated task that blocks its
//! thread cannot hold the closure up.

mod common;

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
