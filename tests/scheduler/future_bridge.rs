//! Futures both ways: `block_on_future` inside and outside tasks, a gofer
//! task and a tokio task talking through `tokio::sync::mpsc`, `futures`
//! channels, and a `JoinHandle` awaited from async code (its waker protocol
//! included).

use crate::common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};

use common::wait_until;
use futures::{SinkExt, StreamExt};
use gofer::{block_on_future, Scheduler};

fn sched(name: &str, threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A waker that counts its wakes.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn block_on_future_runs_a_future_outside_and_inside_a_task() {
    assert_eq!(block_on_future(async { 7 }), 7);
    let s = sched("fb-ready", 1);
    let v = s
        .spawn(|| {
            assert!(gofer::is_coroutine());
            block_on_future(async { 6 * 7 })
        })
        .join()
        .expect("the task finished");
    assert_eq!(v, 42);
    s.shutdown();
}

#[test]
fn a_gofer_task_and_a_tokio_task_talk_through_tokio_mpsc_both_ways() {
    const N: u64 = 2_000;
    let rt = tokio_rt();
    let s = sched("fb-tokio", 2);

    // gofer asks, tokio answers.
    let (req_tx, mut req_rx) = tokio::sync::mpsc::channel::<u64>(8);
    let (resp_tx, mut resp_rx) = tokio::sync::mpsc::channel::<u64>(8);
    let server = rt.spawn(async move {
        let mut served = 0u64;
        while let Some(x) = req_rx.recv().await {
            resp_tx.send(x * 2).await.expect("the client listens");
            served += 1;
        }
        served
    });
    let client = s.spawn(move || {
        let mut sum = 0;
        for i in 0..N {
            block_on_future(req_tx.send(i)).expect("the server listens");
            sum += block_on_future(resp_rx.recv()).expect("an answer");
        }
        sum
    });
    assert_eq!(client.join().expect("the gofer client"), N * (N - 1));
    assert_eq!(rt.block_on(server).expect("the tokio server"), N);

    // tokio asks, gofer answers.
    let (req_tx, mut req_rx) = tokio::sync::mpsc::channel::<u64>(8);
    let (resp_tx, mut resp_rx) = tokio::sync::mpsc::channel::<u64>(8);
    let server = s.spawn(move || {
        let mut served = 0u64;
        while let Some(x) = block_on_future(req_rx.recv()) {
            block_on_future(resp_tx.send(x + 1)).expect("the client listens");
            served += 1;
        }
        served
    });
    let sum = rt.block_on(async move {
        let mut sum = 0;
        for i in 0..N {
            req_tx.send(i).await.expect("the server listens");
            sum += resp_rx.recv().await.expect("an answer");
        }
        sum
    });
    assert_eq!(sum, N * (N + 1) / 2);
    assert_eq!(server.join().expect("the gofer server"), N);
    s.shutdown();
}

#[test]
fn a_task_waiting_on_a_future_gives_its_thread_to_the_task_that_completes_it() {
    // One thread: if waiting blocked the thread, the sender never ran.
    let s = sched("fb-one", 1);
    let (tx, rx) = futures::channel::oneshot::channel::<&'static str>();
    let waiter = s.spawn(move || block_on_future(rx).expect("a value"));
    let sender = s.spawn(move || tx.send("hello").expect("the waiter listens"));
    sender.join().expect("sent");
    assert_eq!(waiter.join().expect("received"), "hello");
    s.shutdown();
}

#[test]
fn futures_mpsc_carries_every_item_from_tasks_to_a_thread() {
    const TASKS: u64 = 50;
    const EACH: u64 = 200;
    let s = sched("fb-futs", 2);
    let (tx, mut rx) = futures::channel::mpsc::channel::<u64>(4);
    let senders: Vec<_> = (0..TASKS)
        .map(|t| {
            let mut tx = tx.clone();
            s.spawn(move || {
                for i in 0..EACH {
                    block_on_future(tx.send(t * EACH + i)).expect("the thread listens");
                }
            })
        })
        .collect();
    drop(tx);
    // A plain thread: block_on_future blocks it between polls.
    let (count, sum) = block_on_future(async move {
        let (mut count, mut sum) = (0u64, 0u64);
        while let Some(v) = rx.next().await {
            count += 1;
            sum += v;
        }
        (count, sum)
    });
    for h in senders {
        h.join().expect("a sender");
    }
    let n = TASKS * EACH;
    assert_eq!(count, n);
    assert_eq!(sum, n * (n - 1) / 2);
    s.shutdown();
}

#[test]
fn a_future_that_wakes_itself_lets_the_other_tasks_run() {
    // One thread. The future is pending, wakes itself at once, until the
    // other task sets the flag: if block_on_future polled it again without
    // yielding, the other task would never run.
    let s = sched("fb-self", 1);
    let flag = Arc::new(AtomicBool::new(false));
    let polls = Arc::new(AtomicUsize::new(0));
    let (f, p) = (flag.clone(), polls.clone());
    let spinner = s.spawn(move || {
        block_on_future(std::future::poll_fn(move |cx| {
            p.fetch_add(1, Ordering::SeqCst);
            if f.load(Ordering::SeqCst) {
                Poll::Ready(())
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }))
    });
    let setter = s.spawn(move || flag.store(true, Ordering::SeqCst));
    setter.join().expect("the flag was set");
    spinner.join().expect("the future completed");
    assert!(polls.load(Ordering::SeqCst) >= 2);
    s.shutdown();
}

#[test]
fn a_join_handle_is_awaited_from_block_on_future_a_task_and_tokio() {
    let s = sched("fb-join", 2);
    // From a plain thread.
    let h = s.spawn(|| 1);
    assert_eq!(block_on_future(h).expect("ok"), 1);
    // From another gofer task.
    let outer = s.spawn({
        let s = s.clone();
        move || {
            let inner = s.spawn(|| {
                gofer::yield_now();
                2
            });
            block_on_future(async move { inner.await.expect("ok") + 10 })
        }
    });
    assert_eq!(outer.join().expect("ok"), 12);
    // From tokio: block_on, and a tokio task.
    let rt = tokio_rt();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let gated = s.spawn(move || {
        gate_rx.recv().expect("opened"); // a blocking wait: the Dispatcher copes
        3
    });
    let awaited = rt.spawn(async move { gated.await.expect("ok") * 2 });
    gate_tx.send(()).expect("the task waits");
    assert_eq!(rt.block_on(awaited).expect("the tokio task"), 6);
    let h = s.spawn(|| 4);
    assert_eq!(rt.block_on(h).expect("ok"), 4);
    s.shutdown();
}

#[test]
fn awaiting_a_task_that_panicked_gives_its_join_error() {
    let s = sched("fb-panic", 1);
    let h = s.spawn(|| -> u8 { panic!("task boom") });
    let err = block_on_future(h).expect_err("the task panicked");
    assert!(err.is_panic());
    assert!(err.to_string().contains("task boom"), "{err}");
    s.shutdown();
}

#[test]
fn a_join_handle_wakes_only_the_waker_of_its_latest_poll() {
    let s = sched("fb-wakers", 1);
    let (gate_tx, gate_rx) = gofer::chan::bounded::<()>(1);
    let mut h = s.spawn(move || {
        gate_rx.recv().expect("opened");
        5
    });
    let first = Arc::new(CountingWaker::default());
    let second = Arc::new(CountingWaker::default());
    let w1 = Waker::from(first.clone());
    let w2 = Waker::from(second.clone());
    assert!(Pin::new(&mut h)
        .poll(&mut Context::from_waker(&w1))
        .is_pending());
    // The future moved to another poller: the second waker replaces the
    // first, which is released.
    assert!(Pin::new(&mut h)
        .poll(&mut Context::from_waker(&w2))
        .is_pending());
    assert_eq!(
        Arc::strong_count(&first),
        2,
        "only `first` and `w1` hold it"
    );
    gate_tx.send(()).expect("the task waits");
    wait_until("the task woke its waiter", || {
        second.0.load(Ordering::SeqCst) == 1
    });
    assert_eq!(first.0.load(Ordering::SeqCst), 0, "the replaced waker");
    match Pin::new(&mut h).poll(&mut Context::from_waker(&w2)) {
        Poll::Ready(r) => assert_eq!(r.expect("ok"), 5),
        Poll::Pending => panic!("the task finished"),
    }
    assert_eq!(second.0.load(Ordering::SeqCst), 1, "woken exactly once");
    s.shutdown();
}

#[test]
fn dropping_a_polled_join_handle_releases_its_waker() {
    let s = sched("fb-dropw", 1);
    let (gate_tx, gate_rx) = gofer::chan::bounded::<()>(1);
    let mut h = s.spawn(move || gate_rx.recv().expect("opened"));
    let counting = Arc::new(CountingWaker::default());
    let w = Waker::from(counting.clone());
    assert!(Pin::new(&mut h)
        .poll(&mut Context::from_waker(&w))
        .is_pending());
    drop(w);
    assert_eq!(Arc::strong_count(&counting), 2, "the handle keeps it");
    drop(h); // detaches the task, still waiting at the gate
    assert_eq!(Arc::strong_count(&counting), 1, "released with the handle");
    gate_tx.send(()).expect("the task waits");
    s.shutdown();
    assert_eq!(counting.0.load(Ordering::SeqCst), 0, "never woken");
}

#[test]
fn a_tokio_timer_needs_its_runtime_and_works_through_a_tokio_handle() {
    let s = sched("fb-reactor", 1);
    // Without a runtime, tokio's timer panics: the panic ends the task.
    let err = s
        .spawn(|| {
            block_on_future(async {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            })
        })
        .join()
        .expect_err("no reactor here");
    assert!(err.is_panic(), "{err:?}");
    assert!(err.to_string().contains("reactor"), "tokio says why: {err}");
    // The cure: run it on tokio, wait for its handle from the task.
    let rt = tokio_rt();
    let handle = rt.handle().clone();
    let v = s
        .spawn(move || {
            let job = handle.spawn(async {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                9
            });
            block_on_future(job).expect("the tokio task")
        })
        .join()
        .expect("ok");
    assert_eq!(v, 9);
    s.shutdown();
}

#[test]
fn a_join_handle_repolled_with_changing_wakers_never_loses_its_wake_up() {
    // The task finishes at any moment among re-polls that replace the
    // waker: whichever poll last returned Pending, its waker is woken.
    let s = sched("fb-race", 2);
    for round in 0..2_000u64 {
        let mut h = s.spawn(move || {
            for _ in 0..round % 4 {
                gofer::yield_now();
            }
            round
        });
        let wakers: Vec<Arc<CountingWaker>> =
            (0..3).map(|_| Arc::new(CountingWaker::default())).collect();
        let mut polls = 0usize;
        let value = loop {
            let w = &wakers[polls % wakers.len()];
            let waker = Waker::from(w.clone());
            let r = Pin::new(&mut h).poll(&mut Context::from_waker(&waker));
            polls += 1;
            match r {
                Poll::Ready(v) => break v.expect("ok"),
                Poll::Pending if polls < 6 => {} // re-poll at once: replace
                Poll::Pending => {
                    wait_until("the last waker is woken", || w.0.load(Ordering::SeqCst) > 0);
                }
            }
        };
        assert_eq!(value, round);
    }
    s.shutdown();
}
