//! Scheduler configuration: the builder, the accepted range of each
//! setting, and the environment variables of the default scheduler.

use std::time::Duration;

use crate::coroutine::stack;
use crate::coroutine::stacks;
use crate::error::ConfigError;
use crate::runtime::io;

/// Default cap on Processer threads when `max_threads` is not set.
pub const DEFAULT_MAX_THREADS: usize = 64;
// The bound of the thread-count settings lives with the errors that quote
// it (`error.rs`, below this layer).
pub use crate::error::MAX_THREADS_LIMIT;
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
/// Default of `reserve_descriptors`: the descriptor table is sized for this
/// many descriptors, or for the soft `RLIMIT_NOFILE` limit when that is
/// lower (see [`SchedulerBuilder::reserve_descriptors`]).
pub const DEFAULT_RESERVE_DESCRIPTORS: usize = 65_536;
/// Largest accepted `reserve_descriptors`: Linux's default `fs.nr_open`,
/// the most descriptors a process may have unless the system is tuned.
pub const MAX_RESERVE_DESCRIPTORS: usize = 1 << 20;
/// Default cap on the blocking pool's threads (the threads that run the
/// calls of [`unblock`](crate::unblock) and [`fs`](crate::fs)), as in
/// tokio. The pool starts none until a call needs one, so the cap costs
/// nothing unless that many calls block at once; then each thread costs a
/// 2 MiB stack reservation (RSS only for what it touches) and two memory
/// mappings against `vm.max_map_count`. It is high because calls may wait
/// for one another (a call that receives what a later call sends): with
/// too few threads such calls queue behind each other for good.
pub const DEFAULT_BLOCKING_THREADS: usize = 512;
/// Default time a blocking-pool thread stays idle before it exits.
pub const DEFAULT_BLOCKING_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
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
    /// Cap on blocking-pool threads (`runtime/blocking/pool.rs`).
    pub(crate) blocking_threads: usize,
    /// Idle time after which a blocking-pool thread exits.
    pub(crate) blocking_idle_timeout: Duration,
    pub(crate) kernel_block_detection: bool,
    pub(crate) dense_stacks: bool,
    pub(crate) stack_cache: usize,
    /// Started tasks may move between Processers (the user vouched for
    /// their code: see [`SchedulerBuilder::migrate_started_tasks`]).
    pub(crate) migrate_started_tasks: bool,
    /// Report stalls after this long (`SchedulerBuilder::stall_report`).
    pub(crate) stall_report: Option<Duration>,
    /// Descriptors the process's table is sized for at build
    /// (`SchedulerBuilder::reserve_descriptors`); 0 for none.
    pub(crate) reserve_descriptors: usize,
    /// Chaos mode (`GOFER_CHAOS_MIGRATE=1` at build): every switch-out of
    /// an unpinned task files it on another Processer, so that tests run
    /// the runtime's own code across every migration it can make.
    pub(crate) chaos: bool,
    /// How tasks' socket reads and writes reach the kernel: `Epoll` or
    /// `Uring`, never `Auto` (resolved at build by `io/choice.rs`).
    pub(crate) io_driver: IoDriver,
    /// Why `io_driver` runs (`Stats::io_driver_reason`).
    pub(crate) io_driver_reason: String,
}

/// How a scheduler's tasks do their socket IO
/// ([`SchedulerBuilder::io_driver`], or `GOFER_IO`). Which one runs, and
/// why, is in [`Stats::io_driver`](crate::Stats::io_driver) and
/// [`Stats::io_driver_reason`](crate::Stats::io_driver_reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum IoDriver {
    /// The runtime chooses (the default): io_uring only where the kernel
    /// offers it and the benchmarks show it ahead of epoll, epoll
    /// otherwise (io_uring missing, disabled, too old for the operations
    /// the driver uses, or not ahead). While the benchmarks do not show
    /// the ring ahead, `Auto` runs epoll without probing io_uring.
    #[default]
    Auto,
    /// Readiness: an operation is tried at once, and a task whose socket
    /// would block parks until epoll reports it ready.
    Epoll,
    /// Completion: a stream read or write of a task bound to a core
    /// Processer is handed to that Processer's io_uring as one entry, and
    /// the task parks until its completion arrives; the Processer submits
    /// what its tasks queued and reaps completions once per turn of its
    /// loop. Everything else (accept, connect, datagrams, the `hooks`
    /// feature, tasks on `block_on` callers and extra Processers) waits
    /// through epoll as with [`Epoll`](Self::Epoll). Building fails with
    /// [`ConfigError::IoDriver`] where the kernel offers no io_uring
    /// (too old, `kernel.io_uring_disabled`, a seccomp profile).
    Uring,
}

/// Configures and starts a [`Scheduler`](crate::Scheduler).
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
    blocking_threads: usize,
    blocking_idle_timeout: Duration,
    kernel_block_detection: bool,
    dense_stacks: bool,
    stack_cache: usize,
    migrate_started_tasks: bool,
    stall_report: Option<Duration>,
    reserve_descriptors: usize,
    io_driver: Option<IoDriver>,
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
            blocking_threads: DEFAULT_BLOCKING_THREADS,
            blocking_idle_timeout: DEFAULT_BLOCKING_IDLE_TIMEOUT,
            kernel_block_detection: true,
            dense_stacks: false,
            stack_cache: stacks::DEFAULT_STACK_CACHE,
            migrate_started_tasks: false,
            stall_report: None,
            reserve_descriptors: DEFAULT_RESERVE_DESCRIPTORS,
            io_driver: None,
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
    /// [`Scheduler::block_on`](crate::Scheduler::block_on) are not counted: they belong to the caller.
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

    /// The cap on the blocking pool's threads, which run the calls of
    /// [`unblock`](crate::unblock) and [`fs`](crate::fs) while their tasks
    /// park. The pool starts a thread when a call finds none idle, up to
    /// this cap; further calls wait in a queue for a thread to come free
    /// ([`Stats::blocking_queued`](crate::Stats::blocking_queued)).
    /// Default [`DEFAULT_BLOCKING_THREADS`] (512). Accepted: 1 to
    /// [`MAX_THREADS_LIMIT`] (4096).
    pub fn blocking_threads(mut self, n: usize) -> Self {
        self.blocking_threads = n;
        self
    }

    /// How long a blocking-pool thread stays idle before it exits. Default
    /// [`DEFAULT_BLOCKING_IDLE_TIMEOUT`] (10 s). Accepted:
    /// [`MIN_IDLE_THREAD_TIMEOUT`] (1 ms) to [`MAX_IDLE_THREAD_TIMEOUT`]
    /// (1 day).
    pub fn blocking_idle_timeout(mut self, d: Duration) -> Self {
        self.blocking_idle_timeout = d;
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
    /// A fresh stack costs a `mmap`, a guard page (`madvise` or, on kernels
    /// before 6.13, `mprotect`), page faults on first touch and a `munmap`
    /// at the end (some tens of microseconds on a virtual machine, where the
    /// `munmap` also interrupts the other CPUs); a reused one costs none of
    /// that. A cached stack keeps its touched pages resident and, when
    /// guarded, one memory mapping (two before Linux 6.13). `0` keeps none
    /// beyond the Processers'.
    pub fn stack_cache(mut self, stacks: usize) -> Self {
        self.stack_cache = stacks;
        self
    }

    /// Lets every task of this scheduler move to another Processer after it
    /// has started (off by default; [`Builder::migratable`](crate::Builder::migratable)
    /// does it for one task).
    ///
    /// By default a task runs on the Processer where it first ran, from its
    /// first switch to its end: stealing and the Dispatcher's rescue move
    /// only tasks that have not started, and a started task woken while its
    /// Processer is blocked waits for that Processer. Moving started tasks
    /// lets an idle Processer take over woken tasks and the Dispatcher
    /// rescue them from a blocked thread, which helps a skewed load and
    /// code that blocks its thread.
    ///
    /// # Safety
    ///
    /// A task that moves resumes on another OS thread after a switch point.
    /// The compiler assumes a function runs on one thread: it may compute a
    /// thread-local's address once and use it on both sides of a call that
    /// switches, and after a move that address is the old thread's (a data
    /// race, or a write into freed memory if that thread exited). So every
    /// task of this scheduler must be such that **no function touches a
    /// thread-local (`thread_local!`, `#[thread_local]`, `errno`, a C
    /// library's thread-local state) both before and after a switch point**,
    /// counting the code inlined into it: its own callees, generic code
    /// instantiated for it, and anything cross-crate inlining or LTO brings
    /// in. Holding a reference into a thread-local, or a value tied to its
    /// thread (a `MutexGuard` of `std::sync`, an `Rc` shared with the
    /// thread), across a switch point is excluded too.
    ///
    /// The switch points are every call that can park or yield the task:
    /// `gofer::yield_now`, `park`, `sleep`, `JoinHandle::join`,
    /// `block_on_future`, every blocking operation of `gofer::sync`,
    /// `gofer::chan` and `gofer::net` (reads, writes, accept, connect, and
    /// any socket call, which may yield to spend its IO budget), a fiber's
    /// or generator's `resume`/`suspend` when they switch the task, and,
    /// with the `hooks` feature, every hooked libc call (`read`, `write`,
    /// `recv`, `send`, `accept`, `connect`, `poll`, the sleeps, ...) made on a
    /// socket or pipe. Thread-local accesses through functions that the
    /// compiler cannot inline into the caller (`#[inline(never)]`
    /// accessors that never switch themselves) are fine.
    pub unsafe fn migrate_started_tasks(mut self, on: bool) -> Self {
        self.migrate_started_tasks = on;
        self
    }

    /// Reports stalls: when every task of the scheduler has been parked for
    /// `after`, with no timer due (a pending `timer::after` or `every`
    /// counts) and no socket to wait for (nothing but one another or a
    /// plain thread can wake them), print "stall: all N tasks
    /// parked for ..." and a task dump ([`Scheduler::dump`]) to stderr, once
    /// per stall. Go calls this a deadlock and exits; here a plain thread
    /// could still wake the tasks, so the report is all that happens. Off
    /// by default; when on, a thread of the scheduler looks every
    /// `after / 4` (at most every second) at counters that cost nothing to
    /// read, and takes a dump only once they stood still for `after`.
    ///
    /// It also reports a partial stall: a Processer thread that the
    /// Dispatcher marked blocked (its running task has not switched out:
    /// a blocking call, a long computation) and that has held so for
    /// `after` while started tasks that can run on no other thread are
    /// runnable behind it. The report, "stall: thread gofer-1 blocked for
    /// ... in task 17 'worker' ...", names the thread, the task, how long,
    /// and how many tasks wait, then prints a dump; once per blocked spell.
    /// The Dispatcher runs only with `max_threads` of 2 or more.
    ///
    /// [`Scheduler::dump`]: crate::Scheduler::dump
    pub fn stall_report(mut self, after: Duration) -> Self {
        self.stall_report = Some(after);
        self
    }

    /// Sizes the process's descriptor table for `n` descriptors when the
    /// scheduler is built, on the building thread, before its Processers
    /// start. Default [`DEFAULT_RESERVE_DESCRIPTORS`] (65,536); accepted 0
    /// (leave the table alone) to [`MAX_RESERVE_DESCRIPTORS`] (1,048,576).
    /// The size is lowered to the process's soft `RLIMIT_NOFILE` limit (no
    /// descriptor past it can be opened); raise that limit before `build`
    /// for a larger table.
    ///
    /// The kernel sizes the table for the highest descriptor number in use
    /// and grows it by doubling: when a new socket or accepted connection
    /// needs a number past its end, the thread that asked waits in the
    /// kernel (for an RCU grace period, in a process with threads) before
    /// it gets its descriptor. On a Processer that is a blocked Processer,
    /// met again at each doubling by a burst of new connections. The
    /// kernel never shrinks the table, so sizing it once at build takes
    /// those waits off the Processers.
    ///
    /// The cost is kernel memory, once per process: about 8 bytes per
    /// entry, 512 KiB for the default when the limit allows it (with the
    /// common soft limit of 1,024, 8 KiB). The default covers a server's
    /// connections up to the point where it would size its limit and this
    /// setting on purpose; past it the table grows as before. Building
    /// another scheduler costs a few system calls, the table being large
    /// already.
    ///
    /// A table that cannot be grown (no descriptor left for the attempt,
    /// no kernel memory) does not fail `build`: the scheduler works the
    /// same, and the table grows as descriptors are opened.
    pub fn reserve_descriptors(mut self, n: usize) -> Self {
        self.reserve_descriptors = n;
        self
    }

    /// Which IO driver the scheduler's tasks use (see [`IoDriver`]). Not
    /// set, the `GOFER_IO` environment variable decides (`auto`, `epoll`
    /// or `uring`; another value fails the build with
    /// [`ConfigError::IoDriver`]), and without it [`IoDriver::Auto`].
    /// Asking for [`IoDriver::Uring`] where io_uring is unavailable fails
    /// the build with [`ConfigError::IoDriver`]: no silent fallback, so a
    /// benchmark or a test never measures the other driver by mistake.
    /// Each such build sets up a ring afresh (io_uring refused since an
    /// earlier build fails this one); a ring that fails later, on one
    /// Processer, is reported in
    /// [`Stats::io_driver_reason`](crate::Stats::io_driver_reason).
    pub fn io_driver(mut self, driver: IoDriver) -> Self {
        self.io_driver = Some(driver);
        self
    }

    pub(crate) fn validate(self) -> Result<Config, ConfigError> {
        for (setting, requested) in [
            ("min_threads", self.min_threads),
            ("max_threads", self.max_threads.unwrap_or(0)),
        ] {
            if requested > MAX_THREADS_LIMIT {
                return Err(ConfigError::ThreadCount { setting, requested });
            }
        }
        if self.blocking_threads == 0 || self.blocking_threads > MAX_THREADS_LIMIT {
            return Err(ConfigError::ThreadCount {
                setting: "blocking_threads",
                requested: self.blocking_threads,
            });
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
            ("blocking_idle_timeout", self.blocking_idle_timeout),
            ("stall_report", self.stall_report.unwrap_or(Duration::MAX)),
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
            (
                "blocking_idle_timeout",
                self.blocking_idle_timeout,
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
        if self.reserve_descriptors > MAX_RESERVE_DESCRIPTORS {
            return Err(ConfigError::DescriptorReserve {
                requested: self.reserve_descriptors,
                max: MAX_RESERVE_DESCRIPTORS,
            });
        }
        if self.name.contains('\0') {
            return Err(ConfigError::Name(self.name));
        }
        let (requested, source) =
            io::choice::requested(self.io_driver, std::env::var_os("GOFER_IO").as_deref())?;
        let probe = if requested == IoDriver::Uring {
            io::choice::probe_forced
        } else {
            io::choice::probe_once
        };
        let (io_driver, io_driver_reason) =
            io::choice::resolve(requested, source, io::choice::URING_AHEAD, probe)?;
        if io_driver == IoDriver::Uring {
            io::uring::note_driver_built();
        }
        Ok(Config {
            min_threads: min,
            max_threads: max,
            stack_size: stack::round_to_pages(self.stack_size),
            name: self.name,
            block_timeout: self.block_timeout,
            dispatch_interval: self.dispatch_interval,
            idle_thread_timeout: self.idle_thread_timeout,
            blocking_threads: self.blocking_threads,
            blocking_idle_timeout: self.blocking_idle_timeout,
            kernel_block_detection: self.kernel_block_detection,
            dense_stacks: self.dense_stacks,
            stack_cache: self.stack_cache,
            migrate_started_tasks: self.migrate_started_tasks,
            stall_report: self.stall_report,
            reserve_descriptors: self.reserve_descriptors,
            chaos: std::env::var_os("GOFER_CHAOS_MIGRATE").is_some_and(|v| v == "1"),
            io_driver,
            io_driver_reason,
        })
    }
}

/// `min_threads` with `0` resolved to the number of CPUs (capped at
/// [`MAX_THREADS_LIMIT`]).
pub(crate) fn resolve_min_threads(n: usize) -> usize {
    if n == 0 {
        num_cpus::get().clamp(1, MAX_THREADS_LIMIT)
    } else {
        n
    }
}
