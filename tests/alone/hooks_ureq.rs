//! An unmodified blocking crate from crates.io, `ureq` (an HTTP client on
//! `std::net`), used from 500 gofer tasks against the `http_server`
//! example's server in this same process: every response is checked, no
//! Processer is ever judged blocked, no extra thread starts, and the
//! requests overlap.
//!
//! The server is the example's: its HTTP part is `examples/common/http.rs`,
//! included here, and `serve` below is the example's connection loop on
//! `gofer::net`, with one change: it waits [`DELAY`] before it answers.
//! A ureq call that held its thread would then hold it for at least that
//! long, past the client scheduler's `block_timeout`, and the Dispatcher
//! would count it; and 1,000 such calls could not finish within the bound
//! asserted below. Both schedulers judge a thread blocked by that timeout
//! alone (`kernel_block_detection(false)`): the kernel-state detector also
//! catches, rightly, sub-millisecond waits on the allocator's arena locks
//! and the kernel's mmap lock, which any multi-threaded program has and
//! which are not ureq's calls.
//!
//! Without the `hooks` feature this file compiles to nothing.
#![cfg(feature = "hooks")]

use crate::common;

#[path = "../../examples/common/http.rs"]
mod http;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::in_child;
use gofer::net::{TcpListener, TcpStream};
use gofer::Scheduler;

const TASKS: usize = 500;
/// How long the server waits before it answers a request.
const DELAY: Duration = Duration::from_millis(50);
/// A task running this long without switching is judged blocked.
const BLOCK_TIMEOUT: Duration = Duration::from_millis(25);

/// The example's connection loop (`examples/http_server.rs`), answering
/// after [`DELAY`].
fn serve(mut stream: TcpStream, idle: Duration) -> std::io::Result<()> {
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
        gofer::sleep(DELAY);
        stream.write_all(&conn.out)?;
        conn.out.clear();
        if !open {
            return Ok(());
        }
    }
}

fn sched(name: &str) -> Scheduler {
    // Up to 8 threads: were a call not hooked, the Dispatcher would find
    // the Processer blocked and start more.
    Scheduler::builder()
        .min_threads(2)
        .max_threads(8)
        .block_timeout(BLOCK_TIMEOUT)
        .kernel_block_detection(false)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

/// [`TASKS`] tasks on `clients`, each making two requests with ureq, as
/// any program would: half through `ureq::get`, the others through an
/// agent of their own with timeouts (`SO_RCVTIMEO`, `connect_timeout`).
/// Every response is checked.
fn round(clients: &Scheduler, addr: std::net::SocketAddr) {
    let handles: Vec<_> = (0..TASKS)
        .map(|i| {
            clients.spawn(move || {
                let agent = (i % 2 == 1).then(|| {
                    ureq::AgentBuilder::new()
                        .timeout(Duration::from_secs(30))
                        .build()
                });
                let get = |path: &str| {
                    let url = format!("http://{addr}{path}");
                    match &agent {
                        Some(a) => a.get(&url),
                        None => ureq::get(&url),
                    }
                };
                let resp = get("/")
                    .call()
                    .unwrap_or_else(|e| panic!("task {i}: GET /: {e}"));
                assert_eq!(resp.status(), 200);
                assert_eq!(resp.content_type(), "text/plain");
                assert_eq!(resp.into_string().expect("body"), "Hello, World!");
                match get(&format!("/task/{i}")).call() {
                    Err(ureq::Error::Status(404, resp)) => {
                        assert_eq!(resp.into_string().unwrap(), "Not Found");
                    }
                    other => panic!("task {i}: expected a 404, got {other:?}"),
                }
            })
        })
        .collect();
    let failed = handles
        .into_iter()
        .map(|h| h.join())
        .filter(Result::is_err)
        .count();
    assert_eq!(failed, 0, "{failed} tasks failed (their panics are above)");
}

#[test]
fn five_hundred_tasks_use_ureq_against_the_example_server_without_blocking_a_thread() {
    let _turn = crate::one_at_a_time();
    in_child(
        module_path!(),
        "five_hundred_tasks_use_ureq_against_the_example_server_without_blocking_a_thread",
        || {
            // Two descriptors per connection, a connection per request.
            common::grow_fd_table(8192);
            let server = sched("http");
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            let addr = listener.local_addr().unwrap();
            server.spawn(move || loop {
                let (stream, _) = listener.accept().expect("accept");
                gofer::spawn(move || serve(stream, Duration::from_secs(30)));
            });

            let clients = sched("ureq");
            let t = Instant::now();
            round(&clients, addr);
            let took = t.elapsed();
            let (cs, ss) = (clients.stats(), server.stats());
            // Held threads: 1,000 requests of DELAY each, at most 8 at a
            // time, would take 6.25 s at the very least.
            let serial = DELAY * (2 * TASKS as u32) / 8;
            println!(
                "figure: {TASKS} tasks x 2 ureq requests answered after {DELAY:?} each: \
                 {took:?} (held threads: over {serial:?}); blocked_detections: clients {}, \
                 server {}; threads started: clients {}, server {}",
                cs.blocked_detections,
                ss.blocked_detections,
                cs.threads_started,
                ss.threads_started
            );
            assert_eq!(cs.blocked_detections, 0, "clients: {cs:?}");
            assert_eq!(ss.blocked_detections, 0, "server: {ss:?}");
            assert_eq!(cs.threads_started, 2, "clients: {cs:?}");
            assert_eq!(ss.threads_started, 2, "server: {ss:?}");
            assert!(
                took < serial / 2,
                "took {took:?}: the requests did not overlap"
            );
            clients.shutdown();
        },
    );
}
