//! The runtime core: schedulers, their Processers and Dispatcher, and the
//! task header they pass around.
//!
//! | file | what it is |
//! |---|---|
//! | `scheduler.rs` | the public `Scheduler` handle, the default scheduler, `SchedulerBuilder::build`; the methods `builder`, `default_scheduler`, `name`, `stats`, `shutdown`, `shutdown_timeout` |
//! | `config.rs` | `SchedulerBuilder`'s settings, the accepted range of each, the default scheduler's environment variables |
//! | `stats.rs` | the counters users read (`Stats`, `ProcesserStats`) |
//! | `shared.rs` | a scheduler's shared state: Processer table, admission, lifecycle |
//! | `route.rs` | where a task pushed from another thread goes and whom its arrival wakes |
//! | `idle.rs` | idle and searching counters, the sleepers stack |
//! | `processer.rs` | the Processer loop (`ProcLocal`): pick, switch, file, gc |
//! | `processer_queues.rs` | a Processer's own queues and next-task slot, pulls from its remote queues, hand-off at stop |
//! | `processer_placement.rs` | binding a task to the Processer of its first run, fresh placement, pins |
//! | `processer_timers.rs` | firing timers and polling the reactor (and the io_uring) between tasks |
//! | `processer_search.rs` | stealing, spinning, sleeping without a lost wake-up |
//! | `processer_shared.rs` | the half of a Processer other threads see: queues, counters, flags |
//! | `next_slot.rs` | the next-task slot (model-checked with loom) |
//! | `dispatcher.rs` | the Dispatcher thread: its cycle and naps |
//! | `dispatcher_detect.rs` | cycle steps 1-2: sampling switch counters, judging suspects |
//! | `dispatcher_rescue.rs` | cycle steps 3-5: moving queued tasks, growing threads, balancing |
//! | `task.rs` | the task header, its id, and the `Runnable` token |
//! | `park_state.rs` | the park state machine (model-checked with loom) |
//! | `context.rs` | the thread-local current Processer and task; `schedule` |
//! | `direct.rs` | the direct switch from a task to the next (protocol model-checked with loom) |
//! | `wait.rs` | what a parked task waits on, for task dumps |
//! | `live.rs` | the registry of live tasks that dumps read |
//! | `cells.rs` | the per-thread cache (and process-wide depot) of task cells' memory |
//! | `timer.rs`, `timer_heap.rs` | a deadline queue per core Processer, its indexed heap, user-timer registry |
//! | `lock.rs` | the runtime's own locks and a Processer's sleep (with `hooks`, they bypass the hooked futex) |
//! | `blocking.rs` | the blocking pool: threads that run `unblock` calls while their tasks park |
//! | `fd_table.rs` | sizing the process's descriptor table at build |
//! | `unwind_bank.rs` | panics belong to the task: its panic count leaves the thread with it |
//! | `io/` | the IO manager: the epoll reactor (`reactor.rs`, `epoll.rs`), one socket's readiness (`readiness.rs`), the io_uring driver (`uring.rs`, `uring_recv.rs`), the choice between them (`choice.rs`) |
//!
//! `Scheduler`'s methods live with what they do: `builder`,
//! `default_scheduler`, `name`, `stats`, `shutdown` and `shutdown_timeout`
//! in `scheduler.rs`; `spawn` and `block_on` in `task/spawn.rs`; `scope` in
//! `task/scope.rs`; `shutdown_now` and `shutdown_now_timeout` in
//! `task/cancel.rs`; `dump` in `debug/mod.rs`.
//!
//! The runtime reaches the layers above it mostly through interfaces it
//! defines and they implement: the `TaskVTable` of a task's cell and the
//! `TimerCallback` trait. A few direct imports remain, which
//! `scripts/modgraph.py` lists: the socket waits of `io/` call
//! `task/cancel.rs`, and the runtime calls into `debug/` (the stall report,
//! the blocked-call backtrace) and `hooks/` (the real futex, `read` and
//! `write`, and keeping the hooked symbols linked).

pub(crate) mod blocking;
pub(crate) mod config;
pub(crate) mod context;
pub(crate) mod dispatcher;
pub(crate) mod dump;
pub(crate) mod fd_table;
pub(crate) mod io;
pub(crate) mod processer;
pub(crate) mod scheduler;
pub(crate) mod shared;
pub(crate) mod stats;
pub(crate) mod task;
pub(crate) mod time;
