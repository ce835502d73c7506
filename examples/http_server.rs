//! A minimal HTTP/1.1 server on gofer: one task per connection, written in
//! plain blocking style.
//!
//! ```sh
//! cargo run --release --example http_server -- --addr 127.0.0.1:8080 --threads 2
//! curl -i http://127.0.0.1:8080/
//! ```
//!
//! `GET /` answers `200` with `Hello, World!` as `text/plain` (`HEAD /` the
//! same headers without the body); anything else `404`. Connections are
//! kept alive, and pipelined requests are answered in order. Garbage gets a
//! `400` and the connection closes; so does a head over 8 KiB (`431`). A
//! connection that sends nothing, or reads nothing, for `--idle-timeout` is
//! closed, and so is one that takes longer than that to send a whole
//! request once it has begun one (a slow client cannot hold a connection by
//! trickling bytes). The first line of output is `listening on
//! ADDR`; the server runs until SIGINT or SIGTERM, which close every
//! connection (`Scheduler::shutdown_now`) and end it. A bad argument exits
//! with code 2.
//!
//! Every read or write below that cannot proceed parks its task, and the
//! thread runs other connections meanwhile: thousands of connections share
//! `--threads` OS threads. The options and the accept loop, shared with the
//! other example server, are in `common/server.rs`; the HTTP part (parsing
//! with `httparse`, the responses) is in `common/http.rs`.
//!
//! Memory per idle connection: between requests the task reads into a
//! 1 KiB buffer on its own stack, and drops its heap buffers once the
//! responses are written, so an idle connection costs its task's one
//! touched stack page and the runtime's bookkeeping (about 4.5 KiB).
//! `--stack-size 16 --dense-stacks` keep that and lift the cap of about
//! 30,000 guarded stacks. `--park-idle SECS` goes further: a connection
//! quiet for SECS gives its task back and waits in a shared epoll set
//! (`common/park.rs`) until its next request, for well under 1 KiB; with it,
//! `--stack-cache 0` lets the finished tasks' stacks be unmapped rather
//! than kept (resident) for reuse. BENCHMARKS.md ("Idle connections") has
//! the figures.

#[path = "common/http.rs"]
mod http;

#[path = "common/park.rs"]
mod park;

#[path = "common/server.rs"]
mod server;

use std::io::{self, Read, Write};
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use clap::Parser;
use gofer::net::TcpStream;

#[derive(Parser, Debug)]
#[command(
    name = "http_server",
    about = "A minimal HTTP/1.1 keep-alive server on gofer: GET / answers Hello, World!, \
             anything else 404.",
    after_help = server::AFTER_HELP
)]
struct Args {
    #[command(flatten)]
    server: server::Options,

    /// Give back the task of a connection that has been quiet for SECS
    /// between requests: the connection waits without a task (a few dozen
    /// bytes instead of a stack page) and gets a new task when its next
    /// request arrives. 0: never.
    #[arg(long, value_name = "SECS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    park_idle: u64,
}

/// Where quiet connections wait without a task (`--park-idle`), and after
/// how long they go there.
static PARKING: OnceLock<(Arc<park::Parking>, Duration)> = OnceLock::new();

fn main() -> ExitCode {
    let args = Args::parse();
    let idle = Duration::from_secs(args.server.idle_timeout);
    let park_after = Duration::from_secs(args.park_idle).min(idle);
    server::run_with(
        "http",
        &args.server,
        gofer::Scheduler::builder(),
        serve,
        |sched| {
            if !park_after.is_zero() {
                let p = park::Parking::start(sched, idle, serve_since).map_err(|e| {
                    io::Error::new(e.kind(), format!("cannot start the parking: {e}"))
                })?;
                let _ = PARKING.set((p, park_after));
            }
            Ok(())
        },
    )
}

/// Bytes read at a time while no request is pending: on the task's stack,
/// inside the page its frames touch anyway, so an idle connection holds no
/// input buffer. A request that does not fit goes on in a heap buffer.
const FIRST_READ: usize = 1024;

/// Serves one connection until the client closes it, asks to close it,
/// sends something that is not HTTP, or stays idle for `idle`.
fn serve(stream: TcpStream, idle: Duration) -> io::Result<()> {
    stream.set_nodelay(true)?;
    serve_since(stream, idle, Instant::now())
}

/// [`serve`] for a connection last active at `last` (a parked one that
/// woke up keeps its idle time).
fn serve_since(mut stream: TcpStream, idle: Duration, mut last: Instant) -> io::Result<()> {
    let parking = PARKING.get();
    // How long a read between requests waits: the idle timeout, or, when
    // quiet connections are parked, until it is time to park.
    let quiet = parking.map_or(idle, |&(_, after)| after);
    stream.set_read_timeout(Some(quiet))?;
    stream.set_write_timeout(Some(idle))?;
    let mut conn = http::Conn::new();
    let mut first = [0u8; FIRST_READ];
    // When the request being received must be complete: `idle` after its
    // first bytes came, however slowly the rest trickles in.
    let mut due: Option<Instant> = None;
    loop {
        if let Some(due) = due {
            let left = due.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(()); // too slow a request: close
            }
            stream.set_read_timeout(Some(left))?;
        }
        // Parks until bytes arrive: into the stack buffer between
        // requests, into the connection's own buffer inside one.
        let open = if conn.pending() {
            let n = stream.read(conn.spare())?;
            if n == 0 {
                return Ok(()); // the client closed
            }
            conn.received(n) // answers every complete request
        } else {
            let n = match stream.read(&mut first) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => match parking {
                    // Quiet for `quiet`: close after the idle timeout, or
                    // park the connection and end this task.
                    Some((p, _)) if last.elapsed() < idle => return p.park(stream, last),
                    _ => return Ok(()),
                },
                Err(e) => return Err(e),
            };
            conn.received_from(&first[..n])
        };
        match (conn.pending(), due) {
            (true, None) => due = Some(Instant::now() + idle),
            (false, Some(_)) => {
                due = None;
                stream.set_read_timeout(Some(quiet))?;
            }
            _ => {}
        }
        stream.write_all(&conn.out)?;
        conn.out.clear();
        if !open {
            return Ok(());
        }
        conn.release(); // an idle connection keeps no heap buffer
        if parking.is_some() {
            last = Instant::now();
        }
    }
}
