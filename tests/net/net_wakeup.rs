//! A task parked on a socket always wakes, whoever runs it: a `block_on`
//! caller's root task, a task on an extra Processer, a pinned task, a fiber
//! inside a task, a task whose scheduler's Processers all sleep on their
//! futex. The bytes come from a plain thread a moment after the task parks,
//! on a scheduler that has had time to fall asleep, so nothing but the
//! reactor can wake the task.
//!
//! Each scenario runs in a child process with a watchdog: a lost wake-up is
//! a hang, reported as a failure instead of stalling the suite.

use crate::common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::in_child;
use gofer::net::unix::UnixStream;

/// Rounds per scenario: the lost wake-up showed within a few dozen.
const ROUNDS: usize = 150;

/// A fresh two-Processer scheduler: no task has waited on a socket yet,
/// so its reactor has no sources and its Processers sleep on their futex.
fn fresh(name: &str) -> gofer::Scheduler {
    gofer::Scheduler::builder()
        .min_threads(2)
        .max_threads(4)
        .name(name)
        .build()
        .unwrap()
}

/// Writes `len` bytes to `peer` from a plain thread once `parked` says the
/// reader is about to wait, plus a little, so the reader parks first.
fn write_later(mut peer: StdUnixStream, parked: mpsc::Receiver<()>, len: usize) {
    std::thread::spawn(move || {
        let _ = parked.recv();
        std::thread::sleep(Duration::from_millis(2));
        peer.write_all(&vec![7u8; len]).unwrap();
    });
}

/// The body every scenario runs inside its task: wrap the std end, say
/// it is about to read, read what the thread writes later.
fn read_in_task(a: StdUnixStream, parked: &mpsc::Sender<()>) -> std::io::Result<Vec<u8>> {
    let mut s = UnixStream::from_std(a)?;
    let mut buf = vec![0u8; 64];
    parked.send(()).unwrap();
    s.read_exact(&mut buf)?;
    Ok(buf)
}

#[test]
fn a_block_on_task_waiting_on_a_socket_wakes() {
    in_child(
        module_path!(),
        "a_block_on_task_waiting_on_a_socket_wakes",
        || {
            for round in 0..ROUNDS {
                let sched = fresh("wk-blockon");
                let (a, b) = StdUnixStream::pair().unwrap();
                let (tx, rx) = mpsc::channel();
                write_later(b, rx, 64);
                let got = sched.block_on(move || read_in_task(a, &tx)).unwrap();
                assert_eq!(got, vec![7u8; 64], "round {round}");
                sched.shutdown();
            }
        },
    );
}

#[test]
fn a_block_on_task_waiting_on_a_socket_wakes_on_a_long_lived_scheduler() {
    // The Processers fell asleep long before the first socket wait, and
    // again between rounds (each round's socket is deregistered on drop).
    in_child(
        module_path!(),
        "a_block_on_task_waiting_on_a_socket_wakes_on_a_long_lived_scheduler",
        || {
            let sched = fresh("wk-blockon-long");
            for round in 0..ROUNDS {
                let (a, b) = StdUnixStream::pair().unwrap();
                let (tx, rx) = mpsc::channel();
                write_later(b, rx, 64);
                let got = sched.block_on(move || read_in_task(a, &tx)).unwrap();
                assert_eq!(got, vec![7u8; 64], "round {round}");
            }
            sched.shutdown();
        },
    );
}

#[test]
fn a_pinned_task_waiting_on_a_socket_wakes() {
    in_child(
        module_path!(),
        "a_pinned_task_waiting_on_a_socket_wakes",
        || {
            let sched = fresh("wk-pinned");
            for round in 0..ROUNDS {
                let (a, b) = StdUnixStream::pair().unwrap();
                let (tx, rx) = mpsc::channel();
                write_later(b, rx, 64);
                let h = gofer::Builder::new()
                    .pin(round % 2)
                    .scheduler(&sched)
                    .spawn(move || read_in_task(a, &tx))
                    .unwrap();
                assert_eq!(h.join().unwrap().unwrap(), vec![7u8; 64], "round {round}");
            }
            sched.shutdown();
        },
    );
}

#[test]
fn a_fiber_inside_a_block_on_task_waiting_on_a_socket_wakes() {
    in_child(
        module_path!(),
        "a_fiber_inside_a_block_on_task_waiting_on_a_socket_wakes",
        || {
            let sched = fresh("wk-fiber");
            for round in 0..ROUNDS {
                let (a, b) = StdUnixStream::pair().unwrap();
                let (tx, rx) = mpsc::channel();
                write_later(b, rx, 64);
                let got = sched.block_on(move || {
                    let mut f =
                        gofer::fiber::Fiber::new(move |_: &gofer::fiber::Yielder<(), ()>, ()| {
                            read_in_task(a, &tx)
                        });
                    match f.resume(()) {
                        gofer::fiber::FiberResult::Return(r) => r,
                        gofer::fiber::FiberResult::Yield(()) => panic!("the fiber yielded"),
                    }
                });
                assert_eq!(got.unwrap(), vec![7u8; 64], "round {round}");
            }
            sched.shutdown();
        },
    );
}

#[test]
fn a_task_on_an_extra_processer_waiting_on_a_socket_wakes() {
    // The core Processer is held by a task blocked in the kernel, so the
    // Dispatcher starts an extra Processer for the reader queued behind it.
    // The reader lets the blocker go and waits until the core Processer is
    // asleep on its futex before its first wait on the socket. The extra
    // Processer does not retire (which would wake the Dispatcher) while
    // the test runs.
    in_child(
        module_path!(),
        "a_task_on_an_extra_processer_waiting_on_a_socket_wakes",
        || {
            for round in 0..20 {
                let sched = gofer::Scheduler::builder()
                    .min_threads(1)
                    .max_threads(2)
                    .idle_thread_timeout(Duration::from_secs(86_400))
                    .name("wk-extra")
                    .build()
                    .unwrap();
                let (a, b) = StdUnixStream::pair().unwrap();
                let go = Arc::new(AtomicBool::new(false));
                let go_rx = go.clone();
                let blocker = sched.spawn(move || common::block_thread_until(&go_rx));
                let (tx, rx) = mpsc::channel();
                let s2 = sched.clone();
                let reader = sched.spawn(move || {
                    go.store(true, Ordering::SeqCst);
                    // Holds the extra Processer's thread until the core one
                    // sleeps (nothing else is queued).
                    common::wait_until("the core Processer to sleep", || {
                        s2.stats()
                            .processers
                            .iter()
                            .any(|p| p.kind == "core" && p.sleeping)
                    });
                    read_in_task(a, &tx)
                });
                write_later(b, rx, 64);
                let r = reader.join().unwrap();
                assert_eq!(r.unwrap(), vec![7u8; 64], "round {round}");
                blocker.join().unwrap();
                sched.shutdown();
            }
        },
    );
}
