//! [`Source`]: a non-blocking descriptor that tasks wait on through their
//! scheduler's reactor, and threads wait on with `poll(2)`.
//!
//! Every gofer socket is one of these around a std socket. The descriptor
//! is always non-blocking at the OS level; "blocking" is done here:
//!
//! 1. try the syscall;
//! 2. on `EAGAIN` (and unless the user asked for non-blocking behaviour):
//!    - inside a task, register the descriptor with the reactor of the
//!      task's scheduler (once: edge triggered, both directions), clear the
//!      readiness the attempt saw, park until the reactor reports the
//!      direction ready, and go back to 1;
//!    - on a plain thread, wait in `poll(2)` and go back to 1.
//!
//! A read or write timeout becomes the deadline of the operation's waits,
//! counted from its first wait (an operation that never waits reads no
//! clock), and an expired one is `EAGAIN` (`ErrorKind::WouldBlock`), the
//! error std's blocking sockets give when their `SO_RCVTIMEO`/`SO_SNDTIMEO`
//! passes. (The reactor
//! and `poll_fd` say `TimedOut`; [`expired`] turns that into std's error.
//! A connect's wait keeps `TimedOut`, as `connect_timeout` does in std.)
//!
//! A stream read or write that moves fewer bytes than asked clears the
//! readiness it saw (`stream_io`): the next one waits without trying.
//!
//! An operation that never has to wait still yields the thread now and
//! then (`coop.rs`), so a task whose socket is always ready cannot keep
//! its thread from the other tasks.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::sys::lock::Mutex;
use std::time::{Duration, Instant};

use super::coop;
use crate::runtime::io::{
    poll_fd, ring_accept, ring_recv, ring_recv_from, ring_send_to, stream_op, vectored_op,
    Interest, RecvPath, RecvSlot, Registration, StreamOp, VectoredOp,
};

/// A timeout kept in an atomic: nanoseconds, 0 meaning none.
#[derive(Default)]
struct AtomicTimeout(AtomicU64);

/// The read and write timeouts of one socket, shared by every handle that
/// [`Source::try_clone`] made from another: the kernel keeps
/// `SO_RCVTIMEO`/`SO_SNDTIMEO` per socket, not per descriptor, so a
/// timeout set through one std clone holds for all of them, and so it does
/// here. Waits read it when they start (one load through the `Arc`), as
/// the kernel reads the socket's timeout when a blocking call starts: a
/// wait already under way keeps the deadline it began with.
///
/// Kept here rather than read back from the kernel with `getsockopt` when
/// a wait starts: that would add a system call to every wait, while this
/// costs one small allocation per socket, when it is made. A socket whose
/// timeouts are changed outside gofer's methods (`setsockopt` on its raw
/// descriptor, or a std handle made from a duplicate of it) is not seen:
/// `from_std` reads the kernel's values once, when it wraps.
#[derive(Default)]
struct Timeouts {
    read: AtomicTimeout,
    write: AtomicTimeout,
}

impl AtomicTimeout {
    fn get(&self) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            n => Some(Duration::from_nanos(n)),
        }
    }

    fn set(&self, d: Option<Duration>) {
        let n = d.map_or(0, |d| {
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
        });
        self.0.store(n, Ordering::Relaxed);
    }
}

/// A descriptor owned as `T` (a std socket), waited on by gofer.
pub(crate) struct Source<T: AsFd> {
    /// Registered with a reactor at the first wait inside a task; dropped
    /// (deregistered, unless the `hooks` bookkeeping shares it) before `io`
    /// closes the descriptor.
    reg: OnceLock<Arc<Registration>>,
    /// Serialises the registration: two tasks (a reader and a writer) may
    /// reach their first wait at once, and epoll takes an fd only once.
    registering: Mutex<()>,
    io: Option<T>,
    /// The user asked for non-blocking behaviour: return `WouldBlock`.
    nonblocking: AtomicBool,
    /// Shared with this socket's clones (see [`Timeouts`]).
    timeouts: Arc<Timeouts>,
    /// The socket's multishot receive, shared with its clones (made at the
    /// first ring read, or at a `try_clone`): `runtime/io/uring_recv.rs`.
    recv: OnceLock<Arc<RecvSlot>>,
}

/// Sets or clears `O_NONBLOCK` on `fd` (one `fcntl` to read the flags, and
/// one to change them if they differ).
fn set_os_nonblocking(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller owns; results checked.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        let want = if on {
            flags | libc::O_NONBLOCK
        } else {
            flags & !libc::O_NONBLOCK
        };
        if want != flags && libc::fcntl(fd, libc::F_SETFL, want) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A socket wait's error as the socket operation reports it: an expired
/// read or write timeout is `EAGAIN` (`WouldBlock`), what std's blocking
/// sockets return when `SO_RCVTIMEO`/`SO_SNDTIMEO` passes; anything else
/// is passed on.
fn expired(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::TimedOut {
        io::Error::from_raw_os_error(libc::EAGAIN)
    } else {
        e
    }
}

impl<T: AsFd> Source<T> {
    /// Takes `io` over, switching its descriptor to non-blocking mode.
    pub(crate) fn new(io: T) -> io::Result<Source<T>> {
        set_os_nonblocking(io.as_fd().as_raw_fd(), true)?;
        Ok(Source {
            reg: OnceLock::new(),
            registering: Mutex::new(()),
            io: Some(io),
            nonblocking: AtomicBool::new(false),
            timeouts: Arc::default(),
            recv: OnceLock::new(),
        })
    }

    /// A new handle to the same socket: `dup` (a std `try_clone`) makes its
    /// descriptor from this one's, and the two share their read and write
    /// timeouts from then on (see [`Timeouts`]), as std's clones do. The
    /// non-blocking behaviour asked with `set_nonblocking` is not shared.
    pub(crate) fn try_clone(&self, dup: impl FnOnce(&T) -> io::Result<T>) -> io::Result<Source<T>> {
        let mut clone = Source::new(dup(self.get_ref())?)?;
        clone.timeouts = Arc::clone(&self.timeouts);
        clone.recv = OnceLock::from(Arc::clone(self.recv.get_or_init(Arc::default)));
        Ok(clone)
    }

    /// Takes over a socket made elsewhere (a `from_std`): [`new`](Self::new),
    /// and the read and write timeouts the socket already has
    /// (`SO_RCVTIMEO`, `SO_SNDTIMEO`) become the deadlines of its waits, so
    /// that a std socket with timeouts keeps them. A socket gofer made
    /// itself (bound, connected or accepted) has none to read.
    pub(crate) fn adopt(io: T) -> io::Result<Source<T>> {
        let src = Source::new(io)?;
        let sock = socket2::SockRef::from(src.get_ref());
        src.set_timeout(Interest::Read, sock.read_timeout()?);
        src.set_timeout(Interest::Write, sock.write_timeout()?);
        Ok(src)
    }

    /// The wrapped socket.
    pub(crate) fn get_ref(&self) -> &T {
        self.io.as_ref().expect("present until into_inner")
    }

    /// Gives the socket back, deregistered, in the mode std's own socket
    /// would be in: blocking at the OS level, unless the user asked for
    /// non-blocking behaviour (`set_nonblocking(true)`).
    ///
    /// `O_NONBLOCK` belongs to the open file description, which clones
    /// (`try_clone`) share: a clone still wrapped by gofer then makes blocking
    /// system calls, holding its thread (its callers must not be tasks).
    ///
    /// # Panics
    /// If the descriptor's flags cannot be changed (it is not open: a
    /// broken invariant of the owned socket).
    pub(crate) fn into_inner(mut self) -> T {
        self.reg.take();
        self.recv.take();
        let io = self.io.take().expect("present until into_inner");
        if let Err(e) = set_os_nonblocking(io.as_fd().as_raw_fd(), self.is_nonblocking()) {
            panic!("gofer: cannot restore a socket's blocking mode: {e}");
        }
        io
    }

    pub(crate) fn set_nonblocking(&self, on: bool) {
        self.nonblocking.store(on, Ordering::Relaxed);
    }

    pub(crate) fn is_nonblocking(&self) -> bool {
        self.nonblocking.load(Ordering::Relaxed)
    }

    /// Sets the read or write timeout that waits use as their deadline.
    /// (The socket types keep the kernel's `SO_RCVTIMEO`/`SO_SNDTIMEO` in
    /// step and store what the kernel made of the value: see
    /// `net::set_timeout`.)
    pub(crate) fn set_timeout(&self, interest: Interest, t: Option<Duration>) {
        match interest {
            Interest::Read => self.timeouts.read.set(t),
            Interest::Write => self.timeouts.write.set(t),
        }
    }

    pub(crate) fn timeout(&self, interest: Interest) -> Option<Duration> {
        match interest {
            Interest::Read => self.timeouts.read.get(),
            Interest::Write => self.timeouts.write.get(),
        }
    }

    /// Runs `f` until it does not return `WouldBlock`, waiting for
    /// `interest` in between (module docs), with the socket's timeout for
    /// that direction. An expired timeout is `WouldBlock`, as in std.
    pub(crate) fn io<R>(
        &self,
        interest: Interest,
        f: impl FnMut(&T) -> io::Result<R>,
    ) -> io::Result<R> {
        self.io_timeout(interest, self.timeout(interest), f)
    }

    /// [`io`](Self::io) with an explicit timeout (its expiry:
    /// `WouldBlock`).
    pub(crate) fn io_timeout<R>(
        &self,
        interest: Interest,
        timeout: Option<Duration>,
        mut f: impl FnMut(&T) -> io::Result<R>,
    ) -> io::Result<R> {
        // The deadline is fixed at the operation's first wait, not at its
        // start: an operation that does not wait (most writes) reads no
        // clock. With it, whether it was made just now from a positive
        // timeout (so the wait need not read the clock again before it
        // parks).
        let mut deadline = None;
        let mut deadline_of = |timeout: Option<Duration>| match deadline {
            Some(d) => (d, false),
            None => {
                let d = timeout.and_then(|t| Instant::now().checked_add(t));
                deadline = Some(d);
                (d, timeout.is_some_and(|t| !t.is_zero()))
            }
        };
        let io = self.get_ref();
        // Every operation spends from the task's budget, which a wait
        // refills (see `coop.rs`); a non-blocking one never switches.
        if !self.is_nonblocking() {
            coop::spend();
        }
        // Whether the last step was a wait: the attempt follows it whatever
        // the readiness word says, since a wait through another scheduler's
        // reactor (see `Registration::wait`) leaves it as it was.
        let mut waited = false;
        loop {
            // What the reactor last said, taken before the attempt so an
            // event that lands during it is not cleared away.
            let seen = self.reg.get().map(|r| r.readiness(interest));
            if let (Some(r), Some(ev)) = (self.reg.get(), seen) {
                if !waited && !ev.is_ready() && !self.is_nonblocking() {
                    let (d, ahead) = deadline_of(timeout);
                    r.wait_cancellable(interest, d, ahead).map_err(expired)?;
                    coop::refill();
                    waited = true;
                    continue;
                }
            }
            waited = false;
            match f(io) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.is_nonblocking() {
                        return Err(e);
                    }
                    if let (Some(r), Some(ev)) = (self.reg.get(), seen) {
                        r.clear(ev);
                        continue;
                    }
                    self.wait_first(interest, deadline_of(timeout).0)
                        .map_err(expired)?;
                    coop::refill();
                    waited = true;
                }
                other => return other,
            }
        }
    }

    /// A stream read or write that asked for `want` bytes: [`io`](Self::io),
    /// and when it moved fewer (but some), the direction is taken as drained
    /// (a read) or full (a write) and its readiness cleared, unless an event
    /// came since the attempt began. The next call then waits at once
    /// instead of making a system call that would only fail with `EAGAIN`:
    /// one syscall less per request in a request/response exchange (mio's
    /// and tokio's rule). Data that arrives after the attempt raises a new
    /// edge, and with it a new event, so nothing is missed.
    pub(crate) fn stream_io(
        &self,
        interest: Interest,
        want: usize,
        mut f: impl FnMut(&T) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let mut seen = None;
        let r = self.io(interest, |io| {
            seen = self.reg.get().map(|r| r.readiness(interest));
            f(io)
        });
        if let (Ok(n), Some(reg), Some(ev)) = (&r, self.reg.get(), seen) {
            if *n > 0 && *n < want {
                reg.clear(ev.data_only());
            }
        }
        r
    }

    /// A stream read through the running task's io_uring, with the read
    /// timeout (expired: `WouldBlock`), when the uring driver serves it
    /// (`runtime/io/uring.rs`, "Who uses a ring"); `None`: take the
    /// readiness path ([`stream_io`](Self::stream_io)).
    pub(crate) fn ring_read(&self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        self.ring_recv(buf, false)
    }

    /// A stream read or peek that goes through the socket's multishot
    /// receive when it has one, or may arm one (`runtime/io/uring_recv.rs`),
    /// else through a single-shot ring read when the driver serves it;
    /// `None`: take the readiness path.
    fn ring_recv(&self, buf: &mut [u8], peek: bool) -> Option<io::Result<usize>> {
        if buf.is_empty() {
            return None;
        }
        let nonblocking = self.is_nonblocking();
        if nonblocking && self.recv.get().is_none() {
            return None;
        }
        let fd = self.get_ref().as_fd().as_raw_fd();
        let t = self.timeout(Interest::Read);
        match ring_recv(&self.recv, fd, buf, peek, nonblocking, t) {
            RecvPath::Done(r) => Some(r.map_err(expired)),
            RecvPath::Readiness => None,
            RecvPath::SingleShot => {
                stream_op(fd, StreamOp::Recv(buf), t).map(|r| r.map_err(expired))
            }
        }
    }

    /// [`ring_read`](Self::ring_read) for a peek, only when the socket has
    /// a multishot receive (its queued data comes first).
    pub(crate) fn ring_peek(&self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        self.recv.get()?;
        self.ring_recv(buf, true)
    }

    /// [`ring_read`](Self::ring_read) for a vectored read: through the
    /// socket's multishot receive, into its first non-empty buffer, when
    /// it has one or may arm one; else a single-shot `recvmsg` into all the
    /// buffers when the driver serves it; `None`: take the readiness path.
    pub(crate) fn ring_read_vectored(
        &self,
        bufs: &mut [io::IoSliceMut<'_>],
    ) -> Option<io::Result<usize>> {
        let first = bufs.iter().position(|b| !b.is_empty())?;
        let nonblocking = self.is_nonblocking();
        if nonblocking && self.recv.get().is_none() {
            return None;
        }
        let fd = self.get_ref().as_fd().as_raw_fd();
        let t = self.timeout(Interest::Read);
        match ring_recv(&self.recv, fd, &mut bufs[first], false, nonblocking, t) {
            RecvPath::Done(r) => Some(r.map_err(expired)),
            RecvPath::Readiness => None,
            RecvPath::SingleShot => {
                vectored_op(fd, VectoredOp::Recv(bufs), t).map(|r| r.map_err(expired))
            }
        }
    }

    /// [`ring_read`](Self::ring_read) for a vectored stream write (a
    /// single-shot `sendmsg`), when some buffer is not empty.
    pub(crate) fn ring_write_vectored(
        &self,
        bufs: &[io::IoSlice<'_>],
    ) -> Option<io::Result<usize>> {
        if bufs.iter().all(|b| b.is_empty()) || self.is_nonblocking() {
            return None;
        }
        let fd = self.get_ref().as_fd().as_raw_fd();
        let t = self.timeout(Interest::Write);
        vectored_op(fd, VectoredOp::Send(bufs), t).map(|r| r.map_err(expired))
    }

    /// [`ring_read`](Self::ring_read) for a stream write.
    pub(crate) fn ring_write(&self, buf: &[u8]) -> Option<io::Result<usize>> {
        if buf.is_empty() || self.is_nonblocking() {
            return None;
        }
        let fd = self.get_ref().as_fd().as_raw_fd();
        let t = self.timeout(Interest::Write);
        stream_op(fd, StreamOp::Send(buf), t).map(|r| r.map_err(expired))
    }

    /// An accept on this listening socket through the running task's
    /// io_uring, waiting at most `timeout` (expired: `WouldBlock`, as for a
    /// read), with the peer's address when `want_addr`; the new descriptor
    /// is close-on-exec and non-blocking. `None`: take the readiness path
    /// (the listener is in non-blocking mode, or the driver does not serve
    /// the running task: `runtime/io/uring.rs`, "Who uses a ring").
    pub(crate) fn ring_accept(
        &self,
        want_addr: bool,
        timeout: Option<Duration>,
    ) -> Option<io::Result<(OwnedFd, Option<socket2::SockAddr>)>> {
        if self.is_nonblocking() {
            return None;
        }
        let fd = self.get_ref().as_fd().as_raw_fd();
        ring_accept(fd, want_addr, timeout).map(|r| r.map_err(expired))
    }

    /// A datagram receive (a peek with `peek`) through the running task's
    /// io_uring, with the read timeout (expired: `WouldBlock`), and the
    /// sender's address. `None`: take the readiness path (non-blocking
    /// mode, or the driver does not serve the running task).
    pub(crate) fn ring_recv_from(
        &self,
        buf: &mut [u8],
        peek: bool,
    ) -> Option<io::Result<(usize, socket2::SockAddr)>> {
        if self.is_nonblocking() {
            return None;
        }
        let fd = self.get_ref().as_fd().as_raw_fd();
        let t = self.timeout(Interest::Read);
        ring_recv_from(fd, buf, peek, t).map(|r| r.map_err(expired))
    }

    /// A datagram send to `addr` (`None`: the connected peer) through the
    /// running task's io_uring, with the write timeout (expired:
    /// `WouldBlock`). `None`: take the readiness path, as for
    /// [`ring_recv_from`](Self::ring_recv_from).
    pub(crate) fn ring_send_to(
        &self,
        buf: &[u8],
        addr: Option<&socket2::SockAddr>,
    ) -> Option<io::Result<usize>> {
        if self.is_nonblocking() {
            return None;
        }
        let fd = self.get_ref().as_fd().as_raw_fd();
        let t = self.timeout(Interest::Write);
        ring_send_to(fd, buf, addr, t).map(|r| r.map_err(expired))
    }

    /// Waits once for `interest` (a non-blocking connect's completion); an
    /// expired `timeout` is `TimedOut`, as std's `connect_timeout` says.
    pub(crate) fn wait(&self, interest: Interest, timeout: Option<Duration>) -> io::Result<()> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        match self.reg.get() {
            Some(r) => r.wait_cancellable(interest, deadline, false),
            None => self.wait_first(interest, deadline),
        }
    }

    /// A wait with no registration yet: register (inside a task) and wait
    /// on the reactor, or wait in `poll(2)` (on a thread, or when the
    /// reactor cannot be had).
    fn wait_first(&self, interest: Interest, deadline: Option<Instant>) -> io::Result<()> {
        let fd = self.get_ref().as_fd().as_raw_fd();
        if crate::runtime::context::current_task_ptr().is_none() {
            return poll_fd(fd, interest, deadline);
        }
        let reg = {
            let _g = self.registering.lock();
            match self.reg.get() {
                Some(reg) => reg,
                None => match Registration::for_current_task(fd) {
                    Ok(Some(reg)) => self.reg.get_or_init(|| Arc::new(reg)),
                    Ok(None) => return poll_fd(fd, interest, deadline),
                    // Registered already by the `hooks` feature (a std
                    // socket a task waited on, then wrapped): one
                    // descriptor, one registration, shared.
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                        match crate::runtime::io::shared_registration(fd) {
                            Some(reg) => self.reg.get_or_init(|| reg),
                            None => return Err(e),
                        }
                    }
                    Err(e) => return Err(e),
                },
            }
        };
        reg.wait_cancellable(interest, deadline, false)
    }
}

impl<T: AsFd> Drop for Source<T> {
    fn drop(&mut self) {
        // Deregister before the descriptor closes (field order would do it
        // too; this keeps it explicit).
        self.reg.take();
    }
}
