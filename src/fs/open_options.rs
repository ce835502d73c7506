//! [`OpenOptions`]: std's options, with `open` made on the blocking pool.

use std::io;
use std::path::Path;

use super::file::File;
use crate::unblock;

/// How to open a file, like [`std::fs::OpenOptions`]; [`open`](Self::open)
/// makes the call on the blocking pool.
#[derive(Clone, Debug)]
pub struct OpenOptions(std::fs::OpenOptions);

impl OpenOptions {
    /// No access at all yet; set at least `read`, `write` or `append`.
    pub fn new() -> OpenOptions {
        OpenOptions(std::fs::OpenOptions::new())
    }

    /// Opens for reading.
    pub fn read(&mut self, read: bool) -> &mut Self {
        self.0.read(read);
        self
    }

    /// Opens for writing.
    pub fn write(&mut self, write: bool) -> &mut Self {
        self.0.write(write);
        self
    }

    /// Opens for appending: every write goes to the end.
    pub fn append(&mut self, append: bool) -> &mut Self {
        self.0.append(append);
        self
    }

    /// Truncates the file to length 0 on opening (needs `write`).
    pub fn truncate(&mut self, truncate: bool) -> &mut Self {
        self.0.truncate(truncate);
        self
    }

    /// Creates the file if it does not exist (needs `write` or `append`).
    pub fn create(&mut self, create: bool) -> &mut Self {
        self.0.create(create);
        self
    }

    /// Creates the file, failing with `AlreadyExists` if it exists.
    pub fn create_new(&mut self, create_new: bool) -> &mut Self {
        self.0.create_new(create_new);
        self
    }

    /// Opens `path` with these options, like
    /// [`std::fs::OpenOptions::open`].
    pub fn open<P: AsRef<Path>>(&self, path: P) -> io::Result<File> {
        let (opts, path) = (&self.0, path.as_ref());
        unblock(|| opts.open(path)).map(File::from_std)
    }
}

impl Default for OpenOptions {
    /// [`OpenOptions::new`].
    fn default() -> Self {
        OpenOptions::new()
    }
}

impl std::os::unix::fs::OpenOptionsExt for OpenOptions {
    fn mode(&mut self, mode: u32) -> &mut Self {
        self.0.mode(mode);
        self
    }

    fn custom_flags(&mut self, flags: i32) -> &mut Self {
        self.0.custom_flags(flags);
        self
    }
}
