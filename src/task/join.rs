//! [`JoinHandle`]: waiting for a task's result, and the type-erased entry
//! that runs the user's closure at the root of the coroutine.
//!
//! # The join state machine (`JoinInner::state`)
//!
//! Two bits in one atomic byte: `DONE` (the result is stored) and `WAITING`
//! (a joiner stored its wake-up handle). Each side writes its own slot
//! before setting its bit, and reads the other's slot only after seeing the
//! other's bit:
//!
//! ```text
//!  joiner                                  task (completer)
//!  1. write waiter slot                    1. write result slot
//!  2. fetch_or(WAITING) (AcqRel)           2. fetch_or(DONE) (AcqRel)
//!  3. if DONE was set: take result         3. if WAITING was set: unpark waiter
//!     else park until DONE is seen
//! ```
//!
//! Whichever `fetch_or` comes second sees the other bit, so either the joiner
//! finds the result at once or the completer wakes it: no lost wake-up.

use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use super::park::Task;
use crate::coroutine::switch::Entry;
use crate::error::{contain, JoinError};
use crate::runtime::context;
use crate::runtime::task::{TaskEntry, TaskId, TaskLabel};

const DONE: u8 = 1;
const WAITING: u8 = 2;

pub(crate) struct JoinInner<T> {
    state: AtomicU8,
    /// Written by the completer before it sets DONE.
    result: UnsafeCell<Option<Result<T, JoinError>>>,
    /// Written by the joiner before it sets WAITING.
    waiter: UnsafeCell<Option<Task>>,
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
        let prev = self.state.fetch_or(DONE, Ordering::AcqRel);
        if prev & WAITING != 0 {
            // SAFETY: WAITING was set, so the joiner finished writing the
            // waiter slot and never touches it again.
            if let Some(w) = unsafe { (*self.waiter.get()).take() } {
                w.unpark();
            }
        }
    }

    /// Whether the result is stored.
    pub(crate) fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) & DONE != 0
    }

    /// Takes the result; only after DONE was observed with Acquire.
    fn take(&self) -> Result<T, JoinError> {
        // SAFETY: DONE was observed, so the completer wrote `result` and
        // will not touch it again; join consumes the handle, so this runs once.
        unsafe { (*self.result.get()).take() }.expect("gofer: join result taken twice")
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
    pub fn join(self) -> Result<T, JoinError> {
        let inner = self.slot();
        if inner.state.load(Ordering::Acquire) & DONE != 0 {
            return inner.take();
        }
        // SAFETY: only the joiner writes `waiter`, and only before WAITING is
        // set; join consumes the handle, so there is one joiner.
        unsafe { *inner.waiter.get() = Some(super::park::current()) };
        let prev = inner.state.fetch_or(WAITING, Ordering::AcqRel);
        if prev & DONE == 0 {
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

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        // The last reference drops the task's result (or panic payload) if
        // it was never joined: contain a panicking destructor, as the task's
        // side does when it drops last.
        if let Some(inner) = self.inner.take() {
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
