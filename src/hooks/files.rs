//! The hooked calls on regular files (and block devices) that may wait for
//! the disk: positioned reads and writes, `open`, `creat`, `fsync`,
//! `fdatasync`, `ftruncate`, `fallocate`. (`read`, `write`, `readv` and
//! `writev` on a file take the same way from `io_loop.rs`'s `route`;
//! `read` and `readv` first try [`read_in_place`], which answers from the
//! page cache without the pool when it can.)
//!
//! epoll calls a regular file ready at every moment, so no wait through
//! the IO manager can spare the thread: inside a task each of these calls
//! goes whole to the blocking pool (`offload.rs`), and the task parks
//! until it returns. Calls on other descriptors (a pipe's `pread` fails
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

use super::fdctx;
use super::guard::{errno, may_park, set_errno};
use super::offload::{is_file, offload, offloads_fd, on_file};
use super::real;
use crate::fs::nowait::Cached;

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
    /// Hooked `pread`: on a file inside a task, made on the blocking pool.
    fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t;
    /// Hooked `pread64` (what std calls): as `pread`.
    fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t;
    /// Hooked `pwrite`: on a file inside a task, made on the blocking pool.
    fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t;
    /// Hooked `pwrite64` (what std calls): as `pwrite`.
    fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t;
    /// Hooked `preadv`: on a file inside a task, made on the blocking pool.
    fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t;
    /// Hooked `preadv64` (what std calls): as `preadv`.
    fn preadv64(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t;
    /// Hooked `pwritev`: on a file inside a task, made on the blocking pool.
    fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t;
    /// Hooked `pwritev64` (what std calls): as `pwritev`.
    fn pwritev64(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t;
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

/// Runs an `open`-like call: on the blocking pool inside a task (the path
/// may name a file on a slow disk, a FIFO that waits for its other end, a
/// device), in place anywhere else.
fn opening(call: impl FnOnce() -> c_int) -> c_int {
    if may_park() {
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

/// A `read` or `readv` on a regular file inside a task, answered in place
/// from the page cache when it holds the data (`fs::nowait`): no hand-off
/// to the pool. `None` when the call must go its usual way (not a file
/// that offloads, too large, nothing cached, not supported).
///
/// The caller sees what `read(2)` would return: all it asked for, or up to
/// the end of the file. A short answer that stops before the end of the
/// file (the rest is not cached) is completed with a `readv` of the rest
/// on the pool; if that one fails, the bytes already read are returned
/// (as the kernel does for a read that fails part-way), `errno` as
/// before.
///
/// # Safety
/// `iov` and `cnt` as `readv(2)` takes them.
pub(super) unsafe fn read_in_place(fd: c_int, iov: *const iovec, cnt: c_int) -> Option<ssize_t> {
    if !(offloads_fd(fd) && is_file(fd)) {
        return None;
    }
    let ctx = fdctx::get(fd)?;
    if ctx.state(fd) & fdctx::NO_NOWAIT != 0 {
        return None;
    }
    let entries = usize::try_from(cnt).ok().filter(|&n| n > 0)?;
    // SAFETY: the caller's vector of `cnt` entries.
    let iovs = unsafe { std::slice::from_raw_parts(iov, entries) };
    let len = iovs
        .iter()
        .try_fold(0usize, |sum, v| sum.checked_add(v.iov_len))?;
    // SAFETY: the caller's vector, `len` bytes in all.
    let got = match unsafe { crate::fs::nowait::read_cached(fd, iov, cnt, len) } {
        Cached::Read(n) => n,
        Cached::Miss => return None,
        Cached::Refused => {
            // This file only: another file system may take the flag.
            ctx.set_bit(fdctx::NO_NOWAIT, true);
            return None;
        }
    };
    if got == 0 || got >= len || at_end(fd) {
        return Some(got as ssize_t);
    }
    // The rest is not cached: read it on the pool, at the position the
    // short read left.
    let rest = rest_of(iovs, got);
    let saved = errno();
    let rest_cnt = rest.len() as c_int;
    // SAFETY: the rest of the caller's buffers; `rest` outlives the call.
    let more = offload(|| unsafe { real::readv(fd, rest.as_ptr(), rest_cnt) });
    if more > 0 {
        Some(got as ssize_t + more)
    } else {
        set_errno(saved);
        Some(got as ssize_t)
    }
}

/// Whether `fd`'s position is at or past the end of its file (a short
/// read there is the end of the file, not a miss). False if unknown.
fn at_end(fd: c_int) -> bool {
    // SAFETY: a plain query on the descriptor.
    let pos = unsafe { libc::lseek64(fd, 0, libc::SEEK_CUR) };
    let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: `st` is room for one stat64.
    if pos < 0 || unsafe { libc::fstat64(fd, st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstat64 succeeded and filled it.
    pos >= unsafe { st.assume_init() }.st_size
}

/// The buffers of `iovs` left after the first `done` bytes.
fn rest_of(iovs: &[iovec], mut done: usize) -> Vec<iovec> {
    let mut rest = Vec::with_capacity(iovs.len());
    for v in iovs {
        if done >= v.iov_len {
            done -= v.iov_len;
            continue;
        }
        rest.push(iovec {
            // SAFETY: `done` is within this buffer.
            iov_base: unsafe { v.iov_base.cast::<u8>().add(done) }.cast(),
            iov_len: v.iov_len - done,
        });
        done = 0;
    }
    rest
}
