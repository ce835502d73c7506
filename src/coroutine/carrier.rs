//! Panic carriers: moving one unit of std's per-thread panic count off a
//! thread, or onto it.
//!
//! std counts panics per thread: a panic (or a `resume_unwind`) raises the
//! count of the thread it starts on, and the `catch_unwind` that ends the
//! unwind lowers the count of the thread it ends on. `thread::panicking()`
//! reads that count, and so does every `std::sync::Mutex` guard (it
//! poisons the lock when it is dropped while the count is higher than when
//! it was taken). std offers no way to read, save or set the count.
//!
//! Tasks share their thread, so a task that switches out in the middle of
//! an unwind would leave its count on the thread for the next task to see:
//! a healthy neighbour would answer `panicking()` true and poison every
//! std lock it releases. The runtime keeps the count the task's own by
//! moving it with carriers (`runtime/task/unwind_bank.rs` says when).
//!
//! A carrier is a tiny coroutine suspended in the middle of an unwind of
//! its own: [`Carrier::start`] runs it until its unwind has begun (which
//! raised the count of the thread that started it) and its first cleanup
//! switches back out; [`Carrier::finish`] lets that unwind run to its
//! `catch_unwind`, which lowers the count of the thread that finishes it.
//! So one unit moves from the starting thread's count to nobody's (while
//! the carrier is suspended), and then off the finishing thread's.
//!
//! ```text
//!  carrier stack                          the thread running it
//!  -------------                          ---------------------
//!  start:  catch_unwind(|| {              count + 1 (resume_unwind)
//!            let _hold = Hold;
//!            resume_unwind(..)    -----> unwinding reaches Hold::drop,
//!          })                             which switches back to the starter
//!  ... suspended, on no thread ...
//!  finish: Hold::drop returns, the unwind goes on to catch_unwind:
//!                                         count - 1 (the catch), then the
//!                                         carrier switches back for good
//! ```
//!
//! This relies on what the runtime already relies on for tasks that unwind
//! across a switch: an unwind in progress carries no state of its thread
//! between its cleanups (the Itanium unwinder keeps it in the exception
//! object, which the suspended frames hold), and std's count is updated
//! only where the unwind starts and where it is caught.

use std::panic::{self, AssertUnwindSafe};

use context::{Context, Transfer};

use super::stack::{self, StackMem};

/// Stack of one carrier: its frames are the trampoline, `catch_unwind`,
/// `resume_unwind` and the unwinder's (a few KiB at most).
const CARRIER_STACK_SIZE: usize = 64 * 1024;

/// A coroutine suspended in the middle of an unwind of its own (module
/// docs). Holds one unit of panic count that belongs to no thread: started
/// on one thread, it must be finished on a thread whose count it may lower.
pub(crate) struct Carrier {
    /// Where the carrier waits: inside `Hold::drop`.
    ctx: Context,
    /// Its stack, alive until the carrier has finished.
    stack: StackMem,
}

// SAFETY: a suspended carrier runs nothing until it is finished, and holds
// no reference to the thread that started it: its frames reference only its
// own stack and the exception object on the heap (module docs). Finishing it
// on another thread is its purpose.
unsafe impl Send for Carrier {}

/// The payload of a carrier's unwind.
struct CarrierPayload;

/// Where a carrier switches to next: the starter while it is suspended, the
/// finisher once it is resumed. Lives on the carrier's stack.
struct Back(Option<Context>);

/// The cleanup a carrier's unwind reaches first: switches back out, leaving
/// the unwind suspended until the carrier is finished.
struct Hold(*mut Back);

impl Drop for Hold {
    fn drop(&mut self) {
        // SAFETY: `self.0` points at the `Back` in `carrier_main`'s frame,
        // below this one on the same stack, alive for the carrier's whole
        // run; nobody else touches it while the carrier runs.
        let back = unsafe { &mut *self.0 };
        let Some(starter) = back.0.take() else {
            crate::sys::fatal::fatal("a panic carrier lost its starter");
        };
        // SAFETY: `starter` is the context suspended in `Carrier::start`,
        // waiting for exactly this switch.
        let t = unsafe { starter.resume(0) };
        // Resumed by `Carrier::finish`, on whichever thread: go back there
        // once the unwind is over.
        back.0 = Some(t.context);
    }
}

extern "C" fn carrier_main(t: Transfer) -> ! {
    let mut back = Back(Some(t.context));
    let hold_back = &mut back as *mut Back;
    // The unwind starts here (count + 1 on the starter's thread) and ends
    // at this catch (count - 1 on the finisher's).
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        let _hold = Hold(hold_back);
        panic::resume_unwind(Box::new(CarrierPayload));
    }));
    match caught {
        Err(payload) if payload.is::<CarrierPayload>() => drop(payload),
        _ => crate::sys::fatal::fatal("a panic carrier's unwind went astray"),
    }
    let Some(finisher) = back.0.take() else {
        crate::sys::fatal::fatal("a panic carrier lost its finisher");
    };
    // SAFETY: `finisher` is the context suspended in `Carrier::finish`; it
    // never resumes this stack again (it frees it).
    unsafe { finisher.resume(0) };
    crate::sys::fatal::fatal("a finished panic carrier was resumed");
}

impl Carrier {
    /// Starts a carrier on this thread: raises this thread's panic count by
    /// one. `None` if no stack could be had.
    ///
    /// Must not be called while this thread runs its panic hook (std would
    /// abort: a panic "while processing a panic").
    pub(crate) fn start() -> Option<Carrier> {
        let stack = StackMem::new(stack::round_to_pages(CARRIER_STACK_SIZE)).ok()?;
        let s = stack.as_context_stack();
        // SAFETY: the stack outlives the context: both live in the Carrier,
        // which drops the stack only after the carrier finished.
        let ctx = unsafe { Context::new(&s, carrier_main) };
        // SAFETY: a fresh context; it switches back from `Hold::drop`.
        let t = unsafe { ctx.resume(0) };
        Some(Carrier {
            ctx: t.context,
            stack,
        })
    }

    /// Finishes the carrier on this thread: lowers this thread's panic
    /// count by one.
    ///
    /// The caller makes sure this thread's count is at least one (std
    /// would wrap it below zero otherwise).
    pub(crate) fn finish(self) {
        let Carrier { ctx, stack } = self;
        // SAFETY: the carrier is suspended in `Hold::drop`, waiting to be
        // resumed once; it switches back here after its catch, and never
        // runs on `stack` again.
        unsafe { ctx.resume(0) };
        drop(stack);
    }
}
