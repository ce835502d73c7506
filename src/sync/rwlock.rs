//! [`RwLock`]: many readers or one writer, for tasks and threads.
//!
//! # The lock state machine (`RwLock::state`)
//!
//! One atomic word: `readers << 2 | PARKED | WRITER`.
//!
//! | part      | meaning                                                     |
//! |-----------|-------------------------------------------------------------|
//! | `WRITER`  | a writer holds the lock                                     |
//! | `PARKED`  | the wait queue is not empty                                 |
//! | `readers` | how many readers hold the lock                              |
//!
//! `PARKED` is set and cleared only under the wait-queue lock, and whenever
//! that lock is free it is set exactly when the queue is non-empty. While it
//! is set, **no fast path acquires anything**: new readers and writers queue
//! behind the waiters, and the lock passes to waiters only by *grants* made
//! under the queue lock. So a waiting writer blocks new readers (no writer
//! starvation), and readers queued behind a writer go in together once it
//! is done (no reader starvation).
//!
//! ```text
//!  read, fast:       !WRITER, !PARKED        -> readers + 1      CAS (Acquire)
//!  write, fast:      0                       -> WRITER           CAS (Acquire)
//!  slow (read or write), queue lock held:
//!                    as the fast path if it applies, else
//!                    set PARKED (CAS on the state that blocked us), enqueue
//!  read unlock:      readers - 1                                 fetch_sub (Release)
//!                    if it was the last reader and PARKED: grant
//!  write unlock, fast: WRITER                -> 0                CAS (Release)
//!  write unlock, slow: clear WRITER (Release), grant
//!  waiter leaves on timeout: grant
//!
//!  grant (queue lock held; one CAS, AcqRel, then the tokens):
//!    WRITER held                   -> only fix PARKED
//!    first waiter a writer, readers == 0
//!                                  -> WRITER, PARKED iff more waiters; hand it over
//!    first waiters k readers       -> readers + k, PARKED iff more waiters;
//!                                     hand each a share
//!    otherwise                     -> only fix PARKED
//! ```
//!
//! Lost wake-ups are settled as in the Mutex: a waiter's CAS that sets
//! `PARKED` expects the exact state that blocked it, so the holder's release
//! either happens first (the CAS fails and the waiter retries) or sees
//! `PARKED` and grants under the queue lock, which it can only take after the
//! waiter is linked. Only the last reader out (the one whose `fetch_sub`
//! saw one reader) grants, and the count cannot rise again while `PARKED` is
//! set, so a writer at the front is granted exactly once. A waiter that
//! leaves on timeout runs `grant` too: if it was a writer at the front, the
//! readers behind it may now go in.
//!
//! Orderings: every acquisition is an Acquire (fast CAS, or the token load
//! after a grant) that pairs with the Release of the releases before it; the
//! grant's CAS is AcqRel so that it gathers the releases of every reader
//! that left (they are read-modify-writes, so they form one release
//! sequence) and passes them on through the Release token store.

use crate::runtime::task::wait::WaitOn;
use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::waitqueue::{QueueGuard, WaitOptions, WaitQueue, Wakes};

const WRITER: usize = 1;
const PARKED: usize = 2;
const ONE_READER: usize = 4;
/// Readers beyond this many panic (the count would overflow the word).
const MAX_READERS: usize = usize::MAX / ONE_READER - 1;

/// Waiter kinds in the queue.
const READ: usize = 1;
const WRITE: usize = 2;

/// The wait-queue token: "the lock (read share or write) is yours".
const GRANTED: usize = 1;

/// Spin rounds before queuing, while nobody waits.
const SPIN_ROUNDS: u32 = 3;

/// A reader-writer lock for tasks and threads, in the style of
/// `parking_lot::RwLock` (no poisoning).
///
/// Any number of readers, or one writer, hold it at a time. Contended
/// callers park (tasks) or block (threads). Once anyone waits, new readers
/// queue behind them, so a stream of readers cannot starve a writer; queued
/// readers behind a writer are let in together when it is done.
///
/// ```
/// use std::sync::Arc;
/// use gofer::sync::RwLock;
///
/// let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();
/// let lock = Arc::new(RwLock::new(vec![1, 2, 3]));
/// let l2 = lock.clone();
/// let h = sched.spawn(move || l2.write().push(4));
/// h.join().unwrap();
/// assert_eq!(lock.read().len(), 4);
/// sched.shutdown();
/// ```
pub struct RwLock<T: ?Sized> {
    state: AtomicUsize,
    queue: WaitQueue<()>,
    data: UnsafeCell<T>,
}

// SAFETY: readers on several threads get `&T` at once (needs `T: Sync`),
// and a writer may be on any thread (needs `T: Send`), as for std's RwLock.
unsafe impl<T: ?Sized + Send + Sync> Sync for RwLock<T> {}
// SAFETY: moving the lock moves the `T`; the state holds no thread ties.
unsafe impl<T: ?Sized + Send> Send for RwLock<T> {}

impl<T> RwLock<T> {
    /// A new unlocked lock. Usable in a `static`.
    pub const fn new(value: T) -> RwLock<T> {
        RwLock {
            state: AtomicUsize::new(0),
            queue: WaitQueue::new(()),
            data: UnsafeCell::new(value),
        }
    }

    /// Consumes the lock, returning the value.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> RwLock<T> {
    /// Takes a read share, waiting while a writer holds or waits.
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        if !self.try_read_fast() {
            let got = self.read_slow(None);
            debug_assert!(got, "a wait without a deadline cannot time out");
        }
        RwLockReadGuard::new(self)
    }

    /// Takes a read share if that is possible now without waiting.
    pub fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & (WRITER | PARKED) != 0 {
                return None;
            }
            // Acquire: pairs with the Release of the writer's unlock (or the grant).
            match self.state.compare_exchange_weak(
                s,
                add_reader(s),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(RwLockReadGuard::new(self)),
                Err(now) => s = now,
            }
        }
    }

    /// Takes a read share, giving up after `timeout`.
    pub fn try_read_for(&self, timeout: Duration) -> Option<RwLockReadGuard<'_, T>> {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.try_read_until(deadline),
            None => Some(self.read()),
        }
    }

    /// Takes a read share, giving up at `deadline`.
    pub fn try_read_until(&self, deadline: Instant) -> Option<RwLockReadGuard<'_, T>> {
        (self.try_read_fast() || self.read_slow(Some(deadline))).then(|| RwLockReadGuard::new(self))
    }

    /// Takes the write lock, waiting for readers and writers to leave.
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        if !self.try_write_fast() {
            let got = self.write_slow(None);
            debug_assert!(got, "a wait without a deadline cannot time out");
        }
        RwLockWriteGuard::new(self)
    }

    /// Takes the write lock if it is free now.
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
        self.try_write_fast().then(|| RwLockWriteGuard::new(self))
    }

    /// Takes the write lock, giving up after `timeout`.
    pub fn try_write_for(&self, timeout: Duration) -> Option<RwLockWriteGuard<'_, T>> {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.try_write_until(deadline),
            None => Some(self.write()),
        }
    }

    /// Takes the write lock, giving up at `deadline`.
    pub fn try_write_until(&self, deadline: Instant) -> Option<RwLockWriteGuard<'_, T>> {
        (self.try_write_fast() || self.write_slow(Some(deadline)))
            .then(|| RwLockWriteGuard::new(self))
    }

    /// The value, through exclusive access: no locking needed.
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }

    #[inline]
    fn try_read_fast(&self) -> bool {
        let s = self.state.load(Ordering::Relaxed);
        // Acquire: pairs with the Release of the writer's unlock (or the grant).
        s & (WRITER | PARKED) == 0
            && self
                .state
                .compare_exchange_weak(s, add_reader(s), Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    #[inline]
    fn try_write_fast(&self) -> bool {
        // Acquire: pairs with the Release of the last unlock (read or write).
        self.state
            .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[cold]
    fn read_slow(&self, deadline: Option<Instant>) -> bool {
        self.acquire_slow(READ, deadline, |s| {
            (s & (WRITER | PARKED) == 0).then(|| add_reader(s))
        })
    }

    #[cold]
    fn write_slow(&self, deadline: Option<Instant>) -> bool {
        self.acquire_slow(WRITE, deadline, |s| (s == 0).then_some(WRITER))
    }

    /// The shared slow path: spin a little, then queue as `kind` until
    /// granted. `take(s)` is the state after acquiring from `s` directly, if
    /// allowed.
    fn acquire_slow(
        &self,
        kind: usize,
        deadline: Option<Instant>,
        take: impl Fn(usize) -> Option<usize>,
    ) -> bool {
        let mut spins = 0;
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if let Some(new) = take(s) {
                // Acquire: pairs with the Release of the unlocks before us.
                match self
                    .state
                    .compare_exchange_weak(s, new, Ordering::Acquire, Ordering::Relaxed)
                {
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
            s = self.state.load(Ordering::Relaxed);
            // Acquire directly, or announce the waiter by setting PARKED on
            // the exact state that blocks us (module docs).
            let queued = loop {
                if let Some(new) = take(s) {
                    // Acquire: as above.
                    match self.state.compare_exchange_weak(
                        s,
                        new,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => break false,
                        Err(now) => s = now,
                    }
                    continue;
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
                return true;
            }
            let opts = WaitOptions {
                kind,
                deadline,
                ..WaitOptions::on(if kind == READ {
                    WaitOn::RwLockRead
                } else {
                    WaitOn::RwLockWrite
                })
            };
            // A token is a grant: the granter already counted us in.
            return q.wait(opts, || {}, |q| self.grant(q)).is_ok();
        }
    }

    /// Under the queue lock: lets in the waiters at the front that may go in
    /// now, and keeps "PARKED iff the queue is non-empty". Returns whom to
    /// wake once the lock is released. See the module docs.
    fn grant(&self, q: &mut QueueGuard<'_, ()>) -> Wakes {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            let parked = |left: usize| if left > 0 { PARKED } else { 0 };
            let (n, new) = if s & WRITER != 0 {
                (0, (s & !PARKED) | parked(q.len()))
            } else {
                match q.front_kind() {
                    Some(WRITE) if s / ONE_READER == 0 => (1, WRITER | parked(q.len() - 1)),
                    Some(READ) => {
                        let k = q.front_run(READ);
                        let readers = (s / ONE_READER).saturating_add(k);
                        assert!(readers <= MAX_READERS, "gofer: too many RwLock readers");
                        (k, (readers * ONE_READER) | parked(q.len() - k))
                    }
                    _ => (0, (s & !PARKED) | parked(q.len())),
                }
            };
            if n == 0 && new == s {
                return Wakes::new();
            }
            // Acquire: gathers the Release of every reader or writer that
            // left; Release: with the token stores, publishes to the waiters.
            match self
                .state
                .compare_exchange_weak(s, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    let mut wakes = Wakes::new();
                    for _ in 0..n {
                        if let Some(t) = q.notify_front(GRANTED) {
                            wakes.push(t);
                        }
                    }
                    return wakes;
                }
                Err(now) => s = now,
            }
        }
    }

    #[cold]
    fn grant_slow(&self) {
        let mut q = self.queue.lock();
        let wakes = self.grant(&mut q);
        drop(q);
        wakes.wake();
    }

    fn unlock_read(&self) {
        // Release: pairs with the Acquire of the writer that comes next
        // (its fast CAS, or the grant's CAS).
        let prev = self.state.fetch_sub(ONE_READER, Ordering::Release);
        if prev & PARKED != 0 && prev / ONE_READER == 1 {
            // The last reader out, with waiters: let the next ones in.
            self.grant_slow();
        }
    }

    fn unlock_write(&self) {
        // Release: pairs with the Acquire of the next acquisition.
        if self
            .state
            .compare_exchange(WRITER, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            self.unlock_write_slow();
        }
    }

    #[cold]
    fn unlock_write_slow(&self) {
        let mut q = self.queue.lock();
        // Release: as in unlock_write; the grant's AcqRel CAS reads it.
        self.state.fetch_and(!WRITER, Ordering::Release);
        let wakes = self.grant(&mut q);
        drop(q);
        wakes.wake();
    }
}

/// `s` with one more reader, or a panic past the maximum.
fn add_reader(s: usize) -> usize {
    assert!(
        s / ONE_READER < MAX_READERS,
        "gofer: too many RwLock readers"
    );
    s + ONE_READER
}

impl<T: Default> Default for RwLock<T> {
    fn default() -> RwLock<T> {
        RwLock::new(T::default())
    }
}

impl<T> From<T> for RwLock<T> {
    fn from(value: T) -> RwLock<T> {
        RwLock::new(value)
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("RwLock");
        match self.try_read() {
            Some(g) => d.field("data", &&*g),
            None => d.field("data", &format_args!("<locked>")),
        };
        d.finish()
    }
}

/// Shared access to an [`RwLock`]'s value; releases the read share on drop.
#[must_use = "if unused the RwLock will immediately unlock"]
pub struct RwLockReadGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
    /// Send and Sync iff `T: Sync`, like `&T`.
    _marker: PhantomData<&'a T>,
}

impl<'a, T: ?Sized> RwLockReadGuard<'a, T> {
    fn new(lock: &'a RwLock<T>) -> Self {
        RwLockReadGuard {
            lock,
            _marker: PhantomData,
        }
    }
}

impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds a read share, so no writer (and no `&mut T`)
        // exists until it is dropped.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.unlock_read();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLockReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// Exclusive access to an [`RwLock`]'s value; unlocks on drop.
#[must_use = "if unused the RwLock will immediately unlock"]
pub struct RwLockWriteGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
    /// Send iff `T: Send`, Sync iff `T: Sync`, like `&mut T`.
    _marker: PhantomData<&'a mut T>,
}

impl<'a, T: ?Sized> RwLockWriteGuard<'a, T> {
    fn new(lock: &'a RwLock<T>) -> Self {
        RwLockWriteGuard {
            lock,
            _marker: PhantomData,
        }
    }
}

impl<T: ?Sized> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the write lock: no other reference to the
        // value exists.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the write lock, and `&mut self` makes this
        // the only reference derived from it.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: ?Sized> Drop for RwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.unlock_write();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLockWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
