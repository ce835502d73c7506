//! Iterators over a [`Receiver`].

use std::fmt;

use super::receiver::Receiver;

/// Blocking iterator over received values; see [`Receiver::iter`].
///
/// ```
/// let (tx, rx) = gofer::chan::unbounded();
/// for i in 0..3 {
///     tx.send(i).unwrap();
/// }
/// drop(tx);
/// let got: Vec<i32> = rx.iter().collect();
/// assert_eq!(got, [0, 1, 2]);
/// ```
pub struct Iter<'a, T> {
    pub(crate) rx: &'a Receiver<T>,
}

impl<T> Iterator for Iter<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

impl<T> fmt::Debug for Iter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Iter { .. }")
    }
}

/// Non-blocking iterator over the values available now; see
/// [`Receiver::try_iter`].
pub struct TryIter<'a, T> {
    pub(crate) rx: &'a Receiver<T>,
}

impl<T> Iterator for TryIter<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.rx.try_recv().ok()
    }
}

impl<T> fmt::Debug for TryIter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TryIter { .. }")
    }
}

/// Owning blocking iterator; see `IntoIterator for Receiver`.
pub struct IntoIter<T> {
    pub(crate) rx: Receiver<T>,
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

impl<T> fmt::Debug for IntoIter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IntoIter { .. }")
    }
}
