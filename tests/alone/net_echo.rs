//! Echo at scale: thousands of connections served by tasks on two
//! Processers, with no thread ever judged blocked.
//!
//! Alone on the machine (the `alone` binary, its tests taking turns):
//! tests running beside it would share its two CPUs and the kernel's
//! socket locks, and a thread waiting in the kernel for a lock that a
//! preempted thread holds is, rightly, a blocked thread.

use crate::net_common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;

use gofer::net::{TcpListener, TcpStream};
use gofer::Scheduler;
use net_common::raise_nofile_limit;

fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback listener");
    let a = l.local_addr().expect("local_addr");
    (l, a)
}

/// Connections the echo test opens: 4,000, or fewer when the descriptor
/// limit cannot be raised that far (each connection costs two descriptors).
fn echo_connections() -> usize {
    const WANT: usize = 4000;
    let limit = raise_nofile_limit(2 * WANT as u64 + 256) as usize;
    let n = WANT.min(limit.saturating_sub(256) / 2);
    if n < WANT {
        eprintln!("descriptor limit {limit}: echo test sized to {n} connections");
    }
    n
}

/// Grows this process's descriptor table to hold `fds` descriptors now.
///
/// Growing it later, from a task, would block that task's thread in the
/// kernel (`expand_fdtable` waits for an RCU grace period, milliseconds
/// on this VM), and the Dispatcher would rightly count a blocked thread
/// that has nothing to do with gofer's IO.
fn grow_descriptor_table(fds: usize) {
    let high = fds as libc::c_int;
    // SAFETY: duplicates stdin onto an unused high number and closes that
    // number again; the table keeps its size.
    unsafe {
        if libc::dup2(0, high) == high {
            libc::close(high);
        }
    }
}

/// One round: `n` clients connect, wait until all `n` connections are
/// open, then each echoes `ROUNDS` 1 KiB messages; every echo task ends at
/// its client's end of stream.
fn echo_round(s: &Scheduler, n: usize) {
    const ROUNDS: usize = 4;
    let (l, addr) = listener();
    let server = s.spawn(move || {
        let echoes: Vec<_> = (0..n)
            .map(|_| {
                let (st, _) = l.accept().expect("accept");
                gofer::go!(move || {
                    let mut st = st;
                    let mut buf = [0u8; 1024];
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
    let all_open = Arc::new(gofer::sync::Barrier::new(n));
    let clients: Vec<_> = (0..n)
        .map(|i| {
            let all_open = all_open.clone();
            s.spawn(move || {
                let mut c = TcpStream::connect(addr).expect("connect");
                all_open.wait();
                let mut msg = [0u8; 1024];
                let mut back = [0u8; 1024];
                for round in 0..ROUNDS {
                    msg.iter_mut()
                        .enumerate()
                        .for_each(|(j, b)| *b = (i + j + round) as u8);
                    c.write_all(&msg).expect("send");
                    c.read_exact(&mut back).expect("receive the echo");
                    assert_eq!(msg, back, "connection {i} round {round}");
                }
            })
        })
        .collect();
    for c in clients {
        c.join().expect("client task");
    }
    server.join().expect("acceptor and echo tasks");
}

/// Thousands of connections open at once, each echoing a few 1 KiB
/// messages, all served by tasks on two Processers: no task held its
/// thread long enough to be judged blocked, and no extra thread started.
///
/// The first round warms the process up (stacks mapped and pooled, the
/// allocator's arenas grown); the Dispatcher can rightly judge a thread
/// blocked there, waiting in the kernel for an arena lock that a thread
/// growing its heap holds, which is not gofer's IO. The second round, on
/// a warm process, must see no blocked thread at all.
#[test]
fn echo_with_thousands_of_connections_on_two_threads_never_blocks_a_thread() {
    let _turn = crate::one_at_a_time();
    let n = echo_connections();
    grow_descriptor_table(2 * n + 128);
    let s = Scheduler::builder()
        .min_threads(2)
        .max_threads(4)
        .stack_size(64 * 1024)
        .name("echo")
        .build()
        .expect("valid config");
    echo_round(&s, n);
    let warm = s.stats();
    echo_round(&s, n);
    let st = s.stats();
    s.shutdown();
    eprintln!(
        "{n} connections: warm-up round {} blocked detection(s), measured round {}; \
         {} Processer thread(s) started in all",
        warm.blocked_detections,
        st.blocked_detections - warm.blocked_detections,
        st.threads_started
    );
    assert_eq!(st.completed, 2 * (2 * n as u64 + 1));
    assert_eq!(
        st.blocked_detections, warm.blocked_detections,
        "a Processer was judged blocked on a warm process"
    );
    assert_eq!(
        st.threads_started, warm.threads_started,
        "an extra thread was started on a warm process"
    );
}
