//! The fiber's side: [`Yielder`], and the first frame of every fiber stack.
//!
//! ```text
//!   Fiber::new (creator's stack)        fiber stack
//!   ----------------------------        -----------
//!   switch, data = &prime ------------> entry(): move the closure off
//!                                         `prime` onto this stack
//!   <------------------------------------ switch back (primed)
//!   Fiber::resume(i)
//!   switch, data = &exchange ---------> entry(): a Yielder; take the input
//!                                         (none: drop the closure, UNWOUND)
//!                                         catch_unwind(closure(&yielder, i))
//!                                           ... yielder.suspend(y) --+
//!   <---------------------------------------- switch, YIELDED        |
//!   Fiber::resume(i2)                                                |
//!   switch, data = &exchange2 ------------------------------------>  +
//!                                         closure returns r, panics, or the
//!                                         forced unwind reaches here
//!   <------------------------------------ switch, RETURNED / PANICKED /
//!                                         UNWOUND; never resumed again
//! ```
//!
//! The closure is moved onto the fiber's stack when the fiber is created
//! (the priming switch), so a `Fiber<I, Y, R>` does not name the closure's
//! type and costs no allocation beyond its stack. Like a task's closure, it
//! then lives on that stack: one that captures large values by value needs
//! a stack to match (or should capture them boxed).

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use context::{Context, Transfer};

use super::protocol::{self, Exchange, ForcedUnwind, Port, PANICKED, RETURNED, UNWOUND, YIELDED};

/// What the creator hands the fiber in the priming switch.
pub(super) struct Prime<F> {
    /// The closure; the fiber moves it onto its own stack.
    pub(super) f: Option<F>,
    /// The fiber's identity for its forced unwind (its stack's top).
    pub(super) id: usize,
}

/// The fiber's side of a [`Fiber`](super::Fiber): suspends it, handing a
/// value out to the caller of [`resume`](super::Fiber::resume) and getting
/// the next resume's input back.
///
/// A `&Yielder` is passed to the fiber's closure and lives as long as the
/// fiber's stack; it cannot leave the fiber (it is neither `Send` nor
/// `'static`).
pub struct Yielder<I, Y> {
    /// The resumer's context, while the fiber runs; taken at each switch
    /// out.
    caller: Cell<Option<Context>>,
    /// The port of the latest resume's exchange (see `protocol.rs`).
    port: Cell<*mut Port<I, Y>>,
    /// The fiber's identity for its forced unwind.
    id: usize,
    /// The fiber is being unwound: every later `suspend` re-raises the
    /// unwind at once instead of switching.
    unwinding: Cell<bool>,
    /// Neither `Send` nor `Sync`: a yielder belongs to its fiber's stack.
    _not_send: PhantomData<*mut ()>,
}

impl<I, Y> Yielder<I, Y> {
    /// Suspends the fiber: `resume` returns [`FiberResult::Yield(value)`](
    /// super::FiberResult::Yield) to its caller, and this call returns the
    /// input of the next `resume`.
    ///
    /// If the fiber is dropped instead of resumed, this call does not
    /// return: it unwinds the fiber's stack (see "Dropping a suspended
    /// fiber" in the [module docs](super)).
    #[inline]
    pub fn suspend(&self, value: Y) -> I {
        if self.unwinding.get() {
            protocol::unwind(self.id);
        }
        // SAFETY: `port` points at the port of the exchange of the resume
        // that is running us; that resume waits in its switch until we switch
        // back below, so the exchange is alive and nobody else touches it.
        unsafe { (*self.port.get()).output.write(value) };
        let caller = self.caller.take().expect("a running fiber has a resumer");
        // SAFETY: `caller` is the resumer's context, suspended in its
        // switch into this fiber and waiting for exactly this switch back.
        let t = unsafe { caller.resume(YIELDED) };
        self.receive(t)
    }

    /// Records a resume that just switched in (its context and exchange)
    /// and takes its input; starts the forced unwind if it brought none.
    #[inline(always)]
    fn receive(&self, t: Transfer) -> I {
        match self.take_input(t) {
            Some(input) => input,
            None => {
                self.unwinding.set(true);
                protocol::unwind(self.id)
            }
        }
    }

    /// Records a resume that just switched in (its context and exchange)
    /// and takes its input: `None` asks the fiber to unwind.
    #[inline(always)]
    fn take_input(&self, t: Transfer) -> Option<I> {
        self.caller.set(Some(t.context));
        let port = t.data as *mut Port<I, Y>;
        self.port.set(port);
        // SAFETY: a resume always passes a pointer to its own exchange, whose
        // first field is the port (`#[repr(C)]`, see `protocol.rs`), and
        // waits in the switch while we use it.
        unsafe { (*port).input.take() }
    }
}

impl<Y> Yielder<(), Y> {
    /// Hands `value` out of a [`Generator`](super::Generator) (or of any
    /// fiber whose resumes carry no input) and waits for the next request.
    #[inline]
    pub fn yield_(&self, value: Y) {
        self.suspend(value)
    }
}

impl<I, Y> fmt::Debug for Yielder<I, Y> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Yielder")
            .field("unwinding", &self.unwinding.get())
            .finish_non_exhaustive()
    }
}

/// The first frame of every fiber: takes the closure (the priming switch),
/// then runs it at the first resume and reports how it ended.
pub(super) extern "C" fn entry<F, I, Y, R>(t: Transfer) -> !
where
    F: FnOnce(&Yielder<I, Y>, I) -> R,
{
    // Nothing may unwind into this extern "C" frame: everything that can
    // panic runs inside `catch_unwind` below, and this guard turns a bug
    // here into a clear abort.
    let body = AssertUnwindSafe(move || run::<F, I, Y, R>(t));
    if catch_unwind(body).is_err() {
        crate::sys::fatal::fatal("a panic escaped a fiber's root frame");
    }
    crate::sys::fatal::fatal("a finished fiber was resumed")
}

/// The body of [`entry`]; returns only if the finished fiber is resumed
/// again, which `Fiber` never does.
fn run<F, I, Y, R>(t: Transfer)
where
    F: FnOnce(&Yielder<I, Y>, I) -> R,
{
    // SAFETY: the creator passed a pointer to a `Prime<F>` on its stack and
    // waits in the priming switch until we switch back just below.
    let (f, id) = unsafe {
        let prime = &mut *(t.data as *mut Prime<F>);
        (prime.f.take(), prime.id)
    };
    // Primed: back to the creator. The first resume (or the drop of a fiber
    // that never ran) comes back here.
    // SAFETY: `t.context` is the creator, suspended in the priming switch.
    let t = unsafe { t.context.resume(0) };
    let yielder = Yielder {
        caller: Cell::new(None),
        port: Cell::new(ptr::null_mut()),
        id,
        unwinding: Cell::new(false),
        _not_send: PhantomData,
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let f = f.expect("a fiber's closure runs once");
        match yielder.take_input(t) {
            Some(input) => Some(f(&yielder, input)),
            None => {
                // Dropped before it ever ran: drop the closure here, not
                // during an unwind (where a panicking destructor aborts).
                drop(f);
                None
            }
        }
    }));
    // The exchange of the latest resume, which waits for our answer.
    let exchange = yielder.port.get() as *mut Exchange<I, Y, R>;
    let tag = match outcome {
        Ok(None) => UNWOUND,
        Ok(Some(r)) => {
            // SAFETY: the latest resume's exchange (see Yielder::suspend);
            // the tag below tells it that `done` is written.
            unsafe { (*exchange).done.write(r) };
            RETURNED
        }
        Err(p) if p.downcast_ref::<ForcedUnwind>().is_some_and(|u| u.0 == id) => UNWOUND,
        Err(p) => {
            // SAFETY: as above, for `panic`.
            unsafe { (*exchange).panic.write(p) };
            PANICKED
        }
    };
    // This stack is never resumed again: nothing with a destructor may be
    // left on it (the closure, the value and the payload are gone or moved
    // into the exchange; the yielder owns none).
    let caller = yielder
        .caller
        .take()
        .expect("a running fiber has a resumer");
    // SAFETY: `caller` is the latest resumer, waiting in its switch.
    unsafe { caller.resume(tag) };
}
