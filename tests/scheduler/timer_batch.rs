//! Timers that come due together are fired as one batch ("Firing a batch"
//! in `runtime/timer.rs`): the woken tasks run in deadline order (ties in
//! the order the sleeps began), wake-ups the Dispatcher fired for a held-up
//! Processer run before the ones it fires itself afterwards, tasks bound to
//! a Processer stay there, and unpinned ones may be shared out.
//!
//! Each scenario runs in a child process under a watchdog: a lost wake-up
//! would hang its joins.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::in_child;
use gofer::{Builder, Scheduler};

/// How far ahead the deadlines of a round are set: every sleeper of the
/// round must have begun its sleep by then (a round where one did not is
/// run again).
const LEAD: Duration = Duration::from_millis(300);

fn one_processer(name: &str) -> Scheduler {
    Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .name(name)
        .build()
        .unwrap()
}

/// A deterministic shuffle of `0..n` (multiplication by a unit modulo a
/// prime above `n`, keeping the values below `n`).
fn shuffled(n: usize) -> Vec<usize> {
    const P: usize = 10_007;
    assert!(n < P);
    (0..P).map(|i| i * 7_919 % P).filter(|&v| v < n).collect()
}

/// Sleepers pinned to one Processer, `n` of them, with deadlines in a
/// shuffled order, many of them equal. Returns the order the sleeps began
/// in and the order the sleepers ran again in (sleeper ids), or `None` if
/// some sleeper began its sleep after its deadline (a loaded machine).
fn pinned_round(s: &Scheduler, n: usize, spread_us: u64) -> Option<(Vec<Key>, Vec<usize>)> {
    let armed = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let woke = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let base = Instant::now() + LEAD;
    let order = shuffled(n);
    let hs: Vec<_> = (0..n)
        .map(|id| {
            let (armed, woke) = (armed.clone(), woke.clone());
            // Deadlines `spread_us` wide, each shared by about 4 sleepers.
            let offset = Duration::from_micros(order[id] as u64 / 4 * spread_us * 4 / n as u64);
            Builder::new()
                .scheduler(s)
                .pin(0)
                .spawn(move || {
                    let deadline = base + offset;
                    {
                        let mut a = armed.lock().unwrap();
                        let seq = a.len();
                        a.push(Key {
                            deadline,
                            seq,
                            id,
                            late_start: Instant::now() >= deadline,
                        });
                    }
                    gofer::sleep_until(deadline);
                    assert!(Instant::now() >= deadline, "woke early");
                    woke.lock().unwrap().push(id);
                })
                .unwrap()
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let armed = std::mem::take(&mut *armed.lock().unwrap());
    let woke = std::mem::take(&mut *woke.lock().unwrap());
    if armed.iter().any(|k| k.late_start) {
        return None;
    }
    Some((armed, woke))
}

/// When a sleeper began its sleep, and for which deadline.
#[derive(Clone, Copy)]
struct Key {
    deadline: Instant,
    /// Its place among the sleeps begun (the timers' insertion order).
    seq: usize,
    id: usize,
    late_start: bool,
}

/// The order the sleepers must wake in: by deadline, ties in the order
/// their sleeps began.
/// Whether `woke` is `want` with one contiguous, in-order block of it run
/// later than its place (and nothing else out of order): the signature of
/// one late batch, unlike a batch run backwards or interleaved.
fn one_block_moved_later(woke: &[usize], want: &[usize]) -> bool {
    let Some(i) = woke.iter().zip(want).position(|(a, b)| a != b) else {
        return false;
    };
    let Some(j) = woke.iter().position(|&x| x == want[i]) else {
        return false;
    };
    if j <= i || woke.len() != want.len() {
        return false;
    }
    // woke = want[..i] ++ want[i+m..i+m+(j-i)] ++ want[i..i+m] ++ rest.
    let early = &woke[i..j];
    let Some(m) = want[i..].iter().position(|x| *x == early[0]) else {
        return false;
    };
    if m == 0 || i + m + early.len() > want.len() {
        return false;
    }
    early == &want[i + m..i + m + early.len()]
        && woke[j..j + m] == want[i..i + m]
        && woke[j + m..] == want[i + m + early.len()..]
}

fn deadline_order(mut armed: Vec<Key>) -> Vec<usize> {
    armed.sort_by_key(|k| (k.deadline, k.seq));
    armed.into_iter().map(|k| k.id).collect()
}

/// 2,000 sleepers on one Processer, their deadlines within 2 ms of each
/// other (fired in a few batches), run again exactly in deadline order,
/// ties in the order their sleeps began: no fired task jumps ahead of the
/// ones fired with it (as one would through the next-task slot).
#[test]
fn a_fired_batch_runs_in_deadline_order() {
    in_child(
        module_path!(),
        "a_fired_batch_runs_in_deadline_order",
        || {
            let s = one_processer("tbatch");
            let mut checked = 0;
            for _ in 0..5 {
                let Some((armed, woke)) = pinned_round(&s, 2_000, 2_000) else {
                    continue; // a sleeper began after its deadline: again
                };
                let want = deadline_order(armed);
                assert_eq!(woke.len(), want.len());
                let first_wrong = woke.iter().zip(&want).position(|(a, b)| a != b);
                assert_eq!(first_wrong, None, "woke out of deadline order");
                checked += 1;
            }
            s.shutdown();
            assert!(
                checked > 0,
                "no round began every sleep before its deadline"
            );
            println!("figure: {checked} rounds of 2,000 sleepers woke in deadline order");
        },
    );
}

/// Sleepers bound to Processer 0 whose deadlines fall while that
/// Processer is blocked in the kernel: the Dispatcher fires their timers
/// (overdue) into the Processer's pinned queue, and when the Processer is
/// back it fires the rest itself. Every sleeper still runs in deadline
/// order: the wake-ups the Dispatcher queued go first.
#[test]
fn wake_ups_fired_for_a_blocked_processer_keep_deadline_order() {
    in_child(
        module_path!(),
        "wake_ups_fired_for_a_blocked_processer_keep_deadline_order",
        || {
            let s = Scheduler::builder()
                .min_threads(2)
                .max_threads(2)
                .name("tbblk")
                .build()
                .unwrap();
            const N: usize = 1_000;
            const SPREAD: Duration = Duration::from_millis(40);
            const BLOCK: Duration = Duration::from_millis(30);
            let mut done = false;
            for _ in 0..5 {
                let armed = Arc::new(Mutex::new(Vec::with_capacity(N)));
                let woke = Arc::new(Mutex::new(Vec::with_capacity(N)));
                let base = Instant::now() + LEAD;
                let order = shuffled(N);
                let hs: Vec<_> = (0..N)
                    .map(|id| {
                        let (armed, woke) = (armed.clone(), woke.clone());
                        let offset = SPREAD * order[id] as u32 / N as u32;
                        Builder::new()
                            .scheduler(&s)
                            .pin(0)
                            .spawn(move || {
                                let deadline = base + offset;
                                {
                                    let mut a = armed.lock().unwrap();
                                    let seq = a.len();
                                    a.push(Key {
                                        deadline,
                                        seq,
                                        id,
                                        late_start: Instant::now() >= deadline,
                                    });
                                }
                                gofer::sleep_until(deadline);
                                woke.lock().unwrap().push(id);
                            })
                            .unwrap()
                    })
                    .collect();
                // Blocks Processer 0 from just before the first deadline
                // to well into the spread. Right after the block, before
                // Processer 0 can fire anything itself, fewer timers than
                // the sleepers' are pending only if the Dispatcher fired
                // some meanwhile.
                let s2 = s.clone();
                let blocker = Builder::new()
                    .scheduler(&s)
                    .pin(0)
                    .spawn(move || {
                        gofer::sleep_until(base - Duration::from_millis(2));
                        common::block_thread_in_kernel(BLOCK);
                        s2.stats().timers < N
                    })
                    .unwrap();
                let dispatcher_fired = blocker.join().unwrap();
                for h in hs {
                    h.join().unwrap();
                }
                let armed = std::mem::take(&mut *armed.lock().unwrap());
                let woke = std::mem::take(&mut *woke.lock().unwrap());
                if armed.iter().any(|k| k.late_start) || !dispatcher_fired {
                    continue; // the scenario did not happen: again
                }
                let want = deadline_order(armed);
                if one_block_moved_later(&woke, &want) {
                    // The race `runtime/timer.rs` documents ("Firing a
                    // batch"): a Dispatcher batch that lands while the
                    // Processer files its own newer one runs after it, as
                    // one block. Not what this round is for: again.
                    continue;
                }
                let first_wrong = woke.iter().zip(&want).position(|(a, b)| a != b);
                assert_eq!(first_wrong, None, "woke out of deadline order");
                done = true;
                break;
            }
            s.shutdown();
            assert!(done, "no round had the Dispatcher fire during the block");
            println!(
                "figure: sleepers fired by the Dispatcher and by their Processer woke in order"
            );
        },
    );
}

/// On four Processers, 1,024 sleepers with one deadline: bound ones
/// (started tasks, the default) run again on the thread they slept on;
/// migratable ones all wake, none early, and some on another thread (the
/// batch is shared out, or stolen). Nobody is lost either way.
#[test]
fn bound_sleepers_stay_put_and_migratable_ones_may_move() {
    in_child(
        module_path!(),
        "bound_sleepers_stay_put_and_migratable_ones_may_move",
        || {
            let s = Scheduler::builder()
                .min_threads(4)
                .max_threads(4)
                .name("tmove")
                .build()
                .unwrap();
            const N: usize = 1_024;
            let round = |migratable: bool| -> Vec<(String, String)> {
                let deadline = Instant::now() + LEAD;
                let hs: Vec<_> = (0..N)
                    .map(|_| {
                        let b = Builder::new().scheduler(&s);
                        // SAFETY: the task touches no thread-local across its
                        // sleep: `thread_name` reads the thread through an
                        // `#[inline(never)]` call on each side.
                        let b = if migratable {
                            unsafe { b.migratable() }
                        } else {
                            b
                        };
                        b.spawn(move || {
                            let before = common::thread_name();
                            gofer::sleep_until(deadline);
                            assert!(Instant::now() >= deadline, "woke early");
                            (before, common::thread_name())
                        })
                        .unwrap()
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            };
            let bound = round(false);
            assert_eq!(bound.len(), N);
            // Chaos mode (`GOFER_CHAOS_MIGRATE=1`) moves every task by design.
            if std::env::var_os("GOFER_CHAOS_MIGRATE").is_none_or(|v| v != "1") {
                let strays = bound.iter().filter(|(a, b)| a != b).count();
                assert_eq!(strays, 0, "bound sleepers woke on another thread");
            }
            let mut moved = 0;
            for _ in 0..5 {
                let free = round(true);
                assert_eq!(free.len(), N);
                moved = free.iter().filter(|(a, b)| a != b).count();
                if moved > 0 {
                    break;
                }
            }
            s.shutdown();
            assert!(moved > 0, "no migratable sleeper ran anywhere else");
            println!("figure: {moved} of {N} migratable sleepers woke on another thread");
        },
    );
}

/// The Processer threads the scheduler starts wait for their timers with
/// a 1 us timer slack (not the default 50 us), and a thread that lends
/// itself through `block_on` keeps its own.
#[test]
fn processer_threads_sleep_with_a_tight_timer_slack() {
    // SAFETY: PR_GET_TIMERSLACK takes no pointer and reads the calling
    // thread's slack.
    let slack = || unsafe { libc::prctl(libc::PR_GET_TIMERSLACK) };
    let s = one_processer("tslack");
    let mine = slack();
    let on_processer = s.spawn(slack).join().unwrap();
    let in_block_on = s.block_on(slack);
    s.shutdown();
    assert_eq!(on_processer, 1_000);
    assert_eq!(in_block_on, mine, "a block_on caller's slack is its own");
    assert_ne!(mine, 1_000, "the test thread has the default slack");
}

/// The shape `one_block_moved_later` accepts, and what it does not.
#[test]
fn only_one_late_block_passes_for_the_documented_race() {
    let want: Vec<usize> = (0..10).collect();
    // Block 2..5 ran after 5..7.
    assert!(one_block_moved_later(
        &[0, 1, 5, 6, 2, 3, 4, 7, 8, 9],
        &want
    ));
    // In order: not the race (the round passes on its own).
    assert!(!one_block_moved_later(&want, &want));
    // A batch run backwards (the next-task slot bug).
    assert!(!one_block_moved_later(
        &[0, 1, 4, 3, 2, 5, 6, 7, 8, 9],
        &want
    ));
    // The late block itself out of order.
    assert!(!one_block_moved_later(
        &[0, 1, 5, 6, 3, 2, 4, 7, 8, 9],
        &want
    ));
    // Two displacements.
    assert!(!one_block_moved_later(
        &[0, 1, 5, 2, 3, 4, 7, 6, 8, 9],
        &want
    ));
}
