//! The command line every peer server takes: the same flags as gofer's
//! `examples/http_server.rs` and `examples/echo_server.rs`, so that
//! `scripts/http_bench.sh` drives them all alike.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use clap::Parser;

/// Flags of a peer server.
#[derive(Parser, Debug)]
#[command(after_help = "Prints `listening on ADDR` first, then runs until killed.")]
pub struct Args {
    /// Address to listen on, HOST:PORT; port 0 picks a free port.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080", value_parser = parse_addr)]
    pub addr: SocketAddr,

    /// Worker threads; 0 means one per CPU.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=4096))]
    threads: u16,

    /// Seconds a connection may wait for the client to send (or to read
    /// what it was sent) before it is closed.
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    idle_timeout: u64,
}

impl Args {
    /// Worker threads, 0 resolved to the number of CPUs.
    pub fn threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n.into(),
        }
    }

    /// The idle timeout of a connection.
    pub fn idle(&self) -> Duration {
        Duration::from_secs(self.idle_timeout)
    }
}

fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    s.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("`{s}` is not an address; write HOST:PORT, e.g. 127.0.0.1:8080"))
}

/// Prints the first line of output, `listening on ADDR`, and flushes it.
pub fn listening(addr: SocketAddr) {
    println!("listening on {addr}");
    std::io::stdout().flush().expect("stdout");
}
