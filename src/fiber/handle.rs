//! [`Fiber`]: the resumer's handle on a fiber, and [`FiberResult`].
//!
//! # A fiber's life
//!
//! ```text
//!  created (primed: the closure is on the fiber's stack, nothing ran)
//!     | resume(i)                          | drop
//!     v                                    v
//!  running -- suspend(y) --> suspended     the closure is dropped; UNWOUND
//!     ^                         | resume(i)      | drop
//!     +-------------------------+                v
//!     |                                    forced unwind: `suspend` unwinds,
//!     | returns / panics                   destructors run; UNWOUND
//!     v
//!  finished: the stack is back in its pool; resume panics
//! ```
//!
//! `ctx` is `Some` exactly while the fiber is created or suspended; it is
//! taken for the duration of a resume and not put back once the fiber has
//! finished.

use std::fmt;
use std::marker::PhantomData;
use std::panic::resume_unwind;

use context::{Context, Transfer};

use super::pool;
use super::protocol::{Exchange, PANICKED, RETURNED, UNWOUND, YIELDED};
use super::yielder::{entry, Prime, Yielder};
use crate::coroutine::registry::{self, Registration};
use crate::coroutine::stack::StackMem;
use crate::error::OrPanic;

/// What [`Fiber::resume`] returns: the fiber suspended with a value, or
/// finished with its closure's return value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "a fiber's result says whether it finished"]
pub enum FiberResult<Y, R> {
    /// The fiber called [`Yielder::suspend`] with this value; resume it
    /// again to continue.
    Yield(Y),
    /// The fiber's closure returned this value; the fiber is finished.
    Return(R),
}

impl<Y, R> FiberResult<Y, R> {
    /// Whether the fiber suspended.
    pub fn is_yield(&self) -> bool {
        matches!(self, FiberResult::Yield(_))
    }

    /// Whether the fiber finished.
    pub fn is_return(&self) -> bool {
        matches!(self, FiberResult::Return(_))
    }

    /// The suspended value, if the fiber suspended.
    pub fn into_yield(self) -> Option<Y> {
        match self {
            FiberResult::Yield(y) => Some(y),
            FiberResult::Return(_) => None,
        }
    }

    /// The return value, if the fiber finished.
    pub fn into_return(self) -> Option<R> {
        match self {
            FiberResult::Yield(_) => None,
            FiberResult::Return(r) => Some(r),
        }
    }
}

/// A coroutine that its caller runs: [`resume`](Fiber::resume) switches to
/// it, and it switches back with [`Yielder::suspend`] or by returning. No
/// scheduler is involved; it runs on the thread that resumes it.
///
/// `I` is what each resume passes in, `Y` what each suspend hands out, and
/// `R` what the closure returns. See the [module docs](super) for an
/// example, what happens to panics and to a fiber dropped while suspended,
/// and how fibers nest inside tasks.
///
/// # Why `'static`
///
/// The closure, and the inputs `I`, must be `'static`. A fiber is a value:
/// its owner may keep it, move it, or leak it with `std::mem::forget`
/// while it is suspended in the middle of its closure, and a leaked fiber
/// is never resumed or unwound. What its suspended frames own then stays
/// valid (the stack is leaked with them); but a frame that *borrowed*
/// would be left in the middle of a call while the borrowed value dies,
/// and code that relies on calls finishing before their borrows end would
/// break: a `std::thread::scope` (or [`gofer::scope`](crate::scope)) in
/// the fiber, suspended halfway, would let its threads use the dead
/// value. An input `I` that borrows would reach the fiber's frames the same
/// way.
///
/// To borrow, use a [`ScopedFiber`](super::ScopedFiber): its closure and
/// inputs may borrow for `'a`, and it runs only inside its
/// [`scope`](super::ScopedFiber::scope) call, which drops (unwinds) it
/// before returning, so it cannot be leaked once it has run.
///
/// ```compile_fail,E0597
/// use gofer::fiber::{Fiber, Yielder};
/// let text = String::from("borrowed");
/// let mut f = Fiber::new(|_: &Yielder<&str, ()>, s: &str| s.len());
/// f.resume(&text); // the input must be 'static
/// ```
///
/// ```
/// use gofer::fiber::{ScopedFiber, Yielder};
/// let text = String::from("borrowed");
/// let n = ScopedFiber::new(|_: &Yielder<&str, ()>, s: &str| s.len())
///     .scope(|mut f| f.resume(&text).into_return());
/// assert_eq!(n, Some(8));
/// ```
pub struct Fiber<I, Y, R> {
    /// The fiber's saved context while it is created or suspended; `None`
    /// while a resume runs it and once it has finished.
    ctx: Option<Context>,
    /// Its stack; back in the pool (`None`) once it has finished.
    stack: Option<StackMem>,
    /// Its entry in the registry of fiber stacks (which the overflow
    /// handler and the panic hook search by address), until it finishes.
    registration: Option<Registration>,
    /// The name given to its builder; the registry points at it.
    name: Option<Box<str>>,
    /// Usable bytes of its stack.
    stack_size: usize,
    /// Inputs go in, values come out; and neither `Send` nor `Sync`: the
    /// fiber's stack may hold values tied to the thread that runs it.
    _types: PhantomData<Markers<I, Y, R>>,
}

/// What a [`Fiber`] says about its type parameters: `I` goes in, `Y` and
/// `R` come out (the variance of `fn(I) -> (Y, R)`), and the raw pointer
/// makes it neither `Send` nor `Sync`.
type Markers<I, Y, R> = (fn(I) -> (Y, R), *mut ());

impl<I, Y, R> Fiber<I, Y, R> {
    /// Makes a fiber that will run `f` on a stack of its own, of the
    /// default size ([`DEFAULT_STACK_SIZE`](crate::DEFAULT_STACK_SIZE)).
    /// Nothing runs until the first [`resume`](Self::resume), whose input
    /// becomes `f`'s second argument.
    ///
    /// `f` and the inputs must be `'static` (see "Why `'static`" on
    /// [`Fiber`]); [`ScopedFiber`](super::ScopedFiber) lifts that.
    ///
    /// # Panics
    /// If no stack can be had (the process holds as many guarded stacks as
    /// it may); use [`Builder::build`](super::Builder::build) to get the
    /// error instead.
    #[track_caller]
    pub fn new<F>(f: F) -> Fiber<I, Y, R>
    where
        F: FnOnce(&Yielder<I, Y>, I) -> R + 'static,
        I: 'static,
    {
        super::Builder::new()
            .build(f)
            .or_panic("gofer: cannot create a fiber")
    }

    /// Makes a fiber on `stack`, moving `f` onto it (the priming switch).
    ///
    /// # Safety
    /// If `F` or `I` is not `'static`, the fiber may hold borrows on its
    /// stack while suspended, and a suspended frame that borrows must not
    /// be abandoned while what it borrows dies (a `std::thread::scope` in
    /// it would let its threads run on). So the caller must make sure that
    /// once the fiber has been resumed, it is dropped (which unwinds it)
    /// before those borrows end, and never leaked: `ScopedFiber::scope`
    /// keeps it in its own frame for that. Before the first resume nothing
    /// has run, and leaking it only leaks the closure.
    pub(super) unsafe fn with_stack<F>(stack: StackMem, name: Option<Box<str>>, f: F) -> Self
    where
        F: FnOnce(&Yielder<I, Y>, I) -> R,
    {
        crate::coroutine::overflow::install();
        crate::coroutine::panic_hook::install();
        let id = stack.top() as usize;
        let record = registry::Entry {
            guard: stack.guard(),
            bottom: stack.bottom() as usize,
            top: stack.top() as usize,
            name: name.as_deref(),
        };
        // SAFETY: the name is a heap string owned by the Fiber, which neither
        // changes nor drops it before `finish` unregisters (and a leaked
        // Fiber leaks both).
        let registration = unsafe { registry::register(&record) };
        // SAFETY: the StackMem outlives the context: both live in this
        // Fiber, which gives the stack back only once the fiber has finished
        // and is never resumed again.
        let ctx = unsafe { Context::new(&stack.as_context_stack(), entry::<F, I, Y, R>) };
        let mut fiber = Fiber {
            ctx: None,
            stack_size: stack.size(),
            stack: Some(stack),
            registration,
            name,
            _types: PhantomData,
        };
        let mut prime = Prime { f: Some(f), id };
        // The fiber moves the closure off `prime` and switches straight back.
        let t = fiber.switch_in(ctx, &mut prime as *mut Prime<F> as usize);
        fiber.ctx = Some(t.context);
        fiber
    }

    /// Runs the fiber until it suspends or finishes, handing it `input`: the
    /// first resume passes it to the closure, later ones return it from
    /// [`Yielder::suspend`].
    ///
    /// Returns [`FiberResult::Yield`] with the suspended value, or
    /// [`FiberResult::Return`] with the closure's return value (the fiber is
    /// then finished).
    ///
    /// # Panics
    /// - If the fiber's closure panics: the panic continues from here (the
    ///   fiber is then finished, and its stack back in the pool).
    /// - If the fiber has finished (it returned or panicked).
    #[inline]
    #[track_caller]
    pub fn resume(&mut self, input: I) -> FiberResult<Y, R> {
        let Some(ctx) = self.ctx.take() else {
            finished();
        };
        let mut exchange = Exchange::<I, Y, R>::new(Some(input));
        let t = self.switch_in(ctx, &mut exchange as *mut Exchange<I, Y, R> as usize);
        match t.data {
            YIELDED => {
                self.ctx = Some(t.context);
                // SAFETY: YIELDED: the fiber wrote `output` (protocol.rs).
                FiberResult::Yield(unsafe { exchange.take_output() })
            }
            RETURNED => {
                self.finish();
                // SAFETY: RETURNED: the fiber wrote `done`.
                FiberResult::Return(unsafe { exchange.take_done() })
            }
            PANICKED => {
                self.finish();
                // SAFETY: PANICKED: the fiber wrote `panic`.
                resume_unwind(unsafe { exchange.take_panic() })
            }
            _ => unreachable!("gofer: a fiber unwound without being asked to"),
        }
    }

    /// Switches into the fiber with `data` in the transfer's data word,
    /// until it switches back.
    #[inline(always)]
    fn switch_in(&mut self, ctx: Context, data: usize) -> Transfer {
        debug_assert!(self.stack.is_some());
        // SAFETY: `ctx` is this fiber's saved context (or a fresh one on its
        // stack), taken out of `self.ctx` so that it is resumed once; the
        // stack is alive (`self.stack`); `data` points at a Prime or an
        // Exchange of the right types in our caller's frame, which stays
        // alive and untouched while we wait here.
        unsafe { ctx.resume(data) }
    }

    /// The fiber finished: it leaves the registry, and its stack goes back
    /// to the pool.
    fn finish(&mut self) {
        self.ctx = None;
        if let Some(r) = self.registration.take() {
            registry::unregister(r);
        }
        if let Some(stack) = self.stack.take() {
            pool::free(stack);
        }
    }

    /// Whether the fiber has finished: its closure returned, panicked, or
    /// was unwound. A finished fiber cannot be resumed.
    pub fn is_finished(&self) -> bool {
        self.ctx.is_none()
    }

    /// The name given to its [`Builder`](super::Builder), if any.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Usable bytes of its stack (the requested size rounded up to whole
    /// pages).
    pub fn stack_size(&self) -> usize {
        self.stack_size
    }

    /// Unwinds a created or suspended fiber (see "Dropping a suspended
    /// fiber" in the module docs).
    #[cold]
    fn force_unwind(&mut self, mut ctx: Context) {
        loop {
            let mut exchange = Exchange::<I, Y, R>::new(None);
            let t = self.switch_in(ctx, &mut exchange as *mut Exchange<I, Y, R> as usize);
            match t.data {
                UNWOUND => {
                    self.finish();
                    return;
                }
                RETURNED => {
                    // The fiber caught the unwind and returned: drop its
                    // value.
                    self.finish();
                    // SAFETY: RETURNED: the fiber wrote `done`.
                    drop(unsafe { exchange.take_done() });
                    return;
                }
                PANICKED => {
                    self.finish();
                    // SAFETY: PANICKED: the fiber wrote `panic`.
                    let payload = unsafe { exchange.take_panic() };
                    if std::thread::panicking() {
                        // Already unwinding: a second panic out of a drop
                        // would abort the process. Report it instead.
                        let m = crate::error::panic_message(payload.as_ref())
                            .unwrap_or("<non-string payload>");
                        eprintln!(
                            "gofer: {} panicked while it was being unwound: {m}",
                            registry::FiberLabel(self.name())
                        );
                        std::mem::forget(payload);
                        return;
                    }
                    resume_unwind(payload);
                }
                _ => {
                    // YIELDED: it cannot suspend once unwinding (suspend
                    // re-raises the unwind), but a yielder of another fiber
                    // could switch out from this one's stack; keep asking.
                    debug_assert_eq!(t.data, YIELDED);
                    ctx = t.context;
                }
            }
        }
    }
}

/// Resuming a finished fiber: a clear panic.
#[cold]
#[inline(never)]
#[track_caller]
fn finished() -> ! {
    panic!("gofer: resumed a fiber that has finished (it returned, panicked or was unwound)")
}

impl<I, Y, R> Drop for Fiber<I, Y, R> {
    fn drop(&mut self) {
        if let Some(ctx) = self.ctx.take() {
            self.force_unwind(ctx);
        }
    }
}

impl<I, Y, R> fmt::Debug for Fiber<I, Y, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fiber")
            .field("name", &self.name())
            .field("stack_size", &self.stack_size())
            .field("finished", &self.is_finished())
            .finish()
    }
}
