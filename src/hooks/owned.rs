//! Futex words that belong to the thread, not to a lock: the waits on them
//! must block the thread, never park the task.
//!
//! Some waiting records are per thread: std's thread parker (the word
//! behind `std::thread::park`, hence std's `mpsc` and crossbeam's channels)
//! and `parking_lot`'s per-thread record (kept in a `thread_local!`, linked
//! into a lock's queue before its futex wait). Every task of a Processer
//! shares its thread's record. If a task parked in such a wait, the next
//! task of the thread to wait the same way would reuse the record while
//! it is still in use: std's parker state goes out of range (a lost
//! wake-up, or a wait that retries for ever), and `parking_lot` links one
//! record into two queues. So a wait on such a word goes to the kernel
//! and blocks the thread, as without the hooks; the task can use
//! `gofer::unblock` or gofer's own locks and channels instead.
//!
//! A word is the thread's when it lies in the thread's static TLS block
//! (every `thread_local!` of the executable: `parking_lot`'s record among
//! them), or is the thread's std parker word, learned once per thread by
//! [`probe`]. The check errs one way only: a lock that happens to live in
//! a thread-local also blocks the thread, as it would without the hooks.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

thread_local! {
    /// This thread's std parker word: 0 until probed, 1 if the probe saw
    /// no futex wait.
    static PARKER: Cell<usize> = const { Cell::new(0) };
    /// Set while [`probe`] runs: the futex hook records the address of the
    /// wait it sees in [`SEEN`].
    static PROBING: Cell<bool> = const { Cell::new(false) };
    static SEEN: Cell<usize> = const { Cell::new(0) };
}

/// Whether `addr` is a waiting record of the calling thread's own.
// Never inlined: these read thread-locals, and the futex hook that calls
// them can switch the task out.
#[inline(never)]
pub(super) fn thread_owned(addr: usize) -> bool {
    in_static_tls(addr) || addr == parker_word()
}

/// Called by the futex hook first thing: while a probe runs, records the
/// address of the wait and returns true (the wait then goes to the kernel).
#[inline(never)]
pub(super) fn probing(addr: usize) -> bool {
    if PROBING.with(Cell::get) {
        SEEN.with(|s| s.set(addr));
        return true;
    }
    false
}

fn parker_word() -> usize {
    let w = PARKER.with(Cell::get);
    if w != 0 {
        return w;
    }
    let w = probe();
    PARKER.with(|p| p.set(w));
    w
}

/// Learns this thread's std parker word: a park with a timeout of one
/// nanosecond makes one futex wait on it, which the hook records. A token
/// already there (the thread was unparked) makes the first park return at
/// once without waiting: then it is given back after a second park.
fn probe() -> usize {
    PROBING.with(|p| p.set(true));
    SEEN.with(|s| s.set(0));
    let mut took_token = false;
    for _ in 0..2 {
        std::thread::park_timeout(Duration::from_nanos(1));
        if SEEN.with(Cell::get) != 0 {
            break;
        }
        took_token = true;
    }
    PROBING.with(|p| p.set(false));
    if took_token {
        std::thread::current().unpark();
    }
    match SEEN.with(Cell::get) {
        0 => 1,
        w => w,
    }
}

/// The size of the static TLS blocks of the modules loaded at start-up,
/// each rounded up to its alignment. Computed once; threads that race to
/// compute it store the same value. (No `OnceLock`: its wait is a futex
/// wait, which this file must not make.)
fn static_tls_size() -> usize {
    static SIZE: AtomicUsize = AtomicUsize::new(usize::MAX);
    let known = SIZE.load(Ordering::Relaxed);
    if known != usize::MAX {
        return known;
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid info for the call, and `data`
        // is the `usize` below.
        unsafe {
            let info = &*info;
            let total = &mut *(data as *mut usize);
            for i in 0..info.dlpi_phnum as usize {
                let ph = &*info.dlpi_phdr.add(i);
                if ph.p_type == libc::PT_TLS {
                    let align = (ph.p_align as usize).max(1);
                    *total += (ph.p_memsz as usize).div_ceil(align) * align;
                }
            }
        }
        0
    }
    let mut total = 0usize;
    // SAFETY: `each` only reads the headers it is given and writes the
    // `usize` it is handed.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut total as *mut usize).cast()) };
    SIZE.store(total, Ordering::Relaxed);
    total
}

/// The thread pointer.
fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: reads the thread pointer register; no memory is touched.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        std::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nomem, nostack, preserves_flags))
    };
    tp
}

/// Slack around the static TLS blocks for the alignment padding between
/// them: a lock within it blocks the thread, which is only the behaviour
/// without the hooks.
const TLS_SLACK: usize = 4096;

/// Whether `addr` lies in the calling thread's static TLS blocks: below
/// the thread pointer on x86_64 (TLS variant II), above it on aarch64
/// (variant I).
fn in_static_tls(addr: usize) -> bool {
    let tp = thread_pointer();
    let size = static_tls_size() + TLS_SLACK;
    if cfg!(target_arch = "x86_64") {
        addr < tp && addr >= tp.saturating_sub(size)
    } else {
        addr >= tp && addr < tp.saturating_add(size)
    }
}
