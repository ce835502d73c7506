//! The Processer: one OS thread that runs tasks.
//!
//! A Processer has two halves. [`ProcesserShared`] is what other threads see
//! and touch: the **new queue** (tasks pushed from other threads: spawns
//! from outside, wake-ups), the pinned queue (tasks pinned here, pushed from
//! other threads), the thief handle of the runnable queue, the **switch
//! counter** and the status flags the Dispatcher samples. [`ProcLocal`] is
//! what only the Processer's own thread touches: the owner handle of the
//! **runnable queue**, the local pinned queue, the **gc queue** of finished
//! tasks, and the stack pool.
//!
//! | queue          | type                 | pushed by                  | popped / stolen by                  |
//! |----------------|----------------------|----------------------------|-------------------------------------|
//! | new            | `Injector`           | any thread                 | owner (batches), idle thieves, Dispatcher |
//! | runnable       | `Worker` / `Stealer` | owner only                 | owner; thieves and Dispatcher steal half |
//! | pinned (remote)| `Injector`           | any thread                 | owner only                          |
//! | pinned (local) | `VecDeque`           | owner only                 | owner only                          |
//! | gc             | `Vec`                | owner only                 | owner only, in batches              |
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
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Instant;

use crossbeam_deque::{Injector, Steal, Stealer, Worker};

use crate::coroutine::{self, EntrySlot, Suspend};
use crate::error::{contain, JoinError};
use crate::scheduler::Shared;
use crate::stack::{self, StackMem, StackPool};
use crate::task::{Runnable, TaskHeader};

/// Every this many picks, the new queue is looked at before local work.
pub(crate) const NEW_QUEUE_INTERVAL: u32 = 61;
/// Finished tasks are freed when the gc queue reaches this length.
const GC_BATCH: usize = 16;
/// Steal rounds a searching Processer makes before it sleeps.
const SPIN_ROUNDS: u32 = 32;
/// Other Processers a steal round visits at most (from a random one on):
/// with up to 9 Processers, every other one; beyond, a round's cost stays
/// bounded however many Processers there are.
const STEAL_VICTIMS: usize = 8;

/// What kind of thread runs a Processer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One of the `min_threads` started at build; lives until shutdown.
    Core,
    /// Started by the Dispatcher when every Processer is blocked; retires
    /// when idle for `idle_thread_timeout`.
    Extra,
    /// A thread inside `Scheduler::block_on`; retires when its root task ends.
    Caller,
}

/// The half of a Processer that other threads see.
pub(crate) struct ProcesserShared {
    /// Slot index in the scheduler's Processer table; the pin target.
    pub(crate) index: usize,
    pub(crate) kind: Kind,
    /// Tasks pushed from other threads.
    pub(crate) new: Injector<Runnable>,
    /// Tasks pinned here, pushed from other threads; never stolen.
    pub(crate) pinned: Injector<Runnable>,
    /// Thief handle of the runnable queue.
    pub(crate) stealer: Stealer<Runnable>,
    /// +1 at every switch into a task. Written only by the owner (Relaxed
    /// load + store: no read-modify-write on the hot path); read by the
    /// Dispatcher and stats.
    pub(crate) switches: AtomicU64,
    /// A task is switched in right now. Relaxed: a sample, paired with the
    /// switch counter by the Dispatcher.
    pub(crate) running: AtomicBool,
    /// The thread is asleep (or about to be) waiting for work. See the
    /// module docs for the protocol.
    pub(crate) sleeping: AtomicBool,
    /// On the scheduler's sleepers stack; only read and written under the
    /// stack's lock (see `idle.rs`).
    pub(crate) listed: AtomicBool,
    /// A waker counted this Processer as a searcher before waking it (Go's
    /// `wakep`, see `idle.rs`): the Processer must search, and end that
    /// search. Set by the waker before its CAS on `sleeping`; taken (swapped
    /// out) either by the Processer, or by the waker when its CAS failed,
    /// so exactly one of them owns the search.
    pub(crate) search_handoff: AtomicBool,
    /// Marked by the Dispatcher: the running task has not switched out for
    /// longer than the block timeout.
    pub(crate) blocked: AtomicBool,
    /// The Processer left (Extra or Caller kind); pushes must go elsewhere.
    pub(crate) retired: AtomicBool,
    /// The thread, for unpark; set when the thread starts.
    pub(crate) thread: OnceLock<Thread>,
    /// The thread's CPU-time clock, for the Dispatcher's kernel-block test.
    /// A clock id (not a `pthread_t`) stays safe to read after the thread
    /// exits: `clock_gettime` then fails with `EINVAL`.
    pub(crate) cpu_clock: OnceLock<libc::clockid_t>,
    /// The thread's kernel id, to read its state from
    /// `/proc/self/task/<tid>/stat` and tell a thread sleeping in the kernel
    /// (`S`, `D`) from one merely preempted (`R`). The file is opened on
    /// demand, not kept open: a scheduler of many Processers would otherwise
    /// hold as many file descriptors for its life.
    tid: OnceLock<libc::pid_t>,
    /// Tasks rescued from this Processer by the Dispatcher.
    pub(crate) rescued: AtomicU64,
}

impl ProcesserShared {
    /// Whether `task` may be queued here: a task pinned here, or an unpinned
    /// one on a Processer that takes any work. A `block_on` caller runs its
    /// root task (pinned to it) and nothing else: another task could block
    /// the caller's thread and hold up the root, and `block_on` could not
    /// return until that task switched out.
    pub(crate) fn may_run(&self, task: &TaskHeader) -> bool {
        match task.pin {
            Some(pin) => pin == self.index,
            None => self.kind != Kind::Caller,
        }
    }

    /// Tasks waiting here (new + runnable + pinned), approximately.
    pub(crate) fn queued(&self) -> usize {
        self.new.len() + self.stealer.len() + self.pinned.len()
    }

    /// CPU time the Processer's thread has used, if it can be read.
    pub(crate) fn cpu_time(&self) -> Option<std::time::Duration> {
        let clock = *self.cpu_clock.get()?;
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid out-pointer; an id of an exited thread
        // makes the call fail, which is handled.
        if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
            return None;
        }
        Some(std::time::Duration::new(
            ts.tv_sec as u64,
            ts.tv_nsec as u32,
        ))
    }

    /// Whether the thread sleeps in the kernel right now (state `S` or `D`
    /// in `/proc`), as opposed to running or waiting for a CPU (`R`).
    /// `None` if it cannot be read.
    ///
    /// Opens, reads and closes `/proc/self/task/<tid>/stat`, without a heap
    /// allocation: about 9-11 us on a 2-vCPU virtual machine (a `pread` on a
    /// file kept open costs about 4 us). The Dispatcher asks only about a
    /// suspect whose CPU clock barely moved, a few times per detection.
    pub(crate) fn sleeping_in_kernel(&self) -> Option<bool> {
        use std::io::{Read, Write};
        let tid = *self.tid.get()?;
        let mut path = [0u8; 64];
        let mut rest = &mut path[..];
        write!(rest, "/proc/self/task/{tid}/stat").ok()?;
        let len = 64 - rest.len();
        let path = std::str::from_utf8(&path[..len]).ok()?;
        let mut buf = [0u8; 256];
        let n = std::fs::File::open(path).ok()?.read(&mut buf).ok()?;
        let text = &buf[..n];
        // "tid (comm) S ...": the state follows the last ')'.
        let close = text.iter().rposition(|&b| b == b')')?;
        let state = *text.get(close + 2)?;
        Some(matches!(state, b'S' | b'D'))
    }

    /// Wakes the thread if it sleeps. Returns whether this call woke it.
    pub(crate) fn wake(&self) -> bool {
        if self.sleeping.load(Ordering::SeqCst)
            && self
                .sleeping
                .compare_exchange(true, false, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
        {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
            true
        } else {
            false
        }
    }
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
    pool: RefCell<StackPool>,
    tick: Cell<u32>,
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
    /// When the Processer last had work (for Extra retirement).
    pub(crate) idle_since: Cell<Option<Instant>>,
}

thread_local! {
    static CURRENT_PROC: Cell<*const ProcLocal> = const { Cell::new(std::ptr::null()) };
}

#[inline(never)]
fn current_proc_ptr() -> *const ProcLocal {
    CURRENT_PROC.with(|c| c.get())
}

/// The running task's header, or `None` outside a task.
#[inline(never)]
pub(crate) fn current_task_ptr() -> Option<*const TaskHeader> {
    let p = current_proc_ptr();
    if p.is_null() {
        return None;
    }
    // SAFETY: CURRENT_PROC points at the ProcLocal of this thread's running
    // Processer loop, which outlives every task it switches into.
    let t = unsafe { (*p).current.get() };
    (!t.is_null()).then_some(t)
}

/// A new reference to the running task's header.
pub(crate) fn current_task() -> Option<Arc<TaskHeader>> {
    current_task_ptr().map(|t| {
        // SAFETY: `t` came from Arc::as_ptr of the Runnable the Processer
        // holds while the task runs, so the allocation is alive; taking a
        // new strong count for the returned Arc is balanced by its drop.
        unsafe {
            Arc::increment_strong_count(t);
            Arc::from_raw(t)
        }
    })
}

/// The scheduler of the Processer running on this thread, if any.
pub(crate) fn current_scheduler() -> Option<Arc<Shared>> {
    let p = current_proc_ptr();
    // SAFETY: see current_task_ptr.
    (!p.is_null()).then(|| unsafe { (*p).sched.clone() })
}

/// Whether this thread is a Processer of `sched` (a pointer comparison, no
/// reference count touched: it sits on the spawn path).
pub(crate) fn on_scheduler(sched: &Shared) -> bool {
    let p = current_proc_ptr();
    // SAFETY: see current_task_ptr.
    !p.is_null() && std::ptr::eq(unsafe { &*(*p).sched }, sched)
}

/// Makes a task runnable: on this thread's Processer when it is one of the
/// task's scheduler and may run it (cheap, no atomics beyond the queue's),
/// otherwise on a Processer chosen by the scheduler, which is woken if
/// asleep.
pub(crate) fn schedule(r: Runnable) {
    let p = current_proc_ptr();
    if !p.is_null() {
        // SAFETY: see current_task_ptr; only shared access is taken.
        let local = unsafe { &*p };
        let same = Arc::ptr_eq(&local.sched, &r.header().shared);
        if same && local.p.may_run(r.header()) {
            local.push_local(r, true);
            return;
        }
    }
    let sched = r.header().shared.clone();
    sched.push_remote(r);
}

impl ProcLocal {
    pub(crate) fn new(
        p: Arc<ProcesserShared>,
        sched: Arc<Shared>,
        runnable: Worker<Runnable>,
    ) -> Self {
        let size = sched.config.stack_size;
        let table = RefCell::new((sched.processers_gen(), sched.processers_snapshot()));
        // Any odd seed will do; mix the slot index so neighbours diverge.
        let rng = Cell::new(
            (p.index as u64 ^ 0x9E37_79B9_7F4A_7C15).wrapping_mul(0xD1B5_4A32_D192_ED03) | 1,
        );
        ProcLocal {
            p,
            sched,
            runnable,
            pinned_local: RefCell::new(VecDeque::new()),
            gc: RefCell::new(Vec::new()),
            pool: RefCell::new(StackPool::new(size, stack::LOCAL_POOL_MAX)),
            tick: Cell::new(0),
            rng,
            table,
            switches: Cell::new(0),
            current: Cell::new(std::ptr::null()),
            idle_since: Cell::new(None),
        }
    }

    /// Queues the first task of a `block_on` caller before its loop starts.
    pub(crate) fn push_initial(&self, t: Runnable) {
        self.push_local(t, false);
    }

    /// Queues a task on this Processer. `wake_idle`: also wake an idle
    /// Processer to steal, if there are idle ones and none is searching
    /// (`Shared::wake_idle_for_local_work`).
    fn push_local(&self, t: Runnable, wake_idle: bool) {
        if t.header().pin.is_some() {
            self.pinned_local.borrow_mut().push_back(t);
            return;
        }
        self.runnable.push(t);
        if wake_idle {
            self.sched.wake_idle_for_local_work();
        }
    }

    /// The next task to run, from this Processer's own queues.
    fn next_task(&self) -> Option<Runnable> {
        let tick = self.tick.get().wrapping_add(1);
        self.tick.set(tick);
        if tick % NEW_QUEUE_INTERVAL == 0 {
            if let Some(t) = self.pull_remote() {
                return Some(t);
            }
        }
        let local = if tick & 1 == 0 {
            self.pop_pinned().or_else(|| self.runnable.pop())
        } else {
            self.runnable.pop().or_else(|| self.pop_pinned())
        };
        local.or_else(|| self.pull_remote())
    }

    fn pop_pinned(&self) -> Option<Runnable> {
        self.pinned_local.borrow_mut().pop_front()
    }

    /// Takes work pushed here by other threads: a pinned task, or a batch of
    /// the new queue moved into the runnable queue.
    fn pull_remote(&self) -> Option<Runnable> {
        loop {
            match self.p.pinned.steal() {
                Steal::Success(t) => return Some(t),
                Steal::Retry => continue,
                Steal::Empty => break,
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
        let gen = self.sched.processers_gen();
        if self.table.borrow().0 != gen {
            *self.table.borrow_mut() = (gen, self.sched.processers_snapshot());
        }
        let table = self.table.borrow();
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
        let header = Arc::as_ptr(t.header());
        if t.header().home.load(Ordering::Relaxed) != self.p.index {
            t.header().home.store(self.p.index, Ordering::Relaxed);
        }
        let mut slot: EntrySlot = None;
        let ctx = match t.run().ctx.take() {
            Some(ctx) => ctx,
            None => match self.alloc_stack(t.header().stack_size) {
                Ok(stack) => {
                    let ctx = coroutine::make_context(&stack);
                    let run = t.run();
                    run.stack = Some(stack);
                    slot = run.entry.take();
                    ctx
                }
                Err(e) => {
                    // The task can never run: fail its join handle.
                    if let Some(entry) = t.run().entry.take() {
                        self.sched.completed.fetch_add(1, Ordering::Relaxed);
                        // Drops the user's closure here: contain its panic.
                        contain("a task's closure", || {
                            entry.fail(JoinError::stack_exhausted(e))
                        });
                    }
                    self.finish(t);
                    return;
                }
            },
        };
        let n = self.switches.get() + 1;
        self.switches.set(n);
        self.p.switches.store(n, Ordering::Relaxed);
        self.p.running.store(true, Ordering::Relaxed);
        self.current.set(header);
        // SAFETY: `ctx` is the task's saved context (or a fresh one on its
        // own stack, which RunState keeps alive), and we hold its Runnable.
        // `slot` outlives the switch: we are suspended inside `resume` until
        // the task switches back.
        let (ctx, why) = unsafe { coroutine::resume(ctx, &mut slot as *mut EntrySlot as usize) };
        self.current.set(std::ptr::null());
        self.p.running.store(false, Ordering::Relaxed);
        if self.sched.config.dense_stacks {
            check_dense_stack(&mut t, &ctx);
        }
        if self.p.blocked.load(Ordering::Relaxed) {
            // Switched again: active at once (the Dispatcher agrees on its
            // next sample, when it sees the counter moved).
            self.p.blocked.store(false, Ordering::Relaxed);
        }
        match why {
            Suspend::Yield => {
                t.run().ctx = Some(ctx);
                self.push_local(t, false);
            }
            Suspend::Park => {
                t.run().ctx = Some(ctx);
                if let Some(t) = t.park() {
                    // An unpark raced the switch-out: run it again.
                    self.push_local(t, false);
                }
            }
            Suspend::Done => {
                // The finished context is never resumed: forget it.
                let _ = ctx;
                self.finish(t);
            }
        }
    }

    /// Accounts a finished task and files it in the gc queue.
    fn finish(&self, t: Runnable) {
        self.sched.task_finished();
        let mut gc = self.gc.borrow_mut();
        gc.push(t);
        if gc.len() >= GC_BATCH {
            drop(gc);
            self.gc_flush();
        }
    }

    /// Frees finished tasks; their stacks go back to the pools.
    fn gc_flush(&self) {
        let batch = std::mem::take(&mut *self.gc.borrow_mut());
        if batch.is_empty() {
            return;
        }
        let mut pool = self.pool.borrow_mut();
        let mut released = false;
        for mut t in batch {
            if let Some(s) = t.run().stack.take() {
                released = true;
                if s.size() == pool.size() {
                    if let Err(s) = pool.push(s) {
                        // Local pool full: hand half of it to the shared one.
                        let half = pool.take_batch(stack::LOCAL_POOL_MAX / 2);
                        self.sched.give_stacks(half);
                        let _ = pool.push(s);
                    }
                }
                // Other sizes are unmapped here (dropped).
            }
            // Dropping `t` releases the task header, and with it anything a
            // user destructor left in its locals: contain a panic there.
            contain("a finished task", || drop(t));
        }
        drop(pool);
        if released {
            // Only a stack actually given back makes spawning possible again
            // (a task that failed to get one must not clear the record).
            self.sched.stack_released();
        }
    }

    fn alloc_stack(&self, size: usize) -> std::io::Result<StackMem> {
        let mut pool = self.pool.borrow_mut();
        if size == pool.size() {
            if let Some(s) = pool.pop() {
                return Ok(s);
            }
            let batch = self.sched.take_stacks(stack::LOCAL_POOL_MAX / 2);
            pool.extend(batch);
            if let Some(s) = pool.pop() {
                return Ok(s);
            }
        }
        drop(pool);
        self.sched.new_stack(size)
    }

    /// Moves every queued task to other Processers (retirement).
    fn drain_to_others(&self) {
        let mut moved = Vec::new();
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
        let prev = CURRENT_PROC.with(|c| c.replace(self as *const ProcLocal));
        crate::overflow::thread_init();
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
            if let Some(t) = self.find_work() {
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
        CURRENT_PROC.with(|c| c.set(prev));
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
            if round < SPIN_ROUNDS / 2 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        None
    }

    /// Announces the sleep, re-checks, and parks until woken. The re-check
    /// covers our own remote queues, and every other Processer's queues too
    /// when `searched` (we were a searcher: see the module docs).
    fn sleep(&self, searched: bool) -> Option<Runnable> {
        if self.idle_since.get().is_none() {
            self.idle_since.set(Some(Instant::now()));
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
            crate::dispatcher::processer_awake(&self.sched);
            return Some(t);
        }
        if self.sched.should_exit(self) {
            if self.cancel_sleep() {
                self.sched.idle.idle_dec();
            }
            return None;
        }
        let timeout = self.sched.sleep_timeout(self);
        while self.p.sleeping.load(Ordering::SeqCst) {
            match timeout {
                Some(d) => {
                    std::thread::park_timeout(d);
                    // Timed out (or woken): either way re-evaluate.
                    if self.cancel_sleep() {
                        self.sched.idle.idle_dec();
                    }
                    crate::dispatcher::processer_awake(&self.sched);
                    return None;
                }
                None => std::thread::park(),
            }
        }
        // Woken: the waker already decremented the idle count.
        crate::dispatcher::processer_awake(&self.sched);
        None
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

/// Dense stacks have no guard page: after every switch out, check that the
/// task stayed inside its stack (see `stack.rs`), and abort naming it if not.
fn check_dense_stack(t: &mut Runnable, ctx: &context::Context) {
    // The read below relies on `Context` being one pointer wide (it is a
    // `#[repr(C)]` newtype of `&'static c_void` in context 3.x).
    const _: () = assert!(std::mem::size_of::<context::Context>() == std::mem::size_of::<usize>());
    // SAFETY: `Context` is a `#[repr(C)]` wrapper of one pointer, the saved
    // stack pointer of the suspended coroutine; reading it as a usize copies
    // that address without using it.
    let sp = unsafe { std::mem::transmute_copy::<context::Context, usize>(ctx) };
    let intact = match t.run().stack.as_ref() {
        Some(s) if s.is_dense() => s.dense_intact(sp),
        _ => true,
    };
    if !intact {
        crate::overflow::dense_overflow(t.header());
    }
}

fn drain_injector(q: &Injector<Runnable>, out: &mut Vec<Runnable>) {
    loop {
        match q.steal() {
            Steal::Success(t) => out.push(t),
            Steal::Retry => continue,
            Steal::Empty => break,
        }
    }
}

/// Pulls everything out of a retired Processer's remote queues (used by a
/// pusher that raced the retirement).
pub(crate) fn drain_retired(p: &ProcesserShared) -> Vec<Runnable> {
    let mut out = Vec::new();
    drain_injector(&p.new, &mut out);
    drain_injector(&p.pinned, &mut out);
    out
}

/// Creates the shared half of a Processer for slot `index`, and the owner
/// handle of its runnable queue (which goes to the thread that runs it).
pub(crate) fn new_processer(index: usize, kind: Kind) -> (Arc<ProcesserShared>, Worker<Runnable>) {
    let runnable = Worker::new_fifo();
    let p = Arc::new(ProcesserShared {
        index,
        kind,
        new: Injector::new(),
        pinned: Injector::new(),
        stealer: runnable.stealer(),
        switches: AtomicU64::new(0),
        running: AtomicBool::new(false),
        sleeping: AtomicBool::new(false),
        listed: AtomicBool::new(false),
        search_handoff: AtomicBool::new(false),
        blocked: AtomicBool::new(false),
        retired: AtomicBool::new(false),
        thread: OnceLock::new(),
        cpu_clock: OnceLock::new(),
        tid: OnceLock::new(),
        rescued: AtomicU64::new(0),
    });
    (p, runnable)
}

/// Records the calling thread as `p`'s thread.
pub(crate) fn bind_thread(p: &ProcesserShared) {
    let _ = p.thread.set(std::thread::current());
    let mut clock: libc::clockid_t = 0;
    // SAFETY: pthread_self() is the live calling thread; `clock` is a valid
    // out-pointer.
    if unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) } == 0 {
        let _ = p.cpu_clock.set(clock);
    }
    // SAFETY: gettid has no preconditions.
    let _ = p.tid.set(unsafe { libc::gettid() });
}
