//! Shutdown: a timeout too long to be a deadline, concurrent calls, and a
//! Dispatcher that is between two samples when the scheduler stops.
//!
//! Each case runs in a child process with a watchdog, since the failures
//! it guards against are a panic or a wait that never ends.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use common::{
    child_scenario, describe, live_threads_named, run_child_watched, wait_until, PATIENCE,
};
use gofer::{Builder, Scheduler, SpawnError};

/// The watchdog's limit for one child: generous, the machine is shared.
const CHILD_LIMIT: Duration = Duration::from_secs(120);

fn sched(name: &str, threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

/// Runs `test` as a child in `scenario` and asserts that it printed
/// `CHILD-OK` and exited successfully before the watchdog fired.
fn expect_child_ok(test: &str, scenario: &str) {
    let out = run_child_watched(module_path!(), test, scenario, &[], CHILD_LIMIT)
        .unwrap_or_else(|| panic!("child {test}/{scenario} hung (killed after {CHILD_LIMIT:?})"));
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("CHILD-OK"),
        "{}",
        describe(&out)
    );
}

/// Whether spawning from outside is refused: shutdown has begun.
fn closing(s: &Scheduler) -> bool {
    matches!(
        Builder::new().scheduler(s).spawn(|| ()),
        Err(SpawnError::Shutdown)
    )
}

// ---------------------------------------------------------------- Duration::MAX

const MAX_TEST: &str = "shutdown_timeout_with_duration_max_means_no_deadline";

#[test]
fn shutdown_timeout_with_duration_max_means_no_deadline() {
    if child_scenario().as_deref() != Some("max") {
        return expect_child_ok(MAX_TEST, "max");
    }
    let s = sched("tomax", 2);
    let (tx, rx) = mpsc::channel();
    let release = Arc::new(AtomicBool::new(false));
    let r = release.clone();
    s.spawn(move || {
        tx.send(gofer::current()).expect("receiver alive");
        while !r.load(Ordering::Acquire) {
            gofer::park();
        }
    });
    let parked = rx.recv_timeout(PATIENCE).expect("the task started");
    let s2 = s.clone();
    let shutter = std::thread::spawn(move || s2.shutdown_timeout(Duration::MAX));
    // The call has begun (it refuses spawns from outside) and waits: with
    // no deadline it neither panics nor gives up while the task is parked.
    wait_until("shutdown has begun", || {
        closing(&s) || shutter.is_finished()
    });
    assert!(
        !shutter.is_finished(),
        "shutdown_timeout(MAX) returned early"
    );
    release.store(true, Ordering::Release);
    parked.unpark();
    assert_eq!(shutter.join().expect("shutdown_timeout panicked"), Ok(()));
    assert_eq!(s.stats().threads, 0);
    assert_eq!(live_threads_named("tomax-"), Vec::<String>::new());
    // Again on a stopped scheduler, and with other unrepresentable spans.
    assert_eq!(s.shutdown_timeout(Duration::MAX), Ok(()));
    assert_eq!(s.shutdown_timeout(Duration::from_secs(u64::MAX)), Ok(()));
    println!("CHILD-OK");
}

// ---------------------------------------------------------------- concurrent calls

const CONCURRENT_TEST: &str = "concurrent_shutdowns_both_return_after_every_thread_is_joined";

/// Rounds of two racing shutdown calls: enough to catch a late caller that
/// returns while the first is still joining.
const ROUNDS: usize = 40;

#[test]
fn concurrent_shutdowns_both_return_after_every_thread_is_joined() {
    if child_scenario().as_deref() != Some("concurrent") {
        return expect_child_ok(CONCURRENT_TEST, "concurrent");
    }
    for round in 0..ROUNDS {
        let s = sched("cshut", 4);
        // Work in flight, so that the threads are busy when the calls start.
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                s.spawn(|| {
                    for _ in 0..50 {
                        gofer::yield_now();
                    }
                })
            })
            .collect();
        let start = Arc::new(Barrier::new(2));
        let callers: Vec<_> = (0..2)
            .map(|k| {
                let (s, start) = (s.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    // Every other round, one of the two is a shutdown_timeout.
                    if k == 1 && round % 2 == 1 {
                        assert_eq!(s.shutdown_timeout(PATIENCE), Ok(()));
                    } else {
                        s.shutdown();
                    }
                    (live_threads_named("cshut-"), s.stats().threads)
                })
            })
            .collect();
        for (k, c) in callers.into_iter().enumerate() {
            let (left, threads) = c.join().expect("a shutdown call panicked");
            assert!(
                left.is_empty() && threads == 0,
                "round {round}, call {k}: returned while threads of the scheduler still ran: \
                 {left:?} ({threads} counted)"
            );
        }
        for t in tasks {
            t.join().expect("task returned");
        }
    }
    println!("CHILD-OK");
}

// ---------------------------------------------------------------- the Dispatcher's wait

/// A scheduler whose Dispatcher samples once a second.
fn slow_dispatcher(name: &str) -> Scheduler {
    Scheduler::builder()
        .min_threads(2)
        .max_threads(2)
        .dispatch_interval(Duration::from_secs(1))
        .block_timeout(Duration::from_secs(1))
        .name(name)
        .build()
        .expect("a 1 s dispatch interval is in range")
}

/// Shutting down must not wait for the Dispatcher's 1 s interval to run out.
/// A generous bound: a stop that waits out the interval takes 1 s or more.
const STOP_BOUND: Duration = Duration::from_millis(500);

const IDLE_TEST: &str = "shutdown_of_an_idle_scheduler_does_not_wait_out_the_dispatch_interval";

#[test]
fn shutdown_of_an_idle_scheduler_does_not_wait_out_the_dispatch_interval() {
    if child_scenario().as_deref() != Some("idle") {
        return expect_child_ok(IDLE_TEST, "idle");
    }
    for round in 0..3 {
        let s = slow_dispatcher("idle1s");
        // A task wakes a Processer, which wakes the Dispatcher: it samples
        // and then waits its interval.
        assert_eq!(s.spawn(|| 5).join().expect("returned"), 5);
        let t0 = Instant::now();
        s.shutdown();
        let took = t0.elapsed();
        assert!(
            took < STOP_BOUND,
            "round {round}: shutting down an idle scheduler took {took:?}"
        );
        assert_eq!(live_threads_named("idle1s-"), Vec::<String>::new());
    }
    println!("CHILD-OK");
}

const AFTER_SAMPLE_TEST: &str =
    "shutdown_right_after_a_dispatcher_sample_does_not_wait_out_the_dispatch_interval";

#[test]
fn shutdown_right_after_a_dispatcher_sample_does_not_wait_out_the_dispatch_interval() {
    if child_scenario().as_deref() != Some("after-sample") {
        return expect_child_ok(AFTER_SAMPLE_TEST, "after-sample");
    }
    let s = slow_dispatcher("nap1s");
    // A task that blocks its thread in the kernel: the Dispatcher marks its
    // Processer blocked at a sample, then waits a whole interval.
    let go = Arc::new(AtomicBool::new(false));
    let go_in = go.clone();
    let blocker = s.spawn(move || common::block_thread_until(&go_in));
    wait_until("the Dispatcher marks the Processer blocked", || {
        s.stats().blocked_detections >= 1
    });
    // The Dispatcher has just begun its 1 s wait.
    go.store(true, Ordering::SeqCst);
    let t0 = Instant::now();
    s.shutdown();
    let took = t0.elapsed();
    assert!(
        took < STOP_BOUND,
        "shutdown during the Dispatcher's wait took {took:?}"
    );
    blocker.join().expect("the task returned");
    assert_eq!(live_threads_named("nap1s-"), Vec::<String>::new());
    println!("CHILD-OK");
}

// ---------------------------------------------------------------- from the blocking pool

/// What each shutdown call gave when made inside `unblock` on the task's
/// own scheduler: `shutdown_timeout`'s result, and the panic messages of
/// `shutdown` and `shutdown_now` (empty if one returned).
fn shutdowns_from_unblock(s: &Scheduler) -> (Result<(), gofer::ShutdownError>, String, String) {
    let s2 = s.clone();
    s.spawn(move || {
        gofer::unblock(|| {
            let panic_of = |f: &dyn Fn()| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                    .err()
                    .and_then(|p| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default()
            };
            let timed = s2.shutdown_timeout(Duration::from_secs(5));
            let plain = panic_of(&|| s2.shutdown());
            let now = panic_of(&|| s2.shutdown_now());
            (timed, plain, now)
        })
    })
    .join()
    .expect("the task returned")
}

const UNBLOCK_TEST: &str = "shutdown_calls_inside_unblock_on_the_own_scheduler_are_refused";

#[test]
fn shutdown_calls_inside_unblock_on_the_own_scheduler_are_refused() {
    if child_scenario().as_deref() != Some("unblock") {
        return expect_child_ok(UNBLOCK_TEST, "unblock");
    }
    let s = sched("shunbl", 2);
    let t0 = Instant::now();
    let (timed, plain, now) = shutdowns_from_unblock(&s);
    assert_eq!(timed, Err(gofer::ShutdownError::FromOwnTask));
    for (what, msg) in [("shutdown", &plain), ("shutdown_now", &now)] {
        assert!(
            msg.contains("shutdown called from a task of the same scheduler"),
            "{what} inside unblock: {msg:?}"
        );
    }
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "refusing took {:?}",
        t0.elapsed()
    );
    // Nothing was shut down or cancelled: the scheduler still takes work.
    assert_eq!(s.spawn(|| 7).join().expect("returned"), 7);
    s.shutdown();
    assert_eq!(live_threads_named("shunbl-"), Vec::<String>::new());
    println!("CHILD-OK");
}

// ---------------------------------------------------------------- shutdown_now from a task

const NOW_TASK_TEST: &str = "shutdown_now_from_its_own_task_panics_and_cancels_nothing";

#[test]
fn shutdown_now_from_its_own_task_panics_and_cancels_nothing() {
    if child_scenario().as_deref() != Some("now-task") {
        return expect_child_ok(NOW_TASK_TEST, "now-task");
    }
    let s = sched("shnowt", 2);
    // A neighbour parked in a cancellable wait.
    let (tx, rx) = gofer::chan::bounded::<u32>(0);
    let neighbour = s.spawn(move || rx.recv().expect("a value"));
    let s2 = s.clone();
    let (msg, cancelled) = s
        .spawn(move || {
            let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s2.shutdown_now()))
                .expect_err("shutdown_now() from its own task panics");
            let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
            (msg, gofer::task::is_cancelled())
        })
        .join()
        .expect("the caller returned, not cancelled");
    assert!(
        msg.contains("shutdown called from a task of the same scheduler"),
        "{msg:?}"
    );
    assert!(!cancelled, "the caller was cancelled");
    // The neighbour was not cancelled: it still takes its value.
    tx.send(9).expect("the neighbour waits");
    assert_eq!(neighbour.join().expect("not cancelled"), 9);
    // The timed form says so and does nothing either.
    let s3 = s.clone();
    let r = s
        .spawn(move || s3.shutdown_now_timeout(Duration::from_secs(5)))
        .join()
        .expect("returned");
    assert_eq!(r, Err(gofer::ShutdownError::FromOwnTask));
    assert_eq!(s.spawn(|| 3).join().expect("returned"), 3);
    s.shutdown();
    println!("CHILD-OK");
}

// ---------------------------------------------------------------- shutdown_now_timeout

const NOW_TIMEOUT_TEST: &str = "shutdown_now_timeout_gives_up_on_a_task_that_cannot_unwind_yet";

#[test]
fn shutdown_now_timeout_gives_up_on_a_task_that_cannot_unwind_yet() {
    if child_scenario().as_deref() != Some("now-timeout") {
        return expect_child_ok(NOW_TIMEOUT_TEST, "now-timeout");
    }
    let s = sched("shnowto", 2);
    // A task in a call that does not observe cancellation, and one parked
    // in a wait that does.
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (in_tx, in_rx) = mpsc::channel::<()>();
    let stuck = s.spawn(move || {
        gofer::unblock(move || {
            in_tx.send(()).expect("the test waits");
            go_rx.recv().expect("released");
        });
        // Observes the cancellation here, after the call.
        gofer::sleep(Duration::from_secs(3600));
    });
    let (_tx, rx) = gofer::chan::bounded::<()>(0);
    let parked = s.spawn(move || rx.recv());
    in_rx.recv_timeout(PATIENCE).expect("the call began");
    let t0 = Instant::now();
    match s.shutdown_now_timeout(Duration::from_millis(200)) {
        Err(gofer::ShutdownError::TimedOut { alive, waited }) => {
            assert_eq!(alive, 1, "only the task in the call is left");
            assert!(waited >= Duration::from_millis(200), "{waited:?}");
        }
        other => panic!("expected a time-out, got {other:?}"),
    }
    assert!(t0.elapsed() < PATIENCE, "took {:?}", t0.elapsed());
    assert!(parked.join().expect_err("cancelled").is_cancelled());
    assert!(closing(&s), "spawns from outside stay refused");
    go_tx.send(()).expect("the call waits");
    assert_eq!(s.shutdown_now_timeout(PATIENCE), Ok(()));
    assert!(stuck.join().expect_err("cancelled").is_cancelled());
    assert_eq!(live_threads_named("shnowto-"), Vec::<String>::new());
    // Again on a stopped scheduler, with no deadline.
    assert_eq!(s.shutdown_now_timeout(Duration::MAX), Ok(()));
    println!("CHILD-OK");
}

// ---------------------------------------------------------------- panics point at the caller

/// The file and line a panic inside `f` reported, from a panic hook (the
/// child process's own: it replaces gofer's).
fn panic_site(f: impl FnOnce()) -> (String, u32) {
    use std::sync::Mutex;
    static SITE: Mutex<Option<(String, u32)>> = Mutex::new(None);
    std::panic::set_hook(Box::new(|info| {
        let site = info.location().map(|l| (l.file().to_string(), l.line()));
        *SITE.lock().unwrap() = site;
    }));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let _ = std::panic::take_hook();
    assert!(r.is_err(), "no panic");
    SITE.lock().unwrap().take().expect("the hook saw the panic")
}

const TRACK_TEST: &str = "panics_on_misuse_point_at_the_callers_line";

#[test]
fn panics_on_misuse_point_at_the_callers_line() {
    if child_scenario().as_deref() != Some("track") {
        return expect_child_ok(TRACK_TEST, "track");
    }
    let here = file!();
    let mut wrong = Vec::new();
    let mut check = |what: &str, (file, line): (String, u32), want: u32| {
        if file != here || line != want {
            wrong.push(format!("{what}: {file}:{line}, not {here}:{want}"));
        }
    };
    let s = sched("track", 1);
    // From inside a task of the scheduler.
    let s2 = s.clone();
    let sites = s
        .spawn(move || {
            let a = panic_site(|| s2.shutdown());
            let a_line = line!() - 1;
            let b = panic_site(|| s2.shutdown_now());
            let b_line = line!() - 1;
            ((a, a_line), (b, b_line))
        })
        .join()
        .expect("returned");
    check("Scheduler::shutdown in a task", sites.0 .0, sites.0 .1);
    check("Scheduler::shutdown_now in a task", sites.1 .0, sites.1 .1);
    s.shutdown();
    // After shutdown.
    let site = panic_site(|| drop(s.spawn(|| ())));
    check("Scheduler::spawn", site, line!() - 1);
    let site = panic_site(|| s.block_on(|| ()));
    check("Scheduler::block_on", site, line!() - 1);
    let site = panic_site(|| drop(gofer::go!(scheduler = &s, || ())));
    check("go!", site, line!() - 1);
    let site = panic_site(|| s.scope(|sc| drop(sc.spawn(|| ()))));
    check("Scheduler::scope", site, line!() - 1);
    // Counters.
    let sem = gofer::sync::Semaphore::new(1);
    let site = panic_site(|| sem.add_permits(gofer::sync::Semaphore::MAX_PERMITS));
    check("Semaphore::add_permits", site, line!() - 1);
    let wg = gofer::sync::WaitGroup::new();
    let site = panic_site(|| wg.done());
    check("WaitGroup::done", site, line!() - 1);
    wg.add(1);
    let site = panic_site(|| wg.add(usize::MAX));
    check("WaitGroup::add", site, line!() - 1);
    // Fibers, timers, selections.
    let mut fiber = gofer::fiber::Fiber::<(), (), ()>::new(|_, ()| ());
    let _ = fiber.resume(());
    let site = panic_site(|| {
        let _ = fiber.resume(());
    });
    check("Fiber::resume after the end", site, line!() - 2);
    let site = panic_site(|| drop(gofer::timer::every_on(&s, Duration::ZERO, || ())));
    check("timer::every_on with a zero period", site, line!() - 1);
    let site = panic_site(|| drop(gofer::chan::Select::new().select()));
    check("Select::select with no operation", site, line!() - 1);
    assert!(
        wrong.is_empty(),
        "panics pointing elsewhere:\n{}",
        wrong.join("\n")
    );
    println!("CHILD-OK");
}
