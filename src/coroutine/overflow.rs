//! Stack overflow detection for guarded stacks.
//!
//! A SIGSEGV/SIGBUS handler, installed once per process and run on an
//! alternate signal stack (the faulting stack is unusable), asks whether the
//! faulting address lies in the guard page of the coroutine running on this
//! thread. If so it prints one line naming it and aborts. Any other fault is
//! passed on to the handler that was installed before ours (Rust's own
//! handler for thread stacks, if present), or to the default action.
//!
//! Two questions, in order:
//!
//! 1. a fiber's guard page (`registry.rs`, which this layer keeps itself):
//!    `fiber 'parser' overflowed its ...`;
//! 2. the task running on this thread, which this layer does not know: the
//!    runtime registers a [`Describe`] function that answers for it
//!    ([`describe_tasks_with`]) and writes `task 17 'reader' overflowed ...`.
//!
//! Whoever first needs the handler installs it ([`install`]): a scheduler
//! when it is built, a fiber when it is created.
//!
//! Everything the handler does is async-signal-safe: the describing
//! functions read the fiber registry's atomics, or a thread-local pointer
//! and the running task's header (which the faulting thread itself owns
//! while the task runs), and format into a stack buffer; then `write` and
//! `abort`.

use crate::sys::fatal::{write_stderr, Buf};
use std::fmt::Write as _;
use std::sync::Once;
use std::sync::OnceLock;

/// Given a faulting address, writes what overflowed (`task 17 'reader'
/// overflowed ...`) and returns true if it lies in the guard page of the
/// coroutine running on this thread; returns false for any other fault.
/// Called in the signal handler: it must be async-signal-safe.
pub(crate) type Describe = fn(addr: usize, out: &mut dyn std::fmt::Write) -> bool;

static DESCRIBE: OnceLock<Describe> = OnceLock::new();

/// The handlers that were installed before ours.
struct Previous {
    segv: libc::sigaction,
    bus: libc::sigaction,
}

// SAFETY: plain data (a function address, flags and a signal mask), written
// once before it is shared and only read afterwards.
unsafe impl Sync for Previous {}
// SAFETY: as above.
unsafe impl Send for Previous {}

static PREVIOUS: OnceLock<Previous> = OnceLock::new();

/// Size of the alternate signal stack given to threads that have none.
const ALT_STACK_SIZE: usize = 64 * 1024;

/// Registers the runtime's question (which task, if any, overflowed); the
/// first registration stays.
pub(crate) fn describe_tasks_with(describe: Describe) {
    let _ = DESCRIBE.set(describe);
}

/// Installs the fault handler, once per process.
pub(crate) fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: sigaction with a fully initialised struct; our handler has
        // the SA_SIGINFO signature. The previous actions are saved first, so
        // the handler can chain to them.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = handler as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut act.sa_mask);
            let mut segv: libc::sigaction = std::mem::zeroed();
            let mut bus: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut segv);
            libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut bus);
            let _ = PREVIOUS.set(Previous { segv, bus });
            libc::sigaction(libc::SIGSEGV, &act, std::ptr::null_mut());
            libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut());
        }
    });
}

/// Gives the calling thread an alternate signal stack if it has none.
pub(crate) fn thread_init() {
    // SAFETY: stack_t is plain data; all-zero is a valid value.
    let mut old: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: a null new stack only reads the current one into `old`.
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut old) } != 0 {
        return;
    }
    if old.ss_flags & libc::SS_DISABLE == 0 {
        return; // already has one (Rust gives one to the threads it spawns)
    }
    // SAFETY: a fresh anonymous mapping; checked for failure. It is leaked on
    // purpose: the thread may take a signal on it until it exits.
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            ALT_STACK_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if mem == libc::MAP_FAILED {
        return;
    }
    let st = libc::stack_t {
        ss_sp: mem,
        ss_flags: 0,
        ss_size: ALT_STACK_SIZE,
    };
    // SAFETY: `st` describes the mapping made above, owned by this thread.
    unsafe { libc::sigaltstack(&st, std::ptr::null_mut()) };
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let mut b = Buf {
        bytes: [0; 512],
        len: 0,
    };
    let _ = b.write_str("gofer: ");
    let ours = super::registry::describe_fault(addr, &mut b)
        || DESCRIBE
            .get()
            .is_some_and(|describe| describe(addr, &mut b));
    if ours {
        let _ = b.write_str("\n");
        write_stderr(&b);
        std::process::abort();
    }
    chain(sig, info, uctx);
}

/// Hands a fault that is not ours to the previous handler, or restores the
/// default action so that returning re-raises it.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    let prev = PREVIOUS
        .get()
        .map(|p| if sig == libc::SIGBUS { p.bus } else { p.segv });
    match prev {
        Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
            if p.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler was installed with SA_SIGINFO,
                // so this is its signature.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(p.sa_sigaction) };
                f(sig, info, uctx);
            } else {
                // SAFETY: a plain handler installed without SA_SIGINFO.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(p.sa_sigaction) };
                f(sig);
            }
        }
        _ => {
            // SAFETY: resetting to the default action; returning re-executes
            // the faulting instruction, which then takes the default action.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
    }
}
