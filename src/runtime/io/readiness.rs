//! One registered socket's readiness and the tasks waiting on it (Go's
//! `pollDesc`, tokio's `ScheduledIo`).
//!
//! # The readiness word (`IoState::readiness`)
//!
//! ```text
//!   bits 31..16   tick: +1 at every event the reactor delivers
//!   bits  4..0    READABLE, WRITABLE, READ_CLOSED, WRITE_CLOSED, ERROR
//! ```
//!
//! The reactor ORs in what an event reports and bumps the tick. A task that
//! tried its syscall and got `EAGAIN` clears the bits of its direction, but
//! only if the tick is still the one it read *before* the syscall: an event
//! that arrived in between moved the tick, the bits stay, and the task tries
//! again instead of waiting for an edge that already came. Sockets are
//! registered edge triggered, so no later event would repeat it.
//!
//! # Waiting (both sides of the race)
//!
//! ```text
//!  task T (wants to read)                   reactor R (an event arrives)
//!  1. read readiness (tick t): not ready    1. readiness |= bits, tick += 1
//!  2. lock the waiters                      2. lock the waiters
//!  3. re-read readiness: still not ready    3. unlink every waiter the bits
//!  4. link a node (on T's stack), unlock       serve, unpark its task, then
//!  5. park; after each wake-up, read           mark it notified (Release);
//!     `notified` (Acquire); if not set,        unlock
//!     lock and read it again
//! ```
//!
//! R publishes readiness before it takes the lock, and T re-reads it after
//! taking the lock. If T locks first, R finds T's node when it locks; if R
//! locks first, its readiness store happened before T's re-read, which then
//! sees it. Either way T does not sleep through the event. A node is linked
//! exactly while it is not notified, and both change under the lock.
//!
//! The node lives in T's frame, so R must be done with it before T leaves.
//! T leaves only after it saw `notified` set, or under the lock (deadline
//! passed, or unwinding: it unlinks its own node unless notified). R's
//! store of `notified` is its last touch of the node and of T's header:
//! the unpark comes before it. So T, seeing `notified` without the lock,
//! may leave at once (the common case: a readiness wake-up takes no lock),
//! and the header R unparks through is alive, T being still in `wait` (its
//! node linked, or notified not yet set). T woken for another reason (its
//! deadline, a cancellation) while R is between the unpark and the store
//! finds `notified` clear, takes the lock, and so waits for R to finish;
//! R's unpark then leaves a token, a spurious wake-up for a later park.
//!
//! Several tasks may wait on one socket (a reader and a writer, or several
//! readers sharing it): an event wakes every waiter whose direction it
//! serves. The ones that find nothing to do (another reader took the data)
//! get `EAGAIN`, clear the readiness and wait again.
//!
//! # Deadlines: one timer entry per socket (Go's `pollDesc` timers)
//!
//! A server sets a read timeout once and then waits with it before every
//! request. A timer entry per wait would be inserted into and removed from
//! a Processer's heap at every request, for a deadline that almost never
//! comes. Instead a socket keeps at most one entry, `armed`, and a timed
//! waiter's node carries its own deadline. The invariant, kept under the
//! waiters' lock:
//!
//! > while a node with deadline `d` is linked, the entry armed (or one
//! > taken off its heap and about to run) fires no later than `d`.
//!
//! - **Linking** a node with deadline `d` (armed first, then linked, under
//!   one hold of the lock): an armed entry due at or before `d` covers it,
//!   and nothing else happens. That is the common case: the
//!   same timeout, so each new deadline is later than the last. Otherwise
//!   (none armed, or it is due later) the old entry is removed and one at
//!   `d` is added (`gen` names it).
//! - **Firing** (`IoState::deadline_passed`, from a timer queue, outside
//!   its lock): an entry whose `gen` is not the armed one was replaced and
//!   does nothing. Otherwise it disarms, unparks the task of every node
//!   whose deadline has passed, and arms again at the earliest deadline
//!   still ahead, if any. A task it unparks finds its deadline passed and
//!   unlinks its own node, as before; one that the reactor notified first
//!   returns ready.
//! - **Waking by readiness** leaves the entry alone: it fires once at its
//!   deadline (a timeout's length after it was armed) and finds nothing to
//!   do, or re-arms for the nodes linked since.
//! - **Closing** removes the entry ([`IoState::close`]): a dropped socket
//!   leaves no timer behind, and its state is not kept alive by one. After
//!   the close every direction stays ready, so no wait links or arms again.
//!
//! Firing takes the waiters' lock and then a timer queue's lock (to arm
//! again); linking takes them in the same order, and the timer side takes
//! no waiters' lock while it holds a queue's. Only tasks of the socket's
//! own scheduler wait here (`Registration::wait`), so the entry always
//! lives in that scheduler's queues.

use std::cell::Cell;
use std::marker::PhantomPinned;
use std::pin::{pin, Pin};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use crate::sys::lock::Mutex;

use super::epoll;
use crate::runtime::shared::Shared;
use crate::runtime::task::wait::WaitOn;
use crate::runtime::task::{self, Runnable, TaskHeader, TaskRef};
use crate::runtime::time::timer::{park_covered, Action, DeadlineWaiters, TimerRef};

pub(crate) const READABLE: u32 = 1;
pub(crate) const WRITABLE: u32 = 2;
pub(crate) const READ_CLOSED: u32 = 4;
pub(crate) const WRITE_CLOSED: u32 = 8;
pub(crate) const ERROR: u32 = 16;
const READY_MASK: u32 = 0xffff;
const TICK_ONE: u32 = 1 << 16;

/// Which way a task waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Interest {
    /// Readable, or the read side closed, or an error.
    Read,
    /// Writable, or the write side closed, or an error.
    Write,
}

impl Interest {
    /// The readiness bits that end a wait of this interest.
    pub(crate) fn mask(self) -> u32 {
        match self {
            Interest::Read => READABLE | READ_CLOSED | ERROR,
            Interest::Write => WRITABLE | WRITE_CLOSED | ERROR,
        }
    }
}

/// A snapshot of the readiness of one interest, to clear it later.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadyEvent {
    tick: u32,
    ready: u32,
}

impl ReadyEvent {
    /// Whether anything of the interest is ready.
    pub(crate) fn is_ready(self) -> bool {
        self.ready != 0
    }

    /// The same snapshot with only the data bits (`READABLE`, `WRITABLE`):
    /// what a short read or write may clear. The final bits (closed,
    /// error) stay until the socket goes.
    pub(crate) fn data_only(self) -> ReadyEvent {
        ReadyEvent {
            tick: self.tick,
            ready: self.ready & (READABLE | WRITABLE),
        }
    }
}

/// Readiness bits from an epoll event's bits.
pub(crate) fn from_epoll(ev: u32) -> u32 {
    let mut r = 0;
    if ev & epoll::IN != 0 {
        r |= READABLE;
    }
    if ev & epoll::OUT != 0 {
        r |= WRITABLE;
    }
    if ev & epoll::RDHUP != 0 {
        r |= READABLE | READ_CLOSED;
    }
    if ev & epoll::HUP != 0 {
        r |= READABLE | READ_CLOSED | WRITABLE | WRITE_CLOSED;
    }
    if ev & epoll::ERR != 0 {
        r |= READABLE | WRITABLE | ERROR;
    }
    r
}

/// A parked task: a node of the intrusive waiter list, on its own stack.
struct Waiter {
    /// The waiting task; alive while the node is linked (module docs).
    task: *const TaskHeader,
    /// The readiness bits that serve it.
    mask: u32,
    /// When it gives up; the socket's armed entry fires no later (module
    /// docs, "Deadlines").
    deadline: Option<Instant>,
    /// Set by the reactor, under the lock, after it unlinked the node and
    /// unparked the task: its last touch of the node (module docs). The
    /// waiter may read it without the lock.
    notified: AtomicBool,
    prev: Cell<Option<NonNull<Waiter>>>,
    next: Cell<Option<NonNull<Waiter>>>,
    _pin: PhantomPinned,
}

#[derive(Default)]
struct WaitList {
    head: Option<NonNull<Waiter>>,
    tail: Option<NonNull<Waiter>>,
    /// The socket's one timer entry, if armed (module docs, "Deadlines").
    armed: Option<Armed>,
    /// Names the entries armed so far; the last one is `armed`'s.
    gen: u64,
}

/// The timer entry armed for a socket's timed waiters.
struct Armed {
    /// The scheduler whose timer queue holds it (the socket's own).
    sched: Weak<Shared>,
    timer: TimerRef,
    /// When it fires.
    at: Instant,
    /// Its [`Action::IoDeadline`] carries the same number.
    gen: u64,
}

// SAFETY: the raw pointers name nodes that stay valid while linked (module
// docs) and are only dereferenced under the list's mutex.
unsafe impl Send for WaitList {}

impl WaitList {
    /// # Safety
    /// `node` is pinned, not linked, and stays valid until it is unlinked.
    unsafe fn push(&mut self, node: NonNull<Waiter>) {
        // SAFETY: per the contract, and the tail (if any) is a linked node.
        unsafe {
            node.as_ref().prev.set(self.tail);
            node.as_ref().next.set(None);
            match self.tail {
                Some(t) => t.as_ref().next.set(Some(node)),
                None => self.head = Some(node),
            }
        }
        self.tail = Some(node);
    }

    /// # Safety
    /// `node` is linked in this list.
    unsafe fn unlink(&mut self, node: NonNull<Waiter>) {
        // SAFETY: linked nodes and their neighbours are valid.
        unsafe {
            let (prev, next) = (node.as_ref().prev.get(), node.as_ref().next.get());
            match prev {
                Some(p) => p.as_ref().next.set(next),
                None => self.head = next,
            }
            match next {
                Some(n) => n.as_ref().prev.set(prev),
                None => self.tail = prev,
            }
            node.as_ref().prev.set(None);
            node.as_ref().next.set(None);
        }
    }
}

/// Why a wait gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimedOut;

/// The readiness state of one registered socket.
pub(crate) struct IoState {
    readiness: AtomicU32,
    waiters: Mutex<WaitList>,
}

impl IoState {
    /// A fresh state. It starts not ready: it is registered only after a
    /// syscall returned `EAGAIN`, and epoll reports the socket's current
    /// state once added, so nothing is missed.
    pub(crate) fn new() -> IoState {
        IoState {
            readiness: AtomicU32::new(0),
            waiters: Mutex::new(WaitList::default()),
        }
    }

    /// The readiness of `interest` now.
    pub(crate) fn readiness(&self, interest: Interest) -> ReadyEvent {
        // Acquire: pairs with the reactor's AcqRel update, so a task that
        // sees the bits also sees what the event was about.
        let r = self.readiness.load(Ordering::Acquire);
        ReadyEvent {
            tick: r >> 16,
            ready: r & interest.mask(),
        }
    }

    /// After `EAGAIN`: clears what `ev` saw, unless an event came since.
    pub(crate) fn clear(&self, ev: ReadyEvent) {
        let mut cur = self.readiness.load(Ordering::Acquire);
        loop {
            if cur >> 16 != ev.tick {
                return; // an event came in between: try again
            }
            let new = cur & !ev.ready;
            match self.readiness.compare_exchange_weak(
                cur,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(now) => cur = now,
            }
        }
    }

    /// Reactor side: records `bits` and wakes every waiter they serve; the
    /// tasks whose park this ends are pushed on `woken`.
    pub(crate) fn deliver(&self, bits: u32, woken: &mut Vec<Runnable>) {
        let mut cur = self.readiness.load(Ordering::Relaxed);
        loop {
            let new = ((cur & !READY_MASK).wrapping_add(TICK_ONE)) | (cur & READY_MASK) | bits;
            // AcqRel: Release publishes the event to tasks that read the
            // word; Acquire orders us after a task's clear.
            match self.readiness.compare_exchange_weak(
                cur,
                new,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        let mut list = self.waiters.lock();
        let mut at = list.head;
        while let Some(node) = at {
            // SAFETY: linked nodes are valid while we hold the lock.
            let w = unsafe { node.as_ref() };
            at = w.next.get();
            if w.mask & bits != 0 {
                // SAFETY: the node is linked in this list.
                unsafe { list.unlink(node) };
                // SAFETY: the node was linked until now, under the lock we
                // hold, and `notified` is not set yet, so its task is still
                // in `wait` (parked or on its way there) and its header is
                // alive.
                if let Some(r) = unsafe { task::unpark_raw(w.task) } {
                    woken.push(r);
                }
                // Release: pairs with the waiter's Acquire load; once set,
                // the waiter may leave and its frame (the node) go: the
                // last touch of the node (module docs).
                w.notified.store(true, Ordering::Release);
            }
        }
    }

    /// Whether any task waits on this socket now (a hint: a task may link
    /// or leave right after the lock is released).
    pub(crate) fn has_waiters(&self) -> bool {
        self.waiters.lock().head.is_some()
    }

    /// The socket is being closed: wake every waiter, whatever it waits for
    /// (each then finds the socket gone), and stay ready for ever.
    /// Its timer entry, if armed, is removed.
    pub(crate) fn close(&self) {
        let mut woken = Vec::new();
        self.deliver(
            READABLE | WRITABLE | READ_CLOSED | WRITE_CLOSED | ERROR,
            &mut woken,
        );
        for r in woken {
            crate::runtime::context::schedule(r);
        }
        let armed = self.waiters.lock().armed.take();
        if let Some((sched, a)) = armed.and_then(|a| Some((a.sched.upgrade()?, a))) {
            // Outside the waiters' lock; the entry's reference to this
            // state is not the last (the caller holds one).
            sched.remove_timer(a.timer);
        }
    }

    /// Makes sure an entry fires no later than `d`, for a node about to be
    /// linked, or still linked after its entry fired
    /// (module docs, "Deadlines"). Under the waiters' lock (`list`).
    fn cover(self: &Arc<Self>, list: &mut WaitList, sched: &Arc<Shared>, d: Instant) {
        if let Some(a) = &list.armed {
            if a.at <= d {
                return;
            }
        }
        if let Some(old) = list.armed.take() {
            // Due after `d`: replaced. Its reference to this state is not
            // the last (the caller holds one), so the removal frees nothing
            // under the lock but the entry.
            sched.remove_timer(old.timer);
        }
        list.gen += 1;
        let timer = sched.add_timer(d, Action::IoDeadline(self.clone(), list.gen));
        list.armed = Some(Armed {
            sched: Arc::downgrade(sched),
            timer,
            at: d,
            gen: list.gen,
        });
    }
}

impl DeadlineWaiters for IoState {
    /// Timer side: the entry `gen` came due. Unless it was replaced, it is
    /// disarmed, the tasks whose deadline passed are unparked onto `woken`,
    /// and the earliest deadline still ahead is armed (module docs,
    /// "Deadlines").
    fn deadline_passed(self: Arc<Self>, sched: &Arc<Shared>, gen: u64, woken: &mut Vec<Runnable>) {
        let mut list = self.waiters.lock();
        if list.armed.as_ref().map(|a| a.gen) != Some(gen) {
            return; // replaced by an earlier one, or removed
        }
        list.armed = None;
        let now = Instant::now();
        let mut ahead: Option<Instant> = None;
        let mut at = list.head;
        while let Some(node) = at {
            // SAFETY: linked nodes are valid while we hold the lock.
            let w = unsafe { node.as_ref() };
            at = w.next.get();
            match w.deadline {
                Some(d) if d <= now => {
                    // Left linked: the task unlinks its own node when it
                    // sees its deadline passed (or the reactor notifies it
                    // first). SAFETY: linked, under the lock we hold, so
                    // its task is in `wait` and its header is alive.
                    if let Some(r) = unsafe { task::unpark_raw(w.task) } {
                        woken.push(r);
                    }
                }
                Some(d) => ahead = Some(ahead.map_or(d, |a| a.min(d))),
                None => {}
            }
        }
        if let Some(d) = ahead {
            self.cover(&mut list, sched, d);
        }
    }
}

impl IoState {
    /// Task side: parks the running task `task` until the readiness serves
    /// `interest`, or until `deadline`. May return `Ok` spuriously (callers
    /// retry their syscall). With `cancellable`, a cancelled task leaves as
    /// at its deadline and then unwinds, with its node unlinked
    /// (`runtime/task/cancel.rs`); the hooks' waits are not cancellable (no unwind
    /// may cross a C frame).
    /// `ahead`: the deadline was computed just now from a positive timeout,
    /// so it has not passed and the clock is not read before the first park.
    pub(crate) fn wait(
        self: &Arc<Self>,
        task: &TaskRef,
        interest: Interest,
        deadline: Option<Instant>,
        fd: i32,
        cancellable: bool,
        ahead: bool,
    ) -> Result<(), TimedOut> {
        let on = match interest {
            Interest::Read => WaitOn::Readable(fd),
            _ => WaitOn::Writable(fd),
        };
        let node = pin!(Waiter {
            task: task.as_ptr(),
            mask: interest.mask(),
            deadline,
            notified: AtomicBool::new(false),
            prev: Cell::new(None),
            next: Cell::new(None),
            _pin: PhantomPinned,
        });
        let node: Pin<&Waiter> = node.as_ref();
        let ptr = NonNull::from(&*node);
        {
            let mut list = self.waiters.lock();
            if self.readiness(interest).is_ready() {
                return Ok(());
            }
            // Armed before the node is linked: an entry that finds no node
            // only disarms, and should arming unwind, no node of this frame
            // is left in the list.
            if let Some(d) = deadline {
                self.cover(&mut list, &task.shared, d);
            }
            // SAFETY: pinned in this frame and not linked; the guard below
            // unlinks it on every way out where the reactor did not.
            unsafe { list.push(ptr) };
        }
        // A deadline known to be ahead (`ahead`) is not looked at before
        // the first park: no clock read.
        let mut skip_clock = ahead;
        let guard = Enrolled {
            state: self,
            node: ptr,
        };
        loop {
            let cancelled = cancellable && crate::runtime::task::cancel::interrupted_in(task);
            let passed =
                !std::mem::take(&mut skip_clock) && deadline.is_some_and(|d| Instant::now() >= d);
            if cancelled || passed {
                drop(guard); // unlinks the node unless the reactor did
                return if node.notified.load(Ordering::Relaxed) {
                    Ok(())
                } else if cancelled {
                    crate::runtime::task::cancel::unwind()
                } else {
                    Err(TimedOut)
                };
            }
            // The socket's entry fires by the deadline (linked above). A
            // deferred cancellation looks again soon (`cancel::recheck`).
            match cancellable.then(|| crate::runtime::task::cancel::recheck_in(task, deadline)) {
                Some(Some(soon)) if Some(soon) != deadline => {
                    crate::runtime::time::timer::park_until(task, Some(soon), on);
                }
                _ => park_covered(task, deadline, on),
            }
            // Acquire: pairs with the reactor's Release store, its last
            // touch of the node. Not set: a wake-up for another reason, or
            // the reactor between its unpark and its store; the lock waits
            // for it to finish.
            let notified = node.notified.load(Ordering::Acquire) || {
                let _list = self.waiters.lock();
                node.notified.load(Ordering::Relaxed)
            };
            if notified {
                std::mem::forget(guard);
                return Ok(());
            }
        }
    }
}

/// Unlinks a node the reactor has not reached (deadline passed, or the
/// wait unwinds).
struct Enrolled<'a> {
    state: &'a IoState,
    node: NonNull<Waiter>,
}

impl Drop for Enrolled<'_> {
    fn drop(&mut self) {
        let mut list = self.state.waiters.lock();
        // SAFETY: the node lives in the frame that owns this guard.
        if !unsafe { self.node.as_ref() }
            .notified
            .load(Ordering::Relaxed)
        {
            // SAFETY: not notified, so linked in this list (under the lock).
            unsafe { list.unlink(self.node) };
        }
    }
}
