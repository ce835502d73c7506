//! When a hook steps aside: the checks every hooked call makes first, in a
//! few loads, to decide whether the call is gofer's at all.
//!
//! A call goes straight to libc, exactly as without the hooks, on a plain
//! thread (outside a task), on stdio, in a forked child, and while a hook
//! runs runtime code of its own (the recursion guard). This file owns that
//! guard, the fork flag and the errno accessors; it decides nothing about
//! descriptors (that is `io_loop.rs`).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use libc::c_int;

use super::locks;
use crate::runtime::context;

thread_local! {
    /// Set while a hook runs runtime code that could make hooked calls of
    /// its own (registering with the reactor: an allocation, an epoll
    /// descriptor): those go straight to libc.
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Set in a child process made by `fork` (the handler is registered with
/// `pthread_atfork` when the first scheduler is built). The child is a copy
/// of one thread of the parent, maybe in the middle of a task, and shares
/// the parent's epoll instance: every hooked call there goes straight to
/// libc, and nothing touches the reactor or the queues it copied.
static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn in_forked_child() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Runs `f` with the recursion guard set.
pub(super) fn guarded<R>(f: impl FnOnce() -> R) -> R {
    set_in_hook(true);
    let r = f();
    set_in_hook(false);
    r
}

// The guard's accessors are never inlined: a hook that waits in a
// migratable task (`migrate_started_tasks(true)`, `Builder::migratable`,
// chaos mode) may resume on another thread, and an inlined thread-local
// access could reuse the address of the thread it started on.
#[inline(never)]
fn set_in_hook(on: bool) {
    IN_HOOK.with(|g| g.set(on));
}

#[inline(never)]
fn in_hook() -> bool {
    IN_HOOK.with(Cell::get)
}

/// Whether a call must go straight to libc whatever it is: inside a hook's
/// own runtime code, or in a forked child.
pub(super) fn bypass() -> bool {
    FORKED.load(Ordering::Relaxed) || in_hook()
}

/// Whether this is a child process made by `fork` (see [`FORKED`]).
pub(super) fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// Standard input, output and error: calls on them never park. std holds
/// its stdio locks across them, and those locks belong to the thread: a
/// task parked while holding one would let the next task on the thread
/// re-enter it.
pub(super) fn is_stdio(fd: c_int) -> bool {
    (0..=2).contains(&fd)
}

pub(super) fn errno() -> c_int {
    // SAFETY: errno's location is valid for the calling thread.
    unsafe { *libc::__errno_location() }
}

pub(super) fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
}

/// Whether the caller runs inside a gofer task.
pub(super) fn in_task() -> bool {
    context::current_task_ptr().is_some()
}

/// Whether a hook may switch the calling task out for a wait (through the
/// reactor, the timers, the futex table or the blocking pool): inside a
/// task, outside the hooks' own runtime code, not in a forked child, and
/// while the thread holds no C lock (`locks.rs`). Every hook that can wait
/// asks this before anything else; a `false` sends the call to libc, to be made on the thread as on
/// a plain thread.
///
/// The C-lock condition: a task parked while holding a `pthread_mutex_t`
/// would let its thread run a sibling, and a sibling locking the same
/// mutex would block the thread its holder needs to resume, for good. So
/// a holder's calls run in place. The count is the thread's, and it is
/// exactly the running task's: no task switches out here while it is not
/// zero, so it is zero at every switch a hook makes, and the task that
/// runs next counts only its own locks (the module docs of `locks.rs`).
///
/// A task in the middle of an unwind waits like any other: the loop takes
/// its share of std's per-thread panic count off the thread while it is
/// parked and puts it back when it resumes (`runtime/task/unwind_bank.rs`), so
/// the next task of the thread neither answers `panicking()` true nor
/// panics "while processing a panic". Blocking the thread instead would
/// deadlock an unwinding task whose destructor waits for a lock that a
/// parked neighbour holds.
#[inline(never)] // reads thread-locals: never inlined into a path that switches
pub(super) fn may_wait() -> bool {
    !bypass() && in_task() && !locks::held()
}

/// Registers the fork handler, once per process (when the first scheduler
/// is built).
pub(super) fn register_fork_handler() {
    static FORK_HANDLER: Once = Once::new();
    FORK_HANDLER.call_once(|| {
        // SAFETY: a handler that only stores to an atomic, which is
        // async-signal-safe, as a forked child of a threaded process needs.
        unsafe { libc::pthread_atfork(None, None, Some(in_forked_child)) };
    });
}
