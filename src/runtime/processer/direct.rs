//! The direct switch: a task that yields or parks goes straight into the
//! next task of its Processer, with one context switch instead of two and
//! no pass through the Processer loop. The filing protocol is model-checked
//! with loom (`RUSTFLAGS="--cfg loom" cargo test --release --lib direct`).
//!
//! # Through the loop, and direct
//!
//! Through the loop, a task T switching out resumes the loop's context; the
//! loop stores T's context in its run state, files T (yield: queue it;
//! park: `EMPTY -> PARKED`, or requeue if an unpark raced; done: gc), picks
//! the next task N and resumes it: two switches, T -> loop -> N.
//!
//! Direct, T does the loop's work around the switch itself, in two halves:
//!
//! ```text
//!  T's stack, T's Processer thread          N's stack, the same thread
//!  -------------------------------          --------------------------
//!  1. switch_out(reason): prepare ->
//!     ProcLocal::begin_direct: pick N from
//!     our own queues as next_task would;
//!     N must have a saved context on its
//!     own stack with room below it; take
//!     it. N becomes the task switched in
//!     (`switched_in`, `current`, the switch
//!     counters, `home`); T's Runnable goes
//!     into the Filing on T's stack.
//!  2. switch_direct: N.resume_ontop ------> 3. file_on_top: copy the Handoff and
//!                                              the Filing out of T's stack, then
//!                                              ProcLocal::end_direct (`file`):
//!                                              dense-stack check, `blocked` reset,
//!                                              unwind pin, then STORE T's context
//!                                              in its run state, THEN publish T:
//!                                              queue it (yield), or park it
//!                                              (`EMPTY -> PARKED`, or requeue if
//!                                              an unpark raced)
//!                                           4. N continues in its own suspended
//!                                              switch, with the loop's context
//! ```
//!
//! The loop stays suspended in `run_task` under all of this; whichever task
//! finally switches back to it (a yield or park with no direct switch, or a
//! finish) is the one in `switched_in`, which the loop takes out and files.
//!
//! # Who may touch what, and when
//!
//! A task's run state (its saved context) belongs to the holder of its
//! `Runnable` (`task/header.rs`). At a direct switch the right to run N passes
//! from the queue to this Processer at the pick (an owner pop, which no
//! thief can also win), and the right to run T passes from this Processer
//! to the world at step 3's publication. Between step 1 and step 3, T's
//! `Runnable` sits in the Filing on T's own stack, reachable by nobody else:
//! it is neither queued nor parked (its park state is `EMPTY` or
//! `NOTIFIED`), so no thief, unparker or dump can take it. The races, both
//! sides each:
//!
//! - **An unpark before T is filed.** T parks (its `take_token` found no
//!   token), and an unparker on another thread calls `unpark` while T is
//!   between steps 1 and 3. It finds `EMPTY`, sets `NOTIFIED` and is done:
//!   step 3's `EMPTY -> PARKED` fails, the filing consumes the token and
//!   requeues T here (T's `park` returns, as after any raced park). An
//!   unpark after step 3's `EMPTY -> PARKED` (Release) wins
//!   `PARKED -> EMPTY` (AcqRel) and schedules T, anywhere: it sees the
//!   context stored before (the loom model
//!   `an_unpark_racing_a_direct_switch_resumes_the_task_once_with_its_context`).
//! - **A thief or the Dispatcher taking the task we pick.** The pick uses
//!   the owner's side of our own queues only: the next-task slot's swap
//!   (the Dispatcher's `steal_all` swaps too: one of us gets it), the
//!   runnable queue's owner `pop` (crossbeam's protocol against `steal`:
//!   one gets it), the local pinned queue (nobody else's). What we got is
//!   ours; what the Dispatcher got is its to move.
//! - **A thief or the Dispatcher taking T once filed.** T is queued only
//!   after its context is stored, by a push that publishes it (Release),
//!   and any steal of it Acquires: the thief resumes the stored context
//!   (the loom model `a_task_filed_at_a_direct_switch_is_stolen_with_its_context`).
//!   T's stack is not used by this thread after that: steps 3 and 4 run on
//!   N's stack, and the Filing and Handoff were copied out before.
//! - **The Dispatcher rescuing a blocked Processer meanwhile.** It moves
//!   what is queued here (`dispatcher::steal_all`); neither the task
//!   switched in nor the one being filed is queued. Every direct switch
//!   counts a switch (`p.switches`), as the loop does, so a Processer going
//!   from task to task directly is never taken for blocked; and a switch-out
//!   clears `blocked`, the loop's way, in `file`.
//! - **A panic.** None may cross a switch. The task side (step 1) runs as
//!   ordinary code on T's stack and changes nothing before its last
//!   possible panic; step 3 runs inside `catch_unwind` in `file_on_top`,
//!   and a panic there is fatal, as one escaping a task's root is in
//!   `entry`: there is no frame below to unwind into.
//! - **A task dump.** A dump walks only a task it took out of `PARKED`
//!   (`PARKED -> DUMPING`, Acquire): T is parked only by step 3's Release,
//!   after its context is stored. A dump may have left N's context inside
//!   its walk frame (`in_walk`): the pick clears `in_walk` as the loop
//!   does, and `file_on_top`'s even transfer word makes the walk frame
//!   return into N's switch (`runtime/dump/walk.rs`).
//!
//! # What keeps the loop in charge
//!
//! `begin_direct` declines (the task goes through the loop) on a `block_on`
//! caller (its loop checks its condition after every task), in chaos mode
//! (which moves every task switching out), when timers are due, and at
//! every [`NEW_QUEUE_INTERVAL`](crate::runtime::processer::NEW_QUEUE_INTERVAL)th
//! pick, which is the loop's periodic look outward (timers, readiness,
//! remote queues, the peers' watch): fewer than that many direct switches
//! in a row. A picked task that cannot be switched into directly (its first run,
//! which needs a stack and the loop's entry slot, or a context on a fiber's
//! stack, or too little stack free for the filing) waits in `picked`, and
//! the loop runs it next. Pins hold: the pick comes from our own queues,
//! which hold only tasks that may run here, and T is filed by `push_local`,
//! which keeps a pinned task off the stealable queue; a task is bound to
//! its Processer at its first run, which is always the loop's.
//!
//! # Thread-locals
//!
//! [`switch_out`] runs on T's stack and returns on whatever thread resumes
//! T; its own body reads no thread-local. [`prepare`] (the pick; it touches
//! crossbeam's epoch, a thread-local, when a queue resizes) is
//! `#[inline(never)]` and returns before the switch; `switch_direct` reads
//! the loop's context through its own `#[inline(never)]` accessors; the
//! filing runs on the switch's thread, never switches, and is reached only
//! through the handoff's function pointer. `scripts/check_tls_switch.py`
//! checks every caller of `switch_direct` as it does those of `suspend`.

use std::mem::MaybeUninit;

use context::Context;

use crate::coroutine::switch::{self, Suspend};
use crate::runtime::context as here;
use crate::runtime::processer::ProcLocal;
use crate::runtime::task::Runnable;

/// What step 3 needs to file the task that switched out; on its stack.
struct Filing {
    /// The Processer whose thread the switch happens on.
    local: *const ProcLocal,
    /// The execution right of the task switching out (written by
    /// [`prepare`] when it returns a context).
    task: MaybeUninit<Runnable>,
    /// Why it switches out: [`Suspend::Yield`] or [`Suspend::Park`].
    why: Suspend,
}

/// Switches the running task out, for `why` ([`Suspend::Yield`] or
/// [`Suspend::Park`]): straight into the next task when its Processer has
/// one ready (module docs), else back to the Processer loop. Returns when
/// the task is resumed.
///
/// Called on the running task's stack only.
pub(crate) fn switch_out(why: Suspend) {
    debug_assert!(why != Suspend::Done);
    let mut filing = Filing {
        local: std::ptr::null(),
        task: MaybeUninit::uninit(),
        why,
    };
    match prepare(&mut filing) {
        Some(next) => {
            let arg = &mut filing as *mut Filing as usize;
            // SAFETY: `prepare` took `next`'s context out of its run state
            // with its execution right (now in `switched_in`), and it is not
            // ours; `file_switched_out` takes the `Filing` prepare filled,
            // which stays on our stack until it is copied out.
            unsafe { switch::switch_direct(next, file_switched_out, arg) }
        }
        None => switch::suspend(why),
    }
}

/// Step 1 (module docs): the pick and the switch-in bookkeeping, on the
/// switching task's stack. Fills `filing` and returns the next task's
/// context, or `None` for a switch through the loop. Never switches, and
/// not inlined: it reads thread-locals.
#[inline(never)]
fn prepare(filing: &mut Filing) -> Option<Context> {
    let p = here::current_proc_ptr();
    if p.is_null() {
        return None;
    }
    // SAFETY: this thread's running Processer loop, suspended under the
    // running task; it outlives the task's run here. Shared access only.
    let local = unsafe { &*p };
    let (t, next) = local.begin_direct()?;
    filing.local = p;
    filing.task.write(t);
    Some(next)
}

/// Step 3 (module docs): files the task that switched out, on the next
/// task's stack; the `file` of [`switch::switch_direct`].
///
/// # Safety
/// `arg` is the address of a [`Filing`] that [`prepare`] filled, on the
/// stack of the task that switched out, whose context is `ctx`; called once.
unsafe fn file_switched_out(arg: usize, ctx: Context) {
    let f = arg as *mut Filing;
    // SAFETY: per the contract; everything is copied out before the task is
    // published (by `end_direct`), after which its stack may be reused. The
    // Runnable is moved out once (prepare wrote it; nothing else reads it).
    let (local, t, why) = unsafe { ((*f).local, (*f).task.assume_init_read(), (*f).why) };
    // SAFETY: the Processer of this thread, whose loop is suspended below
    // the tasks it runs; shared access only.
    unsafe { &*local }.end_direct(t, ctx, why);
}

#[cfg(all(test, loom))]
mod loom_models {
    //! The filing protocol of a direct switch. The "Processer" thread plays
    //! the task switching out and, on the next task's stack, its filing
    //! (which happen on one thread, in that order); the saved context is a
    //! plain cell in the task, which loom reports if a read of it races its
    //! store. The queue a yield files to is the next-task slot (the queue
    //! the Dispatcher also takes from), the real one.

    use crate::runtime::processer::next_slot::{NextSlot, Token};
    use crate::runtime::task::park_state::{ParkOutcome, ParkState};
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::Arc;
    use loom::thread;

    /// A task: its saved context (0: none saved) and its park state.
    struct ModelTask {
        id: usize,
        ctx: UnsafeCell<usize>,
        park: ParkState,
    }

    /// The execution right of a modelled task.
    struct Right(Box<ModelTask>);

    // SAFETY: Box::into_raw never returns null, and from_raw undoes it.
    unsafe impl Token for Right {
        type Target = ModelTask;
        fn into_raw(self) -> *mut ModelTask {
            Box::into_raw(self.0)
        }
        unsafe fn from_raw(p: *mut ModelTask) -> Right {
            // SAFETY: per the trait's contract.
            Right(unsafe { Box::from_raw(p) })
        }
    }

    fn task(id: usize, ctx: usize) -> Right {
        Right(Box::new(ModelTask {
            id,
            ctx: UnsafeCell::new(ctx),
            park: ParkState::new(),
        }))
    }

    /// Resuming a task: take its saved context (it must be the one stored).
    fn resume(t: &Right) -> usize {
        // SAFETY: a plain access to the modelled context, by the holder of
        // the right; loom reports it if it races the store.
        t.0.ctx
            .with_mut(|c| unsafe { std::mem::replace(&mut *c, 0) })
    }

    /// Step 3's store of the switched-out task's context.
    fn store(t: &Right, ctx: usize) {
        // SAFETY: as in `resume`.
        t.0.ctx.with_mut(|c| unsafe { *c = ctx });
    }

    /// T yields with a direct switch into N, picked from the next-task
    /// slot; T is filed back into the slot. Meanwhile the Dispatcher
    /// (rescuing the Processer) takes what it finds in the slot and runs
    /// it. Every task runs exactly once, with the context it was saved
    /// with, and neither is lost.
    #[test]
    fn a_task_filed_at_a_direct_switch_is_stolen_with_its_context() {
        loom::model(|| {
            let slot = Arc::new(NextSlot::<Right>::new());
            assert!(slot.put(task(2, 20)).is_none()); // N, queued, started
            let ran = Arc::new(AtomicUsize::new(0));
            let thief = {
                let (slot, ran) = (slot.clone(), ran.clone());
                thread::spawn(move || {
                    if let Some(t) = slot.take() {
                        assert_eq!(resume(&t), t.0.id * 10, "stolen without its context");
                        ran.fetch_add(t.0.id, Ordering::SeqCst);
                    }
                })
            };
            // The Processer: T (id 1) is switched in, its context is live.
            let t = task(1, 0);
            // 1. pick N with the owner's take.
            if let Some(n) = slot.take() {
                assert_eq!(resume(&n), 20);
                ran.fetch_add(n.0.id, Ordering::SeqCst);
                // 3. on N's stack: store T's context, then publish T.
                store(&t, 10);
                assert!(slot.put(t).is_none(), "the slot had only N");
            } else {
                // The Dispatcher took N: T goes through the loop, which
                // runs it again.
                store(&t, 10);
                assert_eq!(resume(&t), 10);
                ran.fetch_add(t.0.id, Ordering::SeqCst);
            }
            thief.join().unwrap();
            // The owner runs what is left in the slot.
            if let Some(t) = slot.take() {
                assert_eq!(resume(&t), t.0.id * 10);
                ran.fetch_add(t.0.id, Ordering::SeqCst);
            }
            assert_eq!(ran.load(Ordering::SeqCst), 1 + 2, "each task ran once");
        });
    }

    /// T parks with a direct switch while another thread unparks it. The
    /// filing stores T's context and then parks it; T runs again exactly
    /// once: at once (the unpark left a token before T switched out),
    /// requeued by its Processer (the unpark raced the switch-out), or
    /// resumed by the unparker (which won `PARKED -> EMPTY`); and whoever
    /// resumes it sees the context.
    #[test]
    fn an_unpark_racing_a_direct_switch_resumes_the_task_once_with_its_context() {
        loom::model(|| {
            // The task's address, with the whole box's provenance: what a
            // waiter list keeps to unpark it.
            let header = Right::into_raw(task(1, 0));
            // SAFETY: just made by into_raw; taken back once.
            let t = unsafe { Right::from_raw(header) };
            let addr = header as usize;
            let runs = Arc::new(AtomicUsize::new(0));
            let u = {
                let runs = runs.clone();
                thread::spawn(move || {
                    // SAFETY: the task is freed only after this thread is
                    // joined.
                    let h = unsafe { &*(addr as *const ModelTask) };
                    if h.park.unpark() {
                        // Won: the right is ours; resume the task.
                        // SAFETY: a plain read of the modelled context by
                        // the holder of the right.
                        h.ctx.with(|c| assert_eq!(unsafe { *c }, 10));
                        runs.fetch_add(1, Ordering::SeqCst);
                    }
                })
            };
            let mut parked = false;
            if t.0.park.take_token() {
                // The unpark came first: park returns at once.
                runs.fetch_add(1, Ordering::SeqCst);
                drop(t);
            } else {
                // Switched out directly; step 3, on the next task's stack:
                // store the context, then park.
                store(&t, 10);
                match t.0.park.try_park() {
                    ParkOutcome::Parked => {
                        // The parked state keeps the right (leaked, as
                        // Runnable::park does); the winner takes it.
                        std::mem::forget(t);
                        parked = true;
                    }
                    ParkOutcome::Requeue => {
                        assert_eq!(resume(&t), 10);
                        runs.fetch_add(1, Ordering::SeqCst);
                        drop(t);
                    }
                }
            }
            u.join().unwrap();
            assert_eq!(runs.load(Ordering::SeqCst), 1, "runs again exactly once");
            if parked {
                // SAFETY: the right leaked into the parked state went to the
                // unparker, which is done with it: free the task here.
                drop(unsafe { Right::from_raw(header) });
            }
        });
    }

    /// The order matters, and the model sees it: publishing T before its
    /// context is stored lets a thief resume a context still being written.
    #[test]
    #[should_panic(expected = "Causality violation")]
    fn publishing_before_the_store_is_caught() {
        loom::model(|| {
            let slot = Arc::new(NextSlot::<Right>::new());
            let t = task(1, 0);
            let addr = &t.0.ctx as *const UnsafeCell<usize> as usize;
            let thief = {
                let slot = slot.clone();
                thread::spawn(move || {
                    let t = slot.take();
                    if let Some(t) = &t {
                        resume(t);
                    }
                    t // freed after the join, not while the store may run
                })
            };
            assert!(slot.put(t).is_none());
            // Too late: the task may be running elsewhere already.
            // SAFETY: racy on purpose (the point of the test); the cell
            // stays allocated until after the join.
            unsafe { &*(addr as *const UnsafeCell<usize>) }.with_mut(|c| unsafe { *c = 10 });
            drop(thief.join().unwrap());
        });
    }
}
