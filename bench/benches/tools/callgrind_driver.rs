//! The driver behind the instruction counts in BENCHMARKS.md ("Hot paths",
//! "Bound tasks"): one scenario on a one-Processer scheduler, `N` times.
//! Run it under callgrind at two sizes and divide the difference of the
//! totals by the difference of the operation counts, which cancels start-up
//! and shutdown:
//!
//! ```sh
//! cargo build -p gofer-bench --release --example callgrind_driver
//! for n in 20000 40000; do
//!   valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/callgrind_driver yield $n 2>&1 | grep Collected
//! done
//! ```
//!
//! Scenarios (the operation counted in brackets):
//! - `yield N`: two tasks each yield `N` times (a yield: divide by `2 N`);
//! - `spawn N`: a task spawns `N` tasks, then joins them all (a spawn + join);
//! - `bursts N`: the same in bursts of 1,000 (a spawn + join), so that
//!   later bursts reuse what earlier ones freed;
//! - `chan N`: two tasks ping-pong `N` values over two unbounded channels
//!   (a round trip);
//! - `echo N`: 8 loopback TCP connections, each a client task that writes
//!   1 KiB and reads it back and a server task that echoes it, both with
//!   read and write timeouts, as `examples/echo_server.rs` does; `N` round
//!   trips in all (a round trip: the user-space instructions of the epoll
//!   path, the system calls themselves not counted).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, n) = match (
        args.first(),
        args.get(1).and_then(|n| n.parse::<usize>().ok()),
    ) {
        (Some(m), Some(n))
            if ["yield", "spawn", "bursts", "chan", "echo"].contains(&m.as_str()) =>
        {
            (m.clone(), n)
        }
        _ => {
            eprintln!("usage: callgrind_driver yield|spawn|bursts|chan|echo N");
            return ExitCode::from(2);
        }
    };
    let sched = gofer::Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .build()
        .expect("a one-Processer scheduler");
    match mode.as_str() {
        "yield" => {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    sched.spawn(move || {
                        for _ in 0..n {
                            gofer::yield_now();
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
        }
        "spawn" => sched.block_on(move || {
            let hs: Vec<_> = (0..n).map(|i| gofer::spawn(move || i)).collect();
            for h in hs {
                h.join().unwrap();
            }
        }),
        "bursts" => sched.block_on(move || {
            for _ in 0..n / 1000 {
                let hs: Vec<_> = (0..1000).map(|i| gofer::spawn(move || i)).collect();
                for h in hs {
                    h.join().unwrap();
                }
            }
        }),
        "echo" => sched.block_on(move || echo(n)),
        _ => {
            let (tx1, rx1) = gofer::chan::unbounded::<usize>();
            let (tx2, rx2) = gofer::chan::unbounded::<usize>();
            let a = sched.spawn(move || {
                for i in 0..n {
                    tx1.send(i).unwrap();
                    rx2.recv().unwrap();
                }
            });
            let b = sched.spawn(move || {
                for _ in 0..n {
                    let v = rx1.recv().unwrap();
                    tx2.send(v).unwrap();
                }
            });
            a.join().unwrap();
            b.join().unwrap();
        }
    }
    sched.shutdown();
    ExitCode::SUCCESS
}

/// The `echo` scenario: `n` round trips over `CONNS` connections.
fn echo(n: usize) {
    use std::io::{Read, Write};
    use std::time::Duration;
    const CONNS: usize = 8;
    const SIZE: usize = 1024;
    let timeout = Some(Duration::from_secs(60));
    let listener = gofer::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("its address");
    let mut hs = Vec::new();
    for k in 0..CONNS {
        let mut c = gofer::net::TcpStream::connect(addr).expect("connect");
        let (mut s, _) = listener.accept().expect("accept");
        for t in [&c, &s] {
            t.set_read_timeout(timeout).unwrap();
            t.set_write_timeout(timeout).unwrap();
            t.set_nodelay(true).unwrap();
        }
        hs.push(gofer::spawn(move || {
            let mut buf = vec![0; 16 * 1024];
            loop {
                let got = s.read(&mut buf).unwrap();
                if got == 0 {
                    return;
                }
                s.write_all(&buf[..got]).unwrap();
            }
        }));
        let trips = n / CONNS + usize::from(k < n % CONNS);
        hs.push(gofer::spawn(move || {
            let out = vec![7u8; SIZE];
            let mut back = vec![0u8; SIZE];
            for _ in 0..trips {
                c.write_all(&out).unwrap();
                c.read_exact(&mut back).unwrap();
            }
        }));
    }
    for h in hs {
        h.join().unwrap();
    }
}
