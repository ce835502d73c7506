//! The task API: spawning (`Builder`, `spawn`, `go!`, `Scheduler::spawn`,
//! `Scheduler::block_on`), waiting for a result (`JoinHandle`), parking and
//! waking (`park`, `Task::unpark`, `yield_now`), and coroutine-local values.

pub(crate) mod builder;
pub(crate) mod join;
pub(crate) mod locals;
pub(crate) mod park;
pub(crate) mod spawn;
