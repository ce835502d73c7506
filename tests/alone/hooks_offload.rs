//! With the `hooks` feature, a call epoll cannot wait for, made inside a
//! task, leaves the task's thread for the blocking pool: the task parks and
//! the other tasks bound to its thread keep running.
//!
//! Each scenario runs 40 ticker tasks on two Processers (each ticks every
//! millisecond through `gofer::sleep` and records its worst gap) while one
//! task blocks for about 300 ms in a hooked call: a `flock` on a file
//! another process holds locked, a `waitpid` for `sleep 0.3`, a `ppoll` on
//! a pipe that becomes readable 300 ms later (a wait on one socket or pipe;
//! waits on several descriptors block the thread, see
//! `hooks_foreign_loop.rs`). Started tasks stay on the
//! thread where they first ran, so a call that blocked the thread would
//! stop the tickers bound to it for the whole 300 ms. Each scenario runs
//! in a child process under a watchdog.
//!
//! Without the feature this file compiles to nothing.
#![cfg(feature = "hooks")]

use crate::common;

use std::io::Write;
use std::net::ToSocketAddrs;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gofer::chan;

const TICKERS: usize = 40;

/// How long the blocking call waits.
const BLOCK: Duration = Duration::from_millis(300);

/// The worst ticker gap allowed while it waits: well above a tick on a
/// loaded machine, well below [`BLOCK`].
const GAP_BOUND: Duration = Duration::from_millis(150);

/// Runs [`TICKERS`] tickers on two Processers and, once they all run, one
/// task that makes `blocker`'s call. Returns the tickers' worst gap while
/// the call ran, and what `blocker` returned.
fn worst_gap_during<T: Send + 'static>(
    blocker: impl FnOnce() -> T + Send + 'static,
) -> (Duration, T) {
    let sched = common::fixed_scheduler(2);
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
                    let gap = t.elapsed().as_nanos() as u64;
                    if measuring.load(Ordering::Relaxed) {
                        worst.fetch_max(gap, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    common::wait_until("every ticker started", || {
        started.load(Ordering::Relaxed) == TICKERS
    });
    measuring.store(true, Ordering::Relaxed);
    let out = on(&sched, 0, blocker).join().expect("the blocking task");
    measuring.store(false, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for t in tickers {
        t.join().expect("a ticker");
    }
    sched.shutdown();
    (Duration::from_nanos(worst.load(Ordering::Relaxed)), out)
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

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gofer-offload-{}-{name}", std::process::id()))
}

fn assert_small_gap(what: &str, gap: Duration, waited: Duration) {
    println!("figure: {what}: waited {waited:?}, worst ticker gap {gap:?}");
    assert!(
        waited >= BLOCK / 2,
        "{what}: the call did not wait ({waited:?}): the scenario proves nothing"
    );
    assert!(
        gap < GAP_BOUND,
        "{what}: the tickers stalled for {gap:?} while the call waited {waited:?}"
    );
}

#[test]
fn a_flock_waiting_for_another_process_leaves_the_thread() {
    let _turn = crate::one_at_a_time();
    common::in_child(
        module_path!(),
        "a_flock_waiting_for_another_process_leaves_the_thread",
        || {
            let path = temp_path("flock");
            std::fs::write(&path, b"lock").unwrap();
            // The holder: another process takes the lock, says so, holds it for
            // BLOCK and exits (its lock goes with it).
            let mut holder = std::process::Command::new("flock")
                .arg(&path)
                .args(["-c", "echo held; sleep 0.3"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("spawn flock(1)");
            let mut line = [0u8; 5];
            std::io::Read::read_exact(holder.stdout.as_mut().unwrap(), &mut line).unwrap();
            assert_eq!(&line, b"held\n");
            let p = path.clone();
            let (gap, (r, waited)) = worst_gap_during(move || {
                let f = std::fs::File::open(&p).unwrap();
                let t = Instant::now();
                // SAFETY: a valid descriptor; flock takes no pointer.
                let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
                (r, t.elapsed())
            });
            assert_eq!(r, 0);
            holder.wait().unwrap();
            let _ = std::fs::remove_file(&path);
            assert_small_gap("flock", gap, waited);
        },
    );
}

#[test]
fn a_waitpid_for_a_child_leaves_the_thread() {
    let _turn = crate::one_at_a_time();
    common::in_child(
        module_path!(),
        "a_waitpid_for_a_child_leaves_the_thread",
        || {
            let (gap, (status, waited)) = worst_gap_during(|| {
                let t = Instant::now();
                let s = std::process::Command::new("sleep").arg("0.3").status();
                (s.map(|s| s.success()).ok(), t.elapsed())
            });
            assert_eq!(status, Some(true));
            assert_small_gap("waitpid", gap, waited);
        },
    );
}

fn pipe() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: two ints for pipe(2) to fill.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    (fds[0], fds[1])
}

#[test]
fn a_ppoll_on_a_pipe_leaves_the_thread() {
    let _turn = crate::one_at_a_time();
    common::in_child(
        module_path!(),
        "a_ppoll_on_a_pipe_leaves_the_thread",
        || {
            let (r, w) = pipe();
            // A plain thread writes to the pipe once the ppoll began.
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let writer = std::thread::spawn(move || {
                go_rx.recv().unwrap();
                std::thread::sleep(BLOCK);
                // SAFETY: one byte from a live buffer.
                unsafe { libc::write(w, b"x".as_ptr().cast(), 1) };
            });
            let (gap, (n, revents, waited)) = worst_gap_during(move || {
                let mut fd = libc::pollfd {
                    fd: r,
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ts = libc::timespec {
                    tv_sec: 10,
                    tv_nsec: 0,
                };
                go_tx.send(()).unwrap();
                let t = Instant::now();
                // SAFETY: one live pollfd, a live timespec, no mask.
                let n = unsafe { libc::ppoll(&mut fd, 1, &ts, std::ptr::null()) };
                (n, fd.revents, t.elapsed())
            });
            writer.join().unwrap();
            assert_eq!((n, revents), (1, libc::POLLIN));
            for fd in [r, w] {
                // SAFETY: descriptors this test made.
                unsafe { libc::close(fd) };
            }
            assert_small_gap("ppoll on a pipe", gap, waited);
        },
    );
}

/// How many tasks [`reading_files_and_resolving_names_in_many_tasks_leave_the_processers_unblocked`] starts.
const BURST_TASKS: usize = 1000;

/// At most this many pool threads for [`BURST_TASKS`] short calls made at
/// once: the pool grows while calls block, not per call (the cap, 512,
/// is what a thread per waiting call reaches).
const BURST_POOL_BOUND: usize = 128;

/// 1,000 tasks on two Processers each read a 64 KiB file with
/// `std::fs::read` and resolve `localhost:80`: the hooks hand both to the
/// blocking pool, every result is right, and no Processer is ever counted
/// blocked. The pool's threads start from its spawner, not from the
/// Processers' threads, and only as many as the calls need: starting one
/// thread per call from the Processers (a burst of 512 thread starts)
/// kept their threads asleep on the process's locks (thread-stack cache,
/// allocator arenas shared with hundreds of pool threads, preempted
/// holders) long enough for the Dispatcher to count them blocked.
#[test]
fn reading_files_and_resolving_names_in_many_tasks_leave_the_processers_unblocked() {
    let _turn = crate::one_at_a_time();
    common::in_child(
        module_path!(),
        "reading_files_and_resolving_names_in_many_tasks_leave_the_processers_unblocked",
        || {
            let path = temp_path("64k");
            let data: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
            std::fs::File::create(&path)
                .unwrap()
                .write_all(&data)
                .unwrap();
            // One shared copy to compare with: the spawning thread does not
            // allocate 64 KiB per task for the Processers to free.
            let data = Arc::new(data);
            let sched = common::fixed_scheduler(2);
            let (tx, rx) = chan::unbounded();
            for _ in 0..BURST_TASKS {
                let (tx, path, data) = (tx.clone(), path.clone(), data.clone());
                drop(sched.spawn(move || {
                    let read_ok = std::fs::read(&path).is_ok_and(|d| d == *data);
                    let resolved = "localhost:80"
                        .to_socket_addrs()
                        .is_ok_and(|mut a| a.any(|a| a.ip().is_loopback()));
                    tx.send((read_ok, resolved)).unwrap();
                }));
            }
            drop(tx);
            let results: Vec<(bool, bool)> = rx.iter().collect();
            assert_eq!(results.len(), BURST_TASKS);
            assert!(results.iter().all(|&(r, _)| r), "a read came out wrong");
            assert!(results.iter().all(|&(_, n)| n), "localhost did not resolve");
            let stats = sched.stats();
            sched.shutdown();
            let _ = std::fs::remove_file(&path);
            let (detections, threads) = (stats.blocked_detections, stats.blocking_threads);
            println!(
                "figure: {BURST_TASKS} reads and lookups: {detections} blocked detections, {threads} pool threads"
            );
            // Without the offloading hooks nothing starts a pool thread.
            assert!(
                threads > 0,
                "no blocking-pool thread ran the reads and lookups"
            );
            assert!(
                threads <= BURST_POOL_BOUND,
                "{threads} pool threads for calls that do not block"
            );
            assert_eq!(detections, 0, "a Processer was counted blocked");
        },
    );
}

#[test]
fn a_file_read_made_inside_unblock_goes_straight_to_libc_on_the_pool_thread() {
    let _turn = crate::one_at_a_time();
    common::in_child(
        module_path!(),
        "a_file_read_made_inside_unblock_goes_straight_to_libc_on_the_pool_thread",
        || {
            let path = temp_path("in-unblock");
            std::fs::write(&path, b"pool thread").unwrap();
            let sched = common::fixed_scheduler(1);
            let p = path.clone();
            let h = sched.spawn(move || {
                let me = std::thread::current().id();
                let (on, got) = gofer::unblock(|| (std::thread::current().id(), std::fs::read(&p)));
                (on != me, got.unwrap())
            });
            let (elsewhere, got) = h.join().unwrap();
            sched.shutdown();
            let _ = std::fs::remove_file(&path);
            assert!(elsewhere, "the call ran on the task's own thread");
            assert_eq!(got, b"pool thread");
        },
    );
}
