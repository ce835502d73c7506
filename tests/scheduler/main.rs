//! The scheduler's tests in one binary: spawning, joining, parking,
//! stealing, pinning, fairness, timers, cancellation, panics, stacks,
//! fibers, shutdown, configuration, signals, and the diagnostics of blocked
//! threads (stats, task dumps, stall reports).
//!
//! They share one process: each runs on schedulers of its own (named for
//! it where threads are counted), and what reaches the whole process (a
//! signal handler, the panic hook, an environment variable read by the
//! default scheduler, the memory-mapping count or the descriptor table at
//! their limits, stack overflows) runs in a child process under a
//! watchdog (`common::in_child` and the `run_child*` helpers). One binary
//! rather than one per file: each links the whole crate and its
//! dependencies, and these share the same helpers.

#[path = "../common/mod.rs"]
mod common;

mod block_on;
mod blocked_behind;
mod blocked_call;
mod blocking_recipes;
mod blocking_rescue;
mod cancel;
mod cancel_token;
mod config_limits;
mod debug_dump;
mod debug_page;
mod direct_switch;
mod fairness;
mod fiber;
mod fiber_borrow;
mod fiber_in_task;
mod future_bridge;
mod generator;
mod join_sync;
mod join_timeout;
mod joinset;
mod metrics;
mod panic;
mod panic_neighbours;
mod panic_park;
mod panic_reports;
mod park;
mod pin;
mod scheduler;
mod scope;
mod shutdown;
mod signal;
mod spawn_join;
mod stack;
mod stack_dense;
mod stack_lockout;
mod steal;
mod tick_policy;
mod timer;
mod timer_batch;
mod timer_conditions;
mod timer_lifecycle;
