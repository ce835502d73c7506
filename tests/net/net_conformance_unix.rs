//! `UnixListener`, `UnixStream` and `UnixDatagram` against std's: each
//! check runs with std's types and with gofer's, on a plain thread, in a
//! task with thread peers and in a task with task peers, and every run must
//! see what std's does, error kinds included (harness:
//! `conformance/mod.rs`).

use crate::conformance;

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::net::Shutdown;
use std::os::fd::OwnedFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::SocketAddr;
use std::time::{Duration, Instant};

use conformance::{check, unix_addr};
use gofer::chan;

/// A timeout that is a whole number of kernel clock ticks at any HZ.
const TIMEOUT: Duration = Duration::from_millis(100);

/// The log's form of an address with the temporary part of the path
/// replaced, so that std's run and gofer's compare.
fn addr_form(a: &SocketAddr) -> String {
    let s = unix_addr(a);
    match s.find("gofer-conf-") {
        Some(at) => format!("{}gofer-conf-*", &s[..at.min(5)]),
        None => s,
    }
}

check! {
    /// Binding to a path, connecting, accepting: what each side says its
    /// address is; a pair's addresses are unnamed.
    fn unix_bind_connect_accept_and_the_addresses(ctx, log) {
        let path = ctx.path();
        let l = UnixListener::bind(&path).unwrap();
        log.v("listener", addr_form(&l.local_addr().unwrap()));
        let p = path.0.clone();
        let client = ctx.peer(move || {
            let c = UnixStream::connect(&p).unwrap();
            (addr_form(&c.local_addr().unwrap()), addr_form(&c.peer_addr().unwrap()), c)
        });
        let (s, from) = l.accept().unwrap();
        let (local, peer, _c) = client.join();
        log.v("client local", local);
        log.v("client peer", peer);
        log.v("accepted from", addr_form(&from));
        log.v("server side local", addr_form(&s.local_addr().unwrap()));
        let (a, b) = UnixStream::pair().unwrap();
        log.v("pair", (addr_form(&a.local_addr().unwrap()), addr_form(&b.peer_addr().unwrap())));
        log.v("listener take_error", l.take_error().map(|e| e.is_none()).map_err(|e| e.kind()));
        log.v("stream take_error", a.take_error().map(|e| e.is_none()).map_err(|e| e.kind()));
    }
}

check! {
    /// A path in use, a path that does not exist, a socket file nobody
    /// listens on: `AddrInUse`, `NotFound`, `ConnectionRefused`.
    fn unix_bind_and_connect_errors(ctx, log) {
        let path = ctx.path();
        let l = UnixListener::bind(&path).unwrap();
        log.ok("bind a path in use", &UnixListener::bind(&path));
        log.ok("bind a datagram to it", &UnixDatagram::bind(&path));
        drop(l);
        log.ok("connect with nobody listening", &UnixStream::connect(&path));
        let missing = ctx.path();
        log.ok("connect to nothing", &UnixStream::connect(&missing));
        let d = UnixDatagram::unbound().unwrap();
        log.ok("send_to nothing", &d.send_to(b"x", &missing));
        log.ok("connect a datagram to nothing", &d.connect(&missing));
        log.ok("send unconnected", &d.send(b"x"));
        log.ok("peer_addr unconnected", &d.peer_addr());
    }
}

check! {
    /// Reads and writes, plain and vectored, across a listener's connection.
    fn unix_stream_read_write_and_vectored(ctx, log) {
        let path = ctx.path();
        let l = UnixListener::bind(&path).unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
        let expect = data.clone();
        let echo = ctx.peer(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            s.write_all(&got).unwrap();
        });
        let mut c = UnixStream::connect(&path).unwrap();
        log.r(
            "write_vectored",
            &c.write_vectored(&[IoSlice::new(b"ab"), IoSlice::new(b""), IoSlice::new(b"cde")]),
        );
        c.write_all(&data).unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let (mut a, mut b) = ([0u8; 2], [0u8; 3]);
        let mut first = [0u8; 5];
        while extras::stream_peek(&c, &mut first).unwrap() < 5 {}
        log.r("read_vectored", &c.read_vectored(&mut [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)]));
        log.v("scattered", (a, b));
        let mut back = Vec::new();
        log.r("read_to_end", &c.read_to_end(&mut back));
        log.v("same bytes", back == expect);
        echo.join();
    }
}

check! {
    /// shutdown in each direction on a pair: the peer reads the end after
    /// shutdown(Write), writes after it are `BrokenPipe`, reads after
    /// shutdown(Read) see the end at once.
    fn unix_stream_shutdown(ctx, log) {
        let (mut a, b) = UnixStream::pair().unwrap();
        let peer = ctx.peer(move || {
            let mut b = b;
            let eof = b.read(&mut [0u8; 4]).map_err(|e| e.kind());
            b.write_all(b"still").unwrap();
            eof
        });
        log.r("shutdown(Write)", &a.shutdown(Shutdown::Write));
        let mut buf = [0u8; 5];
        log.r("read what the peer sent", &a.read_exact(&mut buf));
        log.r("write after shutdown(Write)", &a.write(b"x"));
        log.v("peer read", peer.join());
        let (mut c, _d) = UnixStream::pair().unwrap();
        log.r("shutdown(Read)", &c.shutdown(Shutdown::Read));
        log.r("read after shutdown(Read)", &c.read(&mut [0u8; 4]));
        log.r("shutdown(Both)", &c.shutdown(Shutdown::Both));
        log.r("write after shutdown(Both)", &c.write(b"x"));
    }
}

check! {
    /// peek on a stream waits like a read and leaves the bytes for it.
    fn unix_stream_peek_waits_and_does_not_consume(ctx, log) {
        let (mut a, b) = UnixStream::pair().unwrap();
        let (tx, rx) = chan::bounded::<()>(0);
        let peer = ctx.peer(move || {
            let mut b = b;
            rx.recv().unwrap();
            b.write_all(b"hello").unwrap();
            b
        });
        tx.send(()).unwrap();
        let mut buf = [0u8; 5];
        while extras::stream_peek(&a, &mut buf).unwrap() < 5 {}
        log.v("peeked", buf);
        let mut r = [0u8; 5];
        log.r("read", &a.read(&mut r));
        log.v("read bytes", r);
        let _b = peer.join();
    }
}

check! {
    /// Stream and datagram timeouts: zero refused, the getters give back
    /// what was set, and an expired one is `WouldBlock`, never early.
    fn unix_timeouts(ctx, log) {
        let (mut a, _b) = UnixStream::pair().unwrap();
        log.r("zero read timeout", &a.set_read_timeout(Some(Duration::ZERO)));
        log.r("zero write timeout", &a.set_write_timeout(Some(Duration::ZERO)));
        a.set_read_timeout(Some(TIMEOUT)).unwrap();
        a.set_write_timeout(Some(TIMEOUT)).unwrap();
        log.r("read timeout", &a.read_timeout());
        log.r("write timeout", &a.write_timeout());
        let t = Instant::now();
        log.r("read", &a.read(&mut [0u8; 4]));
        log.v("not early", conformance::not_early(t.elapsed(), TIMEOUT));
        let t = Instant::now();
        log.r("peek", &extras::stream_peek(&a, &mut [0u8; 4]));
        log.v("not early", conformance::not_early(t.elapsed(), TIMEOUT));
        let chunk = [1u8; 16 * 1024];
        let e = loop {
            if let Err(e) = a.write(&chunk) {
                break conformance::err(&e);
            }
        };
        log.v("write into a full stream", e);
        let (d, _e) = UnixDatagram::pair().unwrap();
        log.r("datagram zero timeout", &d.set_read_timeout(Some(Duration::ZERO)));
        d.set_read_timeout(Some(TIMEOUT)).unwrap();
        log.r("datagram read timeout", &d.read_timeout());
        let t = Instant::now();
        log.r("recv", &d.recv(&mut [0u8; 4]));
        log.r("peek_from", &extras::datagram_peek_from(&d, &mut [0u8; 4]));
        log.v("not early", conformance::not_early(t.elapsed(), TIMEOUT * 2));
        d.set_read_timeout(None).unwrap();
        log.r("cleared", &d.read_timeout());
    }
}

check! {
    /// Non-blocking mode on all three types: `WouldBlock`; back in blocking
    /// mode a read waits. Clones: the peer sees the end only when the last
    /// handle is closed.
    fn unix_nonblocking_mode_and_clones(ctx, log) {
        let path = ctx.path();
        let l = UnixListener::bind(&path).unwrap();
        l.set_nonblocking(true).unwrap();
        log.ok("nonblocking accept", &l.accept());
        let (d, _e) = UnixDatagram::pair().unwrap();
        d.set_nonblocking(true).unwrap();
        log.r("nonblocking recv", &d.recv(&mut [0u8; 4]));
        log.r("nonblocking peek", &extras::datagram_peek(&d, &mut [0u8; 4]));
        let (mut a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        log.r("nonblocking read", &a.read(&mut [0u8; 4]));
        a.set_nonblocking(false).unwrap();
        let (tx, rx) = chan::bounded::<()>(0);
        let peer = ctx.peer(move || {
            let mut b = b;
            rx.recv().unwrap();
            b.write_all(b"x").unwrap();
            let mut got = Vec::new();
            b.read_to_end(&mut got).map(|_| got).map_err(|e| e.kind())
        });
        tx.send(()).unwrap();
        log.r("blocking read", &a.read(&mut [0u8; 1]));
        let mut a2 = a.try_clone().unwrap();
        (&a).write_all(b"1").unwrap();
        drop(a);
        a2.write_all(b"2").unwrap();
        drop(a2);
        log.v("peer read", peer.join());
        let l2 = l.try_clone().unwrap();
        log.v("listener clone", addr_form(&l2.local_addr().unwrap()));
    }
}

check! {
    /// Abstract addresses: a listener, a stream and datagrams bound and
    /// reached by name, with no file; the names come back as such.
    fn unix_abstract_addresses(ctx, log) {
        let name = ctx.abstract_name();
        let addr = SocketAddr::from_abstract_name(&name).unwrap();
        let l = UnixListener::bind_addr(&addr).unwrap();
        log.v("listener's name", l.local_addr().unwrap().as_abstract_name() == Some(&name[..]));
        log.ok("bind the name again", &UnixListener::bind_addr(&addr));
        let a2 = addr.clone();
        let client = ctx.peer(move || {
            let mut c = UnixStream::connect_addr(&a2).unwrap();
            c.write_all(b"abs").unwrap();
            c.peer_addr().unwrap().as_abstract_name().map(|n| n.to_vec())
        });
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; 3];
        log.r("read", &s.read_exact(&mut buf));
        log.v("bytes", buf);
        log.v("client's peer is the name", client.join() == Some(name.clone()));
        let missing = SocketAddr::from_abstract_name(ctx.abstract_name()).unwrap();
        log.ok("connect to a name nobody has", &UnixStream::connect_addr(&missing));

        let dname = ctx.abstract_name();
        let daddr = SocketAddr::from_abstract_name(&dname).unwrap();
        let d = UnixDatagram::bind_addr(&daddr).unwrap();
        log.v("datagram's name", d.local_addr().unwrap().as_abstract_name() == Some(&dname[..]));
        let sname = ctx.abstract_name();
        let saddr = SocketAddr::from_abstract_name(&sname).unwrap();
        let (tx, rx) = chan::bounded::<()>(0);
        let (d2, s2) = (daddr.clone(), saddr.clone());
        let sender = ctx.peer(move || {
            let s = UnixDatagram::bind_addr(&s2).unwrap();
            rx.recv().unwrap();
            let sent = s.send_to_addr(b"to-name", &d2).map_err(|e| e.kind());
            s.connect_addr(&d2).unwrap();
            let peer = s.peer_addr().unwrap().as_abstract_name().map(|n| n.to_vec());
            s.send(b"connected").unwrap();
            (sent, peer)
        });
        tx.send(()).unwrap();
        let mut buf = [0u8; 16];
        let (n, desc) = extras::datagram_peek_from(&d, &mut buf).unwrap();
        log.v("peek_from", (&buf[..n].to_vec(), desc == format!("abstract {}", String::from_utf8_lossy(&sname))));
        let (n, from) = d.recv_from(&mut buf).unwrap();
        log.v("recv_from", (&buf[..n].to_vec(), from.as_abstract_name() == Some(&sname[..])));
        let (n, _) = d.recv_from(&mut buf).unwrap();
        log.v("then", &buf[..n]);
        let (sent, peer) = sender.join();
        log.v("send_to_addr", sent);
        log.v("sender's peer is the name", peer == Some(dname.clone()));
        log.ok("send_to_addr a name nobody has", &d.send_to_addr(b"x", &missing));
        log.ok("connect_addr a name nobody has", &d.connect_addr(&missing));
    }
}

check! {
    /// Datagrams by path: an unbound sender is unnamed; connect, peer_addr,
    /// send and recv; peek and peek_from wait and leave the datagram; a
    /// buffer too small truncates; shutdown.
    fn unix_datagram_send_recv_peek_and_shutdown(ctx, log) {
        let path = ctx.path();
        let d = UnixDatagram::bind(&path).unwrap();
        log.v("bound", addr_form(&d.local_addr().unwrap()));
        let (tx, rx) = chan::bounded::<()>(0);
        let p = path.0.clone();
        let sender = ctx.peer(move || {
            let s = UnixDatagram::unbound().unwrap();
            rx.recv().unwrap();
            s.send_to(b"first", &p).unwrap();
            s.connect(&p).unwrap();
            let peer = addr_form(&s.peer_addr().unwrap());
            s.send(b"second!").unwrap();
            peer
        });
        tx.send(()).unwrap();
        let mut buf = [0u8; 16];
        log.r("peek", &extras::datagram_peek(&d, &mut buf));
        log.r("peek_from", &extras::datagram_peek_from(&d, &mut buf));
        let (n, from) = d.recv_from(&mut buf).unwrap();
        log.v("recv_from", (&buf[..n].to_vec(), addr_form(&from)));
        let mut small = [0u8; 3];
        log.r("recv into a small buffer", &d.recv(&mut small));
        log.v("truncated", small);
        log.v("sender's peer", sender.join());
        let (a, b) = UnixDatagram::pair().unwrap();
        log.r("pair send", &a.send(b"p"));
        log.r("pair recv", &b.recv(&mut buf));
        log.r("shutdown(Write)", &a.shutdown(Shutdown::Write));
        log.r("send after shutdown(Write)", &a.send(b"x"));
        log.r("shutdown(Read)", &b.shutdown(Shutdown::Read));
        log.r("recv after shutdown(Read)", &b.recv(&mut buf));
        log.r("peek after shutdown(Read)", &extras::datagram_peek(&b, &mut buf));
        log.r("peek_from after shutdown(Read)", &extras::datagram_peek_from(&b, &mut buf));
        log.v("recv_from after shutdown(Read)", b.recv_from(&mut buf).map(|(n, a)| (n, addr_form(&a))).map_err(|e| e.kind()));
        b.set_nonblocking(true).unwrap();
        log.r("nonblocking recv after shutdown(Read)", &b.recv(&mut buf));
        log.v("take_error", b.take_error().map(|e| e.is_none()).map_err(|e| e.kind()));
    }
}

check! {
    /// All three through `OwnedFd` and back: the same sockets, waiting as
    /// before.
    fn unix_through_owned_fd(ctx, log) {
        let path = ctx.path();
        let l = UnixListener::from(OwnedFd::from(UnixListener::bind(&path).unwrap()));
        let p = path.0.clone();
        let (tx, rx) = chan::bounded::<()>(0);
        let peer = ctx.peer(move || {
            let c = UnixStream::connect(&p).unwrap();
            let mut c = UnixStream::from(OwnedFd::from(c));
            rx.recv().unwrap();
            c.write_all(b"fd").unwrap();
        });
        let (s, _) = l.accept().unwrap();
        let mut s = UnixStream::from(OwnedFd::from(s));
        tx.send(()).unwrap();
        let mut buf = [0u8; 2];
        log.r("stream read", &s.read_exact(&mut buf));
        log.v("bytes", buf);
        peer.join();
        let (a, b) = UnixDatagram::pair().unwrap();
        let a = UnixDatagram::from(OwnedFd::from(a));
        let (tx, rx) = chan::bounded::<()>(0);
        let peer = ctx.peer(move || {
            rx.recv().unwrap();
            b.send(b"dg").unwrap();
        });
        tx.send(()).unwrap();
        log.r("datagram recv", &a.recv(&mut buf));
        peer.join();
    }
}

/// A timeout no wait in a passing check reaches: one that a handle still
/// uses after another handle replaced it shows in the time waited.
const LONG: Duration = Duration::from_secs(5);

check! {
    /// Clones of a stream and of a datagram socket share their timeouts
    /// (the kernel keeps them per socket): one set through the original
    /// after the clone was made is what the clone reports and what its
    /// reads and writes wait for; one cleared through the clone is cleared
    /// for the original.
    fn unix_clones_share_their_timeouts(ctx, log) {
        let (a, _b) = UnixStream::pair().unwrap();
        a.set_read_timeout(Some(LONG)).unwrap();
        a.set_write_timeout(Some(LONG)).unwrap();
        let mut clone = a.try_clone().unwrap();
        a.set_read_timeout(Some(TIMEOUT)).unwrap();
        a.set_write_timeout(Some(TIMEOUT)).unwrap();
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
        log.v("write on the clone into a full stream", e);
        clone.set_read_timeout(None).unwrap();
        log.r("original's read timeout, cleared through the clone", &a.read_timeout());

        let (d, _e) = UnixDatagram::pair().unwrap();
        d.set_read_timeout(Some(LONG)).unwrap();
        let dclone = d.try_clone().unwrap();
        d.set_read_timeout(Some(TIMEOUT)).unwrap();
        log.r("datagram clone's read timeout", &dclone.read_timeout());
        let t = Instant::now();
        log.r("recv on the datagram clone", &dclone.recv(&mut [0u8; 4]));
        let waited = t.elapsed();
        log.v("recv waited the new timeout", conformance::waited_timeout(waited, TIMEOUT, LONG));
        dclone.set_write_timeout(Some(TIMEOUT)).unwrap();
        log.r("datagram original's write timeout", &d.write_timeout());
    }
}
