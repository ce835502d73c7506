//! The runtime core: schedulers, their Processers and Dispatcher, the task
//! as the runtime sees it, timers, the blocking pool, the IO drivers, and
//! the dumps that look inside them.
//!
//! | file or folder | what it is |
//! |---|---|
//! | `scheduler.rs` | the public `Scheduler` handle, the default scheduler, `SchedulerBuilder::build`; the methods `builder`, `default_scheduler`, `name`, `stats`, `shutdown`, `shutdown_timeout` |
//! | `config.rs` | `SchedulerBuilder`'s settings, the accepted range of each, the default scheduler's environment variables |
//! | `stats.rs` | the counters users read (`Stats`, `ProcesserStats`) |
//! | `shared.rs` | a scheduler's shared state: Processer table, admission, lifecycle |
//! | `context.rs` | the thread-local current Processer and task; `schedule` |
//! | `fd_table.rs` | sizing the process's descriptor table at build |
//! | `processer/` | the Processer: its loop, queues, next-task slot, placement, direct switch, search and sleep |
//! | `dispatcher/` | the Dispatcher: its cycle, detecting blocked Processers, moving their queued tasks, adding threads |
//! | `task/` | the task header and `Runnable`, the park state machine, parking and cancellation, waits, live tasks, cell memory, the panic count a task carries |
//! | `time/` | a deadline queue per core Processer, its heap, `sleep` |
//! | `blocking/` | the blocking pool behind `unblock` and `gofer::fs` |
//! | `io/` | the IO drivers: the epoll reactor, one socket's readiness, the io_uring driver, the choice between them |
//! | `dump/` | task dumps, the walk of a parked stack, the backtrace of a blocked call, the stall report |
//!
//! Each folder opens with its own table and says how it talks to the
//! others. They form one circle of imports, which is the core's shape: a
//! task header names its scheduler (`TaskHeader::shared`, so a wake-up from
//! any thread knows where to push), and every part of the scheduler holds
//! tasks (queues of `Runnable`s, timer entries); ARCHITECTURE.md, "The
//! tree", says why it is not cut.
//!
//! `Scheduler`'s methods live with what they do: `builder`,
//! `default_scheduler`, `name`, `stats`, `shutdown` and `shutdown_timeout`
//! in `scheduler.rs`; `shutdown_now` and `shutdown_now_timeout` in
//! `task/cancel.rs`; `spawn` and `block_on` in `src/task/spawn.rs`; `scope`
//! in `src/task/scope.rs`; `dump` in `src/debug/mod.rs`.
//!
//! The runtime reaches the layers above it through interfaces it defines
//! and they implement: the `TaskVTable` of a task's cell, the
//! `TimerCallback` trait, and the lookup of registrations the hooks made
//! (`io/reactor.rs`, `shared_registration`). One call goes up, and
//! `scripts/modgraph.py` names it: `scheduler.rs` calls `hooks::keep()` so
//! that the linker keeps the hooked symbols in every program that builds a
//! scheduler.

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
