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

mod tcp;
mod udp;
pub mod unix;

pub use tcp::{Incoming, TcpListener, TcpStream};
pub use udp::UdpSocket;

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

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

/// The descriptor conversions and `Debug` every socket type has, by way of
/// its std counterpart.
macro_rules! socket_impls {
    ($t:ty, $std:ty, $name:literal) => {
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

        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_tuple($name).field(self.inner.get_ref()).finish()
            }
        }
    };
}
pub(crate) use socket_impls;

/// `Read` and `Write` for a stream socket and for a shared reference to it
/// (so that a reader task and a writer task can share one connection).
/// Reads and writes go through `Source::stream_io`: a short one clears the
/// readiness it saw.
macro_rules! stream_impls {
    ($t:ty) => {
        impl std::io::Read for &$t {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if let Some(r) = self.inner.ring_read(buf) {
                    return r;
                }
                let want = buf.len();
                self.inner
                    .stream_io($crate::runtime::io::Interest::Read, want, |mut s| {
                        std::io::Read::read(&mut s, buf)
                    })
            }

            fn read_vectored(
                &mut self,
                bufs: &mut [std::io::IoSliceMut<'_>],
            ) -> std::io::Result<usize> {
                if let Some(r) = self.inner.ring_read_vectored(bufs) {
                    return r;
                }
                let want = bufs.iter().map(|b| b.len()).sum();
                self.inner
                    .stream_io($crate::runtime::io::Interest::Read, want, |mut s| {
                        std::io::Read::read_vectored(&mut s, bufs)
                    })
            }
        }

        impl std::io::Write for &$t {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                if let Some(r) = self.inner.ring_write(buf) {
                    return r;
                }
                self.inner
                    .stream_io($crate::runtime::io::Interest::Write, buf.len(), |mut s| {
                        std::io::Write::write(&mut s, buf)
                    })
            }

            fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
                if let Some(r) = self.inner.ring_write_vectored(bufs) {
                    return r;
                }
                let want = bufs.iter().map(|b| b.len()).sum();
                self.inner
                    .stream_io($crate::runtime::io::Interest::Write, want, |mut s| {
                        std::io::Write::write_vectored(&mut s, bufs)
                    })
            }

            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }

        impl std::io::Read for $t {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                std::io::Read::read(&mut &*self, buf)
            }

            fn read_vectored(
                &mut self,
                bufs: &mut [std::io::IoSliceMut<'_>],
            ) -> std::io::Result<usize> {
                std::io::Read::read_vectored(&mut &*self, bufs)
            }
        }

        impl std::io::Write for $t {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                std::io::Write::write(&mut &*self, buf)
            }

            fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
                std::io::Write::write_vectored(&mut &*self, bufs)
            }

            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
    };
}
pub(crate) use stream_impls;

/// The read and write timeouts every socket type has, as methods of the
/// type (call it inside its `impl` block).
///
/// The timeout is set on the socket itself too (`SO_RCVTIMEO` and
/// `SO_SNDTIMEO`, through std), and what the kernel made of it (rounded up
/// to its clock tick) is the one waits use and the getters report, as std's
/// do. So a socket given back by `into_std` keeps its timeouts. Clones made
/// with `try_clone` share them, as the kernel's are shared by std's clones.
macro_rules! timeout_methods {
    () => {
        /// Sets the read timeout: a read (or receive, or peek) that waits
        /// longer fails with [`WouldBlock`](std::io::ErrorKind::WouldBlock)
        /// (`EAGAIN`), the error std's sockets give on Linux. `None` waits
        /// without limit; a zero duration is refused (`InvalidInput`), as
        /// std does. The kernel rounds the duration up to its clock tick,
        /// and [`read_timeout`](Self::read_timeout) reports the rounded
        /// value, as std's does.
        pub fn set_read_timeout(&self, t: Option<std::time::Duration>) -> std::io::Result<()> {
            let s = self.inner.get_ref();
            s.set_read_timeout(t)?;
            self.inner
                .set_timeout($crate::runtime::io::Interest::Read, s.read_timeout()?);
            Ok(())
        }

        /// Sets the write timeout: a write (or send) that waits longer fails
        /// with [`WouldBlock`](std::io::ErrorKind::WouldBlock); see
        /// [`set_read_timeout`](Self::set_read_timeout).
        pub fn set_write_timeout(&self, t: Option<std::time::Duration>) -> std::io::Result<()> {
            let s = self.inner.get_ref();
            s.set_write_timeout(t)?;
            self.inner
                .set_timeout($crate::runtime::io::Interest::Write, s.write_timeout()?);
            Ok(())
        }

        /// The read timeout (as the kernel rounded it).
        pub fn read_timeout(&self) -> std::io::Result<Option<std::time::Duration>> {
            Ok(self.inner.timeout($crate::runtime::io::Interest::Read))
        }

        /// The write timeout (as the kernel rounded it).
        pub fn write_timeout(&self) -> std::io::Result<Option<std::time::Duration>> {
            Ok(self.inner.timeout($crate::runtime::io::Interest::Write))
        }
    };
}
pub(crate) use timeout_methods;
