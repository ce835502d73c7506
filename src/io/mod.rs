//! Waiting for any descriptor the way gofer's sockets wait: a pipe, an
//! eventfd, a database driver's socket. Inside a task the wait parks the
//! task until the descriptor is ready; on a plain thread it blocks in
//! `poll(2)`.
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

// The files of this module (for contributors; the docs above are for users):
//
// | file | what it is |
// |---|---|
// | `source.rs` | `Source`: a non-blocking descriptor that tasks wait on through the reactor |
// | `coop.rs` | a task's budget of IO operations that complete without waiting |

pub(crate) mod coop;
pub(crate) mod source;

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::{Duration, Instant};

use crate::runtime::io::{ring_poll, wait_once, Interest};

/// Waits until `fd` is readable (or its peer hung up, or it has an error),
/// or until `timeout` passes (`ErrorKind::TimedOut`; `None` waits without
/// limit).
///
/// `TimedOut`, not `WouldBlock`: this is a wait with a deadline, like
/// `TcpStream::connect_timeout`, not an operation on a socket with a read
/// timeout (those fail with `WouldBlock`, as std's do, because that is what
/// the system call says).
///
/// Inside a task the task parks and its thread runs other tasks: a
/// duplicate of the descriptor is added to the scheduler's reactor for the
/// wait and removed after it (`dup`, two `epoll_ctl` calls and a `close`;
/// gofer's own sockets stay registered instead). Waiting on a duplicate
/// lets any number of waits, and a gofer socket's own registration, share
/// one descriptor: epoll takes each descriptor number only once. Under the
/// io_uring driver, a task bound to its Processer waits through a poll
/// entry on its Processer's ring instead (no duplicate). On a plain
/// thread it waits in `poll(2)`. A descriptor epoll cannot watch (a regular
/// file) counts as always ready.
///
/// As with `poll(2)` on a thread, input that another reader of the same
/// socket takes before this wait looks may go unseen: the wait then goes on
/// until more arrives.
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
    // A task bound to a ring's Processer waits through a poll entry.
    if let Some(r) = ring_poll(fd, interest == Interest::Write, deadline) {
        return r;
    }
    // A descriptor that is always ready must not keep the thread either.
    coop::spend();
    wait_once(fd, interest, deadline, true)
}
