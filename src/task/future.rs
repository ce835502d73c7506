//! Futures inside gofer: [`block_on_future`], and the waker that unparks a
//! task.
//!
//! A future is polled with a [`Waker`]; when it returns `Pending` it has
//! arranged for that waker to be called once progress is possible. Here the
//! waker of a task is the task itself: waking it is [`Task::unpark`], and
//! between polls the task parks. So a task that waits for a future gives
//! its thread to other tasks, exactly as when it waits for a channel.
//!
//! ```text
//!  task in block_on_future                  whoever completes the future
//!  1. poll(fut, waker = this task)          (another task, a thread, a tokio
//!     Ready: return the value                worker, a timer)
//!     Pending: the future keeps the waker   1. make progress
//!  2. park (or yield, if already woken:     2. waker.wake(): unpark the task;
//!     see below)                               from a Processer of the task's
//!  3. back to 1                                scheduler it goes to that
//!                                              Processer's queue, no thread hop
//! ```
//!
//! No wake-up is lost: a wake that comes before the park leaves the park
//! token, and the park returns at once (`runtime/task/park.rs`). A wake that came
//! while the future was being polled (a future that wakes itself to yield,
//! like `tokio::task::yield_now`) makes the task *yield* instead of
//! re-polling at once, so that such a future cannot keep the tasks queued
//! behind it from running.
//!
//! Outside a task the waker unparks the calling thread, which parks between
//! polls.

use std::future::{Future, IntoFuture};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Wake, Waker};
use std::thread::Thread;

use crate::runtime::context;
use crate::runtime::task::park;
use crate::runtime::task::{self, TaskRef};

/// A task's waker: waking is unparking. No allocation: the waker's data is
/// a counted reference to the task's cell ([`TaskRef::into_raw`]).
fn task_waker(task: TaskRef) -> Waker {
    let raw = RawWaker::new(task.into_raw().cast(), &TASK_WAKER);
    // SAFETY: the vtable's functions keep the contract of RawWakerVTable:
    // the data is one counted reference, cloned, consumed and dropped as one.
    unsafe { Waker::from_raw(raw) }
}

static TASK_WAKER: RawWakerVTable =
    RawWakerVTable::new(waker_clone, waker_wake, waker_wake_by_ref, waker_drop);

/// # Safety
/// `p` is the data of a live task waker: one reference from `into_raw`.
unsafe fn waker_clone(p: *const ()) -> RawWaker {
    // SAFETY: the waker being cloned holds a reference, so the cell is alive.
    let task = unsafe { TaskRef::clone_from_ptr(p.cast()) };
    RawWaker::new(task.into_raw().cast(), &TASK_WAKER)
}

/// # Safety
/// As for `waker_clone`; the waker's reference is consumed.
unsafe fn waker_wake(p: *const ()) {
    // SAFETY: consumes the waker's reference (from `into_raw`).
    let task = unsafe { TaskRef::from_raw(p.cast()) };
    park::unpark_header(&task);
}

/// # Safety
/// As for `waker_clone`; the waker keeps its reference.
unsafe fn waker_wake_by_ref(p: *const ()) {
    // SAFETY: the waker holds a reference, so the header is alive, and `p`
    // came from `TaskRef::into_raw` (the whole cell's provenance).
    if let Some(r) = unsafe { task::unpark_raw(p.cast()) } {
        context::schedule(r);
    }
}

/// # Safety
/// As for `waker_clone`; the waker's reference is given back.
unsafe fn waker_drop(p: *const ()) {
    // SAFETY: gives back the waker's reference (from `into_raw`).
    drop(unsafe { TaskRef::from_raw(p.cast()) });
}

/// A thread's waker, outside tasks.
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a future to completion and returns its output.
///
/// Inside a task, the task parks while the future is pending and its
/// thread runs other tasks; the future's waker unparks it. Outside a task,
/// the calling thread blocks. Inside a fiber, the fiber's thread does
/// what it would do without the fiber (see [`fiber`](crate::fiber)).
///
/// ```
/// let v = gofer::block_on_future(async { 7 });
/// assert_eq!(v, 7);
/// ```
///
/// # Which futures work here
///
/// Any future that does not depend on a particular runtime: the channels
/// and locks of `tokio::sync`, `futures::channel`, `async-channel`,
/// `event-listener`, a gofer [`JoinHandle`](crate::JoinHandle), and
/// anything built from them. They only need a waker, and the one given here
/// works from any thread.
///
/// Futures that need their own *reactor* (a driver that turns OS events or
/// deadlines into wake-ups) do not get one here:
///
/// - **tokio's IO and timers** (`tokio::net`, `tokio::time::sleep`,
///   `tokio::fs`, `tokio::process`, `tokio::signal`): made or polled outside
///   a tokio runtime, they panic ("there is no reactor running, must be
///   called from the context of a Tokio 1.x runtime"); the panic comes out
///   of `block_on_future` (and so ends the task, whose join reports it).
///   Entering a runtime's context inside a task (`Handle::enter`) is no
///   cure: the guard belongs to the thread, not the task. A started task
///   stays on its Processer's thread, but while it is parked the other
///   tasks of that thread run inside the context, and two tasks' guards on
///   one thread are dropped out of order (tokio panics on that); a
///   migratable task (`migrate_started_tasks(true)`) may also resume on
///   another thread. Spawn such work on a tokio runtime instead and wait
///   for its handle here: `block_on_future(rt.spawn(fut))`.
/// - Runtimes whose reactor runs on a thread of its own (`async-io`, used
///   by `smol` and `async-std`) work, since nothing else has to drive it.
///
/// Use gofer's own [`sleep`](crate::sleep) and timers inside tasks rather
/// than an async timer.
///
/// A cancelled task unwinds between two polls, dropping the future
/// ([`JoinHandle::cancel`](crate::JoinHandle::cancel)).
///
/// # Panics
/// If the future panics: the panic continues from here.
pub fn block_on_future<F: IntoFuture>(future: F) -> F::Output {
    let mut fut = pin!(future.into_future());
    match context::current_task() {
        Some(task) => {
            let waker = task_waker(task.clone());
            let mut cx = Context::from_waker(&waker);
            loop {
                if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                    return v;
                }
                // Cancelled: the unwind drops the future (its wakers are
                // handles, nothing points at this stack).
                crate::runtime::task::cancel::checkpoint();
                park::park_or_yield(&task);
            }
        }
        None => {
            let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
            let mut cx = Context::from_waker(&waker);
            loop {
                if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                    return v;
                }
                std::thread::park();
            }
        }
    }
}
