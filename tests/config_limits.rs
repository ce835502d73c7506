//! Limits of the scheduler: the file descriptors a Processer holds.
//!
//! Cases that count the process's file descriptors run in a child
//! process (with a watchdog).

mod common;

use std::time::Duration;

use common::{child_scenario, describe, run_child_watched};
use gofer::{Builder, Scheduler};

/// The watchdog's limit for one child: generous, the machine is shared.
const CHILD_LIMIT: Duration = Duration::from_secs(120);

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
