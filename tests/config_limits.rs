//! Limits of the scheduler's settings: duration ranges, and the file
//! descriptors a Processer holds.
//!
//! Cases that count the process's file descriptors run in a child
//! process (with a watchdog).

mod common;

use std::time::Duration;

use common::{child_scenario, describe, run_child_watched};
use gofer::{Builder, ConfigError, Scheduler, SchedulerBuilder};

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
    let out = run_child_watched(test, scenario, env, CHILD_LIMIT)
        .unwrap_or_else(|| panic!("child {test}/{scenario} hung (killed after {CHILD_LIMIT:?})"));
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("CHILD-OK"),
        "{}",
        describe(&out)
    );
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
