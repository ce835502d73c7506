//! Core scheduling costs, gofer beside its peers in the same run.
//!
//! - `spawn_join_100k`: spawn 100,000 no-op tasks, then join them all
//!   (per-task cost = reported time / 100,000), from an outside thread and
//!   from inside a task: gofer (2 Processers), tokio (2 workers), may (1
//!   worker: may's configuration is process-wide, and the yield group below
//!   needs one). may from inside a task is left out: it maps each
//!   coroutine's guarded stack at spawn, and 100,000 that have not run yet
//!   exceed `vm.max_map_count`, which aborts the run.
//! - `yield_pingpong`: two tasks on one worker yield to each other; one
//!   iteration is one yield (a switch out and a switch into the other task).
//!
//! Run: `cargo bench -p gofer-bench --bench core`.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const N: usize = 100_000;

fn spawn_join(c: &mut Criterion) {
    let mut g = c.benchmark_group("spawn_join_100k");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(4));

    let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();
    g.bench_function(BenchmarkId::new("gofer", "outside"), |b| {
        b.iter(|| {
            let hs: Vec<_> = (0..N).map(|_| sched.spawn(|| ())).collect();
            for h in hs {
                h.join().unwrap();
            }
        })
    });
    g.bench_function(BenchmarkId::new("gofer", "inside_task"), |b| {
        b.iter(|| {
            sched.block_on(|| {
                let hs: Vec<_> = (0..N).map(|_| gofer::spawn(|| ())).collect();
                for h in hs {
                    h.join().unwrap();
                }
            })
        })
    });

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    g.bench_function(BenchmarkId::new("tokio", "outside"), |b| {
        b.iter(|| {
            let hs: Vec<_> = (0..N).map(|_| rt.spawn(async {})).collect();
            for h in hs {
                rt.block_on(h).unwrap();
            }
        })
    });
    g.bench_function(BenchmarkId::new("tokio", "inside_task"), |b| {
        b.iter(|| {
            rt.block_on(async {
                let hs: Vec<_> = (0..N).map(|_| tokio::spawn(async {})).collect();
                for h in hs {
                    h.await.unwrap();
                }
            })
        })
    });

    may::config().set_workers(1);
    g.bench_function(BenchmarkId::new("may", "outside"), |b| {
        b.iter(|| {
            let hs: Vec<_> = (0..N).map(|_| may::go!(|| ())).collect();
            for h in hs {
                h.join().unwrap();
            }
        })
    });
    g.finish();
    sched.shutdown();
}

fn yield_pingpong(c: &mut Criterion) {
    let mut g = c.benchmark_group("yield_pingpong");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(3));

    let one = gofer::Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .build()
        .unwrap();
    // Both tasks are spawned from this (outside) thread onto the single
    // Processer, so they really alternate on one thread.
    g.bench_function("gofer", |b| {
        b.iter_custom(|iters| {
            let half = iters.div_ceil(2);
            let start = Instant::now();
            let a = one.spawn(move || (0..half).for_each(|_| gofer::yield_now()));
            let b = one.spawn(move || (0..half).for_each(|_| gofer::yield_now()));
            a.join().unwrap();
            b.join().unwrap();
            start.elapsed()
        })
    });

    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    g.bench_function("tokio", |b| {
        b.iter_custom(|iters| {
            let half = iters.div_ceil(2);
            rt.block_on(async move {
                let start = Instant::now();
                let a = tokio::spawn(async move {
                    for _ in 0..half {
                        tokio::task::yield_now().await;
                    }
                });
                let b = tokio::spawn(async move {
                    for _ in 0..half {
                        tokio::task::yield_now().await;
                    }
                });
                a.await.unwrap();
                b.await.unwrap();
                start.elapsed()
            })
        })
    });

    g.bench_function("may", |b| {
        b.iter_custom(|iters| {
            let half = iters.div_ceil(2);
            let start = Instant::now();
            let a = may::go!(move || (0..half).for_each(|_| may::coroutine::yield_now()));
            let b = may::go!(move || (0..half).for_each(|_| may::coroutine::yield_now()));
            a.join().unwrap();
            b.join().unwrap();
            start.elapsed()
        })
    });
    g.finish();
    one.shutdown();
}

criterion_group!(benches, spawn_join, yield_pingpong);
criterion_main!(benches);
