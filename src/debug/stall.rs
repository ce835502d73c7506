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

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::dump::{Dump, TaskState};
use crate::runtime::shared::Shared;

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
    loop {
        std::thread::park_timeout(every);
        let Some(s) = weak.upgrade() else { return };
        if s.stopped.load(Ordering::Acquire) {
            return;
        }
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
