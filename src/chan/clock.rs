//! Timer channels, as in crossbeam-channel: [`after`], [`at`], [`tick`] and
//! [`never()`].
//!
//! Each is an ordinary channel (a [`Receiver`] like any other, so it works
//! with `recv`, `try_recv`, `recv_timeout`, iterators, [`select!`](crate::select),
//! [`Select`](super::Select) and [`recv_async`](Receiver::recv_async)) that
//! has no sender. Its messages are not sent by anyone: they are made on
//! demand, from a [`Clock`] in the channel's state, when a receiver looks
//! and the deadline has passed. Nothing runs while nobody looks: no thread
//! per timer, no timer entry for a channel nobody waits on, and a `tick`
//! nobody reads costs nothing.
//!
//! A receiver that has to wait for the deadline waits like any timed
//! operation: a task parks on gofer's timers (the entry lives on its
//! Processer's timer queue and wakes it on time, see `runtime/timer.rs`), a
//! thread sleeps in `park_timeout`, and a `recv_async` future arms a timer
//! entry that wakes its waker. It then looks again, and takes the message
//! if another receiver did not take it first.
//!
//! The channels never disconnect: no `Sender` exists to be dropped, and the
//! sender count, which starts at one, never falls.

use std::time::{Duration, Instant};

use super::channel::Chan;
use super::receiver::Receiver;

/// Where a timer channel's messages come from: the deadline of the next one
/// (none once an `after` delivered), and the period of a `tick`. Kept in the
/// channel's state, under its lock.
pub(crate) struct Clock<T> {
    next: Option<Instant>,
    period: Option<Duration>,
    /// Turns the deadline into the message (`T` is `Instant` for every timer
    /// channel; a function pointer keeps the channel generic).
    make: fn(Instant) -> T,
}

impl<T> Clock<T> {
    /// Whether a message is due at `now`.
    pub(crate) fn is_due(&self, now: Instant) -> bool {
        self.next.is_some_and(|d| now >= d)
    }

    /// When the next message is due, if one ever is.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.next
    }

    /// Takes the message due at `now`, if any. The message is the deadline
    /// it was due at. An `after` then has no more; a `tick` is next due one
    /// period after this one, or one period after `now` if the receiver
    /// came later than that: ticks nobody read do not pile up (crossbeam's
    /// rule).
    pub(crate) fn take(&mut self, now: Instant) -> Option<T> {
        let due = self.next.filter(|d| now >= *d)?;
        self.next = self.period.and_then(|p| {
            let on_time = due.checked_add(p)?;
            if on_time > now {
                Some(on_time)
            } else {
                now.checked_add(p)
            }
        });
        Some((self.make)(due))
    }
}

/// A timer channel delivering its first message at `first` (never, if
/// `None`), then every `period` if given.
fn clock(first: Option<Instant>, period: Option<Duration>) -> Receiver<Instant> {
    let clock = Clock {
        next: first,
        period,
        make: |t| t,
    };
    Receiver::from_chan(Chan::new_timer(Some(1), Some(clock)))
}

/// A receiver that gets one message once `duration` has passed: the
/// [`Instant`] it was due at. Then nothing more, and it never disconnects
/// (a `recv` after the message waits for ever). The channel has capacity 1.
///
/// As a timeout in [`select!`](crate::select):
///
/// ```
/// use std::time::Duration;
/// use gofer::chan::{after, unbounded};
///
/// let (_tx, rx) = unbounded::<i32>();
/// let timed_out = gofer::select! {
///     recv(rx) -> _ => false,
///     recv(after(Duration::from_millis(10))) -> _ => true,
/// };
/// assert!(timed_out);
/// ```
///
/// Inside a task the wait parks the task on gofer's timers; outside one it
/// blocks the thread. No thread is started per timer.
pub fn after(duration: Duration) -> Receiver<Instant> {
    clock(Instant::now().checked_add(duration), None)
}

/// A receiver that gets one message at `when` (at once if `when` has
/// passed): `when` itself. Then nothing more, as for [`after`].
///
/// ```
/// use std::time::{Duration, Instant};
/// let when = Instant::now() + Duration::from_millis(5);
/// assert_eq!(gofer::chan::at(when).recv(), Ok(when));
/// assert!(Instant::now() >= when);
/// ```
pub fn at(when: Instant) -> Receiver<Instant> {
    clock(Some(when), None)
}

/// A receiver that gets a message every `duration`: the [`Instant`] each
/// was due at. The channel holds at most one message: ticks nobody receives
/// are not stored up, and after a late receive the next tick comes one
/// period after it (crossbeam's rule). It never disconnects.
///
/// ```
/// use std::time::{Duration, Instant};
/// let start = Instant::now();
/// let ticker = gofer::chan::tick(Duration::from_millis(5));
/// for _ in 0..3 {
///     ticker.recv().unwrap();
/// }
/// assert!(start.elapsed() >= Duration::from_millis(15));
/// ```
///
/// A zero `duration` makes a message ready at every look.
pub fn tick(duration: Duration) -> Receiver<Instant> {
    clock(Instant::now().checked_add(duration), Some(duration))
}

/// A receiver that never gets a message and never disconnects: a
/// `select!` arm that is never ready, for an optional channel.
///
/// ```
/// use std::time::Duration;
/// use gofer::chan::{never, Receiver};
///
/// let maybe: Option<Receiver<i32>> = None;
/// let idle = gofer::select! {
///     recv(maybe.unwrap_or_else(never)) -> _ => false,
///     default(Duration::from_millis(5)) => true,
/// };
/// assert!(idle);
/// ```
///
/// Its capacity is 0, as for a rendezvous channel.
pub fn never<T>() -> Receiver<T> {
    Receiver::from_chan(Chan::new_timer(Some(0), None))
}
