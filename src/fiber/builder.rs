//! [`Builder`]: a fiber or generator, plain or scoped, with options (name,
//! stack size).

use super::generator::Generator;
use super::handle::Fiber;
use super::pool;
use super::scoped::{ScopedFiber, ScopedGenerator};
use super::yielder::Yielder;
use crate::coroutine::stack::{self, StackMem, DEFAULT_STACK_SIZE};
use crate::error::SpawnError;

/// Options for one fiber: its name and stack size.
///
/// ```
/// use gofer::fiber::{Builder, FiberResult, Yielder};
/// let mut f = Builder::new()
///     .name("parser")
///     .stack_size(64 << 10)
///     .build(|y: &Yielder<(), u8>, ()| {
///         y.suspend(1);
///         "done"
///     })?;
/// assert_eq!(f.resume(()), FiberResult::Yield(1));
/// assert_eq!(f.resume(()), FiberResult::Return("done"));
/// # Ok::<(), gofer::SpawnError>(())
/// ```
#[derive(Clone, Debug, Default)]
#[must_use = "a builder does nothing until build() is called"]
pub struct Builder {
    name: Option<String>,
    stack_size: Option<usize>,
}

impl Builder {
    /// A builder with no options set: unnamed, with a stack of
    /// [`DEFAULT_STACK_SIZE`](crate::DEFAULT_STACK_SIZE) bytes.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Names the fiber (shown in stack overflow and panic reports, and by
    /// [`Fiber::name`]).
    pub fn name(mut self, name: impl Into<String>) -> Builder {
        self.name = Some(name.into());
        self
    }

    /// The fiber's stack size in bytes, rounded up to whole pages; accepted
    /// [`MIN_STACK_SIZE`](crate::MIN_STACK_SIZE) to
    /// [`MAX_STACK_SIZE`](crate::MAX_STACK_SIZE), as for tasks. Only the
    /// default size is pooled; other sizes are mapped for each fiber and
    /// unmapped when it finishes.
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.stack_size = Some(bytes);
        self
    }

    /// Makes a fiber that will run `f` (see [`Fiber::new`]).
    ///
    /// Errors: a stack size out of range ([`SpawnError::StackSize`]), or no
    /// stack memory left ([`SpawnError::StackExhausted`]).
    pub fn build<F, I, Y, R>(self, f: F) -> Result<Fiber<I, Y, R>, SpawnError>
    where
        F: FnOnce(&Yielder<I, Y>, I) -> R + 'static,
        I: 'static,
    {
        let (mem, name) = self.stack()?;
        // SAFETY: `F` and `I` are 'static: whatever a leaked fiber keeps on
        // its stack stays valid for good.
        Ok(unsafe { Fiber::with_stack(mem, name, f) })
    }

    /// Makes a [`ScopedFiber`] that will run `f`, which may borrow for
    /// `'a` (see [`ScopedFiber::new`]).
    ///
    /// Errors: as for [`build`](Self::build).
    pub fn build_scoped<'a, F, I, Y, R>(self, f: F) -> Result<ScopedFiber<'a, I, Y, R>, SpawnError>
    where
        F: FnOnce(&Yielder<I, Y>, I) -> R + 'a,
    {
        let (mem, name) = self.stack()?;
        // SAFETY: the fiber goes into a ScopedFiber, which resumes it only
        // inside `scope`, where it is owned by that call's frame and
        // dropped (unwound) before the call returns, within `'a`.
        Ok(ScopedFiber::from_fiber(unsafe {
            Fiber::with_stack(mem, name, f)
        }))
    }

    /// A stack of the requested size, and the name.
    fn stack(self) -> Result<(StackMem, Option<Box<str>>), SpawnError> {
        let size = match self.stack_size {
            Some(s) if !stack::valid_stack_size(s) => {
                return Err(SpawnError::StackSize { requested: s })
            }
            Some(s) => stack::round_to_pages(s),
            None => stack::round_to_pages(DEFAULT_STACK_SIZE),
        };
        let mem = pool::alloc(size).map_err(|source| SpawnError::StackExhausted {
            live_stacks: stack::live_stacks(),
            source,
        })?;
        Ok((mem, self.name.map(String::into_boxed_str)))
    }

    /// Makes a [`Generator`] that will run `f` (see [`Generator::new`]).
    ///
    /// Errors: as for [`build`](Self::build).
    pub fn generator<F, T>(self, f: F) -> Result<Generator<T>, SpawnError>
    where
        F: FnOnce(&Yielder<(), T>) + 'static,
    {
        self.build(move |y: &Yielder<(), T>, ()| f(y))
            .map(Generator::from_fiber)
    }

    /// Makes a [`ScopedGenerator`] that will run `f`, which may borrow for
    /// `'a` (see [`ScopedGenerator::new`]).
    ///
    /// Errors: as for [`build`](Self::build).
    pub fn scoped_generator<'a, F, T>(self, f: F) -> Result<ScopedGenerator<'a, T>, SpawnError>
    where
        F: FnOnce(&Yielder<(), T>) + 'a,
    {
        self.build_scoped(move |y: &Yielder<(), T>, ()| f(y))
            .map(ScopedGenerator::from_fiber)
    }
}
