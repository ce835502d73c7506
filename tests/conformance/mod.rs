//! The harness of the conformance suites (`tests/net_conformance_*.rs`):
//! each check is written once, as the body of a [`check!`], and compiled
//! twice, against `std::net` (with `std::os::unix::net`) and against
//! `gofer::net` (with `gofer::net::unix`). The body records what it sees in
//! a [`Log`]: results, error kinds with their OS error numbers, and values
//! that do not vary between runs (never a port number, say).
//!
//! A check runs in a child process under a watchdog (a regression may
//! hang): std's version once, on plain threads, which is the reference;
//! then gofer's in three modes, each of which must log exactly the same:
//!
//! 1. [`Mode::Thread`]: on a plain thread, its peers on plain threads;
//! 2. [`Mode::TaskThreadPeers`]: inside a gofer task, its peers on plain
//!    threads;
//! 3. [`Mode::TaskTaskPeers`]: inside a task, its peers tasks too.
//!
//! Bodies synchronise with their peers through `gofer::chan` (it parks a
//! task and blocks a thread), never by sleeping.
#![allow(dead_code)]

use std::fmt::Debug;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Where a check's main part and its peers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The main part and its peers on plain threads.
    Thread,
    /// The main part in a task, its peers on plain threads.
    TaskThreadPeers,
    /// The main part and its peers in tasks.
    TaskTaskPeers,
}

/// What a check body is given: its mode, and ways to start peers and to
/// name addresses.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    pub mode: Mode,
}

/// A peer of a check: a plain thread or a task.
pub enum Peer<T> {
    Thread(std::thread::JoinHandle<T>),
    Task(gofer::JoinHandle<T>),
}

impl<T> Peer<T> {
    /// Waits for the peer and returns what it returned; a peer's panic
    /// fails the check.
    pub fn join(self) -> T {
        match self {
            Peer::Thread(h) => h.join().expect("a peer thread panicked"),
            Peer::Task(h) => h.join().expect("a peer task panicked"),
        }
    }
}

impl Ctx {
    /// Starts `f` as a peer: a task in [`Mode::TaskTaskPeers`] (on the
    /// scheduler of the calling task), a plain thread otherwise.
    pub fn peer<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Peer<T> {
        match self.mode {
            Mode::TaskTaskPeers => Peer::Task(gofer::spawn(f)),
            Mode::Thread | Mode::TaskThreadPeers => Peer::Thread(std::thread::spawn(f)),
        }
    }

    /// A fresh path for a Unix socket, removed when the guard drops.
    pub fn path(&self) -> TempPath {
        let p = std::env::temp_dir().join(format!(
            "gofer-conf-{}-{}.sock",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&p);
        TempPath(p)
    }

    /// A fresh name in the abstract namespace.
    pub fn abstract_name(&self) -> Vec<u8> {
        format!(
            "gofer-conf-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        )
        .into_bytes()
    }

    /// An address of 127.0.0.1 nobody listens on (a port bound, then
    /// freed).
    pub fn closed_port(&self) -> std::net::SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("local_addr")
    }
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A path that is removed when dropped.
pub struct TempPath(pub PathBuf);

impl AsRef<Path> for TempPath {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Whether a call that waited `waited` waited out the socket timeout
/// `timeout`, not returning early.
///
/// The kernel counts socket timeouts in jiffies and its timer may fire up
/// to one jiffy (10 ms at `HZ=100`) before the full time, so a plain
/// thread's `read` can return slightly early; the slack below covers that.
pub fn not_early(waited: Duration, timeout: Duration) -> bool {
    const JIFFY_SLACK: Duration = Duration::from_millis(20);
    waited + JIFFY_SLACK >= timeout
}

/// Whether a call that waited `waited` ended by the socket timeout
/// `timeout` ([`not_early`]) rather than by `long`, a far longer one it was
/// set to before.
pub fn waited_timeout(waited: Duration, timeout: Duration, long: Duration) -> bool {
    not_early(waited, timeout) && waited < long
}

/// What a check saw, in order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Log(pub Vec<String>);

/// An error as the log shows it: its kind, and its OS error number if it
/// has one.
pub fn err(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => format!("Err({:?}, os {n})", e.kind()),
        None => format!("Err({:?})", e.kind()),
    }
}

impl Log {
    /// Records a result: the value (`Debug`) or the error.
    pub fn r<T: Debug>(&mut self, what: &str, r: &io::Result<T>) {
        let s = match r {
            Ok(v) => format!("Ok({v:?})"),
            Err(e) => err(e),
        };
        self.0.push(format!("{what}: {s}"));
    }

    /// Records whether a result is `Ok` (not its value), or the error.
    pub fn ok<T>(&mut self, what: &str, r: &io::Result<T>) {
        let s = match r {
            Ok(_) => "Ok".to_string(),
            Err(e) => err(e),
        };
        self.0.push(format!("{what}: {s}"));
    }

    /// Records a value.
    pub fn v<T: Debug>(&mut self, what: &str, v: T) {
        self.0.push(format!("{what}: {v:?}"));
    }
}

/// Runs std's version of the check `name` of the module `module`
/// (`module_path!()` where the check is), then gofer's in each mode, in a
/// child process, and fails unless every gofer log equals std's.
pub fn compare(
    module: &str,
    name: &str,
    std_version: fn(&Ctx, &mut Log),
    gofer_version: fn(&Ctx, &mut Log),
) {
    super::common::in_child(module, name, || {
        let mut reference = Log::default();
        std_version(&Ctx { mode: Mode::Thread }, &mut reference);
        assert!(
            !reference.0.is_empty(),
            "{name}: std's version logged nothing"
        );
        // Shown by the parent when the check fails.
        println!("std: {:#?}", reference.0);
        let sched = gofer::Scheduler::builder()
            .min_threads(2)
            .name("conf")
            .build()
            .expect("a scheduler");
        for mode in [Mode::Thread, Mode::TaskThreadPeers, Mode::TaskTaskPeers] {
            let ctx = Ctx { mode };
            let log = match mode {
                Mode::Thread => {
                    let mut log = Log::default();
                    gofer_version(&ctx, &mut log);
                    log
                }
                Mode::TaskThreadPeers | Mode::TaskTaskPeers => sched
                    .spawn(move || {
                        let mut log = Log::default();
                        gofer_version(&ctx, &mut log);
                        log
                    })
                    .join()
                    .expect("the check's task panicked"),
            };
            assert_eq!(
                log.0, reference.0,
                "{name}: gofer, {mode:?} (left), differs from std (right)"
            );
        }
        sched.shutdown();
    });
}

/// The description of a Unix socket address the logs use: its form and
/// its name.
pub fn unix_addr(a: &std::os::unix::net::SocketAddr) -> String {
    use std::os::linux::net::SocketAddrExt;
    if a.is_unnamed() {
        "unnamed".to_string()
    } else if let Some(p) = a.as_pathname() {
        format!("path {}", p.display())
    } else if let Some(n) = a.as_abstract_name() {
        format!("abstract {}", String::from_utf8_lossy(n))
    } else {
        "?".to_string()
    }
}

/// What std has only unstable (`unix_socket_peek`), done by hand for
/// std's types, with the signatures gofer's methods have.
pub mod std_extras {
    use std::io;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::{UnixDatagram, UnixStream};

    fn peek_fd(fd: i32, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of its length during the call.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_PEEK) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// `UnixStream::peek`.
    pub fn stream_peek(s: &UnixStream, buf: &mut [u8]) -> io::Result<usize> {
        peek_fd(s.as_raw_fd(), buf)
    }

    /// `UnixDatagram::peek`.
    pub fn datagram_peek(s: &UnixDatagram, buf: &mut [u8]) -> io::Result<usize> {
        peek_fd(s.as_raw_fd(), buf)
    }

    /// `UnixDatagram::peek_from`, the address described (see
    /// [`unix_addr`](super::unix_addr)).
    pub fn datagram_peek_from(s: &UnixDatagram, buf: &mut [u8]) -> io::Result<(usize, String)> {
        // SAFETY: an all-zero sockaddr_un is valid for the kernel to fill.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        // SAFETY: buffer, address and length are valid for the call.
        let n = unsafe {
            libc::recvfrom(
                s.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_PEEK,
                (&mut addr as *mut libc::sockaddr_un).cast(),
                &mut len,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let base = std::mem::offset_of!(libc::sockaddr_un, sun_path);
        let path: Vec<u8> = addr.sun_path[..(len as usize).saturating_sub(base)]
            .iter()
            .map(|&c| c as u8)
            .collect();
        let desc = match path.first() {
            None => "unnamed".to_string(),
            Some(0) => format!("abstract {}", String::from_utf8_lossy(&path[1..])),
            Some(_) => {
                let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
                format!("path {}", String::from_utf8_lossy(&path[..end]))
            }
        };
        Ok((n as usize, desc))
    }
}

/// gofer's side of [`std_extras`].
pub mod gofer_extras {
    use gofer::net::unix::{UnixDatagram, UnixStream};
    use std::io;

    /// `UnixStream::peek`.
    pub fn stream_peek(s: &UnixStream, buf: &mut [u8]) -> io::Result<usize> {
        s.peek(buf)
    }

    /// `UnixDatagram::peek`.
    pub fn datagram_peek(s: &UnixDatagram, buf: &mut [u8]) -> io::Result<usize> {
        s.peek(buf)
    }

    /// `UnixDatagram::peek_from`, the address described.
    pub fn datagram_peek_from(s: &UnixDatagram, buf: &mut [u8]) -> io::Result<(usize, String)> {
        s.peek_from(buf).map(|(n, a)| (n, super::unix_addr(&a)))
    }
}

/// Defines a test that runs `body` against std and against gofer (see the
/// module docs): `check!(fn name(ctx, log) { ... });`. Inside the body,
/// `TcpListener`, `TcpStream`, `UdpSocket`, `UnixListener`, `UnixStream`
/// and `UnixDatagram` name the flavour's types, and `extras` its module of
/// what std has only unstable.
macro_rules! check {
    ($(#[$m:meta])* fn $name:ident($ctx:ident, $log:ident) $body:block) => {
        $(#[$m])*
        #[test]
        fn $name() {
            #[allow(unused_imports, unused_mut, unused_variables, clippy::unused_io_amount)]
            mod with_std {
                use super::*;
                use std::net::{TcpListener, TcpStream, UdpSocket};
                use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};
                use conformance::std_extras as extras;
                pub fn run($ctx: &conformance::Ctx, $log: &mut conformance::Log) $body
            }
            #[allow(unused_imports, unused_mut, unused_variables, clippy::unused_io_amount)]
            mod with_gofer {
                use super::*;
                use gofer::net::{TcpListener, TcpStream, UdpSocket};
                use gofer::net::unix::{UnixDatagram, UnixListener, UnixStream};
                use conformance::gofer_extras as extras;
                pub fn run($ctx: &conformance::Ctx, $log: &mut conformance::Log) $body
            }
            conformance::compare(
                module_path!(),
                stringify!($name),
                with_std::run,
                with_gofer::run,
            );
        }
    };
}
pub(crate) use check;
