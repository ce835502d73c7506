//! Panics inside tasks: the payload reaches `join`, and the scheduler (and
//! the very Processer thread the panic happened on) keeps working.
//!
//! Each test runs in a child process (`common::in_child`): the quiet hook
//! below replaces the process's panic hook, which the runtime wraps once
//! per process, and a test of another module building its first scheduler
//! at the same moment could lose one of the two.

use crate::common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

use common::thread_id;
use gofer::{go, Builder, Scheduler};

/// Schedulers in this file are named `quiet-*`: their expected panics are
/// not printed. Panics anywhere else (the test threads) print as usual.
fn quiet_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let quiet = std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("quiet-"));
            if !quiet {
                prev(info);
            }
        }));
    });
}

fn sched(name: &str, threads: usize) -> Scheduler {
    quiet_panics();
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

#[derive(Debug, PartialEq)]
struct Custom {
    code: u32,
    why: String,
}

#[test]
fn panic_with_str_payload_reaches_join() {
    common::in_child(
        module_path!(),
        "panic_with_str_payload_reaches_join",
        || {
            let s = sched("quiet-str", 1);
            let err = s
                .spawn(|| -> u32 { panic!("static boom") })
                .join()
                .expect_err("the task panicked");
            assert!(err.is_panic());
            assert!(!err.is_stack_exhausted());
            assert!(err.to_string().contains("static boom"), "{err}");
            assert!(format!("{err:?}").contains("static boom"), "{err:?}");
            let payload = err.into_panic();
            assert_eq!(
                *payload.downcast::<&'static str>().expect("a &str payload"),
                "static boom"
            );
            s.shutdown();
        },
    );
}

#[test]
fn panic_with_string_payload_reaches_join() {
    common::in_child(
        module_path!(),
        "panic_with_string_payload_reaches_join",
        || {
            let s = sched("quiet-string", 1);
            let n = 42;
            let err = s
                .spawn(move || -> () { panic!("formatted boom {n}") })
                .join()
                .expect_err("the task panicked");
            assert!(err.is_panic());
            assert!(err.to_string().contains("formatted boom 42"), "{err}");
            let payload = err.into_panic();
            assert_eq!(
                *payload.downcast::<String>().expect("a String payload"),
                "formatted boom 42"
            );
            s.shutdown();
        },
    );
}

#[test]
fn panic_with_custom_payload_reaches_join() {
    common::in_child(
        module_path!(),
        "panic_with_custom_payload_reaches_join",
        || {
            let s = sched("quiet-custom", 1);
            let err = s
                .spawn(|| -> () {
                    gofer::yield_now(); // panic after a switch, from a resumed stack
                    std::panic::panic_any(Custom {
                        code: 7,
                        why: "custom".into(),
                    })
                })
                .join()
                .expect_err("the task panicked");
            assert!(err.is_panic());
            let payload = err
                .try_into_panic()
                .expect("try_into_panic on a panic gives the payload");
            let custom = payload.downcast::<Custom>().expect("a Custom payload");
            assert_eq!(
                *custom,
                Custom {
                    code: 7,
                    why: "custom".into()
                }
            );
            s.shutdown();
        },
    );
}

#[test]
fn panic_payload_can_be_resumed_on_the_joining_thread() {
    common::in_child(
        module_path!(),
        "panic_payload_can_be_resumed_on_the_joining_thread",
        || {
            let s = sched("quiet-resume", 1);
            let err = s
                .spawn(|| -> () { panic!("carry me") })
                .join()
                .expect_err("the task panicked");
            let caught = catch_unwind(AssertUnwindSafe(|| {
                std::panic::resume_unwind(err.into_panic())
            }))
            .expect_err("resume_unwind re-raises");
            assert_eq!(
                *caught.downcast::<&str>().expect("same payload"),
                "carry me"
            );
            s.shutdown();
        },
    );
}

#[test]
fn block_on_reraises_the_panic_of_its_task() {
    common::in_child(
        module_path!(),
        "block_on_reraises_the_panic_of_its_task",
        || {
            let s = sched("quiet-blockon", 1);
            let caught = catch_unwind(AssertUnwindSafe(|| {
                s.block_on(|| -> u32 { panic!("block_on boom") })
            }))
            .expect_err("block_on re-raises");
            assert_eq!(
                *caught.downcast::<&str>().expect("same payload"),
                "block_on boom"
            );
            // The scheduler and block_on keep working.
            assert_eq!(s.block_on(|| 5), 5);
            assert_eq!(s.spawn(|| 6).join().expect("task returned"), 6);
            s.shutdown();
        },
    );
}

#[test]
fn a_panicking_child_does_not_disturb_its_joining_parent() {
    common::in_child(
        module_path!(),
        "a_panicking_child_does_not_disturb_its_joining_parent",
        || {
            let s = sched("quiet-child", 2);
            let v = s
                .spawn(|| {
                    let child = go!(|| -> u32 { panic!("child boom") });
                    let err = child.join().expect_err("the child panicked");
                    assert!(err.is_panic());
                    gofer::yield_now();
                    let ok = go!(|| 10).join().expect("sibling returned");
                    ok + 1
                })
                .join()
                .expect("parent returned");
            assert_eq!(v, 11);
            s.shutdown();
        },
    );
}

#[test]
fn processer_thread_survives_100_panicking_tasks() {
    common::in_child(
        module_path!(),
        "processer_thread_survives_100_panicking_tasks",
        || {
            let s = sched("quiet-survive", 1);
            let before = s.spawn(thread_id).join().expect("task returned");
            let handles: Vec<_> = (0..100u32)
                .map(|i| {
                    s.spawn(move || -> u32 {
                        if i % 2 == 0 {
                            gofer::yield_now();
                        }
                        panic!("task {i} fails")
                    })
                })
                .collect();
            for (i, h) in handles.into_iter().enumerate() {
                let err = h.join().expect_err("every task panicked");
                assert!(err.is_panic());
                let msg = err
                    .into_panic()
                    .downcast::<String>()
                    .expect("String payload");
                assert_eq!(*msg, format!("task {i} fails"));
            }
            // Normal tasks still run, on the very same Processer thread.
            let after: Vec<_> = (0..100u64)
                .map(|i| s.spawn(move || (thread_id(), i * i)))
                .collect();
            for (i, h) in after.into_iter().enumerate() {
                let (t, v) = h.join().expect("normal task returned");
                assert_eq!(t, before, "the one Processer thread was replaced");
                assert_eq!(v, (i * i) as u64);
            }
            let st = s.stats();
            assert_eq!(st.threads, 1);
            assert_eq!(st.threads_started, 1, "no thread was restarted");
            s.shutdown();
            let st = s.stats();
            assert_eq!(st.spawned, 201);
            assert_eq!(st.completed, 201);
        },
    );
}

#[test]
fn panic_in_a_task_with_the_smallest_stack_is_caught() {
    common::in_child(
        module_path!(),
        "panic_in_a_task_with_the_smallest_stack_is_caught",
        || {
            let s = sched("quiet-small", 1);
            let err = Builder::new()
                .scheduler(&s)
                .stack_size(gofer::MIN_STACK_SIZE)
                .spawn(|| -> () { panic!("small stack boom {}", std::hint::black_box(1)) })
                .expect("spawned")
                .join()
                .expect_err("the task panicked");
            assert_eq!(
                *err.into_panic()
                    .downcast::<String>()
                    .expect("String payload"),
                "small stack boom 1"
            );
            s.shutdown();
        },
    );
}
