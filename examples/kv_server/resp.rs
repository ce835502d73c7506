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
//! [`parse`] looks at the front of a buffer and finds either a whole
//! command (its arguments as byte ranges into the buffer: nothing is
//! copied), or that more bytes are needed, or a protocol error, after which
//! the stream cannot be resynchronised and the server replies with the
//! error and closes the connection, as redis-server does.
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
/// each of its arguments into `args` (cleared first).
pub fn parse(buf: &[u8], args: &mut Vec<Range<usize>>) -> Result<Parsed, Error> {
    args.clear();
    match buf.first() {
        None => Ok(Parsed::Incomplete { need: 1 }),
        Some(b'*') => multibulk(buf, args),
        Some(_) => inline(buf, args),
    }
}

/// Reads the header line that starts at `from` (just after its `*` or
/// `$`): returns the number it holds and where the line ends, `Ok(Err(need))`
/// when the line is not all in `buf` yet, `Err(())` when it is not a number
/// or longer than [`MAX_LINE`].
fn header(buf: &[u8], from: usize) -> Result<Result<(i64, usize), usize>, ()> {
    // The CR may be at most MAX_LINE - 2 bytes in, so that the line with
    // its CRLF fits in MAX_LINE.
    let end = (from + MAX_LINE - 1).min(buf.len());
    let Some(cr) = buf[from..end].iter().position(|&b| b == b'\r') else {
        return if end - from == MAX_LINE - 1 {
            Err(())
        } else {
            Ok(Err(buf.len() + 1))
        };
    };
    let cr = from + cr;
    match buf.get(cr + 1) {
        None => Ok(Err(cr + 2)),
        Some(b'\n') => parse_i64(&buf[from..cr]).map(|n| Ok((n, cr + 2))).ok_or(()),
        Some(_) => Err(()),
    }
}

fn multibulk(buf: &[u8], args: &mut Vec<Range<usize>>) -> Result<Parsed, Error> {
    let (count, mut at) = match header(buf, 1) {
        Ok(Ok(h)) => h,
        Ok(Err(need)) => return Ok(Parsed::Incomplete { need }),
        Err(_) => return Err(Error::MultibulkLength),
    };
    if count > MAX_ARGS as i64 || count < -1 {
        return Err(Error::MultibulkLength);
    }
    for _ in 0..count.max(0) {
        match buf.get(at) {
            None => return Ok(Parsed::Incomplete { need: at + 1 }),
            Some(b'$') => {}
            Some(&b) => return Err(Error::ExpectedDollar(b)),
        }
        let (len, start) = match header(buf, at + 1) {
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
        if &buf[end..end + 2] != b"\r\n" {
            return Err(Error::ExpectedCrlf);
        }
        args.push(start..end);
        at = end + 2;
    }
    Ok(Parsed::Command { len: at })
}

fn inline(buf: &[u8], args: &mut Vec<Range<usize>>) -> Result<Parsed, Error> {
    let scan = &buf[..buf.len().min(MAX_INLINE)];
    let Some(nl) = scan.iter().position(|&b| b == b'\n') else {
        return if buf.len() >= MAX_INLINE {
            Err(Error::LongInline)
        } else {
            Ok(Parsed::Incomplete {
                need: buf.len() + 1,
            })
        };
    };
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut start = None;
    for (i, &b) in line.iter().enumerate() {
        let space = b == b' ' || b == b'\t';
        match (start, space) {
            (None, false) => start = Some(i),
            (Some(s), true) => {
                args.push(s..i);
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        args.push(s..line.len());
    }
    Ok(Parsed::Command { len: nl + 1 })
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
