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
//!   waiting on a [`JoinHandle`], a lock of [`sync`], a channel of [`chan`],
//!   a socket of [`net`].
//! - A **Processer** is one OS thread that runs tasks from its queues.
//! - The **Dispatcher** watches Processers and rescues the tasks queued
//!   behind one whose task blocks the thread.
//! - A [`Scheduler`] is a set of Processers plus their Dispatcher. The
//!   default scheduler starts on first use; [`go!`] spawns on it (or on the
//!   current task's scheduler).
//! - A **fiber** ([`fiber::Fiber`], [`fiber::Generator`]) is a coroutine
//!   that its caller resumes, on the same kind of stack, with no scheduler.
//! - [`scope`] spawns tasks that borrow from the caller and waits for them,
//!   as `std::thread::scope` does for threads.
//! - Futures meet tasks both ways: [`block_on_future`] parks a task until a
//!   future is ready, and a [`JoinHandle`] can be `.await`ed.
//! - [`JoinHandle::cancel`] stops a task: it unwinds from its next
//!   cancellable wait. [Which waits are cancellable](task#cancellation),
//!   and which are not, is in the [`task`] module's docs.
//!
//! See `ARCHITECTURE.md` for the design.
//!
//! # Thread-local storage: what `spawn` promises
//!
//! **A task stays on the OS thread where it first ran, from its first
//! switch to its end.** Stealing and the Dispatcher's rescue move only tasks
//! that have not started yet; a started task woken while its thread is
//! blocked waits for that thread. So safe code inside a task may use
//! `thread_local!`, keep a thread-bound value (an `Rc` shared on the thread,
//! a `std::sync::MutexGuard`) across a switch, and call code that does
//! either, exactly as on a thread. This holds whatever the compiler does:
//! LLVM assumes a function runs on one thread and may reuse a thread-local's
//! address across any call, a switch included, and that address stays right
//! because the thread does.
//!
//! The cost is balance: a burst of work woken onto one thread stays there
//! (other threads take the tasks not yet started), and a task woken behind
//! a thread blocked in the kernel waits for it. Code that vouches for itself
//! can opt back into moving started tasks, per task with the `unsafe`
//! [`Builder::migratable`] or per scheduler with the `unsafe`
//! [`SchedulerBuilder::migrate_started_tasks`], whose `# Safety` sections
//! state the rule (no thread-local touched on both sides of a switch point
//! in one function, inlined code included) and list the switch points.
//! [`Builder::pin`] chooses the thread; [`coroutine_local!`] gives per-task
//! state that moves with the task.
//!
//! Two exceptions keep their own rules: a `block_on` root runs on the
//! caller's thread, and an unwinding task never moves (std counts panics
//! per thread). gofer's own code keeps the rule for migratable tasks too:
//! each thread-local access on a path that can switch sits in a function
//! that is never inlined and does not switch, and
//! `scripts/check_tls_switch.py` checks a release binary for it.
//!
//! # Blocking calls
//!
//! A task that calls a blocking function (a plain `std::thread::sleep`, a
//! blocking read) holds its Processer's thread. The Dispatcher notices and
//! moves the tasks queued behind it to other Processers, starting an extra
//! thread (up to `max_threads`) when all are blocked. To wait without
//! holding the thread, use gofer's own calls ([`sleep`], the sockets of
//! [`net`], [`io::wait_readable`] for other descriptors), or build with the
//! `hooks` feature, under which std's socket calls and sleeps park the
//! task ([`hooks`]). For a call with no such form (a file, a blocking
//! library), [`unblock`] makes it on a pool thread while the task parks,
//! and [`fs`] does that for every file system call.
//!
//! The `hooks` feature acts on a whole binary: the hooked symbols are
//! defined in the gofer linked into it, and cargo unifies features over
//! everything one command builds. In a workspace where one member enables
//! `gofer/hooks`, `cargo build --workspace` (or `cargo test` of the
//! workspace) links a hooked gofer into every member's binaries. Resolver 2
//! does not separate workspace members (it keeps apart only dev-, build-
//! and proc-macro dependencies' features and targets not being built), so
//! keep hooks to one binary by building it alone (`cargo build -p NAME`,
//! not in one command with siblings that need gofer without hooks) or by
//! giving it a workspace of its own.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

// The modules, in rustfmt's alphabetical order; their layers, bottom up,
// are ARCHITECTURE.md's "The tree" (`scripts/modgraph.py` checks them).
pub mod chan; // channels and select!
mod coroutine; // stacks and the switch; knows nothing of tasks
pub mod debug; // task dumps: every task's state, wait and stack
mod error; // the error types every layer reports
pub mod fiber; // coroutines their caller resumes, on the coroutine layer alone
pub mod fs; // files shaped like std::fs, each call made through `unblock`
pub mod hooks; // with the `hooks` feature: blocking libc calls park the task
pub mod io; // waiting for any descriptor through the reactor
pub mod net; // sockets shaped like std::net
mod runtime; // Scheduler, Processers, Dispatcher, task header, timers
pub mod signal; // Unix signals as channel messages, through a thread of their own
pub mod sync; // Mutex, RwLock, Condvar, Semaphore, WaitGroup, Barrier
mod sys; // locks, the kernel's futex, libc's real functions: under everything
pub mod task; // the task API: spawn, join, park, coroutine-locals, cancellation
mod time;
#[cfg(feature = "tracing")]
pub mod trace; // with the `tracing` feature: task spans that follow their task // sleep and user timers

pub use coroutine::stack::{DEFAULT_STACK_SIZE, MAX_STACK_SIZE, MIN_STACK_SIZE};
pub use coroutine::stacks::DEFAULT_STACK_CACHE;
pub use error::{Cancelled, ConfigError, JoinError, ShutdownError, SpawnError};
pub use runtime::config::{IoDriver, DEFAULT_RESERVE_DESCRIPTORS, MAX_RESERVE_DESCRIPTORS};
pub use runtime::config::{
    SchedulerBuilder, DEFAULT_BLOCKING_IDLE_TIMEOUT, DEFAULT_BLOCKING_THREADS,
    DEFAULT_BLOCK_TIMEOUT, DEFAULT_DISPATCH_INTERVAL, DEFAULT_IDLE_THREAD_TIMEOUT,
    DEFAULT_MAX_THREADS, MAX_BLOCK_TIMEOUT, MAX_DISPATCH_INTERVAL, MAX_IDLE_THREAD_TIMEOUT,
    MAX_THREADS_LIMIT, MIN_BLOCK_TIMEOUT, MIN_DISPATCH_INTERVAL, MIN_IDLE_THREAD_TIMEOUT,
};
pub use runtime::scheduler::Scheduler;
pub use runtime::stats::{ProcesserStats, Stats};
pub use runtime::task::park::{
    current, current_id, current_name, is_coroutine, park, park_timeout, yield_now, Task,
};
pub use runtime::task::TaskId;
pub use runtime::time::sleep::{sleep, sleep_until};
pub use task::builder::{spawn, Builder};
pub use task::cancel_token::CancelToken;
pub use task::future::block_on_future;
pub use task::join::JoinHandle;
pub use task::locals::LocalKey;
pub use task::scope::{scope, Scope, ScopedJoinHandle};
pub use task::unblock::unblock;
pub use time::timer;
