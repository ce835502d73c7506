//! A scheduler that failed to get a stack because *other* schedulers held
//! the process-wide guarded-stack cap spawns again once they let go.
//!
//! Runs in a child process: it maps the process's whole guarded-stack cap
//! (about 30,000 stacks of 16 KiB at `vm.max_map_count = 65530`).

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{child_scenario, describe, run_child_watched};
use gofer::{chan, Scheduler, SpawnError};

fn guarded_cap() -> usize {
    let max: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(65_530);
    max.saturating_sub(4096.min(max / 2)) / 2
}

const LOCKOUT: &str = "a_scheduler_spawns_again_once_other_schedulers_free_their_stacks";

#[test]
fn a_scheduler_spawns_again_once_other_schedulers_free_their_stacks() {
    if child_scenario().as_deref() == Some("lockout") {
        let cap = guarded_cap();
        assert!(
            cap <= 200_000,
            "vm.max_map_count allows {cap} guarded stacks: too many to fill in a test"
        );
        let hog = Scheduler::builder()
            .min_threads(2)
            .stack_size(16 << 10)
            .stack_cache(0)
            .name("hog")
            .build()
            .unwrap();
        // Park more tasks than the cap allows: the ones past it fail.
        let (release_tx, release_rx) = chan::unbounded::<()>();
        let started = Arc::new(AtomicUsize::new(0));
        let n = cap + 1000;
        let mut handles = Vec::with_capacity(n);
        for _ in 0..n {
            let (rx, started) = (release_rx.clone(), started.clone());
            match gofer::Builder::new().scheduler(&hog).spawn(move || {
                started.fetch_add(1, Ordering::Relaxed);
                let _ = rx.recv();
            }) {
                Ok(h) => handles.push(h),
                Err(SpawnError::StackExhausted { .. }) => break,
                Err(e) => panic!("unexpected spawn error: {e}"),
            }
        }
        common::wait_until("every admitted task started or failed", || {
            started.load(Ordering::Relaxed) + handles.iter().filter(|h| h.is_finished()).count()
                == handles.len()
        });
        assert!(started.load(Ordering::Relaxed) < handles.len() || handles.len() < n);

        // Another scheduler finds no stack left: its task fails at first
        // run, and then it refuses spawns.
        let other = Scheduler::builder()
            .min_threads(1)
            .stack_size(16 << 10)
            .name("other")
            .build()
            .unwrap();
        let first = gofer::Builder::new().scheduler(&other).spawn(|| 1);
        match first {
            Ok(h) => assert!(h.join().expect_err("no stack").is_stack_exhausted()),
            Err(e) => assert!(matches!(e, SpawnError::StackExhausted { .. }), "{e}"),
        }
        let refused = gofer::Builder::new().scheduler(&other).spawn(|| 1);
        assert!(
            matches!(refused, Err(SpawnError::StackExhausted { .. })),
            "{refused:?}"
        );

        // The hog lets go of everything.
        drop(release_tx);
        drop(release_rx);
        for h in handles {
            let _ = h.join();
        }
        hog.shutdown();
        drop(hog);

        // Stacks are free again: the other scheduler spawns and runs.
        let h = gofer::Builder::new()
            .scheduler(&other)
            .spawn(|| 2)
            .expect("stacks are free again, so spawning works");
        assert_eq!(h.join().expect("ran on a fresh stack"), 2);
        other.shutdown();
        println!("CHILD-OK");
        return;
    }
    let out = run_child_watched(
        module_path!(),
        LOCKOUT,
        "lockout",
        &[],
        Duration::from_secs(300),
    )
    .expect("the child hung");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("CHILD-OK"),
        "{}",
        describe(&out)
    );
}
