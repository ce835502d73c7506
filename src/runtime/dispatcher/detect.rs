//! Steps 1 and 2 of the Dispatcher's cycle: sampling every Processer's
//! switch counter and judging the suspects, a Processer whose running task
//! has not switched since the previous sample.
//!
//! This file owns the per-Processer views kept between samples and the two
//! rules that mark a suspect blocked. Invariant: a judgement rests on the
//! Dispatcher's own samples, at least an interval apart; a peer's report
//! only wakes the Dispatcher early.
//!
//! # The rules
//!
//! A suspect is marked **blocked** when either
//! - *kernel-blocked*: on two consecutive samples its thread's CPU clock
//!   (`pthread_getcpuclockid`) advanced by less than a quarter of the wall
//!   time since the previous sample, and its state in
//!   `/proc/self/task/<tid>/stat` was sleeping (`S`/`D`): it waits in the
//!   kernel (a blocking read, `std::thread::sleep`, a contended lock). The
//!   state check keeps a thread that the OS merely preempted (state `R`,
//!   also gaining no CPU time) from being taken for blocked, and asking
//!   twice keeps a brief futex wait from counting. A thread asleep in a
//!   page fault or an address-space call (`mmap`, `mprotect`, ...) waits
//!   for its own process's address-space lock and is not counted, and a
//!   sample that finds some suspect runnable but starved of CPU does not
//!   count for the others (a preempted lock holder); see [`judge`];
//! - *hog*: it has held for `block_timeout` and its thread
//!   has used at least half of `block_timeout` on a CPU since the first
//!   suspect sample: a long computation. CPU time used, not its share
//!   of the wall time: on a loaded machine a hog gets a fraction of a
//!   CPU, and the work queued behind it gets none until it moves. A
//!   thread the OS kept off the CPU (or a Dispatcher kept off it, that
//!   samples late) has used none, and is not taken for a hog.
//!
//! A kernel-blocked Processer is caught a few intervals after it blocked
//! (`bench/benches/blocking.rs` measures it), and a CPU-bound one after
//! `block_timeout` on an idle machine (later on a loaded one, by its
//! share of a CPU), so short computations are never mistaken for
//! blocked threads.
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
//! ([`alert`](crate::runtime::dispatcher::alert)). The Dispatcher then samples at
//! once, takes the reported count as held for the watch time already (if the counter still shows
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
//! rather than four.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::runtime::dispatcher::rescue::queued_movable;
use crate::runtime::dispatcher::Dispatcher;
use crate::runtime::dump::blocked_call;
use crate::runtime::processer::shared::{BlockedCall, ProcesserShared};
use crate::runtime::processer::NEW_QUEUE_INTERVAL;

/// The backtrace request in flight ([`Dispatcher::trace_blocked`]).
pub(in crate::runtime) struct Tracing {
    /// The Processer whose thread was asked.
    pub(in crate::runtime) p: Arc<ProcesserShared>,
    /// The switch count of the spell it was asked in.
    pub(in crate::runtime) switches: u64,
    pub(in crate::runtime) request: blocked_call::Request,
}

/// A kernel-blocked suspect's thread must have used less than
/// `1 / CPU_FRACTION` of the wall time.
pub(in crate::runtime) const CPU_FRACTION: u32 = 4;

/// Consecutive samples a suspect must be found asleep in the kernel.
pub(in crate::runtime) const KERNEL_SAMPLES: u8 = 2;

/// A Processer counts as a watcher when it passes its watch point (every
/// `NEW_QUEUE_INTERVAL`th pick) at least once per this much time.
pub(in crate::runtime) const WATCH_PERIOD: Duration = Duration::from_micros(50);

/// How long a peer must find a Processer's switch count unchanged, with a
/// task switched in, before it tells the Dispatcher: two dispatch
/// intervals, the shortest hold the Dispatcher's own kernel-block test
/// accepts.
pub(crate) fn watch_after(cfg: &crate::runtime::config::Config) -> Duration {
    cfg.dispatch_interval.saturating_mul(2)
}

/// What the Dispatcher remembers about one Processer between cycles.
pub(in crate::runtime) struct View {
    /// The Processer. Holding it keeps its address from being reused, so
    /// pointer equality with a table entry identifies it.
    pub(in crate::runtime) p: Arc<ProcesserShared>,
    /// The switch counter last seen.
    pub(in crate::runtime) switches: u64,
    /// When that counter value was first seen with a task switched in.
    pub(in crate::runtime) since: Instant,
    /// CPU clock of the thread at the first suspect sample, and when.
    pub(in crate::runtime) first_cpu: Option<(Instant, Duration)>,
    /// CPU clock at the previous suspect sample, and when.
    pub(in crate::runtime) last_cpu: Option<(Instant, Duration)>,
    /// Consecutive suspect samples that found the thread asleep in the
    /// kernel having used under a quarter of the interval's CPU time.
    pub(in crate::runtime) sleepy: u8,
    /// While blocked: the last rescue left only moved tasks that must stay
    /// in its queues (see [`Held`]).
    pub(in crate::runtime) held: Option<Held>,
    /// While blocked: the count last stored in the Processer's `behind`
    /// (see [`Dispatcher::count_behind`]).
    pub(in crate::runtime) behind: usize,
    /// While blocked: this spell was counted in `blocked_with_behind`.
    pub(in crate::runtime) behind_counted: bool,
    /// While blocked: the thread's backtrace was asked for (or found
    /// impossible) in this spell (see [`Dispatcher::trace_blocked`]).
    pub(in crate::runtime) traced: bool,
}

/// What the last rescue from a blocked Processer left behind: only tasks
/// moved there by an earlier rescue that have not run since, which stay
/// until `until` (the first of them may go then).
#[derive(Clone, Copy)]
pub(in crate::runtime) struct Held {
    /// How many: its movable queue length right after the rescue.
    pub(in crate::runtime) queued: usize,
    /// When the first of them may be moved again.
    pub(in crate::runtime) until: Instant,
}

/// What a sample found, for the choice of the next sampling period.
pub(in crate::runtime) struct Sample {
    /// A task is switched in somewhere.
    pub(in crate::runtime) any_running: bool,
    /// Some Processer holds the same task as at the previous sample.
    pub(in crate::runtime) any_suspect: bool,
    /// Every running Processer has a peer that passes its watch point
    /// often (a *watcher*), and will report it if it stops switching.
    pub(in crate::runtime) all_watched: bool,
    /// Some Processer that is awake has work queued that a rescue could
    /// move (its new queue, runnable queue or next-task slot, or tasks
    /// placed on it).
    pub(in crate::runtime) any_movable: bool,
}

/// What a sample found a suspect's thread doing since the previous one.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(in crate::runtime) enum Wait {
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
pub(in crate::runtime) struct Seen {
    /// The thread's CPU clock now, if it can be read.
    pub(in crate::runtime) cpu: Option<Duration>,
    pub(in crate::runtime) wait: Wait,
}

/// Step 2, first half, for one suspect: reads its thread's CPU clock and,
/// when the clock barely moved, its state, and notes the clock in `v`.
pub(in crate::runtime) fn observe(
    cfg: &crate::runtime::config::Config,
    p: &ProcesserShared,
    v: &mut View,
    now: Instant,
) -> Seen {
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
/// exactly that (`tests/alone/net_echo_cold.rs`): such a sample neither counts
/// nor clears the count. Moving tasks to a Processer that gets no CPU would
/// not run them sooner either (the hog rule's reasoning). A real block is
/// caught at the first samples that find the other threads running.
pub(in crate::runtime) fn judge(
    cfg: &crate::runtime::config::Config,
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
    let (_, c0) = *v.first_cpu.get_or_insert((now, cpu));
    if cfg.kernel_block_detection
        && v.sleepy >= KERNEL_SAMPLES
        && held >= cfg.dispatch_interval.saturating_mul(2)
    {
        return true;
    }
    // A hog burns CPU; a thread that merely waits for a CPU (preempted) is
    // neither blocked nor a hog. What counts is the CPU time the thread has
    // used since the first suspect sample, not its share of the wall time:
    // on a loaded machine a hog gets a fraction of a CPU, and the tasks
    // queued behind it get none of it until they move, however long the
    // hog runs. So a task that has held the thread for `block_timeout` and
    // burned half of that on a CPU without a switch is a hog, at whatever
    // share; a thread that got no CPU (the Dispatcher itself kept off the
    // CPU, or the suspect preempted) has burned none, and is not.
    held >= cfg.block_timeout && cpu.saturating_sub(c0).saturating_mul(2) >= cfg.block_timeout
}

/// Whether `p`'s thread sits in a page fault, or in a system call that
/// changes the process's own address space (`mmap`, `mprotect`, `munmap`,
/// `mremap`, `madvise`, `brk`), read from `/proc/self/task/<tid>/syscall`,
/// or waits where a page fault waits for the address-space lock, read
/// from `/proc/self/task/<tid>/wchan` (see [`waits_for_address_space`]).
///
/// Asleep there, it waits for the process's address-space lock, held by
/// another thread of this process for a mapping change or a fault: a
/// bounded critical section, not the outside world. A cold start maps
/// thousands of stacks and grows the allocator's heaps while the tasks
/// fault in fresh pages, and the waits stretch to a time slice when the
/// holder is preempted: 0.3 to 2.5 ms seen in `do_mprotect_pkey` and
/// `lock_mm_and_find_vma` (`tests/alone/net_echo_cold.rs`), long enough for the
/// kernel rule. Tasks moved elsewhere would take the same lock at their
/// next allocation or fault. (A fault on a file mapping that reads the
/// disk is not told apart: such a wait is not counted either.) About
/// 10 us per file, read only for a suspect already found asleep with its
/// CPU clock still; `wchan` only when `syscall` did not settle it.
pub(in crate::runtime) fn in_address_space_call(p: &ProcesserShared) -> bool {
    let Some(tid) = p.tid() else {
        return false;
    };
    let mut syscall = [0u8; 32];
    let Some(n) = read_task_file(tid, "syscall", &mut syscall) else {
        return false;
    };
    if waits_for_address_space(&syscall[..n], b"") {
        return true;
    }
    let mut wchan = [0u8; 64];
    let Some(m) = read_task_file(tid, "wchan", &mut wchan) else {
        return false;
    };
    waits_for_address_space(&syscall[..n], &wchan[..m])
}

/// Reads the start of `/proc/self/task/<tid>/<name>` into `buf`, without a
/// heap allocation for the path. The number of bytes read, `None` if the
/// file cannot be read.
fn read_task_file(tid: libc::pid_t, name: &str, buf: &mut [u8]) -> Option<usize> {
    use std::io::{Read, Write};
    let mut path = [0u8; 64];
    let mut rest = &mut path[..];
    write!(rest, "/proc/self/task/{tid}/{name}").ok()?;
    let len = 64 - rest.len();
    let path = std::str::from_utf8(&path[..len]).ok()?;
    std::fs::File::open(path).and_then(|mut f| f.read(buf)).ok()
}

/// The kernel functions a thread's `wchan` names while a page fault waits
/// for the address-space lock (`lock_mm_and_find_vma` on kernels since
/// 6.4; the fault handler itself before). The lock's own slow paths are
/// scheduler functions, which `wchan` skips.
const FAULT_LOCK_WCHANS: [&[u8]; 3] = [
    b"lock_mm_and_find_vma",
    b"do_user_addr_fault",
    b"exc_page_fault",
];

/// The classification behind [`in_address_space_call`], from the contents
/// of a thread's `syscall` and `wchan` files: a page fault outside a
/// system call (`syscall` starts with `-1`), a system call that changes
/// the address space, or a page fault waiting for the address-space lock
/// inside any system call. The last is a system call's copy to or from a
/// user buffer whose page is not mapped yet (a read into fresh heap
/// memory: `syscall` names the read, `wchan` the fault's wait for the
/// lock).
fn waits_for_address_space(syscall: &[u8], wchan: &[u8]) -> bool {
    // "nr arg1 ... sp pc" while in a system call; "running"; or "-1 sp pc"
    // asleep outside one: in a page fault.
    let nr = syscall
        .split(|&b| b == b' ')
        .next()
        .and_then(|t| std::str::from_utf8(t).ok())
        .and_then(|t| t.trim().parse::<libc::c_long>().ok());
    let in_call = matches!(
        nr,
        Some(
            -1 | libc::SYS_mmap
                | libc::SYS_mprotect
                | libc::SYS_munmap
                | libc::SYS_mremap
                | libc::SYS_madvise
                | libc::SYS_brk
        )
    );
    let wchan = wchan.trim_ascii();
    in_call || FAULT_LOCK_WCHANS.contains(&wchan)
}

impl View {
    pub(in crate::runtime) fn new(p: &Arc<ProcesserShared>, switches: u64, now: Instant) -> View {
        View {
            p: p.clone(),
            switches,
            since: now,
            first_cpu: None,
            last_cpu: None,
            sleepy: 0,
            held: None,
            behind: 0,
            behind_counted: false,
            traced: false,
        }
    }

    /// Whether a rescue from this blocked Processer would find only the
    /// moved tasks the last one left, none of them free to go yet: its
    /// movable queues hold as many tasks as then, and nothing was placed
    /// on it. A blocked Processer takes nothing from its queues, so an
    /// unchanged length means nothing arrived. Saves taking the same tasks
    /// out and pushing them back at every cycle.
    pub(in crate::runtime) fn only_held(&self, p: &ProcesserShared, now: Instant) -> bool {
        self.held.is_some_and(|h| {
            now < h.until && queued_movable(p) == h.queued && p.placed.load(Ordering::Relaxed) == 0
        })
    }

    /// Starts over: `switches` first seen now. (Writes only what changed:
    /// it runs for every healthy Processer at every sample.)
    pub(in crate::runtime) fn reset(&mut self, switches: u64, now: Instant) {
        self.switches = switches;
        self.since = now;
        if self.first_cpu.is_some()
            || self.last_cpu.is_some()
            || self.sleepy != 0
            || self.held.is_some()
            || self.behind_counted
            || self.traced
        {
            self.first_cpu = None;
            self.last_cpu = None;
            self.sleepy = 0;
            self.held = None;
            self.behind_counted = false;
            self.traced = false;
            if self.behind != 0 {
                self.behind = 0;
                self.p.behind.store(0, Ordering::Relaxed);
            }
        }
    }
}
impl Dispatcher {
    /// Step 1-2: updates every Processer's `blocked` flag, and says what
    /// the sampling period may be (see [`Sample`]).
    ///
    /// O(n) per cycle: a few loads per Processer, and the views kept in
    /// table order.
    pub(in crate::runtime) fn sample(&mut self, procs: &[Arc<ProcesserShared>]) -> Sample {
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
                *procs[i].blocked_since.lock() = Some(self.views[i].since);
                // Release: pairs with the Acquire loads of task dumps and
                // the stall report, which then find `blocked_since` set.
                procs[i].blocked.store(true, Ordering::Release);
                crate::runtime::processer::shared::bump(&procs[i].metrics.blocked_detections, 1);
                #[cfg(feature = "tracing")]
                crate::runtime::task::trace::blocked_event(
                    procs[i].index,
                    procs[i].switches.load(Ordering::Relaxed),
                );
                self.blocked.push(i);
                self.shared
                    .dispatch
                    .detections
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count_behind(procs);
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

    /// Counts, for every Processer marked blocked, the tasks runnable
    /// behind it that can run on no other thread (bound or pinned there:
    /// no rescue moves them), into its `behind` gauge, and counts the
    /// spell in `blocked_with_behind` the first time it finds some. A few
    /// loads per blocked Processer; nothing on the Processers' side but
    /// the mirrored length of the local pinned queue.
    pub(in crate::runtime) fn count_behind(&mut self, procs: &[Arc<ProcesserShared>]) {
        for &i in &self.blocked {
            let (p, v) = (&procs[i], &mut self.views[i]);
            let n = p.runnable_pinned();
            if n != v.behind {
                v.behind = n;
                p.behind.store(n, Ordering::Relaxed);
            }
            if n != 0 && !v.behind_counted {
                v.behind_counted = true;
                self.shared
                    .dispatch
                    .blocked_with_behind
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Takes the backtrace of blocked threads (`runtime/dump/blocked_call.rs`):
    /// once per blocked spell, for a thread with started tasks runnable
    /// behind it, or for every blocked thread while all are blocked at
    /// `max_threads` with tasks queued. One request in flight at a time:
    /// this collects the answer to the last one, if it came (or gave up,
    /// after `blocked_call::ANSWER_WITHIN`), into the Processer's
    /// `blocked_call`, and asks the next thread. It never waits: a signal
    /// sent, or a few loads, per cycle. The answer comes within a cycle or
    /// two of the first blocked mark, so a dump shows the call well within
    /// a second.
    pub(in crate::runtime) fn trace_blocked(&mut self, procs: &[Arc<ProcesserShared>]) {
        if let Some(t) = &self.tracing {
            let Some(answer) = blocked_call::poll(&t.request) else {
                return;
            };
            *t.p.blocked_call.lock() = Some(BlockedCall {
                switches: t.switches,
                answer,
            });
            self.tracing = None;
        }
        let all_blocked = self.shared.all_blocked(procs).is_some();
        for &i in &self.blocked {
            let (p, v) = (&procs[i], &mut self.views[i]);
            if v.traced || !(v.behind > 0 || all_blocked) || !p.blocked.load(Ordering::Relaxed) {
                continue;
            }
            let Some(tid) = p.tid() else { continue };
            // Never cut short a call that a signal would end early.
            let mut syscall = [0u8; 32];
            let cut = read_task_file(tid, "syscall", &mut syscall)
                .and_then(|n| blocked_call::cut_short_by_signal(&syscall[..n]));
            let asked = match cut {
                Some(why) => Err(why),
                None => blocked_call::ask(tid),
            };
            match asked {
                Ok(Some(request)) => {
                    v.traced = true;
                    self.tracing = Some(Tracing {
                        p: p.clone(),
                        switches: v.switches,
                        request,
                    });
                    return;
                }
                // Another scheduler's request is in flight: next cycle.
                Ok(None) => return,
                Err(why) => {
                    v.traced = true;
                    *p.blocked_call.lock() = Some(BlockedCall {
                        switches: v.switches,
                        answer: Err(why),
                    });
                }
            }
        }
    }

    /// Makes `views[i]` the view of `procs[i]`: a pointer comparison per
    /// Processer while the table is unchanged; otherwise a merge by slot
    /// index (both are sorted by it) that keeps the views of the Processers
    /// still there, drops those of the ones gone, and starts new ones.
    pub(in crate::runtime) fn align_views(&mut self, procs: &[Arc<ProcesserShared>], now: Instant) {
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
}

#[cfg(test)]
mod tests {
    use super::waits_for_address_space;

    /// A Processer's thread seen by the Dispatcher in a hooked file read
    /// (`preadv2`, `RWF_NOWAIT`) whose copy into a fresh buffer faulted and
    /// waited for the address-space lock (kernel stack: `filemap_read`,
    /// `_copy_to_iter`, `exc_page_fault`, `lock_mm_and_find_vma`).
    const PREADV2_FAULT: &[u8] = b"327 0x3 0x7f19a5f25c38 0x1 0xffffffffffffffff 0x0 0x8 \
        0x7f19a5f25b58 0x7f19a6881829\n";

    #[test]
    fn a_fault_inside_a_system_call_waiting_for_the_address_space_lock_is_not_a_block() {
        assert!(waits_for_address_space(
            PREADV2_FAULT,
            b"lock_mm_and_find_vma"
        ));
        assert!(waits_for_address_space(
            PREADV2_FAULT,
            b"do_user_addr_fault\n"
        ));
    }

    #[test]
    fn a_system_call_asleep_elsewhere_is_a_block() {
        assert!(!waits_for_address_space(PREADV2_FAULT, b"filemap_read"));
        let read = b"0 0x5 0x7f0000001000 0x1000 0x0 0x0 0x0 0x7ffd0 0x7f001\n";
        assert!(!waits_for_address_space(read, b"pipe_read"));
        assert!(!waits_for_address_space(read, b""));
        let futex = b"202 0x7f00 0x80 0x2 0x0 0x0 0x0 0x7ffd0 0x7f001\n";
        assert!(!waits_for_address_space(futex, b"futex_wait_queue"));
    }

    #[test]
    fn a_fault_outside_a_call_and_the_address_space_calls_are_not_blocks() {
        assert!(waits_for_address_space(b"-1 0x7ffd0 0x7f001\n", b""));
        let mprotect = format!(
            "{} 0x7f00 0x1000 0x0 0x0 0x0 0x0 0x7ffd0 0x7f001\n",
            libc::SYS_mprotect
        );
        assert!(waits_for_address_space(
            mprotect.as_bytes(),
            b"do_mprotect_pkey"
        ));
        assert!(!waits_for_address_space(b"running\n", b""));
    }
}
