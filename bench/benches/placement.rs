//! Where long-lived tasks of one spawner run: a spawner that parks between
//! spawns (a server's accept loop) starts `TASKS` tasks, and each of them
//! alternates `BURN` of computation with a 1 ms sleep, `ROUNDS` times. With
//! 2 Processers the work needs about half the wall clock of one thread,
//! if the tasks are spread over both.
//!
//! Started tasks are bound to the Processer they first ran on, so this
//! measures where they are bound: `bound` (the default), beside
//! `migratable` tasks, which work stealing can move at any switch. Prints
//! the wall clock and each Processer's share of the switches.
//!
//! Run: `cargo bench -p gofer-bench --bench placement`.

use std::time::{Duration, Instant};

const TASKS: usize = 200;
const ROUNDS: usize = 100;
const BURN: Duration = Duration::from_micros(40);

fn burn(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn run(migratable: bool) -> (Duration, Vec<u64>) {
    let sched = gofer::Scheduler::builder()
        .min_threads(2)
        .max_threads(2)
        .build()
        .expect("valid scheduler config");
    let start = Instant::now();
    sched
        .spawn(move || {
            let (tx, rx) = gofer::chan::unbounded::<()>();
            let workers: Vec<_> = (0..TASKS)
                .map(|_| {
                    let tx = tx.clone();
                    let b = gofer::Builder::new();
                    // SAFETY: the workers hold no thread-local across a
                    // switch (they burn CPU and sleep).
                    let b = if migratable {
                        unsafe { b.migratable() }
                    } else {
                        b
                    };
                    let w = b
                        .spawn(move || {
                            tx.send(()).expect("the spawner listens");
                            for _ in 0..ROUNDS {
                                burn(BURN);
                                gofer::sleep(Duration::from_millis(1));
                            }
                        })
                        .expect("spawned");
                    rx.recv().expect("the worker started");
                    w
                })
                .collect();
            for w in workers {
                w.join().expect("a worker returned");
            }
        })
        .join()
        .expect("the spawner returned");
    let took = start.elapsed();
    let switches = sched
        .stats()
        .processers
        .iter()
        .map(|p| p.switches)
        .collect();
    sched.shutdown();
    (took, switches)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // nothing for `cargo test -p gofer-bench --benches` to list
    }
    println!(
        "{TASKS} tasks started one at a time by one spawner, each {ROUNDS} x ({BURN:?} of CPU, then a 1 ms sleep); 2 Processers"
    );
    println!(
        "(the CPU work alone is {:?})",
        BURN * (TASKS * ROUNDS) as u32
    );
    for round in 1..=3 {
        for (name, m) in [("bound", false), ("migratable", true)] {
            let (took, switches) = run(m);
            let total: u64 = switches.iter().sum();
            let shares: Vec<String> = switches
                .iter()
                .map(|s| format!("{:.0} %", 100.0 * *s as f64 / total.max(1) as f64))
                .collect();
            println!(
                "round {round}  {name:<10}  {:>8.1} ms   switches per Processer: {}",
                took.as_secs_f64() * 1e3,
                shares.join(" / ")
            );
        }
    }
}
