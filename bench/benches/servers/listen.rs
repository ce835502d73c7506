//! The tokio peers' listener: bound as gofer's `TcpListener::bind` binds
//! (`SO_REUSEADDR`, the largest backlog, which the kernel caps at
//! `net.core.somaxconn`, 4096 by default), so that the servers compared queue the same
//! number of connections. `tokio::net::TcpListener::bind` asks std's 128:
//! a client opening a thousand connections at once overflows that queue,
//! and each connection dropped waits a second or more for its SYN to be
//! sent again, so the server would serve fewer connections than the
//! others for part of a run.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

/// The backlog gofer's listeners ask for.
const BACKLOG: u32 = i32::MAX as u32;

/// A listener on `addr`, with gofer's backlog.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}
