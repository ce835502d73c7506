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
//! A kernel without `preadv2` (`ENOSYS`) makes the process stop trying:
//! one flag for the process, [`UNSUPPORTED`], set once and never cleared.
//! `EOPNOTSUPP` is the file's answer, not the kernel's: a file system that
//! cannot honour `RWF_NOWAIT` (`/proc`, `/sys`, some FUSE and network
//! ones) refuses it while the disk file systems take it, so it stops the
//! tries for that file only ([`Cached::Refused`]: `fs::File` keeps a flag,
//! the hooks a bit of the descriptor's bookkeeping). A kernel too old for
//! the flag answers the same for every file, and costs one failed call per
//! file. Every other failure (`EAGAIN`, `EINVAL` for an `O_DIRECT`
//! buffer, `EISDIR`, ...) is a miss: the caller makes the call on the pool
//! as before, and it fails there with its own errno. `errno` is left as
//! the caller had it on a miss or a refusal.
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

/// What [`read_cached`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cached {
    /// `n` bytes read in place (0: end of file; fewer than asked: the rest
    /// is not cached, or end of file).
    Read(usize),
    /// Not tried, or a miss: nothing read, the read goes to the pool.
    Miss,
    /// The file refused `RWF_NOWAIT` (`EOPNOTSUPP`): nothing read; the
    /// caller stops trying for this file.
    Refused,
}

/// Reads into `iov` (`len` bytes in all) what the page cache holds, at the
/// file position, advancing it (see [`Cached`]). On a miss or a refusal
/// nothing was read and `errno` is unchanged.
///
/// # Safety
///
/// `iov` and `cnt` as `readv(2)` takes them: `cnt` entries, each naming
/// memory writable for its length, `len` their total.
pub(crate) unsafe fn read_cached(fd: c_int, iov: *const iovec, cnt: c_int, len: usize) -> Cached {
    if len == 0 || len > IN_PLACE_MAX || UNSUPPORTED.load(Ordering::Relaxed) {
        return Cached::Miss;
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
        return Cached::Read(r as usize);
    }
    // SAFETY: as above.
    let e = unsafe { *libc::__errno_location() };
    let out = match e {
        libc::ENOSYS => {
            UNSUPPORTED.store(true, Ordering::Relaxed);
            Cached::Miss
        }
        libc::EOPNOTSUPP => Cached::Refused,
        _ => Cached::Miss,
    };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
    out
}
