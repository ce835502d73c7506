//! Peer of `examples/http_server.rs` for comparison: hyper 1.x's HTTP/1.1
//! server on tokio's multi-threaded runtime, as its documentation writes a
//! hello-world server: one tokio task per connection running
//! `http1::Builder::serve_connection` with a `service_fn`. hyper parses and
//! writes the messages itself (it adds a `Date` header); keep-alive is on,
//! as it is by default. `GET /` answers `200` with `Hello, World!` as
//! `text/plain`, anything else `404`.
//!
//! ```sh
//! cargo run -p gofer-bench --release --example peer_http_hyper -- --addr 127.0.0.1:0 --threads 2
//! ```

#[path = "args.rs"]
mod args;
#[path = "listen.rs"]
mod listen;

use std::convert::Infallible;
use std::io;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

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
        // The accept loop runs on a worker, like gofer's accept task.
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
                let _ = stream.set_nodelay(true);
                tokio::spawn(async move {
                    // `header_read_timeout` bounds the wait for a request
                    // head, idle time between requests included.
                    let _ = http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(idle)
                        .serve_connection(TokioIo::new(stream), service_fn(hello))
                        .await;
                });
            }
            Err(e) => {
                eprintln!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

async fn hello(req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let found = matches!(*req.method(), Method::GET | Method::HEAD) && req.uri().path() == "/";
    let (status, body) = if found {
        (StatusCode::OK, "Hello, World!")
    } else {
        (StatusCode::NOT_FOUND, "Not Found")
    };
    Ok(Response::builder()
        .status(status)
        .header("Content-Type", "text/plain")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .expect("a valid response"))
}
