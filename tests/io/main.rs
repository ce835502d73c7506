//! The IO drivers (epoll and io_uring, `GOFER_IO`), the reactor of each
//! core Processer, descriptor waits, idle sockets, files (`gofer::fs`,
//! reads that need not wait), and the descriptor reserve. (`unblock` and
//! its pool, whose tests measure a heartbeat's gaps, are in
//! `tests/alone/`.)
//!
//! What depends on the driver chosen by the environment, the descriptor
//! limits or a ring of its own runs in a child process under a watchdog
//! (`common::in_child`, `run_child_watched`). One binary: the files share
//! `net_common`, and each binary links the whole crate.

#[path = "../common/mod.rs"]
mod common;
#[path = "../net_common/mod.rs"]
mod net_common;

mod fd_reserve;
mod fs;
mod fs_cached_open;
mod fs_nowait;
mod io_driver;
mod io_idle;
mod io_per_processer;
mod io_uring;
mod io_wait;
