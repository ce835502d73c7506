//! The HTTP/1.1 part of the example server, kept apart from the socket
//! code: requests are parsed with `httparse`, and every response is one of
//! a few fixed byte strings.
//!
//! The peer servers used for comparison (`bench/benches/servers/http_*.rs`)
//! include this very file, so a benchmark compares runtimes, not parsers.
//!
//! A [`Conn`] holds one connection's unparsed input and unwritten
//! responses. The socket side reads into [`Conn::spare`], reports the
//! count to [`Conn::received`], which answers every complete request in
//! the input (pipelined requests in order), writes [`Conn::out`] and clears
//! it:
//!
//! ```text
//! loop {
//!     let n = read(conn.spare())?;           // 0: the client closed
//!     let open = conn.received(n);
//!     write_all(&conn.out)?; conn.out.clear();
//!     if !open { break }                     // the last response said close
//! }
//! ```
//!
//! A server with many idle connections can keep nothing on the heap
//! between requests: it reads into a small buffer of its own (on the
//! task's stack) while nothing is pending, hands that input to
//! [`Conn::received_from`], which keeps only an incomplete rest, and calls
//! [`Conn::release`] once the responses are written.
//!
//! What it answers:
//!
//! - `GET /` (a query string is ignored): `200`, `text/plain`, body
//!   `Hello, World!`;
//! - any other well-formed request: `404`;
//! - `HEAD` gets the headers `GET` would, without the body;
//! - keep-alive as HTTP/1.1 defines it: the connection stays open unless
//!   the request says `Connection: close`, or is HTTP/1.0 without
//!   `Connection: keep-alive`;
//! - a request body is skipped by its `Content-Length` (at most
//!   [`MAX_BODY`]); a chunked body is not supported (`501`, then close);
//! - bytes that are not HTTP: `400`, then close; a head longer than
//!   [`MAX_HEAD`] or with more than [`MAX_HEADERS`] headers: `431`, then
//!   close; a larger body: `413`, then close.
//!
//! It sends no `Date` header: the server is a minimal one.

// Each binary that includes this file uses only part of it.
#![allow(dead_code)]

/// The largest request head (request line and headers) accepted.
pub const MAX_HEAD: usize = 8 * 1024;
/// The most headers a request may have.
pub const MAX_HEADERS: usize = 32;
/// The largest request body accepted (and skipped).
pub const MAX_BODY: usize = 64 * 1024;
/// The room [`Conn::spare`] offers at least.
const READ_CHUNK: usize = 4 * 1024;

const HELLO: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n";
const HELLO_BODY: &[u8] = b"Hello, World!";
const NOT_FOUND: &[u8] =
    b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n";
const NOT_FOUND_BODY: &[u8] = b"Not Found";
const KEEP_ALIVE: &[u8] = b"Connection: keep-alive\r\n\r\n";
const CLOSE: &[u8] = b"Connection: close\r\n\r\n";

/// The response to a request that cannot be served, the connection closes
/// after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    BadRequest,
    HeadTooLarge,
    BodyTooLarge,
    ChunkedBody,
}

impl Refusal {
    fn response(self) -> &'static [u8] {
        match self {
            Refusal::BadRequest => {
                b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 11\r\nConnection: close\r\n\r\nBad Request"
            }
            Refusal::HeadTooLarge => {
                b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain\r\nContent-Length: 31\r\nConnection: close\r\n\r\nRequest Header Fields Too Large"
            }
            Refusal::BodyTooLarge => {
                b"HTTP/1.1 413 Content Too Large\r\nContent-Type: text/plain\r\nContent-Length: 17\r\nConnection: close\r\n\r\nContent Too Large"
            }
            Refusal::ChunkedBody => {
                b"HTTP/1.1 501 Not Implemented\r\nContent-Type: text/plain\r\nContent-Length: 15\r\nConnection: close\r\n\r\nNot Implemented"
            }
        }
    }
}

/// What the front of the input holds.
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    /// Not a whole request yet.
    Partial,
    /// A whole request, `len` bytes with its body.
    Request {
        len: usize,
        hello: bool,
        /// A `HEAD` request: the response has no body.
        head_only: bool,
        keep_alive: bool,
        /// HTTP/1.0: the response says `Connection: keep-alive` when it
        /// keeps the connection open.
        http10: bool,
    },
    /// A request that is answered with an error, then the connection
    /// closes.
    Refused(Refusal),
}

/// Whether the comma-separated header value `v` lists `token`.
fn lists(v: &[u8], token: &str) -> bool {
    v.split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

fn parse(buf: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Parsed::Partial,
        Ok(httparse::Status::Partial) | Err(httparse::Error::TooManyHeaders) => {
            return Parsed::Refused(Refusal::HeadTooLarge)
        }
        Err(_) => return Parsed::Refused(Refusal::BadRequest),
    };
    if head > MAX_HEAD {
        return Parsed::Refused(Refusal::HeadTooLarge);
    }
    let http10 = req.version == Some(0);
    let mut keep_alive = !http10;
    let mut body = None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("connection") {
            if lists(h.value, "close") {
                keep_alive = false;
            } else if lists(h.value, "keep-alive") {
                keep_alive = true;
            }
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let len = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok());
            match (len, body) {
                (Some(n), None) => body = Some(n),
                (Some(n), Some(m)) if n == m => {}
                _ => return Parsed::Refused(Refusal::BadRequest),
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Parsed::Refused(Refusal::ChunkedBody);
        }
    }
    let body = body.unwrap_or(0);
    if body > MAX_BODY {
        return Parsed::Refused(Refusal::BodyTooLarge);
    }
    if buf.len() < head + body {
        return Parsed::Partial;
    }
    let head_only = req.method == Some("HEAD");
    let path = req.path.map(|p| p.split_once('?').map_or(p, |(p, _)| p));
    Parsed::Request {
        len: head + body,
        hello: (req.method == Some("GET") || head_only) && path == Some("/"),
        head_only,
        keep_alive,
        http10,
    }
}

/// Appends to `out` a response to every complete request at the front of
/// `input`. Returns whether the connection stays open, and how many bytes
/// of `input` were consumed.
fn answer(input: &[u8], out: &mut Vec<u8>) -> (bool, usize) {
    let mut at = 0;
    let open = loop {
        match parse(&input[at..]) {
            Parsed::Partial => break true,
            Parsed::Request {
                len,
                hello,
                head_only,
                keep_alive,
                http10,
            } => {
                let (head, body) = if hello {
                    (HELLO, HELLO_BODY)
                } else {
                    (NOT_FOUND, NOT_FOUND_BODY)
                };
                let end: &[u8] = match (keep_alive, http10) {
                    (false, _) => CLOSE,
                    (true, true) => KEEP_ALIVE,
                    (true, false) => b"\r\n",
                };
                let body = if head_only { &b""[..] } else { body };
                // One allocation for the response (a released `out` is
                // empty: growing it piece by piece reallocated it).
                out.reserve(head.len() + end.len() + body.len());
                out.extend_from_slice(head);
                out.extend_from_slice(end);
                out.extend_from_slice(body);
                at += len;
                if !keep_alive {
                    break false;
                }
            }
            Parsed::Refused(r) => {
                out.extend_from_slice(r.response());
                break false;
            }
        }
    };
    (open, at)
}

/// One connection's buffers.
#[derive(Debug, Default)]
pub struct Conn {
    /// Input: `buf[..len]` holds bytes received and not yet parsed.
    buf: Vec<u8>,
    len: usize,
    /// Responses to write, in request order.
    pub out: Vec<u8>,
}

impl Conn {
    /// An empty connection.
    pub fn new() -> Conn {
        Conn::default()
    }

    /// Room to read into (at least 4 KiB); report how much was read with
    /// [`received`](Self::received).
    pub fn spare(&mut self) -> &mut [u8] {
        if self.buf.len() - self.len < READ_CHUNK {
            self.buf.resize(self.len + READ_CHUNK, 0);
        }
        &mut self.buf[self.len..]
    }

    /// Whether part of a request has been received and not answered yet.
    pub fn pending(&self) -> bool {
        self.len != 0
    }

    /// Takes `n` more bytes of input (read into [`spare`](Self::spare)) and
    /// appends a response to [`out`](Self::out) for every complete request.
    /// Returns `false` when the connection must close once `out` is written:
    /// the last response said `Connection: close`.
    pub fn received(&mut self, n: usize) -> bool {
        self.len += n;
        let (open, at) = answer(&self.buf[..self.len], &mut self.out);
        self.buf.copy_within(at..self.len, 0);
        self.len -= at;
        open
    }

    /// [`received`](Self::received) for input read into a buffer of the
    /// caller's (say, on the stack) rather than into [`spare`](Self::spare):
    /// answers every complete request in `input` (after what is pending)
    /// and keeps only what remains of an incomplete one, so a connection
    /// whose requests arrive whole holds no input buffer at all.
    pub fn received_from(&mut self, input: &[u8]) -> bool {
        if self.len != 0 {
            let n = input.len();
            self.spare_for(n)[..n].copy_from_slice(input);
            return self.received(n);
        }
        let (open, at) = answer(input, &mut self.out);
        let rest = &input[at..];
        if open && !rest.is_empty() {
            self.spare_for(rest.len())[..rest.len()].copy_from_slice(rest);
            self.len = rest.len();
        }
        open
    }

    /// Room for at least `n` more bytes of input.
    fn spare_for(&mut self, n: usize) -> &mut [u8] {
        if self.buf.len() - self.len < n {
            self.buf.resize(self.len + n.max(READ_CHUNK), 0);
        }
        &mut self.buf[self.len..]
    }

    /// Frees the buffers when they hold nothing (no pending input, `out`
    /// written and cleared), so that an idle connection costs no heap. The
    /// next request allocates `out` again (and the input buffer, when it
    /// does not arrive whole).
    pub fn release(&mut self) {
        if self.len == 0 {
            self.buf = Vec::new();
        }
        if self.out.is_empty() {
            self.out = Vec::new();
        }
    }
}
