//! With the `hooks` feature, a task's use of a descriptor must leave no
//! trace that code written for threads can observe:
//!
//! - the kernel's `O_NONBLOCK` flag, read with the raw `fcntl` system call
//!   (not the hooked `fcntl`, which reports what the program set), stays
//!   as the program left it after a task read, wrote or accepted on a std
//!   socket or a pipe and had to wait;
//! - a clone made with `try_clone` before any task used the socket shares
//!   the open file with the original: while a task waits on the original,
//!   a plain thread reading the clone blocks until data comes, as std's
//!   blocking read does, instead of failing with `WouldBlock`.
//!
//! Every scenario runs in a child process under a watchdog. Without the
//! feature this file compiles to nothing.
#![cfg(feature = "hooks")]

use crate::common;

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::in_child;
use gofer::{chan, Scheduler};

/// One Processer: a task gives the thread up only by parking (or
/// yielding), so another task that runs after a flag was set knows the
/// task that set it is parked.
fn sched(name: &str) -> Scheduler {
    Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

/// Whether the kernel has `O_NONBLOCK` on `fd`: the raw system call, past
/// the hooked `fcntl`.
fn kernel_nonblocking(fd: i32) -> bool {
    // SAFETY: F_GETFL takes no argument; the descriptor is the caller's.
    let fl = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFL) };
    assert!(fl >= 0, "F_GETFL: {}", std::io::Error::last_os_error());
    fl as i32 & libc::O_NONBLOCK != 0
}

/// Whether the program sees `O_NONBLOCK` on `fd`, through the hooked
/// `fcntl`, as std would.
fn hooked_nonblocking(fd: i32) -> bool {
    // SAFETY: F_GETFL takes no argument; the descriptor is the caller's.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    assert!(fl >= 0, "F_GETFL: {}", std::io::Error::last_os_error());
    fl & libc::O_NONBLOCK != 0
}

/// What the flag looked like at one moment.
struct Seen {
    when: &'static str,
    fd: i32,
    kernel: bool,
    hooked: bool,
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "fd {} {}: kernel O_NONBLOCK {}, hooked F_GETFL says {}",
            self.fd, self.when, self.kernel, self.hooked
        )
    }
}

fn seen(when: &'static str, fd: i32) -> Seen {
    Seen {
        when,
        fd,
        kernel: kernel_nonblocking(fd),
        hooked: hooked_nonblocking(fd),
    }
}

/// Fails, listing every moment the kernel had `O_NONBLOCK` on a
/// descriptor the program never made non-blocking.
fn assert_never_nonblocking(what: &str, all: &[Seen]) {
    let bad: String = all
        .iter()
        .filter(|s| s.kernel)
        .map(|s| format!("\n  {s}"))
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: the kernel's O_NONBLOCK, which the program never set, was on:{bad}"
    );
}

const MIB: usize = 1 << 20;

/// On one Processer: a task reads 5 bytes from `r` before any are there
/// (it parks), then 1 MiB; another task, once the first is parked, writes
/// the 5 bytes to `w`, then the 1 MiB (more than the buffer holds: it
/// parks too). The flags of both descriptors, seen in each task right
/// after its calls, then on the test's thread after both tasks ended.
fn park_on_both_ends<R, W>(name: &str, r: R, w: W) -> Vec<Seen>
where
    R: Read + AsRawFd + Send + 'static,
    W: Write + AsRawFd + Send + 'static,
{
    let (rfd, wfd) = (r.as_raw_fd(), w.as_raw_fd());
    let mut all = vec![seen("before any task", rfd), seen("before any task", wfd)];
    let s = sched(name);
    let entered = Arc::new(AtomicBool::new(false));
    let reader = {
        let entered = entered.clone();
        s.spawn(move || {
            let mut r = r;
            let mut five = [0u8; 5];
            entered.store(true, Ordering::SeqCst);
            r.read_exact(&mut five).expect("read 5 bytes");
            assert_eq!(&five, b"hello");
            let after_read = seen("in the task, after a read that parked", rfd);
            let mut big = vec![0u8; MIB];
            r.read_exact(&mut big).expect("read 1 MiB");
            assert!(big.iter().all(|&b| b == 7));
            (r, after_read)
        })
    };
    let writer = s.spawn(move || {
        let mut w = w;
        while !entered.load(Ordering::SeqCst) {
            gofer::yield_now();
        }
        w.write_all(b"hello").expect("write 5 bytes");
        w.write_all(&vec![7u8; MIB]).expect("write 1 MiB");
        let after_write = seen("in the task, after a write that parked", wfd);
        (w, after_write)
    });
    let (w, after_write) = writer.join().expect("the writer task");
    let (r, after_read) = reader.join().expect("the reader task");
    all.extend([after_read, after_write]);
    all.push(seen("on the thread, after the tasks ended", rfd));
    all.push(seen("on the thread, after the tasks ended", wfd));
    drop((r, w));
    s.shutdown();
    all
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let c = TcpStream::connect(l.local_addr().unwrap()).expect("connect");
    let (s, _) = l.accept().expect("accept");
    (c, s)
}

/// A pipe, both ends blocking, as `File`s.
fn pipe() -> (File, File) {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into a live array of two.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(r, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: two fresh descriptors nothing else owns.
    unsafe {
        (
            File::from(OwnedFd::from_raw_fd(fds[0])),
            File::from(OwnedFd::from_raw_fd(fds[1])),
        )
    }
}

// ------------------------------------------------------------ O_NONBLOCK

#[test]
fn a_tcp_stream_tasks_waited_on_stays_blocking_in_the_kernel() {
    in_child(
        module_path!(),
        "a_tcp_stream_tasks_waited_on_stays_blocking_in_the_kernel",
        || {
            let (a, b) = tcp_pair();
            let all = park_on_both_ends("fdtcp", a, b);
            assert_never_nonblocking("TcpStream", &all);
        },
    );
}

#[test]
fn a_unix_stream_tasks_waited_on_stays_blocking_in_the_kernel() {
    in_child(
        module_path!(),
        "a_unix_stream_tasks_waited_on_stays_blocking_in_the_kernel",
        || {
            let (a, b) = UnixStream::pair().expect("socketpair");
            let all = park_on_both_ends("fdunix", a, b);
            assert_never_nonblocking("UnixStream", &all);
        },
    );
}

#[test]
fn a_pipe_tasks_waited_on_stays_blocking_in_the_kernel() {
    in_child(
        module_path!(),
        "a_pipe_tasks_waited_on_stays_blocking_in_the_kernel",
        || {
            let (r, w) = pipe();
            let all = park_on_both_ends("fdpipe", r, w);
            assert_never_nonblocking("pipe", &all);
        },
    );
}

#[test]
fn a_listener_and_a_udp_socket_tasks_waited_on_stay_blocking_in_the_kernel() {
    in_child(
        module_path!(),
        "a_listener_and_a_udp_socket_tasks_waited_on_stay_blocking_in_the_kernel",
        || {
            let s = sched("fdlisten");
            let l = TcpListener::bind("127.0.0.1:0").expect("bind");
            let addr = l.local_addr().unwrap();
            let u = UdpSocket::bind("127.0.0.1:0").expect("bind");
            let uaddr = u.local_addr().unwrap();
            let (lfd, ufd) = (l.as_raw_fd(), u.as_raw_fd());
            let entered = Arc::new(AtomicBool::new(false));
            let waiter = {
                let entered = entered.clone();
                s.spawn(move || {
                    entered.store(true, Ordering::SeqCst);
                    let (c, _) = l.accept().expect("accept");
                    let after_accept = seen("in the task, after an accept that parked", lfd);
                    let mut buf = [0u8; 8];
                    let (n, _) = u.recv_from(&mut buf).expect("recv_from");
                    assert_eq!(&buf[..n], b"dgram");
                    let after_recv = seen("in the task, after a recv_from that parked", ufd);
                    (l, u, c, [after_accept, after_recv])
                })
            };
            let peer = s.spawn(move || {
                while !entered.load(Ordering::SeqCst) {
                    gofer::yield_now();
                }
                let c = TcpStream::connect(addr).expect("connect");
                let out = UdpSocket::bind("127.0.0.1:0").expect("bind");
                // The waiter parks in recv_from before this runs: it gives
                // the thread up only by parking.
                gofer::yield_now();
                out.send_to(b"dgram", uaddr).expect("send_to");
                c
            });
            let _c = peer.join().expect("the peer task");
            let (l, u, _accepted, in_task) = waiter.join().expect("the waiting task");
            let mut all: Vec<Seen> = in_task.into();
            all.push(seen("on the thread, after the tasks ended", lfd));
            all.push(seen("on the thread, after the tasks ended", ufd));
            drop((l, u));
            s.shutdown();
            assert_never_nonblocking("TcpListener and UdpSocket", &all);
        },
    );
}

// ------------------------------------------------------------ clones

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The kernel's state letter of thread `tid` of this process (`S`: asleep
/// in a system call), or `None` once it is gone.
fn thread_state(tid: i64) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    let close = stat.rfind(')')?;
    stat[close + 1..].trim_start().chars().next()
}

/// Reads 3 bytes on `s` on a plain thread; returns once that thread is
/// asleep in the kernel or has returned, with a way to get its result.
fn read_on_a_plain_thread<S: Read + Send + 'static>(
    mut s: S,
) -> std::thread::JoinHandle<(Result<String, ErrorKind>, S)> {
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let done = done.clone();
        std::thread::spawn(move || {
            // SAFETY: gettid has no arguments and cannot fail.
            tid_tx
                .send(unsafe { libc::syscall(libc::SYS_gettid) })
                .unwrap();
            let mut buf = [0u8; 3];
            let r = s.read(&mut buf).map(|n| text(&buf[..n]));
            done.store(true, Ordering::SeqCst);
            (r.map_err(|e| e.kind()), s)
        })
    };
    let tid = tid_rx.recv().expect("the reader's thread id");
    common::wait_until("the plain thread sleeps in its read or returns", || {
        done.load(Ordering::SeqCst) || thread_state(tid) == Some('S')
    });
    reader
}

/// `a` and `b` connected; `a` untouched by any hooked call. A clone of `a`
/// is made first; then a task parks reading `a` while a plain thread reads
/// the clone: both must wait, and get one message each. Then, the task
/// done, a plain thread reading the clone must wait again.
fn clone_made_before_a_task_used_it<S>(name: &str, a: S, mut b: S, clone: S)
where
    S: Read + Write + Send + 'static,
{
    let s = sched(name);
    let entered = Arc::new(AtomicBool::new(false));
    let task = {
        let entered = entered.clone();
        s.spawn(move || {
            let mut a = a;
            let mut buf = [0u8; 3];
            entered.store(true, Ordering::SeqCst);
            let r = a.read(&mut buf).map(|n| text(&buf[..n]));
            (r.map_err(|e| e.kind()), a)
        })
    };
    // A second task runs only once the first has parked in its read.
    let (parked_tx, parked_rx) = chan::bounded(1);
    s.spawn(move || {
        while !entered.load(Ordering::SeqCst) {
            gofer::yield_now();
        }
        parked_tx.send(()).unwrap();
    });
    parked_rx.recv().expect("the task parked");
    let thread = read_on_a_plain_thread(clone);
    b.write_all(b"one").unwrap();
    b.write_all(b"two").unwrap();
    let (in_task, _a) = task.join().expect("the task");
    let (on_thread, mut clone) = thread.join().expect("the reader thread");
    if on_thread.is_err() {
        // Take the message nobody waited for, so the next read has to wait.
        let mut rest = [0u8; 3];
        clone.read_exact(&mut rest).unwrap();
    }
    // The task is done: a plain thread reads the clone again.
    let again = read_on_a_plain_thread(clone);
    b.write_all(b"end").unwrap();
    let (again, _clone) = again.join().expect("the reader thread");
    s.shutdown();
    let mut got = [in_task.clone(), on_thread.clone()];
    got.sort();
    assert!(
        on_thread.is_ok() && again.is_ok(),
        "a plain thread reading a clone made before any task used the socket must block \
         until data comes, as std's blocking read does:\n  while a task was parked on the \
         original, the thread's read gave {on_thread:?} (the task's {in_task:?})\n  after the \
         task ended, the thread's read gave {again:?}"
    );
    assert_eq!(got, [Ok("one".to_string()), Ok("two".to_string())]);
    assert_eq!(again, Ok("end".to_string()));
}

#[test]
fn a_tcp_clone_made_before_a_task_used_the_socket_blocks_on_a_plain_thread() {
    in_child(
        module_path!(),
        "a_tcp_clone_made_before_a_task_used_the_socket_blocks_on_a_plain_thread",
        || {
            // The accepted end: no hooked call (connect) has touched it.
            let (b, a) = tcp_pair();
            let clone = a.try_clone().expect("try_clone");
            clone_made_before_a_task_used_it("fdclonet", a, b, clone);
        },
    );
}

#[test]
fn a_unix_clone_made_before_a_task_used_the_socket_blocks_on_a_plain_thread() {
    in_child(
        module_path!(),
        "a_unix_clone_made_before_a_task_used_the_socket_blocks_on_a_plain_thread",
        || {
            let (a, b) = UnixStream::pair().expect("socketpair");
            let clone = a.try_clone().expect("try_clone");
            clone_made_before_a_task_used_it("fdcloneu", a, b, clone);
        },
    );
}
