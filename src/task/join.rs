//! [`JoinHandle`]: waiting for a task's result, and the type-erased entry
//! that runs the user's closure at the root of the coroutine.
//!
//! # The join state machine (`JoinInner::state`)
//!
//! Two bits in one atomic byte: `DONE` (the result is stored) and `WAITING`
//! (a joiner stored its wake-up handle, a [`Waiter`]). Each side writes its
//! own slot before setting its bit, and reads the other's slot only after
//! seeing the other's bit:
//!
//! ```text
//!  joiner                                  task (completer)
//!  1. write waiter slot                    1. write result slot
//!  2. fetch_or(WAITING) (AcqRel)           2. fetch_or(DONE) (AcqRel)
//!  3. if DONE was set: take result         3. if WAITING was set: take the
//!     else park until DONE is seen            waiter and wake it
//! ```
//!
//! Whichever `fetch_or` comes second sees the other bit, so either the joiner
//! finds the result at once or the completer wakes it: no lost wake-up.
//!
//! # Replacing the waiter (the handle as a future)
//!
//! `join` registers a waiter once. A [`JoinHandle`] polled as a future
//! registers the `Waker` of each poll, and the waker may differ from one
//! poll to the next (the future moved to another task), so a registered
//! waiter must be replaceable without losing a wake-up. The rule: **the
//! joiner owns the waiter slot while `WAITING` is clear; the completer owns
//! it once its `fetch_or(DONE)` has seen `WAITING`**. To replace its waiter
//! the joiner first takes the slot back:
//!
//! ```text
//!  joiner: register(w)                      task (completer)
//!  1. state has DONE: take the result       1. write result slot
//!  2. state has WAITING: CAS WAITING -> 0   2. prev = fetch_or(DONE) (AcqRel)
//!     (Acquire); fails only if DONE is      3. if prev had WAITING: take the
//!     set: take the result (the completer      waiter, wake it
//!     owns the slot and wakes the old
//!     waiter; a spurious wake-up)
//!  3. write the new waiter (the old one
//!     is dropped: the slot is ours again)
//!  4. prev = fetch_or(WAITING) (AcqRel);
//!     prev had DONE: take the result
//!     else Pending; the completer will
//!     wake the new waiter
//! ```
//!
//! The CAS in step 2 succeeds only while the state is exactly `WAITING`,
//! that is before the completer's `fetch_or(DONE)`, which then finds
//! `WAITING` clear and leaves the slot alone; if it fails, the completer
//! has seen `WAITING` and owns the slot, and the joiner never touches it
//! again. So the slot has one owner at every moment, and the completer
//! wakes the waiter registered last before its `fetch_or`, or finds none
//! and the joiner sees `DONE` at step 4. `join` is this protocol with one
//! registration (step 2 is skipped when `WAITING` is clear, as it is
//! unless the handle was polled before): the same two atomic operations as
//! before futures. Dropping a polled handle takes its waiter back the same
//! way, so a detached task does not keep its last poller's waker alive.

use std::cell::UnsafeCell;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use super::park::Task;
use crate::coroutine::switch::Entry;
use crate::error::{contain, JoinError};
use crate::runtime::context;
use crate::runtime::task::{TaskEntry, TaskId, TaskLabel};

const DONE: u8 = 1;
const WAITING: u8 = 2;

/// Who waits for a task's result.
enum Waiter {
    /// A task or thread in `join`: unparked.
    Park(Task),
    /// A future's poll: woken.
    Wake(Waker),
}

impl Waiter {
    fn wake(self) {
        match self {
            // To the back of the queue, not the next-task slot: a finishing
            // task's joiner often joins its next sibling at once, and would
            // only park again ahead of the siblings still queued.
            Waiter::Park(t) => t.unpark_queued(),
            Waiter::Wake(w) => w.wake(),
        }
    }
}

pub(crate) struct JoinInner<T> {
    state: AtomicU8,
    /// Written by the completer before it sets DONE.
    result: UnsafeCell<Option<Result<T, JoinError>>>,
    /// Owned by the joiner while WAITING is clear, by the completer once it
    /// saw WAITING (see "Replacing the waiter" in the module docs).
    waiter: UnsafeCell<Option<Waiter>>,
}

// SAFETY: `result` and `waiter` are each written by one side before it sets
// its bit (Release) and read by the other only after it observed that bit
// (Acquire); see the module docs. T crosses threads, hence `T: Send`.
unsafe impl<T: Send> Sync for JoinInner<T> {}
// SAFETY: as above; the cells hold a T (Send) and a Task handle (Send).
unsafe impl<T: Send> Send for JoinInner<T> {}

impl<T> JoinInner<T> {
    fn new() -> JoinInner<T> {
        JoinInner {
            state: AtomicU8::new(0),
            result: UnsafeCell::new(None),
            waiter: UnsafeCell::new(None),
        }
    }

    fn complete(&self, r: Result<T, JoinError>) {
        // SAFETY: only the completer writes `result`, once, before DONE.
        unsafe { *self.result.get() = Some(r) };
        // AcqRel: Release publishes the result to the joiner's Acquire
        // loads of DONE; Acquire pairs with the joiner's fetch_or(WAITING),
        // so its waiter is visible when WAITING is seen.
        let prev = self.state.fetch_or(DONE, Ordering::AcqRel);
        if prev & WAITING != 0 {
            // SAFETY: WAITING was set when DONE went in, so the slot is ours
            // now: the joiner finished writing it, and its CAS that would take
            // it back can no longer succeed (DONE is set).
            if let Some(w) = unsafe { (*self.waiter.get()).take() } {
                w.wake();
            }
        }
    }

    /// Registers `w` as the one to wake at completion, replacing an earlier
    /// waiter; returns true if the result is already there (then `w` may
    /// never be woken). Called by the one joiner only (`join` consumes the
    /// handle, `poll` has it pinned mutably). See "Replacing the waiter" in
    /// the module docs for the protocol, both sides.
    fn register(&self, w: Waiter) -> bool {
        // Acquire: pairs with the completer's fetch_or(DONE), so that a DONE
        // seen here comes with the result.
        let s = self.state.load(Ordering::Acquire);
        if s & DONE != 0 {
            return true;
        }
        if s & WAITING != 0 {
            // Take the slot back. Acquire on failure: DONE is set, and the
            // result must be visible (pairs with the completer's fetch_or).
            // Success needs no ordering: the slot was last written by us.
            if self
                .state
                .compare_exchange(WAITING, 0, Ordering::Relaxed, Ordering::Acquire)
                .is_err()
            {
                return true;
            }
        }
        // SAFETY: WAITING is clear, so the slot is the joiner's (we are the
        // one joiner), and the completer does not touch it.
        unsafe { *self.waiter.get() = Some(w) };
        // AcqRel: Release publishes the waiter to the completer's
        // fetch_or(DONE); Acquire pairs with it, for the result, if DONE was
        // set first.
        let prev = self.state.fetch_or(WAITING, Ordering::AcqRel);
        prev & DONE != 0
    }

    /// Takes the waiter back, if one is registered and the task has not
    /// finished (a polled handle is being dropped).
    fn unregister(&self) {
        if self.state.load(Ordering::Relaxed) == WAITING
            && self
                .state
                .compare_exchange(WAITING, 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            // SAFETY: we cleared WAITING before the completer set DONE, so
            // the slot is ours again (see `register`).
            drop(unsafe { (*self.waiter.get()).take() });
        }
    }

    /// Whether the result is stored.
    pub(crate) fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) & DONE != 0
    }

    /// Takes the result; only after DONE was observed with Acquire.
    fn take(&self) -> Result<T, JoinError> {
        // SAFETY: DONE was observed, so the completer wrote `result` and
        // will not touch it again; only the one joiner (`join` consumes the
        // handle, `poll` holds it mutably) takes it.
        unsafe { (*self.result.get()).take() }
            .expect("gofer: a JoinHandle was polled again after it returned its result")
    }
}

/// The join side of a [`Spawned`], seen without its closure type.
pub(crate) trait JoinSlot<T>: Send + Sync {
    fn inner(&self) -> &JoinInner<T>;
}

/// A spawned closure and the place its result goes: one allocation shared
/// by the task (as `dyn TaskEntry`) and its handle (as `dyn JoinSlot<T>`).
struct Spawned<F, T> {
    join: JoinInner<T>,
    /// Taken once, by the coroutine that runs it (or by `fail`).
    f: UnsafeCell<Option<F>>,
}

// SAFETY: `f` is taken exactly once, by whoever holds the task's execution
// right (the coroutine in `run`, or the Processer in `fail`), never both;
// `join` is Sync for `T: Send` (see JoinInner). F moves across threads with
// the task, hence `F: Send`.
unsafe impl<F: Send, T: Send> Sync for Spawned<F, T> {}

impl<F, T> Spawned<F, T> {
    fn take_f(&self) -> Option<F> {
        // SAFETY: see the Sync impl: one taker, holding the execution right.
        unsafe { (*self.f.get()).take() }
    }
}

impl<F, T> JoinSlot<T> for Spawned<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    fn inner(&self) -> &JoinInner<T> {
        &self.join
    }
}

impl<F, T> Entry for Spawned<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    /// Runs the user's closure, catching any panic, and publishes the result
    /// (counting the task as completed in its scheduler first, so that a
    /// joiner that wakes up sees it counted).
    fn run(self: Arc<Self>) {
        let Some(task) = context::current_task_ptr() else {
            return;
        };
        // SAFETY: this runs at the root of the task's own coroutine, and the
        // Processer's Runnable keeps the header alive while the task runs.
        let task = unsafe { &*task };
        let Some(f) = self.take_f() else {
            return;
        };
        let r = catch_unwind(AssertUnwindSafe(f)).map_err(JoinError::panic);
        // Coroutine-local values die with the task, before the joiner wakes.
        if let Err(p) = catch_unwind(super::locals::clear_current) {
            if let Some(m) = crate::error::panic_message(p.as_ref()) {
                eprintln!("gofer: a coroutine-local destructor panicked: {m}");
            }
            std::mem::forget(p);
        }
        task.shared.completed.fetch_add(1, Ordering::Relaxed);
        self.join.complete(r);
        // If the handle is gone, this is the last reference and drops the
        // result (or the panic payload) here, at the task's root frame: a
        // panicking destructor must not unwind any further.
        let label = task.label();
        contain(format_args!("the result of {label}"), move || drop(self));
    }
}

impl<F, T> TaskEntry for Spawned<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    fn fail(self: Arc<Self>, e: JoinError) {
        drop(self.take_f());
        self.join.complete(Err(e));
    }
}

/// Pairs a closure with a fresh join slot, in one allocation.
pub(crate) fn entry<F, T>(f: F) -> (Arc<dyn TaskEntry>, Arc<dyn JoinSlot<T>>)
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let cell = Arc::new(Spawned {
        join: JoinInner::new(),
        f: UnsafeCell::new(Some(f)),
    });
    (cell.clone(), cell)
}

/// An owned permission to wait for a task's result.
///
/// Dropping the handle detaches the task: it keeps running and its result is
/// dropped when it finishes.
pub struct JoinHandle<T> {
    /// `None` only after `join` or `drop` took it.
    inner: Option<Arc<dyn JoinSlot<T>>>,
    id: TaskId,
    name: Option<Box<str>>,
    _not_ref_unwind_safe: PhantomData<UnsafeCell<()>>,
}

impl<T> JoinHandle<T> {
    pub(crate) fn new(inner: Arc<dyn JoinSlot<T>>, id: TaskId, name: Option<Box<str>>) -> Self {
        JoinHandle {
            inner: Some(inner),
            id,
            name,
            _not_ref_unwind_safe: PhantomData,
        }
    }

    /// Waits for the task and returns its value, or how it failed.
    ///
    /// Inside a task this parks the calling task (its thread runs other
    /// tasks meanwhile); outside one it blocks the calling thread.
    ///
    /// From async code, `.await` the handle instead (it is a [`Future`]).
    pub fn join(self) -> Result<T, JoinError> {
        let inner = self.slot();
        if inner.state.load(Ordering::Acquire) & DONE != 0 {
            return inner.take();
        }
        if !inner.register(Waiter::Park(super::park::current())) {
            // Park until DONE: park may wake spuriously, hence the loop.
            while inner.state.load(Ordering::Acquire) & DONE == 0 {
                super::park::park();
            }
        }
        inner.take()
    }

    /// Whether the task has finished (its result is ready for `join`).
    pub fn is_finished(&self) -> bool {
        self.slot().state.load(Ordering::Acquire) & DONE != 0
    }

    fn slot(&self) -> &JoinInner<T> {
        self.inner.as_ref().expect("present until drop").inner()
    }

    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// The task's name, if it was given one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
}

/// Awaiting a handle waits for the task, like [`join`](JoinHandle::join)
/// but without blocking: the poll registers the waker, and the task's
/// completion wakes it. Usable from any executor (tokio, `futures`,
/// [`block_on_future`](crate::block_on_future)).
///
/// ```
/// let sched = gofer::Scheduler::builder().min_threads(1).build()?;
/// let h = sched.spawn(|| 6 * 7);
/// let v = gofer::block_on_future(async move { h.await })?;
/// assert_eq!(v, 42);
/// sched.shutdown();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Panics
/// When polled again after it returned `Ready`.
impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.slot();
        if inner.register(Waiter::Wake(cx.waker().clone())) {
            Poll::Ready(inner.take())
        } else {
            Poll::Pending
        }
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        // The last reference drops the task's result (or panic payload) if
        // it was never joined: contain a panicking destructor, as the task's
        // side does when it drops last.
        if let Some(inner) = self.inner.take() {
            // A polled handle leaves its waker behind; take it back.
            inner.inner().unregister();
            let label = TaskLabel(self.id, self.name.as_deref());
            contain(format_args!("the result of {label}"), move || drop(inner));
        }
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("finished", &self.is_finished())
            .finish()
    }
}
