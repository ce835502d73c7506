//! The public [`Scheduler`] handle: a cheap, cloneable reference to one
//! scheduler's shared state, its default instance, and what users ask of
//! it (stats, shutdown). Spawning lives with the task API
//! (`task/spawn.rs`); the state and its lifecycle in `shared.rs`.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::config::{resolve_min_threads, SchedulerBuilder, MAX_THREADS_LIMIT};
use super::context;
use super::shared::Shared;
use super::stats::Stats;
use crate::error::{ConfigError, ShutdownError, SpawnError};
use crate::runtime::processer::shared::Kind;

/// A set of Processer threads that run tasks. A cheap, cloneable handle,
/// usable from any thread.
///
/// Several schedulers in one process are fully isolated: each has its own
/// threads, queues, timers and Dispatcher.
///
/// Dropping the last handle without calling [`shutdown`](Self::shutdown)
/// detaches the scheduler: its threads finish the remaining tasks and then
/// exit on their own. Tasks that stay parked forever keep their threads (and
/// stacks) alive; nothing unfinished is ever freed.
#[derive(Clone)]
pub struct Scheduler {
    handle: Arc<Handle>,
}

/// The user-facing handle's shared part; its drop detaches the scheduler.
struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.detach();
    }
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.handle.shared;
        f.debug_struct("Scheduler")
            .field("name", &s.config.name)
            .field("min_threads", &s.config.min_threads)
            .field("max_threads", &s.config.max_threads)
            .field("alive", &s.alive.load(Ordering::Relaxed))
            .finish()
    }
}

static DEFAULT: OnceLock<Result<Scheduler, ConfigError>> = OnceLock::new();

impl Scheduler {
    /// A builder with the defaults: one Processer per CPU, 256 KiB stacks.
    pub fn builder() -> SchedulerBuilder {
        SchedulerBuilder::default()
    }

    /// The process-wide default scheduler, started on first use.
    ///
    /// It has one Processer per CPU; the environment variables
    /// `GOFER_THREADS` (min_threads: 0, meaning one per CPU, to
    /// [`MAX_THREADS_LIMIT`]) and `GOFER_MAX_THREADS` (max_threads: 1 to
    /// [`MAX_THREADS_LIMIT`], not below min_threads) override that. A
    /// malformed or out-of-range value, or a thread that cannot start, is an
    /// error, returned every time.
    pub fn default_scheduler() -> Result<Scheduler, ConfigError> {
        DEFAULT.get_or_init(build_default).clone()
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.handle.shared
    }

    /// The handle of a freshly built scheduler.
    pub(crate) fn from_shared(shared: Arc<Shared>) -> Scheduler {
        Scheduler {
            handle: Arc::new(Handle { shared }),
        }
    }

    /// A snapshot of the scheduler's counters. Cheap; callable from any
    /// thread while the scheduler runs.
    pub fn stats(&self) -> Stats {
        self.handle.shared.stats()
    }

    /// Waits for every task to finish, then stops and joins every thread.
    ///
    /// After it returns, spawning on this scheduler fails with
    /// [`SpawnError::Shutdown`]. Waits forever for a task that never
    /// finishes; see [`shutdown_timeout`](Self::shutdown_timeout). Several
    /// calls may run at once (from several threads): each returns only once
    /// every thread of the scheduler has been joined.
    ///
    /// # Panics
    /// When called from a task of this same scheduler, or from a call such
    /// a task made through [`unblock`](crate::unblock) (it would wait for
    /// itself). Nothing is shut down then: the scheduler keeps running.
    #[track_caller]
    pub fn shutdown(&self) {
        if let Err(e) = self.handle.shared.shutdown(None) {
            panic!("gofer: {e}");
        }
    }

    /// Like [`shutdown`](Self::shutdown), but gives up after `timeout`,
    /// saying how many tasks are still alive. The scheduler keeps running
    /// them (spawns from outside stay refused); call `shutdown` again to go
    /// on waiting.
    ///
    /// A `timeout` too long to be represented as a deadline (such as
    /// `Duration::MAX`) means no deadline: the call waits like `shutdown`.
    /// If every task has finished but another call is still joining the
    /// threads when `timeout` runs out, the error says `alive: 0`.
    ///
    /// Errors: [`ShutdownError::TimedOut`]; [`ShutdownError::FromOwnTask`]
    /// at once, with nothing done, when called from a task of this same
    /// scheduler or from a call such a task made through
    /// [`unblock`](crate::unblock).
    pub fn shutdown_timeout(&self, timeout: Duration) -> Result<(), ShutdownError> {
        self.handle.shared.shutdown(Some(timeout))
    }

    /// The scheduler's name (the thread name prefix).
    pub fn name(&self) -> &str {
        &self.handle.shared.config.name
    }
}

impl SchedulerBuilder {
    /// Validates the settings and starts the core Processer threads and the
    /// Dispatcher.
    ///
    /// Errors: a setting out of range ([`ConfigError`] names it and what it
    /// accepts), or a thread the operating system refuses to start
    /// ([`ConfigError::ThreadStart`]); in the latter case the threads already
    /// started are stopped and joined before `build` returns.
    pub fn build(self) -> Result<Scheduler, ConfigError> {
        let config = self.validate()?;
        // Before any Processer runs, so that none waits for the table to
        // grow; a table left smaller only costs those waits (see
        // `reserve_descriptors`).
        let _ = super::fd_table::reserve(config.reserve_descriptors);
        crate::coroutine::overflow::describe_tasks_with(super::context::describe_fault);
        crate::coroutine::overflow::install();
        crate::coroutine::panic_hook::label_tasks_with(super::context::label_current);
        crate::coroutine::panic_hook::install();
        crate::hooks::keep();
        make_epoch_collector();
        let shared = Shared::new(config);
        for started in 0..shared.config.min_threads {
            if let Err(e) = shared.start_processer(Kind::Core) {
                shared.stop_threads();
                // Nothing else allocates slot indices before build returns,
                // so the failed Processer's index is the count started.
                let thread = format!("{}-{started}", shared.config.name);
                return Err(ConfigError::thread_start(thread, started, &e));
            }
        }
        if let Err(e) = crate::runtime::dispatcher::start(&shared) {
            shared.stop_threads();
            let thread = crate::runtime::dispatcher::thread_name(&shared.config.name);
            return Err(ConfigError::thread_start(
                thread,
                shared.config.min_threads,
                &e,
            ));
        }
        if let Err(e) = crate::runtime::dump::stall::start(&shared) {
            shared.stop_threads();
            return Err(ConfigError::thread_start(
                format!("{}-stall", shared.config.name),
                shared.config.min_threads,
                &e,
            ));
        }
        Ok(Scheduler::from_shared(shared))
    }
}

/// Reads a thread-count environment variable, accepting `min..=max`.
fn env_threads(var: &'static str, min: usize, max: usize) -> Result<Option<usize>, ConfigError> {
    let value = match std::env::var(var) {
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .map_err(|_| ConfigError::Env { var, value: v })?,
        Err(std::env::VarError::NotPresent) => return Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => {
            return Err(ConfigError::Env {
                var,
                value: v.to_string_lossy().into_owned(),
            })
        }
    };
    if value < min || value > max {
        return Err(ConfigError::EnvRange {
            var,
            value,
            min,
            max,
        });
    }
    Ok(Some(value))
}

fn build_default() -> Result<Scheduler, ConfigError> {
    let mut b = Scheduler::builder().name("gofer");
    let min = env_threads("GOFER_THREADS", 0, MAX_THREADS_LIMIT)?.unwrap_or(0);
    b = b.min_threads(min);
    let resolved = resolve_min_threads(min);
    if let Some(n) = env_threads("GOFER_MAX_THREADS", resolved, MAX_THREADS_LIMIT)? {
        b = b.max_threads(n);
    }
    b.build()
}

/// Calls `f` with the scheduler to spawn on when none is named: the
/// current task's (borrowed from its header: no reference count touched,
/// on the spawn path), else this Processer thread's, else the default one.
pub(crate) fn with_current_or_default_shared<R>(
    f: impl FnOnce(&Arc<Shared>) -> R,
) -> Result<R, SpawnError> {
    if let Some(h) = context::current_task_ptr() {
        // SAFETY: the running task's header stays alive while the task
        // runs (its Processer holds its Runnable), including across a
        // switch inside `f`; its scheduler field never changes.
        return Ok(f(unsafe { &(*h).shared }));
    }
    current_or_default_shared().map(|s| f(&s))
}

/// The scheduler to spawn on when none is named: the current task's, else
/// the default one.
pub(crate) fn current_or_default_shared() -> Result<Arc<Shared>, SpawnError> {
    match context::current_scheduler() {
        Some(s) => Ok(s),
        None => Scheduler::default_scheduler()
            .map(|s| s.handle.shared.clone())
            .map_err(SpawnError::DefaultScheduler),
    }
}

/// crossbeam's epoch collector is made once per process, at its first use,
/// behind a `Once`: make it in `build`, before any task of the scheduler
/// runs, so that no steal in a task (or in the Dispatcher) is ever the one
/// that waits for it (`scripts/check_tls_switch.py` counts on it).
///
/// A function of its own, never inlined: the steal reads crossbeam's
/// thread-local handle, and `build` reaches a switch under the hooks
/// feature (a hooked `fcntl` in `fd_table::reserve`), so that read must not
/// land in `build`'s own body (the same check).
#[inline(never)]
fn make_epoch_collector() {
    let _ = crossbeam_deque::Worker::<u8>::new_fifo().stealer().steal();
}
