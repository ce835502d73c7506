//! The hooked waits for descriptors: `poll`, `ppoll`, `select`,
//! `pselect`.
//!
//! **A wait on one socket or pipe parks; every other wait blocks the
//! thread.** Inside a task, a `poll` on one socket or pipe parks the task
//! on the IO manager; the rest of the waits on one socket or pipe (`ppoll`,
//! `select` or `pselect` with one descriptor in their sets, a `poll` for
//! both directions or for errors only) go whole to the blocking pool
//! (`offload.rs`): a pool thread makes the real call with the caller's
//! arguments and timeout, and the task gets exactly what that call
//! returned. A wait on several descriptors, on none, or on one of another
//! kind (an eventfd, a timerfd, an epoll instance, a terminal) is made in
//! place and blocks the thread, as `epoll_wait` and `epoll_pwait` do
//! (they are not hooked at all): such a wait is an event loop's, and the
//! library running that loop has thread-local state set around it (tokio's
//! `block_on` marks the thread as inside a runtime, and sync `postgres`
//! and `reqwest::blocking` run one inside every call). Parking the task
//! there would let the next task of the thread run inside that state:
//! its own `block_on` panics "Cannot start a runtime from within a
//! runtime". The Dispatcher sees the blocked thread and moves the tasks
//! that have not started (ARCHITECTURE.md, "Foreign event loops"). One
//! socket or pipe is what plain blocking code waits on (libpq, std's
//! `connect_timeout`, ureq), with no loop around it. A wait with a zero
//! timeout does not block and stays in place; so does every call on a
//! plain thread or in a forked child.
//!
//! Waiting through the IO manager for the pooled calls too would spare
//! the pool thread, but must rebuild each call's exact results from
//! readiness the reactor keeps per direction only; the pool gives them by
//! construction. The signal mask `ppoll` and `pselect` take applies to the
//! pool thread during a pooled call: a signal meant to interrupt the wait
//! may be delivered to another thread of the process instead (as it may be
//! already, to any thread that does not block it).

use std::time::{Duration, Instant};

use libc::{c_int, nfds_t, pollfd};

use super::fdctx::{self, FILE, HOOKED};
use super::guard::{guarded, is_stdio, may_wait};
use super::offload::when;
use crate::runtime::io::Interest;
use crate::sys::real;

/// Whether `fd` is a socket or a pipe (not stdio): the one kind of
/// descriptor whose wait, made alone, may park the task (see the module's
/// docs). Reads the descriptor's bookkeeping (an `fstat` at its first look).
fn socket_or_pipe(fd: c_int) -> bool {
    !is_stdio(fd) && fdctx::get(fd).is_some_and(|ctx| ctx.state(fd) & HOOKED != 0)
}

/// Hooked `poll`: inside a task, one socket or pipe waits through the IO
/// manager (or, for both directions or neither, on the blocking pool);
/// anything else is libc's, in place (a wait on several descriptors or on
/// a loop's own descriptor blocks the thread).
///
/// # Safety
/// The contract of `poll(2)`.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let real_poll = |t: c_int| unsafe { real::poll(fds, n, t) };
    if timeout == 0 || n != 1 || !may_wait() {
        return real_poll(timeout);
    }
    // SAFETY: n == 1, so `fds` points at one pollfd the caller owns.
    let pfd = unsafe { &*fds };
    if is_stdio(pfd.fd) {
        return real_poll(timeout);
    }
    let Some(ctx) = fdctx::get(pfd.fd) else {
        return real_poll(timeout);
    };
    let st = ctx.state(pfd.fd);
    if st & FILE != 0 {
        return real_poll(timeout); // a file is always ready: no wait
    }
    if st & HOOKED == 0 {
        // Not a socket or a pipe: an eventfd, a timerfd, an epoll instance
        // (a loop's own), a terminal, or not open. The thread waits.
        return real_poll(timeout);
    }
    let pooled = || when(true, || real_poll(timeout));
    let interest = match (
        pfd.events & libc::POLLIN != 0,
        pfd.events & libc::POLLOUT != 0,
    ) {
        (true, false) => Interest::Read,
        (false, true) => Interest::Write,
        _ => return pooled(),
    };
    let deadline = (timeout > 0)
        .then(|| Instant::now().checked_add(Duration::from_millis(timeout as u64)))
        .flatten();
    let reg = match guarded(|| ctx.registration(pfd.fd, fdctx::generation(st))) {
        Ok(Some(reg)) => reg,
        _ => return pooled(),
    };
    loop {
        let r = real_poll(0);
        if r != 0 {
            return r;
        }
        let seen = reg.readiness(interest);
        if seen.is_ready() {
            reg.clear(seen);
            if real_poll(0) != 0 {
                continue;
            }
        }
        if reg.wait(interest, deadline).is_err() {
            return real_poll(0); // timed out: report what is there now (0)
        }
    }
}

/// Whether a `timespec` timeout may block: null (no timeout) or not zero.
fn ts_blocks(t: *const libc::timespec) -> bool {
    // SAFETY: a non-null timeout points at the caller's timespec.
    t.is_null() || unsafe { (*t).tv_sec != 0 || (*t).tv_nsec != 0 }
}

/// Hooked `ppoll`: inside a task, a wait that may block on one socket or
/// pipe goes to the blocking pool; any other wait is libc's, in place.
///
/// # Safety
/// The contract of `ppoll(2)`.
#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    t: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: n == 1, so `fds` points at one pollfd the caller owns (read
    // only once the cheaper checks passed).
    let alone = || n == 1 && socket_or_pipe(unsafe { (*fds).fd });
    let park = ts_blocks(t) && may_wait() && alone();
    // SAFETY: forwarded with the caller's arguments.
    when(park, || unsafe { real::ppoll(fds, n, t, mask) })
}

/// The one descriptor in the sets of a `select` (any of the three,
/// counted once), if there is exactly one.
///
/// # Safety
/// Each non-null set points at the caller's `fd_set`.
unsafe fn only_descriptor(
    nfds: c_int,
    r: *const libc::fd_set,
    w: *const libc::fd_set,
    e: *const libc::fd_set,
) -> Option<c_int> {
    let sets = [r, w, e];
    let mut found = None;
    // Bits at or past FD_SETSIZE are not in the sets (the call fails).
    for fd in 0..nfds.clamp(0, libc::FD_SETSIZE as c_int) {
        // SAFETY: each non-null set is the caller's, `fd` below its size.
        let set = sets
            .iter()
            .any(|s| !s.is_null() && unsafe { libc::FD_ISSET(fd, *s) });
        if set {
            if found.is_some() {
                return None;
            }
            found = Some(fd);
        }
    }
    found
}

/// Hooked `select`: inside a task, a wait that may block on one socket or
/// pipe goes to the blocking pool (the timeout it updates is the
/// caller's); any other wait is libc's, in place.
///
/// # Safety
/// The contract of `select(2)`.
#[no_mangle]
pub unsafe extern "C" fn select(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    t: *mut libc::timeval,
) -> c_int {
    // SAFETY: a non-null timeout points at the caller's timeval.
    let blocks = t.is_null() || unsafe { (*t).tv_sec != 0 || (*t).tv_usec != 0 };
    // SAFETY: the sets are the caller's, by the contract of select(2).
    let alone = || unsafe { only_descriptor(nfds, r, w, e) }.is_some_and(socket_or_pipe);
    let park = blocks && may_wait() && alone();
    // SAFETY: forwarded with the caller's arguments.
    when(park, || unsafe { real::select(nfds, r, w, e, t) })
}

/// Hooked `pselect`: as `select`.
///
/// # Safety
/// The contract of `pselect(2)`.
#[no_mangle]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    t: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: the sets are the caller's, by the contract of pselect(2).
    let alone = || unsafe { only_descriptor(nfds, r, w, e) }.is_some_and(socket_or_pipe);
    let park = ts_blocks(t) && may_wait() && alone();
    // SAFETY: forwarded with the caller's arguments.
    when(park, || unsafe { real::pselect(nfds, r, w, e, t, mask) })
}
