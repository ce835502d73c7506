//! [`Select`]: a selection over a number of operations known only at run
//! time, with crossbeam-channel's API. It runs the same algorithm as
//! [`select!`](crate::select) (`selector.rs`) over a vector of arms.
//!
//! # Selecting, then completing
//!
//! [`Select::select`] returns a [`SelectedOperation`], which the caller
//! completes with [`recv`](SelectedOperation::recv) or
//! [`send`](SelectedOperation::send). Completing never waits:
//!
//! - A receive is completed at selection: the value moved into the arm
//!   (exactly as for a `select!` arm), and `recv` hands it out.
//! - A send has no value until `send` is called, so selection *reserves*
//!   it (`Reservation` in `channel.rs`): a waiting receiver is claimed
//!   (it stays `CLAIMED`, waiting for the value), or a buffer slot is
//!   counted as taken, or the channel is found disconnected. `send` then
//!   moves the value into the claimed receiver or the slot.
//!
//! While a send arm waits, it cannot queue as a sender (it has no value for
//! a receiver to take). It queues a *probe* instead: a node without a value
//! in the channel's `probes` queue. A receiver that starts waiting, or one
//! that frees a buffer slot no waiting sender fills, claims the oldest
//! probe and completes it like any arm (`DONE + arm`); that only tells the
//! select that a send could complete now. The select, with all its nodes
//! unregistered, then tries to reserve the send (`SelectArm::completed`);
//! if another sender got there first, it starts over. Probes wait behind
//! the channel's real senders: a slot freed goes to a waiting sender first.
//!
//! A selected operation that is dropped without being completed is undone
//! before the drop panics, as crossbeam's does: a received value goes back
//! to the channel (`Chan::give_back`), a claimed receiver is released to
//! start its receive over (`RETRY`, see `waiter.rs`), a reserved slot is
//! freed. Nothing is lost and nobody is left waiting.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::channel::Reservation;
use super::error::{RecvError, SelectTimeoutError, SendError, TrySelectError};
use super::receiver::Receiver;
use super::selector::{select_arms, Arms, Mode, RecvArm, Registration, SelectArm};
use super::sender::Sender;
use super::waiter::{Node, Waiter};

/// Which operation an arm is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Recv,
    Send,
}

/// An arm of a [`Select`], whatever its value type.
trait DynArm {
    /// The arm, for the selection algorithm.
    fn as_arm(&mut self) -> &mut dyn SelectArm;
    /// The channel it operates on (its shared allocation), for the check
    /// that an operation is completed with a handle of the right channel.
    fn chan(&self) -> *const ();
    /// Receive or send.
    fn kind(&self) -> Kind;
    /// The arm's result slot: an `Option<Result<T, RecvError>>` for a
    /// receive, an `Option<Reservation<T>>` for a send.
    fn result(&mut self) -> *mut ();
    /// Undoes a selection that will not be completed.
    fn cancel(&mut self);
}

impl<T> DynArm for RecvArm<'_, T> {
    fn as_arm(&mut self) -> &mut dyn SelectArm {
        self
    }

    fn chan(&self) -> *const () {
        Arc::as_ptr(&self.receiver().chan).cast()
    }

    fn kind(&self) -> Kind {
        Kind::Recv
    }

    fn result(&mut self) -> *mut () {
        let r: *mut Option<Result<T, RecvError>> = self.result_mut();
        r.cast()
    }

    fn cancel(&mut self) {
        if let Some(Ok(v)) = self.result_mut().take() {
            self.receiver().chan.give_back(v);
        }
    }
}

/// A send arm of a [`Select`]: reserves a send (see the module docs).
struct SendSlot<'a, T> {
    tx: &'a Sender<T>,
    /// The probe queued while the select waits; its slot stays empty.
    node: Node<T>,
    /// The reservation, from selection until completion.
    reservation: Option<Reservation<T>>,
}

impl<T> SelectArm for SendSlot<'_, T> {
    fn try_complete(&mut self) -> bool {
        let chan = &self.tx.chan;
        let mut st = chan.lock();
        match st.reserve_send(chan.cap()) {
            Some(r) => {
                drop(st);
                self.reservation = Some(r);
                true
            }
            None => false,
        }
    }

    /// # Safety
    /// The contract of [`SelectArm::register`].
    unsafe fn register(&self, waiter: &Waiter, arm: usize) -> Registration {
        let chan = &self.tx.chan;
        let mut st = chan.lock();
        if st.send_ready(chan.cap(), waiter) {
            return Registration::Ready;
        }
        // SAFETY: the caller keeps `self` (holding the node) and `waiter` in
        // place until it unregisters (this function's contract).
        unsafe { st.register_probe(&self.node, waiter, arm) };
        Registration::Waiting(None)
    }

    fn unregister(&self) {
        self.tx.chan.lock().unregister_probe(&self.node);
    }

    fn completed(&mut self) -> bool {
        // Told that a send could complete: reserve it, if still possible.
        self.try_complete()
    }
}

impl<T> DynArm for SendSlot<'_, T> {
    fn as_arm(&mut self) -> &mut dyn SelectArm {
        self
    }

    fn chan(&self) -> *const () {
        Arc::as_ptr(&self.tx.chan).cast()
    }

    fn kind(&self) -> Kind {
        Kind::Send
    }

    fn result(&mut self) -> *mut () {
        let r: *mut Option<Reservation<T>> = &mut self.reservation;
        r.cast()
    }

    fn cancel(&mut self) {
        if let Some(r) = self.reservation.take() {
            self.tx.chan.cancel_reservation(r);
        }
    }
}

impl<'a> Arms for [Option<Box<dyn DynArm + 'a>>] {
    fn arm(&mut self, i: usize) -> &mut dyn SelectArm {
        self[i]
            .as_mut()
            .expect("only operations not removed are selected")
            .as_arm()
    }
}

/// Waits on a list of channel operations built at run time, and selects
/// one that can complete, as crossbeam-channel's `Select` does.
///
/// Add operations with [`recv`](Self::recv) and [`send`](Self::send) (each
/// returns the operation's index), then call [`select`](Self::select),
/// [`try_select`](Self::try_select) or
/// [`select_timeout`](Self::select_timeout). The [`SelectedOperation`]
/// returned must be completed with the matching
/// [`recv`](SelectedOperation::recv) or [`send`](SelectedOperation::send).
///
/// - When several operations are ready, one is chosen at random: each gets
///   a fair share.
/// - An operation is ready when it would not wait, which includes failing:
///   a receive on an empty, disconnected channel, a send on a disconnected
///   one.
/// - With nothing ready, a task parks (a thread blocks), registered on
///   every channel, until one operation can complete.
/// - The same `Select` can be used again and again.
///
/// ```
/// use gofer::chan::{unbounded, Select};
///
/// let chans: Vec<_> = (0..4).map(|_| unbounded::<usize>()).collect();
/// chans[2].0.send(20).unwrap();
///
/// let mut sel = Select::new();
/// for (_, rx) in &chans {
///     sel.recv(rx);
/// }
/// let oper = sel.select();
/// let i = oper.index();
/// assert_eq!(i, 2);
/// assert_eq!(oper.recv(&chans[i].1), Ok(20));
/// ```
///
/// A send operation takes its value only when it is completed:
///
/// ```
/// use gofer::chan::{bounded, Select};
///
/// let (tx, rx) = bounded::<&str>(1);
/// let mut sel = Select::new();
/// let send = sel.send(&tx);
/// let oper = sel.select();
/// assert_eq!(oper.index(), send);
/// oper.send(&tx, "hello").unwrap();
/// assert_eq!(rx.recv(), Ok("hello"));
/// ```
pub struct Select<'a> {
    /// By index; `None` once removed.
    arms: Vec<Option<Box<dyn DynArm + 'a>>>,
    /// Operations not removed.
    live: usize,
    /// Scratch space for the arm order of each selection.
    order: Vec<usize>,
}

impl<'a> Select<'a> {
    /// A `Select` with no operations.
    pub fn new() -> Select<'a> {
        Select {
            arms: Vec::new(),
            live: 0,
            order: Vec::new(),
        }
    }

    fn add(&mut self, arm: Box<dyn DynArm + 'a>) -> usize {
        self.arms.push(Some(arm));
        self.live += 1;
        self.arms.len() - 1
    }

    /// Adds a receive from `r`; returns the operation's index.
    pub fn recv<T>(&mut self, r: &'a Receiver<T>) -> usize {
        self.add(Box::new(RecvArm::new(r)))
    }

    /// Adds a send on `s`; returns the operation's index. The value is given
    /// when the selected operation is completed
    /// ([`SelectedOperation::send`]).
    pub fn send<T>(&mut self, s: &'a Sender<T>) -> usize {
        self.add(Box::new(SendSlot {
            tx: s,
            node: Node::new(None),
            reservation: None,
        }))
    }

    /// Removes the operation at `index` (for instance a receive whose
    /// channel disconnected, which would otherwise be selected again and
    /// again). The other operations keep their indices.
    ///
    /// # Panics
    /// If there is no operation at `index`, or it was removed already, as
    /// crossbeam's does.
    #[track_caller]
    pub fn remove(&mut self, index: usize) {
        let removed = self.arms.get_mut(index).and_then(Option::take);
        assert!(
            removed.is_some(),
            "no operation with this index, or it was already removed"
        );
        self.live -= 1;
    }

    /// Selects an operation that is ready now, without waiting.
    ///
    /// ```
    /// use gofer::chan::{bounded, Select};
    /// let (_tx, rx) = bounded::<i32>(1);
    /// let mut sel = Select::new();
    /// sel.recv(&rx);
    /// assert!(sel.try_select().is_err());
    /// ```
    pub fn try_select(&mut self) -> Result<SelectedOperation<'_>, TrySelectError> {
        self.run(Mode::Now).ok_or(TrySelectError)
    }

    /// Waits until an operation is ready and selects it.
    ///
    /// # Panics
    /// If no operation was added (it would wait for ever), as crossbeam's
    /// does.
    #[track_caller]
    pub fn select(&mut self) -> SelectedOperation<'_> {
        assert!(self.live > 0, "no operations have been added to `Select`");
        self.run(Mode::Block)
            .expect("a blocking selection selects an operation")
    }

    /// Waits at most `timeout` for an operation to be ready, and selects
    /// it.
    pub fn select_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<SelectedOperation<'_>, SelectTimeoutError> {
        self.run(Mode::timeout(timeout)).ok_or(SelectTimeoutError)
    }

    /// Waits until `deadline` at most for an operation to be ready, and
    /// selects it.
    pub fn select_deadline(
        &mut self,
        deadline: Instant,
    ) -> Result<SelectedOperation<'_>, SelectTimeoutError> {
        self.run(Mode::Deadline(deadline)).ok_or(SelectTimeoutError)
    }

    fn run(&mut self, mode: Mode) -> Option<SelectedOperation<'_>> {
        if self.live == 0 {
            if let Mode::Deadline(d) = mode {
                crate::runtime::time::sleep::sleep_until(d);
            }
            return None;
        }
        self.order.clear();
        self.order
            .extend((0..self.arms.len()).filter(|&i| self.arms[i].is_some()));
        let index = select_arms(&mut self.arms[..], &mut self.order, mode)?;
        let arm = self.arms[index]
            .as_deref_mut()
            .expect("the selected operation was not removed");
        Some(SelectedOperation {
            arm,
            index,
            completed: false,
        })
    }
}

impl Default for Select<'_> {
    fn default() -> Self {
        Select::new()
    }
}

impl fmt::Debug for Select<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Select")
            .field("operations", &self.live)
            .finish()
    }
}

/// The operation a [`Select`] selected. Complete it with
/// [`recv`](Self::recv) or [`send`](Self::send), passing a handle of the
/// channel the operation was added with; completing never waits.
///
/// Complete it promptly: a selected send may hold a waiting receiver (a
/// task, a thread or a pending `recv_async` future), which waits until the
/// value comes; dropping such a future meanwhile waits for it too.
///
/// # Panics
/// Dropping it without completing it panics (crossbeam's rule), after
/// undoing the selection: a value received goes back to the channel, a
/// reserved send is given up. Completing it with a handle of another
/// channel, or the wrong kind of operation, panics too.
#[must_use = "a selected operation must be completed with recv or send"]
pub struct SelectedOperation<'a> {
    arm: &'a mut (dyn DynArm + 'a),
    index: usize,
    completed: bool,
}

impl SelectedOperation<'_> {
    /// The index of the operation, as returned by [`Select::recv`] or
    /// [`Select::send`].
    pub fn index(&self) -> usize {
        self.index
    }

    /// Completes a selected receive: the value, or [`RecvError`] if the
    /// channel was empty and disconnected.
    ///
    /// # Panics
    /// If the operation is not a receive from `r`'s channel (crossbeam
    /// wants the very reference passed to [`Select::recv`]; any handle of
    /// the same channel is accepted here).
    #[track_caller]
    pub fn recv<T>(mut self, r: &Receiver<T>) -> Result<T, RecvError> {
        let chan: *const () = Arc::as_ptr(&r.chan).cast();
        assert!(
            self.arm.kind() == Kind::Recv && self.arm.chan() == chan,
            "passed a receiver that wasn't selected"
        );
        let slot = self.arm.result().cast::<Option<Result<T, RecvError>>>();
        // SAFETY: the arm is a receive from the channel at `chan` (checked
        // above), so it is a `RecvArm<U>` whose `&Receiver<U>` points at
        // that same live allocation (the `Select` borrows it), which is a
        // `Chan<T>`: one allocation holds one object of one type, and
        // `Chan<T>` is invariant in `T`, so `U` is `T`. The slot lives in
        // the arm, which `self` borrows mutably.
        let result = unsafe { (*slot).take() };
        self.completed = true;
        result.expect("a selected receive holds its result")
    }

    /// Completes a selected send with `value`. Fails, handing the value
    /// back, if every receiver is gone.
    ///
    /// # Panics
    /// If the operation is not a send on `s`'s channel (any handle of the
    /// channel is accepted, as for [`recv`](Self::recv)).
    #[track_caller]
    pub fn send<T>(mut self, s: &Sender<T>, value: T) -> Result<(), SendError<T>> {
        let chan: *const () = Arc::as_ptr(&s.chan).cast();
        assert!(
            self.arm.kind() == Kind::Send && self.arm.chan() == chan,
            "passed a sender that wasn't selected"
        );
        let slot = self.arm.result().cast::<Option<Reservation<T>>>();
        // SAFETY: as in `recv`: the arm is a `SendSlot<T>` of this channel.
        let reservation = unsafe { (*slot).take() };
        self.completed = true;
        let reservation = reservation.expect("a selected send holds its reservation");
        s.chan.send_reserved(reservation, value).map_err(SendError)
    }
}

impl Drop for SelectedOperation<'_> {
    fn drop(&mut self) {
        if self.completed {
            return;
        }
        self.arm.cancel();
        if !std::thread::panicking() {
            panic!("dropped `SelectedOperation` without completing the operation");
        }
    }
}

impl fmt::Debug for SelectedOperation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SelectedOperation")
            .field("index", &self.index)
            .finish()
    }
}
