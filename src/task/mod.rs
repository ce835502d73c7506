//! The task API: spawning (`Builder`, `spawn`, `go!`, `Scheduler::spawn`,
//! `Scheduler::block_on`), waiting for a result (`JoinHandle`), parking and
//! waking (`park`, `Task::unpark`, `yield_now`), coroutine-local values,
//! futures (`block_on_future`, the task's waker; `JoinHandle` is one), and
//! scoped tasks that borrow from their caller (`scope`, `Scheduler::scope`),
//! blocking calls made on the blocking pool (`unblock`), cancellation
//! ([`is_cancelled`], [`JoinHandle::cancel`], and the rules below) and sets
//! of tasks joined in completion order ([`JoinSet`]).
//!
//! Public here too: [`CancelToken`], which tells a group of tasks to stop,
//! and [`with_done`], which makes a task's end a channel for `select!`.
//!
//! # Cancellation
//!
//! [`JoinHandle::cancel`] (and [`JoinSet::cancel_all`],
//! [`Scheduler::shutdown_now`]) asks a task to stop. The task stops by
//! *unwinding* from its next cancellable wait: its destructors run (sockets
//! close, locks unlock, permits return), and [`JoinHandle::join`] gives an
//! error for which [`JoinError::is_cancelled`] is true. A stackful task is
//! ordinary blocking code whose waits return plain values, most with no
//! error to give (`Mutex::lock`, `sleep`), so an unwind stops it from
//! wherever it waits without changing a signature. The panic hook does not
//! run: a cancellation is not reported as a panic.
//!
//! A wait that observes the cancellation withdraws first, exactly as a
//! timed-out wait does (it leaves the channel's or the lock's queue, its
//! timer and its socket registration go), and only then unwinds. The waits
//! that do this:
//!
//! - [`sleep`](crate::sleep) and [`sleep_until`](crate::sleep_until);
//! - channel `send` and `recv` (with or without a timeout), on any gofer
//!   channel;
//! - every wait of [`gofer::sync`](crate::sync): `Mutex` and `RwLock`
//!   locks, `Condvar` waits (the mutex is locked again before the unwind,
//!   so the guard's drop unlocks it), `Semaphore`, `WaitGroup`, `Barrier`;
//! - [`select!`](crate::select) and [`Select`](crate::chan::Select) while
//!   they wait (an arm ready at once still wins; every arm is unregistered
//!   before the unwind);
//! - [`JoinHandle::join`] and its timed forms;
//! - the waits of gofer's sockets ([`net`](crate::net): `accept`, `read`,
//!   `write`, `connect`, ...) and
//!   [`io::wait_readable`](crate::io::wait_readable);
//! - [`park`](crate::park) and [`park_timeout`](crate::park_timeout):
//!   they unwind when called in a cancelled task, and a cancelled task
//!   parked in them returns (as a spurious wake-up) and unwinds at its next
//!   call;
//! - [`yield_now`](crate::yield_now), after the task runs again;
//! - [`block_on_future`](crate::block_on_future) between two polls (the
//!   future is dropped by the unwind).
//!
//! Waits that do **not** observe it, and why:
//!
//! - [`unblock`](crate::unblock) and the [`fs`](crate::fs) calls made
//!   through it: the pool thread borrows the task's stack until the call
//!   returns. The task unwinds at its next cancellable wait after it.
//! - hooked libc calls (the `hooks` feature, [`crate::hooks`]): an unwind
//!   through a C frame is undefined behaviour, so a hooked call waits on as
//!   if nothing happened (it finishes or times out as it would have), and
//!   the task unwinds at its next gofer wait.
//! - the end of a [`scope`](crate::scope), which must wait for every task
//!   of the scope (they borrow from the owner's stack) whatever happens to
//!   its owner.
//! - any wait while the task is already unwinding
//!   ([`std::thread::panicking`]): a destructor that locks a mutex or sends
//!   on a channel during an unwind works as usual, and a second panic,
//!   which would abort, is never started. std counts panics per thread, so
//!   a task whose thread is unwinding another task (parked mid-unwind)
//!   defers too, and looks again shortly: the cancellation is not lost.
//!
//! A computation that never waits can poll [`is_cancelled`].
//!
//! A wait whose operation completed (a value handed over, a lock passed,
//! readiness reported) returns it even if the cancellation came at the
//! same moment: nothing is dropped on the floor, and the task unwinds at
//! its next cancellable wait. Besides:
//!
//! - a task cancelled before it started never runs: its closure is dropped
//!   (on the thread of the Processer that picked it) and `join` gives the
//!   cancelled error;
//! - a task that finished before it observed the cancellation keeps its
//!   result: `join` gives its value;
//! - the request stays: a task that catches the unwind (`catch_unwind`)
//!   may go on, but its next cancellable wait unwinds again; if it returns
//!   a value after all, `join` gives that value.
//!
//! [`CancelToken`] is another mechanism: a value the tasks of a group
//! watch, which ends only the waits that watch it (a `cancelled(t)` arm of
//! `select!`, [`Semaphore::acquire_cancellable`]), with no unwind.
//!
//! [`JoinHandle::cancel`]: crate::JoinHandle::cancel
//! [`JoinHandle::join`]: crate::JoinHandle::join
//! [`JoinError::is_cancelled`]: crate::JoinError::is_cancelled
//! [`Scheduler::shutdown_now`]: crate::Scheduler::shutdown_now
//! [`Semaphore::acquire_cancellable`]: crate::sync::Semaphore::acquire_cancellable

// The files of this module (for contributors; the docs above are for users):
//
// | file | what it is |
// |---|---|
// | `spawn.rs` | the one path from a closure to a queued task; `Scheduler::spawn`, `block_on` |
// | `builder.rs` | `Builder` and the `go!` macro |
// | `join.rs` | `JoinHandle` and the task's cell (closure, result slot, join state) |
// | `scope.rs` | scoped tasks: `scope`, `Scope`, `ScopedJoinHandle` |
// | `locals.rs` | coroutine-local storage (`LocalKey`) |
// | `future.rs` | `block_on_future` and the waker that unparks a task |
// | `unblock.rs` | `unblock`: a blocking call on the pool while the task parks |
// | `cancel_token.rs` | `CancelToken`: a flag that tells a group of tasks to stop (built on `chan`) |
// | `done.rs` | `with_done`: a task's end as a channel |
// | `joinset.rs` | `JoinSet`: tasks joined in the order they finish (built on `chan`) |
// Where the runtime keeps the machinery under these (parking, cancellation,
// the task header), see `runtime/task/`.

pub(crate) mod builder;
pub(crate) mod cancel_token;
pub(crate) mod done;
pub(crate) mod future;
pub(crate) mod join;
pub(crate) mod joinset;
pub(crate) mod locals;
pub(crate) mod scope;
pub(crate) mod spawn;
pub(crate) mod unblock;

pub use crate::runtime::task::cancel::is_cancelled;
pub use cancel_token::{CancelToken, DropGuard};
pub use done::with_done;
pub use joinset::JoinSet;
