//! The thread-local "where am I": the Processer loop running on this
//! thread and the task switched in on it, and the one routing decision made
//! from there ([`schedule`]).
//!
//! Every access goes through an `#[inline(never)]` function: a task may
//! resume on another thread after any switch, and the compiler, which
//! assumes the thread pointer is constant within a function, could
//! otherwise reuse the old thread's TLS address.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;

use super::shared::Shared;
use crate::runtime::processer::{ProcLocal, Push};
use crate::runtime::task::{Runnable, TaskHeader, TaskRef};

thread_local! {
    static CURRENT_PROC: Cell<*const ProcLocal> = const { Cell::new(std::ptr::null()) };
}

/// Makes `local` the Processer of this thread; returns the previous one
/// (a `block_on` inside a Processer's destructor nests).
#[inline(never)]
pub(crate) fn enter(local: *const ProcLocal) -> *const ProcLocal {
    CURRENT_PROC.with(|c| c.replace(local))
}

/// Restores the Processer [`enter`] replaced.
#[inline(never)]
pub(crate) fn leave(prev: *const ProcLocal) {
    CURRENT_PROC.with(|c| c.set(prev));
}

/// The Processer loop running on this thread (null outside one).
#[inline(never)]
pub(crate) fn current_proc_ptr() -> *const ProcLocal {
    CURRENT_PROC.with(|c| c.get())
}

/// The running task's header, or `None` outside a task.
#[inline(never)]
pub(crate) fn current_task_ptr() -> Option<*const TaskHeader> {
    let p = current_proc_ptr();
    if p.is_null() {
        return None;
    }
    // SAFETY: CURRENT_PROC points at the ProcLocal of this thread's running
    // Processer loop, which outlives every task it switches into.
    let t = unsafe { (*p).current() };
    (!t.is_null()).then_some(t)
}

/// A new reference to the running task's header.
pub(crate) fn current_task() -> Option<TaskRef> {
    current_task_ptr().map(|t| {
        // SAFETY: `t` came from the Runnable the Processer holds while the
        // task runs, so the cell is alive.
        unsafe { TaskRef::clone_from_ptr(t) }
    })
}

/// The scheduler of the Processer running on this thread, if any.
pub(crate) fn current_scheduler() -> Option<Arc<Shared>> {
    let p = current_proc_ptr();
    // SAFETY: see current_task_ptr.
    (!p.is_null()).then(|| unsafe { (*p).sched.clone() })
}

/// Whether this thread is a Processer of `sched` (a pointer comparison, no
/// reference count touched: it sits on the spawn path).
pub(crate) fn on_scheduler(sched: &Shared) -> bool {
    let p = current_proc_ptr();
    // SAFETY: see current_task_ptr.
    !p.is_null() && std::ptr::eq(unsafe { &*(*p).sched }, sched)
}

/// The index of this thread's Processer if it is a core Processer of
/// `sched` (the owner of a timer queue), else `None`.
pub(crate) fn current_core_index(sched: &Shared) -> Option<usize> {
    let p = current_proc_ptr();
    if p.is_null() {
        return None;
    }
    // SAFETY: see current_task_ptr.
    let local = unsafe { &*p };
    (std::ptr::eq(&*local.sched, sched)
        && local.p.kind == crate::runtime::processer::shared::Kind::Core)
        .then_some(local.p.index)
}

/// This thread's Processer if it is one of `sched`'s (a pointer
/// comparison, no reference count touched: it sits on the spawn path).
pub(crate) fn local_of(sched: &Shared) -> Option<*const ProcLocal> {
    let p = current_proc_ptr();
    // SAFETY: see current_task_ptr.
    (!p.is_null() && std::ptr::eq(unsafe { &*(*p).sched }, sched)).then_some(p)
}

/// Enters a newly made task in its scheduler's registry of live tasks
/// (`task/live.rs`): in the shard of `local` (this thread's Processer, one of
/// `sched`'s), else in the outside shard.
pub(crate) fn register_live(sched: &Shared, r: &Runnable, local: Option<*const ProcLocal>) {
    match local {
        // SAFETY: `local_of` gave this thread's running Processer, which
        // outlives the call.
        Some(p) => unsafe { (*p).live.register(r) },
        None => sched.live.register_outside(r),
    }
}

/// Makes a task runnable: on this thread's Processer when it is one of the
/// task's scheduler and may run it (cheap, no atomics beyond the queue's),
/// otherwise on a Processer chosen by the scheduler, which is woken if
/// asleep.
///
/// Woken from a task of its own Processer, it goes to the next-task slot:
/// it runs as soon as the waker switches out.
pub(crate) fn schedule(r: Runnable) {
    schedule_as(r, Push::Next);
}

/// [`schedule`], but to the back of the runnable queue rather than the
/// next-task slot.
pub(crate) fn schedule_queued(r: Runnable) {
    schedule_as(r, Push::Queued);
}

fn schedule_as(r: Runnable, how: Push) {
    let p = current_proc_ptr();
    if !p.is_null() {
        // SAFETY: see current_task_ptr; only shared access is taken.
        let local = unsafe { &*p };
        if Arc::ptr_eq(&local.sched, &r.header().shared) {
            if local.p.may_run(r.header()) {
                local.push_local(r, how);
            } else {
                // This Processer's own reference keeps the scheduler alive
                // through the push (a `block_on` caller spawning, a task
                // pinned elsewhere): no count to touch.
                local.sched.push_remote(r);
            }
            return;
        }
    }
    // Once queued, the task may run, finish and be freed elsewhere before
    // the push returns, and with it what may be the last reference to its
    // scheduler: hold one of our own through the push.
    let sched = r.header().shared.clone();
    sched.push_remote(r);
}

/// The overflow handler's question (`coroutine/overflow.rs`): is `addr` in
/// the guard page of the task running on this thread? If so, says which
/// task overflowed. Async-signal-safe: a thread-local read, the header the
/// faulting thread itself runs, and formatting into `out`.
pub(crate) fn describe_fault(addr: usize, out: &mut dyn fmt::Write) -> bool {
    let Some(task) = current_task_ptr() else {
        return false;
    };
    // SAFETY: the running task's header is alive while it runs, and this
    // thread is the one running it.
    let task = unsafe { &*task };
    match task.guard_range() {
        Some((lo, hi)) if (lo..hi).contains(&addr) => {
            let _ = write!(
                out,
                "{} overflowed its {}-byte stack (fault at {addr:#x} in the guard page); aborting",
                task.label(),
                task.stack_size
            );
            true
        }
        _ => false,
    }
}

/// The panic hook's question (`coroutine/panic_hook.rs`): which task, if
/// any, is panicking on this thread?
pub(crate) fn label_current(out: &mut dyn fmt::Write) -> bool {
    let Some(task) = current_task_ptr() else {
        return false;
    };
    // SAFETY: the running task's header is alive while it runs, and the
    // hook runs on its stack.
    let task = unsafe { &*task };
    let _ = write!(out, "{}", task.label());
    true
}
