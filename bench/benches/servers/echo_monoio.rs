//! Peer of `examples/echo_server.rs` for comparison: the same echo server
//! on monoio (io_uring, thread per core: `monoio_main.rs`), one monoio task
//! per connection.
//!
//! ```sh
//! cargo run -p gofer-bench --release --example peer_echo_monoio -- --addr 127.0.0.1:0 --threads 2
//! ```

#[path = "args.rs"]
mod args;
#[path = "listen.rs"]
mod listen;
#[path = "monoio_main.rs"]
mod monoio_main;

use std::io;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use monoio::buf::IoBuf;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use monoio::time::timeout;

fn main() -> ExitCode {
    monoio_main::run(&args::Args::parse(), echo)
}

async fn echo(mut stream: TcpStream, idle: Duration) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = vec![0; 16 * 1024];
    loop {
        let (r, b) = timeout(idle, stream.read(buf)).await?;
        let n = r?;
        if n == 0 {
            return Ok(());
        }
        let (r, b) = timeout(idle, stream.write_all(b.slice(..n))).await?;
        r?;
        buf = b.into_inner();
    }
}
