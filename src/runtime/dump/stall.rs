//! The stall report (`SchedulerBuilder::stall_report`): a thread that
//! notices when every task of a scheduler has been parked for the set time
//! with nothing due to wake them, and prints a task dump.
//!
//! The thread looks every quarter of the set time (at most every second)
//! at counters that are free to read: the Processers' switch counters and
//! the scheduler's spawn and completion counts. While they move, nothing is
//! stalled. Once they have stood still for the set time and tasks are
//! alive, it takes a dump, and reports a stall if every task in it is
//! parked on something no timer and no socket will end (no deadline, no
//! sleep, no descriptor) and no user timer (`timer::after`, `every` and
//! their condition forms) is pending: only another task or a plain thread
//! can wake them. A pending user timer is no task in the dump, but it will
//! run code that may wake any of them, so while one is registered nothing
//! is reported. The counters and the timers are looked at again after the
//! dump, and a dump they moved under is not reported. It reports once per
//! stall, and again only after the counters moved.
//!
//! It also reports a partial stall that the counters cannot show (other
//! threads keep them moving): a Processer thread that the Dispatcher
//! marked blocked, and has held so for the set time, while started tasks
//! that can run on no other thread are runnable behind it
//! (`ProcesserShared::behind`). The report names the thread, the task
//! whose call blocks it, how long, how many tasks wait, the call itself (a
//! backtrace the Dispatcher took from the blocked thread,
//! `blocked_call.rs`) and the fix; once per blocked spell (a Processer and
//! the switch count it stands at). While that backtrace is still coming,
//! the report waits for it, up to [`CALL_WAIT`] past the set time.
//!
//! And it reports, once per episode, a scheduler whose every thread has
//! been blocked at `max_threads` for the set time with tasks queued that
//! no thread is free to start (`Shared::all_blocked`): a fan-out hang,
//! which the count of tasks behind blocked threads does not show (the
//! stuck tasks have not started).

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::runtime::dump::{BlockedThread, Dump, TaskState};
use crate::runtime::processer::shared::ProcesserShared;
use crate::runtime::shared::Shared;

/// How long past the set time a report of a blocked thread waits for the
/// backtrace of the call it is blocked in, which the Dispatcher asks for
/// at once and gets within a cycle or two (or gives up on after
/// `blocked_call::ANSWER_WITHIN`).
const CALL_WAIT: Duration = Duration::from_secs(1);

/// Starts the watcher if the scheduler asks for stall reports.
pub(crate) fn start(shared: &Arc<Shared>) -> std::io::Result<()> {
    let Some(after) = shared.config.stall_report else {
        return Ok(());
    };
    let weak = Arc::downgrade(shared);
    let h = std::thread::Builder::new()
        .name(format!("{}-stall", shared.config.name))
        .spawn(move || watch(weak, after))?;
    let _ = shared.stall_watcher.set(h.thread().clone());
    shared.adopt_thread(h);
    Ok(())
}

/// What the watcher compares between looks.
fn activity(s: &Shared) -> (u64, u64, u64) {
    let switches = s
        .processers_snapshot()
        .iter()
        .map(|p| p.switches.load(Ordering::Relaxed))
        .sum();
    (
        switches,
        s.spawned.load(Ordering::Relaxed),
        s.completed.load(Ordering::Relaxed),
    )
}

fn watch(weak: Weak<Shared>, after: Duration) {
    let every = (after / 4).clamp(Duration::from_millis(1), Duration::from_secs(1));
    let mut last = None;
    let mut still_since = Instant::now();
    let mut reported = false;
    // Blocked spells reported: (Processer index, switch count).
    let mut blocks_reported: Vec<(usize, u64)> = Vec::new();
    // Since when every thread has been blocked, and whether that episode
    // was reported.
    let mut all_blocked: Option<(Instant, bool)> = None;
    loop {
        std::thread::park_timeout(every);
        let Some(s) = weak.upgrade() else { return };
        if s.stopped.load(Ordering::Acquire) {
            return;
        }
        report_blocked(&s, after, &mut blocks_reported);
        report_all_blocked(&s, after, &mut all_blocked);
        let now_activity = activity(&s);
        if last != Some(now_activity) {
            last = Some(now_activity);
            still_since = Instant::now();
            reported = false;
            continue;
        }
        let still = still_since.elapsed();
        if reported || still < after || s.alive.load(Ordering::Relaxed) == 0 || timer_due(&s) {
            continue;
        }
        let dump = Dump::take(std::slice::from_ref(&s));
        // A timer that fired while the dump was taken spawned its run
        // (moving the counters) before it left the registry.
        if activity(&s) != now_activity || timer_due(&s) {
            continue;
        }
        if let Some(n) = stalled(&dump) {
            reported = true;
            // The tasks' own record, when it says longer (they parked
            // before the counters last moved).
            let still = dump
                .tasks()
                .iter()
                .filter_map(|t| t.waited())
                .min()
                .map_or(still, |w| w.max(still));
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "stall: all {n} tasks parked for {still:.1?} with no timer due and no socket \
                 wait in scheduler '{}' (only another task or a plain thread can wake them)\n\
                 {dump}",
                s.config.name
            );
            let _ = err.flush();
        }
    }
}

/// Reports every Processer blocked for `after` or longer with started
/// tasks runnable behind it, and not reported yet in this spell (`done`).
fn report_blocked(s: &Arc<Shared>, after: Duration, done: &mut Vec<(usize, u64)>) {
    let procs = s.processers_snapshot();
    let spell = |p: &ProcesserShared| (p.index, p.switches.load(Ordering::Relaxed));
    // Forget the spells that ended (the thread switched, or left).
    done.retain(|&(i, n)| {
        procs
            .iter()
            .any(|p| p.blocked.load(Ordering::Relaxed) && spell(p) == (i, n))
    });
    let now = Instant::now();
    let due: Vec<&Arc<ProcesserShared>> = procs
        .iter()
        .filter(|p| {
            // Acquire: pairs with the Dispatcher's Release store of
            // `blocked`, made after it set `blocked_since`.
            let held = p
                .blocked_since
                .lock()
                .map(|t| now.saturating_duration_since(t));
            p.blocked.load(Ordering::Acquire)
                && p.behind.load(Ordering::Relaxed) > 0
                && held.is_some_and(|h| h >= after)
                && !done.contains(&spell(p))
                // The backtrace of its call came, or will not.
                && (p.blocked_call_now().is_some()
                    || held.is_some_and(|h| h >= after.saturating_add(CALL_WAIT)))
        })
        .collect();
    if due.is_empty() {
        return;
    }
    let dump = Dump::take(std::slice::from_ref(s));
    let mut err = std::io::stderr().lock();
    for p in due {
        done.push(spell(p));
        let thread = p.thread_name(&s.config.name);
        let behind = p.behind.load(Ordering::Relaxed);
        let b = dump.blocked_threads().find(|b| b.thread() == thread);
        let held = b.map_or_else(
            || p.blocked_since.lock().map(|t| t.elapsed()).unwrap_or(after),
            |b| b.blocked_for(),
        );
        let _ = write!(err, "stall: thread {thread} blocked for {held:.1?}");
        if let Some(id) = b.and_then(|b| b.task_id()) {
            let _ = write!(err, " in task {id}");
            if let Some(n) = b.and_then(|b| b.task_name()) {
                let _ = write!(err, " '{n}'");
            }
        }
        let _ = writeln!(
            err,
            " in scheduler '{}': {behind} started task{} runnable behind it can run on no \
             other thread until that task's call returns (a blocking call or a long \
             computation that does not switch out)",
            s.config.name,
            if behind == 1 { "" } else { "s" },
        );
        write_call(&mut err, b);
    }
    let _ = writeln!(err, "{dump}");
    let _ = err.flush();
}

/// Writes the call a blocked thread is blocked in, and the fix.
fn write_call(err: &mut impl Write, b: Option<&BlockedThread>) {
    let mut text = String::new();
    if let Some(b) = b {
        let _ = b.write_call(&mut text, "  ");
    }
    let _ = err.write_all(text.as_bytes());
}

/// Reports a scheduler whose every thread has been blocked at
/// `max_threads` for `after` with tasks queued, once per episode (`state`:
/// since when, and whether reported).
fn report_all_blocked(s: &Arc<Shared>, after: Duration, state: &mut Option<(Instant, bool)>) {
    let procs = s.processers_snapshot();
    let Some(queued) = s.all_blocked(&procs) else {
        *state = None;
        return;
    };
    let now = Instant::now();
    let (since, reported) = state.get_or_insert((now, false));
    let lasted = now.saturating_duration_since(*since);
    if *reported || lasted < after {
        return;
    }
    // Wait for the backtraces of the threads' calls, up to CALL_WAIT.
    let traced = procs
        .iter()
        .filter(|p| p.blocked.load(Ordering::Relaxed))
        .all(|p| p.blocked_call_now().is_some());
    if !traced && lasted < after.saturating_add(CALL_WAIT) {
        return;
    }
    *reported = true;
    let dump = Dump::take(std::slice::from_ref(s));
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "stall: every Processer thread of scheduler '{}' has been blocked for {lasted:.1?} at \
         max_threads {}, with {queued} queued task{} that no thread is free to start (each \
         thread's call is in the dump below)\n{dump}",
        s.config.name,
        s.config.max_threads,
        if queued == 1 { "" } else { "s" },
    );
    let _ = err.flush();
}

/// Whether a user timer is pending: it will run code that may wake tasks.
fn timer_due(s: &Shared) -> bool {
    s.timers.users_pending() > 0
}

/// The number of tasks, if every one is parked with nothing due to wake it.
fn stalled(d: &Dump) -> Option<usize> {
    let tasks = d.tasks();
    let all = !tasks.is_empty()
        && tasks
            .iter()
            .all(|t| t.state() == TaskState::Parked && !t.wakes_by_itself());
    all.then_some(tasks.len())
}
