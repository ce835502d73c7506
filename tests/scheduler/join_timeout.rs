//! `JoinHandle::join_timeout` / `join_deadline`: giving up hands the
//! handle back, the task goes on, and a later join gets its value; a
//! finished or failed task answers at once; in a task and on a thread.

use std::time::{Duration, Instant};

use gofer::chan;

fn sched() -> gofer::Scheduler {
    gofer::Scheduler::builder().min_threads(2).build().unwrap()
}

#[test]
fn a_join_that_times_out_hands_the_handle_back_and_a_later_join_gets_the_value() {
    let s = sched();
    let (tx, rx) = chan::bounded::<u32>(0);
    let h = s.spawn(move || rx.recv().unwrap() * 2);
    let t = Instant::now();
    let h = match h.join_timeout(Duration::from_millis(30)) {
        Err(h) => h,
        Ok(r) => panic!("joined a task that was still waiting: {:?}", r.is_ok()),
    };
    assert!(t.elapsed() >= Duration::from_millis(30), "gave up early");
    assert!(!h.is_finished());
    tx.send(21).unwrap();
    let v = h.join_timeout(Duration::from_secs(60)).expect("timed out");
    assert_eq!(v.unwrap(), 42);
    s.shutdown();
}

#[test]
fn a_task_joining_with_a_timeout_parks_and_gives_up() {
    let s = sched();
    let (tx, rx) = chan::bounded::<()>(0);
    let inner = s.spawn(move || rx.recv().is_ok());
    let outer = s.spawn(move || {
        let h = inner
            .join_timeout(Duration::from_millis(20))
            .expect_err("joined early");
        tx.send(()).unwrap();
        h.join_deadline(Instant::now() + Duration::from_secs(60))
            .expect("timed out")
    });
    assert!(outer.join().unwrap().unwrap());
    s.shutdown();
}

#[test]
fn finished_and_failed_tasks_answer_at_once() {
    let s = sched();
    let ok = s.spawn(|| 7);
    let failed = s.spawn(|| -> u32 { panic!("on purpose") });
    // Wait for both to finish without joining (a join takes the handle).
    let t = Instant::now();
    while !(ok.is_finished() && failed.is_finished()) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "tasks did not finish"
        );
        std::thread::yield_now();
    }
    assert_eq!(
        ok.join_timeout(Duration::ZERO).expect("timed out").unwrap(),
        7
    );
    let e = failed
        .join_timeout(Duration::ZERO)
        .expect("a finished task timed out");
    assert!(e.is_err(), "a panicked task joined Ok");
    s.shutdown();
}
