//! The Dispatcher's own CPU cost while tasks run: two Processers kept busy
//! by four tasks yielding in a loop for 3 s, and the CPU time of the
//! Dispatcher thread (from `/proc/self/task/<tid>/schedstat`), for several
//! dispatch intervals.
//!
//! Run: `cargo bench -p gofer-bench --bench dispatcher_cpu`.

use std::time::{Duration, Instant};
/// CPU time of the threads named `name`, in seconds: the first field of
/// `/proc/self/task/<tid>/schedstat` (nanoseconds on a CPU; the clock-tick
/// counts of `stat` are too coarse for a thread that runs in short bursts).
fn thread_cpu(name: &str) -> f64 {
    let mut total = 0.0;
    for e in std::fs::read_dir("/proc/self/task").unwrap() {
        let p = e.unwrap().path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let st = std::fs::read_to_string(p.join("schedstat")).unwrap();
            let ns: f64 = st.split_whitespace().next().unwrap().parse().unwrap();
            total += ns / 1e9;
        }
    }
    total
}

fn measure(interval: u64) {
    let s = gofer::Scheduler::builder()
        .min_threads(2)
        .dispatch_interval(Duration::from_micros(interval))
        .build()
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hs: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            s.spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    gofer::yield_now();
                }
            })
        })
        .collect();
    let (t, d0) = (Instant::now(), thread_cpu("gofer-dispatche"));
    std::thread::sleep(Duration::from_secs(3));
    let d = thread_cpu("gofer-dispatche") - d0;
    println!(
        "dispatch_interval {interval}us: dispatcher CPU {:.4}s over {:.1}s = {:.2}% of a core",
        d,
        t.elapsed().as_secs_f64(),
        d / t.elapsed().as_secs_f64() * 100.0
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    s.shutdown();
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test -p gofer-bench --benches` asks for a list; nothing to list
    }
    for interval in [100, 250, 1000] {
        measure(interval);
    }
}
