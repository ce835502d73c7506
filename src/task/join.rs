//! [`JoinHandle`]: waiting for a task's result, and the task's cell: one
//! allocation that holds the header the runtime uses, the result slot and
//! the user's closure, run at the root of the coroutine through the
//! header's vtable.
//!
//! # The join state machine (`JoinInner::state`)
//!
//! Two bits in one atomic byte: `DONE` (the result is stored) and `WAITING`
//! (a joiner stored its wake-up handle, a [`Waiter`]). Each side writes its
//! own slot before setting its bit, and reads the other's slot only after
//! seeing the other's bit:
//!
//! ```text
//!  joiner                                  task (completer)
//!  1. write waiter slot                    1. write result slot
//!  2. fetch_or(WAITING) (AcqRel)           2. fetch_or(DONE) (AcqRel)
//!  3. if DONE was set: take result         3. if WAITING was set: take the
//!     else park until DONE is seen            waiter and wake it
//! ```
//!
//! Whichever `fetch_or` comes second sees the other bit, so either the joiner
//! finds the result at once or the completer wakes it: no lost wake-up.
//!
//! # Replacing the waiter (the handle as a future)
//!
//! `join` registers a waiter once. A [`JoinHandle`] polled as a future
//! registers the `Waker` of each poll, and the waker may differ from one
//! poll to the next (the future moved to another task), so a registered
//! waiter must be replaceable without losing a wake-up. The rule: **the
//! joiner owns the waiter slot while `WAITING` is clear; the completer owns
//! it once its `fetch_or(DONE)` has seen `WAITING`**. To replace its waiter
//! the joiner first takes the slot back:
//!
//! ```text
//!  joiner: register(w)                      task (completer)
//!  1. state has DONE: take the result       1. write result slot
//!  2. state has WAITING: CAS WAITING -> 0   2. prev = fetch_or(DONE) (AcqRel)
//!     (Acquire); fails only if DONE is      3. if prev had WAITING: take the
//!     set: take the result (the completer      waiter, wake it
//!     owns the slot and wakes the old
//!     waiter; a spurious wake-up)
//!  3. write the new waiter (the old one
//!     is dropped: the slot is ours again)
//!  4. prev = fetch_or(WAITING) (AcqRel);
//!     prev had DONE: take the new waiter
//!     back (the completer saw no WAITING
//!     and left the slot) and the result;
//!     else Pending; the completer will
//!     wake the new waiter
//! ```
//!
//! The CAS in step 2 succeeds only while the state is exactly `WAITING`,
//! that is before the completer's `fetch_or(DONE)`, which then finds
//! `WAITING` clear and leaves the slot alone; if it fails, the completer
//! has seen `WAITING` and owns the slot, and the joiner never touches it
//! again. So the slot has one owner at every moment, and the completer
//! wakes the waiter registered last before its `fetch_or`, or finds none
//! and the joiner sees `DONE` at step 4. `join` is this protocol with one
//! registration (step 2 is skipped when `WAITING` is clear, as it is
//! unless the handle was polled before): the same two atomic operations as
//! before futures. Dropping a polled handle takes its waiter back the same
//! way, so a detached task does not keep its last poller's waker alive.
//!
//! # Who drops an unjoined result
//!
//! The result lives in the task's cell, which lives as long as its last
//! reference, and that may be any thread's. So that a result's destructor
//! runs at a known place, a third bit, `DETACHED`, is set by the handle's
//! drop; whichever of `fetch_or(DETACHED)` and the completer's
//! `fetch_or(DONE)` comes second sees the other bit and drops the result:
//! the handle on its own thread if the task had finished, else the task at
//! its root frame. Both contain a panicking destructor.

#[cfg(loom)]
use loom::sync::atomic::AtomicU8;
use std::alloc::Layout;
use std::cell::UnsafeCell;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::ptr::NonNull;
#[cfg(not(loom))]
use std::sync::atomic::AtomicU8;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::error::{contain, JoinError};
use crate::runtime::shared::Shared;
use crate::runtime::task::cells;
use crate::runtime::task::park::Task;
use crate::runtime::task::wait::WaitOn;
use crate::runtime::task::{Runnable, TaskHeader, TaskId, TaskRef, TaskVTable};

const DONE: u8 = 1;
const WAITING: u8 = 2;
const DETACHED: u8 = 4;

/// Who waits for a task's result.
enum Waiter {
    /// A task or thread in `join`: unparked.
    Park(Task),
    /// A future's poll: woken.
    Wake(Waker),
}

impl Waiter {
    fn wake(self) {
        match self {
            // To the back of the queue, not the next-task slot: a finishing
            // task's joiner often joins its next sibling at once, and would
            // only park again ahead of the siblings still queued.
            Waiter::Park(t) => t.unpark_queued(),
            Waiter::Wake(w) => w.wake(),
        }
    }
}

/// A cell of the join protocol: an `UnsafeCell`, or under `--cfg loom`
/// loom's, which checks that the protocol never lets two threads at it at
/// once.
struct ProtoCell<T>(
    #[cfg(not(loom))] UnsafeCell<T>,
    #[cfg(loom)] loom::cell::UnsafeCell<T>,
);

impl<T> ProtoCell<T> {
    fn new(v: T) -> ProtoCell<T> {
        #[cfg(not(loom))]
        return ProtoCell(UnsafeCell::new(v));
        #[cfg(loom)]
        return ProtoCell(loom::cell::UnsafeCell::new(v));
    }

    /// Works on the contents.
    ///
    /// # Safety
    /// The caller owns the cell at this point of the protocol (module docs).
    unsafe fn with_mut<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        #[cfg(not(loom))]
        // SAFETY: exclusive per the caller's contract.
        return f(unsafe { &mut *self.0.get() });
        #[cfg(loom)]
        // SAFETY: as above; loom checks the claim.
        return self.0.with_mut(|p| f(unsafe { &mut *p }));
    }
}

pub(crate) struct JoinInner<T> {
    state: AtomicU8,
    /// Written by the completer before it sets DONE.
    result: ProtoCell<Option<Result<T, JoinError>>>,
    /// Owned by the joiner while WAITING is clear, by the completer once it
    /// saw WAITING (see "Replacing the waiter" in the module docs).
    waiter: ProtoCell<Option<Waiter>>,
}

// SAFETY: `result` and `waiter` are each written by one side before it sets
// its bit (Release) and read by the other only after it observed that bit
// (Acquire); see the module docs. T crosses threads, hence `T: Send`.
unsafe impl<T: Send> Sync for JoinInner<T> {}
// SAFETY: as above; the cells hold a T (Send) and a Task handle (Send).
unsafe impl<T: Send> Send for JoinInner<T> {}

impl<T> JoinInner<T> {
    fn new() -> JoinInner<T> {
        JoinInner {
            state: AtomicU8::new(0),
            result: ProtoCell::new(None),
            waiter: ProtoCell::new(None),
        }
    }

    /// Publishes the task's result (the task is `task`, for reports).
    fn complete(&self, r: Result<T, JoinError>, task: impl fmt::Display) {
        // SAFETY: only the completer writes `result`, once, before DONE.
        unsafe { self.result.with_mut(|s| *s = Some(r)) };
        // AcqRel: Release publishes the result to the joiner's Acquire
        // loads of DONE; Acquire pairs with the joiner's fetch_or(WAITING),
        // so its waiter is visible when WAITING is seen.
        let prev = self.state.fetch_or(DONE, Ordering::AcqRel);
        if prev & DETACHED != 0 {
            // The handle is gone: nobody will take the result, and it is
            // ours again. Drop it here, at the task's root frame, where a
            // panicking destructor stops.
            // SAFETY: DETACHED was set before DONE, so the handle will not
            // touch the slot (see `detach`).
            let r = unsafe { self.result.with_mut(Option::take) };
            contain(format_args!("the result of {task}"), move || drop(r));
            return;
        }
        if prev & WAITING != 0 {
            // SAFETY: WAITING was set when DONE went in, so the slot is ours
            // now: the joiner finished writing it, and its CAS that would take
            // it back can no longer succeed (DONE is set).
            if let Some(w) = unsafe { self.waiter.with_mut(Option::take) } {
                w.wake();
            }
        }
    }

    /// Registers `w` as the one to wake at completion, replacing an earlier
    /// waiter; returns true if the result is already there (then `w` may
    /// never be woken). Called by the one joiner only (`join` consumes the
    /// handle, `poll` has it pinned mutably). See "Replacing the waiter" in
    /// the module docs for the protocol, both sides.
    fn register(&self, w: Waiter) -> bool {
        // Acquire: pairs with the completer's fetch_or(DONE), so that a DONE
        // seen here comes with the result.
        let s = self.state.load(Ordering::Acquire);
        if s & DONE != 0 {
            return true;
        }
        if s & WAITING != 0 {
            // Take the slot back. Acquire on failure: DONE is set, and the
            // result must be visible (pairs with the completer's fetch_or).
            // Success needs no ordering: the slot was last written by us.
            if self
                .state
                .compare_exchange(WAITING, 0, Ordering::Relaxed, Ordering::Acquire)
                .is_err()
            {
                return true;
            }
        }
        // SAFETY: WAITING is clear, so the slot is the joiner's (we are the
        // one joiner), and the completer does not touch it.
        unsafe { self.waiter.with_mut(|s| *s = Some(w)) };
        // AcqRel: Release publishes the waiter to the completer's
        // fetch_or(DONE); Acquire pairs with it, for the result, if DONE was
        // set first.
        let prev = self.state.fetch_or(WAITING, Ordering::AcqRel);
        if prev & DONE != 0 {
            // The completer's fetch_or came first and saw no WAITING, so it
            // left the slot alone: take our waiter back, or it would stay in
            // the cell until the cell is freed, wherever that happens.
            // SAFETY: the slot is still ours (see above).
            drop(unsafe { self.waiter.with_mut(Option::take) });
            return true;
        }
        false
    }

    /// Takes the waiter back, if one is registered and the task has not
    /// finished (a polled handle is being dropped).
    fn unregister(&self) {
        if self.state.load(Ordering::Relaxed) == WAITING
            && self
                .state
                .compare_exchange(WAITING, 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            // SAFETY: we cleared WAITING before the completer set DONE, so
            // the slot is ours again (see `register`).
            drop(unsafe { self.waiter.with_mut(Option::take) });
        }
    }

    /// The handle is being dropped: nobody will take the result. Whoever
    /// comes second of this and `complete` drops it: the handle here if
    /// DONE was already set, else the completer (which sees DETACHED).
    /// Returns the result to drop, if it is ours.
    fn detach(&self) -> Option<Result<T, JoinError>> {
        // AcqRel: Acquire pairs with the completer's fetch_or(DONE), for the
        // result; Release orders our last use of the slot before the
        // completer's take.
        let prev = self.state.fetch_or(DETACHED, Ordering::AcqRel);
        if prev & DONE != 0 {
            // SAFETY: DONE came first: the completer wrote the result and
            // is done with the slot, and `join` (which takes it) was not
            // called, or left None behind.
            unsafe { self.result.with_mut(Option::take) }
        } else {
            None
        }
    }

    /// Whether the result is stored.
    pub(crate) fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) & DONE != 0
    }

    /// Takes the result; only after DONE was observed with Acquire.
    fn take(&self) -> Result<T, JoinError> {
        // SAFETY: DONE was observed, so the completer wrote `result` and
        // will not touch it again; only the one joiner (`join` consumes the
        // handle, `poll` holds it mutably) takes it.
        unsafe { self.result.with_mut(Option::take) }
            .expect("gofer: a JoinHandle was polled again after it returned its result")
    }
}

/// The part of a task's cell a [`JoinHandle`] knows: the header and the
/// result slot, whatever the closure's type.
#[repr(C)]
struct JoinCell<T> {
    header: TaskHeader,
    join: JoinInner<T>,
}

/// A task's cell: one allocation for the header the runtime uses, the
/// result slot and the user's closure. `#[repr(C)]`, so that a pointer to
/// the cell is a pointer to its header and to its [`JoinCell`].
#[repr(C)]
struct TaskCell<F, T> {
    head: JoinCell<T>,
    /// Taken once, by whoever holds the task's execution right (the
    /// coroutine in `run`, or the Processer in `fail`), never both.
    f: UnsafeCell<Option<F>>,
}

impl<F, T> TaskCell<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    const VTABLE: TaskVTable = TaskVTable {
        run: Self::run,
        fail: Self::fail,
        dealloc: Self::dealloc,
    };

    /// Runs the user's closure, catching any panic, and publishes the result
    /// (counting the task as completed in its scheduler first, so that a
    /// joiner that wakes up sees it counted).
    ///
    /// # Safety
    /// See [`TaskVTable::run`].
    unsafe fn run(h: NonNull<TaskHeader>) {
        // SAFETY: `h` points at a live cell of this type, with its
        // provenance; the caller's Runnable keeps it alive while it runs.
        let cell = unsafe { h.cast::<Self>().as_ref() };
        // SAFETY: we hold the execution right: the only taker of `f`.
        let Some(f) = (unsafe { (*cell.f.get()).take() }) else {
            return;
        };
        // A cancellation's unwind ends here too, as the cancelled error.
        let r = catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
            if crate::runtime::task::cancel::is_cancel_payload(p.as_ref()) {
                JoinError::cancelled()
            } else {
                JoinError::panic(p)
            }
        });
        // Coroutine-local values die with the task, before the joiner wakes.
        if let Err(p) = catch_unwind(super::locals::clear_current) {
            if let Some(m) = crate::error::panic_message(p.as_ref()) {
                eprintln!("gofer: a coroutine-local destructor panicked: {m}");
            }
            std::mem::forget(p);
        }
        let task = &cell.head.header;
        task.shared.completed.fetch_add(1, Ordering::Relaxed);
        cell.head.join.complete(r, task.label());
    }

    /// # Safety
    /// See [`TaskVTable::fail`].
    unsafe fn fail(h: NonNull<TaskHeader>, e: JoinError) {
        // SAFETY: as in `run`.
        let cell = unsafe { h.cast::<Self>().as_ref() };
        // SAFETY: we hold the execution right, and the task never ran.
        let f = unsafe { (*cell.f.get()).take() };
        let label = cell.head.header.label();
        // A panicking destructor must not keep the error from the joiner.
        crate::runtime::task::cancel::dropping_unrun(e.is_cancelled(), || {
            contain(format_args!("the closure of {label}"), move || drop(f));
        });
        cell.head.join.complete(Err(e), label);
    }

    /// # Safety
    /// See [`TaskVTable::dealloc`].
    unsafe fn dealloc(h: NonNull<TaskHeader>) {
        let p = h.cast::<Self>();
        // SAFETY: the last reference is gone; the cell was made by
        // `new_task` as this type, and is ours alone now.
        let cell = unsafe { &mut *p.as_ptr() };
        // This runs wherever the last reference goes (a waker, a timer, a
        // gc queue), so nothing may unwind out of it. A task that never ran
        // still holds its closure: drop it apart, to name it in a report.
        // The rest (a result only if the handle was leaked, the last
        // reference to the scheduler) is contained too.
        if let Some(f) = cell.f.get_mut().take() {
            let label = cell.head.header.label();
            contain(format_args!("the closure of {label}"), move || drop(f));
        }
        // SAFETY: the cell is initialised and dropped once, here; a panic
        // in a field's destructor still drops the other fields (drop glue)
        // and is contained.
        contain("a finished task", || unsafe {
            std::ptr::drop_in_place(p.as_ptr())
        });
        // SAFETY: the memory came from `cells::alloc` with this layout in
        // `new_task`, and its contents were just dropped.
        unsafe { cells::free(p.cast(), Layout::new::<Self>()) };
    }
}

/// Makes a task's cell for `f` around `header`: its Runnable, and the
/// handle that waits for its result.
pub(crate) fn new_task<F, T>(
    f: F,
    shared: Arc<Shared>,
    name: Option<Box<str>>,
    stack_size: usize,
    pin: Option<usize>,
    migratable: bool,
    spawned_at: &'static std::panic::Location<'static>,
) -> (Runnable, JoinHandle<T>)
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // Memory from the thread's cell cache (`runtime/task/cells.rs`), built in
    // place field by field: moving a whole cell into place would cost a
    // `memcpy` of it on the spawn path.
    let p = cells::alloc(Layout::new::<TaskCell<F, T>>()).cast::<TaskCell<F, T>>();
    let p = p.as_ptr();
    // SAFETY: `p` points at fresh memory of the cell's layout; each field
    // is written once, in place, and the cell is complete after the three
    // writes.
    unsafe {
        std::ptr::addr_of_mut!((*p).head.header).write(TaskHeader::new(
            shared,
            name,
            stack_size,
            pin,
            migratable,
            Some(spawned_at),
            &TaskCell::<F, T>::VTABLE,
        ));
        std::ptr::addr_of_mut!((*p).head.join).write(JoinInner::<T>::new());
        std::ptr::addr_of_mut!((*p).f).write(UnsafeCell::new(Some(f)));
    }
    // SAFETY: `cells::alloc` never returns null.
    let ptr = unsafe { NonNull::new_unchecked(p) }.cast::<TaskHeader>();
    // SAFETY: a fresh cell of a `#[repr(C)]` type whose first field is its
    // header, freed by the vtable's `dealloc` as the same type.
    let (runnable, task) = unsafe { TaskRef::from_cell(ptr) };
    (runnable, JoinHandle::new(task))
}

/// An owned permission to wait for a task's result.
///
/// Dropping the handle detaches the task: it keeps running and its result is
/// dropped when it finishes.
pub struct JoinHandle<T> {
    /// The task's cell, a `JoinCell<T>` at its start.
    task: TaskRef,
    /// The result type; `Send` and `Sync` only for `T: Send` (the impls
    /// below).
    _result: PhantomData<fn() -> T>,
    /// Not `RefUnwindSafe`: the handle is for one joiner.
    _one_joiner: PhantomData<UnsafeCell<()>>,
}

// SAFETY: the result is a `T: Send` (`new_task` requires it) and moves to
// whichever thread joins; the TaskRef is Send.
unsafe impl<T: Send> Send for JoinHandle<T> {}

// SAFETY: through `&JoinHandle` a thread can only read the join state word
// (an atomic load: `is_finished`) and the task's id and name (immutable).
// Everything that touches the result slot or the waiter takes the handle by
// value (`join`) or by `&mut`/`Pin<&mut>` (`poll`, `Drop`), so two threads
// sharing a handle never reach the slot at once; the result crosses to the
// joiner's thread, which needs `T: Send`.
unsafe impl<T: Send> Sync for JoinHandle<T> {}

impl<T> JoinHandle<T> {
    fn new(task: TaskRef) -> Self {
        JoinHandle {
            task,
            _result: PhantomData,
            _one_joiner: PhantomData,
        }
    }

    /// Waits for the task and returns its value, or how it failed.
    ///
    /// Inside a task this parks the calling task (its thread runs other
    /// tasks meanwhile); outside one it blocks the calling thread.
    ///
    /// From async code, `.await` the handle instead (it is a [`Future`]).
    pub fn join(self) -> Result<T, JoinError> {
        let inner = self.slot();
        if inner.state.load(Ordering::Acquire) & DONE != 0 {
            return inner.take();
        }
        if !inner.register(Waiter::Park(crate::runtime::task::park::current())) {
            // Park until DONE: park may wake spuriously, hence the loop.
            let on = WaitOn::Join(self.id().as_u64());
            while inner.state.load(Ordering::Acquire) & DONE == 0 {
                // Cancelled: unwind. The registered waiter is a handle in
                // the task's cell, not on this stack; `self`'s drop takes
                // it back as the unwind passes.
                crate::runtime::task::cancel::checkpoint();
                match crate::runtime::task::cancel::recheck(None) {
                    None => crate::runtime::task::park::park_on(on),
                    Some(soon) => crate::runtime::task::park::park_deadline_on(soon, on),
                }
            }
        }
        inner.take()
    }

    /// Like [`join`](Self::join), waiting at most `timeout`: `Ok` with the
    /// task's value or how it failed, or `Err` with this handle back if the
    /// time passed first (the task goes on; join it again later, or drop
    /// the handle to detach it).
    ///
    /// ```
    /// use std::time::Duration;
    /// let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
    /// let (tx, rx) = gofer::chan::bounded::<()>(0);
    /// let h = sched.spawn(move || rx.recv().is_ok());
    /// let h = h.join_timeout(Duration::from_millis(10)).unwrap_err(); // still waiting
    /// tx.send(()).unwrap();
    /// assert!(h.join_timeout(Duration::from_secs(60)).expect("timed out").unwrap());
    /// sched.shutdown();
    /// ```
    pub fn join_timeout(self, timeout: Duration) -> Result<Result<T, JoinError>, JoinHandle<T>> {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.join_deadline(deadline),
            None => Ok(self.join()),
        }
    }

    /// Like [`join_timeout`](Self::join_timeout), giving up at `deadline`.
    pub fn join_deadline(self, deadline: Instant) -> Result<Result<T, JoinError>, JoinHandle<T>> {
        if !self.wait_done_until(deadline) {
            return Err(self);
        }
        Ok(self.slot().take())
    }

    /// Waits until the task is done or `deadline` passes; returns whether
    /// it is done. A waiter left registered when the deadline passes is
    /// taken back (`unregister`); if the completer took it first, its
    /// unpark comes later and is a spurious wake-up of whatever the caller
    /// parks on next, which every park allows.
    fn wait_done_until(&self, deadline: Instant) -> bool {
        let inner = self.slot();
        if inner.state.load(Ordering::Acquire) & DONE != 0 {
            return true;
        }
        if inner.register(Waiter::Park(crate::runtime::task::park::current())) {
            return true;
        }
        let on = WaitOn::Join(self.id().as_u64());
        // Acquire: pairs with the completer's fetch_or(DONE), for the result.
        while inner.state.load(Ordering::Acquire) & DONE == 0 {
            if Instant::now() >= deadline {
                inner.unregister();
                return inner.state.load(Ordering::Acquire) & DONE != 0;
            }
            // As in `join`: nothing of this wait is on the stack.
            crate::runtime::task::cancel::checkpoint();
            let until = crate::runtime::task::cancel::recheck(Some(deadline)).unwrap_or(deadline);
            crate::runtime::task::park::park_deadline_on(until, on);
        }
        true
    }

    /// Asks the task to stop. [`gofer::task`'s docs](crate::task#cancellation)
    /// list the waits that observe it and those that do not; a task that
    /// never waits can poll [`gofer::task::is_cancelled`].
    ///
    /// A task parked in a cancellable wait (a channel, a lock, a socket, a
    /// sleep, a join) withdraws from it and unwinds: its destructors run,
    /// and [`join`](Self::join) gives an error for which
    /// [`JoinError::is_cancelled`] is true. A running task unwinds at its
    /// next cancellable wait (or [`yield_now`](crate::yield_now)); one that
    /// has not started never runs. A task that finishes first keeps its
    /// result. Does not wait; returns at once. Cancelling again does
    /// nothing more.
    ///
    /// ```
    /// let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
    /// let (_tx, rx) = gofer::chan::bounded::<()>(0);
    /// let h = sched.spawn(move || rx.recv()); // waits for ever
    /// h.cancel();
    /// assert!(h.join().unwrap_err().is_cancelled());
    /// sched.shutdown();
    /// ```
    ///
    /// [`gofer::task::is_cancelled`]: crate::task::is_cancelled
    pub fn cancel(&self) {
        crate::runtime::task::cancel::request(&self.task);
    }

    /// Whether the task has finished (its result is ready for `join`).
    pub fn is_finished(&self) -> bool {
        self.slot().state.load(Ordering::Acquire) & DONE != 0
    }

    /// The result slot, in the task's cell.
    pub(crate) fn slot(&self) -> &JoinInner<T> {
        // SAFETY: the cell was made by `new_task` as a `#[repr(C)]`
        // TaskCell<_, T>, whose prefix is a JoinCell<T>; the TaskRef keeps it
        // alive, and its pointer has the whole cell's provenance.
        unsafe { &(*self.task.as_ptr().cast::<JoinCell<T>>()).join }
    }

    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.task.id
    }

    /// The task's name, if it was given one.
    pub fn name(&self) -> Option<&str> {
        self.task.name.as_deref()
    }
}

/// Awaiting a handle waits for the task, like [`join`](JoinHandle::join)
/// but without blocking: the poll registers the waker, and the task's
/// completion wakes it. Usable from any executor (tokio, `futures`,
/// [`block_on_future`](crate::block_on_future)).
///
/// ```
/// let sched = gofer::Scheduler::builder().min_threads(1).build()?;
/// let h = sched.spawn(|| 6 * 7);
/// let v = gofer::block_on_future(async move { h.await })?;
/// assert_eq!(v, 42);
/// sched.shutdown();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Panics
/// When polled again after it returned `Ready`.
impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.slot();
        if inner.register(Waiter::Wake(cx.waker().clone())) {
            Poll::Ready(inner.take())
        } else {
            Poll::Pending
        }
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        let slot = self.slot();
        // A polled handle leaves its waker behind; take it back.
        slot.unregister();
        // A result (or panic payload) nobody joined is dropped by whichever
        // of this handle and the finishing task comes second: here if the
        // task finished first. Contain a panicking destructor, as the task's
        // side does.
        if let Some(r) = slot.detach() {
            let label = self.task.label();
            contain(format_args!("the result of {label}"), move || drop(r));
        }
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("id", &self.id())
            .field("name", &self.name())
            .field("finished", &self.is_finished())
            .finish()
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The join protocol under every interleaving: the result is dropped
    //! exactly once, by whoever owns it, and a registered waiter is woken
    //! unless its joiner saw the result itself.
    use super::*;
    use loom::thread;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    /// A result that counts its drops.
    struct Payload(std::sync::Arc<AtomicUsize>);

    impl Drop for Payload {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A waker that counts its wake-ups.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn waker() -> (std::sync::Arc<Count>, Waker) {
        let c = std::sync::Arc::new(Count(AtomicUsize::new(0)));
        (c.clone(), Waker::from(c))
    }

    fn completer(
        inner: &loom::sync::Arc<JoinInner<Payload>>,
        drops: &std::sync::Arc<AtomicUsize>,
    ) -> thread::JoinHandle<()> {
        let (inner, drops) = (inner.clone(), drops.clone());
        thread::spawn(move || inner.complete(Ok(Payload(drops)), "task 1"))
    }

    #[test]
    fn join_handle_dropped_racing_completion_drops_the_result_once() {
        loom::model(|| {
            let drops = std::sync::Arc::new(AtomicUsize::new(0));
            let inner = loom::sync::Arc::new(JoinInner::<Payload>::new());
            let t = completer(&inner, &drops);
            // The handle's drop.
            inner.unregister();
            drop(inner.detach());
            t.join().unwrap();
            assert_eq!(drops.load(Ordering::Relaxed), 1);
        });
    }

    #[test]
    fn join_registered_waiter_is_woken_or_sees_the_result() {
        loom::model(|| {
            let drops = std::sync::Arc::new(AtomicUsize::new(0));
            let inner = loom::sync::Arc::new(JoinInner::<Payload>::new());
            let t = completer(&inner, &drops);
            let (count, w) = waker();
            let ready = inner.register(Waiter::Wake(w));
            t.join().unwrap();
            if !ready {
                assert_eq!(count.0.load(Ordering::Relaxed), 1, "a lost wake-up");
            }
            assert!(inner.is_done());
            assert_eq!(
                std::sync::Arc::strong_count(&count),
                1,
                "the waiter is left in the slot"
            );
            drop(inner.take());
            inner.unregister();
            drop(inner.detach());
            assert_eq!(drops.load(Ordering::Relaxed), 1);
        });
    }

    #[test]
    fn join_replaced_waiter_the_last_one_is_woken() {
        loom::model(|| {
            let drops = std::sync::Arc::new(AtomicUsize::new(0));
            let inner = loom::sync::Arc::new(JoinInner::<Payload>::new());
            let t = completer(&inner, &drops);
            let (count1, w1) = waker();
            let (count2, w2) = waker();
            let mut w2 = Some(w2);
            let ready = inner.register(Waiter::Wake(w1))
                || inner.register(Waiter::Wake(w2.take().expect("once")));
            // Not registered when the first registration saw the result.
            drop(w2);
            t.join().unwrap();
            if !ready {
                assert_eq!(count2.0.load(Ordering::Relaxed), 1, "a lost wake-up");
            }
            for c in [&count1, &count2] {
                assert_eq!(std::sync::Arc::strong_count(c), 1, "a waiter is left");
            }
            // Dropped unjoined: the handle or the completer drops it.
            inner.unregister();
            drop(inner.detach());
            assert_eq!(drops.load(Ordering::Relaxed), 1);
        });
    }
}
