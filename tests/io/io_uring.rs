//! The io_uring driver (`IoDriver::Uring`): the socket operations of
//! bound tasks (stream reads and writes, vectored too, accepts, TCP
//! connects, UDP datagrams, `io::wait_*`) complete through their
//! Processer's ring, with the epoll path's errors and timeouts. Each scenario runs
//! in a child process under a watchdog: a lost completion would hang it.

use crate::common;
use crate::net_common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::mpsc;
use std::time::Duration;

/// Runs a scenario in a child under a watchdog ([`common::in_child`]),
/// never in chaos mode (`GOFER_CHAOS_MIGRATE`): a ring serves only tasks
/// bound to its Processer and chaos mode binds none, so these scenarios,
/// which check that a ring carried the IO, would test nothing there.
fn in_child(test: &str, body: impl FnOnce()) {
    common::in_child_with_env(module_path!(), test, &[("GOFER_CHAOS_MIGRATE", None)], body)
}
use gofer::net::{TcpListener, TcpStream};
use gofer::{ConfigError, IoDriver, Scheduler};
use net_common::{raise_nofile_limit, recv, wait_parked};

/// Runs the task `make` gives for each driver (so each run has its own
/// sockets) on a one-thread scheduler on epoll, then on io_uring; their
/// results, epoll's first.
fn on_both_drivers<T, F>(mut make: impl FnMut(IoDriver) -> F) -> [T; 2]
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    [IoDriver::Epoll, IoDriver::Uring].map(|d| {
        let s = one_thread(d);
        let out = s.spawn(make(d)).join().expect("the task");
        s.shutdown();
        out
    })
}

/// A one-thread scheduler on driver `d`.
fn one_thread(d: IoDriver) -> Scheduler {
    Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .io_driver(d)
        .build()
        .expect("scheduler")
}

fn uring_sched(name: &str, threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads)
        .name(name)
        .io_driver(IoDriver::Uring)
        .build()
        .expect("io_uring is available on the test machine")
}

/// [`uring_sched`] with multishot receive (`GOFER_URING_RECV=multishot`,
/// read once per process: each test is its own child).
fn uring_sched_ms(name: &str, threads: usize) -> Scheduler {
    std::env::set_var("GOFER_URING_RECV", "multishot");
    uring_sched(name, threads)
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
        let kinds = on_both_drivers(|_| {
            let (mut stream, peer) = pair();
            drop(peer);
            move || {
                let chunk = [7u8; 1024];
                for _ in 0..10_000 {
                    if let Err(e) = stream.write(&chunk) {
                        return e.kind();
                    }
                }
                panic!("writes to a closed peer kept succeeding");
            }
        });
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

/// The thread that builds a scheduler with the uring driver is not one the
/// kernel interrupts later: a ring made and closed on a thread adds it to
/// the ring's users, and the ring's teardown, a few milliseconds after
/// the close, runs work on each user that interrupts a blocking call with a
/// timeout (`EINTR`).
#[test]
fn building_a_uring_scheduler_does_not_interrupt_the_builders_next_blocking_call() {
    in_child(
        "building_a_uring_scheduler_does_not_interrupt_the_builders_next_blocking_call",
        || {
            for i in 0..5 {
                let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
                let mut c =
                    std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
                c.set_read_timeout(Some(Duration::from_millis(300)))
                    .expect("timeout");
                let s = uring_sched("uring-builder", 1);
                // Nothing is sent: the read ends by its timeout.
                let mut b = [0u8; 1];
                match c.read(&mut b) {
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    other => panic!("build {i}: the read ended by {other:?}, not its timeout"),
                }
                s.shutdown();
            }
        },
    );
}

/// Bytes waiting in the socket's own receive queue (`FIONREAD`): data a
/// multishot receive has taken into the ring's buffers is no longer there.
fn unread_in_socket(s: &TcpStream) -> usize {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, on an open fd.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::FIONREAD, &mut n) };
    assert_eq!(r, 0, "FIONREAD: {}", std::io::Error::last_os_error());
    n as usize
}

/// The byte at offset `k` of connection `c`'s stream.
fn pattern(c: usize, k: usize) -> u8 {
    (k.wrapping_mul(31).wrapping_add(c * 7) % 251) as u8
}

#[test]
fn after_a_ring_read_the_ring_keeps_receiving_with_no_reader() {
    in_child(
        "after_a_ring_read_the_ring_keeps_receiving_with_no_reader",
        || {
            let s = uring_sched_ms("uring-armed", 1);
            let (stream, mut peer) = pair();
            let stream = std::sync::Arc::new(stream);
            let reader = stream.clone();
            peer.write_all(b"a").expect("peer write");
            let h = s.spawn(move || {
                let mut b = [0u8; 1];
                assert_eq!((&*reader).read(&mut b).expect("first read"), 1);
            });
            h.join().expect("reader");
            // Nobody reads now; the armed entry takes what comes.
            peer.write_all(&[9u8; 3000]).expect("peer write");
            common::wait_until("the ring took the bytes", || unread_in_socket(&stream) == 0);
            let got = s
                .spawn(move || {
                    let mut b = vec![0u8; 5000];
                    let n = (&*stream).read(&mut b).expect("second read");
                    b.truncate(n);
                    b
                })
                .join()
                .expect("reader");
            assert_eq!(got, vec![9u8; 3000]);
            s.shutdown();
        },
    );
}

#[test]
fn multishot_reads_keep_every_byte_in_order_over_many_connections_and_sizes() {
    in_child(
        "multishot_reads_keep_every_byte_in_order_over_many_connections_and_sizes",
        || {
            const CONNS: usize = 200;
            const SIZES: [usize; 8] = [1, 7, 100, 4095, 4096, 4097, 9000, 20000];
            const READS: [usize; 5] = [1, 13, 1000, 4096, 16384];
            raise_nofile_limit(4 * CONNS as u64 + 256);
            let s = uring_sched_ms("uring-sizes", 2);
            let mut hs = Vec::new();
            for c in 0..CONNS {
                let (stream, mut peer) = pair();
                let total: usize = SIZES.iter().sum();
                hs.push(s.spawn(move || {
                    let mut stream = stream;
                    let mut got = Vec::with_capacity(total);
                    let mut i = 0;
                    while got.len() < total {
                        let mut b = vec![0u8; READS[(c + i) % READS.len()]];
                        i += 1;
                        let n = stream.read(&mut b).expect("read");
                        assert!(n > 0, "conn {c}: end of stream after {}", got.len());
                        got.extend_from_slice(&b[..n]);
                    }
                    for (k, &b) in got.iter().enumerate() {
                        assert_eq!(b, pattern(c, k), "conn {c}: byte {k}");
                    }
                    let mut b = [0u8; 8];
                    assert_eq!(stream.read(&mut b).expect("end"), 0, "conn {c}");
                }));
                std::thread::spawn(move || {
                    let mut k = 0;
                    for &n in &SIZES {
                        let chunk: Vec<u8> = (k..k + n).map(|k| pattern(c, k)).collect();
                        k += n;
                        peer.write_all(&chunk).expect("peer write");
                    }
                });
            }
            for h in hs {
                h.join().expect("reader");
            }
            s.shutdown();
        },
    );
}

#[test]
fn an_exhausted_buffer_ring_loses_no_bytes() {
    in_child("an_exhausted_buffer_ring_loses_no_bytes", || {
        // More than the ring's buffers can hold (1,024 of 4 KiB).
        const CONNS: usize = 300;
        const LEN: usize = 24 << 10;
        raise_nofile_limit(4 * CONNS as u64 + 256);
        let s = uring_sched_ms("uring-enobufs", 1);
        let (go_tx, go_rx) = gofer::chan::bounded::<()>(CONNS);
        let mut streams = Vec::new();
        let mut peers = Vec::new();
        let mut hs = Vec::new();
        for c in 0..CONNS {
            let (stream, mut peer) = pair();
            peer.write_all(&[pattern(c, 0)]).expect("peer write");
            let stream = std::sync::Arc::new(stream);
            streams.push(stream.clone());
            peers.push(peer);
            let go = go_rx.clone();
            hs.push(s.spawn(move || {
                let mut b = [0u8; 1];
                // Arms the multishot entry.
                assert_eq!((&*stream).read(&mut b).expect("first read"), 1);
                go.recv().expect("go");
                let mut got = vec![0u8; LEN];
                (&*stream).read_exact(&mut got).expect("the rest");
                for (k, &b) in got.iter().enumerate() {
                    assert_eq!(b, pattern(c, k + 1), "conn {c}: byte {}", k + 1);
                }
            }));
        }
        wait_parked(&s, "every reader armed and parked");
        for (c, peer) in peers.iter_mut().enumerate() {
            let chunk: Vec<u8> = (1..=LEN).map(|k| pattern(c, k)).collect();
            peer.write_all(&chunk).expect("peer write");
        }
        // The ring ran dry: data is left in the sockets.
        let total = CONNS * LEN;
        common::wait_until("the ring took what its buffers hold", || {
            let left: usize = streams.iter().map(|s| unread_in_socket(s)).sum();
            left < total - (2 << 20)
        });
        let left: usize = streams.iter().map(|s| unread_in_socket(s)).sum();
        assert!(left > 0, "every byte fit in the ring: no exhaustion tested");
        for _ in 0..CONNS {
            go_tx.send(()).expect("go");
        }
        for h in hs {
            h.join().expect("reader");
        }
        s.shutdown();
    });
}

#[test]
fn a_read_timeout_while_armed_loses_nothing() {
    in_child("a_read_timeout_while_armed_loses_nothing", || {
        let s = uring_sched_ms("uring-armed-timeout", 1);
        let (stream, mut peer) = pair();
        peer.write_all(b"x").expect("peer write");
        let (tx, rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let h = s.spawn(move || {
            let mut stream = stream;
            let mut b = [0u8; 16];
            assert_eq!(stream.read(&mut b).expect("arming read"), 1);
            stream
                .set_read_timeout(Some(Duration::from_millis(30)))
                .expect("timeout");
            for _ in 0..5 {
                let e = stream.read(&mut b).expect_err("nothing sent");
                assert_eq!(e.kind(), ErrorKind::WouldBlock);
            }
            tx.send(()).expect("report");
            go_rx.recv().expect("peer wrote");
            let n = stream.read(&mut b).expect("read after timeouts");
            assert_eq!(&b[..n], b"hello");
        });
        recv(&rx, "the reads timed out");
        peer.write_all(b"hello").expect("peer write");
        go_tx.send(()).expect("go");
        h.join().expect("reader");
        s.shutdown();
    });
}

#[test]
fn end_of_stream_after_data_comes_after_the_data_and_stays() {
    in_child(
        "end_of_stream_after_data_comes_after_the_data_and_stays",
        || {
            let s = uring_sched_ms("uring-armed-eof", 1);
            let (stream, mut peer) = pair();
            peer.write_all(b"ab").expect("peer write");
            let stream = std::sync::Arc::new(stream);
            let r = stream.clone();
            s.spawn(move || {
                let mut b = [0u8; 1];
                assert_eq!((&*r).read(&mut b).expect("arming read"), 1);
            })
            .join()
            .expect("reader");
            peer.write_all(b"cdef").expect("peer write");
            drop(peer);
            common::wait_until("the ring took the bytes", || unread_in_socket(&stream) == 0);
            let got = s
                .spawn(move || {
                    let mut got = Vec::new();
                    (&*stream).read_to_end(&mut got).expect("read to end");
                    let mut b = [0u8; 4];
                    for _ in 0..3 {
                        assert_eq!((&*stream).read(&mut b).expect("again"), 0);
                    }
                    got
                })
                .join()
                .expect("reader");
            assert_eq!(got, b"bcdef");
            s.shutdown();
        },
    );
}

#[test]
fn dropping_an_armed_socket_with_data_pending_closes_it() {
    in_child(
        "dropping_an_armed_socket_with_data_pending_closes_it",
        || {
            const ITERS: usize = 300;
            let s = uring_sched_ms("uring-armed-drop", 2);
            for i in 0..ITERS {
                let (stream, mut peer) = pair();
                peer.write_all(b"1").expect("peer write");
                let stream = std::sync::Arc::new(stream);
                let r = stream.clone();
                s.spawn(move || {
                    let mut b = [0u8; 1];
                    assert_eq!((&*r).read(&mut b).expect("arming read"), 1);
                })
                .join()
                .expect("reader");
                peer.write_all(&[2u8; 6000]).expect("peer write");
                common::wait_until("the ring took the bytes", || unread_in_socket(&stream) == 0);
                if i % 2 == 0 {
                    // Dropped on a task of the ring's Processer, or of the
                    // other one.
                    s.spawn(move || drop(stream)).join().expect("dropper");
                } else {
                    // Dropped on a plain thread.
                    drop(stream);
                }
                // The kernel let the socket go: the peer sees it closed.
                peer.set_read_timeout(Some(Duration::from_secs(20)))
                    .expect("timeout");
                let mut b = [0u8; 16];
                match peer.read(&mut b) {
                    Ok(0) => {}
                    Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
                    other => panic!("iteration {i}: the socket stayed open: {other:?}"),
                }
            }
            s.shutdown();
        },
    );
}

#[test]
fn shutdown_now_with_armed_sockets_then_their_drop() {
    in_child("shutdown_now_with_armed_sockets_then_their_drop", || {
        const TASKS: usize = 50;
        let s = uring_sched_ms("uring-armed-shutdown", 2);
        let mut peers = Vec::new();
        let mut streams = Vec::new();
        for _ in 0..TASKS {
            let (stream, mut peer) = pair();
            peer.write_all(b"1").expect("peer write");
            let stream = std::sync::Arc::new(stream);
            streams.push(stream.clone());
            peers.push(peer);
            s.spawn(move || {
                let mut b = [0u8; 1];
                assert_eq!((&*stream).read(&mut b).expect("arming read"), 1);
                let _ = (&*stream).read(&mut b);
                unreachable!("nothing more is sent before the shutdown");
            });
        }
        wait_parked(&s, "every reader parked on its armed socket");
        s.shutdown_now();
        assert_eq!(s.stats().alive, 0);
        s.shutdown();
        // The rings are gone, their entries cancelled: a plain thread
        // reads what comes now through the readiness path.
        for p in &mut peers {
            p.write_all(&[3u8; 100]).expect("peer write");
        }
        for st in &streams {
            let mut b = [0u8; 200];
            st.set_read_timeout(Some(Duration::from_secs(20)))
                .expect("timeout");
            let mut got = 0;
            while got < 100 {
                got += (&**st).read(&mut b).expect("read after shutdown");
            }
        }
        drop(streams);
        drop(peers);
    });
}

/// A completion for a Processer's ring does not interrupt a blocking call
/// with a timeout that a task of that Processer makes meanwhile (the
/// kernel's work for the completion waits for the ring's next enter).
/// Without the `hooks` feature: with it, std's read in a task is a task
/// wait, not a blocking call.
#[cfg(not(feature = "hooks"))]
#[test]
fn a_completion_does_not_interrupt_a_blocking_call_on_the_rings_thread() {
    in_child(
        "a_completion_does_not_interrupt_a_blocking_call_on_the_rings_thread",
        || {
            let s = uring_sched("uring-intr", 1);
            let (mut stream, mut peer) = pair();
            let reader = s.spawn(move || {
                let mut buf = [0u8; 64];
                stream.read(&mut buf).expect("read")
            });
            wait_parked(&s, "the ring reader parked");
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            let c = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
            let (tx, rx) = mpsc::channel();
            let blocker = s.spawn(move || {
                let mut c = c;
                c.set_read_timeout(Some(Duration::from_millis(1500)))
                    .expect("timeout");
                // SAFETY: a plain system call.
                tx.send(unsafe { libc::gettid() }).expect("send");
                let mut b = [0u8; 1];
                c.read(&mut b).map_err(|e| e.kind())
            });
            let tid = rx.recv().expect("blocker started");
            // The blocker's thread is in its read: `recvfrom`, the system
            // call std's read makes.
            let syscall = format!("/proc/self/task/{tid}/syscall");
            common::wait_until("the blocker is in its read", || {
                std::fs::read_to_string(&syscall)
                    .is_ok_and(|s| s.starts_with(&format!("{} ", libc::SYS_recvfrom)))
            });
            peer.write_all(b"x").expect("peer write");
            // Nothing is sent to the blocker: its read ends by its timeout.
            let r = blocker.join().expect("blocker");
            assert_eq!(
                r,
                Err(ErrorKind::WouldBlock),
                "the blocking read ended early"
            );
            assert_eq!(reader.join().expect("reader"), 1);
            drop(l);
            s.shutdown();
        },
    );
}

/// Whether any epoll instance of this process watches the file `fd` is
/// open on (under any descriptor number: a duplicate counts), from the
/// `tfd` lines of the epoll descriptors' fdinfo, which name the watched
/// file's inode.
fn watched_by_epoll(fd: std::os::fd::RawFd) -> bool {
    // SAFETY: fstat into a zeroed stat on a descriptor the caller holds.
    let ino = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        assert_eq!(libc::fstat(fd, &mut st), 0, "fstat");
        st.st_ino
    };
    let want = format!("ino:{ino:x}");
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| {
            let e = e.ok()?;
            let t = std::fs::read_link(e.path()).ok()?;
            t.to_string_lossy()
                .contains("eventpoll")
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .filter_map(|n| std::fs::read_to_string(format!("/proc/self/fdinfo/{n}")).ok())
        .any(|info| {
            info.lines()
                .filter(|l| l.starts_with("tfd:"))
                .any(|l| l.split_whitespace().any(|w| w == want))
        })
}

fn fd_flags(fd: std::os::fd::RawFd) -> (bool, bool) {
    // SAFETY: fcntl queries on a descriptor the caller holds.
    let (fl, fdfl) = unsafe {
        (
            libc::fcntl(fd, libc::F_GETFL),
            libc::fcntl(fd, libc::F_GETFD),
        )
    };
    assert!(fl >= 0 && fdfl >= 0, "fcntl");
    (fl & libc::O_NONBLOCK != 0, fdfl & libc::FD_CLOEXEC != 0)
}

#[test]
fn accept_goes_through_the_ring_and_gives_what_the_epoll_path_gives() {
    in_child(
        "accept_goes_through_the_ring_and_gives_what_the_epoll_path_gives",
        || {
            use std::os::fd::AsRawFd;
            let s = uring_sched("uring-accept", 1);
            let (l, addr) = listener();
            let lfd = l.as_raw_fd();
            let h = s.spawn(move || {
                let (mut c, peer) = l.accept().expect("accept");
                let flags = fd_flags(c.as_raw_fd());
                let mut b = [0u8; 1];
                c.read_exact(&mut b).expect("read");
                c.write_all(&b).expect("write");
                (peer, flags)
            });
            wait_parked(&s, "the acceptor parked");
            assert!(rings_open() >= 1, "the accept did not go through a ring");
            assert!(
                !watched_by_epoll(lfd),
                "the accept waits on the epoll reactor"
            );
            let mut c = std::net::TcpStream::connect(addr).expect("connect");
            c.write_all(b"x").expect("client write");
            let mut b = [0u8; 1];
            c.read_exact(&mut b).expect("client read");
            assert_eq!(&b, b"x");
            let (peer, (nonblocking, cloexec)) = h.join().expect("acceptor");
            assert_eq!(peer, c.local_addr().expect("local_addr"));
            assert!(nonblocking && cloexec, "accepted socket's flags");
            s.shutdown();
        },
    );
}

#[test]
fn a_cancelled_ring_accept_leaves_the_next_connection_queued() {
    in_child(
        "a_cancelled_ring_accept_leaves_the_next_connection_queued",
        || {
            let s = uring_sched("uring-accept-cancel", 1);
            let (l, addr) = listener();
            let l = std::sync::Arc::new(l);
            for i in 0..50 {
                let acceptor = l.clone();
                let h = s.spawn(move || {
                    let _ = acceptor.accept();
                    unreachable!("nobody connects before the cancel");
                });
                wait_parked(&s, "the acceptor parked");
                h.cancel();
                let e = h.join().expect_err("cancelled");
                assert!(e.is_cancelled(), "iteration {i}: {e}");
                // The cancelled accept is gone from the kernel: the connection
                // made now waits in the queue for the next accept.
                let c = std::net::TcpStream::connect(addr).expect("connect");
                let acceptor = l.clone();
                let peer = s
                    .spawn(move || acceptor.accept().expect("accept").1)
                    .join()
                    .expect("second acceptor");
                assert_eq!(peer, c.local_addr().expect("local_addr"), "iteration {i}");
            }
            assert!(rings_open() >= 1, "the accept did not go through a ring");
            s.shutdown();
        },
    );
}

#[test]
fn a_non_blocking_listener_says_would_block_under_the_uring_driver() {
    in_child(
        "a_non_blocking_listener_says_would_block_under_the_uring_driver",
        || {
            let s = uring_sched("uring-accept-nb", 1);
            let (l, _) = listener();
            l.set_nonblocking(true).expect("set_nonblocking");
            let kind = s
                .spawn(move || l.accept().expect_err("nobody connected").kind())
                .join()
                .expect("acceptor");
            assert_eq!(kind, ErrorKind::WouldBlock);
            s.shutdown();
        },
    );
}

#[test]
fn unix_accept_goes_through_the_ring() {
    in_child("unix_accept_goes_through_the_ring", || {
        use gofer::net::unix::UnixListener;
        use std::os::fd::AsRawFd;
        let dir = std::env::temp_dir().join(format!("gofer-uring-ux-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("sock");
        let s = uring_sched("uring-ux-accept", 1);
        let l = UnixListener::bind(&path).expect("bind");
        let lfd = l.as_raw_fd();
        let h = s.spawn(move || {
            let (mut c, peer) = l.accept().expect("accept");
            let mut b = [0u8; 1];
            c.read_exact(&mut b).expect("read");
            (b[0], peer.is_unnamed())
        });
        wait_parked(&s, "the acceptor parked");
        assert!(rings_open() >= 1, "the accept did not go through a ring");
        assert!(
            !watched_by_epoll(lfd),
            "the accept waits on the epoll reactor"
        );
        let mut c = std::os::unix::net::UnixStream::connect(&path).expect("connect");
        c.write_all(b"u").expect("write");
        assert_eq!(h.join().expect("acceptor"), (b'u', true));
        s.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn wait_readable_goes_through_a_poll_entry_and_times_out_as_on_epoll() {
    in_child(
        "wait_readable_goes_through_a_poll_entry_and_times_out_as_on_epoll",
        || {
            use std::os::fd::AsRawFd;
            let kinds = on_both_drivers(|_| {
                let (a, b) = std::os::unix::net::UnixStream::pair().expect("pair");
                move || {
                    let kind = gofer::io::wait_readable(&a, Some(Duration::from_millis(30)))
                        .expect_err("nothing was sent")
                        .kind();
                    drop(b);
                    kind
                }
            });
            assert_eq!(kinds[0], kinds[1], "epoll vs uring");
            assert_eq!(kinds[1], ErrorKind::TimedOut);

            let s = uring_sched("uring-wait", 1);
            let (a, mut b) = std::os::unix::net::UnixStream::pair().expect("pair");
            let afd = a.as_raw_fd();
            let (tx, rx) = mpsc::channel();
            let h = s.spawn(move || {
                gofer::io::wait_readable(&a, None).expect("readable");
                tx.send(()).expect("report");
                // Writable at once: a poll entry that completes at its turn.
                gofer::io::wait_writable(&a, Some(Duration::from_secs(5))).expect("writable");
                a
            });
            wait_parked(&s, "the waiter parked");
            assert!(rings_open() >= 1, "the wait did not go through a ring");
            assert!(!watched_by_epoll(afd), "the wait is on the epoll reactor");
            b.write_all(b"r").expect("write");
            recv(&rx, "the wait ended");
            drop(h.join().expect("waiter"));
            s.shutdown();
        },
    );
}

#[test]
fn a_cancelled_ring_wait_unwinds() {
    in_child("a_cancelled_ring_wait_unwinds", || {
        let s = uring_sched("uring-wait-cancel", 1);
        let (a, b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let h = s.spawn(move || {
            let _ = gofer::io::wait_readable(&a, None);
            unreachable!("nothing is sent before the cancel");
        });
        wait_parked(&s, "the waiter parked");
        assert!(rings_open() >= 1, "the wait did not go through a ring");
        h.cancel();
        assert!(h.join().expect_err("cancelled").is_cancelled());
        drop(b);
        s.shutdown();
    });
}

#[test]
fn connect_goes_through_the_ring_and_fails_as_on_epoll() {
    in_child(
        "connect_goes_through_the_ring_and_fails_as_on_epoll",
        || {
            // A port with no listener: bound, then closed.
            let closed = {
                let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
                l.local_addr().expect("addr")
            };
            let kinds = on_both_drivers(|_| {
                move || {
                    TcpStream::connect_timeout(&closed, Duration::from_secs(5))
                        .expect_err("nobody listens")
                        .kind()
                }
            });
            assert_eq!(kinds[0], kinds[1], "epoll vs uring");
            assert_eq!(kinds[1], ErrorKind::ConnectionRefused);

            let s = uring_sched("uring-connect", 1);
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            let addr = l.local_addr().expect("addr");
            // Only the connect is made in a task: a ring that exists after it
            // was made for it.
            let c = s
                .spawn(move || TcpStream::connect(addr).expect("connect"))
                .join()
                .expect("connector");
            assert!(rings_open() >= 1, "the connect did not go through a ring");
            assert_eq!(c.peer_addr().expect("peer_addr"), addr);
            let (_, peer) = l.accept().expect("accept");
            assert_eq!(c.local_addr().expect("local_addr"), peer);
            s.shutdown();
        },
    );
}

#[test]
fn a_ring_connect_times_out_as_on_epoll() {
    in_child("a_ring_connect_times_out_as_on_epoll", || {
        // A listener whose accept queue is full and never drained: the
        // kernel drops further SYNs, so a connect to it stays in progress.
        let l = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        l.bind(&"127.0.0.1:0".parse::<SocketAddr>().expect("addr").into())
            .expect("bind");
        l.listen(0).expect("listen");
        let addr = l.local_addr().expect("addr").as_socket().expect("inet");
        let mut fillers = Vec::new();
        let stuck = loop {
            match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                Ok(c) => fillers.push(c),
                Err(e) if e.kind() == ErrorKind::TimedOut => break true,
                Err(e) => panic!("filling the queue: {e}"),
            }
            if fillers.len() > 16 {
                break false;
            }
        };
        assert!(stuck, "the accept queue never filled");
        let kinds = on_both_drivers(|d| {
            move || {
                let kind = TcpStream::connect_timeout(&addr, Duration::from_millis(100))
                    .expect_err("the queue is full")
                    .kind();
                if d == IoDriver::Uring {
                    assert!(rings_open() >= 1, "the connect did not go through a ring");
                }
                kind
            }
        });
        assert_eq!(kinds[0], kinds[1], "epoll vs uring");
        assert_eq!(kinds[1], ErrorKind::TimedOut);
    });
}

#[test]
fn datagrams_go_through_the_ring_and_behave_as_on_epoll() {
    in_child(
        "datagrams_go_through_the_ring_and_behave_as_on_epoll",
        || {
            use gofer::net::UdpSocket;
            use std::os::fd::AsRawFd;
            // Per driver: a timed-out recv_from's error, a peek then a
            // receive of a datagram cut to the buffer, an empty datagram,
            // and a connected send and receive.
            type Seen = (ErrorKind, (usize, u8), (usize, u8), usize, Vec<u8>);
            let run = |d: IoDriver| -> Seen {
                let s = one_thread(d);
                let a = UdpSocket::bind("127.0.0.1:0").expect("bind a");
                let b = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind b");
                let (a_addr, b_addr) = (a.local_addr().expect("a"), b.local_addr().expect("b"));
                let afd = a.as_raw_fd();
                let (tx, rx) = mpsc::channel::<()>();
                let h = s.spawn(move || {
                    a.set_read_timeout(Some(Duration::from_millis(30)))
                        .expect("timeout");
                    let timed_out = a.recv_from(&mut [0u8; 8]).expect_err("nothing sent").kind();
                    a.set_read_timeout(None).expect("timeout");
                    tx.send(()).expect("ready");
                    let mut buf = [0u8; 2];
                    let (n, from) = a.peek_from(&mut buf).expect("peek_from");
                    assert_eq!(from, b_addr);
                    let peeked = (n, buf[1]);
                    let (n, from) = a.recv_from(&mut buf).expect("recv_from");
                    assert_eq!(from, b_addr);
                    let got = (n, buf[1]);
                    let (empty, _) = a.recv_from(&mut buf).expect("empty datagram");
                    assert_eq!(a.send_to(b"pong", b_addr).expect("send_to"), 4);
                    a.connect(b_addr).expect("connect");
                    assert_eq!(a.send(b"c").expect("send"), 1);
                    let mut c = [0u8; 8];
                    let n = a.recv(&mut c).expect("recv");
                    (timed_out, peeked, got, empty, c[..n].to_vec())
                });
                recv(&rx, "the first receive timed out");
                wait_parked(&s, "the receiver parked");
                if d == IoDriver::Uring {
                    assert!(rings_open() >= 1, "the receive did not go through a ring");
                    assert!(
                        !watched_by_epoll(afd),
                        "the receive waits on the epoll reactor"
                    );
                }
                b.send_to(b"xyz", a_addr).expect("send");
                b.send_to(b"", a_addr).expect("send empty");
                let mut buf = [0u8; 8];
                let (n, _) = b.recv_from(&mut buf).expect("pong");
                assert_eq!(&buf[..n], b"pong");
                let (n, _) = b.recv_from(&mut buf).expect("connected send");
                assert_eq!(&buf[..n], b"c");
                b.send_to(b"back", a_addr).expect("back");
                let seen = h.join().expect("receiver");
                s.shutdown();
                seen
            };
            let epoll = run(IoDriver::Epoll);
            let uring = run(IoDriver::Uring);
            assert_eq!(epoll, uring, "epoll vs uring");
            assert_eq!(
                uring,
                (
                    ErrorKind::WouldBlock,
                    (2, b'y'),
                    (2, b'y'),
                    0,
                    b"back".to_vec()
                )
            );
        },
    );
}

#[test]
fn vectored_reads_and_writes_go_through_the_ring() {
    in_child("vectored_reads_and_writes_go_through_the_ring", || {
        use std::io::{IoSlice, IoSliceMut};
        use std::os::fd::AsRawFd;
        // Per driver: what a vectored read put in each buffer, and what the
        // peer got from a vectored write (empty slices included).
        type Seen = (usize, Vec<u8>, Vec<u8>, Vec<u8>);
        let run = |d: IoDriver| -> Seen {
            let s = one_thread(d);
            let (stream, mut peer) = pair();
            let fd = stream.as_raw_fd();
            let h = s.spawn(move || {
                let mut stream = stream;
                let (mut a, mut b) = ([0u8; 3], [0u8; 8]);
                let n = stream
                    .read_vectored(&mut [
                        IoSliceMut::new(&mut []),
                        IoSliceMut::new(&mut a),
                        IoSliceMut::new(&mut b),
                    ])
                    .expect("read_vectored");
                let w = stream
                    .write_vectored(&[IoSlice::new(b"ab"), IoSlice::new(b""), IoSlice::new(b"cde")])
                    .expect("write_vectored");
                assert_eq!(w, 5);
                (n, a.to_vec(), b.to_vec())
            });
            wait_parked(&s, "the reader parked");
            if d == IoDriver::Uring {
                assert!(rings_open() >= 1, "the read did not go through a ring");
                assert!(!watched_by_epoll(fd), "the read waits on the epoll reactor");
            }
            peer.write_all(b"hello").expect("peer write");
            let mut got = [0u8; 5];
            peer.read_exact(&mut got).expect("peer read");
            let (n, a, b) = h.join().expect("task");
            s.shutdown();
            (n, a, b, got.to_vec())
        };
        let epoll = run(IoDriver::Epoll);
        let uring = run(IoDriver::Uring);
        assert_eq!(epoll, uring, "epoll vs uring");
        assert_eq!(
            uring,
            (
                5,
                b"hel".to_vec(),
                b"lo\0\0\0\0\0\0".to_vec(),
                b"abcde".to_vec()
            )
        );

        // A write alone: a ring made after it was made for it.
        let s = uring_sched("uring-writev", 1);
        let (stream, mut peer) = pair();
        s.spawn(move || {
            (&stream)
                .write_vectored(&[IoSlice::new(b"x"), IoSlice::new(b"y")])
                .expect("write_vectored")
        })
        .join()
        .expect("writer");
        assert!(rings_open() >= 1, "the write did not go through a ring");
        let mut got = [0u8; 2];
        peer.read_exact(&mut got).expect("peer read");
        assert_eq!(&got, b"xy");
        s.shutdown();
    });
}

#[test]
fn shutdown_now_ends_tasks_parked_in_ring_accepts_waits_and_datagrams() {
    in_child(
        "shutdown_now_ends_tasks_parked_in_ring_accepts_waits_and_datagrams",
        || {
            use gofer::net::UdpSocket;
            const EACH: usize = 20;
            let s = uring_sched("uring-shutdown-ops", 2);
            let (l, addr) = listener();
            let l = std::sync::Arc::new(l);
            let mut keep = Vec::new();
            for _ in 0..EACH {
                let acceptor = l.clone();
                s.spawn(move || {
                    let _ = acceptor.accept();
                    unreachable!("nobody connects");
                });
                let (a, b) = std::os::unix::net::UnixStream::pair().expect("pair");
                keep.push(b);
                s.spawn(move || {
                    let _ = gofer::io::wait_readable(&a, None);
                    unreachable!("nothing is sent");
                });
                let u = UdpSocket::bind("127.0.0.1:0").expect("bind");
                s.spawn(move || {
                    let _ = u.recv_from(&mut [0u8; 64]);
                    unreachable!("nothing is sent");
                });
            }
            wait_parked(&s, "every task parked");
            assert!(rings_open() >= 1, "nothing went through a ring");
            s.shutdown_now();
            assert_eq!(s.stats().alive, 0);
            s.shutdown();
            // The listener's queue is still served: the cancelled accepts
            // left it.
            let c = std::net::TcpStream::connect(addr).expect("connect");
            let l = l.try_clone().expect("try_clone").into_std();
            let (_, peer) = l.accept().expect("accept after shutdown");
            assert_eq!(peer, c.local_addr().expect("local_addr"));
            drop(keep);
        },
    );
}
