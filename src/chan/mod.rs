//! Channels that park tasks (and block threads), with [`select!`](crate::select).
//!
//! Multi-producer multi-consumer channels in three flavours:
//!
//! - [`bounded(n)`](bounded) with `n > 0`: a buffer of `n` values; `send`
//!   waits while it is full.
//! - [`bounded(0)`](bounded): a rendezvous channel; a `send` completes only
//!   when a receiver takes the value.
//! - [`unbounded()`](unbounded): `send` never waits.
//!
//! Both halves are `Clone` and `Send + Sync` (for `T: Send`). Inside a task a
//! blocking operation parks the task (its Processer runs other tasks); on a
//! plain thread it blocks the thread. Tasks and threads mix freely on one
//! channel.
//!
//! ```
//! use gofer::chan;
//!
//! let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
//! let (tx, rx) = chan::bounded(0);
//! let producer = sched.spawn(move || {
//!     for i in 0..5 {
//!         tx.send(i).unwrap(); // waits until the receiver takes it
//!     }
//!     // Dropping the last Sender disconnects the channel.
//! });
//! // A plain thread receives from a task.
//! let got: Vec<i32> = rx.iter().collect();
//! assert_eq!(got, [0, 1, 2, 3, 4]);
//! producer.join().unwrap();
//! sched.shutdown();
//! ```
//!
//! # Disconnection
//!
//! When every [`Sender`] is gone, receivers get the values still buffered,
//! then [`RecvError`]. When every [`Receiver`] is gone, sends fail and hand
//! their value back ([`SendError::into_inner`]); buffered values are
//! dropped.
//!
//! # How a blocked operation completes
//!
//! A blocked `send` or `recv` waits in place and allocates nothing: the
//! peer that can serve it moves the value straight into (or out of) the
//! waiting operation and wakes it. A `select!` waits on all its arms at
//! once, and exactly one arm completes: the first channel that can serve
//! it claims it, and the other arms have no effect. `ARCHITECTURE.md`,
//! "Sync primitives and channels", has the design.

mod channel;
mod error;
mod iter;
mod lock;
mod receiver;
mod rng;
mod select;
mod selector;
mod sender;
mod waiter;

pub use channel::{bounded, unbounded};
pub use error::{
    RecvError, RecvTimeoutError, SendError, SendTimeoutError, TryRecvError, TrySendError,
};
pub use iter::{IntoIter, Iter, TryIter};
pub use receiver::Receiver;
pub use sender::Sender;

/// What the `select!` expansion uses; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use super::selector::{select, ArmRef, Mode, RecvArm, SendArm};
}
