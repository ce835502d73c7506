//! With the `hooks` feature, code written for threads keeps behaving as it
//! does on a thread in the places where a hook could leak: a forked child
//! (`std::process::Command` with `pre_exec`), printing to a full stdout or
//! stderr pipe, a `dup2`/`dup3` that fails, and a Unix-domain connect to a
//! listener whose queue is full.
//!
//! Every scenario runs in a child process under a watchdog: the failures
//! they guard against are hangs and aborts.
#![cfg(feature = "hooks")]

use crate::common;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use common::{in_child, wait_until};
use gofer::Scheduler;

fn sched(name: &str) -> Scheduler {
    Scheduler::builder()
        .min_threads(2)
        .max_threads(4)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

/// A close-on-exec pipe: `(read end, write end)`.
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into a live array.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(r, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors are new and owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Waits until every task alive on `s` is parked: no Processer runs or
/// has anything queued.
fn wait_parked(s: &Scheduler) {
    wait_until("every task to park", || {
        s.stats()
            .processers
            .iter()
            .filter(|p| p.kind != "caller")
            .all(|p| p.sleeping && p.queued == 0 && !p.running)
    });
}

/// Whether the kernel holds `O_NONBLOCK` on `fd`'s open file, asked through
/// the system call itself (the hooked `fcntl` could answer differently).
fn os_nonblocking(fd: RawFd) -> bool {
    // SAFETY: F_GETFL takes no argument.
    let fl = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFL) } as i32;
    assert!(fl >= 0, "F_GETFL: {}", std::io::Error::last_os_error());
    fl & libc::O_NONBLOCK != 0
}

#[test]
fn a_forked_child_closing_a_descriptor_leaves_the_parents_waiter_alone() {
    in_child(
        module_path!(),
        "a_forked_child_closing_a_descriptor_leaves_the_parents_waiter_alone",
        || {
            let s = sched("fork-close");
            for round in 0..5 {
                let (r, w) = pipe();
                let rfd = r.as_raw_fd();
                let reader = s.spawn(move || {
                    let mut f = File::from(r);
                    let mut b = [0u8; 4];
                    f.read_exact(&mut b).map(|_| b)
                });
                wait_parked(&s);
                // Forked (pre_exec forces fork) from a task: in the child,
                // that task's copy closes the descriptor the parent's reader
                // is registered with, in the epoll instance they share.
                let status = s
                    .spawn(move || {
                        // SAFETY: the closure only calls close(2), which is
                        // async-signal-safe.
                        unsafe {
                            Command::new("true")
                                .pre_exec(move || {
                                    libc::close(rfd);
                                    Ok(())
                                })
                                .status()
                        }
                    })
                    .join()
                    .unwrap()
                    .expect("run true");
                assert!(status.success());
                File::from(w).write_all(b"ping").unwrap();
                let got = reader.join().unwrap().unwrap();
                assert_eq!(&got, b"ping", "round {round}");
            }
            s.shutdown();
        },
    );
}

#[test]
fn a_forked_child_never_runs_the_parents_tasks() {
    in_child(
        module_path!(),
        "a_forked_child_never_runs_the_parents_tasks",
        || {
            let s = sched("fork-sleep");
            let me = std::process::id();
            for round in 0..5 {
                let (r, w) = pipe();
                let w = std::sync::Arc::new(File::from(w));
                let status = s
                    .spawn(move || {
                        // Tasks queued on this Processer when it forks: in the
                        // child, a sleep in pre_exec must not let them run.
                        for _ in 0..8 {
                            let w = w.clone();
                            gofer::spawn(move || {
                                let pid = std::process::id();
                                (&*w).write_all(&pid.to_ne_bytes()).unwrap();
                            });
                        }
                        // SAFETY: std::thread::sleep in the child is a plain
                        // nanosleep (with the fix), async-signal-safe.
                        unsafe {
                            Command::new("true")
                                .pre_exec(|| {
                                    std::thread::sleep(Duration::from_millis(20));
                                    Ok(())
                                })
                                .status()
                        }
                    })
                    .join()
                    .unwrap()
                    .expect("run true");
                assert!(status.success(), "round {round}: {status:?}");
                // Every writer (and its clone of the write end) is gone once
                // this reads end of file.
                let mut pids = Vec::new();
                wait_parked(&s);
                File::from(r).read_to_end(&mut pids).unwrap();
                let pids: Vec<u32> = pids
                    .chunks(4)
                    .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
                    .collect();
                assert_eq!(pids.len(), 8, "round {round}: {pids:?}");
                assert!(
                    pids.iter().all(|&p| p == me),
                    "round {round}: a task ran in the child: {pids:?} (parent {me})"
                );
            }
            s.shutdown();
        },
    );
}

/// Lines each printing task writes; 40 tasks write 400 KiB, several times
/// what a pipe holds.
const LINES: usize = 100;
const PRINTERS: usize = 40;

fn line(task: usize, j: usize) -> String {
    format!("task {task:02} line {j:03} {}", "x".repeat(80))
}

/// Checks the child's output: every line's text exactly once. Matched as
/// text, not as whole lines: the test harness may print the start of a
/// line before the first, and a panic report (written by std's hook
/// without the stderr lock) may land between a line and its newline.
fn check_lines(out: &[u8], test: &str) {
    let text = String::from_utf8_lossy(out);
    for t in 0..PRINTERS {
        for j in 0..LINES {
            let l = line(t, j);
            assert_eq!(
                text.matches(l.as_str()).count(),
                1,
                "{test}: line {l:?} is missing or doubled"
            );
        }
    }
}

/// Runs the printing child `test` with nobody reading its output for the
/// first 300 ms (its pipes fill), and checks that it finished and
/// succeeded.
fn run_printer(test: &str) -> std::process::Output {
    let out = common::run_child_watched_late(
        module_path!(),
        test,
        test,
        &[],
        common::IN_CHILD_LIMIT,
        Duration::from_millis(300),
    )
    .expect("the child hung");
    assert!(out.status.success(), "{}", common::describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("CHILD-OK {test}")));
    out
}

#[test]
fn printing_from_tasks_to_a_full_stdout_pipe_loses_nothing() {
    const TEST: &str = "printing_from_tasks_to_a_full_stdout_pipe_loses_nothing";
    if common::child_scenario().as_deref() == Some(TEST) {
        let s = sched("print");
        let hs: Vec<_> = (0..PRINTERS)
            .map(|t| {
                s.spawn(move || {
                    for j in 0..LINES {
                        println!("{}", line(t, j));
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().expect("a printing task panicked");
        }
        s.shutdown();
        assert!(!os_nonblocking(1), "stdout was left non-blocking");
        println!("CHILD-OK {TEST}");
        return;
    }
    let out = run_printer(TEST);
    check_lines(&out.stdout, TEST);
}

#[test]
fn printing_and_panicking_tasks_on_a_full_stderr_pipe_do_not_abort() {
    const TEST: &str = "printing_and_panicking_tasks_on_a_full_stderr_pipe_do_not_abort";
    if common::child_scenario().as_deref() == Some(TEST) {
        let s = sched("eprint");
        let hs: Vec<_> = (0..PRINTERS)
            .map(|t| {
                s.spawn(move || {
                    for j in 0..LINES {
                        eprintln!("{}", line(t, j));
                    }
                    if t % 8 == 0 {
                        panic!("task {t} panics on purpose");
                    }
                })
            })
            .collect();
        let panicked = hs.into_iter().map(|h| h.join()).filter(Result::is_err);
        assert_eq!(panicked.count(), PRINTERS / 8);
        s.shutdown();
        assert!(!os_nonblocking(2), "stderr was left non-blocking");
        println!("CHILD-OK {TEST}");
        return;
    }
    let out = run_printer(TEST);
    check_lines(&out.stderr, TEST);
}

#[test]
fn a_failed_dup2_or_dup3_leaves_the_target_and_its_waiter_alone() {
    in_child(
        module_path!(),
        "a_failed_dup2_or_dup3_leaves_the_target_and_its_waiter_alone",
        || {
            let s = sched("dup-fail");
            // Far above anything this process opens.
            let closed_fd: RawFd = 900_000;
            for round in 0..4 {
                let (r, w) = pipe();
                let rfd = r.as_raw_fd();
                let reader = s.spawn(move || {
                    let mut f = File::from(r);
                    let mut b = [0u8; 4];
                    f.read_exact(&mut b).map(|_| b)
                });
                wait_parked(&s);
                let (ok, _keep) = pipe();
                // SAFETY: dup2/dup3 with arguments the kernel refuses; no
                // descriptor changes hands.
                let (r2, errno) = unsafe {
                    let r = if round % 2 == 0 {
                        libc::dup2(closed_fd, rfd)
                    } else {
                        libc::dup3(ok.as_raw_fd(), rfd, 0x7fff_0000)
                    };
                    (r, *libc::__errno_location())
                };
                assert_eq!(r2, -1, "round {round}");
                let want = if round % 2 == 0 {
                    libc::EBADF
                } else {
                    libc::EINVAL
                };
                assert_eq!(errno, want, "round {round}");
                File::from(w).write_all(b"pong").unwrap();
                let got = reader.join().unwrap();
                assert_eq!(&got.unwrap(), b"pong", "round {round}");
            }
            s.shutdown();
        },
    );
}

#[test]
fn a_unix_connect_to_a_full_listener_waits_as_on_a_thread() {
    in_child(
        module_path!(),
        "a_unix_connect_to_a_full_listener_waits_as_on_a_thread",
        || {
            let path = std::env::temp_dir().join(format!("gofer-full-{}.sock", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
            // A queue of one: the second connection waiting to be accepted
            // finds it full.
            // SAFETY: listen on a socket we own.
            assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 0) }, 0);
            let s = sched("unix-full");
            const CLIENTS: usize = 4;
            let (tx, rx) = mpsc::channel();
            let p2 = path.clone();
            let client = s.spawn(move || {
                let mut conns = Vec::new();
                for i in 0..CLIENTS {
                    let _ = tx.send(i);
                    let mut c = std::os::unix::net::UnixStream::connect(&p2)?;
                    c.write_all(&[i as u8])?;
                    conns.push(c);
                }
                Ok::<_, std::io::Error>(conns.len())
            });
            // Accept only once the client is at its second connect, which
            // finds the queue full (the pause only gives it time to get
            // there; every connect must succeed whatever the timing).
            for _ in 0..2 {
                let _ = rx.recv_timeout(common::PATIENCE);
            }
            std::thread::sleep(Duration::from_millis(20));
            let mut got = Vec::new();
            for _ in 0..CLIENTS {
                let (mut c, _) = listener.accept().unwrap();
                let mut b = [0u8; 1];
                c.read_exact(&mut b).unwrap();
                got.push(b[0]);
            }
            assert_eq!(client.join().unwrap().unwrap(), CLIENTS);
            got.sort();
            assert_eq!(got, (0..CLIENTS as u8).collect::<Vec<_>>());
            s.shutdown();
            let _ = std::fs::remove_file(&path);
        },
    );
}

#[test]
fn a_hooked_std_socket_wrapped_in_gofer_net_shares_its_registration() {
    in_child(
        module_path!(),
        "a_hooked_std_socket_wrapped_in_gofer_net_shares_its_registration",
        || {
            let s = sched("wrap");
            for round in 0..4 {
                let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
                let (tx, rx) = mpsc::channel::<()>();
                let reader = s.spawn(move || {
                    let mut a = a;
                    let mut buf = [0u8; 4];
                    // Parks in the hooked read: the hooks register `a`.
                    a.read_exact(&mut buf)?;
                    assert_eq!(&buf, b"one!");
                    let mut g = gofer::net::unix::UnixStream::from_std(a)?;
                    let _ = tx.send(());
                    // Parks again, now through gofer::net.
                    g.read_exact(&mut buf)?;
                    Ok::<_, std::io::Error>(buf)
                });
                wait_parked(&s);
                b.write_all(b"one!").unwrap();
                rx.recv_timeout(common::PATIENCE).unwrap();
                wait_parked(&s);
                b.write_all(b"two!").unwrap();
                let got = reader.join().unwrap();
                assert_eq!(&got.unwrap(), b"two!", "round {round}");
            }
            s.shutdown();
        },
    );
}
