//! `gofer::sync::Barrier`: one leader per generation, reuse, tasks and
//! threads.

use crate::sync_util;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use gofer::sync::Barrier;
use sync_util::{join_all, sched, within};

const GENERATIONS: usize = 50;

struct Record {
    /// Parties that arrived at each generation.
    arrived: Vec<AtomicUsize>,
    /// Leaders of each generation.
    leaders: Vec<AtomicUsize>,
}

impl Record {
    fn new() -> Arc<Record> {
        let counters = || (0..GENERATIONS).map(|_| AtomicUsize::new(0)).collect();
        Arc::new(Record {
            arrived: counters(),
            leaders: counters(),
        })
    }
}

/// One party: for each generation, arrive, wait, and check that everyone
/// arrived before anyone left.
fn party(n: usize, b: Arc<Barrier>, rec: Arc<Record>) -> impl FnOnce() + Send + 'static {
    move || {
        for g in 0..GENERATIONS {
            rec.arrived[g].fetch_add(1, Ordering::SeqCst);
            if g % 3 == 0 {
                gofer::yield_now();
            }
            let r = b.wait();
            assert_eq!(
                rec.arrived[g].load(Ordering::SeqCst),
                n,
                "left generation {g} before all arrived"
            );
            if r.is_leader() {
                rec.leaders[g].fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

fn check(rec: &Record, n: usize) {
    for g in 0..GENERATIONS {
        assert_eq!(rec.arrived[g].load(Ordering::SeqCst), n, "generation {g}");
        assert_eq!(
            rec.leaders[g].load(Ordering::SeqCst),
            1,
            "leaders of generation {g}"
        );
    }
}

#[test]
fn exactly_one_leader_per_generation_among_tasks() {
    const N: usize = 16;
    let s = sched(3);
    let b = Arc::new(Barrier::new(N));
    let rec = Record::new();
    let hs = (0..N)
        .map(|_| s.spawn(party(N, b.clone(), rec.clone())))
        .collect();
    join_all(hs);
    check(&rec, N);
    s.shutdown();
}

#[test]
fn tasks_and_threads_meet_at_one_barrier() {
    const TASKS: usize = 6;
    const THREADS: usize = 3;
    const N: usize = TASKS + THREADS;
    let s = sched(2);
    let b = Arc::new(Barrier::new(N));
    let rec = Record::new();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| s.spawn(party(N, b.clone(), rec.clone())))
        .collect();
    let threads: Vec<_> = (0..THREADS)
        .map(|_| std::thread::spawn(party(N, b.clone(), rec.clone())))
        .collect();
    join_all(tasks);
    within(move || threads.into_iter().for_each(|t| t.join().unwrap()));
    check(&rec, N);
    s.shutdown();
}

#[test]
fn barrier_of_one_or_zero_never_blocks() {
    for n in [0, 1] {
        let b = Barrier::new(n);
        for _ in 0..3 {
            assert!(b.wait().is_leader());
        }
    }
    assert_eq!(format!("{:?}", Barrier::new(2)), "Barrier { n: 2 }");
}

/// A party whose timed wait gives up no longer counts: the generation still
/// needs `n` parties, and a timed party that all the others meet in time is
/// released as by `wait`.
#[test]
fn a_party_that_times_out_withdraws_and_a_timely_one_is_released() {
    use std::time::Duration;
    within(|| {
        let s = sched(2);
        let b = Arc::new(Barrier::new(2));
        let b1 = b.clone();
        let alone = s.spawn(move || b1.wait_timeout(Duration::from_millis(20)));
        assert!(alone.join().unwrap().is_none(), "a lone party was released");
        // Had the withdrawn party still counted, this lone wait would lead.
        assert!(
            b.wait_timeout(Duration::from_millis(20)).is_none(),
            "the withdrawn party counted"
        );
        let b2 = b.clone();
        let timed = s.spawn(move || b2.wait_timeout(Duration::from_secs(30)));
        let other = b.wait();
        let timed = timed
            .join()
            .unwrap()
            .expect("the timed party was not released");
        assert!(
            other.is_leader() != timed.is_leader(),
            "exactly one leader per generation"
        );
        s.shutdown();
    });
}
