//! Sending a hooked call to the blocking pool: for the calls epoll cannot
//! wait for (regular files, locks, children, name lookups, waits on several
//! descriptors), made inside a task.
//!
//! [`offload`] makes the real call on a pool thread through the machinery
//! of [`unblock`](crate::unblock): the task parks, its Processer's thread
//! runs other tasks, and the task resumes on its own thread with the
//! call's return value and its `errno`.
//!
//! # Invariants
//!
//! 1. The call the pool thread makes is libc's own (`real.rs`), never a
//!    hook. And a pool thread is no task (`in_task()` is false there: no
//!    Processer loop runs on it), so whatever else it calls through a
//!    hooked symbol (`getaddrinfo`'s own reads, say) goes straight to libc
//!    too: an offloaded call never offloads again.
//! 2. `errno` is per thread. The pool thread reads its own right after the
//!    call, and the task sets that value on its own thread once it has
//!    resumed, after everything else it runs on the way back, so the
//!    caller sees the errno the call left, as if made in place.
//! 3. The call's pointers (buffers, paths, result slots) are the caller's,
//!    live for the call by the C contract; the caller's stack stays in
//!    place while it parks, and `unblock` returns only after the call has
//!    (`task/unblock.rs`).
//!
//! Whether a call is offloaded at all is decided by [`may_wait`](super::guard::may_wait): inside a
//! task, not in a forked child nor inside a hook's own runtime code, and
//! not on stdio (std holds its stdio locks across those calls; they stay
//! libc's, as `guard.rs` says).

use libc::c_int;

use super::fdctx::{self, FILE, KNOWN};
use super::guard::{errno, is_stdio, may_wait, set_errno};

/// A call to run on another thread. Its raw pointers are the caller's,
/// valid until the call returns (invariant 3), which is what sending the
/// call needs.
struct SendCall<F>(F);

// SAFETY: the pointers a hooked call carries are the C caller's, valid for
// the call's duration on any thread (the kernel does not care which thread
// reads a buffer), and the caller waits until the call has returned.
unsafe impl<F> Send for SendCall<F> {}

impl<F> SendCall<F> {
    /// The call (a method, so that a closure captures the whole wrapper,
    /// not its field).
    fn into_inner(self) -> F {
        self.0
    }
}

/// Whether a call on `fd` goes to the pool: [`may_wait`](super::guard::may_wait), and `fd` is not
/// stdio.
pub(super) fn offloads_fd(fd: c_int) -> bool {
    !is_stdio(fd) && may_wait()
}

/// Whether `fd` is a regular file or a block device, where every call may
/// wait for the disk and epoll cannot tell when.
pub(super) fn is_file(fd: c_int) -> bool {
    let Some(ctx) = fdctx::get(fd) else {
        return false;
    };
    let st = ctx.state(fd);
    st & KNOWN != 0 && st & FILE != 0
}

/// Runs `call` (a real libc call) on a blocking-pool thread while the task
/// parks, and returns its value with its `errno` set on this thread. The
/// caller checked [`may_wait`](super::guard::may_wait).
pub(super) fn offload<R: Send>(call: impl FnOnce() -> R) -> R {
    let call = SendCall(call);
    let (r, e) = crate::task::unblock::unblock(move || {
        let call = call.into_inner();
        let r = call();
        (r, errno())
    });
    set_errno(e);
    r
}

/// [`offload`] when `fd` is a regular file or block device that
/// [`offloads_fd`]; in place otherwise.
pub(super) fn on_file<R: Send>(fd: c_int, call: impl FnOnce() -> R) -> R {
    if offloads_fd(fd) && is_file(fd) {
        offload(call)
    } else {
        call()
    }
}

/// [`offload`] when [`may_wait`](super::guard::may_wait) and `blocks`; in place otherwise.
pub(super) fn when<R: Send>(blocks: bool, call: impl FnOnce() -> R) -> R {
    if blocks && may_wait() {
        offload(call)
    } else {
        call()
    }
}
