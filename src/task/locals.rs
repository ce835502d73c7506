//! Coroutine-local storage: one value per task, the replacement for
//! `thread_local!` inside tasks.
//!
//! A `thread_local!` belongs to the thread, not the task: every task on a
//! Processer shares its value, and a migratable task (one that may move to
//! another thread at a switch: `Builder::migratable`,
//! `migrate_started_tasks(true)`) can even read two different threads'
//! values before and after a `yield`. [`coroutine_local!`](crate::coroutine_local) gives each task its
//! own value, created on first access and dropped when the task ends (before
//! its `JoinHandle` reports completion). Outside a task the same key falls
//! back to one value per thread.

use std::any::Any;
use std::fmt;

/// Most rounds of destructors re-creating values `clear_current` runs.
const CLEAR_ROUNDS: usize = 16;

/// Drops the current task's coroutine-local values (called as the task ends).
pub(crate) fn clear_current() {
    let Some(h) = crate::runtime::context::current_task_ptr() else {
        return;
    };
    // A destructor may touch a key again and re-create a value; a few rounds
    // clear those too, and anything left after that is leaked (LocalMap's
    // Drop).
    for _ in 0..CLEAR_ROUNDS {
        // SAFETY: only the running task touches its own LocalMap, and no
        // reference into it is held across this call (values are taken out
        // before they are dropped).
        let values = unsafe { std::mem::take(&mut (*(*h).locals.get()).values) };
        if values.is_empty() {
            return;
        }
        for (_, v) in values {
            // SAFETY: `v` came from Box::into_raw in `with` and was removed
            // from the map above, so this is its only owner.
            drop(unsafe { Box::from_raw(v) });
        }
    }
}

/// Runs a closure with the calling thread's fallback value of one key.
type ThreadAccess<T> = fn(&mut dyn FnMut(&T));

/// A key for coroutine-local values; made by
/// [`coroutine_local!`](crate::coroutine_local).
pub struct LocalKey<T: 'static> {
    init: fn() -> T,
    thread: ThreadAccess<T>,
}

impl<T: 'static> LocalKey<T> {
    #[doc(hidden)]
    pub const fn new(init: fn() -> T, thread: ThreadAccess<T>) -> LocalKey<T> {
        LocalKey { init, thread }
    }

    /// Runs `f` with the current task's value, creating it on first use.
    /// Outside a task, with the current thread's value.
    pub fn with<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
        let Some(h) = crate::runtime::context::current_task_ptr() else {
            let mut f = Some(f);
            let mut out = None;
            (self.thread)(&mut |v| out = Some((f.take().expect("called once"))(v)));
            return out.expect("thread-local fallback ran");
        };
        let key = self as *const LocalKey<T> as usize;
        // SAFETY: only the running task touches its LocalMap; this shared
        // borrow ends before `init` or `f` run, so a nested access from them
        // cannot alias it.
        let found = unsafe { (*(*h).locals.get()).get(key) };
        let ptr = match found {
            Some(p) => p,
            None => {
                let value: Box<dyn Any> = Box::new((self.init)());
                let p = Box::into_raw(value);
                // SAFETY: as above: the exclusive borrow lasts for the push
                // only, after `init` returned.
                unsafe { (*(*h).locals.get()).values.push((key, p)) };
                p as *const dyn Any
            }
        };
        // SAFETY: the value is a leaked Box (a stable address, never moved)
        // and lives until the task ends, which cannot happen while `f` runs
        // on the task.
        let v = unsafe { &*ptr }
            .downcast_ref::<T>()
            .expect("coroutine-local key maps to its own type");
        f(v)
    }
}

impl<T: 'static> fmt::Debug for LocalKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalKey").finish_non_exhaustive()
    }
}

/// Declares coroutine-local values: one per task, one per thread outside
/// tasks.
///
/// ```
/// use std::cell::Cell;
/// gofer::coroutine_local! {
///     static COUNTER: Cell<u32> = Cell::new(0);
/// }
/// let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
/// let a = sched.spawn(|| { COUNTER.with(|c| c.set(c.get() + 1)); COUNTER.with(Cell::get) });
/// let b = sched.spawn(|| COUNTER.with(Cell::get));
/// assert_eq!(a.join().unwrap(), 1);
/// assert_eq!(b.join().unwrap(), 0);
/// sched.shutdown();
/// ```
#[macro_export]
macro_rules! coroutine_local {
    () => {};
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr; $($rest:tt)*) => {
        $(#[$attr])*
        $vis static $name: $crate::LocalKey<$t> = {
            fn __init() -> $t {
                $init
            }
            fn __thread(f: &mut dyn FnMut(&$t)) {
                ::std::thread_local! {
                    static FALLBACK: $t = __init();
                }
                FALLBACK.with(|v| f(v))
            }
            $crate::LocalKey::new(__init, __thread)
        };
        $crate::coroutine_local!($($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr) => {
        $crate::coroutine_local!($(#[$attr])* $vis static $name: $t = $init;);
    };
}
