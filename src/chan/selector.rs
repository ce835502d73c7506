//! The selection algorithm behind [`select!`](crate::select) and
//! [`Select`](super::Select): waiting on several channel operations at once
//! and completing exactly one.
//!
//! # Algorithm
//!
//! 1. Shuffle the arms (fairness: when several are ready, each is equally
//!    likely to win).
//! 2. Try each arm without blocking, in that order. The first that completes
//!    wins. (A receive on a disconnected channel, or a send to one,
//!    completes at once with its error, as a plain `recv`/`send` would.)
//! 3. Put one [`Waiter`] on the stack and register a node for it on every
//!    arm's channel, in the same order. If registering finds an arm ready
//!    after all (a value arrived since step 2), stop registering and try to
//!    abort the waiter (`WAITING -> ABORTED`): on success, unregister
//!    everywhere and start over at step 1; if the abort fails, a peer has
//!    already claimed the waiter, so go on to step 5.
//! 4. With a `default` arm (or a deadline that passed), abort the waiter
//!    now: on success nothing was ready at the moment the select was
//!    registered everywhere, so it reports `None`; if the abort fails, a peer
//!    completed an arm meanwhile, and that arm wins. So a non-blocking select
//!    cannot report "nothing ready" while some arm was ready all along, even
//!    if values move between its channels while it looks at them one by one
//!    (Go's `TestNonblockSelectRace`).
//! 5. Park until a peer completes one arm (`DONE + arm`), or the deadline
//!    passes and the waiter aborts itself. A timer channel's arm gives the
//!    deadline of its next message when it registers (no peer announces
//!    it): the park ends at the earliest of those too, and the select
//!    starts over at step 1, where that arm now completes. A cancelled task
//!    (`runtime/task/cancel.rs`) gives up the same way, and unwinds after step 6,
//!    with nothing of the select linked anywhere.
//! 6. Unregister from every channel the waiter was registered on (each under
//!    its lock), then report the arm. A `Select` send arm was only told that
//!    a send could complete (its probe was claimed, see `channel.rs`): now
//!    it reserves the send, or, if another sender got there first, the
//!    select starts over. A waiter released with `RETRY` (a receive arm
//!    reserved by a `Select` send that was then given up) starts over too.
//!
//! Peers claim the waiter with one CAS (see `waiter.rs`), so however many
//! channels fire at once, exactly one arm completes. A claimed waiter never
//! goes back to `WAITING`, which is what makes the "abort and retry" of
//! steps 3 and 4 safe: a peer that lost the CAS simply serves someone else.
//! (`RETRY` does not reopen the waiter: the select leaves it and starts
//! over with a fresh one.)
//!
//! One selection never pairs with itself (a send and a receive arm on the
//! same channel): it claims peers only in step 2, when none of its own nodes
//! is queued anywhere, and in step 6 after unregistering them all; in step
//! 3 its own nodes do not count as a ready peer, and a receive arm that
//! registers tells only other selections' probes.
//!
//! # No allocation
//!
//! For `select!`, the arms, their value slots and the waiter all live in the
//! caller's frame; the channels' queues point at them only between
//! registration and unregistration, and this function does not return in
//! between. A `Select` keeps its arms in boxes made when they are added,
//! and reuses them for every selection.

use std::time::{Duration, Instant};

use super::channel::{earliest, RecvAttempt, SendAttempt};
use super::error::{RecvError, SendError};
use super::receiver::Receiver;
use super::rng;
use super::sender::Sender;
use super::waiter::{Node, Outcome, Waiter};

/// What registering an arm found.
pub(crate) enum Registration {
    /// The operation looks ready now: nothing was registered.
    Ready,
    /// Registered; look again at this instant if nothing happens before (a
    /// timer channel's next message, which no peer will announce).
    Waiting(Option<Instant>),
}

/// One operation of a `select!` (or of a [`Select`](super::Select)), as the
/// algorithm sees it.
///
/// While an arm is registered, peers on other threads reach its node through
/// raw pointers, so the methods that run then (`register`, `unregister`)
/// take `&self`: no `&mut` to the node exists while it may be shared.
pub(crate) trait SelectArm {
    /// Tries to complete the operation now, without blocking. Called with no
    /// node of this select registered anywhere.
    fn try_complete(&mut self) -> bool;

    /// Registers `waiter` as arm `arm` on the operation's channel, unless the
    /// operation looks ready now (then registers nothing).
    ///
    /// # Safety
    /// The caller keeps `self` and `waiter` in place, and calls
    /// [`unregister`](Self::unregister) before either goes away or moves
    /// (see `waiter.rs`); [`select`] does.
    unsafe fn register(&self, waiter: &Waiter, arm: usize) -> Registration;

    /// Unlinks the arm's node from the operation's channel, if still queued.
    fn unregister(&self);

    /// A peer completed this arm (every node is unregistered now): turn the
    /// slot into the arm's result. `false` if the arm is not complete after
    /// all (a `Select` send was told a send could complete, and found the
    /// chance gone): the select starts over.
    fn completed(&mut self) -> bool;
}

/// The arms of one selection, by index.
pub(crate) trait Arms {
    /// Arm `i`.
    fn arm(&mut self, i: usize) -> &mut dyn SelectArm;
}

impl Arms for [ArmRef<'_>] {
    fn arm(&mut self, i: usize) -> &mut dyn SelectArm {
        &mut *self[i].0
    }
}

/// A borrowed arm, as passed to [`select`]. Made by `RecvArm::arm` and
/// `SendArm::arm`; used by the `select!` expansion only.
#[doc(hidden)]
pub struct ArmRef<'a>(&'a mut dyn SelectArm);

/// When a `select!` gives up. Used by the `select!` expansion only.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// Wait until an arm completes.
    Block,
    /// Do not wait (`default => ...`).
    Now,
    /// Wait until the deadline (`default(timeout) => ...`).
    Deadline(Instant),
}

impl Mode {
    /// Waits at most `timeout` from now.
    pub fn timeout(timeout: Duration) -> Mode {
        match Instant::now().checked_add(timeout) {
            Some(d) => Mode::Deadline(d),
            None => Mode::Block,
        }
    }

    fn deadline(self) -> Option<Instant> {
        match self {
            Mode::Deadline(d) => Some(d),
            _ => None,
        }
    }
}

/// A `recv` arm: receives from a [`Receiver`]. Used by the `select!`
/// expansion only.
#[doc(hidden)]
pub struct RecvArm<'a, T> {
    rx: &'a Receiver<T>,
    /// Queued while registered; a sender puts the value in its slot.
    node: Node<T>,
    result: Option<Result<T, RecvError>>,
}

impl<'a, T> RecvArm<'a, T> {
    /// An arm receiving from `rx`.
    pub fn new(rx: &'a Receiver<T>) -> RecvArm<'a, T> {
        RecvArm {
            rx,
            node: Node::new(None),
            result: None,
        }
    }

    /// The arm, for [`select`].
    pub fn arm(&mut self) -> ArmRef<'_> {
        ArmRef(self)
    }

    /// The result once this arm was selected.
    ///
    /// # Panics
    /// If the arm was not selected.
    #[track_caller]
    pub fn into_result(self) -> Result<T, RecvError> {
        self.result.expect("gofer::select!: arm was not selected")
    }

    /// The receiver, for a [`Select`](super::Select) that reuses this arm.
    pub(crate) fn receiver(&self) -> &'a Receiver<T> {
        self.rx
    }

    /// The result slot, for a [`Select`](super::Select): filled when the
    /// arm is selected, emptied when the selection is completed.
    pub(crate) fn result_mut(&mut self) -> &mut Option<Result<T, RecvError>> {
        &mut self.result
    }
}

impl<T> SelectArm for RecvArm<'_, T> {
    fn try_complete(&mut self) -> bool {
        match self.rx.chan.try_recv() {
            RecvAttempt::Value(v, _) => self.result = Some(Ok(v)),
            RecvAttempt::Disconnected => self.result = Some(Err(RecvError)),
            RecvAttempt::Empty => return false,
        }
        true
    }

    /// # Safety
    /// The contract of [`SelectArm::register`].
    unsafe fn register(&self, waiter: &Waiter, arm: usize) -> Registration {
        let mut st = self.rx.chan.lock();
        if st.recv_ready(waiter) {
            return Registration::Ready;
        }
        let wake_at = st.clock_deadline();
        // SAFETY: the caller keeps `self` (holding the node) and `waiter` in
        // place until it unregisters (this function's contract).
        let probe = unsafe { st.register_receiver(&self.node, waiter, arm) };
        drop(st);
        if let Some(p) = probe {
            p.finish();
        }
        Registration::Waiting(wake_at)
    }

    fn unregister(&self) {
        self.rx.chan.lock().unregister_receiver(&self.node);
    }

    fn completed(&mut self) -> bool {
        // A sender filled the slot, or the channel disconnected.
        self.result = Some(self.node.take().ok_or(RecvError));
        true
    }
}

/// A `send` arm: sends a value on a [`Sender`]. Used by the `select!`
/// expansion only.
#[doc(hidden)]
pub struct SendArm<'a, T> {
    tx: &'a Sender<T>,
    /// Its slot holds the value to send; queued while registered, when a
    /// receiver takes the value from it.
    node: Node<T>,
    result: Option<Result<(), SendError<T>>>,
}

impl<'a, T> SendArm<'a, T> {
    /// An arm sending `value` on `tx`.
    pub fn new(tx: &'a Sender<T>, value: T) -> SendArm<'a, T> {
        SendArm {
            tx,
            node: Node::new(Some(value)),
            result: None,
        }
    }

    /// The arm, for [`select`].
    pub fn arm(&mut self) -> ArmRef<'_> {
        ArmRef(self)
    }

    /// The result once this arm was selected.
    ///
    /// # Panics
    /// If the arm was not selected.
    #[track_caller]
    pub fn into_result(self) -> Result<(), SendError<T>> {
        self.result.expect("gofer::select!: arm was not selected")
    }
}

impl<T> SelectArm for SendArm<'_, T> {
    fn try_complete(&mut self) -> bool {
        let v = self
            .node
            .take()
            .expect("an unsent send arm holds its value");
        match self.tx.chan.try_send(v) {
            SendAttempt::Handed(_) | SendAttempt::Buffered => self.result = Some(Ok(())),
            SendAttempt::Disconnected(v) => self.result = Some(Err(SendError(v))),
            SendAttempt::Full(v) => {
                self.node.put(v);
                return false;
            }
        }
        true
    }

    /// # Safety
    /// The contract of [`SelectArm::register`].
    unsafe fn register(&self, waiter: &Waiter, arm: usize) -> Registration {
        let chan = &self.tx.chan;
        let mut st = chan.lock();
        if st.send_ready(chan.cap(), waiter) {
            return Registration::Ready;
        }
        // SAFETY: as for `RecvArm::register`.
        unsafe { st.register_sender(&self.node, waiter, arm) };
        Registration::Waiting(None)
    }

    fn unregister(&self) {
        self.tx.chan.lock().unregister_sender(&self.node);
    }

    fn completed(&mut self) -> bool {
        // A receiver took the value, or the channel disconnected and left it.
        self.result = Some(match self.node.take() {
            None => Ok(()),
            Some(v) => Err(SendError(v)),
        });
        true
    }
}

/// Completes exactly one of `arms` (see the module docs), or none when
/// `mode` gives up first. Returns the index of the completed arm; its
/// result is then in the arm (`into_result`). Used by the `select!`
/// expansion only.
#[doc(hidden)]
pub fn select<const N: usize>(mut arms: [ArmRef<'_>; N], mode: Mode) -> Option<usize> {
    if N == 0 {
        match mode {
            Mode::Now => {}
            Mode::Deadline(d) => crate::runtime::time::sleep::sleep_until(d),
            Mode::Block => loop {
                crate::runtime::task::park::park_on(
                    crate::runtime::task::wait::WaitOn::ChanSelect(0),
                );
            },
        }
        return None;
    }
    let mut order = [0usize; N];
    for (i, o) in order.iter_mut().enumerate() {
        *o = i;
    }
    select_arms(&mut arms[..], &mut order, mode)
}

/// The algorithm of the module docs over the arms whose indices are in
/// `order` (not empty; shuffled in place).
pub(crate) fn select_arms<A: Arms + ?Sized>(
    arms: &mut A,
    order: &mut [usize],
    mode: Mode,
) -> Option<usize> {
    debug_assert!(!order.is_empty());
    loop {
        rng::shuffle(order);
        for &i in order.iter() {
            if arms.arm(i).try_complete() {
                return Some(i);
            }
        }
        let waiter =
            Waiter::new().named(crate::runtime::task::wait::WaitOn::ChanSelect(order.len()));
        let mut registered = 0;
        let mut ready = false;
        let mut wake_at = mode.deadline();
        for &i in order.iter() {
            // SAFETY: the arms are borrowed for this whole call, so they stay
            // in place; `waiter` lives in this frame; every registered arm is
            // unregistered below, before the waiter goes out of scope or the
            // loop starts over.
            match unsafe { arms.arm(i).register(&waiter, i) } {
                Registration::Ready => {
                    ready = true;
                    break;
                }
                Registration::Waiting(at) => {
                    wake_at = earliest(wake_at, at);
                    registered += 1;
                }
            }
        }
        let give_up = match mode {
            Mode::Block => false,
            Mode::Now => true,
            Mode::Deadline(d) => Instant::now() >= d,
        };
        let outcome = if ready || give_up {
            if waiter.try_abort() {
                Outcome::Aborted
            } else {
                // A peer claimed us while we registered: it is finishing.
                waiter.wait(None)
            }
        } else {
            // Gives up as at a deadline if the task is cancelled; the unwind
            // waits until every arm is unregistered (below).
            waiter.wait_cancellable(wake_at)
        };
        // Unlink every remaining node before `waiter` (and the arms)
        // can go away; the completed arm's node was unlinked by its peer.
        for &i in &order[..registered] {
            arms.arm(i).unregister();
        }
        match outcome {
            Outcome::Done(i) => {
                if arms.arm(i).completed() {
                    return Some(i);
                }
                // A `Select` send lost the chance it was told of: again.
            }
            // A `Select` send reserved one of our receives, then gave up.
            Outcome::Retry => {}
            // An arm became ready while registering: try them all again.
            Outcome::Aborted if ready => {}
            Outcome::Aborted => match mode {
                // Cancelled (`runtime/task/cancel.rs`): nothing is linked any more.
                _ if crate::runtime::task::cancel::interrupted() => {
                    crate::runtime::task::cancel::unwind()
                }
                // Nothing was ready while we were registered everywhere (a
                // non-blocking select), or the deadline passed.
                Mode::Now => return None,
                Mode::Deadline(d) if Instant::now() >= d => return None,
                // A timer channel's message came due: try again.
                _ => {}
            },
        }
    }
}
