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
        crate::sys::fatal::fatal("hooks: a libc function could not be found with dlsym");
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
            // The arguments are the C function's, whatever their number.
            #[allow(clippy::too_many_arguments)]
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

// The calls the hooks send to the blocking pool (`offload.rs`).
real! {
    pread: fn(fd: c_int, buf: *mut c_void, n: size_t, off: libc::off_t) -> ssize_t;
    pread64: fn(fd: c_int, buf: *mut c_void, n: size_t, off: libc::off64_t) -> ssize_t;
    pwrite: fn(fd: c_int, buf: *const c_void, n: size_t, off: libc::off_t) -> ssize_t;
    pwrite64: fn(fd: c_int, buf: *const c_void, n: size_t, off: libc::off64_t) -> ssize_t;
    preadv: fn(fd: c_int, iov: *const iovec, cnt: c_int, off: libc::off_t) -> ssize_t;
    preadv64: fn(fd: c_int, iov: *const iovec, cnt: c_int, off: libc::off64_t) -> ssize_t;
    pwritev: fn(fd: c_int, iov: *const iovec, cnt: c_int, off: libc::off_t) -> ssize_t;
    pwritev64: fn(fd: c_int, iov: *const iovec, cnt: c_int, off: libc::off64_t) -> ssize_t;
    creat: fn(path: *const libc::c_char, mode: libc::mode_t) -> c_int;
    creat64: fn(path: *const libc::c_char, mode: libc::mode_t) -> c_int;
    fsync: fn(fd: c_int) -> c_int;
    fdatasync: fn(fd: c_int) -> c_int;
    ftruncate: fn(fd: c_int, len: libc::off_t) -> c_int;
    ftruncate64: fn(fd: c_int, len: libc::off64_t) -> c_int;
    fallocate: fn(fd: c_int, mode: c_int, off: libc::off_t, len: libc::off_t) -> c_int;
    fallocate64: fn(fd: c_int, mode: c_int, off: libc::off64_t, len: libc::off64_t) -> c_int;
    flock: fn(fd: c_int, op: c_int) -> c_int;
    lockf: fn(fd: c_int, cmd: c_int, len: libc::off_t) -> c_int;
    lockf64: fn(fd: c_int, cmd: c_int, len: libc::off64_t) -> c_int;
    wait: fn(status: *mut c_int) -> libc::pid_t;
    waitpid: fn(pid: libc::pid_t, status: *mut c_int, options: c_int) -> libc::pid_t;
    wait4: fn(pid: libc::pid_t, status: *mut c_int, options: c_int, ru: *mut libc::rusage) -> libc::pid_t;
    waitid: fn(idtype: libc::idtype_t, id: libc::id_t, info: *mut libc::siginfo_t, options: c_int) -> c_int;
    getaddrinfo: fn(node: *const libc::c_char, service: *const libc::c_char, hints: *const libc::addrinfo, res: *mut *mut libc::addrinfo) -> c_int;
    getnameinfo: fn(sa: *const sockaddr, salen: socklen_t, host: *mut libc::c_char, hostlen: socklen_t, serv: *mut libc::c_char, servlen: socklen_t, flags: c_int) -> c_int;
    gethostbyname_r: fn(name: *const libc::c_char, ret: *mut libc::hostent, buf: *mut libc::c_char, len: size_t, result: *mut *mut libc::hostent, h_errnop: *mut c_int) -> c_int;
    gethostbyname2_r: fn(name: *const libc::c_char, af: c_int, ret: *mut libc::hostent, buf: *mut libc::c_char, len: size_t, result: *mut *mut libc::hostent, h_errnop: *mut c_int) -> c_int;
    gethostbyaddr_r: fn(addr: *const c_void, alen: socklen_t, af: c_int, ret: *mut libc::hostent, buf: *mut libc::c_char, len: size_t, result: *mut *mut libc::hostent, h_errnop: *mut c_int) -> c_int;
    ppoll: fn(fds: *mut pollfd, n: nfds_t, t: *const timespec, mask: *const libc::sigset_t) -> c_int;
    select: fn(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, t: *mut libc::timeval) -> c_int;
    pselect: fn(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, t: *const timespec, mask: *const libc::sigset_t) -> c_int;
    splice: fn(fd_in: c_int, off_in: *mut libc::loff_t, fd_out: c_int, off_out: *mut libc::loff_t, len: size_t, flags: c_uint) -> ssize_t;
    tee: fn(fd_in: c_int, fd_out: c_int, len: size_t, flags: c_uint) -> ssize_t;
    sendfile: fn(out_fd: c_int, in_fd: c_int, offset: *mut libc::off_t, count: size_t) -> ssize_t;
    sendfile64: fn(out_fd: c_int, in_fd: c_int, offset: *mut libc::off64_t, count: size_t) -> ssize_t;
    copy_file_range: fn(fd_in: c_int, off_in: *mut libc::loff_t, fd_out: c_int, off_out: *mut libc::loff_t, len: size_t, flags: c_uint) -> ssize_t;
}

/// The real `open` (`wide`: `open64`), mode passed as a word.
///
/// # Safety
/// The contract of `open(2)`.
pub(crate) unsafe fn open(
    wide: bool,
    path: *const libc::c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    static SLOT64: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let p = if wide {
        lookup(&SLOT64, b"open64\0")
    } else {
        lookup(&SLOT, b"open\0")
    };
    // SAFETY: libc's `open`/`open64`, C variadic; called with the variadic
    // convention, the mode as its one optional argument.
    let f: unsafe extern "C" fn(*const libc::c_char, c_int, ...) -> c_int =
        unsafe { std::mem::transmute(p) };
    // SAFETY: the caller keeps open's contract.
    unsafe { f(path, flags, mode) }
}

/// The real `openat` (`wide`: `openat64`), mode passed as a word.
///
/// # Safety
/// The contract of `openat(2)`.
pub(crate) unsafe fn openat(
    wide: bool,
    dir: c_int,
    path: *const libc::c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    static SLOT64: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let p = if wide {
        lookup(&SLOT64, b"openat64\0")
    } else {
        lookup(&SLOT, b"openat\0")
    };
    // SAFETY: libc's `openat`/`openat64`, C variadic; called with the
    // variadic convention, the mode as its one optional argument.
    let f: unsafe extern "C" fn(c_int, *const libc::c_char, c_int, ...) -> c_int =
        unsafe { std::mem::transmute(p) };
    // SAFETY: the caller keeps openat's contract.
    unsafe { f(dir, path, flags, mode) }
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

/// Looks up one of the C lock functions (`locks.rs`) when its slot is
/// still empty, refusing to recurse.
///
/// Which lookup, and why it cannot re-enter: the lock hooks forward
/// through `dlsym(RTLD_NEXT, name)` like every hook, and every slot is
/// filled when the first scheduler is built ([`resolve_locks`], from
/// `hooks::keep`), before any task runs; a lock taken before that (a
/// constructor, the main thread before its scheduler, a plain thread)
/// looks its function up here on first use. glibc's `dlsym` takes
/// `dl_load_lock` through `GL(dl_rtld_lock_recursive)`, a pointer to
/// libc's internal `__pthread_mutex_lock`, and its error path allocates
/// under malloc's own locks (`__libc_lock_lock`, a bare futex lock): none
/// goes through the exported `pthread_mutex_lock` symbol the executable
/// interposes, so the lookup never reaches a lock hook. The aliases glibc
/// exports (`__pthread_mutex_lock`, `__pthread_rwlock_rdlock`, ...) are
/// not an alternative: they are compatibility versions only
/// (`nm -D libc.so.6`: `@GLIBC_2.2.5`, no default `@@`), which a program
/// cannot link against, and a lookup of them is the same `dlsym`; nor
/// are they there for the timed, clock and trylock forms of the rwlock.
/// Should some libc take a hooked lock inside `dlsym` all the same, the
/// thread-local flag below turns the endless recursion into a clear
/// fatal error (so would a lock taken by a signal handler that
/// interrupted the first lookup on its thread, which only a lock taken
/// before the first scheduler can meet).
fn lookup_lock(slot: &AtomicPtr<c_void>, name: &'static [u8]) -> *mut c_void {
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        return p;
    }
    lookup_lock_slow(slot, name)
}

#[cold]
#[inline(never)]
fn lookup_lock_slow(slot: &AtomicPtr<c_void>, name: &'static [u8]) -> *mut c_void {
    thread_local! {
        /// Set while this thread looks a lock function up.
        static RESOLVING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if RESOLVING.with(|r| r.replace(true)) {
        crate::sys::fatal::fatal(
            "hooks: a pthread lock was taken while its real function was being looked up",
        );
    }
    let p = lookup(slot, name);
    RESOLVING.with(|r| r.set(false));
    p
}

macro_rules! real_locks {
    ($($name:ident: fn($($arg:ident: $t:ty),*) -> $ret:ty;)*) => {
        /// One slot per lock function, module-level so that
        /// [`resolve_locks`] can fill them all at once.
        #[allow(non_upper_case_globals)]
        mod lock_slots {
            use std::sync::atomic::AtomicPtr;
            $(
                pub(super) static $name: AtomicPtr<libc::c_void> =
                    AtomicPtr::new(std::ptr::null_mut());
            )*
        }
        $(
            /// Calls the real libc function of the same name.
            ///
            /// # Safety
            /// The contract of the libc function.
            #[inline]
            pub(crate) unsafe fn $name($($arg: $t),*) -> $ret {
                let p = lookup_lock(&lock_slots::$name, concat!(stringify!($name), "\0").as_bytes());
                // SAFETY: `p` is libc's function of this name, whose C
                // signature this is.
                let f: unsafe extern "C" fn($($t),*) -> $ret = unsafe { std::mem::transmute(p) };
                // SAFETY: the caller keeps the function's contract.
                unsafe { f($($arg),*) }
            }
        )*
        /// Looks every lock function up now (when the first scheduler is
        /// built), so that no task ever runs a lookup.
        pub(crate) fn resolve_locks() {
            $(
                lookup_lock(&lock_slots::$name, concat!(stringify!($name), "\0").as_bytes());
            )*
        }
    };
}

// C libraries' locks, counted per thread (`locks.rs`). The clock forms
// are glibc 2.30's; a libc without them fails the lookup (fatally) only
// if the program calls them, which it could not link to there.
real_locks! {
    pthread_mutex_lock: fn(m: *mut libc::pthread_mutex_t) -> c_int;
    pthread_mutex_trylock: fn(m: *mut libc::pthread_mutex_t) -> c_int;
    pthread_mutex_timedlock: fn(m: *mut libc::pthread_mutex_t, t: *const timespec) -> c_int;
    pthread_mutex_clocklock: fn(m: *mut libc::pthread_mutex_t, clock: libc::clockid_t, t: *const timespec) -> c_int;
    pthread_mutex_unlock: fn(m: *mut libc::pthread_mutex_t) -> c_int;
    pthread_rwlock_rdlock: fn(l: *mut libc::pthread_rwlock_t) -> c_int;
    pthread_rwlock_wrlock: fn(l: *mut libc::pthread_rwlock_t) -> c_int;
    pthread_rwlock_tryrdlock: fn(l: *mut libc::pthread_rwlock_t) -> c_int;
    pthread_rwlock_trywrlock: fn(l: *mut libc::pthread_rwlock_t) -> c_int;
    pthread_rwlock_timedrdlock: fn(l: *mut libc::pthread_rwlock_t, t: *const timespec) -> c_int;
    pthread_rwlock_timedwrlock: fn(l: *mut libc::pthread_rwlock_t, t: *const timespec) -> c_int;
    pthread_rwlock_clockrdlock: fn(l: *mut libc::pthread_rwlock_t, clock: libc::clockid_t, t: *const timespec) -> c_int;
    pthread_rwlock_clockwrlock: fn(l: *mut libc::pthread_rwlock_t, clock: libc::clockid_t, t: *const timespec) -> c_int;
    pthread_rwlock_unlock: fn(l: *mut libc::pthread_rwlock_t) -> c_int;
    flockfile: fn(f: *mut libc::FILE) -> ();
    ftrylockfile: fn(f: *mut libc::FILE) -> c_int;
    funlockfile: fn(f: *mut libc::FILE) -> ();
}
