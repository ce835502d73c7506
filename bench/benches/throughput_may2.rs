//! Yield throughput (see `bench/benches/throughput.rs`) for may with 2 workers.
//! may's worker count is process-wide and fixed at its first use, hence a
//! binary per worker count.
//!
//! Run: `cargo bench -p gofer-bench --bench throughput_may2`.

use criterion::{criterion_group, criterion_main, Criterion};

#[path = "common/throughput.rs"]
mod common;

fn may(c: &mut Criterion) {
    common::may(c, 2);
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = may
}
criterion_main!(benches);
