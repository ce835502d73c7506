//! One cold burst of connections on a fresh two-thread scheduler, in this
//! fresh process, and the Dispatcher's count of blocked Processers
//! (`scripts/cold_burst.sh` runs it many times; BENCHMARKS.md, "Cold
//! bursts").
//!
//! ```sh
//! cargo run -p gofer-bench --release --example cold_burst -- --scenario net
//! cargo run -p gofer-bench --release --features hooks --example cold_burst -- --scenario hooks
//! ```
//!
//! - `net`: 2,000 `gofer::net` clients each echo 16 KiB four times through
//!   a server task of their own (the round of `tests/alone/net_echo_cold.rs`);
//! - `hooks` (needs the `hooks` feature): 1,000 tasks each echo three short
//!   messages through `std::net::TcpStream`, served by 1,000 tasks on std's
//!   listener and streams (the scenario of `tests/hooks/hooks_std.rs`).
//!
//! The soft `RLIMIT_NOFILE` limit is raised to what the burst needs first,
//! as a server would; `--reserve` is the scheduler's
//! `reserve_descriptors` (0: the descriptor table is left to grow as
//! descriptors are opened; unset: the default). Prints one line:
//! `blocked_detections N tasks_rescued N threads_started N ms N`. Exit
//! status 0 when every byte came back, 2 for a bad argument.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use gofer::Scheduler;

/// The burst to run.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Scenario {
    /// 2,000 `gofer::net` connections echoing 16 KiB four times.
    Net,
    /// 1,000 tasks echoing through std's `TcpStream` (`hooks` feature).
    Hooks,
}

/// Options of the cold burst.
#[derive(Parser, Debug)]
#[command(name = "cold_burst", about = "One cold burst of connections.")]
struct Args {
    /// Which burst.
    #[arg(long, value_enum)]
    scenario: Scenario,

    /// The scheduler's `reserve_descriptors`; the default when not given.
    #[arg(long)]
    reserve: Option<usize>,
}

/// Raises the soft `RLIMIT_NOFILE` limit to `want` (at most the hard one).
fn raise_nofile_limit(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into a live local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 && lim.rlim_cur < want {
        lim.rlim_cur = want.min(lim.rlim_max);
        // SAFETY: setrlimit reads one rlimit from a live local.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    }
}

/// The `gofer::net` burst.
fn net(sched: &Scheduler) {
    use gofer::net::{TcpListener, TcpStream};
    const CONNECTIONS: usize = 2000;
    const MESSAGE: usize = 16 * 1024;
    const EXCHANGES: usize = 4;
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback listener");
    let addr = l.local_addr().expect("local_addr");
    let server = sched.spawn(move || {
        let echoes: Vec<_> = (0..CONNECTIONS)
            .map(|_| {
                let (mut st, _) = l.accept().expect("accept");
                gofer::go!(move || {
                    let mut buf = vec![0u8; MESSAGE];
                    loop {
                        match st.read(&mut buf) {
                            Ok(0) => return,
                            Ok(k) => st.write_all(&buf[..k]).expect("echo back"),
                            Err(e) => panic!("echo read: {e}"),
                        }
                    }
                })
            })
            .collect();
        for e in echoes {
            e.join().expect("echo task");
        }
    });
    let clients: Vec<_> = (0..CONNECTIONS)
        .map(|i| {
            sched.spawn(move || {
                let mut c = TcpStream::connect(addr).expect("connect");
                let mut msg = vec![0u8; MESSAGE];
                let mut back = vec![0u8; MESSAGE];
                for x in 0..EXCHANGES {
                    msg.iter_mut()
                        .enumerate()
                        .for_each(|(j, b)| *b = (i + j + x) as u8);
                    c.write_all(&msg).expect("send");
                    c.read_exact(&mut back).expect("receive the echo");
                    assert!(msg == back, "connection {i} exchange {x}");
                }
            })
        })
        .collect();
    for c in clients {
        c.join().expect("client task");
    }
    server.join().expect("acceptor and echo tasks");
}

/// The std burst (the hooks park the tasks).
fn hooks(sched: &Scheduler) {
    use std::net::{TcpListener, TcpStream};
    const TASKS: usize = 1000;
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local_addr");
    let server = sched.spawn(move || {
        let conns: Vec<_> = (0..TASKS)
            .map(|_| {
                let (mut c, _) = listener.accept().expect("accept");
                gofer::spawn(move || {
                    let mut buf = [0u8; 256];
                    let mut total = 0u64;
                    loop {
                        let n = c.read(&mut buf).expect("echo read");
                        if n == 0 {
                            return total;
                        }
                        c.write_all(&buf[..n]).expect("echo back");
                        total += n as u64;
                    }
                })
            })
            .collect();
        conns
            .into_iter()
            .map(|h| h.join().expect("echo task"))
            .sum::<u64>()
    });
    let clients: Vec<_> = (0..TASKS)
        .map(|i| {
            sched.spawn(move || {
                let mut c = TcpStream::connect(addr).expect("connect");
                let mut sent = 0u64;
                for round in 0..3 {
                    let msg = format!("task {i} round {round} ").repeat(4);
                    c.write_all(msg.as_bytes()).expect("write");
                    let mut back = vec![0; msg.len()];
                    c.read_exact(&mut back).expect("read");
                    assert_eq!(back, msg.as_bytes(), "task {i} got another's bytes");
                    sent += msg.len() as u64;
                }
                sent
            })
        })
        .collect();
    let sent: u64 = clients
        .into_iter()
        .map(|h| h.join().expect("client task"))
        .sum();
    assert_eq!(server.join().expect("server"), sent, "every byte came back");
}

fn main() -> ExitCode {
    let args = Args::parse();
    if matches!(args.scenario, Scenario::Hooks) && !gofer::hooks::enabled() {
        eprintln!("cold_burst: --scenario hooks needs --features hooks");
        return ExitCode::from(2);
    }
    raise_nofile_limit(8192);
    let mut b = Scheduler::builder().min_threads(2).max_threads(8);
    if let Some(n) = args.reserve {
        b = b.reserve_descriptors(n);
    }
    let sched = match b.build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cold_burst: {e}");
            return ExitCode::from(2);
        }
    };
    let t = Instant::now();
    match args.scenario {
        Scenario::Net => net(&sched),
        Scenario::Hooks => hooks(&sched),
    }
    let took = t.elapsed();
    let st = sched.stats();
    sched.shutdown();
    println!(
        "blocked_detections {} tasks_rescued {} threads_started {} ms {}",
        st.blocked_detections,
        st.tasks_rescued,
        st.threads_started,
        took.as_millis()
    );
    ExitCode::SUCCESS
}
