//! Set commands (Redis `t_set.c`): a set is an engine map tagged
//! [`TAG_SET`] whose fields are the members, each with an empty value, so
//! membership, SMEMBERS and the set algebra work from the in-memory index
//! without reading the disk. Random picks (SPOP, SRANDMEMBER) use the
//! engine's O(1) random field access, so SPOP costs the same on a set of
//! ten members or ten million.
//!
//! Writes hold the stripe locks of every key they touch (sorted, via
//! `lock_many`), from the type checks to the last write.

use std::collections::HashSet;

use basalt_engine::Db;
use basalt_resp::Args;

use super::flags::*;
use super::hash::{
    collection_len, random_count, read_len, remove_fields, scan_args, scan_cursor, scan_names,
};
use super::{def, is, parse_i64, CommandDef, Ctx, Error, Group, Result, Rng};
use crate::glob;
use crate::keyspace::{RedisType, TAG_SET};
use crate::notify::{GENERIC, NEW, SET};

const G: Group = Group::Set;

/// Redis's `set-max-intset-entries` default.
const INTSET_ENTRIES: usize = 512;

/// The set family's table.
pub const COMMANDS: &[CommandDef] = &[
    def("sadd", -3, WRITE | DENYOOM | FAST, (1, 1, 1), G, "1.0.0", "Adds one or more members to a set. Creates the key if it doesn't exist.", sadd),
    def("srem", -3, WRITE | FAST, (1, 1, 1), G, "1.0.0", "Removes one or more members from a set. Deletes the set if the last member was removed.", srem),
    def("sismember", 3, READONLY | FAST, (1, 1, 1), G, "1.0.0", "Determines whether a member belongs to a set.", sismember),
    def("smismember", -3, READONLY | FAST, (1, 1, 1), G, "6.2.0", "Determines whether multiple members belong to a set.", smismember),
    def("smembers", 2, READONLY, (1, 1, 1), G, "1.0.0", "Returns all members of a set.", smembers),
    def("scard", 2, READONLY | FAST, (1, 1, 1), G, "1.0.0", "Returns the number of members in a set.", scard),
    def("spop", -2, WRITE | FAST, (1, 1, 1), G, "1.0.0", "Returns one or more random members from a set after removing them. Deletes the set if the last member was popped.", spop),
    def("srandmember", -2, READONLY, (1, 1, 1), G, "1.0.0", "Get one or multiple random members from a set", srandmember),
    def("smove", 4, WRITE | FAST, (1, 2, 1), G, "1.0.0", "Moves a member from one set to another.", smove),
    def("sinter", -2, READONLY, (1, -1, 1), G, "1.0.0", "Returns the intersect of multiple sets.", sinter),
    def("sintercard", -3, READONLY | MOVABLE_KEYS, (0, 0, 0), G, "7.0.0", "Returns the number of members of the intersect of multiple sets.", sintercard),
    def("sinterstore", -3, WRITE | DENYOOM, (1, -1, 1), G, "1.0.0", "Stores the intersect of multiple sets in a key.", sinterstore),
    def("sunion", -2, READONLY, (1, -1, 1), G, "1.0.0", "Returns the union of multiple sets.", sunion),
    def("sunionstore", -3, WRITE | DENYOOM, (1, -1, 1), G, "1.0.0", "Stores the union of multiple sets in a key.", sunionstore),
    def("sdiff", -2, READONLY, (1, -1, 1), G, "1.0.0", "Returns the difference of multiple sets.", sdiff),
    def("sdiffstore", -3, WRITE | DENYOOM, (1, -1, 1), G, "1.0.0", "Stores the difference of multiple sets in a key.", sdiffstore),
    def("sscan", -3, READONLY, (1, 1, 1), G, "2.8.0", "Iterates over members of a set.", sscan),
];

fn set_len(db: Option<&Db>, key: &[u8]) -> Result<Option<usize>> {
    collection_len(db, key, TAG_SET)
}

/// [`set_len`] for a read: an absent key is a `keymiss`.
fn read_set_len(ctx: &Ctx<'_>, db: Option<&Db>, key: &[u8]) -> Result<Option<usize>> {
    read_len(ctx, db, key, TAG_SET)
}

fn sadd(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let created = set_len(Some(&db), key)?.is_none();
    let mut added = 0;
    for m in args.iter().skip(2) {
        // A member already present is not written again: no record, and
        // the key's version (WATCH, VERSION) stays, as Redis does not
        // touch the key either.
        if db.contains_field(key, m)? {
            continue;
        }
        added += db.put_field_tagged(key, TAG_SET, m, b"")?.1 as i64;
    }
    drop(db);
    if added > 0 {
        if created {
            ctx.notify(NEW, "new", key);
        }
        ctx.notify(SET, "sadd", key);
    }
    ctx.int(added);
    Ok(())
}

fn srem(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    remove_fields(ctx, &args, TAG_SET, SET, "srem")
}

fn sismember(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let slot = ctx.slot();
    let found = match read_set_len(ctx, slot.db(), &args[1])? {
        Some(_) => slot
            .db()
            .expect("exists")
            .contains_field(&args[1], &args[2])?,
        None => false,
    };
    drop(slot);
    ctx.int(found as i64);
    Ok(())
}

fn smismember(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let slot = ctx.slot();
    let mut found = Vec::with_capacity(args.len() - 2);
    if read_set_len(ctx, slot.db(), key)?.is_some() {
        let db = slot.db().expect("exists");
        for m in args.iter().skip(2) {
            found.push(db.contains_field(key, m)?);
        }
    } else {
        found.resize(args.len() - 2, false);
    }
    drop(slot);
    ctx.array(found.len());
    for f in found {
        ctx.int(f as i64);
    }
    Ok(())
}

/// The members of the set at `key` (empty if it does not exist).
fn members(db: Option<&Db>, key: &[u8]) -> Result<Vec<Vec<u8>>> {
    match set_len(db, key)? {
        Some(_) => Ok(db.expect("exists").field_names(key)?),
        None => Ok(Vec::new()),
    }
}

/// A set reply (`~` in RESP3, `*` in RESP2).
fn reply_set(ctx: &mut Ctx<'_>, items: &[Vec<u8>]) {
    ctx.enc().set(items.len());
    for m in items {
        ctx.bulk(m);
    }
}

fn smembers(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let slot = ctx.slot();
    if read_set_len(ctx, slot.db(), &args[1])?.is_none() {
        drop(slot);
        reply_set(ctx, &[]);
        return Ok(());
    }
    let all = members(slot.db(), &args[1])?;
    drop(slot);
    reply_set(ctx, &all);
    Ok(())
}

fn scard(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let n = read_set_len(ctx, ctx.slot().db(), &args[1])?.unwrap_or(0);
    ctx.int(n as i64);
    Ok(())
}

fn spop(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    if args.len() > 3 {
        return Err(Error::Syntax);
    }
    let count = match args.get(2) {
        None => None,
        Some(a) => Some(
            parse_i64(a)
                .filter(|n| *n >= 0)
                .ok_or_else(|| Error::err("value is out of range, must be positive"))?
                as usize,
        ),
    };
    let slot = ctx.slot();
    let mut popped = Vec::new();
    if let Some(db) = slot.db() {
        let _g = ctx.lock(key);
        // A write lookup in Redis 7.0, with or without a count: no
        // `keymiss`, no keyspace hit or miss (checked against 7.0.15).
        if let Some(len) = set_len(Some(db), key)? {
            let want = count.unwrap_or(1);
            if want >= len {
                popped = db.field_names(key)?;
                db.delete(key)?;
            } else if want > 0 {
                popped = pick_members(db, key, want, true)?;
                for m in &popped {
                    db.delete_field(key, m)?;
                }
            }
            if !popped.is_empty() {
                ctx.notify(SET, "spop", key);
                if want >= len {
                    ctx.notify(GENERIC, "del", key);
                }
            }
        }
    }
    drop(slot);
    match count {
        None => ctx.opt_bulk(popped.first().map(|m| &m[..])),
        Some(_) => reply_set(ctx, &popped),
    }
    Ok(())
}

/// `count` members of the set at `key` picked at random (`distinct`: no
/// member twice, at most the set's size). While a replicated entry applies
/// (`crate::repl::entry_random`), the picks come from the entry's seed over
/// the members in sorted order, so every node picks the same members
/// (O(n log n) for n members); otherwise from the engine's index with a
/// fresh seed (O(count)).
fn pick_members(
    db: &basalt_engine::Db,
    key: &[u8],
    count: usize,
    distinct: bool,
) -> Result<Vec<Vec<u8>>> {
    let Some(seed) = crate::repl::entry_random() else {
        let seed = Rng::from_time().next_u64();
        return Ok(db.random_fields(key, count, distinct, seed)?);
    };
    let mut all = db.field_names(key)?;
    all.sort_unstable();
    let n = all.len();
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut rng = Rng::new(seed);
    if distinct {
        let want = count.min(n);
        for i in 0..want {
            let j = i + (rng.next_u64() % (n - i) as u64) as usize;
            all.swap(i, j);
        }
        all.truncate(want);
        Ok(all)
    } else {
        Ok((0..count)
            .map(|_| all[(rng.next_u64() % n as u64) as usize].clone())
            .collect())
    }
}

fn srandmember(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    if args.len() > 3 {
        return Err(Error::Syntax);
    }
    let count = args.get(2).map(random_count).transpose()?;
    let slot = ctx.slot();
    let mut picks = Vec::new();
    if let Some(len) = read_set_len(ctx, slot.db(), key)? {
        let db = slot.db().expect("exists");
        picks = match count {
            None => pick_members(db, key, 1, true)?,
            Some(n) if n >= 0 => pick_members(db, key, (n as u64).min(len as u64) as usize, true)?,
            Some(n) => pick_members(db, key, n.unsigned_abs() as usize, false)?,
        };
    }
    drop(slot);
    match count {
        None => ctx.opt_bulk(picks.first().map(|m| &m[..])),
        Some(_) => {
            ctx.array(picks.len());
            for m in &picks {
                ctx.bulk(m);
            }
        }
    }
    Ok(())
}

fn smove(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let (src, dst, member) = (&args[1], &args[2], &args[3]);
    let slot = ctx.slot();
    let Some(db) = slot.db() else {
        drop(slot);
        ctx.int(0);
        return Ok(());
    };
    let n = ctx.conn.db;
    let _g = ctx.shared.keyspace.lock_many([(n, src), (n, dst)]);
    let moved = if set_len(Some(db), src)?.is_none() {
        false
    } else {
        let dst_created = set_len(Some(db), dst)?.is_none();
        if src == dst {
            db.contains_field(src, member)?
        } else if db.delete_field(src, member)? {
            ctx.notify(SET, "srem", src);
            if !db.exists(src) {
                ctx.notify(GENERIC, "del", src);
            }
            if dst_created {
                ctx.notify(NEW, "new", dst);
            }
            if db.put_field_tagged(dst, TAG_SET, member, b"")?.1 {
                ctx.notify(SET, "sadd", dst);
            }
            true
        } else {
            false
        }
    };
    drop(slot);
    ctx.int(moved as i64);
    Ok(())
}

/// The intersection of the sets at `keys`, stopping after `limit` members
/// (0 = no limit). Checks every key's type first (WRONGTYPE even after a
/// missing key, as Redis 7.0 does); a missing key makes it empty.
fn inter(db: Option<&Db>, keys: &[&[u8]], limit: usize) -> Result<Vec<Vec<u8>>> {
    let mut sized = Vec::with_capacity(keys.len());
    let mut missing = false;
    for k in keys {
        match set_len(db, k)? {
            Some(len) => sized.push((len, *k)),
            None => missing = true,
        }
    }
    if missing {
        return Ok(Vec::new());
    }
    let db = db.expect("keys exist");
    sized.sort_by_key(|(len, _)| *len);
    let mut out = Vec::new();
    for m in db.field_names(sized[0].1)? {
        let mut everywhere = true;
        for (_, k) in &sized[1..] {
            if !db.contains_field(k, &m)? {
                everywhere = false;
                break;
            }
        }
        if everywhere {
            out.push(m);
            if limit != 0 && out.len() >= limit {
                break;
            }
        }
    }
    Ok(out)
}

/// The union (`diff` false) or the difference (first set minus the others)
/// of the sets at `keys`; missing keys are empty sets. Every key's type is
/// checked first.
fn union_or_diff(db: Option<&Db>, keys: &[&[u8]], diff: bool) -> Result<Vec<Vec<u8>>> {
    let mut present = Vec::with_capacity(keys.len());
    for k in keys {
        present.push(set_len(db, k)?.is_some());
    }
    let Some(db) = db else {
        return Ok(Vec::new());
    };
    if diff {
        if !present[0] {
            return Ok(Vec::new());
        }
        let others: Vec<&[u8]> = keys[1..]
            .iter()
            .zip(&present[1..])
            .filter(|(_, p)| **p)
            .map(|(k, _)| *k)
            .collect();
        let mut out = Vec::new();
        for m in db.field_names(keys[0])? {
            let mut elsewhere = false;
            for k in &others {
                if db.contains_field(k, &m)? {
                    elsewhere = true;
                    break;
                }
            }
            if !elsewhere {
                out.push(m);
            }
        }
        return Ok(out);
    }
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    let mut out = Vec::new();
    for (k, p) in keys.iter().zip(&present) {
        if !*p {
            continue;
        }
        for m in db.field_names(k)? {
            if seen.insert(m.clone()) {
                out.push(m);
            }
        }
    }
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Inter,
    Union,
    Diff,
}

fn compute(db: Option<&Db>, keys: &[&[u8]], op: Op) -> Result<Vec<Vec<u8>>> {
    match op {
        Op::Inter => inter(db, keys, 0),
        Op::Union => union_or_diff(db, keys, false),
        Op::Diff => union_or_diff(db, keys, true),
    }
}

fn read_op(ctx: &mut Ctx<'_>, args: Args<'_>, op: Op) -> Result {
    let keys: Vec<&[u8]> = args.iter().skip(1).collect();
    let slot = ctx.slot();
    ctx.keymiss_each(slot.db(), keys.iter().copied(), |t| t == RedisType::Set);
    let result = compute(slot.db(), &keys, op)?;
    drop(slot);
    reply_set(ctx, &result);
    Ok(())
}

fn store_op(ctx: &mut Ctx<'_>, args: Args<'_>, op: Op) -> Result {
    let dst = &args[1];
    let keys: Vec<&[u8]> = args.iter().skip(2).collect();
    let db = ctx.db_w()?;
    let n = ctx.conn.db;
    let _g = ctx
        .shared
        .keyspace
        .lock_many(args.iter().skip(1).map(|k| (n, k)));
    ctx.keymiss_each(Some(&db), keys.iter().copied(), |t| t == RedisType::Set);
    let result = compute(Some(&db), &keys, op)?;
    // Not crash-atomic: a crash between the delete and the last add leaves
    // part of the result (the engine has no multi-record transaction).
    let existed = db.delete(dst)?;
    for m in &result {
        db.put_field_tagged(dst, TAG_SET, m, b"")?;
    }
    drop(db);
    if !result.is_empty() {
        let event = match op {
            Op::Inter => "sinterstore",
            Op::Union => "sunionstore",
            Op::Diff => "sdiffstore",
        };
        if !existed {
            ctx.notify(NEW, "new", dst);
        }
        ctx.notify(SET, event, dst);
    } else if existed {
        ctx.notify(GENERIC, "del", dst);
    }
    ctx.int(result.len() as i64);
    Ok(())
}

fn sinter(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    read_op(ctx, args, Op::Inter)
}

fn sunion(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    read_op(ctx, args, Op::Union)
}

fn sdiff(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    read_op(ctx, args, Op::Diff)
}

fn sinterstore(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    store_op(ctx, args, Op::Inter)
}

fn sunionstore(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    store_op(ctx, args, Op::Union)
}

fn sdiffstore(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    store_op(ctx, args, Op::Diff)
}

fn sintercard(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let numkeys = parse_i64(&args[1])
        .filter(|n| *n > 0)
        .ok_or_else(|| Error::err("numkeys should be greater than 0"))?;
    if numkeys as u64 > (args.len() - 2) as u64 {
        return Err(Error::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    let numkeys = numkeys as usize;
    let keys: Vec<&[u8]> = args.iter().skip(2).take(numkeys).collect();
    let mut limit = 0usize;
    let mut j = 2 + numkeys;
    while j < args.len() {
        if is(&args[j], "limit") && j + 1 < args.len() {
            limit = parse_i64(&args[j + 1])
                .filter(|n| *n >= 0)
                .ok_or_else(|| Error::err("LIMIT can't be negative"))? as usize;
            j += 2;
        } else {
            return Err(Error::Syntax);
        }
    }
    let slot = ctx.slot();
    ctx.keymiss_each(slot.db(), keys.iter().copied(), |t| t == RedisType::Set);
    let n = inter(slot.db(), &keys, limit)?.len();
    drop(slot);
    ctx.int(n as i64);
    Ok(())
}

/// Whether Redis 7.0 would hold these members as an intset: at most 512,
/// all integers.
pub(crate) fn is_intset(names: &[Vec<u8>]) -> bool {
    names.len() <= INTSET_ENTRIES && names.iter().all(|m| parse_i64(m).is_some())
}

fn sscan(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let cursor = scan_cursor(&args[2])?;
    let slot = ctx.slot();
    if read_set_len(ctx, slot.db(), key)?.is_none() {
        drop(slot);
        ctx.array(2);
        ctx.bulk(b"0");
        ctx.array(0);
        return Ok(());
    }
    let opts = scan_args(&args, 3)?;
    let names = slot.db().expect("exists").field_names(key)?;
    drop(slot);
    let small = is_intset(&names);
    let (mut batch, next) = scan_names(names, cursor, opts.count, small);
    if let Some(p) = opts.pattern {
        batch.retain(|m| glob::matches(p, m, false));
    }
    ctx.array(2);
    ctx.bulk(next.to_string().as_bytes());
    ctx.array(batch.len());
    for m in &batch {
        ctx.bulk(m);
    }
    Ok(())
}

/// OBJECT ENCODING of a set: `intset` while Redis 7.0 would keep it one,
/// else `hashtable`. (Redis never converts back; Basalt answers from the
/// set's current members.)
pub fn encoding(db: &Db, key: &[u8], len: usize) -> Result<&'static str> {
    if len > INTSET_ENTRIES {
        return Ok("hashtable");
    }
    Ok(if is_intset(&db.field_names(key)?) {
        "intset"
    } else {
        "hashtable"
    })
}
