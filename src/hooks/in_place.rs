//! Calls on regular files made in place, on the task's own thread, when
//! they need not wait for the disk: no hand-off to the blocking pool and
//! back (a pool thread's wake-up, then the task's), which costs tens of
//! microseconds where the call itself costs one or two, and which a task
//! holding a file lock (SQLite's) makes every other process and task wait
//! through.
//!
//! # Reads
//!
//! `read`, `readv`, `pread`, `preadv` (and `*64`) first try
//! `preadv2(fd, iov, cnt, off, RWF_NOWAIT)`: the kernel copies what the
//! page cache holds and returns rather than wait for the disk, with all of
//! the request, part of it (the rest is not cached, or the end of the
//! file), 0 at the end of the file, or `EAGAIN` when nothing asked for is
//! cached; then the call goes to the pool whole. Offset -1 uses and
//! advances the file position as `read`/`readv` do. Only reads of at most
//! [`IN_PLACE_MAX`] bytes are tried (the copy runs on the task's thread; a
//! larger one is left to the pool).
//!
//! # Writes
//!
//! `write`, `writev`, `pwrite`, `pwritev` (and `*64`) of at most
//! [`IN_PLACE_MAX`] bytes on a file opened without `O_DIRECT`, `O_SYNC`
//! and `O_DSYNC` are made in place. A buffered write copies into the page
//! cache and returns; the disk write happens later, in the kernel's
//! writeback. Where the file system takes `RWF_NOWAIT` for such writes
//! (XFS and btrfs on recent kernels), the write is asked with it first
//! and goes to the pool on `EAGAIN` (a lock held, blocks to allocate,
//! writeback throttling). Where
//! it refuses the flag (ext4 on 6.18 answers `EOPNOTSUPP` to every buffered
//! write with it), the write is made in place as it stands: measured on
//! ext4, 100 000 appends of 24 and 4096 bytes (SQLite's WAL frames, with
//! an `fdatasync` every 1000) slept in the kernel not once (no voluntary
//! context switch during any of them; mean 7 to 9 us, most of it the
//! copy). What can still put such a write to sleep is rare and bounded:
//! `balance_dirty_pages` once the dirty pages pass `vm.dirty_ratio` (a
//! pause of at most 200 ms, proportional to the pages the writer dirtied:
//! a task that writes faster than the disk is slowed, as a thread would
//! be), the inode's lock held by another writer of the same file, a
//! journal handle while the journal commits. Each stalls the thread's
//! other tasks for that time, which the Dispatcher sees as a blocked
//! Processer; a hand-off per write costs every writer on every call.
//! Large writes and synchronous files still go to the pool.
//!
//! # Where the flag is refused
//!
//! `EOPNOTSUPP` is remembered per file system (its device, [`REFUSED`])
//! and per direction, since one file system may take `RWF_NOWAIT` for
//! reads and refuse it for buffered writes, and another process-wide
//! answer would stop the tries on every file system for a refusal on one.
//! `ENOSYS` (a kernel without `preadv2`) stops them for the process. Any
//! other failure (`EINVAL`, `EISDIR`, ...) is a miss: the call goes to the
//! pool as it stands, and fails there with its own errno. On a miss
//! `errno` is left as the caller had it.
//!
//! A file in `O_DIRECT` mode is never tried: a direct read or write with
//! `RWF_NOWAIT` still waits for the disk (the flag spares only locks and
//! allocation), which would hold the thread. The mode comes from the
//! descriptor's bookkeeping (`fdctx.rs`), or from the kernel when another
//! number shares the open file (its `F_SETFL` is not seen here).
//!
//! Every call made in place spends from the task's IO budget
//! (`io/coop.rs`), as a socket call that does not wait does: a task that
//! reads a cached file in a loop yields its thread now and then.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use libc::{c_int, iovec, off64_t, ssize_t};

use super::fdctx::{self, open_mode, FdCtx, DIRECT, FILE, KNOWN, SYNC};
use super::guard::{errno, set_errno};
use super::offload::{offload, offloads_fd};
use crate::sys::real;

/// The largest read or write made in place (see the module docs).
pub(super) const IN_PLACE_MAX: usize = 64 * 1024;

/// Set once the kernel answered `ENOSYS` to `preadv2`/`pwritev2`.
static NO_V2: AtomicBool = AtomicBool::new(false);

/// File systems that refused `RWF_NOWAIT`: per slot a key (`fdctx`'s
/// `fs_key`, never 0) with [`WRITES`] set for a refusal of writes; 0 is
/// free. Beyond its slots a refusal is not remembered: the next call tries
/// again, which costs one system call that fails at once.
static REFUSED: [AtomicU64; 16] = [const { AtomicU64::new(0) }; 16];

/// The bit of a [`REFUSED`] entry that says writes (keys use bit 63 for
/// block devices, and device numbers stay far below bit 62).
const WRITES: u64 = 1 << 62;

fn refused(key: u64) -> bool {
    REFUSED
        .iter()
        .map(|slot| slot.load(Ordering::Relaxed))
        .take_while(|&k| k != 0)
        .any(|k| k == key)
}

fn refuse(key: u64) {
    for slot in &REFUSED {
        match slot.compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(k) if k == key => return,
            Err(_) => {}
        }
    }
}

/// Which way a call moves data.
#[derive(Clone, Copy, PartialEq)]
enum Dir {
    Read,
    Write,
}

/// A regular file or block device whose calls would go to the pool
/// (`offload::offloads_fd`), with its bookkeeping and state word.
fn file(fd: c_int) -> Option<(&'static FdCtx, u64)> {
    if !offloads_fd(fd) {
        return None;
    }
    let ctx = fdctx::get(fd)?;
    let st = ctx.state(fd);
    (st & KNOWN != 0 && st & FILE != 0).then_some((ctx, st))
}

/// The file's `DIRECT` and `SYNC` modes: from the bookkeeping, or from the
/// kernel when another number shares the open file.
fn mode(fd: c_int, ctx: &FdCtx, st: u64) -> u64 {
    if !ctx.is_shared() {
        return st & (DIRECT | SYNC);
    }
    // SAFETY: F_GETFL takes no argument.
    open_mode(unsafe { real::fcntl(fd, libc::F_GETFL, 0) })
}

/// The total length of `cnt` buffers at `iov`, if it is one that may be
/// moved in place (not 0, at most [`IN_PLACE_MAX`]).
///
/// # Safety
/// `iov` and `cnt` as `readv(2)` takes them.
unsafe fn in_place_len<'a>(iov: *const iovec, cnt: c_int) -> Option<(&'a [iovec], usize)> {
    let entries = usize::try_from(cnt).ok().filter(|&n| n > 0)?;
    // SAFETY: the caller's vector of `cnt` entries.
    let iovs = unsafe { std::slice::from_raw_parts(iov, entries) };
    let len = iovs
        .iter()
        .try_fold(0usize, |sum, v| sum.checked_add(v.iov_len))?;
    (len > 0 && len <= IN_PLACE_MAX).then_some((iovs, len))
}

/// `preadv2`/`pwritev2` with `RWF_NOWAIT` at `off` (-1: the file
/// position). `Ok(n)`: done, `n` bytes. `Err(true)`: refused for good
/// (remembered); `Err(false)`: a miss. `errno` is left as it was.
///
/// # Safety
/// `iov` and `cnt` as `readv(2)`/`writev(2)` take them.
unsafe fn nowait(
    fd: c_int,
    dir: Dir,
    key: u64,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
) -> Result<usize, bool> {
    let nr = match dir {
        Dir::Read => libc::SYS_preadv2,
        Dir::Write => libc::SYS_pwritev2,
    };
    let saved = errno();
    // SAFETY: the caller's vector; the offset in the low word, as the
    // system call takes it on 64-bit (the high word unused).
    let r = unsafe { libc::syscall(nr, fd, iov, cnt, off, 0i64, libc::RWF_NOWAIT) };
    if r >= 0 {
        return Ok(r as usize);
    }
    let e = errno();
    set_errno(saved);
    match e {
        libc::ENOSYS => {
            NO_V2.store(true, Ordering::Relaxed);
            Err(true)
        }
        libc::EOPNOTSUPP => {
            refuse(key);
            Err(true)
        }
        _ => Err(false),
    }
}

/// A read of `fd` into `iov` at `off` (`None`: at the file position,
/// advancing it), answered in place from the page cache when it holds the
/// data. `None` when the call must go its usual way (not a file that
/// offloads, too large, nothing cached, not supported).
///
/// The caller sees what `read(2)`/`pread(2)` would return: all it asked
/// for, or up to the end of the file. A short answer that stops before the
/// end of the file (the rest is not cached) is completed with a read of
/// the rest on the pool; if that one fails, the bytes already read are
/// returned (as the kernel does for a read that fails part-way), `errno`
/// as before.
///
/// # Safety
/// `iov` and `cnt` as `readv(2)` takes them.
pub(super) unsafe fn read(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: Option<off64_t>,
) -> Option<ssize_t> {
    if off.is_some_and(|o| o < 0) {
        return None; // EINVAL, from the call itself (-1 would mean the position)
    }
    let (ctx, st) = file(fd)?;
    // SAFETY: the caller's vector.
    let (iovs, len) = unsafe { in_place_len(iov, cnt) }?;
    let key = ctx.fs();
    if NO_V2.load(Ordering::Relaxed) || key == 0 || refused(key) {
        return None;
    }
    if mode(fd, ctx, st) & DIRECT != 0 {
        return None;
    }
    crate::io::coop::spend();
    // SAFETY: the caller's vector.
    let got = unsafe { nowait(fd, Dir::Read, key, iov, cnt, off.unwrap_or(-1)) }.ok()?;
    if got == 0 || got >= len || at_end(fd, off.map(|o| o + got as off64_t)) {
        return Some(got as ssize_t);
    }
    // The rest is not cached: read it on the pool, where the short read
    // stopped.
    Some(rest_on_pool(fd, Dir::Read, iovs, got, off))
}

/// A write of `iov` to `fd` at `off` (`None`: at the file position, or
/// its end with `O_APPEND`), made in place when it is a buffered write of
/// at most [`IN_PLACE_MAX`] bytes (see the module docs). `None` when the
/// call must go its usual way (to the pool).
///
/// A short answer to the `RWF_NOWAIT` try is completed with a write of the
/// rest on the pool; if that one fails, the bytes already written are
/// returned, `errno` as before.
///
/// # Safety
/// `iov` and `cnt` as `writev(2)` takes them.
pub(super) unsafe fn write(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: Option<off64_t>,
) -> Option<ssize_t> {
    if off.is_some_and(|o| o < 0) {
        return None; // EINVAL, from the call itself (-1 would mean the position)
    }
    let (ctx, st) = file(fd)?;
    // SAFETY: the caller's vector.
    let (iovs, len) = unsafe { in_place_len(iov, cnt) }?;
    let key = ctx.fs();
    if key == 0 || mode(fd, ctx, st) & (DIRECT | SYNC) != 0 {
        return None;
    }
    crate::io::coop::spend();
    let wkey = key | WRITES;
    if !NO_V2.load(Ordering::Relaxed) && !refused(wkey) {
        // SAFETY: the caller's vector.
        match unsafe { nowait(fd, Dir::Write, wkey, iov, cnt, off.unwrap_or(-1)) } {
            Ok(n) if n >= len => return Some(n as ssize_t),
            Ok(n) => return Some(rest_on_pool(fd, Dir::Write, iovs, n, off)),
            // A file system that takes the flag said the write would wait.
            Err(false) => return None,
            // Refused: a plain buffered write, below.
            Err(true) => {}
        }
    }
    // SAFETY: the caller's vector, as `writev(2)`/`pwritev(2)` take it.
    Some(unsafe {
        match off {
            None => real::writev(fd, iov, cnt),
            Some(o) => real::pwritev64(fd, iov, cnt, o),
        }
    })
}

/// Completes a call the fast path answered short: the rest of `iovs` after
/// `done` bytes, made on the pool at the file position (`off` `None`) or
/// at `off + done`. Returns the bytes moved in all; if the rest fails, the
/// bytes already moved, `errno` as before (as the kernel does for a call
/// that fails part-way).
fn rest_on_pool(fd: c_int, dir: Dir, iovs: &[iovec], done: usize, off: Option<off64_t>) -> ssize_t {
    let rest = rest_of(iovs, done);
    let (p, n) = (rest.as_ptr(), rest.len() as c_int);
    let at = off.map(|o| o + done as off64_t);
    let saved = errno();
    // SAFETY: the rest of the caller's buffers, `n` entries at `p`; `rest`
    // outlives the call, which the pool makes before `offload` returns.
    let more = offload(|| unsafe {
        match (dir, at) {
            (Dir::Read, None) => real::readv(fd, p, n),
            (Dir::Read, Some(o)) => real::preadv64(fd, p, n, o),
            (Dir::Write, None) => real::writev(fd, p, n),
            (Dir::Write, Some(o)) => real::pwritev64(fd, p, n, o),
        }
    });
    if more > 0 {
        done as ssize_t + more
    } else {
        set_errno(saved);
        done as ssize_t
    }
}

/// Whether a read that stopped at `pos` (`None`: the file position)
/// stopped at or past the end of the file (a short read there is the end
/// of the file, not a miss). False if unknown.
fn at_end(fd: c_int, pos: Option<off64_t>) -> bool {
    // SAFETY: a plain query on the descriptor.
    let pos = pos.unwrap_or_else(|| unsafe { libc::lseek64(fd, 0, libc::SEEK_CUR) });
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
