//! Spawning and joining: results, nesting, `go!` options, `Builder` errors,
//! joining from inside a task, task identity, and detached tasks.

use crate::common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use common::{thread_name, wait_until, PATIENCE};
use gofer::{go, Builder, Scheduler, SpawnError};

fn sched(name: &str, threads: usize) -> Scheduler {
    Scheduler::builder()
        .min_threads(threads)
        .max_threads(threads)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

#[test]
fn spawn_and_join_100k_tasks_with_correct_results() {
    let s = sched("sj-many", 2);
    const N: u64 = 100_000;
    // Every task is spawned before the first join.
    let handles: Vec<_> = (0..N).map(|i| s.spawn(move || i * 3 + 1)).collect();
    assert_eq!(handles.len() as u64, N);
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().expect("task returned"), i as u64 * 3 + 1);
    }
    // A joined task leaves the alive count once its Processer has freed it,
    // a moment after its result was published (and counted as completed).
    wait_until("every task is accounted as completed and freed", || {
        let st = s.stats();
        st.completed == N && st.alive == 0
    });
    assert_eq!(s.stats().spawned, N);
    s.shutdown();
}

/// Each node spawns `fanout` children, joins them (parking), and returns the
/// size of its subtree.
fn tree(depth: u32, fanout: u32) -> u64 {
    if depth == 0 {
        return 1;
    }
    let children: Vec<_> = (0..fanout)
        .map(|_| go!(move || tree(depth - 1, fanout)))
        .collect();
    1 + children
        .into_iter()
        .map(|h| h.join().expect("child returned"))
        .sum::<u64>()
}

#[test]
fn nested_spawns_form_a_tree_with_exact_sum() {
    let s = sched("sj-tree", 2);
    let (depth, fanout) = (6, 4);
    let total = s
        .spawn(move || tree(depth, fanout))
        .join()
        .expect("root returned");
    // 1 + 4 + 16 + ... + 4^6
    let expected: u64 = (0..=depth).map(|d| 4u64.pow(d)).sum();
    assert_eq!(total, expected);
    s.shutdown();
    assert_eq!(s.stats().completed, expected);
}

#[test]
fn go_macro_accepts_every_option_in_any_order() {
    let s = sched("sj-go", 2);
    let sr = &s;
    let here = |pin: Option<usize>| {
        let name = gofer::current_name();
        let thread = thread_name();
        assert!(gofer::is_coroutine());
        (name, thread, pin)
    };
    let check = |h: gofer::JoinHandle<(Option<String>, String, Option<usize>)>,
                 want_name: Option<&str>| {
        let (name, thread, pin) = h.join().expect("task returned");
        assert_eq!(name.as_deref(), want_name);
        assert!(thread.starts_with("sj-go-"), "ran on {thread:?}");
        if let Some(p) = pin {
            assert_eq!(thread, format!("sj-go-{p}"));
        }
    };

    check(go!(scheduler = sr, move || here(None)), None);
    check(
        go!(scheduler = sr, name = "a", move || here(None)),
        Some("a"),
    );
    check(
        go!(name = "b", scheduler = sr, move || here(None)),
        Some("b"),
    );
    check(
        go!(stack_size = 1 << 20, scheduler = sr, move || here(None)),
        None,
    );
    check(
        go!(scheduler = sr, stack_size = 64 << 10, move || here(None)),
        None,
    );
    check(go!(pin = 1, scheduler = sr, move || here(Some(1))), None);
    check(go!(scheduler = sr, pin = 0, move || here(Some(0))), None);
    check(
        go!(
            name = "c",
            stack_size = 64 << 10,
            pin = 1,
            scheduler = sr,
            move || here(Some(1))
        ),
        Some("c"),
    );
    check(
        go!(
            scheduler = sr,
            pin = 0,
            stack_size = 128 << 10,
            name = "d",
            move || here(Some(0))
        ),
        Some("d"),
    );
    check(
        go!(
            stack_size = 32 << 10,
            scheduler = sr,
            name = String::from("e"),
            pin = 1,
            move || { here(Some(1)) }
        ),
        Some("e"),
    );
    // A non-move closure and a block body.
    check(
        go!(scheduler = sr, || {
            (gofer::current_name(), thread_name(), None)
        }),
        None,
    );
    s.shutdown();
}

#[test]
fn go_macro_without_scheduler_spawns_on_the_current_tasks_scheduler() {
    let s = sched("sj-cur", 2);
    let inner = s
        .spawn(|| {
            let a = go!(thread_name).join().expect("child returned");
            let b = go!(name = "kid", || (thread_name(), gofer::current_name()))
                .join()
                .expect("child returned");
            (a, b)
        })
        .join()
        .expect("parent returned");
    assert!(inner.0.starts_with("sj-cur-"), "child ran on {:?}", inner.0);
    assert!(
        inner.1 .0.starts_with("sj-cur-"),
        "child ran on {:?}",
        inner.1 .0
    );
    assert_eq!(inner.1 .1.as_deref(), Some("kid"));
    s.shutdown();
}

#[test]
fn go_macro_outside_tasks_uses_the_default_scheduler() {
    let h = go!(|| (gofer::is_coroutine(), thread_name()));
    let (co, thread) = h.join().expect("task returned");
    assert!(co);
    assert!(
        thread.starts_with("gofer-"),
        "default scheduler thread, got {thread:?}"
    );
}

#[test]
fn builder_rejects_stack_below_minimum() {
    let s = sched("sj-small", 1);
    let err = Builder::new()
        .scheduler(&s)
        .stack_size(gofer::MIN_STACK_SIZE - 1)
        .spawn(|| ())
        .expect_err("stack below MIN_STACK_SIZE must be refused");
    match err {
        SpawnError::StackSize { requested } => assert_eq!(requested, gofer::MIN_STACK_SIZE - 1),
        other => panic!("expected SpawnError::StackSize, got {other:?}"),
    }
    let msg = Builder::new()
        .scheduler(&s)
        .stack_size(1)
        .spawn(|| ())
        .expect_err("tiny stack refused")
        .to_string();
    assert!(msg.contains(&gofer::MIN_STACK_SIZE.to_string()), "{msg}");
    assert!(msg.contains(&gofer::MAX_STACK_SIZE.to_string()), "{msg}");
    let err = Builder::new()
        .scheduler(&s)
        .stack_size(gofer::MAX_STACK_SIZE + 1)
        .spawn(|| ())
        .expect_err("stack above MAX_STACK_SIZE must be refused");
    assert!(matches!(err, SpawnError::StackSize { .. }), "{err:?}");
    // Nothing was admitted.
    assert_eq!(s.stats().spawned, 0);
    assert_eq!(s.stats().alive, 0);
    s.shutdown();
}

#[test]
fn builder_accepts_minimum_16k_stack_and_runs() {
    assert_eq!(gofer::MIN_STACK_SIZE, 16 * 1024);
    let s = sched("sj-16k", 2);
    let handles: Vec<_> = (0..64u64)
        .map(|i| {
            Builder::new()
                .scheduler(&s)
                .name(format!("small-{i}"))
                .stack_size(gofer::MIN_STACK_SIZE)
                .spawn(move || {
                    // A little real work on the small stack: switch out,
                    // format, allocate.
                    gofer::yield_now();
                    let name = gofer::current_name().expect("named");
                    gofer::yield_now();
                    let v: Vec<u64> = (0..=i).collect();
                    (name, v.iter().sum::<u64>())
                })
                .expect("a 16 KiB stack is accepted")
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let (name, sum) = h.join().expect("task returned");
        assert_eq!(name, format!("small-{i}"));
        let i = i as u64;
        assert_eq!(sum, i * (i + 1) / 2);
    }
    s.shutdown();
}

#[test]
fn builder_rejects_pin_beyond_core_processers() {
    let s = sched("sj-pin", 2);
    for bad in [2usize, 3, usize::MAX] {
        let err = Builder::new()
            .scheduler(&s)
            .pin(bad)
            .spawn(|| ())
            .expect_err("pin >= min_threads must be refused");
        match err {
            SpawnError::InvalidPin { requested, core } => {
                assert_eq!(requested, bad);
                assert_eq!(core, 2);
            }
            other => panic!("expected SpawnError::InvalidPin, got {other:?}"),
        }
    }
    // The last valid index works.
    let t = Builder::new()
        .scheduler(&s)
        .pin(1)
        .spawn(thread_name)
        .expect("pin(1) is valid with 2 core Processers")
        .join()
        .expect("task returned");
    assert_eq!(t, "sj-pin-1");
    s.shutdown();
}

#[test]
fn join_inside_a_task_parks_so_the_joined_task_runs_on_one_thread() {
    // With one Processer the child can only run if the parent's join parks
    // the parent (a blocking join would deadlock here).
    let s = sched("sj-join1", 1);
    let (tx, rx) = mpsc::channel();
    s.spawn(move || {
        let child = go!(|| {
            gofer::yield_now();
            21
        });
        let v = child.join().expect("child returned") * 2;
        tx.send(v).expect("receiver alive");
    });
    assert_eq!(rx.recv_timeout(PATIENCE).expect("parent finished"), 42);
    assert_eq!(s.stats().threads, 1);
    s.shutdown();
}

#[test]
fn join_of_a_task_already_finished_returns_its_value() {
    let s = sched("sj-done", 1);
    let (tx, rx) = mpsc::channel();
    let h = s.spawn(move || {
        tx.send(()).expect("receiver alive");
        "done"
    });
    rx.recv_timeout(PATIENCE).expect("task ran");
    wait_until("the task is finished", || h.is_finished());
    assert_eq!(h.join().expect("task returned"), "done");
    s.shutdown();
}

#[test]
fn is_finished_is_false_until_the_task_returns() {
    let s = sched("sj-fin", 2);
    let gate = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let g = gate.clone();
    let h = s.spawn(move || {
        tx.send(()).expect("receiver alive");
        while !g.load(Ordering::Acquire) {
            gofer::yield_now();
        }
        7
    });
    rx.recv_timeout(PATIENCE).expect("task started");
    assert!(!h.is_finished(), "the task is still waiting for its gate");
    gate.store(true, Ordering::Release);
    wait_until("the task is finished", || h.is_finished());
    assert!(h.is_finished());
    assert_eq!(h.join().expect("task returned"), 7);
    s.shutdown();
}

#[test]
fn id_of_the_handle_is_current_id_inside_the_task() {
    let s = sched("sj-id", 2);
    let handles: Vec<_> = (0..100).map(|_| s.spawn(gofer::current_id)).collect();
    let mut seen = HashSet::new();
    for h in handles {
        let id = h.id();
        let inside = h.join().expect("task returned").expect("inside a task");
        assert_eq!(inside, id);
        assert!(seen.insert(id), "task ids are unique, {id:?} seen twice");
    }
    s.shutdown();
}

#[test]
fn current_id_and_name_are_none_outside_tasks() {
    assert_eq!(gofer::current_id(), None);
    assert_eq!(gofer::current_name(), None);
    assert!(!gofer::is_coroutine());
    assert!(!gofer::current().is_coroutine());
    assert_eq!(gofer::current().id(), None);
}

#[test]
fn current_name_inside_tasks_is_the_given_name_or_none() {
    let s = sched("sj-name", 1);
    let named = Builder::new()
        .scheduler(&s)
        .name("reader")
        .spawn(|| {
            let before = gofer::current_name();
            gofer::yield_now();
            (
                before,
                gofer::current_name(),
                gofer::current().name().map(String::from),
            )
        })
        .expect("spawned");
    assert_eq!(named.name(), Some("reader"));
    let (before, after, via_handle) = named.join().expect("task returned");
    assert_eq!(before.as_deref(), Some("reader"));
    assert_eq!(after.as_deref(), Some("reader"));
    assert_eq!(via_handle.as_deref(), Some("reader"));

    let unnamed = s.spawn(|| (gofer::current_name(), gofer::current_id().is_some()));
    assert_eq!(unnamed.name(), None);
    assert_eq!(unnamed.join().expect("task returned"), (None, true));
    s.shutdown();
}

#[test]
fn dropped_join_handle_detaches_a_task_that_still_runs() {
    let s = sched("sj-detach", 2);
    let gate = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let g = gate.clone();
    let h = s.spawn(move || {
        while !g.load(Ordering::Acquire) {
            gofer::yield_now();
        }
        tx.send(gofer::current_id()).expect("receiver alive");
        vec![1u8; 1024] // a result nobody will take
    });
    let id = h.id();
    drop(h);
    gate.store(true, Ordering::Release);
    let ran = rx.recv_timeout(PATIENCE).expect("the detached task ran");
    assert_eq!(ran, Some(id));
    // Shutdown still accounts for it.
    s.shutdown();
    assert_eq!(s.stats().completed, 1);
}

/// Counts its drops, and says whether the last one ran inside a task.
struct Tracked {
    drops: Arc<std::sync::atomic::AtomicUsize>,
    in_task: Arc<AtomicBool>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.in_task.store(gofer::is_coroutine(), Ordering::SeqCst);
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn an_unjoined_result_is_dropped_by_the_task_when_the_handle_went_first() {
    use std::sync::atomic::AtomicUsize;
    let s = sched("sj-drop-task", 2);
    let drops = Arc::new(AtomicUsize::new(0));
    let in_task = Arc::new(AtomicBool::new(false));
    let gate = Arc::new(AtomicBool::new(false));
    let (d, t, g) = (drops.clone(), in_task.clone(), gate.clone());
    let h = s.spawn(move || {
        while !g.load(Ordering::Acquire) {
            gofer::yield_now();
        }
        Tracked {
            drops: d,
            in_task: t,
        }
    });
    drop(h);
    gate.store(true, Ordering::Release);
    wait_until("the result dropped", || drops.load(Ordering::SeqCst) == 1);
    assert!(
        in_task.load(Ordering::SeqCst),
        "the finishing task drops a result nobody can join, at its root frame"
    );
    s.shutdown();
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn an_unjoined_result_is_dropped_by_the_handle_when_the_task_went_first() {
    use std::sync::atomic::AtomicUsize;
    let s = sched("sj-drop-handle", 2);
    let drops = Arc::new(AtomicUsize::new(0));
    let in_task = Arc::new(AtomicBool::new(true));
    let (d, t) = (drops.clone(), in_task.clone());
    let h = s.spawn(move || Tracked {
        drops: d,
        in_task: t,
    });
    wait_until("the task finished", || h.is_finished());
    assert_eq!(drops.load(Ordering::SeqCst), 0, "kept for the joiner");
    drop(h);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "dropped with the handle");
    assert!(!in_task.load(Ordering::SeqCst), "on the handle's thread");
    s.shutdown();
}

#[test]
fn results_are_dropped_exactly_once_when_handles_race_the_tasks() {
    use std::sync::atomic::AtomicUsize;
    let s = sched("sj-drop-race", 2);
    const N: usize = 20_000;
    let drops = Arc::new(AtomicUsize::new(0));
    let in_task = Arc::new(AtomicBool::new(false));
    let mut joined = 0;
    for i in 0..N {
        let (d, t) = (drops.clone(), in_task.clone());
        let h = s.spawn(move || Tracked {
            drops: d,
            in_task: t,
        });
        // Drop, join, or drop after a moment: every order of the handle's
        // end and the task's.
        match i % 3 {
            0 => drop(h),
            1 => {
                drop(h.join().expect("task returned"));
                joined += 1;
            }
            _ => {
                std::hint::spin_loop();
                drop(h)
            }
        }
    }
    s.shutdown();
    assert_eq!(joined, (0..N).filter(|i| i % 3 == 1).count());
    assert_eq!(drops.load(Ordering::SeqCst), N, "one drop per result");
}

// ------------------------------------------------- spawning from other threads

/// A thread keeps a copy of the Processer table it pushed through last: one
/// thread spawning into two schedulers in turn must reach each one's own
/// Processers every time, and so must a third scheduler built after the
/// first is gone (its table may sit at the freed one's address).
#[test]
fn one_thread_spawning_into_schedulers_in_turn_reaches_each_ones_processers() {
    // Spawns into each of `scheds` in turn, 200 rounds: every task runs on
    // a thread of its own scheduler (named after it).
    fn in_turn(scheds: &[(&Scheduler, &str)]) {
        for round in 0..200 {
            for (s, name) in scheds {
                let on = s.spawn(thread_name).join().expect("ran");
                assert!(on.starts_with(&format!("{name}-")), "round {round}: {on}");
            }
        }
    }
    let a = sched("turn-a", 2);
    let b = sched("turn-b", 1);
    in_turn(&[(&a, "turn-a"), (&b, "turn-b")]);
    a.shutdown();
    drop(a);
    let c = sched("turn-c", 2);
    in_turn(&[(&c, "turn-c"), (&b, "turn-b")]);
    c.shutdown();
    b.shutdown();
}

thread_local! {
    /// A channel end that a thread-local destructor drops.
    static SENDER: std::cell::RefCell<Option<gofer::chan::Sender<u32>>> =
        const { std::cell::RefCell::new(None) };
}

/// A wake-up made by a thread-local destructor, while the thread's
/// thread-locals are being torn down (possibly after the runtime's own),
/// reaches the parked task: here the last sender, dropped by a destructor,
/// disconnects a receiver parked on a Processer.
#[test]
fn a_wake_up_from_a_thread_local_destructor_reaches_the_parked_task() {
    let s = sched("tls-dtor", 2);
    let (tx, rx) = gofer::chan::unbounded::<u32>();
    let receiver = s.spawn(move || rx.recv());
    let spawner = s.clone();
    std::thread::spawn(move || {
        // Registered before the thread's first push, so destroyed after the
        // runtime's thread-locals (destructors run in reverse order).
        SENDER.with(|c| *c.borrow_mut() = Some(tx));
        spawner.spawn(|| ()).join().expect("ran");
    })
    .join()
    .expect("the thread exits cleanly");
    assert!(receiver.join().expect("returned").is_err(), "disconnected");
    s.shutdown();
}
