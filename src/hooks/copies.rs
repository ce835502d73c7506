//! The hooked copies the kernel makes from one descriptor to another:
//! `splice`, `tee`, `sendfile` (`sendfile64`) and `copy_file_range`, both
//! as libc functions and as `syscall(2)` numbers (std's `io::copy` makes
//! them through `syscall`: a splice from a pipe into a socket or the
//! other way, from a pipe into a pipe).
//!
//! Such a call waits on two descriptors at once (its source for data, its
//! destination for room), on a descriptor the program left blocking, and
//! has no per-call "do not wait" flag for a socket: the IO manager cannot
//! wait for it. Inside a task the call goes whole to the blocking pool
//! (`offload.rs`) and the task parks until it returns, so the tasks bound
//! to its thread (the one that drains the destination, say) keep running.
//! A call that involves stdio stays in place (`guard.rs`, "stdio"), as do
//! calls on a plain thread or in a forked child.

use libc::{c_int, c_long, c_uint, loff_t, off64_t, off_t, size_t, ssize_t};

use super::guard::is_stdio;
use super::offload::{offload, offloads_fd};
use crate::sys::real;

/// Runs `call` on the blocking pool when the call may park the task and
/// neither `a` nor `b` is stdio; in place otherwise.
fn between<R: Send>(a: c_int, b: c_int, call: impl FnOnce() -> R) -> R {
    if !is_stdio(b) && offloads_fd(a) {
        offload(call)
    } else {
        call()
    }
}

/// Hooked `splice`: inside a task, made on the blocking pool.
///
/// # Safety
/// The contract of `splice(2)`.
#[no_mangle]
pub unsafe extern "C" fn splice(
    fd_in: c_int,
    off_in: *mut loff_t,
    fd_out: c_int,
    off_out: *mut loff_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    // SAFETY: forwarded with the caller's arguments.
    between(fd_in, fd_out, || unsafe {
        real::splice(fd_in, off_in, fd_out, off_out, len, flags)
    })
}

/// Hooked `tee`: inside a task, made on the blocking pool.
///
/// # Safety
/// The contract of `tee(2)`.
#[no_mangle]
pub unsafe extern "C" fn tee(fd_in: c_int, fd_out: c_int, len: size_t, flags: c_uint) -> ssize_t {
    // SAFETY: forwarded with the caller's arguments.
    between(fd_in, fd_out, || unsafe {
        real::tee(fd_in, fd_out, len, flags)
    })
}

/// Hooked `sendfile`: inside a task, made on the blocking pool.
///
/// # Safety
/// The contract of `sendfile(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendfile(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut off_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: forwarded with the caller's arguments.
    between(in_fd, out_fd, || unsafe {
        real::sendfile(out_fd, in_fd, offset, count)
    })
}

/// Hooked `sendfile64`: as `sendfile`.
///
/// # Safety
/// The contract of `sendfile(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut off64_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: forwarded with the caller's arguments.
    between(in_fd, out_fd, || unsafe {
        real::sendfile64(out_fd, in_fd, offset, count)
    })
}

/// Hooked `copy_file_range`: inside a task, made on the blocking pool.
///
/// # Safety
/// The contract of `copy_file_range(2)`.
#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut loff_t,
    fd_out: c_int,
    off_out: *mut loff_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    // SAFETY: forwarded with the caller's arguments.
    between(fd_in, fd_out, || unsafe {
        real::copy_file_range(fd_in, off_in, fd_out, off_out, len, flags)
    })
}

/// The descriptors of a copy made through `syscall(number, a...)`, or
/// `None` if `number` is no copy.
pub(super) fn copy_descriptors(number: c_long, a: &[c_long; 6]) -> Option<(c_int, c_int)> {
    // The descriptors are the low 32 bits of their words, as the kernel
    // reads an `int` argument.
    let fd = |w: c_long| w as c_int;
    match number {
        // splice(fd_in, off_in, fd_out, off_out, len, flags),
        // copy_file_range(fd_in, off_in, fd_out, off_out, len, flags)
        libc::SYS_splice | libc::SYS_copy_file_range => Some((fd(a[0]), fd(a[2]))),
        // tee(fd_in, fd_out, len, flags), sendfile(out_fd, in_fd, off, count)
        libc::SYS_tee | libc::SYS_sendfile => Some((fd(a[0]), fd(a[1]))),
        _ => None,
    }
}

/// A copy made through `syscall`: the real `syscall` with the same words,
/// on the blocking pool as the libc functions above are.
///
/// # Safety
/// The contract of the system call `number` with these arguments.
pub(super) unsafe fn via_syscall(number: c_long, a: [c_long; 6], fds: (c_int, c_int)) -> c_long {
    // SAFETY: forwarded unchanged.
    between(fds.0, fds.1, || unsafe { real::syscall(number, a) })
}
