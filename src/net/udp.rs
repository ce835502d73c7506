//! UDP: [`UdpSocket`], shaped like `std::net::UdpSocket`.

use std::io;
use std::net::{self as stdnet, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

use crate::io::source::Source;
use crate::runtime::io::Interest;

use super::each_addr;

/// A UDP socket.
///
/// Like [`std::net::UdpSocket`]; inside a task a receive (or a send into a
/// full buffer) parks the task, on a plain thread it blocks the thread. A
/// receive that waits longer than the [read timeout](Self::set_read_timeout)
/// fails with [`io::ErrorKind::TimedOut`].
pub struct UdpSocket {
    inner: Source<stdnet::UdpSocket>,
}

impl UdpSocket {
    /// Creates a socket bound to `addr` (the first of its addresses that
    /// works).
    pub fn bind<A: ToSocketAddrs>(addr: A) -> io::Result<UdpSocket> {
        each_addr(addr, |a| UdpSocket::from_std(stdnet::UdpSocket::bind(a)?))
    }

    /// Receives one datagram and the address it came from.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.inner.io(Interest::Read, |s| s.recv_from(buf))
    }

    /// Receives one datagram without taking it off the queue.
    pub fn peek_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.inner.io(Interest::Read, |s| s.peek_from(buf))
    }

    /// Sends one datagram to `addr` (its first address).
    pub fn send_to<A: ToSocketAddrs>(&self, buf: &[u8], addr: A) -> io::Result<usize> {
        let a = addr.to_socket_addrs()?.next().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "no addresses to send data to")
        })?;
        self.inner.io(Interest::Write, |s| s.send_to(buf, a))
    }

    /// Connects the socket: `send` and `recv` then talk to `addr` only.
    pub fn connect<A: ToSocketAddrs>(&self, addr: A) -> io::Result<()> {
        self.inner.get_ref().connect(addr)
    }

    /// Sends to the connected address.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.inner.io(Interest::Write, |s| s.send(buf))
    }

    /// Receives from the connected address.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.io(Interest::Read, |s| s.recv(buf))
    }

    /// Receives from the connected address without taking the datagram off
    /// the queue.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.io(Interest::Read, |s| s.peek(buf))
    }

    /// The connected address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().local_addr()
    }

    /// A new handle to the same socket (a duplicated descriptor).
    pub fn try_clone(&self) -> io::Result<UdpSocket> {
        UdpSocket::from_std(self.inner.get_ref().try_clone()?)
    }

    super::timeout_methods!();

    /// Sets `SO_BROADCAST`.
    pub fn set_broadcast(&self, on: bool) -> io::Result<()> {
        self.inner.get_ref().set_broadcast(on)
    }

    /// Reads `SO_BROADCAST`.
    pub fn broadcast(&self) -> io::Result<bool> {
        self.inner.get_ref().broadcast()
    }

    /// Sets `IP_TTL`.
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.inner.get_ref().set_ttl(ttl)
    }

    /// Reads `IP_TTL`.
    pub fn ttl(&self) -> io::Result<u32> {
        self.inner.get_ref().ttl()
    }

    /// Joins an IPv4 multicast group.
    pub fn join_multicast_v4(&self, group: &Ipv4Addr, interface: &Ipv4Addr) -> io::Result<()> {
        self.inner.get_ref().join_multicast_v4(group, interface)
    }

    /// Leaves an IPv4 multicast group.
    pub fn leave_multicast_v4(&self, group: &Ipv4Addr, interface: &Ipv4Addr) -> io::Result<()> {
        self.inner.get_ref().leave_multicast_v4(group, interface)
    }

    /// Joins an IPv6 multicast group.
    pub fn join_multicast_v6(&self, group: &Ipv6Addr, interface: u32) -> io::Result<()> {
        self.inner.get_ref().join_multicast_v6(group, interface)
    }

    /// Leaves an IPv6 multicast group.
    pub fn leave_multicast_v6(&self, group: &Ipv6Addr, interface: u32) -> io::Result<()> {
        self.inner.get_ref().leave_multicast_v6(group, interface)
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
    pub fn from_std(s: stdnet::UdpSocket) -> io::Result<UdpSocket> {
        Ok(UdpSocket {
            inner: Source::new(s)?,
        })
    }

    /// The std socket, in non-blocking mode.
    pub fn into_std(self) -> stdnet::UdpSocket {
        self.inner.into_inner()
    }
}

super::socket_impls!(UdpSocket, stdnet::UdpSocket, "UdpSocket");
