//! `gofer::sync::Semaphore`: bounded concurrency, timeouts, permit
//! hand-over, tasks and threads.

use crate::sync_util;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gofer::sync::Semaphore;
use sync_util::{join_all, sched, wait_for, within};

/// Records how many holders are inside at once.
struct Gauge {
    inside: AtomicUsize,
    max: AtomicUsize,
    entered: AtomicUsize,
}

impl Gauge {
    fn new() -> Arc<Gauge> {
        Arc::new(Gauge {
            inside: AtomicUsize::new(0),
            max: AtomicUsize::new(0),
            entered: AtomicUsize::new(0),
        })
    }

    fn visit(&self) {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        self.entered.fetch_add(1, Ordering::SeqCst);
        gofer::yield_now();
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

#[test]
fn permits_bound_concurrency_across_tasks_and_threads() {
    const PERMITS: usize = 3;
    const TASKS: usize = 200;
    const THREADS: usize = 3;
    const ROUNDS: usize = 20;
    let s = sched(3);
    let sem = Arc::new(Semaphore::new(PERMITS));
    let gauge = Gauge::new();
    let work = |sem: Arc<Semaphore>, gauge: Arc<Gauge>| {
        move || {
            for _ in 0..ROUNDS {
                let _p = sem.acquire();
                gauge.visit();
            }
        }
    };
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| s.spawn(work(sem.clone(), gauge.clone())))
        .collect();
    let threads: Vec<_> = (0..THREADS)
        .map(|_| std::thread::spawn(work(sem.clone(), gauge.clone())))
        .collect();
    join_all(tasks);
    within(move || threads.into_iter().for_each(|t| t.join().unwrap()));
    assert_eq!(
        gauge.entered.load(Ordering::SeqCst),
        (TASKS + THREADS) * ROUNDS
    );
    let max = gauge.max.load(Ordering::SeqCst);
    assert!(max <= PERMITS, "{max} holders at once");
    assert_eq!(sem.available_permits(), PERMITS);
    s.shutdown();
}

#[test]
fn try_acquire_fails_when_exhausted() {
    let sem = Semaphore::new(2);
    let a = sem.try_acquire().expect("first");
    let b = sem.try_acquire().expect("second");
    assert!(sem.try_acquire().is_none());
    assert_eq!(sem.available_permits(), 0);
    drop(a);
    assert_eq!(sem.available_permits(), 1);
    let c = sem.try_acquire().expect("returned");
    drop((b, c));
    assert_eq!(sem.available_permits(), 2);
}

#[test]
fn acquire_timeout_expires_when_no_permit_comes() {
    const TIMEOUT: Duration = Duration::from_millis(30);
    let s = sched(2);
    let sem = Arc::new(Semaphore::new(0));
    let run = |sem: Arc<Semaphore>| {
        move || {
            let t = Instant::now();
            (sem.acquire_timeout(TIMEOUT).is_none(), t.elapsed())
        }
    };
    let task = s.spawn(run(sem.clone()));
    let thread = std::thread::spawn(run(sem.clone()));
    let mut results = join_all(vec![task]);
    results.push(within(move || thread.join().unwrap()));
    for (timed_out, waited) in results {
        assert!(timed_out);
        assert!(waited >= TIMEOUT, "gave up early: {waited:?}");
    }
    // Nobody is queued any more: a new permit is free for anyone.
    sem.add_permits(1);
    assert!(sem.try_acquire().is_some());
    s.shutdown();
}

#[test]
fn acquire_timeout_succeeds_when_a_permit_comes_in_time() {
    let s = sched(2);
    let sem = Arc::new(Semaphore::new(0));
    let started = Arc::new(AtomicBool::new(false));
    let (sem2, started2) = (sem.clone(), started.clone());
    let h = s.spawn(move || {
        started2.store(true, Ordering::SeqCst);
        sem2.acquire_timeout(Duration::from_secs(60))
            .map(|p| p.forget())
    });
    wait_for("the waiter to start", || started.load(Ordering::SeqCst));
    sem.add_permits(1);
    assert_eq!(join_all(vec![h]), vec![Some(())]);
    assert_eq!(sem.available_permits(), 0, "the waiter kept its permit");
    s.shutdown();
}

#[test]
fn timed_out_waiter_does_not_swallow_a_later_permit() {
    let s = sched(2);
    let sem = Arc::new(Semaphore::new(0));
    let sem_a = sem.clone();
    let a = s.spawn(move || sem_a.acquire_timeout(Duration::from_millis(30)).is_none());
    let b_started = Arc::new(AtomicBool::new(false));
    let (sem_b, b_started2) = (sem.clone(), b_started.clone());
    let b = s.spawn(move || {
        b_started2.store(true, Ordering::SeqCst);
        sem_b.acquire().forget();
    });
    wait_for("B to start", || b_started.load(Ordering::SeqCst));
    // A's deadline comes 30 ms after it queued; B queued right after it
    // started, so by now both have been queued and A has left.
    assert_eq!(join_all(vec![a]), vec![true]);
    sem.add_permits(1);
    join_all(vec![b]);
    assert_eq!(sem.available_permits(), 0);
    s.shutdown();
}

#[test]
fn timeouts_racing_releases_never_lose_permits() {
    const PERMITS: usize = 2;
    const HOLDERS: usize = 6;
    const TIMED: usize = 8;
    const ROUNDS: usize = 300;
    let s = sched(3);
    let sem = Arc::new(Semaphore::new(PERMITS));
    let gauge = Gauge::new();
    let mut hs = Vec::new();
    for _ in 0..HOLDERS {
        let (sem, gauge) = (sem.clone(), gauge.clone());
        hs.push(s.spawn(move || {
            for _ in 0..ROUNDS {
                let _p = sem.acquire();
                gauge.visit();
            }
        }));
    }
    for i in 0..TIMED {
        let (sem, gauge) = (sem.clone(), gauge.clone());
        hs.push(s.spawn(move || {
            for r in 0..ROUNDS {
                let t = Duration::from_micros(((i * 3 + r) % 7 * 10) as u64);
                if let Some(_p) = sem.acquire_timeout(t) {
                    gauge.visit();
                }
            }
        }));
    }
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (sem, gauge) = (sem.clone(), gauge.clone());
            std::thread::spawn(move || {
                for r in 0..ROUNDS {
                    if let Some(_p) = sem.acquire_timeout(Duration::from_micros(r as u64 % 50)) {
                        gauge.visit();
                    }
                }
            })
        })
        .collect();
    join_all(hs);
    within(move || threads.into_iter().for_each(|t| t.join().unwrap()));
    assert!(gauge.max.load(Ordering::SeqCst) <= PERMITS);
    assert!(gauge.entered.load(Ordering::SeqCst) >= HOLDERS * ROUNDS);
    assert_eq!(sem.available_permits(), PERMITS, "a permit was lost");
    s.shutdown();
}

#[test]
fn add_permits_wakes_every_waiter_it_can_serve() {
    const WAITERS: usize = 30;
    let s = sched(2);
    let sem = Arc::new(Semaphore::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..WAITERS)
        .map(|_| {
            let (sem, started) = (sem.clone(), started.clone());
            s.spawn(move || {
                started.fetch_add(1, Ordering::SeqCst);
                sem.acquire().forget();
            })
        })
        .collect();
    wait_for("the waiters to start", || {
        started.load(Ordering::SeqCst) == WAITERS
    });
    sem.add_permits(WAITERS + 2);
    join_all(hs);
    assert_eq!(sem.available_permits(), 2, "each waiter took exactly one");
    s.shutdown();
}

#[test]
fn forget_shrinks_the_count() {
    let sem = Semaphore::new(3);
    sem.acquire().forget();
    assert_eq!(sem.available_permits(), 2);
    sem.add_permits(0);
    assert_eq!(sem.available_permits(), 2);
    assert_eq!(format!("{sem:?}"), "Semaphore { available_permits: 2 }");
}

#[test]
#[should_panic(expected = "semaphore permit count overflow")]
fn add_permits_past_the_maximum_panics() {
    let sem = Semaphore::new(Semaphore::MAX_PERMITS);
    sem.add_permits(1);
}

static STATIC_SEM: Semaphore = Semaphore::new(1);

#[test]
fn const_new_works_in_a_static() {
    let p = STATIC_SEM.acquire();
    assert!(STATIC_SEM.try_acquire().is_none());
    drop(p);
    assert_eq!(STATIC_SEM.available_permits(), 1);
}

#[test]
fn acquire_cancellable_gives_up_when_the_token_is_cancelled() {
    use gofer::task::CancelToken;
    within(|| {
        let s = sched(2);
        let sem = Arc::new(Semaphore::new(1));
        let held = sem.acquire_owned();
        // A task and a thread wait on the exhausted semaphore.
        let token = CancelToken::new();
        let (sem1, t1) = (sem.clone(), token.clone());
        let task = s.spawn(move || sem1.acquire_cancellable(&t1).map(drop));
        let (sem2, t2) = (sem.clone(), token.child_token());
        let thread = std::thread::spawn(move || sem2.acquire_cancellable(&t2).map(drop));
        std::thread::sleep(Duration::from_millis(20));
        assert!(!task.is_finished() && !thread.is_finished(), "they wait");
        token.cancel();
        assert_eq!(task.join().expect("returned"), Err(gofer::Cancelled));
        assert_eq!(thread.join().expect("returned"), Err(gofer::Cancelled));
        // Neither took nor lost a permit.
        drop(held);
        assert_eq!(sem.available_permits(), 1);
        // A cancelled token refuses at once, even with a permit free.
        assert!(sem.acquire_cancellable(&token).is_err());
        assert_eq!(sem.available_permits(), 1);
        // Without a cancel it is an acquire; a release wakes it.
        let live = CancelToken::new();
        let p = sem.acquire_cancellable(&live).expect("a free permit");
        let (sem3, l3) = (sem.clone(), live.clone());
        let waiter = s.spawn(move || sem3.acquire_cancellable(&l3).map(drop));
        std::thread::sleep(Duration::from_millis(10));
        drop(p);
        assert_eq!(waiter.join().expect("returned"), Ok(()));
        assert_eq!(sem.available_permits(), 1);
        assert!(gofer::Cancelled.to_string().contains("cancel"));
        s.shutdown();
    });
}

#[test]
fn acquire_cancellable_racing_releases_never_loses_permits() {
    use gofer::task::CancelToken;
    within(|| {
        let s = sched(2);
        let sem = Arc::new(Semaphore::new(0));
        for round in 0..200 {
            let token = CancelToken::new();
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let (sem, token) = (sem.clone(), token.clone());
                    s.spawn(move || sem.acquire_cancellable(&token).map(|p| p.forget()).is_ok())
                })
                .collect();
            gofer::yield_now();
            sem.add_permits(2);
            if round % 2 == 0 {
                std::thread::yield_now();
            }
            token.cancel();
            let took = join_all(hs).into_iter().filter(|ok| *ok).count();
            // Whatever was not taken is still in the semaphore.
            assert_eq!(took + sem.available_permits(), 2, "round {round}");
            while let Some(p) = sem.try_acquire() {
                p.forget();
            }
        }
        s.shutdown();
    });
}
