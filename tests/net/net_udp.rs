//! UDP sockets inside tasks: ping-pong, connected sockets, receive
//! timeouts that leave the thread free, and errors reported through a
//! parked receive.

use crate::net_common;

use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use gofer::net::UdpSocket;
use net_common::{recv, sched, wait_parked};

fn bound() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").expect("bind a loopback UDP socket")
}

/// Two tasks bounce a counter back and forth, each parking in `recv_from`
/// between datagrams, on one thread and on two.
#[test]
fn udp_ping_pong_between_tasks() {
    for threads in [1, 2] {
        let s = sched("udp-pp", threads);
        let (a, b) = (bound(), bound());
        let a_addr = a.local_addr().unwrap();
        let b_addr = b.local_addr().unwrap();
        const ROUNDS: u32 = 2000;
        let pong = s.spawn(move || {
            let mut buf = [0u8; 8];
            for _ in 0..ROUNDS {
                let (n, from) = b.recv_from(&mut buf).expect("ping");
                assert_eq!((n, from), (4, a_addr));
                let v = u32::from_le_bytes(buf[..4].try_into().unwrap());
                b.send_to(&(v + 1).to_le_bytes(), from).expect("pong");
            }
        });
        let ping = s.spawn(move || {
            let mut v = 0u32;
            let mut buf = [0u8; 8];
            for _ in 0..ROUNDS {
                a.send_to(&v.to_le_bytes(), b_addr).expect("ping");
                let (n, from) = a.recv_from(&mut buf).expect("pong");
                assert_eq!((n, from), (4, b_addr));
                let w = u32::from_le_bytes(buf[..4].try_into().unwrap());
                assert_eq!(w, v + 1);
                v = w;
            }
            v
        });
        assert_eq!(ping.join().unwrap(), ROUNDS);
        pong.join().unwrap();
        s.shutdown();
    }
}

/// `connect` narrows a socket to one peer: `send` and `recv` talk to it,
/// and a datagram from anyone else never reaches a parked `recv`.
#[test]
fn connected_udp_sockets_send_and_receive_only_with_their_peer() {
    let s = sched("udp-conn", 2);
    let (a, b, stranger) = (bound(), bound(), bound());
    let b_addr = b.local_addr().unwrap();
    a.connect(b_addr).unwrap();
    b.connect(a.local_addr().unwrap()).unwrap();
    assert_eq!(a.peer_addr().unwrap(), b_addr);
    let receiver = s.spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        for _ in 0..3 {
            let n = b.recv(&mut buf).expect("recv");
            got.push(buf[..n].to_vec());
        }
        let mut peeked = [0u8; 16];
        let n = b.peek(&mut peeked).expect("peek");
        let m = b.recv(&mut buf).expect("recv after peek");
        assert_eq!(peeked[..n], buf[..m]);
        got.push(buf[..m].to_vec());
        got
    });
    wait_parked(&s, "the receiver parks");
    stranger.send_to(b"noise", b_addr).unwrap();
    let sender = s.spawn(move || {
        for m in [&b"one"[..], b"two", b"three", b"four"] {
            assert_eq!(a.send(m).expect("send"), m.len());
        }
    });
    sender.join().unwrap();
    let got = receiver.join().unwrap();
    assert_eq!(
        got,
        [&b"one"[..], b"two", b"three", b"four"]
            .iter()
            .map(|m| m.to_vec())
            .collect::<Vec<_>>()
    );
    s.shutdown();
}

/// A receive with a read timeout, on one thread: `WouldBlock` (as std's), not earlier
/// than the timeout, and another task ran meanwhile.
#[test]
fn a_udp_receive_timeout_gives_would_block_while_other_tasks_keep_running() {
    let s = sched("udp-to", 1);
    let u = bound();
    let timeout = Duration::from_millis(100);
    u.set_read_timeout(Some(timeout)).unwrap();
    assert_eq!(u.read_timeout().unwrap(), Some(timeout));
    let waiting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let counter = {
        let (waiting, stop) = (waiting.clone(), stop.clone());
        s.spawn(move || {
            let mut during = 0u64;
            while !stop.load(Ordering::SeqCst) {
                if waiting.load(Ordering::SeqCst) {
                    during += 1;
                }
                gofer::yield_now();
            }
            during
        })
    };
    let r = s.spawn(move || {
        waiting.store(true, Ordering::SeqCst);
        let t = Instant::now();
        let r = u.recv_from(&mut [0u8; 8]).map(drop).map_err(|e| e.kind());
        let took = t.elapsed();
        waiting.store(false, Ordering::SeqCst);
        stop.store(true, Ordering::SeqCst);
        (r, took)
    });
    let (r, took) = r.join().unwrap();
    assert_eq!(r, Err(ErrorKind::WouldBlock));
    assert!(took >= timeout, "timed out early, after {took:?}");
    assert!(counter.join().unwrap() > 0, "no other task ran meanwhile");
    s.shutdown();
}

/// A connected socket whose peer's port is closed: the ICMP "port
/// unreachable" comes back as an error on the socket, and a task parked
/// in `recv` wakes with `ConnectionRefused` instead of waiting for ever.
#[test]
fn a_parked_connected_receive_wakes_with_connection_refused_when_the_peer_is_gone() {
    let s = sched("udp-refused", 1);
    let gone = bound();
    let gone_addr = gone.local_addr().unwrap();
    drop(gone);
    let u = Arc::new(bound());
    u.connect(gone_addr).unwrap();
    let (tx, rx) = mpsc::channel();
    let u2 = u.clone();
    s.spawn(move || {
        tx.send(u2.recv(&mut [0u8; 8]).map(drop).map_err(|e| e.kind()))
            .unwrap();
    });
    wait_parked(&s, "the receiver parks");
    // From outside the task: the send succeeds, the error comes back async.
    u.send(b"anyone?").unwrap();
    assert_eq!(
        recv(&rx, "the parked receive wakes"),
        Err(ErrorKind::ConnectionRefused)
    );
    s.shutdown();
}

/// Many client tasks, each with its own socket, against one echo task:
/// every datagram is answered to its sender, and the server sees each
/// exactly once (each client waits for its answer before the next, so
/// loopback never overflows a receive buffer).
#[test]
fn many_client_tasks_against_one_udp_echo_task() {
    let s = sched("udp-many", 2);
    let server = bound();
    let to = server.local_addr().unwrap();
    const CLIENTS: u32 = 64;
    const EACH: u32 = 50;
    let echo = s.spawn(move || {
        let mut seen = std::collections::HashSet::new();
        let mut buf = [0u8; 8];
        while seen.len() < (CLIENTS * EACH) as usize {
            let (n, from) = server.recv_from(&mut buf).expect("recv");
            assert_eq!(n, 8);
            assert!(seen.insert(u64::from_le_bytes(buf)), "a datagram twice");
            server.send_to(&buf, from).expect("answer");
        }
        seen.len()
    });
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            s.spawn(move || {
                let u = bound();
                u.connect(to).unwrap();
                let mut buf = [0u8; 8];
                for j in 0..EACH {
                    let v = (u64::from(i) << 32 | u64::from(j)).to_le_bytes();
                    u.send(&v).expect("send");
                    assert_eq!(u.recv(&mut buf).expect("answer"), 8);
                    assert_eq!(buf, v);
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    assert_eq!(echo.join().unwrap(), (CLIENTS * EACH) as usize);
    s.shutdown();
}
