//! The hooked calls that wait for another process: file locks (`flock`,
//! `lockf`; `fcntl`'s `F_SETLKW` and `F_OFD_SETLKW` are in
//! `descriptors.rs`) and children (`wait`, `waitpid`, `wait4`, `waitid`:
//! what `std::process::Child::wait`, `Command::status` and
//! `Command::output` wait in).
//!
//! No descriptor becomes ready when a lock is released or a child exits,
//! so nothing here can wait through the IO manager: inside a task a call
//! that may wait goes whole to the blocking pool (`offload.rs`) and the
//! task parks until it returns. A call asked not to wait (`LOCK_NB`,
//! `F_TLOCK`, `F_TEST`, an unlock, `WNOHANG`) stays in place, as does every
//! call on a plain thread or in a forked child. Any thread of a process may
//! wait for any of its children, and locks belong to the open file
//! (`flock`, OFD locks) or the process (`lockf`, `F_SETLKW`), not to the
//! thread that takes them, so the pool thread's call means what the
//! task's would.

use libc::{c_int, id_t, idtype_t, off64_t, off_t, pid_t, rusage, siginfo_t};

use super::offload::{offloads_fd, when};
use crate::sys::real;

/// Hooked `flock`: a lock that may wait (no `LOCK_NB`, not `LOCK_UN`) is
/// taken on the blocking pool inside a task.
///
/// # Safety
/// The contract of `flock(2)`.
#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let call = || unsafe { real::flock(fd, op) };
    let waits = op & libc::LOCK_NB == 0 && op & libc::LOCK_UN == 0;
    if waits && offloads_fd(fd) {
        super::offload::offload(call)
    } else {
        call()
    }
}

/// Hooked `lockf`: `F_LOCK` (the one command that waits) is made on the
/// blocking pool inside a task.
///
/// # Safety
/// The contract of `lockf(3)`.
#[no_mangle]
pub unsafe extern "C" fn lockf(fd: c_int, cmd: c_int, len: off_t) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let call = || unsafe { real::lockf(fd, cmd, len) };
    if cmd == libc::F_LOCK && offloads_fd(fd) {
        super::offload::offload(call)
    } else {
        call()
    }
}

/// Hooked `lockf64`: as `lockf`.
///
/// # Safety
/// The contract of `lockf(3)`.
#[no_mangle]
pub unsafe extern "C" fn lockf64(fd: c_int, cmd: c_int, len: off64_t) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    let call = || unsafe { real::lockf64(fd, cmd, len) };
    if cmd == libc::F_LOCK && offloads_fd(fd) {
        super::offload::offload(call)
    } else {
        call()
    }
}

/// Hooked `wait`: inside a task, made on the blocking pool.
///
/// # Safety
/// The contract of `wait(2)`.
#[no_mangle]
pub unsafe extern "C" fn wait(status: *mut c_int) -> pid_t {
    // SAFETY: forwarded with the caller's argument.
    when(true, || unsafe { real::wait(status) })
}

/// Hooked `waitpid`: without `WNOHANG`, inside a task, made on the
/// blocking pool.
///
/// # Safety
/// The contract of `waitpid(2)`.
#[no_mangle]
pub unsafe extern "C" fn waitpid(pid: pid_t, status: *mut c_int, options: c_int) -> pid_t {
    // SAFETY: forwarded with the caller's arguments.
    when(options & libc::WNOHANG == 0, || unsafe {
        real::waitpid(pid, status, options)
    })
}

/// Hooked `wait4`: as `waitpid`.
///
/// # Safety
/// The contract of `wait4(2)`.
#[no_mangle]
pub unsafe extern "C" fn wait4(
    pid: pid_t,
    status: *mut c_int,
    options: c_int,
    ru: *mut rusage,
) -> pid_t {
    // SAFETY: forwarded with the caller's arguments.
    when(options & libc::WNOHANG == 0, || unsafe {
        real::wait4(pid, status, options, ru)
    })
}

/// Hooked `waitid`: as `waitpid`.
///
/// # Safety
/// The contract of `waitid(2)`.
#[no_mangle]
pub unsafe extern "C" fn waitid(
    idtype: idtype_t,
    id: id_t,
    info: *mut siginfo_t,
    options: c_int,
) -> c_int {
    // SAFETY: forwarded with the caller's arguments.
    when(options & libc::WNOHANG == 0, || unsafe {
        real::waitid(idtype, id, info, options)
    })
}
