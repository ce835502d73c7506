//! The hooked calls that change what gofer knows of a descriptor, without
//! waiting: `close`, `fcntl`, `ioctl`, `setsockopt` and the `dup` family.
//! Each passes the call to libc unchanged and keeps the descriptor's
//! bookkeeping (`fdctx.rs`) in step with what the kernel now holds.
//!
//! The x86_64 System V calling convention passes a variadic function's
//! arguments as it passes a fixed one's, so `fcntl` and `ioctl` are defined
//! with their optional argument as a plain word; the hooks are built for
//! Linux on x86_64 and aarch64 only, whose conventions both allow it for
//! integer and pointer arguments.

use std::time::Duration;

use libc::{c_int, c_ulong, c_void, socklen_t};

use super::fdctx::{self, DIRECT, USER_NONBLOCK};
use super::guard::{bypass, guarded, set_errno};
use super::offload::{offload, offloads_fd};
use crate::runtime::io::Interest;
use crate::sys::real;

/// Hooked `close`: tasks waiting on `fd` wake (their call fails with
/// `EBADF`), it leaves the reactor, then it is closed.
///
/// # Safety
/// The contract of `close(2)`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    // SAFETY: forwarded with the caller's argument.
    let real_close = || unsafe { real::close(fd) };
    match fdctx::get(fd) {
        Some(ctx) if !bypass() => guarded(|| ctx.close_with(real_close)),
        _ => real_close(),
    }
}

/// Hooked `fcntl`: `F_SETFL` records whether the program asked for
/// non-blocking mode (its calls then return `EAGAIN`, as libc's would) and
/// for `O_DIRECT`;
/// `F_DUPFD*` copies the bookkeeping; `F_SETLKW` and `F_OFD_SETLKW`, which
/// wait for another process's lock, are made on the blocking pool inside a
/// task (see `wait.rs`). Everything goes to libc unchanged: gofer never
/// leaves a flag of its own on a descriptor.
///
/// # Safety
/// The contract of `fcntl(2)`.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    if matches!(cmd, libc::F_SETLKW | libc::F_OFD_SETLKW) && offloads_fd(fd) {
        // SAFETY: forwarded with the caller's arguments (a flock the
        // caller keeps alive while it waits).
        return offload(|| unsafe { real::fcntl(fd, cmd, arg) });
    }
    // SAFETY: forwarded with the caller's arguments.
    let r = unsafe { real::fcntl(fd, cmd, arg) };
    if r < 0 || bypass() {
        return r;
    }
    match cmd {
        libc::F_SETFL => {
            if let Some(ctx) = fdctx::get(fd) {
                ctx.state(fd);
                ctx.set_bit(USER_NONBLOCK, arg as c_int & libc::O_NONBLOCK != 0);
                // The one mode of a file's that F_SETFL changes and the
                // in-place calls look at (`in_place.rs`).
                ctx.set_bit(DIRECT, arg as c_int & libc::O_DIRECT != 0);
            }
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => copy_ctx(fd, r),
        _ => {}
    }
    r
}

/// Hooked `ioctl`: `FIONBIO` records the program's non-blocking mode, as
/// `fcntl(F_SETFL)` does.
///
/// # Safety
/// The contract of `ioctl(2)`.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: c_ulong) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let r = unsafe { real::ioctl(fd, req, arg) };
    if r == 0 && req as libc::Ioctl == libc::FIONBIO && arg != 0 && !bypass() {
        if let Some(ctx) = fdctx::get(fd) {
            ctx.state(fd);
            // SAFETY: FIONBIO's argument points at an int, which the kernel
            // just read.
            let on = unsafe { *(arg as *const c_int) } != 0;
            ctx.set_bit(USER_NONBLOCK, on);
        }
    }
    r
}

/// Hooked `setsockopt`: `SO_RCVTIMEO`/`SO_SNDTIMEO` become the timeouts of
/// the hooked waits (and are passed on).
///
/// # Safety
/// The contract of `setsockopt(2)`.
#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let r = unsafe { real::setsockopt(fd, level, name, val, len) };
    let timeo = matches!(name, libc::SO_RCVTIMEO | libc::SO_SNDTIMEO);
    let is_timeval = len as usize >= std::mem::size_of::<libc::timeval>();
    if r != 0 || level != libc::SOL_SOCKET || !timeo || bypass() || val.is_null() || !is_timeval {
        return r;
    }
    if let Some(ctx) = fdctx::get(fd) {
        // SAFETY: the kernel accepted `val` as a timeval.
        let tv = unsafe { &*(val as *const libc::timeval) };
        let d = Duration::from_secs(tv.tv_sec.max(0) as u64)
            + Duration::from_micros(tv.tv_usec.max(0) as u64);
        let interest = if name == libc::SO_RCVTIMEO {
            Interest::Read
        } else {
            Interest::Write
        };
        ctx.set_timeout(interest, (!d.is_zero()).then_some(d));
    }
    r
}

fn copy_ctx(from: c_int, to: c_int) {
    if to < 0 {
        return;
    }
    if let (Some(a), Some(b)) = (fdctx::get(from), fdctx::get(to)) {
        a.state(from);
        a.mark_shared();
        a.copy_to(b);
    }
}

/// Hooked `dup`.
///
/// # Safety
/// The contract of `dup(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: forwarded with the caller's argument.
    let new = unsafe { real::dup(fd) };
    if !bypass() {
        copy_ctx(fd, new);
    }
    new
}

/// Whether `dup3(fd, to, flags)` (or `dup2`, with no flags) is bound to
/// fail before it would close `to`: `EINVAL` for flags other than
/// `O_CLOEXEC`, `EBADF` for a `fd` that is not open or a negative `to`.
/// Such a call leaves `to` open in the kernel, so its bookkeeping (and the
/// tasks waiting on it) must be left alone too.
fn dup_fails(fd: c_int, to: c_int, flags: c_int) -> Option<c_int> {
    if flags & !libc::O_CLOEXEC != 0 {
        return Some(libc::EINVAL);
    }
    // SAFETY: F_GETFD takes no argument and only reads.
    if to < 0 || unsafe { real::fcntl(fd, libc::F_GETFD, 0) } < 0 {
        return Some(libc::EBADF);
    }
    None
}

/// `dup2`/`dup3` over `to` through `dup`: the descriptor replaced is
/// closed as by `close`, but only once the call is known to go through.
fn dup_over(fd: c_int, to: c_int, flags: c_int, dup: impl FnOnce() -> c_int) -> c_int {
    if let Some(e) = dup_fails(fd, to, flags) {
        set_errno(e);
        return -1;
    }
    let new = match fdctx::get(to) {
        Some(ctx) => guarded(|| ctx.close_with(dup)),
        None => dup(),
    };
    copy_ctx(fd, new);
    new
}

/// Hooked `dup2`: the descriptor replaced is closed as by `close`.
///
/// # Safety
/// The contract of `dup2(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup2(fd: c_int, to: c_int) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let real_dup2 = || unsafe { real::dup2(fd, to) };
    if bypass() || fd == to {
        return real_dup2();
    }
    dup_over(fd, to, 0, real_dup2)
}

/// Hooked `dup3`: as `dup2`.
///
/// # Safety
/// The contract of `dup3(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup3(fd: c_int, to: c_int, flags: c_int) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let real_dup3 = || unsafe { real::dup3(fd, to, flags) };
    if bypass() || fd == to {
        return real_dup3(); // dup3 refuses fd == to with EINVAL
    }
    dup_over(fd, to, flags, real_dup3)
}
