//! `gofer::sync::Mutex`: exclusion, timeouts, fairness, tasks and threads.

use crate::sync_util;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gofer::sync::{Mutex, MutexGuard};
use sync_util::{join_all, sched, wait_for, within};

/// Read, switch out, write back: a lost update if two holders overlap.
fn bump(g: &mut MutexGuard<'_, u64>) {
    let v = **g;
    gofer::yield_now();
    **g = v + 1;
}

#[test]
fn mutual_exclusion_holds_across_yields_under_heavy_contention() {
    const TASKS: usize = 1000;
    const ROUNDS: usize = 100;
    let s = sched(4);
    let m = Arc::new(Mutex::new(0u64));
    let hs = (0..TASKS)
        .map(|_| {
            let m = m.clone();
            s.spawn(move || {
                for _ in 0..ROUNDS {
                    bump(&mut m.lock());
                }
            })
        })
        .collect();
    join_all(hs);
    assert_eq!(*m.lock(), (TASKS * ROUNDS) as u64);
    assert!(!m.is_locked());
    s.shutdown();
}

#[test]
fn threads_and_tasks_share_one_mutex() {
    const TASKS: usize = 200;
    const THREADS: usize = 4;
    const ROUNDS: usize = 200;
    let s = sched(2);
    let m = Arc::new(Mutex::new(0u64));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let m = m.clone();
            s.spawn(move || {
                for _ in 0..ROUNDS {
                    bump(&mut m.lock());
                }
            })
        })
        .collect();
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    bump(&mut m.lock());
                }
            })
        })
        .collect();
    join_all(tasks);
    within(move || threads.into_iter().for_each(|t| t.join().unwrap()));
    assert_eq!(*m.lock(), ((TASKS + THREADS) * ROUNDS) as u64);
    s.shutdown();
}

#[test]
fn try_lock_fails_while_held_and_succeeds_when_free() {
    let m = Mutex::new(5);
    let g = m.lock();
    assert!(m.try_lock().is_none());
    assert!(m.is_locked());
    drop(g);
    assert_eq!(*m.try_lock().expect("free"), 5);
    assert!(!m.is_locked());
}

#[test]
fn try_lock_for_expires_while_held_on_a_task_and_a_thread() {
    const TIMEOUT: Duration = Duration::from_millis(40);
    let s = sched(2);
    let m = Arc::new(Mutex::new(()));
    let g = m.lock();
    let m2 = m.clone();
    let task = s.spawn(move || {
        let t = Instant::now();
        let r = m2.try_lock_for(TIMEOUT).is_none();
        (r, t.elapsed())
    });
    let m3 = m.clone();
    let thread = std::thread::spawn(move || {
        let t = Instant::now();
        let r = m3.try_lock_for(TIMEOUT).is_none();
        (r, t.elapsed())
    });
    let (task_timed_out, task_waited) = join_all(vec![task]).pop().unwrap();
    let (thread_timed_out, thread_waited) = within(move || thread.join().unwrap());
    assert!(task_timed_out && thread_timed_out);
    assert!(
        task_waited >= TIMEOUT,
        "task gave up early: {task_waited:?}"
    );
    assert!(
        thread_waited >= TIMEOUT,
        "thread gave up early: {thread_waited:?}"
    );
    drop(g);
    // The timed-out waiters left nothing behind: lock and unlock still work.
    drop(m.try_lock().expect("free after the timeouts"));
    s.shutdown();
}

#[test]
fn try_lock_for_succeeds_when_released_in_time() {
    let s = sched(2);
    let m = Arc::new(Mutex::new(0));
    let started = Arc::new(AtomicBool::new(false));
    let mut g = m.lock();
    let (m2, started2) = (m.clone(), started.clone());
    let h = s.spawn(move || {
        started2.store(true, Ordering::SeqCst);
        m2.try_lock_for(Duration::from_secs(60)).map(|g| *g)
    });
    wait_for("the waiter to start", || started.load(Ordering::SeqCst));
    *g = 7;
    drop(g);
    assert_eq!(join_all(vec![h]), vec![Some(7)]);
    s.shutdown();
}

#[test]
fn zero_timeout_on_a_free_mutex_still_locks() {
    let m = Mutex::new(1);
    assert!(m.try_lock_for(Duration::ZERO).is_some());
    let _g = m.lock();
    assert!(m.try_lock_for(Duration::ZERO).is_none());
}

#[test]
fn timed_out_waiter_does_not_swallow_a_later_unlock() {
    let s = sched(2);
    let m = Arc::new(Mutex::new(0));
    let g = m.lock();
    // A waits with a deadline and gives up; B waits without one.
    let m_a = m.clone();
    let a = s.spawn(move || m_a.try_lock_for(Duration::from_millis(30)).is_none());
    let b_started = Arc::new(AtomicBool::new(false));
    let (m_b, b_started2) = (m.clone(), b_started.clone());
    let b = s.spawn(move || {
        b_started2.store(true, Ordering::SeqCst);
        *m_b.lock() += 1;
    });
    wait_for("B to start", || b_started.load(Ordering::SeqCst));
    // A's timeout comes 30 ms after it queued; B queued right after it
    // started, so by now both have been queued and A has left.
    assert_eq!(join_all(vec![a]), vec![true]);
    drop(g);
    join_all(vec![b]);
    assert_eq!(*m.lock(), 1);
    s.shutdown();
}

#[test]
fn timeouts_racing_unlocks_never_lose_the_lock() {
    const LOCKERS: usize = 8;
    const TIMED: usize = 8;
    const ROUNDS: usize = 300;
    let s = sched(3);
    let m = Arc::new(Mutex::new(0u64));
    let got = Arc::new(AtomicUsize::new(0));
    let mut hs = Vec::new();
    for _ in 0..LOCKERS {
        let m = m.clone();
        hs.push(s.spawn(move || {
            for _ in 0..ROUNDS {
                bump(&mut m.lock());
            }
        }));
    }
    for i in 0..TIMED {
        let (m, got) = (m.clone(), got.clone());
        hs.push(s.spawn(move || {
            for r in 0..ROUNDS {
                // Deadlines from 0 to 60 us: they expire while the lock is
                // being handed around.
                let t = Duration::from_micros(((i * 7 + r) % 7 * 10) as u64);
                if let Some(mut g) = m.try_lock_for(t) {
                    got.fetch_add(1, Ordering::Relaxed);
                    bump(&mut g);
                }
            }
        }));
    }
    // Threads time out too, on the other (thread) path.
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (m, got) = (m.clone(), got.clone());
            std::thread::spawn(move || {
                for r in 0..ROUNDS {
                    if let Some(mut g) = m.try_lock_for(Duration::from_micros(r as u64 % 50)) {
                        got.fetch_add(1, Ordering::Relaxed);
                        bump(&mut g);
                    }
                }
            })
        })
        .collect();
    join_all(hs);
    within(move || threads.into_iter().for_each(|t| t.join().unwrap()));
    let total = (LOCKERS * ROUNDS + got.load(Ordering::Relaxed)) as u64;
    assert_eq!(*m.try_lock().expect("nobody holds it"), total);
    s.shutdown();
}

#[test]
fn long_waiter_gets_the_lock_despite_a_barging_task() {
    // One Processer. The hog locks, yields while holding, unlocks and
    // relocks at once. The waiter it wakes runs only during the hog's next
    // yield, when the lock is taken again: without a hand-off it would lose
    // every time, and wait until the hog stops (which it never does here).
    // After about 1 ms of waiting the lock must be handed to the waiter.
    let s = sched(1);
    let m = Arc::new(Mutex::new(0u64));
    let stop = Arc::new(AtomicBool::new(false));
    let (m1, stop1) = (m.clone(), stop.clone());
    let hog = s.spawn(move || {
        let mut rounds = 0u64;
        while !stop1.load(Ordering::Relaxed) {
            let mut g = m1.lock();
            *g += 1;
            rounds += 1;
            gofer::yield_now();
        }
        rounds
    });
    let m2 = m.clone();
    let waiter = s.spawn(move || {
        let t = Instant::now();
        for _ in 0..20 {
            drop(m2.lock());
        }
        t.elapsed()
    });
    let waited = join_all(vec![waiter]).pop().unwrap();
    stop.store(true, Ordering::Relaxed);
    let rounds = join_all(vec![hog]).pop().unwrap();
    assert!(rounds > 20, "the hog kept going meanwhile");
    assert!(
        waited < Duration::from_secs(5),
        "20 acquisitions against a barging task took {waited:?}"
    );
    s.shutdown();
}

#[test]
fn into_inner_and_get_mut_give_the_value() {
    let mut m = Mutex::new(vec![1, 2]);
    m.get_mut().push(3);
    assert_eq!(*m.lock(), [1, 2, 3]);
    assert_eq!(m.into_inner(), [1, 2, 3]);
    let d: Mutex<u8> = Mutex::default();
    assert_eq!(d.into_inner(), 0);
    assert_eq!(Mutex::from(4).into_inner(), 4);
}

static STATIC_MUTEX: Mutex<u32> = Mutex::new(0);

#[test]
fn const_new_works_in_a_static_and_from_tasks() {
    let s = sched(2);
    let hs = (0..50)
        .map(|_| {
            s.spawn(|| {
                let mut g = STATIC_MUTEX.lock();
                gofer::yield_now();
                *g += 1;
            })
        })
        .collect();
    join_all(hs);
    assert_eq!(*STATIC_MUTEX.lock(), 50);
    s.shutdown();
}

#[test]
fn guard_moves_between_threads_and_unlocks_there() {
    fn assert_send<T: Send>(_: &T) {}
    let m = Mutex::new(1);
    std::thread::scope(|sc| {
        let g = m.lock();
        assert_send(&g);
        // Unlocked from another thread; a waiter on a third thread gets it.
        let waiter = sc.spawn(|| *m.lock());
        sc.spawn(move || drop(g)).join().unwrap();
        assert_eq!(waiter.join().unwrap(), 1);
    });
}

#[test]
fn debug_shows_the_value_or_locked() {
    let m = Mutex::new(3);
    assert_eq!(format!("{m:?}"), "Mutex { data: 3 }");
    let g = m.lock();
    assert_eq!(format!("{m:?}"), "Mutex { data: <locked> }");
    assert_eq!(format!("{g:?} {g}"), "3 3");
}

#[test]
fn primitives_are_send_and_sync_and_guards_are_send() {
    use gofer::sync::{
        Barrier, Condvar, RwLock, RwLockReadGuard, RwLockWriteGuard, Semaphore, SemaphorePermit,
        WaitGroup,
    };
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Mutex<Vec<u8>>>();
    send_sync::<RwLock<Vec<u8>>>();
    send_sync::<Condvar>();
    send_sync::<Semaphore>();
    send_sync::<WaitGroup>();
    send_sync::<Barrier>();
    // A task holding a guard may resume on another thread.
    send::<MutexGuard<'static, Vec<u8>>>();
    send::<RwLockReadGuard<'static, Vec<u8>>>();
    send::<RwLockWriteGuard<'static, Vec<u8>>>();
    send::<SemaphorePermit<'static>>();
}
