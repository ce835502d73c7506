//! Idle Processers: how many sleep, how many search, and which one to wake.
//!
//! [`Idle`] keeps, for one scheduler:
//!
//! - `idle`: the Processers asleep waiting for work (their `sleeping` flag
//!   is set; see `processer/run.rs` for the sleep protocol);
//! - `searching`: the Processers looking for work in other Processers'
//!   queues (Go's spinning Ms);
//! - `procs`: the Processers in the scheduler's table;
//! - the **sleepers stack**: the sleeping Processers, the most recent on
//!   top, so that a waker finds one without scanning every Processer
//!   (tokio's `Idle` keeps the same kind of list).
//!
//! # Who may search (Go's rule)
//!
//! A Processer that runs out of work searches only while the searchers are
//! fewer than half of the busy Processers, `2 * searching < procs - idle`
//! ([`Idle::try_begin_search`]). The caller is not idle, so one searcher is
//! always allowed. A Processer refused the search re-checks its own queues
//! and sleeps. Without the limit every idle Processer steals in a loop,
//! and with n of them each round of each costs O(n): O(n²) in all.
//!
//! # The wake chain (Go's `wakep`)
//!
//! Work queued where others may take it wakes at most one sleeper, and only
//! while nobody searches (`Shared::wake_idle_for_local_work`; a task pushed
//! from outside goes to that sleeper, `Shared::pick_target`). The waker
//! counts the sleeper in `searching` *before* waking it
//! ([`Idle::claim_search`]) and leaves it the search in its
//! `search_handoff` flag, so that pushers right behind see a searcher and
//! wake nobody else. A searcher that finds work and was the last one wakes
//! the next the same way; a searcher that finds nothing re-checks every
//! queue before it sleeps (`processer/run.rs`). So a burst of work wakes
//! sleepers one by one, as fast as each finds work, not all at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::sys::lock::Mutex;

use crate::runtime::processer::shared::ProcesserShared;

/// The idle and searching Processers of one scheduler.
pub(crate) struct Idle {
    /// Processers asleep waiting for work.
    idle: AtomicUsize,
    /// Processers searching other Processers' queues for work.
    searching: AtomicUsize,
    /// Processers in the scheduler's table.
    procs: AtomicUsize,
    /// The sleepers stack, most recent on top.
    ///
    /// ```text
    ///  Processer P going to sleep            a waker wanting any sleeper
    ///  1. P.sleeping = true (SeqCst)         1. lock; pop the top entry Q
    ///  2. lock; if !P.listed: push P,           (Q.listed = false); unlock
    ///     P.listed = true; unlock            2. CAS Q.sleeping true -> false:
    ///  3. idle += 1; fence; re-check;           Q is woken; if the CAS fails,
    ///     park while P.sleeping                 Q is awake: back to 1
    /// ```
    ///
    /// The invariant: a Processer past its step 2 whose `sleeping` is still
    /// set is on the stack. An entry leaves the stack only
    ///
    /// - in a waker's step 1, after which the waker clears that Processer's
    ///   `sleeping` or finds it clear (the Processer is awake); or
    /// - when a waker reads its `sleeping` clear *under the lock* and drops
    ///   it ([`Idle::pop_sleeper`]). The Processer is then awake, and when it
    ///   sleeps again, its step 2 (which takes the lock after its step 1)
    ///   finds `listed` clear and lists it again.
    ///
    /// A Processer woken directly (by a push to its own queue) or that
    /// cancelled its sleep keeps its entry: a stale entry, dropped by the
    /// next waker that meets it, at most one per Processer (`listed`). A
    /// Processer leaving the table takes its entry out ([`Idle::remove`]).
    ///
    /// The stack only finds sleepers quickly: no wake-up is lost for want of
    /// an entry. Lost wake-ups are prevented by the `sleeping` Dekker pair
    /// and by the searchers' final re-check (`processer/run.rs`); a waker that
    /// finds no entry (a sleeper between its steps 1 and 2) at worst leaves
    /// work queued on an awake Processer, which runs it.
    sleepers: Mutex<Vec<Arc<ProcesserShared>>>,
}

impl Idle {
    pub(crate) fn new() -> Idle {
        Idle {
            idle: AtomicUsize::new(0),
            searching: AtomicUsize::new(0),
            procs: AtomicUsize::new(0),
            sleepers: Mutex::new(Vec::new()),
        }
    }

    /// Processers asleep waiting for work, approximately.
    pub(crate) fn idle(&self) -> usize {
        // Pairs with the SeqCst updates below: part of the pushers' side of
        // the sleep protocol (see Shared::wake_idle_for_local_work).
        self.idle.load(Ordering::SeqCst)
    }

    pub(crate) fn idle_inc(&self) {
        // SeqCst: a step of the sleep protocol, ordered with the sleeper's
        // fence and the pushers' loads (processer.rs).
        self.idle.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn idle_dec(&self) {
        // SeqCst: as in idle_inc.
        self.idle.fetch_sub(1, Ordering::SeqCst);
    }

    /// Processers searching for work right now, approximately.
    pub(crate) fn searching(&self) -> usize {
        // SeqCst: pairs with the searchers' SeqCst updates; a pusher that
        // sees a searcher leaves the wake-up to it, and that searcher's
        // update comes before its final re-check (processer.rs).
        self.searching.load(Ordering::SeqCst)
    }

    /// A Processer joined the table.
    pub(crate) fn proc_added(&self) {
        self.procs.fetch_add(1, Ordering::Relaxed);
    }

    /// A Processer left the table.
    pub(crate) fn proc_removed(&self) {
        self.procs.fetch_sub(1, Ordering::Relaxed);
    }

    /// Go's rule: become a searcher if searchers are fewer than half of the
    /// busy Processers (at least one searcher is always allowed). Returns
    /// whether the caller now counts as a searcher; it must then call
    /// [`end_search`](Self::end_search) once.
    pub(crate) fn try_begin_search(&self) -> bool {
        // Relaxed: the counts only bound how many search; the wake-up
        // protocol does not depend on them.
        let procs = self.procs.load(Ordering::Relaxed);
        let busy = procs
            .saturating_sub(self.idle.load(Ordering::Relaxed))
            .max(1);
        let mut s = self.searching.load(Ordering::Relaxed);
        loop {
            if 2 * s >= busy {
                return false;
            }
            // SeqCst on success: the searchers' updates are part of the
            // wake-up protocol (see `searching`).
            match self.searching.compare_exchange_weak(
                s,
                s + 1,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    /// Counts the caller as a searcher on behalf of a sleeper it is about to
    /// wake, if some Processer sleeps and none searches (Go's `wakep`).
    /// Returns false if there is no point in waking anyone. On true, the
    /// search is handed to a woken sleeper or given back with
    /// [`end_search`](Self::end_search).
    pub(crate) fn claim_search(&self) -> bool {
        if self.idle() == 0 || self.searching() != 0 {
            return false;
        }
        // SeqCst: as in try_begin_search.
        self.searching
            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }

    /// Ends a search. Returns whether the caller was the last searcher.
    pub(crate) fn end_search(&self) -> bool {
        // SeqCst: a searcher's decrement comes before its final re-check of
        // every queue (processer.rs), in the order the pushers' loads of
        // `searching` see.
        self.searching.fetch_sub(1, Ordering::SeqCst) == 1
    }

    /// Step 2 of going to sleep: `p` (whose `sleeping` is already set) puts
    /// itself on the sleepers stack unless it is still there.
    pub(crate) fn list(&self, p: &Arc<ProcesserShared>) {
        let mut s = self.sleepers.lock();
        // Relaxed: `listed` is only read and written under the lock.
        if !p.listed.load(Ordering::Relaxed) {
            p.listed.store(true, Ordering::Relaxed);
            s.push(p.clone());
        }
    }

    /// Takes the most recent sleeper off the stack, dropping stale entries
    /// (Processers awake since), for the caller to wake. `None` if no
    /// Processer is listed asleep.
    pub(crate) fn pop_sleeper(&self) -> Option<Arc<ProcesserShared>> {
        let mut s = self.sleepers.lock();
        while let Some(p) = s.pop() {
            // Relaxed: `listed` is guarded by the lock. `sleeping` is read
            // under the lock, which orders the read after the Processer's
            // store if its step 2 came first (see the invariant on
            // `sleepers`); the caller's CAS on it decides the wake-up.
            p.listed.store(false, Ordering::Relaxed);
            if p.sleeping.load(Ordering::Relaxed) {
                return Some(p);
            }
        }
        None
    }

    /// Takes `p`'s entry off the stack (`p` leaves the table).
    pub(crate) fn remove(&self, p: &ProcesserShared) {
        let mut s = self.sleepers.lock();
        // Relaxed: guarded by the lock.
        if p.listed.swap(false, Ordering::Relaxed) {
            if let Some(i) = s.iter().position(|q| std::ptr::eq(&**q, p)) {
                s.remove(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::processer::shared::{new_processer, Kind};

    fn asleep(i: usize) -> Arc<ProcesserShared> {
        let (p, _w) = new_processer(i, Kind::Core);
        p.sleeping.store(true, Ordering::SeqCst);
        p
    }

    #[test]
    fn sleepers_come_off_most_recent_first_and_stale_entries_are_skipped() {
        let idle = Idle::new();
        let (a, b, c) = (asleep(0), asleep(1), asleep(2));
        for p in [&a, &b, &c] {
            idle.list(p);
            idle.idle_inc();
        }
        idle.list(&c); // listed once only
        c.sleeping.store(false, Ordering::SeqCst); // woken directly: stale
        assert_eq!(idle.pop_sleeper().map(|p| p.index), Some(1));
        assert!(!c.listed.load(Ordering::Relaxed));
        idle.remove(&a);
        assert!(idle.pop_sleeper().is_none());
        // A Processer that sleeps again after its entry was dropped relists.
        c.sleeping.store(true, Ordering::SeqCst);
        idle.list(&c);
        assert_eq!(idle.pop_sleeper().map(|p| p.index), Some(2));
    }

    #[test]
    fn at_most_half_of_the_busy_processers_search_and_one_always_may() {
        let idle = Idle::new();
        for _ in 0..8 {
            idle.proc_added();
        }
        // 8 busy: 4 searchers.
        let n = (0..8).take_while(|_| idle.try_begin_search()).count();
        assert_eq!(n, 4);
        for _ in 0..4 {
            idle.end_search();
        }
        // 7 asleep, the caller busy: still one.
        for _ in 0..7 {
            idle.idle_inc();
        }
        assert!(idle.try_begin_search());
        assert!(!idle.try_begin_search());
        assert!(!idle.claim_search(), "a searcher exists: wake nobody");
        assert!(idle.end_search());
        assert!(idle.claim_search());
        assert!(idle.end_search());
    }
}
