//! The wait queue every primitive in this module parks on.
//!
//! # Shape
//!
//! A [`WaitQueue<T>`] is a runtime mutex (`sys/lock.rs`) (held only for a few list
//! operations, never across a park) around an intrusive FIFO of [`Waiter`]
//! nodes and a primitive's own bookkeeping `T`. Each node lives on the
//! waiting task's stack (or the waiting thread's stack) for the duration of
//! one wait: a coroutine's stack stays where it is while the coroutine is
//! parked, even if it later resumes on another thread, so waiting allocates
//! nothing.
//!
//! Primitives use it in two halves:
//!
//! - a waiter locks the queue, checks its condition, and calls
//!   [`QueueGuard::wait`], which links a node, releases the lock, and parks
//!   until a notifier hands the node a *token* (or the deadline passes);
//! - a notifier locks the queue and calls [`QueueGuard::notify_front`] (or
//!   [`notify_all`](QueueGuard::notify_all)), which unlinks the node, gives it
//!   a token, and returns the waiter's handle; the notifier unparks it after
//!   releasing the lock ([`Wakes::wake`]).
//!
//! Tokens are primitive-specific non-zero numbers: "the lock is yours",
//! "retry", "here is a permit".
//!
//! # The waiter state machine (`Waiter::state`)
//!
//! ```text
//!  WAITING (0) -> token (non-zero)   notifier, under the queue lock, as it
//!                                    unlinks the node (Release store)
//! ```
//!
//! That is the only transition: a node is notified at most once. Invariants:
//!
//! 1. A node is linked exactly while its state is `WAITING`; both change
//!    together, under the queue lock.
//! 2. A linked node's memory is valid: the waiter leaves `wait` only after it
//!    saw a token (so a notifier unlinked the node) or after it unlinked the
//!    node itself under the queue lock (deadline passed, or unwinding).
//! 3. A notifier's last access to a node is the Release store of the token.
//!    It takes the [`Task`] handle out of the node before that store and
//!    unparks through its own copy afterwards, so the waiter may return and
//!    free its stack frame the moment it sees the token.
//!
//! The races this settles:
//!
//! - **Notify vs. deadline.** Both sides decide under the queue lock. A
//!   waiter whose deadline passed locks the queue and re-reads its state. A
//!   token means a notifier got there first and handed it something (the
//!   lock, a permit): it keeps it and reports success, because dropping it
//!   would lose it. Otherwise it unlinks itself, so no later notifier can hand
//!   anything to a waiter that has left.
//! - **Notify vs. park.** The notifier stores the token and then unparks. An
//!   unpark that lands before the park leaves a park token (see `runtime/task/park_state.rs`),
//!   so the park returns at once: no lost wake-up.
//! - **Stale unparks.** A waiter may be unparked by a timer or an earlier,
//!   finished wait; it loops on its own state and parks again.
//!
//! Orderings: the token store (Release) pairs with the waiter's load
//! (Acquire), so everything the notifier did before notifying (for example,
//! marking the lock as handed over) is visible to the woken waiter.

use crate::runtime::task::wait::WaitOn;
use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomPinned;
use std::ops::{Deref, DerefMut};
use std::pin::{pin, Pin};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::runtime::task::cancel;
use crate::runtime::task::park::{self, Task};

/// The state of a node no notifier has reached yet. Tokens are non-zero.
const WAITING: usize = 0;

/// One waiting task or thread: a node of the intrusive list.
///
/// `prev`, `next` and `task` are touched only under the queue lock (by the
/// waiter before it links the node, then by whoever holds the lock).
struct Waiter {
    /// `WAITING`, or the token a notifier handed over (module docs).
    state: AtomicUsize,
    /// What the waiter wants, in the primitive's terms (reader or writer).
    /// Immutable.
    kind: usize,
    /// When the waiter first began waiting for the current acquisition.
    /// Immutable.
    since: Option<Instant>,
    /// Who to wake; taken by the notifier.
    task: UnsafeCell<Option<Task>>,
    prev: Cell<Option<NonNull<Waiter>>>,
    next: Cell<Option<NonNull<Waiter>>>,
    /// Linked nodes are addressed by pointer: they must not move.
    _pin: PhantomPinned,
}

impl Waiter {
    fn new(kind: usize, since: Option<Instant>) -> Waiter {
        Waiter {
            state: AtomicUsize::new(WAITING),
            kind,
            since,
            task: UnsafeCell::new(Some(park::current())),
            prev: Cell::new(None),
            next: Cell::new(None),
            _pin: PhantomPinned,
        }
    }

    /// The token, once a notifier handed one over.
    fn token(&self) -> Option<usize> {
        // Acquire: pairs with the Release store in `QueueGuard::hand_over`.
        match self.state.load(Ordering::Acquire) {
            WAITING => None,
            t => Some(t),
        }
    }
}

/// Why a wait ended without a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimedOut;

/// How to wait: see [`QueueGuard::wait`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitOptions {
    /// Primitive-specific kind of waiter, readable by notifiers.
    pub(crate) kind: usize,
    /// When this acquisition began waiting (for fairness decisions).
    pub(crate) since: Option<Instant>,
    /// Queue at the front rather than the back (a waiter that was woken,
    /// lost the race, and goes back to keep its place).
    pub(crate) front: bool,
    /// Give up at this instant.
    pub(crate) deadline: Option<Instant>,
    /// What task dumps say the waiter waits on.
    pub(crate) on: WaitOn,
}

impl WaitOptions {
    /// Waiting at the back of the queue, with no deadline, on `on`.
    pub(crate) fn on(on: WaitOn) -> WaitOptions {
        WaitOptions {
            kind: 0,
            since: None,
            front: false,
            deadline: None,
            on,
        }
    }
}

/// The list and the primitive's bookkeeping, under the queue lock.
struct Locked<T> {
    head: Option<NonNull<Waiter>>,
    tail: Option<NonNull<Waiter>>,
    len: usize,
    data: T,
}

// SAFETY: the raw pointers name nodes that stay valid while linked
// (invariant 2) and are dereferenced only under the queue lock; the Task
// handles inside are Send. Moving the list to another thread is therefore
// no different from moving the `T`.
unsafe impl<T: Send> Send for Locked<T> {}

/// A queue of parked tasks and threads, plus a primitive's state `T` that
/// shares its lock. See the module docs.
pub(crate) struct WaitQueue<T> {
    inner: crate::sys::lock::Mutex<Locked<T>>,
}

impl<T> WaitQueue<T> {
    /// An empty queue.
    pub(crate) const fn new(data: T) -> WaitQueue<T> {
        WaitQueue {
            inner: crate::sys::lock::Mutex::new(Locked {
                head: None,
                tail: None,
                len: 0,
                data,
            }),
        }
    }

    /// Locks the queue. Never hold the guard across a park.
    pub(crate) fn lock(&self) -> QueueGuard<'_, T> {
        QueueGuard {
            queue: self,
            locked: self.inner.lock(),
        }
    }
}

/// The locked queue. Derefs to the primitive's bookkeeping `T`.
pub(crate) struct QueueGuard<'a, T> {
    queue: &'a WaitQueue<T>,
    locked: crate::sys::lock::MutexGuard<'a, Locked<T>>,
}

impl<T> Deref for QueueGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.locked.data
    }
}

impl<T> DerefMut for QueueGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.locked.data
    }
}

impl<'a, T> QueueGuard<'a, T> {
    /// Whether no one is waiting.
    pub(crate) fn is_empty(&self) -> bool {
        self.locked.head.is_none()
    }

    /// How many are waiting.
    pub(crate) fn len(&self) -> usize {
        self.locked.len
    }

    /// When the first waiter began waiting, if it said.
    pub(crate) fn front_since(&self) -> Option<Instant> {
        // SAFETY: a linked node is valid (invariant 2) and we hold the lock;
        // `since` is immutable.
        self.locked.head.and_then(|n| unsafe { n.as_ref().since })
    }

    /// How many waiters at the front, in a row, are of `kind`.
    pub(crate) fn front_run(&self, kind: usize) -> usize {
        let mut n = 0;
        let mut cur = self.locked.head;
        while let Some(p) = cur {
            // SAFETY: linked nodes are valid (invariant 2); we hold the lock,
            // which guards `next`; `kind` is immutable.
            let node = unsafe { p.as_ref() };
            if node.kind != kind {
                break;
            }
            n += 1;
            cur = node.next.get();
        }
        n
    }

    /// The kind of the first waiter.
    pub(crate) fn front_kind(&self) -> Option<usize> {
        // SAFETY: as in `front_since`; `kind` is immutable.
        self.locked.head.map(|n| unsafe { n.as_ref().kind })
    }

    /// Unlinks the first waiter and hands it `token` (non-zero). Returns
    /// its handle, to unpark once the lock is released.
    pub(crate) fn notify_front(&mut self, token: usize) -> Option<Task> {
        let head = self.locked.head?;
        // SAFETY: `head` is linked, so valid (invariant 2), and we hold the
        // queue lock.
        Some(unsafe { self.hand_over(head, token) })
    }

    /// Unlinks every waiter, handing each `token`; returns their handles.
    pub(crate) fn notify_all(&mut self, token: usize) -> Wakes {
        let mut wakes = Wakes::new();
        while let Some(t) = self.notify_front(token) {
            wakes.push(t);
        }
        wakes
    }

    /// Links `node` at the back (or front).
    ///
    /// # Safety
    /// `node` must stay valid until it is unlinked (invariant 2), and must
    /// not be linked already.
    unsafe fn push(&mut self, node: Pin<&Waiter>, front: bool) {
        let ptr = NonNull::from(&*node);
        let l = &mut *self.locked;
        if front {
            node.prev.set(None);
            node.next.set(l.head);
            match l.head {
                // SAFETY: `h` is linked, so valid; we hold the lock.
                Some(h) => unsafe { h.as_ref() }.prev.set(Some(ptr)),
                None => l.tail = Some(ptr),
            }
            l.head = Some(ptr);
        } else {
            node.next.set(None);
            node.prev.set(l.tail);
            match l.tail {
                // SAFETY: `t` is linked, so valid; we hold the lock.
                Some(t) => unsafe { t.as_ref() }.next.set(Some(ptr)),
                None => l.head = Some(ptr),
            }
            l.tail = Some(ptr);
        }
        l.len += 1;
    }

    /// Unlinks `node`.
    ///
    /// # Safety
    /// `node` must be linked in this queue (hence valid).
    unsafe fn unlink(&mut self, node: NonNull<Waiter>) {
        let l = &mut *self.locked;
        // SAFETY: guaranteed by the caller; we hold the lock.
        let n = unsafe { node.as_ref() };
        let (prev, next) = (n.prev.get(), n.next.get());
        match prev {
            // SAFETY: a linked node's neighbours are linked, so valid.
            Some(p) => unsafe { p.as_ref() }.next.set(next),
            None => l.head = next,
        }
        match next {
            // SAFETY: as above.
            Some(x) => unsafe { x.as_ref() }.prev.set(prev),
            None => l.tail = prev,
        }
        n.prev.set(None);
        n.next.set(None);
        l.len -= 1;
    }

    /// Unlinks `node`, takes its handle, and stores `token` as the very last
    /// access to the node (invariant 3).
    ///
    /// # Safety
    /// `node` must be linked in this queue.
    unsafe fn hand_over(&mut self, node: NonNull<Waiter>, token: usize) -> Task {
        debug_assert_ne!(token, WAITING, "tokens are non-zero");
        // SAFETY: guaranteed by the caller.
        unsafe { self.unlink(node) };
        // SAFETY: the node is valid until the token is stored (the waiter
        // cannot leave before it sees one), and `task` is only touched under
        // the queue lock, which we hold.
        let n = unsafe { node.as_ref() };
        // SAFETY: see above; no other reference to the cell's content exists.
        let task = unsafe { (*n.task.get()).take() }.expect("gofer: waiter without a handle");
        // Release: pairs with the Acquire load in `Waiter::token`. After this
        // store the waiter may free the node: no access follows.
        n.state.store(token, Ordering::Release);
        task
    }

    /// Links the current task (or thread) at the back of the queue (front
    /// if `opts.front`), releases the lock, runs `after_enqueue`, and parks
    /// until a notifier hands over a token, which is returned.
    ///
    /// If `opts.deadline` passes first, the waiter relocks the queue: a token
    /// that arrived meanwhile is returned as usual; otherwise the node is
    /// unlinked, `on_cancel` runs under the lock (to fix up the primitive's
    /// state now that this waiter is gone; its [`Wakes`] are woken after the
    /// lock is released), and `Err(TimedOut)` is returned. The same cleanup
    /// runs if the wait unwinds. A cancelled task leaves the same way, then
    /// unwinds from here (`runtime/task/cancel.rs`): callers keep their own state
    /// right on an unwind.
    pub(crate) fn wait<A, C>(
        self,
        opts: WaitOptions,
        after_enqueue: A,
        on_cancel: C,
    ) -> Result<usize, TimedOut>
    where
        A: FnOnce(),
        C: FnOnce(&mut QueueGuard<'a, T>) -> Wakes,
    {
        self.wait_unless(opts, after_enqueue, on_cancel, || false)
    }

    /// [`wait`](Self::wait) that also gives up, as at its deadline, once
    /// `stop` answers true. `stop` is asked before each park, so whatever
    /// makes it true must then unpark the waiter (a [`CancelToken`]'s
    /// watch, `task/cancel_token.rs`).
    ///
    /// [`CancelToken`]: crate::task::CancelToken
    pub(crate) fn wait_unless<A, C, S>(
        mut self,
        opts: WaitOptions,
        after_enqueue: A,
        on_cancel: C,
        stop: S,
    ) -> Result<usize, TimedOut>
    where
        A: FnOnce(),
        C: FnOnce(&mut QueueGuard<'a, T>) -> Wakes,
        S: Fn() -> bool,
    {
        let node = pin!(Waiter::new(opts.kind, opts.since));
        let node = node.as_ref();
        // SAFETY: `node` is pinned in this frame and not linked yet. The
        // `Enrolled` guard below is declared after it, so it is dropped
        // before it, and it unlinks the node (under the lock) on every path
        // where no notifier did: invariant 2 holds.
        unsafe { self.push(node, opts.front) };
        let queue = self.queue;
        drop(self);
        let mut enrolled = Enrolled {
            queue,
            node,
            on_cancel: Some(on_cancel),
        };
        after_enqueue();
        loop {
            if let Some(t) = node.token() {
                enrolled.on_cancel = None;
                return Ok(t);
            }
            if cancel::interrupted() {
                // The task was cancelled: leave as a timed-out waiter does
                // (a token that came first is kept, and returned), then
                // unwind with nothing of this wait linked (`runtime/task/cancel.rs`).
                let r = enrolled.cancel();
                if r.is_err() {
                    cancel::unwind();
                }
                return r;
            }
            if stop() || opts.deadline.is_some_and(|d| Instant::now() >= d) {
                return enrolled.cancel();
            }
            match cancel::recheck(opts.deadline) {
                None => park::park_on(opts.on),
                Some(d) => park::park_deadline_on(d, opts.on),
            }
        }
    }
}

/// A linked node's way out when no token comes: unlinks it under the lock
/// (on deadline, or on unwind through `Drop`).
struct Enrolled<'a, 'n, T, C>
where
    C: FnOnce(&mut QueueGuard<'a, T>) -> Wakes,
{
    queue: &'a WaitQueue<T>,
    node: Pin<&'n Waiter>,
    /// `Some` while the node may still be linked.
    on_cancel: Option<C>,
}

impl<'a, T, C> Enrolled<'a, '_, T, C>
where
    C: FnOnce(&mut QueueGuard<'a, T>) -> Wakes,
{
    /// Leaves the queue, unless a notifier was first (then its token is
    /// returned: it may carry ownership that must not be dropped).
    fn cancel(&mut self) -> Result<usize, TimedOut> {
        let Some(on_cancel) = self.on_cancel.take() else {
            return Err(TimedOut);
        };
        let mut q = self.queue.lock();
        if let Some(t) = self.node.token() {
            return Ok(t);
        }
        // SAFETY: the state is still WAITING and we hold the lock, so the
        // node is linked in this queue (invariant 1).
        unsafe { q.unlink(NonNull::from(&*self.node)) };
        let wakes = on_cancel(&mut q);
        drop(q);
        wakes.wake();
        Err(TimedOut)
    }
}

impl<'a, T, C> Drop for Enrolled<'a, '_, T, C>
where
    C: FnOnce(&mut QueueGuard<'a, T>) -> Wakes,
{
    fn drop(&mut self) {
        if self.on_cancel.is_some() {
            // Only reached by unwinding out of `wait`: the node must not
            // outlive its frame while linked.
            let _ = self.cancel();
        }
    }
}

/// Handles of woken waiters, to unpark after the queue lock is released.
#[derive(Default)]
pub(crate) struct Wakes {
    first: Option<Task>,
    rest: Vec<Task>,
}

impl Wakes {
    /// Nothing to wake.
    pub(crate) fn new() -> Wakes {
        Wakes::default()
    }

    /// Adds one handle.
    pub(crate) fn push(&mut self, t: Task) {
        if self.first.is_none() {
            self.first = Some(t);
        } else {
            self.rest.push(t);
        }
    }

    /// How many handles.
    pub(crate) fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    /// Unparks them all. Call with no queue lock held.
    pub(crate) fn wake(self) {
        if let Some(t) = self.first {
            t.unpark();
        }
        for t in self.rest {
            t.unpark();
        }
    }
}
