//! The machine layer under everything: the runtime's own locks, the
//! kernel's futex, libc's real functions behind the hooks, and a fatal
//! exit that is safe in a signal handler. It knows nothing of coroutines,
//! tasks or schedulers.
//!
//! | file | what it is |
//! |---|---|
//! | `lock.rs` | the runtime's own locks and a thread's sleep (with `hooks`, they bypass the hooked futex) |
//! | `futex.rs` | the kernel's futex, called directly |
//! | `real.rs` | the real libc functions behind the hooks, found with `dlsym(RTLD_NEXT)` |
//! | `fatal.rs` | a one-line message and abort, async-signal-safe |

pub(crate) mod fatal;
#[cfg(feature = "hooks")]
pub(crate) mod futex;
pub(crate) mod lock;
#[cfg(feature = "hooks")]
pub(crate) mod real;
