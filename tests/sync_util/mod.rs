//! Helpers shared by the `sync_*` test files.
#![allow(dead_code)]

use std::time::Duration;

use gofer::{JoinHandle, Scheduler};

/// The hang guard for waits that must finish: far above any expected time,
/// so it only trips on a deadlock or a lost wake-up.
pub const LIMIT: Duration = Duration::from_secs(20);

/// A scheduler with `threads` Processers.
pub fn sched(threads: usize) -> Scheduler {
    Scheduler::builder().min_threads(threads).build().unwrap()
}

/// Joins every handle, in order, and returns the values. Fails the test if
/// they are not all done within [`LIMIT`] (deadlock or lost wake-up), or if
/// any task panicked.
pub fn join_all<T: Send + 'static>(hs: Vec<JoinHandle<T>>) -> Vec<T> {
    within(move || {
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|e| panic!("a task failed: {e}")))
            .collect()
    })
}

/// Runs `f` on a helper thread and returns its value; fails the test if it
/// does not return within [`LIMIT`], or panics.
pub fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(LIMIT) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("did not finish within {LIMIT:?}: deadlock or lost wake-up"),
    }
}

/// Spins (yielding) until `cond` holds; fails the test after [`LIMIT`].
/// For states that are observable but have no event to wait on.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < LIMIT, "timed out waiting for: {what}");
        gofer::yield_now();
    }
}
