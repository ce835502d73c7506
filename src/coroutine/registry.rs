//! The live fiber stacks of the process, by address: which fiber a guard
//! page or a stack pointer belongs to.
//!
//! Three questions need to know whether an address lies on a fiber's stack
//! (`fiber/`), and which fiber's:
//!
//! 1. the overflow handler: is the faulting address in a fiber's guard page?
//!    (`gofer: fiber 'parser' overflowed its 65536-byte stack ...`);
//! 2. the panic hook: is the panicking code running on a fiber's stack?
//! 3. a Processer with dense stacks: a task switched out with its stack
//!    pointer outside its own stack. Did it overflow, or did it switch out
//!    from a fiber it resumed (which then yielded or parked the task)?
//!
//! The answer is looked up by address, when a question is asked, rather
//! than tracked at every switch: a fiber's resume and suspend touch nothing
//! here, and neither does a task that parks, and maybe moves to another
//! thread, with a fiber on top of its stack. A fiber registers its stack
//! when it is made and unregisters it when it finishes, before the stack
//! goes back to its pool.
//!
//! # Readers never lock
//!
//! The overflow handler runs in a signal handler, where taking a lock (or
//! allocating) could deadlock. So the table is a fixed array of chunk
//! pointers, each chunk an array of slots published once and never freed,
//! and each slot is a *seqlock* over plain atomics:
//!
//! ```text
//!  writer (under WRITERS, so one at a time)   reader (any thread, any time)
//!  1. seq += 1 (odd: being written)           1. s1 = seq (Acquire); odd: skip
//!  2. Release fence                           2. read the fields (Relaxed)
//!  3. write the fields (Relaxed)              3. Acquire fence
//!  4. seq += 1 (Release; even: stable)        4. s2 = seq; s1 != s2: skip
//! ```
//!
//! A reader that passes step 4 read one consistent entry. It then uses the
//! entry's name only when the entry holds the address it asked about:
//! that fiber is the one running on the reader's thread, or on top of the
//! task the reader holds, so it cannot finish (and free its name) meanwhile.
//! Two live fibers never share an address, and a fiber unregisters before
//! its stack is reused.

use std::ptr;
use std::sync::atomic::{fence, AtomicPtr, AtomicUsize, Ordering};

use crate::sys::lock::Mutex;

/// Slots per chunk.
const CHUNK_SLOTS: usize = 1024;
/// Chunks at most: room for 1M live fibers, far beyond the guarded-stack
/// cap at the usual `vm.max_map_count`. A fiber made past it is not
/// registered: its overflow is reported as a plain SIGSEGV.
const MAX_CHUNKS: usize = 1024;

/// One fiber's entry. `top == 0`: empty.
struct Slot {
    /// The seqlock's counter (see the module docs).
    seq: AtomicUsize,
    /// The guard page's first address.
    guard_lo: AtomicUsize,
    /// The lowest usable address (the guard page's end).
    bottom: AtomicUsize,
    /// The highest usable address, exclusive.
    top: AtomicUsize,
    /// The fiber's name, or null.
    name_ptr: AtomicPtr<u8>,
    name_len: AtomicUsize,
}

impl Slot {
    /// An empty slot.
    fn empty() -> Slot {
        Slot {
            seq: AtomicUsize::new(0),
            guard_lo: AtomicUsize::new(0),
            bottom: AtomicUsize::new(0),
            top: AtomicUsize::new(0),
            name_ptr: AtomicPtr::new(ptr::null_mut()),
            name_len: AtomicUsize::new(0),
        }
    }

    /// Writes an entry (the writer's steps of the module docs). The caller
    /// holds [`WRITERS`].
    fn write(&self, e: &Entry<'_>) {
        self.seq.fetch_add(1, Ordering::Relaxed);
        // Orders the odd count before the field writes; pairs with the
        // readers' Acquire fence (step 3), so a reader that saw any of the
        // new fields sees an odd or changed count at its step 4.
        fence(Ordering::Release);
        self.guard_lo.store(e.guard.0, Ordering::Relaxed);
        self.bottom.store(e.bottom, Ordering::Relaxed);
        self.top.store(e.top, Ordering::Relaxed);
        let (p, n) = e
            .name
            .map_or((ptr::null_mut(), 0), |s| (s.as_ptr().cast_mut(), s.len()));
        self.name_ptr.store(p, Ordering::Relaxed);
        self.name_len.store(n, Ordering::Relaxed);
        // Release: publishes the fields; pairs with the readers' Acquire
        // load of `seq` (step 1).
        self.seq.fetch_add(1, Ordering::Release);
    }

    /// Reads a consistent entry, or `None` if the slot is empty or being
    /// written (the reader's steps of the module docs).
    fn read(&self) -> Option<Raw> {
        // Acquire: pairs with the writer's final Release increment.
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 % 2 == 1 {
            return None;
        }
        let raw = Raw {
            guard_lo: self.guard_lo.load(Ordering::Relaxed),
            bottom: self.bottom.load(Ordering::Relaxed),
            top: self.top.load(Ordering::Relaxed),
            name_ptr: self.name_ptr.load(Ordering::Relaxed),
            name_len: self.name_len.load(Ordering::Relaxed),
        };
        // Orders the field reads before the re-check; pairs with the
        // writer's Release fence.
        fence(Ordering::Acquire);
        let s2 = self.seq.load(Ordering::Relaxed);
        (s1 == s2 && raw.top != 0).then_some(raw)
    }
}

/// One consistent read of a slot.
struct Raw {
    guard_lo: usize,
    bottom: usize,
    top: usize,
    name_ptr: *mut u8,
    name_len: usize,
}

/// The chunks, published in order; `CHUNKS[..PUBLISHED]` are non-null.
static CHUNKS: [AtomicPtr<Slot>; MAX_CHUNKS] =
    [const { AtomicPtr::new(ptr::null_mut()) }; MAX_CHUNKS];
/// How many chunks are published.
static PUBLISHED: AtomicUsize = AtomicUsize::new(0);

/// The writers' side: free slots, and how many slots were ever handed out.
struct Writers {
    free: Vec<usize>,
    used: usize,
}

static WRITERS: Mutex<Writers> = Mutex::new(Writers {
    free: Vec::new(),
    used: 0,
});

/// Slot `i`, whose chunk is published.
fn slot(i: usize) -> &'static Slot {
    // Acquire: pairs with the Release store that published the chunk.
    let chunk = CHUNKS[i / CHUNK_SLOTS].load(Ordering::Acquire);
    debug_assert!(!chunk.is_null());
    // SAFETY: chunk `i / CHUNK_SLOTS` was published (callers only name
    // slots of published chunks), it holds CHUNK_SLOTS slots, and chunks
    // are never freed.
    unsafe { &*chunk.add(i % CHUNK_SLOTS) }
}

/// What a fiber registers about its stack.
pub(crate) struct Entry<'a> {
    /// The guard page's address range `[lo, hi)`.
    pub(crate) guard: (usize, usize),
    /// The lowest usable address.
    pub(crate) bottom: usize,
    /// The highest usable address, exclusive.
    pub(crate) top: usize,
    /// The fiber's name. Must stay alive, at the same address, until the
    /// registration is removed.
    pub(crate) name: Option<&'a str>,
}

/// A fiber's place in the registry; [`unregister`] removes it.
#[derive(Debug)]
pub(crate) struct Registration(usize);

/// Registers a fiber's stack; `None` if the registry is full (the fiber
/// then runs unregistered: its overflow is reported as a plain SIGSEGV).
///
/// # Safety
/// `entry.name` must stay alive, at the same address, until the returned
/// registration is passed to [`unregister`]: readers may read it until then.
pub(crate) unsafe fn register(entry: &Entry<'_>) -> Option<Registration> {
    let mut w = WRITERS.lock();
    let i = match w.free.pop() {
        Some(i) => i,
        None => {
            let i = w.used;
            let c = i / CHUNK_SLOTS;
            if c >= MAX_CHUNKS {
                return None;
            }
            if i % CHUNK_SLOTS == 0 {
                let chunk: Box<[Slot]> = (0..CHUNK_SLOTS).map(|_| Slot::empty()).collect();
                // Release: the chunk's zeroed slots before its pointer;
                // pairs with the Acquire loads in `slot` and `find`.
                CHUNKS[c].store(Box::leak(chunk).as_mut_ptr(), Ordering::Release);
                // Release: the chunk's pointer before the count that lets
                // readers look at it; pairs with the Acquire load in `find`.
                PUBLISHED.store(c + 1, Ordering::Release);
            }
            w.used += 1;
            i
        }
    };
    slot(i).write(entry);
    Some(Registration(i))
}

/// Removes a registration: readers stop finding the fiber.
pub(crate) fn unregister(r: Registration) {
    let mut w = WRITERS.lock();
    slot(r.0).write(&Entry {
        guard: (0, 0),
        bottom: 0,
        top: 0,
        name: None,
    });
    w.free.push(r.0);
}

/// A registered fiber, as a reader found it.
pub(crate) struct Found<'a> {
    /// Usable bytes of its stack.
    pub(crate) stack_size: usize,
    /// Its name.
    pub(crate) name: Option<&'a str>,
}

impl Found<'_> {
    /// How reports name the fiber: `fiber 'parser'`, or `fiber`.
    pub(crate) fn label(&self) -> FiberLabel<'_> {
        FiberLabel(self.name)
    }
}

/// A fiber as reports name it: `fiber 'parser'`, or `fiber`.
pub(crate) struct FiberLabel<'a>(pub(crate) Option<&'a str>);

impl std::fmt::Display for FiberLabel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("fiber")?;
        if let Some(name) = self.0 {
            write!(f, " '{name}'")?;
        }
        Ok(())
    }
}

/// Which part of a fiber's memory to match an address against.
#[derive(Clone, Copy)]
pub(crate) enum Part {
    /// Its guard page.
    Guard,
    /// Its usable stack.
    Stack,
}

/// Finds the fiber whose guard page or stack (`part`) holds `addr`, and
/// runs `f` on it. Lock-free and allocation-free: callable from a signal
/// handler.
///
/// The caller must know that a fiber found this way cannot finish while `f`
/// runs: it is the fiber running on the caller's thread, or the one on top
/// of a task whose execution right the caller holds (see the module docs).
pub(crate) fn find<T>(addr: usize, part: Part, f: impl FnOnce(&Found<'_>) -> T) -> Option<T> {
    // Acquire: pairs with the Release store in `register`.
    let chunks = PUBLISHED.load(Ordering::Acquire);
    for chunk in &CHUNKS[..chunks] {
        // Acquire: pairs with the Release store that published the chunk.
        let chunk = chunk.load(Ordering::Acquire);
        for k in 0..CHUNK_SLOTS {
            // SAFETY: a published chunk holds CHUNK_SLOTS slots and is never
            // freed.
            let Some(raw) = (unsafe { &*chunk.add(k) }).read() else {
                continue;
            };
            let hit = match part {
                Part::Guard => (raw.guard_lo..raw.bottom).contains(&addr),
                Part::Stack => (raw.bottom..raw.top).contains(&addr),
            };
            if !hit {
                continue;
            }
            let name = (!raw.name_ptr.is_null()).then(|| {
                // SAFETY: the entry was consistent and holds `addr`, so it
                // is the live fiber the caller knows about, whose name stays
                // in place until it unregisters (see `register`), which it
                // cannot do while `f` runs. The bytes came from a `&str`.
                unsafe {
                    std::str::from_utf8_unchecked(std::slice::from_raw_parts(
                        raw.name_ptr,
                        raw.name_len,
                    ))
                }
            });
            return Some(f(&Found {
                stack_size: raw.top - raw.bottom,
                name,
            }));
        }
    }
    None
}

/// The overflow handler's first question: is `addr` in the guard page of
/// a fiber (the one running on this thread, since the fault is its own)? If
/// so, writes what overflowed. Async-signal-safe.
pub(crate) fn describe_fault(addr: usize, out: &mut dyn std::fmt::Write) -> bool {
    find(addr, Part::Guard, |fiber| {
        let _ = write!(
            out,
            "{} overflowed its {}-byte stack (fault at {addr:#x} in the guard page); aborting",
            fiber.label(),
            fiber.stack_size
        );
    })
    .is_some()
}

/// The panic hook's question: is the code at stack address `sp` (a local of
/// the panicking frame) running on a fiber's stack? If so, writes its label
/// (`fiber 'parser'`).
pub(crate) fn label_at(sp: usize, out: &mut dyn std::fmt::Write) -> bool {
    find(sp, Part::Stack, |fiber| {
        let _ = write!(out, "{}", fiber.label());
    })
    .is_some()
}

/// Whether `sp` lies on a registered fiber's stack (a task that switched
/// out from a fiber it resumed).
pub(crate) fn on_fiber_stack(sp: usize) -> bool {
    find(sp, Part::Stack, |_| ()).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_by_guard_and_stack_and_forgotten() {
        let name = String::from("probe");
        let e = Entry {
            guard: (0x1000_0000, 0x1000_1000),
            bottom: 0x1000_1000,
            top: 0x1001_1000,
            name: Some(&name),
        };
        // SAFETY: `name` outlives the registration (unregistered below).
        let r = unsafe { register(&e) }.expect("room");
        let mut s = String::new();
        assert!(describe_fault(0x1000_0800, &mut s));
        assert!(
            s.starts_with("fiber 'probe' overflowed its 65536-byte stack"),
            "{s}"
        );
        assert!(
            !describe_fault(0x1000_1000, &mut String::new()),
            "the stack is not the guard"
        );
        assert!(on_fiber_stack(0x1000_1000));
        assert!(!on_fiber_stack(0x1001_1000), "top is exclusive");
        let mut label = String::new();
        assert!(label_at(0x1000_8000, &mut label));
        assert_eq!(label, "fiber 'probe'");
        unregister(r);
        assert!(!on_fiber_stack(0x1000_2000));
        assert!(!label_at(0x1000_2000, &mut String::new()));
        assert!(!describe_fault(0x1000_0800, &mut String::new()));
    }
}
