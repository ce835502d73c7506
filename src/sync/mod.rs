//! Coroutine-aware synchronisation primitives: they park the task inside a
//! coroutine and block the thread outside one, and mix freely.
//!
//! The API follows `parking_lot` (no poisoning): [`Mutex`], [`RwLock`],
//! [`Condvar`], plus [`Semaphore`] and a Go-style [`WaitGroup`]. The
//! primitives queue their waiters on one shared building block
//! (`waitqueue.rs`) that parks through [`park`](crate::park) and serves
//! waiters in FIFO order; each type's file documents its state machine.
//!
//! Do not hold a `std::sync::MutexGuard` across a switch in a task; these
//! guards are made for it: a task may move to another thread while it holds
//! one.

mod condvar;
mod mutex;
mod rwlock;
mod semaphore;
mod waitgroup;
mod waitqueue;

pub use condvar::{Condvar, WaitTimeoutResult};
pub use mutex::{Mutex, MutexGuard};
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use semaphore::{Semaphore, SemaphorePermit};
pub use waitgroup::WaitGroup;
