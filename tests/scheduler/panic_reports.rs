//! Panics that happen where nobody can catch them are contained and
//! reported with the task's id and name: a detached task's result (or panic
//! payload) whose destructor panics, and the panic report of a task itself.
//!
//! Each case runs in a child process with a watchdog, since the failure
//! being guarded against is an abort.

use crate::common;

use std::time::Duration;

use common::{child_scenario, describe, run_child_watched};
use gofer::{chan, Builder, Scheduler};

/// A value whose destructor panics.
struct PanicsOnDrop(&'static str);

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("{}", self.0);
    }
}

fn sched() -> Scheduler {
    Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .name("pr")
        .build()
        .expect("valid config")
}

/// The scheduler still runs tasks on the same single Processer.
fn still_works(s: &Scheduler) {
    assert_eq!(s.spawn(|| 6 * 7).join().expect("a later task runs"), 42);
    assert_eq!(s.stats().threads, 1, "the Processer is still there");
}

fn run(test: &str, scenario: &str) -> (String, String) {
    let out = run_child_watched(module_path!(), test, scenario, &[], Duration::from_secs(60))
        .unwrap_or_else(|| panic!("{test}: the child hung"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("CHILD-OK"),
        "{}",
        describe(&out)
    );
    (stdout, String::from_utf8_lossy(&out.stderr).into_owned())
}

const DETACHED_RESULT: &str = "a_detached_tasks_result_that_panics_when_dropped_is_contained";

#[test]
fn a_detached_tasks_result_that_panics_when_dropped_is_contained() {
    if child_scenario().as_deref() == Some("result") {
        let s = sched();
        let (go_tx, go_rx) = chan::bounded::<()>(0);
        let h = Builder::new()
            .name("dropper")
            .scheduler(&s)
            .spawn(move || {
                go_rx.recv().unwrap();
                PanicsOnDrop("result boom")
            })
            .unwrap();
        println!("ID {}", h.id());
        drop(h); // detached: the task's side drops the result
        go_tx.send(()).unwrap();
        still_works(&s);
        s.shutdown();
        println!("CHILD-OK");
        return;
    }
    let (stdout, stderr) = run(DETACHED_RESULT, "result");
    let id = stdout
        .split("ID ")
        .nth(1)
        .and_then(|r| r.lines().next())
        .expect("id");
    let want = format!(
        "gofer: a destructor panicked while dropping the result of task {id} 'dropper': result boom"
    );
    assert!(stderr.contains(&want), "missing {want:?} in:\n{stderr}");
}

const DETACHED_PAYLOAD: &str =
    "a_detached_tasks_panic_payload_that_panics_when_dropped_is_contained";

#[test]
fn a_detached_tasks_panic_payload_that_panics_when_dropped_is_contained() {
    if child_scenario().as_deref() == Some("payload") {
        let s = sched();
        let (go_tx, go_rx) = chan::bounded::<()>(0);
        let h = s.spawn(move || {
            go_rx.recv().unwrap();
            std::panic::panic_any(PanicsOnDrop("payload boom"));
        });
        println!("ID {}", h.id());
        drop(h);
        go_tx.send(()).unwrap();
        still_works(&s);
        s.shutdown();
        println!("CHILD-OK");
        return;
    }
    let (stdout, stderr) = run(DETACHED_PAYLOAD, "payload");
    let id = stdout
        .split("ID ")
        .nth(1)
        .and_then(|r| r.lines().next())
        .expect("id");
    let want = format!(
        "gofer: a destructor panicked while dropping the result of task {id}: payload boom"
    );
    assert!(stderr.contains(&want), "missing {want:?} in:\n{stderr}");
}

const HANDLE_LAST: &str = "a_result_dropped_last_by_its_handle_that_panics_is_contained";

#[test]
fn a_result_dropped_last_by_its_handle_that_panics_is_contained() {
    if child_scenario().as_deref() == Some("handle") {
        let s = sched();
        let h = Builder::new()
            .name("kept")
            .scheduler(&s)
            .spawn(|| PanicsOnDrop("handle boom"))
            .unwrap();
        println!("ID {}", h.id());
        common::wait_until("the task finished", || h.is_finished());
        // A task drops the handle: the panic must not fail that task either.
        let dropper = s.spawn(move || drop(h));
        dropper.join().expect("dropping a handle does not panic");
        drop(s.spawn(|| ())); // and from a plain thread, too
        still_works(&s);
        s.shutdown();
        println!("CHILD-OK");
        return;
    }
    let (stdout, stderr) = run(HANDLE_LAST, "handle");
    let id = stdout
        .split("ID ")
        .nth(1)
        .and_then(|r| r.lines().next())
        .expect("id");
    let want = format!(
        "gofer: a destructor panicked while dropping the result of task {id} 'kept': handle boom"
    );
    assert!(stderr.contains(&want), "missing {want:?} in:\n{stderr}");
}

const REPORT: &str = "a_tasks_panic_report_names_the_task";

#[test]
fn a_tasks_panic_report_names_the_task() {
    if child_scenario().as_deref() == Some("report") {
        let s = sched();
        let h = Builder::new()
            .name("reporter")
            .scheduler(&s)
            .spawn(|| panic!("reported boom"))
            .unwrap();
        println!("ID {}", h.id());
        assert!(h.join().expect_err("panicked").is_panic());
        s.shutdown();
        println!("CHILD-OK");
        return;
    }
    let (stdout, stderr) = run(REPORT, "report");
    let id = stdout
        .split("ID ")
        .nth(1)
        .and_then(|r| r.lines().next())
        .expect("id");
    let want = format!("gofer: task {id} 'reporter' panicked on thread 'pr-0':");
    let at = stderr
        .find(&want)
        .unwrap_or_else(|| panic!("missing {want:?} in:\n{stderr}"));
    assert!(
        stderr[at..].contains("reported boom"),
        "the usual report follows:\n{stderr}"
    );
}
