//! Mutex costs: gofer::sync beside parking_lot and std in the same run.
//!
//! - `mutex_uncontended`: one lock + unlock on the calling thread, nobody
//!   else near the lock (the fast path: one CAS each way).
//! - `mutex_contended`: 4 workers each do 1,000 lock / increment / unlock
//!   rounds on one shared counter per iteration (throughput in increments).
//!   gofer on 4 tasks of a 2-Processer scheduler and on 4 threads;
//!   parking_lot and std on 4 threads. Workers start once per measured batch
//!   and run all its iterations, so start-up cost is spread thin.
//!
//! Run: `cargo bench -p gofer-bench --bench sync`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const WORKERS: usize = 4;
const ROUNDS: u64 = 1_000;

fn uncontended(c: &mut Criterion) {
    let mut g = c.benchmark_group("mutex_uncontended");
    g.throughput(Throughput::Elements(1));
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));

    let m = gofer::sync::Mutex::new(0u64);
    g.bench_function("gofer", |b| {
        b.iter(|| {
            *black_box(&m).lock() += 1;
        })
    });
    let m = parking_lot::Mutex::new(0u64);
    g.bench_function("parking_lot", |b| {
        b.iter(|| {
            *black_box(&m).lock() += 1;
        })
    });
    let m = std::sync::Mutex::new(0u64);
    g.bench_function("std", |b| {
        b.iter(|| {
            *black_box(&m).lock().unwrap() += 1;
        })
    });
    g.finish();
}

/// Runs `WORKERS` copies of `work(iters * ROUNDS)` through `start` and
/// returns the wall time until all are done.
fn timed<H>(iters: u64, start: impl Fn(u64) -> H, join: impl Fn(H)) -> Duration {
    let t = Instant::now();
    let hs: Vec<H> = (0..WORKERS).map(|_| start(iters * ROUNDS)).collect();
    hs.into_iter().for_each(join);
    t.elapsed()
}

fn contended(c: &mut Criterion) {
    let mut g = c.benchmark_group("mutex_contended");
    g.throughput(Throughput::Elements(WORKERS as u64 * ROUNDS));
    g.sample_size(20);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));

    let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();
    let m = Arc::new(gofer::sync::Mutex::new(0u64));
    g.bench_function(BenchmarkId::new("gofer", "4_tasks"), |b| {
        b.iter_custom(|iters| {
            timed(
                iters,
                |n| {
                    let m = m.clone();
                    sched.spawn(move || {
                        for _ in 0..n {
                            *m.lock() += 1;
                        }
                    })
                },
                |h| h.join().unwrap(),
            )
        })
    });
    g.bench_function(BenchmarkId::new("gofer", "4_threads"), |b| {
        b.iter_custom(|iters| {
            timed(
                iters,
                |n| {
                    let m = m.clone();
                    std::thread::spawn(move || {
                        for _ in 0..n {
                            *m.lock() += 1;
                        }
                    })
                },
                |h| h.join().unwrap(),
            )
        })
    });
    sched.shutdown();

    let m = Arc::new(parking_lot::Mutex::new(0u64));
    g.bench_function(BenchmarkId::new("parking_lot", "4_threads"), |b| {
        b.iter_custom(|iters| {
            timed(
                iters,
                |n| {
                    let m = m.clone();
                    std::thread::spawn(move || {
                        for _ in 0..n {
                            *m.lock() += 1;
                        }
                    })
                },
                |h| h.join().unwrap(),
            )
        })
    });
    let m = Arc::new(std::sync::Mutex::new(0u64));
    g.bench_function(BenchmarkId::new("std", "4_threads"), |b| {
        b.iter_custom(|iters| {
            timed(
                iters,
                |n| {
                    let m = m.clone();
                    std::thread::spawn(move || {
                        for _ in 0..n {
                            *m.lock().unwrap() += 1;
                        }
                    })
                },
                |h| h.join().unwrap(),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, uncontended, contended);
criterion_main!(benches);
