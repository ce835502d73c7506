//! Task dumps: every state and wait kind, spawn sites, stacks of parked
//! tasks, grouping, the stall report and the dump on a signal, and that
//! taking dumps while tasks run loses no wake-up.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier as StdBarrier};
use std::time::Duration;

use common::{in_child, wait_until};
use gofer::debug::{Dump, TaskDump, TaskState};
use gofer::Scheduler;

fn sched(n: usize) -> Scheduler {
    common::fixed_scheduler(n)
}

/// The task named `name` in a dump.
fn named<'d>(d: &'d Dump, name: &str) -> Option<&'d TaskDump> {
    d.tasks().iter().find(|t| t.name() == Some(name))
}

/// Dumps `s` until the task named `name` is parked, and returns that dump.
fn when_parked(s: &Scheduler, name: &str) -> Dump {
    let mut last = None;
    wait_until(&format!("task '{name}' parked"), || {
        let d = s.dump();
        let parked = named(&d, name).is_some_and(|t| t.state() == TaskState::Parked);
        last = Some(d);
        parked
    });
    last.expect("a dump was taken")
}

fn waiting_on(s: &Scheduler, name: &str) -> String {
    let d = when_parked(s, name);
    named(&d, name)
        .and_then(|t| t.waiting_on())
        .expect("a parked task says what it waits on")
        .to_owned()
}

#[inline(never)]
fn user_function_that_parks(rx: gofer::chan::Receiver<u32>) -> u32 {
    std::hint::black_box(rx.recv().unwrap_or(0))
}

#[inline(never)]
fn user_function_that_sleeps(d: Duration) {
    gofer::sleep(d);
    std::hint::black_box(());
}

#[test]
fn a_parked_task_shows_its_wait_spawn_site_and_the_users_function_on_its_stack() {
    let s = sched(1);
    let (tx, rx) = gofer::chan::unbounded::<u32>();
    let b = gofer::Builder::new().name("receiver").scheduler(&s);
    let line = line!() + 1;
    let h = b.spawn(move || user_function_that_parks(rx)).unwrap();
    let d = when_parked(&s, "receiver");
    let t = named(&d, "receiver").unwrap();
    assert_eq!(t.id(), h.id().as_u64());
    assert_eq!(t.waiting_on(), Some("channel receive"));
    assert!(t.waited().is_some());
    let at = t.spawned_at().expect("a spawn site");
    assert!(at.file().ends_with("debug_dump.rs"), "{at}");
    assert_eq!(at.line(), line, "{at}");
    let bt = t.backtrace().expect("a parked task's stack is walked");
    assert!(bt.contains("user_function_that_parks"), "{bt}");
    // `Receiver::recv` is inlined into the user's function: only a build
    // with debug info (file and line shown) names inlined calls.
    if bt.contains("\n    at ") {
        assert!(bt.contains("Receiver<T>::recv"), "{bt}");
    }
    assert!(
        !bt.contains("suspend") && !bt.contains("walk_on_top"),
        "runtime frames are trimmed:\n{bt}"
    );
    // The dump left the task as it was: it still receives.
    tx.send(7).unwrap();
    assert_eq!(h.join().unwrap(), 7);
    s.shutdown();
}

#[test]
fn a_sleeping_task_shows_the_time_left_and_its_stack() {
    let s = sched(1);
    let h = gofer::Builder::new()
        .name("sleeper")
        .scheduler(&s)
        .spawn(|| user_function_that_sleeps(Duration::from_secs(30)))
        .unwrap();
    let d = when_parked(&s, "sleeper");
    let t = named(&d, "sleeper").unwrap();
    let w = t.waiting_on().unwrap();
    assert!(w.starts_with("sleep (") && w.ends_with(" left)"), "{w}");
    let bt = t.backtrace().unwrap();
    assert!(bt.contains("user_function_that_sleeps"), "{bt}");
    assert!(bt.contains("gofer::runtime::time::sleep::sleep"), "{bt}");
    drop(h);
    let _ = s.shutdown_timeout(Duration::from_millis(10));
}

#[test]
fn a_sleeping_task_whose_code_has_no_frame_of_its_own_still_shows_where_it_sleeps() {
    // The closure is inlined into the task's root in an optimised build;
    // without debug info nothing records that, so the stack above the root
    // is the library's alone.
    let s = sched(1);
    let h = gofer::Builder::new()
        .name("inlined-sleeper")
        .scheduler(&s)
        .spawn(|| gofer::sleep(Duration::from_secs(30)))
        .unwrap();
    let d = when_parked(&s, "inlined-sleeper");
    let bt = named(&d, "inlined-sleeper").unwrap().backtrace().unwrap();
    assert!(bt.contains("gofer::runtime::time::sleep::sleep"), "{bt}");
    assert!(
        !bt.contains("gofer::runtime::dump::") && !bt.contains("suspend"),
        "the walker's and the switch's frames are trimmed:\n{bt}"
    );
    drop(h);
    let _ = s.shutdown_timeout(Duration::from_millis(10));
}

#[test]
fn running_runnable_and_new_tasks_are_told_apart() {
    let s = sched(1);
    let stop = Arc::new(AtomicBool::new(false));
    // Holds the only Processer, switched in: running.
    let spinning = {
        let stop = stop.clone();
        gofer::Builder::new()
            .name("spinner")
            .scheduler(&s)
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
            .unwrap()
    };
    wait_until("the spinner runs", || {
        named(&s.dump(), "spinner").is_some_and(|t| t.state() == TaskState::Running)
    });
    // Spawned behind it, cannot start: new.
    let queued = gofer::Builder::new()
        .name("queued")
        .scheduler(&s)
        .spawn(|| 1)
        .unwrap();
    let d = s.dump();
    let t = named(&d, "queued").expect("a task not started yet is listed");
    assert_eq!(t.state(), TaskState::New);
    assert!(t.backtrace().is_none() && t.waiting_on().is_none());
    assert!(named(&d, "spinner").unwrap().backtrace().is_none());
    stop.store(true, Ordering::Relaxed);
    spinning.join().unwrap();
    assert_eq!(queued.join().unwrap(), 1);

    // Two tasks yielding in turns on one Processer: whichever is not
    // switched in is runnable.
    let stop = Arc::new(AtomicBool::new(false));
    let yielders: Vec<_> = (0..2)
        .map(|i| {
            let stop = stop.clone();
            gofer::Builder::new()
                .name(format!("yielder{i}"))
                .scheduler(&s)
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        gofer::yield_now();
                    }
                })
                .unwrap()
        })
        .collect();
    wait_until("a yielding task seen runnable", || {
        let d = s.dump();
        ["yielder0", "yielder1"]
            .iter()
            .any(|n| named(&d, n).is_some_and(|t| t.state() == TaskState::Runnable))
    });
    stop.store(true, Ordering::Relaxed);
    for y in yielders {
        y.join().unwrap();
    }
    // Finished tasks are gone from dumps.
    wait_until("finished tasks leave the dump", || {
        s.dump().tasks().is_empty()
    });
    s.shutdown();
}

#[test]
fn every_wait_kind_is_named() {
    let s = sched(2);
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        gofer::Builder::new()
            .name(name)
            .scheduler(&s)
            .spawn(f)
            .unwrap()
    };
    // Channels: receive, send into a full channel, select.
    let (tx0, rx0) = gofer::chan::bounded::<u32>(0);
    let h_send = spawn(
        "send",
        Box::new(move || {
            let _ = tx0.send(1);
        }),
    );
    assert_eq!(waiting_on(&s, "send"), "channel send");
    let (_tx1, rx1) = gofer::chan::unbounded::<u32>();
    let (_tx2, rx2) = gofer::chan::unbounded::<u32>();
    let h_select = spawn(
        "select",
        Box::new(move || {
            gofer::select! {
                recv(rx1) -> _v => {},
                recv(rx2) -> _v => {},
            }
        }),
    );
    assert_eq!(waiting_on(&s, "select"), "select over 2 channel operations");
    // Locks.
    let m = Arc::new(gofer::sync::Mutex::new(0u32));
    let rw = Arc::new(gofer::sync::RwLock::new(0u32));
    let held = m.lock();
    let wheld = rw.write();
    let h_mutex = {
        let m = m.clone();
        spawn("mutex", Box::new(move || drop(m.lock())))
    };
    let h_read = {
        let rw = rw.clone();
        spawn("read", Box::new(move || drop(rw.read())))
    };
    assert_eq!(waiting_on(&s, "mutex"), "mutex lock");
    assert_eq!(waiting_on(&s, "read"), "rwlock read");
    drop(wheld);
    h_read.join().unwrap();
    let rheld = rw.read();
    let h_write = {
        let rw = rw.clone();
        spawn("write", Box::new(move || drop(rw.write())))
    };
    assert_eq!(waiting_on(&s, "write"), "rwlock write");
    // Condvar, semaphore, barrier.
    let pair = Arc::new((gofer::sync::Mutex::new(false), gofer::sync::Condvar::new()));
    let h_cv = {
        let pair = pair.clone();
        spawn(
            "condvar",
            Box::new(move || {
                let mut g = pair.0.lock();
                while !*g {
                    pair.1.wait(&mut g);
                }
            }),
        )
    };
    assert_eq!(waiting_on(&s, "condvar"), "condvar wait");
    let sem = Arc::new(gofer::sync::Semaphore::new(0));
    let h_sem = {
        let sem = sem.clone();
        spawn("semaphore", Box::new(move || drop(sem.acquire())))
    };
    assert_eq!(waiting_on(&s, "semaphore"), "semaphore acquire");
    let bar = Arc::new(gofer::sync::Barrier::new(2));
    let h_bar = {
        let bar = bar.clone();
        spawn(
            "barrier",
            Box::new(move || {
                bar.wait();
            }),
        )
    };
    assert_eq!(waiting_on(&s, "barrier"), "barrier wait");
    // Join of another task, park, and a socket.
    let (tx3, rx3) = gofer::chan::unbounded::<u32>();
    let target = spawn(
        "target",
        Box::new(move || {
            let _ = rx3.recv();
        }),
    );
    let target_id = target.id().as_u64();
    let h_join = spawn("join", Box::new(move || drop(target.join())));
    assert_eq!(waiting_on(&s, "join"), format!("join of task {target_id}"));
    let unpark_me = Arc::new(AtomicBool::new(false));
    let (task_tx, task_rx) = std::sync::mpsc::channel();
    let h_park = {
        let go = unpark_me.clone();
        spawn(
            "park",
            Box::new(move || {
                task_tx.send(gofer::current()).unwrap();
                while !go.load(Ordering::Acquire) {
                    gofer::park();
                }
            }),
        )
    };
    let park_handle = task_rx.recv().unwrap();
    assert_eq!(waiting_on(&s, "park"), "park");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (fd_tx, fd_rx) = std::sync::mpsc::channel();
    let h_sock = spawn(
        "socket",
        Box::new(move || {
            use std::os::fd::AsRawFd;
            let mut c = gofer::net::TcpStream::connect(addr).unwrap();
            fd_tx.send(c.as_raw_fd()).unwrap();
            let mut b = [0u8; 1];
            let _ = c.read(&mut b);
        }),
    );
    let (peer, _) = listener.accept().unwrap();
    let fd = fd_rx.recv().unwrap();
    assert_eq!(waiting_on(&s, "socket"), format!("fd {fd} readable"));

    // Everything wakes as usual after all those dumps.
    assert_eq!(rx0.recv(), Ok(1));
    h_send.join().unwrap();
    drop((_tx1, _tx2));
    h_select.join().unwrap();
    drop(held);
    h_mutex.join().unwrap();
    drop(rheld);
    h_write.join().unwrap();
    *pair.0.lock() = true;
    pair.1.notify_all();
    h_cv.join().unwrap();
    sem.add_permits(1);
    h_sem.join().unwrap();
    bar.wait();
    h_bar.join().unwrap();
    tx3.send(0).unwrap();
    h_join.join().unwrap();
    unpark_me.store(true, Ordering::Release);
    park_handle.unpark();
    drop(peer);
    h_sock.join().unwrap();
    h_park.join().unwrap();
    s.shutdown();
}

// In a child process: twenty thousand parked tasks' stacks take most of
// the process's memory mappings (`vm.max_map_count`), which the tests of
// other modules running beside it need too.
#[test]
fn tasks_parked_at_one_place_print_once_with_their_count() {
    common::in_child(
        module_path!(),
        "tasks_parked_at_one_place_print_once_with_their_count",
        || {
            let s = sched(2);
            const N: usize = 20_000;
            let (tx, rx) = gofer::chan::unbounded::<()>();
            let handles: Vec<_> = (0..N)
                .map(|_| {
                    let rx = rx.clone();
                    s.spawn(move || user_function_that_parks_on_unit(rx))
                })
                .collect();
            wait_until("all parked", || {
                let d = s.dump();
                d.tasks().len() == N && d.tasks().iter().all(|t| t.state() == TaskState::Parked)
            });
            let d = s.dump();
            let text = d.to_string();
            assert!(
                text.contains(&format!("{N} tasks [parked: channel receive")),
                "{text}"
            );
            assert_eq!(
                text.matches("user_function_that_parks_on_unit").count(),
                1,
                "one stack printed once:\n{text}"
            );
            assert!(text.lines().count() < 40, "{text}");
            println!("figure: dump of {N} parked tasks took {:?}", d.took());
            for _ in 0..N {
                tx.send(()).unwrap();
            }
            for h in handles {
                h.join().unwrap();
            }
            s.shutdown();
        },
    );
}

#[inline(never)]
fn user_function_that_parks_on_unit(rx: gofer::chan::Receiver<()>) {
    let _ = std::hint::black_box(rx.recv());
}

#[test]
fn dumps_taken_while_tasks_ping_pong_lose_no_wake_up() {
    in_child(
        module_path!(),
        "dumps_taken_while_tasks_ping_pong_lose_no_wake_up",
        || {
            let s = sched(2);
            const PAIRS: usize = 50;
            const ROUNDS: u64 = 2_000;
            let total = Arc::new(AtomicU64::new(0));
            let mut hs = Vec::new();
            for _ in 0..PAIRS {
                let (a_tx, a_rx) = gofer::chan::bounded::<u64>(0);
                let (b_tx, b_rx) = gofer::chan::bounded::<u64>(0);
                let t = total.clone();
                hs.push(s.spawn(move || {
                    for i in 0..ROUNDS {
                        a_tx.send(i).unwrap();
                        t.fetch_add(b_rx.recv().unwrap(), Ordering::Relaxed);
                    }
                }));
                hs.push(s.spawn(move || {
                    for _ in 0..ROUNDS {
                        let v = a_rx.recv().unwrap();
                        b_tx.send(v + 1).unwrap();
                    }
                }));
            }
            let done = Arc::new(AtomicBool::new(false));
            let dumper = {
                let (done, s) = (done.clone(), s.clone());
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !done.load(Ordering::Relaxed) {
                        let d = s.dump();
                        n += 1;
                        for t in d.tasks() {
                            if t.state() == TaskState::Parked {
                                assert!(t.waiting_on().is_some());
                            }
                        }
                    }
                    n
                })
            };
            for h in hs {
                h.join().unwrap();
            }
            done.store(true, Ordering::Relaxed);
            let dumps = dumper.join().unwrap();
            let want = PAIRS as u64 * (1..=ROUNDS).sum::<u64>();
            assert_eq!(total.load(Ordering::Relaxed), want);
            assert!(dumps > 0);
            println!("figure: {dumps} dumps taken during the ping-pong");
            s.shutdown();
        },
    );
}

#[test]
fn the_stall_report_names_two_deadlocked_tasks() {
    const NAME: &str = "the_stall_report_names_two_deadlocked_tasks";
    if common::child_scenario().as_deref() == Some(NAME) {
        let s = Scheduler::builder()
            .min_threads(2)
            .stall_report(Duration::from_millis(200))
            .build()
            .unwrap();
        let (a_tx, a_rx) = gofer::chan::unbounded::<u32>();
        let (b_tx, b_rx) = gofer::chan::unbounded::<u32>();
        let _a = gofer::Builder::new()
            .name("alice")
            .scheduler(&s)
            .spawn(move || {
                let v = a_rx.recv().unwrap_or(0);
                b_tx.send(v).ok();
            })
            .unwrap();
        let _b = gofer::Builder::new()
            .name("bob")
            .scheduler(&s)
            .spawn(move || {
                let v = b_rx.recv().unwrap_or(1);
                a_tx.send(v * 3).ok();
            })
            .unwrap();
        // The report comes from the scheduler's watcher; wait for it on
        // stdin rather than on a clock.
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        println!("CHILD-OK {NAME}");
        std::process::exit(0);
    }
    let mut child = spawn_child(NAME);
    let report = read_stderr_until(&mut child, "parked: channel receive", 2);
    child.stdin.take().unwrap().write_all(b"done\n").unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(child.wait().unwrap().success(), "{out}");
    assert!(report.contains("stall: all 2 tasks parked for"), "{report}");
    assert!(
        report.contains("'alice' [parked: channel receive"),
        "{report}"
    );
    assert!(
        report.contains("'bob' [parked: channel receive"),
        "{report}"
    );
}

#[test]
fn no_stall_is_reported_while_a_pending_timer_will_wake_the_tasks() {
    const NAME: &str = "no_stall_is_reported_while_a_pending_timer_will_wake_the_tasks";
    if common::child_scenario().as_deref() == Some(NAME) {
        let s = Scheduler::builder()
            .min_threads(1)
            .stall_report(Duration::from_millis(200))
            .build()
            .unwrap();
        // Two tasks wait on channels only timers send to: a plain one and a
        // condition timer. Nothing else runs until they fire, long after
        // the stall report's time.
        let (tx, rx) = gofer::chan::unbounded::<u32>();
        let (cond_tx, cond_rx) = gofer::chan::unbounded::<u32>();
        let a = gofer::Builder::new()
            .name("woken-by-after")
            .scheduler(&s)
            .spawn(move || user_function_that_parks(rx))
            .unwrap();
        let b = gofer::Builder::new()
            .name("woken-by-a-condition-timer")
            .scheduler(&s)
            .spawn(move || user_function_that_parks(cond_rx))
            .unwrap();
        let target = Arc::new(3u32);
        gofer::timer::after_on(&s, Duration::from_millis(1200), move || {
            tx.send(7).unwrap();
        });
        gofer::timer::after_if_alive_on(&s, &target, Duration::from_millis(1200), move |t| {
            cond_tx.send(*t).unwrap();
        });
        assert_eq!(a.join().unwrap(), 7);
        assert_eq!(b.join().unwrap(), 3);
        drop(target);
        println!("woken by the timers");
        s.shutdown();
        println!("CHILD-OK {NAME}");
        std::process::exit(0);
    }
    let out = common::run_child_watched(module_path!(), NAME, NAME, &[], common::IN_CHILD_LIMIT)
        .expect("the child hung");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(&format!("CHILD-OK {NAME}")),
        "{}",
        common::describe(&out)
    );
    assert!(stdout.contains("woken by the timers"), "{stdout}");
    assert!(
        !stderr.contains("stall:"),
        "a stall was reported while timers were pending:\n{stderr}"
    );
}

#[test]
fn a_signal_prints_a_dump_and_the_process_goes_on() {
    const NAME: &str = "a_signal_prints_a_dump_and_the_process_goes_on";
    if common::child_scenario().as_deref() == Some(NAME) {
        gofer::debug::install_signal_dump(libc::SIGUSR1).unwrap();
        let s = sched(1);
        let (tx, rx) = gofer::chan::unbounded::<u32>();
        let h = gofer::Builder::new()
            .name("waiting-for-the-parent")
            .scheduler(&s)
            .spawn(move || user_function_that_parks(rx))
            .unwrap();
        when_parked(&s, "waiting-for-the-parent");
        println!("ready");
        std::io::stdout().flush().unwrap();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        tx.send(5).unwrap();
        assert_eq!(h.join().unwrap(), 5);
        println!("still running after the dump");
        println!("CHILD-OK {NAME}");
        std::process::exit(0);
    }
    let mut child = spawn_child(NAME);
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("ready") {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the child ended early"
        );
    }
    // SAFETY: kill(2) with a pid of our own child and a plain signal.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGUSR1) }, 0);
    let dump = read_stderr_until(&mut child, "user_function_that_parks", 1);
    child.stdin.take().unwrap().write_all(b"go on\n").unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{rest}");
    assert!(rest.contains("still running after the dump"), "{rest}");
    assert!(dump.contains("gofer task dump: 1 task"), "{dump}");
    assert!(
        dump.contains("'waiting-for-the-parent' [parked: channel receive"),
        "{dump}"
    );
}

/// Re-runs this test binary as a child running only the test `name` of
/// this module, with its three standard streams piped.
fn spawn_child(name: &str) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            common::test_path(module_path!(), name).as_str(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(common::CHILD_ENV, name)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads the child's stderr (under a watchdog) until `needle` has appeared
/// `times` times; returns what was read.
fn read_stderr_until(child: &mut std::process::Child, needle: &str, times: usize) -> String {
    let mut err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let needle = needle.to_owned();
    std::thread::spawn(move || {
        let mut text = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match err.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => text.extend_from_slice(&buf[..n]),
            }
            let s = String::from_utf8_lossy(&text);
            if s.matches(needle.as_str()).count() >= times {
                break;
            }
        }
        let _ = tx.send(String::from_utf8_lossy(&text).into_owned());
    });
    match rx.recv_timeout(common::PATIENCE) {
        Ok(s) => s,
        Err(_) => {
            let _ = child.kill();
            panic!("the child printed no dump within {:?}", common::PATIENCE);
        }
    }
}

#[test]
fn a_dump_from_inside_a_task_lists_the_task_itself_as_running() {
    let s = sched(2);
    let bar = Arc::new(StdBarrier::new(1));
    let me = {
        let bar = bar.clone();
        gofer::Builder::new()
            .name("self-dumper")
            .scheduler(&s)
            .spawn(move || {
                bar.wait();
                let d = gofer::debug::dump();
                named(&d, "self-dumper").map(|t| t.state())
            })
            .unwrap()
    };
    assert_eq!(me.join().unwrap(), Some(TaskState::Running));
    s.shutdown();
}
