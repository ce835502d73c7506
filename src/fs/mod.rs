//! Files and directories shaped like [`std::fs`], for programs built
//! without the `hooks` feature: each call that may block (every system
//! call on a path or a file) is made on the scheduler's blocking pool
//! through [`unblock`](crate::unblock), while the calling task parks and
//! its Processer runs other tasks. Outside a task, each call runs in place
//! and behaves exactly as std's.
//!
//! Results and errors are std's own: the same [`io::Error`](std::io::Error)
//! kinds (`NotFound`, `PermissionDenied`, ...), the same
//! [`Metadata`](std::fs::Metadata) and [`DirEntry`](std::fs::DirEntry).
//!
//! ```
//! # let dir = std::env::temp_dir().join(format!("gofer-fs-doc-{}", std::process::id()));
//! let sched = gofer::Scheduler::builder().min_threads(1).build().unwrap();
//! let text = sched.block_on(move || {
//!     gofer::fs::create_dir_all(&dir)?;
//!     let path = dir.join("hello.txt");
//!     gofer::fs::write(&path, "hello")?;
//!     let text = gofer::fs::read_to_string(&path)?;
//!     gofer::fs::remove_file(&path)?;
//!     gofer::fs::remove_dir(&dir)?;
//!     Ok::<_, std::io::Error>(text)
//! });
//! assert_eq!(text.unwrap(), "hello");
//! sched.shutdown();
//! ```
//!
//! Each call is one hand-off to a pool thread and back, so a few large
//! reads and writes cost less than many small ones: `read`, `write` and the
//! `Read::read_to_end` / `Write::write_all` of [`File`] make the whole
//! transfer in one hand-off. [`File`]'s `read` and `read_vectored` of at
//! most 64 KiB, inside a task, first ask for what the page cache holds
//! (`preadv2` with `RWF_NOWAIT`) and make no hand-off when it holds some:
//! they may then return fewer bytes than asked, as `read(2)` may.
//!
//! Opening a file makes no hand-off either where the kernel's caches
//! answer: inside a task, [`File::open`], [`read`] and [`read_to_string`]
//! first open the path with `openat2(RESOLVE_CACHED)`, which resolves it
//! from the kernel's lookup cache or gives up, never reading a directory
//! from the disk; they do so only for a regular file on a local file system
//! (ext4, xfs, btrfs, f2fs, tmpfs, ramfs, overlayfs), whose open asks no
//! server. So `read` of a small file (at most 64 KiB) that was read
//! recently costs a few system calls on the task's own thread and no
//! wake-up of another. Everything else, errors included, is std's own call
//! on the pool.

// The files of this module (for contributors; the docs above are for users):
//
// | file | what it is |
// |---|---|
// | `file.rs` | `File`: every call made on the blocking pool |
// | `open_options.rs` | `OpenOptions`, with `open` made on the blocking pool |
// | `ops.rs` | the free functions, one hand-off each |
// | `read_dir.rs` | `ReadDir`: a directory's entries, read ahead in one hand-off |
// | `cached_open.rs` | opens answered from the lookup cache in place (`RESOLVE_CACHED`), local regular files only |
// | `nowait.rs` | reads answered from the page cache in place (`RWF_NOWAIT`), per file system |

mod cached_open;
mod file;
pub(crate) mod nowait;
mod open_options;
mod ops;
mod read_dir;

pub use file::File;
pub use open_options::OpenOptions;
pub use ops::{
    copy, create_dir, create_dir_all, metadata, read, read_dir, read_to_string, remove_dir,
    remove_dir_all, remove_file, rename, write,
};
pub use read_dir::ReadDir;
