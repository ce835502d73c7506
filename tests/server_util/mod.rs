//! Helpers shared by the `*_server_demo` tests: build an example server,
//! start it on a free port, talk to it, and kill it (or stop it with a
//! signal and see it exit cleanly).
//!
//! An example's binary is `target/<profile>/examples/<name>`, next to the
//! test's own directory (`target/<profile>/deps`). A full `cargo test`
//! builds examples before it runs tests; `cargo test --test NAME` does not,
//! so the binary is built first (a no-op when it is up to date), as
//! `tests/examples/stress_demo.rs` does.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// A generous bound for anything that should take milliseconds: the tests
/// run on a loaded 2-core machine.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// The target directory and, for a cross layout, the target triple, found
/// from where this test binary sits.
fn layout(profile_dir: &Path) -> Option<(PathBuf, Option<String>)> {
    let up = profile_dir.parent()?;
    if up.join("CACHEDIR.TAG").exists() {
        return Some((up.to_path_buf(), None));
    }
    let up2 = up.parent()?;
    if up2.join("CACHEDIR.TAG").exists() {
        let triple = up.file_name()?.to_str()?.to_string();
        return Some((up2.to_path_buf(), Some(triple)));
    }
    None
}

/// The path of example `name`, built with this test's profile.
pub fn example_bin(name: &'static str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<&'static str, PathBuf>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    if let Some(p) = built.get(name) {
        return p.clone();
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary sits in target/<profile>/deps");
    let bin = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_string(),
        Some(p) => p.to_string(),
    };
    let mut build = Command::new(env!("CARGO"));
    build
        .args(["build", "--quiet", "--example", name, "--profile"])
        .arg(&profile)
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"));
    if let Some((target_dir, triple)) = layout(profile_dir) {
        build.arg("--target-dir").arg(target_dir);
        if let Some(t) = triple {
            build.arg("--target").arg(t);
        }
    }
    let status = build.status();
    assert!(
        bin.exists(),
        "{} is missing and `cargo build --example {name}` did not make it ({status:?})",
        bin.display()
    );
    built.insert(name, bin.clone());
    bin
}

/// Runs example `name` with `args` to completion (for arguments it must
/// refuse).
pub fn run(name: &'static str, args: &[&str]) -> Output {
    Command::new(example_bin(name))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the example runs")
}

/// Runs example `name` with `args` to completion, as [`run`] does, but
/// kills it and fails the test if it runs longer than [`PATIENCE`].
pub fn run_within(name: &'static str, args: &[&str]) -> Output {
    let child = Command::new(example_bin(name))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the example starts");
    let pid = libc::pid_t::try_from(child.id()).expect("a pid fits a pid_t");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(PATIENCE) {
        Ok(out) => out.expect("the example's output"),
        Err(_) => {
            // SAFETY: kill with the pid of our child, not yet reaped (its
            // waiter has not returned).
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("{name} {args:?} still ran after {PATIENCE:?}");
        }
    }
}

/// A running example server, killed when dropped.
pub struct Server {
    child: Child,
    /// Where it listens, from its first line of output.
    pub addr: SocketAddr,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

impl Server {
    /// Starts example `name` on `127.0.0.1:0` with 2 threads and the extra
    /// `args`, and waits for its `listening on ADDR` line.
    pub fn start(name: &'static str, args: &[&str]) -> Server {
        let mut child = Command::new(example_bin(name))
            .args(["--addr", "127.0.0.1:0", "--threads", "2"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the server starts");
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().expect("piped stdout");
        let stdout = Arc::new(Mutex::new(String::new()));
        let out_sink = stdout.clone();
        let out_reader = std::thread::spawn(move || {
            let mut lines = BufReader::new(out).lines();
            let _ = tx.send(lines.next());
            // Keep draining, so the server never blocks on a full pipe.
            for line in lines.map_while(Result::ok) {
                let mut s = out_sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let err = child.stderr.take().expect("piped stderr");
        let sink = stderr.clone();
        let err_reader = std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let first = match rx.recv_timeout(PATIENCE) {
            Ok(Some(Ok(line))) => line,
            other => {
                let _ = child.kill();
                panic!(
                    "{name} printed no first line within {PATIENCE:?}: {other:?}; stderr:\n{}",
                    stderr.lock().unwrap()
                );
            }
        };
        let addr = first
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("{name}: first line is not `listening on ADDR`: {first:?}"));
        Server {
            child,
            addr,
            stdout,
            stderr,
            readers: vec![out_reader, err_reader],
        }
    }

    /// A new connection, with [`PATIENCE`] as its read and write timeouts.
    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect to the server");
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s.set_write_timeout(Some(PATIENCE)).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails the test if the server has exited.
    pub fn assert_alive(&mut self) {
        let status = self.child.try_wait().expect("try_wait");
        assert!(
            status.is_none(),
            "the server exited ({status:?}); stderr:\n{}",
            self.stderr.lock().unwrap()
        );
    }

    /// Checks the server is still running, kills it, and returns what it
    /// wrote on stderr (which must not report a panic).
    pub fn stop(mut self) -> String {
        self.assert_alive();
        let _ = self.child.kill();
        let _ = self.child.wait();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let stderr = self.stderr.lock().unwrap().clone();
        assert!(
            !stderr.contains("panicked"),
            "the server panicked:\n{stderr}"
        );
        stderr
    }
}

impl Server {
    /// Sends `signal` to the running server and waits, at most
    /// [`PATIENCE`], for it to exit. Returns its exit status and what it
    /// wrote after its first line on stdout, and on stderr (which must not
    /// report a panic).
    pub fn terminate(mut self, signal: i32) -> (std::process::ExitStatus, String, String) {
        self.assert_alive();
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid fits a pid_t");
        // SAFETY: kill with a live child's pid and a valid signal number.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill");
        let deadline = std::time::Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the server did not exit within {PATIENCE:?} of signal {signal}; stderr:\n{}",
                self.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        // The pipes closed with the process: the readers finish.
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let out = self.stdout.lock().unwrap().clone();
        let err = self.stderr.lock().unwrap().clone();
        assert!(!err.contains("panicked"), "the server panicked:\n{err}");
        (status, out, err)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads until the peer closes; fails if that takes longer than
/// [`PATIENCE`] (the stream's timeouts), accepting a reset as a close.
pub fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return out,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("waiting for the server to close: {e} (read so far: {out:?})"),
        }
    }
}

/// Writes `bytes` and flushes.
pub fn send(s: &mut TcpStream, bytes: &[u8]) {
    s.write_all(bytes).expect("write to the server");
    s.flush().unwrap();
}

/// Checks that `args` make example `name` exit with code 2 and an error on
/// stderr mentioning `says`, without a panic.
pub fn assert_refused(name: &'static str, args: &[&str], says: &str) {
    let out = run(name, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{name} {args:?} should exit 2\n--- stdout\n{}\n--- stderr\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains("error") && stderr.contains(says),
        "{name} {args:?}: expected an error mentioning `{says}`, got:\n{stderr}"
    );
    assert!(
        !stderr.contains("panicked"),
        "{name} {args:?} panicked:\n{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "{name} {args:?} printed on stdout:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
