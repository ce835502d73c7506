//! Echo round trips: N connections each send a message of 1 KiB and wait for
//! it to come back, over and over, against gofer's `examples/echo_server.rs`
//! and its peers on tokio and may (`benches/servers/echo_*.rs`), each run as
//! its own process with the same thread count, one after the other.
//!
//! Run: `cargo bench --bench echo` (or through `scripts/http_bench.sh`);
//! `cargo bench --bench echo -- --help` lists the flags.
//!
//! The client is this process: one thread (a tokio current-thread runtime)
//! driving every connection. On a 2-core machine it competes with the
//! server's threads for the cores, so a figure measures the pair; the
//! servers' own CPU time is printed beside it. Every echoed message is
//! checked byte for byte. A round trip counts if it started after the
//! warm-up and ended before the run's end; latency is from the first byte
//! written to the last byte read.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Parser, Debug)]
#[command(
    name = "echo",
    about = "Echo round trips per second: gofer, tokio and may servers."
)]
struct Args {
    /// Connection counts to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    connections: Vec<usize>,

    /// Servers to run, comma-separated, in this order.
    #[arg(long, value_delimiter = ',', default_value = "gofer,tokio,may")]
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

    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The example binary of each server name.
fn example_of(server: &str) -> Option<&'static str> {
    match server {
        "gofer" => Some("echo_server"),
        "tokio" => Some("peer_echo_tokio"),
        "may" => Some("peer_echo_may"),
        _ => None,
    }
}

/// `target/<profile>/examples/<name>`, built first (a no-op when it is up to
/// date) with the profile this bench was built with.
fn example_bin(name: &str) -> PathBuf {
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
        .args(["build", "--quiet", "--example", name, "--profile", profile])
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

/// A server process, killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(bin: &Path, threads: usize) -> Server {
        let mut child = Command::new(bin)
            .args(["--addr", "127.0.0.1:0", "--threads", &threads.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("the server's first line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "{}: expected `listening on ADDR`, got {line:?}",
                    bin.display()
                )
            });
        Server { child, addr }
    }

    /// User + system CPU time the server has used.
    fn cpu(&self) -> Duration {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<u64> = rest
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|v| v.parse().ok())
            .collect();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        Duration::from_secs_f64(f.iter().sum::<u64>() as f64 / hz)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one run measured.
struct Run {
    round_trips: u64,
    latencies_us: Vec<u32>,
    errors: u64,
}

/// Drives `n` connections to `addr` for `warmup + duration`.
fn client(addr: SocketAddr, n: usize, size: usize, warmup: Duration, duration: Duration) -> Run {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async move {
        let mut conns = Vec::with_capacity(n);
        for _ in 0..n {
            let s = tokio::net::TcpStream::connect(addr).await.expect("connect");
            s.set_nodelay(true).expect("nodelay");
            conns.push(s);
        }
        let from = Instant::now() + warmup;
        let until = from + duration;
        let tasks: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(i, mut s)| {
                tokio::spawn(async move {
                    let msg: Vec<u8> = (0..size).map(|j| (i + j) as u8).collect();
                    let mut back = vec![0; size];
                    let (mut done, mut lat) = (0u64, Vec::new());
                    loop {
                        let t0 = Instant::now();
                        if t0 >= until {
                            return Ok((done, lat));
                        }
                        s.write_all(&msg).await?;
                        s.read_exact(&mut back).await?;
                        let t1 = Instant::now();
                        if back != msg {
                            return Err(std::io::Error::other("echoed bytes differ"));
                        }
                        if t0 >= from && t1 <= until {
                            done += 1;
                            lat.push((t1 - t0).as_micros().min(u32::MAX as u128) as u32);
                        }
                    }
                })
            })
            .collect();
        let mut run = Run {
            round_trips: 0,
            latencies_us: Vec::new(),
            errors: 0,
        };
        for t in tasks {
            match t.await.expect("a client task") {
                Ok((done, lat)) => {
                    run.round_trips += done;
                    run.latencies_us.extend(lat);
                }
                Err(e) => {
                    run.errors += 1;
                    if run.errors == 1 {
                        eprintln!("connection failed: {e}");
                    }
                }
            }
        }
        run
    })
}

/// Raises the soft limit on open files to the hard one (a thousand
/// connections need a descriptor at each end); the servers inherit it.
fn raise_nofile() -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: get/setrlimit with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
    l.rlim_cur
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
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
    println!(
        "{:>11}  {:<6} {:>14} {:>9} {:>9} {:>12} {:>7}",
        "connections", "server", "round trips/s", "p50", "p99", "server CPU", "errors"
    );
    for &n in &args.connections {
        for (name, bin) in &bins {
            let server = Server::start(bin, args.threads);
            let cpu0 = server.cpu();
            let t = Instant::now();
            let mut run = client(server.addr, n, args.size, warmup, duration);
            let cpu = server.cpu().saturating_sub(cpu0).as_secs_f64() / t.elapsed().as_secs_f64();
            drop(server);
            run.latencies_us.sort_unstable();
            let q = |p: f64| {
                run.latencies_us
                    .get(((run.latencies_us.len() as f64 - 1.0) * p).round() as usize)
                    .map_or(f64::NAN, |&v| v as f64 / 1000.0)
            };
            println!(
                "{n:>11}  {name:<6} {:>14.0} {:>7.3}ms {:>7.3}ms {:>10.0} % {:>7}",
                run.round_trips as f64 / duration.as_secs_f64(),
                q(0.5),
                q(0.99),
                cpu * 100.0,
                run.errors
            );
        }
    }
    println!("load average after: {}", load());
}
