//! The channel itself, shared by its senders and receivers: one design for
//! all three flavours (rendezvous, bounded, unbounded), and for the timer
//! channels.
//!
//! # State
//!
//! Under one [`SpinLock`]: the buffer of values (no longer than the
//! capacity, except for a value given back, below; always empty for a
//! rendezvous channel otherwise), the queue of blocked senders (each node's
//! slot holds the value it wants to send), the queue of blocked receivers
//! (each node's slot is empty, waiting for a value), the queue of `Select`
//! send *probes* (nodes without a value, waiting to hear that a send could
//! complete), the count of buffer slots `reserved` for selected `Select`
//! sends, a timer channel's [`Clock`], and the `disconnected` flag.
//!
//! Invariants, while the lock is free: if receivers are waiting (undecided)
//! the buffer is empty; if senders are waiting the buffer (with its
//! reserved slots) is full. So a send first looks for a waiting receiver
//! and hands its value **directly into that receiver's slot**, then tries
//! the buffer; a receive takes from the buffer (refilling it from the
//! oldest waiting sender, so values keep their order), or straight from a
//! waiting sender's slot.
//!
//! # Completing a peer
//!
//! A peer found in a queue is claimed with one CAS under the lock (see
//! `waiter.rs`); the value moves under the lock (so buffer order and
//! disconnection stay consistent), and the wake-up happens after the lock is
//! released. Operations therefore return a [`Claimed`] that the caller must
//! `finish` once it dropped the guard.
//!
//! # `Select` sends: probes and reservations
//!
//! A `Select` send arm has no value until its selection is completed
//! (`select_dyn.rs`). Selecting it *reserves* the send
//! ([`Reservation`]): a waiting receiver, claimed, or a buffer slot, counted
//! in `reserved` so other senders see it taken. While such an arm waits, it
//! queues a probe. Whoever makes a send possible tells the oldest probe:
//! a receiver that starts waiting ([`State::register_receiver`]), and a
//! receive that frees a slot no waiting sender takes (`refill`). Probes
//! come after real senders: a freed slot goes to a waiting sender first.
//!
//! # Values given back
//!
//! A receive can be handed a value and then not return it: a dropped
//! `recv_async` future, a `Select` receive never completed.
//! [`Chan::give_back`] returns the value to a waiting receiver, or else to
//! the *front* of the buffer: it was the oldest value (a value is handed to
//! a waiting receiver only while the buffer is empty). That can take the
//! buffer one past its capacity for a while (a rendezvous channel then holds
//! a value); sends see it full, and a receive that takes it refills only
//! what the capacity allows. (Two values given back at once may come back
//! in either order.)
//!
//! # Timer channels
//!
//! A timer channel has a [`Clock`] and no sender: a receive that finds the
//! buffer empty asks the clock for a message due now. A receiver that has
//! to wait also wakes at the clock's next deadline, since no sender will
//! wake it, and looks again (`recv_clocked`, and the arms of a select).
//!
//! # Disconnection
//!
//! When the last sender or the last receiver goes, `disconnected` is set and
//! every blocked operation is completed *without* moving a value: a receiver
//! finds its slot empty (`RecvError`), a sender finds its value still in its
//! slot (`SendError`), a probe's `Select` looks again and finds the channel
//! disconnected. When the last receiver goes, the buffered values are
//! dropped too (outside the lock): nobody can receive them any more.

use crate::runtime::task::cancel;
use crate::runtime::task::wait::WaitOn;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::clock::Clock;
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
    /// Send operations of a [`Select`](super::Select) waiting to be told
    /// that a send could complete now (room in the buffer, or a receiver
    /// waiting). Their nodes hold no value: the value comes only once the
    /// operation is selected (`select_dyn.rs`).
    probes: WaitQueue<T>,
    /// Buffer slots promised to selected `Select` sends that have not
    /// handed over their value yet: counted as taken.
    reserved: usize,
    /// Where a timer channel's messages come from (`clock.rs`).
    clock: Option<Clock<T>>,
    disconnected: bool,
}

/// The shared part of one channel.
pub(crate) struct Chan<T> {
    state: SpinLock<State<T>>,
    /// `None`: unbounded. `Some(0)`: rendezvous.
    cap: Option<usize>,
    /// Live `Sender`s; the last one to go disconnects the channel. Starts at
    /// one; a timer channel has no `Sender`, so it never disconnects.
    pub(crate) senders: AtomicUsize,
    /// Live `Receiver`s; the last one to go disconnects the channel.
    pub(crate) receivers: AtomicUsize,
}

// SAFETY: the raw pointers in the wait queues point at nodes and waiters on
// blocked tasks' stacks (or in pending futures' heap blocks); they are only
// dereferenced under the lock or by the unique claimer, as `waiter.rs`
// documents, and the values moving through them are `T: Send`. Everything
// else is behind the lock or atomic.
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
    /// A value; plus a peer to finish after unlocking, if one was served (a
    /// sender whose value moved into the buffer, or a `Select` send told
    /// that there is room).
    Value(T, Option<Claimed<T>>),
    /// Nothing now.
    Empty,
    /// Nothing now or ever.
    Disconnected,
}

/// What a selected [`Select`](super::Select) send holds until its value
/// comes: the right to complete without waiting.
pub(crate) enum Reservation<T> {
    /// Every receiver is gone: the send will fail, handing its value back.
    Disconnected,
    /// A waiting receiver, claimed (it waits, `CLAIMED`, for the value).
    Receiver(Claimed<T>),
    /// A buffer slot, counted in `State::reserved`.
    Slot,
}

/// The earlier of two optional deadlines (`None` is "never").
#[inline]
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

impl<T> State<T> {
    /// Whether the buffer has room for one more value, counting the slots
    /// promised to selected `Select` sends.
    #[inline]
    fn has_room(&self, cap: Option<usize>) -> bool {
        cap.is_none_or(|cap| self.buf.len() + self.reserved < cap)
    }

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
        if self.has_room(cap) {
            self.buf.push_back(v);
            return SendAttempt::Buffered;
        }
        SendAttempt::Full(v)
    }

    /// Tries to receive now (same caveat as [`try_send`](Self::try_send)).
    #[inline(always)]
    pub(crate) fn try_recv(&mut self, cap: Option<usize>) -> RecvAttempt<T> {
        if let Some(v) = self.buf.pop_front() {
            // A slot freed up (unless a value given back had taken the
            // buffer past its capacity).
            let served = if self.has_room(cap) {
                self.refill()
            } else {
                None
            };
            return RecvAttempt::Value(v, served);
        }
        if let Some(mut c) = self.senders.claim() {
            let v = c.slot().take().expect("a waiting sender holds its value");
            return RecvAttempt::Value(v, Some(c));
        }
        if let Some(clock) = &mut self.clock {
            if let Some(v) = clock.take(Instant::now()) {
                return RecvAttempt::Value(v, None);
            }
        }
        if self.disconnected {
            return RecvAttempt::Disconnected;
        }
        RecvAttempt::Empty
    }

    /// The buffer has room for one value: moves the oldest waiting sender's
    /// value in (values keep their order), or else tells a waiting
    /// `Select` send. The peer returned must be finished after unlocking.
    fn refill(&mut self) -> Option<Claimed<T>> {
        if let Some(mut c) = self.senders.claim() {
            let w = c.slot().take().expect("a waiting sender holds its value");
            self.buf.push_back(w);
            return Some(c);
        }
        self.probes.claim()
    }

    /// Whether a send could complete now (a hint for `select!`
    /// registration; `me`'s own nodes do not count, so a select never pairs
    /// with itself).
    pub(crate) fn send_ready(&self, cap: Option<usize>, me: *const Waiter) -> bool {
        self.disconnected || self.receivers.has_waiting(me) || self.has_room(cap)
    }

    /// Whether a receive could complete now (as [`send_ready`](Self::send_ready)).
    pub(crate) fn recv_ready(&self, me: *const Waiter) -> bool {
        !self.buf.is_empty()
            || self.senders.has_waiting(me)
            || self.disconnected
            || self
                .clock
                .as_ref()
                .is_some_and(|c| c.is_due(Instant::now()))
    }

    /// When a timer channel's next message is due: a receiver that waits
    /// must look again then, since no sender will wake it.
    pub(crate) fn clock_deadline(&self) -> Option<Instant> {
        self.clock.as_ref().and_then(Clock::deadline)
    }

    /// Whether this is a timer channel (its messages come from a clock).
    pub(crate) fn has_clock(&self) -> bool {
        self.clock.is_some()
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

    /// Queues a blocked receive (the node's slot is empty). A waiting
    /// receiver is what a `Select` send waits for, so one of those (not
    /// `waiter`'s own) is claimed and returned, to be finished after
    /// unlocking: it comes to reserve this receiver.
    ///
    /// # Safety
    /// As [`register_sender`](Self::register_sender).
    #[must_use = "a claimed Select send stays blocked until finished"]
    pub(crate) unsafe fn register_receiver(
        &mut self,
        node: &Node<T>,
        waiter: &Waiter,
        arm: usize,
    ) -> Option<Claimed<T>> {
        // SAFETY: forwarded to the caller; `&mut self` is the lock.
        unsafe { self.receivers.push(node, waiter, arm) };
        if self.probes.is_empty() {
            None
        } else {
            self.probes.claim_other(waiter)
        }
    }

    /// Queues a `Select` send that waits for a send to become possible (the
    /// node's slot is empty and stays so).
    ///
    /// # Safety
    /// As [`register_sender`](Self::register_sender).
    pub(crate) unsafe fn register_probe(&mut self, node: &Node<T>, waiter: &Waiter, arm: usize) {
        // SAFETY: forwarded to the caller; `&mut self` is the lock.
        unsafe { self.probes.push(node, waiter, arm) }
    }

    /// Unlinks a blocked send's node, if still queued.
    pub(crate) fn unregister_sender(&mut self, node: &Node<T>) {
        self.senders.remove(node);
    }

    /// Unlinks a blocked receive's node, if still queued.
    pub(crate) fn unregister_receiver(&mut self, node: &Node<T>) {
        self.receivers.remove(node);
    }

    /// Unlinks a `Select` send's probe node, if still queued.
    pub(crate) fn unregister_probe(&mut self, node: &Node<T>) {
        self.probes.remove(node);
    }

    /// Reserves the completion of a send for a `Select` whose nodes are all
    /// unregistered: a claimed waiting receiver, or a buffer slot. `None`
    /// when a send would have to wait.
    pub(crate) fn reserve_send(&mut self, cap: Option<usize>) -> Option<Reservation<T>> {
        if self.disconnected {
            return Some(Reservation::Disconnected);
        }
        if let Some(c) = self.receivers.claim() {
            return Some(Reservation::Receiver(c));
        }
        if self.has_room(cap) {
            self.reserved += 1;
            return Some(Reservation::Slot);
        }
        None
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
                probes: WaitQueue::new(),
                reserved: 0,
                clock: None,
                disconnected: false,
            }),
            cap,
            senders: AtomicUsize::new(1),
            receivers: AtomicUsize::new(1),
        }
    }

    /// A channel no `Sender` will ever be made for (the sender count stays
    /// at one, so it never disconnects), whose messages come from `clock`
    /// (none at all without one).
    pub(crate) fn new_timer(cap: Option<usize>, clock: Option<Clock<T>>) -> Arc<Chan<T>> {
        let chan = Chan::new(cap);
        chan.lock().clock = clock;
        Arc::new(chan)
    }

    /// Locks the state.
    pub(crate) fn lock(&self) -> SpinGuard<'_, State<T>> {
        self.state.lock()
    }

    /// The capacity: `None` for unbounded.
    pub(crate) fn cap(&self) -> Option<usize> {
        self.cap
    }

    /// Values ready to receive now: buffered, or a timer channel's due
    /// message.
    pub(crate) fn len(&self) -> usize {
        let st = self.lock();
        let due = st.clock.as_ref().is_some_and(|c| c.is_due(Instant::now()));
        st.buf.len() + usize::from(due)
    }

    /// Whether the channel is disconnected.
    pub(crate) fn is_disconnected(&self) -> bool {
        self.lock().disconnected
    }

    /// Sends `v`, blocking while the channel is full (until `deadline`, if
    /// given). `Err((v, timed_out))` gives the value back.
    pub(crate) fn send(&self, mut v: T, deadline: Option<Instant>) -> Result<(), (T, bool)> {
        loop {
            let mut st = self.lock();
            v = match st.try_send(v, self.cap) {
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
            // SAFETY: `waiter` and `node` live in this frame and are not
            // moved; we leave it only after `wait` saw DONE or RETRY (the
            // claimer unlinked the node) or after unregistering the node
            // below.
            unsafe { st.register_sender(&node, &waiter, 0) };
            drop(st);
            match waiter.wait_cancellable(deadline) {
                // Claimed: the value was taken (slot empty), or the channel
                // disconnected and left it in the slot.
                Outcome::Done(_) => {
                    return match node.take() {
                        None => Ok(()),
                        Some(v) => Err((v, false)),
                    }
                }
                Outcome::Aborted => {
                    self.lock().unregister_sender(&node);
                    let v = node.take().expect("an aborted send keeps its value");
                    // Unlinked: a cancelled task unwinds here (the value
                    // is dropped on the way).
                    cancel::checkpoint();
                    return Err((v, true));
                }
                // Released untouched (no peer does this to a send today):
                // start over with the value.
                Outcome::Retry => v = node.take().expect("a released send keeps its value"),
            }
        }
    }

    /// Receives, blocking while the channel is empty (until `deadline`, if
    /// given). `Err(timed_out)` says why nothing came.
    pub(crate) fn recv(&self, deadline: Option<Instant>) -> Result<T, bool> {
        loop {
            let mut st = self.lock();
            match st.try_recv(self.cap) {
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
            if st.has_clock() {
                return self.recv_clocked(st, deadline);
            }
            let waiter = Waiter::new().named(WaitOn::ChanRecv);
            let mut node = Node::new(None);
            // SAFETY: as in `send`: this frame outlives the node's
            // registration.
            let probe = unsafe { st.register_receiver(&node, &waiter, 0) };
            drop(st);
            if let Some(p) = probe {
                p.finish();
            }
            match waiter.wait_cancellable(deadline) {
                // Claimed: a sender filled the slot, or the channel
                // disconnected.
                Outcome::Done(_) => return node.take().ok_or(false),
                Outcome::Aborted => {
                    self.lock().unregister_receiver(&node);
                    // Unlinked: a cancelled task unwinds here.
                    cancel::checkpoint();
                    return Err(true);
                }
                // A `Select` send reserved us, then gave up: start over.
                Outcome::Retry => {}
            }
        }
    }

    /// [`recv`](Self::recv) on a timer channel, which found nothing to
    /// receive (`st` still locked). No sender will wake a waiting receiver:
    /// it wakes when the next message is due, and looks again (another
    /// receiver may have taken it).
    #[cold]
    #[inline(never)]
    fn recv_clocked<'a>(
        &'a self,
        mut st: SpinGuard<'a, State<T>>,
        deadline: Option<Instant>,
    ) -> Result<T, bool> {
        loop {
            let waiter = Waiter::new().named(WaitOn::ChanRecv);
            let mut node = Node::new(None);
            let wake_at = earliest(deadline, st.clock_deadline());
            // SAFETY: as in `send`: this frame outlives the node's
            // registration.
            let probe = unsafe { st.register_receiver(&node, &waiter, 0) };
            drop(st);
            if let Some(p) = probe {
                p.finish();
            }
            match waiter.wait_cancellable(wake_at) {
                Outcome::Done(_) => return node.take().ok_or(false),
                Outcome::Aborted => {
                    self.lock().unregister_receiver(&node);
                    // Unlinked: a cancelled task unwinds here.
                    cancel::checkpoint();
                }
                Outcome::Retry => {}
            }
            st = self.lock();
            match st.try_recv(self.cap) {
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
        match st.try_recv(self.cap) {
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

    /// Puts back a value a receive was handed but will not return (a
    /// dropped `recv_async` future, a `Select` receive never completed): to
    /// a waiting receiver if there is one, else at the front of the buffer.
    /// It was the oldest value there: a value is handed to a waiting
    /// receiver only while the buffer is empty. The buffer may go one past
    /// its capacity until a receive takes it.
    pub(crate) fn give_back(&self, v: T) {
        let mut st = self.lock();
        if let Some(mut c) = st.receivers.claim() {
            *c.slot() = Some(v);
            drop(st);
            c.finish();
            return;
        }
        if st.disconnected && self.receivers.load(Ordering::Acquire) == 0 {
            // Nobody can receive it any more (not reachable while the caller
            // holds a Receiver; kept for safety): drop it outside the lock.
            drop(st);
            drop(v);
            return;
        }
        st.buf.push_front(v);
    }

    /// Completes a selected `Select` send with its value. `Err` gives the
    /// value back: every receiver is gone.
    pub(crate) fn send_reserved(&self, r: Reservation<T>, v: T) -> Result<(), T> {
        match r {
            Reservation::Disconnected => Err(v),
            Reservation::Receiver(mut c) => {
                // The receiver waits for us (CLAIMED); it cannot have left.
                *c.slot() = Some(v);
                c.finish();
                Ok(())
            }
            Reservation::Slot => {
                let mut st = self.lock();
                st.reserved -= 1;
                match st.try_send(v, self.cap) {
                    SendAttempt::Handed(c) => {
                        drop(st);
                        c.finish();
                        Ok(())
                    }
                    SendAttempt::Buffered => Ok(()),
                    SendAttempt::Disconnected(v) => Err(v),
                    // Only a value given back can have taken our slot: the
                    // slot was promised, so the buffer stretches.
                    SendAttempt::Full(v) => {
                        st.buf.push_back(v);
                        Ok(())
                    }
                }
            }
        }
    }

    /// Gives up a selected `Select` send that will not be completed: a
    /// claimed receiver starts its receive over; a reserved slot is freed
    /// (and offered to a waiting sender).
    pub(crate) fn cancel_reservation(&self, r: Reservation<T>) {
        match r {
            Reservation::Disconnected => {}
            Reservation::Receiver(c) => c.release(),
            Reservation::Slot => {
                let mut st = self.lock();
                st.reserved -= 1;
                let served = if st.has_room(self.cap) {
                    st.refill()
                } else {
                    None
                };
                drop(st);
                if let Some(c) = served {
                    c.finish();
                }
            }
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
        let probes = st.probes.claim_all();
        let dropped = if discard {
            std::mem::take(&mut st.buf)
        } else {
            VecDeque::new()
        };
        drop(st);
        // Values untouched: senders keep theirs, receivers get none, and a
        // `Select` send finds the channel disconnected when it looks again.
        for c in senders.into_iter().chain(receivers).chain(probes) {
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
        debug_assert!(st.senders.is_empty() && st.receivers.is_empty() && st.probes.is_empty());
        debug_assert_eq!(st.reserved, 0);
    }
}
