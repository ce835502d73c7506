//! The registry of live tasks, which task dumps read.
//!
//! A task is *live* from its spawn until its [`Runnable`] is dropped (it
//! finished and its Processer freed it, or it was dropped without running
//! at shutdown). While it is live, its header's address sits in one slot of
//! one [`Shard`] of its scheduler's registry.
//!
//! # Cost
//!
//! The registry must cost next to nothing when nobody dumps. So:
//!
//! - Each Processer thread owns a shard ([`ShardOwner`]) and fills its slots
//!   without a lock or a read-modify-write: one Release store of the header
//!   address into a free slot taken from its own free list. Spawns from
//!   other threads go to the scheduler's *outside* shard: each such thread
//!   takes [`OUTSIDE_BATCH`] of its free slots at a time under its lock and
//!   fills them as an owner does (`OutsideSlots`), so a thread spawning a
//!   burst takes the lock once per batch rather than once per task, on a
//!   line the Processers freeing its tasks also take.
//! - A task leaves its shard when its Processer frees it: the gc queue frees
//!   finished tasks in batches, and the batch leaves under one lock per
//!   shard it touches (almost always one).
//!
//! # The race this guards against
//!
//! A dump reads a slot's address, then takes a reference to the task (an
//! increment of its count). Between the two, the task must not be freed.
//! The shard's lock makes it so: a slot is emptied only under the lock, and
//! the task's cell is freed only after its `Runnable` (one of the counted
//! references) is dropped, which comes after the slot is emptied. A dump
//! holds the lock while it reads the slots and takes its references:
//!
//! ```text
//!  dump D                                 Processer P freeing task T
//!  1. lock shard S                        1. lock shard S (waits for D)
//!  2. load slot: T (Acquire)              2. empty T's slot (Release)
//!  3. T.refs += 1 (T is alive: P has      3. unlock S
//!     not emptied the slot yet)           4. drop T's Runnable: the cell
//!  4. unlock S                               lives on while D's reference does
//! ```
//!
//! A slot being filled while a dump reads it shows the new task or not;
//! either is the truth at some instant of the dump.

use std::cell::{RefCell, UnsafeCell};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Arc;

use crate::sys::lock::Mutex;

use crate::runtime::task::{Runnable, TaskHeader, TaskRef};

/// Slots per chunk.
const CHUNK_SLOTS: usize = 256;

/// Free slots of the outside shard a spawning thread takes at a time.
pub(crate) const OUTSIDE_BATCH: usize = 32;

/// One slot: a live task's header address, or null.
type Slot = AtomicPtr<TaskHeader>;

/// A block of slots. Chunks are linked into their shard's list when made
/// and freed with the shard, so a slot's address stays valid as long as
/// the scheduler does.
struct Chunk {
    /// The chunk made before this one.
    next: *mut Chunk,
    slots: [Slot; CHUNK_SLOTS],
}

/// Where a task is registered: its shard and its slot. Kept in the task's
/// header, read and written only by the holder of the task's right to run
/// (see `TaskHeader::live`).
#[derive(Clone, Copy)]
pub(crate) struct Entry {
    shard: *const Shard,
    slot: *const Slot,
}

impl Entry {
    /// Not registered (or no longer).
    pub(crate) const NONE: Entry = Entry {
        shard: ptr::null(),
        slot: ptr::null(),
    };

    #[inline]
    pub(crate) fn is_registered(&self) -> bool {
        !self.slot.is_null()
    }
}

/// One shard of the registry.
pub(crate) struct Shard {
    /// The newest chunk (Release when a chunk is added; Acquire by dumps).
    chunks: AtomicPtr<Chunk>,
    /// Held by whoever empties a slot, by dumps while they read the slots,
    /// and, for the outside shard, by a thread taking a batch of free slots
    /// (or, when its batch is out of reach, registering one task). Holds the
    /// slots emptied by threads other than the owner, for the owner (or the
    /// threads spawning from outside) to take back.
    locked: Mutex<Vec<*const Slot>>,
    /// A Processer thread owns this shard (changed under the scheduler's
    /// list lock).
    owned: AtomicBool,
}

// SAFETY: the raw pointers name slots of this shard's own chunks, which live
// as long as the shard; every access to the chunk list and the slots goes
// through atomics or the lock.
unsafe impl Send for Shard {}
// SAFETY: as above.
unsafe impl Sync for Shard {}

impl Shard {
    fn new() -> Shard {
        Shard {
            chunks: AtomicPtr::new(ptr::null_mut()),
            locked: Mutex::new(Vec::new()),
            owned: AtomicBool::new(false),
        }
    }

    /// Makes a chunk, links it, and returns its slots' addresses. Only the
    /// owner, or a holder of the lock for the outside shard, adds chunks.
    fn grow(&self, free: &mut Vec<*const Slot>) {
        let chunk = Box::into_raw(Box::new(Chunk {
            next: self.chunks.load(Ordering::Relaxed),
            slots: [const { AtomicPtr::new(ptr::null_mut()) }; CHUNK_SLOTS],
        }));
        // SAFETY: just made, not shared yet.
        let slots = unsafe { &(*chunk).slots };
        free.extend(slots.iter().rev().map(|s| s as *const Slot));
        // Release: publishes the chunk's contents to dumps (Acquire).
        self.chunks.store(chunk, Ordering::Release);
    }

    /// Calls `f` with every task registered here, under the lock.
    fn for_each(&self, f: &mut dyn FnMut(TaskRef)) {
        let _g = self.locked.lock();
        // Acquire: pairs with `grow`'s Release.
        let mut chunk = self.chunks.load(Ordering::Acquire);
        while !chunk.is_null() {
            // SAFETY: published chunks live as long as the shard.
            let c = unsafe { &*chunk };
            for slot in &c.slots {
                // Acquire: pairs with `register`'s Release, so the header's
                // fields are visible.
                let t = slot.load(Ordering::Acquire);
                if !t.is_null() {
                    // SAFETY: a filled slot is emptied only under the lock we
                    // hold, before the task's Runnable is dropped; so the
                    // header is alive (module docs).
                    f(unsafe { TaskRef::clone_from_ptr(t) });
                }
            }
            chunk = c.next;
        }
    }

    /// Registers `t` in the outside shard (a spawn from a thread that owns
    /// no shard of this scheduler), under the lock.
    fn register_locked(&self, t: &Runnable) {
        let mut free = self.locked.lock();
        if free.is_empty() {
            self.grow(&mut free);
        }
        let slot = free.pop().expect("a grown shard has free slots");
        fill(self, slot, t);
    }

    /// Moves up to `n` free slots of this (outside) shard into `to`, growing
    /// it if it has none.
    fn take_free(&self, to: &mut Vec<*const Slot>, n: usize) {
        let mut free = self.locked.lock();
        if free.is_empty() {
            self.grow(&mut free);
        }
        let keep = free.len().saturating_sub(n);
        to.extend(free.drain(keep..));
    }
}

/// Free slots of one scheduler's outside shard that this thread took for
/// its spawns; they go back to the shard when the thread moves on to
/// another scheduler or exits.
///
/// The `Arc` keeps the shard, and so its chunks, alive: the slot addresses
/// stay valid even past the scheduler's end, and no other shard can ever
/// be allocated at this one's address while the thread holds it (the
/// identity check is a pointer comparison). The price: a thread that
/// spawned into a scheduler keeps that scheduler's outside shard (2 KiB a
/// chunk of 256 slots) until it spawns into another one or exits.
struct OutsideSlots {
    shard: Arc<Shard>,
    free: Vec<*const Slot>,
}

impl Drop for OutsideSlots {
    fn drop(&mut self) {
        if !self.free.is_empty() {
            self.shard.locked.lock().append(&mut self.free);
        }
    }
}

thread_local! {
    static OUTSIDE: RefCell<Option<OutsideSlots>> = const { RefCell::new(None) };
}

/// Registers `t` in `shard` (a scheduler's outside shard) from this thread's
/// batch of its free slots; false if this thread's batch is out of reach
/// (its thread-locals are being destroyed), for the caller to register
/// under the lock. (The batch is never borrowed twice: nothing done under
/// the borrow registers a task. `try_borrow_mut` makes that a fallback to
/// the lock rather than a panic, should it ever change.)
///
/// Not inlined, and it never switches: no thread-local address is held
/// across a switch.
#[inline(never)]
fn register_from_batch(shard: &Arc<Shard>, t: &Runnable) -> bool {
    OUTSIDE
        .try_with(|c| {
            let Ok(mut held) = c.try_borrow_mut() else {
                return false;
            };
            let mine = match &mut *held {
                Some(o) if Arc::ptr_eq(&o.shard, shard) => o,
                other => {
                    // Another scheduler's batch goes back to it here.
                    other.insert(OutsideSlots {
                        shard: shard.clone(),
                        free: Vec::with_capacity(OUTSIDE_BATCH),
                    })
                }
            };
            if mine.free.is_empty() {
                mine.shard.take_free(&mut mine.free, OUTSIDE_BATCH);
            }
            let slot = mine.free.pop().expect("a grown shard has free slots");
            fill(&mine.shard, slot, t);
            true
        })
        .unwrap_or(false)
}

impl Drop for Shard {
    fn drop(&mut self) {
        let mut chunk = *self.chunks.get_mut();
        while !chunk.is_null() {
            // SAFETY: every chunk was made by `grow` with Box::into_raw and
            // is freed once, here.
            let c = unsafe { Box::from_raw(chunk) };
            chunk = c.next;
        }
    }
}

/// Fills `slot` of `shard` with `t` and notes the entry in its header.
#[inline]
fn fill(shard: &Shard, slot: *const Slot, t: &Runnable) {
    let h = t.header();
    // SAFETY: the slot lies in a chunk of `shard`, which is alive.
    // Release: pairs with the dump's Acquire load (module docs).
    unsafe { &*slot }.store(h.as_ptr().cast_mut(), Ordering::Release);
    t.set_live(Entry {
        shard: shard as *const Shard,
        slot,
    });
}

/// A Processer thread's handle to the shard it owns: its private free list.
pub(crate) struct ShardOwner {
    shard: Arc<Shard>,
    /// Touched only by the owning thread, never reentrantly (no user code
    /// runs while it is borrowed).
    free: UnsafeCell<Vec<*const Slot>>,
}

impl ShardOwner {
    /// Registers a task spawned on this Processer's thread.
    #[inline]
    pub(crate) fn register(&self, t: &Runnable) {
        // SAFETY: only the owning thread calls this (`ProcLocal` is not
        // shared), and nothing below calls back into it.
        let free = unsafe { &mut *self.free.get() };
        let slot = match free.pop() {
            Some(s) => s,
            None => self.refill(free),
        };
        fill(&self.shard, slot, t);
    }

    /// Takes back the slots others emptied, or grows; returns one.
    #[cold]
    fn refill(&self, free: &mut Vec<*const Slot>) -> *const Slot {
        std::mem::swap(free, &mut *self.shard.locked.lock());
        if free.is_empty() {
            self.shard.grow(free);
        }
        free.pop().expect("a grown shard has free slots")
    }
}

/// The registry of one scheduler: every shard ever made (shards are reused,
/// never freed, until the scheduler is), and the outside shard.
pub(crate) struct Registry {
    shards: Mutex<Vec<Arc<Shard>>>,
    /// Shared with the threads holding a batch of its free slots.
    outside: Arc<Shard>,
}

impl Registry {
    pub(crate) fn new() -> Registry {
        Registry {
            shards: Mutex::new(Vec::new()),
            outside: Arc::new(Shard::new()),
        }
    }

    /// A shard for a new Processer thread: one whose owner left, else a new
    /// one.
    pub(crate) fn take_shard(&self) -> ShardOwner {
        let mut shards = self.shards.lock();
        let shard = match shards.iter().find(|s| !s.owned.load(Ordering::Relaxed)) {
            Some(s) => s.clone(),
            None => {
                let s = Arc::new(Shard::new());
                shards.push(s.clone());
                s
            }
        };
        shard.owned.store(true, Ordering::Relaxed);
        // The free slots: those the previous owner gave back, and those
        // others emptied since.
        let free = std::mem::take(&mut *shard.locked.lock());
        ShardOwner {
            shard,
            free: UnsafeCell::new(free),
        }
    }

    /// Gives a Processer's shard back when its thread leaves.
    pub(crate) fn give_back(&self, owner: ShardOwner) {
        let ShardOwner { shard, free } = owner;
        let _shards = self.shards.lock();
        // The free slots go back with the shard for the next owner.
        shard.locked.lock().extend(free.into_inner());
        shard.owned.store(false, Ordering::Relaxed);
    }

    /// Registers a task spawned from outside the scheduler's Processers.
    pub(crate) fn register_outside(&self, t: &Runnable) {
        if !register_from_batch(&self.outside, t) {
            self.outside.register_locked(t);
        }
    }

    /// Calls `f` with a reference to every live task.
    pub(crate) fn for_each(&self, f: &mut dyn FnMut(TaskRef)) {
        let shards: Vec<Arc<Shard>> = self.shards.lock().clone();
        for s in &shards {
            s.for_each(f);
        }
        self.outside.for_each(f);
    }
}

/// Removes dead tasks from the registry, in one pass per shard: `batch`
/// holds their Runnables, which the caller drops afterwards.
pub(crate) fn unregister_batch(batch: &mut [Runnable]) {
    let mut i = 0;
    while i < batch.len() {
        let e = batch[i].live();
        if !e.is_registered() {
            i += 1;
            continue;
        }
        // SAFETY: a registered task's shard lives as long as its scheduler,
        // which the task's header keeps alive.
        let shard = unsafe { &*e.shard };
        let mut freed = shard.locked.lock();
        while i < batch.len() {
            let e = batch[i].live();
            if e.is_registered() {
                if !ptr::eq(e.shard, shard) {
                    break;
                }
                empty(&mut freed, &batch[i], e);
            }
            i += 1;
        }
    }
}

/// Removes one dead task from the registry (a Runnable dropped outside the
/// gc queue's batches).
pub(crate) fn unregister(t: &Runnable) {
    let e = t.live();
    if e.is_registered() {
        // SAFETY: as in `unregister_batch`.
        let shard = unsafe { &*e.shard };
        empty(&mut shard.locked.lock(), t, e);
    }
}

/// Empties `t`'s slot; the caller holds its shard's lock (`freed`).
fn empty(freed: &mut Vec<*const Slot>, t: &Runnable, e: Entry) {
    // SAFETY: the slot belongs to a live shard (see above). Release: orders
    // our earlier accesses before a later dump's Acquire of the slot.
    unsafe { &*e.slot }.store(ptr::null_mut(), Ordering::Release);
    freed.push(e.slot);
    t.set_live(Entry::NONE);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    impl Shard {
        /// Slots made so far (free or filled).
        fn slots(&self) -> usize {
            let _g = self.locked.lock();
            let mut n = 0;
            let mut chunk = self.chunks.load(Ordering::Acquire);
            while !chunk.is_null() {
                n += CHUNK_SLOTS;
                // SAFETY: published chunks live as long as the shard.
                chunk = unsafe { (*chunk).next };
            }
            n
        }
    }

    /// A spawning thread takes free slots of the outside shard in batches;
    /// what is left of its batch goes back when it exits, so threads that
    /// come and go do not grow the shard.
    #[test]
    fn outside_slots_taken_by_exiting_threads_come_back() {
        let s = crate::Scheduler::builder().min_threads(1).build().unwrap();
        let (tx, rx) = crate::chan::unbounded::<()>();
        // 100 threads one after another, each leaving one task alive (so no
        // slot comes back through a freed task).
        let hs: Vec<_> = (0..100)
            .map(|_| {
                let (s, rx) = (s.clone(), rx.clone());
                std::thread::spawn(move || s.spawn(move || rx.recv().is_err()))
                    .join()
                    .unwrap()
            })
            .collect();
        // 100 live tasks fit in one chunk. Without the give-back, each thread
        // would have kept the other 31 slots of its batch, and the shard
        // would have grown a chunk every eight threads.
        assert_eq!(s.shared().live.outside.slots(), CHUNK_SLOTS);
        drop(tx);
        for h in hs {
            assert!(h.join().unwrap(), "disconnected");
        }
        s.shutdown();
    }
}
