//! Steps 3 to 5 of the Dispatcher's cycle: moving the queued tasks off
//! blocked Processers, starting an extra thread when every Processer is
//! blocked, balancing queued work onto sleepers, and covering the timers
//! and the reactor of a Processer stuck in one long task.
//!
//! Invariant: a rescue moves only tasks that may move (never the running
//! one, never a pinned or bound one: those live in separate queues), and
//! the hand-off of a Processer's next-task slot races with its owner as
//! drawn in `processer/shared.rs`.
//!
//! # Moving a task again
//!
//! A rescue moves a task so that it runs sooner; it must not make the task
//! churn. When every Processer keeps blocking (each task takes a pooled
//! connection that blocks the thread, say), the tasks moved off one land
//! behind another that blocks in turn, and were moved again at each of its
//! blocks: many moves per task, none of them bringing its run nearer. So
//! a task moved by a rescue (`TaskHeader::moved_at`, cleared when it runs)
//! stays where it was moved for `block_timeout` after that move, however
//! often that Processer blocks meanwhile; only after that may a rescue move
//! it again (counted in `Stats::tasks_moved_again`). Each task is then
//! moved at most once per run, plus once per `block_timeout` that it waits
//! behind Processers held that long: the hog rule's bound on a hold, so a
//! task left behind a Processer that stays blocked still moves on. A
//! blocked Processer whose queues hold only such tasks, as many as at the
//! last rescue, is not emptied again until the first may go ([`Held`]).
//! The moved tasks' targets are not filtered further: a Processer that is
//! healthy at the sample is the best guess available, and the hold bounds
//! the cost of a wrong one.
//!
//! Every duration sum and product here saturates: the builder bounds the
//! settings (`dispatch_interval` at most 1 s), and the Dispatcher does not
//! rely on that to stay alive.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_deque::Steal;

use crate::runtime::context;
use crate::runtime::dispatcher::detect::Held;
use crate::runtime::dispatcher::{duration_nanos, Dispatcher};
use crate::runtime::io::reactor::Reactor;
use crate::runtime::io::BUSY_POLL;
use crate::runtime::processer::shared::{Kind, ProcesserShared};
use crate::runtime::shared::Shared;
use crate::runtime::task::{self, Runnable};
use crate::runtime::time::timer;

/// How long a reactor may go unpolled before the Dispatcher polls it
/// anyway (`cover_timers_and_io`), its owner not blocked or no waiter
/// there that could run elsewhere: a net, far above the owner's own
/// [`BUSY_POLL`] and above the time a loaded machine keeps a thread off
/// its core.
const OWNER_POLLS_WITHIN: Duration = Duration::from_millis(100);

/// How long the reactor `r` of core Processer `p` may go unpolled before
/// the Dispatcher polls it (`cover_timers_and_io`): `short` while `p` is
/// marked blocked and tasks that could run elsewhere wait on its sockets;
/// else [`OWNER_POLLS_WITHIN`] (at least `short`), since the owner polls
/// its own reactor and its own tasks wait for it anyway. The nap rule of
/// `cycle.rs` asks the same, so that the Dispatcher keeps short periods
/// only while its poll is due soon.
pub(in crate::runtime) fn cover_after(
    p: &ProcesserShared,
    r: &Reactor,
    short: Duration,
) -> Duration {
    // Relaxed: samples, as every read of `blocked` here.
    if p.blocked.load(Ordering::Relaxed) && r.has_foreign_waiters() {
        short
    } else {
        OWNER_POLLS_WITHIN.max(short)
    }
}

/// Processers the balance step looks at per cycle at most, in turns: all of
/// them up to this many, a bounded slice of a larger table.
pub(in crate::runtime) const BALANCE_SLICE: usize = 64;

/// Hands `tasks` out round-robin to `active`, least loaded first, and wakes
/// the ones given tasks (not every active Processer: with many Processers
/// that would be a wake-up storm).
pub(in crate::runtime) fn hand_out(
    s: &Shared,
    active: &mut [Arc<ProcesserShared>],
    tasks: Vec<Runnable>,
) {
    if tasks.is_empty() {
        return;
    }
    // One length read per Processer (a few cache lines each), not one per
    // comparison.
    active.sort_by_cached_key(|p| p.queued());
    let receivers = tasks.len().min(active.len());
    for (i, t) in tasks.into_iter().enumerate() {
        s.push_to(&active[i % active.len()], t);
    }
    for p in &active[..receivers] {
        s.wake_proc(p);
    }
}

/// Queues the tasks the Dispatcher's firing of `owner`'s overdue timers
/// woke ("Firing a batch" in `runtime/time/timer.rs`):
///
/// - tasks bound to `owner` (most sleepers: a started task stays on its
///   thread) go to its pinned queue in one batch, one fence for them all,
///   and `owner` is woken if it sleeps. It files them ahead of its next
///   firing's, so wake-ups keep their deadline order;
/// - unpinned tasks are handed out like rescued ones, to the least loaded
///   active Processers other than `owner` (late, so held up), woken;
/// - tasks pinned elsewhere go through the routing.
pub(in crate::runtime) fn deliver_fired(
    s: &Shared,
    procs: &[Arc<ProcesserShared>],
    owner: &ProcesserShared,
    fired: &mut Vec<Runnable>,
) {
    if fired.is_empty() {
        return;
    }
    let (mut bound, mut free) = (Vec::new(), Vec::new());
    for t in fired.drain(..) {
        match t.header().pin() {
            Some(pin) if pin == owner.index => bound.push(t),
            Some(_) => s.push_remote(t),
            None => free.push(t),
        }
    }
    if !bound.is_empty() && s.push_batch_to(owner, bound) {
        s.wake_proc(owner);
    }
    if free.is_empty() {
        return;
    }
    let mut active: Vec<_> = procs
        .iter()
        .filter(|p| is_active(p) && p.index != owner.index)
        .cloned()
        .collect();
    if active.is_empty() {
        for t in free {
            s.push_remote(t);
        }
    } else {
        hand_out(s, &mut active, free);
    }
}

/// Tasks in `p`'s new and runnable queues, and a task in its next-task slot
/// that is not pinned: what a rescue may move (besides fresh tasks placed
/// in its pinned queue). A pinned task in the slot (a bound task the
/// blocked task woke on its own thread) stays where it is, so it is no
/// reason to start a thread.
pub(in crate::runtime) fn queued_movable(p: &ProcesserShared) -> usize {
    let next = p.runnext.is_occupied() && p.runnext_movable.load(Ordering::Relaxed);
    p.new.len() + p.stealer.len() + usize::from(next)
}

/// Processers that can take rescued work: not blocked, not leaving, and run
/// by a scheduler thread (not a `block_on` caller, which leaves when its
/// root task ends).
pub(in crate::runtime) fn active_targets(
    procs: &[Arc<ProcesserShared>],
) -> Vec<Arc<ProcesserShared>> {
    procs.iter().filter(|p| is_active(p)).cloned().collect()
}

pub(in crate::runtime) fn is_active(p: &ProcesserShared) -> bool {
    p.kind != Kind::Caller
        && !p.blocked.load(Ordering::Relaxed)
        && !p.retired.load(Ordering::Relaxed)
}

/// Takes every task from `p`'s next-task slot, new and runnable queues,
/// and the fresh tasks placed in its remote pinned queue; returns the rest
/// of that queue, which the caller pushes back (the local pinned queue is
/// the owner's alone). A pinned task found in the slot (one bound to `p`,
/// say) goes to `p`'s own pinned queue: it waits for `p`.
///
/// Not inlined: a steal pins crossbeam's epoch through a thread-local, and
/// the TLS check (`scripts/check_tls_switch.py`) wants no thread-local
/// access in a function that may reach a switch, as the Dispatcher's loop
/// does through a hooked `write` (it never switches: it is no task).
#[inline(never)]
pub(in crate::runtime) fn steal_all(p: &ProcesserShared, out: &mut Vec<Runnable>) -> Vec<Runnable> {
    if let Some(t) = p.take_runnext() {
        if t.header().pin().is_some() {
            p.pinned.push(t);
        } else {
            out.push(t);
        }
    }
    loop {
        match p.new.steal() {
            Steal::Success(t) => out.push(t),
            Steal::Retry => continue,
            Steal::Empty => break,
        }
    }
    loop {
        match p.stealer.steal() {
            Steal::Success(t) => out.push(t),
            Steal::Retry => continue,
            Steal::Empty => break,
        }
    }
    // Fresh tasks another Processer placed here (`ProcLocal::place_fresh`)
    // wait in the remote pinned queue, pinned by the runtime but not bound
    // yet (they never ran): they may go, unpinned. The rest of that queue
    // (wake-ups of tasks bound here, the user's pins) is returned, in
    // order, for the caller to push back (behind whatever was pushed
    // meanwhile) and wake the owner.
    // Only while some are placed here: otherwise the queue holds only
    // tasks that must stay, and would be taken out and pushed back at
    // every cycle for as long as `p` stays blocked.
    let mut keep = Vec::new();
    if p.placed.load(Ordering::Relaxed) == 0 || p.pinned.is_empty() {
        return keep;
    }
    loop {
        match p.pinned.steal() {
            Steal::Success(t) => {
                let h = t.header();
                if h.user_pin.is_none() && h.phase.load(Ordering::Relaxed) == task::PHASE_NEW {
                    // We hold its Runnable: ours to unpin.
                    h.set_runtime_pin(None);
                    p.placed.fetch_sub(1, Ordering::Relaxed);
                    out.push(t);
                } else {
                    keep.push(t);
                }
            }
            Steal::Retry => continue,
            Steal::Empty => break,
        }
    }
    keep
}
impl Dispatcher {
    /// Steps 3-4: empties blocked Processers' queues into active ones,
    /// starting an extra Processer when none is active.
    pub(in crate::runtime) fn rescue_and_grow(&mut self, procs: &[Arc<ProcesserShared>]) {
        let s = &self.shared;
        if self.blocked.is_empty() {
            return;
        }
        // The ones `sample` found blocked (a Processer may have cleared its
        // own mark since, at its next switch), less those whose queue holds
        // only moved tasks that must stay, as at the last look (see
        // `View::held`).
        let now = Instant::now();
        let blocked: Vec<usize> = self
            .blocked
            .iter()
            .copied()
            .filter(|&i| procs[i].blocked.load(Ordering::Relaxed))
            .filter(|&i| !self.views[i].only_held(&procs[i], now))
            .collect();
        if blocked.is_empty() {
            return;
        }
        let waiting: usize = blocked.iter().map(|&i| queued_movable(&procs[i])).sum();
        // Fresh tasks placed on a blocked Processer wait in its pinned queue
        // among the wake-ups of tasks bound there (see `steal_all`): worth a
        // look when some Processer can take them, not a new thread, since
        // most of that queue may have to stay.
        let placed = blocked
            .iter()
            .any(|&i| procs[i].placed.load(Ordering::Relaxed) != 0);
        if waiting == 0 && !placed {
            return;
        }
        let mut active = active_targets(procs);
        if active.is_empty() {
            if waiting == 0 {
                return;
            }
            if s.threads.load(Ordering::SeqCst) >= s.config.max_threads
                || s.stopped.load(Ordering::Acquire)
            {
                return; // every thread is blocked and the cap is reached: wait
            }
            if s.start_processer(Kind::Extra).is_err() {
                return;
            }
            active = active_targets(&s.processers_snapshot());
            if active.is_empty() {
                return;
            }
        }
        let hold = s.config.block_timeout;
        let stamp = self.stamp(now);
        let mut tasks: Vec<Runnable> = Vec::new();
        let mut stay: Vec<Runnable> = Vec::new();
        let mut again = 0u64;
        for &i in &blocked {
            let p = &procs[i];
            let before = tasks.len();
            let mut kept = steal_all(p, &mut tasks);
            // A task moved here by an earlier rescue that has not run since
            // stays for `hold` after that move: moving it again would only
            // churn when every Processer keeps blocking (see "Moving a task
            // again" in the module docs).
            let mut first_free: Option<u64> = None;
            let taken: Vec<Runnable> = tasks.drain(before..).collect();
            for t in taken {
                let at = t.header().moved_at.load(Ordering::Relaxed);
                if at != 0 && stamp.saturating_sub(at) < duration_nanos(hold) {
                    let free_at = at.saturating_add(duration_nanos(hold));
                    first_free = Some(first_free.map_or(free_at, |f| f.min(free_at)));
                    stay.push(t);
                } else {
                    again += u64::from(at != 0);
                    tasks.push(t);
                }
            }
            // Until the first of them may go, and while nothing else
            // arrives, the next cycles need not take them out again.
            self.views[i].held = first_free.map(|f| Held {
                queued: stay.len(),
                until: self.epoch + Duration::from_nanos(f.saturating_sub(1)),
            });
            // Back in order, after the pinned tasks that must stay.
            kept.append(&mut stay);
            // Pushed back as any push from another thread, then woken: the
            // owner may have unblocked meanwhile, found its pinned queue
            // empty (we held its tasks) and gone to sleep.
            if !kept.is_empty() && s.push_batch_to(p, kept) {
                s.wake_proc(p);
            }
            p.rescued
                .fetch_add((tasks.len() - before) as u64, Ordering::Relaxed);
            #[cfg(feature = "tracing")]
            crate::runtime::task::trace::rescue_event(p.index, tasks.len() - before);
        }
        for t in &tasks {
            t.header().moved_at.store(stamp, Ordering::Relaxed);
        }
        if again != 0 {
            s.dispatch.moved_again.fetch_add(again, Ordering::Relaxed);
        }
        if tasks.is_empty() {
            return;
        }
        s.dispatch
            .rescued
            .fetch_add(tasks.len() as u64, Ordering::Relaxed);
        // One length read per Processer (a few cache lines each), not one
        // per comparison.
        hand_out(s, &mut active, tasks);
    }

    /// Step 6: timers and readiness no Processer is looking after.
    ///
    /// - A busy Processer reads the clock for its timers only every 61st
    ///   pick: when its earliest timer is due, raise its `look_out` bit,
    ///   which it reads at every pick. One that is blocked, or stuck in one
    ///   long task, cannot: fire its timers overdue by more than
    ///   [`timer::OVERDUE`] (their tasks go through the routing, which
    ///   avoids blocked Processers). A sleeping Processer wakes for its own.
    /// - For each core Processer marked blocked whose reactor nobody has
    ///   polled for two intervals and where tasks that could run elsewhere
    ///   wait (bound to another Processer, or not bound), poll it without
    ///   waiting, and hand the tasks it woke out like rescued ones: bound
    ///   ones to their Processers, the rest in batches to the least loaded
    ///   active Processers. A reactor whose owner is not blocked, or where
    ///   only the owner's own tasks wait, is its owner's to poll (waiting in
    ///   it when idle, every `BUSY_POLL` when busy; its tasks wait for it
    ///   anyway): polling it here would only send them back to it through
    ///   its remote queue, a wake-up that crosses. On a loaded machine the
    ///   OS keeps a Processer off its core mid-task for longer than the
    ///   block timeout often, and that was most of the wake-ups still
    ///   crossing. Only once nobody has polled it for
    ///   [`OWNER_POLLS_WITHIN`] does the Dispatcher poll it anyway.
    pub(in crate::runtime) fn cover_timers_and_io(
        &mut self,
        procs: &[Arc<ProcesserShared>],
        interval: Duration,
    ) {
        let s = &self.shared;
        let now = Instant::now();
        let late = now.checked_sub(timer::OVERDUE);
        for p in procs {
            let Some(q) = s.timers.queue(p.index) else {
                continue;
            };
            if p.kind != Kind::Core
                || q.is_empty()
                || p.sleeping.load(Ordering::Relaxed)
                || !q.is_due(now)
            {
                continue;
            }
            if late.is_some_and(|late| q.is_due(late)) {
                s.take_fired(p.index, now, &mut self.due, &mut self.fired);
                deliver_fired(s, procs, p, &mut self.fired);
            } else {
                p.ask_look_out(crate::runtime::processer::shared::LOOK_TIMERS);
            }
        }
        let Some(reactors) = s.reactors_if_made() else {
            return;
        };
        let stale = interval.saturating_mul(2).max(BUSY_POLL);
        for p in procs.iter().filter(|p| p.kind == Kind::Core) {
            let Some(r) = reactors.get(p.index).filter(|r| r.has_sources()) else {
                continue;
            };
            if !r.polled_before(cover_after(p, r, stale)) {
                continue;
            }
            if let Some(mut poller) = r.try_poll() {
                poller.poll(Some(Duration::ZERO), &mut self.woken);
            }
        }
        if self.woken.is_empty() {
            return;
        }
        let mut ours = Vec::with_capacity(self.woken.len());
        let mut pinned = Vec::new();
        for t in self.woken.drain(..) {
            if !Arc::ptr_eq(&t.header().shared, s) {
                context::schedule(t); // another scheduler's
            } else if t.header().pin().is_none() {
                ours.push(t);
            } else {
                pinned.push(t);
            }
        }
        // Bound tasks to their Processers, a batch each.
        s.push_woken(&mut pinned);
        let mut active = active_targets(procs);
        if active.is_empty() {
            for t in ours {
                s.push_remote(t);
            }
        } else {
            hand_out(s, &mut active, ours);
        }
    }

    /// Step 5: wakes any sleeping active Processer that has queued work,
    /// and, when an active one has a backlog, one sleeper to search (which
    /// wakes the next if it finds work: `Shared::wake_idle_for_local_work`).
    ///
    /// Looks at up to [`BALANCE_SLICE`] Processers per cycle, taking turns
    /// through a larger table (each queue length read costs a few cache
    /// lines), and at none while no Processer sleeps.
    pub(in crate::runtime) fn balance(&mut self, procs: &[Arc<ProcesserShared>]) {
        let s = &self.shared;
        if s.idle.idle() == 0 || procs.is_empty() {
            return;
        }
        let n = procs.len();
        let count = n.min(BALANCE_SLICE);
        let start = self.balance_from % n;
        self.balance_from = start + count;
        let slice = (0..count).map(|k| &procs[(start + k) % n]);
        let mut backlog = false;
        for p in slice.filter(|p| is_active(p)) {
            if p.sleeping.load(Ordering::Relaxed) {
                if p.queued() > 0 {
                    s.wake_proc(p);
                }
            } else if !backlog && p.queued() >= 2 {
                backlog = true;
            }
        }
        if backlog {
            s.wake_idle_for_local_work();
        }
    }
}
