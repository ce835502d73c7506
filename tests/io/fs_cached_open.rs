//! Opens answered from the kernel's lookup cache in place
//! (`openat2` with `RESOLVE_CACHED`) inside a task: `gofer::fs::read`,
//! `read_to_string` and `File::open` of a cached regular file make no
//! hand-off to the blocking pool, and every other kind of path (a FIFO, a
//! directory, a missing file, `/proc`, a large file, a file dropped from
//! the page cache, invalid UTF-8, a NUL byte) gives what std gives on a
//! plain thread.

use crate::common;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use gofer::Scheduler;

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gofer-cached-open-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn sched() -> Scheduler {
    Scheduler::builder().min_threads(1).build().unwrap()
}

fn status_flags(f: &impl AsRawFd) -> libc::c_int {
    // SAFETY: an open descriptor; `F_GETFL` reads its status flags.
    unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) }
}

#[test]
fn small_cached_files_open_and_read_with_no_pool_thread() {
    let dir = temp_dir("nopool");
    let bin = dir.join("data.bin");
    let text = dir.join("text.txt");
    let data: Vec<u8> = (0..4000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&bin, &data).unwrap();
    std::fs::write(&text, "hello, cache\n").unwrap();
    let std_flags = status_flags(&std::fs::File::open(&bin).unwrap());
    let s = sched();
    let (b, t) = (bin.clone(), text.clone());
    let (read, string, opened, flags) = s
        .spawn(move || {
            let read = gofer::fs::read(&b).unwrap();
            let string = gofer::fs::read_to_string(&t).unwrap();
            let mut f = gofer::fs::File::open(&b).unwrap();
            let flags = status_flags(&f);
            let mut opened = Vec::new();
            let mut buf = [0u8; 1024];
            loop {
                let n = f.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                opened.extend_from_slice(&buf[..n]);
            }
            (read, string, opened, flags)
        })
        .join()
        .unwrap();
    assert_eq!(read, data);
    assert_eq!(string, "hello, cache\n");
    assert_eq!(opened, data);
    assert_eq!(flags, std_flags, "the file's status flags are std's");
    assert_eq!(
        s.stats().blocking_threads,
        0,
        "a cached open or read went to the pool"
    );
    s.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a whole-file read gave, in a form both sides compare by.
fn outcome<T: std::fmt::Debug>(r: std::io::Result<T>) -> String {
    match r {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => format!("Err({:?}, {:?}, {e})", e.kind(), e.raw_os_error()),
    }
}

#[test]
fn whole_file_reads_give_stds_answers_for_every_kind_of_path() {
    let dir = temp_dir("kinds");
    let small = dir.join("small");
    std::fs::write(&small, b"small file").unwrap();
    let empty = dir.join("empty");
    std::fs::write(&empty, b"").unwrap();
    let large = dir.join("large");
    let big: Vec<u8> = (0..300 * 1024 + 17u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(&large, &big).unwrap();
    let uncached = dir.join("uncached");
    std::fs::write(&uncached, vec![9u8; 20_000]).unwrap();
    let bad_utf8 = dir.join("bad-utf8");
    std::fs::write(&bad_utf8, [b'a', 0xff, 0xfe, b'b']).unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&small, &link).unwrap();
    let dangling = dir.join("dangling");
    std::os::unix::fs::symlink(dir.join("nowhere"), &dangling).unwrap();
    let paths: Vec<PathBuf> = vec![
        small,
        empty,
        large,
        uncached.clone(),
        bad_utf8,
        link,
        dangling,
        dir.clone(),
        dir.join("missing"),
        dir.join("small/under-a-file"),
        PathBuf::from("/proc/self/cmdline"),
        PathBuf::from("with\0nul"),
    ];
    let drop_cache = |p: &Path| {
        let f = std::fs::File::open(p).unwrap();
        // SAFETY: a valid descriptor; advice only.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    };
    let on_thread: Vec<(String, String)> = paths
        .iter()
        .map(|p| {
            drop_cache(&uncached);
            (
                outcome(std::fs::read(p)),
                outcome(std::fs::read_to_string(p)),
            )
        })
        .collect();
    let s = sched();
    let ps = paths.clone();
    let in_task: Vec<(String, String)> = s
        .spawn(move || {
            ps.iter()
                .map(|p| {
                    drop_cache(&uncached);
                    (
                        outcome(gofer::fs::read(p)),
                        outcome(gofer::fs::read_to_string(p)),
                    )
                })
                .collect()
        })
        .join()
        .unwrap();
    for ((p, std), gofer) in paths.iter().zip(&on_thread).zip(&in_task) {
        assert_eq!(gofer, std, "{p:?}");
    }
    s.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A FIFO is not opened in place: std's `read` opens it on the pool and
/// waits there for a writer, whose own open waits for that reader. An
/// open in place (even a non-blocking one, closed again) would release
/// the writer's open early, and its write would find no reader.
#[test]
fn a_fifo_waits_for_its_writer_as_std_does() {
    common::in_child(
        module_path!(),
        "a_fifo_waits_for_its_writer_as_std_does",
        || {
            let dir = temp_dir("fifo");
            let fifo = dir.join("fifo");
            let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            let s = sched();
            let f = fifo.clone();
            let reader = s.spawn(move || gofer::fs::read(&f));
            let f = fifo.clone();
            let writer = std::thread::spawn(move || {
                use std::io::Write;
                // Blocks until the reader has the FIFO open.
                let mut w = std::fs::OpenOptions::new().write(true).open(&f)?;
                w.write_all(b"through the fifo")
            });
            writer.join().unwrap().expect("the writer found its reader");
            assert_eq!(reader.join().unwrap().unwrap(), b"through the fifo");
            s.shutdown();
            let _ = std::fs::remove_dir_all(&dir);
        },
    );
}
