//! Timers: one deadline queue per core Processer, fired by the Processers
//! themselves. No timer thread.
//!
//! # Where a timer lives
//!
//! Each core Processer owns a [`TimerQueue`]: an indexed heap
//! ([`TimerHeap`]) under a mutex that is almost never contended, and the
//! earliest deadline in an atomic that anyone can read without the lock. A
//! task that sleeps (or waits with a timeout) adds its entry to the queue of
//! the Processer it runs on; an entry added from elsewhere (a plain thread,
//! an extra Processer, a `block_on` caller) goes to a core Processer chosen
//! round-robin. A wait that ends early removes its entry by key, from
//! whichever thread it resumes on, so it leaves nothing behind. Sockets
//! are the exception: a socket keeps one entry for all its timed waits
//! ([`Action::IoDeadline`], "Deadlines" in `io/readiness.rs`), so a server
//! waiting with a read timeout before every request touches no heap.
//!
//! # Who fires
//!
//! - **The owner**, as part of its loop: every 61st pick (with the new-queue
//!   check), whenever the Dispatcher raised its `look_out` bit (checked
//!   at every pick), at each round of a search, and whenever it runs out of
//!   work, it takes the due entries and queues their tasks as one batch
//!   (below). This is where the timer work of a busy scheduler goes.
//! - **A sleeping owner** sleeps until its earliest deadline: the futex wait
//!   or, when it holds the poller role, `epoll_pwait2` (nanosecond timeouts,
//!   see `runtime/io/epoll.rs`), so timers and IO share one wait as in
//!   sylar's IOManager and Go's netpoller. Processer threads run with a
//!   1 us timer slack (`processer_shared::tight_timer_slack`), so that wait
//!   ends on time rather than up to 50 us late. A searching owner with a
//!   timer due soon sleeps rather than yield its CPU (`spin_for_work`).
//! - **The Dispatcher**, for a Processer that cannot: one that is blocked,
//!   or stuck in a long task, with an entry overdue by more than
//!   [`OVERDUE`]. Its wake-ups are queued as one batch too (below).
//!
//! # Firing a batch
//!
//! [`Shared::take_fired`] takes every due entry off a queue (up to
//! `FIRE_BATCH` per hold of its lock), runs the user timers, and unparks
//! the tasks of the wake entries into a list, in deadline order (ties in
//! insertion order). Each task is unparked once: only one `PARKED -> EMPTY`
//! transition wins (`task/park_state.rs`), and a task some other wake-up got
//! first is not in the list. The list is then queued as one batch:
//!
//! ```text
//!  fired by the owner P (ProcLocal::accept_fired)
//!  0. first, P's remote pinned queue moves to its local one: wake-ups the
//!     Dispatcher fired for P while it was held up are older than these
//!  1. a task pinned to P (bound at its first run, or pinned by the user):
//!     to the back of P's local pinned queue, in order; owner-only, P is
//!     awake (it is running this), nobody to wake
//!  2. unpinned, n of them: if n >= 2 * FIRE_SHARE and Processers sleep,
//!     up to n / FIRE_SHARE - 1 sleepers each get an equal share (the
//!     latest deadlines) in their new queue, one fence per share, and are
//!     woken; the rest go to P's runnable queue, and one more sleeper may
//!     be woken to steal (wake_idle_for_local_work, once per batch)
//!  3. pinned to another Processer: through the routing (push_remote)
//!
//!  fired by the Dispatcher for P (dispatcher::deliver_fired)
//!  1. pinned to P: to P's remote pinned queue, one fence for the batch,
//!     P woken if it sleeps (it waits for P in any case)
//!  2. unpinned: handed out like rescued tasks to the least loaded active
//!     Processers other than P, each woken
//!  3. pinned elsewhere: through the routing
//! ```
//!
//! No wake-up is lost:
//! - A task queued on the firing Processer itself needs no wake-up: that
//!   Processer is running its loop, and picks from those queues next.
//! - A share pushed to a sleeper is pushed before a SeqCst fence, and the
//!   sleeper is woken after it by a CAS on its `sleeping` flag. Either the
//!   CAS wakes it, or it is awake or on its way to sleep: a Processer
//!   going to sleep sets `sleeping` (SeqCst), fences, then re-checks its
//!   remote queues, so it sees the share (the Dekker pair of the sleep
//!   protocol in `processer/run.rs`, as for any push to another Processer).
//! - The Dispatcher's pushes follow the same rule; a pinned task waits for
//!   its Processer whatever its state, as every wake-up of a bound task.
//!
//! No task goes through the next-task slot: each fired task would displace
//! the one fired before it, and the last of a batch would run first. Order
//! is kept but for one race: a Dispatcher push that lands while P is filing
//! its own, newer batch runs after that batch.
//!
//! An entry added from another thread that becomes a sleeping Processer's
//! earliest must wake it, so it sleeps again with the shorter timeout:
//!
//! ```text
//!  adder (another thread)                 owner P going to sleep
//!  1. insert; store the new earliest      1. sleeping = true (SeqCst), fence
//!     deadline (SeqCst)                   2. read the earliest deadline
//!  2. if P.sleeping (SeqCst): wake P         (SeqCst); sleep until it
//! ```
//!
//! Either P reads the new deadline, or the adder sees P asleep and wakes
//! it.
//!
//! # User timers and shutdown
//!
//! A pending user timer (`time/timer.rs`) holds its scheduler alive (one
//! `alive` unit), and shutdown must cancel every one of them, whatever its
//! state: one taken off a queue to fire would be missed by a scan of the
//! queues and re-armed after it. So user timers are kept in a registry, and
//! registering (with the check that shutdown has not closed the registry)
//! and closing happen under one lock:
//!
//! ```text
//!  arm (any thread)                         shutdown
//!  1. hold the scheduler (alive += 1)       1. closing = true
//!  2. lock the registry                     2. lock the registry
//!  3. if closed: refuse (the caller         3. closed = true, take every timer
//!     releases the hold)                    4. unlock, cancel each one taken
//!  4. add the entry, register, unlock
//! ```
//!
//! A timer is either registered before the registry closes (and cancelled
//! by shutdown) or sees it closed; none can slip in between and hold the
//! scheduler alive for ever.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::sys::lock::Mutex;

use crate::runtime::context;
use crate::runtime::shared::{find_processer, Shared};
use crate::runtime::task::wait::WaitOn;
use crate::runtime::task::{self, Runnable, TaskRef};
use crate::runtime::time::heap::{TimerHeap, TimerKey};

/// Due entries taken off a queue per lock hold.
const FIRE_BATCH: usize = 256;

/// How late an entry may be before the Dispatcher fires it in place of its
/// owner (which is then blocked, or running one long task).
pub(crate) const OVERDUE: Duration = Duration::from_millis(1);

/// No entry: the value of [`TimerQueue::next`].
const NONE: u64 = u64::MAX;

/// The instant deadlines are counted from, as nanoseconds in an atomic.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn to_nanos(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch()).as_nanos()).unwrap_or(NONE - 1)
}

/// A user timer, seen from the runtime.
pub(crate) trait TimerCallback: Send + Sync {
    /// Its entry came due and was taken off its queue: run it (and re-arm
    /// it, for a recurring timer). Called on a Processer's thread, outside
    /// any task, or on the Dispatcher's.
    fn fire(self: Arc<Self>, sched: &Arc<Shared>);
    /// Shutdown: cancel it, whatever its state. Returns whether it was
    /// pending.
    fn cancel(&self, sched: &Shared) -> bool;
}

/// What an entry does when it comes due.
pub(crate) enum Action {
    /// Wake a parked task.
    Wake(TaskRef),
    /// Run a user timer.
    Call(Arc<dyn TimerCallback>),
    /// A socket's deadline entry, the `u64` naming which one
    /// (`io/readiness.rs`, "Deadlines").
    IoDeadline(Arc<dyn DeadlineWaiters>, u64),
}

/// The timed waiters of a socket, seen from the runtime: they share one
/// entry (`io/readiness.rs`, "Deadlines"). A trait, so that the timers
/// need not know the IO layer.
pub(crate) trait DeadlineWaiters: Send + Sync {
    /// Entry `gen` came due and was taken off its queue: wake the waiters
    /// whose deadline passed (their tasks onto `woken`), and arm again for
    /// the others. Called outside any timer queue's lock.
    fn deadline_passed(self: Arc<Self>, sched: &Arc<Shared>, gen: u64, woken: &mut Vec<Runnable>);
}

/// Names one entry: its queue and its key there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimerRef {
    queue: usize,
    key: TimerKey,
}

/// The deadline queue of one core Processer.
pub(crate) struct TimerQueue {
    heap: Mutex<TimerHeap<Action>>,
    /// The earliest deadline (nanoseconds since [`epoch`]), or [`NONE`].
    /// Written under the lock; read without it (SeqCst: see the module docs).
    next: AtomicU64,
}

impl TimerQueue {
    fn new() -> TimerQueue {
        TimerQueue {
            heap: Mutex::new(TimerHeap::default()),
            next: AtomicU64::new(NONE),
        }
    }

    fn publish(&self, heap: &TimerHeap<Action>) {
        let next = heap.next_deadline().unwrap_or(NONE);
        // SeqCst: the adders' half of the sleep protocol (module docs).
        self.next.store(next, Ordering::SeqCst);
    }

    /// Inserts; returns the key and whether it is now the earliest entry.
    fn insert(&self, deadline: Instant, action: Action) -> (TimerKey, bool) {
        let deadline = to_nanos(deadline);
        let mut heap = self.heap.lock();
        let key = heap.insert(deadline, action);
        let earliest = heap.next_deadline() == Some(deadline);
        if earliest {
            self.publish(&heap);
        }
        (key, earliest)
    }

    fn remove(&self, key: TimerKey) -> Option<Action> {
        let mut heap = self.heap.lock();
        let a = heap.remove(key);
        if a.is_some() {
            self.publish(&heap);
        }
        a
    }

    /// The earliest deadline, read without the lock.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        // SeqCst: the sleeper's half of the sleep protocol (module docs).
        match self.next.load(Ordering::SeqCst) {
            NONE => None,
            n => Some(epoch() + Duration::from_nanos(n)),
        }
    }

    /// Whether an entry is due at `now` (no lock, no clock read when empty).
    pub(crate) fn is_due(&self, now: Instant) -> bool {
        let n = self.next.load(Ordering::Relaxed);
        n != NONE && n <= to_nanos(now)
    }

    /// Whether any entry is pending (a cheap check before reading the clock).
    pub(crate) fn is_empty(&self) -> bool {
        self.next.load(Ordering::Relaxed) == NONE
    }

    /// Takes up to [`FIRE_BATCH`] entries due at `now`.
    fn take_due(&self, now: Instant, out: &mut Vec<Action>) {
        let now = to_nanos(now);
        let mut heap = self.heap.lock();
        while out.len() < FIRE_BATCH {
            match heap.pop_due(now) {
                Some(a) => out.push(a),
                None => break,
            }
        }
        self.publish(&heap);
    }

    fn len(&self) -> usize {
        self.heap.lock().len()
    }

    fn drain(&self) -> Vec<Action> {
        let mut heap = self.heap.lock();
        let all = heap.drain();
        self.publish(&heap);
        all
    }
}

/// The user timers of a scheduler, for shutdown to cancel.
#[derive(Default)]
struct Registry {
    /// Keyed by the ids this scheduler hands out, so a fixed hasher does:
    /// std's random one would read a thread-local and, the first time on a
    /// thread, make system calls that a hooked build may turn into a switch.
    timers: HashMap<u64, Arc<dyn TimerCallback>, BuildHasherDefault<DefaultHasher>>,
    /// Shutdown began: no timer may be registered any more.
    closed: bool,
}

/// The timers of one scheduler: a queue per core Processer, and the
/// registry of user timers.
pub(crate) struct Timers {
    queues: Box<[TimerQueue]>,
    /// Round-robin cursor for entries added off the core Processers.
    rr: AtomicUsize,
    users: Mutex<Registry>,
    next_id: AtomicU64,
}

impl Timers {
    /// Timers for a scheduler of `core` core Processers.
    pub(crate) fn new(core: usize) -> Timers {
        epoch();
        Timers {
            queues: (0..core.max(1)).map(|_| TimerQueue::new()).collect(),
            rr: AtomicUsize::new(0),
            users: Mutex::new(Registry::default()),
            next_id: AtomicU64::new(1),
        }
    }

    /// The queue of core Processer `index`, if it is one.
    pub(crate) fn queue(&self, index: usize) -> Option<&TimerQueue> {
        self.queues.get(index)
    }

    /// Entries pending (timed waits and user timers).
    pub(crate) fn pending(&self) -> usize {
        self.queues.iter().map(TimerQueue::len).sum()
    }

    /// User timers registered (`after`, `every` and their condition forms
    /// that have not ended): each will run code, which may wake tasks.
    pub(crate) fn users_pending(&self) -> usize {
        self.users.lock().timers.len()
    }

    /// A fresh id for a user timer's registry entry.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Forgets user timer `id` (it will not run again).
    pub(crate) fn forget(&self, id: u64) {
        let gone = self.users.lock().timers.remove(&id);
        drop(gone);
    }

    /// Drops every pending entry without running it (the scheduler stopped).
    pub(crate) fn clear(&self) {
        for q in self.queues.iter() {
            drop(q.drain());
        }
        let users = std::mem::take(&mut self.users.lock().timers);
        drop(users);
    }
}

impl Shared {
    /// Schedules `action` at `deadline`, on the queue of the running core
    /// Processer if there is one, else on one chosen round-robin (which is
    /// woken if the entry is its earliest and it sleeps).
    pub(crate) fn add_timer(&self, deadline: Instant, action: Action) -> TimerRef {
        let t = &self.timers;
        let own = context::current_core_index(self);
        let queue = own.unwrap_or_else(|| t.rr.fetch_add(1, Ordering::Relaxed) % t.queues.len());
        let (key, earliest) = t.queues[queue].insert(deadline, action);
        if earliest && own.is_none() {
            let procs = self.processers_snapshot();
            if let Some(p) = find_processer(&procs, queue) {
                // SeqCst: the adders' half of the sleep protocol.
                if p.sleeping.load(Ordering::SeqCst) {
                    self.wake_proc(p);
                }
            }
        }
        TimerRef { queue, key }
    }

    /// Removes a pending entry (a wait that ended before its deadline). An
    /// entry that already fired is ignored.
    pub(crate) fn remove_timer(&self, r: TimerRef) {
        let action = self.timers.queues[r.queue].remove(r.key);
        // Dropped outside the lock: a task's last reference may go.
        drop(action);
    }

    /// Arms user timer `id` at `deadline` and registers it, unless shutdown
    /// closed the registry (then returns false and adds nothing). `armed`
    /// receives the entry before the registry lock is released, so that a
    /// shutdown cancelling the timer finds it.
    pub(crate) fn arm_user_timer(
        &self,
        id: u64,
        deadline: Instant,
        timer: Arc<dyn TimerCallback>,
        armed: impl FnOnce(TimerRef),
    ) -> bool {
        let mut reg = self.timers.users.lock();
        if reg.closed {
            return false;
        }
        // Lock order: the registry, then a queue.
        armed(self.add_timer(deadline, Action::Call(timer.clone())));
        reg.timers.insert(id, timer);
        true
    }

    /// Cancels every user timer, whatever its state, and refuses new ones
    /// (shutdown). Timed waits are left alone: they belong to tasks shutdown
    /// waits for.
    pub(crate) fn cancel_user_timers(&self) {
        let all: Vec<Arc<dyn TimerCallback>> = {
            let mut reg = self.timers.users.lock();
            reg.closed = true;
            reg.timers.drain().map(|(_, t)| t).collect()
        };
        for t in all {
            t.cancel(self);
        }
    }

    /// Fires the entries of queue `index` due at `now`: user timers run,
    /// and the tasks the wake entries unparked are appended to `woken`, in
    /// deadline order, for the caller to queue as one batch (see "Firing a
    /// batch" in the module docs). `due` is scratch space, left empty.
    /// Returns how many entries fired.
    pub(crate) fn take_fired(
        self: &Arc<Self>,
        index: usize,
        now: Instant,
        due: &mut Vec<Action>,
        woken: &mut Vec<Runnable>,
    ) -> usize {
        let Some(q) = self.timers.queue(index) else {
            return 0;
        };
        let mut fired = 0;
        loop {
            q.take_due(now, due);
            if due.is_empty() {
                return fired;
            }
            fired += due.len();
            // Outside the queue's lock: a user timer re-arms (and locks it),
            // and a dropped entry may hold a task's last reference.
            for a in due.drain(..) {
                match a {
                    Action::Wake(h) => {
                        // One winner of PARKED -> EMPTY gets the Runnable: a
                        // task another wake-up got first is not queued twice.
                        woken.extend(task::unpark(&h));
                    }
                    Action::Call(t) => t.fire(self),
                    Action::IoDeadline(state, gen) => state.deadline_passed(self, gen, woken),
                }
            }
        }
    }
}

/// Parks the running task `h` until it is unparked or `deadline` passes
/// (`None`: until unparked). May return spuriously. The building block of
/// every timed wait.
///
/// `h` is the running task; `on` names what it waits for (task dumps).
pub(crate) fn park_until(h: &TaskRef, deadline: Option<Instant>, on: WaitOn) {
    let Some(deadline) = deadline else {
        return park_covered(h, None, on);
    };
    if task::take_token(h) || deadline <= Instant::now() {
        return;
    }
    let entry = h.shared.add_timer(deadline, Action::Wake(h.clone()));
    // SAFETY: `h` is the running task (contract).
    unsafe { task::suspend_parked(h, on, Some(deadline)) };
    // Woken early or by the timer: either way the entry goes now (a no-op
    // if it fired), so a finished wait leaves nothing behind.
    h.shared.remove_timer(entry);
}

/// Parks the running task `h` until it is unparked, for a wait whose
/// `deadline` an entry already armed elsewhere enforces (a socket's, see
/// `io/readiness.rs`); the deadline is only recorded for task dumps. May
/// return spuriously.
pub(crate) fn park_covered(h: &TaskRef, deadline: Option<Instant>, on: WaitOn) {
    if task::take_token(h) {
        return;
    }
    // SAFETY: `h` is the running task (contract).
    unsafe { task::suspend_parked(h, on, deadline) };
}
