//! Yield throughput: 1,000 tasks that each yield in a loop, on one worker
//! and on two, gofer beside tokio in the same run.
//!
//! One iteration is one yield by each of the 1,000 tasks (criterion's
//! throughput is set to 1,000 elements, so time / 1,000 is the cost of one
//! yield). A measured batch of `iters` iterations spawns the 1,000 tasks
//! from outside, lets each yield `iters` times, and joins them; the spawns
//! and joins (well under 1 % of a batch) are included.
//!
//! - gofer: `Scheduler::builder().min_threads(n).max_threads(n)`.
//! - tokio: `current_thread` for one worker; `multi_thread` with
//!   `worker_threads(2)` for two (the tasks run on the two workers; the
//!   thread in `block_on` only awaits the join handles).
//!
//! may's worker count is process-wide and fixed at its first use, so may
//! runs in its own bench binaries, one per worker count
//! (`bench/benches/throughput_may1.rs`, `bench/benches/throughput_may2.rs`), into the
//! same criterion group.
//!
//! Run: `cargo bench -p gofer-bench --bench throughput` (then `--bench throughput_may1`
//! and `--bench throughput_may2`).

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

#[path = "common/throughput.rs"]
mod common;
use common::{config, TASKS};

fn gofer(c: &mut Criterion) {
    let mut g = c.benchmark_group(common::GROUP);
    common::setup(&mut g);
    for workers in [1usize, 2] {
        let sched = gofer::Scheduler::builder()
            .min_threads(workers)
            .max_threads(workers)
            .build()
            .unwrap();
        g.bench_function(BenchmarkId::new("gofer", workers), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                let hs: Vec<_> = (0..TASKS)
                    .map(|_| sched.spawn(move || (0..iters).for_each(|_| gofer::yield_now())))
                    .collect();
                for h in hs {
                    h.join().unwrap();
                }
                start.elapsed()
            })
        });
        sched.shutdown();
    }
    g.finish();
}

fn tokio_run(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    rt.block_on(async move {
        let start = Instant::now();
        let hs: Vec<_> = (0..TASKS)
            .map(|_| {
                tokio::spawn(async move {
                    for _ in 0..iters {
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        for h in hs {
            h.await.unwrap();
        }
        start.elapsed()
    })
}

fn tokio(c: &mut Criterion) {
    let mut g = c.benchmark_group(common::GROUP);
    common::setup(&mut g);
    let one = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    g.bench_function(BenchmarkId::new("tokio", 1), |b| {
        b.iter_custom(|iters| tokio_run(&one, iters))
    });
    drop(one);
    let two = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    g.bench_function(BenchmarkId::new("tokio", 2), |b| {
        b.iter_custom(|iters| tokio_run(&two, iters))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = gofer, tokio
}
criterion_main!(benches);
