//! Time: user timers, on the runtime's timer service (sleeping is the
//! runtime's own: `runtime/time/sleep.rs`).

// The files of this module (for contributors; the docs above are for users):
//
// | file | what it is |
// |---|---|
// | `timer.rs` | user timers: `after`, `every` and their `_if_alive` forms |

pub mod timer;
