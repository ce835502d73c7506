//! With the `tracing` feature: a task's spans follow it across switches.
//!
//! A task runs in a span of its own (`task`, with its id, name and spawn
//! location), entered while it runs and exited while it is switched out.
//! The spans the task enters itself are recorded here, per thread, by the
//! layer of `gofer::trace` (`on_enter` / `on_exit` call [`entered`] and
//! [`exited`] while a task is switched in); at each switch out the runtime
//! exits them, innermost first, and keeps their ids in the task's run state
//! ([`TaskTrace`]); at the switch back in it enters them again, outermost
//! first. So the thread's current span is always the running task's, and an
//! event a task logs lands in the spans that task entered, never in a span
//! of a task that ran on the thread meanwhile (ARCHITECTURE.md, "Tracing
//! across switches").
//!
//! The two steps are [`switch_in`] and [`switch_out`], called by the
//! Processer loop around its switch into a task (`processer/run.rs`,
//! `run_task`) and by a direct switch for the task leaving and the task
//! arriving (`processer/run.rs`, `begin_direct`). Both run on the thread the
//! task runs on, with the task's execution right. Without any dispatcher
//! set in the process they cost one Relaxed load (tracing's own
//! `has_been_set`) and one test of the run state. Their thread-local access
//! sits in functions that are never inlined and never switch (ARCHITECTURE.md,
//! "Switching").
//!
//! Events at `trace` level, target `gofer`: a park, a wake-up, a rescue and
//! a blocked detection. Each sits behind a check of tracing's global maximum
//! level (a static atomic) before any callsite is touched.

use std::cell::{Cell, RefCell};

use tracing::{Id, Level, Span};

use crate::runtime::task::{Runnable, TaskHeader};

/// What a task carries across switches: its own span and the spans it had
/// entered when it last switched out (outermost first).
pub(crate) struct TaskTrace {
    span: Span,
    stack: Vec<Id>,
}

/// The thread's side: the spans the running task entered, while one with a
/// [`TaskTrace`] is switched in.
struct OnThread {
    /// A task with a trace state is switched in.
    active: Cell<bool>,
    /// The runtime itself enters or exits spans: the layer does not record.
    replaying: Cell<bool>,
    /// The spans the running task entered and has not exited, outermost
    /// first.
    stack: RefCell<Vec<Id>>,
}

thread_local! {
    static ON_THREAD: OnThread = const {
        OnThread {
            active: Cell::new(false),
            replaying: Cell::new(false),
            stack: RefCell::new(Vec::new()),
        }
    };
}

/// Whether a task's switch needs the slow step: a dispatcher exists in the
/// process, or the task was traced before.
#[inline(always)]
fn wanted(state: &Option<Box<TaskTrace>>) -> bool {
    state.is_some() || tracing::dispatcher::has_been_set()
}

/// Before a switch into the task `t`: enters its span, then the spans it had
/// entered, outermost first. On the thread the task is about to run on.
#[inline(always)]
pub(crate) fn switch_in(t: &mut Runnable) {
    if wanted(&t.run().trace) {
        switch_in_slow(t);
    }
}

/// After the task owning `state` switched out (`done`: for good): exits
/// the spans it entered, innermost first, then its own span, and keeps
/// their ids with the task (drops them all if it finished). On the thread
/// it ran on, before anything else runs there.
#[inline(always)]
pub(crate) fn switch_out(state: &mut Option<Box<TaskTrace>>, done: bool) {
    if state.is_some() {
        switch_out_slow(state, done);
    }
}

/// The span of the task `h`.
fn task_span(h: &TaskHeader) -> Span {
    let loc = h
        .spawned_at
        .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
    tracing::span!(
        target: "gofer",
        Level::INFO,
        "task",
        id = h.id.as_u64(),
        name = h.name.as_deref(),
        spawned_at = loc.as_deref(),
    )
}

#[inline(never)]
fn switch_in_slow(r: &mut Runnable) {
    if r.run().trace.is_none() {
        let span = task_span(r.header());
        r.run().trace = Some(Box::new(TaskTrace {
            span,
            stack: Vec::new(),
        }));
    }
    let Some(t) = r.run().trace.as_mut() else {
        return;
    };
    let stack = std::mem::take(&mut t.stack);
    ON_THREAD.with(|o| {
        o.replaying.set(true);
        if let Some(id) = t.span.id() {
            tracing::dispatcher::get_default(|d| d.enter(&id));
        }
        if !stack.is_empty() {
            tracing::dispatcher::get_default(|d| {
                for id in &stack {
                    d.enter(id);
                }
            });
        }
        o.replaying.set(false);
        *o.stack.borrow_mut() = stack;
        o.active.set(true);
    });
}

#[inline(never)]
fn switch_out_slow(state: &mut Option<Box<TaskTrace>>, done: bool) {
    let Some(t) = state.as_mut() else { return };
    ON_THREAD.with(|o| {
        o.active.set(false);
        let stack = std::mem::take(&mut *o.stack.borrow_mut());
        o.replaying.set(true);
        if !stack.is_empty() {
            tracing::dispatcher::get_default(|d| {
                for id in stack.iter().rev() {
                    d.exit(id);
                }
            });
        }
        if let Some(id) = t.span.id() {
            tracing::dispatcher::get_default(|d| d.exit(&id));
        }
        o.replaying.set(false);
        t.stack = stack;
    });
    if done {
        // Its span closes here (spans a finished task never exited, say a
        // guard it leaked, are dropped from the record).
        *state = None;
    }
}

/// The layer's `on_enter`: the running task entered span `id`. Ignored on
/// a thread with no traced task switched in, and for the runtime's own
/// re-entries.
#[inline(never)]
pub(crate) fn entered(id: &Id) {
    let _ = ON_THREAD.try_with(|o| {
        if o.active.get() && !o.replaying.get() {
            o.stack.borrow_mut().push(id.clone());
        }
    });
}

/// The layer's `on_exit`: the running task exited span `id` (the latest
/// entry of it, should it be entered twice).
#[inline(never)]
pub(crate) fn exited(id: &Id) {
    let _ = ON_THREAD.try_with(|o| {
        if o.active.get() && !o.replaying.get() {
            let mut stack = o.stack.borrow_mut();
            if let Some(i) = stack.iter().rposition(|s| s == id) {
                stack.remove(i);
            }
        }
    });
}

/// Whether a `trace`-level event of gofer's may be wanted: tracing's global
/// maximum level, a static atomic, no thread-local.
#[inline(always)]
fn trace_level() -> bool {
    tracing::level_enabled!(Level::TRACE)
}

/// A task parks (filed by its Processer).
#[inline(always)]
pub(crate) fn park_event(h: &TaskHeader, processer: usize) {
    if trace_level() {
        park_event_slow(h, processer);
    }
}

#[inline(never)]
fn park_event_slow(h: &TaskHeader, processer: usize) {
    tracing::trace!(target: "gofer", task = h.id.as_u64(), processer, "park");
}

/// A parked task is woken (the wake-up that moved it out of `PARKED`).
#[inline(always)]
pub(crate) fn wake_event(h: &TaskHeader) {
    if trace_level() {
        wake_event_slow(h);
    }
}

#[inline(never)]
fn wake_event_slow(h: &TaskHeader) {
    tracing::trace!(target: "gofer", task = h.id.as_u64(), "wake");
}

/// The Dispatcher moves `tasks` tasks off the blocked Processer `from`.
#[inline(always)]
pub(crate) fn rescue_event(from: usize, tasks: usize) {
    if trace_level() {
        rescue_event_slow(from, tasks);
    }
}

#[inline(never)]
fn rescue_event_slow(from: usize, tasks: usize) {
    tracing::trace!(target: "gofer", processer = from, tasks, "rescue");
}

/// The Dispatcher marks Processer `p` blocked.
#[inline(always)]
pub(crate) fn blocked_event(p: usize, switches: u64) {
    if trace_level() {
        blocked_event_slow(p, switches);
    }
}

#[inline(never)]
fn blocked_event_slow(p: usize, switches: u64) {
    tracing::trace!(target: "gofer", processer = p, switches, "blocked");
}
