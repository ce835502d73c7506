//! The Dispatcher: one thread per scheduler that notices Processers whose
//! running task blocks the thread, moves the tasks queued behind them to
//! other Processers, and grows the thread set when every Processer is
//! blocked (libgo's `Scheduler::DispatcherThread`).
//!
//! This file owns the thread and its cycle: starting and stopping it, the
//! naps between samples and who may end them (`work_queued`, `alert`,
//! `processer_awake`, `wake`). The cycle's steps live beside it:
//!
//! | file | what it owns |
//! |---|---|
//! | `dispatcher/detect.rs` | steps 1-2: sampling the switch counters and judging suspects (the kernel rule, the hog rule, peers' reports) |
//! | `dispatcher/rescue.rs` | steps 3-5: moving queued tasks off blocked Processers, starting extra threads, balancing, and covering a stuck Processer's timers and reactor |
//!
//! # One cycle
//!
//! 1. **Sample.** For every Processer read the switch counter and the
//!    `running` flag. A counter that moved, or no task switched in, means
//!    healthy: clear `blocked` at once. The same counter with a task
//!    switched in means the same task has held the thread since the sample
//!    that first saw that counter value: a *suspect*.
//! 2. **Judge a suspect.** It is marked **blocked** when it waits in the
//!    kernel on two samples in a row (*kernel-blocked*), or when it has
//!    held the thread for `block_timeout` while using CPU (a *hog*); the
//!    rules and the races they avoid are in `dispatcher/detect.rs`.
//! 3. **Rescue.** Every task in a blocked Processer's new and runnable
//!    queues (never the running one, never pinned or bound ones, which
//!    live in separate queues) is stolen and handed round-robin to the
//!    active Processers, least loaded first; those given tasks are woken.
//!    Wake-ups aimed at a blocked Processer are routed elsewhere by the
//!    scheduler. A task moved once stays put for a while (see
//!    `dispatcher/rescue.rs`, "Moving a task again").
//! 4. **Grow.** If every Processer is blocked and tasks are waiting, start
//!    an extra Processer thread, never exceeding `max_threads`. Extra
//!    threads exit after `idle_thread_timeout` without work (the Processer
//!    side of that is in `Shared::should_exit`).
//! 5. **Balance.** While an active Processer has two or more queued tasks
//!    and nobody searches, one sleeper is woken to search; a sleeping
//!    Processer with queued work of its own is woken.
//! 6. **Sleep.** While any task runs, wait one sampling period: the
//!    dispatch interval while some Processer is a suspect or a peer
//!    reported one, doubling while every running task keeps switching, up
//!    to [`BACKOFF_MAX`] intervals, or [`BACKOFF_WATCHED`] while busy peers
//!    watch every running Processer, or longer while nothing movable is
//!    queued (below). When every Processer sleeps, park until a Processer
//!    wakes (no polling while the scheduler is idle); see
//!    [`DispatchState::deep`] for the protocol. Both waits are
//!    `thread::park` (with a timeout for the interval), never
//!    `thread::sleep`: [`wake`] (shutdown, detach) ends either at once, so
//!    stopping never waits out an interval. What a cycle costs is measured
//!    in `bench/benches/dispatcher_cpu.rs` and `bench/benches/processers.rs`.
//!
//! The bookkeeping is O(n) per cycle: a few loads per Processer in the
//! sample, with the views kept in a `Vec` in table order (rebuilt only when
//! the table changes), and a bounded balance slice.
//!
//! # Nothing to rescue
//!
//! A rescue moves queued work: fresh tasks, unbound wake-ups, placed tasks.
//! A server's Processers mostly hold none (every connection's task is bound
//! to its thread), and there the Dispatcher's wake-ups at four intervals
//! are a visible share of the server's CPU (`docs/bench/history.md`, "Round
//! 4"). So while no
//! awake Processer
//! has movable work queued at the sample, the period backs off up to
//! [`NOTHING_QUEUED_NAP`] (32 intervals at the defaults), even while some
//! Processer is a suspect (on a small machine a server's threads are
//! preempted by its clients often enough that most samples see one, and
//! each would put the period back to the base interval), and
//! whoever queues movable work on a Processer that runs a task while the
//! Dispatcher naps that long ends the nap ([`work_queued`]: a spawn, a
//! wake-up of an unbound task, a remote push, a placement). The Dispatcher
//! then samples at the base interval, and keeps short periods while the
//! work waits, so work queued behind a block is rescued as soon as
//! before. What waits longer is what needs no rescue: a block with nothing
//! queued behind it is caught up to one long nap later (the `blocked` mark then
//! only routes later wake-ups elsewhere, and those end the nap), and the
//! timers of a Processer stuck in one long task are fired for it up to
//! one long nap later. Nor does it nap long while nobody looks after a reactor
//! (nobody waits in it, and nobody polled it for [`IO_COVERED_WITHIN`]
//! while its Processer is blocked with waiters that could run elsewhere,
//! or for far longer otherwise: see the constant): then its own poll may
//! be what delivers readiness. The hog rule's
//! `block_timeout` is unchanged. A
//! push that races the decision to nap long (queued after the sample, seen
//! by the pusher before `long_nap` is set) can go unnoticed for one nap:
//! the pushers take no fence for it, since the local spawn path is the
//! hottest in the runtime.
//!
//! Every duration sum and product here saturates: the builder bounds the
//! settings (`dispatch_interval` at most 1 s), and the Dispatcher does not
//! rely on that to stay alive.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crate::sys::lock::Mutex;

use crate::runtime::processer::shared::{Kind, ProcesserShared};
use crate::runtime::shared::Shared;
use crate::runtime::task::Runnable;
use crate::runtime::time::timer;

pub(crate) use crate::runtime::dispatcher::detect::watch_after;
use crate::runtime::dispatcher::detect::{Sample, Seen, Tracing, View};
use crate::runtime::dispatcher::rescue::cover_after;

/// The sampling period backs off to at most this many dispatch intervals
/// while no Processer is a suspect.
pub(in crate::runtime) const BACKOFF_MAX: u32 = 4;
/// ... and to this many while every running Processer is watched by a busy
/// peer (see "Peers watch each other" in the module docs).
pub(in crate::runtime) const BACKOFF_WATCHED: u32 = 8;
/// ... and to at most this long while, at the sample, no Processer that is
/// awake has work queued that a rescue could move (see "Nothing to rescue"
/// in the module docs): 32 intervals at the default interval. Never less
/// than `BACKOFF_MAX` intervals: with a dispatch interval of 800 us or more
/// the rule changes nothing.
pub(in crate::runtime) const NOTHING_QUEUED_NAP: Duration = Duration::from_micros(3200);
/// ... and to at most this many intervals for it.
pub(in crate::runtime) const BACKOFF_NOTHING_QUEUED: u32 = 32;
/// ... and only while every reactor is looked after: its Processer waits
/// in it, or polled it within the time `rescue::cover_after` gives: this
/// one for the reactor of a blocked Processer where tasks that could run
/// elsewhere wait, the much longer `OWNER_POLLS_WITHIN` for any other
/// (its owner polls it, every 61st pick while busy, and its own tasks
/// wait for it anyway). Otherwise the Dispatcher's own poll may be the
/// one that delivers readiness (`cover_timers_and_io`), and must not wait
/// a long nap.
pub(in crate::runtime) const IO_COVERED_WITHIN: Duration = Duration::from_millis(1);

/// The Dispatcher's state, shared with the rest of the scheduler.
#[derive(Default)]
pub(crate) struct DispatchState {
    /// Times a Processer was marked blocked.
    pub(crate) detections: AtomicU64,
    /// Blocked spells of a Processer during which the Dispatcher found
    /// tasks runnable behind it that can run on no other thread (counted
    /// once per spell, at the first sample that finds some).
    pub(crate) blocked_with_behind: AtomicU64,
    /// Tasks moved off blocked Processers.
    pub(crate) rescued: AtomicU64,
    /// Of `rescued`, moves of tasks moved before and not run since (after
    /// their hold: see "Moving a task again").
    pub(crate) moved_again: AtomicU64,
    /// The Dispatcher is parked until a Processer wakes up.
    ///
    /// ```text
    ///  Dispatcher going to park              Processer leaving sleep
    ///  1. deep = true (SeqCst)               1. its `sleeping` was cleared (SeqCst)
    ///  2. if any Processer is not            2. if deep: CAS true -> false (SeqCst),
    ///     sleeping: deep = false, go on         unpark the Dispatcher
    ///  3. park while deep
    /// ```
    /// Either the Dispatcher sees the awake Processer, or the Processer sees
    /// `deep` and wakes it.
    deep: AtomicBool,
    /// A peer reported a Processer whose task has held it for the watch
    /// time: end the nap now and sample at the base interval.
    alert: AtomicBool,
    /// The Dispatcher's period is longer than the base interval right now
    /// (only then is an alert worth a wake-up).
    backed_off: AtomicBool,
    /// ... and longer than `BACKOFF_MAX` intervals, because nothing
    /// movable was queued at the sample: queuing some ends the nap
    /// ([`work_queued`]).
    long_nap: AtomicBool,
    thread: OnceLock<Thread>,
    handle: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// The Dispatcher thread's name for a scheduler named `name`.
pub(crate) fn thread_name(name: &str) -> String {
    format!("{name}-dispatcher")
}

/// Starts the Dispatcher thread if the scheduler can use one: with
/// `max_threads == 1` there is nobody to rescue to and nothing to grow.
/// Fails if the operating system refuses the thread.
pub(crate) fn start(shared: &Arc<Shared>) -> std::io::Result<()> {
    if shared.config.max_threads <= 1 {
        return Ok(());
    }
    let me = shared.clone();
    let h = std::thread::Builder::new()
        .name(thread_name(&shared.config.name))
        .spawn(move || {
            let _ = me.dispatch.thread.set(std::thread::current());
            // Sleep as close to the dispatch interval as the kernel can: the
            // default 50 us timer slack would add half an interval per cycle.
            // SAFETY: PR_SET_TIMERSLACK takes a plain integer and only
            // affects the calling thread.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
            Dispatcher::new(me).run();
        });
    *shared.dispatch.handle.lock() = Some(h?);
    Ok(())
}

/// A Processer woke up: end the Dispatcher's deep sleep if it is in one.
pub(crate) fn processer_awake(shared: &Shared) {
    // Pairs with the Dispatcher's SeqCst store of `deep` (see DispatchState).
    fence(Ordering::SeqCst);
    let d = &shared.dispatch;
    if d.deep.load(Ordering::Relaxed)
        && d.deep
            .compare_exchange(true, false, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    {
        if let Some(t) = d.thread.get() {
            t.unpark();
        }
    }
}

/// A busy Processer found `p`'s switch count unchanged for the watch time
/// (see "Peers watch each other"): record it, and end the Dispatcher's nap
/// so that it samples now and then at the base interval. Returns whether
/// this call woke the Dispatcher.
pub(crate) fn alert(shared: &Shared, p: &ProcesserShared, switches: u64) -> bool {
    p.reported.store(switches, Ordering::Relaxed);
    let d = &shared.dispatch;
    if !d.backed_off.load(Ordering::Relaxed) {
        // It samples at the base interval already, and will take the report
        // at its next sample: a wake-up would only cost a cycle.
        return false;
    }
    // Release: the Dispatcher's Acquire swap at its cycle start then sees
    // `reported`.
    if d.alert.swap(true, Ordering::Release) {
        return false; // already alerted, not yet seen
    }
    if let Some(t) = d.thread.get() {
        t.unpark();
    }
    true
}

/// Work that a rescue could move (a fresh task, an unbound wake-up, a
/// placed task) was queued on `p`. If `p` runs a task while the Dispatcher
/// naps long (nothing movable was queued at its sample), that task may
/// block with this work behind it: end the nap, so that the Dispatcher
/// samples now and at the base interval while the work waits (see
/// "Nothing to rescue"). One relaxed load when it does not nap long.
#[inline]
pub(crate) fn work_queued(shared: &Shared, p: &ProcesserShared) {
    let d = &shared.dispatch;
    if d.long_nap.load(Ordering::Relaxed) && p.running.load(Ordering::Relaxed) {
        end_long_nap(d);
    }
}

/// Whether the Dispatcher naps long: nothing movable was queued at its
/// last sample (a peer's report of a Processer with nothing movable
/// queued would only cut the nap short for nothing).
pub(crate) fn naps_long(shared: &Shared) -> bool {
    shared.dispatch.long_nap.load(Ordering::Relaxed)
}

#[cold]
pub(in crate::runtime) fn end_long_nap(d: &DispatchState) {
    d.long_nap.store(false, Ordering::Relaxed);
    if d.alert.swap(true, Ordering::Release) {
        return; // already alerted, not yet seen
    }
    if let Some(t) = d.thread.get() {
        t.unpark();
    }
}

/// Wakes the Dispatcher (stop, detach), from a deep sleep or from the wait
/// between two samples; it then re-checks whether to exit.
pub(crate) fn wake(shared: &Shared) {
    shared.dispatch.deep.store(false, Ordering::SeqCst);
    if let Some(t) = shared.dispatch.thread.get() {
        t.unpark();
    }
}

/// Waits for the Dispatcher thread to exit (after `stopped` was set).
pub(crate) fn join(shared: &Shared) {
    wake(shared);
    let h = shared.dispatch.handle.lock().take();
    if let Some(h) = h {
        if h.thread().id() != std::thread::current().id() {
            let _ = h.join();
        }
    }
}

pub(in crate::runtime) struct Dispatcher {
    pub(in crate::runtime) shared: Arc<Shared>,
    /// When the Dispatcher started: the origin of `TaskHeader::moved_at`.
    pub(in crate::runtime) epoch: Instant,
    /// When the previous sample was taken.
    pub(in crate::runtime) last_sample: Instant,
    /// One view per Processer, in table order (by slot index): `views[i]`
    /// is about `procs[i]` of the last sample. Rebuilt (O(n)) only when the
    /// table changed.
    pub(in crate::runtime) views: Vec<View>,
    /// Positions in the last sampled table of the Processers marked
    /// blocked.
    pub(in crate::runtime) blocked: Vec<usize>,
    /// The suspects of this sample and what was seen of each, judged once
    /// all are seen (kept to reuse its allocation).
    pub(in crate::runtime) seen: Vec<(usize, Seen)>,
    /// Where the next balance slice starts.
    pub(in crate::runtime) balance_from: usize,
    /// The backtrace request in flight, if any (`trace_blocked`).
    pub(in crate::runtime) tracing: Option<Tracing>,
    /// Tasks a poll of the reactor woke (kept to reuse its allocation).
    pub(in crate::runtime) woken: Vec<Runnable>,
    /// Scratch space of a firing of timers (kept to reuse its allocation).
    pub(in crate::runtime) due: Vec<timer::Action>,
    /// Tasks a firing of timers woke (kept to reuse its allocation).
    pub(in crate::runtime) fired: Vec<Runnable>,
}

impl Dispatcher {
    pub(in crate::runtime) fn new(shared: Arc<Shared>) -> Dispatcher {
        Dispatcher {
            shared,
            epoch: Instant::now(),
            last_sample: Instant::now(),
            views: Vec::new(),
            blocked: Vec::new(),
            seen: Vec::new(),
            balance_from: 0,
            tracing: None,
            woken: Vec::new(),
            due: Vec::new(),
            fired: Vec::new(),
        }
    }

    /// `now` as a `TaskHeader::moved_at` stamp: nanoseconds since `epoch`
    /// plus one (never 0, which means "not moved").
    pub(in crate::runtime) fn stamp(&self, now: Instant) -> u64 {
        duration_nanos(now.saturating_duration_since(self.epoch)).saturating_add(1)
    }

    /// Whether the Dispatcher should leave: the scheduler stopped, or it is
    /// detached with nothing left alive.
    pub(in crate::runtime) fn exiting(&self) -> bool {
        let s = &self.shared;
        // `stopped`: Acquire, pairs with the SeqCst store in
        // `Shared::stop_threads_locked`. `detached` and `alive`: SeqCst, as
        // in `Shared::should_exit`, against the SeqCst store of `detached`
        // and the last task's decrement of `alive` (each followed by a wake).
        s.stopped.load(Ordering::Acquire)
            || (s.detached.load(Ordering::SeqCst) && s.alive.load(Ordering::SeqCst) == 0)
    }

    pub(in crate::runtime) fn run(mut self) {
        let base = self.shared.config.dispatch_interval;
        let mut interval = base;
        loop {
            if self.exiting() {
                return;
            }
            let s = &self.shared;
            let procs = s.processers_snapshot();
            // Acquire: pairs with the Release swap in `alert`, so that the
            // sample sees the `reported` count written before it.
            let alerted = s.dispatch.alert.swap(false, Ordering::Acquire);
            let Sample {
                any_running,
                any_suspect,
                all_watched,
                any_movable,
            } = self.sample(&procs);
            self.trace_blocked(&procs);
            self.rescue_and_grow(&procs);
            self.balance(&procs);
            self.cover_timers_and_io(&procs, interval);
            // While every running task switches between samples, back off
            // (doubling, up to BACKOFF_MAX times the base, BACKOFF_WATCHED
            // while busy peers watch every running Processer); at a peer's
            // alert, or a suspect while movable work waits, sample at the
            // base interval again.
            // And up to NOTHING_QUEUED_NAP while no awake Processer has
            // movable work queued, suspects or not (see "Nothing to
            // rescue"), when that is longer than BACKOFF_MAX intervals.
            let short_most = base.saturating_mul(BACKOFF_MAX);
            let long_most = base
                .saturating_mul(BACKOFF_NOTHING_QUEUED)
                .min(NOTHING_QUEUED_NAP);
            let io_uncovered = self.shared.reactors_if_made().is_some_and(|rs| {
                procs.iter().filter(|p| p.kind == Kind::Core).any(|p| {
                    rs.get(p.index).is_some_and(|r| {
                        r.has_sources()
                            && !r.has_blocking_poller()
                            && r.polled_before(cover_after(p, r, IO_COVERED_WITHIN))
                    })
                })
            });
            let nothing_to_rescue = !any_movable && !io_uncovered && long_most > short_most;
            interval = if alerted || (any_suspect && !nothing_to_rescue) {
                base
            } else {
                let mut most = if all_watched {
                    base.saturating_mul(BACKOFF_WATCHED)
                } else {
                    short_most
                };
                if nothing_to_rescue {
                    most = most.max(long_most);
                }
                interval.saturating_mul(2).min(most)
            };
            let d = &self.shared.dispatch;
            d.backed_off.store(interval > base, Ordering::Relaxed);
            d.long_nap.store(interval > short_most, Ordering::Relaxed);
            // Park while everything sleeps; otherwise sample again after
            // one interval.
            if any_running || !self.deep_sleep(&procs) {
                self.nap(interval);
            }
        }
    }

    /// Waits `d` between two samples, or less when [`wake`] says to exit.
    ///
    /// `park_timeout`, not `thread::sleep`: an unpark ends the wait at once.
    /// An unpark that is not about exiting (a stale token from the deep
    /// sleep protocol) only makes it park again for the time left. The
    /// thread's timer slack (1 us) keeps the timeout as exact as a sleep.
    pub(in crate::runtime) fn nap(&self, d: Duration) {
        let deadline = Instant::now().checked_add(d);
        loop {
            if self.exiting() || self.shared.dispatch.alert.load(Ordering::Relaxed) {
                return;
            }
            match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return;
                    }
                    std::thread::park_timeout(left);
                }
                None => std::thread::park(),
            }
        }
    }

    /// Step 6: parks while every Processer sleeps. Returns false if it did
    /// not park (somebody is awake).
    pub(in crate::runtime) fn deep_sleep(&self, procs: &[Arc<ProcesserShared>]) -> bool {
        let d = &self.shared.dispatch;
        d.deep.store(true, Ordering::SeqCst);
        // Order `deep` before the loads below; pairs with the fence in
        // processer_awake.
        fence(Ordering::SeqCst);
        // A sleeper with work in its queues is not idle: the next cycle's
        // balance wakes it (a safety net; no path should leave one so).
        let all_asleep = procs.iter().all(|p| {
            (p.sleeping.load(Ordering::SeqCst) && p.queued() == 0)
                || p.retired.load(Ordering::SeqCst)
        });
        if !all_asleep {
            d.deep.store(false, Ordering::Relaxed);
            return false;
        }
        while d.deep.load(Ordering::SeqCst) {
            let s = &self.shared;
            // Leave only to exit: a detached scheduler with parked tasks
            // still sleeps here (the last task's end wakes us).
            if s.stopped.load(Ordering::Acquire)
                || (s.detached.load(Ordering::SeqCst) && s.alive.load(Ordering::SeqCst) == 0)
            {
                break;
            }
            std::thread::park();
        }
        true
    }
}

/// `d` in nanoseconds, saturating.
pub(in crate::runtime) fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
