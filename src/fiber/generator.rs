//! [`Generator`]: a fiber seen as an iterator.

use std::fmt;
use std::iter::FusedIterator;

use super::handle::{Fiber, FiberResult};
use super::yielder::Yielder;
use crate::error::OrPanic;

/// An iterator whose items a closure produces on a stack of its own, with
/// [`Yielder::yield_`], from any call depth.
///
/// ```
/// use gofer::fiber::Generator;
/// let squares = Generator::new(|y| {
///     for i in 1u64.. {
///         y.yield_(i * i)
///     }
/// });
/// let v: Vec<u64> = squares.take(4).collect();
/// assert_eq!(v, [1, 4, 9, 16]);
/// ```
///
/// It is a [`Fiber<(), T, ()>`](Fiber) underneath, with the same rules:
/// it runs on the thread that calls [`next`](Iterator::next), a panic of
/// the closure comes out of `next` (after which the generator is finished
/// and yields nothing more), and dropping it before the end unwinds the
/// closure's stack, running the destructors of what is live there (the
/// infinite generator above is dropped that way by `collect`).
///
/// # Why `'static`
///
/// The closure must be `'static`: a generator is a value its owner may
/// keep, move or leak (`std::mem::forget`) while it is suspended halfway,
/// and a suspended frame that borrows must not outlive what it borrows
/// (see "Why `'static`" on [`Fiber`]). To iterate over borrowed data, use a
/// [`ScopedGenerator`](super::ScopedGenerator): it may borrow, and runs
/// only inside its [`scope`](super::ScopedGenerator::scope) call.
pub struct Generator<T> {
    fiber: Fiber<(), T, ()>,
}

impl<T> Generator<T> {
    /// A generator that runs `f` on a stack of the default size when the
    /// first item is asked for; each `y.yield_(item)` hands out one item,
    /// and returning from `f` ends the iteration.
    ///
    /// # Panics
    /// If no stack can be had; use
    /// [`Builder::generator`](super::Builder::generator) to get the error
    /// instead.
    #[track_caller]
    pub fn new<F>(f: F) -> Generator<T>
    where
        F: FnOnce(&Yielder<(), T>) + 'static,
    {
        super::Builder::new()
            .generator(f)
            .or_panic("gofer: cannot create a generator")
    }

    pub(super) fn from_fiber(fiber: Fiber<(), T, ()>) -> Generator<T> {
        Generator { fiber }
    }

    /// Whether the closure has finished (returned, panicked or been
    /// unwound): `next` returns `None` from then on.
    pub fn is_finished(&self) -> bool {
        self.fiber.is_finished()
    }
}

impl<T> Iterator for Generator<T> {
    type Item = T;

    /// Runs the closure until it yields the next item or returns.
    ///
    /// # Panics
    /// If the closure panics: the panic continues from here.
    fn next(&mut self) -> Option<T> {
        next_item(&mut self.fiber)
    }
}

/// The next item of a generator's fiber: runs it until it yields or
/// returns; `None` once it has finished.
#[inline]
pub(super) fn next_item<T>(fiber: &mut Fiber<(), T, ()>) -> Option<T> {
    if fiber.is_finished() {
        return None;
    }
    match fiber.resume(()) {
        FiberResult::Yield(item) => Some(item),
        FiberResult::Return(()) => None,
    }
}

impl<T> FusedIterator for Generator<T> {}

impl<T> fmt::Debug for Generator<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Generator")
            .field("fiber", &self.fiber)
            .finish()
    }
}
