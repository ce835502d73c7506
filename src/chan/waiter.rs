//! Waiters: how a blocked operation waits, and the selection state machine
//! that decides, with one CAS, who completes it.
//!
//! A task (or thread) that cannot complete a channel operation now puts a
//! [`Waiter`] on its own stack and links a [`Node`] (also on its stack)
//! pointing at it into the wait queue of the channel (one node per arm, on
//! every arm's channel, for a `select!`), then parks. A peer that can serve
//! it *claims* it and completes the operation for it: it moves the value
//! straight into (or out of) the node's slot, wakes the waiter, and marks it
//! done. No queue hop, no allocation: the queues are intrusive lists.
//!
//! # The selection state machine (`Waiter::state`)
//!
//! One atomic word:
//!
//! | state        | meaning                                                        |
//! |--------------|----------------------------------------------------------------|
//! | `WAITING`    | registered; nobody has decided the operation yet               |
//! | `ABORTED`    | the waiter gave up (timeout, or a `select!` saw a ready arm)   |
//! | `CLAIMED`    | a peer won the waiter and is completing one of its operations  |
//! | `RETRY`      | the peer let it go with nothing done: start the operation over |
//! | `DONE + arm` | finished: operation `arm` completed (or saw disconnection)     |
//!
//! Transitions, with the side that performs each:
//!
//! ```text
//!  peer (the claimer), under the lock of the channel holding the node:
//!      WAITING -> CLAIMED      CAS: the one decision; the winner owns the waiter
//!  claimer, after moving the value and waking the waiter (lock not needed):
//!      CLAIMED -> DONE + arm   store (Release): the claimer's last touch
//!  a claimer that reserved a receive and gave it up (see below):
//!      CLAIMED -> RETRY        store (Release), slot untouched
//!  the waiter itself, on timeout or when a select! arm turned out ready:
//!      WAITING -> ABORTED      CAS: the waiter owns its operation again
//! ```
//!
//! `WAITING -> CLAIMED` and `WAITING -> ABORTED` are CASes from the same
//! state, so exactly one wins: a value is either handed to the waiter (which
//! then reports success even if its deadline passed meanwhile) or stays with
//! its sender, never both and never neither. A claimer whose CAS fails
//! (`ABORTED`, or `CLAIMED`/`DONE` by another channel's peer in a `select!`)
//! unlinks the stale node and tries the next one; no state ever goes back to
//! `WAITING`, so a failed CAS is final and nobody has to undo a claim.
//!
//! Both sides of the timeout race:
//!
//! ```text
//!  waiter W (deadline passed)               claimer C (holds the channel lock)
//!  1. CAS WAITING -> ABORTED                1. CAS WAITING -> CLAIMED
//!  exactly one CAS succeeds:
//!  - W won:  C unlinks W's node and serves the next one (or buffers / parks);
//!            W takes the channel lock and removes its nodes, keeps its value.
//!  - C won:  W's CAS fails; W waits (spinning, yielding) for DONE, then
//!            reads its slot: the operation completed before the timeout.
//! ```
//!
//! Both sides of two channels firing for one `select!` waiter S (nodes on
//! channels A and B):
//!
//! ```text
//!  peer P1 (holds A's lock)               peer P2 (holds B's lock)
//!  1. CAS WAITING -> CLAIMED succeeds     1. CAS WAITING -> CLAIMED fails
//!  2. unlink S's A node, move the value   2. unlink S's B node (stale), then
//!  3. wake S, store DONE + a                 serve the next node, buffer, or park
//!  S: sees DONE + a (Acquire), takes B's lock to unregister its B node
//!     (already unlinked: nothing to do), returns arm a.
//! ```
//!
//! And a `select!` that finds an arm ready while registering (it registered
//! on A, then sees B ready) races a peer of A the same way: S's own
//! `WAITING -> ABORTED` against P1's `WAITING -> CLAIMED`. If S wins it
//! unregisters from A and starts over; if P1 wins, S waits for `DONE + a`.
//!
//! # Reserved receivers and `RETRY`
//!
//! A selected send of a [`Select`](super::Select) has no value yet: its
//! value comes when the caller completes the operation. To promise that
//! completing will not wait, selection claims a waiting receiver and holds
//! the claim (`CLAIMED`) until the value comes (`select_dyn.rs`), which
//! may take as long as the caller's code between `select` and `send`. If
//! the selected operation is dropped instead, the claim is released with
//! `RETRY`: the receiver finds its slot empty and every node unlinked or
//! stale, and starts its operation over (a stale node of a `select!` is
//! never used again, since its waiter starts over with fresh nodes). No
//! other path stores `RETRY`, and no state goes back to `WAITING`.
//!
//! # Waiters that are futures
//!
//! A pending [`RecvFut`](super::RecvFut) or [`SendFut`](super::SendFut)
//! waits with a waiter built by `Waiter::for_waker`: no task, and a
//! [`Waker`] in the wake cell. The waiter and its node live in a heap block
//! the future owns (`future.rs`), since a future returns between polls.
//! The hand-off is the thread waiter's: the claimer moves the waker out of
//! the cell while it owns the waiter (`CLAIMED`), stores `DONE`, then wakes
//! the waker, so it never touches the block once the future may free it.
//!
//! The future's own side, and its races:
//!
//! ```text
//!  future F (poll or drop)                    claimer C
//!  poll: state WAITING, same waker   ->  Pending, touches nothing
//!  poll: state WAITING, new waker:
//!    lock the channel; still WAITING?         C claims only under that
//!    yes: replace the waker; unlock           lock: it claims before (F
//!                                             sees CLAIMED/DONE) or after
//!                                             (and wakes the new waker)
//!  poll: CLAIMED  ->  spin; then wake_by_ref  C is between CAS and DONE
//!                     and Pending (no block)
//!  poll: DONE     ->  take the slot           C is done with the block
//!  drop: CAS WAITING -> ABORTED:
//!    won: lock, unlink the node, free         C's CAS fails: it skips us
//!    lost: spin (then yield) until DONE or    C finishes; F gives back a
//!          RETRY; a received value goes back  received value to the
//!          to the channel                     channel (`Chan::give_back`)
//! ```
//!
//! # Why the waiter's memory stays valid
//!
//! The `Waiter` and its nodes (with their slots) live on the waiting task's
//! stack (or in a pending future's heap block, which the future frees under
//! the same rule). The waiting function does not return (so the frame
//! stays) until **every** node is unlinked and no peer is still touching
//! it:
//!
//! - a node's links are read or written only under its channel's lock;
//! - a successful claimer unlinks the node it claimed, and its last access
//!   to the node or the waiter is the `DONE` (or `RETRY`) store; the waiter
//!   returns only after it observed that store (Acquire);
//! - every other node (a `select!`'s other arms, or all of them after an
//!   abort) is unlinked by the waiter itself under each channel's lock
//!   before it returns; a failed claimer only touched the node under that
//!   lock.
//!
//! The same argument keeps the task alive: the claimer takes the task out
//! of its parked state (`unpark_raw`) *before* storing `DONE`, through a
//! borrowed pointer to the task header, and the task cannot finish (so its
//! header cannot be freed) before it has seen `DONE`. That saves a reference
//! count increment and decrement on every blocking operation. If the task
//! was parked, that unpark hands the claimer the task's `Runnable` (the
//! reference the parked state held); the claimer stores `DONE`, and only
//! then schedules the `Runnable`, so the task finds `DONE` when it runs. A
//! wake-up from another thread may have to wake a sleeping Processer (a
//! system call): the task never spins through it. A task woken before it
//! parked (the unpark left a token) can still see `CLAIMED` for the few
//! instructions before the store; it spins (then yields) through that
//! window. A thread or future waiter is woken after the store, with a
//! `Thread` handle or a `Waker` the claimer moved out while it owned the
//! waiter.

use crate::runtime::task::wait::WaitOn;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Waker;
use std::thread::Thread;
use std::time::Instant;

use crossbeam_utils::Backoff;

use crate::runtime::task::TaskHeader;

/// Registered; not decided yet.
const WAITING: usize = 0;
/// The waiter gave up its registration.
const ABORTED: usize = 1;
/// A peer owns the waiter and is completing an operation for it.
const CLAIMED: usize = 2;
/// A peer claimed the waiter, then let it go without completing anything:
/// the waiter starts its operation over.
const RETRY: usize = 3;
/// `DONE + arm`: operation `arm` completed.
const DONE: usize = 4;

/// How a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A peer completed operation `arm` (the slot says how).
    Done(usize),
    /// The waiter aborted itself (deadline passed, or `abort` succeeded).
    Aborted,
    /// A peer claimed the waiter and released it with nothing done (a
    /// reserved `Select` send that was given up): every node is unlinked
    /// or stale, and the operation starts over.
    Retry,
}

/// What [`Waiter::check`] saw, without waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// Nobody decided the waiter yet.
    Waiting,
    /// A peer owns it and is completing an operation (or holds it reserved).
    Claimed,
    /// Decided: the same as [`Waiter::wait`]'s answers.
    Decided(Outcome),
}

/// How the claimer wakes a waiter that is not a coroutine. Moved out by the
/// claimer while it owns the waiter (`CLAIMED`), and, for a waker, replaced
/// by the waiter only under the channel lock while `WAITING`.
enum Wake {
    /// Nothing to wake (a coroutine waiter: see `Waiter::task`).
    Nothing,
    /// A blocked thread: unparked.
    Thread(Thread),
    /// A pending future: its waker is woken.
    Waker(Waker),
}

/// One blocked operation (or one blocked `select!`), on the waiting task's
/// stack, or in the heap block of a pending channel future. See the module
/// docs for the state machine and why it stays valid.
pub(crate) struct Waiter {
    state: AtomicUsize,
    /// The waiting coroutine, borrowed (see the module docs); null for a
    /// thread or a future.
    task: *const TaskHeader,
    /// Whom to wake when `task` is null.
    wake: UnsafeCell<Wake>,
    /// What task dumps say the waiter waits on.
    on: WaitOn,
}

impl Waiter {
    /// A waiter for the current task (or thread), in `WAITING`.
    #[inline]
    pub(crate) fn new() -> Waiter {
        match crate::runtime::context::current_task_ptr() {
            Some(task) => Waiter {
                state: AtomicUsize::new(WAITING),
                task,
                wake: UnsafeCell::new(Wake::Nothing),
                on: WaitOn::Chan,
            },
            None => Waiter {
                state: AtomicUsize::new(WAITING),
                task: std::ptr::null(),
                wake: UnsafeCell::new(Wake::Thread(std::thread::current())),
                on: WaitOn::Chan,
            },
        }
    }

    /// Names the operation the waiter waits for, for task dumps.
    #[inline]
    pub(crate) fn named(mut self, on: WaitOn) -> Waiter {
        self.on = on;
        self
    }

    /// A waiter for a pending future, in `WAITING`: completing it wakes
    /// `waker`. It never blocks in [`wait`](Self::wait); its owner polls
    /// [`check`](Self::check) instead.
    pub(crate) fn for_waker(waker: Waker) -> Waiter {
        Waiter {
            state: AtomicUsize::new(WAITING),
            task: std::ptr::null(),
            wake: UnsafeCell::new(Wake::Waker(waker)),
            on: WaitOn::Chan,
        }
    }

    /// Replaces the waker of a future's waiter (the future was polled again
    /// with a waker that would not wake the same task).
    ///
    /// # Safety
    /// The caller holds the lock of the channel whose queue holds this
    /// waiter's only node, and saw the state `WAITING` under that lock.
    /// Claims happen only under that lock, so no claimer owns the waiter, and
    /// the one that claims it later sees the new waker (the lock orders the
    /// write before its claim).
    pub(crate) unsafe fn set_waker(&self, waker: Waker) {
        // SAFETY: by the contract above nobody else reads or writes `wake`
        // now.
        unsafe { *self.wake.get() = Wake::Waker(waker) };
    }

    /// The state now, without waiting. `Decided` answers are final, and
    /// (Acquire) the slot holds what the claimer left there.
    pub(crate) fn check(&self) -> Check {
        // Acquire: pairs with the Release store in `Claimed::complete`.
        match self.state.load(Ordering::Acquire) {
            WAITING => Check::Waiting,
            CLAIMED => Check::Claimed,
            ABORTED => Check::Decided(Outcome::Aborted),
            RETRY => Check::Decided(Outcome::Retry),
            s => Check::Decided(Outcome::Done(s - DONE)),
        }
    }

    /// Waits, without parking, for a claimer to decide the waiter: for a
    /// future's waiter whose [`try_abort`](Self::try_abort) failed and that
    /// cannot return `Pending` (it is being dropped). Spins, then yields the
    /// task or thread. The claimer normally decides within a few
    /// instructions; a reserved `Select` send holds the claim until its user
    /// completes it.
    pub(crate) fn wait_decided(&self) -> Outcome {
        let backoff = Backoff::new();
        loop {
            match self.check() {
                Check::Decided(o) => return o,
                Check::Waiting => unreachable!("a waiter that failed to abort was claimed"),
                Check::Claimed => {
                    if backoff.is_completed() {
                        crate::runtime::task::park::yield_now();
                    } else {
                        backoff.snooze();
                    }
                }
            }
        }
    }

    /// Whether nobody has decided this waiter yet (a peek: the answer may be
    /// stale by the time it is used; only the CASes decide).
    pub(crate) fn is_waiting(&self) -> bool {
        self.state.load(Ordering::Relaxed) == WAITING
    }

    /// The claim: `WAITING -> CLAIMED`. Called by a peer holding the lock of
    /// the channel whose queue holds a node of this waiter. On success the
    /// caller owns the waiter until it calls [`Claimed::finish`].
    fn try_claim(&self) -> bool {
        // Relaxed: the claimer reads nothing the waiter published through
        // `state`. The node's slot and the waiter's handle were written before the node
        // was queued, and the claimer found the node under the same channel
        // lock, which orders those writes before this point. Atomicity alone
        // decides the race with `try_abort`.
        self.state
            .compare_exchange(WAITING, CLAIMED, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// The waiter takes its operation back: `WAITING -> ABORTED`. Fails when
    /// a peer claimed it first; the caller must then [`wait`](Self::wait)
    /// for `DONE`.
    pub(crate) fn try_abort(&self) -> bool {
        // Relaxed: on success nobody else ever touched the slots (no claim
        // happened), so there is nothing to acquire.
        self.state
            .compare_exchange(WAITING, ABORTED, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Parks the waiting task (or thread) once; may return spuriously.
    ///
    /// The same as [`crate::runtime::task::park::park`], but for a coroutine it uses the
    /// header pointer the waiter already holds instead of looking the task
    /// up again, and it is inlined into the blocking call. Keeping the call
    /// chain between the user's code and the context switch short matters:
    /// after a switch the CPU's return predictions belong to the other
    /// coroutine, so every frame returned through costs a misprediction.
    #[inline(always)]
    fn park(&self) {
        if self.task.is_null() {
            std::thread::park();
            return;
        }
        // SAFETY: `task` is the header of the task running this code (set by
        // `new` on this task, which is still running), so it is alive.
        let header = unsafe { &*self.task };
        // As in `park::park`: consume a pending token, else switch out; the
        // Processer completes the park state machine (runtime/task/park_state.rs).
        if !crate::runtime::task::take_token(header) {
            // SAFETY: `header` is the running task's (see above).
            unsafe { crate::runtime::task::suspend_parked(header, self.on, None) };
        }
    }

    /// Parks until a peer completes one of the waiter's operations, or until
    /// `deadline` passes and the waiter aborts itself. Tolerates spurious
    /// wake-ups (stale park tokens) by re-reading the state.
    #[inline(always)]
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> Outcome {
        self.wait_as(deadline, false)
    }

    /// [`wait`](Self::wait) that also gives up, as at a deadline, when the
    /// task is cancelled (`runtime/task/cancel.rs`): `Aborted` then means "deadline
    /// passed or cancelled", and the caller unlinks its nodes and calls
    /// `cancel::checkpoint`, which unwinds.
    #[inline(always)]
    pub(crate) fn wait_cancellable(&self, deadline: Option<Instant>) -> Outcome {
        self.wait_as(deadline, true)
    }

    #[inline(always)]
    fn wait_as(&self, deadline: Option<Instant>, cancellable: bool) -> Outcome {
        // The running task's header, when the wait observes cancellation
        // (`runtime/task/cancel.rs`; a thread waiter has none).
        // SAFETY: `task` is the running task's header (see `park`).
        let cancel_by = (cancellable && !self.task.is_null()).then(|| unsafe { &*self.task });
        let backoff = Backoff::new();
        loop {
            // Acquire: pairs with the Release `DONE` store in
            // `Claimed::finish`, so the value the claimer moved into (or out
            // of) our slot is visible once we see `DONE`.
            let s = self.state.load(Ordering::Acquire);
            if s >= DONE {
                return Outcome::Done(s - DONE);
            }
            match s {
                CLAIMED => {
                    // The claimer is between waking us and storing DONE: a
                    // few instructions, unless its thread was preempted (or
                    // it is a `Select` send that reserved us and waits for
                    // its user to hand over the value).
                    if backoff.is_completed() {
                        crate::runtime::task::park::yield_now();
                    } else {
                        backoff.spin();
                    }
                }
                ABORTED => return Outcome::Aborted,
                RETRY => return Outcome::Retry,
                // Cancelled: take the operation back unless a peer claimed
                // it first (then wait for DONE: its value is not lost).
                _ if cancel_by.is_some_and(crate::runtime::task::cancel::interrupted_in) => {
                    if self.try_abort() {
                        return Outcome::Aborted;
                    }
                }
                _ if deadline.is_some_and(|d| Instant::now() >= d) => {
                    if self.try_abort() {
                        return Outcome::Aborted;
                    }
                    // Claimed meanwhile: loop and wait for DONE.
                }
                _ => {
                    // A deferred cancellation parks with a short deadline
                    // (`cancel::recheck`).
                    let until = match cancel_by {
                        Some(h) => crate::runtime::task::cancel::recheck_in(h, deadline),
                        None => deadline,
                    };
                    match until {
                        None => self.park(),
                        Some(d) => crate::runtime::task::park::park_deadline_on(d, self.on),
                    }
                }
            }
        }
    }
}

/// The queue links of a [`Node`]; read and written only under the lock of
/// the channel whose queue the node is in (or was last in).
struct Links<T> {
    prev: *const Node<T>,
    next: *const Node<T>,
    /// The waiter this node belongs to, and which of its operations it is.
    waiter: *const Waiter,
    arm: usize,
    /// Whether the node is linked into a queue right now.
    queued: bool,
}

/// One blocked operation in a channel's wait queue: an intrusive list node
/// that lives on the waiting task's stack (inside the blocked call's frame,
/// or inside a `select!` arm), holding the slot the value moves through.
/// For a sender the slot holds the value to send; for a receiver it is
/// empty, to be filled.
///
/// Queueing a node is `unsafe` ([`WaitQueue::push`]): the node must stay in
/// place until it has been claimed and `DONE` observed, or removed under
/// the channel lock (module docs).
pub(crate) struct Node<T> {
    links: UnsafeCell<Links<T>>,
    slot: UnsafeCell<Option<T>>,
}

impl<T> Node<T> {
    /// A node, not queued, whose slot holds `value`.
    pub(crate) fn new(value: Option<T>) -> Node<T> {
        Node {
            links: UnsafeCell::new(Links {
                prev: std::ptr::null(),
                next: std::ptr::null(),
                waiter: std::ptr::null(),
                arm: 0,
                queued: false,
            }),
            slot: UnsafeCell::new(value),
        }
    }

    /// Takes the slot's value. `&mut self` proves nobody else can reach the
    /// node: it is not queued and not claimed (or its claimer is done).
    pub(crate) fn take(&mut self) -> Option<T> {
        self.slot.get_mut().take()
    }

    /// Puts a value back into the slot (same rule as [`take`](Self::take)).
    pub(crate) fn put(&mut self, value: T) {
        *self.slot.get_mut() = Some(value);
    }
}

/// The links of the node at `n`.
///
/// # Safety
/// `n` is alive, the caller holds the lock of the channel whose queue the
/// node is in (or is its owner and it is in no queue), and no other
/// reference to these links is live.
#[allow(clippy::mut_from_ref)]
unsafe fn links<'a, T>(n: *const Node<T>) -> &'a mut Links<T> {
    // SAFETY: guaranteed by the caller.
    unsafe { &mut *(*n).links.get() }
}

/// A waiter a peer has claimed: the peer moves the value through
/// [`slot`](Self::slot), then calls [`finish`](Self::finish) (after releasing
/// the channel lock, to keep the critical section short).
#[must_use = "a claimed waiter stays blocked until finish() is called"]
pub(crate) struct Claimed<T> {
    node: *const Node<T>,
    waiter: *const Waiter,
    arm: usize,
}

impl<T> Claimed<T> {
    /// The claimed operation's slot. Owned by the claimer until `finish`.
    pub(crate) fn slot(&mut self) -> &mut Option<T> {
        // SAFETY: the waiter is CLAIMED by us, so it waits (its frame, which
        // holds the node, stays alive) and touches neither its state nor its
        // nodes until it sees DONE; no other peer can claim it, and the node
        // is unlinked, so no queue reaches it. We are the only one accessing
        // the slot.
        unsafe { &mut *(*self.node).slot.get() }
    }

    /// Wakes the waiter and marks the operation done: `CLAIMED -> DONE + arm`.
    /// The waiter may return (and its frame vanish) as soon as the store is
    /// visible, so nothing touches the waiter after it.
    #[inline]
    pub(crate) fn finish(self) {
        let state = DONE + self.arm;
        self.complete(state);
    }

    /// Lets the waiter go without completing anything: `CLAIMED -> RETRY`.
    /// The slot must be as the waiter left it (a receive's slot empty).
    pub(crate) fn release(self) {
        self.complete(RETRY);
    }

    /// Wakes the waiter and stores its final state.
    #[inline(always)]
    fn complete(self, state: usize) {
        // SAFETY: we own the CLAIMED waiter; it stays alive until DONE.
        let w = unsafe { &*self.waiter };
        if w.task.is_null() {
            // SAFETY: CLAIMED gives us exclusive access to the wake cell.
            let wake = unsafe { std::mem::replace(&mut *w.wake.get(), Wake::Nothing) };
            // Release: publishes the slot contents; pairs with the Acquire
            // load in `Waiter::wait` (or `check`).
            w.state.store(state, Ordering::Release);
            // The handle was moved out first: the waiter (and the future
            // holding it) may be gone by now.
            match wake {
                Wake::Thread(t) => t.unpark(),
                Wake::Waker(waker) => waker.wake(),
                Wake::Nothing => {}
            }
        } else {
            // SAFETY: `task` came from `current_task_ptr`: the running
            // task's header. The task is blocked in `wait` until it sees
            // DONE, so it has not finished and its header is alive (held by
            // its Runnable or by its parked state).
            let woken = unsafe { crate::runtime::task::unpark_raw(w.task) };
            // Release: as above. Stored before the task is scheduled, so it
            // finds DONE when it runs, and never spins through a slow
            // wake-up (one from another thread may wake a sleeping
            // Processer: a system call). After the store the waiter may
            // return; the header is then touched only through the
            // Runnable, a counted reference.
            w.state.store(state, Ordering::Release);
            if let Some(r) = woken {
                crate::runtime::context::schedule(r);
            }
        }
    }
}

/// The blocked operations of one direction of one channel, oldest first: an
/// intrusive doubly linked list of [`Node`]s. Guarded by the channel lock.
pub(crate) struct WaitQueue<T> {
    head: *const Node<T>,
    tail: *const Node<T>,
}

impl<T> WaitQueue<T> {
    /// An empty queue.
    pub(crate) fn new() -> WaitQueue<T> {
        WaitQueue {
            head: std::ptr::null(),
            tail: std::ptr::null(),
        }
    }

    /// Queues `node` as operation `arm` of `waiter`.
    ///
    /// # Safety
    /// The caller holds the channel lock; `node` is in no queue; and `node`
    /// and `waiter` stay alive and in place until the node has been claimed
    /// and `DONE` observed, or removed with [`remove`](Self::remove) (see the
    /// module docs).
    pub(crate) unsafe fn push(&mut self, node: &Node<T>, waiter: &Waiter, arm: usize) {
        let n: *const Node<T> = node;
        // SAFETY: lock held, node not queued: we are the only one touching
        // its links.
        let l = unsafe { links(n) };
        l.prev = self.tail;
        l.next = std::ptr::null();
        l.waiter = waiter;
        l.arm = arm;
        l.queued = true;
        if self.tail.is_null() {
            self.head = n;
        } else {
            // SAFETY: the tail is a queued node (alive, lock held), distinct
            // from `n`.
            unsafe { links(self.tail).next = n };
        }
        self.tail = n;
    }

    /// Unlinks a queued node.
    ///
    /// # Safety
    /// Lock held; `n` is in this queue.
    unsafe fn unlink(&mut self, n: *const Node<T>) {
        // SAFETY: queued node, lock held (caller).
        let l = unsafe { links(n) };
        if l.prev.is_null() {
            self.head = l.next;
        } else {
            // SAFETY: a queued neighbour, distinct from `n`.
            unsafe { links(l.prev).next = l.next };
        }
        if l.next.is_null() {
            self.tail = l.prev;
        } else {
            // SAFETY: as above.
            unsafe { links(l.next).prev = l.prev };
        }
        l.prev = std::ptr::null();
        l.next = std::ptr::null();
        l.queued = false;
    }

    /// Claims the oldest node whose waiter is still undecided. Nodes whose
    /// claim fails are stale and unlinked.
    #[inline]
    pub(crate) fn claim(&mut self) -> Option<Claimed<T>> {
        let mut n = self.head;
        while !n.is_null() {
            // SAFETY: `n` is queued and we hold the lock (caller's `&mut`
            // on the state): the node and its waiter are alive (module docs).
            let (next, waiter, arm) = unsafe {
                let l = links(n);
                (l.next, l.waiter, l.arm)
            };
            // SAFETY: `n` is in this queue; lock held.
            unsafe { self.unlink(n) };
            // SAFETY: the waiter of a node that was queued until just now
            // under our lock is alive.
            if unsafe { (*waiter).try_claim() } {
                return Some(Claimed {
                    node: n,
                    waiter,
                    arm,
                });
            }
            // Stale (aborted, or won by another channel): dropped.
            n = next;
        }
        None
    }

    /// Claims the oldest node whose waiter is undecided and is not `me`
    /// (`me`'s own nodes are left in place). Stale nodes are unlinked.
    pub(crate) fn claim_other(&mut self, me: *const Waiter) -> Option<Claimed<T>> {
        let mut n = self.head;
        while !n.is_null() {
            // SAFETY: `n` is queued and we hold the lock: the node and its
            // waiter are alive (module docs).
            let (next, waiter, arm) = unsafe {
                let l = links(n);
                (l.next, l.waiter, l.arm)
            };
            if waiter != me {
                // SAFETY: `n` is in this queue; lock held.
                unsafe { self.unlink(n) };
                // SAFETY: as in `claim`.
                if unsafe { (*waiter).try_claim() } {
                    return Some(Claimed {
                        node: n,
                        waiter,
                        arm,
                    });
                }
            }
            n = next;
        }
        None
    }

    /// Whether some node not belonging to `me` is still undecided, i.e. a
    /// claim would probably succeed. A hint for `select!` registration.
    pub(crate) fn has_waiting(&self, me: *const Waiter) -> bool {
        let mut n = self.head;
        while !n.is_null() {
            // SAFETY: queued node, lock held: it and its waiter are alive.
            let l = unsafe { links(n) };
            // SAFETY: as above.
            if l.waiter != me && unsafe { (*l.waiter).is_waiting() } {
                return true;
            }
            n = l.next;
        }
        false
    }

    /// Unlinks `node` if it is still queued here (unregistration by the
    /// node's owner, lock held).
    pub(crate) fn remove(&mut self, node: &Node<T>) {
        // SAFETY: the owner holds the lock of the only queue the node was
        // pushed to, so its links are ours to read now.
        if unsafe { links(node).queued } {
            // SAFETY: queued, hence in this queue (a node is only ever
            // pushed to the queue its owner now removes it from).
            unsafe { self.unlink(node) };
        }
    }

    /// Claims every node (disconnection). Stale nodes are dropped.
    pub(crate) fn claim_all(&mut self) -> Vec<Claimed<T>> {
        let mut out = Vec::new();
        while let Some(c) = self.claim() {
            out.push(c);
        }
        out
    }

    /// Whether no node is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.head.is_null()
    }
}
