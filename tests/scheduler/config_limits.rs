//! Limits of the scheduler's settings: thread counts against
//! `MAX_THREADS_LIMIT`, duration ranges, the default scheduler's
//! environment variables, a thread the operating system refuses to start,
//! and the file descriptors a Processer holds.
//!
//! Cases that start the default scheduler, change process limits or count
//! the process's file descriptors run in a child process (with a watchdog).

use crate::common;

use std::panic::catch_unwind;
use std::time::Duration;

use common::{child_scenario, describe, live_threads_named, run_child_watched};
use gofer::{go, Builder, ConfigError, Scheduler, SchedulerBuilder, SpawnError};

/// The watchdog's limit for one child: generous, the machine is shared.
const CHILD_LIMIT: Duration = Duration::from_secs(120);

fn config_err(b: SchedulerBuilder) -> ConfigError {
    match b.build() {
        Ok(s) => {
            s.shutdown();
            panic!("the configuration must be refused")
        }
        Err(e) => e,
    }
}

/// Extra environment of a child: `None` removes the variable.
type Env<'a> = &'a [(&'a str, Option<&'a str>)];

/// Runs `test` as a child in `scenario` with `env`, and asserts that it
/// printed `CHILD-OK` and exited successfully before the watchdog fired.
fn expect_child_ok(test: &str, scenario: &str, env: Env) {
    let out = run_child_watched(module_path!(), test, scenario, env, CHILD_LIMIT)
        .unwrap_or_else(|| panic!("child {test}/{scenario} hung (killed after {CHILD_LIMIT:?})"));
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("CHILD-OK"),
        "{}",
        describe(&out)
    );
}

fn cpus() -> usize {
    num_cpus::get().max(1)
}

// ---------------------------------------------------------------- thread counts

#[test]
fn the_thread_cap_is_4096() {
    assert_eq!(gofer::MAX_THREADS_LIMIT, 4096);
}

#[test]
fn min_threads_above_the_cap_is_refused() {
    for requested in [4097, 99_999, usize::MAX] {
        let e = config_err(Scheduler::builder().min_threads(requested).name("capmin"));
        assert_eq!(
            e,
            ConfigError::ThreadCount {
                setting: "min_threads",
                requested
            }
        );
        let msg = e.to_string();
        assert!(msg.contains(&format!("min_threads ({requested})")), "{msg}");
        assert!(
            msg.contains("accepts 0 (one Processer per CPU) to 4096"),
            "{msg}"
        );
    }
    // Refused before any thread started.
    assert_eq!(live_threads_named("capmin-"), Vec::<String>::new());
}

#[test]
fn max_threads_above_the_cap_is_refused() {
    for requested in [4097, usize::MAX] {
        let e = config_err(
            Scheduler::builder()
                .min_threads(1)
                .max_threads(requested)
                .name("capmax"),
        );
        assert_eq!(
            e,
            ConfigError::ThreadCount {
                setting: "max_threads",
                requested
            }
        );
        let msg = e.to_string();
        assert!(msg.contains(&format!("max_threads ({requested})")), "{msg}");
        assert!(msg.contains("accepts 1 to 4096"), "{msg}");
        assert!(msg.contains("not below min_threads"), "{msg}");
    }
    assert_eq!(live_threads_named("capmax-"), Vec::<String>::new());
}

#[test]
fn max_threads_at_the_cap_is_accepted() {
    let s = Scheduler::builder()
        .min_threads(1)
        .max_threads(gofer::MAX_THREADS_LIMIT)
        .name("capok")
        .build()
        .expect("max_threads(4096) is in range");
    assert_eq!(s.spawn(|| 1).join().expect("returned"), 1);
    s.shutdown();
}

#[test]
fn max_threads_zero_is_refused_saying_what_each_option_accepts() {
    let e = config_err(Scheduler::builder().max_threads(0));
    assert_eq!(
        e,
        ConfigError::MaxBelowMin {
            min: cpus(),
            max: 0
        }
    );
    let msg = e.to_string();
    // What max_threads accepts, and that 0 stands for the CPU count only in
    // min_threads.
    assert!(
        msg.contains(&format!("max_threads accepts {} to 4096", cpus())),
        "{msg}"
    );
    assert!(msg.contains("min_threads accepts 0 to 4096"), "{msg}");
    assert!(
        msg.contains("a min_threads of 0 stands for the number of CPUs"),
        "{msg}"
    );
    assert!(!msg.contains("(0 means"), "{msg}");
}

const CAP_START_TEST: &str = "schedulers_of_up_to_the_cap_of_processers_start_and_stop";

#[test]
fn schedulers_of_up_to_the_cap_of_processers_start_and_stop() {
    let Some(n) = child_scenario() else {
        // 2,000 (a size that must keep working) and the cap itself.
        for n in ["2000", "4096"] {
            expect_child_ok(CAP_START_TEST, n, &[]);
        }
        return;
    };
    let n: usize = n.parse().expect("a thread count");
    let s = Scheduler::builder()
        .min_threads(n)
        .max_threads(n)
        .name("many")
        .build()
        .expect("a thread count up to the cap is accepted");
    assert_eq!(s.stats().threads, n);
    // The last core Processer runs a task pinned to it.
    let last = Builder::new()
        .scheduler(&s)
        .pin(n - 1)
        .spawn(|| 7)
        .expect("spawn pinned to the last Processer");
    assert_eq!(last.join().expect("returned"), 7);
    s.shutdown();
    assert_eq!(live_threads_named("many-"), Vec::<String>::new());
    println!("CHILD-OK");
}

// ---------------------------------------------------------------- durations

#[test]
fn a_huge_dispatch_interval_is_refused_with_the_accepted_range() {
    let min = gofer::MIN_DISPATCH_INTERVAL;
    let max = gofer::MAX_DISPATCH_INTERVAL;
    assert_eq!(
        (min, max),
        (Duration::from_micros(10), Duration::from_secs(1))
    );
    for requested in [
        Duration::MAX,
        Duration::from_secs(2),
        max + Duration::from_nanos(1),
        min - Duration::from_nanos(1),
        Duration::from_nanos(1),
    ] {
        let e = config_err(
            Scheduler::builder()
                .min_threads(1)
                .dispatch_interval(requested),
        );
        assert_eq!(
            e,
            ConfigError::DurationRange {
                setting: "dispatch_interval",
                requested,
                min,
                max
            }
        );
        let msg = e.to_string();
        assert!(msg.contains("dispatch_interval"), "{msg}");
        assert!(msg.contains("accepted: 10µs to 1s"), "{msg}");
    }
}

#[test]
fn block_timeout_outside_its_range_or_below_the_dispatch_interval_is_refused() {
    let (min, max) = (gofer::MIN_BLOCK_TIMEOUT, gofer::MAX_BLOCK_TIMEOUT);
    assert_eq!(
        (min, max),
        (Duration::from_micros(100), Duration::from_secs(3600))
    );
    for requested in [
        Duration::MAX,
        max + Duration::from_nanos(1),
        min - Duration::from_nanos(1),
    ] {
        let e = config_err(Scheduler::builder().min_threads(1).block_timeout(requested));
        assert_eq!(
            e,
            ConfigError::DurationRange {
                setting: "block_timeout",
                requested,
                min,
                max
            }
        );
        let msg = e.to_string();
        assert!(msg.contains("accepted: 100µs to 3600s"), "{msg}");
    }
    // Shorter than the dispatch interval: the interval is the lower bound.
    let interval = Duration::from_millis(1);
    let requested = Duration::from_micros(500);
    let e = config_err(
        Scheduler::builder()
            .min_threads(1)
            .dispatch_interval(interval)
            .block_timeout(requested),
    );
    assert_eq!(
        e,
        ConfigError::DurationRange {
            setting: "block_timeout",
            requested,
            min: interval,
            max
        }
    );
    let msg = e.to_string();
    assert!(msg.contains("accepted: 1ms to 3600s"), "{msg}");
    assert!(
        msg.contains("may not be shorter than dispatch_interval"),
        "{msg}"
    );
}

#[test]
fn idle_thread_timeout_outside_its_range_is_refused() {
    let (min, max) = (
        gofer::MIN_IDLE_THREAD_TIMEOUT,
        gofer::MAX_IDLE_THREAD_TIMEOUT,
    );
    assert_eq!(
        (min, max),
        (Duration::from_millis(1), Duration::from_secs(86_400))
    );
    for requested in [
        Duration::MAX,
        max + Duration::from_nanos(1),
        min - Duration::from_nanos(1),
    ] {
        let e = config_err(
            Scheduler::builder()
                .min_threads(1)
                .idle_thread_timeout(requested),
        );
        assert_eq!(
            e,
            ConfigError::DurationRange {
                setting: "idle_thread_timeout",
                requested,
                min,
                max
            }
        );
        let msg = e.to_string();
        assert!(msg.contains("idle_thread_timeout"), "{msg}");
        assert!(msg.contains("accepted: 1ms to 86400s"), "{msg}");
    }
}

#[test]
fn duration_settings_at_the_ends_of_their_ranges_are_accepted() {
    let shortest = Scheduler::builder()
        .min_threads(1)
        .max_threads(2)
        .dispatch_interval(gofer::MIN_DISPATCH_INTERVAL)
        .block_timeout(gofer::MIN_BLOCK_TIMEOUT)
        .idle_thread_timeout(gofer::MIN_IDLE_THREAD_TIMEOUT)
        .name("durmin");
    let longest = Scheduler::builder()
        .min_threads(1)
        .max_threads(2)
        .dispatch_interval(gofer::MAX_DISPATCH_INTERVAL)
        .block_timeout(gofer::MAX_BLOCK_TIMEOUT)
        .idle_thread_timeout(gofer::MAX_IDLE_THREAD_TIMEOUT)
        .name("durmax");
    // block_timeout equal to the dispatch interval.
    let equal = Scheduler::builder()
        .min_threads(1)
        .max_threads(2)
        .dispatch_interval(Duration::from_secs(1))
        .block_timeout(Duration::from_secs(1))
        .name("dureq");
    for b in [shortest, longest, equal] {
        let s = b.build().expect("the ends of the ranges are accepted");
        assert_eq!(s.spawn(|| 3).join().expect("returned"), 3);
        s.shutdown();
    }
}

// ---------------------------------------------------------------- environment

/// The child side of the environment cases: the default scheduler refuses
/// its variables with `expected`, every time, and spawning without a
/// scheduler reports it.
fn expect_default_scheduler_error(expected: ConfigError) {
    let e = Scheduler::default_scheduler().expect_err("the environment is out of range");
    assert_eq!(e, expected);
    assert_eq!(Scheduler::default_scheduler().expect_err("again"), e);
    match Builder::new().spawn(|| ()) {
        Err(SpawnError::DefaultScheduler(inner)) => assert_eq!(inner, e),
        other => panic!("expected SpawnError::DefaultScheduler, got {other:?}"),
    }
    let p = catch_unwind(|| go!(|| ())).expect_err("go! panics");
    let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains(&e.to_string()), "{msg}");
    // Refused before any thread started.
    assert_eq!(live_threads_named("gofer-"), Vec::<String>::new());
}

const ENV_THREADS_TEST: &str = "gofer_threads_above_the_cap_is_refused_naming_the_variable";

#[test]
fn gofer_threads_above_the_cap_is_refused_naming_the_variable() {
    if child_scenario().as_deref() != Some("threads-cap") {
        return expect_child_ok(
            ENV_THREADS_TEST,
            "threads-cap",
            &[("GOFER_THREADS", Some("99999"))],
        );
    }
    let e = ConfigError::EnvRange {
        var: "GOFER_THREADS",
        value: 99_999,
        min: 0,
        max: 4096,
    };
    let msg = e.to_string();
    assert!(msg.contains("GOFER_THREADS=99999"), "{msg}");
    assert!(
        msg.contains("accepted: 0 (one Processer per CPU) to 4096"),
        "{msg}"
    );
    expect_default_scheduler_error(e);
    println!("CHILD-OK");
}

const ENV_MAX_ZERO_TEST: &str = "gofer_max_threads_zero_is_refused_with_a_consistent_message";

#[test]
fn gofer_max_threads_zero_is_refused_with_a_consistent_message() {
    if child_scenario().as_deref() != Some("max-zero") {
        return expect_child_ok(
            ENV_MAX_ZERO_TEST,
            "max-zero",
            &[("GOFER_MAX_THREADS", Some("0"))],
        );
    }
    // GOFER_THREADS unset: min_threads is the CPU count.
    let e = ConfigError::EnvRange {
        var: "GOFER_MAX_THREADS",
        value: 0,
        min: cpus(),
        max: 4096,
    };
    let msg = e.to_string();
    assert!(msg.contains("GOFER_MAX_THREADS=0"), "{msg}");
    assert!(
        msg.contains(&format!("accepted: {} to 4096", cpus())),
        "{msg}"
    );
    assert!(
        msg.contains("at least 1, and not below min_threads"),
        "{msg}"
    );
    assert!(!msg.contains("0 means"), "{msg}");
    expect_default_scheduler_error(e);
    println!("CHILD-OK");
}

const ENV_MAX_RANGE_TEST: &str =
    "gofer_max_threads_above_the_cap_or_below_gofer_threads_is_refused";

#[test]
fn gofer_max_threads_above_the_cap_or_below_gofer_threads_is_refused() {
    match child_scenario().as_deref() {
        Some("max-cap") => {
            expect_default_scheduler_error(ConfigError::EnvRange {
                var: "GOFER_MAX_THREADS",
                value: 5000,
                min: 2,
                max: 4096,
            });
        }
        Some("max-below") => {
            let e = ConfigError::EnvRange {
                var: "GOFER_MAX_THREADS",
                value: 2,
                min: 3,
                max: 4096,
            };
            let msg = e.to_string();
            assert!(msg.contains("GOFER_MAX_THREADS=2"), "{msg}");
            assert!(msg.contains("accepted: 3 to 4096"), "{msg}");
            assert!(msg.contains("not below min_threads, here 3"), "{msg}");
            expect_default_scheduler_error(e);
        }
        Some("max-malformed") => {
            let e = ConfigError::Env {
                var: "GOFER_MAX_THREADS",
                value: "many".into(),
            };
            let msg = e.to_string();
            assert!(msg.contains("GOFER_MAX_THREADS=\"many\""), "{msg}");
            assert!(
                msg.contains("GOFER_MAX_THREADS accepts 1 to 4096, and not below min_threads"),
                "{msg}"
            );
            expect_default_scheduler_error(e);
        }
        Some(other) => panic!("unknown scenario {other}"),
        None => {
            let cases: [(&str, Env); 3] = [
                (
                    "max-cap",
                    &[
                        ("GOFER_THREADS", Some("2")),
                        ("GOFER_MAX_THREADS", Some("5000")),
                    ],
                ),
                (
                    "max-below",
                    &[
                        ("GOFER_THREADS", Some("3")),
                        ("GOFER_MAX_THREADS", Some("2")),
                    ],
                ),
                ("max-malformed", &[("GOFER_MAX_THREADS", Some("many"))]),
            ];
            for (scenario, env) in cases {
                expect_child_ok(ENV_MAX_RANGE_TEST, scenario, env);
            }
            return;
        }
    }
    println!("CHILD-OK");
}

const ENV_OK_TEST: &str = "gofer_max_threads_at_the_cap_is_accepted";

#[test]
fn gofer_max_threads_at_the_cap_is_accepted() {
    if child_scenario().as_deref() != Some("env-ok") {
        return expect_child_ok(
            ENV_OK_TEST,
            "env-ok",
            &[
                ("GOFER_THREADS", Some("2")),
                ("GOFER_MAX_THREADS", Some("4096")),
            ],
        );
    }
    let s = Scheduler::default_scheduler().expect("in range");
    assert_eq!(s.stats().threads, 2);
    assert_eq!(go!(|| 4).join().expect("returned"), 4);
    println!("CHILD-OK");
}

// ---------------------------------------------------------------- threads that cannot start

/// Thread stacks of the children below: large, so that a limit on the
/// address space admits a known handful of threads whatever the small
/// allocations around them.
const CHILD_STACK: u64 = 256 << 20;

/// The child environment: every std thread gets a `CHILD_STACK` stack, and
/// malloc keeps one arena (no per-thread 64 MiB reservations).
const SMALL_ROOM_ENV: [(&str, Option<&str>); 2] = [
    ("RUST_MIN_STACK", Some("268435456")),
    ("MALLOC_ARENA_MAX", Some("1")),
];

/// The process's address space in use, in bytes.
fn address_space_in_use() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmSize in /proc/self/status");
    kib * 1024
}

/// Lowers the address-space limit so that only about four more
/// `CHILD_STACK` thread stacks fit (`pthread_create` then fails with
/// `EAGAIN`, even for root), runs `f`, and restores the limit.
fn with_room_for_four_threads<T>(f: impl FnOnce() -> T) -> T {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `old` is a valid out-pointer.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut old) }, 0);
    let room = libc::rlimit {
        rlim_cur: address_space_in_use() + CHILD_STACK * 9 / 2,
        rlim_max: old.rlim_max,
    };
    // SAFETY: a fully initialised rlimit; lowering the soft limit is always
    // allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &room) }, 0);
    let r = f();
    // SAFETY: as above; the soft limit goes back to its old value, which is
    // not above the (unchanged) hard limit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &old) }, 0);
    r
}

/// Checks a `ThreadStart` error for a scheduler named `name` of
/// `requested` Processers.
fn check_thread_start_error(e: &ConfigError, name: &str, requested: usize) {
    let ConfigError::ThreadStart {
        thread,
        started,
        errno,
        error,
    } = e
    else {
        panic!("expected ConfigError::ThreadStart, got {e:?}");
    };
    assert!(
        (1..requested).contains(started),
        "some but not all threads started: {e:?}"
    );
    assert_eq!(*thread, format!("{name}-{started}"), "{e:?}");
    assert_eq!(*errno, Some(libc::EAGAIN), "{e:?}");
    let os = std::io::Error::from_raw_os_error(libc::EAGAIN).to_string();
    assert_eq!(*error, os);
    let msg = e.to_string();
    assert!(msg.contains(&format!("{thread:?}")), "{msg}");
    assert!(msg.contains(&os), "{msg}");
    assert!(
        msg.contains(&format!(
            "the {started} thread(s) of the scheduler already started were stopped"
        )),
        "{msg}"
    );
}

const NO_ROOM_TEST: &str = "a_processer_thread_that_cannot_start_makes_build_return_an_error";

#[test]
fn a_processer_thread_that_cannot_start_makes_build_return_an_error() {
    if child_scenario().as_deref() != Some("no-room") {
        return expect_child_ok(NO_ROOM_TEST, "no-room", &SMALL_ROOM_ENV);
    }
    let built = with_room_for_four_threads(|| {
        Scheduler::builder()
            .min_threads(64)
            .max_threads(64)
            .name("noroom")
            .build()
    });
    let e = built.expect_err("64 threads of 256 MiB do not fit");
    check_thread_start_error(&e, "noroom", 64);
    // The threads that had started were stopped and joined.
    assert_eq!(live_threads_named("noroom-"), Vec::<String>::new());
    // With room again, the same configuration builds.
    let s = Scheduler::builder()
        .min_threads(8)
        .name("room")
        .build()
        .expect("builds with room");
    assert_eq!(s.spawn(|| 1).join().expect("returned"), 1);
    s.shutdown();
    println!("CHILD-OK");
}

const NO_ROOM_DEFAULT_TEST: &str = "the_default_scheduler_reports_a_thread_that_cannot_start";

#[test]
fn the_default_scheduler_reports_a_thread_that_cannot_start() {
    if child_scenario().as_deref() != Some("no-room-default") {
        let mut env = SMALL_ROOM_ENV.to_vec();
        env.push(("GOFER_THREADS", Some("64")));
        return expect_child_ok(NO_ROOM_DEFAULT_TEST, "no-room-default", &env);
    }
    let spawned = with_room_for_four_threads(|| Builder::new().spawn(|| ()).map(drop));
    let e = match spawned {
        Err(SpawnError::DefaultScheduler(e)) => e,
        other => panic!("expected SpawnError::DefaultScheduler, got {other:?}"),
    };
    check_thread_start_error(&e, "gofer", 64);
    assert_eq!(live_threads_named("gofer-"), Vec::<String>::new());
    // The error stays, and go! panics with it rather than with anything else.
    assert_eq!(Scheduler::default_scheduler().expect_err("again"), e);
    let p = catch_unwind(|| go!(|| ())).expect_err("go! panics");
    let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("cannot start the default scheduler"), "{msg}");
    assert!(msg.contains(&e.to_string()), "{msg}");
    println!("CHILD-OK");
}

// ---------------------------------------------------------------- file descriptors

/// Open file descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

const FD_TEST: &str = "processers_hold_no_file_descriptor";

#[test]
fn processers_hold_no_file_descriptor() {
    if child_scenario().as_deref() != Some("fds") {
        return expect_child_ok(FD_TEST, "fds", &[]);
    }
    let before = open_fds();
    let s = Scheduler::builder()
        .min_threads(64)
        .max_threads(64)
        .name("nofd")
        .build()
        .expect("valid");
    // Every Processer runs a task pinned to it: each thread has started
    // and set itself up.
    let handles: Vec<_> = (0..64)
        .map(|i| {
            Builder::new()
                .scheduler(&s)
                .pin(i)
                .spawn(move || i)
                .expect("spawn pinned")
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().expect("returned"), i);
    }
    let running = open_fds();
    s.shutdown();
    assert_eq!(
        running,
        before,
        "a scheduler of 64 Processers holds {} file descriptors",
        running as isize - before as isize
    );
    println!("CHILD-OK");
}

const ENV_NON_UTF8_TEST: &str = "non_utf8_thread_variables_are_refused_naming_the_variable";

/// `GOFER_THREADS` and `GOFER_MAX_THREADS` that are not UTF-8 are
/// malformed, not unset: the default scheduler fails with
/// `ConfigError::Env` naming the variable.
#[test]
fn non_utf8_thread_variables_are_refused_naming_the_variable() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let bad = OsStr::from_bytes(b"4\xff");
    match child_scenario().as_deref() {
        Some(scenario @ ("threads-utf8" | "max-utf8")) => {
            let var = if scenario == "threads-utf8" {
                "GOFER_THREADS"
            } else {
                "GOFER_MAX_THREADS"
            };
            let e = ConfigError::Env {
                var,
                value: "4\u{fffd}".into(),
            };
            let msg = e.to_string();
            assert!(msg.contains(var), "{msg}");
            expect_default_scheduler_error(e);
            println!("CHILD-OK");
        }
        Some(other) => panic!("unknown scenario {other}"),
        None => {
            for (scenario, var) in [
                ("threads-utf8", "GOFER_THREADS"),
                ("max-utf8", "GOFER_MAX_THREADS"),
            ] {
                let out = common::run_child_watched_os(
                    module_path!(),
                    ENV_NON_UTF8_TEST,
                    scenario,
                    &[(var, bad)],
                    CHILD_LIMIT,
                )
                .unwrap_or_else(|| panic!("child {scenario} hung"));
                assert!(
                    out.status.success()
                        && String::from_utf8_lossy(&out.stdout).contains("CHILD-OK"),
                    "{}",
                    describe(&out)
                );
            }
        }
    }
}
