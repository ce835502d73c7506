//! Timers on the Processers' own queues: 10,000 sleepers wake in deadline
//! order, never early, with bounded lateness; and a sleeper still wakes on
//! time while every Processer is busy, and while its own Processer is
//! blocked in the kernel.
//!
//! Time is the subject here, so the bounds are on time, and generous: the
//! machine is a loaded 2-core VM. The figures worth comparing live in
//! `bench/benches/sleep.rs`; these tests print what they measured.

use crate::common;
use crate::net_common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gofer::{Builder, Scheduler};
use net_common::{percentiles, sched};

const SLEEPERS: usize = 10_000;
const NAP: Duration = Duration::from_millis(10);

/// Bounds on lateness that a loaded 2-core VM keeps, other engineers'
/// builds included (the goal, measured by the bench on a quiet machine, is
/// 1 ms at p99; seen here under load: p99 2 to 30 ms, once 130 ms).
const P99_BOUND: Duration = Duration::from_millis(250);
const MAX_BOUND: Duration = Duration::from_secs(1);

// The tests of this file take turns with every test of the binary
// (`one_at_a_time`): each measures time, and the others' spinning and
// sleeping tasks would compete for the same two CPUs.
use crate::one_at_a_time;

/// One sleeper's record: when it asked to wake and when it ran again.
#[derive(Clone, Copy)]
struct Nap {
    deadline: Instant,
    woke: Instant,
}

/// Spawns `SLEEPERS` tasks that each sleep `NAP`, and collects their
/// records.
fn round(s: &Scheduler) -> Vec<Nap> {
    let hs: Vec<_> = (0..SLEEPERS)
        .map(|_| {
            s.spawn(|| {
                let deadline = Instant::now() + NAP;
                gofer::sleep(NAP);
                Nap {
                    deadline,
                    woke: Instant::now(),
                }
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

/// 10,000 tasks each sleep 10 ms on two Processers: none wakes before its
/// deadline; lateness (from the deadline to running again) stays within a
/// generous bound; and the order of waking follows the order of deadlines
/// at that bound's granularity: nobody wakes while a sleeper whose
/// deadline came more than the bound earlier is still asleep.
#[test]
fn ten_thousand_sleepers_wake_in_deadline_order_never_early_with_bounded_lateness() {
    let _turn = one_at_a_time();
    let s = sched("sleepers", 2);
    // A first round maps and pools the stacks; the second is measured.
    let cold = round(&s);
    let mut naps = round(&s);
    s.shutdown();
    for (which, naps) in [("cold", &cold), ("warm", &naps)] {
        for n in naps.iter() {
            assert!(
                n.woke >= n.deadline,
                "{which}: a sleeper woke {:?} early",
                n.deadline - n.woke
            );
        }
    }
    let mut late: Vec<Duration> = naps.iter().map(|n| n.woke - n.deadline).collect();
    let (p50, p99, max) = percentiles(&mut late);
    // Deadline order: sort by deadline; each sleeper's wake must come after
    // the wake of every sleeper whose deadline is P99_BOUND or more earlier.
    naps.sort_by_key(|n| n.deadline);
    let mut earlier_woke_max: Option<Instant> = None;
    let mut i = 0;
    let mut out_of_order = 0usize;
    for j in 0..naps.len() {
        while naps[i].deadline + P99_BOUND <= naps[j].deadline {
            earlier_woke_max = earlier_woke_max.max(Some(naps[i].woke));
            i += 1;
        }
        if earlier_woke_max.is_some_and(|w| w > naps[j].woke) {
            out_of_order += 1;
        }
    }
    // For the record: neighbours in deadline order that woke the other way
    // round (within a batch, on two threads, that is expected).
    let swapped = naps.windows(2).filter(|w| w[1].woke < w[0].woke).count();
    eprintln!(
        "{SLEEPERS} sleepers of {NAP:?} on 2 threads, warm round: lateness p50 {p50:?}, \
         p99 {p99:?}, max {max:?}; {swapped} neighbours woke swapped"
    );
    assert!(p99 <= P99_BOUND, "p99 lateness {p99:?}");
    assert!(max <= MAX_BOUND, "max lateness {max:?}");
    assert_eq!(
        out_of_order, 0,
        "sleepers woke while others due {P99_BOUND:?} earlier still slept"
    );
}

/// Every Processer runs tasks that yield in a loop (always busy, never
/// idle, so no Processer sleeps until its next timer): a sleeper still
/// wakes on time, every time.
#[test]
fn a_sleeper_wakes_on_time_while_every_processer_is_busy() {
    let _turn = one_at_a_time();
    let s = sched("busy", 2);
    let stop = Arc::new(AtomicBool::new(false));
    let spinners: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            s.spawn(move || {
                let mut turns = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    gofer::yield_now();
                    turns += 1;
                }
                turns
            })
        })
        .collect();
    let late = s
        .spawn(|| {
            (0..20)
                .map(|_| {
                    let deadline = Instant::now() + Duration::from_millis(5);
                    gofer::sleep_until(deadline);
                    Instant::now().duration_since(deadline)
                })
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    for sp in spinners {
        assert!(sp.join().unwrap() > 0);
    }
    s.shutdown();
    let mut late = late;
    let (p50, _, max) = percentiles(&mut late);
    eprintln!(
        "20 sleeps of 5 ms among 4 spinning tasks on 2 threads: lateness p50 {p50:?}, max {max:?}"
    );
    assert!(max <= Duration::from_millis(250), "lateness {max:?}");
}

/// A sleeper's timer sits on its Processer's queue; that Processer then
/// blocks in the kernel (a raw `nanosleep` in a task, which no hook
/// turns into a task sleep) for a second.
/// The Dispatcher fires the overdue timer, and the sleeper runs on the
/// other Processer, long before the block ends.
#[test]
fn a_sleeper_whose_processer_blocks_in_the_kernel_still_wakes_on_time() {
    let _turn = one_at_a_time();
    // The scenario is a started task rescued from a blocked thread, so its
    // tasks are allowed to move.
    // SAFETY: they touch no thread-local across a switch (their state is in
    // their frames, timers and atomics).
    let s = unsafe {
        Scheduler::builder()
            .min_threads(2)
            .max_threads(2)
            .name("tblk")
            .migrate_started_tasks(true)
    }
    .build()
    .unwrap();
    const BLOCK: Duration = Duration::from_secs(1);
    const NAP: Duration = Duration::from_millis(20);
    // The blocker, pinned to Processer 0, spawns the sleeper there; the
    // other Processer may steal it first, and then it gives up and the
    // blocker tries again. A sleeper that starts on Processer 0 puts its
    // timer on that Processer's queue and wakes the blocker, which then
    // blocks the thread (nothing switches between the two).
    let blocker = Builder::new()
        .scheduler(&s)
        .pin(0)
        .spawn(move || loop {
            let (tx, rx) = gofer::chan::bounded::<()>(1);
            let sleeper = gofer::spawn(move || {
                if common::thread_name() != "tblk-0" {
                    return None;
                }
                tx.send(()).unwrap();
                let deadline = Instant::now() + NAP;
                gofer::sleep_until(deadline);
                Some((Instant::now(), deadline, common::thread_name()))
            });
            if rx.recv().is_err() {
                assert!(sleeper.join().unwrap().is_none());
                continue;
            }
            let start = Instant::now();
            common::block_thread_in_kernel(BLOCK);
            let record = sleeper.join().unwrap().expect("it slept");
            return (start, record);
        })
        .unwrap();
    let (block_start, (woke, deadline, woke_on)) = blocker.join().unwrap();
    let st = s.stats();
    s.shutdown();
    let late = woke.duration_since(deadline);
    eprintln!("sleeper on a Processer blocked in the kernel: {late:?} late, woke on {woke_on}");
    assert!(woke >= deadline);
    assert_ne!(woke_on, "tblk-0", "it waited for the blocked Processer");
    assert!(
        woke < block_start + BLOCK / 2,
        "it woke only {:?} into a {BLOCK:?} block",
        woke.duration_since(block_start)
    );
    assert!(late <= Duration::from_millis(250), "lateness {late:?}");
    assert!(st.blocked_detections >= 1, "the block was seen");
}

/// The only core Processer is blocked in the kernel, so a sleeper runs on
/// an extra Processer, which has no timer queue of its own: its timer goes
/// to the blocked Processer's queue, and it must still wake on time.
#[test]
fn a_sleeper_on_an_extra_processer_wakes_on_time_while_the_core_one_is_blocked() {
    let _turn = one_at_a_time();
    let s = Scheduler::builder()
        .min_threads(1)
        .max_threads(2)
        .name("textra")
        .build()
        .unwrap();
    const BLOCK: Duration = Duration::from_secs(1);
    const NAP: Duration = Duration::from_millis(20);
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let blocker = s.spawn(move || {
        started_tx.send(Instant::now()).unwrap();
        common::block_thread_in_kernel(BLOCK);
    });
    let block_start = started_rx.recv().unwrap();
    // Queued behind the blocked Processer: rescued onto an extra one.
    let sleeper = s.spawn(|| {
        let on = common::thread_name();
        let deadline = Instant::now() + NAP;
        gofer::sleep_until(deadline);
        (on, Instant::now(), deadline)
    });
    let (slept_on, woke, deadline) = sleeper.join().unwrap();
    blocker.join().unwrap();
    s.shutdown();
    let late = woke.duration_since(deadline);
    eprintln!("sleeper on {slept_on} while the core Processer is blocked: {late:?} late");
    assert_ne!(slept_on, "textra-0", "it ran on the blocked Processer");
    assert!(woke >= deadline);
    assert!(
        woke < block_start + BLOCK / 2,
        "it woke only {:?} into a {BLOCK:?} block",
        woke.duration_since(block_start)
    );
    assert!(late <= Duration::from_millis(250), "lateness {late:?}");
}
