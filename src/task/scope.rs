//! Scoped tasks: [`scope`], [`Scheduler::scope`], [`Scope`] and
//! [`ScopedJoinHandle`], the counterpart of `std::thread::scope`.
//!
//! # How the scope waits
//!
//! A scope counts its tasks (`ScopeData::running`): `+1` before each spawn,
//! `-1` when the task is over with everything that may borrow from the
//! scope's environment. The scope's owner (the task or thread that called
//! `scope`) runs the user's closure under `catch_unwind`, then parks until
//! the count is zero, and only then returns or re-raises. Whoever brings
//! the count to zero unparks the owner; `park` keeps an early wake-up as a
//! token, and the owner re-checks the count in a loop, so no wake-up is
//! lost and a spurious one costs a loop turn.
//!
//! # When a task is "over"
//!
//! A task's closure and its result may borrow from the environment (`'env`)
//! and the scope (`'scope`). The decrement comes after both are gone or
//! safely handed over:
//!
//! - the closure is consumed by its call (its captures are dropped when it
//!   returns or unwinds), or dropped unrun if the task never ran;
//! - the result goes into a [`Packet`] shared with the handle. If the
//!   handle is still there, it takes or drops the result later, and a
//!   [`ScopedJoinHandle<'scope, T>`] cannot outlive `'scope`: it is used
//!   and dropped inside the scope's closure or inside another scoped task
//!   (which the scope waits for too). If the handle was dropped first, the
//!   task drops the result itself, before the decrement. A handle leaked
//!   with `mem::forget` leaks the result, which is then never used again.
//!
//! The packet's two bits, `DONE` (the task stored the result) and
//! `DETACHED` (the handle is gone), follow the same rule as a
//! [`JoinHandle`]'s: each side sets its bit with one `fetch_or`, and
//! whichever comes second sees the other's bit and drops the result.
//!
//! # Panics nobody joined
//!
//! As with `std::thread::scope`, a scoped task that panicked and was never
//! joined makes `scope` panic once every task is over. The task counts its
//! panic (`ScopeData::panicked`) before it publishes its result; a `join`
//! that returns the panic takes it back off. Every `join` of a scoped
//! handle happens before its scope's count reaches zero (inside the scope's
//! closure, or inside a scoped task, whose decrement comes after it), so
//! the owner reads the final figure. A task that never ran (no stack could
//! be had for it) counts the same way in `ScopeData::failed`.

use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use super::builder::Builder;
use super::join::JoinHandle;
use super::spawn::spawn_on;
use crate::error::OrPanic;
use crate::error::{contain, JoinError, SpawnError};
use crate::runtime::scheduler::{current_or_default_shared, Scheduler};
use crate::runtime::shared::Shared;
use crate::runtime::task::park::{self, Task};
use crate::runtime::task::wait::WaitOn;
use crate::runtime::task::TaskId;

/// Runs `f` with a [`Scope`] on which it can spawn tasks that borrow from
/// the caller, and returns `f`'s value once every task spawned in the
/// scope has finished; the counterpart of [`std::thread::scope`].
///
/// The tasks run on the scheduler that [`spawn`](crate::spawn) would pick
/// at each spawn: the current task's, or else the default scheduler. Use
/// [`Scheduler::scope`] to name one.
///
/// Inside a task, `scope` parks the calling task while it waits (its thread
/// runs other tasks meanwhile); outside one it blocks the calling thread.
///
/// ```
/// let mut chunks = vec![1u64; 1000];
/// let total: u64 = 7;
/// gofer::scope(|s| {
///     for chunk in chunks.chunks_mut(100) {
///         // Each task borrows its own chunk mutably, and `total` shared.
///         s.spawn(|| chunk.iter_mut().for_each(|x| *x += total));
///     }
/// });
/// assert!(chunks.iter().all(|&x| x == 8));
/// ```
///
/// A scoped task may borrow what outlives the scope, not what the scope's
/// closure makes and drops before its tasks are done:
///
/// ```compile_fail,E0373
/// gofer::scope(|s| {
///     let local = vec![1, 2, 3];
///     s.spawn(|| local.len()); // `local` dies before the scope ends
/// });
/// ```
///
/// # Panics
///
/// - If `f` panics: the panic continues from here, once every task of the
///   scope has finished.
/// - If a task of the scope panicked and nobody [joined](ScopedJoinHandle::join)
///   it (or a task could not run, for want of a stack, and nobody joined
///   it): after every task has finished, with a message saying so.
/// - [`Scope::spawn`] panics if a task cannot be spawned; use
///   [`Builder::spawn_scoped`] to get the error instead.
pub fn scope<'env, F, T>(f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    run_scope(None, f)
}

impl Scheduler {
    /// [`gofer::scope`](crate::scope) with every task spawned on this
    /// scheduler: runs `f` with a [`Scope`] whose tasks may borrow from the
    /// caller, and returns `f`'s value once they have all finished.
    ///
    /// Called from inside a task (of any scheduler), it parks that task
    /// while it waits; outside one it blocks the calling thread.
    ///
    /// ```
    /// let sched = gofer::Scheduler::builder().min_threads(2).build()?;
    /// let words = ["a", "bb", "ccc"];
    /// let lens: Vec<usize> = sched.scope(|s| {
    ///     let handles: Vec<_> = words.iter().map(|w| s.spawn(move || w.len())).collect();
    ///     handles.into_iter().map(|h| h.join().unwrap()).collect()
    /// });
    /// assert_eq!(lens, [1, 2, 3]);
    /// sched.shutdown();
    /// # Ok::<(), gofer::ConfigError>(())
    /// ```
    ///
    /// # Panics
    /// As [`gofer::scope`](crate::scope).
    pub fn scope<'env, F, T>(&self, f: F) -> T
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
    {
        run_scope(Some(self.shared().clone()), f)
    }
}

/// The body of [`scope`] and [`Scheduler::scope`].
fn run_scope<'env, F, T>(shared: Option<Arc<Shared>>, f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    let scope = Scope {
        data: Arc::new(ScopeData {
            running: AtomicUsize::new(0),
            panicked: AtomicUsize::new(0),
            failed: AtomicUsize::new(0),
            owner: park::current(),
        }),
        shared,
        scope: PhantomData,
        env: PhantomData,
    };
    // Whatever `f` does, unwinding included, the scope waits below: this is
    // what lets `Scope::spawn` hand the runtime closures that borrow.
    let result = catch_unwind(AssertUnwindSafe(|| f(&scope)));
    // Acquire: pairs with each task's Release decrement, so that what the
    // tasks did (their panic counts included) is visible once it is zero.
    // Not a cancellable wait (`runtime/task/cancel.rs`): the tasks borrow from
    // this frame, so the owner waits for them even when it is cancelled,
    // and unwinds after (re-raising the unwind it caught from `f`).
    while scope.data.running.load(Ordering::Acquire) != 0 {
        park::park_on(WaitOn::Park);
    }
    match result {
        Err(payload) => resume_unwind(payload),
        Ok(value) => {
            let panicked = scope.data.panicked.load(Ordering::Relaxed);
            let failed = scope.data.failed.load(Ordering::Relaxed);
            if panicked != 0 || failed != 0 {
                drop(value);
                scope_failed(panicked, failed);
            }
            value
        }
    }
}

/// `scope`'s panic for tasks that failed and that nobody joined.
#[cold]
#[inline(never)]
fn scope_failed(panicked: usize, failed: usize) -> ! {
    match (panicked, failed) {
        (1, 0) => panic!("gofer: a scoped task panicked and was not joined"),
        (n, 0) => panic!("gofer: {n} scoped tasks panicked and were not joined"),
        (0, n) => panic!("gofer: {n} scoped task(s) could not run (no stack) and were not joined"),
        (p, n) => panic!(
            "gofer: {p} scoped task(s) panicked and {n} could not run (no stack), none of them joined"
        ),
    }
}

/// A scope to spawn tasks that borrow from outside it; see [`scope`].
///
/// `'scope` is the scope's own lifetime: its tasks, their handles and what
/// they borrow last at least that long, and it ends before [`scope`]
/// returns. `'env` is the lifetime of what the tasks borrow from outside
/// the scope, which outlives it.
pub struct Scope<'scope, 'env: 'scope> {
    data: Arc<ScopeData>,
    /// The scheduler to spawn on; `None`: the one [`spawn`](crate::spawn)
    /// would pick, at each spawn.
    shared: Option<Arc<Shared>>,
    /// Invariant in `'scope` and `'env`, as `std::thread::Scope` is: a
    /// scope cannot be taken for one with a shorter or longer life.
    scope: PhantomData<&'scope mut &'scope ()>,
    env: PhantomData<&'env mut &'env ()>,
}

/// What a scope's tasks share with its owner.
struct ScopeData {
    /// Tasks spawned and not yet over (see the module docs).
    running: AtomicUsize,
    /// Tasks that panicked, less the panics returned by `join`.
    panicked: AtomicUsize,
    /// Tasks that never ran, less the failures returned by `join`.
    failed: AtomicUsize,
    /// The task or thread waiting in `scope`.
    owner: Task,
}

impl ScopeData {
    /// One task is over; the last one wakes the owner.
    fn decrement(&self) {
        // Release: everything the task did comes before the owner's
        // Acquire load that sees zero.
        if self.running.fetch_sub(1, Ordering::Release) == 1 {
            self.owner.unpark();
        }
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Spawns `f` as a task in this scope and returns its handle. `f` may
    /// borrow anything that outlives the scope; the scope waits for the task
    /// before it returns.
    ///
    /// The task goes to the scope's scheduler: the one given to
    /// [`Scheduler::scope`], or for [`gofer::scope`](crate::scope) the one
    /// [`spawn`](crate::spawn) would pick from the calling task or thread.
    ///
    /// # Panics
    /// If the task cannot be spawned (the scheduler is shut down, no stack
    /// memory is left, the default scheduler cannot start); use
    /// [`Builder::spawn_scoped`] to get the [`SpawnError`] instead.
    #[track_caller]
    pub fn spawn<F, T>(&'scope self, f: F) -> ScopedJoinHandle<'scope, T>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        self.spawn_with(Builder::new(), f)
            .or_panic("gofer: cannot spawn a scoped task")
    }

    /// Spawns `f` with `builder`'s options: its scheduler if it names one,
    /// else the scope's.
    #[track_caller]
    pub(crate) fn spawn_with<F, T>(
        &'scope self,
        builder: Builder,
        f: F,
    ) -> Result<ScopedJoinHandle<'scope, T>, SpawnError>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        let Builder {
            name,
            stack_size,
            pin,
            migratable,
            scheduler,
        } = builder;
        let shared = match (scheduler, &self.shared) {
            (Some(s), _) => s.shared().clone(),
            (None, Some(s)) => s.clone(),
            (None, None) => current_or_default_shared()?,
        };
        let packet = Arc::new(Packet {
            state: AtomicU8::new(0),
            result: UnsafeCell::new(None),
        });
        self.data.running.fetch_add(1, Ordering::Relaxed);
        let job = Job {
            f: Some(f),
            done: Done {
                packet: Some(packet.clone()),
                scope: self.data.clone(),
                stored: false,
            },
        };
        let body: Box<dyn FnOnce() + Send + 'scope> = Box::new(move || job.run());
        // SAFETY: the erased lifetime `'scope` covers everything `body`
        // borrows, and `body` is used (called or dropped) only before the
        // scope ends: the `Done` inside it decrements the scope's count
        // after the closure and its captures are gone and the result is
        // dropped or left to a handle (module docs), and `run_scope` does
        // not return or unwind before the count is zero. If the spawn
        // fails, `body` is dropped inside `spawn_on`, before it returns.
        let body: Box<dyn FnOnce() + Send + 'static> = unsafe { std::mem::transmute(body) };
        match spawn_on(&shared, name, stack_size, pin, migratable, body) {
            Ok(task) => Ok(ScopedJoinHandle {
                task,
                packet: PacketRef {
                    packet,
                    scope: self.data.clone(),
                },
                _scope: PhantomData,
            }),
            Err(e) => {
                // `body` was dropped unrun, and its `Done` counted a task
                // that never ran; the caller gets the error instead.
                self.data.failed.fetch_sub(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }
}

impl fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("running", &self.data.running.load(Ordering::Relaxed))
            .field("panicked", &self.data.panicked.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// Spawns `f` as a task in `scope` with this builder's options (see
    /// [`Scope::spawn`]). The task goes to the builder's
    /// [`scheduler`](Builder::scheduler) if one is set, else to the
    /// scope's.
    ///
    /// ```
    /// let data = vec![1, 2, 3];
    /// gofer::scope(|s| {
    ///     let h = gofer::Builder::new()
    ///         .name("summer")
    ///         .spawn_scoped(s, || data.iter().sum::<i32>())?;
    ///     assert_eq!(h.name(), Some("summer"));
    ///     assert_eq!(h.join().unwrap(), 6);
    ///     Ok::<(), gofer::SpawnError>(())
    /// })?;
    /// # Ok::<(), gofer::SpawnError>(())
    /// ```
    ///
    /// Errors: as [`Builder::spawn`].
    #[track_caller]
    pub fn spawn_scoped<'scope, 'env, F, T>(
        self,
        scope: &'scope Scope<'scope, 'env>,
        f: F,
    ) -> Result<ScopedJoinHandle<'scope, T>, SpawnError>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        scope.spawn_with(self, f)
    }
}

/// A scoped task's result, shared by the task and its handle.
struct Packet<T> {
    /// `DONE` and `DETACHED`.
    state: AtomicU8,
    /// Written by the task before it sets `DONE`; taken by the handle after
    /// it saw `DONE`, or by whichever side sets its bit second.
    result: UnsafeCell<Option<std::thread::Result<T>>>,
}

/// The task stored its result.
const DONE: u8 = 1;
/// The handle is gone.
const DETACHED: u8 = 2;

// SAFETY: the result cell is written by the task before its
// `fetch_or(DONE)` (Release) and read by the other side only after it saw
// DONE (Acquire), or by whichever side's `fetch_or` came second (module
// docs); never by both. The result moves between threads, hence `T: Send`.
unsafe impl<T: Send> Sync for Packet<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Packet<T> {}

impl<T> Packet<T> {
    /// Takes the result.
    ///
    /// # Safety
    /// The caller saw `DONE` set with Acquire and is the only side left
    /// that touches the cell (the handle, before it sets `DETACHED`; or
    /// the side whose `fetch_or` came second).
    unsafe fn take(&self) -> Option<std::thread::Result<T>> {
        // SAFETY: exclusive access per the caller's contract.
        unsafe { (*self.result.get()).take() }
    }
}

/// The task's side: the user's closure, then the bookkeeping. Fields drop
/// in order, so a closure dropped unrun goes before `done` counts the task
/// as over, even if its destructor panics.
struct Job<F, T> {
    f: Option<F>,
    done: Done<T>,
}

impl<F, T> Job<F, T>
where
    F: FnOnce() -> T,
{
    /// Runs the closure, stores its result (or panic) for the handle, and
    /// (as `self` drops) counts the task as over.
    fn run(mut self) {
        let f = self.f.take().expect("a scoped task runs once");
        let r = catch_unwind(AssertUnwindSafe(f));
        let done = &mut self.done;
        let packet = done.packet.as_ref().expect("the packet lives until done");
        // A cancellation is no panic: the scope does not re-raise it.
        if r.as_ref()
            .is_err_and(|p| !crate::runtime::task::cancel::is_cancel_payload(p.as_ref()))
        {
            // Before DONE, so a joiner that takes the panic back finds it.
            done.scope.panicked.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: only the task writes the cell, once, before DONE.
        unsafe { *packet.result.get() = Some(r) };
        done.stored = true;
        // AcqRel: Release publishes the result to the handle; Acquire pairs
        // with the handle's `fetch_or(DETACHED)`.
        let prev = packet.state.fetch_or(DONE, Ordering::AcqRel);
        if prev & DETACHED != 0 {
            // The handle is gone: the result is ours to drop, before the
            // task counts as over.
            // SAFETY: DETACHED came first; the handle no longer touches
            // the cell.
            let r = unsafe { packet.take() };
            contain("the result of a scoped task", move || drop(r));
        }
    }
}

/// Counts the task as over when dropped: after the closure ran or was
/// dropped unrun.
struct Done<T> {
    /// Dropped before the count goes down (see `drop`).
    packet: Option<Arc<Packet<T>>>,
    scope: Arc<ScopeData>,
    /// The task stored a result; if not, it never ran.
    stored: bool,
}

impl<T> Drop for Done<T> {
    fn drop(&mut self) {
        if !self.stored && !crate::runtime::task::cancel::dropping_cancelled() {
            // Never ran: counted like a panic, until a join returns it.
            // Before the runtime completes the task (it drops the closure
            // first), so a joiner sees the count. A task cancelled before
            // it started is not counted: a cancellation is no failure.
            self.scope.failed.fetch_add(1, Ordering::Relaxed);
        }
        // The packet holds no result now (the handle has it, or the task
        // dropped it), but free it while the scope is surely alive.
        drop(self.packet.take());
        self.scope.decrement();
    }
}

/// The handle's share of the packet; its drop detaches.
struct PacketRef<T> {
    packet: Arc<Packet<T>>,
    scope: Arc<ScopeData>,
}

impl<T> Drop for PacketRef<T> {
    fn drop(&mut self) {
        // AcqRel: Acquire pairs with the task's fetch_or(DONE), for the
        // result; Release orders our last use of the cell before the
        // task's take.
        let prev = self.packet.state.fetch_or(DETACHED, Ordering::AcqRel);
        if prev & DONE != 0 {
            // SAFETY: DONE came first: the task is done with the cell, and
            // `join` (which consumes the handle) did not take the result.
            let r = unsafe { self.packet.take() };
            contain("the result of a scoped task", move || drop(r));
        }
    }
}

/// An owned permission to wait for a scoped task's result; see
/// [`Scope::spawn`].
///
/// Dropping the handle does not wait: the scope does. A task that
/// panicked and whose handle was dropped (or leaked) without
/// [`join`](Self::join) makes its [`scope`] panic at the end.
pub struct ScopedJoinHandle<'scope, T> {
    /// The runtime's task, whose own result is `()`.
    task: JoinHandle<()>,
    packet: PacketRef<T>,
    _scope: PhantomData<&'scope ()>,
}

impl<T> ScopedJoinHandle<'_, T> {
    /// Waits for the task and returns its value, or how it failed: a panic
    /// (the scope then does not re-raise it), or a task that never ran for
    /// want of a stack ([`JoinError::is_stack_exhausted`]).
    ///
    /// Inside a task this parks the calling task; outside one it blocks the
    /// calling thread.
    pub fn join(self) -> Result<T, JoinError> {
        let ScopedJoinHandle { task, packet, .. } = self;
        let ran = task.join();
        // Acquire: the result stored before DONE. (The runtime's join has
        // already ordered the task's completion before this point.)
        if packet.packet.state.load(Ordering::Acquire) & DONE != 0 {
            // SAFETY: DONE was seen; we have not set DETACHED (that happens
            // when `packet` drops, after this), so the cell is ours.
            match unsafe { packet.packet.take() } {
                Some(Ok(v)) => return Ok(v),
                Some(Err(p)) if crate::runtime::task::cancel::is_cancel_payload(p.as_ref()) => {
                    return Err(JoinError::cancelled());
                }
                Some(Err(p)) => {
                    packet.scope.panicked.fetch_sub(1, Ordering::Relaxed);
                    return Err(JoinError::panic(p));
                }
                None => unreachable!("gofer: a scoped task's result was taken twice"),
            }
        }
        // No result: the task never ran, and its closure was dropped (which
        // counted it as failed, unless it was cancelled) before the runtime
        // completed it.
        match ran {
            Err(e) if e.is_cancelled() => Err(e),
            Err(e) => {
                packet.scope.failed.fetch_sub(1, Ordering::Relaxed);
                Err(e)
            }
            Ok(()) => unreachable!("gofer: a scoped task finished without its result"),
        }
    }

    /// Asks the task to stop, as [`JoinHandle::cancel`] does; the scope
    /// still waits for it to unwind.
    pub fn cancel(&self) {
        self.task.cancel();
    }

    /// Whether the task has finished (its result is ready for
    /// [`join`](Self::join)).
    pub fn is_finished(&self) -> bool {
        self.packet.packet.state.load(Ordering::Acquire) & DONE != 0 || self.task.is_finished()
    }

    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.task.id()
    }

    /// The task's name, if it was given one.
    pub fn name(&self) -> Option<&str> {
        self.task.name()
    }
}

impl<T> fmt::Debug for ScopedJoinHandle<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopedJoinHandle")
            .field("id", &self.id())
            .field("name", &self.name())
            .field("finished", &self.is_finished())
            .finish()
    }
}
