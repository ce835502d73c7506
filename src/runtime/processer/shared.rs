//! The half of a Processer that other threads see: its queues, its
//! switch counter, and its status flags.
//!
//! [`ProcesserShared`] is what other threads see
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

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Instant;

use crate::sys::lock::Mutex;
use crossbeam_deque::{Injector, Steal, Stealer, Worker};

use crate::runtime::processer::next_slot::NextSlot;
use crate::runtime::task::{Runnable, TaskHeader};
use crate::sys::lock::Sleeper;

/// A blocked spell's backtrace ([`ProcesserShared::blocked_call`]).
#[derive(Clone, Debug)]
pub(crate) struct BlockedCall {
    /// The switch count the Processer stood at in that spell.
    pub(crate) switches: u64,
    /// The raw frames, or why there are none.
    pub(crate) answer: crate::runtime::dump::blocked_call::Answer,
}

impl ProcesserShared {
    /// The call the running task is blocked in, if the Dispatcher took it
    /// in the present blocked spell.
    pub(crate) fn blocked_call_now(&self) -> Option<BlockedCall> {
        let call = self.blocked_call.lock().clone()?;
        // Acquire: pairs with the Dispatcher's Release store of `blocked`.
        (self.blocked.load(Ordering::Acquire)
            && self.switches.load(Ordering::Relaxed) == call.switches)
            .then_some(call)
    }
}

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
    /// The *next-task slot* (Go's `runnext`, tokio's LIFO slot): a task
    /// that the running task woke or spawned on this Processer runs next,
    /// without a trip through the runnable queue. Holds an owned
    /// [`Runnable`] as a raw pointer, or null. The owner swaps tasks in and
    /// out; the Dispatcher swaps it out when it rescues a blocked
    /// Processer's work (idle thieves leave it: it runs in a moment). The
    /// protocol, model-checked, is in `processer/next_slot.rs`.
    pub(crate) runnext: NextSlot<Runnable>,
    /// Whether the task last put in the next-task slot may move (is not
    /// pinned): with `runnext.is_occupied()`, a hint for the Dispatcher
    /// (`dispatcher/cycle.rs`, "Nothing to rescue"). Written by the owner at each
    /// put, Relaxed; stale only while the slot changes hands.
    pub(crate) runnext_movable: AtomicBool,
    /// Live tasks bound here at their first run: the owner's count,
    /// mirrored (Relaxed store) for the placement of fresh tasks
    /// (`ProcLocal::place_fresh`). Relaxed: a hint.
    pub(crate) bound: AtomicUsize,
    /// Fresh tasks other Processers placed here (`ProcLocal::place_fresh`)
    /// that have not run yet: they wait in the pinned queue, and while
    /// there are some, the Dispatcher's rescue of this Processer looks
    /// through that queue for them (`dispatcher::steal_all`). Counted up by
    /// the placer before its push, down by the owner at the task's first
    /// run or by the rescue that takes it. Relaxed: a hint (a placement
    /// that a retiring target re-routed leaves it one too high, which only
    /// costs a needless look).
    pub(crate) placed: AtomicUsize,
    /// +1 at every switch into a task. Written only by the owner (Relaxed
    /// load + store: no read-modify-write on the hot path); read by the
    /// Dispatcher and stats.
    pub(crate) switches: AtomicU64,
    /// Of `switches`, those a direct switch made (`processer/direct.rs`). Written
    /// only by the owner, like `switches`; read by stats.
    pub(crate) direct_switches: AtomicU64,
    /// A task is switched in right now. Relaxed: a sample, paired with the
    /// switch counter by the Dispatcher.
    pub(crate) running: AtomicBool,
    /// The header of the task switched in last (switched in now while
    /// `running` is set). Relaxed: task dumps compare it with the tasks
    /// they list, to call one running; never dereferenced.
    pub(crate) current: AtomicPtr<TaskHeader>,
    /// The switch count a busy peer found unchanged for the watch time
    /// (`dispatcher::watch_after`) and reported to the Dispatcher; stale as
    /// soon as the count moves. Relaxed: a hint, which the Dispatcher
    /// checks against the counter itself.
    pub(crate) reported: AtomicU64,
    /// The thread is asleep (or about to be) waiting for work. See the
    /// module docs for the protocol.
    pub(crate) sleeping: AtomicBool,
    /// On the scheduler's sleepers stack; only read and written under the
    /// stack's lock (see `processer/idle.rs`).
    pub(crate) listed: AtomicBool,
    /// A waker counted this Processer as a searcher before waking it (Go's
    /// `wakep`, see `processer/idle.rs`): the Processer must search, and end that
    /// search. Set by the waker before its CAS on `sleeping`; taken (swapped
    /// out) either by the Processer, or by the waker when its CAS failed,
    /// so exactly one of them owns the search.
    pub(crate) search_handoff: AtomicBool,
    /// Sleeping in its own reactor's wait (holding the poller role): a
    /// waker must write that reactor's eventfd, not only unpark the thread (see
    /// `runtime/io/reactor.rs` for both sides).
    pub(crate) in_poll: AtomicBool,
    /// Asks this (busy) Processer to look outward at its next pick rather
    /// than at its periodic look (every 61st pick), as bits: [`LOOK_TIMERS`],
    /// set by the Dispatcher when its earliest timer is due, and
    /// [`LOOK_REMOTE`], set by a push into its remote pinned queue
    /// (`processer/route.rs`, `push_batch_to`). The owner reads it at every pick and
    /// fires its due timers or takes its remote pinned queue. A hint: the
    /// timers are under their queue's lock, the queue is crossbeam's (the
    /// Release `fetch_or` after a push and the owner's Acquire swap make the
    /// pushed tasks visible to that pick). A setter writes only a bit not
    /// already set, so pushes to a busy Processer do not keep writing the
    /// line the owner reads at every pick.
    pub(crate) look_out: AtomicU8,
    /// Marked by the Dispatcher: the running task has not switched out for
    /// longer than the block timeout.
    pub(crate) blocked: AtomicBool,
    /// While `blocked`: when the running task's hold began (the sample
    /// that first saw the switch count it still shows). Written by the
    /// Dispatcher before it sets `blocked`; read by task dumps and the
    /// stall report. A lock, not an atomic: both sides are rare.
    pub(crate) blocked_since: Mutex<Option<Instant>>,
    /// The call the running task is blocked in: the backtrace the
    /// Dispatcher took from the thread (`runtime/dump/blocked_call.rs`) once in a
    /// blocked spell, tagged with the spell's switch count. Written by the
    /// Dispatcher; read by task dumps and the stall report, which show it
    /// only while `blocked` is set and `switches` still shows that count:
    /// the tag keeps a reader from showing one spell's call for a later
    /// spell (the thread switched, and blocked again elsewhere, between
    /// the Dispatcher's write and the read). A lock: both sides are rare.
    pub(crate) blocked_call: Mutex<Option<BlockedCall>>,
    /// While `blocked`: tasks runnable here that can run on no other
    /// thread ([`runnable_pinned`](Self::runnable_pinned)), as counted by
    /// the Dispatcher at its last sample; 0 once the Dispatcher has seen
    /// the Processer switch again (until then `blocked` is already clear).
    /// Relaxed: a gauge for `Stats::tasks_behind_blocked`.
    pub(crate) behind: AtomicUsize,
    /// The length of the owner's local pinned queue, mirrored by a Relaxed
    /// store at each change (no read-modify-write), so that the Dispatcher
    /// can count the tasks waiting behind a blocked Processer. A hint.
    pub(crate) pinned_local_len: AtomicUsize,
    /// The Processer left (Extra or Caller kind); pushes must go elsewhere.
    pub(crate) retired: AtomicBool,
    /// The thread, for unpark; set when the thread starts.
    pub(crate) thread: OnceLock<Thread>,
    /// What the thread sleeps on while the Processer is idle (see
    /// `sys/lock.rs`): woken by [`wake`](Self::wake) and `wake_all`.
    pub(crate) sleeper: Sleeper,
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
    /// The metrics of [`ProcesserStats`](crate::ProcesserStats) beyond the
    /// switch counters (`processer/shared.rs`, [`Metrics`]).
    pub(crate) metrics: Metrics,
    /// Wake-ups of tasks bound (or pinned) here that a poll made elsewhere
    /// delivered: another Processer's reactor poll, or the Dispatcher's
    /// (`Shared::push_woken`). Relaxed: a statistic.
    pub(crate) cross_wakeups: AtomicU64,
}

/// A Processer's counters for `Scheduler::stats`, each with one writer (a
/// plain Relaxed load and store, no read-modify-write) but for
/// `remote_pushes`, which every pushing thread adds to. Readers take a
/// Relaxed snapshot: each value is exact on its own, not consistent with
/// the others.
#[derive(Default)]
pub(crate) struct Metrics {
    /// Tasks that parked here (written by the owner, `ProcLocal::file`).
    pub(crate) parks: AtomicU64,
    /// Tasks that yielded here (owner, `ProcLocal::file`).
    pub(crate) yields: AtomicU64,
    /// Successful steals from other Processers (owner, `search.rs`).
    pub(crate) steals: AtomicU64,
    /// Tasks those steals took (owner).
    pub(crate) stolen: AtomicU64,
    /// Tasks picked from the next-task slot (owner, `queues.rs`).
    pub(crate) next_slot_runs: AtomicU64,
    /// Tasks other threads pushed into the new or pinned queue (every
    /// pusher: `fetch_add`, one per batch).
    pub(crate) remote_pushes: AtomicU64,
    /// Polls of the reactor or turns of the ring made by this thread
    /// (owner, `timers.rs`, `search.rs`).
    pub(crate) reactor_polls: AtomicU64,
    /// Nanoseconds spent running tasks, up to the last batch's end
    /// (owner, `run.rs`).
    pub(crate) busy_ns: AtomicU64,
    /// Start of the batch of runs in progress, in nanoseconds since
    /// `epoch` plus one; 0 while no batch runs (owner).
    pub(crate) busy_since: AtomicU64,
    /// Times the Dispatcher marked this Processer blocked (the Dispatcher
    /// thread, its only writer).
    pub(crate) blocked_detections: AtomicU64,
    /// The origin of `busy_since`.
    pub(crate) epoch: OnceLock<Instant>,
}

/// Adds one to a counter only one thread writes: a Relaxed load and store.
#[inline(always)]
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

impl Metrics {
    /// The epoch `busy_since` counts from.
    pub(crate) fn epoch(&self) -> Instant {
        *self.epoch.get_or_init(Instant::now)
    }

    /// A batch of runs starts now (owner only).
    pub(crate) fn busy_start(&self) {
        let ns = self.epoch().elapsed().as_nanos() as u64 + 1;
        self.busy_since.store(ns, Ordering::Relaxed);
    }

    /// The batch of runs in progress, if any, ends now (owner only).
    pub(crate) fn busy_end(&self) {
        let since = self.busy_since.load(Ordering::Relaxed);
        if since == 0 {
            return;
        }
        let now = self.epoch().elapsed().as_nanos() as u64 + 1;
        bump(&self.busy_ns, now.saturating_sub(since));
        self.busy_since.store(0, Ordering::Relaxed);
    }

    /// Busy time so far, the batch in progress included (any thread).
    pub(crate) fn busy(&self) -> std::time::Duration {
        let mut ns = self.busy_ns.load(Ordering::Relaxed);
        let since = self.busy_since.load(Ordering::Relaxed);
        if since != 0 {
            let now = self.epoch().elapsed().as_nanos() as u64 + 1;
            ns += now.saturating_sub(since);
        }
        std::time::Duration::from_nanos(ns)
    }
}

impl ProcesserShared {
    /// Whether `task` may be queued here: a task pinned here, or an unpinned
    /// one on a Processer that takes any work. A `block_on` caller runs its
    /// root task (pinned to it) and nothing else: another task could block
    /// the caller's thread and hold up the root, and `block_on` could not
    /// return until that task switched out.
    pub(crate) fn may_run(&self, task: &TaskHeader) -> bool {
        match task.pin() {
            Some(pin) => pin == self.index,
            None => self.kind != Kind::Caller,
        }
    }

    /// Tasks waiting here (new + runnable + pinned), approximately.
    pub(crate) fn queued(&self) -> usize {
        let next = usize::from(self.runnext.is_occupied());
        self.new.len() + self.stealer.len() + self.pinned.len() + next
    }

    /// Tasks queued here that can run only here (bound to this thread or
    /// pinned to it): the remote pinned queue less the fresh tasks placed
    /// here (a rescue may move those), the local pinned queue, and a
    /// pinned task in the next-task slot. While the Processer is blocked,
    /// these wait for its running task to switch out. A hint, read from
    /// other threads.
    pub(crate) fn runnable_pinned(&self) -> usize {
        let next = self.runnext.is_occupied() && !self.runnext_movable.load(Ordering::Relaxed);
        self.pinned
            .len()
            .saturating_sub(self.placed.load(Ordering::Relaxed))
            + self.pinned_local_len.load(Ordering::Relaxed)
            + usize::from(next)
    }

    /// The name of the Processer's thread: the one it was started with
    /// (`<scheduler>-<index>`), or a `block_on` caller's own.
    pub(crate) fn thread_name(&self, scheduler: &str) -> String {
        match self.thread.get().and_then(|t| t.name()) {
            Some(n) => n.to_string(),
            None => format!("{scheduler}-{}", self.index),
        }
    }

    /// Whether work that a rescue could move waits here: its new queue,
    /// runnable queue, a movable task in the next-task slot, or tasks
    /// placed here (`dispatcher/cycle.rs`, "Nothing to rescue"). A hint, read
    /// from other threads.
    pub(crate) fn has_movable(&self) -> bool {
        !self.new.is_empty()
            || !self.stealer.is_empty()
            || (self.runnext.is_occupied() && self.runnext_movable.load(Ordering::Relaxed))
            || self.placed.load(Ordering::Relaxed) != 0
    }

    /// Takes the task out of the next-task slot, if there is one.
    pub(crate) fn take_runnext(&self) -> Option<Runnable> {
        self.runnext.take()
    }

    /// Puts `t` in the next-task slot; returns the task it displaced.
    /// `movable`: `t` is not pinned (the caller has looked already).
    pub(crate) fn put_runnext(&self, t: Runnable, movable: bool) -> Option<Runnable> {
        self.runnext_movable.store(movable, Ordering::Relaxed);
        self.runnext.put(t)
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

    /// The thread's kernel id, once the thread has started.
    pub(crate) fn tid(&self) -> Option<libc::pid_t> {
        self.tid.get().copied()
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
            self.sleeper.unpark(self.thread.get());
            true
        } else {
            false
        }
    }
}

/// [`ProcesserShared::look_out`]: a timer of this Processer is due.
pub(crate) const LOOK_TIMERS: u8 = 1;
/// [`ProcesserShared::look_out`]: tasks wait in its remote pinned queue.
pub(crate) const LOOK_REMOTE: u8 = 2;

impl ProcesserShared {
    /// Raises `bit` of [`look_out`](Self::look_out) unless it is set
    /// already (no write then). Release: what the caller pushed before is
    /// visible to the owner's pick that takes the bit.
    #[inline]
    pub(crate) fn ask_look_out(&self, bit: u8) {
        if self.look_out.load(Ordering::Relaxed) & bit == 0 {
            self.look_out.fetch_or(bit, Ordering::Release);
        }
    }
}

pub(crate) fn drain_injector(q: &Injector<Runnable>, out: &mut Vec<Runnable>) {
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
        runnext: NextSlot::new(),
        runnext_movable: AtomicBool::new(false),
        bound: AtomicUsize::new(0),
        placed: AtomicUsize::new(0),
        switches: AtomicU64::new(0),
        direct_switches: AtomicU64::new(0),
        running: AtomicBool::new(false),
        current: AtomicPtr::new(std::ptr::null_mut()),
        reported: AtomicU64::new(u64::MAX),
        sleeping: AtomicBool::new(false),
        listed: AtomicBool::new(false),
        search_handoff: AtomicBool::new(false),
        in_poll: AtomicBool::new(false),
        look_out: AtomicU8::new(0),
        blocked: AtomicBool::new(false),
        blocked_since: Mutex::new(None),
        blocked_call: Mutex::new(None),
        behind: AtomicUsize::new(0),
        pinned_local_len: AtomicUsize::new(0),
        retired: AtomicBool::new(false),
        thread: OnceLock::new(),
        sleeper: Sleeper::default(),
        cpu_clock: OnceLock::new(),
        tid: OnceLock::new(),
        rescued: AtomicU64::new(0),
        metrics: Metrics::default(),
        cross_wakeups: AtomicU64::new(0),
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

/// The timer slack of a Processer's thread, in nanoseconds.
const TIMER_SLACK_NS: libc::c_ulong = 1_000;

/// Makes the calling thread's timed waits end on time: the kernel may
/// otherwise let a timed futex or `epoll_pwait2` wait run up to the
/// thread's timer slack past its end (50 us by default), and a Processer
/// sleeps until its earliest timer that way (what it saves is measured in
/// `docs/bench/history.md`, "Sleep lateness"). The cost is
/// that the kernel cannot merge these wake-ups with others in the slack
/// window, at most one more wake-up per timer. Set on the Processer
/// threads the scheduler starts (never on a `block_on` caller's thread,
/// which is the user's), as on the Dispatcher's.
pub(crate) fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and only affects the
    // calling thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, TIMER_SLACK_NS) };
}

impl Drop for ProcesserShared {
    fn drop(&mut self) {
        // A Processer is dropped after its loop drained its queues (or after
        // the scheduler stopped, with no task alive), so the slot is empty.
        // Should a task be left there, leak it rather than free a task that
        // may be suspended.
        if let Some(t) = self.take_runnext() {
            debug_assert!(false, "a task was left in a next-task slot");
            std::mem::forget(t);
        }
    }
}
