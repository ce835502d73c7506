//! The Scheduler: a set of Processers, their shared state, and the public
//! handle users spawn on.
//!
//! # Lifecycle
//!
//! 1. `build()` validates the configuration and starts `min_threads` core
//!    Processer threads (and the Dispatcher thread when there is something
//!    to watch). The timer thread starts on first use. A thread the OS
//!    refuses to start makes `build()` stop and join the threads it started
//!    and return `ConfigError::ThreadStart`.
//! 2. Tasks are admitted by `spawn`: `alive += 1` before the task is
//!    queued, `alive -= 1` when it finishes.
//! 3. `shutdown` sets `closing` (spawns from outside the scheduler are now
//!    refused; tasks may still spawn children), waits until `alive == 0`,
//!    then sets `stopped`, wakes every Processer, and joins every thread,
//!    holding `stop_lock` while it joins: a concurrent call waits for it,
//!    so every call returns only once every thread is gone.
//!    A parked task that nobody wakes keeps `alive` above zero: shutdown
//!    waits for it forever, and `shutdown_timeout` reports it. Nothing frees
//!    the stack of an unfinished task.
//! 4. Dropping the last [`Scheduler`] handle without `shutdown` *detaches*:
//!    the threads keep running the remaining tasks and exit on their own
//!    once `alive` reaches zero. Tasks parked forever keep their threads.
//!
//! Admission against shutdown is a Dekker pair, both sides SeqCst:
//!
//! ```text
//!  spawner (outside thread)              shutdown
//!  1. alive += 1                          1. closing = true
//!  2. if closing: alive -= 1, refuse      2. wait until alive == 0
//! ```
//!
//! Either the spawner sees `closing`, or shutdown sees its `alive` count and
//! waits for the task.

use std::fmt;
use std::io;
use std::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use crate::error::{ConfigError, ShutdownError, SpawnError};
use crate::idle::Idle;
use crate::join::{self, JoinHandle};
use crate::processer::{self, Kind, ProcLocal, ProcesserShared};
use crate::stack::{self, DenseArena, StackMem, StackPool};
use crate::stats::{ProcesserStats, Stats};
use crate::task::{Runnable, TaskHeader};
use crate::timer::Timers;

/// Default cap on Processer threads when `max_threads` is not set.
pub const DEFAULT_MAX_THREADS: usize = 64;
/// The most Processer threads one scheduler accepts: the upper bound of
/// `min_threads` and `max_threads`, and of `GOFER_THREADS` and
/// `GOFER_MAX_THREADS`.
///
/// A fixed bound, so that a typo cannot start tens of thousands of threads.
/// Each Processer thread costs a 2 MiB stack reservation (RSS only for what
/// it touches), two memory mappings for that stack and two for its signal
/// stack, and one entry against the process's `RLIMIT_NPROC` and the
/// system's `kernel.threads-max`; it holds no file descriptor.
pub const MAX_THREADS_LIMIT: usize = 4096;
/// Default time a task may run without switching before its Processer is
/// considered blocked.
pub const DEFAULT_BLOCK_TIMEOUT: Duration = Duration::from_millis(10);
/// Shortest accepted `block_timeout` (it may not be shorter than the
/// `dispatch_interval` either).
pub const MIN_BLOCK_TIMEOUT: Duration = Duration::from_micros(100);
/// Longest accepted `block_timeout`.
pub const MAX_BLOCK_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// Default fastest sampling period of the Dispatcher.
pub const DEFAULT_DISPATCH_INTERVAL: Duration = Duration::from_micros(100);
/// Shortest accepted `dispatch_interval`.
pub const MIN_DISPATCH_INTERVAL: Duration = Duration::from_micros(10);
/// Longest accepted `dispatch_interval`.
pub const MAX_DISPATCH_INTERVAL: Duration = Duration::from_secs(1);
/// Default time an extra Processer stays idle before its thread exits.
pub const DEFAULT_IDLE_THREAD_TIMEOUT: Duration = Duration::from_secs(3);
/// Shortest accepted `idle_thread_timeout`.
pub const MIN_IDLE_THREAD_TIMEOUT: Duration = Duration::from_millis(1);
/// Longest accepted `idle_thread_timeout`.
pub const MAX_IDLE_THREAD_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);
/// Usable Processers the round-robin step of a remote push looks at, at
/// most, for an awake one before it settles for a sleeping one.
const AWAKE_TRIES: usize = 8;

/// A validated scheduler configuration.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) min_threads: usize,
    pub(crate) max_threads: usize,
    pub(crate) stack_size: usize,
    pub(crate) name: String,
    pub(crate) block_timeout: Duration,
    pub(crate) dispatch_interval: Duration,
    pub(crate) idle_thread_timeout: Duration,
    pub(crate) kernel_block_detection: bool,
    pub(crate) dense_stacks: bool,
    pub(crate) stack_cache: usize,
}

/// Configures and starts a [`Scheduler`].
///
/// ```
/// let sched = gofer::Scheduler::builder()
///     .min_threads(2)
///     .max_threads(8)
///     .stack_size(128 * 1024)
///     .name("workers")
///     .build()?;
/// assert_eq!(sched.block_on(|| 7), 7);
/// sched.shutdown();
/// # Ok::<(), gofer::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until build() is called"]
pub struct SchedulerBuilder {
    min_threads: usize,
    max_threads: Option<usize>,
    stack_size: usize,
    name: String,
    block_timeout: Duration,
    dispatch_interval: Duration,
    idle_thread_timeout: Duration,
    kernel_block_detection: bool,
    dense_stacks: bool,
    stack_cache: usize,
}

impl Default for SchedulerBuilder {
    fn default() -> Self {
        SchedulerBuilder {
            min_threads: 0,
            max_threads: None,
            stack_size: stack::DEFAULT_STACK_SIZE,
            name: "gofer".to_string(),
            block_timeout: DEFAULT_BLOCK_TIMEOUT,
            dispatch_interval: DEFAULT_DISPATCH_INTERVAL,
            idle_thread_timeout: DEFAULT_IDLE_THREAD_TIMEOUT,
            kernel_block_detection: true,
            dense_stacks: false,
            stack_cache: stack::DEFAULT_STACK_CACHE,
        }
    }
}

impl SchedulerBuilder {
    /// Processers started at build, which live until shutdown; `0` (the
    /// default) means the number of CPUs. Accepted: 0 to
    /// [`MAX_THREADS_LIMIT`] (4096).
    ///
    /// Threads are started one after another, and `build` returns
    /// [`ConfigError::ThreadStart`] (after stopping those already started)
    /// if the operating system refuses one.
    pub fn min_threads(mut self, n: usize) -> Self {
        self.min_threads = n;
        self
    }

    /// The cap on Processer threads, including the extra ones the Dispatcher
    /// starts when every Processer is blocked. Default:
    /// `max(min_threads, 64)`. Accepted: 1 to [`MAX_THREADS_LIMIT`] (4096),
    /// and not below `min_threads` (once `0` is resolved to the number of
    /// CPUs). Threads that lend themselves to the scheduler inside
    /// [`Scheduler::block_on`] are not counted: they belong to the caller.
    pub fn max_threads(mut self, n: usize) -> Self {
        self.max_threads = Some(n);
        self
    }

    /// The stack size of tasks that do not set their own, in bytes (rounded
    /// up to whole pages). Default 256 KiB; accepted
    /// [`MIN_STACK_SIZE`](crate::MIN_STACK_SIZE) to
    /// [`MAX_STACK_SIZE`](crate::MAX_STACK_SIZE). Only touched pages cost memory.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = bytes;
        self
    }

    /// The prefix of thread names: `"{name}-0"`, `"{name}-1"`, ...
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// How long a task may run without switching out before its Processer
    /// is considered blocked and its queued tasks are moved elsewhere.
    /// Default 10 ms. Accepted: [`MIN_BLOCK_TIMEOUT`] (100 us) to
    /// [`MAX_BLOCK_TIMEOUT`] (1 hour), and not shorter than the
    /// `dispatch_interval`.
    pub fn block_timeout(mut self, d: Duration) -> Self {
        self.block_timeout = d;
        self
    }

    /// The Dispatcher's fastest sampling period. Default 100 us. Accepted:
    /// [`MIN_DISPATCH_INTERVAL`] (10 us) to [`MAX_DISPATCH_INTERVAL`] (1 s).
    ///
    /// A kernel-blocked Processer is caught about three intervals after it
    /// blocked; shutdown does not wait for the Dispatcher's current interval
    /// to run out.
    pub fn dispatch_interval(mut self, d: Duration) -> Self {
        self.dispatch_interval = d;
        self
    }

    /// How long an extra Processer (beyond `min_threads`) stays idle before
    /// its thread exits. Default 3 s. Accepted: [`MIN_IDLE_THREAD_TIMEOUT`]
    /// (1 ms) to [`MAX_IDLE_THREAD_TIMEOUT`] (1 day).
    pub fn idle_thread_timeout(mut self, d: Duration) -> Self {
        self.idle_thread_timeout = d;
        self
    }

    /// Whether the Dispatcher reads each Processer thread's CPU clock to
    /// catch a task blocked in the kernel after two dispatch intervals,
    /// rather than waiting for `block_timeout`. Default `true`.
    pub fn kernel_block_detection(mut self, on: bool) -> Self {
        self.kernel_block_detection = on;
        self
    }

    /// Carve stacks out of large shared mappings without guard pages, so
    /// that the number of live tasks is no longer capped by
    /// `vm.max_map_count` (about 32k guarded stacks). Default `false`.
    ///
    /// An overflow is then caught only after the fact, at the task's next
    /// switch, by a canary band at the stack limit; the process aborts with a
    /// message naming the task, since a neighbouring stack may already be
    /// damaged. Use it with small stacks (16 KiB) for very many light tasks.
    pub fn dense_stacks(mut self, on: bool) -> Self {
        self.dense_stacks = on;
        self
    }

    /// How many finished stacks (of the scheduler's default size) are kept
    /// for reuse, beyond the 64 each Processer keeps. Default 8192.
    ///
    /// A fresh stack costs a `mmap`, an `mprotect`, page faults on first
    /// touch and a `munmap` at the end (about 30 us on a virtual machine,
    /// where the `munmap` also interrupts the other CPUs); a reused one costs
    /// none of that. A cached stack keeps its touched pages resident and, when
    /// guarded, two memory mappings. `0` keeps none beyond the Processers'.
    pub fn stack_cache(mut self, stacks: usize) -> Self {
        self.stack_cache = stacks;
        self
    }

    fn validate(self) -> Result<Config, ConfigError> {
        for (setting, requested) in [
            ("min_threads", self.min_threads),
            ("max_threads", self.max_threads.unwrap_or(0)),
        ] {
            if requested > MAX_THREADS_LIMIT {
                return Err(ConfigError::ThreadCount { setting, requested });
            }
        }
        let min = resolve_min_threads(self.min_threads);
        let max = self.max_threads.unwrap_or(min.max(DEFAULT_MAX_THREADS));
        if max < min {
            return Err(ConfigError::MaxBelowMin { min, max });
        }
        if !stack::valid_stack_size(self.stack_size) {
            return Err(ConfigError::StackSize {
                requested: self.stack_size,
            });
        }
        for (setting, d) in [
            ("block_timeout", self.block_timeout),
            ("dispatch_interval", self.dispatch_interval),
            ("idle_thread_timeout", self.idle_thread_timeout),
        ] {
            if d.is_zero() {
                return Err(ConfigError::ZeroDuration { setting });
            }
        }
        for (setting, requested, min, max) in [
            (
                "dispatch_interval",
                self.dispatch_interval,
                MIN_DISPATCH_INTERVAL,
                MAX_DISPATCH_INTERVAL,
            ),
            (
                "block_timeout",
                self.block_timeout,
                MIN_BLOCK_TIMEOUT.max(self.dispatch_interval),
                MAX_BLOCK_TIMEOUT,
            ),
            (
                "idle_thread_timeout",
                self.idle_thread_timeout,
                MIN_IDLE_THREAD_TIMEOUT,
                MAX_IDLE_THREAD_TIMEOUT,
            ),
        ] {
            if requested < min || requested > max {
                return Err(ConfigError::DurationRange {
                    setting,
                    requested,
                    min,
                    max,
                });
            }
        }
        if self.name.contains('\0') {
            return Err(ConfigError::Name(self.name));
        }
        Ok(Config {
            min_threads: min,
            max_threads: max,
            stack_size: stack::round_to_pages(self.stack_size),
            name: self.name,
            block_timeout: self.block_timeout,
            dispatch_interval: self.dispatch_interval,
            idle_thread_timeout: self.idle_thread_timeout,
            kernel_block_detection: self.kernel_block_detection,
            dense_stacks: self.dense_stacks,
            stack_cache: self.stack_cache,
        })
    }

    /// Validates the settings and starts the core Processer threads and the
    /// Dispatcher.
    ///
    /// Errors: a setting out of range ([`ConfigError`] names it and what it
    /// accepts), or a thread the operating system refuses to start
    /// ([`ConfigError::ThreadStart`]); in the latter case the threads already
    /// started are stopped and joined before `build` returns.
    pub fn build(self) -> Result<Scheduler, ConfigError> {
        let config = self.validate()?;
        crate::overflow::install();
        crate::panic_hook::install();
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
        if let Err(e) = crate::dispatcher::start(&shared) {
            shared.stop_threads();
            let thread = crate::dispatcher::thread_name(&shared.config.name);
            return Err(ConfigError::thread_start(
                thread,
                shared.config.min_threads,
                &e,
            ));
        }
        Ok(Scheduler {
            handle: Arc::new(Handle { shared }),
        })
    }
}

/// `min_threads` with `0` resolved to the number of CPUs (capped at
/// [`MAX_THREADS_LIMIT`]).
fn resolve_min_threads(n: usize) -> usize {
    if n == 0 {
        num_cpus::get().clamp(1, MAX_THREADS_LIMIT)
    } else {
        n
    }
}

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

    /// Spawns `f` as a task on this scheduler.
    ///
    /// # Panics
    /// If the task cannot be spawned (the scheduler is shut down, or no stack
    /// memory is left); use [`Builder::spawn`](crate::Builder::spawn) to get
    /// the [`SpawnError`] instead.
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.handle
            .shared
            .spawn(None, None, None, f)
            .unwrap_or_else(|e| panic!("gofer: cannot spawn a task: {e}"))
    }

    /// Runs `f` as a task and waits for its value. The calling thread runs
    /// `f` (pinned to it) and nothing else: the tasks `f` spawns or wakes run
    /// on the scheduler's Processers, so no unrelated task (one that blocks
    /// its thread, say) can delay `f`'s return.
    ///
    /// Called from inside a task, it spawns `f` and joins it instead (the
    /// calling task parks; its thread keeps working).
    ///
    /// # Panics
    /// Re-raises a panic of `f`, and panics if the task cannot be spawned.
    pub fn block_on<F, T>(&self, f: F) -> T
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let shared = &self.handle.shared;
        if processer::current_task_ptr().is_some() {
            return match self.spawn(f).join() {
                Ok(v) => v,
                Err(e) => resume(e),
            };
        }
        let index = shared.next_index.fetch_add(1, Ordering::Relaxed);
        let (p, worker) = processer::new_processer(index, Kind::Caller);
        processer::bind_thread(&p);
        let local = ProcLocal::new(p.clone(), shared.clone(), worker);
        let root = shared.admit(None, None, Some(index), f, false);
        let (r, handle) = match root {
            Ok(v) => v,
            Err(e) => panic!("gofer: block_on cannot spawn its task: {e}"),
        };
        shared.register(p.clone());
        local.push_initial(r);
        local.run(Some(&|| handle.is_finished()));
        shared.unregister(&p);
        match handle.join() {
            Ok(v) => v,
            Err(e) => resume(e),
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
    /// When called from a task of this same scheduler (it would wait for
    /// itself).
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
    pub fn shutdown_timeout(&self, timeout: Duration) -> Result<(), ShutdownError> {
        self.handle.shared.shutdown(Some(timeout))
    }

    /// The scheduler's name (the thread name prefix).
    pub fn name(&self) -> &str {
        &self.handle.shared.config.name
    }
}

fn resume<T>(e: crate::JoinError) -> T {
    match e.try_into_panic() {
        Ok(p) => std::panic::resume_unwind(p),
        Err(e) => panic!("gofer: {e}"),
    }
}

/// State shared by every Processer, the Dispatcher and the handles.
pub(crate) struct Shared {
    pub(crate) config: Config,
    /// Live Processers, sorted by slot index (copy-on-write: readers clone
    /// the `Arc`). Indices only grow, so a lookup by index is a binary
    /// search ([`find_processer`]).
    procs: RwLock<Arc<Vec<Arc<ProcesserShared>>>>,
    /// +1 at every change of `procs`, so that a Processer can keep its own
    /// copy of the table and refresh it only when it changed.
    procs_gen: AtomicU64,
    /// Next Processer slot index.
    next_index: AtomicUsize,
    /// Round-robin cursor for pushes with no home.
    rr: AtomicUsize,
    /// Tasks admitted and not finished.
    pub(crate) alive: AtomicUsize,
    pub(crate) spawned: AtomicU64,
    pub(crate) completed: AtomicU64,
    /// Idle and searching Processers, and the sleepers stack.
    pub(crate) idle: Idle,
    /// Core + Extra Processer threads alive.
    pub(crate) threads: AtomicUsize,
    pub(crate) threads_started: AtomicU64,
    pub(crate) threads_retired: AtomicU64,
    /// Shutdown requested: spawns from outside are refused.
    closing: AtomicBool,
    /// Shutdown done waiting: Processers exit.
    pub(crate) stopped: AtomicBool,
    /// The last handle was dropped: exit once `alive == 0`.
    pub(crate) detached: AtomicBool,
    done_lock: Mutex<()>,
    done_cv: Condvar,
    /// Held by the call that stops and joins the threads, for as long as it
    /// joins: a concurrent shutdown waits on it, so it too returns only once
    /// every thread has been joined.
    stop_lock: Mutex<()>,
    join_handles: Mutex<Vec<std::thread::JoinHandle<()>>>,
    stack_pool: Mutex<StackPool>,
    /// errno of the last failed stack allocation; 0 when stacks can be had.
    stack_errno: AtomicI32,
    /// Dense-stack arenas by stack size (dense mode only).
    dense: Mutex<Vec<Arc<DenseArena>>>,
    pub(crate) timers: Arc<Timers>,
    pub(crate) dispatch: crate::dispatcher::DispatchState,
}

impl Shared {
    fn new(config: Config) -> Arc<Shared> {
        let timers = Timers::new(config.name.clone());
        let pool = StackPool::new(config.stack_size, config.stack_cache);
        Arc::new(Shared {
            config,
            procs: RwLock::new(Arc::new(Vec::new())),
            procs_gen: AtomicU64::new(0),
            next_index: AtomicUsize::new(0),
            rr: AtomicUsize::new(0),
            alive: AtomicUsize::new(0),
            spawned: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            idle: Idle::new(),
            threads: AtomicUsize::new(0),
            threads_started: AtomicU64::new(0),
            threads_retired: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            detached: AtomicBool::new(false),
            done_lock: Mutex::new(()),
            done_cv: Condvar::new(),
            stop_lock: Mutex::new(()),
            join_handles: Mutex::new(Vec::new()),
            stack_pool: Mutex::new(pool),
            stack_errno: AtomicI32::new(0),
            dense: Mutex::new(Vec::new()),
            timers,
            dispatch: crate::dispatcher::DispatchState::default(),
        })
    }

    /// The live Processers, sorted by slot index.
    pub(crate) fn processers_snapshot(&self) -> Arc<Vec<Arc<ProcesserShared>>> {
        self.procs.read().clone()
    }

    /// The table's generation: it changes whenever the table does. Relaxed:
    /// a reader that sees an old value keeps an older table a little longer,
    /// which only a thief uses, and only as a list of victims.
    pub(crate) fn processers_gen(&self) -> u64 {
        self.procs_gen.load(Ordering::Relaxed)
    }

    pub(crate) fn register(&self, p: Arc<ProcesserShared>) {
        {
            let mut w = self.procs.write();
            let mut v = Vec::with_capacity(w.len() + 1);
            // Indices come from a counter, but two threads may register out
            // of order: insert in place to keep the table sorted.
            let at = w.partition_point(|q| q.index < p.index);
            v.extend_from_slice(&w[..at]);
            v.push(p);
            v.extend_from_slice(&w[at..]);
            *w = Arc::new(v);
            self.procs_gen.fetch_add(1, Ordering::Relaxed);
        }
        self.idle.proc_added();
        // A new Processer is awake: the Dispatcher must watch it.
        crate::dispatcher::processer_awake(self);
    }

    pub(crate) fn unregister(&self, p: &Arc<ProcesserShared>) {
        {
            let mut w = self.procs.write();
            let Ok(at) = w.binary_search_by_key(&p.index, |q| q.index) else {
                return;
            };
            let mut v = Vec::with_capacity(w.len() - 1);
            v.extend_from_slice(&w[..at]);
            v.extend_from_slice(&w[at + 1..]);
            *w = Arc::new(v);
            self.procs_gen.fetch_add(1, Ordering::Relaxed);
        }
        self.idle.proc_removed();
        self.idle.remove(p);
    }

    /// Starts one Processer thread of the given kind.
    pub(crate) fn start_processer(self: &Arc<Self>, kind: Kind) -> io::Result<()> {
        let index = self.next_index.fetch_add(1, Ordering::Relaxed);
        let (p, worker) = processer::new_processer(index, kind);
        let me = self.clone();
        let p2 = p.clone();
        self.threads.fetch_add(1, Ordering::SeqCst);
        self.register(p.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("{}-{}", self.config.name, index))
            .spawn(move || {
                processer::bind_thread(&p2);
                let local = ProcLocal::new(p2.clone(), me.clone(), worker);
                local.run(None);
                drop(local);
                me.processer_exited(&p2);
            });
        match spawned {
            Ok(h) => {
                self.threads_started.fetch_add(1, Ordering::Relaxed);
                let mut hs = self.join_handles.lock();
                // Retired extra threads have exited; forget their handles.
                hs.retain(|h| !h.is_finished());
                hs.push(h);
                Ok(())
            }
            Err(e) => {
                // The Processer was visible (registered) before its thread
                // failed to start: retire it like a leaving one, so that
                // anything pushed to it meanwhile is re-routed (see push_to).
                p.retired.store(true, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                self.unregister(&p);
                self.threads.fetch_sub(1, Ordering::SeqCst);
                for t in processer::drain_retired(&p) {
                    self.push_remote(t);
                }
                Err(e)
            }
        }
    }

    fn processer_exited(&self, p: &Arc<ProcesserShared>) {
        self.unregister(p);
        if p.kind == Kind::Extra {
            self.threads_retired.fetch_add(1, Ordering::Relaxed);
        }
        let left = self.threads.fetch_sub(1, Ordering::SeqCst) - 1;
        if left == 0 && self.detached.load(Ordering::SeqCst) {
            self.timers.stop();
        }
    }

    /// Validates options and admits a task: returns its Runnable (not yet
    /// queued) and the join handle. `inside`: the spawner runs in this
    /// scheduler (allowed while closing).
    fn admit<F, T>(
        self: &Arc<Self>,
        name: Option<String>,
        stack_size: Option<usize>,
        pin: Option<usize>,
        f: F,
        inside: bool,
    ) -> Result<(Runnable, JoinHandle<T>), SpawnError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let stack_size = match stack_size {
            Some(s) if !stack::valid_stack_size(s) => {
                return Err(SpawnError::StackSize { requested: s })
            }
            Some(s) => stack::round_to_pages(s),
            None => self.config.stack_size,
        };
        if self.stack_errno.load(Ordering::Relaxed) != 0 {
            self.probe_stacks()?;
        }
        if self.stopped.load(Ordering::SeqCst) {
            return Err(SpawnError::Shutdown);
        }
        self.alive.fetch_add(1, Ordering::SeqCst);
        if !inside && self.closing.load(Ordering::SeqCst) {
            self.task_finished();
            return Err(SpawnError::Shutdown);
        }
        self.spawned.fetch_add(1, Ordering::Relaxed);
        let (entry, join) = join::entry(f);
        let name = name.map(String::into_boxed_str);
        let header = TaskHeader::new(self.clone(), name.clone(), stack_size, pin, entry);
        let id = header.id;
        let (r, _) = Runnable::new(header);
        Ok((r, JoinHandle::new(join, id, name)))
    }

    /// Spawns a task: the one path behind `go!`, `Builder` and `spawn`.
    pub(crate) fn spawn<F, T>(
        self: &Arc<Self>,
        name: Option<String>,
        stack_size: Option<usize>,
        pin: Option<usize>,
        f: F,
    ) -> Result<JoinHandle<T>, SpawnError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        if let Some(requested) = pin {
            let core = self.config.min_threads;
            if requested >= core {
                return Err(SpawnError::InvalidPin { requested, core });
            }
        }
        let inside = processer::on_scheduler(self);
        let (r, h) = self.admit(name, stack_size, pin, f, inside)?;
        processer::schedule(r);
        Ok(h)
    }

    /// Counts one more alive unit that is not a task yet (a pending user
    /// timer), under the same admission rule as spawns from outside.
    pub(crate) fn hold(&self) -> Result<(), SpawnError> {
        if self.stopped.load(Ordering::SeqCst) {
            return Err(SpawnError::Shutdown);
        }
        self.alive.fetch_add(1, Ordering::SeqCst);
        if self.closing.load(Ordering::SeqCst) {
            self.task_finished();
            return Err(SpawnError::Shutdown);
        }
        Ok(())
    }

    /// A task left its stack for good (or never ran): `alive -= 1`, and
    /// wake whoever waits for zero. (`completed` was counted when its result
    /// was published.)
    pub(crate) fn task_finished(&self) {
        if self.alive.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _g = self.done_lock.lock();
            self.done_cv.notify_all();
            drop(_g);
            if self.detached.load(Ordering::SeqCst) {
                self.wake_all();
            }
        }
    }

    /// Queues a task on a Processer chosen for it, from a thread that is not
    /// one of this scheduler's Processers (or for a task pinned elsewhere).
    pub(crate) fn push_remote(&self, r: Runnable) {
        let procs = self.processers_snapshot();
        let target = self.pick_target(&procs, &r);
        let Some((target, search)) = target else {
            // No Processer left: the scheduler stopped, which needs `alive`
            // at zero, and admission (spawns, user timers) is closed by then,
            // so no task can arrive here. Should one ever do, leak it rather
            // than free the stack of a task that may be suspended.
            debug_assert!(false, "a task was scheduled on a stopped scheduler");
            std::mem::forget(r);
            return;
        };
        if search {
            // Relaxed: published to `target` by the SeqCst CAS in `wake`
            // (as in wake_idle_for_local_work).
            target.search_handoff.store(true, Ordering::Relaxed);
        }
        let pushed = self.push_to(&target, r);
        if pushed && self.wake_proc(&target) {
            return;
        }
        // Not woken by us (awake already, or retired): if it has not taken
        // the search meanwhile, the search goes back. (A swap: exactly one
        // of us gets it.)
        if search && target.search_handoff.swap(false, Ordering::Relaxed) {
            self.idle.end_search();
        }
        if pushed {
            self.wake_idle_for_local_work();
        }
    }

    /// Pushes a task into `target`'s new (or pinned) queue. If `target`
    /// retired meanwhile, re-routes whatever is left there and returns false.
    pub(crate) fn push_to(&self, target: &ProcesserShared, r: Runnable) -> bool {
        if r.header().pin.is_some() {
            target.pinned.push(r);
        } else {
            target.new.push(r);
        }
        // Pairs with the SeqCst store of `retired` (and of `sleeping`): either
        // the retiring Processer drains our task, or we see `retired`.
        fence(Ordering::SeqCst);
        if target.retired.load(Ordering::SeqCst) {
            for t in processer::drain_retired(target) {
                self.push_remote(t);
            }
            return false;
        }
        true
    }

    /// Chooses the Processer for a task pushed from outside, and whether it
    /// is handed a search with it (see `idle.rs`): its pin, its home, a
    /// sleeper if nobody searches, or the next in round-robin order (an
    /// awake one, if one of the next few is).
    ///
    /// No step scans the table: two binary searches, the top of the
    /// sleepers stack, and a round-robin step that stops after
    /// [`AWAKE_TRIES`] usable Processers.
    fn pick_target(
        &self,
        procs: &[Arc<ProcesserShared>],
        r: &Runnable,
    ) -> Option<(Arc<ProcesserShared>, bool)> {
        let usable = |p: &Arc<ProcesserShared>| {
            p.kind != Kind::Caller
                && !p.retired.load(Ordering::Relaxed)
                && !p.blocked.load(Ordering::Relaxed)
        };
        if let Some(pin) = r.header().pin {
            let live = |p: &&Arc<ProcesserShared>| !p.retired.load(Ordering::Relaxed);
            if let Some(p) = find_processer(procs, pin).filter(live) {
                return Some((p.clone(), false));
            }
        }
        let home = r.header().home.load(Ordering::Relaxed);
        if let Some(p) = find_processer(procs, home).filter(|p| usable(p)) {
            return Some((p.clone(), false));
        }
        // Nobody searches: wake a sleeper for the task, and hand it the
        // search (Go's wakep), so that the pushes right behind this one go
        // to awake Processers, where it will steal them, instead of waking a
        // sleeper each. (A sleeper is never blocked in fact: a `blocked`
        // mark on one is stale, and not looked at here.)
        if self.idle.claim_search() {
            if let Some(p) = self.idle.pop_sleeper() {
                return Some((p, true));
            }
            self.idle.end_search();
        }
        let n = procs.len();
        if n == 0 {
            return None;
        }
        let start = self.rr.fetch_add(1, Ordering::Relaxed);
        let mut asleep = None;
        let mut tries = 0;
        for k in 0..n {
            let p = &procs[(start + k) % n];
            if !usable(p) {
                continue;
            }
            if !p.sleeping.load(Ordering::Relaxed) {
                return Some((p.clone(), false));
            }
            asleep.get_or_insert(p);
            tries += 1;
            if tries == AWAKE_TRIES {
                break;
            }
        }
        asleep
            .or_else(|| {
                procs
                    .iter()
                    .find(|p| p.kind != Kind::Caller && !p.retired.load(Ordering::Relaxed))
            })
            .map(|p| (p.clone(), false))
    }

    /// Wakes `p` if it sleeps, keeping the idle count.
    pub(crate) fn wake_proc(&self, p: &ProcesserShared) -> bool {
        if p.wake() {
            self.idle.idle_dec();
            true
        } else {
            false
        }
    }

    /// Work was queued where others may take it: if some Processer sleeps
    /// and none is searching, wake one to search (Go's `wakep`). The woken
    /// Processer is counted as a searcher before it is woken, so that the
    /// pushes right behind this one wake nobody else (see `idle.rs`).
    ///
    /// There is deliberately no fence between the caller's push and these
    /// loads (it would cost every local wake-up): a Processer going to sleep
    /// at that very moment can miss the new task and sleep on. Nothing is
    /// lost: the task sits in the queue of a running Processer, which runs
    /// it in turn, and the Dispatcher wakes a sleeper while others have a
    /// backlog. Pushes to *another* Processer's queue do fence (`push_to`).
    pub(crate) fn wake_idle_for_local_work(&self) {
        if !self.idle.claim_search() {
            return;
        }
        while let Some(p) = self.idle.pop_sleeper() {
            // Relaxed: published to `p` by the SeqCst CAS in `wake`, which it
            // reads before it looks at the flag.
            p.search_handoff.store(true, Ordering::Relaxed);
            if self.wake_proc(&p) {
                return; // `p` owns the search now
            }
            // `p` was awake already. If it took the search meanwhile, it is
            // its; otherwise take it back and try the next sleeper. (A swap:
            // exactly one of us gets it.)
            if !p.search_handoff.swap(false, Ordering::Relaxed) {
                return;
            }
        }
        // Nobody to hand the search to: give it back.
        self.idle.end_search();
    }

    /// Wakes every Processer (stop, detach).
    pub(crate) fn wake_all(&self) {
        for p in self.processers_snapshot().iter() {
            self.wake_proc(p);
            if let Some(t) = p.thread.get() {
                t.unpark();
            }
        }
        crate::dispatcher::wake(self);
    }

    /// Whether the Processer running `local` should leave its loop.
    pub(crate) fn should_exit(&self, local: &ProcLocal) -> bool {
        if self.stopped.load(Ordering::Acquire) {
            return true;
        }
        if self.detached.load(Ordering::SeqCst) && self.alive.load(Ordering::SeqCst) == 0 {
            return true;
        }
        if local.p.kind == Kind::Extra {
            if let Some(since) = local.idle_since.get() {
                return since.elapsed() >= self.config.idle_thread_timeout;
            }
        }
        false
    }

    /// How long a sleeping Processer may sleep before it re-evaluates.
    pub(crate) fn sleep_timeout(&self, local: &ProcLocal) -> Option<Duration> {
        match (local.p.kind, local.idle_since.get()) {
            (Kind::Extra, Some(since)) => Some(
                self.config
                    .idle_thread_timeout
                    .saturating_sub(since.elapsed())
                    .max(Duration::from_millis(1)),
            ),
            _ => None,
        }
    }

    pub(crate) fn new_stack(&self, size: usize) -> io::Result<StackMem> {
        let made = if self.config.dense_stacks {
            self.dense_arena(size).alloc()
        } else {
            StackMem::new(size)
        };
        made.inspect_err(|e| {
            self.stack_errno
                .store(e.raw_os_error().unwrap_or(libc::ENOMEM), Ordering::Relaxed);
        })
    }

    fn dense_arena(&self, size: usize) -> Arc<DenseArena> {
        let mut arenas = self.dense.lock();
        if let Some(a) = arenas.iter().find(|a| a.size() == size) {
            return a.clone();
        }
        let a = DenseArena::new(size);
        arenas.push(a.clone());
        a
    }

    /// The last stack allocation failed: try one now. Stacks may have come
    /// free anywhere in the process since (another scheduler shut down, say),
    /// not only in this scheduler's pools, so waiting for one of our own
    /// tasks to give one back could wait for ever. The stack made goes to
    /// the shared pool for the next task to start.
    fn probe_stacks(&self) -> Result<(), SpawnError> {
        match self.new_stack(self.config.stack_size) {
            Ok(s) => {
                self.give_stacks(vec![s]);
                self.stack_released();
                Ok(())
            }
            Err(e) => Err(SpawnError::StackExhausted {
                live_stacks: stack::live_stacks(),
                source: e,
            }),
        }
    }

    /// Stacks went back to a pool: spawning may succeed again.
    pub(crate) fn stack_released(&self) {
        if self.stack_errno.load(Ordering::Relaxed) != 0 {
            self.stack_errno.store(0, Ordering::Relaxed);
        }
    }

    pub(crate) fn give_stacks(&self, batch: Vec<StackMem>) {
        self.stack_pool.lock().extend(batch);
    }

    pub(crate) fn take_stacks(&self, n: usize) -> Vec<StackMem> {
        self.stack_pool.lock().take_batch(n)
    }

    fn detach(&self) {
        self.detached.store(true, Ordering::SeqCst);
        self.wake_all();
    }

    fn shutdown(&self, timeout: Option<Duration>) -> Result<(), ShutdownError> {
        if processer::current_task_ptr().is_some() && processer::on_scheduler(self) {
            return Err(ShutdownError::FromOwnTask);
        }
        let start = Instant::now();
        // A timeout past what an Instant can hold is no deadline at all.
        let deadline = timeout.and_then(|t| start.checked_add(t));
        let timed_out = || ShutdownError::TimedOut {
            waited: start.elapsed(),
            alive: self.alive.load(Ordering::SeqCst),
        };
        self.closing.store(true, Ordering::SeqCst);
        // Pending after/every timers would hold `alive` up: cancel them.
        self.timers.cancel_user_timers();
        {
            let mut g = self.done_lock.lock();
            while self.alive.load(Ordering::SeqCst) != 0 {
                match deadline {
                    None => self.done_cv.wait(&mut g),
                    Some(deadline) => {
                        if self.done_cv.wait_until(&mut g, deadline).timed_out()
                            && self.alive.load(Ordering::SeqCst) != 0
                        {
                            return Err(timed_out());
                        }
                    }
                }
            }
        }
        // Another call may be joining the threads: wait for it (within the
        // deadline), then find nothing left to join.
        let joining = if processer::on_scheduler(self) {
            // A Processer thread of this scheduler outside any task (a
            // destructor its loop runs) cannot wait to be joined itself.
            match self.stop_lock.try_lock() {
                Some(g) => g,
                None => return Ok(()),
            }
        } else {
            match deadline {
                None => self.stop_lock.lock(),
                Some(deadline) => match self.stop_lock.try_lock_until(deadline) {
                    Some(g) => g,
                    None => return Err(timed_out()),
                },
            }
        };
        self.stop_threads_locked();
        drop(joining);
        Ok(())
    }

    /// Stops and joins every thread of the scheduler.
    fn stop_threads(&self) {
        let _joining = self.stop_lock.lock();
        self.stop_threads_locked();
    }

    /// [`stop_threads`](Self::stop_threads), with `stop_lock` held by the
    /// caller for the whole time, so that a concurrent caller cannot return
    /// while threads are still being joined.
    fn stop_threads_locked(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.wake_all();
        let me = std::thread::current().id();
        let join_all = || {
            let handles = std::mem::take(&mut *self.join_handles.lock());
            for h in handles {
                if h.thread().id() != me {
                    let _ = h.join();
                }
            }
        };
        join_all();
        crate::dispatcher::join(self);
        // An extra Processer the Dispatcher started before it saw `stopped`.
        join_all();
        self.timers.stop();
    }

    fn stats(&self) -> Stats {
        let procs = self.processers_snapshot();
        let processers: Vec<ProcesserStats> = procs
            .iter()
            .map(|p| ProcesserStats {
                id: p.index,
                switches: p.switches.load(Ordering::Relaxed),
                queued: p.queued(),
                blocked: p.blocked.load(Ordering::Relaxed),
                running: p.running.load(Ordering::Relaxed),
                sleeping: p.sleeping.load(Ordering::Relaxed),
                rescued: p.rescued.load(Ordering::Relaxed),
                kind: match p.kind {
                    Kind::Core => "core",
                    Kind::Extra => "extra",
                    Kind::Caller => "caller",
                },
            })
            .collect();
        let d = &self.dispatch;
        Stats {
            threads: self.threads.load(Ordering::Relaxed),
            spawned: self.spawned.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            alive: self.alive.load(Ordering::Relaxed),
            blocked: processers.iter().filter(|p| p.blocked).count(),
            blocked_detections: d.detections.load(Ordering::Relaxed),
            tasks_rescued: d.rescued.load(Ordering::Relaxed),
            threads_started: self.threads_started.load(Ordering::Relaxed),
            threads_retired: self.threads_retired.load(Ordering::Relaxed),
            live_stacks: stack::live_stacks(),
            timers: self.timers.pending(),
            processers,
        }
    }
}

/// The Processer of slot `index` in a table sorted by index (see
/// `Shared::procs`), if it is there.
pub(crate) fn find_processer(
    procs: &[Arc<ProcesserShared>],
    index: usize,
) -> Option<&Arc<ProcesserShared>> {
    procs
        .binary_search_by_key(&index, |p| p.index)
        .ok()
        .map(|i| &procs[i])
}

/// The scheduler to spawn on when none is named: the current task's, else
/// the default one.
pub(crate) fn current_or_default_shared() -> Result<Arc<Shared>, SpawnError> {
    match processer::current_scheduler() {
        Some(s) => Ok(s),
        None => Scheduler::default_scheduler()
            .map(|s| s.handle.shared.clone())
            .map_err(SpawnError::DefaultScheduler),
    }
}
