//! [`unblock`]: a blocking call made on the blocking pool while the calling
//! task parks, so that its Processer's thread runs other tasks meanwhile.
//!
//! A started task stays on the thread where it first ran, so a call that
//! blocks that thread stalls every task bound to it. `unblock` moves the
//! *call* off the thread, never the task: the task parks, a pool thread
//! (`runtime/blocking/pool.rs`) makes the call, and the task resumes on its own
//! Processer with the result, as tokio's `spawn_blocking` and Go's system
//! calls do.
//!
//! # The hand-off
//!
//! The call, its result slot, the task's handle and a `done` flag live in a
//! [`Call`] on the task's own stack; the pool gets a pointer to it.
//!
//! ```text
//!  task T (on Processer P)                   pool thread B
//!  1. Call { f, out: None, done: false }
//!     on T's stack; submit &Call
//!  2. loop: done? (Acquire) else park        1. take f, run it (panics caught)
//!     (switch out; P runs other tasks)       2. out = result; take T's handle
//!                                            3. done = true (Release)
//!                                               from here B never touches Call
//!                                            4. unpark T (its own handle)
//!  3. done: read out; return it, or
//!     resume the panic
//! ```
//!
//! # Why borrowing from the task's stack is sound
//!
//! `f` need not be `'static`: it may borrow the caller's locals, and the
//! `Call` itself is a local. Both stay valid until B's step 3, because:
//!
//! - T does not return from `unblock` until it has seen `done` (step 2 of
//!   T): park returns spuriously at most, and the loop parks again. Nothing
//!   in the loop can unwind.
//! - A parked task's stack stays where it is: a stackful coroutine is not
//!   moved or copied while parked, so the addresses B holds stay good.
//! - Nothing frees a task that has not finished, and nothing unwinds it
//!   out of this wait: the loop parks with `park_on`, which does not look
//!   at cancellation, so a cancelled task stays until `done` and unwinds
//!   at its next cancellable wait after `unblock` returns. Shutdown
//!   (`shutdown_now` included, which cancels) waits until every task has
//!   finished (`alive == 0`) before it stops threads, so a task parked
//!   here is waited for, call included, and its stack is never freed under
//!   B. A `shutdown_timeout` that gives up returns with the task still
//!   alive and its stack in place. The pool joins its threads only after
//!   that.
//! - B reads nothing of `Call` after step 3: it moved T's handle out in
//!   step 2, and that handle (a counted reference to T's cell) keeps the
//!   header alive for the unpark even if T has meanwhile seen `done`
//!   (woken by something else), returned and finished. The late unpark
//!   then leaves a token, and T's next park may return spuriously, which
//!   park allows.
//!
//! The orderings: `done`'s Release store in B pairs with T's Acquire load,
//! so `out` (written before) is visible to T when it sees `done`.

use std::cell::UnsafeCell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::runtime::blocking::pool::Job;
use crate::runtime::context;
use crate::runtime::task::park::{self, Task};
use crate::runtime::task::wait::WaitOn;

/// Runs `f` on a blocking-pool thread while the calling task parks, and
/// returns what `f` returns.
///
/// Use it for a call that blocks its OS thread and has no non-blocking form
/// in gofer: file system calls (or use [`fs`](crate::fs), built on this),
/// a blocking library, DNS resolution, a CPU-heavy computation. The task's
/// Processer runs other tasks meanwhile, and the task resumes on the same
/// Processer (so its thread-locals are those it left).
///
/// ```
/// let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
/// let h = sched.spawn(|| {
///     let name = String::from("Cargo.toml");
///     // `f` may borrow from the task's stack.
///     gofer::unblock(|| std::fs::metadata(&name).map(|m| m.len()))
/// });
/// assert!(h.join().unwrap().unwrap() > 0);
/// sched.shutdown();
/// ```
///
/// - Outside a task (on a plain thread), `f` runs in place, on the caller's
///   thread.
/// - `f` may borrow from the caller: `unblock` returns only after `f` has
///   (see the module source for why that holds).
/// - A panic in `f` is caught on the pool thread and resumed in the caller,
///   as if `f` had run in place.
/// - The pool belongs to the task's scheduler. It starts threads as calls
///   need them, up to
///   [`SchedulerBuilder::blocking_threads`](crate::SchedulerBuilder::blocking_threads)
///   (512 by default); further calls wait for a free thread
///   ([`Stats::blocking_queued`](crate::Stats::blocking_queued)). A thread
///   idle for
///   [`blocking_idle_timeout`](crate::SchedulerBuilder::blocking_idle_timeout)
///   (10 s by default) exits. If the pool cannot start any thread, `f` runs
///   in place.
/// - A task dump shows a task in here as parked on `unblock`, with how
///   long. Shutdown waits for such a task like for any other: the call
///   runs to its end. So does cancellation
///   ([`JoinHandle::cancel`](crate::JoinHandle::cancel),
///   [`Scheduler::shutdown_now`](crate::Scheduler::shutdown_now)): `f`
///   cannot be interrupted, so the task waits for it and unwinds at its
///   next cancellable wait once `unblock` has returned.
///
/// `f` runs on another thread: it sees that thread's thread-locals, and
/// should not call gofer's task operations (it is not a task; `park` there
/// parks the pool thread). Shutting down the task's own scheduler from `f`
/// is refused as it is from the task itself (the scheduler would wait for
/// the task, which waits for `f`): `shutdown_timeout` and
/// `shutdown_now_timeout` return
/// [`ShutdownError::FromOwnTask`](crate::ShutdownError::FromOwnTask),
/// `shutdown` and `shutdown_now` panic.
pub fn unblock<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let Some(sched) = context::current_scheduler() else {
        return f();
    };
    let task = park::current();
    if !task.is_coroutine() {
        // A Processer thread outside any task (a destructor its loop runs).
        return f();
    }
    let call = Call {
        f: UnsafeCell::new(Some(f)),
        out: UnsafeCell::new(None),
        task: UnsafeCell::new(Some(task)),
        done: AtomicBool::new(false),
    };
    // SAFETY: `run::<F, T>` matches the data's type, catches panics (does
    // not unwind), and is sound on another thread: `F` and `T` are Send, and
    // `Task` is Send.
    let job = unsafe { Job::new(run::<F, T>, &call as *const Call<F, T> as *const ()) };
    // SAFETY: on Ok, `call` stays in place on this stack until `run` has
    // set `done`: the loop below does not exit before, and this task's
    // stack is neither moved nor freed while it parks (module docs).
    match unsafe { sched.blocking.submit(job) } {
        Ok(()) => {
            drop(sched);
            while !call.done.load(Ordering::Acquire) {
                park::park_on(WaitOn::Unblock);
            }
        }
        Err(_) => {
            // Not run, and never will be: make the call here.
            drop(sched);
            // SAFETY: the job was refused, so no other thread has `call`.
            unsafe { run::<F, T>(&call as *const Call<F, T> as *const ()) };
        }
    }
    match call.out.into_inner() {
        Some(Ok(v)) => v,
        Some(Err(payload)) => panic::resume_unwind(payload),
        None => unreachable!("unblock: done without a result"),
    }
}

/// One call in flight, on the calling task's stack (module docs).
struct Call<F, T> {
    /// The call; taken by the thread that runs it.
    f: UnsafeCell<Option<F>>,
    /// Its result or panic; written before `done`.
    out: UnsafeCell<Option<std::thread::Result<T>>>,
    /// The task to wake; moved out before `done`.
    task: UnsafeCell<Option<Task>>,
    /// Set (Release) once `out` holds the result; after that the runner
    /// no longer touches the `Call`.
    done: AtomicBool,
}

/// Runs the call at `p` (a `Call<F, T>`), publishes its result and wakes
/// the task. Never unwinds.
///
/// # Safety
///
/// `p` points at a live `Call<F, T>` that nobody else accesses until
/// `done` is set, and this runs once for it.
unsafe fn run<F, T>(p: *const ())
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    // SAFETY: the caller's contract: a live Call<F, T>, ours alone until
    // `done`.
    let call = unsafe { &*(p as *const Call<F, T>) };
    // SAFETY: as above: the fields are ours until `done`.
    let (f, task) = unsafe { ((*call.f.get()).take(), (*call.task.get()).take()) };
    let f = f.expect("unblock: call run twice");
    let out = panic::catch_unwind(AssertUnwindSafe(f));
    // SAFETY: as above; the task reads `out` only after `done`.
    unsafe { *call.out.get() = Some(out) };
    // Release: pairs with the task's Acquire load of `done`, publishing
    // `out`. From here `call` may be gone.
    call.done.store(true, Ordering::Release);
    if let Some(task) = task {
        task.unpark();
    }
}
