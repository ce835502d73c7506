//! The recipes of the guide's "Crates tried" table (docs/guide.md), each
//! run as a user would write it: a blocking crate whose wait belongs to the
//! thread, made to work among tasks by a line around it.
//!
//! Scenarios that hang without their recipe run in a child process with a
//! watchdog.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::in_child;

/// A connection manager for `r2d2` with no server behind it: a connection
/// is a number, and a query is a park of the task.
struct FakeManager {
    opened: AtomicUsize,
}

#[derive(Debug)]
struct NoError;

impl std::fmt::Display for NoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no error")
    }
}

impl std::error::Error for NoError {}

impl r2d2::ManageConnection for FakeManager {
    type Connection = usize;
    type Error = NoError;

    fn connect(&self) -> Result<usize, NoError> {
        Ok(self.opened.fetch_add(1, Ordering::Relaxed))
    }

    fn is_valid(&self, _conn: &mut usize) -> Result<(), NoError> {
        Ok(())
    }

    fn has_broken(&self, _conn: &mut usize) -> bool {
        false
    }
}

const POOL_SIZE: u32 = 4;

fn fake_pool() -> r2d2::Pool<FakeManager> {
    r2d2::Pool::builder()
        .max_size(POOL_SIZE)
        .connection_timeout(Duration::from_secs(60))
        .build(FakeManager {
            opened: AtomicUsize::new(0),
        })
        .unwrap()
}

/// `r2d2::Pool::get` waits on a `parking_lot` condition variable, whose
/// waiting record belongs to the thread: a task waiting there blocks its
/// thread, and the connection holders parked behind it cannot give their
/// connections back. The recipe: a `gofer::sync::Semaphore` the size of the
/// pool around `get`, so that a task waits for a connection by parking, and
/// `get` always finds one free.
#[test]
fn an_r2d2_pool_shared_by_a_thousand_tasks_completes_behind_a_semaphore_its_size() {
    in_child(
        module_path!(),
        "an_r2d2_pool_shared_by_a_thousand_tasks_completes_behind_a_semaphore_its_size",
        || {
            const TASKS: usize = 1000;
            let sched = gofer::Scheduler::builder()
                .min_threads(2)
                .max_threads(2)
                .name("r2d2")
                .build()
                .unwrap();
            let pool = fake_pool();
            let permits = Arc::new(gofer::sync::Semaphore::new(pool.max_size() as usize));
            let queries = Arc::new(AtomicUsize::new(0));
            let tasks: Vec<_> = (0..TASKS)
                .map(|_| {
                    let (pool, permits, queries) = (pool.clone(), permits.clone(), queries.clone());
                    sched.spawn(move || {
                        let _permit = permits.acquire();
                        let conn = pool.get().expect("a connection is free");
                        // The query: the task parks holding the connection.
                        gofer::sleep(Duration::from_micros(200));
                        queries.fetch_add(1, Ordering::Relaxed);
                        drop(conn);
                    })
                })
                .collect();
            for t in tasks {
                t.join().unwrap();
            }
            assert_eq!(queries.load(Ordering::Relaxed), TASKS);
            assert!(
                pool.state().connections <= POOL_SIZE,
                "the pool grew past its size"
            );
            sched.shutdown();
        },
    );
}

/// std's `mpsc` and crossbeam's channels wait on the thread's parker: a
/// consumer task waiting in `recv` holds its thread. The recipe:
/// `gofer::chan`, whose ends work on plain threads (they block) and in
/// tasks (they park) alike: a plain thread feeds a hundred consumer tasks on
/// two threads through a bounded channel, and every item arrives once.
#[test]
fn a_plain_thread_feeds_a_hundred_consumer_tasks_through_gofer_chan() {
    in_child(
        module_path!(),
        "a_plain_thread_feeds_a_hundred_consumer_tasks_through_gofer_chan",
        || {
            const CONSUMERS: usize = 100;
            const ITEMS: u64 = 20_000;
            let sched = gofer::Scheduler::builder()
                .min_threads(2)
                .max_threads(2)
                .name("fan-out")
                .build()
                .unwrap();
            let (tx, rx) = gofer::chan::bounded::<u64>(16);
            let consumers: Vec<_> = (0..CONSUMERS)
                .map(|_| {
                    let rx = rx.clone();
                    sched.spawn(move || {
                        let (mut n, mut sum) = (0u64, 0u64);
                        while let Ok(v) = rx.recv() {
                            n += 1;
                            sum += v;
                        }
                        (n, sum)
                    })
                })
                .collect();
            drop(rx);
            let producer = std::thread::spawn(move || {
                for v in 1..=ITEMS {
                    tx.send(v).unwrap();
                }
            });
            producer.join().unwrap();
            let (mut n, mut sum) = (0, 0);
            for c in consumers {
                let (cn, cs) = c.join().unwrap();
                n += cn;
                sum += cs;
            }
            assert_eq!(n, ITEMS, "every item arrives once");
            assert_eq!(sum, ITEMS * (ITEMS + 1) / 2);
            sched.shutdown();
        },
    );
}

/// Without the recipe, the tasks waiting in `r2d2::Pool::get` hold their
/// threads, and the connection holders parked behind them never resume: the
/// stall report says so, naming the call from the blocked thread's own
/// stack (`Pool::get`'s condition-variable wait) and the fix.
#[test]
fn without_the_recipe_the_stall_report_names_pool_get_and_its_condvar_wait() {
    use std::io::Write;
    const NAME: &str = "without_the_recipe_the_stall_report_names_pool_get_and_its_condvar_wait";
    if common::child_scenario().as_deref() == Some(NAME) {
        let sched = gofer::Scheduler::builder()
            .min_threads(1)
            .max_threads(2)
            .stall_report(Duration::from_millis(200))
            .name("pool")
            .build()
            .unwrap();
        let pool = fake_pool();
        let _tasks: Vec<_> = (0..1000)
            .map(|_| {
                let pool = pool.clone();
                sched.spawn(move || {
                    let conn = pool.get();
                    gofer::sleep(Duration::from_millis(1));
                    drop(conn);
                })
            })
            .collect();
        // The parent kills this process once it has read the report.
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        std::process::exit(0);
    }
    let mut child = common::spawn_child_piped(module_path!(), NAME);
    let report = common::read_stderr_until(&mut child, "fix:", 1);
    let _ = child.stdin.take().unwrap().write_all(b"done\n");
    let _ = child.kill();
    let _ = child.wait();
    let at = report
        .find("stall: thread pool-")
        .unwrap_or_else(|| panic!("no stall report:\n{report}"));
    let report = &report[at..];
    let wait = report
        .find("Condvar::wait")
        .unwrap_or_else(|| panic!("the report names no condvar wait:\n{report}"));
    let get = report
        .find("r2d2::Pool")
        .unwrap_or_else(|| panic!("the report names no r2d2::Pool call:\n{report}"));
    assert!(wait < get, "the wait is called by the pool:\n{report}");
    assert!(
        report.contains("gofer::sync"),
        "the fix is named:\n{report}"
    );
}

/// SQLite through `rusqlite` (bundled), a connection per task, WAL: the
/// recipe for any build, with or without `hooks`, is one `gofer::unblock`
/// per transaction. The whole transaction runs on a blocking-pool thread,
/// so the task's thread runs other tasks meanwhile, and no task holds
/// SQLite's file locks across a park.
#[test]
fn sqlite_with_a_connection_per_task_completes_with_unblock_per_transaction() {
    in_child(
        module_path!(),
        "sqlite_with_a_connection_per_task_completes_with_unblock_per_transaction",
        || {
            const TASKS: usize = 200;
            const ROWS: usize = 10;
            let dir =
                std::env::temp_dir().join(format!("gofer-recipe-sqlite-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("db.sqlite");
            {
                let c = rusqlite::Connection::open(&path).unwrap();
                c.pragma_update(None, "journal_mode", "WAL").unwrap();
                c.execute_batch("CREATE TABLE t (task INTEGER, n INTEGER)")
                    .unwrap();
            }
            let sched = gofer::Scheduler::builder()
                .min_threads(2)
                .max_threads(2)
                .name("sqlite")
                .build()
                .unwrap();
            let tasks: Vec<_> = (0..TASKS)
                .map(|task| {
                    let path = path.clone();
                    sched.spawn(move || {
                        let conn = gofer::unblock(move || {
                            let c = rusqlite::Connection::open(&path).unwrap();
                            c.busy_timeout(Duration::from_secs(30)).unwrap();
                            c
                        });
                        let mut seen = 0;
                        let mut conn = Some(conn);
                        for n in 0..ROWS {
                            let c = conn.take().unwrap();
                            let (c, count) = gofer::unblock(move || {
                                c.execute_batch("BEGIN IMMEDIATE").unwrap();
                                c.execute(
                                    "INSERT INTO t (task, n) VALUES (?1, ?2)",
                                    (task as i64, n as i64),
                                )
                                .unwrap();
                                let count: i64 = c
                                    .query_row(
                                        "SELECT COUNT(*) FROM t WHERE task = ?1",
                                        [task as i64],
                                        |r| r.get(0),
                                    )
                                    .unwrap();
                                c.execute_batch("COMMIT").unwrap();
                                (c, count)
                            });
                            conn = Some(c);
                            seen = count;
                            // Between transactions the task parks as usual.
                            gofer::yield_now();
                        }
                        seen
                    })
                })
                .collect();
            for t in tasks {
                assert_eq!(
                    t.join().unwrap(),
                    ROWS as i64,
                    "each task sees its own rows"
                );
            }
            let c = rusqlite::Connection::open(&path).unwrap();
            let total: i64 = c
                .query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
                .unwrap();
            assert_eq!(total, (TASKS * ROWS) as i64, "every row committed once");
            sched.shutdown();
            let _ = std::fs::remove_dir_all(&dir);
        },
    );
}
