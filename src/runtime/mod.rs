//! The runtime core: schedulers, their Processers and Dispatcher, and the
//! task header they pass around.
//!
//! | file | what it is |
//! |---|---|
//! | `scheduler.rs` | the public `Scheduler` handle and the default scheduler |
//! | `config.rs` | `SchedulerBuilder`, the accepted range of each setting |
//! | `fd_table.rs` | sizing the process's descriptor table at build |
//! | `shared.rs` | a scheduler's shared state: Processer table, admission, lifecycle |
//! | `route.rs` | where a runnable task goes and whom its arrival wakes |
//! | `idle.rs` | idle and searching counters, the sleepers stack |
//! | `processer.rs` | the Processer loop (`ProcLocal`): pick, switch, gc, search, sleep |
//! | `processer_shared.rs` | the half of a Processer other threads see: queues, counters, flags |
//! | `context.rs` | the thread-local current Processer and task; `schedule` |
//! | `direct.rs` | the direct switch from a task to the next (protocol model-checked with loom) |
//! | `dispatcher.rs` | sampling, blocking detection, rescue, growth |
//! | `task.rs` | the task header, its id, and the `Runnable` token |
//! | `park_state.rs` | the park state machine (model-checked with loom) |
//! | `next_slot.rs` | the next-task slot (model-checked with loom) |
//! | `timer.rs`, `timer_heap.rs` | a deadline queue per core Processer, its indexed heap, user-timer registry |
//! | `io/` | the epoll reactor: readiness, waiting tasks, who polls |
//! | `blocking.rs` | the blocking pool: threads that run `unblock` calls while their tasks park |
//! | `stats.rs` | the counters users read |
//! | `unwind_bank.rs` | panics belong to the task: its panic count leaves the thread with it |
//!
//! Nothing here imports the layers above (`task/`, `time/`, `sync/`,
//! `chan/`): what runs inside a task reaches the runtime through the
//! `TaskVTable` of a task's cell and the `TimerCallback` trait those layers
//! implement.

pub(crate) mod blocking;
pub(crate) mod cells;
pub(crate) mod config;
pub(crate) mod context;
pub(crate) mod direct;
pub(crate) mod dispatcher;
mod dispatcher_detect;
mod dispatcher_rescue;
pub(crate) mod fd_table;
pub(crate) mod idle;
pub(crate) mod io;
pub(crate) mod live;
pub(crate) mod lock;
pub(crate) mod next_slot;
pub(crate) mod park_state;
pub(crate) mod processer;
mod processer_placement;
mod processer_queues;
mod processer_search;
pub(crate) mod processer_shared;
mod processer_timers;
pub(crate) mod route;
pub(crate) mod scheduler;
pub(crate) mod shared;
pub(crate) mod stats;
pub(crate) mod task;
pub(crate) mod timer;
pub(crate) mod timer_heap;
pub(crate) mod unwind_bank;
pub(crate) mod wait;
