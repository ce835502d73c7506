//! Many Processers: building, running work and going idle must not cost
//! O(n²). Idle Processers search for work only while few others do, a
//! steal round visits a bounded number of victims, and the Dispatcher's
//! bookkeeping is O(n) per cycle.
//!
//! The bounds are generous (a shared 2-core machine); the figures are in
//! `bench/benches/processers.rs`. The test takes its turn
//! (`one_at_a_time`), so that no other test of the same binary adds to the
//! process's CPU time while it measures.

use std::time::{Duration, Instant};

use gofer::Scheduler;

/// CPU time (user + system) used so far by the whole process.
fn process_cpu() -> Duration {
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer for the call.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(rc, 0, "getrusage failed");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[test]
fn a_scheduler_with_2000_processers_builds_runs_1000_tasks_and_goes_idle() {
    const PROCS: usize = 2000;
    const TASKS: usize = 1000;
    let _turn = crate::one_at_a_time();

    let start = Instant::now();
    let s = Scheduler::builder()
        .min_threads(PROCS)
        .max_threads(PROCS)
        .name("scaling")
        .build()
        .expect("valid scheduler config");
    let build = start.elapsed();
    assert!(
        build < Duration::from_secs(10),
        "building {PROCS} Processers took {build:?}"
    );
    assert_eq!(s.stats().threads, PROCS);

    let start = Instant::now();
    let hs: Vec<_> = (0..TASKS).map(|i| s.spawn(move || i * 2)).collect();
    for (i, h) in hs.into_iter().enumerate() {
        assert_eq!(h.join().expect("a no-op task"), i * 2);
    }
    let tasks = start.elapsed();
    assert!(
        tasks < Duration::from_secs(10),
        "{TASKS} tasks on {PROCS} Processers took {tasks:?}"
    );

    // Nothing is left to run: the whole process must be (nearly) idle.
    let window = Duration::from_secs(1);
    let before = process_cpu();
    // A measurement window, not a synchronisation.
    std::thread::sleep(window);
    let used = process_cpu().saturating_sub(before);
    assert!(
        used < Duration::from_millis(300),
        "with {PROCS} Processers and nothing to run, the process used {used:?} of CPU in {window:?} \
         (build {build:?}, {TASKS} tasks {tasks:?})"
    );
    eprintln!("{PROCS} Processers: build {build:?}, {TASKS} tasks {tasks:?}, idle CPU {used:?}");
    s.shutdown();
}
