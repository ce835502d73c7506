//! Reads answered from the page cache in place, without the blocking pool:
//! `preadv2(fd, iov, cnt, -1, RWF_NOWAIT)`, as io_uring tries first.
//!
//! With `RWF_NOWAIT` the kernel copies what the page cache holds and
//! returns rather than wait for the disk: all of the request, part of it
//! (the rest is not cached), 0 at end of file, or `EAGAIN` when nothing
//! requested is cached. Offset -1 makes it use and advance the file
//! position exactly as `read(2)`/`readv(2)` do, so a read made here and a
//! read made on the pool move the position the same way.
//!
//! A kernel without `preadv2` (`ENOSYS`) or without `RWF_NOWAIT`
//! (`EOPNOTSUPP`, also what a file system that cannot honour the flag
//! answers) makes the process stop trying: one flag for the process,
//! [`UNSUPPORTED`], set once and never cleared. Every other failure
//! (`EAGAIN`, `EINVAL` for an `O_DIRECT` buffer, `EISDIR`, ...) is a miss:
//! the caller makes the call on the pool as before, and it fails there
//! with its own errno. `errno` is left as the caller had it on a miss.
//!
//! Only reads of at most [`IN_PLACE_MAX`] bytes are tried: the copy runs
//! on the task's own thread, and a larger one is left to the pool, where
//! it does not hold the thread.

use std::sync::atomic::{AtomicBool, Ordering};

use libc::{c_int, iovec};

/// Set once `preadv2` or `RWF_NOWAIT` proved unsupported: no more tries.
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// The largest read tried in place (see the module docs).
pub(crate) const IN_PLACE_MAX: usize = 64 * 1024;

/// Reads into `iov` (`len` bytes in all) what the page cache holds, at the
/// file position, advancing it. `Some(n)`: `n` bytes read (0: end of file;
/// fewer than `len`: the rest is not cached, or end of file). `None`: not
/// tried, or a miss (see the module docs); nothing was read and `errno` is
/// unchanged.
///
/// # Safety
///
/// `iov` and `cnt` as `readv(2)` takes them: `cnt` entries, each naming
/// memory writable for its length, `len` their total.
pub(crate) unsafe fn read_cached(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    len: usize,
) -> Option<usize> {
    if len == 0 || len > IN_PLACE_MAX || UNSUPPORTED.load(Ordering::Relaxed) {
        return None;
    }
    // SAFETY: errno's location is valid for the calling thread.
    let saved = unsafe { *libc::__errno_location() };
    // SAFETY: the caller's vector; position -1 (the current one), split
    // into low and high words as the system call takes it on 64-bit.
    let r = unsafe {
        libc::syscall(
            libc::SYS_preadv2,
            fd,
            iov,
            cnt,
            -1i64,
            0i64,
            libc::RWF_NOWAIT,
        )
    };
    if r >= 0 {
        return Some(r as usize);
    }
    // SAFETY: as above.
    let e = unsafe { *libc::__errno_location() };
    if e == libc::EOPNOTSUPP || e == libc::ENOSYS {
        UNSUPPORTED.store(true, Ordering::Relaxed);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
    None
}
