//! Yield throughput (see `bench/benches/throughput.rs`) for may with 1 worker.
//! may's worker count is process-wide and fixed at its first use, hence a
//! binary per worker count.
//!
//! Run: `cargo bench -p gofer-bench --bench throughput_may1`.

use criterion::{criterion_group, criterion_main, Criterion};

#[path = "common/throughput.rs"]
mod common;

fn may(c: &mut Criterion) {
    common::may(c, 1);
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = may
}
criterion_main!(benches);
