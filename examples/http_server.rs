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
//! ADDR`; the server runs until it is killed. A bad argument exits with code
//! 2.
//!
//! Every read or write below that cannot proceed parks its task, and the
//! thread runs other connections meanwhile: thousands of connections share
//! `--threads` OS threads. The options and the accept loop, shared with the
//! other example server, are in `common/server.rs`; the HTTP part (parsing
//! with `httparse`, the responses) is in `common/http.rs`.

#[path = "common/http.rs"]
mod http;

#[path = "common/server.rs"]
mod server;

use std::io::{self, Read, Write};
use std::process::ExitCode;
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
}

fn main() -> ExitCode {
    server::run("http", &Args::parse().server, serve)
}

/// Bytes read at a time while no request is pending: on the task's stack,
/// inside the page its frames touch anyway, so an idle connection holds no
/// input buffer. A request that does not fit goes on in a heap buffer.
const FIRST_READ: usize = 1024;

/// Serves one connection until the client closes it, asks to close it,
/// sends something that is not HTTP, or stays idle for `idle`.
fn serve(mut stream: TcpStream, idle: Duration) -> io::Result<()> {
    stream.set_read_timeout(Some(idle))?;
    stream.set_write_timeout(Some(idle))?;
    stream.set_nodelay(true)?;
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
            let n = stream.read(&mut first)?;
            if n == 0 {
                return Ok(());
            }
            conn.received_from(&first[..n])
        };
        match (conn.pending(), due) {
            (true, None) => due = Some(Instant::now() + idle),
            (false, Some(_)) => {
                due = None;
                stream.set_read_timeout(Some(idle))?;
            }
            _ => {}
        }
        stream.write_all(&conn.out)?;
        conn.out.clear();
        if !open {
            return Ok(());
        }
        conn.release(); // an idle connection keeps no heap buffer
    }
}
