//! The park state machine of one task, on its own so that it can be
//! model-checked with loom (`RUSTFLAGS="--cfg loom" cargo test --release --lib park_state`).
//!
//! One atomic byte, five states:
//!
//! | state              | meaning                                                |
//! |--------------------|--------------------------------------------------------|
//! | `EMPTY`            | running, queued, or switching out; no wake-up pending  |
//! | `NOTIFIED`         | an `unpark` arrived that no `park` has consumed yet    |
//! | `PARKED`           | suspended with its context saved                       |
//! | `DUMPING`          | parked, and a task dump holds its right to run while it walks its stack |
//! | `DUMPING_NOTIFIED` | as `DUMPING`, and an `unpark` arrived meanwhile: the dump schedules the task when it is done |
//!
//! Transitions, with the side that performs each:
//!
//! ```text
//!  task, in park():          NOTIFIED -> EMPTY     (Acquire) consume the token, return at once
//!  Processer, after switch:  EMPTY    -> PARKED    (Release) the context is saved
//!  Processer, after switch:  NOTIFIED -> EMPTY     (Acquire swap) an unpark came while switching out: requeue
//!  unpark():                 EMPTY    -> NOTIFIED  (Release) task running or still switching out
//!  unpark():                 NOTIFIED -> NOTIFIED  (Release) a write even so: publishes the
//!                                                  caller's writes to the token's consumer
//!  unpark():                 PARKED   -> EMPTY     (AcqRel) the winner schedules the task
//!  unpark():                 DUMPING  -> DUMPING_NOTIFIED (Release) the dump will schedule it
//!  dump:                     PARKED   -> DUMPING   (Acquire) the dump holds the right to run
//!  dump, done:               DUMPING  -> PARKED    (Release) nothing came: parked as before
//!  dump, done:               DUMPING_NOTIFIED -> EMPTY (Acquire swap) the dump schedules the task
//! ```
//!
//! The task never sets `PARKED` itself: the Processer does, after the switch
//! has returned and the saved context is stored, so an unparker that sees
//! `PARKED` can never resume a half-saved context. Both sides of the race
//! where an unpark arrives during the switch-out:
//!
//! ```text
//!  task T on Processer P                  unparker U on another thread
//!  1. park(): no token (EMPTY)            1. unpark(): load EMPTY
//!  2. switch out to P                     2. CAS EMPTY -> NOTIFIED succeeds: done
//!  3. P: CAS EMPTY -> PARKED fails
//!  4. P: CAS NOTIFIED -> EMPTY, requeue T (T's park() returns: token consumed)
//! ```
//!
//! ```text
//!  task T on Processer P                  unparker U
//!  1. park(): switch out to P
//!  2. P: stores T's context (plain write)
//!  3. P: CAS EMPTY -> PARKED (Release)    1. unpark(): CAS PARKED -> EMPTY (AcqRel)
//!                                         2. U alone now may resume T, and sees the
//!                                            context written in step 2
//! ```
//!
//! Exactly one `unpark` can win `PARKED -> EMPTY`, so a task is never
//! scheduled twice.
//!
//! A task dump (`debug/`) walks a parked task's stack without resuming its
//! code, and for that it needs the right to run the task for a moment: no
//! Processer may resume the context it is reading. It takes the right with
//! `PARKED -> DUMPING`, which no `unpark` can win, and gives it back with
//! `DUMPING -> PARKED`. An `unpark` that lands meanwhile is not lost and not
//! doubled: it moves the state to `DUMPING_NOTIFIED` and returns "not
//! mine", and the dump, failing its `DUMPING -> PARKED`, becomes the one
//! that schedules the task:
//!
//! ```text
//!  dump D                                 unparker U
//!  1. CAS PARKED -> DUMPING (Acquire)
//!  2. read the context, walk the stack    1. unpark(): CAS DUMPING -> DUMPING_NOTIFIED
//!                                            (Release); returns false: not U's to run
//!  3. CAS DUMPING -> PARKED fails
//!  4. swap EMPTY (Acquire): D schedules
//!     the task, which sees U's writes
//! ``` A late `unpark` leaves `NOTIFIED`, which makes the next
//! `park` return at once: a spurious wake-up, allowed by the API.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU8, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU8, Ordering};

const EMPTY: u8 = 0;
const NOTIFIED: u8 = 1;
const PARKED: u8 = 2;
const DUMPING: u8 = 3;
const DUMPING_NOTIFIED: u8 = 4;

/// What the Processer learns when it tries to park a task that switched out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum ParkOutcome {
    /// The task is parked; whoever wins [`ParkState::unpark`] resumes it.
    Parked,
    /// An unpark raced the switch-out; its token is consumed and the task
    /// must be requeued by the Processer (its `park` returns).
    Requeue,
}

/// The park state of one task.
#[derive(Debug)]
pub(crate) struct ParkState(AtomicU8);

impl ParkState {
    pub(crate) fn new() -> ParkState {
        ParkState(AtomicU8::new(EMPTY))
    }

    /// Task side, before switching out: consumes a pending token
    /// (`NOTIFIED -> EMPTY`). True means "do not switch out, return".
    pub(crate) fn take_token(&self) -> bool {
        // Acquire: pairs with the Release of `unpark`'s EMPTY -> NOTIFIED, so
        // what the unparker wrote before unpark() is visible after park().
        self.0
            .compare_exchange(NOTIFIED, EMPTY, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Processer side, after the task switched out to park and its context
    /// was stored.
    pub(crate) fn try_park(&self) -> ParkOutcome {
        // Release: publishes the stored context to the unparker that wins
        // PARKED -> EMPTY. Acquire on failure: pairs with the unparker's
        // Release, for the same reason as take_token.
        match self
            .0
            .compare_exchange(EMPTY, PARKED, Ordering::Release, Ordering::Acquire)
        {
            Ok(_) => ParkOutcome::Parked,
            Err(NOTIFIED) => {
                // Consume the token with a read-modify-write, not a store:
                // another unpark may rewrite NOTIFIED (its Release write)
                // right after the failed CAS, and a plain store would erase
                // it without synchronising with it, so the task could miss
                // that unparker's writes. The swap reads the latest write.
                // Only the task (switched out, so not now) and this Processer
                // consume tokens; unparkers never leave NOTIFIED.
                self.0.swap(EMPTY, Ordering::Acquire);
                ParkOutcome::Requeue
            }
            Err(s) => unreachable!("park state {s} while the task was switching out"),
        }
    }

    /// A task dump: takes the right to run a parked task, so that its saved
    /// context can be read and its stack walked (`PARKED -> DUMPING`). False
    /// if the task is not parked.
    pub(crate) fn try_begin_dump(&self) -> bool {
        // Acquire: pairs with try_park's Release, as an unparker's win does:
        // the stored context (and what the task wrote before it switched
        // out) is visible.
        self.0
            .compare_exchange(PARKED, DUMPING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// A task dump is done with a task it took with
    /// [`try_begin_dump`](Self::try_begin_dump). True means an `unpark`
    /// arrived meanwhile: the dump still holds the right to run the task and
    /// must schedule it. False: the task is parked again.
    pub(crate) fn end_dump(&self) -> bool {
        // Release: publishes the context the dump may have replaced to the
        // unparker that wins PARKED -> EMPTY next.
        match self
            .0
            .compare_exchange(DUMPING, PARKED, Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => false,
            Err(DUMPING_NOTIFIED) => {
                // Acquire: pairs with the unparkers' Release writes, so the
                // task the dump schedules sees what they wrote. A swap, not
                // a store, for the reason given in try_park. Unparkers only
                // rewrite DUMPING_NOTIFIED with itself meanwhile.
                self.0.swap(EMPTY, Ordering::Acquire);
                true
            }
            Err(s) => unreachable!("park state {s} during a dump"),
        }
    }

    /// Any thread: wakes the task. True means this call moved it out of
    /// `PARKED`, and the caller now holds the right to resume it.
    pub(crate) fn unpark(&self) -> bool {
        let mut s = self.0.load(Ordering::Relaxed);
        loop {
            let (to, success) = match s {
                // Already notified: still write (NOTIFIED -> NOTIFIED) with
                // Release. Returning on the load alone would not publish the
                // caller's writes: the task could consume the older token,
                // miss the condition this unpark is about, and sleep forever
                // (the loom model `a_condition_set_before_unpark_...`).
                NOTIFIED => (NOTIFIED, Ordering::Release),
                // Release: pairs with the Acquire of take_token / try_park.
                EMPTY => (NOTIFIED, Ordering::Release),
                // AcqRel: Acquire pairs with try_park's Release (the saved
                // context); Release publishes our writes to the woken task.
                PARKED => (EMPTY, Ordering::AcqRel),
                // DUMPING or DUMPING_NOTIFIED: a dump holds the task; leave
                // the wake-up for it (Release: pairs with the dump's Acquire
                // swap in `end_dump`).
                _ => (DUMPING_NOTIFIED, Ordering::Release),
            };
            match self
                .0
                .compare_exchange_weak(s, to, success, Ordering::Relaxed)
            {
                Ok(_) => return s == PARKED,
                Err(now) => s = now,
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    //! Exhaustive interleavings of the park protocol. The "task" thread
    //! plays both the task (park) and its Processer (try_park); a resume is
    //! modelled by a counter that must end at exactly the expected value.

    use super::*;
    use loom::sync::atomic::AtomicUsize;
    use loom::sync::Arc;
    use loom::thread;

    /// Task side of one park: returns true if the task went to sleep
    /// (someone else must resume it), false if park returned at once.
    fn park(st: &ParkState) -> bool {
        if st.take_token() {
            return false;
        }
        // ... switch out; the Processer stores the context, then:
        match st.try_park() {
            ParkOutcome::Parked => true,
            ParkOutcome::Requeue => false,
        }
    }

    #[test]
    fn unpark_racing_the_switch_out_is_never_lost_nor_doubled() {
        loom::model(|| {
            let st = Arc::new(ParkState::new());
            let resumed = Arc::new(AtomicUsize::new(0));
            let u = {
                let (st, resumed) = (st.clone(), resumed.clone());
                thread::spawn(move || {
                    if st.unpark() {
                        resumed.fetch_add(1, Ordering::SeqCst);
                    }
                })
            };
            let slept = park(&st);
            u.join().unwrap();
            let r = resumed.load(Ordering::SeqCst);
            if slept {
                // The only unpark came after PARKED: it must have resumed us.
                assert_eq!(r, 1, "lost wake-up");
            } else {
                assert_eq!(r, 0, "resumed a task that never parked");
            }
        });
    }

    #[test]
    fn the_unpark_winner_sees_the_context_saved_before_parking() {
        // The saved context is plain memory written by the Processer before
        // try_park and read by whoever resumes the task: loom reports a data
        // race if the orderings do not carry that write across.
        use loom::cell::UnsafeCell;
        loom::model(|| {
            let st = Arc::new(ParkState::new());
            let ctx = Arc::new(UnsafeCell::new(0usize));
            let u = {
                let (st, ctx) = (st.clone(), ctx.clone());
                thread::spawn(move || {
                    if st.unpark() {
                        // We won: resume the task, which reads its context.
                        // SAFETY: a plain read of the modelled context; loom
                        // reports it if it races the write.
                        ctx.with(|c| assert_eq!(unsafe { *c }, 42));
                    }
                })
            };
            if !st.take_token() {
                // Switched out: the Processer stores the context, then parks.
                // SAFETY: a plain write of the modelled context; loom
                // reports it if it races the read.
                ctx.with_mut(|c| unsafe { *c = 42 });
                let _ = st.try_park();
            }
            u.join().unwrap();
        });
    }

    #[test]
    fn a_condition_set_before_unpark_is_seen_even_through_a_stale_token() {
        // The waiter pattern every primitive uses: the waker sets a flag and
        // unparks; the task loops "check flag, park". A stale token (from an
        // earlier unpark) must not let the task consume it, miss the flag,
        // and sleep forever: unpark has to publish the flag even when it
        // finds NOTIFIED already set.
        loom::model(|| {
            let st = Arc::new(ParkState::new());
            let flag = Arc::new(loom::sync::atomic::AtomicBool::new(false));
            assert!(!st.unpark()); // the stale token
            let resumed = Arc::new(AtomicUsize::new(0));
            let w = {
                let (st, flag, resumed) = (st.clone(), flag.clone(), resumed.clone());
                thread::spawn(move || {
                    flag.store(true, Ordering::Relaxed);
                    if st.unpark() {
                        resumed.fetch_add(1, Ordering::SeqCst);
                    }
                })
            };
            // Waiter loop, at most two rounds (the first may eat the stale
            // token).
            let mut asleep = false;
            for _ in 0..2 {
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                if park(&st) {
                    asleep = true;
                    break;
                }
            }
            w.join().unwrap();
            if asleep {
                assert_eq!(resumed.load(Ordering::SeqCst), 1, "lost wake-up");
            } else {
                assert!(flag.load(Ordering::Relaxed) || resumed.load(Ordering::SeqCst) == 0);
            }
        });
    }

    #[test]
    fn two_unparkers_resume_a_parked_task_exactly_once() {
        loom::model(|| {
            let st = Arc::new(ParkState::new());
            let resumed = Arc::new(AtomicUsize::new(0));
            let mut hs = Vec::new();
            for _ in 0..2 {
                let (st, resumed) = (st.clone(), resumed.clone());
                hs.push(thread::spawn(move || {
                    if st.unpark() {
                        resumed.fetch_add(1, Ordering::SeqCst);
                    }
                }));
            }
            let slept = park(&st);
            for h in hs {
                h.join().unwrap();
            }
            let r = resumed.load(Ordering::SeqCst);
            assert_eq!(r, usize::from(slept), "slept={slept} resumed={r}");
        });
    }

    #[test]
    fn a_stale_token_makes_the_next_park_return_at_once() {
        loom::model(|| {
            let st = Arc::new(ParkState::new());
            // An unpark that lands while the task runs (a timer that lost
            // its race, say) leaves a token...
            assert!(!st.unpark());
            // ...and the next park consumes it without sleeping.
            assert!(!park(&st));
            // Then the state is clean: a park with a concurrent unpark is
            // either resumed by it or consumes it.
            let resumed = Arc::new(AtomicUsize::new(0));
            let u = {
                let (st, resumed) = (st.clone(), resumed.clone());
                thread::spawn(move || {
                    if st.unpark() {
                        resumed.fetch_add(1, Ordering::SeqCst);
                    }
                })
            };
            let slept = park(&st);
            u.join().unwrap();
            assert_eq!(resumed.load(Ordering::SeqCst), usize::from(slept));
        });
    }

    #[test]
    fn a_dump_racing_an_unpark_neither_loses_nor_doubles_the_wake_up() {
        // The task is parked; a dump takes it and gives it back while an
        // unparker wakes it. Exactly one of them schedules the task, and
        // the saved context the dump rewrote is what the scheduler reads.
        use loom::cell::UnsafeCell;
        loom::model(|| {
            let st = Arc::new(ParkState::new());
            let ctx = Arc::new(UnsafeCell::new(1usize));
            assert_eq!(st.try_park(), ParkOutcome::Parked);
            let resumed = Arc::new(AtomicUsize::new(0));
            let u = {
                let (st, ctx, resumed) = (st.clone(), ctx.clone(), resumed.clone());
                thread::spawn(move || {
                    if st.unpark() {
                        // SAFETY: a plain read of the modelled context.
                        ctx.with(|c| assert!(unsafe { *c } >= 1));
                        resumed.fetch_add(1, Ordering::SeqCst);
                    }
                })
            };
            if st.try_begin_dump() {
                // The dump holds the right: it may replace the context.
                // SAFETY: a plain write of the modelled context; loom reports
                // it if it races the unparker's read.
                ctx.with_mut(|c| unsafe { *c = 2 });
                if st.end_dump() {
                    // SAFETY: as above, the dump holds the right.
                    ctx.with(|c| assert_eq!(unsafe { *c }, 2));
                    resumed.fetch_add(1, Ordering::SeqCst);
                }
            }
            u.join().unwrap();
            assert_eq!(
                resumed.load(Ordering::SeqCst),
                1,
                "woken once, scheduled once"
            );
        });
    }

    #[test]
    fn a_task_parking_twice_is_resumed_once_per_sleep() {
        // Two park cycles against two unparks. A parked task runs again only
        // when an unparker wins PARKED -> EMPTY, so the second park happens
        // after that win (modelled by a release flag the winner sets).
        loom::model(|| {
            let st = Arc::new(ParkState::new());
            let wins = Arc::new(AtomicUsize::new(0));
            let u = {
                let (st, wins) = (st.clone(), wins.clone());
                thread::spawn(move || {
                    for _ in 0..2 {
                        if st.unpark() {
                            wins.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                })
            };
            let first = park(&st);
            if first {
                // Asleep: only an unpark win can let the task go on.
                u.join().unwrap();
                let w = wins.load(Ordering::SeqCst);
                assert_eq!(w, 1, "parked once, resumed {w} times");
                // The second unpark (if it came after the win) left a token.
                let second = park(&st);
                assert!(!second || wins.load(Ordering::SeqCst) == 1);
            } else {
                // Tokens do not accumulate (like std::thread::park): if both
                // unparks land before this park, it sleeps with no wake-up
                // pending. What must hold: never resumed more than it slept.
                let second = park(&st);
                u.join().unwrap();
                assert!(wins.load(Ordering::SeqCst) <= usize::from(second));
            }
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn transitions_follow_the_table() {
        let st = ParkState::new();
        assert!(!st.take_token(), "no token at start");
        assert!(!st.unpark(), "unpark of a running task leaves a token");
        assert!(!st.unpark(), "tokens do not accumulate");
        assert!(st.take_token());
        assert!(!st.take_token());
        assert_eq!(st.try_park(), ParkOutcome::Parked);
        assert!(st.unpark(), "the first unpark of a parked task wins");
        assert!(!st.unpark(), "the second only leaves a token");
        assert_eq!(st.try_park(), ParkOutcome::Requeue);
        assert_eq!(st.try_park(), ParkOutcome::Parked);
        assert!(st.try_begin_dump(), "a dump takes a parked task");
        assert!(!st.try_begin_dump(), "once");
        assert!(!st.end_dump(), "nothing came: parked again");
        assert!(st.try_begin_dump());
        assert!(
            !st.unpark(),
            "an unpark during a dump leaves the task to it"
        );
        assert!(!st.unpark());
        assert!(st.end_dump(), "the dump schedules the task");
        assert!(!st.try_begin_dump(), "the task is no longer parked");
        assert!(!st.unpark(), "a running task gets a token");
        assert!(st.take_token());
    }
}
