//! Per-descriptor bookkeeping for the hooks (sylar's `FdCtx`): what the
//! descriptor is, whether the program asked for non-blocking mode, its
//! timeouts, and its registration with a reactor.
//!
//! A table indexed by descriptor number, in chunks of [`CHUNK`] entries made
//! with `mmap` when first touched (no heap allocation, so a hooked call
//! made from inside the allocator cannot deadlock on it); descriptors above
//! [`MAX_FD`] get no bookkeeping, and their calls pass through.
//!
//! # The state word (`FdCtx::state`)
//!
//! ```text
//!   bits 63..32   generation: +1 at every close (or dup2 over it)
//!   bit  8        SYNC          a file opened O_SYNC or O_DSYNC: every
//!                               write waits for the disk
//!   bit  7        DIRECT        a file in O_DIRECT mode: reads and writes
//!                               wait for the disk, RWF_NOWAIT or not
//!   bit  6        SHARED        another number names the same open file
//!   bit  5        CLOSING       being closed: callers wait until it is
//!   bit  4        SOCKET        it is a socket (connect, SO_*TIMEO apply)
//!   bit  3        USER_NONBLOCK the program set O_NONBLOCK: return EAGAIN
//!   bit  2        FILE          a regular file or a block device: calls
//!                               that may block go to the blocking pool
//!   bit  1        HOOKED        a socket or a pipe: calls may wait
//!   bit  0        KNOWN         the bits above were read (fstat, F_GETFL)
//! ```
//!
//! Closing a descriptor resets the low bits (the number may next name
//! anything) and bumps the generation, so a call that waited across the
//! close sees the generation move, fails with `EBADF`, and never retries on
//! a number that now belongs to someone else. Until the real `close` has
//! returned, `CLOSING` holds back calls that would look at the descriptor,
//! which may still be the old file ([`FdCtx::close_with`]). A descriptor that is not
//! open is never remembered either, so the number's next owner, made by a
//! call the hooks do not see (`socket`, `open`, `pipe`), is looked at
//! afresh.
//!
//! What the hooks cannot see is a descriptor closed without calling
//! `close` (`close_range`, a raw system call, `fclose` inside libc): its
//! entry keeps describing the old file until the number is closed through
//! the hooks, and the next owner may be waited on wrongly (a socket taken
//! for a file blocks its thread; the Dispatcher covers it).

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::sys::lock::Mutex;
use libc::c_int;

use crate::runtime::io::{Interest, Registration};
use crate::sys::real;

/// Descriptors per chunk.
const CHUNK: usize = 4096;
/// Chunks in the table.
const CHUNKS: usize = 256;
/// Descriptors with bookkeeping: `0..MAX_FD`.
pub(crate) const MAX_FD: usize = CHUNK * CHUNKS;

pub(crate) const KNOWN: u64 = 1;
pub(crate) const HOOKED: u64 = 2;
pub(crate) const FILE: u64 = 4;
pub(crate) const USER_NONBLOCK: u64 = 8;
pub(crate) const SOCKET: u64 = 16;
/// Being closed: nothing learned about the descriptor is remembered.
const CLOSING: u64 = 32;
/// Another number names the same open file (a `dup` either way): settings
/// the program makes through it are not seen here, so a wait asks the
/// kernel for them.
const SHARED: u64 = 64;
/// A file in `O_DIRECT` mode (as of the last `F_SETFL` seen through this
/// number): no call on it is made in place (`in_place.rs`).
pub(crate) const DIRECT: u64 = 128;
/// A file opened `O_SYNC` or `O_DSYNC` (which `F_SETFL` cannot change): its
/// writes are not made in place.
pub(crate) const SYNC: u64 = 256;
const FLAGS: u64 = 0xffff_ffff;
const GEN_ONE: u64 = 1 << 32;

/// One descriptor's bookkeeping.
pub(crate) struct FdCtx {
    /// See the module docs.
    state: AtomicU64,
    /// `SO_RCVTIMEO`, in microseconds; 0 is none.
    recv_timeout: AtomicU64,
    /// `SO_SNDTIMEO`, in microseconds; 0 is none.
    send_timeout: AtomicU64,
    /// The registration with the reactor of the first task that waited.
    reg: Mutex<Option<Arc<Registration>>>,
    /// For a `FILE`: which file system holds it, as [`fs_key`] makes it
    /// (0: not known). Written before the state word says `FILE`.
    fs: AtomicU64,
}

static TABLE: [AtomicPtr<FdCtx>; CHUNKS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS];

/// The registration the hooks made for `fd` (a task waited on it through a
/// hooked call), for the reactor's shared lookup
/// (`runtime/io/reactor.rs`, `shared_registration`).
fn registration_of(fd: std::os::fd::RawFd) -> Option<Arc<Registration>> {
    get(fd)?.current_registration()
}

/// The bookkeeping of `fd`, or `None` for a descriptor out of range (or
/// when a chunk cannot be mapped).
pub(crate) fn get(fd: c_int) -> Option<&'static FdCtx> {
    let fd = usize::try_from(fd).ok().filter(|&fd| fd < MAX_FD)?;
    let slot = &TABLE[fd / CHUNK];
    let mut chunk = slot.load(Ordering::Acquire);
    if chunk.is_null() {
        chunk = map_chunk()?;
        // AcqRel: publish the initialised chunk; Acquire on failure: see the
        // winner's.
        if let Err(won) = slot.compare_exchange(
            std::ptr::null_mut(),
            chunk,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            unmap_chunk(chunk);
            chunk = won;
        }
    }
    // SAFETY: chunks are never unmapped once published, and hold CHUNK
    // initialised entries.
    Some(unsafe { &*chunk.add(fd % CHUNK) })
}

fn chunk_bytes() -> usize {
    CHUNK * std::mem::size_of::<FdCtx>()
}

fn map_chunk() -> Option<*mut FdCtx> {
    // SAFETY: a fresh anonymous mapping; checked for failure.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            chunk_bytes(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let chunk = p.cast::<FdCtx>();
    for i in 0..CHUNK {
        // SAFETY: `i` is inside the mapping, which is page-aligned (so
        // aligned for FdCtx) and not shared yet.
        unsafe {
            chunk.add(i).write(FdCtx {
                state: AtomicU64::new(0),
                recv_timeout: AtomicU64::new(0),
                send_timeout: AtomicU64::new(0),
                reg: Mutex::new(None),
                fs: AtomicU64::new(0),
            })
        };
    }
    Some(chunk)
}

fn unmap_chunk(chunk: *mut FdCtx) {
    // SAFETY: a chunk we mapped and lost the race to publish: nobody else
    // saw it, and its entries own nothing (all registrations are None).
    unsafe { libc::munmap(chunk.cast(), chunk_bytes()) };
}

/// The generation of a state word.
pub(crate) fn generation(state: u64) -> u64 {
    state >> 32
}

impl FdCtx {
    /// The state word, reading what the descriptor is on first use.
    ///
    /// While the descriptor is being closed on another thread (`CLOSING`:
    /// one `close` system call), waits for that to finish, so the state
    /// returned describes whatever holds the number afterwards.
    pub(crate) fn state(&self, fd: c_int) -> u64 {
        let mut s = self.state.load(Ordering::Acquire);
        let mut spins = 0u32;
        while s & CLOSING != 0 {
            if spins < 100 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now(); // sched_yield, which is not hooked
            }
            s = self.state.load(Ordering::Acquire);
        }
        if s & KNOWN != 0 {
            return s;
        }
        let mut bits = KNOWN;
        // SAFETY: fstat into a zeroed stat, checked for failure.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            // Not open (closed under the caller, or never opened): this call
            // passes through and fails as libc's would, and nothing is
            // remembered, since the next descriptor to get this number, made
            // by a call the hooks do not see (`socket`, `open`, `pipe`), may
            // be anything.
            return s & !FLAGS;
        }
        let fmt = st.st_mode & libc::S_IFMT;
        if fmt == libc::S_IFSOCK {
            bits |= HOOKED | SOCKET;
        } else if fmt == libc::S_IFIFO {
            bits |= HOOKED;
        } else if fmt == libc::S_IFREG || fmt == libc::S_IFBLK {
            bits |= FILE;
            // SAFETY: F_GETFL takes no argument.
            let fl = unsafe { real::fcntl(fd, libc::F_GETFL, 0) };
            bits |= open_mode(fl);
            self.fs.store(fs_key(&st), Ordering::Relaxed);
        }
        if bits & HOOKED != 0 {
            // SAFETY: F_GETFL takes no argument.
            let fl = unsafe { real::fcntl(fd, libc::F_GETFL, 0) };
            if fl >= 0 && fl & libc::O_NONBLOCK != 0 {
                bits |= USER_NONBLOCK;
            }
        }
        self.set_flags(s, bits);
        self.state.load(Ordering::Acquire)
    }

    /// Replaces the flag bits of `expected` (if the generation still is the
    /// one it had, and the descriptor was not being closed when the caller
    /// looked at it, nor is now), keeping the generation.
    fn set_flags(&self, expected: u64, flags: u64) {
        let mut cur = expected;
        loop {
            if generation(cur) != generation(expected) || cur & CLOSING != 0 {
                return; // closed meanwhile, or what was seen may be the old file
            }
            let new = (cur & !FLAGS) | flags;
            // AcqRel: publishes the flags with the descriptor's state.
            match self
                .state
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(now) => cur = now,
            }
        }
    }

    /// Sets or clears `bit` (keeping the generation).
    pub(crate) fn set_bit(&self, bit: u64, on: bool) {
        if on {
            self.state.fetch_or(bit, Ordering::AcqRel);
        } else {
            self.state.fetch_and(!bit, Ordering::AcqRel);
        }
    }

    /// For a `FILE`, the file system that holds it ([`fs_key`]; 0: not
    /// known).
    pub(crate) fn fs(&self) -> u64 {
        self.fs.load(Ordering::Relaxed)
    }

    /// Marks the descriptor as sharing its open file with another number.
    pub(crate) fn mark_shared(&self) {
        self.state.fetch_or(SHARED, Ordering::AcqRel);
    }

    /// Whether another number shares the descriptor's open file (a `dup`
    /// was made of it, or it is one).
    pub(crate) fn is_shared(&self) -> bool {
        self.state.load(Ordering::Acquire) & SHARED != 0
    }

    /// The timeout of waits in `interest`'s direction.
    pub(crate) fn timeout(&self, interest: Interest) -> Option<Duration> {
        let us = match interest {
            Interest::Read => self.recv_timeout.load(Ordering::Relaxed),
            Interest::Write => self.send_timeout.load(Ordering::Relaxed),
        };
        (us != 0).then(|| Duration::from_micros(us))
    }

    /// Records `SO_RCVTIMEO`/`SO_SNDTIMEO`.
    pub(crate) fn set_timeout(&self, interest: Interest, t: Option<Duration>) {
        let us = t.map_or(0, |t| {
            u64::try_from(t.as_micros()).unwrap_or(u64::MAX).max(1)
        });
        match interest {
            Interest::Read => self.recv_timeout.store(us, Ordering::Relaxed),
            Interest::Write => self.send_timeout.store(us, Ordering::Relaxed),
        }
    }

    /// The generation now (see the module docs).
    pub(crate) fn generation_now(&self) -> u64 {
        generation(self.state.load(Ordering::Acquire))
    }

    /// The registration, made (inside a task) on first need, for a call
    /// that began in generation `gen`: `EBADF` if the descriptor was closed
    /// since. Checked under the lock that [`close_with`](Self::close_with)
    /// holds from after its first bump of the generation to after its
    /// second, so a registration is never made for a descriptor being
    /// closed (and then left behind for the number's next owner): either
    /// this sees the generation moved, or `close_with` finds the
    /// registration and removes it.
    pub(crate) fn registration(
        &self,
        fd: c_int,
        gen: u64,
    ) -> std::io::Result<Option<Arc<Registration>>> {
        let mut reg = self.reg.lock();
        if self.generation_now() != gen {
            return Err(std::io::Error::from_raw_os_error(libc::EBADF));
        }
        if let Some(r) = reg.as_ref() {
            return Ok(Some(r.clone()));
        }
        // Before the first registration exists: a `gofer::net` socket made
        // from this descriptor finds it through the reactor's lookup.
        crate::runtime::io::reactor::set_shared_lookup(registration_of);
        let made = Registration::for_current_task(fd)?.map(Arc::new);
        reg.clone_from(&made);
        Ok(made)
    }

    /// The registration made for the descriptor, if any.
    pub(crate) fn current_registration(&self) -> Option<Arc<Registration>> {
        self.reg.lock().clone()
    }

    /// Closes the descriptor with `close` (the real `close`, `dup2` or
    /// `dup3`, which replace it), keeping the bookkeeping right around it:
    ///
    /// 1. forget what the descriptor was, bump the generation, set
    ///    `CLOSING`;
    /// 2. under the registration's lock, take the registration out and
    ///    deregister it: the descriptor leaves epoll while the number is
    ///    still its own, and every task waiting on it wakes;
    /// 3. `close`;
    /// 4. clear `CLOSING`, then let go of the lock.
    ///
    /// The generation moves before the waiters wake: one may run at once
    /// on another thread, retry its call on the still-open descriptor, get
    /// `EAGAIN` and wait again, on a registration nobody will ever wake;
    /// with the generation moved it fails with `EBADF` instead. While
    /// `CLOSING` is set, [`state`](Self::state) waits, so no call learns
    /// (and remembers) what may be the old file, and a registration cannot
    /// be made either: [`registration`](Self::registration) takes the same
    /// lock. The number's next owner, which may appear on another thread as
    /// soon as step 3 returns, is looked at afresh once step 4 is done.
    ///
    /// Returns what `close` returned, with its errno.
    pub(crate) fn close_with(&self, close: impl FnOnce() -> c_int) -> c_int {
        self.forget();
        let mut reg = self.reg.lock();
        if let Some(r) = reg.take() {
            r.deregister();
        }
        let r = close();
        let e = std::io::Error::last_os_error().raw_os_error();
        // Release: pairs with the Acquire loads of the state word.
        self.state.fetch_and(!CLOSING, Ordering::Release);
        drop(reg);
        if let Some(e) = e {
            // SAFETY: errno's location is valid for the calling thread.
            unsafe { *libc::__errno_location() = e };
        }
        r
    }

    /// Resets the flags and timeouts, bumps the generation and sets
    /// `CLOSING`.
    fn forget(&self) {
        self.recv_timeout.store(0, Ordering::Relaxed);
        self.send_timeout.store(0, Ordering::Relaxed);
        let mut cur = self.state.load(Ordering::Acquire);
        loop {
            let new = (cur & !FLAGS).wrapping_add(GEN_ONE) | CLOSING;
            // AcqRel: a waiter that sees the new generation sees the rest.
            match self
                .state
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(now) => cur = now,
            }
        }
    }

    /// `dup`: `to` names the same open file: copy what it is and its modes.
    pub(crate) fn copy_to(&self, to: &FdCtx) {
        let s = self.state.load(Ordering::Acquire);
        let mut cur = to.state.load(Ordering::Acquire);
        loop {
            let new = (cur & !FLAGS) | (s & FLAGS & !CLOSING);
            match to
                .state
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        to.fs
            .store(self.fs.load(Ordering::Relaxed), Ordering::Relaxed);
        to.recv_timeout
            .store(self.recv_timeout.load(Ordering::Relaxed), Ordering::Relaxed);
        to.send_timeout
            .store(self.send_timeout.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// The [`DIRECT`] and [`SYNC`] bits of a file's status flags (`F_GETFL`'s
/// answer; none when it failed).
pub(crate) fn open_mode(fl: c_int) -> u64 {
    if fl < 0 {
        return 0;
    }
    let mut bits = 0;
    if fl & libc::O_DIRECT != 0 {
        bits |= DIRECT;
    }
    // O_SYNC includes O_DSYNC's bit on Linux.
    if fl & libc::O_DSYNC != 0 {
        bits |= SYNC;
    }
    bits
}

/// A number for the file system that holds the file `st` describes, never
/// 0: its device for a regular file, and for a block device the device
/// itself (what answers its calls), told apart by the top bit.
fn fs_key(st: &libc::stat) -> u64 {
    // The top two bits are the key's own (the second is `in_place.rs`'s
    // mark for writes); device numbers do not reach them.
    let low = |dev: u64| (dev & !(3 << 62)) + 1;
    if st.st_mode & libc::S_IFMT == libc::S_IFBLK {
        low(st.st_rdev) | 1 << 63
    } else {
        low(st.st_dev)
    }
}
