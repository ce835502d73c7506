//! The task: one coroutine's header, its park state, and the token that
//! carries the right to run it.
//!
//! # Ownership
//!
//! A task lives in one heap cell: its [`TaskHeader`] first, then (in the
//! task layer, `task/join.rs`) the user's closure and the slot its result
//! goes to. One allocation per task, freed by whoever drops the last
//! [`TaskRef`], a counted thin pointer to the header that finds the rest of
//! the cell through the header's [`TaskVTable`].
//!
//! Many parties may hold a `TaskRef` (the [`JoinHandle`](crate::JoinHandle),
//! the [`Task`](crate::Task) handles used to unpark it, a timer), but
//! exactly one party at a time holds the **execution right**: the
//! right to resume its coroutine and to touch its [`RunState`] (context, stack,
//! whether the closure has started). That right is the [`Runnable`] token. It is not `Clone`,
//! and it is created in exactly two places:
//!
//! 1. at spawn, for the new task;
//! 2. by the one unparker that wins the `PARKED -> EMPTY` transition (see "Parking" below),
//!    which re-materialises the reference the parked state kept.
//!
//! Queues carry `Runnable`s; a Processer that pops one owns the right until it
//! pushes it back, parks it, or frees it. Because the token is unique, a steal
//! racing a resume is impossible by construction: whoever holds the token is
//! the only one that can resume, and a thief can only take tokens that sit in
//! a queue.
//!
//! # Parking
//!
//! The park state machine lives in [`ParkState`] (`task/park_state.rs`, where
//! its transitions and races are written out and model-checked). This file
//! adds ownership to it: when the Processer parks a task, the task's
//! `Runnable` reference is leaked into the `PARKED` state, and the one
//! unparker that wins `PARKED -> EMPTY` takes it back as a new `Runnable`.
//! A parked task is therefore never freed, and never scheduled twice.

use std::any::Any;
use std::cell::UnsafeCell;
use std::fmt;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ops::Deref;
use std::panic::Location;
use std::ptr::NonNull;
use std::sync::atomic::{self, AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use context::Context;

use crate::runtime::task::unwind_bank::Banked;

use crate::coroutine::stack::StackMem;
use crate::error::JoinError;
use crate::runtime::processer::next_slot::Token;
use crate::runtime::shared::Shared;
use crate::runtime::task::live;
use crate::runtime::task::park_state::{ParkOutcome, ParkState};
use crate::runtime::task::wait::{WaitOn, WaitRecord};

/// A task's identifier, unique within the process.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(u64);

impl TaskId {
    pub(crate) fn next() -> TaskId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        TaskId(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The id as a number.
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskId({})", self.0)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A task as reports name it: `task 17 'reader'`, or `task 17`.
pub(crate) struct TaskLabel<'a>(pub(crate) TaskId, pub(crate) Option<&'a str>);

impl fmt::Display for TaskLabel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task {}", self.0)?;
        if let Some(name) = self.1 {
            write!(f, " '{name}'")?;
        }
        Ok(())
    }
}

/// The operations on the part of a task's cell the runtime does not know:
/// the user's closure and its result slot, laid out after the header by
/// the task layer (`task/join.rs`). One static table per closure type.
pub(crate) struct TaskVTable {
    /// Runs the closure at the root of the task's coroutine and publishes
    /// its result. Must not unwind.
    ///
    /// # Safety
    /// The argument points at the header of a live cell of this table's
    /// type (with the provenance of the whole cell), and the caller holds
    /// its execution right and runs on its stack.
    pub(crate) run: unsafe fn(NonNull<TaskHeader>),
    /// The task can never run (no stack could be had): drop the closure and
    /// publish the error.
    ///
    /// # Safety
    /// As for `run`, except that the caller is the Processer.
    pub(crate) fail: unsafe fn(NonNull<TaskHeader>, JoinError),
    /// Drops the cell and frees its memory; the last [`TaskRef`] is gone.
    /// Must not unwind.
    ///
    /// # Safety
    /// The argument points at a cell of this table's type that nobody
    /// references any more.
    pub(crate) dealloc: unsafe fn(NonNull<TaskHeader>),
}

/// The values of one task, keyed by the address of their `LocalKey`.
///
/// Values are kept as raw pointers from `Box::into_raw`, so that growing the
/// vector never moves (and so re-asserts unique ownership of) a `Box` while
/// a `&T` handed to `with` points into it.
#[derive(Default)]
pub(crate) struct LocalMap {
    pub(crate) values: Vec<(usize, *mut dyn Any)>,
}

impl LocalMap {
    pub(crate) fn get(&self, key: usize) -> Option<*const dyn Any> {
        self.values
            .iter()
            .find(|(k, _)| *k == key)
            .map(|&(_, v)| v as *const dyn Any)
    }
}

impl Drop for LocalMap {
    fn drop(&mut self) {
        // Values still here when the header is dropped would be dropped on
        // whichever thread drops it, which need not be the task's: leak them
        // instead (clear_current already dropped everything it could on the
        // task itself).
        self.values.clear();
    }
}

/// No home Processer yet.
pub(crate) const NO_HOME: usize = usize::MAX;

/// Not pinned: any Processer may run the task.
pub(crate) const NO_PIN: usize = usize::MAX;

/// [`TaskHeader::phase`]: spawned, not started yet.
pub(crate) const PHASE_NEW: u8 = 0;
/// [`TaskHeader::phase`]: started (running, queued or parked).
pub(crate) const PHASE_STARTED: u8 = 1;
/// [`TaskHeader::phase`]: finished, waiting in its Processer's gc queue.
pub(crate) const PHASE_DONE: u8 = 2;

/// The part of a task only the holder of its [`Runnable`] may touch.
pub(crate) struct RunState {
    /// The saved coroutine context; `None` before the first run and after
    /// the task finished.
    pub(crate) ctx: Option<Context>,
    /// The stack the coroutine runs on; allocated at first run.
    pub(crate) stack: Option<StackMem>,
    /// Whether the task has not been started yet (its closure, in the
    /// cell, is still to run or to fail).
    pub(crate) fresh: bool,
    /// `ctx` was saved by a task dump's stack walk (`runtime/dump/walk.rs`), which
    /// runs on top of the task's own saved context: resuming it runs the
    /// walk's frame, which returns into the task. A later dump resumes the
    /// walk's frame rather than stacking another on top.
    pub(crate) in_walk: bool,
    /// The saved stack pointers a direct switch may go to, `lo..=hi`: on
    /// the task's own stack with enough of it free below for the filing
    /// that runs there (`processer::direct_ctx`). Set when the stack is
    /// given; empty before.
    pub(crate) ontop_room: (usize, usize),
    /// The panic count the task took off its thread when it switched out
    /// in the middle of an unwind, and the carriers that hold it while it
    /// runs (`task/unwind_bank.rs`). `None` for every task that never did.
    pub(crate) banked: Option<Box<Banked>>,
    /// With the `tracing` feature: the task's span and the spans it had
    /// entered when it last switched out (`task/trace.rs`). `None` until its
    /// first switch in with a dispatcher set.
    #[cfg(feature = "tracing")]
    pub(crate) trace: Option<Box<crate::runtime::task::trace::TaskTrace>>,
}

/// The shared header of one task: the first field of its cell.
pub(crate) struct TaskHeader {
    /// The number of [`TaskRef`]s; the cell is freed when it drops to zero.
    refs: AtomicUsize,
    /// How to run, fail and free the rest of the cell.
    vtable: &'static TaskVTable,
    pub(crate) id: TaskId,
    pub(crate) name: Option<Box<str>>,
    /// Requested usable stack size in bytes (page-rounded).
    pub(crate) stack_size: usize,
    /// Index of the Processer this task must run on ([`NO_PIN`]: any): its
    /// user pin ([`user_pin`](Self::user_pin)), or, while the task is in the
    /// middle of an unwind, the Processer whose thread holds that unwind
    /// (`ProcLocal::pin_while_unwinding`). Written only by the holder of the
    /// task's [`Runnable`], who hands both on together through a queue or a
    /// park transition (Release/Acquire), so Relaxed suffices.
    pin: AtomicUsize,
    /// The pin the user asked for (`Builder::pin`, a `block_on` root's
    /// caller), which never changes.
    pub(crate) user_pin: Option<usize>,
    /// The user vouched that the task may move after it started
    /// (`Builder::migratable`); otherwise it is bound at its first run to
    /// the Processer that runs it (`ProcLocal::run_task`).
    pub(crate) migratable: bool,
    /// The scheduler the task belongs to.
    pub(crate) shared: Arc<Shared>,
    /// The park state machine (see `task/park_state.rs`).
    pub(crate) park: ParkState,
    /// Index of the Processer that last ran the task; a hint for routing
    /// wake-ups from other threads. Relaxed: any value is a valid hint.
    pub(crate) home: AtomicUsize,
    /// When the Dispatcher last moved the task off a blocked Processer, as
    /// nanoseconds since that Dispatcher's start plus one; 0 once the task
    /// has run since (or was never moved). Written by the holder of the
    /// execution right (the Dispatcher as it moves the task, the Processer
    /// that runs it), so Relaxed suffices. A moved task is not moved again
    /// before it has run, for `block_timeout` (see ARCHITECTURE.md,
    /// "Dispatcher").
    pub(crate) moved_at: AtomicU64,
    /// Guarded by the execution right (the [`Runnable`] token).
    run: UnsafeCell<RunState>,
    /// Coroutine-local values; touched only by the task itself while it runs.
    pub(crate) locals: UnsafeCell<LocalMap>,
    /// Where the user spawned the task (`#[track_caller]` through `spawn`,
    /// `go!`, `Builder::spawn`).
    pub(crate) spawned_at: Option<&'static Location<'static>>,
    /// [`PHASE_NEW`], [`PHASE_STARTED`] or [`PHASE_DONE`]. Written by the
    /// holder of the execution right; read by task dumps. Relaxed: a dump
    /// that sees a stale phase reports a task that moved on at that
    /// instant, and it reads nothing else on the strength of it.
    pub(crate) phase: AtomicU8,
    /// What the task waits on when parked (see `task/wait.rs`); guarded by the
    /// execution right. Uninitialised until the task's first park, which
    /// writes every field (the task `on` and `deadline` in
    /// [`suspend_parked`], the only way a task switches out to park; its
    /// Processer `since`) before the task is `PARKED`, the only state in
    /// which it is read. Left uninitialised at spawn: the spawn path pays
    /// no stores for it.
    wait: UnsafeCell<MaybeUninit<WaitRecord>>,
    /// Where the task sits in its scheduler's registry of live tasks (see
    /// `task/live.rs`); guarded by the execution right.
    live: UnsafeCell<live::Entry>,
    /// The task was asked to stop (`runtime/task/cancel.rs`). Set once, by
    /// `cancel::request`, before the wake-up that makes the task look at it
    /// (Release, paired with the Acquire of the task's park: see
    /// "A wake-up that races the cancellation" there); never cleared.
    pub(crate) cancel: AtomicBool,
    /// How many `cancel::Mask`s the task holds: while non-zero its waits do
    /// not observe the cancellation (a condvar's relock, a hooked call).
    /// Touched only by the task itself, so Relaxed.
    pub(crate) cancel_mask: AtomicU32,
}

// SAFETY: the non-Sync fields are `run` and `locals` (UnsafeCell). `run` is
// accessed only by the holder of the unique Runnable token, and the token is
// handed between threads through synchronising queues or the Release/Acquire
// park transitions, so no two threads touch it concurrently. `locals` is only
// touched by the running task itself, which is also serialised by the token.
unsafe impl Sync for TaskHeader {}
// SAFETY: `run` holds a Context, a pointer into the
// task's own stack, which travels with the task. `locals` may hold non-Send
// values, but they are created, used and dropped only by the task itself
// (clear_current, on the task's stack); any left over are leaked by
// LocalMap's Drop rather than dropped on another thread. Like everything
// else on the task's stack, they follow the task across threads: that is
// the thread-migration caveat documented at the crate root.
unsafe impl Send for TaskHeader {}

impl TaskHeader {
    /// A header for a new cell; the task layer puts it first in the cell
    /// and hands the cell to [`TaskRef::from_cell`].
    #[inline]
    pub(crate) fn new(
        shared: Arc<Shared>,
        name: Option<Box<str>>,
        stack_size: usize,
        pin: Option<usize>,
        migratable: bool,
        spawned_at: Option<&'static Location<'static>>,
        vtable: &'static TaskVTable,
    ) -> TaskHeader {
        TaskHeader {
            // One for the Runnable, one for the JoinHandle.
            refs: AtomicUsize::new(2),
            vtable,
            id: TaskId::next(),
            name,
            stack_size,
            pin: AtomicUsize::new(pin.unwrap_or(NO_PIN)),
            user_pin: pin,
            migratable,
            shared,
            park: ParkState::new(),
            home: AtomicUsize::new(NO_HOME),
            moved_at: AtomicU64::new(0),
            run: UnsafeCell::new(RunState {
                ctx: None,
                stack: None,
                fresh: true,
                in_walk: false,
                ontop_room: (usize::MAX, 0),
                banked: None,
                #[cfg(feature = "tracing")]
                trace: None,
            }),
            locals: UnsafeCell::new(LocalMap::default()),
            spawned_at,
            phase: AtomicU8::new(PHASE_NEW),
            wait: UnsafeCell::new(MaybeUninit::uninit()),
            live: UnsafeCell::new(live::Entry::NONE),
            cancel: AtomicBool::new(false),
            cancel_mask: AtomicU32::new(0),
        }
    }

    /// The running task names what it is about to park on.
    ///
    /// # Safety
    /// Called by the task itself, running (it holds its execution right),
    /// just before it switches out to park.
    #[inline]
    pub(crate) unsafe fn set_wait(&self, on: WaitOn, deadline: Option<std::time::Instant>) {
        // SAFETY: the record is guarded by the execution right, which the
        // caller holds (contract); the fields are written through raw
        // pointers, as the record may not be initialised yet.
        unsafe {
            let w = (*self.wait.get()).as_mut_ptr();
            std::ptr::addr_of_mut!((*w).on).write(on);
            std::ptr::addr_of_mut!((*w).deadline).write(deadline);
        }
    }

    /// The Processer this task must run on, if any (see the field).
    #[inline]
    pub(crate) fn pin(&self) -> Option<usize> {
        let p = self.pin.load(Ordering::Relaxed);
        (p != NO_PIN).then_some(p)
    }

    /// Sets (`Some`) or ends (`None`) a pin the runtime chose: to the
    /// Processer that first ran the task, or to the one holding its unwind.
    /// Only the holder of the task's [`Runnable`] calls it, and only for a
    /// task the user did not pin.
    pub(crate) fn set_runtime_pin(&self, to: Option<usize>) {
        debug_assert!(self.user_pin.is_none());
        self.pin.store(to.unwrap_or(NO_PIN), Ordering::Relaxed);
    }

    /// Whether the task was asked to stop (`runtime/task/cancel.rs`).
    #[inline]
    pub(crate) fn cancel_requested(&self) -> bool {
        // Acquire: pairs with the requester's swap, for a task that looks
        // while it runs (`is_cancelled`) rather than after a wake-up.
        self.cancel.load(Ordering::Acquire)
    }

    /// How reports name the task: `task 17 'reader'`.
    pub(crate) fn label(&self) -> TaskLabel<'_> {
        TaskLabel(self.id, self.name.as_deref())
    }

    /// The guard page range of the task's stack, if it has one. Only called
    /// from the signal handler on the thread that runs the task.
    pub(crate) fn guard_range(&self) -> Option<(usize, usize)> {
        // SAFETY: called on the thread that holds the execution right (the
        // task is running there and faulted); a read-only peek.
        unsafe { (*self.run.get()).stack.as_ref().map(StackMem::guard) }
    }
}

/// A counted reference to a task's cell: an `Arc` whose pointee is the
/// header, with the rest of the cell behind the header's vtable.
///
/// Counting follows `Arc`: a clone is a Relaxed increment (the cloner already
/// holds a reference, so the cell cannot go away under it); a drop is a
/// Release decrement, and the one that reaches zero fences with Acquire, so
/// every other holder's last use of the cell happens before it is freed.
pub(crate) struct TaskRef(NonNull<TaskHeader>);

// SAFETY: a TaskRef gives shared access to a TaskHeader, which is Send and
// Sync; the count is atomic.
unsafe impl Send for TaskRef {}
// SAFETY: as above.
unsafe impl Sync for TaskRef {}

impl TaskRef {
    /// Takes over a freshly made cell whose header is its first field and
    /// was made by [`TaskHeader::new`] (two references: the returned
    /// Runnable and the second TaskRef, for the join handle).
    ///
    /// # Safety
    /// `cell` points at a live heap cell that starts with its header (a
    /// `#[repr(C)]` struct whose first field is the header) and that the
    /// header's vtable knows how to free; nobody else references it.
    pub(crate) unsafe fn from_cell(cell: NonNull<TaskHeader>) -> (Runnable, TaskRef) {
        (Runnable(TaskRef(cell)), TaskRef(cell))
    }

    /// The header's address (what waiter lists and the thread-local
    /// "current task" keep).
    pub(crate) fn as_ptr(&self) -> *const TaskHeader {
        self.0.as_ptr()
    }

    /// Whether two references name the same task.
    pub(crate) fn ptr_eq(a: &TaskRef, b: &TaskRef) -> bool {
        a.0 == b.0
    }

    /// Gives up the reference without dropping it (see [`from_raw`](Self::from_raw)).
    pub(crate) fn into_raw(self) -> *const TaskHeader {
        ManuallyDrop::new(self).0.as_ptr()
    }

    /// Takes back a reference given up by [`into_raw`](Self::into_raw).
    ///
    /// # Safety
    /// `p` came from `into_raw`, and each such reference is taken back once.
    pub(crate) unsafe fn from_raw(p: *const TaskHeader) -> TaskRef {
        // SAFETY: into_raw never gives out null.
        TaskRef(unsafe { NonNull::new_unchecked(p.cast_mut()) })
    }

    /// A new reference to a header someone else keeps alive.
    ///
    /// # Safety
    /// `p` points at a live header for the duration of the call.
    pub(crate) unsafe fn clone_from_ptr(p: *const TaskHeader) -> TaskRef {
        // SAFETY: live per the contract; the borrowed TaskRef is never dropped.
        let borrowed = ManuallyDrop::new(unsafe { TaskRef::from_raw(p) });
        TaskRef::clone(&borrowed)
    }
}

impl Clone for TaskRef {
    fn clone(&self) -> TaskRef {
        // Relaxed, as in Arc: the new reference is made from an existing
        // one, which keeps the cell alive meanwhile.
        let old = self.refs.fetch_add(1, Ordering::Relaxed);
        if old > isize::MAX as usize {
            // As Arc does: a count this high means leaked references; wrap
            // around would free a live cell.
            std::process::abort();
        }
        TaskRef(self.0)
    }
}

impl Drop for TaskRef {
    fn drop(&mut self) {
        if self.refs.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Pairs with every other holder's Release decrement.
        atomic::fence(Ordering::Acquire);
        let vtable = self.vtable;
        // SAFETY: the count reached zero, so this was the last reference;
        // the vtable is the cell's own.
        unsafe { (vtable.dealloc)(self.0) }
    }
}

impl Deref for TaskRef {
    type Target = TaskHeader;

    fn deref(&self) -> &TaskHeader {
        // SAFETY: a TaskRef keeps its cell alive.
        unsafe { self.0.as_ref() }
    }
}

/// The unique right to run a task (see the module docs). Not `Clone`.
pub(crate) struct Runnable(TaskRef);

// SAFETY: `into_raw` never returns null, and `from_raw` takes back the one
// reference it gave out.
unsafe impl Token for Runnable {
    type Target = TaskHeader;

    fn into_raw(self) -> *mut TaskHeader {
        ManuallyDrop::new(self).0.as_ptr().cast_mut()
    }

    /// # Safety
    /// The trait's contract: `p` came from [`into_raw`](Token::into_raw)
    /// and is taken back once.
    unsafe fn from_raw(p: *mut TaskHeader) -> Runnable {
        // SAFETY: per the trait's contract, `p` owns one reference.
        Runnable(unsafe { TaskRef::from_raw(p) })
    }
}

impl Runnable {
    pub(crate) fn header(&self) -> &TaskRef {
        &self.0
    }

    /// The task's entry in the registry of live tasks.
    #[inline]
    pub(crate) fn live(&self) -> live::Entry {
        // SAFETY: guarded by the execution right, which this token is.
        unsafe { *self.0.live.get() }
    }

    /// Notes the task's entry in the registry of live tasks.
    #[inline]
    pub(crate) fn set_live(&self, e: live::Entry) {
        // SAFETY: guarded by the execution right, which this token is; no
        // reference into the cell is held across this write.
        unsafe { *self.0.live.get() = e }
    }

    /// Notes when the task parked (its Processer, completing the park).
    pub(crate) fn set_parked_since(&mut self, since: std::time::Instant) {
        // SAFETY: guarded by the execution right, which `&mut self` on the
        // token proves; written through a raw pointer, as the record may
        // not be initialised yet (see `TaskHeader::wait`).
        unsafe {
            let w = (*self.0.wait.get()).as_mut_ptr();
            std::ptr::addr_of_mut!((*w).since).write(Some(since));
        }
    }

    /// The task's run state.
    ///
    /// Holding `&mut self` on the token is exactly the execution right, so
    /// the returned reference is unique.
    pub(crate) fn run(&mut self) -> &mut RunState {
        // SAFETY: the token is unique (module docs), and `&mut self` proves
        // this caller holds it; no other reference to RunState exists.
        unsafe { &mut *self.0.run.get() }
    }

    /// Fails a task that can never run (see [`TaskVTable::fail`]).
    pub(crate) fn fail(&mut self, e: JoinError) {
        let run = self.run();
        if std::mem::take(&mut run.fresh) {
            // SAFETY: we hold the execution right, the task never ran, and
            // the TaskRef's pointer has the whole cell's provenance.
            unsafe { (self.0.vtable.fail)(self.0 .0, e) }
        }
    }

    /// Called by the Processer after the task switched out to park and its
    /// context was stored. If the task is now parked, the token's reference
    /// is leaked into the parked state and `None` is returned; if an unpark
    /// raced the switch-out, the task is given back to be requeued.
    pub(crate) fn park(self) -> Option<Runnable> {
        match self.0.park.try_park() {
            ParkOutcome::Parked => {
                // The parked state now owns this reference (see `unpark`).
                let _ = ManuallyDrop::new(self);
                None
            }
            ParkOutcome::Requeue => Some(self),
        }
    }
}

impl Drop for Runnable {
    /// The right to run the task ends here: the task finished, or it is
    /// dropped without having run. It leaves the registry of live tasks
    /// before its reference goes (see `task/live.rs`), unless its Processer's gc
    /// batch already took it out.
    fn drop(&mut self) {
        if self.live().is_registered() {
            live::unregister(self);
        }
    }
}

/// A task dump's hold on a parked task: the execution right, taken with
/// `PARKED -> DUMPING` and given back when dropped (see `task/park_state.rs`).
pub(crate) struct DumpHold(TaskRef);

impl DumpHold {
    /// Takes the right to run `t` if it is parked.
    pub(crate) fn try_take(t: &TaskRef) -> Option<DumpHold> {
        t.park.try_begin_dump().then(|| DumpHold(t.clone()))
    }

    /// The task's run state.
    pub(crate) fn run(&mut self) -> &mut RunState {
        // SAFETY: we hold the execution right (DUMPING), and `&mut self`
        // makes this the only reference to the run state.
        unsafe { &mut *self.0.run.get() }
    }

    /// The task's wait record.
    pub(crate) fn wait(&self) -> WaitRecord {
        // SAFETY: guarded by the execution right, which we hold (DUMPING);
        // the task is parked, so its park wrote every field (see
        // `TaskHeader::wait`).
        unsafe { (*self.0.wait.get()).assume_init() }
    }
}

impl Drop for DumpHold {
    fn drop(&mut self) {
        if self.0.park.end_dump() {
            // An unpark came meanwhile and left the task to us: the
            // reference the parked state kept is ours to schedule, as an
            // unparker's win would make it.
            // SAFETY: Runnable::park leaked one reference into PARKED, and
            // end_dump's `true` hands it to us alone.
            let r = Runnable(unsafe { TaskRef::from_raw(self.0.as_ptr()) });
            crate::runtime::context::schedule(r);
        }
    }
}

/// Wakes a task. Returns the execution right when this call moved the task
/// out of `PARKED`.
///
/// Takes the [`TaskRef`], not a `&TaskHeader`: the Runnable it may return
/// frees the cell at the end, so its pointer must be the cell's own, not
/// one narrowed to the header by a reference.
pub(crate) fn unpark(task: &TaskRef) -> Option<Runnable> {
    // SAFETY: the TaskRef keeps the header alive for the call.
    unsafe { unpark_raw(task.as_ptr()) }
}

/// [`unpark`] through a raw header pointer (a waiter list that holds no
/// reference count).
///
/// # Safety
/// `header` points at a live task header, and came from a [`TaskRef`] or a
/// [`Runnable`] (it has the whole cell's provenance, never a reference's).
pub(crate) unsafe fn unpark_raw(header: *const TaskHeader) -> Option<Runnable> {
    // SAFETY: live per the contract.
    let h = unsafe { &*header };
    if h.park.unpark() {
        #[cfg(feature = "tracing")]
        crate::runtime::task::trace::wake_event(h);
        // SAFETY: Runnable::park leaked exactly one reference when the task
        // entered PARKED, and only one unpark can win PARKED -> EMPTY; that
        // winner (us) takes the reference back.
        Some(Runnable(unsafe { TaskRef::from_raw(header) }))
    } else {
        None
    }
}

/// Switches the running task out to park, naming what it waits on (for
/// task dumps; see `task/wait.rs`).
///
/// # Safety
/// `h` is the header of the task running this code.
#[inline]
pub(crate) unsafe fn suspend_parked(
    h: &TaskHeader,
    on: WaitOn,
    deadline: Option<std::time::Instant>,
) {
    // SAFETY: per the contract, we are `h`'s task, running.
    unsafe { h.set_wait(on, deadline) };
    crate::runtime::processer::direct::switch_out(crate::coroutine::switch::Suspend::Park);
}

/// Consumes a pending token from inside the task. Returns whether there
/// was one.
pub(crate) fn take_token(header: &TaskHeader) -> bool {
    header.park.take_token()
}

/// The root function of every task's coroutine (a [`switch::Entry`]'s
/// `run`): runs the closure of the task whose header address is `header`.
///
/// [`switch::Entry`]: crate::coroutine::switch::Entry
///
/// # Safety
/// `header` is the address of the header of the task whose coroutine this
/// is, started for the first time by the holder of its execution right,
/// whose Runnable keeps the header alive while the task runs.
pub(crate) unsafe fn run_root(header: usize) {
    // SAFETY: per the contract: the address came from a TaskRef (the whole
    // cell's provenance, exposed by the cast to usize) and is not null.
    unsafe {
        let h = NonNull::new_unchecked(header as *mut TaskHeader);
        (h.as_ref().vtable.run)(h)
    }
}
