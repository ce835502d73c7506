//! [`Receiver`]: the receiving half of a channel.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::channel::{Chan, RecvAttempt};
use super::error::{RecvError, RecvTimeoutError, TryRecvError};
use super::future::RecvFut;
use super::iter::{IntoIter, Iter, TryIter};

/// The receiving half of a channel, made by [`bounded`](super::bounded) or
/// [`unbounded`](super::unbounded); or a timer channel's only half, made by
/// [`after`](super::after), [`at`](super::at), [`tick`](super::tick) or
/// [`never`](super::never).
///
/// Clone it to receive from several tasks or threads (each value goes to
/// exactly one of them). When the last `Receiver` is dropped the channel
/// disconnects: sends fail and hand their value back, and values still
/// buffered are dropped.
///
/// Blocking methods park the calling task inside a coroutine and block the
/// calling thread outside one.
pub struct Receiver<T> {
    pub(crate) chan: Arc<Chan<T>>,
}

impl<T> Receiver<T> {
    /// A receiver of `chan`, counted as its first.
    pub(crate) fn from_chan(chan: Arc<Chan<T>>) -> Receiver<T> {
        Receiver { chan }
    }

    /// Receives a value, waiting while the channel is empty.
    ///
    /// Once every sender is gone it still returns the values left in the
    /// channel, then fails with [`RecvError`].
    ///
    /// ```
    /// let (tx, rx) = gofer::chan::unbounded();
    /// tx.send(7).unwrap();
    /// drop(tx);
    /// assert_eq!(rx.recv(), Ok(7));
    /// assert!(rx.recv().is_err());
    /// ```
    pub fn recv(&self) -> Result<T, RecvError> {
        self.chan.recv(None).map_err(|_| RecvError)
    }

    /// Receives a value from async code: a future that completes with the
    /// next value, or with [`RecvError`] once the channel is empty and every
    /// sender is gone. Any executor can poll it (tokio, `futures`,
    /// [`block_on_future`](crate::block_on_future)); it parks nothing and
    /// needs no runtime.
    ///
    /// The future is cancel-safe: dropped before it completes, it loses no
    /// value (one already handed to it goes back to the channel). While it
    /// waits it holds a small heap block (allocated at its first wait).
    ///
    /// ```
    /// let (tx, rx) = gofer::chan::bounded(1);
    /// let sender = std::thread::spawn(move || tx.send("hi").unwrap());
    /// let got = gofer::block_on_future(rx.recv_async());
    /// assert_eq!(got, Ok("hi"));
    /// sender.join().unwrap();
    /// ```
    pub fn recv_async(&self) -> RecvFut<'_, T> {
        RecvFut::new(self)
    }

    /// Receives a value if one is there without waiting.
    ///
    /// ```
    /// use gofer::chan::TryRecvError;
    /// let (tx, rx) = gofer::chan::bounded::<i32>(1);
    /// assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    /// drop(tx);
    /// assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    /// ```
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        match self.chan.try_recv() {
            RecvAttempt::Value(v, _) => Ok(v),
            RecvAttempt::Empty => Err(TryRecvError::Empty),
            RecvAttempt::Disconnected => Err(TryRecvError::Disconnected),
        }
    }

    /// Like [`recv`](Self::recv), but gives up after `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.recv_deadline(deadline),
            None => self.recv().map_err(RecvTimeoutError::from),
        }
    }

    /// Like [`recv`](Self::recv), but gives up at `deadline`.
    pub fn recv_deadline(&self, deadline: Instant) -> Result<T, RecvTimeoutError> {
        self.chan.recv(Some(deadline)).map_err(|timed_out| {
            if timed_out {
                RecvTimeoutError::Timeout
            } else {
                RecvTimeoutError::Disconnected
            }
        })
    }

    /// A blocking iterator: yields values until the channel is empty and
    /// disconnected.
    pub fn iter(&self) -> Iter<'_, T> {
        Iter { rx: self }
    }

    /// A non-blocking iterator: yields the values available now, and stops
    /// at the first moment the channel is empty.
    pub fn try_iter(&self) -> TryIter<'_, T> {
        TryIter { rx: self }
    }

    /// Values waiting in the buffer (always 0 for a rendezvous channel).
    pub fn len(&self) -> usize {
        self.chan.len()
    }

    /// Whether no value waits in the buffer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the buffer is full (a rendezvous channel is always full; an
    /// unbounded one never is).
    pub fn is_full(&self) -> bool {
        self.chan.cap().is_some_and(|cap| self.len() >= cap)
    }

    /// The capacity: `Some(n)` for `bounded(n)`, `None` for unbounded.
    pub fn capacity(&self) -> Option<usize> {
        self.chan.cap()
    }

    /// Whether every sender is gone (values may still be buffered).
    pub fn is_disconnected(&self) -> bool {
        self.chan.is_disconnected()
    }

    /// Whether `self` and `other` receive from the same channel.
    pub fn same_channel(&self, other: &Receiver<T>) -> bool {
        Arc::ptr_eq(&self.chan, &other.chan)
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        // Relaxed: see Sender::clone.
        self.chan.receivers.fetch_add(1, Ordering::Relaxed);
        Receiver {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        // AcqRel: see Sender::drop.
        if self.chan.receivers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.chan.disconnect(true);
        }
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl<'a, T> IntoIterator for &'a Receiver<T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

impl<T> IntoIterator for Receiver<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;

    fn into_iter(self) -> IntoIter<T> {
        IntoIter { rx: self }
    }
}
