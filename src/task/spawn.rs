//! Spawning: the one path from a closure to a queued task, and the
//! [`Scheduler`] methods built on it (`spawn`, `block_on`).
//!
//! The runtime admits a task and asks this layer for its cell (a
//! closure given to `Shared::spawn`): one allocation with the
//! header, the user's closure and the slot its result goes to. This layer
//! hands out the [`JoinHandle`].

use std::sync::Arc;

use super::join::{self, JoinHandle};
use crate::error::OrPanic;
use crate::error::{JoinError, SpawnError};
use crate::runtime::context;
use crate::runtime::scheduler::Scheduler;
use crate::runtime::shared::Shared;

/// Spawns `f` on `shared` with the given options. The task's spawn site
/// (task dumps) is the caller's, through every `#[track_caller]` above.
#[track_caller]
pub(crate) fn spawn_on<F, T>(
    shared: &Arc<Shared>,
    name: Option<String>,
    stack_size: Option<usize>,
    pin: Option<usize>,
    migratable: bool,
    f: F,
) -> Result<JoinHandle<T>, SpawnError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    spawn_at(
        shared,
        name,
        stack_size,
        pin,
        migratable,
        std::panic::Location::caller(),
        f,
    )
}

/// [`spawn_on`] with the spawn site given.
#[inline]
pub(crate) fn spawn_at<F, T>(
    shared: &Arc<Shared>,
    name: Option<String>,
    stack_size: Option<usize>,
    pin: Option<usize>,
    migratable: bool,
    at: &'static std::panic::Location<'static>,
    f: F,
) -> Result<JoinHandle<T>, SpawnError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    shared.spawn(
        name.map(String::into_boxed_str),
        stack_size,
        pin,
        move |shared, name, stack_size, pin| {
            join::new_task(f, shared, name, stack_size, pin, migratable, at)
        },
    )
}

/// Spawns a detached closure (a user timer's run).
#[track_caller]
pub(crate) fn spawn_closure<F>(shared: &Arc<Shared>, f: F) -> Result<(), SpawnError>
where
    F: FnOnce() + Send + 'static,
{
    spawn_on(shared, None, None, None, false, f).map(drop)
}

impl Scheduler {
    /// Spawns `f` as a task on this scheduler.
    ///
    /// `f` must be `'static`: the task may outlive the caller. To spawn
    /// tasks that borrow, use [`scope`](Self::scope).
    ///
    /// # Panics
    /// If the task cannot be spawned (the scheduler is shut down, or no stack
    /// memory is left); use [`Builder::spawn`](crate::Builder::spawn) to get
    /// the [`SpawnError`] instead.
    #[track_caller]
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        spawn_on(self.shared(), None, None, None, false, f).or_panic("gofer: cannot spawn a task")
    }

    /// Runs `f` as a task and waits for its value. The calling thread runs
    /// `f` (pinned to it) and nothing else: the tasks `f` spawns or wakes run
    /// on the scheduler's Processers, so no unrelated task (one that blocks
    /// its thread, say) can delay `f`'s return.
    ///
    /// Called from inside a task, it spawns `f` and joins it instead (the
    /// calling task parks; its thread keeps working).
    ///
    /// `f` may borrow from the caller (no `'static` bound, as with
    /// `std::thread::scope`): `block_on` returns, or re-raises `f`'s panic,
    /// only once the task has finished and dropped everything `f` captured.
    /// Tasks that `f` spawns are independent of it and still need
    /// `'static` closures, unless it spawns them in a
    /// [`scope`](Self::scope).
    ///
    /// ```
    /// let sched = gofer::Scheduler::builder().min_threads(1).build()?;
    /// let mut words = vec!["a", "b"];
    /// let n = sched.block_on(|| {
    ///     words.push("c"); // borrows `words` mutably
    ///     words.len()
    /// });
    /// assert_eq!((n, words.len()), (3, 3));
    /// sched.shutdown();
    /// # Ok::<(), gofer::ConfigError>(())
    /// ```
    ///
    /// # Panics
    /// Re-raises a panic of `f`, and panics if the task cannot be spawned.
    #[track_caller]
    pub fn block_on<'a, F, T>(&self, f: F) -> T
    where
        F: FnOnce() -> T + Send + 'a,
        T: Send + 'a,
    {
        let mut out: Option<T> = None;
        let slot = OutSlot(&mut out);
        let body: Box<dyn FnOnce() + Send + 'a> = Box::new(move || {
            let slot = slot; // the whole wrapper, which is Send
            let v = f();
            // SAFETY: `out` lives on the caller's frame until `block_on`
            // returns, which is after the task finished (see below); only
            // this task writes it, and the caller reads it after the join,
            // which synchronises with the task's completion.
            unsafe { *slot.0 = Some(v) };
        });
        // SAFETY: the erased lifetime `'a` covers everything `body` borrows.
        // `run_static` returns (or re-raises the task's panic) only after
        // the task completed: `body` was called or dropped by then, on the
        // task or, if the task never ran, by the runtime before it
        // completed the task; and if the task cannot be spawned, `body` is
        // dropped inside `run_static`, before it panics. Nothing keeps
        // `body` after that, so no borrow is used after `'a`.
        let body: Box<dyn FnOnce() + Send + 'static> = unsafe { std::mem::transmute(body) };
        self.run_static(body);
        out.expect("the task finished with its value")
    }

    /// [`block_on`](Self::block_on) for a `'static` closure.
    #[track_caller]
    fn run_static<F, T>(&self, f: F) -> T
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        if context::current_task_ptr().is_some() {
            return match self.spawn(f).join() {
                Ok(v) => v,
                Err(e) => resume(e),
            };
        }
        let at = std::panic::Location::caller();
        let handle = self
            .shared()
            .run_caller(
                None,
                move |shared, name, stack_size, pin| {
                    join::new_task(f, shared, name, stack_size, pin, false, at)
                },
                |h: &JoinHandle<T>| h.slot().is_done(),
            )
            .or_panic("gofer: block_on cannot spawn its task");
        match handle.join() {
            Ok(v) => v,
            Err(e) => resume(e),
        }
    }
}

/// Where `block_on`'s task writes its value: a slot on the caller's frame.
struct OutSlot<T>(*mut Option<T>);

// SAFETY: the value written through the pointer is a `T: Send`, moving from
// the task to the caller; the slot is written once, by the task, and read
// by the caller only after the task completed (see `block_on`).
unsafe impl<T: Send> Send for OutSlot<T> {}

fn resume<T>(e: JoinError) -> T {
    match e.try_into_panic() {
        Ok(p) => std::panic::resume_unwind(p),
        Err(e) => panic!("gofer: {e}"),
    }
}
