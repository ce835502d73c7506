//! [`JoinSet`]: a set of tasks joined in the order they finish.
//!
//! Each task of the set carries a [`Finished`] notice, made at spawn and
//! moved into the task's closure. The notice sends the task's key on the
//! set's channel when it is dropped: when the closure returns or unwinds
//! (a panic, a cancellation), or when a task cancelled before it started
//! has its closure dropped unrun. So every task sends exactly one key,
//! and `join_next` receives keys in the order the tasks finished, then
//! joins that task's handle (whose result follows within a moment: the
//! notice goes just before the runtime publishes the result).

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use super::builder::Builder;
use super::join::JoinHandle;
use crate::chan::{self, Receiver, RecvTimeoutError, Sender};
use crate::error::OrPanic;
use crate::error::{JoinError, SpawnError};
use crate::runtime::task::TaskId;

/// Sends its task's key on the set's channel when dropped.
struct Finished {
    key: u64,
    tx: Sender<u64>,
}

impl Drop for Finished {
    fn drop(&mut self) {
        // An unbounded channel: never waits, so never observes a
        // cancellation. An error means the set is gone: nobody to tell.
        let _ = self.tx.send(self.key);
    }
}

/// A set of tasks of one result type, joined in the order they finish.
///
/// [`spawn`](Self::spawn) adds a task; [`join_next`](Self::join_next) waits
/// for the next one to finish and gives its result. Dropping the set
/// cancels the tasks still in it (without waiting for them);
/// [`cancel_all`](Self::cancel_all) cancels them and leaves them in the
/// set, to be joined.
///
/// ```
/// use std::time::Duration;
/// use gofer::task::JoinSet;
///
/// let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();
/// sched.block_on(|| {
///     let mut set = JoinSet::new();
///     for ms in [30u64, 10, 20] {
///         set.spawn(move || {
///             gofer::sleep(Duration::from_millis(ms));
///             ms
///         });
///     }
///     let mut total = 0;
///     while let Some(r) = set.join_next() {
///         total += r.unwrap();
///     }
///     assert_eq!(total, 60);
/// });
/// sched.shutdown();
/// ```
pub struct JoinSet<T> {
    tasks: HashMap<u64, JoinHandle<T>>,
    next_key: u64,
    tx: Sender<u64>,
    rx: Receiver<u64>,
}

impl<T: Send + 'static> JoinSet<T> {
    /// An empty set.
    pub fn new() -> JoinSet<T> {
        let (tx, rx) = chan::unbounded();
        JoinSet {
            tasks: HashMap::new(),
            next_key: 0,
            tx,
            rx,
        }
    }

    /// Spawns `f` into the set, as [`gofer::spawn`](crate::spawn) would
    /// (on the current task's scheduler, else the default one), and
    /// returns its id.
    ///
    /// # Panics
    /// If the task cannot be spawned; use
    /// [`spawn_with`](Self::spawn_with) to get the [`SpawnError`] instead.
    #[track_caller]
    pub fn spawn<F>(&mut self, f: F) -> TaskId
    where
        F: FnOnce() -> T + Send + 'static,
    {
        self.spawn_with(Builder::new(), f)
            .or_panic("gofer: cannot spawn a task")
    }

    /// Spawns `f` into the set with `builder`'s options (name, stack size,
    /// scheduler, ...), and returns its id.
    ///
    /// Errors: as [`Builder::spawn`].
    #[track_caller]
    pub fn spawn_with<F>(&mut self, builder: Builder, f: F) -> Result<TaskId, SpawnError>
    where
        F: FnOnce() -> T + Send + 'static,
    {
        let key = self.next_key;
        self.next_key += 1;
        let notice = Finished {
            key,
            tx: self.tx.clone(),
        };
        let h = builder.spawn(move || {
            let _notice = notice;
            f()
        })?;
        let id = h.id();
        self.tasks.insert(key, h);
        Ok(id)
    }

    /// Waits for the next task of the set to finish, and gives its result;
    /// `None` when the set is empty. Results come in the order the tasks
    /// finished.
    ///
    /// Inside a task this parks the calling task; on a plain thread it
    /// blocks the thread. A cancellable wait: a cancelled caller unwinds
    /// from it, and the set (when dropped by the unwind) cancels its tasks.
    pub fn join_next(&mut self) -> Option<Result<T, JoinError>> {
        self.join_next_with_id().map(|(_, r)| r)
    }

    /// Like [`join_next`](Self::join_next), and says which task the result
    /// came from: the id [`spawn`](Self::spawn) returned for it (also the
    /// task's [`JoinHandle::id`]). As tokio's `JoinSet::join_next_with_id`.
    ///
    /// ```
    /// use gofer::task::JoinSet;
    ///
    /// let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
    /// sched.block_on(|| {
    ///     let mut set = JoinSet::new();
    ///     let names: std::collections::HashMap<_, _> = ["a", "b"]
    ///         .into_iter()
    ///         .map(|name| (set.spawn(move || name.len()), name))
    ///         .collect();
    ///     while let Some((id, r)) = set.join_next_with_id() {
    ///         println!("task {} gave {:?}", names[&id], r);
    ///     }
    /// });
    /// sched.shutdown();
    /// ```
    pub fn join_next_with_id(&mut self) -> Option<(TaskId, Result<T, JoinError>)> {
        self.next(None)
    }

    /// Like [`join_next`](Self::join_next), but waits at most `timeout`:
    /// `None` when the set is empty or when no task finished in time
    /// ([`is_empty`](Self::is_empty) tells which). A task that finishes
    /// later stays in the set, its result kept for the next call. A
    /// `timeout` too long to be represented as a deadline
    /// (`Duration::MAX`) means no deadline.
    ///
    /// ```
    /// use std::time::Duration;
    /// use gofer::task::JoinSet;
    ///
    /// let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
    /// sched.block_on(|| {
    ///     let mut set = JoinSet::new();
    ///     set.spawn(|| gofer::sleep(Duration::from_secs(3600)));
    ///     assert!(set.join_next_timeout(Duration::from_millis(10)).is_none());
    ///     assert_eq!(set.len(), 1); // still running; dropping the set cancels it
    /// });
    /// sched.shutdown();
    /// ```
    pub fn join_next_timeout(&mut self, timeout: Duration) -> Option<Result<T, JoinError>> {
        self.join_next_timeout_with_id(timeout).map(|(_, r)| r)
    }

    /// [`join_next_timeout`](Self::join_next_timeout) with the task's id,
    /// as [`join_next_with_id`](Self::join_next_with_id).
    pub fn join_next_timeout_with_id(
        &mut self,
        timeout: Duration,
    ) -> Option<(TaskId, Result<T, JoinError>)> {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.next(Some(deadline)),
            None => self.next(None),
        }
    }

    /// Like [`join_next`](Self::join_next), but does not wait: `None` if
    /// no task of the set has finished yet (or the set is empty).
    pub fn try_join_next(&mut self) -> Option<Result<T, JoinError>> {
        self.try_join_next_with_id().map(|(_, r)| r)
    }

    /// [`try_join_next`](Self::try_join_next) with the task's id, as
    /// [`join_next_with_id`](Self::join_next_with_id).
    pub fn try_join_next_with_id(&mut self) -> Option<(TaskId, Result<T, JoinError>)> {
        while let Ok(key) = self.rx.try_recv() {
            if let Some(r) = self.take(key) {
                return Some(r);
            }
        }
        None
    }

    /// The next result, waiting until `deadline` at most (`None`: no
    /// deadline).
    fn next(&mut self, deadline: Option<Instant>) -> Option<(TaskId, Result<T, JoinError>)> {
        if self.tasks.is_empty() {
            return None;
        }
        loop {
            let key = match deadline {
                None => self
                    .rx
                    .recv()
                    .expect("gofer: the set holds a sender of its own channel"),
                Some(d) => match self.rx.recv_deadline(d) {
                    Ok(key) => key,
                    Err(RecvTimeoutError::Timeout) => return None,
                    Err(RecvTimeoutError::Disconnected) => {
                        unreachable!("gofer: the set holds a sender of its own channel")
                    }
                },
            };
            if let Some(r) = self.take(key) {
                return Some(r);
            }
        }
    }

    /// The id and result of the task `key`, which finished; `None` if it is
    /// no longer in the set.
    fn take(&mut self, key: u64) -> Option<(TaskId, Result<T, JoinError>)> {
        // Its notice went just before the runtime stored the result: this
        // join waits for that moment at most.
        self.tasks.remove(&key).map(|h| (h.id(), h.join()))
    }

    /// Asks every task still in the set to stop
    /// ([`JoinHandle::cancel`]). They stay in the set: `join_next` gives
    /// their results, a cancelled error for those that unwound or never
    /// ran.
    pub fn cancel_all(&self) {
        for h in self.tasks.values() {
            h.cancel();
        }
    }
}

impl<T> JoinSet<T> {
    /// How many tasks are in the set (spawned and not yet returned by
    /// `join_next`).
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether the set holds no task.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }
}

impl<T: Send + 'static> Default for JoinSet<T> {
    fn default() -> JoinSet<T> {
        JoinSet::new()
    }
}

impl<T> Drop for JoinSet<T> {
    /// Cancels the tasks still in the set and detaches them: it does not
    /// wait for them to unwind.
    fn drop(&mut self) {
        for (_, h) in self.tasks.drain() {
            h.cancel();
        }
    }
}

impl<T> fmt::Debug for JoinSet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinSet")
            .field("len", &self.tasks.len())
            .finish_non_exhaustive()
    }
}
