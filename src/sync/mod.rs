//! Synchronisation primitives for tasks and threads alike: inside a task a
//! wait parks the task (its thread runs other tasks), on a plain thread it
//! blocks the thread, and tasks and threads can share one lock.
//!
//! The API follows `parking_lot` (no poisoning): [`Mutex`], [`RwLock`],
//! [`Condvar`], plus [`Semaphore`] (with [`OwnedSemaphorePermit`]s that
//! move into tasks), a Go-style [`WaitGroup`], and a reusable
//! [`Barrier`]. Waiters queue in arrival order; the [`Mutex`] docs say how
//! newcomers and woken waiters share the lock.
//!
//! Prefer these to `std::sync`'s locks in a task that may switch while it
//! holds one (a sleep, a channel operation, a socket read): a task waiting
//! for a std lock blocks its whole thread, and if the holder is a parked
//! task that runs on that same thread, it can never run again to release
//! the lock.

// The files of this module (for contributors; the docs above are for users):
//
// | file | what it is |
// |---|---|
// | `waitqueue.rs` | the wait queue every primitive here parks on |
// | `mutex.rs` | `Mutex` |
// | `rwlock.rs` | `RwLock` |
// | `condvar.rs` | `Condvar` |
// | `semaphore.rs` | `Semaphore` and `SemaphorePermit` |
// | `semaphore_owned.rs` | `OwnedSemaphorePermit` |
// | `waitgroup.rs` | `WaitGroup` |
// | `barrier.rs` | `Barrier` |

mod barrier;
mod condvar;
mod mutex;
mod rwlock;
mod semaphore;
mod semaphore_owned;
mod waitgroup;
mod waitqueue;

pub use barrier::{Barrier, BarrierWaitResult};
pub use condvar::{Condvar, WaitTimeoutResult};
pub use mutex::{Mutex, MutexGuard};
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use semaphore::{Semaphore, SemaphorePermit};
pub use semaphore_owned::OwnedSemaphorePermit;
pub use waitgroup::WaitGroup;
