//! What the yield-throughput benches share: the shape of the workload, the
//! criterion settings, and may's variant (run from one binary per worker
//! count, since may's worker count is fixed per process).

#![allow(dead_code)] // each bench binary uses part of this

use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};

/// Tasks yielding at once.
pub const TASKS: usize = 1000;

/// The criterion group every variant reports into.
pub const GROUP: &str = "throughput";

pub fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
}

/// One iteration is one yield by each task. Every sample runs the same
/// number of iterations (flat sampling), so the spawns and joins of a batch
/// weigh the same in each, and the median is not skewed by short samples.
pub fn setup(g: &mut BenchmarkGroup<'_, WallTime>) {
    g.throughput(Throughput::Elements(TASKS as u64));
    g.sampling_mode(SamplingMode::Flat);
}

/// may with `workers` workers; must be the first use of may in the process.
pub fn may(c: &mut Criterion, workers: usize) {
    may::config().set_workers(workers);
    let mut g = c.benchmark_group(GROUP);
    setup(&mut g);
    g.bench_function(BenchmarkId::new("may", workers), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            let hs: Vec<_> = (0..TASKS)
                .map(|_| may::go!(move || (0..iters).for_each(|_| may::coroutine::yield_now())))
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            start.elapsed()
        })
    });
    g.finish();
}
