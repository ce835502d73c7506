//! Statistics a user can read while the scheduler runs.

use std::time::Duration;

use crate::IoDriver;

/// A snapshot of a scheduler's counters, from
/// [`Scheduler::stats`](crate::Scheduler::stats).
///
/// Counters are read one by one without a global lock, so a snapshot taken
/// while tasks run may be off by the tasks in flight.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Stats {
    /// Live Processer threads (core and extra; `block_on` callers excluded).
    pub threads: usize,
    /// Tasks spawned since the scheduler started.
    pub spawned: u64,
    /// Tasks finished (returned, panicked, or failed to get a stack).
    pub completed: u64,
    /// Tasks spawned and not yet freed. A finished task leaves this count
    /// when its Processer frees it, which it does in batches: once 16 have
    /// finished, and whenever it runs out of work. So `completed` may count
    /// a task a moment before `alive` stops counting it; `shutdown` waits
    /// for this count to reach zero.
    pub alive: usize,
    /// Processers marked blocked right now.
    pub blocked: usize,
    /// Times the Dispatcher marked a Processer blocked.
    pub blocked_detections: u64,
    /// Started tasks runnable right now behind Processers marked blocked:
    /// bound to (or pinned on) a thread whose running task does not switch
    /// out, so no rescue can move them, and they wait until that call
    /// returns. A gauge, refreshed at each sample of the Dispatcher (which
    /// runs only with `max_threads` of 2 or more). The task dump names the
    /// blocked thread and its running task; see ARCHITECTURE.md, "What
    /// still blocks".
    pub tasks_behind_blocked: usize,
    /// Times a Processer stayed blocked with started tasks runnable
    /// behind it (counted once per blocked spell, when the Dispatcher
    /// first finds tasks waiting there): blocks that held up other tasks,
    /// out of `blocked_detections`.
    pub blocked_with_tasks_behind: u64,
    /// Every Processer thread is marked blocked, the thread count is at
    /// `max_threads` (so the Dispatcher may start no other), and tasks are
    /// queued that any free thread could run: a fan-out hang (a hundred
    /// consumers each blocking a thread in a std channel's `recv`, say)
    /// looks like this, with `tasks_behind_blocked` near 0 because the
    /// stuck tasks have not started. The task dump and the stall report
    /// say so too, with the call each thread is blocked in. Refreshed at
    /// each call (from the Dispatcher's marks, which need `max_threads` of
    /// 2 or more).
    pub all_blocked: bool,
    /// While `all_blocked`: the tasks queued on the blocked threads that
    /// any free thread could run (most not started yet); 0 otherwise.
    pub tasks_queued_all_blocked: usize,
    /// Tasks the Dispatcher moved off blocked Processers.
    pub tasks_rescued: u64,
    /// Wake-ups a readiness poll delivered to a task bound (or pinned) to
    /// another Processer than the one that polled (the Dispatcher's polls
    /// included), since the scheduler started: the sum of
    /// [`ProcesserStats::cross_wakeups`], Processers that have exited
    /// included.
    pub cross_wakeups: u64,
    /// Of `tasks_rescued`, moves of a task that an earlier rescue had moved
    /// and that had not run since. Such a task stays where it was moved
    /// for `block_timeout` after that move, however often that Processer
    /// blocks meanwhile, so this count grows only while Processers stay
    /// blocked longer than that (see ARCHITECTURE.md, "Dispatcher").
    pub tasks_moved_again: u64,
    /// Processer threads started (core ones included).
    pub threads_started: u64,
    /// Extra Processer threads that exited after being idle.
    pub threads_retired: u64,
    /// Guarded coroutine stacks mapped in the whole process right now.
    pub live_stacks: usize,
    /// Timers pending: timed waits in progress (`sleep`, `park_timeout`,
    /// the `*_timeout` operations of channels and locks) and user timers
    /// (`timer::after`, `timer::every`) that have not fired or been
    /// cancelled. A wait that ended leaves no timer behind, but for
    /// sockets: one with a read or write timeout keeps one entry, shared
    /// by its timed waits, until it fires or the socket closes (see
    /// ARCHITECTURE.md, "Timers").
    pub timers: usize,
    /// Blocking-pool threads running an [`unblock`](crate::unblock) call
    /// (or a [`fs`](crate::fs) operation) right now; at most
    /// `blocking_threads`.
    pub blocking_busy: usize,
    /// `unblock` calls waiting for a blocking-pool thread: every thread
    /// is busy and the pool is at its `blocking_threads` cap.
    pub blocking_queued: usize,
    /// Blocking-pool threads alive (busy or idle); an idle one exits after
    /// `blocking_idle_timeout`.
    pub blocking_threads: usize,
    /// The IO driver the scheduler runs: [`IoDriver::Epoll`] or
    /// [`IoDriver::Uring`], never `Auto` (which resolves to one of them at
    /// build).
    pub io_driver: IoDriver,
    /// Why `io_driver` runs, as text: who asked for which driver
    /// (`SchedulerBuilder::io_driver`, `GOFER_IO`, or `Auto` by default)
    /// and, for `Auto`, what decided, e.g. "Auto (the default) chose
    /// epoll: the benchmarks do not show io_uring ahead of it (io_uring
    /// not probed)" or "GOFER_IO=auto chose epoll: io_uring unavailable:
    /// io_uring_setup failed: ...". For reading, not parsing. With the
    /// ring, a Processer whose ring could not be set up after the build
    /// (descriptors or memory ran out) runs its tasks on epoll: the reason
    /// then says how many and why, while `io_driver` still names the
    /// driver the scheduler was built with.
    pub io_driver_reason: String,
    /// One entry per live Processer.
    pub processers: Vec<ProcesserStats>,
}

/// One Processer's counters.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ProcesserStats {
    /// The Processer's index (the `pin` target for core ones).
    pub id: usize,
    /// Switches into tasks so far.
    pub switches: u64,
    /// Of `switches`, those made straight from one task to the next (a
    /// yield or park that went into the next ready task without a pass
    /// through the Processer loop; see ARCHITECTURE.md, "Direct switch").
    pub direct_switches: u64,
    /// Tasks waiting in its new, runnable and pinned queues.
    pub queued: usize,
    /// Marked blocked by the Dispatcher right now.
    pub blocked: bool,
    /// While `blocked`: the started tasks runnable here that can run on
    /// no other thread (see `Stats::tasks_behind_blocked`); 0 otherwise.
    pub tasks_behind: usize,
    /// A task is switched in right now.
    pub running: bool,
    /// The thread sleeps waiting for work.
    pub sleeping: bool,
    /// Tasks the Dispatcher moved off this Processer.
    pub rescued: u64,
    /// Wake-ups of tasks bound (or pinned) to this Processer that a
    /// readiness poll made on another thread delivered here: another
    /// Processer's poll of its reactor, or the Dispatcher's. Each was a
    /// push into this Processer's remote pinned queue, a look-out request
    /// and often a wake-up of its thread. Wake-ups by other means (a channel
    /// send from another thread, a timer, an unpark from a plain thread)
    /// are not counted. ARCHITECTURE.md, "The IO manager", says when
    /// readiness crosses.
    pub cross_wakeups: u64,
    /// `"core"`, `"extra"` (started by the Dispatcher) or `"caller"` (a
    /// thread inside `block_on`).
    pub kind: &'static str,
    /// Times a task parked here (switched out to wait: a channel, a lock,
    /// a sleep, IO, a join), counted when the Processer files it, through
    /// the loop or at a direct switch. A park that an unpark raced is
    /// counted too (the task runs again at once).
    pub parks: u64,
    /// Times a task yielded here (`yield_now`, or the runtime's own yields),
    /// counted as `parks` is. Every switch out of a task is a park, a yield
    /// or its end, so `switches` equals `parks + yields` plus the tasks
    /// that ended here, give or take the task running now.
    pub yields: u64,
    /// Successful steals: times this Processer, out of work, took tasks
    /// from another's runnable or new queue (tokio's `steal_operations`).
    pub steals: u64,
    /// Tasks those steals took (tokio's `steal_count`): a steal takes up
    /// to half of the victim's queue.
    pub stolen_tasks: u64,
    /// Tasks picked from the next-task slot (a task woken or spawned by the
    /// running one, run next without a trip through the queue).
    pub next_slot_runs: u64,
    /// Tasks other threads pushed into this Processer's new or pinned
    /// queues (tokio's `remote_schedule_count`, per target): spawns from
    /// outside, wake-ups from other threads, tasks moved here by a rescue.
    /// Counted by the pushing thread when its push lands.
    pub remote_pushes: u64,
    /// Polls of its own epoll reactor (a look without waiting, or the sleep
    /// in it) and turns of the io_uring ring made by this thread (tokio's
    /// `io_driver_ready_count` counts events instead).
    pub reactor_polls: u64,
    /// Tasks waiting in the queues only this thread takes from: the
    /// runnable queue (which idle Processers steal from), the local pinned
    /// queue and the next-task slot (tokio's `worker_local_queue_depth`).
    /// A snapshot.
    pub local_queue_depth: usize,
    /// Tasks other threads pushed here and the thread has not taken yet:
    /// its new and remote pinned queues. A snapshot.
    pub remote_queue_depth: usize,
    /// Of the queued tasks, those that can run only here (pinned, or bound
    /// to this thread at their first run). A snapshot.
    pub pinned_queue_depth: usize,
    /// Time spent running tasks (tokio's `worker_total_busy_duration`):
    /// measured from the first task picked after an idle spell to the
    /// moment the queues are empty again, so the loop's own work between
    /// tasks counts as busy and sleeping does not. Includes the batch in
    /// progress.
    pub busy: Duration,
    /// Times the Dispatcher marked this Processer blocked (its share of
    /// `Stats::blocked_detections`).
    pub blocked_detections: u64,
}
