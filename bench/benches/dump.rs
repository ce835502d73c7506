//! What a task dump costs: 100,000 tasks parked in one place (a channel
//! receive, two call levels deep in the user's code), dumped from a plain
//! thread. Reports the time of each dump, the heap it allocated at its peak
//! (a counting allocator), the size of its text, and that the Processers
//! went on serving the tasks afterwards.
//!
//! Dense 64 KiB stacks: 100,000 guarded stacks would need 200,000 memory
//! mappings, three times this machine's `vm.max_map_count`.
//!
//! Run: `cargo bench -p gofer-bench --bench dump`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// The system allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; the
// counters are plain atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const TASKS: usize = 100_000;

#[inline(never)]
fn handler(rx: &gofer::chan::Receiver<u64>) -> u64 {
    std::hint::black_box(rx.recv().unwrap_or(0))
}

#[inline(never)]
fn serve(rx: gofer::chan::Receiver<u64>) -> u64 {
    handler(&rx) + 1
}

fn main() {
    let sched = gofer::Scheduler::builder()
        .min_threads(2)
        .max_threads(2)
        .dense_stacks(true)
        .stack_size(64 << 10)
        .build()
        .expect("valid config");
    let (tx, rx) = gofer::chan::unbounded::<u64>();
    let handles: Vec<_> = (0..TASKS)
        .map(|_| {
            let rx = rx.clone();
            sched.spawn(move || serve(rx))
        })
        .collect();
    // Until every task has parked.
    loop {
        let d = sched.dump();
        let parked = d
            .tasks()
            .iter()
            .filter(|t| t.state() == gofer::debug::TaskState::Parked)
            .count();
        if parked == TASKS {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    println!("dump of {TASKS} tasks parked in one place (dense 64 KiB stacks, 2 Processers)");
    for round in 1..=3 {
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let t0 = Instant::now();
        let d = sched.dump();
        let took = t0.elapsed();
        let text = d.to_string();
        let peak = PEAK.load(Ordering::Relaxed) - before;
        assert_eq!(d.tasks().len(), TASKS);
        println!(
            "round {round}: dump {took:.2?} (its own clock: {:.2?}); heap at peak {:.1} MiB \
             ({:.0} B per task); text {} lines, {} bytes",
            d.took(),
            peak as f64 / (1 << 20) as f64,
            peak as f64 / TASKS as f64,
            text.lines().count(),
            text.len()
        );
    }
    let t0 = Instant::now();
    for i in 0..TASKS {
        tx.send(i as u64).unwrap();
    }
    let sum: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(sum, (0..TASKS as u64).map(|i| i + 1).sum());
    println!(
        "all {TASKS} tasks woken and joined after the dumps in {:.2?}",
        t0.elapsed()
    );
    sched.shutdown();
}
