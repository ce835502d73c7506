//! Coroutine-aware synchronisation primitives: they park the task inside a
//! coroutine and block the thread outside one, and mix freely.
//!
//! The API follows `parking_lot` (no poisoning): [`Mutex`], [`RwLock`],
//! [`Condvar`], plus [`Semaphore`], a Go-style [`WaitGroup`], and a reusable
//! [`Barrier`]. All of them queue their waiters on one shared building block
//! (`waitqueue.rs`) that parks through [`park`](crate::park) and serves
//! waiters in FIFO order; each type's file documents its state machine.
//!
//! Do not hold a `std::sync::MutexGuard` across a switch in a task; these
//! guards are made for it: a task may move to another thread while it holds
//! one.

mod barrier;
mod condvar;
mod mutex;
mod rwlock;
mod semaphore;
mod waitgroup;
mod waitqueue;

pub use barrier::{Barrier, BarrierWaitResult};
pub use condvar::{Condvar, WaitTimeoutResult};
pub use mutex::{Mutex, MutexGuard};
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use semaphore::{Semaphore, SemaphorePermit};
pub use waitgroup::WaitGroup;
