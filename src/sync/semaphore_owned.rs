//! [`OwnedSemaphorePermit`]: a permit of a [`Semaphore`] held through an
//! [`Arc`], so that it is `'static` and can move into a spawned task, as
//! tokio's `acquire_owned`.
//!
//! It is a permit taken by the borrowed path ([`Semaphore::acquire`] and
//! its siblings) whose borrow is given up at once (`forget`), plus a clone
//! of the `Arc`; its drop gives the permit back with
//! [`Semaphore::add_permits`]. So it shares the semaphore's one state
//! machine (`semaphore.rs`): same FIFO hand-over to waiters, same
//! orderings.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::semaphore::{Semaphore, SemaphorePermit};

impl Semaphore {
    /// Takes a permit, waiting for one if none is available, and returns
    /// one that holds the semaphore through its `Arc`: it is `'static`, so
    /// it can move into a task that gives the permit back when it ends.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use gofer::sync::Semaphore;
    ///
    /// let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();
    /// let limit = Arc::new(Semaphore::new(2)); // at most two jobs at a time
    /// let mut jobs = Vec::new();
    /// for i in 0..6 {
    ///     // Waits here while two jobs run: the loop is held back, not the jobs.
    ///     let permit = limit.acquire_owned();
    ///     jobs.push(sched.spawn(move || {
    ///         let _permit = permit; // given back when the job ends
    ///         i * 2
    ///     }));
    /// }
    /// let total: i32 = jobs.into_iter().map(|j| j.join().unwrap()).sum();
    /// assert_eq!(total, 30);
    /// assert_eq!(limit.available_permits(), 2);
    /// sched.shutdown();
    /// ```
    pub fn acquire_owned(self: &Arc<Self>) -> OwnedSemaphorePermit {
        self.own(self.acquire())
    }

    /// Takes a permit if one is available now and nobody is waiting, as
    /// [`try_acquire`](Self::try_acquire), as an owned permit.
    pub fn try_acquire_owned(self: &Arc<Self>) -> Option<OwnedSemaphorePermit> {
        self.try_acquire().map(|p| self.own(p))
    }

    /// Takes a permit, giving up after `timeout`, as an owned permit.
    pub fn acquire_owned_timeout(
        self: &Arc<Self>,
        timeout: Duration,
    ) -> Option<OwnedSemaphorePermit> {
        self.acquire_timeout(timeout).map(|p| self.own(p))
    }

    /// Takes a permit, giving up at `deadline`, as an owned permit.
    pub fn acquire_owned_until(
        self: &Arc<Self>,
        deadline: Instant,
    ) -> Option<OwnedSemaphorePermit> {
        self.acquire_until(deadline).map(|p| self.own(p))
    }

    /// Takes a permit until `token` is cancelled, as
    /// [`acquire_cancellable`](Self::acquire_cancellable), as an owned
    /// permit.
    pub fn acquire_owned_cancellable(
        self: &Arc<Self>,
        token: &crate::task::CancelToken,
    ) -> Result<OwnedSemaphorePermit, crate::error::Cancelled> {
        self.acquire_cancellable(token).map(|p| self.own(p))
    }

    /// Turns a borrowed permit of this semaphore into an owned one.
    fn own(self: &Arc<Self>, permit: SemaphorePermit<'_>) -> OwnedSemaphorePermit {
        // The permit stays taken; the owned permit's drop gives it back.
        permit.forget();
        OwnedSemaphorePermit { sem: self.clone() }
    }
}

/// One permit of a [`Semaphore`], holding the semaphore through an
/// [`Arc`]: `'static` and `Send`, so it can move into a task or a thread.
/// Returned to the semaphore on drop. Made by
/// [`Semaphore::acquire_owned`] and its siblings.
#[must_use = "if unused the permit is released at once"]
pub struct OwnedSemaphorePermit {
    sem: Arc<Semaphore>,
}

impl OwnedSemaphorePermit {
    /// The semaphore the permit belongs to.
    pub fn semaphore(&self) -> &Arc<Semaphore> {
        &self.sem
    }

    /// Keeps the permit out of the semaphore for good: the count shrinks by
    /// one. The semaphore's `Arc` is released.
    pub fn forget(self) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: the permit's destructor never runs (`ManuallyDrop`) and
        // `this` is not used after this read, so the `Arc` is moved out
        // exactly once and dropped once, here, without giving the permit
        // back.
        let sem = unsafe { std::ptr::read(&this.sem) };
        drop(sem);
    }
}

impl Drop for OwnedSemaphorePermit {
    fn drop(&mut self) {
        self.sem.add_permits(1);
    }
}

impl fmt::Debug for OwnedSemaphorePermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedSemaphorePermit")
            .field("semaphore", &self.sem)
            .finish()
    }
}
