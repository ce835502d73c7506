//! Networking: `gofer::net` TCP, UDP and Unix sockets, deadlines, wake-ups,
//! races of close, cancel and shutdown, descriptor limits, and the
//! conformance suites that compare each call with `std::net`. (Echo at
//! scale, which must never see a blocked thread, is in `tests/alone/`.)
//!
//! Each test opens its own sockets on ports the kernel picks; what could
//! hang, exhausts descriptors or changes the environment of the driver
//! runs in a child process under a watchdog. One binary: the files share
//! `net_common` and `conformance`, and each binary links the whole crate.

#[path = "../common/mod.rs"]
mod common;
#[path = "../conformance/mod.rs"]
mod conformance;
#[path = "../net_common/mod.rs"]
mod net_common;

mod net_conformance_tcp;
mod net_conformance_udp;
mod net_conformance_unix;
mod net_deadlines;
mod net_limits;
mod net_races;
mod net_tcp;
mod net_threads;
mod net_udp;
mod net_unix;
mod net_wakeup;
