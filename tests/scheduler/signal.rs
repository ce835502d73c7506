//! `gofer::signal`: `ctrl_c` and `Signals` in tasks and plain threads,
//! before and after a scheduler is built, on busy Processers, in `select!`,
//! several subscribers, queueing, and the disposition put back on drop.
//!
//! Each scenario runs in a child process under a watchdog (`in_child`):
//! the signals go to the whole process, and a mistake would end it.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{in_child, wait_until};
use gofer::signal::{ctrl_c, Signals, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};

/// Sends `sig` to this whole process (the kernel picks the thread).
fn kill_self(sig: i32) {
    // SAFETY: kill with our own pid and a valid signal number; each test
    // handles the signal before sending it.
    assert_eq!(unsafe { libc::kill(libc::getpid(), sig) }, 0, "kill");
}

/// Sends SIGINT every 20 ms until `done` holds: for `ctrl_c`, whose wait
/// starts at a moment the caller cannot see. `keeper` (a `Signals` on
/// SIGINT) keeps the default action away meanwhile.
fn interrupt_until(_keeper: &Signals, mut done: impl FnMut() -> bool) {
    wait_until("ctrl_c returned", || {
        if done() {
            return true;
        }
        kill_self(SIGINT);
        std::thread::sleep(Duration::from_millis(20));
        done()
    });
}

#[test]
fn ctrl_c_in_a_task_returns_after_sigint() {
    in_child(
        module_path!(),
        "ctrl_c_in_a_task_returns_after_sigint",
        || {
            let keeper = Signals::new(&[SIGINT]).unwrap();
            let sched = common::fixed_scheduler(2);
            let h = sched.spawn(ctrl_c);
            interrupt_until(&keeper, || h.is_finished());
            h.join().unwrap().unwrap();
            sched.shutdown();
        },
    );
}

#[test]
fn ctrl_c_on_a_plain_thread_returns_after_sigint() {
    in_child(
        module_path!(),
        "ctrl_c_on_a_plain_thread_returns_after_sigint",
        || {
            let keeper = Signals::new(&[SIGINT]).unwrap();
            // A scheduler runs meanwhile: its Processers may take the signal.
            let sched = common::fixed_scheduler(2);
            let h = std::thread::spawn(ctrl_c);
            interrupt_until(&keeper, || h.is_finished());
            h.join().unwrap().unwrap();
            sched.shutdown();
        },
    );
}

#[test]
fn signals_made_before_the_first_scheduler_reach_a_task_and_a_thread() {
    in_child(
        module_path!(),
        "signals_made_before_the_first_scheduler_reach_a_task_and_a_thread",
        || {
            let for_task = Signals::new(&[SIGINT, SIGTERM]).unwrap();
            let for_thread = Signals::new(&[SIGTERM]).unwrap();
            let sched = common::fixed_scheduler(2);
            let task = sched.spawn(move || for_task.recv());
            let thread = std::thread::spawn(move || for_thread.recv());
            kill_self(SIGTERM);
            assert_eq!(task.join().unwrap(), SIGTERM);
            assert_eq!(thread.join().unwrap(), SIGTERM);
            sched.shutdown();
        },
    );
}

#[test]
fn signals_made_in_a_task_after_build_receive() {
    in_child(
        module_path!(),
        "signals_made_in_a_task_after_build_receive",
        || {
            let sched = common::fixed_scheduler(2);
            let (ready_tx, ready_rx) = gofer::chan::bounded(0);
            let h = sched.spawn(move || {
                let signals = Signals::new(&[SIGINT]).unwrap();
                ready_tx.send(()).unwrap();
                signals.recv()
            });
            ready_rx.recv().unwrap();
            kill_self(SIGINT);
            assert_eq!(h.join().unwrap(), SIGINT);
            sched.shutdown();
        },
    );
}

#[test]
fn recv_in_a_task_wakes_while_other_processers_spin_and_take_the_signal() {
    in_child(
        module_path!(),
        "recv_in_a_task_wakes_while_other_processers_spin_and_take_the_signal",
        || {
            // Processers 0 and 1 spin without switching; the waiter is on 2
            // (a started task stays on its thread, so it must not share a
            // spinning one). The signal goes to a spinning thread.
            let sched = common::fixed_scheduler(3);
            let (ready_tx, ready_rx) = gofer::chan::bounded(0);
            let waiter = gofer::Builder::new()
                .scheduler(&sched)
                .pin(2)
                .spawn(move || {
                    let signals = Signals::new(&[SIGUSR1]).unwrap();
                    ready_tx.send(()).unwrap();
                    let first = signals.recv();
                    ready_tx.send(()).unwrap();
                    (first, signals.recv())
                })
                .unwrap();
            ready_rx.recv().unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let (tid_tx, tid_rx) = gofer::chan::unbounded();
            let spinners: Vec<_> = (0..2)
                .map(|i| {
                    let (stop, tid_tx) = (stop.clone(), tid_tx.clone());
                    gofer::Builder::new()
                        .scheduler(&sched)
                        .pin(i)
                        .spawn(move || {
                            // SAFETY: gettid has no preconditions.
                            tid_tx.send(unsafe { libc::gettid() }).unwrap();
                            // Never switches: holds its Processer's thread.
                            while !stop.load(Ordering::Relaxed) {
                                std::hint::spin_loop();
                            }
                        })
                        .unwrap()
                })
                .collect();
            let tid: libc::pid_t = tid_rx.recv().unwrap();
            let _ = tid_rx.recv().unwrap();
            // SAFETY: tgkill to a live thread of this process with a signal
            // it handles.
            let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, SIGUSR1) };
            assert_eq!(rc, 0, "tgkill");
            ready_rx.recv().unwrap();
            // And once more to the process, the kernel choosing the thread.
            kill_self(SIGUSR1);
            assert_eq!(waiter.join().unwrap(), (SIGUSR1, SIGUSR1));
            stop.store(true, Ordering::Relaxed);
            for s in spinners {
                s.join().unwrap();
            }
            sched.shutdown();
        },
    );
}

#[test]
fn recv_in_a_task_wakes_among_tasks_that_keep_every_processer_busy() {
    in_child(
        module_path!(),
        "recv_in_a_task_wakes_among_tasks_that_keep_every_processer_busy",
        || {
            let sched = common::fixed_scheduler(2);
            let stop = Arc::new(AtomicBool::new(false));
            let busy: Vec<_> = (0..4)
                .map(|_| {
                    let stop = stop.clone();
                    sched.spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            gofer::yield_now();
                        }
                    })
                })
                .collect();
            let (ready_tx, ready_rx) = gofer::chan::bounded(0);
            let waiter = sched.spawn(move || {
                let signals = Signals::new(&[SIGTERM]).unwrap();
                ready_tx.send(()).unwrap();
                signals.recv()
            });
            ready_rx.recv().unwrap();
            kill_self(SIGTERM);
            assert_eq!(waiter.join().unwrap(), SIGTERM);
            stop.store(true, Ordering::Relaxed);
            for b in busy {
                b.join().unwrap();
            }
            sched.shutdown();
        },
    );
}

#[test]
fn select_takes_the_timeout_arm_then_the_signal_arm() {
    in_child(
        module_path!(),
        "select_takes_the_timeout_arm_then_the_signal_arm",
        || {
            let sched = common::fixed_scheduler(2);
            let h = sched.spawn(|| {
                let signals = Signals::new(&[SIGINT]).unwrap();
                let first = gofer::select! {
                    recv(signals.receiver()) -> sig => format!("signal {sig:?}"),
                    default(Duration::from_millis(50)) => "timeout".to_string(),
                };
                assert_eq!(first, "timeout");
                kill_self(SIGINT);
                let timeout = gofer::chan::after(common::PATIENCE);
                gofer::select! {
                    recv(signals.receiver()) -> sig => sig.unwrap(),
                    recv(timeout) -> _ => panic!("the signal never came"),
                }
            });
            assert_eq!(h.join().unwrap(), SIGINT);
            sched.shutdown();
        },
    );
}

#[test]
fn every_signals_of_a_signal_receives_it_and_no_other_does() {
    in_child(
        module_path!(),
        "every_signals_of_a_signal_receives_it_and_no_other_does",
        || {
            let a = Signals::new(&[SIGINT]).unwrap();
            let b = Signals::new(&[SIGTERM, SIGINT]).unwrap();
            let other = Signals::new(&[SIGTERM]).unwrap();
            kill_self(SIGINT);
            assert_eq!(a.recv(), SIGINT);
            assert_eq!(b.recv(), SIGINT);
            // Once `a` and `b` have it, the dispatch is over.
            assert_eq!(other.try_recv(), None);
            // Dropping one leaves the others subscribed.
            drop(a);
            kill_self(SIGTERM);
            assert_eq!(b.recv(), SIGTERM);
            assert_eq!(other.recv(), SIGTERM);
        },
    );
}

#[test]
fn a_signal_before_anyone_waits_is_queued_up_to_the_buffer() {
    in_child(
        module_path!(),
        "a_signal_before_anyone_waits_is_queued_up_to_the_buffer",
        || {
            let late = Signals::new(&[SIGUSR2]).unwrap();
            let pacer = Signals::new(&[SIGUSR2]).unwrap();
            // One at a time (`pacer` sees each dispatched), so none is
            // merged with the next: `late` queues them all.
            for _ in 0..3 {
                kill_self(SIGUSR2);
                assert_eq!(pacer.recv(), SIGUSR2);
            }
            std::thread::sleep(Duration::from_millis(50));
            let sched = common::fixed_scheduler(1);
            let h = sched.spawn(move || {
                let got: Vec<i32> = (0..3).map(|_| late.recv()).collect();
                (got, late.try_recv(), late)
            });
            let (got, more, late) = h.join().unwrap();
            assert_eq!(got, [SIGUSR2; 3]);
            assert_eq!(more, None);
            // Past the buffer, newer arrivals are dropped.
            for _ in 0..Signals::BUFFER + 5 {
                kill_self(SIGUSR2);
                assert_eq!(pacer.recv(), SIGUSR2);
            }
            assert_eq!(late.receiver().len(), Signals::BUFFER);
            assert_eq!(late.try_iter_count(), Signals::BUFFER);
            sched.shutdown();
        },
    );
}

/// Counts the calls of [`counting_handler`].
static PREVIOUS_CALLS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn counting_handler(_: libc::c_int) {
    PREVIOUS_CALLS.fetch_add(1, Ordering::SeqCst);
}

/// The handler installed for `sig` now.
fn handler_of(sig: i32) -> libc::sighandler_t {
    // SAFETY: a zeroed out-struct and no new action: only reads.
    unsafe {
        let mut now: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(sig, std::ptr::null(), &mut now), 0);
        now.sa_sigaction
    }
}

#[test]
fn the_previous_disposition_is_chained_and_put_back() {
    in_child(
        module_path!(),
        "the_previous_disposition_is_chained_and_put_back",
        || {
            // A program's own handler stays called while Signals live.
            let own = counting_handler as extern "C" fn(libc::c_int) as libc::sighandler_t;
            // SAFETY: installs a handler that only touches an atomic.
            assert_ne!(unsafe { libc::signal(SIGUSR1, own) }, libc::SIG_ERR);
            let s = Signals::new(&[SIGUSR1]).unwrap();
            assert_ne!(handler_of(SIGUSR1), own);
            kill_self(SIGUSR1);
            assert_eq!(s.recv(), SIGUSR1);
            assert_eq!(PREVIOUS_CALLS.load(Ordering::SeqCst), 1);
            drop(s);
            assert_eq!(handler_of(SIGUSR1), own);

            // SIGINT had its default action: it comes back after the last
            // Signals (ctrl_c's own included) is gone.
            assert_eq!(handler_of(SIGINT), libc::SIG_DFL);
            let a = Signals::new(&[SIGINT]).unwrap();
            let b = Signals::new(&[SIGINT]).unwrap();
            drop(a);
            assert_ne!(handler_of(SIGINT), libc::SIG_DFL);
            drop(b);
            assert_eq!(handler_of(SIGINT), libc::SIG_DFL);
        },
    );
}

#[test]
fn what_cannot_or_must_not_be_handled_is_refused() {
    use std::io::ErrorKind::InvalidInput;
    let bt = libc::SIGRTMIN() + gofer::debug::BACKTRACE_SIGNAL_OFFSET;
    for sig in [
        0,
        -1,
        65,
        libc::SIGKILL,
        libc::SIGSTOP,
        libc::SIGSEGV,
        libc::SIGBUS,
        bt,
    ] {
        let e = Signals::new(&[SIGUSR2, sig]).unwrap_err();
        assert_eq!(e.kind(), InvalidInput, "{sig}: {e}");
    }
    assert_eq!(Signals::new(&[]).unwrap_err().kind(), InvalidInput);
}

/// Drains the signals queued now, counting them.
trait TryIterCount {
    fn try_iter_count(&self) -> usize;
}

impl TryIterCount for Signals {
    fn try_iter_count(&self) -> usize {
        self.receiver().try_iter().count()
    }
}
