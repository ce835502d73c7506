//! A Processer with nothing to run: watching its peers, stealing, spinning,
//! and going to sleep without losing a wake-up.
//!
//! A searcher makes [`SPIN_ROUNDS`] steal rounds, each visiting up to
//! [`STEAL_VICTIMS`] other Processers from a random one on (half of one's
//! runnable queue, or a batch of its new queue), unless enough Processers
//! search already (Go's rule: fewer than half of the busy ones, see
//! `processer/idle.rs`). Then it sleeps: in the reactor's poll when it looks after
//! the reactor, otherwise parked until a push or a timer wakes it.
//!
//! # Sleeping without lost wake-ups
//!
//! ```text
//!  Processer P going to sleep               a thread pushing work for P
//!  1. sleeping = true (SeqCst), list P on   1. push the task (SeqCst fence)
//!     the sleepers stack, idle += 1         2. if P.sleeping: CAS true -> false,
//!  2. fence; re-check its own remote           then unpark P's thread
//!     queues; if work: cancel the sleep
//!  3. thread::park while sleeping == true
//! ```
//!
//! With both sides SeqCst, either the pusher sees `sleeping` or P's re-check
//! sees the task. `std::thread::park` keeps its own token, so an `unpark` that
//! lands between 2 and 3 is not lost either.
//!
//! Work queued on a *running* Processer is its own to run; waking another
//! only adds a thief. A pusher wakes one when some Processer sleeps and none
//! searches (`Shared::wake_idle_for_local_work`), and otherwise leaves the
//! task to the searchers. So a searcher that gives up must not miss it:
//!
//! ```text
//!  searcher S giving up                     a thread queuing work on a
//!                                           running Processer R
//!  1. searching -= 1 (SeqCst)               1. push the task (a SeqCst fence
//!  2. sleep: steps 1-2 above, its              when R is not this thread)
//!     re-check covering every other         2. if idle > 0 and searching == 0
//!     Processer's queues as well               (SeqCst loads): wake a sleeper
//! ```
//!
//! All of it SeqCst: either the pusher reads `searching` after S's
//! decrement and `idle` after S's increment, and wakes a sleeper, or S's
//! re-check comes after the push and sees the task (Go's rule for the last
//! spinning M). A push to the pusher's own queue has no fence
//! (see `Shared::wake_idle_for_local_work`): the task can then wait for its
//! own Processer, or for the Dispatcher's balance, instead of a thief.

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_deque::Steal;

use crate::runtime::dispatcher;
use crate::runtime::io::{Poller, BUSY_POLL};
use crate::runtime::processer::shared::{bump, Kind};
use crate::runtime::task::Runnable;
use crate::runtime::time::timer::TimerQueue;

use crate::runtime::processer::ProcLocal;

/// How long a Processer stays idle before its cell cache gives back all but
/// `cells::IDLE_KEEP` (see `runtime/task/cells.rs`).
pub(in crate::runtime) const CELLS_IDLE: Duration = Duration::from_secs(1);
/// Steal rounds a searching Processer makes before it sleeps.
pub(in crate::runtime) const SPIN_ROUNDS: u32 = 32;
/// A searcher with a timer due within this stops yielding the CPU and
/// sleeps until the timer (see `spin_for_work`): several time slices of a
/// loaded machine's scheduler.
pub(in crate::runtime) const YIELD_HORIZON: Duration = Duration::from_millis(10);
/// Other Processers a steal round visits at most (from a random one on):
/// with up to 9 Processers, every other one; beyond, a round's cost stays
/// bounded however many Processers there are.
pub(in crate::runtime) const STEAL_VICTIMS: usize = 8;

/// What a Processer saw of its peers at its last looks (`watch_peers`).
#[derive(Default)]
pub(in crate::runtime) struct Watch {
    /// The table generation `seen` is about.
    gen: u64,
    /// Per table position: the switch count seen with a task switched in,
    /// and when it was first seen.
    seen: Vec<Option<(u64, Instant)>>,
    /// The position to look at next.
    next: usize,
}

impl ProcLocal {
    /// A busy Processer's look at one peer (in turns), at its periodic look
    /// outward: if the peer has had a task switched in and the same switch
    /// count for the watch time, tell the Dispatcher, which then samples
    /// at once and at its base interval. Busy Processers thus watch each
    /// other, and the Dispatcher may sample less often while they do (see
    /// "Peers watch each other" in `dispatcher/cycle.rs`). Two loads of the
    /// peer's line per look; the time is the coarse clock, which the
    /// periodic look has just read.
    pub(in crate::runtime) fn watch_peers(&self) {
        if self.sched.config.max_threads <= 1 {
            return; // no Dispatcher
        }
        let table = self.table();
        let (gen, procs) = (table.0, &table.1);
        let n = procs.len();
        if n < 2 {
            return;
        }
        let mut w = self.watch.borrow_mut();
        if w.gen != gen || w.seen.len() != n {
            w.gen = gen;
            w.seen.clear();
            w.seen.resize(n, None);
        }
        let mut i = w.next % n;
        if Arc::ptr_eq(&procs[i], &self.p) {
            i = (i + 1) % n;
        }
        w.next = i + 1;
        let q = &procs[i];
        let switches = q.switches.load(Ordering::Relaxed);
        if !q.running.load(Ordering::Relaxed) {
            w.seen[i] = None;
            return;
        }
        let now = self.clock.get();
        match w.seen[i] {
            Some((seen, since)) if seen == switches => {
                let after = crate::runtime::dispatcher::watch_after(&self.sched.config);
                // While the Dispatcher naps long, a peer with nothing
                // movable queued is not worth waking it for: queuing some
                // there ends the nap (`dispatcher::work_queued`).
                if now.saturating_duration_since(since) >= after
                    && q.reported.load(Ordering::Relaxed) != switches
                    && !q.blocked.load(Ordering::Relaxed)
                    && (!dispatcher::naps_long(&self.sched) || q.has_movable())
                {
                    crate::runtime::dispatcher::alert(&self.sched, q, switches);
                }
            }
            _ => w.seen[i] = Some((switches, now)),
        }
    }

    /// Steals from another Processer of the scheduler: half of its runnable
    /// queue, or a batch of its new queue. Visits at most `victims` other
    /// Processers, from a random one on.
    pub(in crate::runtime) fn steal(&self, victims: usize) -> Option<Runnable> {
        if self.p.kind == Kind::Caller {
            return None; // it runs its root task only (see `may_run`)
        }
        let table = self.table();
        let others = &table.1;
        let n = others.len();
        if n <= 1 {
            return None;
        }
        let start = self.random_below(n);
        let mut visited = 0;
        for k in 0..n {
            let v = &others[(start + k) % n];
            if v.index == self.p.index {
                continue;
            }
            if visited == victims {
                break;
            }
            visited += 1;
            // `is_empty` first: a steal from a runnable queue pins
            // crossbeam's epoch even when the queue is empty, and every
            // 128th pin walks the list of every thread that uses it (every
            // Processer). The check makes the same loads the steal would
            // make first (a SeqCst fence between them), so the sleep
            // re-check sees what a steal would.
            while !v.stealer.is_empty() {
                let before = self.runnable.len();
                match v.stealer.steal_batch_and_pop(&self.runnable) {
                    Steal::Success(t) => return Some(self.count_steal(before, t)),
                    Steal::Retry => continue,
                    Steal::Empty => break,
                }
            }
            while !v.new.is_empty() {
                let before = self.runnable.len();
                match v.new.steal_batch_and_pop(&self.runnable) {
                    Steal::Success(t) => return Some(self.count_steal(before, t)),
                    Steal::Retry => continue,
                    Steal::Empty => break,
                }
            }
        }
        None
    }

    /// Counts a steal that took `t` and filled the runnable queue from
    /// `before` tasks on.
    fn count_steal(&self, before: usize, t: Runnable) -> Runnable {
        let m = &self.p.metrics;
        bump(&m.steals, 1);
        let taken = self.runnable.len().saturating_sub(before) + 1;
        bump(&m.stolen, taken as u64);
        t
    }

    /// A pseudo-random number in `0..n` (`n > 0`).
    pub(in crate::runtime) fn random_below(&self, n: usize) -> usize {
        // xorshift64, then multiply-shift onto 0..n (no division).
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        ((x as u128 * n as u128) >> 64) as usize
    }

    /// No local work: search other Processers' queues (if the searchers
    /// are few enough, or a waker handed us a search), then sleep until
    /// woken.
    ///
    /// While it searches the Processer counts as *searching*: a thread that
    /// queues local work does not wake a sleeping Processer while another is
    /// already looking for work (Go's spinning Ms). Only up to half of the
    /// busy Processers search at once (`Idle::try_begin_search`); the others
    /// sleep straight away.
    pub(in crate::runtime) fn find_work(&self) -> Option<Runnable> {
        if self.p.kind == Kind::Caller {
            // Nothing to search for: its root task comes back through its
            // pinned queue, which waking it re-checks.
            return self.sleep(false);
        }
        let mut searching = self.take_search_handoff() || self.sched.idle.try_begin_search();
        loop {
            if searching {
                let found = self.spin_for_work();
                let was_last = self.sched.idle.end_search();
                if found.is_some() {
                    self.found_while_searching(was_last);
                    return found;
                }
            }
            // A searcher that found nothing re-checks every queue after
            // ending its search (see the module docs).
            let found = self.sleep(searching);
            let handed = self.take_search_handoff();
            if found.is_some() {
                if handed {
                    // Woken to search, and we have work: end that search.
                    let was_last = self.sched.idle.end_search();
                    self.found_while_searching(was_last);
                }
                return found;
            }
            if !handed {
                return None;
            }
            // Woken to search: do it now (pushers skip waking anyone while
            // we count as a searcher).
            searching = true;
        }
    }

    /// A searcher found work. If it was the last one, there may be more
    /// where that came from, and pushers skipped waking anyone while it
    /// searched: wake one sleeper to keep looking (Go's wakep chain).
    pub(in crate::runtime) fn found_while_searching(&self, was_last: bool) {
        if was_last {
            self.sched.wake_idle_for_local_work();
        }
    }

    /// Takes the search a waker handed us, if any (see `search_handoff`).
    pub(in crate::runtime) fn take_search_handoff(&self) -> bool {
        // Relaxed: a swap, so exactly one of us and the waker takes it; the
        // flag was published by the waker's CAS on `sleeping`, which we read
        // (SeqCst or Acquire) before coming here.
        self.p.search_handoff.load(Ordering::Relaxed)
            && self.p.search_handoff.swap(false, Ordering::Relaxed)
    }

    /// Steal rounds, each visiting up to [`STEAL_VICTIMS`] Processers, with
    /// our own remote queues looked at between them.
    pub(in crate::runtime) fn spin_for_work(&self) -> Option<Runnable> {
        for round in 0..SPIN_ROUNDS {
            if let Some(t) = self.steal(STEAL_VICTIMS).or_else(|| self.pull_remote()) {
                return Some(t);
            }
            // Our own timers come due while we search, and completions in
            // our own ring and readiness in our own reactor arrive, which
            // nobody else reaps or polls for us (a round that yields the
            // CPU may take a while on a loaded machine).
            if self.fire_timers() {
                if let Some(t) = self.next_local() {
                    return Some(t);
                }
            }
            if self.ring_turn() | self.poll_io_busy() {
                if let Some(t) = self.next_local() {
                    return Some(t);
                }
            }
            if round < SPIN_ROUNDS / 2 {
                std::hint::spin_loop();
            } else if self.timer_soon() {
                // Sleep until the timer, or in our reactor, instead (the
                // caller's next step): on a loaded machine a yield may hand
                // the CPU to another process for a whole time slice,
                // several milliseconds, while the timer or the readiness
                // of our own tasks' sockets waits for it. In the reactor
                // the kernel wakes us at the first event.
                break;
            } else {
                std::thread::yield_now();
            }
        }
        None
    }

    /// Whether one of our timers is due within [`YIELD_HORIZON`].
    pub(in crate::runtime) fn timer_soon(&self) -> bool {
        self.timer_queue()
            .and_then(TimerQueue::next_deadline)
            .is_some_and(|d| d.saturating_duration_since(Instant::now()) < YIELD_HORIZON)
    }

    /// Announces the sleep, re-checks, and parks until woken. The re-check
    /// covers our own remote queues, and every other Processer's queues too
    /// when `searched` (we were a searcher: see the module docs).
    pub(in crate::runtime) fn sleep(&self, searched: bool) -> Option<Runnable> {
        match self.idle_since.get() {
            None => {
                self.idle_since.set(Some(Instant::now()));
                // Going idle: the cell cache gives back half of what a
                // burst left in it (`task/cells.rs`)...
                crate::runtime::task::cells::idle(false);
            }
            // ... and the rest once idle for CELLS_IDLE (`sleep_timeout`
            // wakes the Processer for it).
            Some(since) if since.elapsed() >= CELLS_IDLE => crate::runtime::task::cells::idle(true),
            Some(_) => {}
        }
        self.p.sleeping.store(true, Ordering::SeqCst);
        if self.p.kind != Kind::Caller {
            // A block_on caller is never handed a search (it would not do
            // it): it stays off the sleepers stack.
            self.sched.idle.list(&self.p);
        }
        self.sched.idle.idle_inc();
        // Order the announcement before the re-check's (non-SeqCst) queue
        // loads; pairs with the pushers' fence (see module docs).
        fence(Ordering::SeqCst);
        let recheck = self
            .pull_remote()
            .or_else(|| searched.then(|| self.steal(usize::MAX)).flatten());
        if recheck.is_none() && self.ring_needs_turn() {
            // Completions (or entries) arrived before the announcement
            // could be seen by the ring's waker (`runtime/io/uring.rs`):
            // take the turn instead of sleeping.
            if self.cancel_sleep() {
                self.sched.idle.idle_dec();
            }
            crate::runtime::dispatcher::processer_awake(&self.sched);
            return None;
        }
        if let Some(t) = recheck {
            if self.cancel_sleep() {
                self.sched.idle.idle_dec();
            }
            // Awake again without having parked: the Dispatcher may have
            // gone into deep sleep seeing us asleep.
            crate::runtime::dispatcher::processer_awake(&self.sched);
            return Some(t);
        }
        if self.sched.should_exit(self) {
            if self.cancel_sleep() {
                self.sched.idle.idle_dec();
            }
            return None;
        }
        let mut timeout = self.sleep_timeout();
        // Only core Processers wait in a reactor, each in its own: a
        // block_on caller or an extra Processer may leave for good, and
        // nobody would wait there after it.
        if let Some(r) = self.own_reactor() {
            if let Some(mut poller) = r.try_poll() {
                return self.sleep_in_poll(&mut poller, timeout);
            }
            if !r.has_blocking_poller() {
                // The role is held for a quick look (a busy Processer, the
                // Dispatcher), which is over in a moment and waits for
                // nothing after it: sleep briefly and come back for the role
                // rather than leave readiness with nobody waiting for it.
                timeout = Some(timeout.map_or(BUSY_POLL, |t| t.min(BUSY_POLL)));
            }
        }
        while self.p.sleeping.load(Ordering::SeqCst) {
            match timeout {
                Some(d) => {
                    self.p.sleeper.park(Some(d));
                    // Timed out (or woken): either way re-evaluate.
                    if self.cancel_sleep() {
                        self.sched.idle.idle_dec();
                    }
                    crate::runtime::dispatcher::processer_awake(&self.sched);
                    return None;
                }
                None => self.p.sleeper.park(None),
            }
        }
        // Woken: the waker already decremented the idle count.
        crate::runtime::dispatcher::processer_awake(&self.sched);
        None
    }

    /// How long a sleeping Processer may sleep before it re-evaluates: until
    /// its earliest timer, and for an extra Processer, until it retires.
    /// Read after `sleeping` is announced (see `runtime/time/timer.rs`).
    pub(in crate::runtime) fn sleep_timeout(&self) -> Option<Duration> {
        let retire = self.sched.retire_timeout(self);
        // A cell cache above its idle size is trimmed after CELLS_IDLE, and
        // so is the cells' depot. The depot is timed only until this
        // Processer has been idle that long (its trim is done then): other
        // threads may refill it at any time, and a wake for each refill
        // would be a spin. What they leave there waits for the next
        // Processer to rest a second, or to end.
        let idle_for = self.idle_since.get().map(|s| s.elapsed());
        let before_trim = idle_for.is_none_or(|e| e < CELLS_IDLE);
        let trim = (crate::runtime::task::cells::holds_more_than_idle()
            || (before_trim && crate::runtime::task::cells::depot_holds()))
        .then(|| idle_for.map_or(CELLS_IDLE, |e| CELLS_IDLE.saturating_sub(e)));
        let retire = match (retire, trim) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timer = self
            .timer_queue()
            .and_then(TimerQueue::next_deadline)
            .map(|d| d.saturating_duration_since(Instant::now()));
        match (retire, timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The rest of [`sleep`](Self::sleep) for the holder of the poller role:
    /// wait in the reactor instead of the futex (the protocol with wakers is
    /// in `runtime/io/reactor.rs`), then queue what the events woke.
    pub(in crate::runtime) fn sleep_in_poll(
        &self,
        poller: &mut Poller<'_>,
        timeout: Option<Duration>,
    ) -> Option<Runnable> {
        // SeqCst: the poller's half of the protocol with wakers.
        self.p.in_poll.store(true, Ordering::SeqCst);
        let timeout = if self.p.sleeping.load(Ordering::SeqCst) {
            timeout
        } else {
            Some(Duration::ZERO) // already woken: look, but do not wait
        };
        let mut woken = self.woken.borrow_mut();
        poller.poll(timeout, &mut woken);
        bump(&self.p.metrics.reactor_polls, 1);
        self.p.in_poll.store(false, Ordering::Relaxed);
        if self.cancel_sleep() {
            self.sched.idle.idle_dec();
        }
        crate::runtime::dispatcher::processer_awake(&self.sched);
        self.accept_woken(&mut woken);
        // Run what the poll woke here: the caller may go on searching (a
        // search handed to us meanwhile), and its search and the sleep after
        // it look everywhere but in our own runnable queue.
        self.next_local()
    }

    /// Clears our own `sleeping` flag; true if we did (no waker claimed us).
    pub(in crate::runtime) fn cancel_sleep(&self) -> bool {
        // Acquire on failure: a waker cleared the flag; pairs with its
        // SeqCst CAS, so that a search it handed us is seen.
        self.p
            .sleeping
            .compare_exchange(true, false, Ordering::SeqCst, Ordering::Acquire)
            .is_ok()
    }
}
