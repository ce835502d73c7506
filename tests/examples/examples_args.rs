//! The small examples take no options: `--help` prints their usage and
//! exits 0, and any argument is an error that exits with code 2.

use crate::server_util;

use std::process::Command;

use server_util::example_bin;

fn check(name: &'static str) {
    let bin = example_bin(name);
    let help = Command::new(&bin).arg("--help").output().unwrap();
    assert!(help.status.success(), "{name} --help: {help:?}");
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains(&format!("Usage: {name}")),
        "{name} --help: {text}"
    );
    let bad = Command::new(&bin).arg("--bogus").output().unwrap();
    assert_eq!(bad.status.code(), Some(2), "{name} --bogus: {bad:?}");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--bogus"));
}

#[test]
fn hello_answers_help_and_refuses_arguments() {
    check("hello");
}

#[test]
fn blocking_rescue_answers_help_and_refuses_arguments() {
    check("blocking_rescue");
}
