//! The IO manager: an epoll reactor per core Processer, on which tasks that
//! wait for a socket park while their thread runs other tasks.
//!
//! - `choice.rs`: which driver a scheduler runs, and why;
//! - `epoll.rs`: the OS layer (epoll, the eventfd that interrupts a wait);
//! - `readiness.rs`: one socket's readiness word and its waiting tasks;
//! - `reactor.rs`: the reactor of each core Processer, who polls it, how
//!   events become wake-ups, and the registration lifecycle (its moves
//!   between reactors included);
//! - `uring.rs`: the io_uring driver, a ring per core Processer through
//!   which bound tasks' stream reads and writes complete;
//! - `uring_recv.rs`: multishot receive into a ring's provided buffers.

pub(crate) mod choice;
pub(crate) mod epoll;
pub(crate) mod reactor;
pub(crate) mod readiness;
pub(crate) mod uring;
pub(crate) mod uring_recv;

pub(crate) use reactor::{
    poll_fd, shared_registration, wait_once, Poller, Reactor, Reactors, Registration, BUSY_POLL,
};
pub(crate) use readiness::Interest;
pub(crate) use uring::{
    accept as ring_accept, connect as ring_connect, poll as ring_poll, probe as uring_probe,
    recv_from as ring_recv_from, send_to as ring_send_to, stream_op, vectored_op, Ring, RingWaker,
    StreamOp, VectoredOp,
};
pub(crate) use uring_recv::{recv as ring_recv, RecvPath, RecvSlot};
