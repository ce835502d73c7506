//! The driver behind the instruction counts in BENCHMARKS.md ("Hot paths",
//! "Bound tasks"): one scenario on a one-Processer scheduler, `N` times.
//! Run it under callgrind at two sizes and divide the difference of the
//! totals by the difference of the operation counts, which cancels start-up
//! and shutdown:
//!
//! ```sh
//! cargo build -p gofer-bench --release --example callgrind_driver
//! for n in 20000 40000; do
//!   valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/callgrind_driver yield $n 2>&1 | grep Collected
//! done
//! ```
//!
//! Scenarios (the operation counted in brackets):
//! - `yield N`: two tasks each yield `N` times (a yield: divide by `2 N`);
//! - `spawn N`: a task spawns `N` tasks, then joins them all (a spawn + join);
//! - `bursts N`: the same in bursts of 1,000 (a spawn + join), so that
//!   later bursts reuse what earlier ones freed;
//! - `chan N`: two tasks ping-pong `N` values over two unbounded channels
//!   (a round trip).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, n) = match (
        args.first(),
        args.get(1).and_then(|n| n.parse::<usize>().ok()),
    ) {
        (Some(m), Some(n)) if ["yield", "spawn", "bursts", "chan"].contains(&m.as_str()) => {
            (m.clone(), n)
        }
        _ => {
            eprintln!("usage: callgrind_driver yield|spawn|bursts|chan N");
            return ExitCode::from(2);
        }
    };
    let sched = gofer::Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .build()
        .expect("a one-Processer scheduler");
    match mode.as_str() {
        "yield" => {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    sched.spawn(move || {
                        for _ in 0..n {
                            gofer::yield_now();
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
        }
        "spawn" => sched.block_on(move || {
            let hs: Vec<_> = (0..n).map(|i| gofer::spawn(move || i)).collect();
            for h in hs {
                h.join().unwrap();
            }
        }),
        "bursts" => sched.block_on(move || {
            for _ in 0..n / 1000 {
                let hs: Vec<_> = (0..1000).map(|i| gofer::spawn(move || i)).collect();
                for h in hs {
                    h.join().unwrap();
                }
            }
        }),
        _ => {
            let (tx1, rx1) = gofer::chan::unbounded::<usize>();
            let (tx2, rx2) = gofer::chan::unbounded::<usize>();
            let a = sched.spawn(move || {
                for i in 0..n {
                    tx1.send(i).unwrap();
                    rx2.recv().unwrap();
                }
            });
            let b = sched.spawn(move || {
                for _ in 0..n {
                    let v = rx1.recv().unwrap();
                    tx2.send(v).unwrap();
                }
            });
            a.join().unwrap();
            b.join().unwrap();
        }
    }
    sched.shutdown();
    ExitCode::SUCCESS
}
