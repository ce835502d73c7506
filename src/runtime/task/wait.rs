//! What a parked task waits on, for task dumps.
//!
//! Every path that parks a task names what it waits for ([`WaitOn`]) just
//! before it switches out, and the Processer notes when the task parked.
//! Both go into the task's [`WaitRecord`], a plain cell in its header
//! guarded by the right to run the task: the task writes it while it runs,
//! the Processer while it completes the park, and a dump reads it only
//! after taking that right from the parked task (`PARKED -> DUMPING`, see
//! `task/park_state.rs`), so the record it reads is the one of the park the task
//! is in. A task that is running or queued has a stale record, which a dump
//! never reads.
//!
//! The cost on the park path is one store of a few words into memory the
//! task already touches.

use std::fmt;
use std::time::Instant;

/// What a parked task waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitOn {
    /// [`park`](crate::park) called directly.
    Park,
    /// A channel receive.
    ChanRecv,
    /// A channel send.
    ChanSend,
    /// A channel operation of another kind.
    Chan,
    /// A `select!` or `Select` over this many operations.
    ChanSelect(usize),
    /// A [`Mutex`](crate::sync::Mutex) lock.
    Mutex,
    /// A shared lock of a [`RwLock`](crate::sync::RwLock).
    RwLockRead,
    /// An exclusive lock of a [`RwLock`](crate::sync::RwLock).
    RwLockWrite,
    /// A [`Condvar`](crate::sync::Condvar) wait.
    Condvar,
    /// A [`Semaphore`](crate::sync::Semaphore) acquire.
    Semaphore,
    /// A [`Barrier`](crate::sync::Barrier) wait.
    Barrier,
    /// A [`WaitGroup`](crate::sync::WaitGroup) wait.
    WaitGroup,
    /// A sleep.
    Sleep,
    /// The end of the task with this id (`JoinHandle::join`).
    Join(u64),
    /// A socket or other descriptor becoming readable.
    Readable(i32),
    /// A socket or other descriptor becoming writable.
    Writable(i32),
    /// A future polled by `block_on_future`.
    Future,
    /// A call run on the blocking pool by [`unblock`](crate::unblock).
    Unblock,
    /// A futex wait made through the hooked `syscall` (std's locks,
    /// `parking_lot`).
    #[cfg(feature = "hooks")]
    Futex,
}

impl fmt::Display for WaitOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WaitOn::Park => f.write_str("park"),
            WaitOn::ChanRecv => f.write_str("channel receive"),
            WaitOn::ChanSend => f.write_str("channel send"),
            WaitOn::Chan => f.write_str("channel operation"),
            WaitOn::ChanSelect(n) => write!(f, "select over {n} channel operations"),
            WaitOn::Mutex => f.write_str("mutex lock"),
            WaitOn::RwLockRead => f.write_str("rwlock read"),
            WaitOn::RwLockWrite => f.write_str("rwlock write"),
            WaitOn::Condvar => f.write_str("condvar wait"),
            WaitOn::Semaphore => f.write_str("semaphore acquire"),
            WaitOn::Barrier => f.write_str("barrier wait"),
            WaitOn::WaitGroup => f.write_str("wait group wait"),
            WaitOn::Sleep => f.write_str("sleep"),
            WaitOn::Join(id) => write!(f, "join of task {id}"),
            #[cfg(feature = "hooks")]
            WaitOn::Futex => f.write_str("futex wait"),
            WaitOn::Readable(fd) => write!(f, "fd {fd} readable"),
            WaitOn::Writable(fd) => write!(f, "fd {fd} writable"),
            WaitOn::Future => f.write_str("future"),
            WaitOn::Unblock => f.write_str("unblock"),
        }
    }
}

/// A task's record of its current (or last) park.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WaitRecord {
    /// What it waits for.
    pub(crate) on: WaitOn,
    /// When a timer will wake it at the latest, if one will.
    pub(crate) deadline: Option<Instant>,
    /// When it parked, from its Processer's coarse clock (see
    /// `ProcLocal::clock`).
    pub(crate) since: Option<Instant>,
}
