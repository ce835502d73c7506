//! Many small file reads under a bound on the calls in flight: 20,000
//! files of 1–4 KiB in a temp dir, each read whole and hashed (FNV-1a) by
//! a task of its own that first takes a permit of a semaphore of N
//! permits. Once with `gofer::fs::read` in gofer tasks on a 2-Processer
//! scheduler, once with `tokio::fs::read` in tasks of tokio's
//! multi-thread runtime with 2 workers; the two alternate, round after
//! round. Each round prints wall time and the process's CPU (user +
//! system); the end prints the medians and gofer/tokio.
//!
//! `cargo run -p gofer-bench --release --example fs_contention -- [--permits 8,64] [--rounds 3] [--files 20000] [--busy 2] [--tokio-blocking 512]`
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
}

/// FNV-1a of `bytes`.
fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The process's CPU time so far (user + system, every thread).
fn cpu() -> Duration {
    // SAFETY: `getrusage` writes a `rusage` into the zeroed one we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
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

/// Runs `f` and returns its result, wall time and process CPU.
fn measure<T>(f: impl FnOnce() -> T) -> (T, Duration, Duration) {
    let (c0, t0) = (cpu(), Instant::now());
    let r = f();
    (r, t0.elapsed(), cpu() - c0)
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
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
    let mut summary = Vec::new();
    for &permits in &args.permits {
        let (mut gw, mut gc, mut tw, mut tc) = (vec![], vec![], vec![], vec![]);
        for round in 0..args.rounds {
            let (h, w, c) = if skip_gofer {
                (want, Duration::ZERO, Duration::ZERO)
            } else {
                measure(|| run_gofer(&sched, &files, permits))
            };
            assert_eq!(h, want);
            println!(
                "permits {permits:>3} round {round} gofer: wall {:>8.3} s  cpu {:>8.3} s",
                w.as_secs_f64(),
                c.as_secs_f64()
            );
            gw.push(w);
            gc.push(c);
            let (h, w, c) = if skip_tokio {
                (want, Duration::ZERO, Duration::ZERO)
            } else {
                measure(|| run_tokio(&rt, &files, permits))
            };
            assert_eq!(h, want);
            println!(
                "permits {permits:>3} round {round} tokio: wall {:>8.3} s  cpu {:>8.3} s",
                w.as_secs_f64(),
                c.as_secs_f64()
            );
            tw.push(w);
            tc.push(c);
        }
        summary.push((
            permits,
            median(&mut gw),
            median(&mut gc),
            median(&mut tw),
            median(&mut tc),
        ));
    }
    drop(busy);
    println!("medians:");
    for (permits, gw, gc, tw, tc) in summary {
        println!(
            "permits {permits:>3}: gofer wall {:.3} s cpu {:.3} s | tokio wall {:.3} s cpu {:.3} s | gofer/tokio wall {:.2}x cpu {:.2}x",
            gw.as_secs_f64(),
            gc.as_secs_f64(),
            tw.as_secs_f64(),
            tc.as_secs_f64(),
            gw.as_secs_f64() / tw.as_secs_f64(),
            gc.as_secs_f64() / tc.as_secs_f64(),
        );
    }
    drop(rt);
    sched.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
