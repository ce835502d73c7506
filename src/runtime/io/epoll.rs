//! The OS layer of a reactor (one per core Processer): one epoll instance
//! and the eventfd that interrupts a wait on it.
//!
//! Thin and Linux-only on purpose. Every socket is added once, edge
//! triggered, for both directions (`EPOLLIN | EPOLLOUT | EPOLLRDHUP |
//! EPOLLET`), and never modified: readiness is tracked per socket above this
//! layer, so a wait costs no `epoll_ctl` (a registration that moves to
//! another Processer's reactor costs an add there and a delete here). Waits use `epoll_pwait2`, whose
//! timeout has nanosecond resolution: the reactor's wait doubles as the
//! timer wait of the Processer that polls, and `epoll_wait`'s whole
//! milliseconds (rounded up) would make every timer on that Processer up to
//! a millisecond late. Kernels older than 5.11 lack `epoll_pwait2`; there the
//! wait falls back to `epoll_wait` with the timeout rounded up to whole
//! milliseconds.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The token of the eventfd's own registration; socket tokens are addresses
/// of their readiness state, which are never this value.
pub(crate) const WAKE_TOKEN: u64 = u64::MAX;

/// Event bits as epoll reports them.
pub(crate) const IN: u32 = libc::EPOLLIN as u32;
pub(crate) const OUT: u32 = libc::EPOLLOUT as u32;
pub(crate) const RDHUP: u32 = libc::EPOLLRDHUP as u32;
pub(crate) const HUP: u32 = libc::EPOLLHUP as u32;
pub(crate) const ERR: u32 = libc::EPOLLERR as u32;

/// `epoll_pwait2` is missing (ENOSYS) on this kernel: use `epoll_wait`.
static NO_PWAIT2: AtomicBool = AtomicBool::new(false);

/// An epoll instance with an eventfd registered in it.
pub(crate) struct Epoll {
    epfd: OwnedFd,
    wake: OwnedFd,
}

/// A buffer of events filled by [`Epoll::wait`].
pub(crate) struct Events {
    buf: Vec<libc::epoll_event>,
    len: usize,
}

impl Events {
    pub(crate) fn with_capacity(n: usize) -> Events {
        Events {
            buf: vec![libc::epoll_event { events: 0, u64: 0 }; n.max(1)],
            len: 0,
        }
    }

    /// The `(token, event bits)` pairs of the last wait.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.buf[..self.len].iter().map(|e| (e.u64, e.events))
    }
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Epoll {
    pub(crate) fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscalls; each result is checked before use, and each
        // new descriptor is owned by an OwnedFd at once.
        let epfd = unsafe { OwnedFd::from_raw_fd(cvt(libc::epoll_create1(libc::EPOLL_CLOEXEC))?) };
        // SAFETY: as above.
        let wake = unsafe {
            OwnedFd::from_raw_fd(cvt(libc::eventfd(
                0,
                libc::EFD_NONBLOCK | libc::EFD_CLOEXEC,
            ))?)
        };
        let ep = Epoll { epfd, wake };
        // Level-triggered: a wake-up written before the wait starts is seen
        // by it, and stays visible until drained.
        ep.ctl(
            libc::EPOLL_CTL_ADD,
            ep.wake.as_raw_fd(),
            libc::EPOLLIN as u32,
            WAKE_TOKEN,
        )?;
        Ok(ep)
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid event struct for the call's duration;
        // epoll_ctl validates the descriptors.
        cvt(unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), op, fd, &mut ev) })?;
        Ok(())
    }

    /// Adds `fd` for both directions, edge triggered, with `token`.
    pub(crate) fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let events = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    /// Removes `fd`. Must come before the fd is closed: a registration
    /// outlives `close` while a duplicate of the fd keeps the socket open,
    /// and would go on reporting events for it.
    pub(crate) fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits for events, at most `timeout` (`None`: without a limit).
    /// Returns how many were stored in `events`; an interrupted wait
    /// returns zero.
    pub(crate) fn wait(&self, events: &mut Events, timeout: Option<Duration>) -> io::Result<usize> {
        let max = events.buf.len() as libc::c_int;
        let ptr = events.buf.as_mut_ptr();
        let n = if NO_PWAIT2.load(Ordering::Relaxed) {
            self.wait_ms(ptr, max, timeout)
        } else {
            let ts = timeout.map(|d| libc::timespec {
                tv_sec: d.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            });
            let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const _);
            // SAFETY: `ptr` points at `max` writable events; `tsp` is null or
            // points at a timespec alive for the call; no signal mask.
            let r = unsafe {
                libc::epoll_pwait2(self.epfd.as_raw_fd(), ptr, max, tsp, std::ptr::null())
            };
            if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                NO_PWAIT2.store(true, Ordering::Relaxed);
                self.wait_ms(ptr, max, timeout)
            } else {
                r
            }
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                events.len = 0;
                return Ok(0);
            }
            return Err(e);
        }
        events.len = n as usize;
        Ok(events.len)
    }

    fn wait_ms(
        &self,
        ptr: *mut libc::epoll_event,
        max: libc::c_int,
        timeout: Option<Duration>,
    ) -> libc::c_int {
        // Round up, so a wait never ends before its timeout.
        let ms = timeout.map_or(-1, |d| {
            d.as_nanos()
                .div_ceil(1_000_000)
                .min(libc::c_int::MAX as u128) as libc::c_int
        });
        // SAFETY: `ptr` points at `max` writable events.
        unsafe { libc::epoll_wait(self.epfd.as_raw_fd(), ptr, max, ms) }
    }

    /// Makes a wait in progress (or the next one) return.
    ///
    /// Pushes made under a thread-local borrow (`processer/route.rs`, `with_table`)
    /// reach it, so nothing here may switch the task out: the eventfd is
    /// written with libc's own `write`, past the `hooks` feature's (which
    /// would pass the eventfd through anyway, but whose code can switch,
    /// and `scripts/check_tls_switch.py` follows every path it inlines).
    pub(crate) fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd. A full
        // counter (EAGAIN) already means "wake", so the result is ignored.
        unsafe { libc_write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Clears pending wake-ups (after a wait reported the eventfd).
    pub(crate) fn drain_wake(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our non-blocking
        // eventfd; EAGAIN (nothing pending) is fine.
        unsafe { libc_read(self.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

/// libc's `write`, never the `hooks` feature's: for the runtime's own
/// eventfd.
///
/// # Safety
/// `write(2)`'s contract.
unsafe fn libc_write(fd: libc::c_int, buf: *const libc::c_void, n: usize) -> isize {
    #[cfg(feature = "hooks")]
    // SAFETY: the caller keeps `write`'s contract.
    return unsafe { crate::sys::real::write(fd, buf, n) };
    #[cfg(not(feature = "hooks"))]
    // SAFETY: the caller keeps `write`'s contract.
    return unsafe { libc::write(fd, buf, n) };
}

/// libc's `read`, never the `hooks` feature's: for the runtime's own
/// eventfd.
///
/// # Safety
/// `read(2)`'s contract.
unsafe fn libc_read(fd: libc::c_int, buf: *mut libc::c_void, n: usize) -> isize {
    #[cfg(feature = "hooks")]
    // SAFETY: the caller keeps `read`'s contract.
    return unsafe { crate::sys::real::read(fd, buf, n) };
    #[cfg(not(feature = "hooks"))]
    // SAFETY: the caller keeps `read`'s contract.
    return unsafe { libc::read(fd, buf, n) };
}
