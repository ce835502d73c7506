//! The list of every hooked symbol, which keeps the linker from dropping
//! the objects that define them. A new hook is added to its family's file
//! and to [`KEEP`].

use super::{copies, files, locks, names, wait};
use super::{data, descriptors, guard, poll, sleep, sockets, syscall};
use crate::sys::real;

/// The addresses of every hooked symbol.
struct Symbols([*const (); 26]);

// SAFETY: plain function addresses, never written or dereferenced.
unsafe impl Sync for Symbols {}

/// Every hooked symbol, referenced from code that is always linked, so the
/// linker keeps the object that defines them (and so the program's calls
/// bind to them, not to libc's).
#[used]
static KEEP: Symbols = Symbols([
    data::read as *const (),
    data::readv as *const (),
    data::recv as *const (),
    data::recvfrom as *const (),
    data::recvmsg as *const (),
    data::write as *const (),
    data::writev as *const (),
    data::send as *const (),
    data::sendto as *const (),
    data::sendmsg as *const (),
    sockets::accept as *const (),
    sockets::accept4 as *const (),
    sockets::connect as *const (),
    poll::poll as *const (),
    sleep::nanosleep as *const (),
    sleep::clock_nanosleep as *const (),
    sleep::sleep as *const (),
    sleep::usleep as *const (),
    descriptors::close as *const (),
    descriptors::fcntl as *const (),
    descriptors::ioctl as *const (),
    descriptors::setsockopt as *const (),
    descriptors::dup as *const (),
    descriptors::dup2 as *const (),
    descriptors::dup3 as *const (),
    syscall::syscall as *const (),
]);

/// The hooks that send a call to the blocking pool, kept as [`KEEP`].
struct Offloaded([*const (); 40]);

// SAFETY: plain function addresses, never written or dereferenced.
unsafe impl Sync for Offloaded {}

/// Every hooked symbol that sends its call to the blocking pool, kept as
/// [`KEEP`] is.
#[used]
static KEEP_OFFLOADED: Offloaded = Offloaded([
    files::pread as *const (),
    files::pread64 as *const (),
    files::pwrite as *const (),
    files::pwrite64 as *const (),
    files::preadv as *const (),
    files::preadv64 as *const (),
    files::pwritev as *const (),
    files::pwritev64 as *const (),
    files::fsync as *const (),
    files::fdatasync as *const (),
    files::ftruncate as *const (),
    files::ftruncate64 as *const (),
    files::fallocate as *const (),
    files::fallocate64 as *const (),
    files::open as *const (),
    files::open64 as *const (),
    files::openat as *const (),
    files::openat64 as *const (),
    files::creat as *const (),
    files::creat64 as *const (),
    wait::flock as *const (),
    wait::lockf as *const (),
    wait::lockf64 as *const (),
    wait::wait as *const (),
    wait::waitpid as *const (),
    wait::wait4 as *const (),
    wait::waitid as *const (),
    names::getaddrinfo as *const (),
    names::getnameinfo as *const (),
    names::gethostbyname_r as *const (),
    names::gethostbyname2_r as *const (),
    names::gethostbyaddr_r as *const (),
    poll::ppoll as *const (),
    poll::select as *const (),
    poll::pselect as *const (),
    copies::splice as *const (),
    copies::tee as *const (),
    copies::sendfile as *const (),
    copies::sendfile64 as *const (),
    copies::copy_file_range as *const (),
]);

/// The C lock hooks (`locks.rs`), kept as [`KEEP`] is.
struct Locks([*const (); 17]);

// SAFETY: plain function addresses, never written or dereferenced.
unsafe impl Sync for Locks {}

/// Every hooked C lock function, kept as [`KEEP`] is.
#[used]
static KEEP_LOCKS: Locks = Locks([
    locks::pthread_mutex_lock as *const (),
    locks::pthread_mutex_trylock as *const (),
    locks::pthread_mutex_timedlock as *const (),
    locks::pthread_mutex_clocklock as *const (),
    locks::pthread_mutex_unlock as *const (),
    locks::pthread_rwlock_rdlock as *const (),
    locks::pthread_rwlock_wrlock as *const (),
    locks::pthread_rwlock_tryrdlock as *const (),
    locks::pthread_rwlock_trywrlock as *const (),
    locks::pthread_rwlock_timedrdlock as *const (),
    locks::pthread_rwlock_timedwrlock as *const (),
    locks::pthread_rwlock_clockrdlock as *const (),
    locks::pthread_rwlock_clockwrlock as *const (),
    locks::pthread_rwlock_unlock as *const (),
    locks::flockfile as *const (),
    locks::ftrylockfile as *const (),
    locks::funlockfile as *const (),
]);

/// Touches [`KEEP`] (see there), registers the fork handler once, and
/// looks the real C lock functions up, so that no task ever does.
pub(crate) fn keep() {
    std::hint::black_box(&KEEP.0);
    std::hint::black_box(&KEEP_OFFLOADED.0);
    std::hint::black_box(&KEEP_LOCKS.0);
    guard::register_fork_handler();
    real::resolve_locks();
}
