//! The Processer: one OS thread that runs tasks, and the queues, slot and
//! sleep that feed it.
//!
//! A Processer keeps a *new* queue (tasks pushed from other threads), a
//! *runnable* queue (its own work, stealable) with a next-task slot in
//! front of it, and a *gc* queue (finished tasks, freed in batches). It
//! counts every switch into a task; the Dispatcher reads that count.
//!
//! | file | what it is |
//! |---|---|
//! | `run.rs` | the Processer loop (`ProcLocal`): pick, switch, file, gc |
//! | `shared.rs` | the half of a Processer other threads see: queues, counters, flags |
//! | `queues.rs` | its own queues and next-task slot, pulls from its remote queues, hand-off at stop |
//! | `next_slot.rs` | the next-task slot (model-checked with loom) |
//! | `placement.rs` | binding a task to the Processer of its first run, fresh placement, pins |
//! | `route.rs` | where a task pushed from another thread goes and whom its arrival wakes |
//! | `direct.rs` | the direct switch from a task to the next (protocol model-checked with loom) |
//! | `timers.rs` | firing timers and polling the reactor (and the io_uring) between tasks |
//! | `search.rs` | stealing, spinning, sleeping without a lost wake-up |
//! | `idle.rs` | the scheduler's idle and searching counters, the sleepers stack |
//!
//! How it talks to the others: tasks come in through `route.rs` (from any
//! thread) and leave through the task header (`runtime/task/`), whose park
//! state says who files a task that parks. The Dispatcher
//! (`runtime/dispatcher/`) only reads `shared.rs` and steals through its
//! thief handles; timers (`runtime/time/`) and the IO drivers
//! (`runtime/io/`) are polled from `timers.rs` between tasks and when the
//! Processer is about to sleep.

pub(crate) mod direct;
pub(crate) mod idle;
pub(crate) mod next_slot;
mod placement;
mod queues;
pub(crate) mod route;
mod run;
mod search;
pub(crate) mod shared;
mod timers;

pub(crate) use run::*;
