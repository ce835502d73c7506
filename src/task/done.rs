//! [`with_done`]: a task's end as a channel, so that
//! [`select!`](crate::select) and [`Select`](crate::chan::Select) can wait
//! for a task alongside channels, timers and a
//! [`CancelToken`](super::CancelToken).
//!
//! The closure is wrapped so that it holds the only [`Sender`] of a channel
//! that never carries a value; the sender is dropped when the closure
//! returns, unwinds, or is dropped without ever running, and the channel
//! disconnects. It lives beside the closure, not in the task's join state,
//! so it works with every way of spawning (`spawn`, `go!`,
//! `Scheduler::spawn`, `Builder`, scoped tasks) and costs nothing to the
//! tasks that do not ask for it.

use std::convert::Infallible;

use crate::chan::{self, Receiver};

/// Wraps `f` so that the returned channel disconnects when `f` ends:
/// returns, panics, or is dropped without running (a task refused or
/// cancelled before it started). Spawn the wrapped closure any way you
/// like, then wait for its end with a `recv` arm on the channel.
///
/// The channel never carries a value: a receive returns
/// [`RecvError`](crate::chan::RecvError) once `f` has ended. The task's
/// result is then stored a moment later, so a `join` right after waits
/// only for the task to finish its last step.
///
/// ```
/// use std::time::Duration;
/// use gofer::chan::after;
///
/// let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
/// let (work, done) = gofer::task::with_done(|| 6 * 7);
/// let h = sched.spawn(work);
/// let answer = gofer::select! {
///     recv(done) -> _ => h.join().unwrap(),
///     recv(after(Duration::from_secs(30))) -> _ => panic!("too slow"),
/// };
/// assert_eq!(answer, 42);
/// sched.shutdown();
/// ```
pub fn with_done<F, T>(f: F) -> (impl FnOnce() -> T + Send, Receiver<Infallible>)
where
    F: FnOnce() -> T + Send,
{
    let (tx, rx) = chan::bounded::<Infallible>(0);
    let work = move || {
        // Dropped when `f` returns or unwinds; with the closure if it
        // never runs.
        let _tx = tx;
        f()
    };
    (work, rx)
}
