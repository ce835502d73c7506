//! [`CancelToken`]: a cloneable flag that tells a group of tasks to stop,
//! as Go's `context.Context` cancellation and tokio-util's
//! `CancellationToken` do, and that can be waited for in
//! [`select!`](crate::select) and [`Select`](crate::chan::Select).
//!
//! # Design
//!
//! A token's shared state (`Inner`) owns a channel of
//! [`Infallible`](std::convert::Infallible) values that nobody ever sends
//! on. The state holds its only [`Sender`]; cancelling drops it, which
//! disconnects the channel. So "cancelled" is "the channel is
//! disconnected", and every way of waiting on a channel waits on a token:
//! `recv` parks a task or blocks a thread, a `recv` arm of `select!` or of
//! `Select` fires with [`RecvError`](crate::chan::RecvError), `recv_async`
//! is a future, `recv_timeout` bounds the wait. No new selection machinery
//! is needed, and a cancel wakes every waiter through the channel's own
//! disconnect path, which already has no lost wake-up. The `cancelled(t)`
//! arm of `select!` is sugar for a `recv` arm on [`CancelToken::done`].
//!
//! A wait that is no channel wait, a semaphore's
//! ([`Semaphore::acquire_cancellable`](crate::sync::Semaphore::acquire_cancellable)),
//! *watches* the token instead: it registers its task handle in the token
//! (`watch`, under the token's lock, refused once cancelled), asks
//! `is_cancelled` before each park, and the cancel unparks every watcher
//! after it set the flag, so none sleeps through it.
//!
//! A rejected design: a dedicated select arm kind with its own waiter
//! queue in the token. It would duplicate the channel's registration and
//! claim protocol (`chan/waiter.rs`) for no gain a user can see.
//!
//! # State and races
//!
//! `Inner::cancelled` (an atomic flag, for the lock-free
//! [`is_cancelled`](CancelToken::is_cancelled)) and `Inner::state` (under
//! its lock: the sender and the children) change together, under the lock,
//! once: `cancel` sets the flag, takes the sender and the children out,
//! releases the lock, then drops the sender (waking the waiters) and
//! cancels the children. The flag is set before the sender is dropped, so
//! a waiter woken by the disconnect sees `is_cancelled()` true.
//!
//! Children: a parent keeps a [`Weak`] of each child, keyed by the child's
//! address, and a child keeps an [`Arc`] of its parent, as tokio-util's
//! tokens do: a token in the middle of a tree whose handles are all gone
//! lives on while it has children, so cancelling the root still reaches
//! every descendant. `child_token` adds the child under the parent's lock,
//! or makes it already cancelled if the parent's flag is set under that
//! lock, so a child made while its parent is being cancelled is never
//! missed. When a child's last handle goes, its `Drop` removes its entry
//! from the parent: a long-lived parent does not grow with children made
//! and dropped. Cancelling walks the tree with a work list, and dropping a
//! chain of tokens walks it with a loop, not recursion, so a deep chain
//! does not overflow a task's stack.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::chan::{self, Receiver, RecvTimeoutError, Sender};
use crate::runtime::task::park::Task;
use crate::sys::lock::Mutex;

/// A cloneable cancellation flag for a group of tasks: any clone can
/// [`cancel`](Self::cancel) it, and every clone then reports
/// [`is_cancelled`](Self::is_cancelled) and wakes whoever waits on it.
/// Cancelling is final.
///
/// Wait for it by parking ([`cancelled`](Self::cancelled), on a task or a
/// plain thread), with a bound ([`cancelled_timeout`](Self::cancelled_timeout)),
/// in [`select!`](crate::select) (a `cancelled(token) => body` arm), in a
/// [`Select`](crate::chan::Select) or from async code (through the channel
/// [`done`](Self::done) returns). [`child_token`](Self::child_token) makes a
/// token that is cancelled with its parent (not the reverse), and
/// [`drop_guard`](Self::drop_guard) one that cancels when a scope ends.
///
/// ```
/// use std::time::Duration;
/// use gofer::chan::{self, tick};
/// use gofer::task::CancelToken;
///
/// let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
/// let stop = CancelToken::new();
/// let (tx, rx) = chan::unbounded();
/// let workers: Vec<_> = (0..3)
///     .map(|i| {
///         let (stop, tx) = (stop.clone(), tx.clone());
///         sched.spawn(move || {
///             let ticker = tick(Duration::from_millis(1));
///             loop {
///                 gofer::select! {
///                     recv(ticker) -> _ => tx.send(i).unwrap(),
///                     cancelled(stop) => return,
///                 }
///             }
///         })
///     })
///     .collect();
/// rx.recv().unwrap(); // a worker is running
/// stop.cancel(); // every worker returns at its next select
/// for w in workers {
///     w.join().unwrap();
/// }
/// sched.shutdown();
/// ```
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

/// The state every clone of one token shares (module docs).
struct Inner {
    /// Set once, under `state`'s lock, by the cancel; read without it.
    cancelled: AtomicBool,
    /// The receiving half of the token's channel: disconnected once
    /// cancelled.
    rx: Receiver<Infallible>,
    /// The parent, for a child token: kept alive by its children; the
    /// child's `Drop` unlinks it there.
    parent: Option<Arc<Inner>>,
    state: Mutex<State>,
}

struct State {
    /// The only sender of the channel; `None` once cancelled.
    tx: Option<Sender<Infallible>>,
    /// Live children, keyed by the address of their `Inner`.
    children: HashMap<usize, Weak<Inner>>,
    /// Waits that are not channel waits (a semaphore's wait queue) and
    /// watch this token: the cancel unparks each ([`CancelToken::watch`]),
    /// keyed by `next_watch`.
    watchers: HashMap<u64, Task>,
    next_watch: u64,
}

impl Inner {
    fn new(parent: Option<Arc<Inner>>) -> Inner {
        let (tx, rx) = chan::bounded(0);
        Inner {
            cancelled: AtomicBool::new(false),
            rx,
            parent,
            state: Mutex::new(State {
                tx: Some(tx),
                children: HashMap::new(),
                watchers: HashMap::new(),
                next_watch: 0,
            }),
        }
    }

    /// The key of this token in its parent's `children`.
    fn key(&self) -> usize {
        self as *const Inner as usize
    }

    /// Marks this token cancelled; returns what the caller must drop
    /// (outside the lock), the watchers to unpark after that, and the
    /// children to cancel in turn. `None` if it was cancelled already.
    fn mark(&self) -> Option<Marked> {
        let mut st = self.state.lock();
        let tx = st.tx.take()?;
        // Release: pairs with the Acquire in `is_cancelled`, so whoever sees
        // the flag sees what was done before the cancel.
        self.cancelled.store(true, Ordering::Release);
        let children = std::mem::take(&mut st.children).into_values().collect();
        let watchers = std::mem::take(&mut st.watchers).into_values().collect();
        Some((tx, watchers, children))
    }
}

/// What [`Inner::mark`] takes out of a token: its sender, its watchers,
/// its children.
type Marked = (Sender<Infallible>, Vec<Task>, Vec<Weak<Inner>>);

impl Default for Inner {
    fn default() -> Inner {
        Inner::new(None)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Unlink from the parent; if this was the parent's last owner, the
        // parent goes too and is unlinked from its own parent, and so on up
        // the chain, in a loop.
        let mut key = self.key();
        let mut parent = self.parent.take();
        while let Some(p) = parent {
            // A cancel of the parent may have taken the entry out already.
            let removed = p.state.lock().children.remove(&key);
            drop(removed);
            key = Arc::as_ptr(&p) as usize;
            parent = Arc::into_inner(p).and_then(|mut inner| inner.parent.take());
        }
    }
}

impl chan::__private::CancelSource for CancelToken {
    fn cancel_channel(&self) -> &Receiver<Infallible> {
        self.done()
    }
}

impl CancelToken {
    /// A token not cancelled yet.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Cancels the token and every token made from it by
    /// [`child_token`](Self::child_token), at any depth, and wakes everyone
    /// waiting on any of them. Cancelling again does nothing.
    pub fn cancel(&self) {
        let mut work = vec![Arc::downgrade(&self.inner)];
        while let Some(weak) = work.pop() {
            let Some(inner) = weak.upgrade() else {
                continue; // a child dropped meanwhile: nobody can wait on it
            };
            if let Some((tx, watchers, children)) = inner.mark() {
                // Disconnects the channel: every waiter wakes.
                drop(tx);
                // After the flag (set in `mark`): a watcher woken here
                // sees `is_cancelled()` true.
                for w in watchers {
                    w.unpark();
                }
                work.extend(children);
            }
        }
    }

    /// Whether the token was cancelled. Once `true`, always `true`.
    pub fn is_cancelled(&self) -> bool {
        // Acquire: pairs with the Release in `cancel`.
        self.inner.cancelled.load(Ordering::Acquire)
    }

    /// A new token that is cancelled when this one is (at once, if this one
    /// already is). Cancelling the child does not cancel this one.
    ///
    /// ```
    /// let parent = gofer::task::CancelToken::new();
    /// let child = parent.child_token();
    /// child.cancel();
    /// assert!(!parent.is_cancelled());
    /// let child2 = parent.child_token();
    /// parent.cancel();
    /// assert!(child2.is_cancelled());
    /// ```
    ///
    /// The parent keeps no strong reference to its children: a child whose
    /// handles are all dropped is removed from its parent at once. A child
    /// keeps its parent's state alive, so a grandchild is cancelled with the
    /// root even when every handle of the token between them is gone.
    pub fn child_token(&self) -> CancelToken {
        let child = Arc::new(Inner::new(Some(self.inner.clone())));
        let mut st = self.inner.state.lock();
        if st.tx.is_none() {
            drop(st);
            let child = CancelToken { inner: child };
            child.cancel();
            return child;
        }
        st.children.insert(child.key(), Arc::downgrade(&child));
        drop(st);
        CancelToken { inner: child }
    }

    /// Waits until the token is cancelled: parks the task, or blocks the
    /// thread outside a task. Returns at once if it already is.
    pub fn cancelled(&self) {
        // The channel never carries a value: `recv` returns only on
        // disconnection, that is once the token is cancelled.
        let _ = self.inner.rx.recv();
        debug_assert!(self.is_cancelled());
    }

    /// Waits at most `timeout` for the token to be cancelled; returns
    /// whether it is.
    pub fn cancelled_timeout(&self, timeout: Duration) -> bool {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.cancelled_deadline(deadline),
            None => {
                self.cancelled();
                true
            }
        }
    }

    /// Waits until `deadline` at most for the token to be cancelled;
    /// returns whether it is.
    pub fn cancelled_deadline(&self, deadline: Instant) -> bool {
        match self.inner.rx.recv_deadline(deadline) {
            Ok(never) => match never {},
            Err(RecvTimeoutError::Disconnected) => true,
            Err(RecvTimeoutError::Timeout) => self.is_cancelled(),
        }
    }

    /// The token's channel, as Go's `ctx.Done()`: it never carries a value
    /// and disconnects when the token is cancelled, so a receive on it
    /// returns [`RecvError`](crate::chan::RecvError) then, and waits until
    /// then. For a [`Select`](crate::chan::Select) (in [`select!`](crate::select)
    /// the `cancelled(token)` arm reads better), or for async code
    /// (`token.done().recv_async().await`).
    ///
    /// ```
    /// use gofer::chan::{unbounded, Select};
    /// use gofer::task::CancelToken;
    ///
    /// let token = CancelToken::new();
    /// let (_tx, rx) = unbounded::<u32>();
    /// token.cancel();
    /// let mut sel = Select::new();
    /// sel.recv(&rx);
    /// let stop = sel.recv(token.done());
    /// let oper = sel.select();
    /// assert_eq!(oper.index(), stop);
    /// assert!(oper.recv(token.done()).is_err());
    /// ```
    pub fn done(&self) -> &Receiver<Infallible> {
        &self.inner.rx
    }

    /// A guard that cancels the token when it is dropped (at the end of a
    /// scope, or when a task holding it ends, even by a panic), unless
    /// [`disarm`](DropGuard::disarm)ed.
    ///
    /// A task that holds a guard makes its end something others can wait
    /// for in `select!`:
    ///
    /// ```
    /// use gofer::task::CancelToken;
    ///
    /// let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
    /// let finished = CancelToken::new();
    /// let guard = finished.clone().drop_guard();
    /// let h = sched.spawn(move || {
    ///     let _guard = guard;
    ///     6 * 7
    /// });
    /// finished.cancelled();
    /// assert_eq!(h.join().unwrap(), 42);
    /// sched.shutdown();
    /// ```
    pub fn drop_guard(self) -> DropGuard {
        DropGuard { token: Some(self) }
    }

    /// Has `task` unparked when the token is cancelled, until the returned
    /// guard is dropped; `None` (and nothing registered) if the token is
    /// cancelled already. For a wait that is no channel wait (a
    /// semaphore's): it registers before it looks at
    /// [`is_cancelled`](Self::is_cancelled) and parks, so a cancel that
    /// lands in between leaves an unpark token and the park returns.
    pub(crate) fn watch(&self, task: Task) -> Option<Watch<'_>> {
        let mut st = self.inner.state.lock();
        st.tx.as_ref()?;
        let key = st.next_watch;
        st.next_watch += 1;
        st.watchers.insert(key, task);
        Some(Watch { token: self, key })
    }

    /// Whether `self` and `other` are clones of one token.
    pub fn same_token(&self, other: &CancelToken) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// A registration made by [`CancelToken::watch`]; removes it on drop.
pub(crate) struct Watch<'a> {
    token: &'a CancelToken,
    key: u64,
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        // Gone already if the cancel took it out.
        let removed = self.token.inner.state.lock().watchers.remove(&self.key);
        drop(removed);
    }
}

/// Cancels its [`CancelToken`] when dropped; made by
/// [`CancelToken::drop_guard`].
#[must_use = "dropping the guard at once cancels the token at once"]
pub struct DropGuard {
    /// `None` once disarmed.
    token: Option<CancelToken>,
}

impl DropGuard {
    /// Gives the token back without cancelling it.
    pub fn disarm(mut self) -> CancelToken {
        self.token
            .take()
            .expect("a guard holds its token until disarmed")
    }
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        if let Some(t) = self.token.take() {
            t.cancel();
        }
    }
}

impl fmt::Debug for DropGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DropGuard")
            .field("token", &self.token)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_children_leave_their_parent() {
        let parent = CancelToken::new();
        let kept = parent.child_token();
        for _ in 0..100 {
            let c = parent.child_token();
            let grandchild = c.child_token();
            drop(c);
            drop(grandchild);
        }
        assert_eq!(parent.inner.state.lock().children.len(), 1);
        parent.cancel();
        assert!(kept.is_cancelled());
        assert!(parent.inner.state.lock().children.is_empty());
    }

    #[test]
    fn a_dropped_middle_token_still_passes_the_cancel_down() {
        let root = CancelToken::new();
        let grandchild = root.child_token().child_token();
        root.cancel();
        assert!(grandchild.is_cancelled());
    }

    #[test]
    fn a_dropped_chain_leaves_its_root() {
        let root = CancelToken::new();
        let mut leaf = root.child_token();
        for _ in 0..10 {
            leaf = leaf.child_token();
        }
        assert_eq!(root.inner.state.lock().children.len(), 1);
        drop(leaf);
        assert!(root.inner.state.lock().children.is_empty());
    }
}
