//! A task dump on a signal: the handler only writes a byte to a pipe; a
//! thread of its own reads the pipe, takes the dump and prints it.
//!
//! Nothing but the `write` system call runs in signal context (async-signal-safe); the
//! dump, which allocates and takes locks, runs on the thread.

use std::io::{self, Write};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::sys::lock::Mutex;

/// The pipe's write end, for the handler (-1 until the thread runs).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

/// Signals installed so far, and whether the thread runs.
static INSTALLED: Mutex<Option<Vec<i32>>> = Mutex::new(None);

/// Prints a process-wide task dump ([`dump`](super::dump)) to stderr each
/// time the process receives `signal`, and goes on running. For example,
/// with `install_signal_dump(libc::SIGUSR1)`, `kill -USR1 <pid>` prints what
/// every task is doing. Signals that cannot be caught (`SIGKILL`, `SIGSTOP`)
/// and numbers that are no signal give an error. Installing the same signal
/// twice is allowed and does nothing; the handler replaces any handler the
/// program had for that signal.
///
/// The handler does nothing but wake a thread (`gofer-dump`), started at the
/// first call, which takes and prints the dump.
pub fn install_signal_dump(signal: i32) -> io::Result<()> {
    let mut installed = INSTALLED.lock();
    if installed.as_ref().is_some_and(|s| s.contains(&signal)) {
        return Ok(());
    }
    if installed.is_none() {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let read_fd = fds[0];
        let spawned = std::thread::Builder::new()
            .name("gofer-dump".into())
            .spawn(move || dump_thread(read_fd));
        if let Err(e) = spawned {
            // SAFETY: both descriptors are ours and used by nobody yet.
            unsafe {
                libc::close(fds[0]);
                libc::close(fds[1]);
            }
            return Err(e);
        }
        WAKE_FD.store(fds[1], Ordering::Release);
        *installed = Some(Vec::new());
    }
    // SAFETY: a zeroed sigaction is a valid starting point; the handler is
    // an `extern "C" fn(c_int)` that only makes the write system call, which
    // is async-signal-safe, and restores errno.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(signal, &sa, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    installed.as_mut().expect("set above").push(signal);
    Ok(())
}

extern "C" fn on_signal(_: libc::c_int) {
    let fd = WAKE_FD.load(Ordering::Acquire);
    if fd >= 0 {
        // SAFETY: write(2) and the errno location are async-signal-safe; the
        // byte lives on this frame. errno is restored for the code the
        // signal interrupted.
        unsafe {
            let errno = *libc::__errno_location();
            let b = 1u8;
            // The raw system call: with the `hooks` feature, `write` is the
            // hooked symbol, which is not for signal context.
            let _ = libc::syscall(libc::SYS_write, fd, &b as *const u8, 1usize);
            *libc::__errno_location() = errno;
        }
    }
}

fn dump_thread(fd: RawFd) {
    let mut buf = [0u8; 64];
    loop {
        // SAFETY: reads into our own buffer from our own pipe.
        let n = unsafe { libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if n == 0 {
            return;
        }
        let text = super::dump().to_string();
        let mut err = io::stderr().lock();
        let _ = writeln!(err, "{text}");
        let _ = err.flush();
    }
}
