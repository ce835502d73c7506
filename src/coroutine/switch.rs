//! Switching between a Processer and a task's coroutine.
//!
//! A Processer thread runs on its own (thread) stack. To run a task it
//! `resume`s the task's [`Context`]; the task runs until it calls
//! [`suspend`], which resumes the Processer's context with a [`Suspend`]
//! reason in the transfer's data word. The Processer then decides what to do
//! with the task (requeue, park, free).
//!
//! ```text
//!   Processer stack                      task stack
//!   ---------------                      ----------
//!   run_task()
//!     ctx.resume(entry slot) ----------> entry(): take closure, run it
//!                                          ... suspend(Yield)
//!     <--------- Transfer{task ctx, Yield}
//!   requeue; later, maybe on
//!   another thread:
//!     ctx.resume(0) -------------------> suspend() returns; saves the new
//!                                          Processer's context in *its* TLS
//! ```
//!
//! The Processer's own context is kept in a thread-local slot: a task that
//! suspends always switches to the Processer of the thread it is running on,
//! which changes when the task migrates. Every thread-local access on this
//! path goes through an `#[inline(never)]` function: the compiler assumes the
//! thread pointer is constant within a function, and a coroutine that
//! resumes on another thread would otherwise reuse the old thread's TLS
//! address.
//!
//! A task may also switch straight into another suspended task, without the
//! Processer loop in between ([`switch_direct`]): `resume_ontop` jumps to
//! the next task's context and runs [`file_on_top`] on *its* stack first,
//! which hands the suspending task's freshly saved context to the runtime
//! (`runtime/processer/direct.rs` files it), then returns into the next task with the
//! Processer's context in the transfer, as if the loop had resumed it:
//!
//! ```text
//!   task T's stack                       task N's stack
//!   --------------                       --------------
//!   switch_direct(N's ctx, handoff)
//!     take the Processer's ctx (TLS)
//!     N.resume_ontop(handoff) ---------> file_on_top(Transfer{T's ctx, handoff}):
//!                                          copy the handoff out, then file T
//!                                          (T may run elsewhere from here on)
//!                                        returns Transfer{Processer ctx, 0} into
//!                                        N's suspended switch, which saves it
//! ```
//!
//! A panic never crosses a context switch: the task's closure runs inside
//! `catch_unwind` (see `task/join.rs`), and `entry` aborts if anything still
//! unwinds to it, since unwinding into the `extern "C"` frame is undefined;
//! [`file_on_top`] does the same for the filing it runs.
//!
//! This layer knows nothing of tasks: what runs at the root of a coroutine
//! is an [`Entry`], and what a switch out means is the [`Suspend`] reason
//! the runtime interprets.

use std::cell::Cell;

use context::{Context, Transfer};

/// Why a task switched out; travels in the transfer's data word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Suspend {
    /// Runnable again: put it at the back of the queue.
    Yield = 0,
    /// Wants to park: the Processer attempts `EMPTY -> PARKED`.
    Park = 1,
    /// Finished: the stack may be recycled.
    Done = 2,
}

impl Suspend {
    fn from_usize(v: usize) -> Suspend {
        match v {
            0 => Suspend::Yield,
            1 => Suspend::Park,
            2 => Suspend::Done,
            _ => unreachable!("bad suspend reason {v}"),
        }
    }
}

/// What runs at the root of a coroutine: a function and its argument.
#[derive(Clone, Copy)]
pub(crate) struct Entry {
    /// Runs to completion on the coroutine's stack. Must not unwind: it
    /// catches the panics of the code it runs.
    ///
    /// # Safety
    /// Whatever `arg` needs to be valid (the maker of the entry says).
    pub(crate) run: unsafe fn(usize),
    /// The argument word handed to `run`.
    pub(crate) arg: usize,
}

/// What the Processer hands a coroutine on its first resume: the entry to
/// run. Lives on the Processer's stack for the duration of the first switch.
pub(crate) type EntrySlot = Option<Entry>;

thread_local! {
    /// The context of the Processer loop on this thread, while a task runs.
    static PROC_CTX: Cell<Option<Context>> = const { Cell::new(None) };
}

#[inline(never)]
fn save_proc_ctx(ctx: Context) {
    PROC_CTX.with(|c| c.set(Some(ctx)));
}

#[inline(never)]
fn take_proc_ctx() -> Context {
    PROC_CTX
        .with(|c| c.take())
        .expect("gofer: suspend called outside a task")
}

/// The first frame of every coroutine.
extern "C" fn entry(t: Transfer) -> ! {
    save_proc_ctx(t.context);
    // SAFETY: the Processer passed a pointer to an EntrySlot on its own stack
    // and stays suspended inside `resume` until we switch back, so the slot
    // is alive and nobody else touches it until then.
    let job = unsafe { (*(t.data as *mut EntrySlot)).take() };
    if let Some(job) = job {
        // `run` catches panics; this outer guard only protects the invariant
        // that nothing unwinds into this extern "C" frame.
        // SAFETY: the maker of the entry (the Processer) vouches for `arg`
        // for as long as the coroutine runs.
        let run = std::panic::AssertUnwindSafe(move || unsafe { (job.run)(job.arg) });
        if std::panic::catch_unwind(run).is_err() {
            crate::sys::fatal::fatal("a panic escaped a task's root frame");
        }
    }
    suspend(Suspend::Done);
    crate::sys::fatal::fatal("a finished task was resumed");
}

/// Makes a fresh coroutine context on `stack`.
pub(crate) fn make_context(stack: &super::stack::StackMem) -> Context {
    let s = stack.as_context_stack();
    // SAFETY: the StackMem outlives the Context: both live in the task's
    // RunState, and the Processer drops the stack only after the task is
    // done (it never resumes a Done context).
    unsafe { Context::new(&s, entry) }
}

/// Switches from the Processer into a task. `data` is a pointer to an
/// [`EntrySlot`] on the first resume and ignored afterwards. Returns the
/// task's saved context and why it switched out.
///
/// # Safety
/// `ctx` must be a suspended task context whose stack is alive, and the
/// caller must hold the task's execution right.
pub(crate) unsafe fn resume(ctx: Context, data: usize) -> (Context, Suspend) {
    // SAFETY: guaranteed by the caller.
    let t = unsafe { ctx.resume(data) };
    (t.context, Suspend::from_usize(t.data))
}

/// Switches from the running task back to its Processer.
///
/// Returns when a Processer (possibly on another thread) resumes the task.
#[inline(never)]
pub(crate) fn suspend(reason: Suspend) {
    let ctx = take_proc_ctx();
    // SAFETY: `ctx` is this thread's Processer loop, suspended in `resume`
    // waiting for us; it is alive for as long as the thread runs tasks.
    let t = unsafe { ctx.resume(reason as usize) };
    // Possibly a different thread now: re-read its TLS (inline(never)).
    save_proc_ctx(t.context);
}

/// What a direct switch ([`switch_direct`]) hands to [`file_on_top`]. Lives
/// on the stack of the coroutine switching out, which may be reused as soon
/// as the filing has published that coroutine: `file_on_top` copies it out
/// first.
struct Handoff {
    /// Files the coroutine that switched out (see [`switch_direct`]).
    file: unsafe fn(usize, Context),
    /// The argument word handed to `file`.
    arg: usize,
    /// The Processer loop's context, carried over to the next coroutine.
    proc: Context,
}

/// Switches from the running task straight into the suspended task `next`,
/// with one context switch: [`file_on_top`] runs on `next`'s stack and
/// calls `file(arg, ctx)` with the running task's saved context `ctx`, to
/// file it; then `next` continues as if its Processer had resumed it
/// (module docs). `file` runs on this thread, before `next` continues, and
/// a panic out of it is fatal.
///
/// Returns when a Processer, or another task's direct switch, resumes the
/// task (possibly on another thread).
///
/// # Safety
/// `next` is a suspended task context whose stack is alive, whose execution
/// right the caller took (it runs from here on), and that is not the
/// running task's own; `file(arg, ctx)` may be called once, on this thread,
/// with the running task's saved context.
#[inline(never)]
pub(crate) unsafe fn switch_direct(next: Context, file: unsafe fn(usize, Context), arg: usize) {
    let mut hand = Handoff {
        file,
        arg,
        proc: take_proc_ctx(),
    };
    // SAFETY: per the contract, `next` may be resumed; `hand` stays alive
    // on our stack until `file_on_top` has copied it out, before it files
    // us (nobody resumes us before that).
    let t = unsafe { next.resume_ontop(&mut hand as *mut Handoff as usize, file_on_top) };
    // Possibly a different thread now: re-read its TLS (inline(never)).
    save_proc_ctx(t.context);
}

/// Runs on the next task's stack at a direct switch (see [`switch_direct`]):
/// files the task that switched out, then hands the next task the
/// Processer's context. Must not unwind: this frame returns into the next
/// task's suspended switch, not into any caller that could catch it.
extern "C" fn file_on_top(t: Transfer) -> Transfer {
    // SAFETY: `data` is the address of the Handoff on the stack of the task
    // that switched out, which is suspended and unfiled: nobody else reads
    // or writes it until `file` below publishes that task. It is copied out
    // before.
    let Handoff { file, arg, proc } = unsafe { std::ptr::read(t.data as *const Handoff) };
    // SAFETY: the caller of `switch_direct` vouches for `file` and `arg`;
    // called once, on the thread of the switch, with the switched-out
    // task's context.
    let run = std::panic::AssertUnwindSafe(move || unsafe { file(arg, t.context) });
    if std::panic::catch_unwind(run).is_err() {
        crate::sys::fatal::fatal("a panic escaped the filing of a task at a direct switch");
    }
    // Data 0: an even word, as every resume passes (a dump's walk frame on
    // top of the next task returns it to the task's switch; `runtime/dump/walk.rs`).
    Transfer::new(proc, 0)
}
