//! The runtime's own locks, and how a Processer's thread sleeps.
//!
//! Every lock gofer takes for its own state (queues, timers, the reactor,
//! the registries) is a [`Mutex`], [`RwLock`] or [`Condvar`] from here, and
//! an idle Processer sleeps on its [`Sleeper`].
//!
//! Without the `hooks` feature these are `parking_lot`'s types and
//! `std::thread::park`, unchanged.
//!
//! With `hooks`, a futex wait made through `syscall` inside a task parks
//! the task (see `hooks/futex.rs`). gofer's own waits must never do that:
//! a task that holds runtime lock A and waits for runtime lock B would be
//! parked, and the Processer loop that must run to let it go on could need
//! A. They must not share a waiting state with the tasks of their thread
//! either: `parking_lot` keeps one waiting record per thread (and
//! `std::thread::park` one parker per thread), so a runtime lock contended
//! on a thread whose task waits in a `parking_lot` lock would relink that
//! record, and a Processer sleeping in `std::thread::park` would share its
//! parker with the tasks of its thread. (The hooks also keep tasks off
//! those per-thread records: a wait on one blocks the thread,
//! `hooks/owned.rs`. These types do not rely on that: gofer's own waits
//! reach the kernel whatever the hooks decide.)
//! So with `hooks` these types are small futex locks of their own that call
//! the kernel's futex directly (`hooks::kernel_futex`, not the hooked
//! `syscall` symbol): a contended runtime lock blocks the thread for the
//! short time it is held, as before, and never reaches the hook's table,
//! whoever takes it and wherever.
//!
//! The futex words (one `u32` each):
//!
//! - [`RawLock`] (a mutex, as std's): 0 unlocked, 1 locked, 2 locked with
//!   waiters. An unlock that finds 2 wakes one waiter; a woken waiter takes
//!   the lock as 2 (it cannot know whether others wait).
//! - [`RawRwLock`]: the number of readers in the low bits, `WRITER` while a
//!   writer holds it, `WAITERS` while someone waits. Whoever releases the
//!   lock to nobody (the last reader, or a writer) with `WAITERS` set clears
//!   it and wakes everyone; each re-tries and sets `WAITERS` again if it
//!   must wait on.
//! - [`Condvar`]: a sequence number, read under the mutex before waiting
//!   and bumped by each notify, so a notify between the read and the wait
//!   makes the wait return at once (the kernel compares the word).
//! - [`Sleeper`] (as std's thread parker): `EMPTY`, `PARKED`, `NOTIFIED`.

#[cfg(not(feature = "hooks"))]
pub(crate) use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};

#[cfg(feature = "hooks")]
pub(crate) use futex_locks::{Condvar, Mutex, MutexGuard, RwLock};

/// How an idle Processer's thread sleeps, and how it is woken.
///
/// Without `hooks`, `std::thread::park` and the thread's handle. With
/// `hooks`, a futex word of its own (see the module docs for why the
/// thread's own parker is not used).
#[derive(Default)]
pub(crate) struct Sleeper {
    #[cfg(feature = "hooks")]
    state: std::sync::atomic::AtomicU32,
}

#[cfg(feature = "hooks")]
mod sleeper_states {
    pub(super) const EMPTY: u32 = 0;
    pub(super) const NOTIFIED: u32 = 1;
    pub(super) const PARKED: u32 = u32::MAX;
}

impl Sleeper {
    /// Sleeps the calling thread until [`unpark`](Self::unpark) or
    /// `timeout`; an unpark that came first makes it return at once. May
    /// return spuriously. Only the Processer's own thread calls it.
    pub(crate) fn park(&self, timeout: Option<std::time::Duration>) {
        #[cfg(not(feature = "hooks"))]
        match timeout {
            Some(d) => std::thread::park_timeout(d),
            None => std::thread::park(),
        }
        #[cfg(feature = "hooks")]
        {
            use sleeper_states::*;
            use std::sync::atomic::Ordering;
            // Acquire: pairs with the Release swap in `unpark`, so what the
            // waker did before is seen after the wake-up.
            if self.state.fetch_sub(1, Ordering::Acquire) == NOTIFIED {
                return; // NOTIFIED -> EMPTY
            }
            // EMPTY -> PARKED: sleep while it stays so.
            futex_locks::wait(&self.state, PARKED, timeout);
            self.state.swap(EMPTY, Ordering::Acquire);
        }
    }

    /// Wakes the sleeping thread, or makes its next
    /// [`park`](Self::park) return at once. `thread` is the Processer's
    /// thread (used without `hooks`).
    pub(crate) fn unpark(&self, thread: Option<&std::thread::Thread>) {
        #[cfg(not(feature = "hooks"))]
        if let Some(t) = thread {
            t.unpark();
        }
        #[cfg(feature = "hooks")]
        {
            let _ = thread;
            use sleeper_states::*;
            use std::sync::atomic::Ordering;
            // Release: pairs with the Acquire in `park`.
            if self.state.swap(NOTIFIED, Ordering::Release) == PARKED {
                futex_locks::wake(&self.state, 1);
            }
        }
    }
}

#[cfg(feature = "hooks")]
mod futex_locks {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::{Duration, Instant};

    use parking_lot::lock_api;

    /// Waits on the kernel futex `word` while it holds `expected`, for
    /// `timeout` at most. Returns on a wake-up, a mismatch, a signal or the
    /// timeout alike: callers re-check their word.
    pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
        let ts = timeout.map(|d| libc::timespec {
            tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        });
        let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const _);
        // SAFETY: `word` is a valid u32 for the call; `tsp` is null or a
        // valid relative timeout.
        unsafe {
            crate::sys::futex::kernel_futex(
                word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                expected,
                tsp,
            )
        };
    }

    /// Wakes up to `n` kernel waiters on `word`.
    pub(super) fn wake(word: &AtomicU32, n: u32) {
        // SAFETY: `word` is a valid u32; FUTEX_WAKE reads nothing else.
        unsafe {
            crate::sys::futex::kernel_futex(
                word.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                n,
                std::ptr::null(),
            )
        };
    }

    /// Spins a little while the word is held without waiters (a holder is
    /// likely running on another core and about to release it).
    fn spin(word: &AtomicU32, busy: impl Fn(u32) -> bool) -> u32 {
        let mut n = 100;
        loop {
            let s = word.load(Ordering::Relaxed);
            if !busy(s) || n == 0 {
                return s;
            }
            std::hint::spin_loop();
            n -= 1;
        }
    }

    /// A futex mutex (the word's states are in the module docs).
    pub(crate) struct RawLock {
        state: AtomicU32,
    }

    const UNLOCKED: u32 = 0;
    const LOCKED: u32 = 1;
    const CONTENDED: u32 = 2;

    impl RawLock {
        #[cold]
        fn lock_contended(&self) {
            let mut s = spin(&self.state, |s| s == LOCKED);
            if s == UNLOCKED {
                match self.state.compare_exchange(
                    UNLOCKED,
                    LOCKED,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return,
                    Err(now) => s = now,
                }
            }
            loop {
                // Acquire: pairs with the Release swap in `unlock`.
                if s != CONTENDED && self.state.swap(CONTENDED, Ordering::Acquire) == UNLOCKED {
                    return;
                }
                wait(&self.state, CONTENDED, None);
                s = spin(&self.state, |s| s == LOCKED);
            }
        }
    }

    // SAFETY: `lock` and `try_lock` return only once this thread moved the
    // word from UNLOCKED, which only one thread can do until `unlock`; the
    // Acquire there pairs with the Release in `unlock`.
    unsafe impl lock_api::RawMutex for RawLock {
        // lock_api's trait asks for the unlocked lock as a constant: each
        // use makes a fresh one, which is what a lock's initial value is.
        #[allow(clippy::declare_interior_mutable_const)]
        const INIT: RawLock = RawLock {
            state: AtomicU32::new(UNLOCKED),
        };
        type GuardMarker = lock_api::GuardSend;

        #[inline]
        fn lock(&self) {
            if self
                .state
                .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                self.lock_contended();
            }
        }

        #[inline]
        fn try_lock(&self) -> bool {
            self.state
                .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        }

        /// # Safety
        /// `lock_api`'s contract: the caller holds the lock.
        #[inline]
        unsafe fn unlock(&self) {
            // Release: pairs with the Acquire of the next locker.
            if self.state.swap(UNLOCKED, Ordering::Release) == CONTENDED {
                wake(&self.state, 1);
            }
        }

        #[inline]
        fn is_locked(&self) -> bool {
            self.state.load(Ordering::Relaxed) != UNLOCKED
        }
    }

    // SAFETY: as for `RawMutex`: it returns true only once this thread
    // moved the word from UNLOCKED.
    unsafe impl lock_api::RawMutexTimed for RawLock {
        type Duration = Duration;
        type Instant = Instant;

        fn try_lock_for(&self, timeout: Duration) -> bool {
            match Instant::now().checked_add(timeout) {
                Some(deadline) => self.try_lock_until(deadline),
                None => {
                    lock_api::RawMutex::lock(self);
                    true
                }
            }
        }

        fn try_lock_until(&self, deadline: Instant) -> bool {
            loop {
                let s = self.state.load(Ordering::Relaxed);
                // Taken as CONTENDED: others may wait (as after a wake-up).
                // Acquire: pairs with the Release swap in `unlock`.
                if s == UNLOCKED {
                    if self
                        .state
                        .compare_exchange(UNLOCKED, CONTENDED, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        return true;
                    }
                    continue;
                }
                if s == LOCKED
                    && self
                        .state
                        .compare_exchange(LOCKED, CONTENDED, Ordering::Relaxed, Ordering::Relaxed)
                        .is_err()
                {
                    continue;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return false;
                }
                wait(&self.state, CONTENDED, Some(left));
            }
        }
    }

    /// A futex reader-writer lock (the word's layout is in the module docs).
    pub(crate) struct RawRwLock {
        state: AtomicU32,
    }

    const WRITER: u32 = 1 << 31;
    const WAITERS: u32 = 1 << 30;
    const READERS: u32 = WAITERS - 1;

    impl RawRwLock {
        /// Marks the word as waited on (if it still is `s`) and waits.
        #[cold]
        fn wait_on(&self, s: u32) {
            let w = s | WAITERS;
            if s & WAITERS == 0
                && self
                    .state
                    .compare_exchange(s, w, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                return; // changed: re-try
            }
            wait(&self.state, w, None);
        }

        /// The lock went to nobody from `prev`: wake everyone if someone
        /// waits.
        fn released(&self, now: u32) {
            if now == WAITERS
                && self
                    .state
                    .compare_exchange(WAITERS, 0, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                wake(&self.state, i32::MAX as u32);
            }
        }
    }

    // SAFETY: a writer holds the word with WRITER set and no reader (set
    // only from a word with neither); readers count themselves only while
    // WRITER is clear. Acquire on taking pairs with Release on releasing.
    unsafe impl lock_api::RawRwLock for RawRwLock {
        // lock_api's trait asks for the unlocked lock as a constant: each
        // use makes a fresh one, which is what a lock's initial value is.
        #[allow(clippy::declare_interior_mutable_const)]
        const INIT: RawRwLock = RawRwLock {
            state: AtomicU32::new(0),
        };
        type GuardMarker = lock_api::GuardSend;

        fn lock_shared(&self) {
            loop {
                if self.try_lock_shared() {
                    return;
                }
                let s = spin(&self.state, |s| s & WRITER != 0);
                if s & WRITER != 0 {
                    self.wait_on(s);
                }
            }
        }

        #[inline]
        fn try_lock_shared(&self) -> bool {
            let s = self.state.load(Ordering::Relaxed);
            s & WRITER == 0
                && s & READERS < READERS
                && self
                    .state
                    .compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
        }

        /// # Safety
        /// `lock_api`'s contract: the caller holds a shared lock.
        #[inline]
        unsafe fn unlock_shared(&self) {
            let now = self.state.fetch_sub(1, Ordering::Release) - 1;
            self.released(now);
        }

        fn lock_exclusive(&self) {
            loop {
                if self.try_lock_exclusive() {
                    return;
                }
                let s = spin(&self.state, |s| s & (WRITER | READERS) != 0);
                if s & (WRITER | READERS) != 0 {
                    self.wait_on(s);
                }
            }
        }

        #[inline]
        fn try_lock_exclusive(&self) -> bool {
            let s = self.state.load(Ordering::Relaxed);
            s & (WRITER | READERS) == 0
                && self
                    .state
                    .compare_exchange(s, s | WRITER, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
        }

        /// # Safety
        /// `lock_api`'s contract: the caller holds the exclusive lock.
        #[inline]
        unsafe fn unlock_exclusive(&self) {
            let now = self.state.fetch_and(!WRITER, Ordering::Release) & !WRITER;
            self.released(now);
        }

        fn is_locked(&self) -> bool {
            self.state.load(Ordering::Relaxed) & (WRITER | READERS) != 0
        }
    }

    /// The runtime's mutex.
    pub(crate) type Mutex<T> = lock_api::Mutex<RawLock, T>;
    /// Its guard.
    pub(crate) type MutexGuard<'a, T> = lock_api::MutexGuard<'a, RawLock, T>;
    /// The runtime's reader-writer lock.
    pub(crate) type RwLock<T> = lock_api::RwLock<RawRwLock, T>;

    /// A condition variable for [`Mutex`] (the futex word is a sequence
    /// number, see the module docs).
    #[derive(Default)]
    pub(crate) struct Condvar {
        seq: AtomicU32,
    }

    /// Whether a timed wait returned because its deadline passed.
    pub(crate) struct WaitTimeoutResult(bool);

    impl WaitTimeoutResult {
        /// The deadline passed.
        pub(crate) fn timed_out(&self) -> bool {
            self.0
        }
    }

    impl Condvar {
        /// A condition variable nobody waits on.
        pub(crate) const fn new() -> Condvar {
            Condvar {
                seq: AtomicU32::new(0),
            }
        }

        /// Releases the lock, waits for a notify (or a spurious wake-up),
        /// and locks again.
        pub(crate) fn wait<T>(&self, g: &mut MutexGuard<'_, T>) {
            let seq = self.seq.load(Ordering::Relaxed);
            MutexGuard::unlocked(g, || wait(&self.seq, seq, None));
        }

        /// [`wait`](Self::wait), until `deadline` at the latest.
        pub(crate) fn wait_until<T>(
            &self,
            g: &mut MutexGuard<'_, T>,
            deadline: Instant,
        ) -> WaitTimeoutResult {
            let seq = self.seq.load(Ordering::Relaxed);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return WaitTimeoutResult(true);
            }
            MutexGuard::unlocked(g, || wait(&self.seq, seq, Some(left)));
            WaitTimeoutResult(Instant::now() >= deadline)
        }

        /// [`wait`](Self::wait), for `timeout` at the longest.
        pub(crate) fn wait_for<T>(
            &self,
            g: &mut MutexGuard<'_, T>,
            timeout: std::time::Duration,
        ) -> WaitTimeoutResult {
            match Instant::now().checked_add(timeout) {
                Some(deadline) => self.wait_until(g, deadline),
                None => {
                    self.wait(g);
                    WaitTimeoutResult(false)
                }
            }
        }

        /// Wakes one waiter.
        pub(crate) fn notify_one(&self) {
            self.seq.fetch_add(1, Ordering::Relaxed);
            wake(&self.seq, 1);
        }

        /// Wakes every waiter.
        pub(crate) fn notify_all(&self) {
            self.seq.fetch_add(1, Ordering::Relaxed);
            wake(&self.seq, i32::MAX as u32);
        }
    }
}
