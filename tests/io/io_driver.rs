//! Choosing the IO driver: `SchedulerBuilder::io_driver` over `GOFER_IO`
//! over `Auto`, and `stats()` naming the driver that runs and why. Each
//! scenario runs in a child process with `GOFER_IO` set (or removed) for it,
//! so that the variable never leaks into other tests.

use crate::common;

use std::time::Duration;

use common::{child_scenario, describe, run_child_watched};
use gofer::{ConfigError, IoDriver, Scheduler, Stats};

/// Runs `body` in a child of this test binary with `GOFER_IO` set to
/// `gofer_io` (removed for `None`), under a watchdog.
fn with_gofer_io(test: &str, gofer_io: Option<&str>, body: impl FnOnce()) {
    if child_scenario().as_deref() == Some(test) {
        body();
        println!("CHILD-OK {test}");
        return;
    }
    let out = run_child_watched(
        module_path!(),
        test,
        test,
        &[("GOFER_IO", gofer_io)],
        Duration::from_secs(60),
    )
    .unwrap_or_else(|| panic!("{test} hung: the child was killed"));
    assert!(
        out.status.success()
            && String::from_utf8_lossy(&out.stdout).contains(&format!("CHILD-OK {test}")),
        "{}",
        describe(&out)
    );
}

/// The stats of a one-thread scheduler built by `builder`, after a task ran.
fn stats_of(builder: gofer::SchedulerBuilder) -> Stats {
    let s = builder
        .min_threads(1)
        .max_threads(1)
        .build()
        .expect("scheduler");
    assert_eq!(s.spawn(|| 5).join().expect("task"), 5);
    let st = s.stats();
    s.shutdown();
    st
}

/// While the benchmarks do not show io_uring ahead, `Auto` runs epoll and
/// says so, without claiming anything about the kernel (it does not probe).
fn assert_auto_chose_epoll(st: &Stats, asked: &str) {
    assert_eq!(st.io_driver, IoDriver::Epoll, "{}", st.io_driver_reason);
    let why = &st.io_driver_reason;
    assert!(why.starts_with(&format!("{asked} chose epoll")), "{why}");
    assert!(why.contains("not probed"), "{why}");
}

#[test]
fn without_builder_or_gofer_io_auto_runs_epoll_and_stats_say_why() {
    let test = "without_builder_or_gofer_io_auto_runs_epoll_and_stats_say_why";
    with_gofer_io(test, None, || {
        assert_eq!(IoDriver::default(), IoDriver::Auto);
        assert_auto_chose_epoll(&stats_of(Scheduler::builder()), "Auto (the default)");
    });
}

#[test]
fn gofer_io_auto_runs_epoll_and_stats_say_why() {
    let test = "gofer_io_auto_runs_epoll_and_stats_say_why";
    with_gofer_io(test, Some("auto"), || {
        assert_auto_chose_epoll(&stats_of(Scheduler::builder()), "GOFER_IO=auto");
    });
}

#[test]
fn gofer_io_epoll_and_uring_run_what_they_name() {
    let test = "gofer_io_epoll_and_uring_run_what_they_name";
    with_gofer_io(test, Some("epoll"), || {
        let st = stats_of(Scheduler::builder());
        assert_eq!(st.io_driver, IoDriver::Epoll);
        assert_eq!(st.io_driver_reason, "asked for by GOFER_IO=epoll");
        // The variable read at each build: the same process, set to uring.
        std::env::set_var("GOFER_IO", "uring");
        let st = stats_of(Scheduler::builder());
        assert_eq!(st.io_driver, IoDriver::Uring);
        assert_eq!(st.io_driver_reason, "asked for by GOFER_IO=uring");
    });
}

#[test]
fn the_builder_wins_over_gofer_io() {
    let test = "the_builder_wins_over_gofer_io";
    with_gofer_io(test, Some("uring"), || {
        let st = stats_of(Scheduler::builder().io_driver(IoDriver::Epoll));
        assert_eq!(st.io_driver, IoDriver::Epoll);
        assert_eq!(
            st.io_driver_reason,
            "asked for by SchedulerBuilder::io_driver(Epoll)"
        );
        let st = stats_of(Scheduler::builder().io_driver(IoDriver::Auto));
        assert_auto_chose_epoll(&st, "SchedulerBuilder::io_driver(Auto)");
    });
}

#[test]
fn a_forced_ring_from_the_builder_wins_over_gofer_io_epoll() {
    let test = "a_forced_ring_from_the_builder_wins_over_gofer_io_epoll";
    with_gofer_io(test, Some("epoll"), || {
        let st = stats_of(Scheduler::builder().io_driver(IoDriver::Uring));
        assert_eq!(st.io_driver, IoDriver::Uring);
        assert_eq!(
            st.io_driver_reason,
            "asked for by SchedulerBuilder::io_driver(Uring)"
        );
    });
}

#[test]
fn a_gofer_io_naming_no_driver_is_a_config_error_listing_the_accepted_values() {
    let test = "a_gofer_io_naming_no_driver_is_a_config_error_listing_the_accepted_values";
    with_gofer_io(test, Some("io_uring"), || {
        let e = Scheduler::builder()
            .build()
            .expect_err("io_uring is not a GOFER_IO value");
        let ConfigError::IoDriver { requested, .. } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(requested, "io_uring");
        let msg = e.to_string();
        assert!(
            msg.contains("GOFER_IO accepts auto, epoll or uring"),
            "{msg}"
        );
        // The builder's choice does not read the variable.
        let st = stats_of(Scheduler::builder().io_driver(IoDriver::Epoll));
        assert_eq!(st.io_driver, IoDriver::Epoll);
    });
}

/// Building a scheduler that probes io_uring leaves the calling thread
/// with nothing of a ring: the kernel tears a ring down asynchronously and
/// then notifies every thread that created one (task work that interrupts
/// a blocking call), and a socket read with a timeout (`SO_RCVTIMEO`) on
/// that thread would fail with `Interrupted` instead of blocking until its
/// timeout.
#[test]
fn probing_io_uring_does_not_interrupt_the_building_threads_timed_reads() {
    let test = "probing_io_uring_does_not_interrupt_the_building_threads_timed_reads";
    with_gofer_io(test, Some("uring"), || {
        use std::io::{ErrorKind, Read};
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let _c = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (mut srv, _) = l.accept().expect("accept");
        let timeout = Duration::from_millis(20);
        srv.set_read_timeout(Some(timeout)).expect("timeout");
        for round in 0..20 {
            let s = Scheduler::builder()
                .min_threads(1)
                .max_threads(1)
                .build()
                .expect("uring from GOFER_IO");
            assert_eq!(s.stats().io_driver, IoDriver::Uring);
            s.shutdown();
            let mut b = [0u8; 1];
            let r = srv.read(&mut b).map_err(|e| e.kind());
            assert_eq!(r, Err(ErrorKind::WouldBlock), "round {round}");
        }
    });
}

/// A `GOFER_IO` that is not UTF-8 names no driver: the build fails with
/// `ConfigError::IoDriver` naming the variable, as for any other value
/// (it used to be taken for unset, and `Auto` ran).
#[test]
fn a_non_utf8_gofer_io_is_a_config_error_naming_the_variable() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let test = "a_non_utf8_gofer_io_is_a_config_error_naming_the_variable";
    if child_scenario().as_deref() == Some(test) {
        let e = Scheduler::builder()
            .build()
            .expect_err("a non-UTF-8 GOFER_IO is no driver");
        let ConfigError::IoDriver { requested, .. } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(requested, "ur\u{fffd}ing");
        let msg = e.to_string();
        assert!(msg.contains("GOFER_IO is not valid UTF-8"), "{msg}");
        assert!(msg.contains("auto, epoll or uring"), "{msg}");
        println!("CHILD-OK {test}");
        return;
    }
    let out = common::run_child_watched_os(
        module_path!(),
        test,
        test,
        &[("GOFER_IO", OsStr::from_bytes(b"ur\xffing"))],
        Duration::from_secs(60),
    )
    .unwrap_or_else(|| panic!("{test} hung: the child was killed"));
    assert!(
        out.status.success()
            && String::from_utf8_lossy(&out.stdout).contains(&format!("CHILD-OK {test}")),
        "{}",
        describe(&out)
    );
}

/// Installs, for every thread of the process, a seccomp filter that
/// answers `EPERM` to `io_uring_setup` (as a container profile does), and
/// allows every other system call.
fn refuse_io_uring_setup() {
    const NR_IO_URING_SETUP: u32 = 425; // the same on x86_64 and aarch64
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    let ins = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let prog = [
        ins(LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        ins(JEQ_K, 0, 3, ARCH),
        ins(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        ins(JEQ_K, 0, 1, NR_IO_URING_SETUP),
        ins(RET_K, 0, 0, RET_ERRNO | libc::EPERM as u32),
        ins(RET_K, 0, 0, RET_ALLOW),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: a plain process setting, no pointers.
    assert_eq!(
        unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) },
        0
    );
    // SAFETY: a filter program that lives across the call (the kernel
    // copies it); SECCOMP_SET_MODE_FILTER (1) with FILTER_FLAG_TSYNC (1).
    let r = unsafe { libc::syscall(libc::SYS_seccomp, 1, 1, &fprog as *const libc::sock_fprog) };
    assert_eq!(r, 0, "seccomp: {}", std::io::Error::last_os_error());
}

/// A forced ring that cannot be set up any more, although io_uring worked
/// at an earlier build of the same process (here a seccomp filter installed
/// meanwhile refuses it), fails the build with `ConfigError::IoDriver`: it
/// used to build on the process's first answer, run every task on epoll,
/// and have `stats()` say `Uring`.
#[test]
fn a_forced_ring_refused_after_an_earlier_build_fails_the_next_build() {
    let test = "a_forced_ring_refused_after_an_earlier_build_fails_the_next_build";
    with_gofer_io(test, None, || {
        let st = stats_of(Scheduler::builder().io_driver(IoDriver::Uring));
        assert_eq!(st.io_driver, IoDriver::Uring, "{}", st.io_driver_reason);
        refuse_io_uring_setup();
        let r = Scheduler::builder()
            .io_driver(IoDriver::Uring)
            .min_threads(1)
            .max_threads(1)
            .build();
        let e = match r {
            Ok(s) => {
                let st = s.stats();
                s.shutdown();
                panic!(
                    "built with io_uring refused: io_driver {:?}, {}",
                    st.io_driver, st.io_driver_reason
                );
            }
            Err(e) => e,
        };
        let ConfigError::IoDriver { requested, reason } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(requested, "uring");
        assert!(reason.contains("io_uring_setup"), "{reason}");
        // Auto and Epoll still build, on epoll.
        assert_eq!(
            stats_of(Scheduler::builder().io_driver(IoDriver::Epoll)).io_driver,
            IoDriver::Epoll
        );
    });
}
