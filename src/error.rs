//! Error types: what went wrong, and the accepted range where there is one.
//!
//! Every error here has a `Display` that a user can act on without reading
//! the source: it names the setting or resource and says what would be
//! accepted instead. A bound that a message quotes and no lower layer owns
//! ([`MAX_THREADS_LIMIT`]) is defined here, so that the errors sit below
//! everything that reports them.

use std::any::Any;
use std::fmt;
use std::time::Duration;

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

/// A [`SchedulerBuilder`](crate::SchedulerBuilder) setting, or an environment
/// variable feeding the default scheduler, is out of range.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `max_threads` is smaller than `min_threads` once `0` has been resolved
    /// to the number of CPUs.
    MaxBelowMin {
        /// The resolved `min_threads`.
        min: usize,
        /// The requested `max_threads`.
        max: usize,
    },
    /// A stack size below [`MIN_STACK_SIZE`](crate::MIN_STACK_SIZE) or above
    /// [`MAX_STACK_SIZE`](crate::MAX_STACK_SIZE).
    StackSize {
        /// The requested size in bytes.
        requested: usize,
    },
    /// A duration setting was zero; the name is the builder method.
    ZeroDuration {
        /// The builder method that received the zero duration.
        setting: &'static str,
    },
    /// An environment variable read for the default scheduler is malformed.
    Env {
        /// The variable's name.
        var: &'static str,
        /// Its value as found.
        value: String,
    },
    /// The thread name given to the builder contains a NUL byte.
    Name(String),
    /// `min_threads`, `max_threads` or `blocking_threads` is above
    /// [`MAX_THREADS_LIMIT`](MAX_THREADS_LIMIT), or
    /// `blocking_threads` is 0. (A `max_threads` of 0 is below every
    /// `min_threads`, and reported as [`MaxBelowMin`](Self::MaxBelowMin).)
    ThreadCount {
        /// The builder method that received the count.
        setting: &'static str,
        /// The requested count.
        requested: usize,
    },
    /// A non-zero duration setting is outside its accepted range; the name
    /// is the builder method. For `block_timeout`, `min` is raised to the
    /// `dispatch_interval` when that is longer.
    DurationRange {
        /// The builder method that received the duration.
        setting: &'static str,
        /// The requested duration.
        requested: Duration,
        /// The shortest accepted duration.
        min: Duration,
        /// The longest accepted duration.
        max: Duration,
    },
    /// An environment variable read for the default scheduler holds a whole
    /// number outside the range its setting accepts.
    EnvRange {
        /// The variable's name.
        var: &'static str,
        /// Its value.
        value: usize,
        /// The smallest accepted value (for `GOFER_MAX_THREADS`, the resolved
        /// `min_threads`).
        min: usize,
        /// The largest accepted value.
        max: usize,
    },
    /// The operating system refused to start one of the scheduler's threads
    /// while [`build`](crate::SchedulerBuilder::build) ran (too many threads
    /// for its limits, or no memory for another thread stack). The threads
    /// already started were stopped and joined before `build` returned.
    ThreadStart {
        /// The name of the thread that could not start.
        thread: String,
        /// How many threads of the scheduler had started (and were stopped).
        started: usize,
        /// The operating system's error number, when there is one.
        errno: Option<i32>,
        /// The operating system's error, as text.
        error: String,
    },
    /// [`reserve_descriptors`](crate::SchedulerBuilder::reserve_descriptors)
    /// is above [`MAX_RESERVE_DESCRIPTORS`](crate::MAX_RESERVE_DESCRIPTORS).
    DescriptorReserve {
        /// The requested number of descriptors.
        requested: usize,
        /// The largest accepted number.
        max: usize,
    },
    /// The IO driver asked for ([`SchedulerBuilder::io_driver`](crate::SchedulerBuilder::io_driver)
    /// or `GOFER_IO`) cannot be had: io_uring is missing, disabled
    /// (`kernel.io_uring_disabled`, a seccomp profile) or lacks an
    /// operation the driver uses, or `GOFER_IO` names no driver.
    IoDriver {
        /// The driver asked for, as named.
        requested: String,
        /// Why it cannot be had.
        reason: String,
    },
}

impl ConfigError {
    /// A thread of the scheduler named `thread` could not start after
    /// `started` others had.
    pub(crate) fn thread_start(thread: String, started: usize, e: &std::io::Error) -> ConfigError {
        ConfigError::ThreadStart {
            thread,
            started,
            errno: e.raw_os_error(),
            error: e.to_string(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::MaxBelowMin { min, max } => write!(
                f,
                "max_threads ({max}) is below min_threads ({min}); max_threads accepts \
                 {min} to {limit} (at least min_threads), and min_threads accepts 0 to {limit} \
                 (a min_threads of 0 stands for the number of CPUs)",
                limit = MAX_THREADS_LIMIT
            ),
            ConfigError::StackSize { requested } => write!(
                f,
                "stack size {requested} bytes is out of range; accepted: {} to {} bytes",
                crate::MIN_STACK_SIZE,
                crate::MAX_STACK_SIZE
            ),
            ConfigError::ZeroDuration { setting } => {
                write!(f, "{setting} must be a non-zero duration")
            }
            ConfigError::Env { var, value } => write!(
                f,
                "environment variable {var}={value:?} is not valid; expected a whole number \
                 of threads: {}",
                env_accepts(var)
            ),
            ConfigError::Name(name) => {
                write!(f, "thread name {name:?} contains a NUL byte")
            }
            ConfigError::ThreadCount { setting, requested } => write!(
                f,
                "{setting} ({requested}) is out of range; {}",
                threads_accepted(setting)
            ),
            ConfigError::DurationRange {
                setting,
                requested,
                min,
                max,
            } => {
                write!(
                    f,
                    "{setting} ({requested:?}) is out of range; accepted: {min:?} to {max:?}"
                )?;
                if *setting == "block_timeout" {
                    write!(
                        f,
                        " (block_timeout may not be shorter than dispatch_interval)"
                    )?;
                }
                Ok(())
            }
            ConfigError::EnvRange {
                var,
                value,
                min,
                max,
            } => {
                write!(
                    f,
                    "environment variable {var}={value} is out of range; accepted: {min}"
                )?;
                if *min == 0 {
                    write!(f, " (one Processer per CPU)")?;
                }
                write!(f, " to {max}")?;
                if *var == "GOFER_MAX_THREADS" {
                    write!(f, " (at least 1, and not below min_threads, here {min})")?;
                }
                Ok(())
            }
            ConfigError::ThreadStart {
                thread,
                started,
                error,
                ..
            } => {
                write!(f, "cannot start thread {thread:?}: {error}; ")?;
                match started {
                    0 => write!(f, "no other thread of the scheduler had started")?,
                    n => write!(
                        f,
                        "the {n} thread(s) of the scheduler already started were stopped"
                    )?,
                }
                write!(
                    f,
                    " (fewer min_threads, or a higher limit on threads or memory, lets it start)"
                )
            }
            ConfigError::DescriptorReserve { requested, max } => write!(
                f,
                "reserve_descriptors ({requested}) is out of range; accepted: 0 (leave the \
                 descriptor table alone) to {max}"
            ),
            ConfigError::IoDriver { requested, reason } => write!(
                f,
                "IO driver {requested:?} is unavailable: {reason}; accepted: auto (always), \
                 epoll (always), uring (where the kernel offers io_uring)"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// What a thread-count builder setting accepts, as text.
fn threads_accepted(setting: &str) -> String {
    let limit = MAX_THREADS_LIMIT;
    if setting == "max_threads" {
        format!("max_threads accepts 1 to {limit}, and not below min_threads")
    } else if setting == "blocking_threads" {
        format!("blocking_threads accepts 1 to {limit}")
    } else {
        format!("{setting} accepts 0 (one Processer per CPU) to {limit}")
    }
}

/// What a thread-count environment variable accepts, as text.
fn env_accepts(var: &str) -> String {
    let limit = MAX_THREADS_LIMIT;
    if var == "GOFER_MAX_THREADS" {
        format!("{var} accepts 1 to {limit}, and not below min_threads")
    } else {
        format!("{var} accepts 0 (one Processer per CPU) to {limit}")
    }
}

/// Why [`Builder::spawn`](crate::Builder::spawn) could not start a task.
#[derive(Debug)]
#[non_exhaustive]
pub enum SpawnError {
    /// The requested stack size is out of range.
    StackSize {
        /// The requested size in bytes.
        requested: usize,
    },
    /// The operating system refused memory for another coroutine stack.
    ///
    /// With guarded stacks every stack costs two memory mappings, so the
    /// kernel's `vm.max_map_count` caps the number of live tasks. gofer stops
    /// at `(vm.max_map_count - 4096) / 2` guarded stacks (30,717 at the usual
    /// 65,530), leaving mappings for the rest of the process: past the
    /// kernel's limit any allocation could fail and abort. Finish or free
    /// tasks, raise the limit, or use dense stacks.
    StackExhausted {
        /// Live stacks owned by the scheduler when the failure was seen.
        live_stacks: usize,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// `pin(n)` named a Processer that does not exist; pinning is to one of
    /// the `min_threads` core Processers.
    InvalidPin {
        /// The requested Processer index.
        requested: usize,
        /// The number of core Processers (valid indices are `0..core`).
        core: usize,
    },
    /// The scheduler is shutting down or has shut down.
    Shutdown,
    /// The default scheduler could not be started.
    DefaultScheduler(ConfigError),
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpawnError::StackSize { requested } => write!(
                f,
                "stack size {requested} bytes is out of range; accepted: {} to {} bytes",
                crate::MIN_STACK_SIZE,
                crate::MAX_STACK_SIZE
            ),
            SpawnError::StackExhausted {
                live_stacks,
                source,
            } => write!(
                f,
                "cannot allocate a coroutine stack ({source}) with {live_stacks} stacks live; \
                 guarded stacks cost two memory mappings each, and gofer keeps them to \
                 (vm.max_map_count - 4096) / 2 (30717 at 65530) so the rest of the process can \
                 still allocate: let tasks finish, raise vm.max_map_count, or build the \
                 scheduler with dense_stacks(true)"
            ),
            SpawnError::InvalidPin { requested, core } => write!(
                f,
                "cannot pin to Processer {requested}: this scheduler has {core} core Processers \
                 (valid: 0..{core})"
            ),
            SpawnError::Shutdown => write!(f, "the scheduler is shutting down"),
            SpawnError::DefaultScheduler(e) => {
                write!(f, "cannot start the default scheduler: {e}")
            }
        }
    }
}

impl std::error::Error for SpawnError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SpawnError::StackExhausted { source, .. } => Some(source),
            SpawnError::DefaultScheduler(e) => Some(e),
            _ => None,
        }
    }
}

/// [`Scheduler::shutdown_timeout`](crate::Scheduler::shutdown_timeout) gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShutdownError {
    /// Tasks were still alive when the timeout ran out. The scheduler keeps
    /// running them; calling `shutdown` again waits for them.
    TimedOut {
        /// How long was waited.
        waited: Duration,
        /// Tasks spawned and not yet finished.
        alive: usize,
    },
    /// Called from a task of the same scheduler: that task can never finish
    /// while it waits for every task to finish.
    FromOwnTask,
}

impl fmt::Display for ShutdownError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShutdownError::TimedOut { waited, alive } => write!(
                f,
                "shutdown timed out after {waited:?} with {alive} task(s) still alive"
            ),
            ShutdownError::FromOwnTask => write!(
                f,
                "shutdown called from a task of the same scheduler, which would wait for itself"
            ),
        }
    }
}

impl std::error::Error for ShutdownError {}

/// A wait given up because a [`CancelToken`](crate::task::CancelToken) was
/// cancelled, as from
/// [`Semaphore::acquire_cancellable`](crate::sync::Semaphore::acquire_cancellable).
///
/// Not to be confused with a *task* cancelled by
/// [`JoinHandle::cancel`](crate::JoinHandle::cancel), which unwinds
/// ([`JoinError::is_cancelled`]): a token is a value the waiting code
/// chose to watch, and it answers with this error, to be handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Cancelled;

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the wait's cancel token was cancelled")
    }
}

impl std::error::Error for Cancelled {}

/// `unwrap_or_else(|e| panic!(...))` for the public calls that panic on an
/// error: a closure cannot carry `#[track_caller]`, so a panic inside one
/// reports gofer's line; this reports the line of whoever called the
/// `#[track_caller]` function that calls it.
pub(crate) trait OrPanic<T> {
    /// The value, or a panic saying `what: error`.
    #[track_caller]
    fn or_panic(self, what: &str) -> T;
}

impl<T, E: fmt::Display> OrPanic<T> for Result<T, E> {
    #[track_caller]
    fn or_panic(self, what: &str) -> T {
        match self {
            Ok(v) => v,
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// A joined task did not produce its value.
///
/// `Send + Sync`, so `join()?` works into `Box<dyn Error + Send + Sync>`
/// and error types built on it.
pub struct JoinError {
    repr: JoinErrorRepr,
}

enum JoinErrorRepr {
    /// The panic payload is `Send` but need not be `Sync`: behind a mutex,
    /// shared access to the error (its `Display`) locks it for a moment, so
    /// the error is `Sync` with no `unsafe`.
    Panic(std::sync::Mutex<Box<dyn Any + Send + 'static>>),
    StackExhausted(std::io::Error),
    /// The task was cancelled, and unwound (or never ran).
    Cancelled,
}

/// The payload out of its mutex. Nothing panics while holding the lock (a
/// downcast and a string copy), so it is never poisoned; a poisoned one
/// would still hold the payload.
fn unlock(m: std::sync::Mutex<Box<dyn Any + Send + 'static>>) -> Box<dyn Any + Send + 'static> {
    m.into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `f` on the payload, under its mutex.
fn with_payload<R>(
    m: &std::sync::Mutex<Box<dyn Any + Send + 'static>>,
    f: impl FnOnce(&(dyn Any + Send)) -> R,
) -> R {
    let g = m.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    f(g.as_ref())
}

impl JoinError {
    pub(crate) fn panic(payload: Box<dyn Any + Send + 'static>) -> JoinError {
        JoinError {
            repr: JoinErrorRepr::Panic(std::sync::Mutex::new(payload)),
        }
    }

    pub(crate) fn cancelled() -> JoinError {
        JoinError {
            repr: JoinErrorRepr::Cancelled,
        }
    }

    /// Whether the task was cancelled ([`JoinHandle::cancel`](crate::JoinHandle::cancel)):
    /// it unwound from a wait, or never ran.
    pub fn is_cancelled(&self) -> bool {
        matches!(self.repr, JoinErrorRepr::Cancelled)
    }

    pub(crate) fn stack_exhausted(e: std::io::Error) -> JoinError {
        JoinError {
            repr: JoinErrorRepr::StackExhausted(e),
        }
    }

    /// Whether the task panicked.
    pub fn is_panic(&self) -> bool {
        matches!(self.repr, JoinErrorRepr::Panic(_))
    }

    /// Whether the task never ran because no stack could be allocated for it.
    pub fn is_stack_exhausted(&self) -> bool {
        matches!(self.repr, JoinErrorRepr::StackExhausted(_))
    }

    /// The original panic payload, for `std::panic::resume_unwind` or
    /// inspection.
    ///
    /// # Panics
    /// If the error is not a panic (see [`is_panic`](Self::is_panic)).
    #[track_caller]
    pub fn into_panic(self) -> Box<dyn Any + Send + 'static> {
        match self.repr {
            JoinErrorRepr::Panic(p) => unlock(p),
            JoinErrorRepr::StackExhausted(_) | JoinErrorRepr::Cancelled => {
                panic!("JoinError::into_panic called on a non-panic error: {self}")
            }
        }
    }

    /// The original panic payload, or `Err(self)` if the task did not panic.
    pub fn try_into_panic(self) -> Result<Box<dyn Any + Send + 'static>, JoinError> {
        match self.repr {
            JoinErrorRepr::Panic(p) => Ok(unlock(p)),
            repr => Err(JoinError { repr }),
        }
    }
}

/// Runs `f`, which drops user values where a panic must go no further (on
/// a Processer's stack, at a task's root frame, in a handle's `Drop`): a
/// panicking destructor is reported on stderr as
/// `gofer: a destructor panicked while dropping {what}: {message}`.
pub(crate) fn contain(what: impl fmt::Display, f: impl FnOnce()) {
    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        let m = panic_message(p.as_ref()).unwrap_or("<non-string payload>");
        eprintln!("gofer: a destructor panicked while dropping {what}: {m}");
        // The payload itself may panic when dropped: leak it rather than
        // let that unwind on.
        std::mem::forget(p);
    }
}

/// The message of a panic payload, when it is a string.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> Option<&str> {
    payload
        .downcast_ref::<&'static str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            JoinErrorRepr::Panic(p) => with_payload(p, |p| {
                f.debug_tuple("JoinError::Panic")
                    .field(&panic_message(p).unwrap_or("<non-string payload>"))
                    .finish()
            }),
            JoinErrorRepr::StackExhausted(e) => {
                f.debug_tuple("JoinError::StackExhausted").field(e).finish()
            }
            JoinErrorRepr::Cancelled => f.write_str("JoinError::Cancelled"),
        }
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            JoinErrorRepr::Panic(p) => with_payload(p, |p| match panic_message(p) {
                Some(m) => write!(f, "task panicked: {m}"),
                None => write!(f, "task panicked"),
            }),
            JoinErrorRepr::StackExhausted(e) => write!(
                f,
                "task never ran: no stack could be allocated for it ({e}); \
                 guarded stacks are capped by vm.max_map_count"
            ),
            JoinErrorRepr::Cancelled => f.write_str("task was cancelled"),
        }
    }
}

impl std::error::Error for JoinError {}
