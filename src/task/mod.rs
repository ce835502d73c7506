//! The task API: spawning (`Builder`, `spawn`, `go!`, `Scheduler::spawn`,
//! `Scheduler::block_on`), waiting for a result (`JoinHandle`), parking and
//! waking (`park`, `Task::unpark`, `yield_now`), coroutine-local values,
//! futures (`block_on_future`, the task's waker; `JoinHandle` is one), and
//! scoped tasks that borrow from their caller (`scope`, `Scheduler::scope`),
//! blocking calls made on the blocking pool (`unblock`), cancellation
//! ([`is_cancelled`], `JoinHandle::cancel`, `task/cancel.rs`) and sets of
//! tasks joined in completion order ([`JoinSet`]).
//!
//! Public here too: [`CancelToken`], which tells a group of tasks to stop,
//! and [`with_done`], which makes a task's end a channel for `select!`.

pub(crate) mod builder;
pub(crate) mod cancel;
pub(crate) mod cancel_token;
pub(crate) mod done;
pub(crate) mod future;
pub(crate) mod join;
pub(crate) mod joinset;
pub(crate) mod locals;
pub(crate) mod park;
pub(crate) mod scope;
pub(crate) mod spawn;
pub(crate) mod unblock;

pub use cancel::is_cancelled;
pub use cancel_token::{CancelToken, DropGuard};
pub use done::with_done;
pub use joinset::JoinSet;
