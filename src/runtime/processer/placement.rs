//! Where a task runs: binding a task to the Processer of its first run,
//! placing a fresh task where bound work is lightest, and the pins that
//! keep a task on its thread (held by the user, or while it unwinds).
//!
//! Invariant: a started task that is not migratable never leaves the
//! Processer it is bound to; `may_move` is the one question the queues and
//! the Dispatcher ask before moving a task.

use std::sync::atomic::Ordering;

use crate::runtime::dispatcher;
use crate::runtime::processer::shared::Kind;
use crate::runtime::task::{Runnable, TaskHeader};

use crate::runtime::processer::ProcLocal;

/// How many more bound tasks than another Processer (plus an eighth of its
/// own) a Processer holds before it starts a fresh task there instead (see
/// `ProcLocal::place_fresh`).
pub(in crate::runtime) const BIND_SLACK: usize = 16;

impl ProcLocal {
    /// Where a fresh task that will be bound at its first run starts: here,
    /// or, when a core Processer picked at random holds clearly fewer bound
    /// tasks ([`BIND_SLACK`] plus an eighth of ours), there (pinned to it,
    /// pushed to its pinned queue and woken; it is still fresh, so free to
    /// move). Returns the task when it stays.
    ///
    /// A started task never moves (see `may_move`), so where it starts is
    /// where it runs to its end: a server whose accept loop runs on one
    /// Processer would otherwise start (and bind) nearly every connection
    /// there, since the fresh task runs as soon as the accept loop parks,
    /// before an idle Processer can steal it. The other Processers then had
    /// nothing to run but wake-ups to forward (BENCHMARKS.md, "Bound
    /// tasks"). Counting bound tasks is a
    /// proxy for load that suits servers (one task per connection); the
    /// Dispatcher and thieves still balance fresh tasks by queue length.
    pub(in crate::runtime) fn place_fresh(&self, t: Runnable) -> Option<Runnable> {
        let mine = self.bound.get();
        if mine < BIND_SLACK
            || self.p.kind == Kind::Caller
            || t.header().pin().is_some()
            || self.may_move(t.header())
        {
            return Some(t);
        }
        let table = self.table();
        let procs = &table.1;
        let n = procs.len();
        if n < 2 {
            return Some(t);
        }
        let other = &procs[self.random_below(n)];
        if other.index == self.p.index
            || other.kind != Kind::Core
            || other.retired.load(Ordering::Relaxed)
            || other.blocked.load(Ordering::Relaxed)
            || mine <= other.bound.load(Ordering::Relaxed) + BIND_SLACK + mine / 8
        {
            return Some(t);
        }
        let other = other.clone();
        drop(table);
        // Pinned there before it is pushed: in the new queue, we (searching
        // for work as soon as we go idle) would steal it back before the
        // other Processer woke up. It is bound there at its first run
        // anyway; a core Processer never retires before shutdown.
        t.header().set_runtime_pin(Some(other.index));
        other.placed.fetch_add(1, Ordering::Relaxed);
        if self.sched.push_to(&other, t) {
            dispatcher::work_queued(&self.sched, &other);
            self.sched.wake_proc(&other);
        }
        None
    }

    /// Sets the count of tasks bound here, and its mirror for other
    /// Processers' placement decisions.
    pub(in crate::runtime) fn set_bound(&self, n: usize) {
        self.bound.set(n);
        self.p.bound.store(n, Ordering::Relaxed);
    }

    /// Whether a started task may move to another Processer: the user
    /// vouched for it (`Builder::migratable`,
    /// `SchedulerBuilder::migrate_started_tasks`), or chaos mode. Otherwise
    /// a task is bound at its first run to the Processer that runs it, and
    /// stays there to its end: the compiler may keep a thread-local's
    /// address across a switch in any function, and after a move that
    /// address would be another thread's.
    pub(in crate::runtime) fn may_move(&self, h: &TaskHeader) -> bool {
        h.migratable || self.sched.config.migrate_started_tasks || self.sched.config.chaos
    }

    /// A task finished: the pin the runtime gave it (bound here, or held
    /// for an unwind) is over.
    pub(in crate::runtime) fn release_pin(&self, h: &TaskHeader) {
        if h.user_pin.is_some() || h.pin().is_none() {
            return;
        }
        if self.may_move(h) {
            self.unwind_pinned.set(self.unwind_pinned.get() - 1);
        } else {
            self.set_bound(self.bound.get() - 1);
        }
    }

    /// Keeps a task that switched out in the middle of an unwind on this
    /// thread until the unwind is over.
    ///
    /// std counts panics per thread: `panic!` (and the forced unwind of a
    /// dropped fiber or generator, a `resume_unwind`) raises this thread's
    /// count, and the `catch_unwind` that ends the unwind lowers the count
    /// of whichever thread it runs on. The loop moves a task's count off the
    /// thread when it switches out and back when it resumes
    /// (`task/unwind_bank.rs`), so the count follows the task; the pin keeps such
    /// a task away from a loop that cannot do that (a `block_on` caller that
    /// unwinds itself), and keeps its unwind, which may have cached this
    /// thread's thread-locals in its frames, where it began. A task that
    /// switches out while its count is not zero is pinned here, and
    /// unpinned at a switch-out that finds the count back at zero. A task
    /// the user pinned keeps its own pin.
    ///
    /// Called right after the task switched out, on the thread it ran on,
    /// with `unwinding` read there before the loop banked the count: the
    /// task's own.
    #[inline]
    pub(in crate::runtime) fn pin_while_unwinding(&self, h: &TaskHeader, unwinding: bool) {
        // `unwinding`: a load of std's global panic count (zero unless some
        // thread is unwinding); and our count of tasks pinned here for an
        // unwind: nearly free when nobody panics.
        if unwinding || self.unwind_pinned.get() != 0 {
            self.repin_for_unwind(h, unwinding);
        }
    }

    /// The rest of [`pin_while_unwinding`](Self::pin_while_unwinding), off
    /// the hot path.
    #[cold]
    #[inline(never)]
    pub(in crate::runtime) fn repin_for_unwind(&self, h: &TaskHeader, unwinding: bool) {
        // A bound task stays here anyway, and a user pin is the user's.
        if unwinding == h.pin().is_some() || h.user_pin.is_some() || !self.may_move(h) {
            return;
        }
        if unwinding {
            h.set_runtime_pin(Some(self.p.index));
            self.unwind_pinned.set(self.unwind_pinned.get() + 1);
        } else {
            h.set_runtime_pin(None);
            self.unwind_pinned.set(self.unwind_pinned.get() - 1);
        }
    }
}
