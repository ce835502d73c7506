//! Runs the `echo_server` example: bytes come back unchanged, a thousand
//! connections at once, idle and misbehaving clients are closed without
//! disturbing the others, and bad arguments are refused.
//!
//! Every test starts its own server on a free port and waits for its
//! `listening on ADDR` line; every wait is on echoed bytes or on the server
//! closing a connection, bounded by the sockets' timeouts.

use crate::server_util;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use server_util::{assert_refused, read_to_close, send, Server, PATIENCE};

const SERVER: &str = "echo_server";

/// Sends `msg` and checks it comes back.
fn round_trip(s: &mut TcpStream, msg: &[u8]) {
    send(s, msg);
    let mut back = vec![0; msg.len()];
    s.read_exact(&mut back).expect("the echo");
    assert!(back == msg, "the echo differs from what was sent");
}

/// Raises the soft open-file limit to the hard one (the server, a child,
/// inherits it) and returns it.
fn raise_nofile() -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: get/setrlimit with a valid struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut l), 0);
        if l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
        }
    }
    l.rlim_cur
}

#[test]
fn bytes_come_back_unchanged() {
    let server = Server::start(SERVER, &[]);
    let mut s = server.connect();
    round_trip(&mut s, b"x");
    let kib: Vec<u8> = (0..1024u32).map(|i| (i * 7) as u8).collect();
    for _ in 0..100 {
        round_trip(&mut s, &kib);
    }
    // 8 MiB, far more than the socket buffers: a writer thread sends while
    // this thread reads, and the server's task parks on both sides.
    let big: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
    let mut w = s.try_clone().unwrap();
    let sent = big.clone();
    let writer = std::thread::spawn(move || {
        w.write_all(&sent).unwrap();
        w.shutdown(Shutdown::Write).unwrap();
    });
    let back = read_to_close(&mut s);
    writer.join().unwrap();
    assert_eq!(back.len(), big.len());
    assert!(back == big, "the echo differs");
    server.stop();
}

#[test]
fn a_thousand_connections_are_served_at_once() {
    let limit = raise_nofile();
    // Each connection costs a descriptor here and one in the server.
    let n = 1000.min(limit.saturating_sub(100) as usize / 2);
    assert!(n >= 200, "open-file limit {limit} is too low for this test");
    let server = Server::start(SERVER, &[]);
    let mut conns: Vec<TcpStream> = (0..n).map(|_| server.connect()).collect();
    for round in 0..3u8 {
        for (i, s) in conns.iter_mut().enumerate() {
            send(s, format!("{round}:{i};").as_bytes());
        }
        for (i, s) in conns.iter_mut().enumerate() {
            let want = format!("{round}:{i};");
            let mut back = vec![0; want.len()];
            s.read_exact(&mut back).unwrap();
            assert_eq!(back, want.as_bytes());
        }
    }
    server.stop();
}

#[test]
fn clients_that_vanish_do_not_disturb_the_server() {
    let server = Server::start(SERVER, &[]);
    let mut bystander = server.connect();
    round_trip(&mut bystander, b"before");
    for _ in 0..50 {
        let mut s = server.connect();
        send(&mut s, &[0xff; 3000]);
        drop(s); // gone without reading the echo: the server's write may fail
    }
    let mut s = server.connect();
    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(
        read_to_close(&mut s),
        b"",
        "EOF from the client ends its task"
    );
    round_trip(&mut bystander, b"after");
    round_trip(&mut server.connect(), b"new");
    server.stop();
}

#[test]
fn a_silent_client_is_closed_after_the_idle_timeout() {
    let server = Server::start(SERVER, &["--idle-timeout", "1"]);
    let start = Instant::now();
    let mut silent = server.connect();
    let mut busy = server.connect();
    round_trip(&mut busy, b"still here");
    assert_eq!(read_to_close(&mut silent), b"");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "closed after {waited:?}, before the 1 s idle timeout"
    );
    server.stop();
}

#[test]
fn a_client_that_never_reads_is_closed_after_the_idle_timeout() {
    let server = Server::start(SERVER, &["--idle-timeout", "1"]);
    let s = server.connect();
    // Write until the server gives up: its write parks once the socket
    // buffers fill, times out after 1 s, and the connection closes, which
    // makes a write here fail.
    let mut w = s.try_clone().unwrap();
    let start = Instant::now();
    let writer = std::thread::spawn(move || {
        let chunk = [b'z'; 64 * 1024];
        loop {
            if let Err(e) = w.write_all(&chunk) {
                return e;
            }
        }
    });
    let mut busy = server.connect();
    round_trip(&mut busy, b"served meanwhile");
    let e = writer.join().unwrap();
    assert!(
        start.elapsed() < PATIENCE,
        "the write failed only after {:?}: {e}",
        start.elapsed()
    );
    // (`busy` itself has been idle past the timeout by now.)
    round_trip(&mut server.connect(), b"served after");
    server.stop();
}

#[test]
fn bad_arguments_exit_with_code_2() {
    for (args, says) in [
        (&["--threads", "two"][..], "invalid value"),
        (&["--threads", "4097"], "4097"),
        (&["--addr", "localhost"], "HOST:PORT"),
        (&["--addr", ":80x"], "not an address"),
        (&["--idle-timeout", "forever"], "--idle-timeout"),
        (&["--bogus"], "unexpected argument"),
    ] {
        assert_refused(SERVER, args, says);
    }
}

#[test]
fn sigterm_closes_every_connection_and_the_server_exits_cleanly() {
    let server = Server::start(SERVER, &[]);
    // Connections served by tasks parked in `read`, one of them mid-way
    // through its idle timeout.
    let mut conns: Vec<TcpStream> = (0..3).map(|_| server.connect()).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        round_trip(c, format!("connection {i}").as_bytes());
    }
    let (status, out, err) = server.terminate(libc::SIGTERM);
    assert!(status.success(), "exit status {status:?}; stderr:\n{err}");
    assert!(
        out.contains("stopped"),
        "stdout after the first line: {out:?}"
    );
    assert!(err.contains("SIGTERM: stopping"), "stderr: {err:?}");
    // Each connection's task unwound and dropped its socket.
    for c in &mut conns {
        assert!(read_to_close(c).is_empty());
    }
}
