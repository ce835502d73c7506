//! Echo round trips with `std::net::TcpStream` under the `hooks` feature,
//! next to the same server on `gofer::net::TcpStream`: the cost of running
//! std's blocking sockets unchanged.
//!
//! Run: `cargo bench -p gofer-bench --features hooks --bench echo_hooks`
//! (`-- --help` lists the flags).
//!
//! Both servers are this binary (built with the feature), re-run as a
//! child process with `--serve gofer` or `--serve std`: one task per
//! connection on a scheduler of `--threads` Processers, the same loop (read
//! up to 16 KiB, write it all back, 60 s read and write timeouts, no Nagle),
//! written once against `Read + Write`. Only the socket type differs. The
//! client and the table are `bench/benches/echo.rs`'s (`common/echo.rs`); the
//! servers alternate order from one round to the next.

#[path = "common/echo.rs"]
mod common;

use std::io::{self, Read, Write};
use std::process::Command;
use std::time::Duration;

use clap::Parser;
use common::{load, raise_nofile, Server};

#[derive(Parser, Debug)]
#[command(
    name = "echo_hooks",
    about = "Echo round trips per second: std::net under the hooks feature vs gofer::net."
)]
struct Args {
    /// Connection counts to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    connections: Vec<usize>,

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

    /// Runs of each server per connection count.
    #[arg(long, default_value_t = 2)]
    rounds: usize,

    /// Be the server: `gofer` or `std` (used by the bench itself).
    #[arg(long, hide = true)]
    serve: Option<String>,

    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

const IDLE: Duration = Duration::from_secs(60);

/// The connection loop both servers run.
fn echo<S: Read + Write>(mut stream: S) -> io::Result<()> {
    let mut buf = vec![0; 16 * 1024];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        stream.write_all(&buf[..n])?;
    }
}

fn serve(kind: &str, threads: usize) {
    assert!(gofer::hooks::enabled(), "build with --features hooks");
    let sched = gofer::Scheduler::builder()
        .name("echo")
        .min_threads(threads)
        .build()
        .expect("a scheduler");
    let accepter = match kind {
        "gofer" => {
            let l = gofer::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            println!("listening on {}", l.local_addr().unwrap());
            sched.spawn(move || loop {
                let (s, _) = l.accept().expect("accept");
                gofer::spawn(move || {
                    s.set_read_timeout(Some(IDLE))?;
                    s.set_write_timeout(Some(IDLE))?;
                    s.set_nodelay(true)?;
                    echo(s)
                });
            })
        }
        "std" => {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            println!("listening on {}", l.local_addr().unwrap());
            sched.spawn(move || loop {
                let (s, _) = l.accept().expect("accept");
                gofer::spawn(move || {
                    s.set_read_timeout(Some(IDLE))?;
                    s.set_write_timeout(Some(IDLE))?;
                    s.set_nodelay(true)?;
                    echo(s)
                });
            })
        }
        _ => panic!("unknown server `{kind}`"),
    };
    io::stdout().flush().expect("stdout");
    let _ = accepter.join(); // never returns: the server runs until killed
}

fn main() {
    let args = Args::parse();
    if let Some(kind) = &args.serve {
        serve(kind, args.threads);
        return;
    }
    let nofile = raise_nofile();
    let need = args.connections.iter().max().copied().unwrap_or(0) as u64 * 2 + 64;
    if nofile < need {
        eprintln!("warning: open-file limit {nofile} is below the {need} descriptors needed");
    }
    let warmup = Duration::from_secs_f64(args.warmup);
    let duration = Duration::from_secs_f64(args.duration);
    let exe = std::env::current_exe().expect("the bench's path");
    println!(
        "echo_hooks: {} B messages, {} server threads, servers: this binary with the hooks \
         feature, `gofer` = gofer::net::TcpStream, `std` = std::net::TcpStream; client: 1 thread \
         (tokio current_thread) in this process; {:?} measured after {:?} of warm-up per run",
        args.size, args.threads, duration, warmup
    );
    println!("load average before: {}", load());
    common::print_header();
    for &n in &args.connections {
        for round in 0..args.rounds {
            let order = if round % 2 == 0 {
                ["gofer", "std"]
            } else {
                ["std", "gofer"]
            };
            for kind in order {
                let mut cmd = Command::new(&exe);
                cmd.args(["--serve", kind, "--threads", &args.threads.to_string()]);
                common::run_row(Server::start(cmd), kind, n, args.size, warmup, duration);
            }
        }
    }
    println!("load average after: {}", load());
}
