//! Helpers shared by the IO tests: schedulers, quiescence, descriptor
//! limits, pipes and CPU time.
//!
//! Each test file includes this module (next to `common`) and uses only
//! part of it.
#![allow(dead_code)]

use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::mpsc;
use std::time::Duration;

use gofer::Scheduler;

use super::common::{wait_until, PATIENCE};

/// A scheduler of exactly `threads` Processers. With one thread there is
/// no Dispatcher and no extra thread: a task that held the thread would
/// stop every other task, which is what the "thread stays free" tests
/// rely on.
pub fn sched(name: &str, threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

/// Every Processer of `s` sleeps with nothing queued: no task runs or is
/// about to, so every task alive is parked.
pub fn quiescent(s: &Scheduler) -> bool {
    s.stats()
        .processers
        .iter()
        .filter(|p| p.kind != "caller")
        .all(|p| p.sleeping && p.queued == 0 && !p.running)
}

/// Waits until every task alive on `s` is parked (see [`quiescent`]).
pub fn wait_parked(s: &Scheduler, what: &str) {
    wait_until(what, || quiescent(s));
}

/// Receives from `rx`, failing the test after [`PATIENCE`] with `what`:
/// the way these tests wait for a task that might never wake.
pub fn recv<T>(rx: &mpsc::Receiver<T>, what: &str) -> T {
    rx.recv_timeout(PATIENCE)
        .unwrap_or_else(|e| panic!("{what}: nothing after {PATIENCE:?} ({e})"))
}

/// Raises the soft limit on open descriptors towards `want` (never above
/// the hard limit) and returns the soft limit now in force.
pub fn raise_nofile_limit(want: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into a live local.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    assert_eq!(r, 0, "getrlimit: {}", std::io::Error::last_os_error());
    if lim.rlim_cur < want {
        let raised = libc::rlimit {
            rlim_cur: want.min(lim.rlim_max),
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads one rlimit from a live local.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = raised.rlim_cur;
        }
    }
    lim.rlim_cur
}

/// A pipe, both ends non-blocking and close-on-exec: `(read, write)`.
pub fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into a live array.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    assert_eq!(r, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors are fresh and owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Fills the pipe whose write end is `w` until a write would block;
/// returns the bytes written.
pub fn fill_pipe(w: &OwnedFd) -> usize {
    use std::os::fd::AsRawFd;
    let chunk = [0u8; 4096];
    let mut total = 0;
    loop {
        // SAFETY: writes from a live buffer to an open descriptor.
        let n = unsafe { libc::write(w.as_raw_fd(), chunk.as_ptr().cast(), chunk.len()) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
            return total;
        }
        total += n as usize;
    }
}

/// Reads what the pipe whose read end is `r` holds, without waiting;
/// returns the bytes read.
pub fn drain_pipe(r: &OwnedFd) -> usize {
    use std::os::fd::AsRawFd;
    let mut buf = [0u8; 4096];
    let mut total = 0;
    loop {
        // SAFETY: reads into a live buffer from an open descriptor.
        let n = unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            return total;
        }
        total += n as usize;
    }
}

/// CPU time (user + system) this process has used so far.
pub fn process_cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is a valid value to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into a live local.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(r, 0, "getrusage: {}", std::io::Error::last_os_error());
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Percentiles of `v` (sorted in place): `(p50, p99, max)`.
pub fn percentiles(v: &mut [Duration]) -> (Duration, Duration, Duration) {
    assert!(!v.is_empty());
    v.sort();
    let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    (at(0.50), at(0.99), v[v.len() - 1])
}
