//! Runs the `kv_server` example and talks RESP to it over std sockets:
//! every command, pipelining, inline commands, expiry, the questions
//! `redis-cli` and `redis-benchmark` ask, bad input of several kinds
//! (each followed by a check that other connections are still served),
//! clients that stop halfway, many clients at once, and bad arguments.
//!
//! Every test starts its own server on a free port and waits for its
//! `listening on ADDR` line; every wait is on a reply or on the server
//! closing a connection, bounded by the sockets' timeouts. Waits on
//! expiry poll with generous deadlines.

use crate::server_util;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use server_util::{assert_refused, read_to_close, send, Server};

const SERVER: &str = "kv_server";

/// A RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

use Reply::*;

fn ok() -> Reply {
    Status("OK".into())
}

fn bulk(s: &str) -> Reply {
    Bulk(Some(s.as_bytes().to_vec()))
}

fn nil() -> Reply {
    Bulk(None)
}

fn bulks(items: &[&str]) -> Reply {
    Array(Some(items.iter().map(|s| bulk(s)).collect()))
}

/// Encodes a command as a client does.
fn encode<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// One connection.
struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    fn new(server: &Server) -> Client {
        let writer = server.connect();
        Client {
            reader: BufReader::new(writer.try_clone().unwrap()),
            writer,
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        send(&mut self.writer, bytes);
    }

    fn line(&mut self) -> String {
        let mut line = Vec::new();
        self.reader
            .read_until(b'\n', &mut line)
            .expect("a reply line");
        assert!(
            line.ends_with(b"\r\n"),
            "a reply line ends in CRLF: {:?}",
            String::from_utf8_lossy(&line)
        );
        line.truncate(line.len() - 2);
        String::from_utf8(line).expect("reply lines are text")
    }

    fn read(&mut self) -> Reply {
        let line = self.line();
        let (kind, rest) = line.split_at(1);
        let number = || rest.parse::<i64>().expect("a number");
        match kind {
            "+" => Status(rest.into()),
            "-" => Error(rest.into()),
            ":" => Int(number()),
            "$" if number() < 0 => Bulk(None),
            "$" => {
                let mut data = vec![0; number() as usize + 2];
                self.reader.read_exact(&mut data).unwrap();
                assert_eq!(&data[data.len() - 2..], b"\r\n");
                data.truncate(data.len() - 2);
                Bulk(Some(data))
            }
            "*" if number() < 0 => Array(None),
            "*" => Array(Some((0..number()).map(|_| self.read()).collect())),
            _ => panic!("not a RESP reply: {line:?}"),
        }
    }

    fn cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Reply {
        self.send(&encode(args));
        self.read()
    }

    /// Reads until the server closes, after the replies read so far.
    fn rest(mut self) -> Vec<u8> {
        let mut out = self.reader.buffer().to_vec();
        let n = out.len();
        self.reader.consume(n);
        out.extend(read_to_close(self.reader.get_mut()));
        out
    }

    fn ping(&mut self) {
        assert_eq!(self.cmd(&["PING"]), Status("PONG".into()));
    }
}

fn assert_err(got: Reply, starts: &str) {
    match &got {
        Error(e) if e.starts_with(starts) => {}
        _ => panic!("expected an error starting {starts:?}, got {got:?}"),
    }
}

#[test]
fn ping_echo_set_and_get() {
    let server = Server::start(SERVER, &[]);
    let mut c = Client::new(&server);
    c.ping();
    assert_eq!(c.cmd(&["PING", "hello"]), bulk("hello"));
    assert_eq!(c.cmd(&["ECHO", "a b\r\nc"]), bulk("a b\r\nc"));
    assert_eq!(c.cmd(&["GET", "k"]), nil());
    assert_eq!(c.cmd(&["SET", "k", "v1"]), ok());
    assert_eq!(c.cmd(&["GET", "k"]), bulk("v1"));
    assert_eq!(c.cmd(&["set", "k", ""]), ok(), "names in any case");
    assert_eq!(c.cmd(&["gEt", "k"]), bulk(""));
    let binary: Vec<u8> = (0..=255).collect();
    assert_eq!(c.cmd(&[&b"SET"[..], b"bin", &binary]), ok());
    assert_eq!(c.cmd(&["GET", "bin"]), Bulk(Some(binary)));

    // NX, XX, GET.
    assert_eq!(c.cmd(&["SET", "k", "v2", "NX"]), nil());
    assert_eq!(c.cmd(&["SET", "new", "n", "NX"]), ok());
    assert_eq!(c.cmd(&["SET", "absent", "a", "XX"]), nil());
    assert_eq!(c.cmd(&["GET", "absent"]), nil());
    assert_eq!(c.cmd(&["SET", "k", "v3", "XX"]), ok());
    assert_eq!(c.cmd(&["SET", "k", "v4", "GET"]), bulk("v3"));
    assert_eq!(c.cmd(&["SET", "fresh", "f", "GET"]), nil());
    assert_eq!(c.cmd(&["GET", "k"]), bulk("v4"));
    assert_err(c.cmd(&["SET", "k", "v", "NX", "XX"]), "ERR syntax error");
    assert_err(c.cmd(&["SET", "k", "v", "BOGUS"]), "ERR syntax error");

    // Errors, and the connection goes on after each.
    assert_err(
        c.cmd(&["GET"]),
        "ERR wrong number of arguments for 'get' command",
    );
    assert_err(c.cmd(&["GET", "a", "b"]), "ERR wrong number of arguments");
    assert_err(c.cmd(&["ECHO"]), "ERR wrong number of arguments");
    assert_err(c.cmd(&["PING", "a", "b"]), "ERR wrong number of arguments");
    assert_err(c.cmd(&["NOSUCH", "x"]), "ERR unknown command 'NOSUCH'");
    assert_err(c.cmd(&["BAD\r\nNAME"]), "ERR unknown command 'BAD??NAME'");
    c.ping();
    server.stop();
}

#[test]
fn counters_count_and_refuse_what_is_not_a_number() {
    let server = Server::start(SERVER, &[]);
    let mut c = Client::new(&server);
    assert_eq!(c.cmd(&["INCR", "n"]), Int(1));
    assert_eq!(c.cmd(&["INCR", "n"]), Int(2));
    assert_eq!(c.cmd(&["DECR", "n"]), Int(1));
    assert_eq!(c.cmd(&["INCRBY", "n", "41"]), Int(42));
    assert_eq!(c.cmd(&["DECRBY", "n", "50"]), Int(-8));
    assert_eq!(c.cmd(&["INCRBY", "n", "-2"]), Int(-10));
    assert_eq!(c.cmd(&["GET", "n"]), bulk("-10"));
    assert_eq!(c.cmd(&["DECR", "fresh"]), Int(-1));

    assert_err(c.cmd(&["INCRBY", "n", "x"]), "ERR value is not an integer");
    assert_err(
        c.cmd(&["INCRBY", "n", "1.5"]),
        "ERR value is not an integer",
    );
    assert_eq!(c.cmd(&["SET", "s", "abc"]), ok());
    assert_err(c.cmd(&["INCR", "s"]), "ERR value is not an integer");
    assert_eq!(c.cmd(&["SET", "s", " 1"]), ok());
    assert_err(c.cmd(&["INCR", "s"]), "ERR value is not an integer");
    assert_eq!(c.cmd(&["GET", "s"]), bulk(" 1"), "unchanged");

    assert_eq!(c.cmd(&["SET", "max", &i64::MAX.to_string()]), ok());
    assert_err(
        c.cmd(&["INCR", "max"]),
        "ERR increment or decrement would overflow",
    );
    assert_eq!(c.cmd(&["GET", "max"]), bulk(&i64::MAX.to_string()));
    assert_eq!(c.cmd(&["SET", "min", &i64::MIN.to_string()]), ok());
    assert_err(
        c.cmd(&["DECR", "min"]),
        "ERR increment or decrement would overflow",
    );
    assert_err(
        c.cmd(&["DECRBY", "n", &i64::MIN.to_string()]),
        "ERR decrement would overflow",
    );
    assert_err(c.cmd(&["INCR"]), "ERR wrong number of arguments");
    server.stop();
}

#[test]
fn del_exists_mset_and_mget_take_many_keys() {
    let server = Server::start(SERVER, &[]);
    let mut c = Client::new(&server);
    assert_eq!(c.cmd(&["MSET", "a", "1", "b", "2", "c", "3"]), ok());
    assert_eq!(
        c.cmd(&["MGET", "a", "b", "missing", "c"]),
        Array(Some(vec![bulk("1"), bulk("2"), nil(), bulk("3")]))
    );
    assert_eq!(c.cmd(&["EXISTS", "a", "b", "missing", "a"]), Int(3));
    assert_eq!(c.cmd(&["DEL", "a", "missing", "c"]), Int(2));
    assert_eq!(c.cmd(&["DEL", "a"]), Int(0));
    assert_eq!(c.cmd(&["EXISTS", "a", "c"]), Int(0));
    assert_eq!(c.cmd(&["EXISTS", "b"]), Int(1));
    assert_err(
        c.cmd(&["MSET", "a", "1", "b"]),
        "ERR wrong number of arguments for 'mset' command",
    );
    assert_err(c.cmd(&["DEL"]), "ERR wrong number of arguments");
    assert_eq!(c.cmd(&["RPUSH", "list", "x"]), Int(1));
    assert_eq!(
        c.cmd(&["MGET", "list", "b"]),
        Array(Some(vec![nil(), bulk("2")])),
        "MGET answers nil for a key of another type"
    );
    // Many keys, across all the shards.
    let mut mset = vec!["MSET".to_string()];
    for i in 0..500 {
        mset.push(format!("key:{i}"));
        mset.push(format!("value {i}"));
    }
    assert_eq!(c.cmd(&mset), ok());
    let mut mget = vec!["MGET".to_string()];
    mget.extend((0..500).map(|i| format!("key:{i}")));
    let want: Vec<Reply> = (0..500).map(|i| bulk(&format!("value {i}"))).collect();
    assert_eq!(c.cmd(&mget), Array(Some(want)));
    mget[0] = "DEL".into();
    assert_eq!(c.cmd(&mget), Int(500));
    assert_eq!(c.cmd(&["DBSIZE"]), Int(2));
    server.stop();
}

#[test]
fn lists_push_pop_and_range() {
    let server = Server::start(SERVER, &[]);
    let mut c = Client::new(&server);
    assert_eq!(c.cmd(&["RPUSH", "l", "a", "b", "c"]), Int(3));
    assert_eq!(c.cmd(&["LPUSH", "l", "y", "z"]), Int(5));
    assert_eq!(
        c.cmd(&["LRANGE", "l", "0", "-1"]),
        bulks(&["z", "y", "a", "b", "c"])
    );
    assert_eq!(c.cmd(&["LRANGE", "l", "1", "2"]), bulks(&["y", "a"]));
    assert_eq!(c.cmd(&["LRANGE", "l", "-2", "-1"]), bulks(&["b", "c"]));
    assert_eq!(
        c.cmd(&["LRANGE", "l", "-100", "100"]),
        bulks(&["z", "y", "a", "b", "c"])
    );
    assert_eq!(c.cmd(&["LRANGE", "l", "3", "1"]), bulks(&[]));
    assert_eq!(c.cmd(&["LRANGE", "l", "5", "10"]), bulks(&[]));
    assert_eq!(c.cmd(&["LRANGE", "nothing", "0", "-1"]), bulks(&[]));
    assert_err(
        c.cmd(&["LRANGE", "l", "a", "1"]),
        "ERR value is not an integer",
    );
    assert_eq!(c.cmd(&["LLEN", "l"]), Int(5));
    assert_eq!(c.cmd(&["LLEN", "nothing"]), Int(0));
    assert_eq!(c.cmd(&["LPOP", "l"]), bulk("z"));
    assert_eq!(c.cmd(&["RPOP", "l"]), bulk("c"));
    assert_eq!(c.cmd(&["LPOP", "l", "0"]), bulks(&[]));
    assert_eq!(c.cmd(&["RPOP", "l", "2"]), bulks(&["b", "a"]));
    assert_eq!(c.cmd(&["LPOP", "l", "5"]), bulks(&["y"]));
    // The last element gone, the key is gone.
    assert_eq!(c.cmd(&["EXISTS", "l"]), Int(0));
    assert_eq!(c.cmd(&["LPOP", "l"]), nil());
    assert_eq!(c.cmd(&["RPOP", "l", "3"]), Array(None));
    assert_err(c.cmd(&["LPOP", "l", "-1"]), "ERR value is out of range");
    assert_err(
        c.cmd(&["LPOP", "l", "1", "2"]),
        "ERR wrong number of arguments",
    );

    // Types are kept apart.
    assert_eq!(c.cmd(&["SET", "s", "v"]), ok());
    assert_eq!(c.cmd(&["RPUSH", "l", "x"]), Int(1));
    const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
    for cmd in [
        &["LPUSH", "s", "x"][..],
        &["RPUSH", "s", "x"],
        &["LPOP", "s"],
        &["RPOP", "s", "1"],
        &["LRANGE", "s", "0", "-1"],
        &["LLEN", "s"],
        &["GET", "l"],
        &["INCR", "l"],
        &["SET", "l", "v", "GET"],
    ] {
        assert_err(c.cmd(cmd), WRONGTYPE);
    }
    assert_eq!(c.cmd(&["GET", "s"]), bulk("v"));
    assert_eq!(c.cmd(&["LLEN", "l"]), Int(1));
    // SET replaces a list.
    assert_eq!(c.cmd(&["SET", "l", "now a string"]), ok());
    assert_eq!(c.cmd(&["GET", "l"]), bulk("now a string"));
    server.stop();
}

/// Polls `GET key` until it answers nil; how long after `since` that was.
fn wait_gone(c: &mut Client, key: &str, since: Instant) -> Duration {
    loop {
        if c.cmd(&["GET", key]) == nil() {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "{key} did not expire"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn keys_expire_and_report_their_time_to_live() {
    let server = Server::start(SERVER, &[]);
    let mut c = Client::new(&server);
    assert_eq!(c.cmd(&["TTL", "missing"]), Int(-2));
    assert_eq!(c.cmd(&["PTTL", "missing"]), Int(-2));
    assert_eq!(c.cmd(&["SET", "k", "v"]), ok());
    assert_eq!(c.cmd(&["TTL", "k"]), Int(-1));

    assert_eq!(c.cmd(&["SET", "k", "v", "EX", "100"]), ok());
    let Int(ttl) = c.cmd(&["TTL", "k"]) else {
        panic!()
    };
    assert!((90..=100).contains(&ttl), "TTL {ttl}");
    let Int(pttl) = c.cmd(&["PTTL", "k"]) else {
        panic!()
    };
    assert!((90_000..=100_000).contains(&pttl), "PTTL {pttl}");
    assert_eq!(c.cmd(&["SET", "k", "v2", "KEEPTTL"]), ok());
    let Int(ttl) = c.cmd(&["TTL", "k"]) else {
        panic!()
    };
    assert!((90..=100).contains(&ttl), "KEEPTTL kept it: {ttl}");
    assert_eq!(c.cmd(&["EXPIRE", "k", "50"]), Int(1));
    let Int(ttl) = c.cmd(&["TTL", "k"]) else {
        panic!()
    };
    assert!((40..=50).contains(&ttl), "TTL {ttl}");
    assert_eq!(c.cmd(&["PERSIST", "k"]), Int(1));
    assert_eq!(c.cmd(&["PERSIST", "k"]), Int(0));
    assert_eq!(c.cmd(&["TTL", "k"]), Int(-1));
    assert_eq!(c.cmd(&["SET", "k", "v", "PX", "100000"]), ok());
    assert_eq!(c.cmd(&["SET", "k", "v"]), ok());
    assert_eq!(
        c.cmd(&["TTL", "k"]),
        Int(-1),
        "a plain SET clears the deadline"
    );
    assert_eq!(c.cmd(&["EXPIRE", "missing", "10"]), Int(0));
    assert_eq!(c.cmd(&["EXPIRE", "k", "0"]), Int(1), "deleted");
    assert_eq!(c.cmd(&["GET", "k"]), nil());
    assert_eq!(c.cmd(&["RPUSH", "l", "a"]), Int(1));
    assert_eq!(c.cmd(&["PEXPIRE", "l", "100000"]), Int(1));
    let Int(ttl) = c.cmd(&["TTL", "l"]) else {
        panic!()
    };
    assert!((90..=100).contains(&ttl), "a list's TTL {ttl}");

    for bad in [&["EX", "0"][..], &["EX", "-1"], &["PX", "abc"], &["EX"]] {
        let mut cmd = vec!["SET", "k", "v"];
        cmd.extend_from_slice(bad);
        let reply = c.cmd(&cmd);
        assert!(
            matches!(&reply, Error(e) if e.starts_with("ERR")),
            "{cmd:?}: {reply:?}"
        );
    }
    assert_err(
        c.cmd(&["SET", "k", "v", "EX", "10", "PX", "10"]),
        "ERR syntax error",
    );
    assert_err(
        c.cmd(&["SET", "k", "v", "EX", "99999999999999999"]),
        "ERR invalid expire time",
    );
    assert_err(
        c.cmd(&["EXPIRE", "k", "soon"]),
        "ERR value is not an integer",
    );

    // A key with a deadline lives until it, and not for long after.
    let start = Instant::now();
    assert_eq!(c.cmd(&["SET", "short", "v", "PX", "1500"]), ok());
    assert_eq!(c.cmd(&["SET", "short2", "v", "EX", "1"]), ok());
    let gone = wait_gone(&mut c, "short", start);
    assert!(
        gone >= Duration::from_millis(1500),
        "expired after {gone:?}, before its 1.5 s"
    );
    assert_eq!(c.cmd(&["GET", "short2"]), nil());
    assert_eq!(c.cmd(&["EXISTS", "short", "short2"]), Int(0));
    server.stop();
}

/// `TTL key` and `PTTL key`, which must be numbers.
fn ttls(c: &mut Client, key: &str) -> (i64, i64) {
    match (c.cmd(&["TTL", key]), c.cmd(&["PTTL", key])) {
        (Int(s), Int(ms)) => (s, ms),
        other => panic!("TTL and PTTL of {key}: {other:?}"),
    }
}

#[test]
fn expiry_times_out_of_range_are_refused_as_redis_refuses_them() {
    // Each answer as redis-server 7.0 gives it: a time to live, in
    // milliseconds, must fit an i64, and so must the deadline in
    // milliseconds since the Unix epoch.
    const MAX: &str = "9223372036854775807"; // i64::MAX
    const MIN: &str = "-9223372036854775808"; // i64::MIN
    let server = Server::start(SERVER, &[]);
    let mut c = Client::new(&server);
    let invalid = |cmd: &str| Error(format!("ERR invalid expire time in '{cmd}' command"));

    // Refused, and the key left as it was: no deadline.
    let refused: &[(&str, &str)] = &[
        ("PEXPIRE", MAX),
        ("PEXPIRE", "9223372036854775806"),
        ("EXPIRE", MAX),
        ("EXPIRE", MIN),
        ("EXPIRE", "9223372036854775"), // i64::MAX / 1000: fits as ms, not once now is added
        ("EXPIRE", "9223372036854776"),
        ("EXPIRE", "-9223372036854776"), // below i64::MIN / 1000
    ];
    for &(cmd, v) in refused {
        assert_eq!(c.cmd(&["SET", "k", "v"]), ok());
        assert_eq!(
            c.cmd(&[cmd, "k", v]),
            invalid(&cmd.to_lowercase()),
            "{cmd} k {v}"
        );
        assert_eq!(ttls(&mut c, "k"), (-1, -1), "after {cmd} k {v}");
        assert_eq!(c.cmd(&["GET", "k"]), bulk("v"), "after {cmd} k {v}");
        // Refused before the key is looked up.
        assert_eq!(c.cmd(&[cmd, "missing", v]), invalid(&cmd.to_lowercase()));
    }

    // Not in the future: the key is deleted.
    let deleted: &[(&str, &str)] = &[
        ("PEXPIRE", MIN),
        ("PEXPIRE", "0"),
        ("PEXPIRE", "-1"),
        ("EXPIRE", "0"),
        ("EXPIRE", "-1"),
        ("EXPIRE", "-9223372036854775"), // i64::MIN / 1000
    ];
    for &(cmd, v) in deleted {
        assert_eq!(c.cmd(&["SET", "k", "v"]), ok());
        assert_eq!(c.cmd(&[cmd, "k", v]), Int(1), "{cmd} k {v}");
        assert_eq!(ttls(&mut c, "k"), (-2, -2), "after {cmd} k {v}");
        assert_eq!(c.cmd(&[cmd, "missing", v]), Int(0), "{cmd} missing {v}");
    }

    // Far, but in range: the time to live is reported whole.
    assert_eq!(c.cmd(&["SET", "k", "v"]), ok());
    assert_eq!(c.cmd(&["PEXPIRE", "k", "9223370000000000000"]), Int(1));
    let (s, ms) = ttls(&mut c, "k");
    assert!(
        (9_223_369_999_999_000..=9_223_370_000_000_000).contains(&s),
        "TTL {s}"
    );
    assert!(
        (9_223_369_999_000_000_000..=9_223_370_000_000_000_000).contains(&ms),
        "PTTL {ms}"
    );
    assert_eq!(c.cmd(&["SET", "k", "v", "KEEPTTL"]), ok());
    assert_eq!(ttls(&mut c, "k").0, s);
    assert_eq!(c.cmd(&["SET", "k", "v", "PX", "9223372036854775"]), ok());
    let (s, _) = ttls(&mut c, "k");
    assert!(
        (9_223_372_036_000..=9_223_372_036_855).contains(&s),
        "TTL {s}"
    );

    // SET refuses a deadline not in the future, as well as one out of range,
    // and the key keeps its value and its (lack of) deadline.
    let set_refused: &[(&str, &str)] = &[
        ("EX", "0"),
        ("EX", "-1"),
        ("EX", MIN),
        ("EX", MAX),
        ("EX", "9223372036854775"),
        ("PX", "0"),
        ("PX", "-1"),
        ("PX", MIN),
        ("PX", MAX),
        ("PX", "9223372036854775806"),
    ];
    for &(opt, v) in set_refused {
        assert_eq!(c.cmd(&["SET", "k", "old"]), ok());
        assert_eq!(
            c.cmd(&["SET", "k", "new", opt, v]),
            invalid("set"),
            "SET {opt} {v}"
        );
        assert_eq!(c.cmd(&["GET", "k"]), bulk("old"), "after SET {opt} {v}");
        assert_eq!(ttls(&mut c, "k"), (-1, -1), "after SET {opt} {v}");
    }
    for opt in ["EX", "PX"] {
        assert_eq!(
            c.cmd(&["SET", "k", "new", opt, "soon"]),
            Error("ERR value is not an integer or out of range".into())
        );
    }
    assert_eq!(c.cmd(&["GET", "k"]), bulk("old"));
    c.ping();
    server.stop();
}

#[test]
fn the_sweeper_removes_expired_keys_nobody_reads() {
    let server = Server::start(SERVER, &[]);
    let mut c = Client::new(&server);
    let mut pipeline = Vec::new();
    for i in 0..200 {
        pipeline.extend(encode(&["SET", &format!("k{i}"), "v", "PX", "200"]));
    }
    pipeline.extend(encode(&["RPUSH", "short list", "a"]));
    pipeline.extend(encode(&["PEXPIRE", "short list", "200"]));
    pipeline.extend(encode(&["SET", "stays", "v"]));
    c.send(&pipeline);
    for _ in 0..200 {
        assert_eq!(c.read(), ok());
    }
    assert_eq!(c.read(), Int(1));
    assert_eq!(c.read(), Int(1));
    assert_eq!(c.read(), ok());
    // DBSIZE counts keys not yet removed, as redis-server's does: only the
    // sweeper brings it down, since nothing reads the keys.
    let start = Instant::now();
    loop {
        let Int(n) = c.cmd(&["DBSIZE"]) else { panic!() };
        if n == 1 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{n} keys left after 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(c.cmd(&["GET", "stays"]), bulk("v"));
    server.stop();
}

#[test]
fn flushall_dbsize_select_and_quit() {
    let server = Server::start(SERVER, &[]);
    let mut c = Client::new(&server);
    assert_eq!(c.cmd(&["MSET", "a", "1", "b", "2"]), ok());
    assert_eq!(c.cmd(&["LPUSH", "l", "1"]), Int(1));
    assert_eq!(c.cmd(&["DBSIZE"]), Int(3));
    assert_eq!(c.cmd(&["FLUSHALL"]), ok());
    assert_eq!(c.cmd(&["DBSIZE"]), Int(0));
    assert_eq!(c.cmd(&["GET", "a"]), nil());
    assert_eq!(c.cmd(&["SET", "a", "again"]), ok());
    assert_eq!(c.cmd(&["FLUSHALL", "ASYNC"]), ok());
    assert_eq!(c.cmd(&["EXISTS", "a"]), Int(0));
    assert_err(c.cmd(&["FLUSHALL", "LATER"]), "ERR syntax error");
    assert_eq!(c.cmd(&["SELECT", "0"]), ok());
    assert_err(c.cmd(&["SELECT", "1"]), "ERR DB index is out of range");
    assert_eq!(c.cmd(&["QUIT"]), ok());
    assert_eq!(c.rest(), b"", "closed after QUIT");
    // A pipeline after QUIT is not run.
    let mut c = Client::new(&server);
    c.send(&[encode(&["QUIT"]), encode(&["SET", "after", "quit"])].concat());
    assert_eq!(c.rest(), b"+OK\r\n");
    let mut c = Client::new(&server);
    assert_eq!(c.cmd(&["GET", "after"]), nil());
    server.stop();
}

#[test]
fn command_and_config_answer_what_clients_ask() {
    let server = Server::start(SERVER, &[]);
    let mut c = Client::new(&server);
    let Int(count) = c.cmd(&["COMMAND", "COUNT"]) else {
        panic!()
    };
    let Array(Some(all)) = c.cmd(&["COMMAND"]) else {
        panic!()
    };
    assert_eq!(all.len() as i64, count);
    let mut names = Vec::new();
    for entry in &all {
        let Array(Some(fields)) = entry else {
            panic!("{entry:?}")
        };
        assert_eq!(fields.len(), 6, "{entry:?}");
        let Bulk(Some(name)) = &fields[0] else {
            panic!("{entry:?}")
        };
        names.push(String::from_utf8(name.clone()).unwrap());
    }
    for name in [
        "ping", "echo", "set", "get", "del", "exists", "incr", "decr", "incrby", "mset", "mget",
        "lpush", "rpush", "lpop", "rpop", "lrange", "llen", "expire", "ttl", "flushall", "command",
        "config",
    ] {
        assert!(names.iter().any(|n| n == name), "COMMAND lacks {name}");
    }
    let Array(Some(list)) = c.cmd(&["COMMAND", "LIST"]) else {
        panic!()
    };
    assert_eq!(list.len() as i64, count);
    assert_eq!(
        c.cmd(&["COMMAND", "INFO", "get", "nosuch"]),
        Array(Some(vec![
            Array(Some(vec![
                bulk("get"),
                Int(2),
                Array(Some(vec![Status("readonly".into()), Status("fast".into())])),
                Int(1),
                Int(1),
                Int(1),
            ])),
            Array(None),
        ]))
    );
    // redis-cli asks for COMMAND DOCS and, on an error, uses its own help.
    assert_err(c.cmd(&["COMMAND", "DOCS"]), "ERR unknown subcommand 'DOCS'");

    // What redis-benchmark sends first, byte for byte.
    c.send(b"*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$4\r\nsave\r\n*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$10\r\nappendonly\r\n");
    assert_eq!(c.read(), bulks(&["save", ""]));
    assert_eq!(c.read(), bulks(&["appendonly", "no"]));
    assert_eq!(c.cmd(&["CONFIG", "GET", "nosuch"]), bulks(&[]));
    let Array(Some(all)) = c.cmd(&["CONFIG", "GET", "*"]) else {
        panic!()
    };
    assert!(all.len() >= 4 && all.len() % 2 == 0, "{all:?}");
    assert_err(
        c.cmd(&["CONFIG", "SET", "save", ""]),
        "ERR unknown subcommand",
    );
    c.ping();
    server.stop();
}

#[test]
fn a_hundred_pipelined_commands_in_one_write_are_answered_in_order() {
    let server = Server::start(SERVER, &[]);
    let mut c = Client::new(&server);
    let mut pipeline = Vec::new();
    let mut want = Vec::new();
    for i in 0..100 {
        let key = format!("p{}", i / 4);
        match i % 4 {
            0 => {
                pipeline.extend(encode(&["SET", &key, &format!("v{i}")]));
                want.push(ok());
            }
            1 => {
                pipeline.extend(encode(&["GET", &key]));
                want.push(bulk(&format!("v{}", i - 1)));
            }
            2 => {
                pipeline.extend(encode(&["INCR", "counter"]));
                want.push(Int(i / 4 + 1));
            }
            _ => {
                pipeline.extend(encode(&["RPUSH", "list", &key]));
                want.push(Int(i / 4 + 1));
            }
        }
    }
    c.send(&pipeline);
    let got: Vec<Reply> = (0..100).map(|_| c.read()).collect();
    assert_eq!(got, want);

    // Dribbled a byte at a time, then two commands in one write.
    for b in encode(&["ECHO", "slow"]) {
        c.send(&[b]);
    }
    assert_eq!(c.read(), bulk("slow"));
    c.send(&[encode(&["LLEN", "list"]), encode(&["GET", "p0"])].concat());
    assert_eq!(c.read(), Int(25));
    assert_eq!(c.read(), bulk("v0"));
    server.stop();
}

#[test]
fn large_values_and_replies_larger_than_a_write() {
    let server = Server::start(SERVER, &[]);
    let mut c = Client::new(&server);
    let big: Vec<u8> = (0..3 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    assert_eq!(c.cmd(&[&b"SET"[..], b"big", &big]), ok());
    // Twenty GETs of 3 MiB each in one pipeline: 60 MiB of replies, written
    // as they pile up while the client reads.
    let mut pipeline = Vec::new();
    for _ in 0..20 {
        pipeline.extend(encode(&["GET", "big"]));
    }
    c.send(&pipeline);
    for _ in 0..20 {
        assert!(
            c.read() == Bulk(Some(big.clone())),
            "the value comes back whole"
        );
    }
    // A long list, ranged whole.
    let mut push = vec!["RPUSH".to_string(), "long".to_string()];
    push.extend((0..10_000).map(|i| i.to_string()));
    assert_eq!(c.cmd(&push), Int(10_000));
    let Array(Some(items)) = c.cmd(&["LRANGE", "long", "0", "-1"]) else {
        panic!()
    };
    assert_eq!(items.len(), 10_000);
    assert_eq!(items[9_999], bulk("9999"));
    c.ping();
    server.stop();
}

#[test]
fn inline_commands_are_words_on_a_line() {
    let server = Server::start(SERVER, &[]);
    let mut c = Client::new(&server);
    c.send(b"PING\r\n");
    assert_eq!(c.read(), Status("PONG".into()));
    c.send(b"SET  greeting \t hello\r\n");
    assert_eq!(c.read(), ok());
    c.send(b"GET greeting\n");
    assert_eq!(c.read(), bulk("hello"));
    // Empty lines get no reply; inline and multibulk mix in one pipeline.
    c.send(b"\r\n\n   \r\nECHO hi\r\n*2\r\n$4\r\nECHO\r\n$3\r\nbye\r\nINCR n\r\n");
    assert_eq!(c.read(), bulk("hi"));
    assert_eq!(c.read(), bulk("bye"));
    assert_eq!(c.read(), Int(1));
    // Garbage on a line is an unknown command; the connection goes on.
    c.send(b"\x00\x01\xff garbage\r\n");
    assert_err(c.read(), "ERR unknown command '???'");
    c.send(b"$5\r\n");
    assert_err(c.read(), "ERR unknown command '$5'");
    c.ping();
    server.stop();
}

#[test]
fn bad_input_closes_only_its_own_connection() {
    let server = Server::start(SERVER, &[]);
    let mut bystander = Client::new(&server);
    bystander.ping();
    let long_line = vec![b'a'; 70 * 1024];
    let cases: &[(&[u8], &str)] = &[
        (
            b"*abc\r\n",
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*-5\r\n",
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*99999999999\r\n",
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*1\r\n$99999999999\r\n",
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*1\r\n$-5\r\nabc\r\n",
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*1\r\n$-1\r\n",
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*1\r\n$1x\r\n",
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*1\r\n$1111111111111111111111111111111111111111\r\n",
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*2\r\n$3\r\nGET\r\n:1\r\n",
            "-ERR Protocol error: expected '$', got ':'\r\n",
        ),
        (
            b"*1\r\n$4\r\nPINGPONG\r\n",
            "-ERR Protocol error: expected CRLF after a bulk string\r\n",
        ),
        (
            &long_line,
            "-ERR Protocol error: too big inline request\r\n",
        ),
    ];
    for (input, want) in cases {
        let mut c = Client::new(&server);
        c.send(input);
        assert_eq!(
            String::from_utf8_lossy(&c.rest()),
            *want,
            "for {:?}",
            String::from_utf8_lossy(&input[..input.len().min(60)])
        );
        bystander.ping();
        Client::new(&server).ping();
    }
    // Commands before the bad input are answered; nothing after it runs.
    let mut c = Client::new(&server);
    c.send(
        &[
            encode(&["SET", "before", "1"]),
            b"*x\r\n".to_vec(),
            encode(&["SET", "after", "1"]),
        ]
        .concat(),
    );
    assert_eq!(
        String::from_utf8_lossy(&c.rest()),
        "+OK\r\n-ERR Protocol error: invalid multibulk length\r\n"
    );
    assert_eq!(bystander.cmd(&["EXISTS", "before", "after"]), Int(1));
    server.stop();
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

#[test]
fn a_declared_length_allocates_nothing_until_its_bytes_come() {
    let server = Server::start(SERVER, &[]);
    let before = rss_kib(server.pid());
    // 30 connections each announce a 15 MB value and send 10 bytes of it:
    // had the server reserved what they announce, it would hold 450 MB.
    // Each sends a PING in the same write, so its reply shows the server has
    // read that far (and parsed the announcement; it reads on at once).
    let mut conns: Vec<Client> = (0..30).map(|_| Client::new(&server)).collect();
    for c in &mut conns {
        c.send(b"PING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$15000000\r\n0123456789");
    }
    for c in &mut conns {
        assert_eq!(c.read(), Status("PONG".into()));
    }
    let mut probe = Client::new(&server);
    probe.ping();
    let after = rss_kib(server.pid());
    assert!(
        after < before + 64 * 1024,
        "RSS went from {before} KiB to {after} KiB"
    );
    // One of them sends the rest: the value arrives whole.
    let rest: Vec<u8> = (10..15_000_000).map(|i| b"0123456789"[i % 10]).collect();
    conns[0].send(&rest);
    conns[0].send(b"\r\n");
    assert_eq!(conns[0].read(), ok());
    let Bulk(Some(v)) = probe.cmd(&["GET", "k"]) else {
        panic!()
    };
    assert_eq!(v.len(), 15_000_000);
    assert!(v
        .iter()
        .enumerate()
        .all(|(i, &b)| b == b"0123456789"[i % 10]));
    server.stop();
}

#[test]
fn clients_that_stop_halfway_do_not_disturb_the_server() {
    let server = Server::start(SERVER, &[]);
    let mut bystander = Client::new(&server);
    bystander.ping();
    let set = encode(&["SET", "half", "value"]);
    for i in 0..40 {
        let mut c = server.connect();
        send(&mut c, &set[..1 + i % (set.len() - 1)]);
        drop(c); // closed with half a command sent
    }
    assert_eq!(
        bystander.cmd(&["EXISTS", "half"]),
        Int(0),
        "half a SET does nothing"
    );
    // Half a command, then the write side shut: the server closes its side
    // without a reply.
    let mut c = Client::new(&server);
    c.send(&set[..set.len() - 3]);
    c.writer.shutdown(Shutdown::Write).unwrap();
    assert_eq!(c.rest(), b"");
    // A pipeline cut short: the whole commands are answered.
    let mut c = Client::new(&server);
    c.send(&[encode(&["PING"]), encode(&["ECHO", "x"]), set[..9].to_vec()].concat());
    c.writer.shutdown(Shutdown::Write).unwrap();
    assert_eq!(c.rest(), b"+PONG\r\n$1\r\nx\r\n");
    bystander.ping();
    Client::new(&server).ping();
    server.stop();
}

#[test]
fn idle_and_trickling_clients_are_closed_after_the_idle_timeout() {
    let server = Server::start(SERVER, &["--idle-timeout", "1"]);
    // Silent.
    let start = Instant::now();
    let silent = Client::new(&server);
    let mut busy = Client::new(&server);
    busy.ping();
    assert_eq!(silent.rest(), b"", "closed without a reply");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(20),
        "closed after {waited:?}, with a 1 s idle timeout"
    );
    // Half a command, then nothing.
    let start = Instant::now();
    let mut half = Client::new(&server);
    half.send(b"*2\r\n$4\r\nECHO\r\n$100\r\nabc");
    assert_eq!(half.rest(), b"");
    assert!(start.elapsed() < Duration::from_secs(20));
    // A byte every 300 ms: never idle for a second, but the command is not
    // whole a second after it began.
    let mut slow = server.connect();
    let start = Instant::now();
    let cmd = encode(&["ECHO", "trickle"]);
    let mut closed_after = None;
    for &b in &cmd[..cmd.len() - 1] {
        if slow.write_all(&[b]).is_err() {
            closed_after = Some(start.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
        if start.elapsed() > Duration::from_secs(6) {
            break;
        }
    }
    let closed_after = closed_after.unwrap_or_else(|| {
        assert_eq!(read_to_close(&mut slow), b"", "closed without a reply");
        start.elapsed()
    });
    assert!(
        closed_after < Duration::from_secs(5),
        "a trickling client held its connection for {closed_after:?}"
    );
    // A connection that pauses between whole commands stays.
    let mut c = Client::new(&server);
    for _ in 0..3 {
        c.ping();
        std::thread::sleep(Duration::from_millis(300));
    }
    c.ping();
    Client::new(&server).ping();
    server.stop();
}

#[test]
fn many_clients_at_once_see_one_store() {
    let server = Server::start(SERVER, &[]);
    const CONNS: usize = 300;
    let mut conns: Vec<Client> = (0..CONNS).map(|_| Client::new(&server)).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        c.send(
            &[
                encode(&["INCR", "hits"]),
                encode(&["SET", &format!("own{i}"), &i.to_string()]),
                encode(&["RPUSH", "all", &i.to_string()]),
            ]
            .concat(),
        );
    }
    for c in &mut conns {
        let Int(n) = c.read() else { panic!() };
        assert!((1..=CONNS as i64).contains(&n));
        assert_eq!(c.read(), ok());
        assert!(matches!(c.read(), Int(_)));
    }
    // Threads hammering the same keys: no update is lost.
    let addr = server.addr;
    let workers: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(server_util::PATIENCE)).unwrap();
                let mut c = Client {
                    reader: BufReader::new(s.try_clone().unwrap()),
                    writer: s,
                };
                for i in 0..500 {
                    assert!(matches!(c.cmd(&["INCR", "hot"]), Int(_)));
                    assert!(matches!(
                        c.cmd(&["LPUSH", "q", &format!("{t}:{i}")]),
                        Int(_)
                    ));
                    assert!(matches!(c.cmd(&["RPOP", "q"]), Bulk(Some(_))));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let c = &mut conns[0];
    assert_eq!(c.cmd(&["GET", "hits"]), bulk(&CONNS.to_string()));
    assert_eq!(c.cmd(&["LLEN", "all"]), Int(CONNS as i64));
    assert_eq!(c.cmd(&["GET", "hot"]), bulk("2000"));
    assert_eq!(c.cmd(&["LLEN", "q"]), Int(0));
    for i in [0, CONNS / 2, CONNS - 1] {
        assert_eq!(c.cmd(&["GET", &format!("own{i}")]), bulk(&i.to_string()));
    }
    server.stop();
}

#[test]
fn bad_arguments_exit_with_code_2() {
    for (args, says) in [
        (&["--threads", "many"][..], "invalid value"),
        (&["--addr", "nonsense"], "not an address"),
        (&["--idle-timeout", "0"], "--idle-timeout"),
        (&["--no-such-flag"], "unexpected argument"),
    ] {
        assert_refused(SERVER, args, says);
    }
}

#[test]
fn help_lists_the_flags() {
    let out = server_util::run(SERVER, &["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--addr",
        "--threads",
        "--idle-timeout",
        "listening on",
        "Redis",
    ] {
        assert!(
            help.contains(flag),
            "--help does not mention {flag}:\n{help}"
        );
    }
}
