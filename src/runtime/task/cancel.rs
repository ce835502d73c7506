//! Task cancellation: [`JoinHandle::cancel`](crate::JoinHandle::cancel)
//! asks a task to stop, and the task stops by unwinding from its next
//! cancellable wait.
//!
//! What users are promised (which waits unwind, which do not and why,
//! before the start and after the end) is published in
//! [the `task` module's docs](crate::task#cancellation); keep that list
//! true when a wait changes. This module is how it is done.
//!
//! # The unwind
//!
//! The unwind is started with [`std::panic::resume_unwind`] and a private
//! payload ([`Cancelled`]), so the panic hook does not run and no user
//! panic is ever taken for a cancellation; it ends at the task's root,
//! where [`JoinHandle::join`](crate::JoinHandle::join) reports
//! [`JoinError::is_cancelled`](crate::JoinError::is_cancelled).
//!
//! # Where a task observes it
//!
//! Cancelling sets a flag in the task's header ([`TaskHeader::cancel`]) and
//! then wakes the task the way any `unpark` does. A wait that observes
//! cancellation treats the wake-up as its deadline passing: it withdraws
//! exactly as a timed-out wait does (its waiter node leaves the channel's
//! or the lock's queue, its timer entry goes, its socket waiter unlinks),
//! and only then, with nothing of it left linked anywhere, unwinds
//! ([`unwind`]). So no unwind ever starts while bookkeeping in another
//! structure still points into the task's stack. A [`Mask`] held across a
//! wait (the hooks' calls) keeps it from observing the flag, and a task
//! whose thread is unwinding another task parks with a short deadline and
//! looks again ([`recheck`]), so a deferred cancellation is not lost with
//! the wake-up that brought it.
//!
//! # A wake-up that races the cancellation
//!
//! A wait checks whether its operation completed *before* it checks the
//! flag, and it withdraws under the same lock or CAS a completer uses: the
//! value a sender handed over, the token a mutex unlocker passed, the
//! readiness the reactor reported are never dropped on the floor. If the
//! completer won, the wait returns normally and the task unwinds at its
//! next cancellable wait. The flag is set before the wake-up, and the
//! wake-up is an `unpark` (Release) that the task's park consumes
//! (Acquire), so a task woken by its cancellation sees the flag; a task
//! that was running leaves the `unpark`'s token for its next park, which
//! then returns at once and sees the flag (the pattern of the loom model
//! `a_condition_set_before_unpark_is_seen_even_through_a_stale_token` in
//! `runtime/task/park_state.rs`).
//!
//! # Before the start, after the end, and catching the unwind
//!
//! - A task cancelled before it started never runs: the Processer that
//!   picks it drops its closure there (on that Processer's thread; the
//!   closure is `Send`) and completes the task with the cancelled error.
//! - A task that finished before it observed the cancellation keeps its
//!   result: `join` gives its value.
//! - The flag stays set. A task that catches the unwind (`catch_unwind`)
//!   may go on, but its next cancellable wait unwinds again; if it returns
//!   a value after all, `join` gives that value.

use std::any::Any;
use std::sync::atomic::Ordering;

use std::time::{Duration, Instant};

use crate::error::ShutdownError;
use crate::runtime::context;
use crate::runtime::scheduler::Scheduler;
use crate::runtime::task::{self, TaskHeader, TaskRef};

/// The unwind payload of a cancelled task. Private: nothing outside this
/// crate can make one, so a user's own panic is never taken for a
/// cancellation.
struct Cancelled;

/// Whether the current task was asked to stop ([`JoinHandle::cancel`],
/// [`JoinSet::cancel_all`](crate::task::JoinSet::cancel_all),
/// [`Scheduler::shutdown_now`](crate::Scheduler::shutdown_now)). False
/// outside a task.
///
/// For a loop that never waits: every cancellable wait already unwinds in
/// a cancelled task (the list is in [`gofer::task`'s
/// docs](crate::task#cancellation)), but a computation that does not
/// wait has to look.
///
/// ```
/// let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
/// let (tx, rx) = gofer::chan::bounded::<()>(1);
/// let h = sched.spawn(move || {
///     let mut n = 0u64;
///     tx.send(()).unwrap();
///     while !gofer::task::is_cancelled() {
///         n = n.wrapping_add(1);
///         std::hint::black_box(n);
///     }
///     "stopped"
/// });
/// rx.recv().unwrap();
/// h.cancel();
/// assert_eq!(h.join().unwrap(), "stopped");
/// sched.shutdown();
/// ```
///
/// [`JoinHandle::cancel`]: crate::JoinHandle::cancel
pub fn is_cancelled() -> bool {
    match context::current_task_ptr() {
        // SAFETY: the running task's header is alive while it runs.
        Some(h) => unsafe { (*h).cancel_requested() },
        None => false,
    }
}

/// Whether the running task must stop waiting now: it was cancelled, no
/// [`Mask`] is held, and it is not already unwinding (a second panic would
/// abort). Outside a task, false.
#[inline]
pub(crate) fn interrupted() -> bool {
    // SAFETY: the running task's header is alive while it runs.
    context::current_task_ptr().is_some_and(|h| interrupted_in(unsafe { &*h }))
}

/// [`interrupted`] for a wait that holds the running task's header `h`
/// already: one load of its flag, and no thread-local look-up, unless the
/// task was asked to stop.
#[inline]
pub(crate) fn interrupted_in(h: &TaskHeader) -> bool {
    h.cancel_requested() && h.cancel_mask.load(Ordering::Relaxed) == 0 && !std::thread::panicking()
}

/// How often a wait looks again at a cancellation it had to defer because
/// the thread was unwinding (see [`recheck`]).
const RECHECK: std::time::Duration = std::time::Duration::from_millis(10);

/// The deadline a cancellable wait should park until: `deadline`, or,
/// when a cancellation is pending but deferred because this thread is
/// unwinding, no later than a short while from now. std counts panics per
/// thread, so while one task is parked mid-unwind every other task of its
/// thread sees `panicking()` too: a task woken by its cancellation then
/// cannot tell, and must look again once that unwind is over rather than
/// sleep on with its wake-up spent.
#[inline]
pub(crate) fn recheck(deadline: Option<std::time::Instant>) -> Option<std::time::Instant> {
    match context::current_task_ptr() {
        // SAFETY: the running task's header is alive while it runs.
        Some(h) => recheck_in(unsafe { &*h }, deadline),
        None => deadline,
    }
}

/// [`recheck`] for a wait that holds the running task's header `h`
/// already (see [`interrupted_in`]).
#[inline]
pub(crate) fn recheck_in(
    h: &TaskHeader,
    deadline: Option<std::time::Instant>,
) -> Option<std::time::Instant> {
    if !(h.cancel_requested() && std::thread::panicking()) {
        return deadline;
    }
    recheck_slow(h, deadline)
}

#[cold]
#[inline(never)]
fn recheck_slow(
    h: &TaskHeader,
    deadline: Option<std::time::Instant>,
) -> Option<std::time::Instant> {
    if h.cancel_mask.load(Ordering::Relaxed) != 0 {
        return deadline;
    }
    let soon = std::time::Instant::now() + RECHECK;
    Some(deadline.map_or(soon, |d| d.min(soon)))
}

/// While held, the running task's waits do not observe its cancellation:
/// for a wait that must not unwind (a condvar relocking its mutex, whose
/// guard's drop will unlock it; a hooked libc call). Nests. Outside a
/// task, does nothing. Dropped on the task that made it (it is `!Send`).
pub(crate) struct Mask {
    task: Option<*const crate::runtime::task::TaskHeader>,
}

impl Mask {
    /// Masks the running task's cancellation until dropped.
    pub(crate) fn new() -> Mask {
        let task = context::current_task_ptr();
        if let Some(h) = task {
            // SAFETY: the running task's header is alive while it runs.
            unsafe { &*h }.cancel_mask.fetch_add(1, Ordering::Relaxed);
        }
        Mask { task }
    }
}

impl Drop for Mask {
    fn drop(&mut self) {
        if let Some(h) = self.task {
            // SAFETY: made by this task, which is running (the mask is
            // `!Send` and lives on its stack), so its header is alive.
            unsafe { &*h }.cancel_mask.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Unwinds the running task with the cancellation payload. Call only with
/// nothing of the current wait linked anywhere (module docs).
#[cold]
#[inline(never)]
pub(crate) fn unwind() -> ! {
    std::panic::resume_unwind(Box::new(Cancelled))
}

/// Unwinds if [`interrupted`]: for a wait with nothing linked at this
/// point (before it enqueues, or after it withdrew).
#[inline]
pub(crate) fn checkpoint() {
    if interrupted() {
        unwind();
    }
}

/// [`checkpoint`] for a wait that holds the running task's header `h`
/// already (see [`interrupted_in`]).
#[inline]
pub(crate) fn checkpoint_in(h: &TaskHeader) {
    if interrupted_in(h) {
        unwind();
    }
}

thread_local! {
    /// Set while a Processer drops the closure of a task cancelled before
    /// it started (`TaskCell::fail`), so that a scoped task's bookkeeping
    /// (`scope.rs`, `Done`) counts it as cancelled rather than failed.
    static DROPPING_CANCELLED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` (dropping a never-run closure) with [`dropping_cancelled`]
/// answering `cancelled`. Called outside any task, on a Processer.
///
/// The thread-local is touched only in the small functions below, never
/// inlined here: `f` may reach a hooked call that can switch (a destructor
/// that prints), and the TLS check (`scripts/check_tls_switch.py`) wants
/// no function that touches a thread-local on such a path.
pub(crate) fn dropping_unrun<R>(cancelled: bool, f: impl FnOnce() -> R) -> R {
    let prev = set_dropping_cancelled(cancelled);
    let r = f();
    set_dropping_cancelled(prev);
    r
}

/// Sets what [`dropping_cancelled`] answers; returns what it answered.
#[inline(never)]
fn set_dropping_cancelled(cancelled: bool) -> bool {
    DROPPING_CANCELLED.replace(cancelled)
}

/// Whether the closure being dropped unrun belongs to a cancelled task.
#[inline(never)]
pub(crate) fn dropping_cancelled() -> bool {
    DROPPING_CANCELLED.get()
}

/// Whether an unwind payload is a cancellation's.
pub(crate) fn is_cancel_payload(p: &(dyn Any + Send)) -> bool {
    p.is::<Cancelled>()
}

/// Asks the task `t` to stop: sets its flag, then wakes it from whatever it
/// waits on (a running task gets a token its next park consumes). Only the
/// first request wakes it. Returns whether this was the first request.
pub(crate) fn request(t: &TaskRef) -> bool {
    // Release: the flag is written before the unpark below, whose Release
    // the woken task's park Acquires (module docs, "A wake-up that races").
    if t.cancel.swap(true, Ordering::AcqRel) {
        return false;
    }
    if let Some(r) = task::unpark(t) {
        context::schedule(r);
    }
    true
}

impl Scheduler {
    /// Cancels every task of the scheduler, waits for them to unwind, then
    /// shuts it down as [`shutdown`](Self::shutdown) does.
    ///
    /// Each task is cancelled as by [`JoinHandle::cancel`]: one parked in a
    /// cancellable wait (a `TcpListener::accept`, a channel `recv`, a lock,
    /// a sleep) unwinds at once, one that runs unwinds at its next such
    /// wait, and one that has not started never runs. Tasks spawned while
    /// this runs are cancelled too (the scheduler is cancelled again until
    /// no task is left). A task that never reaches a cancellable wait (a
    /// loop that never waits nor checks [`is_cancelled`], a hooked call or
    /// an [`unblock`](crate::unblock) call that does not return) keeps this
    /// waiting, as `shutdown` would; see
    /// [`shutdown_now_timeout`](Self::shutdown_now_timeout) for a bound.
    ///
    /// ```
    /// let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
    /// let listener = gofer::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// sched.spawn(move || loop {
    ///     let _ = listener.accept(); // waits for ever
    /// });
    /// sched.shutdown_now(); // the accept unwinds
    /// assert_eq!(sched.stats().alive, 0);
    /// ```
    ///
    /// # Panics
    /// When called from a task of this same scheduler, or from a call such
    /// a task made through [`unblock`](crate::unblock): it would wait for
    /// itself. It panics *before* it does anything: no task is cancelled
    /// (the caller neither), and the scheduler keeps running and admitting
    /// spawns. To stop the scheduler from one of its own tasks, hand the
    /// call to a thread, which cancels the asking task along with the
    /// others:
    ///
    /// ```
    /// let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let s = sched.clone();
    /// sched.spawn(move || {
    ///     // ... a task decides that the whole scheduler must stop.
    ///     let s = s.clone();
    ///     tx.send(std::thread::spawn(move || s.shutdown_now())).unwrap();
    ///     gofer::sleep(std::time::Duration::from_secs(3600)); // unwinds
    /// });
    /// rx.recv().unwrap().join().unwrap();
    /// assert_eq!(sched.stats().threads, 0);
    /// ```
    ///
    /// [`JoinHandle::cancel`]: crate::JoinHandle::cancel
    #[track_caller]
    pub fn shutdown_now(&self) {
        if let Err(e) = self.cancel_and_shut_down(None) {
            panic!("gofer: {e}");
        }
    }

    /// Like [`shutdown_now`](Self::shutdown_now), but gives up after
    /// `timeout`, saying how many tasks are still alive, as
    /// [`shutdown_timeout`](Self::shutdown_timeout) does.
    ///
    /// What it did stays done: the tasks alive were asked to stop and go on
    /// unwinding, and spawns from outside stay refused. Call it (or
    /// `shutdown`) again to go on waiting; a new call cancels again, so
    /// tasks spawned meanwhile are cancelled too. A `timeout` too long to
    /// be represented as a deadline (`Duration::MAX`) means no deadline.
    ///
    /// Errors: [`ShutdownError::TimedOut`]; [`ShutdownError::FromOwnTask`]
    /// when called from a task of this same scheduler or from a call such a
    /// task made through [`unblock`](crate::unblock), in which case nothing
    /// was cancelled.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
    /// let (tx, rx) = gofer::chan::bounded::<()>(0);
    /// sched.spawn(move || {
    ///     let _tx = tx;
    ///     gofer::sleep(Duration::from_secs(3600)); // unwinds
    /// });
    /// assert_eq!(sched.shutdown_now_timeout(Duration::from_secs(60)), Ok(()));
    /// assert!(rx.recv().is_err()); // the task's sender went with its unwind
    /// ```
    pub fn shutdown_now_timeout(&self, timeout: Duration) -> Result<(), ShutdownError> {
        self.cancel_and_shut_down(Some(timeout))
    }

    /// Cancels every task and shuts down, again and again with short,
    /// growing waits, until no task is left or `timeout` ran out.
    fn cancel_and_shut_down(&self, timeout: Option<Duration>) -> Result<(), ShutdownError> {
        let shared = self.shared();
        // Before anything is cancelled: a refused call has no effect.
        shared.refuse_own_caller()?;
        let start = Instant::now();
        // A timeout past what an Instant can hold is no deadline at all.
        let deadline = timeout.and_then(|t| start.checked_add(t));
        let mut pause = Duration::from_millis(1);
        loop {
            // Taken out of the registry first, cancelled outside its locks.
            let mut all: Vec<TaskRef> = Vec::new();
            shared.live.for_each(&mut |t| all.push(t));
            for t in &all {
                request(t);
            }
            drop(all);
            let wait = match deadline {
                None => pause,
                Some(d) => pause.min(d.saturating_duration_since(Instant::now())),
            };
            match shared.shutdown(Some(wait)) {
                Ok(()) => return Ok(()),
                Err(ShutdownError::TimedOut { alive, .. }) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(ShutdownError::TimedOut {
                            waited: start.elapsed(),
                            alive,
                        });
                    }
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
    }
}
