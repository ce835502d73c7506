//! gofer channels from async code, and `Select`, beside their peers in the
//! same run.
//!
//! - `async_round_trip/*`: a request and its reply over two channels of
//!   capacity 1. One iteration is one round trip.
//!   - `tokio_to_gofer_task`: a task of a 2-worker tokio runtime awaits
//!     `send_async`/`recv_async` on gofer channels; a gofer task answers
//!     with plain `recv`/`send`.
//!   - `tokio_mpsc_to_gofer_task`: the same two sides over
//!     `tokio::sync::mpsc`, the gofer task using `block_on_future`.
//!   - `tokio_to_tokio_gofer_chan`: two tokio tasks over gofer channels
//!     (`recv_async`/`send_async` only).
//!   - `tokio_to_tokio_mpsc`: two tokio tasks over `tokio::sync::mpsc`.
//! - `select_16/*`: one receive through a selection over 16 channels, one
//!   of them holding values, on one thread.
//!   - `gofer_select`: gofer's `Select`.
//!   - `crossbeam_select`: crossbeam-channel's `Select`.
//!
//! Run: `cargo bench -p gofer-bench --bench chan_async`.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn round_trip(c: &mut Criterion) {
    let mut g = c.benchmark_group("async_round_trip");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(4));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();

    g.bench_function("tokio_to_gofer_task", |b| {
        b.iter_custom(|iters| {
            let (req_tx, req_rx) = gofer::chan::bounded::<u64>(1);
            let (resp_tx, resp_rx) = gofer::chan::bounded::<u64>(1);
            let server = sched.spawn(move || {
                for x in req_rx.iter() {
                    if resp_tx.send(x + 1).is_err() {
                        break;
                    }
                }
            });
            let elapsed = rt.block_on(rt.spawn(async move {
                let start = Instant::now();
                let mut x = 0;
                for _ in 0..iters {
                    req_tx.send_async(x).await.unwrap();
                    x = resp_rx.recv_async().await.unwrap();
                }
                assert_eq!(x, iters);
                start.elapsed()
            }));
            server.join().unwrap();
            elapsed.unwrap()
        })
    });

    g.bench_function("tokio_mpsc_to_gofer_task", |b| {
        b.iter_custom(|iters| {
            let (req_tx, mut req_rx) = tokio::sync::mpsc::channel::<u64>(1);
            let (resp_tx, mut resp_rx) = tokio::sync::mpsc::channel::<u64>(1);
            let server = sched.spawn(move || {
                while let Some(x) = gofer::block_on_future(req_rx.recv()) {
                    if gofer::block_on_future(resp_tx.send(x + 1)).is_err() {
                        break;
                    }
                }
            });
            let elapsed = rt.block_on(rt.spawn(async move {
                let start = Instant::now();
                let mut x = 0;
                for _ in 0..iters {
                    req_tx.send(x).await.unwrap();
                    x = resp_rx.recv().await.unwrap();
                }
                assert_eq!(x, iters);
                start.elapsed()
            }));
            server.join().unwrap();
            elapsed.unwrap()
        })
    });

    g.bench_function("tokio_to_tokio_gofer_chan", |b| {
        b.iter_custom(|iters| {
            let (req_tx, req_rx) = gofer::chan::bounded::<u64>(1);
            let (resp_tx, resp_rx) = gofer::chan::bounded::<u64>(1);
            let server = rt.spawn(async move {
                while let Ok(x) = req_rx.recv_async().await {
                    if resp_tx.send_async(x + 1).await.is_err() {
                        break;
                    }
                }
            });
            let elapsed = rt.block_on(rt.spawn(async move {
                let start = Instant::now();
                let mut x = 0;
                for _ in 0..iters {
                    req_tx.send_async(x).await.unwrap();
                    x = resp_rx.recv_async().await.unwrap();
                }
                assert_eq!(x, iters);
                start.elapsed()
            }));
            rt.block_on(server).unwrap();
            elapsed.unwrap()
        })
    });

    g.bench_function("tokio_to_tokio_mpsc", |b| {
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
            let elapsed = rt.block_on(rt.spawn(async move {
                let start = Instant::now();
                let mut x = 0;
                for _ in 0..iters {
                    req_tx.send(x).await.unwrap();
                    x = resp_rx.recv().await.unwrap();
                }
                assert_eq!(x, iters);
                start.elapsed()
            }));
            rt.block_on(server).unwrap();
            elapsed.unwrap()
        })
    });
    g.finish();
    sched.shutdown();
}

fn select_16(c: &mut Criterion) {
    let mut g = c.benchmark_group("select_16");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(3));

    g.bench_function("gofer_select", |b| {
        let chans: Vec<_> = (0..16).map(|_| gofer::chan::unbounded::<u64>()).collect();
        let mut sel = gofer::chan::Select::new();
        for (_, rx) in &chans {
            sel.recv(rx);
        }
        b.iter(|| {
            chans[7].0.send(1).unwrap();
            let oper = sel.select();
            let i = oper.index();
            oper.recv(&chans[i].1).unwrap()
        })
    });

    g.bench_function("crossbeam_select", |b| {
        let chans: Vec<_> = (0..16)
            .map(|_| crossbeam_channel::unbounded::<u64>())
            .collect();
        let mut sel = crossbeam_channel::Select::new();
        for (_, rx) in &chans {
            sel.recv(rx);
        }
        b.iter(|| {
            chans[7].0.send(1).unwrap();
            let oper = sel.select();
            let i = oper.index();
            oper.recv(&chans[i].1).unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, round_trip, select_16);
criterion_main!(benches);
