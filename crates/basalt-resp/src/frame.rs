//! Owned reply frames and their parser, for clients and tests reading what a
//! server sent. Not the server's hot path: every value is copied out.
//!
//! [`Frame::parse`] reads one frame from the front of a buffer, or reports
//! that the buffer does not hold a whole frame yet. It is strict (every line
//! must end in `\r\n`, lengths must match) because its job is to catch a
//! server that writes bad protocol.

use crate::encode::{write_u64, Encoder, Protocol};
use crate::request::parse_i64;
use crate::{Error, Result};

/// Deepest nesting of aggregates accepted, so a hostile peer cannot exhaust
/// the stack with `*1\r\n*1\r\n*1\r\n…`.
const MAX_DEPTH: usize = 128;
/// Most elements reserved up front for an aggregate; more are added as they
/// are actually parsed, so a `*2000000000` header costs nothing.
const MAX_INITIAL_ELEMENTS: usize = 1024;

/// One RESP2 or RESP3 reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// `+OK\r\n`
    Simple(Vec<u8>),
    /// `-ERR message\r\n` (the bytes after `-`, error code included).
    Error(Vec<u8>),
    /// `:42\r\n`
    Integer(i64),
    /// `$3\r\nfoo\r\n`
    Bulk(Vec<u8>),
    /// `$-1\r\n`, RESP2's null.
    NullBulk,
    /// `*2\r\n…`
    Array(Vec<Frame>),
    /// `*-1\r\n`, RESP2's null array.
    NullArray,
    /// `_\r\n`, RESP3's null.
    Null,
    /// `,1.5\r\n` (RESP3), including `inf`, `-inf` and `nan`.
    Double(f64),
    /// `#t\r\n` / `#f\r\n` (RESP3).
    Boolean(bool),
    /// `!<len>\r\n<message>\r\n` (RESP3).
    BlobError(Vec<u8>),
    /// `=<len>\r\ntxt:<text>\r\n` (RESP3).
    Verbatim {
        /// The three-byte format, e.g. `*b"txt"`.
        format: [u8; 3],
        /// The text after `<format>:`.
        text: Vec<u8>,
    },
    /// `(<digits>\r\n` (RESP3).
    BigNumber(Vec<u8>),
    /// `%<pairs>\r\n…` (RESP3), pairs in wire order.
    Map(Vec<(Frame, Frame)>),
    /// `~<len>\r\n…` (RESP3), elements in wire order.
    Set(Vec<Frame>),
    /// `><len>\r\n…` (RESP3), an out-of-band message.
    Push(Vec<Frame>),
    /// `|<pairs>\r\n…` (RESP3): attributes, then the reply they describe.
    Attributed {
        /// The attribute pairs.
        attributes: Vec<(Frame, Frame)>,
        /// The reply that follows them.
        frame: Box<Frame>,
    },
}

impl Frame {
    /// Parses one frame from the front of `buf`: `Ok(Some((frame, used)))`
    /// with the bytes it took, `Ok(None)` if `buf` holds only part of a
    /// frame, `Err(Error::InvalidFrame)` if it is not RESP.
    pub fn parse(buf: &[u8]) -> Result<Option<(Frame, usize)>> {
        let mut parser = FrameParser { buf };
        parser.frame(0, 0)
    }

    /// Appends this frame's wire form in `protocol`. RESP3-only types take
    /// their RESP2 spelling when `protocol` is RESP2 (see [`Encoder`]);
    /// attributes have no RESP2 spelling and are dropped there.
    pub fn write(&self, out: &mut Vec<u8>, protocol: Protocol) {
        let mut e = Encoder::new(out, protocol);
        self.encode(&mut e);
    }

    fn encode(&self, e: &mut Encoder<'_>) {
        match self {
            Frame::Simple(s) => e.simple(s),
            Frame::Error(s) => e.error(s),
            Frame::Integer(n) => e.integer(*n),
            Frame::Bulk(b) => e.bulk(b),
            Frame::NullBulk => e.null(),
            Frame::NullArray => e.null_array(),
            Frame::Null => e.null(),
            Frame::Double(d) => e.double(*d),
            Frame::Boolean(b) => e.boolean(*b),
            Frame::BlobError(msg) => match e.protocol() {
                Protocol::Resp2 => e.error(msg),
                Protocol::Resp3 => {
                    let out = e.out();
                    out.push(b'!');
                    write_u64(out, msg.len() as u64);
                    out.extend_from_slice(b"\r\n");
                    out.extend_from_slice(msg);
                    out.extend_from_slice(b"\r\n");
                }
            },
            Frame::Verbatim { format, text } => e.verbatim(format, text),
            Frame::BigNumber(digits) => e.big_number(digits),
            Frame::Array(items) => {
                e.array(items.len());
                items.iter().for_each(|f| f.encode(e));
            }
            Frame::Set(items) => {
                e.set(items.len());
                items.iter().for_each(|f| f.encode(e));
            }
            Frame::Push(items) => {
                e.push(items.len());
                items.iter().for_each(|f| f.encode(e));
            }
            Frame::Map(pairs) => {
                e.map(pairs.len());
                for (k, v) in pairs {
                    k.encode(e);
                    v.encode(e);
                }
            }
            Frame::Attributed { attributes, frame } => {
                if e.protocol() == Protocol::Resp3 {
                    let out = e.out();
                    out.push(b'|');
                    write_u64(out, attributes.len() as u64);
                    out.extend_from_slice(b"\r\n");
                    for (k, v) in attributes {
                        k.encode(e);
                        v.encode(e);
                    }
                }
                frame.encode(e);
            }
        }
    }
}

/// A parsed value and the offset just after it; `None` if the buffer ends
/// first.
type Found<T> = Result<Option<(T, usize)>>;

/// Recursive-descent reader over one buffer; `Ok(None)` means "incomplete"
/// and propagates straight out.
struct FrameParser<'b> {
    buf: &'b [u8],
}

impl FrameParser<'_> {
    fn invalid<T>(&self, offset: usize, reason: &'static str) -> Result<T> {
        Err(Error::InvalidFrame { offset, reason })
    }

    /// The line starting at `pos` (without `\r\n`) and the offset after it.
    fn line(&self, pos: usize) -> Found<&[u8]> {
        let Some(rest) = self.buf.get(pos..) else {
            return Ok(None);
        };
        let Some(cr) = rest.iter().position(|&b| b == b'\r') else {
            return Ok(None);
        };
        match rest.get(cr + 1) {
            None => Ok(None),
            Some(b'\n') => Ok(Some((&rest[..cr], pos + cr + 2))),
            Some(_) => self.invalid(pos + cr, "\\r not followed by \\n"),
        }
    }

    /// A length line: a non-negative integer, or `-1` for null (`None`).
    fn length(&self, text: &[u8], at: usize) -> Result<Option<usize>> {
        match parse_i64(text) {
            Some(-1) => Ok(None),
            Some(n) if n >= 0 => match usize::try_from(n) {
                Ok(n) => Ok(Some(n)),
                Err(_) => self.invalid(at, "length too large"),
            },
            _ => self.invalid(at, "invalid length"),
        }
    }

    /// `len` payload bytes at `pos` followed by `\r\n`.
    fn payload(&self, pos: usize, len: usize) -> Found<&[u8]> {
        let end = pos.checked_add(len).and_then(|e| e.checked_add(2));
        match end {
            Some(end) if end <= self.buf.len() => {
                if &self.buf[end - 2..end] != b"\r\n" {
                    return self.invalid(end - 2, "payload not followed by \\r\\n");
                }
                Ok(Some((&self.buf[pos..end - 2], end)))
            }
            _ => Ok(None),
        }
    }

    fn frame(&mut self, pos: usize, depth: usize) -> Found<Frame> {
        if depth > MAX_DEPTH {
            return self.invalid(pos, "aggregates nested too deeply");
        }
        let Some((line, next)) = self.line(pos)? else {
            return Ok(None);
        };
        let Some((&kind, text)) = line.split_first() else {
            return self.invalid(pos, "empty line where a frame was expected");
        };
        let at = pos + 1;
        let frame = match kind {
            b'+' => Frame::Simple(text.to_vec()),
            b'-' => Frame::Error(text.to_vec()),
            b':' => match parse_i64(text) {
                Some(n) => Frame::Integer(n),
                None => return self.invalid(at, "invalid integer"),
            },
            b'_' if text.is_empty() => Frame::Null,
            b'#' => match text {
                b"t" => Frame::Boolean(true),
                b"f" => Frame::Boolean(false),
                _ => return self.invalid(at, "invalid boolean"),
            },
            b',' => match std::str::from_utf8(text).ok().and_then(|s| s.parse().ok()) {
                Some(d) => Frame::Double(d),
                None => return self.invalid(at, "invalid double"),
            },
            b'(' => {
                let digits = text.strip_prefix(b"-").unwrap_or(text);
                if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                    return self.invalid(at, "invalid big number");
                }
                Frame::BigNumber(text.to_vec())
            }
            b'$' | b'!' | b'=' => {
                let Some(len) = self.length(text, at)? else {
                    return if kind == b'$' {
                        Ok(Some((Frame::NullBulk, next)))
                    } else {
                        self.invalid(at, "negative length")
                    };
                };
                let Some((data, end)) = self.payload(next, len)? else {
                    return Ok(None);
                };
                let frame = match kind {
                    b'$' => Frame::Bulk(data.to_vec()),
                    b'!' => Frame::BlobError(data.to_vec()),
                    _ => match data {
                        [a, b, c, b':', text @ ..] => Frame::Verbatim {
                            format: [*a, *b, *c],
                            text: text.to_vec(),
                        },
                        _ => return self.invalid(next, "verbatim string without format"),
                    },
                };
                return Ok(Some((frame, end)));
            }
            b'*' | b'~' | b'>' => {
                let Some(len) = self.length(text, at)? else {
                    return if kind == b'*' {
                        Ok(Some((Frame::NullArray, next)))
                    } else {
                        self.invalid(at, "negative length")
                    };
                };
                let Some((items, end)) = self.elements(next, len, depth)? else {
                    return Ok(None);
                };
                let frame = match kind {
                    b'*' => Frame::Array(items),
                    b'~' => Frame::Set(items),
                    _ => Frame::Push(items),
                };
                return Ok(Some((frame, end)));
            }
            b'%' | b'|' => {
                let Some(pairs) = self.length(text, at)? else {
                    return self.invalid(at, "negative length");
                };
                let Some((pairs, end)) = self.pairs(next, pairs, depth)? else {
                    return Ok(None);
                };
                if kind == b'%' {
                    return Ok(Some((Frame::Map(pairs), end)));
                }
                let Some((frame, end)) = self.frame(end, depth + 1)? else {
                    return Ok(None);
                };
                let frame = Frame::Attributed {
                    attributes: pairs,
                    frame: Box::new(frame),
                };
                return Ok(Some((frame, end)));
            }
            _ => return self.invalid(pos, "unknown frame type"),
        };
        Ok(Some((frame, next)))
    }

    fn elements(&mut self, mut pos: usize, len: usize, depth: usize) -> Found<Vec<Frame>> {
        let mut items = Vec::with_capacity(len.min(MAX_INITIAL_ELEMENTS));
        for _ in 0..len {
            let Some((item, next)) = self.frame(pos, depth + 1)? else {
                return Ok(None);
            };
            items.push(item);
            pos = next;
        }
        Ok(Some((items, pos)))
    }

    fn pairs(&mut self, mut pos: usize, len: usize, depth: usize) -> Found<Vec<(Frame, Frame)>> {
        let mut pairs = Vec::with_capacity(len.min(MAX_INITIAL_ELEMENTS));
        for _ in 0..len {
            let Some((key, next)) = self.frame(pos, depth + 1)? else {
                return Ok(None);
            };
            let Some((value, next)) = self.frame(next, depth + 1)? else {
                return Ok(None);
            };
            pairs.push((key, value));
            pos = next;
        }
        Ok(Some((pairs, pos)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_at_every_prefix_then_complete() {
        let wire = b"*3\r\n$3\r\nfoo\r\n%1\r\n+k\r\n,1.5\r\n|1\r\n+ttl\r\n:3\r\n#t\r\n";
        for cut in 0..wire.len() {
            assert_eq!(Frame::parse(&wire[..cut]).unwrap(), None, "cut at {cut}");
        }
        let (frame, used) = Frame::parse(wire).unwrap().unwrap();
        assert_eq!(used, wire.len());
        assert_eq!(
            frame,
            Frame::Array(vec![
                Frame::Bulk(b"foo".to_vec()),
                Frame::Map(vec![(Frame::Simple(b"k".to_vec()), Frame::Double(1.5))]),
                Frame::Attributed {
                    attributes: vec![(Frame::Simple(b"ttl".to_vec()), Frame::Integer(3))],
                    frame: Box::new(Frame::Boolean(true)),
                },
            ])
        );
    }

    #[test]
    fn rejects_malformed_frames() {
        for bad in [
            &b"$3\r\nfooX\r\n"[..],
            b"?\r\n",
            b":1.5\r\n",
            b"*-2\r\n",
            b"#x\r\n",
            b"=3\r\nabc\r\n",
            b"+a\rb\r\n",
        ] {
            assert!(
                matches!(Frame::parse(bad), Err(Error::InvalidFrame { .. })),
                "{}",
                bad.escape_ascii()
            );
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let wire = b"*1\r\n".repeat(MAX_DEPTH + 2);
        assert!(matches!(
            Frame::parse(&wire),
            Err(Error::InvalidFrame { .. })
        ));
    }

    #[test]
    fn huge_announced_lengths_do_not_allocate() {
        assert_eq!(Frame::parse(b"*2000000000\r\n:1\r\n").unwrap(), None);
        assert_eq!(Frame::parse(b"$2000000000\r\nabc").unwrap(), None);
    }
}
