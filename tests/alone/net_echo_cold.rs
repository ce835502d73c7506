//! A cold echo: thousands of connections on a fresh scheduler, in a fresh
//! process, must never make the Dispatcher judge a Processer blocked.
//!
//! Each round runs in a child process of its own, so that every round is
//! cold: no stack mapped yet, the allocator's arenas not grown, no page of
//! the heap touched.

use crate::common;
use crate::net_common;

use std::io::{Read, Write};
use std::time::Duration;

use gofer::net::{TcpListener, TcpStream};
use gofer::Scheduler;

/// Connections per round: 2,000 clients and 2,000 server tasks.
const CONNECTIONS: usize = 2000;
/// Bytes each client writes and reads back per exchange.
const MESSAGE: usize = 16 * 1024;
/// Exchanges per connection.
const EXCHANGES: usize = 4;
/// Cold rounds, each in a fresh process.
const ROUNDS: usize = 4;

const CHILD: &str = "cold-echo";

/// One cold round, in the child: `CONNECTIONS` clients each echo
/// `EXCHANGES` messages of `MESSAGE` bytes through their own server task,
/// on a fresh two-thread scheduler. Prints its stats as a `figure:` line.
fn cold_round() {
    let limit = net_common::raise_nofile_limit(2 * CONNECTIONS as u64 + 256);
    assert!(
        limit >= 2 * CONNECTIONS as u64 + 64,
        "descriptor limit {limit} is too low for {CONNECTIONS} connections"
    );
    // The one cold cost that is a real block: a `socket` or `accept` that
    // needs a larger descriptor table sleeps in the kernel (`expand_files`
    // waits for an RCU grace period once the process has threads), on both
    // Processers at once. The Dispatcher is right to call that blocked;
    // the scheduler sizes the table at build instead (its default
    // `reserve_descriptors` is the soft limit raised above), as a server's
    // would.
    let sched = Scheduler::builder()
        .min_threads(2)
        .build()
        .expect("valid config");
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
    let st = sched.stats();
    sched.shutdown();
    println!(
        "figure: cold echo of {CONNECTIONS} connections: blocked_detections {}, \
         tasks_rescued {}, threads_started {}",
        st.blocked_detections, st.tasks_rescued, st.threads_started
    );
    assert_eq!(st.completed, 2 * CONNECTIONS as u64 + 1, "{st:?}");
    assert_eq!(
        st.blocked_detections, 0,
        "a Processer was judged blocked during a cold echo: {st:?}"
    );
}

/// A fresh scheduler in a fresh process echoes 16 KiB four times over each
/// of 2,000 connections (2,000 client and 2,000 server tasks on two
/// Processers): no Processer is ever judged blocked. Several rounds, each
/// in its own process.
#[test]
#[ignore = "a glibc arena-lock wait behind a preempted thread is still counted in about 3 rounds in 40 (ARCHITECTURE.md, The Dispatcher)"]
fn cold_echo_of_two_thousand_connections_never_counts_a_blocked_processer() {
    let _turn = crate::one_at_a_time();
    if common::child_scenario().as_deref() == Some(CHILD) {
        cold_round();
        println!("CHILD-OK {CHILD}");
        return;
    }
    let test = "cold_echo_of_two_thousand_connections_never_counts_a_blocked_processer";
    for round in 0..ROUNDS {
        let out =
            common::run_child_watched(module_path!(), test, CHILD, &[], Duration::from_secs(120))
                .unwrap_or_else(|| panic!("round {round} hung: the child was killed"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("CHILD-OK {CHILD}")),
            "round {round}: {}",
            common::describe(&out)
        );
        for line in stdout.lines() {
            if let Some(at) = line.find("figure:") {
                println!("round {round}: {}", &line[at..]);
            }
        }
    }
}
