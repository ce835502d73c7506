//! The hooked calls on regular files (and block devices) that may wait for
//! the disk: positioned reads and writes, `open`, `creat`, `fsync`,
//! `fdatasync`, `ftruncate`, `fallocate`. (`read`, `write`, `readv` and
//! `writev` on a file take the same way from `io_loop.rs`'s `route`,
//! after the same in-place try as the positioned calls.)
//!
//! epoll calls a regular file ready at every moment, so no wait through
//! the IO manager can spare the thread: inside a task each of these calls
//! goes whole to the blocking pool (`offload.rs`), and the task parks
//! until it returns; except that a read the page cache can answer and a
//! small buffered write are made in place, on the task's thread
//! (`in_place.rs` says when and why). Calls on other descriptors (a pipe's `pread` fails
//! with `ESPIPE` at once), on stdio, on a plain thread and in a forked
//! child are libc's, unchanged.
//!
//! glibc exports the large-file forms (`open64`, `pread64`, ...) as
//! symbols of their own, and std calls those: both names are hooked, each
//! forwarding to libc's function of the same name.
//!
//! `open` and `openat` are C variadic functions: the mode is read only
//! with `O_CREAT` or `O_TMPFILE`. They are defined here with the mode as a
//! plain word argument, as `fcntl`'s argument is in `descriptors.rs`: on
//! x86_64 (System V) and aarch64 (Linux's AAPCS64) an integer variadic
//! argument travels in the register a fixed one would, so the hook reads
//! the mode the caller passed, or an unspecified word when it passed none,
//! and hands it on to libc's variadic function, which reads it only when
//! the flags say there is one.

use libc::{c_char, c_int, c_uint, c_void, iovec, mode_t, off64_t, off_t, size_t, ssize_t};

use super::guard::may_wait;
use super::in_place;
use super::offload::{offload, on_file};
use crate::sys::real;

macro_rules! file_calls {
    ($($(#[$doc:meta])* fn $name:ident($fd:ident: c_int $(, $arg:ident: $t:ty)*) -> $ret:ty;)*) => {
        $(
            $(#[$doc])*
            ///
            /// # Safety
            /// The contract of the libc function of the same name.
            #[no_mangle]
            pub unsafe extern "C" fn $name($fd: c_int $(, $arg: $t)*) -> $ret {
                // SAFETY: forwarded with the caller's arguments, on this
                // thread or on a pool thread while the caller waits.
                on_file($fd, || unsafe { real::$name($fd $(, $arg)*) })
            }
        )*
    };
}

file_calls! {
    /// Hooked `fsync`: on a file inside a task, made on the blocking pool.
    fn fsync(fd: c_int) -> c_int;
    /// Hooked `fdatasync`: on a file inside a task, made on the blocking pool.
    fn fdatasync(fd: c_int) -> c_int;
    /// Hooked `ftruncate`: on a file inside a task, made on the blocking pool.
    fn ftruncate(fd: c_int, len: off_t) -> c_int;
    /// Hooked `ftruncate64` (what std calls): as `ftruncate`.
    fn ftruncate64(fd: c_int, len: off64_t) -> c_int;
    /// Hooked `fallocate`: on a file inside a task, made on the blocking pool.
    fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int;
    /// Hooked `fallocate64`: as `fallocate`.
    fn fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int;
}

/// The positioned calls: on a file inside a task, made in place when they
/// need not wait for the disk (`in_place.rs`: `$try`, the call's buffers
/// and offset handed to it), on the blocking pool otherwise.
macro_rules! positioned {
    ($($(#[$doc:meta])* fn $name:ident($fd:ident: c_int, $buf:ident: $bt:ty, $n:ident: $nt:ty, $off:ident: $ot:ty) -> ssize_t = $try:expr;)*) => {
        $(
            $(#[$doc])*
            ///
            /// # Safety
            /// The contract of the libc function of the same name.
            #[no_mangle]
            pub unsafe extern "C" fn $name($fd: c_int, $buf: $bt, $n: $nt, $off: $ot) -> ssize_t {
                // SAFETY: the caller's buffers and offset (off_t is
                // off64_t on the targets the hooks build for).
                if let Some(r) = unsafe { $try } {
                    return r;
                }
                // SAFETY: forwarded with the caller's arguments, on this
                // thread or on a pool thread while the caller waits.
                on_file($fd, || unsafe { real::$name($fd, $buf, $n, $off) })
            }
        )*
    };
}

positioned! {
    /// Hooked `pread`.
    fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t
        = one(in_place::read, fd, buf, n, off);
    /// Hooked `pread64` (what std calls): as `pread`.
    fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t
        = one(in_place::read, fd, buf, n, off);
    /// Hooked `pwrite`.
    fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t
        = one(in_place::write, fd, buf.cast_mut(), n, off);
    /// Hooked `pwrite64` (what std calls): as `pwrite`.
    fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t
        = one(in_place::write, fd, buf.cast_mut(), n, off);
    /// Hooked `preadv`.
    fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t
        = in_place::read(fd, iov, cnt, Some(off));
    /// Hooked `preadv64` (what std calls): as `preadv`.
    fn preadv64(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t
        = in_place::read(fd, iov, cnt, Some(off));
    /// Hooked `pwritev`.
    fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t
        = in_place::write(fd, iov, cnt, Some(off));
    /// Hooked `pwritev64` (what std calls): as `pwritev`.
    fn pwritev64(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t
        = in_place::write(fd, iov, cnt, Some(off));
}

/// `call` (one of `in_place`'s) for one buffer of `n` bytes at `buf`.
///
/// # Safety
/// `buf` and `n` as `pread(2)` (or, for a write, `pwrite(2)`) takes them.
unsafe fn one(
    call: unsafe fn(c_int, *const iovec, c_int, Option<off64_t>) -> Option<ssize_t>,
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off64_t,
) -> Option<ssize_t> {
    let iov = iovec {
        iov_base: buf,
        iov_len: n,
    };
    // SAFETY: the caller's buffer as a one-entry vector, alive for the
    // call.
    unsafe { call(fd, &iov, 1, Some(off)) }
}

/// Runs an `open`-like call: on the blocking pool inside a task (the path
/// may name a file on a slow disk, a FIFO that waits for its other end, a
/// device), in place anywhere else.
fn opening(call: impl FnOnce() -> c_int) -> c_int {
    if may_wait() {
        offload(call)
    } else {
        call()
    }
}

/// Hooked `open` (mode as a word: see the module docs): inside a task,
/// made on the blocking pool.
///
/// # Safety
/// The contract of `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    opening(|| unsafe { real::open(false, path, flags, mode) })
}

/// Hooked `open64` (what std calls): as `open`.
///
/// # Safety
/// The contract of `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    opening(|| unsafe { real::open(true, path, flags, mode) })
}

/// Hooked `openat` (mode as a word: see the module docs): inside a task,
/// made on the blocking pool.
///
/// # Safety
/// The contract of `openat(2)`.
#[no_mangle]
pub unsafe extern "C" fn openat(
    dir: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    opening(|| unsafe { real::openat(false, dir, path, flags, mode) })
}

/// Hooked `openat64`: as `openat`.
///
/// # Safety
/// The contract of `openat(2)`.
#[no_mangle]
pub unsafe extern "C" fn openat64(
    dir: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    opening(|| unsafe { real::openat(true, dir, path, flags, mode) })
}

/// Hooked `creat`: inside a task, made on the blocking pool.
///
/// # Safety
/// The contract of `creat(2)`.
#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    opening(|| unsafe { real::creat(path, mode) })
}

/// Hooked `creat64`: as `creat`.
///
/// # Safety
/// The contract of `creat(2)`.
#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    opening(|| unsafe { real::creat64(path, mode) })
}
