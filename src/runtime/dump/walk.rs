//! Walking a parked task's stack, without running any of its code.
//!
//! A parked task's registers are saved on its own stack, at the address its
//! saved context holds. The unwinder can only walk from a running frame, so
//! the walk runs a frame of its own *on top of* the task's saved context:
//! `resume_ontop` switches to the task's stack as if its suspended switch
//! had called [`walk_on_top`], which records the return addresses of every
//! frame below it (the task's own, down to its root) and switches straight
//! back to the dump. None of the task's code runs.
//!
//! ```text
//!   task stack (grows down)         the dump's thread
//!   -----------------------         -----------------
//!   run_root, the user's code ...
//!   park(), suspend()
//!   [saved registers] <- ctx        resume_ontop(ctx, walk_on_top)
//!   walk_on_top: trace the frames
//!     above, then resume the dump -> returns with ctx' (inside walk_on_top)
//! ```
//!
//! The task's context is now `ctx'`, inside `walk_on_top`, and is stored
//! back in place of `ctx` (with `RunState::in_walk` set). When a Processer
//! resumes the task later, with the pointer-sized word every resume passes
//! (even: a pointer to a slot on the Processer's stack, or 0 from a direct
//! switch's on-top function, `switch::file_on_top`, which runs on top of
//! this frame and returns into it), `walk_on_top` returns that transfer to
//! the task's suspended switch, which carries on as if resumed directly. A second dump of the same parked task
//! resumes `walk_on_top` with an odd word (its job's address, tagged) and it
//! walks again, so repeated dumps do not stack frames.
//!
//! All of this needs the right to run the task, which the dump takes from
//! the parked state (`PARKED -> DUMPING`, `task/park_state.rs`): no Processer
//! can resume the task meanwhile. The walk uses the free part of the task's
//! stack below its saved registers; it is made only when at least
//! [`HEADROOM`] bytes are free there, so it cannot reach the guard page (or a
//! dense stack's canary).

use std::ffi::c_void;

use context::{Context, Transfer};

use crate::coroutine::stack::StackMem;

/// The most frames a walk records.
pub(crate) const MAX_FRAMES: usize = 64;

/// Free stack the walk needs below the task's saved registers: the walk's
/// own frame and the system unwinder's (a few KiB: its context and frame
/// state records), with a wide margin, since running out here would fault
/// in the guard page (or damage a dense stack's neighbour).
pub(crate) const HEADROOM: usize = 32 << 10;

/// A walk's input and output, on the dump's stack.
#[repr(C, align(8))]
pub(crate) struct WalkJob {
    /// Return addresses, innermost first.
    pub(crate) ips: [usize; MAX_FRAMES],
    pub(crate) len: usize,
}

impl WalkJob {
    pub(crate) fn new() -> WalkJob {
        WalkJob {
            ips: [0; MAX_FRAMES],
            len: 0,
        }
    }

    pub(crate) fn frames(&self) -> &[usize] {
        &self.ips[..self.len]
    }
}

/// Why a parked task's stack was not walked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NoWalk {
    /// Less than [`HEADROOM`] is free below its saved registers.
    TooDeep,
    /// It parked from inside a fiber it runs, whose stack is not its own.
    OnFiber,
}

/// Walks the stack of the parked task whose saved context is `*ctx` and
/// whose stack is `stack`, into `job`. Replaces `*ctx` with the context to
/// resume the task by, and sets `*in_walk` (see the module docs).
///
/// # Safety
/// The caller holds the task's right to run (so nobody resumes `*ctx`
/// meanwhile), `*ctx` is the task's saved context on `stack`, and
/// `*in_walk` says whether it was saved by an earlier walk.
pub(crate) unsafe fn walk(
    ctx: &mut Option<Context>,
    in_walk: &mut bool,
    stack: &StackMem,
    job: &mut WalkJob,
) -> Result<(), NoWalk> {
    let Some(c) = ctx.take() else {
        return Ok(());
    };
    // SAFETY: `Context` is a `#[repr(C)]` wrapper of one pointer, the saved
    // stack pointer; this copies the address without using it (as
    // `check_dense_stack` does).
    let sp = unsafe { std::mem::transmute_copy::<Context, usize>(&c) };
    let bottom = stack.bottom() as usize;
    let top = stack.top() as usize;
    if !(bottom..=top).contains(&sp) {
        *ctx = Some(c);
        return Err(NoWalk::OnFiber);
    }
    if sp - bottom < HEADROOM {
        *ctx = Some(c);
        return Err(NoWalk::TooDeep);
    }
    job.len = 0;
    // The job's address, tagged odd: a Processer's resume word is always
    // an even address (module docs).
    let word = job as *mut WalkJob as usize | 1;
    // SAFETY: we hold the right to run the task, and `c` is its saved
    // context with HEADROOM free below it. On the first walk, `walk_on_top`
    // runs on top of the task's switch; on a later one, `c` is suspended
    // inside `walk_on_top`, which takes the odd word as a new job. Either
    // way it writes `job` (alive on our stack until it switches back) and
    // switches back at once, running none of the task's code.
    let t = unsafe {
        if *in_walk {
            c.resume(word)
        } else {
            c.resume_ontop(word, walk_on_top)
        }
    };
    *ctx = Some(t.context);
    *in_walk = true;
    Ok(())
}

/// Runs on top of a parked task's stack: records the frames below, switches
/// back to the dump, and when resumed with a normal word, returns it to the
/// task's suspended switch (module docs).
extern "C" fn walk_on_top(mut t: Transfer) -> Transfer {
    loop {
        if t.data & 1 == 0 {
            // A Processer resumes the task: hand it the transfer as if it
            // had switched straight in.
            return t;
        }
        let job = (t.data & !1) as *mut WalkJob;
        // SAFETY: an odd word is the address of a WalkJob on the dump's
        // stack (`walk`), alive and untouched by the dump until we switch
        // back to it below.
        let job = unsafe { &mut *job };
        record(job);
        // SAFETY: `t.context` is the dump's, suspended in `walk` waiting for
        // us; we are on the task's stack, whose right the dump holds.
        t = unsafe { t.context.resume(0) };
    }
}

/// Records the return addresses of the frames that called this one.
#[inline(never)]
fn record(job: &mut WalkJob) {
    let mut n = 0;
    // SAFETY: `trace_unsynchronized` only asks that no other thread use the
    // unwinder's global state unsynchronised at the same time; the system
    // unwinder (libgcc) the crate uses on this target is thread-safe, as
    // std's own backtraces rely on. The closure neither panics nor
    // allocates.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            if n == MAX_FRAMES {
                return false;
            }
            job.ips[n] = frame.ip() as usize;
            n += 1;
            true
        });
    }
    job.len = n;
}

/// One symbolized frame.
#[derive(Clone, Debug)]
pub(crate) struct Symbol {
    pub(crate) name: String,
    pub(crate) file: Option<String>,
    pub(crate) line: Option<u32>,
}

/// The symbols at `ip` (several when calls were inlined there), outermost
/// inlined call last.
pub(crate) fn symbolize(ip: usize) -> Vec<Symbol> {
    let mut out = Vec::new();
    // A return address points after the call; look up the call itself.
    let addr = ip.saturating_sub(1) as *mut c_void;
    backtrace::resolve(addr, |s| {
        out.push(Symbol {
            name: s
                .name()
                .map(|n| format!("{n:#}"))
                .unwrap_or_else(|| "<unknown>".to_owned()),
            file: s.filename().map(|f| f.display().to_string()),
            line: s.lineno(),
        });
    });
    if out.is_empty() {
        out.push(Symbol {
            name: format!("{ip:#x}"),
            file: None,
            line: None,
        });
    }
    out
}

/// Whether a frame belongs to the runtime's machinery rather than to code a
/// reader of a dump wrote (or called on purpose).
fn is_machinery(name: &str) -> bool {
    // `sleep` is a wait a reader looks for, though it lives in the
    // runtime's folder (`runtime/time/sleep.rs`): its frame is kept.
    if name.starts_with("gofer::runtime::time::sleep::") {
        return false;
    }
    const PREFIXES: &[&str] = &[
        "backtrace::",
        "gofer::coroutine::",
        "gofer::runtime::",
        "gofer::runtime::task::park::",
        "gofer::chan::waiter::",
        "gofer::chan::channel::",
        "gofer::sync::waitqueue::",
        "context::",
        "<context::",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Whether a frame is the library's or std's (not the user's).
fn is_library(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "gofer::",
        "<gofer::",
        "std::",
        "<std::",
        "core::",
        "<core::",
        "alloc::",
        "<alloc::",
        "__rust",
        "<unknown>",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p)) || name.starts_with("0x")
}

/// Whether a frame is a task's root (`run_root` and the cell's `run`, which
/// every task's stack starts with).
fn is_root(name: &str) -> bool {
    name.starts_with("gofer::runtime::task::header::run_root")
        || name.contains("gofer::task::join::")
}

/// Trims a task's symbolized frames (innermost first) to what a reader
/// needs: from the innermost frame that is not the runtime's switching
/// machinery, down to the user's outermost frame, without the task's root
/// and std's closure glue beneath it.
///
/// The user's own code may have no frame of its own: a build without debug
/// info (cargo's default release profile) has no record of inlined calls,
/// so a closure inlined into the task's root, or a user function that
/// tail-calls `sleep`, leaves the library's frames right above the root.
/// The glue is only cut below the innermost kept frame, so such a stack
/// still shows where the task waits (`gofer::runtime::time::sleep::sleep`, or the
/// outermost machinery frame when every frame is machinery), never the
/// walker's own frames.
pub(crate) fn trim(frames: &[Symbol]) -> &[Symbol] {
    let end = frames
        .iter()
        .position(|f| is_root(&f.name))
        .unwrap_or(frames.len());
    let frames = &frames[..end];
    let start = frames
        .iter()
        .position(|f| !is_machinery(&f.name))
        .unwrap_or(frames.len().saturating_sub(1));
    trim_below(&frames[start..])
}

/// Trims frames (innermost first) below the task's entry: the task's root
/// and the library glue between it and the user's outermost frame (kept
/// when no other frame would be left). What a blocked thread's backtrace
/// (`blocked_call.rs`), which has no switching frames above, needs.
pub(crate) fn trim_below(frames: &[Symbol]) -> &[Symbol] {
    let end = frames
        .iter()
        .position(|f| is_root(&f.name))
        .unwrap_or(frames.len());
    let mut frames = &frames[..end];
    // Library glue between the user's closure and the root.
    while frames.len() > 1 && frames.last().is_some_and(|f| is_library(&f.name)) {
        frames = &frames[..frames.len() - 1];
    }
    frames
}

/// The text of trimmed frames, one per line (`function`, then `    at
/// file:line` when known).
pub(crate) fn render(frames: &[Symbol]) -> String {
    let mut out = String::new();
    for f in frames {
        out.push_str(&f.name);
        if let (Some(file), Some(line)) = (&f.file, f.line) {
            out.push_str(&format!("\n    at {file}:{line}"));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::runtime::dump::walk::{trim, Symbol};

    fn frames(names: &[&str]) -> Vec<Symbol> {
        names
            .iter()
            .map(|n| Symbol {
                name: (*n).to_owned(),
                file: None,
                line: None,
            })
            .collect()
    }

    fn names(f: &[Symbol]) -> Vec<&str> {
        f.iter().map(|s| s.name.as_str()).collect()
    }

    const WALKER: [&str; 3] = [
        "gofer::runtime::dump::walk::record",
        "gofer::runtime::dump::walk::walk_on_top",
        "gofer::coroutine::switch::suspend",
    ];
    const ROOT: [&str; 3] = [
        "gofer::task::join::TaskCell<F,T>::run",
        "gofer::coroutine::switch::entry",
        "make_fcontext",
    ];

    #[test]
    fn the_users_frames_are_kept_between_the_machinery_and_the_glue() {
        let mid = [
            "gofer::runtime::task::park::park_deadline_on",
            "gofer::runtime::time::sleep::sleep",
            "app::nap",
            "app::main::{{closure}}",
            "core::ops::function::FnOnce::call_once",
        ];
        let all = frames(&[&WALKER[..], &mid[..], &ROOT[..]].concat());
        assert_eq!(
            names(trim(&all)),
            [
                "gofer::runtime::time::sleep::sleep",
                "app::nap",
                "app::main::{{closure}}"
            ]
        );
    }

    #[test]
    fn a_stack_without_a_frame_of_the_users_keeps_where_it_waits() {
        // The user's closure inlined into the root, no debug info to say so.
        let mid = [
            "gofer::runtime::task::park::park_deadline_on",
            "gofer::runtime::time::sleep::sleep",
        ];
        let all = frames(&[&WALKER[..], &mid[..], &ROOT[..]].concat());
        assert_eq!(names(trim(&all)), ["gofer::runtime::time::sleep::sleep"]);
        // Every frame above the root is machinery: the outermost one.
        let mid = [
            "gofer::runtime::task::park::park_on",
            "gofer::runtime::task::park::park",
        ];
        let all = frames(&[&WALKER[..], &mid[..], &ROOT[..]].concat());
        assert_eq!(names(trim(&all)), ["gofer::runtime::task::park::park"]);
    }
}
