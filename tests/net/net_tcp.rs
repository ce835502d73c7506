//! TCP sockets inside tasks: timeouts that leave the thread free, shutdown
//! waking parked readers and writers, the error kinds of connect and bind,
//! many acceptors, non-blocking mode, and tasks whose sockets never make
//! them wait still sharing their thread. (Echo at scale: `tests/alone/net_echo.rs`.)
//!
//! A task that might never wake reports through a channel read with a
//! deadline (`net_common::recv`), so a lost wake-up fails the test instead
//! of hanging it.

use crate::net_common;

use std::collections::HashSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use gofer::net::{TcpListener, TcpStream};
use gofer::Scheduler;
use net_common::{recv, sched, wait_parked};

fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback listener");
    let a = l.local_addr().expect("local_addr");
    (l, a)
}

/// A connected pair: `(client, server side)`, made from the calling thread.
fn pair() -> (TcpStream, TcpStream) {
    let (l, a) = listener();
    let c = TcpStream::connect(a).expect("connect");
    let (s, _) = l.accept().expect("accept");
    (c, s)
}

// ------------------------------------------------------------ timeouts

/// On one thread, `waiting` counts the yields another task made while it
/// is set: a proof that the thread was free.
fn counter(
    s: &Scheduler,
    waiting: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> gofer::JoinHandle<usize> {
    s.spawn(move || {
        let mut during = 0;
        while !stop.load(Ordering::SeqCst) {
            if waiting.load(Ordering::SeqCst) {
                during += 1;
            }
            gofer::yield_now();
        }
        during
    })
}

#[test]
fn a_read_timeout_gives_would_block_like_std_while_other_tasks_keep_running() {
    let s = sched("rdto", 1);
    let (c, _server_side) = pair();
    // A whole number of kernel clock ticks at any HZ: the kernel keeps it as is.
    let timeout = Duration::from_millis(100);
    c.set_read_timeout(Some(timeout)).unwrap();
    assert_eq!(c.read_timeout().unwrap(), Some(timeout));
    let waiting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let count = counter(&s, waiting.clone(), stop.clone());
    let reader = {
        let (waiting, stop) = (waiting.clone(), stop.clone());
        s.spawn(move || {
            let mut c = c;
            let mut buf = [0u8; 16];
            waiting.store(true, Ordering::SeqCst);
            let t = Instant::now();
            let r = c.read(&mut buf);
            let took = t.elapsed();
            waiting.store(false, Ordering::SeqCst);
            stop.store(true, Ordering::SeqCst);
            (r.map_err(|e| e.kind()), took)
        })
    };
    let (r, took) = reader.join().unwrap();
    assert_eq!(r, Err(ErrorKind::WouldBlock));
    assert!(took >= timeout, "timed out early, after {took:?}");
    let during = count.join().unwrap();
    assert!(during > 0, "no other task ran while the read waited");
    s.shutdown();
}

#[test]
fn a_write_timeout_gives_would_block_like_std_while_other_tasks_keep_running() {
    let s = sched("wrto", 1);
    // The peer never reads: the send and receive buffers fill up.
    let (c, _server_side) = pair();
    let timeout = Duration::from_millis(100);
    c.set_write_timeout(Some(timeout)).unwrap();
    assert_eq!(c.write_timeout().unwrap(), Some(timeout));
    let waiting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let count = counter(&s, waiting.clone(), stop.clone());
    let writer = {
        let (waiting, stop) = (waiting.clone(), stop.clone());
        s.spawn(move || {
            let mut c = c;
            let chunk = vec![7u8; 64 * 1024];
            let mut sent = 0usize;
            waiting.store(true, Ordering::SeqCst);
            let r = loop {
                let t = Instant::now();
                match c.write(&chunk) {
                    Ok(k) => sent += k,
                    Err(e) => break (e.kind(), t.elapsed()),
                }
                assert!(
                    sent < 1 << 30,
                    "a gigabyte went into a peer that never reads"
                );
            };
            waiting.store(false, Ordering::SeqCst);
            stop.store(true, Ordering::SeqCst);
            (r, sent)
        })
    };
    let ((kind, took), sent) = writer.join().unwrap();
    assert_eq!(kind, ErrorKind::WouldBlock, "after {sent} bytes");
    assert!(took >= timeout, "timed out early, after {took:?}");
    let during = count.join().unwrap();
    assert!(during > 0, "no other task ran while the write waited");
    s.shutdown();
}

#[test]
fn a_zero_timeout_is_refused_as_std_refuses_it() {
    let (c, _s) = pair();
    for r in [
        c.set_read_timeout(Some(Duration::ZERO)),
        c.set_write_timeout(Some(Duration::ZERO)),
    ] {
        assert_eq!(r.unwrap_err().kind(), ErrorKind::InvalidInput);
    }
    let (_l, addr) = listener();
    let e = TcpStream::connect_timeout(&addr, Duration::ZERO).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

// ------------------------------------------------------------ shutdown of a clone

/// A task parks reading one handle of a connection; `how` is shut down on
/// a clone from outside; the reader wakes (EOF or an error, never a hang).
fn shutdown_of_a_clone_wakes_the_reader(how: Shutdown) {
    let s = sched("shut", 1);
    let (c, _server_side) = pair();
    let clone = c.try_clone().expect("try_clone");
    let (tx, rx) = mpsc::channel();
    s.spawn(move || {
        let mut c = c;
        let mut buf = [0u8; 16];
        tx.send(c.read(&mut buf).map_err(|e| e.kind())).unwrap();
    });
    wait_parked(&s, "the reader parks");
    clone.shutdown(how).expect("shutdown");
    let r = recv(&rx, "the parked reader wakes");
    assert!(matches!(r, Ok(0) | Err(_)), "{how:?}: read gave {r:?}");
    s.shutdown();
}

#[test]
fn shutdown_read_of_a_clone_wakes_a_task_parked_reading_the_other() {
    shutdown_of_a_clone_wakes_the_reader(Shutdown::Read);
}

#[test]
fn shutdown_both_of_a_clone_wakes_a_task_parked_reading_the_other() {
    shutdown_of_a_clone_wakes_the_reader(Shutdown::Both);
}

/// A task parks writing into a full connection; the write side is shut
/// down on a clone: the writer wakes with `BrokenPipe`, as std's would.
#[test]
fn shutdown_write_of_a_clone_wakes_a_task_parked_writing_the_other() {
    let s = sched("shut-w", 1);
    let (c, _server_side) = pair();
    let clone = c.try_clone().unwrap();
    let (tx, rx) = mpsc::channel();
    s.spawn(move || {
        let chunk = vec![2u8; 64 * 1024];
        let r = loop {
            if let Err(e) = (&c).write(&chunk) {
                break e.kind();
            }
        };
        tx.send(r).unwrap();
    });
    wait_parked(&s, "the writer parks on a full connection");
    clone.shutdown(Shutdown::Write).unwrap();
    assert_eq!(recv(&rx, "the parked writer wakes"), ErrorKind::BrokenPipe);
    s.shutdown();
}

#[test]
fn a_peer_that_closes_wakes_a_parked_reader_with_end_of_stream() {
    let s = sched("peer-close", 1);
    let (c, server_side) = pair();
    let (tx, rx) = mpsc::channel();
    s.spawn(move || {
        let mut c = c;
        let mut buf = [0u8; 16];
        tx.send(c.read(&mut buf).map_err(|e| e.kind())).unwrap();
    });
    wait_parked(&s, "the reader parks");
    drop(server_side);
    assert_eq!(recv(&rx, "the parked reader wakes"), Ok(0));
    s.shutdown();
}

/// The peer resets the connection (`SO_LINGER` 0, then close): a task
/// parked reading wakes with `ConnectionReset`.
#[test]
fn a_peer_that_resets_wakes_a_parked_reader_with_connection_reset() {
    let s = sched("peer-rst", 1);
    let (c, server_side) = pair();
    let (tx, rx) = mpsc::channel();
    s.spawn(move || {
        let mut c = c;
        tx.send(c.read(&mut [0u8; 16]).map_err(|e| e.kind()))
            .unwrap();
    });
    wait_parked(&s, "the reader parks");
    socket2::SockRef::from(&server_side)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(server_side);
    assert_eq!(
        recv(&rx, "the parked reader wakes"),
        Err(ErrorKind::ConnectionReset)
    );
    s.shutdown();
}

/// A task parked writing into a full connection wakes with an error when
/// the peer goes away, instead of waiting for room that never comes.
#[test]
fn a_writer_parked_on_a_full_connection_wakes_with_an_error_when_the_peer_closes() {
    let s = sched("peer-gone-w", 1);
    let (c, server_side) = pair();
    let (tx, rx) = mpsc::channel();
    s.spawn(move || {
        let chunk = vec![9u8; 64 * 1024];
        let r = loop {
            if let Err(e) = (&c).write(&chunk) {
                break e.kind();
            }
        };
        tx.send(r).unwrap();
    });
    wait_parked(&s, "the writer parks on a full connection");
    // Unread data makes the close a reset.
    drop(server_side);
    let kind = recv(&rx, "the parked writer wakes");
    assert!(
        matches!(kind, ErrorKind::ConnectionReset | ErrorKind::BrokenPipe),
        "{kind:?}"
    );
    s.shutdown();
}

// ------------------------------------------------------------ connect and bind errors

/// An address nobody listens on: a port bound and then closed.
fn closed_port() -> SocketAddr {
    let (l, a) = listener();
    drop(l);
    a
}

#[test]
fn connecting_to_a_closed_port_is_connection_refused_in_a_task_and_on_a_thread() {
    let s = sched("refused", 1);
    let a = closed_port();
    let in_task = s.spawn(move || {
        (
            TcpStream::connect(a).map(drop).map_err(|e| e.kind()),
            TcpStream::connect_timeout(&a, Duration::from_secs(5))
                .map(drop)
                .map_err(|e| e.kind()),
        )
    });
    assert_eq!(
        in_task.join().unwrap(),
        (
            Err(ErrorKind::ConnectionRefused),
            Err(ErrorKind::ConnectionRefused)
        )
    );
    let e = TcpStream::connect(a).map(drop).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
    s.shutdown();
}

/// `connect_timeout` to a listener whose accept queue is full: Linux drops
/// the SYNs (the client retransmits after a second), so the connect hangs
/// until the timeout. Loopback has no black hole; a full backlog is one.
/// Returns `None` when this kernel does not behave so.
fn connect_timeout_to_a_full_backlog(s: Option<&Scheduler>) -> Option<(ErrorKind, Duration)> {
    use socket2::{Domain, Socket, Type};
    let l = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    l.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    l.listen(0).unwrap();
    let addr = l.local_addr().unwrap().as_socket().unwrap();
    let timeout = Duration::from_millis(200);
    let attempt = move || {
        let mut queued = Vec::new();
        for _ in 0..16 {
            let t = Instant::now();
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(c) => queued.push(c),
                Err(e) => return Some((e.kind(), t.elapsed())),
            }
        }
        None
    };
    let r = match s {
        Some(s) => s.spawn(attempt).join().unwrap(),
        None => attempt(),
    };
    drop(l);
    r
}

#[test]
fn connect_timeout_to_a_listener_with_a_full_backlog_times_out() {
    let s = sched("cto", 1);
    for (who, r) in [
        ("task", connect_timeout_to_a_full_backlog(Some(&s))),
        ("thread", connect_timeout_to_a_full_backlog(None)),
    ] {
        match r {
            Some((kind, took)) => {
                assert_eq!(kind, ErrorKind::TimedOut, "{who}");
                assert!(took >= Duration::from_millis(200), "{who}: early, {took:?}");
            }
            None => {
                eprintln!("{who}: a full backlog still accepted 16 connects; not reproducible here")
            }
        }
    }
    s.shutdown();
}

#[test]
fn a_bad_address_string_is_invalid_input() {
    let s = sched("badaddr", 1);
    let kinds = s
        .spawn(|| {
            let mut kinds = Vec::new();
            for bad in [
                "not an address",
                "127.0.0.1",
                "127.0.0.1:99999",
                "localhost:port",
            ] {
                kinds.push(TcpStream::connect(bad).map(drop).unwrap_err().kind());
                kinds.push(TcpListener::bind(bad).map(drop).unwrap_err().kind());
                kinds.push(
                    gofer::net::UdpSocket::bind(bad)
                        .map(drop)
                        .unwrap_err()
                        .kind(),
                );
            }
            let none: &[SocketAddr] = &[];
            kinds.push(TcpStream::connect(none).map(drop).unwrap_err().kind());
            kinds.push(TcpListener::bind(none).map(drop).unwrap_err().kind());
            let u = gofer::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            kinds.push(u.send_to(b"x", "nowhere").unwrap_err().kind());
            kinds.push(u.send_to(b"x", none).unwrap_err().kind());
            kinds
        })
        .join()
        .unwrap();
    assert!(
        kinds.iter().all(|k| *k == ErrorKind::InvalidInput),
        "{kinds:?}"
    );
    s.shutdown();
}

#[test]
fn binding_an_address_in_use_is_addr_in_use() {
    let (l, a) = listener();
    let e = TcpListener::bind(a).map(drop).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddrInUse);
    // A std listener holding the port counts too.
    let std_l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let e = TcpListener::bind(std_l.local_addr().unwrap())
        .map(drop)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddrInUse);
    let u = gofer::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let e = gofer::net::UdpSocket::bind(u.local_addr().unwrap())
        .map(drop)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddrInUse);
    drop(l);
}

// ------------------------------------------------------------ many acceptors

const ACCEPTORS: usize = 8;
const CONNECTIONS: usize = 2000;

/// `ACCEPTORS` tasks accept on the listeners `make` hands them;
/// `CONNECTIONS` client tasks connect and send `c` and their number, then
/// one client per acceptor sends `q` (the acceptor that takes it stops).
/// Every connection must be accepted exactly once: the numbers accepted are
/// exactly the clients', none twice. (Not their addresses: on loopback the
/// kernel may give a closed client's port to a later one, the server's
/// side of the old connection being in TIME_WAIT.)
fn every_connection_accepted_exactly_once(name: &str, make: impl Fn() -> Acceptor) {
    let s = Scheduler::builder()
        .min_threads(2)
        .max_threads(2)
        .name(name)
        .build()
        .unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let acceptors: Vec<_> = (0..ACCEPTORS)
        .map(|_| {
            let l = make();
            let accepted = accepted.clone();
            s.spawn(move || {
                let mut peers = Vec::new();
                loop {
                    let (mut c, _) = l.get().accept().expect("accept");
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let mut b = [0u8; 1];
                    c.read_exact(&mut b).expect("the client's byte");
                    if b[0] == b'q' {
                        return peers;
                    }
                    let mut n = [0u8; 4];
                    c.read_exact(&mut n).expect("the client's number");
                    peers.push(u32::from_le_bytes(n));
                }
            })
        })
        .collect();
    let addr = make().get().local_addr().unwrap();
    let clients: Vec<_> = (0..CONNECTIONS)
        .map(|i| {
            s.spawn(move || {
                let mut c = TcpStream::connect(addr).expect("connect");
                let mut msg = [b'c'; 5];
                msg[1..].copy_from_slice(&(i as u32).to_le_bytes());
                c.write_all(&msg).unwrap();
                // Keep the connection until the acceptor has read it.
                let _ = c.read(&mut [0u8; 1]);
                i as u32
            })
        })
        .collect();
    let mut sent = HashSet::new();
    for c in clients {
        sent.insert(c.join().expect("client"));
    }
    let quits: Vec<_> = (0..ACCEPTORS)
        .map(|_| {
            let mut q = std::net::TcpStream::connect(addr).unwrap();
            q.write_all(b"q").unwrap();
            q
        })
        .collect();
    let mut got = HashSet::new();
    let mut total = 0;
    for a in acceptors {
        for p in a.join().expect("acceptor") {
            total += 1;
            assert!(got.insert(p), "{p} accepted twice");
        }
    }
    drop(quits);
    assert_eq!(total, CONNECTIONS);
    assert_eq!(got, sent, "the accepted peers are exactly the clients");
    assert_eq!(accepted.load(Ordering::SeqCst), CONNECTIONS + ACCEPTORS);
    s.shutdown();
}

/// A listener handed to one acceptor: a clone of its own, or a share of
/// one listener.
enum Acceptor {
    Own(TcpListener),
    Shared(Arc<TcpListener>),
}

impl Acceptor {
    fn get(&self) -> &TcpListener {
        match self {
            Acceptor::Own(l) => l,
            Acceptor::Shared(l) => l,
        }
    }
}

#[test]
fn acceptors_on_clones_of_one_listener_accept_every_connection_exactly_once() {
    let (l, _) = listener();
    every_connection_accepted_exactly_once("acc-clone", || {
        Acceptor::Own(l.try_clone().expect("try_clone"))
    });
}

#[test]
fn acceptors_sharing_one_listener_accept_every_connection_exactly_once() {
    let (l, _) = listener();
    let l = Arc::new(l);
    every_connection_accepted_exactly_once("acc-arc", || Acceptor::Shared(l.clone()));
}

/// Shutting a listening socket down (there is no `shutdown` on a listener,
/// so through `libc`) makes a parked `accept` return an error.
#[test]
fn shutting_down_a_listener_wakes_its_parked_acceptors() {
    use std::os::fd::AsRawFd;
    let s = sched("lshut", 1);
    let (l, _) = listener();
    let l = Arc::new(l);
    let (tx, rx) = mpsc::channel();
    for _ in 0..3 {
        let (l, tx) = (l.clone(), tx.clone());
        s.spawn(move || tx.send(l.accept().map(drop).map_err(|e| e.kind())).unwrap());
    }
    wait_parked(&s, "the acceptors park");
    // SAFETY: shutdown on a descriptor `l` keeps open.
    let r = unsafe { libc::shutdown(l.as_raw_fd(), libc::SHUT_RDWR) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    for _ in 0..3 {
        let r = recv(&rx, "a parked acceptor wakes");
        assert!(r.is_err(), "accept on a shut-down listener gave {r:?}");
    }
    s.shutdown();
}

// ------------------------------------------------------------ sharing, non-blocking

/// `Read` and `Write` for `&TcpStream`: a reader task and a writer task on
/// one connection, against an echo on the other end.
#[test]
fn a_reader_task_and_a_writer_task_share_one_connection() {
    let s = sched("share", 2);
    let (c, srv) = pair();
    s.spawn(move || {
        let mut srv = srv;
        let mut buf = [0u8; 4096];
        loop {
            match srv.read(&mut buf).expect("echo read") {
                0 => return,
                k => srv.write_all(&buf[..k]).expect("echo write"),
            }
        }
    });
    const BYTES: usize = 1 << 20;
    let c = Arc::new(c);
    let writer = {
        let c = c.clone();
        s.spawn(move || {
            let data: Vec<u8> = (0..BYTES).map(|i| (i % 251) as u8).collect();
            (&*c).write_all(&data).expect("write");
            c.shutdown(Shutdown::Write).expect("half-close");
        })
    };
    let reader = s.spawn(move || {
        let mut got = Vec::new();
        (&*c).read_to_end(&mut got).expect("read");
        got
    });
    writer.join().unwrap();
    let got = reader.join().unwrap();
    assert_eq!(got.len(), BYTES);
    assert!(got.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
    s.shutdown();
}

#[test]
fn set_nonblocking_gives_would_block_in_a_task_and_on_a_thread() {
    let s = sched("nonblock", 1);
    let run = || {
        let (l, _) = listener();
        l.set_nonblocking(true).unwrap();
        let accept = l.accept().map(drop).map_err(|e| e.kind());
        let (c, srv) = pair();
        c.set_nonblocking(true).unwrap();
        srv.set_nonblocking(true).unwrap();
        let read = (&c).read(&mut [0u8; 8]).map_err(|e| e.kind());
        // Fill the connection: a write must come to WouldBlock.
        let chunk = vec![1u8; 64 * 1024];
        let mut sent = 0;
        let write = loop {
            match (&c).write(&chunk) {
                Ok(k) => sent += k,
                Err(e) => break e.kind(),
            }
        };
        assert!(sent > 0);
        // Back to blocking: a read that has data proceeds.
        c.set_nonblocking(false).unwrap();
        let mut srv_read = [0u8; 8];
        srv.set_nonblocking(false).unwrap();
        let n = (&srv).read(&mut srv_read).unwrap();
        (accept, read, write, n)
    };
    let expect = (
        Err(ErrorKind::WouldBlock),
        Err(ErrorKind::WouldBlock),
        ErrorKind::WouldBlock,
        8,
    );
    assert_eq!(run(), expect, "on a thread");
    assert_eq!(s.spawn(run).join().unwrap(), expect, "in a task");
    s.shutdown();
}

/// The same switch on a socket already registered with the reactor (a
/// task waited on it): `WouldBlock` comes back instead of a wait.
#[test]
fn set_nonblocking_gives_would_block_on_a_socket_a_task_waited_on() {
    let s = sched("nonblock-reg", 1);
    let (c, mut srv) = pair();
    let (go_tx, go_rx) = gofer::chan::bounded::<()>(1);
    let (tx, rx) = mpsc::channel();
    let h = s.spawn(move || {
        let mut b = [0u8; 1];
        (&c).read_exact(&mut b).unwrap(); // parks: registers the socket
        tx.send(()).unwrap();
        go_rx.recv().unwrap();
        c.set_nonblocking(true).unwrap();
        (&c).read(&mut b).map_err(|e| e.kind())
    });
    wait_parked(&s, "the reader parks");
    srv.write_all(b"x").unwrap();
    recv(&rx, "the reader read");
    go_tx.send(()).unwrap();
    assert_eq!(h.join().unwrap(), Err(ErrorKind::WouldBlock));
    s.shutdown();
}

#[test]
fn socket_options_and_addresses_read_back() {
    let (c, srv) = pair();
    assert_eq!(c.peer_addr().unwrap(), srv.local_addr().unwrap());
    assert_eq!(srv.peer_addr().unwrap(), c.local_addr().unwrap());
    c.set_nodelay(true).unwrap();
    assert!(c.nodelay().unwrap());
    c.set_ttl(42).unwrap();
    assert_eq!(c.ttl().unwrap(), 42);
    assert!(c.take_error().unwrap().is_none());
    // Every socket is close-on-exec, accepted ones too.
    use std::os::fd::AsRawFd;
    for fd in [c.as_raw_fd(), srv.as_raw_fd()] {
        // SAFETY: fcntl on descriptors the streams keep open.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert!(
            flags & libc::FD_CLOEXEC != 0,
            "fd {fd} is inherited by exec"
        );
    }
    // into_std and back keeps the connection.
    let std_c = c.into_std();
    let c = TcpStream::from(std_c);
    (&c).write_all(b"ok").unwrap();
    let mut b = [0u8; 2];
    (&srv).read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ok");
}

// ------------------------------------------------------------ fairness

/// A task whose socket never makes it wait (the data, or the connections,
/// are already there) still lets the other tasks of its thread run: its
/// operations yield the thread now and then. On one thread with no
/// Dispatcher, nothing else would ever run it.
#[test]
fn an_acceptor_with_a_deep_queue_lets_other_tasks_run() {
    let s = sched("fair-acc", 1);
    let (l, addr) = listener();
    const QUEUED: usize = 1000;
    // Connections complete in the kernel before anyone accepts them.
    let clients: Vec<_> = (0..QUEUED)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect();
    let seen = s
        .spawn(move || {
            let accepted = Arc::new(AtomicUsize::new(0));
            // Queued right here, behind the acceptor.
            let witness = {
                let accepted = accepted.clone();
                gofer::spawn(move || accepted.load(Ordering::SeqCst))
            };
            let mut conns = Vec::new();
            for _ in 0..QUEUED {
                conns.push(l.accept().expect("accept").0);
                accepted.fetch_add(1, Ordering::SeqCst);
            }
            witness.join().unwrap()
        })
        .join()
        .unwrap();
    assert!(
        seen < QUEUED,
        "another task ran only after all {QUEUED} accepts"
    );
    drop(clients);
    s.shutdown();
}

#[test]
fn a_reader_whose_data_is_already_there_lets_other_tasks_run() {
    let s = sched("fair-read", 1);
    let (a, mut b) = gofer::net::unix::UnixStream::pair().unwrap();
    const BYTES: usize = 64 * 1024;
    b.write_all(&[5u8; BYTES]).unwrap();
    let seen = s
        .spawn(move || {
            let read = Arc::new(AtomicUsize::new(0));
            // Queued right here, behind the reader.
            let witness = {
                let read = read.clone();
                gofer::spawn(move || read.load(Ordering::SeqCst))
            };
            let mut buf = [0u8; 16];
            let mut total = 0;
            while total < BYTES {
                total += (&a).read(&mut buf).expect("read");
                read.store(total, Ordering::SeqCst);
            }
            witness.join().unwrap()
        })
        .join()
        .unwrap();
    assert!(
        seen < BYTES,
        "another task ran only after all {BYTES} bytes"
    );
    s.shutdown();
}
