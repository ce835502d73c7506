//! The `hooks` feature: std, libc and blocking crates (SQLite, tokio
//! clients) inside tasks; futexes, descriptors, copies, offloaded calls,
//! fork and the conformance of each hooked call with the kernel's. (ureq
//! at scale, which must never see a blocked thread, is in `tests/alone/`.)
//!
//! Built only with `--features hooks` (`required-features` in
//! `Cargo.toml`); each module says so again (`#![cfg(feature = "hooks")]`).
//! What could hang, forks, or changes the process (descriptor limits, the
//! descriptors' kernel state) runs in a child process under a watchdog.
//! One binary: each links the whole crate and its dependencies.

#[path = "../common/mod.rs"]
mod common;

mod hooks_clocks;
mod hooks_conformance;
mod hooks_copy;
mod hooks_fd_state;
mod hooks_foreign_loop;
mod hooks_futex;
mod hooks_safety;
mod hooks_std;
