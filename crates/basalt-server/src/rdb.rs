//! Redis's DUMP / RESTORE payload: one value in the RDB object encoding of
//! Redis 7.0, so a payload DUMPed by redis-server restores into Basalt and
//! one DUMPed by Basalt restores into redis-server (`commands::dump` runs
//! the commands; this module only turns bytes into a [`Value`] and back).
//!
//! The one idea a reader needs: **decode everything Redis may send, encode
//! the plainest form Redis loads.** Redis 7.0 DUMPs small collections as
//! listpacks, integer sets and LZF-compressed strings; Basalt reads all of
//! those (and the ziplist / zipmap forms of older versions), and writes
//! the plain forms (a length and the elements), which Redis converts to its
//! compact encodings itself while loading.
//!
//! ```text
//! payload  = type (1 byte) | object | rdb version (u16 LE) | crc (u64 LE)
//!            crc: CRC-64/Jones (Redis's crc64) of every byte before it;
//!            version: Basalt writes 10 (Redis 7.0) and reads <= 10
//! len      = 00xxxxxx                      6-bit length
//!          | 01xxxxxx yyyyyyyy             14-bit length (big-endian)
//!          | 0x80 + u32 BE | 0x81 + u64 BE 32- / 64-bit length
//! string   = len + bytes
//!          | 0xC0 i8 | 0xC1 i16 LE | 0xC2 i32 LE   a decimal integer
//!          | 0xC3 len(compressed) len(plain) data  LZF-compressed bytes
//!
//! type  object (as Basalt writes it)
//!  0    string                                        string
//!  2    len, members (strings)                        set
//!  4    len, field + value strings                    hash
//!  5    len, member string + score (f64 LE)           sorted set (ZSET_2)
//! 18    nodes, per node: 2 (packed) + listpack blob   list (QUICKLIST_2)
//! 19    stream: listpack nodes, metadata, groups      stream (LISTPACKS_2)
//!
//! read as well: 1 list, 3 zset (scores as text), 9 zipmap hash,
//! 10 ziplist list, 11 intset, 12/17 ziplist/listpack zset, 13/16
//! ziplist/listpack hash, 14 quicklist of ziplists, 15 stream of Redis 6.
//! ```
//!
//! A listpack is `u32 LE total bytes | u16 LE count | entries | 0xFF`, an
//! entry its encoding (small integers and short strings in one byte), its
//! data and its length written backwards in 7-bit groups. A stream node is
//! a listpack whose master entry names the first entry's fields; entries
//! are stored as deltas from the node's key (the master id). Consumer
//! groups follow the entries: name, last id, entries read, the pending
//! entries (raw 16-byte ids, delivery time, count), then each consumer's
//! name, seen time and pending ids.
//!
//! A malformed payload is refused as a whole ([`Error::Format`]), never
//! half-applied: an empty collection, a duplicate member or field, a NaN
//! score or bytes past the end all count as malformed, as in Redis.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};

use crate::commands::parse_i64;

/// The RDB version Basalt writes (Redis 7.0's) and the highest it reads.
pub const VERSION: u16 = 10;

const T_STRING: u8 = 0;
const T_LIST: u8 = 1;
const T_SET: u8 = 2;
const T_ZSET: u8 = 3;
const T_HASH: u8 = 4;
const T_ZSET_2: u8 = 5;
const T_HASH_ZIPMAP: u8 = 9;
const T_LIST_ZIPLIST: u8 = 10;
const T_SET_INTSET: u8 = 11;
const T_ZSET_ZIPLIST: u8 = 12;
const T_HASH_ZIPLIST: u8 = 13;
const T_LIST_QUICKLIST: u8 = 14;
const T_STREAM_LISTPACKS: u8 = 15;
const T_HASH_LISTPACK: u8 = 16;
const T_ZSET_LISTPACK: u8 = 17;
const T_LIST_QUICKLIST_2: u8 = 18;
const T_STREAM_LISTPACKS_2: u8 = 19;

/// Quicklist node containers (QUICKLIST_2).
const NODE_PLAIN: u64 = 1;
const NODE_PACKED: u64 = 2;

/// Stream entry flags.
const ENTRY_DELETED: i64 = 1;
const ENTRY_SAMEFIELDS: i64 = 2;

/// Largest list node Basalt writes (Redis's `list-max-listpack-size -2`);
/// a bigger element gets a node of its own.
const LIST_NODE_BYTES: usize = 8 << 10;
/// Most entries per stream node (Redis's `stream-node-max-entries`).
const STREAM_NODE_ENTRIES: usize = 100;
/// Largest stream node Basalt starts another entry in
/// (`stream-node-max-bytes`).
const STREAM_NODE_BYTES: usize = 4 << 10;

const CRC64: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_REDIS);

/// Why a payload was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Too short, a version above [`VERSION`], or a checksum mismatch.
    #[error("DUMP payload version or checksum are wrong")]
    Footer,
    /// The object does not decode (the reason is for logs and tests).
    #[error("bad data format: {0}")]
    Format(&'static str),
}

/// Result of decoding.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One Redis value, as it travels in a payload.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string.
    String(Vec<u8>),
    /// A list's elements, head first.
    List(Vec<Vec<u8>>),
    /// A set's members.
    Set(Vec<Vec<u8>>),
    /// A hash's fields and values.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// A sorted set's members and scores.
    ZSet(Vec<(Vec<u8>, f64)>),
    /// A stream.
    Stream(Stream),
}

/// A stream entry id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct StreamId {
    /// Milliseconds part.
    pub ms: u64,
    /// Sequence part.
    pub seq: u64,
}

impl StreamId {
    /// The 16-byte form (both halves big-endian) of node keys and PELs.
    fn raw(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.ms.to_be_bytes());
        b[8..].copy_from_slice(&self.seq.to_be_bytes());
        b
    }

    fn from_raw(b: &[u8]) -> Result<StreamId> {
        let b: &[u8; 16] = b
            .try_into()
            .map_err(|_| Error::Format("a stream id is not 16 bytes"))?;
        Ok(StreamId {
            ms: u64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
            seq: u64::from_be_bytes(b[8..].try_into().expect("8 bytes")),
        })
    }
}

/// A stream entry: its id and field/value pairs.
pub type StreamEntry = (StreamId, Vec<(Vec<u8>, Vec<u8>)>);

/// A stream: entries (ascending ids), metadata and consumer groups.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stream {
    /// The entries, ids ascending.
    pub entries: Vec<StreamEntry>,
    /// The last id handed out (deletions do not lower it).
    pub last_id: StreamId,
    /// The largest id deleted by XDEL.
    pub max_deleted: StreamId,
    /// Entries ever added.
    pub entries_added: u64,
    /// Consumer groups.
    pub groups: Vec<StreamGroup>,
}

/// A consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamGroup {
    /// Its name.
    pub name: Vec<u8>,
    /// The last id delivered.
    pub last_id: StreamId,
    /// Entries read (-1: unknown).
    pub entries_read: i64,
    /// Delivered, unacknowledged entries (ids ascending).
    pub pending: Vec<StreamPending>,
    /// Consumers.
    pub consumers: Vec<StreamConsumer>,
}

/// One pending entry of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPending {
    /// The entry.
    pub id: StreamId,
    /// The consumer it was delivered to.
    pub consumer: Vec<u8>,
    /// Last delivery time, ms since the epoch.
    pub delivered_ms: u64,
    /// Deliveries.
    pub count: u64,
}

/// One consumer of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamConsumer {
    /// Its name.
    pub name: Vec<u8>,
    /// Last seen, ms since the epoch.
    pub seen_ms: u64,
}

// ------------------------------------------------------------------ footer

/// Redis's crc64 of `bytes`.
pub fn crc64(bytes: &[u8]) -> u64 {
    CRC64.checksum(bytes)
}

/// Checks the version and checksum; returns the bytes before the footer.
fn body(payload: &[u8]) -> Result<&[u8]> {
    if payload.len() < 10 {
        return Err(Error::Footer);
    }
    let at = payload.len() - 10;
    let version = u16::from_le_bytes([payload[at], payload[at + 1]]);
    if version > VERSION {
        return Err(Error::Footer);
    }
    let crc = u64::from_le_bytes(payload[at + 2..].try_into().expect("8 bytes"));
    if crc64(&payload[..at + 2]) != crc {
        return Err(Error::Footer);
    }
    Ok(&payload[..at])
}

// ------------------------------------------------------------------ decode

/// Decodes a DUMP payload: checks its footer, then reads the object.
/// Bytes between the object and the footer are ignored, as Redis does.
pub fn decode(payload: &[u8]) -> Result<Value> {
    let body = body(payload)?;
    let mut r = Reader { b: body, at: 0 };
    let t = r.u8()?;
    object(t, &mut r)
}

fn bad<T>(why: &'static str) -> Result<T> {
    Err(Error::Format(why))
}

/// A cursor over the payload's bytes.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or(Error::Format("truncated"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    /// A length, or (with `true`) a special string encoding's number.
    fn len_or_enc(&mut self) -> Result<(u64, bool)> {
        let b = self.u8()?;
        Ok(match b >> 6 {
            0 => ((b & 0x3f) as u64, false),
            1 => ((((b & 0x3f) as u64) << 8) | self.u8()? as u64, false),
            3 => ((b & 0x3f) as u64, true),
            _ if b == 0x80 => (u32::from_be_bytes(self.fixed()?) as u64, false),
            _ if b == 0x81 => (u64::from_be_bytes(self.fixed()?), false),
            _ => return bad("unknown length encoding"),
        })
    }

    fn len(&mut self) -> Result<u64> {
        match self.len_or_enc()? {
            (n, false) => Ok(n),
            (_, true) => bad("an encoded string where a length belongs"),
        }
    }

    /// A count of things that take at least one byte each: never more
    /// than the bytes left, so a forged count cannot reserve memory.
    fn count(&mut self) -> Result<usize> {
        let n = self.len()?;
        if n > (self.b.len() - self.at) as u64 {
            return bad("a count larger than the payload");
        }
        Ok(n as usize)
    }

    fn string(&mut self) -> Result<Vec<u8>> {
        let (n, special) = self.len_or_enc()?;
        if !special {
            let n = usize::try_from(n).map_err(|_| Error::Format("truncated"))?;
            return Ok(self.take(n)?.to_vec());
        }
        let v: i64 = match n {
            0 => i8::from_le_bytes(self.fixed()?) as i64,
            1 => i16::from_le_bytes(self.fixed()?) as i64,
            2 => i32::from_le_bytes(self.fixed()?) as i64,
            3 => {
                let clen = self.len()?;
                let plain = self.len()?;
                let clen = usize::try_from(clen).map_err(|_| Error::Format("truncated"))?;
                let data = self.take(clen)?;
                return lzf_decompress(data, plain);
            }
            _ => return bad("unknown string encoding"),
        };
        Ok(v.to_string().into_bytes())
    }

    /// A time in ms (u64 LE).
    fn millis(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.fixed()?))
    }

    fn binary_double(&mut self) -> Result<f64> {
        Ok(f64::from_le_bytes(self.fixed()?))
    }

    /// A score of the old ZSET type: a length byte and its decimal text,
    /// or 253 / 254 / 255 for NaN / inf / -inf.
    fn text_double(&mut self) -> Result<f64> {
        match self.u8()? {
            253 => Ok(f64::NAN),
            254 => Ok(f64::INFINITY),
            255 => Ok(f64::NEG_INFINITY),
            n => parse_score(self.take(n as usize)?),
        }
    }

    fn stream_id(&mut self) -> Result<StreamId> {
        Ok(StreamId {
            ms: self.len()?,
            seq: self.len()?,
        })
    }
}

/// LZF (Marc Lehmann's format, as Redis's lzf_d.c): literal runs
/// (`000LLLLL` + L+1 bytes) and back references (`LLLooooo [L+] oooooooo`:
/// L+2 bytes from offset o+1 back). The output must be exactly `plain`
/// bytes long.
fn lzf_decompress(input: &[u8], plain: u64) -> Result<Vec<u8>> {
    let plain = usize::try_from(plain).map_err(|_| Error::Format("LZF length"))?;
    // Each input byte yields at most 264 output bytes.
    if plain > input.len().saturating_mul(264) {
        return bad("LZF length larger than its data can hold");
    }
    // Reserved up to a bound the input can justify cheaply; a claimed
    // length is checked against what the data really expands to.
    let mut out = Vec::with_capacity(plain.min(input.len().saturating_mul(4)));
    let mut i = 0;
    while i < input.len() {
        let ctrl = input[i] as usize;
        i += 1;
        if ctrl < 32 {
            let run = ctrl + 1;
            let lit = input
                .get(i..i + run)
                .ok_or(Error::Format("LZF literal past the end"))?;
            if out.len() + run > plain {
                return bad("LZF output too long");
            }
            out.extend_from_slice(lit);
            i += run;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += *input.get(i).ok_or(Error::Format("LZF truncated"))? as usize;
                i += 1;
            }
            let low = *input.get(i).ok_or(Error::Format("LZF truncated"))? as usize;
            i += 1;
            let back = ((ctrl & 0x1f) << 8) + low + 1;
            len += 2;
            if back > out.len() {
                return bad("LZF reference before the start");
            }
            if out.len() + len > plain {
                return bad("LZF output too long");
            }
            let from = out.len() - back;
            // Byte by byte: a reference may overlap what it produces.
            for k in 0..len {
                let b = out[from + k];
                out.push(b);
            }
        }
    }
    if out.len() != plain {
        return bad("LZF output shorter than announced");
    }
    Ok(out)
}

/// An element of a listpack or ziplist.
#[derive(Debug, Clone, Copy)]
enum Item<'a> {
    Int(i64),
    Str(&'a [u8]),
}

impl<'a> Item<'a> {
    fn bytes(self) -> Cow<'a, [u8]> {
        match self {
            Item::Int(v) => Cow::Owned(v.to_string().into_bytes()),
            Item::Str(s) => Cow::Borrowed(s),
        }
    }

    fn int(self) -> Result<i64> {
        match self {
            Item::Int(v) => Ok(v),
            Item::Str(s) => parse_i64(s).ok_or(Error::Format("a string where an integer belongs")),
        }
    }

    fn score(self) -> Result<f64> {
        match self {
            Item::Int(v) => Ok(v as f64),
            Item::Str(s) => parse_score(s),
        }
    }
}

/// A score written as text (listpack, ziplist, old ZSET): what `%.17g`
/// writes, `inf` and `-inf` included; NaN is refused.
fn parse_score(s: &[u8]) -> Result<f64> {
    let v: f64 = std::str::from_utf8(s)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or(Error::Format("a score that is not a number"))?;
    if v.is_nan() {
        return bad("a NaN score");
    }
    Ok(v)
}

/// The size of a listpack entry's back-length for an entry of `len`
/// bytes (Redis's thresholds, `< 16383` and so on, exactly).
fn backlen_size(len: usize) -> usize {
    match len {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2097150 => 3,
        2097151..=268435454 => 4,
        _ => 5,
    }
}

/// The elements of a listpack, after checking its header and terminator.
fn listpack(lp: &[u8]) -> Result<Vec<Item<'_>>> {
    if lp.len() < 7 {
        return bad("listpack shorter than its header");
    }
    let total = u32::from_le_bytes(lp[..4].try_into().expect("4 bytes")) as usize;
    let count = u16::from_le_bytes([lp[4], lp[5]]);
    if total != lp.len() || lp[lp.len() - 1] != 0xff {
        return bad("listpack size or terminator wrong");
    }
    let end = lp.len() - 1;
    let mut items = Vec::with_capacity(if count == u16::MAX { 0 } else { count as usize });
    let mut at = 6;
    let get = |from: usize, n: usize| -> Result<&[u8]> {
        lp.get(from..from + n)
            .filter(|_| from + n <= end)
            .ok_or(Error::Format("listpack entry past the end"))
    };
    while at < end {
        let b = lp[at];
        let (item, head, data) = if b & 0x80 == 0 {
            (Item::Int((b & 0x7f) as i64), 1, 0)
        } else if b & 0xc0 == 0x80 {
            let n = (b & 0x3f) as usize;
            (Item::Str(get(at + 1, n)?), 1, n)
        } else if b & 0xe0 == 0xc0 {
            let lo = get(at + 1, 1)?[0] as i64;
            let v = (((b & 0x1f) as i64) << 8) | lo;
            (
                Item::Int(if v >= 1 << 12 { v - (1 << 13) } else { v }),
                2,
                0,
            )
        } else if b & 0xf0 == 0xe0 {
            let n = (((b & 0x0f) as usize) << 8) | get(at + 1, 1)?[0] as usize;
            (Item::Str(get(at + 2, n)?), 2, n)
        } else {
            match b {
                0xf0 => {
                    let n = u32::from_le_bytes(get(at + 1, 4)?.try_into().expect("4")) as usize;
                    (Item::Str(get(at + 5, n)?), 5, n)
                }
                0xf1 => {
                    let v = i16::from_le_bytes(get(at + 1, 2)?.try_into().expect("2"));
                    (Item::Int(v as i64), 3, 0)
                }
                0xf2 => {
                    let d = get(at + 1, 3)?;
                    let v = i32::from_le_bytes([0, d[0], d[1], d[2]]) >> 8;
                    (Item::Int(v as i64), 4, 0)
                }
                0xf3 => {
                    let v = i32::from_le_bytes(get(at + 1, 4)?.try_into().expect("4"));
                    (Item::Int(v as i64), 5, 0)
                }
                0xf4 => {
                    let v = i64::from_le_bytes(get(at + 1, 8)?.try_into().expect("8"));
                    (Item::Int(v), 9, 0)
                }
                _ => return bad("unknown listpack entry encoding"),
            }
        };
        let len = head + data;
        at += len + backlen_size(len);
        if at > end {
            return bad("listpack entry past the end");
        }
        items.push(item);
    }
    if count != u16::MAX && count as usize != items.len() {
        return bad("listpack count wrong");
    }
    Ok(items)
}

/// The elements of a ziplist (Redis < 7), after checking its header.
fn ziplist(zl: &[u8]) -> Result<Vec<Item<'_>>> {
    if zl.len() < 11 {
        return bad("ziplist shorter than its header");
    }
    let total = u32::from_le_bytes(zl[..4].try_into().expect("4 bytes")) as usize;
    if total != zl.len() || zl[zl.len() - 1] != 0xff {
        return bad("ziplist size or terminator wrong");
    }
    let end = zl.len() - 1;
    let get = |from: usize, n: usize| -> Result<&[u8]> {
        zl.get(from..from + n)
            .filter(|_| from + n <= end)
            .ok_or(Error::Format("ziplist entry past the end"))
    };
    let mut items = Vec::new();
    let mut at = 10;
    while at < end {
        // The previous entry's length: 1 byte, or 0xFE and 4 bytes.
        at += if zl[at] == 0xfe { 5 } else { 1 };
        let b = get(at, 1)?[0];
        let (item, head, data) = match b >> 6 {
            0 => {
                let n = (b & 0x3f) as usize;
                (Item::Str(get(at + 1, n)?), 1, n)
            }
            1 => {
                let n = (((b & 0x3f) as usize) << 8) | get(at + 1, 1)?[0] as usize;
                (Item::Str(get(at + 2, n)?), 2, n)
            }
            2 => {
                let n = u32::from_be_bytes(get(at + 1, 4)?.try_into().expect("4")) as usize;
                (Item::Str(get(at + 5, n)?), 5, n)
            }
            _ => match b {
                0xc0 => (
                    Item::Int(i16::from_le_bytes(get(at + 1, 2)?.try_into().expect("2")) as i64),
                    1,
                    2,
                ),
                0xd0 => (
                    Item::Int(i32::from_le_bytes(get(at + 1, 4)?.try_into().expect("4")) as i64),
                    1,
                    4,
                ),
                0xe0 => (
                    Item::Int(i64::from_le_bytes(get(at + 1, 8)?.try_into().expect("8"))),
                    1,
                    8,
                ),
                0xf0 => {
                    let d = get(at + 1, 3)?;
                    let v = i32::from_le_bytes([0, d[0], d[1], d[2]]) >> 8;
                    (Item::Int(v as i64), 1, 3)
                }
                0xfe => (Item::Int(get(at + 1, 1)?[0] as i8 as i64), 1, 1),
                0xf1..=0xfd => (Item::Int((b & 0x0f) as i64 - 1), 1, 0),
                _ => return bad("unknown ziplist entry encoding"),
            },
        };
        at += head + data;
        items.push(item);
    }
    if at != end {
        return bad("ziplist entry past the end");
    }
    Ok(items)
}

/// The field/value pairs of a zipmap (Redis < 2.6 small hashes).
fn zipmap(zm: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut r = Reader { b: zm, at: 1 };
    let len = |r: &mut Reader<'_>| -> Result<Option<usize>> {
        Ok(match r.u8()? {
            0xff => None,
            254 => Some(u32::from_le_bytes(r.fixed()?) as usize),
            n => Some(n as usize),
        })
    };
    let mut pairs = Vec::new();
    while let Some(klen) = len(&mut r)? {
        let field = r.take(klen)?.to_vec();
        let vlen = len(&mut r)?.ok_or(Error::Format("zipmap ends inside an entry"))?;
        let free = r.u8()? as usize;
        let value = r.take(vlen)?.to_vec();
        r.take(free)?;
        pairs.push((field, value));
    }
    Ok(pairs)
}

/// The members of an intset: `u32 LE width (2, 4, 8) | u32 LE count |
/// values LE`.
fn intset(is: &[u8]) -> Result<Vec<Vec<u8>>> {
    if is.len() < 8 {
        return bad("intset shorter than its header");
    }
    let width = u32::from_le_bytes(is[..4].try_into().expect("4")) as usize;
    let n = u32::from_le_bytes(is[4..8].try_into().expect("4")) as usize;
    if !matches!(width, 2 | 4 | 8) || (is.len() - 8) != n.saturating_mul(width) {
        return bad("intset size wrong");
    }
    Ok(is[8..]
        .chunks_exact(width)
        .map(|c| {
            let v = match width {
                2 => i16::from_le_bytes(c.try_into().expect("2")) as i64,
                4 => i32::from_le_bytes(c.try_into().expect("4")) as i64,
                _ => i64::from_le_bytes(c.try_into().expect("8")),
            };
            v.to_string().into_bytes()
        })
        .collect())
}

fn owned(items: Vec<Item<'_>>) -> Vec<Vec<u8>> {
    items.into_iter().map(|i| i.bytes().into_owned()).collect()
}

fn pairs(items: Vec<Item<'_>>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    if !items.len().is_multiple_of(2) {
        return bad("an odd number of hash entries");
    }
    Ok(items
        .chunks_exact(2)
        .map(|p| (p[0].bytes().into_owned(), p[1].bytes().into_owned()))
        .collect())
}

fn scored(items: Vec<Item<'_>>) -> Result<Vec<(Vec<u8>, f64)>> {
    if !items.len().is_multiple_of(2) {
        return bad("an odd number of sorted set entries");
    }
    items
        .chunks_exact(2)
        .map(|p| Ok((p[0].bytes().into_owned(), p[1].score()?)))
        .collect()
}

/// Refuses a repeated name (Redis refuses them in its plain encodings).
fn unique<'x>(names: impl Iterator<Item = &'x [u8]>) -> Result<()> {
    let mut seen = HashSet::new();
    for n in names {
        if !seen.insert(n) {
            return bad("a duplicate member or field");
        }
    }
    Ok(())
}

/// Refuses an empty collection (Redis's "empty keys").
fn nonempty<T>(v: Vec<T>) -> Result<Vec<T>> {
    if v.is_empty() {
        return bad("an empty collection");
    }
    Ok(v)
}

fn object(t: u8, r: &mut Reader<'_>) -> Result<Value> {
    Ok(match t {
        T_STRING => Value::String(r.string()?),
        T_LIST => {
            let n = r.count()?;
            let items = (0..n).map(|_| r.string()).collect::<Result<Vec<_>>>()?;
            Value::List(nonempty(items)?)
        }
        T_LIST_ZIPLIST => Value::List(nonempty(owned(ziplist(&r.string()?)?))?),
        T_LIST_QUICKLIST | T_LIST_QUICKLIST_2 => {
            let nodes = r.count()?;
            let mut items = Vec::new();
            for _ in 0..nodes {
                let container = if t == T_LIST_QUICKLIST_2 {
                    r.len()?
                } else {
                    NODE_PACKED
                };
                let blob = r.string()?;
                match container {
                    NODE_PLAIN => items.push(blob),
                    NODE_PACKED if t == T_LIST_QUICKLIST => items.extend(owned(ziplist(&blob)?)),
                    NODE_PACKED => items.extend(owned(listpack(&blob)?)),
                    _ => return bad("unknown quicklist container"),
                }
            }
            Value::List(nonempty(items)?)
        }
        T_SET => {
            let n = r.count()?;
            let items = (0..n).map(|_| r.string()).collect::<Result<Vec<_>>>()?;
            unique(items.iter().map(|m| &m[..]))?;
            Value::Set(nonempty(items)?)
        }
        T_SET_INTSET => {
            let items = intset(&r.string()?)?;
            unique(items.iter().map(|m| &m[..]))?;
            Value::Set(nonempty(items)?)
        }
        T_ZSET | T_ZSET_2 => {
            let n = r.count()?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                let member = r.string()?;
                let score = if t == T_ZSET_2 {
                    r.binary_double()?
                } else {
                    r.text_double()?
                };
                if score.is_nan() {
                    return bad("a NaN score");
                }
                items.push((member, score));
            }
            unique(items.iter().map(|(m, _)| &m[..]))?;
            Value::ZSet(nonempty(items)?)
        }
        T_ZSET_ZIPLIST | T_ZSET_LISTPACK => {
            let blob = r.string()?;
            let items = if t == T_ZSET_LISTPACK {
                listpack(&blob)?
            } else {
                ziplist(&blob)?
            };
            let items = scored(items)?;
            unique(items.iter().map(|(m, _)| &m[..]))?;
            Value::ZSet(nonempty(items)?)
        }
        T_HASH => {
            let n = r.count()?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push((r.string()?, r.string()?));
            }
            unique(items.iter().map(|(f, _)| &f[..]))?;
            Value::Hash(nonempty(items)?)
        }
        T_HASH_ZIPMAP | T_HASH_ZIPLIST | T_HASH_LISTPACK => {
            let blob = r.string()?;
            let items = match t {
                T_HASH_ZIPMAP => zipmap(&blob)?,
                T_HASH_ZIPLIST => pairs(ziplist(&blob)?)?,
                _ => pairs(listpack(&blob)?)?,
            };
            unique(items.iter().map(|(f, _)| &f[..]))?;
            Value::Hash(nonempty(items)?)
        }
        T_STREAM_LISTPACKS | T_STREAM_LISTPACKS_2 => {
            Value::Stream(stream(r, t == T_STREAM_LISTPACKS_2)?)
        }
        _ => return bad("an object type Basalt does not know"),
    })
}

/// The live entries of one stream node (a listpack keyed by `master`).
fn stream_node(master: StreamId, lp: &[u8], out: &mut Vec<StreamEntry>) -> Result<()> {
    let items = listpack(lp)?;
    if items.is_empty() {
        return bad("an empty listpack in a stream");
    }
    let mut it = items.into_iter();
    let mut next = || it.next().ok_or(Error::Format("stream node ends early"));
    let _count = next()?.int()?;
    let _deleted = next()?.int()?;
    let nfields = next()?.int()?;
    let nfields = usize::try_from(nfields).map_err(|_| Error::Format("stream master fields"))?;
    let mut master_fields = Vec::with_capacity(nfields.min(lp.len()));
    for _ in 0..nfields {
        master_fields.push(next()?.bytes().into_owned());
    }
    next()?; // the master entry's terminator
    while let Ok(flags) = next() {
        let flags = flags.int()?;
        let id = StreamId {
            ms: master.ms.wrapping_add(next()?.int()? as u64),
            seq: master.seq.wrapping_add(next()?.int()? as u64),
        };
        let mut fields = Vec::new();
        if flags & ENTRY_SAMEFIELDS != 0 {
            for f in &master_fields {
                fields.push((f.clone(), next()?.bytes().into_owned()));
            }
        } else {
            let n = next()?.int()?;
            for _ in 0..n.max(0) {
                let f = next()?.bytes().into_owned();
                fields.push((f, next()?.bytes().into_owned()));
            }
        }
        next()?; // lp-count
        if flags & ENTRY_DELETED == 0 {
            out.push((id, fields));
        }
    }
    Ok(())
}

fn stream(r: &mut Reader<'_>, v2: bool) -> Result<Stream> {
    let mut s = Stream::default();
    let nodes = r.count()?;
    let mut keys = HashSet::new();
    for _ in 0..nodes {
        let key = r.string()?;
        let master = StreamId::from_raw(&key)?;
        if !keys.insert(master) {
            return bad("a stream node added twice");
        }
        let lp = r.string()?;
        stream_node(master, &lp, &mut s.entries)?;
    }
    s.entries.sort_by_key(|e| e.0);
    if s.entries.windows(2).any(|w| w[0].0 == w[1].0) {
        return bad("a stream entry id twice");
    }
    let length = r.len()?;
    s.last_id = r.stream_id()?;
    if v2 {
        let _first = r.stream_id()?;
        s.max_deleted = r.stream_id()?;
        s.entries_added = r.len()?;
    } else {
        s.entries_added = length;
    }
    let ngroups = r.count()?;
    let mut names = HashSet::new();
    for _ in 0..ngroups {
        let name = r.string()?;
        if !names.insert(name.clone()) {
            return bad("a consumer group twice");
        }
        let last_id = r.stream_id()?;
        let entries_read = if v2 { r.len()? as i64 } else { -1 };
        let npel = r.count()?;
        // id -> (delivery time, count, consumer)
        let mut pel: BTreeMap<StreamId, (u64, u64, Option<Vec<u8>>)> = BTreeMap::new();
        for _ in 0..npel {
            let id = StreamId::from_raw(r.take(16)?)?;
            let delivered = r.millis()?;
            let count = r.len()?;
            if pel.insert(id, (delivered, count, None)).is_some() {
                return bad("a pending entry twice in a group");
            }
        }
        let nconsumers = r.count()?;
        let mut consumers = Vec::with_capacity(nconsumers);
        let mut cnames = HashSet::new();
        for _ in 0..nconsumers {
            let cname = r.string()?;
            if !cnames.insert(cname.clone()) {
                return bad("a consumer twice in a group");
            }
            let seen_ms = r.millis()?;
            let n = r.count()?;
            for _ in 0..n {
                let id = StreamId::from_raw(r.take(16)?)?;
                let slot = &mut pel
                    .get_mut(&id)
                    .ok_or(Error::Format(
                        "a consumer's entry is not pending in its group",
                    ))?
                    .2;
                if slot.is_some() {
                    return bad("a pending entry owned twice");
                }
                *slot = Some(cname.clone());
            }
            consumers.push(StreamConsumer {
                name: cname,
                seen_ms,
            });
        }
        let pending = pel
            .into_iter()
            .map(|(id, (delivered_ms, count, consumer))| {
                Ok(StreamPending {
                    id,
                    consumer: consumer
                        .ok_or(Error::Format("a pending entry without a consumer"))?,
                    delivered_ms,
                    count,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        s.groups.push(StreamGroup {
            name,
            last_id,
            entries_read,
            pending,
            consumers,
        });
    }
    Ok(s)
}

// ------------------------------------------------------------------ encode

/// The DUMP payload of `v`: type, object, version and checksum.
pub fn encode(v: &Value) -> Vec<u8> {
    let mut w = Vec::new();
    match v {
        Value::String(s) => {
            w.push(T_STRING);
            put_string(&mut w, s);
        }
        Value::List(items) => {
            w.push(T_LIST_QUICKLIST_2);
            let mut nodes: Vec<Listpack> = Vec::new();
            for item in items {
                match nodes.last_mut() {
                    Some(lp) if lp.buf.len() + item.len() <= LIST_NODE_BYTES => lp.push(item),
                    _ => {
                        let mut lp = Listpack::new();
                        lp.push(item);
                        nodes.push(lp);
                    }
                }
            }
            put_len(&mut w, nodes.len() as u64);
            for lp in nodes {
                put_len(&mut w, NODE_PACKED);
                put_raw(&mut w, &lp.finish());
            }
        }
        Value::Set(members) => {
            w.push(T_SET);
            put_len(&mut w, members.len() as u64);
            for m in members {
                put_string(&mut w, m);
            }
        }
        Value::Hash(pairs) => {
            w.push(T_HASH);
            put_len(&mut w, pairs.len() as u64);
            for (f, v) in pairs {
                put_string(&mut w, f);
                put_string(&mut w, v);
            }
        }
        Value::ZSet(items) => {
            w.push(T_ZSET_2);
            put_len(&mut w, items.len() as u64);
            for (m, s) in items {
                put_string(&mut w, m);
                w.extend_from_slice(&s.to_le_bytes());
            }
        }
        Value::Stream(s) => {
            w.push(T_STREAM_LISTPACKS_2);
            put_stream(&mut w, s);
        }
    }
    w.extend_from_slice(&VERSION.to_le_bytes());
    let crc = crc64(&w);
    w.extend_from_slice(&crc.to_le_bytes());
    w
}

fn put_len(w: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        w.push(n as u8);
    } else if n < 1 << 14 {
        w.push(0x40 | (n >> 8) as u8);
        w.push(n as u8);
    } else if n <= u32::MAX as u64 {
        w.push(0x80);
        w.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        w.push(0x81);
        w.extend_from_slice(&n.to_be_bytes());
    }
}

/// A string as Redis writes one: a short decimal integer that fits 32
/// bits in its integer form, anything else as length and bytes.
fn put_string(w: &mut Vec<u8>, s: &[u8]) {
    if s.len() <= 11 {
        if let Some(v) = parse_i64(s) {
            if let Ok(v) = i8::try_from(v) {
                w.push(0xc0);
                w.extend_from_slice(&v.to_le_bytes());
                return;
            } else if let Ok(v) = i16::try_from(v) {
                w.push(0xc1);
                w.extend_from_slice(&v.to_le_bytes());
                return;
            } else if let Ok(v) = i32::try_from(v) {
                w.push(0xc2);
                w.extend_from_slice(&v.to_le_bytes());
                return;
            }
        }
    }
    put_raw(w, s);
}

/// Bytes as length and bytes, never integer-encoded (blobs, raw ids).
fn put_raw(w: &mut Vec<u8>, s: &[u8]) {
    put_len(w, s.len() as u64);
    w.extend_from_slice(s);
}

/// A listpack being built.
struct Listpack {
    buf: Vec<u8>,
    count: usize,
}

impl Listpack {
    fn new() -> Listpack {
        Listpack {
            buf: vec![0; 6],
            count: 0,
        }
    }

    /// Appends an element: as an integer if it is one in canonical form
    /// (as Redis stores it), else as a string.
    fn push(&mut self, s: &[u8]) {
        match parse_i64(s) {
            Some(v) => self.push_int(v),
            None => self.push_str(s),
        }
    }

    fn push_int(&mut self, v: i64) {
        let start = self.buf.len();
        let b = &mut self.buf;
        if (0..=127).contains(&v) {
            b.push(v as u8);
        } else if (-4096..=4095).contains(&v) {
            let u = (v as u16) & 0x1fff;
            b.push(0xc0 | (u >> 8) as u8);
            b.push(u as u8);
        } else if let Ok(v) = i16::try_from(v) {
            b.push(0xf1);
            b.extend_from_slice(&v.to_le_bytes());
        } else if (-(1 << 23)..(1 << 23)).contains(&v) {
            b.push(0xf2);
            b.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
        } else if let Ok(v) = i32::try_from(v) {
            b.push(0xf3);
            b.extend_from_slice(&v.to_le_bytes());
        } else {
            b.push(0xf4);
            b.extend_from_slice(&v.to_le_bytes());
        }
        self.end_entry(start);
    }

    fn push_str(&mut self, s: &[u8]) {
        let start = self.buf.len();
        let b = &mut self.buf;
        let n = s.len();
        if n < 64 {
            b.push(0x80 | n as u8);
        } else if n < 4096 {
            b.push(0xe0 | (n >> 8) as u8);
            b.push(n as u8);
        } else {
            b.push(0xf0);
            b.extend_from_slice(&(n as u32).to_le_bytes());
        }
        b.extend_from_slice(s);
        self.end_entry(start);
    }

    /// Writes the back-length of the entry that starts at `start`: its
    /// length in 7-bit groups, most significant first, every byte but the
    /// first flagged with 0x80 (it is read from its last byte backwards).
    fn end_entry(&mut self, start: usize) {
        let len = self.buf.len() - start;
        let n = backlen_size(len);
        for k in (0..n).rev() {
            let group = ((len >> (7 * k)) & 0x7f) as u8;
            self.buf.push(if k == n - 1 { group } else { group | 0x80 });
        }
        self.count += 1;
    }

    fn finish(mut self) -> Vec<u8> {
        self.buf.push(0xff);
        let total = self.buf.len() as u32;
        self.buf[..4].copy_from_slice(&total.to_le_bytes());
        let count = self.count.min(u16::MAX as usize) as u16;
        self.buf[4..6].copy_from_slice(&count.to_le_bytes());
        self.buf
    }
}

fn put_id(w: &mut Vec<u8>, id: StreamId) {
    put_len(w, id.ms);
    put_len(w, id.seq);
}

/// The stream object: nodes of up to [`STREAM_NODE_ENTRIES`] entries, each
/// a listpack whose master entry names the node's first entry's fields
/// (entries with the same fields store only their values), then the
/// metadata and the consumer groups.
fn put_stream(w: &mut Vec<u8>, s: &Stream) {
    let mut nodes: Vec<(StreamId, Vec<u8>)> = Vec::new();
    let mut i = 0;
    while i < s.entries.len() {
        let (master, first_fields) = &s.entries[i];
        let mut lp = Listpack::new();
        let mut n = 0;
        let mut body = Listpack::new();
        while i < s.entries.len()
            && n < STREAM_NODE_ENTRIES
            && (n == 0 || body.buf.len() < STREAM_NODE_BYTES)
        {
            let (id, fields) = &s.entries[i];
            let same = fields.len() == first_fields.len()
                && fields.iter().zip(first_fields).all(|(a, b)| a.0 == b.0);
            body.push_int(if same { ENTRY_SAMEFIELDS } else { 0 });
            body.push_int(id.ms.wrapping_sub(master.ms) as i64);
            body.push_int(id.seq.wrapping_sub(master.seq) as i64);
            if same {
                for (_, v) in fields {
                    body.push(v);
                }
                body.push_int(fields.len() as i64 + 3);
            } else {
                body.push_int(fields.len() as i64);
                for (f, v) in fields {
                    body.push(f);
                    body.push(v);
                }
                body.push_int(2 * fields.len() as i64 + 4);
            }
            n += 1;
            i += 1;
        }
        // The master entry: count, deleted, the fields, a terminator.
        lp.push_int(n as i64);
        lp.push_int(0);
        lp.push_int(first_fields.len() as i64);
        for (f, _) in first_fields {
            lp.push(f);
        }
        lp.push_int(0);
        lp.buf.extend_from_slice(&body.buf[6..]);
        lp.count += body.count;
        nodes.push((*master, lp.finish()));
    }
    put_len(w, nodes.len() as u64);
    for (master, lp) in &nodes {
        put_raw(w, &master.raw());
        put_raw(w, lp);
    }
    put_len(w, s.entries.len() as u64);
    let top = s.entries.last().map(|e| e.0).unwrap_or_default();
    put_id(w, s.last_id.max(top));
    put_id(w, s.entries.first().map(|e| e.0).unwrap_or_default());
    put_id(w, s.max_deleted);
    put_len(w, s.entries_added.max(s.entries.len() as u64));
    put_len(w, s.groups.len() as u64);
    for g in &s.groups {
        put_raw(w, &g.name);
        put_id(w, g.last_id);
        put_len(w, g.entries_read as u64);
        let mut pending: Vec<&StreamPending> = g.pending.iter().collect();
        pending.sort_by_key(|p| p.id);
        put_len(w, pending.len() as u64);
        for p in &pending {
            w.extend_from_slice(&p.id.raw());
            w.extend_from_slice(&p.delivered_ms.to_le_bytes());
            put_len(w, p.count);
        }
        // Every consumer that owns a pending entry is listed.
        let mut consumers: BTreeMap<&[u8], u64> = g
            .consumers
            .iter()
            .map(|c| (&c.name[..], c.seen_ms))
            .collect();
        for p in &pending {
            consumers.entry(&p.consumer).or_insert(p.delivered_ms);
        }
        put_len(w, consumers.len() as u64);
        for (name, seen) in consumers {
            put_raw(w, name);
            w.extend_from_slice(&seen.to_le_bytes());
            let mine: Vec<&&StreamPending> =
                pending.iter().filter(|p| p.consumer == name).collect();
            put_len(w, mine.len() as u64);
            for p in mine {
                w.extend_from_slice(&p.id.raw());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn crc64_is_redis_jones_variant() {
        assert_eq!(crc64(b"123456789"), 0xe9c6d914c4b8d9ca);
    }

    #[test]
    fn redis_payloads_decode() {
        // Captured from redis-server 7.0.15.
        let cases: &[(&str, Value)] = &[
            (
                "000568656c6c6f0a006372df766534200a",
                Value::String(b"hello".to_vec()),
            ),
            ("00c139300a009d94ea2793fc08b9", Value::String(b"12345".to_vec())),
            (
                "00c30a405002616261e042010161620a00949d5f0eb1dea445",
                Value::String(b"ab".repeat(40)),
            ),
            (
                "1201021c1c000000070081610281620201010201dffb02c12c02f270110104ff0a000957876d6b293423",
                Value::List(
                    ["a", "b", "1", "2", "-5", "300", "70000"]
                        .iter()
                        .map(|s| s.as_bytes().to_vec())
                        .collect(),
                ),
            ),
            (
                "0b1804000000040000006079feff0100000002000000030000000a008b0f7802aa2a77a0",
                Value::Set(
                    ["-100000", "1", "2", "3"]
                        .iter()
                        .map(|s| s.as_bytes().to_vec())
                        .collect(),
                ),
            ),
        ];
        for (h, want) in cases {
            assert_eq!(&decode(&hex(h)).unwrap(), want, "{h}");
        }
    }

    #[test]
    fn listpack_integers_and_strings_round_trip_at_every_width() {
        let mut items: Vec<Vec<u8>> = Vec::new();
        for v in [
            0i64,
            127,
            128,
            -1,
            -4096,
            4095,
            4096,
            -4097,
            32767,
            -32768,
            32768,
            8388607,
            -8388608,
            8388608,
            i32::MAX as i64,
            i32::MIN as i64,
            i32::MAX as i64 + 1,
            i64::MAX,
            i64::MIN,
        ] {
            items.push(v.to_string().into_bytes());
        }
        for n in [0usize, 1, 63, 64, 117, 118, 4095, 4096, 16380, 16383, 20000] {
            items.push(vec![b'x'; n]);
        }
        items.push(b"007".to_vec());
        items.push(b"-0".to_vec());
        let mut lp = Listpack::new();
        for i in &items {
            lp.push(i);
        }
        let blob = lp.finish();
        let back: Vec<Vec<u8>> = owned(listpack(&blob).unwrap());
        assert_eq!(back, items);
    }

    #[test]
    fn every_type_round_trips() {
        let big = vec![b'z'; 100_000];
        let values = vec![
            Value::String(b"".to_vec()),
            Value::String(b"-2147483648".to_vec()),
            Value::String(b"9999999999".to_vec()),
            Value::String(big.clone()),
            Value::List(
                (0..5000)
                    .map(|i| format!("e{i}").into_bytes())
                    .chain([big.clone()])
                    .collect(),
            ),
            Value::Set(vec![b"a".to_vec(), b"1".to_vec()]),
            Value::Hash(vec![
                (b"f".to_vec(), big.clone()),
                (b"g".to_vec(), b"1".to_vec()),
            ]),
            Value::ZSet(vec![
                (b"a".to_vec(), 1.5),
                (b"b".to_vec(), f64::INFINITY),
                (b"c".to_vec(), f64::NEG_INFINITY),
            ]),
            Value::Stream(Stream {
                entries: (0..250u64)
                    .map(|i| {
                        let fields = if i % 7 == 0 {
                            vec![(b"other".to_vec(), i.to_string().into_bytes())]
                        } else {
                            vec![
                                (b"f".to_vec(), i.to_string().into_bytes()),
                                (b"g".to_vec(), b"v".to_vec()),
                            ]
                        };
                        (
                            StreamId {
                                ms: 1000 + i / 3,
                                seq: i % 3,
                            },
                            fields,
                        )
                    })
                    .collect(),
                last_id: StreamId { ms: 5000, seq: 1 },
                max_deleted: StreamId { ms: 10, seq: 0 },
                entries_added: 300,
                groups: vec![StreamGroup {
                    name: b"g1".to_vec(),
                    last_id: StreamId { ms: 1001, seq: 0 },
                    entries_read: -1,
                    pending: vec![StreamPending {
                        id: StreamId { ms: 1000, seq: 1 },
                        consumer: b"alice".to_vec(),
                        delivered_ms: 123,
                        count: 2,
                    }],
                    consumers: vec![
                        StreamConsumer {
                            name: b"alice".to_vec(),
                            seen_ms: 5,
                        },
                        StreamConsumer {
                            name: b"bob".to_vec(),
                            seen_ms: 6,
                        },
                    ],
                }],
            }),
        ];
        for v in values {
            let back = decode(&encode(&v)).unwrap();
            assert_eq!(back, v);
        }
    }

    #[test]
    fn damaged_payloads_are_refused() {
        let good = encode(&Value::Hash(vec![(b"f".to_vec(), b"v".to_vec())]));
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            assert!(decode(&bad).is_err(), "flip at {i}");
        }
        assert_eq!(decode(&good[..good.len() - 1]), Err(Error::Footer));
        assert_eq!(decode(b"short"), Err(Error::Footer));
        // A newer RDB version with a correct checksum is still refused.
        let mut newer = good[..good.len() - 10].to_vec();
        newer.extend_from_slice(&11u16.to_le_bytes());
        let crc = crc64(&newer);
        newer.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(decode(&newer), Err(Error::Footer));
        // A body that lies about its length, with a valid footer.
        let mut lying = vec![T_SET, 5, 1, b'a'];
        lying.extend_from_slice(&VERSION.to_le_bytes());
        let crc = crc64(&lying);
        lying.extend_from_slice(&crc.to_le_bytes());
        assert!(matches!(decode(&lying), Err(Error::Format(_))));
    }

    /// A payload around `body` with a valid footer.
    fn payload(t: u8, body: &[u8]) -> Vec<u8> {
        let mut p = vec![t];
        p.extend_from_slice(body);
        p.extend_from_slice(&VERSION.to_le_bytes());
        let crc = crc64(&p);
        p.extend_from_slice(&crc.to_le_bytes());
        p
    }

    /// A ziplist of already-encoded entries (encoding byte(s) + data).
    fn ziplist_of(entries: &[&[u8]]) -> Vec<u8> {
        let mut body = Vec::new();
        let mut prev = 0usize;
        let mut tail = 10;
        for e in entries {
            tail = 10 + body.len();
            body.push(prev as u8);
            body.extend_from_slice(e);
            prev = 1 + e.len();
        }
        let mut zl = Vec::new();
        zl.extend_from_slice(&((10 + body.len() + 1) as u32).to_le_bytes());
        zl.extend_from_slice(&(tail as u32).to_le_bytes());
        zl.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        zl.extend_from_slice(&body);
        zl.push(0xff);
        zl
    }

    fn blob(b: &[u8]) -> Vec<u8> {
        let mut w = Vec::new();
        put_raw(&mut w, b);
        w
    }

    #[test]
    fn older_ziplist_zipmap_and_plain_forms_decode() {
        let zl = ziplist_of(&[
            b"\x01f",
            b"\x01v",
            b"\x01n",
            b"\xf6", // immediate 5
            b"\x01i",
            b"\xc0\x39\x30", // i16 12345
            b"\x01j",
            b"\xf0\x70\x11\x01", // 24-bit 70000
            b"\x01k",
            b"\xfe\x9c", // i8 -100
        ]);
        let pairs = |v: &[(&str, &str)]| -> Vec<(Vec<u8>, Vec<u8>)> {
            v.iter()
                .map(|(f, v)| (f.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect()
        };
        let want = pairs(&[
            ("f", "v"),
            ("n", "5"),
            ("i", "12345"),
            ("j", "70000"),
            ("k", "-100"),
        ]);
        assert_eq!(
            decode(&payload(T_HASH_ZIPLIST, &blob(&zl))).unwrap(),
            Value::Hash(want.clone())
        );
        let list: Vec<Vec<u8>> = want
            .iter()
            .flat_map(|(f, v)| [f.clone(), v.clone()])
            .collect();
        assert_eq!(
            decode(&payload(T_LIST_ZIPLIST, &blob(&zl))).unwrap(),
            Value::List(list.clone())
        );
        // A quicklist (v1) of two ziplist nodes.
        let mut ql = vec![2];
        ql.extend(blob(&zl));
        ql.extend(blob(&zl));
        let Value::List(got) = decode(&payload(T_LIST_QUICKLIST, &ql)).unwrap() else {
            panic!("not a list");
        };
        assert_eq!(got, [list.clone(), list].concat());
        // A zset ziplist: member, score as text or integer.
        let zz = ziplist_of(&[
            b"\x01a",
            b"\x031.5",
            b"\x01b",
            b"\xf3",
            b"\x01c",
            b"\x04-inf",
        ]);
        assert_eq!(
            decode(&payload(T_ZSET_ZIPLIST, &blob(&zz))).unwrap(),
            Value::ZSet(vec![
                (b"a".to_vec(), 1.5),
                (b"b".to_vec(), 2.0),
                (b"c".to_vec(), f64::NEG_INFINITY)
            ])
        );
        // A zipmap: f => v, n => 42 (with one free byte).
        let zm = b"\x02\x01f\x01\x00v\x01n\x02\x0142X\xff";
        assert_eq!(
            decode(&payload(T_HASH_ZIPMAP, &blob(zm))).unwrap(),
            Value::Hash(pairs(&[("f", "v"), ("n", "42")]))
        );
        // The old ZSET: scores as text, 254 / 255 for the infinities.
        let mut z = vec![3];
        z.extend(blob(b"a"));
        z.extend(b"\x032.5");
        z.extend(blob(b"b"));
        z.push(254);
        z.extend(blob(b"c"));
        z.push(255);
        assert_eq!(
            decode(&payload(T_ZSET, &z)).unwrap(),
            Value::ZSet(vec![
                (b"a".to_vec(), 2.5),
                (b"b".to_vec(), f64::INFINITY),
                (b"c".to_vec(), f64::NEG_INFINITY)
            ])
        );
        // The old plain LIST and a QUICKLIST_2 plain node.
        let mut l = vec![2];
        l.extend(blob(b"x"));
        l.extend(blob(b"y"));
        assert_eq!(
            decode(&payload(T_LIST, &l)).unwrap(),
            Value::List(vec![b"x".to_vec(), b"y".to_vec()])
        );
        let mut q = vec![1, NODE_PLAIN as u8];
        q.extend(blob(b"plain"));
        assert_eq!(
            decode(&payload(T_LIST_QUICKLIST_2, &q)).unwrap(),
            Value::List(vec![b"plain".to_vec()])
        );
    }

    #[test]
    fn malformed_objects_with_a_valid_footer_are_format_errors() {
        let format =
            |t: u8, body: &[u8]| matches!(decode(&payload(t, body)), Err(Error::Format(_)));
        assert!(format(T_SET, &[0]), "empty set");
        assert!(format(T_SET, &[2, 1, b'a', 1, b'a']), "duplicate member");
        assert!(format(T_HASH, &[0]), "empty hash");
        let mut nan = vec![1, 1, b'a'];
        nan.extend_from_slice(&f64::NAN.to_le_bytes());
        assert!(format(T_ZSET_2, &nan), "NaN score");
        assert!(format(6, &[0]), "module type");
        assert!(format(20, &[0]), "a Redis 7.2 type");
        assert!(
            format(T_LIST_QUICKLIST_2, &[1, 3, 1, b'x']),
            "unknown container"
        );
        assert!(
            format(T_SET_INTSET, &blob(&[2, 0, 0, 0, 2, 0, 0, 0, 1])),
            "short intset"
        );
        assert!(format(T_STRING, &[0xc3, 3, 10, 0, b'a', 0x20]), "bad LZF");
        // Lengths that promise more than the payload holds.
        assert!(format(T_LIST, &[0x80, 0xff, 0xff, 0xff, 0xff]));
        assert!(format(
            T_STRING,
            &[0x81, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        ));
    }

    #[test]
    fn lzf_back_references_may_overlap() {
        // "a" literal, then a reference of 9 bytes at distance 1.
        let out = lzf_decompress(&[0x00, b'a', 0xe0, 0x00, 0x00], 10).unwrap();
        assert_eq!(out, b"a".repeat(10));
        assert!(lzf_decompress(&[0x00, b'a', 0x20, 0x05], 4).is_err());
    }
}
