//! Deadlines: a timer queue per core Processer, its indexed heap, and
//! sleeping on them.
//!
//! | file | what it is |
//! |---|---|
//! | `timer.rs` | the deadline queue of a Processer, the user-timer registry |
//! | `heap.rs` | the indexed heap under it |
//! | `sleep.rs` | `sleep` and `sleep_until`: park the task (or block the thread) until a deadline |
//!
//! How it talks to the others: a Processer fires its queue between tasks
//! and sleeps no longer than its next deadline (`runtime/processer/timers.rs`);
//! a timer's callback wakes a task through its header or runs a user
//! callback (`src/time/`) through the `TimerCallback` trait defined here.

pub(crate) mod heap;
pub(crate) mod sleep;
pub(crate) mod timer;
