//! A worker pool: 64 started worker tasks on a scheduler of 2 to 64
//! Processers take 64 jobs from a gofer channel; each job sleeps 50 ms on
//! its thread (`std::thread::sleep`), either through `gofer::unblock` or
//! inline (the call holds the Processer's thread). A heartbeat task ticks
//! every 5 ms meanwhile. Each run prints the wall time of the 64 jobs and
//! the heartbeat's worst gap; the end prints min/median/max of both.
//!
//! `cargo run -p gofer-bench --release --example worker_pool [runs]`
//!
//! Build it without the `hooks` feature: with the hooks, an inline
//! `std::thread::sleep` in a task becomes a task sleep.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WORKERS: usize = 64;
const CALL: Duration = Duration::from_millis(50);
const TICK: Duration = Duration::from_millis(5);

/// One run: the wall time of the jobs and the heartbeat's worst gap.
fn run(through_unblock: bool) -> (Duration, Duration) {
    let sched = gofer::Scheduler::builder()
        .min_threads(2)
        .max_threads(64)
        .build()
        .expect("a scheduler");
    let stop = Arc::new(AtomicBool::new(false));
    let (beat_tx, beat_rx) = gofer::chan::bounded::<()>(1);
    // Every beat's time; the heartbeat beats on until the jobs have ended.
    let heartbeat = {
        let stop = stop.clone();
        sched.spawn(move || {
            beat_tx.send(()).unwrap();
            let mut beats = vec![Instant::now()];
            while !stop.load(Ordering::SeqCst) {
                gofer::sleep(TICK);
                beats.push(Instant::now());
            }
            beats
        })
    };
    beat_rx.recv().unwrap();
    let (job_tx, job_rx) = gofer::chan::unbounded::<usize>();
    let (done_tx, done_rx) = gofer::chan::unbounded::<usize>();
    let started = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (job_rx, done_tx, started) = (job_rx.clone(), done_tx.clone(), started.clone());
            sched.spawn(move || {
                started.fetch_add(1, Ordering::SeqCst);
                while let Ok(job) = job_rx.recv() {
                    if through_unblock {
                        gofer::unblock(|| std::thread::sleep(CALL));
                    } else {
                        std::thread::sleep(CALL);
                    }
                    done_tx.send(job).unwrap();
                }
            })
        })
        .collect();
    drop(done_tx);
    while started.load(Ordering::SeqCst) < WORKERS {
        std::thread::sleep(Duration::from_millis(1));
    }
    let t = Instant::now();
    for job in 0..WORKERS {
        job_tx.send(job).unwrap();
    }
    for _ in 0..WORKERS {
        done_rx.recv().unwrap();
    }
    let end = Instant::now();
    stop.store(true, Ordering::SeqCst);
    drop(job_tx);
    for w in workers {
        w.join().unwrap();
    }
    // The longest gap between beats that overlaps the jobs' run.
    let worst = heartbeat
        .join()
        .unwrap()
        .windows(2)
        .filter(|w| w[1] > t && w[0] < end)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    sched.shutdown();
    (end - t, worst)
}

/// min / median / max of `v`, in milliseconds.
fn summary(v: &mut [Duration]) -> String {
    v.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "{:.1} / {:.1} / {:.1} ms",
        ms(v[0]),
        ms(v[v.len() / 2]),
        ms(v[v.len() - 1])
    )
}

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20)
        .max(1);
    println!(
        "{WORKERS} workers, {WORKERS} jobs of a {CALL:?} sleep, heartbeat every {TICK:?}, 2..64 Processers (hooks: {})",
        gofer::hooks::enabled()
    );
    for (name, through_unblock) in [("unblock", true), ("inline", false)] {
        let (mut walls, mut gaps) = (Vec::new(), Vec::new());
        for i in 0..runs {
            let (wall, gap) = run(through_unblock);
            println!("  {name:8} run {i:2}: wall {wall:>10.1?}  heartbeat worst gap {gap:>10.1?}");
            walls.push(wall);
            gaps.push(gap);
        }
        println!(
            "{name:8} wall (min/median/max) {}; heartbeat worst gap {}",
            summary(&mut walls),
            summary(&mut gaps)
        );
    }
}
