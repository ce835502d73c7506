//! Runs the `stress` example binary briefly: it must balance its books and
//! exit 0, and turn bad arguments into a message and exit code 2.
//!
//! The binary is `target/<profile>/examples/stress`, next to this test's
//! own directory (`target/<profile>/deps`). A full `cargo test` builds
//! examples before it runs tests; `cargo test --test examples` does not,
//! so the test asks cargo to build the example first (a no-op when it is up
//! to date).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The target directory and, for a cross layout, the target triple, found
/// from where this test binary sits.
fn layout(profile_dir: &Path) -> Option<(PathBuf, Option<String>)> {
    let up = profile_dir.parent()?;
    if up.join("CACHEDIR.TAG").exists() {
        return Some((up.to_path_buf(), None));
    }
    let up2 = up.parent()?;
    if up2.join("CACHEDIR.TAG").exists() {
        let triple = up.file_name()?.to_str()?.to_string();
        return Some((up2.to_path_buf(), Some(triple)));
    }
    None
}

fn stress_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("the test binary sits in target/<profile>/deps");
        let bin = profile_dir
            .join("examples")
            .join(format!("stress{}", std::env::consts::EXE_SUFFIX));
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "dev".to_string(),
            Some(p) => p.to_string(),
        };
        let mut build = Command::new(env!("CARGO"));
        build
            .args(["build", "--quiet", "--example", "stress", "--profile"])
            .arg(&profile)
            .arg("--manifest-path")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"));
        if let Some((target_dir, triple)) = layout(profile_dir) {
            build.arg("--target-dir").arg(target_dir);
            if let Some(t) = triple {
                build.arg("--target").arg(t);
            }
        }
        let status = build.status();
        assert!(
            bin.exists(),
            "{} is missing and `cargo build --example stress` did not make it ({status:?})",
            bin.display()
        );
        bin
    })
}

fn run(args: &[&str]) -> Output {
    Command::new(stress_bin())
        .args(args)
        .output()
        .expect("the stress example runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_balanced(args: &[&str]) {
    let out = run(args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(0),
        "stress {args:?} failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    assert!(
        stdout.contains("books balanced"),
        "no balanced books in:\n{stdout}"
    );
    for row in [
        "tasks/s",
        "switches/s",
        "wake latency p50/p99/max",
        "blocked detections",
        "tasks rescued",
        "threads started/retired",
        "peak RSS",
    ] {
        assert!(
            stdout.contains(row),
            "summary row `{row}` missing:\n{stdout}"
        );
    }
    // Not a terminal: no progress bar, nothing on stderr.
    assert!(stderr.is_empty(), "unexpected stderr:\n{stderr}");
}

#[test]
fn short_run_balances_its_books() {
    assert_balanced(&[
        "--duration",
        "1s",
        "--tasks",
        "300",
        "--min-threads",
        "2",
        "--max-threads",
        "4",
        "--blocking-fraction",
        "0.01",
    ]);
}

#[test]
fn dense_stacks_run_balances_its_books() {
    assert_balanced(&[
        "--duration",
        "500ms",
        "--tasks",
        "900",
        "--dense",
        // Small stacks; 16K would do in release, a debug build needs more.
        "--stack-size",
        "32K",
        "--items-per-round",
        "8",
    ]);
}

#[test]
fn bad_arguments_exit_with_code_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["--blocking-fraction", "1.5"], "fraction from 0 to 1"),
        (&["--blocking-fraction", "lots"], "not a number"),
        (
            &["--min-threads", "4", "--max-threads", "2"],
            "--max-threads",
        ),
        (&["--tasks", "0"], "--tasks"),
        (&["--duration", "soon"], "not a duration"),
        (&["--duration", "0s"], "more than zero"),
        (&["--stack-size", "1K"], "stack size"),
        (&["--no-such-flag"], "unexpected argument"),
    ];
    for (args, says) in cases {
        let out = run(args);
        let stderr = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "stress {args:?} should exit 2\n--- stdout\n{}\n--- stderr\n{stderr}",
            text(&out.stdout)
        );
        assert!(
            stderr.contains("error") && stderr.contains(says),
            "stress {args:?}: expected an error mentioning `{says}`, got:\n{stderr}"
        );
        assert!(
            !stderr.contains("panicked"),
            "stress {args:?} panicked:\n{stderr}"
        );
    }
}

#[test]
fn help_explains_the_flags() {
    let out = run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for flag in [
        "--tasks",
        "--duration",
        "--min-threads",
        "--max-threads",
        "--blocking-fraction",
        "--stack-size",
        "--dense",
        "--seed",
    ] {
        assert!(
            help.contains(flag),
            "--help does not mention {flag}:\n{help}"
        );
    }
}
