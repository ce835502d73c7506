//! The worst gap of 40 ticker tasks (two Processers, a tick every
//! millisecond) while one task spends about 300 ms in a call that blocks:
//! spinning in place (the baseline: the thread is held), `gofer::unblock`,
//! and, through the hooks, a `flock` held by another process, a `waitpid`
//! for `sleep 0.3`, a `poll` on two pipes written 300 ms later. A wait on
//! several descriptors blocks its thread by design (an event loop's wait,
//! ARCHITECTURE.md "Foreign event loops"), so that row now shows a held
//! thread, like the spinning baseline.
//!
//! `cargo run -p gofer-bench --release --features hooks --example offload_gaps [runs]`

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TICKERS: usize = 40;
const BLOCK: Duration = Duration::from_millis(300);

/// The tickers' worst gap while `blocker` runs in a task of its own.
fn worst_gap(blocker: impl FnOnce() + Send + 'static) -> Duration {
    let sched = gofer::Scheduler::builder()
        .min_threads(2)
        .max_threads(2)
        .build()
        .expect("a scheduler");
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let worst = Arc::new(AtomicU64::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let tickers: Vec<_> = (0..TICKERS)
        .map(|i| {
            let (stop, measuring, worst, started) = (
                stop.clone(),
                measuring.clone(),
                worst.clone(),
                started.clone(),
            );
            on(&sched, i % 2, move || {
                started.fetch_add(1, Ordering::Relaxed);
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    gofer::sleep(Duration::from_millis(1));
                    if measuring.load(Ordering::Relaxed) {
                        worst.fetch_max(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    while started.load(Ordering::Relaxed) < TICKERS {
        std::thread::sleep(Duration::from_millis(1));
    }
    measuring.store(true, Ordering::Relaxed);
    on(&sched, 0, blocker).join().expect("the blocking task");
    measuring.store(false, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for t in tickers {
        t.join().expect("a ticker");
    }
    sched.shutdown();
    Duration::from_nanos(worst.load(Ordering::Relaxed))
}

/// Spawns `f` pinned to Processer `at`: half the tickers share the
/// blocking task's thread, whatever the placement would have chosen.
fn on<T: Send + 'static>(
    sched: &gofer::Scheduler,
    at: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> gofer::JoinHandle<T> {
    gofer::Builder::new()
        .pin(at)
        .scheduler(sched)
        .spawn(f)
        .expect("a pinned task")
}

fn spin() {
    let t = Instant::now();
    while t.elapsed() < BLOCK {
        std::hint::spin_loop();
    }
}

fn flock() {
    let path = std::env::temp_dir().join(format!("gofer-offload-gaps-{}", std::process::id()));
    std::fs::write(&path, b"lock").unwrap();
    let mut holder = std::process::Command::new("flock")
        .arg(&path)
        .args(["-c", "echo held; sleep 0.3"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn flock(1)");
    let mut line = [0u8; 5];
    std::io::Read::read_exact(holder.stdout.as_mut().unwrap(), &mut line).unwrap();
    let p = path.clone();
    let gap = worst_gap(move || {
        let f = std::fs::File::open(&p).unwrap();
        // SAFETY: a valid descriptor; flock takes no pointer.
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    });
    holder.wait().unwrap();
    let _ = std::fs::remove_file(&path);
    println!("  flock    {gap:>10.1?}");
}

fn poll() -> Duration {
    let mut a = [0; 2];
    let mut b = [0; 2];
    // SAFETY: two ints each for pipe(2) to fill.
    unsafe { (libc::pipe(a.as_mut_ptr()), libc::pipe(b.as_mut_ptr())) };
    let w = b[1];
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        go_rx.recv().unwrap();
        std::thread::sleep(BLOCK);
        // SAFETY: one byte from a live buffer.
        unsafe { libc::write(w, b"x".as_ptr().cast(), 1) };
    });
    let (ra, rb) = (a[0], b[0]);
    let gap = worst_gap(move || {
        let mut fds = [ra, rb].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        go_tx.send(()).unwrap();
        // SAFETY: two live pollfds.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, 10_000) };
    });
    writer.join().unwrap();
    for fd in [a[0], a[1], b[0], b[1]] {
        // SAFETY: descriptors made above.
        unsafe { libc::close(fd) };
    }
    gap
}

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3);
    println!(
        "worst gap of {TICKERS} 1 ms tickers on 2 Processers while one task blocks {BLOCK:?} (hooks: {})",
        gofer::hooks::enabled()
    );
    for run in 0..runs {
        println!("run {run}");
        println!("  spin     {:>10.1?}", worst_gap(spin));
        println!(
            "  unblock  {:>10.1?}",
            worst_gap(|| gofer::unblock(|| std::thread::sleep(BLOCK)))
        );
        flock();
        println!(
            "  waitpid  {:>10.1?}",
            worst_gap(|| {
                let _ = std::process::Command::new("sleep").arg("0.3").status();
            })
        );
        println!("  poll     {:>10.1?}", poll());
    }
}
