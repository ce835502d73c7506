//! The loop every hooked data call runs inside a task: try the call asked
//! not to block, and on `EAGAIN` park the task on the IO manager until the
//! descriptor is ready, then try again.
//!
//! A regular file or block device is ready to epoll at every moment, so no
//! try-wait-retry can spare the thread there: a data call on one goes to
//! the blocking pool instead (`offload.rs`), whole.
//!
//! This file owns the routing decision for a descriptor ([`route`]), the
//! loop ([`io_loop`]) and the per-call ways to ask the kernel not to block
//! (`MSG_DONTWAIT`, `RWF_NOWAIT`, a one-call `O_NONBLOCK`). Its invariant:
//! a descriptor's flags are never left changed, so plain threads, clones
//! and other processes see exactly what they would without the hooks. The
//! race with `close` is drawn in `fdctx.rs` (the generation moves before
//! waiters wake): every wait here rechecks it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use libc::{c_int, c_ulong, iovec, msghdr, socklen_t, ssize_t};

use super::fdctx::{self, FdCtx, FILE, HOOKED, KNOWN, SOCKET, USER_NONBLOCK};
use super::guard::{errno, guarded, is_stdio, may_wait, set_errno};
use super::offload::offload;
use crate::runtime::io::{poll_fd, Interest, Registration};
use crate::sys::real;

/// Whether pipes accept `RWF_NOWAIT` (Linux 5.x on): cleared the first time
/// the kernel refuses it, after which pipe calls block their thread.
static PIPES_NOWAIT: AtomicBool = AtomicBool::new(true);

/// What a call on `fd` should do.
pub(super) enum Route {
    /// Straight to libc.
    Pass,
    /// Through [`io_loop`]: `ctx`, its state when the call began.
    Wait(&'static FdCtx, u64),
    /// A regular file or a block device: a data call goes to the blocking
    /// pool as it stands.
    Offload,
    /// The descriptor was closed while the call looked at it (or is not
    /// open): the call fails with `EBADF`. Passing it to libc could block
    /// the thread for good on a descriptor closed under it, since `close`
    /// does not wake a system call already waiting on it.
    Closed,
}

/// A call waits through the reactor only inside a task, on a socket or a
/// pipe (one the kernel can be asked not to block on, call by call), that
/// the program has not made non-blocking itself and that is not stdio,
/// and only while the task may switch out at all (`guard::may_wait`: not
/// while its thread holds a C lock).
/// Inside a task, a regular file or block device (not stdio) goes to the
/// blocking pool. Everything else, every call on a plain thread included,
/// is libc's, exactly as without the hooks.
pub(super) fn route(fd: c_int) -> Route {
    if is_stdio(fd) || !may_wait() {
        return Route::Pass;
    }
    let Some(ctx) = fdctx::get(fd) else {
        return Route::Pass;
    };
    let st = ctx.state(fd);
    if st & KNOWN == 0 {
        // `state` learned nothing: the descriptor is not open, or a close
        // began while it looked (see `FdCtx::state`).
        return Route::Closed;
    }
    if st & FILE != 0 {
        // Offloaded when the task may park (`guard::may_wait`: not while
        // the thread panics).
        if !may_wait() {
            return Route::Pass;
        }
        return Route::Offload;
    }
    if st & HOOKED == 0 || st & USER_NONBLOCK != 0 {
        return Route::Pass;
    }
    if st & SOCKET == 0 && !PIPES_NOWAIT.load(Ordering::Relaxed) {
        return Route::Pass; // a pipe, on a kernel that cannot spare it
    }
    Route::Wait(ctx, st)
}

/// Why a wait ended without the descriptor becoming ready.
pub(super) enum Stop {
    /// The socket's timeout passed: `EAGAIN`, like the kernel.
    TimedOut,
    /// The descriptor was closed meanwhile: `EBADF`.
    Closed,
    /// Another error, with its errno.
    Os(c_int),
}

/// Runs a call the way [`route`] says: `plain` (the call as the program
/// made it) straight to libc, or `nowait` (the same call, asked not to
/// block: `MSG_DONTWAIT` on a socket, `RWF_NOWAIT` on a pipe; its argument
/// says which) until it does not fail with `EAGAIN`, parking the task on
/// the reactor in between.
///
/// The descriptor's flags are never touched: the open file may be shared
/// with plain threads and other processes, which must not see it change.
///
/// `data` says the call moves data (not an `accept`): on a descriptor that
/// shares its open file with another number (`dup`, `try_clone`), whose
/// program settings may have been made through that other number, the
/// first `EAGAIN` of such a call asks the kernel for them (see
/// [`shared_settings`]).
pub(super) fn io_loop(
    fd: c_int,
    interest: Interest,
    data: bool,
    plain: impl FnOnce() -> ssize_t,
    mut nowait: impl FnMut(bool) -> ssize_t,
) -> ssize_t {
    let (ctx, st) = match route(fd) {
        Route::Pass => return plain(),
        Route::Closed => return fail(Stop::Closed),
        Route::Offload if data => return offload(plain),
        Route::Offload => return plain(),
        Route::Wait(ctx, st) => (ctx, st),
    };
    let socket = st & SOCKET != 0;
    let gen = fdctx::generation(st);
    let mut deadline = ctx
        .timeout(interest)
        .and_then(|t| Instant::now().checked_add(t));
    let mut reg: Option<Arc<Registration>> = None;
    let mut asked = false;
    // Every call spends from the task's budget, which a wait refills, as
    // `gofer::net`'s do (`io/coop.rs`): a task whose descriptor never makes
    // it wait still lets the others on its thread run.
    crate::io::coop::spend();
    loop {
        let seen = reg.as_ref().map(|r| r.readiness(interest));
        let r = nowait(socket);
        if r >= 0 {
            return r;
        }
        match errno() {
            libc::EAGAIN => {}
            libc::EOPNOTSUPP if !socket => {
                // A kernel without RWF_NOWAIT for pipes: block, as a
                // thread would, from now on.
                PIPES_NOWAIT.store(false, Ordering::Relaxed);
                return plain();
            }
            _ => return r,
        }
        // Closed since the call began (the generation moves before the
        // waiters are woken): never wait on the registration it had.
        if ctx.generation_now() != gen {
            return fail(Stop::Closed);
        }
        if data && !asked && ctx.is_shared() {
            asked = true;
            match shared_settings(fd, interest, socket) {
                Shared::NonBlocking => return fail(Stop::Os(libc::EAGAIN)),
                Shared::Timeout(t) => {
                    deadline = t.and_then(|t| Instant::now().checked_add(t));
                }
            }
        }
        if reg.is_none() {
            match guarded(|| ctx.registration(fd, gen)) {
                Ok(Some(r)) => reg = Some(r),
                Ok(None) => {}
                Err(e) => return fail(Stop::Os(e.raw_os_error().unwrap_or(libc::EIO))),
            }
        }
        let stop = match (&reg, seen) {
            (Some(r), Some(ev)) => {
                r.clear(ev);
                if r.readiness(interest).is_ready() {
                    continue; // an event came in between: try again
                }
                r.wait(interest, deadline).err()
            }
            (Some(r), None) => r.wait(interest, deadline).err(),
            (None, _) => poll_fd(fd, interest, deadline).err(),
        };
        crate::io::coop::refill(); // it waited
        if ctx.generation_now() != gen {
            return fail(Stop::Closed);
        }
        if let Some(e) = stop {
            return fail(if e.kind() == std::io::ErrorKind::TimedOut {
                Stop::TimedOut
            } else {
                Stop::Os(e.raw_os_error().unwrap_or(libc::EIO))
            });
        }
    }
}

/// What the kernel holds for a shared open file: see [`shared_settings`].
enum Shared {
    /// The program made it non-blocking (through another number).
    NonBlocking,
    /// The timeout of `interest`'s direction (`None`: none).
    Timeout(Option<Duration>),
}

/// The program's settings of `fd`'s open file, from the kernel: its
/// `O_NONBLOCK` (gofer never leaves the flag set on a descriptor a data
/// call uses, so it is the program's) and, on a socket, its
/// `SO_RCVTIMEO`/`SO_SNDTIMEO`. Per-number bookkeeping cannot see a
/// setting made through another number of the same open file (a clone),
/// so a shared descriptor pays these two system calls before it waits.
fn shared_settings(fd: c_int, interest: Interest, socket: bool) -> Shared {
    // SAFETY: F_GETFL takes no argument.
    let fl = unsafe { real::fcntl(fd, libc::F_GETFL, 0) };
    if fl >= 0 && fl & libc::O_NONBLOCK != 0 {
        return Shared::NonBlocking;
    }
    if !socket {
        return Shared::Timeout(None);
    }
    let name = match interest {
        Interest::Read => libc::SO_RCVTIMEO,
        Interest::Write => libc::SO_SNDTIMEO,
    };
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let mut len = std::mem::size_of::<libc::timeval>() as socklen_t;
    // SAFETY: a timeval-sized option into a live timeval of that length.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            (&mut tv as *mut libc::timeval).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Shared::Timeout(None);
    }
    let d = Duration::from_secs(tv.tv_sec.max(0) as u64)
        + Duration::from_micros(tv.tv_usec.max(0) as u64);
    Shared::Timeout((!d.is_zero()).then_some(d))
}

/// `preadv2(fd, iov, cnt, -1, RWF_NOWAIT)`: a read at the current position
/// that fails with `EAGAIN` rather than block (pipes: Linux 5.x on).
///
/// # Safety
/// The contract of `readv(2)` for `iov` and `cnt`.
pub(super) unsafe fn preadv_nowait(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    // SAFETY: the caller's iovecs; position -1 (the current one), split
    // into low and high words as the system call takes it on 64-bit.
    unsafe {
        libc::syscall(
            libc::SYS_preadv2,
            fd,
            iov,
            cnt,
            -1i64,
            0i64,
            libc::RWF_NOWAIT,
        ) as ssize_t
    }
}

/// `pwritev2(fd, iov, cnt, -1, RWF_NOWAIT)`, as [`preadv_nowait`].
///
/// # Safety
/// The contract of `writev(2)` for `iov` and `cnt`.
pub(super) unsafe fn pwritev_nowait(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    // SAFETY: as in preadv_nowait.
    unsafe {
        libc::syscall(
            libc::SYS_pwritev2,
            fd,
            iov,
            cnt,
            -1i64,
            0i64,
            libc::RWF_NOWAIT,
        ) as ssize_t
    }
}

/// A `msghdr` with only its data vector set: what `readv`/`writev` are, as
/// `recvmsg`/`sendmsg`.
pub(super) fn iov_msg(iov: *const iovec, cnt: c_int) -> msghdr {
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut m: msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = iov as *mut iovec;
    m.msg_iovlen = cnt.max(0) as _;
    m
}

/// Runs `f` with `fd`'s open file switched to non-blocking mode for that
/// one call, then restores its flags. For the two calls the kernel has no
/// per-call flag for (`accept`, `connect`); the flag is visible to other
/// holders of the open file only during the call.
pub(super) fn nonblocking_once(fd: c_int, f: impl FnOnce() -> c_int) -> c_int {
    // SAFETY: F_GETFL takes no argument.
    let fl = unsafe { real::fcntl(fd, libc::F_GETFL, 0) };
    if fl < 0 || fl & libc::O_NONBLOCK != 0 {
        return f();
    }
    // SAFETY: F_SETFL with the descriptor's own flags, plus O_NONBLOCK.
    unsafe { real::fcntl(fd, libc::F_SETFL, (fl | libc::O_NONBLOCK) as c_ulong) };
    let r = f();
    let e = errno();
    // SAFETY: F_SETFL back to the flags read above.
    unsafe { real::fcntl(fd, libc::F_SETFL, fl as c_ulong) };
    set_errno(e);
    r
}

pub(super) fn fail(s: Stop) -> ssize_t {
    set_errno(match s {
        Stop::TimedOut => libc::EAGAIN,
        Stop::Closed => libc::EBADF,
        Stop::Os(e) => e,
    });
    -1
}
