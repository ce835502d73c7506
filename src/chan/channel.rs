//! The channel itself, shared by its senders and receivers: one design for
//! all three flavours (rendezvous, bounded, unbounded).
//!
//! # State
//!
//! Under one [`SpinLock`]: the buffer of values (never longer than the
//! capacity; always empty for a rendezvous channel), the queue of blocked
//! senders (each node's slot holds the value it wants to send), the queue
//! of blocked receivers (each node's slot is empty, waiting for a value),
//! and the `disconnected` flag.
//!
//! Invariants, while the lock is free: if receivers are waiting (undecided)
//! the buffer is empty; if senders are waiting the buffer is full. So a send
//! first looks for a waiting receiver and hands its value **directly into
//! that receiver's slot**, then tries the buffer; a receive takes from the
//! buffer (refilling it from the oldest waiting sender, so values keep their
//! order), or straight from a waiting sender's slot.
//!
//! # Completing a peer
//!
//! A peer found in a queue is claimed with one CAS under the lock (see
//! `waiter.rs`); the value moves under the lock (so buffer order and
//! disconnection stay consistent), and the wake-up happens after the lock is
//! released. Operations therefore return a [`Claimed`] that the caller must
//! `finish` once it dropped the guard.
//!
//! # Disconnection
//!
//! When the last sender or the last receiver goes, `disconnected` is set and
//! every blocked operation is completed *without* moving a value: a receiver
//! finds its slot empty (`RecvError`), a sender finds its value still in its
//! slot (`SendError`). When the last receiver goes, the buffered values are
//! dropped too (outside the lock): nobody can receive them any more.

use crate::runtime::wait::WaitOn;
use std::collections::VecDeque;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Instant;

use super::lock::{SpinGuard, SpinLock};
use super::receiver::Receiver;
use super::sender::Sender;
use super::waiter::{Claimed, Node, Outcome, WaitQueue, Waiter};

/// A channel holding at most `cap` values; `cap == 0` makes a rendezvous
/// channel, where each send waits for a receiver to take the value.
///
/// ```
/// let (tx, rx) = gofer::chan::bounded(2);
/// tx.send('a').unwrap();
/// tx.send('b').unwrap();
/// assert!(tx.is_full());
/// assert_eq!(rx.recv(), Ok('a'));
/// ```
pub fn bounded<T>(cap: usize) -> (Sender<T>, Receiver<T>) {
    new(Some(cap))
}

/// A channel without a size limit: sends never wait.
///
/// ```
/// let (tx, rx) = gofer::chan::unbounded();
/// for i in 0..1000 {
///     tx.send(i).unwrap();
/// }
/// assert_eq!(rx.len(), 1000);
/// ```
pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    new(None)
}

fn new<T>(cap: Option<usize>) -> (Sender<T>, Receiver<T>) {
    let chan = Arc::new(Chan::new(cap));
    (Sender { chan: chan.clone() }, Receiver { chan })
}

/// A channel's state, guarded by its lock.
pub(crate) struct State<T> {
    buf: VecDeque<T>,
    senders: WaitQueue<T>,
    receivers: WaitQueue<T>,
    disconnected: bool,
}

/// The shared part of one channel.
pub(crate) struct Chan<T> {
    state: SpinLock<State<T>>,
    /// `None`: unbounded. `Some(0)`: rendezvous.
    cap: Option<usize>,
    /// Live `Sender`s; the last one to go disconnects the channel.
    pub(crate) senders: AtomicUsize,
    /// Live `Receiver`s; the last one to go disconnects the channel.
    pub(crate) receivers: AtomicUsize,
}

// SAFETY: the raw pointers in the wait queues point at nodes and waiters on
// blocked tasks' stacks; they are only dereferenced under the lock or by the
// unique claimer, as `waiter.rs` documents, and the values moving through
// them are `T: Send`. Everything else is behind the lock or atomic.
unsafe impl<T: Send> Send for Chan<T> {}
// SAFETY: as above; all shared access goes through the lock or atomics.
unsafe impl<T: Send> Sync for Chan<T> {}

/// What an attempt to send found.
pub(crate) enum SendAttempt<T> {
    /// Handed to a waiting receiver, which must be finished after unlocking.
    Handed(Claimed<T>),
    /// Stored in the buffer.
    Buffered,
    /// No room and no receiver: the value comes back.
    Full(T),
    /// Every receiver is gone: the value comes back.
    Disconnected(T),
}

/// What an attempt to receive found.
pub(crate) enum RecvAttempt<T> {
    /// A value; plus a sender to finish after unlocking, if one was served.
    Value(T, Option<Claimed<T>>),
    /// Nothing now.
    Empty,
    /// Nothing now or ever.
    Disconnected,
}

impl<T> State<T> {
    /// Tries to send `v` now.
    ///
    /// Called only by an operation with no node of its own queued anywhere
    /// (a `select!` tries its arms before registering), so whatever node it
    /// claims belongs to someone else.
    pub(crate) fn try_send(&mut self, v: T, cap: Option<usize>) -> SendAttempt<T> {
        if self.disconnected {
            return SendAttempt::Disconnected(v);
        }
        if let Some(mut c) = self.receivers.claim() {
            *c.slot() = Some(v);
            return SendAttempt::Handed(c);
        }
        if cap.is_none_or(|cap| self.buf.len() < cap) {
            self.buf.push_back(v);
            return SendAttempt::Buffered;
        }
        SendAttempt::Full(v)
    }

    /// Tries to receive now (same caveat as [`try_send`](Self::try_send)).
    pub(crate) fn try_recv(&mut self) -> RecvAttempt<T> {
        if let Some(v) = self.buf.pop_front() {
            // A slot freed up: move the oldest waiting sender's value in.
            let served = self.senders.claim().map(|mut c| {
                let w = c.slot().take().expect("a waiting sender holds its value");
                self.buf.push_back(w);
                c
            });
            return RecvAttempt::Value(v, served);
        }
        if let Some(mut c) = self.senders.claim() {
            let v = c.slot().take().expect("a waiting sender holds its value");
            return RecvAttempt::Value(v, Some(c));
        }
        if self.disconnected {
            return RecvAttempt::Disconnected;
        }
        RecvAttempt::Empty
    }

    /// Whether a send could complete now (a hint for `select!`
    /// registration; `me`'s own nodes do not count, so a select never pairs
    /// with itself).
    pub(crate) fn send_ready(&self, cap: Option<usize>, me: *const Waiter) -> bool {
        self.disconnected
            || self.receivers.has_waiting(me)
            || cap.is_none_or(|cap| self.buf.len() < cap)
    }

    /// Whether a receive could complete now (as [`send_ready`](Self::send_ready)).
    pub(crate) fn recv_ready(&self, me: *const Waiter) -> bool {
        !self.buf.is_empty() || self.senders.has_waiting(me) || self.disconnected
    }

    /// Queues a blocked send (the node's slot holds the value) as operation
    /// `arm` of `waiter`.
    ///
    /// # Safety
    /// As [`WaitQueue::push`]: `node` and `waiter` stay in place until the
    /// node is claimed and `DONE` observed, or unregistered.
    pub(crate) unsafe fn register_sender(&mut self, node: &Node<T>, waiter: &Waiter, arm: usize) {
        // SAFETY: forwarded to the caller; `&mut self` is the lock.
        unsafe { self.senders.push(node, waiter, arm) }
    }

    /// Queues a blocked receive (the node's slot is empty).
    ///
    /// # Safety
    /// As [`register_sender`](Self::register_sender).
    pub(crate) unsafe fn register_receiver(&mut self, node: &Node<T>, waiter: &Waiter, arm: usize) {
        // SAFETY: forwarded to the caller; `&mut self` is the lock.
        unsafe { self.receivers.push(node, waiter, arm) }
    }

    /// Unlinks a blocked send's node, if still queued.
    pub(crate) fn unregister_sender(&mut self, node: &Node<T>) {
        self.senders.remove(node);
    }

    /// Unlinks a blocked receive's node, if still queued.
    pub(crate) fn unregister_receiver(&mut self, node: &Node<T>) {
        self.receivers.remove(node);
    }
}

impl<T> Chan<T> {
    /// A channel with one sender and one receiver counted.
    pub(crate) fn new(cap: Option<usize>) -> Chan<T> {
        // Preallocate a bounded buffer, within reason; it grows if needed.
        let prealloc = cap.map_or(0, |c| c.min(1024));
        Chan {
            state: SpinLock::new(State {
                buf: VecDeque::with_capacity(prealloc),
                senders: WaitQueue::new(),
                receivers: WaitQueue::new(),
                disconnected: false,
            }),
            cap,
            senders: AtomicUsize::new(1),
            receivers: AtomicUsize::new(1),
        }
    }

    /// Locks the state.
    pub(crate) fn lock(&self) -> SpinGuard<'_, State<T>> {
        self.state.lock()
    }

    /// The capacity: `None` for unbounded.
    pub(crate) fn cap(&self) -> Option<usize> {
        self.cap
    }

    /// Values buffered now.
    pub(crate) fn len(&self) -> usize {
        self.lock().buf.len()
    }

    /// Whether the channel is disconnected.
    pub(crate) fn is_disconnected(&self) -> bool {
        self.lock().disconnected
    }

    /// Sends `v`, blocking while the channel is full (until `deadline`, if
    /// given). `Err((v, timed_out))` gives the value back.
    pub(crate) fn send(&self, v: T, deadline: Option<Instant>) -> Result<(), (T, bool)> {
        let mut st = self.lock();
        let v = match st.try_send(v, self.cap) {
            SendAttempt::Handed(c) => {
                drop(st);
                c.finish();
                return Ok(());
            }
            SendAttempt::Buffered => return Ok(()),
            SendAttempt::Disconnected(v) => return Err((v, false)),
            SendAttempt::Full(v) => v,
        };
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err((v, true));
        }
        let waiter = Waiter::new().named(WaitOn::ChanSend);
        let mut node = Node::new(Some(v));
        // SAFETY: `waiter` and `node` live in this frame and are not moved;
        // we return only after `wait` saw DONE (the claimer unlinked the
        // node) or after unregistering the node below.
        unsafe { st.register_sender(&node, &waiter, 0) };
        drop(st);
        match waiter.wait(deadline) {
            // Claimed: the value was taken (slot empty), or the channel
            // disconnected and left it in the slot.
            Outcome::Done(_) => match node.take() {
                None => Ok(()),
                Some(v) => Err((v, false)),
            },
            Outcome::Aborted => {
                self.lock().unregister_sender(&node);
                Err((node.take().expect("an aborted send keeps its value"), true))
            }
        }
    }

    /// Receives, blocking while the channel is empty (until `deadline`, if
    /// given). `Err(timed_out)` says why nothing came.
    pub(crate) fn recv(&self, deadline: Option<Instant>) -> Result<T, bool> {
        let mut st = self.lock();
        match st.try_recv() {
            RecvAttempt::Value(v, served) => {
                drop(st);
                if let Some(c) = served {
                    c.finish();
                }
                return Ok(v);
            }
            RecvAttempt::Disconnected => return Err(false),
            RecvAttempt::Empty => {}
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(true);
        }
        let waiter = Waiter::new().named(WaitOn::ChanRecv);
        let mut node = Node::new(None);
        // SAFETY: as in `send`: this frame outlives the node's registration.
        unsafe { st.register_receiver(&node, &waiter, 0) };
        drop(st);
        match waiter.wait(deadline) {
            // Claimed: a sender filled the slot, or the channel disconnected.
            Outcome::Done(_) => node.take().ok_or(false),
            Outcome::Aborted => {
                self.lock().unregister_receiver(&node);
                Err(true)
            }
        }
    }

    /// Tries to send without blocking.
    pub(crate) fn try_send(&self, v: T) -> SendAttempt<T> {
        let mut st = self.lock();
        match st.try_send(v, self.cap) {
            SendAttempt::Handed(c) => {
                drop(st);
                c.finish();
                SendAttempt::Buffered
            }
            other => other,
        }
    }

    /// Tries to receive without blocking.
    pub(crate) fn try_recv(&self) -> RecvAttempt<T> {
        let mut st = self.lock();
        match st.try_recv() {
            RecvAttempt::Value(v, served) => {
                drop(st);
                if let Some(c) = served {
                    c.finish();
                }
                RecvAttempt::Value(v, None)
            }
            other => other,
        }
    }

    /// Disconnects the channel (last sender or last receiver gone) and
    /// completes every blocked operation. `discard`: also drop the buffered
    /// values (no receiver is left to take them).
    pub(crate) fn disconnect(&self, discard: bool) {
        let mut st = self.lock();
        st.disconnected = true;
        let senders = st.senders.claim_all();
        let receivers = st.receivers.claim_all();
        let dropped = if discard {
            std::mem::take(&mut st.buf)
        } else {
            VecDeque::new()
        };
        drop(st);
        // Values untouched: senders keep theirs, receivers get none.
        for c in senders.into_iter().chain(receivers) {
            c.finish();
        }
        // User destructors run outside the lock.
        drop(dropped);
    }
}

impl<T> Drop for Chan<T> {
    fn drop(&mut self) {
        // Both sides are gone, so no operation is blocked: the queues are
        // empty. The remaining values drop with the buffer.
        let st = self.state.lock();
        debug_assert!(st.senders.is_empty() && st.receivers.is_empty());
    }
}
