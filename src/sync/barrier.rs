//! [`Barrier`]: `n` parties meet, then all go on; reusable.
//!
//! # Generations
//!
//! All state lives under the wait-queue lock: `arrived` counts the parties
//! of the current generation. An arrival that is not the `n`-th links itself
//! and parks. The `n`-th (the leader) resets `arrived` to zero and hands a
//! token to every linked waiter, all under the lock, then wakes them. The
//! next generation's arrivals therefore start from zero and link behind an
//! empty queue: a waiter of generation `k` is released only by the leader
//! of generation `k`, and a fast party that comes back for generation `k+1`
//! cannot be counted in generation `k`. Waiters wait on their own token, so
//! stale or spurious wake-ups do not release them early.

use crate::runtime::task::wait::WaitOn;
use std::fmt;
use std::time::{Duration, Instant};

use super::waitqueue::{WaitOptions, WaitQueue, Wakes};

/// The wait-queue token: "your generation is complete".
const RELEASED: usize = 1;

/// Bookkeeping under the queue lock.
struct State {
    /// Parties of the current generation that have arrived.
    arrived: usize,
}

/// Lets `n` tasks or threads wait for each other, like [`std::sync::Barrier`]
/// but parking tasks instead of blocking their threads.
///
/// Each call to [`wait`](Barrier::wait) blocks until `n` calls have been
/// made in the current generation; then all return, exactly one of them
/// with [`is_leader`](BarrierWaitResult::is_leader) true, and the barrier is
/// ready for the next generation. A barrier of 0 or 1 never blocks.
///
/// ```
/// use std::sync::Arc;
/// use gofer::sync::Barrier;
///
/// let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();
/// let barrier = Arc::new(Barrier::new(4));
/// let hs: Vec<_> = (0..4)
///     .map(|_| {
///         let b = barrier.clone();
///         sched.spawn(move || b.wait().is_leader())
///     })
///     .collect();
/// let mut leaders = 0;
/// for h in hs {
///     leaders += usize::from(h.join().unwrap());
/// }
/// assert_eq!(leaders, 1);
/// sched.shutdown();
/// ```
pub struct Barrier {
    n: usize,
    queue: WaitQueue<State>,
}

impl Barrier {
    /// A barrier for `n` parties.
    pub const fn new(n: usize) -> Barrier {
        Barrier {
            n,
            queue: WaitQueue::new(State { arrived: 0 }),
        }
    }

    /// Waits until all `n` parties of this generation have called `wait`.
    pub fn wait(&self) -> BarrierWaitResult {
        self.wait_inner(None)
            .expect("a wait without a deadline cannot time out")
    }

    /// Like [`wait`](Self::wait), giving up after `timeout`: `None` if the
    /// time passed before all `n` parties arrived. A party that gives up no
    /// longer counts for this generation, which still waits for `n`.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<BarrierWaitResult> {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.wait_deadline(deadline),
            None => Some(self.wait()),
        }
    }

    /// Like [`wait_timeout`](Self::wait_timeout), giving up at `deadline`.
    pub fn wait_deadline(&self, deadline: Instant) -> Option<BarrierWaitResult> {
        self.wait_inner(Some(deadline))
    }

    fn wait_inner(&self, deadline: Option<Instant>) -> Option<BarrierWaitResult> {
        let mut q = self.queue.lock();
        q.arrived += 1;
        if q.arrived < self.n {
            let mut opts = WaitOptions::on(WaitOn::Barrier);
            opts.deadline = deadline;
            let r = q.wait(
                opts,
                || {},
                |q| {
                    // The deadline passed, or the wait unwinds: this party
                    // no longer counts. (A leader that came first handed a
                    // token instead, and the wait returns it.)
                    q.arrived -= 1;
                    Wakes::new()
                },
            );
            return r.ok().map(|_| BarrierWaitResult(false));
        }
        q.arrived = 0;
        let wakes = q.notify_all(RELEASED);
        drop(q);
        wakes.wake();
        Some(BarrierWaitResult(true))
    }
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Barrier").field("n", &self.n).finish()
    }
}

/// What [`Barrier::wait`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierWaitResult(bool);

impl BarrierWaitResult {
    /// True for exactly one party per generation (the last to arrive).
    pub fn is_leader(&self) -> bool {
        self.0
    }
}
