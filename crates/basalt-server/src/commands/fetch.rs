//! Which records a command is about to read, so that those not in memory
//! are fetched before it runs (`conn.rs` reads them on the worker's
//! io_uring or the reader threads while only that connection waits, and
//! stages them; the command then runs in place and finds them staged).
//!
//! The policy lives here, the mechanics in `conn.rs`. A fetch is a guess
//! made before the command's locks: a record fetched for nothing (the key
//! changed in between) costs one read and never a wrong reply, because
//! staged bytes are found by where a record lies and records never change.
//!
//! What is fetched ahead:
//! - whole maps: HGETALL, HVALS, LRANGE, XRANGE, XREVRANGE
//!   ([`reads_whole_map`]);
//! - list ends: pops, LINDEX, LMOVE and the like (`list::cold_reads_after`);
//! - whole string values: GETDEL, GETEX, GETSET, SET ... GET, STRLEN,
//!   LCS (both keys), DUMP (a value, or a map's records), BITCOUNT,
//!   BITPOS, BITFIELD, BITFIELD_RO, BITOP's sources, and GETRANGE with an
//!   index from the end;
//! - ranges of string values: GETRANGE, SUBSTR, SETRANGE, GETBIT, SETBIT
//!   (a plain value's record, or the segments of a segmented one);
//! - hash fields: HSTRLEN, HINCRBY, HINCRBYFLOAT, the fields an HSCAN step
//!   returns, and the whole hash for HRANDFIELD ... WITHVALUES;
//! - the keys SORT's BY and GET patterns name for a set's or sorted set's
//!   members ([`sort_reads`]).
//!
//! GET, MGET, HGET and HMGET need none of this: they hand a cold read to
//! the ring themselves (`Ctx::cold_bulk`), except inside EXEC.

use basalt_engine::{ColdRead, Db, KeyKind};

use crate::keyspace::{TAG_HASH, TAG_SET, TAG_ZSET};
use basalt_resp::Args;

use super::{is, parse_i64};

/// Most records of one key fetched ahead of a command (separate reads of a
/// long string range, [`FETCH_AHEAD_SEGMENTS`]), and most segments of a
/// value looked at outright for it: a key with more missing is read as
/// before.
pub(crate) const FETCH_AHEAD_MAX: usize = 256;

/// Most segments of a value's range fetched ahead (8 MiB of 512-byte
/// segments, whose records with their headers and keys stay within the
/// 16 MiB a command may hold staged): a range of more than
/// [`FETCH_AHEAD_MAX`] is sampled first (`Db::cold_range_reads`) and
/// fetched only if part of it is not in memory.
pub(crate) const FETCH_AHEAD_SEGMENTS: usize = 16384;

/// Most bytes one command fetches ahead (staged bytes are held until the
/// command ends): a larger value is read where it is needed.
pub(crate) const FETCH_AHEAD_BYTES: usize = 16 << 20;

/// Whole-value reads of string commands (GETRANGE is also a range read).
const READS_VALUE: &[&[u8]] = &[
    b"getdel",
    b"getex",
    b"getset",
    b"getrange",
    b"substr",
    b"setrange",
    b"strlen",
    b"dump",
];

/// Bit commands (`bitmap.rs`).
const READS_BITS: &[&[u8]] = &[
    b"getbit",
    b"setbit",
    b"bitcount",
    b"bitpos",
    b"bitfield",
    b"bitfield_ro",
    b"bitop",
];

/// SORT's forms, whose BY and GET patterns name keys to read.
const READS_SORT: &[&[u8]] = &[b"sort", b"sort_ro"];

/// Most members of a set or sorted set whose BY and GET keys one SORT
/// looks at before it runs (each an index lookup on the worker, as SORT's
/// own): of a bigger set, that many picked at random.
const SORT_MEMBERS_MAX: usize = 1024;

/// Members (picked at random) whose keys a SORT looks at before all of
/// them ([`sort_reads`]).
const SORT_SAMPLE: usize = 8;

/// Hash commands that read field values besides HGET/HMGET.
const READS_FIELDS: &[&[u8]] = &[
    b"hstrlen",
    b"hincrby",
    b"hincrbyfloat",
    b"hrandfield",
    b"hscan",
];

/// Most bytes of a plain value's record fetched for a command that reads
/// or writes a small range of it (its CRC covers the whole record, so the
/// whole record is read): a larger one is read where it is needed.
const RANGE_RECORD_MAX: usize = 1 << 20;

fn named(name: &[u8], names: &[&[u8]]) -> bool {
    names.iter().any(|n| name.eq_ignore_ascii_case(n))
}

/// Whether the command may have reads fetched ahead ([`cold_reads`]): a
/// name check, before any lock, on every command of the fetching paths.
pub(crate) fn fetches_ahead(args: &Args<'_>) -> bool {
    let name = &args[0];
    if args.len() < 2 || !(3..=12).contains(&name.len()) {
        return false;
    }
    match name[0] | 0x20 {
        // GET and SET, the hot pair, are out after two comparisons: GET
        // reads cold values itself, SET reads only with its GET option.
        b'g' | b's' if name.len() == 3 => is(name, "set") && set_reads_old(args),
        b'g' | b's' | b'd' => {
            named(name, READS_VALUE) || named(name, READS_BITS) || named(name, READS_SORT)
        }
        b'h' => reads_whole_map(args) || named(name, READS_FIELDS),
        b'x' => reads_whole_map(args),
        b'l' | b'r' => {
            reads_whole_map(args) || named(name, super::list::READS_AT_ENDS) || is(name, "lcs")
        }
        b'b' => named(name, super::list::READS_AT_ENDS) || named(name, READS_BITS),
        _ => false,
    }
}

/// Whether a SET carries the GET option (arguments past the value).
fn set_reads_old(args: &Args<'_>) -> bool {
    args.len() > 3 && args.iter().skip(3).any(|a| is(a, "get"))
}

/// Whether the command reads the fields of the map at `args[1]` (a hash's,
/// a list's or a stream's records): HGETALL, HVALS, LRANGE, XRANGE,
/// XREVRANGE.
pub(crate) fn reads_whole_map(args: &Args<'_>) -> bool {
    args.len() >= 2
        && named(
            &args[0],
            &[b"hgetall", b"hvals", b"lrange", b"xrange", b"xrevrange"],
        )
}

/// The reads of the records a command passing [`fetches_ahead`] is about
/// to read that are not in memory, in database `dbi` (`gen`: its slot's
/// generation, for the list head cache); at most [`FETCH_AHEAD_BYTES`].
pub(crate) fn cold_reads(db: &Db, gen: u64, dbi: usize, args: &Args<'_>) -> Vec<ColdRead> {
    cold_reads_queued(
        db,
        gen,
        dbi,
        args,
        &mut super::list::Popped::default(),
        FETCH_AHEAD_BYTES,
    )
}

/// [`cold_reads`] for a command queued in an EXEC behind others: a list's
/// ends are taken as the pops queued before it leave them (`popped`, see
/// [`super::list::cold_reads_after`]), and at most `room` bytes are
/// fetched (what the commands before it left of the transaction's
/// budget): a long range that cannot fit is not looked at whole.
pub(crate) fn cold_reads_queued(
    db: &Db,
    gen: u64,
    dbi: usize,
    args: &Args<'_>,
    popped: &mut super::list::Popped,
    room: usize,
) -> Vec<ColdRead> {
    let name = &args[0];
    let key = &args[1];
    let reads = if reads_whole_map(args) {
        db.cold_field_reads(key, FETCH_AHEAD_MAX)
    } else if named(name, super::list::READS_AT_ENDS) {
        super::list::cold_reads_after(db, gen, dbi, args, popped)
    } else if named(name, READS_FIELDS) {
        field_reads(db, args)
    } else if named(name, READS_SORT) {
        sort_reads(db, args, room)
    } else {
        value_reads(db, args, room)
    };
    let bytes: usize = reads.iter().map(ColdRead::record_len).sum();
    if bytes > room {
        return Vec::new();
    }
    reads
}

/// The whole value at `key`: a plain value's record, or a segmented
/// value's segments (up to [`FETCH_AHEAD_SEGMENTS`] of them, and no more
/// than fit `room` bytes: [`segments_in`]).
pub(crate) fn whole(db: &Db, key: &[u8], room: usize) -> Vec<ColdRead> {
    whole_within(db, key, segments_in(room, key))
}

/// Most segments of `key`'s value whose records fit `room` bytes (each
/// holds a segment and the key at least), up to [`FETCH_AHEAD_SEGMENTS`]:
/// a longer range is refused before the index is looked at for all of it.
pub(crate) fn segments_in(room: usize, key: &[u8]) -> usize {
    (room / (basalt_engine::SEGMENT_LEN + key.len())).min(FETCH_AHEAD_SEGMENTS)
}

/// [`whole`] for a value of at most `segments` segments (a longer one
/// gets nothing): for a caller with a smaller budget than one command's
/// (a hand-over of scripts).
pub(crate) fn whole_within(db: &Db, key: &[u8], segments: usize) -> Vec<ColdRead> {
    db.cold_range_reads(key, 0, u64::MAX, FETCH_AHEAD_MAX, segments)
}

/// Bytes `from ..= to` of the value at `key` (`to` may be `u64::MAX`: to
/// the end), for a command that reads or writes that range (a range of
/// more than [`FETCH_AHEAD_MAX`] segments only up to `segments`): a plain
/// value's record only up to [`RANGE_RECORD_MAX`].
fn bytes(db: &Db, key: &[u8], from: u64, to: u64, segments: usize) -> Vec<ColdRead> {
    let len = to.saturating_sub(from).saturating_add(1);
    let mut reads = db.cold_range_reads(key, from, len, FETCH_AHEAD_MAX, segments);
    reads.retain(|r| r.record_len() <= RANGE_RECORD_MAX);
    reads
}

/// String and bit commands: what [`READS_VALUE`], [`READS_BITS`], LCS and
/// SET ... GET read.
fn value_reads(db: &Db, args: &Args<'_>, room: usize) -> Vec<ColdRead> {
    let name = &args[0];
    let key = &args[1];
    let whole_of = |key: &[u8]| whole(db, key, room);
    let int = |i: usize| args.get(i).and_then(parse_i64);
    if is(name, "getrange") || is(name, "substr") {
        // As the command reads: from the start with `end >= start`, only
        // the bytes asked for; otherwise the whole value (its length
        // first).
        return match (int(2), int(3)) {
            (Some(s), Some(e)) if s >= 0 && e >= s => {
                bytes(db, key, s as u64, e as u64, segments_in(room, key))
            }
            (Some(_), Some(_)) => whole_of(key),
            _ => Vec::new(),
        };
    }
    if is(name, "setrange") {
        return match (int(2), args.get(3)) {
            (Some(o), Some(piece)) if o >= 0 && !piece.is_empty() => bytes(
                db,
                key,
                o as u64,
                (o as u64).saturating_add(piece.len() as u64 - 1),
                // A long piece overwrites whole segments, which need no
                // read: only a short range is fetched.
                FETCH_AHEAD_MAX,
            ),
            _ => Vec::new(),
        };
    }
    if is(name, "getbit") || is(name, "setbit") {
        return match int(2) {
            Some(bit) if bit >= 0 => bytes(db, key, bit as u64 >> 3, bit as u64 >> 3, 1),
            _ => Vec::new(),
        };
    }
    if is(name, "strlen") {
        // A segmented value's length is in the index; a plain one's record
        // is read for it.
        return db
            .cold_value_read(key)
            .ok()
            .flatten()
            .filter(|r| r.record_len() <= RANGE_RECORD_MAX)
            .into_iter()
            .collect();
    }
    if is(name, "bitfield") {
        // With a SET or INCRBY, each field's bytes are read on their own;
        // with GETs only, the whole value. The span of fields that write
        // is fetched only when short (fields far apart would fetch all
        // that lies between them).
        return match bitfield_span(args) {
            Some((true, first, last)) => bytes(db, key, first, last, FETCH_AHEAD_MAX),
            Some((false, ..)) => whole_of(key),
            None => Vec::new(),
        };
    }
    if is(name, "dump") {
        let reads = whole_of(key);
        return if reads.is_empty() {
            db.cold_field_reads(key, FETCH_AHEAD_MAX)
        } else {
            reads
        };
    }
    if is(name, "lcs") {
        // Both keys, the second offered what the first left.
        return within(db, args.iter().skip(1).take(2), room);
    }
    if is(name, "bitop") {
        // BITOP op destkey srckey...: every source, whole, as long as
        // they fit what one command may hold staged together (a source
        // that does not fit is read where it is needed; the next ones are
        // still fetched).
        return within(db, args.iter().skip(3), room);
    }
    // GETDEL, GETEX, GETSET, SET ... GET, BITCOUNT, BITPOS and
    // BITFIELD_RO read the whole value.
    whole_of(key)
}

/// SORT and SORT_RO of a set or a sorted set (their members are in
/// memory; a list's elements are records, read where SORT reads them):
/// the values its BY pattern (when it sorts) and its GET patterns name for
/// each member, a string's record or a hash field's, up to
/// [`FETCH_AHEAD_MAX`] reads and `room` bytes, for at most
/// [`SORT_MEMBERS_MAX`] members (of a bigger set, that many at random). GET's keys only without LIMIT: which
/// members a window keeps is known only once sorted.
fn sort_reads(db: &Db, args: &Args<'_>, room: usize) -> Vec<ColdRead> {
    let Ok(o) = super::sort::parse(args, is(&args[0], "sort_ro")) else {
        return Vec::new();
    };
    let by = o.by.filter(|_| !o.dontsort);
    let gets = o.gets.iter().copied().filter(|_| o.limit.is_none());
    // `#` names the member itself, a pattern without `*` no key.
    let patterns: Vec<&[u8]> = by
        .into_iter()
        .chain(gets)
        .filter(|p| *p != b"#" && super::sort::pattern_key(p, b"").is_some())
        .collect();
    if patterns.is_empty() {
        return Vec::new();
    }
    let key = &args[1];
    match db.meta(key).map(|m| m.kind) {
        Some(KeyKind::Map { tag, .. }) if tag == TAG_SET || tag == TAG_ZSET => {}
        _ => return Vec::new(),
    }
    let read_of = |pattern: &[u8], member: &[u8]| {
        let (k, field) = super::sort::pattern_key(pattern, member)?;
        match field {
            Some(f) => db.cold_field_read(&k, f),
            None => db.cold_value_read(&k),
        }
        .ok()
        .flatten()
    };
    // Eight members picked at random first (without listing the set):
    // when their keys for the first pattern are all in memory, the rest
    // are taken to be, so a warm SORT looks up eight keys more, not every
    // key twice.
    let seed = crate::state::command_ns();
    let sample = db
        .random_fields(key, SORT_SAMPLE, true, seed)
        .unwrap_or_default();
    if !sample.iter().any(|m| read_of(patterns[0], m).is_some()) {
        return Vec::new();
    }
    // Every member of a set of at most 1,024; else 1,024 of them, picked
    // in O(1,024).
    let members = db
        .random_fields(key, SORT_MEMBERS_MAX, true, seed)
        .unwrap_or_default();
    let mut reads = Vec::new();
    let mut bytes = 0;
    for pattern in patterns {
        for member in &members {
            if let Some(read) = read_of(pattern, member) {
                bytes += read.record_len();
                if reads.len() == FETCH_AHEAD_MAX || bytes > room {
                    return reads;
                }
                reads.push(read);
            }
        }
    }
    reads
}

/// The whole values at `keys`, each offered the room the ones before it
/// left of `room` bytes: one that does not fit is read where it is
/// needed, and the next ones are still fetched.
fn within<'a>(db: &Db, keys: impl Iterator<Item = &'a [u8]>, room: usize) -> Vec<ColdRead> {
    let mut reads = Vec::new();
    let mut left = room;
    for k in keys {
        let more = whole(db, k, left);
        let bytes: usize = more.iter().map(ColdRead::record_len).sum();
        if bytes <= left {
            left -= bytes;
            reads.extend(more);
        }
    }
    reads
}

/// The bytes a BITFIELD's fields span (first and last byte), and whether
/// any of them writes; `None` when the arguments do not parse (the command
/// answers an error).
fn bitfield_span(args: &Args<'_>) -> Option<(bool, u64, u64)> {
    let (mut writes, mut first, mut last) = (false, u64::MAX, 0u64);
    let mut i = 2;
    while i < args.len() {
        let op = &args[i];
        if is(op, "overflow") {
            i += 2;
            continue;
        }
        let takes = if is(op, "get") {
            3
        } else if is(op, "set") || is(op, "incrby") {
            writes = true;
            4
        } else {
            return None;
        };
        let (ty, at) = (args.get(i + 1)?, args.get(i + 2)?);
        let bits = std::str::from_utf8(ty.get(1..)?)
            .ok()?
            .parse::<u64>()
            .ok()?;
        if !(1..=64).contains(&bits) {
            return None;
        }
        let offset = match at.strip_prefix(b"#") {
            Some(n) => (parse_i64(n)? as u64).checked_mul(bits)?,
            None => parse_i64(at)? as u64,
        };
        if offset > i64::MAX as u64 {
            return None;
        }
        first = first.min(offset >> 3);
        last = last.max((offset + bits - 1) >> 3);
        i += takes;
    }
    (first <= last).then_some((writes, first, last))
}

/// Hash commands of [`READS_FIELDS`].
fn field_reads(db: &Db, args: &Args<'_>) -> Vec<ColdRead> {
    let name = &args[0];
    let key = &args[1];
    let int = |i: usize| args.get(i).and_then(parse_i64);
    let hash_len = || match db.meta(key).map(|m| m.kind) {
        Some(KeyKind::Map { tag, len, .. }) if tag == TAG_HASH => Some(len),
        _ => None,
    };
    if is(name, "hrandfield") {
        // Only WITHVALUES reads values (the names are in memory), and the
        // whole hash is fetched only for a count of at least a quarter of
        // it: which fields a smaller one picks is not known before it runs.
        let count = int(2).map(i64::unsigned_abs);
        return match (count, hash_len()) {
            (Some(c), Some(len))
                if args.len() == 4
                    && is(&args[3], "withvalues")
                    && c.saturating_mul(4) >= len as u64 =>
            {
                db.cold_field_reads(key, FETCH_AHEAD_MAX)
            }
            _ => Vec::new(),
        };
    }
    if is(name, "hscan") {
        // The fields this step returns, as the command picks them (a pure
        // function of the names in memory, the cursor and COUNT), and that
        // MATCH keeps: a hash of at most 128 fields answers whole.
        use super::hash::{scan_args, scan_cursor, scan_names, LISTPACK_ENTRIES};
        let (Some(len), Ok(cursor), Ok(opts)) =
            (hash_len(), scan_cursor(&args[2]), scan_args(args, 3))
        else {
            return Vec::new();
        };
        if len <= LISTPACK_ENTRIES && opts.pattern.is_none() {
            // All of it, its neighbouring records in one read each.
            return db.cold_field_reads(key, LISTPACK_ENTRIES);
        }
        let Ok(names) = db.field_names(key) else {
            return Vec::new();
        };
        let (names, _) = scan_names(names, cursor, opts.count, len <= LISTPACK_ENTRIES);
        return names
            .iter()
            .filter(|n| {
                opts.pattern
                    .is_none_or(|p| crate::glob::matches(p, n, false))
            })
            .take(FETCH_AHEAD_MAX)
            .filter_map(|n| db.cold_field_read(key, n).ok().flatten())
            .collect();
    }
    // HSTRLEN, HINCRBY, HINCRBYFLOAT: one field.
    match args.get(2) {
        Some(field) => db
            .cold_field_read(key, field)
            .ok()
            .flatten()
            .into_iter()
            .collect(),
        None => Vec::new(),
    }
}
