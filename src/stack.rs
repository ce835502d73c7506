//! Coroutine stack memory: guarded mappings and the pools that recycle them.
//!
//! ```text
//!   high addresses
//!   +---------------------------+ <- top    (context starts here, grows down)
//!   |                           |
//!   |  usable stack (RW)        |  `size` bytes, only touched pages cost RSS
//!   |                           |
//!   +---------------------------+ <- bottom
//!   |  guard page (PROT_NONE)   |  one page; a fault here is a stack overflow
//!   +---------------------------+ <- base   (what mmap returned)
//!   low addresses
//! ```
//!
//! Each guarded stack is one `mmap` split by one `mprotect`, so the kernel
//! keeps two mappings (VMAs) for it: `vm.max_map_count` (65,530 by default)
//! caps a process at about 32,000 live guarded stacks. Stacks are allocated
//! when a task first runs, not when it is spawned, so queued tasks cost no
//! mapping; finished tasks hand their stack back to a pool so that spawning in
//! steady state makes no `mmap`/`munmap` call.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The smallest stack a task may ask for.
pub const MIN_STACK_SIZE: usize = 16 * 1024;
/// The largest stack a task may ask for (1 GiB).
pub const MAX_STACK_SIZE: usize = 1 << 30;
/// The stack size of a task when neither the task nor its scheduler sets one.
pub const DEFAULT_STACK_SIZE: usize = 256 * 1024;

/// Stacks a Processer keeps for reuse before it hands a batch to the
/// scheduler-wide pool.
pub(crate) const LOCAL_POOL_MAX: usize = 64;
/// Stacks the scheduler-wide pool keeps before it unmaps.
pub(crate) const SHARED_POOL_MAX: usize = 1024;

/// The size of a memory page, read once.
pub(crate) fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    let p = PAGE.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: sysconf has no preconditions; _SC_PAGESIZE is always valid.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let p = if p > 0 { p as usize } else { 4096 };
    PAGE.store(p, Ordering::Relaxed);
    p
}

/// Rounds a requested usable size up to whole pages.
pub(crate) fn round_to_pages(size: usize) -> usize {
    let page = page_size();
    size.div_ceil(page) * page
}

/// Whether `size` is an accepted stack size.
pub(crate) fn valid_stack_size(size: usize) -> bool {
    (MIN_STACK_SIZE..=MAX_STACK_SIZE).contains(&size)
}

/// Live guarded stacks in the whole process, for error messages and stats.
static LIVE_STACKS: AtomicUsize = AtomicUsize::new(0);

/// Live guarded stacks in the process.
pub(crate) fn live_stacks() -> usize {
    LIVE_STACKS.load(Ordering::Relaxed)
}

/// One coroutine stack: a private anonymous mapping with a guard page below
/// the usable range. Owns the mapping; dropping it unmaps.
pub(crate) struct StackMem {
    /// Start of the mapping (the guard page).
    base: NonNull<u8>,
    /// Usable bytes above the guard page.
    size: usize,
}

// SAFETY: a StackMem is a uniquely owned region of memory; nothing in it is
// tied to the thread that mapped it.
unsafe impl Send for StackMem {}

impl StackMem {
    /// Maps a stack with `size` usable bytes (already page-rounded) and one
    /// guard page below it.
    pub(crate) fn new(size: usize) -> io::Result<StackMem> {
        let page = page_size();
        debug_assert_eq!(size % page, 0);
        let total = size + page;
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choosing aliases nothing; the result is checked for MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `base..base+page` lies inside the mapping made just above.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            let e = io::Error::last_os_error();
            // SAFETY: unmapping exactly the region mapped above, which nothing
            // else references yet.
            unsafe { libc::munmap(base, total) };
            return Err(e);
        }
        LIVE_STACKS.fetch_add(1, Ordering::Relaxed);
        Ok(StackMem {
            // SAFETY: mmap succeeded, so base is not null.
            base: unsafe { NonNull::new_unchecked(base.cast()) },
            size,
        })
    }

    /// Usable bytes.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The guard page's address range `[lo, hi)`.
    pub(crate) fn guard(&self) -> (usize, usize) {
        let lo = self.base.as_ptr() as usize;
        (lo, lo + page_size())
    }

    /// The highest address (exclusive): where the stack starts growing down.
    pub(crate) fn top(&self) -> *mut u8 {
        // SAFETY: base + page + size is one past the end of the mapping.
        unsafe { self.base.as_ptr().add(page_size() + self.size) }
    }

    /// The lowest usable address.
    pub(crate) fn bottom(&self) -> *mut u8 {
        // SAFETY: base + page is inside the mapping (the first usable byte).
        unsafe { self.base.as_ptr().add(page_size()) }
    }

    /// The `context` crate's view of this memory.
    pub(crate) fn as_context_stack(&self) -> context::stack::Stack {
        // SAFETY: top > bottom and both bound memory this StackMem owns; the
        // caller keeps the StackMem alive as long as the Context made on it.
        unsafe { context::stack::Stack::new(self.top().cast(), self.bottom().cast()) }
    }
}

impl Drop for StackMem {
    fn drop(&mut self) {
        LIVE_STACKS.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: the mapping was made by `new` with exactly this length and
        // is owned by self; no coroutine runs on it once it is dropped (the
        // owner only drops a stack after its task finished).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.size + page_size()) };
    }
}

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

    /// Adds as many of `batch` as fit; the rest are dropped (unmapped).
    pub(crate) fn extend(&mut self, batch: Vec<StackMem>) {
        for s in batch {
            if self.push(s).is_err() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_layout_has_guard_below_usable_range() {
        let s = StackMem::new(round_to_pages(MIN_STACK_SIZE)).unwrap();
        let (lo, hi) = s.guard();
        assert_eq!(hi, s.bottom() as usize);
        assert_eq!(hi - lo, page_size());
        assert_eq!(s.top() as usize - s.bottom() as usize, s.size());
        // The usable range is writable end to end.
        // SAFETY: bottom..top is the RW part of the mapping owned by `s`.
        unsafe {
            s.bottom().write(1);
            s.top().sub(1).write(2);
        }
    }

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
}
