//! Timers: `sleep`, `park_timeout`, and user timers (`after`, `every`).
//!
//! Each scheduler owns one timer thread, started on first use: a binary heap
//! of deadlines under a mutex, and a condition variable the thread waits on
//! until the earliest deadline (or until an earlier one is added). No thread
//! per timer, and no polling while nothing is due.
//!
//! # One timer's state (`TimerNode::state`)
//!
//! ```text
//!  PENDING -> FIRING     timer thread, deadline passed: it runs the action
//!  FIRING  -> FIRED      one-shot actions (unpark, after): done
//!  FIRING  -> PENDING    a recurring timer, after spawning this run
//!  PENDING -> CANCELLED  cancel(): returns true, the action never runs again
//! ```
//!
//! `cancel()` that finds `FIRING` waits for the run being started to leave
//! that state, so a `true` answer always means "no further run starts".
//! Cancelling takes the action out of the node and drops it at once; the heap
//! entry (a small node reference) stays until it comes due, and the heap is
//! compacted when cancelled entries outnumber live ones.
//!
//! # Timers keep a scheduler alive
//!
//! A pending `after` or `every` timer counts as one alive task of its
//! scheduler until it fires (and its task is admitted) or is cancelled. So a
//! detached scheduler does not exit under a timer that is about to spawn
//! (and `every` keeps a detached scheduler running until cancelled), and
//! `shutdown` cancels pending user timers before it waits for the tasks.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::fmt;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::SpawnError;
use crate::park::Task;
use crate::scheduler::{current_or_default_shared, Scheduler, Shared};

const PENDING: u8 = 0;
const FIRING: u8 = 1;
const FIRED: u8 = 2;
const CANCELLED: u8 = 3;

/// Cancelled entries tolerated in the heap before it is compacted.
const COMPACT_MIN: usize = 1024;

/// What a timer does when it fires.
pub(crate) enum Action {
    /// Wake a parked task or thread (sleep, park_timeout).
    Unpark(Task),
    /// Spawn a closure as a task, once.
    Once(Arc<Shared>, Box<dyn FnOnce() + Send + 'static>),
    /// Spawn a closure as a task every `period`, until cancelled.
    Every(Arc<Shared>, Duration, Arc<dyn Fn() + Send + Sync + 'static>),
}

impl Action {
    /// The scheduler this action holds alive (user timers only).
    fn holds(&self) -> Option<&Arc<Shared>> {
        match self {
            Action::Unpark(_) => None,
            Action::Once(s, _) | Action::Every(s, _, _) => Some(s),
        }
    }
}

/// One timer's shared state.
pub(crate) struct TimerNode {
    state: AtomicU8,
    /// Taken by the firing (one-shot) or by cancel.
    action: Mutex<Option<Action>>,
}

impl TimerNode {
    /// `PENDING -> CANCELLED`; true if the action will never run (again).
    fn cancel(&self, timers: &Timers) -> bool {
        loop {
            // AcqRel: pairs with the timer thread's FIRING transitions.
            match self.state.compare_exchange(
                PENDING,
                CANCELLED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                // A run is being started: wait for it to finish starting.
                Err(FIRING) => std::thread::yield_now(),
                Err(_) => return false,
            }
        }
        let action = self.action.lock().take();
        if let Some(sched) = action.as_ref().and_then(Action::holds) {
            sched.task_finished();
        }
        timers.cancelled.fetch_add(1, Ordering::Relaxed);
        drop(action);
        true
    }
}

struct Entry {
    deadline: Instant,
    seq: u64,
    node: Arc<TimerNode>,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.deadline == o.deadline && self.seq == o.seq
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    // Reversed: BinaryHeap is a max-heap and we want the earliest first.
    fn cmp(&self, o: &Self) -> CmpOrdering {
        o.deadline.cmp(&self.deadline).then(o.seq.cmp(&self.seq))
    }
}

#[derive(Default)]
struct State {
    heap: BinaryHeap<Entry>,
    seq: u64,
    running: bool,
    stop: bool,
    /// The timer thread, for `stop` to join.
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The timer service of one scheduler.
pub(crate) struct Timers {
    state: Mutex<State>,
    cv: Condvar,
    name: String,
    /// Cancelled entries still in the heap (approximately).
    cancelled: AtomicUsize,
}

impl Timers {
    pub(crate) fn new(name: String) -> Arc<Timers> {
        Arc::new(Timers {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            name,
            cancelled: AtomicUsize::new(0),
        })
    }

    /// Schedules `action` at `deadline`. A user timer must already hold its
    /// scheduler alive (see [`Shared::hold`]).
    pub(crate) fn add(self: &Arc<Self>, deadline: Instant, action: Action) -> Arc<TimerNode> {
        let node = Arc::new(TimerNode {
            state: AtomicU8::new(PENDING),
            action: Mutex::new(Some(action)),
        });
        let mut st = self.state.lock();
        st.seq += 1;
        let seq = st.seq;
        let earliest = st.heap.peek().is_none_or(|e| deadline < e.deadline);
        st.heap.push(Entry {
            deadline,
            seq,
            node: node.clone(),
        });
        if !st.running && !st.stop {
            st.running = true;
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("{}-timer", self.name))
                .spawn(move || me.run());
            match spawned {
                Ok(h) => st.thread = Some(h),
                Err(_) => {
                    st.running = false;
                    drop(st);
                    crate::overflow::fatal("cannot start the timer thread");
                }
            }
        } else if earliest {
            self.cv.notify_one();
        }
        node
    }

    /// Cancels a timer; true if its action had not run.
    pub(crate) fn cancel(&self, node: &TimerNode) -> bool {
        node.cancel(self)
    }

    /// Cancels every pending `after`/`every` timer (shutdown). Sleeps and
    /// park timeouts are left alone: they belong to tasks shutdown waits for.
    pub(crate) fn cancel_user_timers(&self) {
        let nodes: Vec<Arc<TimerNode>> = self
            .state
            .lock()
            .heap
            .iter()
            .map(|e| e.node.clone())
            .collect();
        for n in nodes {
            let user = n
                .action
                .lock()
                .as_ref()
                .is_some_and(|a| a.holds().is_some());
            if user {
                n.cancel(self);
            }
        }
    }

    /// Stops the timer thread and joins it (unless called from it); pending
    /// timers are dropped without running.
    pub(crate) fn stop(&self) {
        let thread = {
            let mut st = self.state.lock();
            st.stop = true;
            st.heap.clear();
            self.cv.notify_all();
            st.thread.take()
        };
        if let Some(h) = thread {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    fn run(self: Arc<Self>) {
        let mut due = Vec::new();
        let mut st = self.state.lock();
        loop {
            if st.stop {
                st.running = false;
                return;
            }
            let dead = self.cancelled.load(Ordering::Relaxed);
            if dead > COMPACT_MIN && dead * 2 > st.heap.len() {
                st.heap
                    .retain(|e| e.node.state.load(Ordering::Acquire) != CANCELLED);
                self.cancelled.store(0, Ordering::Relaxed);
            }
            let now = Instant::now();
            while st.heap.peek().is_some_and(|e| e.deadline <= now) {
                due.push(st.heap.pop().expect("peeked"));
            }
            if !due.is_empty() {
                drop(st);
                for e in due.drain(..) {
                    if let Some(again) = fire(e) {
                        self.state.lock().heap.push(again);
                    }
                }
                st = self.state.lock();
                continue;
            }
            match st.heap.peek().map(|e| e.deadline) {
                Some(d) => {
                    self.cv.wait_until(&mut st, d);
                }
                None => self.cv.wait(&mut st),
            }
        }
    }
}

/// Runs one due entry; returns it again for a recurring timer.
fn fire(mut e: Entry) -> Option<Entry> {
    let node = e.node.clone();
    // Acquire: pairs with the Release that made the node PENDING (creation,
    // or the end of the previous run of a recurring timer).
    if node
        .state
        .compare_exchange(PENDING, FIRING, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return None; // cancelled
    }
    let mut slot = node.action.lock();
    match slot.as_ref() {
        Some(Action::Every(sched, period, f)) => {
            let (sched, period, f) = (sched.clone(), *period, f.clone());
            drop(slot);
            if let Err(err) = sched.spawn(None, None, None, move || f()) {
                report_spawn_failure(&err);
            }
            // Next tick from the planned deadline, not from now, so the
            // period does not drift; skip ticks that were missed.
            let now = Instant::now();
            e.deadline += period;
            if e.deadline <= now {
                let behind = (now - e.deadline).as_nanos() / period.as_nanos().max(1);
                e.deadline += period * (behind as u32 + 1);
            }
            // Release: pairs with cancel's CAS (it waits while FIRING).
            node.state.store(PENDING, Ordering::Release);
            Some(e)
        }
        Some(_) => {
            let action = slot.take().expect("checked");
            drop(slot);
            node.state.store(FIRED, Ordering::Release);
            match action {
                Action::Unpark(t) => t.unpark(),
                Action::Once(sched, f) => {
                    // Admit the task first, then release the timer's hold:
                    // `alive` never touches zero in between.
                    if let Err(err) = sched.spawn(None, None, None, f) {
                        report_spawn_failure(&err);
                    }
                    sched.task_finished();
                }
                Action::Every(..) => unreachable!("handled above"),
            }
            None
        }
        None => None,
    }
}

fn report_spawn_failure(err: &SpawnError) {
    eprintln!("gofer: a timer could not start its task: {err}");
}

/// A handle to a timer made by [`after`] or [`every`].
///
/// Dropping the handle does not cancel the timer.
pub struct TimerHandle {
    node: Arc<TimerNode>,
    timers: Arc<Timers>,
}

impl TimerHandle {
    /// Stops the timer. Returns `true` if it was still pending: a one-shot
    /// timer's closure will never run, a recurring timer will not start
    /// another run. Returns `false` if a one-shot timer already fired or the
    /// timer was already cancelled.
    pub fn cancel(&self) -> bool {
        self.timers.cancel(&self.node)
    }

    /// Whether the timer is still pending: a one-shot timer that has not
    /// fired, or a recurring one that was not cancelled.
    pub fn is_pending(&self) -> bool {
        matches!(self.node.state.load(Ordering::Acquire), PENDING | FIRING)
    }
}

impl fmt::Debug for TimerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerHandle")
            .field("pending", &self.is_pending())
            .finish()
    }
}

/// Runs `f` as a task once, after `delay`, on the current task's scheduler
/// (the default scheduler outside a task).
///
/// A pending timer keeps its scheduler alive (a detached scheduler waits for
/// it); `shutdown` cancels it. On a scheduler that is shutting down the
/// timer is created already cancelled.
///
/// # Panics
/// If the default scheduler cannot be started (see [`SpawnError`]).
pub fn after<F>(delay: Duration, f: F) -> TimerHandle
where
    F: FnOnce() + Send + 'static,
{
    let sched = current_or_default_shared().unwrap_or_else(|e| panic!("gofer: {e}"));
    add_once(&sched, delay, Box::new(f))
}

/// Like [`after`], on the given scheduler.
pub fn after_on<F>(sched: &Scheduler, delay: Duration, f: F) -> TimerHandle
where
    F: FnOnce() + Send + 'static,
{
    add_once(sched.shared(), delay, Box::new(f))
}

fn add_once(sched: &Arc<Shared>, delay: Duration, f: Box<dyn FnOnce() + Send>) -> TimerHandle {
    add_user(sched, far_deadline(delay), Action::Once(sched.clone(), f))
}

/// Adds a user timer that holds its scheduler alive; on a scheduler that is
/// shutting down the timer is made already cancelled.
fn add_user(sched: &Arc<Shared>, deadline: Instant, action: Action) -> TimerHandle {
    let timers = sched.timers.clone();
    if sched.hold().is_err() {
        let node = Arc::new(TimerNode {
            state: AtomicU8::new(CANCELLED),
            action: Mutex::new(None),
        });
        return TimerHandle { node, timers };
    }
    let node = timers.add(deadline, action);
    TimerHandle { node, timers }
}

/// Runs `f` as a task every `period` (first run after one period), until the
/// handle is cancelled. Each run is a separate task; runs may overlap if one
/// takes longer than the period.
///
/// # Panics
/// If `period` is zero, or the default scheduler cannot be started.
pub fn every<F>(period: Duration, f: F) -> TimerHandle
where
    F: Fn() + Send + Sync + 'static,
{
    let sched = current_or_default_shared().unwrap_or_else(|e| panic!("gofer: {e}"));
    add_every(&sched, period, Arc::new(f))
}

/// Like [`every`], on the given scheduler.
///
/// # Panics
/// If `period` is zero.
pub fn every_on<F>(sched: &Scheduler, period: Duration, f: F) -> TimerHandle
where
    F: Fn() + Send + Sync + 'static,
{
    add_every(sched.shared(), period, Arc::new(f))
}

fn add_every(sched: &Arc<Shared>, period: Duration, f: Arc<dyn Fn() + Send + Sync>) -> TimerHandle {
    assert!(
        !period.is_zero(),
        "gofer::timer::every: the period must be non-zero"
    );
    add_user(
        sched,
        far_deadline(period),
        Action::Every(sched.clone(), period, f),
    )
}

fn far_deadline(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// Sleeps the current task (or thread, outside a task) for `d`.
pub fn sleep(d: Duration) {
    match Instant::now().checked_add(d) {
        Some(deadline) => sleep_until(deadline),
        None => loop {
            crate::park::park();
        },
    }
}

/// Sleeps the current task (or thread) until `deadline`.
pub fn sleep_until(deadline: Instant) {
    // park_deadline may return early (a stray unpark); loop until due.
    while Instant::now() < deadline {
        crate::park::park_deadline(deadline);
    }
}
