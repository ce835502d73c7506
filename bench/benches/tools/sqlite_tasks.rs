//! SQLite (bundled, through rusqlite) with a connection per worker: 200
//! workers each open their own connection to one WAL database and make
//! `rows` inserts, each followed by a select of their own rows. The
//! workers are gofer tasks (with the `hooks` feature: SQLite's file calls
//! go through the hooks, and its pthread locks are counted, so a task
//! holding one never parks) or plain threads, the same work; each run is
//! a fresh database in a fresh directory. Prints wall time and the
//! process's CPU time (user + system) per run, the modes interleaved.
//!
//! `cargo run -p gofer-bench --release --features hooks --example sqlite_tasks [runs] [rows] [processers]`
//!
//! `processers` (default 2) is the scheduler's fixed thread count;
//! `SQLITE_TASKS_ONLY=threads` (or `gofer`) runs one mode only;
//! `SQLITE_TASKS_FULL_MUTEX=1` opens serialized connections (rusqlite's
//! default is `SQLITE_OPEN_NO_MUTEX`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const WORKERS: usize = 200;

/// One worker's work: its connection, `rows` inserts and selects.
fn work(db: &Path, worker: usize, rows: usize) -> rusqlite::Result<()> {
    let conn = if std::env::var_os("SQLITE_TASKS_FULL_MUTEX").is_some() {
        // Serialized connections: SQLite holds the connection's pthread
        // mutex across each statement, so under the hooks none of its
        // file calls leaves the thread.
        let flags = (rusqlite::OpenFlags::default() - rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX)
            | rusqlite::OpenFlags::SQLITE_OPEN_FULL_MUTEX;
        rusqlite::Connection::open_with_flags(db, flags)?
    } else {
        rusqlite::Connection::open(db)?
    };
    conn.busy_timeout(Duration::from_secs(60))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    for n in 0..rows {
        conn.execute("INSERT INTO t VALUES (?1, ?2)", (worker, n))?;
        let seen: usize =
            conn.query_row("SELECT count(*) FROM t WHERE worker = ?1", [worker], |r| {
                r.get(0)
            })?;
        assert_eq!(seen, n + 1);
    }
    Ok(())
}

/// A fresh database in WAL mode, with its table.
fn fresh_db(run: usize, mode: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "gofer-sqlite-bench-{}-{run}-{mode}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the database's directory");
    let db = dir.join("t.db");
    let conn = rusqlite::Connection::open(&db).expect("create the database");
    let wal: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .expect("WAL mode");
    assert_eq!(wal, "wal");
    conn.execute_batch("CREATE TABLE t (worker INTEGER, n INTEGER); CREATE INDEX tw ON t (worker)")
        .expect("the table");
    (dir, db)
}

/// The process's CPU time so far (user + system).
fn cpu() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: `ru` is room for one rusage.
    assert_eq!(
        unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) },
        0
    );
    // SAFETY: getrusage succeeded and filled it.
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn on_threads(db: &Path, rows: usize) {
    let handles: Vec<_> = (0..WORKERS)
        .map(|w| {
            let db = db.to_path_buf();
            std::thread::spawn(move || work(&db, w, rows))
        })
        .collect();
    for h in handles {
        h.join().expect("a thread").expect("its statements");
    }
}

fn on_gofer(sched: &gofer::Scheduler, db: &Path, rows: usize) {
    let handles: Vec<_> = (0..WORKERS)
        .map(|w| {
            let db = db.to_path_buf();
            sched.spawn(move || work(&db, w, rows))
        })
        .collect();
    for h in handles {
        h.join().expect("a task").expect("its statements");
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().map_or(3, |a| a.parse().expect("runs"));
    let rows: usize = args.next().map_or(20, |a| a.parse().expect("rows"));
    let procs: usize = args.next().map_or(2, |a| a.parse().expect("processers"));
    assert!(gofer::hooks::enabled(), "build with --features hooks");
    let sched = gofer::Scheduler::builder()
        .min_threads(procs)
        .max_threads(procs)
        .build()
        .expect("a scheduler");
    println!("{WORKERS} workers x {rows} inserts + selects, connection per worker, WAL, synchronous=NORMAL; gofer on {procs} Processers");
    for run in 0..runs {
        for mode in ["threads", "gofer"] {
            if std::env::var("SQLITE_TASKS_ONLY").is_ok_and(|only| only != mode) {
                continue;
            }
            let (dir, db) = fresh_db(run, mode);
            let (t0, c0) = (Instant::now(), cpu());
            match mode {
                "threads" => on_threads(&db, rows),
                _ => on_gofer(&sched, &db, rows),
            }
            let (wall, cpu) = (t0.elapsed(), cpu() - c0);
            let ops = (WORKERS * rows) as f64 / wall.as_secs_f64();
            println!(
                "run {run} {mode:>7}: wall {:>8.3} s  cpu {:>8.3} s  {ops:>8.0} inserts/s",
                wall.as_secs_f64(),
                cpu.as_secs_f64()
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    sched.shutdown();
}
