//! gofer's sockets on plain threads block the thread like std's, with the
//! same timeouts; and one socket may be shared between a task and a thread
//! (the task parks through the reactor, the thread waits in `poll`).

use crate::net_common;

use std::io::{ErrorKind, Read, Write};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use gofer::net::unix::{UnixDatagram, UnixListener, UnixStream};
use gofer::net::{TcpListener, TcpStream, UdpSocket};
use net_common::{recv, sched, wait_parked};

/// A TCP echo server and its clients, all on plain threads: `accept`,
/// `connect`, `read` and `write` block the way std's do.
#[test]
fn tcp_on_plain_threads_blocks_like_std() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    const CLIENTS: usize = 8;
    let server = thread::spawn(move || {
        let mut hs = Vec::new();
        for _ in 0..CLIENTS {
            let (mut c, _) = l.accept().expect("accept blocks until a client comes");
            hs.push(thread::spawn(move || {
                let mut buf = [0u8; 4096];
                loop {
                    match c.read(&mut buf).unwrap() {
                        0 => return,
                        n => c.write_all(&buf[..n]).unwrap(),
                    }
                }
            }));
        }
        for h in hs {
            h.join().unwrap();
        }
    });
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            thread::spawn(move || {
                let mut c = TcpStream::connect(addr).unwrap();
                let data = vec![i as u8; 256 * 1024];
                let mut w = c.try_clone().unwrap();
                let data2 = data.clone();
                let writer = thread::spawn(move || {
                    w.write_all(&data2).unwrap();
                    w.shutdown(std::net::Shutdown::Write).unwrap();
                });
                let mut back = Vec::new();
                c.read_to_end(&mut back).unwrap();
                writer.join().unwrap();
                assert_eq!(back, data);
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    server.join().unwrap();
}

/// Timeouts on a plain thread: `WouldBlock`, as std's (`EAGAIN`), never
/// earlier than asked, for TCP, UDP and Unix sockets, reads and writes.
#[test]
fn timeouts_on_plain_threads_give_would_block_like_std() {
    let timeout = Duration::from_millis(100);
    let check = |what: &str, f: &mut dyn FnMut() -> std::io::Result<()>| {
        let t = Instant::now();
        let r = f();
        let took = t.elapsed();
        assert_eq!(
            r.map_err(|e| e.kind()),
            Err(ErrorKind::WouldBlock),
            "{what}"
        );
        assert!(took >= timeout, "{what}: early, after {took:?}");
    };
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (_srv, _) = l.accept().unwrap();
    c.set_read_timeout(Some(timeout)).unwrap();
    c.set_write_timeout(Some(timeout)).unwrap();
    check("tcp read", &mut || (&c).read(&mut [0u8; 4]).map(drop));
    let chunk = vec![0u8; 64 * 1024];
    // Write until the peer's buffers are full and a write has to wait.
    check("tcp write", &mut || loop {
        (&c).write_all(&chunk)?;
    });
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(timeout)).unwrap();
    check("udp recv_from", &mut || {
        u.recv_from(&mut [0u8; 4]).map(drop)
    });
    let (a, _b) = UnixStream::pair().unwrap();
    a.set_read_timeout(Some(timeout)).unwrap();
    check("unix read", &mut || (&a).read(&mut [0u8; 4]).map(drop));
    let (d, _e) = UnixDatagram::pair().unwrap();
    d.set_read_timeout(Some(timeout)).unwrap();
    check("unix recv", &mut || d.recv(&mut [0u8; 4]).map(drop));
}

/// UDP and Unix sockets on plain threads: a receive blocks until data
/// comes from another thread.
#[test]
fn udp_and_unix_on_plain_threads_block_until_data_comes() {
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = u.local_addr().unwrap();
    let sender = thread::spawn(move || {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.send_to(b"udp", to).unwrap();
    });
    let mut buf = [0u8; 8];
    let (n, _) = u.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"udp");
    sender.join().unwrap();

    let path = std::env::temp_dir().join(format!("gofer-{}-thr.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let l = UnixListener::bind(&path).unwrap();
    let p2 = path.clone();
    let client = thread::spawn(move || {
        let mut c = UnixStream::connect(&p2).unwrap();
        c.write_all(b"unix").unwrap();
    });
    let (mut c, _) = l.accept().unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"unix");
    client.join().unwrap();
    std::fs::remove_file(&path).unwrap();
}

/// One connection shared through an `Arc` by a task and a thread: the task
/// reads (and registers the socket with the reactor), the thread writes
/// and then reads too, after the task has.
#[test]
fn a_socket_shared_between_a_task_and_a_thread() {
    let s = sched("share-thr", 1);
    let (mine, mut peer) = UnixStream::pair().unwrap();
    let mine = Arc::new(mine);
    let (tx, rx) = mpsc::channel();
    let m2 = mine.clone();
    let task = s.spawn(move || {
        let mut b = [0u8; 5];
        // Parks through the reactor: the socket gets registered.
        (&*m2).read_exact(&mut b).unwrap();
        tx.send(()).unwrap();
        (&*m2).write_all(b"from-task").unwrap();
        b
    });
    wait_parked(&s, "the task parks reading");
    peer.write_all(b"hello").unwrap();
    assert_eq!(&task.join().unwrap(), b"hello");
    recv(&rx, "the task read");
    let mut b = [0u8; 9];
    peer.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"from-task");
    // Now a thread uses the registered socket: its read waits in poll(2)
    // and is woken by data, not by stale readiness left from the task.
    let m3 = mine.clone();
    let reader = thread::spawn(move || {
        let mut b = [0u8; 6];
        (&*m3).read_exact(&mut b).unwrap();
        b
    });
    peer.write_all(b"thread").unwrap();
    assert_eq!(&reader.join().unwrap(), b"thread");
    // And both at once: a task and a thread each read one half.
    let m4 = mine.clone();
    let task_half = s.spawn(move || {
        let mut b = [0u8; 4];
        (&*m4).read_exact(&mut b).unwrap();
        b
    });
    let m5 = mine.clone();
    let thread_half = thread::spawn(move || {
        let mut b = [0u8; 4];
        (&*m5).read_exact(&mut b).unwrap();
        b
    });
    peer.write_all(b"aaaabbbb").unwrap();
    let mut halves = [task_half.join().unwrap(), thread_half.join().unwrap()];
    halves.sort();
    // Each read takes 4 bytes at a time from one stream; byte order within
    // the halves interleaves only if a reader got a short read, so compare
    // the multiset of bytes.
    let mut all: Vec<u8> = halves.concat();
    all.sort();
    assert_eq!(all, b"aaaabbbb");
    s.shutdown();
}

/// A task's socket handed to a thread once the task is done with it, and
/// back: the std conversions keep the connection and its data.
#[test]
fn sockets_convert_to_and_from_std_and_move_between_a_task_and_a_thread() {
    let s = sched("conv", 1);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let srv = thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).unwrap();
        c.write_all(&b).unwrap();
        c.read_exact(&mut b).unwrap();
        c.write_all(&b).unwrap();
    });
    let std_stream = s
        .spawn(move || {
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(b"ping").unwrap();
            let mut b = [0u8; 4];
            c.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"ping");
            c.into_std()
        })
        .join()
        .unwrap();
    std_stream.set_nonblocking(false).unwrap();
    let mut c = std_stream;
    c.write_all(b"pong").unwrap();
    let mut b = [0u8; 4];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"pong");
    srv.join().unwrap();
    s.shutdown();
}

/// `into_std` gives every socket type back in std's blocking mode: a read
/// (accept, receive) on a plain thread waits for the peer instead of
/// failing with `WouldBlock`, and keeps the read timeout set on the gofer
/// socket; a socket the user set non-blocking stays non-blocking. The same
/// through `OwnedFd`.
#[test]
fn into_std_restores_blocking_mode_for_every_socket_type() {
    use std::os::fd::OwnedFd;
    // Whether `fd` has O_NONBLOCK.
    fn nonblocking(fd: &impl std::os::fd::AsRawFd) -> bool {
        // SAFETY: F_GETFL on an open descriptor.
        let fl = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
        assert!(fl >= 0);
        fl & libc::O_NONBLOCK != 0
    }
    let s = sched("into-std", 1);
    let timeout = Duration::from_millis(100);

    // TCP: the listener and both ends of a connection made inside a task,
    // so that each was registered with the reactor before it is given back.
    let (l, c, srv) = s
        .spawn(move || {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (srv, _) = l.accept().unwrap();
            srv.set_read_timeout(Some(timeout)).unwrap();
            (l, c, srv)
        })
        .join()
        .unwrap();
    let addr = l.local_addr().unwrap();
    let l = l.into_std();
    assert!(!nonblocking(&l), "TcpListener::into_std");
    let connector = thread::spawn(move || std::net::TcpStream::connect(addr).unwrap());
    let (_accepted, _) = l.accept().expect("a blocking accept waits for the client");
    connector.join().unwrap();
    let mut srv = srv.into_std();
    assert!(!nonblocking(&srv), "TcpStream::into_std");
    assert_eq!(
        srv.read_timeout().unwrap(),
        Some(timeout),
        "the timeout is kept"
    );
    let mut c = c;
    let writer = thread::spawn(move || {
        c.write_all(b"late").unwrap();
        c
    });
    let mut b = [0u8; 4];
    srv.read_exact(&mut b)
        .expect("a blocking read waits for the data");
    assert_eq!(&b, b"late");
    let _c = writer.join().unwrap();
    // The kernel's timeout, as std's: `WouldBlock`, after the timeout. The
    // kernel counts it in scheduler ticks from the current one (rounded up
    // to whole ticks when set, but the first tick is partial), so it may
    // end up to one tick early: 4 ms at HZ=250, 10 ms at HZ=100.
    let t = Instant::now();
    assert_eq!(
        srv.read(&mut b).map_err(|e| e.kind()),
        Err(ErrorKind::WouldBlock)
    );
    let took = t.elapsed();
    assert!(
        took >= timeout - Duration::from_millis(10),
        "the kernel's timeout ended the read after {took:?}"
    );

    // UDP.
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = u.local_addr().unwrap();
    let u = u.into_std();
    assert!(!nonblocking(&u), "UdpSocket::into_std");
    let sender = thread::spawn(move || {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.send_to(b"udp", to).unwrap();
    });
    let (n, _) = u.recv_from(&mut b).expect("a blocking receive waits");
    assert_eq!(&b[..n], b"udp");
    sender.join().unwrap();

    // Unix: listener, stream, datagram.
    let path = std::env::temp_dir().join(format!("gofer-{}-intostd.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let ul = UnixListener::bind(&path).unwrap().into_std();
    assert!(!nonblocking(&ul), "UnixListener::into_std");
    let p2 = path.clone();
    let connector = thread::spawn(move || std::os::unix::net::UnixStream::connect(p2).unwrap());
    let (_us, _) = ul.accept().expect("a blocking accept waits");
    connector.join().unwrap();
    std::fs::remove_file(&path).unwrap();
    let (a, b2) = UnixStream::pair().unwrap();
    let mut a = a.into_std();
    assert!(!nonblocking(&a), "UnixStream::into_std");
    let writer = thread::spawn(move || (&b2).write_all(b"unix").map(|_| b2));
    a.read_exact(&mut b).expect("a blocking read waits");
    assert_eq!(&b, b"unix");
    drop(writer.join().unwrap());
    let (d, e) = UnixDatagram::pair().unwrap();
    let d = d.into_std();
    assert!(!nonblocking(&d), "UnixDatagram::into_std");
    let sender = thread::spawn(move || e.send(b"dgrm").map(|_| e));
    let n = d.recv(&mut b).expect("a blocking receive waits");
    assert_eq!(&b[..n], b"dgrm");
    drop(sender.join().unwrap());

    // The user's own non-blocking mode is kept, through into_std and
    // through OwnedFd; OwnedFd otherwise gives a blocking descriptor too.
    let (x, _y) = UnixStream::pair().unwrap();
    x.set_nonblocking(true).unwrap();
    let x = x.into_std();
    assert!(nonblocking(&x), "set_nonblocking(true) is kept");
    assert_eq!(
        (&x).read(&mut b).map_err(|e| e.kind()),
        Err(ErrorKind::WouldBlock)
    );
    let (x, _y) = UdpSocket::bind("127.0.0.1:0").map(|u| (u, ())).unwrap();
    let fd = OwnedFd::from(x);
    assert!(!nonblocking(&fd), "From<UdpSocket> for OwnedFd");
    let (x, _y) = UnixDatagram::pair().unwrap();
    x.set_nonblocking(true).unwrap();
    let fd = OwnedFd::from(x);
    assert!(nonblocking(&fd), "OwnedFd keeps set_nonblocking(true)");
    s.shutdown();
}
