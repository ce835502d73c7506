//! A TCP echo server on gofer: one task per connection, written in plain
//! blocking style.
//!
//! ```sh
//! cargo run --release --example echo_server -- --addr 127.0.0.1:8080 --threads 2
//! ```
//!
//! Every byte a client sends comes back to it. A connection that sends
//! nothing, or reads nothing, for `--idle-timeout` is closed. The first line
//! of output is `listening on ADDR`; the server runs until it is killed. A
//! bad argument exits with code 2.
//!
//! Every read or write below that cannot proceed parks its task, and the
//! thread runs other connections meanwhile: thousands of connections share
//! `--threads` OS threads.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use gofer::net::{TcpListener, TcpStream};

#[derive(Parser, Debug)]
#[command(
    name = "echo_server",
    about = "A TCP echo server on gofer, one task per connection.",
    after_help = "Prints `listening on ADDR` first, then runs until killed. Exit status: 2 for \
                  a bad argument, 1 when the address cannot be bound."
)]
struct Args {
    /// Address to listen on, HOST:PORT; port 0 picks a free port.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080", value_parser = parse_addr)]
    addr: SocketAddr,

    /// Processer threads; 0 means one per CPU.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=gofer::MAX_THREADS_LIMIT as i64))]
    threads: u16,

    /// Seconds a connection may wait for the client to send (or to read
    /// what it was sent) before it is closed.
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    idle_timeout: u64,
}

fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    s.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("`{s}` is not an address; write HOST:PORT, e.g. 127.0.0.1:8080"))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let sched = match gofer::Scheduler::builder()
        .name("echo")
        .min_threads(args.threads.into())
        .build()
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot start the scheduler: {e}");
            return ExitCode::FAILURE;
        }
    };
    let listener = match TcpListener::bind(args.addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", args.addr);
            return ExitCode::FAILURE;
        }
    };
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    println!("listening on {addr}");
    io::stdout().flush().expect("stdout");

    let idle = Duration::from_secs(args.idle_timeout);
    let accepter = sched.spawn(move || accept_loop(&listener, idle));
    let _ = accepter.join(); // never returns: the server runs until killed
    ExitCode::FAILURE
}

/// Accepts connections forever, each served by a task of its own.
fn accept_loop(listener: &TcpListener, idle: Duration) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                // A connection whose task cannot be had is closed (dropped).
                if let Err(e) = gofer::Builder::new().spawn(move || echo(stream, idle)) {
                    eprintln!("cannot serve a connection: {e}");
                }
            }
            Err(e) => {
                // Out of descriptors, most likely: give connections time to close.
                eprintln!("accept: {e}");
                gofer::sleep(Duration::from_millis(10));
            }
        }
    }
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
