//! A Processer's turn at the timers and the reactor: firing the timers
//! due, sharing the tasks a large firing woke with sleeping Processers,
//! polling the IO manager between tasks or while it would sleep, and the
//! turns at its io_uring (`runtime/io/uring.rs`).
//!
//! Invariant: a woken task that is pinned or bound here runs here; only
//! unpinned tasks are shared out, in shares worth a sleeper's wake-up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::runtime::io::{Reactor, Ring, RingWaker, BUSY_POLL};
use crate::runtime::processer::shared::{bump, Kind};
use crate::runtime::task::{Runnable, TaskRef};
use crate::runtime::time::timer::{Action, TimerQueue};

use crate::runtime::processer::ProcLocal;

/// The fewest unpinned tasks of one firing of timers worth a sleeping
/// Processer's wake-up: a batch is shared with sleepers only in shares of
/// at least this many (see `accept_fired`). A sleeper takes some tens of
/// microseconds to wake on a virtual machine; a woken task, about a
/// microsecond to run and finish.
pub(in crate::runtime) const FIRE_SHARE: usize = 32;

/// Scratch space of one firing of timers (`fire_timers`), kept to reuse
/// its allocations.
#[derive(Default)]
pub(in crate::runtime) struct FireBufs {
    /// The entries taken off the queue.
    due: Vec<Action>,
    /// The tasks they woke, in deadline order.
    woken: Vec<Runnable>,
    /// The unpinned ones among them, to share out.
    free: Vec<Runnable>,
}

impl ProcLocal {
    /// This Processer's timer queue (core Processers own one).
    pub(in crate::runtime) fn timer_queue(&self) -> Option<&TimerQueue> {
        if self.p.kind == Kind::Core {
            self.sched.timers.queue(self.p.index)
        } else {
            None
        }
    }

    /// Fires this Processer's due timers, and queues the tasks they woke as
    /// one batch ([`accept_fired`](Self::accept_fired)). Returns whether any
    /// fired. Reads the clock only when a timer is pending.
    pub(in crate::runtime) fn fire_timers(&self) -> bool {
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
    /// `runtime/time/timer.rs`.
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
    pub(in crate::runtime) fn accept_fired(&self, bufs: &mut FireBufs) {
        if bufs.woken.is_empty() {
            return;
        }
        self.take_pinned_remote();
        let chaos = self.sched.config.chaos;
        {
            let mut pinned = self.pinned_local.borrow_mut();
            let before = pinned.len();
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
            self.mirror_pinned(pinned.len());
            self.woken_into_pinned(before, pinned.len());
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
    pub(in crate::runtime) fn share_fired(&self, free: &mut Vec<Runnable>) {
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

    /// This core Processer's own reactor, if the reactors were made and it
    /// has sockets (or a ring) to poll for; `None` on any other Processer.
    pub(in crate::runtime) fn own_reactor(&self) -> Option<&Arc<Reactor>> {
        if self.p.kind != Kind::Core {
            return None;
        }
        self.sched.reactor_with_sources(self.p.index)
    }

    /// A busy (or searching) Processer's look at its reactor: if nobody has
    /// polled it for [`BUSY_POLL`], poll without waiting, as
    /// [`poll_io_now`](Self::poll_io_now) does. Returns whether it woke any
    /// task.
    pub(in crate::runtime) fn poll_io_busy(&self) -> bool {
        self.own_reactor()
            .is_some_and(|r| r.polled_before(BUSY_POLL))
            && self.poll_io_now()
    }

    /// Out of work: take the readiness that is already in this Processer's
    /// reactor (the role free, no waiting), before searching other
    /// Processers (Go's `findRunnable` does the same). Returns whether it
    /// woke any task.
    pub(in crate::runtime) fn poll_io_now(&self) -> bool {
        let Some(r) = self.own_reactor() else {
            return false;
        };
        let Some(mut poller) = r.try_poll() else {
            return false;
        };
        let mut woken = self.woken.borrow_mut();
        poller.poll(Some(Duration::ZERO), &mut woken);
        drop(poller);
        bump(&self.p.metrics.reactor_polls, 1);
        let any = !woken.is_empty();
        self.accept_woken(&mut woken);
        any
    }

    /// This Processer's ring, for the running task `task`, if the task may
    /// use one (`runtime/io/uring.rs`, "Who uses a ring"): the uring driver,
    /// a core Processer, and a task bound (or pinned) here. Made at the
    /// first use and registered with the reactor; `None` for good if that
    /// fails (counted in the stats' `io_driver_reason`).
    pub(crate) fn ring_for(&self, task: &TaskRef) -> Option<&Ring> {
        if self.p.kind != Kind::Core
            || self.sched.config.io_driver != crate::IoDriver::Uring
            || task.pin() != Some(self.p.index)
        {
            return None;
        }
        self.ring
            .get_or_init(|| {
                // In this Processer's own reactor, which this thread polls
                // (it is awake: no `ensure_poller`).
                let reactor = self.sched.reactors().ok()?.get(self.p.index)?;
                let ring = Ring::new(reactor, RingWaker::new(self.p.clone(), &self.sched))
                    .map_err(|e| self.sched.note_ring_failure(&e))
                    .ok()?;
                Some(ring)
            })
            .as_ref()
    }

    /// This Processer's ring, if it has made one (whoever runs).
    pub(crate) fn ring_here(&self) -> Option<&Ring> {
        self.ring.get().and_then(Option::as_ref)
    }

    /// Whether this Processer's ring has entries to submit or completions
    /// to reap.
    pub(in crate::runtime) fn ring_needs_turn(&self) -> bool {
        matches!(self.ring.get(), Some(Some(r)) if r.needs_turn())
    }

    /// A turn at this Processer's ring: submit what its tasks queued, reap
    /// the completions, and queue the tasks they end. Returns whether any.
    pub(in crate::runtime) fn ring_turn(&self) -> bool {
        let Some(Some(ring)) = self.ring.get() else {
            return false;
        };
        if !ring.needs_turn() {
            return false;
        }
        let mut woken = self.woken.borrow_mut();
        ring.turn(&mut woken);
        bump(&self.p.metrics.reactor_polls, 1);
        let any = !woken.is_empty();
        self.accept_woken(&mut woken);
        any
    }
}
