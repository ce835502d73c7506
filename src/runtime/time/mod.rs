//! Deadlines: a timer queue per core Processer and its indexed heap.
//!
//! | file | what it is |
//! |---|---|
//! | `timer.rs` | the deadline queue of a Processer, the user-timer registry |
//! | `heap.rs` | the indexed heap under it |
//!
//! How it talks to the others: a Processer fires its queue between tasks
//! and sleeps no longer than its next deadline (`runtime/processer/timers.rs`);
//! a timer's callback wakes a task through its header or runs a user
//! callback (`src/time/`) through the `TimerCallback` trait defined here.

pub(crate) mod heap;
pub(crate) mod timer;
