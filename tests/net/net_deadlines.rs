//! Socket timeouts kept as one timer entry per socket
//! (`runtime/io/readiness.rs`, "Deadlines"): a timed wait that ends early
//! leaves the socket's entry in place for the next one, so each case here
//! checks that the entry still ends every wait on time, never early, once
//! its deadline moved later, moved earlier, or is shared by two waiters.

use crate::common;
use crate::net_common;

use std::io::{ErrorKind, Read, Write};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::PATIENCE;
use gofer::net::unix::UnixStream;
use gofer::{IoDriver, Scheduler};
use net_common::{recv, sched, wait_parked};

const HOUR: Duration = Duration::from_secs(3600);

/// Timer entries left by sockets whose timed reads ended early, with
/// `epoll` of them for the epoll path. That path keeps a socket's one
/// entry armed for its next wait (`readiness.rs`, "Deadlines"): `epoll`.
/// The io_uring path (`IoDriver::Uring`, `GOFER_IO=uring`) times each read
/// of a bound task with an entry of its own, removed as the read ends
/// (`uring.rs`, `wait`): none is left. Either way a wait that ended leaves
/// no entry per wait behind.
fn entries_kept(s: &Scheduler, epoll: usize) -> usize {
    match s.stats().io_driver {
        IoDriver::Uring => 0,
        _ => epoll,
    }
}

/// Reads one byte from `a` with its read timeout: the byte, or the error
/// kind, and how long the read took.
fn timed_read(a: &UnixStream) -> (Result<u8, ErrorKind>, Duration) {
    let t = Instant::now();
    let mut b = [0u8; 1];
    let r = match (&*a).read(&mut b) {
        Ok(1) => Ok(b[0]),
        Ok(n) => panic!("read {n} bytes"),
        Err(e) => Err(e.kind()),
    };
    (r, t.elapsed())
}

/// Runs [`timed_read`] on `a` in a task of `s`; the receiver gets its
/// result (the tests wait for it with a bound: a wait whose entry never
/// fires would otherwise hang them).
fn read_in_task(
    s: &Scheduler,
    a: &Arc<UnixStream>,
) -> mpsc::Receiver<(Result<u8, ErrorKind>, Duration)> {
    let (tx, rx) = mpsc::channel();
    let a = a.clone();
    s.spawn(move || tx.send(timed_read(&a)).unwrap());
    rx
}

/// A wait with a short timeout ends early (the entry stays armed for its
/// deadline), then a wait with a longer timeout parks: the old entry fires
/// first and must arm again for the new deadline, not time the new wait
/// out early.
#[test]
fn a_later_deadline_is_not_cut_short_by_the_entry_of_an_earlier_wait() {
    let s = sched("dl-later", 2);
    let (a, mut b) = UnixStream::pair().unwrap();
    let a = Arc::new(a);
    a.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let first = read_in_task(&s, &a);
    wait_parked(&s, "the first read parks");
    b.write_all(b"x").unwrap();
    assert_eq!(recv(&first, "the first read ends").0, Ok(b'x'));
    assert_eq!(
        s.stats().timers,
        entries_kept(&s, 1),
        "the entry of the first wait stays on epoll, goes on the ring"
    );

    let long = Duration::from_millis(400);
    a.set_read_timeout(Some(long)).unwrap();
    let (r, took) = recv(&read_in_task(&s, &a), "the second read times out");
    assert_eq!(r, Err(ErrorKind::WouldBlock));
    assert!(took >= long, "timed out early, after {took:?}");
    assert!(took < PATIENCE, "timed out after {took:?}");
    drop(b);
    s.shutdown();
}

/// A wait with an hour's timeout ends early; the next wait has a short
/// timeout: its deadline is earlier than the armed entry's, which must be
/// replaced, or the wait would last an hour.
#[test]
fn an_earlier_deadline_replaces_the_entry_of_a_later_wait() {
    let s = sched("dl-earlier", 2);
    let (a, mut b) = UnixStream::pair().unwrap();
    let a = Arc::new(a);
    a.set_read_timeout(Some(HOUR)).unwrap();
    let first = read_in_task(&s, &a);
    wait_parked(&s, "the first read parks");
    b.write_all(b"x").unwrap();
    assert_eq!(recv(&first, "the first read ends").0, Ok(b'x'));

    let short = Duration::from_millis(50);
    a.set_read_timeout(Some(short)).unwrap();
    let (r, took) = recv(&read_in_task(&s, &a), "the second read times out");
    assert_eq!(r, Err(ErrorKind::WouldBlock));
    assert!(took >= short, "timed out early, after {took:?}");
    assert!(took < PATIENCE, "timed out after {took:?}");
    assert_eq!(s.stats().timers, 0, "the replaced entry is gone");
    drop(b);
    s.shutdown();
}

/// Two tasks read one socket, one with an hour's timeout and one with a
/// short one, parked in both orders: the short one times out on time, the
/// long one stays parked (its deadline armed again) and gets the data.
#[test]
fn two_waiters_on_one_socket_each_keep_their_own_deadline() {
    for short_first in [false, true] {
        let s = sched("dl-two", 2);
        let (a, mut b) = UnixStream::pair().unwrap();
        let a = Arc::new(a);
        let short = Duration::from_millis(100);
        let spawn_with = |t: Duration| {
            a.set_read_timeout(Some(t)).unwrap();
            let rx = read_in_task(&s, &a);
            wait_parked(&s, "the read parks");
            rx
        };
        let (long_h, short_h) = if short_first {
            let sh = spawn_with(short);
            (spawn_with(HOUR), sh)
        } else {
            let lh = spawn_with(HOUR);
            (lh, spawn_with(short))
        };
        let (r, took) = recv(&short_h, "the short read times out");
        assert_eq!(r, Err(ErrorKind::WouldBlock), "short first: {short_first}");
        assert!(took >= short, "timed out early, after {took:?}");
        wait_parked(&s, "the long read is still parked");
        assert_eq!(
            s.stats().timers,
            1,
            "the long read's deadline is armed (short first: {short_first})"
        );
        b.write_all(b"y").unwrap();
        assert_eq!(recv(&long_h, "the long read gets the data").0, Ok(b'y'));
        // The last reference may be the task's, dropped just after it sent.
        drop(a);
        common::wait_until("closing the socket removes its entry", || {
            s.stats().timers == 0
        });
        s.shutdown();
    }
}

/// 200 timed request/response exchanges on one connection keep exactly one
/// entry for it (not one per wait), and dropping the socket removes it.
#[test]
fn many_timed_waits_on_one_socket_keep_one_entry_and_a_close_removes_it() {
    let s = sched("dl-many", 2);
    let (a, b) = UnixStream::pair().unwrap();
    a.set_read_timeout(Some(HOUR)).unwrap();
    b.set_read_timeout(Some(HOUR)).unwrap();
    const ROUNDS: usize = 200;
    let server = s.spawn(move || {
        let mut buf = [0u8; 1];
        for _ in 0..ROUNDS {
            (&a).read_exact(&mut buf).unwrap();
            (&a).write_all(&buf).unwrap();
        }
        a
    });
    let client = s.spawn(move || {
        let mut buf = [0u8; 1];
        for i in 0..ROUNDS {
            (&b).write_all(&[i as u8]).unwrap();
            (&b).read_exact(&mut buf).unwrap();
            assert_eq!(buf[0], i as u8);
        }
        b
    });
    let a = server.join().unwrap();
    let b = client.join().unwrap();
    let pending = s.stats().timers;
    assert!(
        (entries_kept(&s, 1)..=entries_kept(&s, 2)).contains(&pending),
        "one entry per socket that waited (none on the ring), not one per wait: {pending}"
    );
    drop((a, b));
    assert_eq!(
        s.stats().timers,
        0,
        "closing the sockets removes their entries"
    );
    s.shutdown();
}
