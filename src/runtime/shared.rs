//! A scheduler's shared state ([`Shared`]): its Processer table, task
//! admission, and its lifecycle from build to shutdown.
//!
//! # Lifecycle
//!
//! 1. `build()` validates the configuration and starts `min_threads` core
//!    Processer threads (and the Dispatcher thread when there is something
//!    to watch). A thread the OS refuses to start makes `build()` stop and
//!    join the threads it started and return `ConfigError::ThreadStart`.
//! 2. Tasks are admitted by `spawn`: `alive += 1` before the task is
//!    queued, `alive -= n` when its Processer frees a batch of `n` finished
//!    tasks (at most 16 finished tasks wait for it, and none once the
//!    Processer runs out of work).
//! 3. `shutdown` sets `closing` (spawns from outside the scheduler are now
//!    refused; tasks may still spawn children), waits until `alive == 0`,
//!    then sets `stopped`, wakes every Processer, and joins every thread,
//!    holding `stop_lock` while it joins: a concurrent call waits for it,
//!    so every call returns only once every thread is gone.
//!    A parked task that nobody wakes keeps `alive` above zero: shutdown
//!    waits for it forever, and `shutdown_timeout` reports it. Nothing frees
//!    the stack of an unfinished task.
//! 4. Dropping the last [`Scheduler`] handle without `shutdown` *detaches*:
//!    the threads keep running the remaining tasks and exit on their own
//!    once `alive` reaches zero. Tasks parked forever keep their threads.
//!
//! Admission against shutdown is a Dekker pair, both sides SeqCst:
//!
//! ```text
//!  spawner (outside thread)              shutdown
//!  1. alive += 1                          1. closing = true
//!  2. if closing: alive -= 1, refuse      2. wait until alive == 0
//! ```
//!
//! Either the spawner sees `closing`, or shutdown sees its `alive` count and
//! waits for the task.

use std::io;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::sys::lock::{Condvar, Mutex, RwLock};
use crossbeam_utils::CachePadded;

use super::config::Config;
use super::context;
use super::io::{Reactor, Reactors};
use super::stats::{ProcesserStats, Stats};
use crate::coroutine::stack;
use crate::coroutine::stacks::Stacks;
use crate::error::{ShutdownError, SpawnError};
use crate::runtime::blocking::pool::BlockingPool;
use crate::runtime::dispatcher::{self, DispatchState};
use crate::runtime::processer::idle::Idle;
use crate::runtime::processer::shared::{Kind, ProcesserShared};
use crate::runtime::processer::ProcLocal;
use crate::runtime::task::Runnable;
use crate::runtime::time::timer::Timers;

/// State shared by every Processer, the Dispatcher and the handles.
pub(crate) struct Shared {
    pub(crate) config: Config,
    /// Live Processers, sorted by slot index (copy-on-write: readers clone
    /// the `Arc`). Indices only grow, so a lookup by index is a binary
    /// search ([`find_processer`]).
    procs: RwLock<Table>,
    /// The generation of `procs`: a new value from [`TABLE_GENS`] at every
    /// change, so that a thread can keep its own copy of the table and
    /// refresh it only when it changed (Processers in `ProcLocal`, other
    /// threads pushing tasks in `processer/route.rs`).
    procs_gen: AtomicU64,
    /// Next Processer slot index.
    next_index: AtomicUsize,
    /// Round-robin cursor for pushes with no home (chaos mode's
    /// `push_elsewhere`; a pushing thread starts its own cursor from it).
    pub(crate) rr: AtomicUsize,
    /// Tasks admitted and not yet freed. Alone on its cache line: every
    /// spawn adds to it, and Processers take their freed tasks off it a
    /// batch at a time (`ProcLocal::gc_flush`).
    pub(crate) alive: CachePadded<AtomicUsize>,
    /// Written by spawners only.
    pub(crate) spawned: CachePadded<AtomicU64>,
    /// Written by the Processers that run tasks to their end.
    pub(crate) completed: CachePadded<AtomicU64>,
    /// Idle and searching Processers, and the sleepers stack.
    pub(crate) idle: Idle,
    /// Core + Extra Processer threads alive.
    pub(crate) threads: AtomicUsize,
    pub(crate) threads_started: AtomicU64,
    pub(crate) threads_retired: AtomicU64,
    /// `cross_wakeups` of the Processers that have exited (`stats`).
    cross_wakeups_exited: AtomicU64,
    /// Shutdown requested: spawns from outside are refused.
    closing: AtomicBool,
    /// Shutdown done waiting: Processers exit.
    pub(crate) stopped: AtomicBool,
    /// The last handle was dropped: exit once `alive == 0`.
    pub(crate) detached: AtomicBool,
    done_lock: Mutex<()>,
    done_cv: Condvar,
    /// Held by the call that stops and joins the threads, for as long as it
    /// joins: a concurrent shutdown waits on it, so it too returns only once
    /// every thread has been joined.
    stop_lock: Mutex<()>,
    join_handles: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The stack policy: shared pool, dense arenas, exhaustion record.
    pub(crate) stacks: Stacks,
    /// Deadline queues (one per core Processer) and user timers.
    pub(crate) timers: Timers,
    pub(crate) dispatch: DispatchState,
    /// The IO reactors, one per core Processer, made at the first socket a
    /// task waits on (`runtime/io/reactor.rs`).
    reactors: OnceLock<Arc<Reactors>>,
    reactor_init: Mutex<()>,
    /// Core Processers whose io_uring could not be set up after the build
    /// (their tasks use epoll), and the first error: told by `stats()`.
    ring_failures: Mutex<(usize, Option<String>)>,
    /// The registry of live tasks, for task dumps (`task/live.rs`).
    pub(crate) live: crate::runtime::task::live::Registry,
    /// The stall watcher's thread, if `stall_report` is on
    /// (`runtime/dump/stall.rs`); unparked at shutdown.
    pub(crate) stall_watcher: OnceLock<std::thread::Thread>,
    /// The threads that run `unblock` calls (`blocking/pool.rs`); joined at
    /// shutdown, after the Processers.
    pub(crate) blocking: BlockingPool,
}

impl Shared {
    /// Keeps a thread of the scheduler's to join at shutdown.
    pub(crate) fn adopt_thread(&self, h: std::thread::JoinHandle<()>) {
        self.join_handles.lock().push(h);
    }
}

/// A Processer table: the scheduler's live Processers, sorted by index.
pub(crate) type Table = Arc<Vec<Arc<ProcesserShared>>>;

/// The source of Processer-table generations for every scheduler of the
/// process: no two tables, of one scheduler or of two, ever share one, so a
/// thread's cached copy is current exactly when its generation is the
/// scheduler's (a copy of a freed scheduler's table can never pass for a
/// new one's, even at the same address).
static TABLE_GENS: AtomicU64 = AtomicU64::new(1);

fn next_table_gen() -> u64 {
    TABLE_GENS.fetch_add(1, Ordering::Relaxed)
}

/// Every scheduler of the process, for `gofer::debug::dump` (weak: a
/// scheduler's last handle frees it as before).
static SCHEDULERS: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

fn register_scheduler(s: &Arc<Shared>) {
    let mut all = SCHEDULERS.lock();
    all.retain(|w| w.strong_count() > 0);
    all.push(Arc::downgrade(s));
}

/// Every scheduler of the process that is still alive.
pub(crate) fn all_schedulers() -> Vec<Arc<Shared>> {
    SCHEDULERS.lock().iter().filter_map(Weak::upgrade).collect()
}

impl Shared {
    pub(crate) fn new(config: Config) -> Arc<Shared> {
        let timers = Timers::new(config.min_threads);
        let stacks = Stacks::new(config.stack_size, config.stack_cache, config.dense_stacks);
        let blocking = BlockingPool::new(
            config.blocking_threads,
            config.blocking_idle_timeout,
            format!("{}-blocking", config.name),
        );
        let shared = Arc::new(Shared {
            config,
            procs: RwLock::new(Arc::new(Vec::new())),
            procs_gen: AtomicU64::new(next_table_gen()),
            next_index: AtomicUsize::new(0),
            rr: AtomicUsize::new(0),
            alive: CachePadded::new(AtomicUsize::new(0)),
            spawned: CachePadded::new(AtomicU64::new(0)),
            completed: CachePadded::new(AtomicU64::new(0)),
            idle: Idle::new(),
            threads: AtomicUsize::new(0),
            threads_started: AtomicU64::new(0),
            threads_retired: AtomicU64::new(0),
            cross_wakeups_exited: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            detached: AtomicBool::new(false),
            done_lock: Mutex::new(()),
            done_cv: Condvar::new(),
            stop_lock: Mutex::new(()),
            join_handles: Mutex::new(Vec::new()),
            stacks,
            timers,
            dispatch: DispatchState::default(),
            reactors: OnceLock::new(),
            reactor_init: Mutex::new(()),
            ring_failures: Mutex::new((0, None)),
            live: crate::runtime::task::live::Registry::new(),
            stall_watcher: OnceLock::new(),
            blocking,
        });
        register_scheduler(&shared);
        shared
    }

    /// The IO reactors (one per core Processer), made on first use.
    pub(crate) fn reactors(&self) -> io::Result<&Arc<Reactors>> {
        if let Some(r) = self.reactors.get() {
            return Ok(r);
        }
        let _g = self.reactor_init.lock();
        if let Some(r) = self.reactors.get() {
            return Ok(r);
        }
        let r = Arc::new(Reactors::new(self.config.min_threads)?);
        Ok(self.reactors.get_or_init(|| r))
    }

    /// A core Processer's io_uring could not be set up (`e`): its tasks
    /// use epoll, and `stats()` says so.
    pub(crate) fn note_ring_failure(&self, e: &io::Error) {
        let mut f = self.ring_failures.lock();
        f.0 += 1;
        f.1.get_or_insert_with(|| e.to_string());
    }

    /// Why `io_driver` runs, with the rings that failed since the build.
    fn io_driver_reason(&self) -> String {
        let f = self.ring_failures.lock();
        match &f.1 {
            None => self.config.io_driver_reason.clone(),
            Some(first) => format!(
                "{}; but {} Processer(s) could not set up their io_uring ({first}): \
                 their tasks use epoll",
                self.config.io_driver_reason, f.0
            ),
        }
    }

    /// The IO reactors, if they were made.
    pub(crate) fn reactors_if_made(&self) -> Option<&Arc<Reactors>> {
        self.reactors.get()
    }

    /// The reactor of core Processer `index`, if the reactors were made
    /// (`None` for any other Processer).
    pub(crate) fn reactor_of(&self, index: usize) -> Option<&Arc<Reactor>> {
        self.reactors.get().and_then(|r| r.get(index))
    }

    /// The reactor of core Processer `index` if it has sockets (or a ring)
    /// to poll for.
    pub(crate) fn reactor_with_sources(&self, index: usize) -> Option<&Arc<Reactor>> {
        self.reactor_of(index).filter(|r| r.has_sources())
    }

    /// A socket was just registered with `reactor`, core Processer `at`'s,
    /// by a thread other than that Processer: make sure its owner will poll
    /// it, so that the task about to park on the socket wakes.
    ///
    /// A core Processer waits in its own reactor when it sleeps, but only if
    /// that had something to poll when it went to sleep; otherwise it sleeps
    /// on its futex, and would sleep on after this registration while the
    /// waiting task (a `block_on` caller's root, a task on an extra
    /// Processer) parks: nothing would poll. So:
    ///
    /// ```text
    ///  registering thread T                    core Processer P going to sleep
    ///  1. P's reactor: registered += 1         1. sleeping = true (SeqCst)
    ///  2. fence (SeqCst)                       2. fence (SeqCst)
    ///  3. a blocking poller is in it: done     3. read its reactor's registered:
    ///  4. P is awake: done (it polls while        if any, take the role (or,
    ///     busy, and waits in it when it           held for a quick look, sleep
    ///     sleeps)                                 briefly and come back for it)
    ///  5. else wake P
    /// ```
    ///
    /// With both fences SeqCst, either T's step 4 sees P's `sleeping`, or
    /// P's step 3 sees the registration. P woken at step 5 finds nothing to
    /// run, goes back to sleep and waits in its reactor. While P runs tasks
    /// it polls every [`BUSY_POLL`](super::io::BUSY_POLL), and if it is
    /// blocked, the Dispatcher (awake while any Processer runs) polls its
    /// reactor each cycle. A registration made on P itself needs none of
    /// this (P is awake, running the task).
    pub(crate) fn ensure_poller(&self, at: usize, reactor: &Reactor) {
        fence(Ordering::SeqCst);
        if reactor.has_blocking_poller() {
            return;
        }
        let procs = self.processers_snapshot();
        if let Some(p) = find_processer(&procs, at).filter(|p| p.kind == Kind::Core) {
            // Relaxed after the fence: see the protocol above.
            if p.sleeping.load(Ordering::Relaxed) {
                self.wake_proc(p);
            }
        }
    }

    /// The live Processers, sorted by slot index.
    pub(crate) fn processers_snapshot(&self) -> Table {
        self.procs.read().clone()
    }

    /// The table and its generation, as one consistent pair (both change
    /// under the write lock).
    pub(crate) fn processers_snapshot_with_gen(&self) -> (u64, Table) {
        let table = self.procs.read();
        (self.procs_gen.load(Ordering::Relaxed), table.clone())
    }

    /// The table's generation: it changes whenever the table does. Relaxed:
    /// a reader that sees an old value keeps an older table a little longer,
    /// as if it had taken its snapshot a moment earlier. Thieves use it as a
    /// list of victims; pushers (`processer/route.rs`) route with it, where a retired
    /// target is re-routed and a Processer missing from it is only not
    /// chosen yet.
    pub(crate) fn processers_gen(&self) -> u64 {
        self.procs_gen.load(Ordering::Relaxed)
    }

    pub(crate) fn register(&self, p: Arc<ProcesserShared>) {
        {
            let mut w = self.procs.write();
            let mut v = Vec::with_capacity(w.len() + 1);
            // Indices come from a counter, but two threads may register out
            // of order: insert in place to keep the table sorted.
            let at = w.partition_point(|q| q.index < p.index);
            v.extend_from_slice(&w[..at]);
            v.push(p);
            v.extend_from_slice(&w[at..]);
            *w = Arc::new(v);
            self.procs_gen.store(next_table_gen(), Ordering::Relaxed);
        }
        self.idle.proc_added();
        // A new Processer is awake: the Dispatcher must watch it.
        dispatcher::processer_awake(self);
    }

    pub(crate) fn unregister(&self, p: &Arc<ProcesserShared>) {
        {
            let mut w = self.procs.write();
            let Ok(at) = w.binary_search_by_key(&p.index, |q| q.index) else {
                return;
            };
            let mut v = Vec::with_capacity(w.len() - 1);
            v.extend_from_slice(&w[..at]);
            v.extend_from_slice(&w[at + 1..]);
            *w = Arc::new(v);
            self.procs_gen.store(next_table_gen(), Ordering::Relaxed);
        }
        self.idle.proc_removed();
        self.idle.remove(p);
    }

    /// Starts one Processer thread of the given kind.
    pub(crate) fn start_processer(self: &Arc<Self>, kind: Kind) -> io::Result<()> {
        let index = self.next_index.fetch_add(1, Ordering::Relaxed);
        let (p, worker) = crate::runtime::processer::shared::new_processer(index, kind);
        let me = self.clone();
        let p2 = p.clone();
        self.threads.fetch_add(1, Ordering::SeqCst);
        self.register(p.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("{}-{}", self.config.name, index))
            .spawn(move || {
                crate::runtime::processer::shared::bind_thread(&p2);
                crate::runtime::processer::shared::tight_timer_slack();
                // Room for the blocked-call backtrace handler to walk on
                // (`runtime/dump/blocked_call.rs`), for the thread's life.
                let alt = crate::runtime::dump::blocked_call::AltStack::install();
                let local = ProcLocal::new(p2.clone(), me.clone(), worker);
                local.run(None);
                drop(local);
                drop(alt);
                me.processer_exited(&p2);
            });
        match spawned {
            Ok(h) => {
                self.threads_started.fetch_add(1, Ordering::Relaxed);
                let mut hs = self.join_handles.lock();
                // Retired extra threads have exited; forget their handles.
                hs.retain(|h| !h.is_finished());
                hs.push(h);
                Ok(())
            }
            Err(e) => {
                // The Processer was visible (registered) before its thread
                // failed to start: retire it like a leaving one, so that
                // anything pushed to it meanwhile is re-routed (see push_to).
                p.retired.store(true, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                self.unregister(&p);
                self.threads.fetch_sub(1, Ordering::SeqCst);
                for t in crate::runtime::processer::shared::drain_retired(&p) {
                    self.push_remote(t);
                }
                Err(e)
            }
        }
    }

    pub(crate) fn processer_exited(&self, p: &Arc<ProcesserShared>) {
        self.unregister(p);
        // Unregistered first: `stats` sums the table's counts and this one,
        // so a count is read twice at worst for a moment, never lost.
        self.cross_wakeups_exited
            .fetch_add(p.cross_wakeups.load(Ordering::Relaxed), Ordering::Relaxed);
        if p.kind == Kind::Extra {
            self.threads_retired.fetch_add(1, Ordering::Relaxed);
        }
        let left = self.threads.fetch_sub(1, Ordering::SeqCst) - 1;
        if left == 0 && self.detached.load(Ordering::SeqCst) {
            self.timers.clear();
        }
    }

    /// Validates options and admits a task: returns its Runnable, not yet
    /// queued. `inside`: the spawner runs in this scheduler (allowed while
    /// closing).
    ///
    /// `make` builds the task's cell (the task layer's `new_task`) and
    /// returns its Runnable with whatever else it made (the join handle).
    /// Generic rather than a `dyn` callback, so that the whole spawn path
    /// compiles into one piece per closure type.
    #[inline]
    pub(crate) fn admit<R>(
        self: &Arc<Self>,
        name: Option<Box<str>>,
        stack_size: Option<usize>,
        pin: Option<usize>,
        make: impl FnOnce(Arc<Shared>, Option<Box<str>>, usize, Option<usize>) -> (Runnable, R),
        local: Option<*const ProcLocal>,
    ) -> Result<(Runnable, R), SpawnError> {
        let inside = local.is_some();
        let stack_size = match stack_size {
            Some(s) if !stack::valid_stack_size(s) => {
                return Err(SpawnError::StackSize { requested: s })
            }
            Some(s) => stack::round_to_pages(s),
            None => self.config.stack_size,
        };
        if self.stacks.exhausted() {
            self.stacks
                .probe()
                .map_err(|source| SpawnError::StackExhausted {
                    live_stacks: stack::live_stacks(),
                    source,
                })?;
        }
        if self.stopped.load(Ordering::SeqCst) {
            return Err(SpawnError::Shutdown);
        }
        self.alive.fetch_add(1, Ordering::SeqCst);
        if !inside && self.closing.load(Ordering::SeqCst) {
            self.task_finished();
            return Err(SpawnError::Shutdown);
        }
        self.spawned.fetch_add(1, Ordering::Relaxed);
        let (r, made) = make(self.clone(), name, stack_size, pin);
        context::register_live(self, &r, local);
        Ok((r, made))
    }

    /// Spawns a task: the one path behind `go!`, `Builder`, `spawn` and
    /// user timers. Returns what `make` made besides the task (see
    /// [`admit`](Self::admit)).
    #[inline]
    pub(crate) fn spawn<R>(
        self: &Arc<Self>,
        name: Option<Box<str>>,
        stack_size: Option<usize>,
        pin: Option<usize>,
        make: impl FnOnce(Arc<Shared>, Option<Box<str>>, usize, Option<usize>) -> (Runnable, R),
    ) -> Result<R, SpawnError> {
        if let Some(requested) = pin {
            let core = self.config.min_threads;
            if requested >= core {
                return Err(SpawnError::InvalidPin { requested, core });
            }
        }
        let local = context::local_of(self);
        let (r, made) = self.admit(name, stack_size, pin, make, local)?;
        context::schedule(r);
        Ok(made)
    }

    /// Runs a `block_on` root task on the calling thread, which serves as a
    /// temporary Processer (kind `Caller`) running that task and nothing
    /// else, until `done` says of what `make` made besides the task (its
    /// join handle) that the task finished; returns that.
    pub(crate) fn run_caller<R>(
        self: &Arc<Self>,
        name: Option<Box<str>>,
        make: impl FnOnce(Arc<Shared>, Option<Box<str>>, usize, Option<usize>) -> (Runnable, R),
        done: impl Fn(&R) -> bool,
    ) -> Result<R, SpawnError> {
        let index = self.next_index.fetch_add(1, Ordering::Relaxed);
        let (p, worker) = crate::runtime::processer::shared::new_processer(index, Kind::Caller);
        crate::runtime::processer::shared::bind_thread(&p);
        let local = ProcLocal::new(p.clone(), self.clone(), worker);
        let (root, made) = self.admit(name, None, Some(index), make, None)?;
        self.register(p.clone());
        local.push_initial(root);
        local.run(Some(&|| done(&made)));
        self.unregister(&p);
        Ok(made)
    }

    /// Counts one more alive unit that is not a task yet (a pending user
    /// timer), under the same admission rule as spawns from outside.
    pub(crate) fn hold(&self) -> Result<(), SpawnError> {
        if self.stopped.load(Ordering::SeqCst) {
            return Err(SpawnError::Shutdown);
        }
        self.alive.fetch_add(1, Ordering::SeqCst);
        if self.closing.load(Ordering::SeqCst) {
            self.task_finished();
            return Err(SpawnError::Shutdown);
        }
        Ok(())
    }

    /// A task left its stack for good (or never ran): `alive -= 1`, and
    /// wake whoever waits for zero. (`completed` was counted when its result
    /// was published.)
    pub(crate) fn task_finished(&self) {
        self.tasks_finished(1);
    }

    /// [`task_finished`](Self::task_finished) for `n` tasks at once (a
    /// Processer's batch of finished tasks, as it frees them).
    pub(crate) fn tasks_finished(&self, n: usize) {
        if self.alive.fetch_sub(n, Ordering::AcqRel) == n {
            let _g = self.done_lock.lock();
            self.done_cv.notify_all();
            drop(_g);
            if self.detached.load(Ordering::SeqCst) {
                self.wake_all();
            }
        }
    }

    /// Whether the Processer running `local` should leave its loop.
    pub(crate) fn should_exit(&self, local: &ProcLocal) -> bool {
        if self.stopped.load(Ordering::Acquire) {
            return true;
        }
        if self.detached.load(Ordering::SeqCst) && self.alive.load(Ordering::SeqCst) == 0 {
            return true;
        }
        if local.p.kind == Kind::Extra && !local.holds_tasks() {
            if let Some(since) = local.idle_since.get() {
                return since.elapsed() >= self.config.idle_thread_timeout;
            }
        }
        false
    }

    /// How long an extra Processer may sleep before it retires.
    pub(crate) fn retire_timeout(&self, local: &ProcLocal) -> Option<Duration> {
        match (local.p.kind, local.idle_since.get()) {
            (Kind::Extra, Some(since)) if !local.holds_tasks() => Some(
                self.config
                    .idle_thread_timeout
                    .saturating_sub(since.elapsed())
                    .max(Duration::from_millis(1)),
            ),
            _ => None,
        }
    }

    pub(crate) fn detach(&self) {
        self.detached.store(true, Ordering::SeqCst);
        self.wake_all();
    }

    /// `Err(FromOwnTask)` when the caller is something a shutdown of this
    /// scheduler would wait for, so that it would wait for itself: a task
    /// of the scheduler, or a call such a task handed to the scheduler's
    /// blocking pool (`unblock`: the task stays alive, parked, until the
    /// call returns).
    pub(crate) fn refuse_own_caller(&self) -> Result<(), ShutdownError> {
        let in_own_task = context::current_task_ptr().is_some() && context::on_scheduler(self);
        if in_own_task || self.blocking.runs_job_on_this_thread() {
            return Err(ShutdownError::FromOwnTask);
        }
        Ok(())
    }

    pub(crate) fn shutdown(&self, timeout: Option<Duration>) -> Result<(), ShutdownError> {
        self.refuse_own_caller()?;
        let start = Instant::now();
        // A timeout past what an Instant can hold is no deadline at all.
        let deadline = timeout.and_then(|t| start.checked_add(t));
        let timed_out = || ShutdownError::TimedOut {
            waited: start.elapsed(),
            alive: self.alive.load(Ordering::SeqCst),
        };
        self.closing.store(true, Ordering::SeqCst);
        // Pending after/every timers would hold `alive` up: cancel them.
        self.cancel_user_timers();
        {
            let mut g = self.done_lock.lock();
            while self.alive.load(Ordering::SeqCst) != 0 {
                match deadline {
                    None => self.done_cv.wait(&mut g),
                    Some(deadline) => {
                        if self.done_cv.wait_until(&mut g, deadline).timed_out()
                            && self.alive.load(Ordering::SeqCst) != 0
                        {
                            return Err(timed_out());
                        }
                    }
                }
            }
        }
        // Another call may be joining the threads: wait for it (within the
        // deadline), then find nothing left to join.
        let joining = if context::on_scheduler(self) {
            // A Processer thread of this scheduler outside any task (a
            // destructor its loop runs) cannot wait to be joined itself.
            match self.stop_lock.try_lock() {
                Some(g) => g,
                None => return Ok(()),
            }
        } else {
            match deadline {
                None => self.stop_lock.lock(),
                Some(deadline) => match self.stop_lock.try_lock_until(deadline) {
                    Some(g) => g,
                    None => return Err(timed_out()),
                },
            }
        };
        self.stop_threads_locked();
        drop(joining);
        Ok(())
    }

    /// Stops and joins every thread of the scheduler.
    pub(crate) fn stop_threads(&self) {
        let _joining = self.stop_lock.lock();
        self.stop_threads_locked();
    }

    /// [`stop_threads`](Self::stop_threads), with `stop_lock` held by the
    /// caller for the whole time, so that a concurrent caller cannot return
    /// while threads are still being joined.
    fn stop_threads_locked(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.wake_all();
        if let Some(t) = self.stall_watcher.get() {
            t.unpark();
        }
        let me = std::thread::current().id();
        let join_all = || {
            let handles = std::mem::take(&mut *self.join_handles.lock());
            for h in handles {
                if h.thread().id() != me {
                    let _ = h.join();
                }
            }
        };
        join_all();
        dispatcher::join(self);
        // An extra Processer the Dispatcher started before it saw `stopped`.
        join_all();
        // No task is alive (or none ever ran: a build that failed), so no
        // call is queued or running; the pool's threads exit and are joined.
        self.blocking.shutdown();
        self.timers.clear();
    }

    /// When every Processer thread of the scheduler is marked blocked with
    /// the thread count at `max_threads` (so the Dispatcher can start no
    /// other), and tasks that any free thread could run are queued on
    /// them: how many (most of them not started yet). `None` otherwise,
    /// and always without a Dispatcher (`max_threads` of 1). `block_on`
    /// callers do not count: they run only their own task. Read from
    /// Relaxed hints: a snapshot, as `stats` is.
    pub(crate) fn all_blocked(&self, procs: &[Arc<ProcesserShared>]) -> Option<usize> {
        if self.config.max_threads <= 1
            || self.threads.load(Ordering::Relaxed) < self.config.max_threads
        {
            return None;
        }
        let mut any = false;
        let mut queued = 0;
        for p in procs {
            if p.kind == Kind::Caller || p.retired.load(Ordering::Relaxed) {
                continue;
            }
            if !p.blocked.load(Ordering::Relaxed) {
                return None;
            }
            any = true;
            queued += crate::runtime::dispatcher::rescue::queued_movable(p)
                + p.placed.load(Ordering::Relaxed);
        }
        (any && queued > 0).then_some(queued)
    }

    pub(crate) fn stats(&self) -> Stats {
        let procs = self.processers_snapshot();
        let all_blocked = self.all_blocked(&procs);
        let processers: Vec<ProcesserStats> = procs
            .iter()
            .map(|p| ProcesserStats {
                id: p.index,
                switches: p.switches.load(Ordering::Relaxed),
                direct_switches: p.direct_switches.load(Ordering::Relaxed),
                queued: p.queued(),
                blocked: p.blocked.load(Ordering::Relaxed),
                tasks_behind: if p.blocked.load(Ordering::Relaxed) {
                    p.behind.load(Ordering::Relaxed)
                } else {
                    0
                },
                running: p.running.load(Ordering::Relaxed),
                sleeping: p.sleeping.load(Ordering::Relaxed),
                rescued: p.rescued.load(Ordering::Relaxed),
                parks: p.metrics.parks.load(Ordering::Relaxed),
                yields: p.metrics.yields.load(Ordering::Relaxed),
                steals: p.metrics.steals.load(Ordering::Relaxed),
                stolen_tasks: p.metrics.stolen.load(Ordering::Relaxed),
                next_slot_runs: p.metrics.next_slot_runs.load(Ordering::Relaxed),
                remote_pushes: p.metrics.remote_pushes.load(Ordering::Relaxed),
                reactor_polls: p.metrics.reactor_polls.load(Ordering::Relaxed),
                local_queue_depth: p.stealer.len()
                    + p.pinned_local_len.load(Ordering::Relaxed)
                    + usize::from(p.runnext.is_occupied()),
                remote_queue_depth: p.new.len() + p.pinned.len(),
                pinned_queue_depth: p.runnable_pinned(),
                busy: p.metrics.busy(),
                blocked_detections: p.metrics.blocked_detections.load(Ordering::Relaxed),
                cross_wakeups: p.cross_wakeups.load(Ordering::Relaxed),
                kind: match p.kind {
                    Kind::Core => "core",
                    Kind::Extra => "extra",
                    Kind::Caller => "caller",
                },
            })
            .collect();
        let d = &self.dispatch;
        Stats {
            threads: self.threads.load(Ordering::Relaxed),
            spawned: self.spawned.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            alive: self.alive.load(Ordering::Relaxed),
            blocked: processers.iter().filter(|p| p.blocked).count(),
            blocked_detections: d.detections.load(Ordering::Relaxed),
            tasks_behind_blocked: processers.iter().map(|p| p.tasks_behind).sum(),
            blocked_with_tasks_behind: d.blocked_with_behind.load(Ordering::Relaxed),
            all_blocked: all_blocked.is_some(),
            tasks_queued_all_blocked: all_blocked.unwrap_or(0),
            tasks_rescued: d.rescued.load(Ordering::Relaxed),
            cross_wakeups: self.cross_wakeups_exited.load(Ordering::Relaxed)
                + processers.iter().map(|p| p.cross_wakeups).sum::<u64>(),
            tasks_moved_again: d.moved_again.load(Ordering::Relaxed),
            threads_started: self.threads_started.load(Ordering::Relaxed),
            threads_retired: self.threads_retired.load(Ordering::Relaxed),
            live_stacks: stack::live_stacks(),
            timers: self.timers.pending(),
            blocking_busy: self.blocking.busy(),
            blocking_queued: self.blocking.queued(),
            blocking_threads: self.blocking.threads(),
            io_driver: self.config.io_driver,
            io_driver_reason: self.io_driver_reason(),
            processers,
        }
    }
}

/// The Processer of slot `index` in a table sorted by index (see
/// `Shared::procs`), if it is there.
pub(crate) fn find_processer(
    procs: &[Arc<ProcesserShared>],
    index: usize,
) -> Option<&Arc<ProcesserShared>> {
    procs
        .binary_search_by_key(&index, |p| p.index)
        .ok()
        .map(|i| &procs[i])
}
