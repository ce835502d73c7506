//! Channel ping-pong: the round trip between two tasks on ONE Processer
//! (gofer), next to tokio (current_thread runtime), may (one worker) and
//! crossbeam-channel (two OS threads), measured in the same run.
//!
//! One iteration is one round trip: A sends a value to B on one channel, B
//! sends it back on another. Each measurement spawns a fresh driver task A;
//! the echo task B lives for the whole benchmark. Groups: `rendezvous`
//! (capacity 0), `bounded1` (capacity 1), `unbounded`.
//!
//! Run with `cargo bench -p gofer-bench --bench chan`.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};

/// gofer: two tasks on a one-Processer scheduler.
/// `cap`: `None` for unbounded channels.
fn gofer_pingpong(c: &mut Criterion, group: &str, cap: Option<usize>, select_echo: bool) {
    let sched = gofer::Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .build()
        .unwrap();
    let make = || match cap {
        Some(cap) => gofer::chan::bounded::<u64>(cap),
        None => gofer::chan::unbounded::<u64>(),
    };
    let (ping_tx, ping_rx) = make();
    let (pong_tx, pong_rx) = make();
    let echo = if select_echo {
        // The echo waits in a two-arm select (one arm never fires).
        let (_never_tx, never_rx) = gofer::chan::bounded::<u64>(0);
        sched.spawn(move || {
            let _keep = _never_tx;
            loop {
                let v = gofer::select! {
                    recv(ping_rx) -> v => match v { Ok(v) => v, Err(_) => return },
                    recv(never_rx) -> _ => unreachable!(),
                };
                if pong_tx.send(v).is_err() {
                    return;
                }
            }
        })
    } else {
        sched.spawn(move || {
            for v in ping_rx.iter() {
                if pong_tx.send(v).is_err() {
                    return;
                }
            }
        })
    };
    let name = if select_echo { "gofer_select" } else { "gofer" };
    c.benchmark_group(group).bench_function(name, |b| {
        b.iter_custom(|iters| {
            let (ping_tx, pong_rx) = (ping_tx.clone(), pong_rx.clone());
            sched
                .spawn(move || {
                    let start = Instant::now();
                    for i in 0..iters {
                        ping_tx.send(i).unwrap();
                        pong_rx.recv().unwrap();
                    }
                    start.elapsed()
                })
                .join()
                .unwrap()
        })
    });
    drop((ping_tx, pong_rx));
    echo.join().unwrap();
    sched.shutdown();
}

/// tokio: two tasks on a current_thread runtime, mpsc channels of size 1.
fn tokio_mpsc(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (ping_tx, mut ping_rx) = tokio::sync::mpsc::channel::<u64>(1);
    let (pong_tx, pong_rx) = tokio::sync::mpsc::channel::<u64>(1);
    rt.spawn(async move {
        while let Some(v) = ping_rx.recv().await {
            if pong_tx.send(v).await.is_err() {
                return;
            }
        }
    });
    let pong_rx = std::sync::Arc::new(tokio::sync::Mutex::new(pong_rx));
    c.benchmark_group("bounded1")
        .bench_function("tokio_mpsc", |b| {
            b.iter_custom(|iters| {
                let (ping_tx, pong_rx) = (ping_tx.clone(), pong_rx.clone());
                rt.block_on(async move {
                    let mut pong_rx = pong_rx.lock().await;
                    let start = Instant::now();
                    for i in 0..iters {
                        ping_tx.send(i).await.unwrap();
                        pong_rx.recv().await.unwrap();
                    }
                    start.elapsed()
                })
            })
        });
}

/// tokio: two tasks on a current_thread runtime, unbounded mpsc channels.
fn tokio_unbounded(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (ping_tx, mut ping_rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
    let (pong_tx, pong_rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
    rt.spawn(async move {
        while let Some(v) = ping_rx.recv().await {
            if pong_tx.send(v).is_err() {
                return;
            }
        }
    });
    let pong_rx = std::sync::Arc::new(tokio::sync::Mutex::new(pong_rx));
    c.benchmark_group("unbounded")
        .bench_function("tokio_mpsc", |b| {
            b.iter_custom(|iters| {
                let (ping_tx, pong_rx) = (ping_tx.clone(), pong_rx.clone());
                rt.block_on(async move {
                    let mut pong_rx = pong_rx.lock().await;
                    let start = Instant::now();
                    for i in 0..iters {
                        ping_tx.send(i).unwrap();
                        pong_rx.recv().await.unwrap();
                    }
                    start.elapsed()
                })
            })
        });
}

/// tokio: each round trip sends a fresh oneshot sender to the echo task,
/// which answers on it (request/response style).
fn tokio_oneshot(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    type Req = (u64, tokio::sync::oneshot::Sender<u64>);
    let (req_tx, mut req_rx) = tokio::sync::mpsc::channel::<Req>(1);
    rt.spawn(async move {
        while let Some((v, reply)) = req_rx.recv().await {
            let _ = reply.send(v);
        }
    });
    c.benchmark_group("bounded1")
        .bench_function("tokio_oneshot", |b| {
            b.iter_custom(|iters| {
                let req_tx = req_tx.clone();
                rt.block_on(async move {
                    let start = Instant::now();
                    for i in 0..iters {
                        let (tx, rx) = tokio::sync::oneshot::channel();
                        req_tx.send((i, tx)).await.unwrap();
                        rx.await.unwrap();
                    }
                    start.elapsed()
                })
            })
        });
}

/// may: two coroutines on one worker, may's mpsc channels (unbounded:
/// may has no bounded mpsc; it is listed under `bounded1` too, as the
/// nearest it has).
fn may_mpsc(c: &mut Criterion, group: &str) {
    may::config().set_workers(1);
    let (ping_tx, ping_rx) = may::sync::mpsc::channel::<u64>();
    let (pong_tx, pong_rx) = may::sync::mpsc::channel::<u64>();
    may::go!(move || {
        while let Ok(v) = ping_rx.recv() {
            if pong_tx.send(v).is_err() {
                return;
            }
        }
    });
    let pong_rx = std::sync::Arc::new(std::sync::Mutex::new(pong_rx));
    c.benchmark_group(group).bench_function("may_mpsc", |b| {
        b.iter_custom(|iters| {
            let (ping_tx, pong_rx) = (ping_tx.clone(), pong_rx.clone());
            may::go!(move || {
                let pong_rx = pong_rx.lock().unwrap();
                let start = Instant::now();
                for i in 0..iters {
                    ping_tx.send(i).unwrap();
                    pong_rx.recv().unwrap();
                }
                start.elapsed()
            })
            .join()
            .unwrap()
        })
    });
}

/// crossbeam-channel: two OS threads.
fn crossbeam_threads(c: &mut Criterion, group: &str, cap: usize) {
    let (ping_tx, ping_rx) = crossbeam_channel::bounded::<u64>(cap);
    let (pong_tx, pong_rx) = crossbeam_channel::bounded::<u64>(cap);
    let echo = std::thread::spawn(move || {
        for v in ping_rx.iter() {
            if pong_tx.send(v).is_err() {
                return;
            }
        }
    });
    c.benchmark_group(group)
        .bench_function("crossbeam_threads", |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for i in 0..iters {
                    ping_tx.send(i).unwrap();
                    pong_rx.recv().unwrap();
                }
                start.elapsed()
            })
        });
    drop(ping_tx);
    echo.join().unwrap();
}

fn rendezvous(c: &mut Criterion) {
    gofer_pingpong(c, "rendezvous", Some(0), false);
    gofer_pingpong(c, "rendezvous", Some(0), true);
    crossbeam_threads(c, "rendezvous", 0);
}

fn bounded1(c: &mut Criterion) {
    gofer_pingpong(c, "bounded1", Some(1), false);
    tokio_mpsc(c);
    tokio_oneshot(c);
    may_mpsc(c, "bounded1");
    crossbeam_threads(c, "bounded1", 1);
}

fn unbounded(c: &mut Criterion) {
    gofer_pingpong(c, "unbounded", None, false);
    tokio_unbounded(c);
    may_mpsc(c, "unbounded");
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

criterion_group! {
    name = benches;
    config = config();
    targets = rendezvous, bounded1, unbounded
}
criterion_main!(benches);
