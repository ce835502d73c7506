//! Timers that run a closure as a task: [`after`] runs it once after a
//! delay, [`every`] once per period until cancelled, and the condition forms
//! [`after_if_alive`] and [`every_if_alive`] run it only while a target
//! `Arc` is still alive. Each has an `_on` form that takes the scheduler;
//! the others use the current task's scheduler (the default one outside a
//! task). [`sleep`] and [`sleep_until`] are here too.
//!
//! # Cancelling
//!
//! [`TimerHandle::cancel`] returns `true` if the timer was still pending:
//! no run starts after it returns (a run that has already started is not
//! stopped). Dropping the handle does not cancel the timer. Shutting the
//! scheduler down cancels every pending timer.
//!
//! # Condition timers
//!
//! `after_if_alive(&target, ..)` and `every_if_alive(&target, ..)` hold only
//! a `Weak` of their target, so a pending timer never keeps it alive. Each
//! firing first upgrades it: if that works, the run's task gets the `Arc`
//! (the target then lives until the run ends); if the target is gone,
//! nothing runs, and a recurring timer ends itself as if cancelled,
//! releasing its hold on the scheduler. So `every_if_alive` stops at its
//! first tick after the last `Arc` went away.
//!
//! # Timers and the scheduler's life
//!
//! A pending timer counts as one live task of its scheduler until it fires
//! or is cancelled. A detached scheduler (its last handle dropped without
//! `shutdown`) therefore does not exit under a timer that is about to run,
//! and an `every` timer keeps it running until cancelled.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::sys::lock::Mutex;

use crate::error::OrPanic;
use crate::error::SpawnError;
use crate::runtime::scheduler::{current_or_default_shared, Scheduler};
use crate::runtime::shared::Shared;
use crate::runtime::time::timer::{Action, TimerCallback, TimerRef};
use crate::task::spawn::spawn_closure;

pub use crate::runtime::time::sleep::{sleep, sleep_until};

const PENDING: u8 = 0;
const FIRING: u8 = 1;
const FIRED: u8 = 2;
const CANCELLED: u8 = 3;

/// What one firing did.
enum Run {
    /// The run's task was admitted.
    Started,
    /// The task was refused.
    Refused(SpawnError),
    /// The timer's target is gone (a condition timer): nothing was spawned.
    TargetGone,
}

impl From<Result<(), SpawnError>> for Run {
    fn from(r: Result<(), SpawnError>) -> Run {
        match r {
            Ok(()) => Run::Started,
            Err(e) => Run::Refused(e),
        }
    }
}

/// One firing of a one-shot timer: spawns its run on the scheduler given.
type FireOnce = Box<dyn FnOnce(&Arc<Shared>) -> Run + Send + 'static>;
/// One firing of a recurring timer.
type FireEvery = Arc<dyn Fn(&Arc<Shared>) -> Run + Send + Sync + 'static>;

/// A user timer's firing and the scheduler it spawns on (and holds alive
/// while pending).
enum UserAction {
    /// Fire once.
    Once(Arc<Shared>, FireOnce),
    /// Fire every period, until cancelled (or its target is gone).
    Every(Arc<Shared>, Duration, FireEvery),
}

impl UserAction {
    fn sched(&self) -> &Arc<Shared> {
        match self {
            UserAction::Once(s, _) | UserAction::Every(s, _, _) => s,
        }
    }
}

/// One `after`/`every` timer's shared state.
///
/// Its `state` goes through:
///
/// ```text
///  PENDING -> FIRING     deadline passed: a Processer runs the action
///  FIRING  -> FIRED      a one-shot timer (after): done
///  FIRING  -> PENDING    a recurring timer (every), re-armed after this run
///  FIRING  -> CANCELLED  a recurring timer whose run was refused because
///                        the scheduler is shutting down, or whose target
///                        (every_if_alive) is gone
///  PENDING -> CANCELLED  cancel(): returns true, the action never runs again
/// ```
///
/// `cancel()` that finds `FIRING` waits for the run being started to leave
/// that state, so a `true` answer always means "no further run starts".
/// Cancelling removes the heap entry and drops the action at once.
pub(crate) struct UserTimer {
    /// Its key in the service's registry.
    id: u64,
    /// `PENDING`, `FIRING`, `FIRED` or `CANCELLED`: see the type's docs.
    state: AtomicU8,
    /// Where it sits in the heap while pending, and its planned deadline
    /// (the base of a recurring timer's next one).
    key: Mutex<Option<(TimerRef, Instant)>>,
    /// Taken by a one-shot firing or by cancel.
    action: Mutex<Option<UserAction>>,
}

impl UserTimer {
    /// Arms a timer that already holds its scheduler alive (see
    /// [`Shared::hold`]), unless shutdown closed the registry: then the hold
    /// is released and `None` returned.
    fn arm(sched: &Arc<Shared>, deadline: Instant, action: UserAction) -> Option<Arc<UserTimer>> {
        let t = Arc::new(UserTimer {
            id: sched.timers.next_id(),
            state: AtomicU8::new(PENDING),
            key: Mutex::new(None),
            action: Mutex::new(Some(action)),
        });
        let armed = sched.arm_user_timer(t.id, deadline, t.clone(), |key| {
            *t.key.lock() = Some((key, deadline));
        });
        if armed {
            Some(t)
        } else {
            // Dropping the action here, not in the refusal, keeps the user's
            // closure out of the registry's lock.
            t.action.lock().take();
            sched.task_finished();
            None
        }
    }

    /// `PENDING -> CANCELLED`; true if the timer will never run (again).
    fn cancel_now(&self, sched: &Shared) -> bool {
        loop {
            // AcqRel: pairs with the firing side's FIRING transitions.
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
        if let Some((key, _)) = self.key.lock().take() {
            sched.remove_timer(key);
        }
        self.retire(sched);
        true
    }

    /// The timer will not run again: drop its action, release its hold on
    /// the scheduler, and forget it.
    fn retire(&self, sched: &Shared) {
        let action = self.action.lock().take();
        sched.timers.forget(self.id);
        if let Some(a) = action {
            a.sched().task_finished();
        }
    }
}

impl TimerCallback for UserTimer {
    fn fire(self: Arc<Self>, _firing: &Arc<Shared>) {
        // The action names its own scheduler (the one firing it).
        // Acquire: pairs with the Release that made it PENDING (creation, or
        // the end of the previous run of a recurring timer).
        if self
            .state
            .compare_exchange(PENDING, FIRING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return; // cancelled
        }
        let planned = self.key.lock().take().map(|(_, d)| d);
        let mut slot = self.action.lock();
        match slot.as_ref() {
            Some(UserAction::Every(sched, period, fire)) => {
                let (sched, period, fire) = (sched.clone(), *period, fire.clone());
                drop(slot);
                match fire(&sched) {
                    Run::Refused(SpawnError::Shutdown) | Run::TargetGone => {
                        // The scheduler is closing, or the target is gone:
                        // this timer is over. Not re-armed, so shutdown has
                        // nothing left to wait for.
                        self.state.store(CANCELLED, Ordering::Release);
                        self.retire(&sched);
                        return;
                    }
                    Run::Refused(err) => report_spawn_failure(&err),
                    Run::Started => {}
                }
                let next = next_tick(planned.unwrap_or_else(Instant::now), period);
                let key = sched.add_timer(next, Action::Call(self.clone()));
                *self.key.lock() = Some((key, next));
                // Release: pairs with cancel's CAS (it waits while FIRING).
                self.state.store(PENDING, Ordering::Release);
            }
            Some(UserAction::Once(..)) => {
                let Some(UserAction::Once(sched, fire)) = slot.take() else {
                    unreachable!("matched above")
                };
                drop(slot);
                self.state.store(FIRED, Ordering::Release);
                sched.timers.forget(self.id);
                // Admit the task first, then release the timer's hold:
                // `alive` never touches zero in between.
                match fire(&sched) {
                    Run::Started | Run::Refused(SpawnError::Shutdown) | Run::TargetGone => {}
                    Run::Refused(err) => report_spawn_failure(&err),
                }
                sched.task_finished();
            }
            None => {}
        }
    }

    fn cancel(&self, sched: &Shared) -> bool {
        self.cancel_now(sched)
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

/// A handle to a timer made by [`after`], [`every`], [`after_if_alive`] or
/// [`every_if_alive`].
///
/// Dropping the handle does not cancel the timer.
pub struct TimerHandle {
    /// `None` for a timer created on a scheduler that was shutting down.
    timer: Option<Arc<UserTimer>>,
    sched: Arc<Shared>,
}

impl TimerHandle {
    /// Stops the timer. Returns `true` if it was still pending: a one-shot
    /// timer's closure will never run, a recurring timer will not start
    /// another run. Returns `false` if a one-shot timer already fired or the
    /// timer was already cancelled (or, for `every_if_alive`, ended itself
    /// because its target was gone).
    pub fn cancel(&self) -> bool {
        self.timer
            .as_ref()
            .is_some_and(|t| t.cancel_now(&self.sched))
    }

    /// Whether the timer is still pending: a one-shot timer that has not
    /// fired, or a recurring one that was not cancelled (nor ended, for
    /// `every_if_alive`).
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
#[track_caller]
pub fn after<F>(delay: Duration, f: F) -> TimerHandle
where
    F: FnOnce() + Send + 'static,
{
    let sched = current_or_default_shared().or_panic("gofer");
    add_once(&sched, delay, spawn_once(f))
}

/// Like [`after`], on the given scheduler.
pub fn after_on<F>(sched: &Scheduler, delay: Duration, f: F) -> TimerHandle
where
    F: FnOnce() + Send + 'static,
{
    add_once(sched.shared(), delay, spawn_once(f))
}

/// The firing of `after`: spawns `f`.
fn spawn_once<F>(f: F) -> FireOnce
where
    F: FnOnce() + Send + 'static,
{
    Box::new(move |s: &Arc<Shared>| Run::from(spawn_closure(s, f)))
}

/// Runs `f(target)` as a task once, after `delay`, if `target` is still
/// alive then: the timer holds only a [`Weak`] of it, so it never keeps the
/// target alive, and if the last [`Arc`] is gone when the delay has passed,
/// nothing runs. The task gets the upgraded `Arc` (the target lives at
/// least until `f` returns).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// struct Conn;
/// impl Conn {
///     fn close_idle(&self) {}
/// }
/// let conn = Arc::new(Conn);
/// let t = gofer::timer::after_if_alive(&conn, Duration::from_secs(30), |conn| conn.close_idle());
/// drop(conn); // the timer will find it gone and do nothing
/// # t.cancel();
/// ```
///
/// Like [`after`] otherwise: on the current task's scheduler (the default
/// one outside a task), a pending timer keeps its scheduler alive, and
/// [`TimerHandle::cancel`] stops it.
///
/// # Panics
/// If the default scheduler cannot be started (see [`SpawnError`]).
#[track_caller]
pub fn after_if_alive<T, F>(target: &Arc<T>, delay: Duration, f: F) -> TimerHandle
where
    T: Send + Sync + 'static,
    F: FnOnce(Arc<T>) + Send + 'static,
{
    let sched = current_or_default_shared().or_panic("gofer");
    add_once(&sched, delay, spawn_once_if_alive(target, f))
}

/// Like [`after_if_alive`], on the given scheduler.
pub fn after_if_alive_on<T, F>(
    sched: &Scheduler,
    target: &Arc<T>,
    delay: Duration,
    f: F,
) -> TimerHandle
where
    T: Send + Sync + 'static,
    F: FnOnce(Arc<T>) + Send + 'static,
{
    add_once(sched.shared(), delay, spawn_once_if_alive(target, f))
}

/// The firing of `after_if_alive`: spawns `f(target)` if the target lives.
fn spawn_once_if_alive<T, F>(target: &Arc<T>, f: F) -> FireOnce
where
    T: Send + Sync + 'static,
    F: FnOnce(Arc<T>) + Send + 'static,
{
    let weak: Weak<T> = Arc::downgrade(target);
    Box::new(move |s: &Arc<Shared>| match weak.upgrade() {
        Some(target) => Run::from(spawn_closure(s, move || f(target))),
        None => Run::TargetGone,
    })
}

fn add_once(sched: &Arc<Shared>, delay: Duration, fire: FireOnce) -> TimerHandle {
    add_user(
        sched,
        far_deadline(delay),
        UserAction::Once(sched.clone(), fire),
    )
}

/// Adds a user timer that holds its scheduler alive; on a scheduler that is
/// shutting down the timer is made already cancelled.
fn add_user(sched: &Arc<Shared>, deadline: Instant, action: UserAction) -> TimerHandle {
    let sched = sched.clone();
    let timer = match sched.hold() {
        Ok(()) => UserTimer::arm(&sched, deadline, action),
        Err(_) => None,
    };
    TimerHandle { timer, sched }
}

/// Runs `f` as a task every `period` (first run after one period), until the
/// handle is cancelled. Each run is a separate task; runs may overlap if one
/// takes longer than the period, so a slow run never delays the next. A run
/// the timer itself could not start on time (a scheduler busy for a period
/// or more) is skipped and the schedule kept, as
/// [`MissedTicks::Skip`](crate::chan::MissedTicks::Skip) does for a
/// [`tick_with`](crate::chan::tick_with) channel.
///
/// # Panics
/// If `period` is zero, or the default scheduler cannot be started.
#[track_caller]
pub fn every<F>(period: Duration, f: F) -> TimerHandle
where
    F: Fn() + Send + Sync + 'static,
{
    let sched = current_or_default_shared().or_panic("gofer");
    add_every(&sched, period, spawn_every(f))
}

/// Like [`every`], on the given scheduler.
///
/// # Panics
/// If `period` is zero.
#[track_caller]
pub fn every_on<F>(sched: &Scheduler, period: Duration, f: F) -> TimerHandle
where
    F: Fn() + Send + Sync + 'static,
{
    add_every(sched.shared(), period, spawn_every(f))
}

/// The firing of `every`: spawns a run of `f`.
fn spawn_every<F>(f: F) -> FireEvery
where
    F: Fn() + Send + Sync + 'static,
{
    let f = Arc::new(f);
    Arc::new(move |s: &Arc<Shared>| {
        let f = f.clone();
        Run::from(spawn_closure(s, move || f()))
    })
}

/// Runs `f(target)` as a task every `period` (first run after one period)
/// while `target` is alive: the timer holds only a [`Weak`] of it, and at
/// the first tick that finds the last [`Arc`] gone it stops by itself (as
/// if cancelled, releasing its hold on the scheduler). Each run's task gets
/// the upgraded `Arc`.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// struct Conn;
/// impl Conn {
///     fn ping(&self) {}
/// }
/// let conn = Arc::new(Conn);
/// let t = gofer::timer::every_if_alive(&conn, Duration::from_secs(5), |conn| conn.ping());
/// assert!(t.is_pending());
/// # t.cancel();
/// ```
///
/// Like [`every`] otherwise: runs may overlap if one takes longer than the
/// period, and [`TimerHandle::cancel`] stops it earlier.
///
/// # Panics
/// If `period` is zero, or the default scheduler cannot be started.
#[track_caller]
pub fn every_if_alive<T, F>(target: &Arc<T>, period: Duration, f: F) -> TimerHandle
where
    T: Send + Sync + 'static,
    F: Fn(Arc<T>) + Send + Sync + 'static,
{
    let sched = current_or_default_shared().or_panic("gofer");
    add_every(&sched, period, spawn_every_if_alive(target, f))
}

/// Like [`every_if_alive`], on the given scheduler.
///
/// # Panics
/// If `period` is zero.
#[track_caller]
pub fn every_if_alive_on<T, F>(
    sched: &Scheduler,
    target: &Arc<T>,
    period: Duration,
    f: F,
) -> TimerHandle
where
    T: Send + Sync + 'static,
    F: Fn(Arc<T>) + Send + Sync + 'static,
{
    add_every(sched.shared(), period, spawn_every_if_alive(target, f))
}

/// The firing of `every_if_alive`: spawns a run of `f(target)` if the
/// target lives; reports it gone otherwise, which ends the timer.
fn spawn_every_if_alive<T, F>(target: &Arc<T>, f: F) -> FireEvery
where
    T: Send + Sync + 'static,
    F: Fn(Arc<T>) + Send + Sync + 'static,
{
    let weak: Weak<T> = Arc::downgrade(target);
    let f = Arc::new(f);
    Arc::new(move |s: &Arc<Shared>| match weak.upgrade() {
        Some(target) => {
            let f = f.clone();
            Run::from(spawn_closure(s, move || f(target)))
        }
        None => Run::TargetGone,
    })
}

#[track_caller]
fn add_every(sched: &Arc<Shared>, period: Duration, fire: FireEvery) -> TimerHandle {
    assert!(
        !period.is_zero(),
        "gofer::timer::every: the period must be non-zero"
    );
    add_user(
        sched,
        far_deadline(period),
        UserAction::Every(sched.clone(), period, fire),
    )
}

/// `now + d`, or a century from now when that cannot be represented.
fn far_deadline(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}
