//! Looking inside a running program: task dumps, the stall report and the
//! backtrace of a thread blocked in a call. The public face is
//! `gofer::debug` (`src/debug/`).
//!
//! | file | what it is |
//! |---|---|
//! | `tasks.rs` | taking a dump: every live task's state, wait and stack (`Dump`) |
//! | `walk.rs` | walking a parked task's stack without resuming it |
//! | `blocked_call.rs` | the backtrace of a thread blocked in a call, by signal |
//! | `stall.rs` | the stall report: a dump printed when nothing progresses |
//!
//! How it talks to the others: it reads the live-task registry
//! (`runtime/task/live.rs`) and each Processer's shared half, and never
//! resumes, wakes or moves a task.

pub(crate) mod blocked_call;
pub(crate) mod stall;
mod tasks;
mod walk;

pub use tasks::*;
