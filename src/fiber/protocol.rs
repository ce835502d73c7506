//! What travels between a fiber and its resumer at each switch.
//!
//! A switch (`context::Context::resume`) carries one word each way. The
//! values themselves stay on the stack of the side that is waiting, where
//! the other side reads or writes them through a pointer:
//!
//! ```text
//!  resumer (Fiber::resume, on the caller's stack)   fiber (Yielder, entry)
//!  1. exchange on its own stack:                     
//!     port.input = Some(input), or None to ask
//!     for the forced unwind (drop)
//!  2. switch, data = &mut exchange  ---------------> 3. remember the resumer's
//!                                                       context and &exchange;
//!                                                       take port.input
//!                                                       (None: start the forced
//!                                                       unwind)
//!                                                    4. run until suspend(y),
//!                                                       return r, or a panic:
//!                                                       write port.output = y,
//!                                                       done = r, or panic = p
//!                                                       into *that* exchange
//!  6. read the value the tag names  <--------------- 5. switch, data = tag
//!     from its exchange                                 (YIELDED, RETURNED,
//!                                                       PANICKED, UNWOUND)
//! ```
//!
//! The exchange belongs to one `resume` call and lives in its frame; the
//! fiber writes into it only between steps 3 and 5, while that call is
//! suspended in the switch, so no two parties touch it at once. A fiber
//! sees a new exchange at every resume (the resumer's frame may be
//! somewhere else each time), and after RETURNED, PANICKED or UNWOUND it is
//! never resumed again: its stack goes back to the pool.
//!
//! The fiber side is written without the return type (a `Yielder<I, Y>`
//! does not know `R`), so the part it touches, the [`Port`], is the first
//! field of the `#[repr(C)]` [`Exchange`]: a pointer to the exchange is a
//! pointer to its port whatever `R` is.

use std::any::Any;
use std::mem::MaybeUninit;

/// Fiber to resumer: it suspended; `port.output` holds the value.
pub(super) const YIELDED: usize = 0;
/// Fiber to resumer: its closure returned; `done` holds the value.
pub(super) const RETURNED: usize = 1;
/// Fiber to resumer: its closure panicked; `panic` holds the payload.
pub(super) const PANICKED: usize = 2;
/// Fiber to resumer: the forced unwind that the resumer asked for reached
/// the fiber's root (or the closure was dropped without running).
pub(super) const UNWOUND: usize = 3;

/// The part of an [`Exchange`] a fiber's `Yielder` reads and writes.
#[repr(C)]
pub(super) struct Port<I, Y> {
    /// Resumer to fiber: the input of this resume, or `None` to ask the
    /// fiber to unwind its stack.
    pub(super) input: Option<I>,
    /// Fiber to resumer: the value it suspended with; written exactly when
    /// the tag is YIELDED.
    pub(super) output: MaybeUninit<Y>,
}

/// One resume's values, in the resumer's frame (see the module docs).
///
/// The fiber writes exactly one of `output`, `done` and `panic`, the one
/// its tag names (none for UNWOUND), and the resumer moves exactly that one
/// out. Uninitialised fields cost nothing to make or to drop: one switch
/// stays a few stores away from the `context` crate's own.
#[repr(C)]
pub(super) struct Exchange<I, Y, R> {
    /// First, so that `*mut Exchange` is a valid `*mut Port`.
    pub(super) port: Port<I, Y>,
    /// Fiber to resumer: the closure's return value (tag RETURNED).
    pub(super) done: MaybeUninit<R>,
    /// Fiber to resumer: the closure's panic payload (tag PANICKED).
    pub(super) panic: MaybeUninit<Box<dyn Any + Send>>,
}

impl<I, Y, R> Exchange<I, Y, R> {
    /// An exchange carrying `input` (or the unwind request, for `None`).
    #[inline(always)]
    pub(super) fn new(input: Option<I>) -> Self {
        Exchange {
            port: Port {
                input,
                output: MaybeUninit::uninit(),
            },
            done: MaybeUninit::uninit(),
            panic: MaybeUninit::uninit(),
        }
    }

    /// Moves out the value the fiber suspended with.
    ///
    /// # Safety
    /// The fiber switched back with YIELDED into this exchange, and this is
    /// the only read.
    #[inline(always)]
    pub(super) unsafe fn take_output(&mut self) -> Y {
        // SAFETY: guaranteed by the caller: the fiber wrote `output`.
        unsafe { self.port.output.assume_init_read() }
    }

    /// Moves out the closure's return value.
    ///
    /// # Safety
    /// The fiber switched back with RETURNED into this exchange, and this is
    /// the only read.
    pub(super) unsafe fn take_done(&mut self) -> R {
        // SAFETY: guaranteed by the caller: the fiber wrote `done`.
        unsafe { self.done.assume_init_read() }
    }

    /// Moves out the closure's panic payload.
    ///
    /// # Safety
    /// The fiber switched back with PANICKED into this exchange, and this is
    /// the only read.
    pub(super) unsafe fn take_panic(&mut self) -> Box<dyn Any + Send> {
        // SAFETY: guaranteed by the caller: the fiber wrote `panic`.
        unsafe { self.panic.assume_init_read() }
    }
}

/// The payload of a fiber's forced unwind. It names the fiber (by the top
/// address of its stack, unique among live fibers), so that the unwind of
/// one fiber that somehow reaches the root of another is passed on as a
/// panic instead of being taken for that one's own. Private: user code can
/// catch it as an opaque payload, never make one.
pub(super) struct ForcedUnwind(pub(super) usize);

/// Starts (or resumes) the forced unwind of fiber `id`.
#[cold]
pub(super) fn unwind(id: usize) -> ! {
    std::panic::resume_unwind(Box::new(ForcedUnwind(id)))
}
