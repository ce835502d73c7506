//! [`Builder`]: spawning a task with options, and the [`go!`](crate::go) macro.

use super::join::JoinHandle;
use super::spawn::spawn_at;
use crate::error::OrPanic;
use crate::error::SpawnError;
use crate::runtime::scheduler::{with_current_or_default_shared, Scheduler};

/// Options for one task: name, stack size, pin, scheduler.
///
/// ```
/// let sched = gofer::Scheduler::builder().min_threads(2).build()?;
/// let h = gofer::Builder::new()
///     .name("adder")
///     .stack_size(64 * 1024)
///     .pin(0)
///     .scheduler(&sched)
///     .spawn(|| 40 + 2)?;
/// assert_eq!(h.join().unwrap(), 42);
/// sched.shutdown();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default)]
#[must_use = "a builder does nothing until spawn() is called"]
pub struct Builder {
    // Read by `Builder::spawn_scoped` (scope.rs) too.
    pub(super) name: Option<String>,
    pub(super) stack_size: Option<usize>,
    pub(super) pin: Option<usize>,
    pub(super) migratable: bool,
    pub(super) scheduler: Option<Scheduler>,
}

impl Builder {
    /// A builder with no options set: unnamed, the scheduler's stack size,
    /// not pinned, on the current task's scheduler (else the default one).
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Names the task (shown in stack overflow reports and
    /// [`current_name`](crate::current_name)).
    pub fn name(mut self, name: impl Into<String>) -> Builder {
        self.name = Some(name.into());
        self
    }

    /// The task's stack size in bytes, rounded up to whole pages; accepted
    /// [`MIN_STACK_SIZE`](crate::MIN_STACK_SIZE) to
    /// [`MAX_STACK_SIZE`](crate::MAX_STACK_SIZE).
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.stack_size = Some(bytes);
        self
    }

    /// Pins the task to core Processer `index` (`0..min_threads`): it runs
    /// only on that thread and is never stolen or rescued. Use this for code
    /// that relies on thread-local state across yields.
    pub fn pin(mut self, index: usize) -> Builder {
        self.pin = Some(index);
        self
    }

    /// Lets this task move to another Processer after it has started, as
    /// [`SchedulerBuilder::migrate_started_tasks`](crate::SchedulerBuilder::migrate_started_tasks)
    /// does for a whole scheduler. By default a task stays on the Processer
    /// where it first ran.
    ///
    /// # Safety
    ///
    /// The task's code must keep the rule stated at
    /// [`SchedulerBuilder::migrate_started_tasks`](crate::SchedulerBuilder::migrate_started_tasks):
    /// no function touches a thread-local both before and after a switch
    /// point (inlined code included), and no reference into a thread-local
    /// or thread-bound value is held across one.
    pub unsafe fn migratable(mut self) -> Builder {
        self.migratable = true;
        self
    }

    /// The scheduler to spawn on.
    pub fn scheduler(mut self, sched: &Scheduler) -> Builder {
        self.scheduler = Some(sched.clone());
        self
    }

    /// Spawns `f` as a task.
    ///
    /// Errors: a stack size out of range, a pin to a Processer that does not
    /// exist, a scheduler that is shutting down, no stack memory left, or a
    /// default scheduler that cannot start.
    #[track_caller]
    pub fn spawn<F, T>(self, f: F) -> Result<JoinHandle<T>, SpawnError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let at = std::panic::Location::caller();
        let Builder {
            name,
            stack_size,
            pin,
            migratable,
            scheduler,
        } = self;
        match scheduler {
            Some(s) => spawn_at(s.shared(), name, stack_size, pin, migratable, at, f),
            None => with_current_or_default_shared(|shared| {
                spawn_at(shared, name, stack_size, pin, migratable, at, f)
            })?,
        }
    }
}

/// Spawns a closure as a task on the current task's scheduler (else the
/// default scheduler) and returns its [`JoinHandle`].
///
/// The closure and its value must be `'static`, as a thread's: the task
/// may outlive the caller (a dropped or leaked handle does not stop it),
/// so it cannot borrow from the caller's frame. To borrow, spawn in a
/// [`scope`](crate::scope), which waits for its tasks before it returns,
/// or run one closure with [`Scheduler::block_on`](crate::Scheduler::block_on).
///
/// # Panics
/// If the task cannot be spawned; use [`Builder::spawn`] to get the
/// [`SpawnError`] instead.
#[track_caller]
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Builder::new()
        .spawn(f)
        .or_panic("gofer: cannot spawn a task")
}

/// Spawns a task; the coroutine counterpart of `std::thread::spawn`.
///
/// Options come first, in any order, each `key = value,`: `name`,
/// `stack_size`, `pin`, `scheduler` (a `&Scheduler`). Without `scheduler`
/// the task goes to the current task's scheduler, else the default one.
///
/// ```
/// use gofer::go;
/// let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();
/// let a = go!(scheduler = &sched, || 1);
/// let b = go!(name = "reader", stack_size = 64 << 10, scheduler = &sched, move || 2);
/// assert_eq!(a.join().unwrap() + b.join().unwrap(), 3);
/// sched.shutdown();
/// ```
///
/// The closure must be `Send + 'static`, like a thread's. `'static`
/// because the task may outlive the code that spawned it; to borrow from
/// the caller, spawn in a [`scope`](crate::scope) (whose tasks finish
/// before it returns) or use [`Scheduler::block_on`](crate::Scheduler::block_on):
///
/// ```compile_fail
/// use std::rc::Rc;
/// let rc = Rc::new(1);
/// let h = gofer::go!(move || *rc + 1); // Rc is not Send
/// ```
///
/// # Panics
/// If the task cannot be spawned (see [`Builder::spawn`] for the error).
#[macro_export]
macro_rules! go {
    ($($body:tt)+) => {
        $crate::__go_opts!(($crate::Builder::new()) $($body)+)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __go_opts {
    (($b:expr) name = $v:expr, $($rest:tt)+) => {
        $crate::__go_opts!(($b.name($v)) $($rest)+)
    };
    (($b:expr) stack_size = $v:expr, $($rest:tt)+) => {
        $crate::__go_opts!(($b.stack_size($v)) $($rest)+)
    };
    (($b:expr) pin = $v:expr, $($rest:tt)+) => {
        $crate::__go_opts!(($b.pin($v)) $($rest)+)
    };
    (($b:expr) scheduler = $v:expr, $($rest:tt)+) => {
        $crate::__go_opts!(($b.scheduler($v)) $($rest)+)
    };
    (($b:expr) $f:expr) => {
        $b.spawn($f)
            .unwrap_or_else(|e| ::std::panic!("gofer: go!: cannot spawn a task: {}", e))
    };
}
