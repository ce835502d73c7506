//! std's documented network behaviour, on std's own types, must come out
//! the same with the `hooks` feature whether the code runs on a plain
//! thread or inside a gofer task.
//!
//! Each check is one function of a [`Mode`], run three times, each time in
//! a child process of its own under a watchdog (the hooks can hang):
//!
//! - [`Mode::Thread`]: on a plain thread, its peers plain threads: the
//!   reference, std's behaviour (no task ever touches a descriptor, so the
//!   hooks pass every call to libc);
//! - [`Mode::TaskThreadPeers`]: inside a gofer task, its peers plain threads;
//! - [`Mode::TaskTaskPeers`]: inside a gofer task, its peers gofer tasks.
//!
//! A check returns an outcome (values, `io::ErrorKind`s, whether a duration
//! fell inside generous bounds); a panic inside it is an outcome too. The
//! two task modes must give the reference's outcome. The scheduler has one
//! thread: a call that blocked the thread instead of parking the task would
//! stop every other task, which the watchdog then reports as a hang.
//!
//! Without the feature this file compiles to nothing.
#![cfg(feature = "hooks")]

use crate::common;

use std::any::Any;
use std::fmt::Debug;
use std::io::{self, ErrorKind, IoSlice, IoSliceMut, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gofer::{chan, Scheduler};

// ------------------------------------------------------------ the harness

/// Where a check runs, and what its peers are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// On a plain thread, with plain threads as peers: the reference.
    Thread,
    /// Inside a gofer task, with plain threads as peers.
    TaskThreadPeers,
    /// Inside a gofer task, with gofer tasks as peers.
    TaskTaskPeers,
}

const MODES: [Mode; 3] = [Mode::Thread, Mode::TaskThreadPeers, Mode::TaskTaskPeers];

/// How long one mode of one check may take before its child is killed:
/// a passing mode takes well under a second.
const MODE_LIMIT: Duration = Duration::from_secs(15);

/// How long a check waits before it unblocks a call that should have
/// returned by itself (see [`valve`]).
const VALVE: Duration = Duration::from_secs(4);

impl Mode {
    fn from_name(name: &str) -> Mode {
        MODES
            .into_iter()
            .find(|m| format!("{m:?}") == name)
            .unwrap_or_else(|| panic!("no mode named {name:?}"))
    }

    /// Starts a peer of the check: a plain thread, or in
    /// [`Mode::TaskTaskPeers`] a task on the check's scheduler.
    fn peer<T: Send + 'static>(self, f: impl FnOnce() -> T + Send + 'static) -> Peer<T> {
        Peer::start(self == Mode::TaskTaskPeers, f)
    }

    /// Starts a helper of the same kind as the check itself: a plain thread
    /// in [`Mode::Thread`], a task otherwise.
    /// Lets others run: the task's turn, or the thread's.
    fn yield_now(self) {
        match self {
            Mode::Thread => std::thread::yield_now(),
            Mode::TaskThreadPeers | Mode::TaskTaskPeers => gofer::yield_now(),
        }
    }

    fn sibling<T: Send + 'static>(self, f: impl FnOnce() -> T + Send + 'static) -> Peer<T> {
        Peer::start(self != Mode::Thread, f)
    }
}

/// A running peer; [`join`](Peer::join) parks a task and blocks a thread.
struct Peer<T>(chan::Receiver<std::thread::Result<T>>);

impl<T: Send + 'static> Peer<T> {
    fn start(as_task: bool, f: impl FnOnce() -> T + Send + 'static) -> Peer<T> {
        let (tx, rx) = chan::bounded(1);
        let body = move || {
            let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
        };
        if as_task {
            drop(gofer::spawn(body));
        } else {
            std::thread::spawn(body);
        }
        Peer(rx)
    }

    /// The peer's value; its panic is raised again here.
    fn join(self) -> T {
        match self.0.recv() {
            Ok(Ok(v)) => v,
            Ok(Err(p)) => resume_unwind(p),
            Err(_) => panic!("a peer ended without a result"),
        }
    }
}

fn panic_message(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

const OUTCOME: &str = "OUTCOME ";

/// Runs `check` in every mode (each in a child process of this test) and
/// fails unless the two task modes give the plain thread's outcome. In a
/// child, runs the one mode it was started for and prints its outcome.
fn conform<T: Debug + 'static>(test: &str, check: fn(Mode) -> T) {
    if let Some(mode) = common::child_scenario() {
        println!("{OUTCOME}{}", run_mode(Mode::from_name(&mode), check));
        return;
    }
    let outcomes: Vec<(Mode, String)> = MODES
        .into_iter()
        .map(|m| (m, outcome_in_child(test, m)))
        .collect();
    let report: String = outcomes
        .iter()
        .map(|(m, o)| format!("\n  {m:?}: {o}"))
        .collect();
    let reference = &outcomes[0].1;
    assert!(
        !reference.starts_with("panicked") && !reference.starts_with("hung"),
        "{test}: the plain-thread reference itself failed:{report}"
    );
    let differ: Vec<String> = outcomes[1..]
        .iter()
        .filter(|(_, o)| o != reference)
        .map(|(m, _)| format!("{m:?}"))
        .collect();
    assert!(
        differ.is_empty(),
        "{test}: {} differ from the plain thread:{report}",
        differ.join(" and ")
    );
}

/// Runs `check` in `mode`, in this process: its outcome, or how it failed.
fn run_mode<T: Debug + 'static>(mode: Mode, check: fn(Mode) -> T) -> String {
    // One thread, so no Dispatcher: a task that blocks the thread stops
    // every other task (and the watchdog says so).
    let s = Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .name("conform")
        .build()
        .expect("valid scheduler config");
    let (tx, rx) = chan::bounded(1);
    let body = move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(|| {
            format!("{:?}", check(mode))
        })));
    };
    match mode {
        Mode::Thread => drop(std::thread::spawn(body)),
        Mode::TaskThreadPeers | Mode::TaskTaskPeers => drop(s.spawn(body)),
    }
    let outcome = match rx.recv().expect("the check's result") {
        Ok(v) => v,
        Err(p) => format!("panicked: {}", panic_message(&*p)),
    };
    // A peer a failed check left behind may never end: do not wait long.
    let _ = s.shutdown_timeout(Duration::from_secs(1));
    outcome
}

fn outcome_in_child(test: &str, mode: Mode) -> String {
    let Some(out) =
        common::run_child_watched(module_path!(), test, &format!("{mode:?}"), &[], MODE_LIMIT)
    else {
        return format!("hung: killed after {MODE_LIMIT:?}");
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The harness may have printed the test's name on the same line.
    let outcome = stdout
        .lines()
        .find_map(|l| l.find(OUTCOME).map(|at| &l[at + OUTCOME.len()..]));
    match outcome {
        Some(o) => o.to_string(),
        None => format!(
            "panicked: the child gave no outcome\n{}",
            common::describe(&out)
        ),
    }
}

// ------------------------------------------------------------ helpers

/// An `io::Result` reduced to what the checks compare: the value, or the
/// error's kind.
fn kind<T>(r: io::Result<T>) -> Result<T, ErrorKind> {
    r.map_err(|e| e.kind())
}

/// Whether a duration fell inside the bounds a check expects.
#[derive(Debug, PartialEq)]
enum Took {
    InBounds,
    Early(Duration),
    Late(Duration),
}

fn took(d: Duration, lo: Duration, hi: Duration) -> Took {
    if d < lo {
        Took::Early(d)
    } else if d > hi {
        Took::Late(d)
    } else {
        Took::InBounds
    }
}

/// "At once": well under any timeout the checks set.
fn at_once(d: Duration) -> Took {
    took(d, Duration::ZERO, Duration::from_secs(1))
}

/// A timeout's expiry: not early (the kernel counts in ticks, so allow
/// one), not much later than asked on a loaded machine.
fn expired(d: Duration, timeout: Duration) -> Took {
    took(
        d,
        timeout.saturating_sub(Duration::from_millis(10)),
        timeout + Duration::from_secs(2),
    )
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// 1 MiB of a pattern that depends on `seed`.
fn mib(seed: u8) -> Vec<u8> {
    (0..1usize << 20).map(|i| (i % 251) as u8 ^ seed).collect()
}

/// A fresh socket path in the temp directory (the process id keeps the
/// three modes' children and parallel tests apart).
fn sock_path(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let p = std::env::temp_dir().join(format!("gofer-conf-{}-{name}-{n}.sock", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let c = TcpStream::connect(l.local_addr().expect("local_addr")).expect("connect");
    let (s, _) = l.accept().expect("accept");
    (c, s)
}

/// A connected loopback pair whose first end is the accepted one: no
/// hooked call (`connect`) ever took it, so a clone of it made first is a
/// clone of a socket nothing used.
fn tcp_pair_accepted_first() -> (TcpStream, TcpStream) {
    let (c, s) = tcp_pair();
    (s, c)
}

fn unix_pair() -> (UnixStream, UnixStream) {
    UnixStream::pair().expect("socketpair")
}

/// A loopback address nobody listens on (bound, noted, closed).
fn closed_tcp_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind")
}

fn closed_udp_port() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("bind")
}

/// Waits (the real `poll`, in place or on the blocking pool: no events
/// asked, so no wait through the IO manager) until `fd` has an error or a
/// hangup pending, without consuming it.
fn wait_for_error(fd: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let n = unsafe { libc::poll(&mut p, 1, 10_000) };
    n == 1 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// A safety valve for a call that std says returns by itself: unless
/// `done` gets a message within [`VALVE`], writes `b"valve"` into `w`, so a
/// call that wrongly waits forever returns data instead (and the outcome
/// says so) rather than hanging the check.
fn valve<W: Write + Send + 'static>(mode: Mode, mut w: W) -> (chan::Sender<()>, Peer<W>) {
    let (done, rx) = chan::bounded::<()>(1);
    let p = mode.peer(move || {
        if rx.recv_timeout(VALVE).is_err() {
            let _ = w.write_all(b"valve");
        }
        w
    });
    (done, p)
}

/// The streams the generic checks run on.
trait Stream: Read + Write + Send + Sized + 'static {
    fn shutdown(&self, how: Shutdown) -> io::Result<()>;
    fn try_clone(&self) -> io::Result<Self>;
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    fn read_timeout(&self) -> io::Result<Option<Duration>>;
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    fn set_nonblocking(&self, on: bool) -> io::Result<()>;
}

macro_rules! stream {
    ($t:ty) => {
        impl Stream for $t {
            fn shutdown(&self, how: Shutdown) -> io::Result<()> {
                <$t>::shutdown(self, how)
            }
            fn try_clone(&self) -> io::Result<Self> {
                <$t>::try_clone(self)
            }
            fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
                <$t>::set_read_timeout(self, t)
            }
            fn read_timeout(&self) -> io::Result<Option<Duration>> {
                <$t>::read_timeout(self)
            }
            fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
                <$t>::set_write_timeout(self, t)
            }
            fn set_nonblocking(&self, on: bool) -> io::Result<()> {
                <$t>::set_nonblocking(self, on)
            }
        }
    };
}
stream!(TcpStream);
stream!(UnixStream);

/// The kernel's state letter of thread `tid` of this process (`S`: asleep
/// in a system call), or `None` once it is gone.
fn thread_state(tid: i64) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    let close = stat.rfind(')')?;
    stat[close + 1..].trim_start().chars().next()
}

fn gettid() -> i64 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

/// Reads once on `s` on a new plain thread, whatever the mode: once the
/// thread is asleep in the kernel (or has returned), `then` runs, then the
/// read's result comes back.
fn read_on_a_plain_thread<S: Stream>(
    mut s: S,
    then: impl FnOnce(),
) -> (Result<String, ErrorKind>, S) {
    let (tid_tx, tid_rx) = chan::bounded(1);
    let done = Arc::new(AtomicBool::new(false));
    // Joined through a channel: a task parks there, where a thread's join
    // would hold its thread.
    let reader = {
        let done = done.clone();
        Peer::start(false, move || {
            tid_tx.send(gettid()).unwrap();
            let mut buf = [0u8; 64];
            let r = kind(s.read(&mut buf)).map(|n| text(&buf[..n]));
            done.store(true, Ordering::SeqCst);
            (r, s)
        })
    };
    let tid = tid_rx.recv().expect("the reader's thread id");
    common::wait_until("the plain thread sleeps in its read or returns", || {
        done.load(Ordering::SeqCst) || thread_state(tid) == Some('S')
    });
    then();
    reader.join()
}

// ------------------------------------------------------------ connect, accept, data

fn tcp_connect_accept_and_data(mode: Mode) -> impl Debug {
    // The check accepts, a peer connects.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let p = mode.peer(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"hello from the peer").unwrap();
        let mut back = [0u8; 5];
        c.read_exact(&mut back).unwrap();
        (
            c.local_addr().unwrap(),
            c.peer_addr().unwrap() == addr,
            text(&back),
        )
    });
    let (mut s, from) = l.accept().unwrap();
    let mut got = [0u8; 19];
    s.read_exact(&mut got).unwrap();
    s.write_all(b"hello").unwrap();
    let (peer_local, peer_sees_us, back) = p.join();
    let accepted = (text(&got), from == peer_local, peer_sees_us, back);

    // A peer accepts, the check connects (and with a timeout).
    let (addr_tx, addr_rx) = chan::bounded(1);
    let p = mode.peer(move || {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        addr_tx.send(l.local_addr().unwrap()).unwrap();
        let mut got = Vec::new();
        for _ in 0..2 {
            let (mut c, _) = l.accept().unwrap();
            let mut b = [0u8; 4];
            c.read_exact(&mut b).unwrap();
            c.write_all(b"pong").unwrap();
            got.push(text(&b));
        }
        got
    });
    let addr = addr_rx.recv().unwrap();
    let mut connected = Vec::new();
    for c in [
        TcpStream::connect(addr),
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)),
    ] {
        let mut c = c.unwrap();
        c.write_all(b"ping").unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).unwrap();
        connected.push((text(&b), c.peer_addr().unwrap() == addr));
    }
    (accepted, connected, p.join())
}

#[test]
fn tcp_connect_accept_and_data_both_ways() {
    conform(
        "tcp_connect_accept_and_data_both_ways",
        tcp_connect_accept_and_data,
    );
}

fn tcp_connect_refused(_: Mode) -> impl Debug {
    let closed = closed_tcp_port();
    (
        kind(TcpStream::connect(closed).map(drop)),
        kind(TcpStream::connect_timeout(&closed, Duration::from_secs(5)).map(drop)),
    )
}

#[test]
fn tcp_connect_to_a_closed_port_is_refused() {
    conform(
        "tcp_connect_to_a_closed_port_is_refused",
        tcp_connect_refused,
    );
}

fn unix_connect_accept_and_data(mode: Mode) -> impl Debug {
    let path = sock_path("listen");
    let l = UnixListener::bind(&path).unwrap();
    let p = {
        let path = path.clone();
        mode.peer(move || {
            let mut c = UnixStream::connect(&path).unwrap();
            c.write_all(b"hello from the peer").unwrap();
            let mut back = [0u8; 5];
            c.read_exact(&mut back).unwrap();
            let sees = c.peer_addr().unwrap().as_pathname() == Some(path.as_path());
            (sees, text(&back))
        })
    };
    let (mut s, from) = l.accept().unwrap();
    let mut got = [0u8; 19];
    s.read_exact(&mut got).unwrap();
    s.write_all(b"hello").unwrap();
    let accepted = (text(&got), from.is_unnamed(), p.join());
    let _ = std::fs::remove_file(&path);

    // A peer accepts, the check connects.
    let path = sock_path("peer");
    let l = UnixListener::bind(&path).unwrap();
    let p = mode.peer(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).unwrap();
        c.write_all(b"pong").unwrap();
        text(&b)
    });
    let mut c = UnixStream::connect(&path).unwrap();
    c.write_all(b"ping").unwrap();
    let mut b = [0u8; 4];
    c.read_exact(&mut b).unwrap();
    let _ = std::fs::remove_file(&path);
    (accepted, text(&b), p.join())
}

#[test]
fn unix_connect_accept_and_data_both_ways() {
    conform(
        "unix_connect_accept_and_data_both_ways",
        unix_connect_accept_and_data,
    );
}

/// The listener's backlog is cut to one pending connection: std's
/// blocking `connect` waits for an `accept` to make room.
fn unix_connect_full_backlog(mode: Mode) -> impl Debug {
    let path = sock_path("backlog");
    let l = UnixListener::bind(&path).unwrap();
    // SAFETY: listen on a listening socket the check owns only changes its
    // backlog.
    assert_eq!(unsafe { libc::listen(l.as_raw_fd(), 1) }, 0);
    let (go_tx, go_rx) = chan::bounded(1);
    let p = mode.peer(move || {
        go_rx.recv().unwrap();
        (0..3)
            .map(|_| l.accept().map(drop).map_err(|e| e.kind()))
            .collect::<Vec<_>>()
    });
    let mut first_tries = Vec::new();
    let mut conns = Vec::new();
    for i in 0..3 {
        if i == 2 {
            // Two are pending: the third waits for the peer's first accept.
            go_tx.send(()).unwrap();
        }
        let r = UnixStream::connect(&path);
        first_tries.push(r.as_ref().map(drop).map_err(|e| e.kind()));
        // Whatever happened, make the connection, so the peer ends.
        let c = match r {
            Ok(c) => c,
            Err(_) => loop {
                if let Ok(c) = UnixStream::connect(&path) {
                    break c;
                }
                mode.yield_now();
            },
        };
        conns.push(c);
    }
    let accepted = p.join();
    let _ = std::fs::remove_file(&path);
    (first_tries, accepted)
}

#[test]
fn unix_connect_to_a_full_backlog_waits_for_an_accept() {
    conform(
        "unix_connect_to_a_full_backlog_waits_for_an_accept",
        unix_connect_full_backlog,
    );
}

// ------------------------------------------------------------ bulk data

/// 1 MiB each way with `write_all`/`read_exact`: more than the socket
/// buffers hold, so the writer waits for the reader.
fn one_mib_both_ways<S: Stream>(mode: Mode, pair: fn() -> (S, S)) -> impl Debug {
    let (mut a, b) = pair();
    let p = mode.peer(move || {
        let mut b = b;
        let mut got = vec![0u8; 1 << 20];
        b.read_exact(&mut got).unwrap();
        let first = got == mib(1);
        b.write_all(&mib(2)).unwrap();
        b.flush().unwrap();
        first
    });
    a.write_all(&mib(1)).unwrap();
    let mut got = vec![0u8; 1 << 20];
    a.read_exact(&mut got).unwrap();
    (p.join(), got == mib(2))
}

#[test]
fn tcp_read_exact_and_write_all_of_one_mib_both_ways() {
    conform("tcp_read_exact_and_write_all_of_one_mib_both_ways", |m| {
        one_mib_both_ways(m, tcp_pair)
    });
}

#[test]
fn unix_read_exact_and_write_all_of_one_mib_both_ways() {
    conform("unix_read_exact_and_write_all_of_one_mib_both_ways", |m| {
        one_mib_both_ways(m, unix_pair)
    });
}

fn read_v<S: Stream>(s: &mut S) -> (usize, [String; 3]) {
    let (mut x, mut y, mut z) = ([0u8; 4], [0u8; 4], [0u8; 8]);
    let n = s
        .read_vectored(&mut [
            IoSliceMut::new(&mut x),
            IoSliceMut::new(&mut y),
            IoSliceMut::new(&mut z),
        ])
        .unwrap();
    (n, [text(&x), text(&y), text(&z[..n.saturating_sub(8)])])
}

fn write_v<S: Stream>(s: &mut S) -> usize {
    s.write_vectored(&[
        IoSlice::new(b"one "),
        IoSlice::new(b"two "),
        IoSlice::new(b"three"),
    ])
    .unwrap()
}

fn vectored<S: Stream>(mode: Mode, pair: fn() -> (S, S)) -> impl Debug {
    let (mut a, b) = pair();
    let p = mode.peer(move || {
        let mut b = b;
        let got = read_v(&mut b);
        (got, write_v(&mut b))
    });
    let wrote = write_v(&mut a);
    let got = read_v(&mut a);
    (wrote, got, p.join())
}

#[test]
fn tcp_vectored_reads_and_writes() {
    conform("tcp_vectored_reads_and_writes", |m| vectored(m, tcp_pair));
}

#[test]
fn unix_vectored_reads_and_writes() {
    conform("unix_vectored_reads_and_writes", |m| vectored(m, unix_pair));
}

// ------------------------------------------------------------ shutdown, EOF

/// `shutdown(Write)`: the peer, waiting in a read, gets EOF, and can still
/// answer; a write after it is refused. `shutdown(Read)`: reads give EOF.
fn shutdowns<S: Stream>(mode: Mode, pair: fn() -> (S, S)) -> impl Debug {
    let (mut a, b) = pair();
    let (reading_tx, reading_rx) = chan::bounded(1);
    let p = mode.peer(move || {
        let mut b = b;
        let mut buf = [0u8; 8];
        reading_tx.send(()).unwrap();
        let eof = kind(b.read(&mut buf));
        let again = kind(b.read(&mut buf));
        b.write_all(b"after").unwrap();
        (eof, again, b)
    });
    reading_rx.recv().unwrap();
    a.shutdown(Shutdown::Write).unwrap();
    let write_after = kind(a.write(b"x"));
    let mut got = [0u8; 5];
    a.read_exact(&mut got).unwrap();
    let (eof, again, b) = p.join();
    a.shutdown(Shutdown::Read).unwrap();
    let mut buf = [0u8; 8];
    let t = Instant::now();
    let read_after = kind(a.read(&mut buf));
    let read_after_took = at_once(t.elapsed());
    drop(b);
    (
        eof,
        again,
        write_after,
        text(&got),
        read_after,
        read_after_took,
    )
}

#[test]
fn tcp_shutdown_write_gives_the_peer_eof_and_shutdown_read_gives_eof() {
    conform(
        "tcp_shutdown_write_gives_the_peer_eof_and_shutdown_read_gives_eof",
        |m| shutdowns(m, tcp_pair),
    );
}

#[test]
fn unix_shutdown_write_gives_the_peer_eof_and_shutdown_read_gives_eof() {
    conform(
        "unix_shutdown_write_gives_the_peer_eof_and_shutdown_read_gives_eof",
        |m| shutdowns(m, unix_pair),
    );
}

/// The peer writes its last words and drops its end: the check reads them,
/// then EOF, again and again; on a Unix stream a write then fails with
/// `BrokenPipe`.
fn eof_after_drop<S: Stream>(mode: Mode, pair: fn() -> (S, S), write_after: bool) -> impl Debug {
    let (mut a, b) = pair();
    let p = mode.peer(move || {
        let mut b = b;
        b.write_all(b"last words").unwrap();
    });
    let mut all = Vec::new();
    let r = kind(a.read_to_end(&mut all));
    p.join();
    let mut buf = [0u8; 8];
    let eofs = [kind(a.read(&mut buf)), kind(a.read(&mut buf))];
    let write = write_after.then(|| kind(a.write(b"anyone?")));
    (r, text(&all), eofs, write)
}

#[test]
fn tcp_read_gives_eof_after_the_peer_drops() {
    conform("tcp_read_gives_eof_after_the_peer_drops", |m| {
        eof_after_drop(m, tcp_pair, false)
    });
}

#[test]
fn unix_read_gives_eof_and_write_broken_pipe_after_the_peer_drops() {
    conform(
        "unix_read_gives_eof_and_write_broken_pipe_after_the_peer_drops",
        |m| eof_after_drop(m, unix_pair, true),
    );
}

// ------------------------------------------------------------ peek

fn tcp_peek(mode: Mode) -> impl Debug {
    let (a, b) = tcp_pair();
    let (go_tx, go_rx) = chan::bounded(1);
    let p = mode.peer(move || {
        let mut b = b;
        go_rx.recv().unwrap();
        b.write_all(b"abcdef").unwrap();
        b
    });
    go_tx.send(()).unwrap();
    let mut big = [0u8; 16];
    let mut small = [0u8; 3];
    // The first peek waits for the bytes; none of them is consumed.
    let n1 = a.peek(&mut big).unwrap();
    let first = text(&big[..n1]);
    let n2 = a.peek(&mut small).unwrap();
    let second = text(&small[..n2]);
    let mut a = a;
    let n3 = a.read(&mut big).unwrap();
    let read = text(&big[..n3]);
    let _b = p.join();
    (first, second, read)
}

#[test]
fn tcp_peek_waits_for_data_and_does_not_consume_it() {
    conform("tcp_peek_waits_for_data_and_does_not_consume_it", tcp_peek);
}

// ------------------------------------------------------------ timeouts

const TIMEOUT: Duration = Duration::from_millis(150);

fn stream_read_timeout<S: Stream>(mode: Mode, pair: fn() -> (S, S)) -> impl Debug {
    let (mut a, b) = pair();
    let zero = kind(a.set_read_timeout(Some(Duration::ZERO)));
    a.set_read_timeout(Some(TIMEOUT)).unwrap();
    let seen = a.read_timeout().unwrap();
    let mut buf = [0u8; 16];
    let t = Instant::now();
    let r = kind(a.read(&mut buf));
    let d = expired(t.elapsed(), TIMEOUT);
    // The stream still works after a timeout.
    let p = mode.peer(move || {
        let mut b = b;
        b.write_all(b"late").unwrap();
        b
    });
    let later = kind(a.read(&mut buf)).map(|n| text(&buf[..n]));
    a.set_read_timeout(None).unwrap();
    let _b = p.join();
    (zero, seen, r, d, later, a.read_timeout().unwrap())
}

fn read_timeouts(mode: Mode) -> impl Debug {
    let tcp = stream_read_timeout(mode, tcp_pair);
    let unix = stream_read_timeout(mode, unix_pair);
    let mut buf = [0u8; 16];

    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(TIMEOUT)).unwrap();
    let t = Instant::now();
    let udp = (
        kind(u.recv_from(&mut buf).map(drop)),
        expired(t.elapsed(), TIMEOUT),
    );

    let (d, _other) = UnixDatagram::pair().unwrap();
    d.set_read_timeout(Some(TIMEOUT)).unwrap();
    let t = Instant::now();
    let dgram = (kind(d.recv(&mut buf)), expired(t.elapsed(), TIMEOUT));
    (tcp, unix, udp, dgram)
}

#[test]
fn read_timeouts_expire_with_would_block_after_the_timeout() {
    conform(
        "read_timeouts_expire_with_would_block_after_the_timeout",
        read_timeouts,
    );
}

/// Writes 64 KiB at a time into a stream nobody reads, until a write
/// fails: its error kind, how long that last write took, and whether
/// anything was written first.
fn write_until_full<S: Stream>(a: &mut S) -> (Result<(), ErrorKind>, Duration, bool) {
    let chunk = vec![7u8; 64 << 10];
    let mut written = 0usize;
    loop {
        let t = Instant::now();
        match a.write(&chunk) {
            Ok(n) => written += n,
            Err(e) => return (Err(e.kind()), t.elapsed(), written > 0),
        }
        if written > 256 << 20 {
            return (Ok(()), t.elapsed(), true);
        }
    }
}

fn write_timeout<S: Stream>(pair: fn() -> (S, S)) -> impl Debug {
    let (mut a, _never_read) = pair();
    a.set_write_timeout(Some(TIMEOUT)).unwrap();
    let (r, d, wrote) = write_until_full(&mut a);
    (r, expired(d, TIMEOUT), wrote)
}

fn write_timeouts(_: Mode) -> impl Debug {
    (write_timeout(tcp_pair), write_timeout(unix_pair))
}

#[test]
fn write_timeouts_on_a_full_buffer_expire_with_would_block() {
    conform(
        "write_timeouts_on_a_full_buffer_expire_with_would_block",
        write_timeouts,
    );
}

/// A read timeout set through a clone is the socket's: the original's
/// reads time out too.
fn timeout_through_a_clone(mode: Mode) -> impl Debug {
    let (mut a, b) = tcp_pair();
    let clone = a.try_clone().unwrap();
    clone.set_read_timeout(Some(TIMEOUT)).unwrap();
    let seen = a.read_timeout().unwrap();
    let (done, valve) = valve(mode, b);
    let mut buf = [0u8; 16];
    let t = Instant::now();
    let r = kind(a.read(&mut buf)).map(|n| text(&buf[..n]));
    let d = expired(t.elapsed(), TIMEOUT);
    let _ = done.send(());
    let _b = valve.join();
    (seen, r, d)
}

#[test]
fn a_read_timeout_set_through_a_clone_applies_to_the_original() {
    conform(
        "a_read_timeout_set_through_a_clone_applies_to_the_original",
        timeout_through_a_clone,
    );
}

// ------------------------------------------------------------ non-blocking mode

fn stream_nonblocking<S: Stream>(mode: Mode, pair: fn() -> (S, S)) -> impl Debug {
    let (mut a, b) = pair();
    // Were the read to wait, this would end it (and the outcome show it).
    a.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    a.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut buf = [0u8; 16];
    // Used in blocking mode first.
    let p = mode.peer(move || {
        let mut b = b;
        b.write_all(b"first").unwrap();
        b
    });
    let first = kind(a.read(&mut buf)).map(|n| text(&buf[..n]));
    let b = p.join();
    a.set_nonblocking(true).unwrap();
    let t = Instant::now();
    let read = (kind(a.read(&mut buf)), at_once(t.elapsed()));
    let t = Instant::now();
    let (full, _, wrote) = write_until_full(&mut a);
    let write = (full, at_once(t.elapsed()), wrote);
    // Back to blocking: the read waits for the peer's bytes.
    a.set_nonblocking(false).unwrap();
    let (go_tx, go_rx) = chan::bounded(1);
    let p = mode.peer(move || {
        let mut b = b;
        go_rx.recv().unwrap();
        b.write_all(b"late").unwrap();
        b
    });
    go_tx.send(()).unwrap();
    let late = kind(a.read(&mut buf)).map(|n| text(&buf[..n]));
    let _b = p.join();
    (first, read, write, late)
}

fn nonblocking(mode: Mode) -> impl Debug {
    let tcp = stream_nonblocking(mode, tcp_pair);
    let unix = stream_nonblocking(mode, unix_pair);
    let mut buf = [0u8; 16];

    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let t = Instant::now();
    let accept = (kind(l.accept().map(drop)), at_once(t.elapsed()));

    let path = sock_path("nonblocking");
    let ul = UnixListener::bind(&path).unwrap();
    ul.set_nonblocking(true).unwrap();
    let t = Instant::now();
    let unix_accept = (kind(ul.accept().map(drop)), at_once(t.elapsed()));
    let _ = std::fs::remove_file(&path);

    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_nonblocking(true).unwrap();
    let t = Instant::now();
    let udp = (kind(u.recv_from(&mut buf).map(drop)), at_once(t.elapsed()));

    let (d, _other) = UnixDatagram::pair().unwrap();
    d.set_nonblocking(true).unwrap();
    let t = Instant::now();
    let dgram = (kind(d.recv(&mut buf)), at_once(t.elapsed()));
    (tcp, unix, accept, unix_accept, udp, dgram)
}

#[test]
fn non_blocking_mode_set_by_the_program_gives_would_block_at_once() {
    conform(
        "non_blocking_mode_set_by_the_program_gives_would_block_at_once",
        nonblocking,
    );
}

/// `O_NONBLOCK` belongs to the open socket, which a clone shares: set
/// through the clone, it applies to reads on the original.
fn nonblocking_through_a_clone(mode: Mode) -> impl Debug {
    let (mut a, b) = tcp_pair();
    let clone = a.try_clone().unwrap();
    clone.set_nonblocking(true).unwrap();
    let (done, valve) = valve(mode, b);
    let mut buf = [0u8; 16];
    let t = Instant::now();
    let r = kind(a.read(&mut buf)).map(|n| text(&buf[..n]));
    let d = at_once(t.elapsed());
    let _ = done.send(());
    let _b = valve.join();
    (r, d)
}

#[test]
fn non_blocking_mode_set_through_a_clone_applies_to_the_original() {
    conform(
        "non_blocking_mode_set_through_a_clone_applies_to_the_original",
        nonblocking_through_a_clone,
    );
}

// ------------------------------------------------------------ clones

/// A clone made before anything used the stream: the check reads on the
/// original (and waits for the peer's bytes); then a plain thread reads on
/// the clone, and must wait for the next bytes too, not fail with
/// `WouldBlock`. Then the same with a clone made after the use.
fn clone_read_on_a_thread<S: Stream>(mode: Mode, pair: fn() -> (S, S)) -> impl Debug {
    let (mut a, b) = pair();
    let early = a.try_clone().unwrap();
    let (tx, rx) = chan::unbounded::<&'static [u8]>();
    let writer = mode.peer(move || {
        let mut b = b;
        for msg in rx {
            b.write_all(msg).unwrap();
        }
        b
    });
    let mut buf = [0u8; 16];
    tx.send(b"one").unwrap();
    let original = kind(a.read(&mut buf)).map(|n| text(&buf[..n]));
    let (on_early_clone, early) = read_on_a_plain_thread(early, || tx.send(b"two").unwrap());
    let late = a.try_clone().unwrap();
    let (on_late_clone, _late) = read_on_a_plain_thread(late, || tx.send(b"three").unwrap());
    // The clone, back in the check: a blocking read still waits.
    tx.send(b"four").unwrap();
    let mut early = early;
    let back = kind(early.read(&mut buf)).map(|n| text(&buf[..n]));
    drop(tx);
    let _b = writer.join();
    (original, on_early_clone, on_late_clone, back)
}

#[test]
fn tcp_a_clone_read_on_a_plain_thread_waits_for_data() {
    conform("tcp_a_clone_read_on_a_plain_thread_waits_for_data", |m| {
        clone_read_on_a_thread(m, tcp_pair_accepted_first)
    });
}

#[test]
fn unix_a_clone_read_on_a_plain_thread_waits_for_data() {
    conform("unix_a_clone_read_on_a_plain_thread_waits_for_data", |m| {
        clone_read_on_a_thread(m, unix_pair)
    });
}

// ------------------------------------------------------------ a shared listener

const SHARED_CONNS: u32 = 40;
const STOP: u32 = u32::MAX;

/// Accepts until it reads [`STOP`]: the ids it read.
fn acceptor(l: Arc<TcpListener>) -> Vec<u32> {
    let mut ids = Vec::new();
    loop {
        let (mut c, _) = l.accept().unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).unwrap();
        let id = u32::from_le_bytes(b);
        if id == STOP {
            return ids;
        }
        ids.push(id);
        c.write_all(b"k").unwrap();
    }
}

/// Two acceptors (the check and a sibling of its kind) share one listener;
/// two peers connect at once. Each connection is accepted exactly once,
/// and both acceptors end: each takes one `STOP`, sent one at a time.
fn shared_listener(mode: Mode) -> impl Debug {
    let l = Arc::new(TcpListener::bind("127.0.0.1:0").unwrap());
    let addr = l.local_addr().unwrap();
    let other = {
        let l = l.clone();
        mode.sibling(move || acceptor(l))
    };
    let connect = move |id: u32| {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(&id.to_le_bytes()).unwrap();
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
        rest
    };
    let connectors: Vec<_> = (0..2)
        .map(|k| {
            mode.peer(move || {
                (k..SHARED_CONNS)
                    .step_by(2)
                    .filter(|&id| connect(id) != b"k")
                    .count()
            })
        })
        .collect();
    let stopper = mode.peer(move || {
        let unacked = connectors.into_iter().map(Peer::join).collect::<Vec<_>>();
        // The acceptor that takes a STOP closes the connection and ends:
        // the next STOP can only go to the other.
        for _ in 0..2 {
            assert!(connect(STOP).is_empty());
        }
        unacked
    });
    let mut ids = acceptor(l);
    ids.extend(other.join());
    let unacked = stopper.join();
    let count = ids.len();
    ids.sort_unstable();
    ids.dedup();
    (unacked, count, ids == (0..SHARED_CONNS).collect::<Vec<_>>())
}

#[test]
fn a_listener_shared_by_two_acceptors_accepts_each_connection_once() {
    conform(
        "a_listener_shared_by_two_acceptors_accepts_each_connection_once",
        shared_listener,
    );
}

// ------------------------------------------------------------ UDP

fn udp(mode: Mode) -> impl Debug {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let p = mode.peer(move || {
        let mut buf = [0u8; 64];
        let (n, from) = b.recv_from(&mut buf).unwrap();
        let first = (text(&buf[..n]), from == a_addr);
        b.send_to(b"pong", from).unwrap();
        b.send_to(b"peek me", from).unwrap();
        let (n, from) = b.recv_from(&mut buf).unwrap();
        let second = (text(&buf[..n]), from == a_addr);
        b.send_to(&[b'x'; 100], from).unwrap();
        b.send_to(b"after", from).unwrap();
        (first, second)
    });
    let mut buf = [0u8; 64];
    let sent = a.send_to(b"ping", b_addr).unwrap();
    let (n, from) = a.recv_from(&mut buf).unwrap();
    let pong = (text(&buf[..n]), from == b_addr);
    let (n, from) = a.peek_from(&mut buf).unwrap();
    let peeked = (text(&buf[..n]), from == b_addr);
    let mut small = [0u8; 4];
    let (n, _) = a.peek_from(&mut small).unwrap();
    let peeked_small = text(&small[..n]);
    let (n, _) = a.recv_from(&mut buf).unwrap();
    let received = text(&buf[..n]);
    a.connect(b_addr).unwrap();
    let peer_addr = a.peer_addr().unwrap() == b_addr;
    let sent_connected = a.send(b"connected").unwrap();
    let mut ten = [0u8; 10];
    let truncated = a.recv(&mut ten).unwrap();
    let n = a.peek(&mut buf).unwrap();
    let peek_connected = text(&buf[..n]);
    let n = a.recv(&mut buf).unwrap();
    let after = text(&buf[..n]);
    (
        sent,
        pong,
        peeked,
        peeked_small,
        received,
        peer_addr,
        sent_connected,
        truncated,
        peek_connected,
        after,
        p.join(),
    )
}

#[test]
fn udp_send_to_recv_from_connect_and_peek_from() {
    conform("udp_send_to_recv_from_connect_and_peek_from", udp);
}

/// A connected UDP socket whose datagram met a closed port: the next
/// receive reports the refusal (ICMP port unreachable).
fn udp_refused(_: Mode) -> impl Debug {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    a.connect(closed_udp_port()).unwrap();
    let mut buf = [0u8; 16];
    let mut out = Vec::new();
    for _ in 0..2 {
        out.push((kind(a.send(b"anyone?")), kind(a.recv(&mut buf))));
    }
    out
}

#[test]
fn udp_connected_to_a_closed_port_reports_connection_refused() {
    conform(
        "udp_connected_to_a_closed_port_reports_connection_refused",
        udp_refused,
    );
}

// ------------------------------------------------------------ take_error

fn take_error(_: Mode) -> impl Debug {
    let errs = |r: io::Result<Option<io::Error>>| kind(r).map(|e| e.map(|e| e.kind()));
    // A healthy stream has none.
    let (c, _s) = tcp_pair();
    let healthy = errs(c.take_error());

    // UDP: the refusal waits in SO_ERROR until taken, once.
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.connect(closed_udp_port()).unwrap();
    u.send(b"anyone?").unwrap();
    let arrived = wait_for_error(u.as_raw_fd());
    let udp = (arrived, errs(u.take_error()), errs(u.take_error()));

    // TCP: the peer resets (SO_LINGER 0, then close); the reset waits in
    // SO_ERROR until taken; reads then give EOF, writes BrokenPipe.
    let (mut c, s) = tcp_pair();
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: SO_LINGER with a live linger of the right size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
    drop(s);
    let arrived = wait_for_error(c.as_raw_fd());
    let taken = (errs(c.take_error()), errs(c.take_error()));
    let mut buf = [0u8; 8];
    let tcp = (arrived, taken, kind(c.read(&mut buf)), kind(c.write(b"x")));
    (healthy, udp, tcp)
}

#[test]
fn take_error_reports_a_pending_error_once() {
    conform("take_error_reports_a_pending_error_once", take_error);
}

// ------------------------------------------------------------ Unix datagrams

fn unix_datagrams(mode: Mode) -> impl Debug {
    // A connected pair.
    let (a, b) = UnixDatagram::pair().unwrap();
    let p = mode.peer(move || {
        let mut buf = [0u8; 16];
        let n = b.recv(&mut buf).unwrap();
        b.send(b"pong").unwrap();
        text(&buf[..n])
    });
    let mut buf = [0u8; 32];
    let sent = a.send(b"ping").unwrap();
    let n = a.recv(&mut buf).unwrap();
    let pair = (sent, text(&buf[..n]), p.join());

    // Bound to paths: send_to, recv_from (with the sender's path), connect,
    // and an unbound sender.
    let (pa, pb) = (sock_path("dgram-a"), sock_path("dgram-b"));
    let a = UnixDatagram::bind(&pa).unwrap();
    let b = UnixDatagram::bind(&pb).unwrap();
    let p = {
        let (pa, pb) = (pa.clone(), pb.clone());
        mode.peer(move || {
            let mut buf = [0u8; 32];
            let mut got = Vec::new();
            for _ in 0..3 {
                let (n, from) = b.recv_from(&mut buf).unwrap();
                let who = match from.as_pathname() {
                    Some(p) if p == pa => "a",
                    Some(p) if p == pb => "b",
                    Some(_) => "elsewhere",
                    None => "unnamed",
                };
                got.push((text(&buf[..n]), who));
                if got.len() == 1 {
                    b.send_to(b"to a", &pa).unwrap();
                }
            }
            got
        })
    };
    let sent = a.send_to(b"to b", &pb).unwrap();
    let (n, from) = a.recv_from(&mut buf).unwrap();
    let back = (text(&buf[..n]), from.as_pathname() == Some(pb.as_path()));
    a.connect(&pb).unwrap();
    let connected = a.send(b"connected").unwrap();
    let unbound = UnixDatagram::unbound().unwrap();
    let anon = unbound.send_to(b"anon", &pb).unwrap();
    let got = p.join();
    for p in [&pa, &pb] {
        let _ = std::fs::remove_file(p);
    }
    (pair, sent, back, connected, anon, got)
}

#[test]
fn unix_datagram_pairs_paths_and_connect() {
    conform("unix_datagram_pairs_paths_and_connect", unix_datagrams);
}

const DGRAMS: u32 = 200;

/// Sends [`DGRAMS`] datagrams with `send` to a receiver bound at `to`
/// (more than it queues: the sender waits for the receiver to read):
/// the sends that did not go through whole, the datagrams received wrong.
fn dgrams_to_a_slow_receiver(
    mode: Mode,
    to: &Path,
    send: impl Fn(&[u8]) -> io::Result<usize>,
) -> (Vec<Result<usize, ErrorKind>>, usize) {
    let b = UnixDatagram::bind(to).unwrap();
    let p = mode.peer(move || {
        let mut buf = [0u8; 8];
        (0..DGRAMS)
            .map(|i| b.recv(&mut buf).map(|n| buf[..n] == i.to_le_bytes()[..]))
            .filter(|r| !matches!(r, Ok(true)))
            .count()
    });
    let failed = (0..DGRAMS)
        .map(|i| kind(send(&i.to_le_bytes())))
        .filter(|r| *r != Ok(4))
        .collect::<Vec<_>>();
    (failed, p.join())
}

fn unix_datagrams_full(mode: Mode) -> impl Debug {
    let to = sock_path("full-unbound");
    let sender = UnixDatagram::unbound().unwrap();
    let unbound = dgrams_to_a_slow_receiver(mode, &to, |d| sender.send_to(d, &to));
    let _ = std::fs::remove_file(&to);

    let to = sock_path("full-connected");
    let sender = UnixDatagram::unbound().unwrap();
    let connected = dgrams_to_a_slow_receiver(mode, &to, |d| {
        // Connected on first use, once the receiver is bound.
        if sender.peer_addr().is_err() {
            sender.connect(&to)?;
        }
        sender.send(d)
    });
    let _ = std::fs::remove_file(&to);
    (unbound, connected)
}

#[test]
fn unix_datagrams_to_a_full_receiver_wait_for_room() {
    conform(
        "unix_datagrams_to_a_full_receiver_wait_for_room",
        unix_datagrams_full,
    );
}

// ------------------------------------------------------------ files, locks,
// children, names, several descriptors (the blocking pool inside a task)

/// A fresh file path in the temp directory.
fn file_path(name: &str) -> PathBuf {
    sock_path(name).with_extension("file")
}

/// The last OS error's kind, for a raw libc call that returned -1.
fn os_err() -> ErrorKind {
    io::Error::last_os_error().kind()
}

fn files(_: Mode) -> impl Debug {
    use std::fs::{File, OpenOptions};
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::FileExt;
    let path = file_path("files");
    let data = mib(7);
    // open (open64), write, fsync, read, pread, pwrite, vectored.
    let wrote = kind(std::fs::write(&path, &data));
    let read_back = kind(std::fs::read(&path)).map(|d| d == data);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let synced = (kind(f.sync_all()), kind(f.sync_data()));
    let mut buf = [0u8; 16];
    let pread = kind(f.read_at(&mut buf, 1000)).map(|n| (n, buf == data[1000..1016]));
    let pwrite = kind(f.write_at(b"hello", 10));
    let pread_back = kind(f.read_at(&mut buf[..5], 10)).map(|n| text(&buf[..n]));
    let (mut a, mut b) = ([0u8; 3], [0u8; 4]);
    let mut fr = &f;
    let readv = kind(fr.read_vectored(&mut [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)]))
        .map(|n| (n, a == data[..3], b == data[3..7]));
    let writev = kind(fr.write_vectored(&[IoSlice::new(b"ab"), IoSlice::new(b"cd")]));
    // ftruncate (ftruncate64), and fallocate, then the length.
    let truncated = kind(f.set_len(4096)).map(|_| f.metadata().unwrap().len());
    // SAFETY: a valid descriptor; fallocate takes no pointer.
    let fa = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, 1 << 16) };
    let fallocated = (fa, f.metadata().unwrap().len());
    // Errors made on the pool come back with their errno: a write or a
    // truncation through a read-only descriptor, an open of nothing, an
    // exclusive create of what exists.
    let ro = File::open(&path).unwrap();
    let ro_errors = (kind(ro.write_at(b"x", 0)), kind(ro.set_len(0)));
    let missing = kind(File::open(file_path("no-such-file"))).map(|_| ());
    let exists = kind(OpenOptions::new().write(true).create_new(true).open(&path)).map(|_| ());
    // openat with a mode (the variadic argument), creat.
    let at_path = file_path("openat");
    let c = std::ffi::CString::new(at_path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; O_CREAT with its mode.
    let fd = unsafe {
        libc::openat(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
            0o640 as libc::c_uint,
        )
    };
    let mode = std::fs::metadata(&at_path).map(|m| {
        use std::os::unix::fs::PermissionsExt;
        m.permissions().mode() & 0o777
    });
    // SAFETY: the descriptor openat gave.
    unsafe { libc::close(fd) };
    // SAFETY: a NUL-terminated path.
    let again = unsafe {
        libc::openat(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::O_CREAT | libc::O_EXCL,
            0o600,
        )
    };
    let openat = (fd >= 0, kind(mode), again, os_err());
    // SAFETY: a NUL-terminated path and a mode.
    let cfd = unsafe { libc::creat(c.as_ptr(), 0o600) };
    let creat = (cfd >= 0, std::fs::metadata(&at_path).map(|m| m.len()).ok());
    // SAFETY: the descriptor creat gave.
    unsafe { libc::close(cfd) };
    for p in [&path, &at_path] {
        let _ = std::fs::remove_file(p);
    }
    (
        (wrote, read_back, synced),
        (pread, pwrite, pread_back, readv, writev),
        (truncated, fallocated),
        (ro_errors, missing, exists),
        (openat, creat),
    )
}

#[test]
fn file_reads_writes_opens_syncs_and_lengths() {
    conform("file_reads_writes_opens_syncs_and_lengths", files);
}

fn lock(fd: i32, op: i32) -> (i32, Option<ErrorKind>) {
    // SAFETY: a valid descriptor; flock takes no pointer.
    let r = unsafe { libc::flock(fd, op) };
    (r, (r != 0).then(os_err))
}

/// An OFD lock of the whole file (`F_OFD_SETLK`/`F_OFD_SETLKW`).
fn ofd_lock(fd: i32, cmd: i32, ty: i32) -> (i32, Option<ErrorKind>) {
    // SAFETY: flock is plain data; all-zero is a valid whole-file range.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = ty as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: a live flock for the lock commands.
    let r = unsafe { libc::fcntl(fd, cmd, &mut fl) };
    (r, (r != 0).then(os_err))
}

fn file_locks(mode: Mode) -> impl Debug {
    use std::fs::File;
    let path = file_path("locks");
    std::fs::write(&path, b"locked").unwrap();
    let rw = || File::options().read(true).write(true).open(&path).unwrap();
    let (a, b) = (rw(), rw());
    let (fa, fb) = (a.as_raw_fd(), b.as_raw_fd());
    // flock: taken, refused without waiting, then waited for by a peer
    // until released here.
    let taken = lock(fa, libc::LOCK_EX);
    let refused = lock(fb, libc::LOCK_EX | libc::LOCK_NB);
    let p = mode.peer(move || {
        let r = lock(b.as_raw_fd(), libc::LOCK_EX);
        let at = Instant::now();
        let un = lock(b.as_raw_fd(), libc::LOCK_UN);
        (r, un, at, b)
    });
    std::thread::sleep(Duration::from_millis(50));
    let released_at = Instant::now();
    let released = lock(fa, libc::LOCK_UN);
    let (got, un, at, b) = p.join();
    let flock = (taken, refused, released, got, un, at >= released_at);
    // OFD locks (fcntl F_OFD_SETLKW) conflict between open files too.
    let taken = ofd_lock(fa, libc::F_OFD_SETLKW, libc::F_RDLCK);
    let refused = ofd_lock(b.as_raw_fd(), libc::F_OFD_SETLK, libc::F_WRLCK);
    let p = mode.peer(move || {
        let r = ofd_lock(b.as_raw_fd(), libc::F_OFD_SETLKW, libc::F_WRLCK);
        let at = Instant::now();
        ofd_lock(b.as_raw_fd(), libc::F_OFD_SETLK, libc::F_UNLCK);
        (r, at)
    });
    std::thread::sleep(Duration::from_millis(50));
    let released_at = Instant::now();
    let released = ofd_lock(fa, libc::F_OFD_SETLK, libc::F_UNLCK);
    let (got, at) = p.join();
    let ofd = (taken, refused, released, got, at >= released_at);
    // lockf and process locks (F_SETLKW) on a free file: taken at once.
    let w = rw();
    // SAFETY: a valid descriptor; lockf takes no pointer.
    let lockf = unsafe { libc::lockf(w.as_raw_fd(), libc::F_LOCK, 0) };
    let setlkw = ofd_lock(w.as_raw_fd(), libc::F_SETLKW, libc::F_WRLCK);
    // A bad descriptor: errno comes back.
    let bad = (
        lock(-1, libc::LOCK_EX),
        ofd_lock(-1, libc::F_SETLKW, libc::F_WRLCK),
    );
    let _ = std::fs::remove_file(&path);
    (flock, ofd, lockf, setlkw, bad)
}

#[test]
fn file_locks_wait_for_their_release() {
    conform("file_locks_wait_for_their_release", file_locks);
}

fn children(_: Mode) -> impl Debug {
    use std::process::Command;
    let status = Command::new("sh")
        .args(["-c", "exit 3"])
        .status()
        .map(|s| s.code());
    let output = Command::new("sh")
        .args(["-c", "echo out; echo err >&2"])
        .output()
        .map(|o| (text(&o.stdout), text(&o.stderr), o.status.success()));
    let mut c = Command::new("sleep").arg("0.3").spawn().unwrap();
    let not_yet = kind(c.try_wait()).map(|s| s.is_some());
    let waited = kind(c.wait()).map(|s| s.success());
    let again = kind(c.try_wait()).map(|s| s.map(|s| s.success()));
    // No child left: waitpid, wait4, waitid fail with ECHILD.
    // SAFETY: no status pointer; no rusage; a zeroed siginfo.
    let none = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        (
            (libc::waitpid(-1, std::ptr::null_mut(), 0), os_err()),
            (
                libc::wait4(-1, std::ptr::null_mut(), 0, std::ptr::null_mut()),
                os_err(),
            ),
            (
                libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED),
                os_err(),
            ),
        )
    };
    (status, kind(output), not_yet, waited, again, none)
}

#[test]
fn children_are_waited_for_with_their_status() {
    conform("children_are_waited_for_with_their_status", children);
}

fn names(_: Mode) -> impl Debug {
    use std::net::ToSocketAddrs;
    let mut addrs: Vec<String> = kind("localhost:80".to_socket_addrs())
        .map(|a| a.map(|a| a.to_string()).collect())
        .unwrap_or_default();
    addrs.sort();
    addrs.dedup();
    let numeric = kind("127.0.0.1:8080".to_socket_addrs()).map(|a| a.count());
    // getnameinfo of 127.0.0.1, numeric.
    // SAFETY: sockaddr_in is plain data.
    let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sin.sin_family = libc::AF_INET as libc::sa_family_t;
    sin.sin_port = 80u16.to_be();
    sin.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
    let mut host = [0 as libc::c_char; 64];
    let mut serv = [0 as libc::c_char; 16];
    // SAFETY: a live sockaddr_in and two buffers of the lengths given.
    let r = unsafe {
        libc::getnameinfo(
            (&sin as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            host.as_mut_ptr(),
            host.len() as libc::socklen_t,
            serv.as_mut_ptr(),
            serv.len() as libc::socklen_t,
            libc::NI_NUMERICHOST | libc::NI_NUMERICSERV,
        )
    };
    // SAFETY: getnameinfo wrote NUL-terminated strings.
    let cstr = |b: &[libc::c_char]| {
        unsafe { std::ffi::CStr::from_ptr(b.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    let nameinfo = (r, cstr(&host), cstr(&serv));
    (addrs, numeric, nameinfo)
}

#[test]
fn names_resolve_as_on_a_thread() {
    conform("names_resolve_as_on_a_thread", names);
}

fn pipe_fds() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: two ints for pipe(2) to fill.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    (fds[0], fds[1])
}

/// Two pipes; a plain thread writes one byte into the second after
/// `after`. Never a task, in any mode: a wait on several descriptors (or
/// on an epoll instance) blocks its thread inside a task too (an event
/// loop's wait, which must not let a sibling task run), and a peer task
/// on the check's one-Processer scheduler would never get to write.
fn two_pipes(after: Duration) -> ([i32; 2], [i32; 2], Peer<()>) {
    let (r1, w1) = pipe_fds();
    let (r2, w2) = pipe_fds();
    let p = Peer::start(false, move || {
        std::thread::sleep(after);
        // SAFETY: one byte from a live buffer.
        unsafe { libc::write(w2, b"x".as_ptr().cast(), 1) };
    });
    ([r1, r2], [w1, w2], p)
}

fn close_all(fds: &[i32]) {
    for &fd in fds {
        // SAFETY: descriptors the check made.
        unsafe { libc::close(fd) };
    }
}

// The same in every mode: the peers are plain threads (see `two_pipes`).
fn several_descriptors(_: Mode) -> impl Debug {
    let pfds = |r: [i32; 2]| {
        r.map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
    };
    // poll on two pipes, one written later; then an expiry; then a
    // descriptor that is not open.
    let (r, w, p) = two_pipes(Duration::from_millis(50));
    let mut fds = pfds(r);
    // SAFETY: two live pollfds.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, 10_000) };
    p.join();
    let poll = (n, fds.map(|f| f.revents));
    let mut fds = pfds([r[0], r[0]]);
    let t = Instant::now();
    // SAFETY: as above.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, 100) };
    let poll_expiry = (n, expired(t.elapsed(), Duration::from_millis(100)));
    let mut fds = pfds([r[0], 100_000]);
    // SAFETY: as above.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, 10_000) };
    let poll_nval = (n, fds.map(|f| f.revents));
    close_all(&r);
    close_all(&w);

    // ppoll, the same with a timespec.
    let (r, w, p) = two_pipes(Duration::from_millis(50));
    let mut fds = pfds(r);
    let ts = libc::timespec {
        tv_sec: 10,
        tv_nsec: 0,
    };
    // SAFETY: two live pollfds, a live timespec, no mask.
    let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
    p.join();
    let ppoll = (n, fds.map(|f| f.revents));
    close_all(&r);
    close_all(&w);

    // select: the sets as they come back, the timeout left, an error.
    let (r, w, p) = two_pipes(Duration::from_millis(50));
    // SAFETY: fd_set is plain data; FD_ZERO/FD_SET/FD_ISSET on live sets
    // with descriptors below FD_SETSIZE.
    let select = unsafe {
        let mut set: libc::fd_set = std::mem::zeroed();
        libc::FD_ZERO(&mut set);
        libc::FD_SET(r[0], &mut set);
        libc::FD_SET(r[1], &mut set);
        let mut tv = libc::timeval {
            tv_sec: 10,
            tv_usec: 0,
        };
        let nfds = r[0].max(r[1]) + 1;
        let n = libc::select(
            nfds,
            &mut set,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut tv,
        );
        let left = tv.tv_sec > 0 && tv.tv_sec <= 10;
        (
            n,
            libc::FD_ISSET(r[0], &set),
            libc::FD_ISSET(r[1], &set),
            left,
        )
    };
    p.join();
    // SAFETY: no sets, a live timeval; a negative count is refused.
    let select_err = unsafe {
        let mut tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        let n = libc::select(
            -1,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut tv,
        );
        (n, os_err())
    };
    close_all(&r);
    close_all(&w);

    // epoll_wait on an epoll instance of the program's own.
    let (r, w, p) = two_pipes(Duration::from_millis(50));
    // SAFETY: epoll calls on descriptors the check made, with live events.
    let epoll = unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        for (i, &fd) in r.iter().enumerate() {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: 10 + i as u64,
            };
            libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev);
        }
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 4];
        let n = libc::epoll_wait(ep, evs.as_mut_ptr(), 4, 10_000);
        let got = (n, evs[0].u64, evs[0].events);
        let t = Instant::now();
        let mut buf = [0u8; 1];
        libc::read(r[1], buf.as_mut_ptr().cast(), 1);
        let n = libc::epoll_pwait(ep, evs.as_mut_ptr(), 4, 100, std::ptr::null());
        let expiry = (n, expired(t.elapsed(), Duration::from_millis(100)));
        // Not an epoll descriptor: EINVAL comes back.
        let n = libc::epoll_wait(r[0], evs.as_mut_ptr(), 4, 100);
        let not_epoll = (n, os_err());
        libc::close(ep);
        (got, expiry, not_epoll)
    };
    p.join();
    close_all(&r);
    close_all(&w);
    (
        poll,
        poll_expiry,
        poll_nval,
        ppoll,
        select,
        select_err,
        epoll,
    )
}

#[test]
fn waits_on_several_descriptors_give_the_real_results() {
    conform(
        "waits_on_several_descriptors_give_the_real_results",
        several_descriptors,
    );
}
