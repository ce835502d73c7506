//! Many small file reads under a bound on the calls in flight: 20,000
//! files of 1–4 KiB in a temp dir, each read whole and hashed (FNV-1a) by
//! a task of its own that first takes a permit of a semaphore of N
//! permits. Once with `gofer::fs::read` in gofer tasks on a 2-Processer
//! scheduler, once with `tokio::fs::read` in tasks of tokio's
//! multi-thread runtime with 2 workers; the two alternate, round after
//! round. Each round prints wall time, the process's CPU (user + system)
//! and its context switches (voluntary/involuntary, every thread); the end
//! prints the medians and gofer/tokio.
//!
//! `cargo run -p gofer-bench --release --example fs_contention -- [--permits 8,64] [--rounds 3] [--files 20000] [--busy 2] [--tokio-blocking 512] [--only gofer|tokio] [--sched-stats]`
//!
//! `--busy K` starts K child processes `yes > /dev/null` for the length of
//! the run (killed at its end), so the pools' threads share the CPUs with
//! busy loops; being other processes, they do not count in the CPU
//! printed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Permits (calls in flight), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "8,64")]
    permits: Vec<usize>,
    /// Rounds per runtime and permit count.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Files to create and hash.
    #[arg(long, default_value_t = 20_000)]
    files: usize,
    /// Busy loops (`yes > /dev/null` children) to run meanwhile.
    #[arg(long, default_value_t = 0)]
    busy: usize,
    /// tokio's `max_blocking_threads` (its default: 512).
    #[arg(long, default_value_t = 512)]
    tokio_blocking: usize,
    /// Run only one side (`gofer` or `tokio`), e.g. under `perf stat`.
    #[arg(long)]
    only: Option<String>,
    /// Print, per round, each kind of thread's CPU time, time spent
    /// runnable but waiting for a CPU, and time slices
    /// (`/proc/self/task/*/schedstat`).
    #[arg(long)]
    sched_stats: bool,
}

/// FNV-1a of `bytes`.
fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The process's CPU time so far (user + system, every thread) and its
/// context switches (voluntary, involuntary).
fn cpu() -> (Duration, u64, u64) {
    // SAFETY: `getrusage` writes a `rusage` into the zeroed one we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (
        tv(ru.ru_utime) + tv(ru.ru_stime),
        ru.ru_nvcsw as u64,
        ru.ru_nivcsw as u64,
    )
}

/// Per thread kind (its name without a trailing number): CPU time, time
/// runnable but waiting for a CPU (ns) and time slices, summed over the
/// process's live threads, and how many live threads.
fn sched_stats() -> std::collections::BTreeMap<String, [u64; 4]> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(e.path().join("comm")),
            std::fs::read_to_string(e.path().join("schedstat")),
        ) else {
            continue;
        };
        let kind = comm
            .trim()
            .trim_end_matches(|c: char| c.is_ascii_digit() || c == '-');
        let v: Vec<u64> = stat
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if v.len() == 3 {
            let slot: &mut [u64; 4] = out.entry(kind.to_string()).or_default();
            for i in 0..3 {
                slot[i] += v[i];
            }
            slot[3] += 1;
        }
    }
    out
}

/// Prints the change in `sched_stats` since `before`, per thread kind.
fn print_sched_stats(before: Option<&std::collections::BTreeMap<String, [u64; 4]>>) {
    let Some(before) = before else {
        return;
    };
    for (kind, now) in sched_stats() {
        let b = before.get(&kind).copied().unwrap_or_default();
        let d: Vec<u64> = (0..3).map(|i| now[i].saturating_sub(b[i])).collect();
        if d[2] == 0 {
            continue;
        }
        println!(
            "    {kind:<16} x{:<3} run {:>8.1} ms  wait for cpu {:>8.1} ms  slices {:>7}  wait/slice {:>6.1} us",
            now[3],
            d[0] as f64 / 1e6,
            d[1] as f64 / 1e6,
            d[2],
            d[1] as f64 / 1e3 / d[2] as f64
        );
    }
}

/// Creates `n` files of 1–4 KiB under `dir`; returns their paths.
fn make_files(dir: &Path, n: usize) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).expect("the temp dir");
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|i| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = 1024 + (seed % (3 * 1024 + 1)) as usize;
            let path = dir.join(format!("f{i:05}"));
            let data: Vec<u8> = (0..len).map(|j| (j as u64 ^ seed) as u8).collect();
            std::fs::write(&path, data).expect("a file");
            path
        })
        .collect()
}

/// Hashes every file with gofer: a task per file, `permits` in flight.
fn run_gofer(sched: &gofer::Scheduler, files: &Arc<Vec<PathBuf>>, permits: usize) -> u64 {
    let files = files.clone();
    sched
        .spawn(move || {
            let sem = Arc::new(gofer::sync::Semaphore::new(permits));
            let tasks: Vec<_> = (0..files.len())
                .map(|i| {
                    let (sem, files) = (sem.clone(), files.clone());
                    gofer::spawn(move || {
                        let _permit = sem.acquire();
                        hash(&gofer::fs::read(&files[i]).expect("read"))
                    })
                })
                .collect();
            tasks
                .into_iter()
                .fold(0u64, |acc, t| acc.wrapping_add(t.join().unwrap()))
        })
        .join()
        .unwrap()
}

/// Hashes every file with tokio: a task per file, `permits` in flight.
fn run_tokio(rt: &tokio::runtime::Runtime, files: &Arc<Vec<PathBuf>>, permits: usize) -> u64 {
    let files = files.clone();
    rt.block_on(async move {
        let sem = Arc::new(tokio::sync::Semaphore::new(permits));
        let tasks: Vec<_> = (0..files.len())
            .map(|i| {
                let (sem, files) = (sem.clone(), files.clone());
                tokio::spawn(async move {
                    let _permit = sem.acquire().await.unwrap();
                    hash(&tokio::fs::read(&files[i]).await.expect("read"))
                })
            })
            .collect();
        let mut acc = 0u64;
        for t in tasks {
            acc = acc.wrapping_add(t.await.unwrap());
        }
        acc
    })
}

/// One run's wall time, process CPU, and context switches (voluntary,
/// involuntary).
#[derive(Clone, Copy)]
struct Run {
    wall: Duration,
    cpu: Duration,
    vcs: u64,
    ivcs: u64,
}

/// Runs `f` and returns its result and what the run took.
fn measure<T>(f: impl FnOnce() -> T) -> (T, Run) {
    let ((c0, v0, i0), t0) = (cpu(), Instant::now());
    let r = f();
    let wall = t0.elapsed();
    let (c1, v1, i1) = cpu();
    let run = Run {
        wall,
        cpu: c1 - c0,
        vcs: v1 - v0,
        ivcs: i1 - i0,
    };
    (r, run)
}

fn median<T: Ord + Copy>(mut v: Vec<T>) -> T {
    v.sort_unstable();
    v[v.len() / 2]
}

/// The medians of each measure over a side's rounds, each on its own.
type Medians = Run;

impl Run {
    fn of(runs: &[Run]) -> Medians {
        Run {
            wall: median(runs.iter().map(|r| r.wall).collect()),
            cpu: median(runs.iter().map(|r| r.cpu).collect()),
            vcs: median(runs.iter().map(|r| r.vcs).collect()),
            ivcs: median(runs.iter().map(|r| r.ivcs).collect()),
        }
    }
}

fn print_run(permits: usize, round: usize, side: &str, r: &Run) {
    println!(
        "permits {permits:>3} round {round} {side}: wall {:>8.3} s  cpu {:>8.3} s  cs {:>7}/{:<7}",
        r.wall.as_secs_f64(),
        r.cpu.as_secs_f64(),
        r.vcs,
        r.ivcs
    );
}

/// The busy loops, killed when dropped.
struct Busy(Vec<Child>);

impl Drop for Busy {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn main() {
    let args = Args::parse();
    let skip_gofer = args.only.as_deref() == Some("tokio");
    let skip_tokio = args.only.as_deref() == Some("gofer");
    let dir = std::env::temp_dir().join(format!("gofer-fs-contention-{}", std::process::id()));
    let files = Arc::new(make_files(&dir, args.files));
    let sched = gofer::Scheduler::builder()
        .min_threads(2)
        .max_threads(2)
        .build()
        .expect("a scheduler");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(args.tokio_blocking)
        .build()
        .expect("a tokio runtime");
    let busy = Busy(
        (0..args.busy)
            .map(|_| {
                Command::new("yes")
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("yes")
            })
            .collect(),
    );
    println!(
        "{} files, {} round(s), {} busy loop(s)",
        args.files, args.rounds, args.busy
    );
    // Warm both pools and the page cache once, unmeasured.
    let want = files.iter().fold(0u64, |acc, f| {
        acc.wrapping_add(hash(&std::fs::read(f).expect("read")))
    });
    if !skip_gofer {
        assert_eq!(run_gofer(&sched, &files, 8), want);
    }
    if !skip_tokio {
        assert_eq!(run_tokio(&rt, &files, 8), want);
    }
    let zero = Run {
        wall: Duration::ZERO,
        cpu: Duration::ZERO,
        vcs: 0,
        ivcs: 0,
    };
    let mut summary = Vec::new();
    for &permits in &args.permits {
        let (mut g, mut t) = (vec![], vec![]);
        for round in 0..args.rounds {
            let before = args.sched_stats.then(sched_stats);
            let (h, r) = if skip_gofer {
                (want, zero)
            } else {
                measure(|| run_gofer(&sched, &files, permits))
            };
            assert_eq!(h, want);
            print_run(permits, round, "gofer", &r);
            print_sched_stats(before.as_ref());
            let before = args.sched_stats.then(sched_stats);
            g.push(r);
            let (h, r) = if skip_tokio {
                (want, zero)
            } else {
                measure(|| run_tokio(&rt, &files, permits))
            };
            assert_eq!(h, want);
            print_run(permits, round, "tokio", &r);
            print_sched_stats(before.as_ref());
            t.push(r);
        }
        summary.push((permits, Medians::of(&g), Medians::of(&t)));
    }
    drop(busy);
    println!("medians (cs: context switches per file, voluntary/involuntary):");
    for (permits, g, t) in summary {
        println!(
            "permits {permits:>3}: gofer wall {:.3} s cpu {:.3} s cs {:.2}/{:.2} | tokio wall {:.3} s cpu {:.3} s cs {:.2}/{:.2} | gofer/tokio wall {:.2}x cpu {:.2}x",
            g.wall.as_secs_f64(),
            g.cpu.as_secs_f64(),
            g.vcs as f64 / args.files as f64,
            g.ivcs as f64 / args.files as f64,
            t.wall.as_secs_f64(),
            t.cpu.as_secs_f64(),
            t.vcs as f64 / args.files as f64,
            t.ivcs as f64 / args.files as f64,
            g.wall.as_secs_f64() / t.wall.as_secs_f64(),
            g.cpu.as_secs_f64() / t.cpu.as_secs_f64(),
        );
    }
    drop(rt);
    sched.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
