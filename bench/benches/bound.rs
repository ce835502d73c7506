//! What binding started tasks to their first Processer costs: the default
//! against `migrate_started_tasks(true)`, in the same run.
//!
//! 1. **Rescue of a started task.** A task parks on Processer 0; a task
//!    pinned there then blocks the thread in the kernel for 20 ms, and the
//!    parked task is woken from a plain thread as the block begins. The
//!    latency is the time until it runs again: by default it waits for its
//!    thread; migratable, the Dispatcher's routing sends it elsewhere.
//! 2. **Skewed load.** Four long-lived tasks all start on Processer 0
//!    (Processer 1 is held by a spinner meanwhile), then each computes
//!    about 100 µs and yields, 200 times. The figure is the time until all
//!    four finish: by default they stay on Processer 0; migratable, the idle
//!    Processer 1 steals some.
//!
//! Run: `cargo bench -p gofer-bench --bench bound`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const ROUNDS: usize = 30;
const BLOCK: Duration = Duration::from_millis(20);

fn sched(migrate: bool) -> gofer::Scheduler {
    let b = gofer::Scheduler::builder().min_threads(2).max_threads(2);
    let b = if migrate {
        // SAFETY: the tasks of this benchmark touch no thread-local at all.
        unsafe { b.migrate_started_tasks(true) }
    } else {
        b
    };
    b.build().expect("valid config")
}

/// Scenario 1: latencies of `ROUNDS` wake-ups behind a blocked Processer.
fn rescue(migrate: bool) -> Vec<Duration> {
    let s = sched(migrate);
    let mut lat = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let (tx, rx) = mpsc::channel();
        let (ran_tx, ran_rx) = mpsc::channel();
        // The sleeper parks on Processer 0 (pinned to start there, then
        // left to the scheduler's rule: a user pin would keep it anyway, so
        // it is spawned from a task pinned to 0 instead).
        let starter = gofer::Builder::new()
            .pin(0)
            .scheduler(&s)
            .spawn(move || {
                gofer::spawn(move || {
                    tx.send(gofer::current()).unwrap();
                    gofer::park();
                    ran_tx.send(Instant::now()).unwrap();
                });
            })
            .unwrap();
        starter.join().unwrap();
        let sleeper = rx.recv().unwrap();
        let (block_tx, block_rx) = mpsc::channel();
        let blocker = gofer::Builder::new()
            .pin(0)
            .scheduler(&s)
            .spawn(move || {
                block_tx.send(()).unwrap();
                std::thread::sleep(BLOCK);
            })
            .unwrap();
        block_rx.recv().unwrap();
        let woken = Instant::now();
        sleeper.unpark();
        let ran = ran_rx.recv().unwrap();
        lat.push(ran.saturating_duration_since(woken));
        blocker.join().unwrap();
    }
    s.shutdown();
    lat
}

/// Scenario 2: the time four long-lived tasks take when they all start on
/// one Processer.
fn skew(migrate: bool) -> Duration {
    let s = sched(migrate);
    let hold = Arc::new(AtomicBool::new(true));
    let h2 = hold.clone();
    let (up_tx, up_rx) = mpsc::channel();
    let spinner = gofer::Builder::new()
        .pin(1)
        .scheduler(&s)
        .spawn(move || {
            up_tx.send(()).unwrap();
            while h2.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
        })
        .unwrap();
    up_rx.recv().unwrap();
    let started = Arc::new(AtomicUsize::new(0));
    let st = started.clone();
    let start = Instant::now();
    let workers = gofer::Builder::new()
        .pin(0)
        .scheduler(&s)
        .spawn(move || {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let st = st.clone();
                    gofer::spawn(move || {
                        st.fetch_add(1, Ordering::AcqRel);
                        for _ in 0..200 {
                            let end = Instant::now() + Duration::from_micros(100);
                            while Instant::now() < end {
                                std::hint::spin_loop();
                            }
                            gofer::yield_now();
                        }
                    })
                })
                .collect();
            hs
        })
        .unwrap()
        .join()
        .unwrap();
    while started.load(Ordering::Acquire) < 4 {
        std::thread::yield_now();
    }
    hold.store(false, Ordering::Release);
    spinner.join().unwrap();
    for h in workers {
        h.join().unwrap();
    }
    let took = start.elapsed();
    s.shutdown();
    took
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // nothing for `cargo test -p gofer-bench --benches` to list
    }
    println!("bound: 2 Processers; default (started tasks bound) vs migrate_started_tasks(true)");
    for migrate in [false, true] {
        let mut lat = rescue(migrate);
        lat.sort();
        let pick = |q: f64| lat[((lat.len() as f64 - 1.0) * q).round() as usize];
        println!(
            "rescue of a started task behind a 20 ms kernel block, {:<8} p50 {:>9.3?}  p99 {:>9.3?}",
            if migrate { "migrate" } else { "default" },
            pick(0.5),
            pick(0.99)
        );
    }
    for migrate in [false, true] {
        let mut runs: Vec<Duration> = (0..5).map(|_| skew(migrate)).collect();
        runs.sort();
        println!(
            "skewed load: 4 tasks x 200 x 100 us started on one Processer, {:<8} median {:>9.3?} (runs {:?})",
            if migrate { "migrate" } else { "default" },
            runs[2],
            runs
        );
    }
}
