//! Saying what still blocks: a task that blocks its Processer's thread
//! holds up the started tasks bound to that thread, which no rescue can
//! move. The statistics count them, the task dump names the thread they
//! wait for and the task blocking it, and the stall report prints that
//! once the block has lasted its time.
//!
//! Each scenario blocks a thread on purpose, so it runs in a child process
//! under a watchdog; the blocking task waits on a plain channel that the
//! child's main thread (or the parent, through the child's stdin) closes
//! once everything was seen, so every scenario ends.

use crate::common;

use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

use common::wait_until;
use gofer::debug::TaskState;
use gofer::Scheduler;

/// One core thread, named `diag-0`, and room for one extra: the Dispatcher
/// runs only with `max_threads` of 2 or more.
fn scheduler(stall_report: Option<Duration>) -> Scheduler {
    let mut b = Scheduler::builder()
        .name("diag")
        .min_threads(1)
        .max_threads(2);
    if let Some(d) = stall_report {
        b = b.stall_report(d);
    }
    b.build().expect("a scheduler")
}

/// Parses a `Duration`'s `{:.1?}` text (`212.3ms`, `1.0s`, `950.0µs`).
fn parse_duration(text: &str) -> Duration {
    let (num, unit) = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map(|i| text.split_at(i))
        .unwrap_or_else(|| panic!("no unit in {text:?}"));
    let v: f64 = num
        .parse()
        .unwrap_or_else(|_| panic!("no number in {text:?}"));
    match unit {
        "s" => Duration::from_secs_f64(v),
        "ms" => Duration::from_secs_f64(v / 1e3),
        "µs" => Duration::from_secs_f64(v / 1e6),
        "ns" => Duration::from_secs_f64(v / 1e9),
        _ => panic!("unknown unit in {text:?}"),
    }
}

/// The scenario: task B ('sleeper') starts on the only core thread and
/// parks in `gofer::sleep(10 ms)`; task A ('blocker') then runs on that
/// thread and blocks it in a plain channel receive, so B, bound to the
/// thread, turns runnable behind it. Returns the handles and the sender
/// that releases A; B's handle returns once B ran again.
struct Blocked {
    a: gofer::JoinHandle<()>,
    b: gofer::JoinHandle<()>,
    release: mpsc::Sender<()>,
}

fn block_a_thread_with_b_behind(s: &Scheduler) -> Blocked {
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let b = gofer::Builder::new()
        .name("sleeper")
        .scheduler(s)
        .spawn(move || {
            started_tx.send(()).unwrap();
            gofer::sleep(Duration::from_millis(10));
        })
        .unwrap();
    started_rx.recv().unwrap();
    let (release, release_rx) = mpsc::channel::<()>();
    let a = gofer::Builder::new()
        .name("blocker")
        .scheduler(s)
        .spawn(move || {
            // A plain channel: the thread sleeps in the kernel.
            let _ = release_rx.recv_timeout(common::PATIENCE);
        })
        .unwrap();
    Blocked { a, b, release }
}

#[test]
fn stats_and_the_dump_name_the_blocked_thread_a_runnable_task_waits_for() {
    common::in_child(
        module_path!(),
        "stats_and_the_dump_name_the_blocked_thread_a_runnable_task_waits_for",
        || {
            let s = scheduler(None);
            let Blocked { a, b, release } = block_a_thread_with_b_behind(&s);
            wait_until("the stats count B behind the blocked thread", || {
                s.stats().tasks_behind_blocked >= 1
            });
            let st = s.stats();
            assert_eq!(st.tasks_behind_blocked, 1, "{st:?}");
            assert_eq!(st.blocked_with_tasks_behind, 1, "{st:?}");
            let p0 = st.processers.iter().find(|p| p.id == 0).unwrap();
            assert!(p0.blocked && p0.tasks_behind == 1, "{st:?}");

            // A dump from a plain thread (this one) meanwhile.
            let dump = gofer::debug::dump();
            let text = dump.to_string();
            let find = |name: &str| {
                dump.tasks()
                    .iter()
                    .find(|t| t.name() == Some(name))
                    .unwrap_or_else(|| panic!("no task {name} in\n{text}"))
            };
            let (ta, tb) = (find("blocker"), find("sleeper"));
            assert_eq!(ta.state(), TaskState::Running, "{text}");
            assert_eq!(ta.thread(), Some("diag-0"), "{text}");
            assert!(ta.blocked_behind().is_none(), "{text}");
            assert_eq!(tb.state(), TaskState::Runnable, "{text}");
            assert_eq!(tb.thread(), Some("diag-0"), "{text}");
            let bt = tb.blocked_behind().unwrap_or_else(|| panic!("{text}"));
            assert_eq!(bt.thread(), "diag-0");
            assert_eq!(bt.task_id(), Some(a.id().as_u64()), "{text}");
            assert_eq!(bt.task_name(), Some("blocker"));
            assert_eq!(bt.tasks_behind(), 1);
            assert!(bt.blocked_for() > Duration::ZERO, "{text}");
            let listed: Vec<_> = dump.blocked_threads().map(|b| b.thread()).collect();
            assert_eq!(listed, ["diag-0"], "{text}");
            let line = format!(
                "task {} 'sleeper' [runnable: waiting for blocked thread diag-0 (blocked ",
                b.id().as_u64()
            );
            assert!(text.contains(&line), "{text}");
            let tail = format!(" in task {} 'blocker')] on diag-0", a.id().as_u64());
            assert!(text.contains(&tail), "{text}");
            assert!(
                text.contains(&format!(
                    "task {} 'blocker' [running] on diag-0",
                    a.id().as_u64()
                )),
                "{text}"
            );

            release.send(()).unwrap();
            a.join().unwrap();
            b.join().unwrap();
            wait_until("the gauge falls back to zero", || {
                s.stats().tasks_behind_blocked == 0
            });
            assert_eq!(s.stats().blocked_with_tasks_behind, 1);
            s.shutdown();
        },
    );
}

#[test]
fn a_blocked_thread_with_nothing_behind_it_counts_no_waiting_task() {
    common::in_child(
        module_path!(),
        "a_blocked_thread_with_nothing_behind_it_counts_no_waiting_task",
        || {
            let s = scheduler(None);
            let (release, release_rx) = mpsc::channel::<()>();
            let a = gofer::Builder::new()
                .name("lonely-blocker")
                .scheduler(&s)
                .spawn(move || {
                    let _ = release_rx.recv_timeout(common::PATIENCE);
                })
                .unwrap();
            wait_until("the Dispatcher marks the thread blocked", || {
                s.stats().blocked >= 1
            });
            let dump = s.dump();
            let text = dump.to_string();
            let bt: Vec<_> = dump.blocked_threads().collect();
            assert_eq!(bt.len(), 1, "{text}");
            assert_eq!(bt[0].task_name(), Some("lonely-blocker"), "{text}");
            assert_eq!(bt[0].tasks_behind(), 0, "{text}");
            let st = s.stats();
            assert_eq!(st.tasks_behind_blocked, 0, "{st:?}");
            assert_eq!(st.blocked_with_tasks_behind, 0, "{st:?}");
            release.send(()).unwrap();
            a.join().unwrap();
            s.shutdown();
        },
    );
}

#[test]
fn the_stall_report_names_a_blocked_thread_with_a_task_behind_it() {
    const NAME: &str = "the_stall_report_names_a_blocked_thread_with_a_task_behind_it";
    const REPORT_AFTER: Duration = Duration::from_millis(200);
    if common::child_scenario().as_deref() == Some(NAME) {
        let s = scheduler(Some(REPORT_AFTER));
        let Blocked { a, b, release } = block_a_thread_with_b_behind(&s);
        println!("blocker is task {}", a.id().as_u64());
        // The parent answers once it has read the report.
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        release.send(()).unwrap();
        a.join().unwrap();
        b.join().unwrap();
        s.shutdown();
        println!("CHILD-OK {NAME}");
        std::process::exit(0);
    }
    let mut child = common::spawn_child_piped(module_path!(), NAME);
    // The report's line, then its dump, down to B's entry.
    let report = common::read_stderr_until(
        &mut child,
        "[runnable: waiting for blocked thread diag-0 (blocked ",
        1,
    );
    child.stdin.take().unwrap().write_all(b"done\n").unwrap();
    let (status, out) = common::wait_child(child);
    assert!(
        status.success() && out.contains(&format!("CHILD-OK {NAME}")),
        "{out}\n{report}"
    );
    let a_id: u64 = out
        .lines()
        .find_map(|l| l.split("blocker is task ").nth(1))
        .and_then(|id| id.trim().parse().ok())
        .unwrap_or_else(|| panic!("{out}"));

    let at = report
        .find("stall: thread diag-0 blocked for ")
        .unwrap_or_else(|| panic!("{report}"));
    let line = report[at..].lines().next().unwrap();
    let held = line["stall: thread diag-0 blocked for ".len()..]
        .split(' ')
        .next()
        .unwrap();
    let held = parse_duration(held);
    // Reported once the block had lasted the set time, and while it
    // lasted (it ends only on the parent's answer).
    assert!(held >= REPORT_AFTER && held < common::PATIENCE, "{line}");
    let rest = format!(
        " in task {a_id} 'blocker' in scheduler 'diag': 1 started task runnable behind it can run \
         on no other thread until that task's call returns"
    );
    assert!(line.contains(&rest), "{line}");
    assert!(
        report.contains("'sleeper' [runnable: waiting for blocked thread diag-0"),
        "{report}"
    );
}

#[test]
fn tasks_the_blocking_task_woke_on_its_own_thread_are_counted_behind_it() {
    common::in_child(
        module_path!(),
        "tasks_the_blocking_task_woke_on_its_own_thread_are_counted_behind_it",
        || {
            let s = scheduler(None);
            // Two tasks started on the only core thread, parked on gofer
            // channels.
            let (started_tx, started_rx) = mpsc::channel::<()>();
            let mut waiters = Vec::new();
            let mut wakers = Vec::new();
            for name in ["woken-first", "woken-second"] {
                let (tx, rx) = gofer::chan::unbounded::<u32>();
                let started_tx = started_tx.clone();
                waiters.push(
                    gofer::Builder::new()
                        .name(name)
                        .scheduler(&s)
                        .spawn(move || {
                            started_tx.send(()).unwrap();
                            rx.recv().unwrap();
                        })
                        .unwrap(),
                );
                wakers.push(tx);
            }
            started_rx.recv().unwrap();
            started_rx.recv().unwrap();
            // The blocker wakes both on its own thread (the second takes
            // the next-task slot, pushing the first to the local pinned
            // queue), then blocks the thread.
            let (release, release_rx) = mpsc::channel::<()>();
            let a = gofer::Builder::new()
                .name("blocker")
                .scheduler(&s)
                .spawn(move || {
                    for tx in &wakers {
                        tx.send(1).unwrap();
                    }
                    let _ = release_rx.recv_timeout(common::PATIENCE);
                })
                .unwrap();
            wait_until("the stats count the woken tasks", || {
                s.stats().tasks_behind_blocked >= 1
            });
            let st = s.stats();
            assert_eq!(st.tasks_behind_blocked, 2, "{st:?}");
            let dump = s.dump();
            let text = dump.to_string();
            let behind = dump
                .tasks()
                .iter()
                .filter(|t| t.blocked_behind().is_some())
                .count();
            assert_eq!(behind, 2, "{text}");
            assert!(
                text.contains("2 tasks [runnable: waiting for blocked thread diag-0"),
                "{text}"
            );
            assert!(text.contains("'blocker')] on diag-0: "), "{text}");
            // Both wait for the blocked thread and no other thread could
            // run them, so the block starts no extra thread. The Dispatcher
            // would start one in the cycle that found the block (it runs
            // every 100 µs to 10 ms while a thread is blocked): give it
            // fifty block timeouts. (`threads_started` counts the core
            // thread.)
            std::thread::sleep(50 * gofer::DEFAULT_BLOCK_TIMEOUT);
            let st = s.stats();
            assert_eq!((st.threads, st.threads_started), (1, 1), "{st:?}");
            release.send(()).unwrap();
            a.join().unwrap();
            for w in waiters {
                w.join().unwrap();
            }
            s.shutdown();
        },
    );
}
