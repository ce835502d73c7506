//! Reads of a regular file answered from the page cache in place
//! (`preadv2` with `RWF_NOWAIT`) inside a task: `gofer::fs::File`'s
//! `read`/`read_vectored`, and with `hooks` std's own `read`. They give the
//! bytes and file positions std gives on a plain thread, for a cached file,
//! a file dropped from the cache, a read at and across the end of the
//! file, and a pipe; and a cached read starts no blocking-pool thread.

use crate::common;

use std::io::{IoSliceMut, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use gofer::Scheduler;

fn temp_file(tag: &str, len: usize) -> (PathBuf, Vec<u8>) {
    let p = std::env::temp_dir().join(format!("gofer-nowait-{tag}-{}", std::process::id()));
    let data: Vec<u8> = (0..len).map(|i| (i * 7 % 253) as u8).collect();
    std::fs::write(&p, &data).unwrap();
    (p, data)
}

fn sched() -> Scheduler {
    Scheduler::builder().min_threads(1).build().unwrap()
}

/// Reads `path` in chunks of `chunk` bytes with `read`, recording each
/// result and the position after it: the trace std gives.
fn trace(f: &mut impl ReadSeek, chunk: usize) -> Vec<(usize, u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; chunk];
    loop {
        let n = f.read(&mut buf).unwrap();
        let pos = f.stream_position().unwrap();
        out.push((n, pos, buf[..n].to_vec()));
        if n == 0 {
            return out;
        }
    }
}

trait ReadSeek: Read + Seek {}
impl<T: Read + Seek> ReadSeek for T {}

/// The whole file read back from a trace.
fn joined(t: &[(usize, u64, Vec<u8>)]) -> Vec<u8> {
    t.iter().flat_map(|(_, _, b)| b.iter().copied()).collect()
}

fn drop_from_cache(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: a valid descriptor; advice only.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

#[test]
fn gofer_file_reads_give_stds_bytes_and_positions_cached_or_not() {
    let (path, data) = temp_file("trace", 300 * 1024 + 123);
    let expected = trace(&mut std::fs::File::open(&path).unwrap(), 8192);
    assert_eq!(joined(&expected), data);
    let s = sched();
    for uncached in [false, true] {
        if uncached {
            drop_from_cache(&path);
        }
        let p = path.clone();
        let got = s
            .spawn(move || trace(&mut gofer::fs::File::open(&p).unwrap(), 8192))
            .join()
            .unwrap();
        // A cached read may be short where std's was whole (the rest not
        // cached): the bytes and the final position are what must agree.
        assert_eq!(joined(&got), data, "uncached: {uncached}");
        assert_eq!(got.last().unwrap().1, data.len() as u64);
        if !uncached {
            assert_eq!(got, expected, "a cached file reads as std's");
        }
    }
    // Across and at the end of the file, after a seek, vectored.
    let p = path.clone();
    let len = data.len() as u64;
    let (n1, pos1, n2, n3, vec_n, head) = s
        .spawn(move || {
            let mut f = gofer::fs::File::open(&p).unwrap();
            f.seek(SeekFrom::End(-100)).unwrap();
            let mut buf = [0u8; 4096];
            let n1 = f.read(&mut buf).unwrap();
            let pos1 = f.stream_position().unwrap();
            let n2 = f.read(&mut buf).unwrap();
            let n3 = f.read(&mut buf).unwrap();
            f.seek(SeekFrom::Start(0)).unwrap();
            let (mut a, mut b) = ([0u8; 10], [0u8; 20]);
            let vec_n = f
                .read_vectored(&mut [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)])
                .unwrap();
            let mut head = a.to_vec();
            head.extend_from_slice(&b);
            (n1, pos1, n2, n3, vec_n, head)
        })
        .join()
        .unwrap();
    assert_eq!((n1, pos1, n2, n3), (100, len, 0, 0));
    assert_eq!((vec_n, &head[..]), (30, &data[..30]));
    s.shutdown();
    let _ = std::fs::remove_file(&path);
}

#[test]
fn cached_reads_in_a_task_start_no_pool_thread() {
    let (path, data) = temp_file("nopool", 16 * 1024);
    std::fs::read(&path).unwrap(); // in the page cache
    let s = sched();
    // Opened here, so that only the reads run in the task.
    let f = gofer::fs::File::from_std(std::fs::File::open(&path).unwrap());
    let got = s
        .spawn(move || {
            let mut f = f;
            let mut all = Vec::new();
            let mut buf = [0u8; 1000];
            loop {
                let n = f.read(&mut buf).unwrap();
                if n == 0 {
                    return all;
                }
                all.extend_from_slice(&buf[..n]);
            }
        })
        .join()
        .unwrap();
    assert_eq!(got, data);
    assert_eq!(
        s.stats().blocking_threads,
        0,
        "a read the page cache answers went to the pool"
    );
    s.shutdown();
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_pipe_reads_as_before() {
    let (r, w) = std::io::pipe().unwrap();
    let s = sched();
    let reader = gofer::fs::File::from_std(std::fs::File::from(std::os::fd::OwnedFd::from(r)));
    let h = s.spawn(move || {
        let mut f = reader;
        let mut got = Vec::new();
        f.read_to_end(&mut got).unwrap();
        let mut one = [0u8; 1];
        (got, f.read(&mut one).unwrap())
    });
    let mut w = w;
    for i in 0..50u8 {
        w.write_all(&[i; 100]).unwrap();
    }
    drop(w);
    let (got, after) = h.join().unwrap();
    assert_eq!(got.len(), 5000);
    assert!(got
        .chunks(100)
        .enumerate()
        .all(|(i, c)| c.iter().all(|&b| b == i as u8)));
    assert_eq!(after, 0, "end of the pipe");
    s.shutdown();
}

/// With `hooks`, std's own reads of a file inside a task: the same bytes
/// and positions as on a plain thread, and no pool thread while cached.
#[cfg(feature = "hooks")]
#[test]
fn hooked_std_reads_give_stds_bytes_and_positions() {
    let (path, data) = temp_file("hooked", 200 * 1024 + 5);
    let expected = trace(&mut std::fs::File::open(&path).unwrap(), 8192);
    let s = sched();
    let f = std::fs::File::open(&path).unwrap();
    let got = s.spawn(move || trace(&mut { f }, 8192)).join().unwrap();
    assert_eq!(got, expected, "cached");
    assert_eq!(
        s.stats().blocking_threads,
        0,
        "a cached read went to the pool"
    );
    drop_from_cache(&path);
    let f = std::fs::File::open(&path).unwrap();
    let got = s.spawn(move || trace(&mut { f }, 8192)).join().unwrap();
    assert_eq!(joined(&got), data, "uncached");
    assert_eq!(got, expected, "a hooked read is never short before the end");
    // A read larger than what is left stops at the end, not short.
    let f = std::fs::File::open(&path).unwrap();
    let (n, pos) = s
        .spawn(move || {
            let mut f = f;
            f.seek(SeekFrom::End(-10)).unwrap();
            let mut buf = [0u8; 64];
            (f.read(&mut buf).unwrap(), f.stream_position().unwrap())
        })
        .join()
        .unwrap();
    assert_eq!((n, pos), (10, data.len() as u64));
    s.shutdown();
    let _ = std::fs::remove_file(&path);
}

/// Reads `path` in a task of `s` with `gofer::fs::File::read` (not
/// `read_to_end`, which goes to the pool whole), 1000 bytes at a time.
fn read_in_task(s: &Scheduler, path: &Path) -> Vec<u8> {
    let f = gofer::fs::File::from_std(std::fs::File::open(path).unwrap());
    s.spawn(move || {
        let mut f = f;
        let mut all = Vec::new();
        let mut buf = [0u8; 1000];
        loop {
            let n = f.read(&mut buf).unwrap();
            if n == 0 {
                return all;
            }
            all.extend_from_slice(&buf[..n]);
        }
    })
    .join()
    .unwrap()
}

/// A `/proc` (or `/sys`) file refuses `RWF_NOWAIT` (`EOPNOTSUPP`): that
/// stops the page-cache reads of that file only, not of the process. After
/// one, a cached regular file still reads in place: a scheduler that only
/// reads it starts no pool thread. In a child process: the fast path's
/// state is the process's.
#[test]
fn a_proc_file_does_not_switch_the_page_cache_reads_off_for_other_files() {
    common::in_child(
        module_path!(),
        "a_proc_file_does_not_switch_the_page_cache_reads_off_for_other_files",
        proc_file_then_regular_file,
    );
}

fn proc_file_then_regular_file() {
    let (path, data) = temp_file("after-proc", 16 * 1024);
    std::fs::read(&path).unwrap(); // in the page cache
    let procs = sched();
    for p in [
        "/proc/self/status",
        "/proc/self/stat",
        "/sys/kernel/mm/transparent_hugepage/enabled",
    ] {
        if Path::new(p).exists() {
            assert!(!read_in_task(&procs, Path::new(p)).is_empty(), "{p}");
        }
    }
    // The /proc reads went to the pool.
    assert!(procs.stats().blocking_threads > 0);
    procs.shutdown();
    let s = sched();
    assert_eq!(read_in_task(&s, &path), data);
    assert_eq!(
        s.stats().blocking_threads,
        0,
        "after a /proc read, a read the page cache answers went to the pool"
    );
    #[cfg(feature = "hooks")]
    {
        // std's own reads, through the hooks: the same, per descriptor.
        let procs = sched();
        let n = procs
            .spawn(|| {
                let mut f = std::fs::File::open("/proc/self/status").unwrap();
                let mut buf = [0u8; 1000];
                f.read(&mut buf).unwrap()
            })
            .join()
            .unwrap();
        assert!(n > 0);
        procs.shutdown();
        let s2 = sched();
        let f = std::fs::File::open(&path).unwrap();
        let got = s2.spawn(move || trace(&mut { f }, 1000)).join().unwrap();
        assert_eq!(joined(&got), data);
        assert_eq!(
            s2.stats().blocking_threads,
            0,
            "hooked: after a /proc read, a cached read went to the pool"
        );
        s2.shutdown();
    }
    s.shutdown();
    let _ = std::fs::remove_file(&path);
}

/// With `hooks`, std's positioned reads (`pread64`) and `libc::preadv` of a
/// file inside a task: the bytes std gives on a plain thread, at every
/// offset (across and past the end of the file included), cached or not,
/// and no pool thread while cached; a negative offset fails with `EINVAL`
/// as the call does (in `preadv2`, -1 would mean the file position).
#[cfg(feature = "hooks")]
#[test]
fn hooked_positioned_reads_give_stds_bytes() {
    use std::os::unix::fs::FileExt;
    let (path, data) = temp_file("pread", 100 * 1024 + 17);
    let len = data.len() as u64;
    let offsets = [0u64, 1, 4095, 4096, 50_000, len - 10, len, len + 5];
    let reads = move |f: &std::fs::File| -> Vec<Vec<u8>> {
        offsets
            .into_iter()
            .flat_map(|off| {
                [1usize, 100, 8192, 65_536].map(|n| {
                    let mut buf = vec![0u8; n];
                    let got = f.read_at(&mut buf, off).unwrap();
                    buf.truncate(got);
                    buf
                })
            })
            .collect()
    };
    let expected = reads(&std::fs::File::open(&path).unwrap());
    let s = sched();
    for uncached in [false, true] {
        if uncached {
            drop_from_cache(&path);
        }
        let f = std::fs::File::open(&path).unwrap();
        let got = s.spawn(move || reads(&f)).join().unwrap();
        assert_eq!(got, expected, "uncached: {uncached}");
        if !uncached {
            assert_eq!(
                s.stats().blocking_threads,
                0,
                "a cached pread went to the pool"
            );
        }
    }
    let f = std::fs::File::open(&path).unwrap();
    let (vec_n, head, tail, einval) = s
        .spawn(move || {
            let (mut a, mut b) = ([0u8; 10], [0u8; 20]);
            let iov = [
                libc::iovec {
                    iov_base: a.as_mut_ptr().cast(),
                    iov_len: a.len(),
                },
                libc::iovec {
                    iov_base: b.as_mut_ptr().cast(),
                    iov_len: b.len(),
                },
            ];
            // SAFETY: two live buffers of the lengths given.
            let n = unsafe { libc::preadv(f.as_raw_fd(), iov.as_ptr(), 2, 5) };
            let mut one = [0u8; 1];
            // SAFETY: a live one-byte buffer.
            let r = unsafe { libc::pread(f.as_raw_fd(), one.as_mut_ptr().cast(), 1, -1) };
            let e = std::io::Error::last_os_error().raw_os_error();
            (n, a, b, (r, e))
        })
        .join()
        .unwrap();
    assert_eq!(
        (vec_n, &head[..], &tail[..]),
        (30, &data[5..15], &data[15..35])
    );
    assert_eq!(einval, (-1, Some(libc::EINVAL)));
    s.shutdown();
    let _ = std::fs::remove_file(&path);
}

/// With `hooks`, small buffered writes of a file inside a task (`write`,
/// `pwrite64`, `pwritev`) leave the bytes and positions a plain thread's
/// would, and (on a file system that refuses `RWF_NOWAIT` for buffered
/// writes, as ext4 does, or takes it and finds nothing to wait for) start
/// no pool thread; a file opened `O_DSYNC` writes on the pool.
#[cfg(feature = "hooks")]
#[test]
fn hooked_buffered_writes_give_stds_bytes_in_place() {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let path = std::env::temp_dir().join(format!("gofer-nowait-pwrite-{}", std::process::id()));
    let s = sched();
    let writes = |f: &mut std::fs::File| {
        f.write_all(&[1u8; 5000]).unwrap();
        f.write_at(&[2u8; 100], 10).unwrap();
        let (a, b) = ([3u8; 7], [4u8; 9]);
        let iov = [
            libc::iovec {
                iov_base: a.as_ptr() as *mut _,
                iov_len: a.len(),
            },
            libc::iovec {
                iov_base: b.as_ptr() as *mut _,
                iov_len: b.len(),
            },
        ];
        // SAFETY: two live buffers of the lengths given.
        let n = unsafe { libc::pwritev(f.as_raw_fd(), iov.as_ptr(), 2, 6000) };
        f.write_all(&[5u8; 3]).unwrap();
        (n, f.stream_position().unwrap())
    };
    let expected = {
        let mut f = std::fs::File::create(&path).unwrap();
        let r = writes(&mut f);
        (r, std::fs::read(&path).unwrap())
    };
    let mut f = std::fs::File::create(&path).unwrap();
    let r = s.spawn(move || writes(&mut f)).join().unwrap();
    assert_eq!((r, std::fs::read(&path).unwrap()), expected);
    assert_eq!(
        s.stats().blocking_threads,
        0,
        "a small buffered write went to the pool"
    );
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DSYNC)
        .open(&path)
        .unwrap();
    s.spawn(move || f.write_all(&[6u8; 10]).unwrap())
        .join()
        .unwrap();
    assert!(
        s.stats().blocking_threads > 0,
        "an O_DSYNC write was made in place"
    );
    s.shutdown();
    let _ = std::fs::remove_file(&path);
}
