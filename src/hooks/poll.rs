//! The hooked `poll`: a wait on one descriptor inside a task parks the task
//! on the IO manager; anything else is libc's.

use std::time::{Duration, Instant};

use libc::{c_int, nfds_t, pollfd};

use super::fdctx::{self, HOOKED};
use super::guard::{bypass, guarded, in_task, is_stdio};
use super::real;
use crate::runtime::io::Interest;

/// Hooked `poll`: one descriptor, inside a task, waits through the IO
/// manager; anything else is libc's.
///
/// # Safety
/// The contract of `poll(2)`.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let real_poll = |t: c_int| unsafe { real::poll(fds, n, t) };
    if n != 1 || timeout == 0 || bypass() || !in_task() {
        return real_poll(timeout);
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
        _ => return real_poll(timeout),
    };
    let Some(ctx) = fdctx::get(pfd.fd) else {
        return real_poll(timeout);
    };
    let st = ctx.state(pfd.fd);
    if st & HOOKED == 0 {
        return real_poll(timeout);
    }
    let deadline = (timeout > 0)
        .then(|| Instant::now().checked_add(Duration::from_millis(timeout as u64)))
        .flatten();
    let reg = match guarded(|| ctx.registration(pfd.fd, fdctx::generation(st))) {
        Ok(Some(reg)) => reg,
        _ => return real_poll(timeout),
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
