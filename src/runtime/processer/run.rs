//! The Processer loop: one OS thread that runs tasks.
//!
//! [`ProcLocal`] is the half of a Processer only its own thread touches:
//! the owner handle of the **runnable queue**, the local pinned queue, the
//! **gc queue** of finished tasks, and its stack pool. The half other
//! threads see is `ProcesserShared` (`processer/shared.rs`).
//!
//! This file owns the loop itself: picking, switching into a task, filing
//! it when it switches out (requeue, park, done), the gc queue, and the
//! direct switch's hand-over. The rest of `ProcLocal` lives beside it, one
//! concept a file (the table in `processer/mod.rs`).
//!
//! # The loop (libgo's `Processer::Process`)
//!
//! 1. Pick the next task: every `NEW_QUEUE_INTERVAL`th pick looks at the
//!    new and pinned queues first (so a task yielding in a loop cannot
//!    starve arrivals); otherwise local pinned and runnable alternate, then
//!    the new queue (`processer/queues.rs`).
//! 2. Switch into it: `switches += 1`, `running = true`. When it switches
//!    out: requeue (yield), park, or move it to the gc queue (done).
//! 3. Nothing to run: free the gc queue, then search and sleep
//!    (`processer/search.rs`, where the no-lost-wake-up protocol is drawn).
//!
//! Invariant: only this Processer's thread touches a `ProcLocal`; every
//! access is through `&ProcLocal`, since a running task reaches it through
//! the thread-local pointer while the loop below it is suspended.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::VecDeque;
use std::mem::ManuallyDrop;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_deque::Worker;

use crate::coroutine::registry;
use crate::coroutine::stack::StackMem;
use crate::coroutine::stacks::LocalStacks;
use crate::coroutine::switch::{self, Entry, EntrySlot, Suspend};
use crate::error::{contain, JoinError};
use crate::runtime::context;
use crate::runtime::processer::shared::{bump, Kind, ProcesserShared};
use crate::runtime::shared::Shared;
use crate::runtime::task::live::{self, ShardOwner};
#[cfg(feature = "tracing")]
use crate::runtime::task::trace;
use crate::runtime::task::unwind_bank;
use crate::runtime::task::{self, Runnable, TaskHeader};

use crate::runtime::io::Ring;
pub(crate) use crate::runtime::processer::queues::{Push, NEW_QUEUE_INTERVAL};
use crate::runtime::processer::search::Watch;
use crate::runtime::processer::timers::FireBufs;

/// Finished tasks are freed when the gc queue reaches this length.
const GC_BATCH: usize = 16;

/// The half of a Processer only its own thread touches. All access is through
/// `&ProcLocal` (interior mutability), because a running task reaches it
/// through the thread-local pointer while the loop below it is suspended.
pub(crate) struct ProcLocal {
    pub(crate) p: Arc<ProcesserShared>,
    pub(crate) sched: Arc<Shared>,
    pub(in crate::runtime) runnable: Worker<Runnable>,
    /// The local pinned queue. Every change is followed by
    /// `mirror_pinned`, which publishes its length to the Dispatcher.
    pub(in crate::runtime) pinned_local: RefCell<VecDeque<Runnable>>,
    /// Pops of the local pinned queue until the last task woken into it (by
    /// a firing of our timers, a poll of our reactor or ring, or another
    /// thread) has left it; 0: none waits there. While some wait, the pick
    /// favours the pinned queue (`queues::WOKEN_WEIGHT`).
    pub(in crate::runtime) woken_behind: Cell<usize>,
    pub(in crate::runtime) gc: RefCell<Vec<Runnable>>,
    pub(in crate::runtime) stacks: RefCell<LocalStacks>,
    pub(in crate::runtime) tick: Cell<u32>,
    /// Consecutive picks taken from the next-task slot.
    pub(in crate::runtime) streak: Cell<u8>,
    /// xorshift state, for the first victim of a steal round.
    pub(in crate::runtime) rng: Cell<u64>,
    /// This thread's copy of the scheduler's Processer table, and the
    /// table generation it was taken at (refreshed when that changes, so a
    /// steal does not touch the table's lock and reference count).
    pub(in crate::runtime) table: RefCell<(u64, Arc<Vec<Arc<ProcesserShared>>>)>,
    /// Plain copy of the switch counter (the owner's view).
    pub(in crate::runtime) switches: Cell<u64>,
    /// The task currently switched in.
    pub(in crate::runtime) current: Cell<*const TaskHeader>,
    /// The execution right of the task switched in now. The loop puts it
    /// here when it switches into a task, a direct switch replaces it with
    /// the next task's (`processer/direct.rs`), and whichever task finally switches
    /// back to the loop is the one the loop takes out and files.
    pub(in crate::runtime) switched_in: Cell<Option<Runnable>>,
    /// A task a direct switch picked but could not switch into (its first
    /// run needs the loop, or too little of its stack is free): the loop
    /// runs it next, before any other pick.
    pub(in crate::runtime) picked: Cell<Option<Runnable>>,
    /// Whether direct switches may happen here: not on a `block_on` caller,
    /// not in chaos mode (see `begin_direct`).
    pub(in crate::runtime) direct: bool,
    /// This Processer's watch over its peers (see `watch_peers`).
    pub(in crate::runtime) watch: RefCell<Watch>,
    /// Tasks a poll of the reactor woke, on their way to the runnable queue
    /// (kept to reuse its allocation).
    pub(in crate::runtime) woken: RefCell<Vec<Runnable>>,
    /// Of `woken`, those that must run on other Processers, on their way
    /// there (`accept_woken`; kept to reuse its allocation).
    pub(in crate::runtime) woken_away: RefCell<Vec<Runnable>>,
    /// Scratch space of `fire_timers`.
    pub(in crate::runtime) fired: RefCell<FireBufs>,
    /// This core Processer's io_uring, made at its first use under the
    /// uring driver (`None` inside: it could not be made, and the tasks
    /// here use the readiness path). See `runtime/io/uring.rs`.
    pub(in crate::runtime) ring: OnceCell<Option<Ring>>,
    /// When the Processer last had work (for Extra retirement).
    pub(crate) idle_since: Cell<Option<Instant>>,
    /// Tasks pinned here because they switched out in the middle of an
    /// unwind (see `pin_while_unwinding`).
    pub(crate) unwind_pinned: Cell<usize>,
    /// Whether this loop keeps each task's panic count its own
    /// (`task/unwind_bank.rs`): false on a `block_on` caller that entered its
    /// loop while unwinding itself, whose count is no task's.
    pub(in crate::runtime) banks: Cell<bool>,
    /// Live tasks bound here at their first run (see `run_task`).
    pub(crate) bound: Cell<usize>,
    /// This thread's shard of the registry of live tasks (`task/live.rs`).
    pub(crate) live: ManuallyDrop<ShardOwner>,
    /// A coarse clock: read at every periodic look outward (every
    /// [`NEW_QUEUE_INTERVAL`] picks), when the Processer wakes, and when a
    /// task comes back from a run the Dispatcher found blocked. A parking
    /// task's wait record takes its time from here (task dumps' `waited`),
    /// so the park path reads no clock.
    pub(in crate::runtime) clock: Cell<Instant>,
}

impl Drop for ProcLocal {
    fn drop(&mut self) {
        // SAFETY: taken once, here, and never used again.
        let live = unsafe { ManuallyDrop::take(&mut self.live) };
        self.sched.live.give_back(live);
    }
}

impl ProcLocal {
    /// The task switched in right now (null between tasks).
    pub(crate) fn current(&self) -> *const TaskHeader {
        self.current.get()
    }

    pub(crate) fn new(
        p: Arc<ProcesserShared>,
        sched: Arc<Shared>,
        runnable: Worker<Runnable>,
    ) -> Self {
        let size = sched.config.stack_size;
        let table = RefCell::new((sched.processers_gen(), sched.processers_snapshot()));
        let direct = p.kind != Kind::Caller && !sched.config.chaos;
        // Any odd seed will do; mix the slot index so neighbours diverge.
        let rng = Cell::new(
            (p.index as u64 ^ 0x9E37_79B9_7F4A_7C15).wrapping_mul(0xD1B5_4A32_D192_ED03) | 1,
        );
        ProcLocal {
            p,
            runnable,
            pinned_local: RefCell::new(VecDeque::new()),
            woken_behind: Cell::new(0),
            gc: RefCell::new(Vec::new()),
            stacks: RefCell::new(LocalStacks::new(size)),
            tick: Cell::new(0),
            streak: Cell::new(0),
            rng,
            table,
            switches: Cell::new(0),
            current: Cell::new(std::ptr::null()),
            switched_in: Cell::new(None),
            picked: Cell::new(None),
            direct,
            watch: RefCell::new(Watch::default()),
            woken: RefCell::new(Vec::new()),
            woken_away: RefCell::new(Vec::new()),
            fired: RefCell::new(FireBufs::default()),
            ring: OnceCell::new(),
            idle_since: Cell::new(None),
            unwind_pinned: Cell::new(0),
            banks: Cell::new(true),
            bound: Cell::new(0),
            live: ManuallyDrop::new(sched.live.take_shard()),
            clock: Cell::new(Instant::now()),
            sched,
        }
    }

    /// A direct switch, task side (the protocol is in `processer/direct.rs`): runs on
    /// the stack of the task switching out, on this Processer's thread.
    /// Picks the next task as the loop would, and if it needs nothing from
    /// the loop, switches it in (`switched_in`, `current`, the switch
    /// counters, `home`) and returns the execution right of the running
    /// task, to be filed once its context is saved, with the next task's
    /// context to switch to. `None`: go through the loop; a task picked
    /// that cannot be switched into directly waits in `picked` for it.
    ///
    /// The loop keeps control regularly: no direct switch on a `block_on`
    /// caller (whose loop checks its condition after every task) or in
    /// chaos mode (which moves every task switching out), nor when due
    /// timers wait or the pick is the periodic look's (every
    /// [`NEW_QUEUE_INTERVAL`]th), which the loop then makes. So at most
    /// `NEW_QUEUE_INTERVAL - 1` direct switches in a row.
    #[inline(always)]
    pub(crate) fn begin_direct(&self) -> Option<(Runnable, ::context::Context)> {
        if !self.direct || self.p.look_out.load(Ordering::Relaxed) != 0 {
            return None;
        }
        if std::thread::panicking() {
            // The task switching out unwinds: the loop banks its panic
            // count (`task/unwind_bank.rs`).
            return None;
        }
        let tick = self.tick.get().wrapping_add(1);
        if tick % NEW_QUEUE_INTERVAL == 0 {
            return None; // the loop's `next_task` counts it and looks out
        }
        self.tick.set(tick);
        let mut n = self.pick_local(tick)?;
        let ctx = if n.run().banked.is_some() {
            // Its panic count goes back on the thread in the loop, after the
            // running task's has left it (`task/unwind_bank.rs`).
            None
        } else {
            direct_ctx(&mut n)
        };
        let Some(ctx) = ctx else {
            self.picked.set(Some(n));
            return None;
        };
        // Whatever a dump's walk left on top returns into the task.
        n.run().in_walk = false;
        let header = n.header().as_ptr();
        if n.header().home.load(Ordering::Relaxed) != self.p.index {
            n.header().home.store(self.p.index, Ordering::Relaxed);
        }
        if n.header().moved_at.load(Ordering::Relaxed) != 0 {
            n.header().moved_at.store(0, Ordering::Relaxed);
        }
        #[cfg(not(feature = "tracing"))]
        let Some(t) = self.switched_in.replace(Some(n)) else {
            crate::sys::fatal::fatal("a direct switch with no task switched in");
        };
        // The leaving task's spans off the thread, the arriving one's on
        // (`task/trace.rs`).
        #[cfg(feature = "tracing")]
        let t = {
            let Some(mut t) = self.switched_in.take() else {
                crate::sys::fatal::fatal("a direct switch with no task switched in");
            };
            trace::switch_out(&mut t.run().trace, false);
            trace::switch_in(&mut n);
            self.switched_in.set(Some(n));
            t
        };
        // `running` stays true: a task is switched in all along.
        self.count_switch(header);
        let d = &self.p.direct_switches;
        d.store(d.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        Some((t, ctx))
    }

    /// A direct switch, on the next task's stack: files the task that
    /// switched out (`t`, whose context `ctx` was just saved), as the loop
    /// would have. Must not unwind (the caller makes a panic fatal).
    #[inline(always)]
    pub(crate) fn end_direct(&self, t: Runnable, ctx: ::context::Context, why: Suspend) {
        debug_assert!(why != Suspend::Done);
        self.file(t, ctx, why);
    }

    /// Counts a switch into the task `header` (the Dispatcher's blocking
    /// detection and the peers' watch read the shared counter) and makes it
    /// the current task (task dumps, `context::current_task_ptr`).
    #[inline]
    pub(in crate::runtime) fn count_switch(&self, header: *const TaskHeader) {
        let n = self.switches.get() + 1;
        self.switches.set(n);
        self.p.switches.store(n, Ordering::Relaxed);
        self.p.current.store(header.cast_mut(), Ordering::Relaxed);
        self.current.set(header);
    }

    /// Runs one task until it switches out, then files it.
    pub(in crate::runtime) fn run_task(&self, mut t: Runnable) {
        if t.run().fresh && t.header().cancel_requested() {
            // Cancelled before it started: it never runs. Its closure is
            // dropped here, on this thread (it is `Send`).
            self.fail_fresh(t, JoinError::cancelled());
            return;
        }
        if t.run().fresh {
            match self.place_fresh(t) {
                Some(here) => t = here,
                None => return,
            }
        }
        let header = t.header().as_ptr();
        if t.header().home.load(Ordering::Relaxed) != self.p.index {
            t.header().home.store(self.p.index, Ordering::Relaxed);
        }
        // It runs: a rescue may move it again (see `TaskHeader::moved_at`).
        if t.header().moved_at.load(Ordering::Relaxed) != 0 {
            t.header().moved_at.store(0, Ordering::Relaxed);
        }
        let mut slot: EntrySlot = None;
        let mut first_run = false;
        let ctx = match t.run().ctx.take() {
            Some(ctx) => {
                // Whatever a dump's walk left on top returns into the task.
                t.run().in_walk = false;
                ctx
            }
            None => match self.alloc_stack(t.header().stack_size) {
                Ok(stack) => {
                    let ctx = switch::make_context(&stack);
                    let run = t.run();
                    run.ontop_room = ontop_room(&stack);
                    run.stack = Some(stack);
                    if std::mem::take(&mut run.fresh) {
                        slot = Some(Entry {
                            run: task::run_root,
                            arg: header as usize,
                        });
                        first_run = true;
                        t.header()
                            .phase
                            .store(task::PHASE_STARTED, Ordering::Relaxed);
                    }
                    ctx
                }
                Err(e) => {
                    // The task can never run: fail its join handle.
                    self.fail_fresh(t, JoinError::stack_exhausted(e));
                    return;
                }
            },
        };
        if first_run && t.header().user_pin.is_none() && !self.may_move(t.header()) {
            if t.header().pin() == Some(self.p.index) {
                // Placed here by another Processer (`place_fresh`): no
                // longer waiting in our pinned queue.
                self.p.placed.fetch_sub(1, Ordering::Relaxed);
            }
            // Bound: from its first switch on, the task may hold addresses
            // of this thread's thread-locals (see `may_move`).
            t.header().set_runtime_pin(Some(self.p.index));
            self.set_bound(self.bound.get() + 1);
        }
        if let Some(b) = t.run().banked.as_deref_mut() {
            if self.banks.get() {
                // Its panic count back on this thread (zero until now).
                unwind_bank::restore_at_switch_in(b);
            }
        }
        #[cfg(feature = "tracing")]
        trace::switch_in(&mut t);
        self.p.running.store(true, Ordering::Relaxed);
        self.count_switch(header);
        self.switched_in.set(Some(t));
        // SAFETY: `ctx` is the task's saved context (or a fresh one on its
        // own stack, which RunState keeps alive), and we hold its Runnable
        // (in `switched_in`). `slot` outlives the switch: we are suspended
        // inside `resume` until a task switches back.
        let (ctx, why) = unsafe { switch::resume(ctx, &mut slot as *mut EntrySlot as usize) };
        // The task that switched back: `t`, or the last of the tasks direct
        // switches went through after it (`processer/direct.rs`).
        #[allow(unused_mut)]
        let Some(mut t) = self.switched_in.take() else {
            crate::sys::fatal::fatal("a task switched back with none switched in");
        };
        #[cfg(feature = "tracing")]
        trace::switch_out(&mut t.run().trace, why == Suspend::Done);
        self.current.set(std::ptr::null());
        self.p.running.store(false, Ordering::Relaxed);
        self.file(t, ctx, why);
    }

    /// Completes a task that never started with `e`. That drops the user's
    /// closure here: its panic is contained.
    fn fail_fresh(&self, mut t: Runnable, e: JoinError) {
        if t.header().user_pin.is_none() && t.header().pin() == Some(self.p.index) {
            // Placed here by another Processer (`place_fresh`), and never
            // bound: no longer waiting in our pinned queue.
            self.p.placed.fetch_sub(1, Ordering::Relaxed);
        }
        self.sched.completed.fetch_add(1, Ordering::Relaxed);
        t.header().phase.store(task::PHASE_DONE, Ordering::Relaxed);
        contain("a task's closure", || t.fail(e));
        self.finish(t);
    }

    /// Files a task that switched out, with its saved context `ctx`: the
    /// per-switch-out bookkeeping, then requeue (yield), park, or finish.
    /// From the loop, or on the next task's stack at a direct switch. The
    /// context is stored before the task is published (queued or parked),
    /// so no thief or unparker can see it without.
    #[inline(always)]
    pub(in crate::runtime) fn file(&self, mut t: Runnable, ctx: ::context::Context, why: Suspend) {
        if self.sched.stacks.is_dense() {
            check_dense_stack(&mut t, &ctx);
        }
        if self.p.blocked.load(Ordering::Relaxed) {
            // Switched again: active at once (the Dispatcher agrees on its
            // next sample, when it sees the counter moved).
            self.p.blocked.store(false, Ordering::Relaxed);
            self.clock.set(Instant::now());
        }
        // Before the task is filed (a finished one was unpinned, as its
        // unwind, if any, ended at its root). `unwinding`: the count on
        // this thread is the task's own (`task/unwind_bank.rs`).
        let unwinding = std::thread::panicking();
        self.pin_while_unwinding(t.header(), unwinding);
        if unwinding || t.run().banked.is_some() {
            self.bank_unwind(&mut t, why);
        }
        match why {
            Suspend::Yield => {
                bump(&self.p.metrics.yields, 1);
                t.run().ctx = Some(ctx);
                self.push_local(t, Push::Quiet);
            }
            Suspend::Park => {
                bump(&self.p.metrics.parks, 1);
                #[cfg(feature = "tracing")]
                trace::park_event(t.header(), self.p.index);
                t.run().ctx = Some(ctx);
                t.set_parked_since(self.clock.get());
                if let Some(t) = t.park() {
                    // An unpark raced the switch-out: run it again.
                    self.push_local(t, Push::Quiet);
                }
            }
            Suspend::Done => {
                // The finished context is never resumed: forget it.
                let _ = ctx;
                t.header().phase.store(task::PHASE_DONE, Ordering::Relaxed);
                self.release_pin(t.header());
                self.finish(t);
            }
        }
    }

    /// Takes the panic count of a task that switched out mid-unwind off this
    /// thread, or gives back the carriers it no longer needs
    /// (`task/unwind_bank.rs`).
    #[cold]
    #[inline(never)]
    fn bank_unwind(&self, t: &mut Runnable, why: Suspend) {
        if !self.banks.get() {
            return;
        }
        if why == Suspend::Done {
            if let Some(b) = t.run().banked.take() {
                unwind_bank::release(*b);
            }
        } else {
            unwind_bank::bank_at_switch_out(&mut t.run().banked);
        }
    }

    /// Accounts a finished task and files it in the gc queue.
    pub(in crate::runtime) fn finish(&self, t: Runnable) {
        let mut gc = self.gc.borrow_mut();
        gc.push(t);
        if gc.len() >= GC_BATCH {
            drop(gc);
            self.gc_flush();
        }
    }

    /// Frees finished tasks; their stacks go back to the pools.
    pub(in crate::runtime) fn gc_flush(&self) {
        // Taken out while the tasks are dropped (their cells' destructors
        // run user code), then given back empty, keeping its capacity.
        let mut batch = std::mem::take(&mut *self.gc.borrow_mut());
        if batch.is_empty() {
            return;
        }
        // Off the alive count first, one update for the batch (a line every
        // spawner writes too), and before any cell is dropped: a destructor
        // that waits for the count (a shutdown) finds these gone already.
        self.sched.tasks_finished(batch.len());
        // Out of the registry of live tasks, under one lock per shard,
        // before the Runnables go (`task/live.rs`).
        live::unregister_batch(&mut batch);
        let shared = &self.sched.stacks;
        let mut local = self.stacks.borrow_mut();
        let mut released = false;
        for mut t in batch.drain(..) {
            if let Some(s) = t.run().stack.take() {
                released = true;
                local.free(shared, s);
            }
            // Dropping `t` may free the task's cell; that contains a panic
            // of whatever user value is left in it (`TaskVTable::dealloc`).
            drop(t);
        }
        drop(local);
        let mut gc = self.gc.borrow_mut();
        if gc.is_empty() {
            *gc = batch;
        }
        drop(gc);
        if released {
            // Only a stack actually given back makes spawning possible again
            // (a task that failed to get one must not clear the record).
            shared.released();
        }
    }

    pub(in crate::runtime) fn alloc_stack(&self, size: usize) -> std::io::Result<StackMem> {
        self.stacks.borrow_mut().alloc(&self.sched.stacks, size)
    }

    /// The Processer loop. Returns when the scheduler stops, or when `until`
    /// says so (a `block_on` caller), or when an Extra Processer retires.
    pub(crate) fn run(&self, until: Option<&dyn Fn() -> bool>) {
        let prev = context::enter(self);
        self.banks.set(!std::thread::panicking());
        crate::coroutine::overflow::thread_init();
        crate::runtime::task::cells::processer_thread();
        // Busy time is taken per batch of runs (from the first task picked
        // after an idle spell to the next time the queues are empty), two
        // clock reads a batch, none per switch.
        let m = &self.p.metrics;
        loop {
            if let Some(t) = self.next_task() {
                if m.busy_since.load(Ordering::Relaxed) == 0 {
                    m.busy_start();
                }
                self.idle_since.set(None);
                self.run_task(t);
                if until.is_some_and(|u| u()) {
                    break;
                }
                continue;
            }
            m.busy_end();
            self.gc_flush();
            if until.is_some_and(|u| u()) {
                break;
            }
            if self.sched.should_exit(self) {
                break;
            }
            if self.fire_timers() || self.ring_turn() || self.poll_io_now() {
                continue;
            }
            if let Some(t) = self.find_work() {
                self.clock.set(Instant::now());
                m.busy_start();
                self.idle_since.set(None);
                self.run_task(t);
                if until.is_some_and(|u| u()) {
                    break;
                }
            }
        }
        m.busy_end();
        self.gc_flush();
        if self.p.kind != Kind::Core {
            self.p.retired.store(true, Ordering::SeqCst);
            // Order `retired` before the drain's loads; pairs with the
            // pushers' fence in Shared::push_to.
            fence(Ordering::SeqCst);
            self.drain_to_others();
        }
        if self.p.kind == Kind::Caller {
            crate::runtime::task::cells::plain_thread();
        } else {
            // A Processer thread ends (its scheduler stops, or it retires):
            // the cells passed between threads go back to the allocator.
            crate::runtime::task::cells::processer_ended();
        }
        context::leave(prev);
    }
}

/// Free stack a task needs below its saved registers for a direct switch
/// into it: the filing of the task switching out runs there
/// (`switch::file_on_top`, a queue push that may allocate, a park
/// transition), with a wide margin, since running out would fault in the
/// guard page (or damage a dense stack's neighbour). A task short of it is
/// switched into by the loop, which needs none.
const DIRECT_HEADROOM: usize = 8 << 10;

/// The saved stack pointers a direct switch may go to on `stack`
/// (`RunState::ontop_room`): with [`DIRECT_HEADROOM`] free below them.
fn ontop_room(stack: &StackMem) -> (usize, usize) {
    let lo = (stack.bottom() as usize).saturating_add(DIRECT_HEADROOM);
    (lo, stack.top() as usize)
}

/// The context to switch into `n` by, taken out of its run state, if a
/// direct switch can go to it: it started (it has a saved context; a first
/// run needs the loop's entry slot), and its saved registers are on its own
/// stack (not on a fiber's) with [`DIRECT_HEADROOM`] free below them.
#[inline]
fn direct_ctx(n: &mut Runnable) -> Option<::context::Context> {
    let run = n.run();
    let ctx = run.ctx.as_ref()?;
    // SAFETY: `Context` is a `#[repr(C)]` wrapper of one pointer, the saved
    // stack pointer (see `check_dense_stack`); this copies the address
    // without using it.
    let sp = unsafe { std::mem::transmute_copy::<::context::Context, usize>(ctx) };
    let (lo, hi) = run.ontop_room;
    if sp < lo || sp > hi {
        return None;
    }
    run.ctx.take()
}

/// A dense stack's canary check failed: report the task and abort.
fn dense_overflow(task: &TaskHeader) -> ! {
    crate::sys::fatal::abort_with(|w| {
        let _ = write!(
            w,
            "{} overflowed its {}-byte dense stack (canary at the stack limit damaged, \
             seen at its last switch); aborting",
            task.label(),
            task.stack_size
        );
    })
}

/// Dense stacks have no guard page: after every switch out, check that the
/// task stayed inside its stack (see `coroutine/stack.rs`), and abort naming it if not.
///
/// A task that resumed a fiber, which then yielded or parked the task,
/// switched out with its stack pointer on the fiber's stack, not its own:
/// that is no overflow. The fiber registry tells (`coroutine/registry.rs`);
/// it is asked only when the pointer is outside the task's stack. Only the
/// task's canary band is checked then; the fiber's stack has a guard page
/// of its own.
fn check_dense_stack(t: &mut Runnable, ctx: &::context::Context) {
    // The read below relies on `Context` being one pointer wide (it is a
    // `#[repr(C)]` newtype of `&'static c_void` in context 3.x).
    const _: () =
        assert!(std::mem::size_of::<::context::Context>() == std::mem::size_of::<usize>());
    // SAFETY: `Context` is a `#[repr(C)]` wrapper of one pointer, the saved
    // stack pointer of the suspended coroutine; reading it as a usize copies
    // that address without using it.
    let sp = unsafe { std::mem::transmute_copy::<::context::Context, usize>(ctx) };
    let intact = match t.run().stack.as_ref() {
        Some(s) if s.is_dense() => {
            let own = (s.bottom() as usize..=s.top() as usize).contains(&sp);
            if !own && registry::on_fiber_stack(sp) {
                s.dense_band_intact()
            } else {
                s.dense_intact(sp)
            }
        }
        _ => true,
    };
    if !intact {
        dense_overflow(t.header());
    }
}
