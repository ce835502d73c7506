//! The hooked sleeps: `nanosleep`, `clock_nanosleep` (what
//! `std::thread::sleep` calls), `sleep` and `usleep`. Inside a task the
//! task sleeps on the scheduler's timers; anywhere else (and in a task
//! whose thread holds a C lock, `guard::may_wait`) the call is libc's.

use std::time::Duration;

use libc::{c_int, c_uint, timespec};

use super::guard::{may_wait, set_errno};
use crate::sys::real;

/// Sleeps the running task for `d` (the caller checked it is in one).
fn task_sleep(d: Duration) {
    // A hooked call never unwinds (a C frame is below): the sleep does not
    // observe a cancellation (`runtime/task/cancel.rs`).
    let _mask = crate::runtime::task::cancel::Mask::new();
    crate::runtime::time::sleep::sleep(d);
}

fn ts_duration(ts: &timespec) -> Option<Duration> {
    (ts.tv_sec >= 0 && (0..1_000_000_000).contains(&ts.tv_nsec))
        .then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// Hooked `nanosleep`: inside a task, the task sleeps.
///
/// # Safety
/// The contract of `nanosleep(2)`.
#[no_mangle]
pub unsafe extern "C" fn nanosleep(req: *const timespec, rem: *mut timespec) -> c_int {
    if !may_wait() || req.is_null() {
        // SAFETY: forwarded with the caller's arguments.
        return unsafe { real::nanosleep(req, rem) };
    }
    // SAFETY: a non-null request the caller owns.
    match ts_duration(unsafe { &*req }) {
        Some(d) => {
            task_sleep(d);
            0
        }
        None => {
            set_errno(libc::EINVAL);
            -1
        }
    }
}

/// Hooked `clock_nanosleep` (what `std::thread::sleep` calls): inside a
/// task, relative and absolute sleeps on the monotonic and real-time clocks
/// sleep the task.
///
/// # Safety
/// The contract of `clock_nanosleep(2)`.
#[no_mangle]
pub unsafe extern "C" fn clock_nanosleep(
    clock: libc::clockid_t,
    flags: c_int,
    req: *const timespec,
    rem: *mut timespec,
) -> c_int {
    let hookable = matches!(clock, libc::CLOCK_MONOTONIC | libc::CLOCK_REALTIME);
    if !may_wait() || req.is_null() || !hookable {
        // SAFETY: forwarded with the caller's arguments.
        return unsafe { real::clock_nanosleep(clock, flags, req, rem) };
    }
    // SAFETY: a non-null request the caller owns.
    let Some(mut d) = ts_duration(unsafe { &*req }) else {
        return libc::EINVAL; // clock_nanosleep returns the error number
    };
    if flags & libc::TIMER_ABSTIME != 0 {
        let mut now = timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid clock and out-pointer.
        unsafe { libc::clock_gettime(clock, &mut now) };
        d = d.saturating_sub(ts_duration(&now).unwrap_or_default());
    }
    task_sleep(d);
    0
}

/// Hooked `sleep`.
///
/// # Safety
/// The contract of `sleep(3)`.
#[no_mangle]
pub unsafe extern "C" fn sleep(secs: c_uint) -> c_uint {
    if !may_wait() {
        // SAFETY: forwarded with the caller's argument.
        return unsafe { real::sleep(secs) };
    }
    task_sleep(Duration::from_secs(secs.into()));
    0
}

/// Hooked `usleep`.
///
/// # Safety
/// The contract of `usleep(3)`.
#[no_mangle]
pub unsafe extern "C" fn usleep(usec: libc::useconds_t) -> c_int {
    if !may_wait() {
        // SAFETY: forwarded with the caller's argument.
        return unsafe { real::usleep(usec) };
    }
    task_sleep(Duration::from_micros(usec.into()));
    0
}
