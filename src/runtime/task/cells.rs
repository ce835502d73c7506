//! A per-thread cache of task cells' memory, so that a burst of spawns and
//! frees stops paying the allocator.
//!
//! A task's cell (header, result slot, closure: `task/join.rs`) is one
//! allocation of a size that depends on the closure. Cells of up to
//! [`MAX_CELL`] bytes are allocated in size classes of [`CLASS`] bytes, and
//! a freed cell's memory goes to the freeing thread's cache for its class,
//! from which the next spawn on that thread of a cell of that class takes
//! it. Bursts of 100,000 tasks free and reuse cells without a trip through
//! `malloc`'s arenas, whose per-thread cache (glibc's tcache) holds 7
//! blocks per size.
//!
//! # How much it keeps, and when it gives it back
//!
//! - A Processer thread's cache grows with demand up to [`PROCESSER_LIMIT`]
//!   bytes (32 MiB: a burst of about 100,000 small tasks). When the
//!   Processer goes to sleep for lack of work (the first sleep of an idle
//!   spell) the cache gives back half of what it holds, and once the Processer has been idle for a second
//!   (`CELLS_IDLE` in `processer/run.rs`; its sleep is timed for it) all but
//!   [`IDLE_KEEP`] (256 KiB). So work that comes in bursts with short
//!   pauses keeps reusing cells, and the memory of a burst goes back once
//!   the Processer rests, as Go drops the dead goroutine descriptors it no
//!   longer needs.
//! - Any other thread (a plain thread that spawns or joins) keeps at most
//!   [`IDLE_KEEP`], plus, for a while, the rest of a batch it took from the
//!   depot for a spawn (its next free over the limit spills it back).
//! - What does not fit in a thread's cache goes to the process's *depot*,
//!   a batch of up to [`DEPOT_BATCH`] cells of its class at a time, and a
//!   thread whose cache has none of a class takes a batch from there before
//!   it calls the allocator. Tasks spawned from one thread are freed on
//!   another (the Processer that ran them, or the thread that joined them),
//!   so without it a thread spawning bursts from outside the Processers
//!   paid `malloc` for every cell, and the thread freeing them `free`
//!   (about a quarter of the spawning thread's samples in a burst of
//!   100,000, under perf). The depot holds at most [`DEPOT_LIMIT`] bytes
//!   (32 MiB). It is emptied when a Processer that went to sleep while the
//!   depot held anything has rested a second (its sleep is timed for it,
//!   once per idle spell: what comes in later waits for the next Processer
//!   to rest, or to end), when a core or extra Processer thread ends, and
//!   when the last Processer loop of the process ends; and it takes nothing
//!   while no Processer loop runs (nobody would empty it).
//! - A thread's cache is freed when the thread exits.
//!
//! Every access to the thread-local cache is in an `#[inline(never)]`
//! function that never switches the task out (see `coroutine/switch.rs`):
//! spawns and frees run on task stacks, which may move between threads at a
//! switch in migratable mode.

use std::alloc::{self, Layout};
use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::sys::lock::Mutex;

/// Size-class granularity, in bytes.
pub(crate) const CLASS: usize = 64;
/// The largest cell kept (bigger ones go straight to the allocator).
pub(crate) const MAX_CELL: usize = 1024;
/// Size classes.
const CLASSES: usize = MAX_CELL / CLASS;
/// Alignment of cached blocks (a cell's own alignment must not exceed it).
const ALIGN: usize = 16;
/// The most a Processer thread's cache keeps while busy.
pub(crate) const PROCESSER_LIMIT: usize = 32 << 20;
/// What a cache keeps while idle, and the limit of non-Processer threads.
pub(crate) const IDLE_KEEP: usize = 256 << 10;
/// The most the depot holds.
pub(crate) const DEPOT_LIMIT: usize = 32 << 20;
/// Cells of one class moved to or from the depot at a time.
pub(crate) const DEPOT_BATCH: usize = 64;

/// Free blocks per class, as in a thread's cache (see [`Cache`]).
type Lists = [Vec<NonNull<u8>>; CLASSES];

/// The depot: blocks passed between threads (module docs).
struct Depot {
    free: Lists,
}

// SAFETY: the blocks are plain memory owned by the depot alone, handed out
// to one thread at a time under the lock.
unsafe impl Send for Depot {}

static DEPOT: Mutex<Depot> = Mutex::new(Depot {
    free: [const { Vec::new() }; CLASSES],
});
/// Bytes in the depot: changed under its lock, read without it (a hint for
/// whether a trim may find anything).
static DEPOT_BYTES: AtomicUsize = AtomicUsize::new(0);
/// Blocks of each class in the depot: changed under its lock, read without
/// it (a hint for whether a refill of that class may find any: a thread
/// spawning from outside refills at nearly every spawn).
static DEPOT_BLOCKS: [AtomicUsize; CLASSES] = [const { AtomicUsize::new(0) }; CLASSES];
/// Processer loops running in the process. With none, nobody would ever
/// empty the depot: a spill then frees instead (see [`to_depot`]).
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Frees every block of `lists` above `keep` bytes, largest classes first;
/// returns the bytes freed.
fn free_blocks(lists: &mut Lists, held: usize, keep: usize) -> usize {
    let mut left = held;
    for (k, list) in lists.iter_mut().enumerate().rev() {
        let size = (k + 1) * CLASS;
        while left > keep {
            let Some(p) = list.pop() else { break };
            left -= size;
            // SAFETY: every block of class `k`, cached or in the depot, was
            // allocated by `alloc_class` with exactly this layout, and is
            // owned by its list alone.
            unsafe { alloc::dealloc(p.as_ptr(), class_layout(k)) };
        }
        if list.is_empty() {
            *list = Vec::new();
        }
    }
    held - left
}

/// Blocks of `size` bytes that fit in a depot holding `held` bytes.
fn depot_room(held: usize, size: usize) -> usize {
    DEPOT_LIMIT.saturating_sub(held) / size
}

/// Moves up to [`DEPOT_BATCH`] blocks of class `k` from `from` into the
/// depot, as many as it has room for; returns how many.
///
/// With no Processer loop running, nobody would empty the depot: nothing
/// goes in. The last loop to end decrements [`RUNNING`] and then takes the
/// depot's lock and empties it ([`empty_depot`]); a spill pushes under
/// the lock and then reads `RUNNING`. If the ender's lock comes after the
/// push, it frees it; if before, the spill's lock comes after the ender's
/// decrement, so its read sees zero and it trims itself.
fn to_depot(from: &mut Vec<NonNull<u8>>, k: usize) -> usize {
    if RUNNING.load(Ordering::SeqCst) == 0 {
        return 0;
    }
    let size = (k + 1) * CLASS;
    let mut d = DEPOT.lock();
    let room = depot_room(DEPOT_BYTES.load(Ordering::Relaxed), size);
    let n = from.len().min(DEPOT_BATCH).min(room);
    let keep = from.len() - n;
    d.free[k].extend(from.drain(keep..));
    DEPOT_BYTES.fetch_add(n * size, Ordering::Relaxed);
    DEPOT_BLOCKS[k].store(d.free[k].len(), Ordering::Relaxed);
    drop(d);
    if RUNNING.load(Ordering::SeqCst) == 0 {
        trim_depot();
    }
    n
}

/// Moves up to [`DEPOT_BATCH`] blocks of class `k` from the depot into
/// `to`; returns how many.
fn from_depot(to: &mut Vec<NonNull<u8>>, k: usize) -> usize {
    if DEPOT_BLOCKS[k].load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let mut d = DEPOT.lock();
    let list = &mut d.free[k];
    let n = list.len().min(DEPOT_BATCH);
    let keep = list.len() - n;
    to.extend(list.drain(keep..));
    DEPOT_BLOCKS[k].store(list.len(), Ordering::Relaxed);
    DEPOT_BYTES.fetch_sub(n * (k + 1) * CLASS, Ordering::Relaxed);
    n
}

/// Empties the depot (a Processer idle for a while). The blocks are freed
/// after the lock is released: up to 32 MiB of `free` calls must not hold
/// up the threads spilling and refilling meanwhile.
pub(crate) fn trim_depot() {
    if DEPOT_BYTES.load(Ordering::Relaxed) == 0 {
        return;
    }
    empty_depot();
}

/// Takes everything out of the depot under its lock, and frees it after.
/// The last Processer loop of the process to end calls it directly, without
/// [`trim_depot`]'s look at `DEPOT_BYTES`: the lock is what orders the end
/// against a spill that read `RUNNING` before the decrement (see
/// [`to_depot`]); a relaxed look could miss its push.
fn empty_depot() {
    let mut taken: Lists = [const { Vec::new() }; CLASSES];
    let held = {
        let mut d = DEPOT.lock();
        std::mem::swap(&mut taken, &mut d.free);
        for n in &DEPOT_BLOCKS {
            n.store(0, Ordering::Relaxed);
        }
        DEPOT_BYTES.swap(0, Ordering::Relaxed)
    };
    free_blocks(&mut taken, held, 0);
}

/// One thread's cache.
struct Cache {
    /// Free blocks per class (class `k` holds blocks of `(k + 1) * CLASS`
    /// bytes, allocated with [`ALIGN`]).
    free: Lists,
    /// Bytes held in `free`.
    bytes: usize,
    /// The most `free` may hold.
    limit: usize,
    /// Processer loops running on this thread: 1, or more while a loop
    /// runs a nested one (a `block_on` called by a destructor the loop
    /// runs). The thread is counted once in [`RUNNING`] while it is not 0.
    loops: u32,
}

impl Cache {
    const fn new() -> Cache {
        Cache {
            free: [const { Vec::new() }; CLASSES],
            bytes: 0,
            limit: IDLE_KEEP,
            loops: 0,
        }
    }

    /// Frees blocks until at most `keep` bytes are held.
    fn trim(&mut self, keep: usize) {
        self.bytes -= free_blocks(&mut self.free, self.bytes, keep);
    }

    /// Moves blocks to the depot until at most `keep` bytes are held, or
    /// the depot is full; then frees the rest above `keep`.
    fn spill(&mut self, keep: usize) {
        for k in (0..CLASSES).rev() {
            let size = (k + 1) * CLASS;
            while self.bytes > keep && !self.free[k].is_empty() {
                let moved = to_depot(&mut self.free[k], k);
                if moved == 0 {
                    break;
                }
                self.bytes -= moved * size;
            }
        }
        self.trim(keep);
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        // A loop that unwound never ended: the thread no longer runs any.
        if self.loops > 0 {
            self.loops = 1;
            if loop_over(self) {
                empty_depot();
            }
        }
        self.trim(0);
    }
}

thread_local! {
    static CACHE: UnsafeCell<Cache> = const { UnsafeCell::new(Cache::new()) };
}

/// Runs `f` on this thread's cache, unless the thread is past destroying
/// it (then `None`).
#[inline(always)]
fn with_cache<R>(f: impl FnOnce(&mut Cache) -> R) -> Option<R> {
    // SAFETY: the cache is this thread's own, and no call made while `f`
    // runs comes back here: `f` only touches the free lists, the depot
    // (through its lock; an emptying frees the blocks after releasing it)
    // and the global allocator, never the runtime or another cell.
    CACHE.try_with(|c| f(unsafe { &mut *c.get() })).ok()
}

/// The size class of `layout`, if it is cached.
#[inline(always)]
const fn class_of(layout: Layout) -> Option<usize> {
    if layout.size() <= MAX_CELL && layout.align() <= ALIGN && layout.size() > 0 {
        Some((layout.size() - 1) / CLASS)
    } else {
        None
    }
}

#[inline]
fn class_layout(k: usize) -> Layout {
    debug_assert!(k < CLASSES);
    // SAFETY: a non-zero multiple of the alignment, a power of two, far
    // below isize::MAX.
    unsafe { Layout::from_size_align_unchecked((k + 1) * CLASS, ALIGN) }
}

/// Memory for a cell of `layout`: from this thread's cache, else the
/// allocator. Free it with [`free`] and the same layout. The class is
/// worked out at compile time (a cell's layout is a constant).
#[inline(always)]
pub(crate) fn alloc(layout: Layout) -> NonNull<u8> {
    match class_of(layout) {
        Some(k) => alloc_class(k),
        None => raw_alloc(layout),
    }
}

#[inline(never)]
fn alloc_class(k: usize) -> NonNull<u8> {
    let cached = with_cache(|c| {
        let size = (k + 1) * CLASS;
        if c.free[k].is_empty() {
            // A batch from the depot (the cache may go over its limit by up
            // to a batch of each class, until its next free spills).
            c.bytes += from_depot(&mut c.free[k], k) * size;
        }
        let p = c.free[k].pop();
        if p.is_some() {
            c.bytes -= size;
        }
        p
    })
    .flatten();
    match cached {
        Some(p) => p,
        None => raw_alloc(class_layout(k)),
    }
}

fn raw_alloc(layout: Layout) -> NonNull<u8> {
    // SAFETY: every cell layout has a non-zero size (it holds a header).
    let p = unsafe { alloc::alloc(layout) };
    NonNull::new(p).unwrap_or_else(|| alloc::handle_alloc_error(layout))
}

/// Gives back memory from [`alloc`] for a cell of `layout`, whose contents
/// were dropped.
///
/// # Safety
/// `p` came from [`alloc`] with this `layout`, and nothing uses it any more.
#[inline(always)]
pub(crate) unsafe fn free(p: NonNull<u8>, layout: Layout) {
    match class_of(layout) {
        // SAFETY: passed on (contract).
        Some(k) => unsafe { free_class(p, k) },
        // SAFETY: allocated by `raw_alloc` with this layout (contract).
        None => unsafe { alloc::dealloc(p.as_ptr(), layout) },
    }
}

/// # Safety
/// `p` came from [`alloc_class`] for class `k`, and nothing uses it.
#[inline(never)]
unsafe fn free_class(p: NonNull<u8>, k: usize) {
    let size = (k + 1) * CLASS;
    let kept = with_cache(|c| {
        if c.bytes + size > c.limit {
            // Full: a batch of this class goes to the depot, this block
            // with it, unless the depot is full too.
            c.free[k].push(p);
            let moved = to_depot(&mut c.free[k], k);
            if moved == 0 {
                c.free[k].pop();
                return false;
            }
            c.bytes = c.bytes + size - moved * size;
            return true;
        }
        c.free[k].push(p);
        c.bytes += size;
        true
    })
    .unwrap_or(false);
    if !kept {
        // SAFETY: a cached-class block is always allocated with its class
        // layout (`alloc_class`), and the caller gave it up.
        unsafe { alloc::dealloc(p.as_ptr(), class_layout(k)) };
    }
}

/// A Processer loop starts on this thread: its cache may grow to
/// [`PROCESSER_LIMIT`] while busy. Every call is paired with one of
/// [`processer_ended`] or [`plain_thread`] when the loop ends.
#[inline(never)]
pub(crate) fn processer_thread() {
    with_cache(|c| {
        c.limit = PROCESSER_LIMIT;
        c.loops += 1;
        if c.loops == 1 {
            RUNNING.fetch_add(1, Ordering::SeqCst);
        }
    });
}

/// One of this thread's Processer loops is over. Returns whether it was the
/// last loop running in the process (the thread's count went to 0 and so
/// did [`RUNNING`]).
fn loop_over(c: &mut Cache) -> bool {
    if c.loops == 0 {
        return false;
    }
    c.loops -= 1;
    c.loops == 0 && RUNNING.fetch_sub(1, Ordering::SeqCst) == 1
}

/// This thread's Processer loop ended (a core or extra Processer: its
/// scheduler stops, or it retires): the depot's cells go back to the
/// allocator.
#[inline(never)]
pub(crate) fn processer_ended() {
    with_cache(loop_over);
    // Emptied whether or not loops run elsewhere: a scheduler that stops
    // gives back what it passed between threads.
    empty_depot();
}

/// This thread's Processer loop ended (a `block_on` caller's): back to a
/// plain thread's limit, unless it was nested in another loop of this
/// thread, which goes on.
#[inline(never)]
pub(crate) fn plain_thread() {
    let last = with_cache(|c| {
        let last = loop_over(c);
        if c.loops > 0 {
            return last; // the outer loop keeps its limit and its cache
        }
        c.limit = IDLE_KEEP;
        // The next `block_on` of this thread, or another thread, takes them
        // back from the depot.
        c.spill(IDLE_KEEP);
        last
    });
    if last == Some(true) {
        empty_depot();
    }
}

/// The thread's Processer is idle: the cache keeps half of what it holds
/// (going idle), or only [`IDLE_KEEP`] (`fully`: idle for a while), and
/// never less than [`IDLE_KEEP`].
#[inline(never)]
pub(crate) fn idle(fully: bool) {
    with_cache(|c| {
        let keep = if fully {
            IDLE_KEEP
        } else {
            (c.bytes / 2).max(IDLE_KEEP)
        };
        if c.bytes > keep {
            c.trim(keep);
        }
    });
    if fully {
        trim_depot();
    }
}

/// Whether this thread's cache holds more than it keeps while idle.
#[inline(never)]
pub(crate) fn holds_more_than_idle() -> bool {
    with_cache(|c| c.bytes > IDLE_KEEP).unwrap_or(false)
}

/// Whether the depot holds anything.
pub(crate) fn depot_holds() -> bool {
    DEPOT_BYTES.load(Ordering::Relaxed) != 0
}

/// Bytes this thread's cache holds (tests).
#[cfg(test)]
#[inline(never)]
pub(crate) fn cached_bytes() -> usize {
    with_cache(|c| c.bytes).unwrap_or(0)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_freed_cell_is_reused_by_the_next_of_its_class() {
        let l = Layout::from_size_align(200, 8).unwrap();
        let a = alloc(l);
        // SAFETY: from `alloc` with `l`, unused.
        unsafe { free(a, l) };
        assert_eq!(cached_bytes(), 256);
        // Another size of the same class (193..=256 bytes) gets it back.
        let l2 = Layout::from_size_align(250, 16).unwrap();
        let b = alloc(l2);
        assert_eq!(a, b);
        assert_eq!(cached_bytes(), 0);
        // SAFETY: as above.
        unsafe { free(b, l2) };
        plain_thread();
    }

    #[test]
    fn a_plain_threads_cache_stays_small_and_a_processers_shrinks_when_idle() {
        std::thread::spawn(|| {
            let l = Layout::from_size_align(1000, 8).unwrap();
            let cells: Vec<_> = (0..1000).map(|_| alloc(l)).collect();
            for &c in &cells {
                // SAFETY: from `alloc` with `l`, unused.
                unsafe { free(c, l) };
            }
            assert!(cached_bytes() <= IDLE_KEEP, "{}", cached_bytes());
            processer_thread();
            let cells: Vec<_> = (0..2000).map(|_| alloc(l)).collect();
            for &c in &cells {
                // SAFETY: as above.
                unsafe { free(c, l) };
            }
            // Its burst, and perhaps what is left of a batch it took from
            // the depot (which the first part filled).
            let held = cached_bytes();
            assert!(
                (2000 * 1024..(2000 + DEPOT_BATCH) * 1024).contains(&held),
                "a busy Processer keeps its burst: {held}"
            );
            idle(false);
            assert_eq!(
                cached_bytes(),
                held / 2 / 1024 * 1024,
                "going idle halves it (in whole blocks)"
            );
            assert!(holds_more_than_idle());
            idle(true);
            assert!(cached_bytes() <= IDLE_KEEP, "{}", cached_bytes());
            assert!(!holds_more_than_idle());
            // Cells too big or too aligned for the classes pass through.
            let big = Layout::from_size_align(MAX_CELL + 1, 8).unwrap();
            let before = cached_bytes();
            let p = alloc(big);
            // SAFETY: from `alloc` with `big`, unused.
            unsafe { free(p, big) };
            assert_eq!(cached_bytes(), before);
        })
        .join()
        .unwrap();
    }
}

#[cfg(all(test, not(loom)))]
mod depot_tests {
    use super::*;
    use std::collections::HashSet;

    /// Blocks of a class (897 to 960 bytes) that no other test of this
    /// process uses (the depot is process-wide).
    fn layout() -> Layout {
        Layout::from_size_align(900, 8).unwrap()
    }

    /// One thread frees 1,000 cells (its cache keeps 256 KiB of them), then
    /// another allocates 500: how many are the first thread's.
    fn freed_then_reused() -> usize {
        let l = layout();
        let freed: HashSet<usize> = std::thread::spawn(move || {
            let cells: Vec<_> = (0..1000).map(|_| alloc(l)).collect();
            for &c in &cells {
                // SAFETY: from `alloc` with `l`, unused.
                unsafe { free(c, l) };
            }
            assert!(cached_bytes() <= IDLE_KEEP, "{}", cached_bytes());
            cells.iter().map(|p| p.as_ptr() as usize).collect()
        })
        .join()
        .unwrap();
        std::thread::spawn(move || {
            let cells: Vec<_> = (0..500).map(|_| alloc(l)).collect();
            let reused = cells
                .iter()
                .filter(|p| freed.contains(&(p.as_ptr() as usize)))
                .count();
            for &c in &cells {
                // SAFETY: as above.
                unsafe { free(c, l) };
            }
            reused
        })
        .join()
        .unwrap()
    }

    /// Cells freed on a plain thread beyond its cache's limit are not given
    /// to the allocator: the depot passes them to the next thread that
    /// spawns (a thread spawning from outside gets back the cells freed by
    /// the threads that ran or joined its tasks).
    #[test]
    fn what_a_full_cache_frees_goes_through_the_depot_to_another_thread() {
        // The depot takes cells only while some Processer runs (one will
        // empty it).
        let s = crate::Scheduler::builder().min_threads(1).build().unwrap();
        // A scheduler of another test ending in between empties the depot:
        // then the second thread gets none of them, and the round is run
        // again. Without the depot no round reuses all 500.
        let rounds: Vec<usize> = (0..5).map(|_| freed_then_reused()).collect();
        assert!(rounds.contains(&500), "cells reused per round: {rounds:?}");
        // A Processer idle for a while empties it.
        idle(true);
        let k = (layout().size() - 1) / CLASS;
        assert!(DEPOT.lock().free[k].is_empty());
        s.shutdown();
    }

    /// A loop nested in another on one thread (a `block_on` run by a
    /// destructor the outer loop runs) ends without taking the outer loop's
    /// cache limit or its count in `RUNNING` away.
    #[test]
    fn a_nested_loop_ending_leaves_the_outer_one_counted() {
        std::thread::spawn(|| {
            let state = || with_cache(|c| (c.loops, c.limit)).unwrap();
            processer_thread();
            processer_thread(); // the nested loop starts
            plain_thread(); // and ends
            assert_eq!(state(), (1, PROCESSER_LIMIT));
            plain_thread(); // the outer loop ends
            assert_eq!(state(), (0, IDLE_KEEP));
        })
        .join()
        .unwrap();
    }

    /// The depot never holds more than its limit: what does not fit is
    /// given to the allocator.
    #[test]
    fn the_depot_takes_no_more_than_its_limit() {
        let size = 1024;
        assert_eq!(depot_room(0, size), DEPOT_LIMIT / size);
        assert_eq!(depot_room(DEPOT_LIMIT - 3 * size, size), 3);
        assert_eq!(depot_room(DEPOT_LIMIT - size + 1, size), 0);
        assert_eq!(depot_room(DEPOT_LIMIT, size), 0);
    }
}
