//! Sleeping: [`sleep`] and [`sleep_until`], which park the task (or block
//! the thread, outside a task) until a deadline.

use std::time::{Duration, Instant};

use crate::runtime::wait::WaitOn;

/// Sleeps the current task (or thread, outside a task) for `d`.
pub fn sleep(d: Duration) {
    match Instant::now().checked_add(d) {
        Some(deadline) => sleep_until(deadline),
        None => loop {
            crate::task::park::park_on(WaitOn::Sleep);
        },
    }
}

/// Sleeps the current task (or thread) until `deadline`.
pub fn sleep_until(deadline: Instant) {
    // park_deadline may return early (a stray unpark); loop until due.
    while Instant::now() < deadline {
        crate::task::park::park_deadline_on(deadline, WaitOn::Sleep);
    }
}
