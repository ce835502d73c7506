//! [`Sender`]: the sending half of a channel.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::channel::{Chan, SendAttempt};
use super::error::{SendError, SendTimeoutError, TrySendError};
use super::future::SendFut;

/// The sending half of a channel, made by [`bounded`](super::bounded) or
/// [`unbounded`](super::unbounded).
///
/// Clone it to send from several tasks or threads. When the last `Sender`
/// is dropped the channel disconnects: receivers take what is left, then get
/// [`RecvError`](super::RecvError).
///
/// Blocking methods park the calling task inside a coroutine (its thread runs
/// other tasks meanwhile) and block the calling thread outside one.
pub struct Sender<T> {
    pub(crate) chan: Arc<Chan<T>>,
}

impl<T> Sender<T> {
    /// Sends `value`, waiting while the channel is full. On a rendezvous
    /// channel (`bounded(0)`) it waits until a receiver has taken the value.
    ///
    /// Fails, handing the value back, when every receiver is gone.
    ///
    /// ```
    /// let (tx, rx) = gofer::chan::bounded(1);
    /// tx.send(1).unwrap();
    /// drop(rx);
    /// assert_eq!(tx.send(2).unwrap_err().into_inner(), 2);
    /// ```
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        self.chan.send(value, None).map_err(|(v, _)| SendError(v))
    }

    /// Sends `value` from async code: a future that completes once the value
    /// is in the channel (for a rendezvous channel: once a receiver took
    /// it), or with [`SendError`] holding the value once every receiver is
    /// gone. Any executor can poll it; it parks nothing and needs no
    /// runtime.
    ///
    /// The future is cancel-safe: dropped before it completes, it either
    /// sent the value or sent nothing (the value is then dropped with it).
    ///
    /// ```
    /// let (tx, rx) = gofer::chan::bounded(0);
    /// let receiver = std::thread::spawn(move || rx.recv().unwrap());
    /// gofer::block_on_future(tx.send_async(5)).unwrap();
    /// assert_eq!(receiver.join().unwrap(), 5);
    /// ```
    pub fn send_async(&self, value: T) -> SendFut<'_, T> {
        SendFut::new(self, value)
    }

    /// Sends `value` if that can be done without waiting.
    ///
    /// ```
    /// use gofer::chan::TrySendError;
    /// let (tx, _rx) = gofer::chan::bounded(1);
    /// assert_eq!(tx.try_send(1), Ok(()));
    /// assert_eq!(tx.try_send(2), Err(TrySendError::Full(2)));
    /// ```
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        match self.chan.try_send(value) {
            SendAttempt::Handed(_) | SendAttempt::Buffered => Ok(()),
            SendAttempt::Full(v) => Err(TrySendError::Full(v)),
            SendAttempt::Disconnected(v) => Err(TrySendError::Disconnected(v)),
        }
    }

    /// Like [`send`](Self::send), but gives up after `timeout`.
    ///
    /// If a receiver takes the value while the timeout expires, the send
    /// succeeds: a value is never both delivered and handed back.
    pub fn send_timeout(&self, value: T, timeout: Duration) -> Result<(), SendTimeoutError<T>> {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.send_deadline(value, deadline),
            None => self.send(value).map_err(SendTimeoutError::from),
        }
    }

    /// Like [`send`](Self::send), but gives up at `deadline`.
    pub fn send_deadline(&self, value: T, deadline: Instant) -> Result<(), SendTimeoutError<T>> {
        self.chan
            .send(value, Some(deadline))
            .map_err(|(v, timed_out)| {
                if timed_out {
                    SendTimeoutError::Timeout(v)
                } else {
                    SendTimeoutError::Disconnected(v)
                }
            })
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

    /// Whether every receiver is gone.
    pub fn is_disconnected(&self) -> bool {
        self.chan.is_disconnected()
    }

    /// Whether `self` and `other` send on the same channel.
    pub fn same_channel(&self, other: &Sender<T>) -> bool {
        Arc::ptr_eq(&self.chan, &other.chan)
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        // Relaxed: a new handle is made from a live one, so the count cannot
        // be zero concurrently (the same argument as Arc::clone).
        self.chan.senders.fetch_add(1, Ordering::Relaxed);
        Sender {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        // AcqRel: the last sender sees every other sender's drop before it
        // disconnects (pairs with their Release decrements).
        if self.chan.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.chan.disconnect(false);
        }
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .finish()
    }
}
