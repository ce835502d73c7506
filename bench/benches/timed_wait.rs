//! What a timed wait costs once it is over: two tasks ping-pong over
//! rendezvous channels with `recv_timeout(1 h)`, so every wait ends early,
//! long before its deadline. Prints the time per round trip with and
//! without the timeout, and the resident memory the process grew by per
//! completed timed wait (it should be zero: a finished wait must leave
//! nothing behind in the timer structure).
//!
//! Run: `cargo bench -p gofer-bench --bench timed_wait`.

use std::time::{Duration, Instant};

const ROUNDS: u64 = 300_000;

/// Resident set size of this process, in bytes.
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("resident pages");
    pages * 4096
}

/// Runs `ROUNDS` round trips between two tasks; `timeout` is used for every
/// receive when given. Returns the time per round trip.
fn pingpong(sched: &gofer::Scheduler, timeout: Option<Duration>) -> Duration {
    let (ping_tx, ping_rx) = gofer::chan::bounded::<u64>(0);
    let (pong_tx, pong_rx) = gofer::chan::bounded::<u64>(0);
    let recv = move |rx: &gofer::chan::Receiver<u64>| match timeout {
        Some(t) => rx.recv_timeout(t).ok(),
        None => rx.recv().ok(),
    };
    let echo = sched.spawn(move || {
        while let Some(v) = recv(&ping_rx) {
            if pong_tx.send(v).is_err() {
                return;
            }
        }
    });
    let elapsed = sched
        .spawn(move || {
            let start = Instant::now();
            for i in 0..ROUNDS {
                ping_tx.send(i).unwrap();
                recv(&pong_rx).expect("echoed");
            }
            start.elapsed()
        })
        .join()
        .unwrap();
    echo.join().unwrap();
    elapsed / ROUNDS as u32
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test -p gofer-bench --benches` asks for a list; nothing to list
    }
    let sched = gofer::Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .build()
        .unwrap();
    // Warm up pools and allocator caches.
    pingpong(&sched, Some(Duration::from_secs(3600)));
    let plain = pingpong(&sched, None);
    let before = rss();
    let timed = pingpong(&sched, Some(Duration::from_secs(3600)));
    let grown = rss().saturating_sub(before);
    let waits = 2 * ROUNDS;
    println!("{ROUNDS} round trips between two tasks on one Processer:");
    println!("  recv()                  {plain:>10.1?} per round trip");
    println!("  recv_timeout(1 h)       {timed:>10.1?} per round trip");
    println!(
        "  RSS grown by {} KiB over {waits} completed timed waits: {:.1} bytes per wait",
        grown / 1024,
        grown as f64 / waits as f64
    );
    sched.shutdown_timeout(Duration::from_secs(5)).ok();
}
