//! Holds many idle keep-alive HTTP connections to a server, then wakes them
//! all at once (`scripts/idle_bench.sh`, BENCHMARKS.md "Idle connections").
//!
//! ```sh
//! cargo run -p gofer-bench --release --example idle_client -- --addr 127.0.0.1:8080 \
//!     --connections 10000 --idle 10
//! ```
//!
//! 1. **Serve**: opens `--connections` connections, sends `GET /` on each
//!    and reads each response, so the server has served every connection
//!    once and holds whatever it keeps per connection. At most
//!    `--in-flight` connections wait for their first response at a time, so
//!    the server's accept queue never overflows (a dropped SYN would cost a
//!    1 s retransmission). Prints `served N of N in S s`.
//! 2. **Idle**: sends nothing for `--idle` seconds, or, with `--wait-stdin`,
//!    until a line (or end of input) arrives on standard input, so that a
//!    script can measure the idle server and then say when to wake. Prints
//!    `idle` first.
//! 3. **Wake**: sends `GET /` on every connection, one after another as fast
//!    as it can, and waits (at most `--wake-timeout` seconds) for every
//!    response. Prints `woke N of N in MS ms (p50 MS ms, p99 MS ms)`: the
//!    time from the first request sent to the last response received (and
//!    the median and 99th percentile of each response's time since the
//!    first request); a connection the server closed or answered with
//!    something other than `200` is not counted.
//!
//! The client is one thread with an epoll set and non-blocking sockets; it
//! needs `--connections` + 8 descriptors (raise `ulimit -n`). Exit status:
//! 0 when every connection was served and answered on wake, 1 otherwise, 2
//! for a bad argument.

use std::io::{self, BufRead, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

/// Options of the idle client.
#[derive(Parser, Debug)]
#[command(
    name = "idle_client",
    about = "Holds N idle keep-alive HTTP connections, then sends GET / on all at once and \
             times the answers."
)]
struct Args {
    /// The server, HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    addr: SocketAddr,

    /// Connections to open and hold.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    connections: u32,

    /// Seconds to stay idle before waking (ignored with --wait-stdin).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    idle: u64,

    /// Stay idle until a line (or end of input) arrives on standard input.
    #[arg(long)]
    wait_stdin: bool,

    /// Connections that may wait for their first response at a time.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    in_flight: u32,

    /// Seconds to wait for the answers when waking.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    wake_timeout: u64,
}

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/// One connection and what has arrived of the response it waits for.
struct Conn {
    stream: TcpStream,
    input: Vec<u8>,
    /// Waiting for a response.
    waiting: bool,
    /// The server closed it, or answered with something unexpected.
    dead: bool,
}

/// What the front of a connection's input holds.
enum Response {
    Partial,
    /// A whole response of `len` bytes; `ok` when its status is 200.
    Whole {
        len: usize,
        ok: bool,
    },
    Bad,
}

fn parse(buf: &[u8]) -> Response {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    let head = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Response::Partial,
        Err(_) => return Response::Bad,
    };
    let body = resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| {
            std::str::from_utf8(h.value)
                .ok()?
                .trim()
                .parse::<usize>()
                .ok()
        });
    let Some(body) = body else {
        return Response::Bad; // every server measured sends a Content-Length
    };
    if buf.len() < head + body {
        return Response::Partial;
    }
    Response::Whole {
        len: head + body,
        ok: resp.code == Some(200),
    }
}

/// An epoll set of the connections, each registered for input with its
/// index as the event's data.
struct Epoll(OwnedFd);

impl Epoll {
    fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointer; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn add(&self, fd: i32, index: usize) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: index as u64,
        };
        // SAFETY: both descriptors are open; ev outlives the call.
        if unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn remove(&self, fd: i32) {
        // SAFETY: both descriptors are open; DEL ignores the event pointer.
        unsafe {
            libc::epoll_ctl(
                self.0.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }

    /// Waits at most `timeout` for events; returns the indices of the ready
    /// connections in `ready`.
    fn wait(
        &self,
        events: &mut [libc::epoll_event],
        ready: &mut Vec<usize>,
        timeout: Duration,
    ) -> io::Result<()> {
        ready.clear();
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: events is a writable buffer of events.len() entries.
        let n = unsafe {
            libc::epoll_wait(
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        ready.extend(events[..n as usize].iter().map(|e| e.u64 as usize));
        Ok(())
    }
}

/// Reads what connection `c` has; returns `Some(ok)` once its response is
/// whole (or `Some(false)` when it broke), `None` while it is partial.
fn read_response(c: &mut Conn, epoll: &Epoll) -> Option<bool> {
    let mut buf = [0u8; 4096];
    loop {
        match c.stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => c.input.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                return match parse(&c.input) {
                    Response::Partial => None,
                    Response::Whole { len, ok } => {
                        c.input.drain(..len);
                        c.waiting = false;
                        if !ok {
                            c.dead = true;
                            epoll.remove(c.stream.as_raw_fd());
                        }
                        Some(ok)
                    }
                    Response::Bad => break,
                };
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    // Closed, failed, or not HTTP.
    c.waiting = false;
    c.dead = true;
    epoll.remove(c.stream.as_raw_fd());
    Some(false)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> io::Result<bool> {
    let n = args.connections as usize;
    let epoll = Epoll::new()?;
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
    let mut ready = Vec::new();
    let mut conns: Vec<Conn> = Vec::with_capacity(n);

    // 1. Serve: connect, ask once, read the answer.
    let start = Instant::now();
    let mut outstanding = 0usize;
    let mut served = 0usize;
    let deadline = start + Duration::from_secs(60 + n as u64 / 100);
    while conns.len() < n || outstanding > 0 {
        if Instant::now() > deadline {
            break;
        }
        if conns.len() < n && outstanding < args.in_flight as usize {
            let mut stream = TcpStream::connect_timeout(&args.addr, Duration::from_secs(10))?;
            stream.set_nodelay(true)?;
            stream.write_all(REQUEST)?;
            stream.set_nonblocking(true)?;
            epoll.add(stream.as_raw_fd(), conns.len())?;
            conns.push(Conn {
                stream,
                input: Vec::new(),
                waiting: true,
                dead: false,
            });
            outstanding += 1;
            continue;
        }
        epoll.wait(&mut events, &mut ready, Duration::from_millis(100))?;
        for &i in &ready {
            let c = &mut conns[i];
            if !c.waiting {
                continue;
            }
            if let Some(ok) = read_response(c, &epoll) {
                outstanding -= 1;
                served += usize::from(ok);
            }
        }
    }
    println!(
        "served {served} of {n} in {:.2} s",
        start.elapsed().as_secs_f64()
    );
    io::stdout().flush()?;

    // 2. Idle.
    println!("idle");
    io::stdout().flush()?;
    if args.wait_stdin {
        let mut line = String::new();
        io::stdin().lock().read_line(&mut line)?;
    } else {
        std::thread::sleep(Duration::from_secs(args.idle));
    }

    // 3. Wake: every live connection asks at once.
    let start = Instant::now();
    let mut asked = 0usize;
    for c in conns.iter_mut().filter(|c| !c.dead) {
        match c.stream.write(REQUEST) {
            Ok(k) if k == REQUEST.len() => {
                c.waiting = true;
                asked += 1;
            }
            _ => {
                c.dead = true;
                epoll.remove(c.stream.as_raw_fd());
            }
        }
    }
    let mut times = Vec::with_capacity(asked);
    let mut left = asked;
    let deadline = start + Duration::from_secs(args.wake_timeout);
    while left > 0 {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        epoll.wait(&mut events, &mut ready, deadline - now)?;
        for &i in &ready {
            let c = &mut conns[i];
            if !c.waiting {
                continue;
            }
            if let Some(ok) = read_response(c, &epoll) {
                left -= 1;
                if ok {
                    times.push(start.elapsed());
                }
            }
        }
    }
    let all = times.last().copied().unwrap_or_default();
    times.sort_unstable();
    let pct = |p: usize| {
        times
            .get((times.len() * p / 100).min(times.len().saturating_sub(1)))
            .map_or(0.0, |t| t.as_secs_f64() * 1e3)
    };
    println!(
        "woke {} of {n} in {:.1} ms (p50 {:.1} ms, p99 {:.1} ms)",
        times.len(),
        all.as_secs_f64() * 1e3,
        pct(50),
        pct(99)
    );
    Ok(served == n && times.len() == n)
}
