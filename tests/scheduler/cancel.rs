//! Cancellation: a task cancelled while parked at each kind of wait
//! withdraws and unwinds (its destructors run, `join` says cancelled); a
//! running one stops at its next wait or when it looks; one not started
//! never runs; an unwind in progress is not disturbed; a scope still waits
//! for its cancelled tasks; nothing leaks; `shutdown_now` ends tasks parked
//! in `accept` and `recv`.
//!
//! Every case runs in a child process with a watchdog: a cancellation
//! that is not observed leaves a join waiting for ever.

use crate::common;

use std::net::TcpStream as StdStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{in_child, wait_until};
use gofer::chan;
use gofer::debug::TaskState;
use gofer::sync::{Condvar, Mutex, WaitGroup};
use gofer::{JoinHandle, Scheduler};

fn sched() -> Scheduler {
    Scheduler::builder()
        .min_threads(2)
        .max_threads(2)
        .build()
        .expect("valid scheduler config")
}

/// Sets its flag when dropped: proves the unwind ran the task's
/// destructors.
struct Dropped(Arc<AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Waits until the task `id` is parked (a task dump says so).
fn wait_parked(s: &Scheduler, id: gofer::TaskId) {
    wait_until("the task to park", || {
        s.dump()
            .tasks()
            .iter()
            .any(|t| t.id() == id.as_u64() && t.state() == TaskState::Parked)
    });
}

/// Spawns `wait` (which must wait for ever) in a task holding a
/// [`Dropped`], waits until it is parked, cancels it, and checks that the
/// join says cancelled and that the destructor ran. Then the scheduler
/// shuts down with no task and no stack left.
fn cancel_parked(wait: impl FnOnce() + Send + 'static) {
    let s = sched();
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = Dropped(dropped.clone());
    let h = s.spawn(move || {
        let _flag = flag;
        wait();
        "the wait returned"
    });
    wait_parked(&s, h.id());
    h.cancel();
    let e = h.join().expect_err("a cancelled task gives an error");
    assert!(e.is_cancelled(), "{e}");
    assert!(!e.is_panic());
    assert_eq!(e.to_string(), "task was cancelled");
    assert!(
        dropped.load(Ordering::SeqCst),
        "the unwind ran the destructors"
    );
    let st = s.stats();
    assert_eq!(st.timers, 0, "a timer left behind");
    s.shutdown();
}

#[test]
fn cancel_while_sleeping() {
    in_child(module_path!(), "cancel_while_sleeping", || {
        cancel_parked(|| gofer::sleep(Duration::from_secs(3600)));
    });
}

#[test]
fn cancel_while_receiving() {
    in_child(module_path!(), "cancel_while_receiving", || {
        let (tx, rx) = chan::bounded::<u32>(0);
        cancel_parked(move || {
            let _ = rx.recv();
        });
        // The receiver's node left the channel: a send finds nobody.
        assert!(tx.try_send(1).is_err());
        drop(tx);
    });
}

#[test]
fn cancel_while_receiving_with_a_timeout() {
    in_child(
        module_path!(),
        "cancel_while_receiving_with_a_timeout",
        || {
            let (_tx, rx) = chan::unbounded::<u32>();
            cancel_parked(move || {
                let _ = rx.recv_timeout(Duration::from_secs(3600));
            });
        },
    );
}

#[test]
fn cancel_while_sending() {
    in_child(module_path!(), "cancel_while_sending", || {
        let (tx, rx) = chan::bounded::<String>(0);
        cancel_parked(move || {
            let _ = tx.send("never taken".to_string());
        });
        assert!(
            rx.try_recv().is_err(),
            "the sender's value left the channel"
        );
    });
}

#[test]
fn cancel_while_selecting() {
    in_child(module_path!(), "cancel_while_selecting", || {
        let (tx1, rx1) = chan::bounded::<u32>(0);
        let (tx2, rx2) = chan::bounded::<u32>(0);
        let token = gofer::task::CancelToken::new();
        let t = token.clone();
        cancel_parked(move || {
            gofer::select! {
                recv(rx1) -> _ => {},
                recv(rx2) -> _ => {},
                recv(chan::after(Duration::from_secs(3600))) -> _ => {},
                cancelled(t) => {},
            }
        });
        // Every arm's node left its channel: a send finds nobody.
        assert!(tx1.try_send(1).is_err());
        assert!(tx2.try_send(2).is_err());
        assert!(!token.is_cancelled());
    });
}

#[test]
fn cancel_while_selecting_dynamically() {
    in_child(module_path!(), "cancel_while_selecting_dynamically", || {
        let (tx, rx) = chan::bounded::<u32>(0);
        let (stx, srx) = chan::bounded::<u32>(0);
        cancel_parked(move || {
            let mut sel = chan::Select::new();
            sel.recv(&rx);
            sel.send(&stx);
            let _ = sel.select();
        });
        assert!(tx.try_send(1).is_err(), "the receive arm left the channel");
        assert!(srx.try_recv().is_err(), "the send arm left the channel");
    });
}

#[test]
fn cancel_while_locking_a_mutex() {
    in_child(module_path!(), "cancel_while_locking_a_mutex", || {
        let m = Arc::new(Mutex::new(0));
        let g = m.lock();
        let m2 = m.clone();
        cancel_parked(move || {
            *m2.lock() += 1;
        });
        drop(g);
        // The cancelled waiter left the queue: the mutex still works.
        *m.lock() += 1;
        assert_eq!(*m.lock(), 1);
    });
}

#[test]
fn cancel_while_waiting_on_a_condvar_relocks_before_unwinding() {
    in_child(
        module_path!(),
        "cancel_while_waiting_on_a_condvar_relocks_before_unwinding",
        || {
            let pair = Arc::new((Mutex::new(false), Condvar::new()));
            let p2 = pair.clone();
            cancel_parked(move || {
                let (m, c) = &*p2;
                let mut g = m.lock();
                while !*g {
                    c.wait(&mut g);
                }
            });
            // The guard's drop unlocked a mutex the wait had locked again:
            // it is free, and not unlocked twice.
            let (m, _) = &*pair;
            assert!(m.try_lock().is_some(), "the mutex is free");
            *m.lock() = true;
        },
    );
}

#[test]
fn cancel_while_waiting_on_a_wait_group() {
    in_child(
        module_path!(),
        "cancel_while_waiting_on_a_wait_group",
        || {
            let wg = WaitGroup::new();
            wg.add(1);
            let w2 = wg.clone();
            cancel_parked(move || w2.wait());
            wg.done();
        },
    );
}

#[test]
fn cancel_while_joining() {
    in_child(module_path!(), "cancel_while_joining", || {
        let s = sched();
        let (_tx, rx) = chan::bounded::<()>(0);
        let inner: JoinHandle<()> = s.spawn(move || {
            let _ = rx.recv();
        });
        let inner_id = inner.id();
        let hold = Arc::new(std::sync::Mutex::new(None));
        let h2 = hold.clone();
        cancel_parked(move || {
            let r = inner.join();
            *h2.lock().unwrap() = Some(r.is_ok());
        });
        assert!(hold.lock().unwrap().is_none(), "the join returned");
        // The joined task goes on (only its joiner was cancelled).
        assert!(s.dump().tasks().iter().any(|t| t.id() == inner_id.as_u64()));
        s.shutdown_now();
    });
}

#[test]
fn cancel_while_parked() {
    in_child(module_path!(), "cancel_while_parked", || {
        cancel_parked(|| loop {
            gofer::park();
        });
    });
}

#[test]
fn cancel_while_accepting_and_reading() {
    in_child(module_path!(), "cancel_while_accepting_and_reading", || {
        let l = gofer::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        cancel_parked(move || {
            let _ = l.accept();
        });
        // The listener was dropped by the unwind: nobody listens.
        assert!(StdStream::connect(addr).is_err(), "the listener closed");

        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        cancel_parked(move || {
            use std::io::Read;
            let mut c = gofer::net::TcpStream::connect(addr).unwrap();
            let mut buf = [0u8; 8];
            let _ = c.read(&mut buf);
        });
        // The stream was dropped: the peer reads end of file.
        let (mut peer, _) = l.accept().unwrap();
        use std::io::Read;
        let mut buf = [0u8; 8];
        assert_eq!(peer.read(&mut buf).unwrap(), 0, "the stream closed");
    });
}

#[test]
fn cancel_a_task_that_only_yields() {
    in_child(module_path!(), "cancel_a_task_that_only_yields", || {
        let s = sched();
        let (tx, rx) = chan::bounded::<()>(1);
        let h = s.spawn(move || {
            tx.send(()).unwrap();
            loop {
                gofer::yield_now();
            }
        });
        rx.recv().unwrap();
        h.cancel();
        assert!(h.join().unwrap_err().is_cancelled());
        s.shutdown();
    });
}

#[test]
fn a_running_loop_sees_is_cancelled() {
    in_child(module_path!(), "a_running_loop_sees_is_cancelled", || {
        let s = sched();
        let (tx, rx) = chan::bounded::<()>(1);
        let h = s.spawn(move || {
            assert!(!gofer::task::is_cancelled());
            tx.send(()).unwrap();
            let mut spins = 0u64;
            while !gofer::task::is_cancelled() {
                spins = spins.wrapping_add(1);
                std::hint::black_box(spins);
            }
            "looked"
        });
        rx.recv().unwrap();
        h.cancel();
        h.cancel(); // twice: nothing more
        assert_eq!(h.join().unwrap(), "looked", "finished: keeps its value");
        assert!(!gofer::task::is_cancelled(), "false on a thread");
        s.shutdown();
    });
}

#[test]
fn a_task_cancelled_before_it_starts_never_runs() {
    in_child(
        module_path!(),
        "a_task_cancelled_before_it_starts_never_runs",
        || {
            let s = Scheduler::builder()
                .min_threads(1)
                .max_threads(1)
                .build()
                .unwrap();
            // Hold the only Processer so that the task stays queued.
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let (in_tx, in_rx) = std::sync::mpsc::channel::<()>();
            let blocker = s.spawn(move || {
                in_tx.send(()).unwrap();
                go_rx.recv().unwrap(); // blocks the thread
            });
            in_rx.recv().unwrap();
            let ran = Arc::new(AtomicBool::new(false));
            let dropped = Arc::new(AtomicBool::new(false));
            let (r2, flag) = (ran.clone(), Dropped(dropped.clone()));
            let h = gofer::Builder::new()
                .scheduler(&s)
                .pin(0)
                .spawn(move || {
                    let _flag = flag;
                    r2.store(true, Ordering::SeqCst);
                })
                .unwrap();
            h.cancel();
            go_tx.send(()).unwrap();
            blocker.join().unwrap();
            let e = h.join().unwrap_err();
            assert!(e.is_cancelled(), "{e}");
            assert!(!ran.load(Ordering::SeqCst), "the closure ran");
            assert!(dropped.load(Ordering::SeqCst), "the closure was dropped");
            s.shutdown();
        },
    );
}

#[test]
fn a_cancelled_task_caught_unwinding_unwinds_again_at_its_next_wait() {
    in_child(
        module_path!(),
        "a_cancelled_task_caught_unwinding_unwinds_again_at_its_next_wait",
        || {
            let s = sched();
            let (tx, rx) = chan::bounded::<u32>(0);
            let caught = Arc::new(AtomicUsize::new(0));
            let c2 = caught.clone();
            let h = s.spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rx.recv()));
                assert!(r.is_err(), "the recv unwound");
                c2.fetch_add(1, Ordering::SeqCst);
                // Still cancelled: the next wait unwinds too.
                gofer::sleep(Duration::from_secs(3600));
                c2.fetch_add(1, Ordering::SeqCst);
            });
            wait_parked(&s, h.id());
            h.cancel();
            assert!(h.join().unwrap_err().is_cancelled());
            assert_eq!(caught.load(Ordering::SeqCst), 1);
            drop(tx);
            s.shutdown();
        },
    );
}

#[test]
fn waits_during_an_unwind_do_not_observe_the_cancellation() {
    in_child(
        module_path!(),
        "waits_during_an_unwind_do_not_observe_the_cancellation",
        || {
            // A destructor that waits (a channel send to a receiver that
            // takes it later, a mutex lock) while the cancelled task
            // unwinds: it completes, no second panic (which would abort).
            struct SendOnDrop(chan::Sender<&'static str>, Arc<Mutex<u32>>);
            impl Drop for SendOnDrop {
                fn drop(&mut self) {
                    *self.1.lock() += 1;
                    self.0.send("from the unwind").unwrap();
                }
            }
            let s = sched();
            let (tx, rx) = chan::bounded::<&'static str>(0);
            let m = Arc::new(Mutex::new(0));
            let g = m.lock();
            let m2 = m.clone();
            let h = s.spawn(move || {
                let _d = SendOnDrop(tx, m2);
                gofer::sleep(Duration::from_secs(3600));
            });
            wait_parked(&s, h.id());
            h.cancel();
            // The destructor waits for the mutex, then for a receiver.
            wait_parked(&s, h.id());
            drop(g);
            assert_eq!(rx.recv().unwrap(), "from the unwind");
            assert!(h.join().unwrap_err().is_cancelled());
            assert_eq!(*m.lock(), 1);
            s.shutdown();
        },
    );
}

#[test]
fn a_scope_waits_for_its_cancelled_tasks() {
    in_child(
        module_path!(),
        "a_scope_waits_for_its_cancelled_tasks",
        || {
            let s = sched();
            let unwound = AtomicUsize::new(0);
            // Outlives the scope: the tasks' `recv` can only end by their
            // cancellation. (Dropped inside the scope, it could end a `recv`
            // whose cancellation was deferred behind a sibling's unwind, and
            // that task would then return normally and meet its cancellation
            // in `Count`'s `sleep`, outside any unwind, skipping the count.)
            let (_tx, rx) = chan::bounded::<()>(0);
            {
                s.scope(|sc| {
                    struct Count<'a>(&'a AtomicUsize);
                    impl Drop for Count<'_> {
                        fn drop(&mut self) {
                            // Slow destructor: the scope must wait for it.
                            gofer::sleep(Duration::from_millis(50));
                            self.0.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    let mut hs = Vec::new();
                    for _ in 0..3 {
                        let rx = rx.clone();
                        let u = &unwound;
                        hs.push(sc.spawn(move || {
                            let _c = Count(u);
                            let _ = rx.recv();
                        }));
                    }
                    for h in &hs {
                        wait_parked(&s, h.id());
                    }
                    let last = hs.pop().unwrap();
                    for h in &hs {
                        h.cancel();
                    }
                    // Cancelled and not joined: the scope does not panic.
                    drop(hs);
                    last.cancel();
                    assert!(last.join().unwrap_err().is_cancelled());
                });
                assert_eq!(unwound.load(Ordering::SeqCst), 3, "the scope waited");
            }
            s.shutdown();
        },
    );
}

#[test]
fn nothing_leaks_after_many_cancellations() {
    in_child(
        module_path!(),
        "nothing_leaks_after_many_cancellations",
        || {
            // Two rounds: the stacks of the first are cached for the second; a
            // leak would map a new stack for each task of the second.
            let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
            let after_one = (cancel_many(), fds());
            let after_two = (cancel_many(), fds());
            assert_eq!(after_two.0, after_one.0, "stacks left mapped");
            assert_eq!(after_two.1, after_one.1, "descriptors left open");
        },
    );
}

/// Cancels 200 tasks parked in four kinds of wait; checks that no task
/// and no timer is left. Returns the stacks mapped before the scheduler
/// shut down (the scheduler is gone, and its descriptors with it, when it
/// returns).
fn cancel_many() -> usize {
    {
        let s = sched();
        let (_tx, rx) = chan::bounded::<()>(0);
        let l = gofer::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let l = Arc::new(l);
        let mut hs = Vec::new();
        for i in 0..200 {
            let rx = rx.clone();
            let l = l.clone();
            hs.push(s.spawn(move || match i % 4 {
                0 => {
                    let _ = rx.recv();
                }
                1 => gofer::sleep(Duration::from_secs(3600)),
                2 => {
                    let _ = rx.recv_timeout(Duration::from_secs(3600));
                }
                _ => {
                    let _ = l.accept();
                }
            }));
        }
        for h in &hs {
            wait_parked(&s, h.id());
        }
        for h in &hs {
            h.cancel();
        }
        for h in hs {
            assert!(h.join().unwrap_err().is_cancelled());
        }
        wait_until("every task freed", || s.stats().alive == 0);
        let st = s.stats();
        assert_eq!(st.timers, 0, "timers left");
        drop(l);
        s.shutdown();
        st.live_stacks
    }
}

#[test]
fn shutdown_now_ends_tasks_parked_in_accept_and_recv() {
    in_child(
        module_path!(),
        "shutdown_now_ends_tasks_parked_in_accept_and_recv",
        || {
            let s = sched();
            let l = gofer::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let (_tx, rx) = chan::unbounded::<u32>();
            let dropped = Arc::new(AtomicUsize::new(0));
            struct Count(Arc<AtomicUsize>);
            impl Drop for Count {
                fn drop(&mut self) {
                    self.0.fetch_add(1, Ordering::SeqCst);
                }
            }
            let (d1, d2) = (Count(dropped.clone()), Count(dropped.clone()));
            let a = s.spawn(move || {
                let _d = d1;
                loop {
                    let _ = l.accept();
                }
            });
            let r = s.spawn(move || {
                let _d = d2;
                let _ = rx.recv();
            });
            wait_parked(&s, a.id());
            wait_parked(&s, r.id());
            s.shutdown_now();
            assert_eq!(dropped.load(Ordering::SeqCst), 2, "both unwound");
            assert!(a.join().unwrap_err().is_cancelled());
            assert!(r.join().unwrap_err().is_cancelled());
            assert!(StdStream::connect(addr).is_err(), "the listener closed");
        },
    );
}

/// A hooked call (std's blocking socket read, parked by the hooks) does
/// not observe the cancellation: no unwind may cross its C frame. It
/// returns as it would have, and the task unwinds at its next gofer wait.
#[cfg(feature = "hooks")]
#[test]
fn a_hooked_call_does_not_unwind_and_the_next_gofer_wait_does() {
    in_child(
        module_path!(),
        "a_hooked_call_does_not_unwind_and_the_next_gofer_wait_does",
        || {
            use std::io::{Read, Write};
            let s = sched();
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let read = Arc::new(AtomicUsize::new(0));
            let r2 = read.clone();
            let h = s.spawn(move || {
                let mut c = StdStream::connect(addr).unwrap();
                let mut buf = [0u8; 4];
                let n = c.read(&mut buf).unwrap(); // hooked: parks the task
                r2.store(n, Ordering::SeqCst);
                gofer::sleep(Duration::from_secs(3600)); // unwinds here
                r2.store(99, Ordering::SeqCst);
            });
            let (mut peer, _) = l.accept().unwrap();
            wait_parked(&s, h.id());
            h.cancel();
            peer.write_all(b"ping").unwrap();
            assert!(h.join().unwrap_err().is_cancelled());
            assert_eq!(
                read.load(Ordering::SeqCst),
                4,
                "the hooked read returned its data"
            );
            s.shutdown();
        },
    );
}
