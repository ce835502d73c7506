//! The Dispatcher rescues tasks queued behind a Processer whose running task
//! blocks the thread, grows threads up to the cap, and shrinks them again.
//!
//! Blocking here is real (a `nanosleep` system call, which the `hooks`
//! feature does not turn into a task sleep, and a busy loop); every bound on
//! time is generous: the assertion is "long before the block ends", not a
//! latency figure (that is measured in `bench/benches/blocking.rs`).

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use gofer::{Builder, Scheduler};

/// What a rescued task reports: when it started, and on which thread.
struct Started {
    at: Instant,
    thread: ThreadId,
}

fn started() -> Started {
    Started {
        at: Instant::now(),
        thread: std::thread::current().id(),
    }
}

/// libgo's scenario: one Processer, the first task sleeps in the kernel,
/// three tasks queued behind it start long before it wakes, on another
/// thread.
#[test]
fn tasks_queued_behind_a_kernel_blocked_task_start_elsewhere() {
    let sched = Scheduler::builder()
        .min_threads(1)
        .max_threads(4)
        .build()
        .unwrap();
    let block = Duration::from_millis(800);
    let (tx, rx) = mpsc::channel();
    let blocker = {
        let tx = tx.clone();
        sched.spawn(move || {
            tx.send(("blocker", started())).unwrap();
            common::block_thread_in_kernel(block);
            Instant::now()
        })
    };
    let (name, b) = rx.recv().unwrap();
    assert_eq!(name, "blocker");
    let queued: Vec<_> = (0..3)
        .map(|_| {
            let tx = tx.clone();
            sched.spawn(move || tx.send(("queued", started())).unwrap())
        })
        .collect();
    // Whether the block was already caught when the spawns were done: if
    // not, they went to the only thread there was, the blocked one, and a
    // rescue is what moved them; if so (this thread was held up past the
    // detection, on a loaded machine), they may have gone straight to the
    // extra thread.
    let caught_before_spawns = sched.stats().blocked_detections > 0;
    for _ in 0..3 {
        let (name, s) = rx.recv().unwrap();
        assert_eq!(name, "queued");
        assert_ne!(
            s.thread, b.thread,
            "a queued task ran on the blocked thread"
        );
        assert!(
            s.at.duration_since(b.at) < block / 2,
            "a queued task started {:?} after the block began",
            s.at.duration_since(b.at)
        );
    }
    for h in queued {
        h.join().unwrap();
    }
    let woke = blocker.join().unwrap();
    assert!(woke.duration_since(b.at) >= block);
    let stats = sched.stats();
    assert!(stats.blocked_detections >= 1);
    assert!(
        caught_before_spawns || stats.tasks_rescued >= 1,
        "the queued tasks left the blocked thread without a rescue"
    );
    assert!(stats.threads_started >= 2, "an extra thread was started");
    sched.shutdown();
}

/// may's scenario: a task spawns 8 children (queued locally) and then
/// blocks; every child runs before the block ends.
#[test]
fn children_of_a_task_that_then_blocks_all_run_before_it_wakes() {
    let sched = Scheduler::builder()
        .min_threads(1)
        .max_threads(2)
        .build()
        .unwrap();
    let block = Duration::from_millis(800);
    let ran = Arc::new(AtomicUsize::new(0));
    let ran2 = ran.clone();
    let seen_at_wake = sched
        .spawn(move || {
            let kids: Vec<_> = (0..8)
                .map(|_| {
                    let ran = ran2.clone();
                    gofer::spawn(move || {
                        ran.fetch_add(1, Ordering::SeqCst);
                    })
                })
                .collect();
            common::block_thread_in_kernel(block);
            let seen = ran2.load(Ordering::SeqCst);
            for k in kids {
                k.join().unwrap();
            }
            seen
        })
        .join()
        .unwrap();
    assert_eq!(
        seen_at_wake, 8,
        "children still waiting when the block ended"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 8);
    sched.shutdown();
}

/// Ten blockers on a scheduler capped at four threads: the thread count
/// never exceeds the cap, and every task completes.
#[test]
fn thread_count_never_exceeds_max_threads_under_many_blockers() {
    let sched = Scheduler::builder()
        .min_threads(1)
        .max_threads(4)
        .build()
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicUsize::new(0));
    let monitor = {
        let (sched, done, peak) = (sched.clone(), done.clone(), peak.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let s = sched.stats();
                peak.fetch_max(s.threads, Ordering::SeqCst);
                let live = s.processers.iter().filter(|p| p.kind != "caller").count();
                peak.fetch_max(live, Ordering::SeqCst);
                common::block_thread_in_kernel(Duration::from_micros(200));
            }
        })
    };
    let handles: Vec<_> = (0..10)
        .map(|i| {
            sched.spawn(move || {
                common::block_thread_in_kernel(Duration::from_millis(150));
                i
            })
        })
        .collect();
    let sum: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    done.store(true, Ordering::SeqCst);
    monitor.join().unwrap();
    assert_eq!(sum, 45);
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= 4, "saw {peak} threads with max_threads(4)");
    assert!(
        peak >= 2,
        "no extra thread was started for blocked Processers"
    );
    let s = sched.stats();
    assert!(s.threads_started - s.threads_retired <= 4);
    sched.shutdown();
}

/// Extra threads started for blockers exit once idle for the configured
/// time, back to `min_threads`.
#[test]
fn extra_threads_retire_after_blockers_finish() {
    let sched = Scheduler::builder()
        .min_threads(1)
        .max_threads(3)
        .idle_thread_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let handles: Vec<_> = (0..4)
        .map(|_| sched.spawn(|| common::block_thread_in_kernel(Duration::from_millis(200))))
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(
        sched.stats().threads_started >= 2,
        "no extra thread was started"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = sched.stats();
        if s.threads == 1 {
            assert!(s.threads_retired >= 1);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "extra threads still alive: {} threads, {} retired",
            s.threads,
            s.threads_retired
        );
        common::block_thread_in_kernel(Duration::from_millis(20));
    }
    // The scheduler still works at its core size.
    assert_eq!(sched.spawn(|| 5).join().unwrap(), 5);
    sched.shutdown();
}

/// A CPU-bound task that never switches: tasks queued behind it are moved
/// after `block_timeout`.
#[test]
fn tasks_queued_behind_a_cpu_hog_are_rescued() {
    let sched = Scheduler::builder()
        .min_threads(1)
        .max_threads(2)
        .block_timeout(Duration::from_millis(20))
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let hog = {
        let (stop, tx) = (stop.clone(), tx.clone());
        sched.spawn(move || {
            tx.send(started()).unwrap();
            let limit = Instant::now() + Duration::from_secs(20);
            while !stop.load(Ordering::Relaxed) && Instant::now() < limit {
                std::hint::spin_loop();
            }
        })
    };
    let h = rx.recv().unwrap();
    let queued: Vec<_> = (0..3)
        .map(|_| {
            let tx = tx.clone();
            sched.spawn(move || tx.send(started()).unwrap())
        })
        .collect();
    for _ in 0..3 {
        let s = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("a queued task was never rescued: {:?}", sched.stats()));
        assert_ne!(s.thread, h.thread);
    }
    stop.store(true, Ordering::Relaxed);
    hog.join().unwrap();
    for q in queued {
        q.join().unwrap();
    }
    assert!(sched.stats().blocked_detections >= 1);
    sched.shutdown();
}

/// Many short tasks keep switching: no Processer is ever marked blocked.
#[test]
fn processers_switching_among_short_tasks_are_never_marked_blocked() {
    let sched = Scheduler::builder()
        .min_threads(2)
        .max_threads(4)
        .build()
        .unwrap();
    for round in 0..4u64 {
        let hs: Vec<_> = (0..5_000u64)
            .map(|i| {
                sched.spawn(move || {
                    let mut x = i ^ round;
                    for _ in 0..3 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                        gofer::yield_now();
                    }
                    x & 1
                })
            })
            .collect();
        let ones: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(ones <= 5_000);
    }
    let s = sched.stats();
    assert_eq!(s.completed, 20_000);
    assert_eq!(s.blocked_detections, 0, "false positive: {s:?}");
    assert_eq!(s.tasks_rescued, 0);
    sched.shutdown();
}

/// Pinned tasks queued behind a blocked Processer stay there and run on its
/// thread after the block; unpinned ones are rescued.
#[test]
fn pinned_tasks_are_never_moved_off_a_blocked_processer() {
    let sched = Scheduler::builder()
        .min_threads(1)
        .max_threads(2)
        .build()
        .unwrap();
    let block = Duration::from_millis(600);
    let (tx, rx) = mpsc::channel();
    let blocker = {
        let tx = tx.clone();
        Builder::new()
            .pin(0)
            .scheduler(&sched)
            .spawn(move || {
                tx.send(("blocker", started())).unwrap();
                common::block_thread_in_kernel(block);
            })
            .unwrap()
    };
    let (_, b) = rx.recv().unwrap();
    let mut hs = Vec::new();
    for i in 0..6 {
        let tx = tx.clone();
        let builder = Builder::new().scheduler(&sched);
        let (builder, kind) = if i % 2 == 0 {
            (builder.pin(0), "pinned")
        } else {
            (builder, "free")
        };
        hs.push(
            builder
                .spawn(move || tx.send((kind, started())).unwrap())
                .unwrap(),
        );
    }
    for _ in 0..6 {
        let (kind, s) = rx.recv().unwrap();
        if kind == "pinned" {
            assert_eq!(s.thread, b.thread, "a pinned task moved");
            assert!(s.at.duration_since(b.at) >= block);
        } else {
            assert_ne!(s.thread, b.thread);
            assert!(
                s.at.duration_since(b.at) < block,
                "a free task waited out the block"
            );
        }
    }
    blocker.join().unwrap();
    for h in hs {
        h.join().unwrap();
    }
    sched.shutdown();
}

/// A started task woken while the Processer it is bound to is blocked in
/// the kernel, with `migrate` off (the default) or on.
fn woken_behind_a_blocked_processer(migrate: bool) -> (ThreadId, ThreadId, bool) {
    let b = Scheduler::builder()
        .min_threads(2)
        .max_threads(2)
        .name(if migrate { "bound-off" } else { "bound-on" });
    let b = if migrate {
        // SAFETY: the tasks read thread-local state only through
        // `common::thread_id`, an `#[inline(never)]` accessor.
        unsafe { b.migrate_started_tasks(true) }
    } else {
        b
    };
    let s = b.build().expect("valid scheduler config");
    let (tx, rx) = mpsc::channel();
    let released = Arc::new(AtomicBool::new(false));
    let r2 = released.clone();
    let sleeper = s.spawn(move || {
        tx.send((gofer::current(), common::thread_id())).unwrap();
        gofer::park();
        // Whether its Processer had been let go when it ran again.
        (common::thread_id(), r2.load(Ordering::SeqCst))
    });
    let (task, home) = rx.recv_timeout(common::PATIENCE).expect("the sleeper ran");
    let go = Arc::new(AtomicBool::new(false));
    let go_rx = go.clone();
    let (on_tx, on_rx) = mpsc::channel();
    // Which Processer the sleeper is on: ask each with a pinned task.
    let idx = (0..2)
        .find(|&i| {
            let (ttx, trx) = mpsc::channel();
            Builder::new()
                .pin(i)
                .scheduler(&s)
                .spawn(move || ttx.send(common::thread_id()).unwrap())
                .unwrap()
                .join()
                .unwrap();
            trx.recv().unwrap() == home
        })
        .expect("the sleeper's Processer");
    // Block the sleeper's thread in the kernel: a task pinned there.
    let blocker = Builder::new()
        .pin(idx)
        .scheduler(&s)
        .spawn(move || {
            on_tx.send(()).unwrap();
            common::block_thread_until(&go_rx);
        })
        .unwrap();
    on_rx.recv_timeout(common::PATIENCE).unwrap();
    common::wait_until("the Dispatcher to mark the Processer blocked", || {
        s.stats().processers.iter().any(|p| p.blocked)
    });
    task.unpark();
    if migrate {
        // Rescued: it runs elsewhere while its Processer is still blocked.
        let (ran_on, was_released) = sleeper.join().unwrap();
        released.store(true, Ordering::SeqCst);
        go.store(true, Ordering::SeqCst);
        blocker.join().unwrap();
        s.shutdown();
        (home, ran_on, was_released)
    } else {
        // It waits for its Processer: queued there, not run.
        common::wait_until("the woken task to queue on its Processer", || {
            s.stats()
                .processers
                .iter()
                .any(|p| p.blocked && p.queued >= 1)
        });
        released.store(true, Ordering::SeqCst);
        go.store(true, Ordering::SeqCst);
        let (ran_on, was_released) = sleeper.join().unwrap();
        blocker.join().unwrap();
        s.shutdown();
        (home, ran_on, was_released)
    }
}

#[test]
fn a_started_task_woken_behind_a_blocked_processer_waits_for_it() {
    let (home, ran_on, was_released) = woken_behind_a_blocked_processer(false);
    assert_eq!(home, ran_on, "a started task moved");
    assert!(was_released, "it ran before its Processer was let go");
}

#[test]
fn a_migratable_started_task_woken_behind_a_blocked_processer_is_rescued() {
    let (home, ran_on, was_released) = woken_behind_a_blocked_processer(true);
    assert_ne!(home, ran_on, "the task was not rescued");
    assert!(!was_released, "it ran only after its Processer was let go");
}

/// Every task blocks its thread in the kernel for a while, so every
/// Processer keeps blocking with a queue behind it, and the tasks moved
/// off one land behind another that blocks in turn. A task moved once
/// stays where it was moved until it has run (for `block_timeout`, here
/// longer than the whole run): each task is moved at most once per run,
/// not once per block of every Processer it is moved to.
#[test]
fn tasks_moved_behind_processers_that_keep_blocking_are_not_moved_again_and_again() {
    const TASKS: u64 = 300;
    let sched = Scheduler::builder()
        .min_threads(3)
        .max_threads(3)
        .block_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..TASKS)
        .map(|_| {
            let ran = ran.clone();
            sched.spawn(move || {
                common::block_thread_in_kernel(Duration::from_millis(2));
                ran.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(ran.load(Ordering::SeqCst), TASKS as usize);
    let s = sched.stats();
    assert!(s.blocked_detections >= 1, "no block was detected: {s:?}");
    // Each task runs once, so it may be moved once; the hold outlasts the
    // run, so none is moved again.
    assert!(
        s.tasks_rescued <= TASKS,
        "{} moves for {TASKS} tasks ({} of tasks moved before and not run since)",
        s.tasks_rescued,
        s.tasks_moved_again
    );
    assert_eq!(s.tasks_moved_again, 0);
    sched.shutdown();
}

/// Pins the calling thread (and the threads it starts from now on) to CPU 0.
fn pin_to_cpu0() {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes a bit of
    // it; sched_setaffinity reads it for the calling thread.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(
        r,
        0,
        "sched_setaffinity: {}",
        std::io::Error::last_os_error()
    );
}

/// A CPU hog on a loaded CPU: the process is held to one CPU that two busy
/// threads share with the hog, which gets about a third of it. The hog has
/// burned `block_timeout` of CPU long before it ends, and a task queued
/// behind it starts on another thread, not when the hog ends. (A rule that
/// asks the hog for half of the wall time never catches it there.) Runs in
/// a child process: the CPU affinity is the whole process's.
#[test]
fn a_task_queued_behind_a_cpu_hog_on_a_loaded_cpu_is_rescued_before_the_hog_ends() {
    const TEST: &str =
        "a_task_queued_behind_a_cpu_hog_on_a_loaded_cpu_is_rescued_before_the_hog_ends";
    common::in_child(module_path!(), TEST, || {
        pin_to_cpu0();
        let stop = Arc::new(AtomicBool::new(false));
        let load: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let sched = Scheduler::builder()
            .min_threads(1)
            .max_threads(2)
            .block_timeout(Duration::from_millis(20))
            .build()
            .unwrap();
        let hog_for = Duration::from_secs(4);
        let (tx, rx) = mpsc::channel();
        let hog = {
            let tx = tx.clone();
            sched.spawn(move || {
                let s = started();
                let end = s.at + hog_for;
                tx.send(s).unwrap();
                while Instant::now() < end {
                    std::hint::spin_loop();
                }
            })
        };
        let h = rx.recv().unwrap();
        let queued = sched.spawn(move || tx.send(started()).unwrap());
        let s = rx.recv().unwrap();
        let waited = s.at.duration_since(h.at);
        println!("figure: the queued task started {waited:?} after the hog");
        assert_ne!(s.thread, h.thread, "it ran on the hog's thread");
        assert!(
            waited < hog_for / 2,
            "the queued task started {waited:?} after the hog began ({hog_for:?} long)"
        );
        queued.join().unwrap();
        hog.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        for t in load {
            t.join().unwrap();
        }
        assert!(sched.stats().blocked_detections >= 1);
        sched.shutdown();
    });
}
