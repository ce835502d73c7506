//! The driver behind the instruction counts of BENCHMARKS.md ("Sleep
//! lateness"): `N` tasks on a one-Processer scheduler each sleep until one
//! common deadline, so that their timers fire as one batch, then finish and
//! are joined. Run it under callgrind at two sizes and divide the difference
//! of the totals by the difference of `N`, which cancels start-up and
//! shutdown; `spawn` does the same without the sleep, so the difference of
//! the two is what a sleep costs (the timer's insert, the park, the firing,
//! the wake-up and the timer's removal):
//!
//! ```sh
//! cargo build -p gofer-bench --release --example callgrind_sleep
//! for mode in sleep spawn; do for n in 10000 20000; do
//!   valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/callgrind_sleep $mode $n 2>&1 | grep Collected
//! done; done
//! ```
//!
//! The deadline is `WAIT_MS` (default 3000) after the start: long enough,
//! under callgrind, for every task to have parked before it. The driver
//! prints how many tasks did wait (a task that starts after the deadline
//! does not park); all of them should.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, n) = match (
        args.first(),
        args.get(1).and_then(|n| n.parse::<usize>().ok()),
    ) {
        (Some(m), Some(n)) if ["sleep", "spawn"].contains(&m.as_str()) => (m.clone(), n),
        _ => {
            eprintln!("usage: callgrind_sleep sleep|spawn N");
            return ExitCode::from(2);
        }
    };
    let wait = std::env::var("WAIT_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(3), Duration::from_millis);
    let sched = gofer::Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .build()
        .expect("a one-Processer scheduler");
    let sleep = mode == "sleep";
    let waited = Arc::new(AtomicUsize::new(0));
    let w = waited.clone();
    sched.block_on(move || {
        let deadline = Instant::now() + wait;
        let hs: Vec<_> = (0..n)
            .map(|_| {
                let w = w.clone();
                gofer::spawn(move || {
                    if sleep && Instant::now() < deadline {
                        gofer::sleep_until(deadline);
                        w.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    });
    sched.shutdown();
    if sleep {
        println!(
            "{} of {n} tasks waited for the deadline",
            waited.load(Ordering::Relaxed)
        );
    }
    ExitCode::SUCCESS
}
