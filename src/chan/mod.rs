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
//! # Design
//!
//! One lock-protected state per channel (`channel.rs`), with a queue of
//! blocked senders and one of blocked receivers. A blocked operation waits
//! on a waiter that lives on its own stack (`waiter.rs`); a peer that can
//! serve it claims it with one CAS, moves the value directly into (or out
//! of) its slot, and wakes it. `select!` registers one waiter on every arm's
//! channel; the first channel to fire claims it (`selector.rs`).

mod channel;
mod clock;
mod error;
mod future;
mod iter;
mod lock;
mod receiver;
mod rng;
mod select;
mod select_dyn;
mod selector;
mod sender;
mod waiter;

pub use channel::{bounded, unbounded};
pub use clock::{after, at, never, tick};
pub use error::{
    RecvError, RecvTimeoutError, SelectTimeoutError, SendError, SendTimeoutError, TryRecvError,
    TrySelectError, TrySendError,
};
pub use future::{RecvFut, SendFut};
pub use iter::{IntoIter, Iter, TryIter};
pub use receiver::Receiver;
pub use select_dyn::{Select, SelectedOperation};
pub use sender::Sender;

/// What the `select!` expansion uses; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use super::selector::{select, ArmRef, Mode, RecvArm, SendArm};
}
