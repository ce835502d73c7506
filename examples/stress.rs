//! A mixed workload that keeps every part of gofer busy for a while, then
//! checks its own books and prints a summary.
//!
//! Run it with `cargo run --release -p gofer-demo` (the package `demo/`, which
//! builds only gofer and clap), or `cargo run --release --example stress`
//! (which builds all of gofer's dev-dependencies first); `-- --help` lists
//! the flags.
//!
//! The work is a set of pipelines. Each pipeline is a long-lived controller
//! task that runs rounds until the run's time is up. A round spawns fresh
//! tasks, a producer, six transformers and a sink, wired with two bounded
//! channels:
//!
//! ```text
//! producer --bounded(16)--> 6 transformers --bounded(16)--> sink
//! ```
//!
//! The producer sends a fixed number of items. A transformer reads a shared
//! table under a `RwLock`, does the item's work (a little arithmetic, a
//! `yield_now`, a `gofer::sleep`, or, for a configurable fraction of items, a
//! real `std::thread::sleep` that blocks its thread until the Dispatcher
//! rescues the tasks behind it), adds the result to mutex-protected totals
//! and passes the item on. The sink counts what arrives, watching for stalls
//! with `select!` and a timeout. Meanwhile two sampler tasks measure
//! scheduling latency: the time from a task becoming runnable (a value sent
//! to a task parked in `recv`, a `yield_now`) to it running again.
//!
//! At the end every count is checked against every other: items produced,
//! transformed, consumed and found in the totals; sums of raw and
//! transformed values; tasks spawned and completed. A mismatch is printed
//! and the exit code is 1. A bad argument exits with code 2.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::error::ErrorKind;
use clap::{value_parser, Arg, ArgAction, Command};
use gofer::chan::{bounded, Receiver, Sender};
use gofer::sync::{Mutex, RwLock};
use gofer::JoinHandle;

/// Transformer tasks per round.
const TRANSFORMERS: usize = 6;
/// Tasks per pipeline while a round runs: controller, producer,
/// transformers, sink.
const TASKS_PER_PIPELINE: u64 = TRANSFORMERS as u64 + 3;
/// Capacity of each stage's channel.
const STAGE_CAPACITY: usize = 16;
/// Mutex shards of the totals map, and the keys spread over them.
const SHARDS: usize = 16;
const KEYS: u32 = 1024;
/// Entries in the shared transform table.
const TABLE_LEN: usize = 64;
/// A sink that waits this long without an item counts a stall.
const STALL: Duration = Duration::from_secs(5);
/// How long in-flight rounds may take to drain after the run's time is up.
const DRAIN_GRACE: Duration = Duration::from_secs(30);
/// Least stack of a pipeline's controller task and of the samplers.
const CONTROLLER_STACK: usize = 64 * 1024;
/// Pause between two latency samples.
const SAMPLE_EVERY: Duration = Duration::from_millis(1);

/// The run's settings (`--help` lists them; `command` defines them).
#[derive(Debug)]
struct Args {
    tasks: u64,
    duration: Duration,
    items_per_round: u64,
    min_threads: usize,
    max_threads: Option<usize>,
    blocking_fraction: f64,
    block_time: Duration,
    sleep_fraction: f64,
    stack_size: usize,
    dense: bool,
    seed: u64,
    no_progress: bool,
}

/// The command line, with clap's builder (no derive: the demo's package
/// builds no proc-macro).
fn command() -> Command {
    let flag = |name: &'static str, help: &'static str| {
        Arg::new(name)
            .long(name)
            .action(ArgAction::SetTrue)
            .help(help)
    };
    let opt = |name: &'static str, help: &'static str| {
        // The value's name as the derive API spelled it: `--tasks <TASKS>`.
        let value: &'static str = name.to_uppercase().replace('-', "_").leak();
        Arg::new(name).long(name).value_name(value).help(help)
    };
    Command::new("stress")
        .about(
            "A mixed gofer workload: channel pipelines, mutexes, yields, sleeps and real \
             blocking calls; prints throughput, scheduling latency and Dispatcher counters, \
             and checks that every item and task is accounted for.",
        )
        .after_help(
            "Exit status: 0 when the books balance, 1 when they do not (what is missing \
             is printed), 2 for a bad argument.",
        )
        .arg(
            opt(
                "tasks",
                "Tasks alive at once, roughly. The work is split into pipelines of 9 tasks \
                 each (a controller, a producer, 6 transformers, a sink)",
            )
            .default_value("2000")
            .value_parser(value_parser!(u64).range(TASKS_PER_PIPELINE..=1_000_000)),
        )
        .arg(
            opt(
                "duration",
                "How long to generate work (e.g. 10s, 1.5s, 500ms, 2m; a bare number is \
                 seconds). Rounds in flight then finish, which takes a moment more",
            )
            .default_value("10s")
            .value_parser(parse_duration),
        )
        .arg(
            opt(
                "items-per-round",
                "Items the producer of each round sends; every round spawns fresh tasks, so \
                 fewer items per round means more spawns",
            )
            .default_value("64")
            .value_parser(value_parser!(u64).range(1..=1_000_000)),
        )
        .arg(
            opt(
                "min-threads",
                "Core Processer threads, started at build; 0 means one per CPU",
            )
            .default_value("0")
            .value_parser(value_parser!(usize)),
        )
        .arg(
            opt(
                "max-threads",
                "Cap on Processer threads, including the extra ones the Dispatcher starts \
                 when every Processer is blocked [default: max(8, min-threads)]",
            )
            .value_parser(value_parser!(usize)),
        )
        .arg(
            opt(
                "blocking-fraction",
                "Fraction of items (0 to 1) whose transform makes a real blocking call, \
                 `std::thread::sleep(--block-time)`, holding its thread for that long: the \
                 Dispatcher moves the tasks queued behind it that have not started yet",
            )
            .default_value("0.002")
            .value_parser(parse_fraction),
        )
        .arg(
            opt("block-time", "How long each blocking call holds its thread")
                .default_value("2ms")
                .value_parser(parse_duration),
        )
        .arg(
            opt(
                "sleep-fraction",
                "Fraction of items (0 to 1) whose transform parks its task with \
                 `gofer::sleep` for 0.5 to 2 ms",
            )
            .default_value("0.05")
            .value_parser(parse_fraction),
        )
        .arg(
            opt(
                "stack-size",
                "Stack size of the pipelines' tasks, in bytes or with a K or M suffix (16K \
                 to 1024M); the controllers get at least 64K. 16K is enough in a release \
                 build; a debug build needs about 32K",
            )
            .default_value("64K")
            .value_parser(parse_size),
        )
        .arg(flag(
            "dense",
            "Dense stack mode: carve stacks out of shared mappings without guard pages \
             (`dense_stacks(true)`), so `vm.max_map_count` does not cap the number of live \
             tasks",
        ))
        .arg(
            opt(
                "seed",
                "Seed of the per-pipeline random streams that pick each item's work",
            )
            .default_value("1")
            .value_parser(value_parser!(u64)),
        )
        .arg(flag(
            "no-progress",
            "Do not draw the progress bar (it is drawn only when stderr is a terminal \
             anyway)",
        ))
}

impl Args {
    /// Parses the command line; on a bad argument (or `--help`) prints
    /// clap's message and exits (code 2 for an error).
    fn parse() -> Args {
        let m = command().get_matches();
        Args {
            tasks: *m.get_one("tasks").expect("defaulted"),
            duration: *m.get_one("duration").expect("defaulted"),
            items_per_round: *m.get_one("items-per-round").expect("defaulted"),
            min_threads: *m.get_one("min-threads").expect("defaulted"),
            max_threads: m.get_one("max-threads").copied(),
            blocking_fraction: *m.get_one("blocking-fraction").expect("defaulted"),
            block_time: *m.get_one("block-time").expect("defaulted"),
            sleep_fraction: *m.get_one("sleep-fraction").expect("defaulted"),
            stack_size: *m.get_one("stack-size").expect("defaulted"),
            dense: m.get_flag("dense"),
            seed: *m.get_one("seed").expect("defaulted"),
            no_progress: m.get_flag("no-progress"),
        }
    }
}

/// A one-line progress bar on stderr, redrawn at most 10 times a second.
struct Progress {
    on: bool,
    total: Duration,
    drawn: Option<Instant>,
    frame: usize,
}

impl Progress {
    fn new(on: bool, total: Duration) -> Progress {
        Progress {
            on,
            total,
            drawn: None,
            frame: 0,
        }
    }

    fn draw(&mut self, elapsed: Duration, msg: &str) {
        if !self.on
            || self
                .drawn
                .is_some_and(|t| t.elapsed() < Duration::from_millis(100))
        {
            return;
        }
        self.drawn = Some(Instant::now());
        self.frame += 1;
        let width = 30;
        let done = ((elapsed.as_secs_f64() / self.total.as_secs_f64().max(1e-9)) * width as f64)
            .min(width as f64) as usize;
        let bar: String = (0..width)
            .map(|i| match i.cmp(&done) {
                std::cmp::Ordering::Less => '=',
                std::cmp::Ordering::Equal => '>',
                std::cmp::Ordering::Greater => ' ',
            })
            .collect();
        let spinner = ['|', '/', '-', '\\'][self.frame % 4];
        // \r to the line's start, \x1b[K to erase what the last one left.
        eprint!("\r{spinner} {:>3}s [{bar}] {msg}\x1b[K", elapsed.as_secs());
    }

    fn finish_and_clear(&mut self) {
        if self.on && self.drawn.is_some() {
            eprint!("\r\x1b[K");
        }
        self.on = false;
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration; write e.g. 10s, 1.5s, 500ms or 2m"))?;
    let scale = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" | "min" => 60.0,
        u => return Err(format!("unknown unit `{u}` in `{s}`; use ms, s or m")),
    };
    let secs = n * scale;
    if !(0.0..=86_400.0).contains(&secs) {
        return Err(format!("`{s}` is out of range; accepted: 0 to 24 hours"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    let f: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number; expected a fraction from 0 to 1"))?;
    if (0.0..=1.0).contains(&f) {
        Ok(f)
    } else {
        Err(format!(
            "{f} is out of range; expected a fraction from 0 to 1"
        ))
    }
}

fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size; write e.g. 65536, 64K or 1M"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        u => return Err(format!("unknown unit `{u}` in `{s}`; use K or M")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))
}

/// Checks what clap cannot check one argument at a time.
fn validate(args: &Args) -> Result<(), String> {
    if args.duration.is_zero() {
        return Err("--duration must be more than zero".into());
    }
    if let Some(max) = args.max_threads {
        if max == 0 {
            return Err("--max-threads must be at least 1".into());
        }
        if args.min_threads > max {
            return Err(format!(
                "--min-threads ({}) is above --max-threads ({max}); the cap must be at least \
                 the number of core threads",
                args.min_threads
            ));
        }
    }
    if args.blocking_fraction + args.sleep_fraction > 1.0 {
        return Err(format!(
            "--blocking-fraction ({}) plus --sleep-fraction ({}) is above 1",
            args.blocking_fraction, args.sleep_fraction
        ));
    }
    if args.block_time > Duration::from_secs(1) {
        return Err("--block-time must be at most 1s".into());
    }
    Ok(())
}

/// A small deterministic generator (splitmix64), one stream per pipeline.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }
    /// A float in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What a transformer does with an item.
#[derive(Clone, Copy, Debug)]
enum Work {
    Compute,
    Yield,
    Sleep(Duration),
    Block,
}

#[derive(Debug)]
struct Item {
    key: u32,
    raw: u64,
    work: Work,
    out: u64,
}

#[derive(Default)]
struct Total {
    count: u64,
    sum: u64,
}

/// Counters every stage adds to; compared with each other at the end.
#[derive(Default)]
struct Books {
    produced: AtomicU64,
    produced_raw: AtomicU64,
    transformed: AtomicU64,
    transformed_sum: AtomicU64,
    consumed: AtomicU64,
    consumed_raw: AtomicU64,
    consumed_sum: AtomicU64,
    rounds: AtomicU64,
    computes: AtomicU64,
    yields: AtomicU64,
    sleeps: AtomicU64,
    blocking_calls: AtomicU64,
    stalls: AtomicU64,
    /// Tasks this program spawned (successfully).
    spawned: AtomicU64,
}

struct World {
    books: Books,
    totals: Vec<Mutex<HashMap<u32, Total>>>,
    table: RwLock<Vec<u64>>,
    /// Problems found by the tasks themselves: a round whose counts differ,
    /// a task that panicked, a spawn that failed.
    problems: Mutex<Vec<String>>,
    stop: AtomicBool,
    items_per_round: u64,
    blocking_fraction: f64,
    sleep_fraction: f64,
    block_time: Duration,
    seed: u64,
}

impl World {
    fn problem(&self, what: String) {
        self.problems.lock().push(what);
    }

    /// Spawns on the current task's scheduler, counting the task.
    fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<JoinHandle<T>, gofer::SpawnError> {
        let h = gofer::Builder::new().spawn(f)?;
        self.books.spawned.fetch_add(1, Relaxed);
        Ok(h)
    }
}

/// What a round's tasks report when joined.
struct Tally {
    count: u64,
    raw: u64,
}

fn produce(w: &World, seed: u64, tx: Sender<Item>) -> Tally {
    let mut rng = Rng::new(seed);
    let mut t = Tally { count: 0, raw: 0 };
    for _ in 0..w.items_per_round {
        let raw = rng.next() >> 24;
        let key = rng.below(KEYS as u64) as u32;
        let r = rng.unit();
        let work = if r < w.blocking_fraction {
            Work::Block
        } else if r < w.blocking_fraction + w.sleep_fraction {
            Work::Sleep(Duration::from_micros(500 + rng.below(1500)))
        } else if r < w.blocking_fraction + w.sleep_fraction + 0.25 {
            Work::Yield
        } else {
            Work::Compute
        };
        let item = Item {
            key,
            raw,
            work,
            out: 0,
        };
        if tx.send(item).is_err() {
            // Every transformer is gone: only when a round is torn down
            // after a failed spawn. The books will show the shortfall.
            break;
        }
        t.count += 1;
        t.raw = t.raw.wrapping_add(raw);
        w.books.produced.fetch_add(1, Relaxed);
        w.books.produced_raw.fetch_add(raw, Relaxed);
    }
    t
}

fn transform(w: &World, rx: Receiver<Item>, tx: Sender<Item>) -> u64 {
    let mut n = 0;
    for mut item in rx.iter() {
        let salt = w.table.read()[item.key as usize % TABLE_LEN];
        match item.work {
            Work::Compute => {
                let mut z = item.raw ^ salt;
                for _ in 0..32 {
                    z = mix(z);
                }
                item.out = z >> 32;
                w.books.computes.fetch_add(1, Relaxed);
            }
            Work::Yield => {
                gofer::yield_now();
                item.out = mix(item.raw ^ salt) >> 32;
                w.books.yields.fetch_add(1, Relaxed);
            }
            Work::Sleep(d) => {
                gofer::sleep(d);
                item.out = mix(item.raw ^ salt) >> 32;
                w.books.sleeps.fetch_add(1, Relaxed);
            }
            Work::Block => {
                // A real blocking call: the thread sleeps in the kernel and
                // does not switch; the Dispatcher has to notice.
                std::thread::sleep(w.block_time);
                item.out = mix(item.raw ^ salt) >> 32;
                w.books.blocking_calls.fetch_add(1, Relaxed);
            }
        }
        {
            let mut shard = w.totals[item.key as usize % SHARDS].lock();
            let e = shard.entry(item.key).or_default();
            e.count += 1;
            e.sum = e.sum.wrapping_add(item.out);
            if item.raw % 64 == 0 {
                // Now and then switch out holding the lock, so that other
                // transformers queue on it.
                gofer::yield_now();
            }
        }
        w.books.transformed.fetch_add(1, Relaxed);
        w.books.transformed_sum.fetch_add(item.out, Relaxed);
        n += 1;
        if tx.send(item).is_err() {
            w.problem("a transformer found the sink gone".into());
            break;
        }
    }
    n
}

fn sink(w: &World, rx: Receiver<Item>) -> Tally {
    let mut t = Tally { count: 0, raw: 0 };
    loop {
        gofer::select! {
            recv(rx) -> r => match r {
                Ok(item) => {
                    t.count += 1;
                    t.raw = t.raw.wrapping_add(item.raw);
                    w.books.consumed.fetch_add(1, Relaxed);
                    w.books.consumed_raw.fetch_add(item.raw, Relaxed);
                    w.books.consumed_sum.fetch_add(item.out, Relaxed);
                }
                Err(_) => break,
            },
            default(STALL) => {
                w.books.stalls.fetch_add(1, Relaxed);
            }
        }
    }
    t
}

fn join_into<T>(w: &World, what: &str, h: JoinHandle<T>) -> Option<T> {
    match h.join() {
        Ok(v) => Some(v),
        Err(e) => {
            w.problem(format!("{what} task failed: {e}"));
            None
        }
    }
}

/// One round: spawns the sink, the transformers, then the producer (so a
/// failed spawn leaves no item in flight), and joins them all. Returns
/// false when the pipeline must stop.
fn run_round(w: &Arc<World>, pipeline: u64, round: u64) -> bool {
    let (tx_a, rx_a) = bounded::<Item>(STAGE_CAPACITY);
    let (tx_b, rx_b) = bounded::<Item>(STAGE_CAPACITY);
    let fail = |e: gofer::SpawnError| {
        w.problem(format!(
            "pipeline {pipeline} round {round}: cannot spawn: {e}"
        ));
        w.stop.store(true, Relaxed);
    };
    let sink_h = {
        let w2 = w.clone();
        match w.spawn(move || sink(&w2, rx_b)) {
            Ok(h) => h,
            Err(e) => {
                fail(e);
                return false;
            }
        }
    };
    let mut ok = true;
    let mut transformers = Vec::with_capacity(TRANSFORMERS);
    for _ in 0..TRANSFORMERS {
        let (w2, rx, tx) = (w.clone(), rx_a.clone(), tx_b.clone());
        match w.spawn(move || transform(&w2, rx, tx)) {
            Ok(h) => transformers.push(h),
            Err(e) => {
                fail(e);
                ok = false;
                break;
            }
        }
    }
    drop((rx_a, tx_b));
    let producer_h = if ok {
        let w2 = w.clone();
        let seed = mix(w.seed ^ mix(pipeline << 32 | round));
        match w.spawn(move || produce(&w2, seed, tx_a)) {
            Ok(h) => Some(h),
            Err(e) => {
                fail(e);
                ok = false;
                None
            }
        }
    } else {
        drop(tx_a);
        None
    };

    let produced = producer_h.and_then(|h| join_into(w, "producer", h));
    let mut transformed = 0;
    for h in transformers {
        transformed += join_into(w, "transformer", h).unwrap_or(0);
    }
    let consumed = join_into(w, "sink", sink_h);
    if let (Some(p), Some(c)) = (produced, consumed) {
        let expect = w.items_per_round;
        if p.count != expect || c.count != p.count || transformed != p.count || c.raw != p.raw {
            w.problem(format!(
                "pipeline {pipeline} round {round}: produced {} of {expect}, transformed {}, \
                 consumed {} (raw sums {} vs {})",
                p.count, transformed, c.count, p.raw, c.raw
            ));
        }
    }
    w.books.rounds.fetch_add(1, Relaxed);
    ok
}

fn controller(w: Arc<World>, pipeline: u64) {
    let mut rng = Rng::new(mix(w.seed.wrapping_add(pipeline)));
    let mut round = 0;
    while !w.stop.load(Relaxed) {
        if !run_round(&w, pipeline, round) {
            break;
        }
        round += 1;
        if round % 8 == 0 {
            let mut table = w.table.write();
            let i = rng.below(TABLE_LEN as u64) as usize;
            table[i] = rng.next();
        }
    }
}

/// Latency samples in nanoseconds.
struct Samples {
    wake: Vec<u64>,
    yield_: Vec<u64>,
    sent: u64,
}

/// Sends the current time to a receiver parked in `recv` once a millisecond
/// (it measures how long it took to run), and times a `yield_now`.
fn sampler(w: &World, tx: Sender<Instant>) -> (Vec<u64>, u64) {
    let mut yields = Vec::new();
    let mut sent = 0;
    while !w.stop.load(Relaxed) {
        gofer::sleep(SAMPLE_EVERY);
        let t = Instant::now();
        gofer::yield_now();
        yields.push(t.elapsed().as_nanos() as u64);
        if tx.send(Instant::now()).is_err() {
            w.problem("the latency receiver is gone".into());
            break;
        }
        sent += 1;
    }
    (yields, sent)
}

fn sample_receiver(rx: Receiver<Instant>) -> Vec<u64> {
    rx.iter().map(|t| t.elapsed().as_nanos() as u64).collect()
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `1234567` as `1,234,567`.
fn commas(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn fmt_ns(ns: u64) -> String {
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{:.2} ms", ns as f64 / 1e6)
    }
}

fn percentiles(mut v: Vec<u64>) -> String {
    if v.is_empty() {
        return "no samples".into();
    }
    v.sort_unstable();
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    format!(
        "{} / {} / {}  ({} samples)",
        fmt_ns(at(0.50)),
        fmt_ns(at(0.99)),
        fmt_ns(*v.last().unwrap()),
        commas(v.len() as u64)
    )
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(msg) = validate(&args) {
        command().error(ErrorKind::ValueValidation, msg).exit();
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let core = if args.min_threads == 0 {
        cpus
    } else {
        args.min_threads
    };
    let max_threads = args.max_threads.unwrap_or(core.max(8));
    let builder = gofer::Scheduler::builder()
        .name("stress")
        .min_threads(args.min_threads)
        .max_threads(max_threads)
        .stack_size(args.stack_size)
        .dense_stacks(args.dense);
    // The workload shows the Dispatcher rescuing tasks from threads that
    // really block, started ones included, so it lets started tasks move.
    // SAFETY: the tasks keep their state in their own frames (`Rng` is a
    // plain value) and in gofer's sync primitives and channels; they use no
    // thread-local and hold no thread-bound value (no std lock guard, no
    // `Rc`) across a switch point. The blocking call they make
    // (`std::thread::sleep`, a plain system call without the `hooks`
    // feature) does not switch.
    let builder = unsafe { builder.migrate_started_tasks(true) };
    let sched = match builder.build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: invalid scheduler configuration: {e}");
            return ExitCode::from(2);
        }
    };
    let pipelines = args.tasks / TASKS_PER_PIPELINE;
    if !args.dense && args.tasks > 30_000 {
        eprintln!(
            "warning: {} tasks with guarded stacks may exceed vm.max_map_count (about 32k live \
             guarded stacks); add --dense for that many",
            args.tasks
        );
    }

    let mut table_rng = Rng::new(args.seed);
    let world = Arc::new(World {
        books: Books::default(),
        totals: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        table: RwLock::new((0..TABLE_LEN).map(|_| table_rng.next()).collect()),
        problems: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        items_per_round: args.items_per_round,
        blocking_fraction: args.blocking_fraction,
        sleep_fraction: args.sleep_fraction,
        block_time: args.block_time,
        seed: args.seed,
    });

    println!(
        "gofer stress: {pipelines} pipelines x {TASKS_PER_PIPELINE} tasks for {:?}; \
         threads {core}..{max_threads}, {} KiB {} stacks, blocking fraction {}, seed {}",
        args.duration,
        args.stack_size / 1024,
        if args.dense { "dense" } else { "guarded" },
        args.blocking_fraction,
        args.seed
    );

    let start = Instant::now();
    let spawn_err = |what: &str, e: gofer::SpawnError| -> ExitCode {
        eprintln!("error: cannot spawn the {what} task: {e}");
        ExitCode::from(1)
    };
    // Controllers and samplers are few and do the most (spawning, joining,
    // formatting): give them at least CONTROLLER_STACK, whatever
    // --stack-size says.
    let controller_stack = args.stack_size.max(CONTROLLER_STACK);
    let (ltx, lrx) = bounded::<Instant>(0);
    let receiver = match gofer::Builder::new()
        .name("latency-rx")
        .stack_size(controller_stack)
        .scheduler(&sched)
        .spawn(move || sample_receiver(lrx))
    {
        Ok(h) => h,
        Err(e) => return spawn_err("latency receiver", e),
    };
    world.books.spawned.fetch_add(1, Relaxed);
    let sampler_h = {
        let w = world.clone();
        match gofer::Builder::new()
            .name("latency-tx")
            .stack_size(controller_stack)
            .scheduler(&sched)
            .spawn(move || sampler(&w, ltx))
        {
            Ok(h) => h,
            Err(e) => return spawn_err("latency sampler", e),
        }
    };
    world.books.spawned.fetch_add(1, Relaxed);
    let mut controllers = Vec::with_capacity(pipelines as usize);
    for p in 0..pipelines {
        let w = world.clone();
        match gofer::Builder::new()
            .name(format!("pipeline-{p}"))
            .stack_size(controller_stack)
            .scheduler(&sched)
            .spawn(move || controller(w, p))
        {
            Ok(h) => controllers.push(h),
            Err(e) => {
                world.stop.store(true, Relaxed);
                eprintln!("error: cannot spawn pipeline {p}: {e}");
                break;
            }
        }
        world.books.spawned.fetch_add(1, Relaxed);
    }

    let mut pb = Progress::new(
        !args.no_progress && std::io::stderr().is_terminal(),
        args.duration,
    );

    // The main thread watches: progress, peak threads, and each
    // Processer's switch counter (kept per id, so threads that retire still
    // count).
    let mut switches: HashMap<usize, u64> = HashMap::new();
    let mut peak_threads = 0;
    let mut peak_blocked = 0;
    let mut observe = |s: &gofer::Stats| {
        for p in &s.processers {
            let e = switches.entry(p.id).or_insert(0);
            *e = (*e).max(p.switches);
        }
        peak_threads = peak_threads.max(s.threads);
        peak_blocked = peak_blocked.max(s.blocked);
    };
    let deadline = start + args.duration;
    let mut draining = false;
    let drain_deadline = deadline + DRAIN_GRACE;
    loop {
        let now = Instant::now();
        if !draining && now >= deadline {
            world.stop.store(true, Relaxed);
            draining = true;
        }
        let s = sched.stats();
        observe(&s);
        let items = world.books.consumed.load(Relaxed);
        let secs = start.elapsed().as_secs_f64().max(1e-3);
        pb.draw(
            now.saturating_duration_since(start),
            &format!(
                "{}{} items ({}/s), {} tasks alive, threads {} (blocked {}), rescued {}",
                if draining { "draining: " } else { "" },
                commas(items),
                commas((items as f64 / secs) as u64),
                commas(s.alive as u64),
                s.threads,
                s.blocked,
                commas(s.tasks_rescued)
            ),
        );
        if draining && controllers.iter().all(|h| h.is_finished()) && sampler_h.is_finished() {
            break;
        }
        if now >= drain_deadline {
            pb.finish_and_clear();
            let b = &world.books;
            println!(
                "BOOKS DO NOT BALANCE: {} of {} pipelines still running {:?} after the end \
                 ({} tasks alive); produced {}, transformed {}, consumed {}",
                controllers.iter().filter(|h| !h.is_finished()).count(),
                controllers.len(),
                DRAIN_GRACE,
                s.alive,
                b.produced.load(Relaxed),
                b.transformed.load(Relaxed),
                b.consumed.load(Relaxed)
            );
            let stuck: Vec<String> = controllers
                .iter()
                .enumerate()
                .filter(|(_, h)| !h.is_finished())
                .take(10)
                .map(|(p, _)| format!("pipeline-{p}"))
                .collect();
            println!("  - still running: {}", stuck.join(", "));
            for p in problem_lines(&world) {
                println!("  - {p}");
            }
            for p in &s.processers {
                println!(
                    "  - Processer {} ({}): queued {}, running {}, blocked {}, sleeping {}",
                    p.id, p.kind, p.queued, p.running, p.blocked, p.sleeping
                );
            }
            return ExitCode::from(1);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    pb.finish_and_clear();

    for (p, h) in controllers.into_iter().enumerate() {
        join_into(&world, &format!("pipeline-{p}"), h);
    }
    let (yield_samples, sent) = join_into(&world, "latency sampler", sampler_h).unwrap_or_default();
    let wake_samples = join_into(&world, "latency receiver", receiver).unwrap_or_default();
    let samples = Samples {
        wake: wake_samples,
        yield_: yield_samples,
        sent,
    };
    let elapsed = start.elapsed();

    // `alive` drops a moment after a joined task leaves its stack.
    let settle = Instant::now() + Duration::from_secs(2);
    let mut s = sched.stats();
    while s.alive > 0 && Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(1));
        s = sched.stats();
    }
    observe(&s);
    let shutdown = sched.shutdown_timeout(Duration::from_secs(5));

    let missing = check_books(&world, &s, &samples, shutdown.err());
    print_summary(
        &args,
        &world,
        &s,
        &samples,
        elapsed,
        &switches,
        peak_threads,
        peak_blocked,
    );
    if missing.is_empty() {
        let b = &world.books;
        println!(
            "books balanced: {} items produced = transformed = consumed = in the mutex totals; \
             {} tasks spawned = completed",
            commas(b.produced.load(Relaxed)),
            commas(s.spawned)
        );
        ExitCode::SUCCESS
    } else {
        println!("BOOKS DO NOT BALANCE:");
        for m in &missing {
            println!("  - {m}");
        }
        ExitCode::from(1)
    }
}

/// Every way the counts can disagree, described.
fn check_books(
    w: &World,
    s: &gofer::Stats,
    samples: &Samples,
    shutdown: Option<gofer::ShutdownError>,
) -> Vec<String> {
    let b = &w.books;
    let mut missing = Vec::new();
    let mut eq = |what: &str, a: (&str, u64), c: (&str, u64)| {
        if a.1 != c.1 {
            let diff = a.1 as i128 - c.1 as i128;
            missing.push(format!(
                "{what}: {} {} but {} {} (difference {diff})",
                a.0,
                commas(a.1),
                c.0,
                commas(c.1)
            ));
        }
    };
    let produced = b.produced.load(Relaxed);
    let transformed = b.transformed.load(Relaxed);
    let consumed = b.consumed.load(Relaxed);
    eq(
        "items",
        ("produced", produced),
        ("transformed", transformed),
    );
    eq("items", ("produced", produced), ("consumed", consumed));
    eq(
        "raw sums",
        ("produced", b.produced_raw.load(Relaxed)),
        ("consumed", b.consumed_raw.load(Relaxed)),
    );
    eq(
        "transformed sums",
        ("transformers added", b.transformed_sum.load(Relaxed)),
        ("the sinks received", b.consumed_sum.load(Relaxed)),
    );
    let (mut count, mut sum) = (0u64, 0u64);
    for shard in &w.totals {
        for t in shard.lock().values() {
            count += t.count;
            sum = sum.wrapping_add(t.sum);
        }
    }
    eq(
        "mutex totals",
        ("items transformed", transformed),
        ("counted under the mutexes", count),
    );
    eq(
        "mutex totals",
        ("transformers added", b.transformed_sum.load(Relaxed)),
        ("summed under the mutexes", sum),
    );
    eq(
        "work kinds",
        ("items transformed", transformed),
        (
            "computes + yields + sleeps + blocking calls",
            b.computes.load(Relaxed)
                + b.yields.load(Relaxed)
                + b.sleeps.load(Relaxed)
                + b.blocking_calls.load(Relaxed),
        ),
    );
    eq(
        "latency samples",
        ("sent", samples.sent),
        ("received", samples.wake.len() as u64),
    );
    eq(
        "tasks",
        ("this program spawned", b.spawned.load(Relaxed)),
        ("the scheduler counted", s.spawned),
    );
    eq("tasks", ("spawned", s.spawned), ("completed", s.completed));
    if s.alive != 0 {
        missing.push(format!("tasks: {} still alive after every join", s.alive));
    }
    if let Some(e) = shutdown {
        missing.push(format!("shutdown: {e}"));
    }
    missing.extend(problem_lines(w));
    missing
}

/// The problems the tasks reported, identical ones counted once, at most
/// 20 lines.
fn problem_lines(w: &World) -> Vec<String> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for p in w.problems.lock().iter() {
        match seen.iter_mut().find(|(m, _)| m == p) {
            Some((_, n)) => *n += 1,
            None => seen.push((p.clone(), 1)),
        }
    }
    let mut lines: Vec<String> = seen
        .iter()
        .take(20)
        .map(|(m, n)| {
            if *n > 1 {
                format!("{m} (x{n})")
            } else {
                m.clone()
            }
        })
        .collect();
    if seen.len() > 20 {
        lines.push(format!("... and {} other problems", seen.len() - 20));
    }
    lines
}

#[allow(clippy::too_many_arguments)]
fn print_summary(
    args: &Args,
    w: &World,
    s: &gofer::Stats,
    samples: &Samples,
    elapsed: Duration,
    switches: &HashMap<usize, u64>,
    peak_threads: usize,
    peak_blocked: usize,
) {
    let b = &w.books;
    let secs = elapsed.as_secs_f64();
    let per_sec = |n: u64| commas((n as f64 / secs) as u64);
    let total_switches: u64 = switches.values().sum();
    let rss = peak_rss_kib().map_or("unknown".to_string(), |k| {
        format!("{:.1} MiB", k as f64 / 1024.0)
    });
    let rows: Vec<(&str, String)> = vec![
        (
            "wall time",
            format!("{secs:.2} s (work {:?})", args.duration),
        ),
        ("tasks spawned", commas(s.spawned)),
        ("tasks/s", per_sec(s.completed)),
        ("switches", commas(total_switches)),
        ("switches/s", per_sec(total_switches)),
        ("pipeline rounds", commas(b.rounds.load(Relaxed))),
        ("items through pipelines", commas(b.consumed.load(Relaxed))),
        ("items/s", per_sec(b.consumed.load(Relaxed))),
        (
            "work: compute/yield/sleep",
            format!(
                "{} / {} / {}",
                commas(b.computes.load(Relaxed)),
                commas(b.yields.load(Relaxed)),
                commas(b.sleeps.load(Relaxed))
            ),
        ),
        (
            "blocking calls",
            format!(
                "{} x {:?}",
                commas(b.blocking_calls.load(Relaxed)),
                args.block_time
            ),
        ),
        (
            "wake latency p50/p99/max",
            percentiles(samples.wake.clone()),
        ),
        (
            "yield latency p50/p99/max",
            percentiles(samples.yield_.clone()),
        ),
        ("blocked detections", commas(s.blocked_detections)),
        ("tasks rescued", commas(s.tasks_rescued)),
        (
            "threads started/retired",
            format!(
                "{} / {} (peak {peak_threads} live, {peak_blocked} blocked at once)",
                s.threads_started, s.threads_retired
            ),
        ),
        ("sink stalls (5 s idle)", commas(b.stalls.load(Relaxed))),
        ("peak RSS", rss),
    ];
    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(out, "\n{:<width$}  value", "metric");
    let _ = writeln!(out, "{}  {}", "-".repeat(width), "-".repeat(40));
    for (k, v) in rows {
        let _ = writeln!(out, "{k:<width$}  {v}");
    }
    print!("{out}");
}
