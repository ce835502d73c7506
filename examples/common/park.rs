//! Idle connections without a task: a connection that has been quiet for a
//! while gives its task back, and a watcher thread starts a new task for it
//! when its next request arrives.
//!
//! A task parked in a read costs a touched stack page (4 KiB) and the
//! runtime's bookkeeping for the task, its socket registration and its read
//! timeout (about 0.5 KiB). A parked connection costs only its descriptor
//! and a few dozen bytes here: the connection's task hands the socket over
//! ([`Parking::park`]) and ends, its stack goes back to the scheduler
//! (unmapped beyond the scheduler's stack cache), and the socket waits in a
//! private epoll set. The watcher, a plain thread blocked in `epoll_wait` on
//! that set, spawns a task on the scheduler for every socket that has
//! input, and closes the sockets parked for longer than the idle timeout
//! (it looks once a second, at the oldest first).
//!
//! The watcher is a thread rather than a task because a task would wait
//! for the set through gofer's reactor, and adding an epoll set with N
//! sockets to another one makes the kernel walk all N (its loop check):
//! milliseconds per wait at 10,000 parked connections.
//!
//! The price is paid per idle period, not per request: parking and waking
//! cost a handful of system calls (the blocking-mode switches of
//! `into_std`/`from_std`, two `epoll_ctl` on the private set, the socket's
//! registration with gofer's reactor) and a task spawn with a fresh stack.
//! A busy connection never parks.

// Each binary that includes this file uses only part of it.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io;
use std::net::TcpStream as StdStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gofer::net::TcpStream;

/// What a woken connection is served with: the stream, the idle timeout,
/// and when the connection was last active (the timeout runs from then).
pub type Serve = fn(TcpStream, Duration, Instant) -> io::Result<()>;

/// How often the watcher looks for connections past the idle timeout.
const SWEEP: Duration = Duration::from_secs(1);

/// Events taken from the set per `epoll_wait`.
const EVENTS: usize = 256;

/// The connections parked without a task.
pub struct Parking {
    /// The private epoll set: every parked socket, registered for input
    /// with its slot number.
    epoll: OwnedFd,
    slots: Mutex<Slots>,
    /// How long a connection may stay quiet before it is closed.
    idle: Duration,
}

/// The parked sockets, by slot number.
#[derive(Default)]
struct Slots {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Slot, generation and time of last activity, in the order the
    /// connections were parked (which is about the order of their last
    /// activity: each parks a fixed quiet time after it). An entry whose
    /// generation no longer matches its slot's is stale: that connection
    /// woke up.
    queue: VecDeque<(u32, u32, Instant)>,
    parked: usize,
}

#[derive(Default)]
struct Slot {
    stream: Option<StdStream>,
    /// Bumped whenever the slot is emptied.
    generation: u32,
}

impl Slots {
    /// Empties `slot`, if it holds generation `generation` (any, if
    /// `None`).
    fn take(&mut self, slot: u32, generation: Option<u32>) -> Option<StdStream> {
        let s = self.slots.get_mut(slot as usize)?;
        if generation.is_some_and(|g| g != s.generation) {
            return None;
        }
        let stream = s.stream.take()?;
        s.generation = s.generation.wrapping_add(1);
        self.free.push(slot);
        self.parked -= 1;
        Some(stream)
    }
}

impl Parking {
    /// A parking for connections of `sched` that close after `idle`
    /// without input; a woken one is served by `serve` in a new task.
    /// Starts the watcher thread, which runs until the process ends.
    pub fn start(
        sched: &gofer::Scheduler,
        idle: Duration,
        serve: Serve,
    ) -> io::Result<Arc<Parking>> {
        // SAFETY: epoll_create1 takes no pointer; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let parking = Arc::new(Parking {
            // SAFETY: fd is a fresh descriptor that nothing else owns.
            epoll: unsafe { OwnedFd::from_raw_fd(fd) },
            slots: Mutex::new(Slots::default()),
            idle,
        });
        let (me, sched) = (parking.clone(), sched.clone());
        std::thread::Builder::new()
            .name("parking".into())
            .spawn(move || me.watch(&sched, serve))?;
        Ok(parking)
    }

    /// Connections parked now.
    pub fn parked(&self) -> usize {
        self.slots.lock().expect("not poisoned").parked
    }

    /// Parks `stream`, last active at `since`: the calling task may end,
    /// and a new one serves the connection when input arrives (or the
    /// connection closes once it has been quiet for the idle timeout).
    pub fn park(&self, stream: TcpStream, since: Instant) -> io::Result<()> {
        let stream = stream.into_std(); // leaves gofer's reactor
        let fd = stream.as_raw_fd();
        // The socket is added to the set under the lock: the watcher's sweep
        // cannot close it (and let its number be reused) in between.
        let mut s = self.slots.lock().expect("not poisoned");
        let slot = s.free.pop().unwrap_or_else(|| {
            s.slots.push(Slot::default());
            (s.slots.len() - 1) as u32
        });
        let entry = &mut s.slots[slot as usize];
        entry.stream = Some(stream);
        let generation = entry.generation;
        s.parked += 1;
        s.queue.push_back((slot, generation, since));
        // Drop the entries of connections that woke up, once they outnumber
        // the parked ones.
        if s.queue.len() > 64 + 2 * s.parked {
            let Slots { slots, queue, .. } = &mut *s;
            queue.retain(|&(i, g, _)| {
                let s = &slots[i as usize];
                s.stream.is_some() && s.generation == g
            });
        }
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
            u64: slot as u64,
        };
        // SAFETY: both descriptors are open: the socket sits in its slot,
        // and the lock held keeps the watcher from taking it out; ev
        // outlives the call.
        if unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0
        {
            let e = io::Error::last_os_error();
            drop(s.take(slot, Some(generation))); // closed
            return Err(e);
        }
        Ok(())
    }

    /// Takes `slot`'s socket out of the slot and out of the set.
    fn take(&self, slot: u32, generation: Option<u32>) -> Option<StdStream> {
        let stream = self
            .slots
            .lock()
            .expect("not poisoned")
            .take(slot, generation)?;
        // SAFETY: both descriptors are open; DEL ignores the event pointer.
        unsafe {
            libc::epoll_ctl(
                self.epoll.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                stream.as_raw_fd(),
                std::ptr::null_mut(),
            )
        };
        Some(stream)
    }

    /// The watcher: wakes parked connections that have input, closes those
    /// past the idle timeout.
    fn watch(&self, sched: &gofer::Scheduler, serve: Serve) {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS];
        let mut last_sweep = Instant::now();
        loop {
            let wait = SWEEP.saturating_sub(last_sweep.elapsed());
            // SAFETY: events is a writable buffer of events.len() entries.
            let n = unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as i32,
                    wait.as_millis() as i32 + 1,
                )
            };
            for ev in &events[..n.max(0) as usize] {
                let Some(stream) = self.take(ev.u64 as u32, None) else {
                    continue;
                };
                let idle = self.idle;
                // A connection whose task cannot be had is closed.
                let r = gofer::Builder::new()
                    .scheduler(sched)
                    .spawn(move || -> io::Result<()> {
                        // Input has just arrived: active now.
                        serve(TcpStream::from_std(stream)?, idle, Instant::now())
                    });
                if let Err(e) = r {
                    eprintln!("cannot serve a connection: {e}");
                }
            }
            if last_sweep.elapsed() >= SWEEP {
                last_sweep = Instant::now();
                self.sweep();
            }
        }
    }

    /// Closes the connections parked for longer than the idle timeout,
    /// oldest first.
    fn sweep(&self) {
        let now = Instant::now();
        loop {
            let mut s = self.slots.lock().expect("not poisoned");
            let Some(&(slot, generation, since)) = s.queue.front() else {
                return;
            };
            if now.duration_since(since) < self.idle {
                return;
            }
            s.queue.pop_front();
            drop(s);
            drop(self.take(slot, Some(generation))); // closed
        }
    }
}
