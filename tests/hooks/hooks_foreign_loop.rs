//! With the `hooks` feature, a library that runs its own event loop inside
//! a task (sync `postgres` and `reqwest::blocking` run tokio's `block_on`)
//! waits on its thread: no other task of the thread runs while the loop's
//! thread-local state is set.
//!
//! tokio marks the thread as inside a runtime for the whole `block_on`. If
//! the `epoll_wait` of that loop parked the task, the next task of the
//! thread would enter `block_on` too and panic "Cannot start a runtime from
//! within a runtime". So a wait on an epoll instance or on several
//! descriptors (`epoll_wait`, `epoll_pwait`, `select`, `pselect`, `poll`
//! and `ppoll` on more than one descriptor) blocks the thread, and the
//! Dispatcher moves the tasks that have not started; a `poll` on one
//! socket or pipe (libpq, std's `connect_timeout`) still parks the task.
//!
//! Each scenario runs in a child process under a watchdog.
//!
//! Without the feature this file compiles to nothing.
#![cfg(feature = "hooks")]

use crate::common;

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long the loopback server waits before it answers: long enough that
/// the client really waits in its runtime's `epoll_wait`.
const REPLY_DELAY: Duration = Duration::from_millis(20);

/// A loopback server on plain threads (one per connection): reads one
/// line, waits [`REPLY_DELAY`], answers `reply <line>` and closes.
fn delayed_reply_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local_addr");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut line = String::new();
                let mut r = BufReader::new(conn.try_clone().expect("clone"));
                if r.read_line(&mut line).is_err() {
                    return;
                }
                std::thread::sleep(REPLY_DELAY);
                let _ = conn.write_all(format!("reply {line}").as_bytes());
            });
        }
    });
    addr
}

/// What a sync client built on tokio does: a current-thread runtime of its
/// own, and `block_on` over a TCP exchange. The panic of a `block_on`
/// entered while another is running comes back as `Err(message)`.
fn tokio_client(addr: SocketAddr, i: usize) -> Result<String, String> {
    catch_unwind(AssertUnwindSafe(|| {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime");
        rt.block_on(async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
            s.write_all(format!("{i}\n").as_bytes())
                .await
                .expect("write");
            let mut reply = String::new();
            s.read_to_string(&mut reply).await.expect("read");
            reply
        })
    }))
    .map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into())
    })
}

/// Runs `tasks` tokio clients as tasks of `sched` and checks that every
/// one completed with its own reply.
fn all_clients_complete(sched: &gofer::Scheduler, tasks: usize) {
    let addr = delayed_reply_server();
    let handles: Vec<_> = (0..tasks)
        .map(|i| sched.spawn(move || tokio_client(addr, i)))
        .collect();
    let results: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().expect("a client task"))
        .collect();
    let failed: Vec<String> = results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            Ok(reply) if *reply == format!("reply {i}\n") => None,
            Ok(reply) => Some(format!("client {i}: wrong reply {reply:?}")),
            Err(m) => Some(format!("client {i} panicked: {m}")),
        })
        .collect();
    println!(
        "figure: {tasks} tokio clients: {} completed, {} failed",
        tasks - failed.len(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} of {tasks} clients failed; first: {}",
        failed.len(),
        failed[0]
    );
}

#[test]
fn tokio_clients_in_tasks_of_one_processer_all_complete() {
    common::in_child(
        module_path!(),
        "tokio_clients_in_tasks_of_one_processer_all_complete",
        || {
            let sched = common::fixed_scheduler(1);
            all_clients_complete(&sched, 3);
            sched.shutdown();
        },
    );
}

#[test]
fn many_tokio_clients_on_two_processers_all_complete() {
    common::in_child(
        module_path!(),
        "many_tokio_clients_on_two_processers_all_complete",
        || {
            let sched = gofer::Scheduler::builder()
                .min_threads(2)
                .max_threads(4)
                .build()
                .expect("a scheduler");
            all_clients_complete(&sched, 50);
            sched.shutdown();
        },
    );
}

thread_local! {
    /// Set while a task of this thread is inside its "event loop": what
    /// tokio's runtime context is to `block_on`.
    static IN_LOOP: Cell<bool> = const { Cell::new(false) };
}

// Never inlined: each call reads the thread-local of the thread it runs on.
#[inline(never)]
fn set_in_loop(on: bool) {
    IN_LOOP.with(|f| f.set(on));
}

#[inline(never)]
fn in_loop() -> bool {
    IN_LOOP.with(Cell::get)
}

fn pipe() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: two ints for pipe(2) to fill.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    (fds[0], fds[1])
}

fn close_all(fds: &[i32]) {
    for &fd in fds {
        // SAFETY: descriptors the test made.
        unsafe { libc::close(fd) };
    }
}

/// On one Processer, a ticker task runs (sleeping 1 ms between looks)
/// while another task sets [`IN_LOOP`] and makes `wait` on the read ends
/// of two pipes, the second written by a plain thread 100 ms later.
/// Returns what `wait` returned and how often the ticker found the flag
/// set: a wait that parked the task would let the ticker run inside it.
fn sibling_runs_inside(wait: fn([i32; 2]) -> i32) -> (i32, usize) {
    let sched = common::fixed_scheduler(1);
    let (r1, w1) = pipe();
    let (r2, w2) = pipe();
    let stop = Arc::new(AtomicBool::new(false));
    let ticks = Arc::new(AtomicUsize::new(0));
    let (s, t) = (stop.clone(), ticks.clone());
    let ticker = sched.spawn(move || {
        let mut inside = 0;
        while !s.load(Ordering::Relaxed) {
            t.fetch_add(1, Ordering::Relaxed);
            inside += usize::from(in_loop());
            gofer::sleep(Duration::from_millis(1));
        }
        inside
    });
    common::wait_until("the ticker ran", || ticks.load(Ordering::Relaxed) > 0);
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: one byte from a live buffer.
        unsafe { libc::write(w2, b"x".as_ptr().cast(), 1) };
    });
    let n = sched
        .spawn(move || {
            set_in_loop(true);
            let n = wait([r1, r2]);
            set_in_loop(false);
            n
        })
        .join()
        .expect("the waiting task");
    writer.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let inside = ticker.join().expect("the ticker");
    sched.shutdown();
    close_all(&[r1, w1, r2, w2]);
    (n, inside)
}

fn assert_alone(what: &str, wait: fn([i32; 2]) -> i32) {
    let (n, inside) = sibling_runs_inside(wait);
    assert_eq!(n, 1, "{what}: one descriptor should be ready");
    assert_eq!(
        inside, 0,
        "{what}: a sibling task ran {inside} times while the wait's thread-local state was set"
    );
}

fn two_pollfds(r: [i32; 2]) -> [libc::pollfd; 2] {
    r.map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    })
}

fn read_set(r: [i32; 2]) -> libc::fd_set {
    // SAFETY: fd_set is plain data; FD_ZERO/FD_SET on a live set with
    // descriptors below FD_SETSIZE.
    unsafe {
        let mut set: libc::fd_set = std::mem::zeroed();
        libc::FD_ZERO(&mut set);
        libc::FD_SET(r[0], &mut set);
        libc::FD_SET(r[1], &mut set);
        set
    }
}

/// `epoll_wait` (or `epoll_pwait`) on a new epoll instance holding both.
fn epoll_on(r: [i32; 2], pwait: bool) -> i32 {
    // SAFETY: epoll calls on descriptors the test made, with live events.
    unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        for fd in r {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: fd as u64,
            };
            libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev);
        }
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 4];
        let n = if pwait {
            libc::epoll_pwait(ep, evs.as_mut_ptr(), 4, 10_000, std::ptr::null())
        } else {
            libc::epoll_wait(ep, evs.as_mut_ptr(), 4, 10_000)
        };
        libc::close(ep);
        n
    }
}

#[test]
fn waits_on_an_epoll_instance_or_several_descriptors_let_no_sibling_run() {
    common::in_child(
        module_path!(),
        "waits_on_an_epoll_instance_or_several_descriptors_let_no_sibling_run",
        || {
            assert_alone("epoll_wait", |r| epoll_on(r, false));
            assert_alone("epoll_pwait", |r| epoll_on(r, true));
            assert_alone("poll on two", |r| {
                let mut fds = two_pollfds(r);
                // SAFETY: two live pollfds.
                unsafe { libc::poll(fds.as_mut_ptr(), 2, 10_000) }
            });
            assert_alone("ppoll on two", |r| {
                let mut fds = two_pollfds(r);
                let ts = libc::timespec {
                    tv_sec: 10,
                    tv_nsec: 0,
                };
                // SAFETY: two live pollfds, a live timespec, no mask.
                unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) }
            });
            assert_alone("select", |r| {
                let mut set = read_set(r);
                let mut tv = libc::timeval {
                    tv_sec: 10,
                    tv_usec: 0,
                };
                let (null, nfds) = (std::ptr::null_mut(), r[0].max(r[1]) + 1);
                // SAFETY: a live set and timeval.
                unsafe { libc::select(nfds, &mut set, null, null, &mut tv) }
            });
            assert_alone("pselect", |r| {
                let mut set = read_set(r);
                let ts = libc::timespec {
                    tv_sec: 10,
                    tv_nsec: 0,
                };
                let (null, nfds) = (std::ptr::null_mut(), r[0].max(r[1]) + 1);
                // SAFETY: a live set and timespec, no mask.
                unsafe { libc::pselect(nfds, &mut set, null, null, &ts, std::ptr::null()) }
            });
        },
    );
}

/// A loopback echo server on plain threads: echoes each connection until
/// it closes.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local_addr");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 64];
                while let Ok(n @ 1..) = conn.read(&mut buf) {
                    if conn.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// On one Processer, a task waits with `wait` on the read end of a pipe
/// (5 s at most); a sibling task started once it waits makes a TCP round
/// trip and only then writes the pipe. Returns what `wait` returned and
/// whether the round trip came back whole: a wait that blocked the
/// thread would never let the sibling run, and would time out.
fn sibling_runs_during_one_descriptor_wait(wait: fn(i32) -> i32) -> (i32, bool) {
    let sched = common::fixed_scheduler(1);
    let addr = echo_server();
    let (r, w) = pipe();
    let waiting = Arc::new(AtomicBool::new(false));
    let flag = waiting.clone();
    let waiter = sched.spawn(move || {
        flag.store(true, Ordering::SeqCst);
        wait(r)
    });
    common::wait_until("the waiter began", || waiting.load(Ordering::SeqCst));
    let sibling = sched.spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.write_all(b"ping").expect("write");
        let mut back = [0u8; 4];
        s.read_exact(&mut back).expect("read");
        // SAFETY: one byte from a live buffer.
        unsafe { libc::write(w, b"x".as_ptr().cast(), 1) };
        &back == b"ping"
    });
    let n = waiter.join().expect("the waiter");
    let echoed = sibling.join().expect("the sibling");
    sched.shutdown();
    close_all(&[r, w]);
    (n, echoed)
}

#[test]
fn a_wait_on_one_descriptor_still_parks_the_task() {
    common::in_child(
        module_path!(),
        "a_wait_on_one_descriptor_still_parks_the_task",
        || {
            let poll_one = |fd| {
                let mut p = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one live pollfd.
                unsafe { libc::poll(&mut p, 1, 5_000) }
            };
            assert_eq!(
                sibling_runs_during_one_descriptor_wait(poll_one),
                (1, true),
                "poll on one pipe"
            );
            let ppoll_one = |fd| {
                let mut p = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ts = libc::timespec {
                    tv_sec: 5,
                    tv_nsec: 0,
                };
                // SAFETY: one live pollfd, a live timespec, no mask.
                unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) }
            };
            assert_eq!(
                sibling_runs_during_one_descriptor_wait(ppoll_one),
                (1, true),
                "ppoll on one pipe"
            );
        },
    );
}
