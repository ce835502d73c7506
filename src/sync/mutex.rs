//! [`Mutex`]: mutual exclusion that parks tasks and blocks threads.
//!
//! # The lock state machine (`RawMutex::state`)
//!
//! One atomic byte, two bits:
//!
//! | bit      | meaning                                                       |
//! |----------|---------------------------------------------------------------|
//! | `LOCKED` | someone holds the lock                                        |
//! | `PARKED` | the wait queue is not empty: `unlock` must take the slow path  |
//!
//! `PARKED` is set and cleared only under the wait-queue lock, and whenever
//! that lock is free, `PARKED` is set exactly when the queue is non-empty.
//!
//! ```text
//!  lock, fast:        0             -> LOCKED          CAS (Acquire)
//!  lock, slow:        s & !LOCKED   -> s | LOCKED      CAS (Acquire): barging
//!  waiter, queue lock LOCKED        -> LOCKED|PARKED   CAS, then enqueue
//!  unlock, fast:      LOCKED        -> 0               CAS (Release)
//!  unlock, slow, queue lock held, state is LOCKED|PARKED (stable: see below):
//!     normal:         -> PARKED-if-still-waiters       store (Release), wake the
//!                                                      first waiter with RETRY
//!     hand-off:       -> LOCKED|PARKED-if-still-waiters; the first waiter gets
//!                                                      HANDOFF: it owns the lock
//!  waiter leaves on timeout, queue lock held:
//!                     clear PARKED if the queue became empty
//! ```
//!
//! The lost-wake-up race is settled by the `PARKED` bit: a waiter sets it
//! with a CAS that expects `LOCKED`, so either the holder's fast unlock CAS
//! (which expects exactly `LOCKED`) fails and it takes the slow path, which
//! waits for the queue lock and so sees the waiter, or the waiter's CAS fails
//! because the lock was released, and it retries the acquisition instead of
//! parking.
//!
//! In the slow unlock the state is stable: the unlocker holds `LOCKED`, so
//! nobody else can set it, and `PARKED` changes only under the queue lock,
//! which it holds. Plain stores are therefore enough there.
//!
//! # Fairness
//!
//! Woken waiters compete with newcomers (barging keeps the lock hot and the
//! fast path cheap), and a waiter that loses goes back to the *front* of the
//! queue, keeping its original start time. When the first waiter has waited
//! at least [`FAIR_AFTER`] (1 ms), the unlocker hands the lock over directly
//! instead (Go's starvation mode, parking_lot's eventual fairness), so no
//! waiter starves.
//!
//! Orderings: the Acquire on every transition that sets `LOCKED` pairs with
//! the Release of the unlock that cleared it (or of the token store, for a
//! hand-off); `PARKED` carries no data and is Relaxed.

use crate::runtime::task::wait::WaitOn;
use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use super::waitqueue::{WaitOptions, WaitQueue, Wakes};

const LOCKED: u8 = 1;
const PARKED: u8 = 2;

/// Wait-queue tokens.
const RETRY: usize = 1;
const HANDOFF: usize = 2;

/// After this long, the first waiter is handed the lock directly.
const FAIR_AFTER: Duration = Duration::from_millis(1);

/// Spin rounds (of 2, 4, 8 spin hints) before queuing, while nobody waits.
const SPIN_ROUNDS: u32 = 3;

/// The lock without the data: the state byte and the wait queue.
pub(crate) struct RawMutex {
    state: AtomicU8,
    queue: WaitQueue<()>,
}

impl RawMutex {
    pub(crate) const fn new() -> RawMutex {
        RawMutex {
            state: AtomicU8::new(0),
            queue: WaitQueue::new(()),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) {
        // Acquire: pairs with the Release of the unlock that freed the lock.
        if self
            .state
            .compare_exchange_weak(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow(None);
        }
    }

    #[inline]
    pub(crate) fn try_lock(&self) -> bool {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & LOCKED != 0 {
                return false;
            }
            // Acquire: pairs with the Release of the unlock that freed the lock.
            match self.state.compare_exchange_weak(
                s,
                s | LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    /// Locks unless `deadline` passes first; returns whether it locked.
    pub(crate) fn try_lock_until(&self, deadline: Instant) -> bool {
        // Acquire: pairs with the Release of the unlock that freed the lock.
        self.state
            .compare_exchange_weak(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            || self.lock_slow(Some(deadline))
    }

    /// Releases the lock. The caller must hold it (guards and `Condvar`
    /// ensure this).
    #[inline]
    pub(crate) fn unlock(&self) {
        // Release: pairs with the Acquire of the next CAS that sets LOCKED.
        if self
            .state
            .compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            self.unlock_slow();
        }
    }

    pub(crate) fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) & LOCKED != 0
    }

    #[cold]
    fn lock_slow(&self, deadline: Option<Instant>) -> bool {
        let mut spins = 0;
        let mut since: Option<Instant> = None;
        let mut front = false;
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & LOCKED == 0 {
                // Barging is allowed, even past waiters (module docs).
                // Acquire: pairs with the Release of the unlock that freed the lock.
                match self.state.compare_exchange_weak(
                    s,
                    s | LOCKED,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return true,
                    Err(now) => s = now,
                }
                continue;
            }
            if s & PARKED == 0 && spins < SPIN_ROUNDS {
                spins += 1;
                for _ in 0..(1 << spins) {
                    std::hint::spin_loop();
                }
                s = self.state.load(Ordering::Relaxed);
                continue;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }

            let q = self.queue.lock();
            // Announce the waiter before queuing, expecting LOCKED (the
            // lost-wake-up race in the module docs).
            s = self.state.load(Ordering::Relaxed);
            let queued = loop {
                if s & LOCKED == 0 {
                    break false;
                }
                if s & PARKED != 0 {
                    break true;
                }
                match self.state.compare_exchange_weak(
                    s,
                    s | PARKED,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break true,
                    Err(now) => s = now,
                }
            };
            if !queued {
                // Released meanwhile: retry the acquisition.
                continue;
            }
            let opts = WaitOptions {
                since: Some(*since.get_or_insert_with(Instant::now)),
                front,
                deadline,
                ..WaitOptions::on(WaitOn::Mutex)
            };
            let r = q.wait(
                opts,
                || {},
                |q| {
                    if q.is_empty() {
                        // Keep "PARKED iff queue non-empty" (module docs).
                        self.state.fetch_and(!PARKED, Ordering::Relaxed);
                    }
                    Wakes::new()
                },
            );
            match r {
                // The unlocker left LOCKED set for us; the token's
                // Release/Acquire orders its critical section before ours.
                Ok(HANDOFF) => return true,
                Ok(_retry) => {
                    // Woken to compete; if we lose, go back to the front.
                    front = true;
                    spins = 0;
                    s = self.state.load(Ordering::Relaxed);
                }
                Err(_) => return false,
            }
        }
    }

    #[cold]
    fn unlock_slow(&self) {
        let mut q = self.queue.lock();
        // State is LOCKED, plus PARKED iff the queue is non-empty (a waiter
        // may have timed out and cleared it since our fast CAS failed).
        let handoff = q.front_since().is_some_and(|t| t.elapsed() >= FAIR_AFTER);
        let task = q.notify_front(if handoff { HANDOFF } else { RETRY });
        let parked = if q.is_empty() { 0 } else { PARKED };
        if handoff {
            // The lock stays held, now by the woken waiter. The token store
            // carries the ordering; this store changes only PARKED.
            self.state.store(LOCKED | parked, Ordering::Relaxed);
        } else {
            // Release: pairs with the Acquire of the next CAS that sets LOCKED.
            self.state.store(parked, Ordering::Release);
        }
        drop(q);
        if let Some(t) = task {
            t.unpark();
        }
    }
}

/// A mutual exclusion lock for tasks and threads, in the style of
/// `parking_lot::Mutex` (no poisoning).
///
/// Inside a task, a contended [`lock`](Mutex::lock) parks the task and its
/// thread runs other tasks; outside one it blocks the thread. Tasks and
/// threads may share one mutex.
///
/// Uncontended, locking is one compare-and-swap and unlocking one more.
/// Contended waiters queue in roughly FIFO order; a waiter that has waited
/// more than about a millisecond is handed the lock directly, so none
/// starves.
///
/// The guard is `Send` (for `T: Send`): a migratable task holding it may
/// resume on another thread, and unlocking from another thread is fine.
///
/// ```
/// use std::sync::Arc;
/// use gofer::sync::Mutex;
///
/// let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();
/// let count = Arc::new(Mutex::new(0u32));
/// let hs: Vec<_> = (0..10)
///     .map(|_| {
///         let count = count.clone();
///         sched.spawn(move || {
///             let mut c = count.lock();
///             gofer::yield_now(); // still exclusive across a switch
///             *c += 1;
///         })
///     })
///     .collect();
/// for h in hs {
///     h.join().unwrap();
/// }
/// assert_eq!(*count.lock(), 10);
/// sched.shutdown();
/// ```
pub struct Mutex<T: ?Sized> {
    raw: RawMutex,
    data: UnsafeCell<T>,
}

// SAFETY: the mutex hands out access to `T` to one holder at a time, on any
// thread, so sharing the mutex needs only `T: Send` (as for std's Mutex).
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}
// SAFETY: moving the mutex moves the `T`; the raw lock holds no thread ties.
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}

impl<T> Mutex<T> {
    /// A new unlocked mutex. Usable in a `static`.
    pub const fn new(value: T) -> Mutex<T> {
        Mutex {
            raw: RawMutex::new(),
            data: UnsafeCell::new(value),
        }
    }

    /// Consumes the mutex, returning the value.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks the mutex, parking the task (or blocking the thread) until it
    /// is free. Not re-entrant: locking it again from the holder deadlocks.
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.raw.lock();
        MutexGuard::new(self)
    }

    /// Locks the mutex if it is free right now.
    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.raw.try_lock().then(|| MutexGuard::new(self))
    }

    /// Locks the mutex, giving up after `timeout`.
    pub fn try_lock_for(&self, timeout: Duration) -> Option<MutexGuard<'_, T>> {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.try_lock_until(deadline),
            None => Some(self.lock()),
        }
    }

    /// Locks the mutex, giving up at `deadline`.
    pub fn try_lock_until(&self, deadline: Instant) -> Option<MutexGuard<'_, T>> {
        self.raw
            .try_lock_until(deadline)
            .then(|| MutexGuard::new(self))
    }

    /// Whether the mutex is locked right now (a hint: it may change at once).
    pub fn is_locked(&self) -> bool {
        self.raw.is_locked()
    }

    /// The value, through exclusive access: no locking needed.
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }

    pub(crate) fn raw(&self) -> &RawMutex {
        &self.raw
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Mutex<T> {
        Mutex::new(T::default())
    }
}

impl<T> From<T> for Mutex<T> {
    fn from(value: T) -> Mutex<T> {
        Mutex::new(value)
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Mutex");
        match self.try_lock() {
            Some(g) => d.field("data", &&*g),
            None => d.field("data", &format_args!("<locked>")),
        };
        d.finish()
    }
}

/// Exclusive access to a [`Mutex`]'s value; unlocks on drop.
#[must_use = "if unused the Mutex will immediately unlock"]
pub struct MutexGuard<'a, T: ?Sized> {
    mutex: &'a Mutex<T>,
    /// Send iff `T: Send`, Sync iff `T: Sync`, like `&mut T`.
    _marker: PhantomData<&'a mut T>,
}

impl<'a, T: ?Sized> MutexGuard<'a, T> {
    fn new(mutex: &'a Mutex<T>) -> MutexGuard<'a, T> {
        MutexGuard {
            mutex,
            _marker: PhantomData,
        }
    }

    /// The mutex this guard locks.
    pub fn mutex(guard: &Self) -> &'a Mutex<T> {
        guard.mutex
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while its holder owns the lock, so no
        // `&mut T` exists elsewhere.
        unsafe { &*self.mutex.data.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard owns the lock, and `&mut self` makes this the
        // only reference derived from it.
        unsafe { &mut *self.mutex.data.get() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        self.mutex.raw.unlock();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}
