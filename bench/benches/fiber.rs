//! Fiber switching, gofer beside its peers in the same run.
//!
//! - `fiber_round_trip`: one iteration is one resume plus one suspend (two
//!   context switches), passing a `u64` each way:
//!   - `gofer`: `Fiber::resume` / `Yielder::suspend`;
//!   - `context_raw`: the `context` crate's bare `resume` pair that gofer is
//!     built on (no values, no bookkeeping): the floor;
//!   - `corosensei`: `Coroutine::resume` / `Yielder::suspend`.
//! - `generator_next`: one `Generator::next` (the same round trip behind an
//!   iterator).
//! - `fiber_create_drop`: make a fiber from the pooled stack, run it to
//!   completion, drop it.
//!
//! Run: `cargo bench -p gofer-bench --bench fiber`.

use std::hint::black_box;
use std::time::Duration;

use context::stack::ProtectedFixedSizeStack;
use context::{Context, Transfer};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gofer::fiber::{Fiber, FiberResult, Generator, Yielder};

fn round_trip(c: &mut Criterion) {
    let mut g = c.benchmark_group("fiber_round_trip");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(3));

    let mut fiber = Fiber::new(|y: &Yielder<u64, u64>, mut i: u64| loop {
        i = y.suspend(i.wrapping_add(1));
    });
    let mut x = 0u64;
    g.bench_function("gofer", |b| {
        b.iter(|| {
            x = match fiber.resume(black_box(x)) {
                FiberResult::Yield(v) => v,
                FiberResult::Return(()) => unreachable!(),
            };
        })
    });
    drop(fiber);

    extern "C" fn echo(mut t: Transfer) -> ! {
        loop {
            // SAFETY: `t.context` is the bench loop, suspended in `resume`.
            t = unsafe { t.context.resume(t.data.wrapping_add(1)) };
        }
    }
    let stack = ProtectedFixedSizeStack::new(256 << 10).expect("a stack");
    // SAFETY: the stack outlives the context (both live until the end of
    // this function, and the context is never resumed after it).
    let mut ctx = Some(unsafe { Context::new(&stack, echo) });
    let mut x = 0usize;
    g.bench_function("context_raw", |b| {
        b.iter(|| {
            // SAFETY: `ctx` is the suspended `echo`, whose stack is alive.
            let t = unsafe { ctx.take().unwrap().resume(black_box(x)) };
            x = t.data;
            ctx = Some(t.context);
        })
    });

    let mut coro =
        corosensei::Coroutine::new(|y: &corosensei::Yielder<u64, u64>, mut i: u64| loop {
            i = y.suspend(i.wrapping_add(1));
        });
    let mut x = 0u64;
    g.bench_function("corosensei", |b| {
        b.iter(|| {
            x = match coro.resume(black_box(x)) {
                corosensei::CoroutineResult::Yield(v) => v,
                corosensei::CoroutineResult::Return(()) => unreachable!(),
            };
        })
    });
    g.finish();
}

fn generator_next(c: &mut Criterion) {
    let mut g = c.benchmark_group("generator_next");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(3));
    let mut gen = Generator::new(|y| {
        for i in 0u64.. {
            y.yield_(i)
        }
    });
    g.bench_function("gofer", |b| b.iter(|| black_box(gen.next())));
    g.finish();
}

fn create_drop(c: &mut Criterion) {
    let mut g = c.benchmark_group("fiber_create_drop");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(3));
    g.bench_function("gofer_run_to_end", |b| {
        b.iter(|| {
            let mut f = Fiber::new(|_: &Yielder<u64, ()>, i: u64| i + 1);
            black_box(f.resume(black_box(1)))
        })
    });
    g.bench_function("gofer_drop_suspended", |b| {
        b.iter(|| {
            let mut f = Fiber::new(|y: &Yielder<(), u64>, ()| y.suspend(1));
            let _ = black_box(f.resume(()));
            drop(f)
        })
    });
    g.bench_function("corosensei_run_to_end", |b| {
        b.iter(|| {
            let mut f =
                corosensei::Coroutine::new(|_: &corosensei::Yielder<u64, ()>, i: u64| i + 1);
            black_box(f.resume(black_box(1)))
        })
    });
    g.finish();
}

criterion_group!(benches, round_trip, generator_next, create_drop);
criterion_main!(benches);
