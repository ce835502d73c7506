//! The io_uring driver ([`IoDriver::Uring`](crate::IoDriver::Uring)): one
//! ring per core Processer, through which the socket operations of the
//! tasks bound to it complete.
//!
//! # Who uses a ring
//!
//! A task whose pin is the core Processer it runs on (every started task
//! is bound to its Processer unless it opted in to migration: see
//! ARCHITECTURE.md, "A started task stays on its thread"), on a scheduler
//! built with the uring driver, for these operations (one single-shot
//! entry each, all with the state machine below):
//!
//! - a stream read (`RECV`, or the multishot receive of `uring_recv.rs`)
//!   or write (`SEND`) of a gofer TCP or Unix stream, and its vectored
//!   read and write (`RECVMSG`, `SENDMSG`; a vectored read on a socket
//!   with a multishot receive takes from it into its first buffer);
//! - `accept` of a gofer TCP or Unix listener (`ACCEPT`, the new
//!   descriptor made close-on-exec and non-blocking by the kernel; a Unix
//!   peer's address is then read with `getpeername`);
//! - `connect` of a gofer TCP stream (`CONNECT`, the address borrowed by
//!   the entry for the wait);
//! - the datagrams of a gofer UDP socket: `recv_from`, `peek_from`,
//!   `recv`, `peek` (`RECVMSG`) and `send_to`, `send` (`SENDMSG`), the
//!   `msghdr`, its `iovec` and the address in the waiting frame;
//! - `gofer::io::wait_readable` and `wait_writable` (`POLL_ADD`).
//!
//! Everything else keeps the readiness path of `source.rs` and the epoll
//! reactor: Unix datagrams, a Unix stream's connect (it completes at
//! once), sockets and listeners in non-blocking mode (`WouldBlock` stays
//! theirs), plain threads, tasks on a `block_on` caller or an extra
//! Processer (they may leave for good and nobody would reap their ring),
//! migratable tasks (their ring would be another thread's), and the
//! `hooks` feature's calls.
//!
//! The ring is made at the first such operation on its Processer, and its
//! descriptor registered with its Processer's own epoll reactor (a ring is
//! readable when completions wait in it; with DEFER_TASKRUN an eventfd the
//! kernel signals stands in its place: [`build_ring`]): a Processer asleep on its futex,
//! or waiting in the reactor, is woken when a completion of one of its
//! tasks arrives (`reactor.rs`, "Rings"). A Processer announcing its sleep
//! looks at its ring after the announcement (`ProcLocal::sleep`), so a
//! completion posted before the event could wake it is not slept through.
//!
//! # A loop turn
//!
//! A task queues its entry in the submission queue and parks; nothing
//! enters the kernel then. The Processer, when it runs out of tasks and at
//! its periodic look outward (every `NEW_QUEUE_INTERVAL` picks), takes a
//! *turn*: one `io_uring_enter` if entries were queued since the last, then
//! a look at the completion queue (shared memory, no system call), where
//! each completion's `user_data` names the slot of the operation it ends.
//!
//! # An operation's states (the in-flight state machine)
//!
//! The slot ([`OpSlot`]) lives in the waiting task's frame, beside what
//! the kernel reads or writes (the buffer, an address, a `msghdr`); its
//! address is the entry's `user_data` (`run`). The kernel may touch
//! those, and the Processer will write the slot, until the completion is
//! reaped: so the frame must not be left before.
//!
//! ```text
//!  state       slot.res  moved on by
//!  QUEUED      None      task: entry pushed (user_data = &slot); it parks
//!  IN FLIGHT   None      Processer: io_uring_enter at its turn
//!  CANCELLING  None      task, woken by its deadline or its cancellation
//!                        while not DONE: queues IORING_OP_ASYNC_CANCEL for
//!                        its user_data and parks again, not cancellably,
//!                        queueing it again after a pause while not DONE
//!                        (a cancel can miss: see `withdraw`)
//!  DONE        Some(r)   Processer: reaps the completion, stores r, then
//!                        unparks the task
//! ```
//!
//! The task returns, or unwinds, only from DONE. A deadline or a
//! cancellation never ends the wait by itself: it moves the operation to
//! CANCELLING, and the wait goes on until the kernel has given up the
//! buffer. When the operation completed anyway (data came before the
//! cancel), its result is kept: a read returns the bytes it got, and a
//! cancelled task unwinds at its next wait (the rule of `runtime/task/cancel.rs`).
//!
//! Both sides run on one thread: the task is bound to the Processer whose
//! ring holds its entry, and the Processer reaps only between tasks, when
//! the task is switched out. So the slot is plain cells, and the task's
//! header is alive when the Processer unparks it (the task cannot have
//! left its wait before DONE). A panic cannot start inside the wait: its
//! only steps are parks and the queueing of the cancel entry.
//!
//! # The ring's end
//!
//! A ring goes with its Processer, when the scheduler stops. Operations
//! still in flight then belong to tasks that will never run again (the
//! shutdown gave up on them), whose stacks are never freed; the ring asks
//! the kernel to cancel them all and waits for their completions (without
//! touching the slots) before it closes, for a bounded time, after which
//! it is leaked on purpose (the kernel keeps its own reference to what it
//! still uses).
//!
//! # Fork
//!
//! The `hooks` feature's fork handling knows nothing of rings: a child
//! keeps using the epoll path for the hooked calls. A forked child must not
//! use a scheduler of its parent in any case.
//!
//! # Why the `io-uring` crate
//!
//! The ring's queues are memory shared with the kernel, with memory
//! barriers at fixed places and a layout that grew over kernel versions;
//! tokio-rs's `io-uring` keeps them, the opcode encodings and the probe,
//! and is the crate tokio-uring and monoio build on. The part written here
//! is what is gofer's own: who submits, who reaps, and the state machine
//! above.

use std::cell::{Cell, RefCell};
use std::io;
use std::marker::PhantomPinned;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring};

use super::reactor::Reactor;
use super::readiness::TimedOut;
use super::uring_recv::{self, Pool, BUF_COUNT, BUF_GROUP, REC_TAG};
use crate::runtime::context;
use crate::runtime::processer::shared::ProcesserShared;
use crate::runtime::shared::Shared;
use crate::runtime::task::cancel;
use crate::runtime::task::wait::WaitOn;
use crate::runtime::task::{self, Runnable, TaskHeader, TaskRef};
use crate::runtime::time::timer::park_until;

/// Submission queue entries per ring. A full queue is submitted at once
/// (`Ring::push`), so this bounds only the batch of one enter.
const SQ_ENTRIES: u32 = 256;
/// Completion queue entries per ring: room for every task of a busy
/// Processer to have an operation in flight. Past it the kernel keeps the
/// overflow (`IORING_FEAT_NODROP`) until the next turn makes room.
const CQ_ENTRIES: u32 = 8192;
/// The `user_data` of a cancel entry: its completion ends no slot.
pub(crate) const CANCEL_DATA: u64 = 0;
/// How long a ring's end waits for the completions of operations still in
/// flight before it leaks the ring.
const DRAIN_LIMIT: Duration = Duration::from_secs(1);

/// Whether this kernel offers io_uring with the operations the driver
/// uses; the reason if not.
///
/// The probe's ring is made on a thread of its own, which ends before this
/// returns. A thread that makes a ring is one of the ring's users until it
/// exits, and the kernel's teardown of a closed ring, which runs some
/// milliseconds after the close, interrupts each user's blocking system
/// call: a socket read or write with a timeout, or an `epoll_wait`, would
/// fail with `EINTR` on the caller's thread (the one building the
/// scheduler) for no signal of its own.
pub(crate) fn probe() -> Result<(), String> {
    std::thread::Builder::new()
        .name("gofer-uring-probe".into())
        .spawn(probe_here)
        .map_err(|e| format!("no thread for the io_uring probe: {e}"))?
        .join()
        .map_err(|_| "the io_uring probe panicked".to_string())?
}

/// [`probe`], on the running thread.
fn probe_here() -> Result<(), String> {
    let ring = IoUring::new(2).map_err(|e| format!("io_uring_setup failed: {e}"))?;
    let mut probe = io_uring::Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| format!("the ring's operations cannot be probed: {e}"))?;
    for (code, name) in [
        (opcode::Recv::CODE, "IORING_OP_RECV"),
        (opcode::Send::CODE, "IORING_OP_SEND"),
        (opcode::AsyncCancel::CODE, "IORING_OP_ASYNC_CANCEL"),
        (opcode::Accept::CODE, "IORING_OP_ACCEPT"),
        (opcode::Connect::CODE, "IORING_OP_CONNECT"),
        (opcode::PollAdd::CODE, "IORING_OP_POLL_ADD"),
        (opcode::RecvMsg::CODE, "IORING_OP_RECVMSG"),
        (opcode::SendMsg::CODE, "IORING_OP_SENDMSG"),
    ] {
        if !probe.is_supported(code) {
            return Err(format!("the kernel's io_uring lacks {name}"));
        }
    }
    Ok(())
}

/// What a ring's readiness in the epoll reactor wakes: its Processer.
pub(crate) struct RingWaker {
    p: Arc<ProcesserShared>,
    /// The scheduler of the Processer. Raw: the reactor that keeps this
    /// waker is owned by the scheduler, and is polled only by threads that
    /// hold the scheduler (its Processers and Dispatcher).
    sched: *const Shared,
    /// The same scheduler, for the ring's pool (woken from any thread,
    /// possibly after the scheduler is gone).
    sched_weak: Weak<Shared>,
}

// SAFETY: `sched` is only read (through `&Shared`, which is Sync) while
// the scheduler is alive (see the field); the rest is Send and Sync.
unsafe impl Send for RingWaker {}
// SAFETY: as above.
unsafe impl Sync for RingWaker {}

impl RingWaker {
    pub(crate) fn new(p: Arc<ProcesserShared>, sched: &Arc<Shared>) -> Arc<RingWaker> {
        Arc::new(RingWaker {
            p,
            sched: Arc::as_ptr(sched),
            sched_weak: Arc::downgrade(sched),
        })
    }

    /// Wakes the ring's Processer if it sleeps (a no-op if it is awake:
    /// it takes a turn at its ring before it sleeps again).
    pub(crate) fn wake(&self) {
        // SAFETY: called from a poll of the reactor, made by a thread that
        // holds the scheduler (field docs), so `Shared` is alive.
        let sched = unsafe { &*self.sched };
        sched.wake_proc(&self.p);
    }
}

/// One core Processer's ring. Only its Processer's thread touches it (the
/// Processer at its turns, its bound tasks when they queue an entry).
pub(crate) struct Ring {
    /// Dropped by hand: leaked when operations outlive the drain (module
    /// docs, "The ring's end").
    ring: ManuallyDrop<RefCell<IoUring>>,
    /// Entries queued whose completion has not been reaped (cancel entries
    /// included).
    in_flight: Cell<usize>,
    /// Entries queued since the last enter.
    unsubmitted: Cell<usize>,
    reactor: Weak<Reactor>,
    /// The provided buffers of multishot receives (`uring_recv.rs`);
    /// `None` when they are switched off or the kernel refused them.
    pool: Option<Arc<Pool>>,
    /// With DEFER_TASKRUN, the eventfd registered in the reactor in place
    /// of the ring's descriptor ([`build_ring`]).
    efd: Option<OwnedFd>,
}

/// A ring set up with `SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG` (the
/// `bool` is true) where the kernel has them (6.1), else with
/// `COOP_TASKRUN | TASKRUN_FLAG` (5.19), else plain.
///
/// Without DEFER_TASKRUN the kernel runs the work that posts a completion
/// (the read once data came, for one) on the ring's thread by interrupting
/// it: a blocking system call with a timeout that a task makes on that
/// thread then fails with `EINTR`. With it, the work waits until the
/// owner enters the ring with `GETEVENTS`, which a turn does when
/// `TASKRUN_FLAG` says work waits (`needs_turn`); every enter must then
/// come from the thread that made the ring (`SINGLE_ISSUER`), which holds:
/// the Processer makes, uses, drains and drops its ring on its own thread.
fn build_ring() -> io::Result<(IoUring, bool)> {
    let base = || {
        let mut b = IoUring::builder();
        b.setup_cqsize(CQ_ENTRIES).setup_clamp();
        b
    };
    if let Ok(r) = base()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag()
        .build(SQ_ENTRIES)
    {
        return Ok((r, true));
    }
    if let Ok(r) = base()
        .setup_coop_taskrun()
        .setup_taskrun_flag()
        .build(SQ_ENTRIES)
    {
        return Ok((r, false));
    }
    Ok((base().build(SQ_ENTRIES)?, false))
}

/// Whether rings receive through multishot entries (`uring_recv.rs`):
/// only with `GOFER_URING_RECV=multishot` (read once per process), since
/// the measurements do not show it ahead of single-shot reads
/// (BENCHMARKS.md, "The io_uring driver").
fn multishot_wanted() -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| std::env::var("GOFER_URING_RECV").is_ok_and(|v| v == "multishot"))
}

impl Ring {
    /// A ring, registered with `reactor` so that `waker` wakes its
    /// Processer when completions arrive.
    pub(crate) fn new(reactor: &Arc<Reactor>, waker: Arc<RingWaker>) -> io::Result<Ring> {
        let (ring, deferred) = build_ring()?;
        let pool = if multishot_wanted() {
            Pool::new(waker.p.clone(), Weak::clone(&waker.sched_weak)).ok()
        } else {
            None
        };
        // SAFETY: the pool's descriptor ring stays allocated while the ring
        // holds the pool, which it does until it is closed (or leaks it
        // with the ring: `Drop`).
        let pool = pool.filter(|pool| unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(pool.ring_addr(), BUF_COUNT, BUF_GROUP, 0)
                .is_ok()
        });
        // The deferred work does not make the ring's descriptor readable
        // (it posts nothing until the owner enters): an eventfd that the
        // kernel signals when such work is first queued is registered in
        // the reactor in its place.
        let efd = if deferred {
            // SAFETY: a plain system call; the result is checked.
            let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a descriptor just made, owned by nobody else.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            ring.submitter().register_eventfd(fd.as_raw_fd())?;
            Some(fd)
        } else {
            None
        };
        let wake_fd = efd.as_ref().map_or(ring.as_raw_fd(), AsRawFd::as_raw_fd);
        reactor.register_ring(wake_fd, waker)?;
        Ok(Ring {
            ring: ManuallyDrop::new(RefCell::new(ring)),
            in_flight: Cell::new(0),
            unsubmitted: Cell::new(0),
            reactor: Arc::downgrade(reactor),
            pool,
            efd,
        })
    }

    /// The ring's provided buffers, if it receives through multishot
    /// entries.
    pub(crate) fn pool(&self) -> Option<&Arc<Pool>> {
        self.pool.as_ref()
    }

    /// Queues `e`; a full submission queue is submitted first.
    ///
    /// # Safety
    /// Whatever `e` points at (its buffer, and the slot its `user_data`
    /// names unless it is [`CANCEL_DATA`]) stays valid and unmoved until its
    /// completion is reaped (module docs).
    pub(crate) unsafe fn push(&self, e: &squeue::Entry) -> io::Result<()> {
        let mut ring = self.ring.borrow_mut();
        loop {
            // SAFETY: the caller's contract.
            if unsafe { ring.submission().push(e) }.is_ok() {
                break;
            }
            ring.submit()?;
            self.unsubmitted.set(0);
        }
        self.unsubmitted.set(self.unsubmitted.get() + 1);
        self.in_flight.set(self.in_flight.get() + 1);
        Ok(())
    }

    /// Whether a turn has anything to do: entries to submit, the kernel's
    /// work for completions waiting for an entry (`IORING_SQ_TASKRUN`), or
    /// completions to reap.
    pub(crate) fn needs_turn(&self) -> bool {
        if self.pool.as_ref().is_some_and(|p| p.remote_pending()) {
            return true;
        }
        if self.in_flight.get() == 0 {
            return false;
        }
        let mut ring = self.ring.borrow_mut();
        self.unsubmitted.get() != 0 || ring.submission().taskrun() || !ring.completion().is_empty()
    }

    /// A loop turn (module docs): submits what was queued, reaps the
    /// completions, and pushes the tasks they end on `woken`.
    pub(crate) fn turn(&self, woken: &mut Vec<Runnable>) {
        if let Some(pool) = &self.pool {
            pool.take_remote(self);
        }
        if self.in_flight.get() == 0 {
            return;
        }
        let mut ring = self.ring.borrow_mut();
        if self.unsubmitted.get() != 0 || ring.submission().taskrun() {
            // An error (EBUSY while the kernel holds overflowed
            // completions, EINTR) leaves the entries queued for the next
            // turn, after this one reaped.
            if ring.submit().is_ok() {
                self.unsubmitted.set(0);
            }
        }
        for cqe in ring.completion() {
            let data = cqe.user_data();
            if data & REC_TAG != 0 {
                // SAFETY: a tagged user_data is a record with an armed
                // entry on this ring, whose count the kernel holds until
                // this entry's last completion (`uring_recv.rs`).
                if unsafe {
                    uring_recv::complete(data & !REC_TAG, cqe.result(), cqe.flags(), Some(woken))
                } {
                    self.in_flight.set(self.in_flight.get() - 1);
                }
                continue;
            }
            self.in_flight.set(self.in_flight.get() - 1);
            if data == CANCEL_DATA {
                continue;
            }
            // SAFETY: `data` is the address of the slot of an operation in
            // flight, which its task keeps in place until this completion
            // is reaped (module docs): this is that moment.
            let slot = unsafe { &*(data as *const OpSlot) };
            slot.res.set(Some(cqe.result()));
            // SAFETY: the task is in its wait until it sees `res` (module
            // docs), so its header is alive; `task` came from a TaskRef.
            if let Some(r) = unsafe { task::unpark_raw(slot.task) } {
                woken.push(r);
            }
        }
    }
}

impl Drop for Ring {
    /// Cancels what is still in flight and waits for the completions
    /// (module docs, "The ring's end"), then leaves the reactor.
    fn drop(&mut self) {
        let ring = self.ring.get_mut();
        if let Some(r) = self.reactor.upgrade() {
            r.deregister_ring(
                self.efd
                    .as_ref()
                    .map_or(ring.as_raw_fd(), AsRawFd::as_raw_fd),
            );
        }
        if self.in_flight.get() != 0 {
            self.drain();
        }
        if self.in_flight.get() == 0 {
            // SAFETY: dropped once, here; nothing of the kernel's refers to
            // our memory any more.
            unsafe { ManuallyDrop::drop(&mut self.ring) };
        } else if let Some(pool) = &self.pool {
            // The kernel may still fill the pool's buffers: it is leaked
            // with the ring.
            std::mem::forget(Arc::clone(pool));
        }
        // Otherwise the ring is leaked: the kernel still holds buffers in
        // stacks that are never freed, and keeps its queues mapped too.
    }
}

impl Ring {
    /// Asks the kernel to cancel every operation in flight and reaps
    /// completions (without touching the slots: their tasks never run
    /// again) until none is left or [`DRAIN_LIMIT`] passes.
    fn drain(&mut self) {
        let ring = self.ring.get_mut();
        let all = opcode::AsyncCancel2::new(types::CancelBuilder::any())
            .build()
            .user_data(CANCEL_DATA);
        let until = Instant::now() + DRAIN_LIMIT;
        let ts = types::Timespec::new().nsec(10_000_000);
        let args = types::SubmitArgs::new().timespec(&ts);
        let mut queued = false;
        while self.in_flight.get() != 0 && Instant::now() < until {
            if !queued {
                // SAFETY: the cancel entry points at nothing of ours.
                queued = unsafe { ring.submission().push(&all) }.is_ok();
                if queued {
                    self.in_flight.set(self.in_flight.get() + 1);
                }
            }
            let _ = ring.submitter().submit_with_args(1, &args);
            for cqe in ring.completion() {
                let data = cqe.user_data();
                let last = data & REC_TAG == 0 || {
                    // SAFETY: as in `turn`; the waiters are not woken
                    // (their tasks never run again).
                    unsafe {
                        uring_recv::complete(data & !REC_TAG, cqe.result(), cqe.flags(), None)
                    }
                };
                if last {
                    self.in_flight.set(self.in_flight.get() - 1);
                }
            }
        }
    }
}

/// The slot of one operation in flight, in its task's frame (module docs).
struct OpSlot {
    /// The waiting task (a pointer from its `TaskRef`).
    task: *const TaskHeader,
    /// The completion's result: `None` until DONE.
    res: Cell<Option<i32>>,
    _pin: PhantomPinned,
}

/// What [`queue_here`] did.
enum Queued {
    /// The running task may not use a ring here (module docs, "Who uses a
    /// ring"), or none could be made: nothing was queued.
    NotHere,
    /// Queued on this Processer's ring.
    Yes,
    /// The ring refused it.
    Failed(io::Error),
}

/// Queues `e` on the ring of the running task's Processer, if the task may
/// use it (made at the first use).
///
/// # Safety
/// As [`Ring::push`].
#[inline(never)]
unsafe fn queue_here(task: &TaskRef, e: &squeue::Entry) -> Queued {
    let p = context::current_proc_ptr();
    if p.is_null() {
        return Queued::NotHere;
    }
    // SAFETY: the ProcLocal of this thread's Processer loop, which outlives
    // the task running on it.
    let local = unsafe { &*p };
    let Some(ring) = local.ring_for(task) else {
        return Queued::NotHere;
    };
    // SAFETY: the caller's contract.
    match unsafe { ring.push(e) } {
        Ok(()) => Queued::Yes,
        Err(e) => Queued::Failed(e),
    }
}

/// A stream operation for the ring.
pub(crate) enum StreamOp<'a> {
    /// `recv` into the buffer.
    Recv(&'a mut [u8]),
    /// `send` from the buffer (with `MSG_NOSIGNAL`, as std's).
    Send(&'a [u8]),
}

/// Whether a scheduler with the io_uring driver was ever built in this
/// process. Until one is, every entry point here returns at once, before it
/// looks at the running task, builds an entry or reads the clock: the
/// epoll driver's socket operations pay one load for the ring.
static DRIVER_BUILT: AtomicBool = AtomicBool::new(false);

/// Records that a scheduler with the io_uring driver is being built (by
/// `SchedulerBuilder::build`, before any of its tasks exists: a task sees
/// the store through the hand-off that started it).
pub(crate) fn note_driver_built() {
    DRIVER_BUILT.store(true, Ordering::Relaxed);
}

/// Whether [`note_driver_built`] ran.
pub(crate) fn driver_built() -> bool {
    DRIVER_BUILT.load(Ordering::Relaxed)
}

/// The running task's header, if it is a task of a scheduler with the
/// io_uring driver (whether its Processer's ring may serve it is
/// `ProcLocal::ring_for`'s question, asked when the entry is queued).
fn ring_task() -> Option<*const TaskHeader> {
    if !driver_built() {
        return None;
    }
    let h = context::current_task_ptr()?;
    // SAFETY: the running task's header is alive while it runs.
    (unsafe { &*h }.shared.config.io_driver == crate::IoDriver::Uring).then_some(h)
}

/// Runs `op` on `fd` through the running task's ring and waits for it (at
/// most `timeout`, whose expiry is `TimedOut`); `None` when the ring may
/// not serve it (module docs, "Who uses a ring"): the caller takes the
/// readiness path. A cancelled task unwinds from the wait once its
/// operation is DONE.
pub(crate) fn stream_op(
    fd: RawFd,
    op: StreamOp<'_>,
    timeout: Option<Duration>,
) -> Option<io::Result<usize>> {
    let h = ring_task()?;
    let (entry, on) = match op {
        StreamOp::Recv(buf) => (
            opcode::Recv::new(types::Fd(fd), buf.as_mut_ptr(), clamp_len(buf.len())).build(),
            WaitOn::Readable(fd),
        ),
        StreamOp::Send(buf) => (
            opcode::Send::new(types::Fd(fd), buf.as_ptr(), clamp_len(buf.len()))
                .flags(libc::MSG_NOSIGNAL)
                .build(),
            WaitOn::Writable(fd),
        ),
    };
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    // SAFETY: the buffer is borrowed for this call, which `run` outlasts.
    let r = unsafe { run(h, entry, on, deadline) }?;
    Some(r.map(|n| n as usize))
}

/// A vectored stream operation for the ring.
pub(crate) enum VectoredOp<'a, 'b> {
    /// `recvmsg` into the buffers, in order.
    Recv(&'a mut [io::IoSliceMut<'b>]),
    /// `sendmsg` from the buffers, in order (with `MSG_NOSIGNAL`).
    Send(&'a [io::IoSlice<'b>]),
}

/// The most buffers one vectored operation takes (`UIO_MAXIOV`); std's
/// `readv`/`writev` use as many and leave the rest for the next call.
const MAX_IOV: usize = 1024;

/// [`stream_op`] for vectored reads and writes (`IORING_OP_RECVMSG` and
/// `SENDMSG`, the `msghdr` in this frame and the `iovec`s those of the
/// caller's slices).
pub(crate) fn vectored_op(
    fd: RawFd,
    op: VectoredOp<'_, '_>,
    timeout: Option<Duration>,
) -> Option<io::Result<usize>> {
    let h = ring_task()?;
    // SAFETY: msghdr is plain data, valid zeroed.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice and IoSliceMut are ABI-compatible with iovec on Unix (std's
    // guarantee).
    let (entry, on) = match op {
        VectoredOp::Recv(bufs) => {
            msg.msg_iov = bufs.as_mut_ptr().cast::<libc::iovec>();
            msg.msg_iovlen = bufs.len().min(MAX_IOV);
            (
                opcode::RecvMsg::new(types::Fd(fd), &mut msg).build(),
                WaitOn::Readable(fd),
            )
        }
        VectoredOp::Send(bufs) => {
            msg.msg_iov = bufs.as_ptr().cast_mut().cast::<libc::iovec>();
            msg.msg_iovlen = bufs.len().min(MAX_IOV);
            (
                opcode::SendMsg::new(types::Fd(fd), &msg)
                    .flags(libc::MSG_NOSIGNAL as u32)
                    .build(),
                WaitOn::Writable(fd),
            )
        }
    };
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    // SAFETY: `msg` lives in this frame and the slices are borrowed for
    // this call, which `run` outlasts; a send's buffers are only read.
    let r = unsafe { run(h, entry, on, deadline) }?;
    Some(r.map(|n| n as usize))
}

/// Accepts a connection on the listening socket `fd` through the running
/// task's ring (`IORING_OP_ACCEPT`), the new descriptor made
/// close-on-exec and non-blocking, as gofer's sockets are; waits at most
/// `timeout` (its expiry: `TimedOut`). With `want_addr`, the peer's
/// address comes back too. `None` when the ring may not serve it (module
/// docs, "Who uses a ring").
pub(crate) fn accept(
    fd: RawFd,
    want_addr: bool,
    timeout: Option<Duration>,
) -> Option<io::Result<(OwnedFd, Option<socket2::SockAddr>)>> {
    let h = ring_task()?;
    // SAFETY: sockaddr_storage is plain data, valid when zeroed.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let (addr, lenp) = if want_addr {
        (
            (&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr>(),
            &mut len as *mut libc::socklen_t,
        )
    } else {
        (std::ptr::null_mut(), std::ptr::null_mut())
    };
    let entry = opcode::Accept::new(types::Fd(fd), addr, lenp)
        .flags(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK)
        .build();
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    // SAFETY: `storage` and `len` live in this frame, which `run` outlasts.
    let r = unsafe { run(h, entry, WaitOn::Readable(fd), deadline) }?;
    Some(r.map(|n| {
        // SAFETY: a completed accept's result is the new descriptor, ours.
        let s = unsafe { OwnedFd::from_raw_fd(n) };
        // SAFETY: the kernel wrote an address of `len` bytes in `storage`.
        let a = want_addr.then(|| unsafe { socket2::SockAddr::new(storage, len) });
        (s, a)
    }))
}

/// Connects the socket `fd` to `addr` through the running task's ring
/// (`IORING_OP_CONNECT`), waiting at most `timeout` (its expiry:
/// `TimedOut`, as std's `connect_timeout` says). `None` when the ring may
/// not serve it (module docs, "Who uses a ring").
pub(crate) fn connect(
    fd: RawFd,
    addr: &socket2::SockAddr,
    timeout: Option<Duration>,
) -> Option<io::Result<()>> {
    let h = ring_task()?;
    let entry = opcode::Connect::new(types::Fd(fd), addr.as_ptr(), addr.len()).build();
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    // SAFETY: `addr` is borrowed for this call, which `run` outlasts.
    let r = unsafe { run(h, entry, WaitOn::Writable(fd), deadline) }?;
    Some(r.map(|_| ()))
}

/// Receives one datagram on `fd` through the running task's ring
/// (`IORING_OP_RECVMSG`, with `MSG_PEEK` when `peek`), and its sender's
/// address; waits at most `timeout` (its expiry: `TimedOut`). A datagram
/// longer than `buf` is cut to it, as `recvfrom` does. `None` when the
/// ring may not serve it (module docs, "Who uses a ring").
pub(crate) fn recv_from(
    fd: RawFd,
    buf: &mut [u8],
    peek: bool,
    timeout: Option<Duration>,
) -> Option<io::Result<(usize, socket2::SockAddr)>> {
    let h = ring_task()?;
    // SAFETY: sockaddr_storage and msghdr are plain data, valid zeroed.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: as above.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut storage as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    let flags = if peek { libc::MSG_PEEK as u32 } else { 0 };
    let entry = opcode::RecvMsg::new(types::Fd(fd), &mut msg)
        .flags(flags)
        .build();
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    // SAFETY: `msg`, `iov` and `storage` live in this frame and `buf` is
    // borrowed for this call, which `run` outlasts.
    let r = unsafe { run(h, entry, WaitOn::Readable(fd), deadline) }?;
    Some(r.map(|n| {
        // SAFETY: the kernel wrote an address of `msg_namelen` bytes in
        // `storage`.
        let a = unsafe { socket2::SockAddr::new(storage, msg.msg_namelen) };
        (n as usize, a)
    }))
}

/// Sends `buf` as one datagram to `addr` (`None`: the connected peer) on
/// `fd` through the running task's ring (`IORING_OP_SENDMSG`), waiting at
/// most `timeout` (its expiry: `TimedOut`). `None` when the ring may not
/// serve it (module docs, "Who uses a ring").
pub(crate) fn send_to(
    fd: RawFd,
    buf: &[u8],
    addr: Option<&socket2::SockAddr>,
    timeout: Option<Duration>,
) -> Option<io::Result<usize>> {
    let h = ring_task()?;
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr().cast_mut().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data, valid zeroed.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    if let Some(a) = addr {
        msg.msg_name = a.as_ptr().cast_mut().cast();
        msg.msg_namelen = a.len();
    }
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    let entry = opcode::SendMsg::new(types::Fd(fd), &msg)
        .flags(libc::MSG_NOSIGNAL as u32)
        .build();
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    // SAFETY: `msg` and `iov` live in this frame, and `buf` and `addr` are
    // borrowed for this call, which `run` outlasts; the kernel only reads
    // through the pointers made mutable for the C struct.
    let r = unsafe { run(h, entry, WaitOn::Writable(fd), deadline) }?;
    Some(r.map(|n| n as usize))
}

/// Waits until `fd` is readable (`write` false) or writable, or has an
/// error or a hang-up, through the running task's ring
/// (`IORING_OP_POLL_ADD`, single-shot), until `deadline` (its expiry:
/// `TimedOut`). `None` when the ring may not serve it (module docs, "Who
/// uses a ring").
pub(crate) fn poll(fd: RawFd, write: bool, deadline: Option<Instant>) -> Option<io::Result<()>> {
    let h = ring_task()?;
    let (mask, on) = if write {
        (libc::POLLOUT, WaitOn::Writable(fd))
    } else {
        (libc::POLLIN, WaitOn::Readable(fd))
    };
    let entry = opcode::PollAdd::new(types::Fd(fd), mask as u32).build();
    // SAFETY: a poll entry points at nothing of ours.
    let r = unsafe { run(h, entry, on, deadline) }?;
    Some(r.map(|_| ()))
}

/// Runs `entry` (its `user_data` is set here) through the running task's
/// ring and waits for its completion (until `deadline`, whose expiry is
/// `TimedOut`): the result, a negative one as the error it names. `None`
/// when the ring may not serve it (module docs, "Who uses a ring"):
/// nothing was queued. A cancelled task unwinds from the wait once the
/// operation is DONE.
///
/// # Safety
/// Whatever `entry` points at stays valid and unmoved until this returns
/// or unwinds (it does so only from DONE).
unsafe fn run(
    h: *const TaskHeader,
    entry: squeue::Entry,
    on: WaitOn,
    deadline: Option<Instant>,
) -> Option<io::Result<i32>> {
    // SAFETY: `h` is the running task's header (`ring_task`), alive while
    // it runs; the pointer came from the Runnable its Processer holds.
    let task = unsafe { TaskRef::clone_from_ptr(h) };
    let slot = pin!(OpSlot {
        task: task.as_ptr(),
        res: Cell::new(None),
        _pin: PhantomPinned,
    });
    let data = &*slot as *const OpSlot as u64;
    // SAFETY: what the entry points at is the caller's to keep (contract),
    // and the slot is pinned in this frame; `wait` returns (or unwinds)
    // only once the operation is DONE, its completion reaped.
    match unsafe { queue_here(&task, &entry.user_data(data)) } {
        Queued::NotHere => return None,
        Queued::Failed(e) => return Some(Err(e)),
        Queued::Yes => {}
    }
    Some(match wait(&task, &slot, deadline, on) {
        Ok(n) if n >= 0 => Ok(n),
        Ok(n) => Err(io::Error::from_raw_os_error(-n)),
        Err(TimedOut) => Err(io::ErrorKind::TimedOut.into()),
    })
}

/// A length the entry can carry (the kernel moves at most that much in
/// one operation anyway).
fn clamp_len(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Parks until the operation of `slot` is DONE and returns its result,
/// moving it to CANCELLING first when `deadline` passes (then `TimedOut`
/// unless it completed anyway) or the task is cancelled (then an unwind,
/// unless it completed anyway).
fn wait(
    task: &TaskRef,
    slot: &OpSlot,
    deadline: Option<Instant>,
    on: WaitOn,
) -> Result<i32, TimedOut> {
    loop {
        if let Some(r) = slot.res.get() {
            return Ok(r);
        }
        let cancelled = cancel::interrupted_in(task);
        if cancelled || deadline.is_some_and(|d| Instant::now() >= d) {
            let r = withdraw(task, slot, on);
            if r != -libc::ECANCELED {
                return Ok(r);
            }
            if cancelled {
                // DONE: nothing of the operation is left in the kernel.
                cancel::unwind();
            }
            return Err(TimedOut);
        }
        park_until(task, cancel::recheck_in(task, deadline), on);
    }
}

/// The first pause before [`withdraw`] asks again, and the longest.
const CANCEL_AGAIN: Duration = Duration::from_millis(1);
const CANCEL_AGAIN_MAX: Duration = Duration::from_millis(64);

/// CANCELLING: asks the kernel to cancel the operation of `slot`, and
/// parks, not cancellably, until it is DONE, asking again after a pause
/// (doubled each time) while it is not.
///
/// One cancel may miss its operation for good: a receive whose poll fired
/// is in no table the cancel searches while its retry waits as task work,
/// so the cancel completes with `ENOENT`; and if another reader took the
/// data meanwhile, the retry finds nothing and arms the poll again, to
/// wait for data nobody may send (a reader cancelled so that it stops
/// waiting). Asking again finds it armed.
fn withdraw(task: &TaskRef, slot: &OpSlot, on: WaitOn) -> i32 {
    let cancel = opcode::AsyncCancel::new(slot as *const OpSlot as u64)
        .build()
        .user_data(CANCEL_DATA);
    let mut pause = CANCEL_AGAIN;
    loop {
        if let Some(r) = slot.res.get() {
            return r;
        }
        // SAFETY: a cancel entry points at nothing; its completion names no
        // slot. Refused (the ring's queue full and the enter failing), it
        // is asked again after the pause like one that missed.
        unsafe { queue_here(task, &cancel) };
        park_until(task, Some(Instant::now() + pause), on);
        pause = (pause * 2).min(CANCEL_AGAIN_MAX);
    }
}
