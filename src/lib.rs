//! gofer: stackful coroutines on a few OS threads, in the libgo model.
//!
//! Write plain blocking-style code, run it as cheap tasks:
//!
//! ```
//! use gofer::go;
//! let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();
//! let handles: Vec<_> = (0..100u64)
//!     .map(|i| go!(scheduler = &sched, move || {
//!         gofer::yield_now(); // any depth, any time
//!         i * 2
//!     }))
//!     .collect();
//! let sum: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
//! assert_eq!(sum, 9900);
//! sched.shutdown();
//! ```
//!
//! # Concepts
//!
//! - A **task** is a closure running on its own stack (a *coroutine*). It
//!   can switch out from any call depth: [`yield_now`], [`park`], [`sleep`],
//!   waiting on a [`JoinHandle`], and later the sync primitives and channels.
//! - A **Processer** is one OS thread that runs tasks from its queues.
//! - The **Dispatcher** watches Processers and rescues the tasks queued
//!   behind one whose task blocks the thread.
//! - A [`Scheduler`] is a set of Processers plus their Dispatcher. The
//!   default scheduler starts on first use; [`go!`] spawns on it (or on the
//!   current task's scheduler).
//! - A **fiber** ([`fiber::Fiber`], [`fiber::Generator`]) is a coroutine
//!   that its caller resumes, on the same kind of stack, with no scheduler.
//! - Futures meet tasks both ways: [`block_on_future`] parks a task until a
//!   future is ready, and a [`JoinHandle`] can be `.await`ed.
//!
//! See `ARCHITECTURE.md` for the design.
//!
//! # Thread-local storage and migration: a soundness caveat
//!
//! A task can resume on a different thread after any switch (yield, park,
//! sleep, lock, receive, join). The compiler cannot see that. `spawn` and
//! [`go!`] are safe functions and require `Send + 'static` closures, but
//! safe code *inside* a task can still do what is only sound on one thread:
//!
//! - hold a reference obtained from a `thread_local!` across a switch: after
//!   the task moved, it points into another thread's storage, which is freed
//!   if that thread exits (an extra Processer retiring);
//! - keep a thread-bound value (`Rc` shared with other code on that thread,
//!   a `std::sync::MutexGuard`, anything tied to the OS thread) across a
//!   switch and use it on the new thread.
//!
//! Either is undefined behaviour, and gofer cannot detect it. This is the
//! known limit of every work-stealing runtime for stackful coroutines (may
//! marks its `spawn` unsafe for it); gofer's own code never does either.
//! Inside tasks:
//!
//! - use [`coroutine_local!`] for per-task state instead of `thread_local!`,
//! - pin the task to one Processer with [`Builder::pin`] when it must stay
//!   on one thread (for example to use a library that keeps thread-local
//!   state): a pinned task never migrates,
//! - use [`sync`] primitives, not guards tied to the OS thread, across
//!   switches.

//! # Blocking calls
//!
//! A task that calls a blocking function (a plain `std::thread::sleep`, a
//! blocking read) holds its Processer's thread. The Dispatcher notices and
//! moves the tasks queued behind it to other Processers, starting an extra
//! thread (up to `max_threads`) when all are blocked.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

// The layers, bottom up: each imports only those above it in this list.
pub mod chan;
mod coroutine; // stacks and the switch; knows nothing of tasks
mod error; // the error types every layer reports
pub mod fiber; // coroutines their caller resumes, on the coroutine layer alone
pub mod hooks; // with the `hooks` feature: blocking libc calls park the task
pub mod io; // waiting for any descriptor through the reactor
pub mod net; // sockets shaped like std::net
mod runtime; // Scheduler, Processers, Dispatcher, task header, timers
pub mod sync;
mod task; // the task API: spawn, join, park, coroutine-locals
mod time; // sleep and user timers

pub use coroutine::stack::{DEFAULT_STACK_SIZE, MAX_STACK_SIZE, MIN_STACK_SIZE};
pub use coroutine::stacks::DEFAULT_STACK_CACHE;
pub use error::{ConfigError, JoinError, ShutdownError, SpawnError};
pub use runtime::config::{
    SchedulerBuilder, DEFAULT_BLOCK_TIMEOUT, DEFAULT_DISPATCH_INTERVAL,
    DEFAULT_IDLE_THREAD_TIMEOUT, DEFAULT_MAX_THREADS, MAX_BLOCK_TIMEOUT, MAX_DISPATCH_INTERVAL,
    MAX_IDLE_THREAD_TIMEOUT, MAX_THREADS_LIMIT, MIN_BLOCK_TIMEOUT, MIN_DISPATCH_INTERVAL,
    MIN_IDLE_THREAD_TIMEOUT,
};
pub use runtime::scheduler::Scheduler;
pub use runtime::stats::{ProcesserStats, Stats};
pub use runtime::task::TaskId;
pub use task::builder::{spawn, Builder};
pub use task::future::block_on_future;
pub use task::join::JoinHandle;
pub use task::locals::LocalKey;
pub use task::park::{
    current, current_id, current_name, is_coroutine, park, park_timeout, yield_now, Task,
};
pub use time::sleep::{sleep, sleep_until};
pub use time::timer;
