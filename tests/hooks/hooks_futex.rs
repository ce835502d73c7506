//! With the `hooks` feature, a futex wait made inside a task (a contended
//! std lock) parks the task, not the thread,
//! and futex wakes from tasks and plain threads reach both tasks and
//! threads.
//!
//! Every scenario that blocked the thread before runs on a scheduler of
//! one Processer, in a child process under a watchdog: a wait that blocked
//! the thread would keep the task it waits for from ever running, and the
//! child would hang.
//!
//! Without the feature this file compiles to nothing.
#![cfg(feature = "hooks")]

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use common::{fixed_scheduler, in_child};

/// Lets other tasks run until `cond` holds (the caller is a task).
fn yield_until(mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < common::PATIENCE, "timed out yielding");
        gofer::yield_now();
    }
}

/// The calling thread's errno.
fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

#[test]
fn two_tasks_contending_a_std_mutex_on_one_processer_both_finish() {
    in_child(
        module_path!(),
        "two_tasks_contending_a_std_mutex_on_one_processer_both_finish",
        || {
            let s = fixed_scheduler(1);
            for round in 0..100 {
                let m = Arc::new(Mutex::new(0u32));
                let held = Arc::new(AtomicBool::new(false));
                let (m1, h1) = (m.clone(), held.clone());
                let a = s.spawn(move || {
                    let mut g = m1.lock().unwrap();
                    h1.store(true, Ordering::SeqCst);
                    // Hooked: parks A with the lock held.
                    std::thread::sleep(Duration::from_millis(10));
                    *g += 1;
                });
                let (m2, h2) = (m.clone(), held.clone());
                let b = s.spawn(move || {
                    yield_until(|| h2.load(Ordering::SeqCst));
                    // Contended: must park B, or A never resumes.
                    *m2.lock().unwrap() += 10;
                });
                a.join().unwrap();
                b.join().unwrap();
                assert_eq!(*m.lock().unwrap(), 11, "round {round}");
            }
            s.shutdown();
        },
    );
}

/// Waits on a record of the thread's own (std's thread parker, behind
/// `mpsc`) block the thread, as without the hooks: two tasks of one
/// Processer waiting on std channels at once would otherwise share the
/// thread's parker, and the second would wait for ever on a state the
/// first left. Here a plain thread feeds both channels, so both finish
/// whether the waits block the thread or not; they hang if they share the
/// parker.
#[test]
fn two_tasks_of_one_processer_waiting_on_std_channels_at_once_both_finish() {
    in_child(
        module_path!(),
        "two_tasks_of_one_processer_waiting_on_std_channels_at_once_both_finish",
        || {
            let s = fixed_scheduler(1);
            for round in 0..20u32 {
                let (tx1, rx1) = mpsc::channel::<u32>();
                let (tx2, rx2) = mpsc::channel::<u32>();
                let a = s.spawn(move || rx1.recv().unwrap());
                let b = s.spawn(move || rx2.recv().unwrap());
                let feeder = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(5));
                    tx2.send(round + 1).unwrap();
                    std::thread::sleep(Duration::from_millis(5));
                    tx1.send(round).unwrap();
                });
                assert_eq!(a.join().unwrap(), round);
                assert_eq!(b.join().unwrap(), round + 1);
                feeder.join().unwrap();
            }
            s.shutdown();
        },
    );
}

#[test]
fn std_condvar_wait_and_notify_between_tasks_on_one_processer() {
    in_child(
        module_path!(),
        "std_condvar_wait_and_notify_between_tasks_on_one_processer",
        || {
            let s = fixed_scheduler(1);
            let pair = Arc::new((Mutex::new(0u32), Condvar::new()));
            let p1 = pair.clone();
            let waiter = s.spawn(move || {
                let (m, cv) = &*p1;
                let mut seen = 0;
                let mut g = m.lock().unwrap();
                while seen < 50 {
                    while *g == seen {
                        g = cv.wait(g).unwrap();
                    }
                    seen = *g;
                }
                seen
            });
            let p2 = pair.clone();
            let notifier = s.spawn(move || {
                let (m, cv) = &*p2;
                for _ in 0..50 {
                    *m.lock().unwrap() += 1;
                    cv.notify_one();
                    // Parks the notifier: the waiter must be able to run.
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
            notifier.join().unwrap();
            assert_eq!(waiter.join().unwrap(), 50);
            s.shutdown();
        },
    );
}

#[test]
fn std_rwlock_readers_and_writers_on_one_processer_all_finish() {
    in_child(
        module_path!(),
        "std_rwlock_readers_and_writers_on_one_processer_all_finish",
        || {
            let s = fixed_scheduler(1);
            for round in 0..20 {
                let l = Arc::new(RwLock::new(0u32));
                let held = Arc::new(AtomicBool::new(false));
                let (l1, h1) = (l.clone(), held.clone());
                let writer = s.spawn(move || {
                    let mut g = l1.write().unwrap();
                    h1.store(true, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(5));
                    *g = 7;
                });
                let readers: Vec<_> = (0..3)
                    .map(|_| {
                        let (l, h) = (l.clone(), held.clone());
                        s.spawn(move || {
                            yield_until(|| h.load(Ordering::SeqCst));
                            let g = l.read().unwrap();
                            // Readers hold the lock across a park too.
                            std::thread::sleep(Duration::from_millis(1));
                            *g
                        })
                    })
                    .collect();
                let (l2, h2) = (l.clone(), held.clone());
                let second_writer = s.spawn(move || {
                    yield_until(|| h2.load(Ordering::SeqCst));
                    *l2.write().unwrap() += 1;
                });
                writer.join().unwrap();
                for r in readers {
                    let v = r.join().unwrap();
                    assert!(v == 7 || v == 8, "round {round}: read {v}");
                }
                second_writer.join().unwrap();
                assert_eq!(*l.read().unwrap(), 8, "round {round}");
            }
            s.shutdown();
        },
    );
}

#[test]
fn oncelock_init_racing_between_tasks_on_one_processer_runs_once() {
    in_child(
        module_path!(),
        "oncelock_init_racing_between_tasks_on_one_processer_runs_once",
        || {
            let s = fixed_scheduler(1);
            for round in 0..20 {
                let cell = Arc::new(OnceLock::new());
                let inits = Arc::new(AtomicUsize::new(0));
                let started = Arc::new(AtomicBool::new(false));
                let handles: Vec<_> = (0..4)
                    .map(|i| {
                        let (cell, inits, started) = (cell.clone(), inits.clone(), started.clone());
                        s.spawn(move || {
                            if i > 0 {
                                yield_until(|| started.load(Ordering::SeqCst));
                            }
                            *cell.get_or_init(|| {
                                started.store(true, Ordering::SeqCst);
                                inits.fetch_add(1, Ordering::SeqCst);
                                // Parks the initialising task mid-init.
                                std::thread::sleep(Duration::from_millis(5));
                                round
                            })
                        })
                    })
                    .collect();
                for h in handles {
                    assert_eq!(h.join().unwrap(), round);
                }
                assert_eq!(inits.load(Ordering::SeqCst), 1, "round {round}");
            }
            s.shutdown();
        },
    );
}

/// `parking_lot` keeps one waiting record per thread, linked into a lock's
/// queue before its futex wait: such a wait blocks the thread (as without
/// the hooks), so two tasks of one Processer contending `parking_lot` locks
/// held by plain threads never link one record into two queues.
#[test]
fn tasks_of_one_processer_contending_parking_lot_locks_held_by_threads_all_finish() {
    in_child(
        module_path!(),
        "tasks_of_one_processer_contending_parking_lot_locks_held_by_threads_all_finish",
        || {
            let s = fixed_scheduler(1);
            for round in 0..20u32 {
                let locks: Vec<_> = (0..2)
                    .map(|_| Arc::new(parking_lot::Mutex::new(0u32)))
                    .collect();
                let guards_held = Arc::new(std::sync::Barrier::new(3));
                let holders: Vec<_> = locks
                    .iter()
                    .map(|m| {
                        let (m, held) = (m.clone(), guards_held.clone());
                        std::thread::spawn(move || {
                            let mut g = m.lock();
                            held.wait();
                            std::thread::sleep(Duration::from_millis(5));
                            *g += 1;
                        })
                    })
                    .collect();
                guards_held.wait();
                let tasks: Vec<_> = locks
                    .iter()
                    .map(|m| {
                        let m = m.clone();
                        s.spawn(move || *m.lock() += 10)
                    })
                    .collect();
                for t in tasks {
                    t.join().unwrap();
                }
                for h in holders {
                    h.join().unwrap();
                }
                for m in &locks {
                    assert_eq!(*m.lock(), 11, "round {round}");
                }
            }
            s.shutdown();
        },
    );
}

/// A futex wait with a timeout, inside a task, returns `ETIMEDOUT` after
/// about the timeout, and other tasks run meanwhile.
fn timed_wait_parks_only_the_task(op: i32, absolute: bool) {
    let s = fixed_scheduler(1);
    let ticks = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let (t, d) = (ticks.clone(), done.clone());
    let ticker = s.spawn(move || {
        while !d.load(Ordering::SeqCst) {
            t.fetch_add(1, Ordering::SeqCst);
            gofer::yield_now();
        }
    });
    let waiter = s.spawn(move || {
        let word = AtomicU32::new(0);
        let wait = Duration::from_millis(50);
        let before = ticks.load(Ordering::SeqCst);
        let start = Instant::now();
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: wait.as_nanos() as _,
        };
        if absolute {
            let mut now = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a valid clock and out-pointer.
            unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
            let ns = now.tv_nsec + ts.tv_nsec;
            ts = libc::timespec {
                tv_sec: now.tv_sec + ns / 1_000_000_000,
                tv_nsec: ns % 1_000_000_000,
            };
        }
        // SAFETY: a live futex word and a valid timeout.
        let r = unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                op | libc::FUTEX_PRIVATE_FLAG,
                0u32,
                &ts as *const libc::timespec,
                std::ptr::null::<u32>(),
                u32::MAX,
            )
        };
        let e = errno();
        let took = start.elapsed();
        let ran = ticks.load(Ordering::SeqCst) - before;
        done.store(true, Ordering::SeqCst);
        (r, e, took, ran)
    });
    let (r, e, took, ran) = waiter.join().unwrap();
    ticker.join().unwrap();
    assert_eq!((r, e), (-1, libc::ETIMEDOUT), "the wait's result and errno");
    assert!(
        took >= Duration::from_millis(45) && took < common::PATIENCE,
        "took {took:?}"
    );
    assert!(ran > 0, "no other task ran during the wait");
    s.shutdown();
}

#[test]
fn a_timed_futex_wait_in_a_task_times_out_without_blocking_the_thread() {
    in_child(
        module_path!(),
        "a_timed_futex_wait_in_a_task_times_out_without_blocking_the_thread",
        || {
            timed_wait_parks_only_the_task(libc::FUTEX_WAIT, false);
            timed_wait_parks_only_the_task(libc::FUTEX_WAIT_BITSET, true);
        },
    );
}

#[test]
fn a_futex_wait_in_a_task_on_a_changed_word_fails_with_eagain() {
    in_child(
        module_path!(),
        "a_futex_wait_in_a_task_on_a_changed_word_fails_with_eagain",
        || {
            let s = fixed_scheduler(1);
            let (r, e) = s
                .spawn(|| {
                    let word = AtomicU32::new(1);
                    // SAFETY: a live futex word, no timeout.
                    let r = unsafe {
                        libc::syscall(
                            libc::SYS_futex,
                            word.as_ptr(),
                            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                            0u32,
                            std::ptr::null::<libc::timespec>(),
                        )
                    };
                    (r, errno())
                })
                .join()
                .unwrap();
            assert_eq!((r, e), (-1, libc::EAGAIN));
            s.shutdown();
        },
    );
}

#[test]
fn a_task_waiting_on_a_mutex_held_by_a_plain_thread_wakes_at_its_unlock() {
    in_child(
        module_path!(),
        "a_task_waiting_on_a_mutex_held_by_a_plain_thread_wakes_at_its_unlock",
        || {
            let s = fixed_scheduler(1);
            for round in 0..10 {
                let m = Arc::new(Mutex::new(0u32));
                let (locked_tx, locked_rx) = mpsc::channel::<()>();
                let other_ran = Arc::new(AtomicBool::new(false));
                let (m1, o1) = (m.clone(), other_ran.clone());
                let holder = std::thread::spawn(move || {
                    let mut g = m1.lock().unwrap();
                    locked_tx.send(()).unwrap();
                    // Holds the lock until a second task ran on the
                    // Processer: only possible if the waiting task parked.
                    common::wait_until("another task ran", || o1.load(Ordering::SeqCst));
                    *g += 1;
                });
                locked_rx.recv().unwrap();
                let m2 = m.clone();
                let waiter = s.spawn(move || {
                    *m2.lock().unwrap() += 10;
                });
                let other = s.spawn(move || other_ran.store(true, Ordering::SeqCst));
                holder.join().unwrap();
                other.join().unwrap();
                waiter.join().unwrap();
                assert_eq!(*m.lock().unwrap(), 11, "round {round}");
            }
            s.shutdown();
        },
    );
}

#[test]
fn a_plain_thread_waiting_on_a_mutex_held_by_a_task_wakes_at_its_unlock() {
    in_child(
        module_path!(),
        "a_plain_thread_waiting_on_a_mutex_held_by_a_task_wakes_at_its_unlock",
        || {
            let s = fixed_scheduler(1);
            for round in 0..10 {
                let m = Arc::new(Mutex::new(0u32));
                let (locked_tx, locked_rx) = mpsc::channel::<()>();
                let m1 = m.clone();
                let holder = s.spawn(move || {
                    let mut g = m1.lock().unwrap();
                    locked_tx.send(()).unwrap();
                    // Long enough for the thread to reach the kernel's wait.
                    std::thread::sleep(Duration::from_millis(20));
                    *g += 1;
                });
                locked_rx.recv().unwrap();
                let m2 = m.clone();
                let thread = std::thread::spawn(move || *m2.lock().unwrap() += 10);
                thread.join().unwrap();
                holder.join().unwrap();
                assert_eq!(*m.lock().unwrap(), 11, "round {round}");
            }
            s.shutdown();
        },
    );
}

/// `syscall` with other numbers is libc's: results and errno pass through.
fn other_syscalls_pass_through() {
    // SAFETY: getpid takes no argument.
    let pid = unsafe { libc::syscall(libc::SYS_getpid) };
    // SAFETY: as above.
    assert_eq!(pid, unsafe { libc::getpid() } as libc::c_long);
    // SAFETY: closing an invalid descriptor only fails.
    let r = unsafe { libc::syscall(libc::SYS_close, -1) };
    assert_eq!((r, errno()), (-1, libc::EBADF));
    let mut buf = [0u8; 4];
    // SAFETY: a valid buffer of that length.
    let n = unsafe { libc::syscall(libc::SYS_getrandom, buf.as_mut_ptr(), buf.len(), 0) };
    assert_eq!(n, 4);
}

#[test]
fn other_system_calls_through_syscall_pass_through_unchanged() {
    in_child(
        module_path!(),
        "other_system_calls_through_syscall_pass_through_unchanged",
        || {
            other_syscalls_pass_through();
            let s = fixed_scheduler(1);
            s.spawn(other_syscalls_pass_through).join().unwrap();
            s.shutdown();
        },
    );
}

// ------------------------------------------------------------ conformance

/// One raw futex call's answer: the result and, when it failed, errno.
type Answer = (libc::c_long, i32);

/// `syscall(SYS_futex, ...)` with every argument as a word, through the
/// hooked `syscall`; errno is read only when the call failed.
fn raw_futex(uaddr: usize, op: i32, val: u32, timeout: usize, uaddr2: usize, val3: u32) -> Answer {
    // SAFETY: the cases below pass words and timeouts that are live, or
    // addresses the kernel answers EFAULT or EINVAL for (which the hook
    // must answer the same, never by touching them).
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            uaddr as *const u32,
            op,
            val,
            timeout as *const libc::timespec,
            uaddr2 as *const u32,
            val3,
        )
    };
    (r, if r < 0 { errno() } else { 0 })
}

/// A page mapped with no access, for the whole process: the kernel answers
/// EFAULT for a word or a timeout there, and a read from user space kills
/// the process (an address that was unmapped could be reused meanwhile).
fn no_access_page() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: a fresh anonymous mapping, checked, never unmapped.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as usize
    })
}

/// `clock`'s time `ms` milliseconds from now.
fn clock_in(clock: libc::clockid_t, ms: i64) -> libc::timespec {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock and out-pointer.
    unsafe { libc::clock_gettime(clock, &mut t) };
    let ns = t.tv_nsec + ms * 1_000_000;
    libc::timespec {
        tv_sec: t.tv_sec + ns / 1_000_000_000,
        tv_nsec: ns % 1_000_000_000,
    }
}

/// The conformance cases: a name and a call that cannot wait long
/// (whatever its outcome, at most a few milliseconds), made on the caller's
/// thread. Built where they run: the words and timeouts live in the
/// caller's frame or in the no-access page.
fn conformance_cases() -> Vec<(String, Box<dyn Fn() -> Answer + Send + Sync>)> {
    const FLAGS: [(&str, i32); 4] = [
        ("", 0),
        ("|PRIVATE", libc::FUTEX_PRIVATE_FLAG),
        ("|CLOCK_REALTIME", libc::FUTEX_CLOCK_REALTIME),
        (
            "|PRIVATE|CLOCK_REALTIME",
            libc::FUTEX_PRIVATE_FLAG | libc::FUTEX_CLOCK_REALTIME,
        ),
    ];
    let bad = no_access_page();
    let mut cases: Vec<(String, Box<dyn Fn() -> Answer + Send + Sync>)> = Vec::new();
    let mut add = |name: String, f: Box<dyn Fn() -> Answer + Send + Sync>| cases.push((name, f));
    for (cmd_name, cmd) in [
        ("WAIT", libc::FUTEX_WAIT),
        ("WAIT_BITSET", libc::FUTEX_WAIT_BITSET),
    ] {
        for (flag_name, flags) in FLAGS {
            let op = cmd | flags;
            let n = |what: &str| format!("{cmd_name}{flag_name}: {what}");
            // A timeout that ends 2 ms from now, as this op reads it.
            let soon = move || {
                if cmd == libc::FUTEX_WAIT {
                    libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 2_000_000,
                    }
                } else if flags & libc::FUTEX_CLOCK_REALTIME != 0 {
                    clock_in(libc::CLOCK_REALTIME, 2)
                } else {
                    clock_in(libc::CLOCK_MONOTONIC, 2)
                }
            };
            add(
                n("a word in no-access memory"),
                Box::new(move || raw_futex(bad, op, 0, 0, 0, u32::MAX)),
            );
            add(
                n("a timeout in no-access memory"),
                Box::new(move || {
                    let w = AtomicU32::new(0);
                    raw_futex(w.as_ptr() as usize, op, 0, bad, 0, u32::MAX)
                }),
            );
            add(
                n("both in no-access memory"),
                Box::new(move || raw_futex(bad, op, 0, bad, 0, u32::MAX)),
            );
            add(
                n("a null word"),
                Box::new(move || raw_futex(0, op, 0, 0, 0, u32::MAX)),
            );
            add(
                n("a misaligned word"),
                Box::new(move || {
                    let w = [AtomicU32::new(0), AtomicU32::new(0)];
                    raw_futex(w.as_ptr() as usize + 2, op, 0, 0, 0, u32::MAX)
                }),
            );
            add(
                n("a word that differs"),
                Box::new(move || {
                    let w = AtomicU32::new(1);
                    raw_futex(w.as_ptr() as usize, op, 0, 0, 0, u32::MAX)
                }),
            );
            add(
                n("a timeout with 2e9 nanoseconds"),
                Box::new(move || {
                    let w = AtomicU32::new(0);
                    let ts = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 2_000_000_000,
                    };
                    raw_futex(w.as_ptr() as usize, op, 0, &ts as *const _ as usize, 0, 0)
                }),
            );
            add(
                n("a negative timeout"),
                Box::new(move || {
                    let w = AtomicU32::new(0);
                    let ts = libc::timespec {
                        tv_sec: -1,
                        tv_nsec: 0,
                    };
                    raw_futex(w.as_ptr() as usize, op, 0, &ts as *const _ as usize, 0, 0)
                }),
            );
            add(
                n("a timeout that passes"),
                Box::new(move || {
                    let w = AtomicU32::new(0);
                    let ts = soon();
                    raw_futex(
                        w.as_ptr() as usize,
                        op,
                        0,
                        &ts as *const _ as usize,
                        0,
                        u32::MAX,
                    )
                }),
            );
            add(
                n("a zero bitset, timeout passing"),
                Box::new(move || {
                    let w = AtomicU32::new(0);
                    let ts = soon();
                    raw_futex(w.as_ptr() as usize, op, 0, &ts as *const _ as usize, 0, 0)
                }),
            );
            add(
                n("a zero bitset and a word that differs"),
                Box::new(move || {
                    let w = AtomicU32::new(1);
                    raw_futex(w.as_ptr() as usize, op, 0, 0, 0, 0)
                }),
            );
            add(
                n("a zero bitset and a timeout in no-access memory"),
                Box::new(move || {
                    let w = AtomicU32::new(0);
                    raw_futex(w.as_ptr() as usize, op, 0, bad, 0, 0)
                }),
            );
        }
    }
    for (cmd_name, cmd) in [
        ("WAKE", libc::FUTEX_WAKE),
        ("WAKE_BITSET", libc::FUTEX_WAKE_BITSET),
    ] {
        for (flag_name, flags) in FLAGS {
            let op = cmd | flags;
            let n = |what: &str| format!("{cmd_name}{flag_name}: {what}");
            for count in [0u32, 1, i32::MAX as u32, u32::MAX] {
                add(
                    n(&format!("nobody waiting, count {count}")),
                    Box::new(move || {
                        let w = AtomicU32::new(0);
                        raw_futex(w.as_ptr() as usize, op, count, 0, 0, u32::MAX)
                    }),
                );
            }
            add(
                n("a word in no-access memory"),
                Box::new(move || raw_futex(bad, op, 1, 0, 0, u32::MAX)),
            );
            add(
                n("a null word"),
                Box::new(move || raw_futex(0, op, 1, 0, 0, u32::MAX)),
            );
            add(
                n("a misaligned word"),
                Box::new(move || {
                    let w = [AtomicU32::new(0), AtomicU32::new(0)];
                    raw_futex(w.as_ptr() as usize + 2, op, 1, 0, 0, u32::MAX)
                }),
            );
            add(
                n("a zero bitset"),
                Box::new(move || {
                    let w = AtomicU32::new(0);
                    raw_futex(w.as_ptr() as usize, op, 1, 0, 0, 0)
                }),
            );
        }
    }
    for (flag_name, flags) in [("", 0), ("|PRIVATE", libc::FUTEX_PRIVATE_FLAG)] {
        let n = |what: &str| format!("{what}{flag_name}");
        add(
            n("REQUEUE, nobody waiting"),
            Box::new(move || {
                let (a, b) = (AtomicU32::new(0), AtomicU32::new(0));
                let (a, b) = (a.as_ptr() as usize, b.as_ptr() as usize);
                raw_futex(a, libc::FUTEX_REQUEUE | flags, 1, 1, b, 0)
            }),
        );
        add(
            n("CMP_REQUEUE, a word that differs"),
            Box::new(move || {
                let (a, b) = (AtomicU32::new(1), AtomicU32::new(0));
                let (a, b) = (a.as_ptr() as usize, b.as_ptr() as usize);
                raw_futex(a, libc::FUTEX_CMP_REQUEUE | flags, 1, 1, b, 0)
            }),
        );
        add(
            n("CMP_REQUEUE, a word in no-access memory"),
            Box::new(move || {
                let b = AtomicU32::new(0);
                let b = b.as_ptr() as usize;
                raw_futex(bad, libc::FUTEX_CMP_REQUEUE | flags, 1, 1, b, 0)
            }),
        );
        add(
            n("CMP_REQUEUE, a second word in no-access memory"),
            Box::new(move || {
                let a = AtomicU32::new(0);
                let a = a.as_ptr() as usize;
                raw_futex(a, libc::FUTEX_CMP_REQUEUE | flags, 1, 1, bad, 0)
            }),
        );
        add(
            n("WAKE_OP, a second word in no-access memory"),
            Box::new(move || {
                let a = AtomicU32::new(0);
                let a = a.as_ptr() as usize;
                raw_futex(a, libc::FUTEX_WAKE_OP | flags, 1, 1, bad, 0)
            }),
        );
        add(
            n("WAKE_OP, nobody waiting"),
            Box::new(move || {
                let (a, b) = (AtomicU32::new(0), AtomicU32::new(0));
                let (a, b) = (a.as_ptr() as usize, b.as_ptr() as usize);
                // FUTEX_OP_SET of 1 on the second word, wake if it was 0.
                raw_futex(a, libc::FUTEX_WAKE_OP | flags, 1, 1, b, 1 << 28 | 1 << 12)
            }),
        );
        add(
            n("UNLOCK_PI of a word nobody owns"),
            Box::new(move || {
                let a = AtomicU32::new(0);
                raw_futex(
                    a.as_ptr() as usize,
                    libc::FUTEX_UNLOCK_PI | flags,
                    0,
                    0,
                    0,
                    0,
                )
            }),
        );
        for unknown in [14, 99, 0x7f] {
            add(
                n(&format!("unknown operation {unknown}")),
                Box::new(move || {
                    let a = AtomicU32::new(0);
                    raw_futex(a.as_ptr() as usize, unknown | flags, 0, 0, 0, 0)
                }),
            );
        }
    }
    cases
}

/// Every conformance case answers in a task as on a plain thread (where
/// the hooked `syscall` passes the call to the kernel).
#[test]
fn raw_futex_calls_in_a_task_answer_as_the_kernel_does_on_a_plain_thread() {
    in_child(
        module_path!(),
        "raw_futex_calls_in_a_task_answer_as_the_kernel_does_on_a_plain_thread",
        || {
            let on_thread: Vec<(String, Answer)> = std::thread::spawn(|| {
                conformance_cases()
                    .into_iter()
                    .map(|(n, f)| (n, f()))
                    .collect()
            })
            .join()
            .unwrap();
            let s = fixed_scheduler(1);
            let in_task: Vec<(String, Answer)> = s
                .spawn(|| {
                    conformance_cases()
                        .into_iter()
                        .map(|(n, f)| (n, f()))
                        .collect()
                })
                .join()
                .unwrap();
            s.shutdown();
            let differ: Vec<String> = on_thread
                .iter()
                .zip(&in_task)
                .filter(|(a, b)| a != b)
                .map(|((n, t), (_, k))| format!("{n}: thread {t:?}, task {k:?}"))
                .collect();
            assert!(
                differ.is_empty(),
                "{} of {} cases differ:\n{}",
                differ.len(),
                on_thread.len(),
                differ.join("\n")
            );
            println!("figure: {} futex cases agree", on_thread.len());
        },
    );
}

/// `FUTEX_WAKE` with `count` while three waiters wait on one word: what it
/// returns, and how many waiters returned from their wait because of it.
/// The waiters are plain threads waiting in the kernel, or tasks of a
/// one-Processer scheduler waiting in the hook's table (the wake comes
/// from a plain thread either way).
fn wake_three_with(count: u32, tasks: bool) -> (libc::c_long, usize) {
    const WAITERS: usize = 3;
    let word = Arc::new(AtomicU32::new(0));
    let waiting = Arc::new(AtomicUsize::new(0));
    let returned = Arc::new(AtomicUsize::new(0));
    let wait = {
        let (word, waiting, returned) = (word.clone(), waiting.clone(), returned.clone());
        move || {
            waiting.fetch_add(1, Ordering::SeqCst);
            let (r, e) = raw_futex(
                word.as_ptr() as usize,
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                0,
                0,
                0,
                0,
            );
            if r == 0 {
                returned.fetch_add(1, Ordering::SeqCst);
            } else {
                // The word changed before the wait: released at the end.
                assert_eq!((r, e), (-1, libc::EAGAIN), "the waiter's futex wait");
            }
        }
    };
    let s = fixed_scheduler(1);
    let mut threads = Vec::new();
    let mut handles = Vec::new();
    for _ in 0..WAITERS {
        if tasks {
            handles.push(s.spawn(wait.clone()));
        } else {
            threads.push(std::thread::spawn(wait.clone()));
        }
    }
    common::wait_until("every waiter is about to wait", || {
        waiting.load(Ordering::SeqCst) == WAITERS
    });
    // A task counts itself and queues in the same run (one Processer, no
    // switch between); a thread needs a moment to reach the kernel.
    std::thread::sleep(Duration::from_millis(50));
    let (r, _) = raw_futex(
        word.as_ptr() as usize,
        libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
        count,
        0,
        0,
        0,
    );
    std::thread::sleep(Duration::from_millis(50));
    let woken = returned.load(Ordering::SeqCst);
    // Release the rest.
    word.store(1, Ordering::SeqCst);
    raw_futex(
        word.as_ptr() as usize,
        libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
        i32::MAX as u32,
        0,
        0,
        0,
    );
    for t in threads {
        t.join().unwrap();
    }
    for h in handles {
        h.join().unwrap();
    }
    s.shutdown();
    (r, woken)
}

/// A wake's count means the same for tasks as for threads: the kernel
/// wakes one waiter for a count of 0 and for a count past `i32::MAX` (it
/// reads a signed `int`, and wakes before it compares).
#[test]
fn futex_wake_counts_wake_as_many_tasks_as_the_kernel_wakes_threads() {
    in_child(
        module_path!(),
        "futex_wake_counts_wake_as_many_tasks_as_the_kernel_wakes_threads",
        || {
            for count in [0u32, 1, 2, i32::MAX as u32, u32::MAX] {
                let threads = wake_three_with(count, false);
                let tasks = wake_three_with(count, true);
                assert_eq!(
                    tasks, threads,
                    "count {count}: (returned, waiters woken) for tasks, then for threads"
                );
                assert_eq!(threads.0 as usize, threads.1, "count {count}: the kernel");
            }
        },
    );
}
