//! Syscall hooks: with the cargo feature `hooks`, code written against the
//! plain blocking system calls (`std::net`, `std::thread::sleep`, blocking
//! crates built on them) parks the task instead of the thread.
//!
//! With the feature, the executable defines `read`, `recv`, `connect`,
//! `accept`, `nanosleep` and the rest of the set below. Each one, called
//! from inside a gofer task on a socket or a pipe, tries the real call and,
//! where it would block, waits through the scheduler's IO manager (the task
//! parks, the thread runs other tasks), then retries. A call epoll cannot
//! wait for (a regular file, a lock, a child, a name lookup), or whose
//! exact results only the real call gives (`ppoll` or `select` on one
//! socket), goes to the scheduler's blocking pool instead: the task parks
//! while a pool thread makes the real call, and gets its result and
//! `errno`. A wait on an epoll instance or on several descriptors is an
//! event loop's, made by a library that has thread-local state set around
//! it (tokio's `block_on` inside sync `postgres`): it blocks the thread, so
//! no other task of the thread runs inside that state, and the Dispatcher
//! moves the tasks that have not started. Outside a task, on stdio, in a forked child, or on
//! any other descriptor (a terminal), the call goes to libc unchanged. The
//! real functions are found with `dlsym(RTLD_NEXT, ...)` once.
//!
//! ```
//! // True when the binary was built with `--features hooks`.
//! let hooked = gofer::hooks::enabled();
//! # let _ = hooked;
//! ```
//!
//! # What is hooked
//!
//! | call | inside a task, on a socket or pipe |
//! |---|---|
//! | `read`, `readv`, `recv`, `recvfrom`, `recvmsg` | wait readable on `EAGAIN`; `SO_RCVTIMEO` is the wait's timeout (`EAGAIN` on expiry, like the kernel) |
//! | `write`, `writev`, `send`, `sendto`, `sendmsg` | wait writable on `EAGAIN`; `SO_SNDTIMEO` likewise |
//! | `accept`, `accept4` | wait readable on `EAGAIN` |
//! | `connect` | non-blocking connect, wait writable, then `SO_ERROR` (`SO_SNDTIMEO` bounds the wait, `ETIMEDOUT` on expiry) |
//! | `poll` | one socket or pipe: waits through the IO manager (for both directions, or for errors only: the blocking pool); several descriptors, none, or one of another kind (an eventfd, a timerfd, an epoll instance): in place, blocking the thread (see below); a zero timeout polls in place |
//! | `sleep`, `usleep`, `nanosleep`, `clock_nanosleep` (what `std::thread::sleep` calls) | the task sleeps on the scheduler's timers |
//! | `close` | wakes the tasks waiting on the descriptor (their call fails with `EBADF`), unregisters it, then closes |
//! | `fcntl(F_SETFL)`, `ioctl(FIONBIO)` | record whether the program asked for non-blocking mode: such a descriptor keeps returning `EAGAIN` |
//! | `setsockopt(SO_RCVTIMEO/SO_SNDTIMEO)` | recorded as the waits' timeouts (and passed on) |
//! | `dup`, `dup2`, `dup3` | the new descriptor gets its own bookkeeping; the one `dup2`/`dup3` replace is closed as by `close` |
//! | `syscall(SYS_futex, ...)` (how std's `Mutex`, `RwLock`, `Condvar` and `Once` wait) | `FUTEX_WAIT`/`FUTEX_WAIT_BITSET` on a lock's own word park the task (a word of the thread's own blocks it, see below) on a waiter table keyed by address (timeouts on the scheduler's timers, `ETIMEDOUT` on expiry); `FUTEX_WAKE`/`FUTEX_WAKE_BITSET` from any thread wake the table's tasks first, then pass the rest of the count to the kernel's waiters, and return the total woken; each call answers (result and errno) as the kernel does on a plain thread, for bad pointers, bad timeouts and flags too (the kernel checks a wait before the task is queued); see `futex.rs` for the other operations |
//! | `syscall`, any other number | libc's `syscall`, arguments, result and errno unchanged |
//! | `pthread_mutex_lock`, `_trylock`, `_timedlock`, `_clocklock`, `_unlock`; `pthread_rwlock_rdlock`, `_wrlock`, `_tryrdlock`, `_trywrlock`, `_timedrdlock`, `_timedwrlock`, `_clockrdlock`, `_clockwrlock`, `_unlock`; `flockfile`, `ftrylockfile`, `funlockfile` | anywhere: libc's, and a count per thread of the C locks held (`locks.rs`). While it is not zero, no hooked call switches the task out: every call in the tables here is made on the thread, as on a plain thread. A contended lock blocks the thread (its holder is never a task parked on it) |
//!
//! | call | inside a task (holding no C lock): made on the blocking pool |
//! |---|---|
//! | `read`, `readv`, `pread`, `preadv` (and `*64`) | on a regular file or block device, when the page cache cannot answer: a read of at most 64 KiB first tries `preadv2(..., RWF_NOWAIT)` in place, and only a miss (`EAGAIN`), or the part not cached, goes to the pool |
//! | `write`, `writev`, `pwrite`, `pwritev` (and `*64`) | on a regular file or block device opened `O_DIRECT`, `O_SYNC` or `O_DSYNC`, or more than 64 KiB; a smaller buffered write is made in place (after `pwritev2(..., RWF_NOWAIT)` where the file system takes it, which sends it to the pool on `EAGAIN`; `in_place.rs` says why) |
//! | `fsync`, `fdatasync`, `ftruncate`(`64`), `fallocate`(`64`) | on a regular file or block device |
//! | `open`, `open64`, `openat`, `openat64`, `creat`, `creat64` | always (a path may be a slow disk, a FIFO, a device) |
//! | `flock`, `lockf`(`64`), `fcntl(F_SETLKW/F_OFD_SETLKW)` | a lock that may wait (not `LOCK_NB`, `F_TLOCK`, an unlock) |
//! | `wait`, `waitpid`, `wait4`, `waitid` | without `WNOHANG` |
//! | `getaddrinfo`, `getnameinfo`, `gethostbyname_r`, `gethostbyname2_r`, `gethostbyaddr_r` | always |
//! | `ppoll`, `select`, `pselect` | a timeout other than zero, on one socket or pipe (the only descriptor in the sets); any other wait is made in place and blocks the thread |
//! | `splice`, `tee`, `sendfile`(`64`), `copy_file_range`, and their numbers through `syscall` (how std's `io::copy` makes them) | always, unless one of the two descriptors is stdio |
//!
//! gofer never changes a descriptor's flags: a task asks the kernel not to
//! block call by call (`MSG_DONTWAIT` on sockets, `RWF_NOWAIT` on pipes and
//! on regular files' page cache;
//! `accept` and `connect` set `O_NONBLOCK` for their one system call only),
//! so plain threads, clones of the descriptor and other processes see
//! exactly what they would without the hooks. Plain threads, stdio
//! (descriptors 0 to 2) and a forked child always go straight to libc.
//!
//! # What is not hooked
//!
//! - Waiting in C libraries' locks: glibc's `pthread_mutex_*`,
//!   `pthread_rwlock_*` and `pthread_cond_*` reach the futex from inside
//!   libc, not through `syscall`: a task waiting in them blocks its
//!   thread. The lock functions are interposed only to count what the
//!   thread holds (above), so that a holder never parks and its siblings
//!   never wait behind it on its own thread. `pthread_cond_wait` gives its
//!   mutex up and takes it back inside libc: the count does not move
//!   (the caller holds the mutex before and after). Semaphores are not
//!   counted (nobody owns one). A task that holds a C lock and then waits
//!   for a `std::sync` lock blocks its thread: if that lock's holder is a
//!   task parked on the same thread, it never resumes.
//! - glibc's own locks: stdio's (`_IO_lock_lock` under `printf`,
//!   `fgets`, ...), malloc's arenas, the dynamic linker's (`dlsym`,
//!   `dlopen`, `dl_iterate_phdr`) and those inside `pthread_cond_*` are
//!   taken through libc's internal aliases or bare futex words, never
//!   through the symbols the executable defines: they are not counted,
//!   and need not be, since libc holds none across a hooked call (its
//!   own calls do not reach the hooks). The program's `flockfile` is
//!   counted: a `FILE`'s lock is recursive and owned by the thread, so a
//!   task parked holding one would let its siblings in.
//! - A task that switches out on its own (`gofer::sleep`, a gofer channel
//!   or lock, `yield_now`) while holding a C lock: the rule binds the
//!   hooks only; such a task hands its thread, and the thread's count,
//!   to a sibling.
//! - Waits whose record belongs to the thread rather than to the lock:
//!   `std::thread::park` (and so std's `mpsc` and crossbeam's channels)
//!   and `parking_lot` (one waiting record per thread). Every task of a
//!   Processer shares its thread's record, so these waits block the thread
//!   (`owned.rs` says why and how they are told apart). std's `Mutex`,
//!   `RwLock`, `Condvar` and `Once` wait on the lock's own word and park.
//! - Raw system calls through `syscall(2)` other than futex and the
//!   copies above, io_uring, and
//!   code that reaches the kernel without
//!   calling these symbols: C code linked statically that calls libc's
//!   internal aliases, and calls made inside libc itself (`fread`'s `read`,
//!   `getaddrinfo`'s own sockets, `fclose`'s `close`). Shared libraries see
//!   the hooks only if the executable exports the symbols (link with
//!   `-C link-args=-rdynamic`).
//! - `gethostbyname`, `gethostbyname2`, `gethostbyaddr`: they return
//!   static storage (and set `h_errno`) of the calling thread, which a pool
//!   thread would fill instead; they block their thread.
//! - `stat` and the path calls other than `open` (`unlink`, `rename`,
//!   `mkdir`, ...), `close` on a file.
//! - `epoll_wait`, `epoll_pwait`, `epoll_pwait2`, and `poll`, `ppoll`,
//!   `select`, `pselect` on several descriptors (or on none, or on one that
//!   is not a socket or pipe): an event loop's waits. The library running
//!   the loop has thread-local state set around them (tokio's runtime
//!   context, for `block_on` inside sync `postgres` or
//!   `reqwest::blocking`); a task parked there would let the next task of
//!   the thread run inside that state (its own `block_on` panics "Cannot
//!   start a runtime from within a runtime"). So they block the thread, as
//!   without the hooks, and the Dispatcher moves the tasks that have not
//!   started (ARCHITECTURE.md, "Foreign event loops").
//! - A task parked in an offloaded call keeps the Rust locks it holds (a
//!   `std::sync::Mutex`, which a contending task parks on) until the call
//!   returns, as a thread would; another task of the same thread blocking
//!   on such a lock in a way that holds the thread (a `parking_lot` lock,
//!   or while it holds a C lock) holds the thread, and the parked task,
//!   bound to it, cannot resume to release it. (C locks cannot be in this
//!   position: their holder does not park.)
//! - The locks a C library holds in files rather than in memory (SQLite's
//!   POSIX `fcntl` locks and WAL-index locks between statements): a task
//!   holding one parks as usual when it holds no pthread lock. This is
//!   sound (they do not block the thread: SQLite answers `SQLITE_BUSY` and
//!   its busy handler sleeps, which parks), but each hand-off to the pool
//!   lengthens the time the file lock is held, which is why page-cache
//!   reads and small buffered writes stay in place; an `fsync`, an
//!   uncached read and an `open` still hand off.
//! - stdio: a write to a full stdout pipe blocks the thread (std's stdio
//!   locks belong to the thread, so a task must not park holding one).
//! - Pipes on kernels without `RWF_NOWAIT` (before Linux 5.x).
//!
//! Whatever stays unhooked blocks its thread, and with it every started
//! task bound to that thread (a started task stays where it first ran):
//! the Dispatcher moves only the tasks that have not started yet. Run such
//! a call through a blocking-pool thread instead, where the library offers
//! one.
//!
//! # Where each part lives
//!
//! `guard.rs` decides when a hook steps aside (plain threads, stdio, a
//! forked child, the recursion guard); `io_loop.rs` routes a descriptor and
//! runs the try-wait-retry loop; `offload.rs` sends a call to the blocking
//! pool; `data.rs` (reads and writes), `sockets.rs` (`accept`, `connect`),
//! `poll.rs` (the waits on descriptors), `sleep.rs`, `descriptors.rs`
//! (`close`, `fcntl`, `dup`, ...), `files.rs` (regular files, `open`;
//! with `in_place.rs`, the file reads and writes made without the pool),
//! `wait.rs` (locks, children), `names.rs` (name lookups), `locks.rs`
//! (the count of C locks held), `copies.rs`
//! (`splice`, `sendfile`, ...) and `syscall.rs`
//! (with `futex.rs`, the futex waiter table) define the symbols by family;
//! `fdctx.rs`
//! keeps each descriptor's bookkeeping; `real.rs` finds libc's own
//! functions; `symbols.rs` keeps them all linked.
//!
//! # Safety of the hooks themselves
//!
//! The hooks never allocate on their fast path; the per-descriptor table is
//! made of `mmap`ed chunks, not heap memory. A recursion guard sends any
//! hooked call made while a hook runs runtime code straight to libc, and the
//! runtime's own threads (Processer loops, the Dispatcher reading `/proc`)
//! never run inside a task, so their calls pass through unchanged.
//! The runtime's own locks and a Processer's idle sleep wait on futex words
//! of their own, straight in the kernel (`sys/lock.rs`): a task holding
//! or contending one is never parked by the futex hook.

/// Whether this binary was built with the `hooks` feature (the hooked libc
/// symbols are defined).
pub fn enabled() -> bool {
    cfg!(feature = "hooks")
}

#[cfg(all(
    feature = "hooks",
    not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))
))]
compile_error!("the `hooks` feature is for Linux on x86_64 or aarch64");

#[cfg(feature = "hooks")]
mod copies;
#[cfg(feature = "hooks")]
mod data;
#[cfg(feature = "hooks")]
mod descriptors;
#[cfg(feature = "hooks")]
mod fdctx;
#[cfg(feature = "hooks")]
mod files;
#[cfg(feature = "hooks")]
mod futex;
#[cfg(feature = "hooks")]
mod guard;
#[cfg(feature = "hooks")]
mod in_place;
#[cfg(feature = "hooks")]
mod io_loop;
#[cfg(feature = "hooks")]
mod locks;
#[cfg(feature = "hooks")]
mod names;
#[cfg(feature = "hooks")]
mod offload;
#[cfg(feature = "hooks")]
mod owned;
#[cfg(feature = "hooks")]
mod poll;
#[cfg(feature = "hooks")]
mod sleep;
#[cfg(feature = "hooks")]
mod sockets;
#[cfg(feature = "hooks")]
mod symbols;
#[cfg(feature = "hooks")]
mod syscall;
#[cfg(feature = "hooks")]
mod wait;

/// Makes sure the linker keeps the hooked symbols (called when a scheduler
/// is built).
pub(crate) fn keep() {
    #[cfg(feature = "hooks")]
    symbols::keep();
}
