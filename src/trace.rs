//! With the `tracing` feature: tasks in spans, and spans that follow their
//! task across switches.
//!
//! Every task runs in a span named `task` (target `gofer`, level `INFO`,
//! fields `id`, `name` and `spawned_at`), entered while the task runs and
//! exited while it is switched out (parked, yielded, or waiting in a
//! queue). The spans a task enters itself follow it too: a stackful task
//! switches out inside any blocking call, with its span guards still alive
//! on its stack, and without gofer those spans would stay entered on the
//! thread, so the next task's events would land in them. With the layer
//! below, gofer exits the running task's spans (innermost first) when it
//! switches out and enters them again (outermost first) when it switches
//! back in, on whatever thread it then runs: an event is attributed to the
//! spans its own task entered, and to no other task's.
//!
//! The setup is one line, with whatever layers the program uses beside:
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! let subscriber = tracing_subscriber::registry().with(gofer::trace::layer());
//! tracing::subscriber::set_global_default(subscriber).unwrap();
//! ```
//!
//! The layer only records which spans the running task entered and exited;
//! it formats and filters nothing. Without it, tasks still run in their
//! `task` span, but the spans they enter themselves do not follow them.
//! The Processer threads see the global default subscriber (a subscriber
//! set with `tracing::subscriber::with_default` on one thread is not seen
//! by the tasks, which run on the scheduler's threads).
//!
//! A task that panics or is cancelled inside a span exits it as it unwinds
//! (its guard is dropped), even when the unwind parks; spans a finished
//! task never exited (a guard it leaked) are exited at its end and their
//! record dropped.
//!
//! gofer's own events are at `trace` level, target `gofer`: `park` (a task
//! parked: fields `task`, `processer`), `wake` (a parked task was woken:
//! `task`), `rescue` (the Dispatcher moved `tasks` tasks off the blocked
//! Processer `processer`) and `blocked` (the Dispatcher marked Processer
//! `processer` blocked, its switch count at `switches`). They are off
//! unless a subscriber enables `trace` for that target; before that, each
//! costs one load of tracing's global maximum level.

use tracing::span::Id;
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer};

use crate::runtime::task::trace as runtime_trace;

/// The layer that records, for the running task, the spans it enters and
/// exits, so that gofer can carry them across the task's switches. Made by
/// [`layer()`].
#[derive(Clone, Copy, Debug, Default)]
pub struct TaskSpans {
    _private: (),
}

/// The layer to add to a `tracing_subscriber` registry (module docs).
pub fn layer() -> TaskSpans {
    TaskSpans::default()
}

impl<S: Subscriber> Layer<S> for TaskSpans {
    fn on_enter(&self, id: &Id, _ctx: Context<'_, S>) {
        runtime_trace::entered(id);
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        runtime_trace::exited(id);
    }
}
