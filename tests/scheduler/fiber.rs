//! Fibers on their own: values both ways, panics, resuming a finished
//! fiber, the forced unwind of a dropped fiber (every destructor counted),
//! nesting, stacks (sizes, reuse, overflow reports).
//!
//! The fatal cases run in a child process (see `tests/scheduler/stack.rs`).

use crate::common;

use std::cell::Cell;
use std::hint::black_box;
use std::os::unix::process::ExitStatusExt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{child_scenario, describe, run_child};
use gofer::fiber::{Builder, Fiber, FiberResult, Yielder};
use gofer::SpawnError;

/// Counts its drops in a shared counter.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

/// Recurses `depth` frames of at least 4 KiB each.
#[inline(never)]
fn deep(depth: u32) -> u64 {
    let mut frame = [0u8; 4096];
    black_box(&mut frame);
    frame[depth as usize % 4096] = depth as u8;
    if depth == 0 {
        return black_box(frame[0]) as u64;
    }
    let below = deep(black_box(depth - 1));
    below + black_box(&frame)[depth as usize % 4096] as u64
}

fn expected_deep(depth: u32) -> u64 {
    (0..=depth).map(|d| (d as u8) as u64).sum()
}

#[test]
fn values_travel_both_ways_between_resume_and_suspend() {
    let mut f = Fiber::new(|y: &Yielder<u32, &'static str>, first: u32| {
        let next: u32 = y.suspend("one");
        (first + next) as u64
    });
    assert!(matches!(f.resume(1), FiberResult::Yield("one")));
    assert!(!f.is_finished());
    assert!(matches!(f.resume(2), FiberResult::Return(3)));
    assert!(f.is_finished());

    // A running sum: each input comes back added to all earlier ones.
    let mut sum = Fiber::new(|y: &Yielder<u64, u64>, mut x: u64| {
        let mut total = 0;
        while x != 0 {
            total += x;
            x = y.suspend(total);
        }
        format!("total {total}")
    });
    let mut expected = 0;
    for i in 1..=1000 {
        expected += i;
        assert_eq!(sum.resume(i), FiberResult::Yield(expected));
    }
    assert_eq!(
        sum.resume(0),
        FiberResult::Return(format!("total {expected}"))
    );
}

#[test]
fn a_fiber_suspends_from_any_call_depth() {
    fn walk(y: &Yielder<(), u32>, depth: u32) {
        if depth == 0 {
            return;
        }
        y.suspend(depth);
        walk(y, depth - 1);
    }
    let mut f = Fiber::new(|y: &Yielder<(), u32>, ()| walk(y, 50));
    for d in (1..=50).rev() {
        assert_eq!(f.resume(()), FiberResult::Yield(d));
    }
    assert_eq!(f.resume(()), FiberResult::Return(()));
}

#[test]
fn a_panic_in_the_fiber_comes_out_of_resume_and_finishes_it() {
    let mut f = Fiber::new(|y: &Yielder<(), u8>, ()| -> u8 {
        y.suspend(1);
        panic!("fiber boom {}", black_box(7));
    });
    assert_eq!(f.resume(()), FiberResult::Yield(1));
    let err = catch_unwind(AssertUnwindSafe(|| f.resume(()))).expect_err("the panic came out");
    let msg = err
        .downcast_ref::<String>()
        .expect("the payload of panic! with arguments");
    assert_eq!(msg, "fiber boom 7");
    assert!(f.is_finished());
}

#[test]
fn resuming_a_finished_fiber_panics_with_a_clear_message() {
    let mut returned = Fiber::new(|_: &Yielder<(), ()>, ()| 5);
    assert_eq!(returned.resume(()), FiberResult::Return(5));
    let mut panicked = Fiber::new(|_: &Yielder<(), ()>, ()| -> u8 { panic!("once") });
    assert!(catch_unwind(AssertUnwindSafe(|| panicked.resume(()))).is_err());

    for f in [&mut returned, &mut panicked] {
        assert!(f.is_finished());
        let err = catch_unwind(AssertUnwindSafe(|| f.resume(()))).expect_err("must panic");
        let msg = err
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| err.downcast_ref::<String>().map(String::as_str))
            .unwrap_or_default();
        assert!(
            msg.contains("resumed a fiber that has finished"),
            "unclear message: {msg:?}"
        );
    }
}

#[test]
fn dropping_a_suspended_fiber_runs_every_destructor_on_its_stack() {
    #[inline(never)]
    fn nested(y: &Yielder<(), u32>, drops: &Arc<AtomicUsize>, level: u32) {
        let _here = Counted(drops.clone());
        let _vec: Vec<Counted> = (0..3).map(|_| Counted(drops.clone())).collect();
        if level == 0 {
            y.suspend(0);
            unreachable!("a dropped fiber never returns from suspend");
        }
        y.suspend(level);
        nested(y, drops, level - 1);
    }

    let drops = counter();
    let after_suspend = Arc::new(AtomicUsize::new(0));
    let (d, a) = (drops.clone(), after_suspend.clone());
    let captured = Counted(drops.clone());
    let mut f = Fiber::new(move |y: &Yielder<(), u32>, ()| {
        let _captured = captured;
        nested(y, &d, 5);
        a.fetch_add(1, Ordering::SeqCst);
    });
    // Down to the innermost level: 6 levels of 4 values each are live, plus
    // the captured one.
    for level in (0..=5).rev() {
        assert_eq!(f.resume(()), FiberResult::Yield(level));
    }
    assert_eq!(drops.load(Ordering::SeqCst), 0, "nothing dropped yet");
    drop(f);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        6 * 4 + 1,
        "every value dropped"
    );
    assert_eq!(after_suspend.load(Ordering::SeqCst), 0, "no code ran on");
}

#[test]
fn dropping_a_fiber_that_never_ran_drops_its_closure() {
    let drops = counter();
    let ran = Arc::new(AtomicUsize::new(0));
    let (c, r) = (Counted(drops.clone()), ran.clone());
    let f = Fiber::new(move |_: &Yielder<(), ()>, ()| {
        let _c = c;
        r.fetch_add(1, Ordering::SeqCst);
    });
    assert!(!f.is_finished());
    drop(f);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[test]
fn a_fiber_that_catches_the_unwind_and_suspends_again_is_unwound_all_the_same() {
    let drops = counter();
    let caught = Arc::new(AtomicUsize::new(0));
    let (d, c) = (drops.clone(), caught.clone());
    let mut f = Fiber::new(move |y: &Yielder<(), u8>, ()| {
        let _outer = Counted(d.clone());
        let inner = {
            let d = d.clone();
            catch_unwind(AssertUnwindSafe(move || {
                let _inner = Counted(d);
                y.suspend(1);
            }))
        };
        assert!(inner.is_err(), "the drop unwound the suspend");
        c.fetch_add(1, Ordering::SeqCst);
        // Swallowed the unwind and suspends again: it starts over at once.
        y.suspend(2);
        unreachable!("suspend never returns while the fiber is unwound");
    });
    assert_eq!(f.resume(()), FiberResult::Yield(1));
    drop(f);
    assert_eq!(caught.load(Ordering::SeqCst), 1);
    assert_eq!(drops.load(Ordering::SeqCst), 2, "both values dropped");
}

#[test]
fn a_fiber_that_catches_the_unwind_and_returns_has_its_value_dropped() {
    let drops = counter();
    let d = drops.clone();
    let mut f = Fiber::new(move |y: &Yielder<(), ()>, ()| {
        let swallowed = catch_unwind(AssertUnwindSafe(|| y.suspend(())));
        assert!(swallowed.is_err());
        Counted(d) // the return value
    });
    assert_eq!(f.resume(()).into_yield(), Some(()));
    drop(f);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the returned value dropped"
    );
}

#[test]
fn a_fiber_that_panics_anew_while_unwound_panics_out_of_the_drop() {
    let mut f = Fiber::new(|y: &Yielder<(), ()>, ()| {
        if catch_unwind(AssertUnwindSafe(|| y.suspend(()))).is_err() {
            panic!("cleanup failed");
        }
    });
    assert!(f.resume(()).is_yield());
    let err = catch_unwind(AssertUnwindSafe(move || drop(f))).expect_err("the drop panicked");
    assert_eq!(err.downcast_ref::<&str>(), Some(&"cleanup failed"));
}

#[test]
fn a_suspended_fiber_dropped_during_a_panic_is_unwound_too() {
    let drops = counter();
    let d = drops.clone();
    let outer = catch_unwind(AssertUnwindSafe(move || {
        let mut f = Fiber::new(move |y: &Yielder<(), ()>, ()| {
            let _a = Counted(d.clone());
            y.suspend(());
            let _b = Counted(d);
        });
        assert!(f.resume(()).is_yield());
        // `f` is dropped by this panic's unwind.
        resume_unwind(Box::new("outer"));
    }));
    assert!(outer.is_err());
    assert_eq!(drops.load(Ordering::SeqCst), 1, "the live value dropped");
}

#[test]
fn a_fiber_may_hold_values_that_are_not_send() {
    let shared = Rc::new(Cell::new(0));
    let s = shared.clone();
    let mut f = Fiber::new(
        move |y: &Yielder<Rc<Cell<u32>>, Rc<Cell<u32>>>, r: Rc<Cell<u32>>| {
            r.set(r.get() + 1);
            let r = y.suspend(s.clone());
            r.set(r.get() + 10);
            s.get()
        },
    );
    let back = f.resume(shared.clone()).into_yield().expect("suspended");
    assert!(Rc::ptr_eq(&back, &shared));
    assert_eq!(f.resume(shared.clone()), FiberResult::Return(11));
}

#[test]
fn fibers_nest_and_each_suspend_returns_to_its_own_resumer() {
    let mut outer = Fiber::new(|y: &Yielder<u32, String>, start: u32| {
        let mut inner = Fiber::new(|yi: &Yielder<u32, u32>, x: u32| {
            let x = yi.suspend(x * 2);
            x * 3
        });
        let a = inner.resume(start).into_yield().expect("inner suspended");
        let from_outside = y.suspend(format!("inner gave {a}"));
        let b = inner
            .resume(from_outside)
            .into_return()
            .expect("inner returned");
        format!("inner returned {b}")
    });
    assert_eq!(
        outer.resume(5),
        FiberResult::Yield("inner gave 10".to_string())
    );
    assert_eq!(
        outer.resume(7),
        FiberResult::Return("inner returned 21".to_string())
    );
}

#[test]
fn the_builder_names_the_fiber_and_applies_the_task_stack_rules() {
    let f = Builder::new()
        .name("parser")
        .stack_size(64 * 1024 + 1)
        .build(|_: &Yielder<(), ()>, ()| ())
        .expect("a valid size");
    assert_eq!(f.name(), Some("parser"));
    assert_eq!(f.stack_size() % 4096, 0, "rounded to whole pages");
    assert!(f.stack_size() > 64 * 1024);
    let unnamed = Fiber::new(|_: &Yielder<(), ()>, ()| ());
    assert_eq!(unnamed.name(), None);
    assert_eq!(unnamed.stack_size(), gofer::DEFAULT_STACK_SIZE);

    for bad in [gofer::MIN_STACK_SIZE - 1, gofer::MAX_STACK_SIZE + 1] {
        let err = Builder::new()
            .stack_size(bad)
            .build(|_: &Yielder<(), ()>, ()| ())
            .expect_err("out of range");
        assert!(
            matches!(err, SpawnError::StackSize { requested } if requested == bad),
            "{err:?}"
        );
    }
}

#[test]
fn a_fiber_with_a_2mib_stack_can_use_1mib() {
    let mut f = Builder::new()
        .stack_size(2 << 20)
        .build(|y: &Yielder<u32, u64>, depth: u32| {
            let a = deep(depth);
            let depth = y.suspend(a); // switch out and back with a deep stack used
            a + deep(depth)
        })
        .expect("a valid size");
    assert_eq!(f.resume(250), FiberResult::Yield(expected_deep(250)));
    assert_eq!(f.resume(250), FiberResult::Return(2 * expected_deep(250)));
}

#[test]
fn a_finished_fibers_stack_is_reused_by_the_next_fiber_on_the_thread() {
    #[inline(never)]
    fn local_address() -> usize {
        let here = 0u8;
        black_box(&here) as *const u8 as usize
    }
    // Run, finish; suspend, drop; and never run: each gives its stack back.
    let mut first = Fiber::new(|_: &Yielder<(), ()>, ()| local_address());
    let a = first.resume(()).into_return().expect("returned");
    let mut second = Fiber::new(|y: &Yielder<(), usize>, ()| {
        y.suspend(local_address());
    });
    let b = second.resume(()).into_yield().expect("suspended");
    // Same stack: the frames differ by a few hundred bytes; another stack
    // would be a whole stack (256 KiB and a guard page) away.
    assert!(
        a.abs_diff(b) < 16 * 1024,
        "the finished fiber's stack was reused"
    );
    drop(second);
    let mut third = Fiber::new(|_: &Yielder<(), ()>, ()| local_address());
    let c = third.resume(()).into_return().expect("returned");
    assert!(
        a.abs_diff(c) < 16 * 1024,
        "the dropped fiber's stack was reused"
    );
}

#[test]
fn a_hundred_thousand_fibers_come_and_go_on_recycled_stacks() {
    let mut total = 0u64;
    for i in 0..100_000u64 {
        let mut f = Fiber::new(|y: &Yielder<u64, u64>, x: u64| y.suspend(x + 1));
        total += f.resume(i).into_yield().expect("suspended");
        if i % 2 == 0 {
            assert_eq!(f.resume(0), FiberResult::Return(0));
        } // odd ones are dropped suspended
    }
    assert_eq!(total, (1..=100_000u64).sum::<u64>());
}

const OVERFLOW_TEST: &str = "overflowing_a_fiber_stack_is_reported_with_its_name_and_aborts";

#[test]
fn overflowing_a_fiber_stack_is_reported_with_its_name_and_aborts() {
    match child_scenario().as_deref() {
        Some("fiber-overflow") => {
            let mut f = Builder::new()
                .name("deep")
                .stack_size(64 * 1024)
                .build(|_: &Yielder<(), ()>, ()| deep(black_box(250)))
                .expect("a valid size");
            eprintln!("CHILD-FIBER-STARTED");
            let r = f.resume(());
            println!("CHILD-SURVIVED {r:?}");
            return;
        }
        Some("fiber-in-task-overflow") => {
            let s = gofer::Scheduler::builder()
                .min_threads(1)
                .name("fib-child")
                .build()
                .expect("valid config");
            let r = s.block_on(|| {
                let mut f = Builder::new()
                    .name("nested")
                    .stack_size(32 * 1024)
                    .build(|_: &Yielder<(), ()>, ()| deep(black_box(250)))
                    .expect("a valid size");
                eprintln!("CHILD-FIBER-STARTED");
                f.resume(()).into_return()
            });
            println!("CHILD-SURVIVED {r:?}");
            return;
        }
        Some(other) => panic!("unknown scenario {other}"),
        None => {}
    }
    for (scenario, report) in [
        (
            "fiber-overflow",
            "gofer: fiber 'deep' overflowed its 65536-byte stack",
        ),
        (
            "fiber-in-task-overflow",
            "gofer: fiber 'nested' overflowed its 32768-byte stack",
        ),
    ] {
        let out = run_child(module_path!(), OVERFLOW_TEST, scenario, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("CHILD-FIBER-STARTED"),
            "the child did not start\n{}",
            describe(&out)
        );
        assert!(
            stderr.contains(report),
            "no report naming the fiber\n{}",
            describe(&out)
        );
        assert!(!String::from_utf8_lossy(&out.stdout).contains("CHILD-SURVIVED"));
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGABRT),
            "the child must abort\n{}",
            describe(&out)
        );
    }
}

const PANIC_REPORT_TEST: &str = "a_fibers_panic_is_reported_naming_it_even_on_a_minimum_stack";

#[test]
fn a_fibers_panic_is_reported_naming_it_even_on_a_minimum_stack() {
    match child_scenario().as_deref() {
        Some("fiber-panic") => {
            let mut f = Builder::new()
                .name("small")
                .stack_size(gofer::MIN_STACK_SIZE)
                .build(|_: &Yielder<(), ()>, ()| -> u8 { panic!("small boom {}", black_box(1)) })
                .expect("the minimum size is accepted");
            let r = catch_unwind(AssertUnwindSafe(|| f.resume(())));
            assert!(r.is_err(), "the panic came out of resume");
            let s = gofer::Scheduler::builder()
                .min_threads(1)
                .name("fib-child")
                .build()
                .expect("valid config");
            let h = gofer::Builder::new()
                .scheduler(&s)
                .name("host")
                .spawn(|| {
                    let mut f = Builder::new()
                        .name("inner")
                        .stack_size(gofer::MIN_STACK_SIZE)
                        .build(|_: &Yielder<(), ()>, ()| -> u8 { panic!("inner boom") })
                        .expect("valid");
                    catch_unwind(AssertUnwindSafe(|| f.resume(()))).is_err()
                })
                .expect("spawned");
            assert!(h.join().expect("the task caught it"));
            s.shutdown();
            println!("CHILD-OK");
            return;
        }
        Some(other) => panic!("unknown scenario {other}"),
        None => {}
    }
    // With backtraces on, the default hook needs far more stack than 16 KiB:
    // it must run on a stack of its own, and the panics must still be caught.
    let out = run_child(
        module_path!(),
        PANIC_REPORT_TEST,
        "fiber-panic",
        &[("RUST_BACKTRACE", Some("1"))],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("CHILD-OK"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("gofer: fiber 'small' panicked on thread"),
        "{}",
        describe(&out)
    );
    assert!(
        stderr.contains("gofer: fiber 'inner' in task ") && stderr.contains(" 'host' panicked"),
        "a fiber inside a task is named with its task\n{}",
        describe(&out)
    );
}
