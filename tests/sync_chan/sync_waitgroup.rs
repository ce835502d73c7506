//! `gofer::sync::WaitGroup`: waiting for many tasks, many waiters, reuse,
//! misuse.

use crate::common;
use crate::sync_util;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use gofer::sync::WaitGroup;
use sync_util::{join_all, sched, wait_for, within};

// In a child process: ten thousand stacks alive at once take a third of the
// process's memory mappings (`vm.max_map_count`), which the tests of other
// modules running beside it need too.
#[test]
fn wait_returns_once_ten_thousand_tasks_are_done() {
    common::in_child(
        module_path!(),
        "wait_returns_once_ten_thousand_tasks_are_done",
        || {
            const TASKS: usize = 10_000;
            let s = sched(2);
            let wg = WaitGroup::new();
            // Plain (Relaxed) writes, one slot per task: wait() must make every one
            // of them visible.
            let slots: Arc<Vec<AtomicUsize>> =
                Arc::new((0..TASKS).map(|_| AtomicUsize::new(0)).collect());
            for i in 0..TASKS {
                wg.add(1);
                let (wg, slots) = (wg.clone(), slots.clone());
                // Detached: the wait group is the only way to know they are done.
                drop(s.spawn(move || {
                    if i % 2 == 0 {
                        gofer::yield_now();
                    }
                    slots[i].store(i + 1, Ordering::Relaxed);
                    wg.done();
                }));
            }
            let wg2 = wg.clone();
            let slots2 = slots.clone();
            // Wait from a task; the thread waits for it (bounded).
            let checker = s.spawn(move || {
                wg2.wait();
                (0..TASKS).all(|i| slots2[i].load(Ordering::Relaxed) == i + 1)
            });
            assert_eq!(join_all(vec![checker]), vec![true]);
            assert_eq!(wg.count(), 0);
            s.shutdown();
        },
    );
}

#[test]
fn waiters_on_tasks_and_threads_are_all_released() {
    const WORKERS: usize = 100;
    const TASK_WAITERS: usize = 10;
    const THREAD_WAITERS: usize = 3;
    let s = sched(2);
    let wg = WaitGroup::new();
    let done = Arc::new(AtomicUsize::new(0));
    wg.add(WORKERS);
    let gate = WaitGroup::new();
    gate.add(1);
    let waiters_seen = Arc::new(AtomicUsize::new(0));
    let check = |wg: WaitGroup, done: Arc<AtomicUsize>, seen: Arc<AtomicUsize>| {
        move || {
            seen.fetch_add(1, Ordering::SeqCst);
            wg.wait();
            done.load(Ordering::SeqCst)
        }
    };
    let task_waiters: Vec<_> = (0..TASK_WAITERS)
        .map(|_| s.spawn(check(wg.clone(), done.clone(), waiters_seen.clone())))
        .collect();
    let thread_waiters: Vec<_> = (0..THREAD_WAITERS)
        .map(|_| std::thread::spawn(check(wg.clone(), done.clone(), waiters_seen.clone())))
        .collect();
    wait_for("the waiters to start", || {
        waiters_seen.load(Ordering::SeqCst) == TASK_WAITERS + THREAD_WAITERS
    });
    // Workers start only now, and finish half on tasks, half on threads.
    let workers: Vec<_> = (0..WORKERS)
        .map(|i| {
            let (wg, done, gate) = (wg.clone(), done.clone(), gate.clone());
            let work = move || {
                gate.wait();
                done.fetch_add(1, Ordering::SeqCst);
                wg.done();
            };
            if i % 2 == 0 {
                Ok(s.spawn(work))
            } else {
                Err(std::thread::spawn(work))
            }
        })
        .collect();
    gate.done();
    for r in join_all(task_waiters) {
        assert_eq!(r, WORKERS, "a waiter returned before every done()");
    }
    let rs = within(move || {
        thread_waiters
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert!(rs.iter().all(|&r| r == WORKERS));
    let (tasks, threads): (Vec<_>, Vec<_>) = workers.into_iter().partition(|w| w.is_ok());
    join_all(tasks.into_iter().map(|w| w.ok().unwrap()).collect());
    within(move || {
        threads
            .into_iter()
            .for_each(|w| w.err().unwrap().join().unwrap())
    });
    s.shutdown();
}

#[test]
fn wait_with_a_zero_count_returns_at_once() {
    let wg = WaitGroup::default();
    wg.wait();
    wg.add(2);
    wg.done();
    wg.done();
    wg.wait();
    assert_eq!(format!("{wg:?}"), "WaitGroup { count: 0 }");
}

#[test]
fn group_is_reusable_after_reaching_zero() {
    let s = sched(2);
    let wg = WaitGroup::new();
    let n = Arc::new(AtomicUsize::new(0));
    for round in 1..=5 {
        for _ in 0..20 {
            wg.add(1);
            let (wg, n) = (wg.clone(), n.clone());
            drop(s.spawn(move || {
                n.fetch_add(1, Ordering::SeqCst);
                wg.done();
            }));
        }
        let wg2 = wg.clone();
        within(move || wg2.wait());
        assert_eq!(n.load(Ordering::SeqCst), round * 20);
    }
    s.shutdown();
}

#[test]
fn clones_share_one_count() {
    let a = WaitGroup::new();
    let b = a.clone();
    a.add(3);
    assert_eq!(b.count(), 3);
    b.done();
    assert_eq!(a.count(), 2);
}

#[test]
#[should_panic(expected = "WaitGroup::done called more times than add")]
fn done_below_zero_panics_with_a_clear_message() {
    let wg = WaitGroup::new();
    wg.add(1);
    wg.done();
    wg.done();
}

#[test]
fn done_below_zero_in_a_task_fails_that_task_only() {
    let s = sched(1);
    let wg = WaitGroup::new();
    let wg2 = wg.clone();
    let h = s.spawn(move || wg2.done());
    let err = within(move || h.join()).expect_err("the task panicked");
    assert!(err.to_string().contains("more times than add"), "{err}");
    // The count was left alone.
    assert_eq!(wg.count(), 0);
    s.shutdown();
}

/// A timed wait gives up while a job is outstanding, in a task and on a
/// plain thread, and returns `true` once the count reaches zero.
#[test]
fn wait_timeout_gives_up_while_a_job_is_outstanding_and_succeeds_after_done() {
    use std::time::Duration;
    within(|| {
        let s = sched(2);
        let wg = WaitGroup::new();
        wg.add(1);
        let w = wg.clone();
        let in_task = s.spawn(move || w.wait_timeout(Duration::from_millis(20)));
        assert!(
            !in_task.join().unwrap(),
            "a task's timed wait returned true with a job left"
        );
        assert!(
            !wg.wait_timeout(Duration::from_millis(20)),
            "a thread's timed wait returned true"
        );
        assert_eq!(wg.count(), 1, "giving up changed the count");
        let w = wg.clone();
        let waiter = s.spawn(move || w.wait_timeout(Duration::from_secs(30)));
        wg.done();
        assert!(
            waiter.join().unwrap(),
            "the timed wait missed the last done"
        );
        assert!(
            wg.wait_timeout(Duration::ZERO),
            "a zero count must not wait"
        );
        s.shutdown();
    });
}
