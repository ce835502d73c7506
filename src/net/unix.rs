//! Unix domain sockets: [`UnixListener`], [`UnixStream`] and
//! [`UnixDatagram`], shaped like `std::os::unix::net`'s.

use std::fmt;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{self as stdunix, SocketAddr};
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use crate::io::source::Source;
use crate::runtime::io::Interest;

use super::AcceptBackoff;

/// A Unix stream socket server. `accept` inside a task parks the task.
pub struct UnixListener {
    inner: Source<stdunix::UnixListener>,
    /// The pause after an accept that failed for want of descriptors.
    backoff: AcceptBackoff,
}

impl UnixListener {
    /// Creates a listener bound to `path` (which must not exist yet).
    pub fn bind<P: AsRef<Path>>(path: P) -> io::Result<UnixListener> {
        UnixListener::from_std(stdunix::UnixListener::bind(path)?)
    }

    /// Creates a listener bound to `socket_addr`: a path, or a name in
    /// Linux's abstract namespace (made with
    /// [`SocketAddrExt::from_abstract_name`]), which needs no file and
    /// disappears with the socket.
    pub fn bind_addr(socket_addr: &SocketAddr) -> io::Result<UnixListener> {
        UnixListener::from_std(stdunix::UnixListener::bind_addr(socket_addr)?)
    }

    /// Accepts a connection; parks the task (or blocks the thread) until
    /// one arrives.
    ///
    /// Out of descriptors or memory, the error comes back after a pause,
    /// as [`TcpListener::accept`](crate::net::TcpListener::accept)'s does.
    pub fn accept(&self) -> io::Result<(UnixStream, SocketAddr)> {
        let ring = self
            .inner
            .ring_accept(false, self.inner.timeout(Interest::Read));
        let r = match ring {
            Some(r) => r.and_then(|(fd, _)| {
                let s = stdunix::UnixStream::from(fd);
                let a = s.peer_addr()?;
                Ok((s, a))
            }),
            None => self.inner.io(Interest::Read, |l| l.accept()),
        };
        let (s, a) = self.backoff.after(r, self.inner.is_nonblocking())?;
        Ok((
            UnixStream {
                inner: Source::new(s)?,
            },
            a,
        ))
    }

    /// An iterator over incoming connections; it never returns `None`.
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().local_addr()
    }

    /// A new handle to the same listener (a duplicated descriptor).
    pub fn try_clone(&self) -> io::Result<UnixListener> {
        UnixListener::from_std(self.inner.get_ref().try_clone()?)
    }

    /// Takes the pending socket error (`SO_ERROR`), if any.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.inner.get_ref().take_error()
    }

    /// With `true`, `accept` returns `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.inner.set_nonblocking(nonblocking);
        Ok(())
    }

    /// Wraps a std listener (switched to non-blocking mode at the OS level;
    /// waiting is done by gofer). Whatever mode it was in, `accept` then
    /// waits, until [`set_nonblocking(true)`](Self::set_nonblocking).
    pub fn from_std(l: stdunix::UnixListener) -> io::Result<UnixListener> {
        Ok(UnixListener {
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
    pub fn into_std(self) -> stdunix::UnixListener {
        self.inner.into_inner()
    }
}

/// The iterator of [`UnixListener::incoming`].
#[derive(Debug)]
pub struct Incoming<'a> {
    listener: &'a UnixListener,
}

impl Iterator for Incoming<'_> {
    type Item = io::Result<UnixStream>;
    fn next(&mut self) -> Option<io::Result<UnixStream>> {
        Some(self.listener.accept().map(|(s, _)| s))
    }
}

/// A Unix stream socket; `Read` and `Write` for it and for `&UnixStream`.
pub struct UnixStream {
    inner: Source<stdunix::UnixStream>,
}

impl UnixStream {
    /// Connects to the socket at `path`. (A Unix connect completes at once
    /// or fails; only a full listen queue makes it wait, and that wait holds
    /// the thread.)
    pub fn connect<P: AsRef<Path>>(path: P) -> io::Result<UnixStream> {
        UnixStream::from_std(stdunix::UnixStream::connect(path)?)
    }

    /// Connects to the socket at `socket_addr`: a path, or a name in the
    /// abstract namespace ([`SocketAddrExt::from_abstract_name`]). Waits
    /// as [`connect`](Self::connect) does.
    pub fn connect_addr(socket_addr: &SocketAddr) -> io::Result<UnixStream> {
        UnixStream::from_std(stdunix::UnixStream::connect_addr(socket_addr)?)
    }

    /// A connected pair.
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let (a, b) = stdunix::UnixStream::pair()?;
        Ok((UnixStream::from_std(a)?, UnixStream::from_std(b)?))
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
            stdunix::UnixStream::set_read_timeout,
            stdunix::UnixStream::read_timeout,
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
            stdunix::UnixStream::set_write_timeout,
            stdunix::UnixStream::write_timeout,
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

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().peer_addr()
    }

    /// Shuts down the read, write, or both halves.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.inner.get_ref().shutdown(how)
    }

    /// A new handle to the same connection (a duplicated descriptor). The
    /// two share their read and write timeouts, as std's clones do: one
    /// set through either holds for both (from the next wait on).
    pub fn try_clone(&self) -> io::Result<UnixStream> {
        Ok(UnixStream {
            inner: self.inner.try_clone(|s| s.try_clone())?,
        })
    }

    /// Takes the pending socket error (`SO_ERROR`), if any.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.inner.get_ref().take_error()
    }

    /// With `true`, reads and writes return `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.inner.set_nonblocking(nonblocking);
        Ok(())
    }

    /// Receives data without removing it from the queue (`MSG_PEEK`);
    /// waits like a read (and with the read timeout). std has this method
    /// unstable (`unix_socket_peek`), with the same signature.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(r) = self.inner.ring_peek(buf) {
            return r;
        }
        self.inner.io(Interest::Read, |s| peek(s.as_fd(), buf))
    }

    /// Wraps a std stream (switched to non-blocking mode at the OS level;
    /// waiting is done by gofer). Its read and write timeouts are kept;
    /// whatever mode it was in, reads and writes then wait, until
    /// [`set_nonblocking(true)`](Self::set_nonblocking).
    pub fn from_std(s: stdunix::UnixStream) -> io::Result<UnixStream> {
        Ok(UnixStream {
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
    pub fn into_std(self) -> stdunix::UnixStream {
        self.inner.into_inner()
    }
}

/// Reads from the connection: inside a task a read that finds no data
/// parks the task until some arrives (or the [read
/// timeout](UnixStream::set_read_timeout) passes); on a plain thread it
/// blocks the thread. Through a shared reference, so a reader task and a
/// writer task can share one connection.
impl Read for &UnixStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        super::stream_read(&self.inner, buf)
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        super::stream_read_vectored(&self.inner, bufs)
    }
}

/// Writes to the connection: inside a task a write into a full send buffer
/// parks the task until there is room (or the [write
/// timeout](UnixStream::set_write_timeout) passes). Nothing is buffered,
/// so `flush` does nothing.
impl Write for &UnixStream {
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

/// As [`&UnixStream`](#impl-Read-for-%26UnixStream) reads.
impl Read for UnixStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        (&*self).read_vectored(bufs)
    }
}

/// As [`&UnixStream`](#impl-Write-for-%26UnixStream) writes.
impl Write for UnixStream {
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

/// A Unix datagram socket.
pub struct UnixDatagram {
    inner: Source<stdunix::UnixDatagram>,
}

impl UnixDatagram {
    /// Creates a socket bound to `path`.
    pub fn bind<P: AsRef<Path>>(path: P) -> io::Result<UnixDatagram> {
        UnixDatagram::from_std(stdunix::UnixDatagram::bind(path)?)
    }

    /// Creates a socket bound to `socket_addr`: a path, or a name in the
    /// abstract namespace ([`SocketAddrExt::from_abstract_name`]).
    pub fn bind_addr(socket_addr: &SocketAddr) -> io::Result<UnixDatagram> {
        UnixDatagram::from_std(stdunix::UnixDatagram::bind_addr(socket_addr)?)
    }

    /// Creates a socket bound to no address.
    pub fn unbound() -> io::Result<UnixDatagram> {
        UnixDatagram::from_std(stdunix::UnixDatagram::unbound()?)
    }

    /// A connected pair.
    pub fn pair() -> io::Result<(UnixDatagram, UnixDatagram)> {
        let (a, b) = stdunix::UnixDatagram::pair()?;
        Ok((UnixDatagram::from_std(a)?, UnixDatagram::from_std(b)?))
    }

    /// Connects the socket to `path`: `send` and `recv` then use it.
    pub fn connect<P: AsRef<Path>>(&self, path: P) -> io::Result<()> {
        self.inner.get_ref().connect(path)
    }

    /// Connects the socket to `socket_addr` (a path, or a name in the
    /// abstract namespace): `send` and `recv` then use it.
    pub fn connect_addr(&self, socket_addr: &SocketAddr) -> io::Result<()> {
        self.inner.get_ref().connect_addr(socket_addr)
    }

    /// Receives one datagram and its sender's address.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.receive(|| Ok((0, unnamed()?)), |s| s.recv_from(buf))
    }

    /// Receives one datagram from the connected peer.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.receive(|| Ok(0), |s| s.recv(buf))
    }

    /// A receive (`f`), waiting like the others, with one difference from a
    /// plain non-blocking call made good: once the read side is shut down
    /// and the queue is empty, a blocking receive returns 0 bytes (from an
    /// unnamed address), while a non-blocking one keeps failing with
    /// `EAGAIN` although `poll` says readable, so it would wait forever.
    /// So on `EAGAIN` a waiting receive asks `poll` (no wait) whether the
    /// read side is shut, and if it is returns `at_end` as std's would.
    fn receive<R>(
        &self,
        at_end: impl Fn() -> io::Result<R>,
        mut f: impl FnMut(&stdunix::UnixDatagram) -> io::Result<R>,
    ) -> io::Result<R> {
        self.inner.io(Interest::Read, |s| match f(s) {
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    && !self.inner.is_nonblocking()
                    && read_shut(s.as_fd()) =>
            {
                at_end()
            }
            r => r,
        })
    }

    /// Sends one datagram to the socket at `path`.
    pub fn send_to<P: AsRef<Path>>(&self, buf: &[u8], path: P) -> io::Result<usize> {
        let path = path.as_ref();
        self.inner.io(Interest::Write, |s| s.send_to(buf, path))
    }

    /// Sends one datagram to the socket at `socket_addr` (a path, or a name
    /// in the abstract namespace).
    pub fn send_to_addr(&self, buf: &[u8], socket_addr: &SocketAddr) -> io::Result<usize> {
        self.inner
            .io(Interest::Write, |s| s.send_to_addr(buf, socket_addr))
    }

    /// Receives the next datagram from the connected peer without taking it
    /// off the queue (`MSG_PEEK`); waits like [`recv`](Self::recv). std has
    /// this method unstable (`unix_socket_peek`), with the same signature.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.receive(|| Ok(0), |s| peek(s.as_fd(), buf))
    }

    /// Receives the next datagram and its sender's address without taking
    /// it off the queue (`MSG_PEEK`); waits like [`recv_from`](Self::recv_from).
    /// std has this method unstable (`unix_socket_peek`), with the same
    /// signature.
    pub fn peek_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.receive(|| Ok((0, unnamed()?)), |s| peek_from(s.as_fd(), buf))
    }

    /// Sends one datagram to the connected peer.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.inner.io(Interest::Write, |s| s.send(buf))
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().local_addr()
    }

    /// The connected peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().peer_addr()
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
            stdunix::UnixDatagram::set_read_timeout,
            stdunix::UnixDatagram::read_timeout,
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
            stdunix::UnixDatagram::set_write_timeout,
            stdunix::UnixDatagram::write_timeout,
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

    /// Shuts down the read, write, or both halves.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.inner.get_ref().shutdown(how)
    }

    /// A new handle to the same socket (a duplicated descriptor). The
    /// two share their read and write timeouts, as std's clones do: one
    /// set through either holds for both (from the next wait on).
    pub fn try_clone(&self) -> io::Result<UnixDatagram> {
        Ok(UnixDatagram {
            inner: self.inner.try_clone(|s| s.try_clone())?,
        })
    }

    /// Takes the pending socket error (`SO_ERROR`), if any.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.inner.get_ref().take_error()
    }

    /// With `true`, operations return `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.inner.set_nonblocking(nonblocking);
        Ok(())
    }

    /// Wraps a std socket (switched to non-blocking mode at the OS level;
    /// waiting is done by gofer). Its read and write timeouts are kept;
    /// whatever mode it was in, operations then wait, until
    /// [`set_nonblocking(true)`](Self::set_nonblocking).
    pub fn from_std(s: stdunix::UnixDatagram) -> io::Result<UnixDatagram> {
        Ok(UnixDatagram {
            inner: Source::adopt(s)?,
        })
    }

    /// The std socket, in std's blocking mode (a receive blocks the thread,
    /// until the read timeout, which it keeps), unless
    /// [`set_nonblocking(true)`](Self::set_nonblocking) was called on this
    /// one, which stays non-blocking.
    ///
    /// The mode belongs to the socket's open file description, which
    /// [clones](Self::try_clone) share: convert once the clones still used
    /// by tasks are gone, or their operations block their threads.
    pub fn into_std(self) -> stdunix::UnixDatagram {
        self.inner.into_inner()
    }
}

/// Whether the read side of the datagram socket `fd` is shut down: `poll`
/// without waiting reports `POLLRDHUP` for it, and for nothing else.
fn read_shut(fd: BorrowedFd<'_>) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the call's duration; no wait.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r > 0 && p.revents & libc::POLLRDHUP != 0
}

/// `recv(MSG_PEEK)` on `fd`, once.
fn peek(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the call;
    // `fd` is open (borrowed).
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_PEEK,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// `recvfrom(MSG_PEEK)` on `fd`, once, with the sender's address.
fn peek_from(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
    // SAFETY: an all-zero sockaddr_un is a valid value (family 0, empty
    // path) for the kernel to overwrite.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes, `addr` for
    // `len` bytes, and `len` for one socklen_t, all for the call; `fd` is
    // open (borrowed).
    let n = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_PEEK,
            (&mut addr as *mut libc::sockaddr_un).cast(),
            &mut len,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((n as usize, unix_addr(&addr, len)?))
}

/// The std form of an address the kernel wrote: `len` bytes of `addr`.
/// Unnamed (no path: an unbound sender; Linux then says 0 bytes, or only
/// the family), a name in the abstract namespace (a path that starts with a
/// NUL byte, `len` long), or a path (NUL-terminated, or `len` long).
fn unix_addr(addr: &libc::sockaddr_un, len: libc::socklen_t) -> io::Result<SocketAddr> {
    let base = std::mem::offset_of!(libc::sockaddr_un, sun_path);
    let path_len = (len as usize).saturating_sub(base).min(addr.sun_path.len());
    // sun_path is c_char (i8 on x86_64): the same bytes as u8.
    let path: Vec<u8> = addr.sun_path[..path_len].iter().map(|&c| c as u8).collect();
    match path.first() {
        None => unnamed(),
        Some(0) => SocketAddr::from_abstract_name(&path[1..]),
        Some(_) => {
            let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
            SocketAddr::from_pathname(std::ffi::OsStr::from_bytes(&path[..end]))
        }
    }
}

/// An unnamed address. std has no constructor for one; the local address
/// of an unbound socket is one, made once.
fn unnamed() -> io::Result<SocketAddr> {
    static UNNAMED: OnceLock<SocketAddr> = OnceLock::new();
    if let Some(a) = UNNAMED.get() {
        return Ok(a.clone());
    }
    let a = stdunix::UnixDatagram::unbound()?.local_addr()?;
    Ok(UNNAMED.get_or_init(|| a).clone())
}

impl fmt::Debug for UnixListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("UnixListener")
            .field(self.inner.get_ref())
            .finish()
    }
}

impl fmt::Debug for UnixStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("UnixStream")
            .field(self.inner.get_ref())
            .finish()
    }
}

impl fmt::Debug for UnixDatagram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("UnixDatagram")
            .field(self.inner.get_ref())
            .finish()
    }
}

// `AsFd`, `AsRawFd`, `FromRawFd`, `IntoRawFd`, `From<` the std type `>`,
// `From<OwnedFd>` and `OwnedFd: From<` the type `>`, for each of the three.
super::fd_conversions!(UnixListener, stdunix::UnixListener);
super::fd_conversions!(UnixStream, stdunix::UnixStream);
super::fd_conversions!(UnixDatagram, stdunix::UnixDatagram);
