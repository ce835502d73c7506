//! Timer channels, as in crossbeam-channel: [`after`], [`at`], [`tick`]
//! (with [`tick_with`] for a choice of what happens to missed ticks) and
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
//! Processer's timer queue and wakes it on time, see `runtime/time/timer.rs`), a
//! thread sleeps in `park_timeout`, and a `recv_async` future arms a timer
//! entry that wakes its waker. It then looks again, and takes the message
//! if another receiver did not take it first.
//!
//! The channels never disconnect: no `Sender` exists to be dropped, and the
//! sender count, which starts at one, never falls.

use std::time::{Duration, Instant};

use super::channel::Chan;
use super::receiver::Receiver;

/// What a [`tick_with`] channel does with the ticks its receiver missed
/// (it came late by one period or more), as tokio's `MissedTickBehavior`.
///
/// Say the period is 10 ms, ticks are due at 10, 20, 30, ... ms, and the
/// receiver, busy, next looks at 35 ms. It gets the tick due at 10 ms (the
/// message is the instant it was due), then:
///
/// | policy    | next ticks due at     | schedule          |
/// |-----------|-----------------------|-------------------|
/// | `Burst`   | 20, 30 (at once), 40  | kept              |
/// | `Delay`   | 45, 55, 65            | restarts at 35    |
/// | `Skip`    | 40, 50, 60            | kept, 20, 30 lost |
///
/// The channel never stores more than one message whatever the policy:
/// `Burst` makes the missed ones one by one as the receiver looks. A
/// receiver late by less than one period misses nothing, and the schedule
/// holds under every policy.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum MissedTicks {
    /// Deliver every missed tick, back to back as fast as the receiver
    /// takes them, until caught up; then on the original schedule. For
    /// work counted per period (a rate), where each tick must be seen.
    Burst,
    /// Drop the missed ticks and start the schedule over: the next tick is
    /// one period after the late receive (the rule gofer's [`tick`] has
    /// always followed, close to crossbeam-channel's). After a miss, ticks
    /// stay at least a period apart. What [`tick`] does.
    #[default]
    Delay,
    /// Drop the missed ticks and keep the schedule: the next tick is the
    /// first one of the original schedule after the late receive (Go's
    /// `time.Ticker`).
    Skip,
}

/// Where a timer channel's messages come from: the deadline of the next one
/// (none once an `after` delivered), and the period of a `tick` with its
/// policy for missed ticks. Kept in the channel's state, under its lock.
pub(crate) struct Clock<T> {
    next: Option<Instant>,
    period: Option<(Duration, MissedTicks)>,
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
    /// it was due at. An `after` then has no more; a `tick` is next due as
    /// its [`MissedTicks`] policy says.
    pub(crate) fn take(&mut self, now: Instant) -> Option<T> {
        let due = self.next.filter(|d| now >= *d)?;
        self.next = self
            .period
            .and_then(|(p, missed)| next_tick(due, now, p, missed));
        Some((self.make)(due))
    }
}

/// When a tick is next due, after the one due at `due` was taken at `now`
/// (`now >= due`). `None` past the end of `Instant`'s range: no more ticks.
fn next_tick(due: Instant, now: Instant, period: Duration, missed: MissedTicks) -> Option<Instant> {
    let on_time = due.checked_add(period)?;
    match missed {
        MissedTicks::Burst => Some(on_time),
        _ if on_time > now => Some(on_time),
        MissedTicks::Delay => now.checked_add(period),
        MissedTicks::Skip if period.is_zero() => Some(on_time),
        MissedTicks::Skip => {
            // The first point of the schedule `due + k * period` after `now`.
            let p = period.as_nanos();
            let into = (now - due).as_nanos() % p;
            let to_next = u64::try_from(p - into).ok()?;
            now.checked_add(Duration::from_nanos(to_next))
        }
    }
}

/// A timer channel delivering its first message at `first` (never, if
/// `None`), then every `period` if given.
fn clock(first: Option<Instant>, period: Option<(Duration, MissedTicks)>) -> Receiver<Instant> {
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
/// are not stored up, and after a receive late by a period or more the next
/// tick comes one period after it ([`MissedTicks::Delay`]; [`tick_with`]
/// chooses another policy). It never
/// disconnects.
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
    tick_with(duration, MissedTicks::Delay)
}

/// Like [`tick`], with `missed` saying what happens to the ticks a late
/// receiver missed: delivered at once ([`Burst`](MissedTicks::Burst)),
/// dropped with the schedule restarted ([`Delay`](MissedTicks::Delay)), or
/// dropped with the schedule kept ([`Skip`](MissedTicks::Skip)). [`tick`]
/// is `Delay`.
///
/// ```
/// use std::time::{Duration, Instant};
/// use gofer::chan::{tick_with, MissedTicks};
///
/// let period = Duration::from_millis(5);
/// let ticker = tick_with(period, MissedTicks::Burst);
/// std::thread::sleep(period * 4); // busy: ticks are missed
/// let first = ticker.recv().unwrap();
/// // The missed ones come at once, each with the instant it was due.
/// let second = ticker.try_recv().unwrap();
/// assert_eq!(second - first, period);
/// ```
pub fn tick_with(duration: Duration, missed: MissedTicks) -> Receiver<Instant> {
    clock(
        Instant::now().checked_add(duration),
        Some((duration, missed)),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    const P: Duration = Duration::from_millis(10);

    fn ticker(start: Instant, missed: MissedTicks) -> Clock<Instant> {
        Clock {
            next: Some(start + P),
            period: Some((P, missed)),
            make: |t| t,
        }
    }

    /// Takes every message due at `now`, as a receiver that looks again and
    /// again at that instant.
    fn drain(c: &mut Clock<Instant>, now: Instant) -> Vec<Instant> {
        std::iter::from_fn(|| c.take(now)).take(1000).collect()
    }

    /// The receiver looks at 3.5 periods, after sleeping through two ticks.
    #[test]
    fn each_policy_after_a_receiver_late_by_two_and_a_half_periods() {
        let t0 = Instant::now();
        let late = t0 + P * 7 / 2;

        let mut burst = ticker(t0, MissedTicks::Burst);
        assert_eq!(drain(&mut burst, late), [t0 + P, t0 + P * 2, t0 + P * 3]);
        assert_eq!(burst.deadline(), Some(t0 + P * 4), "schedule kept");

        let mut delay = ticker(t0, MissedTicks::Delay);
        assert_eq!(drain(&mut delay, late), [t0 + P]);
        assert_eq!(delay.deadline(), Some(late + P), "schedule restarted");

        let mut skip = ticker(t0, MissedTicks::Skip);
        assert_eq!(drain(&mut skip, late), [t0 + P]);
        assert_eq!(skip.deadline(), Some(t0 + P * 4), "schedule kept");
    }

    #[test]
    fn a_receiver_on_the_schedule_point_skips_to_the_next_one() {
        let t0 = Instant::now();
        let mut skip = ticker(t0, MissedTicks::Skip);
        assert_eq!(drain(&mut skip, t0 + P * 3), [t0 + P]);
        assert_eq!(skip.deadline(), Some(t0 + P * 4));
    }

    #[test]
    fn a_receiver_late_by_less_than_a_period_keeps_the_schedule() {
        let t0 = Instant::now();
        let late = t0 + P * 3 / 2;
        for missed in [MissedTicks::Burst, MissedTicks::Delay, MissedTicks::Skip] {
            let mut c = ticker(t0, missed);
            assert_eq!(drain(&mut c, late), [t0 + P], "{missed:?}");
            assert_eq!(c.deadline(), Some(t0 + P * 2), "{missed:?}");
        }
    }

    #[test]
    fn nothing_is_due_before_the_first_deadline() {
        let t0 = Instant::now();
        for missed in [MissedTicks::Burst, MissedTicks::Delay, MissedTicks::Skip] {
            let mut c = ticker(t0, missed);
            assert!(drain(&mut c, t0 + P / 2).is_empty());
            assert_eq!(c.deadline(), Some(t0 + P));
        }
    }
}
