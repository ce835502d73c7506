//! A contended lock between two tasks on one Processer: `std::sync::Mutex`
//! under the `hooks` feature (its futex waits park the task) next to
//! `gofer::sync::Mutex`.
//!
//! Run: `cargo bench -p gofer-bench --features hooks --bench futex_hooks`
//! (`-- --iters N --rounds R`).
//!
//! Each of two tasks loops: lock, count, yield with the lock held, unlock.
//! The yield hands the thread to the other task, whose lock is then
//! contended and parks it; the unlock wakes it. The figure is the wall
//! time per lock taken (both tasks' locks counted), the median of the
//! rounds.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// The lock under test: `lock` runs `f` with the lock held.
trait Lock: Send + Sync + 'static {
    fn with(&self, f: impl FnOnce(&mut u64));
}

impl Lock for std::sync::Mutex<u64> {
    fn with(&self, f: impl FnOnce(&mut u64)) {
        f(&mut self.lock().unwrap());
    }
}

impl Lock for gofer::sync::Mutex<u64> {
    fn with(&self, f: impl FnOnce(&mut u64)) {
        f(&mut self.lock());
    }
}

/// One round: two tasks take `lock` `iters` times each; the time per lock.
fn round<L: Lock>(s: &gofer::Scheduler, lock: Arc<L>, iters: u64) -> Duration {
    let start = Instant::now();
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let lock = lock.clone();
            s.spawn(move || {
                for _ in 0..iters {
                    lock.with(|n| {
                        *n += 1;
                        gofer::yield_now();
                    });
                }
            })
        })
        .collect();
    for t in tasks {
        t.join().unwrap();
    }
    let mut total = 0;
    lock.with(|n| total = *n);
    assert_eq!(total, 2 * iters);
    start.elapsed() / (2 * iters) as u32
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.windows(2)
        .find(|w| w[0] == name)
        .map_or(default, |w| w[1].parse().expect("a number"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let iters = arg(&args, "--iters", 100_000);
    let rounds = arg(&args, "--rounds", 5);
    assert!(gofer::hooks::enabled(), "build with --features hooks");
    let s = gofer::Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .build()
        .expect("a scheduler");
    let (mut std_t, mut gofer_t) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        std_t.push(round(&s, Arc::new(std::sync::Mutex::new(0u64)), iters));
        gofer_t.push(round(&s, Arc::new(gofer::sync::Mutex::new(0u64)), iters));
    }
    let (a, b) = (median(std_t), median(gofer_t));
    println!("contended hand-off, 2 tasks on 1 Processer, {iters} locks each, median of {rounds}:");
    println!(
        "  std::sync::Mutex (hooks)  {:>8.1} ns/lock",
        a.as_nanos() as f64
    );
    println!(
        "  gofer::sync::Mutex        {:>8.1} ns/lock",
        b.as_nanos() as f64
    );
    println!(
        "  ratio                     {:>8.2}",
        a.as_secs_f64() / b.as_secs_f64()
    );
    s.shutdown();
}
