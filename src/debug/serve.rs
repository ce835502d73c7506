//! [`serve`]: a live debug page over HTTP, on a plain thread of its own.
//!
//! The server never runs on a Processer and never waits on one: it reads
//! the schedulers' counters ([`Scheduler::stats`](crate::Scheduler::stats))
//! and takes task dumps ([`dump`](super::dump)), both of which work while
//! every Processer is blocked, so the page answers exactly when it is
//! needed most. One connection is served at a time (it is a page for a
//! person, not a service), each with a short read timeout, and the thread
//! samples every scheduler's counters once a second into a minute of
//! history that the page draws.
//!
//! Stopping: dropping the [`DebugServer`] sets a flag and shuts the
//! listening socket down, which ends the thread's wait in `poll` at once;
//! the drop then joins the thread.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::runtime::shared::{self, Shared};
use crate::runtime::stats::Stats;

use super::{dump, Dump, TaskState};

/// How often the thread samples the counters, and how many samples the
/// page's charts show (a minute).
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
const HISTORY: usize = 60;

/// How long one request may take to arrive.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// The largest request head read (the page takes no body).
const MAX_REQUEST: usize = 8 * 1024;

/// A running debug page; stops (and joins its thread) when dropped.
///
/// See [`serve`].
#[derive(Debug)]
pub struct DebugServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    listener: Arc<TcpListener>,
    thread: Option<JoinHandle<()>>,
}

impl DebugServer {
    /// The address the page listens on (with the port the system chose,
    /// when `serve` was given port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for DebugServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Ends the thread's `poll` at once (the listener reports an error
        // or a hang-up). The descriptor stays open while either side holds
        // the `Arc`, so this never reaches a reused number.
        // SAFETY: `shutdown` on a descriptor this struct keeps open.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts a live debug page at `addr` (for example `"127.0.0.1:6060"`, or
/// port 0 for any free port: see [`DebugServer::local_addr`]), served by a
/// thread of its own (`gofer-debug`) until the returned [`DebugServer`] is
/// dropped.
///
/// The pages:
///
/// - `/`: an HTML page that refreshes itself every second: for each
///   scheduler, a chart per Processer of its busy share and queue depth
///   over the last minute, tasks by state, and the threads marked blocked
///   with the task and the call that blocks each;
/// - `/tasks`: the text task dump ([`dump`](super::dump));
/// - `/tasks.json`: the same as JSON;
/// - `/stats.json`: every scheduler's [`Stats`](crate::Stats), with the
///   minute of samples the charts draw.
///
/// # What it exposes
///
/// Everything a task dump shows: task names, the source locations where
/// tasks were spawned and wait, their stacks (function names and file
/// paths), thread names, and the schedulers' counters. No request can
/// change anything. Bind it to loopback (as the examples do) unless the
/// network it is reachable from may read all of that; there is no
/// authentication.
///
/// It works when every Processer is blocked: the thread is a plain one and
/// reads the runtime without waiting on it.
///
/// ```no_run
/// let page = gofer::debug::serve("127.0.0.1:0")?;
/// println!("debug page at http://{}/", page.local_addr());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn serve(addr: impl ToSocketAddrs) -> io::Result<DebugServer> {
    let listener = Arc::new(TcpListener::bind(addr)?);
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let thread = std::thread::Builder::new()
        .name("gofer-debug".into())
        .spawn({
            let listener = listener.clone();
            let stop = stop.clone();
            move || run(&listener, &stop)
        })?;
    Ok(DebugServer {
        addr,
        stop,
        listener,
        thread: Some(thread),
    })
}

/// One sample of one scheduler's counters.
struct Sample {
    /// Seconds since the Unix epoch.
    at: f64,
    stats: Stats,
}

/// The samples of every scheduler seen, by name, oldest first.
#[derive(Default)]
struct History {
    by_scheduler: Vec<(String, VecDeque<Sample>)>,
}

impl History {
    fn sample(&mut self) {
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let live: Vec<Arc<Shared>> = shared::all_schedulers();
        // Schedulers that are gone leave the page.
        self.by_scheduler
            .retain(|(name, _)| live.iter().any(|s| s.config.name == *name));
        for s in &live {
            let name = &s.config.name;
            let i = match self.by_scheduler.iter().position(|(n, _)| n == name) {
                Some(i) => i,
                None => {
                    self.by_scheduler.push((name.clone(), VecDeque::new()));
                    self.by_scheduler.len() - 1
                }
            };
            let q = &mut self.by_scheduler[i].1;
            if q.len() == HISTORY {
                q.pop_front();
            }
            q.push_back(Sample {
                at,
                stats: s.stats(),
            });
        }
    }
}

/// The thread: serve requests, sample once a second, until stopped.
fn run(listener: &TcpListener, stop: &AtomicBool) {
    let mut history = History::default();
    history.sample();
    let mut next_sample = Instant::now() + SAMPLE_EVERY;
    while !stop.load(Ordering::SeqCst) {
        let wait = next_sample.saturating_duration_since(Instant::now());
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = wait.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if stop.load(Ordering::SeqCst) {
            break;
        }
        if Instant::now() >= next_sample {
            history.sample();
            next_sample = Instant::now() + SAMPLE_EVERY;
        }
        if n > 0 && pfd.revents & libc::POLLIN != 0 {
            if let Ok((conn, _)) = listener.accept() {
                // A client that misbehaves costs its own connection only.
                let _ = handle(conn, &history);
            }
        } else if n > 0 {
            // The listener failed (shut down by the drop, or an error no
            // retry fixes): stop rather than spin.
            break;
        }
    }
}

/// Reads one request and answers it.
fn handle(mut conn: TcpStream, history: &History) -> io::Result<()> {
    conn.set_read_timeout(Some(READ_TIMEOUT))?;
    conn.set_write_timeout(Some(READ_TIMEOUT))?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        if buf.len() >= MAX_REQUEST {
            return respond(
                &mut conn,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"",
            );
        }
        let n = conn.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let mut words = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    if method != "GET" && method != "HEAD" {
        return respond(
            &mut conn,
            "405 Method Not Allowed",
            "text/plain",
            b"GET only\n",
        );
    }
    let path = target.split('?').next().unwrap_or("");
    let (ctype, body): (&str, Vec<u8>) = match path {
        "/" => ("text/html; charset=utf-8", PAGE.as_bytes().to_vec()),
        "/tasks" => ("text/plain; charset=utf-8", dump().to_string().into_bytes()),
        "/tasks.json" => ("application/json", tasks_json(&dump()).into_bytes()),
        "/stats.json" => ("application/json", stats_json(history).into_bytes()),
        _ => {
            return respond(&mut conn, "404 Not Found", "text/plain", b"not found\n");
        }
    };
    let body = if method == "HEAD" { &[][..] } else { &body[..] };
    respond(&mut conn, "200 OK", ctype, body)
}

fn respond(conn: &mut TcpStream, status: &str, ctype: &str, body: &[u8]) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    conn.write_all(body)?;
    conn.flush()
}

/// `s` as a JSON string literal.
fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn json_opt_str(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => json_str(out, s),
        None => out.push_str("null"),
    }
}

/// The task dump as JSON: `{"took_ms", "tasks": [...], "blocked_threads": [...]}`.
fn tasks_json(d: &Dump) -> String {
    let mut o = String::with_capacity(256 + d.tasks().len() * 256);
    let _ = write!(
        o,
        "{{\"took_ms\":{:.3},\"tasks\":[",
        d.took().as_secs_f64() * 1e3
    );
    for (i, t) in d.tasks().iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let _ = write!(o, "{{\"id\":{},\"name\":", t.id());
        json_opt_str(&mut o, t.name());
        o.push_str(",\"state\":");
        json_str(&mut o, state_name(t.state()));
        o.push_str(",\"waiting_on\":");
        json_opt_str(&mut o, t.waiting_on());
        match t.waited() {
            Some(w) => {
                let _ = write!(o, ",\"waited_ms\":{:.3}", w.as_secs_f64() * 1e3);
            }
            None => o.push_str(",\"waited_ms\":null"),
        }
        o.push_str(",\"spawned_at\":");
        json_opt_str(&mut o, t.spawned_at().map(|l| l.to_string()).as_deref());
        o.push_str(",\"thread\":");
        json_opt_str(&mut o, t.thread());
        o.push_str(",\"backtrace\":");
        json_opt_str(&mut o, t.backtrace());
        o.push('}');
    }
    o.push_str("],\"blocked_threads\":[");
    for (i, b) in d.blocked_threads().enumerate() {
        if i > 0 {
            o.push(',');
        }
        blocked_json(&mut o, b);
    }
    o.push_str("]}");
    o
}

fn blocked_json(o: &mut String, b: &super::BlockedThread) {
    o.push_str("{\"thread\":");
    json_str(o, b.thread());
    match b.task_id() {
        Some(id) => {
            let _ = write!(o, ",\"task_id\":{id}");
        }
        None => o.push_str(",\"task_id\":null"),
    }
    o.push_str(",\"task_name\":");
    json_opt_str(o, b.task_name());
    let _ = write!(
        o,
        ",\"blocked_ms\":{:.3},\"tasks_behind\":{}",
        b.blocked_for().as_secs_f64() * 1e3,
        b.tasks_behind()
    );
    o.push_str(",\"blocked_in\":");
    json_opt_str(o, b.blocked_in());
    o.push_str(",\"fix\":");
    json_opt_str(o, b.fix());
    o.push('}');
}

fn state_name(s: TaskState) -> &'static str {
    match s {
        TaskState::Running => "running",
        TaskState::Runnable => "runnable",
        TaskState::Parked => "parked",
        TaskState::New => "new",
    }
}

/// Every scheduler's current counters and history as JSON.
fn stats_json(history: &History) -> String {
    let mut o = String::with_capacity(4096);
    o.push_str("{\"schedulers\":[");
    let live = shared::all_schedulers();
    for (i, s) in live.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        o.push_str("{\"name\":");
        json_str(&mut o, &s.config.name);
        o.push_str(",\"now\":");
        stats_one(&mut o, &s.stats());
        o.push_str(",\"history\":[");
        let samples = history
            .by_scheduler
            .iter()
            .find(|(n, _)| *n == s.config.name)
            .map(|(_, q)| q);
        for (j, smp) in samples.into_iter().flatten().enumerate() {
            if j > 0 {
                o.push(',');
            }
            let _ = write!(o, "{{\"at\":{:.3},\"stats\":", smp.at);
            stats_one(&mut o, &smp.stats);
            o.push('}');
        }
        o.push_str("]}");
    }
    o.push_str("]}");
    o
}

/// One `Stats` as JSON (every counter, one object per Processer).
fn stats_one(o: &mut String, s: &Stats) {
    let _ = write!(
        o,
        "{{\"threads\":{},\"spawned\":{},\"completed\":{},\"alive\":{},\"blocked\":{},\
         \"blocked_detections\":{},\"tasks_behind_blocked\":{},\"blocked_with_tasks_behind\":{},\
         \"all_blocked\":{},\"tasks_queued_all_blocked\":{},\"tasks_rescued\":{},\
         \"cross_wakeups\":{},\"tasks_moved_again\":{},\"threads_started\":{},\
         \"threads_retired\":{},\"live_stacks\":{},\"timers\":{},\"blocking_busy\":{},\
         \"blocking_queued\":{},\
         \"blocking_threads\":{},\"io_driver\":\"{:?}\",\"io_driver_reason\":",
        s.threads,
        s.spawned,
        s.completed,
        s.alive,
        s.blocked,
        s.blocked_detections,
        s.tasks_behind_blocked,
        s.blocked_with_tasks_behind,
        s.all_blocked,
        s.tasks_queued_all_blocked,
        s.tasks_rescued,
        s.cross_wakeups,
        s.tasks_moved_again,
        s.threads_started,
        s.threads_retired,
        s.live_stacks,
        s.timers,
        s.blocking_busy,
        s.blocking_queued,
        s.blocking_threads,
        s.io_driver,
    );
    json_str(o, &s.io_driver_reason);
    o.push_str(",\"processers\":[");
    for (i, p) in s.processers.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let _ = write!(
            o,
            "{{\"id\":{},\"kind\":\"{}\",\"switches\":{},\"direct_switches\":{},\"queued\":{},\
             \"blocked\":{},\"tasks_behind\":{},\"running\":{},\"sleeping\":{},\"rescued\":{},\
             \"parks\":{},\"yields\":{},\"steals\":{},\"stolen_tasks\":{},\"next_slot_runs\":{},\
             \"remote_pushes\":{},\"reactor_polls\":{},\"local_queue_depth\":{},\
             \"remote_queue_depth\":{},\"pinned_queue_depth\":{},\"busy_ns\":{},\
             \"blocked_detections\":{},\"cross_wakeups\":{}}}",
            p.id,
            p.kind,
            p.switches,
            p.direct_switches,
            p.queued,
            p.blocked,
            p.tasks_behind,
            p.running,
            p.sleeping,
            p.rescued,
            p.parks,
            p.yields,
            p.steals,
            p.stolen_tasks,
            p.next_slot_runs,
            p.remote_pushes,
            p.reactor_polls,
            p.local_queue_depth,
            p.remote_queue_depth,
            p.pinned_queue_depth,
            p.busy.as_nanos(),
            p.blocked_detections,
            p.cross_wakeups,
        );
    }
    o.push_str("]}");
}

/// The page: plain HTML, a script that polls `/stats.json` and
/// `/tasks.json` every second and draws the charts on canvases. Nothing is
/// fetched from anywhere else.
const PAGE: &str = include_str!("page.html");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        let mut o = String::new();
        json_str(&mut o, "a\"b\\c\nd\u{1}");
        assert_eq!(o, "\"a\\\"b\\\\c\\nd\\u0001\"");
    }
}
