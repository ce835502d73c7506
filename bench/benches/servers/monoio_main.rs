//! The monoio peers' main loop, as thread-per-core servers run: one thread
//! per worker, each with its own monoio runtime on its own io_uring
//! (`IoUringDriver`, no epoll fallback) and its own listener on the shared
//! port (`SO_REUSEPORT`, `listen.rs`), so the kernel spreads connections
//! over the threads and a connection stays on the thread that accepted it.

use std::future::Future;
use std::io;
use std::process::ExitCode;
use std::time::Duration;

use monoio::net::{TcpListener, TcpStream};

use crate::{args, listen};

/// Serves every connection accepted with `serve` (given the idle timeout)
/// on `args.threads()` threads until killed.
pub fn run<F, Fut>(args: &args::Args, serve: F) -> ExitCode
where
    F: Fn(TcpStream, Duration) -> Fut + Copy + Send + 'static,
    Fut: Future<Output = io::Result<()>> + 'static,
{
    // The first listener resolves port 0; the others bind its address.
    let first = match listen::bind(args.addr, true) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let addr = first.local_addr().expect("local_addr");
    let mut listeners = vec![first];
    for _ in 1..args.threads() {
        match listen::bind(addr, true) {
            Ok(l) => listeners.push(l),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    args::listening(addr);
    let idle = args.idle();
    let threads: Vec<_> = listeners
        .into_iter()
        .map(|l| {
            std::thread::spawn(move || {
                let mut rt = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
                    .enable_timer()
                    .build()
                    .expect("a monoio runtime on io_uring");
                rt.block_on(async move {
                    let listener = TcpListener::from_std(l).expect("a monoio listener");
                    accept_loop(listener, idle, serve).await
                })
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    ExitCode::FAILURE
}

async fn accept_loop<F, Fut>(listener: TcpListener, idle: Duration, serve: F)
where
    F: Fn(TcpStream, Duration) -> Fut,
    Fut: Future<Output = io::Result<()>> + 'static,
{
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                monoio::spawn(serve(stream, idle));
            }
            Err(e) => {
                eprintln!("accept: {e}");
                monoio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}
