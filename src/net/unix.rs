//! Unix domain sockets: [`UnixListener`], [`UnixStream`] and
//! [`UnixDatagram`], shaped like `std::os::unix::net`'s.

use std::io;
use std::net::Shutdown;
use std::os::unix::net::{self as stdunix, SocketAddr};
use std::path::Path;

use crate::io::source::Source;
use crate::runtime::io::Interest;

/// A Unix stream socket server. `accept` inside a task parks the task.
pub struct UnixListener {
    inner: Source<stdunix::UnixListener>,
}

impl UnixListener {
    /// Creates a listener bound to `path` (which must not exist yet).
    pub fn bind<P: AsRef<Path>>(path: P) -> io::Result<UnixListener> {
        UnixListener::from_std(stdunix::UnixListener::bind(path)?)
    }

    /// Accepts a connection; parks the task (or blocks the thread) until
    /// one arrives.
    pub fn accept(&self) -> io::Result<(UnixStream, SocketAddr)> {
        let (s, a) = self.inner.io(Interest::Read, |l| l.accept())?;
        Ok((UnixStream::from_std(s)?, a))
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

    /// Wraps a std listener (switched to non-blocking mode at the OS level).
    pub fn from_std(l: stdunix::UnixListener) -> io::Result<UnixListener> {
        Ok(UnixListener {
            inner: Source::new(l)?,
        })
    }

    /// The std listener, in non-blocking mode.
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

    /// A connected pair.
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let (a, b) = stdunix::UnixStream::pair()?;
        Ok((UnixStream::from_std(a)?, UnixStream::from_std(b)?))
    }

    super::timeout_methods!();

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

    /// A new handle to the same connection (a duplicated descriptor).
    pub fn try_clone(&self) -> io::Result<UnixStream> {
        UnixStream::from_std(self.inner.get_ref().try_clone()?)
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

    /// Wraps a std stream (switched to non-blocking mode at the OS level).
    pub fn from_std(s: stdunix::UnixStream) -> io::Result<UnixStream> {
        Ok(UnixStream {
            inner: Source::new(s)?,
        })
    }

    /// The std stream, in non-blocking mode.
    pub fn into_std(self) -> stdunix::UnixStream {
        self.inner.into_inner()
    }
}

super::stream_impls!(UnixStream);

/// A Unix datagram socket.
pub struct UnixDatagram {
    inner: Source<stdunix::UnixDatagram>,
}

impl UnixDatagram {
    /// Creates a socket bound to `path`.
    pub fn bind<P: AsRef<Path>>(path: P) -> io::Result<UnixDatagram> {
        UnixDatagram::from_std(stdunix::UnixDatagram::bind(path)?)
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

    /// Receives one datagram and its sender's address.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.inner.io(Interest::Read, |s| s.recv_from(buf))
    }

    /// Receives one datagram from the connected peer.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.io(Interest::Read, |s| s.recv(buf))
    }

    /// Sends one datagram to the socket at `path`.
    pub fn send_to<P: AsRef<Path>>(&self, buf: &[u8], path: P) -> io::Result<usize> {
        let path = path.as_ref();
        self.inner.io(Interest::Write, |s| s.send_to(buf, path))
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

    super::timeout_methods!();

    /// Shuts down the read, write, or both halves.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.inner.get_ref().shutdown(how)
    }

    /// A new handle to the same socket (a duplicated descriptor).
    pub fn try_clone(&self) -> io::Result<UnixDatagram> {
        UnixDatagram::from_std(self.inner.get_ref().try_clone()?)
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

    /// Wraps a std socket (switched to non-blocking mode at the OS level).
    pub fn from_std(s: stdunix::UnixDatagram) -> io::Result<UnixDatagram> {
        Ok(UnixDatagram {
            inner: Source::new(s)?,
        })
    }

    /// The std socket, in non-blocking mode.
    pub fn into_std(self) -> stdunix::UnixDatagram {
        self.inner.into_inner()
    }
}

super::socket_impls!(UnixListener, stdunix::UnixListener, "UnixListener");
super::socket_impls!(UnixStream, stdunix::UnixStream, "UnixStream");
super::socket_impls!(UnixDatagram, stdunix::UnixDatagram, "UnixDatagram");
