//! What a blocked thread is blocked in: a backtrace taken from the blocked
//! Processer thread itself, on a signal gofer owns.
//!
//! The Dispatcher marks a Processer blocked when its running task has not
//! switched out for a while; the task dump and the stall report then name
//! the thread and the task, and with what is here, the *call*:
//! `parking_lot::condvar::Condvar::wait` under `r2d2::Pool::get` under the
//! user's function. A parked task's stack can be walked from its saved
//! registers (`walk.rs`), but a blocked task is running: its registers are
//! in its thread, and only that thread can walk its own stack. So the
//! Dispatcher asks it, with a signal.
//!
//! # The protocol
//!
//! One request at a time in the whole process, in one word, [`REQUEST`]:
//! the target thread's kernel id, a generation (so that a late signal or a
//! late handler never mistakes a later request for its own), and a phase:
//!
//! ```text
//!  requester (a Dispatcher)              handler (on the target thread)
//!  IDLE -> ASKED (CAS, claims the slot)
//!  tgkill(target, SIGNAL)          -->   ASKED and tid is mine: ASKED -> TRACING (CAS)
//!                                        record the frames into FRAMES
//!  ... polls at its next cycles ...      TRACING -> DONE (CAS, Release)
//!  DONE: read FRAMES (Acquire), -> IDLE
//!
//!  timeout: ASKED -> IDLE (CAS): the signal was never handled (blocked,
//!           or the program replaced the handler); a later handler finds
//!           the generation changed and does nothing
//!           TRACING -> ABANDONED (CAS): the handler is still at it; its
//!           own CAS to DONE then fails and it leaves the slot IDLE
//! ```
//!
//! The frames are atomics written Relaxed by the handler, whose CAS to
//! `DONE` is a Release that the requester's Acquire load pairs with, so
//! the requester reads what the handler wrote; nobody else writes them
//! between the requester's claim and its release of the slot. The race
//! this prevents: a requester that gave up on one thread reading frames a
//! handler on another thread is writing for a newer request, or a
//! handler writing frames that a newer request reads as its own.
//!
//! # The handler, in signal context
//!
//! Installed once, when first needed, with `SA_SIGINFO | SA_RESTART |
//! SA_ONSTACK`, and only if the signal's disposition is still the
//! default (a program that uses [`BACKTRACE_SIGNAL_OFFSET`]'s signal keeps it, and
//! gets no backtraces: the report says so). The handler saves and
//! restores `errno`. It reads its kernel id (`gettid`), works on atomics,
//! and asks `sigaltstack` whether it runs on an alternate stack with at
//! least [`ROOM`] free: Processer threads get one of [`ALT_STACK`] bytes
//! at their start (`AltStack`); a thread with a smaller one (a
//! `block_on` caller with Rust's default 8 KiB) or none is not walked,
//! and the report says so: the unwinder needs a few KiB, and the kernel's
//! signal frame up to 3 KiB more, and the task's own stack may have no
//! room left at all.
//!
//! The walk is `backtrace::trace_unsynchronized`, which on Linux is the
//! system unwinder's `_Unwind_Backtrace` (libgcc). What it does in signal
//! context, and why that is acceptable:
//! - it allocates nothing, and the closure only stores addresses into
//!   atomics;
//! - it finds each frame's unwind table through `_dl_find_object` (glibc
//!   2.35 and GCC 12 on, lock-free and async-signal-safe) or, before,
//!   `dl_iterate_phdr`, which takes glibc's loader lock. That lock is
//!   recursive, so a thread interrupted while it holds it walks on; if
//!   another thread holds it (a `dlopen` in progress), the handler waits
//!   for it, and the blocked thread, which was waiting anyway, waits that
//!   much longer; the requester gives up after [`ANSWER_WITHIN`] and
//!   reports no backtrace. No lock of gofer's is ever taken;
//! - it takes libgcc's own mutex only for unwind tables registered at run
//!   time (`__register_frame`: JIT compilers), and a thread interrupted
//!   while holding that mutex would deadlock on it. Such a thread is inside
//!   the unwinder, not asleep in a blocking call; the Dispatcher marks
//!   threads blocked only after two samples asleep in the kernel outside
//!   such work, or a long computation, so the case needs a JIT's frames
//!   and a hog caught inside an unwind: not handled, and written down
//!   here;
//! - a walk off a damaged stack could fault, as the dump's walks of parked
//!   stacks could: the same unwinder, on frames that unwound before.
//!
//! # What interrupting the blocked call does
//!
//! The signal interrupts whatever system call the thread sleeps in, once
//! per blocked spell. With `SA_RESTART` the kernel restarts most of them
//! (`read`, `write`, `recv`, `accept`, `connect`, `wait`, `flock`, and
//! `futex` waits without a timeout), and a timed `futex` wait, `nanosleep`
//! and `clock_nanosleep` are restarted with the time left. Every futex
//! wait the blocked calls of the issue sleep in retries on `EINTR` anyway:
//! glibc's `pthread_mutex_lock` and `pthread_cond_wait`, `parking_lot`'s
//! thread parker (it loops until unparked, or to its deadline), std's
//! `thread::park` under `mpsc::Receiver::recv`, and `thread::sleep` (it
//! sleeps the remaining time). What fails with `EINTR` whatever the flag
//! (signal(7)): `poll`, `select`, `epoll_wait`, `sigtimedwait`, `semop`,
//! a socket read or write with a timeout (`SO_RCVTIMEO`), and libc's
//! `sleep` and `usleep`, which return early. Code that calls those must
//! already handle `EINTR`, since any signal (a profiler's, a debugger's)
//! can cause it; std's wrappers of them (`read_exact`, `write_all`,
//! `thread::sleep`) retry.
//!
//! So that a diagnostic never changes what a program does, the Dispatcher
//! first reads the system call the thread sleeps in
//! (`/proc/self/task/<tid>/syscall`, as its blocking detection does) and
//! sends no signal when it is one of those a signal would cut short
//! ([`cut_short_by_signal`]): a raw `nanosleep` of the program's would
//! return early, and `std::thread::sleep` cannot be told from it. The
//! report then names that system call instead of a backtrace. What stays:
//! a thread that enters such a call between that read and the signal (a
//! window of microseconds, once per blocked spell), and a socket call with
//! a timeout, which `/proc` does not tell from one without.
//!
//! # Once per spell
//!
//! The Dispatcher asks once per blocked spell (a Processer and the switch
//! count it stands at), for a thread with started tasks behind it or when
//! every thread is blocked, at the first cycle that finds it so, and
//! collects the answer at its next cycles (it never waits for it). The raw
//! addresses go into the Processer's `blocked_call`; whoever shows them (a
//! dump, the stall report) symbolizes them off the blocked thread.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::runtime::dump::walk::{self, Symbol};

/// The signal gofer takes backtraces with: `SIGRTMIN() + BACKTRACE_SIGNAL_OFFSET`, a
/// real-time signal (glibc keeps the two below `SIGRTMIN()` for itself).
pub const BACKTRACE_SIGNAL_OFFSET: i32 = 6;

/// The most frames recorded, the handler's own included.
const FRAMES: usize = 96;

/// Free alternate stack the handler needs to walk: the unwinder's context
/// and frame-state records are a few KiB; with a wide margin, since running
/// out would fault.
const ROOM: usize = 24 << 10;

/// The alternate signal stack a Processer thread installs at its start.
pub(crate) const ALT_STACK: usize = 64 << 10;

/// How long a requester waits for the answer before it gives up: the
/// thread must be scheduled to run the handler, which on a loaded machine
/// takes a time slice or two.
pub(crate) const ANSWER_WITHIN: Duration = Duration::from_millis(500);

const IDLE: u64 = 0;
const ASKED: u64 = 1;
const TRACING: u64 = 2;
const DONE: u64 = 3;
const ABANDONED: u64 = 4;

/// The one request in flight: `tid << 32 | generation << 3 | phase`. See
/// the module docs for the protocol and the race it prevents.
static REQUEST: AtomicU64 = AtomicU64::new(IDLE);

/// The frames the handler recorded: return addresses, innermost first (the
/// handler's own first), guarded by the `TRACING`..`DONE` phases.
static FRAME_IPS: [AtomicUsize; FRAMES] = [const { AtomicUsize::new(0) }; FRAMES];
/// How many of `FRAME_IPS` are set.
static FRAME_LEN: AtomicUsize = AtomicUsize::new(0);
/// The instruction the signal interrupted (from the signal's context), to
/// find the first frame below the handler's; 0 if unknown, 1 if the
/// handler found too little stack to walk on.
static FRAME_PC: AtomicUsize = AtomicUsize::new(0);

const NO_ROOM: usize = 1;

fn phase(r: u64) -> u64 {
    r & 7
}

fn tid_of(r: u64) -> libc::pid_t {
    (r >> 32) as libc::pid_t
}

fn with_phase(r: u64, p: u64) -> u64 {
    (r & !7) | p
}

/// The signal number, if it is ours (installed, or installable now).
fn signal() -> Result<i32, &'static str> {
    static INSTALLED: OnceLock<Result<i32, &'static str>> = OnceLock::new();
    *INSTALLED.get_or_init(install)
}

fn install() -> Result<i32, &'static str> {
    let sig = libc::SIGRTMIN() + BACKTRACE_SIGNAL_OFFSET;
    if sig > libc::SIGRTMAX() {
        return Err("no real-time signal free for it");
    }
    // SAFETY: sigaction with a zeroed struct as the new action's base and a
    // valid out-pointer for the old one; the handler has the SA_SIGINFO
    // signature, touches only atomics, async-signal-safe system calls
    // and the unwinder (module docs), and restores errno.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
            return Err("its signal could not be installed");
        }
        if old.sa_sigaction != libc::SIG_DFL {
            return Err("the program handles gofer's backtrace signal itself");
        }
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_signal as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
        libc::sigemptyset(&mut act.sa_mask);
        if libc::sigaction(sig, &act, std::ptr::null_mut()) != 0 {
            return Err("its signal could not be installed");
        }
    }
    Ok(sig)
}

extern "C" fn on_signal(_sig: libc::c_int, _info: *mut libc::siginfo_t, uc: *mut c_void) {
    // SAFETY: the errno location is the calling thread's, valid for its
    // life; restoring it keeps the interrupted code's errno intact.
    let errno = unsafe { *libc::__errno_location() };
    answer(uc);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// The handler's work: records this thread's frames if a request asks for
/// this thread. A named frame of its own, for `render` to cut at.
#[inline(never)]
fn answer(uc: *mut c_void) {
    let r = REQUEST.load(Ordering::Acquire);
    if phase(r) != ASKED {
        return;
    }
    // SAFETY: gettid takes no argument and cannot fail.
    let me = unsafe { libc::syscall(libc::SYS_gettid) } as libc::pid_t;
    if tid_of(r) != me
        || REQUEST
            .compare_exchange(
                r,
                with_phase(r, TRACING),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_err()
    {
        return;
    }
    if alt_stack_room() < ROOM {
        FRAME_LEN.store(0, Ordering::Relaxed);
        FRAME_PC.store(NO_ROOM, Ordering::Relaxed);
    } else {
        FRAME_PC.store(interrupted_pc(uc), Ordering::Relaxed);
        let mut n = 0;
        // SAFETY: `trace_unsynchronized` asks that nothing else use the
        // unwinder's global state unsynchronised meanwhile; the system
        // unwinder (libgcc) is thread-safe, and its use in signal context
        // is discussed in the module docs. The closure neither panics nor
        // allocates: it stores into atomics.
        unsafe {
            backtrace::trace_unsynchronized(|frame| {
                if n == FRAMES {
                    return false;
                }
                FRAME_IPS[n].store(frame.ip() as usize, Ordering::Relaxed);
                n += 1;
                true
            });
        }
        FRAME_LEN.store(n, Ordering::Relaxed);
    }
    // Release: the requester's Acquire load then sees the frames.
    if REQUEST
        .compare_exchange(
            with_phase(r, TRACING),
            with_phase(r, DONE),
            Ordering::Release,
            Ordering::Relaxed,
        )
        .is_err()
    {
        // Abandoned meanwhile: nobody will read them.
        REQUEST.store(with_phase(r, IDLE), Ordering::Release);
    }
}

/// Free bytes below this frame on the alternate signal stack it runs on; 0
/// when it does not run on one.
fn alt_stack_room() -> usize {
    // SAFETY: stack_t is plain data; all-zero is a valid value.
    let mut ss: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: a null new stack only reads the current one into `ss`
    // (sigaltstack is async-signal-safe).
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut ss) } != 0
        || ss.ss_flags & libc::SS_ONSTACK == 0
    {
        return 0;
    }
    let here = &ss as *const libc::stack_t as usize;
    here.saturating_sub(ss.ss_sp as usize)
}

/// The instruction the signal interrupted, read from the signal's context.
fn interrupted_pc(uc: *mut c_void) -> usize {
    if uc.is_null() {
        return 0;
    }
    // SAFETY: with SA_SIGINFO the third argument is the interrupted
    // context, a `ucontext_t` the kernel wrote on this stack.
    #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
    return unsafe {
        (*uc.cast::<libc::ucontext_t>()).uc_mcontext.gregs[libc::REG_RIP as usize] as usize
    };
    // SAFETY: as above.
    #[cfg(all(target_arch = "aarch64", target_env = "gnu"))]
    return unsafe { (*uc.cast::<libc::ucontext_t>()).uc_mcontext.pc as usize };
    #[allow(unreachable_code)]
    0
}

/// Why no signal may be sent to a thread asleep in the system call that
/// `syscall` (the contents of its `/proc/self/task/<tid>/syscall`) names:
/// one that a signal handler ends with `EINTR` (or early) whatever
/// `SA_RESTART` says (signal(7)). `None` for any other call, or a thread
/// running.
pub(crate) fn cut_short_by_signal(syscall: &[u8]) -> Option<&'static str> {
    let nr = syscall
        .split(|&b| b == b' ')
        .next()
        .and_then(|t| std::str::from_utf8(t).ok())
        .and_then(|t| t.trim().parse::<libc::c_long>().ok())?;
    Some(match nr {
        libc::SYS_nanosleep | libc::SYS_clock_nanosleep => {
            "it sleeps in the nanosleep system call (std::thread::sleep, libc's sleep), which a \
             signal would end early: no backtrace was taken"
        }
        libc::SYS_ppoll | libc::SYS_pselect6 => {
            "it waits in the poll or select system call, which a signal would end with EINTR: \
             no backtrace was taken"
        }
        libc::SYS_epoll_pwait | libc::SYS_epoll_pwait2 => {
            "it waits in the epoll_wait system call, which a signal would end with EINTR: no \
             backtrace was taken"
        }
        libc::SYS_io_getevents | libc::SYS_semtimedop => {
            "it waits in a system call that a signal would end with EINTR (io_getevents, \
             semop): no backtrace was taken"
        }
        libc::SYS_rt_sigtimedwait | libc::SYS_rt_sigsuspend => {
            "it waits for a signal (sigtimedwait, sigsuspend), which gofer's signal would end: \
             no backtrace was taken"
        }
        #[cfg(target_arch = "x86_64")]
        libc::SYS_poll | libc::SYS_select | libc::SYS_epoll_wait | libc::SYS_pause => {
            "it waits in the poll, select, epoll_wait or pause system call, which a signal \
             would end with EINTR: no backtrace was taken"
        }
        #[cfg(target_arch = "x86_64")]
        libc::SYS_semop => {
            "it waits in the semop system call, which a signal would end with EINTR: no \
             backtrace was taken"
        }
        _ => return None,
    })
}

/// A request in flight, held by its requester.
pub(crate) struct Request {
    word: u64,
    sent: Instant,
}

/// What a request gave: the raw frames, innermost first, from the one the
/// signal interrupted (or the handler's own when that could not be found),
/// or why there are none.
pub(crate) type Answer = Result<Frames, &'static str>;

/// Raw frames of a blocked thread.
#[derive(Clone, Debug)]
pub(crate) struct Frames {
    ips: Box<[usize]>,
    /// Whether `ips` starts at the interrupted frame (else at the
    /// handler's, to be cut by name when symbolized).
    cut: bool,
}

/// Asks thread `tid` for its backtrace. `Ok(None)` when another request is
/// in flight (ask again later); `Err` when no backtrace can be taken.
pub(crate) fn ask(tid: libc::pid_t) -> Result<Option<Request>, &'static str> {
    let sig = signal()?;
    let r = REQUEST.load(Ordering::Relaxed);
    if phase(r) != IDLE {
        return Ok(None);
    }
    let generation = ((r >> 3) + 1) & ((1 << 29) - 1);
    let word = (u64::from(tid as u32) << 32) | (generation << 3) | ASKED;
    if REQUEST
        .compare_exchange(r, word, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return Ok(None);
    }
    // SAFETY: tgkill with our own pid, a thread id and a signal number; a
    // thread that exited meanwhile makes it fail, which is handled.
    let sent = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, sig as libc::c_long) };
    if sent != 0 {
        REQUEST.store(with_phase(word, IDLE), Ordering::Release);
        return Err("the thread could not be signalled");
    }
    Ok(Some(Request {
        word,
        sent: Instant::now(),
    }))
}

/// The answer to `req`, if it came or the wait is over; `None` while the
/// handler may still answer.
pub(crate) fn poll(req: &Request) -> Option<Answer> {
    let r = REQUEST.load(Ordering::Acquire);
    if r == with_phase(req.word, DONE) {
        return Some(take(req.word));
    }
    if req.sent.elapsed() < ANSWER_WITHIN {
        return None;
    }
    // Give up: unless the handler finished meanwhile.
    for (from, to) in [(ASKED, IDLE), (TRACING, ABANDONED)] {
        if REQUEST
            .compare_exchange(
                with_phase(req.word, from),
                with_phase(req.word, to),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            return Some(Err(if from == ASKED {
                "the thread did not answer gofer's backtrace signal"
            } else {
                "the thread did not finish its backtrace in time"
            }));
        }
    }
    if REQUEST.load(Ordering::Acquire) == with_phase(req.word, DONE) {
        return Some(take(req.word));
    }
    Some(Err("the backtrace request was lost"))
}

/// Reads the frames of the finished request `word` and frees the slot.
fn take(word: u64) -> Answer {
    let n = FRAME_LEN.load(Ordering::Relaxed).min(FRAMES);
    let pc = FRAME_PC.load(Ordering::Relaxed);
    let ips: Vec<usize> = FRAME_IPS[..n]
        .iter()
        .map(|a| a.load(Ordering::Relaxed))
        .collect();
    REQUEST.store(with_phase(word, IDLE), Ordering::Release);
    if pc == NO_ROOM {
        return Err("the thread's alternate signal stack is too small to walk on");
    }
    let at = (pc > NO_ROOM)
        .then(|| ips.iter().position(|&ip| ip == pc))
        .flatten();
    Ok(match at {
        Some(i) => Frames {
            ips: ips[i..].into(),
            cut: true,
        },
        None => Frames {
            ips: ips.into(),
            cut: false,
        },
    })
}

impl Frames {
    /// Symbolizes the frames (with `symbolize`, which may cache) into the
    /// text a dump shows, innermost first: from the call the thread is
    /// blocked in down to the task's entry, without the signal handler's
    /// frames above and the task's root below.
    pub(crate) fn render(&self, symbolize: &mut dyn FnMut(usize) -> Vec<Symbol>) -> String {
        let mut frames: Vec<Symbol> = Vec::new();
        for (k, &ip) in self.ips.iter().enumerate() {
            if k == 0 && self.cut {
                // The interrupted instruction, not a return address:
                // `symbolize` looks one byte before what it is given.
                frames.extend(symbolize(ip + 1));
            } else {
                frames.extend(symbolize(ip));
            }
        }
        if !self.cut {
            // Below the handler's frame, and the signal trampoline below it.
            if let Some(h) = frames
                .iter()
                .rposition(|f| f.name.contains("debug::blocked_call::"))
            {
                frames.drain(..(h + 2).min(frames.len()));
            }
        }
        walk::render(walk::trim_below(&frames))
    }
}

/// The advice for a thread blocked in `call` (rendered frames).
pub(crate) fn fix_for(call: &str) -> &'static str {
    let has = |s: &str| call.contains(s);
    if has("mpsc") || has("crossbeam_channel") || has("sync_channel") || has("Receiver") {
        "a std (or crossbeam) channel blocks the thread: use gofer::chan, which parks the task \
         instead, or run the call on the blocking pool with gofer::unblock(|| ...)"
    } else if has("Condvar")
        || has("Mutex")
        || has("RwLock")
        || has("parking_lot")
        || has("pthread_mutex")
        || has("pthread_cond")
        || has("pthread_rwlock")
        || has("futex")
    {
        "a thread lock or condition variable blocks the thread: use gofer::sync::Mutex, \
         gofer::sync::RwLock and gofer::sync::Condvar, which park the task instead, or run the \
         call (a pool's get, say) on the blocking pool with gofer::unblock(|| ...)"
    } else {
        "run the blocking call on the blocking pool with gofer::unblock(|| ...), so that the \
         thread goes on running its other tasks (gofer::sync for locks and condition \
         variables, gofer::chan for channels)"
    }
}

/// A Processer thread's own alternate signal stack of [`ALT_STACK`] bytes
/// (plus a guard page), installed for the thread's life when the one it
/// has is smaller, so that the backtrace handler has room to walk on; the
/// previous one is put back when this is dropped, before that one's owner
/// (Rust's thread start) frees it.
pub(crate) struct AltStack {
    mem: *mut c_void,
    len: usize,
    previous: libc::stack_t,
}

impl AltStack {
    /// Installs one on the calling thread, unless it has a large enough one.
    pub(crate) fn install() -> Option<AltStack> {
        // SAFETY: stack_t is plain data; all-zero is a valid value.
        let mut previous: libc::stack_t = unsafe { std::mem::zeroed() };
        // SAFETY: a null new stack only reads the current one.
        if unsafe { libc::sigaltstack(std::ptr::null(), &mut previous) } != 0
            || (previous.ss_flags & libc::SS_DISABLE == 0 && previous.ss_size >= ALT_STACK)
        {
            return None;
        }
        let page = 4096;
        let len = ALT_STACK + page;
        // SAFETY: a fresh anonymous mapping, checked for failure.
        let mem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if mem == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: the lowest page of our own mapping becomes the guard.
        unsafe { libc::mprotect(mem, page, libc::PROT_NONE) };
        let st = libc::stack_t {
            // SAFETY: within the mapping (one page in).
            ss_sp: unsafe { mem.cast::<u8>().add(page).cast() },
            ss_flags: 0,
            ss_size: ALT_STACK,
        };
        // SAFETY: `st` describes our mapping, which lives until `drop`
        // disables it first.
        if unsafe { libc::sigaltstack(&st, std::ptr::null_mut()) } != 0 {
            // SAFETY: our mapping, never installed.
            unsafe { libc::munmap(mem, len) };
            return None;
        }
        Some(AltStack { mem, len, previous })
    }
}

impl Drop for AltStack {
    fn drop(&mut self) {
        // Dropped on the thread that installed it (it is not Send), outside
        // any signal handler: put the previous stack back (or disable), then
        // free ours.
        let mut prev = self.previous;
        prev.ss_flags &= libc::SS_DISABLE;
        // SAFETY: `prev` is what the thread had, still owned by its owner
        // (Rust's thread start frees it only after the thread's closure
        // returns, which is after this drop).
        unsafe {
            libc::sigaltstack(&prev, std::ptr::null_mut());
            libc::munmap(self.mem, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::cut_short_by_signal;

    #[test]
    fn a_sleep_or_a_poll_is_never_signalled_a_futex_wait_or_a_read_is() {
        let line = |nr: libc::c_long| format!("{nr} 0x7f00 0x80 0x0 0x0 0x0 0x0 0x7ffd0 0x7f001\n");
        for nr in [
            libc::SYS_nanosleep,
            libc::SYS_clock_nanosleep,
            libc::SYS_ppoll,
        ] {
            assert!(cut_short_by_signal(line(nr).as_bytes()).is_some(), "{nr}");
        }
        for nr in [libc::SYS_futex, libc::SYS_read, libc::SYS_accept4] {
            assert!(cut_short_by_signal(line(nr).as_bytes()).is_none(), "{nr}");
        }
        assert!(cut_short_by_signal(b"running\n").is_none());
    }
}
