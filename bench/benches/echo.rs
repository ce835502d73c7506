//! Echo round trips: N connections each send a message of 1 KiB and wait for
//! it to come back, over and over, against gofer's `examples/echo_server.rs`
//! and its peers on tokio, monoio and may (`bench/benches/servers/echo_*.rs`), each run as
//! its own process with the same thread count, one after the other.
//! `gofer-uring` is gofer's server on the io_uring driver (`GOFER_IO=uring`).
//!
//! Run: `cargo bench -p gofer-bench --bench echo` (or through `scripts/http_bench.sh`);
//! `cross/rt` is, for gofer's servers, the wake-ups a readiness poll delivered
//! to a task bound to another Processer per round trip (`Stats::cross_wakeups`,
//! read through the server's SIGUSR1 line at the window's start and end).
//! `--syscalls` adds the server's system calls per round trip (`perf stat`) and
//! the spread of the connections' mean latencies;
//! `cargo bench -p gofer-bench --bench echo -- --help` lists the flags.
//!
//! The client is this process: one thread (a tokio current-thread runtime)
//! driving every connection. On a 2-core machine it competes with the
//! server's threads for the cores, so a figure measures the pair; the
//! servers' own CPU time over the measured window (once every connection
//! is up and the warm-up is over) is printed beside it, and divided by the
//! round trips counted in that window, and so is the client thread's (near
//! 100 %, the client is the limit: no server can do more round trips than
//! its one thread drives). Every echoed message is
//! checked byte for byte. A round trip counts if it started after the
//! warm-up and ended before the run's end; latency is from the first byte
//! written to the last byte read.

#[path = "common/echo.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use clap::Parser;
use common::{load, raise_nofile, Server};

#[derive(Parser, Debug)]
#[command(
    name = "echo",
    about = "Echo round trips per second: gofer (epoll, and io_uring as gofer-uring), tokio, monoio and may servers."
)]
struct Args {
    /// Connection counts to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    connections: Vec<usize>,

    /// Servers to run, comma-separated, in this order.
    #[arg(long, value_delimiter = ',', default_value = "gofer,tokio,monoio,may")]
    servers: Vec<String>,

    /// Server threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,

    /// Message size in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,

    /// Seconds measured per run.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,

    /// Seconds of warm-up per run, not measured.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,

    /// Extra servers as NAME=PATH: a prebuilt server binary (taking
    /// `--addr` and `--threads`, printing `listening on ADDR` first) run as
    /// server NAME, e.g. an older build of `echo_server` to compare against
    /// in the same session. List NAME in `--servers` to run it.
    #[arg(long = "server-bin", value_delimiter = ',')]
    server_bins: Vec<String>,

    /// Also count the server's system calls per round trip over the
    /// measured window, with `perf stat` on the syscall tracepoints (which
    /// cost the server CPU: compare CPU and latency from runs without it),
    /// and print the spread of the connections' mean latencies.
    #[arg(long)]
    syscalls: bool,

    /// Runs the server list this many times per connection count, in
    /// reverse order every other round (so no server always follows the
    /// same one), then prints each server's medians and their ratios to
    /// `--baseline`'s. On a shared machine, figures minutes apart move
    /// more than servers differ: compare medians of interleaved rounds.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,

    /// The server the medians are compared with: `tokio` if listed, else
    /// the last one in `--servers`.
    #[arg(long)]
    baseline: Option<String>,

    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The package and example binary of each server name: gofer's server is
/// the root package's example, its peers are this package's.
fn example_of(server: &str) -> Option<(&'static str, &'static str)> {
    match server {
        "gofer" | "gofer-uring" => Some(("gofer", "echo_server")),
        "tokio" => Some(("gofer-bench", "peer_echo_tokio")),
        "may" => Some(("gofer-bench", "peer_echo_may")),
        "monoio" => Some(("gofer-bench", "peer_echo_monoio")),
        _ => None,
    }
}

/// The IO driver gofer's server runs with (`GOFER_IO`): `gofer-uring` is
/// the same server on the io_uring driver, and so is any `--server-bin`
/// whose name starts with `gofer-uring` or ends with `-uring` (an older
/// build not named gofer*, whose counters are not asked for); every other
/// name runs with epoll,
/// whatever the environment of the bench says.
fn gofer_io_of(server: &str) -> &'static str {
    if server.starts_with("gofer-uring") || server.ends_with("-uring") {
        "uring"
    } else {
        "epoll"
    }
}

/// `target/<profile>/examples/<name>` of `package` (a workspace member),
/// built first (a no-op when it is up to date) with the profile this bench
/// was built with.
fn example_bin((package, name): (&str, &str)) -> PathBuf {
    let exe = std::env::current_exe().expect("the bench's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the bench sits in target/<profile>/deps");
    let bin = profile_dir.join("examples").join(name);
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev",
        Some(_) => "release",
    };
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--quiet", "--profile", profile])
        .args(["-p", package, "--example", name])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .arg("--target-dir")
        .arg(profile_dir.parent().expect("target dir"))
        .status();
    assert!(
        bin.exists(),
        "{} is missing and cargo did not build it ({status:?})",
        bin.display()
    );
    bin
}

fn main() {
    let args = Args::parse();
    let nofile = raise_nofile();
    let need = args.connections.iter().max().copied().unwrap_or(0) as u64 * 2 + 64;
    if nofile < need {
        eprintln!("warning: open-file limit {nofile} is below the {need} descriptors needed");
    }
    let warmup = Duration::from_secs_f64(args.warmup);
    let duration = Duration::from_secs_f64(args.duration);
    let bins: Vec<(String, PathBuf)> = args
        .servers
        .iter()
        .map(|s| {
            let given = args
                .server_bins
                .iter()
                .find_map(|b| b.split_once('=').filter(|(name, _)| name == s));
            if let Some((_, path)) = given {
                return (s.clone(), PathBuf::from(path));
            }
            let ex = example_of(s).unwrap_or_else(|| panic!("unknown server `{s}`"));
            (s.clone(), example_bin(ex))
        })
        .collect();
    println!(
        "echo: {} B messages, {} server threads, client: 1 thread (tokio current_thread) in \
         this process; {:?} measured after {:?} of warm-up per run; 2-core machines: the client \
         competes with the server for the cores",
        args.size, args.threads, duration, warmup
    );
    println!("load average before: {}", load());
    common::print_header();
    let mut rows: Vec<(usize, &str, common::Row)> = Vec::new();
    for &n in &args.connections {
        for round in 0..args.rounds {
            let order: Vec<&(String, PathBuf)> = if round % 2 == 0 {
                bins.iter().collect()
            } else {
                bins.iter().rev().collect()
            };
            for (name, bin) in order {
                let mut cmd = Command::new(bin);
                cmd.args([
                    "--addr",
                    "127.0.0.1:0",
                    "--threads",
                    &args.threads.to_string(),
                ]);
                cmd.env("GOFER_IO", gofer_io_of(name));
                let row = common::run_row_with(
                    Server::start(cmd),
                    name,
                    n,
                    args.size,
                    warmup,
                    duration,
                    args.syscalls,
                    // gofer's example server, or a build of it named
                    // gofer* with `--server-bin` (it must answer SIGUSR1).
                    name.starts_with("gofer"),
                );
                rows.push((n, name, row));
            }
        }
    }
    if args.rounds > 1 {
        let baseline = args.baseline.clone().unwrap_or_else(|| {
            if args.servers.iter().any(|s| s == "tokio") {
                "tokio".into()
            } else {
                args.servers.last().cloned().unwrap_or_default()
            }
        });
        print_medians(&rows, &args.connections, &args.servers, &baseline);
    }
    println!("load average after: {}", load());
}

/// The median of `v` (not empty).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_unstable_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Each server's medians over the rounds, per connection count, with the
/// ratios of its round trips per second and CPU per round trip to
/// `baseline`'s.
fn print_medians(
    rows: &[(usize, &str, common::Row)],
    connections: &[usize],
    servers: &[String],
    baseline: &str,
) {
    println!();
    println!(
        "medians over the rounds; ratios against {baseline} (round trips/s higher is better, CPU per round trip lower)"
    );
    println!(
        "{:>11}  {:<6} {:>14} {:>9} {:>12} {:>13} {:>11} {:>14} {:>14} {:>12}",
        "connections",
        "server",
        "round trips/s",
        "p99",
        "server CPU",
        "CPU/round trip",
        "client CPU",
        "rate ratio",
        "CPU ratio",
        "cross/rt"
    );
    let of = |n: usize, s: &str, f: fn(&common::Row) -> f64| -> Option<f64> {
        let v: Vec<f64> = rows
            .iter()
            .filter(|(c, name, _)| *c == n && *name == s)
            .map(|(_, _, r)| f(r))
            .collect();
        (!v.is_empty()).then(|| median(v))
    };
    for &n in connections {
        let base_rate = of(n, baseline, |r| r.rate);
        let base_cpu = of(n, baseline, |r| r.cpu_per_trip_us);
        for s in servers {
            let (Some(rate), Some(p99), Some(cpu), Some(per), Some(client)) = (
                of(n, s, |r| r.rate),
                of(n, s, |r| r.p99_ms),
                of(n, s, |r| r.server_cpu),
                of(n, s, |r| r.cpu_per_trip_us),
                of(n, s, |r| r.client_cpu),
            ) else {
                continue;
            };
            let ratio =
                |a: f64, b: Option<f64>| b.map_or("-".to_string(), |b| format!("{:.2} x", a / b));
            let cross = of(n, s, |r| r.cross_per_trip).unwrap_or(f64::NAN);
            println!(
                "{n:>11}  {s:<6} {rate:>14.0} {p99:>7.3}ms {:>10.0} % {per:>11.2}us {:>9.0} % {:>14} {:>14} {:>12}",
                cpu * 100.0,
                client * 100.0,
                ratio(rate, base_rate),
                ratio(per, base_cpu),
                common::fmt_cross(cross),
            );
        }
    }
}
