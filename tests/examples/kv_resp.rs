//! Property tests of the RESP parser of `examples/kv_server` (included
//! from the example's own source): tens of thousands of random commands,
//! random bytes, and valid pipelines mutated at random, each checked for
//!
//! - no panic;
//! - bounded consumption: a command's length is within the buffer and its
//!   arguments within the command; "incomplete" only ever for less than
//!   `MAX_COMMAND + MAX_LINE` bytes (so a connection cannot be made to
//!   buffer without bound), and its `need` hint beyond what is held;
//! - the `need` hint is sound: no prefix shorter than it parses otherwise;
//! - prefixes of a command are incomplete, and the command alone parses
//!   the same;
//! - feeding the bytes in random chunks, parsing only once `need` is
//!   reached (as the server does), finds the same commands as parsing it
//!   all at once;
//! - valid encodings round-trip.
//!
//! The generator is a fixed-seed xorshift, so a failure repeats; set
//! `KV_RESP_SEED` to try other seeds.

#[path = "../../examples/kv_server/resp.rs"]
mod resp;

use std::ops::Range;

use resp::{Error, Parsed, MAX_ARGS, MAX_COMMAND, MAX_INLINE, MAX_LINE};

struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = std::env::var("KV_RESP_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x2545_f491_4f6c_dd1d);
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0), near enough.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }
}

/// Bytes RESP gives meaning to, drawn more often than others.
const SPECIAL: &[u8] = b"*$\r\n-0123456789 \t+:";

fn random_byte(rng: &mut Rng) -> u8 {
    if rng.chance(2) {
        rng.pick(SPECIAL)
    } else {
        rng.next() as u8
    }
}

fn random_arg(rng: &mut Rng) -> Vec<u8> {
    let len = match rng.below(10) {
        0 => 0,
        1 => rng.below(2000),
        _ => rng.below(24),
    };
    (0..len).map(|_| random_byte(rng)).collect()
}

fn random_command(rng: &mut Rng) -> Vec<Vec<u8>> {
    let n = if rng.chance(20) { 0 } else { 1 + rng.below(8) };
    (0..n).map(|_| random_arg(rng)).collect()
}

fn encode(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    resp::command(&mut out, args);
    out
}

fn parse(buf: &[u8]) -> (Result<Parsed, Error>, Vec<Range<usize>>) {
    let mut args = vec![0..0; 3]; // must be cleared by the parser
    let r = resp::parse(buf, &mut args);
    (r, args)
}

/// The invariants every parse must keep, whatever the input.
fn check(buf: &[u8], seed: u64) {
    let (r, args) = parse(buf);
    let ctx = || format!("seed {seed}, input {:?}", String::from_utf8_lossy(buf));
    match r {
        Ok(Parsed::Incomplete { need }) => {
            assert!(
                need > buf.len(),
                "need {need} not beyond {}: {}",
                buf.len(),
                ctx()
            );
            assert!(
                buf.len() < MAX_COMMAND + MAX_LINE,
                "incomplete with {} bytes held: {}",
                buf.len(),
                ctx()
            );
            // Sound hint: more bytes short of `need` change nothing. (The
            // bytes added are arbitrary: the claim is about any input.)
            for extra in [1, 2, 7] {
                if buf.len() + extra < need && extra < 64 {
                    let mut more = buf.to_vec();
                    more.extend(std::iter::repeat_n(b'x', extra));
                    let (r2, _) = parse(&more);
                    assert!(
                        matches!(r2, Ok(Parsed::Incomplete { .. })),
                        "{extra} more bytes, still short of need {need}, gave {r2:?}: {}",
                        ctx()
                    );
                }
            }
        }
        Ok(Parsed::Command { len }) => {
            assert!(len > 0 && len <= buf.len(), "length {len}: {}", ctx());
            assert!(len <= MAX_COMMAND, "length {len}: {}", ctx());
            assert!(args.len() <= MAX_ARGS);
            for a in &args {
                assert!(
                    a.start <= a.end && a.end <= len,
                    "argument {a:?}: {}",
                    ctx()
                );
            }
            // The command alone parses the same; a prefix is incomplete.
            let (alone, args_alone) = parse(&buf[..len]);
            assert_eq!(alone, Ok(Parsed::Command { len }), "{}", ctx());
            assert_eq!(args_alone, args, "{}", ctx());
            for cut in [0, 1, len / 2, len - 1] {
                if cut < len {
                    let (r, _) = parse(&buf[..cut]);
                    assert!(
                        matches!(r, Ok(Parsed::Incomplete { .. })),
                        "prefix of {cut} of a {len}-byte command gave {r:?}: {}",
                        ctx()
                    );
                }
            }
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(
                !msg.contains(['\r', '\n']) && !msg.is_empty(),
                "error text {msg:?}: {}",
                ctx()
            );
        }
    }
}

/// What parsing `input` as a stream yields: the commands' arguments in
/// order, then how it ended.
#[derive(Debug, PartialEq)]
enum End {
    /// Bytes left over that are not a whole command.
    Incomplete(usize),
    Error(Error),
}

fn parse_all(input: &[u8]) -> (Vec<Vec<Vec<u8>>>, End) {
    let mut cmds = Vec::new();
    let mut at = 0;
    let mut args = Vec::new();
    loop {
        match resp::parse(&input[at..], &mut args) {
            Ok(Parsed::Command { len }) => {
                cmds.push(
                    args.iter()
                        .map(|r| input[at..][r.clone()].to_vec())
                        .collect(),
                );
                at += len;
            }
            Ok(Parsed::Incomplete { .. }) => return (cmds, End::Incomplete(input.len() - at)),
            Err(e) => return (cmds, End::Error(e)),
        }
    }
}

/// As [`parse_all`], with the bytes arriving in random chunks and parsed
/// by one resumable [`resp::Parser`], as the server does: for half the
/// streams a parse is attempted only once the buffer holds `need` bytes (as
/// the server does), for the other half after every chunk, so that the
/// parser resumes from every point of a command.
fn parse_chunked(input: &[u8], rng: &mut Rng) -> (Vec<Vec<Vec<u8>>>, End) {
    let mut cmds = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let gate = rng.chance(2);
    let mut need = 1;
    let mut fed = 0;
    let mut parser = resp::Parser::new();
    while fed < input.len() {
        let most = if rng.chance(3) { 8 } else { 600 };
        let n = 1 + rng.below(most);
        let n = n.min(input.len() - fed);
        buf.extend_from_slice(&input[fed..fed + n]);
        fed += n;
        let mut at = 0;
        while buf.len() - at >= if gate { need } else { 1 } {
            match parser.parse(&buf[at..]) {
                Ok(Parsed::Command { len }) => {
                    let args = parser.args();
                    cmds.push(args.iter().map(|r| buf[at..][r.clone()].to_vec()).collect());
                    at += len;
                    need = 1;
                }
                Ok(Parsed::Incomplete { need: n }) => {
                    assert!(n > buf.len() - at, "need {n} not beyond what is held");
                    need = n;
                    break;
                }
                Err(e) => return (cmds, End::Error(e)),
            }
        }
        buf.drain(..at); // `need` counts from the front of what is left
    }
    (cmds, End::Incomplete(buf.len()))
}

/// Mutates a valid pipeline in one of several ways.
fn mutate(rng: &mut Rng, buf: &mut Vec<u8>) {
    if buf.is_empty() {
        buf.push(random_byte(rng));
        return;
    }
    for _ in 0..1 + rng.below(3) {
        let i = rng.below(buf.len().max(1));
        match rng.below(7) {
            0 => buf[i] = random_byte(rng),
            1 => buf.insert(i, random_byte(rng)),
            2 if buf.len() > 1 => {
                buf.remove(i);
            }
            3 => buf.truncate(i),
            4 => {
                // A length or count rewritten: huge, negative, or off by one.
                let digits: &[&[u8]] = &[
                    b"-1",
                    b"-5",
                    b"0",
                    b"99999999999",
                    b"16777216",
                    b"9223372036854775807",
                    b"9223372036854775808",
                    b"00",
                    b"+3",
                ];
                if let Some(p) = buf[i..].iter().position(|&b| b == b'$' || b == b'*') {
                    let at = i + p + 1;
                    let end = buf[at..]
                        .iter()
                        .position(|&b| !b.is_ascii_digit() && b != b'-')
                        .map_or(buf.len(), |e| at + e);
                    buf.splice(at..end, rng.pick(digits).iter().copied());
                }
            }
            5 => {
                // A stretch repeated.
                let j = (i + rng.below(50)).min(buf.len());
                let piece = buf[i..j].to_vec();
                buf.splice(i..i, piece);
            }
            _ => {
                if let Some(p) = buf[i..].windows(2).position(|w| w == b"\r\n") {
                    buf.remove(i + p + rng.below(2));
                }
            }
        }
        if buf.is_empty() {
            return;
        }
    }
}

#[test]
fn valid_commands_round_trip_whole_and_in_chunks() {
    let mut rng = Rng::new();
    for round in 0..5_000 {
        let seed = rng.0;
        let cmds: Vec<_> = (0..1 + rng.below(6))
            .map(|_| random_command(&mut rng))
            .collect();
        let mut pipeline = Vec::new();
        for c in &cmds {
            let enc = encode(c);
            check(&enc, seed);
            let (r, args) = parse(&enc);
            assert_eq!(r, Ok(Parsed::Command { len: enc.len() }), "round {round}");
            let got: Vec<Vec<u8>> = args.iter().map(|a| enc[a.clone()].to_vec()).collect();
            assert_eq!(&got, c, "round {round}, seed {seed}");
            pipeline.extend_from_slice(&enc);
        }
        assert_eq!(parse_all(&pipeline), (cmds.clone(), End::Incomplete(0)));
        assert_eq!(
            parse_chunked(&pipeline, &mut rng),
            (cmds, End::Incomplete(0)),
            "round {round}, seed {seed}"
        );
    }
}

#[test]
fn inline_commands_split_on_spaces_and_tabs() {
    let mut rng = Rng::new();
    for _ in 0..5_000 {
        let words: Vec<Vec<u8>> = (0..rng.below(6))
            .map(|_| {
                (0..1 + rng.below(12))
                    .map(|_| loop {
                        let b = random_byte(&mut rng);
                        if !b" \t\r\n".contains(&b) {
                            break b;
                        }
                    })
                    .collect()
            })
            .collect();
        let mut line = Vec::new();
        for w in &words {
            for _ in 0..1 + rng.below(2) {
                line.push(rng.pick(b" \t"));
            }
            line.extend_from_slice(w);
        }
        if line.first() == Some(&b' ') && rng.chance(2) {
            line.remove(0);
        }
        if line.first() == Some(&b'*') {
            continue; // that is multibulk
        }
        line.extend_from_slice(if rng.chance(2) { b"\r\n" } else { b"\n" });
        check(&line, rng.0);
        let (cmds, end) = parse_all(&line);
        assert_eq!(end, End::Incomplete(0));
        assert_eq!(
            cmds,
            vec![words],
            "line {:?}",
            String::from_utf8_lossy(&line)
        );
    }
}

#[test]
fn mutated_pipelines_keep_the_invariants() {
    let mut rng = Rng::new();
    let mut tally = Tally::default();
    for round in 0..20_000 {
        let seed = rng.0;
        let mut buf = Vec::new();
        for _ in 0..1 + rng.below(4) {
            if rng.chance(4) {
                buf.extend_from_slice(b"SET key value\r\n");
            } else {
                buf.extend_from_slice(&encode(&random_command(&mut rng)));
            }
        }
        mutate(&mut rng, &mut buf);
        check(&buf, seed);
        let whole = parse_all(&buf);
        tally.see(&whole);
        // Every command of the stream keeps the invariants at its start.
        let mut at = 0;
        let mut args = Vec::new();
        while let Ok(Parsed::Command { len }) = resp::parse(&buf[at..], &mut args) {
            at += len;
            check(&buf[at..], seed);
        }
        let chunked = parse_chunked(&buf, &mut rng);
        // A stream that errs in chunks errs at the same command; one that
        // ends incomplete keeps the same bytes.
        assert_eq!(
            chunked,
            whole,
            "round {round}, seed {seed}: {:?}",
            String::from_utf8_lossy(&buf)
        );
    }
    tally.assert_varied();
}

/// How the streams of a test ended, to check the generator reaches every
/// outcome.
#[derive(Default, Debug)]
struct Tally {
    commands: usize,
    complete: usize,
    incomplete: usize,
    errors: std::collections::HashMap<std::mem::Discriminant<Error>, usize>,
}

impl Tally {
    fn see(&mut self, (cmds, end): &(Vec<Vec<Vec<u8>>>, End)) {
        self.commands += cmds.len();
        match end {
            End::Incomplete(0) => self.complete += 1,
            End::Incomplete(_) => self.incomplete += 1,
            End::Error(e) => *self.errors.entry(std::mem::discriminant(e)).or_default() += 1,
        }
    }

    fn assert_varied(&self) {
        assert!(
            self.commands > 1000 && self.complete > 100 && self.incomplete > 100,
            "{self:?}"
        );
        for e in [
            Error::MultibulkLength,
            Error::BulkLength,
            Error::ExpectedDollar(b'x'),
            Error::ExpectedCrlf,
            Error::TooLarge,
        ] {
            let n = self.errors.get(&std::mem::discriminant(&e)).copied();
            assert!(n.unwrap_or(0) >= 10, "{e:?} seen {n:?} times: {self:?}");
        }
    }
}

#[test]
fn random_bytes_keep_the_invariants() {
    let mut rng = Rng::new();
    for _ in 0..20_000 {
        let seed = rng.0;
        let most = if rng.chance(10) { 5_000 } else { 60 };
        let len = rng.below(most);
        let mut buf: Vec<u8> = (0..len).map(|_| random_byte(&mut rng)).collect();
        if rng.chance(2) && !buf.is_empty() {
            buf[0] = b'*';
        }
        check(&buf, seed);
        let _ = parse_all(&buf);
    }
}

#[test]
fn hostile_lengths_are_refused_before_anything_is_allocated() {
    let cases: &[(&[u8], Result<Parsed, Error>)] = &[
        (b"*3\r\n$-1\r\n", Err(Error::BulkLength)),
        (b"*1\r\n$-5\r\nabc\r\n", Err(Error::BulkLength)),
        (b"*1\r\n$99999999999\r\n", Err(Error::BulkLength)),
        (b"*1\r\n$16777217\r\n", Err(Error::BulkLength)),
        (b"*1\r\n$16777216\r\n", Err(Error::TooLarge)),
        (b"*1\r\n$16777200\r\n", Err(Error::TooLarge)),
        (
            b"*1\r\n$99999999999999999999999\r\n",
            Err(Error::BulkLength),
        ),
        (b"*99999999999\r\n", Err(Error::MultibulkLength)),
        (b"*1048577\r\n", Err(Error::MultibulkLength)),
        (b"*-2\r\n", Err(Error::MultibulkLength)),
        (b"*x\r\n", Err(Error::MultibulkLength)),
        (b"*+1\r\n$1\r\na\r\n", Err(Error::MultibulkLength)),
        (b"*1\r\n$01\r\na\r\n", Err(Error::BulkLength)),
        (b"*1\r\n:1\r\n", Err(Error::ExpectedDollar(b':'))),
        (b"*1\r\n$1\r\nab\r\n", Err(Error::ExpectedCrlf)),
        (b"*1\r\n$1\r\na\n\n", Err(Error::ExpectedCrlf)),
        (b"*1\r\n$1\r\r\na\r\n", Err(Error::BulkLength)),
        // Empty commands: consumed, nothing to run.
        (b"*0\r\n", Ok(Parsed::Command { len: 4 })),
        (b"*-1\r\n", Ok(Parsed::Command { len: 5 })),
        (b"\r\n", Ok(Parsed::Command { len: 2 })),
        // A length near the limit waits for its bytes: the hint says how
        // many, and nothing of that size exists yet.
        (
            b"*1\r\n$16777190\r\n",
            Ok(Parsed::Incomplete {
                need: 15 + 16_777_190 + 2,
            }),
        ),
        (b"*1048576\r\n", Ok(Parsed::Incomplete { need: 11 })),
    ];
    for (input, want) in cases {
        let (got, args) = parse(input);
        assert_eq!(&got, want, "{:?}", String::from_utf8_lossy(input));
        if matches!(got, Ok(Parsed::Command { .. })) {
            assert!(args.is_empty());
        }
        check(input, 0);
    }

    // A header line that never ends.
    let long = [b"*".as_slice(), &[b'1'; 40]].concat();
    assert_eq!(parse(&long).0, Err(Error::MultibulkLength));
    let long = [b"*1\r\n$".as_slice(), &[b'1'; 40]].concat();
    assert_eq!(parse(&long).0, Err(Error::BulkLength));
    // An inline line that never ends.
    let mut line = vec![b'a'; MAX_INLINE - 1];
    assert_eq!(parse(&line).0, Ok(Parsed::Incomplete { need: MAX_INLINE }));
    line.push(b'a');
    assert_eq!(parse(&line).0, Err(Error::LongInline));
    line[MAX_INLINE - 1] = b'\n';
    assert_eq!(parse(&line).0, Ok(Parsed::Command { len: MAX_INLINE }));
}

#[test]
fn integers_parse_as_redis_writes_them() {
    let mut rng = Rng::new();
    let mut out = Vec::new();
    let edges = [
        0,
        1,
        -1,
        9,
        10,
        -10,
        i64::MAX,
        i64::MIN,
        i64::MAX - 1,
        i64::MIN + 1,
    ];
    for i in 0..20_000 {
        let n = match edges.get(i) {
            Some(&e) => e,
            None => (rng.next() as i64) >> rng.below(64),
        };
        out.clear();
        resp::write_int(&mut out, n);
        assert_eq!(out, n.to_string().as_bytes());
        assert_eq!(resp::parse_i64(&out), Some(n));
    }
    for bad in [
        &b""[..],
        b"-",
        b"+1",
        b" 1",
        b"1 ",
        b"01",
        b"-0",
        b"--1",
        b"1a",
        b"9223372036854775808",
        b"-9223372036854775809",
        b"99999999999999999999999",
    ] {
        assert_eq!(
            resp::parse_i64(bad),
            None,
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

/// A command of `n` one-byte arguments, as `MGET a b c ...`.
fn many_small_args(n: usize) -> Vec<u8> {
    let mut cmd = format!("*{}\r\n$4\r\nMGET\r\n", n + 1).into_bytes();
    for i in 0..n {
        cmd.extend_from_slice(b"$1\r\n");
        cmd.push(b'a' + (i % 26) as u8);
        cmd.extend_from_slice(b"\r\n");
    }
    cmd
}

/// Feeds `cmd` to one parser `chunk` bytes at a time, parsing after every
/// piece; the parser's work once the command is whole.
fn examined_in_pieces(cmd: &[u8], chunk: usize) -> u64 {
    let mut parser = resp::Parser::new();
    let mut held = 0;
    loop {
        held = (held + chunk).min(cmd.len());
        match parser.parse(&cmd[..held]) {
            Ok(Parsed::Command { len }) => {
                assert_eq!((len, held), (cmd.len(), cmd.len()));
                return parser.examined();
            }
            Ok(Parsed::Incomplete { need }) => assert!(need > held && held < cmd.len()),
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn a_command_sent_in_small_pieces_costs_work_linear_in_its_size() {
    // 250,000 arguments (1.75 MB) in 2 KiB pieces: a parser that started
    // again from the command's first byte at every piece would look at
    // half the command on average at each of about 850 pieces.
    let cmd = many_small_args(250_000);
    let whole = examined_in_pieces(&cmd, cmd.len());
    assert!(
        whole <= cmd.len() as u64,
        "{whole} bytes looked at to parse {} at once",
        cmd.len()
    );
    for chunk in [2048, 100, 7, 1] {
        let pieces = examined_in_pieces(&cmd, chunk);
        // Each piece may cost one argument's header looked at again.
        let bound = whole + (cmd.len() / chunk + 1) as u64 * (MAX_LINE as u64 + 3);
        assert!(
            pieces <= bound,
            "{pieces} bytes looked at in {chunk}-byte pieces, {whole} at once \
             (bound {bound}) for a {}-byte command",
            cmd.len()
        );
    }
    // The arguments are all there, in order.
    let mut parser = resp::Parser::new();
    for held in (0..cmd.len()).step_by(2048) {
        assert!(matches!(
            parser.parse(&cmd[..held]),
            Ok(Parsed::Incomplete { .. })
        ));
    }
    assert_eq!(parser.parse(&cmd), Ok(Parsed::Command { len: cmd.len() }));
    let args = parser.args();
    assert_eq!(args.len(), 250_001);
    assert_eq!(&cmd[args[0].clone()], b"MGET");
    for (i, a) in args[1..].iter().enumerate() {
        assert_eq!(cmd[a.clone()], [b'a' + (i % 26) as u8]);
    }
}

#[test]
fn a_long_inline_line_sent_in_pieces_is_scanned_once() {
    let mut line = vec![b'x'; MAX_INLINE - 100];
    line[10] = b' ';
    line.extend_from_slice(b"\r\n");
    let mut parser = resp::Parser::new();
    for held in 1..line.len() {
        assert!(matches!(
            parser.parse(&line[..held]),
            Ok(Parsed::Incomplete { .. })
        ));
    }
    assert_eq!(parser.parse(&line), Ok(Parsed::Command { len: line.len() }));
    assert_eq!(parser.args(), &[0..10, 11..line.len() - 2]);
    // Each byte found to be no `\n` once, then the whole line split once.
    assert!(
        parser.examined() <= 2 * line.len() as u64,
        "{} bytes looked at for a {}-byte line",
        parser.examined(),
        line.len()
    );
}
