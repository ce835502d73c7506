//! A task's budget of IO operations that complete without waiting.
//!
//! A task parks only when its socket makes it wait. One whose sockets
//! never do (a listener with a deep accept queue, a stream whose data is
//! already there) would otherwise keep its thread for as long as that
//! lasts: every other task queued there starves, and the Dispatcher, after
//! 10 ms, counts the thread as blocked. So every operation spends one unit
//! of the running task's budget, and the one that finds it spent yields
//! the thread first (tokio's coop budget; Go gets the same from
//! preemption). A wait refills the budget.
//!
//! The budget is kept per thread, for the task that last spent from it: a
//! different task, or a task back after a wait, starts afresh. A task
//! that switched out for another reason (a channel, a lock) and comes
//! back to the same thread with no other task's IO in between keeps its
//! count, which at worst makes one yield come early.

use std::cell::Cell;

use crate::runtime::context;

/// Operations a task may complete in a row before one of them yields.
/// At a few microseconds each, a task yields every millisecond or so, far
/// below the Dispatcher's 10 ms, and the switch costs well under 1 %.
const BUDGET: u32 = 128;

thread_local! {
    /// The task that last spent here (its header's address) and how many
    /// operations it completed in a row.
    static SPENT: Cell<(usize, u32)> = const { Cell::new((0, 0)) };
}

/// Spends one unit for the running task; if its budget was spent, yields
/// the thread first. Outside a task it does nothing.
pub(crate) fn spend() {
    let Some(task) = context::current_task_ptr() else {
        return;
    };
    if take(task as usize) {
        crate::runtime::task::park::yield_now();
    }
}

/// The running task had to wait: its next operations start a new budget.
pub(crate) fn refill() {
    if let Some(task) = context::current_task_ptr() {
        set(task as usize, 0);
    }
}

/// Counts one operation of `task` here; true when that exhausts its budget
/// (the count starts again).
// Thread-local accesses are never inlined: a task may resume on another
// thread after any switch (see `runtime/context.rs`).
#[inline(never)]
fn take(task: usize) -> bool {
    SPENT.with(|c| {
        let (last, n) = c.get();
        let n = if last == task { n + 1 } else { 1 };
        if n > BUDGET {
            c.set((task, 0));
            true
        } else {
            c.set((task, n));
            false
        }
    })
}

#[inline(never)]
fn set(task: usize, n: u32) {
    SPENT.with(|c| c.set((task, n)));
}
