//! `gofer::task::CancelToken` and `gofer::task::with_done`: waking tasks
//! and threads that wait on a token, the `cancelled(token)` arm of
//! `select!`, `Select` over `token.done()`, child tokens (the parent
//! cancels its children, never the reverse; a child made during or after a
//! cancel is cancelled), drop guards, bounded waits, async waits, and a
//! task's end as a channel.
//!
//! Waits that could hang on a broken token run in a child process with a
//! watchdog (`in_child`) or are bounded by `PATIENCE`.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{in_child, PATIENCE};
use gofer::chan::{after, never, unbounded, RecvTimeoutError, Select};
use gofer::task::{with_done, CancelToken};
use gofer::{select, Scheduler};

fn sched(threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads)
        .build()
        .expect("valid scheduler config")
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn cancel_wakes_every_task_and_thread_waiting_on_any_clone() {
    in_child(
        module_path!(),
        "cancel_wakes_every_task_and_thread_waiting_on_any_clone",
        || {
            const TASKS: usize = 20;
            const THREADS: usize = 3;
            let s = sched(2);
            let token = CancelToken::new();
            let (ready_tx, ready_rx) = unbounded();
            let (woke_tx, woke_rx) = unbounded();
            let mut tasks = Vec::new();
            for i in 0..TASKS {
                let (t, ready, woke) = (token.clone(), ready_tx.clone(), woke_tx.clone());
                tasks.push(s.spawn(move || {
                    ready.send(()).unwrap();
                    t.cancelled();
                    assert!(t.is_cancelled(), "woken only once cancelled");
                    woke.send(i).unwrap();
                }));
            }
            let threads: Vec<_> = (0..THREADS)
                .map(|i| {
                    let (t, ready, woke) = (token.clone(), ready_tx.clone(), woke_tx.clone());
                    std::thread::spawn(move || {
                        ready.send(()).unwrap();
                        t.cancelled();
                        woke.send(TASKS + i).unwrap();
                    })
                })
                .collect();
            for _ in 0..TASKS + THREADS {
                ready_rx
                    .recv_timeout(PATIENCE)
                    .expect("every waiter starts");
            }
            // Nobody passes the wait before the cancel.
            assert_eq!(
                woke_rx.recv_timeout(ms(100)),
                Err(RecvTimeoutError::Timeout),
                "a waiter woke before the cancel"
            );
            assert!(!token.is_cancelled());
            token.clone().cancel();
            let mut seen = [false; TASKS + THREADS];
            for _ in 0..TASKS + THREADS {
                let i = woke_rx.recv_timeout(PATIENCE).expect("every waiter wakes");
                assert!(!seen[i], "waiter {i} woke twice");
                seen[i] = true;
            }
            for t in tasks {
                t.join().unwrap();
            }
            for t in threads {
                t.join().unwrap();
            }
            // Waiting on a cancelled token returns at once; cancelling again is
            // harmless.
            token.cancel();
            token.cancelled();
            s.shutdown();
        },
    );
}

#[test]
fn the_cancelled_arm_of_select_fires_only_once_cancelled() {
    in_child(
        module_path!(),
        "the_cancelled_arm_of_select_fires_only_once_cancelled",
        || {
            let s = sched(2);
            let token = CancelToken::new();
            let (tx, rx) = unbounded::<u32>();
            let (got_tx, got_rx) = unbounded();
            let t = token.clone();
            let h = s.spawn(move || {
                let mut values = 0;
                loop {
                    select! {
                        recv(rx) -> v => {
                            v.unwrap();
                            values += 1;
                            got_tx.send(()).unwrap();
                        }
                        cancelled(t) => return values,
                    }
                }
            });
            // While the token stands, the values go through the other arm.
            for i in 0..5 {
                tx.send(i).unwrap();
                got_rx.recv_timeout(PATIENCE).expect("the value arm fires");
            }
            assert!(!h.is_finished());
            token.cancel();
            assert_eq!(h.join().unwrap(), 5);
            // Ready at once on a cancelled token, also on a plain thread, also
            // written with a reference and a temporary child.
            let fired = select! {
                recv(never::<u32>()) -> _ => false,
                cancelled(&token) => true,
            };
            assert!(fired);
            let fired = select! {
                cancelled(token.child_token()) => true,
                default(PATIENCE) => false,
            };
            assert!(fired, "a child of a cancelled token is cancelled");
            s.shutdown();
        },
    );
}

#[test]
fn a_standing_token_lets_other_arms_and_the_default_win() {
    let token = CancelToken::new();
    let (tx, rx) = unbounded::<u32>();
    tx.send(7).unwrap();
    let got = select! {
        recv(rx) -> v => v.unwrap(),
        cancelled(token) => panic!("not cancelled"),
    };
    assert_eq!(got, 7);
    let start = Instant::now();
    let timed_out = select! {
        cancelled(token) => false,
        default(ms(30)) => true,
    };
    assert!(timed_out);
    assert!(start.elapsed() >= ms(30));
    let none = select! {
        cancelled(token) => false,
        default => true,
    };
    assert!(none);
}

#[test]
fn select_with_the_token_channel_wakes_on_cancel() {
    in_child(
        module_path!(),
        "select_with_the_token_channel_wakes_on_cancel",
        || {
            let s = sched(1);
            let token = CancelToken::new();
            let (_tx, rx) = unbounded::<u32>();
            let t = token.clone();
            let (started_tx, started_rx) = unbounded();
            let h = s.spawn(move || {
                let mut sel = Select::new();
                let data = sel.recv(&rx);
                let stop = sel.recv(t.done());
                started_tx.send(()).unwrap();
                let oper = sel.select();
                assert_ne!(oper.index(), data);
                assert_eq!(oper.index(), stop);
                oper.recv(t.done())
                    .expect_err("the token's channel carries nothing");
                t.is_cancelled()
            });
            started_rx.recv().unwrap();
            token.cancel();
            assert!(h.join().unwrap(), "the select returned once cancelled");
            s.shutdown();
        },
    );
}

#[test]
fn the_parent_cancels_its_descendants_and_never_the_reverse() {
    in_child(
        module_path!(),
        "the_parent_cancels_its_descendants_and_never_the_reverse",
        || {
            let s = sched(2);
            let root = CancelToken::new();
            let a = root.child_token();
            let b = root.child_token();
            let a1 = a.child_token();
            let a2 = a.child_token();
            // Cancelling a child cancels its own subtree only.
            a2.cancel();
            assert!(a2.is_cancelled());
            assert!(!a.is_cancelled() && !a1.is_cancelled() && !root.is_cancelled());
            a.cancel();
            assert!(a1.is_cancelled());
            assert!(
                !root.is_cancelled() && !b.is_cancelled(),
                "not upwards, not sideways"
            );
            // A task waiting on a grandchild wakes when the root is cancelled.
            let b1 = b.child_token();
            let b1_deep = b1.child_token().child_token();
            let (ready_tx, ready_rx) = unbounded();
            let w = b1_deep.clone();
            let h = s.spawn(move || {
                ready_tx.send(()).unwrap();
                w.cancelled();
            });
            ready_rx.recv().unwrap();
            assert!(!b1_deep.is_cancelled());
            root.cancel();
            h.join().unwrap();
            assert!(b.is_cancelled() && b1.is_cancelled() && b1_deep.is_cancelled());
            // A child made after the cancel starts cancelled.
            assert!(b1.child_token().is_cancelled());
            s.shutdown();
        },
    );
}

#[test]
fn children_made_while_the_parent_is_cancelled_are_all_cancelled() {
    // Threads keep making children (and grandchildren) while the main
    // thread cancels: every token made, before or after, ends cancelled.
    const MAKERS: usize = 4;
    const EACH: usize = 500;
    for _round in 0..10 {
        let parent = CancelToken::new();
        let start = Arc::new(Barrier::new(MAKERS + 1));
        let makers: Vec<_> = (0..MAKERS)
            .map(|_| {
                let (parent, start) = (parent.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    (0..EACH)
                        .map(|i| {
                            let c = parent.child_token();
                            if i % 2 == 0 {
                                c.child_token()
                            } else {
                                c
                            }
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        start.wait();
        parent.cancel();
        for m in makers {
            let tokens = m.join().unwrap();
            assert_eq!(tokens.len(), EACH);
            let standing = tokens.iter().filter(|t| !t.is_cancelled()).count();
            assert_eq!(standing, 0, "children missed by the cancel");
        }
    }
}

#[test]
fn a_drop_guard_cancels_when_dropped_unless_disarmed() {
    let token = CancelToken::new();
    let guard = token.clone().drop_guard();
    let kept = guard.disarm();
    assert!(kept.same_token(&token));
    assert!(!token.is_cancelled(), "a disarmed guard does not cancel");
    {
        let _guard = kept.drop_guard();
        assert!(!token.is_cancelled());
    }
    assert!(token.is_cancelled(), "the guard cancelled on drop");
}

#[test]
fn a_drop_guard_held_by_a_task_cancels_when_the_task_panics() {
    in_child(
        module_path!(),
        "a_drop_guard_held_by_a_task_cancels_when_the_task_panics",
        || {
            let s = sched(1);
            let token = CancelToken::new();
            let guard = token.clone().drop_guard();
            let h = s.spawn(move || {
                let _guard = guard;
                panic!("task fails");
            });
            assert!(
                token.cancelled_timeout(PATIENCE),
                "the unwind dropped the guard"
            );
            assert!(h.join().is_err());
            s.shutdown();
        },
    );
}

#[test]
fn bounded_waits_report_whether_the_token_was_cancelled() {
    let token = CancelToken::new();
    let start = Instant::now();
    assert!(!token.cancelled_timeout(ms(30)));
    assert!(start.elapsed() >= ms(30), "waited the whole timeout");
    assert!(!token.cancelled_deadline(Instant::now()));
    let t = token.clone();
    let canceller = std::thread::spawn(move || t.cancel());
    assert!(token.cancelled_timeout(PATIENCE));
    canceller.join().unwrap();
    assert!(token.cancelled_timeout(Duration::ZERO));
    assert!(token.cancelled_timeout(Duration::MAX));
}

#[test]
fn async_code_waits_on_the_token_channel() {
    let token = CancelToken::new();
    let t = token.clone();
    let canceller = std::thread::spawn(move || t.cancel());
    let r = futures::executor::block_on(token.done().recv_async());
    assert!(r.is_err());
    assert!(token.is_cancelled());
    canceller.join().unwrap();
}

#[test]
fn a_token_is_send_sync_clone_debug_default() {
    fn check<T: Send + Sync + Clone + std::fmt::Debug + Default + 'static>() {}
    check::<CancelToken>();
    let t = CancelToken::default();
    assert_eq!(format!("{t:?}"), "CancelToken { cancelled: false }");
    t.cancel();
    assert_eq!(format!("{t:?}"), "CancelToken { cancelled: true }");
    assert!(!t.same_token(&CancelToken::new()));
}

#[test]
fn with_done_fires_when_the_task_returns_panics_or_never_runs() {
    in_child(
        module_path!(),
        "with_done_fires_when_the_task_returns_panics_or_never_runs",
        || {
            let s = sched(2);
            // Returns: the done arm wins over a long timer, and join follows.
            let (gate_tx, gate_rx) = unbounded::<()>();
            let (work, done) = with_done(move || {
                gate_rx.recv().unwrap();
                42
            });
            let h = s.spawn(work);
            assert_eq!(
                done.recv_timeout(ms(50)),
                Err(RecvTimeoutError::Timeout),
                "not done while the task waits"
            );
            gate_tx.send(()).unwrap();
            let v = select! {
                recv(done) -> r => { assert!(r.is_err()); h.join().unwrap() }
                recv(after(PATIENCE)) -> _ => panic!("the task's end was not seen"),
            };
            assert_eq!(v, 42);
            // Panics.
            let (work, done) = with_done(|| -> u32 { panic!("task fails") });
            let h = s.spawn(work);
            select! {
                recv(done) -> _ => {}
                recv(after(PATIENCE)) -> _ => panic!("the panicking task's end was not seen"),
            }
            assert!(h.join().is_err());
            // Never runs: the closure is dropped.
            let ran = Arc::new(AtomicUsize::new(0));
            let r = ran.clone();
            let (work, done) = with_done(move || r.fetch_add(1, Ordering::SeqCst));
            drop(work);
            assert!(done.recv_timeout(PATIENCE).is_err());
            assert_eq!(ran.load(Ordering::SeqCst), 0);
            s.shutdown();
        },
    );
}

#[test]
fn with_done_works_for_scoped_tasks() {
    in_child(module_path!(), "with_done_works_for_scoped_tasks", || {
        let mut total = 0u64;
        gofer::scope(|sc| {
            let (work, done) = with_done(|| total += 5);
            sc.spawn(work);
            assert!(
                done.recv_timeout(PATIENCE).is_err(),
                "the scoped task ended"
            );
        });
        assert_eq!(total, 5);
    });
}

/// Runs `f` on a thread with a small stack: recursion over a long chain of
/// tokens would overflow it.
fn on_small_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(64 * 1024)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn a_deep_chain_of_tokens_is_cancelled_and_dropped_without_recursion() {
    // A stack overflow aborts the process: run in a child.
    in_child(
        module_path!(),
        "a_deep_chain_of_tokens_is_cancelled_and_dropped_without_recursion",
        || {
            let root = CancelToken::new();
            let mut leaf = root.child_token();
            for _ in 0..100_000 {
                leaf = leaf.child_token();
            }
            let canceller = root.clone();
            on_small_stack(move || canceller.cancel());
            assert!(leaf.is_cancelled());
            on_small_stack(move || drop(leaf));
        },
    );
}
