//! With the `hooks` feature, a task that holds a C library's lock (a
//! `pthread_mutex_t`, a `pthread_rwlock_t`) does not park in a hooked call:
//! the call runs on the task's thread, as on a plain thread.
//!
//! Without that rule, a task parked in a hooked `open` while holding a C
//! mutex lets its thread run a sibling task, and a sibling that locks the
//! same mutex blocks the thread in `pthread_mutex_lock`: the holder, bound
//! to that thread, never resumes to unlock it (SQLite's `unixBigLock`
//! taken around its `open`s and `ftruncate`s, for one). Each scenario that
//! could hang runs in a child process under a watchdog.
//!
//! Without the feature this file compiles to nothing.
#![cfg(feature = "hooks")]

use crate::common;

use std::cell::UnsafeCell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The watchdog's limit for the scenarios on one Processer: each takes
/// milliseconds when it works, and hangs for good when it does not.
const LIMIT: Duration = Duration::from_secs(20);

/// Runs `body` in a child process (this test binary re-run for `test`
/// alone) killed after `limit`, and fails unless it finished, succeeded
/// and printed its end marker. Lines from `figure:` on are passed on.
fn in_child_within(test: &str, limit: Duration, body: impl FnOnce()) {
    if common::child_scenario().as_deref() == Some(test) {
        body();
        println!("CHILD-OK {test}");
        return;
    }
    let out = common::run_child_watched(module_path!(), test, test, &[], limit)
        .unwrap_or_else(|| panic!("{test} hung: the child was killed after {limit:?}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("CHILD-OK {test}")),
        "{}",
        common::describe(&out)
    );
    for line in stdout.lines() {
        if let Some(at) = line.find("figure:") {
            println!("{}", &line[at..]);
        }
    }
}

/// A C lock in a static, as a C library keeps one (SQLite's
/// `unixBigLock` is a static `pthread_mutex_t`).
struct CLock<T>(UnsafeCell<T>);

// SAFETY: pthread locks are made to be shared between threads; the cell
// is only ever handed to the pthread functions by pointer.
unsafe impl<T> Sync for CLock<T> {}

static MUTEX: CLock<libc::pthread_mutex_t> =
    CLock(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));
static RWLOCK: CLock<libc::pthread_rwlock_t> =
    CLock(UnsafeCell::new(libc::PTHREAD_RWLOCK_INITIALIZER));
static COUNTED_MUTEX: CLock<libc::pthread_mutex_t> =
    CLock(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gofer-clocks-{}-{name}", std::process::id()))
}

/// Hooked file calls that park a task anywhere else: `open` (always
/// offloaded inside a task) and `ftruncate` on a regular file.
fn file_calls(path: &std::path::Path) {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .expect("open the scratch file");
    f.set_len(4096).expect("ftruncate the scratch file");
}

/// Spawns `f` on `sched`.
fn spawn<T: Send + 'static>(
    sched: &gofer::Scheduler,
    f: impl FnOnce() -> T + Send + 'static,
) -> gofer::JoinHandle<T> {
    gofer::Builder::new()
        .scheduler(sched)
        .spawn(f)
        .expect("a task")
}

/// One task takes a C lock (`lock`), makes hooked file calls holding it,
/// and releases it (`unlock`); a sibling task of the same single-Processer
/// scheduler, once the first holds the lock, takes it too (`contend`) and
/// releases it. Returns whether the sibling ever ran while the first held
/// the lock.
fn sibling_contends(
    name: &'static str,
    lock: fn(),
    unlock: fn(),
    contend: fn(),
    release: fn(),
) -> bool {
    let sched = common::fixed_scheduler(1);
    let held = Arc::new(AtomicBool::new(false));
    let locked_once = Arc::new(AtomicBool::new(false));
    let path = temp_path(name);
    let holder = {
        let (held, locked_once, path) = (held.clone(), locked_once.clone(), path.clone());
        spawn(&sched, move || {
            lock();
            held.store(true, Ordering::SeqCst);
            locked_once.store(true, Ordering::SeqCst);
            file_calls(&path);
            held.store(false, Ordering::SeqCst);
            unlock();
        })
    };
    let sibling = {
        let (held, locked_once) = (held.clone(), locked_once.clone());
        spawn(&sched, move || {
            while !locked_once.load(Ordering::SeqCst) {
                gofer::yield_now();
            }
            let saw_held = held.load(Ordering::SeqCst);
            contend();
            release();
            saw_held
        })
    };
    holder.join().expect("the holder");
    let saw_held = sibling.join().expect("the sibling");
    sched.shutdown();
    let _ = std::fs::remove_file(&path);
    saw_held
}

fn mutex_lock() {
    // SAFETY: a static, initialized mutex.
    assert_eq!(unsafe { libc::pthread_mutex_lock(MUTEX.0.get()) }, 0);
}

fn mutex_unlock() {
    // SAFETY: the caller locked it.
    assert_eq!(unsafe { libc::pthread_mutex_unlock(MUTEX.0.get()) }, 0);
}

fn rwlock_wrlock() {
    // SAFETY: a static, initialized rwlock.
    assert_eq!(unsafe { libc::pthread_rwlock_wrlock(RWLOCK.0.get()) }, 0);
}

fn rwlock_rdlock() {
    // SAFETY: a static, initialized rwlock.
    assert_eq!(unsafe { libc::pthread_rwlock_rdlock(RWLOCK.0.get()) }, 0);
}

fn rwlock_unlock() {
    // SAFETY: the caller holds it.
    assert_eq!(unsafe { libc::pthread_rwlock_unlock(RWLOCK.0.get()) }, 0);
}

/// (a) A task holding a static `pthread_mutex_t` across a hooked `open`
/// and `ftruncate` does not park: a sibling on its one thread that locks
/// the same mutex finds it free (the thread was never given up while it
/// was held), instead of blocking the thread the holder needs.
#[test]
fn a_task_holding_a_pthread_mutex_does_not_park_in_a_hooked_file_call() {
    in_child_within(
        "a_task_holding_a_pthread_mutex_does_not_park_in_a_hooked_file_call",
        LIMIT,
        || {
            let saw_held =
                sibling_contends("mutex", mutex_lock, mutex_unlock, mutex_lock, mutex_unlock);
            assert!(!saw_held, "the sibling ran while the mutex was held");
        },
    );
}

/// (b) As (a), with a `pthread_rwlock_t` held for writing, and the sibling
/// taking it for reading. (Where the holder parks, glibc's `rdlock` in the
/// sibling returns `EDEADLK` rather than blocking: it finds the writer's
/// thread id to be its own, the thread both tasks share.)
#[test]
fn a_task_holding_a_pthread_rwlock_does_not_park_in_a_hooked_file_call() {
    in_child_within(
        "a_task_holding_a_pthread_rwlock_does_not_park_in_a_hooked_file_call",
        LIMIT,
        || {
            let saw_held = sibling_contends(
                "rwlock",
                rwlock_wrlock,
                rwlock_unlock,
                rwlock_rdlock,
                rwlock_unlock,
            );
            assert!(!saw_held, "the sibling ran while the rwlock was held");
        },
    );
}

/// (c) The count goes back to zero on unlock. One task of a
/// single-Processer scheduler, beside a sibling that counts its turns:
/// holding a mutex, its hooked file calls run in place (the sibling gets
/// no turn); after the unlock, its next hooked call parks. That call is an
/// `open` of a FIFO for reading, which returns only once the sibling opens
/// the writing end: a task still counted as a holder would make it on the
/// thread and wait there for good, the sibling never running.
#[test]
fn the_lock_count_returns_to_zero_and_the_task_parks_again() {
    in_child_within(
        "the_lock_count_returns_to_zero_and_the_task_parks_again",
        LIMIT,
        || {
            let fifo = temp_path("fifo");
            let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
            // SAFETY: a NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            let scratch = temp_path("scratch");
            let sched = common::fixed_scheduler(1);
            let turns = Arc::new(AtomicU64::new(0));
            let unlocked = Arc::new(AtomicBool::new(false));
            let sibling = {
                let (turns, unlocked, fifo) = (turns.clone(), unlocked.clone(), fifo.clone());
                spawn(&sched, move || {
                    while !unlocked.load(Ordering::SeqCst) {
                        turns.fetch_add(1, Ordering::SeqCst);
                        gofer::yield_now();
                    }
                    // The writing end: returns once the reader has opened.
                    let w = std::fs::OpenOptions::new().write(true).open(&fifo);
                    w.is_ok()
                })
            };
            let holder = {
                let (turns, unlocked, fifo, scratch) = (
                    turns.clone(),
                    unlocked.clone(),
                    fifo.clone(),
                    scratch.clone(),
                );
                spawn(&sched, move || {
                    // SAFETY: a static, initialized mutex.
                    assert_eq!(
                        unsafe { libc::pthread_mutex_lock(COUNTED_MUTEX.0.get()) },
                        0
                    );
                    let before = turns.load(Ordering::SeqCst);
                    file_calls(&scratch);
                    let after = turns.load(Ordering::SeqCst);
                    // SAFETY: locked just above.
                    assert_eq!(
                        unsafe { libc::pthread_mutex_unlock(COUNTED_MUTEX.0.get()) },
                        0
                    );
                    unlocked.store(true, Ordering::SeqCst);
                    // The reading end: parks until the sibling opens the other.
                    let r = std::fs::File::open(&fifo);
                    (after - before, r.is_ok())
                })
            };
            let (turns_while_held, read_opened) = holder.join().expect("the holder");
            let write_opened = sibling.join().expect("the sibling");
            sched.shutdown();
            let _ = std::fs::remove_file(&fifo);
            let _ = std::fs::remove_file(&scratch);
            assert!(read_opened && write_opened, "a FIFO end did not open");
            assert_eq!(
                turns_while_held, 0,
                "the sibling ran while the task held a pthread mutex: its hooked calls parked"
            );
        },
    );
}

/// Tasks of [`sqlite_with_a_connection_per_task_completes_on_two_processers`].
const SQLITE_TASKS: usize = 200;
/// Inserts (each followed by a select) per task.
const SQLITE_ROWS: usize = 10;

/// (d) 200 tasks on two Processers, each with its own connection to one
/// SQLite database in WAL mode, insert rows and read them back. SQLite
/// holds `unixBigLock` (a static `pthread_mutex_t`) around its `open`s and
/// `ftruncate`s, and each connection's mutex across a whole statement:
/// without the rule every Processer thread ends in
/// `pthread_mutex_lock(unixBigLock)` behind a holder parked in a hooked
/// `open`, at the first statement.
#[test]
fn sqlite_with_a_connection_per_task_completes_on_two_processers() {
    common::in_child(
        module_path!(),
        "sqlite_with_a_connection_per_task_completes_on_two_processers",
        || {
            let dir = temp_path("sqlite");
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let db = dir.join("t.db");
            {
                let conn = rusqlite::Connection::open(&db).unwrap();
                let mode: String = conn
                    .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
                    .unwrap();
                assert_eq!(mode, "wal");
                conn.execute_batch("CREATE TABLE t (task INTEGER, n INTEGER)")
                    .unwrap();
            }
            let sched = common::fixed_scheduler(2);
            let start = std::time::Instant::now();
            let tasks: Vec<_> = (0..SQLITE_TASKS)
                .map(|task| {
                    let db = db.clone();
                    spawn(&sched, move || -> rusqlite::Result<usize> {
                        let conn = rusqlite::Connection::open(&db)?;
                        conn.busy_timeout(Duration::from_secs(30))?;
                        // WAL's usual setting: no fsync at each commit
                        // (checkpoints still sync).
                        conn.pragma_update(None, "synchronous", "NORMAL")?;
                        for n in 0..SQLITE_ROWS {
                            conn.execute("INSERT INTO t VALUES (?1, ?2)", (task, n))?;
                            let seen: usize = conn.query_row(
                                "SELECT count(*) FROM t WHERE task = ?1",
                                [task],
                                |r| r.get(0),
                            )?;
                            assert_eq!(seen, n + 1, "task {task} reads back its rows");
                        }
                        Ok(SQLITE_ROWS)
                    })
                })
                .collect();
            let mut rows = 0;
            for t in tasks {
                rows += t.join().expect("a task").expect("its statements");
            }
            let took = start.elapsed();
            sched.shutdown();
            let conn = rusqlite::Connection::open(&db).unwrap();
            let total: usize = conn
                .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .unwrap();
            drop(conn);
            let _ = std::fs::remove_dir_all(&dir);
            assert_eq!(rows, SQLITE_TASKS * SQLITE_ROWS);
            assert_eq!(total, SQLITE_TASKS * SQLITE_ROWS);
            println!(
                "figure: sqlite, {SQLITE_TASKS} tasks x {SQLITE_ROWS} inserts and selects on 2 Processers: {took:?}"
            );
        },
    );
}
