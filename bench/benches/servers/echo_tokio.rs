//! Peer of `examples/echo_server.rs` for comparison: the same echo server
//! on tokio's multi-threaded runtime, one tokio task per connection, the
//! accept loop on a worker too.
//!
//! ```sh
//! cargo run -p gofer-bench --release --example peer_echo_tokio -- --addr 127.0.0.1:0 --threads 2
//! ```

#[path = "args.rs"]
mod args;
#[path = "listen.rs"]
mod listen;

use std::io;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

fn main() -> ExitCode {
    let args = args::Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads())
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let idle = args.idle();
    let r = rt.block_on(async move {
        let listener = TcpListener::from_std(listen::bind(args.addr, false)?)?;
        args::listening(listener.local_addr()?);
        tokio::spawn(accept_loop(listener, idle))
            .await
            .map_err(io::Error::other)
    });
    if let Err(e) = r {
        eprintln!("error: {e}");
    }
    ExitCode::FAILURE
}

async fn accept_loop(listener: TcpListener, idle: Duration) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(echo(stream, idle));
            }
            Err(e) => {
                eprintln!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

async fn echo(mut stream: TcpStream, idle: Duration) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = vec![0; 16 * 1024];
    loop {
        let n = timeout(idle, stream.read(&mut buf)).await??;
        if n == 0 {
            return Ok(());
        }
        timeout(idle, stream.write_all(&buf[..n])).await??;
    }
}
