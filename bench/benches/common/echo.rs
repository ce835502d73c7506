//! The parts of the echo benchmarks shared by `echo.rs` (gofer's example
//! server and its peers) and `echo_hooks.rs` (std's sockets under the
//! `hooks` feature): the server process, the client, and the table.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A gofer server's `(cross_wakeups, switches)`, if it printed them.
type Counters = Option<(u64, u64)>;

/// A server process, killed when dropped.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// The rest of the server's output, read by [`counters`](Server::counters).
    out: Arc<Mutex<BufReader<ChildStdout>>>,
}

impl Server {
    /// Starts `cmd` (a server that prints `listening on ADDR` first).
    pub fn start(mut cmd: Command) -> Server {
        let what = format!("{:?}", cmd.get_program());
        let mut child = cmd
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        out.read_line(&mut line).expect("the server's first line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("{what}: expected `listening on ADDR`, got {line:?}"));
        Server {
            child,
            addr,
            out: Arc::new(Mutex::new(out)),
        }
    }

    /// A gofer example server's counters, asked for with SIGUSR1
    /// (`examples/common/server.rs`): `(cross_wakeups, switches)`, or
    /// `None` from a server that does not print them.
    fn counters_of(pid: u32, out: &Mutex<BufReader<ChildStdout>>) -> Counters {
        // SAFETY: kill with a pid of our own child.
        unsafe { libc::kill(pid as i32, libc::SIGUSR1) };
        let mut line = String::new();
        out.lock().ok()?.read_line(&mut line).ok()?;
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["stats:", "cross_wakeups", c, "switches", s] => {
                Some((c.parse().ok()?, s.parse().ok()?))
            }
            _ => None,
        }
    }

    /// User + system CPU time the server has used.
    pub fn cpu(&self) -> Duration {
        process_cpu(self.child.id())
    }
}

/// User + system CPU time process `pid` has used (all its threads), from
/// `/proc/PID/stat` (clock-tick resolution).
pub fn process_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
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

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one run measured.
pub struct Run {
    pub round_trips: u64,
    /// The server's CPU time over the measured window (from the end of the
    /// warm-up to the end of the run): the connecting and the warm-up
    /// before it are not counted.
    pub server_cpu: Duration,
    /// The client thread's CPU time over the same window: near a whole
    /// core, the rate is the client's limit, not the server's.
    pub client_cpu: Duration,
    pub latencies_us: Vec<u32>,
    /// Each connection's mean latency, in µs (connections with a round
    /// trip in the window).
    pub conn_means_us: Vec<f64>,
    pub errors: u64,
}

/// Drives `n` connections to `addr` for `warmup + duration`, once they are
/// all connected; `server_cpu` reads the server's CPU time, at the start
/// and at the end of the measured window.
pub fn client(
    addr: SocketAddr,
    server_cpu: impl Fn() -> Duration + Send + 'static,
    n: usize,
    size: usize,
    warmup: Duration,
    duration: Duration,
) -> Run {
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
        let window = tokio::spawn(async move {
            tokio::time::sleep_until(from.into()).await;
            let (cpu0, own0) = (server_cpu(), thread_cpu());
            tokio::time::sleep_until(until.into()).await;
            (
                server_cpu().saturating_sub(cpu0),
                thread_cpu().saturating_sub(own0),
            )
        });
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
            server_cpu: Duration::ZERO,
            client_cpu: Duration::ZERO,
            latencies_us: Vec::new(),
            conn_means_us: Vec::new(),
            errors: 0,
        };
        for t in tasks {
            match t.await.expect("a client task") {
                Ok((done, lat)) => {
                    if !lat.is_empty() {
                        let sum: f64 = lat.iter().map(|&l| f64::from(l)).sum();
                        run.conn_means_us.push(sum / lat.len() as f64);
                    }
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
        (run.server_cpu, run.client_cpu) = window.await.expect("the CPU window task");
        run
    })
}

/// The calling thread's CPU time (the client runtime runs on one thread:
/// the window task reads it there).
fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec the caller owns.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Raises the soft limit on open files to the hard one (a thousand
/// connections need a descriptor at each end); the servers inherit it.
pub fn raise_nofile() -> u64 {
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

pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Prints the table's header.
pub fn print_header() {
    println!(
        "{:>11}  {:<6} {:>14} {:>9} {:>9} {:>12} {:>13} {:>11} {:>7} {:>12}",
        "connections",
        "server",
        "round trips/s",
        "p50",
        "p99",
        "server CPU",
        "CPU/round trip",
        "client CPU",
        "errors",
        "cross/rt"
    );
}

/// A cross-Processer wake-up count per round trip, or `-` where the
/// server does not report one.
pub fn fmt_cross(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else {
        format!("{v:.3}")
    }
}

/// Drives `n` connections to `server`, then stops it and prints the row.
pub fn run_row(
    server: Server,
    name: &str,
    n: usize,
    size: usize,
    warmup: Duration,
    duration: Duration,
) {
    run_row_with(server, name, n, size, warmup, duration, false, false);
}

/// The system calls `perf stat` counts on the server with
/// `--syscalls`: every entry, then the ones an echo server makes.
const SYSCALL_EVENTS: &[&str] = &[
    "raw_syscalls:sys_enter",
    "syscalls:sys_enter_recvfrom",
    "syscalls:sys_enter_sendto",
    "syscalls:sys_enter_read",
    "syscalls:sys_enter_write",
    "syscalls:sys_enter_epoll_wait",
    "syscalls:sys_enter_epoll_pwait",
    "syscalls:sys_enter_epoll_pwait2",
    "syscalls:sys_enter_io_uring_enter",
    "syscalls:sys_enter_futex",
    "syscalls:sys_enter_sched_yield",
];

/// `perf stat` attached to the server over the measured window.
struct SyscallCount {
    pid: u32,
    out: std::path::PathBuf,
    perf: std::sync::Mutex<Option<Child>>,
}

impl SyscallCount {
    /// Starts `perf stat` on the first call, stops it on the second.
    fn toggle(&self) {
        let mut perf = self.perf.lock().expect("perf's lock");
        match perf.take() {
            None => {
                let child = Command::new("perf")
                    .args(["stat", "-x,", "-e", &SYSCALL_EVENTS.join(","), "-p"])
                    .arg(self.pid.to_string())
                    .arg("-o")
                    .arg(&self.out)
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("perf (linux-perf) to count system calls");
                *perf = Some(child);
            }
            Some(mut child) => {
                // SAFETY: kill with a pid of our own child.
                unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
                let _ = child.wait();
            }
        }
    }

    /// The counts `perf` wrote: (event, count) in `SYSCALL_EVENTS` order.
    fn counts(&self) -> Vec<(String, u64)> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let _ = std::fs::remove_file(&self.out);
        text.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                let count = f.first()?.parse().ok()?;
                let event = f
                    .get(2)?
                    .rsplit(':')
                    .next()?
                    .trim_start_matches("sys_enter_");
                Some((event.to_string(), count))
            })
            .collect()
    }
}

/// [`run_row`], and with `syscalls` the server's system calls per round
/// trip over the measured window and the spread of the connections' mean
/// latencies (`perf stat` on the tracepoints; they
/// cost the server some CPU, so the row's CPU figures are not comparable
/// to a run without them). With `counters`, the server is one of gofer's
/// example servers, which print their counters on SIGUSR1 (any other
/// server would die of it): the row adds its cross-Processer wake-ups per
/// round trip.
/// One printed row's figures, for a summary over rounds.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    /// Round trips per second.
    pub rate: f64,
    /// Latency percentiles, ms.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The server's and the client's share of a core.
    pub server_cpu: f64,
    pub client_cpu: f64,
    /// The server's CPU time per round trip, µs.
    pub cpu_per_trip_us: f64,
    /// Wake-ups a readiness poll delivered to a task bound to another
    /// Processer, per round trip (`Stats::cross_wakeups`): gofer's servers
    /// only (NaN for the others).
    pub cross_per_trip: f64,
}

#[allow(clippy::too_many_arguments)] // the figures of one row, each its own knob
pub fn run_row_with(
    server: Server,
    name: &str,
    n: usize,
    size: usize,
    warmup: Duration,
    duration: Duration,
    syscalls: bool,
    counters: bool,
) -> Row {
    let pid = server.child.id();
    let count = std::sync::Arc::new(SyscallCount {
        pid,
        out: std::env::temp_dir().join(format!("echo-syscalls-{}-{pid}", std::process::id())),
        perf: std::sync::Mutex::new(None),
    });
    let counter = count.clone();
    // With `counters` (a gofer example server), its counters at the
    // window's start and end.
    let gofer = counters;
    let marks: Arc<Mutex<Vec<Counters>>> = Arc::default();
    let (out, marks2) = (server.out.clone(), marks.clone());
    let mut run = client(
        server.addr,
        move || {
            let cpu = process_cpu(pid);
            if syscalls {
                counter.toggle();
            }
            if gofer {
                let c = Server::counters_of(pid, &out);
                marks2.lock().expect("marks").push(c);
            }
            cpu
        },
        n,
        size,
        warmup,
        duration,
    );
    // The server's share of a core over the measured window.
    let cpu = run.server_cpu.as_secs_f64() / duration.as_secs_f64();
    drop(server);
    run.latencies_us.sort_unstable();
    let q = |p: f64| {
        run.latencies_us
            .get(((run.latencies_us.len() as f64 - 1.0) * p).round() as usize)
            .map_or(f64::NAN, |&v| v as f64 / 1000.0)
    };
    let rate = run.round_trips as f64 / duration.as_secs_f64();
    // The server's CPU time per round trip: steadier than the rate on a
    // shared machine, since it does not count the time the server waited.
    let per_trip_us = cpu * 1e6 / rate;
    let cross_per_trip = match marks.lock().expect("marks").as_slice() {
        [Some((c0, _)), Some((c1, _))] => (c1 - c0) as f64 / run.round_trips.max(1) as f64,
        _ => f64::NAN,
    };
    let row = Row {
        rate,
        p50_ms: q(0.5),
        p99_ms: q(0.99),
        server_cpu: cpu,
        client_cpu: run.client_cpu.as_secs_f64() / duration.as_secs_f64(),
        cpu_per_trip_us: per_trip_us,
        cross_per_trip,
    };
    println!(
        "{n:>11}  {name:<6} {rate:>14.0} {:>7.3}ms {:>7.3}ms {:>10.0} % {per_trip_us:>11.2}us {:>9.0} % {:>7} {:>12}",
        q(0.5),
        q(0.99),
        cpu * 100.0,
        run.client_cpu.as_secs_f64() / duration.as_secs_f64() * 100.0,
        run.errors,
        fmt_cross(cross_per_trip),
    );
    if syscalls {
        // How evenly the connections were served: the spread of their
        // mean latencies (a tail made by a few slow connections shows as
        // a high maximum; one made by every connection now and then, not).
        run.conn_means_us.sort_unstable_by(f64::total_cmp);
        let m = &run.conn_means_us;
        let at = |p: f64| {
            m.get(((m.len() as f64 - 1.0) * p).round() as usize)
                .map_or(f64::NAN, |&v| v / 1000.0)
        };
        println!(
            "{:>11}  {name:<6} per-connection mean latency: min {:.3}ms, median {:.3}ms, p90 {:.3}ms, max {:.3}ms",
            "",
            at(0.0),
            at(0.5),
            at(0.9),
            at(1.0)
        );
        let per: Vec<String> = count
            .counts()
            .iter()
            .filter(|(_, c)| *c > 0)
            .map(|(e, c)| format!("{e} {:.2}", *c as f64 / run.round_trips.max(1) as f64))
            .collect();
        println!(
            "{:>11}  {name:<6} system calls per round trip: {}",
            "",
            per.join(", ")
        );
    }
    row
}
