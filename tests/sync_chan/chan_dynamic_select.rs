//! `Select`: a selection over operations known only at run time, with
//! crossbeam-channel's API and rules. Every value exactly once through 16
//! arms, fairness, send and receive arms mixed (buffered and rendezvous,
//! with tasks, threads and `select!` on the other side), `try_select` and
//! `select_timeout`, disconnected arms, and a selected operation that is
//! dropped or completed with the wrong handle.
//!
//! Scenarios that wait run in a child process under a watchdog.

use crate::common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use common::{in_child, wait_until};
use gofer::chan::{
    bounded, unbounded, Receiver, RecvError, Select, SelectTimeoutError, Sender, TrySelectError,
};
use gofer::Scheduler;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn sched(threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads)
        .build()
        .expect("valid scheduler config")
}

/// Receives from every receiver through one `Select` until all are
/// disconnected, removing each arm when its channel disconnects. Returns
/// what each arm received.
fn drain_with_select(rxs: &[Receiver<u64>]) -> Vec<Vec<u64>> {
    let mut sel = Select::new();
    for rx in rxs {
        sel.recv(rx);
    }
    let mut got = vec![Vec::new(); rxs.len()];
    let mut live = rxs.len();
    while live > 0 {
        let oper = sel.select();
        let i = oper.index();
        match oper.recv(&rxs[i]) {
            Ok(v) => got[i].push(v),
            Err(RecvError) => {
                sel.remove(i);
                live -= 1;
            }
        }
    }
    got
}

const PER_ARM: u64 = 1000;

/// 16 channels of varied flavours, each fed by its own task.
fn sixteen_fed_channels(s: &Scheduler) -> (Vec<Receiver<u64>>, Vec<gofer::JoinHandle<()>>) {
    let mut rxs = Vec::new();
    let mut hs = Vec::new();
    for k in 0..16u64 {
        let (tx, rx) = match k % 4 {
            0 => bounded(0),
            1 => bounded(1),
            2 => bounded(8),
            _ => unbounded(),
        };
        rxs.push(rx);
        hs.push(s.spawn(move || {
            for i in 0..PER_ARM {
                tx.send(k * PER_ARM + i).unwrap();
            }
        }));
    }
    (rxs, hs)
}

fn assert_each_value_once(got: &[Vec<u64>]) {
    for (k, vals) in got.iter().enumerate() {
        let k = k as u64;
        let expected: Vec<u64> = (k * PER_ARM..(k + 1) * PER_ARM).collect();
        // One sender per channel: its values arrive in order, each once.
        assert_eq!(vals, &expected, "arm {k}");
    }
}

#[test]
fn sixteen_receivers_fed_by_sixteen_tasks_on_a_thread() {
    in_child(
        module_path!(),
        "sixteen_receivers_fed_by_sixteen_tasks_on_a_thread",
        || {
            let s = sched(2);
            let (rxs, hs) = sixteen_fed_channels(&s);
            let got = drain_with_select(&rxs);
            for h in hs {
                h.join().unwrap();
            }
            assert_each_value_once(&got);
            s.shutdown();
        },
    );
}

#[test]
fn sixteen_receivers_fed_by_sixteen_tasks_inside_a_task() {
    in_child(
        module_path!(),
        "sixteen_receivers_fed_by_sixteen_tasks_inside_a_task",
        || {
            let s = sched(2);
            let (rxs, hs) = sixteen_fed_channels(&s);
            let got = s.spawn(move || drain_with_select(&rxs)).join().unwrap();
            for h in hs {
                h.join().unwrap();
            }
            assert_each_value_once(&got);
            s.shutdown();
        },
    );
}

#[test]
fn ready_arms_are_chosen_fairly() {
    const PICKS: usize = 10_000;
    const ARMS: usize = 4;
    let chans: Vec<_> = (0..ARMS).map(|_| unbounded::<usize>()).collect();
    for (tx, _) in &chans {
        for i in 0..PICKS {
            tx.send(i).unwrap();
        }
    }
    let mut sel = Select::new();
    for (_, rx) in &chans {
        sel.recv(rx);
    }
    let mut counts = [0usize; ARMS];
    for _ in 0..PICKS {
        let oper = sel.select();
        let i = oper.index();
        oper.recv(&chans[i].1).unwrap();
        counts[i] += 1;
    }
    // Expected 2,500 each; the standard deviation is about 43, so 1,800 is
    // far out of reach of chance.
    println!("picks per arm: {counts:?}");
    for (i, c) in counts.iter().enumerate() {
        assert!(
            *c >= 1800,
            "arm {i} chosen {c} times of {PICKS}: {counts:?}"
        );
    }

    // Send arms too: all four always have room.
    let txs: Vec<Sender<usize>> = chans.iter().map(|(tx, _)| tx.clone()).collect();
    let mut sel = Select::new();
    for tx in &txs {
        sel.send(tx);
    }
    let mut counts = [0usize; ARMS];
    for n in 0..PICKS {
        let oper = sel.select();
        let i = oper.index();
        oper.send(&txs[i], n).unwrap();
        counts[i] += 1;
    }
    println!("send picks per arm: {counts:?}");
    for (i, c) in counts.iter().enumerate() {
        assert!(*c >= 1800, "send arm {i} chosen {c} times: {counts:?}");
    }
}

#[test]
fn mixed_send_and_recv_arms_move_every_value() {
    in_child(
        module_path!(),
        "mixed_send_and_recv_arms_move_every_value",
        || {
            // A relay: values come in on two channels (from tasks) and go out on
            // two channels (to tasks, threads and a select! loop), all through
            // one Select with two receive and two send arms. Outgoing channels
            // are a rendezvous one and a bounded(1) one, so send arms wait for
            // room and for receivers.
            const N: u64 = 5000;
            let s = sched(2);
            let (in_a_tx, in_a) = bounded::<u64>(4);
            let (in_b_tx, in_b) = bounded::<u64>(0);
            let (out_a, out_a_rx) = bounded::<u64>(0);
            let (out_b, out_b_rx) = bounded::<u64>(1);
            let pa = s.spawn(move || (0..N).for_each(|i| in_a_tx.send(i).unwrap()));
            let pb = s.spawn(move || (N..2 * N).for_each(|i| in_b_tx.send(i).unwrap()));
            // out_a: two gofer tasks; out_b: a plain thread and a select! loop.
            let ca: Vec<_> = (0..2)
                .map(|_| {
                    let rx = out_a_rx.clone();
                    s.spawn(move || rx.iter().collect::<Vec<u64>>())
                })
                .collect();
            drop(out_a_rx);
            let cb_thread = {
                let rx = out_b_rx.clone();
                std::thread::spawn(move || rx.iter().collect::<Vec<u64>>())
            };
            let cb_select = s.spawn(move || {
                let mut got = Vec::new();
                loop {
                    gofer::select! {
                        recv(out_b_rx) -> v => match v {
                            Ok(v) => got.push(v),
                            Err(_) => break,
                        },
                    }
                }
                got
            });

            // The relay itself, in a task. Send arms take part only while there
            // is something to send (a selected send must be completed), so it
            // keeps two selections: receives only, and receives and sends.
            let relay = s.spawn(move || {
                let mut pending: std::collections::VecDeque<u64> = Default::default();
                let mut recv_only = Select::new();
                let mut all = Select::new();
                let (ra, rb) = (recv_only.recv(&in_a), recv_only.recv(&in_b));
                assert_eq!((ra, rb), (all.recv(&in_a), all.recv(&in_b)));
                let sa = all.send(&out_a);
                let sb = all.send(&out_b);
                let mut open_inputs = 2;
                let mut relayed = 0u64;
                while open_inputs > 0 || !pending.is_empty() {
                    let oper = if pending.is_empty() {
                        recv_only.select()
                    } else {
                        all.select()
                    };
                    let i = oper.index();
                    if i == ra || i == rb {
                        let rx = if i == ra { &in_a } else { &in_b };
                        match oper.recv(rx) {
                            Ok(v) => pending.push_back(v),
                            Err(RecvError) => {
                                open_inputs -= 1;
                                recv_only.remove(i);
                                all.remove(i);
                            }
                        }
                    } else {
                        let tx = if i == sa {
                            &out_a
                        } else {
                            assert_eq!(i, sb);
                            &out_b
                        };
                        let v = pending.pop_front().expect("send arms only with values");
                        oper.send(tx, v).unwrap();
                        relayed += 1;
                    }
                }
                relayed
            });
            pa.join().unwrap();
            pb.join().unwrap();
            let relayed = relay.join().unwrap();
            let mut got: Vec<u64> = ca.into_iter().flat_map(|h| h.join().unwrap()).collect();
            let from_thread = cb_thread.join().unwrap();
            let from_select = cb_select.join().unwrap();
            println!(
            "figure: relayed {relayed}: {} to the rendezvous consumers, {} + {} to the bounded ones",
            got.len(),
            from_thread.len(),
            from_select.len()
        );
            got.extend(from_thread);
            got.extend(from_select);
            got.sort_unstable();
            assert_eq!(
                got,
                (0..2 * N).collect::<Vec<_>>(),
                "every value exactly once"
            );
            s.shutdown();
        },
    );
}

#[test]
fn mixed_arms_with_both_directions_always_offered() {
    in_child(
        module_path!(),
        "mixed_arms_with_both_directions_always_offered",
        || {
            // Two tasks trade values through one Select each: each has a send
            // arm towards the other and a receive arm from the other, on
            // rendezvous channels, and always offers both. Each Select must
            // never pair its own send with its own receive, and the two must
            // make progress: 2,000 exchanges each way.
            const N: u64 = 2000;
            let s = sched(2);
            let (a_to_b, b_from_a) = bounded::<u64>(0);
            let (b_to_a, a_from_b) = bounded::<u64>(0);
            let side = |tx: Sender<u64>, rx: Receiver<u64>| {
                move || {
                    let (mut sent, mut got) = (0u64, Vec::new());
                    let mut sel = Select::new();
                    let si = sel.send(&tx);
                    let ri = sel.recv(&rx);
                    while sent < N || (got.len() as u64) < N {
                        let oper = sel.select();
                        if oper.index() == si {
                            if sent < N {
                                oper.send(&tx, sent).unwrap();
                                sent += 1;
                            } else {
                                // Done sending: the peer still sends to us. A
                                // selected send must be completed; send a marker
                                // the peer ignores.
                                oper.send(&tx, u64::MAX).unwrap();
                            }
                        } else {
                            assert_eq!(oper.index(), ri);
                            let v = oper.recv(&rx).unwrap();
                            if v != u64::MAX {
                                got.push(v);
                            }
                        }
                    }
                    // Keep the peer's last selection answerable until it is
                    // done too: drop our ends.
                    drop(sel);
                    drop(tx);
                    // Drain whatever markers the peer still sends.
                    while rx.recv_timeout(ms(50)).is_ok() {}
                    got
                }
            };
            let a = s.spawn(side(a_to_b, a_from_b));
            let b = s.spawn(side(b_to_a, b_from_a));
            let (ga, gb) = (a.join().unwrap(), b.join().unwrap());
            assert_eq!(ga, (0..N).collect::<Vec<_>>());
            assert_eq!(gb, (0..N).collect::<Vec<_>>());
            s.shutdown();
        },
    );
}

#[test]
fn a_waiting_send_arm_completes_when_a_receiver_comes() {
    in_child(
        module_path!(),
        "a_waiting_send_arm_completes_when_a_receiver_comes",
        || {
            for cap in [0usize, 1] {
                let (tx, rx) = bounded::<u32>(cap);
                if cap == 1 {
                    tx.send(1).unwrap(); // full: the send arm must wait for room
                }
                let receiver = std::thread::spawn(move || {
                    std::thread::sleep(ms(30));
                    let mut got = Vec::new();
                    while let Ok(v) = rx.recv() {
                        got.push(v);
                    }
                    got
                });
                let start = Instant::now();
                let mut sel = Select::new();
                let i = sel.send(&tx);
                let oper = sel.select();
                assert_eq!(oper.index(), i);
                assert!(start.elapsed() >= ms(25), "cap {cap}: the send arm waited");
                oper.send(&tx, 2).unwrap();
                drop(sel);
                drop(tx);
                let got = receiver.join().unwrap();
                let expected: Vec<u32> = if cap == 1 { vec![1, 2] } else { vec![2] };
                assert_eq!(got, expected, "cap {cap}");
            }
        },
    );
}

#[test]
fn a_select_never_pairs_its_own_send_and_receive() {
    let (tx, rx) = bounded::<u8>(0);
    let mut sel = Select::new();
    sel.send(&tx);
    sel.recv(&rx);
    assert!(sel.try_select().is_err());
    let start = Instant::now();
    assert!(matches!(
        sel.select_timeout(ms(30)),
        Err(SelectTimeoutError)
    ));
    assert!(start.elapsed() >= ms(30));
}

#[test]
fn try_select_with_nothing_ready() {
    let (_tx, rx) = bounded::<i32>(1);
    let (tx2, _rx2) = bounded::<i32>(0); // rendezvous, nobody receiving
    let (tx3, rx3) = unbounded::<i32>();
    let mut sel = Select::new();
    sel.recv(&rx);
    sel.send(&tx2);
    assert_eq!(
        sel.try_select().map(|o| o.index()).err(),
        Some(TrySelectError)
    );
    // Nothing was taken or reserved: the channels are as they were.
    assert!(rx.is_empty());
    // An empty Select has nothing ready either.
    let mut empty = Select::new();
    assert!(empty.try_select().is_err());
    // Something ready: it is selected.
    tx3.send(3).unwrap();
    let i = sel.recv(&rx3);
    let oper = sel.try_select().expect("rx3 is ready");
    assert_eq!(oper.index(), i);
    assert_eq!(oper.recv(&rx3), Ok(3));
}

#[test]
fn select_timeout_times_out() {
    let (_tx, rx) = unbounded::<i32>();
    let mut sel = Select::new();
    sel.recv(&rx);
    let start = Instant::now();
    assert!(matches!(
        sel.select_timeout(ms(50)),
        Err(SelectTimeoutError)
    ));
    let took = start.elapsed();
    assert!(took >= ms(50) && took <= ms(550), "took {took:?}");
    // With no operations at all, it still waits out the timeout.
    let start = Instant::now();
    assert!(Select::new().select_timeout(ms(20)).is_err());
    assert!(start.elapsed() >= ms(20));
    // A value arriving in time is selected.
    let (tx, rx) = unbounded::<i32>();
    let mut sel = Select::new();
    sel.recv(&rx);
    let h = std::thread::spawn(move || {
        std::thread::sleep(ms(20));
        tx.send(9).unwrap();
    });
    let oper = sel
        .select_timeout(ms(5000))
        .expect("the value came in time");
    assert_eq!(oper.recv(&rx), Ok(9));
    h.join().unwrap();
}

#[test]
fn select_timeout_inside_a_task() {
    in_child(module_path!(), "select_timeout_inside_a_task", || {
        let s = sched(1);
        let took = s
            .spawn(|| {
                let (_tx, rx) = unbounded::<i32>();
                let mut sel = Select::new();
                sel.recv(&rx);
                let start = Instant::now();
                assert!(sel.select_timeout(ms(40)).is_err());
                start.elapsed()
            })
            .join()
            .unwrap();
        assert!(took >= ms(40) && took <= ms(540), "took {took:?}");
        s.shutdown();
    });
}

#[test]
fn a_disconnected_arm_is_selectable() {
    // A receive on an empty, disconnected channel is ready (with an error).
    let (tx, rx) = unbounded::<i32>();
    drop(tx);
    let (_tx2, rx2) = unbounded::<i32>();
    let mut sel = Select::new();
    let dead = sel.recv(&rx);
    sel.recv(&rx2);
    let oper = sel.try_select().expect("the disconnected arm is ready");
    assert_eq!(oper.index(), dead);
    assert_eq!(oper.recv(&rx), Err(RecvError));
    // A blocking select returns it at once too.
    let oper = sel.select();
    assert_eq!(oper.index(), dead);
    assert_eq!(oper.recv(&rx), Err(RecvError));

    // A send with every receiver gone is ready, and hands the value back.
    let (tx, rx) = bounded::<String>(0);
    drop(rx);
    let mut sel = Select::new();
    sel.send(&tx);
    let oper = sel.select();
    let err = oper.send(&tx, "back".to_string()).unwrap_err();
    assert_eq!(err.into_inner(), "back");
}

#[test]
fn a_pending_select_wakes_on_disconnection() {
    in_child(
        module_path!(),
        "a_pending_select_wakes_on_disconnection",
        || {
            let (tx, rx) = bounded::<i32>(0);
            let (tx2, rx2) = bounded::<i32>(1);
            tx2.send(0).unwrap(); // full: the send arm waits
            let h = std::thread::spawn(move || {
                std::thread::sleep(ms(30));
                drop(tx);
                rx2
            });
            let mut sel = Select::new();
            let r = sel.recv(&rx);
            sel.send(&tx2);
            let oper = sel.select();
            assert_eq!(oper.index(), r);
            assert_eq!(oper.recv(&rx), Err(RecvError));
            // And a waiting send arm wakes when the last receiver goes.
            let rx2 = h.join().unwrap();
            let mut sel = Select::new();
            sel.send(&tx2);
            let h = std::thread::spawn(move || {
                std::thread::sleep(ms(30));
                drop(rx2);
            });
            let oper = sel.select();
            assert_eq!(oper.send(&tx2, 1).unwrap_err().into_inner(), 1);
            h.join().unwrap();
        },
    );
}

#[test]
#[should_panic(expected = "passed a receiver that wasn't selected")]
fn completing_with_another_receiver_panics() {
    let (tx, rx) = unbounded::<i32>();
    let (_tx2, rx2) = unbounded::<i32>();
    tx.send(1).unwrap();
    let mut sel = Select::new();
    sel.recv(&rx);
    let oper = sel.select();
    let _ = oper.recv(&rx2);
}

#[test]
#[should_panic(expected = "passed a sender that wasn't selected")]
fn completing_a_receive_as_a_send_panics() {
    let (tx, rx) = unbounded::<i32>();
    tx.send(1).unwrap();
    let mut sel = Select::new();
    sel.recv(&rx);
    let oper = sel.select();
    let _ = oper.send(&tx, 2);
}

#[test]
#[should_panic(expected = "no operations have been added to `Select`")]
fn select_with_no_operation_panics() {
    let _ = Select::new().select();
}

#[test]
fn a_dropped_selection_is_undone_before_it_panics() {
    // A selected receive that is dropped gives its value back.
    let (tx, rx) = unbounded::<i32>();
    tx.send(1).unwrap();
    tx.send(2).unwrap();
    let mut sel = Select::new();
    sel.recv(&rx);
    let r = catch_unwind(AssertUnwindSafe(|| {
        let _oper = sel.select();
    }));
    let msg = r.unwrap_err();
    let msg = msg.downcast_ref::<&str>().copied().unwrap_or_default();
    assert!(msg.contains("without completing"), "panic message: {msg}");
    drop(sel);
    assert_eq!(rx.try_recv(), Ok(1), "the value came back, in its place");
    assert_eq!(rx.try_recv(), Ok(2));

    // Completing with the wrong receiver also gives the value back.
    let (tx, rx) = bounded::<i32>(2);
    let (_tx2, rx2) = unbounded::<i32>();
    tx.send(7).unwrap();
    let mut sel = Select::new();
    sel.recv(&rx);
    let r = catch_unwind(AssertUnwindSafe(|| {
        let oper = sel.select();
        let _ = oper.recv(&rx2);
    }));
    assert!(r.is_err());
    drop(sel);
    assert_eq!(rx.try_recv(), Ok(7));

    // A reserved buffer slot is freed.
    let (tx, rx) = bounded::<i32>(1);
    let mut sel = Select::new();
    sel.send(&tx);
    let r = catch_unwind(AssertUnwindSafe(|| {
        let _oper = sel.select();
    }));
    assert!(r.is_err());
    drop(sel);
    assert_eq!(tx.try_send(5), Ok(()), "the slot is free again");
    assert_eq!(rx.try_recv(), Ok(5));
}

#[test]
fn a_receiver_claimed_by_a_dropped_selection_starts_over() {
    in_child(
        module_path!(),
        "a_receiver_claimed_by_a_dropped_selection_starts_over",
        || {
            // A thread and a task wait in recv on a rendezvous channel; a
            // selected send claims one of them, then is dropped: that receiver
            // must not fail, it waits again and gets a later value.
            let s = sched(1);
            for in_task in [false, true] {
                let (tx, rx) = bounded::<i32>(0);
                let (waiting_tx, waiting_rx) = unbounded::<()>();
                let h: Box<dyn FnOnce() -> Result<i32, RecvError>> = if in_task {
                    let h = s.spawn(move || {
                        waiting_tx.send(()).unwrap();
                        rx.recv()
                    });
                    Box::new(move || h.join().unwrap())
                } else {
                    let h = std::thread::spawn(move || {
                        waiting_tx.send(()).unwrap();
                        rx.recv()
                    });
                    Box::new(move || h.join().unwrap())
                };
                waiting_rx.recv().unwrap();
                // Wait until the receiver is registered: a send can complete.
                let mut sel = Select::new();
                sel.send(&tx);
                let r = catch_unwind(AssertUnwindSafe(|| {
                    let _oper = sel.select(); // claims the waiting receiver
                }));
                assert!(r.is_err());
                drop(sel);
                tx.send(42).unwrap();
                assert_eq!(
                    h(),
                    Ok(42),
                    "in_task {in_task}: the receiver got the next value"
                );
            }
            s.shutdown();
        },
    );
}

#[test]
fn a_selected_send_can_claim_an_async_receiver() {
    in_child(
        module_path!(),
        "a_selected_send_can_claim_an_async_receiver",
        || {
            use std::future::Future;
            use std::pin::Pin;
            use std::task::{Context, Poll};
            let (tx, rx) = bounded::<i32>(0);
            let mut fut = rx.recv_async();
            let mut cx = Context::from_waker(futures::task::noop_waker_ref());
            assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
            let mut sel = Select::new();
            sel.send(&tx);
            // The future waits: the send is ready, and is reserved on it.
            let oper = sel.try_select().expect("a receiver waits");
            oper.send(&tx, 5).unwrap();
            wait_until("the future sees its value", || {
                matches!(Pin::new(&mut fut).poll(&mut cx), Poll::Ready(Ok(5)))
            });
            // Reserved then dropped: the future goes on waiting, and gets the
            // next value.
            let mut fut = rx.recv_async();
            assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
            let r = catch_unwind(AssertUnwindSafe(|| {
                let _oper = sel.try_select().expect("a receiver waits");
            }));
            assert!(r.is_err());
            drop(sel);
            let sender = std::thread::spawn(move || tx.send(6).unwrap());
            wait_until("the future gets the next value", || {
                matches!(Pin::new(&mut fut).poll(&mut cx), Poll::Ready(Ok(6)))
            });
            sender.join().unwrap();
        },
    );
}
