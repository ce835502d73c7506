//! Channels (`gofer::chan`: bounded, unbounded, select, timers, async
//! bridges, Go's channel tests) and the sync primitives (mutex, rwlock,
//! condvar, semaphore, barrier, wait group) in one binary.
//!
//! Each test builds its own schedulers and channels; what could hang runs
//! under a bound (`sync_util::within`) or in a child process under a
//! watchdog (`common::in_child`), as do the tests that count the process's
//! threads. One binary rather than one per file: each links the whole
//! crate and its dependencies.

#[path = "../common/mod.rs"]
mod common;
#[path = "../sync_util/mod.rs"]
mod sync_util;

mod chan_async;
mod chan_basic;
mod chan_dynamic_select;
mod chan_golang;
mod chan_select;
mod chan_timers;
mod semaphore_owned;
mod sync_barrier;
mod sync_condvar;
mod sync_mutex;
mod sync_rwlock;
mod sync_semaphore;
mod sync_waitgroup;
