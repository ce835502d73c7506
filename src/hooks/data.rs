//! The hooked calls that move data: `read`, `readv`, `recv`, `recvfrom`,
//! `recvmsg` and their writing twins.
//!
//! They come in two shapes, each written once here: the calls with a flags
//! argument ([`flagged`]) add `MSG_DONTWAIT` for the tries that must not
//! block, and the calls without one ([`flagless`]) make the try through
//! another call of the same meaning (`recv`/`send` or their message forms
//! on a socket, `preadv2`/`pwritev2` with `RWF_NOWAIT` on a pipe). Both
//! run in [`io_loop`], which owns the waiting and its invariants.

use libc::{c_int, c_void, iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t};

use super::in_place;
use super::io_loop::{io_loop, iov_msg, preadv_nowait, pwritev_nowait};
use crate::runtime::io::Interest;
use crate::sys::real;

/// A call with a flags argument: one the program already made
/// non-blocking (`MSG_DONTWAIT`) is libc's as it stands; otherwise
/// [`io_loop`] runs `call(flags)` where it may block and
/// `call(flags | MSG_DONTWAIT)` for the tries that must not.
fn flagged(
    fd: c_int,
    interest: Interest,
    flags: c_int,
    call: impl Fn(c_int) -> ssize_t,
) -> ssize_t {
    if flags & libc::MSG_DONTWAIT != 0 {
        return call(flags);
    }
    io_loop(
        fd,
        interest,
        true,
        || call(flags),
        |_| call(flags | libc::MSG_DONTWAIT),
    )
}

/// A call without a flags argument: [`io_loop`] runs `plain` where it may
/// block, and for the tries that must not, `on_socket` (the same transfer
/// asked with `MSG_DONTWAIT`) or `on_pipe` (with `RWF_NOWAIT`).
fn flagless(
    fd: c_int,
    interest: Interest,
    plain: impl FnOnce() -> ssize_t,
    mut on_socket: impl FnMut() -> ssize_t,
    mut on_pipe: impl FnMut() -> ssize_t,
) -> ssize_t {
    io_loop(fd, interest, true, plain, |socket| {
        if socket {
            on_socket()
        } else {
            on_pipe()
        }
    })
}

/// Hooked `read`.
///
/// # Safety
/// The contract of `read(2)`.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    let iov = iovec {
        iov_base: buf,
        iov_len: n,
    };
    // SAFETY: the caller's buffer as a one-entry vector.
    if let Some(r) = unsafe { in_place::read(fd, &iov, 1, None) } {
        return r;
    }
    flagless(
        fd,
        Interest::Read,
        // SAFETY: the caller's arguments, as `read(2)` takes
        // them, or the same buffer as a one-entry vector.
        || unsafe { real::read(fd, buf, n) },
        // SAFETY: as above, asked not to block.
        || unsafe { real::recv(fd, buf, n, libc::MSG_DONTWAIT) },
        // SAFETY: as above, asked not to block.
        || unsafe { preadv_nowait(fd, &iov, 1) },
    )
}

/// Hooked `readv`.
///
/// # Safety
/// The contract of `readv(2)`.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    // SAFETY: the caller's vector.
    if let Some(r) = unsafe { in_place::read(fd, iov, cnt, None) } {
        return r;
    }
    flagless(
        fd,
        Interest::Read,
        // SAFETY: the caller's vector, as `readv(2)` takes it.
        || unsafe { real::readv(fd, iov, cnt) },
        // SAFETY: as above, asked not to block.
        || unsafe { real::recvmsg(fd, &mut iov_msg(iov, cnt), libc::MSG_DONTWAIT) },
        // SAFETY: as above, asked not to block.
        || unsafe { preadv_nowait(fd, iov, cnt) },
    )
}

/// Hooked `recv`.
///
/// # Safety
/// The contract of `recv(2)`.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments, with flags the call accepts.
    flagged(fd, Interest::Read, flags, |f| unsafe {
        real::recv(fd, buf, n, f)
    })
}

/// Hooked `recvfrom`.
///
/// # Safety
/// The contract of `recvfrom(2)`.
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    a: *mut sockaddr,
    al: *mut socklen_t,
) -> ssize_t {
    // SAFETY: the caller's arguments, with flags the call accepts.
    flagged(fd, Interest::Read, flags, |f| unsafe {
        real::recvfrom(fd, buf, n, f, a, al)
    })
}

/// Hooked `recvmsg`.
///
/// # Safety
/// The contract of `recvmsg(2)`.
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments, with flags the call accepts.
    flagged(fd, Interest::Read, flags, |f| unsafe {
        real::recvmsg(fd, msg, f)
    })
}

/// Hooked `write`.
///
/// # Safety
/// The contract of `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    let iov = iovec {
        iov_base: buf as *mut c_void,
        iov_len: n,
    };
    // SAFETY: the caller's buffer as a one-entry vector.
    if let Some(r) = unsafe { in_place::write(fd, &iov, 1, None) } {
        return r;
    }
    flagless(
        fd,
        Interest::Write,
        // SAFETY: the caller's arguments, as `write(2)` takes
        // them, or the same buffer as a one-entry vector.
        || unsafe { real::write(fd, buf, n) },
        // SAFETY: as above, asked not to block.
        || unsafe { real::send(fd, buf, n, libc::MSG_DONTWAIT) },
        // SAFETY: as above, asked not to block.
        || unsafe { pwritev_nowait(fd, &iov, 1) },
    )
}

/// Hooked `writev`.
///
/// # Safety
/// The contract of `writev(2)`.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    // SAFETY: the caller's vector.
    if let Some(r) = unsafe { in_place::write(fd, iov, cnt, None) } {
        return r;
    }
    flagless(
        fd,
        Interest::Write,
        // SAFETY: the caller's vector, as `writev(2)` takes it.
        || unsafe { real::writev(fd, iov, cnt) },
        // SAFETY: as above, asked not to block.
        || unsafe { real::sendmsg(fd, &iov_msg(iov, cnt), libc::MSG_DONTWAIT) },
        // SAFETY: as above, asked not to block.
        || unsafe { pwritev_nowait(fd, iov, cnt) },
    )
}

/// Hooked `send`.
///
/// # Safety
/// The contract of `send(2)`.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments, with flags the call accepts.
    flagged(fd, Interest::Write, flags, |f| unsafe {
        real::send(fd, buf, n, f)
    })
}

/// Hooked `sendto`.
///
/// # Safety
/// The contract of `sendto(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    a: *const sockaddr,
    al: socklen_t,
) -> ssize_t {
    // SAFETY: the caller's arguments, with flags the call accepts.
    flagged(fd, Interest::Write, flags, |f| unsafe {
        real::sendto(fd, buf, n, f, a, al)
    })
}

/// Hooked `sendmsg`.
///
/// # Safety
/// The contract of `sendmsg(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments, with flags the call accepts.
    flagged(fd, Interest::Write, flags, |f| unsafe {
        real::sendmsg(fd, msg, f)
    })
}
