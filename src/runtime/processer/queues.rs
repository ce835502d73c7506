//! A Processer's own queues and its next-task slot: how a task is queued
//! on it ([`Push`]), which queue the loop picks from next, and how work is
//! pulled from its remote queues (the new queue, the remote pinned queue)
//! or handed to the others when it stops.
//!
//! Invariant: a task pinned here (bound at its first run, pinned by the
//! user, held for an unwind) never enters the stealable runnable queue; it
//! goes to the local pinned queue or the next-task slot. The hand-off
//! races with thieves and the Dispatcher are drawn in
//! `processer/shared.rs` (the slot) and `dispatcher/cycle.rs` (`steal_all`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_deque::Steal;

use crate::runtime::context;
use crate::runtime::dispatcher;
use crate::runtime::processer::shared::{
    bump, drain_injector, ProcesserShared, LOOK_REMOTE, LOOK_TIMERS,
};
use crate::runtime::task::Runnable;

use crate::runtime::processer::ProcLocal;

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

/// While woken tasks wait in the local pinned queue, it gets this many
/// picks to the runnable queue's one (see [`ProcLocal::pick_local`]).
pub(in crate::runtime) const WOKEN_WEIGHT: u32 = 3;

/// Picks in a row the next-task slot may win over the runnable queue.
pub(in crate::runtime) const RUNNEXT_STREAK: u8 = 3;

impl ProcLocal {
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
            let mut pinned = self.pinned_local.borrow_mut();
            pinned.push_back(t);
            self.mirror_pinned(pinned.len());
            return;
        }
        self.runnable.push(t);
        dispatcher::work_queued(&self.sched, &self.p);
        if how != Push::Quiet {
            self.sched.wake_idle_for_local_work();
        }
    }

    /// The next task to run, from this Processer's own queues.
    pub(in crate::runtime) fn next_task(&self) -> Option<Runnable> {
        if let Some(t) = self.picked.take() {
            // A direct switch's pick (it counted the tick already).
            return Some(t);
        }
        let tick = self.tick.get().wrapping_add(1);
        self.tick.set(tick);
        if self.p.look_out.load(Ordering::Relaxed) != 0 {
            // Acquire: pairs with the setter's Release (`ask_look_out`).
            let look = self.p.look_out.swap(0, Ordering::Acquire);
            if look & LOOK_TIMERS != 0 {
                self.fire_timers();
            }
            // Tasks pushed into the remote pinned queue (`processer/route.rs`,
            // `push_batch_to`) go to the back of the local pinned queue, in
            // turn with the rest (not ahead of it).
            if look & LOOK_REMOTE != 0 && !self.p.pinned.is_empty() {
                self.take_pinned_remote();
            }
        }
        if tick % NEW_QUEUE_INTERVAL == 0 {
            // The periodic look outward: due timers, readiness nobody
            // polled for a while, then the remote queues.
            self.clock.set(Instant::now());
            self.fire_timers();
            self.ring_turn();
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
    pub(in crate::runtime) fn pick_local(&self, tick: u32) -> Option<Runnable> {
        // The next-task slot first, but not more than RUNNEXT_STREAK picks
        // in a row: two tasks waking each other through it would otherwise
        // keep the queue waiting.
        if self.streak.get() < RUNNEXT_STREAK {
            if let Some(t) = self.p.take_runnext() {
                self.streak.set(self.streak.get() + 1);
                bump(&self.p.metrics.next_slot_runs, 1);
                return Some(t);
            }
        }
        self.streak.set(0);
        // Started tasks before new ones while wake-ups wait: a burst of
        // sleepers due while tasks keep arriving from outside would
        // otherwise get half the picks, fall behind the timers, and wait
        // for the arrivals to stop (their lateness grew with the burst,
        // `bench/benches/sleep.rs`). Not strict: the runnable queue keeps
        // one pick in WOKEN_WEIGHT + 1. Without wake-ups waiting (a yield
        // loop, say), the two queues take turns.
        let pinned_first = if self.woken_behind.get() > 0 {
            tick % (WOKEN_WEIGHT + 1) != 0
        } else {
            tick & 1 == 0
        };
        let local = if pinned_first {
            self.pop_pinned().or_else(|| self.runnable.pop())
        } else {
            self.runnable.pop().or_else(|| self.pop_pinned())
        };
        local.or_else(|| self.take_runnext_counted())
    }

    /// The next-task slot's task, counted as a run from it.
    #[inline(always)]
    fn take_runnext_counted(&self) -> Option<Runnable> {
        let t = self.p.take_runnext();
        if t.is_some() {
            bump(&self.p.metrics.next_slot_runs, 1);
        }
        t
    }

    /// This thread's copy of the Processer table, refreshed first if the
    /// table changed since it was taken.
    pub(in crate::runtime) fn table(
        &self,
    ) -> std::cell::Ref<'_, (u64, Arc<Vec<Arc<ProcesserShared>>>)> {
        let gen = self.sched.processers_gen();
        if self.table.borrow().0 != gen {
            *self.table.borrow_mut() = (gen, self.sched.processers_snapshot());
        }
        self.table.borrow()
    }

    /// A task from this Processer's local queues only.
    pub(in crate::runtime) fn next_local(&self) -> Option<Runnable> {
        self.take_runnext_counted()
            .or_else(|| self.runnable.pop())
            .or_else(|| self.pop_pinned())
    }

    #[inline]
    pub(in crate::runtime) fn pop_pinned(&self) -> Option<Runnable> {
        let mut pinned = self.pinned_local.borrow_mut();
        let t = pinned.pop_front();
        if t.is_some() {
            self.mirror_pinned(pinned.len());
            self.woken_behind
                .set(self.woken_behind.get().saturating_sub(1));
        }
        t
    }

    /// Publishes the local pinned queue's new length `len` for the
    /// Dispatcher's count of the tasks behind a blocked Processer
    /// (`ProcesserShared::pinned_local_len`): a plain Relaxed store, no
    /// read-modify-write, at each change of the queue.
    #[inline(always)]
    pub(in crate::runtime) fn mirror_pinned(&self, len: usize) {
        self.p.pinned_local_len.store(len, Ordering::Relaxed);
    }

    /// Moves the tasks other threads pinned here (wake-ups of tasks bound
    /// here, pushed to our remote pinned queue) to the local one.
    pub(in crate::runtime) fn take_pinned_remote(&self) {
        if self.p.pinned.is_empty() {
            return;
        }
        let mut pinned = self.pinned_local.borrow_mut();
        let before = pinned.len();
        loop {
            match self.p.pinned.steal() {
                Steal::Success(t) => pinned.push_back(t),
                Steal::Retry => continue,
                Steal::Empty => break,
            }
        }
        self.mirror_pinned(pinned.len());
        self.woken_into_pinned(before, pinned.len());
    }

    /// Woken tasks went to the back of the local pinned queue, which held
    /// `before` tasks and now holds `len`: the pick favours that queue until
    /// the last of them has left it (`pick_local`).
    #[inline]
    pub(in crate::runtime) fn woken_into_pinned(&self, before: usize, len: usize) {
        if len > before {
            self.woken_behind.set(len);
        }
    }

    /// Queues the tasks a poll woke: here when this Processer may run them,
    /// else on their own Processers, in one batch (`Shared::push_woken`);
    /// then one sleeper is woken to steal.
    pub(in crate::runtime) fn accept_woken(&self, woken: &mut Vec<Runnable>) {
        if woken.is_empty() {
            return;
        }
        let mut away = self.woken_away.borrow_mut();
        let before = self.pinned_local.borrow().len();
        for r in woken.drain(..) {
            if !Arc::ptr_eq(&self.sched, &r.header().shared) {
                context::schedule(r); // another scheduler's
            } else if self.p.may_run(r.header()) {
                self.push_local(r, Push::Quiet);
            } else {
                away.push(r);
            }
        }
        self.woken_into_pinned(before, self.pinned_local.borrow().len());
        self.sched.push_woken(&mut away);
        drop(away);
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
    /// 6,000 picks (`tests/scheduler/fairness.rs`).
    pub(in crate::runtime) fn pull_remote(&self) -> Option<Runnable> {
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

    /// Whether tasks must come back to this Processer (bound here, or held
    /// for an unwind): an extra Processer does not retire while they do.
    pub(crate) fn holds_tasks(&self) -> bool {
        self.unwind_pinned.get() != 0 || self.bound.get() != 0
    }

    /// Moves every queued task to other Processers (retirement).
    pub(in crate::runtime) fn drain_to_others(&self) {
        let mut moved: Vec<Runnable> = self.p.take_runnext().into_iter().collect();
        while let Some(t) = self.runnable.pop() {
            moved.push(t);
        }
        while let Some(t) = self.pinned_local.borrow_mut().pop_front() {
            moved.push(t);
        }
        self.mirror_pinned(0);
        self.woken_behind.set(0);
        drain_injector(&self.p.new, &mut moved);
        drain_injector(&self.p.pinned, &mut moved);
        for t in moved {
            self.sched.push_remote(t);
        }
    }
}
