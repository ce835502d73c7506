//! Dying loudly from anywhere: a one-line message on stderr, then abort.
//! Async-signal-safe (no allocation, no lock), so a signal handler, a
//! hooked call or a thread out of stack can use it.

use std::fmt::Write;

/// A fixed buffer that `write!` can format into without allocating.
pub(crate) struct Buf {
    pub(crate) bytes: [u8; 512],
    pub(crate) len: usize,
}

impl std::fmt::Write for Buf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

pub(crate) fn write_stderr(b: &Buf) {
    // SAFETY: writes initialised bytes of a live buffer to fd 2.
    unsafe { libc::write(2, b.bytes.as_ptr().cast(), b.len) };
}

/// Prints `gofer: fatal: {msg}` and aborts. Async-signal-safe.
pub(crate) fn fatal(msg: &str) -> ! {
    let mut b = Buf {
        bytes: [0; 512],
        len: 0,
    };
    let _ = writeln!(b, "gofer: fatal: {msg}");
    write_stderr(&b);
    std::process::abort()
}

/// Writes `gofer: {what}` (as `f` formats it) on one line and aborts.
/// Async-signal-safe when `f` is.
pub(crate) fn abort_with(f: impl FnOnce(&mut dyn std::fmt::Write)) -> ! {
    let mut b = Buf {
        bytes: [0; 512],
        len: 0,
    };
    let _ = b.write_str("gofer: ");
    f(&mut b);
    let _ = b.write_str("\n");
    write_stderr(&b);
    std::process::abort()
}
