//! Parked tasks at scale: memory per parked task, and the time to park and
//! to wake them all.
//!
//! N tasks each block in `recv()` on one shared channel. Every task bumps a
//! counter right before its `recv`; once the counter reads N and every
//! worker is idle, the resident set (`/proc/self/statm`) is read again, and
//! its growth over a baseline taken just before spawning, divided by N, is
//! the memory per parked task (stack pages touched, task header, channel
//! waiter, and the caller's `JoinHandle`). Then N values are sent, one per
//! task, and every task is joined.
//!
//! | case      | runtime | stacks                              | N          |
//! |-----------|---------|-------------------------------------|------------|
//! | `dense`   | gofer   | `dense_stacks(true)`, 16 KiB        | 100k, 1M   |
//! | `guarded` | gofer   | guarded, default 256 KiB            | 30k        |
//! | `may`     | may     | guarded, default 32 KiB (0x1000 words) | 30k     |
//! | `ceiling` | gofer   | guarded, default 256 KiB            | until `SpawnError::StackExhausted` |
//!
//! Two workers everywhere. For may, the baseline is taken before its
//! scheduler starts, because starting it fills a pool with 1,000 ready
//! coroutines (stacks touched) that the first tasks then use. may's tasks park in `recv()` on one shared
//! `may::sync::mpmc` channel (may's `mpsc` receiver cannot be shared; its
//! blocking path is the same).
//!
//! Each case runs in a child process of its own (this binary re-run with
//! `--child <case> <n>`): each baseline starts from a fresh heap, may's
//! process-wide configuration is set once, and the ceiling case, which
//! uses up the process's memory mappings (`vm.max_map_count`), cannot
//! disturb anything else.
//!
//! Run: `cargo bench -p gofer-bench --bench million` (needs about 5 GiB of free memory for
//! the 1M case). It prints a table and writes
//! `target/gofer-bench/million.json`. Without `--bench` (as under
//! `cargo test -p gofer-bench --benches`) it runs a quick smoke version with small N and
//! writes nothing; `--list` does nothing.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "common/summary.rs"]
mod summary;

/// What one parked-tasks case measured.
struct Parked {
    n: usize,
    rss_base: usize,
    rss_parked: usize,
    /// The spawn calls alone.
    spawn: Duration,
    spawn_park: Duration,
    wake_join: Duration,
}

impl Parked {
    fn print(&self) {
        let rows = [
            ("n", self.n.to_string()),
            ("rss_base", self.rss_base.to_string()),
            ("rss_parked", self.rss_parked.to_string()),
            ("spawn_ns", self.spawn.as_nanos().to_string()),
            ("spawn_park_ns", self.spawn_park.as_nanos().to_string()),
            ("wake_join_ns", self.wake_join.as_nanos().to_string()),
        ];
        for (k, v) in rows {
            println!("RESULT\t{k}\t{v}");
        }
    }
}

/// Resident bytes of this process.
fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * page_size()
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// Polls `cond` gently (the CPU is shared) until it holds; panics after a
/// minute.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting until {what}"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn gofer_idle(sched: &gofer::Scheduler) -> bool {
    sched
        .stats()
        .processers
        .iter()
        .all(|p| p.sleeping && !p.running && p.queued == 0)
}

/// gofer: `n` tasks parked in `recv()` on one shared unbounded channel.
fn gofer_parked(n: usize, dense: bool) -> Parked {
    let mut builder = gofer::Scheduler::builder().min_threads(2).max_threads(2);
    if dense {
        builder = builder.dense_stacks(true).stack_size(16 * 1024);
    }
    let sched = builder.build().unwrap();
    let (tx, rx) = gofer::chan::unbounded::<u32>();
    let parked = Arc::new(AtomicUsize::new(0));
    wait_until("the Processers sleep", || gofer_idle(&sched));

    let rss_base = rss_bytes();
    let t0 = Instant::now();
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let (rx, parked) = (rx.clone(), parked.clone());
            sched.spawn(move || {
                parked.fetch_add(1, Ordering::Relaxed);
                rx.recv().unwrap()
            })
        })
        .collect();
    let spawn = t0.elapsed();
    wait_until("every task is parked", || {
        parked.load(Ordering::Relaxed) == n && gofer_idle(&sched)
    });
    let spawn_park = t0.elapsed();
    let rss_parked = rss_bytes();

    let t1 = Instant::now();
    for i in 0..n {
        tx.send(i as u32).unwrap();
    }
    let sum: u64 = handles.into_iter().map(|h| h.join().unwrap() as u64).sum();
    let wake_join = t1.elapsed();
    assert_eq!(sum, (n as u64) * (n as u64 - 1) / 2, "a value went missing");
    sched.shutdown();
    Parked {
        n,
        rss_base,
        rss_parked,
        spawn,
        spawn_park,
        wake_join,
    }
}

/// may: `n` coroutines parked in `recv()` on one shared mpmc channel.
fn may_parked(n: usize) -> Parked {
    may::config().set_workers(2);
    let (tx, rx) = may::sync::mpmc::channel::<u32>();
    let parked = Arc::new(AtomicUsize::new(0));

    // The baseline comes before may starts: its start fills a pool with
    // 1,000 ready coroutines whose stacks are already touched, and the
    // first 1,000 tasks below take those. (Its worker threads then count
    // too, a few pages.)
    let rss_base = rss_bytes();
    let t0 = Instant::now();
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let (rx, parked) = (rx.clone(), parked.clone());
            may::go!(move || {
                parked.fetch_add(1, Ordering::Relaxed);
                rx.recv().unwrap()
            })
        })
        .collect();
    let spawn = t0.elapsed();
    wait_until("every coroutine is parked", || {
        parked.load(Ordering::Relaxed) == n
    });
    let spawn_park = t0.elapsed();
    // may offers no idle signal: give the last ones time to switch out.
    std::thread::sleep(Duration::from_millis(50));
    let rss_parked = rss_bytes();

    let t1 = Instant::now();
    for i in 0..n {
        tx.send(i as u32).unwrap();
    }
    let sum: u64 = handles.into_iter().map(|h| h.join().unwrap() as u64).sum();
    let wake_join = t1.elapsed();
    assert_eq!(sum, (n as u64) * (n as u64 - 1) / 2, "a value went missing");
    Parked {
        n,
        rss_base,
        rss_parked,
        spawn,
        spawn_park,
        wake_join,
    }
}

/// gofer, guarded stacks: spawns parked tasks until `Builder::spawn` fails,
/// which must be `SpawnError::StackExhausted`.
fn guarded_ceiling() {
    let max_maps: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    println!("RESULT\tmax_map_count\t{max_maps}");
    if max_maps == 0 || max_maps > 200_000 {
        println!("RESULT\tskipped\tvm.max_map_count is {max_maps}: the ceiling is too far away");
        return;
    }
    // Once the mappings run out, the heap cannot grow either: `brk`, a new
    // malloc arena and a large (`mmap`ed) block all need one. So: one arena,
    // growing in 256 MiB steps (untouched, so not resident), never trimmed,
    // and no `mmap` below 32 MiB. Set before any other thread starts.
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only tunes the allocator; no other thread runs yet.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_TOP_PAD, 256 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
    let sched = gofer::Scheduler::builder()
        .min_threads(2)
        .max_threads(2)
        .build()
        .unwrap();
    let (tx, rx) = gofer::chan::unbounded::<u32>();
    let parked = Arc::new(AtomicUsize::new(0));
    let mut joins = Vec::with_capacity(max_maps);
    let err = loop {
        assert!(
            joins.len() < max_maps,
            "no error after {} tasks",
            joins.len()
        );
        let (rx, p) = (rx.clone(), parked.clone());
        let spawned = gofer::Builder::new().scheduler(&sched).spawn(move || {
            p.fetch_add(1, Ordering::Relaxed);
            rx.recv().is_ok()
        });
        match spawned {
            Ok(h) => joins.push(h),
            Err(e) => break e,
        }
        // Let each batch start (and take its stacks) before spawning more:
        // every task either parks or, with no stack to be had, completes.
        if joins.len() % 256 == 0 {
            let n = joins.len();
            wait_until("the batch has started", || {
                parked.load(Ordering::Relaxed) + sched.stats().completed as usize >= n
            });
        }
    };
    let exhausted = matches!(err, gofer::SpawnError::StackExhausted { .. });
    let live = sched.stats().live_stacks;
    let n = joins.len();
    wait_until("every admitted task has started", || {
        parked.load(Ordering::Relaxed) + sched.stats().completed as usize >= n
    });
    // Wake them one value each (dropping the sender would gather every
    // waiter into one large buffer).
    for i in 0..parked.load(Ordering::Relaxed) {
        tx.send(i as u32).unwrap();
    }
    drop(tx);
    let (mut ran, mut starved) = (0usize, 0usize);
    for h in joins.drain(..) {
        match h.join() {
            Ok(_) => ran += 1,
            Err(e) if e.is_stack_exhausted() => starved += 1,
            Err(e) => panic!("unexpected join error: {e}"),
        }
    }
    sched.shutdown();
    println!("RESULT\tstack_exhausted\t{exhausted}");
    println!("RESULT\tlive_stacks\t{live}");
    println!("RESULT\tran\t{ran}");
    println!("RESULT\tstarved\t{starved}");
    println!("RESULT\terror\t{err}");
}

fn child(case: &str, n: usize) {
    match case {
        "dense" => gofer_parked(n, true).print(),
        "guarded" => gofer_parked(n, false).print(),
        "may" => may_parked(n).print(),
        "ceiling" => guarded_ceiling(),
        _ => panic!("unknown case {case}"),
    }
}

/// Runs one case in a child process and returns what it reported.
fn run_child(case: &str, n: usize) -> Option<BTreeMap<String, String>> {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--child", case, &n.to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        eprintln!(
            "case {case} n={n} failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    Some(
        stdout
            .lines()
            .filter_map(|l| l.strip_prefix("RESULT\t"))
            .filter_map(|l| l.split_once('\t'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn num(r: &BTreeMap<String, String>, k: &str) -> f64 {
    r[k].parse().unwrap()
}

struct Case {
    key: &'static str,
    label: &'static str,
    arg: &'static str,
    n: usize,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return; // `cargo test -p gofer-bench --benches` asks for a list; nothing to list
    }
    if let Some(i) = args.iter().position(|a| a == "--child") {
        child(&args[i + 1], args[i + 2].parse().unwrap());
        return;
    }
    // `cargo bench` passes --bench; anything else gets a quick smoke run.
    let full = args.iter().any(|a| a == "--bench");
    let (big, mid, small) = if full {
        (1_000_000, 100_000, 30_000)
    } else {
        (2_000, 1_000, 1_000)
    };
    let cases = [
        Case {
            key: "gofer_dense_100k",
            label: "gofer dense 16 KiB",
            arg: "dense",
            n: mid,
        },
        Case {
            key: "gofer_dense_1m",
            label: "gofer dense 16 KiB",
            arg: "dense",
            n: big,
        },
        Case {
            key: "gofer_guarded_30k",
            label: "gofer guarded 256 KiB",
            arg: "guarded",
            n: small,
        },
        Case {
            key: "may_30k",
            label: "may guarded 32 KiB",
            arg: "may",
            n: small,
        },
    ];

    println!("parked tasks, each in recv() on one shared channel, 2 workers:");
    println!(
        "{:<24} {:>9} {:>11} {:>12} {:>9} {:>12} {:>9}",
        "case", "N", "RSS/task", "spawn+park", "/task", "wake+join", "/task"
    );
    let mut json_rows = Vec::new();
    for c in &cases {
        let Some(r) = run_child(c.arg, c.n) else {
            continue;
        };
        let n = num(&r, "n");
        let per_task = (num(&r, "rss_parked") - num(&r, "rss_base")) / n;
        let spawn_park = num(&r, "spawn_park_ns");
        let wake_join = num(&r, "wake_join_ns");
        println!(
            "{:<24} {:>9} {:>7.2} KiB {:>9.1} ms {:>6.0} ns {:>9.1} ms {:>6.0} ns",
            c.label,
            c.n,
            per_task / 1024.0,
            spawn_park / 1e6,
            spawn_park / n,
            wake_join / 1e6,
            wake_join / n,
        );
        json_rows.push(format!(
            "    {}: {{\"label\": {}, \"n\": {}, \"rss_base_bytes\": {}, \"rss_parked_bytes\": {}, \
             \"rss_per_task_bytes\": {:.1}, \"spawn_ns\": {}, \"spawn_park_ns\": {}, \"wake_join_ns\": {}}}",
            summary::string(c.key),
            summary::string(c.label),
            c.n,
            r["rss_base"],
            r["rss_parked"],
            per_task,
            r["spawn_ns"],
            r["spawn_park_ns"],
            r["wake_join_ns"],
        ));
    }

    let mut ceiling_json = String::from("null");
    if full {
        println!("guarded stacks past the vm.max_map_count ceiling (child process):");
        if let Some(r) = run_child("ceiling", 0) {
            if let Some(why) = r.get("skipped") {
                println!("  skipped: {why}");
            } else {
                println!(
                    "  vm.max_map_count {}: spawn failed after {} tasks ran ({} admitted ones \
                     got no stack), live stacks {}; StackExhausted: {}\n  error: {}",
                    r["max_map_count"],
                    r["ran"],
                    r["starved"],
                    r["live_stacks"],
                    r["stack_exhausted"],
                    r["error"]
                );
                ceiling_json = format!(
                    "{{\"max_map_count\": {}, \"ran\": {}, \"starved\": {}, \"live_stacks\": {}, \
                     \"stack_exhausted\": {}, \"error\": {}}}",
                    r["max_map_count"],
                    r["ran"],
                    r["starved"],
                    r["live_stacks"],
                    r["stack_exhausted"],
                    summary::string(&r["error"])
                );
            }
        }
        summary::write(
            "million",
            &format!(
                "{{\n  \"cases\": {{\n{}\n  }},\n  \"guarded_ceiling\": {}\n}}\n",
                json_rows.join(",\n"),
                ceiling_json
            ),
        );
    }
}
