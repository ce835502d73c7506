//! `gofer::sync::Condvar`: notify_one, notify_all, timeouts, tasks and
//! threads.
//!
//! Waiters count themselves in `waiting` under the mutex just before they
//! wait. A condvar waiter is queued before it releases the mutex, so once
//! the mutex shows `waiting == n`, all `n` are queued: the tests wait on that
//! event, never on time.

use crate::sync_util;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gofer::sync::{Condvar, Mutex};
use sync_util::{join_all, sched, wait_for, within};

#[derive(Default)]
struct State {
    waiting: usize,
    tickets: usize,
    served: usize,
    open: bool,
}

type Shared = Arc<(Mutex<State>, Condvar)>;

fn shared() -> Shared {
    Arc::new((Mutex::new(State::default()), Condvar::new()))
}

/// Waits for a ticket and takes it.
fn take_ticket(sh: &Shared) {
    let (m, cv) = &**sh;
    let mut g = m.lock();
    g.waiting += 1;
    cv.wait_while(&mut g, |s| s.tickets == 0);
    g.tickets -= 1;
    g.waiting -= 1;
    g.served += 1;
}

fn wait_until_waiting(sh: &Shared, n: usize) {
    wait_for("the waiters to queue", || sh.0.lock().waiting == n);
}

#[test]
fn notify_one_wakes_exactly_one_waiter() {
    const N: usize = 6;
    let s = sched(2);
    let sh = shared();
    let hs: Vec<_> = (0..N)
        .map(|_| {
            let sh = sh.clone();
            s.spawn(move || take_ticket(&sh))
        })
        .collect();
    wait_until_waiting(&sh, N);
    sh.0.lock().tickets = 1;
    assert!(sh.1.notify_one(), "there were waiters");
    wait_for("one waiter to be served", || sh.0.lock().served == 1);
    {
        let g = sh.0.lock();
        assert_eq!((g.served, g.waiting), (1, N - 1));
    }
    // The others are still queued: notify_all finds exactly them.
    sh.0.lock().tickets = N - 1;
    assert_eq!(sh.1.notify_all(), N - 1);
    join_all(hs);
    assert_eq!(sh.0.lock().served, N);
    assert!(!sh.1.notify_one(), "nobody left to wake");
    s.shutdown();
}

#[test]
fn notify_all_wakes_every_waiter_tasks_and_threads() {
    const TASKS: usize = 50;
    const THREADS: usize = 3;
    let s = sched(2);
    let sh = shared();
    let wait_open = |sh: Shared| {
        move || {
            let (m, cv) = &*sh;
            let mut g = m.lock();
            g.waiting += 1;
            cv.wait_while(&mut g, |s| !s.open);
            g.served += 1;
        }
    };
    let tasks: Vec<_> = (0..TASKS).map(|_| s.spawn(wait_open(sh.clone()))).collect();
    let threads: Vec<_> = (0..THREADS)
        .map(|_| std::thread::spawn(wait_open(sh.clone())))
        .collect();
    wait_until_waiting(&sh, TASKS + THREADS);
    sh.0.lock().open = true;
    assert_eq!(sh.1.notify_all(), TASKS + THREADS);
    join_all(tasks);
    within(move || threads.into_iter().for_each(|t| t.join().unwrap()));
    assert_eq!(sh.0.lock().served, TASKS + THREADS);
    s.shutdown();
}

#[test]
fn wait_timeout_times_out_without_a_notification() {
    const TIMEOUT: Duration = Duration::from_millis(30);
    let s = sched(2);
    let sh = shared();
    let run = |sh: Shared| {
        move || {
            let (m, cv) = &*sh;
            let mut g = m.lock();
            let t = Instant::now();
            let r = cv.wait_timeout(&mut g, TIMEOUT);
            // The mutex is held again on return.
            g.served += 1;
            (r.timed_out(), t.elapsed())
        }
    };
    let task = s.spawn(run(sh.clone()));
    let thread = std::thread::spawn(run(sh.clone()));
    let mut results = join_all(vec![task]);
    results.push(within(move || thread.join().unwrap()));
    for (timed_out, waited) in results {
        assert!(timed_out);
        assert!(waited >= TIMEOUT, "gave up early: {waited:?}");
    }
    assert_eq!(sh.0.lock().served, 2);
    // Both left the queue.
    assert_eq!(sh.1.notify_all(), 0);
    s.shutdown();
}

#[test]
fn wait_timeout_reports_a_notification_before_the_deadline() {
    let s = sched(2);
    let sh = shared();
    let run = |sh: Shared| {
        move || {
            let (m, cv) = &*sh;
            let mut g = m.lock();
            g.waiting += 1;
            let r = cv.wait_timeout(&mut g, Duration::from_secs(60));
            g.waiting -= 1;
            r.timed_out()
        }
    };
    let task = s.spawn(run(sh.clone()));
    let thread = std::thread::spawn(run(sh.clone()));
    wait_until_waiting(&sh, 2);
    assert_eq!(sh.1.notify_all(), 2);
    assert_eq!(join_all(vec![task]), vec![false]);
    assert!(!within(move || thread.join().unwrap()));
    s.shutdown();
}

#[test]
fn timed_out_waiter_does_not_swallow_a_later_notify_one() {
    let s = sched(2);
    let sh = shared();
    // A waits with a short deadline and gives up; B waits for a ticket.
    let sh_a = sh.clone();
    let a = s.spawn(move || {
        let (m, cv) = &*sh_a;
        let mut g = m.lock();
        g.waiting += 1;
        let r = cv.wait_timeout(&mut g, Duration::from_millis(20));
        g.waiting -= 1;
        r.timed_out()
    });
    let sh_b = sh.clone();
    let b = s.spawn(move || take_ticket(&sh_b));
    wait_for("A to time out and B to queue", || {
        a.is_finished() && sh.0.lock().waiting == 1
    });
    assert_eq!(join_all(vec![a]), vec![true]);
    sh.0.lock().tickets = 1;
    assert!(sh.1.notify_one(), "B is still queued");
    join_all(vec![b]);
    assert_eq!(sh.0.lock().served, 1);
    s.shutdown();
}

#[test]
fn producers_on_threads_and_consumers_on_tasks_pass_every_item() {
    const PRODUCERS: usize = 3;
    const CONSUMERS: usize = 20;
    const ITEMS: usize = 2000;
    const CAP: usize = 8;
    struct Q {
        items: VecDeque<usize>,
        produced_done: usize,
    }
    let s = sched(2);
    let q = Arc::new((
        Mutex::new(Q {
            items: VecDeque::new(),
            produced_done: 0,
        }),
        Condvar::new(), // not empty, or all producers done
        Condvar::new(), // not full
    ));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let q = q.clone();
            std::thread::spawn(move || {
                let (m, not_empty, not_full) = &*q;
                for i in 0..ITEMS {
                    let mut g = m.lock();
                    not_full.wait_while(&mut g, |q| q.items.len() == CAP);
                    g.items.push_back(p * ITEMS + i);
                    drop(g);
                    not_empty.notify_one();
                }
                m.lock().produced_done += 1;
                not_empty.notify_all();
            })
        })
        .collect();
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let q = q.clone();
            s.spawn(move || {
                let (m, not_empty, not_full) = &*q;
                let mut got = Vec::new();
                loop {
                    let mut g = m.lock();
                    not_empty.wait_while(&mut g, |q| {
                        q.items.is_empty() && q.produced_done < PRODUCERS
                    });
                    match g.items.pop_front() {
                        Some(x) => {
                            drop(g);
                            not_full.notify_one();
                            got.push(x);
                        }
                        None => return got,
                    }
                }
            })
        })
        .collect();
    within(move || producers.into_iter().for_each(|t| t.join().unwrap()));
    let mut all: Vec<usize> = join_all(consumers).into_iter().flatten().collect();
    all.sort_unstable();
    assert_eq!(all, (0..PRODUCERS * ITEMS).collect::<Vec<_>>());
    s.shutdown();
}

#[test]
fn wait_until_a_past_deadline_returns_timed_out_with_the_lock_held() {
    let m = Mutex::new(1);
    let cv = Condvar::new();
    let mut g = m.lock();
    let r = cv.wait_until(&mut g, Instant::now() - Duration::from_millis(1));
    assert!(r.timed_out());
    *g += 1;
    drop(g);
    assert_eq!(*m.lock(), 2);
}

static STATIC_CV: Condvar = Condvar::new();

#[test]
fn const_new_works_in_a_static() {
    assert!(!STATIC_CV.notify_one());
    assert_eq!(Condvar::default().notify_all(), 0);
}
