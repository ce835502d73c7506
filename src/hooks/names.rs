//! The hooked name lookups: `getaddrinfo` (what `ToSocketAddrs` and
//! `TcpStream::connect("host:port")` call), `getnameinfo` and the
//! reentrant `gethostbyname_r`, `gethostbyname2_r`, `gethostbyaddr_r`.
//!
//! A lookup may read files and wait on DNS servers through sockets libc
//! makes and uses internally, out of the hooks' sight: inside a task each
//! goes whole to the blocking pool (`offload.rs`) and the task parks until
//! it returns. The results are written into memory the caller provides
//! (or, for `getaddrinfo`, allocated with `malloc`, which any thread may
//! free), so where the call ran does not show.
//!
//! `gethostbyname`, `gethostbyname2` and `gethostbyaddr` are not hooked:
//! they return a pointer into static storage of libc (and set `h_errno`,
//! which is per thread), and a pool thread would fill those, not the
//! caller's. They block their thread, like before.

use libc::{addrinfo, c_char, c_int, c_void, hostent, size_t, sockaddr, socklen_t};

use super::offload::when;
use crate::sys::real;

/// Hooked `getaddrinfo`: inside a task, made on the blocking pool.
///
/// # Safety
/// The contract of `getaddrinfo(3)`.
#[no_mangle]
pub unsafe extern "C" fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const addrinfo,
    res: *mut *mut addrinfo,
) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    when(true, || unsafe {
        real::getaddrinfo(node, service, hints, res)
    })
}

/// Hooked `getnameinfo`: inside a task, made on the blocking pool.
///
/// # Safety
/// The contract of `getnameinfo(3)`.
#[no_mangle]
pub unsafe extern "C" fn getnameinfo(
    sa: *const sockaddr,
    salen: socklen_t,
    host: *mut c_char,
    hostlen: socklen_t,
    serv: *mut c_char,
    servlen: socklen_t,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    when(true, || unsafe {
        real::getnameinfo(sa, salen, host, hostlen, serv, servlen, flags)
    })
}

/// Hooked `gethostbyname_r`: inside a task, made on the blocking pool.
///
/// # Safety
/// The contract of `gethostbyname_r(3)`.
#[no_mangle]
pub unsafe extern "C" fn gethostbyname_r(
    name: *const c_char,
    ret: *mut hostent,
    buf: *mut c_char,
    len: size_t,
    result: *mut *mut hostent,
    h_errnop: *mut c_int,
) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    when(true, || unsafe {
        real::gethostbyname_r(name, ret, buf, len, result, h_errnop)
    })
}

/// Hooked `gethostbyname2_r`: inside a task, made on the blocking pool.
///
/// # Safety
/// The contract of `gethostbyname2_r(3)`.
#[no_mangle]
pub unsafe extern "C" fn gethostbyname2_r(
    name: *const c_char,
    af: c_int,
    ret: *mut hostent,
    buf: *mut c_char,
    len: size_t,
    result: *mut *mut hostent,
    h_errnop: *mut c_int,
) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    when(true, || unsafe {
        real::gethostbyname2_r(name, af, ret, buf, len, result, h_errnop)
    })
}

/// Hooked `gethostbyaddr_r`: inside a task, made on the blocking pool.
///
/// # Safety
/// The contract of `gethostbyaddr_r(3)`.
#[no_mangle]
pub unsafe extern "C" fn gethostbyaddr_r(
    addr: *const c_void,
    alen: socklen_t,
    af: c_int,
    ret: *mut hostent,
    buf: *mut c_char,
    len: size_t,
    result: *mut *mut hostent,
    h_errnop: *mut c_int,
) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    when(true, || unsafe {
        real::gethostbyaddr_r(addr, alen, af, ret, buf, len, result, h_errnop)
    })
}
