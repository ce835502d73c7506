//! TCP: [`TcpListener`] and [`TcpStream`], shaped like `std::net`'s.

use std::fmt;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{self as stdnet, Shutdown, SocketAddr, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::io::source::Source;
use crate::runtime::io::{ring_connect, Interest};

use super::{each_addr, AcceptBackoff};

/// The backlog asked of `listen`: the kernel caps it at
/// `net.core.somaxconn` (4096 by default), so a server accepting thousands
/// of connections at once keeps them queued rather than refused.
const BACKLOG: i32 = i32::MAX;

/// A TCP socket server, listening for connections.
///
/// Like [`std::net::TcpListener`], but [`accept`](Self::accept) inside a
/// task parks the task until a connection arrives (its thread runs other
/// tasks meanwhile); on a plain thread it blocks the thread. Several tasks
/// may accept on one listener, or on [clones](Self::try_clone) of it: every
/// connection is accepted exactly once.
///
/// ```no_run
/// use std::io::{Read, Write};
/// let sched = gofer::Scheduler::builder().min_threads(2).build()?;
/// let listener = gofer::net::TcpListener::bind("127.0.0.1:8080")?;
/// sched.block_on(move || {
///     for stream in listener.incoming() {
///         let mut stream = stream.expect("accepted");
///         gofer::go!(move || {
///             let mut buf = [0u8; 1024];
///             while let Ok(n @ 1..) = stream.read(&mut buf) {
///                 if stream.write_all(&buf[..n]).is_err() {
///                     break;
///                 }
///             }
///         });
///     }
/// });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct TcpListener {
    inner: Source<stdnet::TcpListener>,
    /// The pause after an accept that failed for want of descriptors.
    backoff: AcceptBackoff,
}

impl TcpListener {
    /// Creates a listener bound to `addr` (the first of its addresses that
    /// works), with `SO_REUSEADDR`, close-on-exec, and a backlog of
    /// `net.core.somaxconn`.
    pub fn bind<A: ToSocketAddrs>(addr: A) -> io::Result<TcpListener> {
        each_addr(addr, |a| {
            let s = Socket::new(
                Domain::for_address(*a),
                Type::STREAM.cloexec(),
                Some(Protocol::TCP),
            )?;
            s.set_reuse_address(true)?;
            s.bind(&(*a).into())?;
            s.listen(BACKLOG)?;
            TcpListener::from_std(s.into())
        })
    }

    /// Accepts a connection; parks the task (or blocks the thread) until one
    /// arrives.
    ///
    /// When the process or the system is out of descriptors or memory
    /// (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`), the error comes back after
    /// a pause (the task sleeps, or the thread outside a task): 5 ms, doubling
    /// while such errors go on, to at most 1 s, as Go's `net/http` server
    /// does. So a loop that calls `accept` again after an error cannot spin
    /// at full speed while the connection waits in the queue. A listener in
    /// [non-blocking mode](Self::set_nonblocking) never pauses.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let r = match self.inner.ring_accept(true, None) {
            Some(r) => r.and_then(|(fd, a)| {
                let a = a.and_then(|a| a.as_socket()).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidData, "accept gave no IP address")
                })?;
                Ok((stdnet::TcpStream::from(fd), a))
            }),
            None => self.inner.io_timeout(Interest::Read, None, |l| l.accept()),
        };
        let (s, a) = self.backoff.after(r, self.inner.is_nonblocking())?;
        Ok((
            TcpStream {
                inner: Source::new(s)?,
            },
            a,
        ))
    }

    /// An iterator over incoming connections; it never ends (`None` is
    /// never returned).
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    /// The local address the listener is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().local_addr()
    }

    /// A new handle to the same listener (a duplicated descriptor). Tasks
    /// may accept on both; each connection goes to one of them.
    pub fn try_clone(&self) -> io::Result<TcpListener> {
        TcpListener::from_std(self.inner.get_ref().try_clone()?)
    }

    /// Sets `IP_TTL`.
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.inner.get_ref().set_ttl(ttl)
    }

    /// Reads `IP_TTL`.
    pub fn ttl(&self) -> io::Result<u32> {
        self.inner.get_ref().ttl()
    }

    /// Takes the pending socket error (`SO_ERROR`), if any.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.inner.get_ref().take_error()
    }

    /// With `true`, `accept` returns `WouldBlock` instead of waiting, as on a
    /// non-blocking std socket.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.inner.set_nonblocking(nonblocking);
        Ok(())
    }

    /// Wraps a std listener (it is switched to non-blocking mode at the OS
    /// level; waiting is done by gofer). Whatever mode the std listener was
    /// in, `accept` then waits, until [`set_nonblocking(true)`](Self::set_nonblocking).
    pub fn from_std(l: stdnet::TcpListener) -> io::Result<TcpListener> {
        Ok(TcpListener {
            inner: Source::new(l)?,
            backoff: AcceptBackoff::new(),
        })
    }

    /// The std listener, in std's blocking mode (its `accept` blocks the
    /// thread), unless [`set_nonblocking(true)`](Self::set_nonblocking) was
    /// called on this one, which stays non-blocking.
    ///
    /// The mode belongs to the listener's open file description, which
    /// [clones](Self::try_clone) share: convert once the clones still used
    /// by tasks are gone, or their accepts block their threads.
    pub fn into_std(self) -> stdnet::TcpListener {
        self.inner.into_inner()
    }
}

/// The iterator of [`TcpListener::incoming`].
#[derive(Debug)]
pub struct Incoming<'a> {
    listener: &'a TcpListener,
}

impl Iterator for Incoming<'_> {
    type Item = io::Result<TcpStream>;
    fn next(&mut self) -> Option<io::Result<TcpStream>> {
        Some(self.listener.accept().map(|(s, _)| s))
    }
}

/// A TCP connection.
///
/// Like [`std::net::TcpStream`]: `Read` and `Write` for `TcpStream` and
/// `&TcpStream` (so a reader task and a writer task can share one
/// connection). Inside a task a read or write that cannot proceed parks the
/// task; on a plain thread it blocks the thread. A read (write) that waits
/// longer than the [read timeout](Self::set_read_timeout) fails with
/// [`io::ErrorKind::WouldBlock`], as std's does on Linux.
pub struct TcpStream {
    inner: Source<stdnet::TcpStream>,
}

impl TcpStream {
    /// Connects to `addr` (each of its addresses in turn, until one works):
    /// a non-blocking connect, then a wait until the socket is writable.
    pub fn connect<A: ToSocketAddrs>(addr: A) -> io::Result<TcpStream> {
        each_addr(addr, |a| TcpStream::connect_inner(a, None))
    }

    /// Connects to one address, giving up after `timeout` with
    /// [`io::ErrorKind::TimedOut`].
    pub fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        if timeout.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot set a 0 duration timeout",
            ));
        }
        TcpStream::connect_inner(addr, Some(timeout))
    }

    fn connect_inner(addr: &SocketAddr, timeout: Option<Duration>) -> io::Result<TcpStream> {
        let s = Socket::new(
            Domain::for_address(*addr),
            Type::STREAM.cloexec().nonblocking(),
            Some(Protocol::TCP),
        )?;
        let to: socket2::SockAddr = (*addr).into();
        if let Some(r) = ring_connect(s.as_raw_fd(), &to, timeout) {
            r?;
            return Ok(TcpStream {
                inner: Source::new(s.into())?,
            });
        }
        match s.connect(&to) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        let stream = TcpStream {
            inner: Source::new(s.into())?,
        };
        // Writable means the connect finished, well or badly: SO_ERROR says.
        stream.inner.wait(Interest::Write, timeout)?;
        if let Some(e) = stream.inner.get_ref().take_error()? {
            return Err(e);
        }
        // A socket that is writable but not connected (a refused connect
        // that left no error behind) reports it here.
        stream.inner.get_ref().peer_addr()?;
        Ok(stream)
    }

    /// Sets the read timeout: a read (or receive, or peek) that waits
    /// longer fails with [`WouldBlock`](io::ErrorKind::WouldBlock)
    /// (`EAGAIN`), the error std's sockets give on Linux. `None` waits
    /// without limit; a zero duration is refused (`InvalidInput`), as std
    /// does. The timeout is set on the socket itself too (`SO_RCVTIMEO`),
    /// so the socket [`into_std`](Self::into_std) gives back keeps it, and
    /// [clones](Self::try_clone) share it. The kernel rounds the duration
    /// up to its clock tick, and [`read_timeout`](Self::read_timeout)
    /// reports the rounded value, as std's does.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        super::set_timeout(
            &self.inner,
            Interest::Read,
            t,
            stdnet::TcpStream::set_read_timeout,
            stdnet::TcpStream::read_timeout,
        )
    }

    /// Sets the write timeout (`SO_SNDTIMEO`): a write (or send) that waits
    /// longer fails with [`WouldBlock`](io::ErrorKind::WouldBlock); see
    /// [`set_read_timeout`](Self::set_read_timeout).
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        super::set_timeout(
            &self.inner,
            Interest::Write,
            t,
            stdnet::TcpStream::set_write_timeout,
            stdnet::TcpStream::write_timeout,
        )
    }

    /// The read timeout (as the kernel rounded it).
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.inner.timeout(Interest::Read))
    }

    /// The write timeout (as the kernel rounded it).
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.inner.timeout(Interest::Write))
    }

    /// The remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().local_addr()
    }

    /// Shuts down the read, write, or both halves. A task parked reading
    /// this connection (on a clone of it, say) wakes and sees the end of the
    /// stream.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.inner.get_ref().shutdown(how)
    }

    /// A new handle to the same connection (a duplicated descriptor). The
    /// two share their read and write timeouts, as std's clones do: one
    /// set through either holds for both (from the next wait on).
    pub fn try_clone(&self) -> io::Result<TcpStream> {
        Ok(TcpStream {
            inner: self.inner.try_clone(|s| s.try_clone())?,
        })
    }

    /// Sets `TCP_NODELAY`.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.inner.get_ref().set_nodelay(nodelay)
    }

    /// Reads `TCP_NODELAY`.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.inner.get_ref().nodelay()
    }

    /// Sets `IP_TTL`.
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.inner.get_ref().set_ttl(ttl)
    }

    /// Reads `IP_TTL`.
    pub fn ttl(&self) -> io::Result<u32> {
        self.inner.get_ref().ttl()
    }

    /// Takes the pending socket error (`SO_ERROR`), if any.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.inner.get_ref().take_error()
    }

    /// Receives data without removing it from the queue; waits like a read
    /// (and with the read timeout).
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(r) = self.inner.ring_peek(buf) {
            return r;
        }
        self.inner.io(Interest::Read, |s| s.peek(buf))
    }

    /// With `true`, reads and writes return `WouldBlock` instead of
    /// waiting, as on a non-blocking std socket.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.inner.set_nonblocking(nonblocking);
        Ok(())
    }

    /// Wraps a std stream (switched to non-blocking mode at the OS level;
    /// waiting is done by gofer). Its read and write timeouts are kept;
    /// whatever mode it was in, reads and writes then wait, until
    /// [`set_nonblocking(true)`](Self::set_nonblocking).
    pub fn from_std(s: stdnet::TcpStream) -> io::Result<TcpStream> {
        Ok(TcpStream {
            inner: Source::adopt(s)?,
        })
    }

    /// The std stream, in std's blocking mode (a read blocks the thread,
    /// until the read timeout, which it keeps), unless
    /// [`set_nonblocking(true)`](Self::set_nonblocking) was called on this
    /// one, which stays non-blocking.
    ///
    /// The mode belongs to the connection's open file description, which
    /// [clones](Self::try_clone) share: convert once the clones still used
    /// by tasks are gone, or their reads and writes block their threads.
    pub fn into_std(self) -> stdnet::TcpStream {
        self.inner.into_inner()
    }
}

/// Reads from the connection: inside a task a read that finds no data
/// parks the task until some arrives (or the [read
/// timeout](TcpStream::set_read_timeout) passes); on a plain thread it
/// blocks the thread. Through a shared reference, so a reader task and a
/// writer task can share one connection.
impl Read for &TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        super::stream_read(&self.inner, buf)
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        super::stream_read_vectored(&self.inner, bufs)
    }
}

/// Writes to the connection: inside a task a write into a full send buffer
/// parks the task until there is room (or the [write
/// timeout](TcpStream::set_write_timeout) passes). Nothing is buffered,
/// so `flush` does nothing.
impl Write for &TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        super::stream_write(&self.inner, buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        super::stream_write_vectored(&self.inner, bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// As [`&TcpStream`](#impl-Read-for-%26TcpStream) reads.
impl Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        (&*self).read_vectored(bufs)
    }
}

/// As [`&TcpStream`](#impl-Write-for-%26TcpStream) writes.
impl Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (&*self).write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TcpListener")
            .field(self.inner.get_ref())
            .finish()
    }
}

impl fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TcpStream")
            .field(self.inner.get_ref())
            .finish()
    }
}

// `AsFd`, `AsRawFd`, `FromRawFd`, `IntoRawFd`, `From<std::net::TcpListener>`,
// `From<OwnedFd>` and `OwnedFd: From<TcpListener>`; the same for `TcpStream`.
super::fd_conversions!(TcpListener, stdnet::TcpListener);
super::fd_conversions!(TcpStream, stdnet::TcpStream);
