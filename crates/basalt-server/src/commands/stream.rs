//! Streams, first part: XADD, XLEN, XRANGE, XREVRANGE, XDEL, XTRIM and
//! XREAD (issue 20; consumer groups, XINFO and XSETID come next).
//!
//! XREAD BLOCK uses `crate::blocking` as the blocking pops do: XADD
//! signals the key, the blocked XREAD runs again; its first run leaves the
//! ids it resolved (`$`: the last id then) in the waiter's memo for the
//! re-runs. An XADD wakes one waiter, whose finish wakes the next, so
//! every reader blocked on the key is served in turn.
//!
//! The one idea: **a stream is an engine map whose entries are fields named
//! by their id**, so an append is one field record, a deletion or a trim one
//! deletion record per entry, and a range reads only the entries in it
//! (one disk read each), never the whole stream. The map is tagged
//! [`TAG_STREAM`]. Its fields:
//!
//! - `e` + the id (ms and seq, 8 bytes each, big-endian: 17 bytes): one
//!   entry; the value is its field/value pairs, each a u32 length
//!   (little-endian) and the bytes, after a u32 pair count.
//! - `m`: the stream's metadata ([`Meta`], 48 bytes): the last id handed
//!   out (which deletions do not lower), entries ever added, the largest id
//!   deleted, and the number of entries.
//!
//! The order of the ids is not kept by the engine (its maps are hash
//! tables): each stream in use has an index of its ids (a `BTreeSet`),
//! cached process-wide by (slot generation, key) and stamped with the
//! key's engine version, like the sorted sets' `ZCache`; any write to the
//! key by another command makes the stamp stale and the next stream
//! command rebuilds the index from the map's field names (names live in
//! memory: no disk read). Stream commands hold the key's stripe while they
//! use an index.

use std::collections::{BTreeSet, HashMap};

use basalt_engine::{Db, KeyKind};
use basalt_resp::Args;
use parking_lot::Mutex;

use super::{def, flags::*, is, parse_i64, CommandDef, Ctx, Error, Group, Result};
use crate::keyspace::TAG_STREAM;
use crate::notify::{NEW, STREAM};

const G: Group = Group::Stream;

/// The stream commands.
pub const COMMANDS: &[CommandDef] = &[
    def(
        "xadd",
        -5,
        WRITE | DENYOOM | FAST,
        (1, 1, 1),
        G,
        "5.0.0",
        "Appends a new message to a stream. Creates the key if it doesn't exist.",
        xadd,
    ),
    def(
        "xlen",
        2,
        READONLY | FAST,
        (1, 1, 1),
        G,
        "5.0.0",
        "Return the number of messages in a stream.",
        xlen,
    ),
    def(
        "xrange",
        -4,
        READONLY,
        (1, 1, 1),
        G,
        "5.0.0",
        "Returns the messages from a stream within a range of IDs.",
        xrange,
    ),
    def(
        "xrevrange",
        -4,
        READONLY,
        (1, 1, 1),
        G,
        "5.0.0",
        "Returns the messages from a stream within a range of IDs in reverse order.",
        xrevrange,
    ),
    def(
        "xdel",
        -3,
        WRITE | FAST,
        (1, 1, 1),
        G,
        "5.0.0",
        "Returns the number of messages after removing them from a stream.",
        xdel,
    ),
    def(
        "xtrim",
        -4,
        WRITE,
        (1, 1, 1),
        G,
        "5.0.0",
        "Deletes messages from the beginning of a stream.",
        xtrim,
    ),
    def(
        "xsetid",
        -3,
        WRITE | DENYOOM | FAST,
        (1, 1, 1),
        G,
        "5.0.0",
        "An internal command for replicating stream values",
        xsetid,
    ),
    def(
        "xread",
        -4,
        READONLY | BLOCKING | MOVABLE_KEYS,
        (0, 0, 0),
        G,
        "5.0.0",
        "Return never seen elements in multiple streams, with IDs greater than the ones reported by the caller for each stream. Can block.",
        xread,
    ),
];

/// A stream entry id: milliseconds and a sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Id {
    /// Milliseconds part.
    pub ms: u64,
    /// Sequence part.
    pub seq: u64,
}

impl Id {
    pub(super) const MIN: Id = Id { ms: 0, seq: 0 };
    pub(super) const MAX: Id = Id {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    /// `ms-seq`, as replies show it.
    pub(super) fn text(self) -> String {
        format!("{}-{}", self.ms, self.seq)
    }

    /// The entry's field name.
    pub(super) fn field(self) -> [u8; 17] {
        let mut f = [0u8; 17];
        f[0] = b'e';
        f[1..9].copy_from_slice(&self.ms.to_be_bytes());
        f[9..].copy_from_slice(&self.seq.to_be_bytes());
        f
    }

    fn from_field(f: &[u8]) -> Option<Id> {
        if f.len() != 17 || f[0] != b'e' {
            return None;
        }
        Some(Id {
            ms: u64::from_be_bytes(f[1..9].try_into().ok()?),
            seq: u64::from_be_bytes(f[9..].try_into().ok()?),
        })
    }

    /// The next id after this one, if any.
    pub(super) fn next(self) -> Option<Id> {
        if self.seq < u64::MAX {
            Some(Id {
                ms: self.ms,
                seq: self.seq + 1,
            })
        } else if self.ms < u64::MAX {
            Some(Id {
                ms: self.ms + 1,
                seq: 0,
            })
        } else {
            None
        }
    }

    /// The id before this one, if any.
    fn prev(self) -> Option<Id> {
        if self.seq > 0 {
            Some(Id {
                ms: self.ms,
                seq: self.seq - 1,
            })
        } else if self.ms > 0 {
            Some(Id {
                ms: self.ms - 1,
                seq: u64::MAX,
            })
        } else {
            None
        }
    }
}

pub(super) const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

/// Redis's `string2ull`: digits only, fitting a u64.
fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Parses `ms[-seq]`; a missing seq is `missing_seq`. `-` and `+` are the
/// smallest and largest ids when `specials`.
pub(super) fn parse_id(s: &[u8], missing_seq: u64, specials: bool) -> Result<Id> {
    if specials && s == b"-" {
        return Ok(Id::MIN);
    }
    if specials && s == b"+" {
        return Ok(Id::MAX);
    }
    let bad = || Error::err(&INVALID_ID[4..]);
    match s.iter().position(|&b| b == b'-') {
        None => Ok(Id {
            ms: parse_u64(s).ok_or_else(bad)?,
            seq: missing_seq,
        }),
        Some(i) => Ok(Id {
            ms: parse_u64(&s[..i]).ok_or_else(bad)?,
            seq: parse_u64(&s[i + 1..]).ok_or_else(bad)?,
        }),
    }
}

/// A range bound of XRANGE: inclusive, or exclusive with `(`.
pub(super) fn parse_bound(s: &[u8], start: bool) -> Result<Option<Id>> {
    let (exclusive, body) = match s.strip_prefix(b"(") {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    if exclusive && (body == b"-" || body == b"+") {
        return Err(Error::err(&INVALID_ID[4..]));
    }
    let id = parse_id(body, if start { 0 } else { u64::MAX }, true)?;
    if !exclusive {
        return Ok(Some(id));
    }
    match (start, if start { id.next() } else { id.prev() }) {
        (_, Some(id)) => Ok(Some(id)),
        (true, None) => Err(Error::err("invalid start ID for the interval")),
        (false, None) => Err(Error::err("invalid end ID for the interval")),
    }
}

/// The stream's metadata. The field `m` holds it as of the last command
/// that deleted entries (XDEL, XTRIM, a trimming XADD); a plain XADD
/// writes only its entry, and the exact values are derived when the index
/// is built: the last id is the largest of the stored one and the entries',
/// and every entry above the stored last id was added since.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Meta {
    pub(super) last: Id,
    pub(super) added: u64,
    pub(super) max_deleted: Id,
}

const META: &[u8] = b"m";

impl Meta {
    fn encode(&self) -> [u8; 40] {
        let mut b = [0u8; 40];
        for (i, v) in [
            self.last.ms,
            self.last.seq,
            self.added,
            self.max_deleted.ms,
            self.max_deleted.seq,
        ]
        .iter()
        .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    fn decode(b: &[u8]) -> Option<Meta> {
        if b.len() != 40 {
            return None;
        }
        let at = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        Some(Meta {
            last: Id {
                ms: at(0),
                seq: at(1),
            },
            added: at(2),
            max_deleted: Id {
                ms: at(3),
                seq: at(4),
            },
        })
    }
}

/// An entry's field/value pairs, encoded.
fn encode_pairs<'a>(pairs: impl ExactSizeIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&((pairs.len() / 2) as u32).to_le_bytes());
    for p in pairs {
        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        out.extend_from_slice(p);
    }
    out
}

/// The items of an entry's encoded pairs (field, value, field, ...).
fn decode_pairs(b: &[u8]) -> Result<Vec<&[u8]>> {
    let damaged = || Error::err("stream entry is damaged");
    let n = u32::from_le_bytes(
        b.get(..4)
            .ok_or_else(damaged)?
            .try_into()
            .map_err(|_| damaged())?,
    ) as usize;
    let mut at = 4;
    let mut items = Vec::with_capacity(n.min(1024) * 2);
    for _ in 0..n * 2 {
        let len = u32::from_le_bytes(
            b.get(at..at + 4)
                .ok_or_else(damaged)?
                .try_into()
                .map_err(|_| damaged())?,
        ) as usize;
        at += 4;
        items.push(b.get(at..at + len).ok_or_else(damaged)?);
        at += len;
    }
    Ok(items)
}

/// A stream's state in memory: its exact metadata, its ids in order and
/// its consumer groups.
#[derive(Debug, Default)]
struct State {
    meta: Meta,
    ids: BTreeSet<Id>,
    groups: super::stream_group::Groups,
}

impl State {
    /// The state of the stream at `key`, from its fields (names in memory,
    /// the metadata and the groups' records read).
    fn load(db: &Db, key: &[u8]) -> Result<State> {
        let names = db.field_names(key)?;
        let ids: BTreeSet<Id> = names.iter().filter_map(|f| Id::from_field(f)).collect();
        let groups = super::stream_group::load(db, key, &names)?;
        let stored = match db.get_field(key, META)? {
            Some(b) => Meta::decode(&b).ok_or_else(|| Error::err("stream metadata is damaged"))?,
            None => Meta::default(),
        };
        let since = match stored.last.next() {
            Some(n) => ids.range(n..).count() as u64,
            None => 0,
        };
        let top = ids.iter().next_back().copied().unwrap_or_default();
        Ok(State {
            meta: Meta {
                last: stored.last.max(top),
                added: stored.added + since,
                max_deleted: stored.max_deleted,
            },
            ids,
            groups,
        })
    }
}

/// Caches `state` as the stream at (generation, key) at `version`, unless
/// a newer one is cached (a build's, overtaken by a command's write).
fn check_in(generation: u64, key: &[u8], version: u64, state: State) {
    let mut c = cache().lock();
    let c = &mut *c;
    let now = c.by_gen.get(&generation).and_then(|g| g.get(key));
    if now.is_some_and(|e| e.version > version && e.state.is_some()) {
        return;
    }
    let replaced = now
        .and_then(|e| e.state.as_ref())
        .map_or(0, |s| s.ids.len());
    if c.ids - replaced + state.ids.len() > CACHE_IDS {
        c.by_gen.clear();
        c.ids = 0;
    }
    c.ids += state.ids.len();
    let g = c.by_gen.entry(generation).or_default();
    match g.get_mut(key) {
        Some(e) => {
            e.version = version;
            if let Some(old) = e.state.replace(state) {
                c.ids -= old.ids.len();
            }
        }
        None => {
            g.insert(
                key.to_vec(),
                Cached {
                    version,
                    state: Some(state),
                },
            );
        }
    }
}

/// One cached stream: the key's engine version the state matches, and the
/// state (taken out while a command uses it).
#[derive(Debug, Default)]
struct Cached {
    version: u64,
    state: Option<State>,
}

/// The streams in use, by slot generation and key.
#[derive(Debug, Default)]
struct Cache {
    by_gen: HashMap<u64, hashbrown::HashMap<Vec<u8>, Cached>>,
    /// Ids held over all streams.
    ids: usize,
}

/// Most ids the cache keeps over all streams before it drops them all (they
/// are rebuilt from the field names on their next use).
const CACHE_IDS: usize = 16 << 20;

fn cache() -> &'static Mutex<Cache> {
    static CACHE: std::sync::OnceLock<Mutex<Cache>> = std::sync::OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// A stream open for a command: its metadata and its ids. The caller
/// holds the key's stripe, and gives the state back with
/// [`Stream::close`]; a stream dropped without it (the command failed)
/// takes its cache slot with it, so no slot stays with its state out (which
/// would read as "in use" to `zbuild` and to a second open of the key).
pub(super) struct Stream<'a> {
    pub(super) db: &'a Db,
    generation: u64,
    pub(super) key: &'a [u8],
    pub(super) meta: Meta,
    pub(super) ids: BTreeSet<Id>,
    pub(super) groups: super::stream_group::Groups,
    /// Whether [`Stream::close`] gave the state back.
    closed: bool,
}

impl Drop for Stream<'_> {
    fn drop(&mut self) {
        if !self.closed {
            forget(self.generation, self.key);
        }
    }
}

/// Drops the cache slot of the stream at (generation, key), if any.
fn forget(generation: u64, key: &[u8]) {
    let mut c = cache().lock();
    let c = &mut *c;
    if let Some(state) = c
        .by_gen
        .get_mut(&generation)
        .and_then(|g| g.remove(key))
        .and_then(|e| e.state)
    {
        c.ids -= state.ids.len();
    }
}

/// [`Stream::open`] as a read lookup, as Redis's `lookupKeyRead`: a
/// keyspace hit (a key of another type too) or a miss and `keymiss`.
pub(super) fn open_read<'a>(
    ctx: &Ctx<'_>,
    db: &'a Db,
    generation: u64,
    key: &'a [u8],
) -> Result<Option<Stream<'a>>> {
    let s = Stream::open(db, generation, key);
    if !super::zbuild::stopped() {
        ctx.looked_up(key, !matches!(s, Ok(None)));
    }
    s
}

/// Inside a `zbuild::Deferring` scope, names each of `keys` that is a big
/// stream whose index is not cached to be built off the worker, and then
/// fails with `zbuild::stop()`: for a command that opens several streams
/// and has effects between the opens (XREAD's lookups, XREADGROUP's
/// deliveries). The caller holds the keys' stripes.
pub(super) fn defer_uncached<'k>(
    db: &Db,
    generation: u64,
    keys: impl IntoIterator<Item = &'k [u8]>,
) -> Result {
    if !super::zbuild::deferring() {
        return Ok(());
    }
    let mut stop = false;
    for key in keys {
        if let Some(m) = db.meta(key).filter(|m| is_big_stream(&m.kind)) {
            stop |= !is_cached(generation, key, m.version)
                && super::zbuild::defer(super::zbuild::Kind::Stream, generation, key);
        }
    }
    match stop {
        true => Err(super::zbuild::stop()),
        false => Ok(()),
    }
}

/// Whether a key of this kind is a stream big enough to have its index
/// built off the worker (`zbuild::STREAM_ENTRIES`).
fn is_big_stream(kind: &KeyKind) -> bool {
    matches!(kind, KeyKind::Map { tag: TAG_STREAM, len, .. } if *len >= super::zbuild::STREAM_ENTRIES)
}

/// Whether the cache holds the stream at `key` at `version`, or a command
/// has it out (under the key's stripe, which the caller then does not
/// hold).
pub(super) fn is_cached(generation: u64, key: &[u8], version: u64) -> bool {
    cache()
        .lock()
        .by_gen
        .get(&generation)
        .and_then(|g| g.get(key))
        .is_some_and(|e| e.version == version || e.state.is_none())
}

/// Builds the index of the stream at `key` and caches it, without the
/// key's stripe (`commands::zbuild`): only if the cache lacks it at the
/// key's version (or a command has it out), and only if no write came in
/// while it was read (the version is the same before and after). True
/// when it cached one.
pub(crate) fn build_index(db: &Db, generation: u64, key: &[u8]) -> Result<bool> {
    let Some(m) = db.meta(key) else {
        return Ok(false);
    };
    if !matches!(
        m.kind,
        KeyKind::Map {
            tag: TAG_STREAM,
            ..
        }
    ) || is_cached(generation, key, m.version)
    {
        return Ok(false);
    }
    let state = State::load(db, key)?;
    if db.version(key) != m.version {
        return Ok(false);
    }
    check_in(generation, key, m.version, state);
    Ok(true)
}

impl<'a> Stream<'a> {
    /// The stream at `key`: `None` if absent, WRONGTYPE if another type.
    pub(super) fn open(db: &'a Db, generation: u64, key: &'a [u8]) -> Result<Option<Stream<'a>>> {
        let Some(m) = db.meta(key) else {
            return Ok(None);
        };
        if !matches!(
            m.kind,
            KeyKind::Map {
                tag: TAG_STREAM,
                ..
            }
        ) {
            return Err(Error::WrongType);
        }
        // `out`: the slot is there with its state out, which (this command
        // holding the key's stripe) only this command can have done: a key
        // it names twice.
        let (cached, out) = {
            let mut c = cache().lock();
            let c = &mut *c;
            let entry = c.by_gen.get_mut(&generation).and_then(|g| g.get_mut(key));
            let out = entry.as_ref().is_some_and(|e| e.state.is_none());
            let hit = entry
                .filter(|e| e.version == m.version)
                .and_then(|e| e.state.take());
            if let Some(st) = &hit {
                c.ids -= st.ids.len();
            }
            (hit, out)
        };
        let state = match cached {
            Some(st) => st,
            // Built off the worker, then the command runs again.
            None if !out
                && is_big_stream(&m.kind)
                && super::zbuild::defer(super::zbuild::Kind::Stream, generation, key) =>
            {
                return Err(super::zbuild::stop());
            }
            None => State::load(db, key)?,
        };
        Ok(Some(Stream {
            db,
            generation,
            key,
            meta: state.meta,
            ids: state.ids,
            groups: state.groups,
            closed: false,
        }))
    }

    /// A new, empty stream (not written until something is added).
    pub(super) fn empty(db: &'a Db, generation: u64, key: &'a [u8]) -> Stream<'a> {
        Stream {
            db,
            generation,
            key,
            meta: Meta::default(),
            ids: BTreeSet::new(),
            groups: Default::default(),
            closed: false,
        }
    }

    /// Number of entries.
    pub(super) fn len(&self) -> u64 {
        self.ids.len() as u64
    }

    /// The first entry's id (0-0 when empty).
    pub(super) fn first_id(&self) -> Id {
        self.ids.iter().next().copied().unwrap_or_default()
    }

    /// [`has_tombstones`] of this stream.
    pub(super) fn has_tombstones(&self, start: Id) -> bool {
        has_tombstones(&self.ids, self.meta.max_deleted, start)
    }

    /// [`estimate`] of this stream.
    pub(super) fn estimate(&self, id: Id) -> i64 {
        estimate(&self.ids, &self.meta, id)
    }

    /// Writes the metadata field.
    pub(super) fn save_meta(&self) -> Result {
        self.db
            .put_field_tagged(self.key, TAG_STREAM, META, &self.meta.encode())?;
        Ok(())
    }

    /// Deletes one entry (the caller updates the metadata).
    /// Deletes one entry; an XDEL (`tombstone`) also records it as the
    /// largest deleted id, a trim does not (as in Redis).
    fn remove(&mut self, id: Id, tombstone: bool) -> Result<bool> {
        if !self.ids.remove(&id) {
            return Ok(false);
        }
        self.db.delete_field(self.key, &id.field())?;
        if tombstone && id > self.meta.max_deleted {
            self.meta.max_deleted = id;
        }
        Ok(true)
    }

    /// Trims by MAXLEN or MINID; at most `limit` entries (0 = no limit).
    fn trim(&mut self, how: &Trim) -> Result<u64> {
        let mut removed = 0u64;
        loop {
            if how.limit > 0 && removed >= how.limit {
                break;
            }
            let Some(&first) = self.ids.iter().next() else {
                break;
            };
            let go = match how.strategy {
                Strategy::MaxLen(n) => self.len() > n,
                Strategy::MinId(id) => first < id,
            };
            if !go {
                break;
            }
            self.remove(first, false)?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Puts the state back into the cache under the key's current version.
    pub(super) fn close(mut self) {
        self.closed = true;
        let Some(m) = self.db.meta(self.key) else {
            forget(self.generation, self.key);
            return;
        };
        let state = State {
            meta: self.meta,
            ids: std::mem::take(&mut self.ids),
            groups: std::mem::take(&mut self.groups),
        };
        check_in(self.generation, self.key, m.version, state);
    }

    /// Writes the entries of `ids` (in that order) as XRANGE replies them.
    pub(super) fn reply(&self, ctx: &mut Ctx<'_>, ids: &[Id]) -> Result {
        let body = self.entries(ctx.conn.protocol, ids, false)?;
        ctx.array(ids.len());
        ctx.out.extend_from_slice(&body);
        Ok(())
    }

    /// The entries of `ids`, each `[id, [field, value, ...]]`, encoded
    /// without an array header: their values are read in one pass and
    /// encoded as they are read (no copy of a value). With `may_be_gone`,
    /// an id the stream no longer has answers `[id, nil]` (XREADGROUP's
    /// history); without, every id must be in the stream.
    pub(super) fn entries(
        &self,
        protocol: basalt_resp::Protocol,
        ids: &[Id],
        may_be_gone: bool,
    ) -> Result<Vec<u8>> {
        let present: Vec<usize> = if may_be_gone {
            (0..ids.len())
                .filter(|&i| self.ids.contains(&ids[i]))
                .collect()
        } else {
            (0..ids.len()).collect()
        };
        let names: Vec<[u8; 17]> = present.iter().map(|&i| ids[i].field()).collect();
        let mut body = Vec::with_capacity(ids.len() * 64);
        let mut damaged = false;
        // The next position of `ids` to write: the gone ones before a
        // present one are written as it comes.
        let mut next = 0;
        let gone = |body: &mut Vec<u8>, id: Id| {
            let mut e = basalt_resp::Encoder::new(body, protocol);
            e.array(2);
            let mut buf = [0u8; 41];
            e.bulk(id_text(id, &mut buf));
            e.null_array();
        };
        let found = self
            .db
            .fields_with(self.key, &names, |j, v| {
                let i = present[j];
                while next < i {
                    gone(&mut body, ids[next]);
                    next += 1;
                }
                next = i + 1;
                let mut e = basalt_resp::Encoder::new(&mut body, protocol);
                e.array(2);
                let mut buf = [0u8; 41];
                e.bulk(id_text(ids[i], &mut buf));
                match decode_pairs(v) {
                    Ok(items) => {
                        e.array(items.len());
                        for item in items {
                            e.bulk(item);
                        }
                    }
                    Err(_) => {
                        damaged = true;
                        e.array(0);
                    }
                }
            })?
            .unwrap_or(0);
        for id in &ids[next..] {
            gone(&mut body, *id);
        }
        // Under the key's stripe the index and the engine agree; anything
        // else is damage, reported rather than sent as a broken reply.
        if damaged || found != present.len() {
            return Err(Error::err("stream entry is damaged or missing"));
        }
        Ok(body)
    }
}

impl From<crate::rdb::StreamId> for Id {
    fn from(i: crate::rdb::StreamId) -> Id {
        Id {
            ms: i.ms,
            seq: i.seq,
        }
    }
}

impl From<Id> for crate::rdb::StreamId {
    fn from(i: Id) -> crate::rdb::StreamId {
        crate::rdb::StreamId {
            ms: i.ms,
            seq: i.seq,
        }
    }
}

/// DUMP: the stream at `key` as a payload carries it (entries, metadata,
/// groups); `None` if absent. The caller holds the key's stripe.
pub(super) fn export(db: &Db, generation: u64, key: &[u8]) -> Result<Option<crate::rdb::Stream>> {
    let Some(s) = Stream::open(db, generation, key)? else {
        return Ok(None);
    };
    let mut entries = Vec::with_capacity(s.ids.len());
    for (name, v) in db.fields(key)? {
        if let Some(id) = Id::from_field(&name) {
            let items = decode_pairs(&v)?;
            let pairs = items
                .chunks_exact(2)
                .map(|p| (p[0].to_vec(), p[1].to_vec()))
                .collect();
            entries.push((id.into(), pairs));
        }
    }
    entries.sort_by_key(|e: &crate::rdb::StreamEntry| e.0);
    let out = crate::rdb::Stream {
        entries,
        last_id: s.meta.last.into(),
        max_deleted: s.meta.max_deleted.into(),
        entries_added: s.meta.added,
        groups: super::stream_group::export(&s.groups),
    };
    s.close();
    Ok(Some(out))
}

/// RESTORE: writes `s` under `key`, which the caller has emptied and
/// holds the stripe of: one field per entry, the metadata, the groups.
pub(super) fn import(db: &Db, key: &[u8], s: &crate::rdb::Stream) -> Result {
    let mut top = Id::MIN;
    for (id, fields) in &s.entries {
        let id = Id::from(*id);
        top = top.max(id);
        let items: Vec<&[u8]> = fields.iter().flat_map(|(f, v)| [&f[..], &v[..]]).collect();
        db.put_field_tagged(
            key,
            TAG_STREAM,
            &id.field(),
            &encode_pairs(items.into_iter()),
        )?;
    }
    let meta = Meta {
        last: Id::from(s.last_id).max(top),
        added: s.entries_added.max(s.entries.len() as u64),
        max_deleted: s.max_deleted.into(),
    };
    db.put_field_tagged(key, TAG_STREAM, META, &meta.encode())?;
    super::stream_group::import(db, key, &s.groups)
}

/// `ms-seq` of `id`, written into `buf`.
pub(super) fn id_text(id: Id, buf: &mut [u8; 41]) -> &[u8] {
    use std::io::Write as _;
    let mut w = &mut buf[..];
    let _ = write!(w, "{}-{}", id.ms, id.seq);
    let left = w.len();
    &buf[..41 - left]
}

/// Whether a deleted entry may lie at or after `start` (Redis's
/// `streamRangeHasTombstones` up to the end).
pub(super) fn has_tombstones(ids: &BTreeSet<Id>, max_deleted: Id, start: Id) -> bool {
    let Some(&first) = ids.iter().next() else {
        return false;
    };
    // No deletion recorded, or the latest one lies before the first entry.
    max_deleted != Id::MIN && first <= max_deleted && start <= max_deleted
}

/// The logical read counter of `id` (its distance from the first entry
/// ever added), when it can be known; -1 otherwise (Redis's
/// `streamEstimateDistanceFromFirstEverEntry`).
pub(super) fn estimate(ids: &BTreeSet<Id>, meta: &Meta, id: Id) -> i64 {
    let added = meta.added as i64;
    if added == 0 {
        return 0;
    }
    if ids.is_empty() && id <= meta.last {
        return added;
    }
    match id.cmp(&meta.last) {
        std::cmp::Ordering::Equal => return added,
        std::cmp::Ordering::Greater => return -1,
        std::cmp::Ordering::Less => {}
    }
    let first = ids.iter().next().copied().unwrap_or_default();
    if meta.max_deleted == Id::MIN || meta.max_deleted < first {
        let len = ids.len() as i64;
        match id.cmp(&first) {
            std::cmp::Ordering::Less => return added - len,
            std::cmp::Ordering::Equal => return added - len + 1,
            std::cmp::Ordering::Greater => {}
        }
    }
    -1
}

/// MAXLEN or MINID and its threshold.
#[derive(Debug)]
enum Strategy {
    MaxLen(u64),
    MinId(Id),
}

/// A trimming request (XADD's options or XTRIM's arguments).
#[derive(Debug)]
struct Trim {
    strategy: Strategy,
    limit: u64,
}

/// Parses `MAXLEN|MINID [=|~] threshold [LIMIT count]` at `args[*i]`;
/// advances `i`. `None` when `args[*i]` is neither word.
fn parse_trim(args: &Args<'_>, i: &mut usize, limit_seen: &mut bool) -> Result<Option<Trim>> {
    let maxlen = is(&args[*i], "maxlen");
    if !maxlen && !is(&args[*i], "minid") {
        return Ok(None);
    }
    *i += 1;
    let mut approx = false;
    if args.get(*i).is_some_and(|a| a == b"~") {
        approx = true;
        *i += 1;
    } else if args.get(*i).is_some_and(|a| a == b"=") {
        *i += 1;
    }
    let Some(threshold) = args.get(*i) else {
        return Err(Error::Syntax);
    };
    *i += 1;
    let strategy = if maxlen {
        let n = super::int_arg(threshold)?;
        if n < 0 {
            return Err(Error::err("The MAXLEN argument must be >= 0."));
        }
        Strategy::MaxLen(n as u64)
    } else {
        Strategy::MinId(parse_id(threshold, 0, false)?)
    };
    let mut limit = 0u64;
    if args.get(*i).is_some_and(|a| is(a, "limit")) {
        let Some(n) = args.get(*i + 1) else {
            return Err(Error::Syntax);
        };
        let n = super::int_arg(n)?;
        if n < 0 {
            return Err(Error::err("The LIMIT argument must be >= 0."));
        }
        if !approx {
            return Err(Error::err(
                "syntax error, LIMIT cannot be used without the special ~ option",
            ));
        }
        *limit_seen = true;
        limit = n as u64;
        *i += 2;
    } else if approx {
        // Redis bounds an approximate trim by 100 nodes' worth of entries;
        // Basalt trims exactly (which "~" allows), with the same bound.
        limit = 100 * 100;
    }
    Ok(Some(Trim { strategy, limit }))
}

fn xadd(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let mut nomk = false;
    let mut trim = None;
    let mut limit_seen = false;
    let mut i = 2;
    while i < args.len() {
        if is(&args[i], "nomkstream") {
            nomk = true;
            i += 1;
        } else if let Some(t) = parse_trim(&args, &mut i, &mut limit_seen)? {
            trim = Some(t);
        } else if is(&args[i], "limit") {
            return Err(Error::err(
                "syntax error, LIMIT cannot be used without specifying a trimming strategy",
            ));
        } else {
            break;
        }
    }
    // The id, then field/value pairs.
    let Some(id_arg) = args.get(i) else {
        return Err(Error::Arity("xadd".into()));
    };
    let pairs = args.len() - i - 1;
    if pairs == 0 || !pairs.is_multiple_of(2) {
        return Err(Error::Arity("xadd".into()));
    }
    // `*`, `ms-*` or an explicit id (a missing seq is 0).
    enum Want {
        Auto,
        AutoSeq(u64),
        Exact(Id),
    }
    let want = if id_arg == b"*" {
        Want::Auto
    } else if let Some(ms) = id_arg.strip_suffix(b"-*") {
        Want::AutoSeq(parse_u64(ms).ok_or_else(|| Error::err(&INVALID_ID[4..]))?)
    } else {
        let id = parse_id(id_arg, 0, false)?;
        if id == Id::MIN {
            return Err(Error::err(
                "The ID specified in XADD must be greater than 0-0",
            ));
        }
        Want::Exact(id)
    };
    // A plain XADD writes one record; one that trims writes the deletions
    // and the metadata too, as one batch (opened before the key's stripe,
    // the lock order).
    let _batch = trim.is_some().then(|| ctx.shared.keyspace.batch());
    let slot = ctx.slot();
    let generation = slot.generation();
    drop(slot);
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let existing = Stream::open(&db, generation, key)?;
    let created = existing.is_none();
    if created && nomk {
        drop(existing);
        drop(db);
        ctx.null();
        return Ok(());
    }
    let mut s = existing.unwrap_or_else(|| Stream::empty(&db, generation, key));
    let last = s.meta.last;
    let exhausted =
        || Error::err("The stream has exhausted the last possible ID, unable to add more items");
    let too_small = || {
        Error::err("The ID specified in XADD is equal or smaller than the target stream top item")
    };
    if last == Id::MAX {
        return Err(exhausted());
    }
    let id = match want {
        Want::Auto => {
            let now = ctx.now_ms;
            if now > last.ms {
                Id { ms: now, seq: 0 }
            } else {
                last.next().ok_or_else(exhausted)?
            }
        }
        Want::AutoSeq(ms) => {
            if ms > last.ms {
                Id { ms, seq: 0 }
            } else if ms == last.ms {
                if last.seq == u64::MAX {
                    return Err(too_small());
                }
                Id {
                    ms,
                    seq: last.seq + 1,
                }
            } else {
                return Err(too_small());
            }
        }
        Want::Exact(id) => {
            if id <= last {
                return Err(too_small());
            }
            id
        }
    };
    if id == Id::MIN {
        return Err(Error::err(
            "The ID specified in XADD must be greater than 0-0",
        ));
    }
    let value = encode_pairs(args.iter().skip(i + 1));
    db.put_field_tagged(key, TAG_STREAM, &id.field(), &value)?;
    s.ids.insert(id);
    s.meta.last = id;
    s.meta.added += 1;
    let trimmed = match &trim {
        Some(t) => s.trim(t)?,
        None => 0,
    };
    if trimmed > 0 {
        // Deletions need the stored metadata (the largest deleted id, and
        // the last id if the new entry itself went).
        s.save_meta()?;
    }
    s.close();
    drop(db);
    if created {
        ctx.notify(NEW, "new", key);
    }
    ctx.notify(STREAM, "xadd", key);
    // Wakes XREADs blocked on the key.
    ctx.shared.blocking.signal(ctx.conn.db, key);
    if trimmed > 0 {
        ctx.notify(STREAM, "xtrim", key);
    }
    ctx.bulk(id.text().as_bytes());
    Ok(())
}

fn xlen(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let slot = ctx.slot();
    let n = match slot.db() {
        Some(db) => {
            let _g = ctx.lock(key);
            Stream::open(db, slot.generation(), key)?.map(|s| {
                let n = s.len();
                s.close();
                n
            })
        }
        None => None,
    };
    drop(slot);
    ctx.looked_up(key, n.is_some());
    ctx.int(n.unwrap_or(0) as i64);
    Ok(())
}

fn xrange(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    range(ctx, args, false)
}

fn xrevrange(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    range(ctx, args, true)
}

/// XRANGE key start end [COUNT n], XREVRANGE key end start [COUNT n].
fn range(ctx: &mut Ctx<'_>, args: Args<'_>, rev: bool) -> Result {
    let key = &args[1];
    let (a, b) = if rev {
        (&args[3], &args[2])
    } else {
        (&args[2], &args[3])
    };
    let start = parse_bound(a, true)?;
    let end = parse_bound(b, false)?;
    let mut count: Option<usize> = None;
    let mut i = 4;
    while i < args.len() {
        if is(&args[i], "count") && i + 1 < args.len() {
            let n = parse_i64(&args[i + 1]).ok_or(Error::NotInteger)?;
            count = Some(n.max(0) as usize);
            i += 2;
        } else {
            return Err(Error::Syntax);
        }
    }
    let slot = ctx.slot();
    let Some(db) = slot.db() else {
        drop(slot);
        ctx.keymiss(key);
        ctx.array(0);
        return Ok(());
    };
    let _g = ctx.lock(key);
    let Some(s) = Stream::open(db, slot.generation(), key)? else {
        drop(_g);
        drop(slot);
        ctx.keymiss(key);
        ctx.array(0);
        return Ok(());
    };
    ctx.keyhit();
    if count == Some(0) {
        // Redis answers COUNT 0 (or less) on an existing stream with a
        // null array.
        s.close();
        drop(_g);
        drop(slot);
        ctx.enc().null_array();
        return Ok(());
    }
    let ids: Vec<Id> = match (start, end) {
        (Some(lo), Some(hi)) if lo <= hi => {
            let it = s.ids.range(lo..=hi);
            let limit = count.unwrap_or(usize::MAX);
            if rev {
                it.rev().take(limit).copied().collect()
            } else {
                it.take(limit).copied().collect()
            }
        }
        _ => Vec::new(),
    };
    let r = s.reply(ctx, &ids);
    s.close();
    r
}

fn xdel(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    // Every id is checked before anything is deleted.
    let ids = args
        .iter()
        .skip(2)
        .map(|a| parse_id(a, 0, false))
        .collect::<Result<Vec<Id>>>()?;
    let slot = ctx.slot();
    let generation = slot.generation();
    drop(slot);
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let Some(mut s) = Stream::open(&db, generation, key)? else {
        drop(db);
        ctx.int(0);
        return Ok(());
    };
    let mut deleted = 0;
    for id in ids {
        deleted += s.remove(id, true)? as i64;
    }
    if deleted > 0 {
        s.save_meta()?;
    }
    s.close();
    drop(db);
    if deleted > 0 {
        ctx.notify(STREAM, "xdel", key);
    }
    ctx.int(deleted);
    Ok(())
}

fn xtrim(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let mut i = 2;
    let mut limit_seen = false;
    let Some(trim) = parse_trim(&args, &mut i, &mut limit_seen)? else {
        return Err(Error::Syntax);
    };
    if i != args.len() {
        return Err(Error::Syntax);
    }
    let slot = ctx.slot();
    let generation = slot.generation();
    drop(slot);
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let Some(mut s) = Stream::open(&db, generation, key)? else {
        drop(db);
        ctx.int(0);
        return Ok(());
    };
    let removed = s.trim(&trim)?;
    if removed > 0 {
        s.save_meta()?;
    }
    s.close();
    drop(db);
    if removed > 0 {
        ctx.notify(STREAM, "xtrim", key);
    }
    ctx.int(removed as i64);
    Ok(())
}

/// XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id]
fn xsetid(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let id = parse_id(&args[2], 0, false)?;
    let mut added: Option<u64> = None;
    let mut max_deleted = Id::MIN;
    let mut i = 3;
    while i < args.len() {
        let more = args.len() - i - 1;
        if is(&args[i], "entriesadded") && more > 0 {
            let n = parse_i64(&args[i + 1]).ok_or(Error::NotInteger)?;
            if n < 0 {
                return Err(Error::err("entries_added must be positive"));
            }
            added = Some(n as u64);
            i += 2;
        } else if is(&args[i], "maxdeletedid") && more > 0 {
            max_deleted = parse_id(&args[i + 1], 0, false)?;
            if id < max_deleted {
                return Err(Error::err(
                    "The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                ));
            }
            i += 2;
        } else {
            return Err(Error::Syntax);
        }
    }
    let slot = ctx.slot();
    let generation = slot.generation();
    drop(slot);
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let Some(mut s) = Stream::open(&db, generation, key)? else {
        return Err(Error::err("no such key"));
    };
    let fail = |s: Stream<'_>, msg: &'static str| {
        s.close();
        Err(Error::err(msg))
    };
    // Redis 7.0 does not compare with the largest deleted id here.
    if let Some(&top) = s.ids.iter().next_back() {
        if id < top {
            return fail(
                s,
                "The ID specified in XSETID is smaller than the target stream top item",
            );
        }
        if added.is_some_and(|n| s.len() > n) {
            return fail(
                s,
                "The entries_added specified in XSETID is smaller than the target stream length",
            );
        }
    }
    s.meta.last = id;
    if let Some(n) = added {
        s.meta.added = n;
    }
    if max_deleted != Id::MIN {
        s.meta.max_deleted = max_deleted;
    }
    s.save_meta()?;
    s.close();
    drop(db);
    ctx.notify(STREAM, "xsetid", key);
    ctx.ok();
    Ok(())
}

/// The options of XREAD and XREADGROUP, parsed as Redis parses them for
/// both (one loop: XREAD refuses GROUP and NOACK by name).
pub(super) struct ReadArgs<'a> {
    /// Entries per stream (0 = no limit).
    pub(super) count: usize,
    /// BLOCK: `Some(None)` blocks forever (0 ms).
    pub(super) block: Option<Option<std::time::Duration>>,
    pub(super) noack: bool,
    /// GROUP's group and consumer.
    pub(super) group: Option<(&'a [u8], &'a [u8])>,
    /// The keys after STREAMS.
    pub(super) keys: Vec<&'a [u8]>,
    /// Where the ids start (`keys.len()` of them).
    pub(super) ids_at: usize,
}

pub(super) fn read_args<'a>(args: &Args<'a>, xreadgroup: bool) -> Result<ReadArgs<'a>> {
    let mut r = ReadArgs {
        count: 0,
        block: None,
        noack: false,
        group: None,
        keys: Vec::new(),
        ids_at: 0,
    };
    let mut streams_at = 0;
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        if is(&args[i], "block") && more > 0 {
            if crate::script::in_script() {
                // As Redis 7.0: a script may not ask to block, whatever
                // the timeout (the name as the script wrote it).
                return Err(Error::err(format!(
                    "{} command is not allowed with BLOCK option from scripts",
                    String::from_utf8_lossy(&args[0])
                )));
            }
            let ms = parse_i64(&args[i + 1])
                .ok_or_else(|| Error::err("timeout is not an integer or out of range"))?;
            if ms < 0 {
                return Err(Error::err("timeout is negative"));
            }
            r.block = Some((ms > 0).then(|| std::time::Duration::from_millis(ms as u64)));
            i += 2;
        } else if is(&args[i], "count") && more > 0 {
            r.count = parse_i64(&args[i + 1]).ok_or(Error::NotInteger)?.max(0) as usize;
            i += 2;
        } else if is(&args[i], "streams") && more > 0 {
            streams_at = i + 1;
            break;
        } else if is(&args[i], "group") && more >= 2 {
            if !xreadgroup {
                return Err(Error::err(
                    "The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.group = Some((
                args.get(i + 1).unwrap_or_default(),
                args.get(i + 2).unwrap_or_default(),
            ));
            i += 3;
        } else if is(&args[i], "noack") {
            if !xreadgroup {
                return Err(Error::err(
                    "The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.noack = true;
            i += 1;
        } else {
            return Err(Error::Syntax);
        }
    }
    if streams_at == 0 {
        return Err(Error::Syntax);
    }
    let n = args.len() - streams_at;
    if !n.is_multiple_of(2) {
        // Redis says XREAD for both commands.
        return Err(Error::err(
            "Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
        ));
    }
    r.keys = (streams_at..streams_at + n / 2)
        .filter_map(|k| args.get(k))
        .collect();
    r.ids_at = streams_at + n / 2;
    Ok(r)
}

/// XREAD [COUNT n] [BLOCK ms] STREAMS key... id...
fn xread(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let ReadArgs {
        count,
        block,
        keys,
        ids_at,
        ..
    } = read_args(&args, false)?;
    let n = keys.len();
    let client = ctx.conn.info.id;
    let rerun = block.is_some() && ctx.shared.blocking.is_blocked(client);
    // A re-run uses the ids its first run resolved (`$` then).
    let memo: Option<Vec<Id>> = if rerun {
        ctx.shared.blocking.memo(client).map(|m| {
            m.chunks_exact(16)
                .map(|c| Id {
                    ms: u64::from_be_bytes(c[..8].try_into().unwrap_or([0; 8])),
                    seq: u64::from_be_bytes(c[8..].try_into().unwrap_or([0; 8])),
                })
                .collect()
        })
    } else {
        None
    };
    let slot = ctx.slot();
    let generation = slot.generation();
    let db = slot.db();
    let mut sorted: Vec<&[u8]> = keys.clone();
    sorted.sort_unstable();
    sorted.dedup();
    let guards: Vec<_> = sorted.iter().map(|k| ctx.lock(k)).collect();
    if let Some(db) = db {
        defer_uncached(db, generation, sorted.iter().copied())?;
    }
    // The ids, resolved in order with the type checks (as Redis does).
    let mut after: Vec<Id> = Vec::with_capacity(n);
    let mut streams: Vec<Option<Stream<'_>>> = Vec::with_capacity(n);
    for (k, key) in keys.iter().enumerate() {
        let s = match db {
            Some(db) => match open_read(ctx, db, generation, key) {
                Ok(s) => s,
                // A re-run treats a key of another type as empty.
                Err(Error::WrongType) if rerun => None,
                Err(e) => {
                    streams.into_iter().flatten().for_each(Stream::close);
                    return Err(e);
                }
            },
            None => {
                ctx.keymiss(key);
                None
            }
        };
        let arg = &args[ids_at + k];
        let id = match &memo {
            Some(m) if k < m.len() => m[k],
            _ if arg == b"$" => s.as_ref().map_or(Id::MIN, |s| s.meta.last),
            _ => match parse_id(arg, 0, false) {
                Ok(id) => id,
                Err(e) => {
                    streams
                        .into_iter()
                        .chain([s])
                        .flatten()
                        .for_each(Stream::close);
                    return Err(e);
                }
            },
        };
        after.push(id);
        streams.push(s);
    }
    // Redis 7.0 looks every key up again to serve it: a second keyspace
    // hit or miss (and `keymiss`) per key.
    for (key, s) in keys.iter().zip(&streams) {
        ctx.looked_up(key, s.is_some() || db.is_some_and(|db| db.exists(key)));
    }
    let limit = if count == 0 { usize::MAX } else { count };
    let mut found: Vec<(usize, Vec<Id>)> = Vec::new();
    for (k, s) in streams.iter().enumerate() {
        let (Some(s), Some(from)) = (s, after[k].next()) else {
            continue;
        };
        let ids: Vec<Id> = s.ids.range(from..).take(limit).copied().collect();
        if !ids.is_empty() {
            found.push((k, ids));
        }
    }
    if found.is_empty() {
        for s in streams.into_iter().flatten() {
            s.close();
        }
        match block {
            Some(timeout) => {
                crate::blocking::block_on(ctx, &keys, timeout);
                if !rerun {
                    let mut m = Vec::with_capacity(16 * n);
                    for id in &after {
                        m.extend_from_slice(&id.ms.to_be_bytes());
                        m.extend_from_slice(&id.seq.to_be_bytes());
                    }
                    ctx.shared.blocking.set_memo(client, m);
                }
            }
            None => ctx.enc().null_array(),
        }
        drop(guards);
        drop(slot);
        return Ok(());
    }
    // RESP3 replies a map of key -> entries, RESP2 an array of pairs.
    let resp3 = ctx.conn.protocol == basalt_resp::Protocol::Resp3;
    if resp3 {
        ctx.enc().map(found.len());
    } else {
        ctx.array(found.len());
    }
    let mut result = Ok(());
    for (k, ids) in &found {
        if !resp3 {
            ctx.array(2);
        }
        ctx.bulk(keys[*k]);
        if let Some(s) = &streams[*k] {
            if let Err(e) = s.reply(ctx, ids) {
                result = Err(e);
                break;
            }
        }
    }
    for s in streams.into_iter().flatten() {
        s.close();
    }
    drop(guards);
    drop(slot);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_order_and_encode_as_redis_does() {
        assert_eq!(parse_id(b"5", 0, false).unwrap(), Id { ms: 5, seq: 0 });
        assert_eq!(parse_id(b"5-3", 0, false).unwrap(), Id { ms: 5, seq: 3 });
        assert_eq!(parse_id(b"5", u64::MAX, false).unwrap().seq, u64::MAX);
        assert_eq!(parse_id(b"-", 0, true).unwrap(), Id::MIN);
        assert_eq!(parse_id(b"+", 0, true).unwrap(), Id::MAX);
        for bad in [
            &b"x"[..],
            b"1-",
            b"-1",
            b"1-x",
            b"+1",
            b"18446744073709551616",
        ] {
            assert!(parse_id(bad, 0, false).is_err(), "{bad:?}");
        }
        let id = Id { ms: 7, seq: 9 };
        assert_eq!(Id::from_field(&id.field()), Some(id));
        assert!(Id { ms: 1, seq: 9 } < Id { ms: 2, seq: 0 });
        assert_eq!(
            parse_bound(b"(5-3", true).unwrap(),
            Some(Id { ms: 5, seq: 4 })
        );
        assert!(parse_bound(b"(0-0", false).is_err());
        let m = Meta {
            last: id,
            added: 3,
            max_deleted: Id { ms: 1, seq: 1 },
        };
        assert_eq!(Meta::decode(&m.encode()), Some(m));
        let pairs: Vec<&[u8]> = vec![b"f", b"", b"g", b"v"];
        let enc = encode_pairs(pairs.iter().copied());
        assert_eq!(decode_pairs(&enc).unwrap(), pairs);
        assert!(decode_pairs(&enc[..enc.len() - 1]).is_err());
    }
}
