//! Futex waits that park the task: what std's `Mutex`, `RwLock`,
//! `Condvar` and `Once` do when contended (a word of the thread's own, as
//! `thread::park`'s and `parking_lot`'s, blocks the thread: `owned.rs`)
//! (`syscall(SYS_futex, ...)`, see `syscall.rs`).
//!
//! # The waiter table
//!
//! A task's `FUTEX_WAIT` does not reach the kernel: the task is queued in
//! [`TABLE`], a fixed array of buckets hashed by the futex word's address,
//! and parks. Each bucket is a runtime lock (`sys/lock.rs`, which waits
//! in the kernel itself, never here) around an intrusive list of
//! [`Waiter`] nodes that live on the waiting tasks' stacks. The protocol is
//! the kernel's own:
//!
//! 1. The waiter counts itself in [`PARKED`] (SeqCst), locks the bucket,
//!    and compares the word with the expected value under the lock. If it
//!    differs, it uncounts itself and fails with `EAGAIN`; otherwise it
//!    links its node, unlocks, and parks until its node is marked woken.
//! 2. A waker has changed the word before it calls `FUTEX_WAKE`. It looks
//!    at [`PARKED`] after a SeqCst fence: 0 means no task waits anywhere,
//!    and the call goes straight to the kernel (the cost for plain threads
//!    when no task waits: one fence and one load). Otherwise it locks the
//!    bucket, unlinks up to the count of matching nodes (same address,
//!    bitsets that meet), takes each one's task handle, marks the node
//!    woken (Release), unlocks, unparks the tasks, and passes the rest of
//!    the count on to the kernel for plain threads waiting there.
//!
//! No wake-up is lost: either the waiter's count is seen by the waker (the
//! two SeqCst steps, Dekker style: the waiter writes the count then reads
//! the word, the waker writes the word then reads the count), and the
//! waker then takes the bucket lock, which orders it after the waiter's
//! compare-and-link; or the waker saw 0, and then the waiter's compare
//! sees the new word and fails with `EAGAIN`.
//!
//! # The node's state (`Waiter::woken`)
//!
//! `false -> true`, once, by a waker under the bucket lock as it unlinks
//! the node. A node is linked exactly while it is `false`. The waiter
//! leaves only once its node is unlinked: woken (it saw `true`), or
//! unlinked by itself under the lock (timeout, or its frame unwinding, see
//! [`Linked`]). A waker's last touch of a node is the Release store of
//! `true`; it took the task handle out before, so the waiter may free its
//! frame the moment it sees the store.
//!
//! # What the calls return
//!
//! Every call answers as the kernel answers it on a plain thread: same
//! result, same errno (`tests/hooks/hooks_futex.rs` compares them case by case).
//!
//! - `FUTEX_WAIT`, `FUTEX_WAIT_BITSET`: before a task is queued, the kernel
//!   itself checks the call without waiting (`kernel_checks_wait`): a word
//!   or timeout it cannot read (`EFAULT`, where reading them here would
//!   kill the process), a misaligned word, a zero bitset or a bad timeout
//!   (`EINVAL`), a flag the operation does not take (`ENOSYS`:
//!   `FUTEX_CLOCK_REALTIME` with `FUTEX_WAIT`), a word that differs
//!   (`EAGAIN`) fail as they do there. Then: 0 when woken (or spuriously),
//!   `ETIMEDOUT` when the timeout passed. `FUTEX_WAIT` takes a relative
//!   timeout; `FUTEX_WAIT_BITSET` an absolute one on `CLOCK_MONOTONIC`, or
//!   `CLOCK_REALTIME` with `FUTEX_CLOCK_REALTIME`, as the kernel does.
//! - `FUTEX_WAKE`, `FUTEX_WAKE_BITSET`, from any thread: the number of
//!   waiters woken, tasks from the table plus plain threads from the
//!   kernel, at most the count asked for, which the kernel reads as a
//!   signed `int` of at least 1 (a count of 0, or one past `i32::MAX`,
//!   wakes one waiter). A flag the kernel refuses on a wake fails first,
//!   waking nobody.
//! - `FUTEX_REQUEUE`, `FUTEX_CMP_REQUEUE`, `FUTEX_WAKE_OP`: the kernel does
//!   the operation for its own waiters, and every task waiting on either
//!   address is woken as well (a wake-up every futex user must take as
//!   spurious, and re-check). The result is the kernel's, plus the tasks
//!   woken.
//! - Every other operation (the PI ones, `FUTEX_FD`...) goes to the kernel
//!   unchanged and blocks the thread, in a task too.
//!
//! The table is keyed by address alone: a task's wait on a word shared
//! with another process (no `FUTEX_PRIVATE_FLAG`) is woken only by wakes
//! made in this process.

use std::cell::{Cell, UnsafeCell};
use std::ptr;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use libc::{c_int, c_long, timespec};

use super::guard::{guarded, may_wait, set_errno};
use super::owned;
use crate::runtime::context;
use crate::runtime::task::park;
use crate::runtime::task::wait::WaitOn;
use crate::runtime::task::TaskRef;
use crate::sys::lock::Mutex;
use crate::sys::real;

/// The number of buckets in [`TABLE`] (a power of two).
const BUCKETS: usize = 256;

/// Task handles a waker collects under a bucket's lock before it lets the
/// lock go and unparks them.
const BATCH: usize = 16;

/// The number of nodes linked in the whole table (module docs, step 1 and
/// 2): a waker that reads 0 after its fence goes straight to the kernel.
static PARKED: AtomicUsize = AtomicUsize::new(0);

/// The waiter table: buckets hashed by address.
static TABLE: [Bucket; BUCKETS] = [const { Bucket::new() }; BUCKETS];

/// One waiting task: a node of a bucket's list, on the task's stack.
struct Waiter {
    /// The futex word's address. Immutable.
    addr: usize,
    /// `FUTEX_WAIT_BITSET`'s bitset (all ones for `FUTEX_WAIT`).
    /// Immutable.
    bitset: u32,
    /// Set once by the waker that unlinks the node (module docs).
    woken: AtomicBool,
    /// The task to unpark; taken by the waker under the bucket lock.
    task: UnsafeCell<Option<TaskRef>>,
    prev: Cell<*const Waiter>,
    next: Cell<*const Waiter>,
}

/// A bucket's list; nodes are touched only under the bucket's lock.
struct List {
    head: *const Waiter,
    tail: *const Waiter,
}

// SAFETY: the pointers name nodes that stay valid while linked (a waiter
// leaves only after its node is unlinked, module docs) and are followed
// only under the bucket's lock; the task handles inside are Send.
unsafe impl Send for List {}

struct Bucket {
    list: Mutex<List>,
}

impl Bucket {
    const fn new() -> Bucket {
        Bucket {
            list: Mutex::new(List {
                head: ptr::null(),
                tail: ptr::null(),
            }),
        }
    }
}

fn bucket_of(addr: usize) -> &'static Bucket {
    // Fibonacci hashing of the word's index (futex words are 4-aligned).
    let h = ((addr >> 2) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    &TABLE[(h >> (64 - BUCKETS.trailing_zeros())) as usize]
}

impl List {
    /// Links `w` at the back.
    ///
    /// # Safety
    /// `w` is unlinked and stays valid until it is unlinked again.
    unsafe fn push(&mut self, w: &Waiter) {
        w.prev.set(self.tail);
        w.next.set(ptr::null());
        if self.tail.is_null() {
            self.head = w;
        } else {
            // SAFETY: a linked node, valid (List's invariant).
            unsafe { (*self.tail).next.set(w) };
        }
        self.tail = w;
    }

    /// Unlinks `w`.
    ///
    /// # Safety
    /// `w` is linked in this list.
    unsafe fn unlink(&mut self, w: &Waiter) {
        let (p, n) = (w.prev.get(), w.next.get());
        if p.is_null() {
            self.head = n;
        } else {
            // SAFETY: linked neighbours are valid.
            unsafe { (*p).next.set(n) };
        }
        if n.is_null() {
            self.tail = p;
        } else {
            // SAFETY: as above.
            unsafe { (*n).prev.set(p) };
        }
    }
}

/// A linked node: dropping it (the wait ended by timeout, or its frame
/// unwinds) unlinks the node unless a waker already did.
struct Linked<'a> {
    node: &'a Waiter,
    bucket: &'static Bucket,
}

impl Drop for Linked<'_> {
    fn drop(&mut self) {
        // Acquire: pairs with the waker's Release store.
        if self.node.woken.load(Ordering::Acquire) {
            return;
        }
        let mut list = self.bucket.list.lock();
        if !self.node.woken.load(Ordering::Acquire) {
            // SAFETY: not woken, so still linked in this bucket (only a
            // waker unlinks others' nodes, and it marks them woken).
            unsafe { list.unlink(self.node) };
            PARKED.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

fn fail(e: c_int) -> c_long {
    set_errno(e);
    -1
}

/// The futex operation's command, without the flags.
fn command(op: c_int) -> c_int {
    op & !(libc::FUTEX_PRIVATE_FLAG | libc::FUTEX_CLOCK_REALTIME)
}

/// `syscall(SYS_futex, uaddr, op, val, timeout, uaddr2, val3)`, hooked.
///
/// # Safety
/// The contract of `futex(2)` for `op`.
pub(super) unsafe fn futex(
    uaddr: *const u32,
    op: c_int,
    val: u32,
    timeout: *const timespec,
    uaddr2: *const u32,
    val3: u32,
) -> c_long {
    let kernel = || {
        // SAFETY: the caller's arguments, unchanged.
        unsafe {
            real::syscall(
                libc::SYS_futex,
                [
                    uaddr as c_long,
                    op as c_long,
                    val as c_long,
                    timeout as c_long,
                    uaddr2 as c_long,
                    val3 as c_long,
                ],
            )
        }
    };
    let aligned = !uaddr.is_null() && uaddr as usize % 4 == 0;
    if owned::probing(uaddr as usize) {
        return kernel();
    }
    match command(op) {
        libc::FUTEX_WAIT | libc::FUTEX_WAIT_BITSET
            if aligned && may_wait() && !guarded(|| owned::thread_owned(uaddr as usize)) =>
        {
            // SAFETY: the caller's arguments, for calls that cannot wait.
            if let Err(r) = unsafe { kernel_checks_wait(uaddr, op, val, timeout, uaddr2, val3) } {
                return r;
            }
            let bitset = if command(op) == libc::FUTEX_WAIT {
                u32::MAX
            } else {
                val3
            };
            if bitset == 0 {
                return fail(libc::EINVAL); // the kernel said so already
            }
            let deadline = if timeout.is_null() {
                None
            } else {
                // SAFETY: the kernel just read this timeout without fault
                // (`kernel_checks_wait`); the caller keeps it valid for the
                // call, as futex's contract asks.
                let ts = unsafe { &*timeout };
                match deadline_of(op, ts) {
                    Some(d) => d,
                    None => return fail(libc::EINVAL),
                }
            };
            // SAFETY: an aligned futex word the kernel just read without
            // fault (`kernel_checks_wait`), which the caller keeps valid
            // for the call.
            let word = unsafe { AtomicU32::from_ptr(uaddr.cast_mut()) };
            wait(word, val, bitset, deadline)
        }
        libc::FUTEX_WAKE | libc::FUTEX_WAKE_BITSET if aligned && !super::guard::forked() => {
            if op & libc::FUTEX_CLOCK_REALTIME != 0 {
                // A flag the kernel may refuse on a wake (it answers ENOSYS
                // today): it decides, before any task is woken.
                // SAFETY: a wake of a word of our own, nobody's waiting on.
                if let Err(r) = unsafe { kernel_checks_wake(op, val3) } {
                    return r;
                }
            }
            let bitset = if command(op) == libc::FUTEX_WAKE {
                u32::MAX
            } else {
                val3
            };
            if bitset == 0 {
                return fail(libc::EINVAL);
            }
            let want = wake_count(val);
            let woken = wake_tasks(uaddr as usize, bitset, want);
            if woken >= want {
                return woken as c_long;
            }
            // The rest of the count goes to the plain threads waiting in
            // the kernel.
            let rest = (want - woken) as c_long;
            // SAFETY: the caller's wake, with the count reduced.
            let r = unsafe {
                real::syscall(
                    libc::SYS_futex,
                    [
                        uaddr as c_long,
                        op as c_long,
                        rest,
                        timeout as c_long,
                        uaddr2 as c_long,
                        val3 as c_long,
                    ],
                )
            };
            if r < 0 {
                if woken > 0 {
                    return woken as c_long;
                }
                return r;
            }
            r + woken as c_long
        }
        libc::FUTEX_REQUEUE | libc::FUTEX_CMP_REQUEUE | libc::FUTEX_WAKE_OP
            if !super::guard::forked() =>
        {
            let r = kernel();
            let mut woken = 0;
            for a in [uaddr as usize, uaddr2 as usize] {
                if a != 0 && a % 4 == 0 {
                    woken += wake_tasks(a, u32::MAX, usize::MAX);
                }
            }
            if r < 0 {
                r
            } else {
                r + woken as c_long
            }
        }
        _ => kernel(),
    }
}

/// How many waiters a wake of `val` wakes at most: the kernel takes the
/// count as a signed `int` and wakes one waiter before it compares, so 0
/// and the counts past `i32::MAX` (negative there) wake one.
fn wake_count(val: u32) -> usize {
    match val as i32 {
        n if n <= 0 => 1,
        n => n as usize,
    }
}

/// Has the kernel check a wait a task is about to make in the table, with
/// every argument as given, without waiting: `Ok` when the kernel would
/// wait (the arguments are valid and the word holds `val`), otherwise
/// `Err` with what the kernel answers the same call (errno set): `EFAULT`
/// for a word or timeout it cannot read, `EINVAL` for a misaligned word, a
/// zero bitset or a bad timeout, `ENOSYS` for a flag the operation does not
/// take, `EAGAIN` when the word differs, 0 if a kernel wake came meanwhile.
///
/// Why the kernel, rather than reading the word here: a word or timeout
/// that is not mapped would kill the process with SIGSEGV when read, where
/// the kernel answers `EFAULT`. The futex call reads them exactly as the
/// real wait would, in its own order (the timeout first), and checks every
/// operation and flag as this kernel does, so no rule of the kernel's is
/// copied here to go stale. `process_vm_readv` on the process itself would
/// read the memory safely too, but it checks neither the operation nor the
/// flags, and container seccomp profiles often refuse it. A handler for
/// SIGSEGV would be process-wide state, not the hooks' to take.
///
/// Two calls, neither of which can wait:
/// 1. With a timeout, the same call on a word of this frame that does not
///    hold the value asked for: the kernel reads and checks the timeout,
///    the operation, its flags and the bitset, then finds the word
///    different (`EAGAIN`: all valid).
/// 2. The same call on the caller's word with a timeout that has passed
///    already (0: relative now, or an absolute time long gone on either
///    clock): the kernel checks the word's address, reads it and compares;
///    `ETIMEDOUT` means it held `val` and the kernel would have waited.
///
/// The word and the timeout stay mapped after the check as long as the
/// caller keeps futex's contract (a wait on memory another thread unmaps
/// meanwhile is a use after free in the caller).
///
/// # Safety
/// The arguments of a `FUTEX_WAIT` or `FUTEX_WAIT_BITSET` (any pointers:
/// the kernel checks them).
unsafe fn kernel_checks_wait(
    uaddr: *const u32,
    op: c_int,
    val: u32,
    timeout: *const timespec,
    uaddr2: *const u32,
    val3: u32,
) -> Result<(), c_long> {
    if !timeout.is_null() {
        let own = AtomicU32::new(val.wrapping_add(1));
        // SAFETY: a wait on a live word of this frame that differs from the
        // value asked for: the kernel fails it with EAGAIN once it has
        // checked the rest, and never waits.
        let r = unsafe {
            real::syscall(
                libc::SYS_futex,
                [
                    own.as_ptr() as c_long,
                    op as c_long,
                    val as c_long,
                    timeout as c_long,
                    uaddr2 as c_long,
                    val3 as c_long,
                ],
            )
        };
        if r != -1 || super::guard::errno() != libc::EAGAIN {
            return Err(r);
        }
    }
    let passed = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the caller's wait with a timeout that has passed: the kernel
    // returns at once (ETIMEDOUT if it queued the wait), or fails it.
    let r = unsafe {
        real::syscall(
            libc::SYS_futex,
            [
                uaddr as c_long,
                op as c_long,
                val as c_long,
                &passed as *const timespec as c_long,
                uaddr2 as c_long,
                val3 as c_long,
            ],
        )
    };
    if r == -1 && super::guard::errno() == libc::ETIMEDOUT {
        return Ok(());
    }
    Err(r)
}

/// Has the kernel check a wake's operation and flags, on a word of this
/// frame nobody waits on: `Err` with the kernel's answer (errno set) when
/// it refuses them (`ENOSYS` for `FUTEX_CLOCK_REALTIME`, which only waits
/// take).
///
/// # Safety
/// None beyond the call's: the word is a live local.
unsafe fn kernel_checks_wake(op: c_int, val3: u32) -> Result<(), c_long> {
    let own = AtomicU32::new(0);
    // SAFETY: a wake of a live word of this frame: it wakes nobody.
    let r = unsafe {
        real::syscall(
            libc::SYS_futex,
            [
                own.as_ptr() as c_long,
                op as c_long,
                1,
                0,
                0,
                val3 as c_long,
            ],
        )
    };
    if r < 0 {
        Err(r)
    } else {
        Ok(())
    }
}

/// The instant a wait's timeout ends, or `None` for a bad timeout.
/// `FUTEX_WAIT`'s timeout is relative; `FUTEX_WAIT_BITSET`'s is absolute
/// on `CLOCK_MONOTONIC`, or `CLOCK_REALTIME` with `FUTEX_CLOCK_REALTIME`.
fn deadline_of(op: c_int, ts: &timespec) -> Option<Option<Instant>> {
    if ts.tv_sec < 0 || !(0..1_000_000_000).contains(&ts.tv_nsec) {
        return None;
    }
    let d = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
    let now = Instant::now();
    let left = if command(op) == libc::FUTEX_WAIT {
        d
    } else {
        let clock = if op & libc::FUTEX_CLOCK_REALTIME != 0 {
            libc::CLOCK_REALTIME
        } else {
            libc::CLOCK_MONOTONIC
        };
        let mut t = timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid clock and out-pointer.
        unsafe { libc::clock_gettime(clock, &mut t) };
        d.saturating_sub(Duration::new(t.tv_sec.max(0) as u64, t.tv_nsec as u32))
    };
    // A timeout past what an Instant holds is no timeout at all.
    Some(now.checked_add(left))
}

/// The running task waits on `word` while it holds `val` (module docs,
/// step 1).
fn wait(word: &AtomicU32, val: u32, bitset: u32, deadline: Option<Instant>) -> c_long {
    let Some(task) = context::current_task() else {
        return fail(libc::EAGAIN); // unreachable: the caller is in a task
    };
    let addr = word.as_ptr() as usize;
    let bucket = bucket_of(addr);
    let node = Waiter {
        addr,
        bitset,
        woken: AtomicBool::new(false),
        task: UnsafeCell::new(Some(task.clone())),
        prev: Cell::new(ptr::null()),
        next: Cell::new(ptr::null()),
    };
    // SeqCst: with the word's SeqCst load below, against the waker's word
    // store and fenced load of PARKED (module docs).
    PARKED.fetch_add(1, Ordering::SeqCst);
    {
        let mut list = bucket.list.lock();
        if word.load(Ordering::SeqCst) != val {
            drop(list);
            PARKED.fetch_sub(1, Ordering::Relaxed);
            return fail(libc::EAGAIN);
        }
        // SAFETY: `node` is new, and it is unlinked before this frame
        // ends: by a waker (woken) or by `Linked`'s drop.
        unsafe { list.push(&node) };
    }
    let linked = Linked {
        node: &node,
        bucket,
    };
    loop {
        // Acquire: pairs with the waker's Release store.
        if node.woken.load(Ordering::Acquire) {
            return 0;
        }
        match deadline {
            None => park::park_on(WaitOn::Futex),
            Some(d) if Instant::now() < d => park::park_deadline_on(d, WaitOn::Futex),
            Some(_) => break,
        }
    }
    // The deadline passed: unlink, unless a waker was first.
    drop(linked);
    if node.woken.load(Ordering::Acquire) {
        0
    } else {
        fail(libc::ETIMEDOUT)
    }
}

/// Wakes up to `want` tasks waiting on `addr` with a bitset that meets
/// `bitset` (module docs, step 2). Returns how many it woke.
fn wake_tasks(addr: usize, bitset: u32, want: usize) -> usize {
    // SeqCst: the caller changed the word before; against the waiter's
    // count-then-compare (module docs).
    fence(Ordering::SeqCst);
    if PARKED.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let bucket = bucket_of(addr);
    let mut woken = 0;
    loop {
        let mut batch: [Option<TaskRef>; BATCH] = Default::default();
        let mut n = 0;
        let mut more = false;
        {
            let mut list = bucket.list.lock();
            let mut p = list.head;
            while !p.is_null() {
                if woken + n == want || n == BATCH {
                    more = woken + n < want;
                    break;
                }
                // SAFETY: a linked node, valid while linked (List).
                let w = unsafe { &*p };
                p = w.next.get();
                if w.addr != addr || w.bitset & bitset == 0 {
                    continue;
                }
                // SAFETY: linked, under the bucket lock.
                unsafe { list.unlink(w) };
                PARKED.fetch_sub(1, Ordering::Relaxed);
                // SAFETY: the task handle is touched only under the lock.
                batch[n] = unsafe { (*w.task.get()).take() };
                n += 1;
                // Release: pairs with the waiter's Acquire; the last touch
                // of the node.
                w.woken.store(true, Ordering::Release);
            }
        }
        // Unparking schedules the tasks (runtime code): hooked calls made
        // there go straight to libc.
        guarded(|| {
            for t in batch.iter().flatten() {
                park::unpark_header(t);
            }
        });
        woken += n;
        if !more {
            return woken;
        }
    }
}
