//! Timers over their whole life: shutdown cancels every user timer whatever
//! state it is in, and a timed wait that ends early leaves no timer behind.
//!
//! The shutdown cases could hang, so they run in a child process with a
//! watchdog.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{child_scenario, describe, run_child_watched};
use gofer::{chan, sync, timer, Scheduler};

const HOUR: Duration = Duration::from_secs(3600);

fn sched(name: &str, threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .name(name)
        .build()
        .expect("valid config")
}

/// Runs `scenario` of `test` in a child with a watchdog; it must print
/// CHILD-OK, exit 0, and say nothing about timers that could not start.
fn in_child(test: &str, scenario: &str) {
    let out = run_child_watched(
        module_path!(),
        test,
        scenario,
        &[],
        Duration::from_secs(120),
    )
    .unwrap_or_else(|| panic!("{test}: the child hung (killed by the watchdog)"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("CHILD-OK"),
        "{}",
        describe(&out)
    );
    assert!(
        !stderr.contains("could not start its task"),
        "{}",
        describe(&out)
    );
}

// ------------------------------------------------------------ shutdown

const EVERY_FIRING: &str = "shutdown_cancels_an_every_timer_caught_while_it_fires";

#[test]
fn shutdown_cancels_an_every_timer_caught_while_it_fires() {
    if child_scenario().as_deref() == Some("every-firing") {
        // A 50 us timer is almost always being fired when shutdown comes;
        // each shutdown must still find no task and no timer left.
        for round in 0..200 {
            let s = sched("tl-every", 1);
            let (tx, rx) = chan::unbounded();
            let t = timer::every_on(&s, Duration::from_micros(50), move || {
                let _ = tx.send(());
            });
            for _ in 0..3 {
                rx.recv().expect("the timer runs");
            }
            s.shutdown_timeout(Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert!(!t.is_pending(), "round {round}: shutdown cancelled it");
            assert!(!t.cancel(), "round {round}: already cancelled");
        }
        println!("CHILD-OK");
        return;
    }
    in_child(EVERY_FIRING, "every-firing");
}

const EVERY_RACING: &str = "a_timer_created_while_shutdown_begins_never_holds_the_scheduler";

#[test]
fn a_timer_created_while_shutdown_begins_never_holds_the_scheduler() {
    if child_scenario().as_deref() == Some("every-racing") {
        for round in 0..100 {
            let s = sched("tl-race", 1);
            let stop = Arc::new(AtomicBool::new(false));
            let made = Arc::new(AtomicUsize::new(0));
            let maker = {
                let (s, stop, made) = (s.clone(), stop.clone(), made.clone());
                std::thread::spawn(move || {
                    let mut handles = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        handles.push(timer::every_on(&s, Duration::from_millis(1), || {}));
                        handles.push(timer::after_on(&s, Duration::from_millis(1), || {}));
                        made.fetch_add(1, Ordering::Relaxed);
                    }
                    handles
                })
            };
            common::wait_until("timers are being created", || {
                made.load(Ordering::Relaxed) > 10
            });
            let r = s.shutdown_timeout(Duration::from_secs(10));
            stop.store(true, Ordering::Relaxed);
            let handles = maker.join().expect("maker");
            r.unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert!(
                handles.iter().all(|h| !h.is_pending()),
                "round {round}: a timer outlived shutdown"
            );
        }
        println!("CHILD-OK");
        return;
    }
    in_child(EVERY_RACING, "every-racing");
}

// ------------------------------------------------------------ early ends

#[test]
fn a_timed_wait_that_ends_early_leaves_no_timer_behind() {
    let s = sched("tl-early", 2);
    const ROUNDS: usize = 20_000;
    let (ping_tx, ping_rx) = chan::bounded::<usize>(0);
    let (pong_tx, pong_rx) = chan::bounded::<usize>(0);
    let echo = s.spawn(move || {
        while let Ok(v) = ping_rx.recv_timeout(HOUR) {
            pong_tx.send_timeout(v, HOUR).expect("the driver receives");
        }
    });
    let driver = s.spawn(move || {
        for i in 0..ROUNDS {
            ping_tx.send_timeout(i, HOUR).expect("echo receives");
            assert_eq!(pong_rx.recv_timeout(HOUR).expect("echoed"), i);
        }
    });
    driver.join().expect("driver");
    echo.join()
        .expect("echo ends when the driver's sender is gone");
    assert_eq!(s.stats().timers, 0, "every wait ended, so no timer is left");
    s.shutdown();
}

#[test]
fn early_ending_waits_of_every_kind_leave_no_timer_behind() {
    let s = sched("tl-kinds", 2);
    let m = Arc::new(sync::Mutex::new(0u64));
    let cv = Arc::new(sync::Condvar::new());
    let rw = Arc::new(sync::RwLock::new(()));
    let sem = Arc::new(sync::Semaphore::new(1));
    const ROUNDS: u64 = 2_000;
    let waiter = {
        let (m, cv) = (m.clone(), cv.clone());
        s.spawn(move || {
            // Condvar::wait_timeout, woken by the notifier each round.
            let mut g = m.lock();
            for round in 1..=ROUNDS {
                while *g < round {
                    cv.wait_timeout(&mut g, HOUR);
                }
            }
        })
    };
    let notifier = {
        let (m, cv, rw, sem) = (m.clone(), cv.clone(), rw.clone(), sem.clone());
        s.spawn(move || {
            for _ in 0..ROUNDS {
                *m.try_lock_for(HOUR).expect("lock") += 1;
                cv.notify_all();
                drop(rw.try_write_for(HOUR).expect("write"));
                drop(rw.try_read_for(HOUR).expect("read"));
                drop(sem.acquire_timeout(HOUR).expect("permit"));
                // park_timeout ended by an unpark.
                gofer::current().unpark();
                gofer::park_timeout(HOUR);
                // select! with a timeout arm, ended by a ready value.
                let (tx, rx) = chan::bounded(1);
                tx.send(1).unwrap();
                gofer::select! {
                    recv(rx) -> v => assert_eq!(v, Ok(1)),
                    default(HOUR) => unreachable!("a value was ready"),
                }
            }
        })
    };
    // Contend on the locks from another task meanwhile, so timed waits
    // really wait and are ended by a release, not only take the fast path.
    let contender = {
        let (m, rw, sem) = (m.clone(), rw.clone(), sem.clone());
        s.spawn(move || {
            for _ in 0..ROUNDS {
                let g = m.lock();
                gofer::yield_now();
                drop(g);
                let w = rw.write();
                gofer::yield_now();
                drop(w);
                let p = sem.acquire();
                gofer::yield_now();
                drop(p);
            }
        })
    };
    notifier.join().expect("notifier");
    waiter.join().expect("waiter");
    contender.join().expect("contender");
    assert_eq!(s.stats().timers, 0, "every wait ended, so no timer is left");
    s.shutdown();
}

#[test]
fn a_pending_timed_wait_is_counted_until_it_ends() {
    let s = sched("tl-count", 1);
    let (parked_tx, parked_rx) = chan::bounded(0);
    let sleeper = s.spawn(move || {
        let me = gofer::current();
        parked_tx.send(me).unwrap();
        gofer::park_timeout(HOUR);
    });
    let task = parked_rx.recv().expect("the task is about to park");
    common::wait_until("the park's timer is pending", || s.stats().timers == 1);
    task.unpark();
    sleeper.join().expect("woken");
    assert_eq!(s.stats().timers, 0);
    let t = timer::after_on(&s, HOUR, || {});
    assert_eq!(s.stats().timers, 1, "a user timer is pending");
    assert!(t.cancel());
    assert_eq!(s.stats().timers, 0, "a cancelled timer is gone at once");
    s.shutdown();
}
