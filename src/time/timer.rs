//! Timers: `sleep`, `park_timeout`, and user timers (`after`, `every`).
//!
//! Each scheduler owns one timer thread, started on first use: an indexed
//! heap of deadlines ([`TimerHeap`](crate::timer_heap::TimerHeap)) under a
//! mutex, and a condition variable the thread waits on until the earliest
//! deadline (or until an earlier one is added). No thread per timer, and no
//! polling while nothing is due.
//!
//! # Timed waits
//!
//! `sleep`, `park_timeout` and every `*_timeout` of the sync primitives and
//! channels add an entry that unparks the waiting task, park, and on waking
//! remove the entry by its key. A wait that ends early therefore leaves
//! nothing behind: its entry is gone from the heap at once, not when its
//! deadline comes.
//!
//! # One user timer's state (`UserTimer::state`)
//!
//! ```text
//!  PENDING -> FIRING     timer thread, deadline passed: it runs the action
//!  FIRING  -> FIRED      a one-shot timer (after): done
//!  FIRING  -> PENDING    a recurring timer (every), re-armed after this run
//!  FIRING  -> CANCELLED  a recurring timer whose run was refused because
//!                        the scheduler is shutting down
//!  PENDING -> CANCELLED  cancel(): returns true, the action never runs again
//! ```
//!
//! `cancel()` that finds `FIRING` waits for the run being started to leave
//! that state, so a `true` answer always means "no further run starts".
//! Cancelling removes the heap entry and drops the action at once.
//!
//! # Timers keep a scheduler alive
//!
//! A pending `after` or `every` timer counts as one alive task of its
//! scheduler until it fires (and its task is admitted) or is cancelled. So a
//! detached scheduler does not exit under a timer that is about to spawn
//! (and `every` keeps a detached scheduler running until cancelled).
//!
//! Shutdown cancels every user timer, whatever its state: the scheduler
//! keeps a registry of its user timers, and `cancel_user_timers` closes the
//! registry and cancels each one, including a recurring timer caught in the
//! middle of a run (cancel waits for the run to re-arm it, then cancels the
//! re-armed entry). Registration and closing happen under one lock:
//!
//! ```text
//!  add_user (any thread)                   shutdown
//!  1. hold the scheduler (alive += 1)       1. closing = true
//!  2. lock the registry                     2. lock the registry
//!  3. if closed: release the hold,          3. closed = true, take every timer
//!     return a cancelled handle             4. unlock, cancel each one taken
//!  4. arm the timer, register it, unlock
//! ```
//!
//! A timer is either registered before the registry closes (and cancelled
//! by shutdown) or sees it closed; none can slip in between and hold the
//! scheduler alive for ever.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::SpawnError;
use crate::park::Task;
use crate::scheduler::{current_or_default_shared, Scheduler, Shared};
use crate::timer_heap::{TimerHeap, TimerKey};

const PENDING: u8 = 0;
const FIRING: u8 = 1;
const FIRED: u8 = 2;
const CANCELLED: u8 = 3;

/// Due entries taken out of the heap per lock hold.
const FIRE_BATCH: usize = 256;

/// What a heap entry does when it comes due.
pub(crate) enum Action {
    /// Wake a parked task or thread (sleep, park_timeout, timed waits).
    Unpark(Task),
    /// Run a user timer (after, every).
    User(Arc<UserTimer>),
}

/// A user timer's closure and the scheduler it spawns on (and holds alive
/// while pending).
enum UserAction {
    /// Spawn a closure as a task, once.
    Once(Arc<Shared>, Box<dyn FnOnce() + Send + 'static>),
    /// Spawn a closure as a task every period, until cancelled.
    Every(Arc<Shared>, Duration, Arc<dyn Fn() + Send + Sync + 'static>),
}

impl UserAction {
    fn sched(&self) -> &Arc<Shared> {
        match self {
            UserAction::Once(s, _) | UserAction::Every(s, _, _) => s,
        }
    }
}

/// One `after`/`every` timer's shared state.
pub(crate) struct UserTimer {
    /// Its key in the registry.
    id: u64,
    /// See the module docs.
    state: AtomicU8,
    /// Where it sits in the heap while pending, and its planned deadline
    /// (the base of a recurring timer's next one).
    key: Mutex<Option<(TimerKey, Instant)>>,
    /// Taken by a one-shot firing or by cancel.
    action: Mutex<Option<UserAction>>,
}

struct State {
    heap: TimerHeap<Action>,
    /// The timer thread waits on the condvar until this deadline (`None`:
    /// without one); `waiting` is false while it fires or runs its loop.
    /// An entry due before it must wake the thread; a later one need not.
    wake_at: Option<Instant>,
    waiting: bool,
    running: bool,
    stop: bool,
    /// The timer thread, for `stop` to join.
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The user timers of a scheduler, for shutdown to cancel.
#[derive(Default)]
struct Registry {
    timers: HashMap<u64, Arc<UserTimer>>,
    /// Shutdown began: no timer may be registered any more.
    closed: bool,
}

/// The timer service of one scheduler.
pub(crate) struct Timers {
    state: Mutex<State>,
    cv: Condvar,
    name: String,
    users: Mutex<Registry>,
    next_id: AtomicU64,
}

impl Timers {
    pub(crate) fn new(name: String) -> Arc<Timers> {
        Arc::new(Timers {
            state: Mutex::new(State {
                heap: TimerHeap::default(),
                wake_at: None,
                waiting: false,
                running: false,
                stop: false,
                thread: None,
            }),
            cv: Condvar::new(),
            name,
            users: Mutex::new(Registry::default()),
            next_id: AtomicU64::new(1),
        })
    }

    /// Schedules `action` at `deadline`; the key removes it early.
    pub(crate) fn add(self: &Arc<Self>, deadline: Instant, action: Action) -> TimerKey {
        let mut st = self.state.lock();
        let earliest = st.waiting && st.wake_at.is_none_or(|w| deadline < w);
        let key = st.heap.insert(deadline, action);
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
        key
    }

    /// Removes a pending entry (a wait that ended before its deadline). A
    /// key whose entry already fired is ignored.
    pub(crate) fn remove(&self, key: TimerKey) {
        let action = self.state.lock().heap.remove(key);
        // Dropped outside the lock: a task handle's last reference may go.
        drop(action);
    }

    /// Entries pending (timed waits and user timers).
    pub(crate) fn pending(&self) -> usize {
        self.state.lock().heap.len()
    }

    /// Arms a user timer that already holds its scheduler alive (see
    /// [`Shared::hold`]), unless shutdown closed the registry: then the hold
    /// is released and `None` returned.
    fn add_user(self: &Arc<Self>, deadline: Instant, action: UserAction) -> Option<Arc<UserTimer>> {
        let mut reg = self.users.lock();
        if reg.closed {
            drop(reg);
            action.sched().task_finished();
            return None;
        }
        let timer = Arc::new(UserTimer {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            state: AtomicU8::new(PENDING),
            key: Mutex::new(None),
            action: Mutex::new(Some(action)),
        });
        // The key is stored before the registry lock is released, so a
        // cancel (which needs the registry to be closed or the handle) always
        // finds it. Lock order: registry, then the heap.
        let key = self.add(deadline, Action::User(timer.clone()));
        *timer.key.lock() = Some((key, deadline));
        reg.timers.insert(timer.id, timer.clone());
        Some(timer)
    }

    /// `PENDING -> CANCELLED`; true if the timer will never run (again).
    fn cancel_user(&self, t: &UserTimer) -> bool {
        loop {
            // AcqRel: pairs with the firing side's FIRING transitions.
            match t
                .state
                .compare_exchange(PENDING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                // A run is being started: wait for it to finish starting.
                Err(FIRING) => std::thread::yield_now(),
                Err(_) => return false,
            }
        }
        if let Some((key, _)) = t.key.lock().take() {
            self.remove(key);
        }
        self.retire_user(t);
        true
    }

    /// A user timer will not run again: drop its action, release its hold
    /// on the scheduler, and forget it.
    fn retire_user(&self, t: &UserTimer) {
        let action = t.action.lock().take();
        self.users.lock().timers.remove(&t.id);
        if let Some(a) = action {
            a.sched().task_finished();
        }
    }

    /// Cancels every user timer, whatever its state, and refuses new ones
    /// (shutdown). Sleeps and park timeouts are left alone: they belong to
    /// tasks shutdown waits for.
    pub(crate) fn cancel_user_timers(&self) {
        let all: Vec<Arc<UserTimer>> = {
            let mut reg = self.users.lock();
            reg.closed = true;
            reg.timers.drain().map(|(_, t)| t).collect()
        };
        for t in all {
            self.cancel_user(&t);
        }
    }

    /// Stops the timer thread and joins it (unless called from it); pending
    /// timers are dropped without running.
    pub(crate) fn stop(&self) {
        let (thread, dropped) = {
            let mut st = self.state.lock();
            st.stop = true;
            self.cv.notify_all();
            (st.thread.take(), st.heap.drain())
        };
        drop(dropped);
        self.users.lock().timers.clear();
        if let Some(h) = thread {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    fn run(self: Arc<Self>) {
        let mut due = Vec::with_capacity(FIRE_BATCH);
        let mut st = self.state.lock();
        loop {
            if st.stop {
                st.running = false;
                return;
            }
            let now = Instant::now();
            while due.len() < FIRE_BATCH {
                match st.heap.pop_due(now) {
                    Some(a) => due.push(a),
                    None => break,
                }
            }
            if !due.is_empty() {
                drop(st);
                for a in due.drain(..) {
                    match a {
                        Action::Unpark(t) => t.unpark(),
                        Action::User(t) => self.fire(&t),
                    }
                }
                st = self.state.lock();
                continue;
            }
            st.wake_at = st.heap.next_deadline();
            st.waiting = true;
            match st.wake_at {
                Some(d) => {
                    self.cv.wait_until(&mut st, d);
                }
                None => self.cv.wait(&mut st),
            }
            st.waiting = false;
        }
    }

    /// Runs a user timer whose entry came due (and was taken off the heap).
    fn fire(self: &Arc<Self>, t: &Arc<UserTimer>) {
        // Acquire: pairs with the Release that made it PENDING (creation, or
        // the end of the previous run of a recurring timer).
        if t.state
            .compare_exchange(PENDING, FIRING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return; // cancelled
        }
        let planned = t.key.lock().take().map(|(_, d)| d);
        let mut slot = t.action.lock();
        match slot.as_ref() {
            Some(UserAction::Every(sched, period, f)) => {
                let (sched, period, f) = (sched.clone(), *period, f.clone());
                drop(slot);
                match sched.spawn(None, None, None, move || f()) {
                    Err(SpawnError::Shutdown) => {
                        // The scheduler is closing: this timer is over. Not
                        // re-armed, so shutdown has nothing left to wait for.
                        t.state.store(CANCELLED, Ordering::Release);
                        self.retire_user(t);
                        return;
                    }
                    Err(err) => report_spawn_failure(&err),
                    Ok(_) => {}
                }
                let next = next_tick(planned.unwrap_or_else(Instant::now), period);
                let key = self.add(next, Action::User(t.clone()));
                *t.key.lock() = Some((key, next));
                // Release: pairs with cancel's CAS (it waits while FIRING).
                t.state.store(PENDING, Ordering::Release);
            }
            Some(UserAction::Once(..)) => {
                let Some(UserAction::Once(sched, f)) = slot.take() else {
                    unreachable!("matched above")
                };
                drop(slot);
                t.state.store(FIRED, Ordering::Release);
                self.users.lock().timers.remove(&t.id);
                // Admit the task first, then release the timer's hold:
                // `alive` never touches zero in between.
                match sched.spawn(None, None, None, f) {
                    Ok(_) | Err(SpawnError::Shutdown) => {}
                    Err(err) => report_spawn_failure(&err),
                }
                sched.task_finished();
            }
            None => {}
        }
    }
}

/// The next run of a recurring timer: one period after the planned one, so
/// the period does not drift, skipping the runs that were missed.
fn next_tick(planned: Instant, period: Duration) -> Instant {
    let now = Instant::now();
    let Some(mut next) = planned.checked_add(period) else {
        return far_deadline(period);
    };
    if next <= now {
        let behind = (now - next).as_nanos() / period.as_nanos().max(1);
        let skip = u32::try_from(behind + 1).unwrap_or(u32::MAX);
        next = period
            .checked_mul(skip)
            .and_then(|d| next.checked_add(d))
            .unwrap_or_else(|| far_deadline(period));
    }
    next
}

fn report_spawn_failure(err: &SpawnError) {
    eprintln!("gofer: a timer could not start its task: {err}");
}

/// A handle to a timer made by [`after`] or [`every`].
///
/// Dropping the handle does not cancel the timer.
pub struct TimerHandle {
    /// `None` for a timer created on a scheduler that was shutting down.
    timer: Option<Arc<UserTimer>>,
    timers: Arc<Timers>,
}

impl TimerHandle {
    /// Stops the timer. Returns `true` if it was still pending: a one-shot
    /// timer's closure will never run, a recurring timer will not start
    /// another run. Returns `false` if a one-shot timer already fired or the
    /// timer was already cancelled.
    pub fn cancel(&self) -> bool {
        self.timer
            .as_ref()
            .is_some_and(|t| self.timers.cancel_user(t))
    }

    /// Whether the timer is still pending: a one-shot timer that has not
    /// fired, or a recurring one that was not cancelled.
    pub fn is_pending(&self) -> bool {
        self.timer
            .as_ref()
            .is_some_and(|t| matches!(t.state.load(Ordering::Acquire), PENDING | FIRING))
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
    add_user(
        sched,
        far_deadline(delay),
        UserAction::Once(sched.clone(), f),
    )
}

/// Adds a user timer that holds its scheduler alive; on a scheduler that is
/// shutting down the timer is made already cancelled.
fn add_user(sched: &Arc<Shared>, deadline: Instant, action: UserAction) -> TimerHandle {
    let timers = sched.timers.clone();
    let timer = match sched.hold() {
        Ok(()) => timers.add_user(deadline, action),
        Err(_) => None,
    };
    TimerHandle { timer, timers }
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
        UserAction::Every(sched.clone(), period, f),
    )
}

/// `now + d`, or a century from now when that cannot be represented.
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
