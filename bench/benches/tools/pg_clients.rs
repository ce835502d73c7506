//! Sync PostgreSQL clients (`postgres` 0.19, which runs a current-thread
//! tokio runtime inside every call), a connection per client, each making a
//! few simple queries: as gofer tasks under the hooks, or as plain threads.
//! With `--pool`, the clients take their connection from an `r2d2_postgres`
//! pool of that size instead of connecting themselves.
//!
//! Prints completions, panics and other failures, the wall time, and the
//! process's CPU time (user + system, from `getrusage`) per query. The
//! server is scripts/pg_clients.sh's.
//!
//! `cargo run -p gofer-bench --release --features hooks --example pg_clients -- --conn 'host=127.0.0.1 port=54329 user=postgres dbname=postgres' --clients 200 --mode gofer`

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use postgres::{Client, NoTls};
use r2d2_postgres::{r2d2, PostgresConnectionManager};

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum Mode {
    /// Each client a gofer task (the hooks make its waits the scheduler's).
    Gofer,
    /// Each client a plain thread.
    Threads,
}

#[derive(Parser, Debug)]
struct Args {
    /// The connection string.
    #[arg(long)]
    conn: String,
    /// How many clients run at once.
    #[arg(long, default_value_t = 200)]
    clients: usize,
    /// Queries per client.
    #[arg(long, default_value_t = 5)]
    queries: usize,
    #[arg(long, value_enum, default_value_t = Mode::Gofer)]
    mode: Mode,
    /// Take connections from an r2d2 pool of this size (0: a connection
    /// per client, made by the client).
    #[arg(long, default_value_t = 0)]
    pool: u32,
    /// gofer's Processers at start (0: the number of CPUs).
    #[arg(long, default_value_t = 0)]
    processers: usize,
    /// gofer's cap on Processer threads.
    #[arg(long, default_value_t = 1100)]
    max_threads: usize,
}

/// How one client ended.
enum Outcome {
    Done,
    Failed(String),
    Panicked(String),
}

type Pool = r2d2::Pool<PostgresConnectionManager<NoTls>>;

fn queries(c: &mut Client, id: usize, n: usize) -> Result<(), String> {
    for q in 0..n {
        let want = (id * 1000 + q) as i32;
        let row = c
            .query_one("SELECT $1::INT4 + 1", &[&want])
            .map_err(|e| e.to_string())?;
        let got: i32 = row.get(0);
        if got != want + 1 {
            return Err(format!("query {q}: {got} for {want} + 1"));
        }
    }
    Ok(())
}

fn client(conn: &str, pool: Option<&Pool>, id: usize, n: usize) -> Outcome {
    let run = || -> Result<(), String> {
        match pool {
            Some(p) => {
                let mut c = p.get().map_err(|e| e.to_string())?;
                queries(&mut c, id, n)
            }
            None => {
                let mut c = Client::connect(conn, NoTls).map_err(|e| e.to_string())?;
                queries(&mut c, id, n)
            }
        }
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => Outcome::Done,
        Ok(Err(e)) => Outcome::Failed(e),
        Err(p) => Outcome::Panicked(
            p.downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into()),
        ),
    }
}

/// The process's CPU time so far, user and system.
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills a zeroed rusage for this process.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn main() {
    let args = Args::parse();
    let conn: Arc<str> = args.conn.clone().into();
    let pool = (args.pool > 0).then(|| {
        let cfg = conn.parse().expect("a connection string");
        let manager = PostgresConnectionManager::new(cfg, NoTls);
        Arc::new(
            r2d2::Pool::builder()
                .max_size(args.pool)
                .connection_timeout(Duration::from_secs(60))
                .build_unchecked(manager),
        )
    });
    let (n, q) = (args.clients, args.queries);
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let outcomes: Vec<Outcome> = match args.mode {
        Mode::Gofer => {
            let sched = gofer::Scheduler::builder()
                .min_threads(args.processers)
                .max_threads(args.max_threads)
                .build()
                .expect("a scheduler");
            let handles: Vec<_> = (0..n)
                .map(|id| {
                    let (conn, pool) = (conn.clone(), pool.clone());
                    sched.spawn(move || client(&conn, pool.as_deref(), id, q))
                })
                .collect();
            let out = handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|e| Outcome::Panicked(format!("task: {e}")))
                })
                .collect();
            let stats = sched.stats();
            println!(
                "gofer: {} blocked detections, {} tasks rescued, {} threads started",
                stats.blocked_detections, stats.tasks_rescued, stats.threads_started
            );
            drop(pool);
            sched.shutdown();
            out
        }
        Mode::Threads => {
            let handles: Vec<_> = (0..n)
                .map(|id| {
                    let (conn, pool) = (conn.clone(), pool.clone());
                    std::thread::Builder::new()
                        .stack_size(256 * 1024)
                        .spawn(move || client(&conn, pool.as_deref(), id, q))
                        .expect("a thread")
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Outcome::Panicked("thread".into()))
                })
                .collect()
        }
    };
    let wall = t0.elapsed();
    let cpu = cpu_time() - cpu0;
    let done = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Done))
        .count();
    let panics: Vec<&str> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Panicked(m) => Some(m.as_str()),
            _ => None,
        })
        .collect();
    let failed: Vec<&str> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Failed(m) => Some(m.as_str()),
            _ => None,
        })
        .collect();
    let per_query = cpu / (n * q).max(1) as u32;
    println!(
        "figure: {:?} pool={} clients={n} queries={q}: completed {done}, panicked {}, failed {}, wall {wall:.2?}, CPU {cpu:.2?} ({per_query:.1?} per query)",
        args.mode,
        args.pool,
        panics.len(),
        failed.len()
    );
    if let Some(m) = panics.first() {
        println!("  first panic: {m}");
    }
    if let Some(m) = failed.first() {
        println!("  first failure: {m}");
    }
}
