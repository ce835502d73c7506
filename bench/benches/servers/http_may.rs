//! Peer of `examples/http_server.rs` for comparison: the same minimal
//! HTTP/1.1 server (the same `common/http.rs`, so the same parser and the
//! same responses) on may, one coroutine per connection, the accept loop in
//! a coroutine too. may's defaults are kept (workers pinned to CPUs, 32 KiB
//! stacks); the connection's buffers are on the heap.
//!
//! ```sh
//! cargo run -p gofer-bench --release --example peer_http_may -- --addr 127.0.0.1:0 --threads 2
//! ```

#[path = "args.rs"]
mod args;
#[path = "../../../examples/common/http.rs"]
mod http;

use std::io::{self, Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use may::net::{TcpListener, TcpStream};

fn main() -> ExitCode {
    let args = args::Args::parse();
    may::config().set_workers(args.threads());
    let listener = match TcpListener::bind(args.addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", args.addr);
            return ExitCode::FAILURE;
        }
    };
    args::listening(listener.local_addr().expect("a bound listener's address"));
    let idle = args.idle();
    // SAFETY: may's spawn is unsafe because a coroutine must not hold
    // thread-local references across switches; these do not use any.
    let accepter = unsafe { may::coroutine::spawn(move || accept_loop(&listener, idle)) };
    let _ = accepter.join();
    ExitCode::FAILURE
}

fn accept_loop(listener: &TcpListener, idle: Duration) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                // SAFETY: as in `main`.
                unsafe { may::coroutine::spawn(move || serve(stream, idle)) };
            }
            Err(e) => {
                eprintln!("accept: {e}");
                may::coroutine::sleep(Duration::from_millis(10));
            }
        }
    }
}

fn serve(mut stream: TcpStream, idle: Duration) -> io::Result<()> {
    stream.set_read_timeout(Some(idle))?;
    stream.set_write_timeout(Some(idle))?;
    stream.set_nodelay(true)?;
    let mut conn = http::Conn::new();
    loop {
        let n = stream.read(conn.spare())?;
        if n == 0 {
            return Ok(());
        }
        let open = conn.received(n);
        stream.write_all(&conn.out)?;
        conn.out.clear();
        if !open {
            return Ok(());
        }
    }
}
