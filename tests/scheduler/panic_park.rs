//! A task that parks in the middle of an unwind (a destructor that sleeps,
//! locks or waits on a channel while a panic, or the forced unwind of a
//! dropped fiber or generator, passes through) stays on its thread until
//! the unwind is over: std counts panics per thread, and `catch_unwind`
//! lowers the count of whichever thread it ends on.
//!
//! Each test runs in a child process: an unwind that moves threads leaves
//! std's panic counts wrong for the rest of the process.

use crate::common;

use std::sync::mpsc;
use std::thread::ThreadId;
use std::time::Duration;

use common::{in_child, thread_id};

/// Tasks per test that park while unwinding.
const TASKS: usize = 200;

/// What a destructor saw before and after it parked.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Seen {
    thread: ThreadId,
    panicking: bool,
}

fn seen() -> Seen {
    Seen {
        thread: thread_id(),
        panicking: std::thread::panicking(),
    }
}

/// Parks its task in its destructor (a sleep, then a few yields), and
/// reports what it saw on either side.
struct ParkOnDrop(mpsc::Sender<(Seen, Seen)>);

impl Drop for ParkOnDrop {
    fn drop(&mut self) {
        let before = seen();
        gofer::sleep(Duration::from_millis(1));
        for _ in 0..3 {
            gofer::yield_now();
        }
        let after = seen();
        let _ = self.0.send((before, after));
    }
}

/// Two Processers, with `yielders` tasks yielding in a loop until told to
/// stop. With none, a task woken on one Processer is often stolen by the
/// other, idle one; with some, the Dispatcher may call a Processer busy in
/// a panic hook's output blocked and rescue its queue.
fn busy_sched(
    name: &str,
    yielders: usize,
) -> (
    gofer::Scheduler,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let sched = gofer::Scheduler::builder()
        .min_threads(2)
        .name(name)
        .build()
        .unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    for _ in 0..yielders {
        let stop = stop.clone();
        sched.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                gofer::yield_now();
            }
        });
    }
    (sched, stop)
}

fn check_all(rx: mpsc::Receiver<(Seen, Seen)>) {
    let mut moved = 0;
    for _ in 0..TASKS {
        let (before, after) = rx
            .recv_timeout(common::PATIENCE)
            .expect("every destructor reports");
        assert!(before.panicking, "the destructor runs during an unwind");
        assert!(
            after.panicking,
            "after parking, the destructor no longer sees the unwind: {before:?} -> {after:?}"
        );
        if before.thread != after.thread {
            moved += 1;
        }
    }
    assert_eq!(moved, 0, "{moved} of {TASKS} unwinds moved threads");
}

#[test]
fn a_task_that_parks_while_unwinding_a_panic_stays_on_its_thread() {
    in_child(
        module_path!(),
        "a_task_that_parks_while_unwinding_a_panic_stays_on_its_thread",
        || {
            let (sched, stop) = busy_sched("unwind-panic", 4);
            let (tx, rx) = mpsc::channel();
            let handles: Vec<_> = (0..TASKS)
                .map(|i| {
                    let tx = tx.clone();
                    sched.spawn(move || {
                        let _g = ParkOnDrop(tx);
                        panic!("task {i} panics");
                    })
                })
                .collect();
            check_all(rx);
            for h in handles {
                assert!(h.join().unwrap_err().is_panic());
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            common::check_threads_clean(&sched, 2);
            sched.shutdown();
        },
    );
}

#[test]
fn a_task_that_parks_in_a_dropped_fibers_unwind_stays_on_its_thread() {
    in_child(
        module_path!(),
        "a_task_that_parks_in_a_dropped_fibers_unwind_stays_on_its_thread",
        || {
            use gofer::fiber::{Fiber, Generator, Yielder};
            let (sched, stop) = busy_sched("unwind-fiber", 0);
            let (tx, rx) = mpsc::channel();
            let handles: Vec<_> = (0..TASKS)
                .map(|i| {
                    let tx = tx.clone();
                    sched.spawn(move || {
                        if i % 2 == 0 {
                            let mut f = Fiber::new(move |y: &Yielder<(), ()>, ()| {
                                let _g = ParkOnDrop(tx);
                                y.suspend(());
                            });
                            assert!(matches!(f.resume(()), gofer::fiber::FiberResult::Yield(())));
                            drop(f); // the forced unwind parks this task
                        } else {
                            let mut g = Generator::new(move |y| {
                                let _g = ParkOnDrop(tx);
                                loop {
                                    y.yield_(1u32);
                                }
                            });
                            assert_eq!(g.next(), Some(1));
                            drop(g);
                        }
                    })
                })
                .collect();
            check_all(rx);
            for h in handles {
                h.join().unwrap();
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            common::check_threads_clean(&sched, 2);
            sched.shutdown();
        },
    );
}
