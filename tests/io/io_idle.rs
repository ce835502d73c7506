//! An idle scheduler with open sockets and no traffic costs (almost) no
//! CPU: no fixed-interval polling anywhere.
//!
//! Measured in a child process, so that the other tests of this binary do
//! not count: the process's CPU time (user + system, `getrusage`) over one
//! second with every task parked.

use crate::common;
use crate::net_common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::{child_scenario, describe, run_child_watched};
use gofer::net::{TcpListener, TcpStream};
use gofer::Scheduler;
use net_common::{process_cpu_time, raise_nofile_limit, wait_parked};

const CONNECTIONS: usize = 1000;
const WINDOW: Duration = Duration::from_secs(1);
/// 5 % of a core over the window; the goal is 0.5 %.
const BOUND: Duration = Duration::from_millis(50);

const TEST: &str = "an_idle_scheduler_with_open_sockets_uses_almost_no_cpu";

#[test]
fn an_idle_scheduler_with_open_sockets_uses_almost_no_cpu() {
    if child_scenario().as_deref() == Some("idle") {
        idle_scenario();
        return;
    }
    let out = run_child_watched(module_path!(), TEST, "idle", &[], Duration::from_secs(120))
        .unwrap_or_else(|| panic!("the child hung (killed by the watchdog)"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("CHILD-OK"),
        "{}",
        describe(&out)
    );
    // The child's report follows libtest's "test ... " on the same line.
    for line in stdout
        .lines()
        .filter_map(|l| l.find("idle:").map(|i| &l[i..]))
    {
        eprintln!("{line}");
    }
}

fn idle_scenario() {
    let limit = raise_nofile_limit(2 * CONNECTIONS as u64 + 256) as usize;
    let n = CONNECTIONS.min(limit.saturating_sub(256) / 2);
    let s = Scheduler::builder()
        .min_threads(2)
        .max_threads(4)
        .name("idle")
        .build()
        .unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    // Server side: an echo task per connection, parked in read.
    let server = s.spawn(move || {
        (0..n)
            .map(|_| {
                let (mut c, _) = l.accept().unwrap();
                gofer::spawn(move || {
                    let mut buf = [0u8; 64];
                    while let Ok(k @ 1..) = c.read(&mut buf) {
                        c.write_all(&buf[..k]).unwrap();
                    }
                })
            })
            .collect::<Vec<_>>()
    });
    // Client side: a task per connection, parked reading too.
    let (go_tx, go_rx) = gofer::chan::unbounded::<()>();
    let clients: Vec<_> = (0..n)
        .map(|_| {
            let go_rx = go_rx.clone();
            s.spawn(move || {
                let mut c = TcpStream::connect(addr).unwrap();
                // Wait on a channel, then send and read the echo.
                go_rx.recv().unwrap();
                c.write_all(b"ping").unwrap();
                let mut b = [0u8; 4];
                c.read_exact(&mut b).unwrap();
                assert_eq!(&b, b"ping");
            })
        })
        .collect();
    let echoes = server.join().unwrap();
    // And a timed wait far in the future: idle with a timer pending.
    let (tick_tx, tick_rx) = gofer::chan::bounded::<()>(1);
    let timed = s.spawn(move || tick_rx.recv_timeout(Duration::from_secs(3600)).is_ok());
    wait_parked(&s, "every task parks");
    let cpu0 = process_cpu_time();
    let t0 = Instant::now();
    // Time is the subject: wait it out.
    std::thread::sleep(WINDOW);
    let used = process_cpu_time() - cpu0;
    let wall = t0.elapsed();
    let st = s.stats();
    println!(
        "idle: {n} idle connections ({} tasks parked, 1 timed wait) on 2 Processers: \
         {used:?} of CPU in {wall:?} ({:.3} % of a core)",
        st.alive,
        used.as_secs_f64() * 100.0 / wall.as_secs_f64()
    );
    assert!(used < BOUND, "{used:?} of CPU while idle");
    // Everything still works after the idle spell.
    for _ in 0..n {
        go_tx.send(()).unwrap();
    }
    for c in clients {
        c.join().unwrap();
    }
    for e in echoes {
        e.join().unwrap();
    }
    tick_tx.send(()).unwrap();
    assert!(timed.join().unwrap());
    s.shutdown();
    println!("CHILD-OK");
}
