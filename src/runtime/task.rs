//! The task: one coroutine's header, its park state, and the token that
//! carries the right to run it.
//!
//! # Ownership
//!
//! A task lives in an `Arc<TaskHeader>`. Many parties may hold a clone (the
//! [`Task`](crate::Task) handles used to unpark it, the thread-local "current
//! task"), but exactly one party at a time holds the **execution right**: the
//! right to resume its coroutine and to touch its [`RunState`] (context, stack,
//! entry closure). That right is the [`Runnable`] token. It is not `Clone`,
//! and it is created in exactly two places:
//!
//! 1. at spawn, for the new task;
//! 2. by the one unparker that wins the `PARKED -> EMPTY` transition (see "Parking" below),
//!    which re-materialises the reference the parked state kept.
//!
//! Queues carry `Runnable`s; a Processer that pops one owns the right until it
//! pushes it back, parks it, or frees it. Because the token is unique, a steal
//! racing a resume is impossible by construction: whoever holds the token is
//! the only one that can resume, and a thief can only take tokens that sit in
//! a queue.
//!
//! # Parking
//!
//! The park state machine lives in [`ParkState`] (`park_state.rs`, where
//! its transitions and races are written out and model-checked). This file
//! adds ownership to it: when the Processer parks a task, the task's
//! `Runnable` reference is leaked into the `PARKED` state, and the one
//! unparker that wins `PARKED -> EMPTY` takes it back as a new `Runnable`.
//! A parked task is therefore never freed, and never scheduled twice.

use std::any::Any;
use std::cell::UnsafeCell;
use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use context::Context;

use super::next_slot::Token;
use super::park_state::{ParkOutcome, ParkState};
use super::shared::Shared;
use crate::coroutine::stack::StackMem;
use crate::coroutine::switch::Entry;
use crate::error::JoinError;

/// A task's identifier, unique within the process.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(u64);

impl TaskId {
    pub(crate) fn next() -> TaskId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        TaskId(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The id as a number.
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskId({})", self.0)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A task as reports name it: `task 17 'reader'`, or `task 17`.
pub(crate) struct TaskLabel<'a>(pub(crate) TaskId, pub(crate) Option<&'a str>);

impl fmt::Display for TaskLabel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task {}", self.0)?;
        if let Some(name) = self.1 {
            write!(f, " '{name}'")?;
        }
        Ok(())
    }
}

/// What runs at the root of a task's coroutine: the user's closure and the
/// slot its result goes to (`task/join.rs`).
pub(crate) trait TaskEntry: Entry {
    /// The task can never run (no stack could be had): publish the error.
    fn fail(self: Arc<Self>, e: JoinError);
}

/// The values of one task, keyed by the address of their `LocalKey`.
///
/// Values are kept as raw pointers from `Box::into_raw`, so that growing the
/// vector never moves (and so re-asserts unique ownership of) a `Box` while
/// a `&T` handed to `with` points into it.
#[derive(Default)]
pub(crate) struct LocalMap {
    pub(crate) values: Vec<(usize, *mut dyn Any)>,
}

impl LocalMap {
    pub(crate) fn get(&self, key: usize) -> Option<*const dyn Any> {
        self.values
            .iter()
            .find(|(k, _)| *k == key)
            .map(|&(_, v)| v as *const dyn Any)
    }
}

impl Drop for LocalMap {
    fn drop(&mut self) {
        // Values still here when the header is dropped would be dropped on
        // whichever thread drops it, which need not be the task's: leak them
        // instead (clear_current already dropped everything it could on the
        // task itself).
        self.values.clear();
    }
}

/// No home Processer yet.
pub(crate) const NO_HOME: usize = usize::MAX;

/// The part of a task only the holder of its [`Runnable`] may touch.
pub(crate) struct RunState {
    /// The saved coroutine context; `None` before the first run and after
    /// the task finished.
    pub(crate) ctx: Option<Context>,
    /// The stack the coroutine runs on; allocated at first run.
    pub(crate) stack: Option<StackMem>,
    /// The closure to run; taken by the coroutine's entry function.
    pub(crate) entry: Option<Arc<dyn TaskEntry>>,
}

/// The shared header of one task.
pub(crate) struct TaskHeader {
    pub(crate) id: TaskId,
    pub(crate) name: Option<Box<str>>,
    /// Requested usable stack size in bytes (page-rounded).
    pub(crate) stack_size: usize,
    /// Index of the Processer this task is pinned to, if any.
    pub(crate) pin: Option<usize>,
    /// The scheduler the task belongs to.
    pub(crate) shared: Arc<Shared>,
    /// The park state machine (see `park_state.rs`).
    pub(crate) park: ParkState,
    /// Index of the Processer that last ran the task; a hint for routing
    /// wake-ups from other threads. Relaxed: any value is a valid hint.
    pub(crate) home: AtomicUsize,
    /// Guarded by the execution right (the [`Runnable`] token).
    run: UnsafeCell<RunState>,
    /// Coroutine-local values; touched only by the task itself while it runs.
    pub(crate) locals: UnsafeCell<LocalMap>,
}

// SAFETY: the non-Sync fields are `run` and `locals` (UnsafeCell). `run` is
// accessed only by the holder of the unique Runnable token, and the token is
// handed between threads through synchronising queues or the Release/Acquire
// park transitions, so no two threads touch it concurrently. `locals` is only
// touched by the running task itself, which is also serialised by the token.
unsafe impl Sync for TaskHeader {}
// SAFETY: `run` holds a `Send` entry and a Context, a pointer into the
// task's own stack, which travels with the task. `locals` may hold non-Send
// values, but they are created, used and dropped only by the task itself
// (clear_current, on the task's stack); any left over are leaked by
// LocalMap's Drop rather than dropped on another thread. Like everything
// else on the task's stack, they follow the task across threads: that is
// the thread-migration caveat documented at the crate root.
unsafe impl Send for TaskHeader {}

impl TaskHeader {
    pub(crate) fn new(
        shared: Arc<Shared>,
        name: Option<Box<str>>,
        stack_size: usize,
        pin: Option<usize>,
        entry: Arc<dyn TaskEntry>,
    ) -> TaskHeader {
        TaskHeader {
            id: TaskId::next(),
            name,
            stack_size,
            pin,
            shared,
            park: ParkState::new(),
            home: AtomicUsize::new(NO_HOME),
            run: UnsafeCell::new(RunState {
                ctx: None,
                stack: None,
                entry: Some(entry),
            }),
            locals: UnsafeCell::new(LocalMap::default()),
        }
    }

    /// How reports name the task: `task 17 'reader'`.
    pub(crate) fn label(&self) -> TaskLabel<'_> {
        TaskLabel(self.id, self.name.as_deref())
    }

    /// The guard page range of the task's stack, if it has one. Only called
    /// from the signal handler on the thread that runs the task.
    pub(crate) fn guard_range(&self) -> Option<(usize, usize)> {
        // SAFETY: called on the thread that holds the execution right (the
        // task is running there and faulted); a read-only peek.
        unsafe { (*self.run.get()).stack.as_ref().map(StackMem::guard) }
    }
}

/// The unique right to run a task (see the module docs). Not `Clone`.
pub(crate) struct Runnable(Arc<TaskHeader>);

// SAFETY: `Arc::into_raw` never returns null, and `from_raw` takes back
// the one strong reference it gave out.
unsafe impl Token for Runnable {
    type Target = TaskHeader;

    fn into_raw(self) -> *mut TaskHeader {
        Arc::into_raw(self.0).cast_mut()
    }

    unsafe fn from_raw(p: *mut TaskHeader) -> Runnable {
        // SAFETY: per the trait's contract, `p` owns one strong reference.
        Runnable(unsafe { Arc::from_raw(p) })
    }
}

impl Runnable {
    /// Wraps a freshly spawned task.
    pub(crate) fn new(header: TaskHeader) -> (Runnable, Arc<TaskHeader>) {
        let arc = Arc::new(header);
        (Runnable(arc.clone()), arc)
    }

    pub(crate) fn header(&self) -> &Arc<TaskHeader> {
        &self.0
    }

    /// The task's run state.
    ///
    /// Holding `&mut self` on the token is exactly the execution right, so
    /// the returned reference is unique.
    pub(crate) fn run(&mut self) -> &mut RunState {
        // SAFETY: the token is unique (module docs), and `&mut self` proves
        // this caller holds it; no other reference to RunState exists.
        unsafe { &mut *self.0.run.get() }
    }

    /// Called by the Processer after the task switched out to park and its
    /// context was stored. If the task is now parked, the token's reference
    /// is leaked into the parked state and `None` is returned; if an unpark
    /// raced the switch-out, the task is given back to be requeued.
    pub(crate) fn park(self) -> Option<Runnable> {
        match self.0.park.try_park() {
            ParkOutcome::Parked => {
                // The parked state now owns this reference (see `unpark`).
                let _ = ManuallyDrop::new(self);
                None
            }
            ParkOutcome::Requeue => Some(self),
        }
    }
}

/// Wakes a task. Returns the execution right when this call moved the task
/// out of `PARKED`.
pub(crate) fn unpark(header: &Arc<TaskHeader>) -> Option<Runnable> {
    if header.park.unpark() {
        // SAFETY: Runnable::park leaked exactly one strong reference when the
        // task entered PARKED, and only one unpark can win PARKED -> EMPTY;
        // that winner (us) takes the reference back.
        let arc = unsafe { Arc::from_raw(Arc::as_ptr(header)) };
        Some(Runnable(arc))
    } else {
        None
    }
}

/// [`unpark`] through a raw header pointer (a waiter list that holds no
/// reference count).
///
/// # Safety
/// `header` points at a live task header (an `Arc<TaskHeader>` allocation).
pub(crate) unsafe fn unpark_raw(header: *const TaskHeader) -> Option<Runnable> {
    // SAFETY: live per the contract.
    let h = unsafe { &*header };
    if h.park.unpark() {
        // SAFETY: as in `unpark`: we won PARKED -> EMPTY and take back the
        // reference Runnable::park leaked.
        Some(Runnable(unsafe { Arc::from_raw(header) }))
    } else {
        None
    }
}

/// Consumes a pending token from inside the task. Returns whether there
/// was one.
pub(crate) fn take_token(header: &TaskHeader) -> bool {
    header.park.take_token()
}
