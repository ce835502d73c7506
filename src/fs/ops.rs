//! The free functions of [`fs`](super), one hand-off to the blocking pool
//! each: the whole of std's call runs on the pool thread.

use std::fs::Metadata;
use std::io;
use std::path::Path;

use super::read_dir::ReadDir;
use crate::unblock;

/// Reads a whole file into a vector, like [`std::fs::read`].
pub fn read<P: AsRef<Path>>(path: P) -> io::Result<Vec<u8>> {
    let path = path.as_ref();
    unblock(|| std::fs::read(path))
}

/// Reads a whole file into a string, like [`std::fs::read_to_string`].
pub fn read_to_string<P: AsRef<Path>>(path: P) -> io::Result<String> {
    let path = path.as_ref();
    unblock(|| std::fs::read_to_string(path))
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
