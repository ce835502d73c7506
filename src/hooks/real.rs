//! The real libc functions behind the hooks, found with
//! `dlsym(RTLD_NEXT, name)` on first use and kept in an atomic (no lock: a
//! lock here could be re-entered by a hooked call made while it is held).

use std::sync::atomic::{AtomicPtr, Ordering};

use libc::{
    c_int, c_long, c_uint, c_ulong, c_void, iovec, msghdr, nfds_t, pollfd, size_t, sockaddr,
};
use libc::{socklen_t, ssize_t, timespec};

/// Looks `name` (NUL-terminated) up in the libraries after this one.
fn lookup(slot: &AtomicPtr<c_void>, name: &'static [u8]) -> *mut c_void {
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        return p;
    }
    // SAFETY: `name` is NUL-terminated; RTLD_NEXT asks for the next
    // definition after this object's, which is libc's.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) };
    if p.is_null() {
        crate::coroutine::overflow::fatal("hooks: a libc function could not be found with dlsym");
    }
    // Release: pairs with the Acquire above; racing lookups store the same
    // address.
    slot.store(p, Ordering::Release);
    p
}

macro_rules! real {
    ($($name:ident: fn($($arg:ident: $t:ty),*) -> $ret:ty;)*) => {
        $(
            /// Calls the real libc function of the same name.
            ///
            /// # Safety
            /// The contract of the libc function.
            pub(crate) unsafe fn $name($($arg: $t),*) -> $ret {
                static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
                let p = lookup(&SLOT, concat!(stringify!($name), "\0").as_bytes());
                // SAFETY: `p` is libc's function of this name, whose C
                // signature this is.
                let f: unsafe extern "C" fn($($t),*) -> $ret = unsafe { std::mem::transmute(p) };
                // SAFETY: the caller keeps the function's contract.
                unsafe { f($($arg),*) }
            }
        )*
    };
}

real! {
    read: fn(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
    readv: fn(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t;
    recv: fn(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t;
    recvfrom: fn(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int, a: *mut sockaddr, al: *mut socklen_t) -> ssize_t;
    recvmsg: fn(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t;
    write: fn(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t;
    writev: fn(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t;
    send: fn(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t;
    sendto: fn(fd: c_int, buf: *const c_void, n: size_t, flags: c_int, a: *const sockaddr, al: socklen_t) -> ssize_t;
    sendmsg: fn(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t;
    accept: fn(fd: c_int, a: *mut sockaddr, al: *mut socklen_t) -> c_int;
    accept4: fn(fd: c_int, a: *mut sockaddr, al: *mut socklen_t, flags: c_int) -> c_int;
    connect: fn(fd: c_int, a: *const sockaddr, al: socklen_t) -> c_int;
    poll: fn(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int;
    nanosleep: fn(req: *const timespec, rem: *mut timespec) -> c_int;
    clock_nanosleep: fn(clock: libc::clockid_t, flags: c_int, req: *const timespec, rem: *mut timespec) -> c_int;
    sleep: fn(secs: c_uint) -> c_uint;
    usleep: fn(usec: libc::useconds_t) -> c_int;
    close: fn(fd: c_int) -> c_int;
    setsockopt: fn(fd: c_int, level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> c_int;
    dup: fn(fd: c_int) -> c_int;
    dup2: fn(fd: c_int, to: c_int) -> c_int;
    dup3: fn(fd: c_int, to: c_int, flags: c_int) -> c_int;
}

/// The real `fcntl`, with its optional argument passed as a word (every
/// command's argument is an integer or a pointer).
///
/// # Safety
/// The contract of `fcntl` for `cmd`.
pub(crate) unsafe fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let p = lookup(&SLOT, b"fcntl\0");
    // SAFETY: libc's `fcntl`, a C variadic function; calling it through a
    // variadic pointer type is the C calling convention for it.
    let f: unsafe extern "C" fn(c_int, c_int, ...) -> c_int = unsafe { std::mem::transmute(p) };
    // SAFETY: the caller keeps fcntl's contract.
    unsafe { f(fd, cmd, arg) }
}

/// The real `ioctl`, with its optional argument passed as a word.
///
/// # Safety
/// The contract of `ioctl` for `req`.
pub(crate) unsafe fn ioctl(fd: c_int, req: c_ulong, arg: c_ulong) -> c_int {
    static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let p = lookup(&SLOT, b"ioctl\0");
    // SAFETY: libc's `ioctl`, variadic, called with the variadic convention.
    let f: unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int = unsafe { std::mem::transmute(p) };
    // SAFETY: the caller keeps ioctl's contract.
    unsafe { f(fd, req, arg) }
}

/// The real `syscall`, with six argument words after the number (see
/// `hooks/syscall.rs` for why six words are always right to pass).
///
/// # Safety
/// The contract of the system call `n` with these arguments.
pub(crate) unsafe fn syscall(n: c_long, a: [c_long; 6]) -> c_long {
    static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let p = lookup(&SLOT, b"syscall\0");
    // SAFETY: libc's `syscall`, variadic, called with the variadic
    // convention; it reads as many words as the system call takes.
    let f: unsafe extern "C" fn(c_long, ...) -> c_long = unsafe { std::mem::transmute(p) };
    // SAFETY: the caller keeps the system call's contract.
    unsafe { f(n, a[0], a[1], a[2], a[3], a[4], a[5]) }
}
