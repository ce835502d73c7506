//! `gofer::unblock`: a blocking call made on the scheduler's blocking pool
//! while the calling task parks and its Processer runs other tasks.
//!
//! The calls here block in the kernel with a raw `nanosleep`
//! (`common::block_thread_in_kernel`), which the `hooks` feature does not
//! turn into a task sleep, or on std's own locks and channels.

use crate::common;

use std::panic::catch_unwind;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::{in_child, wait_until};
use gofer::{Builder, ConfigError, Scheduler};

/// A gate that calls on the pool wait behind until the test opens it.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

#[test]
fn unblock_returns_the_value_of_a_call_made_on_a_pool_thread() {
    let _turn = crate::one_at_a_time();
    let sched = Scheduler::builder()
        .min_threads(1)
        .name("ubv")
        .build()
        .unwrap();
    let (value, task_thread, call_thread, after) = sched
        .spawn(|| {
            let me = common::thread_name();
            let (v, there) = gofer::unblock(|| (6 * 7, common::thread_name()));
            (v, me, there, common::thread_name())
        })
        .join()
        .unwrap();
    assert_eq!(value, 42);
    assert_eq!(call_thread, "ubv-blocking", "the call ran on a pool thread");
    assert_eq!(task_thread, "ubv-0");
    assert_eq!(after, task_thread, "the task resumed on its own Processer");
    sched.shutdown();
}

#[test]
fn the_call_borrows_from_the_task_stack() {
    let _turn = crate::one_at_a_time();
    let sched = Scheduler::builder().min_threads(1).build().unwrap();
    let out = sched
        .spawn(|| {
            let mut local = vec![1u64, 2, 3];
            let factor = 10u64;
            let sum = gofer::unblock(|| {
                local.iter_mut().for_each(|x| *x *= factor);
                local.iter().sum::<u64>()
            });
            (sum, local)
        })
        .join()
        .unwrap();
    assert_eq!(out, (60, vec![10, 20, 30]));
    sched.shutdown();
}

#[test]
fn a_panic_in_the_call_resumes_in_the_caller() {
    let _turn = crate::one_at_a_time();
    let sched = Scheduler::builder().min_threads(1).build().unwrap();
    // Caught in the task, with its payload.
    let caught = sched
        .spawn(|| {
            let r = catch_unwind(|| gofer::unblock(|| -> u32 { panic!("boom in the pool") }));
            let msg = *r.unwrap_err().downcast::<&'static str>().unwrap();
            // The task goes on, and unblock still works.
            (msg, gofer::unblock(|| 5))
        })
        .join()
        .unwrap();
    assert_eq!(caught, ("boom in the pool", 5));
    // Not caught: the task panics, and its handle says so.
    let err = sched
        .spawn(|| gofer::unblock(|| -> u32 { panic!("uncaught") }))
        .join()
        .unwrap_err();
    assert!(err.is_panic());
    assert_eq!(
        *err.into_panic().downcast::<&'static str>().unwrap(),
        "uncaught"
    );
    sched.shutdown();
}

#[test]
fn on_a_plain_thread_the_call_runs_in_place() {
    let _turn = crate::one_at_a_time();
    let me = std::thread::current().id();
    let there = gofer::unblock(|| std::thread::current().id());
    assert_eq!(there, me);
    let r = catch_unwind(|| gofer::unblock(|| -> u8 { panic!("in place") }));
    assert!(r.is_err());
}

#[test]
fn the_pool_grows_to_blocking_threads_and_queues_the_rest_then_threads_retire() {
    let _turn = crate::one_at_a_time();
    let sched = Scheduler::builder()
        .min_threads(1)
        .blocking_threads(2)
        .blocking_idle_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let gate = Arc::new(Gate::default());
    let most_busy = Arc::new(AtomicUsize::new(0));
    let calls: Vec<_> = (0..5)
        .map(|i| {
            let (gate, most_busy) = (gate.clone(), most_busy.clone());
            let sched2 = sched.clone();
            sched.spawn(move || {
                gofer::unblock(|| {
                    let busy = sched2.stats().blocking_busy;
                    most_busy.fetch_max(busy, Ordering::SeqCst);
                    gate.wait();
                    i
                })
            })
        })
        .collect();
    wait_until("two calls run and three wait", || {
        let s = sched.stats();
        s.blocking_busy == 2 && s.blocking_queued == 3
    });
    let s = sched.stats();
    assert_eq!(s.blocking_threads, 2, "no thread beyond the cap");
    gate.open();
    let mut got: Vec<i32> = calls.into_iter().map(|h| h.join().unwrap()).collect();
    got.sort_unstable();
    assert_eq!(got, vec![0, 1, 2, 3, 4]);
    assert!(most_busy.load(Ordering::SeqCst) <= 2);
    let s = sched.stats();
    assert_eq!(s.blocking_queued, 0);
    wait_until("idle pool threads retire", || {
        sched.stats().blocking_threads == 0
    });
    // A retired pool starts again on demand.
    assert_eq!(sched.spawn(|| gofer::unblock(|| 9)).join().unwrap(), 9);
    sched.shutdown();
}

/// Many tasks making calls at once through a small pool: every call runs
/// once, every result comes back to the task that made it.
#[test]
fn many_tasks_calling_at_once_each_get_their_own_results() {
    let _turn = crate::one_at_a_time();
    in_child(
        module_path!(),
        "many_tasks_calling_at_once_each_get_their_own_results",
        || {
            let sched = Scheduler::builder()
                .min_threads(2)
                .blocking_threads(3)
                .build()
                .unwrap();
            let runs = Arc::new(AtomicU64::new(0));
            let tasks: Vec<_> = (0..200u64)
                .map(|t| {
                    let runs = runs.clone();
                    sched.spawn(move || {
                        let mut sum = 0;
                        for i in 0..50u64 {
                            let mine = t * 1000 + i;
                            sum += gofer::unblock(|| {
                                runs.fetch_add(1, Ordering::Relaxed);
                                mine
                            });
                            if i % 10 == 0 {
                                gofer::yield_now();
                            }
                        }
                        sum
                    })
                })
                .collect();
            for (t, h) in tasks.into_iter().enumerate() {
                let t = t as u64;
                assert_eq!(h.join().unwrap(), t * 1000 * 50 + (0..50).sum::<u64>());
            }
            assert_eq!(runs.load(Ordering::Relaxed), 200 * 50);
            let s = sched.stats();
            assert!(
                s.blocking_threads <= 3,
                "{} pool threads",
                s.blocking_threads
            );
            sched.shutdown();
        },
    );
}

/// The property `unblock` exists for. Two Processers, 40 started tasks
/// ticking every millisecond with `gofer::sleep`, half of them bound to the
/// Processer where one task makes a 300 ms blocking call through
/// `unblock`: no ticker waits for the call. Made inline (the same call
/// without `unblock`), the call holds its Processer's thread, and the 20
/// tickers bound there miss 300 ms of ticks, since started tasks stay on
/// their thread.
#[test]
fn tickers_on_the_callers_processer_keep_ticking_through_a_300ms_call() {
    let _turn = crate::one_at_a_time();
    in_child(
        module_path!(),
        "tickers_on_the_callers_processer_keep_ticking_through_a_300ms_call",
        || {
            let sched = common::fixed_scheduler(2);
            let stop = Arc::new(AtomicBool::new(false));
            let started = Arc::new(AtomicUsize::new(0));
            let tickers: Vec<_> = (0..40)
                .map(|i| {
                    let (stop, started) = (stop.clone(), started.clone());
                    Builder::new()
                        .scheduler(&sched)
                        .pin(i % 2)
                        .spawn(move || {
                            started.fetch_add(1, Ordering::SeqCst);
                            let mut last = Instant::now();
                            let mut worst = Duration::ZERO;
                            let mut ticks = 0u64;
                            while !stop.load(Ordering::SeqCst) {
                                gofer::sleep(Duration::from_millis(1));
                                let now = Instant::now();
                                worst = worst.max(now - last);
                                last = now;
                                ticks += 1;
                            }
                            (worst, ticks)
                        })
                        .unwrap()
                })
                .collect();
            wait_until("every ticker started", || {
                started.load(Ordering::SeqCst) == 40
            });
            let call = Builder::new()
                .scheduler(&sched)
                .pin(0)
                .spawn(|| {
                    let t = Instant::now();
                    gofer::unblock(|| common::block_thread_in_kernel(Duration::from_millis(300)));
                    t.elapsed()
                })
                .unwrap();
            let took = call.join().unwrap();
            stop.store(true, Ordering::SeqCst);
            assert!(took >= Duration::from_millis(300), "the call blocked");
            let results: Vec<(Duration, u64)> =
                tickers.into_iter().map(|h| h.join().unwrap()).collect();
            let worst = results.iter().map(|r| r.0).max().unwrap();
            println!("figure: worst ticker gap {worst:?} during a {took:?} call");
            assert!(
                worst < Duration::from_millis(100),
                "a ticker waited {worst:?} during the call"
            );
            assert!(results.iter().all(|r| r.1 > 0));
            sched.shutdown();
        },
    );
}

/// One Processer: task A receives on a std channel inside `unblock`, from
/// task B, which is parked in `gofer::sleep` on that same Processer. The
/// Processer's thread stays free, B's timer fires, B sends, A completes.
/// (Made inline, A's `recv` holds the only thread B can run on: a hang.)
#[test]
fn a_call_waiting_for_a_task_on_the_same_processer_completes() {
    let _turn = crate::one_at_a_time();
    in_child(
        module_path!(),
        "a_call_waiting_for_a_task_on_the_same_processer_completes",
        || {
            let sched = common::fixed_scheduler(1);
            let (tx, rx) = mpsc::channel::<u32>();
            let (parked_tx, parked_rx) = mpsc::channel::<()>();
            let b = sched.spawn(move || {
                parked_tx.send(()).unwrap();
                gofer::sleep(Duration::from_millis(50));
                tx.send(42).unwrap();
            });
            parked_rx.recv().unwrap();
            let a = sched.spawn(move || gofer::unblock(move || rx.recv().unwrap()));
            assert_eq!(a.join().unwrap(), 42);
            b.join().unwrap();
            sched.shutdown();
        },
    );
}

#[test]
fn a_task_in_unblock_shows_in_the_dump_as_parked_on_unblock() {
    let _turn = crate::one_at_a_time();
    let sched = Scheduler::builder().min_threads(1).build().unwrap();
    let gate = Arc::new(Gate::default());
    let g = gate.clone();
    let h = sched.spawn(move || gofer::unblock(|| g.wait()));
    let id = h.id().as_u64();
    wait_until("the task parks in unblock", || {
        sched
            .dump()
            .tasks()
            .iter()
            .any(|t| t.id() == id && t.waiting_on() == Some("unblock"))
    });
    let text = sched.dump().to_string();
    assert!(
        text.contains("[parked: unblock, for "),
        "dump without the unblock wait:\n{text}"
    );
    gate.open();
    h.join().unwrap();
    sched.shutdown();
}

/// Shutdown with a task parked in `unblock` waits for the call and the
/// task, then joins the pool's threads: no hang, no thread left.
#[test]
fn shutdown_waits_for_a_call_in_flight_and_joins_the_pool() {
    let _turn = crate::one_at_a_time();
    in_child(
        module_path!(),
        "shutdown_waits_for_a_call_in_flight_and_joins_the_pool",
        || {
            let sched = Scheduler::builder()
                .min_threads(1)
                .name("ubsd")
                .build()
                .unwrap();
            let finished = Arc::new(AtomicU64::new(0));
            let f = finished.clone();
            let _h = sched.spawn(move || {
                gofer::unblock(|| common::block_thread_in_kernel(Duration::from_millis(200)));
                f.store(1, Ordering::SeqCst);
            });
            wait_until("the call runs", || sched.stats().blocking_busy == 1);
            sched.shutdown();
            assert_eq!(finished.load(Ordering::SeqCst), 1, "the task ended first");
            assert_eq!(sched.stats().blocking_threads, 0);
            assert!(
                common::live_threads_named("ubsd-blocking").is_empty(),
                "pool threads left after shutdown"
            );
        },
    );
}

#[test]
fn blocking_threads_out_of_range_is_a_config_error() {
    let _turn = crate::one_at_a_time();
    for n in [0, gofer::MAX_THREADS_LIMIT + 1] {
        let e = refused(Scheduler::builder().blocking_threads(n));
        assert_eq!(
            e,
            ConfigError::ThreadCount {
                setting: "blocking_threads",
                requested: n
            }
        );
        assert!(
            e.to_string().contains("blocking_threads accepts 1 to 4096"),
            "{e}"
        );
    }
    let e = refused(Scheduler::builder().blocking_idle_timeout(Duration::ZERO));
    assert_eq!(
        e,
        ConfigError::ZeroDuration {
            setting: "blocking_idle_timeout"
        }
    );
}

/// The error a builder's `build` gives; fails the test if it builds.
fn refused(b: gofer::SchedulerBuilder) -> ConfigError {
    match b.build() {
        Ok(_) => panic!("the scheduler was built"),
        Err(e) => e,
    }
}

/// A worker pool: 64 started worker tasks on two Processers (at most 64)
/// take 64 jobs from a gofer channel, and each job makes a 50 ms blocking
/// call through `unblock`; a heartbeat task ticks every 5 ms meanwhile.
/// The pool (cap 512) gives every call a thread of its own, so the jobs
/// run side by side and finish in about one call's time, and the
/// Processers stay free for the heartbeat. Made inline, each call holds a
/// Processer's thread: the jobs run a few at a time, and the heartbeat
/// waits behind them.
#[test]
fn a_pool_of_64_workers_making_50ms_calls_finishes_together_and_the_heartbeat_keeps_time() {
    let _turn = crate::one_at_a_time();
    const WORKERS: usize = 64;
    const CALL: Duration = Duration::from_millis(50);
    const TICK: Duration = Duration::from_millis(5);
    in_child(
        module_path!(),
        "a_pool_of_64_workers_making_50ms_calls_finishes_together_and_the_heartbeat_keeps_time",
        || {
            let sched = Scheduler::builder()
                .min_threads(2)
                .max_threads(64)
                .build()
                .unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let (beat_tx, beat_rx) = gofer::chan::bounded::<()>(1);
            // The heartbeat returns the time of every beat; it beats on
            // until told to stop after the jobs end, so a stall the jobs
            // cause shows as a gap however long it lasts.
            let heartbeat = {
                let stop = stop.clone();
                sched.spawn(move || {
                    beat_tx.send(()).unwrap();
                    let mut beats = vec![Instant::now()];
                    while !stop.load(Ordering::SeqCst) {
                        gofer::sleep(TICK);
                        beats.push(Instant::now());
                    }
                    beats
                })
            };
            beat_rx.recv().unwrap();
            let (job_tx, job_rx) = gofer::chan::unbounded::<usize>();
            let (done_tx, done_rx) = gofer::chan::unbounded::<(usize, Duration)>();
            let started = Arc::new(AtomicUsize::new(0));
            let workers: Vec<_> = (0..WORKERS)
                .map(|_| {
                    let (job_rx, done_tx, started) =
                        (job_rx.clone(), done_tx.clone(), started.clone());
                    sched.spawn(move || {
                        started.fetch_add(1, Ordering::SeqCst);
                        while let Ok(job) = job_rx.recv() {
                            let t = Instant::now();
                            gofer::unblock(|| common::block_thread_in_kernel(CALL));
                            done_tx.send((job, t.elapsed())).unwrap();
                        }
                    })
                })
                .collect();
            drop(done_tx);
            wait_until("every worker started", || {
                started.load(Ordering::SeqCst) == WORKERS
            });
            let t = Instant::now();
            for job in 0..WORKERS {
                job_tx.send(job).unwrap();
            }
            let mut seen = [false; WORKERS];
            for _ in 0..WORKERS {
                let (job, took) = done_rx.recv().unwrap();
                assert!(
                    took >= CALL,
                    "job {job} took {took:?}: the call did not block"
                );
                assert!(!seen[job], "job {job} ran twice");
                seen[job] = true;
            }
            let end = Instant::now();
            let wall = end - t;
            stop.store(true, Ordering::SeqCst);
            drop(job_tx);
            for w in workers {
                w.join().unwrap();
            }
            let (worst, beats) = worst_gap_within(&heartbeat.join().unwrap(), t, end);
            let s = sched.stats();
            println!(
                "figure: {WORKERS} jobs of a {CALL:?} call in {wall:?}; heartbeat worst gap {worst:?} over {beats} beats; {} pool threads",
                s.blocking_threads
            );
            assert!(
                wall <= Duration::from_secs(1),
                "the {WORKERS} jobs took {wall:?}: the calls did not run side by side"
            );
            assert!(beats > 0, "the heartbeat never beat while the jobs ran");
            assert!(
                worst <= Duration::from_millis(100),
                "the heartbeat waited {worst:?} while the jobs ran"
            );
            sched.shutdown();
        },
    );
}

/// The longest gap between consecutive `beats` that overlaps `from..to`,
/// and how many such gaps there are.
fn worst_gap_within(beats: &[Instant], from: Instant, to: Instant) -> (Duration, usize) {
    let gaps: Vec<Duration> = beats
        .windows(2)
        .filter(|w| w[1] > from && w[0] < to)
        .map(|w| w[1] - w[0])
        .collect();
    (gaps.iter().copied().max().unwrap_or_default(), gaps.len())
}
