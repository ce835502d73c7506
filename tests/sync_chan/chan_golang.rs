//! Go's channel tests (`runtime/chan_test.go`, `test/chan/*.go`), ported to
//! gofer tasks and channels.
//!
//! Go's `close(c)` maps to dropping the last `Sender`; a receive from a
//! closed channel maps to `Err(RecvError)`; a `nil` channel (an arm that can
//! never fire) maps to a channel whose other side is kept alive but never
//! used. Iteration counts are smaller than Go's so each test stays quick.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gofer::chan::{
    bounded, unbounded, Receiver, RecvError, RecvTimeoutError, SendTimeoutError, Sender,
    TryRecvError,
};
use gofer::{select, Scheduler};

fn sched() -> Scheduler {
    Scheduler::builder()
        .min_threads(2)
        .max_threads(4)
        .build()
        .unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Go's `sync.WaitGroup`, built on a channel: each worker holds a clone of
/// the sender; `wait` returns when all of them are dropped.
struct WaitGroup {
    tx: Option<Sender<()>>,
    rx: Receiver<()>,
}

impl WaitGroup {
    fn new() -> WaitGroup {
        let (tx, rx) = bounded(0);
        WaitGroup { tx: Some(tx), rx }
    }

    fn worker(&self) -> Sender<()> {
        self.tx.as_ref().expect("not waited yet").clone()
    }

    fn wait(mut self) {
        self.tx = None;
        assert_eq!(self.rx.recv(), Err(RecvError));
    }
}

// ---- runtime/chan_test.go ----

#[test]
fn test_chan() {
    let s = sched();
    for cap in [0usize, 1, 2, 3, 5, 10, 64] {
        // Receive from an empty channel blocks (until its timeout).
        let (tx, rx) = bounded::<i32>(cap);
        let h = s.spawn(move || rx.recv_timeout(ms(10)));
        assert_eq!(h.join().unwrap(), Err(RecvTimeoutError::Timeout));
        // A non-blocking receive does not block.
        let (tx2, rx2) = bounded::<i32>(cap);
        assert_eq!(rx2.try_recv(), Err(TryRecvError::Empty));
        drop(tx);

        // A send to a full channel blocks (until its timeout).
        for i in 0..cap {
            tx2.send(i as i32).unwrap();
        }
        let h = s.spawn(move || tx2.send_timeout(-1, ms(10)));
        assert_eq!(h.join().unwrap(), Err(SendTimeoutError::Timeout(-1)));

        // A closed channel yields what is buffered, then "zero" (an error).
        assert_eq!(rx2.len(), cap);
        for i in 0..cap {
            assert_eq!(rx2.recv(), Ok(i as i32));
        }
        assert_eq!(rx2.recv(), Err(RecvError));
        assert_eq!(rx2.try_recv(), Err(TryRecvError::Disconnected));

        // Close unblocks a blocked receive.
        let (tx, rx) = bounded::<i32>(cap);
        let (started_tx, started_rx) = bounded::<()>(0);
        let h = s.spawn(move || {
            started_tx.send(()).unwrap();
            rx.recv()
        });
        started_rx.recv().unwrap();
        drop(tx);
        assert_eq!(h.join().unwrap(), Err(RecvError));

        // 100 values arrive uncorrupted and in FIFO order, with recv and
        // with a select recv.
        for use_select in [false, true] {
            let (tx, rx) = bounded::<i32>(cap);
            let h = s.spawn(move || (0..100).for_each(|i| tx.send(i).unwrap()));
            for i in 0..100 {
                let v = if use_select {
                    select! { recv(rx) -> v => v.unwrap() }
                } else {
                    rx.recv().unwrap()
                };
                assert_eq!(v, i);
            }
            h.join().unwrap();
        }

        // 4 senders x 4 receivers: every value arrives as often as sent.
        let (tx, rx) = bounded::<usize>(cap);
        let l = 250;
        let mut senders = Vec::new();
        for _ in 0..4 {
            let tx = tx.clone();
            senders.push(s.spawn(move || (0..l).for_each(|i| tx.send(i).unwrap())));
        }
        drop(tx);
        let mut receivers = Vec::new();
        for _ in 0..4 {
            let rx = rx.clone();
            receivers.push(s.spawn(move || {
                let mut counts = vec![0usize; l];
                for v in rx.iter() {
                    counts[v] += 1;
                }
                counts
            }));
        }
        senders.into_iter().for_each(|h| h.join().unwrap());
        let mut total = vec![0usize; l];
        for h in receivers {
            for (t, c) in total.iter_mut().zip(h.join().unwrap()) {
                *t += c;
            }
        }
        assert!(total.iter().all(|&c| c == 4), "cap {cap}");

        // len and cap.
        let (tx, rx) = bounded::<i32>(cap);
        assert_eq!((tx.len(), tx.capacity()), (0, Some(cap)));
        for i in 0..cap {
            tx.send(i as i32).unwrap();
        }
        assert_eq!((rx.len(), rx.capacity()), (cap, Some(cap)));
    }
    s.shutdown();
}

#[test]
fn test_nonblock_recv_race() {
    let s = sched();
    for _ in 0..1000 {
        let (tx, rx) = bounded::<i32>(1);
        tx.send(1).unwrap();
        let rx2 = rx.clone();
        let h = s.spawn(move || {
            select! {
                recv(rx2) -> _ => true,
                default => false,
            }
        });
        drop(tx); // close(c)
        let _ = rx.recv();
        assert!(h.join().unwrap(), "chan is not ready");
    }
    s.shutdown();
}

#[test]
fn test_nonblock_select_race() {
    let s = sched();
    for _ in 0..1000 {
        let (tx1, rx1) = bounded::<i32>(1);
        let (tx2, rx2) = bounded::<i32>(1);
        tx1.send(1).unwrap();
        let (r1, r2) = (rx1.clone(), rx2.clone());
        let h = s.spawn(move || {
            select! {
                recv(r1) -> _ => true,
                recv(r2) -> _ => true,
                default => false,
            }
        });
        tx2.send(1).unwrap();
        select! {
            recv(rx1) -> _ => {},
            default => {},
        }
        assert!(h.join().unwrap(), "no chan is ready");
    }
    s.shutdown();
}

#[test]
fn test_nonblock_select_race2() {
    let s = sched();
    for _ in 0..1000 {
        let (tx1, rx1) = bounded::<i32>(1);
        let (tx2, rx2) = bounded::<i32>(0);
        tx1.send(1).unwrap();
        let (r1, r2) = (rx1.clone(), rx2.clone());
        let h = s.spawn(move || {
            select! {
                recv(r1) -> _ => true,
                recv(r2) -> _ => true,
                default => false,
            }
        });
        drop(tx2); // close(c2)
        select! {
            recv(rx1) -> _ => {},
            default => {},
        }
        assert!(h.join().unwrap(), "no chan is ready");
    }
    s.shutdown();
}

#[test]
fn test_self_select() {
    // Two tasks select between sending and receiving on one channel; with a
    // rendezvous channel a task must never receive its own value.
    let s = sched();
    for cap in [0, 10] {
        let (tx, rx) = bounded::<usize>(cap);
        let wg = WaitGroup::new();
        for p in 0..2usize {
            let (tx, rx, done) = (tx.clone(), rx.clone(), wg.worker());
            s.spawn(move || {
                for i in 0..1000usize {
                    if p == 0 || i % 2 == 0 {
                        select! {
                            send(tx, p) -> r => r.unwrap(),
                            recv(rx) -> v => {
                                if cap == 0 && v.unwrap() == p {
                                    panic!("self receive");
                                }
                            }
                        }
                    } else {
                        select! {
                            recv(rx) -> v => {
                                if cap == 0 && v.unwrap() == p {
                                    panic!("self receive");
                                }
                            }
                            send(tx, p) -> r => r.unwrap(),
                        }
                    }
                }
                drop(done);
            });
        }
        wg.wait();
    }
    s.shutdown();
}

#[test]
fn test_select_stress() {
    let s = sched();
    let n = 5000;
    let chans = [bounded::<i32>(0), bounded(0), bounded(2), bounded(3)];
    // A "nil channel" for each direction: the other side stays alive but is
    // never used, so these arms never fire.
    let (nil_tx, nil_rx_keep) = bounded::<i32>(0);
    let (nil_tx_keep, nil_rx) = bounded::<i32>(0);
    let wg = WaitGroup::new();
    // 4 tasks sending n values each on one channel, 4 receiving n each.
    for (tx, rx) in chans.iter() {
        let (tx, done) = (tx.clone(), wg.worker());
        s.spawn(move || {
            (0..n).for_each(|_| tx.send(0).unwrap());
            drop(done);
        });
        let (rx, done) = (rx.clone(), wg.worker());
        s.spawn(move || {
            (0..n).for_each(|_| {
                rx.recv().unwrap();
            });
            drop(done);
        });
    }
    // One task sending n values on each channel from a single select.
    {
        let mut c: Vec<Sender<i32>> = chans.iter().map(|(tx, _)| tx.clone()).collect();
        let (nil_tx, done) = (nil_tx.clone(), wg.worker());
        s.spawn(move || {
            let mut cnt = [0; 4];
            for _ in 0..4 * n {
                let k = select! {
                    send(c[3], 0) -> r => { r.unwrap(); 3 }
                    send(c[2], 0) -> r => { r.unwrap(); 2 }
                    send(c[0], 0) -> r => { r.unwrap(); 0 }
                    send(c[1], 0) -> r => { r.unwrap(); 1 }
                };
                cnt[k] += 1;
                if cnt[k] == n {
                    c[k] = nil_tx.clone();
                }
            }
            drop(done);
        });
    }
    // One task receiving n values on each channel from a single select.
    {
        let mut c: Vec<Receiver<i32>> = chans.iter().map(|(_, rx)| rx.clone()).collect();
        let (nil_rx, done) = (nil_rx.clone(), wg.worker());
        s.spawn(move || {
            let mut cnt = [0; 4];
            for _ in 0..4 * n {
                let k = select! {
                    recv(c[0]) -> r => { r.unwrap(); 0 }
                    recv(c[3]) -> r => { r.unwrap(); 3 }
                    recv(c[2]) -> r => { r.unwrap(); 2 }
                    recv(c[1]) -> r => { r.unwrap(); 1 }
                };
                cnt[k] += 1;
                if cnt[k] == n {
                    c[k] = nil_rx.clone();
                }
            }
            drop(done);
        });
    }
    wg.wait();
    drop((chans, nil_tx, nil_rx, nil_tx_keep, nil_rx_keep));
    s.shutdown();
}

#[test]
fn test_select_fairness() {
    let s = sched();
    let trials = 10_000;
    let (tx1, rx1) = bounded::<u8>(trials + 1);
    let (tx2, rx2) = bounded::<u8>(trials + 1);
    for _ in 0..=trials {
        tx1.send(1).unwrap();
        tx2.send(2).unwrap();
    }
    let (_tx3, rx3) = bounded::<u8>(0);
    let (_tx4, rx4) = bounded::<u8>(0);
    let (out_tx, out_rx) = bounded::<u8>(0);
    let (done_tx, done_rx) = bounded::<()>(0);
    let h = s.spawn(move || loop {
        let b = select! {
            recv(rx3) -> b => b.unwrap(),
            recv(rx4) -> b => b.unwrap(),
            recv(rx1) -> b => b.unwrap(),
            recv(rx2) -> b => b.unwrap(),
        };
        select! {
            send(out_tx, b) -> r => r.unwrap(),
            recv(done_rx) -> _ => return,
        }
    });
    let (mut cnt1, mut cnt2) = (0i64, 0i64);
    for _ in 0..trials {
        match out_rx.recv().unwrap() {
            1 => cnt1 += 1,
            2 => cnt2 += 1,
            b => panic!("unexpected value {b}"),
        }
    }
    drop(done_tx); // close(done)
    h.join().unwrap();
    drop(tx1);
    drop(tx2);
    // A fair select gives cnt1 ~ cnt2; allow 10 standard deviations.
    let mean = trials as f64 * 0.5;
    let stddev = (trials as f64 * 0.25).sqrt();
    assert!(
        (cnt1 as f64 - mean).abs() <= 10.0 * stddev,
        "unfair select: in {trials} trials, results were {cnt1}, {cnt2}"
    );
    assert_eq!(cnt1 + cnt2, trials as i64);
    s.shutdown();
}

#[test]
fn test_chan_send_interface() {
    trait Marker: Send {}
    struct Mt;
    impl Marker for Mt {}
    let (tx, rx) = bounded::<Box<dyn Marker>>(1);
    tx.send(Box::new(Mt)).unwrap();
    select! {
        send(tx, Box::new(Mt)) -> _ => panic!("the channel is full"),
        default => {},
    }
    select! {
        send(tx, Box::new(Mt)) -> _ => panic!("the channel is full"),
        send(tx, Box::new(Mt)) -> _ => panic!("the channel is full"),
        default => {},
    }
    assert_eq!(rx.len(), 1);
}

#[test]
fn test_pseudo_random_send() {
    let s = sched();
    let n = 100;
    for cap in [0, n] {
        let (tx, rx) = bounded::<usize>(cap);
        let h = s.spawn(move || {
            (0..n)
                .map(|_| {
                    gofer::yield_now();
                    rx.recv().unwrap()
                })
                .collect::<Vec<_>>()
        });
        for _ in 0..n {
            select! {
                send(tx, 1) -> r => r.unwrap(),
                send(tx, 0) -> r => r.unwrap(),
            }
        }
        let l = h.join().unwrap();
        let n1: usize = l.iter().sum();
        let n0 = n - n1;
        assert!(
            n0 > n / 10 && n1 > n / 10,
            "want pseudorandom, got {n0} zeros and {n1} ones (chan cap {cap})"
        );
    }
    s.shutdown();
}

#[test]
fn test_multi_consumer() {
    let s = sched();
    let nwork = 23;
    let niter = 27_182;
    let pn = [2usize, 3, 7, 11, 13, 17, 19, 23, 27, 31];
    let (q_tx, q_rx) = bounded::<usize>(nwork * 3);
    let (r_tx, r_rx) = bounded::<usize>(nwork * 3);
    // Workers.
    for w in 0..nwork {
        let (q_rx, r_tx) = (q_rx.clone(), r_tx.clone());
        s.spawn(move || {
            for v in &q_rx {
                // Mess with the FIFO-ish nature of the iteration.
                if pn[w % pn.len()] == v {
                    gofer::yield_now();
                }
                r_tx.send(v).unwrap();
            }
            // Dropping the last r_tx clone closes r.
        });
    }
    drop((q_rx, r_tx));
    // Feeder: closing q ends the workers, whose exit closes r.
    let feeder = s.spawn(move || {
        let mut expect = 0;
        for i in 0..niter {
            let v = pn[i % pn.len()];
            expect += v;
            q_tx.send(v).unwrap();
        }
        expect
    });
    let (mut n, mut sum) = (0, 0);
    for v in r_rx {
        n += 1;
        sum += v;
    }
    let expect = feeder.join().unwrap();
    assert_eq!((n, sum), (niter, expect));
    s.shutdown();
}

#[test]
fn test_select_duplicate_channel() {
    // A select that names the same channel twice, which fires once.
    let s = sched();
    let (c_tx, c_rx) = bounded::<i32>(0);
    let (d_tx, d_rx) = bounded::<i32>(0);
    let (e_tx, e_rx) = bounded::<i32>(0);
    let (started_tx, started_rx) = bounded::<()>(0);
    s.spawn(move || {
        started_tx.send(()).unwrap();
        select! {
            recv(c_rx) -> _ => {},
            recv(c_rx) -> _ => {},
            recv(d_rx) -> _ => {},
        }
        e_tx.send(9).unwrap();
    });
    started_rx.recv().unwrap();
    let c = s.spawn(move || c_tx.send(8));
    assert_eq!(e_rx.recv(), Ok(9));
    assert!(c.join().unwrap().is_ok());
    // d was never received: its receiver is gone with the task.
    assert!(d_tx.send(7).is_err());
    s.shutdown();
}

#[test]
fn test_close_races_with_blocked_operations() {
    // Drop the last sender (Go's close) while receivers are in recv, in a
    // timed recv and in a select: every one of them wakes with the error,
    // after the values that were sent.
    let s = sched();
    for round in 0..200 {
        let (tx, rx) = bounded::<usize>(round % 3);
        let got = Arc::new(AtomicUsize::new(0));
        let mut hs = Vec::new();
        for k in 0..3 {
            let (rx, got) = (rx.clone(), got.clone());
            hs.push(s.spawn(move || loop {
                let r = match k {
                    0 => rx.recv(),
                    1 => match rx.recv_timeout(Duration::from_secs(10)) {
                        Ok(v) => Ok(v),
                        Err(RecvTimeoutError::Disconnected) => Err(RecvError),
                        Err(RecvTimeoutError::Timeout) => panic!("timed out"),
                    },
                    _ => select! { recv(rx) -> v => v },
                };
                match r {
                    Ok(_) => {
                        got.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(RecvError) => return,
                }
            }));
        }
        drop(rx);
        for i in 0..5 {
            tx.send(i).unwrap();
        }
        drop(tx);
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(got.load(Ordering::Relaxed), 5);
    }
    s.shutdown();
}

// ---- test/chan/*.go ----

#[test]
fn doubleselect() {
    // Sends every value to one of four channels with a select; receivers
    // multiplexed through a shared channel check each arrives exactly once.
    let s = sched();
    let iterations = 10_000;
    let chans: Vec<_> = (0..4).map(|_| bounded::<i32>(0)).collect();
    let (cmux_tx, cmux_rx) = bounded::<i32>(0);
    let txs: Vec<Sender<i32>> = chans.iter().map(|(tx, _)| tx.clone()).collect();
    s.spawn(move || {
        for i in 1..=iterations {
            select! {
                send(txs[0], i) -> r => r.unwrap(),
                send(txs[1], i) -> r => r.unwrap(),
                send(txs[2], i) -> r => r.unwrap(),
                send(txs[3], i) -> r => r.unwrap(),
            }
        }
        // Dropping txs closes the four channels.
    });
    for (_, rx) in chans.iter() {
        let (rx, cmux_tx) = (rx.clone(), cmux_tx.clone());
        s.spawn(move || {
            for v in rx.iter() {
                cmux_tx.send(v).unwrap();
            }
        });
    }
    drop((chans, cmux_tx));
    let mut seen = vec![false; iterations as usize + 1];
    for v in cmux_rx.iter() {
        assert!(!seen[v as usize], "got duplicate value {v}");
        seen[v as usize] = true;
    }
    assert!(seen[1..].iter().all(|b| *b));
    s.shutdown();
}

#[test]
fn fifo_async_and_sync_chain() {
    let s = sched();
    // Asynchronous FIFO: a buffered channel keeps order.
    let n = 10;
    let (tx, rx) = bounded::<i32>(n);
    for i in 0..n as i32 {
        tx.send(i).unwrap();
    }
    for i in 0..n as i32 {
        assert_eq!(rx.recv(), Ok(i));
    }
    // Synchronous FIFO: a chain of tasks, each waiting for its predecessor
    // before sending, must deliver in order.
    let (out_tx, out_rx) = bounded::<i32>(0);
    let (start, mut prev) = bounded::<i32>(0);
    for i in 0..n as i32 {
        let (next_tx, next_rx) = bounded::<i32>(0);
        let (out_tx, prev_rx) = (out_tx.clone(), prev);
        s.spawn(move || {
            prev_rx.recv().unwrap();
            out_tx.send(i).unwrap();
            next_tx.send(0).unwrap();
        });
        prev = next_rx;
    }
    start.send(0).unwrap();
    for i in 0..n as i32 {
        assert_eq!(out_rx.recv(), Ok(i));
    }
    assert_eq!(prev.recv(), Ok(0));
    s.shutdown();
}

#[test]
fn goroutines_daisy_chain() {
    // test/chan/goroutines.go: a long chain of tasks passing one value.
    let s = sched();
    let n = 2000;
    let (left_tx, mut right_rx) = bounded::<i32>(0);
    for _ in 0..n {
        let (tx, rx) = bounded::<i32>(0);
        let from = right_rx;
        gofer::Builder::new()
            .stack_size(64 * 1024)
            .scheduler(&s)
            .spawn(move || tx.send(from.recv().unwrap() + 1).unwrap())
            .unwrap();
        right_rx = rx;
    }
    left_tx.send(1).unwrap();
    assert_eq!(right_rx.recv(), Ok(n + 1));
    s.shutdown();
}

#[test]
fn sieve_of_primes() {
    // test/chan/sieve1.go: a concurrent prime sieve, one task per prime.
    let s = sched();
    let (primes_tx, primes_rx) = bounded::<i32>(0);
    let s2 = s.clone();
    s.spawn(move || {
        let (tx, mut ch) = bounded::<i32>(0);
        s2.spawn(move || {
            let mut i = 2;
            while tx.send(i).is_ok() {
                i += 1;
            }
        });
        loop {
            let Ok(prime) = ch.recv() else { return };
            if primes_tx.send(prime).is_err() {
                return; // Dropping ch unwinds the chain.
            }
            let (tx1, rx1) = bounded::<i32>(0);
            s2.spawn(move || {
                for i in ch.iter() {
                    if i % prime != 0 && tx1.send(i).is_err() {
                        return;
                    }
                }
            });
            ch = rx1;
        }
    });
    let want = [
        2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89,
        97,
    ];
    for p in want {
        assert_eq!(primes_rx.recv(), Ok(p));
    }
    drop(primes_rx);
    s.shutdown();
}

#[test]
fn unbounded_select_and_zero_sized_values() {
    // test/chan/zerosize.go and select on unbounded channels.
    let (tx, rx) = unbounded::<()>();
    let (tx2, rx2) = bounded::<[u8; 0]>(0);
    for _ in 0..100 {
        tx.send(()).unwrap();
    }
    let mut n = 0;
    loop {
        select! {
            recv(rx) -> v => { v.unwrap(); n += 1; }
            recv(rx2) -> _ => unreachable!(),
            default => break,
        }
    }
    assert_eq!(n, 100);
    drop(tx2);
}
