//! The blocking pool of one scheduler: plain OS threads that run the calls
//! tasks hand off with [`unblock`](crate::unblock) (and so every operation
//! of [`fs`](crate::fs)), while the calling task parks on its own
//! Processer.
//!
//! # What it owns
//!
//! A queue of [`Job`]s, the threads that run them, and three counters for
//! `Stats` (threads busy, jobs queued, threads alive). It never runs task
//! code: a job is a call with no coroutine of its own, and a pool thread is
//! no Processer (a task it wakes goes back to its own Processer).
//!
//! # Invariants
//!
//! 1. A job accepted by [`BlockingPool::submit`] runs exactly once, on a
//!    pool thread; a job refused (`Err`) never runs here and goes back to
//!    its caller. Shutdown does not drop accepted jobs: the threads run the
//!    queue empty before they exit.
//! 2. Threads grow on demand, up to `blocking_threads`, and only the
//!    pool's *spawner* thread starts them (see "Growth" below): a
//!    submitter, which runs on a Processer, never creates a thread (beyond
//!    the spawner itself, once, by the first call that needs a thread).
//!    Beyond the cap a job waits in the queue. A thread idle for
//!    `blocking_idle_timeout` exits.
//! 3. `idle` counts the threads waiting for work that no submitter has
//!    claimed yet. A submitter claims one (`idle -= 1`, `notify += 1`)
//!    before it signals the condition variable, so two jobs submitted at
//!    once never count on the same idle thread: the second starts a thread
//!    (or queues) instead of waiting behind the first, which matters when
//!    one call waits for another.
//!
//! 4. A thread done with a job spins a moment (`SPIN_ROUNDS`) before it
//!    sleeps, watching `spin_claimed`: a task that makes calls one after
//!    another submits its next one about a wake-up later, and finds the
//!    thread still there, so neither side pays for a sleep and a wake-up.
//!    While it spins the thread counts in `spinning`, and a submitter
//!    claims it like an idle one (`spinning -= 1`, `spin_claims += 1`) with
//!    no signal; after its spin the thread either takes a claim or leaves
//!    `spinning`, so `spinning + spin_claims` is always the number of
//!    threads in their spin, and two submitters never count on the same
//!    one. Several threads may spin at once and all see one claim; the one
//!    that takes the lock first takes it, and the others spin on for the
//!    rest of their rounds (still counted in `spinning`) rather than go to
//!    sleep: otherwise each call would send every other spinning thread to
//!    sleep, and the next calls would each pay for a wake-up.
//!
//! # The races
//!
//! A waiter wakes for a notify, a timeout, a shutdown or spuriously, and
//! cannot tell which from the condition variable. It tells from the state,
//! under the lock:
//!
//! ```text
//!  submitter S                          idle thread W (counted in idle)
//!  1. lock; push the job                1. wait on `work` (lock released)
//!  2. idle > 0: idle -= 1, notify += 1  2. woken or timed out: lock
//!  3. signal `work`; unlock             3. notify > 0: notify -= 1, go run jobs
//!                                       4. else shutdown: idle -= 1, go drain
//!                                       5. else timed out: idle -= 1, exit
//!                                       6. else (spurious): wait again
//! ```
//!
//! A thread that timed out at the moment S claimed it still finds a claim
//! (`notify` above zero) at step 3 and serves the job. Which idle thread takes a claim does
//! not matter; each claim lets exactly one waiter leave. A busy thread may
//! take the job before the claimed one wakes; that one then finds the queue
//! empty and waits again, counted idle anew.
//!
//! # Submitting
//!
//! A submitter is a task on a Processer, and the pool's lock is shared with
//! the pool's threads, any of which the OS may preempt while it holds it.
//! A submitter never puts its Processer's thread to sleep behind such a
//! holder while it has other tasks to run: it tries the lock, and while
//! the lock is held yields to them ([`Inner::lock_for_submit`]).
//!
//! # Growth
//!
//! Starting a thread maps its stack and takes process-wide locks (the
//! address-space lock, glibc's thread-stack cache), and every thread that
//! exists shares the CPUs and the allocator's arenas with the Processers.
//! A burst of calls from a thousand tasks that started a thread per call
//! kept the Processers' threads asleep on those locks, held by threads the
//! OS had preempted, long enough for the Dispatcher to count them blocked.
//! So the pool grows from a thread of its own, the spawner, and only as
//! far as the calls need:
//!
//! - A submitter that finds no idle or spinning thread wakes the spawner
//!   (a futex wake, only if the spawner sleeps), nothing more.
//! - A job is *uncovered* while the queue holds more jobs than there are
//!   claims on idle or spinning threads plus threads being started
//!   (`starting`). While some job is uncovered and fewer than
//!   [`EAGER_THREADS`] threads exist (none), the spawner starts one at
//!   once.
//! - Beyond that it starts one more thread per [`GROW_TICK`] during which
//!   a job stayed uncovered and no thread finished a job (`completed`
//!   did not move): every thread is then held by a call that blocks, so
//!   only a new thread lets the queue move. Calls that finish quickly
//!   keep the threads that exist going and start no more.
//!
//! Every queued job still gets a thread: a queue that does not move for a
//! tick grows the pool, until the cap, so a call that waits for another
//! queued call (invariant 3's case) waits at most a tick per thread
//! started.
//!
//! The spawner counts a thread before it starts it (`threads += 1`,
//! `starting += 1`, under the lock), and the thread uncounts `starting`
//! when it first takes the lock. If the OS refuses the thread while no
//! pool thread is alive, the spawner runs the queued jobs itself (they
//! would otherwise wait for ever); with threads alive it tries again a
//! tick later. If the spawner itself cannot start, the first submitter
//! takes its job back out of the queue and returns it to the caller,
//! which runs the call in place.
//!
//! # Shutdown
//!
//! [`BlockingPool::shutdown`] sets `shutdown`, wakes every idle thread and
//! the spawner, joins the spawner (so no thread starts after), then joins
//! the pool threads: a call still running is waited for. The scheduler calls
//! it only once no task is alive, and only tasks submit, so in practice the
//! queue is empty by then. Dropping the pool without it (a detached
//! scheduler) wakes the threads and the spawner, which drain the queue and
//! exit on their own.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::coroutine::switch::Suspend;
use crate::runtime::context;
use crate::runtime::processer::direct::switch_out;
use crate::sys::lock::{Condvar, Mutex, MutexGuard};

/// Rounds a pool thread spends looking for the next job before it sleeps:
/// the first half spin on the CPU, the second yield it.
const SPIN_ROUNDS: u32 = 64;

/// Threads the spawner starts without waiting while a job is uncovered (see
/// "Growth" in the module docs): the first. Every further thread waits for
/// a tick with the queue standing still: started at once, a second thread
/// for a call that the busy one would have taken a moment later only adds
/// a thread competing for the CPUs, which a task making calls one after
/// another pays for on each call.
pub(crate) const EAGER_THREADS: usize = 1;

/// How long the queue must stay uncovered with no job finishing before
/// the spawner starts one more thread beyond [`EAGER_THREADS`].
pub(crate) const GROW_TICK: Duration = Duration::from_micros(100);

/// One call handed to the pool: a function and the data it runs on.
pub(crate) struct Job {
    /// Runs the call. Must not unwind (the caller's own catches panics).
    run: unsafe fn(*const ()),
    /// What `run` runs on; lives until `run` has returned (see `submit`).
    data: *const (),
}

// SAFETY: a Job is a pointer and a function the submitter vouched may run
// on another thread (`BlockingPool::submit`'s contract: `data` is Send
// state that stays alive until `run` returns).
unsafe impl Send for Job {}

impl Job {
    /// A job that calls `run(data)`.
    ///
    /// # Safety
    ///
    /// `run(data)` must be sound to call once on any thread while the
    /// submitter waits, and must not unwind; see [`BlockingPool::submit`]
    /// for how long `data` must live.
    pub(crate) unsafe fn new(run: unsafe fn(*const ()), data: *const ()) -> Job {
        Job { run, data }
    }

    /// The data pointer, for taking a refused job back.
    pub(crate) fn data(&self) -> *const () {
        self.data
    }
}

thread_local! {
    /// The pool whose job this thread runs now (null otherwise): a pool
    /// thread, or the spawner running queued jobs itself. Set for the
    /// length of each job, while the thread holds the pool's `Inner`.
    static RUNNING_FOR: std::cell::Cell<*const Inner> = const { std::cell::Cell::new(std::ptr::null()) };
}

/// Makes `pool` the pool whose job this thread runs (null: none); returns
/// the previous one. Not inlined (`context.rs`: thread-locals are reached
/// through calls).
#[inline(never)]
fn set_running_for(pool: *const Inner) -> *const Inner {
    RUNNING_FOR.with(|c| c.replace(pool))
}

/// The pool whose job this thread runs now, null if none.
#[inline(never)]
fn running_for() -> *const Inner {
    RUNNING_FOR.with(|c| c.get())
}

/// A scheduler's blocking pool (see the module docs).
pub(crate) struct BlockingPool {
    inner: Arc<Inner>,
}

/// What the pool's threads share with the submitters.
/// How many times a submitter in a task yields while the pool's lock is
/// held before it waits for the lock (see [`Inner::lock_for_submit`]).
const SUBMIT_YIELDS: u32 = 64;

struct Inner {
    state: Mutex<State>,
    /// Idle threads wait here for a job or for shutdown.
    work: Condvar,
    /// The spawner waits here for an uncovered job or for shutdown.
    spawn: Condvar,
    /// Pool threads started and not yet joined; finished ones are
    /// forgotten when the next one starts.
    handles: Mutex<Vec<JoinHandle<()>>>,
    /// The spawner, once started, until shutdown joins it.
    spawner: Mutex<Option<JoinHandle<()>>>,
    /// Threads running a job now (for `Stats`; written under the lock or by
    /// the thread that runs the job, read Relaxed).
    busy: AtomicUsize,
    /// Jobs waiting for a thread (for `Stats`; mirrors `queue.len()`).
    queued: AtomicUsize,
    /// Mirrors `State::spin_claims` (written under the lock), for spinning
    /// threads to watch without taking the lock.
    spin_claimed: AtomicUsize,
    /// Threads alive (for `Stats`; mirrors `State::threads`).
    threads: AtomicUsize,
    /// `blocking_threads`.
    max: usize,
    /// `blocking_idle_timeout`.
    keep_alive: Duration,
    /// The threads' name.
    name: String,
}

/// The pool's state, under `Inner::state`.
struct State {
    queue: VecDeque<Job>,
    /// Threads alive or being started.
    threads: usize,
    /// Threads waiting for work and not claimed by a submitter (invariant 3).
    idle: usize,
    /// Claims made by submitters that no waiter has taken yet.
    notify: usize,
    /// Threads spinning for the next job, not claimed by a submitter.
    spinning: usize,
    /// Claims on spinning threads not taken yet (`spinning + spin_claims`
    /// is the number of threads in their spin).
    spin_claims: usize,
    /// Threads counted in `threads` that have not yet taken the lock in
    /// their loop (started by the spawner, see "Growth").
    starting: usize,
    /// Jobs finished since the pool began: the spawner's sign of progress.
    completed: u64,
    /// The spawner was started (or is being started).
    spawner: bool,
    /// The spawner sleeps without a deadline: a submitter must wake it.
    spawner_asleep: bool,
    /// No more jobs; threads drain the queue and exit.
    shutdown: bool,
}

impl State {
    /// Some queued job is counted on by no claim and no starting thread.
    fn uncovered(&self) -> bool {
        self.queue.len() > self.notify + self.spin_claims + self.starting
    }
}

impl BlockingPool {
    /// A pool of at most `max` threads named `name`, none started yet;
    /// each exits after `keep_alive` without work.
    pub(crate) fn new(max: usize, keep_alive: Duration, name: String) -> BlockingPool {
        BlockingPool {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    threads: 0,
                    idle: 0,
                    notify: 0,
                    spinning: 0,
                    spin_claims: 0,
                    starting: 0,
                    completed: 0,
                    spawner: false,
                    spawner_asleep: false,
                    shutdown: false,
                }),
                work: Condvar::new(),
                spawn: Condvar::new(),
                handles: Mutex::new(Vec::new()),
                spawner: Mutex::new(None),
                busy: AtomicUsize::new(0),
                queued: AtomicUsize::new(0),
                spin_claimed: AtomicUsize::new(0),
                threads: AtomicUsize::new(0),
                max,
                keep_alive,
                name,
            }),
        }
    }

    /// Hands `job` to a pool thread. `Err` gives the job back, not run:
    /// the pool is shut down, or it has no thread and the OS refused to
    /// start one.
    ///
    /// # Safety
    ///
    /// On `Ok`, the job's data must stay alive and in place until its `run`
    /// has returned (the caller waits for a signal `run` itself sends).
    pub(crate) unsafe fn submit(&self, job: Job) -> Result<(), Job> {
        let inner = &*self.inner;
        let mut st = inner.lock_for_submit();
        if st.shutdown {
            return Err(job);
        }
        st.queue.push_back(job);
        inner.queued.store(st.queue.len(), Ordering::Relaxed);
        if st.spinning > 0 {
            // A thread looking at `spin_claimed` takes it, no wake-up
            // needed.
            st.spinning -= 1;
            st.spin_claims += 1;
            inner.spin_claimed.store(st.spin_claims, Ordering::Relaxed);
            return Ok(());
        }
        if st.idle > 0 {
            st.idle -= 1;
            st.notify += 1;
            inner.work.notify_one();
            return Ok(());
        }
        if st.threads >= inner.max {
            // Every thread is busy: the first to finish takes it.
            return Ok(());
        }
        // No thread free: the spawner starts one, now or a tick later.
        if st.spawner {
            if st.spawner_asleep {
                st.spawner_asleep = false;
                inner.spawn.notify_one();
            }
            return Ok(());
        }
        st.spawner = true;
        let data = st.queue.back().map(Job::data);
        drop(st);
        match self.start_spawner() {
            Ok(()) => Ok(()),
            Err(_) => {
                let mut st = inner.state.lock();
                st.spawner = false;
                // Take the job back unless a thread already took it (then
                // it runs there, and the caller waits as usual).
                let mine = st.queue.iter().rposition(|j| Some(j.data) == data);
                match mine.and_then(|at| st.queue.remove(at)) {
                    Some(job) => {
                        inner.queued.store(st.queue.len(), Ordering::Relaxed);
                        Err(job)
                    }
                    None => Ok(()),
                }
            }
        }
    }

    /// Starts the spawner (see "Growth" in the module docs).
    fn start_spawner(&self) -> std::io::Result<()> {
        let inner = self.inner.clone();
        let h = std::thread::Builder::new()
            .name(format!("{}-spawn", self.inner.name))
            .spawn(move || inner.spawner_loop())?;
        *self.inner.spawner.lock() = Some(h);
        Ok(())
    }

    /// Whether this thread is running a job of this pool now: a call a
    /// task of the pool's scheduler waits for, so that scheduler cannot
    /// finish its tasks before the job returns (`Shared::shutdown` refuses
    /// to wait for them from here).
    pub(crate) fn runs_job_on_this_thread(&self) -> bool {
        std::ptr::eq(running_for(), Arc::as_ptr(&self.inner))
    }

    /// Threads running a call now.
    pub(crate) fn busy(&self) -> usize {
        self.inner.busy.load(Ordering::Relaxed)
    }

    /// Calls waiting for a thread.
    pub(crate) fn queued(&self) -> usize {
        self.inner.queued.load(Ordering::Relaxed)
    }

    /// Pool threads alive (or being started).
    pub(crate) fn threads(&self) -> usize {
        self.inner.threads.load(Ordering::Relaxed)
    }

    /// Refuses further jobs, lets the threads run what is queued, and joins
    /// them (a call still running is waited for). The calling thread, if it
    /// is one of the pool's, is not joined.
    pub(crate) fn shutdown(&self) {
        self.begin_shutdown();
        let me = std::thread::current().id();
        // The spawner first: no thread starts once it is gone.
        if let Some(h) = self.inner.spawner.lock().take() {
            if h.thread().id() != me {
                let _ = h.join();
            }
        }
        let handles = std::mem::take(&mut *self.inner.handles.lock());
        for h in handles {
            if h.thread().id() != me {
                let _ = h.join();
            }
        }
    }

    fn begin_shutdown(&self) {
        let mut st = self.inner.state.lock();
        st.shutdown = true;
        self.inner.work.notify_all();
        self.inner.spawn.notify_all();
    }
}

impl Drop for BlockingPool {
    /// A detached scheduler's pool: the threads drain the queue and exit
    /// on their own (they hold only `Inner`).
    fn drop(&mut self) {
        self.begin_shutdown();
    }
}

impl Inner {
    /// The pool's lock, for a submitter. A submitter runs in a task on a
    /// Processer, and the lock's holder is a pool thread (or the spawner,
    /// or another submitter) that the OS may preempt inside it: asleep
    /// behind it, the Processer would run none of its other tasks for a
    /// time slice. So while the lock is held the task yields to them and
    /// tries again, up to [`SUBMIT_YIELDS`] times, and only then waits for
    /// the lock like any thread (a task alone on its Processer yields back
    /// to itself at once, and waits with nothing behind it). No
    /// cancellation checkpoint: `unblock` runs under libc hooks, where an
    /// unwind must not start. Outside a task it waits at once.
    fn lock_for_submit(&self) -> MutexGuard<'_, State> {
        for _ in 0..SUBMIT_YIELDS {
            if let Some(st) = self.state.try_lock() {
                return st;
            }
            if context::current_task_ptr().is_none() {
                break;
            }
            switch_out(Suspend::Yield);
        }
        self.state.lock()
    }

    /// The spawner: starts pool threads while jobs are uncovered (see
    /// "Growth" in the module docs), until shutdown.
    fn spawner_loop(self: &Arc<Self>) {
        let mut st = self.state.lock();
        // `completed` and the time when the current tick began, if one is
        // running.
        let mut tick_from: Option<(u64, Instant)> = None;
        loop {
            if st.shutdown {
                break;
            }
            if !st.uncovered() || st.threads >= self.max {
                tick_from = None;
                st.spawner_asleep = true;
                self.spawn.wait(&mut st);
                st.spawner_asleep = false;
                continue;
            }
            let grow = match tick_from {
                _ if st.threads < EAGER_THREADS => true,
                // The queue moves: judge again a tick from now.
                Some((from, _)) if st.completed != from => false,
                Some((_, at)) => {
                    let left = GROW_TICK.saturating_sub(at.elapsed());
                    if !left.is_zero() {
                        // Woken early: the rest of the tick.
                        let _ = self.spawn.wait_for(&mut st, left);
                        continue;
                    }
                    // A whole tick passed uncovered with no job finished.
                    true
                }
                None => false,
            };
            if !grow {
                tick_from = Some((st.completed, Instant::now()));
                let _ = self.spawn.wait_for(&mut st, GROW_TICK);
                continue;
            }
            tick_from = None;
            st.threads += 1;
            st.starting += 1;
            self.threads.store(st.threads, Ordering::Relaxed);
            drop(st);
            let started = self.start_thread();
            st = self.state.lock();
            if started.is_err() {
                st.threads -= 1;
                st.starting -= 1;
                self.threads.store(st.threads, Ordering::Relaxed);
                if st.threads == 0 {
                    // No thread to run them: run the queued jobs here.
                    while let Some(job) = st.queue.pop_front() {
                        self.queued.store(st.queue.len(), Ordering::Relaxed);
                        drop(st);
                        // SAFETY: as in `work_loop`: the job left the
                        // queue, so it runs once, here.
                        unsafe { self.run_job(job) };
                        st = self.state.lock();
                        st.completed += 1;
                    }
                } else {
                    tick_from = Some((st.completed, Instant::now()));
                    let _ = self.spawn.wait_for(&mut st, GROW_TICK);
                }
            }
        }
    }

    /// Runs `job` on this thread, marked as running a job of this pool
    /// meanwhile ([`BlockingPool::runs_job_on_this_thread`]).
    ///
    /// # Safety
    ///
    /// As [`Job::new`] and [`BlockingPool::submit`]: the job left the
    /// queue (it runs once, here) and its data is alive until `run`
    /// returns.
    unsafe fn run_job(&self, job: Job) {
        let prev = set_running_for(self);
        // SAFETY: the caller's contract.
        unsafe { (job.run)(job.data) };
        set_running_for(prev);
    }

    /// Starts one pool thread (counted by the caller).
    fn start_thread(self: &Arc<Self>) -> std::io::Result<()> {
        let inner = self.clone();
        let h = std::thread::Builder::new()
            .name(self.name.clone())
            .spawn(move || inner.work_loop())?;
        let mut hs = self.handles.lock();
        // Retired threads have exited; forget their handles.
        hs.retain(|h| !h.is_finished());
        hs.push(h);
        Ok(())
    }

    /// A pool thread: run jobs until idle for `keep_alive`, or until
    /// shutdown with the queue empty.
    fn work_loop(&self) {
        let mut st = self.state.lock();
        // Counted by the spawner until here (see "Growth").
        st.starting -= 1;
        loop {
            if let Some(job) = st.queue.pop_front() {
                self.queued.store(st.queue.len(), Ordering::Relaxed);
                self.busy.fetch_add(1, Ordering::Relaxed);
                drop(st);
                // SAFETY: `submit`'s contract: `data` lives until `run`
                // returns, and `run` is sound on this thread, once (the job
                // left the queue, so no other thread has it).
                unsafe { self.run_job(job) };
                self.busy.fetch_sub(1, Ordering::Relaxed);
                st = self.state.lock();
                st.completed += 1;
                continue;
            }
            if st.shutdown {
                break;
            }
            // Spin a moment for the next job before sleeping: a task making
            // calls one after another submits its next one about a wake-up
            // later, and finds this thread still here.
            st.spinning += 1;
            drop(st);
            let mut round = 0;
            st = loop {
                while round < SPIN_ROUNDS {
                    // Relaxed: a hint only; the lock below decides.
                    if self.spin_claimed.load(Ordering::Relaxed) > 0 {
                        break;
                    }
                    if round < SPIN_ROUNDS / 2 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                    round += 1;
                }
                let st = self.state.lock();
                if st.spin_claims > 0 || round == SPIN_ROUNDS || !st.queue.is_empty() || st.shutdown
                {
                    break st;
                }
                // Another spinning thread took the claim we saw: spin on,
                // still counted in `spinning` (invariant 4).
            };
            if st.spin_claims > 0 {
                // Claimed by a submitter: its job is queued (or a busy
                // thread took it meanwhile).
                st.spin_claims -= 1;
                self.spin_claimed.store(st.spin_claims, Ordering::Relaxed);
                continue;
            }
            st.spinning -= 1;
            if !st.queue.is_empty() || st.shutdown {
                // A job queued by a submitter that counted on another
                // thread (one idle or being started): help anyway. Or
                // shutdown, whose wake-up came while we spun: drain and
                // exit rather than sleep.
                continue;
            }
            // Wait for a claim (see the module docs for the steps).
            st.idle += 1;
            let leave = loop {
                let timed_out = self.work.wait_for(&mut st, self.keep_alive).timed_out();
                if st.notify > 0 {
                    st.notify -= 1;
                    break false;
                }
                if st.shutdown {
                    st.idle -= 1;
                    break false;
                }
                if timed_out {
                    st.idle -= 1;
                    break true;
                }
            };
            if leave {
                break;
            }
        }
        st.threads -= 1;
        self.threads.store(st.threads, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    struct Probe {
        tx: mpsc::Sender<usize>,
        n: usize,
    }

    /// Sends the probe's number.
    ///
    /// # Safety
    /// `p` points at a live `Probe`.
    unsafe fn send(p: *const ()) {
        // SAFETY: the tests pass a `Probe` that outlives the job.
        let p = unsafe { &*(p as *const Probe) };
        p.tx.send(p.n).unwrap();
    }

    /// A task that submits while the pool's lock is held (as by a pool
    /// thread the OS preempted inside it) leaves its Processer to the other
    /// tasks: the task it spawned just before runs while the lock stays
    /// held, and the submitter's call runs once the lock is free.
    #[test]
    fn a_submitter_behind_the_held_pool_lock_lets_its_processers_other_tasks_run() {
        let s = crate::Scheduler::builder()
            .min_threads(1)
            .max_threads(1)
            .build()
            .unwrap();
        let held = s.shared().blocking.inner.state.lock();
        let (tx, rx) = mpsc::channel();
        let submitter = s.spawn(move || {
            drop(crate::spawn(move || tx.send(()).unwrap()));
            crate::unblock(|| 7)
        });
        let ran = rx.recv_timeout(Duration::from_secs(10)).is_ok();
        drop(held);
        assert!(
            ran,
            "the other task did not run while the submitter waited for the lock"
        );
        assert_eq!(submitter.join().unwrap(), 7);
        s.shutdown();
    }

    #[test]
    fn every_accepted_job_runs_once_and_threads_stay_within_the_cap() {
        let pool = BlockingPool::new(2, Duration::from_secs(10), "t-blocking".into());
        let (tx, rx) = mpsc::channel();
        let probes: Vec<Probe> = (0..50).map(|n| Probe { tx: tx.clone(), n }).collect();
        for p in &probes {
            // SAFETY: `probes` outlives the jobs: every one is received
            // below before it is dropped.
            let job = unsafe { Job::new(send, p as *const Probe as *const ()) };
            // SAFETY: as above.
            assert!(unsafe { pool.submit(job) }.is_ok());
            assert!(pool.threads() <= 2);
        }
        let mut got: Vec<usize> = (0..50).map(|_| rx.recv().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, (0..50).collect::<Vec<_>>());
        // The threads are spinning or idle now, with 10 s to go before they
        // would retire: shutdown wakes them either way.
        let t = std::time::Instant::now();
        pool.shutdown();
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert_eq!(pool.threads(), 0);
        // SAFETY: the probe outlives the call; a refused job never runs.
        let job = unsafe { Job::new(send, &probes[0] as *const Probe as *const ()) };
        // SAFETY: as above.
        let refused = unsafe { pool.submit(job) }.is_err();
        assert!(refused, "refused after shutdown");
    }
}
