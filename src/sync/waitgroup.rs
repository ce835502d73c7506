//! [`WaitGroup`]: wait for a counted set of jobs to finish, Go style.
//!
//! # The counter protocol
//!
//! `count` is the number of outstanding jobs. Waiters queue only while it
//! is non-zero, and they check it under the queue lock:
//!
//! ```text
//!  wait():  count == 0 (Acquire)? return.
//!           lock queue; count == 0 (Acquire)? return; else enqueue, park
//!  done():  count -= 1 (AcqRel CAS; panics at zero instead)
//!           if it reached zero: lock queue, wake every waiter
//! ```
//!
//! The lost-wake-up race: a waiter that read a non-zero count under the
//! queue lock is linked before it releases that lock, and the `done` that
//! brings the count to zero takes the same lock after its decrement, so it
//! finds the waiter. A waiter that takes the lock after that decrement reads
//! zero. Every decrement is a read-modify-write with Release, so a waiter's
//! Acquire load of zero (or the waker's AcqRel decrement, passed on through
//! the wake token) orders every job's work before `wait` returns.

use crate::runtime::task::wait::WaitOn;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::waitqueue::{WaitOptions, WaitQueue, Wakes};

/// The wait-queue token: "the count reached zero".
const ZERO: usize = 1;

struct Inner {
    count: AtomicUsize,
    queue: WaitQueue<()>,
}

/// Waits for a set of jobs to finish, like Go's `sync.WaitGroup`.
///
/// [`add`](WaitGroup::add) counts jobs in, [`done`](WaitGroup::done) counts
/// one out, and [`wait`](WaitGroup::wait) parks the task (or blocks the
/// thread) until the count is zero. Clones share one counter. Call `add`
/// before starting the job it counts (not inside it), so a `wait` cannot
/// slip in before the count goes up. The group may be reused once the count
/// is back to zero.
///
/// ```
/// use gofer::sync::WaitGroup;
///
/// let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();
/// let wg = WaitGroup::new();
/// for _ in 0..100 {
///     wg.add(1);
///     let wg = wg.clone();
///     sched.spawn(move || wg.done());
/// }
/// wg.wait();
/// sched.shutdown();
/// ```
#[derive(Clone)]
pub struct WaitGroup {
    inner: Arc<Inner>,
}

impl WaitGroup {
    /// A group with a count of zero.
    pub fn new() -> WaitGroup {
        WaitGroup {
            inner: Arc::new(Inner {
                count: AtomicUsize::new(0),
                queue: WaitQueue::new(()),
            }),
        }
    }

    /// Adds `n` outstanding jobs.
    ///
    /// # Panics
    /// If the count would overflow.
    #[track_caller]
    pub fn add(&self, n: usize) {
        let count = &self.inner.count;
        let mut s = count.load(Ordering::Relaxed);
        loop {
            let Some(new) = s.checked_add(n) else {
                panic!("gofer: WaitGroup count overflow");
            };
            // Relaxed: only decrements publish work (module docs); being a
            // read-modify-write, this keeps their release sequence intact.
            match count.compare_exchange_weak(s, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => s = now,
            }
        }
    }

    /// Marks one job finished; wakes the waiters when none is left.
    ///
    /// # Panics
    /// If the count is already zero (more `done` calls than `add`ed jobs).
    #[track_caller]
    pub fn done(&self) {
        let count = &self.inner.count;
        let mut s = count.load(Ordering::Relaxed);
        loop {
            if s == 0 {
                panic!(
                    "gofer: WaitGroup::done called more times than add: the count would go below zero"
                );
            }
            // Release: publishes this job's work to the waiters. Acquire (on
            // the last one): gathers every earlier job's Release to pass on
            // through the wake tokens.
            match count.compare_exchange_weak(s, s - 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        if s == 1 {
            let wakes = self.inner.queue.lock().notify_all(ZERO);
            wakes.wake();
        }
    }

    /// Parks the task (or blocks the thread) until the count is zero.
    pub fn wait(&self) {
        // Acquire: pairs with the Release of every `done` (module docs).
        if self.inner.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let q = self.inner.queue.lock();
        if self.inner.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let r = q.wait(WaitOptions::on(WaitOn::WaitGroup), || {}, |_| Wakes::new());
        debug_assert!(r.is_ok(), "a wait without a deadline cannot time out");
    }

    /// Like [`wait`](Self::wait), giving up after `timeout`: `true` if the
    /// count reached zero, `false` if the time passed first (the jobs go on;
    /// a later `wait` waits for them again).
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.wait_deadline(deadline),
            None => {
                self.wait();
                true
            }
        }
    }

    /// Like [`wait`](Self::wait), giving up at `deadline`: `true` if the
    /// count reached zero, `false` if the deadline passed first.
    pub fn wait_deadline(&self, deadline: Instant) -> bool {
        // Acquire: pairs with the Release of every `done`, as in `wait`.
        if self.inner.count.load(Ordering::Acquire) == 0 {
            return true;
        }
        let q = self.inner.queue.lock();
        if self.inner.count.load(Ordering::Acquire) == 0 {
            return true;
        }
        let mut opts = WaitOptions::on(WaitOn::WaitGroup);
        opts.deadline = Some(deadline);
        // A token that arrives as the deadline passes still counts: the
        // queue hands it back instead of timing out.
        q.wait(opts, || {}, |_| Wakes::new()).is_ok()
    }

    /// The number of outstanding jobs right now (a hint: it may change at
    /// once).
    pub fn count(&self) -> usize {
        self.inner.count.load(Ordering::Relaxed)
    }
}

impl Default for WaitGroup {
    fn default() -> WaitGroup {
        WaitGroup::new()
    }
}

impl fmt::Debug for WaitGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitGroup")
            .field("count", &self.count())
            .finish()
    }
}
