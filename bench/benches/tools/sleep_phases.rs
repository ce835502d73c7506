//! Where the lateness of `cargo bench -p gofer-bench --bench sleep` goes: the bench's
//! gofer scenario (10,000 tasks each sleep, 2 Processers), with what a
//! lateness figure alone does not show:
//!
//! - per round: the span of the deadlines (the start phase: a deadline is
//!   a task's first run plus the sleep), lateness p50/p99/max, and how many
//!   sleepers woke on another thread than the one they slept on;
//! - per Processer thread: its share of the sleepers and their lateness;
//! - over the counted rounds: the Processer threads' CPU time and the time
//!   they spent runnable but not running (waiting for a CPU the machine
//!   gave to someone else), from `/proc/self/task/<tid>/schedstat`;
//! - with a sleep of 100 ms or more (so that no task wakes before every
//!   task has started): the Processers' CPU time per task in the start
//!   phase and in the wake phase (a snapshot is taken half-way);
//! - per round: the spawning thread's time to spawn, its CPU time and
//!   voluntary waits (its joins), and the stacks mapped after the round
//!   (a growing count means fresh stacks were mapped in it);
//! - with `--dump DIR`: every sleeper of round N in `DIR/roundN.txt`
//!   (deadline and wake-up in microseconds from the round's start, the
//!   Processer it slept on and woke on), and the round's start on
//!   `CLOCK_MONOTONIC` in `DIR/t0_N.txt` (nanoseconds), to lay beside
//!   `perf sched record -k CLOCK_MONOTONIC` or `perf record -k
//!   CLOCK_MONOTONIC` (what a Processer did while its sleepers waited);
//! - with `--prewarm` (and a `--stack-cache` that keeps them): the stacks
//!   every round can need are mapped before the first, so that no round
//!   maps fresh ones (what fresh stacks cost a round).
//!
//! ```sh
//! cargo build -p gofer-bench --release --example sleep_phases
//! target/release/examples/sleep_phases [--sleep-ms 10] [--rounds 5] \
//!     [--stack-cache 8192] [--migratable] [--quiet] [--dump DIR] [--prewarm]
//! ```
//!
//! The first round is a warm-up, left out of the totals.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TASKS: usize = 10_000;
/// Stacks `--prewarm` maps before the rounds.
const PREWARM: usize = TASKS + 500;

/// One sleeper's record.
#[derive(Clone, Copy)]
struct Nap {
    deadline: Instant,
    woke: Instant,
    slept_on: usize,
    woke_on: usize,
}

/// The index of the Processer running the caller (from its thread's name,
/// `gofer-<index>`), read through a call the optimiser cannot fold into the
/// caller: a migratable task may resume on another thread after a switch.
#[inline(never)]
fn processer_index() -> usize {
    std::thread::current()
        .name()
        .and_then(|n| n.rsplit('-').next())
        .and_then(|i| i.parse().ok())
        .unwrap_or(usize::MAX)
}

/// CPU time and run-queue wait (nanoseconds) of this process's Processer
/// threads (`gofer-<index>`), summed.
fn processer_schedstat() -> (u64, u64) {
    let mut sum = (0, 0);
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return sum;
    };
    for e in dir.flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        let comm = comm.trim();
        let Some(ix) = comm.strip_prefix("gofer-") else {
            continue;
        };
        if ix.parse::<usize>().is_err() {
            continue; // the Dispatcher
        }
        let st = std::fs::read_to_string(e.path().join("schedstat")).unwrap_or_default();
        let f: Vec<u64> = st
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if let [cpu, wait, ..] = f[..] {
            sum.0 += cpu;
            sum.1 += wait;
        }
    }
    sum
}

/// CPU time (nanoseconds) and voluntary context switches of the calling
/// thread (the spawning and joining main thread).
fn own_cpu_and_waits() -> (u64, u64) {
    let st = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let cpu = st
        .split_whitespace()
        .next()
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    let waits = status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    (cpu, waits)
}

fn pick(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

struct Args {
    sleep: Duration,
    rounds: usize,
    stack_cache: usize,
    migratable: bool,
    quiet: bool,
    dump: Option<String>,
    prewarm: bool,
}

fn args() -> Args {
    let mut a = Args {
        sleep: Duration::from_millis(10),
        rounds: 5,
        stack_cache: gofer::DEFAULT_STACK_CACHE,
        migratable: false,
        quiet: false,
        dump: None,
        prewarm: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = || -> u64 {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{arg} takes a number"))
        };
        match arg.as_str() {
            "--sleep-ms" => a.sleep = Duration::from_millis(num()),
            "--rounds" => a.rounds = num() as usize,
            "--stack-cache" => a.stack_cache = num() as usize,
            "--migratable" => a.migratable = true,
            "--quiet" => a.quiet = true,
            "--prewarm" => a.prewarm = true,
            "--dump" => a.dump = Some(it.next().expect("--dump takes a directory")),
            _ => panic!("unknown argument {arg}"),
        }
    }
    a
}

fn main() {
    let a = args();
    let mut b = gofer::Scheduler::builder()
        .min_threads(2)
        .stack_cache(a.stack_cache);
    if a.migratable {
        // SAFETY: the tasks touch no thread-local across their sleep (the
        // thread's name is read through an `#[inline(never)]` call on each
        // side; the rest is a clock, atomics and a `std::sync::Mutex` taken
        // after the sleep).
        b = unsafe { b.migrate_started_tasks(true) };
    }
    let sched = b.build().unwrap();
    if a.prewarm {
        // As many stacks as the rounds can need, mapped before them (tasks
        // that park until every one has its stack).
        let (tx, rx) = gofer::chan::unbounded::<()>();
        let hs: Vec<_> = (0..PREWARM)
            .map(|_| {
                let rx = rx.clone();
                sched.spawn(move || {
                    let _ = rx.recv();
                })
            })
            .collect();
        while sched.stats().live_stacks < PREWARM {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(tx);
        for h in hs {
            h.join().unwrap();
        }
    }
    let sleep = a.sleep;
    let mut all = Vec::new();
    let (mut cpu, mut wait) = (0u64, 0u64);
    let (mut cpu_start, mut cpu_wake) = (0u64, 0u64);
    for round in 0..=a.rounds {
        let out = Arc::new(Mutex::new(Vec::with_capacity(TASKS)));
        let s0 = processer_schedstat();
        let m0 = own_cpu_and_waits();
        let t0 = Instant::now();
        let hs: Vec<_> = (0..TASKS)
            .map(|_| {
                let out = out.clone();
                sched.spawn(move || {
                    let slept_on = processer_index();
                    let deadline = Instant::now() + sleep;
                    gofer::sleep_until(deadline);
                    let woke = Instant::now();
                    let woke_on = processer_index();
                    out.lock().unwrap().push(Nap {
                        deadline,
                        woke,
                        slept_on,
                        woke_on,
                    });
                })
            })
            .collect();
        let spawned = t0.elapsed();
        let mid = (sleep >= Duration::from_millis(100)).then(|| {
            std::thread::sleep((t0 + sleep / 2).saturating_duration_since(Instant::now()));
            processer_schedstat()
        });
        for h in hs {
            h.join().unwrap();
        }
        let s1 = processer_schedstat();
        let m1 = own_cpu_and_waits();
        let mut naps = std::mem::take(&mut *out.lock().unwrap());
        let mut late: Vec<Duration> = naps.iter().map(|n| n.woke - n.deadline).collect();
        late.sort();
        if round > 0 {
            all.extend_from_slice(&late);
            cpu += s1.0 - s0.0;
            wait += s1.1 - s0.1;
            if let Some(m) = mid {
                cpu_start += m.0 - s0.0;
                cpu_wake += s1.0 - m.0;
            }
        }
        if a.quiet {
            continue;
        }
        naps.sort_by_key(|n| n.deadline);
        if let Some(dir) = &a.dump {
            let mut text = String::new();
            for n in &naps {
                text += &format!(
                    "{} {} {} {}\n",
                    (n.deadline - t0).as_micros(),
                    (n.woke - t0).as_micros(),
                    n.slept_on,
                    n.woke_on
                );
            }
            std::fs::write(format!("{dir}/round{round}.txt"), text).unwrap();
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `ts` is a valid, writable timespec.
            unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
            let mono_now = ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128;
            let t0_mono = mono_now - t0.elapsed().as_nanos();
            std::fs::write(format!("{dir}/t0_{round}.txt"), format!("{t0_mono}")).unwrap();
        }
        let (first, last) = (naps[0].deadline, naps[naps.len() - 1].deadline);
        let moved = naps.iter().filter(|n| n.slept_on != n.woke_on).count();
        println!(
            "round {round}: deadlines from +{:.2?} over {:.2?}; lateness p50 {:.2?} p99 {:.2?} \
             max {:.2?}; {moved} woke on another thread; processers: cpu {:.2?}, \
             waiting for a cpu {:.2?}",
            first - t0,
            last - first,
            pick(&late, 0.5),
            pick(&late, 0.99),
            late[late.len() - 1],
            Duration::from_nanos(s1.0 - s0.0),
            Duration::from_nanos(s1.1 - s0.1),
        );
        println!(
            "  spawner: spawned in {spawned:.2?}; cpu {:.2?} in the round, {} waits; {} stacks mapped",
            Duration::from_nanos(m1.0 - m0.0),
            m1.1 - m0.1,
            sched.stats().live_stacks
        );
        let mut threads: Vec<usize> = naps.iter().map(|n| n.woke_on).collect();
        threads.sort_unstable();
        threads.dedup();
        for t in threads {
            let mut l: Vec<Duration> = naps
                .iter()
                .filter(|n| n.woke_on == t)
                .map(|n| n.woke - n.deadline)
                .collect();
            l.sort();
            println!(
                "  gofer-{t}: {} woke here, lateness p50 {:.2?} p99 {:.2?}",
                l.len(),
                pick(&l, 0.5),
                pick(&l, 0.99)
            );
        }
    }
    sched.shutdown();
    all.sort();
    let per_round = |ns: u64| Duration::from_nanos(ns / a.rounds.max(1) as u64);
    println!(
        "{} rounds: lateness p50 {:.2?} p99 {:.2?} max {:.2?}; per round, processers: \
         cpu {:.2?}, waiting for a cpu {:.2?}",
        a.rounds,
        pick(&all, 0.5),
        pick(&all, 0.99),
        all[all.len() - 1],
        per_round(cpu),
        per_round(wait),
    );
    if cpu_start > 0 {
        let per_task = |ns: u64| ns / (a.rounds * TASKS) as u64;
        println!(
            "processer cpu per task: start phase {} ns, wake phase {} ns",
            per_task(cpu_start),
            per_task(cpu_wake)
        );
    }
}
