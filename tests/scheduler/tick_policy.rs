//! `gofer::chan::tick_with`: what each `MissedTicks` policy does after the
//! receiver was away for many periods, on a plain thread and in a task.
//!
//! Each message is the instant its tick was due, so the tests check the
//! schedule exactly, not by timing: a tick on the original schedule is the
//! first one plus a whole number of periods, to the nanosecond. The
//! receiver sleeps through at least `MISSED` periods (a sleep never ends
//! early), so the counts below hold however loaded the machine is.

use crate::common;

use std::time::{Duration, Instant};

use common::{in_child, PATIENCE};
use gofer::chan::{after, tick, tick_with, MissedTicks, TryRecvError};
use gofer::{select, Scheduler};

const P: Duration = Duration::from_millis(30);
const MISSED: u32 = 10;

/// Whether `later` is on the schedule of ticks that has `first` on it.
fn on_schedule(first: Instant, later: Instant) -> bool {
    (later - first).as_nanos() % P.as_nanos() == 0
}

#[test]
fn burst_delivers_every_missed_tick_at_once_then_keeps_the_schedule() {
    let rx = tick_with(P, MissedTicks::Burst);
    std::thread::sleep(P * MISSED);
    // Every tick due during the sleep is there, one after the other.
    let got: Vec<Instant> = rx.try_iter().take(1000).collect();
    assert!(
        got.len() >= MISSED as usize,
        "{} ticks after {MISSED} periods",
        got.len()
    );
    for w in got.windows(2) {
        assert_eq!(w[1] - w[0], P, "missed ticks come one period apart");
    }
    // Then the schedule goes on: the next is the following point of it.
    let next = rx.recv().unwrap();
    assert_eq!(next - *got.last().unwrap(), P);
}

#[test]
fn skip_drops_missed_ticks_and_keeps_the_schedule() {
    let rx = tick_with(P, MissedTicks::Skip);
    std::thread::sleep(P * MISSED);
    let before = Instant::now();
    let first = rx.try_recv().expect("a tick is due");
    let second = rx.recv().unwrap();
    // Not one of the missed ones (a burst would give first + P)...
    assert!(second > before, "a missed tick was delivered");
    assert!(second - first >= P * MISSED);
    // ...but a point of the original schedule (a delay would restart it at
    // the late receive).
    assert!(on_schedule(first, second), "the schedule moved");
    assert!(second - before <= P + PATIENCE);
}

#[test]
fn delay_drops_missed_ticks_and_restarts_the_schedule_at_the_late_receive() {
    let rx = tick_with(P, MissedTicks::Delay);
    std::thread::sleep(P * MISSED);
    let before = Instant::now();
    let first = rx.try_recv().expect("a tick is due");
    assert_eq!(
        rx.try_recv(),
        Err(TryRecvError::Empty),
        "missed ticks are dropped"
    );
    let second = rx.recv().unwrap();
    let second_taken = Instant::now();
    // A full period after the late receive (a skip gives the next point of
    // the old schedule, less than a period after it)...
    assert!(
        second >= before + P,
        "less than a period after the late receive"
    );
    // ...so off the old schedule.
    assert!(!on_schedule(first, second), "the schedule was kept");
    // Then the new schedule holds: the next tick is due a period after the
    // second (each message is the instant its tick was due).
    let third = rx.recv().unwrap();
    assert_eq!(third - second, P);
    assert!(third <= second_taken + P, "due a period after the receive");
    // `tick` is `Delay`.
    let rx = tick(P);
    std::thread::sleep(P * MISSED);
    let before = Instant::now();
    let first = rx.try_recv().expect("a tick is due");
    let second = rx.recv().unwrap();
    assert!(second >= before + P && !on_schedule(first, second));
}

#[test]
fn burst_in_a_select_inside_a_task() {
    in_child(module_path!(), "burst_in_a_select_inside_a_task", || {
        let s = Scheduler::builder()
            .min_threads(1)
            .max_threads(1)
            .build()
            .unwrap();
        let h = s.spawn(|| {
            let rx = tick_with(P, MissedTicks::Burst);
            gofer::sleep(P * MISSED);
            // Every missed tick is ready at once: none of these selects
            // waits, so the timeout arm never wins.
            let timeout = after(PATIENCE);
            let mut got = Vec::new();
            while got.len() < MISSED as usize {
                select! {
                    recv(rx) -> t => got.push(t.unwrap()),
                    recv(timeout) -> _ => panic!("a missed tick was not delivered"),
                }
            }
            got
        });
        let got = h.join().unwrap();
        for w in got.windows(2) {
            assert_eq!(w[1] - w[0], P);
        }
        s.shutdown();
    });
}
