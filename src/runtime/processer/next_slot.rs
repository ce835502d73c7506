//! The next-task slot of a Processer (Go's `runnext`, tokio's LIFO slot),
//! on its own so that it can be model-checked with loom
//! (`RUSTFLAGS="--cfg loom" cargo test --release --lib next_slot`).
//!
//! One atomic pointer: null, or an owned token turned into a raw pointer.
//! The only access that moves a token is a `swap`, so each token put in
//! comes out exactly once, whoever races for it:
//!
//! ```text
//!  owner (the Processer's thread)          Dispatcher (rescuing a blocked owner)
//!  put:  swap(t) -> the displaced token    take: swap(null) -> the token, if any
//!        goes to the runnable queue
//!  take: swap(null) -> the token, if any
//! ```
//!
//! The owner puts and takes; the Dispatcher only takes (when it moves a
//! blocked Processer's work away), and idle thieves leave the slot alone:
//! its task runs as soon as the running one switches out. Both swaps are
//! AcqRel: the Release of a put publishes the token's state (the task's
//! saved context, its park state) to whichever swap takes it out, and the
//! Acquire of that swap sees it.

#[cfg(loom)]
use loom::sync::atomic::{AtomicPtr, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicPtr, Ordering};

/// A value that owns what a raw pointer points to.
///
/// # Safety
/// `from_raw(into_raw(x))` gives `x` back, and a pointer from `into_raw` is
/// never null.
pub(crate) unsafe trait Token: Sized {
    type Target;
    fn into_raw(self) -> *mut Self::Target;
    /// # Safety
    /// `p` came from [`into_raw`](Token::into_raw) and is taken back once.
    unsafe fn from_raw(p: *mut Self::Target) -> Self;
}

/// A slot for one token (see the module docs).
pub(crate) struct NextSlot<T: Token> {
    ptr: AtomicPtr<T::Target>,
}

impl<T: Token> NextSlot<T> {
    pub(crate) fn new() -> NextSlot<T> {
        NextSlot {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Whether the slot holds a token (a hint: it may change at once).
    pub(crate) fn is_occupied(&self) -> bool {
        !self.ptr.load(Ordering::Relaxed).is_null()
    }

    /// Puts `t` in; returns the token it displaced.
    pub(crate) fn put(&self, t: T) -> Option<T> {
        let p = self.ptr.swap(t.into_raw(), Ordering::AcqRel);
        // SAFETY: a non-null pointer in the slot came from `into_raw` (only
        // `put` stores one), and the swap took it out: nobody else has it.
        (!p.is_null()).then(|| unsafe { T::from_raw(p) })
    }

    /// Takes the token out, if there is one.
    pub(crate) fn take(&self) -> Option<T> {
        // A plain load first: the slot is usually empty, and a swap is a
        // locked instruction. A token put in after the load is the owner's
        // own, and the owner is the caller or takes it itself later.
        if self.ptr.load(Ordering::Relaxed).is_null() {
            return None;
        }
        let p = self.ptr.swap(std::ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: as in `put`.
        (!p.is_null()).then(|| unsafe { T::from_raw(p) })
    }
}

impl<T: Token> Drop for NextSlot<T> {
    fn drop(&mut self) {
        // Every token still in the slot is released with it.
        drop(self.take());
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// A token's contents: a value, and a count of drops shared by all.
    struct Payload(u32, std::sync::Arc<AtomicUsize>);

    impl Drop for Payload {
        fn drop(&mut self) {
            self.1.fetch_add(1, Relaxed);
        }
    }

    struct Probe(Box<Payload>);

    // SAFETY: Box::into_raw never returns null, and from_raw undoes it.
    unsafe impl Token for Probe {
        type Target = Payload;
        fn into_raw(self) -> *mut Payload {
            Box::into_raw(self.0)
        }
        unsafe fn from_raw(p: *mut Payload) -> Self {
            // SAFETY: per the trait's contract.
            Probe(unsafe { Box::from_raw(p) })
        }
    }

    fn probe(v: u32, drops: &std::sync::Arc<AtomicUsize>) -> Probe {
        Probe(Box::new(Payload(v, drops.clone())))
    }

    /// The owner puts two tokens in a row and then takes, while the
    /// Dispatcher takes: every token comes out exactly once (each is
    /// dropped once, by whoever got it), and its contents are intact.
    #[test]
    fn every_token_comes_out_exactly_once() {
        loom::model(|| {
            let drops = std::sync::Arc::new(AtomicUsize::new(0));
            let slot = Arc::new(NextSlot::<Probe>::new());
            let thief = {
                let slot = slot.clone();
                thread::spawn(move || slot.take().map(|p| p.0 .0))
            };
            let mut seen = Vec::new();
            if let Some(d) = slot.put(probe(1, &drops)) {
                seen.push(d.0 .0);
            }
            if let Some(d) = slot.put(probe(2, &drops)) {
                seen.push(d.0 .0);
            }
            if let Some(t) = slot.take() {
                seen.push(t.0 .0);
            }
            if let Some(v) = thief.join().unwrap() {
                seen.push(v);
            }
            seen.sort_unstable();
            assert_eq!(seen, vec![1, 2]);
            assert!(!slot.is_occupied());
            assert_eq!(drops.load(Relaxed), 2);
        });
    }

    /// A token left in the slot is released when the slot is dropped.
    #[test]
    fn a_token_left_in_the_slot_is_dropped_with_it() {
        loom::model(|| {
            let drops = std::sync::Arc::new(AtomicUsize::new(0));
            let slot = NextSlot::<Probe>::new();
            assert!(slot.put(probe(1, &drops)).is_none());
            drop(slot);
            assert_eq!(drops.load(Relaxed), 1);
        });
    }
}
