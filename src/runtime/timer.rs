//! The timer service of one scheduler: one thread, started on first use,
//! and an indexed heap of deadlines ([`TimerHeap`]) under a mutex, with a
//! condition variable the thread waits on until the earliest deadline (or
//! until an earlier one is added). No thread per timer, and no polling while
//! nothing is due.
//!
//! An entry either wakes a parked task ([`Action::Wake`]: `sleep`,
//! `park_timeout`, the timed waits of the sync primitives and channels) or
//! calls back a user timer ([`Action::Call`]: `timer::after`/`every`, whose
//! state machine lives in `time/timer.rs`). A timed wait removes its entry by
//! key when it wakes, whatever woke it, so a wait that ends early leaves
//! nothing behind.
//!
//! # User timers and shutdown
//!
//! A pending user timer holds its scheduler alive (one `alive` unit), and
//! shutdown must cancel every one of them, whatever its state: a recurring
//! timer taken off the heap to fire would be missed by a scan of the heap
//! and re-armed after it. So user timers are kept in a registry, and
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::context;
use super::task::{self, TaskHeader};
use super::timer_heap::{TimerHeap, TimerKey};

/// Due entries taken out of the heap per lock hold.
const FIRE_BATCH: usize = 256;

/// A user timer, seen from the service.
pub(crate) trait TimerCallback: Send + Sync {
    /// Its entry came due and was taken off the heap: run it (and re-arm it,
    /// for a recurring timer). Called on the timer thread.
    fn fire(self: Arc<Self>, timers: &Arc<Timers>);
    /// Shutdown: cancel it, whatever its state. Returns whether it was
    /// pending.
    fn cancel(&self, timers: &Timers) -> bool;
}

/// What a heap entry does when it comes due.
pub(crate) enum Action {
    /// Wake a parked task.
    Wake(Arc<TaskHeader>),
    /// Run a user timer.
    Call(Arc<dyn TimerCallback>),
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
    timers: HashMap<u64, Arc<dyn TimerCallback>>,
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
                    crate::coroutine::overflow::fatal("cannot start the timer thread");
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

    /// A fresh id for a user timer's registry entry.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Arms user timer `id` at `deadline` and registers it, unless shutdown
    /// closed the registry (then returns false and adds nothing).
    /// `armed` receives the entry's key before the registry lock is
    /// released, so that a shutdown cancelling the timer finds it.
    pub(crate) fn arm(
        self: &Arc<Self>,
        id: u64,
        deadline: Instant,
        timer: Arc<dyn TimerCallback>,
        armed: impl FnOnce(TimerKey),
    ) -> bool {
        let mut reg = self.users.lock();
        if reg.closed {
            return false;
        }
        // Lock order: the registry, then the heap.
        armed(self.add(deadline, Action::Call(timer.clone())));
        reg.timers.insert(id, timer);
        true
    }

    /// Forgets user timer `id` (it will not run again).
    pub(crate) fn forget(&self, id: u64) {
        let gone = self.users.lock().timers.remove(&id);
        drop(gone);
    }

    /// Cancels every user timer, whatever its state, and refuses new ones
    /// (shutdown). Timed waits are left alone: they belong to tasks shutdown
    /// waits for.
    pub(crate) fn cancel_user_timers(&self) {
        let all: Vec<Arc<dyn TimerCallback>> = {
            let mut reg = self.users.lock();
            reg.closed = true;
            reg.timers.drain().map(|(_, t)| t).collect()
        };
        for t in all {
            t.cancel(self);
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
        let users = std::mem::take(&mut self.users.lock().timers);
        drop(users);
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
                        Action::Wake(h) => {
                            if let Some(r) = task::unpark(&h) {
                                context::schedule(r);
                            }
                        }
                        Action::Call(t) => t.fire(&self),
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
}
