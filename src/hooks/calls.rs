//! The hooked libc symbols. Each decides in a few loads whether to pass the
//! call straight to libc (outside a task on a descriptor gofer has not
//! touched, on a regular file, in non-blocking mode the program chose,
//! inside a hook) or to run it in the loop that waits through the IO
//! manager (`io_loop`).
//!
//! The x86_64 System V calling convention passes a variadic function's
//! arguments as it passes a fixed one's, so `fcntl` and `ioctl` are defined
//! with their optional argument as a plain word; this module is built for
//! Linux on x86_64 and aarch64 only, whose conventions both allow it for
//! integer and pointer arguments.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use libc::{c_int, c_uint, c_ulong, c_void, iovec, msghdr, nfds_t, pollfd, size_t, sockaddr};
use libc::{socklen_t, ssize_t, timespec};

use super::fdctx::{self, FdCtx, HOOKED, KNOWN, SOCKET, USER_NONBLOCK};
use super::real;
use crate::runtime::context;
use crate::runtime::io::{poll_fd, Interest, Registration};

thread_local! {
    /// Set while a hook runs runtime code that could make hooked calls of
    /// its own (registering with the reactor: an allocation, an epoll
    /// descriptor): those go straight to libc.
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Set in a child process made by `fork` (the handler is registered with
/// `pthread_atfork` when the first scheduler is built). The child is a copy
/// of one thread of the parent, maybe in the middle of a task, and shares
/// the parent's epoll instance: every hooked call there goes straight to
/// libc, and nothing touches the reactor or the queues it copied.
static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn in_forked_child() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Whether pipes accept `RWF_NOWAIT` (Linux 5.x on): cleared the first time
/// the kernel refuses it, after which pipe calls block their thread.
static PIPES_NOWAIT: AtomicBool = AtomicBool::new(true);

/// Runs `f` with the recursion guard set.
fn guarded<R>(f: impl FnOnce() -> R) -> R {
    set_in_hook(true);
    let r = f();
    set_in_hook(false);
    r
}

// The guard's accessors are never inlined: a hook that waits in a
// migratable task (`migrate_started_tasks(true)`, `Builder::migratable`,
// chaos mode) may resume on another thread, and an inlined thread-local
// access could reuse the address of the thread it started on.
#[inline(never)]
fn set_in_hook(on: bool) {
    IN_HOOK.with(|g| g.set(on));
}

#[inline(never)]
fn in_hook() -> bool {
    IN_HOOK.with(Cell::get)
}

/// Whether a call must go straight to libc whatever it is: inside a hook's
/// own runtime code, or in a forked child.
fn bypass() -> bool {
    FORKED.load(Ordering::Relaxed) || in_hook()
}

/// Standard input, output and error: calls on them never park. std holds
/// its stdio locks across them, and those locks belong to the thread: a
/// task parked while holding one would let the next task on the thread
/// re-enter it.
fn is_stdio(fd: c_int) -> bool {
    (0..=2).contains(&fd)
}

fn errno() -> c_int {
    // SAFETY: errno's location is valid for the calling thread.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
}

/// Whether the caller runs inside a gofer task.
fn in_task() -> bool {
    context::current_task_ptr().is_some()
}

/// What a call on `fd` should do.
enum Route {
    /// Straight to libc.
    Pass,
    /// Through [`io_loop`]: `ctx`, its state when the call began.
    Wait(&'static FdCtx, u64),
    /// The descriptor was closed while the call looked at it (or is not
    /// open): the call fails with `EBADF`. Passing it to libc could block
    /// the thread for good on a descriptor closed under it, since `close`
    /// does not wake a system call already waiting on it.
    Closed,
}

/// A call waits through the reactor only inside a task, on a socket or a
/// pipe (one the kernel can be asked not to block on, call by call), that
/// the program has not made non-blocking itself and that is not stdio.
/// Everything else, every call on a plain thread included, is libc's,
/// exactly as without the hooks.
fn route(fd: c_int) -> Route {
    if is_stdio(fd) || bypass() || !in_task() {
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
    if st & HOOKED == 0 || st & USER_NONBLOCK != 0 {
        return Route::Pass;
    }
    if st & SOCKET == 0 && !PIPES_NOWAIT.load(Ordering::Relaxed) {
        return Route::Pass; // a pipe, on a kernel that cannot spare it
    }
    Route::Wait(ctx, st)
}

/// Why a wait ended without the descriptor becoming ready.
enum Stop {
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
fn io_loop(
    fd: c_int,
    interest: Interest,
    data: bool,
    plain: impl FnOnce() -> ssize_t,
    mut nowait: impl FnMut(bool) -> ssize_t,
) -> ssize_t {
    let (ctx, st) = match route(fd) {
        Route::Pass => return plain(),
        Route::Closed => return fail(Stop::Closed),
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
unsafe fn preadv_nowait(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
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
unsafe fn pwritev_nowait(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
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
fn iov_msg(iov: *const iovec, cnt: c_int) -> msghdr {
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
fn nonblocking_once(fd: c_int, f: impl FnOnce() -> c_int) -> c_int {
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

fn fail(s: Stop) -> ssize_t {
    set_errno(match s {
        Stop::TimedOut => libc::EAGAIN,
        Stop::Closed => libc::EBADF,
        Stop::Os(e) => e,
    });
    -1
}

// ---------------------------------------------------------------- reads

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
    io_loop(
        fd,
        Interest::Read,
        true,
        // SAFETY: forwarded with the caller's arguments.
        || unsafe { real::read(fd, buf, n) },
        // SAFETY: the same call, asked not to block, with the caller's arguments.
        |socket| unsafe {
            if socket {
                real::recv(fd, buf, n, libc::MSG_DONTWAIT)
            } else {
                preadv_nowait(fd, &iov, 1)
            }
        },
    )
}

/// Hooked `readv`.
///
/// # Safety
/// The contract of `readv(2)`.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    io_loop(
        fd,
        Interest::Read,
        true,
        // SAFETY: forwarded with the caller's arguments.
        || unsafe { real::readv(fd, iov, cnt) },
        // SAFETY: the same call, asked not to block, with the caller's arguments.
        |socket| unsafe {
            if socket {
                real::recvmsg(fd, &mut iov_msg(iov, cnt), libc::MSG_DONTWAIT)
            } else {
                preadv_nowait(fd, iov, cnt)
            }
        },
    )
}

/// Hooked `recv`.
///
/// # Safety
/// The contract of `recv(2)`.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    if flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: forwarded with the caller's arguments.
        return unsafe { real::recv(fd, buf, n, flags) };
    }
    io_loop(
        fd,
        Interest::Read,
        true,
        // SAFETY: forwarded with the caller's arguments.
        || unsafe { real::recv(fd, buf, n, flags) },
        // SAFETY: the same call, asked not to block, with the caller's arguments.
        |_| unsafe { real::recv(fd, buf, n, flags | libc::MSG_DONTWAIT) },
    )
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
    if flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: forwarded with the caller's arguments.
        return unsafe { real::recvfrom(fd, buf, n, flags, a, al) };
    }
    io_loop(
        fd,
        Interest::Read,
        true,
        // SAFETY: forwarded with the caller's arguments.
        || unsafe { real::recvfrom(fd, buf, n, flags, a, al) },
        // SAFETY: the same call, asked not to block, with the caller's arguments.
        |_| unsafe { real::recvfrom(fd, buf, n, flags | libc::MSG_DONTWAIT, a, al) },
    )
}

/// Hooked `recvmsg`.
///
/// # Safety
/// The contract of `recvmsg(2)`.
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    if flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: forwarded with the caller's arguments.
        return unsafe { real::recvmsg(fd, msg, flags) };
    }
    io_loop(
        fd,
        Interest::Read,
        true,
        // SAFETY: forwarded with the caller's arguments.
        || unsafe { real::recvmsg(fd, msg, flags) },
        // SAFETY: the same call, asked not to block, with the caller's arguments.
        |_| unsafe { real::recvmsg(fd, msg, flags | libc::MSG_DONTWAIT) },
    )
}

// ---------------------------------------------------------------- writes

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
    io_loop(
        fd,
        Interest::Write,
        true,
        // SAFETY: forwarded with the caller's arguments.
        || unsafe { real::write(fd, buf, n) },
        // SAFETY: the same call, asked not to block, with the caller's arguments.
        |socket| unsafe {
            if socket {
                real::send(fd, buf, n, libc::MSG_DONTWAIT)
            } else {
                pwritev_nowait(fd, &iov, 1)
            }
        },
    )
}

/// Hooked `writev`.
///
/// # Safety
/// The contract of `writev(2)`.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    io_loop(
        fd,
        Interest::Write,
        true,
        // SAFETY: forwarded with the caller's arguments.
        || unsafe { real::writev(fd, iov, cnt) },
        // SAFETY: the same call, asked not to block, with the caller's arguments.
        |socket| unsafe {
            if socket {
                real::sendmsg(fd, &iov_msg(iov, cnt), libc::MSG_DONTWAIT)
            } else {
                pwritev_nowait(fd, iov, cnt)
            }
        },
    )
}

/// Hooked `send`.
///
/// # Safety
/// The contract of `send(2)`.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    if flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: forwarded with the caller's arguments.
        return unsafe { real::send(fd, buf, n, flags) };
    }
    io_loop(
        fd,
        Interest::Write,
        true,
        // SAFETY: forwarded with the caller's arguments.
        || unsafe { real::send(fd, buf, n, flags) },
        // SAFETY: the same call, asked not to block, with the caller's arguments.
        |_| unsafe { real::send(fd, buf, n, flags | libc::MSG_DONTWAIT) },
    )
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
    if flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: forwarded with the caller's arguments.
        return unsafe { real::sendto(fd, buf, n, flags, a, al) };
    }
    io_loop(
        fd,
        Interest::Write,
        true,
        // SAFETY: forwarded with the caller's arguments.
        || unsafe { real::sendto(fd, buf, n, flags, a, al) },
        // SAFETY: the same call, asked not to block, with the caller's arguments.
        |_| unsafe { real::sendto(fd, buf, n, flags | libc::MSG_DONTWAIT, a, al) },
    )
}

/// Hooked `sendmsg`.
///
/// # Safety
/// The contract of `sendmsg(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    if flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: forwarded with the caller's arguments.
        return unsafe { real::sendmsg(fd, msg, flags) };
    }
    io_loop(
        fd,
        Interest::Write,
        true,
        // SAFETY: forwarded with the caller's arguments.
        || unsafe { real::sendmsg(fd, msg, flags) },
        // SAFETY: the same call, asked not to block, with the caller's arguments.
        |_| unsafe { real::sendmsg(fd, msg, flags | libc::MSG_DONTWAIT) },
    )
}

// ---------------------------------------------------------------- sockets

/// Hooked `accept`: non-blocking for the one call (the kernel has no
/// per-call flag for it), waiting readable in between.
///
/// # Safety
/// The contract of `accept(2)`.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, a: *mut sockaddr, al: *mut socklen_t) -> c_int {
    io_loop(
        fd,
        Interest::Read,
        false,
        // SAFETY: forwarded with the caller's arguments.
        || unsafe { real::accept(fd, a, al) as ssize_t },
        // SAFETY: the same call, asked not to block, with the caller's arguments.
        |_| nonblocking_once(fd, || unsafe { real::accept(fd, a, al) }) as ssize_t,
    ) as c_int
}

/// Hooked `accept4`: as `accept`.
///
/// # Safety
/// The contract of `accept4(2)`.
#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    a: *mut sockaddr,
    al: *mut socklen_t,
    flags: c_int,
) -> c_int {
    io_loop(
        fd,
        Interest::Read,
        false,
        // SAFETY: forwarded with the caller's arguments.
        || unsafe { real::accept4(fd, a, al, flags) as ssize_t },
        // SAFETY: the same call, asked not to block, with the caller's arguments.
        |_| nonblocking_once(fd, || unsafe { real::accept4(fd, a, al, flags) }) as ssize_t,
    ) as c_int
}

/// Backoff of a Unix-domain connect whose listener's queue is full: the
/// socket gets no event when the queue drains, so the connect is retried,
/// from [`UNIX_RETRY_MIN`] doubling to [`UNIX_RETRY_MAX`] between tries.
const UNIX_RETRY_MIN: Duration = Duration::from_micros(100);
const UNIX_RETRY_MAX: Duration = Duration::from_millis(10);

/// Hooked `connect`: a connect started non-blocking (the flag set for that
/// one call), a wait until writable (bounded by `SO_SNDTIMEO`, `ETIMEDOUT`
/// on expiry), then the result from `SO_ERROR`. A Unix-domain connect
/// whose listener's queue is full (`EAGAIN`, where a thread would wait) is
/// retried until it goes through or `SO_SNDTIMEO` passes (`EAGAIN`, as
/// the kernel's).
///
/// # Safety
/// The contract of `connect(2)`.
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, a: *const sockaddr, al: socklen_t) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let real_connect = || unsafe { real::connect(fd, a, al) };
    let (ctx, st) = match route(fd) {
        Route::Wait(ctx, st) if st & SOCKET != 0 => (ctx, st),
        Route::Closed => return fail(Stop::Closed) as c_int,
        _ => return real_connect(),
    };
    let gen = fdctx::generation(st);
    let deadline = ctx
        .timeout(Interest::Write)
        .and_then(|t| Instant::now().checked_add(t));
    let unix = !a.is_null()
        && al as usize >= std::mem::size_of::<libc::sa_family_t>()
        // SAFETY: the caller's address, at least a family long.
        && c_int::from(unsafe { (*a).sa_family }) == libc::AF_UNIX;
    let mut backoff = UNIX_RETRY_MIN;
    loop {
        let r = nonblocking_once(fd, real_connect);
        if r == 0 {
            return 0;
        }
        match errno() {
            libc::EINPROGRESS => break,
            libc::EAGAIN if unix => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return fail(Stop::TimedOut) as c_int;
                }
                crate::time::sleep::sleep(backoff);
                backoff = (backoff * 2).min(UNIX_RETRY_MAX);
                if ctx.generation_now() != gen {
                    return fail(Stop::Closed) as c_int;
                }
            }
            _ => return r,
        }
    }
    let waited = match guarded(|| ctx.registration(fd, gen)) {
        Ok(Some(reg)) => reg.wait(Interest::Write, deadline),
        Ok(None) => poll_fd(fd, Interest::Write, deadline),
        Err(e) => Err(e),
    };
    if ctx.generation_now() != gen {
        set_errno(libc::EBADF);
        return -1;
    }
    if let Err(e) = waited {
        set_errno(if e.kind() == std::io::ErrorKind::TimedOut {
            libc::ETIMEDOUT
        } else {
            e.raw_os_error().unwrap_or(libc::EIO)
        });
        return -1;
    }
    let mut err: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: SO_ERROR into a live c_int of the given length.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut c_int).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return -1;
    }
    if err != 0 {
        set_errno(err);
        return -1;
    }
    0
}

/// Hooked `poll`: one descriptor, inside a task, waits through the IO
/// manager; anything else is libc's.
///
/// # Safety
/// The contract of `poll(2)`.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let real_poll = |t: c_int| unsafe { real::poll(fds, n, t) };
    if n != 1 || timeout == 0 || bypass() || !in_task() {
        return real_poll(timeout);
    }
    // SAFETY: n == 1, so `fds` points at one pollfd the caller owns.
    let pfd = unsafe { &*fds };
    if is_stdio(pfd.fd) {
        return real_poll(timeout);
    }
    let interest = match (
        pfd.events & libc::POLLIN != 0,
        pfd.events & libc::POLLOUT != 0,
    ) {
        (true, false) => Interest::Read,
        (false, true) => Interest::Write,
        _ => return real_poll(timeout),
    };
    let Some(ctx) = fdctx::get(pfd.fd) else {
        return real_poll(timeout);
    };
    let st = ctx.state(pfd.fd);
    if st & HOOKED == 0 {
        return real_poll(timeout);
    }
    let deadline = (timeout > 0)
        .then(|| Instant::now().checked_add(Duration::from_millis(timeout as u64)))
        .flatten();
    let reg = match guarded(|| ctx.registration(pfd.fd, fdctx::generation(st))) {
        Ok(Some(reg)) => reg,
        _ => return real_poll(timeout),
    };
    loop {
        let r = real_poll(0);
        if r != 0 {
            return r;
        }
        let seen = reg.readiness(interest);
        if seen.is_ready() {
            reg.clear(seen);
            if real_poll(0) != 0 {
                continue;
            }
        }
        if reg.wait(interest, deadline).is_err() {
            return real_poll(0); // timed out: report what is there now (0)
        }
    }
}

// ---------------------------------------------------------------- sleeping

/// Sleeps the running task for `d` (the caller checked it is in one).
fn task_sleep(d: Duration) {
    crate::time::sleep::sleep(d);
}

fn ts_duration(ts: &timespec) -> Option<Duration> {
    (ts.tv_sec >= 0 && (0..1_000_000_000).contains(&ts.tv_nsec))
        .then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// Hooked `nanosleep`: inside a task, the task sleeps.
///
/// # Safety
/// The contract of `nanosleep(2)`.
#[no_mangle]
pub unsafe extern "C" fn nanosleep(req: *const timespec, rem: *mut timespec) -> c_int {
    if bypass() || !in_task() || req.is_null() {
        // SAFETY: forwarded with the caller's arguments.
        return unsafe { real::nanosleep(req, rem) };
    }
    // SAFETY: a non-null request the caller owns.
    match ts_duration(unsafe { &*req }) {
        Some(d) => {
            task_sleep(d);
            0
        }
        None => {
            set_errno(libc::EINVAL);
            -1
        }
    }
}

/// Hooked `clock_nanosleep` (what `std::thread::sleep` calls): inside a
/// task, relative and absolute sleeps on the monotonic and real-time clocks
/// sleep the task.
///
/// # Safety
/// The contract of `clock_nanosleep(2)`.
#[no_mangle]
pub unsafe extern "C" fn clock_nanosleep(
    clock: libc::clockid_t,
    flags: c_int,
    req: *const timespec,
    rem: *mut timespec,
) -> c_int {
    let hookable = matches!(clock, libc::CLOCK_MONOTONIC | libc::CLOCK_REALTIME);
    if bypass() || !in_task() || req.is_null() || !hookable {
        // SAFETY: forwarded with the caller's arguments.
        return unsafe { real::clock_nanosleep(clock, flags, req, rem) };
    }
    // SAFETY: a non-null request the caller owns.
    let Some(mut d) = ts_duration(unsafe { &*req }) else {
        return libc::EINVAL; // clock_nanosleep returns the error number
    };
    if flags & libc::TIMER_ABSTIME != 0 {
        let mut now = timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid clock and out-pointer.
        unsafe { libc::clock_gettime(clock, &mut now) };
        d = d.saturating_sub(ts_duration(&now).unwrap_or_default());
    }
    task_sleep(d);
    0
}

/// Hooked `sleep`.
///
/// # Safety
/// The contract of `sleep(3)`.
#[no_mangle]
pub unsafe extern "C" fn sleep(secs: c_uint) -> c_uint {
    if bypass() || !in_task() {
        // SAFETY: forwarded with the caller's argument.
        return unsafe { real::sleep(secs) };
    }
    task_sleep(Duration::from_secs(secs.into()));
    0
}

/// Hooked `usleep`.
///
/// # Safety
/// The contract of `usleep(3)`.
#[no_mangle]
pub unsafe extern "C" fn usleep(usec: libc::useconds_t) -> c_int {
    if bypass() || !in_task() {
        // SAFETY: forwarded with the caller's argument.
        return unsafe { real::usleep(usec) };
    }
    task_sleep(Duration::from_micros(usec.into()));
    0
}

// ---------------------------------------------------------------- bookkeeping

/// Hooked `close`: tasks waiting on `fd` wake (their call fails with
/// `EBADF`), it leaves the reactor, then it is closed.
///
/// # Safety
/// The contract of `close(2)`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    // SAFETY: forwarded with the caller's argument.
    let real_close = || unsafe { real::close(fd) };
    match fdctx::get(fd) {
        Some(ctx) if !bypass() => guarded(|| ctx.close_with(real_close)),
        _ => real_close(),
    }
}

/// Hooked `fcntl`: `F_SETFL` records whether the program asked for
/// non-blocking mode (its calls then return `EAGAIN`, as libc's would);
/// `F_DUPFD*` copies the bookkeeping. Everything goes to libc unchanged:
/// gofer never leaves a flag of its own on a descriptor.
///
/// # Safety
/// The contract of `fcntl(2)`.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let r = unsafe { real::fcntl(fd, cmd, arg) };
    if r < 0 || bypass() {
        return r;
    }
    match cmd {
        libc::F_SETFL => {
            if let Some(ctx) = fdctx::get(fd) {
                ctx.state(fd);
                ctx.set_bit(USER_NONBLOCK, arg as c_int & libc::O_NONBLOCK != 0);
            }
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => copy_ctx(fd, r),
        _ => {}
    }
    r
}

/// Hooked `ioctl`: `FIONBIO` records the program's non-blocking mode, as
/// `fcntl(F_SETFL)` does.
///
/// # Safety
/// The contract of `ioctl(2)`.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: c_ulong) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let r = unsafe { real::ioctl(fd, req, arg) };
    if r == 0 && req as libc::Ioctl == libc::FIONBIO && arg != 0 && !bypass() {
        if let Some(ctx) = fdctx::get(fd) {
            ctx.state(fd);
            // SAFETY: FIONBIO's argument points at an int, which the kernel
            // just read.
            let on = unsafe { *(arg as *const c_int) } != 0;
            ctx.set_bit(USER_NONBLOCK, on);
        }
    }
    r
}

/// Hooked `setsockopt`: `SO_RCVTIMEO`/`SO_SNDTIMEO` become the timeouts of
/// the hooked waits (and are passed on).
///
/// # Safety
/// The contract of `setsockopt(2)`.
#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let r = unsafe { real::setsockopt(fd, level, name, val, len) };
    let timeo = matches!(name, libc::SO_RCVTIMEO | libc::SO_SNDTIMEO);
    let is_timeval = len as usize >= std::mem::size_of::<libc::timeval>();
    if r != 0 || level != libc::SOL_SOCKET || !timeo || bypass() || val.is_null() || !is_timeval {
        return r;
    }
    if let Some(ctx) = fdctx::get(fd) {
        // SAFETY: the kernel accepted `val` as a timeval.
        let tv = unsafe { &*(val as *const libc::timeval) };
        let d = Duration::from_secs(tv.tv_sec.max(0) as u64)
            + Duration::from_micros(tv.tv_usec.max(0) as u64);
        let interest = if name == libc::SO_RCVTIMEO {
            Interest::Read
        } else {
            Interest::Write
        };
        ctx.set_timeout(interest, (!d.is_zero()).then_some(d));
    }
    r
}

fn copy_ctx(from: c_int, to: c_int) {
    if to < 0 {
        return;
    }
    if let (Some(a), Some(b)) = (fdctx::get(from), fdctx::get(to)) {
        a.state(from);
        a.mark_shared();
        a.copy_to(b);
    }
}

/// Hooked `dup`.
///
/// # Safety
/// The contract of `dup(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: forwarded with the caller's argument.
    let new = unsafe { real::dup(fd) };
    if !bypass() {
        copy_ctx(fd, new);
    }
    new
}

/// Whether `dup3(fd, to, flags)` (or `dup2`, with no flags) is bound to
/// fail before it would close `to`: `EINVAL` for flags other than
/// `O_CLOEXEC`, `EBADF` for a `fd` that is not open or a negative `to`.
/// Such a call leaves `to` open in the kernel, so its bookkeeping (and the
/// tasks waiting on it) must be left alone too.
fn dup_fails(fd: c_int, to: c_int, flags: c_int) -> Option<c_int> {
    if flags & !libc::O_CLOEXEC != 0 {
        return Some(libc::EINVAL);
    }
    // SAFETY: F_GETFD takes no argument and only reads.
    if to < 0 || unsafe { real::fcntl(fd, libc::F_GETFD, 0) } < 0 {
        return Some(libc::EBADF);
    }
    None
}

/// `dup2`/`dup3` over `to` through `dup`: the descriptor replaced is
/// closed as by `close`, but only once the call is known to go through.
fn dup_over(fd: c_int, to: c_int, flags: c_int, dup: impl FnOnce() -> c_int) -> c_int {
    if let Some(e) = dup_fails(fd, to, flags) {
        set_errno(e);
        return -1;
    }
    let new = match fdctx::get(to) {
        Some(ctx) => guarded(|| ctx.close_with(dup)),
        None => dup(),
    };
    copy_ctx(fd, new);
    new
}

/// Hooked `dup2`: the descriptor replaced is closed as by `close`.
///
/// # Safety
/// The contract of `dup2(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup2(fd: c_int, to: c_int) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let real_dup2 = || unsafe { real::dup2(fd, to) };
    if bypass() || fd == to {
        return real_dup2();
    }
    dup_over(fd, to, 0, real_dup2)
}

/// Hooked `dup3`: as `dup2`.
///
/// # Safety
/// The contract of `dup3(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup3(fd: c_int, to: c_int, flags: c_int) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let real_dup3 = || unsafe { real::dup3(fd, to, flags) };
    if bypass() || fd == to {
        return real_dup3(); // dup3 refuses fd == to with EINVAL
    }
    dup_over(fd, to, flags, real_dup3)
}

/// The addresses of every hooked symbol.
struct Symbols([*const (); 25]);

// SAFETY: plain function addresses, never written or dereferenced.
unsafe impl Sync for Symbols {}

/// Every hooked symbol, referenced from code that is always linked, so the
/// linker keeps the object that defines them (and so the program's calls
/// bind to them, not to libc's).
#[used]
static KEEP: Symbols = Symbols([
    read as *const (),
    readv as *const (),
    recv as *const (),
    recvfrom as *const (),
    recvmsg as *const (),
    write as *const (),
    writev as *const (),
    send as *const (),
    sendto as *const (),
    sendmsg as *const (),
    accept as *const (),
    accept4 as *const (),
    connect as *const (),
    poll as *const (),
    nanosleep as *const (),
    clock_nanosleep as *const (),
    sleep as *const (),
    usleep as *const (),
    close as *const (),
    fcntl as *const (),
    ioctl as *const (),
    setsockopt as *const (),
    dup as *const (),
    dup2 as *const (),
    dup3 as *const (),
]);

/// Touches [`KEEP`] (see there), and registers the fork handler once.
pub(crate) fn keep() {
    std::hint::black_box(&KEEP.0);
    static FORK_HANDLER: Once = Once::new();
    FORK_HANDLER.call_once(|| {
        // SAFETY: a handler that only stores to an atomic, which is
        // async-signal-safe, as a forked child of a threaded process needs.
        unsafe { libc::pthread_atfork(None, None, Some(in_forked_child)) };
    });
}
