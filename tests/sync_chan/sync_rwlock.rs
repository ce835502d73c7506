//! `gofer::sync::RwLock`: shared reads, exclusive writes, writer
//! preference, timeouts, tasks and threads.

use crate::sync_util;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gofer::sync::RwLock;
use sync_util::{join_all, sched, wait_for, within};

#[test]
fn readers_hold_the_lock_together() {
    const READERS: usize = 8;
    let s = sched(2);
    let lock = Arc::new(RwLock::new(5));
    let holders = Arc::new(AtomicUsize::new(0));
    let hs = (0..READERS)
        .map(|_| {
            let (lock, holders) = (lock.clone(), holders.clone());
            s.spawn(move || {
                let g = lock.read();
                holders.fetch_add(1, Ordering::SeqCst);
                // Only possible if all readers are inside at once.
                wait_for("every reader inside", || {
                    holders.load(Ordering::SeqCst) == READERS
                });
                *g
            })
        })
        .collect();
    assert_eq!(join_all(hs), vec![5; READERS]);
    s.shutdown();
}

#[test]
fn writers_exclude_readers_and_writers_across_tasks_and_threads() {
    const WRITER_TASKS: usize = 20;
    const READER_TASKS: usize = 20;
    const THREADS: usize = 2;
    const ROUNDS: usize = 100;
    let s = sched(3);
    let lock = Arc::new(RwLock::new((0u64, 0u64)));
    let writer = |lock: Arc<RwLock<(u64, u64)>>| {
        move || {
            for _ in 0..ROUNDS {
                let mut g = lock.write();
                g.0 += 1;
                gofer::yield_now();
                g.1 += 1;
            }
        }
    };
    let reader = |lock: Arc<RwLock<(u64, u64)>>| {
        move || {
            for _ in 0..ROUNDS {
                let g = lock.read();
                let a = g.0;
                gofer::yield_now();
                assert_eq!(g.0, g.1, "a reader saw a half-done write");
                assert_eq!(g.0, a, "the value changed under a reader");
            }
        }
    };
    let mut hs = Vec::new();
    for _ in 0..WRITER_TASKS {
        hs.push(s.spawn(writer(lock.clone())));
    }
    for _ in 0..READER_TASKS {
        hs.push(s.spawn(reader(lock.clone())));
    }
    let mut threads = Vec::new();
    for _ in 0..THREADS {
        threads.push(std::thread::spawn(writer(lock.clone())));
        threads.push(std::thread::spawn(reader(lock.clone())));
    }
    join_all(hs);
    within(move || threads.into_iter().for_each(|t| t.join().unwrap()));
    let n = ((WRITER_TASKS + THREADS) * ROUNDS) as u64;
    assert_eq!(*lock.read(), (n, n));
    s.shutdown();
}

#[test]
fn writer_is_not_starved_by_a_stream_of_readers() {
    const READERS: usize = 6;
    let s = sched(2);
    let lock = Arc::new(RwLock::new(0u64));
    let writer_done = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let (lock, done, reads) = (lock.clone(), writer_done.clone(), reads.clone());
            s.spawn(move || {
                let start = Instant::now();
                while !done.load(Ordering::SeqCst) {
                    // Overlapping readers that hold across a switch: without
                    // writer preference the count of readers may never be 0.
                    let g = lock.read();
                    reads.fetch_add(1, Ordering::Relaxed);
                    gofer::yield_now();
                    drop(g);
                    assert!(start.elapsed() < sync_util::LIMIT, "writer starved");
                }
            })
        })
        .collect();
    wait_for("the reader stream to flow", || {
        reads.load(Ordering::Relaxed) > 1000
    });
    // From a task and from a thread.
    let (l2, d2) = (lock.clone(), writer_done.clone());
    let w_task = s.spawn(move || {
        *l2.write() += 1;
        !d2.load(Ordering::SeqCst)
    });
    let l3 = lock.clone();
    let w_thread = std::thread::spawn(move || *l3.write() += 1);
    let both_while_reading = join_all(vec![w_task]);
    within(move || w_thread.join().unwrap());
    writer_done.store(true, Ordering::SeqCst);
    join_all(readers);
    assert_eq!(both_while_reading, vec![true], "readers were still running");
    assert_eq!(*lock.read(), 2);
    s.shutdown();
}

#[test]
fn waiting_writer_blocks_new_readers() {
    let s = sched(2);
    let lock = Arc::new(RwLock::new(0));
    let r1 = lock.read();
    let l2 = lock.clone();
    let writer = s.spawn(move || *l2.write() = 1);
    // Readers can come in until the writer queues; then they cannot.
    wait_for("the writer to queue", || lock.try_read().is_none());
    let l3 = lock.clone();
    let late_reader = s.spawn(move || l3.try_read_for(Duration::from_millis(20)).is_none());
    assert_eq!(join_all(vec![late_reader]), vec![true]);
    assert!(
        !writer.is_finished(),
        "the writer waits for the first reader"
    );
    drop(r1);
    join_all(vec![writer]);
    assert_eq!(*lock.read(), 1);
    s.shutdown();
}

#[test]
fn try_read_and_try_write_respect_holders() {
    let lock = RwLock::new(1);
    let r = lock.read();
    assert!(lock.try_read().is_some(), "readers share");
    assert!(lock.try_write().is_none());
    drop(r);
    let mut w = lock.try_write().expect("free");
    *w = 2;
    assert!(lock.try_read().is_none());
    assert!(lock.try_write().is_none());
    drop(w);
    assert_eq!(*lock.try_read().expect("free"), 2);
}

#[test]
fn try_write_for_expires_while_readers_hold() {
    const TIMEOUT: Duration = Duration::from_millis(30);
    let s = sched(2);
    let lock = Arc::new(RwLock::new(()));
    let r = lock.read();
    let l2 = lock.clone();
    let task = s.spawn(move || {
        let t = Instant::now();
        (l2.try_write_for(TIMEOUT).is_none(), t.elapsed())
    });
    let l3 = lock.clone();
    let thread = std::thread::spawn(move || {
        let t = Instant::now();
        (l3.try_write_for(TIMEOUT).is_none(), t.elapsed())
    });
    let mut results = join_all(vec![task]);
    results.push(within(move || thread.join().unwrap()));
    for (timed_out, waited) in results {
        assert!(timed_out);
        assert!(waited >= TIMEOUT, "gave up early: {waited:?}");
    }
    // The writers left the queue: new readers are welcome again.
    drop(lock.try_read().expect("no writer waits any more"));
    drop(r);
    drop(lock.try_write().expect("free"));
    s.shutdown();
}

#[test]
fn try_read_for_expires_while_a_writer_holds() {
    const TIMEOUT: Duration = Duration::from_millis(30);
    let s = sched(2);
    let lock = Arc::new(RwLock::new(()));
    let w = lock.write();
    let l2 = lock.clone();
    let task = s.spawn(move || {
        let t = Instant::now();
        (l2.try_read_for(TIMEOUT).is_none(), t.elapsed())
    });
    let l3 = lock.clone();
    let thread = std::thread::spawn(move || {
        let t = Instant::now();
        (l3.try_read_for(TIMEOUT).is_none(), t.elapsed())
    });
    let mut results = join_all(vec![task]);
    results.push(within(move || thread.join().unwrap()));
    for (timed_out, waited) in results {
        assert!(timed_out);
        assert!(waited >= TIMEOUT, "gave up early: {waited:?}");
    }
    drop(w);
    drop(lock.try_write().expect("free"));
    s.shutdown();
}

#[test]
fn timed_out_writer_lets_queued_readers_in() {
    let s = sched(2);
    let lock = Arc::new(RwLock::new(7));
    let r1 = lock.read();
    let l2 = lock.clone();
    let writer = s.spawn(move || l2.try_write_for(Duration::from_millis(40)).is_none());
    wait_for("the writer to queue", || lock.try_read().is_none());
    // Queued behind the writer; once the writer gives up, it must be let
    // in even though the first reader never leaves.
    let l3 = lock.clone();
    let reader = s.spawn(move || *l3.read());
    assert_eq!(join_all(vec![writer]), vec![true]);
    assert_eq!(join_all(vec![reader]), vec![7]);
    drop(r1);
    s.shutdown();
}

static STATIC_RW: RwLock<u32> = RwLock::new(3);

#[test]
fn into_inner_get_mut_and_static() {
    let mut l = RwLock::new(String::from("a"));
    l.get_mut().push('b');
    assert_eq!(&*l.read(), "ab");
    assert_eq!(l.into_inner(), "ab");
    assert_eq!(*STATIC_RW.read(), 3);
    assert_eq!(format!("{:?}", RwLock::new(1)), "RwLock { data: 1 }");
    let l = RwLock::<u8>::default();
    let _w = l.write();
    assert_eq!(format!("{l:?}"), "RwLock { data: <locked> }");
}
