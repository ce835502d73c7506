//! With the `hooks` feature, unmodified `std` code parks the task instead
//! of the thread: `std::net::TcpStream` at scale on two threads,
//! `std::thread::sleep` in ten thousand tasks, `SO_RCVTIMEO` and
//! `SO_SNDTIMEO` as the timeouts of parked waits, `close` of a descriptor
//! another task is parked on (and the number's reuse), a socket the program
//! made non-blocking, and plain threads, which keep std's exact behaviour.
//!
//! Every scenario that could hang runs in a child process under a watchdog.
//! Without the feature this file compiles to nothing.
#![cfg(feature = "hooks")]

use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::mem::ManuallyDrop;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::in_child;
use gofer::Scheduler;

/// A scheduler of `threads` Processers that may start up to `max` threads
/// when the Dispatcher finds them blocked. With one thread there is no
/// Dispatcher: a task that held the thread would stop every other task.
fn sched(name: &str, threads: usize, max: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(max)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

/// A connected loopback pair made on the calling thread: `(client, server
/// side)`, both plain blocking std sockets.
fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let c = TcpStream::connect(l.local_addr().unwrap()).expect("connect");
    let (s, _) = l.accept().expect("accept");
    (c, s)
}

/// Whether the program sees `O_NONBLOCK` on `fd` (through the hooked
/// `fcntl`, as std would).
fn nonblocking_flag(fd: i32) -> bool {
    // SAFETY: F_GETFL takes no argument.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    assert!(fl >= 0, "F_GETFL: {}", std::io::Error::last_os_error());
    fl & libc::O_NONBLOCK != 0
}

/// Counts the turns another task takes while `waiting` is set, until
/// `stop`: each turn is a 2 ms `std::thread::sleep`, itself hooked. On one
/// thread, a count above zero proves the thread was free during the wait.
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
            std::thread::sleep(Duration::from_millis(2));
        }
        during
    })
}

#[test]
fn hooks_are_enabled_with_the_feature() {
    assert!(gofer::hooks::enabled());
}

// ------------------------------------------------------------ at scale

const ECHO_TASKS: usize = 1000;

/// Serves one connection: echoes what it reads until the client closes.
fn echo(mut c: TcpStream) -> std::io::Result<u64> {
    let mut buf = [0u8; 256];
    let mut total = 0;
    loop {
        let n = c.read(&mut buf)?;
        if n == 0 {
            return Ok(total);
        }
        c.write_all(&buf[..n])?;
        total += n as u64;
    }
}

#[test]
fn a_thousand_tasks_use_std_tcp_streams_on_two_threads_without_blocking_them() {
    in_child(
        module_path!(),
        "a_thousand_tasks_use_std_tcp_streams_on_two_threads_without_blocking_them",
        || {
            // Up to 8 threads: were the hooks not working, the Dispatcher
            // would find the Processers blocked and start more.
            common::grow_fd_table(8192);
            let s = sched("hstd", 2, 8);
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            let addr = listener.local_addr().unwrap();
            let t = Instant::now();
            // The server: std's listener and streams too, one task each.
            let server = s.spawn(move || {
                let mut conns = Vec::with_capacity(ECHO_TASKS);
                for _ in 0..ECHO_TASKS {
                    let (c, _) = listener.accept().expect("accept");
                    conns.push(gofer::spawn(move || echo(c)));
                }
                conns
                    .into_iter()
                    .map(|h| h.join().expect("server task").expect("echo"))
                    .sum::<u64>()
            });
            let clients: Vec<_> = (0..ECHO_TASKS)
                .map(|i| {
                    s.spawn(move || {
                        let mut c = TcpStream::connect(addr).expect("connect");
                        let mut sent = 0;
                        for round in 0..3 {
                            let msg = format!("task {i} round {round} ").repeat(4);
                            c.write_all(msg.as_bytes()).expect("write");
                            let mut back = vec![0; msg.len()];
                            c.read_exact(&mut back).expect("read");
                            assert_eq!(back, msg.as_bytes(), "task {i} got another's bytes");
                            sent += msg.len() as u64;
                        }
                        sent
                    })
                })
                .collect();
            let sent: u64 = clients.into_iter().map(|h| h.join().unwrap()).sum();
            let echoed = server.join().expect("server");
            let took = t.elapsed();
            assert_eq!(echoed, sent, "every byte sent came back");
            let st = s.stats();
            println!(
                "figure: {ECHO_TASKS} tasks x 3 std::net round trips on 2 threads: {took:?}, \
                 blocked_detections {}, threads_started {}",
                st.blocked_detections, st.threads_started
            );
            assert_eq!(st.blocked_detections, 0, "a Processer was blocked: {st:?}");
            assert_eq!(st.tasks_rescued, 0, "{st:?}");
            assert_eq!(st.threads_started, 2, "extra threads were started: {st:?}");
            assert_eq!(st.threads, 2, "{st:?}");
            s.shutdown();
        },
    );
}

#[test]
fn ten_thousand_std_sleeps_of_10ms_on_two_threads_overlap() {
    in_child(
        module_path!(),
        "ten_thousand_std_sleeps_of_10ms_on_two_threads_overlap",
        || {
            const N: usize = 10_000;
            const NAP: Duration = Duration::from_millis(10);
            let s = Scheduler::builder()
                .min_threads(2)
                .max_threads(8)
                .stack_size(64 << 10)
                .name("hsleep")
                .build()
                .unwrap();
            let short = Arc::new(AtomicUsize::new(0));
            let t = Instant::now();
            let handles: Vec<_> = (0..N)
                .map(|_| {
                    let short = short.clone();
                    s.spawn(move || {
                        let t = Instant::now();
                        std::thread::sleep(NAP);
                        if t.elapsed() < NAP {
                            short.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            let took = t.elapsed();
            let st = s.stats();
            println!(
                "figure: {N} tasks x std::thread::sleep(10ms) on 2 threads: {took:?} \
                 (one thread per sleep at a time would take {:?}); blocked_detections {}",
                NAP * (N as u32) / 2,
                st.blocked_detections
            );
            assert_eq!(short.load(Ordering::Relaxed), 0, "a sleep returned early");
            assert!(
                took < Duration::from_secs(5),
                "took {took:?}: the sleeps did not overlap"
            );
            assert_eq!(st.blocked_detections, 0, "{st:?}");
            assert_eq!(st.threads_started, 2, "{st:?}");
            s.shutdown();
        },
    );
}

// ------------------------------------------------------------ timeouts

#[test]
fn so_rcvtimeo_expires_with_would_block_while_other_tasks_run() {
    in_child(
        module_path!(),
        "so_rcvtimeo_expires_with_would_block_while_other_tasks_run",
        || {
            const TIMEOUT: Duration = Duration::from_millis(300);
            let s = sched("hrcvto", 1, 1);
            let (c, _server_side) = pair();
            let waiting = Arc::new(AtomicBool::new(false));
            let stop = Arc::new(AtomicBool::new(false));
            let count = counter(&s, waiting.clone(), stop.clone());
            let reader = {
                let (waiting, stop) = (waiting.clone(), stop.clone());
                s.spawn(move || {
                    let mut c = c;
                    c.set_read_timeout(Some(TIMEOUT)).unwrap();
                    assert_eq!(c.read_timeout().unwrap(), Some(TIMEOUT));
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
            let during = count.join().unwrap();
            println!("figure: SO_RCVTIMEO 300ms: read returned after {took:?}; the other task took {during} turns meanwhile");
            assert_eq!(
                r,
                Err(ErrorKind::WouldBlock),
                "std maps EAGAIN to WouldBlock"
            );
            assert!(
                took >= TIMEOUT,
                "returned after {took:?}, before the timeout"
            );
            assert!(took < TIMEOUT * 10, "returned after {took:?}");
            assert!(
                during >= 5,
                "the other task ran only {during} times during the wait: the thread was held"
            );
            s.shutdown();
        },
    );
}

#[test]
fn so_sndtimeo_expires_with_would_block_while_other_tasks_run() {
    in_child(
        module_path!(),
        "so_sndtimeo_expires_with_would_block_while_other_tasks_run",
        || {
            const TIMEOUT: Duration = Duration::from_millis(300);
            let s = sched("hsndto", 1, 1);
            let (c, _never_read) = pair();
            let waiting = Arc::new(AtomicBool::new(false));
            let stop = Arc::new(AtomicBool::new(false));
            let count = counter(&s, waiting.clone(), stop.clone());
            let writer = {
                let (waiting, stop) = (waiting.clone(), stop.clone());
                s.spawn(move || {
                    let mut c = c;
                    c.set_write_timeout(Some(TIMEOUT)).unwrap();
                    let chunk = vec![7u8; 64 << 10];
                    let mut written = 0usize;
                    waiting.store(true, Ordering::SeqCst);
                    let r = loop {
                        // Each write that blocks starts a new timeout; the
                        // last one is the one that expires.
                        let t = Instant::now();
                        match c.write(&chunk) {
                            Ok(n) => written += n,
                            Err(e) => break (Err(e.kind()), t.elapsed()),
                        }
                        if written > 256 << 20 {
                            break (Ok(written), t.elapsed());
                        }
                    };
                    waiting.store(false, Ordering::SeqCst);
                    stop.store(true, Ordering::SeqCst);
                    (r, written)
                })
            };
            let ((r, took), written) = writer.join().unwrap();
            let during = count.join().unwrap();
            println!(
                "figure: SO_SNDTIMEO 300ms: {written} bytes written, then the write that \
                 waited returned after {took:?}; the other task took {during} turns meanwhile"
            );
            assert_eq!(r, Err(ErrorKind::WouldBlock), "the buffers never fill?");
            assert!(
                took >= TIMEOUT,
                "returned after {took:?}, before the timeout"
            );
            assert!(during >= 5, "the other task ran only {during} times");
            s.shutdown();
        },
    );
}

// ------------------------------------------------------------ close

const NOT_YOURS: &[u8] = b"not for the old reader";

#[test]
fn close_wakes_a_task_parked_on_the_descriptor_with_ebadf_even_if_the_number_is_reused() {
    in_child(
        module_path!(),
        "close_wakes_a_task_parked_on_the_descriptor_with_ebadf_even_if_the_number_is_reused",
        || {
            // One thread: while the closer runs, the reader cannot be in
            // the middle of its call on another thread; it is parked.
            let s = sched("hclose", 1, 1);
            let (c, server_side) = pair();
            let fd = c.as_raw_fd();
            let entered = Arc::new(AtomicBool::new(false));
            let returned = Arc::new(AtomicBool::new(false));
            let reader = {
                let (entered, returned) = (entered.clone(), returned.clone());
                s.spawn(move || {
                    // The closer closes the descriptor: the stream must not
                    // close it again (the number may be someone else's).
                    let mut c = ManuallyDrop::new(c);
                    let mut buf = [0u8; 64];
                    entered.store(true, Ordering::SeqCst);
                    let r = c.read(&mut buf);
                    returned.store(true, Ordering::SeqCst);
                    r.map(|n| buf[..n].to_vec()).map_err(|e| e.raw_os_error())
                })
            };
            let closer = s.spawn(move || {
                while !entered.load(Ordering::SeqCst) {
                    gofer::yield_now();
                }
                assert!(
                    !returned.load(Ordering::SeqCst),
                    "the read returned with nothing to read"
                );
                // SAFETY: closes the reader's descriptor, which the reader
                // never closes itself (ManuallyDrop).
                assert_eq!(unsafe { libc::close(fd) }, 0);
                // The lowest free number is `fd` again: a new socket takes
                // it, with data waiting, before the reader runs (nothing
                // here parks, so the reader cannot run in between).
                let (mut a, mut b) = UnixStream::pair().expect("socketpair");
                a.write_all(NOT_YOURS).unwrap();
                b.write_all(NOT_YOURS).unwrap();
                let same = a.as_raw_fd() == fd || b.as_raw_fd() == fd;
                assert!(!returned.load(Ordering::SeqCst));
                (same, [a, b])
            });
            let (same, ends) = closer.join().unwrap();
            let r = reader.join().unwrap();
            println!("figure: close while parked: the reader got {r:?}; number reused: {same}");
            assert_eq!(
                r,
                Err(Some(libc::EBADF)),
                "the parked read must fail with EBADF"
            );
            assert!(same, "the test meant the number {fd} to be reused");
            // The new owner of the number still has its bytes.
            for mut end in ends {
                let mut got = vec![0u8; NOT_YOURS.len()];
                end.read_exact(&mut got).unwrap();
                assert_eq!(got, NOT_YOURS);
            }
            drop(server_side);
            s.shutdown();
        },
    );
}

#[test]
fn close_from_another_thread_races_parked_readers_on_two_threads_without_a_hang() {
    in_child(
        module_path!(),
        "close_from_another_thread_races_parked_readers_on_two_threads_without_a_hang",
        || {
            // The reader and the closer on two Processers: the close may
            // land before the read begins, while it looks at the descriptor,
            // or while it is parked, and the woken reader may run while
            // `close` is still in progress. Each round's socket takes the
            // number the last one left. Whatever the interleaving, the read
            // must end, with EBADF.
            const ROUNDS: usize = 2000;
            let s = sched("hclose2", 2, 2);
            let mut ebadf = 0;
            for _ in 0..ROUNDS {
                let (c, _server_side) = pair();
                let fd = c.as_raw_fd();
                let entered = Arc::new(AtomicBool::new(false));
                let reader = {
                    let entered = entered.clone();
                    s.spawn(move || {
                        let mut c = ManuallyDrop::new(c);
                        let mut buf = [0u8; 8];
                        entered.store(true, Ordering::SeqCst);
                        c.read(&mut buf).map_err(|e| e.raw_os_error())
                    })
                };
                let closer = s.spawn(move || {
                    while !entered.load(Ordering::SeqCst) {
                        gofer::yield_now();
                    }
                    // SAFETY: the reader never closes its descriptor.
                    assert_eq!(unsafe { libc::close(fd) }, 0);
                });
                closer.join().unwrap();
                let r = reader.join().unwrap();
                assert_eq!(r.map(|_| ()), Err(Some(libc::EBADF)));
                ebadf += 1;
            }
            println!("figure: {ebadf} reads closed under them on two threads, each EBADF");
            s.shutdown();
        },
    );
}

// ------------------------------------------------------------ modes

#[test]
fn a_socket_the_program_made_non_blocking_keeps_returning_would_block_in_a_task() {
    in_child(
        module_path!(),
        "a_socket_the_program_made_non_blocking_keeps_returning_would_block_in_a_task",
        || {
            let s = sched("hnonb", 1, 1);
            let (c, server_side) = pair();
            let fd = c.as_raw_fd();
            let entered = Arc::new(AtomicBool::new(false));
            let returned = Arc::new(AtomicBool::new(false));
            let reader = {
                let (entered, returned) = (entered.clone(), returned.clone());
                s.spawn(move || {
                    let mut c = c;
                    let mut buf = [0u8; 16];
                    c.set_nonblocking(true).unwrap();
                    assert!(nonblocking_flag(fd));
                    let t = Instant::now();
                    for _ in 0..1000 {
                        let e = c.read(&mut buf).expect_err("nothing to read");
                        assert_eq!(e.kind(), ErrorKind::WouldBlock);
                    }
                    let spun = t.elapsed();
                    // Back to blocking: the read parks until bytes come.
                    c.set_nonblocking(false).unwrap();
                    assert!(
                        !nonblocking_flag(fd),
                        "F_GETFL reports what the program set"
                    );
                    entered.store(true, Ordering::SeqCst);
                    let n = c.read(&mut buf).expect("read");
                    returned.store(true, Ordering::SeqCst);
                    // While gofer waits, the descriptor is non-blocking
                    // underneath, and F_GETFL still says blocking.
                    assert!(!nonblocking_flag(fd));
                    (spun, buf[..n].to_vec())
                })
            };
            let writer = s.spawn(move || {
                let mut server_side = server_side;
                while !entered.load(Ordering::SeqCst) {
                    gofer::yield_now();
                }
                assert!(
                    !returned.load(Ordering::SeqCst),
                    "the blocking read did not wait"
                );
                server_side.write_all(b"late").unwrap();
                server_side
            });
            let _server_side = writer.join().unwrap();
            let (spun, got) = reader.join().unwrap();
            println!("figure: 1000 reads on a socket set non-blocking: {spun:?}");
            assert!(
                spun < Duration::from_secs(2),
                "1000 WouldBlocks took {spun:?}"
            );
            assert_eq!(got, b"late");
            s.shutdown();
        },
    );
}

#[test]
fn connect_in_a_task_reports_refusal_and_connect_timeout_works() {
    in_child(
        module_path!(),
        "connect_in_a_task_reports_refusal_and_connect_timeout_works",
        || {
            let s = sched("hconn", 1, 1);
            // A port nobody listens on: bind, note it, close.
            let closed: SocketAddr = {
                let l = TcpListener::bind("127.0.0.1:0").unwrap();
                l.local_addr().unwrap()
            };
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let open = listener.local_addr().unwrap();
            let h = s.spawn(move || {
                let refused = TcpStream::connect(closed).map(|_| ()).map_err(|e| e.kind());
                let refused_t = TcpStream::connect_timeout(&closed, Duration::from_secs(5))
                    .map(|_| ())
                    .map_err(|e| e.kind());
                // std's connect_timeout: non-blocking connect, then poll(2)
                // on one descriptor, which waits through the reactor.
                let mut ok = TcpStream::connect_timeout(&open, Duration::from_secs(5))
                    .expect("connect_timeout");
                ok.write_all(b"x").unwrap();
                (refused, refused_t)
            });
            let (refused, refused_t) = h.join().unwrap();
            assert_eq!(refused, Err(ErrorKind::ConnectionRefused));
            assert_eq!(refused_t, Err(ErrorKind::ConnectionRefused));
            let (mut a, _) = listener.accept().unwrap();
            let mut b = [0u8; 1];
            a.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"x");
            s.shutdown();
        },
    );
}

#[test]
fn a_task_whose_std_socket_never_makes_it_wait_still_lets_others_run() {
    in_child(
        module_path!(),
        "a_task_whose_std_socket_never_makes_it_wait_still_lets_others_run",
        || {
            // One thread, and 64 KiB already waiting to be read a byte at a
            // time: no read ever waits, so only the IO budget makes the
            // reader let the other task run.
            const BYTES: usize = 64 << 10;
            let s = sched("hcoop", 1, 1);
            let (c, mut server_side) = pair();
            server_side.write_all(&vec![7u8; BYTES]).unwrap();
            let reading = Arc::new(AtomicBool::new(false));
            let stop = Arc::new(AtomicBool::new(false));
            let other = {
                let (reading, stop) = (reading.clone(), stop.clone());
                s.spawn(move || {
                    let mut during = 0usize;
                    while !stop.load(Ordering::SeqCst) {
                        if reading.load(Ordering::SeqCst) {
                            during += 1;
                        }
                        gofer::yield_now();
                    }
                    during
                })
            };
            let reader = s.spawn(move || {
                let mut c = c;
                let mut b = [0u8; 1];
                reading.store(true, Ordering::SeqCst);
                for _ in 0..BYTES {
                    c.read_exact(&mut b).expect("a byte that is already there");
                    assert_eq!(b[0], 7);
                }
                reading.store(false, Ordering::SeqCst);
                stop.store(true, Ordering::SeqCst);
            });
            reader.join().unwrap();
            let during = other.join().unwrap();
            println!("figure: the other task ran {during} times during {BYTES} ready reads");
            assert!(
                during >= 10,
                "the other task ran {during} times: the reader kept the thread"
            );
            s.shutdown();
        },
    );
}

// ------------------------------------------------------------ plain threads

#[test]
fn plain_threads_keep_std_behaviour_even_on_sockets_tasks_used() {
    in_child(
        module_path!(),
        "plain_threads_keep_std_behaviour_even_on_sockets_tasks_used",
        || {
            const TIMEOUT: Duration = Duration::from_millis(150);
            // Sleeping sleeps the thread.
            let t = Instant::now();
            std::thread::sleep(Duration::from_millis(100));
            assert!(t.elapsed() >= Duration::from_millis(100));
            // SAFETY: usleep has no preconditions.
            unsafe { libc::usleep(50_000) };
            assert!(t.elapsed() >= Duration::from_millis(150));

            let (mut c, mut server_side) = pair();
            let fd = c.as_raw_fd();
            let mut buf = [0u8; 16];
            let timed_read = |c: &mut TcpStream, buf: &mut [u8]| {
                let t = Instant::now();
                let r = c.read(buf).map_err(|e| e.kind());
                (r, t.elapsed())
            };
            // A blocking socket a task never touched: the kernel's timeout.
            c.set_read_timeout(Some(TIMEOUT)).unwrap();
            let (r, took) = timed_read(&mut c, &mut buf);
            assert_eq!(r, Err(ErrorKind::WouldBlock));
            assert!(took >= TIMEOUT, "{took:?}");
            assert!(!nonblocking_flag(fd));

            // A task uses it: gofer switches it to non-blocking underneath.
            server_side.write_all(b"a").unwrap();
            let s = sched("hplain", 1, 1);
            let (back, got) = s
                .spawn(move || {
                    let mut b = [0u8; 1];
                    let n = c.read(&mut b).expect("read in a task");
                    (c, b[..n].to_vec())
                })
                .join()
                .unwrap();
            c = back;
            assert_eq!(got, b"a");

            // Back on this thread, std sees a blocking socket, as before.
            assert!(!nonblocking_flag(fd), "F_GETFL reports blocking");
            let (r, took) = timed_read(&mut c, &mut buf);
            assert_eq!(r, Err(ErrorKind::WouldBlock), "the timeout still applies");
            assert!(
                took >= TIMEOUT,
                "returned after {took:?}: not a blocking read"
            );
            c.set_read_timeout(None).unwrap();
            let writer = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                server_side.write_all(b"later").unwrap();
                server_side
            });
            let t = Instant::now();
            let n = c.read(&mut buf).expect("a blocking read waits for data");
            assert!(
                t.elapsed() >= Duration::from_millis(90),
                "{:?}",
                t.elapsed()
            );
            assert_eq!(&buf[..n], b"later");
            let _server_side = writer.join().unwrap();

            // The program's own non-blocking mode: WouldBlock at once.
            c.set_nonblocking(true).unwrap();
            assert!(nonblocking_flag(fd));
            let (r, took) = timed_read(&mut c, &mut buf);
            assert_eq!(r, Err(ErrorKind::WouldBlock));
            assert!(took < TIMEOUT, "{took:?}");
            s.shutdown();
        },
    );
}
