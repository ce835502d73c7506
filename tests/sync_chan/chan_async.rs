//! Channels from async code: `Receiver::recv_async` and `Sender::send_async`
//! driven by tokio (current_thread and multi_thread), `futures`'s executor
//! and gofer's `block_on_future`, talking to gofer tasks both ways; cancel
//! safety of dropped futures under racing peers; rendezvous channels;
//! disconnection; and a waker that changes between polls.
//!
//! Every scenario that waits runs in a child process under a watchdog, so a
//! lost wake-up fails the test instead of hanging it.

use crate::common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use common::{in_child, wait_until};
use gofer::chan::{bounded, unbounded, Receiver, RecvError, Sender};
use gofer::{block_on_future, Scheduler};

const ITEMS: u64 = 10_000;

fn sched(threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads)
        .build()
        .expect("valid scheduler config")
}

fn current_thread_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn multi_thread_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The three flavours, each a (name, sender, receiver).
fn flavours<T>() -> Vec<(&'static str, Sender<T>, Receiver<T>)> {
    let (t0, r0) = bounded(0);
    let (t1, r1) = bounded(1);
    let (t8, r8) = bounded(8);
    let (tu, ru) = unbounded();
    vec![
        ("rendezvous", t0, r0),
        ("bounded(1)", t1, r1),
        ("bounded(8)", t8, r8),
        ("unbounded", tu, ru),
    ]
}

/// `ITEMS` values 0.. split over `tasks` gofer tasks, sent on `tx`.
fn spawn_senders(s: &Scheduler, tx: &Sender<u64>, tasks: u64) -> Vec<gofer::JoinHandle<()>> {
    (0..tasks)
        .map(|t| {
            let tx = tx.clone();
            s.spawn(move || {
                let mut i = t;
                while i < ITEMS {
                    tx.send(i).unwrap();
                    i += tasks;
                }
            })
        })
        .collect()
}

/// Checks that `got` holds every value of 0..ITEMS exactly once.
fn assert_each_once(mut got: Vec<u64>) {
    assert_eq!(got.len() as u64, ITEMS, "values received");
    got.sort_unstable();
    for (i, v) in got.iter().enumerate() {
        assert_eq!(*v, i as u64, "every value exactly once");
    }
}

async fn recv_all(rx: Receiver<u64>) -> Vec<u64> {
    let mut got = Vec::new();
    while let Ok(v) = rx.recv_async().await {
        got.push(v);
    }
    got
}

async fn send_all(tx: Sender<u64>) {
    for i in 0..ITEMS {
        tx.send_async(i).await.unwrap();
    }
}

/// gofer tasks receiving `ITEMS` values into one vector.
fn spawn_receivers(
    s: &Scheduler,
    rx: &Receiver<u64>,
    tasks: usize,
) -> Vec<gofer::JoinHandle<Vec<u64>>> {
    (0..tasks)
        .map(|_| {
            let rx = rx.clone();
            s.spawn(move || rx.iter().collect::<Vec<u64>>())
        })
        .collect()
}

fn join_received(hs: Vec<gofer::JoinHandle<Vec<u64>>>) -> Vec<u64> {
    hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
}

#[test]
fn tokio_current_thread_receives_from_gofer_tasks() {
    in_child(
        module_path!(),
        "tokio_current_thread_receives_from_gofer_tasks",
        || {
            let s = sched(2);
            let rt = current_thread_rt();
            for (name, tx, rx) in flavours::<u64>() {
                let senders = spawn_senders(&s, &tx, 4);
                drop(tx);
                let got = rt.block_on(recv_all(rx));
                for h in senders {
                    h.join().unwrap();
                }
                println!("{name}: {} values", got.len());
                assert_each_once(got);
            }
            s.shutdown();
        },
    );
}

#[test]
fn tokio_current_thread_sends_to_gofer_tasks() {
    in_child(
        module_path!(),
        "tokio_current_thread_sends_to_gofer_tasks",
        || {
            let s = sched(2);
            let rt = current_thread_rt();
            for (name, tx, rx) in flavours::<u64>() {
                let receivers = spawn_receivers(&s, &rx, 3);
                drop(rx);
                rt.block_on(send_all(tx));
                let got = join_received(receivers);
                println!("{name}: {} values", got.len());
                assert_each_once(got);
            }
            s.shutdown();
        },
    );
}

#[test]
fn tokio_multi_thread_both_ways_with_several_async_peers() {
    in_child(
        module_path!(),
        "tokio_multi_thread_both_ways_with_several_async_peers",
        || {
            let s = sched(2);
            let rt = multi_thread_rt();
            for (name, tx, rx) in flavours::<u64>() {
                // gofer tasks -> several tokio tasks.
                let senders = spawn_senders(&s, &tx, 4);
                drop(tx);
                let got = rt.block_on(async {
                    let hs: Vec<_> = (0..4).map(|_| tokio::spawn(recv_all(rx.clone()))).collect();
                    drop(rx);
                    let mut got = Vec::new();
                    for h in hs {
                        got.extend(h.await.unwrap());
                    }
                    got
                });
                for h in senders {
                    h.join().unwrap();
                }
                println!("{name} to tokio: {} values", got.len());
                assert_each_once(got);
            }
            for (name, tx, rx) in flavours::<u64>() {
                // several tokio tasks -> gofer tasks.
                let receivers = spawn_receivers(&s, &rx, 3);
                drop(rx);
                rt.block_on(async {
                    let hs: Vec<_> = (0..4u64)
                        .map(|t| {
                            let tx = tx.clone();
                            tokio::spawn(async move {
                                let mut i = t;
                                while i < ITEMS {
                                    tx.send_async(i).await.unwrap();
                                    i += 4;
                                }
                            })
                        })
                        .collect();
                    for h in hs {
                        h.await.unwrap();
                    }
                });
                drop(tx);
                let got = join_received(receivers);
                println!("tokio to {name}: {} values", got.len());
                assert_each_once(got);
            }
            s.shutdown();
        },
    );
}

#[test]
fn futures_block_on_both_ways() {
    in_child(module_path!(), "futures_block_on_both_ways", || {
        for (name, tx, rx) in flavours::<u64>() {
            let sender = std::thread::spawn({
                let tx = tx.clone();
                move || {
                    for i in 0..ITEMS {
                        tx.send(i).unwrap();
                    }
                }
            });
            drop(tx);
            let got = futures::executor::block_on(recv_all(rx));
            sender.join().unwrap();
            println!("{name}: {} values", got.len());
            assert_each_once(got);
        }
        for (_, tx, rx) in flavours::<u64>() {
            let receiver = std::thread::spawn(move || rx.iter().collect::<Vec<_>>());
            futures::executor::block_on(send_all(tx));
            assert_each_once(receiver.join().unwrap());
        }
    });
}

#[test]
fn block_on_future_inside_tasks_both_ways() {
    in_child(
        module_path!(),
        "block_on_future_inside_tasks_both_ways",
        || {
            let s = sched(2);
            for (name, tx, rx) in flavours::<u64>() {
                // A task awaits values that plain tasks send...
                let senders = spawn_senders(&s, &tx, 2);
                drop(tx);
                let got = s
                    .spawn(move || block_on_future(recv_all(rx)))
                    .join()
                    .unwrap();
                for h in senders {
                    h.join().unwrap();
                }
                println!("{name}: {} values", got.len());
                assert_each_once(got);
            }
            for (_, tx, rx) in flavours::<u64>() {
                // ...and one sends with send_async to tasks receiving.
                let receivers = spawn_receivers(&s, &rx, 2);
                drop(rx);
                s.spawn(move || block_on_future(send_all(tx)))
                    .join()
                    .unwrap();
                assert_each_once(join_received(receivers));
            }
            // Outside a task, block_on_future blocks the thread.
            let (tx, rx) = bounded::<u64>(0);
            let h = s.spawn(move || tx.send(7).unwrap());
            assert_eq!(block_on_future(rx.recv_async()), Ok(7));
            h.join().unwrap();
            s.shutdown();
        },
    );
}

#[test]
fn rendezvous_channel_between_async_and_tasks_both_ways() {
    in_child(
        module_path!(),
        "rendezvous_channel_between_async_and_tasks_both_ways",
        || {
            let s = sched(2);
            let rt = current_thread_rt();
            // A request/response pair of rendezvous channels: a tokio task
            // asks, a gofer task answers, 1,000 times.
            let (req_tx, req_rx) = bounded::<u64>(0);
            let (resp_tx, resp_rx) = bounded::<u64>(0);
            let server = s.spawn(move || {
                for q in req_rx.iter() {
                    resp_tx.send(q * 2).unwrap();
                }
            });
            rt.block_on(async {
                for i in 0..1000u64 {
                    req_tx.send_async(i).await.unwrap();
                    assert_eq!(resp_rx.recv_async().await, Ok(i * 2));
                }
            });
            drop(req_tx);
            server.join().unwrap();
            s.shutdown();
        },
    );
}

/// A value that counts its drops.
struct Counted {
    id: u64,
    drops: Arc<AtomicUsize>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

fn noop_cx() -> Context<'static> {
    Context::from_waker(futures::task::noop_waker_ref())
}

/// Spins a pseudo-random short while, to spread the moment of a drop
/// around the moment a peer acts.
fn jitter(seed: &mut u64) {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    for _ in 0..(*seed % 2000) {
        std::hint::spin_loop();
    }
}

#[test]
fn dropped_recv_future_under_a_racing_sender_loses_no_value() {
    in_child(
        module_path!(),
        "dropped_recv_future_under_a_racing_sender_loses_no_value",
        || {
            const ROUNDS: u64 = 3000;
            for (name, tx, rx) in flavours::<u64>() {
                // The sender sends value i when told to; the receiver has a
                // pending recv_async future registered at that moment and
                // drops it at a random time around the send. Whether the
                // value was handed to the future or not, the next recv must
                // find it.
                let go = Arc::new(Barrier::new(2));
                let sender = std::thread::spawn({
                    let go = go.clone();
                    move || {
                        for i in 0..ROUNDS {
                            go.wait();
                            tx.send(i).unwrap();
                        }
                    }
                });
                let mut seed = 0x9E37_79B9_7F4A_7C15u64;
                let mut handed_to_future = 0;
                let mut given_back = 0;
                for i in 0..ROUNDS {
                    let mut fut = rx.recv_async();
                    let mut cx = noop_cx();
                    assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
                    go.wait();
                    jitter(&mut seed);
                    // On even rounds, one more poll may see the value: then it
                    // is ours. Odd rounds drop the future unpolled.
                    if i % 2 == 0 {
                        if let Poll::Ready(v) = Pin::new(&mut fut).poll(&mut cx) {
                            assert_eq!(v, Ok(i));
                            handed_to_future += 1;
                            continue;
                        }
                    }
                    jitter(&mut seed);
                    drop(fut);
                    if name == "rendezvous" && rx.len() == 1 {
                        // Only a value given back waits in a rendezvous
                        // channel: the dropped future had been handed it.
                        given_back += 1;
                    }
                    assert_eq!(rx.recv(), Ok(i), "{name}: value {i} after a dropped future");
                }
                sender.join().unwrap();
                assert!(rx.try_recv().is_err(), "{name}: nothing left over");
                println!(
                    "figure: {name}: {handed_to_future} of {ROUNDS} taken by the future's own poll, {given_back} seen given back by a drop (visible on rendezvous only)"
                );
            }
        },
    );
}

#[test]
fn dropped_recv_futures_with_many_senders_keep_every_value() {
    in_child(
        module_path!(),
        "dropped_recv_futures_with_many_senders_keep_every_value",
        || {
            // Four sender threads, a receiver that keeps starting and dropping
            // futures (and completing some): sent == received, each once.
            for (name, tx, rx) in flavours::<u64>() {
                let senders: Vec<_> = (0..4u64)
                    .map(|t| {
                        let tx = tx.clone();
                        std::thread::spawn(move || {
                            let mut i = t;
                            while i < ITEMS {
                                tx.send(i).unwrap();
                                i += 4;
                            }
                        })
                    })
                    .collect();
                drop(tx);
                let mut got = Vec::new();
                let mut seed = 0x2545_F491_4F6C_DD1Du64;
                let mut cx = noop_cx();
                loop {
                    let mut fut = rx.recv_async();
                    match Pin::new(&mut fut).poll(&mut cx) {
                        Poll::Ready(Ok(v)) => got.push(v),
                        Poll::Ready(Err(RecvError)) => break,
                        Poll::Pending => {
                            jitter(&mut seed);
                            if let Poll::Ready(r) = Pin::new(&mut fut).poll(&mut cx) {
                                match r {
                                    Ok(v) => got.push(v),
                                    Err(RecvError) => break,
                                }
                            }
                            // Else dropped here, maybe holding a value.
                        }
                    }
                }
                for h in senders {
                    h.join().unwrap();
                }
                println!("{name}: {} values", got.len());
                assert_each_once(got);
            }
        },
    );
}

#[test]
fn dropped_send_future_on_a_full_channel_sends_nothing() {
    let drops = Arc::new(AtomicUsize::new(0));
    let counted = |id| Counted {
        id,
        drops: drops.clone(),
    };
    let (tx, rx) = bounded::<Counted>(1);
    tx.send(counted(1)).unwrap();
    let mut fut = tx.send_async(counted(2));
    assert!(Pin::new(&mut fut).poll(&mut noop_cx()).is_pending());
    drop(fut);
    // The value went with the future, and was not sent.
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert_eq!(rx.try_recv().map(|c| c.id).ok(), Some(1));
    assert!(rx.try_recv().is_err(), "the dropped send delivered nothing");
    // The channel still works: the slot it waited for is free.
    futures::executor::block_on(tx.send_async(counted(3))).unwrap();
    assert_eq!(rx.recv().map(|c| c.id).ok(), Some(3));
    assert_eq!(drops.load(Ordering::SeqCst), 3);
}

#[test]
fn dropped_send_futures_under_a_racing_receiver_send_or_drop_each_value_once() {
    in_child(
        module_path!(),
        "dropped_send_futures_under_a_racing_receiver_send_or_drop_each_value_once",
        || {
            const ROUNDS: u64 = 3000;
            const FILLER: u64 = u64::MAX;
            for cap in [0usize, 1] {
                let drops = Arc::new(AtomicUsize::new(0));
                let mut made = 0usize;
                let (tx, rx) = bounded::<Counted>(cap);
                let go = Arc::new(Barrier::new(2));
                // The receiver tries to take one value per round, racing the
                // drop of the send future.
                let receiver = std::thread::spawn({
                    let go = go.clone();
                    move || {
                        let mut got = Vec::new();
                        for _ in 0..ROUNDS {
                            go.wait();
                            if let Ok(c) = rx.recv_timeout(Duration::from_micros(50)) {
                                got.push(c.id);
                            }
                            go.wait();
                        }
                        got
                    }
                });
                let mut seed = 0xDEAD_BEEF_1234_5678u64;
                let mut seen_sent = Vec::new();
                for i in 0..ROUNDS {
                    if cap == 1 {
                        // Keep the channel full, so the send has to wait.
                        loop {
                            made += 1;
                            let filler = Counted {
                                id: FILLER,
                                drops: drops.clone(),
                            };
                            if tx.try_send(filler).is_err() {
                                break;
                            }
                        }
                    }
                    made += 1;
                    let mut fut = tx.send_async(Counted {
                        id: i,
                        drops: drops.clone(),
                    });
                    let mut cx = noop_cx();
                    let mut done = Pin::new(&mut fut).poll(&mut cx).is_ready();
                    go.wait();
                    jitter(&mut seed);
                    if !done {
                        if let Poll::Ready(r) = Pin::new(&mut fut).poll(&mut cx) {
                            assert!(r.is_ok(), "the receiver is alive");
                            done = true;
                        }
                    }
                    if done {
                        seen_sent.push(i);
                    }
                    drop(fut);
                    go.wait();
                }
                drop(tx);
                let got = receiver.join().unwrap();
                let real: Vec<u64> = got.iter().copied().filter(|&id| id != FILLER).collect();
                let mut unique = real.clone();
                unique.sort_unstable();
                unique.dedup();
                assert_eq!(
                    unique.len(),
                    real.len(),
                    "cap {cap}: no value received twice"
                );
                assert!(real.iter().all(|&id| id < ROUNDS));
                // A future that completed sent its value: it was received
                // (the receiver took values in order, one per round, and the
                // channel is dropped with what it still held).
                for i in &seen_sent {
                    assert!(
                        unique.binary_search(i).is_ok() || cap > 0,
                        "cap {cap}: value {i} reported sent on a rendezvous channel was received"
                    );
                }
                // Every value made was dropped exactly once: received and
                // dropped by the receiver, dropped with its future, or with
                // the channel. None twice, none leaked.
                assert_eq!(
                    drops.load(Ordering::SeqCst),
                    made,
                    "cap {cap}: one drop per value"
                );
                println!(
                    "figure: cap {cap}: {} of {ROUNDS} delivered, {} seen complete by a poll",
                    real.len(),
                    seen_sent.len()
                );
            }
        },
    );
}

#[test]
fn disconnection_fails_pending_and_new_futures() {
    in_child(
        module_path!(),
        "disconnection_fails_pending_and_new_futures",
        || {
            // A pending recv_async wakes with RecvError when the last sender goes.
            let (tx, rx) = bounded::<u64>(0);
            let waker = Arc::new(CountingWaker::default());
            let w = Waker::from(waker.clone());
            let mut cx = Context::from_waker(&w);
            let mut fut = rx.recv_async();
            assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
            drop(tx);
            assert!(waker.count() >= 1, "disconnection wakes the future");
            assert_eq!(
                Pin::new(&mut fut).poll(&mut cx),
                Poll::Ready(Err(RecvError))
            );
            // A new one fails at once.
            assert_eq!(futures::executor::block_on(rx.recv_async()), Err(RecvError));

            // Values buffered before disconnection are still received.
            let (tx, rx) = unbounded::<u64>();
            tx.send(1).unwrap();
            drop(tx);
            futures::executor::block_on(async {
                assert_eq!(rx.recv_async().await, Ok(1));
                assert_eq!(rx.recv_async().await, Err(RecvError));
            });

            // A pending send_async on a full channel fails when the last
            // receiver goes, handing its value back.
            let (tx, rx) = bounded::<u64>(1);
            tx.send(1).unwrap();
            let mut fut = tx.send_async(2);
            assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
            drop(rx);
            match Pin::new(&mut fut).poll(&mut cx) {
                Poll::Ready(Err(e)) => assert_eq!(e.into_inner(), 2),
                other => panic!("expected the value back, got {other:?}"),
            }
            // A new one fails at once.
            let e = futures::executor::block_on(tx.send_async(3)).unwrap_err();
            assert_eq!(e.into_inner(), 3);

            // The same from tokio, with the peer a gofer task.
            let s = sched(1);
            let rt = current_thread_rt();
            let (tx, rx) = bounded::<u64>(0);
            let h = s.spawn(move || {
                gofer::sleep(Duration::from_millis(20));
                drop(tx);
            });
            assert_eq!(rt.block_on(rx.recv_async()), Err(RecvError));
            h.join().unwrap();
            s.shutdown();
        },
    );
}

/// A waker that counts its wakes.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl CountingWaker {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_changed_waker_is_the_one_woken() {
    in_child(module_path!(), "a_changed_waker_is_the_one_woken", || {
        for (name, tx, rx) in flavours::<u64>() {
            if name == "unbounded" {
                continue; // sends never wait: only the receive side applies
            }
            // Receive side: poll with A, then with B; the send wakes B.
            let a = Arc::new(CountingWaker::default());
            let b = Arc::new(CountingWaker::default());
            let (wa, wb) = (Waker::from(a.clone()), Waker::from(b.clone()));
            let mut fut = rx.recv_async();
            assert!(Pin::new(&mut fut)
                .poll(&mut Context::from_waker(&wa))
                .is_pending());
            assert!(Pin::new(&mut fut)
                .poll(&mut Context::from_waker(&wb))
                .is_pending());
            let sender = std::thread::spawn({
                let tx = tx.clone();
                move || tx.send(5).unwrap()
            });
            wait_until("the waker B is woken", || b.count() >= 1);
            assert_eq!(a.count(), 0, "{name}: the replaced waker is not woken");
            assert_eq!(
                Pin::new(&mut fut).poll(&mut Context::from_waker(&wb)),
                Poll::Ready(Ok(5))
            );
            sender.join().unwrap();

            // Send side: fill the channel, poll with A then B; a receive
            // wakes B.
            let fillers = tx.capacity().unwrap_or(0);
            for i in 0..fillers as u64 {
                tx.send(100 + i).unwrap();
            }
            let a = Arc::new(CountingWaker::default());
            let b = Arc::new(CountingWaker::default());
            let (wa, wb) = (Waker::from(a.clone()), Waker::from(b.clone()));
            let mut fut = tx.send_async(6);
            assert!(Pin::new(&mut fut)
                .poll(&mut Context::from_waker(&wa))
                .is_pending());
            assert!(Pin::new(&mut fut)
                .poll(&mut Context::from_waker(&wb))
                .is_pending());
            let receiver = std::thread::spawn({
                let rx = rx.clone();
                move || {
                    (0..=fillers)
                        .map(|_| rx.recv().unwrap())
                        .collect::<Vec<_>>()
                }
            });
            wait_until("the waker B is woken", || b.count() >= 1);
            assert_eq!(a.count(), 0, "{name}: the replaced waker is not woken");
            assert_eq!(
                Pin::new(&mut fut).poll(&mut Context::from_waker(&wb)),
                Poll::Ready(Ok(()))
            );
            let got = receiver.join().unwrap();
            assert_eq!(got.last(), Some(&6), "{name}: the future's value came last");
        }
    });
}

#[test]
fn futures_are_send_and_unpin() {
    fn check<F: Future + Send + Unpin>(_: &F) {}
    let (tx, rx) = bounded::<String>(1);
    let r = rx.recv_async();
    let s = tx.send_async(String::new());
    check(&r);
    check(&s);
}
