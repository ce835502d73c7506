//! Sizing the process's descriptor table before a scheduler's Processers
//! start (`SchedulerBuilder::reserve_descriptors`).
//!
//! The kernel keeps the open descriptors of a process in one table, which
//! all its threads share, sized for the highest descriptor number in use. A
//! call that needs a number past the end (a `socket`, an `accept`, a `dup`)
//! grows the table to the next power of two, and when the process has more
//! than one thread the caller then waits in the kernel for an RCU grace
//! period before the old table can be freed (`expand_files`). On a
//! Processer that wait is a blocked Processer, and a burst of new
//! connections meets it at every doubling. The kernel never shrinks the
//! table while the process lives, so growing it once, on the thread that
//! builds the scheduler, before any Processer runs, takes those waits off
//! the Processers.
//!
//! The table is grown by `fcntl(fd, F_DUPFD_CLOEXEC, n - 1)` on a
//! descriptor opened for the purpose: the copy gets the lowest free number
//! at or above `n - 1`, so the table holds at least `n` entries, and the
//! copy and the original are then closed. Unlike `dup2(fd, n - 1)` this
//! never closes a descriptor the program already has at that number.

use std::io;

/// The soft `RLIMIT_NOFILE` limit: one past the highest descriptor number
/// the process may open. `None` when it cannot be read or is unlimited.
fn soft_nofile_limit() -> Option<usize> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into a live local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    if lim.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX))
}

/// How many entries [`reserve`] would size the table for: `requested`,
/// lowered to the soft `RLIMIT_NOFILE` limit (no descriptor at or above
/// it can be opened, so no table entry past it is ever needed).
pub(crate) fn target(requested: usize) -> usize {
    match soft_nofile_limit() {
        Some(limit) => requested.min(limit),
        None => requested,
    }
}

/// Grows the descriptor table to at least [`target`]`(requested)`
/// entries, once; a table already that large is left as it is (the
/// attempt costs a few system calls). Returns the error that stopped it,
/// which the caller may ignore: the scheduler works the same with a
/// smaller table, its Processers only meet the growth waits themselves.
pub(crate) fn reserve(requested: usize) -> io::Result<()> {
    let n = target(requested);
    // A table always has room for the first 64 descriptors.
    if n <= 64 {
        return Ok(());
    }
    let top =
        libc::c_int::try_from(n - 1).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: eventfd creates a descriptor this function owns; checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is open and ours; F_DUPFD_CLOEXEC takes a free number
    // at or above `top`, never one in use.
    let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, top) };
    let r = if copy < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    };
    // SAFETY: both descriptors were opened above and nothing else knows
    // their numbers; each is closed once.
    unsafe {
        if copy >= 0 {
            libc::close(copy);
        }
        libc::close(fd);
    }
    r
}
