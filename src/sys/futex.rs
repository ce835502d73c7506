//! The kernel's futex, called directly: the runtime's own locks and
//! sleeps use it, and with the `hooks` feature it bypasses the hooked
//! `syscall` (which would park a task instead of waiting).

use libc::{c_int, c_long, timespec};

use super::real;

/// Calls the kernel's futex directly (not through the hooked `syscall`),
/// for the runtime's own locks (`sys/lock.rs`).
///
/// # Safety
/// The contract of `futex(2)` for `op` with these arguments (the second
/// address and the third value are passed as 0).
pub(crate) unsafe fn kernel_futex(
    uaddr: *const u32,
    op: c_int,
    val: u32,
    timeout: *const timespec,
) -> c_long {
    // SAFETY: the caller keeps futex's contract.
    unsafe {
        real::syscall(
            libc::SYS_futex,
            [
                uaddr as c_long,
                op as c_long,
                val as c_long,
                timeout as c_long,
                0,
                0,
            ],
        )
    }
}
