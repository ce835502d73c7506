//! The Dispatcher: one thread per scheduler that notices Processers whose
//! running task blocks the thread, moves the tasks queued behind them to
//! other Processers, and grows the thread set when every Processer is
//! blocked (libgo's `Scheduler::DispatcherThread`).
//!
//! # One cycle
//!
//! 1. **Sample.** For every Processer read the switch counter and the
//!    `running` flag. A counter that moved, or no task switched in, means
//!    healthy: clear `blocked` at once. The same counter with a task
//!    switched in means the same task has held the thread since the sample
//!    that first saw that counter value: a *suspect*.
//! 2. **Judge a suspect.** It is marked **blocked** when either
//!    - *kernel-blocked*: on two consecutive samples its thread's CPU clock
//!      (`pthread_getcpuclockid`) advanced by less than a quarter of the wall
//!      time since the previous sample, and its state in
//!      `/proc/self/task/<tid>/stat` was sleeping (`S`/`D`): it waits in the
//!      kernel (a blocking read, `std::thread::sleep`, a contended lock). The
//!      state check keeps a thread that the OS merely preempted (state `R`,
//!      also gaining no CPU time) from being taken for blocked, and asking
//!      twice keeps a brief futex wait from counting. A thread asleep in a
//!      page fault or an address-space call (`mmap`, `mprotect`, ...) waits
//!      for its own process's address-space lock and is not counted, and a
//!      sample that finds some suspect runnable but starved of CPU does not
//!      count for the others (a preempted lock holder); see [`judge`];
//!    - *hog*: it has held for `block_timeout` (default 10 ms) and its thread
//!      used at least half of that time on a CPU: a long computation. A
//!      thread starved of CPU by the OS is not the task's fault, and moving
//!      tasks off it would not find them a free CPU either. The CPU time
//!      is measured over at least one interval.
//!
//!    With the defaults (100 us interval) a kernel-blocked Processer is
//!    caught about 0.5 ms after it blocked (`benches/blocking.rs`), and a
//!    CPU-bound one after 10 ms, so short computations are never mistaken
//!    for blocked threads.
//! 3. **Rescue.** Every task in a blocked Processer's new and runnable
//!    queues (never the running one, never pinned ones, which live in
//!    separate queues) is stolen and handed round-robin to the active
//!    Processers, least loaded first; those given tasks are woken. Wake-ups aimed at a
//!    blocked Processer are routed elsewhere by the scheduler, and a blocked
//!    Processer's queues are emptied again every cycle.
//! 4. **Grow.** If every Processer is blocked and tasks are waiting, start an
//!    extra Processer thread, never exceeding `max_threads`. Extra threads
//!    exit after `idle_thread_timeout` without work (the Processer side of
//!    that is in `Shared::should_exit`).
//! 5. **Balance.** While an active Processer has two or more queued tasks
//!    and nobody searches, one sleeper is woken to search; it steals half of
//!    the backlog and, finding work, wakes the next (the scheduler's wake
//!    chain). A sleeping Processer with queued work of its own is woken.
//!    This step looks at up to [`BALANCE_SLICE`] Processers per cycle,
//!    taking turns through a larger table.
//! 6. **Sleep.** While any task runs, wait one sampling period: the dispatch
//!    interval while some Processer is a suspect or a peer reported one,
//!    doubling while every running task keeps switching, up to four times
//!    the interval, or eight times while busy peers watch every running
//!    Processer (below). A cycle costs about 12 us of CPU on a virtual
//!    machine, nearly all of it the wake-up itself: 3% of a core at a
//!    400 us period, 1.6% at 800 us (`benches/dispatcher_cpu.rs`). When
//!    every Processer sleeps, park until a Processer wakes (no polling while
//!    the scheduler is idle). See [`DispatchState::deep`] for the protocol.
//!    Both waits are `thread::park` (with a timeout for the interval), never
//!    `thread::sleep`: [`wake`] (shutdown, detach) ends either at once, so
//!    stopping never waits out an interval.
//!
//! The bookkeeping is O(n) per cycle: a few loads per Processer in the
//! sample, with the views kept in a `Vec` in table order (rebuilt only when
//! the table changes), and a bounded balance slice. With 2,000 Processers a
//! cycle's bookkeeping takes about 20 us (`benches/processers.rs`).
//!
//! # Peers watch each other
//!
//! A backed-off Dispatcher would see a block that starts just after its
//! sample a whole period late, and a shorter period costs a wake-up each.
//! Busy Processers already look outward every `NEW_QUEUE_INTERVAL`th pick
//! (timers, readiness, remote queues); there each also looks at one peer,
//! in turns: when a peer has had a task switched in and the same switch
//! count for [`watch_after`] (two intervals), it records that count in the
//! peer's `reported` and, if the Dispatcher is backed off, ends its nap
//! ([`alert`]). The Dispatcher then samples at once, takes the reported
//! count as held for the watch time already (if the counter still shows
//! it), and samples at the base interval until the suspect is judged. So a
//! block that a watcher sees is caught about `watch_after` plus two
//! intervals after it starts, whatever the period. A report is a hint: the
//! Dispatcher judges with its own samples, which for the kernel rule stay
//! at least an interval apart however early an alert wakes it, and a stale
//! report (the count moved) is ignored.
//!
//! The Dispatcher backs off to eight intervals only while at least two
//! Processers are *watchers*: not asleep or blocked at the sample, and
//! switching fast enough since the previous one to look at each of their
//! peers at least once per 50 us (so with n Processers, n - 1 times as
//! fast as with two). Then every running Processer has a watcher other
//! than itself. Otherwise it keeps to four. The rate is the past
//! interval's: if every watcher blocks at once (all busy Processers stuck
//! on the same slow lock, say), nobody reports, and the period already
//! chosen stands, so such a block is caught up to eight intervals later
//! than at four (about 1.8 ms instead of 1 ms at the defaults).
//!
//! # Nothing to rescue
//!
//! A rescue moves queued work: fresh tasks, unbound wake-ups, placed tasks.
//! A server's Processers mostly hold none (every connection's task is bound
//! to its thread), and there the Dispatcher's wake-ups, at four intervals,
//! were 7 % of the server's CPU (about 25 us each under load, 3,000 a
//! second; `perf` at 1,000 HTTP connections). So while no awake Processer
//! has movable work queued at the sample, the period backs off up to
//! [`NOTHING_QUEUED_NAP`] (3.2 ms, 32 intervals at the defaults), even
//! while some Processer is a suspect (on 2 cores a server's threads are
//! preempted by its clients thousands of times a second, and each
//! preemption longer than a sample made a suspect: three cycles in four
//! at 1,000 echo connections had one, and each put the period back to
//! the base interval), and
//! whoever queues movable work on a Processer that runs a task while the
//! Dispatcher naps that long ends the nap ([`work_queued`]: a spawn, a
//! wake-up of an unbound task, a remote push, a placement). The Dispatcher
//! then samples at the base interval, and keeps short periods while the
//! work waits, so work queued behind a block is rescued as soon as
//! before. What waits longer is what needs no rescue: a block with nothing
//! queued behind it is caught up to 3.2 ms later (the `blocked` mark then
//! only routes later wake-ups elsewhere, and those end the nap), and the
//! timers of a Processer stuck in one long task are fired for it up to
//! 3.2 ms later. Nor does it nap long while nobody looks after the reactor
//! (nobody waits in it, and nobody polled it for [`IO_COVERED_WITHIN`]):
//! then its own poll may be what delivers readiness. The hog rule's
//! `block_timeout` (10 ms) is unchanged. A
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

use crate::runtime::lock::Mutex;
use crossbeam_deque::Steal;

use super::context;
use super::io::BUSY_POLL;
use super::processer::NEW_QUEUE_INTERVAL;
use super::processer_shared::{Kind, ProcesserShared};
use super::shared::Shared;
use super::task::{self, Runnable};
use super::timer;

/// A kernel-blocked suspect's thread must have used less than
/// `1 / CPU_FRACTION` of the wall time.
const CPU_FRACTION: u32 = 4;
/// Consecutive samples a suspect must be found asleep in the kernel.
const KERNEL_SAMPLES: u8 = 2;
/// The sampling period backs off to at most this many dispatch intervals
/// while no Processer is a suspect.
const BACKOFF_MAX: u32 = 4;
/// ... and to this many while every running Processer is watched by a busy
/// peer (see "Peers watch each other" in the module docs).
const BACKOFF_WATCHED: u32 = 8;
/// ... and to at most this long while, at the sample, no Processer that is
/// awake has work queued that a rescue could move (see "Nothing to rescue"
/// in the module docs): 32 intervals at the default interval. Never less
/// than `BACKOFF_MAX` intervals: with a dispatch interval of 800 us or more
/// the rule changes nothing.
const NOTHING_QUEUED_NAP: Duration = Duration::from_micros(3200);
/// ... and to at most this many intervals for it.
const BACKOFF_NOTHING_QUEUED: u32 = 32;
/// ... and only while the reactor is looked after: a Processer waits in
/// it, or one polled it within this time (busy Processers poll every 61st
/// pick). Otherwise the Dispatcher's own poll may be the one that delivers
/// readiness (`cover_timers_and_io`), and must not wait a long nap.
const IO_COVERED_WITHIN: Duration = Duration::from_millis(1);
/// A Processer counts as a watcher when it passes its watch point (every
/// `NEW_QUEUE_INTERVAL`th pick) at least once per this much time.
const WATCH_PERIOD: Duration = Duration::from_micros(50);

/// How long a peer must find a Processer's switch count unchanged, with a
/// task switched in, before it tells the Dispatcher: two dispatch
/// intervals, the shortest hold the Dispatcher's own kernel-block test
/// accepts.
pub(crate) fn watch_after(cfg: &super::config::Config) -> Duration {
    cfg.dispatch_interval.saturating_mul(2)
}
/// Processers the balance step looks at per cycle at most, in turns: all of
/// them up to this many, a bounded slice of a larger table.
const BALANCE_SLICE: usize = 64;

/// The Dispatcher's state, shared with the rest of the scheduler.
#[derive(Default)]
pub(crate) struct DispatchState {
    /// Times a Processer was marked blocked.
    pub(crate) detections: AtomicU64,
    /// Tasks moved off blocked Processers.
    pub(crate) rescued: AtomicU64,
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
fn end_long_nap(d: &DispatchState) {
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

/// What the Dispatcher remembers about one Processer between cycles.
struct View {
    /// The Processer. Holding it keeps its address from being reused, so
    /// pointer equality with a table entry identifies it.
    p: Arc<ProcesserShared>,
    /// The switch counter last seen.
    switches: u64,
    /// When that counter value was first seen with a task switched in.
    since: Instant,
    /// CPU clock of the thread at the first suspect sample, and when.
    first_cpu: Option<(Instant, Duration)>,
    /// CPU clock at the previous suspect sample, and when.
    last_cpu: Option<(Instant, Duration)>,
    /// Consecutive suspect samples that found the thread asleep in the
    /// kernel having used under a quarter of the interval's CPU time.
    sleepy: u8,
}

impl View {
    fn new(p: &Arc<ProcesserShared>, switches: u64, now: Instant) -> View {
        View {
            p: p.clone(),
            switches,
            since: now,
            first_cpu: None,
            last_cpu: None,
            sleepy: 0,
        }
    }

    /// Starts over: `switches` first seen now. (Writes only what changed:
    /// it runs for every healthy Processer at every sample.)
    fn reset(&mut self, switches: u64, now: Instant) {
        self.switches = switches;
        self.since = now;
        if self.first_cpu.is_some() || self.last_cpu.is_some() || self.sleepy != 0 {
            self.first_cpu = None;
            self.last_cpu = None;
            self.sleepy = 0;
        }
    }
}

/// What a sample found, for the choice of the next sampling period.
struct Sample {
    /// A task is switched in somewhere.
    any_running: bool,
    /// Some Processer holds the same task as at the previous sample.
    any_suspect: bool,
    /// Every running Processer has a peer that passes its watch point
    /// often (a *watcher*), and will report it if it stops switching.
    all_watched: bool,
    /// Some Processer that is awake has work queued that a rescue could
    /// move (its new queue, runnable queue or next-task slot, or tasks
    /// placed on it).
    any_movable: bool,
}

struct Dispatcher {
    shared: Arc<Shared>,
    /// When the previous sample was taken.
    last_sample: Instant,
    /// One view per Processer, in table order (by slot index): `views[i]`
    /// is about `procs[i]` of the last sample. Rebuilt (O(n)) only when the
    /// table changed.
    views: Vec<View>,
    /// Positions in the last sampled table of the Processers marked
    /// blocked.
    blocked: Vec<usize>,
    /// The suspects of this sample and what was seen of each, judged once
    /// all are seen (kept to reuse its allocation).
    seen: Vec<(usize, Seen)>,
    /// Where the next balance slice starts.
    balance_from: usize,
    /// Tasks a poll of the reactor woke (kept to reuse its allocation).
    woken: Vec<Runnable>,
    /// Scratch space of a firing of timers (kept to reuse its allocation).
    due: Vec<timer::Action>,
    /// Tasks a firing of timers woke (kept to reuse its allocation).
    fired: Vec<Runnable>,
}

impl Dispatcher {
    fn new(shared: Arc<Shared>) -> Dispatcher {
        Dispatcher {
            shared,
            last_sample: Instant::now(),
            views: Vec::new(),
            blocked: Vec::new(),
            seen: Vec::new(),
            balance_from: 0,
            woken: Vec::new(),
            due: Vec::new(),
            fired: Vec::new(),
        }
    }

    /// Whether the Dispatcher should leave: the scheduler stopped, or it is
    /// detached with nothing left alive.
    fn exiting(&self) -> bool {
        let s = &self.shared;
        // `stopped`: Acquire, pairs with the SeqCst store in
        // `Shared::stop_threads_locked`. `detached` and `alive`: SeqCst, as
        // in `Shared::should_exit`, against the SeqCst store of `detached`
        // and the last task's decrement of `alive` (each followed by a wake).
        s.stopped.load(Ordering::Acquire)
            || (s.detached.load(Ordering::SeqCst) && s.alive.load(Ordering::SeqCst) == 0)
    }

    fn run(mut self) {
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
            let io_uncovered = self
                .shared
                .reactor_with_sources()
                .is_some_and(|r| !r.has_blocking_poller() && r.polled_before(IO_COVERED_WITHIN));
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
    fn nap(&self, d: Duration) {
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

    /// Step 1-2: updates every Processer's `blocked` flag, and says what
    /// the sampling period may be (see [`Sample`]).
    ///
    /// O(n) per cycle: a few loads per Processer, and the views kept in
    /// table order.
    fn sample(&mut self, procs: &[Arc<ProcesserShared>]) -> Sample {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.last_sample);
        self.last_sample = now;
        let watch_after = watch_after(&self.shared.config);
        // A Processer passes its watch point every NEW_QUEUE_INTERVAL picks
        // and looks at its n - 1 peers in turns there; it watches closely
        // enough when it looks at each peer at least once per WATCH_PERIOD.
        let peers = procs.len().saturating_sub(1).max(1) as u128;
        let watcher_picks = u128::from(NEW_QUEUE_INTERVAL) * peers * elapsed.as_nanos()
            / WATCH_PERIOD.as_nanos().max(1);
        let mut any_running = false;
        let mut any_suspect = false;
        let mut any_movable = false;
        let mut watchers = 0usize;
        // Some suspect is runnable but got next to no CPU since the previous
        // sample.
        let mut starved = false;
        self.align_views(procs, now);
        self.blocked.clear();
        for (i, (p, v)) in procs.iter().zip(self.views.iter_mut()).enumerate() {
            let switches = p.switches.load(Ordering::Relaxed);
            let running = p.running.load(Ordering::Relaxed);
            any_running |= running;
            if !any_movable && !p.sleeping.load(Ordering::Relaxed) {
                any_movable = p.has_movable();
            }
            // A watcher switched fast enough since the last sample, and is
            // not asleep or blocked now (either would stop its looks).
            let watcher = u128::from(switches.wrapping_sub(v.switches)) >= watcher_picks.max(1)
                && !p.sleeping.load(Ordering::Relaxed)
                && !p.blocked.load(Ordering::Relaxed);
            watchers += usize::from(watcher);
            if running && switches != v.switches && p.reported.load(Ordering::Relaxed) == switches {
                // A peer has seen this count for the watch time already:
                // take its word for how long the task has held the thread.
                v.reset(switches, now.checked_sub(watch_after).unwrap_or(now));
            }
            if switches != v.switches || !running {
                v.reset(switches, now);
                if p.blocked.load(Ordering::Relaxed) {
                    p.blocked.store(false, Ordering::Relaxed);
                }
                continue;
            }
            any_suspect = true;
            if p.blocked.load(Ordering::Relaxed) {
                self.blocked.push(i);
            } else {
                let seen = observe(&self.shared.config, p, v, now);
                starved |= seen.wait == Wait::Starved;
                self.seen.push((i, seen));
            }
        }
        // Judged only now that every suspect was seen: a suspect starved of
        // CPU anywhere in the table keeps this sample from counting against
        // the sleeping ones (see `judge`).
        for (i, seen) in self.seen.drain(..) {
            if judge(&self.shared.config, &mut self.views[i], seen, starved, now) {
                procs[i].blocked.store(true, Ordering::Relaxed);
                self.blocked.push(i);
                self.shared
                    .dispatch
                    .detections
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        // Every running Processer has a watcher other than itself. (Nobody
        // running is no reason to back off further: the next task to start
        // may block, with nobody looking.)
        let all_watched = watchers >= 2;
        Sample {
            any_running,
            any_suspect,
            all_watched,
            any_movable,
        }
    }

    /// Makes `views[i]` the view of `procs[i]`: a pointer comparison per
    /// Processer while the table is unchanged; otherwise a merge by slot
    /// index (both are sorted by it) that keeps the views of the Processers
    /// still there, drops those of the ones gone, and starts new ones.
    fn align_views(&mut self, procs: &[Arc<ProcesserShared>], now: Instant) {
        let aligned = self.views.len() == procs.len()
            && self
                .views
                .iter()
                .zip(procs)
                .all(|(v, p)| Arc::ptr_eq(&v.p, p));
        if aligned {
            return;
        }
        let mut old = std::mem::take(&mut self.views).into_iter().peekable();
        self.views.reserve(procs.len());
        for p in procs {
            while old.next_if(|v| v.p.index < p.index).is_some() {}
            let v = match old.next_if(|v| Arc::ptr_eq(&v.p, p)) {
                Some(v) => v,
                None => View::new(p, p.switches.load(Ordering::Relaxed), now),
            };
            self.views.push(v);
        }
    }

    /// Steps 3-4: empties blocked Processers' queues into active ones,
    /// starting an extra Processer when none is active.
    fn rescue_and_grow(&mut self, procs: &[Arc<ProcesserShared>]) {
        let s = &self.shared;
        if self.blocked.is_empty() {
            return;
        }
        // The ones `sample` found blocked (a Processer may have cleared its
        // own mark since, at its next switch).
        let blocked: Vec<&Arc<ProcesserShared>> = self
            .blocked
            .iter()
            .map(|&i| &procs[i])
            .filter(|p| p.blocked.load(Ordering::Relaxed))
            .collect();
        if blocked.is_empty() {
            return;
        }
        let waiting: usize = blocked
            .iter()
            .map(|p| p.new.len() + p.stealer.len() + usize::from(p.runnext.is_occupied()))
            .sum();
        // Fresh tasks placed on a blocked Processer wait in its pinned queue
        // among the wake-ups of tasks bound there (see `steal_all`): worth a
        // look when some Processer can take them, not a new thread, since
        // most of that queue may have to stay.
        let placed = blocked
            .iter()
            .any(|p| p.placed.load(Ordering::Relaxed) != 0);
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
        let mut tasks: Vec<Runnable> = Vec::new();
        for p in &blocked {
            let before = tasks.len();
            let kept = steal_all(p, &mut tasks);
            // Pushed back as any push from another thread, then woken: the
            // owner may have unblocked meanwhile, found its pinned queue
            // empty (we held its tasks) and gone to sleep.
            if !kept.is_empty() && s.push_batch_to(p, kept) {
                s.wake_proc(p);
            }
            p.rescued
                .fetch_add((tasks.len() - before) as u64, Ordering::Relaxed);
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
    ///   pick: when its earliest timer is due, raise its `timers_due` flag,
    ///   which it reads at every pick. One that is blocked, or stuck in one
    ///   long task, cannot: fire its timers overdue by more than
    ///   [`timer::OVERDUE`] (their tasks go through the routing, which
    ///   avoids blocked Processers). A sleeping Processer wakes for its own.
    /// - When nobody has polled the reactor for two intervals (every
    ///   Processer busy, or blocked), poll it without waiting, and hand the
    ///   tasks it woke out like rescued ones, in batches to the least loaded
    ///   active Processers.
    fn cover_timers_and_io(&mut self, procs: &[Arc<ProcesserShared>], interval: Duration) {
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
                p.timers_due.store(true, Ordering::Relaxed);
            }
        }
        let Some(r) = s.reactor_with_sources() else {
            return;
        };
        if !r.polled_before(interval.saturating_mul(2).max(BUSY_POLL)) {
            return;
        }
        let Some(mut poller) = r.try_poll() else {
            return;
        };
        poller.poll(Some(Duration::ZERO), &mut self.woken);
        drop(poller);
        if self.woken.is_empty() {
            return;
        }
        let mut ours = Vec::with_capacity(self.woken.len());
        for t in self.woken.drain(..) {
            if Arc::ptr_eq(&t.header().shared, s) && t.header().pin().is_none() {
                ours.push(t);
            } else {
                context::schedule(t); // pinned, or another scheduler's
            }
        }
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
    fn balance(&mut self, procs: &[Arc<ProcesserShared>]) {
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

    /// Step 6: parks while every Processer sleeps. Returns false if it did
    /// not park (somebody is awake).
    fn deep_sleep(&self, procs: &[Arc<ProcesserShared>]) -> bool {
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

/// What a sample found a suspect's thread doing since the previous one.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Wait {
    /// Nothing new: the first sample of this suspect, or one sooner than an
    /// interval after the last that counted (a peer's alert ended the nap
    /// early), or no CPU clock.
    Unjudged,
    /// Asleep in the kernel (`S`/`D`) having used under `1 / CPU_FRACTION`
    /// of the wall time: what the kernel rule counts.
    Asleep,
    /// Runnable (`R`) but given under `1 / CPU_FRACTION` of the wall time:
    /// the OS preempted it.
    Starved,
    /// Used CPU; or asleep inside a call that changes the process's own
    /// address space (see [`in_address_space_call`]); or its state could
    /// not be read.
    Other,
}

/// One sample of one suspect, taken by [`observe`] and judged by [`judge`].
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// The thread's CPU clock now, if it can be read.
    cpu: Option<Duration>,
    wait: Wait,
}

/// Step 2, first half, for one suspect: reads its thread's CPU clock and,
/// when the clock barely moved, its state, and notes the clock in `v`.
fn observe(cfg: &super::config::Config, p: &ProcesserShared, v: &mut View, now: Instant) -> Seen {
    let Some(cpu) = p.cpu_time() else {
        return Seen {
            cpu: None,
            wait: Wait::Unjudged,
        };
    };
    let wait = match v.last_cpu {
        // A sample sooner than one interval after the last one counted (a
        // peer's alert ended the nap early) says nothing new: the two
        // samples of the kernel rule stay at least an interval apart, so a
        // brief futex wait cannot pass for a block.
        Some((t, _)) if now.saturating_duration_since(t) < cfg.dispatch_interval => Wait::Unjudged,
        Some((t, c)) => {
            let wall = now.saturating_duration_since(t);
            v.last_cpu = Some((now, cpu));
            if cpu.saturating_sub(c) >= wall / CPU_FRACTION {
                Wait::Other
            } else {
                match p.sleeping_in_kernel() {
                    Some(true) if in_address_space_call(p) => Wait::Other,
                    Some(true) => Wait::Asleep,
                    Some(false) => Wait::Starved,
                    None => Wait::Other,
                }
            }
        }
        None => {
            v.last_cpu = Some((now, cpu));
            Wait::Unjudged
        }
    };
    Seen {
        cpu: Some(cpu),
        wait,
    }
}

/// Step 2, second half, for one suspect: has the same task held the thread
/// long enough, asleep in the kernel or burning CPU, to call the Processer
/// blocked? `starved`: some suspect of this sample was [`Wait::Starved`].
///
/// The kernel rule counts a sample only while no suspect is starved. A
/// thread of the process that holds a lock (the allocator's arena lock, the
/// address-space lock) and is preempted makes its waiters sleep for a time
/// slice, and a cold start of thousands of tasks on two busy CPUs does
/// exactly that (`tests/net_echo_cold.rs`): such a sample neither counts
/// nor clears the count. Moving tasks to a Processer that gets no CPU would
/// not run them sooner either (the hog rule's reasoning). A real block is
/// caught at the first samples that find the other threads running.
fn judge(
    cfg: &super::config::Config,
    v: &mut View,
    seen: Seen,
    starved: bool,
    now: Instant,
) -> bool {
    let held = now.saturating_duration_since(v.since);
    let Some(cpu) = seen.cpu else {
        // No CPU clock: the wall-clock rule alone.
        return held >= cfg.block_timeout;
    };
    match seen.wait {
        Wait::Asleep if !starved => v.sleepy = v.sleepy.saturating_add(1),
        Wait::Asleep | Wait::Unjudged => {}
        Wait::Starved | Wait::Other => v.sleepy = 0,
    }
    let (t0, c0) = *v.first_cpu.get_or_insert((now, cpu));
    if cfg.kernel_block_detection
        && v.sleepy >= KERNEL_SAMPLES
        && held >= cfg.dispatch_interval.saturating_mul(2)
    {
        return true;
    }
    // A hog burns CPU; a thread that merely waits for a CPU (preempted) is
    // neither blocked nor a hog. The CPU time is measured over at least an
    // interval: at the first sample of a suspect the window is empty, and
    // an empty window proves nothing (a Dispatcher that was itself kept
    // off the CPU for `block_timeout` once took every suspect for a hog).
    let window = now.saturating_duration_since(t0);
    let busy =
        window >= cfg.dispatch_interval && cpu.saturating_sub(c0).saturating_mul(2) >= window;
    held >= cfg.block_timeout && busy
}

/// Whether `p`'s thread sits in a page fault, or in a system call that
/// changes the process's own address space (`mmap`, `mprotect`, `munmap`,
/// `mremap`, `madvise`, `brk`), read from `/proc/self/task/<tid>/syscall`.
///
/// Asleep there, it waits for the process's address-space lock, held by
/// another thread of this process for a mapping change or a fault: a
/// bounded critical section, not the outside world. A cold start maps
/// thousands of stacks and grows the allocator's heaps while the tasks
/// fault in fresh pages, and the waits stretch to a time slice when the
/// holder is preempted: 0.3 to 2.5 ms seen in `do_mprotect_pkey` and
/// `lock_mm_and_find_vma` (`tests/net_echo_cold.rs`), long enough for the
/// kernel rule. Tasks moved elsewhere would take the same lock at their
/// next allocation or fault. (A fault on a file mapping that reads the
/// disk is not told apart: such a wait is not counted either.) About
/// 10 us, read only for a suspect already found asleep with its CPU clock
/// still.
fn in_address_space_call(p: &ProcesserShared) -> bool {
    use std::io::{Read, Write};
    let Some(tid) = p.tid() else {
        return false;
    };
    let mut path = [0u8; 64];
    let mut rest = &mut path[..];
    if write!(rest, "/proc/self/task/{tid}/syscall").is_err() {
        return false;
    }
    let len = 64 - rest.len();
    let Ok(path) = std::str::from_utf8(&path[..len]) else {
        return false;
    };
    // "nr arg1 ... sp pc" while in a system call; "running"; or "-1 sp pc"
    // asleep outside one: in a page fault.
    let mut buf = [0u8; 32];
    let Ok(n) = std::fs::File::open(path).and_then(|mut f| f.read(&mut buf)) else {
        return false;
    };
    let nr = buf[..n]
        .split(|&b| b == b' ')
        .next()
        .and_then(|t| std::str::from_utf8(t).ok())
        .and_then(|t| t.trim().parse::<libc::c_long>().ok());
    matches!(
        nr,
        Some(
            -1 | libc::SYS_mmap
                | libc::SYS_mprotect
                | libc::SYS_munmap
                | libc::SYS_mremap
                | libc::SYS_madvise
                | libc::SYS_brk
        )
    )
}

/// Hands `tasks` out round-robin to `active`, least loaded first, and wakes
/// the ones given tasks (not every active Processer: with many Processers
/// that would be a wake-up storm).
fn hand_out(s: &Shared, active: &mut [Arc<ProcesserShared>], tasks: Vec<Runnable>) {
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
/// woke ("Firing a batch" in `runtime/timer.rs`):
///
/// - tasks bound to `owner` (most sleepers: a started task stays on its
///   thread) go to its pinned queue in one batch, one fence for them all,
///   and `owner` is woken if it sleeps. It files them ahead of its next
///   firing's, so wake-ups keep their deadline order;
/// - unpinned tasks are handed out like rescued ones, to the least loaded
///   active Processers other than `owner` (late, so held up), woken;
/// - tasks pinned elsewhere go through the routing.
fn deliver_fired(
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

/// Processers that can take rescued work: not blocked, not leaving, and run
/// by a scheduler thread (not a `block_on` caller, which leaves when its
/// root task ends).
fn active_targets(procs: &[Arc<ProcesserShared>]) -> Vec<Arc<ProcesserShared>> {
    procs.iter().filter(|p| is_active(p)).cloned().collect()
}

fn is_active(p: &ProcesserShared) -> bool {
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
fn steal_all(p: &ProcesserShared, out: &mut Vec<Runnable>) -> Vec<Runnable> {
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
