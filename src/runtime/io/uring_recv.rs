//! Multishot receive into a provided-buffer ring: one `RECV` entry per
//! connection, armed once and kept armed, instead of one entry per read.
//! Off unless `GOFER_URING_RECV=multishot` (`uring.rs`); without it, a
//! ring has no pool, no record is ever made, and reads are single-shot.
//!
//! # The parts
//!
//! - A [`Pool`] per ring: `BUF_COUNT` buffers of `BUF_SIZE` bytes and the
//!   ring of their descriptors registered with the kernel
//!   (`IORING_REGISTER_PBUF_RING`, group `BUF_GROUP`). The kernel takes a
//!   buffer from it for each chunk of data a multishot receive gets; a
//!   read gives it back once it has copied the data out. Only the ring's
//!   Processer thread writes the descriptor ring (its tail); other threads
//!   hand buffers back through the pool's `remote` queue, which the
//!   Processer empties at its next turn.
//! - A [`Recv`] record per socket (shared by the socket's clones, through
//!   its [`RecvSlot`]), on the heap: the buffers received and not yet read,
//!   the end of stream or error that followed them, whether an entry is
//!   armed, and the waiting readers. Its address, tagged with `REC_TAG`,
//!   is the armed entry's `user_data`, and the entry owns one reference
//!   count of it (`Arc::into_raw` when armed, given back at the completion
//!   without `IORING_CQE_F_MORE`): the record is never freed while the
//!   kernel may still post a completion naming it. The buffers belong to
//!   the pool, so no task's stack is exposed to the kernel for a read.
//!
//! # A record's states
//!
//! ```text
//!  state      armed  moved on by
//!  IDLE       no     made at a ring read of a task bound to the ring's
//!                    Processer; an IDLE record is read through the other
//!                    paths (below)
//!  ARMED      yes    a read of a task of the owning Processer: pushes
//!                    RECV | RECV_MULTISHOT | BUFFER_SELECT, user_data =
//!                    the record (one count moved to the kernel)
//!  ARMED      yes    each completion with F_MORE: its buffer (or the end
//!                    of stream, or an error) is queued, the waiters woken
//!  CANCELLING yes    the last clone of the socket dropped (or into_std):
//!                    IORING_OP_ASYNC_CANCEL queued on the owner's ring
//!                    (from another thread: through `remote`, and the
//!                    owner is woken to queue it)
//!  IDLE       no     the completion without F_MORE (ENOBUFS: the pool ran
//!                    dry; end of stream; an error; ECANCELED): the
//!                    kernel's count is dropped, the waiters woken
//! ```
//!
//! A read takes, in this order: the queued buffers (copying from the
//! oldest, across buffers, and giving the emptied ones back); then the
//! queued end (end of stream stays; an error is returned once); then, if
//! the record is ARMED, it waits on the record (its deadline and its
//! cancellation end the wait at once: the kernel holds nothing of the
//! task's); if IDLE:
//! - a task of the owning Processer arms it when the pool has at least
//!   `ARM_MIN_FREE` buffers and waits, or else makes a single-shot ring
//!   read into its own buffer (`uring.rs`), so a connection whose data
//!   cannot get a buffer is not stuck behind connections whose readers do
//!   not read;
//! - any other reader (a task of another Processer or scheduler, a plain
//!   thread, a non-blocking read) reads the socket through the readiness
//!   path: nothing is queued, so nothing is overtaken.
//!
//! The record's fields are behind a lock, taken by its readers and by the
//! owner's turn as it reaps (uncontended when one task reads the socket);
//! the owner's pool counters and descriptor ring are touched only on the
//! owner's thread (in its tasks or its loop, never at once).
//!
//! # Known limits
//!
//! A socket turned back into a std socket (`into_std`) while armed loses
//! what the ring received and no read took (the entry is cancelled). A
//! descriptor duplicated outside gofer's `try_clone` does not share the
//! record, so a read through it may miss data the ring took.

use std::alloc::{self, Layout};
use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use io_uring::{cqueue, opcode, types};

use super::uring::{Ring, CANCEL_DATA};
use crate::runtime::context;
use crate::runtime::processer::shared::ProcesserShared;
use crate::runtime::shared::Shared;
use crate::runtime::task::cancel;
use crate::runtime::task::wait::WaitOn;
use crate::runtime::task::{self, Runnable, TaskRef};
use crate::runtime::time::timer::park_until;
use crate::sys::lock::Mutex;

/// Bytes per provided buffer.
pub(crate) const BUF_SIZE: usize = 4096;
/// Buffers per pool (a power of two, as the kernel requires).
pub(crate) const BUF_COUNT: u16 = 1024;
/// The buffer group of every pool (one pool per ring).
pub(crate) const BUF_GROUP: u16 = 0;
/// Set in the `user_data` of a multishot entry: it names a [`Recv`], not
/// an `OpSlot` (both are at least 8-aligned).
pub(crate) const REC_TAG: u64 = 1;
/// An IDLE record is armed only with at least this many buffers in the
/// pool; with fewer, its reader makes a single-shot read instead.
const ARM_MIN_FREE: u32 = BUF_COUNT as u32 / 8;

/// A ring's provided buffers (module docs).
pub(crate) struct Pool {
    /// The descriptor ring registered with the kernel (page-aligned).
    entries: NonNull<types::BufRingEntry>,
    /// `BUF_COUNT` buffers of `BUF_SIZE` bytes, one block.
    mem: NonNull<u8>,
    /// Owner thread only: the next tail to publish.
    tail: Cell<u16>,
    /// Owner thread only: buffers the kernel may take (given to it and not
    /// yet seen in a completion).
    in_ring: Cell<u32>,
    /// Buffers given back, and records to cancel, by other threads.
    remote: Mutex<Remote>,
    remote_pending: AtomicBool,
    /// The owner, woken when a remote cancel is queued.
    p: Arc<ProcesserShared>,
    sched: Weak<Shared>,
}

#[derive(Default)]
struct Remote {
    returns: Vec<u16>,
    cancels: Vec<Arc<Recv>>,
}

// SAFETY: the pointers are owned blocks (freed in Drop); the `Cell`s are
// touched only on the owner's thread (module docs), which the callers of
// the owner-only methods check (`on_owner`); the rest is Send and Sync.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

fn entries_layout() -> Layout {
    Layout::from_size_align(
        usize::from(BUF_COUNT) * std::mem::size_of::<types::BufRingEntry>(),
        4096,
    )
    .expect("a valid layout")
}

fn mem_layout() -> Layout {
    Layout::from_size_align(usize::from(BUF_COUNT) * BUF_SIZE, 4096).expect("a valid layout")
}

impl Pool {
    /// A pool with every buffer given to the (not yet registered) ring.
    pub(crate) fn new(p: Arc<ProcesserShared>, sched: Weak<Shared>) -> io::Result<Arc<Pool>> {
        // SAFETY: non-zero sizes; the results are checked for null.
        let (entries, mem) = unsafe {
            (
                alloc::alloc_zeroed(entries_layout()),
                alloc::alloc_zeroed(mem_layout()),
            )
        };
        let (Some(entries), Some(mem)) = (
            NonNull::new(entries.cast::<types::BufRingEntry>()),
            NonNull::new(mem),
        ) else {
            return Err(io::ErrorKind::OutOfMemory.into());
        };
        let pool = Pool {
            entries,
            mem,
            tail: Cell::new(0),
            in_ring: Cell::new(0),
            remote: Mutex::new(Remote::default()),
            remote_pending: AtomicBool::new(false),
            p,
            sched,
        };
        pool.provide(0..BUF_COUNT);
        Ok(Arc::new(pool))
    }

    /// The descriptor ring's address, to register.
    pub(crate) fn ring_addr(&self) -> u64 {
        self.entries.as_ptr() as u64
    }

    /// Gives buffers to the kernel. Owner thread only.
    fn provide(&self, bids: impl IntoIterator<Item = u16>) {
        let mut tail = self.tail.get();
        for bid in bids {
            let i = usize::from(tail & (BUF_COUNT - 1));
            // SAFETY: `i` < BUF_COUNT, inside the block; the kernel reads
            // only entries between its head and the published tail, and
            // this one is past the tail until the store below. The setters
            // write single fields, leaving entry 0's tail field alone.
            let e = unsafe { &mut *self.entries.as_ptr().add(i) };
            e.set_addr(self.mem.as_ptr() as u64 + u64::from(bid) * BUF_SIZE as u64);
            e.set_len(BUF_SIZE as u32);
            e.set_bid(bid);
            tail = tail.wrapping_add(1);
            self.in_ring.set(self.in_ring.get() + 1);
        }
        self.tail.set(tail);
        // SAFETY: the tail field of entry 0 (the kernel's layout), aligned
        // for a u16, read by the kernel with acquire: the release store
        // publishes the entries written above.
        let t = unsafe { &*types::BufRingEntry::tail(self.entries.as_ptr()).cast::<AtomicU16>() };
        t.store(tail, Ordering::Release);
    }

    /// The bytes of buffer `bid` from `off`, `len` of them.
    ///
    /// # Safety
    /// The kernel has posted the completion that filled `bid` with at least
    /// `off + len` bytes, and the buffer has not been given back since.
    unsafe fn bytes(&self, bid: u16, off: u32, len: u32) -> &[u8] {
        // SAFETY: inside the block (bid < BUF_COUNT, off + len <= BUF_SIZE),
        // and not written by anyone while the record holds it (contract).
        unsafe {
            std::slice::from_raw_parts(
                self.mem
                    .as_ptr()
                    .add(usize::from(bid) * BUF_SIZE + off as usize),
                len as usize,
            )
        }
    }

    /// Whether the running thread is this pool's owner (its Processer's).
    fn on_owner(&self) -> Option<&Ring> {
        let p = context::current_proc_ptr();
        if p.is_null() {
            return None;
        }
        // SAFETY: the ProcLocal of this thread's Processer loop, alive
        // while code runs on the thread.
        let ring = unsafe { &*p }.ring_here()?;
        ring.pool()
            .is_some_and(|mine| std::ptr::eq(&**mine, self))
            .then_some(ring)
    }

    /// Gives buffers back, from any thread.
    fn give_back(&self, bids: &[u16]) {
        if bids.is_empty() {
            return;
        }
        if self.on_owner().is_some() {
            self.provide(bids.iter().copied());
        } else {
            self.remote.lock().returns.extend_from_slice(bids);
            self.remote_pending.store(true, Ordering::SeqCst);
        }
    }

    /// Whether other threads left work for the owner's turn.
    pub(crate) fn remote_pending(&self) -> bool {
        self.remote_pending.load(Ordering::Relaxed)
    }

    /// The owner's part of a turn: takes back the buffers other threads
    /// gave back, and queues the cancels they asked for. Owner thread only.
    pub(crate) fn take_remote(&self, ring: &Ring) {
        if !self.remote_pending.swap(false, Ordering::Acquire) {
            return;
        }
        let (returns, cancels) = {
            let mut r = self.remote.lock();
            (
                std::mem::take(&mut r.returns),
                std::mem::take(&mut r.cancels),
            )
        };
        self.provide(returns);
        for rec in cancels {
            let st = rec.st.lock();
            // `cancelling` was set by whoever queued the request.
            if st.armed {
                // A refused cancel leaves the entry armed until the ring's
                // end, which cancels everything: the record stays alive.
                let _ = rec.push_cancel(ring);
            }
        }
    }

    /// Number of buffers the kernel may take now. Owner thread only.
    fn free(&self) -> u32 {
        self.in_ring.get()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with these layouts; the last reference
        // is gone, so neither records nor a live registration (the ring
        // keeps a reference until it is closed, or leaks one) use them.
        unsafe {
            alloc::dealloc(self.entries.as_ptr().cast(), entries_layout());
            alloc::dealloc(self.mem.as_ptr(), mem_layout());
        }
    }
}

/// Who waits on a record.
enum Waiter {
    Task(TaskRef),
    Thread(std::thread::Thread),
}

/// One socket's multishot receive (module docs).
pub(crate) struct Recv {
    pool: Arc<Pool>,
    fd: RawFd,
    st: Mutex<RecvState>,
}

struct RecvState {
    /// An entry is in the kernel (which holds one count of the record).
    armed: bool,
    /// Its cancel is queued.
    cancelling: bool,
    /// The socket is gone: what arrives goes back to the pool at once.
    closed: bool,
    /// Buffers received and not yet read: id and length.
    bufs: VecDeque<(u16, u32)>,
    /// Bytes of the front buffer already read.
    off: u32,
    /// What follows the buffers: 0 for end of stream, or `-errno`.
    end: Option<i32>,
    waiters: Vec<Waiter>,
}

impl Recv {
    /// Queues the cancel of the armed entry on `ring` (the owner's).
    fn push_cancel(&self, ring: &Ring) -> io::Result<()> {
        let e = opcode::AsyncCancel::new(self as *const Recv as u64 | REC_TAG)
            .build()
            .user_data(CANCEL_DATA);
        // SAFETY: a cancel entry points at nothing of ours.
        unsafe { ring.push(&e) }
    }

    /// Arms the entry on `ring` (the owner's), `st` being this record's
    /// locked state: one count of `self` moves to the kernel.
    fn arm(self: &Arc<Recv>, ring: &Ring, st: &mut RecvState) -> io::Result<()> {
        let ptr = Arc::into_raw(Arc::clone(self));
        let e = opcode::RecvMulti::new(types::Fd(self.fd), BUF_GROUP)
            .build()
            .user_data(ptr as u64 | REC_TAG);
        // SAFETY: the entry points at the pool's buffers (alive while the
        // ring holds the pool) and names the record, whose count it owns
        // until its last completion (module docs).
        match unsafe { ring.push(&e) } {
            Ok(()) => {
                st.armed = true;
                Ok(())
            }
            Err(e) => {
                // SAFETY: the count taken above, never handed to the kernel.
                drop(unsafe { Arc::from_raw(ptr) });
                Err(e)
            }
        }
    }
}

impl Drop for Recv {
    fn drop(&mut self) {
        let st = self.st.get_mut();
        let bids: Vec<u16> = st.bufs.drain(..).map(|(b, _)| b).collect();
        self.pool.give_back(&bids);
    }
}

/// A completion of a multishot entry (`user_data` without its tag): queues
/// what it brought, wakes the waiters onto `woken` (unless `woken` is
/// `None`: the ring's end, whose tasks never run again), and at the last
/// completion (no `F_MORE`) drops the kernel's count. Returns whether it
/// was the last. Owner thread only.
///
/// # Safety
/// `data` is the address of a record with an armed entry on this ring,
/// whose count the kernel holds (module docs).
pub(crate) unsafe fn complete(
    data: u64,
    res: i32,
    flags: u32,
    woken: Option<&mut Vec<Runnable>>,
) -> bool {
    let ptr = data as *const Recv;
    // SAFETY: the kernel's count keeps the record alive (contract).
    let rec = unsafe { &*ptr };
    let more = cqueue::more(flags);
    let mut st = rec.st.lock();
    if res > 0 {
        if let Some(bid) = cqueue::buffer_select(flags) {
            rec.pool.in_ring.set(rec.pool.in_ring.get() - 1);
            if st.closed {
                rec.pool.provide([bid]);
            } else {
                st.bufs.push_back((bid, res as u32));
            }
        }
    } else if res == 0 {
        st.end = Some(0);
    } else if res != -libc::ENOBUFS && res != -libc::ECANCELED {
        st.end = Some(res);
    }
    if !more {
        st.armed = false;
        st.cancelling = false;
    }
    let waiters = std::mem::take(&mut st.waiters);
    drop(st);
    if let Some(woken) = woken {
        for w in waiters {
            match w {
                Waiter::Task(t) => woken.extend(task::unpark(&t)),
                Waiter::Thread(t) => t.unpark(),
            }
        }
    } else {
        // The tasks of a ring's end never run again: their references are
        // kept, not dropped, so nothing of them is freed.
        std::mem::forget(waiters);
    }
    if !more {
        // SAFETY: the kernel's count (module docs), given back once, at
        // the completion without F_MORE.
        drop(unsafe { Arc::from_raw(ptr) });
    }
    !more
}

/// The record of a socket, shared by its clones; cancels an armed entry
/// when the last of them goes.
#[derive(Default)]
pub(crate) struct RecvSlot {
    rec: OnceLock<Arc<Recv>>,
}

impl Drop for RecvSlot {
    fn drop(&mut self) {
        let Some(rec) = self.rec.take() else {
            return;
        };
        let mut st = rec.st.lock();
        st.closed = true;
        let bids: Vec<u16> = st.bufs.drain(..).map(|(b, _)| b).collect();
        let cancel = st.armed && !st.cancelling;
        st.cancelling |= cancel;
        if cancel {
            if let Some(ring) = rec.pool.on_owner() {
                if rec.push_cancel(ring).is_err() {
                    st.cancelling = false;
                }
            } else {
                rec.pool.remote.lock().cancels.push(Arc::clone(&rec));
                rec.pool.remote_pending.store(true, Ordering::SeqCst);
                if let Some(s) = rec.pool.sched.upgrade() {
                    s.wake_proc(&rec.pool.p);
                }
            }
        }
        drop(st);
        rec.pool.give_back(&bids);
    }
}

/// What a read should do after [`recv`].
pub(crate) enum RecvPath {
    /// Done through the record.
    Done(io::Result<usize>),
    /// A single-shot ring read (module docs).
    SingleShot,
    /// The readiness path.
    Readiness,
}

/// A read (or, with `peek`, a look without taking) of `fd`, whose record
/// is in `slot` (made here when the running task may arm one), waiting at
/// most `timeout` (expired: `TimedOut`) unless `nonblocking`.
pub(crate) fn recv(
    slot: &OnceLock<Arc<RecvSlot>>,
    fd: RawFd,
    buf: &mut [u8],
    peek: bool,
    nonblocking: bool,
    timeout: Option<std::time::Duration>,
) -> RecvPath {
    let existing = slot.get().and_then(|s| s.rec.get());
    if existing.is_none() && !super::uring::driver_built() {
        return RecvPath::Readiness;
    }
    let h = context::current_task_ptr();
    if existing.is_none() {
        // SAFETY: the running task's header is alive while it runs.
        let uring =
            h.is_some_and(|h| unsafe { &*h }.shared.config.io_driver == crate::IoDriver::Uring);
        if !uring {
            return RecvPath::Readiness;
        }
    }
    let task = h.map(|h| {
        // SAFETY: the running task's header, alive while it runs; the
        // pointer came from the Runnable its Processer holds.
        unsafe { TaskRef::clone_from_ptr(h) }
    });
    let ring = task.as_ref().and_then(|t| {
        let p = context::current_proc_ptr();
        // SAFETY: a task runs, so this thread runs a Processer loop whose
        // ProcLocal outlives the task.
        unsafe { &*p }.ring_for(t)
    });
    let rec = match existing {
        Some(r) => r,
        None => {
            let Some(pool) = ring.and_then(Ring::pool) else {
                return if ring.is_some() && !nonblocking && !peek {
                    RecvPath::SingleShot
                } else {
                    RecvPath::Readiness
                };
            };
            if nonblocking || peek {
                return RecvPath::Readiness;
            }
            let s = slot.get_or_init(Arc::default);
            s.rec.get_or_init(|| {
                Arc::new(Recv {
                    pool: Arc::clone(pool),
                    fd,
                    st: Mutex::new(RecvState {
                        armed: false,
                        cancelling: false,
                        closed: false,
                        bufs: VecDeque::new(),
                        off: 0,
                        end: None,
                        waiters: Vec::new(),
                    }),
                })
            })
        }
    };
    let owner = ring.filter(|r| r.pool().is_some_and(|p| Arc::ptr_eq(p, &rec.pool)));
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    let mut listed = false;
    loop {
        let mut st = rec.st.lock();
        if !st.bufs.is_empty() {
            let n = copy_out(&rec.pool, &mut st, buf, peek, owner.is_some());
            drop(st);
            if listed {
                unlist(rec, task.as_ref());
            }
            return RecvPath::Done(Ok(n));
        }
        if let Some(e) = st.end {
            if e != 0 && !peek {
                st.end = None;
            }
            drop(st);
            if listed {
                unlist(rec, task.as_ref());
            }
            return RecvPath::Done(if e == 0 {
                Ok(0)
            } else {
                Err(io::Error::from_raw_os_error(-e))
            });
        }
        if !st.armed {
            let armed = match owner {
                Some(r) if !nonblocking && !peek && rec.pool.free() >= ARM_MIN_FREE => {
                    rec.arm(r, &mut st).is_ok()
                }
                _ => false,
            };
            if !armed {
                drop(st);
                if listed {
                    unlist(rec, task.as_ref());
                }
                return if owner.is_some() && !nonblocking && !peek {
                    RecvPath::SingleShot
                } else {
                    RecvPath::Readiness
                };
            }
        }
        // ARMED and nothing queued: wait on the record.
        if nonblocking {
            return RecvPath::Done(Err(io::ErrorKind::WouldBlock.into()));
        }
        let cancelled = task.as_ref().is_some_and(|t| cancel::interrupted_in(t));
        if cancelled || deadline.is_some_and(|d| Instant::now() >= d) {
            drop(st);
            if listed {
                unlist(rec, task.as_ref());
            }
            if cancelled {
                // Nothing of this task's is in the kernel: leave at once.
                cancel::unwind();
            }
            return RecvPath::Done(Err(io::ErrorKind::TimedOut.into()));
        }
        // Listed at most once (a wake-up takes the whole list, so a woken
        // waiter lists itself again; a spurious one is still listed).
        let me = match &task {
            Some(t) => Waiter::Task(t.clone()),
            None => Waiter::Thread(std::thread::current()),
        };
        if !st.waiters.iter().any(|w| same(w, &me)) {
            st.waiters.push(me);
        }
        listed = true;
        drop(st);
        match &task {
            Some(t) => park_until(t, cancel::recheck_in(t, deadline), WaitOn::Readable(fd)),
            None => match deadline {
                Some(d) => std::thread::park_timeout(d.saturating_duration_since(Instant::now())),
                None => std::thread::park(),
            },
        }
    }
}

fn same(a: &Waiter, b: &Waiter) -> bool {
    match (a, b) {
        (Waiter::Task(x), Waiter::Task(y)) => x.as_ptr() == y.as_ptr(),
        (Waiter::Thread(x), Waiter::Thread(y)) => x.id() == y.id(),
        _ => false,
    }
}

/// Takes the running task (or thread) off the record's waiters.
fn unlist(rec: &Recv, task: Option<&TaskRef>) {
    let me = match task {
        Some(t) => Waiter::Task(t.clone()),
        None => Waiter::Thread(std::thread::current()),
    };
    rec.st.lock().waiters.retain(|w| !same(w, &me));
}

/// Copies queued bytes into `buf`, oldest first and across buffers, and
/// returns the count; unless `peek`, the buffers emptied are taken off the
/// queue and given back (`owner`: the running thread is the pool's).
fn copy_out(pool: &Pool, st: &mut RecvState, buf: &mut [u8], peek: bool, owner: bool) -> usize {
    let mut n = 0;
    let mut off = st.off;
    let mut i = 0;
    while n < buf.len() {
        let Some(&(bid, len)) = st.bufs.get(i) else {
            break;
        };
        let k = (len - off).min((buf.len() - n) as u32);
        // SAFETY: the completion that queued `bid` said `len` bytes, and
        // the buffer stays queued (not given back) while we copy.
        buf[n..n + k as usize].copy_from_slice(unsafe { pool.bytes(bid, off, k) });
        n += k as usize;
        off += k;
        if off == len {
            i += 1;
            off = 0;
        }
    }
    if !peek {
        for (bid, _) in st.bufs.drain(..i) {
            if owner {
                pool.provide([bid]);
            } else {
                pool.give_back(&[bid]);
            }
        }
        st.off = off;
    }
    n
}
