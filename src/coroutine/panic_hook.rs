//! Running the panic hook of a task on a stack of its own.
//!
//! When a task panics, Rust calls the panic hook on the panicking stack.
//! The default hook, with `RUST_BACKTRACE` set, resolves symbols there, which
//! takes far more than a small coroutine stack (16 KiB) has: the task would
//! overflow its stack while reporting its panic, and the process would
//! abort. So gofer wraps the installed hook once: outside tasks it calls the
//! previous hook as is; inside a task it first captures the task's frames
//! (cheap on stack; symbols are resolved later), then switches to a fresh
//! [`HOOK_STACK_SIZE`] stack, prints a line naming the task
//! (`gofer: task 17 'reader' panicked on thread 'gofer-0':`, since the
//! previous hook names only the thread), runs the previous hook there,
//! prints the task's backtrace if backtraces are enabled, and switches back. The previous
//! hook's own backtrace, if it prints one, shows only that hook stack.
//!
//! A fiber (`fiber/`) is treated the same way, found by the address of the
//! panicking stack (`registry.rs`): `gofer: fiber 'parser' panicked on
//! thread 'main':`, or
//! `gofer: fiber 'parser' in task 17 'reader' panicked ...` for a fiber that
//! a task resumed. The hook is installed by whoever first needs it: a
//! scheduler when it is built, a fiber when it is created.

use std::backtrace::{Backtrace, BacktraceStatus};
use std::panic::{self, AssertUnwindSafe, PanicHookInfo};
use std::sync::{Once, OnceLock};

use context::{Context, Transfer};

use super::stack::{self, StackMem};

/// Stack for running the hook of a panicking task.
const HOOK_STACK_SIZE: usize = 256 * 1024;

type Hook = Box<dyn Fn(&PanicHookInfo<'_>) + Sync + Send + 'static>;

/// Writes the name of the task running on this thread (`task 17 'reader'`)
/// and returns true, or returns false outside a task.
pub(crate) type Label = fn(out: &mut dyn std::fmt::Write) -> bool;

/// The runtime's question: which task is panicking on this thread?
static TASK_LABEL: OnceLock<Label> = OnceLock::new();

/// Registers the runtime's question (`label` tells a task's panic from a
/// thread's and names the task); the first registration stays.
pub(crate) fn label_tasks_with(label: Label) {
    let _ = TASK_LABEL.set(label);
}

/// Wraps the current panic hook, once per process.
pub(crate) fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev: Hook = panic::take_hook();
        panic::set_hook(Box::new(move |info| hook(&prev, info)));
    });
}

/// Names the coroutine panicking on this thread: `fiber 'parser'`,
/// `task 17 'reader'`, or `fiber 'parser' in task 17 'reader'`. Returns
/// false on a thread's own stack.
#[inline(never)]
fn label_current(out: &mut String) -> bool {
    // An address on the panicking stack: this frame is on it.
    let here = 0u8;
    let sp = std::hint::black_box(&here) as *const u8 as usize;
    let fiber = super::registry::label_at(sp, out);
    let mut task = String::new();
    let in_task = TASK_LABEL.get().is_some_and(|label| label(&mut task));
    match (fiber, in_task) {
        (true, true) => out.push_str(" in "),
        (false, false) => return false,
        _ => {}
    }
    out.push_str(&task);
    true
}

fn hook(prev: &Hook, info: &PanicHookInfo<'_>) {
    let mut label = String::new();
    if !label_current(&mut label) {
        return prev(info);
    }
    // Frames only; symbols are resolved when printed, on the big stack.
    let bt = Backtrace::capture();
    // The previous hook names the thread, a Processer's, which says little
    // about what failed: name the task first.
    let name_task = || {
        let thread = std::thread::current();
        eprintln!(
            "gofer: {label} panicked on thread '{}':",
            thread.name().unwrap_or("<unnamed>")
        );
    };
    let Ok(stack) = StackMem::new(stack::round_to_pages(HOOK_STACK_SIZE)) else {
        name_task();
        return prev(info);
    };
    let mut job = || {
        name_task();
        prev(info);
        if bt.status() == BacktraceStatus::Captured {
            eprintln!("task backtrace:\n{bt}");
        }
    };
    run_on(&stack, &mut job);
}

/// Runs `f` to completion on `stack`, then returns to the caller's stack.
fn run_on(stack: &StackMem, f: &mut dyn FnMut()) {
    extern "C" fn trampoline(t: Transfer) -> ! {
        // SAFETY: `t.data` points at the `&mut dyn FnMut()` on the caller's
        // stack, which stays alive and untouched while the caller is
        // suspended in `resume` below.
        let f = unsafe { &mut *(t.data as *mut &mut dyn FnMut()) };
        // A panic inside a panic hook aborts in std anyway; never unwind
        // through this extern "C" frame.
        if panic::catch_unwind(AssertUnwindSafe(f)).is_err() {
            crate::sys::fatal::fatal("the panic hook panicked");
        }
        // SAFETY: `t.context` is the caller, suspended in `resume`; we never
        // come back to this stack (the caller drops it).
        unsafe { t.context.resume(0) };
        crate::sys::fatal::fatal("a finished panic-hook context was resumed");
    }
    let s = stack.as_context_stack();
    let mut f = f;
    // SAFETY: `stack` outlives the context (it is dropped by our caller after
    // we return, and the context is never resumed again); `f` is alive for
    // the whole excursion, which ends before we return.
    unsafe {
        let ctx = Context::new(&s, trampoline);
        let _ = ctx.resume(&mut f as *mut &mut dyn FnMut() as usize);
    }
}
