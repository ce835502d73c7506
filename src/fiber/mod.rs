//! Fibers: coroutines that their caller resumes, with no scheduler.
//!
//! A [`Fiber`] runs a closure on a stack of its own. [`Fiber::resume`]
//! switches to it; the closure runs until it calls [`Yielder::suspend`]
//! (from any call depth), which switches back and hands a value out, or
//! until it returns. Values travel both ways: each resume passes an input
//! in, each suspend hands a value out and receives the next input.
//!
//! ```
//! use gofer::fiber::{Fiber, FiberResult, Yielder};
//! let mut f = Fiber::new(|y: &Yielder<u32, &'static str>, first: u32| {
//!     let next: u32 = y.suspend("one"); // hands a value out, gets the next input
//!     (first + next) as u64             // the return value
//! });
//! assert!(matches!(f.resume(1), FiberResult::Yield("one")));
//! assert!(matches!(f.resume(2), FiberResult::Return(3)));
//! assert!(f.is_finished());
//! ```
//!
//! A [`Generator`] is a fiber seen as an iterator:
//!
//! ```
//! use gofer::fiber::Generator;
//! let evens: Vec<u32> = Generator::new(|y| {
//!     for i in 0..5 {
//!         y.yield_(i * 2)
//!     }
//! })
//! .collect();
//! assert_eq!(evens, [0, 2, 4, 6, 8]);
//! ```
//!
//! # Borrowing
//!
//! A [`Fiber`] or [`Generator`] is a value its owner may keep, move or leak
//! while it is suspended halfway, so its closure must be `'static` (see
//! "Why `'static`" on [`Fiber`]). A [`ScopedFiber`] or [`ScopedGenerator`]
//! may borrow for `'a`; it can be made, moved and returned like any value,
//! and it runs inside its `scope` call, which drops (unwinds) it before
//! returning:
//!
//! ```
//! use gofer::fiber::ScopedGenerator;
//! let text = String::from("one two three");
//! let words: Vec<&str> = ScopedGenerator::new(|y| {
//!     for w in text.split(' ') {
//!         y.yield_(w) // slices of the borrowed `text`
//!     }
//! })
//! .scope(|g| g.collect());
//! assert_eq!(words, ["one", "two", "three"]);
//! ```
//!
//! # Stacks
//!
//! A fiber's stack is a task's: a guarded `mmap` of
//! [`DEFAULT_STACK_SIZE`](crate::DEFAULT_STACK_SIZE) bytes by default (or
//! what [`Builder::stack_size`] asks, within the same bounds as for tasks),
//! with a guard page below it, recycled through a per-thread and a
//! process-wide pool. Overflowing it aborts the process with one line
//! naming the fiber: `gofer: fiber 'parser' overflowed its 65536-byte stack
//! (fault at 0x... in the guard page); aborting`. The stack goes back to
//! its pool as soon as the fiber finishes.
//!
//! # Threads
//!
//! A fiber runs on the thread that resumes it. It is neither `Send` nor
//! `Sync` (nor are the scoped kinds), so it stays with the code that made it, and its closure and
//! values need not be `Send`:
//!
//! ```
//! use std::rc::Rc;
//! use gofer::fiber::{Fiber, Yielder};
//! let shared = Rc::new(5);
//! let mut f = Fiber::new(move |_: &Yielder<(), ()>, ()| *shared + 1);
//! assert_eq!(f.resume(()).into_return(), Some(6));
//! ```
//!
//! ```compile_fail,E0277
//! use gofer::fiber::{Fiber, Yielder};
//! let mut f = Fiber::new(|_: &Yielder<(), ()>, ()| 1);
//! std::thread::spawn(move || f.resume(())); // Fiber is not Send
//! ```
//!
//! A fiber that a task resumes goes where the task goes: it stays on the
//! task's thread unless the task is migratable
//! ([`Builder::migratable`](crate::Builder::migratable),
//! [`SchedulerBuilder::migrate_started_tasks`](crate::SchedulerBuilder::migrate_started_tasks)),
//! and then the rules those state for thread-locals apply to the fiber's
//! code too.
//!
//! # Panics
//!
//! A panic in the fiber's closure is caught at the root of the fiber's
//! stack and continues from the `resume` that ran it (as
//! [`std::panic::resume_unwind`] does: the panic hook has already reported
//! it, naming the fiber). The fiber is then finished. Resuming a finished
//! fiber panics with a message saying so; it is never undefined behaviour.
//!
//! # Dropping a suspended fiber
//!
//! Dropping a fiber that is suspended runs the destructors of everything
//! live on its stack, as if its closure had panicked at its `suspend`: the
//! drop resumes the fiber with a request to unwind, `suspend` starts an
//! unwind with a payload private to gofer instead of returning, and the
//! fiber's root catches it. Then the stack goes back to its pool. A fiber
//! that never ran just drops its closure.
//!
//! Code inside the fiber that catches panics (`std::panic::catch_unwind`
//! around a `suspend`) also catches this unwind, as an opaque payload. It
//! should pass it on with [`std::panic::resume_unwind`]. If it does not:
//!
//! - a later `suspend` starts the unwind again at once, without switching;
//! - if the closure returns instead, its value is dropped and the drop
//!   completes;
//! - if it panics with another payload, that panic continues from the drop
//!   (or is reported on stderr, if the dropping thread is already
//!   unwinding);
//! - if it loops forever without calling `suspend`, the drop never returns.
//!
//! As in any unwind, a destructor that panics during it aborts the process.
//! A fiber leaked with [`std::mem::forget`] keeps its stack for the life of
//! the process and never runs again.
//!
//! # Fibers inside tasks
//!
//! A task may create and resume fibers. The fiber runs on the task's
//! thread, as part of the task. Whatever switches the *task* out while the
//! fiber runs ([`yield_now`](crate::yield_now), [`park`](crate::park),
//! [`sleep`](crate::sleep), a lock, a channel, a join,
//! [`block_on_future`](crate::block_on_future)) suspends the whole task
//! with the fiber on top of it: the Processer saves the fiber's registers
//! as the task's context and runs other tasks. The task later resumes, on
//! the same thread unless it is migratable, exactly where the fiber left
//! off, and the fiber's [`Yielder::suspend`] still returns to the task code
//! that resumed it. So inside a task a fiber behaves like any function the task calls,
//! with a stack of its own. Outside a task the same calls block the thread,
//! as they do for any thread.

// The files of this module (for contributors; the docs above are for users):
//
// | file | what it is |
// |---|---|
// | `builder.rs` | `Builder`: fibers and generators with options |
// | `handle.rs` | `Fiber`, the resumer's handle, and `FiberResult` |
// | `yielder.rs` | `Yielder`, the fiber's side, and the first frame of every fiber stack |
// | `protocol.rs` | what travels between a fiber and its resumer at each switch |
// | `generator.rs` | `Generator`: a fiber seen as an iterator |
// | `scoped.rs` | fibers and generators whose closure borrows |
// | `pool.rs` | where fiber stacks come from and go back to |

mod builder;
mod generator;
mod handle;
mod pool;
mod protocol;
mod scoped;
mod yielder;

pub use builder::Builder;
pub use generator::Generator;
pub use handle::{Fiber, FiberResult};
pub use scoped::{ScopedFiber, ScopedFiberRef, ScopedGenerator, ScopedGeneratorRef};
pub use yielder::Yielder;
