//! Sockets that look like `std::net`'s and wait like tasks: inside a task,
//! an operation that cannot proceed parks the task until the scheduler's
//! reactor reports the socket ready (the thread runs other tasks
//! meanwhile); on a plain thread it blocks the thread, like std.
//!
//! ```no_run
//! use std::io::{Read, Write};
//! use gofer::net::{TcpListener, TcpStream};
//!
//! let sched = gofer::Scheduler::builder().min_threads(2).build()?;
//! let listener = TcpListener::bind("127.0.0.1:0")?;
//! let addr = listener.local_addr()?;
//! sched.spawn(move || {
//!     let (mut s, _) = listener.accept().unwrap();
//!     let mut buf = [0u8; 5];
//!     s.read_exact(&mut buf).unwrap();
//!     s.write_all(&buf).unwrap();
//! });
//! let echoed = sched.block_on(move || {
//!     let mut c = TcpStream::connect(addr).unwrap();
//!     c.write_all(b"hello").unwrap();
//!     let mut buf = [0u8; 5];
//!     c.read_exact(&mut buf).unwrap();
//!     buf
//! });
//! assert_eq!(&echoed, b"hello");
//! sched.shutdown();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every socket is non-blocking at the OS level and close-on-exec; the
//! waiting is gofer's (see `ARCHITECTURE.md`, "The IO manager"). A socket is
//! registered with the reactor of the scheduler of the first task that has
//! to wait on it, once, and tasks of any scheduler may then wait on it.
//!
//! # Caveats
//!
//! - Name resolution (`ToSocketAddrs` with a host name) calls the blocking
//!   `getaddrinfo`: inside a task it holds the thread for as long as the
//!   lookup takes, like any blocking call, and the Dispatcher moves the
//!   other tasks away if that is long. Pass `SocketAddr`s to avoid it.
//! - A blocking call on anything that is not a gofer socket (a `std::net`
//!   socket, a file, a pipe read with `std::io`) still blocks the thread;
//!   use [`gofer::io::wait_readable`](crate::io::wait_readable) for other
//!   descriptors.
//! - An operation that does not have to wait may still switch: after 128
//!   in a row without a wait, the next one yields the thread first, so a
//!   task whose socket is always ready (a deep accept queue, a fast peer)
//!   cannot keep the other tasks of its thread waiting. Sockets in
//!   non-blocking mode never switch.
//!
//! # Where the code is
//!
//! Each type's methods, its `Read` and `Write` (for the stream types) and
//! its `Debug` are written out in the type's own file (`tcp.rs`, `udp.rs`,
//! `unix.rs`), each with its doc comment, so that grep and
//! jump-to-definition find them there. Where several types share a body
//! (the timeouts, a stream's reads and writes), the method is one line that
//! calls a private function of this module (`set_timeout`,
//! `stream_read`, `stream_write` and their vectored forms). Only the
//! descriptor conversions (`AsFd`, `AsRawFd`, `FromRawFd`, `IntoRawFd`,
//! `From` the std type and `OwnedFd`, and `OwnedFd` from the type) come from
//! a macro, `fd_conversions!`, invoked at the end of each type's file
//! under a comment that lists them: seven trait impls per type, the same for
//! all six types but the type names, one of them `unsafe`; written out they
//! would be some 300 lines of copies, six of them `unsafe` blocks to keep
//! alike, with nothing in them a reader looks for.

mod tcp;
mod udp;
pub mod unix;

pub use tcp::{Incoming, TcpListener, TcpStream};
pub use udp::UdpSocket;

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::io::source::Source;
use crate::runtime::io::Interest;

/// A listener's pause after an `accept` that failed for want of resources
/// (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`): the pending connection stays
/// queued and the listener stays readable, so a loop that calls `accept`
/// again at once would fail again at once, at full speed, until a
/// descriptor is freed. So `accept` sleeps (the task, or the thread outside
/// a task) before it returns such an error: 5 ms the first time, doubling
/// to at most 1 s while the failures go on, back to 5 ms after an accept
/// that succeeds. These are the numbers of Go's `net/http` server. The
/// error is still returned, so the caller can log it or close idle
/// connections; a listener in non-blocking mode never sleeps.
pub(crate) struct AcceptBackoff {
    /// The next pause in milliseconds; 0 when the last accept did not fail
    /// for want of resources. Relaxed: a hint only, racing acceptors may
    /// both pause the same amount.
    next_ms: AtomicU32,
}

impl AcceptBackoff {
    /// The first pause.
    const FIRST_MS: u32 = 5;
    /// The longest pause.
    const MAX_MS: u32 = 1000;

    pub(crate) const fn new() -> AcceptBackoff {
        AcceptBackoff {
            next_ms: AtomicU32::new(0),
        }
    }

    /// Passes `r`, an accept's result, on: after pausing if it is an error
    /// of resources (and the listener waits, `nonblocking` false); after
    /// resetting the pause if it is a success.
    pub(crate) fn after<T>(&self, r: io::Result<T>, nonblocking: bool) -> io::Result<T> {
        match &r {
            Ok(_) => {
                if self.next_ms.load(Ordering::Relaxed) != 0 {
                    self.next_ms.store(0, Ordering::Relaxed);
                }
            }
            Err(e) if !nonblocking && is_out_of_resources(e) => {
                let ms = match self.next_ms.load(Ordering::Relaxed) {
                    0 => Self::FIRST_MS,
                    ms => ms,
                };
                self.next_ms
                    .store((ms * 2).min(Self::MAX_MS), Ordering::Relaxed);
                crate::sleep(Duration::from_millis(u64::from(ms)));
            }
            Err(_) => {}
        }
        r
    }
}

/// Whether `e` says the process or the system ran out of descriptors or
/// memory: errors that go away only when something else is freed.
fn is_out_of_resources(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Runs `f` on each address `addr` resolves to, until one succeeds;
/// otherwise returns the last error (`InvalidInput` if there was no
/// address), as std does.
fn each_addr<A: ToSocketAddrs, T>(
    addr: A,
    mut f: impl FnMut(&SocketAddr) -> io::Result<T>,
) -> io::Result<T> {
    let mut last = None;
    for a in addr.to_socket_addrs()? {
        match f(&a) {
            Ok(v) => return Ok(v),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "could not resolve to any addresses",
        )
    }))
}

/// Sets the timeout of `inner` for `interest`: on the socket itself
/// through std's setter `set` (`SO_RCVTIMEO` or `SO_SNDTIMEO`), then, as
/// std's getter `get` reads it back (the kernel rounds it up to its clock
/// tick), for gofer's waits. So the getters report what std's would, a
/// socket given back by `into_std` keeps its timeouts, and clones made with
/// `try_clone` share them (they share `inner`'s timeouts, as std's clones
/// share the kernel's). The body of every socket type's `set_read_timeout`
/// and `set_write_timeout`.
fn set_timeout<S: AsFd>(
    inner: &Source<S>,
    interest: Interest,
    t: Option<Duration>,
    set: fn(&S, Option<Duration>) -> io::Result<()>,
    get: fn(&S) -> io::Result<Option<Duration>>,
) -> io::Result<()> {
    let s = inner.get_ref();
    set(s, t)?;
    inner.set_timeout(interest, get(s)?);
    Ok(())
}

/// A read of a stream socket (`TcpStream`, `UnixStream`): through the
/// io_uring driver when the task's Processer runs one, else through the
/// reactor (`Source::stream_io`: a short read clears the readiness it saw).
/// The body of `Read::read` for the stream types.
fn stream_read<S: AsFd>(inner: &Source<S>, buf: &mut [u8]) -> io::Result<usize>
where
    for<'a> &'a S: io::Read,
{
    if let Some(r) = inner.ring_read(buf) {
        return r;
    }
    let want = buf.len();
    inner.stream_io(Interest::Read, want, |mut s| io::Read::read(&mut s, buf))
}

/// `stream_read` into several buffers.
fn stream_read_vectored<S: AsFd>(
    inner: &Source<S>,
    bufs: &mut [io::IoSliceMut<'_>],
) -> io::Result<usize>
where
    for<'a> &'a S: io::Read,
{
    if let Some(r) = inner.ring_read_vectored(bufs) {
        return r;
    }
    let want = bufs.iter().map(|b| b.len()).sum();
    inner.stream_io(Interest::Read, want, |mut s| {
        io::Read::read_vectored(&mut s, bufs)
    })
}

/// A write to a stream socket, as `stream_read` reads: the body of
/// `Write::write` for the stream types.
fn stream_write<S: AsFd>(inner: &Source<S>, buf: &[u8]) -> io::Result<usize>
where
    for<'a> &'a S: io::Write,
{
    if let Some(r) = inner.ring_write(buf) {
        return r;
    }
    inner.stream_io(Interest::Write, buf.len(), |mut s| {
        io::Write::write(&mut s, buf)
    })
}

/// `stream_write` from several buffers.
fn stream_write_vectored<S: AsFd>(inner: &Source<S>, bufs: &[io::IoSlice<'_>]) -> io::Result<usize>
where
    for<'a> &'a S: io::Write,
{
    if let Some(r) = inner.ring_write_vectored(bufs) {
        return r;
    }
    let want = bufs.iter().map(|b| b.len()).sum();
    inner.stream_io(Interest::Write, want, |mut s| {
        io::Write::write_vectored(&mut s, bufs)
    })
}

/// The descriptor conversions every socket type has, by way of its std
/// counterpart `$std` (which holds the descriptor inside `inner`): for the
/// type `$t`, `AsFd`, `AsRawFd`, `FromRawFd`, `IntoRawFd`, `From<$std>`,
/// `From<OwnedFd>`, and `From<$t> for OwnedFd`. Invoked at the end of each
/// type's file; the rest of each type (its methods, `Read` and `Write`,
/// `Debug`) is written out there.
macro_rules! fd_conversions {
    ($t:ty, $std:ty) => {
        impl std::os::fd::AsFd for $t {
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                self.inner.get_ref().as_fd()
            }
        }

        impl std::os::fd::AsRawFd for $t {
            fn as_raw_fd(&self) -> std::os::fd::RawFd {
                self.inner.get_ref().as_raw_fd()
            }
        }

        impl std::os::fd::FromRawFd for $t {
            /// Takes ownership of `fd`, a socket of this kind.
            ///
            /// # Safety
            /// `fd` is an open socket of this kind that the caller owns and
            /// hands over: nothing else closes or uses it afterwards.
            ///
            /// # Panics
            /// If the descriptor cannot be switched to non-blocking mode
            /// (it is not an open descriptor).
            unsafe fn from_raw_fd(fd: std::os::fd::RawFd) -> Self {
                // SAFETY: the caller hands over an owned, open socket.
                let s = unsafe { <$std as std::os::fd::FromRawFd>::from_raw_fd(fd) };
                <$t>::from(s)
            }
        }

        impl std::os::fd::IntoRawFd for $t {
            /// The socket's descriptor, by way of `into_std` (so in
            /// blocking mode unless `set_nonblocking(true)` was called).
            fn into_raw_fd(self) -> std::os::fd::RawFd {
                std::os::fd::IntoRawFd::into_raw_fd(self.into_std())
            }
        }

        impl From<$std> for $t {
            /// Wraps a std socket; see `from_std`.
            ///
            /// # Panics
            /// If the descriptor cannot be switched to non-blocking mode.
            #[track_caller]
            fn from(s: $std) -> Self {
                crate::error::OrPanic::or_panic(
                    <$t>::from_std(s),
                    "gofer: cannot make a socket non-blocking",
                )
            }
        }

        impl From<std::os::fd::OwnedFd> for $t {
            /// Takes ownership of `fd`, a socket of this kind, as `from_std`
            /// does: it is switched to non-blocking mode at the OS level, and
            /// tasks then wait on it through the reactor.
            ///
            /// # Panics
            /// If the descriptor cannot be switched to non-blocking mode.
            #[track_caller]
            fn from(fd: std::os::fd::OwnedFd) -> Self {
                <$t>::from(<$std>::from(fd))
            }
        }

        impl From<$t> for std::os::fd::OwnedFd {
            /// The socket's descriptor, by way of `into_std`: back in
            /// blocking mode unless `set_nonblocking(true)` was called.
            fn from(s: $t) -> Self {
                std::os::fd::OwnedFd::from(s.into_std())
            }
        }
    };
}
use fd_conversions;
