//! `gofer::sync::Semaphore`'s owned permits: `'static` permits that move
//! into tasks and threads, bound concurrency, hand over to waiters in
//! order, time out without losing a permit, keep their semaphore alive.

use crate::sync_util;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gofer::sync::{OwnedSemaphorePermit, Semaphore};
use sync_util::{join_all, sched, within};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn owned_permits_moved_into_tasks_bound_how_many_run_at_once() {
    const PERMITS: usize = 3;
    const JOBS: usize = 40;
    let s = sched(2);
    let sem = Arc::new(Semaphore::new(PERMITS));
    let inside = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let hs = within({
        let (sem, inside, max) = (sem.clone(), inside.clone(), max.clone());
        let handle = s.clone();
        move || {
            (0..JOBS)
                .map(|_| {
                    // The spawning loop waits here while PERMITS jobs run.
                    let permit = sem.acquire_owned();
                    let (inside, max) = (inside.clone(), max.clone());
                    handle.spawn(move || {
                        let _permit = permit;
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        max.fetch_max(now, Ordering::SeqCst);
                        for _ in 0..3 {
                            gofer::yield_now();
                        }
                        inside.fetch_sub(1, Ordering::SeqCst);
                    })
                })
                .collect::<Vec<_>>()
        }
    });
    join_all(hs);
    let max = max.load(Ordering::SeqCst);
    assert!(
        max <= PERMITS,
        "{max} jobs ran at once with {PERMITS} permits"
    );
    assert!(max >= 1);
    assert_eq!(sem.available_permits(), PERMITS, "every permit came back");
    s.shutdown();
}

#[test]
fn try_acquire_owned_fails_when_none_is_left_and_forget_shrinks_the_count() {
    let sem = Arc::new(Semaphore::new(2));
    let a = sem.try_acquire_owned().expect("a permit is free");
    let b = sem.try_acquire_owned().expect("a permit is free");
    assert!(sem.try_acquire_owned().is_none());
    assert_eq!(sem.available_permits(), 0);
    drop(a);
    assert_eq!(sem.available_permits(), 1);
    let c = sem
        .try_acquire_owned()
        .expect("the dropped permit came back");
    assert!(Arc::ptr_eq(c.semaphore(), &sem));
    b.forget();
    drop(c);
    assert_eq!(sem.available_permits(), 1, "the forgotten permit stays out");
    assert_eq!(Arc::strong_count(&sem), 1, "no permit holds the semaphore");
}

#[test]
fn an_owned_permit_keeps_its_semaphore_alive_and_is_static_and_send() {
    fn check<T: Send + Sync + 'static>(_: &T) {}
    let sem = Arc::new(Semaphore::new(1));
    let weak = Arc::downgrade(&sem);
    let permit: OwnedSemaphorePermit = sem.acquire_owned();
    check(&permit);
    drop(sem);
    assert!(weak.upgrade().is_some(), "the permit holds the semaphore");
    // Released on another thread, after the caller's Arc is gone.
    std::thread::spawn(move || {
        assert_eq!(permit.semaphore().available_permits(), 0);
        drop(permit);
    })
    .join()
    .unwrap();
    assert!(weak.upgrade().is_none(), "freed with its last permit");
}

#[test]
fn a_timed_acquire_gives_up_without_taking_a_permit_then_gets_a_released_one() {
    let sem = Arc::new(Semaphore::new(1));
    let held = sem.acquire_owned();
    let start = Instant::now();
    assert!(sem.acquire_owned_timeout(ms(30)).is_none());
    assert!(start.elapsed() >= ms(30));
    assert!(sem.acquire_owned_until(Instant::now()).is_none());
    assert_eq!(sem.available_permits(), 0);
    // A task waiting with a bound gets the permit a thread releases.
    let s = sched(1);
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let waiter = {
        let sem = sem.clone();
        s.spawn(move || {
            started_tx.send(()).unwrap();
            sem.acquire_owned_timeout(Duration::from_secs(60)).is_some()
        })
    };
    started_rx.recv().unwrap();
    std::thread::spawn(move || drop(held)).join().unwrap();
    assert!(
        join_all(vec![waiter])[0],
        "the waiter got the released permit"
    );
    assert_eq!(sem.available_permits(), 1);
    s.shutdown();
}

#[test]
fn owned_and_borrowed_permits_share_one_count() {
    let sem = Arc::new(Semaphore::new(2));
    let owned = sem.acquire_owned();
    let borrowed = sem.acquire();
    assert!(sem.try_acquire().is_none());
    assert!(sem.try_acquire_owned().is_none());
    drop(owned);
    assert!(sem.try_acquire().is_some());
    drop(borrowed);
    assert_eq!(sem.available_permits(), 2);
    assert!(format!("{:?}", sem.acquire_owned()).contains("OwnedSemaphorePermit"));
}
