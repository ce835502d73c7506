//! C libraries' locks: `pthread_mutex_*`, `pthread_rwlock_*` and stdio's
//! `flockfile` family, counted per thread so that a task holding one never
//! parks in a hooked call.
//!
//! # The defect this prevents
//!
//! Every task of a Processer shares its thread. Without the count, a task
//! holding a C lock (SQLite's `unixBigLock`, around its `open`s and
//! `ftruncate`s; libpq's; any C library's) could park in a hooked call, and
//! its thread would run a sibling; a sibling that takes the same lock
//! blocks the thread in `pthread_mutex_lock`, and the holder, bound to that
//! thread, never resumes to unlock it: a deadlock for good.
//!
//! # The rule
//!
//! Each hook here forwards to libc's function (`real.rs`) and, when the
//! lock was acquired, adds one to a count of the calling thread
//! ([`held`]); an unlock that succeeded takes one off (never below zero:
//! a lock taken where the hooks do not see it, inside libc, may be
//! released through them). While the count is not zero, no hook switches
//! the task out: `guard::may_wait` and `guard::may_wait`, which every
//! decision to wait through the reactor, the timers, the futex table or
//! the blocking pool asks first, say no, and the call runs on the thread
//! as on a plain thread (its siblings wait; nothing collides).
//!
//! # Why a count per thread is exactly right
//!
//! The count is the thread's, yet it always belongs to the task that runs:
//! a task whose count is not zero never switches out in a hook, so at any
//! switch a hook makes the thread's count is zero; the task that runs next
//! (on this thread, or a migratable task arriving from another) starts
//! from zero and what it counts is its own. Nothing needs saving per task,
//! and the fast path is one thread-local load in the hooks' decision and
//! one increment or decrement here: no allocation, no lock, no lookup
//! (the real functions are found before the first task runs,
//! `real::resolve_locks`).
//!
//! A contended `pthread_mutex_lock` (or rwlock) in a task blocks its
//! thread, as it did before. That is sound: the holder cannot be a task
//! parked on this thread (no task parks holding one), so it runs on
//! another thread, or is a task running there, and it will release the
//! lock without this thread's help. A long wait is the Dispatcher's to
//! see (the thread is counted blocked, and the tasks queued behind it that
//! have not started move to other Processers), as for any blocking call.
//!
//! What the rule does not cover: a task that switches out on its own
//! while holding a C lock (`gofer::sleep`, a `gofer` channel or lock, a
//! `yield_now`) hands its thread, and the count, to a sibling, as it
//! would without the hooks; C code does not do that, and Rust code must
//! not. A task that holds a C lock and then waits for a `std::sync`
//! lock blocks its thread in the kernel (the futex wait is not parked
//! either): if that lock's holder is a task parked on the same thread,
//! that is a deadlock, which the other choice (parking with the C lock
//! held) would only trade for the one above.
//!
//! # Which locks
//!
//! - `pthread_mutex_lock`, `_trylock`, `_timedlock`, `_clocklock` count
//!   on success and on `EOWNERDEAD` (a robust mutex whose owner died: the
//!   caller now holds it); `pthread_mutex_unlock` uncounts on success.
//! - `pthread_rwlock_rdlock`, `_wrlock`, `_tryrdlock`, `_trywrlock`,
//!   `_timedrdlock`, `_timedwrlock`, `_clockrdlock`, `_clockwrlock` count
//!   on success; `pthread_rwlock_unlock` uncounts on success.
//! - `flockfile`, `ftrylockfile` (on success) and `funlockfile`: a `FILE`'s
//!   lock is recursive and owned by the thread, so a task parked holding
//!   it would let its siblings on the same thread in (they own it too), and
//!   interleave their output with its own. Counting it keeps them out.
//!
//! A recursive mutex locked twice counts two and is uncounted by its two
//! unlocks. `pthread_cond_wait` gives the mutex up and takes it back inside
//! libc, without the exported symbols: the count stays as it was, which is
//! right, since the caller holds the mutex before and after and the thread
//! waits in between. Semaphores (`sem_wait`) are not locks (nobody owns
//! one) and are not counted.
//!
//! glibc's own locks do not come through here: stdio's internal locking
//! (`_IO_lock_lock` under `fprintf`, `fgets`, ...), malloc's arenas, the
//! dynamic linker's `dl_load_lock` (`dlsym`, `dlopen`,
//! `dl_iterate_phdr`) and the locks inside `pthread_cond_*` are taken
//! through libc's internal aliases or bare futex words, never through the
//! exported symbols the executable defines. None of them is held across a
//! hooked call (libc's own calls do not reach the hooks either), so none
//! needs counting.

use std::cell::Cell;

use libc::{c_int, clockid_t, pthread_mutex_t, pthread_rwlock_t, timespec, FILE};

use crate::sys::real;

thread_local! {
    /// How many C locks the calling thread holds (see the module docs).
    /// Const-initialized and without a destructor: an access is a plain
    /// load or store at a fixed offset from the thread pointer, which may
    /// run before any scheduler exists, on any thread, in a signal handler.
    static HELD: Cell<usize> = const { Cell::new(0) };
}

/// Whether the calling thread holds a C lock (so the running task must
/// not switch out in a hook). Never inlined, as the guard's accessors are
/// not (`guard.rs`): it is read on paths that may switch.
#[inline(never)]
pub(super) fn held() -> bool {
    HELD.with(|h| h.get() != 0)
}

/// One more C lock held. Called only from the lock hooks below, which
/// never switch.
#[inline]
fn acquired() {
    HELD.with(|h| h.set(h.get().wrapping_add(1)));
}

/// One C lock fewer, never below zero.
#[inline]
fn released() {
    HELD.with(|h| h.set(h.get().saturating_sub(1)));
}

/// Counts a mutex acquisition: success, or a robust mutex taken over from
/// a dead owner.
#[inline]
fn count_mutex(r: c_int) -> c_int {
    if r == 0 || r == libc::EOWNERDEAD {
        acquired();
    }
    r
}

/// Counts an rwlock acquisition (or an `ftrylockfile`): success only.
#[inline]
fn count_success(r: c_int) -> c_int {
    if r == 0 {
        acquired();
    }
    r
}

/// Uncounts an unlock that succeeded.
#[inline]
fn uncount(r: c_int) -> c_int {
    if r == 0 {
        released();
    }
    r
}

/// Hooked `pthread_mutex_lock`: libc's, counted.
///
/// # Safety
/// The contract of `pthread_mutex_lock(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_lock(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: forwarded with the caller's argument.
    count_mutex(unsafe { real::pthread_mutex_lock(m) })
}

/// Hooked `pthread_mutex_trylock`: libc's, counted when it took the lock.
///
/// # Safety
/// The contract of `pthread_mutex_trylock(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_trylock(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: forwarded with the caller's argument.
    count_mutex(unsafe { real::pthread_mutex_trylock(m) })
}

/// Hooked `pthread_mutex_timedlock`: libc's, counted when it took the
/// lock.
///
/// # Safety
/// The contract of `pthread_mutex_timedlock(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_timedlock(
    m: *mut pthread_mutex_t,
    t: *const timespec,
) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    count_mutex(unsafe { real::pthread_mutex_timedlock(m, t) })
}

/// Hooked `pthread_mutex_clocklock`: libc's, counted when it took the
/// lock.
///
/// # Safety
/// The contract of `pthread_mutex_clocklock(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_clocklock(
    m: *mut pthread_mutex_t,
    clock: clockid_t,
    t: *const timespec,
) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    count_mutex(unsafe { real::pthread_mutex_clocklock(m, clock, t) })
}

/// Hooked `pthread_mutex_unlock`: libc's, uncounted when it succeeded.
///
/// # Safety
/// The contract of `pthread_mutex_unlock(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_unlock(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: forwarded with the caller's argument.
    uncount(unsafe { real::pthread_mutex_unlock(m) })
}

macro_rules! rwlock_calls {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident: $t:ty),*);)*) => {
        $(
            $(#[$doc])*
            ///
            /// # Safety
            /// The contract of the libc function of the same name.
            #[no_mangle]
            pub unsafe extern "C" fn $name(l: *mut pthread_rwlock_t $(, $arg: $t)*) -> c_int {
                // SAFETY: forwarded with the caller's arguments.
                count_success(unsafe { real::$name(l $(, $arg)*) })
            }
        )*
    };
}

rwlock_calls! {
    /// Hooked `pthread_rwlock_rdlock`: libc's, counted.
    fn pthread_rwlock_rdlock();
    /// Hooked `pthread_rwlock_wrlock`: libc's, counted.
    fn pthread_rwlock_wrlock();
    /// Hooked `pthread_rwlock_tryrdlock`: libc's, counted when it took
    /// the lock.
    fn pthread_rwlock_tryrdlock();
    /// Hooked `pthread_rwlock_trywrlock`: libc's, counted when it took
    /// the lock.
    fn pthread_rwlock_trywrlock();
    /// Hooked `pthread_rwlock_timedrdlock`: libc's, counted when it took
    /// the lock.
    fn pthread_rwlock_timedrdlock(t: *const timespec);
    /// Hooked `pthread_rwlock_timedwrlock`: libc's, counted when it took
    /// the lock.
    fn pthread_rwlock_timedwrlock(t: *const timespec);
    /// Hooked `pthread_rwlock_clockrdlock`: libc's, counted when it took
    /// the lock.
    fn pthread_rwlock_clockrdlock(clock: clockid_t, t: *const timespec);
    /// Hooked `pthread_rwlock_clockwrlock`: libc's, counted when it took
    /// the lock.
    fn pthread_rwlock_clockwrlock(clock: clockid_t, t: *const timespec);
}

/// Hooked `pthread_rwlock_unlock`: libc's, uncounted when it succeeded.
///
/// # Safety
/// The contract of `pthread_rwlock_unlock(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_unlock(l: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: forwarded with the caller's argument.
    uncount(unsafe { real::pthread_rwlock_unlock(l) })
}

/// Hooked `flockfile`: libc's, counted.
///
/// # Safety
/// The contract of `flockfile(3)`.
#[no_mangle]
pub unsafe extern "C" fn flockfile(f: *mut FILE) {
    // SAFETY: forwarded with the caller's argument.
    unsafe { real::flockfile(f) };
    acquired();
}

/// Hooked `ftrylockfile`: libc's, counted when it took the lock.
///
/// # Safety
/// The contract of `ftrylockfile(3)`.
#[no_mangle]
pub unsafe extern "C" fn ftrylockfile(f: *mut FILE) -> c_int {
    // SAFETY: forwarded with the caller's argument.
    count_success(unsafe { real::ftrylockfile(f) })
}

/// Hooked `funlockfile`: libc's, uncounted.
///
/// # Safety
/// The contract of `funlockfile(3)`.
#[no_mangle]
pub unsafe extern "C" fn funlockfile(f: *mut FILE) {
    // SAFETY: forwarded with the caller's argument.
    unsafe { real::funlockfile(f) };
    released();
}
