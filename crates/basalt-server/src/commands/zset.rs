//! Sorted-set commands (Redis `t_zset.c`).
//!
//! A sorted set is an engine map tagged [`TAG_ZSET`]: one field per member
//! whose value is the score as 8 bytes (the f64's IEEE-754 bits,
//! little-endian), so ZADD of one member writes one small record whatever
//! the set's size. Ranks and ranges come from the set's in-memory
//! [`ZIndex`], kept in the process-wide [`ZCache`] and validated by the
//! key's engine version (see `zindex.rs`).
//!
//! Every command, reads included, holds the stripe lock(s) of its key(s)
//! while it uses an index: the index is checked out of the cache, used (and
//! changed together with the engine), and checked back in under the key's
//! new version. A command that fails half-way drops the index, so the next
//! access rebuilds it from what the engine holds.
//!
//! Blocking pops (BZPOPMIN BZPOPMAX BZMPOP) follow `crate::blocking`, with
//! [`pop`] as their core; every write that adds members to a sorted set
//! (ZADD, ZINCRBY, the STORE forms with a non-empty result) signals its key.

use basalt_engine::{Db, KeyKind};
use basalt_resp::{Args, Protocol};

use super::flags::*;
use super::{
    cnum, def, int_arg, is, parse_i64, zbuild, CommandDef, Ctx, Error, Group, Result, Rng,
};
use crate::blocking::{block_on, parse_timeout};
use crate::glob;
use crate::keyspace::{RedisType, Slot, SlotRead, TAG_SET, TAG_ZSET};
use crate::notify::{GENERIC, NEW, ZSET};
use crate::zindex::{LexBound, LexRange, ScoreRange, ZCache, ZIndex};

const G: Group = Group::SortedSet;

/// The sorted-set family's table.
#[rustfmt::skip]
pub const COMMANDS: &[CommandDef] = &[
    def("zadd", -4, WRITE | DENYOOM | FAST, (1, 1, 1), G, "1.2.0", "Adds one or more members to a sorted set, or updates their scores. Creates the key if it doesn't exist.", zadd),
    def("zincrby", 4, WRITE | DENYOOM | FAST, (1, 1, 1), G, "1.2.0", "Increments the score of a member in a sorted set.", zincrby),
    def("zrem", -3, WRITE | FAST, (1, 1, 1), G, "1.2.0", "Removes one or more members from a sorted set. Deletes the sorted set if all members were removed.", zrem),
    def("zscore", 3, READONLY | FAST, (1, 1, 1), G, "1.2.0", "Returns the score of a member in a sorted set.", zscore),
    def("zmscore", -3, READONLY | FAST, (1, 1, 1), G, "6.2.0", "Returns the score of one or more members in a sorted set.", zmscore),
    def("zcard", 2, READONLY | FAST, (1, 1, 1), G, "1.2.0", "Returns the number of members in a sorted set.", zcard),
    def("zcount", 4, READONLY | FAST, (1, 1, 1), G, "2.0.0", "Returns the count of members in a sorted set that have scores within a range.", zcount),
    def("zlexcount", 4, READONLY | FAST, (1, 1, 1), G, "2.8.9", "Returns the number of members in a sorted set within a lexicographical range.", zlexcount),
    def("zrank", 3, READONLY | FAST, (1, 1, 1), G, "2.0.0", "Returns the index of a member in a sorted set ordered by ascending scores.", zrank),
    def("zrevrank", 3, READONLY | FAST, (1, 1, 1), G, "2.0.0", "Returns the index of a member in a sorted set ordered by descending scores.", zrevrank),
    def("zrange", -4, READONLY, (1, 1, 1), G, "1.2.0", "Returns members in a sorted set within a range of indexes.", zrange),
    def("zrangebyscore", -4, READONLY, (1, 1, 1), G, "1.0.5", "Returns members in a sorted set within a range of scores.", zrangebyscore),
    def("zrevrangebyscore", -4, READONLY, (1, 1, 1), G, "2.2.0", "Returns members in a sorted set within a range of scores in reverse order.", zrevrangebyscore),
    def("zrangebylex", -4, READONLY, (1, 1, 1), G, "2.8.9", "Returns members in a sorted set within a lexicographical range.", zrangebylex),
    def("zrevrangebylex", -4, READONLY, (1, 1, 1), G, "2.8.9", "Returns members in a sorted set within a lexicographical range in reverse order.", zrevrangebylex),
    def("zrevrange", -4, READONLY, (1, 1, 1), G, "1.2.0", "Returns members in a sorted set within a range of indexes in reverse order.", zrevrange),
    def("zrangestore", -5, WRITE | DENYOOM, (1, 2, 1), G, "6.2.0", "Stores a range of members from sorted set in a key.", zrangestore),
    def("zpopmin", -2, WRITE | FAST, (1, 1, 1), G, "5.0.0", "Returns the lowest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.", zpopmin),
    def("zpopmax", -2, WRITE | FAST, (1, 1, 1), G, "5.0.0", "Returns the highest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.", zpopmax),
    def("zrandmember", -2, READONLY, (1, 1, 1), G, "6.2.0", "Returns one or more random members from a sorted set.", zrandmember),
    def("zremrangebyrank", 4, WRITE, (1, 1, 1), G, "2.0.0", "Removes members in a sorted set within a range of indexes. Deletes the sorted set if all members were removed.", zremrangebyrank),
    def("zremrangebyscore", 4, WRITE, (1, 1, 1), G, "1.2.0", "Removes members in a sorted set within a range of scores. Deletes the sorted set if all members were removed.", zremrangebyscore),
    def("zremrangebylex", 4, WRITE, (1, 1, 1), G, "2.8.9", "Removes members in a sorted set within a lexicographical range. Deletes the sorted set if all members were removed.", zremrangebylex),
    def("zunion", -3, READONLY | MOVABLE_KEYS, (0, 0, 0), G, "6.2.0", "Returns the union of multiple sorted sets.", zunion),
    def("zunionstore", -4, WRITE | DENYOOM | MOVABLE_KEYS, (1, 1, 1), G, "2.0.0", "Stores the union of multiple sorted sets in a key.", zunionstore),
    def("zinter", -3, READONLY | MOVABLE_KEYS, (0, 0, 0), G, "6.2.0", "Returns the intersect of multiple sorted sets.", zinter),
    def("zinterstore", -4, WRITE | DENYOOM | MOVABLE_KEYS, (1, 1, 1), G, "2.0.0", "Stores the intersect of multiple sorted sets in a key.", zinterstore),
    def("zintercard", -3, READONLY | MOVABLE_KEYS, (0, 0, 0), G, "7.0.0", "Returns the number of members of the intersect of multiple sorted sets.", zintercard),
    def("zdiff", -3, READONLY | MOVABLE_KEYS, (0, 0, 0), G, "6.2.0", "Returns the difference between multiple sorted sets.", zdiff),
    def("zdiffstore", -4, WRITE | DENYOOM | MOVABLE_KEYS, (1, 1, 1), G, "6.2.0", "Stores the difference of multiple sorted sets in a key.", zdiffstore),
    def("zscan", -3, READONLY, (1, 1, 1), G, "2.8.0", "Iterates over members and scores of a sorted set.", zscan),
    def("zmpop", -4, WRITE | MOVABLE_KEYS, (0, 0, 0), G, "7.0.0", "Returns the highest- or lowest-scoring members from one or more sorted sets after removing them. Deletes the sorted set if the last member was popped.", zmpop),
    def("bzpopmin", -3, WRITE | NOSCRIPT | FAST | BLOCKING, (1, -2, 1), G, "5.0.0", "Removes and returns the member with the lowest score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.", bzpopmin),
    def("bzpopmax", -3, WRITE | NOSCRIPT | FAST | BLOCKING, (1, -2, 1), G, "5.0.0", "Removes and returns the member with the highest score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.", bzpopmax),
    def("bzmpop", -5, WRITE | BLOCKING | MOVABLE_KEYS, (0, 0, 0), G, "7.0.0", "Removes and returns a member by score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.", bzmpop),
];

/// A member with its score.
pub type Scored = (Vec<u8>, f64);

// ---------------------------------------------------------------------------
// Storage: scores as 8 bytes, the index from the cache or the engine.

/// The stored form of a score: the f64's bits, little-endian.
pub fn encode_score(score: f64) -> [u8; 8] {
    score.to_bits().to_le_bytes()
}

/// Reads a stored score.
pub fn decode_score(key: &[u8], v: &[u8]) -> Result<f64> {
    let bytes: [u8; 8] = v.try_into().map_err(|_| {
        Error::err(format!(
            "corrupt sorted set '{}': a score of {} bytes",
            String::from_utf8_lossy(key),
            v.len()
        ))
    })?;
    Ok(f64::from_le_bytes(bytes))
}

/// One database as the zset code sees it: the engine and its generation.
#[derive(Debug, Clone, Copy)]
pub struct ZDb<'a> {
    /// The engine.
    pub db: &'a Db,
    /// The slot's generation (see [`Slot::generation`]).
    pub generation: u64,
}

impl<'a> ZDb<'a> {
    /// From a slot whose engine is open.
    pub fn of(slot: &'a Slot) -> Option<ZDb<'a>> {
        Some(ZDb {
            db: slot.db()?,
            generation: slot.generation(),
        })
    }

    /// The index of the sorted set at `key`: `None` if the key does not
    /// exist, WRONGTYPE if it is not a sorted set. The caller holds the
    /// key's stripe and gives the index back with [`ZDb::put_back`].
    /// Inside a `zbuild::Deferring` scope, a set of at least
    /// `zbuild::ZSET_MEMBERS` members whose index is not cached is not
    /// rebuilt here: the load names it to be built off the worker and
    /// fails, and the command is run again once it is built.
    pub fn load(&self, key: &[u8]) -> Result<Option<ZIndex>> {
        let Some(meta) = self.db.meta(key) else {
            return Ok(None);
        };
        if !matches!(meta.kind, KeyKind::Map { tag: TAG_ZSET, .. }) {
            return Err(Error::WrongType);
        }
        let cache = ZCache::global();
        if let Some(ix) = cache.checkout(self.generation, key, meta.version) {
            return Ok(Some(ix));
        }
        if matches!(meta.kind, KeyKind::Map { len, .. } if len >= zbuild::ZSET_MEMBERS)
            && zbuild::defer(zbuild::Kind::ZSet, self.generation, key)
        {
            // Built off the worker, then the command runs again. An empty
            // slot (left by a command that failed with the index checked
            // out: this one holds the key's stripe, so no other has it)
            // goes, or the build would take it for an index in use.
            cache.forget(self.generation, key);
            return Err(zbuild::stop());
        }
        let mut items = Vec::new();
        for (member, v) in self.db.fields(key)? {
            items.push((member, decode_score(key, &v)?));
        }
        let ix = ZIndex::from_items(items);
        Ok((!ix.is_empty()).then_some(ix))
    }

    /// Inside a `zbuild::Deferring` scope, names `key` to be built off the
    /// worker if it is a big sorted set whose index is not cached, as
    /// [`ZDb::load`] would, for a command that looks at its keys before it
    /// loads them (the set operations and SORT count and publish their
    /// lookups first): true if it did, and the command then stops with
    /// `zbuild::stop()` before any effect. Takes no lock: an index checked
    /// out counts as cached (its load then decides).
    pub(crate) fn defer_uncached(&self, key: &[u8]) -> bool {
        if !zbuild::deferring() {
            return false;
        }
        let Some(meta) = self.db.meta(key) else {
            return false;
        };
        let big = matches!(meta.kind,
            KeyKind::Map { tag: TAG_ZSET, len, .. } if len >= zbuild::ZSET_MEMBERS);
        big && !ZCache::global().holds(self.generation, key, meta.version)
            && zbuild::defer(zbuild::Kind::ZSet, self.generation, key)
    }

    /// Builds the index of the sorted set at `key` and checks it into the
    /// cache, without the key's lock (`commands::zbuild`): only if the
    /// cache lacks it at the key's version, and only if no write came in
    /// while the members were read (the version is the same before and
    /// after; a write changes the members and the version under one lock
    /// of the engine's index, and versions only grow). Nothing for a key
    /// that holds no sorted set. True when it checked one in.
    pub(crate) fn build_index(&self, key: &[u8]) -> Result<bool> {
        let Some(meta) = self.db.meta(key) else {
            return Ok(false);
        };
        if !matches!(meta.kind, KeyKind::Map { tag: TAG_ZSET, .. }) {
            return Ok(false);
        }
        let cache = ZCache::global();
        if cache.holds(self.generation, key, meta.version) {
            return Ok(false);
        }
        let mut items = Vec::new();
        for (member, v) in self.db.fields(key)? {
            items.push((member, decode_score(key, &v)?));
        }
        let ix = ZIndex::from_items(items);
        if self.db.version(key) != meta.version {
            return Ok(false);
        }
        cache.checkin(self.generation, key, meta.version, ix);
        Ok(true)
    }

    /// Gives an index back to the cache under the key's current version.
    pub fn put_back(&self, key: &[u8], ix: ZIndex) {
        let version = self.db.version(key);
        ZCache::global().checkin(self.generation, key, version, ix);
    }

    /// Sets one member's score in the engine and the index. A -0 is stored
    /// as 0, as Redis stores it in a small sorted set (its listpack prints
    /// whole scores as integers), which is where most sets live: a score
    /// read back says "0", while a reply of a computed score (ZINCRBY's,
    /// ZUNION's) still says "-0" in both.
    fn set(&self, key: &[u8], ix: &mut ZIndex, member: &[u8], score: f64) -> Result {
        let score = score + 0.0;
        self.db
            .put_field_tagged(key, TAG_ZSET, member, &encode_score(score))?;
        ix.insert(member, score);
        Ok(())
    }

    /// Removes one member from the engine and the index.
    fn remove(&self, key: &[u8], ix: &mut ZIndex, member: &[u8]) -> Result<bool> {
        if ix.remove(member).is_none() {
            return Ok(false);
        }
        self.db.delete_field(key, member)?;
        Ok(true)
    }

    /// Replaces whatever `key` holds with a sorted set of `items` (deleting
    /// it if `items` is empty). Returns the new set's size.
    pub(crate) fn store(&self, key: &[u8], items: &[(Vec<u8>, f64)]) -> Result<usize> {
        ZCache::global().forget(self.generation, key);
        self.db.delete(key)?;
        let mut ix = ZIndex::new();
        for (m, s) in items {
            self.set(key, &mut ix, m, *s)?;
        }
        let n = ix.len();
        self.put_back(key, ix);
        Ok(n)
    }
}

/// The selected database with its engine opened (for writes).
fn slot_w<'a>(ctx: &Ctx<'a>) -> Result<SlotRead<'a>> {
    for _ in 0..8 {
        drop(ctx.db_w()?);
        let slot = ctx.slot();
        if slot.db().is_some() {
            return Ok(slot);
        }
        // A FLUSHDB closed it in between; open it again.
    }
    Err(Error::err("database busy, try again"))
}

// ---------------------------------------------------------------------------
// Parsing.

/// A score as ZADD and ZINCRBY accept it (Redis's `getDoubleFromObject`:
/// `strtod` syntax, no surrounding space, no overflow, not NaN).
pub fn parse_score(s: &[u8]) -> Option<f64> {
    if s.len() > 5 * 1024 {
        return None;
    }
    match cnum::strtod(s)? {
        (_, true) => None, // overflow or underflow to zero (ERANGE)
        (v, false) => Some(v),
    }
}

fn score_arg(s: &[u8]) -> Result<f64> {
    parse_score(s).ok_or(Error::NotFloat)
}

/// One end of a score range (Redis's `zslParseRange`): `(` makes it
/// exclusive; `strtod` syntax (leading space allowed, overflow to inf);
/// NaN is refused.
fn parse_range_end(s: &[u8]) -> Option<(f64, bool)> {
    let (ex, rest) = match s.first() {
        Some(b'(') => (true, &s[1..]),
        _ => (false, s),
    };
    // strtod skips leading space; and it reads "" as 0 with the end at the
    // terminator, which `zslParseRange` accepts.
    let start = rest
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(rest.len());
    if start == rest.len() {
        return Some((0.0, ex));
    }
    // Overflow is fine here: 1e400 is +inf.
    let (v, _) = cnum::strtod(&rest[start..])?;
    Some((v, ex))
}

fn score_range(min: &[u8], max: &[u8]) -> Result<ScoreRange> {
    let bad = || Error::err("min or max is not a float");
    let (min, min_ex) = parse_range_end(min).ok_or_else(bad)?;
    let (max, max_ex) = parse_range_end(max).ok_or_else(bad)?;
    Ok(ScoreRange {
        min,
        min_ex,
        max,
        max_ex,
    })
}

fn lex_bound(s: &[u8]) -> Option<LexBound> {
    match s {
        b"+" => Some(LexBound::PosInf),
        b"-" => Some(LexBound::NegInf),
        [b'(', rest @ ..] => Some(LexBound::Excl(rest.to_vec())),
        [b'[', rest @ ..] => Some(LexBound::Incl(rest.to_vec())),
        _ => None,
    }
}

fn lex_range(min: &[u8], max: &[u8]) -> Result<LexRange> {
    let bad = || Error::err("min or max not valid string range item");
    Ok(LexRange {
        min: lex_bound(min).ok_or_else(bad)?,
        max: lex_bound(max).ok_or_else(bad)?,
    })
}

/// Redis's rank-range sanitizing: negative ranks count from the end.
/// `None` if the range is empty.
fn rank_span(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let mut start = if start < 0 { len + start } else { start };
    let mut end = if end < 0 { len + end } else { end };
    if start < 0 {
        start = 0;
    }
    if start > end || start >= len {
        return None;
    }
    if end >= len {
        end = len - 1;
    }
    Some((start as usize, end as usize))
}

// ---------------------------------------------------------------------------
// Replies.

fn resp3(ctx: &Ctx<'_>) -> bool {
    ctx.conn.protocol == Protocol::Resp3
}

fn score_reply(ctx: &mut Ctx<'_>, s: f64) {
    ctx.enc().double(s);
}

/// Members, optionally with scores: RESP2 flat, RESP3 `[member, score]`
/// pairs (as Redis 7.0).
fn members_reply(ctx: &mut Ctx<'_>, items: &[(Vec<u8>, f64)], withscores: bool) {
    if !withscores {
        ctx.array(items.len());
        for (m, _) in items {
            ctx.bulk(m);
        }
    } else if resp3(ctx) {
        pairs_nested(ctx, items);
    } else {
        ctx.array(items.len() * 2);
        for (m, s) in items {
            ctx.bulk(m);
            score_reply(ctx, *s);
        }
    }
}

fn pairs_nested(ctx: &mut Ctx<'_>, items: &[(Vec<u8>, f64)]) {
    ctx.array(items.len());
    for (m, s) in items {
        ctx.array(2);
        ctx.bulk(m);
        score_reply(ctx, *s);
    }
}

// ---------------------------------------------------------------------------
// ZADD, ZINCRBY, ZREM.

#[derive(Debug, Default, Clone, Copy)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

/// What one element's add did.
#[derive(Debug, PartialEq)]
enum AddOutcome {
    Added(f64),
    Updated(f64),
    Same(f64),
    Nop,
}

/// Redis's `zsetAdd`: one (score, member) under the flags.
fn add_one(
    z: &ZDb<'_>,
    key: &[u8],
    ix: &mut ZIndex,
    f: AddFlags,
    score: f64,
    member: &[u8],
) -> Result<AddOutcome> {
    match ix.score(member) {
        Some(cur) => {
            if f.nx {
                return Ok(AddOutcome::Nop);
            }
            let new = if f.incr { cur + score } else { score };
            if new.is_nan() {
                return Err(Error::err("resulting score is not a number (NaN)"));
            }
            if (f.lt && new >= cur) || (f.gt && new <= cur) {
                return Ok(AddOutcome::Nop);
            }
            if new != cur {
                z.set(key, ix, member, new)?;
                Ok(AddOutcome::Updated(new))
            } else {
                Ok(AddOutcome::Same(new))
            }
        }
        None => {
            if f.xx {
                return Ok(AddOutcome::Nop);
            }
            z.set(key, ix, member, score)?;
            Ok(AddOutcome::Added(score))
        }
    }
}

fn zadd_generic(ctx: &mut Ctx<'_>, args: &Args<'_>, mut f: AddFlags, from: usize) -> Result {
    let key = &args[1];
    let mut j = from;
    while j < args.len() {
        let a = &args[j];
        if is(a, "nx") {
            f.nx = true;
        } else if is(a, "xx") {
            f.xx = true;
        } else if is(a, "gt") {
            f.gt = true;
        } else if is(a, "lt") {
            f.lt = true;
        } else if is(a, "ch") {
            f.ch = true;
        } else if is(a, "incr") {
            f.incr = true;
        } else {
            break;
        }
        j += 1;
    }
    // Redis's order: the pairs' count, then conflicting options.
    let elements = args.len() - j;
    if elements == 0 || elements % 2 == 1 {
        return Err(Error::Syntax);
    }
    if f.nx && f.xx {
        return Err(Error::err(
            "XX and NX options at the same time are not compatible",
        ));
    }
    if [f.gt, f.lt, f.nx].iter().filter(|&&x| x).count() > 1 {
        return Err(Error::err(
            "GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if f.incr && elements > 2 {
        return Err(Error::err(
            "INCR option supports a single increment-element pair",
        ));
    }
    let mut pairs = Vec::with_capacity(elements / 2);
    for k in (j..args.len()).step_by(2) {
        pairs.push((score_arg(&args[k])?, &args[k + 1]));
    }
    zadd_pairs(ctx, key, f, &pairs)
}

/// ZADD of scores its caller computed (GEOADD's geohashes), under NX / XX
/// / CH, with ZADD's reply and events: Redis's GEOADD hands ZADD its
/// arguments the same way.
pub(crate) fn zadd_scored(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    pairs: &[(f64, &[u8])],
    nx: bool,
    xx: bool,
    ch: bool,
) -> Result {
    let f = AddFlags {
        nx,
        xx,
        ch,
        ..AddFlags::default()
    };
    zadd_pairs(ctx, key, f, pairs)
}

/// ZADD's write: the pairs, already parsed, under the flags.
fn zadd_pairs(ctx: &mut Ctx<'_>, key: &[u8], f: AddFlags, pairs: &[(f64, &[u8])]) -> Result {
    let slot = slot_w(ctx)?;
    let z = ZDb::of(&slot).expect("opened");
    let _g = ctx.lock(key);
    let existing = z.load(key)?;
    if existing.is_none() && f.xx {
        if f.incr {
            ctx.null();
        } else {
            ctx.int(0);
        }
        return Ok(());
    }
    let created = existing.is_none();
    let mut ix = existing.unwrap_or_default();
    let (mut added, mut updated) = (0, 0);
    let mut last = None;
    for &(score, member) in pairs {
        let out = add_one(&z, key, &mut ix, f, score, member);
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                z.put_back(key, ix);
                if added > 0 {
                    ctx.shared.blocking.signal(ctx.conn.db, key);
                }
                return Err(e);
            }
        };
        match out {
            AddOutcome::Added(s) => {
                added += 1;
                last = Some(s);
            }
            AddOutcome::Updated(s) => {
                updated += 1;
                last = Some(s);
            }
            AddOutcome::Same(s) => last = Some(s),
            AddOutcome::Nop => last = None,
        }
    }
    z.put_back(key, ix);
    if added + updated > 0 {
        if created {
            ctx.notify(NEW, "new", key);
        }
        ctx.notify(ZSET, if f.incr { "zincr" } else { "zadd" }, key);
    }
    if added > 0 {
        // Only a new member can make a key servable: a set that already
        // had members had no client waiting for it.
        ctx.shared.blocking.signal(ctx.conn.db, key);
    }
    drop(_g);
    drop(slot);
    if f.incr {
        match last {
            Some(s) => score_reply(ctx, s),
            None => ctx.null(),
        }
    } else {
        ctx.int(if f.ch { added + updated } else { added });
    }
    Ok(())
}

fn zadd(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    zadd_generic(ctx, &args, AddFlags::default(), 2)
}

fn zincrby(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let f = AddFlags {
        incr: true,
        ..AddFlags::default()
    };
    zadd_generic(ctx, &args, f, 2)
}

fn zrem(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let slot = ctx.slot();
    let Some(z) = ZDb::of(&slot) else {
        ctx.int(0);
        return Ok(());
    };
    let _g = ctx.lock(key);
    let Some(mut ix) = z.load(key)? else {
        drop(_g);
        ctx.int(0);
        return Ok(());
    };
    let mut removed = 0;
    for m in args.iter().skip(2) {
        if z.remove(key, &mut ix, m)? {
            removed += 1;
        }
    }
    let empty = ix.is_empty();
    z.put_back(key, ix);
    if removed > 0 {
        ctx.notify(ZSET, "zrem", key);
        if empty {
            ctx.notify(GENERIC, "del", key);
        }
    }
    drop(_g);
    drop(slot);
    ctx.int(removed);
    Ok(())
}

// ---------------------------------------------------------------------------
// Reads of one key.

/// Runs `f` on the index of `key` (None if absent) under the key's stripe.
pub(crate) fn read<R>(
    ctx: &Ctx<'_>,
    key: &[u8],
    f: impl FnOnce(Option<&ZIndex>) -> R,
) -> Result<R> {
    let slot = ctx.slot();
    let Some(z) = ZDb::of(&slot) else {
        ctx.keymiss(key);
        return Ok(f(None));
    };
    let _g = ctx.lock(key);
    let ix = z.load(key)?;
    ctx.looked_up(key, ix.is_some());
    let r = f(ix.as_ref());
    if let Some(ix) = ix {
        z.put_back(key, ix);
    }
    Ok(r)
}

fn zscore(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let s = read(ctx, &args[1], |ix| ix.and_then(|ix| ix.score(&args[2])))?;
    match s {
        Some(s) => score_reply(ctx, s),
        None => ctx.null(),
    }
    Ok(())
}

fn zmscore(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let scores: Vec<Option<f64>> = read(ctx, &args[1], |ix| {
        args.iter()
            .skip(2)
            .map(|m| ix.and_then(|ix| ix.score(m)))
            .collect()
    })?;
    ctx.array(scores.len());
    for s in scores {
        match s {
            Some(s) => score_reply(ctx, s),
            None => ctx.null(),
        }
    }
    Ok(())
}

fn zcard(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let n = read(ctx, &args[1], |ix| ix.map_or(0, ZIndex::len))?;
    ctx.int(n as i64);
    Ok(())
}

fn zcount(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let range = score_range(&args[2], &args[3])?;
    let n = read(ctx, &args[1], |ix| {
        let Some(ix) = ix else { return 0 };
        match (ix.first_in_score(&range), ix.last_in_score(&range)) {
            (Some(a), Some(b)) => ix.rank_of_node(b) + 1 - ix.rank_of_node(a),
            _ => 0,
        }
    })?;
    ctx.int(n as i64);
    Ok(())
}

fn zlexcount(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let range = lex_range(&args[2], &args[3])?;
    let n = read(ctx, &args[1], |ix| {
        let Some(ix) = ix else { return 0 };
        match (ix.first_in_lex(&range), ix.last_in_lex(&range)) {
            (Some(a), Some(b)) => {
                let (ra, rb) = (ix.rank_of_node(a), ix.rank_of_node(b));
                (rb + 1).saturating_sub(ra)
            }
            _ => 0,
        }
    })?;
    ctx.int(n as i64);
    Ok(())
}

fn zrank_generic(ctx: &mut Ctx<'_>, args: Args<'_>, rev: bool) -> Result {
    let r = read(ctx, &args[1], |ix| {
        let ix = ix?;
        let r = ix.rank(&args[2])?;
        Some(if rev { ix.len() - 1 - r } else { r })
    })?;
    match r {
        Some(r) => ctx.int(r as i64),
        None => ctx.null(),
    }
    Ok(())
}

fn zrank(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    zrank_generic(ctx, args, false)
}

fn zrevrank(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    zrank_generic(ctx, args, true)
}

// ---------------------------------------------------------------------------
// ZRANGE and its relatives.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RangeType {
    Auto,
    Rank,
    Score,
    Lex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Auto,
    Forward,
    Reverse,
}

/// A parsed range request.
#[derive(Debug, Clone)]
enum RangeSpec {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange),
}

#[derive(Debug, Clone)]
struct RangeQuery {
    spec: RangeSpec,
    rev: bool,
    offset: i64,
    limit: i64,
    withscores: bool,
}

/// Redis's `zrangeGenericCommand` argument handling. `min_idx` is the
/// position of the first range argument; `store` forbids WITHSCORES.
fn parse_range_query(
    args: &Args<'_>,
    min_idx: usize,
    mut rangetype: RangeType,
    mut direction: Direction,
    store: bool,
) -> Result<RangeQuery> {
    let mut withscores = false;
    let (mut offset, mut limit) = (0i64, -1i64);
    let mut j = min_idx + 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        let a = &args[j];
        if !store && is(a, "withscores") {
            withscores = true;
        } else if is(a, "limit") && left >= 2 {
            offset = int_arg(&args[j + 1])?;
            limit = int_arg(&args[j + 2])?;
            j += 2;
        } else if direction == Direction::Auto && is(a, "rev") {
            direction = Direction::Reverse;
        } else if rangetype == RangeType::Auto && is(a, "bylex") {
            rangetype = RangeType::Lex;
        } else if rangetype == RangeType::Auto && is(a, "byscore") {
            rangetype = RangeType::Score;
        } else {
            return Err(Error::Syntax);
        }
        j += 1;
    }
    if direction == Direction::Auto {
        direction = Direction::Forward;
    }
    if rangetype == RangeType::Auto {
        rangetype = RangeType::Rank;
    }
    // Redis refuses LIMIT by rank only when it limits (a count of -1, "no
    // limit", passes, and its offset is then ignored).
    if limit != -1 && rangetype == RangeType::Rank {
        return Err(Error::err(
            "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if withscores && rangetype == RangeType::Lex {
        return Err(Error::err(
            "syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    let rev = direction == Direction::Reverse;
    let (mut lo, mut hi) = (&args[min_idx], &args[min_idx + 1]);
    if rev && rangetype != RangeType::Rank {
        std::mem::swap(&mut lo, &mut hi);
    }
    let spec = match rangetype {
        RangeType::Score => RangeSpec::Score(score_range(lo, hi)?),
        RangeType::Lex => RangeSpec::Lex(lex_range(lo, hi)?),
        _ => RangeSpec::Rank(int_arg(lo)?, int_arg(hi)?),
    };
    Ok(RangeQuery {
        spec,
        rev,
        offset,
        limit,
        withscores,
    })
}

/// Walks from the first node in range (in the query's direction), skipping
/// `offset` by rank, and collects while `inside` holds, up to `limit`
/// (negative = no limit).
fn collect_from(
    ix: &ZIndex,
    first: Option<u32>,
    rev: bool,
    offset: i64,
    limit: i64,
    inside: impl Fn(&[u8], f64) -> bool,
) -> Vec<(Vec<u8>, f64)> {
    let mut out = Vec::new();
    let Some(first) = first else { return out };
    if offset < 0 {
        return out;
    }
    let rank = ix.rank_of_node(first);
    let start = if rev {
        match rank.checked_sub(usize::try_from(offset).unwrap_or(usize::MAX)) {
            Some(r) => r,
            None => return out,
        }
    } else {
        match rank.checked_add(usize::try_from(offset).unwrap_or(usize::MAX)) {
            Some(r) => r,
            None => return out,
        }
    };
    let mut cur = ix.by_rank(start);
    let mut left = limit;
    while let Some(id) = cur {
        if left == 0 {
            break;
        }
        let (m, s) = ix.entry(id);
        if !inside(m, s) {
            break;
        }
        out.push((m.to_vec(), s));
        left -= 1;
        cur = if rev { ix.prev(id) } else { ix.next(id) };
    }
    out
}

/// The members a range query selects.
fn run_query(ix: &ZIndex, q: &RangeQuery) -> Vec<(Vec<u8>, f64)> {
    match &q.spec {
        RangeSpec::Rank(start, end) => match rank_span(*start, *end, ix.len()) {
            Some((a, b)) => ix.range_by_rank(a, b, q.rev),
            None => Vec::new(),
        },
        RangeSpec::Score(r) => {
            let first = if q.rev {
                ix.last_in_score(r)
            } else {
                ix.first_in_score(r)
            };
            collect_from(ix, first, q.rev, q.offset, q.limit, |_, s| {
                r.gte_min(s) && r.lte_max(s)
            })
        }
        RangeSpec::Lex(r) => {
            let first = if q.rev {
                ix.last_in_lex(r)
            } else {
                ix.first_in_lex(r)
            };
            collect_from(ix, first, q.rev, q.offset, q.limit, |m, _| {
                r.gte_min(m) && r.lte_max(m)
            })
        }
    }
}

fn range_reply(ctx: &mut Ctx<'_>, args: &Args<'_>, q: RangeQuery) -> Result {
    let items = read(ctx, &args[1], |ix| {
        ix.map(|ix| run_query(ix, &q)).unwrap_or_default()
    })?;
    members_reply(ctx, &items, q.withscores);
    Ok(())
}

fn zrange(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let q = parse_range_query(&args, 2, RangeType::Auto, Direction::Auto, false)?;
    range_reply(ctx, &args, q)
}

fn zrevrange(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let q = parse_range_query(&args, 2, RangeType::Rank, Direction::Reverse, false)?;
    range_reply(ctx, &args, q)
}

fn zrangebyscore(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let q = parse_range_query(&args, 2, RangeType::Score, Direction::Forward, false)?;
    range_reply(ctx, &args, q)
}

fn zrevrangebyscore(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let q = parse_range_query(&args, 2, RangeType::Score, Direction::Reverse, false)?;
    range_reply(ctx, &args, q)
}

fn zrangebylex(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let q = parse_range_query(&args, 2, RangeType::Lex, Direction::Forward, false)?;
    range_reply(ctx, &args, q)
}

fn zrevrangebylex(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let q = parse_range_query(&args, 2, RangeType::Lex, Direction::Reverse, false)?;
    range_reply(ctx, &args, q)
}

fn zrangestore(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let (dst, src) = (&args[1], &args[2]);
    let q = parse_range_query(&args, 3, RangeType::Auto, Direction::Auto, true)?;
    let slot = slot_w(ctx)?;
    let z = ZDb::of(&slot).expect("opened");
    let n = ctx.conn.db;
    let _g = ctx.shared.keyspace.lock_many([(n, dst), (n, src)]);
    let items = match z.load(src)? {
        Some(ix) => {
            ctx.keyhit();
            let items = run_query(&ix, &q);
            z.put_back(src, ix);
            items
        }
        None => {
            ctx.keymiss(src);
            Vec::new()
        }
    };
    let existed = z.db.exists(dst);
    let stored = z.store(dst, &items)?;
    stored_events(ctx, dst, "zrangestore", stored, existed);
    if stored > 0 {
        ctx.shared.blocking.signal(n, dst);
    }
    drop(_g);
    drop(slot);
    ctx.int(stored as i64);
    Ok(())
}

/// Keyspace events of a *STORE: the command's event if something was
/// stored, else `del` if the destination existed.
pub(crate) fn stored_events(ctx: &Ctx<'_>, dst: &[u8], event: &str, stored: usize, existed: bool) {
    if stored > 0 {
        if !existed {
            ctx.notify(NEW, "new", dst);
        }
        ctx.notify(ZSET, event, dst);
    } else if existed {
        ctx.notify(GENERIC, "del", dst);
    }
}

/// Keyspace events after [`pop`] took members from `key`.
fn popped_events(ctx: &Ctx<'_>, z: &ZDb<'_>, key: &[u8], max: bool) {
    ctx.notify(ZSET, if max { "zpopmax" } else { "zpopmin" }, key);
    // The existence probe only when `del` events are wanted.
    if ctx.shared.pubsub.notifies(GENERIC) && !z.db.exists(key) {
        ctx.notify(GENERIC, "del", key);
    }
}

// ---------------------------------------------------------------------------
// Pops and removals.

/// Removes and returns up to `count` members from the low (`max` false) or
/// high end of the sorted set at `key`; `None` if the key does not exist.
/// The caller holds the key's stripe. This is the core a blocking pop
/// (BZPOPMIN, BZMPOP) calls once it has a key with members.
pub fn pop(z: &ZDb<'_>, key: &[u8], max: bool, count: usize) -> Result<Option<Vec<Scored>>> {
    let Some(mut ix) = z.load(key)? else {
        return Ok(None);
    };
    let take = count.min(ix.len());
    let items = if max {
        ix.range_by_rank(0, take.saturating_sub(1), true)
    } else {
        ix.range_by_rank(0, take.saturating_sub(1), false)
    };
    let items = if take == 0 { Vec::new() } else { items };
    for (m, _) in &items {
        z.remove(key, &mut ix, m)?;
    }
    z.put_back(key, ix);
    Ok(Some(items))
}

fn zpop_generic(ctx: &mut Ctx<'_>, args: Args<'_>, max: bool) -> Result {
    if args.len() > 3 {
        return Err(Error::Syntax);
    }
    let count = match args.get(2) {
        Some(c) => match parse_i64(c) {
            Some(c) if c >= 0 => Some(c as usize),
            _ => return Err(Error::err("value is out of range, must be positive")),
        },
        None => None,
    };
    let key = &args[1];
    let slot = ctx.slot();
    let items = match ZDb::of(&slot) {
        None => None,
        Some(z) => {
            let _g = ctx.lock(key);
            if count == Some(0) {
                // Still type-checks the key, as Redis does.
                if let Some(ix) = z.load(key)? {
                    z.put_back(key, ix);
                }
                Some(Vec::new())
            } else {
                let items = pop(&z, key, max, count.unwrap_or(1))?;
                if items.as_ref().is_some_and(|i| !i.is_empty()) {
                    popped_events(ctx, &z, key, max);
                }
                items
            }
        }
    };
    drop(slot);
    let items = items.unwrap_or_default();
    match count {
        Some(_) => members_reply(ctx, &items, true),
        None => {
            ctx.array(items.len() * 2);
            for (m, s) in &items {
                ctx.bulk(m);
                score_reply(ctx, *s);
            }
        }
    }
    Ok(())
}

fn zpopmin(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    zpop_generic(ctx, args, false)
}

fn zpopmax(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    zpop_generic(ctx, args, true)
}

/// Parsed ZMPOP / BZMPOP arguments after the numkeys position.
#[derive(Debug)]
pub struct MpopArgs {
    /// Index of the first key in the arguments.
    pub first_key: usize,
    /// Number of keys.
    pub numkeys: usize,
    /// MAX (true) or MIN.
    pub max: bool,
    /// COUNT (default 1).
    pub count: usize,
}

/// Parses `numkeys key [key ...] MIN|MAX [COUNT count]` from `at`.
pub fn parse_mpop(args: &Args<'_>, at: usize) -> Result<MpopArgs> {
    let numkeys = match parse_i64(&args[at]) {
        Some(n) if n > 0 => n,
        _ => return Err(Error::err("numkeys should be greater than 0")),
    };
    let first_key = at + 1;
    let where_idx = (first_key as i64).saturating_add(numkeys);
    if where_idx >= args.len() as i64 {
        return Err(Error::Syntax);
    }
    let where_idx = where_idx as usize;
    let max = if is(&args[where_idx], "min") {
        false
    } else if is(&args[where_idx], "max") {
        true
    } else {
        return Err(Error::Syntax);
    };
    let mut count = None;
    let mut j = where_idx + 1;
    while j < args.len() {
        if count.is_none() && is(&args[j], "count") && j + 1 < args.len() {
            match parse_i64(&args[j + 1]) {
                Some(c) if c > 0 => count = Some(c as usize),
                _ => return Err(Error::err("count should be greater than 0")),
            }
            j += 2;
        } else {
            return Err(Error::Syntax);
        }
    }
    Ok(MpopArgs {
        first_key,
        numkeys: numkeys as usize,
        max,
        count: count.unwrap_or(1),
    })
}

/// `[key, [[member, score], ...]]`, as ZMPOP replies in both protocols.
pub fn mpop_reply(ctx: &mut Ctx<'_>, key: &[u8], items: &[(Vec<u8>, f64)]) {
    ctx.array(2);
    ctx.bulk(key);
    pairs_nested(ctx, items);
}

fn zmpop(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let m = parse_mpop(&args, 1)?;
    let keys: Vec<&[u8]> = (m.first_key..m.first_key + m.numkeys)
        .map(|i| &args[i])
        .collect();
    let slot = ctx.slot();
    let Some(z) = ZDb::of(&slot) else {
        drop(slot);
        ctx.enc().null_array();
        return Ok(());
    };
    let n = ctx.conn.db;
    let _g = ctx.shared.keyspace.lock_many(keys.iter().map(|k| (n, *k)));
    for key in &keys {
        if let Some(items) = pop(&z, key, m.max, m.count)? {
            if !items.is_empty() {
                popped_events(ctx, &z, key, m.max);
            }
            drop(_g);
            drop(slot);
            mpop_reply(ctx, key, &items);
            return Ok(());
        }
    }
    drop(_g);
    drop(slot);
    ctx.enc().null_array();
    Ok(())
}

/// BZPOPMIN, BZPOPMAX and BZMPOP (Redis's `blockingGenericZpopCommand`):
/// pops up to `count` members from the first sorted set of `keys` that
/// exists (WRONGTYPE at the first key holding something else, except on a
/// re-run), or blocks (see `crate::blocking`). `multi` picks BZMPOP's reply
/// (`[key, [[member, score], ...]]`) over BZPOPMIN's (`[key, member,
/// score]`).
fn bpop_first(
    ctx: &mut Ctx<'_>,
    keys: &[&[u8]],
    max: bool,
    count: usize,
    timeout: Option<std::time::Duration>,
    multi: bool,
) -> Result {
    let slot = ctx.slot();
    let n = ctx.conn.db;
    // Locked even when the database is unopened, so a ZADD cannot slip
    // between the check and the registration of the waiter.
    let guards = ctx.shared.keyspace.lock_many(keys.iter().map(|k| (n, *k)));
    let id = ctx.conn.info.id;
    let rerun = ctx.shared.blocking.is_blocked(id);
    let mut served = None;
    if let Some(z) = ZDb::of(&slot) {
        for &key in keys {
            // A woken client ahead in this key's queue is served first.
            if !ctx.shared.blocking.may_take(id, n, key) {
                continue;
            }
            match pop(&z, key, max, count) {
                Ok(Some(items)) if !items.is_empty() => {
                    popped_events(ctx, &z, key, max);
                    served = Some((key, items));
                    break;
                }
                Ok(_) => {}
                // A key that changed type while this client waited does not
                // concern it (Redis keeps it blocked).
                Err(Error::WrongType) if rerun => ctx.shared.blocking.pass_on(id, n, key),
                Err(e) => return Err(e),
            }
        }
    }
    let Some((key, items)) = served else {
        block_on(ctx, keys, timeout);
        return Ok(());
    };
    drop(guards);
    drop(slot);
    if multi {
        mpop_reply(ctx, key, &items);
    } else {
        let (m, s) = &items[0];
        ctx.array(3);
        ctx.bulk(key);
        ctx.bulk(m);
        score_reply(ctx, *s);
    }
    Ok(())
}

fn bzpop_generic(ctx: &mut Ctx<'_>, args: Args<'_>, max: bool) -> Result {
    let timeout = parse_timeout(&args[args.len() - 1], ctx.now_ms)?;
    let keys: Vec<&[u8]> = (1..args.len() - 1).map(|i| &args[i]).collect();
    bpop_first(ctx, &keys, max, 1, timeout, false)
}

fn bzpopmin(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    bzpop_generic(ctx, args, false)
}

fn bzpopmax(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    bzpop_generic(ctx, args, true)
}

fn bzmpop(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    // Redis parses numkeys, MIN|MAX and COUNT before the timeout.
    let m = parse_mpop(&args, 2)?;
    let timeout = parse_timeout(&args[1], ctx.now_ms)?;
    let keys: Vec<&[u8]> = (m.first_key..m.first_key + m.numkeys)
        .map(|i| &args[i])
        .collect();
    bpop_first(ctx, &keys, m.max, m.count, timeout, true)
}

/// Removes the members `select` picks; replies with how many.
fn remove_range(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    event: &str,
    select: impl FnOnce(&ZIndex) -> Vec<(Vec<u8>, f64)>,
) -> Result {
    let slot = ctx.slot();
    let Some(z) = ZDb::of(&slot) else {
        ctx.int(0);
        return Ok(());
    };
    let _g = ctx.lock(key);
    let Some(mut ix) = z.load(key)? else {
        drop(_g);
        ctx.int(0);
        return Ok(());
    };
    let victims = select(&ix);
    for (m, _) in &victims {
        z.remove(key, &mut ix, m)?;
    }
    let empty = ix.is_empty();
    z.put_back(key, ix);
    if !victims.is_empty() {
        ctx.notify(ZSET, event, key);
        if empty {
            ctx.notify(GENERIC, "del", key);
        }
    }
    drop(_g);
    drop(slot);
    ctx.int(victims.len() as i64);
    Ok(())
}

fn zremrangebyrank(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let (start, end) = (int_arg(&args[2])?, int_arg(&args[3])?);
    remove_range(ctx, &args[1], "zremrangebyrank", |ix| {
        match rank_span(start, end, ix.len()) {
            Some((a, b)) => ix.range_by_rank(a, b, false),
            None => Vec::new(),
        }
    })
}

fn zremrangebyscore(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let range = score_range(&args[2], &args[3])?;
    remove_range(ctx, &args[1], "zremrangebyscore", |ix| {
        collect_from(ix, ix.first_in_score(&range), false, 0, -1, |_, s| {
            range.lte_max(s)
        })
    })
}

fn zremrangebylex(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let range = lex_range(&args[2], &args[3])?;
    remove_range(ctx, &args[1], "zremrangebylex", |ix| {
        collect_from(ix, ix.first_in_lex(&range), false, 0, -1, |m, _| {
            range.lte_max(m)
        })
    })
}

// ---------------------------------------------------------------------------
// ZRANDMEMBER, ZSCAN.

fn zrandmember(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    if args.len() > 4 {
        return Err(Error::Syntax);
    }
    let key = &args[1];
    let Some(count_arg) = args.get(2) else {
        let mut rng = Rng::from_time();
        let m = read(ctx, key, |ix| {
            let ix = ix?;
            let r = (rng.next_u64() % ix.len() as u64) as usize;
            ix.by_rank(r).map(|id| ix.entry(id).0.to_vec())
        })?;
        ctx.opt_bulk(m.as_deref());
        return Ok(());
    };
    let withscores = match args.get(3) {
        Some(a) if is(a, "withscores") => true,
        Some(_) => return Err(Error::Syntax),
        None => false,
    };
    let count = int_arg(count_arg)?;
    if count == i64::MIN {
        return Err(Error::err(
            "value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        ));
    }
    if withscores && count.unsigned_abs() > (i64::MAX / 2) as u64 {
        return Err(Error::err("value is out of range"));
    }
    let mut rng = Rng::from_time();
    let items = read(ctx, key, |ix| {
        let Some(ix) = ix else { return Vec::new() };
        let len = ix.len();
        let pick = |r: usize| {
            let (m, s) = ix.entry(ix.by_rank(r).expect("rank in range"));
            (m.to_vec(), s)
        };
        if count < 0 {
            (0..count.unsigned_abs())
                .map(|_| pick((rng.next_u64() % len as u64) as usize))
                .collect()
        } else if count as u64 >= len as u64 {
            ix.iter().map(|(m, s)| (m.to_vec(), s)).collect()
        } else {
            // A partial Fisher-Yates over the ranks: distinct picks.
            let count = count as usize;
            let mut ranks: Vec<usize> = (0..len).collect();
            for i in 0..count {
                let j = i + (rng.next_u64() % (len - i) as u64) as usize;
                ranks.swap(i, j);
            }
            ranks[..count].iter().map(|&r| pick(r)).collect()
        }
    })?;
    members_reply(ctx, &items, withscores);
    Ok(())
}

/// A cursor as Redis's `strtoul` reads it: an optional sign (`-1` wraps
/// around), digits, nothing else; the empty string is 0.
fn parse_cursor(s: &[u8]) -> Option<u64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if s.is_empty() {
        return Some(0);
    }
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(if neg { v.wrapping_neg() } else { v })
}

/// Members up to this many are returned by one ZSCAN call with cursor 0,
/// as Redis does for its compact (listpack) encoding.
const SCAN_ALL_BELOW: usize = 128;

fn zscan(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let cursor = parse_cursor(&args[2]).ok_or_else(|| Error::err("invalid cursor"))?;
    let mut count = 10usize;
    let mut pattern: Option<&[u8]> = None;
    let mut j = 3;
    while j < args.len() {
        let more = args.len() - j - 1;
        if is(&args[j], "count") && more >= 1 {
            let c = int_arg(&args[j + 1])?;
            if c < 1 {
                return Err(Error::Syntax);
            }
            count = c.min(1 << 20) as usize;
            j += 2;
        } else if is(&args[j], "match") && more >= 1 {
            pattern = args.get(j + 1).filter(|p| *p != b"*");
            j += 2;
        } else {
            return Err(Error::Syntax);
        }
    }
    let (next, items) = read(ctx, &args[1], |ix| {
        let Some(ix) = ix else {
            return (0, Vec::new());
        };
        let len = ix.len();
        if len <= SCAN_ALL_BELOW {
            // Redis's listpack: everything at once, cursor 0.
            return (0, ix.range_by_rank(0, len.saturating_sub(1), false));
        }
        // In the order of a fixed hash of the members, as HSCAN: a member
        // present for the whole scan is returned at least once, whatever
        // is added or removed in between (a rank cursor skipped members
        // when earlier ones were removed).
        let (batch, next) = super::hash::scan_step(ix.iter(), cursor, count);
        let items = batch.into_iter().map(|(m, s)| (m.to_vec(), s)).collect();
        (next, items)
    })?;
    let items: Vec<&(Vec<u8>, f64)> = items
        .iter()
        .filter(|(m, _)| pattern.is_none_or(|p| glob::matches(p, m, false)))
        .collect();
    ctx.array(2);
    ctx.bulk(next.to_string().as_bytes());
    ctx.array(items.len() * 2);
    for (m, s) in items {
        ctx.bulk(m);
        // ZSCAN's scores are strings in both protocols (Redis 7.0).
        let mut buf = Vec::new();
        basalt_resp::Encoder::new(&mut buf, Protocol::Resp2).double(*s);
        ctx.out.extend_from_slice(&buf);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// ZUNION, ZINTER, ZDIFF and their STORE forms, ZINTERCARD.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    fn apply(self, acc: f64, v: f64) -> f64 {
        match self {
            Aggregate::Sum => {
                // +inf + -inf is NaN; Redis makes it 0.
                let s = acc + v;
                if s.is_nan() {
                    0.0
                } else {
                    s
                }
            }
            // C's `val < target ? val : target`: a NaN value keeps the
            // target, and of two equal zeros the first stays.
            Aggregate::Min => {
                if v < acc {
                    v
                } else {
                    acc
                }
            }
            Aggregate::Max => {
                if v > acc {
                    v
                } else {
                    acc
                }
            }
        }
    }
}

/// The members of one input: a sorted set, or a set with every score 1.
/// The types a ZUNION / ZINTER / ZDIFF input may have.
fn zset_input(t: RedisType) -> bool {
    matches!(t, RedisType::ZSet | RedisType::Set)
}

fn input_members(z: &ZDb<'_>, key: &[u8]) -> Result<Vec<(Vec<u8>, f64)>> {
    let Some(meta) = z.db.meta(key) else {
        return Ok(Vec::new());
    };
    match meta.kind {
        KeyKind::Map { tag: TAG_SET, .. } => Ok(z
            .db
            .field_names(key)?
            .into_iter()
            .map(|m| (m, 1.0))
            .collect()),
        KeyKind::Map { tag: TAG_ZSET, .. } => match z.load(key)? {
            Some(ix) => {
                let v = ix.iter().map(|(m, s)| (m.to_vec(), s)).collect();
                z.put_back(key, ix);
                Ok(v)
            }
            None => Ok(Vec::new()),
        },
        _ => Err(Error::WrongType),
    }
}

/// The input lookups of ZUNION and friends, done first as in Redis:
/// `keymiss` for each absent input in order, and WRONGTYPE at the first
/// that is neither a sorted set nor a set.
fn check_input_types(ctx: &Ctx<'_>, args: &Args<'_>, keys: std::ops::Range<usize>) -> Result {
    let slot = ctx.slot();
    if let Some(z) = ZDb::of(&slot) {
        let mut stop = false;
        for i in keys.clone() {
            stop |= z.defer_uncached(&args[i]);
        }
        if stop {
            return Err(zbuild::stop());
        }
    }
    ctx.keymiss_each(slot.db(), keys.clone().map(|i| &args[i][..]), zset_input);
    for i in keys {
        if super::type_of(slot.db(), &args[i]).is_some_and(|t| !zset_input(t)) {
            return Err(Error::WrongType);
        }
    }
    Ok(())
}

/// Computes a union, intersection or difference; the result is sorted by
/// (score, member) like a sorted set.
fn combine(
    inputs: Vec<Vec<(Vec<u8>, f64)>>,
    weights: &[f64],
    agg: Aggregate,
    op: SetOp,
) -> Vec<(Vec<u8>, f64)> {
    use std::collections::HashMap;
    let weighted = |s: f64, w: f64| {
        let v = s * w;
        if v.is_nan() {
            0.0
        } else {
            v
        }
    };
    let mut acc: HashMap<Vec<u8>, f64> = HashMap::new();
    match op {
        SetOp::Union => {
            for (i, input) in inputs.into_iter().enumerate() {
                for (m, s) in input {
                    let v = weighted(s, weights[i]);
                    acc.entry(m)
                        .and_modify(|a| *a = agg.apply(*a, v))
                        .or_insert(v);
                }
            }
        }
        SetOp::Inter => {
            if inputs.iter().any(Vec::is_empty) {
                return Vec::new();
            }
            // As Redis: inputs in order of size (a stable sort, as glibc's
            // qsort), the smallest walked; only its weighted score has a
            // NaN (inf * 0) made 0, the others' go into the aggregate as
            // they are (a SUM that turns NaN is then made 0).
            let mut order: Vec<usize> = (0..inputs.len()).collect();
            order.sort_by_key(|&i| inputs[i].len());
            let maps: Vec<HashMap<&[u8], f64>> = inputs
                .iter()
                .map(|inp| inp.iter().map(|(m, s)| (m.as_slice(), *s)).collect())
                .collect();
            'members: for (m, s) in &inputs[order[0]] {
                let mut total = weighted(*s, weights[order[0]]);
                for &i in &order[1..] {
                    let Some(&s) = maps[i].get(m.as_slice()) else {
                        continue 'members;
                    };
                    total = agg.apply(total, s * weights[i]);
                }
                acc.insert(m.clone(), total);
            }
        }
        SetOp::Diff => {
            let mut it = inputs.into_iter();
            let first = it.next().unwrap_or_default();
            let others: Vec<std::collections::HashSet<Vec<u8>>> = it
                .map(|inp| inp.into_iter().map(|(m, _)| m).collect())
                .collect();
            for (m, s) in first {
                if !others.iter().any(|o| o.contains(&m)) {
                    acc.insert(m, s);
                }
            }
        }
    }
    let mut out: Vec<(Vec<u8>, f64)> = acc.into_iter().collect();
    out.sort_by(|a, b| {
        a.1.partial_cmp(&b.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.0.cmp(&b.0))
    });
    out
}

/// Redis's `zunionInterDiffGenericCommand`. `numkeys_idx` is the position
/// of numkeys; `store` is whether the first argument is a destination.
fn setop_generic(ctx: &mut Ctx<'_>, args: Args<'_>, op: SetOp, store: bool) -> Result {
    let numkeys_idx = if store { 2 } else { 1 };
    let numkeys = int_arg(&args[numkeys_idx])?;
    if numkeys < 1 {
        return Err(Error::err(format!(
            "at least 1 input key is needed for '{}' command",
            ctx.cmd.name
        )));
    }
    let first = numkeys_idx + 1;
    if numkeys > (args.len() - first) as i64 {
        return Err(Error::Syntax);
    }
    let numkeys = numkeys as usize;
    // Redis looks the inputs up (WRONGTYPE) before it reads the options.
    check_input_types(ctx, &args, first..first + numkeys)?;
    let mut weights = vec![1.0; numkeys];
    let mut agg = Aggregate::Sum;
    let mut withscores = false;
    let mut j = first + numkeys;
    while j < args.len() {
        let remaining = args.len() - j;
        let a = &args[j];
        if op != SetOp::Diff && remaining > numkeys && is(a, "weights") {
            for (i, w) in weights.iter_mut().enumerate() {
                *w = parse_score(&args[j + 1 + i])
                    .ok_or_else(|| Error::err("weight value is not a float"))?;
            }
            j += numkeys + 1;
        } else if op != SetOp::Diff && remaining >= 2 && is(a, "aggregate") {
            let v = &args[j + 1];
            agg = if is(v, "sum") {
                Aggregate::Sum
            } else if is(v, "min") {
                Aggregate::Min
            } else if is(v, "max") {
                Aggregate::Max
            } else {
                return Err(Error::Syntax);
            };
            j += 2;
        } else if !store && is(a, "withscores") {
            withscores = true;
            j += 1;
        } else {
            return Err(Error::Syntax);
        }
    }
    let keys: Vec<&[u8]> = (first..first + numkeys).map(|i| &args[i]).collect();
    let n = ctx.conn.db;
    if store {
        let dst = &args[1];
        let slot = slot_w(ctx)?;
        let z = ZDb::of(&slot).expect("opened");
        let _g = ctx
            .shared
            .keyspace
            .lock_many(keys.iter().map(|k| (n, *k)).chain([(n, dst)]));
        let inputs = keys
            .iter()
            .map(|k| input_members(&z, k))
            .collect::<Result<Vec<_>>>()?;
        let result = combine(inputs, &weights, agg, op);
        let existed = z.db.exists(dst);
        let stored = z.store(dst, &result)?;
        let event = match op {
            SetOp::Union => "zunionstore",
            SetOp::Inter => "zinterstore",
            SetOp::Diff => "zdiffstore",
        };
        stored_events(ctx, dst, event, stored, existed);
        if stored > 0 {
            ctx.shared.blocking.signal(n, dst);
        }
        drop(_g);
        drop(slot);
        ctx.int(stored as i64);
    } else {
        let slot = ctx.slot();
        let result = match ZDb::of(&slot) {
            None => Vec::new(),
            Some(z) => {
                let _g = ctx.shared.keyspace.lock_many(keys.iter().map(|k| (n, *k)));
                let inputs = keys
                    .iter()
                    .map(|k| input_members(&z, k))
                    .collect::<Result<Vec<_>>>()?;
                combine(inputs, &weights, agg, op)
            }
        };
        drop(slot);
        members_reply(ctx, &result, withscores);
    }
    Ok(())
}

fn zunion(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    setop_generic(ctx, args, SetOp::Union, false)
}

fn zunionstore(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    setop_generic(ctx, args, SetOp::Union, true)
}

fn zinter(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    setop_generic(ctx, args, SetOp::Inter, false)
}

fn zinterstore(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    setop_generic(ctx, args, SetOp::Inter, true)
}

fn zdiff(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    setop_generic(ctx, args, SetOp::Diff, false)
}

fn zdiffstore(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    setop_generic(ctx, args, SetOp::Diff, true)
}

fn zintercard(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let numkeys = int_arg(&args[1])?;
    if numkeys < 1 {
        return Err(Error::err(
            "at least 1 input key is needed for 'zintercard' command",
        ));
    }
    if numkeys > (args.len() - 2) as i64 {
        return Err(Error::Syntax);
    }
    let numkeys = numkeys as usize;
    check_input_types(ctx, &args, 2..2 + numkeys)?;
    let mut limit = 0usize;
    let mut j = 2 + numkeys;
    while j < args.len() {
        if is(&args[j], "limit") && j + 1 < args.len() {
            // Redis's getPositiveLongFromObjectOrReply: one message for
            // "not a number" and "negative".
            let l = parse_i64(&args[j + 1]).unwrap_or(-1);
            if l < 0 {
                return Err(Error::err("LIMIT can't be negative"));
            }
            limit = l as usize;
            j += 2;
        } else {
            return Err(Error::Syntax);
        }
    }
    let keys: Vec<&[u8]> = (2..2 + numkeys).map(|i| &args[i]).collect();
    let n = ctx.conn.db;
    let slot = ctx.slot();
    let card = match ZDb::of(&slot) {
        None => 0,
        Some(z) => {
            let _g = ctx.shared.keyspace.lock_many(keys.iter().map(|k| (n, *k)));
            let inputs = keys
                .iter()
                .map(|k| input_members(&z, k))
                .collect::<Result<Vec<_>>>()?;
            let weights = vec![1.0; numkeys];
            let all = combine(inputs, &weights, Aggregate::Sum, SetOp::Inter).len();
            if limit > 0 {
                all.min(limit)
            } else {
                all
            }
        }
    };
    drop(slot);
    ctx.int(card as i64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_parse_like_strtod() {
        assert_eq!(parse_score(b"1.5"), Some(1.5));
        assert_eq!(parse_score(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_score(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse_score(b"1e3"), Some(1000.0));
        assert_eq!(parse_score(b"0"), Some(0.0));
        assert_eq!(parse_score(b"0e5"), Some(0.0));
        for bad in [
            &b""[..],
            b"nan",
            b" 1",
            b"1 ",
            b"1e400",
            b"1e-400",
            b"abc",
            b"1x",
        ] {
            assert_eq!(parse_score(bad), None, "{:?}", bad);
        }
    }

    #[test]
    fn range_ends_parse() {
        assert_eq!(parse_range_end(b"(1"), Some((1.0, true)));
        assert_eq!(parse_range_end(b"-inf"), Some((f64::NEG_INFINITY, false)));
        assert_eq!(parse_range_end(b"("), Some((0.0, true)));
        assert_eq!(parse_range_end(b"x"), None);
        assert_eq!(parse_range_end(b"nan"), None);
    }

    #[test]
    fn cursors_parse_like_strtoul() {
        assert_eq!(parse_cursor(b"0"), Some(0));
        assert_eq!(parse_cursor(b""), Some(0));
        assert_eq!(parse_cursor(b"+5"), Some(5));
        assert_eq!(parse_cursor(b"-1"), Some(u64::MAX));
        for bad in [&b"-"[..], b" 1", b"1x", b"18446744073709551616"] {
            assert_eq!(parse_cursor(bad), None, "{:?}", bad);
        }
    }

    #[test]
    fn rank_spans_follow_redis() {
        assert_eq!(rank_span(0, -1, 3), Some((0, 2)));
        assert_eq!(rank_span(-100, 100, 3), Some((0, 2)));
        assert_eq!(rank_span(2, 1, 3), None);
        assert_eq!(rank_span(3, 5, 3), None);
        assert_eq!(rank_span(0, -1, 0), None);
    }
}
