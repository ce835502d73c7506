//! The reactors of one scheduler, one per core Processer: who waits on
//! which epoll, and how readiness becomes wake-ups.
//!
//! # A reactor per core Processer
//!
//! Started tasks stay on their Processer (they are *bound* at their first
//! run), so their readiness should too: each core Processer owns an epoll
//! instance and an eventfd ([`Reactor`]; the scheduler's set is
//! [`Reactors`], indexed like the core Processers), and a socket is in the
//! reactor of the Processer its waiting task is bound to. A Processer's
//! poll then wakes its own tasks, which go to its own runnable queue in one
//! batch: no push into another Processer's remote queue, no look-out
//! request, no wake-up of another thread. What still crosses is counted
//! (`ProcesserStats::cross_wakeups`, delivered by `Shared::push_woken`).
//!
//! # Who polls
//!
//! No thread of its own. A core Processer about to sleep with nothing to
//! run takes the *poller role* of its own reactor (a `try_lock`: the owner,
//! its quick looks and the Dispatcher's are the only contenders) and sleeps
//! in `epoll_pwait2` instead of its futex, with its next timer's deadline
//! as the timeout. When the wait returns, it hands the events to the
//! sockets' states (a few atomic operations each) and gives the role up.
//! The tasks the events woke go to its own runnable queue, in one batch;
//! tasks bound elsewhere (a socket shared between Processers) go to their
//! Processers' remote pinned queues, a batch each.
//!
//! A busy Processer polls its own reactor without waiting when nobody has
//! for [`BUSY_POLL`] (looked at every 61st pick, with the new-queue check),
//! so readiness is not left waiting while it has work. The Dispatcher polls
//! the reactor of each Processer it marked blocked, when nobody has polled
//! it for two of its intervals, but only while waiters that could run
//! elsewhere (unbound tasks, tasks bound to another Processer: counted in
//! the reactor's `foreign`) wait on its sockets: the owner's bound tasks
//! wait for it anyway, and the Dispatcher's poll would only send them back
//! to it through its remote queue, a wake-up that crosses. Any reactor
//! nobody has polled for much longer (`dispatcher/rescue.rs`,
//! `OWNER_POLLS_WITHIN`) it polls anyway: a net for a waiter the count
//! missed (one that parked just as its socket moved away, counted in the
//! reactor it left). A blocked Processer never holds the
//! role (it is held only inside a poll, never while a task runs), so it can
//! never strand readiness.
//!
//! Only core Processers wait in a reactor (an extra Processer or a
//! `block_on` caller may leave for good). Sockets first waited on there
//! go to a core Processer's reactor (the task's home's if it is a core
//! one, else one chosen by descriptor number); since that Processer may
//! sleep on its futex (its reactor had nothing to poll when it went to
//! sleep), such a registration checks that the owner is awake or in a
//! blocking wait, and wakes it otherwise (`Shared::ensure_poller`, which
//! states the protocol). A registration made on a core Processer goes into
//! its own reactor, and needs no such check: the thread is awake.
//!
//! To the Dispatcher a Processer in `epoll_pwait2` looks like any sleeper:
//! `sleeping` set, no task switched in. Waking it writes the eventfd as
//! well as unparking its thread (`Shared::wake_proc`):
//!
//! ```text
//!  poller P                                waker W
//!  1. sleeping = true (SeqCst)             1. CAS P.sleeping true -> false
//!  2. in_poll = true (SeqCst)                 (SeqCst), unpark P's thread
//!  3. if !sleeping: poll without waiting   2. if P.in_poll (SeqCst): write
//!     else epoll_pwait2                       the eventfd
//! ```
//!
//! If W reads `in_poll` false, its CAS came before P's step 2, so P's step
//! 3 sees `sleeping` cleared and does not wait; otherwise W writes the
//! eventfd, which ends (or pre-empts) the wait. A stale unpark left on the
//! thread only makes a later futex sleep return early.
//!
//! # Registration lifecycle
//!
//! A socket is registered the first time a task has to wait on it, once,
//! for both directions, edge triggered; the epoll token is the address of
//! its [`IoState`]. When the socket is dropped it is removed from the epoll
//! it is in (before its descriptor closes), and its `IoState` is *retired*
//! there: kept alive until the end of that reactor's next poll, because an
//! event already fetched by a wait in progress may still name it. A poll
//! that starts after the removal cannot return the socket's events, and
//! retired states are freed only at the end of a poll, under the role:
//!
//! ```text
//!  socket S dropped (any thread)          poller of S's reactor
//!  1. epoll_ctl(DEL, fd)                  1. take the role; epoll_pwait2
//!  2. push S's state on `retired`         2. deliver each event to its state
//!  3. close fd (the number may be reused) 3. free `retired`, give up the role
//! ```
//!
//! An event fetched before step 1 is delivered to S's own state, which is
//! alive until the poller's step 3 at the earliest, and wakes only S's
//! waiters: a later owner of the same fd number has a state of its own and
//! a token of its own, so a stale event never wakes it.
//!
//! # Moving a registration
//!
//! A registration records the reactor it is in (`at`). When a task bound to
//! core Processer Q waits on it, runs on Q, and the socket is in another
//! reactor P, the registration moves to Q (`Registration::follow`): a
//! socket handed to a task on another Processer, a listener whose accept
//! loop was bound elsewhere. It does not move while tasks wait on it (a
//! listener with an acceptor per Processer, a stream read by one task and
//! written by another: the ones already waiting were there first), nor for
//! a migratable task (it runs wherever its readiness is polled, like an
//! unbound task); their wake-ups cross, counted. The move, under the
//! registration's `moving` lock (which the removal takes too):
//!
//! ```text
//!  mover (on Q, its task about to wait)    P's poller (any thread)
//!  1. epoll_ctl(ADD, fd) to Q's epoll,     1. epoll_pwait2 on P's epoll
//!     same token (the same IoState)        2. deliver each event to its state
//!  2. epoll_ctl(DEL, fd) from P's epoll    3. free P's `retired`
//!  3. push the state on P's `retired`
//!  4. at = Q
//! ```
//!
//! No readiness is lost: between 1 and 2 the descriptor is in both epolls
//! (an event then may be delivered twice, to the same state: one more tick,
//! which only makes a task try its syscall once more); an `ADD` reports at
//! once what the socket has ready (epoll polls the file when it inserts
//! it), so an edge that came before step 1 and that P's poll had not
//! fetched by step 2 is reported by Q's; and one P's poll fetched before
//! step 2 lands on the same `IoState`, which P's `retired` keeps alive
//! until P's poll in progress has ended (the move's retirement in P is the
//! removal's, and the state's last reference goes only when every reactor
//! it was retired in has polled since: each holds a count). The task then
//! parks on the state exactly as before the move (the waiter protocol of
//! `readiness.rs` does not depend on who delivers). Should the `ADD` fail,
//! the registration stays where it is and the wake-up crosses.
//!
//! A socket dropped on one thread while a poller of another reactor is
//! delivering to its state: the state is retired in the reactor it is in,
//! and was retired in every reactor it left, so it outlives each poll that
//! may name it.
//!
//! # Rings
//!
//! Under the io_uring driver each core Processer's ring descriptor is
//! registered in that Processer's own reactor (`uring.rs`): a ring is
//! readable when completions wait in it, so a Processer asleep (on its
//! futex, or in this very wait) is woken when one of its tasks' operations
//! completes. Its token is the
//! address of its [`RingWaker`] with the low bit set (an `IoState` address
//! is never odd); wakers live as long as the reactor (`rings`), so a late
//! event never names a freed one.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::sys::lock::{Mutex, MutexGuard};

use super::epoll::{Epoll, Events, WAKE_TOKEN};
use super::readiness::{from_epoll, Interest, IoState, ReadyEvent, TimedOut};
use super::uring::RingWaker;
use crate::runtime::context;
use crate::runtime::task::{Runnable, TaskHeader};

/// Events fetched per wait.
const EVENTS: usize = 1024;

/// The low bit of a ring's token (module docs, "Rings").
const RING_TAG: u64 = 1;

/// A busy Processer polls (without waiting) when nobody has for this long.
pub(crate) const BUSY_POLL: Duration = Duration::from_micros(50);

/// One core Processer's reactor (module docs).
pub(crate) struct Reactor {
    epoll: Epoll,
    /// The poller role: held by whoever polls epoll.
    poller: Mutex<Events>,
    /// States of deregistered sockets, freed at the end of the next poll.
    retired: Mutex<Vec<Arc<IoState>>>,
    /// Sockets registered now.
    registered: AtomicUsize,
    /// Tasks parked on a socket in this reactor that can run elsewhere
    /// than on its Processer (bound to another one, or not bound): the
    /// Dispatcher polls the reactor of a blocked Processer only while some
    /// wait (module docs, "Who polls"). Relaxed: a hint, with a net.
    foreign: AtomicUsize,
    /// When a poll last ended, in nanoseconds since `epoch`.
    last_poll: AtomicU64,
    /// The role's holder is in a blocking wait (a sleeping Processer), not
    /// a quick look (a busy Processer, the Dispatcher). Relaxed: a hint for
    /// a Processer deciding how long to sleep without the role.
    blocking: AtomicBool,
    epoch: Instant,
    /// The wakers of the rings ever registered (module docs, "Rings"):
    /// one per core Processer that made a ring, kept until the reactor goes.
    rings: Mutex<Vec<Arc<RingWaker>>>,
}

impl Reactor {
    pub(crate) fn new() -> io::Result<Reactor> {
        Ok(Reactor {
            epoll: Epoll::new()?,
            poller: Mutex::new(Events::with_capacity(EVENTS)),
            retired: Mutex::new(Vec::new()),
            registered: AtomicUsize::new(0),
            foreign: AtomicUsize::new(0),
            last_poll: AtomicU64::new(0),
            blocking: AtomicBool::new(false),
            epoch: Instant::now(),
            rings: Mutex::new(Vec::new()),
        })
    }

    /// Whether any socket is registered (otherwise there is nothing to poll
    /// for).
    pub(crate) fn has_sources(&self) -> bool {
        self.registered.load(Ordering::Relaxed) != 0
    }

    /// Whether nobody has polled for `d`.
    pub(crate) fn polled_before(&self, d: Duration) -> bool {
        let now = self.epoch.elapsed().as_nanos() as u64;
        now.saturating_sub(self.last_poll.load(Ordering::Relaxed)) >= d.as_nanos() as u64
    }

    /// Whether tasks that could run on another thread than this reactor's
    /// Processer wait on its sockets (a hint).
    pub(crate) fn has_foreign_waiters(&self) -> bool {
        self.foreign.load(Ordering::Relaxed) != 0
    }

    /// Whether a Processer is waiting in the reactor (holding the role for
    /// a blocking wait).
    pub(crate) fn has_blocking_poller(&self) -> bool {
        self.blocking.load(Ordering::Relaxed)
    }

    /// Takes the poller role, if nobody holds it.
    pub(crate) fn try_poll(&self) -> Option<Poller<'_>> {
        Some(Poller {
            reactor: self,
            events: self.poller.try_lock()?,
        })
    }

    /// Ends a wait in progress (or makes the next one return at once).
    pub(crate) fn wake(&self) {
        self.epoll.wake();
    }

    /// Registers a Processer's ring descriptor (module docs, "Rings"); it
    /// counts as a source, so idle core Processers wait in this reactor.
    pub(crate) fn register_ring(&self, fd: RawFd, waker: Arc<RingWaker>) -> io::Result<()> {
        let token = Arc::as_ptr(&waker) as u64 | RING_TAG;
        self.rings.lock().push(waker);
        self.epoll.add(fd, token)?;
        self.registered.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Removes a ring registered with [`register_ring`](Self::register_ring)
    /// (before its descriptor closes). Its waker stays until the reactor
    /// goes: an event fetched already may still name it.
    pub(crate) fn deregister_ring(&self, fd: RawFd) {
        if self.epoll.delete(fd).is_ok() {
            self.registered.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Adds `fd` with `state`'s address as its token.
    fn add(&self, fd: RawFd, state: &Arc<IoState>) -> io::Result<()> {
        self.epoll.add(fd, Arc::as_ptr(state) as u64)?;
        self.registered.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Removes `fd` (whose token is `state`'s address) and retires `state`
    /// here: it stays alive until the end of this reactor's next poll
    /// (module docs, "Registration lifecycle"), or goes at once when nobody
    /// polls this reactor now.
    fn remove(&self, fd: RawFd, state: &Arc<IoState>) {
        let _ = self.epoll.delete(fd);
        self.registered.fetch_sub(1, Ordering::Relaxed);
        self.retired.lock().push(state.clone());
        // Nobody polling (the role is free): no event fetched before the
        // removal can be pending delivery, so retired states can go now
        // rather than at the next poll, which may be long in coming.
        drop(self.try_poll());
    }
}

/// The reactors of one scheduler: one per core Processer, indexed like
/// them (module docs, "A reactor per core Processer").
pub(crate) struct Reactors {
    list: Box<[Arc<Reactor>]>,
}

impl Reactors {
    /// `n` reactors (at least one), each with its epoll and eventfd.
    pub(crate) fn new(n: usize) -> io::Result<Reactors> {
        let list = (0..n.max(1))
            .map(|_| Reactor::new().map(Arc::new))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Reactors {
            list: list.into_boxed_slice(),
        })
    }

    /// The reactor of core Processer `i`.
    pub(crate) fn get(&self, i: usize) -> Option<&Arc<Reactor>> {
        self.list.get(i)
    }

    /// The reactor a registration made outside a core Processer goes to:
    /// the one of the task's home if that is a core Processer, else one
    /// chosen by descriptor number, so that such sockets spread.
    fn outside(&self, home: Option<usize>, fd: RawFd) -> usize {
        home.filter(|&h| h < self.list.len())
            .unwrap_or(fd.unsigned_abs() as usize % self.list.len())
    }

    fn register(self: &Arc<Self>, at: usize, fd: RawFd) -> io::Result<Registration> {
        let state = Arc::new(IoState::new());
        self.list[at].add(fd, &state)?;
        Ok(Registration {
            state,
            reactors: Arc::downgrade(self),
            at: AtomicUsize::new(at),
            moving: Mutex::new(()),
            fd,
            gone: AtomicBool::new(false),
        })
    }
}

/// The poller role, held; dropping it frees the retired states and gives
/// the role up.
pub(crate) struct Poller<'a> {
    reactor: &'a Reactor,
    events: MutexGuard<'a, Events>,
}

impl Poller<'_> {
    /// Waits up to `timeout` (`None`: without limit; zero: not at all) and
    /// delivers the events; the tasks they wake are pushed on `woken`.
    /// Returns how many socket events were delivered.
    pub(crate) fn poll(&mut self, timeout: Option<Duration>, woken: &mut Vec<Runnable>) -> usize {
        let r = self.reactor;
        let blocking = timeout != Some(Duration::ZERO);
        if blocking {
            r.blocking.store(true, Ordering::Relaxed);
        }
        let n = r.epoll.wait(&mut self.events, timeout).unwrap_or(0);
        if blocking {
            r.blocking.store(false, Ordering::Relaxed);
        }
        r.last_poll
            .store(r.epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if n == 0 {
            return 0;
        }
        let mut delivered = 0;
        for (token, bits) in self.events.iter() {
            if token == WAKE_TOKEN {
                r.epoll.drain_wake();
                continue;
            }
            if token & RING_TAG != 0 {
                // SAFETY: a ring's token is the address of its waker, which
                // `rings` keeps alive as long as this reactor.
                let waker = unsafe { &*((token & !RING_TAG) as *const RingWaker) };
                waker.wake();
                continue;
            }
            // SAFETY: the token is the address of a registered IoState,
            // which stays alive until the end of a poll that started after
            // it was deregistered (module docs): this poll is not one.
            let state = unsafe { &*(token as *const IoState) };
            state.deliver(from_epoll(bits), woken);
            delivered += 1;
        }
        delivered
    }
}

impl Drop for Poller<'_> {
    fn drop(&mut self) {
        // Every event fetched under this role has been delivered: states
        // deregistered before now can go (module docs).
        let retired = std::mem::take(&mut *self.reactor.retired.lock());
        drop(retired);
    }
}

/// How a descriptor registered by another owner is found: the `hooks`
/// feature registers a std socket the first time a task waits on it
/// (`hooks/fdctx.rs`), and a `gofer::net` socket later made from the same
/// descriptor must share that registration (epoll takes a descriptor only
/// once). The hooks sit above this layer, so they hand their lookup in
/// ([`set_shared_lookup`]) before they make their first registration;
/// [`shared_registration`] asks it. A descriptor the hooks registered was
/// registered after the lookup was set, and the `EEXIST` that sends a
/// socket here comes from that registration, so the lookup is always set
/// by then (the kernel's epoll lock orders the two `epoll_ctl` calls).
static SHARED_LOOKUP: std::sync::OnceLock<SharedLookup> = std::sync::OnceLock::new();

/// Finds the registration another owner made for a descriptor.
type SharedLookup = fn(RawFd) -> Option<Arc<Registration>>;

/// Hands in the lookup of registrations made by another owner of a
/// descriptor (see [`SHARED_LOOKUP`]). Only the first call counts.
#[cfg(feature = "hooks")]
pub(crate) fn set_shared_lookup(lookup: SharedLookup) {
    if SHARED_LOOKUP.get().is_none() {
        let _ = SHARED_LOOKUP.set(lookup);
    }
}

/// The registration another owner made for `fd`, if any.
pub(crate) fn shared_registration(fd: RawFd) -> Option<Arc<Registration>> {
    SHARED_LOOKUP.get().and_then(|lookup| lookup(fd))
}

/// A socket's registration with one of its scheduler's reactors; it moves
/// to the reactor of the Processer its waiting task is bound to (module
/// docs, "Moving a registration"). Dropping it deregisters.
pub(crate) struct Registration {
    state: Arc<IoState>,
    /// The scheduler's reactors. The `Weak` keeps their allocation, so its
    /// address cannot be taken by another scheduler's while this lives.
    reactors: Weak<Reactors>,
    /// The index of the reactor the descriptor is in now. Written only under
    /// `moving`; read Relaxed outside it as a hint (whether to move), and
    /// under it where it matters (the move, the removal).
    at: AtomicUsize,
    /// Held by a move and by the removal, so that the removal takes the
    /// descriptor out of the reactor it is in.
    moving: Mutex<()>,
    fd: RawFd,
    /// Removed from epoll already ([`deregister`](Self::deregister)): the
    /// descriptor number may belong to someone else now, so no second
    /// removal may touch it.
    gone: AtomicBool,
}

impl Registration {
    /// Registers `fd` with the reactor of the running task's scheduler, or
    /// returns `None` outside a task.
    ///
    /// On a core Processer the socket goes to that Processer's own reactor:
    /// the running thread is awake and polls it. Elsewhere (an extra
    /// Processer, a `block_on` caller) it goes to a core Processer's
    /// reactor ([`Reactors::outside`]), whose owner is woken if it sleeps
    /// on its futex (`Shared::ensure_poller`).
    pub(crate) fn for_current_task(fd: RawFd) -> io::Result<Option<Registration>> {
        let Some(sched) = context::current_scheduler() else {
            return Ok(None);
        };
        let reactors = sched.reactors()?;
        let own = context::current_core_index(&sched);
        let at = match own {
            Some(i) if i < reactors.list.len() => i,
            _ => {
                // Relaxed: a hint (`NO_HOME`, out of range, picks by `fd`).
                let home = context::current_task().map(|t| t.home.load(Ordering::Relaxed));
                reactors.outside(home, fd)
            }
        };
        let reg = reactors.register(at, fd)?;
        if own != Some(at) {
            // The caller is about to wait: the reactor's owner must poll.
            sched.ensure_poller(at, &reactors.list[at]);
        }
        Ok(Some(reg))
    }

    /// The readiness of `interest` now (see `readiness.rs`).
    pub(crate) fn readiness(&self, interest: Interest) -> ReadyEvent {
        self.state.readiness(interest)
    }

    /// After `EAGAIN`: clears what `ev` saw, unless an event came since.
    pub(crate) fn clear(&self, ev: ReadyEvent) {
        self.state.clear(ev)
    }

    /// Waits until `interest` is ready, or until `deadline`
    /// (`ErrorKind::TimedOut`): parks the task through the reactor, or, on a
    /// plain thread (or once the reactor is gone), waits in `poll(2)`.
    ///
    /// A task of another scheduler (the socket was first waited on by a
    /// task elsewhere) waits through its own scheduler's reactor, on a
    /// duplicate of the descriptor ([`wait_once`]): this reactor may have
    /// nobody left to poll it, its scheduler having shut down.
    #[cfg(feature = "hooks")]
    pub(crate) fn wait(&self, interest: Interest, deadline: Option<Instant>) -> io::Result<()> {
        self.wait_as(interest, deadline, false, false)
    }

    /// [`wait`](Self::wait) for gofer's own sockets: a cancelled task
    /// unwinds from it (`runtime/task/cancel.rs`). The hooks use `wait`.
    ///
    /// `ahead`: `deadline` was computed just now from a positive timeout (it
    /// has not passed: the wait reads no clock before it parks).
    pub(crate) fn wait_cancellable(
        &self,
        interest: Interest,
        deadline: Option<Instant>,
        ahead: bool,
    ) -> io::Result<()> {
        self.wait_as(interest, deadline, true, ahead)
    }

    fn wait_as(
        &self,
        interest: Interest,
        deadline: Option<Instant>,
        cancellable: bool,
        ahead: bool,
    ) -> io::Result<()> {
        let Some(task) = context::current_task() else {
            return poll_fd(self.fd, interest, deadline);
        };
        let Some(reactors) = self.home_reactors(&task) else {
            return wait_once(self.fd, interest, deadline, cancellable);
        };
        self.follow(&task, reactors);
        // A waiter its reactor's Processer cannot run is counted there, so
        // that the Dispatcher polls that reactor while its owner is blocked.
        let at = self.at.load(Ordering::Relaxed);
        let _foreign = (task.pin() != Some(at)).then(|| Foreign::enter(&reactors.list[at]));
        self.state
            .wait(&task, interest, deadline, self.fd, cancellable, ahead)
            .map_err(|TimedOut| io::ErrorKind::TimedOut.into())
    }

    /// The reactors of `task`'s scheduler, if this registration is with
    /// them. The `Weak` keeps their allocation, so its address cannot be
    /// taken by another scheduler's while this registration lives.
    fn home_reactors<'a>(&self, task: &'a TaskHeader) -> Option<&'a Arc<Reactors>> {
        task.shared
            .reactors_if_made()
            .filter(|home| std::ptr::eq(Arc::as_ptr(home), self.reactors.as_ptr()))
    }

    /// Before `task` waits: if it is bound (or pinned) to the core
    /// Processer running it and the socket is in another one's reactor,
    /// move the registration here (module docs, "Moving a registration"),
    /// unless tasks wait on it already (they were there first: a listener
    /// with an acceptor per Processer, a stream read by a task and written
    /// by another), in which case the wake-up crosses. Never switches (it
    /// reads the running Processer, a thread-local).
    #[inline(never)]
    fn follow(&self, task: &TaskHeader, reactors: &Reactors) {
        let Some(pin) = task.pin() else {
            return; // migratable: runs wherever its readiness is polled
        };
        if self.at.load(Ordering::Relaxed) == pin || pin >= reactors.list.len() {
            return;
        }
        if context::current_core_index(&task.shared) != Some(pin) {
            return; // not on its Processer (a `block_on` root's pin, an unwind)
        }
        let _g = self.moving.lock();
        let from = self.at.load(Ordering::Relaxed);
        if from == pin || self.gone.load(Ordering::Relaxed) || self.state.has_waiters() {
            return;
        }
        let (old, new) = (&reactors.list[from], &reactors.list[pin]);
        // Into the new reactor first: the descriptor is never in neither,
        // and epoll reports at once what is ready when it is added.
        if new.add(self.fd, &self.state).is_err() {
            return; // stays where it is, delivered across
        }
        old.remove(self.fd, &self.state);
        self.at.store(pin, Ordering::Relaxed);
    }
}

/// A task counted in a reactor's `foreign` for the length of its wait
/// (an unwind out of the wait included).
struct Foreign<'a>(&'a Reactor);

impl<'a> Foreign<'a> {
    fn enter(r: &'a Reactor) -> Foreign<'a> {
        r.foreign.fetch_add(1, Ordering::Relaxed);
        Foreign(r)
    }
}

impl Drop for Foreign<'_> {
    fn drop(&mut self) {
        self.0.foreign.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Waits once for `interest` on `fd`, which the caller keeps open: inside a
/// task, through the reactor of the task's scheduler (the task parks); on a
/// plain thread, in `poll(2)`. A descriptor epoll cannot watch (a regular
/// file) counts as always ready.
///
/// A duplicate of `fd` is registered for the wait and removed after it
/// (`dup`, two `epoll_ctl` calls and a `close`). The duplicate lets any
/// number of such waits, and a socket's own registration, share one
/// descriptor: epoll takes each descriptor number only once.
/// With `cancellable`, a cancelled task unwinds from the wait
/// ([`Registration::wait_cancellable`]).
pub(crate) fn wait_once(
    fd: RawFd,
    interest: Interest,
    deadline: Option<Instant>,
    cancellable: bool,
) -> io::Result<()> {
    if context::current_task_ptr().is_none() {
        return poll_fd(fd, interest, deadline);
    }
    // Without a spare descriptor, try the number itself.
    let dup = match dup_cloexec(fd) {
        Ok(dup) => dup,
        Err(e) if e.raw_os_error() == Some(libc::EBADF) => return Err(e),
        Err(_) => return wait_registered(fd, fd, interest, deadline, cancellable),
    };
    wait_registered(dup.as_raw_fd(), fd, interest, deadline, cancellable)
    // `dup` closes here, after its registration was removed.
}

/// Registers `reg_fd` for the length of one wait. `fd` is what a wait that
/// cannot use the reactor polls instead.
fn wait_registered(
    reg_fd: RawFd,
    fd: RawFd,
    interest: Interest,
    deadline: Option<Instant>,
    cancellable: bool,
) -> io::Result<()> {
    match Registration::for_current_task(reg_fd) {
        // Dropping the registration removes it before `reg_fd` can close
        // (an unwind out of a cancelled wait included).
        Ok(Some(reg)) => reg.wait_as(interest, deadline, cancellable, false),
        Ok(None) => poll_fd(fd, interest, deadline),
        // EPERM: a regular file or directory, always ready.
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(()),
        // EEXIST: the number itself is in this reactor already (only when
        // no duplicate could be made): wait the thread's way.
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => poll_fd(fd, interest, deadline),
        Err(e) => Err(e),
    }
}

/// A close-on-exec duplicate of `fd`.
fn dup_cloexec(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl duplicates a descriptor the caller keeps open for the
    // call; the result is checked and then owned by nobody else.
    unsafe {
        let d = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0);
        if d < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(d))
    }
}

impl Registration {
    /// Removes the descriptor from epoll now, while it still names this
    /// socket (before a `close` the registration does not own), and wakes
    /// every task waiting on it: they see the socket closed. Idempotent; the
    /// drop does nothing more afterwards.
    pub(crate) fn deregister(&self) {
        if self.gone.swap(true, Ordering::AcqRel) {
            return;
        }
        self.state.close();
        if let Some(reactors) = self.reactors.upgrade() {
            // Under `moving`: a move in progress finishes first (and one
            // after this sees `gone`), so the descriptor leaves the reactor
            // it is in.
            let _g = self.moving.lock();
            reactors.list[self.at.load(Ordering::Relaxed)].remove(self.fd, &self.state);
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.deregister();
    }
}

/// Blocks the thread in `poll(2)` until `fd` serves `interest` (or is
/// closed, or failed), or until `deadline` (`ErrorKind::TimedOut`).
pub(crate) fn poll_fd(fd: RawFd, interest: Interest, deadline: Option<Instant>) -> io::Result<()> {
    let events = match interest {
        Interest::Read => libc::POLLIN | libc::POLLRDHUP,
        Interest::Write => libc::POLLOUT,
    };
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int
            }
        };
        let mut p = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the call's duration.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r > 0 {
            return Ok(());
        }
    }
}
