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
use std::sync::Arc;
use std::time::{Duration, Instant};

use libc::{c_int, c_uint, c_ulong, c_void, iovec, msghdr, nfds_t, pollfd, size_t, sockaddr};
use libc::{socklen_t, ssize_t, timespec};

use super::fdctx::{self, FdCtx, HOOKED, SOCKET, SYS_NONBLOCK, USER_NONBLOCK};
use super::real;
use crate::runtime::context;
use crate::runtime::io::{poll_fd, Interest, Registration};

thread_local! {
    /// Set while a hook runs runtime code that could make hooked calls of
    /// its own (registering with the reactor: an allocation, an epoll
    /// descriptor): those go straight to libc.
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with the recursion guard set.
fn guarded<R>(f: impl FnOnce() -> R) -> R {
    IN_HOOK.with(|g| g.set(true));
    let r = f();
    IN_HOOK.with(|g| g.set(false));
    r
}

fn in_hook() -> bool {
    IN_HOOK.with(Cell::get)
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
    /// Through [`io_loop`]: `ctx`, its state when the call began, and
    /// whether the caller is a task.
    Wait(&'static FdCtx, u64, bool),
}

fn route(fd: c_int) -> Route {
    if in_hook() {
        return Route::Pass;
    }
    let Some(ctx) = fdctx::get(fd) else {
        return Route::Pass;
    };
    let task = in_task();
    let st = ctx.state(fd);
    if st & HOOKED == 0 || st & USER_NONBLOCK != 0 {
        return Route::Pass;
    }
    if !task && st & SYS_NONBLOCK == 0 {
        return Route::Pass; // a blocking descriptor on a plain thread
    }
    if task {
        ctx.ensure_nonblocking(fd, st);
    }
    Route::Wait(ctx, st, task)
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

/// Runs `op` until it does not fail with `EAGAIN`, waiting for `interest`
/// in between: through the reactor inside a task, in `poll(2)` on a thread.
fn io_loop(fd: c_int, interest: Interest, mut op: impl FnMut() -> ssize_t) -> ssize_t {
    let (ctx, st, task) = match route(fd) {
        Route::Pass => return op(),
        Route::Wait(ctx, st, task) => (ctx, st, task),
    };
    let gen = fdctx::generation(st);
    let deadline = ctx
        .timeout(interest)
        .and_then(|t| Instant::now().checked_add(t));
    let mut reg: Option<Arc<Registration>> = None;
    // Every call spends from the task's budget, which a wait refills, as
    // `gofer::net`'s do (`io/coop.rs`): a task whose descriptor never makes
    // it wait still lets the others on its thread run.
    if task {
        crate::io::coop::spend();
    }
    loop {
        let seen = reg.as_ref().map(|r| r.readiness(interest));
        let r = op();
        if r >= 0 || errno() != libc::EAGAIN {
            return r;
        }
        // Closed since the call began (the generation moves before the
        // waiters are woken): never wait on the registration it had.
        if ctx.generation_now() != gen {
            return fail(Stop::Closed);
        }
        let stop = if task {
            if reg.is_none() {
                match guarded(|| ctx.registration(fd, gen)) {
                    Ok(Some(r)) => reg = Some(r),
                    Ok(None) => {}
                    Err(e) => return fail(Stop::Os(e.raw_os_error().unwrap_or(libc::EIO))),
                }
            }
            match (&reg, seen) {
                (Some(r), Some(ev)) => {
                    r.clear(ev);
                    if r.readiness(interest).is_ready() {
                        continue; // an event came in between: try again
                    }
                    r.wait(interest, deadline).err()
                }
                (Some(r), None) => r.wait(interest, deadline).err(),
                (None, _) => poll_fd(fd, interest, deadline).err(),
            }
        } else {
            poll_fd(fd, interest, deadline).err()
        };
        if task {
            crate::io::coop::refill(); // it waited
        }
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
    // SAFETY: forwarded with the caller's arguments.
    io_loop(fd, Interest::Read, || unsafe { real::read(fd, buf, n) })
}

/// Hooked `readv`.
///
/// # Safety
/// The contract of `readv(2)`.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    // SAFETY: forwarded with the caller's arguments.
    io_loop(fd, Interest::Read, || unsafe { real::readv(fd, iov, cnt) })
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
    // SAFETY: forwarded with the caller's arguments.
    io_loop(fd, Interest::Read, || unsafe {
        real::recv(fd, buf, n, flags)
    })
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
    // SAFETY: forwarded with the caller's arguments.
    io_loop(fd, Interest::Read, || unsafe {
        real::recvfrom(fd, buf, n, flags, a, al)
    })
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
    // SAFETY: forwarded with the caller's arguments.
    io_loop(fd, Interest::Read, || unsafe {
        real::recvmsg(fd, msg, flags)
    })
}

// ---------------------------------------------------------------- writes

/// Hooked `write`.
///
/// # Safety
/// The contract of `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    // SAFETY: forwarded with the caller's arguments.
    io_loop(fd, Interest::Write, || unsafe { real::write(fd, buf, n) })
}

/// Hooked `writev`.
///
/// # Safety
/// The contract of `writev(2)`.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    // SAFETY: forwarded with the caller's arguments.
    io_loop(fd, Interest::Write, || unsafe {
        real::writev(fd, iov, cnt)
    })
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
    // SAFETY: forwarded with the caller's arguments.
    io_loop(fd, Interest::Write, || unsafe {
        real::send(fd, buf, n, flags)
    })
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
    // SAFETY: forwarded with the caller's arguments.
    io_loop(fd, Interest::Write, || unsafe {
        real::sendto(fd, buf, n, flags, a, al)
    })
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
    // SAFETY: forwarded with the caller's arguments.
    io_loop(fd, Interest::Write, || unsafe {
        real::sendmsg(fd, msg, flags)
    })
}

// ---------------------------------------------------------------- sockets

/// Hooked `accept`.
///
/// # Safety
/// The contract of `accept(2)`.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, a: *mut sockaddr, al: *mut socklen_t) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    io_loop(fd, Interest::Read, || unsafe {
        real::accept(fd, a, al) as ssize_t
    }) as c_int
}

/// Hooked `accept4`.
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
    // SAFETY: forwarded with the caller's arguments.
    io_loop(fd, Interest::Read, || unsafe {
        real::accept4(fd, a, al, flags) as ssize_t
    }) as c_int
}

/// Hooked `connect`: a non-blocking connect, a wait until writable (bounded
/// by `SO_SNDTIMEO`, `ETIMEDOUT` on expiry), then the result from
/// `SO_ERROR`.
///
/// # Safety
/// The contract of `connect(2)`.
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, a: *const sockaddr, al: socklen_t) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let real_connect = || unsafe { real::connect(fd, a, al) };
    let (ctx, st, task) = match route(fd) {
        Route::Wait(ctx, st, task) if st & SOCKET != 0 => (ctx, st, task),
        _ => return real_connect(),
    };
    let r = real_connect();
    if r == 0 || errno() != libc::EINPROGRESS {
        return r;
    }
    let gen = fdctx::generation(st);
    let deadline = ctx
        .timeout(Interest::Write)
        .and_then(|t| Instant::now().checked_add(t));
    let waited = if task {
        match guarded(|| ctx.registration(fd, gen)) {
            Ok(Some(reg)) => reg.wait(Interest::Write, deadline),
            Ok(None) => poll_fd(fd, Interest::Write, deadline),
            Err(e) => Err(e),
        }
    } else {
        poll_fd(fd, Interest::Write, deadline)
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
    if n != 1 || timeout == 0 || in_hook() || !in_task() {
        return real_poll(timeout);
    }
    // SAFETY: n == 1, so `fds` points at one pollfd the caller owns.
    let pfd = unsafe { &*fds };
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
    if in_hook() || !in_task() || req.is_null() {
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
    if in_hook() || !in_task() || req.is_null() || !hookable {
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
    if in_hook() || !in_task() {
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
    if in_hook() || !in_task() {
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
        Some(ctx) if !in_hook() => guarded(|| ctx.close_with(real_close)),
        _ => real_close(),
    }
}

/// Hooked `fcntl`: `F_GETFL` reports the program's own `O_NONBLOCK`,
/// `F_SETFL` records it (and keeps the descriptor non-blocking while gofer
/// needs it so), `F_DUPFD*` copies the bookkeeping.
///
/// # Safety
/// The contract of `fcntl(2)`.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    let ctx = if in_hook() { None } else { fdctx::get(fd) };
    let Some(ctx) = ctx else {
        // SAFETY: forwarded with the caller's arguments.
        return unsafe { real::fcntl(fd, cmd, arg) };
    };
    match cmd {
        libc::F_GETFL => {
            let st = ctx.state(fd);
            // SAFETY: forwarded with the caller's arguments.
            let fl = unsafe { real::fcntl(fd, cmd, arg) };
            if fl >= 0 && st & SYS_NONBLOCK != 0 && st & USER_NONBLOCK == 0 {
                fl & !libc::O_NONBLOCK
            } else {
                fl
            }
        }
        libc::F_SETFL => {
            let st = ctx.state(fd);
            let user = arg as c_int & libc::O_NONBLOCK != 0;
            ctx.set_bit(USER_NONBLOCK, user);
            let arg = if st & SYS_NONBLOCK != 0 {
                arg | libc::O_NONBLOCK as c_ulong
            } else {
                arg
            };
            // SAFETY: forwarded with the caller's arguments.
            unsafe { real::fcntl(fd, cmd, arg) }
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            // SAFETY: forwarded with the caller's arguments.
            let new = unsafe { real::fcntl(fd, cmd, arg) };
            copy_ctx(fd, new);
            new
        }
        // SAFETY: forwarded with the caller's arguments.
        _ => unsafe { real::fcntl(fd, cmd, arg) },
    }
}

/// Hooked `ioctl`: `FIONBIO` records the program's non-blocking mode (and
/// keeps the descriptor non-blocking while gofer needs it so).
///
/// # Safety
/// The contract of `ioctl(2)`.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: c_ulong) -> c_int {
    if req as libc::Ioctl == libc::FIONBIO && !in_hook() && arg != 0 {
        if let Some(ctx) = fdctx::get(fd) {
            let st = ctx.state(fd);
            // SAFETY: FIONBIO's argument points at an int.
            let on = unsafe { *(arg as *const c_int) } != 0;
            ctx.set_bit(USER_NONBLOCK, on);
            if !on && st & SYS_NONBLOCK != 0 {
                return 0; // stays non-blocking underneath; blocking is emulated
            }
        }
    }
    // SAFETY: forwarded with the caller's arguments.
    unsafe { real::ioctl(fd, req, arg) }
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
    if r != 0 || level != libc::SOL_SOCKET || !timeo || in_hook() || val.is_null() || !is_timeval {
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
    if !in_hook() {
        copy_ctx(fd, new);
    }
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
    if in_hook() || fd == to {
        return real_dup2();
    }
    let new = match fdctx::get(to) {
        Some(ctx) => guarded(|| ctx.close_with(real_dup2)),
        None => real_dup2(),
    };
    copy_ctx(fd, new);
    new
}

/// Hooked `dup3`: as `dup2`.
///
/// # Safety
/// The contract of `dup3(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup3(fd: c_int, to: c_int, flags: c_int) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let real_dup3 = || unsafe { real::dup3(fd, to, flags) };
    if in_hook() || fd == to {
        return real_dup3(); // dup3 refuses fd == to with EINVAL
    }
    let new = match fdctx::get(to) {
        Some(ctx) => guarded(|| ctx.close_with(real_dup3)),
        None => real_dup3(),
    };
    copy_ctx(fd, new);
    new
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

/// Touches [`KEEP`] (see there).
pub(crate) fn keep() {
    std::hint::black_box(&KEEP.0);
}
