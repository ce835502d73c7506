//! The free functions of [`fs`](super), one hand-off to the blocking pool
//! each: the whole of std's call runs on the pool thread. `read` and
//! `read_to_string` of a small file the kernel's caches hold make none
//! (`cached_open.rs`, `nowait.rs`).

use std::fs::Metadata;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::path::Path;

use super::cached_open::{self, Opened};
use super::nowait::{self, Cached};
use super::read_dir::ReadDir;
use crate::unblock;

/// Reads a whole file into a vector, like [`std::fs::read`].
///
/// Inside a task, a regular file of at most 64 KiB on a local file system,
/// whose path the kernel's lookup cache resolves and whose pages the page
/// cache holds, is opened and read in place, with no hand-off to the pool
/// (the module docs of [`fs`](super)).
pub fn read<P: AsRef<Path>>(path: P) -> io::Result<Vec<u8>> {
    let path = path.as_ref();
    match cached_open::open_read(path) {
        Some(opened) => read_opened(opened),
        None => unblock(|| std::fs::read(path)),
    }
}

/// Reads a whole file into a string, like [`std::fs::read_to_string`]
/// (in place as [`read`] is, where it can).
pub fn read_to_string<P: AsRef<Path>>(path: P) -> io::Result<String> {
    let path = path.as_ref();
    match cached_open::open_read(path) {
        Some(opened) => String::from_utf8(read_opened(opened)?).map_err(|_| {
            // std's own error for this case (`io::Error::INVALID_UTF8`).
            io::Error::new(
                io::ErrorKind::InvalidData,
                "stream did not contain valid UTF-8",
            )
        }),
        None => unblock(|| std::fs::read_to_string(path)),
    }
}

/// The rest of [`read`] for a file opened in place: what the page cache
/// holds is read in place, up to the end of the file; a file larger than
/// [`nowait::IN_PLACE_MAX`], a page not cached or a file that grew past
/// its size is finished on the pool, from where the reads in place left
/// the file position, as std's `read_to_end` goes on.
fn read_opened(Opened { mut file, size }: Opened) -> io::Result<Vec<u8>> {
    let mut buf: Vec<u8> = Vec::new();
    if size <= nowait::IN_PLACE_MAX as u64 {
        // One byte more than the size, so that the read which finds the
        // end of the file has room, as std's probe read does.
        buf.try_reserve_exact(size as usize + 1)?;
        loop {
            let spare = buf.capacity() - buf.len();
            if spare == 0 {
                break;
            }
            let iov = libc::iovec {
                // SAFETY: `len <= capacity`, so the pointer is inside (or
                // one past the end of) the allocation.
                iov_base: unsafe { buf.as_mut_ptr().add(buf.len()) }.cast(),
                iov_len: spare,
            };
            // SAFETY: one entry naming the vector's spare capacity,
            // writable for `spare` bytes.
            match unsafe { nowait::read_cached(file.as_raw_fd(), &iov, 1, spare) } {
                Cached::Read(0) => return Ok(buf),
                // SAFETY: the kernel wrote `n <= spare` bytes after `len`.
                Cached::Read(n) => unsafe { buf.set_len(buf.len() + n) },
                Cached::Miss | Cached::Refused => break,
            }
        }
    }
    unblock(move || file.read_to_end(&mut buf).map(|_| buf))
}

/// Writes a whole file, creating it or truncating it first, like
/// [`std::fs::write`].
pub fn write<P: AsRef<Path>, C: AsRef<[u8]>>(path: P, contents: C) -> io::Result<()> {
    let (path, contents) = (path.as_ref(), contents.as_ref());
    unblock(|| std::fs::write(path, contents))
}

/// The metadata of a path, following symbolic links, like
/// [`std::fs::metadata`].
pub fn metadata<P: AsRef<Path>>(path: P) -> io::Result<Metadata> {
    let path = path.as_ref();
    unblock(|| std::fs::metadata(path))
}

/// The entries of a directory, like [`std::fs::read_dir`]: all of them are
/// read in one hand-off, and the iterator gives them out without blocking.
pub fn read_dir<P: AsRef<Path>>(path: P) -> io::Result<ReadDir> {
    let path = path.as_ref();
    unblock(|| std::fs::read_dir(path).map(|d| ReadDir::new(d.collect())))
}

/// Creates a directory and every missing parent, like
/// [`std::fs::create_dir_all`].
pub fn create_dir_all<P: AsRef<Path>>(path: P) -> io::Result<()> {
    let path = path.as_ref();
    unblock(|| std::fs::create_dir_all(path))
}

/// Creates a directory (its parent must exist), like
/// [`std::fs::create_dir`].
pub fn create_dir<P: AsRef<Path>>(path: P) -> io::Result<()> {
    let path = path.as_ref();
    unblock(|| std::fs::create_dir(path))
}

/// Removes an empty directory, like [`std::fs::remove_dir`].
pub fn remove_dir<P: AsRef<Path>>(path: P) -> io::Result<()> {
    let path = path.as_ref();
    unblock(|| std::fs::remove_dir(path))
}

/// Removes a directory and everything in it, like
/// [`std::fs::remove_dir_all`], in one hand-off.
pub fn remove_dir_all<P: AsRef<Path>>(path: P) -> io::Result<()> {
    let path = path.as_ref();
    unblock(|| std::fs::remove_dir_all(path))
}

/// Copies a file's contents and permissions to another, replacing it,
/// like [`std::fs::copy`]; returns the number of bytes copied.
pub fn copy<P: AsRef<Path>, Q: AsRef<Path>>(from: P, to: Q) -> io::Result<u64> {
    let (from, to) = (from.as_ref(), to.as_ref());
    unblock(|| std::fs::copy(from, to))
}

/// Removes a file, like [`std::fs::remove_file`].
pub fn remove_file<P: AsRef<Path>>(path: P) -> io::Result<()> {
    let path = path.as_ref();
    unblock(|| std::fs::remove_file(path))
}

/// Renames a file or directory, replacing `to` if it exists, like
/// [`std::fs::rename`].
pub fn rename<P: AsRef<Path>, Q: AsRef<Path>>(from: P, to: Q) -> io::Result<()> {
    let (from, to) = (from.as_ref(), to.as_ref());
    unblock(|| std::fs::rename(from, to))
}
