//! The Scheduler: isolation between schedulers, `block_on`, shutdown and
//! its errors, detaching by dropping the last handle, configuration errors,
//! and the default scheduler's environment variables.

use crate::common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{
    child_scenario, describe, live_threads_named, run_child, thread_id, thread_name, wait_until,
    PATIENCE,
};
use gofer::{go, Builder, ConfigError, Scheduler, ShutdownError, SpawnError};

fn sched(name: &str, threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

// ---------------------------------------------------------------- isolation

#[test]
fn two_schedulers_run_their_tasks_only_on_their_own_threads() {
    let a = sched("isoa", 2);
    let b = sched("isob", 2);
    let spawn_many = |s: &Scheduler| -> Vec<gofer::JoinHandle<Vec<String>>> {
        (0..200)
            .map(|_| {
                s.spawn(|| {
                    let mut seen = vec![thread_name()];
                    for _ in 0..5 {
                        gofer::yield_now();
                        seen.push(thread_name());
                    }
                    seen
                })
            })
            .collect()
    };
    let ha = spawn_many(&a);
    let hb = spawn_many(&b);
    for (prefix, hs) in [("isoa-", ha), ("isob-", hb)] {
        for h in hs {
            for t in h.join().expect("task returned") {
                assert!(t.starts_with(prefix), "a task of {prefix}* ran on {t:?}");
            }
        }
    }
    // A task of `a` spawning on `b` (and joining across) lands on `b`.
    let b2 = b.clone();
    let (on_a, on_b) = a
        .spawn(move || {
            let here = thread_name();
            let there = Builder::new()
                .scheduler(&b2)
                .spawn(thread_name)
                .expect("spawn on the other scheduler")
                .join()
                .expect("returned");
            (here, there)
        })
        .join()
        .expect("returned");
    assert!(on_a.starts_with("isoa-"), "{on_a}");
    assert!(on_b.starts_with("isob-"), "{on_b}");
    assert_eq!(a.stats().spawned, 201);
    assert_eq!(b.stats().spawned, 201);
    a.shutdown();
    // Shutting one down leaves the other working.
    assert_eq!(b.spawn(|| 3).join().expect("returned"), 3);
    b.shutdown();
}

// ---------------------------------------------------------------- block_on

#[test]
fn block_on_returns_the_value_and_runs_on_the_calling_thread() {
    let s = sched("blkon", 2);
    let caller = thread_id();
    let (v, ran_on, co) = s.block_on(|| (7, thread_id(), gofer::is_coroutine()));
    assert_eq!(v, 7);
    assert!(co, "block_on runs its closure as a task");
    assert_eq!(ran_on, caller);
    // With switches and children inside, the root stays on the caller.
    let (sum, ids) = s.block_on(|| {
        let kids: Vec<_> = (0..50u64).map(|i| go!(move || i)).collect();
        let mut ids = vec![thread_id()];
        let mut sum = 0;
        for k in kids {
            sum += k.join().expect("child returned");
            ids.push(thread_id());
            gofer::yield_now();
            ids.push(thread_id());
        }
        (sum, ids)
    });
    assert_eq!(sum, (0..50).sum::<u64>());
    assert!(
        ids.iter().all(|t| *t == caller),
        "the root task left the caller"
    );
    // The caller is not counted as a Processer thread once it returned.
    assert_eq!(s.stats().threads, 2);
    assert!(s.stats().processers.iter().all(|p| p.kind == "core"));
    s.shutdown();
}

#[test]
fn block_on_inside_a_task_works() {
    let s = sched("blkin", 1);
    let s2 = s.clone();
    let v = s
        .spawn(move || {
            let inner = s2.block_on(|| {
                gofer::yield_now();
                20
            });
            inner + s2.block_on(|| 22)
        })
        .join()
        .expect("returned");
    assert_eq!(v, 42);
    s.shutdown();
}

#[test]
fn block_on_from_a_task_of_another_scheduler_runs_there() {
    let a = sched("blka", 1);
    let b = sched("blkb", 1);
    let b2 = b.clone();
    let (outer, inner) = a
        .spawn(move || (thread_name(), b2.block_on(thread_name)))
        .join()
        .expect("returned");
    assert!(outer.starts_with("blka-"), "{outer}");
    assert!(inner.starts_with("blkb-"), "{inner}");
    a.shutdown();
    b.shutdown();
}

#[test]
fn block_on_after_shutdown_panics_with_a_clear_message() {
    let s = sched("blkdown", 1);
    s.shutdown();
    let p = catch_unwind(AssertUnwindSafe(|| s.block_on(|| 1))).expect_err("refused");
    let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("shutting down"), "{msg:?}");
}

// ---------------------------------------------------------------- shutdown

#[test]
fn shutdown_waits_for_sleeping_and_yielding_tasks_and_joins_threads() {
    let s = sched("shutw", 2);
    let done = Arc::new(AtomicUsize::new(0));
    for i in 0..100 {
        let done = done.clone();
        s.spawn(move || {
            if i % 2 == 0 {
                gofer::sleep(Duration::from_millis(50));
            } else {
                for _ in 0..1000 {
                    gofer::yield_now();
                }
            }
            done.fetch_add(1, Ordering::SeqCst);
        });
    }
    s.shutdown();
    assert_eq!(done.load(Ordering::SeqCst), 100, "shutdown returned early");
    let st = s.stats();
    assert_eq!(st.threads, 0);
    assert_eq!(st.alive, 0);
    assert_eq!(st.completed, 100);
    assert!(st.processers.is_empty(), "{:?}", st.processers);
    // The Processer threads were joined before shutdown returned ...
    let procs: Vec<_> = live_threads_named("shutw-")
        .into_iter()
        .filter(|n| n != "shutw-timer")
        .collect();
    assert!(procs.is_empty(), "Processer threads still alive: {procs:?}");
    // ... the timer thread is only told to stop (not joined): it exits soon.
    wait_until("the timer thread exits", || {
        live_threads_named("shutw-").is_empty()
    });
    match Builder::new().scheduler(&s).spawn(|| ()) {
        Err(SpawnError::Shutdown) => {}
        other => panic!("expected SpawnError::Shutdown, got {other:?}"),
    }
    assert!(catch_unwind(AssertUnwindSafe(|| s.spawn(|| ()))).is_err());
    // A second shutdown is harmless.
    s.shutdown();
    assert_eq!(s.shutdown_timeout(Duration::from_millis(1)), Ok(()));
}

#[test]
fn tasks_may_spawn_children_while_shutdown_waits_for_them() {
    let s = sched("shutkid", 2);
    let go_on = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let (g, d) = (go_on.clone(), done.clone());
    s.spawn(move || {
        while !g.load(Ordering::Acquire) {
            gofer::yield_now();
        }
        // Shutdown has begun: a child spawned from inside is still admitted.
        let d2 = d.clone();
        let child = Builder::new()
            .spawn(move || {
                gofer::sleep(Duration::from_millis(20));
                d2.fetch_add(1, Ordering::SeqCst);
            })
            .expect("children of running tasks are admitted while closing");
        child.join().expect("child returned");
        d.fetch_add(1, Ordering::SeqCst);
    });
    let s2 = s.clone();
    let shutter = std::thread::spawn(move || s2.shutdown());
    // Closing is visible as a refused spawn from outside.
    wait_until("shutdown has begun", || {
        matches!(
            Builder::new().scheduler(&s).spawn(|| ()),
            Err(SpawnError::Shutdown)
        )
    });
    go_on.store(true, Ordering::Release);
    shutter.join().expect("shutdown returned");
    assert_eq!(done.load(Ordering::SeqCst), 2);
    assert_eq!(s.stats().threads, 0);
}

#[test]
fn shutdown_timeout_reports_a_task_parked_forever_then_shutdown_succeeds() {
    let s = sched("shutto", 2);
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
    let t0 = Instant::now();
    let err = s
        .shutdown_timeout(Duration::from_millis(200))
        .expect_err("a task is parked forever");
    match &err {
        ShutdownError::TimedOut { alive, waited } => {
            assert_eq!(*alive, 1);
            assert!(*waited >= Duration::from_millis(200), "{waited:?}");
        }
        other => panic!("expected TimedOut, got {other:?}"),
    }
    assert!(t0.elapsed() >= Duration::from_millis(200));
    let msg = err.to_string();
    assert!(msg.contains("timed out") && msg.contains('1'), "{msg}");
    // Spawns from outside are refused from now on.
    assert!(matches!(
        Builder::new().scheduler(&s).spawn(|| ()),
        Err(SpawnError::Shutdown)
    ));
    // The Processers still run: wake the task and let it finish.
    release.store(true, Ordering::Release);
    parked.unpark();
    s.shutdown();
    assert_eq!(s.stats().threads, 0);
    assert_eq!(s.stats().alive, 0);
}

#[test]
fn shutdown_from_its_own_task_is_refused() {
    let s = sched("shutown", 1);
    let s2 = s.clone();
    let (timeout_result, shutdown_panic) = s
        .spawn(move || {
            let r = s2.shutdown_timeout(Duration::from_secs(1));
            let p = catch_unwind(AssertUnwindSafe(|| s2.shutdown()))
                .expect_err("shutdown() from its own task panics");
            let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
            // The scheduler is untouched: spawning still works.
            let kid = go!(|| 5).join().expect("child returned");
            assert_eq!(kid, 5);
            (r, msg)
        })
        .join()
        .expect("task returned");
    assert_eq!(timeout_result, Err(ShutdownError::FromOwnTask));
    assert!(
        shutdown_panic.contains("shutdown called from a task of the same scheduler"),
        "{shutdown_panic:?}"
    );
    assert!(ShutdownError::FromOwnTask
        .to_string()
        .contains("same scheduler"));
    // From outside it works, and from a task of another scheduler too.
    let other = sched("shutoth", 1);
    let s3 = s.clone();
    let r = other
        .spawn(move || s3.shutdown_timeout(PATIENCE))
        .join()
        .expect("returned");
    assert_eq!(r, Ok(()));
    assert_eq!(s.stats().threads, 0);
    other.shutdown();
}

#[test]
fn dropping_the_last_handle_detaches_and_the_tasks_complete() {
    let s = sched("gdetach", 2);
    let gate = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    for i in 0..20u32 {
        let g = gate.clone();
        let tx = tx.clone();
        s.spawn(move || {
            while !g.load(Ordering::Acquire) {
                gofer::yield_now();
            }
            if i % 2 == 0 {
                gofer::sleep(Duration::from_millis(10));
            }
            tx.send(i).expect("receiver alive");
        });
    }
    drop(tx);
    let clone = s.clone();
    drop(s);
    drop(clone); // the last handle
    gate.store(true, Ordering::Release);
    let mut got: Vec<u32> = (0..20)
        .map(|_| rx.recv_timeout(PATIENCE).expect("a detached task finished"))
        .collect();
    got.sort_unstable();
    assert_eq!(got, (0..20).collect::<Vec<_>>());
    // With nothing left to run, the threads (Processers and timer) exit.
    wait_until("the detached scheduler's threads exit", || {
        live_threads_named("gdetach-").is_empty()
    });
}

#[test]
fn dropping_an_idle_scheduler_lets_its_threads_exit() {
    let s = sched("gidle", 2);
    assert_eq!(s.spawn(|| 1).join().expect("returned"), 1);
    // Processer threads are "gidle-0" and "gidle-1" (others: the
    // dispatcher, the timer).
    wait_until("the Processer threads started", || {
        live_threads_named("gidle-")
            .iter()
            .filter(|n| n.as_bytes().get(6).is_some_and(u8::is_ascii_digit))
            .count()
            == 2
    });
    drop(s);
    wait_until("the idle scheduler's threads exit", || {
        live_threads_named("gidle-").is_empty()
    });
}

/// CPU time (user + system) used so far by this process's threads whose
/// name starts with `prefix`, in clock ticks.
fn cpu_ticks_of_threads_named(prefix: &str) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .flatten()
    {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // "tid (comm) S ppid ...": utime and stime are fields 14 and 15.
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let field = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        total += field(11) + field(12);
    }
    total
}

/// Asserts that the threads named `prefix*` stay (nearly) idle for a while:
/// a parked task and sleeping Processers must cost no CPU.
fn assert_idle(prefix: &str) {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let window = Duration::from_millis(500);
    let before = cpu_ticks_of_threads_named(prefix);
    // A measurement window, not a synchronisation.
    std::thread::sleep(window);
    let used = cpu_ticks_of_threads_named(prefix) - before;
    // A spinning thread uses ~hz/2 ticks in the window; allow a fifth.
    let limit = hz * window.as_millis() as u64 / 1000 / 5;
    assert!(
        used <= limit,
        "threads {prefix}* used {used} ticks of CPU (limit {limit}, {hz} Hz) in {window:?} \
         with nothing to run"
    );
}

/// Spawns a task that parks until unparked; returns its handle.
fn park_one(s: &Scheduler) -> gofer::Task {
    let (tx, rx) = mpsc::channel();
    s.spawn(move || {
        tx.send(gofer::current()).expect("receiver alive");
        gofer::park();
    });
    rx.recv_timeout(PATIENCE).expect("the task started")
}

#[test]
fn an_idle_scheduler_with_a_parked_task_uses_no_cpu() {
    let s = sched("didle", 2);
    let t = park_one(&s);
    wait_until("both Processers sleep", || {
        s.stats().processers.iter().all(|p| p.sleeping)
    });
    assert_idle("didle-");
    t.unpark();
    s.shutdown();
}

#[test]
fn a_detached_scheduler_with_a_parked_task_uses_no_cpu() {
    let s = sched("dspin", 2);
    let t = park_one(&s);
    wait_until("both Processers sleep", || {
        s.stats().processers.iter().all(|p| p.sleeping)
    });
    drop(s); // detach: the parked task keeps the threads alive
    assert_idle("dspin-");
    t.unpark();
    wait_until("the detached scheduler's threads exit", || {
        live_threads_named("dspin-").is_empty()
    });
}

// ---------------------------------------------------------------- stats

#[test]
fn stats_count_threads_tasks_and_processers() {
    let s = sched("stats", 3);
    let st = s.stats();
    assert_eq!(st.threads, 3);
    assert_eq!(st.spawned, 0);
    assert_eq!(st.alive, 0);
    let mut ids: Vec<_> = st.processers.iter().map(|p| p.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![0, 1, 2]);
    assert!(st.processers.iter().all(|p| p.kind == "core"));
    let (tx, rx) = mpsc::channel();
    let release = Arc::new(AtomicBool::new(false));
    let r = release.clone();
    let h = s.spawn(move || {
        tx.send(gofer::current()).expect("receiver alive");
        while !r.load(Ordering::Acquire) {
            gofer::park();
        }
    });
    let t = rx.recv_timeout(PATIENCE).expect("started");
    let st = s.stats();
    assert_eq!(st.spawned, 1);
    assert_eq!(st.alive, 1);
    release.store(true, Ordering::Release);
    t.unpark();
    h.join().expect("returned");
    s.shutdown();
    let st = s.stats();
    assert_eq!(
        (st.spawned, st.completed, st.alive, st.threads),
        (1, 1, 0, 0)
    );
    assert!(st.processers.is_empty(), "{:?}", st.processers);
}

// ---------------------------------------------------------------- config

fn config_err(b: gofer::SchedulerBuilder) -> ConfigError {
    match b.build() {
        Ok(s) => {
            s.shutdown();
            panic!("the configuration must be refused")
        }
        Err(e) => e,
    }
}

#[test]
fn max_threads_below_min_threads_is_refused() {
    let e = config_err(Scheduler::builder().min_threads(4).max_threads(2));
    assert_eq!(e, ConfigError::MaxBelowMin { min: 4, max: 2 });
    let msg = e.to_string();
    assert!(msg.contains("max_threads (2)"), "{msg}");
    assert!(msg.contains("min_threads (4)"), "{msg}");
    assert!(msg.contains("at least"), "{msg}");
}

#[test]
fn min_threads_zero_resolves_to_the_cpu_count() {
    let cpus = num_cpus::get().max(1);
    // max_threads(0) is below the resolved minimum.
    let e = config_err(Scheduler::builder().min_threads(0).max_threads(0));
    assert_eq!(e, ConfigError::MaxBelowMin { min: cpus, max: 0 });
    assert!(e.to_string().contains("number of CPUs"), "{e}");
    // And it starts that many threads.
    let s = Scheduler::builder()
        .min_threads(0)
        .name("cpus")
        .build()
        .expect("valid");
    assert_eq!(s.stats().threads, cpus);
    s.shutdown();
    // max_threads equal to the resolved minimum is fine.
    let s = Scheduler::builder()
        .max_threads(cpus)
        .name("cpus2")
        .build()
        .expect("valid");
    assert_eq!(s.stats().threads, cpus);
    s.shutdown();
}

#[test]
fn stack_size_out_of_range_is_refused() {
    for bad in [0, 1, gofer::MIN_STACK_SIZE - 1, gofer::MAX_STACK_SIZE + 1] {
        let e = config_err(Scheduler::builder().min_threads(1).stack_size(bad));
        assert_eq!(e, ConfigError::StackSize { requested: bad });
        let msg = e.to_string();
        assert!(msg.contains(&bad.to_string()), "{msg}");
        assert!(msg.contains(&gofer::MIN_STACK_SIZE.to_string()), "{msg}");
        assert!(msg.contains(&gofer::MAX_STACK_SIZE.to_string()), "{msg}");
    }
    // Both ends of the range are accepted.
    for ok in [gofer::MIN_STACK_SIZE, gofer::MAX_STACK_SIZE] {
        let s = Scheduler::builder()
            .min_threads(1)
            .stack_size(ok)
            .name("stkok")
            .build()
            .expect("in range");
        assert_eq!(s.spawn(|| 1).join().expect("returned"), 1);
        s.shutdown();
    }
}

#[test]
fn zero_durations_are_refused_naming_the_setting() {
    let z = Duration::ZERO;
    let cases = [
        ("block_timeout", Scheduler::builder().block_timeout(z)),
        (
            "dispatch_interval",
            Scheduler::builder().dispatch_interval(z),
        ),
        (
            "idle_thread_timeout",
            Scheduler::builder().idle_thread_timeout(z),
        ),
    ];
    for (setting, b) in cases {
        let e = config_err(b.min_threads(1));
        assert_eq!(e, ConfigError::ZeroDuration { setting });
        let msg = e.to_string();
        assert!(msg.contains(setting), "{msg}");
        assert!(msg.contains("non-zero"), "{msg}");
    }
}

#[test]
fn nul_in_the_name_is_refused() {
    let e = config_err(Scheduler::builder().min_threads(1).name("bad\0name"));
    assert_eq!(e, ConfigError::Name("bad\0name".to_string()));
    let msg = e.to_string();
    assert!(msg.contains("NUL"), "{msg}");
    assert!(msg.contains("name"), "{msg}");
}

// ---------------------------------------------------------------- default scheduler

const GOFER_THREADS_TEST: &str = "default_scheduler_honours_gofer_threads";

#[test]
fn default_scheduler_honours_gofer_threads() {
    if child_scenario().as_deref() == Some("threads") {
        let s = Scheduler::default_scheduler().expect("GOFER_THREADS=3 is valid");
        assert_eq!(s.stats().threads, 3);
        assert_eq!(s.name(), "gofer");
        let t = go!(thread_name).join().expect("returned");
        assert!(t.starts_with("gofer-"), "{t}");
        println!("CHILD-OK");
        return;
    }
    let out = run_child(
        module_path!(),
        GOFER_THREADS_TEST,
        "threads",
        &[("GOFER_THREADS", Some("3"))],
    );
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("CHILD-OK"),
        "{}",
        describe(&out)
    );
}

const GOFER_THREADS_BAD_TEST: &str = "default_scheduler_reports_a_malformed_gofer_threads";

#[test]
fn default_scheduler_reports_a_malformed_gofer_threads() {
    if child_scenario().as_deref() == Some("threads-bad") {
        let e = Scheduler::default_scheduler().expect_err("GOFER_THREADS=abc is malformed");
        assert_eq!(
            e,
            ConfigError::Env {
                var: "GOFER_THREADS",
                value: "abc".into()
            }
        );
        let msg = e.to_string();
        assert!(
            msg.contains("GOFER_THREADS") && msg.contains("abc"),
            "{msg}"
        );
        assert!(msg.contains("whole number"), "{msg}");
        // Returned every time, not only on first use.
        assert_eq!(Scheduler::default_scheduler().expect_err("again"), e);
        // Spawning without a scheduler reports it.
        match Builder::new().spawn(|| ()) {
            Err(SpawnError::DefaultScheduler(inner)) => assert_eq!(inner, e),
            other => panic!("expected SpawnError::DefaultScheduler, got {other:?}"),
        }
        let p = catch_unwind(|| go!(|| ())).expect_err("go! panics");
        let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("GOFER_THREADS") && msg.contains("abc"),
            "{msg}"
        );
        // Explicit schedulers are unaffected.
        let s = sched("explicit", 1);
        assert_eq!(s.spawn(|| 2).join().expect("returned"), 2);
        s.shutdown();
        println!("CHILD-OK");
        return;
    }
    let out = run_child(
        module_path!(),
        GOFER_THREADS_BAD_TEST,
        "threads-bad",
        &[("GOFER_THREADS", Some("abc"))],
    );
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("CHILD-OK"),
        "{}",
        describe(&out)
    );
}
