//! The Dispatcher: one thread per scheduler that watches the Processers,
//! moves the queued tasks of a blocked one, and adds threads when all are
//! blocked.
//!
//! | file | what it is |
//! |---|---|
//! | `cycle.rs` | the Dispatcher thread: its cycle and naps |
//! | `detect.rs` | cycle steps 1-2: sampling switch counters, judging suspects |
//! | `rescue.rs` | cycle steps 3-5: moving queued tasks, growing threads, balancing |
//!
//! How it talks to the others: it reads each Processer's switch counter
//! and flags (`runtime/processer/shared.rs`), takes tasks only through
//! thief handles and hands them on through `processer/route.rs`, starts
//! Processer threads through `runtime/shared.rs`, and asks a blocked thread
//! for its backtrace through `runtime/dump/blocked_call.rs`.

mod cycle;
mod detect;
pub(crate) mod rescue;

pub(crate) use cycle::*;
