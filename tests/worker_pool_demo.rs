//! Runs the `worker_pool` example: every job sent is done when the
//! producer finishes, a pool cancelled part-way stops with every job
//! accounted for, and bad arguments are refused.
//!
//! Each run has a watchdog: a worker that missed the stop would keep the
//! example running, and the test kills it and fails.

mod server_util;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Instant;

use server_util::{assert_refused, example_bin, PATIENCE};

const EXAMPLE: &str = "worker_pool";

/// Runs the example with `args`; fails if it runs longer than
/// [`PATIENCE`], exits with an error, or reports a panic. Returns its last
/// line of output, `done: ...`.
fn run_ok(args: &[&str]) -> String {
    let mut child = Command::new(example_bin(EXAMPLE))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the example starts");
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{EXAMPLE} {args:?} still ran after {PATIENCE:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        status.success(),
        "{EXAMPLE} {args:?}: {status}\n{out}\n{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    out.lines().last().unwrap_or_default().to_string()
}

/// The numbers after `done:` and `by`, and before `left` and `unsent`, in
/// the summary line: (done, workers, queued, unsent).
fn numbers(line: &str) -> (u64, u64, u64, u64) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |w: &str| -> u64 {
        let i = words.iter().position(|x| *x == w).expect(w);
        words[i + 1].trim_end_matches(',').parse().expect(line)
    };
    let before = |w: &str| -> u64 {
        let i = words
            .iter()
            .position(|x| x.trim_end_matches(',') == w)
            .expect(w);
        words[i - 1].parse().expect(line)
    };
    (
        after("done:"),
        after("by"),
        before("left"),
        before("unsent"),
    )
}

#[test]
fn every_job_is_done_when_the_producer_finishes() {
    let line = run_ok(&[
        "--workers",
        "16",
        "--jobs",
        "3000",
        "--job-us",
        "10",
        "--threads",
        "2",
    ]);
    assert_eq!(numbers(&line), (3000, 16, 0, 0), "{line}");
}

#[test]
fn a_pool_cancelled_part_way_stops_with_every_job_accounted_for() {
    // Far more jobs than 100 ms can do: the token stops the pool.
    let line = run_ok(&[
        "--workers",
        "32",
        "--jobs",
        "100000000",
        "--job-us",
        "100",
        "--stop-after-ms",
        "100",
        "--threads",
        "2",
    ]);
    let (done, workers, _queued, unsent) = numbers(&line);
    assert_eq!(workers, 32, "every worker reported: {line}");
    assert!(done > 0, "{line}");
    assert!(unsent > 0, "the producer stopped early: {line}");
    // done + queued == sent is checked by the example (exit status 1).
}

#[test]
fn bad_arguments_are_refused() {
    assert_refused(EXAMPLE, &["--workers", "0"], "--workers");
    assert_refused(EXAMPLE, &["--jobs", "many"], "--jobs");
}
