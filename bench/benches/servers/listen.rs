//! The peers' listener: bound as gofer's `TcpListener::bind` binds
//! (`SO_REUSEADDR`, the largest backlog, which the kernel caps at
//! `net.core.somaxconn`, 4096 by default), so that the servers compared
//! queue the same number of connections. `tokio::net::TcpListener::bind`
//! asks std's 128: a client opening a thousand connections at once
//! overflows that queue, and each connection dropped waits a second or more
//! for its SYN to be sent again, so the server would serve fewer
//! connections than the others for part of a run.
//!
//! Thread-per-core peers (monoio) bind one listener per thread on the same
//! port with `SO_REUSEPORT`, and the kernel spreads new connections over
//! them.

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Socket, Type};

/// The backlog gofer's listeners ask for.
const BACKLOG: i32 = i32::MAX;

/// A non-blocking listener on `addr`, with gofer's backlog, and with
/// `SO_REUSEPORT` if `reuse_port` (so that other listeners may bind the
/// same port).
pub fn bind(addr: SocketAddr, reuse_port: bool) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(reuse_port)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}
