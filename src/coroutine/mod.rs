//! The machine layer: coroutine stacks and the switch between them.
//!
//! Nothing here knows about tasks, Processers or schedulers; the runtime
//! builds those on top, and so does the fiber (`fiber/`). The pieces:
//!
//! - [`stack`]: one stack's memory, guarded (`mmap` plus a guard page) or
//!   dense (a slot of a shared slab, no guard page);
//! - [`stacks`]: where stacks come from and go back to (pools, the
//!   scheduler's allocation policy);
//! - [`switch`]: entering and leaving a coroutine with the `context` crate;
//! - [`registry`]: the live fiber stacks by address, for the overflow
//!   handler, the panic hook and the dense-stack check;
//! - [`overflow`]: the SIGSEGV/SIGBUS handler that reports a guard-page hit
//!   (fatal exits are the machine layer's, `sys/fatal.rs`);
//! - [`panic_hook`]: running a task's panic hook on a stack big enough for
//!   it;
//! - [`carrier`]: moving one unit of std's per-thread panic count off a
//!   thread or onto it (for tasks that switch out mid-unwind).

pub(crate) mod carrier;
pub(crate) mod overflow;
pub(crate) mod panic_hook;
pub(crate) mod registry;
pub(crate) mod stack;
pub(crate) mod stacks;
pub(crate) mod switch;
