//! Task stacks: a task gets the stack size it asked for, overflowing it is
//! reported (task name and id) and aborts, and a fault that is not an
//! overflow is not reported as one.
//!
//! The fatal cases run in a child process: the test binary re-runs itself
//! with `--exact <test>` and [`common::CHILD_ENV`] set, the child does the
//! damage, and the parent inspects how it died.

use crate::common;

use std::hint::black_box;
use std::os::unix::process::ExitStatusExt;

use common::{child_scenario, describe, run_child};
use gofer::{Builder, Scheduler};

/// Recurses `depth` frames of at least 4 KiB each; returns a value that
/// depends on every frame so nothing can be folded away.
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
fn a_task_with_a_2mib_stack_can_use_1mib() {
    let s = Scheduler::builder()
        .min_threads(1)
        .name("stk-big")
        .build()
        .expect("valid config");
    // ~250 frames of >= 4 KiB: about 1 MiB of stack.
    let depth = 250;
    let v = gofer::go!(scheduler = &s, stack_size = 2 << 20, move || {
        let a = deep(depth);
        gofer::yield_now(); // switch out and back with a deep stack used
        a + deep(depth)
    })
    .join()
    .expect("the deep task returned");
    assert_eq!(v, 2 * expected_deep(depth));
    s.shutdown();
}

#[test]
fn scheduler_stack_size_applies_to_tasks_that_set_none() {
    let s = Scheduler::builder()
        .min_threads(1)
        .stack_size(2 << 20)
        .name("stk-default")
        .build()
        .expect("valid config");
    let depth = 250;
    let v = s.spawn(move || deep(depth)).join().expect("returned");
    assert_eq!(v, expected_deep(depth));
    s.shutdown();
}

const OVERFLOW_TEST: &str = "stack_overflow_is_reported_with_task_name_and_id_and_aborts";

#[test]
fn stack_overflow_is_reported_with_task_name_and_id_and_aborts() {
    if child_scenario().as_deref() == Some("overflow") {
        let s = Scheduler::builder()
            .min_threads(1)
            .name("stk-child")
            .build()
            .expect("valid config");
        let h = Builder::new()
            .scheduler(&s)
            .name("deep")
            .stack_size(32 * 1024)
            .spawn(|| {
                let id = gofer::current_id().expect("inside a task");
                eprintln!("CHILD-TASK-ID={id}");
                // ~1 MiB of frames on a 32 KiB stack.
                deep(black_box(250))
            })
            .expect("spawned");
        let r = h.join();
        // Not reached: the overflow aborts the process.
        println!("CHILD-SURVIVED {r:?}");
        return;
    }
    let out = run_child(module_path!(), OVERFLOW_TEST, "overflow", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("CHILD-TASK-ID="))
        .unwrap_or_else(|| panic!("the child task did not start\n{}", describe(&out)))
        .trim()
        .to_string();
    assert!(
        stderr.contains("overflowed its"),
        "no overflow report\n{}",
        describe(&out)
    );
    assert!(
        stderr.contains(&format!("task {id} 'deep' overflowed its 32768-byte stack")),
        "the report names the task id {id} and name 'deep'\n{}",
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

const SEGV_TEST: &str = "a_segfault_outside_a_guard_page_is_not_reported_as_overflow";

#[test]
fn a_segfault_outside_a_guard_page_is_not_reported_as_overflow() {
    if child_scenario().as_deref() == Some("segv") {
        let s = Scheduler::builder()
            .min_threads(1)
            .name("stk-child")
            .build()
            .expect("valid config");
        let h = Builder::new()
            .scheduler(&s)
            .name("wild")
            .spawn(|| {
                eprintln!("CHILD-TASK-STARTED");
                // An address in the never-mapped first page, a "null
                // pointer" write (non-null only so that debug builds' UB
                // checks let it through to the hardware).
                let p = black_box(8usize) as *mut u64;
                // SAFETY: none; this write is meant to fault.
                unsafe { std::ptr::write_volatile(p, 1) };
            })
            .expect("spawned");
        let r = h.join();
        println!("CHILD-SURVIVED {r:?}");
        return;
    }
    let out = run_child(module_path!(), SEGV_TEST, "segv", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("CHILD-TASK-STARTED"),
        "the child task did not start\n{}",
        describe(&out)
    );
    assert!(
        !stderr.contains("overflowed"),
        "a wild write is not a stack overflow\n{}",
        describe(&out)
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("CHILD-SURVIVED"));
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSEGV),
        "the child must die of SIGSEGV\n{}",
        describe(&out)
    );
}

const SMALL_PANIC_TEST: &str = "a_panic_with_backtrace_in_a_minimum_size_stack_is_caught";

#[test]
fn a_panic_with_backtrace_in_a_minimum_size_stack_is_caught() {
    if child_scenario().as_deref() == Some("small-panic") {
        let s = Scheduler::builder()
            .min_threads(1)
            .name("stk-child")
            .build()
            .expect("valid config");
        let err = Builder::new()
            .scheduler(&s)
            .name("small")
            .stack_size(gofer::MIN_STACK_SIZE)
            .spawn(|| -> u32 { panic!("small boom {}", black_box(1)) })
            .expect("the minimum stack size is accepted")
            .join()
            .expect_err("the task panicked");
        assert!(err.is_panic());
        s.shutdown();
        println!("CHILD-OK");
        return;
    }
    // The default panic hook captures and prints a backtrace: the task's
    // panic must still be caught and reach join.
    let out = run_child(
        module_path!(),
        SMALL_PANIC_TEST,
        "small-panic",
        &[("RUST_BACKTRACE", Some("1"))],
    );
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("CHILD-OK"),
        "a panic in a task with a MIN_STACK_SIZE stack must be caught\n{}",
        describe(&out)
    );
}

const BLOCK_ON_OVERFLOW_TEST: &str = "stack_overflow_in_a_block_on_task_is_reported";

#[test]
fn stack_overflow_in_a_block_on_task_is_reported() {
    if child_scenario().as_deref() == Some("block-on-overflow") {
        let s = Scheduler::builder()
            .min_threads(1)
            .stack_size(32 * 1024)
            .name("stk-child")
            .build()
            .expect("valid config");
        // The root task of block_on runs on this (the test's) thread.
        let v = s.block_on(|| {
            eprintln!("CHILD-TASK-ID={}", gofer::current_id().expect("in a task"));
            deep(black_box(250))
        });
        println!("CHILD-SURVIVED {v}");
        return;
    }
    let out = run_child(
        module_path!(),
        BLOCK_ON_OVERFLOW_TEST,
        "block-on-overflow",
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("CHILD-TASK-ID="))
        .unwrap_or_else(|| panic!("the child task did not start\n{}", describe(&out)))
        .trim()
        .to_string();
    assert!(
        stderr.contains(&format!("task {id} overflowed its 32768-byte stack")),
        "an unnamed task's report names its id {id}\n{}",
        describe(&out)
    );
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "{}",
        describe(&out)
    );
}

const THREAD_OVERFLOW_TEST: &str = "a_plain_thread_overflow_is_left_to_the_rust_runtime";

/// Recurses until the stack runs out.
#[inline(never)]
fn forever(n: u64) -> u64 {
    let frame = [n; 512];
    black_box(&frame);
    if black_box(n) == u64::MAX {
        return 0;
    }
    forever(black_box(n + 1)) + black_box(frame[0])
}

#[test]
fn a_plain_thread_overflow_is_left_to_the_rust_runtime() {
    if child_scenario().as_deref() == Some("thread-overflow") {
        // Building a scheduler installs gofer's fault handler ...
        let s = Scheduler::builder()
            .min_threads(1)
            .name("stk-child")
            .build()
            .expect("valid config");
        assert_eq!(s.spawn(|| 1).join().expect("returned"), 1);
        // ... which must hand an overflow of a plain thread to Rust's.
        let t = std::thread::Builder::new()
            .name("plain".into())
            .stack_size(256 * 1024)
            .spawn(|| {
                eprintln!("CHILD-THREAD-STARTED");
                forever(0)
            })
            .expect("spawn a thread");
        let r = t.join();
        println!("CHILD-SURVIVED {:?}", r.is_ok());
        return;
    }
    let out = run_child(module_path!(), THREAD_OVERFLOW_TEST, "thread-overflow", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("CHILD-THREAD-STARTED"),
        "{}",
        describe(&out)
    );
    assert!(
        stderr.contains("thread 'plain'") && stderr.contains("has overflowed its stack"),
        "Rust's own overflow report\n{}",
        describe(&out)
    );
    assert!(!stderr.contains("gofer: task"), "{}", describe(&out));
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "{}",
        describe(&out)
    );
}
