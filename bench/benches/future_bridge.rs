//! The future bridge: a request and its reply between a gofer task and a
//! tokio task over `tokio::sync::mpsc` (capacity 1 each way), beside the same
//! round trip between two tokio tasks and between two gofer tasks over
//! gofer's own channels, in the same run.
//!
//! - `mpsc_round_trip/gofer_to_tokio`: a gofer task sends with
//!   `block_on_future(tx.send(x))` and waits with
//!   `block_on_future(rx.recv())`; a task of a 2-worker tokio runtime
//!   answers. One iteration is one request and its reply.
//! - `mpsc_round_trip/tokio_to_tokio`: both ends tokio tasks (the peer).
//! - `mpsc_round_trip/gofer_to_gofer`: both ends gofer tasks, still over
//!   `tokio::sync::mpsc` with `block_on_future`: the bridge's own cost,
//!   without a second runtime's threads to wake.
//! - `mpsc_round_trip/gofer_chan`: both ends gofer tasks, gofer channels.
//!
//! Between two runtimes, each round trip wakes a parked thread on each side
//! (a tokio worker, a gofer Processer) when the machine has nothing else
//! for them to do: that, not the bridge, is most of `gofer_to_tokio`.
//!
//! Run: `cargo bench -p gofer-bench --bench future_bridge`.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gofer::block_on_future;

fn round_trip(c: &mut Criterion) {
    let mut g = c.benchmark_group("mpsc_round_trip");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(4));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();

    g.bench_function("gofer_to_tokio", |b| {
        b.iter_custom(|iters| {
            let (req_tx, mut req_rx) = tokio::sync::mpsc::channel::<u64>(1);
            let (resp_tx, mut resp_rx) = tokio::sync::mpsc::channel::<u64>(1);
            let server = rt.spawn(async move {
                while let Some(x) = req_rx.recv().await {
                    if resp_tx.send(x + 1).await.is_err() {
                        break;
                    }
                }
            });
            let elapsed = sched
                .spawn(move || {
                    let start = Instant::now();
                    let mut x = 0;
                    for _ in 0..iters {
                        block_on_future(req_tx.send(x)).unwrap();
                        x = block_on_future(resp_rx.recv()).unwrap();
                    }
                    assert_eq!(x, iters);
                    start.elapsed()
                })
                .join()
                .unwrap();
            rt.block_on(server).unwrap();
            elapsed
        })
    });

    g.bench_function("tokio_to_tokio", |b| {
        b.iter_custom(|iters| {
            let (req_tx, mut req_rx) = tokio::sync::mpsc::channel::<u64>(1);
            let (resp_tx, mut resp_rx) = tokio::sync::mpsc::channel::<u64>(1);
            let server = rt.spawn(async move {
                while let Some(x) = req_rx.recv().await {
                    if resp_tx.send(x + 1).await.is_err() {
                        break;
                    }
                }
            });
            let client = rt.spawn(async move {
                let start = Instant::now();
                let mut x = 0;
                for _ in 0..iters {
                    req_tx.send(x).await.unwrap();
                    x = resp_rx.recv().await.unwrap();
                }
                assert_eq!(x, iters);
                start.elapsed()
            });
            let elapsed = rt.block_on(client).unwrap();
            rt.block_on(server).unwrap();
            elapsed
        })
    });

    g.bench_function("gofer_to_gofer", |b| {
        b.iter_custom(|iters| {
            let (req_tx, mut req_rx) = tokio::sync::mpsc::channel::<u64>(1);
            let (resp_tx, mut resp_rx) = tokio::sync::mpsc::channel::<u64>(1);
            let server = sched.spawn(move || {
                while let Some(x) = block_on_future(req_rx.recv()) {
                    if block_on_future(resp_tx.send(x + 1)).is_err() {
                        break;
                    }
                }
            });
            let elapsed = sched
                .spawn(move || {
                    let start = Instant::now();
                    let mut x = 0;
                    for _ in 0..iters {
                        block_on_future(req_tx.send(x)).unwrap();
                        x = block_on_future(resp_rx.recv()).unwrap();
                    }
                    assert_eq!(x, iters);
                    start.elapsed()
                })
                .join()
                .unwrap();
            server.join().unwrap();
            elapsed
        })
    });

    g.bench_function("gofer_chan", |b| {
        b.iter_custom(|iters| {
            let (req_tx, req_rx) = gofer::chan::bounded::<u64>(1);
            let (resp_tx, resp_rx) = gofer::chan::bounded::<u64>(1);
            let server = sched.spawn(move || {
                while let Ok(x) = req_rx.recv() {
                    if resp_tx.send(x + 1).is_err() {
                        break;
                    }
                }
            });
            let elapsed = sched
                .spawn(move || {
                    let start = Instant::now();
                    let mut x = 0;
                    for _ in 0..iters {
                        req_tx.send(x).unwrap();
                        x = resp_rx.recv().unwrap();
                    }
                    assert_eq!(x, iters);
                    start.elapsed()
                })
                .join()
                .unwrap();
            server.join().unwrap();
            elapsed
        })
    });
    g.finish();
    sched.shutdown();
}

criterion_group!(benches, round_trip);
criterion_main!(benches);
