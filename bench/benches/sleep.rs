//! Sleep lateness: 10,000 tasks each sleep 10 ms; how late does each wake?
//! gofer beside tokio and may in the same run (2 workers each). Lateness is
//! the time from the deadline to the moment the task runs again; p50, p99
//! and max over all tasks of 5 rounds are printed, after one warm-up round
//! per runtime that is not counted (it fills stack caches and timer
//! structures; the first round alone is printed for gofer too).
//!
//! Two more gofer schedulers show what the default one pays for:
//! - `stack_cache(16384)`: the default cache keeps 8,192 finished stacks,
//!   so each round maps (and later unmaps) the other 1,808 of its 10,000;
//! - `migrate_started_tasks`: a started task may move, so a Processer's
//!   woken sleepers can run on the other one (by default each is bound to
//!   the Processer it first ran on, and waits for it).
//!
//! Then one task sleeps 1,000 times (0.5 to 1.1 ms each) on an otherwise
//! idle runtime: how soon a sleeping worker wakes for its timer.
//!
//! Run: `cargo bench -p gofer-bench --bench sleep`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TASKS: usize = 10_000;
const SLEEP: Duration = Duration::from_millis(10);
const ROUNDS: usize = 5;

fn report(name: &str, mut late: Vec<Duration>) {
    late.sort();
    let pick = |q: f64| late[((late.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{name:<26} lateness p50 {:>10.3?}  p99 {:>10.3?}  max {:>10.3?}  (n={})",
        pick(0.5),
        pick(0.99),
        late[late.len() - 1],
        late.len()
    );
}

fn gofer_round(sched: &gofer::Scheduler, out: &Arc<Mutex<Vec<Duration>>>) {
    let hs: Vec<_> = (0..TASKS)
        .map(|_| {
            let out = out.clone();
            sched.spawn(move || {
                let deadline = Instant::now() + SLEEP;
                gofer::sleep_until(deadline);
                let late = Instant::now().saturating_duration_since(deadline);
                out.lock().unwrap().push(late);
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

/// A gofer scheduler with 2 Processers, its 5 rounds reported as `name`.
fn gofer_rounds(name: &str, b: gofer::SchedulerBuilder, out: &Arc<Mutex<Vec<Duration>>>) {
    let sched = b.min_threads(2).build().unwrap();
    gofer_round(&sched, out);
    out.lock().unwrap().clear();
    for _ in 0..ROUNDS {
        gofer_round(&sched, out);
    }
    report(name, std::mem::take(&mut *out.lock().unwrap()));
    sched.shutdown();
}

/// The sleep lengths of the lone sleeper, in turn: 0.5 to 1.1 ms.
fn lone_nap(i: usize) -> Duration {
    Duration::from_micros(500 + (i as u64 % 7) * 100)
}

const LONE: usize = 1_000;

fn tokio_round(rt: &tokio::runtime::Runtime, out: &Arc<Mutex<Vec<Duration>>>) {
    rt.block_on(async {
        let hs: Vec<_> = (0..TASKS)
            .map(|_| {
                let out = out.clone();
                tokio::spawn(async move {
                    let deadline = tokio::time::Instant::now() + SLEEP;
                    tokio::time::sleep_until(deadline).await;
                    let late = tokio::time::Instant::now().saturating_duration_since(deadline);
                    out.lock().unwrap().push(late);
                })
            })
            .collect();
        for h in hs {
            h.await.unwrap();
        }
    })
}

fn may_round(out: &Arc<Mutex<Vec<Duration>>>) {
    let hs: Vec<_> = (0..TASKS)
        .map(|_| {
            let out = out.clone();
            may::go!(move || {
                let deadline = Instant::now() + SLEEP;
                may::coroutine::sleep(SLEEP);
                let late = Instant::now().saturating_duration_since(deadline);
                out.lock().unwrap().push(late);
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test -p gofer-bench --benches` asks for a list; nothing to list
    }
    println!("{TASKS} tasks sleeping {SLEEP:?}, {ROUNDS} rounds, 2 workers:");

    let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();
    let out = Arc::new(Mutex::new(Vec::new()));
    gofer_round(&sched, &out);
    report(
        "gofer (cold, first round)",
        std::mem::take(&mut *out.lock().unwrap()),
    );
    for _ in 0..ROUNDS {
        gofer_round(&sched, &out);
    }
    report("gofer", std::mem::take(&mut *out.lock().unwrap()));
    sched.shutdown();
    gofer_rounds(
        "gofer, stack_cache(16384)",
        gofer::Scheduler::builder().stack_cache(16_384),
        &out,
    );
    // SAFETY: the tasks touch no thread-local across their sleep (a clock
    // read on each side, then a `std::sync::Mutex`, taken after it).
    let migrating = unsafe { gofer::Scheduler::builder().migrate_started_tasks(true) };
    gofer_rounds("gofer, migratable", migrating, &out);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    tokio_round(&rt, &out);
    out.lock().unwrap().clear();
    for _ in 0..ROUNDS {
        tokio_round(&rt, &out);
    }
    report("tokio", std::mem::take(&mut *out.lock().unwrap()));

    may::config().set_workers(2);
    may_round(&out);
    out.lock().unwrap().clear();
    for _ in 0..ROUNDS {
        may_round(&out);
    }
    report("may", std::mem::take(&mut *out.lock().unwrap()));

    println!("one task sleeping 0.5-1.1 ms, {LONE} times, 2 workers:");
    let sched = gofer::Scheduler::builder().min_threads(2).build().unwrap();
    let late = sched
        .spawn(|| {
            (0..LONE)
                .map(|i| {
                    let deadline = Instant::now() + lone_nap(i);
                    gofer::sleep_until(deadline);
                    Instant::now().saturating_duration_since(deadline)
                })
                .collect()
        })
        .join()
        .unwrap();
    report("gofer", late);
    sched.shutdown();
    let late = rt.block_on(async {
        tokio::spawn(async {
            let mut late = Vec::with_capacity(LONE);
            for i in 0..LONE {
                let deadline = tokio::time::Instant::now() + lone_nap(i);
                tokio::time::sleep_until(deadline).await;
                late.push(tokio::time::Instant::now().saturating_duration_since(deadline));
            }
            late
        })
        .await
        .unwrap()
    });
    report("tokio", late);
    drop(rt);
    let late = may::go!(|| {
        (0..LONE)
            .map(|i| {
                let deadline = Instant::now() + lone_nap(i);
                may::coroutine::sleep(lone_nap(i));
                Instant::now().saturating_duration_since(deadline)
            })
            .collect()
    })
    .join()
    .unwrap();
    report("may", late);
}
