//! The examples, run as the programs they are: the echo, HTTP and
//! key-value servers, the worker pool, the stress demo, their command
//! lines, and the key-value server's RESP parser.
//!
//! The servers run as child processes on ports they pick, so these tests
//! share nothing but the example binaries, built once (`server_util`). One
//! binary: each links the whole crate and its dependencies.

#[path = "../server_util/mod.rs"]
mod server_util;

mod echo_server_demo;
mod examples_args;
mod http_server_demo;
mod kv_resp;
mod kv_server;
mod stress_demo;
mod worker_pool_demo;
