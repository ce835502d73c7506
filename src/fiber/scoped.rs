//! Fibers and generators whose closure borrows: [`ScopedFiber`] and
//! [`ScopedGenerator`], run inside a `scope` call through
//! [`ScopedFiberRef`] and [`ScopedGeneratorRef`].
//!
//! # Why a scope
//!
//! Dropping a fiber unwinds it, so a borrowing fiber that is dropped ends
//! within its borrows (the types below have a `Drop` impl for that: the
//! drop checker then requires `'a` to be alive wherever one is dropped).
//! Dropping is not enough, though: a value can be leaked with
//! `mem::forget`, and a leaked fiber that has run is left suspended in the
//! middle of its closure for good. Its frames would then outlive their
//! borrows, and code that relies on a call finishing before the borrows it
//! was given end (a `std::thread::scope` in the fiber, whose threads use
//! borrowed data until the scope returns) would see freed memory. This is
//! the hole that made corosensei withdraw its first `ScopedCoroutine`.
//!
//! So a scoped fiber can be made, moved and returned freely, but it runs
//! only inside [`ScopedFiber::scope`], which takes it by value and keeps it
//! in its own frame: the callback gets a [`ScopedFiberRef`], a reference
//! with no way to move the fiber out or swap another in, and the fiber is
//! dropped (unwound) before `scope` returns or unwinds. A scoped fiber
//! leaked before its scope has run nothing: that leaks the closure, no
//! more. The same holds for [`ScopedGenerator`] and [`ScopedGeneratorRef`].

use std::fmt;
use std::iter::FusedIterator;
use std::marker::PhantomData;

use super::generator::next_item;
use super::handle::{Fiber, FiberResult};
use super::yielder::Yielder;
use crate::error::OrPanic;

/// A [`Fiber`] whose closure may borrow for `'a`, run inside
/// [`scope`](Self::scope).
///
/// ```
/// use gofer::fiber::{ScopedFiber, Yielder};
/// let mut log = Vec::new();
/// let sum = ScopedFiber::new(|y: &Yielder<u32, ()>, first: u32| {
///     log.push(first); // borrows `log` mutably
///     let second = y.suspend(());
///     log.push(second);
///     first + second
/// })
/// .scope(|mut fiber| {
///     assert!(fiber.resume(1).is_yield());
///     fiber.resume(2).into_return()
/// });
/// assert_eq!(sum, Some(3));
/// assert_eq!(log, [1, 2]);
/// ```
///
/// It is a [`Fiber`] underneath, with the same stack, panics, forced
/// unwind on drop and thread rules (neither `Send` nor `Sync`). Only
/// running it differs: it runs inside [`scope`](Self::scope), which keeps
/// it in its own frame and unwinds it before returning, so that once it
/// has run it cannot be leaked while its borrows end (see "Why `'static`"
/// on [`Fiber`] for what a leaked, borrowing fiber would break). Made but
/// never run, it may be leaked: that leaks only the closure.
///
/// The fiber cannot outlive what it borrows:
///
/// ```compile_fail,E0597
/// use gofer::fiber::{ScopedFiber, Yielder};
/// let fiber;
/// {
///     let text = String::from("short-lived");
///     fiber = ScopedFiber::new(|_: &Yielder<(), ()>, ()| text.len());
/// } // `text` dies here, while `fiber` still holds its closure
/// fiber.scope(|mut f| f.resume(()));
/// ```
pub struct ScopedFiber<'a, I, Y, R> {
    /// Primed (the closure is on its stack) and never resumed outside
    /// `scope`.
    fiber: Fiber<I, Y, R>,
    /// What the closure borrows lives at least this long.
    _borrow: PhantomData<&'a mut ()>,
}

impl<'a, I, Y, R> ScopedFiber<'a, I, Y, R> {
    /// Makes a fiber that will run `f` on a stack of the default size
    /// ([`DEFAULT_STACK_SIZE`](crate::DEFAULT_STACK_SIZE)). Nothing runs
    /// until the first [`resume`](ScopedFiberRef::resume) inside
    /// [`scope`](Self::scope).
    ///
    /// # Panics
    /// If no stack can be had; use
    /// [`Builder::build_scoped`](super::Builder::build_scoped) to get the
    /// error instead.
    #[track_caller]
    pub fn new<F>(f: F) -> ScopedFiber<'a, I, Y, R>
    where
        F: FnOnce(&Yielder<I, Y>, I) -> R + 'a,
    {
        super::Builder::new()
            .build_scoped(f)
            .or_panic("gofer: cannot create a fiber")
    }

    /// Wraps a primed fiber whose closure borrows for `'a`; it must not
    /// have been resumed (only `scope` resumes it).
    pub(super) fn from_fiber(fiber: Fiber<I, Y, R>) -> ScopedFiber<'a, I, Y, R> {
        ScopedFiber {
            fiber,
            _borrow: PhantomData,
        }
    }

    /// Runs `f` with a [`ScopedFiberRef`] through which it resumes the
    /// fiber, then drops the fiber (unwinding it if it is suspended, as
    /// dropping a [`Fiber`] does) and returns `f`'s value.
    ///
    /// If `f` panics, the fiber is unwound the same way while the panic
    /// goes on.
    pub fn scope<T>(mut self, f: impl FnOnce(ScopedFiberRef<'_, I, Y, R>) -> T) -> T {
        // The fiber stays in this frame: `f` gets a reference it cannot
        // move out of, and `self` drops here, unwinding the fiber, before
        // this call returns or unwinds (within `'a`).
        f(ScopedFiberRef {
            fiber: &mut self.fiber,
        })
    }

    /// The name given to its [`Builder`](super::Builder), if any.
    pub fn name(&self) -> Option<&str> {
        self.fiber.name()
    }

    /// Usable bytes of its stack.
    pub fn stack_size(&self) -> usize {
        self.fiber.stack_size()
    }
}

/// Present for the drop checker: with it, a `ScopedFiber<'a, ..>` may only
/// be dropped where `'a` (and `I`, `Y`, `R`) are still alive, since the
/// fiber's drop runs the closure's destructors or unwinds its stack.
impl<I, Y, R> Drop for ScopedFiber<'_, I, Y, R> {
    fn drop(&mut self) {
        // The inner `Fiber`'s own drop does the work.
    }
}

impl<I, Y, R> fmt::Debug for ScopedFiber<'_, I, Y, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopedFiber")
            .field("name", &self.name())
            .field("stack_size", &self.stack_size())
            .finish()
    }
}

/// A [`ScopedFiber`] inside its [`scope`](ScopedFiber::scope): resume it
/// here. A reference to the fiber, which stays in the scope's frame.
pub struct ScopedFiberRef<'s, I, Y, R> {
    pub(super) fiber: &'s mut Fiber<I, Y, R>,
}

impl<I, Y, R> ScopedFiberRef<'_, I, Y, R> {
    /// Runs the fiber until it suspends or finishes, handing it `input`;
    /// see [`Fiber::resume`].
    ///
    /// # Panics
    /// As [`Fiber::resume`]: if the closure panics (the panic continues
    /// from here), or if the fiber has finished.
    #[inline]
    #[track_caller]
    pub fn resume(&mut self, input: I) -> FiberResult<Y, R> {
        self.fiber.resume(input)
    }

    /// Whether the fiber has finished: its closure returned or panicked.
    pub fn is_finished(&self) -> bool {
        self.fiber.is_finished()
    }

    /// The name given to its [`Builder`](super::Builder), if any.
    pub fn name(&self) -> Option<&str> {
        self.fiber.name()
    }

    /// Usable bytes of its stack.
    pub fn stack_size(&self) -> usize {
        self.fiber.stack_size()
    }
}

impl<I, Y, R> fmt::Debug for ScopedFiberRef<'_, I, Y, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopedFiberRef")
            .field("fiber", &*self.fiber)
            .finish()
    }
}

/// A [`Generator`](super::Generator) whose closure may borrow for `'a`,
/// iterated inside [`scope`](Self::scope).
///
/// A tokenizer over a borrowed string, whose tokens borrow it too:
///
/// ```
/// use gofer::fiber::ScopedGenerator;
///
/// #[derive(Debug, PartialEq)]
/// enum Tok<'a> {
///     Word(&'a str),
///     Num(u64),
/// }
///
/// fn tokens(src: &str) -> ScopedGenerator<'_, Tok<'_>> {
///     ScopedGenerator::new(move |y| {
///         for w in src.split_whitespace() {
///             match w.parse() {
///                 Ok(n) => y.yield_(Tok::Num(n)),
///                 Err(_) => y.yield_(Tok::Word(w)),
///             }
///         }
///     })
/// }
///
/// let text = String::from("add 2 3");
/// let toks: Vec<Tok<'_>> = tokens(&text).scope(|g| g.collect());
/// assert_eq!(toks, [Tok::Word("add"), Tok::Num(2), Tok::Num(3)]);
/// ```
///
/// It is a [`ScopedFiber<'a, (), T, ()>`](ScopedFiber) underneath. The
/// generator cannot outlive what it borrows:
///
/// ```compile_fail,E0597
/// use gofer::fiber::ScopedGenerator;
/// let words;
/// {
///     let text = String::from("a b c");
///     words = ScopedGenerator::new(|y| text.split(' ').for_each(|w| y.yield_(w)));
/// } // `text` dies here, while `words` still holds its closure
/// let n = words.scope(|g| g.count());
/// ```
pub struct ScopedGenerator<'a, T> {
    fiber: ScopedFiber<'a, (), T, ()>,
}

impl<'a, T> ScopedGenerator<'a, T> {
    /// A generator that runs `f` on a stack of the default size when the
    /// first item is asked for, inside [`scope`](Self::scope); each
    /// `y.yield_(item)` hands out one item, and returning from `f` ends the
    /// iteration.
    ///
    /// # Panics
    /// If no stack can be had; use
    /// [`Builder::scoped_generator`](super::Builder::scoped_generator) to
    /// get the error instead.
    #[track_caller]
    pub fn new<F>(f: F) -> ScopedGenerator<'a, T>
    where
        F: FnOnce(&Yielder<(), T>) + 'a,
    {
        super::Builder::new()
            .scoped_generator(f)
            .or_panic("gofer: cannot create a generator")
    }

    pub(super) fn from_fiber(fiber: ScopedFiber<'a, (), T, ()>) -> ScopedGenerator<'a, T> {
        ScopedGenerator { fiber }
    }

    /// Runs `f` with a [`ScopedGeneratorRef`], an iterator over the
    /// generator's items, then drops the generator (unwinding its closure
    /// if it has not finished) and returns `f`'s value. The items may
    /// leave the scope; the generator may not.
    pub fn scope<R>(self, f: impl FnOnce(ScopedGeneratorRef<'_, T>) -> R) -> R {
        self.fiber
            .scope(|fiber| f(ScopedGeneratorRef { fiber: fiber.fiber }))
    }
}

impl<T> fmt::Debug for ScopedGenerator<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopedGenerator")
            .field("fiber", &self.fiber)
            .finish()
    }
}

/// A [`ScopedGenerator`] inside its [`scope`](ScopedGenerator::scope): an
/// iterator over its items. A reference to the generator, which stays in
/// the scope's frame.
pub struct ScopedGeneratorRef<'s, T> {
    fiber: &'s mut Fiber<(), T, ()>,
}

impl<T> ScopedGeneratorRef<'_, T> {
    /// Whether the closure has finished (returned or panicked): `next`
    /// returns `None` from then on.
    pub fn is_finished(&self) -> bool {
        self.fiber.is_finished()
    }
}

impl<T> Iterator for ScopedGeneratorRef<'_, T> {
    type Item = T;

    /// Runs the closure until it yields the next item or returns.
    ///
    /// # Panics
    /// If the closure panics: the panic continues from here.
    fn next(&mut self) -> Option<T> {
        next_item(self.fiber)
    }
}

impl<T> FusedIterator for ScopedGeneratorRef<'_, T> {}

impl<T> fmt::Debug for ScopedGeneratorRef<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopedGeneratorRef")
            .field("fiber", &*self.fiber)
            .finish()
    }
}
