//! Parking: the one blocking primitive everything else is built on.
//!
//! [`park`] suspends the current task (or, outside a task, the current
//! thread) until a matching [`Task::unpark`]. The semantics are those of
//! [`std::thread::park`]:
//!
//! - an `unpark` that arrives before the `park` is not lost: it leaves a
//!   token that makes the next `park` return at once;
//! - tokens do not accumulate: many `unpark`s before one `park` release it
//!   once;
//! - `park` may return spuriously, so callers re-check their condition in a
//!   loop.
//!
//! The task-side state machine and its races are documented in
//! `runtime/task/park_state.rs` and `runtime/task/header.rs`.

use std::fmt;
use std::thread::Thread;
use std::time::{Duration, Instant};

use crate::coroutine::switch::Suspend;
use crate::runtime::context;
use crate::runtime::processer::direct::switch_out;
use crate::runtime::task::wait::WaitOn;
use crate::runtime::task::{self, TaskHeader, TaskId, TaskRef};
use crate::runtime::time::timer;

/// A handle to a task or thread that can be woken with [`unpark`](Task::unpark).
///
/// Obtained from [`current`]. Cloning is cheap; the handle may be sent to any
/// thread. Inside a coroutine it names the coroutine (which may migrate
/// between threads); outside one it names the calling thread.
#[derive(Clone)]
pub struct Task {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Coroutine(TaskRef),
    Thread(Thread),
}

impl Task {
    /// Wakes the task or thread, or makes its next [`park`] return at once.
    pub fn unpark(&self) {
        match &self.inner {
            Inner::Coroutine(h) => unpark_header(h),
            Inner::Thread(t) => t.unpark(),
        }
    }

    /// [`unpark`](Self::unpark), but a task woken from its own Processer
    /// goes to the back of the runnable queue rather than the next-task
    /// slot.
    pub(crate) fn unpark_queued(&self) {
        match &self.inner {
            Inner::Coroutine(h) => {
                if let Some(r) = task::unpark(h) {
                    context::schedule_queued(r);
                }
            }
            Inner::Thread(t) => t.unpark(),
        }
    }

    /// The coroutine's id, or `None` for a thread handle.
    pub fn id(&self) -> Option<TaskId> {
        match &self.inner {
            Inner::Coroutine(h) => Some(h.id),
            Inner::Thread(_) => None,
        }
    }

    /// The coroutine's name, or the thread's name.
    pub fn name(&self) -> Option<&str> {
        match &self.inner {
            Inner::Coroutine(h) => h.name.as_deref(),
            Inner::Thread(t) => t.name(),
        }
    }

    /// Whether this handle names a coroutine (rather than a thread).
    pub fn is_coroutine(&self) -> bool {
        matches!(self.inner, Inner::Coroutine(_))
    }

    /// Whether two handles name the same task or thread.
    pub fn ptr_eq(&self, other: &Task) -> bool {
        match (&self.inner, &other.inner) {
            (Inner::Coroutine(a), Inner::Coroutine(b)) => TaskRef::ptr_eq(a, b),
            (Inner::Thread(a), Inner::Thread(b)) => a.id() == b.id(),
            _ => false,
        }
    }
}

impl fmt::Debug for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Coroutine(h) => f
                .debug_struct("Task")
                .field("id", &h.id)
                .field("name", &h.name)
                .finish(),
            Inner::Thread(t) => f.debug_struct("Task").field("thread", &t.id()).finish(),
        }
    }
}

/// A handle to the current task, or to the current thread outside a task.
pub fn current() -> Task {
    match context::current_task() {
        Some(h) => Task {
            inner: Inner::Coroutine(h),
        },
        None => Task {
            inner: Inner::Thread(std::thread::current()),
        },
    }
}

/// Blocks the current task (or thread) until it is unparked.
///
/// May return spuriously; see the module docs.
///
/// In a cancelled task ([`JoinHandle::cancel`](crate::JoinHandle::cancel))
/// it unwinds instead of parking, and a task parked here when it is
/// cancelled returns (a spurious wake-up) to unwind at its next call. State
/// that points at the task's stack (a waiter node of the caller's own)
/// must be withdrawn by a destructor, as for any panic.
pub fn park() {
    crate::runtime::task::cancel::checkpoint();
    park_on(WaitOn::Park);
}

/// [`park`], naming what the task waits for (task dumps).
pub(crate) fn park_on(on: WaitOn) {
    match context::current_task_ptr() {
        Some(h) => {
            // SAFETY: the pointer is the running task's header, kept alive by
            // the Processer's Runnable for as long as the task runs.
            let h = unsafe { &*h };
            if task::take_token(h) {
                return;
            }
            // SAFETY: `h` is the running task's header.
            unsafe { task::suspend_parked(h, on, None) };
            // Resumed by an unparker (which set EMPTY) or by the Processer
            // after it consumed a token that raced the switch-out.
        }
        None => std::thread::park(),
    }
}

/// Like [`park`], but returns after `timeout` at the latest.
///
/// Inside a task the timeout is served by the scheduler's timer (the thread
/// is free meanwhile). May return spuriously. Observes cancellation as
/// [`park`] does.
pub fn park_timeout(timeout: Duration) {
    crate::runtime::task::cancel::checkpoint();
    match Instant::now().checked_add(timeout) {
        Some(deadline) => park_deadline(deadline),
        None => park(),
    }
}

/// Parks until unparked or until `deadline`. May return spuriously.
pub(crate) fn park_deadline(deadline: Instant) {
    park_deadline_on(deadline, WaitOn::Park);
}

/// [`park_deadline`], naming what the task waits for (task dumps).
pub(crate) fn park_deadline_on(deadline: Instant, on: WaitOn) {
    match context::current_task() {
        Some(h) => timer::park_until(&h, Some(deadline), on),
        None => {
            let now = Instant::now();
            if deadline > now {
                std::thread::park_timeout(deadline - now);
            }
        }
    }
}

/// Wakes the task `h` (see [`Task::unpark`]): when this moves it out of
/// `PARKED`, it is scheduled, on this thread's Processer if that is one of
/// its scheduler's (`context::schedule`).
pub(crate) fn unpark_header(h: &TaskRef) {
    if let Some(r) = task::unpark(h) {
        context::schedule(r);
    }
}

/// Parks the running task `h` until it is unparked; if a wake-up is
/// already pending (it came while the task ran), yields instead: the task
/// goes to the back of its queue rather than running on at once. For a
/// poll loop: a future that wakes itself while polled does not keep the
/// tasks queued behind it from running.
pub(crate) fn park_or_yield(h: &TaskHeader) {
    if task::take_token(h) {
        switch_out(Suspend::Yield);
    } else {
        // SAFETY: `h` is the running task (the caller's poll loop runs on it).
        unsafe { task::suspend_parked(h, WaitOn::Future, None) };
    }
}

/// Lets other tasks run: the current task goes to the back of its
/// Processer's queue. Outside a task, yields the thread.
///
/// A cancelled task unwinds from it once it runs again
/// ([`JoinHandle::cancel`](crate::JoinHandle::cancel)): a loop that only
/// yields is cancellable.
pub fn yield_now() {
    if let Some(h) = context::current_task_ptr() {
        switch_out(Suspend::Yield);
        // SAFETY: the running task's header is alive while it runs, and a
        // task keeps its header wherever it resumes.
        crate::runtime::task::cancel::checkpoint_in(unsafe { &*h });
    } else {
        std::thread::yield_now();
    }
}

/// Whether the caller runs inside a gofer task.
pub fn is_coroutine() -> bool {
    context::current_task_ptr().is_some()
}

/// The current task's id, or `None` outside a task.
pub fn current_id() -> Option<TaskId> {
    // SAFETY: the running task's header is alive while it runs (see park).
    context::current_task_ptr().map(|h| unsafe { (*h).id })
}

/// The current task's name, or `None` outside a task or for an unnamed one.
pub fn current_name() -> Option<String> {
    // SAFETY: the running task's header is alive while it runs (see park).
    context::current_task_ptr().and_then(|h| unsafe { (*h).name.as_deref().map(String::from) })
}
