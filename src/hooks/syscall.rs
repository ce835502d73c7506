//! The hooked `syscall`: `syscall(SYS_futex, ...)` goes to `futex.rs`,
//! the copies between descriptors (`SYS_splice`, `SYS_tee`,
//! `SYS_sendfile`, `SYS_copy_file_range`) to `copies.rs`, every other
//! system call to libc's `syscall` unchanged (its arguments, its result
//! and errno).
//!
//! # Why six words
//!
//! C declares `long syscall(long number, ...)`. This definition takes the
//! number and six `long` words, and hands all six on whatever the call is;
//! that is right on both targets the hooks build for, because every
//! argument of a system call is an integer or a pointer:
//!
//! - x86_64 System V: variadic integer and pointer arguments travel exactly
//!   as named ones, the first six in `rdi, rsi, rdx, rcx, r8, r9` and the
//!   seventh on the stack just above the return address. A caller that
//!   passed fewer left other values in the unused registers and in that
//!   stack slot, which lies in the caller's own frame and is always
//!   readable; the kernel ignores the arguments a system call does not
//!   take (libc's own `syscall` loads all six the same way). `al`, which a
//!   variadic caller sets to the number of vector registers used, is read
//!   only by a variadic callee's prologue: this one is not variadic and
//!   never reads a vector register.
//! - aarch64 Linux (AAPCS64; Apple's variant differs, but the hooks are
//!   Linux only): variadic arguments are passed as named ones, the seven
//!   words in `x0` to `x6`; unused registers hold other values, read and
//!   passed on harmlessly, and no vector register is involved.

use libc::{c_int, c_long, timespec};

use super::{copies, futex};
use crate::sys::real;

/// Hooked `syscall`.
///
/// # Safety
/// The contract of the system call `number` with its arguments.
#[no_mangle]
pub unsafe extern "C" fn syscall(
    number: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    if number == libc::SYS_futex {
        // SAFETY: the caller keeps futex's contract for these arguments.
        return unsafe {
            futex::futex(
                a1 as *const u32,
                a2 as c_int,
                a3 as u32,
                a4 as *const timespec,
                a5 as *const u32,
                a6 as u32,
            )
        };
    }
    let a = [a1, a2, a3, a4, a5, a6];
    if let Some(fds) = copies::copy_descriptors(number, &a) {
        // SAFETY: the caller keeps the copy's contract for these arguments.
        return unsafe { copies::via_syscall(number, a, fds) };
    }
    // SAFETY: forwarded unchanged.
    unsafe { real::syscall(number, a) }
}
