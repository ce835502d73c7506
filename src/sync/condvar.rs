//! [`Condvar`]: wait for a condition under a [`Mutex`](super::Mutex).
//!
//! # Protocol
//!
//! A waiter links itself into the condvar's queue *before* it unlocks the
//! mutex, and relocks the mutex after it is notified (or times out):
//!
//! ```text
//!  waiter (holds the mutex)              notifier
//!  1. lock queue, link node, unlock queue
//!  2. unlock the mutex                    1. lock the mutex, change the condition,
//!  3. park until the node has a token        (unlock), notify: lock queue,
//!  4. relock the mutex                       unlink the first node, give it a token
//! ```
//!
//! A notifier that changed the condition under the mutex did so after step
//! 2, so after step 1: it finds the node. No notification is lost between
//! the waiter's check and its park. Notifications are not remembered: a
//! notify with no one queued does nothing (as with every condition
//! variable). A waiter whose deadline passes leaves the queue under the
//! queue lock (see `waitqueue.rs`), so a later `notify_one` goes to someone
//! still waiting; if the notify won that race, the wait reports success.

use crate::runtime::task::wait::WaitOn;
use std::fmt;
use std::time::{Duration, Instant};

use super::mutex::{MutexGuard, RawMutex};
use super::waitqueue::{WaitOptions, WaitQueue, Wakes};
use crate::runtime::task::cancel;

/// The wait-queue token: "you were notified".
const NOTIFIED: usize = 1;

/// A condition variable for tasks and threads, used with
/// [`Mutex`](super::Mutex), in the style of `parking_lot::Condvar`.
///
/// Waiting parks the task (or blocks the thread) and releases the mutex
/// meanwhile. Wake-ups are only hints: always re-check the condition in a
/// loop, or use [`wait_while`](Condvar::wait_while). One condvar may be used
/// with different mutexes.
///
/// ```
/// use std::sync::Arc;
/// use gofer::sync::{Condvar, Mutex};
///
/// let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();
/// let pair = Arc::new((Mutex::new(false), Condvar::new()));
/// let p2 = pair.clone();
/// let h = sched.spawn(move || {
///     let (ready, cv) = &*p2;
///     let mut g = ready.lock();
///     cv.wait_while(&mut g, |ready| !*ready);
/// });
/// *pair.0.lock() = true;
/// pair.1.notify_all();
/// h.join().unwrap();
/// sched.shutdown();
/// ```
pub struct Condvar {
    queue: WaitQueue<()>,
}

impl Condvar {
    /// A new condition variable with no waiters. Usable in a `static`.
    pub const fn new() -> Condvar {
        Condvar {
            queue: WaitQueue::new(()),
        }
    }

    /// Releases the guard's mutex, waits for a notification, and relocks.
    ///
    /// May wake without a notification; re-check the condition.
    pub fn wait<T: ?Sized>(&self, guard: &mut MutexGuard<'_, T>) {
        self.wait_inner(guard, None);
    }

    /// Waits while `condition` returns true, re-checking it under the lock
    /// after every wake-up.
    pub fn wait_while<T: ?Sized, F>(&self, guard: &mut MutexGuard<'_, T>, mut condition: F)
    where
        F: FnMut(&mut T) -> bool,
    {
        while condition(&mut **guard) {
            self.wait(guard);
        }
    }

    /// Like [`wait`](Condvar::wait), giving up after `timeout`. The mutex is
    /// locked again on return either way.
    pub fn wait_timeout<T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        timeout: Duration,
    ) -> WaitTimeoutResult {
        WaitTimeoutResult(self.wait_inner(guard, Instant::now().checked_add(timeout)))
    }

    /// Like [`wait`](Condvar::wait), giving up at `deadline`.
    pub fn wait_until<T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        deadline: Instant,
    ) -> WaitTimeoutResult {
        WaitTimeoutResult(self.wait_inner(guard, Some(deadline)))
    }

    /// Returns whether the deadline passed without a notification.
    fn wait_inner<T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        deadline: Option<Instant>,
    ) -> bool {
        let raw = MutexGuard::mutex(guard).raw();
        let opts = WaitOptions {
            deadline,
            ..WaitOptions::on(WaitOn::Condvar)
        };
        // Link first, then unlock the mutex (module docs). The guard stays
        // borrowed, so its holder cannot touch the data while unlocked.
        // The mutex is locked again on the way out, an unwind from the wait
        // included (a cancelled task, `runtime/task/cancel.rs`): the guard's holder
        // unlocks it.
        let relock = Relock(raw);
        let r = self
            .queue
            .lock()
            .wait(opts, || raw.unlock(), |_| Wakes::new());
        drop(relock);
        r.is_err()
    }

    /// Wakes one waiter, the longest waiting. Returns whether there was one.
    pub fn notify_one(&self) -> bool {
        let task = self.queue.lock().notify_front(NOTIFIED);
        match task {
            Some(t) => {
                t.unpark();
                true
            }
            None => false,
        }
    }

    /// Wakes every waiter. Returns how many there were.
    pub fn notify_all(&self) -> usize {
        let wakes = self.queue.lock().notify_all(NOTIFIED);
        let n = wakes.len();
        wakes.wake();
        n
    }
}

/// Locks the mutex of a condvar wait when dropped: on return, and on an
/// unwind out of the wait. That lock does not observe a cancellation: an
/// unwind out of it would leave the mutex unlocked under a guard that
/// unlocks it.
struct Relock<'a>(&'a RawMutex);

impl Drop for Relock<'_> {
    fn drop(&mut self) {
        let _mask = cancel::Mask::new();
        self.0.lock();
    }
}

impl Default for Condvar {
    fn default() -> Condvar {
        Condvar::new()
    }
}

impl fmt::Debug for Condvar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Condvar").finish_non_exhaustive()
    }
}

/// Whether a timed [`Condvar`] wait ended because its time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    /// True if the wait ended because the timeout passed, not because of a
    /// notification.
    pub fn timed_out(&self) -> bool {
        self.0
    }
}
