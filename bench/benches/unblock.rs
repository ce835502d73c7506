//! `gofer::unblock` and `gofer::fs` against tokio's `spawn_blocking` and
//! `tokio::fs`, in the same run.
//!
//! - `unblock_round_trip/gofer`: a task of a 2-Processer scheduler calls
//!   `gofer::unblock(|| x + 1)` in a loop: park, hand the call to a pool
//!   thread, run it, wake the task on its own Processer. One iteration is
//!   one call.
//! - `unblock_round_trip/tokio`: a task of a 2-worker tokio runtime awaits
//!   `tokio::task::spawn_blocking(move || x + 1)` in a loop (the peer).
//! - `fs_read_4k/gofer`, `fs_read_4k/tokio`: the same, with the whole read
//!   of a 4 KiB file in the page cache (`gofer::fs::read`,
//!   `tokio::fs::read`): open, read, close on the pool thread.
//! - `fs_read_4k/std_in_task`: `std::fs::read` of that file in a task: with
//!   `--features hooks`, the open goes to the pool and the reads are
//!   answered from the page cache in place; without, all of it is inline.
//!
//! Run: `cargo bench -p gofer-bench --bench unblock`.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn runtimes() -> (gofer::Scheduler, tokio::runtime::Runtime) {
    let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    (sched, rt)
}

fn round_trip(c: &mut Criterion) {
    let mut g = c.benchmark_group("unblock_round_trip");
    g.throughput(Throughput::Elements(1));
    let (sched, rt) = runtimes();

    g.bench_function("gofer", |b| {
        b.iter_custom(|iters| {
            sched
                .spawn(move || {
                    let start = Instant::now();
                    let mut x = 0u64;
                    for _ in 0..iters {
                        x = gofer::unblock(|| std::hint::black_box(x) + 1);
                    }
                    assert_eq!(x, iters);
                    start.elapsed()
                })
                .join()
                .unwrap()
        })
    });

    g.bench_function("tokio", |b| {
        b.iter_custom(|iters| {
            rt.block_on(rt.spawn(async move {
                let start = Instant::now();
                let mut x = 0u64;
                for _ in 0..iters {
                    x = tokio::task::spawn_blocking(move || std::hint::black_box(x) + 1)
                        .await
                        .unwrap();
                }
                assert_eq!(x, iters);
                start.elapsed()
            }))
            .unwrap()
        })
    });
    g.finish();
    sched.shutdown();
}

fn fs_read(c: &mut Criterion) {
    let mut g = c.benchmark_group("fs_read_4k");
    g.throughput(Throughput::Elements(1));
    let (sched, rt) = runtimes();
    let path = std::env::temp_dir().join(format!("gofer-bench-unblock-{}", std::process::id()));
    std::fs::write(&path, vec![7u8; 4096]).unwrap();
    std::fs::read(&path).unwrap(); // in the page cache from here on

    g.bench_function("gofer", |b| {
        b.iter_custom(|iters| {
            let path = path.clone();
            sched
                .spawn(move || {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let v = gofer::fs::read(&path).unwrap();
                        assert_eq!(v.len(), 4096);
                    }
                    start.elapsed()
                })
                .join()
                .unwrap()
        })
    });

    g.bench_function("std_in_task", |b| {
        b.iter_custom(|iters| {
            let path = path.clone();
            sched
                .spawn(move || {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let v = std::fs::read(&path).unwrap();
                        assert_eq!(v.len(), 4096);
                    }
                    start.elapsed()
                })
                .join()
                .unwrap()
        })
    });

    g.bench_function("tokio", |b| {
        b.iter_custom(|iters| {
            let path = path.clone();
            rt.block_on(rt.spawn(async move {
                let start = Instant::now();
                for _ in 0..iters {
                    let v = tokio::fs::read(&path).await.unwrap();
                    assert_eq!(v.len(), 4096);
                }
                start.elapsed()
            }))
            .unwrap()
        })
    });
    g.finish();
    sched.shutdown();
    let _ = std::fs::remove_file(&path);
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = round_trip, fs_read
}
criterion_main!(benches);
