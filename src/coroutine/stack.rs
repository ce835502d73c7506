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
//! Each guarded stack is one `mmap` whose lowest page becomes a guard
//! region with `madvise(MADV_GUARD_INSTALL)` (Linux 6.13): one mapping
//! (VMA), which the kernel may merge with its neighbours. An older kernel
//! gets an `mprotect(PROT_NONE)` instead, which splits the mapping in two:
//! `vm.max_map_count` (65,530 by default) then caps a process at about
//! 32,000 live guarded stacks, and gofer keeps to that cap on any kernel.
//! Stacks are allocated when a task first runs, not when it is spawned, so
//! queued tasks cost no mapping; finished tasks hand their stack back to a
//! pool so that spawning in steady state makes no `mmap`/`munmap` call.
//!
//! # Dense stacks
//!
//! A scheduler built with `dense_stacks(true)` carves stacks out of large
//! shared slabs (one mapping per [`SLAB_BYTES`]) with no guard pages, so the
//! mapping count no longer grows with the number of tasks:
//!
//! ```text
//!   slab (one mmap, MAP_NORESERVE)
//!   +------------+------------+------------+----
//!   | stack 0    | stack 1    | stack 2    | ...
//!   +------------+------------+------------+----
//!   ^ bottom of stack 0: a CANARY_BYTES zero band, never written
//! ```
//!
//! Overflow is then detected *after the fact*, at every switch out of the
//! task: the saved stack pointer must lie above the canary band, and the
//! band must still read as zero. The band is zero because untouched
//! anonymous memory reads as zero: writing a pattern there instead would make
//! every stack's lowest page resident, a 4 KiB cost per task. A detected
//! overflow aborts the process with a message naming the task, because the
//! neighbouring stack may already be corrupted. An overflow that writes only
//! zeros into the band, or jumps past it and returns before switching, is
//! not seen; that is why guarded stacks stay the default.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::sys::lock::Mutex;

/// The smallest stack a task may ask for.
pub const MIN_STACK_SIZE: usize = 16 * 1024;
/// The largest stack a task may ask for (1 GiB).
pub const MAX_STACK_SIZE: usize = 1 << 30;
/// The stack size of a task when neither the task nor its scheduler sets one.
pub const DEFAULT_STACK_SIZE: usize = 256 * 1024;

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

/// Live stacks (guarded and dense) in the whole process, for error messages
/// and stats.
static LIVE_STACKS: AtomicUsize = AtomicUsize::new(0);

/// Guarded stacks live in the process; each costs two mappings.
static GUARDED_LIVE: AtomicUsize = AtomicUsize::new(0);

/// Mappings left to everything else (heap arenas, thread stacks, libraries,
/// dense slabs) when guarded stacks reach their cap.
const MAP_HEADROOM: usize = 4096;

/// The most guarded stacks the process may hold:
/// `(vm.max_map_count - MAP_HEADROOM) / 2`. Past the kernel's limit *every*
/// allocation that needs a new mapping fails, and Rust aborts on a failed
/// allocation, so gofer stops short of it and fails spawns cleanly instead.
pub(crate) fn guarded_limit() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        let max = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(65_530);
        max.saturating_sub(MAP_HEADROOM.min(max / 2)) / 2
    })
}

/// `madvise` advice that turns a range into a guard region (Linux 6.13):
/// any access faults, as on a `PROT_NONE` page, but the mapping is not
/// split (`include/uapi/asm-generic/mman-common.h`).
const MADV_GUARD_INSTALL: libc::c_int = 102;

/// Whether guard pages are made with [`MADV_GUARD_INSTALL`]: unknown until
/// the first stack is mapped, then yes or no for the process.
static GUARD_MARKERS: AtomicU8 = AtomicU8::new(MARKERS_UNKNOWN);
const MARKERS_UNKNOWN: u8 = 0;
const MARKERS_YES: u8 = 1;
const MARKERS_NO: u8 = 2;

/// Makes `base..base+page`, the lowest page of a fresh stack mapping, its
/// guard page. Returns false (errno set) if that failed.
///
/// With a guard marker (`MADV_GUARD_INSTALL`) the mapping stays one VMA,
/// which the kernel may merge with its neighbours: no `mprotect` and its
/// split under the address-space lock, and a first fault in a merged VMA
/// finds its `anon_vma` made (without one it takes the address-space lock
/// too). On a burst of fresh stacks on two Processers, that lock is where
/// the time went (`bench/benches/tools/sleep_phases.rs`). A kernel without
/// the advice (`EINVAL`) gets `mprotect`, once tried, for the process.
fn install_guard(base: *mut libc::c_void, page: usize) -> bool {
    let mode = GUARD_MARKERS.load(Ordering::Relaxed);
    if mode != MARKERS_NO {
        // SAFETY: `base..base+page` lies inside a private anonymous mapping
        // the caller just made and owns; the advice changes only it.
        if unsafe { libc::madvise(base, page, MADV_GUARD_INSTALL) } == 0 {
            if mode == MARKERS_UNKNOWN {
                GUARD_MARKERS.store(MARKERS_YES, Ordering::Relaxed);
            }
            return true;
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            return false;
        }
        GUARD_MARKERS.store(MARKERS_NO, Ordering::Relaxed);
    }
    // SAFETY: as above.
    unsafe { libc::mprotect(base, page, libc::PROT_NONE) == 0 }
}

/// Bytes per dense slab (one mapping).
pub(crate) const SLAB_BYTES: usize = 64 << 20;
/// The zero band at the bottom of a dense stack.
pub(crate) const CANARY_BYTES: usize = 64;

/// Live stacks in the process.
pub(crate) fn live_stacks() -> usize {
    LIVE_STACKS.load(Ordering::Relaxed)
}

/// One coroutine stack: either a private anonymous mapping with a guard
/// page below the usable range (dropping it unmaps), or a slot of a dense
/// slab (dropping it returns the slot to its arena).
pub(crate) struct StackMem {
    /// Guarded: start of the mapping (the guard page). Dense: the bottom.
    base: NonNull<u8>,
    /// Usable bytes.
    size: usize,
    /// The arena a dense slot belongs to; `None` for a guarded stack.
    arena: Option<Arc<DenseArena>>,
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
        if GUARDED_LIVE.fetch_add(1, Ordering::Relaxed) >= guarded_limit() {
            GUARDED_LIVE.fetch_sub(1, Ordering::Relaxed);
            return Err(io::Error::from_raw_os_error(libc::ENOMEM));
        }
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
            GUARDED_LIVE.fetch_sub(1, Ordering::Relaxed);
            return Err(io::Error::last_os_error());
        }
        if !install_guard(base, page) {
            let e = io::Error::last_os_error();
            // SAFETY: unmapping exactly the region mapped above, which nothing
            // else references yet.
            unsafe { libc::munmap(base, total) };
            GUARDED_LIVE.fetch_sub(1, Ordering::Relaxed);
            return Err(e);
        }
        LIVE_STACKS.fetch_add(1, Ordering::Relaxed);
        Ok(StackMem {
            // SAFETY: mmap succeeded, so base is not null.
            base: unsafe { NonNull::new_unchecked(base.cast()) },
            size,
            arena: None,
        })
    }

    /// Bytes below `bottom()` that belong to this stack's mapping (the guard
    /// page), zero for a dense slot.
    fn guard_bytes(&self) -> usize {
        if self.arena.is_some() {
            0
        } else {
            page_size()
        }
    }

    /// Whether this is a dense (unguarded) slot.
    pub(crate) fn is_dense(&self) -> bool {
        self.arena.is_some()
    }

    /// Dense stacks: whether a task that just switched out with its stack
    /// pointer at `sp` stayed inside its stack. Checks that `sp` lies above
    /// the canary band and that the band still reads as zero.
    pub(crate) fn dense_intact(&self, sp: usize) -> bool {
        let bottom = self.bottom() as usize;
        if sp < bottom + CANARY_BYTES || sp > self.top() as usize {
            return false;
        }
        self.dense_band_intact()
    }

    /// Dense stacks: whether the canary band at the stack limit still reads
    /// as zero. The check for a task that switched out with its stack pointer
    /// elsewhere (on a fiber's stack, which has a guard page of its own).
    pub(crate) fn dense_band_intact(&self) -> bool {
        // SAFETY: bottom..bottom+CANARY_BYTES lies inside this slot, which
        // this StackMem owns; volatile so the read is not elided.
        (0..CANARY_BYTES / 8)
            .all(|i| unsafe { std::ptr::read_volatile((self.bottom() as *const u64).add(i)) == 0 })
    }

    /// Usable bytes.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The guard page's address range `[lo, hi)`; empty for a dense slot.
    pub(crate) fn guard(&self) -> (usize, usize) {
        let lo = self.base.as_ptr() as usize;
        (lo, lo + self.guard_bytes())
    }

    /// The highest address (exclusive): where the stack starts growing down.
    pub(crate) fn top(&self) -> *mut u8 {
        // SAFETY: base + guard + size is one past the end of this stack.
        unsafe { self.base.as_ptr().add(self.guard_bytes() + self.size) }
    }

    /// The lowest usable address.
    pub(crate) fn bottom(&self) -> *mut u8 {
        // SAFETY: base + guard is the first usable byte of this stack.
        unsafe { self.base.as_ptr().add(self.guard_bytes()) }
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
        if let Some(arena) = self.arena.take() {
            arena.free(self.base);
            return;
        }
        LIVE_STACKS.fetch_sub(1, Ordering::Relaxed);
        GUARDED_LIVE.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: the mapping was made by `new` with exactly this length and
        // is owned by self; no coroutine runs on it once it is dropped (the
        // owner only drops a stack after its task finished).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.size + page_size()) };
    }
}

/// Dense stack slots of one size, carved from slabs that are never unmapped
/// (freed slots are reused; their touched pages stay resident).
pub(crate) struct DenseArena {
    size: usize,
    inner: Mutex<DenseInner>,
}

struct DenseInner {
    /// Freed slots, ready for reuse.
    free: Vec<NonNull<u8>>,
    /// The slab being carved, and how far.
    cursor: usize,
    end: usize,
    /// Every slab, for the arena's drop.
    slabs: Vec<(usize, usize)>,
    /// Slots handed out and not returned.
    live: usize,
}

// SAFETY: the arena owns its slabs; the raw pointers are addresses of
// memory it owns, handed out under its mutex.
unsafe impl Send for DenseArena {}
// SAFETY: all mutable state is behind the mutex.
unsafe impl Sync for DenseArena {}

impl DenseArena {
    pub(crate) fn new(size: usize) -> Arc<DenseArena> {
        Arc::new(DenseArena {
            size,
            inner: Mutex::new(DenseInner {
                free: Vec::new(),
                cursor: 0,
                end: 0,
                slabs: Vec::new(),
                live: 0,
            }),
        })
    }

    /// The stack size this arena hands out.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Slots handed out and not returned.
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        self.inner.lock().live
    }

    /// A slot of `self.size` bytes.
    pub(crate) fn alloc(self: &Arc<Self>) -> io::Result<StackMem> {
        let mut g = self.inner.lock();
        let base = match g.free.pop() {
            Some(p) => p,
            None => {
                if g.cursor + self.size > g.end {
                    let bytes = SLAB_BYTES.max(self.size);
                    // SAFETY: a fresh anonymous mapping at an address of the
                    // kernel's choosing; checked for failure.
                    let m = unsafe {
                        libc::mmap(
                            std::ptr::null_mut(),
                            bytes,
                            libc::PROT_READ | libc::PROT_WRITE,
                            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                            -1,
                            0,
                        )
                    };
                    if m == libc::MAP_FAILED {
                        return Err(io::Error::last_os_error());
                    }
                    // Huge pages would make one touched stack cost 2 MiB of
                    // its neighbours' memory; failure here only costs memory.
                    // SAFETY: advice on the mapping made just above.
                    unsafe { libc::madvise(m, bytes, libc::MADV_NOHUGEPAGE) };
                    g.slabs.push((m as usize, bytes));
                    g.cursor = m as usize;
                    g.end = m as usize + bytes;
                }
                let p = g.cursor;
                g.cursor += self.size;
                // SAFETY: p lies inside a slab that mmap returned: not null.
                unsafe { NonNull::new_unchecked(p as *mut u8) }
            }
        };
        g.live += 1;
        LIVE_STACKS.fetch_add(1, Ordering::Relaxed);
        Ok(StackMem {
            base,
            size: self.size,
            arena: Some(self.clone()),
        })
    }

    fn free(&self, base: NonNull<u8>) {
        LIVE_STACKS.fetch_sub(1, Ordering::Relaxed);
        let mut g = self.inner.lock();
        g.live -= 1;
        g.free.push(base);
    }
}

impl Drop for DenseArena {
    fn drop(&mut self) {
        // Every slot holds an Arc to the arena, so none is in use now.
        for &(base, len) in &self.inner.get_mut().slabs {
            // SAFETY: each slab was mapped by `alloc` with exactly this
            // length, and no slot of it is alive (see above).
            unsafe { libc::munmap(base as *mut libc::c_void, len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_marker_leaves_the_stack_one_mapping() {
        let s = StackMem::new(round_to_pages(MIN_STACK_SIZE)).unwrap();
        let (lo, hi) = s.guard();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let guard_vma = maps
            .lines()
            .any(|l| l.starts_with(&format!("{lo:x}-{hi:x} ---p")));
        match GUARD_MARKERS.load(Ordering::Relaxed) {
            MARKERS_YES => assert!(!guard_vma, "a guard marker split the mapping"),
            MARKERS_NO => assert!(guard_vma, "no PROT_NONE guard mapping"),
            m => panic!("guard mode {m} after a stack was mapped"),
        }
    }

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
    fn dense_slots_are_adjacent_and_reused() {
        let size = round_to_pages(MIN_STACK_SIZE);
        let arena = DenseArena::new(size);
        let a = arena.alloc().unwrap();
        let b = arena.alloc().unwrap();
        assert_eq!(b.bottom() as usize, a.top() as usize, "carved back to back");
        assert_eq!(a.guard().0, a.guard().1, "no guard page");
        assert!(a.dense_intact(a.top() as usize - 256));
        assert!(
            !a.dense_intact(a.bottom() as usize + 8),
            "sp inside the band"
        );
        let a_bottom = a.bottom();
        drop(a);
        assert_eq!(arena.live(), 1);
        let c = arena.alloc().unwrap();
        assert_eq!(c.bottom(), a_bottom, "freed slot reused");
        // SAFETY: writes inside c's own slot, then checks the band.
        unsafe { c.bottom().add(8).write(0xAB) };
        assert!(!c.dense_intact(c.top() as usize - 256), "damaged band seen");
    }
}
