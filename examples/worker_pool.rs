//! A worker pool on gofer that stops cleanly: workers take jobs from a
//! channel, a producer feeds them, and a `CancelToken` tells the whole
//! group to stop; a `JoinSet` collects every worker's tally in the order
//! they finish.
//!
//! ```sh
//! cargo run --release --example worker_pool -- --workers 8 --jobs 20000
//! cargo run --release --example worker_pool -- --workers 8 --stop-after-ms 200
//! ```
//!
//! Each job sleeps `--job-us` microseconds (standing in for a call that
//! waits: a socket, a lock, a timer), so the workers spend their time
//! parked and a few threads run them all. The pool stops either when the
//! producer has sent `--jobs` jobs and closed the channel (the workers
//! drain it and return), or, with `--stop-after-ms`, when the token is
//! cancelled: every worker's `select!` takes its `cancelled(token)` arm at
//! once, whatever it was waiting for, and the producer's too. A job a
//! worker had started finishes first (the token is a request, not an
//! unwind; `JoinSet::cancel_all` would unwind them where they wait).
//!
//! The last line is `done: N jobs by W workers in T, Q left queued, U
//! unsent`; the workers' tallies plus the jobs still queued when they
//! stopped are checked against what the producer sent (exit status 1 if a
//! job was lost), and the scheduler must end with no task left. A bad
//! argument exits with code 2.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use gofer::chan;
use gofer::task::{CancelToken, JoinSet};

#[derive(Parser, Debug)]
#[command(
    name = "worker_pool",
    about = "A worker pool on gofer that stops cleanly on a CancelToken."
)]
struct Args {
    /// Worker tasks.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    workers: u32,

    /// Jobs the producer sends before it closes the channel.
    #[arg(long, default_value_t = 20_000)]
    jobs: u64,

    /// Microseconds each job waits (parked, not spinning).
    #[arg(long, value_name = "US", default_value_t = 100, value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    job_us: u64,

    /// Cancel the pool after this many milliseconds, finished or not.
    #[arg(long, value_name = "MS")]
    stop_after_ms: Option<u64>,

    /// Processer threads; 0 means one per CPU.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=gofer::MAX_THREADS_LIMIT as i64))]
    threads: u16,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let sched = match gofer::Scheduler::builder()
        .name("pool")
        .min_threads(args.threads.into())
        .build()
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot start the scheduler: {e}");
            return ExitCode::FAILURE;
        }
    };
    let start = Instant::now();
    let summary = sched.block_on(move || run(&args));
    sched.shutdown();
    let left = sched.stats().alive;
    let Summary {
        done,
        queued,
        sent,
        workers,
        unsent,
    } = summary;
    println!(
        "done: {done} jobs by {workers} workers in {:.1?}, {queued} left queued, {unsent} unsent",
        start.elapsed()
    );
    if done + queued != sent || left != 0 {
        eprintln!("error: {sent} jobs sent, {done} done, {queued} queued, {left} tasks left");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// What a run of the pool did.
struct Summary {
    /// Jobs the workers finished.
    done: u64,
    /// Jobs sent but still in the channel when the workers stopped.
    queued: u64,
    /// Jobs the producer sent.
    sent: u64,
    /// Workers that reported their tally.
    workers: u32,
    /// Jobs the producer never sent (it was told to stop).
    unsent: u64,
}

/// Runs the pool until the producer is done or the token is cancelled.
fn run(args: &Args) -> Summary {
    let stop = CancelToken::new();
    // Cancels the token if this function unwinds, so no task outlives it
    // waiting for a stop that would never come.
    let _guard = stop.clone().drop_guard();
    let (jobs_tx, jobs_rx) = chan::bounded::<u64>(64);
    let job_time = Duration::from_micros(args.job_us);

    let mut workers = JoinSet::new();
    for _ in 0..args.workers {
        let jobs = jobs_rx.clone();
        let stop = stop.clone();
        workers.spawn(move || {
            let mut tally = 0u64;
            loop {
                gofer::select! {
                    recv(jobs) -> job => match job {
                        Ok(_job) => {
                            gofer::sleep(job_time); // the job's wait
                            tally += 1;
                        }
                        Err(_) => return tally, // channel closed and drained
                    },
                    cancelled(stop) => return tally,
                }
            }
        });
    }

    let total = args.jobs;
    let producer_stop = stop.clone();
    let producer = gofer::spawn(move || {
        let mut sent = 0u64;
        while sent < total {
            gofer::select! {
                send(jobs_tx, sent) -> res => {
                    if res.is_err() {
                        break; // every worker is gone
                    }
                    sent += 1;
                }
                cancelled(producer_stop) => break,
            }
        }
        sent // dropping `jobs_tx` closes the channel
    });

    if let Some(ms) = args.stop_after_ms {
        let stop = stop.clone();
        gofer::spawn(move || {
            // Ends early, without waiting out its sleep, if the pool
            // finishes first.
            gofer::select! {
                recv(chan::after(Duration::from_millis(ms))) -> _ => stop.cancel(),
                cancelled(stop) => {},
            }
        });
    }

    let sent = producer.join().expect("the producer does not panic");
    let mut done = 0;
    let mut reported = 0;
    while let Some(tally) = workers.join_next() {
        done += tally.expect("a worker does not panic");
        reported += 1;
    }
    // Every worker has returned; this also ends the stop timer, if any.
    stop.cancel();
    Summary {
        done,
        queued: jobs_rx.try_iter().count() as u64,
        sent,
        workers: reported,
        unsent: total - sent,
    }
}
