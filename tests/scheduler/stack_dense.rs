//! Dense stacks lift the memory-mapping ceiling; guarded stacks fail cleanly
//! at it; a dense-stack overflow is reported at the task's next switch.
//!
//! The ceiling and the overflow are process-wide events (the map count, an
//! abort), so those tests re-run this test binary as a child process.

use std::process::Command;
use std::sync::{Arc, Mutex};

use gofer::{Builder, Scheduler, SpawnError};

use crate::common;

/// Re-runs the named test of this module in a child with `GOFER_CHILD` set.
fn run_child(test: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            common::test_path(module_path!(), test).as_str(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env("GOFER_CHILD", test)
        .output()
        .unwrap()
}

fn is_child(test: &str) -> bool {
    std::env::var("GOFER_CHILD").is_ok_and(|v| v == test)
}

/// Parks `n` tasks on `sched` until `release` is set (a `park` may return
/// spuriously), and returns their wake-up handles and joins.
fn park_many(
    sched: &Scheduler,
    n: usize,
    release: &Arc<std::sync::atomic::AtomicBool>,
) -> (Vec<gofer::Task>, Vec<gofer::JoinHandle<()>>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let hs: Vec<_> = (0..n)
        .map(|_| {
            let tx = tx.clone();
            let release = release.clone();
            sched.spawn(move || {
                tx.send(gofer::current()).unwrap();
                while !release.load(std::sync::atomic::Ordering::SeqCst) {
                    gofer::park();
                }
            })
        })
        .collect();
    let tasks: Vec<_> = rx.iter().take(n).collect();
    (tasks, hs)
}

#[test]
fn dense_mode_holds_more_parked_tasks_than_the_guarded_ceiling() {
    let n = 40_000; // past ~32k, where guarded stacks run out of mappings
    let sched = Scheduler::builder()
        .min_threads(2)
        .dense_stacks(true)
        .stack_size(16 * 1024)
        .build()
        .unwrap();
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (tasks, hs) = park_many(&sched, n, &release);
    assert_eq!(tasks.len(), n);
    let st = sched.stats();
    assert!(st.live_stacks >= n, "{} stacks live", st.live_stacks);
    assert_eq!(st.alive, n);
    release.store(true, std::sync::atomic::Ordering::SeqCst);
    for t in &tasks {
        t.unpark();
    }
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(sched.stats().completed, n as u64);
    sched.shutdown();
}

#[test]
fn guarded_mode_fails_cleanly_past_the_map_count_ceiling() {
    const TEST: &str = "guarded_mode_fails_cleanly_past_the_map_count_ceiling";
    let max_maps: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(65_530);
    if max_maps > 200_000 {
        eprintln!(
            "skipped: vm.max_map_count is {max_maps}; the ceiling is too far away to reach quickly"
        );
        return;
    }
    if !is_child(TEST) {
        let out = run_child(TEST);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("CHILD-OK"),
            "child did not reach the ceiling: {stdout}"
        );
        return;
    }
    let sched = Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .stack_size(16 * 1024)
        .build()
        .unwrap();
    let woken = Arc::new(Mutex::new(Vec::new()));
    let mut joins = Vec::new();
    let err = loop {
        assert!(
            joins.len() < max_maps,
            "no error after {} tasks",
            joins.len()
        );
        let w = woken.clone();
        let spawned = Builder::new().scheduler(&sched).spawn(move || {
            w.lock().unwrap().push(gofer::current());
            gofer::park();
        });
        match spawned {
            Ok(h) => joins.push(h),
            Err(e) => break e,
        }
        // Let each batch start (and take its stacks) before spawning more:
        // every task either parks or, with no stack to be had, completes.
        if joins.len() % 256 == 0 {
            let n = joins.len();
            while woken.lock().unwrap().len() + (sched.stats().completed as usize) < n {
                std::thread::yield_now();
            }
        }
    };
    assert!(matches!(err, SpawnError::StackExhausted { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("vm.max_map_count") && msg.contains("dense_stacks(true)"),
        "{msg}"
    );
    // Wake every task that parked; tasks admitted but never given a stack
    // report that through their JoinHandle.
    for t in woken.lock().unwrap().drain(..) {
        t.unpark();
    }
    let (mut ran, mut starved) = (0, 0);
    for h in joins {
        match h.join() {
            Ok(()) => ran += 1,
            Err(e) => {
                assert!(e.is_stack_exhausted(), "{e}");
                starved += 1;
            }
        }
    }
    assert!(ran > 10_000, "only {ran} tasks ran before the ceiling");
    println!("CHILD-OK ran {ran}, starved {starved}: {msg}");
    sched.shutdown();
}

#[test]
fn dense_stack_overflow_is_reported_at_the_next_switch() {
    const TEST: &str = "dense_stack_overflow_is_reported_at_the_next_switch";
    if !is_child(TEST) {
        let out = run_child(TEST);
        let stderr = String::from_utf8_lossy(&out.stderr);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "stderr: {stderr}");
        assert!(
            stderr.contains("'deep' overflowed its 16384-byte dense stack"),
            "stderr: {stderr}"
        );
        return;
    }
    let sched = Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .dense_stacks(true)
        .stack_size(16 * 1024)
        .build()
        .unwrap();
    // A parked neighbour owns the slot below, so the overflow lands in
    // mapped memory (its stack) rather than outside the slab.
    let (tx, rx) = std::sync::mpsc::channel();
    let _neighbour = sched.spawn(move || {
        tx.send(gofer::current()).unwrap();
        gofer::park();
    });
    let _neighbour_task = rx.recv().unwrap();
    // Recurse until about 2 KiB past the 16 KiB limit (measured from the
    // first frame's address), then switch: the damage is seen there.
    fn recurse(top: usize) -> u64 {
        let buf = std::hint::black_box([7u8; 512]);
        let here = buf.as_ptr() as usize;
        if top - here > 18 * 1024 {
            gofer::yield_now();
            return buf[0] as u64;
        }
        recurse(top) + std::hint::black_box(buf)[1] as u64
    }
    let h = Builder::new()
        .name("deep")
        .scheduler(&sched)
        .spawn(|| {
            let anchor = 0u8;
            recurse(std::hint::black_box(&anchor) as *const u8 as usize)
        })
        .unwrap();
    let _ = h.join();
    unreachable!("the overflow was not detected");
}
