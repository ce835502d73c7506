//! `gofer::fs`: every function and `File` method gives what std's gives,
//! errors included, inside a task (through the blocking pool) and on a
//! plain thread (in place).

use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use gofer::fs::{File, OpenOptions};
use gofer::Scheduler;

/// A fresh directory under the system's temporary one, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("gofer-fs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every listed function and method, checked against std on the same files.
fn round_trip(dir: &Path) {
    let sub = dir.join("a/b");
    gofer::fs::create_dir_all(&sub).unwrap();
    assert!(std::fs::metadata(&sub).unwrap().is_dir());
    gofer::fs::create_dir_all(&sub).unwrap(); // exists already: fine, as std

    // write / read / read_to_string / metadata
    let p = sub.join("one.txt");
    gofer::fs::write(&p, "hello, file").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"hello, file");
    assert_eq!(gofer::fs::read(&p).unwrap(), std::fs::read(&p).unwrap());
    assert_eq!(gofer::fs::read_to_string(&p).unwrap(), "hello, file");
    let (m, sm) = (
        gofer::fs::metadata(&p).unwrap(),
        std::fs::metadata(&p).unwrap(),
    );
    assert_eq!((m.len(), m.is_file()), (sm.len(), sm.is_file()));
    assert_eq!(m.modified().unwrap(), sm.modified().unwrap());

    // rename
    let q = sub.join("two.txt");
    gofer::fs::rename(&p, &q).unwrap();
    assert!(!p.exists() && q.exists());

    // read_dir
    std::fs::write(sub.join("three.txt"), b"3").unwrap();
    let mut ours: Vec<_> = gofer::fs::read_dir(&sub)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let mut std_: Vec<_> = std::fs::read_dir(&sub)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    ours.sort();
    std_.sort();
    assert_eq!(ours, std_);
    assert_eq!(ours, vec!["three.txt", "two.txt"]);

    // File: create, write, seek, read, set_len, sync_all, metadata
    let f_path = sub.join("file.bin");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&f_path)
        .unwrap();
    f.write_all(b"0123456789").unwrap();
    assert_eq!(f.write(b"ab").unwrap(), 2);
    f.flush().unwrap();
    assert_eq!(f.seek(SeekFrom::Start(3)).unwrap(), 3);
    let mut four = [0u8; 4];
    f.read_exact(&mut four).unwrap();
    assert_eq!(&four, b"3456");
    let mut one = [0u8; 1];
    assert_eq!(f.read(&mut one).unwrap(), 1);
    assert_eq!(&one, b"7");
    f.set_len(5).unwrap();
    f.sync_all().unwrap();
    assert_eq!(f.metadata().unwrap().len(), 5);
    assert_eq!(std::fs::read(&f_path).unwrap(), b"01234");
    assert_eq!(f.seek(SeekFrom::End(-2)).unwrap(), 3);
    let mut rest = Vec::new();
    f.read_to_end(&mut rest).unwrap();
    assert_eq!(rest, b"34");
    // Through `&File`, as std allows.
    (&f).seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    (&f).read_to_string(&mut s).unwrap();
    assert_eq!(s, "01234");
    (&f).write_all(b"5").unwrap();
    drop(f);
    assert_eq!(std::fs::read(&f_path).unwrap(), b"012345");

    // File::open, File::create, append, create_new
    let mut r = File::open(&f_path).unwrap();
    let mut all = Vec::new();
    r.read_to_end(&mut all).unwrap();
    assert_eq!(all, b"012345");
    let mut a = OpenOptions::new().append(true).open(&f_path).unwrap();
    a.write_all(b"67").unwrap();
    assert_eq!(std::fs::read(&f_path).unwrap(), b"01234567");
    let mut c = File::create(&f_path).unwrap();
    assert_eq!(std::fs::read(&f_path).unwrap(), b"", "create truncates");
    c.write_all(b"new").unwrap();
    assert_eq!(gofer::fs::read(&f_path).unwrap(), b"new");
    let e = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&f_path)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists);
    let fresh = sub.join("fresh");
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&fresh)
        .unwrap();
    assert!(fresh.exists());

    // copy: the bytes and the count, as std's
    let copied = sub.join("copied.txt");
    assert_eq!(gofer::fs::copy(&f_path, &copied).unwrap(), 3);
    assert_eq!(std::fs::read(&copied).unwrap(), b"new");

    // remove_file
    gofer::fs::remove_file(&q).unwrap();
    assert!(!q.exists());

    // create_dir, remove_dir, remove_dir_all
    let d = dir.join("made");
    gofer::fs::create_dir(&d).unwrap();
    assert!(std::fs::metadata(&d).unwrap().is_dir());
    assert_eq!(
        gofer::fs::create_dir(&d).unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    gofer::fs::remove_dir(&d).unwrap();
    assert!(!d.exists());
    assert_eq!(
        gofer::fs::remove_dir(&sub).unwrap_err().raw_os_error(),
        std::fs::remove_dir(&sub).unwrap_err().raw_os_error(),
        "a directory that is not empty"
    );
    gofer::fs::remove_dir_all(dir.join("a")).unwrap();
    assert!(!sub.exists() && !dir.join("a").exists());
}

/// Every error is std's, with std's kind.
fn errors(dir: &Path) {
    let missing = dir.join("missing");
    let kinds = [
        gofer::fs::read(&missing).unwrap_err().kind(),
        gofer::fs::read_to_string(&missing).unwrap_err().kind(),
        gofer::fs::metadata(&missing).unwrap_err().kind(),
        gofer::fs::read_dir(&missing).unwrap_err().kind(),
        gofer::fs::remove_file(&missing).unwrap_err().kind(),
        gofer::fs::remove_dir(&missing).unwrap_err().kind(),
        gofer::fs::remove_dir_all(&missing).unwrap_err().kind(),
        gofer::fs::create_dir(missing.join("in"))
            .unwrap_err()
            .kind(),
        gofer::fs::copy(&missing, dir.join("y")).unwrap_err().kind(),
        gofer::fs::rename(&missing, dir.join("x"))
            .unwrap_err()
            .kind(),
        File::open(&missing).unwrap_err().kind(),
        gofer::fs::write(missing.join("in/dir"), b"x")
            .unwrap_err()
            .kind(),
    ];
    assert!(kinds.iter().all(|k| *k == ErrorKind::NotFound), "{kinds:?}");
    assert_eq!(
        gofer::fs::read(&missing).unwrap_err().raw_os_error(),
        std::fs::read(&missing).unwrap_err().raw_os_error()
    );
    // Not valid UTF-8: std's InvalidData.
    let bad = dir.join("bad");
    std::fs::write(&bad, [0xff, 0xfe]).unwrap();
    assert_eq!(
        gofer::fs::read_to_string(&bad).unwrap_err().kind(),
        ErrorKind::InvalidData
    );
}

#[test]
fn every_fs_call_in_a_task_gives_what_std_gives() {
    let dir = TempDir::new("task");
    let sched = Scheduler::builder().min_threads(1).build().unwrap();
    let d = dir.0.clone();
    sched
        .spawn(move || {
            round_trip(&d);
            errors(&d);
        })
        .join()
        .unwrap();
    // The pool starts a thread only for a call handed to it (and keeps it
    // for the 10 s idle time).
    assert!(
        sched.stats().blocking_threads >= 1,
        "the calls went through the blocking pool"
    );
    sched.shutdown();
}

#[test]
fn every_fs_call_on_a_plain_thread_gives_what_std_gives() {
    let dir = TempDir::new("thread");
    round_trip(&dir.0);
    errors(&dir.0);
}
