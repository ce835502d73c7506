//! Where fiber stacks come from and go back to.
//!
//! Fibers use the same guarded stacks as tasks (`coroutine/stack.rs`) and
//! the same two-level pools (`coroutine/stacks.rs`), with no scheduler
//! behind them:
//!
//! ```text
//!  fiber finishes -> this thread's pool (LOCAL_POOL_MAX)
//!                      | full: half of it; thread exits: all of it
//!                      v
//!                    the process's fiber pool (FIBER_STACK_CACHE) -> beyond: unmapped
//!
//!  fiber created  <- this thread's pool <- a batch from the process's pool <- mmap
//! ```
//!
//! Only [`DEFAULT_STACK_SIZE`] stacks are pooled; other sizes are mapped
//! and unmapped per fiber. Fiber stacks are always guarded, whatever a
//! scheduler's `dense_stacks` setting: a fiber belongs to no scheduler.
//!
//! A fiber can be created on one thread and finish on another (a task that
//! resumed it moved meanwhile), so every thread-local access here goes
//! through an `#[inline(never)]` function.

use std::cell::RefCell;
use std::io;
use std::sync::OnceLock;

use crate::coroutine::stack::{round_to_pages, StackMem, DEFAULT_STACK_SIZE};
use crate::coroutine::stacks::{LocalStacks, Stacks};

/// Finished fiber stacks the process keeps for reuse, beyond the ones each
/// thread keeps. Smaller than a scheduler's cache: fibers are typically
/// short-lived and few at a time per thread.
const FIBER_STACK_CACHE: usize = 1024;

/// The process's fiber stacks: the shared pool behind every thread's.
fn shared() -> &'static Stacks {
    static SHARED: OnceLock<Stacks> = OnceLock::new();
    SHARED.get_or_init(|| Stacks::new(pooled_size(), FIBER_STACK_CACHE, false))
}

/// The one pooled size: the default, in whole pages.
fn pooled_size() -> usize {
    round_to_pages(DEFAULT_STACK_SIZE)
}

/// A thread's pool; hands its stacks to the process's pool when the thread
/// exits.
struct ThreadPool(LocalStacks);

impl Drop for ThreadPool {
    fn drop(&mut self) {
        shared().give(self.0.drain());
    }
}

thread_local! {
    static POOL: RefCell<ThreadPool> = RefCell::new(ThreadPool(LocalStacks::new(pooled_size())));
}

/// A stack of `size` bytes (page-rounded): from this thread's pool, else a
/// batch from the process's pool, else a fresh mapping.
#[inline(never)]
pub(super) fn alloc(size: usize) -> io::Result<StackMem> {
    POOL.try_with(|p| p.borrow_mut().0.alloc(shared(), size))
        // This thread's pool is gone (a thread-local destructor is
        // creating a fiber): map one.
        .unwrap_or_else(|_| shared().fresh(size))
}

/// Takes a finished fiber's stack back.
#[inline(never)]
pub(super) fn free(stack: StackMem) {
    let mut stack = Some(stack);
    let _ = POOL.try_with(|p| {
        if let Some(s) = stack.take() {
            p.borrow_mut().0.free(shared(), s);
        }
    });
    // This thread's pool is gone: straight to the process's pool.
    if let Some(s) = stack {
        if s.size() == pooled_size() {
            shared().give(vec![s]);
        }
    }
}
