//! A TCP echo server on gofer: one task per connection, written in plain
//! blocking style.
//!
//! ```sh
//! cargo run --release --example echo_server -- --addr 127.0.0.1:8080 --threads 2
//! ```
//!
//! Every byte a client sends comes back to it. A connection that sends
//! nothing, or reads nothing, for `--idle-timeout` is closed. The first line
//! of output is `listening on ADDR`; the server runs until SIGINT or SIGTERM,
//! which close every connection (`Scheduler::shutdown_now`) and end it. A
//! bad argument exits with code 2.
//!
//! Every read or write below that cannot proceed parks its task, and the
//! thread runs other connections meanwhile: thousands of connections share
//! `--threads` OS threads. The options and the accept loop, shared with the
//! other example server, are in `common/server.rs`.

#[path = "common/server.rs"]
mod server;

use std::io::{self, Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use gofer::net::TcpStream;

#[derive(Parser, Debug)]
#[command(
    name = "echo_server",
    about = "A TCP echo server on gofer, one task per connection.",
    after_help = server::AFTER_HELP
)]
struct Args {
    #[command(flatten)]
    server: server::Options,
}

fn main() -> ExitCode {
    server::run("echo", &Args::parse().server, echo)
}

/// Sends back what the client sends, until it closes or stays idle for
/// `idle`.
fn echo(mut stream: TcpStream, idle: Duration) -> io::Result<()> {
    stream.set_read_timeout(Some(idle))?;
    stream.set_write_timeout(Some(idle))?;
    stream.set_nodelay(true)?;
    let mut buf = vec![0; 16 * 1024];
    loop {
        let n = stream.read(&mut buf)?; // parks until bytes arrive
        if n == 0 {
            return Ok(()); // the client closed
        }
        stream.write_all(&buf[..n])?;
    }
}
