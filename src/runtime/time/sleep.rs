//! Sleeping: [`sleep`] and [`sleep_until`], which park the task (or block
//! the thread, outside a task) until a deadline.

use std::time::{Duration, Instant};

use crate::runtime::task::wait::WaitOn;

/// Sleeps the current task (or thread, outside a task) for `d`.
///
/// A cancelled task unwinds from the sleep
/// ([`JoinHandle::cancel`](crate::JoinHandle::cancel)).
pub fn sleep(d: Duration) {
    match Instant::now().checked_add(d) {
        Some(deadline) => sleep_until(deadline),
        None => loop {
            crate::runtime::task::cancel::checkpoint();
            match crate::runtime::task::cancel::recheck(None) {
                None => crate::runtime::task::park::park_on(WaitOn::Sleep),
                Some(soon) => crate::runtime::task::park::park_deadline_on(soon, WaitOn::Sleep),
            }
        },
    }
}

/// Sleeps the current task (or thread) until `deadline`.
///
/// A cancelled task unwinds from the sleep
/// ([`JoinHandle::cancel`](crate::JoinHandle::cancel)).
pub fn sleep_until(deadline: Instant) {
    // park_deadline may return early (a stray unpark); loop until due. The
    // timer entry of each park is gone when it returns, so a cancelled task
    // may unwind between two.
    while Instant::now() < deadline {
        crate::runtime::task::cancel::checkpoint();
        let until = crate::runtime::task::cancel::recheck(Some(deadline)).unwrap_or(deadline);
        crate::runtime::task::park::park_deadline_on(until, WaitOn::Sleep);
    }
}
