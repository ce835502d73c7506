//! [`Semaphore`]: a counted set of permits that tasks and threads wait for.
//!
//! # The permit state machine (`Semaphore::state`)
//!
//! One atomic word: `permits << 1 | PARKED`. `PARKED` means the wait queue
//! is non-empty; it is set and cleared only under the queue lock, and
//! whenever that lock is free it is set exactly when the queue is non-empty.
//! While `PARKED` is set the count is zero: permits released then go straight
//! to waiters (FIFO), and only what is left over is counted.
//!
//! ```text
//!  acquire, fast:     !PARKED, n >= 1  -> n - 1          CAS (Acquire)
//!  acquire, slow, queue lock held:
//!                     !PARKED, n >= 1  -> n - 1          CAS (Acquire)
//!                     n == 0           -> PARKED         CAS, then enqueue
//!  release k, fast:   !PARKED          -> n + k          CAS (Release)
//!  release k, slow, queue lock held (PARKED was seen):
//!                     hand min(k, waiters) permits to the first waiters
//!                     (token GRANTED), count the rest, PARKED iff waiters
//!                     remain: one CAS (Release), then the tokens
//!  waiter leaves on timeout, queue lock held:
//!                     clear PARKED if the queue became empty
//! ```
//!
//! Because a non-empty queue blocks the fast path, newcomers cannot take
//! permits from under a waiter (no starvation), and the waiter's CAS that
//! sets `PARKED` expects a count of zero, so a concurrent fast release either
//! lands first (and the waiter takes that permit instead of parking) or sees
//! `PARKED` and hands the permit over under the queue lock: no lost wake-up.
//! A waiter that times out leaves the queue under the queue lock, so no
//! permit is handed to it afterwards; if a permit reached it first, it keeps
//! it and the acquisition succeeds.
//!
//! Orderings: an acquisition's Acquire (CAS or token load) pairs with the
//! Release of the release that made the permit available (CAS or token
//! store).

use crate::error::Cancelled;
use crate::runtime::task::park;
use crate::runtime::task::wait::WaitOn;
use crate::task::CancelToken;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::waitqueue::{QueueGuard, WaitOptions, WaitQueue, Wakes};

const PARKED: usize = 1;
const ONE: usize = 2;

/// The wait-queue token: "a permit is yours".
const GRANTED: usize = 1;

/// A counting semaphore for tasks and threads.
///
/// [`acquire`](Semaphore::acquire) takes one permit, parking the task (or
/// blocking the thread) until one is available; the returned
/// [`SemaphorePermit`] gives it back on drop. Waiters are served in FIFO
/// order, and a waiting task blocks newcomers, so none starves.
///
/// ```
/// use std::sync::Arc;
/// use gofer::sync::Semaphore;
///
/// let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();
/// let sem = Arc::new(Semaphore::new(2)); // at most two at a time
/// let hs: Vec<_> = (0..8)
///     .map(|_| {
///         let sem = sem.clone();
///         sched.spawn(move || {
///             let _permit = sem.acquire();
///             gofer::yield_now();
///         })
///     })
///     .collect();
/// for h in hs {
///     h.join().unwrap();
/// }
/// assert_eq!(sem.available_permits(), 2);
/// sched.shutdown();
/// ```
pub struct Semaphore {
    state: AtomicUsize,
    queue: WaitQueue<()>,
}

impl Semaphore {
    /// The most permits a semaphore can hold.
    pub const MAX_PERMITS: usize = usize::MAX >> 2;

    /// A semaphore with `permits` permits. Usable in a `static`.
    ///
    /// # Panics
    /// If `permits` exceeds [`MAX_PERMITS`](Semaphore::MAX_PERMITS).
    #[track_caller]
    pub const fn new(permits: usize) -> Semaphore {
        assert!(
            permits <= Semaphore::MAX_PERMITS,
            "gofer: too many semaphore permits"
        );
        Semaphore {
            state: AtomicUsize::new(permits * ONE),
            queue: WaitQueue::new(()),
        }
    }

    /// Takes a permit, waiting for one if none is available.
    pub fn acquire(&self) -> SemaphorePermit<'_> {
        match self.try_acquire() {
            Some(p) => p,
            None => {
                let got = self.acquire_slow(None);
                debug_assert!(got, "an acquire without a deadline cannot time out");
                SemaphorePermit { sem: self }
            }
        }
    }

    /// Takes a permit if one is available now and nobody is waiting.
    pub fn try_acquire(&self) -> Option<SemaphorePermit<'_>> {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & PARKED != 0 || s < ONE {
                return None;
            }
            // Acquire: pairs with the Release of the release that added the permit.
            match self
                .state
                .compare_exchange_weak(s, s - ONE, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Some(SemaphorePermit { sem: self }),
                Err(now) => s = now,
            }
        }
    }

    /// Takes a permit, giving up after `timeout`.
    pub fn acquire_timeout(&self, timeout: Duration) -> Option<SemaphorePermit<'_>> {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.acquire_until(deadline),
            None => Some(self.acquire()),
        }
    }

    /// Takes a permit, giving up at `deadline`.
    pub fn acquire_until(&self, deadline: Instant) -> Option<SemaphorePermit<'_>> {
        // Lazily: a permit built and dropped on timeout would release a
        // permit never taken.
        self.try_acquire().or_else(|| {
            self.acquire_slow(Some(deadline))
                .then(|| SemaphorePermit { sem: self })
        })
    }

    /// Takes a permit, waiting for one until `token` is cancelled:
    /// `Err(Cancelled)` then, with no permit taken. For a wait that a
    /// group's [`CancelToken`] must be able to end (a worker waiting for a
    /// slot when the group shuts down) without cancelling the task itself.
    ///
    /// A token already cancelled gives `Err` at once, even if a permit is
    /// free. A permit handed to the waiter just before the cancellation is
    /// kept: the call returns it, as a timed wait does whose permit came
    /// at its deadline, so no permit is ever lost. On a cancelled *task*
    /// ([`JoinHandle::cancel`](crate::JoinHandle::cancel)) the wait unwinds,
    /// as [`acquire`](Self::acquire) does.
    ///
    /// ```
    /// use gofer::sync::Semaphore;
    /// use gofer::task::CancelToken;
    ///
    /// let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
    /// let slots = std::sync::Arc::new(Semaphore::new(0)); // none free
    /// let stop = CancelToken::new();
    /// let (s, t) = (slots.clone(), stop.clone());
    /// let worker = sched.spawn(move || match s.acquire_cancellable(&t) {
    ///     Ok(_permit) => "worked",
    ///     Err(gofer::Cancelled) => "stopped",
    /// });
    /// stop.cancel();
    /// assert_eq!(worker.join().unwrap(), "stopped");
    /// sched.shutdown();
    /// ```
    pub fn acquire_cancellable(
        &self,
        token: &CancelToken,
    ) -> Result<SemaphorePermit<'_>, Cancelled> {
        if token.is_cancelled() {
            return Err(Cancelled);
        }
        if let Some(p) = self.try_acquire() {
            return Ok(p);
        }
        // Registered before the wait looks at the token: a cancel from now
        // on unparks this waiter (`CancelToken::watch`).
        let Some(_watch) = token.watch(park::current()) else {
            return Err(Cancelled);
        };
        if self.acquire_slow_unless(None, &|| token.is_cancelled()) {
            Ok(SemaphorePermit { sem: self })
        } else {
            Err(Cancelled)
        }
    }

    #[cold]
    fn acquire_slow(&self, deadline: Option<Instant>) -> bool {
        self.acquire_slow_unless(deadline, &|| false)
    }

    /// Waits for a permit until `deadline` or until `stop` answers true
    /// (asked before each park); whether it got one.
    #[cold]
    fn acquire_slow_unless(&self, deadline: Option<Instant>, stop: &dyn Fn() -> bool) -> bool {
        let q = self.queue.lock();
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & PARKED == 0 && s >= ONE {
                // Acquire: pairs with the Release of the release that added the permit.
                match self.state.compare_exchange_weak(
                    s,
                    s - ONE,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return true,
                    Err(now) => s = now,
                }
                continue;
            }
            if s & PARKED != 0 {
                break;
            }
            // The count is zero: announce the waiter (module docs).
            match self.state.compare_exchange_weak(
                s,
                s | PARKED,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        let opts = WaitOptions {
            deadline,
            ..WaitOptions::on(WaitOn::Semaphore)
        };
        q.wait_unless(opts, || {}, |q| self.on_leave(q), stop)
            .is_ok()
    }

    /// A waiter left the queue on timeout: keep "PARKED iff non-empty".
    fn on_leave(&self, q: &mut QueueGuard<'_, ()>) -> Wakes {
        if q.is_empty() {
            self.state.fetch_and(!PARKED, Ordering::Relaxed);
        }
        Wakes::new()
    }

    /// Adds `n` permits, waking waiters that can now proceed.
    ///
    /// # Panics
    /// If the count would exceed [`MAX_PERMITS`](Semaphore::MAX_PERMITS).
    #[track_caller]
    pub fn add_permits(&self, n: usize) {
        if n > 0 {
            self.release(n);
        }
    }

    /// How many permits are available right now (a hint: it may change at
    /// once).
    pub fn available_permits(&self) -> usize {
        self.state.load(Ordering::Relaxed) / ONE
    }

    #[track_caller]
    fn release(&self, n: usize) {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & PARKED != 0 {
                return self.release_slow(n);
            }
            let new = add_checked(s, n);
            // Release: pairs with the Acquire of the CAS that takes a permit.
            match self
                .state
                .compare_exchange_weak(s, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => s = now,
            }
        }
    }

    #[cold]
    #[track_caller]
    fn release_slow(&self, n: usize) {
        let mut q = self.queue.lock();
        let given = n.min(q.len());
        let left = n - given;
        let parked = if q.len() > given { PARKED } else { 0 };
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            // Fails (panics) before anything is handed over.
            let new = add_checked(s & !PARKED, left) | parked;
            match self
                .state
                .compare_exchange_weak(s, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        let mut wakes = Wakes::new();
        for _ in 0..given {
            if let Some(t) = q.notify_front(GRANTED) {
                wakes.push(t);
            }
        }
        drop(q);
        wakes.wake();
    }
}

/// `s` plus `n` permits, or a panic past the maximum.
#[track_caller]
fn add_checked(s: usize, n: usize) -> usize {
    match (s / ONE).checked_add(n) {
        Some(total) if total <= Semaphore::MAX_PERMITS => s + n * ONE,
        _ => panic!("gofer: semaphore permit count overflow"),
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("available_permits", &self.available_permits())
            .finish()
    }
}

/// One permit of a [`Semaphore`]; returned to it on drop.
#[must_use = "if unused the permit is released at once"]
pub struct SemaphorePermit<'a> {
    sem: &'a Semaphore,
}

impl SemaphorePermit<'_> {
    /// Keeps the permit out of the semaphore for good: the count shrinks by
    /// one.
    pub fn forget(self) {
        std::mem::forget(self);
    }
}

impl Drop for SemaphorePermit<'_> {
    fn drop(&mut self) {
        self.sem.release(1);
    }
}

impl fmt::Debug for SemaphorePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit").finish_non_exhaustive()
    }
}
