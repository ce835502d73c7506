//! Rescue latency: how long a task queued behind a blocked Processer waits
//! before it starts elsewhere, for gofer and, in the same run, for may.
//!
//! Scenario (two workers, so nothing can grow): worker 1 runs a task that
//! yields in a loop (busy, never idle, so it never steals, and never
//! blocked). A task pinned to worker 0 spawns a child, which is queued
//! behind it on worker 0, notes the time, and then blocks for 20 ms: in the
//! kernel (`std::thread::sleep`) or on the CPU (a spin loop). The latency is
//! the time until the child starts running. Repeated `ROUNDS` times; p50,
//! p99 and max are printed.
//!
//! It also measures the CPU time the whole process uses over two seconds
//! while a scheduler that has run tasks sits idle (Dispatcher and idle
//! Processers included).
//!
//! Run: `cargo bench -p gofer-bench --bench blocking`. Besides the printed table it writes
//! `target/gofer-bench/blocking.json` for `scripts/plot.py`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

#[path = "common/summary.rs"]
mod summary;

const ROUNDS: usize = 100;
const BLOCK: Duration = Duration::from_millis(20);

#[derive(Clone, Copy, PartialEq)]
enum How {
    Kernel,
    Cpu,
}

fn block(how: How) {
    match how {
        How::Kernel => std::thread::sleep(BLOCK),
        How::Cpu => {
            let end = Instant::now() + BLOCK;
            while Instant::now() < end {
                std::hint::spin_loop();
            }
        }
    }
}

/// Prints one line and returns it as a JSON member `"key": {...}`.
fn report(key: &str, name: &str, mut lat: Vec<Duration>) -> String {
    lat.sort();
    let pick = |q: f64| lat[((lat.len() as f64 - 1.0) * q).round() as usize];
    let (p50, p99, max) = (pick(0.5), pick(0.99), lat[lat.len() - 1]);
    println!(
        "{name:<28} p50 {p50:>10.3?}  p99 {p99:>10.3?}  max {max:>10.3?}  (n={})",
        lat.len()
    );
    format!(
        "    {}: {{\"p50_ns\": {}, \"p99_ns\": {}, \"max_ns\": {}, \"n\": {}}}",
        summary::string(key),
        p50.as_nanos(),
        p99.as_nanos(),
        max.as_nanos(),
        lat.len()
    )
}

fn gofer_rescue(how: How) -> Vec<Duration> {
    let sched = gofer::Scheduler::builder()
        .min_threads(2)
        .max_threads(2)
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let stop = stop.clone();
        gofer::Builder::new()
            .pin(1)
            .scheduler(&sched)
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    gofer::yield_now();
                }
            })
            .unwrap()
    };
    let mut lat = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let (tx, rx) = mpsc::channel();
        let h = gofer::Builder::new()
            .pin(0)
            .scheduler(&sched)
            .spawn(move || {
                let child = gofer::spawn(Instant::now);
                let t0 = Instant::now();
                block(how);
                tx.send(t0).unwrap();
                child
            })
            .unwrap();
        let t0 = rx.recv().unwrap();
        let t1 = h.join().unwrap().join().unwrap();
        lat.push(t1.saturating_duration_since(t0));
    }
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
    let s = sched.stats();
    println!(
        "  gofer stats: blocked_detections {}, tasks_rescued {}, threads {}",
        s.blocked_detections, s.tasks_rescued, s.threads
    );
    sched.shutdown();
    lat
}

fn may_rescue(how: How) -> Vec<Duration> {
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let stop = stop.clone();
        may::go!(move || {
            while !stop.load(Ordering::Relaxed) {
                may::coroutine::yield_now();
            }
        })
    };
    let mut lat = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let (tx, rx) = mpsc::channel();
        let h = may::go!(move || {
            let child = may::go!(Instant::now);
            let t0 = Instant::now();
            block(how);
            tx.send(t0).unwrap();
            child
        });
        let t0 = rx.recv().unwrap();
        let t1 = h.join().unwrap().join().unwrap();
        lat.push(t1.saturating_duration_since(t0));
    }
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
    lat
}

/// CPU time of the whole process (every thread).
fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Returns the share of one core used, in percent.
fn idle_cpu() -> f64 {
    let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();
    let hs: Vec<_> = (0..1000).map(|_| sched.spawn(gofer::yield_now)).collect();
    for h in hs {
        h.join().unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let window = Duration::from_secs(2);
    let (c0, t0) = (process_cpu(), Instant::now());
    std::thread::sleep(window);
    let (c1, t1) = (process_cpu(), Instant::now());
    let pct = (c1 - c0).as_secs_f64() / (t1 - t0).as_secs_f64() * 100.0;
    println!(
        "idle scheduler (2 Processers + Dispatcher): {:.3}% of one core over {:?} (process CPU {:?})",
        pct,
        t1 - t0,
        c1 - c0
    );
    sched.shutdown();
    pct
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test -p gofer-bench --benches` asks for a list; nothing to list
    }
    // First, before any peer runtime starts threads of its own.
    let idle = idle_cpu();
    may::config().set_workers(2);
    println!("rescue latency, {ROUNDS} rounds, 20 ms blocks, 2 workers:");
    let rows = [
        report(
            "gofer_kernel",
            "gofer kernel-blocked",
            gofer_rescue(How::Kernel),
        ),
        report(
            "gofer_cpu",
            "gofer cpu-bound (10ms tmo)",
            gofer_rescue(How::Cpu),
        ),
        report("may_kernel", "may kernel-blocked", may_rescue(How::Kernel)),
        report("may_cpu", "may cpu-bound", may_rescue(How::Cpu)),
    ];
    summary::write(
        "blocking",
        &format!(
            "{{\n  \"idle_cpu_percent\": {idle:.4},\n  \"block_ms\": {},\n  \"rescue\": {{\n{}\n  }}\n}}\n",
            BLOCK.as_millis(),
            rows.join(",\n")
        ),
    );
}
