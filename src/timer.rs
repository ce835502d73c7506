//! Timers: `sleep`, `park_timeout`, and user timers (`after`, `every`).
//!
//! Each scheduler owns one timer thread, started on first use: a binary heap
//! of deadlines under a mutex, and a condition variable the thread waits on
//! until the earliest deadline (or until an earlier one is added). No thread
//! per timer, and no polling while nothing is due.
//!
//! Cancellation is lazy: a cancelled entry stays in the heap, marked, and is
//! discarded when it comes due. The node's state is one atomic byte:
//!
//! ```text
//!  PENDING -> FIRED       timer thread, when the deadline passes (then it acts)
//!  PENDING -> CANCELLED   cancel(); returns true: the action will never run
//! ```
//!
//! Exactly one of the two transitions wins, so an action never runs after a
//! successful cancel, and `cancel` reports truthfully whether it stopped it.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::SpawnError;
use crate::park::Task;
use crate::scheduler::{current_or_default_shared, Scheduler, Shared};

const PENDING: u8 = 0;
const FIRED: u8 = 1;
const CANCELLED: u8 = 2;

/// What a timer does when it fires.
pub(crate) enum Action {
    /// Wake a parked task or thread (sleep, park_timeout).
    Unpark(Task),
    /// Spawn a closure as a task, once.
    Once(Arc<Shared>, Box<dyn FnOnce() + Send + 'static>),
    /// Spawn a closure as a task every `period`, until cancelled.
    Every(Arc<Shared>, Duration, Arc<dyn Fn() + Send + Sync + 'static>),
}

/// One timer's shared state.
pub(crate) struct TimerNode {
    state: AtomicU8,
}

impl TimerNode {
    fn new() -> TimerNode {
        TimerNode {
            state: AtomicU8::new(PENDING),
        }
    }

    /// `PENDING -> CANCELLED`; true if the action had not run yet.
    fn cancel(&self) -> bool {
        self.state
            .compare_exchange(PENDING, CANCELLED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }
}

struct Entry {
    deadline: Instant,
    seq: u64,
    node: Arc<TimerNode>,
    action: Action,
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
}

/// The timer service of one scheduler.
pub(crate) struct Timers {
    state: Mutex<State>,
    cv: Condvar,
    name: String,
    stopped: AtomicBool,
}

impl Timers {
    pub(crate) fn new(name: String) -> Arc<Timers> {
        Arc::new(Timers {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            name,
            stopped: AtomicBool::new(false),
        })
    }

    /// Schedules `action` at `deadline`.
    pub(crate) fn add(self: &Arc<Self>, deadline: Instant, action: Action) -> Arc<TimerNode> {
        let node = Arc::new(TimerNode::new());
        let mut st = self.state.lock();
        st.seq += 1;
        let seq = st.seq;
        let earliest = st.heap.peek().is_none_or(|e| deadline < e.deadline);
        st.heap.push(Entry {
            deadline,
            seq,
            node: node.clone(),
            action,
        });
        if !st.running && !st.stop {
            st.running = true;
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("{}-timer", self.name))
                .spawn(move || me.run());
            if spawned.is_err() {
                st.running = false;
                drop(st);
                crate::overflow::fatal("cannot start the timer thread");
            }
        } else if earliest {
            self.cv.notify_one();
        }
        node
    }

    /// Cancels a timer; true if its action had not run.
    pub(crate) fn cancel(&self, node: &TimerNode) -> bool {
        node.cancel()
    }

    /// Stops the timer thread; pending timers are dropped without running.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        let mut st = self.state.lock();
        st.stop = true;
        st.heap.clear();
        self.cv.notify_all();
    }

    fn run(self: Arc<Self>) {
        let mut due = Vec::new();
        let mut st = self.state.lock();
        loop {
            if st.stop {
                st.running = false;
                return;
            }
            let now = Instant::now();
            while st.heap.peek().is_some_and(|e| e.deadline <= now) {
                due.push(st.heap.pop().expect("peeked"));
            }
            if !due.is_empty() {
                drop(st);
                for e in due.drain(..) {
                    if let Some(again) = self.fire(e) {
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

    /// Runs one due entry; returns it again for a recurring timer.
    fn fire(&self, mut e: Entry) -> Option<Entry> {
        match e.action {
            Action::Every(ref sched, period, ref f) => {
                if e.node.state.load(Ordering::Acquire) != PENDING {
                    return None;
                }
                let f = f.clone();
                if let Err(err) = sched.spawn(None, None, None, move || f()) {
                    report_spawn_failure(&err);
                    return None;
                }
                // Next tick from the planned deadline, not from now, so the
                // period does not drift; skip ticks that were missed.
                let now = Instant::now();
                e.deadline += period;
                if e.deadline <= now {
                    let behind = (now - e.deadline).as_nanos() / period.as_nanos().max(1);
                    e.deadline += period * (behind as u32 + 1);
                }
                Some(e)
            }
            _ => {
                if e.node
                    .state
                    .compare_exchange(PENDING, FIRED, Ordering::AcqRel, Ordering::Relaxed)
                    .is_err()
                {
                    return None;
                }
                match e.action {
                    Action::Unpark(t) => t.unpark(),
                    Action::Once(sched, f) => {
                        if let Err(err) = sched.spawn(None, None, None, f) {
                            report_spawn_failure(&err);
                        }
                    }
                    Action::Every(..) => unreachable!(),
                }
                None
            }
        }
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
}

impl TimerHandle {
    /// Stops the timer. Returns `true` if it was still pending: a one-shot
    /// timer's closure will never run, a recurring timer will not start
    /// another run. Returns `false` if a one-shot timer already fired or the
    /// timer was already cancelled.
    pub fn cancel(&self) -> bool {
        self.node.cancel()
    }

    /// Whether the timer is still pending (neither fired once nor cancelled).
    pub fn is_pending(&self) -> bool {
        self.node.state.load(Ordering::Acquire) == PENDING
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
    let node = sched
        .timers
        .add(far_deadline(delay), Action::Once(sched.clone(), f));
    TimerHandle { node }
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
    let node = sched.timers.add(
        far_deadline(period),
        Action::Every(sched.clone(), period, f),
    );
    TimerHandle { node }
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
