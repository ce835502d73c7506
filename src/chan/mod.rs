//! Channels that park tasks (and block threads), with [`select!`](crate::select),
//! a run-time [`Select`], timer channels, and futures for async code.
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
//!
//! # From async code
//!
//! [`Receiver::recv_async`] and [`Sender::send_async`] return futures
//! ([`RecvFut`], [`SendFut`]) that any executor can drive: tokio, `futures`,
//! or gofer's [`block_on_future`](crate::block_on_future). So async tasks and
//! gofer tasks talk through the same channel, both ways. Both futures are
//! cancel-safe: a dropped `recv_async` loses no value, a dropped
//! `send_async` either sent its value or sent nothing.
//!
//! ```
//! let (tx, rx) = gofer::chan::bounded::<u32>(1);
//! let t = std::thread::spawn(move || tx.send(7).unwrap()); // or a task
//! let v = futures::executor::block_on(rx.recv_async());
//! assert_eq!(v, Ok(7));
//! # t.join().unwrap();
//! ```
//!
//! # Timers and dynamic selection, as in crossbeam-channel
//!
//! [`after`], [`at`], [`tick`] and [`never()`] make receivers of timer
//! channels, for timeouts and periodic work in `select!` (or anywhere a
//! receiver goes); [`tick_with`] chooses what happens to missed ticks
//! ([`MissedTicks`]). A task waiting on one parks on gofer's timers; no thread
//! is started per timer.
//!
//! [`Select`] waits on operations whose number is known only at run time;
//! the [`SelectedOperation`] it returns is completed with
//! [`recv`](SelectedOperation::recv) or [`send`](SelectedOperation::send).
//!
//! ```
//! use std::time::Duration;
//! use gofer::chan::{after, unbounded, Select};
//!
//! let rxs: Vec<_> = (0..3).map(|_| unbounded::<u32>()).collect();
//! rxs[1].0.send(10).unwrap();
//! let timeout = after(Duration::from_secs(1));
//! let mut sel = Select::new();
//! for (_, rx) in &rxs {
//!     sel.recv(rx);
//! }
//! let t = sel.recv(&timeout);
//! let oper = sel.select();
//! assert_ne!(oper.index(), t);
//! let i = oper.index();
//! assert_eq!(oper.recv(&rxs[i].1), Ok(10));
//! ```
//!
//! # Design
//!
//! One lock-protected state per channel (`channel.rs`), with a queue of
//! blocked senders and one of blocked receivers. A blocked operation waits
//! on a waiter that lives on its own stack (`waiter.rs`); a peer that can
//! serve it claims it with one CAS, moves the value directly into (or out
//! of) its slot, and wakes it. `select!` registers one waiter on every arm's
//! channel; the first channel to fire claims it (`selector.rs`). `Select`
//! runs the same algorithm over a vector of arms (`select_dyn.rs`). A
//! pending future waits with a waiter that wakes a `Waker`, in a heap block
//! it owns (`future.rs`). A timer channel is a channel without senders whose
//! messages a clock makes on demand (`clock.rs`).

// The files of this module (for contributors; the docs above are for users):
//
// | file | what it is |
// |---|---|
// | `channel.rs` | the channel itself, shared by its senders and receivers |
// | `sender.rs` | `Sender`, the sending half |
// | `receiver.rs` | `Receiver`, the receiving half |
// | `error.rs` | the errors of channel operations |
// | `iter.rs` | iterators over a `Receiver` |
// | `future.rs` | channel operations as futures (`RecvFut`, `SendFut`) |
// | `clock.rs` | timer channels: `after`, `at`, `tick`, `never` |
// | `waiter.rs` | how a blocked operation waits; the selection state machine |
// | `selector.rs` | the selection algorithm behind `select!` and `Select` |
// | `select.rs` | the `select!` macro |
// | `select_dyn.rs` | `Select`, a selection over operations known at run time |
// | `lock.rs` | the small spinlock around one channel's state |
// | `rng.rs` | a per-thread xorshift generator for `select!`'s fair arm order |

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
pub use clock::{after, at, never, tick, tick_with, MissedTicks};
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

    /// What a `cancelled(token)` arm of [`select!`](crate::select) waits on:
    /// a channel that disconnects when the token is cancelled. The task
    /// layer's `CancelToken` implements it, so the channel layer needs no
    /// knowledge of tokens (and a value of any other type in that arm does
    /// not compile).
    pub trait CancelSource {
        /// The channel that disconnects on cancellation.
        fn cancel_channel(&self) -> &super::Receiver<core::convert::Infallible>;
    }

    /// `cancelled(&token)` as well as `cancelled(token)`.
    impl<T: CancelSource + ?Sized> CancelSource for &T {
        fn cancel_channel(&self) -> &super::Receiver<core::convert::Infallible> {
            (**self).cancel_channel()
        }
    }
}
