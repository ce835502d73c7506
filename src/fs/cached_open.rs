//! Opens answered from the kernel's caches in place, without the blocking
//! pool: `openat2` with `RESOLVE_CACHED`, as io_uring tries an open first.
//!
//! With `RESOLVE_CACHED` the kernel resolves the path only from what its
//! lookup cache (the dentries) already holds, and answers `EAGAIN` where it
//! would have to read a directory from the disk. An open made that way
//! does no disk IO for the lookup, so a task may make it on its own thread:
//! `gofer::fs::read` of a small cached file then makes no hand-off at all
//! (open, size, read with [`nowait`](super::nowait), close), where each
//! hand-off is a wake-up of a pool thread and one back, each of which
//! waits for a CPU when the cores are busy.
//!
//! Only what cannot block or change anything is done in place:
//!
//! 1. A probe: `openat2(path, O_PATH)`. An `O_PATH` descriptor opens
//!    nothing (no device's open, no FIFO's rendezvous) and cannot block.
//!    `fstat` on it must show a regular file, and `fstatfs` a local file
//!    system from [`LOCAL`]: the open of a file on NFS, CIFS or FUSE asks
//!    a server (a revalidation, a daemon's `open`), which can take as long
//!    as the server likes.
//! 2. The open for reading, `O_RDONLY | O_NONBLOCK`, cached again. The path
//!    may name another file by now (a rename in between): `O_NONBLOCK`
//!    keeps a FIFO swapped in from blocking the open, and `fstat` on the
//!    new descriptor must show a regular file again, else it is closed and
//!    the whole call goes to the pool. Then `O_NONBLOCK` is cleared
//!    (`F_SETFL`), so the file's status flags are those std's open gives.
//!
//! Anything else (the lookup not cached, an error, a special file, a remote
//! file system, a kernel without `openat2` or `RESOLVE_CACHED`) is a miss,
//! and the caller makes std's own call on the pool: errors always come from
//! std's call, with its messages. A kernel without the call (`ENOSYS`, or
//! `EINVAL` for a flag it does not know: before 5.12) makes the process
//! stop trying ([`UNSUPPORTED`], set once). `errno` is left as the caller
//! had it.
//!
//! What can still hold the thread: a `fanotify` permission listener
//! (`FAN_OPEN_PERM`, antivirus scanners) answers each open before it
//! returns. The Dispatcher treats a Processer held that way like any other
//! blocked one.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once `openat2` or `RESOLVE_CACHED` proved unsupported: no more tries.
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// The file systems whose open of a regular file does not leave the
/// machine (`statfs(2)`'s `f_type`): ext2/3/4, xfs, btrfs, f2fs, tmpfs,
/// ramfs, overlayfs (a container's root; its open reaches the layer
/// below, local in every setup it is meant for).
const LOCAL: [u32; 7] = [
    0xEF53,      // ext2, ext3, ext4
    0x5846_5342, // xfs
    0x9123_683E, // btrfs
    0xF2F5_2010, // f2fs
    0x0102_1994, // tmpfs
    0x8584_58F6, // ramfs
    0x794C_7630, // overlayfs
];

/// A regular file opened for reading in place.
pub(crate) struct Opened {
    /// The file, its position at 0, with the status flags std's open gives.
    pub(crate) file: std::fs::File,
    /// Its size when opened.
    pub(crate) size: u64,
}

/// Opens `path` for reading in place when the kernel's caches can answer
/// (see the module docs); `None` means the caller makes std's call on the
/// pool. Only inside a task: elsewhere the caller makes std's call in
/// place anyway.
pub(crate) fn open_read(path: &Path) -> Option<Opened> {
    crate::runtime::context::current_task_ptr()?;
    if UNSUPPORTED.load(Ordering::Relaxed) {
        return None;
    }
    let path = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: errno's location is valid for the calling thread.
    let saved = unsafe { *libc::__errno_location() };
    let out = open_regular(&path);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
    out
}

fn open_regular(path: &CString) -> Option<Opened> {
    let probe = match openat2_cached(path, libc::O_PATH | libc::O_CLOEXEC) {
        Ok(fd) => fd,
        Err(libc::ENOSYS | libc::EINVAL | libc::E2BIG) => {
            UNSUPPORTED.store(true, Ordering::Relaxed);
            return None;
        }
        Err(_) => return None,
    };
    let st = fstat(&probe)?;
    if !is_regular(&st) || !on_local_fs(&probe) {
        return None;
    }
    drop(probe);
    let fd = openat2_cached(
        path,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
    )
    .ok()?;
    let st = fstat(&fd)?;
    if !is_regular(&st) {
        return None;
    }
    // SAFETY: `fd` is open. `F_SETFL` changes only O_APPEND, O_ASYNC,
    // O_DIRECT, O_NOATIME and O_NONBLOCK, of which the open set only
    // O_NONBLOCK: 0 clears it and keeps the rest.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, 0) } != 0 {
        return None;
    }
    Some(Opened {
        file: std::fs::File::from(fd),
        size: u64::try_from(st.st_size).unwrap_or(0),
    })
}

/// `struct open_how` of `openat2(2)`, version 0 (24 bytes), the size the
/// call is given.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2(AT_FDCWD, path, {flags, resolve: RESOLVE_CACHED})`, or the
/// errno it failed with.
fn openat2_cached(path: &CString, flags: libc::c_int) -> Result<OwnedFd, libc::c_int> {
    let how = OpenHow {
        flags: flags as u64,
        mode: 0,
        resolve: libc::RESOLVE_CACHED,
    };
    // SAFETY: a NUL-terminated path and an `open_how` of the size passed,
    // both alive for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if r < 0 {
        // SAFETY: errno's location is valid for the calling thread.
        return Err(unsafe { *libc::__errno_location() });
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r as libc::c_int) })
}

fn fstat(fd: &OwnedFd) -> Option<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: an open descriptor (`O_PATH` ones included, since 3.6) and
    // room for one `stat`.
    if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: `fstat` succeeded, so it filled `st`.
    Some(unsafe { st.assume_init() })
}

fn is_regular(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
}

fn on_local_fs(fd: &OwnedFd) -> bool {
    let mut sf = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: an open descriptor and room for one `statfs`.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), sf.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: `fstatfs` succeeded, so it filled `sf`.
    let kind = unsafe { sf.assume_init() }.f_type;
    // The magics are 32-bit; the field's type differs between targets.
    LOCAL.contains(&(kind as u32))
}
