//! Unix signals as channel messages: [`ctrl_c`] and [`Signals`].
//!
//! A server that stops cleanly on Ctrl-C or `kill` waits for the signal
//! like for anything else: a task parks in [`Signals::recv`], a plain
//! thread blocks there, and [`Signals::receiver`] is a channel end for
//! [`select!`](crate::select) next to other arms.
//!
//! ```no_run
//! use gofer::signal::{Signals, SIGINT, SIGTERM};
//!
//! let signals = Signals::new(&[SIGINT, SIGTERM])?;
//! let sched = gofer::Scheduler::builder().build().unwrap();
//! // ... spawn the server's tasks on `sched` ...
//! let sig = signals.recv();
//! eprintln!("got signal {sig}, stopping");
//! drop(signals); // a second Ctrl-C now ends the process at once
//! sched.shutdown_now();
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # When to call it: any time, from anywhere
//!
//! Nothing here depends on signal masks, which are per thread: a
//! [`Signals`] made before the first scheduler is built, after, inside a
//! task or on a plain thread works the same, whichever thread of the
//! process the kernel picks to take the signal (a Processer, the main
//! thread, a thread of another library). A signal that arrives once
//! [`Signals::new`] has returned is delivered to it.
//!
//! # How it works
//!
//! The first `Signals` for a signal installs a handler for it with
//! `sigaction` (`SA_RESTART`, `SA_ONSTACK`). The handler does only
//! async-signal-safe work: it calls the handler the program had before, if
//! it had a function there, then sets the signal's pending flag (an
//! atomic) and writes one byte to a non-blocking pipe. A plain thread of
//! gofer's (`gofer-signal`, started by the first `Signals`) sleeps in a
//! read of that pipe; woken, it takes every pending flag and offers each
//! signal to every live `Signals` that asked for it, through a gofer
//! channel, which wakes a parked task or a blocked thread alike. No task,
//! Processer or scheduler is involved until that send.
//!
//! # Queueing
//!
//! Each `Signals` buffers up to [`Signals::BUFFER`] signals not yet
//! received; past that, newer ones are dropped for that `Signals` (the
//! others still get them). As with the kernel's own pending signals, two
//! arrivals of one signal before the `gofer-signal` thread has handled the
//! first may count once. So a signal that arrives before anyone waits is
//! not lost: the next `recv` returns it.
//!
//! # The signal's disposition
//!
//! - While at least one `Signals` for a signal lives, gofer's handler is
//!   installed for it: the default action (SIGINT and SIGTERM end the
//!   process) does not happen. A handler function the program had
//!   installed before still runs, before the `Signals` are told (it is
//!   chained); a previous `SIG_IGN` or `SIG_DFL` does not act, but is
//!   remembered.
//! - When the last `Signals` for a signal is dropped, the disposition the
//!   signal had before the first one is put back (the default action
//!   again, for a program that had not touched it), unless someone has
//!   installed another handler meanwhile, which is left in place. So after
//!   [`ctrl_c`] returns, a second Ctrl-C ends a program at once.
//! - Signals that the kernel cannot catch (`SIGKILL`, `SIGSTOP`), faults
//!   whose handler must not just return (`SIGSEGV`, `SIGBUS`, `SIGILL`,
//!   `SIGFPE`; gofer's stack-overflow report owns the first two) and
//!   gofer's backtrace signal
//!   ([`BACKTRACE_SIGNAL_OFFSET`](crate::debug::BACKTRACE_SIGNAL_OFFSET))
//!   are refused with [`io::ErrorKind::InvalidInput`].
//! - A signal the program blocks in every thread (with `pthread_sigmask`)
//!   never reaches any handler, gofer's included: do not block it.
//! - [`install_signal_dump`](crate::debug::install_signal_dump) and any
//!   other code that calls `sigaction` for the same signal later replace
//!   gofer's handler; the `Signals` then receive nothing.
//!
//! `ARCHITECTURE.md`, "Signals", compares the design with tokio's and
//! signal-hook's.

use std::ffi::c_void;
use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::time::Duration;

use crate::chan::{self, Receiver, RecvTimeoutError, Sender, TrySendError};
use crate::sys::lock::Mutex;

/// Interrupt from the keyboard (Ctrl-C): `libc::SIGINT`.
pub const SIGINT: i32 = libc::SIGINT;
/// The polite request to stop (`kill`'s default): `libc::SIGTERM`.
pub const SIGTERM: i32 = libc::SIGTERM;
/// The terminal hung up; daemons take it as "reload": `libc::SIGHUP`.
pub const SIGHUP: i32 = libc::SIGHUP;
/// Quit from the keyboard (Ctrl-\\): `libc::SIGQUIT`.
pub const SIGQUIT: i32 = libc::SIGQUIT;
/// For the program's own use: `libc::SIGUSR1`.
pub const SIGUSR1: i32 = libc::SIGUSR1;
/// For the program's own use: `libc::SIGUSR2`.
pub const SIGUSR2: i32 = libc::SIGUSR2;

/// Signal numbers are below this (Linux: 1 to 64).
const SLOTS: usize = 65;

/// Per signal: it arrived and the `gofer-signal` thread has not taken it.
static PENDING: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];

/// Per signal: the handler the program had before gofer's, to chain to
/// (`SIG_DFL` when there is none to call).
static PREV_HANDLER: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(libc::SIG_DFL) }; SLOTS];

/// Per signal: whether [`PREV_HANDLER`] takes the three `SA_SIGINFO`
/// arguments.
static PREV_SIGINFO: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];

/// The pipe's write end, for the handler (-1 until the thread runs).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

/// Who listens to what: the live `Signals`, and per signal how many of
/// them ask for it and the disposition to put back.
static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    started: false,
    next_id: 0,
    subscribers: Vec::new(),
    installed: [const { None }; SLOTS],
});

struct Registry {
    /// Whether the pipe exists and the `gofer-signal` thread runs.
    started: bool,
    next_id: u64,
    subscribers: Vec<Subscriber>,
    /// Per signal: `Some((count, previous action))` while `count > 0`
    /// `Signals` ask for it and gofer's handler is installed.
    installed: [Option<(usize, libc::sigaction)>; SLOTS],
}

struct Subscriber {
    id: u64,
    signals: Vec<i32>,
    tx: Sender<i32>,
}

/// Waits for SIGINT (Ctrl-C): parks the calling task, or blocks the
/// calling thread, until the process receives it.
///
/// The wait starts when it is called: a SIGINT that arrived before is not
/// seen (make a [`Signals`] early for that). While it waits, SIGINT does
/// not end the process; once it returns, SIGINT has its previous
/// disposition again, so a second Ctrl-C ends a program that had not
/// handled SIGINT itself (see the [module docs](self)). An error comes
/// only from setting the handler up.
///
/// ```no_run
/// let sched = gofer::Scheduler::builder().build().unwrap();
/// let waiter = sched.spawn(|| gofer::signal::ctrl_c());
/// waiter.join().unwrap()?; // returns after Ctrl-C
/// println!("interrupted");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn ctrl_c() -> io::Result<()> {
    Signals::new(&[SIGINT])?.recv();
    Ok(())
}

/// A subscription to some Unix signals: each arrival of one of them is
/// queued here as its number, to take with [`recv`](Self::recv) or through
/// the channel end [`receiver`](Self::receiver).
///
/// Several `Signals` may ask for the same signal: each receives every
/// arrival. While one lives, its signals' default actions do not happen;
/// dropping the last `Signals` of a signal puts back its previous
/// disposition ([module docs](self)).
///
/// ```
/// use gofer::signal::{Signals, SIGUSR1};
///
/// let signals = Signals::new(&[SIGUSR1])?;
/// // SAFETY: raise sends a signal this process now handles.
/// unsafe { libc::raise(SIGUSR1) };
/// assert_eq!(signals.recv(), SIGUSR1);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Signals {
    id: u64,
    signals: Vec<i32>,
    rx: Receiver<i32>,
}

impl Signals {
    /// How many signals each `Signals` holds that have arrived and not yet
    /// been received; past that, newer arrivals are dropped for it.
    pub const BUFFER: usize = 64;

    /// Starts receiving `signals` (numbers such as [`SIGINT`], repeats
    /// ignored). Fails with [`io::ErrorKind::InvalidInput`] for an empty
    /// list, a number that is no signal, or a signal that cannot or must
    /// not be handled ([module docs](self)); with the OS error if the pipe,
    /// the thread or `sigaction` fails. On error nothing is left installed.
    ///
    /// Any time works: before or after a scheduler is built, in a task or
    /// on a plain thread. A signal that arrives after it returns is
    /// received.
    ///
    /// ```
    /// use gofer::signal::{Signals, SIGHUP, SIGTERM};
    ///
    /// let signals = Signals::new(&[SIGHUP, SIGTERM])?;
    /// assert_eq!(signals.signals(), [SIGHUP, SIGTERM]);
    /// assert!(Signals::new(&[libc::SIGKILL]).is_err());
    /// assert!(Signals::new(&[]).is_err());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(signals: &[i32]) -> io::Result<Signals> {
        let mut wanted: Vec<i32> = Vec::with_capacity(signals.len());
        for &sig in signals {
            check(sig)?;
            if !wanted.contains(&sig) {
                wanted.push(sig);
            }
        }
        if wanted.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "gofer::signal::Signals::new: no signal given",
            ));
        }
        let mut reg = REGISTRY.lock();
        if !reg.started {
            start_thread()?;
            reg.started = true;
        }
        // Install the handler for every signal not yet handled; undo them
        // all if one fails.
        for (i, &sig) in wanted.iter().enumerate() {
            let slot = sig as usize;
            if let Some((count, _)) = &mut reg.installed[slot] {
                *count += 1;
                continue;
            }
            match install(sig) {
                Ok(prev) => reg.installed[slot] = Some((1, prev)),
                Err(e) => {
                    for &undo in &wanted[..i] {
                        release(&mut reg, undo);
                    }
                    return Err(e);
                }
            }
        }
        let (tx, rx) = chan::bounded(Self::BUFFER);
        let id = reg.next_id;
        reg.next_id += 1;
        reg.subscribers.push(Subscriber {
            id,
            signals: wanted.clone(),
            tx,
        });
        Ok(Signals {
            id,
            signals: wanted,
            rx,
        })
    }

    /// Waits for the next signal and returns its number: parks the calling
    /// task, or blocks the calling thread. A signal queued already
    /// returns at once.
    ///
    /// ```
    /// use gofer::signal::{Signals, SIGUSR2};
    ///
    /// let signals = Signals::new(&[SIGUSR2])?;
    /// let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
    /// let h = sched.spawn(move || signals.recv()); // parks the task
    /// // SAFETY: kill sends this process a signal it now handles.
    /// unsafe { libc::kill(libc::getpid(), SIGUSR2) };
    /// assert_eq!(h.join().unwrap(), SIGUSR2);
    /// sched.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn recv(&self) -> i32 {
        // The sender lives in the registry as long as `self` does.
        self.rx
            .recv()
            .expect("gofer::signal: the registry holds the sender while the Signals lives")
    }

    /// The next queued signal, if one is there, without waiting.
    ///
    /// ```
    /// let signals = gofer::signal::Signals::new(&[gofer::signal::SIGUSR1])?;
    /// assert_eq!(signals.try_recv(), None);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn try_recv(&self) -> Option<i32> {
        self.rx.try_recv().ok()
    }

    /// Like [`recv`](Self::recv), but gives up after `timeout` with `None`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let signals = gofer::signal::Signals::new(&[gofer::signal::SIGUSR1])?;
    /// assert_eq!(signals.recv_timeout(Duration::from_millis(1)), None);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn recv_timeout(&self, timeout: Duration) -> Option<i32> {
        match self.rx.recv_timeout(timeout) {
            Ok(sig) => Some(sig),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                unreachable!("gofer::signal: the registry holds the sender while the Signals lives")
            }
        }
    }

    /// The channel end the signals arrive on, for
    /// [`select!`](crate::select) (or [`chan::Select`], or
    /// [`Receiver::recv_async`] in async code). Receiving from it takes the
    /// signal from this `Signals`. A clone of it outlives the `Signals`
    /// but is disconnected when the `Signals` is dropped.
    ///
    /// ```
    /// use std::time::Duration;
    /// use gofer::signal::{Signals, SIGTERM};
    ///
    /// let signals = Signals::new(&[SIGTERM])?;
    /// let (tx, work) = gofer::chan::unbounded::<u32>();
    /// tx.send(1).unwrap();
    /// loop {
    ///     gofer::select! {
    ///         recv(signals.receiver()) -> sig => {
    ///             println!("signal {}: stopping", sig.unwrap());
    ///             break;
    ///         }
    ///         recv(work) -> job => println!("job {job:?}"),
    ///         default(Duration::from_millis(10)) => break, // idle
    ///     }
    /// }
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn receiver(&self) -> &Receiver<i32> {
        &self.rx
    }

    /// The signals this `Signals` receives, in the order first given,
    /// without repeats.
    ///
    /// ```
    /// use gofer::signal::{Signals, SIGINT};
    /// let signals = Signals::new(&[SIGINT, SIGINT])?;
    /// assert_eq!(signals.signals(), [SIGINT]);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn signals(&self) -> &[i32] {
        &self.signals
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        let mut reg = REGISTRY.lock();
        reg.subscribers.retain(|s| s.id != self.id);
        for &sig in &self.signals {
            release(&mut reg, sig);
        }
    }
}

impl fmt::Debug for Signals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signals")
            .field("signals", &self.signals)
            .field("queued", &self.rx.len())
            .finish()
    }
}

/// Refuses what is no signal, or one that must not be handled here.
fn check(sig: i32) -> io::Result<()> {
    let invalid = |why: &str| {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("gofer::signal: signal {sig} {why}"),
        ))
    };
    if sig <= 0 || sig as usize >= SLOTS || sig > libc::SIGRTMAX() {
        return invalid("is not a signal number");
    }
    if sig == libc::SIGKILL || sig == libc::SIGSTOP {
        return invalid("cannot be caught");
    }
    if [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE].contains(&sig) {
        return invalid("is a fault, whose handler must not return");
    }
    if sig == libc::SIGRTMIN() + crate::debug::BACKTRACE_SIGNAL_OFFSET {
        return invalid("is gofer's backtrace signal");
    }
    Ok(())
}

/// Installs gofer's handler for `sig`, recording the previous action for
/// the handler to chain to; returns the previous action.
fn install(sig: i32) -> io::Result<libc::sigaction> {
    let slot = sig as usize;
    // SAFETY: `sigaction` with a zeroed struct as the new action's base
    // (valid: no handler, empty flags, then an emptied mask) and a valid
    // out-pointer for the old one. The handler has the SA_SIGINFO
    // signature and is async-signal-safe (see `on_signal`).
    unsafe {
        let mut prev: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut prev) != 0 {
            return Err(io::Error::last_os_error());
        }
        // Published before the handler can run, so it never sees a stale
        // one (the store happens-before `sigaction` installs it).
        PREV_HANDLER[slot].store(prev.sa_sigaction, Ordering::Release);
        PREV_SIGINFO[slot].store(prev.sa_flags & libc::SA_SIGINFO != 0, Ordering::Release);
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_signal as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
        libc::sigemptyset(&mut act.sa_mask);
        if libc::sigaction(sig, &act, std::ptr::null_mut()) != 0 {
            let e = io::Error::last_os_error();
            PREV_HANDLER[slot].store(libc::SIG_DFL, Ordering::Release);
            return Err(e);
        }
        Ok(prev)
    }
}

/// One `Signals` no longer asks for `sig`: the last one puts back the
/// previous disposition, if gofer's handler is still the one installed.
fn release(reg: &mut Registry, sig: i32) {
    let slot = sig as usize;
    let Some((count, prev)) = &mut reg.installed[slot] else {
        return;
    };
    *count -= 1;
    if *count > 0 {
        return;
    }
    let prev = *prev;
    reg.installed[slot] = None;
    // SAFETY: `sigaction` with valid pointers: the action saved by
    // `install` (a value the kernel gave) and a zeroed out-struct.
    unsafe {
        let mut now: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut now) == 0
            && now.sa_sigaction == on_signal as *const () as usize
        {
            libc::sigaction(sig, &prev, std::ptr::null_mut());
        }
    }
    // A handler still running may chain to the previous one it read; a
    // later one is not ours. So the record can go.
    PREV_HANDLER[slot].store(libc::SIG_DFL, Ordering::Release);
}

/// Makes the pipe and starts the `gofer-signal` thread that reads it.
fn start_thread() -> io::Result<()> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let [read_fd, write_fd] = fds;
    // The handler's writes must never block: a full pipe already holds a
    // wake-up, and the pending flags carry which signals came.
    // SAFETY: fcntl on a descriptor we own, with an int flag argument.
    let rc = unsafe { libc::fcntl(write_fd, libc::F_SETFL, libc::O_NONBLOCK) };
    let spawned = if rc != 0 {
        Err(io::Error::last_os_error())
    } else {
        std::thread::Builder::new()
            .name("gofer-signal".into())
            .spawn(move || dispatch(read_fd))
            .map(drop)
    };
    if let Err(e) = spawned {
        // SAFETY: both descriptors are ours and used by nobody yet.
        unsafe {
            libc::close(read_fd);
            libc::close(write_fd);
        }
        return Err(e);
    }
    WAKE_FD.store(write_fd, Ordering::Release);
    Ok(())
}

/// The handler: only async-signal-safe work (atomics, the raw `write`
/// system call, a chained handler as the program installed it), and errno
/// restored for the interrupted code.
extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the errno location is the calling thread's, valid for its
    // life; reading it is async-signal-safe.
    let errno = unsafe { *libc::__errno_location() };
    let slot = sig as usize;
    if slot < SLOTS {
        // The program's previous handler first, so that what it does is
        // done by the time a `Signals` receives the signal.
        let prev = PREV_HANDLER[slot].load(Ordering::Acquire);
        if prev != libc::SIG_DFL && prev != libc::SIG_IGN {
            if PREV_SIGINFO[slot].load(Ordering::Acquire) {
                // SAFETY: `prev` is the handler the program installed with
                // SA_SIGINFO, so it has this signature; it is called as the
                // kernel would have called it, in signal context, where it
                // was written to run.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(prev) };
                f(sig, info, ctx);
            } else {
                // SAFETY: as above, for a handler installed without
                // SA_SIGINFO, which takes the signal number alone.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(prev) };
                f(sig);
            }
        }
        // Flag first, then the byte: the thread takes flags after reading
        // a byte, so a set flag always has a byte after it.
        PENDING[slot].store(true, Ordering::Release);
        let fd = WAKE_FD.load(Ordering::Acquire);
        if fd >= 0 {
            let b = 1u8;
            // SAFETY: the raw write system call is async-signal-safe (not
            // the `write` symbol, which the `hooks` feature replaces); the
            // byte lives on this frame; the descriptor is the pipe's write
            // end, never closed once published. EAGAIN (a full pipe) is
            // fine: the pipe holds a wake-up already.
            unsafe { libc::syscall(libc::SYS_write, fd, &b as *const u8, 1usize) };
        }
    }
    // SAFETY: as above; restoring errno keeps the interrupted code's.
    unsafe { *libc::__errno_location() = errno };
}

/// The `gofer-signal` thread: sleeps in a read of the pipe; woken, hands
/// every pending signal to the `Signals` that asked for it.
fn dispatch(fd: RawFd) {
    let mut buf = [0u8; 64];
    loop {
        // SAFETY: reads into our own buffer from our own pipe; the raw
        // system call, so that the `hooks` feature has no say in it.
        let n = unsafe { libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // The pipe is ours and never closed: this cannot happen.
            return;
        }
        // Who gets what, under the lock; the sends after it, so that a
        // wake-up (which takes a Processer's locks) never nests in it.
        let mut sends: Vec<(Sender<i32>, i32)> = Vec::new();
        {
            let reg = REGISTRY.lock();
            for (slot, pending) in PENDING.iter().enumerate() {
                if !pending.swap(false, Ordering::AcqRel) {
                    continue;
                }
                let sig = slot as i32;
                for s in reg.subscribers.iter().filter(|s| s.signals.contains(&sig)) {
                    sends.push((s.tx.clone(), sig));
                }
            }
        }
        for (tx, sig) in sends {
            // Full: this `Signals` has BUFFER signals waiting already, and
            // drops this one. Disconnected: it was dropped meanwhile.
            let _: Result<(), TrySendError<i32>> = tx.try_send(sig);
        }
    }
}
