//! [`Builder`]: a fiber or generator with options (name, stack size).

use super::generator::Generator;
use super::handle::Fiber;
use super::pool;
use super::yielder::Yielder;
use crate::coroutine::stack::{self, DEFAULT_STACK_SIZE};
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
    {
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
        let name = self.name.map(String::into_boxed_str);
        Ok(Fiber::with_stack(mem, name, f))
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
}
