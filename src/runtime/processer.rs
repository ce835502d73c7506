//! The Processer loop: one OS thread that runs tasks.
//!
//! [`ProcLocal`] is the half of a Processer only its own thread touches:
//! the owner handle of the **runnable queue**, the local pinned queue, the
//! **gc queue** of finished tasks, and its stack pool. The half other
//! threads see is `ProcesserShared` (`processer_shared.rs`).
//!
//! # The loop (libgo's `Processer::Process`)
//!
//! 1. Pick the next task: every [`NEW_QUEUE_INTERVAL`]th pick looks at the new
//!    and pinned queues first (so a task yielding in a loop cannot starve
//!    arrivals); otherwise local pinned and runnable alternate, then the new
//!    queue.
//! 2. Switch into it: `switches += 1`, `running = true`. When it switches
//!    out: requeue (yield), park, or move it to the gc queue (done).
//! 3. Nothing to run: free the gc queue, then search, unless enough
//!    Processers search already (Go's rule: fewer than half of the busy ones,
//!    see `idle.rs`): [`SPIN_ROUNDS`] steal rounds, each visiting up to
//!    [`STEAL_VICTIMS`] other Processers from a random one on (half of one's
//!    runnable queue, or a batch of its new queue). Then sleep.
//!
//! # Sleeping without lost wake-ups
//!
//! ```text
//!  Processer P going to sleep               a thread pushing work for P
//!  1. sleeping = true (SeqCst), list P on   1. push the task (SeqCst fence)
//!     the sleepers stack, idle += 1         2. if P.sleeping: CAS true -> false,
//!  2. fence; re-check its own remote           then unpark P's thread
//!     queues; if work: cancel the sleep
//!  3. thread::park while sleeping == true
//! ```
//!
//! With both sides SeqCst, either the pusher sees `sleeping` or P's re-check
//! sees the task. `std::thread::park` keeps its own token, so an `unpark` that
//! lands between 2 and 3 is not lost either.
//!
//! Work queued on a *running* Processer is its own to run; waking another
//! only adds a thief. A pusher wakes one when some Processer sleeps and none
//! searches (`Shared::wake_idle_for_local_work`), and otherwise leaves the
//! task to the searchers. So a searcher that gives up must not miss it:
//!
//! ```text
//!  searcher S giving up                     a thread queuing work on a
//!                                           running Processer R
//!  1. searching -= 1 (SeqCst)               1. push the task (a SeqCst fence
//!  2. sleep: steps 1-2 above, its              when R is not this thread)
//!     re-check covering every other         2. if idle > 0 and searching == 0
//!     Processer's queues as well               (SeqCst loads): wake a sleeper
//! ```
//!
//! All of it SeqCst: either the pusher reads `searching` after S's
//! decrement and `idle` after S's increment, and wakes a sleeper, or S's
//! re-check comes after the push and sees the task (Go's rule for the last
//! spinning M). A push to the pusher's own queue has no fence
//! (see `Shared::wake_idle_for_local_work`): the task can then wait for its
//! own Processer, or for the Dispatcher's balance, instead of a thief.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::mem::ManuallyDrop;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_deque::{Steal, Worker};

use super::context;
use super::dispatcher;
use super::io::{Poller, BUSY_POLL};
use super::live::{self, ShardOwner};
use super::processer_shared::{drain_injector, Kind, ProcesserShared};
use super::shared::Shared;
use super::task::{self, Runnable, TaskHeader};
use super::timer::{Action, TimerQueue};
use crate::coroutine::registry;
use crate::coroutine::stack::StackMem;
use crate::coroutine::stacks::LocalStacks;
use crate::coroutine::switch::{self, Entry, EntrySlot, Suspend};
use crate::error::{contain, JoinError};

/// Every this many picks, the new queue is looked at before local work.
pub(crate) const NEW_QUEUE_INTERVAL: u32 = 61;
/// How a task is queued on its Processer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Push {
    /// Woken or spawned by the running task: into the next-task slot (the
    /// task it displaces goes to the runnable queue), and an idle Processer
    /// is woken to steal if one sleeps and none searches.
    Next,
    /// To the back of the runnable queue, waking an idle Processer likewise.
    Queued,
    /// To the back of the runnable queue, waking nobody (a yield, a requeue;
    /// the caller wakes a thief itself if it wants one).
    Quiet,
}

/// Picks in a row the next-task slot may win over the runnable queue.
const RUNNEXT_STREAK: u8 = 3;
/// How long a Processer stays idle before its cell cache gives back all but
/// `cells::IDLE_KEEP` (see `runtime/cells.rs`).
const CELLS_IDLE: Duration = Duration::from_secs(1);
/// Finished tasks are freed when the gc queue reaches this length.
const GC_BATCH: usize = 16;
/// Steal rounds a searching Processer makes before it sleeps.
const SPIN_ROUNDS: u32 = 32;
/// A searcher with a timer due within this stops yielding the CPU and
/// sleeps until the timer (see `spin_for_work`): several time slices of a
/// loaded machine's scheduler.
const YIELD_HORIZON: Duration = Duration::from_millis(10);
/// Other Processers a steal round visits at most (from a random one on):
/// with up to 9 Processers, every other one; beyond, a round's cost stays
/// bounded however many Processers there are.
const STEAL_VICTIMS: usize = 8;

/// How many more bound tasks than another Processer (plus an eighth of its
/// own) a Processer holds before it starts a fresh task there instead (see
/// `ProcLocal::place_fresh`).
const BIND_SLACK: usize = 16;

/// The fewest unpinned tasks of one firing of timers worth a sleeping
/// Processer's wake-up: a batch is shared with sleepers only in shares of
/// at least this many (see `accept_fired`). A sleeper takes some tens of
/// microseconds to wake on a virtual machine; a woken task, about a
/// microsecond to run and finish.
const FIRE_SHARE: usize = 32;

/// Scratch space of one firing of timers (`fire_timers`), kept to reuse
/// its allocations.
#[derive(Default)]
struct FireBufs {
    /// The entries taken off the queue.
    due: Vec<Action>,
    /// The tasks they woke, in deadline order.
    woken: Vec<Runnable>,
    /// The unpinned ones among them, to share out.
    free: Vec<Runnable>,
}

/// What a Processer saw of its peers at its last looks (`watch_peers`).
#[derive(Default)]
struct Watch {
    /// The table generation `seen` is about.
    gen: u64,
    /// Per table position: the switch count seen with a task switched in,
    /// and when it was first seen.
    seen: Vec<Option<(u64, Instant)>>,
    /// The position to look at next.
    next: usize,
}

/// The half of a Processer only its own thread touches. All access is through
/// `&ProcLocal` (interior mutability), because a running task reaches it
/// through the thread-local pointer while the loop below it is suspended.
pub(crate) struct ProcLocal {
    pub(crate) p: Arc<ProcesserShared>,
    pub(crate) sched: Arc<Shared>,
    runnable: Worker<Runnable>,
    pinned_local: RefCell<VecDeque<Runnable>>,
    gc: RefCell<Vec<Runnable>>,
    stacks: RefCell<LocalStacks>,
    tick: Cell<u32>,
    /// Consecutive picks taken from the next-task slot.
    streak: Cell<u8>,
    /// xorshift state, for the first victim of a steal round.
    rng: Cell<u64>,
    /// This thread's copy of the scheduler's Processer table, and the
    /// table generation it was taken at (refreshed when that changes, so a
    /// steal does not touch the table's lock and reference count).
    table: RefCell<(u64, Arc<Vec<Arc<ProcesserShared>>>)>,
    /// Plain copy of the switch counter (the owner's view).
    switches: Cell<u64>,
    /// The task currently switched in.
    current: Cell<*const TaskHeader>,
    /// The execution right of the task switched in now. The loop puts it
    /// here when it switches into a task, a direct switch replaces it with
    /// the next task's (`direct.rs`), and whichever task finally switches
    /// back to the loop is the one the loop takes out and files.
    switched_in: Cell<Option<Runnable>>,
    /// A task a direct switch picked but could not switch into (its first
    /// run needs the loop, or too little of its stack is free): the loop
    /// runs it next, before any other pick.
    picked: Cell<Option<Runnable>>,
    /// Whether direct switches may happen here: not on a `block_on` caller,
    /// not in chaos mode (see `begin_direct`).
    direct: bool,
    /// This Processer's watch over its peers (see `watch_peers`).
    watch: RefCell<Watch>,
    /// Tasks a poll of the reactor woke, on their way to the runnable queue
    /// (kept to reuse its allocation).
    woken: RefCell<Vec<Runnable>>,
    /// Scratch space of `fire_timers`.
    fired: RefCell<FireBufs>,
    /// When the Processer last had work (for Extra retirement).
    pub(crate) idle_since: Cell<Option<Instant>>,
    /// Tasks pinned here because they switched out in the middle of an
    /// unwind (see `pin_while_unwinding`).
    pub(crate) unwind_pinned: Cell<usize>,
    /// Live tasks bound here at their first run (see `run_task`).
    pub(crate) bound: Cell<usize>,
    /// This thread's shard of the registry of live tasks (`live.rs`).
    pub(crate) live: ManuallyDrop<ShardOwner>,
    /// A coarse clock: read at every periodic look outward (every
    /// [`NEW_QUEUE_INTERVAL`] picks), when the Processer wakes, and when a
    /// task comes back from a run the Dispatcher found blocked. A parking
    /// task's wait record takes its time from here (task dumps' `waited`),
    /// so the park path reads no clock.
    clock: Cell<Instant>,
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
            fired: RefCell::new(FireBufs::default()),
            idle_since: Cell::new(None),
            unwind_pinned: Cell::new(0),
            bound: Cell::new(0),
            live: ManuallyDrop::new(sched.live.take_shard()),
            clock: Cell::new(Instant::now()),
            sched,
        }
    }

    /// Queues the first task of a `block_on` caller before its loop starts.
    pub(crate) fn push_initial(&self, t: Runnable) {
        self.push_local(t, Push::Quiet);
    }

    /// Queues a task on this Processer (see [`Push`]). A task pinned here
    /// (bound at its first run, pinned by the user, or held for an unwind)
    /// may take the next-task slot, which thieves never touch and the
    /// Dispatcher hands back (`dispatcher::steal_all`), but otherwise goes
    /// to the local pinned queue, never to the stealable runnable queue.
    pub(crate) fn push_local(&self, t: Runnable, how: Push) {
        if self.sched.config.chaos && t.header().pin().is_none() {
            // Chaos mode: every switch-out moves the task.
            self.sched.push_elsewhere(t, self.p.index);
            return;
        }
        let t = match how {
            Push::Next => {
                let movable = t.header().pin().is_none();
                let displaced = self.p.put_runnext(t, movable);
                if movable {
                    // `put_runnext` marked the slot's task movable first.
                    dispatcher::work_queued(&self.sched, &self.p);
                }
                match displaced {
                    Some(displaced) => displaced,
                    None => return, // nothing a thief could take was added
                }
            }
            Push::Queued | Push::Quiet => t,
        };
        if t.header().pin().is_some() {
            self.pinned_local.borrow_mut().push_back(t);
            return;
        }
        self.runnable.push(t);
        dispatcher::work_queued(&self.sched, &self.p);
        if how != Push::Quiet {
            self.sched.wake_idle_for_local_work();
        }
    }

    /// The next task to run, from this Processer's own queues.
    fn next_task(&self) -> Option<Runnable> {
        if let Some(t) = self.picked.take() {
            // A direct switch's pick (it counted the tick already).
            return Some(t);
        }
        let tick = self.tick.get().wrapping_add(1);
        self.tick.set(tick);
        if self.p.timers_due.load(Ordering::Relaxed) {
            self.p.timers_due.store(false, Ordering::Relaxed);
            self.fire_timers();
        }
        if tick % NEW_QUEUE_INTERVAL == 0 {
            // The periodic look outward: due timers, readiness nobody
            // polled for a while, then the remote queues.
            self.clock.set(Instant::now());
            self.fire_timers();
            self.poll_io_busy();
            self.watch_peers();
            if let Some(t) = self.pull_remote() {
                return Some(t);
            }
        }
        self.pick_local(tick).or_else(|| self.pull_remote())
    }

    /// The pick of [`next_task`](Self::next_task) from the local queues
    /// (the next-task slot, the runnable queue, the local pinned queue),
    /// after its periodic look; shared with the direct switch.
    #[inline(always)]
    fn pick_local(&self, tick: u32) -> Option<Runnable> {
        // The next-task slot first, but not more than RUNNEXT_STREAK picks
        // in a row: two tasks waking each other through it would otherwise
        // keep the queue waiting.
        if self.streak.get() < RUNNEXT_STREAK {
            if let Some(t) = self.p.take_runnext() {
                self.streak.set(self.streak.get() + 1);
                return Some(t);
            }
        }
        self.streak.set(0);
        let local = if tick & 1 == 0 {
            self.pop_pinned().or_else(|| self.runnable.pop())
        } else {
            self.runnable.pop().or_else(|| self.pop_pinned())
        };
        local.or_else(|| self.p.take_runnext())
    }

    /// A direct switch, task side (the protocol is in `direct.rs`): runs on
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
        if !self.direct || self.p.timers_due.load(Ordering::Relaxed) {
            return None;
        }
        let tick = self.tick.get().wrapping_add(1);
        if tick % NEW_QUEUE_INTERVAL == 0 {
            return None; // the loop's `next_task` counts it and looks out
        }
        self.tick.set(tick);
        let mut n = self.pick_local(tick)?;
        let Some(ctx) = direct_ctx(&mut n) else {
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
        let Some(t) = self.switched_in.replace(Some(n)) else {
            crate::coroutine::overflow::fatal("a direct switch with no task switched in");
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
    fn count_switch(&self, header: *const TaskHeader) {
        let n = self.switches.get() + 1;
        self.switches.set(n);
        self.p.switches.store(n, Ordering::Relaxed);
        self.p.current.store(header.cast_mut(), Ordering::Relaxed);
        self.current.set(header);
    }

    /// A busy Processer's look at one peer (in turns), at its periodic look
    /// outward: if the peer has had a task switched in and the same switch
    /// count for the watch time, tell the Dispatcher, which then samples
    /// at once and at its base interval. Busy Processers thus watch each
    /// other, and the Dispatcher may sample less often while they do (see
    /// "Peers watch each other" in `dispatcher.rs`). Two loads of the
    /// peer's line per look; the time is the coarse clock, which the
    /// periodic look has just read.
    fn watch_peers(&self) {
        if self.sched.config.max_threads <= 1 {
            return; // no Dispatcher
        }
        let table = self.table();
        let (gen, procs) = (table.0, &table.1);
        let n = procs.len();
        if n < 2 {
            return;
        }
        let mut w = self.watch.borrow_mut();
        if w.gen != gen || w.seen.len() != n {
            w.gen = gen;
            w.seen.clear();
            w.seen.resize(n, None);
        }
        let mut i = w.next % n;
        if Arc::ptr_eq(&procs[i], &self.p) {
            i = (i + 1) % n;
        }
        w.next = i + 1;
        let q = &procs[i];
        let switches = q.switches.load(Ordering::Relaxed);
        if !q.running.load(Ordering::Relaxed) {
            w.seen[i] = None;
            return;
        }
        let now = self.clock.get();
        match w.seen[i] {
            Some((seen, since)) if seen == switches => {
                let after = super::dispatcher::watch_after(&self.sched.config);
                // While the Dispatcher naps long, a peer with nothing
                // movable queued is not worth waking it for: queuing some
                // there ends the nap (`dispatcher::work_queued`).
                if now.saturating_duration_since(since) >= after
                    && q.reported.load(Ordering::Relaxed) != switches
                    && !q.blocked.load(Ordering::Relaxed)
                    && (!dispatcher::naps_long(&self.sched) || q.has_movable())
                {
                    super::dispatcher::alert(&self.sched, q, switches);
                }
            }
            _ => w.seen[i] = Some((switches, now)),
        }
    }

    /// This thread's copy of the Processer table, refreshed first if the
    /// table changed since it was taken.
    fn table(&self) -> std::cell::Ref<'_, (u64, Arc<Vec<Arc<ProcesserShared>>>)> {
        let gen = self.sched.processers_gen();
        if self.table.borrow().0 != gen {
            *self.table.borrow_mut() = (gen, self.sched.processers_snapshot());
        }
        self.table.borrow()
    }

    /// A task from this Processer's local queues only.
    fn next_local(&self) -> Option<Runnable> {
        self.p
            .take_runnext()
            .or_else(|| self.runnable.pop())
            .or_else(|| self.pop_pinned())
    }

    #[inline]
    fn pop_pinned(&self) -> Option<Runnable> {
        self.pinned_local.borrow_mut().pop_front()
    }

    /// This Processer's timer queue (core Processers own one).
    fn timer_queue(&self) -> Option<&TimerQueue> {
        if self.p.kind == Kind::Core {
            self.sched.timers.queue(self.p.index)
        } else {
            None
        }
    }

    /// Fires this Processer's due timers, and queues the tasks they woke as
    /// one batch ([`accept_fired`](Self::accept_fired)). Returns whether any
    /// fired. Reads the clock only when a timer is pending.
    fn fire_timers(&self) -> bool {
        let Some(q) = self.timer_queue() else {
            return false;
        };
        if q.is_empty() {
            return false;
        }
        let now = Instant::now();
        if !q.is_due(now) {
            return false;
        }
        // Taken out while user timers run (their callbacks may queue tasks
        // here), then given back empty, keeping the capacity.
        let mut bufs = std::mem::take(&mut *self.fired.borrow_mut());
        let fired = self
            .sched
            .take_fired(self.p.index, now, &mut bufs.due, &mut bufs.woken);
        self.accept_fired(&mut bufs);
        *self.fired.borrow_mut() = bufs;
        fired > 0
    }

    /// Queues the tasks one firing of our timers woke (`bufs.woken`, in
    /// deadline order), as a batch: the protocol is "Firing a batch" in
    /// `runtime/timer.rs`.
    ///
    /// - Wake-ups of tasks bound here that other threads pushed to our
    ///   pinned queue (the Dispatcher fires for us while we are held up)
    ///   are older than these: they move to the local pinned queue first.
    /// - A task pinned here goes to the back of the local pinned queue, in
    ///   order; none goes through the next-task slot, where each would
    ///   displace the one before it.
    /// - Unpinned tasks: when there are enough of them and Processers
    ///   sleep, shares of at least [`FIRE_SHARE`] go straight to sleepers'
    ///   new queues, each sleeper woken once; the rest go to our runnable
    ///   queue, after which one sleeper may be woken to steal
    ///   (`wake_idle_for_local_work`, once for the batch).
    /// - A task pinned elsewhere goes through the routing.
    fn accept_fired(&self, bufs: &mut FireBufs) {
        if bufs.woken.is_empty() {
            return;
        }
        self.take_pinned_remote();
        let chaos = self.sched.config.chaos;
        {
            let mut pinned = self.pinned_local.borrow_mut();
            for r in bufs.woken.drain(..) {
                let h = r.header();
                debug_assert!(Arc::ptr_eq(&self.sched, &h.shared));
                match h.pin() {
                    Some(pin) if pin == self.p.index => pinned.push_back(r),
                    Some(_) => self.sched.push_remote(r),
                    None if chaos => self.sched.push_elsewhere(r, self.p.index),
                    None => bufs.free.push(r),
                }
            }
        }
        if bufs.free.is_empty() {
            return;
        }
        self.share_fired(&mut bufs.free);
        for r in bufs.free.drain(..) {
            self.runnable.push(r);
        }
        self.sched.wake_idle_for_local_work();
    }

    /// Hands shares of `free` (unpinned tasks just fired here) to sleeping
    /// Processers: with `n` tasks, up to `n / FIRE_SHARE - 1` sleepers get
    /// an equal share each, and one share stays in `free` for us. The
    /// latest deadlines go: we run the earliest ourselves while the
    /// sleepers wake.
    fn share_fired(&self, free: &mut Vec<Runnable>) {
        let mut helpers = (free.len() / FIRE_SHARE).saturating_sub(1);
        // A plain load first: usually nobody sleeps while timers fire on a
        // busy scheduler, and the sleepers stack is behind a lock.
        if helpers == 0 || self.sched.idle.idle() == 0 {
            return;
        }
        while helpers > 0 {
            let Some(p) = self.sched.idle.pop_sleeper() else {
                break;
            };
            let share = free.len() / (helpers + 1);
            let from = free.len() - share;
            // Into its new queue, then wake it: if it is awake after all, it
            // finds them there before it sleeps (the sleep protocol; the
            // batch push fences like a single one).
            if self.sched.push_batch_to(&p, free.drain(from..)) {
                self.sched.wake_proc(&p);
            }
            helpers -= 1;
        }
    }

    /// Moves the tasks other threads pinned here (wake-ups of tasks bound
    /// here, pushed to our remote pinned queue) to the local one.
    fn take_pinned_remote(&self) {
        if self.p.pinned.is_empty() {
            return;
        }
        let mut pinned = self.pinned_local.borrow_mut();
        loop {
            match self.p.pinned.steal() {
                Steal::Success(t) => pinned.push_back(t),
                Steal::Retry => continue,
                Steal::Empty => break,
            }
        }
    }

    /// A busy Processer's look at the reactor: if nobody has polled for
    /// [`BUSY_POLL`] and the role is free, poll without waiting.
    fn poll_io_busy(&self) {
        let Some(r) = self.sched.reactor_with_sources() else {
            return;
        };
        if !r.polled_before(BUSY_POLL) {
            return;
        }
        if let Some(mut poller) = r.try_poll() {
            let mut woken = self.woken.borrow_mut();
            poller.poll(Some(Duration::ZERO), &mut woken);
            drop(poller);
            self.accept_woken(&mut woken);
        }
    }

    /// Out of work: take the readiness that is already there (the role
    /// free, no waiting), before searching other Processers (Go's
    /// `findRunnable` does the same). Returns whether it woke any task.
    fn poll_io_now(&self) -> bool {
        let Some(r) = self.sched.reactor_with_sources() else {
            return false;
        };
        let Some(mut poller) = r.try_poll() else {
            return false;
        };
        let mut woken = self.woken.borrow_mut();
        poller.poll(Some(Duration::ZERO), &mut woken);
        drop(poller);
        let any = !woken.is_empty();
        self.accept_woken(&mut woken);
        any
    }

    /// Queues the tasks a poll woke: here when this Processer may run them,
    /// else through the routing; then one sleeper is woken to steal.
    fn accept_woken(&self, woken: &mut Vec<Runnable>) {
        if woken.is_empty() {
            return;
        }
        for r in woken.drain(..) {
            if Arc::ptr_eq(&self.sched, &r.header().shared) && self.p.may_run(r.header()) {
                self.push_local(r, Push::Quiet);
            } else {
                context::schedule(r);
            }
        }
        self.sched.wake_idle_for_local_work();
    }

    /// Takes work pushed here by other threads: the pinned tasks (all of
    /// them, moved to the local pinned queue, the oldest returned), or else
    /// a batch of the new queue moved into the runnable queue.
    ///
    /// All the pinned ones at once: they can run nowhere else, and every
    /// started task is pinned (bound) unless it opted in to migration, so on
    /// a busy server most wake-ups from other threads (a poll done by
    /// another Processer, a send from another thread) come back this way.
    /// Taking one per look kept the last of a batch of 100 waiting for
    /// 6,000 picks (`tests/fairness.rs`).
    fn pull_remote(&self) -> Option<Runnable> {
        if !self.p.pinned.is_empty() {
            self.take_pinned_remote();
            if let Some(t) = self.pop_pinned() {
                return Some(t);
            }
        }
        loop {
            match self.p.new.steal_batch_and_pop(&self.runnable) {
                Steal::Success(t) => return Some(t),
                Steal::Retry => continue,
                Steal::Empty => return None,
            }
        }
    }

    /// Steals from another Processer of the scheduler: half of its runnable
    /// queue, or a batch of its new queue. Visits at most `victims` other
    /// Processers, from a random one on.
    fn steal(&self, victims: usize) -> Option<Runnable> {
        if self.p.kind == Kind::Caller {
            return None; // it runs its root task only (see `may_run`)
        }
        let table = self.table();
        let others = &table.1;
        let n = others.len();
        if n <= 1 {
            return None;
        }
        let start = self.random_below(n);
        let mut visited = 0;
        for k in 0..n {
            let v = &others[(start + k) % n];
            if v.index == self.p.index {
                continue;
            }
            if visited == victims {
                break;
            }
            visited += 1;
            // `is_empty` first: a steal from a runnable queue pins
            // crossbeam's epoch even when the queue is empty, and every
            // 128th pin walks the list of every thread that uses it (every
            // Processer). The check makes the same loads the steal would
            // make first (a SeqCst fence between them), so the sleep
            // re-check sees what a steal would.
            while !v.stealer.is_empty() {
                match v.stealer.steal_batch_and_pop(&self.runnable) {
                    Steal::Success(t) => return Some(t),
                    Steal::Retry => continue,
                    Steal::Empty => break,
                }
            }
            while !v.new.is_empty() {
                match v.new.steal_batch_and_pop(&self.runnable) {
                    Steal::Success(t) => return Some(t),
                    Steal::Retry => continue,
                    Steal::Empty => break,
                }
            }
        }
        None
    }

    /// A pseudo-random number in `0..n` (`n > 0`).
    fn random_below(&self, n: usize) -> usize {
        // xorshift64, then multiply-shift onto 0..n (no division).
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        ((x as u128 * n as u128) >> 64) as usize
    }

    /// Runs one task until it switches out, then files it.
    fn run_task(&self, mut t: Runnable) {
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
                    // The task can never run: fail its join handle. That
                    // drops the user's closure here: contain its panic.
                    self.sched.completed.fetch_add(1, Ordering::Relaxed);
                    t.header().phase.store(task::PHASE_DONE, Ordering::Relaxed);
                    contain("a task's closure", || t.fail(JoinError::stack_exhausted(e)));
                    self.finish(t);
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
        self.p.running.store(true, Ordering::Relaxed);
        self.count_switch(header);
        self.switched_in.set(Some(t));
        // SAFETY: `ctx` is the task's saved context (or a fresh one on its
        // own stack, which RunState keeps alive), and we hold its Runnable
        // (in `switched_in`). `slot` outlives the switch: we are suspended
        // inside `resume` until a task switches back.
        let (ctx, why) = unsafe { switch::resume(ctx, &mut slot as *mut EntrySlot as usize) };
        // The task that switched back: `t`, or the last of the tasks direct
        // switches went through after it (`direct.rs`).
        let Some(t) = self.switched_in.take() else {
            crate::coroutine::overflow::fatal("a task switched back with none switched in");
        };
        self.current.set(std::ptr::null());
        self.p.running.store(false, Ordering::Relaxed);
        self.file(t, ctx, why);
    }

    /// Files a task that switched out, with its saved context `ctx`: the
    /// per-switch-out bookkeeping, then requeue (yield), park, or finish.
    /// From the loop, or on the next task's stack at a direct switch. The
    /// context is stored before the task is published (queued or parked),
    /// so no thief or unparker can see it without.
    #[inline(always)]
    fn file(&self, mut t: Runnable, ctx: ::context::Context, why: Suspend) {
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
        // unwind, if any, ended at its root).
        self.pin_while_unwinding(t.header());
        match why {
            Suspend::Yield => {
                t.run().ctx = Some(ctx);
                self.push_local(t, Push::Quiet);
            }
            Suspend::Park => {
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

    /// Where a fresh task that will be bound at its first run starts: here,
    /// or, when a core Processer picked at random holds clearly fewer bound
    /// tasks ([`BIND_SLACK`] plus an eighth of ours), there (pinned to it,
    /// pushed to its pinned queue and woken; it is still fresh, so free to
    /// move). Returns the task when it stays.
    ///
    /// A started task never moves (see `may_move`), so where it starts is
    /// where it runs to its end: a server whose accept loop runs on one
    /// Processer would otherwise start (and bind) nearly every connection
    /// there, since the fresh task runs as soon as the accept loop parks,
    /// before an idle Processer can steal it. The other Processers then had
    /// nothing to run but wake-ups to forward (at 1,000 HTTP connections on
    /// 2 Processers, one did 82 % of the work). Counting bound tasks is a
    /// proxy for load that suits servers (one task per connection); the
    /// Dispatcher and thieves still balance fresh tasks by queue length.
    fn place_fresh(&self, t: Runnable) -> Option<Runnable> {
        let mine = self.bound.get();
        if mine < BIND_SLACK
            || self.p.kind == Kind::Caller
            || t.header().pin().is_some()
            || self.may_move(t.header())
        {
            return Some(t);
        }
        let table = self.table();
        let procs = &table.1;
        let n = procs.len();
        if n < 2 {
            return Some(t);
        }
        let other = &procs[self.random_below(n)];
        if other.index == self.p.index
            || other.kind != Kind::Core
            || other.retired.load(Ordering::Relaxed)
            || other.blocked.load(Ordering::Relaxed)
            || mine <= other.bound.load(Ordering::Relaxed) + BIND_SLACK + mine / 8
        {
            return Some(t);
        }
        let other = other.clone();
        drop(table);
        // Pinned there before it is pushed: in the new queue, we (searching
        // for work as soon as we go idle) would steal it back before the
        // other Processer woke up. It is bound there at its first run
        // anyway; a core Processer never retires before shutdown.
        t.header().set_runtime_pin(Some(other.index));
        other.placed.fetch_add(1, Ordering::Relaxed);
        if self.sched.push_to(&other, t) {
            dispatcher::work_queued(&self.sched, &other);
            self.sched.wake_proc(&other);
        }
        None
    }

    /// Sets the count of tasks bound here, and its mirror for other
    /// Processers' placement decisions.
    fn set_bound(&self, n: usize) {
        self.bound.set(n);
        self.p.bound.store(n, Ordering::Relaxed);
    }

    /// Whether a started task may move to another Processer: the user
    /// vouched for it (`Builder::migratable`,
    /// `SchedulerBuilder::migrate_started_tasks`), or chaos mode. Otherwise
    /// a task is bound at its first run to the Processer that runs it, and
    /// stays there to its end: the compiler may keep a thread-local's
    /// address across a switch in any function, and after a move that
    /// address would be another thread's.
    fn may_move(&self, h: &TaskHeader) -> bool {
        h.migratable || self.sched.config.migrate_started_tasks || self.sched.config.chaos
    }

    /// A task finished: the pin the runtime gave it (bound here, or held
    /// for an unwind) is over.
    fn release_pin(&self, h: &TaskHeader) {
        if h.user_pin.is_some() || h.pin().is_none() {
            return;
        }
        if self.may_move(h) {
            self.unwind_pinned.set(self.unwind_pinned.get() - 1);
        } else {
            self.set_bound(self.bound.get() - 1);
        }
    }

    /// Whether tasks must come back to this Processer (bound here, or held
    /// for an unwind): an extra Processer does not retire while they do.
    pub(crate) fn holds_tasks(&self) -> bool {
        self.unwind_pinned.get() != 0 || self.bound.get() != 0
    }

    /// Keeps a task that switched out in the middle of an unwind on this
    /// thread until the unwind is over.
    ///
    /// std counts panics per thread: `panic!` (and the forced unwind of a
    /// dropped fiber or generator, a `resume_unwind`) raises this thread's
    /// count, and the `catch_unwind` that ends the unwind lowers the count
    /// of whichever thread it runs on. A destructor that parks on the way
    /// (a sleep, a channel, a lock) would let the task resume on another
    /// thread: its later destructors would see `thread::panicking()` false,
    /// this thread would stay "panicking" for good, and the other's count
    /// would wrap below zero (and a `std::sync::Mutex` held in a later panic
    /// there would no longer be poisoned). So a task that switches out while
    /// this thread's count is not zero is pinned here, and unpinned at a
    /// switch-out that finds the count back at zero.
    ///
    /// The count is the thread's, not the task's: while a task is parked
    /// mid-unwind, the other tasks on this thread see `panicking()` true as
    /// well (as on a thread, where an unwind runs to its end first), and any
    /// of them that switches out meanwhile is pinned too, until a switch-out
    /// after the unwind ended. A task the user pinned keeps its own pin.
    ///
    /// Called right after the task switched out, on the thread it ran on,
    /// whose count is still the one the task saw.
    #[inline]
    fn pin_while_unwinding(&self, h: &TaskHeader) {
        // A load of std's global panic count (zero unless some thread is
        // unwinding) and of our count of tasks pinned here for an unwind:
        // nearly free when nobody panics.
        let unwinding = std::thread::panicking();
        if unwinding || self.unwind_pinned.get() != 0 {
            self.repin_for_unwind(h, unwinding);
        }
    }

    /// The rest of [`pin_while_unwinding`](Self::pin_while_unwinding), off
    /// the hot path.
    #[cold]
    #[inline(never)]
    fn repin_for_unwind(&self, h: &TaskHeader, unwinding: bool) {
        // A bound task stays here anyway, and a user pin is the user's.
        if unwinding == h.pin().is_some() || h.user_pin.is_some() || !self.may_move(h) {
            return;
        }
        if unwinding {
            h.set_runtime_pin(Some(self.p.index));
            self.unwind_pinned.set(self.unwind_pinned.get() + 1);
        } else {
            h.set_runtime_pin(None);
            self.unwind_pinned.set(self.unwind_pinned.get() - 1);
        }
    }

    /// Accounts a finished task and files it in the gc queue.
    fn finish(&self, t: Runnable) {
        let mut gc = self.gc.borrow_mut();
        gc.push(t);
        if gc.len() >= GC_BATCH {
            drop(gc);
            self.gc_flush();
        }
    }

    /// Frees finished tasks; their stacks go back to the pools.
    fn gc_flush(&self) {
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
        // before the Runnables go (`live.rs`).
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

    fn alloc_stack(&self, size: usize) -> std::io::Result<StackMem> {
        self.stacks.borrow_mut().alloc(&self.sched.stacks, size)
    }

    /// Moves every queued task to other Processers (retirement).
    fn drain_to_others(&self) {
        let mut moved: Vec<Runnable> = self.p.take_runnext().into_iter().collect();
        while let Some(t) = self.runnable.pop() {
            moved.push(t);
        }
        while let Some(t) = self.pinned_local.borrow_mut().pop_front() {
            moved.push(t);
        }
        drain_injector(&self.p.new, &mut moved);
        drain_injector(&self.p.pinned, &mut moved);
        for t in moved {
            self.sched.push_remote(t);
        }
    }

    /// The Processer loop. Returns when the scheduler stops, or when `until`
    /// says so (a `block_on` caller), or when an Extra Processer retires.
    pub(crate) fn run(&self, until: Option<&dyn Fn() -> bool>) {
        let prev = context::enter(self);
        crate::coroutine::overflow::thread_init();
        super::cells::processer_thread();
        loop {
            if let Some(t) = self.next_task() {
                self.idle_since.set(None);
                self.run_task(t);
                if until.is_some_and(|u| u()) {
                    break;
                }
                continue;
            }
            self.gc_flush();
            if until.is_some_and(|u| u()) {
                break;
            }
            if self.sched.should_exit(self) {
                break;
            }
            if self.fire_timers() || self.poll_io_now() {
                continue;
            }
            if let Some(t) = self.find_work() {
                self.clock.set(Instant::now());
                self.idle_since.set(None);
                self.run_task(t);
                if until.is_some_and(|u| u()) {
                    break;
                }
            }
        }
        self.gc_flush();
        if self.p.kind != Kind::Core {
            self.p.retired.store(true, Ordering::SeqCst);
            // Order `retired` before the drain's loads; pairs with the
            // pushers' fence in Shared::push_to.
            fence(Ordering::SeqCst);
            self.drain_to_others();
        }
        if self.p.kind == Kind::Caller {
            super::cells::plain_thread();
        } else {
            // A Processer thread ends (its scheduler stops, or it retires):
            // the cells passed between threads go back to the allocator.
            super::cells::processer_ended();
        }
        context::leave(prev);
    }

    /// No local work: search other Processers' queues (if the searchers
    /// are few enough, or a waker handed us a search), then sleep until
    /// woken.
    ///
    /// While it searches the Processer counts as *searching*: a thread that
    /// queues local work does not wake a sleeping Processer while another is
    /// already looking for work (Go's spinning Ms). Only up to half of the
    /// busy Processers search at once (`Idle::try_begin_search`); the others
    /// sleep straight away.
    fn find_work(&self) -> Option<Runnable> {
        if self.p.kind == Kind::Caller {
            // Nothing to search for: its root task comes back through its
            // pinned queue, which waking it re-checks.
            return self.sleep(false);
        }
        let mut searching = self.take_search_handoff() || self.sched.idle.try_begin_search();
        loop {
            if searching {
                let found = self.spin_for_work();
                let was_last = self.sched.idle.end_search();
                if found.is_some() {
                    self.found_while_searching(was_last);
                    return found;
                }
            }
            // A searcher that found nothing re-checks every queue after
            // ending its search (see the module docs).
            let found = self.sleep(searching);
            let handed = self.take_search_handoff();
            if found.is_some() {
                if handed {
                    // Woken to search, and we have work: end that search.
                    let was_last = self.sched.idle.end_search();
                    self.found_while_searching(was_last);
                }
                return found;
            }
            if !handed {
                return None;
            }
            // Woken to search: do it now (pushers skip waking anyone while
            // we count as a searcher).
            searching = true;
        }
    }

    /// A searcher found work. If it was the last one, there may be more
    /// where that came from, and pushers skipped waking anyone while it
    /// searched: wake one sleeper to keep looking (Go's wakep chain).
    fn found_while_searching(&self, was_last: bool) {
        if was_last {
            self.sched.wake_idle_for_local_work();
        }
    }

    /// Takes the search a waker handed us, if any (see `search_handoff`).
    fn take_search_handoff(&self) -> bool {
        // Relaxed: a swap, so exactly one of us and the waker takes it; the
        // flag was published by the waker's CAS on `sleeping`, which we read
        // (SeqCst or Acquire) before coming here.
        self.p.search_handoff.load(Ordering::Relaxed)
            && self.p.search_handoff.swap(false, Ordering::Relaxed)
    }

    /// Steal rounds, each visiting up to [`STEAL_VICTIMS`] Processers, with
    /// our own remote queues looked at between them.
    fn spin_for_work(&self) -> Option<Runnable> {
        for round in 0..SPIN_ROUNDS {
            if let Some(t) = self.steal(STEAL_VICTIMS).or_else(|| self.pull_remote()) {
                return Some(t);
            }
            // Our own timers come due while we search (a round that yields
            // the CPU may take a while on a loaded machine).
            if self.fire_timers() {
                if let Some(t) = self.next_local() {
                    return Some(t);
                }
            }
            if round < SPIN_ROUNDS / 2 {
                std::hint::spin_loop();
            } else if self.timer_soon() {
                // Sleep until the timer instead (the caller's next step):
                // on a loaded machine a yield may hand the CPU to another
                // process for a whole time slice, several milliseconds,
                // and the timer would wait for it.
                break;
            } else {
                std::thread::yield_now();
            }
        }
        None
    }

    /// Whether one of our timers is due within [`YIELD_HORIZON`].
    fn timer_soon(&self) -> bool {
        self.timer_queue()
            .and_then(TimerQueue::next_deadline)
            .is_some_and(|d| d.saturating_duration_since(Instant::now()) < YIELD_HORIZON)
    }

    /// Announces the sleep, re-checks, and parks until woken. The re-check
    /// covers our own remote queues, and every other Processer's queues too
    /// when `searched` (we were a searcher: see the module docs).
    fn sleep(&self, searched: bool) -> Option<Runnable> {
        match self.idle_since.get() {
            None => {
                self.idle_since.set(Some(Instant::now()));
                // Going idle: the cell cache gives back half of what a
                // burst left in it (`cells.rs`)...
                super::cells::idle(false);
            }
            // ... and the rest once idle for CELLS_IDLE (`sleep_timeout`
            // wakes the Processer for it).
            Some(since) if since.elapsed() >= CELLS_IDLE => super::cells::idle(true),
            Some(_) => {}
        }
        self.p.sleeping.store(true, Ordering::SeqCst);
        if self.p.kind != Kind::Caller {
            // A block_on caller is never handed a search (it would not do
            // it): it stays off the sleepers stack.
            self.sched.idle.list(&self.p);
        }
        self.sched.idle.idle_inc();
        // Order the announcement before the re-check's (non-SeqCst) queue
        // loads; pairs with the pushers' fence (see module docs).
        fence(Ordering::SeqCst);
        let recheck = self
            .pull_remote()
            .or_else(|| searched.then(|| self.steal(usize::MAX)).flatten());
        if let Some(t) = recheck {
            if self.cancel_sleep() {
                self.sched.idle.idle_dec();
            }
            // Awake again without having parked: the Dispatcher may have
            // gone into deep sleep seeing us asleep.
            super::dispatcher::processer_awake(&self.sched);
            return Some(t);
        }
        if self.sched.should_exit(self) {
            if self.cancel_sleep() {
                self.sched.idle.idle_dec();
            }
            return None;
        }
        let mut timeout = self.sleep_timeout();
        // Only core Processers wait in the reactor: a block_on caller or an
        // extra Processer may leave for good while holding the role, and
        // nobody would wait there after it.
        if let Some(r) = self
            .sched
            .reactor_with_sources()
            .filter(|_| self.p.kind == Kind::Core)
        {
            if let Some(mut poller) = r.try_poll() {
                return self.sleep_in_poll(&mut poller, timeout);
            }
            if !r.has_blocking_poller() {
                // The role is held for a quick look (a busy Processer, the
                // Dispatcher), which is over in a moment and waits for
                // nothing after it: sleep briefly and come back for the role
                // rather than leave readiness with nobody waiting for it.
                timeout = Some(timeout.map_or(BUSY_POLL, |t| t.min(BUSY_POLL)));
            }
        }
        while self.p.sleeping.load(Ordering::SeqCst) {
            match timeout {
                Some(d) => {
                    std::thread::park_timeout(d);
                    // Timed out (or woken): either way re-evaluate.
                    if self.cancel_sleep() {
                        self.sched.idle.idle_dec();
                    }
                    super::dispatcher::processer_awake(&self.sched);
                    return None;
                }
                None => std::thread::park(),
            }
        }
        // Woken: the waker already decremented the idle count.
        super::dispatcher::processer_awake(&self.sched);
        None
    }

    /// How long a sleeping Processer may sleep before it re-evaluates: until
    /// its earliest timer, and for an extra Processer, until it retires.
    /// Read after `sleeping` is announced (see `runtime/timer.rs`).
    fn sleep_timeout(&self) -> Option<Duration> {
        let retire = self.sched.retire_timeout(self);
        // A cell cache above its idle size is trimmed after CELLS_IDLE, and
        // so is the cells' depot. The depot is timed only until this
        // Processer has been idle that long (its trim is done then): other
        // threads may refill it at any time, and a wake for each refill
        // would be a spin. What they leave there waits for the next
        // Processer to rest a second, or to end.
        let idle_for = self.idle_since.get().map(|s| s.elapsed());
        let before_trim = idle_for.is_none_or(|e| e < CELLS_IDLE);
        let trim = (super::cells::holds_more_than_idle()
            || (before_trim && super::cells::depot_holds()))
        .then(|| idle_for.map_or(CELLS_IDLE, |e| CELLS_IDLE.saturating_sub(e)));
        let retire = match (retire, trim) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timer = self
            .timer_queue()
            .and_then(TimerQueue::next_deadline)
            .map(|d| d.saturating_duration_since(Instant::now()));
        match (retire, timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The rest of [`sleep`](Self::sleep) for the holder of the poller role:
    /// wait in the reactor instead of the futex (the protocol with wakers is
    /// in `runtime/io/reactor.rs`), then queue what the events woke.
    fn sleep_in_poll(
        &self,
        poller: &mut Poller<'_>,
        timeout: Option<Duration>,
    ) -> Option<Runnable> {
        // SeqCst: the poller's half of the protocol with wakers.
        self.p.in_poll.store(true, Ordering::SeqCst);
        let timeout = if self.p.sleeping.load(Ordering::SeqCst) {
            timeout
        } else {
            Some(Duration::ZERO) // already woken: look, but do not wait
        };
        let mut woken = self.woken.borrow_mut();
        poller.poll(timeout, &mut woken);
        self.p.in_poll.store(false, Ordering::Relaxed);
        if self.cancel_sleep() {
            self.sched.idle.idle_dec();
        }
        super::dispatcher::processer_awake(&self.sched);
        self.accept_woken(&mut woken);
        // Run what the poll woke here: the caller may go on searching (a
        // search handed to us meanwhile), and its search and the sleep after
        // it look everywhere but in our own runnable queue.
        self.next_local()
    }

    /// Clears our own `sleeping` flag; true if we did (no waker claimed us).
    fn cancel_sleep(&self) -> bool {
        // Acquire on failure: a waker cleared the flag; pairs with its
        // SeqCst CAS, so that a search it handed us is seen.
        self.p
            .sleeping
            .compare_exchange(true, false, Ordering::SeqCst, Ordering::Acquire)
            .is_ok()
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
    crate::coroutine::overflow::abort_with(|w| {
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
