//! The lock around one channel's state: a small spinlock.
//!
//! A channel's critical sections are a handful of instructions (move a value,
//! link or unlink a queue node, one CAS on a waiter) and never switch out, run
//! user code or drop user values, so a holder is only ever delayed by the OS
//! preempting its thread. A spinlock suits that: taking it is one CAS and
//! releasing it is one plain store, where a general mutex pays a second
//! read-modify-write to release. Contenders spin briefly, then yield the
//! thread, so a preempted holder gets the CPU back.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_utils::Backoff;

/// A spinlock protecting a `T`.
pub(crate) struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out access to `value` to one holder at a time (the
// `locked` flag, Acquire on lock / Release on unlock), so sharing the lock
// between threads only ever moves the `T` between them: `T: Send` suffices.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: the lock owns its `T`; sending the lock sends the `T`.
unsafe impl<T: Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// A new, unlocked lock around `value`.
    pub(crate) fn new(value: T) -> SpinLock<T> {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, spinning (then yielding the thread) while it is held.
    #[inline]
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        // Acquire: pairs with the Release store in `SpinGuard::drop`, so the
        // previous holder's writes to `value` are visible to us.
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        SpinGuard { lock: self }
    }

    #[cold]
    fn lock_contended(&self) {
        let backoff = Backoff::new();
        loop {
            // Wait for the lock to look free before trying the CAS again, so
            // spinners do not steal the cache line from the holder.
            while self.locked.load(Ordering::Relaxed) {
                backoff.snooze();
            }
            // Acquire: as in `lock`.
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

/// Holds a [`SpinLock`]; releases it when dropped.
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while `locked` is held by us, so no
        // other reference to `value` exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this reference unique.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Release: publishes our writes to `value`; pairs with the Acquire
        // CAS of the next holder in `lock`.
        self.lock.locked.store(false, Ordering::Release);
    }
}
