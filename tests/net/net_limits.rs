//! A listener out of descriptors: `accept` fails with `EMFILE` while the
//! connection stays queued, so a loop that retries at once would spin at
//! full speed. gofer's `accept` pauses before it returns such an error (5 ms,
//! doubling to 1 s): the loop of the guide's server (`docs/guide.md`) makes a bounded number
//! of attempts, and accepts the connection once descriptors are freed.
//!
//! Each scenario runs in a child process: it lowers the process's
//! descriptor limit, and a regression spins or hangs.

use crate::common;
use crate::net_common;

use std::fs::File;
use std::io::ErrorKind;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::in_child;
use gofer::net::unix::{UnixListener, UnixStream};
use gofer::net::{TcpListener, TcpStream};
use net_common::{recv, sched};

/// How long the loop runs out of descriptors before the count is taken.
const WINDOW: Duration = Duration::from_millis(500);
/// The most failed accepts allowed in [`WINDOW`]: with the pause, about
/// seven; without it, hundreds of thousands.
const MAX_FAILURES: u32 = 1000;

/// Lowers the soft descriptor limit to 64 (or just above the highest
/// descriptor open, if that is higher) and opens descriptors until none is
/// left; returns them, to be dropped when the scenario frees them.
fn exhaust_descriptors() -> Vec<File> {
    let highest = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .max()
        .unwrap_or(2);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into a live local.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_cur = (highest + 8).max(64).min(lim.rlim_max);
    // SAFETY: setrlimit reads one rlimit from a live local.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    let mut held = Vec::new();
    loop {
        match File::open("/dev/null") {
            Ok(f) => held.push(f),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EMFILE), "{e}");
                return held;
            }
        }
    }
}

/// The accept loop of the guide's server (`docs/guide.md`), counting its failures: sends
/// the count after [`WINDOW`] of failing, and returns the failures once
/// `accept` succeeds.
fn accept_loop<S>(accept: impl Fn() -> std::io::Result<S>, window_count: mpsc::Sender<u32>) -> u32 {
    let start = Instant::now();
    let mut failed = 0u32;
    let mut reported = false;
    loop {
        match accept() {
            Ok(_) => return failed,
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EMFILE), "{e}");
                failed += 1;
                // The count goes at the end of the window, or as soon as it
                // is too high (a spinning loop would get there early).
                if !reported && (start.elapsed() >= WINDOW || failed >= MAX_FAILURES) {
                    reported = true;
                    window_count.send(failed).unwrap();
                }
            }
        }
    }
}

/// Checks the count of one window and frees the descriptors.
fn check_window(rx: &mpsc::Receiver<u32>, held: Vec<File>) {
    let failed = recv(rx, "the accept loop fails for the whole window");
    assert!(failed >= 1, "accept never failed: the limit did not bite");
    assert!(
        failed < MAX_FAILURES,
        "{failed} failed accepts in {WINDOW:?}: the loop spins"
    );
    println!("figure: {failed} failed accepts in {WINDOW:?}");
    drop(held);
}

/// A task's TCP accept loop out of descriptors makes few attempts, then
/// accepts the queued connection once descriptors are freed.
#[test]
fn accept_out_of_descriptors_backs_off_in_a_task_and_recovers() {
    in_child(
        module_path!(),
        "accept_out_of_descriptors_backs_off_in_a_task_and_recovers",
        || {
            let s = sched("emfile", 1);
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            // One connection accepted inside a task first: the reactor (an
            // epoll and an eventfd) exists before the descriptors run out.
            let warm = s.spawn(move || {
                let (_c, _) = l.accept().unwrap();
                l
            });
            let _first = TcpStream::connect(addr).unwrap();
            let l = warm.join().unwrap();
            // The connection the loop will accept, queued before the limit.
            let _client = TcpStream::connect(addr).unwrap();
            let held = exhaust_descriptors();
            let (tx, rx) = mpsc::channel();
            let h = s.spawn(move || accept_loop(|| l.accept(), tx));
            check_window(&rx, held);
            let failed = h.join().unwrap();
            assert!(failed >= 1);
            s.shutdown();
        },
    );
}

/// The same with a Unix listener on a plain thread: the pause is a thread
/// sleep.
#[test]
fn unix_accept_out_of_descriptors_backs_off_on_a_thread_and_recovers() {
    in_child(
        module_path!(),
        "unix_accept_out_of_descriptors_backs_off_on_a_thread_and_recovers",
        || {
            let path =
                std::env::temp_dir().join(format!("gofer-{}-emfile.sock", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let l = UnixListener::bind(&path).unwrap();
            let _client = UnixStream::connect(&path).unwrap();
            let held = exhaust_descriptors();
            let (tx, rx) = mpsc::channel();
            let h = std::thread::spawn(move || accept_loop(|| l.accept(), tx));
            check_window(&rx, held);
            assert!(h.join().unwrap() >= 1);
            std::fs::remove_file(&path).unwrap();
        },
    );
}

/// A listener in non-blocking mode never pauses: the caller polls it and
/// decides. Out of descriptors, each accept fails at once.
#[test]
fn a_nonblocking_accept_out_of_descriptors_does_not_pause() {
    in_child(
        module_path!(),
        "a_nonblocking_accept_out_of_descriptors_does_not_pause",
        || {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let _client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            l.set_nonblocking(true).unwrap();
            let held = exhaust_descriptors();
            let start = Instant::now();
            for _ in 0..100 {
                let e = l.accept().unwrap_err();
                assert_eq!(e.raw_os_error(), Some(libc::EMFILE), "{e}");
            }
            let took = start.elapsed();
            drop(held);
            // 100 pauses would take at least 5 ms each.
            assert!(took < Duration::from_millis(400), "{took:?}");
            assert_eq!(
                l.accept().map(drop).map_err(|e| e.kind()),
                Ok(()),
                "the queued connection"
            );
            assert_eq!(
                l.accept().map(drop).map_err(|e| e.kind()),
                Err(ErrorKind::WouldBlock)
            );
        },
    );
}
