//! The hooked calls that set up a connection: `accept`, `accept4` and
//! `connect`. The kernel has no per-call "do not block" flag for them, so
//! each try sets `O_NONBLOCK` for that one system call only
//! ([`nonblocking_once`]) and waits through the IO manager in between.

use std::time::{Duration, Instant};

use libc::{c_int, sockaddr, socklen_t, ssize_t};

use super::fdctx::{self, SOCKET};
use super::guard::{errno, guarded, set_errno};
use super::io_loop::{fail, io_loop, nonblocking_once, route, Route, Stop};
use crate::runtime::io::{poll_fd, Interest};
use crate::sys::real;

/// Hooked `accept`: non-blocking for the one call (the kernel has no
/// per-call flag for it), waiting readable in between.
///
/// # Safety
/// The contract of `accept(2)`.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, a: *mut sockaddr, al: *mut socklen_t) -> c_int {
    io_loop(
        fd,
        Interest::Read,
        false,
        // SAFETY: forwarded with the caller's arguments.
        || unsafe { real::accept(fd, a, al) as ssize_t },
        // SAFETY: the same call, asked not to block, with the caller's arguments.
        |_| nonblocking_once(fd, || unsafe { real::accept(fd, a, al) }) as ssize_t,
    ) as c_int
}

/// Hooked `accept4`: as `accept`.
///
/// # Safety
/// The contract of `accept4(2)`.
#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    a: *mut sockaddr,
    al: *mut socklen_t,
    flags: c_int,
) -> c_int {
    io_loop(
        fd,
        Interest::Read,
        false,
        // SAFETY: forwarded with the caller's arguments.
        || unsafe { real::accept4(fd, a, al, flags) as ssize_t },
        // SAFETY: the same call, asked not to block, with the caller's arguments.
        |_| nonblocking_once(fd, || unsafe { real::accept4(fd, a, al, flags) }) as ssize_t,
    ) as c_int
}

/// Backoff of a Unix-domain connect whose listener's queue is full: the
/// socket gets no event when the queue drains, so the connect is retried,
/// from [`UNIX_RETRY_MIN`] doubling to [`UNIX_RETRY_MAX`] between tries.
const UNIX_RETRY_MIN: Duration = Duration::from_micros(100);
const UNIX_RETRY_MAX: Duration = Duration::from_millis(10);

/// Hooked `connect`: a connect started non-blocking (the flag set for that
/// one call), a wait until writable (bounded by `SO_SNDTIMEO`, `ETIMEDOUT`
/// on expiry), then the result from `SO_ERROR`. A Unix-domain connect
/// whose listener's queue is full (`EAGAIN`, where a thread would wait) is
/// retried until it goes through or `SO_SNDTIMEO` passes (`EAGAIN`, as
/// the kernel's).
///
/// # Safety
/// The contract of `connect(2)`.
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, a: *const sockaddr, al: socklen_t) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let real_connect = || unsafe { real::connect(fd, a, al) };
    let (ctx, st) = match route(fd) {
        Route::Wait(ctx, st) if st & SOCKET != 0 => (ctx, st),
        Route::Closed => return fail(Stop::Closed) as c_int,
        _ => return real_connect(),
    };
    let gen = fdctx::generation(st);
    let deadline = ctx
        .timeout(Interest::Write)
        .and_then(|t| Instant::now().checked_add(t));
    let unix = !a.is_null()
        && al as usize >= std::mem::size_of::<libc::sa_family_t>()
        // SAFETY: the caller's address, at least a family long.
        && c_int::from(unsafe { (*a).sa_family }) == libc::AF_UNIX;
    let mut backoff = UNIX_RETRY_MIN;
    loop {
        let r = nonblocking_once(fd, real_connect);
        if r == 0 {
            return 0;
        }
        match errno() {
            libc::EINPROGRESS => break,
            libc::EAGAIN if unix => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return fail(Stop::TimedOut) as c_int;
                }
                {
                    // No unwind out of a hooked call (`runtime/task/cancel.rs`).
                    let _mask = crate::runtime::task::cancel::Mask::new();
                    crate::runtime::time::sleep::sleep(backoff);
                }
                backoff = (backoff * 2).min(UNIX_RETRY_MAX);
                if ctx.generation_now() != gen {
                    return fail(Stop::Closed) as c_int;
                }
            }
            _ => return r,
        }
    }
    let waited = match guarded(|| ctx.registration(fd, gen)) {
        Ok(Some(reg)) => reg.wait(Interest::Write, deadline),
        Ok(None) => poll_fd(fd, Interest::Write, deadline),
        Err(e) => Err(e),
    };
    if ctx.generation_now() != gen {
        set_errno(libc::EBADF);
        return -1;
    }
    if let Err(e) = waited {
        set_errno(if e.kind() == std::io::ErrorKind::TimedOut {
            libc::ETIMEDOUT
        } else {
            e.raw_os_error().unwrap_or(libc::EIO)
        });
        return -1;
    }
    let mut err: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: SO_ERROR into a live c_int of the given length.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut c_int).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return -1;
    }
    if err != 0 {
        set_errno(err);
        return -1;
    }
    0
}
