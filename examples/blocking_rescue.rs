//! A timeline of the Dispatcher at work: a task blocks its Processer's
//! thread in the kernel, the Dispatcher notices, moves the tasks queued
//! behind it to a new thread, and the extra thread retires once idle.
//!
//! Run it with `cargo run --release --example blocking_rescue`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("?").to_string()
}

/// It takes no options: `--help` says so, and anything else is an error.
#[derive(clap::Parser)]
#[command(
    name = "blocking_rescue",
    about = "A timeline of the Dispatcher rescuing tasks queued behind a thread blocked in the kernel."
)]
struct Args {}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Args {} = clap::Parser::parse();
    let sched = gofer::Scheduler::builder()
        .name("demo")
        .min_threads(1)
        .max_threads(3)
        .idle_thread_timeout(Duration::from_millis(500))
        .build()?;
    let t0 = Instant::now();
    let at = move || format!("+{:>7.2} ms", t0.elapsed().as_secs_f64() * 1e3);
    println!("{} scheduler 'demo': min_threads 1, max_threads 3", at());

    // A monitor thread prints every change in the Dispatcher's counters.
    let done = Arc::new(AtomicBool::new(false));
    let monitor = {
        let (sched, done) = (sched.clone(), done.clone());
        std::thread::spawn(move || {
            let mut last = String::new();
            while !done.load(Ordering::SeqCst) {
                let s = sched.stats();
                let now = format!(
                    "threads {}, blocked {}, detections {}, rescued {}, started {}, retired {}",
                    s.threads,
                    s.blocked,
                    s.blocked_detections,
                    s.tasks_rescued,
                    s.threads_started,
                    s.threads_retired
                );
                if now != last {
                    println!("{}   [stats] {now}", at());
                    last = now;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
        })
    };

    let (tx, rx) = mpsc::channel::<String>();
    let blocker = {
        let tx = tx.clone();
        sched.spawn(move || {
            tx.send(format!(
                "blocker runs on {}, calls std::thread::sleep(400 ms)",
                thread_name()
            ))
            .unwrap();
            std::thread::sleep(Duration::from_millis(400));
            tx.send(format!("blocker wakes up on {}", thread_name()))
                .unwrap();
        })
    };
    println!("{} {}", at(), rx.recv()?);
    let queued: Vec<_> = (1..=4)
        .map(|i| {
            let tx = tx.clone();
            sched.spawn(move || {
                tx.send(format!("queued task {i} starts on {}", thread_name()))
                    .unwrap();
            })
        })
        .collect();
    println!(
        "{} spawned 4 tasks; the only core Processer is blocked",
        at()
    );
    drop(tx);
    for line in rx.iter() {
        println!("{} {line}", at());
    }
    blocker.join().unwrap();
    for q in queued {
        q.join().unwrap();
    }
    println!(
        "{} all tasks done; waiting for the extra thread to retire",
        at()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while sched.stats().threads > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(20));
    done.store(true, Ordering::SeqCst);
    monitor.join().unwrap();
    let s = sched.stats();
    println!(
        "{} final: threads {}, detections {}, tasks rescued {}, threads started {}, retired {}",
        at(),
        s.threads,
        s.blocked_detections,
        s.tasks_rescued,
        s.threads_started,
        s.threads_retired
    );
    sched.shutdown();
    Ok(())
}
