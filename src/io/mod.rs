//! Waiting for any descriptor the way gofer's sockets wait: a pipe, an
//! eventfd, a database driver's socket (sylar's `addEvent`, in blocking
//! style).
//!
//! ```
//! use std::io::Write;
//! use std::os::unix::net::UnixStream;
//! use std::time::Duration;
//!
//! let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
//! let (a, mut b) = UnixStream::pair().unwrap();
//! let waiter = sched.spawn(move || {
//!     // Parks the task (not the thread) until `a` is readable.
//!     gofer::io::wait_readable(&a, Some(Duration::from_secs(5)))
//! });
//! b.write_all(b"x").unwrap();
//! waiter.join().unwrap().unwrap();
//! sched.shutdown();
//! ```

pub(crate) mod coop;
pub(crate) mod source;

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::runtime::io::{poll_fd, Interest, Registration};

/// Waits until `fd` is readable (or its peer hung up, or it has an error),
/// or until `timeout` passes (`ErrorKind::TimedOut`; `None` waits without
/// limit).
///
/// Inside a task the task parks and its thread runs other tasks: a
/// duplicate of the descriptor is added to the scheduler's reactor for the
/// wait and removed after it (`dup`, two `epoll_ctl` calls and a `close`;
/// gofer's own sockets stay registered instead). Waiting on a duplicate
/// lets any number of waits, and a gofer socket's own registration, share
/// one descriptor: epoll takes each descriptor number only once. On a plain
/// thread it waits in `poll(2)`. A descriptor epoll cannot watch (a regular
/// file) counts as always ready.
pub fn wait_readable(fd: &impl AsFd, timeout: Option<Duration>) -> io::Result<()> {
    wait(fd.as_fd().as_raw_fd(), Interest::Read, timeout)
}

/// Waits until `fd` is writable (or it has an error), or until `timeout`
/// passes (`ErrorKind::TimedOut`); see [`wait_readable`].
pub fn wait_writable(fd: &impl AsFd, timeout: Option<Duration>) -> io::Result<()> {
    wait(fd.as_fd().as_raw_fd(), Interest::Write, timeout)
}

fn wait(fd: RawFd, interest: Interest, timeout: Option<Duration>) -> io::Result<()> {
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    // A descriptor that is always ready must not keep the thread either.
    coop::spend();
    if crate::runtime::context::current_task_ptr().is_none() {
        return poll_fd(fd, interest, deadline);
    }
    // The caller's descriptor number may already be in this reactor (a
    // gofer socket's registration, or another task's wait on it), and epoll
    // refuses it a second time: wait on a duplicate of our own. Without a
    // spare descriptor, try the number itself.
    let dup = match dup_cloexec(fd) {
        Ok(dup) => dup,
        Err(e) if e.raw_os_error() == Some(libc::EBADF) => return Err(e),
        Err(_) => return wait_registered(fd, fd, interest, deadline),
    };
    wait_registered(dup.as_raw_fd(), fd, interest, deadline)
    // `dup` closes here, after the registration was removed.
}

/// Registers `reg_fd` for the length of one wait. `fd` is what a wait that
/// cannot use the reactor polls instead.
fn wait_registered(
    reg_fd: RawFd,
    fd: RawFd,
    interest: Interest,
    deadline: Option<Instant>,
) -> io::Result<()> {
    match Registration::for_current_task(reg_fd) {
        // Dropping the registration removes it before `reg_fd` can close.
        Ok(Some(reg)) => reg.wait(interest, deadline),
        Ok(None) => poll_fd(fd, interest, deadline),
        // EPERM: a regular file or directory, always ready.
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(()),
        // EEXIST: the number itself is in this reactor already (only when
        // no duplicate could be made): wait the thread's way.
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => poll_fd(fd, interest, deadline),
        Err(e) => Err(e),
    }
}

/// A close-on-exec duplicate of `fd`.
fn dup_cloexec(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl duplicates a descriptor the caller keeps open for the
    // call; the result is checked and then owned by nobody else.
    unsafe {
        let d = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0);
        if d < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(d))
    }
}
