//! A tiny per-thread xorshift generator, for `select!`'s fair arm order.
//!
//! Not cryptographic, not shared: a `Cell` in a thread-local, seeded from
//! the clock and the thread's stack address. A task may move between
//! threads, so each call reads and updates the generator of the thread it
//! runs on at that moment, within one non-switching call that is never
//! inlined: inlined into `select`'s loop, the thread-local's address could
//! be computed once and used after a switch, on another thread.

use std::cell::Cell;

thread_local! {
    static STATE: Cell<u64> = const { Cell::new(0) };
}

fn seed() -> u64 {
    let local = 0u8;
    let addr = &local as *const u8 as u64;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // Any non-zero value will do; mix so nearby seeds diverge.
    (addr.rotate_left(32) ^ nanos ^ 0x9E37_79B9_7F4A_7C15) | 1
}

/// A pseudo-random number in `0..n` (`n > 0`).
#[inline(never)]
pub(crate) fn below(n: usize) -> usize {
    STATE.with(|s| {
        let mut x = s.get();
        if x == 0 {
            x = seed();
        }
        // xorshift64
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        // Multiply-shift maps the 64-bit value onto 0..n without division.
        ((x as u128 * n as u128) >> 64) as usize
    })
}

/// Shuffles `order` in place (Fisher-Yates).
pub(crate) fn shuffle(order: &mut [usize]) {
    for i in (1..order.len()).rev() {
        order.swap(i, below(i + 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut seen = [false; 5];
        for _ in 0..1000 {
            let v = below(5);
            assert!(v < 5);
            seen[v] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }
}
