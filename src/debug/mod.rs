//! Task dumps: what every task is doing, and where in its code it waits.
//!
//! A server of 100,000 tasks that stops answering should explain itself.
//! [`dump`] lists every live task of every scheduler of the process with
//! its [`TaskState`], what a parked task waits on and for how long, where
//! it was spawned, and the stack it is parked at, walked from the task's own
//! saved registers without resuming it. `Display` groups tasks parked at the
//! same place, so 100,000 of them print once with a count:
//!
//! ```
//! let sched = gofer::Scheduler::builder().min_threads(1).build()?;
//! let (tx, rx) = gofer::chan::unbounded::<u32>();
//! let h = sched.spawn(move || rx.recv());
//! # while !sched.dump().tasks().iter().any(|t| t.state() == gofer::debug::TaskState::Parked) {
//! #     std::thread::yield_now();
//! # }
//! let dump = sched.dump();
//! let t = &dump.tasks()[0];
//! assert_eq!(t.waiting_on(), Some("channel receive"));
//! println!("{dump}");
//! tx.send(1).unwrap();
//! assert_eq!(h.join().unwrap(), Ok(1));
//! sched.shutdown();
//! # Ok::<(), gofer::ConfigError>(())
//! ```
//!
//! Two ways to get a dump without changing the program's code paths:
//! [`install_signal_dump`] prints one when the process gets a signal (as
//! Go's `SIGQUIT`, but the process goes on), and
//! [`SchedulerBuilder::stall_report`](crate::SchedulerBuilder::stall_report)
//! prints one when every task of a scheduler has been parked for a while
//! with nothing but each other to wake them.
//!
//! A thread that a task blocks (a `parking_lot` condvar inside a pool's
//! `get`, a std channel's `recv`) is listed with the call it is blocked
//! in, a backtrace taken from that thread on a signal gofer owns
//! ([`BACKTRACE_SIGNAL_OFFSET`]; [`BlockedThread::blocked_in`]), and the
//! fix.
//!
//! Nothing here costs anything until a dump is taken, beyond a registry of
//! live tasks that a spawn fills without a lock (`ARCHITECTURE.md`, "Task
//! dumps").

// The files of this module (for contributors; the docs above are for users):
//
// | file | what it is |
// |---|---|
// | `signal.rs` | `install_signal_dump`: a dump printed on a signal, by a thread of its own |
// | `serve.rs` | `serve`: the live debug page over HTTP, on a thread of its own (`page.html` is the page) |

mod serve;
mod signal;

pub use crate::runtime::dump::blocked_call::BACKTRACE_SIGNAL_OFFSET;
pub use crate::runtime::dump::{BlockedThread, Dump, TaskDump, TaskState};
pub use serve::{serve, DebugServer};
pub use signal::install_signal_dump;

use crate::runtime::scheduler::Scheduler;
use crate::runtime::shared;

/// A dump of every live task of every scheduler in the process.
///
/// Safe to call from anywhere (a task, a plain thread) while tasks run,
/// park and finish: no task is resumed, woken, reordered or lost by it. A
/// dump of 100,000 parked tasks takes well under a second (see
/// `BENCHMARKS.md`, "Task dumps").
pub fn dump() -> Dump {
    Dump::take(&shared::all_schedulers())
}

impl Scheduler {
    /// A dump of every live task of this scheduler; see [`debug::dump`].
    ///
    /// [`debug::dump`]: crate::debug::dump
    pub fn dump(&self) -> Dump {
        Dump::take(std::slice::from_ref(self.shared()))
    }
}
