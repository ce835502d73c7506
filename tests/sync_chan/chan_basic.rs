//! Channel semantics: rendezvous, buffering, disconnection, timeouts, try
//! operations, iteration, tasks and threads mixed, and an MPMC stress test
//! that accounts for every value and every destructor.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use gofer::chan::{
    bounded, unbounded, Receiver, RecvError, RecvTimeoutError, SendError, SendTimeoutError, Sender,
    TryRecvError, TrySendError,
};
use gofer::Scheduler;

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

/// Counts drops of values it hands out.
#[derive(Default)]
struct DropCounter {
    made: AtomicUsize,
    dropped: AtomicUsize,
}

struct Tracked {
    id: usize,
    counter: Arc<DropCounter>,
}

impl Tracked {
    fn new(id: usize, counter: &Arc<DropCounter>) -> Tracked {
        counter.made.fetch_add(1, Ordering::Relaxed);
        Tracked {
            id,
            counter: counter.clone(),
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.counter.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn handles_are_send_sync_and_clone() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Sender<String>>();
    assert_send_sync::<Receiver<String>>();
    fn assert_error<E: std::error::Error + Send + Sync + 'static>() {}
    assert_error::<SendError<String>>();
    assert_error::<TrySendError<String>>();
    assert_error::<SendTimeoutError<String>>();
    assert_error::<RecvError>();
    assert_error::<TryRecvError>();
    assert_error::<RecvTimeoutError>();
}

#[test]
fn rendezvous_send_blocks_until_a_receiver_takes_the_value() {
    // One Processer: while the sender is parked nothing else can complete
    // its send, so the check below is deterministic.
    let s = sched(1);
    let (tx, rx) = bounded::<i32>(0);
    let (ready_tx, ready_rx) = unbounded::<()>();
    let sent = Arc::new(AtomicBool::new(false));
    let sent2 = sent.clone();
    let sender = s.spawn(move || {
        ready_tx.send(()).unwrap();
        tx.send(42).unwrap();
        sent2.store(true, Ordering::SeqCst);
    });
    let receiver = s.spawn(move || {
        ready_rx.recv().unwrap();
        // The sender ran up to its send and parked there.
        for _ in 0..10 {
            gofer::yield_now();
            assert!(
                !sent.load(Ordering::SeqCst),
                "send returned before a receiver came"
            );
        }
        assert_eq!(rx.len(), 0);
        assert_eq!(rx.recv(), Ok(42));
        rx
    });
    let rx = receiver.join().unwrap();
    sender.join().unwrap();
    assert_eq!(rx.recv(), Err(RecvError));
    s.shutdown();
}

#[test]
fn rendezvous_try_ops_need_a_waiting_peer() {
    let (tx, rx) = bounded::<i32>(0);
    assert_eq!(tx.try_send(1), Err(TrySendError::Full(1)));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(tx.capacity(), Some(0));
    assert!(tx.is_full() && rx.is_full());
    assert!(tx.is_empty() && rx.is_empty());

    // A receiver thread blocked in recv makes try_send succeed.
    let t = thread::spawn(move || rx.recv());
    loop {
        match tx.try_send(7) {
            Ok(()) => break,
            Err(TrySendError::Full(_)) => thread::yield_now(),
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(t.join().unwrap(), Ok(7));
}

#[test]
fn bounded_buffers_up_to_capacity_then_send_waits() {
    let s = sched(2);
    let (tx, rx) = bounded::<i32>(2);
    tx.send(1).unwrap();
    tx.send(2).unwrap();
    assert!(tx.is_full());
    assert_eq!(tx.len(), 2);
    assert_eq!(tx.try_send(3), Err(TrySendError::Full(3)));
    // A third send waits until a value is taken, and keeps FIFO order.
    let h = s.spawn(move || tx.send(3));
    assert_eq!(rx.recv(), Ok(1));
    h.join().unwrap().unwrap();
    assert_eq!(rx.recv(), Ok(2));
    assert_eq!(rx.recv(), Ok(3));
    assert_eq!(rx.recv(), Err(RecvError));
    s.shutdown();
}

#[test]
fn unbounded_never_waits_and_has_no_capacity() {
    let (tx, rx) = unbounded();
    for i in 0..10_000 {
        tx.try_send(i).unwrap();
    }
    assert_eq!(tx.capacity(), None);
    assert!(!tx.is_full());
    assert_eq!(rx.len(), 10_000);
    assert!(rx.iter().take(10_000).eq(0..10_000));
    assert!(rx.is_empty());
}

#[test]
fn receivers_drain_buffered_values_after_senders_disconnect() {
    let (tx, rx) = bounded(5);
    let tx2 = tx.clone();
    tx.send(1).unwrap();
    tx2.send(2).unwrap();
    drop(tx);
    assert!(!rx.is_disconnected(), "one sender is still alive");
    tx2.send(3).unwrap();
    drop(tx2);
    assert!(rx.is_disconnected());
    assert_eq!(rx.recv(), Ok(1));
    assert_eq!(rx.try_recv(), Ok(2));
    assert_eq!(rx.recv_timeout(ms(10)), Ok(3));
    assert_eq!(rx.recv(), Err(RecvError));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    assert_eq!(rx.recv_timeout(ms(10)), Err(RecvTimeoutError::Disconnected));
}

#[test]
fn send_fails_with_the_value_once_receivers_disconnect() {
    for cap in [Some(0), Some(3), None] {
        let (tx, rx) = match cap {
            Some(c) => bounded::<String>(c),
            None => unbounded(),
        };
        let rx2 = rx.clone();
        drop(rx);
        if cap != Some(0) {
            tx.send("kept".into()).unwrap();
        }
        drop(rx2);
        assert!(tx.is_disconnected());
        let e = tx.send("a".into()).unwrap_err();
        assert_eq!(e.into_inner(), "a");
        assert_eq!(
            tx.try_send("b".into()),
            Err(TrySendError::Disconnected("b".into()))
        );
        assert_eq!(
            tx.send_timeout("c".into(), ms(10)),
            Err(SendTimeoutError::Disconnected("c".into()))
        );
    }
}

#[test]
fn dropping_the_last_sender_wakes_blocked_receivers() {
    let s = sched(2);
    let (tx, rx) = bounded::<i32>(0);
    let (parked_tx, parked_rx) = unbounded();
    let mut hs = Vec::new();
    for _ in 0..4 {
        let rx = rx.clone();
        let parked_tx = parked_tx.clone();
        hs.push(s.spawn(move || {
            parked_tx.send(()).unwrap();
            rx.recv()
        }));
    }
    let rx_thread = {
        let rx = rx.clone();
        thread::spawn(move || rx.recv())
    };
    for _ in 0..4 {
        parked_rx.recv().unwrap();
    }
    drop(tx);
    for h in hs {
        assert_eq!(h.join().unwrap(), Err(RecvError));
    }
    assert_eq!(rx_thread.join().unwrap(), Err(RecvError));
    s.shutdown();
}

#[test]
fn dropping_the_last_receiver_hands_blocked_senders_their_values_back() {
    let s = sched(2);
    for cap in [0, 1] {
        let (tx, rx) = bounded::<String>(cap);
        if cap == 1 {
            tx.send("buffered".into()).unwrap();
        }
        let (started_tx, started_rx) = unbounded();
        let mut hs = Vec::new();
        for i in 0..3 {
            let tx = tx.clone();
            let started_tx = started_tx.clone();
            hs.push(s.spawn(move || {
                started_tx.send(()).unwrap();
                tx.send(format!("v{i}"))
            }));
        }
        let t = {
            let tx = tx.clone();
            thread::spawn(move || tx.send("thread".into()))
        };
        for _ in 0..3 {
            started_rx.recv().unwrap();
        }
        drop(rx);
        for (i, h) in hs.into_iter().enumerate() {
            assert_eq!(h.join().unwrap().unwrap_err().into_inner(), format!("v{i}"));
        }
        assert_eq!(t.join().unwrap().unwrap_err().0, "thread");
    }
    s.shutdown();
}

#[test]
fn dropping_the_last_receiver_drops_buffered_values() {
    let counter = Arc::new(DropCounter::default());
    let (tx, rx) = bounded(10);
    for i in 0..5 {
        tx.send(Tracked::new(i, &counter)).unwrap();
    }
    drop(rx);
    assert_eq!(counter.dropped.load(Ordering::Relaxed), 5);
    let back = tx.send(Tracked::new(5, &counter)).unwrap_err().into_inner();
    assert_eq!(back.id, 5);
    drop(back);
    assert_eq!(counter.dropped.load(Ordering::Relaxed), 6);
}

#[test]
fn recv_timeout_times_out_in_a_task_and_in_a_thread() {
    let s = sched(1);
    let (tx, rx) = bounded::<i32>(1);
    let rx2 = rx.clone();
    let h = s.spawn(move || {
        let t = Instant::now();
        let r = rx2.recv_timeout(ms(30));
        (r, t.elapsed())
    });
    let t = Instant::now();
    assert_eq!(rx.recv_timeout(ms(30)), Err(RecvTimeoutError::Timeout));
    assert!(t.elapsed() >= ms(30));
    let (r, took) = h.join().unwrap();
    assert_eq!(r, Err(RecvTimeoutError::Timeout));
    assert!(took >= ms(30));
    // A zero timeout behaves like try_recv.
    assert_eq!(
        rx.recv_timeout(Duration::ZERO),
        Err(RecvTimeoutError::Timeout)
    );
    tx.send(1).unwrap();
    assert_eq!(rx.recv_timeout(Duration::ZERO), Ok(1));
    let deadline = Instant::now() + ms(5);
    assert_eq!(rx.recv_deadline(deadline), Err(RecvTimeoutError::Timeout));
    assert!(Instant::now() >= deadline);
    s.shutdown();
}

#[test]
fn send_timeout_times_out_on_a_full_or_rendezvous_channel() {
    let s = sched(1);
    for cap in [0, 1] {
        let (tx, rx) = bounded::<i32>(cap);
        if cap == 1 {
            tx.send(0).unwrap();
        }
        let tx2 = tx.clone();
        let h = s.spawn(move || {
            let t = Instant::now();
            (tx2.send_timeout(5, ms(30)), t.elapsed())
        });
        let t = Instant::now();
        assert_eq!(
            tx.send_timeout(6, ms(30)),
            Err(SendTimeoutError::Timeout(6))
        );
        assert!(t.elapsed() >= ms(30));
        let (r, took) = h.join().unwrap();
        assert_eq!(r.unwrap_err().into_inner(), 5);
        assert!(took >= ms(30));
        // Nothing extra got in.
        assert_eq!(rx.len(), cap);
    }
    s.shutdown();
}

#[test]
fn recv_timeout_returns_a_value_that_arrives_in_time() {
    let s = sched(2);
    let (tx, rx) = bounded::<i32>(0);
    let (go_tx, go_rx) = bounded::<()>(0);
    let h = s.spawn(move || {
        go_rx.recv().unwrap();
        tx.send(9).unwrap();
    });
    let r = s.spawn(move || {
        go_tx.send(()).unwrap();
        rx.recv_timeout(Duration::from_secs(10))
    });
    assert_eq!(r.join().unwrap(), Ok(9));
    h.join().unwrap();
    s.shutdown();
}

#[test]
fn racing_timeouts_never_lose_or_duplicate_a_value() {
    // Senders and receivers with tiny timeouts race the hand-off: each value
    // is either received (and its send reported Ok) or handed back to its
    // sender, never both and never neither.
    let s = sched(2);
    for cap in [0, 1] {
        let (tx, rx) = bounded::<usize>(cap);
        let n = 2000;
        let sent_ok = Arc::new(AtomicUsize::new(0));
        let mut senders = Vec::new();
        for k in 0..2 {
            let tx = tx.clone();
            let sent_ok = sent_ok.clone();
            senders.push(s.spawn(move || {
                let mut returned = Vec::new();
                for i in 0..n {
                    let v = k * n + i;
                    match tx.send_timeout(v, Duration::from_micros(20)) {
                        Ok(()) => {
                            sent_ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(SendTimeoutError::Timeout(back)) => {
                            assert_eq!(back, v);
                            returned.push(back);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                returned
            }));
        }
        drop(tx);
        let receiver = {
            let rx = rx.clone();
            s.spawn(move || {
                let mut got = Vec::new();
                loop {
                    match rx.recv_timeout(Duration::from_micros(15)) {
                        Ok(v) => got.push(v),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => return got,
                    }
                }
            })
        };
        // A thread receiver joins the race too.
        let mut got_thread = Vec::new();
        loop {
            match rx.recv_timeout(Duration::from_micros(25)) {
                Ok(v) => got_thread.push(v),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let mut returned = Vec::new();
        for h in senders {
            returned.extend(h.join().unwrap());
        }
        let mut got = receiver.join().unwrap();
        got.extend(got_thread);
        assert_eq!(got.len(), sent_ok.load(Ordering::Relaxed));
        let mut all: Vec<usize> = got.into_iter().chain(returned).collect();
        all.sort_unstable();
        assert!(
            all.into_iter().eq(0..2 * n),
            "a value was lost or duplicated"
        );
    }
    s.shutdown();
}

#[test]
fn iterators_yield_until_disconnected_or_empty() {
    let (tx, rx) = unbounded();
    for i in 0..3 {
        tx.send(i).unwrap();
    }
    assert_eq!(rx.try_iter().collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(rx.try_iter().count(), 0);
    for i in 3..6 {
        tx.send(i).unwrap();
    }
    let mut seen = Vec::new();
    for v in &rx {
        seen.push(v);
        if v == 5 {
            break;
        }
    }
    assert_eq!(seen, [3, 4, 5]);
    let t = thread::spawn(move || {
        for i in 6..9 {
            tx.send(i).unwrap();
        }
    });
    // The owning iterator ends when the sender thread is done.
    assert_eq!(rx.into_iter().collect::<Vec<_>>(), [6, 7, 8]);
    t.join().unwrap();
}

#[test]
fn tasks_and_threads_mix_as_senders_and_receivers() {
    let s = sched(2);
    for cap in [Some(0), Some(3), None] {
        let (tx, rx) = match cap {
            Some(c) => bounded::<u64>(c),
            None => unbounded(),
        };
        let per = 500u64;
        let mut task_senders = Vec::new();
        let mut thread_senders = Vec::new();
        for k in 0..2u64 {
            let tx1 = tx.clone();
            task_senders
                .push(s.spawn(move || (0..per).for_each(|i| tx1.send(k * per + i).unwrap())));
            let tx2 = tx.clone();
            thread_senders.push(thread::spawn(move || {
                (0..per).for_each(|i| tx2.send((k + 2) * per + i).unwrap())
            }));
        }
        drop(tx);
        let mut task_receivers = Vec::new();
        let mut thread_receivers = Vec::new();
        for _ in 0..2 {
            let rx1 = rx.clone();
            task_receivers.push(s.spawn(move || rx1.iter().collect::<Vec<_>>()));
            let rx2 = rx.clone();
            thread_receivers.push(thread::spawn(move || rx2.iter().collect::<Vec<_>>()));
        }
        drop(rx);
        task_senders.into_iter().for_each(|h| h.join().unwrap());
        thread_senders.into_iter().for_each(|h| h.join().unwrap());
        let mut all = Vec::new();
        for h in task_receivers {
            all.extend(h.join().unwrap());
        }
        for h in thread_receivers {
            all.extend(h.join().unwrap());
        }
        all.sort_unstable();
        assert!(all.into_iter().eq(0..4 * per), "cap {cap:?}");
    }
    s.shutdown();
}

#[test]
fn values_from_one_sender_arrive_in_order() {
    let s = sched(2);
    for cap in [0, 1, 7] {
        let (tx, rx) = bounded::<u32>(cap);
        let h = s.spawn(move || (0..2000).for_each(|i| tx.send(i).unwrap()));
        assert!(rx.iter().eq(0..2000));
        h.join().unwrap();
    }
    s.shutdown();
}

#[test]
fn mpmc_stress_delivers_every_value_once_and_drops_each_once() {
    // One consumer task blocks its thread joining a plain thread, until the
    // producers are done: the started tasks bound to that thread must be
    // able to move, or they would wait for it for ever.
    // SAFETY: the tasks touch no thread-local across a switch: their state
    // is in their frames, gofer channels and a std `Mutex` whose guard is
    // dropped before the next channel operation.
    let s = unsafe {
        Scheduler::builder()
            .min_threads(2)
            .max_threads(2)
            .migrate_started_tasks(true)
    }
    .build()
    .unwrap();
    let counter = Arc::new(DropCounter::default());
    for cap in [Some(0), Some(1), Some(16), None] {
        let (tx, rx) = match cap {
            Some(c) => bounded::<Tracked>(c),
            None => unbounded(),
        };
        let producers = 4;
        let per = 2000;
        let seen = Arc::new(Mutex::new(HashSet::new()));
        let mut hs = Vec::new();
        for p in 0..producers {
            let tx = tx.clone();
            let counter = counter.clone();
            hs.push(s.spawn(move || {
                for i in 0..per {
                    let mut v = Tracked::new(p * per + i, &counter);
                    // Mix the send flavours; failed attempts hand the value
                    // back and it is sent again.
                    loop {
                        let r = match i % 3 {
                            0 => tx.send(v).map_err(|e| e.into_inner()),
                            1 => tx.try_send(v).map_err(|e| e.into_inner()),
                            _ => tx
                                .send_timeout(v, Duration::from_micros(50))
                                .map_err(|e| e.into_inner()),
                        };
                        match r {
                            Ok(()) => break,
                            Err(back) => {
                                v = back;
                                gofer::yield_now();
                            }
                        }
                    }
                }
            }));
        }
        drop(tx);
        let mut consumers = Vec::new();
        for c in 0..4 {
            let rx = rx.clone();
            let seen = seen.clone();
            let body = move || {
                let mut n = 0;
                loop {
                    let r = match c % 2 {
                        0 => rx.recv().map_err(|_| ()),
                        _ => match rx.recv_timeout(Duration::from_micros(50)) {
                            Ok(v) => Ok(v),
                            Err(RecvTimeoutError::Timeout) => continue,
                            Err(RecvTimeoutError::Disconnected) => Err(()),
                        },
                    };
                    match r {
                        Ok(v) => {
                            assert!(seen.lock().unwrap().insert(v.id), "duplicate {}", v.id);
                            n += 1;
                        }
                        Err(()) => return n,
                    }
                }
            };
            if c == 3 {
                let t = thread::spawn(body);
                consumers.push(s.spawn(move || t.join().unwrap()));
            } else {
                consumers.push(s.spawn(body));
            }
        }
        drop(rx);
        hs.into_iter().for_each(|h| h.join().unwrap());
        let total: usize = consumers.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(total, producers * per, "cap {cap:?}");
        assert_eq!(seen.lock().unwrap().len(), producers * per);
    }
    assert_eq!(
        counter.made.load(Ordering::Relaxed),
        counter.dropped.load(Ordering::Relaxed),
        "every value is dropped exactly once"
    );
    s.shutdown();
}

#[test]
fn error_messages_are_clear() {
    assert_eq!(
        SendError(1).to_string(),
        "sending on a disconnected channel"
    );
    assert_eq!(format!("{:?}", SendError(1)), "SendError(..)");
    assert_eq!(
        TrySendError::Full(1).to_string(),
        "sending on a full channel"
    );
    assert_eq!(
        TrySendError::Disconnected(1).to_string(),
        "sending on a disconnected channel"
    );
    assert!(TrySendError::Full(1).is_full());
    assert!(SendTimeoutError::Timeout(1).is_timeout());
    assert_eq!(
        SendTimeoutError::Timeout(1).to_string(),
        "timed out waiting to send on a channel"
    );
    assert_eq!(
        RecvError.to_string(),
        "receiving on an empty and disconnected channel"
    );
    assert_eq!(
        TryRecvError::Empty.to_string(),
        "receiving on an empty channel"
    );
    assert!(TryRecvError::Disconnected.is_disconnected());
    assert_eq!(
        RecvTimeoutError::Timeout.to_string(),
        "timed out waiting to receive on a channel"
    );
    assert_eq!(
        TrySendError::from(SendError(3)),
        TrySendError::Disconnected(3)
    );
    assert_eq!(TryRecvError::from(RecvError), TryRecvError::Disconnected);
}

#[test]
fn timed_out_operations_leave_no_registration_behind() {
    // After a receive times out, no receiver may be left registered: a
    // rendezvous try_send must find nobody to hand its value to.
    let s = sched(1);
    let (tx, rx) = bounded::<i32>(0);
    assert_eq!(rx.recv_timeout(ms(5)), Err(RecvTimeoutError::Timeout));
    assert_eq!(tx.try_send(1), Err(TrySendError::Full(1)));
    let rx2 = rx.clone();
    let h = s.spawn(move || rx2.recv_timeout(ms(5)));
    assert_eq!(h.join().unwrap(), Err(RecvTimeoutError::Timeout));
    assert_eq!(tx.try_send(2), Err(TrySendError::Full(2)));
    // And the same for senders: no value is left behind to be received.
    assert_eq!(tx.send_timeout(3, ms(5)), Err(SendTimeoutError::Timeout(3)));
    let tx2 = tx.clone();
    let h = s.spawn(move || tx2.send_timeout(4, ms(5)));
    assert_eq!(h.join().unwrap(), Err(SendTimeoutError::Timeout(4)));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    s.shutdown();
}
