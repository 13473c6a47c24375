//! Request parsing for the server: multibulk (`*<n>\r\n$<len>\r\n<bytes>\r\n`…)
//! and inline (`SET k "v"\r\n`) commands, with Redis 7.0's exact acceptance
//! rules and error strings.
//!
//! The parser is a resumable state machine over the caller's buffer. All
//! offsets it keeps are relative to the start of the command in progress,
//! which is why the contract is: after any return, the next call passes the
//! buffer starting `consumed` bytes further (the same unconsumed bytes, with
//! possibly more appended).

use std::fmt;
use std::ops::Index;

use crate::{Error, Result};

/// Redis's hard-coded limit on arguments per command before AUTH.
const UNAUTH_MAX_MULTIBULK_LEN: i64 = 10;
/// Redis's hard-coded limit on one argument's length before AUTH.
const UNAUTH_MAX_BULK_LEN: i64 = 16384;
/// First reservation for a command's argument spans. A count line like
/// `*2147483647\r\n` is only a promise; spans grow as arguments really arrive
/// (Redis caps its first `argv` allocation at 1024 for the same reason).
const MAX_INITIAL_ARGS: usize = 1024;

/// Limits a server applies to incoming requests. `Default` gives Redis 7.0's
/// defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest accepted bulk argument (Redis `proto-max-bulk-len`).
    /// Default 512 MB (536870912). Longer: "invalid bulk length".
    pub max_bulk_len: usize,
    /// Most arguments in one multibulk command. Default 2147483647
    /// (`INT_MAX`, fixed in Redis). More: "invalid multibulk length".
    pub max_multibulk_len: usize,
    /// Longest line: an inline command (bytes before its `\n`) or a `*`/`$`
    /// header (bytes before its `\r`). Default 64 KB (Redis
    /// `PROTO_INLINE_MAX_SIZE`, 65536). Longer: "too big inline request",
    /// "too big mbulk count string" or "too big bulk count string".
    pub max_inline_len: usize,
    /// Whether the client may send big commands: `true` once it has
    /// authenticated, or always when the server has no password. Default
    /// `true` (Redis's default configuration has no password). While `false`,
    /// Redis's fixed limits apply: at most 10 arguments, each at most
    /// 16384 bytes ("unauthenticated multibulk length" / "... bulk length").
    pub authenticated: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_multibulk_len: i32::MAX as usize,
            max_inline_len: 64 * 1024,
            authenticated: true,
        }
    }
}

/// What one call to [`RequestParser::parse`] found.
#[derive(Debug)]
pub enum Parsed<'a> {
    /// A complete, non-empty command.
    Command {
        /// Its arguments; `args[0]` is the command name.
        args: Args<'a>,
        /// Bytes of the buffer used, counting any empty commands skipped
        /// before this one. The next call starts this far into the buffer.
        consumed: usize,
    },
    /// No complete command yet; call again once more bytes have arrived.
    Incomplete {
        /// Bytes at the front of the buffer that held empty commands
        /// (`\r\n`, `*0\r\n`, `*-1\r\n`), which Redis skips. They may be
        /// dropped; the next call starts this far into the buffer.
        consumed: usize,
    },
}

/// Where argument bytes live: `start..end` of either the caller's buffer or
/// the parser's inline scratch buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
}

/// The arguments of one command, borrowed from the read buffer (multibulk)
/// or from the parser (inline). Cheap to copy.
#[derive(Clone, Copy)]
pub struct Args<'a> {
    data: &'a [u8],
    spans: &'a [Span],
}

impl<'a> Args<'a> {
    /// Number of arguments, including the command name.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether there are no arguments (never true for a parsed command).
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Argument `i`, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<&'a [u8]> {
        let span = self.spans.get(i)?;
        Some(&self.data[span.start..span.end])
    }

    /// The arguments in order.
    pub fn iter(&self) -> ArgsIter<'a> {
        ArgsIter {
            data: self.data,
            spans: self.spans.iter(),
        }
    }

    /// Copies the arguments out (for tests and slow paths, not the hot path).
    pub fn to_vec(&self) -> Vec<Vec<u8>> {
        self.iter().map(<[u8]>::to_vec).collect()
    }
}

impl Index<usize> for Args<'_> {
    type Output = [u8];

    /// Argument `i`; panics past the end, like slice indexing.
    fn index(&self, i: usize) -> &[u8] {
        let span = self.spans[i];
        &self.data[span.start..span.end]
    }
}

impl<'a> IntoIterator for Args<'a> {
    type Item = &'a [u8];
    type IntoIter = ArgsIter<'a>;

    fn into_iter(self) -> ArgsIter<'a> {
        self.iter()
    }
}

impl fmt::Debug for Args<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Escaped<'b>(&'b [u8]);
        impl fmt::Debug for Escaped<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "\"{}\"", self.0.escape_ascii())
            }
        }
        f.debug_list().entries(self.iter().map(Escaped)).finish()
    }
}

/// Iterator over [`Args`].
#[derive(Debug, Clone)]
pub struct ArgsIter<'a> {
    data: &'a [u8],
    spans: std::slice::Iter<'a, Span>,
}

impl<'a> Iterator for ArgsIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let span = self.spans.next()?;
        Some(&self.data[span.start..span.end])
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.spans.size_hint()
    }
}

impl ExactSizeIterator for ArgsIter<'_> {}

/// Progress through the command in progress. Every offset is relative to
/// the command's first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between commands: the next byte decides the request type.
    Idle,
    /// An inline command whose first `scanned` bytes hold no `\n`.
    Inline { scanned: usize },
    /// A multibulk command whose `*<count>` line is not complete yet; the
    /// first `scanned` bytes hold no `\r`.
    MultibulkCount { scanned: usize },
    /// Inside a multibulk command after its count line.
    Multibulk {
        /// Offset of the next unparsed byte (a `$` header or a payload).
        pos: usize,
        /// Arguments not yet complete.
        remaining: usize,
        /// Length of the argument whose `$` header was read, while its
        /// payload has not fully arrived.
        bulk_len: Option<usize>,
        /// While reading a `$` header: bytes before this offset hold no `\r`.
        scanned: usize,
    },
}

/// One step of the state machine over the current command.
enum Step {
    /// A command of this many bytes; arguments are in `spans`.
    Command(usize, Storage),
    /// An empty command of this many bytes, which Redis skips.
    Empty(usize),
    /// Need more bytes.
    Incomplete,
}

/// Which buffer the spans point into.
#[derive(Clone, Copy)]
enum Storage {
    Caller,
    Inline,
}

/// A reusable, resumable parser of client requests; one per connection.
///
/// See the crate docs for the calling loop. After `Err`, the connection is
/// expected to be closed; call [`reset`](Self::reset) before reusing the
/// parser for another stream.
#[derive(Debug)]
pub struct RequestParser {
    limits: Limits,
    state: State,
    /// Argument spans of the current command; reused across commands.
    spans: Vec<Span>,
    /// Inline arguments after unquoting; reused across commands.
    inline: Vec<u8>,
}

impl RequestParser {
    /// A parser applying `limits`.
    pub fn new(limits: Limits) -> Self {
        RequestParser {
            limits,
            state: State::Idle,
            spans: Vec::new(),
            inline: Vec::new(),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Changes the limits, e.g. `limits_mut().authenticated = true` after a
    /// successful AUTH. Takes effect at the next header read.
    pub fn limits_mut(&mut self) -> &mut Limits {
        &mut self.limits
    }

    /// Forgets any command in progress.
    pub fn reset(&mut self) {
        self.state = State::Idle;
        self.spans.clear();
    }

    /// The buffer length at which the argument now being waited for will be
    /// complete, if its `$<len>` header has been read. A server can reserve
    /// that much at once instead of growing the buffer in small steps
    /// (as Redis does for arguments of 32 KB and more). Relative to the
    /// slice passed to the last [`parse`](Self::parse) after `consumed`.
    pub fn pending_bulk_end(&self) -> Option<usize> {
        match self.state {
            State::Multibulk {
                pos,
                bulk_len: Some(len),
                ..
            } => Some(pos.saturating_add(len).saturating_add(2)),
            _ => None,
        }
    }

    /// Parses the next complete command at the front of `buf`, skipping
    /// empty ones.
    ///
    /// `buf` must start where the previous call's `consumed` left off and
    /// hold the same bytes it held then, possibly followed by more: the
    /// parser resumes a partial command from where it stopped. A multibulk
    /// command's arguments point into `buf`; an inline command's arguments
    /// are unquoted into the parser.
    pub fn parse<'s>(&'s mut self, buf: &'s [u8]) -> Result<Parsed<'s>> {
        if self.resume_offset() > buf.len() {
            // The caller broke the contract (handed a shorter buffer). Start
            // over rather than index out of bounds.
            self.reset();
        }
        let mut base = 0;
        loop {
            let step = match self.step(&buf[base..]) {
                Ok(step) => step,
                Err(e) => {
                    self.reset();
                    return Err(e);
                }
            };
            match step {
                Step::Empty(len) => base += len,
                Step::Incomplete => return Ok(Parsed::Incomplete { consumed: base }),
                Step::Command(len, storage) => {
                    let data = match storage {
                        Storage::Caller => &buf[base..],
                        Storage::Inline => &self.inline[..],
                    };
                    let args = Args {
                        data,
                        spans: &self.spans,
                    };
                    return Ok(Parsed::Command {
                        args,
                        consumed: base + len,
                    });
                }
            }
        }
    }

    /// How many bytes of the command in progress the state already relies on.
    fn resume_offset(&self) -> usize {
        match self.state {
            State::Idle => 0,
            State::Inline { scanned } | State::MultibulkCount { scanned } => scanned,
            State::Multibulk { pos, scanned, .. } => pos.max(scanned),
        }
    }

    /// Advances over the command starting at `buf[0]`.
    fn step(&mut self, buf: &[u8]) -> Result<Step> {
        if self.state == State::Idle {
            let Some(&first) = buf.first() else {
                return Ok(Step::Incomplete);
            };
            self.spans.clear();
            // Redis decides the request type from the first byte alone.
            self.state = if first == b'*' {
                State::MultibulkCount { scanned: 0 }
            } else {
                State::Inline { scanned: 0 }
            };
        }
        match self.state {
            State::Idle => unreachable!("state set above"),
            State::Inline { scanned } => self.step_inline(buf, scanned),
            State::MultibulkCount { scanned } => self.step_count(buf, scanned),
            State::Multibulk { .. } => self.step_bulks(buf),
        }
    }

    /// processInlineBuffer: one line ending in `\n` (optionally `\r\n`),
    /// split like `sdssplitargs`.
    fn step_inline(&mut self, buf: &[u8], scanned: usize) -> Result<Step> {
        let found = find(buf, scanned, b'\n');
        // Redis checks the limit only while the newline is missing, so there
        // a long line passes or fails depending on how it was split into
        // reads. Here the bytes before the newline decide, which is Redis's
        // answer when the line arrives in pieces, whatever the split.
        if found.unwrap_or(buf.len()) > self.limits.max_inline_len {
            return Err(Error::TooBigInline);
        }
        let Some(nl) = found else {
            self.state = State::Inline { scanned: buf.len() };
            return Ok(Step::Incomplete);
        };
        let mut line = &buf[..nl];
        if let [rest @ .., b'\r'] = line {
            line = rest;
        }
        self.inline.clear();
        split_args(line, &mut self.inline, &mut self.spans)?;
        self.state = State::Idle;
        if self.spans.is_empty() {
            Ok(Step::Empty(nl + 1))
        } else {
            Ok(Step::Command(nl + 1, Storage::Inline))
        }
    }

    /// processMultibulkBuffer, first part: the `*<count>\r\n` line.
    fn step_count(&mut self, buf: &[u8], scanned: usize) -> Result<Step> {
        let found = find(buf, scanned, b'\r');
        // Same split-independent reading of Redis's limit as for inline.
        if found.unwrap_or(buf.len()) > self.limits.max_inline_len {
            return Err(Error::TooBigMultibulkCount);
        }
        let Some(cr) = found else {
            self.state = State::MultibulkCount { scanned: buf.len() };
            return Ok(Step::Incomplete);
        };
        // Redis waits for the byte after `\r` and skips it without looking
        // at it; so do we.
        if cr + 1 >= buf.len() {
            self.state = State::MultibulkCount { scanned: cr };
            return Ok(Step::Incomplete);
        }
        let count = match parse_i64(&buf[1..cr]) {
            // `n <= 0` is an empty command, handled below.
            Some(n) if n <= 0 || n as u64 <= self.limits.max_multibulk_len as u64 => n,
            _ => return Err(Error::InvalidMultibulkLength),
        };
        // Checked before the `<= 0` skip, as in Redis.
        if count > UNAUTH_MAX_MULTIBULK_LEN && !self.limits.authenticated {
            return Err(Error::UnauthenticatedMultibulkLength);
        }
        let pos = cr + 2;
        if count <= 0 {
            // `*0`, `*-1`, `*-10`: an empty command, skipped.
            self.state = State::Idle;
            return Ok(Step::Empty(pos));
        }
        // Fits: count <= max_multibulk_len, a usize.
        let remaining = count as usize;
        self.spans.reserve(remaining.min(MAX_INITIAL_ARGS));
        self.state = State::Multibulk {
            pos,
            remaining,
            bulk_len: None,
            scanned: pos,
        };
        self.step_bulks(buf)
    }

    /// processMultibulkBuffer, second part: `$<len>\r\n<payload>\r\n` per
    /// argument.
    fn step_bulks(&mut self, buf: &[u8]) -> Result<Step> {
        let State::Multibulk {
            mut pos,
            mut remaining,
            mut bulk_len,
            mut scanned,
        } = self.state
        else {
            unreachable!("step_bulks outside a multibulk");
        };
        // Written back on every exit that waits for more bytes.
        macro_rules! wait {
            () => {{
                self.state = State::Multibulk {
                    pos,
                    remaining,
                    bulk_len,
                    scanned,
                };
                return Ok(Step::Incomplete);
            }};
        }
        while remaining > 0 {
            let len = match bulk_len {
                Some(len) => len,
                None => {
                    let found = find(buf, scanned.max(pos), b'\r');
                    if found.unwrap_or(buf.len()) - pos > self.limits.max_inline_len {
                        return Err(Error::TooBigBulkCount);
                    }
                    let Some(cr) = found else {
                        scanned = buf.len();
                        wait!();
                    };
                    if cr + 1 >= buf.len() {
                        scanned = cr;
                        wait!();
                    }
                    // A whole line is here; only now does Redis look at it.
                    if buf[pos] != b'$' {
                        return Err(Error::ExpectedDollar(buf[pos]));
                    }
                    let len = match parse_i64(&buf[pos + 1..cr]) {
                        Some(n) if n >= 0 && n as u64 <= self.limits.max_bulk_len as u64 => n,
                        _ => return Err(Error::InvalidBulkLength),
                    };
                    if len > UNAUTH_MAX_BULK_LEN && !self.limits.authenticated {
                        return Err(Error::UnauthenticatedBulkLength);
                    }
                    pos = cr + 2;
                    // Fits: len <= max_bulk_len, a usize.
                    let len = len as usize;
                    bulk_len = Some(len);
                    len
                }
            };
            // Arithmetic check: a partial 512 MB payload costs O(1) per call.
            // Like Redis, the two bytes after the payload are skipped, not
            // checked for `\r\n`.
            if buf.len() - pos < len.saturating_add(2) {
                wait!();
            }
            self.spans.push(Span {
                start: pos,
                end: pos + len,
            });
            pos += len + 2;
            scanned = pos;
            bulk_len = None;
            remaining -= 1;
        }
        self.state = State::Idle;
        Ok(Step::Command(pos, Storage::Caller))
    }
}

/// Position of the first `byte` in `buf[from..]`, as an offset into `buf`.
fn find(buf: &[u8], from: usize, byte: u8) -> Option<usize> {
    buf.get(from..)?
        .iter()
        .position(|&b| b == byte)
        .map(|i| from + i)
}

/// Redis's `string2ll`: an optional `-`, then `0` alone or digits without a
/// leading zero, nothing else (no `+`, no spaces), at most 20 bytes, within
/// `i64`. Both count and bulk lengths are read with it.
pub(crate) fn parse_i64(s: &[u8]) -> Option<i64> {
    // LONG_STR_SIZE is 21: anything of 21 bytes or more is rejected.
    if s.is_empty() || s.len() >= 21 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if negative {
        // i64::MIN's magnitude is one more than i64::MAX.
        if v > i64::MAX as u64 + 1 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

/// C's `isspace` in the "C" locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn hex_value(b: Option<&u8>) -> Option<u8> {
    match *b? {
        d @ b'0'..=b'9' => Some(d - b'0'),
        h @ b'a'..=b'f' => Some(h - b'a' + 10),
        h @ b'A'..=b'F' => Some(h - b'A' + 10),
        _ => None,
    }
}

/// Redis's `sdssplitargs`, appending each argument's bytes to `out` and its
/// span to `spans`.
///
/// Rules, all from sds.c: arguments are separated by whitespace; `"..."`
/// understands `\xHH`, `\n \r \t \b \a` and `\<any>` as that character;
/// `'...'` understands only `\'`; quotes may start mid-argument
/// (`a"b c"` is `ab c`), but a closing quote must be followed by whitespace
/// or the end of the line. The line is a C string to Redis, so a NUL byte
/// ends it.
fn split_args(line: &[u8], out: &mut Vec<u8>, spans: &mut Vec<Span>) -> Result<()> {
    let line = match line.iter().position(|&b| b == 0) {
        Some(nul) => &line[..nul],
        None => line,
    };
    let n = line.len();
    let mut i = 0;
    loop {
        while i < n && is_c_space(line[i]) {
            i += 1;
        }
        if i == n {
            return Ok(());
        }
        let start = out.len();
        let mut in_double = false;
        let mut in_single = false;
        loop {
            let c = line.get(i).copied();
            if in_double {
                match c {
                    None => return Err(Error::UnbalancedQuotes),
                    Some(b'\\') if line.get(i + 1) == Some(&b'x') => {
                        if let (Some(hi), Some(lo)) =
                            (hex_value(line.get(i + 2)), hex_value(line.get(i + 3)))
                        {
                            out.push(hi * 16 + lo);
                            i += 4;
                        } else {
                            // `\x` without two hex digits is just `x`.
                            out.push(b'x');
                            i += 2;
                        }
                    }
                    Some(b'\\') if i + 1 < n => {
                        out.push(match line[i + 1] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 0x08,
                            b'a' => 0x07,
                            other => other,
                        });
                        i += 2;
                    }
                    Some(b'"') => {
                        if i + 1 < n && !is_c_space(line[i + 1]) {
                            return Err(Error::UnbalancedQuotes);
                        }
                        i += 1;
                        break;
                    }
                    Some(other) => {
                        out.push(other);
                        i += 1;
                    }
                }
            } else if in_single {
                match c {
                    None => return Err(Error::UnbalancedQuotes),
                    Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                        out.push(b'\'');
                        i += 2;
                    }
                    Some(b'\'') => {
                        if i + 1 < n && !is_c_space(line[i + 1]) {
                            return Err(Error::UnbalancedQuotes);
                        }
                        i += 1;
                        break;
                    }
                    Some(other) => {
                        out.push(other);
                        i += 1;
                    }
                }
            } else {
                match c {
                    // Only these four end an unquoted argument (not \v, \f).
                    None => break,
                    Some(b' ' | b'\n' | b'\r' | b'\t') => {
                        i += 1;
                        break;
                    }
                    Some(b'"') => {
                        in_double = true;
                        i += 1;
                    }
                    Some(b'\'') => {
                        in_single = true;
                        i += 1;
                    }
                    Some(other) => {
                        out.push(other);
                        i += 1;
                    }
                }
            }
        }
        spans.push(Span {
            start,
            end: out.len(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(line: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        let mut spans = Vec::new();
        split_args(line, &mut out, &mut spans)?;
        Ok(spans.iter().map(|s| out[s.start..s.end].to_vec()).collect())
    }

    #[test]
    fn string2ll_accepts_only_canonical_integers() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-1"), Some(-1));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"1a",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"000000000000000000001",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", bad.escape_ascii().to_string());
        }
    }

    #[test]
    fn split_follows_sdssplitargs() {
        assert_eq!(split(b"  set  k v ").unwrap(), [&b"set"[..], b"k", b"v"]);
        assert_eq!(split(b"a\"b c\"").unwrap(), [&b"ab c"[..]]);
        assert_eq!(split(b"\"\\x41\\x4g\"").unwrap(), [&b"Ax4g"[..]]);
        assert_eq!(split(b"'it\\'s' \"\"").unwrap(), [&b"it's"[..], b""]);
        assert_eq!(split(b"a\x0bb").unwrap(), [&b"a\x0bb"[..]]);
        assert_eq!(split(b"a\0 b").unwrap(), [&b"a"[..]]);
        assert_eq!(split(b"\"a\0\"").unwrap_err(), Error::UnbalancedQuotes);
        assert_eq!(split(b"\"a\\").unwrap_err(), Error::UnbalancedQuotes);
        assert_eq!(split(b"'a'b").unwrap_err(), Error::UnbalancedQuotes);
    }

    #[test]
    fn partial_bulk_resumes_without_rescanning() {
        let mut p = RequestParser::new(Limits::default());
        let mut buf = b"*1\r\n$10\r\n01234".to_vec();
        assert!(matches!(
            p.parse(&buf).unwrap(),
            Parsed::Incomplete { consumed: 0 }
        ));
        assert_eq!(p.pending_bulk_end(), Some(9 + 12));
        buf.extend_from_slice(b"56789\r\n");
        match p.parse(&buf).unwrap() {
            Parsed::Command { args, consumed } => {
                assert_eq!(args.to_vec(), [b"0123456789".to_vec()]);
                assert_eq!(consumed, buf.len());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn huge_count_reserves_a_bounded_number_of_spans() {
        let mut p = RequestParser::new(Limits::default());
        assert!(matches!(
            p.parse(b"*2147483647\r\n$1\r\na\r\n").unwrap(),
            Parsed::Incomplete { consumed: 0 }
        ));
        assert!(p.spans.capacity() <= MAX_INITIAL_ARGS);
        assert_eq!(p.spans.len(), 1);
    }

    #[test]
    fn shorter_buffer_than_promised_restarts_instead_of_panicking() {
        let mut p = RequestParser::new(Limits::default());
        assert!(matches!(
            p.parse(b"*2\r\n$1\r\na\r\n$1").unwrap(),
            Parsed::Incomplete { .. }
        ));
        assert!(matches!(
            p.parse(b"*1\r\n").unwrap(),
            Parsed::Incomplete { .. }
        ));
    }
}
