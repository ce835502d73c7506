//! The task as the runtime sees it: its header and cell, its park state,
//! what it waits on, the registry of live tasks, and the panic count it
//! carries across switches.
//!
//! | file | what it is |
//! |---|---|
//! | `header.rs` | the task header, its id, and the `Runnable` token |
//! | `park_state.rs` | the park state machine (model-checked with loom) |
//! | `park.rs` | parking and waking: `park`, `yield_now`, `Task` (public), and the parks with a wait record the layers above use |
//! | `cancel.rs` | cancellation: the request, the checks at each wait, the unwind; `Scheduler::shutdown_now` |
//! | `wait.rs` | what a parked task waits on, for task dumps |
//! | `live.rs` | the registry of live tasks that dumps read |
//! | `cells.rs` | the per-thread cache (and process-wide depot) of task cells' memory |
//! | `unwind_bank.rs` | panics belong to the task: its panic count leaves the thread with it |
//! | `trace.rs` | with the `tracing` feature: the task's span, and the spans it entered, leave the thread with it |
//!
//! How it talks to the others: the layers above (the task API in
//! `src/task/`, sync, channels, IO) park, wake and cancel a task only
//! through `park.rs` and `cancel.rs`; the header's park state decides who files a woken task, and
//! filing goes through `runtime/processer/route.rs`.

pub(crate) mod cancel;
pub(crate) mod cells;
mod header;
pub(crate) mod live;
pub(crate) mod park;
pub(crate) mod park_state;
#[cfg(feature = "tracing")]
pub(crate) mod trace;
pub(crate) mod unwind_bank;
pub(crate) mod wait;

pub use header::*;
