//! `JoinError` is `Send + Sync` and `JoinHandle<T>` is `Sync` for
//! `T: Send`, so `join()?` goes into `Box<dyn Error + Send + Sync>` and a
//! handle can be shared by reference between threads.

use std::error::Error;
use std::sync::Arc;

fn send_sync<T: Send + Sync>() {}

#[test]
fn join_error_and_handles_are_send_and_sync() {
    send_sync::<gofer::JoinError>();
    send_sync::<gofer::JoinHandle<u32>>();
    send_sync::<gofer::JoinHandle<std::cell::Cell<u32>>>(); // T: Send suffices
}

fn run(sched: &gofer::Scheduler, fail: bool) -> Result<u32, Box<dyn Error + Send + Sync>> {
    let h = sched.spawn(move || {
        if fail {
            panic!("the task failed on purpose");
        }
        7
    });
    let v = h.join()?;
    Ok(v * 6)
}

#[test]
fn join_with_the_question_mark_into_a_send_sync_error() {
    let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
    assert_eq!(run(&sched, false).unwrap(), 42);
    let e = run(&sched, true).unwrap_err();
    assert!(e.to_string().contains("the task failed on purpose"), "{e}");
    let je = e.downcast::<gofer::JoinError>().expect("a JoinError");
    assert!(je.is_panic());
    let payload = je.into_panic();
    assert_eq!(
        payload.downcast_ref::<&str>().copied(),
        Some("the task failed on purpose")
    );
    sched.shutdown();
}

#[test]
fn a_handle_shared_by_reference_is_read_from_other_threads() {
    let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let h = Arc::new(sched.spawn(move || {
        let _ = rx.recv();
        5
    }));
    let watchers: Vec<_> = (0..4)
        .map(|_| {
            let h = h.clone();
            std::thread::spawn(move || (h.id(), h.is_finished()))
        })
        .collect();
    for w in watchers {
        let (id, _) = w.join().unwrap();
        assert_eq!(id, h.id());
    }
    tx.send(()).unwrap();
    let h = Arc::try_unwrap(h).expect("the watchers are gone");
    assert_eq!(h.join().unwrap(), 5);
    sched.shutdown();
}
