//! Scaling with the number of Processers. For each count (default 2, 8,
//! 250, 1,000 and 2,000; or the counts given as arguments):
//!
//! - **build**: `Scheduler::builder().min_threads(n).max_threads(n).build()`;
//! - **1,000 tasks**: spawn 1,000 no-op tasks from this (outside) thread
//!   right after the build, and join them all;
//! - **idle CPU**: the CPU time (user + system) the whole process uses in
//!   the 1 s after the last join, with nothing left to run (the window is
//!   a 1 s sleep of this thread; its measured length is printed too, since
//!   busy Processers can make it end late);
//! - **dispatcher**: the CPU share of the Dispatcher thread while two tasks
//!   yield in a loop for 1 s (the Dispatcher then samples every Processer
//!   every 100-400 us, so this is its per-cycle bookkeeping at scale);
//! - **shutdown**: `shutdown()`, which wakes and joins every thread.
//!
//! Run: `cargo bench -p gofer-bench --bench processers` (or `-- 250 2000`). The machine's
//! other load inflates every figure: note `/proc/loadavg` with them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TASKS: usize = 1000;
const IDLE_WINDOW: Duration = Duration::from_secs(1);
const NAME: &str = "scale";

/// CPU time (user + system) used so far by the whole process.
fn process_cpu() -> Duration {
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer for the call.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(rc, 0, "getrusage");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time used so far by the threads named exactly `comm`, from /proc.
fn thread_cpu(comm: &str) -> Duration {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut ticks = 0u64;
    for e in std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .flatten()
    {
        let name = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if name.trim_end() != comm {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let field = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        ticks += field(11) + field(12);
    }
    Duration::from_secs_f64(ticks as f64 / hz)
}

struct Row {
    n: usize,
    build: Duration,
    tasks: Duration,
    idle_cpu: Duration,
    idle_window: Duration,
    dispatcher: f64,
    shutdown: Duration,
}

fn measure(n: usize) -> Row {
    let start = Instant::now();
    let s = gofer::Scheduler::builder()
        .min_threads(n)
        .max_threads(n)
        .name(NAME)
        .build()
        .expect("valid scheduler config");
    let build = start.elapsed();

    let start = Instant::now();
    let hs: Vec<_> = (0..TASKS).map(|i| s.spawn(move || i)).collect();
    for (i, h) in hs.into_iter().enumerate() {
        assert_eq!(h.join().expect("a no-op task"), i);
    }
    let tasks = start.elapsed();

    let cpu0 = process_cpu();
    let t0 = Instant::now();
    std::thread::sleep(IDLE_WINDOW);
    let idle_cpu = process_cpu().saturating_sub(cpu0);
    let idle_window = t0.elapsed();

    // "scale-dispatcher" is cut to 15 bytes in /proc's comm.
    let comm = &format!("{NAME}-dispatcher")[..15];
    let stop = Arc::new(AtomicBool::new(false));
    let yielders: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    gofer::yield_now();
                }
            })
        })
        .collect();
    let d0 = thread_cpu(comm);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let dispatcher = (thread_cpu(comm) - d0).as_secs_f64() / t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for y in yielders {
        y.join().expect("a yielder");
    }

    let start = Instant::now();
    s.shutdown();
    let shutdown = start.elapsed();
    Row {
        n,
        build,
        tasks,
        idle_cpu,
        idle_window,
        dispatcher,
        shutdown,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        return; // `cargo test -p gofer-bench --benches` asks for a list; nothing to list
    }
    let mut counts: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if counts.is_empty() {
        counts = vec![2, 8, 250, 1000, 2000];
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average before: {}", load.trim());
    println!(
        "| Processers | build | {TASKS} tasks from outside | idle CPU in the {:?} after | Dispatcher CPU, 2 tasks yielding | shutdown |",
        IDLE_WINDOW
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for n in counts {
        let r = measure(n);
        println!(
            "| {} | {:.1} ms | {:.1} ms | {:.3} s in {:.2} s | {:.1} % | {:.1} ms |",
            r.n,
            r.build.as_secs_f64() * 1e3,
            r.tasks.as_secs_f64() * 1e3,
            r.idle_cpu.as_secs_f64(),
            r.idle_window.as_secs_f64(),
            r.dispatcher * 100.0,
            r.shutdown.as_secs_f64() * 1e3,
        );
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average after: {}", load.trim());
}
