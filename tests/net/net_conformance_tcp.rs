//! `TcpListener` and `TcpStream` against std's: each check runs with std's
//! types and with gofer's, on a plain thread, in a task with thread peers
//! and in a task with task peers, and every run must see what std's does,
//! error kinds included (harness: `conformance/mod.rs`).

use crate::conformance;

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use conformance::check;
use gofer::chan;

/// A timeout that is a whole number of kernel clock ticks at any HZ.
const TIMEOUT: Duration = Duration::from_millis(100);

check! {
    /// Port 0 picks a port; the addresses each side reports agree.
    fn tcp_bind_to_port_zero_and_the_addresses_agree(ctx, log) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        log.v("listener ip", addr.ip());
        log.v("port picked", addr.port() != 0);
        let client = ctx.peer(move || {
            let c = TcpStream::connect(addr).unwrap();
            (c.local_addr().unwrap(), c.peer_addr().unwrap(), c)
        });
        let (s, from) = l.accept().unwrap();
        let (c_local, c_peer, _c) = client.join();
        log.v("client's peer is the listener", c_peer == addr);
        log.v("accept's address is the client's", from == c_local);
        log.v("server side's peer is the client", s.peer_addr().unwrap() == c_local);
        log.v("server side's local is the listener's", s.local_addr().unwrap() == addr);
    }
}

check! {
    /// A second bind to a port in use fails with `AddrInUse`; binding to no
    /// address at all is `InvalidInput`.
    fn tcp_bind_to_an_address_in_use_fails(ctx, log) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        log.ok("second bind", &TcpListener::bind(addr));
        let none: &[SocketAddr] = &[];
        log.ok("bind to no address", &TcpListener::bind(none));
    }
}

check! {
    /// A connect to a closed port is refused, with or without a timeout;
    /// a zero timeout is refused outright.
    fn tcp_connect_to_a_closed_port_is_refused(ctx, log) {
        let addr = ctx.closed_port();
        log.ok("connect", &TcpStream::connect(addr));
        log.ok("connect_timeout", &TcpStream::connect_timeout(&addr, Duration::from_secs(5)));
        log.ok("zero timeout", &TcpStream::connect_timeout(&addr, Duration::ZERO));
    }
}

check! {
    /// Bytes written arrive in order; the peer's shutdown(Write) ends the
    /// reader's stream; `incoming` yields connections.
    fn tcp_read_write_and_read_to_end(ctx, log) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let expect = data.clone();
        let echo = ctx.peer(move || {
            let mut s = l.incoming().next().unwrap().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            s.write_all(&got).unwrap();
        });
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(&data).unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        log.r("read_to_end", &c.read_to_end(&mut back));
        log.v("same bytes", back == expect);
        log.r("read after the end", &c.read(&mut [0u8; 8]));
        echo.join();
    }
}

check! {
    /// Vectored writes gather and vectored reads scatter.
    fn tcp_vectored_io(ctx, log) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = chan::bounded::<()>(0);
        let peer = ctx.peer(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = [0u8; 9];
            s.read_exact(&mut got).unwrap();
            rx.recv().unwrap();
            s.write_all(b"0123456789").unwrap();
            got
        });
        let mut c = TcpStream::connect(addr).unwrap();
        let n = c.write_vectored(&[IoSlice::new(b"abc"), IoSlice::new(b""), IoSlice::new(b"defghi")]);
        log.r("write_vectored", &n);
        tx.send(()).unwrap();
        let (mut a, mut b) = ([0u8; 4], [0u8; 6]);
        // The peer writes its 10 bytes at once: wait until they are all
        // here (peek waits for the first), then scatter them.
        let mut peeked = [0u8; 10];
        while c.peek(&mut peeked).unwrap() < 10 {}
        let r = c.read_vectored(&mut [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)]);
        log.r("read_vectored", &r);
        log.v("scattered", (a, b));
        log.v("gathered", peer.join());
    }
}

check! {
    /// shutdown(Write): the peer reads the end of the stream and can still
    /// send; a write after it is `BrokenPipe`; a second one is fine.
    fn tcp_shutdown_write_ends_the_peers_stream(ctx, log) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = chan::bounded::<()>(0);
        let peer = ctx.peer(move || {
            let (mut s, _) = l.accept().unwrap();
            let eof = s.read(&mut [0u8; 4]).map_err(|e| e.kind());
            s.write_all(b"still").unwrap();
            // Open until the checks are done: once this side closes too, the
            // connection is gone and shutdown says NotConnected.
            rx.recv().ok();
            eof
        });
        let mut c = TcpStream::connect(addr).unwrap();
        log.r("shutdown(Write)", &c.shutdown(Shutdown::Write));
        log.r("again", &c.shutdown(Shutdown::Write));
        let mut b = [0u8; 5];
        log.r("read what the peer sent", &c.read_exact(&mut b));
        log.v("bytes", b);
        log.r("write after shutdown(Write)", &c.write(b"x"));
        drop(tx);
        log.v("peer read", peer.join());
    }
}

check! {
    /// shutdown(Read): reads then see the end of the stream at once;
    /// shutdown(Both): the peer reads the end, and writes fail.
    fn tcp_shutdown_read_and_both(ctx, log) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let peer = ctx.peer(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 4];
            s.read(&mut b).map_err(|e| e.kind())
        });
        let mut c = TcpStream::connect(addr).unwrap();
        log.r("shutdown(Read)", &c.shutdown(Shutdown::Read));
        log.r("read after shutdown(Read)", &c.read(&mut [0u8; 4]));
        log.r("shutdown(Both)", &c.shutdown(Shutdown::Both));
        log.r("write after shutdown(Both)", &c.write(b"x"));
        log.v("peer read", peer.join());
    }
}

check! {
    /// peek waits for data like a read, and leaves it for the read.
    fn tcp_peek_waits_and_does_not_consume(ctx, log) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = chan::bounded::<()>(0);
        let peer = ctx.peer(move || {
            let (mut s, _) = l.accept().unwrap();
            rx.recv().unwrap();
            s.write_all(b"hello").unwrap();
            rx.recv().ok();
        });
        let mut c = TcpStream::connect(addr).unwrap();
        tx.send(()).unwrap();
        let mut b = [0u8; 5];
        let mut n = 0;
        while n < 5 {
            n = c.peek(&mut b).unwrap();
        }
        log.v("peeked", b);
        log.r("peek again", &c.peek(&mut [0u8; 3]));
        let mut r = [0u8; 5];
        log.r("read", &c.read(&mut r));
        log.v("read bytes", r);
        drop(tx);
        peer.join();
    }
}

check! {
    /// Read and write timeouts: zero refused, the getters give back what was
    /// set, and an expired one is `WouldBlock` (`EAGAIN`), never early.
    fn tcp_read_and_write_timeouts(ctx, log) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = chan::bounded::<()>(0);
        let peer = ctx.peer(move || {
            let (_s, _) = l.accept().unwrap();
            rx.recv().ok(); // holds the connection open, never reads
        });
        let mut c = TcpStream::connect(addr).unwrap();
        log.r("default read timeout", &c.read_timeout());
        log.r("zero read timeout", &c.set_read_timeout(Some(Duration::ZERO)));
        log.r("zero write timeout", &c.set_write_timeout(Some(Duration::ZERO)));
        c.set_read_timeout(Some(TIMEOUT)).unwrap();
        c.set_write_timeout(Some(TIMEOUT)).unwrap();
        log.r("read timeout", &c.read_timeout());
        log.r("write timeout", &c.write_timeout());
        let t = Instant::now();
        log.r("read", &c.read(&mut [0u8; 4]));
        log.v("not early", conformance::not_early(t.elapsed(), TIMEOUT));
        let chunk = vec![0u8; 64 * 1024];
        let e = loop {
            let t = Instant::now();
            if let Err(e) = c.write(&chunk) {
                break (e.kind(), e.raw_os_error(), t.elapsed() >= TIMEOUT);
            }
        };
        log.v("write into a full connection", e);
        c.set_read_timeout(None).unwrap();
        log.r("read timeout cleared", &c.read_timeout());
        drop(tx);
        peer.join();
    }
}

check! {
    /// Options round-trip: nodelay, ttl (and a ttl of 0 is refused),
    /// take_error on a healthy socket.
    fn tcp_options_round_trip(ctx, log) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let c = TcpStream::connect(addr).unwrap();
        log.r("nodelay", &c.nodelay());
        log.r("set_nodelay", &c.set_nodelay(true));
        log.r("nodelay now", &c.nodelay());
        log.r("set_ttl", &c.set_ttl(42));
        log.r("ttl now", &c.ttl());
        log.r("set_ttl(0)", &c.set_ttl(0));
        log.r("listener set_ttl", &l.set_ttl(7));
        log.r("listener ttl", &l.ttl());
        log.v("take_error", c.take_error().map(|e| e.map(|e| e.kind())).map_err(|e| e.kind()));
        log.v("listener take_error", l.take_error().map(|e| e.map(|e| e.kind())).map_err(|e| e.kind()));
    }
}

check! {
    /// A clone is the same connection: what it writes arrives, and the
    /// peer sees the end only when the last handle is closed. A clone of
    /// a listener accepts.
    fn tcp_try_clone_and_close(ctx, log) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let l2 = l.try_clone().unwrap();
        log.v("clone's address", l2.local_addr().unwrap() == addr);
        drop(l);
        let peer = ctx.peer(move || {
            let (mut s, _) = l2.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).map(|_| got).map_err(|e| e.kind())
        });
        let c = TcpStream::connect(addr).unwrap();
        let mut c2 = c.try_clone().unwrap();
        log.v("clone's peer", c2.peer_addr().unwrap() == addr);
        (&c).write_all(b"a").unwrap();
        drop(c);
        c2.write_all(b"b").unwrap();
        drop(c2);
        log.v("peer read", peer.join());
    }
}

check! {
    /// Non-blocking mode: accept, read and a full write give `WouldBlock`;
    /// back in blocking mode, a read waits for the data.
    fn tcp_nonblocking_mode(ctx, log) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        l.set_nonblocking(true).unwrap();
        log.ok("nonblocking accept", &l.accept());
        l.set_nonblocking(false).unwrap();
        let (tx, rx) = chan::bounded::<()>(0);
        let peer = ctx.peer(move || {
            let (mut s, _) = l.accept().unwrap();
            rx.recv().unwrap();
            s.write_all(b"x").unwrap();
            rx.recv().ok();
        });
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_nonblocking(true).unwrap();
        log.r("nonblocking read", &c.read(&mut [0u8; 4]));
        let chunk = vec![0u8; 64 * 1024];
        let e = loop {
            if let Err(e) = c.write(&chunk) {
                break conformance::err(&e);
            }
        };
        log.v("nonblocking write into a full connection", e);
        c.set_nonblocking(false).unwrap();
        tx.send(()).unwrap();
        let mut b = [0u8; 1];
        log.r("blocking read", &c.read(&mut b));
        drop(tx);
        peer.join();
    }
}

check! {
    /// A socket through `OwnedFd` and back is the same socket, and waits
    /// as before.
    fn tcp_through_owned_fd(ctx, log) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let l = TcpListener::from(OwnedFd::from(l));
        log.v("listener's address", l.local_addr().unwrap() == addr);
        let (tx, rx) = chan::bounded::<()>(0);
        let peer = ctx.peer(move || {
            let (s, _) = l.accept().unwrap();
            let mut s = TcpStream::from(OwnedFd::from(s));
            rx.recv().unwrap();
            s.write_all(b"fd").unwrap();
        });
        let c = TcpStream::connect(addr).unwrap();
        let mut c = TcpStream::from(OwnedFd::from(c));
        log.v("stream's peer", c.peer_addr().unwrap() == addr);
        tx.send(()).unwrap();
        let mut b = [0u8; 2];
        log.r("read", &c.read_exact(&mut b));
        log.v("bytes", b);
        peer.join();
    }
}

/// A timeout no wait in a passing check reaches: one that a handle still
/// uses after another handle replaced it shows in the time waited.
const LONG: Duration = Duration::from_secs(5);

check! {
    /// Clones share their timeouts (the kernel keeps them per socket): one
    /// set through the original after the clone was made is what the clone
    /// reports and what its reads and writes wait for, and one cleared
    /// through the clone is cleared for the original.
    fn tcp_clones_share_their_timeouts(ctx, log) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = chan::bounded::<()>(0);
        let peer = ctx.peer(move || {
            let (_s, _) = l.accept().unwrap();
            rx.recv().ok(); // holds the connection open, never reads
        });
        let c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(LONG)).unwrap();
        c.set_write_timeout(Some(LONG)).unwrap();
        let mut clone = c.try_clone().unwrap();
        c.set_read_timeout(Some(TIMEOUT)).unwrap();
        c.set_write_timeout(Some(TIMEOUT)).unwrap();
        log.r("clone's read timeout", &clone.read_timeout());
        log.r("clone's write timeout", &clone.write_timeout());
        let t = Instant::now();
        log.r("read on the clone", &clone.read(&mut [0u8; 4]));
        let waited = t.elapsed();
        log.v("read waited the new timeout", conformance::waited_timeout(waited, TIMEOUT, LONG));
        let chunk = vec![0u8; 64 * 1024];
        let e = loop {
            let t = Instant::now();
            if let Err(e) = clone.write(&chunk) {
                let waited = t.elapsed();
                break (e.kind(), e.raw_os_error(), conformance::waited_timeout(waited, TIMEOUT, LONG));
            }
        };
        log.v("write on the clone into a full connection", e);
        clone.set_read_timeout(None).unwrap();
        log.r("original's read timeout, cleared through the clone", &c.read_timeout());
        log.r("original's write timeout", &c.write_timeout());
        drop(tx);
        peer.join();
    }
}
