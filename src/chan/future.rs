//! Channel operations as futures: [`RecvFut`] (from
//! [`Receiver::recv_async`]) and [`SendFut`] (from [`Sender::send_async`]).
//!
//! They need no runtime: any executor's waker will do (tokio, `futures`,
//! gofer's [`block_on_future`](crate::block_on_future)). So async code and
//! gofer tasks (or plain threads) talk through one channel, both ways.
//!
//! # How a future waits
//!
//! A poll first tries the operation under the channel lock, as
//! `try_recv`/`try_send` would. If it cannot complete, the future queues a
//! node for itself, like a blocked task does, but with a waiter that holds
//! the poll's [`Waker`] (`Waiter::for_waker`) instead of a task, and returns
//! `Pending`. A peer that serves it moves the value into (or out of) the
//! node's slot, stores `DONE`, and wakes the waker. The next poll sees
//! `DONE` and returns the result.
//!
//! The waiter and node cannot live on a stack here (the future returns
//! between polls, and may move), so they live in one heap block (a
//! [`Hook`]) that the future owns, made at its first wait and reused by
//! later ones. The future is `Unpin`. It hands the block to no one: it
//! frees the block itself, and only once no queue holds the node and no
//! claimer is still using it.
//!
//! The races (the waiter's state machine is in `waiter.rs`):
//!
//! - **Polled again while waiting, with another waker** (the future moved
//!   to another task, or the executor changed its waker): the future
//!   compares the new waker with the one it stored (`will_wake`); if they
//!   differ, it takes the channel lock, checks the state is still
//!   `WAITING`, and replaces the waker in the waiter. Claims happen only
//!   under that lock, so a claimer either claimed before (the future then
//!   sees `CLAIMED` or `DONE` and does not touch the waker) or claims after,
//!   and then wakes the new waker.
//! - **A wake lands while the future is being polled**: the claimer moved
//!   the waker out of the waiter before storing `DONE`, and wakes it after,
//!   so it never touches the hook once the future may see `DONE`. A poll
//!   that finds `CLAIMED` (the claimer is between its CAS and its `DONE`
//!   store) spins briefly, then wakes its own waker and returns `Pending`,
//!   so the executor polls again soon rather than the thread blocking.
//! - **Dropped while waiting**: the future aborts its waiter
//!   (`WAITING -> ABORTED`) and unlinks its node under the lock; nothing was
//!   handed to it. If the abort fails, a peer claimed it: the drop waits
//!   (spinning, then yielding) for the peer's `DONE` and then looks at the
//!   slot. A receive that was handed a value gives it back to the channel
//!   (`Chan::give_back`: to a waiting receiver, else to the front of the
//!   buffer), so a dropped `recv_async` loses nothing. A send whose value
//!   was taken has sent it; otherwise the value drops with the future: it
//!   is never half-delivered.
//!
//! A timer channel ([`after`](super::after), [`tick`](super::tick)) has no
//! sender to wake a waiting future: the future also arms an entry on
//! gofer's timers (the current task's scheduler, else the default one)
//! that wakes it when the next message is due; the poll then takes its node
//! back and looks again.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use crate::sys::lock::Mutex;

use super::channel::{RecvAttempt, SendAttempt};
use super::error::{RecvError, SendError};
use super::receiver::Receiver;
use super::sender::Sender;
use super::waiter::{Check, Node, Outcome, Waiter};
use crate::runtime::shared::Shared;
use crate::runtime::time::timer::{Action, TimerCallback, TimerRef};

/// How many times a poll that finds its waiter `CLAIMED` re-reads the state
/// before it gives up the thread (`wake_by_ref` and `Pending`).
const CLAIMED_SPINS: u32 = 128;

/// What a waiting future shares with the channel: its waiter and its node.
struct Hook<T> {
    waiter: Waiter,
    node: Node<T>,
}

/// A future's [`Hook`] and whether it is registered.
///
/// The block is allocated with `Box` and held as a raw pointer, never as a
/// `Box`: peers on other threads reach it through raw pointers while it is
/// queued, and a `Box` (moved with the future) would claim it exclusively.
struct Wait<T> {
    hook: Option<NonNull<Hook<T>>>,
    /// The node is queued, or claimed and not yet seen decided: peers may
    /// be using the block.
    registered: bool,
    /// A clone of the waker stored in the waiter, to compare with the next
    /// poll's.
    waker: Option<Waker>,
}

impl<T> Wait<T> {
    const fn new() -> Wait<T> {
        Wait {
            hook: None,
            registered: false,
            waker: None,
        }
    }

    /// Readies the block for a new registration: the slot holds `value`,
    /// the waiter wakes `waker`. Allocates it at the first wait.
    fn prepare(&mut self, value: Option<T>, waker: &Waker) {
        debug_assert!(!self.registered);
        let fresh = Hook {
            waiter: Waiter::for_waker(waker.clone()),
            node: Node::new(value),
        };
        match self.hook {
            // SAFETY: not registered: no queue holds the node and no claimer
            // uses the block, so this future has it to itself.
            Some(p) => unsafe { *p.as_ptr() = fresh },
            None => self.hook = Some(NonNull::from(Box::leak(Box::new(fresh)))),
        }
        self.waker = Some(waker.clone());
    }

    /// The block, shared (peers may be using it).
    fn hook(&self) -> &Hook<T> {
        let p = self.hook.expect("a registered future has its block");
        // SAFETY: the block lives until `drop` frees it; a shared reference
        // is fine while peers use it: what they touch (the waiter's state
        // and wake cell, the node's links and slot) is atomic or in an
        // `UnsafeCell`.
        unsafe { p.as_ref() }
    }

    /// The block, exclusively.
    ///
    /// # Safety
    /// Nobody else uses it: the node is in no queue, and the waiter was
    /// seen decided (a claimer's last touch is the store that decides it).
    unsafe fn hook_mut(&mut self) -> &mut Hook<T> {
        let mut p = self.hook.expect("a registered future has its block");
        // SAFETY: exclusive by the caller's contract; alive until `drop`.
        unsafe { p.as_mut() }
    }

    /// Whether `waker` wakes what the stored waker wakes.
    fn same_waker(&self, waker: &Waker) -> bool {
        self.waker.as_ref().is_some_and(|w| w.will_wake(waker))
    }

    /// Takes the slot's value after the waiter was seen decided.
    fn take_decided(&mut self) -> Option<T> {
        self.registered = false;
        // SAFETY: decided: the claimer is done with the block, and its node
        // was unlinked by the claimer (no queue holds it).
        unsafe { self.hook_mut() }.node.take()
    }
}

impl<T> Drop for Wait<T> {
    fn drop(&mut self) {
        debug_assert!(
            !self.registered,
            "a future frees its block only once unregistered"
        );
        if let Some(p) = self.hook.take() {
            // SAFETY: allocated by `Box` in `prepare`; the owners unregister
            // (or see the waiter decided) before dropping, so nobody else
            // holds the pointer.
            drop(unsafe { Box::from_raw(p.as_ptr()) });
        }
    }
}

/// Spins while the waiter is `CLAIMED` (its claimer is between the claim
/// and the store that decides it). `false`: still claimed; the caller wakes
/// its own waker and returns `Pending`.
fn spin_while_claimed(waiter: &Waiter) -> bool {
    for _ in 0..CLAIMED_SPINS {
        if waiter.check() != Check::Claimed {
            return true;
        }
        std::hint::spin_loop();
    }
    waiter.check() != Check::Claimed
}

/// A wake-up at a timer channel's next deadline, on gofer's timers.
struct ClockWake {
    waker: Mutex<Waker>,
}

impl TimerCallback for ClockWake {
    fn fire(self: Arc<Self>, _sched: &Arc<Shared>) {
        self.waker.lock().wake_by_ref();
    }

    fn cancel(&self, _sched: &Shared) -> bool {
        // Not a user timer: shutdown never asks.
        false
    }
}

/// An armed [`ClockWake`]; dropping it removes the timer entry.
struct ClockTimer {
    at: Instant,
    wake: Arc<ClockWake>,
    /// The entry, or `None` when no scheduler could be had and a thread
    /// sleeps until `at` instead.
    entry: Option<(Arc<Shared>, TimerRef)>,
}

impl ClockTimer {
    /// Wakes `waker` at `at`: an entry on the current task's scheduler (or
    /// the default one). If the default scheduler cannot start, a thread
    /// sleeps until then.
    fn arm(at: Instant, waker: &Waker) -> ClockTimer {
        let wake = Arc::new(ClockWake {
            waker: Mutex::new(waker.clone()),
        });
        let entry = match crate::runtime::scheduler::current_or_default_shared() {
            Ok(sched) => {
                let key = sched.add_timer(at, Action::Call(wake.clone()));
                Some((sched, key))
            }
            Err(_) => {
                let w = wake.clone();
                std::thread::spawn(move || {
                    let now = Instant::now();
                    if at > now {
                        std::thread::sleep(at - now);
                    }
                    w.waker.lock().wake_by_ref();
                });
                None
            }
        };
        ClockTimer { at, wake, entry }
    }
}

impl Drop for ClockTimer {
    fn drop(&mut self) {
        if let Some((sched, key)) = self.entry.take() {
            sched.remove_timer(key);
        }
    }
}

/// Keeps `timer` armed for `at` (a timer channel's next deadline), waking
/// `waker`.
fn keep_timer(timer: &mut Option<ClockTimer>, at: Option<Instant>, waker: &Waker) {
    match (at, timer.as_ref()) {
        (None, _) => *timer = None,
        (Some(at), Some(t)) if t.at == at => {
            let mut w = t.wake.waker.lock();
            if !w.will_wake(waker) {
                *w = waker.clone();
            }
        }
        (Some(at), _) => *timer = Some(ClockTimer::arm(at, waker)),
    }
}

/// The future of [`Receiver::recv_async`]: receives a value, or
/// [`RecvError`] once the channel is empty and disconnected.
///
/// Cancel-safe: dropping it before it completes loses no value. A value a
/// sender had already handed to it goes back to the channel (to a waiting
/// receiver, or to the front of the buffer).
///
/// Polling it again after it completed starts another receive.
#[must_use = "futures do nothing unless polled"]
pub struct RecvFut<'a, T> {
    rx: &'a Receiver<T>,
    wait: Wait<T>,
    /// For a timer channel: the wake-up at its next message.
    timer: Option<ClockTimer>,
}

// SAFETY: the hook block is owned by the future; other threads reach it only
// through the channel's protocol (`waiter.rs`), and the values moving
// through it are `T: Send`. The rest is a `&Receiver<T>` (Sync for
// `T: Send`), wakers and timer handles, all `Send`.
unsafe impl<T: Send> Send for RecvFut<'_, T> {}
// SAFETY: a shared reference gives access to nothing (every method takes
// `Pin<&mut Self>` or `&mut self`).
unsafe impl<T: Send> Sync for RecvFut<'_, T> {}

impl<'a, T> RecvFut<'a, T> {
    pub(crate) fn new(rx: &'a Receiver<T>) -> RecvFut<'a, T> {
        RecvFut {
            rx,
            wait: Wait::new(),
            timer: None,
        }
    }
}

impl<T> Future for RecvFut<'_, T> {
    type Output = Result<T, RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let chan = &*this.rx.chan;
        loop {
            if this.wait.registered {
                match this.wait.hook().waiter.check() {
                    Check::Decided(Outcome::Done(_)) => {
                        this.timer = None;
                        // A sender filled the slot, or the channel
                        // disconnected.
                        return Poll::Ready(this.wait.take_decided().ok_or(RecvError));
                    }
                    // A `Select` send reserved us, then gave up: again.
                    Check::Decided(Outcome::Retry) => this.wait.registered = false,
                    // Only this future aborts its waiter, and it unlinks the
                    // node at once: not seen here. Start over if it were.
                    Check::Decided(Outcome::Aborted) => this.wait.registered = false,
                    Check::Claimed => {
                        if !spin_while_claimed(&this.wait.hook().waiter) {
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                    }
                    Check::Waiting => {
                        let same = this.wait.same_waker(cx.waker());
                        if same && this.timer.is_none() {
                            return Poll::Pending;
                        }
                        let mut st = chan.lock();
                        let hook = this.wait.hook();
                        if hook.waiter.check() != Check::Waiting {
                            // Decided meanwhile: read the outcome above.
                            continue;
                        }
                        if st.has_clock() {
                            // A timer channel: the timer woke us (or another
                            // poll came). Take the node back and look again.
                            // Claims happen under the lock we hold, so the
                            // abort succeeds.
                            let aborted = hook.waiter.try_abort();
                            debug_assert!(aborted);
                            st.unregister_receiver(&hook.node);
                            drop(st);
                            this.wait.registered = false;
                            continue;
                        }
                        // SAFETY: we hold the lock of the channel whose queue
                        // holds the waiter's only node, and saw it WAITING
                        // under that lock.
                        unsafe { hook.waiter.set_waker(cx.waker().clone()) };
                        drop(st);
                        this.wait.waker = Some(cx.waker().clone());
                        return Poll::Pending;
                    }
                }
                continue;
            }
            let mut st = chan.lock();
            match st.try_recv(chan.cap()) {
                RecvAttempt::Value(v, served) => {
                    drop(st);
                    if let Some(c) = served {
                        c.finish();
                    }
                    this.timer = None;
                    return Poll::Ready(Ok(v));
                }
                RecvAttempt::Disconnected => {
                    drop(st);
                    this.timer = None;
                    return Poll::Ready(Err(RecvError));
                }
                RecvAttempt::Empty => {}
            }
            let clock = st.clock_deadline();
            this.wait.prepare(None, cx.waker());
            let hook = this.wait.hook();
            // SAFETY: the block is this future's; it stays in place until the
            // future has unregistered the node or seen the waiter decided
            // (`poll` and `drop` do, before reusing or freeing it).
            let probe = unsafe { st.register_receiver(&hook.node, &hook.waiter, 0) };
            drop(st);
            this.wait.registered = true;
            if let Some(p) = probe {
                p.finish();
            }
            keep_timer(&mut this.timer, clock, cx.waker());
            return Poll::Pending;
        }
    }
}

impl<T> Drop for RecvFut<'_, T> {
    fn drop(&mut self) {
        if !self.wait.registered {
            return;
        }
        let hook = self.wait.hook();
        if hook.waiter.try_abort() {
            // Nothing was handed to us: just leave the queue.
            self.rx.chan.lock().unregister_receiver(&hook.node);
            self.wait.registered = false;
            return;
        }
        // A peer claimed us: wait for it to finish, then give back what it
        // handed over.
        if let Outcome::Done(_) = hook.waiter.wait_decided() {
            if let Some(v) = self.wait.take_decided() {
                self.rx.chan.give_back(v);
            }
        }
        self.wait.registered = false;
    }
}

impl<T> fmt::Debug for RecvFut<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvFut")
            .field("waiting", &self.wait.registered)
            .finish()
    }
}

/// The future of [`Sender::send_async`]: sends its value, or gives it back
/// in [`SendError`] once every receiver is gone.
///
/// Cancel-safe: dropped before it completes, it either sent its value (a
/// receiver took it before the drop) or sent nothing, and the value is
/// dropped with it.
///
/// # Panics
/// If polled again after it completed (the value is gone).
#[must_use = "futures do nothing unless polled"]
pub struct SendFut<'a, T> {
    tx: &'a Sender<T>,
    /// The value, until it is sent or moved into the waiting node.
    value: Option<T>,
    wait: Wait<T>,
}

// SAFETY: as for `RecvFut`; the value held is `T: Send`.
unsafe impl<T: Send> Send for SendFut<'_, T> {}
// SAFETY: as for `RecvFut`: `&SendFut` gives access to nothing.
unsafe impl<T: Send> Sync for SendFut<'_, T> {}
// The value is never pinned: the future only moves it by value.
impl<T> Unpin for SendFut<'_, T> {}

impl<'a, T> SendFut<'a, T> {
    pub(crate) fn new(tx: &'a Sender<T>, value: T) -> SendFut<'a, T> {
        SendFut {
            tx,
            value: Some(value),
            wait: Wait::new(),
        }
    }
}

impl<T> Future for SendFut<'_, T> {
    type Output = Result<(), SendError<T>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let chan = &*this.tx.chan;
        loop {
            if this.wait.registered {
                match this.wait.hook().waiter.check() {
                    // A receiver took the value, or the channel disconnected
                    // and left it.
                    Check::Decided(Outcome::Done(_)) => {
                        return Poll::Ready(match this.wait.take_decided() {
                            None => Ok(()),
                            Some(v) => Err(SendError(v)),
                        });
                    }
                    // Released untouched (not done to sends today) or
                    // aborted (not seen here): start over with the value.
                    Check::Decided(Outcome::Retry | Outcome::Aborted) => {
                        this.value = this.wait.take_decided();
                    }
                    Check::Claimed => {
                        if !spin_while_claimed(&this.wait.hook().waiter) {
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                    }
                    Check::Waiting => {
                        if this.wait.same_waker(cx.waker()) {
                            return Poll::Pending;
                        }
                        let st = chan.lock();
                        let hook = this.wait.hook();
                        if hook.waiter.check() != Check::Waiting {
                            continue;
                        }
                        // SAFETY: lock held, waiter seen WAITING under it,
                        // and its only node is in this channel's queue.
                        unsafe { hook.waiter.set_waker(cx.waker().clone()) };
                        drop(st);
                        this.wait.waker = Some(cx.waker().clone());
                        return Poll::Pending;
                    }
                }
                continue;
            }
            let v = this
                .value
                .take()
                .expect("gofer::chan::SendFut polled after it completed");
            let mut st = chan.lock();
            let v = match st.try_send(v, chan.cap()) {
                SendAttempt::Handed(c) => {
                    drop(st);
                    c.finish();
                    return Poll::Ready(Ok(()));
                }
                SendAttempt::Buffered => return Poll::Ready(Ok(())),
                SendAttempt::Disconnected(v) => return Poll::Ready(Err(SendError(v))),
                SendAttempt::Full(v) => v,
            };
            this.wait.prepare(Some(v), cx.waker());
            let hook = this.wait.hook();
            // SAFETY: as in `RecvFut::poll`.
            unsafe { st.register_sender(&hook.node, &hook.waiter, 0) };
            drop(st);
            this.wait.registered = true;
            return Poll::Pending;
        }
    }
}

impl<T> Drop for SendFut<'_, T> {
    fn drop(&mut self) {
        if !self.wait.registered {
            return;
        }
        let hook = self.wait.hook();
        if hook.waiter.try_abort() {
            // Not sent; the value drops with the block.
            self.tx.chan.lock().unregister_sender(&hook.node);
        } else {
            // Claimed: the receiver is taking the value (or the channel
            // disconnected and left it, to drop with the block).
            hook.waiter.wait_decided();
        }
        self.wait.registered = false;
    }
}

impl<T> fmt::Debug for SendFut<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendFut")
            .field("waiting", &self.wait.registered)
            .finish()
    }
}
