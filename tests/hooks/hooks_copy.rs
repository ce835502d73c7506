//! With the `hooks` feature, the copies the kernel makes between
//! descriptors leave the task's thread while they wait: the `splice`
//! std's `io::copy` makes (through `syscall(2)`) between a pipe and a
//! socket, and libc's `sendfile` called directly, as C code would.
//!
//! Each scenario runs on ONE Processer: the task that copies and the task
//! that drains the other end share the thread. A copy that blocked the
//! thread once the destination is full would keep the drain from running,
//! and the copy would never finish; so each runs in a child process under
//! a watchdog, and checks every byte arrived.
//!
//! Without the feature this file compiles to nothing.
#![cfg(feature = "hooks")]

use crate::common;

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::FromRawFd;
use std::time::Duration;

/// Bytes each copy moves: many times what a pipe (64 KiB) or a loopback
/// socket pair's buffers hold, so the copy has to wait for the drain.
const BYTES: usize = 8 << 20;

/// How long a child may take before it counts as hung.
const LIMIT: Duration = Duration::from_secs(30);

/// Runs `body` in a child process under a [`LIMIT`] watchdog, and fails
/// unless it finished, succeeded and printed its end marker.
fn in_child(test: &str, body: impl FnOnce()) {
    if common::child_scenario().as_deref() == Some(test) {
        body();
        println!("CHILD-OK {test}");
        return;
    }
    let out =
        common::run_child_watched(module_path!(), test, test, &[], LIMIT).unwrap_or_else(|| {
            panic!(
                "{test} hung: the copy blocked the only Processer (child killed after {LIMIT:?})"
            )
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("CHILD-OK {test}")),
        "{}",
        common::describe(&out)
    );
}

/// A pipe, as two `File`s (read end, write end).
fn pipe() -> (File, File) {
    let mut fds = [0; 2];
    // SAFETY: two ints for pipe2(2) to fill.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: two fresh descriptors, each owned by one File from here on.
    unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
}

/// A connected loopback TCP pair (client, server).
fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

/// Reads `r` to its end, returning how many bytes came and whether each
/// was the expected pattern byte.
fn drain(mut r: impl Read) -> (usize, bool) {
    let mut buf = vec![0u8; 64 << 10];
    let (mut n, mut ok) = (0, true);
    loop {
        let k = r.read(&mut buf).unwrap();
        if k == 0 {
            return (n, ok);
        }
        ok &= buf[..k]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(n + i));
        n += k;
    }
}

fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

fn data() -> Vec<u8> {
    (0..BYTES).map(pattern).collect()
}

/// A plain thread feeds a pipe; a task copies the pipe into a socket with
/// `io::copy` (std splices); another task of the same thread drains the
/// socket.
#[test]
fn io_copy_from_a_pipe_into_a_socket_parks_the_task() {
    in_child("io_copy_from_a_pipe_into_a_socket_parks_the_task", || {
        let sched = common::fixed_scheduler(1);
        let (pr, mut pw) = pipe();
        let feeder = std::thread::spawn(move || pw.write_all(&data()).unwrap());
        let (c, s) = tcp_pair();
        let drainer = sched.spawn(move || drain(c));
        let copier = sched.spawn(move || {
            let (mut pr, mut s) = (pr, s);
            std::io::copy(&mut pr, &mut s).unwrap()
            // `s` closes here: the drain sees the end.
        });
        assert_eq!(copier.join().unwrap(), BYTES as u64);
        assert_eq!(drainer.join().unwrap(), (BYTES, true));
        feeder.join().unwrap();
        sched.shutdown();
    });
}

/// A plain thread feeds a socket; a task copies the socket into a pipe
/// (std splices); another task of the same thread drains the pipe.
#[test]
fn io_copy_from_a_socket_into_a_pipe_parks_the_task() {
    in_child("io_copy_from_a_socket_into_a_pipe_parks_the_task", || {
        let sched = common::fixed_scheduler(1);
        let (mut c, s) = tcp_pair();
        let feeder = std::thread::spawn(move || c.write_all(&data()).unwrap());
        let (pr, pw) = pipe();
        let drainer = sched.spawn(move || drain(pr));
        let copier = sched.spawn(move || {
            let (mut s, mut pw) = (s, pw);
            std::io::copy(&mut s, &mut pw).unwrap()
        });
        assert_eq!(copier.join().unwrap(), BYTES as u64);
        assert_eq!(drainer.join().unwrap(), (BYTES, true));
        feeder.join().unwrap();
        sched.shutdown();
    });
}

/// A task sends a regular file into a pipe with libc's `sendfile` (as C
/// code would); another task of the same thread drains the pipe.
#[test]
fn sendfile_from_a_file_into_a_pipe_parks_the_task() {
    in_child("sendfile_from_a_file_into_a_pipe_parks_the_task", || {
        let path = std::env::temp_dir().join(format!("gofer-hooks-copy-{}", std::process::id()));
        std::fs::write(&path, data()).unwrap();
        let sched = common::fixed_scheduler(1);
        let (pr, pw) = pipe();
        let drainer = sched.spawn(move || drain(pr));
        let p = path.clone();
        let copier = sched.spawn(move || {
            use std::os::fd::AsRawFd;
            let f = File::open(&p).unwrap();
            let mut sent = 0;
            while sent < BYTES {
                // SAFETY: two live descriptors; a null offset uses the
                // file's own.
                let n = unsafe {
                    libc::sendfile(
                        pw.as_raw_fd(),
                        f.as_raw_fd(),
                        std::ptr::null_mut(),
                        BYTES - sent,
                    )
                };
                assert!(n > 0, "sendfile: {}", std::io::Error::last_os_error());
                sent += n as usize;
            }
            sent
            // `pw` closes here: the drain sees the end.
        });
        assert_eq!(copier.join().unwrap(), BYTES);
        assert_eq!(drainer.join().unwrap(), (BYTES, true));
        sched.shutdown();
        std::fs::remove_file(&path).unwrap();
    });
}
