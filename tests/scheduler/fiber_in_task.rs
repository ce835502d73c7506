//! Fibers resumed from inside tasks: whatever switches the task out while
//! the fiber runs (yield, park, a channel, a sleep) suspends the whole task
//! with the fiber on top, and the task resumes, possibly on another thread,
//! right where the fiber left off.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::{thread_name, PATIENCE};
use gofer::fiber::{Fiber, FiberResult, Generator, Yielder};
use gofer::{Builder, Scheduler};

fn sched(name: &str, threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

#[test]
fn a_fiber_that_yields_the_task_lets_other_tasks_run_and_resumes_in_place() {
    let s = sched("fit-yield", 1);
    let ticks = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (t2, s2) = (ticks.clone(), stop.clone());
    // Another task on the same (only) thread: it only runs while the first
    // task is switched out.
    let ticker = s.spawn(move || {
        while !s2.load(Ordering::SeqCst) {
            t2.fetch_add(1, Ordering::SeqCst);
            gofer::yield_now();
        }
    });
    let t1 = ticks.clone();
    let host = s.spawn(move || {
        let mut f = Fiber::new(move |y: &Yielder<u64, u64>, mut n: u64| {
            let mut seen = 0;
            while n > 0 {
                let before = t1.load(Ordering::SeqCst);
                gofer::yield_now(); // the task switches out, fiber and all
                if t1.load(Ordering::SeqCst) > before {
                    seen += 1;
                }
                n = y.suspend(seen); // back to the task code that resumed us
            }
            seen
        });
        let mut last = 0;
        for _ in 0..100 {
            last = f.resume(1).into_yield().expect("suspended");
        }
        assert_eq!(f.resume(0), FiberResult::Return(last));
        last
    });
    let seen = host.join().expect("the host task finished");
    stop.store(true, Ordering::SeqCst);
    ticker.join().expect("the ticker finished");
    assert_eq!(seen, 100, "the other task ran at every yield");
    s.shutdown();
}

#[test]
fn a_fiber_that_parks_the_task_resumes_when_the_task_is_unparked() {
    let s = sched("fit-park", 2);
    let (tx, rx) = mpsc::channel::<gofer::Task>();
    let ready = Arc::new(AtomicBool::new(false));
    let r = ready.clone();
    let host = s.spawn(move || {
        let mut f = Fiber::new(move |y: &Yielder<(), &'static str>, ()| {
            y.suspend("before");
            tx.send(gofer::current()).expect("the test waits");
            while !r.load(Ordering::SeqCst) {
                gofer::park(); // parks the task, with this fiber on top
            }
            "after"
        });
        let a = f.resume(()).into_yield().expect("suspended");
        let b = f.resume(()).into_return().expect("returned");
        (a, b)
    });
    let task = rx
        .recv_timeout(PATIENCE)
        .expect("the fiber is about to park");
    assert!(task.is_coroutine(), "the task, not the fiber, is current");
    ready.store(true, Ordering::SeqCst);
    task.unpark();
    assert_eq!(host.join().expect("finished"), ("before", "after"));
    s.shutdown();
}

#[test]
fn a_task_parked_inside_a_fiber_can_resume_on_another_thread() {
    // Two Processers. The host task parks inside its fiber on Processer k;
    // then a task pinned to k keeps that thread busy, and a task pinned to
    // the other Processer unparks the host: it can only run there.
    let s = sched("fit-move", 2);
    let (tx, rx) = mpsc::channel::<(gofer::Task, String)>();
    let go = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let (g, d) = (go.clone(), done.clone());
    // SAFETY: the host reads thread-local state only through
    // `thread_name`, an `#[inline(never)]` accessor that never switches.
    let host = unsafe { Builder::new().migratable() }
        .scheduler(&s)
        .spawn(move || {
            let mut f = Fiber::new(move |y: &Yielder<(), String>, ()| {
                let before = thread_name();
                tx.send((gofer::current(), before.clone()))
                    .expect("the test waits");
                while !g.load(Ordering::SeqCst) {
                    gofer::park();
                }
                let after = thread_name();
                // The fiber's own switch still goes back to the task's code.
                y.suspend(after.clone());
                format!("{before}->{after}")
            });
            let after = f.resume(()).into_yield().expect("suspended");
            // Task code right after the fiber's suspend: on the new thread.
            assert_eq!(thread_name(), after);
            let path = f.resume(()).into_return().expect("returned");
            d.store(true, Ordering::SeqCst);
            path
        })
        .expect("spawned");
    let (task, before) = rx.recv_timeout(PATIENCE).expect("the fiber parked");
    let k: usize = before
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a Processer thread name");
    let other = 1 - k;
    let d2 = done.clone();
    let (busy_tx, busy_rx) = mpsc::channel();
    let hog = Builder::new()
        .scheduler(&s)
        .pin(k)
        .spawn(move || {
            busy_tx.send(()).expect("the test waits");
            // Hold Processer k until the host is done (no switch: nothing
            // else runs on k meanwhile, and nothing is stolen by it).
            while !d2.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
        })
        .expect("spawned");
    busy_rx.recv_timeout(PATIENCE).expect("Processer k is busy");
    go.store(true, Ordering::SeqCst);
    Builder::new()
        .scheduler(&s)
        .pin(other)
        .spawn(move || task.unpark())
        .expect("spawned")
        .join()
        .expect("unparked");
    let path = host.join().expect("the host finished");
    hog.join().expect("the hog finished");
    assert_eq!(path, format!("fit-move-{k}->fit-move-{other}"));
    s.shutdown();
}

#[test]
fn a_task_on_a_dense_stack_can_switch_out_inside_a_fiber() {
    // With dense stacks the Processer checks, at every switch out, that the
    // saved stack pointer is inside the task's stack: a task that switched
    // out from its fiber's stack is no overflow.
    let s = Scheduler::builder()
        .min_threads(2)
        .dense_stacks(true)
        .name("fit-dense")
        .build()
        .expect("valid config");
    let hosts: Vec<_> = (0..8u64)
        .map(|i| {
            s.spawn(move || {
                let mut g = Generator::new(move |y| {
                    for k in 0..50u64 {
                        gofer::yield_now();
                        if k % 10 == 0 {
                            gofer::sleep(Duration::from_millis(1));
                        }
                        y.yield_(i * 1000 + k);
                    }
                });
                let mut sum = 0;
                for v in g.by_ref() {
                    sum += v;
                    gofer::yield_now(); // and from the task's own stack too
                }
                sum
            })
        })
        .collect();
    for (i, h) in hosts.into_iter().enumerate() {
        let i = i as u64;
        let expected: u64 = (0..50).map(|k| i * 1000 + k).sum();
        assert_eq!(h.join().expect("no overflow reported"), expected);
    }
    s.shutdown();
}

#[test]
fn a_fiber_inside_a_task_waits_on_a_channel_and_a_future() {
    let s = sched("fit-chan", 2);
    let (tx, rx) = gofer::chan::bounded::<u32>(1);
    let (otx, orx) = futures::channel::oneshot::channel::<u32>();
    let host = s.spawn(move || {
        let mut g = Generator::new(move |y| {
            y.yield_(rx.recv().expect("a value")); // parks the task
            y.yield_(gofer::block_on_future(orx).expect("a value")); // too
        });
        (g.next(), g.next(), g.next())
    });
    let feeder = s.spawn(move || {
        tx.send(1).expect("the host receives");
        otx.send(2).expect("the host receives");
    });
    feeder.join().expect("fed");
    assert_eq!(host.join().expect("finished"), (Some(1), Some(2), None));
    s.shutdown();
}
