//! Panics belong to the task: a task that switches out in the middle of an
//! unwind takes its share of std's per-thread panic count with it, and gets
//! it back when it resumes.
//!
//! # Why
//!
//! std keeps one panic count per thread (`coroutine/carrier.rs`). Without
//! this file, a task parked inside a destructor during its unwind (a sleep,
//! a channel, a lock, a hooked call) leaves the count raised on its thread,
//! and every other task that runs there meanwhile sees it: its
//! `thread::panicking()` answers true, each `std::sync::Mutex` it locked
//! before and releases now comes out poisoned, the hooks keep it from
//! parking (they block the thread while it "panics"), and the parked
//! holder of the lock it waits for never runs again.
//!
//! # The rule
//!
//! Whenever the Processer loop switches into a task, this thread's count is
//! zero; while a task runs, the thread's count is that task's. Kept by two
//! steps, both in the loop (never at a direct switch, which `processer/direct.rs`
//! declines for these tasks):
//!
//! 1. **Switch-out** ([`bank_at_switch_out`]): while `panicking()` is true
//!    the count is the task's own; finish one carrier after another on this
//!    thread (each lowers the count by one) until it is zero, and write the
//!    number down in the task ([`Banked::units`]). A carrier comes from the
//!    task's own (those its last switch-in started), then from the bank.
//!    Carriers the task no longer needs (its unwind ended while it ran) go
//!    back to the bank.
//! 2. **Switch-in** ([`restore_at_switch_in`]): start as many carriers as
//!    the task banked, on this thread (each raises the count by one), and
//!    keep them in the task for its next switch-out.
//!
//! A carrier is fungible: it raised some thread's count once and will lower
//! some thread's count once. The bank is a thread of its own
//! (`gofer-unwind-bank`, started at the first need): it hands out carriers
//! given back, or starts one on itself (raising its own count), and
//! finishes the carriers given back that nobody asked for (lowering it).
//! Its count is what the tasks parked mid-unwind owe: a task takes one
//! unit per level of unwind it banks beyond its own carriers and gives back
//! as many by the time it finishes, so the bank's count never goes below
//! zero, and every count (std's global one too) is back at zero once every
//! unwind is over. Nothing runs on that thread that could care about its
//! count.
//!
//! The cost is paid only by a task that switches out while unwinding: a
//! carrier start or finish is one unwind step on a small stack (a few
//! microseconds), and the first switch-out of an unwind may wait for the
//! bank. Every other switch pays one load (`panicking()`'s global count,
//! zero unless some thread unwinds) and one test of the task's run state.
//!
//! A `block_on` caller that itself unwinds runs its loop with a count that
//! is no task's: its loop neither banks nor restores (`ProcLocal::banks`),
//! and the tasks it runs see its count as before. A task parked mid-unwind
//! stays on its thread (`ProcLocal::pin_while_unwinding`), so it never comes
//! back through such a loop.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::coroutine::carrier::Carrier;
use crate::sys::lock::{Condvar, Mutex};

/// The part of a task's run state that carries its panic count across a
/// switch. `None` in the run state for every task that never switched out
/// while unwinding.
#[derive(Default)]
pub(crate) struct Banked {
    /// The units of count the task took off its thread at its last
    /// switch-out, to put back at its next switch-in.
    units: usize,
    /// Carriers started at its last switch-in, one per unit put back: the
    /// first ones its next switch-out finishes.
    carriers: Vec<Carrier>,
}

/// Step 1 (module docs): takes the running task's count off this thread.
/// Called by the loop right after `banked`'s task switched out, on the
/// thread it ran on. Cold: only for a task that unwinds or holds carriers.
#[cold]
#[inline(never)]
pub(crate) fn bank_at_switch_out(banked: &mut Option<Box<Banked>>) {
    let b = banked.get_or_insert_with(Default::default);
    debug_assert_eq!(b.units, 0, "a task banked twice without a switch-in");
    while std::thread::panicking() {
        let c = match b.carriers.pop() {
            Some(c) => c,
            None => take(),
        };
        c.finish();
        b.units += 1;
    }
    for c in b.carriers.drain(..) {
        give_back(c);
    }
    if b.units == 0 {
        *banked = None;
    }
}

/// Step 2 (module docs): puts the task's count back on this thread. Called
/// by the loop right before it switches into the task, with this thread's
/// count at zero.
#[cold]
#[inline(never)]
pub(crate) fn restore_at_switch_in(b: &mut Banked) {
    debug_assert!(
        !std::thread::panicking(),
        "a loop switching in with a count"
    );
    while b.units > 0 {
        let Some(c) = Carrier::start() else {
            crate::sys::fatal::fatal("no stack for a panic carrier: a task's unwind cannot resume");
        };
        b.carriers.push(c);
        b.units -= 1;
    }
}

/// Gives back the carriers of a task that finished (its count is zero:
/// its unwind, if any, ended at its root).
#[cold]
#[inline(never)]
pub(crate) fn release(banked: Banked) {
    debug_assert_eq!(banked.units, 0, "a finished task with banked units");
    for c in banked.carriers {
        give_back(c);
    }
}

/// The bank's order book and its pool of spare carriers.
struct Bank {
    state: Mutex<BankState>,
    /// The bank thread waits here for orders.
    orders: Condvar,
    /// Takers wait here for carriers.
    made: Condvar,
}

struct BankState {
    /// Carriers ready to be taken, fungible.
    spare: Vec<Carrier>,
    /// Carriers ordered by takers and not yet made.
    to_make: usize,
    /// Carriers given back, for the bank to finish (or to hand to a taker).
    to_finish: Vec<Carrier>,
}

static BANK: Bank = Bank {
    state: Mutex::new(BankState {
        spare: Vec::new(),
        to_make: 0,
        to_finish: Vec::new(),
    }),
    orders: Condvar::new(),
    made: Condvar::new(),
};

/// Whether the bank thread runs (it starts at the first order, for good).
static BANK_STARTED: AtomicBool = AtomicBool::new(false);

/// A carrier to finish on this thread: a spare, or one from the bank.
fn take() -> Carrier {
    let mut st = BANK.state.lock();
    loop {
        if let Some(c) = st.spare.pop() {
            return c;
        }
        // Order one (again, if another taker got the one we ordered: an
        // order in flight only ever brings one carrier too many, which the
        // bank finishes later).
        if st.to_make == 0 {
            start_bank();
            st.to_make += 1;
            BANK.orders.notify_one();
        }
        BANK.made.wait(&mut st);
    }
}

/// Hands a carrier nobody needs now to the bank, which finishes it on its
/// own thread (bringing the counts back to zero once every unwind is over)
/// or gives it to a taker.
fn give_back(c: Carrier) {
    let mut st = BANK.state.lock();
    if !BANK_STARTED.load(Ordering::Relaxed) {
        // Carriers exist only after the bank made the first one; kept
        // rather than lost should that ever not hold.
        st.spare.push(c);
        return;
    }
    st.to_finish.push(c);
    BANK.orders.notify_one();
}

fn start_bank() {
    if BANK_STARTED.swap(true, Ordering::Relaxed) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("gofer-unwind-bank".into())
        .stack_size(256 * 1024)
        .spawn(bank_thread);
    if spawned.is_err() {
        crate::sys::fatal::fatal(
            "could not start the panic-carrier bank thread: a task's unwind cannot switch out",
        );
    }
}

/// The bank: serves orders (a carrier given back, or one started on itself,
/// which raises its own count) and finishes the carriers given back beyond
/// that (lowering its count, never below zero).
fn bank_thread() {
    // This thread's panic count: carriers started here minus finished here.
    let mut own = 0usize;
    let mut st = BANK.state.lock();
    loop {
        while st.to_make == 0 && st.to_finish.is_empty() {
            BANK.orders.wait(&mut st);
        }
        // Orders first, from what came back.
        while st.to_make > 0 {
            let Some(c) = st.to_finish.pop() else { break };
            st.spare.push(c);
            st.to_make -= 1;
        }
        let make = std::mem::take(&mut st.to_make);
        let finish = std::mem::take(&mut st.to_finish);
        drop(st);
        let mut ready = Vec::with_capacity(make);
        for _ in 0..make {
            let Some(c) = Carrier::start() else {
                crate::sys::fatal::fatal(
                    "no stack for a panic carrier: a task's unwind cannot switch out",
                );
            };
            own += 1;
            ready.push(c);
        }
        for c in finish {
            if own > 0 {
                c.finish();
                own -= 1;
            } else {
                // Ruled out by the accounting in the module docs; kept as a
                // spare rather than wrapping this thread's count.
                ready.push(c);
            }
        }
        st = BANK.state.lock();
        st.spare.append(&mut ready);
        BANK.made.notify_all();
    }
}
