//! Peer of `examples/http_server.rs` for comparison: the same minimal
//! HTTP/1.1 server (the same `common/http.rs`, so the same parser and the
//! same responses) on monoio (io_uring, thread per core: `monoio_main.rs`),
//! one monoio task per connection. monoio's reads and writes take their
//! buffers by value (the kernel owns them while an entry is in flight), so
//! a request is read into a buffer of the connection's and parsed in place
//! (`Conn::received_from`), and the responses are handed over and back.
//!
//! ```sh
//! cargo run -p gofer-bench --release --example peer_http_monoio -- --addr 127.0.0.1:0 --threads 2
//! ```

#[path = "args.rs"]
mod args;
#[path = "../../../examples/common/http.rs"]
mod http;
#[path = "listen.rs"]
mod listen;
#[path = "monoio_main.rs"]
mod monoio_main;

use std::io;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use monoio::time::timeout;

fn main() -> ExitCode {
    monoio_main::run(&args::Args::parse(), serve)
}

async fn serve(mut stream: TcpStream, idle: Duration) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut conn = http::Conn::new();
    let mut input = vec![0u8; 4096];
    loop {
        let (r, b) = timeout(idle, stream.read(input)).await?;
        input = b;
        let n = r?;
        if n == 0 {
            return Ok(());
        }
        let open = conn.received_from(&input[..n]);
        let (r, out) = timeout(idle, stream.write_all(std::mem::take(&mut conn.out))).await?;
        r?;
        conn.out = out;
        conn.out.clear();
        if !open {
            return Ok(());
        }
    }
}
