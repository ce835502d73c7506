//! Where a task's stack comes from and where it goes back to: the
//! allocation policy of a scheduler ([`Stacks`]) and of each Processer
//! ([`LocalStacks`]).
//!
//! A fresh guarded stack costs some tens of microseconds on a virtual
//! machine (`mmap`, its guard page, page faults on first touch, and a
//! `munmap` with its TLB-shootdown interrupts at the end), so finished
//! stacks are recycled:
//!
//! ```text
//!  task finishes -> Processer's local pool (LOCAL_POOL_MAX)
//!                     | full: half of it
//!                     v
//!                   scheduler's shared pool (stack_cache) -> beyond: unmapped
//!
//!  task starts  <- local pool <- a batch from the shared pool <- mmap
//! ```
//!
//! Only the scheduler's default size is pooled; other sizes are mapped and
//! unmapped per task.
//!
//! When an allocation fails (the guarded-stack cap or the kernel refused),
//! [`Stacks`] records the errno, and spawning refuses new tasks while it is
//! recorded ([`Stacks::probe`]): a finished task's stack coming back clears
//! it, and so does a probe that finds memory again (stacks freed by another
//! scheduler of the process count too).

use std::io;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use crate::sys::lock::Mutex;

use super::stack::{DenseArena, StackMem};

/// Stacks a Processer keeps for reuse before it hands a batch to the
/// scheduler-wide pool.
pub(crate) const LOCAL_POOL_MAX: usize = 64;
/// Default number of finished stacks a scheduler keeps for reuse
/// (`SchedulerBuilder::stack_cache`).
pub const DEFAULT_STACK_CACHE: usize = 8192;

/// A bounded stack of same-sized `StackMem`s.
pub(crate) struct StackPool {
    size: usize,
    max: usize,
    stacks: Vec<StackMem>,
}

impl StackPool {
    pub(crate) fn new(size: usize, max: usize) -> StackPool {
        StackPool {
            size,
            max,
            stacks: Vec::new(),
        }
    }

    /// The stack size this pool recycles.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    pub(crate) fn pop(&mut self) -> Option<StackMem> {
        self.stacks.pop()
    }

    /// Keeps `s` if there is room; returns it otherwise.
    pub(crate) fn push(&mut self, s: StackMem) -> Result<(), StackMem> {
        debug_assert_eq!(s.size(), self.size);
        if self.stacks.len() < self.max {
            self.stacks.push(s);
            Ok(())
        } else {
            Err(s)
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.stacks.len()
    }

    /// Takes up to `n` stacks out, for a batch hand-off.
    pub(crate) fn take_batch(&mut self, n: usize) -> Vec<StackMem> {
        let keep = self.stacks.len().saturating_sub(n);
        self.stacks.split_off(keep)
    }

    /// Adds as many of `batch` as fit, and returns the rest, for the caller
    /// to drop (unmap) once it no longer holds the pool's lock.
    #[must_use = "dropping the rest unmaps it: do it outside any lock"]
    pub(crate) fn extend(&mut self, batch: Vec<StackMem>) -> Vec<StackMem> {
        let mut it = batch.into_iter();
        while let Some(s) = it.next() {
            if let Err(s) = self.push(s) {
                let mut rest = vec![s];
                rest.extend(it);
                return rest;
            }
        }
        Vec::new()
    }
}

/// A scheduler's stack policy: its shared pool, its dense arenas, and the
/// record of the last failed allocation.
pub(crate) struct Stacks {
    /// The scheduler's default stack size (the pooled one).
    size: usize,
    /// Carve stacks from dense arenas instead of guarded mappings.
    dense: bool,
    pool: Mutex<StackPool>,
    /// errno of the last failed stack allocation; 0 when stacks can be had.
    errno: AtomicI32,
    /// Dense-stack arenas by stack size (dense mode only).
    arenas: Mutex<Vec<Arc<DenseArena>>>,
}

impl Stacks {
    /// A policy for stacks of `size` bytes by default, keeping up to `cache`
    /// finished ones.
    pub(crate) fn new(size: usize, cache: usize, dense: bool) -> Stacks {
        Stacks {
            size,
            dense,
            pool: Mutex::new(StackPool::new(size, cache)),
            errno: AtomicI32::new(0),
            arenas: Mutex::new(Vec::new()),
        }
    }

    /// Whether stacks are dense (no guard page).
    pub(crate) fn is_dense(&self) -> bool {
        self.dense
    }

    /// Maps a fresh stack of `size` bytes, recording the errno on failure.
    pub(crate) fn fresh(&self, size: usize) -> io::Result<StackMem> {
        let made = if self.dense {
            self.arena(size).alloc()
        } else {
            StackMem::new(size)
        };
        made.inspect_err(|e| {
            self.errno
                .store(e.raw_os_error().unwrap_or(libc::ENOMEM), Ordering::Relaxed);
        })
    }

    fn arena(&self, size: usize) -> Arc<DenseArena> {
        let mut arenas = self.arenas.lock();
        if let Some(a) = arenas.iter().find(|a| a.size() == size) {
            return a.clone();
        }
        let a = DenseArena::new(size);
        arenas.push(a.clone());
        a
    }

    /// Whether the last allocation failed (spawns are refused until a
    /// [`probe`](Self::probe) succeeds or a stack comes back).
    pub(crate) fn exhausted(&self) -> bool {
        self.errno.load(Ordering::Relaxed) != 0
    }

    /// The last allocation failed: try one now. Stacks may have come free
    /// anywhere in the process since (another scheduler shut down, say), not
    /// only in this scheduler's pools, so waiting for one of our own tasks to
    /// give one back could wait for ever. The stack made goes to the shared
    /// pool for the next task to start.
    pub(crate) fn probe(&self) -> io::Result<()> {
        let s = self.fresh(self.size)?;
        self.give(vec![s]);
        self.released();
        Ok(())
    }

    /// Stacks went back to a pool: spawning may succeed again.
    pub(crate) fn released(&self) {
        if self.errno.load(Ordering::Relaxed) != 0 {
            self.errno.store(0, Ordering::Relaxed);
        }
    }

    /// Adds a batch to the shared pool (what does not fit is unmapped,
    /// after the lock is released: a `munmap` under it would hold up every
    /// Processer taking or giving stacks meanwhile).
    pub(crate) fn give(&self, batch: Vec<StackMem>) {
        let rest = self.pool.lock().extend(batch);
        drop(rest);
    }

    /// Takes up to `n` stacks from the shared pool.
    pub(crate) fn take(&self, n: usize) -> Vec<StackMem> {
        self.pool.lock().take_batch(n)
    }
}

/// A Processer's own pool: no lock, no atomic, in front of the shared one.
pub(crate) struct LocalStacks {
    pool: StackPool,
}

impl LocalStacks {
    pub(crate) fn new(size: usize) -> LocalStacks {
        LocalStacks {
            pool: StackPool::new(size, LOCAL_POOL_MAX),
        }
    }

    /// A stack of `size` bytes: from the local pool, else a batch from the
    /// shared pool, else a fresh mapping.
    pub(crate) fn alloc(&mut self, shared: &Stacks, size: usize) -> io::Result<StackMem> {
        if size == self.pool.size() {
            if let Some(s) = self.pool.pop() {
                return Ok(s);
            }
            // The local pool has room for a batch: nothing comes back.
            drop(self.pool.extend(shared.take(LOCAL_POOL_MAX / 2)));
            if let Some(s) = self.pool.pop() {
                return Ok(s);
            }
        }
        shared.fresh(size)
    }

    /// Takes every pooled stack out (the owner is going away).
    pub(crate) fn drain(&mut self) -> Vec<StackMem> {
        self.pool.take_batch(usize::MAX)
    }

    /// Takes a finished task's stack back: into the local pool, handing half
    /// of it to the shared pool when full; other sizes are unmapped.
    pub(crate) fn free(&mut self, shared: &Stacks, s: StackMem) {
        if s.size() != self.pool.size() {
            return; // dropped: unmapped
        }
        if let Err(s) = self.pool.push(s) {
            shared.give(self.pool.take_batch(LOCAL_POOL_MAX / 2));
            let _ = self.pool.push(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coroutine::stack::{round_to_pages, MIN_STACK_SIZE};

    #[test]
    fn pool_is_bounded() {
        let size = round_to_pages(MIN_STACK_SIZE);
        let mut p = StackPool::new(size, 2);
        for _ in 0..2 {
            assert!(p.push(StackMem::new(size).unwrap()).is_ok());
        }
        assert!(p.push(StackMem::new(size).unwrap()).is_err());
        assert_eq!(p.take_batch(5).len(), 2);
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn extend_hands_back_what_does_not_fit() {
        let size = round_to_pages(MIN_STACK_SIZE);
        let mut p = StackPool::new(size, 2);
        let batch: Vec<_> = (0..5).map(|_| StackMem::new(size).unwrap()).collect();
        let rest = p.extend(batch);
        assert_eq!((p.len(), rest.len()), (2, 3));
        assert!(p.extend(Vec::new()).is_empty());
    }
}
