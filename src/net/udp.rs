//! UDP: [`UdpSocket`], shaped like `std::net::UdpSocket`.

use std::fmt;
use std::io;
use std::net::{self as stdnet, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::io::source::Source;
use crate::runtime::io::Interest;

use super::each_addr;

/// A UDP socket.
///
/// Like [`std::net::UdpSocket`]; inside a task a receive (or a send into a
/// full buffer) parks the task, on a plain thread it blocks the thread. A
/// receive that waits longer than the [read timeout](Self::set_read_timeout)
/// fails with [`io::ErrorKind::WouldBlock`], as std's does on Linux.
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
        if let Some(r) = self.inner.ring_recv_from(buf, false) {
            return r.and_then(|(n, a)| {
                let a = a.as_socket().ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidData, "a datagram with no IP address")
                })?;
                Ok((n, a))
            });
        }
        self.inner.io(Interest::Read, |s| s.recv_from(buf))
    }

    /// Receives one datagram without taking it off the queue.
    pub fn peek_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        if let Some(r) = self.inner.ring_recv_from(buf, true) {
            return r.and_then(|(n, a)| {
                let a = a.as_socket().ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidData, "a datagram with no IP address")
                })?;
                Ok((n, a))
            });
        }
        self.inner.io(Interest::Read, |s| s.peek_from(buf))
    }

    /// Sends one datagram to `addr` (its first address).
    pub fn send_to<A: ToSocketAddrs>(&self, buf: &[u8], addr: A) -> io::Result<usize> {
        let a = addr.to_socket_addrs()?.next().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "no addresses to send data to")
        })?;
        if let Some(r) = self.inner.ring_send_to(buf, Some(&a.into())) {
            return r;
        }
        self.inner.io(Interest::Write, |s| s.send_to(buf, a))
    }

    /// Connects the socket: `send` and `recv` then talk to `addr` only.
    pub fn connect<A: ToSocketAddrs>(&self, addr: A) -> io::Result<()> {
        self.inner.get_ref().connect(addr)
    }

    /// Sends to the connected address.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        if let Some(r) = self.inner.ring_send_to(buf, None) {
            return r;
        }
        self.inner.io(Interest::Write, |s| s.send(buf))
    }

    /// Receives from the connected address.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(r) = self.inner.ring_recv_from(buf, false) {
            return r.map(|(n, _)| n);
        }
        self.inner.io(Interest::Read, |s| s.recv(buf))
    }

    /// Receives from the connected address without taking the datagram off
    /// the queue.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(r) = self.inner.ring_recv_from(buf, true) {
            return r.map(|(n, _)| n);
        }
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

    /// A new handle to the same socket (a duplicated descriptor). The
    /// two share their read and write timeouts, as std's clones do: one
    /// set through either holds for both (from the next wait on).
    pub fn try_clone(&self) -> io::Result<UdpSocket> {
        Ok(UdpSocket {
            inner: self.inner.try_clone(|s| s.try_clone())?,
        })
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
            stdnet::UdpSocket::set_read_timeout,
            stdnet::UdpSocket::read_timeout,
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
            stdnet::UdpSocket::set_write_timeout,
            stdnet::UdpSocket::write_timeout,
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

    /// Sets `IP_MULTICAST_LOOP`: whether multicast datagrams this socket
    /// sends come back to the local host's sockets.
    pub fn set_multicast_loop_v4(&self, multicast_loop_v4: bool) -> io::Result<()> {
        self.inner
            .get_ref()
            .set_multicast_loop_v4(multicast_loop_v4)
    }

    /// Reads `IP_MULTICAST_LOOP`.
    pub fn multicast_loop_v4(&self) -> io::Result<bool> {
        self.inner.get_ref().multicast_loop_v4()
    }

    /// Sets `IP_MULTICAST_TTL`: how many hops this socket's multicast
    /// datagrams may take (1, the default, keeps them in the local network).
    pub fn set_multicast_ttl_v4(&self, multicast_ttl_v4: u32) -> io::Result<()> {
        self.inner.get_ref().set_multicast_ttl_v4(multicast_ttl_v4)
    }

    /// Reads `IP_MULTICAST_TTL`.
    pub fn multicast_ttl_v4(&self) -> io::Result<u32> {
        self.inner.get_ref().multicast_ttl_v4()
    }

    /// Sets `IPV6_MULTICAST_LOOP` (an IPv6 socket's
    /// [`set_multicast_loop_v4`](Self::set_multicast_loop_v4)).
    pub fn set_multicast_loop_v6(&self, multicast_loop_v6: bool) -> io::Result<()> {
        self.inner
            .get_ref()
            .set_multicast_loop_v6(multicast_loop_v6)
    }

    /// Reads `IPV6_MULTICAST_LOOP`.
    pub fn multicast_loop_v6(&self) -> io::Result<bool> {
        self.inner.get_ref().multicast_loop_v6()
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

    /// Wraps a std socket (switched to non-blocking mode at the OS level;
    /// waiting is done by gofer). Its read and write timeouts are kept;
    /// whatever mode it was in, operations then wait, until
    /// [`set_nonblocking(true)`](Self::set_nonblocking).
    pub fn from_std(s: stdnet::UdpSocket) -> io::Result<UdpSocket> {
        Ok(UdpSocket {
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
    pub fn into_std(self) -> stdnet::UdpSocket {
        self.inner.into_inner()
    }
}

impl fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("UdpSocket")
            .field(self.inner.get_ref())
            .finish()
    }
}

// `AsFd`, `AsRawFd`, `FromRawFd`, `IntoRawFd`, `From<std::net::UdpSocket>`,
// `From<OwnedFd>` and `OwnedFd: From<UdpSocket>`.
super::fd_conversions!(UdpSocket, stdnet::UdpSocket);
