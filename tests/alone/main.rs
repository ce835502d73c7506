//! Tests that want the machine to themselves: the lateness of ten thousand
//! sleepers and of sleepers beside busy or blocked Processers, the idle CPU
//! of 2,000 Processers, the heartbeat and tickers beside `unblock` calls
//! and beside the hooks' offloaded calls (1,000 file reads and name lookups
//! with no Processer ever judged blocked),
//! and echo or HTTP at scale where no thread may ever be judged blocked
//! (a thread preempted by a neighbour's work while it holds a kernel lock
//! would rightly make another one count as blocked).
//!
//! A binary of their own, since cargo runs test binaries one after
//! another: no other binary's tests run meanwhile. Within it they take
//! turns ([`one_at_a_time`]), so no test of this binary runs beside
//! another either, as when each was the only test of its binary.

#[path = "../common/mod.rs"]
mod common;
#[path = "../net_common/mod.rs"]
mod net_common;

mod hooks_offload;
mod hooks_ureq;
mod net_echo;
mod net_echo_cold;
mod scaling;
mod timer_sleepers;
mod unblock;

/// Held by each test of this binary for its whole run: the tests take
/// turns, each measures time or counts blocked threads, and another test's
/// spinning and sleeping tasks would compete for the same CPUs.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}
