//! Runs the `http_server` example and talks HTTP/1.1 to it: exact
//! responses, keep-alive, pipelining, bad input of several kinds, idle
//! connections, many connections at once, and bad arguments.
//!
//! Every test starts its own server on a free port and waits for its
//! `listening on ADDR` line; every wait is on a response or on the server
//! closing a connection, bounded by the sockets' timeouts.

use crate::server_util;

use std::io::Read;
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use server_util::{assert_refused, read_to_close, send, Server};

const SERVER: &str = "http_server";

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n";
const HELLO: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";
const HELLO_CLOSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\nConnection: close\r\n\r\nHello, World!";
const NOT_FOUND: &[u8] =
    b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n\r\nNot Found";
const BAD_REQUEST: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 11\r\nConnection: close\r\n\r\nBad Request";
const HEAD_TOO_LARGE: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain\r\nContent-Length: 31\r\nConnection: close\r\n\r\nRequest Header Fields Too Large";

/// Reads exactly `want.len()` bytes and checks they are `want`.
fn expect(s: &mut TcpStream, want: &[u8]) {
    let mut got = vec![0; want.len()];
    if let Err(e) = s.read_exact(&mut got) {
        panic!(
            "reading a response of {} bytes: {e}; expected:\n{}",
            want.len(),
            String::from_utf8_lossy(want)
        );
    }
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(want),
        "unexpected response"
    );
}

/// One `GET /` on `s`, answered with [`HELLO`].
fn hello(s: &mut TcpStream) {
    send(s, GET);
    expect(s, HELLO);
}

#[test]
fn get_root_answers_200_hello_world_as_text_plain() {
    let server = Server::start(SERVER, &[]);
    let mut s = server.connect();
    send(&mut s, GET);
    let mut got = vec![0; HELLO.len()];
    s.read_exact(&mut got).unwrap();

    let mut headers = [httparse::EMPTY_HEADER; 8];
    let mut resp = httparse::Response::new(&mut headers);
    let head = match resp.parse(&got).expect("a valid HTTP response") {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => panic!("incomplete response: {got:?}"),
    };
    assert_eq!(resp.version, Some(1));
    assert_eq!(resp.code, Some(200));
    assert_eq!(resp.reason, Some("OK"));
    let header = |name: &str| {
        resp.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
    };
    assert_eq!(header("content-type").as_deref(), Some("text/plain"));
    assert_eq!(header("content-length").as_deref(), Some("13"));
    assert_eq!(
        header("connection"),
        None,
        "HTTP/1.1 keeps alive by default"
    );
    assert_eq!(&got[head..], b"Hello, World!");
    assert_eq!(got, HELLO, "exact bytes");
    server.stop();
}

#[test]
fn anything_but_get_root_answers_404() {
    let server = Server::start(SERVER, &[]);
    let mut s = server.connect();
    for req in [
        &b"GET /index.html HTTP/1.1\r\nHost: test\r\n\r\n"[..],
        b"GET /index.html?q=1 HTTP/1.1\r\nHost: test\r\n\r\n",
        b"DELETE / HTTP/1.1\r\nHost: test\r\n\r\n",
        // A body is skipped by its length: the connection stays usable.
        b"POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\nhello",
    ] {
        send(&mut s, req);
        expect(&mut s, NOT_FOUND);
    }
    hello(&mut s);
    server.stop();
}

#[test]
fn a_query_string_on_the_root_is_ignored() {
    let server = Server::start(SERVER, &[]);
    let mut s = server.connect();
    send(&mut s, b"GET /?a=1 HTTP/1.1\r\nHost: test\r\n\r\n");
    expect(&mut s, HELLO);
    send(&mut s, b"GET /? HTTP/1.1\r\nHost: test\r\n\r\n");
    expect(&mut s, HELLO);
    server.stop();
}

#[test]
fn head_answers_the_headers_of_get_without_the_body() {
    let server = Server::start(SERVER, &[]);
    let mut s = server.connect();
    let head_len = HELLO.len() - b"Hello, World!".len();
    send(&mut s, b"HEAD / HTTP/1.1\r\nHost: test\r\n\r\n");
    expect(&mut s, &HELLO[..head_len]);
    // The next response follows at once: no body was sent in between.
    hello(&mut s);
    send(&mut s, b"HEAD /missing HTTP/1.1\r\nHost: test\r\n\r\n");
    expect(&mut s, &NOT_FOUND[..NOT_FOUND.len() - b"Not Found".len()]);
    hello(&mut s);
    server.stop();
}

#[test]
fn a_client_trickling_a_request_is_closed_after_the_idle_timeout() {
    let server = Server::start(SERVER, &["--idle-timeout", "1"]);
    let mut slow = server.connect();
    let start = Instant::now();
    // One byte every 300 ms: never idle for a second, but the request is
    // not complete a second after it began.
    let req = GET;
    let mut closed_after = None;
    for &b in req.iter().take(req.len() - 1) {
        if std::io::Write::write_all(&mut slow, &[b]).is_err() {
            closed_after = Some(start.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
        if start.elapsed() > Duration::from_secs(5) {
            break;
        }
    }
    let closed_after = closed_after.unwrap_or_else(|| {
        assert_eq!(read_to_close(&mut slow), b"", "closed without a response");
        start.elapsed()
    });
    assert!(
        closed_after < Duration::from_secs(4),
        "a trickling client held its connection for {closed_after:?}"
    );
    // Others are still served.
    let mut s = server.connect();
    hello(&mut s);
    server.stop();
}

#[test]
fn keep_alive_serves_many_requests_on_one_connection_until_close() {
    let server = Server::start(SERVER, &[]);
    let mut s = server.connect();
    for _ in 0..100 {
        hello(&mut s);
    }
    send(
        &mut s,
        b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(
        read_to_close(&mut s),
        HELLO_CLOSE,
        "the last response, then EOF"
    );
    server.stop();
}

#[test]
fn http10_closes_unless_asked_to_keep_alive() {
    let server = Server::start(SERVER, &[]);
    let mut s = server.connect();
    send(&mut s, b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(read_to_close(&mut s), HELLO_CLOSE);

    let mut s = server.connect();
    send(&mut s, b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    expect(
        &mut s,
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\nConnection: keep-alive\r\n\r\nHello, World!",
    );
    hello(&mut s);
    server.stop();
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let server = Server::start(SERVER, &[]);
    let mut s = server.connect();
    let (mut reqs, mut want) = (Vec::new(), Vec::new());
    for i in 0..200 {
        if i % 3 == 0 {
            reqs.extend_from_slice(format!("GET /{i} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
            want.extend_from_slice(NOT_FOUND);
        } else {
            reqs.extend_from_slice(GET);
            want.extend_from_slice(HELLO);
        }
    }
    send(&mut s, &reqs); // all at once: the server parses them from one buffer
    expect(&mut s, &want);

    // One request dribbled a byte at a time, then two at once.
    for b in GET {
        send(&mut s, std::slice::from_ref(b));
    }
    expect(&mut s, HELLO);
    send(&mut s, &[GET, GET].concat());
    expect(&mut s, &[HELLO, HELLO].concat());
    server.stop();
}

#[test]
fn garbage_closes_only_its_own_connection() {
    let server = Server::start(SERVER, &[]);
    let mut bystander = server.connect();
    hello(&mut bystander);

    for garbage in [
        &b"\x00\x01\x02 not http at all\r\n\r\n"[..],
        b"GET / HTTP/9.9\r\n\r\n",
        b"GET / HTTP/1.1\r\nBad Header Line\r\n\r\n",
        b"GET / HTTP/1.1\r\nContent-Length: many\r\n\r\n",
    ] {
        let mut s = server.connect();
        send(&mut s, garbage);
        assert_eq!(
            read_to_close(&mut s),
            BAD_REQUEST,
            "for {:?}",
            String::from_utf8_lossy(garbage)
        );
    }
    hello(&mut bystander);
    hello(&mut server.connect());
    server.stop();
}

#[test]
fn oversized_heads_get_431_and_a_close() {
    let server = Server::start(SERVER, &[]);
    // A head that never ends, past 8 KiB.
    let mut s = server.connect();
    let mut req = b"GET / HTTP/1.1\r\n".to_vec();
    while req.len() <= 9 * 1024 {
        req.extend_from_slice(
            b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
        );
    }
    send(&mut s, &req);
    assert_eq!(read_to_close(&mut s), HEAD_TOO_LARGE);

    // Too many headers.
    let mut s = server.connect();
    let mut req = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..40 {
        req.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
    }
    req.extend_from_slice(b"\r\n");
    send(&mut s, &req);
    assert_eq!(read_to_close(&mut s), HEAD_TOO_LARGE);

    hello(&mut server.connect());
    server.stop();
}

#[test]
fn clients_that_close_mid_request_do_not_disturb_the_server() {
    let server = Server::start(SERVER, &[]);
    let mut bystander = server.connect();
    hello(&mut bystander);
    for i in 0..50 {
        let mut s = server.connect();
        send(&mut s, &GET[..1 + i % (GET.len() - 1)]);
        drop(s); // closed with half a request sent
    }
    // Half a request, then the write side shut: the server sees the end of
    // the stream and closes its side without answering.
    let mut s = server.connect();
    send(&mut s, b"GET / HTTP/1.1\r\nHo");
    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_close(&mut s), b"");
    // A pipeline cut short: the complete requests are answered.
    let mut s = server.connect();
    send(&mut s, &[GET, GET, &GET[..7]].concat());
    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_close(&mut s), [HELLO, HELLO].concat());

    hello(&mut bystander);
    hello(&mut server.connect());
    server.stop();
}

#[test]
fn a_silent_client_is_closed_after_the_idle_timeout_while_others_are_served() {
    let server = Server::start(SERVER, &["--idle-timeout", "1"]);
    let mut silent = server.connect();
    let start = Instant::now();
    let mut busy = server.connect();
    hello(&mut busy);
    assert_eq!(read_to_close(&mut silent), b"", "closed without a response");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "closed after {waited:?}, before the 1 s idle timeout"
    );
    // A connection idle for less than the timeout between requests stays.
    let mut s = server.connect();
    for _ in 0..3 {
        hello(&mut s);
    }
    server.stop();
}

#[test]
fn many_connections_are_served_at_once() {
    const N: usize = 500;
    let server = Server::start(SERVER, &[]);
    let mut conns: Vec<TcpStream> = (0..N).map(|_| server.connect()).collect();
    for s in &mut conns {
        send(s, GET);
    }
    for s in &mut conns {
        expect(s, HELLO);
    }
    for s in &mut conns {
        send(s, &[GET, GET].concat());
    }
    for s in &mut conns {
        expect(s, &[HELLO, HELLO].concat());
    }
    server.stop();
}

/// Sockets listening on `port` in this network namespace (IPv4).
fn listeners_on(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // local_address is ADDR:PORT in hex; state 0A is LISTEN.
            f.len() > 3 && f[3] == "0A" && f[1].rsplit(':').next() == Some(&format!("{port:04X}"))
        })
        .count()
}

#[test]
fn per_processer_acceptors_listen_once_per_thread_and_serve_every_connection() {
    const N: usize = 200;
    let server = Server::start(SERVER, &["--acceptors", "per-processer"]);
    assert_eq!(
        listeners_on(server.addr.port()),
        2,
        "one SO_REUSEPORT listener per Processer (2 threads)"
    );
    let mut conns: Vec<TcpStream> = (0..N).map(|_| server.connect()).collect();
    for s in &mut conns {
        hello(s);
    }
    // SIGTERM cancels every accept loop (each pinned to its Processer)
    // and every connection's task.
    let (status, out, err) = server.terminate(libc::SIGTERM);
    assert!(
        status.success() && out.contains("stopped"),
        "{status:?} {out} {err}"
    );
    drop(conns);
}

#[test]
fn requests_larger_than_the_first_read_are_answered() {
    // Between requests the server reads 1 KiB at a time into a buffer on
    // its task's stack; what does not fit goes on in a heap buffer.
    let server = Server::start(SERVER, &[]);
    let mut s = server.connect();
    let big = format!(
        "GET / HTTP/1.1\r\nHost: test\r\nX-Filler: {}\r\n\r\n",
        "a".repeat(3000)
    );
    let big = big.as_bytes();
    send(&mut s, big);
    expect(&mut s, HELLO);
    // In pieces, the first within the first read.
    send(&mut s, &big[..500]);
    send(&mut s, &big[500..]);
    expect(&mut s, HELLO);
    // A pipelined run across the 1 KiB boundary, twice.
    send(&mut s, &GET.repeat(100));
    expect(&mut s, &HELLO.repeat(100));
    send(&mut s, &[big, GET, big].concat());
    expect(&mut s, &HELLO.repeat(3));
    // A request whose head is cut, then finished along with the next one.
    send(&mut s, &GET[..10]);
    send(&mut s, &[&GET[10..], GET].concat());
    expect(&mut s, &HELLO.repeat(2));
    hello(&mut s);
    server.stop();
}

#[test]
fn dense_small_stacks_serve_many_keep_alive_connections() {
    const N: usize = 300;
    let server = Server::start(
        SERVER,
        &["--dense-stacks", "--stack-size", "16", "--stack-cache", "0"],
    );
    let mut conns: Vec<TcpStream> = (0..N).map(|_| server.connect()).collect();
    for _ in 0..3 {
        for s in &mut conns {
            send(s, GET);
        }
        for s in &mut conns {
            expect(s, HELLO);
        }
    }
    let big = format!("GET / HTTP/1.1\r\nX-Filler: {}\r\n\r\n", "b".repeat(6000));
    send(&mut conns[0], big.as_bytes());
    expect(&mut conns[0], HELLO);
    server.stop();
}

/// Sockets parked without a task by the server `pid` (`--park-idle`): the
/// entries of its private epoll set, registered for `EPOLLIN | EPOLLRDHUP`
/// (0x2001) without `EPOLLET` (gofer's reactor sets it), read from
/// `/proc/PID/fdinfo`.
fn parked(pid: u32) -> usize {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return 0;
    };
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .map(|info| {
            info.lines()
                .filter(|l| l.starts_with("tfd:"))
                .filter(|l| {
                    l.split_whitespace()
                        .skip_while(|w| *w != "events:")
                        .nth(1)
                        .and_then(|ev| u32::from_str_radix(ev, 16).ok())
                        .is_some_and(|ev| ev & 0x2001 == 0x2001 && ev & 0x8000_0000 == 0)
                })
                .count()
        })
        .sum()
}

/// Waits (at most [`PATIENCE`]) until the server `pid` has `n` parked
/// connections.
fn wait_parked(pid: u32, n: usize) {
    let start = Instant::now();
    loop {
        let p = parked(pid);
        if p == n {
            return;
        }
        assert!(
            start.elapsed() < server_util::PATIENCE,
            "{p} connections parked, not {n}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn quiet_connections_are_parked_and_answered_when_they_wake() {
    const N: usize = 100;
    let server = Server::start(SERVER, &["--park-idle", "1", "--stack-cache", "0"]);
    let pid = server.pid();
    let mut conns: Vec<TcpStream> = (0..N).map(|_| server.connect()).collect();
    for s in &mut conns {
        hello(s);
    }
    // Quiet for a second: every connection gives its task back.
    wait_parked(pid, N);
    for round in 0..2 {
        for s in &mut conns {
            send(s, GET);
        }
        for s in &mut conns {
            expect(s, HELLO);
        }
        // A pipelined pair and a request in two pieces after a wake.
        send(&mut conns[0], &GET.repeat(2));
        expect(&mut conns[0], &HELLO.repeat(2));
        send(&mut conns[1], &GET[..7]);
        send(&mut conns[1], &GET[7..]);
        expect(&mut conns[1], HELLO);
        if round == 0 {
            wait_parked(pid, N);
        }
    }
    // A parked connection that the client closes leaves the set.
    wait_parked(pid, N);
    conns.truncate(N / 2);
    wait_parked(pid, N / 2);
    hello(&mut conns[0]);
    server.stop();
}

#[test]
fn a_parked_connection_is_closed_after_the_idle_timeout() {
    let server = Server::start(
        SERVER,
        &[
            "--park-idle",
            "1",
            "--idle-timeout",
            "3",
            "--stack-cache",
            "0",
        ],
    );
    let mut s = server.connect();
    hello(&mut s);
    let start = Instant::now();
    wait_parked(server.pid(), 1);
    assert_eq!(read_to_close(&mut s), b"", "closed without a response");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(2900),
        "closed after {waited:?}, before the 3 s idle timeout"
    );
    assert!(
        waited < Duration::from_secs(15),
        "closed only after {waited:?}"
    );
    wait_parked(server.pid(), 0);
    // A silent connection parks too, and closes the same way.
    let mut silent = server.connect();
    let start = Instant::now();
    assert_eq!(read_to_close(&mut silent), b"");
    assert!(start.elapsed() >= Duration::from_millis(2900));
    hello(&mut server.connect());
    server.stop();
}

#[test]
fn bad_arguments_exit_with_code_2() {
    for (args, says) in [
        (&["--threads", "many"][..], "invalid value"),
        (&["--threads", "5000"], "5000"),
        (&["--threads=-1"], "--threads"),
        (&["--addr", "nonsense"], "not an address"),
        (&["--addr", "127.0.0.1"], "HOST:PORT"),
        (&["--addr", "127.0.0.1:99999"], "not an address"),
        (&["--idle-timeout", "0"], "--idle-timeout"),
        (&["--stack-size", "8"], "--stack-size"),
        (&["--stack-cache", "many"], "--stack-cache"),
        (&["--park-idle", "86401"], "--park-idle"),
        (&["--no-such-flag"], "unexpected argument"),
    ] {
        assert_refused(SERVER, args, says);
    }
}

#[test]
fn an_address_in_use_exits_with_code_1() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = server_util::run(SERVER, &["--addr", &addr]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{stderr}");
    assert!(
        stderr.contains("cannot listen on") && stderr.contains(&addr),
        "stderr:\n{stderr}"
    );
}

#[test]
fn help_lists_the_flags() {
    let out = server_util::run(SERVER, &["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--addr",
        "--threads",
        "--idle-timeout",
        "--stack-size",
        "--dense-stacks",
        "--stack-cache",
        "--park-idle",
        "listening on",
    ] {
        assert!(
            help.contains(flag),
            "--help does not mention {flag}:\n{help}"
        );
    }
}

#[test]
fn sigint_closes_every_connection_and_the_server_exits_cleanly() {
    let server = Server::start(SERVER, &[]);
    // Kept-alive connections whose tasks wait for the next request.
    let mut conns: Vec<TcpStream> = (0..3).map(|_| server.connect()).collect();
    for c in &mut conns {
        send(c, GET);
        expect(c, HELLO);
    }
    let (status, out, err) = server.terminate(libc::SIGINT);
    assert!(status.success(), "exit status {status:?}; stderr:\n{err}");
    assert!(
        out.contains("stopped"),
        "stdout after the first line: {out:?}"
    );
    assert!(err.contains("SIGINT: stopping"), "stderr: {err:?}");
    for c in &mut conns {
        assert!(read_to_close(c).is_empty());
    }
}
