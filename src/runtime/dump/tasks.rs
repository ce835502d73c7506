//! Taking a task dump: the live tasks of a scheduler, each with its state,
//! what it waits on and since when, where it was spawned, and for a parked
//! task, its stack.
//!
//! A dump lists the scheduler's registry of live tasks (`runtime/task/live.rs`),
//! holding a reference to each, then looks at each task in turn:
//!
//! 1. finished (waiting to be freed): left out;
//! 2. not started: [`TaskState::New`];
//! 3. switched in on a Processer right now: [`TaskState::Running`];
//! 4. parked: the dump takes its right to run (`PARKED -> DUMPING`), reads
//!    its wait record and walks its stack (`walk.rs`), then gives the right
//!    back; an unpark that came meanwhile is carried out by the dump then.
//!    A parked task is reported only from inside that hold, so what is said
//!    about it is what it was at that instant;
//! 5. otherwise (queued, or between two of these states): `Runnable`.
//!
//! Each task also gets the Processer thread it runs on or is bound to, and
//! a runnable one bound to a thread the Dispatcher marked blocked gets
//! that thread, the task blocking it, and for how long ([`BlockedThread`]):
//! it waits for that task's call to return, however idle the other
//! threads are.
//!
//! Taking a dump never resumes a task's code, never drops a wake-up and
//! never frees a task: the worst it does to a task is delay its wake-up by
//! one stack walk (microseconds).
//!
//! Stacks are walked to return addresses only; the same stack (the same
//! addresses) is symbolized once, so a dump of 100,000 tasks parked in one
//! place resolves one stack.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasherDefault;
use std::panic::Location;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::runtime::dump::blocked_call;
use crate::runtime::dump::walk::{self, NoWalk, WalkJob};
use crate::runtime::processer::shared::Kind;
use crate::runtime::shared::Shared;
use crate::runtime::task::wait::WaitOn;
use crate::runtime::task::{DumpHold, TaskHeader, TaskRef, PHASE_DONE, PHASE_NEW};

/// A map with a fixed hasher: std's default one seeds itself from a
/// thread-local, and a dump taken inside a task may switch the task out
/// (handing a woken task to its Processer) between two uses of it.
type Map<K, V> = HashMap<K, V, BuildHasherDefault<DefaultHasher>>;

/// What a task was doing when the dump looked at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TaskState {
    /// Switched in on a Processer's thread: running its code, or blocking
    /// that thread.
    Running,
    /// Started, and queued to run again (it yielded, or was woken), or
    /// between two states at the instant the dump looked.
    Runnable,
    /// Parked: waiting for a wake-up ([`TaskDump::waiting_on`] says which).
    Parked,
    /// Spawned, and not started yet.
    New,
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaskState::Running => "running",
            TaskState::Runnable => "runnable",
            TaskState::Parked => "parked",
            TaskState::New => "new",
        })
    }
}

/// One task in a [`Dump`].
#[derive(Clone, Debug)]
pub struct TaskDump {
    id: u64,
    name: Option<Box<str>>,
    state: TaskState,
    waiting_on: Option<String>,
    waited: Option<Duration>,
    spawned_at: Option<&'static Location<'static>>,
    backtrace: Option<Arc<str>>,
    /// Grouping key: the interned stack (addresses), if walked.
    stack: Option<usize>,
    /// What it waits on, without the parts that differ between tasks
    /// parked at one place (time left), for grouping.
    wait_kind: Option<String>,
    /// Why a parked task's stack was not walked.
    no_walk: Option<&'static str>,
    /// A timer, a socket or a foreign future may wake the parked task: it
    /// is no part of a stall.
    wakes_by_itself: bool,
    /// The name of the Processer thread it runs on or is bound to.
    thread: Option<Arc<str>>,
    /// The blocked thread it waits for (an index into the dump's list of
    /// blocked threads while the dump is taken).
    behind: Option<Arc<BlockedThread>>,
    behind_ix: Option<usize>,
}

/// A Processer thread that the Dispatcher marked blocked: its running task
/// has not switched out for a while (it sleeps in the kernel, or computes),
/// so the tasks bound to that thread cannot run until it does. See
/// [`Dump::blocked_threads`] and [`TaskDump::blocked_behind`].
///
/// `Display` reads `blocked thread gofer-1 (blocked 300.0ms in task 17
/// 'worker')`.
#[derive(Clone, Debug)]
pub struct BlockedThread {
    thread: Arc<str>,
    task_id: Option<u64>,
    task_name: Option<Box<str>>,
    blocked_for: Duration,
    tasks_behind: usize,
    /// The call the running task is blocked in, symbolized.
    call: Option<Arc<str>>,
    /// Why the call is not known, when a backtrace was asked for and none
    /// came.
    call_missing: Option<&'static str>,
}

impl BlockedThread {
    /// The thread's name (`<scheduler>-<index>` for the scheduler's own).
    pub fn thread(&self) -> &str {
        &self.thread
    }

    /// The id of the task switched in on it (the one whose call blocks),
    /// if the dump found it among the live tasks.
    pub fn task_id(&self) -> Option<u64> {
        self.task_id
    }

    /// That task's name, if it was given one.
    pub fn task_name(&self) -> Option<&str> {
        self.task_name.as_deref()
    }

    /// How long that task has held the thread without switching out: since
    /// the Dispatcher's first sample that saw the thread's switch count at
    /// its present value (so up to one sampling period less than the truth).
    pub fn blocked_for(&self) -> Duration {
        self.blocked_for
    }

    /// The runnable tasks in the dump that can run only on this thread.
    pub fn tasks_behind(&self) -> usize {
        self.tasks_behind
    }

    /// The call the running task is blocked in: a backtrace taken from
    /// the blocked thread itself, symbolized, innermost first, one frame
    /// per line (`function`, then `    at file:line` when known), from the
    /// call that blocks (say `parking_lot::condvar::Condvar::wait`) down to
    /// the task's entry. Taken once per blocked spell, for a thread with
    /// started tasks behind it or while every thread is blocked, on a
    /// signal gofer owns ([`BACKTRACE_SIGNAL_OFFSET`]); a dump taken within
    /// a cycle or two of the block's detection may not have it yet.
    ///
    /// [`BACKTRACE_SIGNAL_OFFSET`]: crate::debug::BACKTRACE_SIGNAL_OFFSET
    pub fn blocked_in(&self) -> Option<&str> {
        self.call.as_deref()
    }

    /// What to do about the call [`blocked_in`](Self::blocked_in) names:
    /// run it on the blocking pool (`gofer::unblock`), or use gofer's own
    /// locks and condition variables (`gofer::sync`) or channels
    /// (`gofer::chan`), which park the task instead of the thread.
    pub fn fix(&self) -> Option<&'static str> {
        self.call
            .as_deref()
            .map(crate::runtime::dump::blocked_call::fix_for)
    }

    /// Why [`blocked_in`](Self::blocked_in) is `None` although a backtrace
    /// was asked for (the thread did not answer in time, the program
    /// handles gofer's signal itself, ...).
    pub fn blocked_in_missing(&self) -> Option<&'static str> {
        self.call_missing
    }
}

impl BlockedThread {
    /// Writes the call the thread is blocked in and the fix, each line
    /// after `indent` (nothing when no backtrace was asked for).
    pub(crate) fn write_call(&self, f: &mut dyn fmt::Write, indent: &str) -> fmt::Result {
        if let Some(call) = &self.call {
            writeln!(f, "{indent}blocked in:")?;
            for line in call.lines() {
                writeln!(f, "{indent}  {line}")?;
            }
            if let Some(fix) = self.fix() {
                writeln!(f, "{indent}fix: {fix}")?;
            }
        } else if let Some(why) = self.call_missing {
            writeln!(f, "{indent}(the call it is blocked in is not known: {why})")?;
        }
        Ok(())
    }
}

impl fmt::Display for BlockedThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "blocked thread {} (blocked {:.1?}",
            self.thread, self.blocked_for
        )?;
        if let Some(id) = self.task_id {
            write!(f, " in task {id}")?;
            if let Some(n) = &self.task_name {
                write!(f, " '{n}'")?;
            }
        }
        f.write_str(")")
    }
}

impl TaskDump {
    /// The task's id (as [`TaskId::as_u64`](crate::TaskId::as_u64)).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The task's name, if it was given one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// What the task was doing.
    pub fn state(&self) -> TaskState {
        self.state
    }

    /// For a parked task, what it waits for: `channel receive`, `mutex
    /// lock`, `sleep (1.2s left)`, `join of task 17`, `fd 7 readable`,
    /// `park`, ... For a runnable task that can run only on a blocked
    /// thread, that thread ([`blocked_behind`](Self::blocked_behind)):
    /// `blocked thread gofer-1 (blocked 300.0ms in task 17 'worker')`.
    pub fn waiting_on(&self) -> Option<&str> {
        self.waiting_on.as_deref()
    }

    /// For a parked task, how long it has been parked. Measured from its
    /// Processer's coarse clock, which is read every 61 task switches and
    /// whenever the Processer wakes: it can over-report by the time those
    /// switches took.
    pub fn waited(&self) -> Option<Duration> {
        self.waited
    }

    /// Where the task was spawned: the call of `spawn`, `go!`,
    /// `Builder::spawn`, `Scheduler::spawn` or `block_on` in the user's
    /// code.
    pub fn spawned_at(&self) -> Option<&'static Location<'static>> {
        self.spawned_at
    }

    /// For a parked task, its stack: symbolized frames, innermost first,
    /// one per line (`function at file:line`), without the runtime's
    /// switching frames above and the task's root below. `None` for a task
    /// that is running (its stack is in use), queued (its Processer may
    /// resume it at any moment) or not started, and for a parked task whose
    /// stack could not be walked safely (then [`waiting_on`] still says why
    /// it waits).
    ///
    /// [`waiting_on`]: Self::waiting_on
    pub fn backtrace(&self) -> Option<&str> {
        self.backtrace.as_deref()
    }

    /// The name of the Processer thread the task is switched in on, or is
    /// bound to (a started task stays on the thread where it first ran,
    /// unless it may migrate) or pinned to. `None` for a task not tied to
    /// a thread.
    pub fn thread(&self) -> Option<&str> {
        self.thread.as_deref()
    }

    /// For a runnable task that can run only on a thread the Dispatcher
    /// marked blocked: that thread, the task blocking it and for how long.
    /// The task waits for that task's call to return; no other thread may
    /// take it.
    pub fn blocked_behind(&self) -> Option<&BlockedThread> {
        self.behind.as_deref()
    }

    /// Whether a timer, a socket or a foreign future may wake this parked
    /// task (the stall report's test).
    pub(crate) fn wakes_by_itself(&self) -> bool {
        self.wakes_by_itself
    }
}

/// A snapshot of live tasks: see [`dump`](crate::debug::dump) and
/// [`Scheduler::dump`](crate::Scheduler::dump).
///
/// `Display` prints it for a person: tasks in the same state, waiting on
/// the same kind of thing, spawned at the same place and parked at the same
/// stack are printed once, with their count (as Go's goroutine profile
/// does).
#[derive(Clone, Debug)]
pub struct Dump {
    tasks: Vec<TaskDump>,
    blocked: Vec<Arc<BlockedThread>>,
    /// One line per scheduler whose every thread is blocked at
    /// `max_threads` with tasks queued (`Shared::all_blocked`).
    all_blocked: Vec<String>,
    schedulers: usize,
    took: Duration,
}

impl Dump {
    /// Every task in the dump, in no particular order.
    pub fn tasks(&self) -> &[TaskDump] {
        &self.tasks
    }

    /// How long taking the dump took.
    pub fn took(&self) -> Duration {
        self.took
    }

    /// The Processer threads marked blocked when the dump was taken, with
    /// the task blocking each and the tasks waiting behind it.
    pub fn blocked_threads(&self) -> impl Iterator<Item = &BlockedThread> {
        self.blocked.iter().map(|b| &**b)
    }

    /// Takes a dump of every live task of `schedulers`.
    pub(crate) fn take(schedulers: &[Arc<Shared>]) -> Dump {
        let started = Instant::now();
        let mut taker = Taker::default();
        for s in schedulers {
            taker.scheduler(s);
        }
        let mut tasks = taker.tasks;
        // Symbolize each distinct stack once.
        let stacks: Vec<Arc<str>> = taker
            .stacks
            .iter()
            .map(|ips| render_stack(ips, &mut taker.symbols))
            .collect();
        for t in &mut tasks {
            if let Some(k) = t.stack {
                t.backtrace = Some(stacks[k].clone());
            }
        }
        let mut blocked = taker.blocked;
        for (b, frames) in &taker.calls {
            let text = frames.render(&mut |ip| {
                taker
                    .symbols
                    .entry(ip)
                    .or_insert_with(|| walk::symbolize(ip))
                    .clone()
            });
            blocked[*b].call = Some(text.into());
        }
        for t in &tasks {
            if let Some(b) = t.behind_ix {
                blocked[b].tasks_behind += 1;
            }
        }
        let blocked: Vec<Arc<BlockedThread>> = blocked.into_iter().map(Arc::new).collect();
        for t in &mut tasks {
            t.behind = t.behind_ix.take().map(|b| blocked[b].clone());
        }
        tasks.sort_by_key(|t| t.id);
        Dump {
            tasks,
            blocked,
            all_blocked: taker.all_blocked,
            schedulers: schedulers.len(),
            took: started.elapsed(),
        }
    }
}

/// The state of one dump in progress.
#[derive(Default)]
struct Taker {
    tasks: Vec<TaskDump>,
    /// Distinct stacks (return addresses), and their index by content.
    stacks: Vec<Box<[usize]>>,
    stack_index: Map<Box<[usize]>, usize>,
    /// Symbols by address, across stacks.
    symbols: Map<usize, Vec<walk::Symbol>>,
    /// The blocked threads seen so far (their `tasks_behind` counted once
    /// every task is seen).
    blocked: Vec<BlockedThread>,
    /// The raw backtraces of blocked threads, by index into `blocked`,
    /// symbolized once every task is seen.
    calls: Vec<(usize, blocked_call::Frames)>,
    /// See `Dump::all_blocked`.
    all_blocked: Vec<String>,
}

/// What a dump needs to know of one Processer.
struct ProcView {
    index: usize,
    thread: Arc<str>,
    /// The task switched in, while one is.
    running: Option<*mut TaskHeader>,
    /// Its entry in `Taker::blocked`, while it is marked blocked.
    blocked: Option<usize>,
}

impl Taker {
    fn scheduler(&mut self, s: &Arc<Shared>) {
        use std::sync::atomic::Ordering::Relaxed;
        let mut refs: Vec<TaskRef> = Vec::new();
        s.live.for_each(&mut |t| refs.push(t));
        let now = Instant::now();
        let snapshot = s.processers_snapshot();
        if let Some(queued) = s.all_blocked(&snapshot) {
            let threads = snapshot
                .iter()
                .filter(|p| p.kind != Kind::Caller && !p.retired.load(Relaxed))
                .count();
            self.all_blocked.push(format!(
                "every Processer thread of scheduler '{}' is blocked ({threads} of max_threads \
                 {}): {queued} queued task{} that any thread could run wait{} for one to be \
                 free (most not started yet); the calls the threads are blocked in are below",
                s.config.name,
                s.config.max_threads,
                plural(queued),
                if queued == 1 { "s" } else { "" },
            ));
        }
        // Sorted by index, as the table is.
        let procs: Vec<ProcView> = snapshot
            .iter()
            .map(|p| {
                let thread: Arc<str> = p.thread_name(&s.config.name).into();
                let running = p.running.load(Relaxed).then(|| p.current.load(Relaxed));
                // Acquire: pairs with the Dispatcher's Release store of
                // `blocked`, made after it set `blocked_since`.
                let blocked = p.blocked.load(std::sync::atomic::Ordering::Acquire);
                let since = *p.blocked_since.lock();
                let blocked = match (blocked, since, running) {
                    (true, Some(since), Some(cur)) => {
                        // The running task, if it is among the live ones
                        // (compared by address, never dereferenced here).
                        let task = refs.iter().find(|t| std::ptr::eq(t.as_ptr(), cur));
                        let mut call_missing = None;
                        match p.blocked_call_now().map(|c| c.answer) {
                            Some(Ok(frames)) => self.calls.push((self.blocked.len(), frames)),
                            Some(Err(why)) => call_missing = Some(why),
                            None => {}
                        }
                        self.blocked.push(BlockedThread {
                            thread: thread.clone(),
                            task_id: task.map(|t| t.id.as_u64()),
                            task_name: task.and_then(|t| t.name.clone()),
                            blocked_for: now.saturating_duration_since(since),
                            tasks_behind: 0,
                            call: None,
                            call_missing,
                        });
                        Some(self.blocked.len() - 1)
                    }
                    _ => None,
                };
                ProcView {
                    index: p.index,
                    thread,
                    running,
                    blocked,
                }
            })
            .collect();
        let mut job = Box::new(WalkJob::new());
        for t in refs.iter() {
            self.task(t, &procs, &mut job);
        }
    }

    fn task(&mut self, t: &TaskRef, procs: &[ProcView], job: &mut WalkJob) {
        use std::sync::atomic::Ordering::Relaxed;
        let phase = t.phase.load(Relaxed);
        if phase == PHASE_DONE {
            return;
        }
        let ptr = t.as_ptr().cast_mut();
        let running_on = procs.iter().find(|p| p.running == Some(ptr));
        let home = running_on.or_else(|| {
            let pin = t.pin()?;
            procs
                .binary_search_by_key(&pin, |p| p.index)
                .ok()
                .map(|i| &procs[i])
        });
        let mut d = TaskDump {
            id: t.id.as_u64(),
            name: t.name.clone(),
            state: TaskState::Runnable,
            waiting_on: None,
            waited: None,
            spawned_at: t.spawned_at,
            backtrace: None,
            stack: None,
            wait_kind: None,
            no_walk: None,
            wakes_by_itself: false,
            thread: home.map(|p| p.thread.clone()),
            behind: None,
            behind_ix: None,
        };
        if phase == PHASE_NEW {
            d.state = TaskState::New;
        } else if let Some(mut hold) = DumpHold::try_take(t) {
            d.state = TaskState::Parked;
            let w = hold.wait();
            let now = Instant::now();
            d.wait_kind = Some(w.on.to_string());
            d.waiting_on = Some(match w.deadline {
                Some(dl) => format!("{} ({:.1?} left)", w.on, dl.saturating_duration_since(now)),
                None => w.on.to_string(),
            });
            d.waited = w.since.map(|s| now.saturating_duration_since(s));
            d.wakes_by_itself = w.deadline.is_some()
                || matches!(
                    w.on,
                    WaitOn::Sleep
                        | WaitOn::Readable(_)
                        | WaitOn::Writable(_)
                        | WaitOn::Future
                        | WaitOn::Unblock
                );
            let run = hold.run();
            let walked = match run.stack.as_ref() {
                // SAFETY: we hold the task's right to run (DumpHold), the
                // context is its saved one on this stack, and `in_walk`
                // tells whether a walk saved it.
                Some(stack) => unsafe { walk::walk(&mut run.ctx, &mut run.in_walk, stack, job) },
                None => Ok(()),
            };
            drop(hold); // the task's wake-up, if one came, goes out now
            match walked {
                Ok(()) if job.len > 0 => d.stack = Some(self.intern(job.frames())),
                Ok(()) => {}
                Err(NoWalk::TooDeep) => {
                    d.no_walk = Some("stack not walked: too little of it is free")
                }
                Err(NoWalk::OnFiber) => {
                    d.no_walk = Some("stack not walked: parked inside a fiber it runs")
                }
            }
        } else if running_on.is_some() {
            d.state = TaskState::Running;
        } else if let Some(b) = home.and_then(|p| p.blocked) {
            // Runnable, and may run only on a blocked thread.
            let what = self.blocked[b].to_string();
            d.wait_kind = Some(what.clone());
            d.waiting_on = Some(what);
            d.behind_ix = Some(b);
        }
        self.tasks.push(d);
    }

    fn intern(&mut self, ips: &[usize]) -> usize {
        if let Some(&k) = self.stack_index.get(ips) {
            return k;
        }
        let k = self.stacks.len();
        let b: Box<[usize]> = ips.into();
        self.stacks.push(b.clone());
        self.stack_index.insert(b, k);
        k
    }
}

/// Symbolizes and trims one stack into the text `TaskDump::backtrace` gives.
fn render_stack(ips: &[usize], cache: &mut Map<usize, Vec<walk::Symbol>>) -> Arc<str> {
    let mut frames = Vec::new();
    for &ip in ips {
        let syms = cache.entry(ip).or_insert_with(|| walk::symbolize(ip));
        frames.extend(syms.iter().cloned());
    }
    walk::render(walk::trim(&frames)).into()
}

impl fmt::Display for Dump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "gofer task dump: {} task{} in {} scheduler{} (taken in {:.1?})",
            self.tasks.len(),
            plural(self.tasks.len()),
            self.schedulers,
            plural(self.schedulers),
            self.took
        )?;
        for line in &self.all_blocked {
            writeln!(f, "{line}")?;
        }
        for b in &self.blocked {
            writeln!(
                f,
                "{b}: {} task{} can run only there and wait{}",
                b.tasks_behind,
                plural(b.tasks_behind),
                if b.tasks_behind == 1 { "s" } else { "" }
            )?;
            b.write_call(f, "  ")?;
        }
        // Group: same state, wait kind, spawn site and stack.
        type Key<'a> = (
            TaskState,
            Option<&'a str>,
            Option<&'static Location<'static>>,
            Option<&'a str>,
            Option<&'static str>,
        );
        let mut groups: Vec<(Key<'_>, Vec<&TaskDump>)> = Vec::new();
        let mut index: Map<Key<'_>, usize> = Map::default();
        for t in &self.tasks {
            let key: Key<'_> = (
                t.state,
                t.wait_kind.as_deref(),
                t.spawned_at,
                t.backtrace.as_deref(),
                t.no_walk,
            );
            match index.get(&key) {
                Some(&k) => groups[k].1.push(t),
                None => {
                    index.insert(key, groups.len());
                    groups.push((key, vec![t]));
                }
            }
        }
        // Biggest groups first, as a profile reads.
        groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.1[0].id.cmp(&b.1[0].id)));
        for ((state, _, spawned_at, bt, no_walk), tasks) in &groups {
            writeln!(f)?;
            let first = tasks[0];
            // "waiting for blocked thread ...": runnable, held up.
            let lead = if *state == TaskState::Runnable {
                "waiting for "
            } else {
                ""
            };
            if tasks.len() == 1 {
                write!(f, "task {}", first.id)?;
                if let Some(n) = &first.name {
                    write!(f, " '{n}'")?;
                }
                write!(f, " [{state}")?;
                if let Some(w) = &first.waiting_on {
                    write!(f, ": {lead}{w}")?;
                }
                if let Some(d) = first.waited {
                    write!(f, ", for {d:.1?}")?;
                }
                f.write_str("]")?;
                if let Some(t) = &first.thread {
                    write!(f, " on {t}")?;
                }
                writeln!(f)?;
            } else {
                write!(f, "{} tasks [{state}", tasks.len())?;
                if let Some(w) = &first.wait_kind {
                    write!(f, ": {lead}{w}")?;
                }
                let waited: Vec<Duration> = tasks.iter().filter_map(|t| t.waited).collect();
                if let (Some(lo), Some(hi)) = (waited.iter().min(), waited.iter().max()) {
                    write!(f, ", for {lo:.1?} to {hi:.1?}")?;
                }
                f.write_str("]")?;
                // One thread for the group, or how many.
                let mut threads: Vec<&str> = tasks.iter().filter_map(|t| t.thread()).collect();
                threads.sort_unstable();
                threads.dedup();
                match threads.as_slice() {
                    [] => {}
                    [one] => write!(f, " on {one}")?,
                    many => write!(f, " on {} threads", many.len())?,
                }
                f.write_str(": ")?;
                const SHOWN: usize = 10;
                for (i, t) in tasks.iter().take(SHOWN).enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}", t.id)?;
                    if let Some(n) = &t.name {
                        write!(f, " '{n}'")?;
                    }
                }
                if tasks.len() > SHOWN {
                    write!(f, ", ... ({} more)", tasks.len() - SHOWN)?;
                }
                writeln!(f)?;
            }
            if let Some(at) = spawned_at {
                writeln!(f, "  spawned at {at}")?;
            }
            if let Some(bt) = bt {
                for line in bt.lines() {
                    writeln!(f, "  {line}")?;
                }
            }
            if let Some(why) = no_walk {
                writeln!(f, "  ({why})")?;
            }
        }
        Ok(())
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
