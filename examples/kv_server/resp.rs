//! RESP2, the Redis protocol: a parser for the commands a client sends and
//! the writers of the replies a server sends back.
//!
//! A command comes in one of two forms:
//!
//! - **multibulk**, what every client library sends: `*N\r\n` then N bulk
//!   strings, each `$LEN\r\n` followed by LEN bytes and `\r\n`;
//! - **inline**, what a person types into `telnet`: one line ending in
//!   `\n` (or `\r\n`), split into arguments on spaces and tabs (no quoting).
//!
//! A [`Parser`] looks at the front of a buffer and finds either a whole
//! command (its arguments as byte ranges into the buffer: nothing is
//! copied), or that more bytes are needed, or a protocol error, after which
//! the stream cannot be resynchronised and the server replies with the
//! error and closes the connection, as redis-server does. A command that
//! arrives in many reads is parsed once, not once per read: the parser
//! keeps what it found and goes on from where it stopped, so the work is
//! linear in the command's size whatever the size of the reads. [`parse`]
//! is the same parse starting afresh.
//!
//! Nothing here allocates in proportion to what the input *declares*, only
//! to what it holds: a `$4000000000` is refused by its header, and a
//! command is never larger than [`MAX_COMMAND`], so a connection that keeps
//! a half command buffered holds less than `MAX_COMMAND + MAX_LINE` bytes.

// Each binary that includes this file uses only part of it.
#![allow(dead_code)]

use std::fmt;
use std::ops::Range;

/// The largest whole command, headers included (16 MiB).
pub const MAX_COMMAND: usize = 16 * 1024 * 1024;
/// The largest bulk string (the whole command is bounded anyway).
pub const MAX_BULK: usize = MAX_COMMAND;
/// The most arguments in one multibulk command.
pub const MAX_ARGS: usize = 1024 * 1024;
/// The longest inline command line (as redis-server's 64 KiB).
pub const MAX_INLINE: usize = 64 * 1024;
/// The longest header line (the number in `*N` or `$LEN` and its
/// `\r\n`).
pub const MAX_LINE: usize = 32;

/// What the front of a buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Not a whole command: parse again once the buffer holds at least
    /// `need` bytes (always more than it holds now).
    Incomplete { need: usize },
    /// A whole command of `len` bytes, its arguments in `args` (none for an
    /// empty line or `*0`, which get no reply).
    Command { len: usize },
}

/// Input that is not RESP; the connection cannot go on after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// `*` not followed by a count in `-1..=MAX_ARGS` (`*0` and `*-1` are
    /// empty commands).
    MultibulkLength,
    /// `$` not followed by a length in `0..=MAX_BULK`.
    BulkLength,
    /// An argument of a multibulk command does not start with `$`.
    ExpectedDollar(u8),
    /// A bulk string not followed by `\r\n`.
    ExpectedCrlf,
    /// An inline line longer than [`MAX_INLINE`].
    LongInline,
    /// A command larger than [`MAX_COMMAND`].
    TooLarge,
}

impl fmt::Display for Error {
    /// The text after `-ERR Protocol error: ` (no CR or LF in it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::MultibulkLength => f.write_str("invalid multibulk length"),
            Error::BulkLength => f.write_str("invalid bulk length"),
            Error::ExpectedDollar(b) if b.is_ascii_graphic() => {
                write!(f, "expected '$', got '{}'", *b as char)
            }
            Error::ExpectedDollar(b) => write!(f, "expected '$', got byte {b:#04x}"),
            Error::ExpectedCrlf => f.write_str("expected CRLF after a bulk string"),
            Error::LongInline => f.write_str("too big inline request"),
            Error::TooLarge => f.write_str("command too large"),
        }
    }
}

/// Parses the command at the front of `buf`, putting the byte range of
/// each of its arguments into `args` (cleared first). Each call starts
/// afresh: a caller that parses a command arriving piece by piece uses a
/// [`Parser`], which resumes where the last call stopped.
pub fn parse(buf: &[u8], args: &mut Vec<Range<usize>>) -> Result<Parsed, Error> {
    let mut parser = Parser {
        args: std::mem::take(args),
        ..Parser::new()
    };
    let r = parser.parse(buf);
    *args = parser.args;
    r
}

/// A parser that resumes: a command that arrives in many reads is parsed
/// once in all, not once per read.
///
/// # States
///
/// - [`State::Start`]: no command begun; the next call looks at `buf[0]`.
/// - [`State::Multibulk`]: the `*N` header and the arguments before
///   `at` are parsed (their ranges are in `args`); `left` arguments are to
///   come, the next one starting at `at`.
/// - [`State::Inline`]: the bytes before `at` hold no `\n`.
///
/// A call that finds a whole command returns it, its arguments readable
/// through [`Parser::args`] until the next call, and goes back to `Start`;
/// one that finds the command incomplete keeps its state. So between a call
/// that answered [`Parsed::Incomplete`] and the next, the caller keeps the
/// command's bytes at the front of the buffer it passes and only appends to
/// them (moving the whole buffer is fine: ranges count from its front). A
/// caller that drops a half command calls [`Parser::reset`]. After an
/// error the stream cannot be resynchronised; the parser is reset.
#[derive(Debug, Default)]
pub struct Parser {
    state: State,
    /// The arguments found so far, as ranges into the buffer.
    args: Vec<Range<usize>>,
    /// Bytes of input looked at, over every call: see [`Parser::examined`].
    examined: u64,
}

/// Where a [`Parser`] stands: see its documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    #[default]
    Start,
    Multibulk {
        left: usize,
        at: usize,
    },
    Inline {
        at: usize,
    },
}

impl Parser {
    /// A parser at the start of a command.
    pub fn new() -> Parser {
        Parser::default()
    }

    /// Parses on from where the last call stopped; `buf` starts where the
    /// command being parsed starts (see the type's documentation).
    pub fn parse(&mut self, buf: &[u8]) -> Result<Parsed, Error> {
        if self.state == State::Start {
            self.args.clear();
        }
        let r = match self.state {
            State::Start => match buf.first() {
                None => Ok(Parsed::Incomplete { need: 1 }),
                Some(b'*') => self.multibulk_header(buf),
                Some(_) => self.inline(buf, 0),
            },
            State::Multibulk { left, at } => self.multibulk_args(buf, left, at),
            State::Inline { at } => self.inline(buf, at),
        };
        match r {
            Ok(Parsed::Incomplete { .. }) => {}
            Ok(Parsed::Command { .. }) | Err(_) => self.state = State::Start,
        }
        r
    }

    /// The arguments of the command the last call found whole, as ranges
    /// into the buffer it was given (the name first).
    pub fn args(&self) -> &[Range<usize>] {
        &self.args
    }

    /// Forgets a half-parsed command.
    pub fn reset(&mut self) {
        self.state = State::Start;
        self.args.clear();
    }

    /// Whether a command is half parsed.
    pub fn in_command(&self) -> bool {
        self.state != State::Start
    }

    /// Gives back the argument list's memory if it is larger than `keep`
    /// ranges and no command is half parsed (a half-parsed command's
    /// arguments are kept: parsing them again is what a resumable parser
    /// avoids).
    pub fn trim(&mut self, keep: usize) {
        if !self.in_command() && self.args.capacity() > keep {
            self.args = Vec::new();
        }
    }

    /// How many bytes of input the parser has looked at, over all calls:
    /// header lines, the CRLF after each bulk string and inline lines, each
    /// byte counted each time it is read. A bulk string's contents are not
    /// read, only given out as a range. Feeding a command in pieces costs a
    /// parser that resumes little more than the command's headers, however
    /// small the pieces.
    pub fn examined(&self) -> u64 {
        self.examined
    }

    /// Reads the header line that starts at `from` (just after its `*` or
    /// `$`): returns the number it holds and where the line ends,
    /// `Ok(Err(need))` when the line is not all in `buf` yet, `Err(())`
    /// when it is not a number or longer than [`MAX_LINE`].
    fn header(&mut self, buf: &[u8], from: usize) -> Result<Result<(i64, usize), usize>, ()> {
        // The CR may be at most MAX_LINE - 2 bytes in, so that the line
        // with its CRLF fits in MAX_LINE.
        let end = (from + MAX_LINE - 1).min(buf.len());
        let Some(cr) = buf[from..end].iter().position(|&b| b == b'\r') else {
            self.examined += (end - from) as u64;
            return if end - from == MAX_LINE - 1 {
                Err(())
            } else {
                Ok(Err(buf.len() + 1))
            };
        };
        self.examined += (cr + 1) as u64; // the digits and the CR
        let cr = from + cr;
        match buf.get(cr + 1) {
            None => Ok(Err(cr + 2)),
            Some(b'\n') => {
                self.examined += 1;
                parse_i64(&buf[from..cr]).map(|n| Ok((n, cr + 2))).ok_or(())
            }
            Some(_) => Err(()),
        }
    }

    fn multibulk_header(&mut self, buf: &[u8]) -> Result<Parsed, Error> {
        self.examined += 1; // the `*`
        let (count, at) = match self.header(buf, 1) {
            Ok(Ok(h)) => h,
            Ok(Err(need)) => return Ok(Parsed::Incomplete { need }),
            Err(_) => return Err(Error::MultibulkLength),
        };
        if count > MAX_ARGS as i64 || count < -1 {
            return Err(Error::MultibulkLength);
        }
        self.multibulk_args(buf, count.max(0) as usize, at)
    }

    /// Parses the `left` arguments still to come from `at` on.
    fn multibulk_args(
        &mut self,
        buf: &[u8],
        mut left: usize,
        mut at: usize,
    ) -> Result<Parsed, Error> {
        while left > 0 {
            // An argument not all here yet is parsed again from its `$`
            // next time: at most MAX_LINE + 2 bytes looked at again.
            self.state = State::Multibulk { left, at };
            self.examined += 1; // the `$`
            match buf.get(at) {
                None => return Ok(Parsed::Incomplete { need: at + 1 }),
                Some(b'$') => {}
                Some(&b) => return Err(Error::ExpectedDollar(b)),
            }
            let (len, start) = match self.header(buf, at + 1) {
                Ok(Ok(h)) => h,
                Ok(Err(need)) => return Ok(Parsed::Incomplete { need }),
                Err(_) => return Err(Error::BulkLength),
            };
            if !(0..=MAX_BULK as i64).contains(&len) {
                return Err(Error::BulkLength);
            }
            let end = start + len as usize;
            if end + 2 > MAX_COMMAND {
                return Err(Error::TooLarge);
            }
            if buf.len() < end + 2 {
                return Ok(Parsed::Incomplete { need: end + 2 });
            }
            self.examined += 2;
            if &buf[end..end + 2] != b"\r\n" {
                return Err(Error::ExpectedCrlf);
            }
            self.args.push(start..end);
            at = end + 2;
            left -= 1;
        }
        Ok(Parsed::Command { len: at })
    }

    /// Parses an inline command whose first `from` bytes hold no `\n`.
    fn inline(&mut self, buf: &[u8], from: usize) -> Result<Parsed, Error> {
        let limit = buf.len().min(MAX_INLINE);
        let from = from.min(limit);
        let scan = &buf[from..limit];
        let Some(nl) = scan.iter().position(|&b| b == b'\n') else {
            self.examined += scan.len() as u64;
            return if buf.len() >= MAX_INLINE {
                Err(Error::LongInline)
            } else {
                self.state = State::Inline { at: buf.len() };
                Ok(Parsed::Incomplete {
                    need: buf.len() + 1,
                })
            };
        };
        let nl = from + nl;
        self.examined += (nl + 1 - from) as u64;
        let line = &buf[..nl];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        // The words are split in one pass over the whole line, once it is
        // all here: a line is at most MAX_INLINE bytes.
        self.examined += line.len() as u64;
        let mut start = None;
        for (i, &b) in line.iter().enumerate() {
            let space = b == b' ' || b == b'\t';
            match (start, space) {
                (None, false) => start = Some(i),
                (Some(s), true) => {
                    self.args.push(s..i);
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            self.args.push(s..line.len());
        }
        Ok(Parsed::Command { len: nl + 1 })
    }
}

/// A decimal `i64` as RESP and redis write it: an optional `-`, then
/// digits, nothing else (no `+`, no spaces, no leading zero but `0`
/// itself, no `-0`).
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    match digits {
        [] => return None,
        [b'0'] if !neg => return Some(0),
        [b'0', ..] => return None,
        _ => {}
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let d = i64::from(d - b'0');
        // Accumulate negatively: i64::MIN has no positive counterpart.
        n = n.checked_mul(10)?.checked_sub(d)?;
    }
    if neg {
        Some(n)
    } else {
        n.checked_neg()
    }
}

/// Appends the decimal digits of `n`.
pub fn write_int(out: &mut Vec<u8>, n: i64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut m = n.unsigned_abs();
    loop {
        i -= 1;
        digits[i] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    if n < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[i..]);
}

/// `+s\r\n`; `s` holds no CR or LF.
pub fn simple(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'+');
    out.extend_from_slice(s);
    out.extend_from_slice(b"\r\n");
}

/// `-msg\r\n`; `msg` starts with an error code (`ERR`, `WRONGTYPE`) and
/// holds no CR or LF.
pub fn error(out: &mut Vec<u8>, msg: &str) {
    out.push(b'-');
    out.extend_from_slice(msg.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `:n\r\n`.
pub fn int(out: &mut Vec<u8>, n: i64) {
    out.push(b':');
    write_int(out, n);
    out.extend_from_slice(b"\r\n");
}

/// `$len\r\nbytes\r\n`.
pub fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'$');
    write_int(out, bytes.len() as i64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// The null bulk string, `$-1\r\n`: no such key.
pub fn null(out: &mut Vec<u8>) {
    out.extend_from_slice(b"$-1\r\n");
}

/// The null array, `*-1\r\n`.
pub fn null_array(out: &mut Vec<u8>) {
    out.extend_from_slice(b"*-1\r\n");
}

/// The header of an array of `n` replies, which follow.
pub fn array(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    write_int(out, n as i64);
    out.extend_from_slice(b"\r\n");
}

/// Appends `args` as a multibulk command, as a client sends it.
pub fn command<A: AsRef<[u8]>>(out: &mut Vec<u8>, args: &[A]) {
    array(out, args.len());
    for a in args {
        bulk(out, a.as_ref());
    }
}
