//! Runs the `worker_pool` example: every job sent is done when the
//! producer finishes, a pool cancelled part-way stops with every job
//! accounted for, and bad arguments are refused.
//!
//! Each run has a watchdog: a worker that missed the stop would keep the
//! example running, and the test kills it and fails.

use crate::server_util;

use server_util::{assert_refused, run_within};

const EXAMPLE: &str = "worker_pool";

/// Runs the example with `args` (killed and failed after
/// [`PATIENCE`](server_util::PATIENCE)); fails if it exits with an error or
/// reports a panic. Returns its last line of output, `done: ...`.
fn run_ok(args: &[&str]) -> String {
    let out = run_within(EXAMPLE, args);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "{EXAMPLE} {args:?}: {}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    stdout.lines().last().unwrap_or_default().to_string()
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
