//! The hooked waits for descriptors: `poll`, `ppoll`, `select`,
//! `pselect`, `epoll_wait`, `epoll_pwait`.
//!
//! Inside a task, a `poll` on one socket or pipe parks the task on the IO
//! manager. Every other wait that may block (several descriptors, another
//! kind of descriptor, the other calls, an epoll instance of the
//! program's own) goes whole to the blocking pool (`offload.rs`): a pool
//! thread makes the real call with the caller's arguments and timeout, and
//! the task gets exactly what that call returned (the count, the
//! `revents`, the sets, the events, `errno`). A wait with a zero timeout
//! does not block and stays in place; so does every call on a plain thread
//! or in a forked child.
//!
//! Waiting through the IO manager instead (registering each descriptor)
//! would spare the pool thread, but must rebuild each call's exact results
//! from readiness the reactor keeps per direction only; the pool gives
//! them by construction. The signal mask `ppoll`, `pselect` and
//! `epoll_pwait` take applies to the pool thread during the call: a signal
//! meant to interrupt the wait may be delivered to another thread of the
//! process instead (as it may be already, to any thread that does not
//! block it).

use std::time::{Duration, Instant};

use libc::{c_int, nfds_t, pollfd};

use super::fdctx::{self, FILE, HOOKED};
use super::guard::{guarded, is_stdio, may_wait};
use super::offload::{offload, when};
use super::real;
use crate::runtime::io::Interest;

/// Hooked `poll`: inside a task, one socket or pipe waits through the IO
/// manager, other waits that may block go to the blocking pool; anything
/// else is libc's.
///
/// # Safety
/// The contract of `poll(2)`.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let real_poll = |t: c_int| unsafe { real::poll(fds, n, t) };
    if timeout == 0 || !may_wait() {
        return real_poll(timeout);
    }
    let pooled = || offload(|| real_poll(timeout));
    if n != 1 {
        return pooled();
    }
    // SAFETY: n == 1, so `fds` points at one pollfd the caller owns.
    let pfd = unsafe { &*fds };
    if is_stdio(pfd.fd) {
        return real_poll(timeout);
    }
    let interest = match (
        pfd.events & libc::POLLIN != 0,
        pfd.events & libc::POLLOUT != 0,
    ) {
        (true, false) => Interest::Read,
        (false, true) => Interest::Write,
        _ => return pooled(),
    };
    let Some(ctx) = fdctx::get(pfd.fd) else {
        return pooled();
    };
    let st = ctx.state(pfd.fd);
    if st & FILE != 0 {
        return real_poll(timeout); // a file is always ready: no wait
    }
    if st & HOOKED == 0 {
        return pooled();
    }
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

/// Hooked `ppoll`: inside a task, a wait that may block goes to the
/// blocking pool.
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
    // SAFETY: forwarded with the caller's arguments.
    when(ts_blocks(t), || unsafe { real::ppoll(fds, n, t, mask) })
}

/// Hooked `select`: inside a task, a wait that may block goes to the
/// blocking pool (the timeout it updates is the caller's).
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
    // SAFETY: forwarded with the caller's arguments.
    when(blocks, || unsafe { real::select(nfds, r, w, e, t) })
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
    // SAFETY: forwarded with the caller's arguments.
    when(ts_blocks(t), || unsafe {
        real::pselect(nfds, r, w, e, t, mask)
    })
}

/// Hooked `epoll_wait`: inside a task, a wait that may block goes to the
/// blocking pool (a program's own event loop, run inside a task, parks
/// the task).
///
/// # Safety
/// The contract of `epoll_wait(2)`.
#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    ev: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    when(timeout != 0, || unsafe {
        real::epoll_wait(epfd, ev, max, timeout)
    })
}

/// Hooked `epoll_pwait`: as `epoll_wait`.
///
/// # Safety
/// The contract of `epoll_pwait(2)`.
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    ev: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    when(timeout != 0, || unsafe {
        real::epoll_pwait(epfd, ev, max, timeout, mask)
    })
}
