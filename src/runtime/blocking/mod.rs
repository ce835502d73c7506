//! The blocking pool: plain OS threads that make the calls tasks hand off
//! (`unblock`, every operation of `gofer::fs`, the hooks' offloaded calls)
//! while the calling task parks on its own Processer.
//!
//! | file | what it is |
//! |---|---|
//! | `pool.rs` | the pool of one scheduler: its job queue, threads, growth, spin and shutdown |
//!
//! How it talks to the rest: a submitter (a task, through `task/unblock.rs`)
//! hands a [`Job`](pool::Job) to [`BlockingPool::submit`](pool::BlockingPool::submit)
//! and parks; the pool thread runs it and wakes the task through its
//! header (`runtime/task/`), which puts it back on its Processer's remote
//! queue. The pool never runs task code and holds no Processer state.

pub(crate) mod pool;
