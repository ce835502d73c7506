//! `select!`: syntax, readiness, blocking on several channels, defaults and
//! timeouts, disconnection, fairness, and exactly-once completion.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use gofer::chan::{bounded, unbounded, Receiver, RecvError, SendError};
use gofer::{select, Scheduler};

fn sched(threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads.max(2))
        .build()
        .unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn select_takes_the_ready_recv_arm() {
    let (tx1, rx1) = unbounded::<i32>();
    let (_tx2, rx2) = unbounded::<i32>();
    tx1.send(5).unwrap();
    let got = select! {
        recv(rx1) -> v => v.unwrap(),
        recv(rx2) -> _ => unreachable!("nothing was sent on rx2"),
    };
    assert_eq!(got, 5);
}

#[test]
fn select_default_runs_when_no_arm_is_ready() {
    let (_tx, rx) = bounded::<i32>(0);
    let (tx2, _rx2) = bounded::<i32>(0);
    let mut defaults = 0;
    for _ in 0..3 {
        select! {
            recv(rx) -> _ => unreachable!(),
            send(tx2, 1) -> _ => unreachable!(),
            default => defaults += 1,
        }
    }
    assert_eq!(defaults, 3);
    // Only a default arm.
    let v = select! { default => 7 };
    assert_eq!(v, 7);
}

#[test]
fn select_default_timeout_fires_after_the_timeout() {
    let s = sched(1);
    let (_tx, rx) = unbounded::<i32>();
    let t = Instant::now();
    let r = select! {
        recv(rx) -> _ => false,
        default(ms(30)) => true,
    };
    assert!(r && t.elapsed() >= ms(30));
    // The same inside a task (the timeout is served by the timer).
    let h = s.spawn(move || {
        let t = Instant::now();
        let r = select! {
            recv(rx) -> _ => false,
            default(ms(30)) => true,
        };
        r && t.elapsed() >= ms(30)
    });
    assert!(h.join().unwrap());
    // A default timeout with no arm at all just waits.
    let t = Instant::now();
    select! { default(ms(5)) => {} }
    assert!(t.elapsed() >= ms(5));
    s.shutdown();
}

#[test]
fn select_timeout_is_beaten_by_a_value_that_arrives_in_time() {
    let s = sched(2);
    let (tx, rx) = bounded::<i32>(0);
    let (started_tx, started_rx) = bounded::<()>(0);
    let h = s.spawn(move || {
        started_tx.send(()).unwrap();
        select! {
            recv(rx) -> v => v,
            default(Duration::from_secs(10)) => panic!("timed out"),
        }
    });
    started_rx.recv().unwrap();
    tx.send(3).unwrap();
    assert_eq!(h.join().unwrap(), Ok(3));
    s.shutdown();
}

#[test]
fn select_send_arm_hands_its_value_to_a_waiting_receiver() {
    let s = sched(2);
    let (tx, rx) = bounded::<String>(0);
    let (tx_other, _rx_other) = bounded::<String>(0);
    let r = s.spawn(move || rx.recv().unwrap());
    let res = select! {
        send(tx, "hello".to_string()) -> res => res,
        send(tx_other, "never".to_string()) -> _ => unreachable!(),
    };
    assert_eq!(res, Ok(()));
    assert_eq!(r.join().unwrap(), "hello");
    s.shutdown();
}

#[test]
fn blocked_select_completes_exactly_one_arm() {
    let s = sched(2);
    for _ in 0..100 {
        let (tx1, rx1) = bounded::<i32>(0);
        let (tx2, rx2) = bounded::<i32>(0);
        let h = s.spawn(move || {
            select! {
                recv(rx1) -> v => (1, v.unwrap(), rx1, rx2),
                recv(rx2) -> v => (2, v.unwrap(), rx1, rx2),
            }
        });
        // Both sides offer a value; exactly one is taken by the select. The
        // offers wait as long as the select may take to start on a loaded
        // machine (with short timeouts both could lapse before it waits,
        // and the select would see two disconnected channels); the loser's
        // wait ends when the select's receivers are dropped.
        let s1 = s.spawn(move || tx1.send_timeout(10, Duration::from_secs(30)).is_ok());
        let s2 = s.spawn(move || tx2.send_timeout(20, Duration::from_secs(30)).is_ok());
        let (arm, v, rx1, rx2) = h.join().unwrap();
        drop((rx1, rx2));
        let (ok1, ok2) = (s1.join().unwrap(), s2.join().unwrap());
        assert_eq!(v, arm * 10);
        assert_eq!(ok1 as i32 + ok2 as i32, 1, "exactly one send completed");
        assert!(if arm == 1 { ok1 } else { ok2 });
    }
    s.shutdown();
}

#[test]
fn select_on_disconnected_channels_fires_with_the_error() {
    let (tx, rx) = unbounded::<i32>();
    drop(tx);
    let r = select! {
        recv(rx) -> v => v,
        default => panic!("a disconnected channel is ready"),
    };
    assert_eq!(r, Err(RecvError));

    let (tx, rx) = bounded::<String>(0);
    drop(rx);
    let r = select! {
        send(tx, "back".to_string()) -> res => res,
        default => panic!("a disconnected channel is ready"),
    };
    assert_eq!(r, Err(SendError("back".to_string())));
}

#[test]
fn disconnection_wakes_a_blocked_select() {
    let s = sched(2);
    let (tx1, rx1) = bounded::<i32>(0);
    let (_tx2, rx2) = bounded::<i32>(0);
    let (started_tx, started_rx) = bounded::<()>(0);
    let h = s.spawn(move || {
        started_tx.send(()).unwrap();
        select! {
            recv(rx1) -> v => v,
            recv(rx2) -> _ => unreachable!(),
        }
    });
    started_rx.recv().unwrap();
    drop(tx1);
    assert_eq!(h.join().unwrap(), Err(RecvError));

    // A blocked send arm gets its value back.
    let (tx, rx) = bounded::<String>(0);
    let h = thread::spawn(move || {
        select! {
            send(tx, "mine".to_string()) -> res => res,
        }
    });
    drop(rx);
    assert_eq!(h.join().unwrap().unwrap_err().into_inner(), "mine");
    s.shutdown();
}

#[test]
fn select_is_fair_among_ready_arms() {
    let rounds = 6000;
    let (tx1, rx1) = unbounded::<u8>();
    let (tx2, rx2) = unbounded::<u8>();
    let (tx3, rx3) = unbounded::<u8>();
    let (_tx4, rx4) = unbounded::<u8>();
    for _ in 0..rounds {
        tx1.send(1).unwrap();
        tx2.send(2).unwrap();
        tx3.send(3).unwrap();
    }
    let mut counts = [0usize; 4];
    for _ in 0..rounds {
        let i = select! {
            recv(rx1) -> _ => 1,
            recv(rx2) -> _ => 2,
            recv(rx4) -> _ => 0,
            recv(rx3) -> _ => 3,
        };
        counts[i] += 1;
    }
    assert_eq!(counts[0], 0);
    // Expected rounds / 3 = 2000 each, sd ~37: a generous bound.
    for (i, &c) in counts.iter().enumerate().skip(1) {
        assert!(
            (1500..2500).contains(&c),
            "arm {i} chosen {c} times of {rounds}: {counts:?}"
        );
    }
}

#[test]
fn select_never_pairs_with_itself() {
    // Two tasks each select between sending and receiving on the same
    // channel; a select must not hand its own value to itself.
    let s = sched(2);
    for cap in [0, 10] {
        let (tx, rx) = bounded::<usize>(cap);
        let mut hs = Vec::new();
        for me in 0..2usize {
            let (tx, rx) = (tx.clone(), rx.clone());
            hs.push(s.spawn(move || {
                let mut received = 0;
                for _ in 0..1000 {
                    select! {
                        send(tx, me) -> res => res.unwrap(),
                        recv(rx) -> v => {
                            let v = v.unwrap();
                            if cap == 0 {
                                assert_ne!(v, me, "self receive");
                            }
                            received += 1;
                        }
                    }
                }
                received
            }));
        }
        drop((tx, rx));
        let total: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(total <= 2000);
    }
    s.shutdown();
}

#[test]
fn select_with_duplicate_channel_arms_takes_one_value() {
    let s = sched(2);
    let (tx, rx) = bounded::<i32>(0);
    let (_dtx, drx) = bounded::<i32>(0);
    let (started_tx, started_rx) = bounded::<()>(0);
    let h = s.spawn(move || {
        started_tx.send(()).unwrap();
        select! {
            recv(rx) -> v => (1, v.unwrap(), rx),
            recv(rx) -> v => (2, v.unwrap(), rx),
            recv(drx) -> _ => unreachable!(),
        }
    });
    started_rx.recv().unwrap();
    tx.send(8).unwrap();
    let (arm, v, rx) = h.join().unwrap();
    assert!(arm == 1 || arm == 2);
    assert_eq!(v, 8);
    // No stale registration is left behind: the channel still works.
    let h = s.spawn(move || rx.recv().unwrap());
    tx.send(9).unwrap();
    assert_eq!(h.join().unwrap(), 9);
    s.shutdown();
}

#[test]
fn many_selects_and_senders_deliver_every_value_exactly_once() {
    let s = sched(2);
    let chans: Vec<_> = [0, 0, 1, 4].iter().map(|&c| bounded::<u64>(c)).collect();
    let per = 1500u64;
    let mut senders = Vec::new();
    for (k, (tx, _)) in chans.iter().enumerate() {
        let tx = tx.clone();
        let k = k as u64;
        senders.push(s.spawn(move || (0..per).for_each(|i| tx.send(k * per + i).unwrap())));
    }
    // Two select-based senders as well, on all four channels at once.
    for k in 4..6u64 {
        let txs: Vec<_> = chans.iter().map(|(tx, _)| tx.clone()).collect();
        senders.push(s.spawn(move || {
            for i in 0..per {
                let v = k * per + i;
                select! {
                    send(txs[0], v) -> r => r.unwrap(),
                    send(txs[1], v) -> r => r.unwrap(),
                    send(txs[2], v) -> r => r.unwrap(),
                    send(txs[3], v) -> r => r.unwrap(),
                }
            }
        }));
    }
    let rxs: Vec<Receiver<u64>> = chans.iter().map(|(_, rx)| rx.clone()).collect();
    drop(chans);
    let mut receivers = Vec::new();
    for _ in 0..3 {
        let rxs = rxs.clone();
        receivers.push(s.spawn(move || {
            let mut got = Vec::new();
            let mut open = [true; 4];
            while open.iter().any(|o| *o) {
                // A disconnected channel is always ready; after it reports
                // the error, stop listening to it by selecting on the others.
                let (k, r) = select! {
                    recv(rxs[0]) -> r => (0, r),
                    recv(rxs[1]) -> r => (1, r),
                    recv(rxs[2]) -> r => (2, r),
                    recv(rxs[3]) -> r => (3, r),
                };
                match r {
                    Ok(v) => got.push(v),
                    Err(RecvError) => {
                        open[k] = false;
                        // Drain the rest with plain receives.
                        for (j, o) in open.iter_mut().enumerate() {
                            if *o {
                                got.extend(rxs[j].iter());
                                *o = false;
                            }
                        }
                    }
                }
            }
            got
        }));
    }
    drop(rxs);
    senders.into_iter().for_each(|h| h.join().unwrap());
    let mut all: Vec<u64> = receivers
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    all.sort_unstable();
    assert!(all.into_iter().eq(0..6 * per));
    s.shutdown();
}

#[test]
fn unchosen_send_values_are_dropped_once_and_chosen_ones_delivered() {
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx1, rx1) = bounded::<Counted>(1);
    let (tx2, rx2) = bounded::<Counted>(0);
    let n = 100;
    for _ in 0..n {
        select! {
            send(tx1, Counted(drops.clone())) -> r => assert!(r.is_ok()),
            send(tx2, Counted(drops.clone())) -> _ => unreachable!("no receiver on tx2"),
        }
        // The unchosen value is dropped by now; the chosen one is buffered.
        drop(rx1.recv().unwrap());
    }
    assert_eq!(drops.load(Ordering::Relaxed), 2 * n);
    drop((rx2, tx1, tx2));
}

#[test]
fn select_syntax_forms() {
    let (tx, rx) = unbounded::<i32>();
    let rx_ref = &rx;
    let (mut recvs, mut sends) = (0, 0);
    for i in 0..6 {
        tx.send(i).unwrap();
        // Block bodies need no comma; expression bodies do; a trailing comma
        // is optional; the receiver may be a reference or a temporary.
        select! {
            recv(rx_ref) -> v => { v.unwrap(); recvs += 1; }
            recv(rx.clone()) -> v => recvs += v.map(|_| 1).unwrap(),
            send(tx, 100) -> _ => { sends += 1; }
        }
    }
    assert_eq!(recvs + sends, 6);
    // Each send arm left one more value in the channel.
    assert_eq!(rx.len(), 2 * sends);

    // break/continue inside a body, and a nested select.
    let (tx2, rx2) = unbounded::<i32>();
    for i in 0..3 {
        tx2.send(i).unwrap();
    }
    drop(tx2);
    let mut seen = Vec::new();
    loop {
        select! {
            recv(rx2) -> v => match v {
                Ok(v) => {
                    seen.push(v);
                    continue;
                }
                Err(_) => break,
            },
            default => {
                select! {
                    recv(rx) -> _ => {},
                    default => {},
                }
            }
        }
    }
    assert_eq!(seen, [0, 1, 2]);

    // The body may move a channel that an arm used: the operations are
    // finished before the body runs.
    let (tx3, rx3) = unbounded::<i32>();
    tx3.send(1).unwrap();
    select! {
        recv(rx3) -> v => {
            assert_eq!(v, Ok(1));
            drop(rx3);
        }
    }
}

#[test]
fn nonblocking_select_never_misses_a_value_that_is_always_there() {
    // Go's TestNonblockSelectRace: one of the two channels always holds a
    // value, so a non-blocking select must never take the default arm.
    let s = sched(2);
    for _ in 0..1000 {
        let (tx1, rx1) = bounded::<i32>(1);
        let (tx2, rx2) = bounded::<i32>(1);
        tx1.send(1).unwrap();
        let (rx1b, rx2b) = (rx1.clone(), rx2.clone());
        let h = s.spawn(move || {
            select! {
                recv(rx1b) -> _ => true,
                recv(rx2b) -> _ => true,
                default => false,
            }
        });
        tx2.send(1).unwrap();
        select! {
            recv(rx1) -> _ => {},
            default => {},
        }
        assert!(h.join().unwrap(), "no channel was ready");
        drop(rx2);
    }
    s.shutdown();
}

#[test]
fn selects_in_threads_and_tasks_interoperate() {
    let s = sched(2);
    let (tx, rx) = bounded::<u32>(0);
    let (done_tx, done_rx) = bounded::<()>(0);
    let n = 2000;
    let th = thread::spawn(move || {
        let mut got = 0u64;
        loop {
            select! {
                recv(rx) -> v => got += v.unwrap() as u64,
                recv(done_rx) -> _ => return got,
            }
        }
    });
    let h = s.spawn(move || {
        for i in 0..n {
            select! {
                send(tx, i) -> r => r.unwrap(),
            }
        }
        done_tx.send(()).unwrap();
    });
    h.join().unwrap();
    assert_eq!(th.join().unwrap(), (0..n as u64).sum::<u64>());
    s.shutdown();
}

#[test]
fn timed_out_select_leaves_no_registration_behind() {
    let (tx1, rx1) = bounded::<i32>(0);
    let (tx2, rx2) = bounded::<i32>(0);
    let r = select! {
        recv(rx1) -> _ => false,
        send(tx2, 5) -> _ => false,
        default(ms(5)) => true,
    };
    assert!(r);
    // Neither the receive nor the send is still registered.
    assert!(tx1.try_send(1).unwrap_err().is_full());
    assert_eq!(rx2.try_recv(), Err(gofer::chan::TryRecvError::Empty));
}

#[test]
fn select_ping_pong_on_one_processer() {
    // Every hand-off parks and wakes a select on the same Processer.
    let s = sched(1);
    let (a_tx, a_rx) = bounded::<u32>(0);
    let (b_tx, b_rx) = bounded::<u32>(0);
    let (_idle_tx, idle_rx) = bounded::<u32>(0);
    let echo = s.spawn(move || loop {
        let v = select! {
            recv(a_rx) -> v => match v { Ok(v) => v, Err(_) => return },
            recv(idle_rx) -> _ => unreachable!(),
        };
        select! {
            send(b_tx, v + 1) -> r => r.unwrap(),
            recv(idle_rx) -> _ => unreachable!(),
        }
    });
    let driver = s.spawn(move || {
        for i in 0..20_000 {
            a_tx.send(i).unwrap();
            assert_eq!(b_rx.recv(), Ok(i + 1));
        }
    });
    driver.join().unwrap();
    echo.join().unwrap();
    drop(_idle_tx);
    s.shutdown();
}
