//! A first look at gofer: spawn tasks, yield, sleep, join, and read stats.
//!
//! Run it with `cargo run --release --example hello`.

use std::time::{Duration, Instant};

use gofer::go;

/// It takes no options: `--help` says so, and anything else is an error.
#[derive(clap::Parser)]
#[command(
    name = "hello",
    about = "A first look at gofer: spawn tasks, yield, sleep, join, and read stats."
)]
struct Args {}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Args {} = clap::Parser::parse();
    let sched = gofer::Scheduler::builder().name("hello").build()?;
    println!(
        "scheduler '{}' with {} Processer threads",
        sched.name(),
        sched.stats().threads
    );

    // 10,000 tasks, each yielding a few times from inside a nested call.
    fn deep(n: u32) -> u64 {
        if n == 0 {
            gofer::yield_now();
            return 1;
        }
        deep(n - 1) + 1
    }
    let start = Instant::now();
    let handles: Vec<_> = (0..10_000u32)
        .map(|i| go!(scheduler = &sched, move || deep(i % 16)))
        .collect();
    let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    println!(
        "10,000 tasks with nested yields: sum {total} in {:?}",
        start.elapsed()
    );

    // Sleeping parks the task, not the thread: 1,000 sleepers finish in
    // about one sleep's time.
    let start = Instant::now();
    let sleepers: Vec<_> = (0..1_000)
        .map(|_| {
            go!(scheduler = &sched, || gofer::sleep(Duration::from_millis(
                50
            )))
        })
        .collect();
    for h in sleepers {
        h.join().unwrap();
    }
    println!(
        "1,000 tasks slept 50 ms each, together in {:?}",
        start.elapsed()
    );

    // A panic stays inside its task.
    let h = go!(name = "doomed", scheduler = &sched, || -> u32 {
        panic!("boom")
    });
    let err = h.join().unwrap_err();
    println!("a panicking task reports: {err}");

    let v = sched.block_on(|| gofer::current_name().is_none() && gofer::is_coroutine());
    println!("block_on ran a task on the main thread: {v}");

    let s = sched.stats();
    println!(
        "stats: spawned {}, completed {}, switches {:?}",
        s.spawned,
        s.completed,
        s.processers.iter().map(|p| p.switches).collect::<Vec<_>>()
    );
    sched.shutdown();
    Ok(())
}
