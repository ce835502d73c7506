//! A key-value server speaking the Redis protocol (RESP2) on gofer: one
//! task per connection, written in plain blocking style. `redis-cli` and
//! `redis-benchmark` work against it.
//!
//! ```sh
//! cargo run --release --example kv_server -- --addr 127.0.0.1:6380 --threads 2
//! redis-cli -p 6380 set greeting hello
//! redis-benchmark -p 6380 -t set,get,incr,lpush,lpop -n 200000 -q
//! ```
//!
//! Commands:
//!
//! - strings: `SET key value [NX|XX] [GET] [EX s|PX ms|KEEPTTL]`, `GET`,
//!   `INCR`, `DECR`, `INCRBY`, `DECRBY`, `MSET`, `MGET`;
//! - lists: `LPUSH`, `RPUSH`, `LPOP key [count]`, `RPOP key [count]`,
//!   `LRANGE`, `LLEN`;
//! - keys: `DEL`, `EXISTS`, `EXPIRE`, `PEXPIRE`, `TTL`, `PTTL`, `PERSIST`,
//!   `DBSIZE`, `FLUSHALL`;
//! - connection and server: `PING`, `ECHO`, `SELECT 0`, `QUIT`, `COMMAND`
//!   (`COUNT`, `INFO`, `LIST`; `DOCS` answers an error, on which `redis-cli`
//!   falls back to its built-in help), `CONFIG GET` (`save` is empty and
//!   `appendonly` is `no`, which is what `redis-benchmark` asks first).
//!
//! Replies and error texts follow redis-server's (`-ERR ...`,
//! `-WRONGTYPE ...`). Commands are read in both forms, multibulk and inline
//! (a line of words, as typed into `telnet`); every complete command in
//! what a read brought is run and all their replies go out in one write
//! (pipelining). Input that is not RESP (a bad length, a `$-5`, a length
//! over 16 MiB, an inline line over 64 KiB) is answered with
//! `-ERR Protocol error: ...` and the connection closes. A connection that
//! sends nothing for `--idle-timeout`, or takes longer than that to send a
//! whole command once it has begun one, is closed.
//!
//! Multi-key commands (`DEL`, `EXISTS`, `MSET`, `MGET`) act key by key:
//! each key's step is atomic, the command as a whole is not. Keys expire
//! lazily (a command that finds an expired key removes it) and a task
//! sweeps the rest every 100 ms. There is no persistence.
//!
//! The options and the accept loop, shared with the other example servers,
//! are in `common/server.rs`; the protocol is in `kv_server/resp.rs`, the
//! sharded key space in `kv_server/store.rs`.

#[path = "kv_server/resp.rs"]
mod resp;

#[path = "common/server.rs"]
mod server;

#[path = "kv_server/store.rs"]
mod store;

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::ops::Range;
use std::process::ExitCode;
use std::sync::LazyLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use gofer::net::TcpStream;

use resp::Parsed;
use store::{Expiry, Store, Value};

#[derive(Parser, Debug)]
#[command(
    name = "kv_server",
    about = "A key-value server speaking the Redis protocol (RESP2) on gofer, one task per \
             connection.",
    after_help = server::AFTER_HELP
)]
struct Cli {
    #[command(flatten)]
    server: server::Options,
}

/// The key space, shared by every connection.
static STORE: LazyLock<Store> = LazyLock::new(Store::new);

/// How often the sweeper removes expired keys nobody reads.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// The room [`Conn::spare`] offers at least.
const READ_CHUNK: usize = 4 * 1024;
/// Replies are written once this much has piled up, even in the middle of
/// a pipeline, so a connection's output stays bounded.
const FLUSH_AT: usize = 64 * 1024;
/// Buffers larger than this are given back once they are empty again.
const KEEP_BUFFER: usize = 64 * 1024;

/// The Dispatcher's base sampling period (gofer's default is 100 µs).
///
/// The Dispatcher rescues the tasks queued behind a thread that blocks
/// outside gofer's sockets, and each of its cycles is a thread wake-up
/// (about 12 µs of CPU on a small VM). This server never blocks a thread:
/// its only locks are held for memory work (see `kv_server/store.rs`). So
/// a 10 times slower Dispatcher costs it nothing, and gives back the CPU
/// that the cycles took: at 80,000 requests/s on two cores, about 1 µs per
/// request (15 % of the server's CPU per request in `redis-benchmark`
/// at `-P 1`). A server whose handlers may block a thread keeps the default.
const DISPATCH_INTERVAL: Duration = Duration::from_millis(1);

fn main() -> ExitCode {
    let builder = gofer::Scheduler::builder().dispatch_interval(DISPATCH_INTERVAL);
    server::run_with("kv", &Cli::parse().server, builder, serve, |sched| {
        sched.spawn(start_sweeper);
        Ok(())
    })
}

/// Spawns the task that removes expired keys nobody reads.
fn start_sweeper() {
    let sweeper = gofer::Builder::new().name("kv-sweeper").spawn(|| loop {
        gofer::sleep(SWEEP_EVERY);
        STORE.sweep(Instant::now());
    });
    if let Err(e) = sweeper {
        eprintln!("cannot start the expiry sweeper (keys still expire on access): {e}");
    }
}

/// Serves one connection until the client closes it or sends `QUIT`,
/// sends something that is not RESP, or stays idle for `idle`.
fn serve(mut stream: TcpStream, idle: Duration) -> io::Result<()> {
    stream.set_read_timeout(Some(idle))?;
    stream.set_write_timeout(Some(idle))?;
    stream.set_nodelay(true)?;
    let mut conn = Conn::new();
    // When the command being received must be complete: `idle` after its
    // first bytes came, however slowly the rest trickles in.
    let mut due: Option<Instant> = None;
    loop {
        if let Some(due) = due {
            let left = due.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(()); // too slow a command: close
            }
            stream.set_read_timeout(Some(left))?;
        }
        let n = stream.read(conn.spare())?; // parks until bytes arrive
        if n == 0 {
            return Ok(()); // the client closed
        }
        conn.len += n;
        let step = loop {
            let step = conn.run();
            if !conn.out.is_empty() {
                stream.write_all(&conn.out)?;
                conn.out.clear();
            }
            if step != Step::Flush {
                break step;
            }
        };
        if step == Step::Close {
            return Ok(());
        }
        conn.trim();
        match (conn.len != 0, due) {
            (true, None) => due = Some(Instant::now() + idle),
            (false, Some(_)) => {
                due = None;
                stream.set_read_timeout(Some(idle))?;
            }
            _ => {}
        }
    }
}

/// Where [`Conn::run`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Every complete command has run: write the replies, read more.
    Read,
    /// The replies piled up: write them and call again.
    Flush,
    /// Write the replies and close (`QUIT`, or a protocol error).
    Close,
}

/// One connection's buffers.
struct Conn {
    /// Input: `buf[..len]` holds bytes received and not yet run.
    buf: Vec<u8>,
    len: usize,
    /// Do not parse before `len` reaches this: the parser said the command
    /// at the front needs that much.
    need: usize,
    /// The parser, holding what it found of the command at the front of
    /// `buf` (a half command's arguments, as ranges into it) across reads.
    parser: resp::Parser,
    /// Replies to write, in command order.
    out: Vec<u8>,
}

impl Conn {
    fn new() -> Conn {
        Conn {
            buf: Vec::new(),
            len: 0,
            need: 1,
            parser: resp::Parser::new(),
            out: Vec::new(),
        }
    }

    /// Room to read into: at least [`READ_CHUNK`], more when a long command
    /// is arriving: up to what the parser needs, and as much as is held up
    /// to [`KEEP_BUFFER`], so that a long command comes in few reads. The
    /// room never exceeds twice what is held plus [`KEEP_BUFFER`], so that a
    /// length the client only declares allocates nothing.
    fn spare(&mut self) -> &mut [u8] {
        let want = self
            .need
            .saturating_sub(self.len)
            .max(self.len.min(KEEP_BUFFER))
            .min(self.len.max(KEEP_BUFFER))
            .max(READ_CHUNK);
        if self.buf.len() - self.len < want {
            self.buf.resize(self.len + want, 0);
        }
        &mut self.buf[self.len..]
    }

    /// Runs the complete commands at the front of the input, appending
    /// their replies to `out`, and drops them from the input.
    fn run(&mut self) -> Step {
        let mut at = 0;
        let step = loop {
            if self.out.len() >= FLUSH_AT {
                break Step::Flush;
            }
            let input = &self.buf[at..self.len];
            if input.len() < self.need {
                break Step::Read;
            }
            match self.parser.parse(input) {
                Ok(Parsed::Incomplete { need }) => {
                    self.need = need;
                    break Step::Read;
                }
                Ok(Parsed::Command { len }) => {
                    self.need = 1;
                    let args = Args {
                        buf: input,
                        ranges: self.parser.args(),
                    };
                    let flow = execute(&args, &mut self.out);
                    at += len;
                    if flow == Flow::Close {
                        break Step::Close;
                    }
                }
                Err(e) => {
                    let _ = write!(self.out, "-ERR Protocol error: {e}\r\n");
                    break Step::Close;
                }
            }
        };
        if at > 0 {
            // A half command moves to the front; the parser's ranges count
            // from its first byte, so they stay valid.
            self.buf.copy_within(at..self.len, 0);
            self.len -= at; // `need` counts from the front of what is left
        }
        step
    }

    /// Gives back large buffers once they are no longer needed, so an idle
    /// connection holds little.
    fn trim(&mut self) {
        if self.buf.len() > KEEP_BUFFER && self.len <= READ_CHUNK {
            self.buf.truncate(READ_CHUNK);
            self.buf.shrink_to_fit();
        }
        if self.out.capacity() > 2 * FLUSH_AT {
            self.out = Vec::new();
        }
        self.parser.trim(1024);
    }
}

/// A command's arguments (the name first), borrowed from the input.
struct Args<'a> {
    buf: &'a [u8],
    ranges: &'a [Range<usize>],
}

impl<'a> Args<'a> {
    fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Argument `i` (0 is the command's name).
    fn get(&self, i: usize) -> &'a [u8] {
        &self.buf[self.ranges[i].clone()]
    }

    /// Arguments `from..`.
    fn from(&self, from: usize) -> impl Iterator<Item = &'a [u8]> + '_ {
        self.ranges[from..].iter().map(|r| &self.buf[r.clone()])
    }
}

/// What the connection does after a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Close,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmd {
    Set,
    Get,
    Incr,
    LPush,
    LPop,
    RPush,
    RPop,
    Ping,
    Echo,
    Del,
    Exists,
    Decr,
    IncrBy,
    DecrBy,
    MSet,
    MGet,
    LRange,
    LLen,
    Expire,
    PExpire,
    Ttl,
    PTtl,
    Persist,
    DbSize,
    FlushAll,
    Select,
    Quit,
    Command,
    Config,
}

/// A command as `COMMAND` describes it, in redis-server's terms: `arity`
/// counts the name, and is negative for "at least"; `keys` is (first key,
/// last key, step), the last counted from the end when negative.
struct Spec {
    cmd: Cmd,
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    keys: (i64, i64, i64),
}

const fn spec(
    cmd: Cmd,
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    keys: (i64, i64, i64),
) -> Spec {
    Spec {
        cmd,
        name,
        arity,
        flags,
        keys,
    }
}

const W: &[&str] = &["write", "denyoom"];
const WF: &[&str] = &["write", "denyoom", "fast"];
const WRF: &[&str] = &["write", "fast"];
const RF: &[&str] = &["readonly", "fast"];
const R: &[&str] = &["readonly"];
const F: &[&str] = &["fast"];
const NO_KEYS: (i64, i64, i64) = (0, 0, 0);
const ONE_KEY: (i64, i64, i64) = (1, 1, 1);
const ALL_KEYS: (i64, i64, i64) = (1, -1, 1);

/// Every command, the ones `redis-benchmark` sends most first (the table
/// is searched in order).
const COMMANDS: &[Spec] = &[
    spec(Cmd::Set, "set", -3, W, ONE_KEY),
    spec(Cmd::Get, "get", 2, RF, ONE_KEY),
    spec(Cmd::Incr, "incr", 2, WF, ONE_KEY),
    spec(Cmd::LPush, "lpush", -3, WF, ONE_KEY),
    spec(Cmd::LPop, "lpop", -2, WRF, ONE_KEY),
    spec(Cmd::RPush, "rpush", -3, WF, ONE_KEY),
    spec(Cmd::RPop, "rpop", -2, WRF, ONE_KEY),
    spec(Cmd::Ping, "ping", -1, F, NO_KEYS),
    spec(Cmd::Echo, "echo", 2, F, NO_KEYS),
    spec(Cmd::Del, "del", -2, &["write"], ALL_KEYS),
    spec(Cmd::Exists, "exists", -2, RF, ALL_KEYS),
    spec(Cmd::Decr, "decr", 2, WF, ONE_KEY),
    spec(Cmd::IncrBy, "incrby", 3, WF, ONE_KEY),
    spec(Cmd::DecrBy, "decrby", 3, WF, ONE_KEY),
    spec(Cmd::MSet, "mset", -3, W, (1, -1, 2)),
    spec(Cmd::MGet, "mget", -2, RF, ALL_KEYS),
    spec(Cmd::LRange, "lrange", 4, R, ONE_KEY),
    spec(Cmd::LLen, "llen", 2, RF, ONE_KEY),
    spec(Cmd::Expire, "expire", 3, WRF, ONE_KEY),
    spec(Cmd::PExpire, "pexpire", 3, WRF, ONE_KEY),
    spec(Cmd::Ttl, "ttl", 2, RF, ONE_KEY),
    spec(Cmd::PTtl, "pttl", 2, RF, ONE_KEY),
    spec(Cmd::Persist, "persist", 2, WRF, ONE_KEY),
    spec(Cmd::DbSize, "dbsize", 1, RF, NO_KEYS),
    spec(Cmd::FlushAll, "flushall", -1, &["write"], NO_KEYS),
    spec(Cmd::Select, "select", 2, F, NO_KEYS),
    spec(Cmd::Quit, "quit", -1, F, NO_KEYS),
    spec(Cmd::Command, "command", -1, &["random"], NO_KEYS),
    spec(Cmd::Config, "config", -2, &["admin"], NO_KEYS),
];

fn lookup(name: &[u8]) -> Option<&'static Spec> {
    COMMANDS
        .iter()
        .find(|s| s.name.len() == name.len() && s.name.as_bytes().eq_ignore_ascii_case(name))
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_INT: &str = "ERR value is not an integer or out of range";
const SYNTAX: &str = "ERR syntax error";

/// `bytes` fit to quote in an error line: printable ASCII, at most 64.
fn printable(bytes: &[u8]) -> String {
    let mut s: String = bytes
        .iter()
        .take(64)
        .map(|&b| {
            if (b' '..=b'~').contains(&b) && b != b'\'' {
                b as char
            } else {
                '?'
            }
        })
        .collect();
    if bytes.len() > 64 {
        s.push_str("...");
    }
    s
}

/// Runs one command, appending its reply to `out`.
fn execute(a: &Args<'_>, out: &mut Vec<u8>) -> Flow {
    let n = a.len();
    if n == 0 {
        return Flow::Continue; // an empty line, or `*0`: no reply
    }
    let Some(spec) = lookup(a.get(0)) else {
        let _ = write!(out, "-ERR unknown command '{}'\r\n", printable(a.get(0)));
        return Flow::Continue;
    };
    let arity_ok = if spec.arity >= 0 {
        n as i64 == spec.arity
    } else {
        n as i64 >= -spec.arity
    };
    if !arity_ok || (spec.cmd == Cmd::MSet && n % 2 == 0) {
        let _ = write!(
            out,
            "-ERR wrong number of arguments for '{}' command\r\n",
            spec.name
        );
        return Flow::Continue;
    }
    match spec.cmd {
        Cmd::Set => set(a, out),
        Cmd::Get => get(a.get(1), out),
        Cmd::Incr => incr_by(a.get(1), 1, out),
        Cmd::Decr => incr_by(a.get(1), -1, out),
        Cmd::IncrBy | Cmd::DecrBy => match resp::parse_i64(a.get(2)) {
            None => resp::error(out, NOT_INT),
            Some(by) if spec.cmd == Cmd::IncrBy => incr_by(a.get(1), by, out),
            Some(by) => match by.checked_neg() {
                Some(by) => incr_by(a.get(1), by, out),
                None => resp::error(out, "ERR decrement would overflow"),
            },
        },
        Cmd::LPush | Cmd::RPush => push(a, spec.cmd == Cmd::LPush, out),
        Cmd::LPop | Cmd::RPop => pop(a, spec.cmd == Cmd::LPop, out),
        Cmd::Ping if n == 1 => resp::simple(out, b"PONG"),
        Cmd::Ping if n == 2 => resp::bulk(out, a.get(1)),
        Cmd::Ping => resp::error(out, "ERR wrong number of arguments for 'ping' command"),
        Cmd::Echo => resp::bulk(out, a.get(1)),
        Cmd::Del => {
            let n = a.from(1).filter(|k| STORE.shard(k).remove(k)).count();
            resp::int(out, n as i64);
        }
        Cmd::Exists => {
            let n = a
                .from(1)
                .filter(|k| STORE.shard(k).get(k).is_some())
                .count();
            resp::int(out, n as i64);
        }
        Cmd::MSet => {
            for i in (1..n).step_by(2) {
                let key = a.get(i);
                STORE.shard(key).set_str(key, a.get(i + 1), Expiry::Clear);
            }
            resp::simple(out, b"OK");
        }
        Cmd::MGet => {
            resp::array(out, n - 1);
            for key in a.from(1) {
                match STORE.shard(key).get(key).map(|e| &e.value) {
                    Some(Value::Str(v)) => resp::bulk(out, v),
                    _ => resp::null(out),
                }
            }
        }
        Cmd::LRange => lrange(a, out),
        Cmd::LLen => match STORE.shard(a.get(1)).get(a.get(1)).map(|e| &e.value) {
            None => resp::int(out, 0),
            Some(Value::List(l)) => resp::int(out, l.len() as i64),
            Some(Value::Str(_)) => resp::error(out, WRONGTYPE),
        },
        Cmd::Expire | Cmd::PExpire => expire(a, spec, out),
        Cmd::Ttl | Cmd::PTtl => {
            let key = a.get(1);
            let reply = match STORE.shard(key).get(key) {
                None => -2,
                Some(e) => match e.expires() {
                    None => -1,
                    Some(t) if spec.cmd == Cmd::Ttl => ttl(t, Unit::Seconds),
                    Some(t) => ttl(t, Unit::Millis),
                },
            };
            resp::int(out, reply);
        }
        Cmd::Persist => {
            let key = a.get(1);
            let mut shard = STORE.shard(key);
            let had = shard.get(key).and_then(|e| e.expires()).is_some();
            if had {
                shard.set_expiry(key, None);
            }
            resp::int(out, had.into());
        }
        Cmd::DbSize => resp::int(out, STORE.len() as i64),
        Cmd::FlushAll => {
            let mode_ok = n == 1
                || (n == 2
                    && (a.get(1).eq_ignore_ascii_case(b"sync")
                        || a.get(1).eq_ignore_ascii_case(b"async")));
            if mode_ok {
                STORE.flush();
                resp::simple(out, b"OK");
            } else {
                resp::error(out, SYNTAX);
            }
        }
        Cmd::Select => match resp::parse_i64(a.get(1)) {
            Some(0) => resp::simple(out, b"OK"),
            Some(_) => resp::error(out, "ERR DB index is out of range"),
            None => resp::error(out, NOT_INT),
        },
        Cmd::Quit => {
            resp::simple(out, b"OK");
            return Flow::Close;
        }
        Cmd::Command => command(a, out),
        Cmd::Config => config(a, out),
    }
    Flow::Continue
}

fn get(key: &[u8], out: &mut Vec<u8>) {
    match STORE.shard(key).get(key).map(|e| &e.value) {
        None => resp::null(out),
        Some(Value::Str(v)) => resp::bulk(out, v),
        Some(Value::List(_)) => resp::error(out, WRONGTYPE),
    }
}

/// `SET key value [NX|XX] [GET] [EX seconds|PX milliseconds|KEEPTTL]`.
fn set(a: &Args<'_>, out: &mut Vec<u8>) {
    #[derive(PartialEq)]
    enum Cond {
        Always,
        IfMissing,
        IfPresent,
    }
    let (key, val) = (a.get(1), a.get(2));
    let mut cond = Cond::Always;
    let mut want_old = false;
    let mut expiry = Expiry::Clear;
    let mut ttl_given = false;
    let mut i = 3;
    while i < a.len() {
        let opt = a.get(i);
        let is = |name: &str| opt.eq_ignore_ascii_case(name.as_bytes());
        if is("NX") && cond == Cond::Always {
            cond = Cond::IfMissing;
        } else if is("XX") && cond == Cond::Always {
            cond = Cond::IfPresent;
        } else if is("GET") {
            want_old = true;
        } else if is("KEEPTTL") && !ttl_given {
            ttl_given = true;
            expiry = Expiry::Keep;
        } else if (is("EX") || is("PX")) && !ttl_given && i + 1 < a.len() {
            ttl_given = true;
            i += 1;
            let unit = if is("EX") {
                Unit::Seconds
            } else {
                Unit::Millis
            };
            let Some(v) = resp::parse_i64(a.get(i)) else {
                return resp::error(out, NOT_INT);
            };
            // Unlike EXPIRE, SET refuses a deadline not in the future.
            match expiry_in(v, unit) {
                Ok(Some(at)) if v > 0 => expiry = Expiry::At(at),
                _ => return resp::error(out, "ERR invalid expire time in 'set' command"),
            }
        } else {
            return resp::error(out, SYNTAX);
        }
        i += 1;
    }
    let mut shard = STORE.shard(key);
    let old = shard.get(key);
    let present = old.is_some();
    if want_old {
        match old.map(|e| &e.value) {
            None => resp::null(out),
            Some(Value::Str(v)) => resp::bulk(out, v),
            Some(Value::List(_)) => return resp::error(out, WRONGTYPE),
        }
    }
    let go = match cond {
        Cond::Always => true,
        Cond::IfMissing => !present,
        Cond::IfPresent => present,
    };
    if go {
        shard.set_str(key, val, expiry);
    }
    if !want_old {
        if go {
            resp::simple(out, b"OK");
        } else {
            resp::null(out);
        }
    }
}

fn incr_by(key: &[u8], by: i64, out: &mut Vec<u8>) {
    let mut shard = STORE.shard(key);
    let e = shard.entry(key, || Value::Str(b"0".to_vec()));
    let Value::Str(v) = &mut e.value else {
        return resp::error(out, WRONGTYPE);
    };
    let Some(n) = resp::parse_i64(v) else {
        return resp::error(out, NOT_INT);
    };
    let Some(n) = n.checked_add(by) else {
        return resp::error(out, "ERR increment or decrement would overflow");
    };
    v.clear();
    resp::write_int(v, n);
    resp::int(out, n);
}

fn push(a: &Args<'_>, front: bool, out: &mut Vec<u8>) {
    let key = a.get(1);
    let mut shard = STORE.shard(key);
    let e = shard.entry(key, || Value::List(VecDeque::new()));
    let Value::List(l) = &mut e.value else {
        return resp::error(out, WRONGTYPE);
    };
    for v in a.from(2) {
        if front {
            l.push_front(v.to_vec());
        } else {
            l.push_back(v.to_vec());
        }
    }
    resp::int(out, l.len() as i64);
}

/// `LPOP key [count]`, `RPOP key [count]`.
fn pop(a: &Args<'_>, front: bool, out: &mut Vec<u8>) {
    if a.len() > 3 {
        let name = if front { "lpop" } else { "rpop" };
        let _ = write!(
            out,
            "-ERR wrong number of arguments for '{name}' command\r\n"
        );
        return;
    }
    let count = if a.len() == 3 {
        match resp::parse_i64(a.get(2)) {
            Some(c) if c >= 0 => Some(c as usize),
            _ => return resp::error(out, "ERR value is out of range, must be positive"),
        }
    } else {
        None
    };
    let key = a.get(1);
    let mut shard = STORE.shard(key);
    let Some(e) = shard.get(key) else {
        return match count {
            None => resp::null(out),
            Some(_) => resp::null_array(out),
        };
    };
    let Value::List(l) = &mut e.value else {
        return resp::error(out, WRONGTYPE);
    };
    let k = match count {
        None => 1,
        Some(c) => {
            let k = c.min(l.len());
            resp::array(out, k);
            k
        }
    };
    for _ in 0..k {
        let v = if front { l.pop_front() } else { l.pop_back() };
        if let Some(v) = v {
            resp::bulk(out, &v);
        }
    }
    if l.is_empty() {
        shard.remove(key);
    }
}

fn lrange(a: &Args<'_>, out: &mut Vec<u8>) {
    let (Some(start), Some(stop)) = (resp::parse_i64(a.get(2)), resp::parse_i64(a.get(3))) else {
        return resp::error(out, NOT_INT);
    };
    let key = a.get(1);
    let mut shard = STORE.shard(key);
    let l = match shard.get(key).map(|e| &e.value) {
        None => return resp::array(out, 0),
        Some(Value::Str(_)) => return resp::error(out, WRONGTYPE),
        Some(Value::List(l)) => l,
    };
    let len = l.len() as i64;
    let start = if start < 0 {
        (start + len).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        stop + len
    } else {
        stop.min(len - 1)
    };
    if start > stop || start >= len {
        return resp::array(out, 0);
    }
    resp::array(out, (stop - start + 1) as usize);
    for v in l.range(start as usize..=stop as usize) {
        resp::bulk(out, v);
    }
}

/// The unit of a time to live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    Seconds,
    Millis,
}

/// Milliseconds since the Unix epoch, as redis-server counts its deadlines.
fn unix_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The deadline `v` units from now: `Ok(None)` when that is not in the
/// future, `Err(())` when it is out of range. The range is
/// redis-server's: `v` in milliseconds must fit an `i64`, and so must the
/// deadline as milliseconds since the Unix epoch, so a deadline's time to
/// live always fits an `i64` too.
fn expiry_in(v: i64, unit: Unit) -> Result<Option<Instant>, ()> {
    let ms = match unit {
        Unit::Seconds => v.checked_mul(1000).ok_or(())?,
        Unit::Millis => v,
    };
    if ms > i64::MAX - unix_millis() {
        return Err(());
    }
    if ms <= 0 {
        return Ok(None);
    }
    Instant::now()
        .checked_add(Duration::from_millis(ms.unsigned_abs()))
        .map(Some)
        .ok_or(())
}

/// `EXPIRE key seconds`, `PEXPIRE key milliseconds`: a deadline not in the
/// future deletes the key; one out of range (see [`expiry_in`]) is refused
/// whether the key exists or not, and leaves the key as it was.
fn expire(a: &Args<'_>, spec: &Spec, out: &mut Vec<u8>) {
    let Some(v) = resp::parse_i64(a.get(2)) else {
        return resp::error(out, NOT_INT);
    };
    let unit = if spec.cmd == Cmd::Expire {
        Unit::Seconds
    } else {
        Unit::Millis
    };
    let key = a.get(1);
    match expiry_in(v, unit) {
        Ok(Some(at)) => {
            let set = STORE.shard(key).set_expiry(key, Some(at));
            resp::int(out, set.into());
        }
        Ok(None) => {
            let removed = STORE.shard(key).remove(key);
            resp::int(out, removed.into());
        }
        Err(()) => {
            let _ = write!(
                out,
                "-ERR invalid expire time in '{}' command\r\n",
                spec.name
            );
        }
    }
}

/// The time to live of a key whose deadline is `at`, in milliseconds, or
/// in seconds rounded to the nearest (as redis-server rounds them).
fn ttl(at: Instant, unit: Unit) -> i64 {
    let ms = at.saturating_duration_since(Instant::now()).as_millis();
    let n = match unit {
        Unit::Millis => ms,
        Unit::Seconds => (ms + 500) / 1000,
    };
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// What `COMMAND` says about one command.
fn describe(s: &Spec, out: &mut Vec<u8>) {
    resp::array(out, 6);
    resp::bulk(out, s.name.as_bytes());
    resp::int(out, s.arity);
    resp::array(out, s.flags.len());
    for f in s.flags {
        resp::simple(out, f.as_bytes());
    }
    resp::int(out, s.keys.0);
    resp::int(out, s.keys.1);
    resp::int(out, s.keys.2);
}

/// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO name...`, `COMMAND LIST`.
fn command(a: &Args<'_>, out: &mut Vec<u8>) {
    if a.len() == 1 {
        resp::array(out, COMMANDS.len());
        for s in COMMANDS {
            describe(s, out);
        }
        return;
    }
    let sub = a.get(1);
    if sub.eq_ignore_ascii_case(b"count") && a.len() == 2 {
        resp::int(out, COMMANDS.len() as i64);
    } else if sub.eq_ignore_ascii_case(b"list") && a.len() == 2 {
        resp::array(out, COMMANDS.len());
        for s in COMMANDS {
            resp::bulk(out, s.name.as_bytes());
        }
    } else if sub.eq_ignore_ascii_case(b"info") {
        if a.len() == 2 {
            resp::array(out, COMMANDS.len());
            COMMANDS.iter().for_each(|s| describe(s, out));
        } else {
            resp::array(out, a.len() - 2);
            for name in a.from(2) {
                match lookup(name) {
                    Some(s) => describe(s, out),
                    None => resp::null_array(out),
                }
            }
        }
    } else {
        let _ = write!(
            out,
            "-ERR unknown subcommand '{}'. Try COMMAND HELP.\r\n",
            printable(sub)
        );
    }
}

/// The configuration `CONFIG GET` reports: what a server without
/// persistence would say.
const CONFIG: &[(&str, &str)] = &[("save", ""), ("appendonly", "no"), ("databases", "1")];

/// `CONFIG GET parameter...` (a parameter `*` matches all).
fn config(a: &Args<'_>, out: &mut Vec<u8>) {
    let sub = a.get(1);
    if !sub.eq_ignore_ascii_case(b"get") || a.len() < 3 {
        let _ = write!(
            out,
            "-ERR unknown subcommand or wrong number of arguments for '{}'. Try CONFIG HELP.\r\n",
            printable(sub)
        );
        return;
    }
    let matches = |name: &str| {
        a.from(2)
            .any(|p| p == b"*" || p.eq_ignore_ascii_case(name.as_bytes()))
    };
    let found: Vec<_> = CONFIG.iter().filter(|(name, _)| matches(name)).collect();
    resp::array(out, 2 * found.len());
    for (name, value) in found {
        resp::bulk(out, name.as_bytes());
        resp::bulk(out, value.as_bytes());
    }
}
