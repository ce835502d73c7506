//! Where a runnable task goes, and whom its arrival wakes: the routing of
//! pushes from other threads (home, sleeper, round-robin), the push into a
//! Processer's remote queues, and the wake-up policy (Go's `wakep`). The
//! counters and the sleepers stack it relies on are in `processer/idle.rs`.

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use crate::runtime::dispatcher;
use crate::runtime::processer::shared::{Kind, ProcesserShared};
use crate::runtime::shared::{find_processer, Shared, Table};
use crate::runtime::task::Runnable;

/// Usable Processers the round-robin step of a remote push looks at, at
/// most, for an awake one before it settles for a sleeping one.
const AWAKE_TRIES: usize = 8;

/// A pushing thread's copy of the Processer table it pushed through last,
/// and its round-robin cursor.
///
/// Every spawn from outside the Processers goes through `push_remote`, and
/// taking the table there meant a read lock and an `Arc` clone: four
/// read-modify-writes on lines that every pushing thread writes, 13 % of a
/// spawn burst from a thread. The copy is current while its generation is
/// the scheduler's (generations are unique in the process, `TABLE_GENS`); an
/// older copy is a snapshot taken a moment earlier, which the routing below
/// already allows for (a retired target is re-routed by `push_batch_to`; a
/// Processer not yet in the copy gets tasks at the next refresh). A thread
/// keeps one copy: pushing into two schedulers in turn refreshes each time,
/// and a thread that pushed into a scheduler keeps its last table (the
/// Processers' shared halves, with their empty queues) until it pushes
/// into another one or exits.
struct Pusher {
    gen: u64,
    table: Table,
    cursor: usize,
}

thread_local! {
    static PUSHER: RefCell<Option<Pusher>> = const { RefCell::new(None) };
}

impl Shared {
    /// Runs `f` with this thread's copy of the Processer table and the
    /// start of its next round-robin step.
    ///
    /// Not inlined, and it never switches: no thread-local address is held
    /// across a switch (see ARCHITECTURE.md, "A started task stays on its
    /// thread"). The copy stays borrowed while `f` runs; a push nested in
    /// `f` (re-routing off a retired Processer) finds it borrowed and takes
    /// a snapshot under the lock, as every push did before the copy. So
    /// does a thread whose thread-locals are being destroyed (a channel end
    /// dropped by a thread-local destructor wakes a task).
    #[inline(never)]
    fn with_table<R>(&self, f: impl FnOnce(&[Arc<ProcesserShared>], usize) -> R) -> R {
        let gen = self.processers_gen();
        let mut f = Some(f);
        let done = PUSHER.try_with(|c| {
            let mut slot = c.try_borrow_mut().ok()?;
            let p = match &mut *slot {
                Some(p) if p.gen == gen => p,
                stale => {
                    let (gen, table) = self.processers_snapshot_with_gen();
                    // A new cursor starts where the shared one is, so that
                    // threads pushing at once do not all begin at slot 0.
                    let cursor = self.rr.fetch_add(1, Ordering::Relaxed);
                    // The old copy is dropped here, under the borrow: a push
                    // its drop might make takes the snapshot path.
                    stale.insert(Pusher { gen, table, cursor })
                }
            };
            p.cursor = p.cursor.wrapping_add(1);
            let f = f.take()?;
            Some(f(&p.table, p.cursor))
        });
        if let Ok(Some(r)) = done {
            return r;
        }
        let f = f.take().expect("not called: the copy was out of reach");
        let start = self.rr.fetch_add(1, Ordering::Relaxed);
        f(&self.processers_snapshot(), start)
    }

    /// Queues a task on a Processer chosen for it, from a thread that is not
    /// one of this scheduler's Processers (or for a task pinned elsewhere).
    pub(crate) fn push_remote(&self, r: Runnable) {
        self.with_table(|procs, start| self.push_remote_in(procs, start, r));
    }

    fn push_remote_in(&self, procs: &[Arc<ProcesserShared>], start: usize, r: Runnable) {
        // A stopped scheduler: its Processers are gone or going, and a
        // thread's copy of the table may still list them (a core Processer
        // is never marked retired).
        let stopped = self.stopped.load(Ordering::Relaxed);
        let target = if stopped {
            None
        } else {
            self.pick_target(procs, start, &r)
        };
        let Some((target, search)) = target else {
            // No Processer left: the scheduler stopped, which needs `alive`
            // at zero, and admission (spawns, user timers) is closed by then,
            // so no task can arrive here. Should one ever do, leak it rather
            // than free the stack of a task that may be suspended.
            debug_assert!(false, "a task was scheduled on a stopped scheduler");
            std::mem::forget(r);
            return;
        };
        let target: &ProcesserShared = &target;
        if search {
            // Relaxed: published to `target` by the SeqCst CAS in `wake`
            // (as in wake_idle_for_local_work).
            target.search_handoff.store(true, Ordering::Relaxed);
        }
        let pushed = self.push_to(target, r);
        if pushed && self.wake_proc(target) {
            return;
        }
        // Not woken by us (awake already, or retired): if it has not taken
        // the search meanwhile, the search goes back. (A swap: exactly one
        // of us gets it.)
        if search && target.search_handoff.swap(false, Ordering::Relaxed) {
            self.idle.end_search();
        }
        if pushed {
            self.wake_idle_for_local_work();
        }
    }

    /// Queues tasks that a poll of the reactor woke and that cannot run on
    /// the polling thread (the poller is another Processer, or the
    /// Dispatcher), each where `push_remote` would: a pinned task into its
    /// Processer's remote pinned queue, the rest through `push_remote`.
    ///
    /// Pinned tasks are pushed with one fence for the whole batch, then one
    /// look-out request and at most one wake-up per Processer (as many
    /// `push_to` calls would do per task): a poll at a busy server wakes
    /// tasks bound to every Processer, several each. A Processer that
    /// retired meanwhile has what was pushed to it re-routed, as in
    /// `push_batch_to`. Leaves `tasks` empty.
    pub(crate) fn push_woken(&self, tasks: &mut Vec<Runnable>) {
        if tasks.is_empty() {
            return;
        }
        self.with_table(|procs, start| {
            // Positions in `procs` of the Processers pushed to; one beyond
            // the mask's width is published at once, on its own.
            let mut pushed: u64 = 0;
            // Tasks routed one by one, each a step further round-robin.
            let mut others = 0usize;
            let stopped = self.stopped.load(Ordering::Relaxed);
            for r in tasks.drain(..) {
                let at = r
                    .header()
                    .pin()
                    .filter(|_| !stopped)
                    .and_then(|pin| procs.binary_search_by_key(&pin, |p| p.index).ok())
                    .filter(|&i| !procs[i].retired.load(Ordering::Relaxed));
                if let Some(i) = at {
                    procs[i].cross_wakeups.fetch_add(1, Ordering::Relaxed);
                }
                match at {
                    Some(i) if i < 64 => {
                        procs[i].pinned.push(r);
                        pushed |= 1 << i;
                    }
                    Some(i) => {
                        if self.push_to(&procs[i], r) {
                            self.wake_proc(&procs[i]);
                        }
                    }
                    None => {
                        others = others.wrapping_add(1);
                        self.push_remote_in(procs, start.wrapping_add(others), r);
                    }
                }
            }
            if pushed == 0 {
                return;
            }
            // Pairs with the SeqCst stores of `retired` and `sleeping`, for
            // every Processer pushed to (see `push_batch_to`).
            fence(Ordering::SeqCst);
            while pushed != 0 {
                let target = &procs[pushed.trailing_zeros() as usize];
                pushed &= pushed - 1;
                if target.retired.load(Ordering::SeqCst) {
                    for t in crate::runtime::processer::shared::drain_retired(target) {
                        self.push_remote(t);
                    }
                    continue;
                }
                target.ask_look_out(crate::runtime::processer::shared::LOOK_REMOTE);
                self.wake_proc(target);
            }
        });
    }

    /// Chaos mode: queues an unpinned task on a usable Processer other than
    /// `not` (round-robin), and wakes it; on `not` itself if there is no
    /// other.
    pub(crate) fn push_elsewhere(&self, r: Runnable, not: usize) {
        let procs = self.processers_snapshot();
        let n = procs.len();
        let start = self.rr.fetch_add(1, Ordering::Relaxed);
        let target = (0..n).map(|k| &procs[(start + k) % n]).find(|p| {
            p.index != not
                && p.kind != Kind::Caller
                && !p.retired.load(Ordering::Relaxed)
                && !p.blocked.load(Ordering::Relaxed)
        });
        let target = target
            .or_else(|| procs.iter().find(|p| p.index == not))
            .cloned();
        match target {
            Some(p) => {
                if self.push_to(&p, r) {
                    self.wake_proc(&p);
                }
            }
            None => self.push_remote(r),
        }
    }

    /// Pushes a task into `target`'s new (or pinned) queue. If `target`
    /// retired meanwhile, re-routes whatever is left there and returns false.
    pub(crate) fn push_to(&self, target: &ProcesserShared, r: Runnable) -> bool {
        self.push_batch_to(target, std::iter::once(r))
    }

    /// [`push_to`](Self::push_to) for a batch: every task into `target`'s
    /// new (or pinned) queue, then one fence for them all. The caller wakes
    /// `target` after it, as after a single push.
    pub(crate) fn push_batch_to(
        &self,
        target: &ProcesserShared,
        tasks: impl IntoIterator<Item = Runnable>,
    ) -> bool {
        let mut movable = false;
        let mut pinned = false;
        let mut n = 0u64;
        for r in tasks {
            n += 1;
            if r.header().pin().is_some() {
                target.pinned.push(r);
                pinned = true;
            } else {
                target.new.push(r);
                movable = true;
            }
        }
        // Pairs with the SeqCst store of `retired` (and of `sleeping`): either
        // the retiring Processer drains our tasks, or we see `retired`; and
        // either a Processer going to sleep sees them in its re-check, or the
        // caller's wake-up after this sees it asleep.
        fence(Ordering::SeqCst);
        target.metrics.remote_pushes.fetch_add(n, Ordering::Relaxed);
        if target.retired.load(Ordering::SeqCst) {
            for t in crate::runtime::processer::shared::drain_retired(target) {
                self.push_remote(t);
            }
            return false;
        }
        if movable {
            dispatcher::work_queued(self, target);
        }
        if pinned {
            // A busy target takes its remote pinned queue at its next pick,
            // not only at its periodic look outward: tasks that can run
            // only there (bound ones, woken from other threads) wait behind
            // its local queue, not behind `NEW_QUEUE_INTERVAL` picks.
            target.ask_look_out(crate::runtime::processer::shared::LOOK_REMOTE);
        }
        true
    }

    /// Chooses the Processer for a task pushed from outside, and whether it
    /// is handed a search with it (see `processer/idle.rs`): its pin, its home, a
    /// sleeper if nobody searches, or the next in round-robin order (an
    /// awake one, if one of the next few is).
    ///
    /// No step scans the table: two binary searches, the top of the
    /// sleepers stack, and a round-robin step that stops after
    /// [`AWAKE_TRIES`] usable Processers.
    ///
    /// The chosen Processer is borrowed from the table (no reference count
    /// is touched) unless it came off the sleepers stack.
    fn pick_target<'a>(
        &self,
        procs: &'a [Arc<ProcesserShared>],
        start: usize,
        r: &Runnable,
    ) -> Option<(Cow<'a, Arc<ProcesserShared>>, bool)> {
        let usable = |p: &Arc<ProcesserShared>| {
            p.kind != Kind::Caller
                && !p.retired.load(Ordering::Relaxed)
                && !p.blocked.load(Ordering::Relaxed)
        };
        if let Some(pin) = r.header().pin() {
            let live = |p: &&Arc<ProcesserShared>| !p.retired.load(Ordering::Relaxed);
            if let Some(p) = find_processer(procs, pin).filter(live) {
                return Some((Cow::Borrowed(p), false));
            }
        }
        let home = r.header().home.load(Ordering::Relaxed);
        if let Some(p) = find_processer(procs, home).filter(|p| usable(p)) {
            return Some((Cow::Borrowed(p), false));
        }
        // Nobody searches: wake a sleeper for the task, and hand it the
        // search (Go's wakep), so that the pushes right behind this one go
        // to awake Processers, where it will steal them, instead of waking a
        // sleeper each. (A sleeper is never blocked in fact: a `blocked`
        // mark on one is stale, and not looked at here.)
        if self.idle.claim_search() {
            if let Some(p) = self.idle.pop_sleeper() {
                return Some((Cow::Owned(p), true));
            }
            self.idle.end_search();
        }
        let n = procs.len();
        if n == 0 {
            return None;
        }
        let mut asleep = None;
        let mut tries = 0;
        for k in 0..n {
            let p = &procs[(start + k) % n];
            if !usable(p) {
                continue;
            }
            if !p.sleeping.load(Ordering::Relaxed) {
                return Some((Cow::Borrowed(p), false));
            }
            asleep.get_or_insert(p);
            tries += 1;
            if tries == AWAKE_TRIES {
                break;
            }
        }
        asleep
            .or_else(|| {
                procs
                    .iter()
                    .find(|p| p.kind != Kind::Caller && !p.retired.load(Ordering::Relaxed))
            })
            .map(|p| (Cow::Borrowed(p), false))
    }

    /// Wakes `p` if it sleeps, keeping the idle count.
    pub(crate) fn wake_proc(&self, p: &ProcesserShared) -> bool {
        if p.wake() {
            self.idle.idle_dec();
            // SeqCst: the waker's half of the poller protocol
            // (`runtime/io/reactor.rs`): after the CAS on `sleeping`.
            if p.in_poll.load(Ordering::SeqCst) {
                // The reactor `p` waits in: its own.
                if let Some(r) = self.reactor_of(p.index) {
                    r.wake();
                }
            }
            true
        } else {
            false
        }
    }

    /// Work was queued where others may take it: if some Processer sleeps
    /// and none is searching, wake one to search (Go's `wakep`). The woken
    /// Processer is counted as a searcher before it is woken, so that the
    /// pushes right behind this one wake nobody else (see `processer/idle.rs`).
    ///
    /// There is deliberately no fence between the caller's push and these
    /// loads (it would cost every local wake-up): a Processer going to sleep
    /// at that very moment can miss the new task and sleep on. Nothing is
    /// lost: the task sits in the queue of a running Processer, which runs
    /// it in turn, and the Dispatcher wakes a sleeper while others have a
    /// backlog. Pushes to *another* Processer's queue do fence (`push_to`).
    pub(crate) fn wake_idle_for_local_work(&self) {
        if !self.idle.claim_search() {
            return;
        }
        while let Some(p) = self.idle.pop_sleeper() {
            // Relaxed: published to `p` by the SeqCst CAS in `wake`, which it
            // reads before it looks at the flag.
            p.search_handoff.store(true, Ordering::Relaxed);
            if self.wake_proc(&p) {
                return; // `p` owns the search now
            }
            // `p` was awake already. If it took the search meanwhile, it is
            // its; otherwise take it back and try the next sleeper. (A swap:
            // exactly one of us gets it.)
            if !p.search_handoff.swap(false, Ordering::Relaxed) {
                return;
            }
        }
        // Nobody to hand the search to: give it back.
        self.idle.end_search();
    }

    /// Wakes every Processer (stop, detach).
    pub(crate) fn wake_all(&self) {
        for p in self.processers_snapshot().iter() {
            self.wake_proc(p);
            p.sleeper.unpark(p.thread.get());
            if p.in_poll.load(Ordering::SeqCst) {
                if let Some(r) = self.reactor_of(p.index) {
                    r.wake();
                }
            }
        }
        crate::runtime::dispatcher::wake(self);
    }
}
