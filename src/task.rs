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
//! 2. by the one unparker that wins the `PARKED -> EMPTY` transition below,
//!    which re-materialises the reference the parked state kept.
//!
//! Queues carry `Runnable`s; a Processer that pops one owns the right until it
//! pushes it back, parks it, or frees it. Because the token is unique, a steal
//! racing a resume is impossible by construction: whoever holds the token is
//! the only one that can resume, and a thief can only take tokens that sit in
//! a queue.
//!
//! # The park state machine (`TaskHeader::park`)
//!
//! One atomic byte, three states:
//!
//! | state      | meaning                                                        |
//! |------------|----------------------------------------------------------------|
//! | `EMPTY`    | running, queued, or switching out; no wake-up pending          |
//! | `NOTIFIED` | an `unpark` arrived that no `park` has consumed yet            |
//! | `PARKED`   | suspended; its context is saved; one `Arc` reference is leaked |
//!
//! Transitions, with the side that performs each:
//!
//! ```text
//!  task, in park():          NOTIFIED -> EMPTY     consume the token, return at once
//!  Processer, after switch:  EMPTY    -> PARKED    (Release) the context is saved; leak one ref
//!  Processer, after switch:  NOTIFIED -> EMPTY     an unpark came while switching out: requeue
//!  unpark():                 EMPTY    -> NOTIFIED  task running or still switching out
//!  unpark():                 PARKED   -> EMPTY     (Acquire) the winner schedules the task
//! ```
//!
//! The task never sets `PARKED` itself. If it did, an unparker on another
//! thread could see `PARKED` and resume the coroutine before its registers had
//! been saved by the switch; the Processer sets `PARKED` only after the
//! switch has returned and the saved context is stored in the header. Both
//! sides of that race:
//!
//! ```text
//!  task T on Processer P                  unparker U on another thread
//!  1. park(): state is EMPTY              1. unpark(): load EMPTY
//!  2. switch out to P                     2. CAS EMPTY -> NOTIFIED succeeds
//!  3. P: CAS EMPTY -> PARKED fails        3. done: the task is not ours to run
//!  4. P: store EMPTY, requeue T
//!  (T's park() returns: the token was consumed)
//! ```
//!
//! ```text
//!  task T on Processer P                  unparker U
//!  1. park(): switch out to P
//!  2. P: stores T's context (plain write)
//!  3. P: CAS EMPTY -> PARKED (Release)    1. unpark(): CAS PARKED -> EMPTY (Acquire)
//!                                         2. U now holds the execution right and sees
//!                                            the context written in step 2
//! ```
//!
//! Exactly one unparker can win `PARKED -> EMPTY`, so a task is never
//! scheduled twice. A late `unpark` (say, from a timer that lost a race to
//! another wake-up) leaves `NOTIFIED` behind, which makes the task's next
//! `park` return at once: a spurious wake-up, which the API allows. Callers
//! of `park` therefore always re-check their condition in a loop.

use std::cell::UnsafeCell;
use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use context::Context;

use crate::join::TaskEntry;
use crate::locals::LocalMap;
use crate::scheduler::Shared;
use crate::stack::StackMem;

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

/// Park states; see the module docs for the transitions.
pub(crate) const EMPTY: u8 = 0;
pub(crate) const NOTIFIED: u8 = 1;
pub(crate) const PARKED: u8 = 2;

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
    /// The park state machine (see module docs).
    pub(crate) park: AtomicU8,
    /// Index of the Processer that last ran the task; a hint for routing
    /// wake-ups from other threads. Relaxed: any value is a valid hint.
    pub(crate) home: AtomicUsize,
    /// Guarded by the execution right (the [`Runnable`] token).
    run: UnsafeCell<RunState>,
    /// Coroutine-local values; touched only by the task itself while it runs.
    pub(crate) locals: UnsafeCell<LocalMap>,
}

// SAFETY: the only non-Sync field is `run`/`locals` (UnsafeCell). `run` is
// accessed only by the holder of the unique Runnable token, and the token is
// handed between threads through synchronising queues or the Release/Acquire
// park transitions, so no two threads touch it concurrently. `locals` is only
// touched by the running task itself, which is also serialised by the token.
unsafe impl Sync for TaskHeader {}
// SAFETY: every field is Send (the entry closure is `Send`, the Context is a
// pointer into the task's own stack, which travels with the task).
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
            park: AtomicU8::new(EMPTY),
            home: AtomicUsize::new(NO_HOME),
            run: UnsafeCell::new(RunState {
                ctx: None,
                stack: None,
                entry: Some(entry),
            }),
            locals: UnsafeCell::new(LocalMap::default()),
        }
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

    /// Called by the Processer after the task switched out to park: tries
    /// `EMPTY -> PARKED`. On success the token is consumed (its reference is
    /// leaked into the parked state) and `None` is returned; if an unpark
    /// arrived meanwhile, the token is consumed and the task given back to be
    /// requeued.
    pub(crate) fn park(self) -> Option<Runnable> {
        let header = &self.0;
        // Release: publishes the context the Processer just stored; pairs with
        // the Acquire CAS in `unpark`.
        match header
            .park
            .compare_exchange(EMPTY, PARKED, Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => {
                // The parked state now owns this reference.
                let _ = ManuallyDrop::new(self);
                None
            }
            Err(NOTIFIED) => {
                // Consume the token: park() returns to the task.
                header.park.store(EMPTY, Ordering::Relaxed);
                Some(self)
            }
            Err(s) => unreachable!("park state {s} while the task was switching out"),
        }
    }
}

/// Wakes a task: the unpark side of the state machine. Returns the execution
/// right when this call moved the task out of `PARKED`.
pub(crate) fn unpark(header: &Arc<TaskHeader>) -> Option<Runnable> {
    let mut s = header.park.load(Ordering::Relaxed);
    loop {
        match s {
            NOTIFIED => return None,
            EMPTY => match header.park.compare_exchange_weak(
                EMPTY,
                NOTIFIED,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return None,
                Err(now) => s = now,
            },
            _ => match header.park.compare_exchange_weak(
                PARKED,
                EMPTY,
                // Acquire: pairs with the Release in Runnable::park, so the
                // saved context is visible to whoever resumes the task.
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    // SAFETY: the parked state leaked exactly one strong
                    // reference (Runnable::park); winning PARKED -> EMPTY
                    // transfers it to us. Only one CAS can win.
                    let arc = unsafe { Arc::from_raw(Arc::as_ptr(header)) };
                    return Some(Runnable(arc));
                }
                Err(now) => s = now,
            },
        }
    }
}

/// Consumes a pending token from inside the task: `NOTIFIED -> EMPTY`.
/// Returns whether there was one.
pub(crate) fn take_token(header: &TaskHeader) -> bool {
    // Acquire: whatever the unparker wrote before unpark() is visible after
    // park() returns (same guarantee as std's thread parker).
    header
        .park
        .compare_exchange(NOTIFIED, EMPTY, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn park_state_values_are_distinct() {
        assert_ne!(EMPTY, NOTIFIED);
        assert_ne!(NOTIFIED, PARKED);
        assert_ne!(EMPTY, PARKED);
    }
}
