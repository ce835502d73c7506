//! The io_uring driver (`IoDriver::Uring`): stream reads and writes of
//! bound tasks complete through their Processer's ring. Each scenario runs
//! in a child process under a watchdog: a lost completion would hang it.

mod common;
mod net_common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::mpsc;
use std::time::Duration;

use common::in_child;
use gofer::net::{TcpListener, TcpStream};
use gofer::{ConfigError, IoDriver, Scheduler};
use net_common::{raise_nofile_limit, recv, wait_parked};

fn uring_sched(name: &str, threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads)
        .name(name)
        .io_driver(IoDriver::Uring)
        .build()
        .expect("io_uring is available on the test machine")
}

fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback listener");
    let a = l.local_addr().expect("local_addr");
    (l, a)
}

/// Descriptors of this process that are io_uring instances.
fn rings_open() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.to_string_lossy().contains("io_uring"))
        .count()
}

/// A connected pair: a gofer stream (made on a plain thread, used by tasks)
/// and a std peer.
fn pair() -> (TcpStream, std::net::TcpStream) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let a = l.local_addr().expect("addr");
    let s = TcpStream::connect(a).expect("connect");
    let (peer, _) = l.accept().expect("accept");
    (s, peer)
}

#[test]
fn echo_round_trips_go_through_the_rings_with_many_connections() {
    in_child(
        "echo_round_trips_go_through_the_rings_with_many_connections",
        || {
            const CONNS: usize = 300;
            const ROUNDS: usize = 20;
            raise_nofile_limit(4 * CONNS as u64 + 256);
            let s = uring_sched("uring-echo", 2);
            let (l, addr) = listener();
            s.spawn(move || {
                for _ in 0..CONNS {
                    let (mut c, _) = l.accept().expect("accept");
                    gofer::go!(move || {
                        let mut buf = [0u8; 512];
                        loop {
                            match c.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => c.write_all(&buf[..n]).expect("echo write"),
                                Err(e) => panic!("echo read: {e}"),
                            }
                        }
                    });
                }
            });
            let clients: Vec<_> = (0..CONNS)
                .map(|i| {
                    s.spawn(move || {
                        let mut c = TcpStream::connect(addr).expect("connect");
                        let mut back = [0u8; 64];
                        for r in 0..ROUNDS {
                            let msg = format!("{i}:{r}:{}", "x".repeat(i % 32));
                            c.write_all(msg.as_bytes()).expect("client write");
                            c.read_exact(&mut back[..msg.len()]).expect("client read");
                            assert_eq!(&back[..msg.len()], msg.as_bytes());
                        }
                        c.shutdown(Shutdown::Write).expect("shutdown");
                        assert_eq!(c.read(&mut back).expect("end of stream"), 0);
                    })
                })
                .collect();
            for c in clients {
                c.join().expect("client task");
            }
            // Made at first use, one per Processer, kept until shutdown.
            let rings = rings_open();
            assert!((1..=2).contains(&rings), "{rings} rings open, want 1 or 2");
            s.shutdown();
        },
    );
}

#[test]
fn a_read_timeout_returns_would_block_and_the_buffer_is_not_written_after() {
    in_child(
        "a_read_timeout_returns_would_block_and_the_buffer_is_not_written_after",
        || {
            let s = uring_sched("uring-timeout", 1);
            let (stream, mut peer) = pair();
            let (tx, rx) = mpsc::channel();
            let (go_tx, go_rx) = mpsc::channel::<()>();
            let h = s.spawn(move || {
                let mut stream = stream;
                stream
                    .set_read_timeout(Some(Duration::from_millis(50)))
                    .expect("set_read_timeout");
                let mut first = vec![0xAAu8; 4096];
                let e = stream.read(&mut first).expect_err("nothing was sent");
                tx.send(e.kind()).expect("report");
                // The peer writes now; the timed-out read must not take it.
                go_rx.recv().expect("peer wrote");
                stream.set_read_timeout(None).expect("clear timeout");
                let mut second = [0u8; 16];
                let n = stream.read(&mut second).expect("second read");
                assert_eq!(&second[..n], b"hello");
                assert!(first.iter().all(|&b| b == 0xAA), "the timed-out read wrote");
            });
            assert_eq!(recv(&rx, "the read timed out"), ErrorKind::WouldBlock);
            peer.write_all(b"hello").expect("peer write");
            go_tx.send(()).expect("go");
            h.join().expect("reader");
            assert!(rings_open() >= 1, "the read did not go through a ring");
            s.shutdown();
        },
    );
}

#[test]
fn a_cancelled_ring_read_unwinds_only_after_the_kernel_let_go_of_its_buffer() {
    in_child(
        "a_cancelled_ring_read_unwinds_only_after_the_kernel_let_go_of_its_buffer",
        || {
            const ITERS: usize = 300;
            const LEN: usize = 64 << 10;
            let s = uring_sched("uring-cancel", 1);
            for i in 0..ITERS {
                let (stream, mut peer) = pair();
                let stream = std::sync::Arc::new(stream);
                let reader = stream.clone();
                let h = s.spawn(move || {
                    let mut buf = vec![0u8; LEN];
                    let _ = (&*reader).read(&mut buf);
                    unreachable!("nothing is sent before the cancel");
                });
                wait_parked(&s, "the reader parked in its read");
                h.cancel();
                let e = h.join().expect_err("cancelled");
                assert!(e.is_cancelled(), "iteration {i}: {e}");
                // The unwound read's Vec is free: a block of its size is
                // likely this one again. Data sent now must neither land in
                // it nor be lost to a read still armed in the kernel.
                let probe = vec![0x55u8; LEN];
                let data: Vec<u8> = (0..LEN).map(|k| (k % 251) as u8).collect();
                peer.write_all(&data).expect("peer write");
                peer.shutdown(Shutdown::Write).expect("peer shutdown");
                let got = s
                    .spawn(move || {
                        let mut got = Vec::new();
                        (&*stream).read_to_end(&mut got).expect("read the data");
                        got
                    })
                    .join()
                    .expect("second reader");
                assert!(
                    got == data,
                    "iteration {i}: {} of {LEN} bytes came",
                    got.len()
                );
                assert!(
                    probe.iter().all(|&b| b == 0x55),
                    "iteration {i}: freed buffer written"
                );
                assert!(rings_open() >= 1, "the read did not go through a ring");
            }
            s.shutdown();
        },
    );
}

#[test]
fn a_ring_read_sees_the_peer_close_as_end_of_stream() {
    in_child("a_ring_read_sees_the_peer_close_as_end_of_stream", || {
        let s = uring_sched("uring-eof", 1);
        let (mut stream, peer) = pair();
        let h = s.spawn(move || {
            let mut buf = [0u8; 64];
            stream.read(&mut buf).expect("read")
        });
        wait_parked(&s, "the reader parked");
        drop(peer);
        assert_eq!(h.join().expect("reader"), 0);
        s.shutdown();
    });
}

#[test]
fn a_ring_write_to_a_closed_peer_fails_as_on_epoll() {
    in_child("a_ring_write_to_a_closed_peer_fails_as_on_epoll", || {
        let kinds: Vec<ErrorKind> = [IoDriver::Epoll, IoDriver::Uring]
            .into_iter()
            .map(|d| {
                let s = Scheduler::builder()
                    .min_threads(1)
                    .max_threads(1)
                    .io_driver(d)
                    .build()
                    .expect("scheduler");
                let (mut stream, peer) = pair();
                drop(peer);
                let kind = s
                    .spawn(move || {
                        let chunk = [7u8; 1024];
                        for _ in 0..10_000 {
                            if let Err(e) = stream.write(&chunk) {
                                return e.kind();
                            }
                        }
                        panic!("writes to a closed peer kept succeeding");
                    })
                    .join()
                    .expect("writer");
                s.shutdown();
                kind
            })
            .collect();
        assert_eq!(kinds[0], kinds[1], "epoll vs uring");
        assert!(
            matches!(kinds[1], ErrorKind::BrokenPipe | ErrorKind::ConnectionReset),
            "{:?}",
            kinds[1]
        );
    });
}

#[test]
fn shutdown_now_ends_tasks_parked_in_ring_reads() {
    in_child("shutdown_now_ends_tasks_parked_in_ring_reads", || {
        const TASKS: usize = 50;
        let s = uring_sched("uring-shutdown", 2);
        let mut peers = Vec::new();
        for _ in 0..TASKS {
            let (mut stream, peer) = pair();
            peers.push(peer);
            s.spawn(move || {
                let mut buf = vec![0u8; 1024];
                let _ = stream.read(&mut buf);
                unreachable!("nothing is sent");
            });
        }
        wait_parked(&s, "every reader parked");
        s.shutdown_now();
        assert_eq!(s.stats().alive, 0);
        s.shutdown();
        drop(peers);
    });
}

#[test]
fn an_unknown_gofer_io_value_is_a_config_error() {
    in_child("an_unknown_gofer_io_value_is_a_config_error", || {
        std::env::set_var("GOFER_IO", "kqueue");
        let e = Scheduler::builder()
            .build()
            .expect_err("kqueue is no driver");
        assert!(matches!(e, ConfigError::IoDriver { .. }), "{e:?}");
        assert!(e.to_string().contains("epoll"), "{e}");
        std::env::set_var("GOFER_IO", "uring");
        let s = Scheduler::builder().build().expect("uring from GOFER_IO");
        s.shutdown();
    });
}
