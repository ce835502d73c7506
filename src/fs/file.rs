//! [`File`]: a [`std::fs::File`] whose every call is made on the blocking
//! pool.

use std::fs::Metadata;
use std::io::{self, IoSlice, IoSliceMut, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::nowait::{self, Cached};
use super::open_options::OpenOptions;
use crate::unblock;

/// An open file, like [`std::fs::File`], whose reads, writes, seeks,
/// syncs and metadata calls are each made on the blocking pool through
/// [`unblock`](crate::unblock), while the calling task parks.
///
/// `Read`, `Write` and `Seek` are implemented for `File` and `&File`, as
/// for std's. `read_to_end`, `read_to_string`, `read_exact` and
/// `write_all` make the whole transfer in one hand-off. Writes are not
/// buffered here (nor in std): wrap the file in a
/// [`BufWriter`](std::io::BufWriter) for many small writes.
#[derive(Debug)]
pub struct File {
    inner: std::fs::File,
    /// Set once the file refused a page-cache read (`fs::nowait`: its
    /// file system cannot honour `RWF_NOWAIT`): its reads go to the pool.
    nowait_refused: AtomicBool,
}

impl File {
    /// Opens a file for reading, like [`std::fs::File::open`].
    ///
    /// Inside a task, a regular file on a local file system whose path the
    /// kernel's lookup cache resolves is opened in place, with no hand-off
    /// to the pool (the module docs of [`fs`](super)).
    pub fn open<P: AsRef<Path>>(path: P) -> io::Result<File> {
        match super::cached_open::open_read(path.as_ref()) {
            Some(opened) => Ok(File::from_std(opened.file)),
            None => OpenOptions::new().read(true).open(path),
        }
    }

    /// Opens a file for writing, creating it or truncating it, like
    /// [`std::fs::File::create`].
    pub fn create<P: AsRef<Path>>(path: P) -> io::Result<File> {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
    }

    /// Options to open a file with ([`OpenOptions::new`]).
    pub fn options() -> OpenOptions {
        OpenOptions::new()
    }

    /// Wraps an open std file.
    pub fn from_std(file: std::fs::File) -> File {
        File {
            inner: file,
            nowait_refused: AtomicBool::new(false),
        }
    }

    /// The std file inside.
    pub fn into_std(self) -> std::fs::File {
        self.inner
    }

    /// Flushes data and metadata to the device, like
    /// [`std::fs::File::sync_all`].
    pub fn sync_all(&self) -> io::Result<()> {
        unblock(|| self.inner.sync_all())
    }

    /// Flushes data to the device, like [`std::fs::File::sync_data`].
    pub fn sync_data(&self) -> io::Result<()> {
        unblock(|| self.inner.sync_data())
    }

    /// Truncates or extends the file to `size` bytes, like
    /// [`std::fs::File::set_len`].
    pub fn set_len(&self, size: u64) -> io::Result<()> {
        unblock(|| self.inner.set_len(size))
    }

    /// The file's metadata, like [`std::fs::File::metadata`].
    pub fn metadata(&self) -> io::Result<Metadata> {
        unblock(|| self.inner.metadata())
    }
}

impl From<std::fs::File> for File {
    fn from(file: std::fs::File) -> File {
        File::from_std(file)
    }
}

impl From<File> for std::fs::File {
    fn from(file: File) -> std::fs::File {
        file.into_std()
    }
}

/// Inside a task, what the page cache holds for a read of `len` bytes into
/// `iov` (`fs::nowait`), read in place; `None` when the read must go to
/// the pool (outside a task the call runs in place anyway, as std's), or
/// the file refused such reads before (`refused`, set here when it does).
///
/// # Safety
///
/// As [`nowait::read_cached`].
unsafe fn cached(
    f: &std::fs::File,
    refused: &AtomicBool,
    iov: *const libc::iovec,
    cnt: usize,
    len: usize,
) -> Option<usize> {
    crate::runtime::context::current_task_ptr()?;
    if refused.load(Ordering::Relaxed) {
        return None;
    }
    let cnt = libc::c_int::try_from(cnt).ok()?;
    // SAFETY: the caller's contract.
    match unsafe { nowait::read_cached(f.as_raw_fd(), iov, cnt, len) } {
        Cached::Read(n) => Some(n),
        Cached::Miss => None,
        Cached::Refused => {
            refused.store(true, Ordering::Relaxed);
            None
        }
    }
}

impl Read for &File {
    /// Inside a task, a read of at most 64 KiB that the page cache can
    /// answer (even in part) is answered in place, possibly short, as
    /// `read(2)` may be; otherwise the read is made on the blocking pool.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let f = &self.inner;
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: one entry naming `buf`, writable for its length.
        if let Some(n) = unsafe { cached(f, &self.nowait_refused, &iov, 1, buf.len()) } {
            return Ok(n);
        }
        unblock(|| (&*f).read(buf))
    }

    /// As [`read`](Read::read), for several buffers.
    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        let f = &self.inner;
        let len = bufs.iter().map(|b| b.len()).sum();
        // SAFETY: `IoSliceMut` has `iovec`'s layout on Unix (std documents
        // it as ABI-compatible), each naming writable memory of its length.
        if let Some(n) = unsafe {
            cached(
                f,
                &self.nowait_refused,
                bufs.as_ptr().cast(),
                bufs.len(),
                len,
            )
        } {
            return Ok(n);
        }
        unblock(|| (&*f).read_vectored(bufs))
    }

    fn read_to_end(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let f = &self.inner;
        unblock(|| (&*f).read_to_end(buf))
    }

    fn read_to_string(&mut self, buf: &mut String) -> io::Result<usize> {
        let f = &self.inner;
        unblock(|| (&*f).read_to_string(buf))
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let f = &self.inner;
        unblock(|| (&*f).read_exact(buf))
    }
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        (&*self).read_vectored(bufs)
    }

    fn read_to_end(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        (&*self).read_to_end(buf)
    }

    fn read_to_string(&mut self, buf: &mut String) -> io::Result<usize> {
        (&*self).read_to_string(buf)
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        (&*self).read_exact(buf)
    }
}

impl Write for &File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let f = &self.inner;
        unblock(|| (&*f).write(buf))
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let f = &self.inner;
        unblock(|| (&*f).write_vectored(bufs))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let f = &self.inner;
        unblock(|| (&*f).write_all(buf))
    }

    /// A file has no user-space buffer to flush (as std's): nothing to do.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (&*self).write_vectored(bufs)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        (&*self).write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        (&*self).flush()
    }
}

impl Seek for &File {
    /// Made on the blocking pool too: on most file systems it only moves
    /// the offset, but on network and FUSE ones it may ask the server for
    /// the file's size.
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let f = &self.inner;
        unblock(|| (&*f).seek(pos))
    }
}

impl Seek for File {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        (&*self).seek(pos)
    }
}

impl AsRawFd for File {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.as_raw_fd()
    }
}

impl AsFd for File {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

impl IntoRawFd for File {
    fn into_raw_fd(self) -> RawFd {
        self.inner.into_raw_fd()
    }
}
