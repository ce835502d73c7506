//! `UdpSocket` against std's: each check runs with std's type and with
//! gofer's, on a plain thread, in a task with thread peers and in a task
//! with task peers, and every run must see what std's does, error kinds
//! included (harness: `conformance/mod.rs`).

use crate::conformance;

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use conformance::check;
use gofer::chan;

/// A timeout that is a whole number of kernel clock ticks at any HZ.
const TIMEOUT: Duration = Duration::from_millis(100);

check! {
    /// Port 0 picks a port; a datagram carries its sender's address; a
    /// buffer too small truncates the datagram; a second bind to the port
    /// fails with `AddrInUse`.
    fn udp_bind_send_to_and_recv_from(ctx, log) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        log.v("ip", a_addr.ip());
        log.v("port picked", a_addr.port() != 0);
        log.ok("second bind", &UdpSocket::bind(a_addr));
        let none: &[SocketAddr] = &[];
        log.ok("bind to no address", &UdpSocket::bind(none));
        log.ok("send_to no address", &a.send_to(b"x", none));
        let sender = ctx.peer(move || {
            a.send_to(b"hello", b_addr).unwrap();
            a.send_to(b"truncated", b_addr).unwrap();
        });
        let mut buf = [0u8; 16];
        let (n, from) = b.recv_from(&mut buf).unwrap();
        log.v("datagram", &buf[..n]);
        log.v("from the sender", from == a_addr);
        let mut small = [0u8; 4];
        log.r("recv into a small buffer", &b.recv_from(&mut small).map(|(n, _)| n));
        log.v("truncated", small);
        sender.join();
    }
}

check! {
    /// A connected socket: peer_addr, send and recv, peek and peek_from
    /// (which wait, and leave the datagram); unconnected, peer_addr is
    /// `NotConnected` and send fails.
    fn udp_connect_send_recv_and_peek(ctx, log) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        log.ok("peer_addr unconnected", &a.peer_addr());
        log.ok("send unconnected", &a.send(b"x"));
        a.connect(b_addr).unwrap();
        b.connect(a_addr).unwrap();
        log.v("peer_addr", a.peer_addr().unwrap() == b_addr);
        let (tx, rx) = chan::bounded::<()>(0);
        let peer = ctx.peer(move || {
            rx.recv().unwrap();
            b.send(b"one").unwrap();
            b.send(b"two").unwrap();
            b
        });
        tx.send(()).unwrap();
        let mut buf = [0u8; 8];
        log.r("peek", &a.peek(&mut buf));
        let (n, from) = a.peek_from(&mut buf).unwrap();
        log.v("peek_from", (&buf[..n], from == b_addr));
        log.r("recv", &a.recv(&mut buf));
        log.v("recv bytes", &buf[..3]);
        log.r("recv next", &a.recv(&mut buf));
        log.v("next bytes", &buf[..3]);
        let _b = peer.join();
    }
}

check! {
    /// A connected socket whose peer port is closed: the ICMP error comes
    /// back to the receive, which waits for it; take_error has nothing then.
    fn udp_connected_to_a_closed_port_is_refused(ctx, log) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        a.connect(ctx.closed_port()).unwrap();
        log.ok("send", &a.send(b"anyone?"));
        log.ok("recv", &a.recv(&mut [0u8; 8]));
        log.v("take_error", a.take_error().map(|e| e.map(|e| e.kind())).map_err(|e| e.kind()));
    }
}

check! {
    /// Read timeouts: zero refused, the getters give back what was set, and
    /// an expired one is `WouldBlock` (`EAGAIN`), never early.
    fn udp_read_timeout(ctx, log) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        log.r("default", &a.read_timeout());
        log.r("zero read timeout", &a.set_read_timeout(Some(Duration::ZERO)));
        log.r("zero write timeout", &a.set_write_timeout(Some(Duration::ZERO)));
        a.set_read_timeout(Some(TIMEOUT)).unwrap();
        a.set_write_timeout(Some(TIMEOUT)).unwrap();
        log.r("read timeout", &a.read_timeout());
        log.r("write timeout", &a.write_timeout());
        let t = Instant::now();
        log.ok("recv_from", &a.recv_from(&mut [0u8; 8]));
        log.v("not early", conformance::not_early(t.elapsed(), TIMEOUT));
        let t = Instant::now();
        log.ok("peek_from", &a.peek_from(&mut [0u8; 8]));
        log.v("not early", conformance::not_early(t.elapsed(), TIMEOUT));
    }
}

check! {
    /// Options round-trip: broadcast, ttl, the IPv4 multicast options; the
    /// IPv6 one on an IPv4 socket fails alike; joining and leaving a group.
    fn udp_options_round_trip(ctx, log) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        log.r("broadcast", &a.broadcast());
        log.r("set_broadcast", &a.set_broadcast(true));
        log.r("broadcast now", &a.broadcast());
        log.r("set_ttl", &a.set_ttl(17));
        log.r("ttl", &a.ttl());
        log.r("multicast_loop_v4", &a.multicast_loop_v4());
        log.r("set_multicast_loop_v4", &a.set_multicast_loop_v4(false));
        log.r("multicast_loop_v4 now", &a.multicast_loop_v4());
        log.r("multicast_ttl_v4", &a.multicast_ttl_v4());
        log.r("set_multicast_ttl_v4", &a.set_multicast_ttl_v4(8));
        log.r("multicast_ttl_v4 now", &a.multicast_ttl_v4());
        log.ok("set_multicast_loop_v6 on IPv4", &a.set_multicast_loop_v6(false));
        log.ok("multicast_loop_v6 on IPv4", &a.multicast_loop_v6());
        let group = Ipv4Addr::new(239, 255, 0, 77);
        log.ok("join", &a.join_multicast_v4(&group, &Ipv4Addr::LOCALHOST));
        log.ok("leave", &a.leave_multicast_v4(&group, &Ipv4Addr::LOCALHOST));
        log.ok("leave again", &a.leave_multicast_v4(&group, &Ipv4Addr::LOCALHOST));
        log.v("take_error", a.take_error().map(|e| e.map(|e| e.kind())).map_err(|e| e.kind()));
    }
}

check! {
    /// Non-blocking mode: a receive gives `WouldBlock`; back in blocking
    /// mode it waits for the datagram. A clone receives what is sent to
    /// the original.
    fn udp_nonblocking_mode_and_clones(ctx, log) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = a.local_addr().unwrap();
        a.set_nonblocking(true).unwrap();
        log.ok("nonblocking recv", &a.recv_from(&mut [0u8; 8]));
        log.ok("nonblocking peek", &a.peek(&mut [0u8; 8]));
        a.set_nonblocking(false).unwrap();
        let clone = a.try_clone().unwrap();
        log.v("clone's address", clone.local_addr().unwrap() == to);
        let (tx, rx) = chan::bounded::<()>(0);
        let sender = ctx.peer(move || {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            rx.recv().unwrap();
            s.send_to(b"late", to).unwrap();
        });
        tx.send(()).unwrap();
        let mut buf = [0u8; 8];
        log.r("blocking recv on the clone", &clone.recv_from(&mut buf).map(|(n, _)| n));
        log.v("bytes", &buf[..4]);
        sender.join();
    }
}

check! {
    /// A socket through `OwnedFd` and back is the same socket, and waits
    /// as before.
    fn udp_through_owned_fd(ctx, log) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = a.local_addr().unwrap();
        let a = UdpSocket::from(OwnedFd::from(a));
        log.v("address", a.local_addr().unwrap() == to);
        let (tx, rx) = chan::bounded::<()>(0);
        let sender = ctx.peer(move || {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            rx.recv().unwrap();
            s.send_to(b"fd", to).unwrap();
        });
        tx.send(()).unwrap();
        let mut buf = [0u8; 4];
        log.r("recv", &a.recv(&mut buf));
        log.v("bytes", &buf[..2]);
        sender.join();
    }
}

/// A timeout no wait in a passing check reaches: one that a handle still
/// uses after another handle replaced it shows in the time waited.
const LONG: Duration = Duration::from_secs(5);

check! {
    /// Clones share their timeouts (the kernel keeps them per socket): one
    /// set through the original after the clone was made is what the clone
    /// reports and what its receives wait for; one set or cleared through
    /// the clone is the original's.
    fn udp_clones_share_their_timeouts(ctx, log) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.set_read_timeout(Some(LONG)).unwrap();
        let clone = a.try_clone().unwrap();
        a.set_read_timeout(Some(TIMEOUT)).unwrap();
        log.r("clone's read timeout", &clone.read_timeout());
        let t = Instant::now();
        log.ok("recv_from on the clone", &clone.recv_from(&mut [0u8; 8]));
        let waited = t.elapsed();
        log.v("waited the new timeout", conformance::waited_timeout(waited, TIMEOUT, LONG));
        clone.set_write_timeout(Some(TIMEOUT)).unwrap();
        log.r("original's write timeout", &a.write_timeout());
        clone.set_read_timeout(None).unwrap();
        log.r("original's read timeout, cleared through the clone", &a.read_timeout());
    }
}
