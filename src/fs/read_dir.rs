//! [`ReadDir`]: a directory's entries, read ahead in one hand-off.

use std::fs::DirEntry;
use std::io;

/// The entries of a directory, from [`read_dir`](super::read_dir): std's
/// own [`DirEntry`] values (and the errors met while reading, in place),
/// read in full when the directory was opened, so iterating never blocks.
///
/// A `DirEntry`'s `metadata` is a system call made in place; use
/// [`fs::metadata`](super::metadata) on its `path()` to make it on the
/// blocking pool instead.
#[derive(Debug)]
pub struct ReadDir {
    entries: std::vec::IntoIter<io::Result<DirEntry>>,
}

impl ReadDir {
    pub(super) fn new(entries: Vec<io::Result<DirEntry>>) -> ReadDir {
        ReadDir {
            entries: entries.into_iter(),
        }
    }
}

impl Iterator for ReadDir {
    type Item = io::Result<DirEntry>;

    fn next(&mut self) -> Option<Self::Item> {
        self.entries.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.entries.size_hint()
    }
}

impl ExactSizeIterator for ReadDir {}
