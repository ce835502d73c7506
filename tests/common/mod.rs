//! Helpers shared by the integration tests: deadlines and child processes.
//!
//! Each test binary (`tests/<area>/main.rs`) declares this module once;
//! each of its modules uses only part of it.
#![allow(dead_code)]

use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A generous bound for "this must happen": the tests run on a loaded
/// 2-core machine, so anything that should take milliseconds gets seconds.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Spins (yielding the thread) until `cond` holds, failing the test with
/// `what` after [`PATIENCE`]. For states that have no event to wait on
/// (`JoinHandle::is_finished`, thread exit); never a replacement for a
/// channel where one can be used.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    let mut spins = 0u32;
    while !cond() {
        assert!(
            start.elapsed() < PATIENCE,
            "timed out after {PATIENCE:?} waiting until {what}"
        );
        // Poll quickly at first, then gently: the CPU is shared.
        if spins < 1000 {
            spins += 1;
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The environment variable that tells a re-executed test binary which child
/// scenario to run.
pub const CHILD_ENV: &str = "GOFER_TEST_CHILD";

/// Which child scenario this process runs, if it is a child.
pub fn child_scenario() -> Option<String> {
    std::env::var(CHILD_ENV).ok()
}

/// The test harness's name for the test `test` of the module `module`
/// (`module_path!()` where the test is): the module path without its
/// first segment (the test binary's own name), then the test's, as in
/// `park::a_task_parks` for a test of `tests/scheduler/park.rs`. A child
/// re-run with `--exact` needs it whole.
pub fn test_path(module: &str, test: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{test}"),
        None => test.to_string(),
    }
}

/// Re-runs this test binary as a child process that runs only `test` of the
/// module `module` (`module_path!()` at the caller; even when the test is
/// ignored), with `CHILD_ENV=scenario` and the extra environment `env` (a
/// `None` value removes the variable). Children check for markers they
/// print, since a mistyped test name would run nothing and exit 0.
pub fn run_child(module: &str, test: &str, scenario: &str, env: &[(&str, Option<&str>)]) -> Output {
    child_command(module, test, scenario, env)
        .output()
        .expect("spawn the test binary as a child")
}

/// Like [`run_child`], with a watchdog: a child still running after
/// `limit` is killed, and the result says so (`None`). For scenarios that
/// could hang: the test fails with a clear message instead of hanging.
pub fn run_child_watched(
    module: &str,
    test: &str,
    scenario: &str,
    env: &[(&str, Option<&str>)],
    limit: Duration,
) -> Option<Output> {
    run_child_watched_late(module, test, scenario, env, limit, Duration::ZERO)
}

/// Like [`run_child_watched`], but nobody reads the child's stdout and
/// stderr pipes for the first `read_after`: a child that writes more than
/// a pipe holds (64 KiB) meanwhile finds it full, as under a slow log
/// collector.
pub fn run_child_watched_late(
    module: &str,
    test: &str,
    scenario: &str,
    env: &[(&str, Option<&str>)],
    limit: Duration,
    read_after: Duration,
) -> Option<Output> {
    watch(
        child_command(module, test, scenario, env),
        test,
        scenario,
        limit,
        read_after,
    )
}

/// Like [`run_child_watched`], with environment values that need not be
/// UTF-8 (`OsStr::from_bytes`): for the checks of malformed variables.
pub fn run_child_watched_os(
    module: &str,
    test: &str,
    scenario: &str,
    env: &[(&str, &std::ffi::OsStr)],
    limit: Duration,
) -> Option<Output> {
    let mut cmd = child_command(module, test, scenario, &[]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    watch(cmd, test, scenario, limit, Duration::ZERO)
}

/// Runs `cmd` under the watchdog of [`run_child_watched_late`].
fn watch(
    mut cmd: Command,
    test: &str,
    scenario: &str,
    limit: Duration,
    read_after: Duration,
) -> Option<Output> {
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the test binary as a child");
    // Drain both pipes on threads, so a chatty child cannot fill a pipe and
    // stall before the watchdog looks at it.
    let drain = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            std::thread::sleep(read_after);
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped stdout")));
    let err = drain(Box::new(child.stderr.take().expect("piped stderr")));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if start.elapsed() >= limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = out.join().expect("stdout reader");
    let stderr = err.join().expect("stderr reader");
    match status {
        Some(status) => Some(Output {
            status,
            stdout,
            stderr,
        }),
        None => {
            eprintln!(
                "child {test}/{scenario} killed after {limit:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                String::from_utf8_lossy(&stdout),
                String::from_utf8_lossy(&stderr)
            );
            None
        }
    }
}

fn child_command(
    module: &str,
    test: &str,
    scenario: &str,
    env: &[(&str, Option<&str>)],
) -> Command {
    let exe = std::env::current_exe().expect("current_exe");
    let name = test_path(module, test);
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        name.as_str(),
        "--nocapture",
        "--test-threads=1",
        "--include-ignored",
    ])
    .env(CHILD_ENV, scenario)
    .env_remove("RUST_BACKTRACE")
    .env_remove("GOFER_THREADS")
    .env_remove("GOFER_MAX_THREADS");
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd
}

/// The watchdog's limit for [`in_child`]: generous, the machine is shared.
pub const IN_CHILD_LIMIT: Duration = Duration::from_secs(60);

/// Runs `body` in a child process (this test binary re-run for `test` of
/// the module `module`, `module_path!()` at the caller, alone, with
/// `CHILD_ENV=test`) under a watchdog, and fails unless it finished,
/// succeeded and printed its end marker. What the child printed from
/// `figure:` on is passed on.
pub fn in_child(module: &str, test: &str, body: impl FnOnce()) {
    in_child_with_env(module, test, &[], body)
}

/// [`in_child`], with the extra environment `env` for the child (a `None`
/// value removes the variable).
pub fn in_child_with_env(
    module: &str,
    test: &str,
    env: &[(&str, Option<&str>)],
    body: impl FnOnce(),
) {
    if child_scenario().as_deref() == Some(test) {
        body();
        println!("CHILD-OK {test}");
        return;
    }
    let out = run_child_watched(module, test, test, env, IN_CHILD_LIMIT)
        .unwrap_or_else(|| panic!("{test} hung: the child was killed after {IN_CHILD_LIMIT:?}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("CHILD-OK {test}")),
        "{}",
        describe(&out)
    );
    for line in stdout.lines() {
        if let Some(at) = line.find("figure:") {
            println!("{}", &line[at..]);
        }
    }
}

/// The child's stdout and stderr, for assertion messages.
pub fn describe(out: &Output) -> String {
    format!(
        "status: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The thread that runs the caller, read through a call the optimiser cannot
/// fold into the caller: a task may resume on another thread after any
/// switch, and an inlined thread-local read could be reused across it.
#[inline(never)]
pub fn thread_id() -> std::thread::ThreadId {
    std::hint::black_box(std::thread::current().id())
}

/// The name of the thread that runs the caller (see [`thread_id`]).
#[inline(never)]
pub fn thread_name() -> String {
    std::hint::black_box(std::thread::current().name().unwrap_or("").to_string())
}

/// Names of this process's threads whose name starts with `prefix` (Linux
/// keeps the first 15 bytes of a thread name) and that have not begun to
/// exit.
///
/// A thread that has begun to exit in the kernel (`PF_EXITING` in the
/// flags of `/proc/self/task/<tid>/stat`) counts as gone: `pthread_join`
/// returns once the kernel clears the thread's id, which it does after
/// setting `PF_EXITING` and before it stops listing the thread in `/proc`.
/// So right after a join, the joined thread is either absent or exiting,
/// while a thread still running Rust code is neither.
pub fn live_threads_named(prefix: &str) -> Vec<String> {
    const PF_EXITING: u64 = 0x4;
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(comm) = std::fs::read_to_string(e.path().join("comm")) else {
            continue; // gone meanwhile
        };
        let comm = comm.trim_end().to_string();
        if !comm.starts_with(prefix) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // "tid (comm) S ppid pgrp session tty tpgid flags ...": the flags are
        // the 7th field after the closing parenthesis.
        let flags = stat
            .rfind(')')
            .and_then(|close| stat[close + 1..].split_whitespace().nth(6))
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0);
        if flags & PF_EXITING == 0 {
            out.push(comm);
        }
    }
    out
}

/// Blocks the calling OS thread in the kernel for `d`, even inside a task
/// and even when the `hooks` feature turns `std::thread::sleep` into a task
/// sleep: a raw `nanosleep` system call, which no hook sees. For tests of
/// blocking detection.
pub fn block_thread_in_kernel(d: Duration) {
    let ts = libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a valid timespec for the call; no remainder wanted.
    unsafe {
        libc::syscall(
            libc::SYS_nanosleep,
            &ts as *const libc::timespec,
            std::ptr::null_mut::<libc::timespec>(),
        )
    };
}

/// Blocks the calling OS thread in the kernel until `go` is set, in short
/// raw sleeps (see [`block_thread_in_kernel`]): a wait that stays a thread
/// wait under the `hooks` feature, where a contended std lock or channel
/// inside a task parks the task instead.
pub fn block_thread_until(go: &std::sync::atomic::AtomicBool) {
    while !go.load(std::sync::atomic::Ordering::SeqCst) {
        block_thread_in_kernel(Duration::from_millis(1));
    }
}

/// Grows the process's descriptor table to hold `fds` descriptors, once,
/// up front: growing it waits for an RCU grace period in the kernel
/// (`expand_files`, milliseconds in a multi-threaded process), so a task
/// whose `socket` or `accept` crosses a power of two sleeps in the kernel,
/// and the Dispatcher rightly calls its thread blocked. The table never
/// shrinks. Raises the soft `RLIMIT_NOFILE` to `fds` if it is lower and the
/// hard limit allows.
pub fn grow_fd_table(fds: usize) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into a live local.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    if lim.rlim_cur < fds as u64 && lim.rlim_max >= fds as u64 {
        lim.rlim_cur = fds as u64;
        // SAFETY: setrlimit reads one rlimit from a live local.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    }
    let top = (fds.min(lim.rlim_cur as usize) - 1) as libc::c_int;
    // SAFETY: duplicates stdin's descriptor onto a number nothing uses (the
    // table is far from full), then closes that copy.
    unsafe {
        assert_eq!(
            libc::dup2(0, top),
            top,
            "{}",
            std::io::Error::last_os_error()
        );
        libc::close(top);
    }
}

/// A scheduler of exactly `n` Processers (no extra threads), default
/// settings otherwise.
pub fn fixed_scheduler(n: usize) -> gofer::Scheduler {
    gofer::Scheduler::builder()
        .min_threads(n)
        .max_threads(n)
        .build()
        .expect("a scheduler")
}

/// Re-runs this test binary as a child running only the test `test` of the
/// module `module` (`module_path!()` at the caller; with `CHILD_ENV=test`),
/// its three standard streams piped: for a scenario the parent steers by
/// what the child prints (see [`read_stderr_until`]) and answers on its
/// stdin.
pub fn spawn_child_piped(module: &str, test: &str) -> std::process::Child {
    use std::process::Stdio;
    child_command(module, test, test, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the test binary as a child")
}

/// Reads the child's stderr until `needle` has appeared `times` times, and
/// returns what was read; kills the child and fails the test if that takes
/// longer than [`PATIENCE`] (the watchdog). The rest of stderr is drained
/// and dropped, so the child never blocks on a full pipe.
pub fn read_stderr_until(child: &mut std::process::Child, needle: &str, times: usize) -> String {
    use std::io::Read;
    let mut err = child.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let wanted = needle.to_owned();
    std::thread::spawn(move || {
        let mut text = Vec::new();
        let mut buf = [0u8; 4096];
        let mut sent = false;
        loop {
            match err.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) if !sent => text.extend_from_slice(&buf[..n]),
                Ok(_) => continue,
            }
            if !sent
                && String::from_utf8_lossy(&text)
                    .matches(wanted.as_str())
                    .count()
                    >= times
            {
                let _ = tx.send(String::from_utf8_lossy(&text).into_owned());
                sent = true;
            }
        }
        if !sent {
            let _ = tx.send(String::from_utf8_lossy(&text).into_owned());
        }
    });
    match rx.recv_timeout(PATIENCE) {
        Ok(s) => s,
        Err(_) => {
            let _ = child.kill();
            panic!("the child did not print {needle:?} within {PATIENCE:?}");
        }
    }
}

/// Waits for the child to exit, killing it (and failing the test) after
/// [`PATIENCE`]; returns its stdout.
pub fn wait_child(mut child: std::process::Child) -> (std::process::ExitStatus, String) {
    use std::io::Read;
    let mut out = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if start.elapsed() >= PATIENCE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child hung: killed after {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (status, reader.join().expect("stdout reader"))
}

/// Each of the first `processers` Processers of `sched` (pinned tasks on
/// each): is its thread's
/// panic count at zero, and does a `std::sync::Mutex` held in a panic
/// there come out poisoned?
pub fn check_threads_clean(sched: &gofer::Scheduler, processers: usize) {
    for i in 0..processers {
        let panicking = gofer::Builder::new()
            .pin(i)
            .scheduler(sched)
            .spawn(std::thread::panicking)
            .unwrap()
            .join()
            .unwrap();
        assert!(!panicking, "Processer {i}'s thread still counts a panic");
        let m = std::sync::Arc::new(std::sync::Mutex::new(0));
        let m2 = m.clone();
        let r = gofer::Builder::new()
            .pin(i)
            .scheduler(sched)
            .spawn(move || {
                let _g = m2.lock().unwrap();
                panic!("poison it");
            })
            .unwrap()
            .join();
        assert!(r.is_err());
        assert!(
            m.is_poisoned(),
            "a panic on Processer {i} holding a Mutex did not poison it"
        );
    }
}
