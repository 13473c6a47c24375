//! Hash commands (Redis `t_hash.c`): a hash is an engine map tagged
//! [`TAG_HASH`], one record per field, so HSET on a hash of a million
//! fields appends one small record. Writes hold the key's stripe lock from
//! the type check to the last write; field writes keep the key's TTL, and
//! removing the last field removes the key (the engine does that).
//!
//! Also home of what hashes and sets share: the type check
//! ([`collection_len`]), HSCAN/SSCAN's cursor ([`scan_args`],
//! [`scan_names`]) and the OBJECT ENCODING answers.

use basalt_engine::{Db, KeyKind, Lookup};
use basalt_resp::Args;

use super::cnum::LongDouble;
use super::flags::*;
use super::{def, int_arg, is, parse_i64, CommandDef, Ctx, Error, Group, Result, Rng};
use crate::glob;
use crate::keyspace::TAG_HASH;
use crate::notify::{GENERIC, HASH, NEW};

const G: Group = Group::Hash;

/// Redis's `hash-max-listpack-entries` default.
pub(crate) const LISTPACK_ENTRIES: usize = 128;
/// Redis's `hash-max-listpack-value` default.
const LISTPACK_VALUE: usize = 64;

/// The hash family's table.
pub const COMMANDS: &[CommandDef] = &[
    def("hset", -4, WRITE | DENYOOM | FAST, (1, 1, 1), G, "2.0.0", "Creates or modifies the value of a field in a hash.", hset),
    def("hsetnx", 4, WRITE | DENYOOM | FAST, (1, 1, 1), G, "2.0.0", "Sets the value of a field in a hash only when the field doesn't exist.", hsetnx),
    def("hget", 3, READONLY | FAST, (1, 1, 1), G, "2.0.0", "Returns the value of a field in a hash.", hget),
    def("hmget", -3, READONLY | FAST, (1, 1, 1), G, "2.0.0", "Returns the values of all fields in a hash.", hmget),
    def("hmset", -4, WRITE | DENYOOM | FAST, (1, 1, 1), G, "2.0.0", "Sets the values of multiple fields.", hmset),
    def("hdel", -3, WRITE | FAST, (1, 1, 1), G, "2.0.0", "Deletes one or more fields and their values from a hash. Deletes the hash if no fields remain.", hdel),
    def("hexists", 3, READONLY | FAST, (1, 1, 1), G, "2.0.0", "Determines whether a field exists in a hash.", hexists),
    def("hlen", 2, READONLY | FAST, (1, 1, 1), G, "2.0.0", "Returns the number of fields in a hash.", hlen),
    def("hstrlen", 3, READONLY | FAST, (1, 1, 1), G, "3.2.0", "Returns the length of the value of a field.", hstrlen),
    def("hkeys", 2, READONLY, (1, 1, 1), G, "2.0.0", "Returns all fields in a hash.", hkeys),
    def("hvals", 2, READONLY, (1, 1, 1), G, "2.0.0", "Returns all values in a hash.", hvals),
    def("hgetall", 2, READONLY, (1, 1, 1), G, "2.0.0", "Returns all fields and values in a hash.", hgetall),
    def("hincrby", 4, WRITE | DENYOOM | FAST, (1, 1, 1), G, "2.0.0", "Increments the integer value of a field in a hash by a number. Uses 0 as initial value if the field doesn't exist.", hincrby),
    def("hincrbyfloat", 4, WRITE | DENYOOM | FAST, (1, 1, 1), G, "2.6.0", "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't exist.", hincrbyfloat),
    def("hrandfield", -2, READONLY, (1, 1, 1), G, "6.2.0", "Returns one or more random fields from a hash.", hrandfield),
    def("hscan", -3, READONLY, (1, 1, 1), G, "2.8.0", "Iterates over fields and values of a hash.", hscan),
];

/// The number of members of the collection at `key` if it is a map tagged
/// `tag`; `None` if the key does not exist; WRONGTYPE if it holds anything
/// else.
pub fn collection_len(db: Option<&Db>, key: &[u8], tag: u8) -> Result<Option<usize>> {
    let Some(meta) = db.and_then(|db| db.meta(key)) else {
        return Ok(None);
    };
    match meta.kind {
        KeyKind::Map { tag: t, len, .. } if t == tag => Ok(Some(len)),
        _ => Err(Error::WrongType),
    }
}

/// [`collection_len`] for a read: an absent key is a `keymiss` (Redis's
/// `lookupKeyRead`).
pub fn read_len(ctx: &Ctx<'_>, db: Option<&Db>, key: &[u8], tag: u8) -> Result<Option<usize>> {
    let n = collection_len(db, key, tag)?;
    ctx.looked_up(key, n.is_some());
    Ok(n)
}

/// Sets field/value pairs from `args[2..]`; returns how many fields are new.
fn set_pairs(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<i64> {
    let key = &args[1];
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let created = collection_len(Some(&db), key, TAG_HASH)?.is_none();
    let mut added = 0;
    let mut j = 2;
    while j + 1 < args.len() {
        let (_, created) = db.put_field_tagged(key, TAG_HASH, &args[j], &args[j + 1])?;
        added += created as i64;
        j += 2;
    }
    if created {
        ctx.notify(NEW, "new", key);
    }
    ctx.notify(HASH, "hset", key);
    Ok(added)
}

fn hset(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    if args.len() % 2 == 1 {
        return Err(Error::Arity("hset".into()));
    }
    let n = set_pairs(ctx, &args)?;
    ctx.int(n);
    Ok(())
}

fn hmset(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    if args.len() % 2 == 1 {
        return Err(Error::Arity("hmset".into()));
    }
    set_pairs(ctx, &args)?;
    ctx.ok();
    Ok(())
}

fn hsetnx(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let (key, field) = (&args[1], &args[2]);
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let created = collection_len(Some(&db), key, TAG_HASH)?.is_none();
    let set = if db.contains_field(key, field)? {
        false
    } else {
        db.put_field_tagged(key, TAG_HASH, field, &args[3])?;
        if created {
            ctx.notify(NEW, "new", key);
        }
        ctx.notify(HASH, "hset", key);
        true
    };
    drop(db);
    ctx.int(set as i64);
    Ok(())
}

fn hget(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let slot = ctx.slot();
    if read_len(ctx, slot.db(), &args[1], TAG_HASH)?.is_none() {
        ctx.null();
        return Ok(());
    }
    // A field not in memory is read by a reader thread (crate::readers).
    match slot
        .db()
        .expect("exists")
        .get_field_or_cold(&args[1], &args[2])?
    {
        Lookup::Absent => ctx.null(),
        Lookup::Here(v) => ctx.bulk(&v),
        Lookup::Cold(read) => ctx.cold_bulk(read)?,
        // (A field is never a segmented value; handled all the same.)
        Lookup::ColdValue(value) => ctx.cold_value(value)?,
    }
    Ok(())
}

fn hmget(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let slot = ctx.slot();
    // Every field looked up first (an error then fails the command before
    // any of its reply is written); a field not in memory is read by a
    // reader thread, in its place in the array (crate::readers).
    let mut vals = Vec::with_capacity(args.len() - 2);
    if read_len(ctx, slot.db(), key, TAG_HASH)?.is_some() {
        let db = slot.db().expect("exists");
        for f in args.iter().skip(2) {
            vals.push(db.get_field_or_cold(key, f)?);
        }
    }
    drop(slot);
    ctx.array(args.len() - 2);
    for i in 0..args.len() - 2 {
        match vals
            .get_mut(i)
            .map(|l| std::mem::replace(l, Lookup::Absent))
        {
            None | Some(Lookup::Absent) => ctx.null(),
            Some(Lookup::Here(v)) => ctx.bulk(&v),
            // A read made here that fails is an error in its place: the
            // array's header is already written.
            Some(Lookup::Cold(read)) => {
                if let Err(e) = ctx.cold_bulk(read) {
                    let line = e.message().into_owned();
                    ctx.error_line(&line);
                }
            }
            Some(Lookup::ColdValue(value)) => {
                if let Err(e) = ctx.cold_value(value) {
                    let line = e.message().into_owned();
                    ctx.error_line(&line);
                }
            }
        }
    }
    Ok(())
}

fn hdel(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    remove_fields(ctx, &args, TAG_HASH, HASH, "hdel")
}

/// HDEL and SREM: removes the fields named in `args[2..]` from the
/// collection at `args[1]` (tagged `tag`), replies how many existed, and
/// publishes `event` (and `del` when the collection is gone).
pub fn remove_fields(
    ctx: &mut Ctx<'_>,
    args: &Args<'_>,
    tag: u8,
    class: u32,
    event: &str,
) -> Result {
    let key = &args[1];
    let slot = ctx.slot();
    let mut n = 0;
    if let Some(db) = slot.db() {
        let _g = ctx.lock(key);
        if collection_len(Some(db), key, tag)?.is_some() {
            for f in args.iter().skip(2) {
                n += db.delete_field(key, f)? as i64;
            }
            if n > 0 {
                ctx.notify(class, event, key);
                if ctx.shared.pubsub.notifies(GENERIC) && !db.exists(key) {
                    ctx.notify(GENERIC, "del", key);
                }
            }
        }
    }
    drop(slot);
    ctx.int(n);
    Ok(())
}

fn hexists(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let slot = ctx.slot();
    let found = match read_len(ctx, slot.db(), &args[1], TAG_HASH)? {
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

fn hlen(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let n = read_len(ctx, ctx.slot().db(), &args[1], TAG_HASH)?.unwrap_or(0);
    ctx.int(n as i64);
    Ok(())
}

fn hstrlen(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let slot = ctx.slot();
    let v = match read_len(ctx, slot.db(), &args[1], TAG_HASH)? {
        Some(_) => slot.db().expect("exists").get_field(&args[1], &args[2])?,
        None => None,
    };
    drop(slot);
    ctx.int(v.map_or(0, |v| v.len()) as i64);
    Ok(())
}

/// Every (field, value) of the hash, or empty if the key does not exist.
fn all_fields(ctx: &Ctx<'_>, key: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let slot = ctx.slot();
    match read_len(ctx, slot.db(), key, TAG_HASH)? {
        Some(_) => Ok(slot.db().expect("exists").fields(key)?),
        None => Ok(Vec::new()),
    }
}

fn hkeys(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let slot = ctx.slot();
    let names = match read_len(ctx, slot.db(), &args[1], TAG_HASH)? {
        Some(_) => slot.db().expect("exists").field_names(&args[1])?,
        None => Vec::new(),
    };
    drop(slot);
    ctx.array(names.len());
    for n in &names {
        ctx.bulk(n);
    }
    Ok(())
}

fn hvals(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let all = all_fields(ctx, &args[1])?;
    ctx.array(all.len());
    for (_, v) in &all {
        ctx.bulk(v);
    }
    Ok(())
}

fn hgetall(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let all = all_fields(ctx, &args[1])?;
    ctx.enc().map(all.len());
    for (f, v) in &all {
        ctx.bulk(f);
        ctx.bulk(v);
    }
    Ok(())
}

fn hincrby(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let (key, field) = (&args[1], &args[2]);
    let incr = int_arg(&args[3])?;
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let created = collection_len(Some(&db), key, TAG_HASH)?.is_none();
    let old = match db.get_field(key, field)? {
        Some(v) => parse_i64(&v).ok_or_else(|| Error::err("hash value is not an integer"))?,
        None => 0,
    };
    let new = old
        .checked_add(incr)
        .ok_or_else(|| Error::err("increment or decrement would overflow"))?;
    db.put_field_tagged(key, TAG_HASH, field, new.to_string().as_bytes())?;
    drop(db);
    if created {
        ctx.notify(NEW, "new", key);
    }
    ctx.notify(HASH, "hincrby", key);
    ctx.int(new);
    Ok(())
}

fn hincrbyfloat(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let (key, field) = (&args[1], &args[2]);
    let incr = LongDouble::parse(&args[3]).ok_or(Error::NotFloat)?;
    if !incr.is_finite() {
        return Err(Error::err("value is NaN or Infinity"));
    }
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let created = collection_len(Some(&db), key, TAG_HASH)?.is_none();
    let old = match db.get_field(key, field)? {
        Some(v) => LongDouble::parse(&v).ok_or_else(|| Error::err("hash value is not a float"))?,
        None => LongDouble::zero(),
    };
    // As INCRBYFLOAT: 80-bit arithmetic printed `%.17Lf`, as Redis.
    let new = old.plus(incr);
    if !new.is_finite() {
        return Err(Error::err("increment would produce NaN or Infinity"));
    }
    let text = new.to_human();
    db.put_field_tagged(key, TAG_HASH, field, text.as_bytes())?;
    drop(db);
    if created {
        ctx.notify(NEW, "new", key);
    }
    ctx.notify(HASH, "hincrbyfloat", key);
    ctx.bulk(text.as_bytes());
    Ok(())
}

/// The largest negative count HRANDFIELD / SRANDMEMBER accept (2^24).
pub const MAX_REPEATED_PICKS: i64 = 1 << 24;

/// The count argument of HRANDFIELD / SRANDMEMBER: an integer in
/// `-i64::MAX..=i64::MAX`, as Redis's `getRangeLongFromObjectOrReply`.
pub fn random_count(arg: &[u8]) -> Result<i64> {
    let n = int_arg(arg)?;
    if n == i64::MIN {
        return Err(Error::err(
            "value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        ));
    }
    // A negative count asks for that many picks with repeats; Basalt builds
    // the reply in memory, so an absurd count is refused rather than
    // exhausting RAM (Redis would stream it until the client buffer limit).
    if n < -MAX_REPEATED_PICKS {
        return Err(Error::err("value is out of range"));
    }
    Ok(n)
}

fn hrandfield(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    if args.len() == 2 {
        let slot = ctx.slot();
        let pick = match read_len(ctx, slot.db(), key, TAG_HASH)? {
            Some(_) => {
                let db = slot.db().expect("exists");
                let seed = Rng::from_time().next_u64();
                db.random_fields(key, 1, true, seed)?.pop()
            }
            None => None,
        };
        drop(slot);
        ctx.opt_bulk(pick.as_deref());
        return Ok(());
    }
    let count = random_count(&args[2])?;
    let withvalues = match args.len() {
        3 => false,
        4 if is(&args[3], "withvalues") => true,
        _ => return Err(Error::Syntax),
    };
    if withvalues && count.unsigned_abs() > (i64::MAX / 2) as u64 {
        return Err(Error::err("value is out of range"));
    }
    let slot = ctx.slot();
    let mut picks: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    if let Some(len) = read_len(ctx, slot.db(), key, TAG_HASH)? {
        let db = slot.db().expect("exists");
        let seed = Rng::from_time().next_u64();
        let names = if count >= 0 {
            db.random_fields(key, (count as u64).min(len as u64) as usize, true, seed)?
        } else {
            db.random_fields(key, count.unsigned_abs() as usize, false, seed)?
        };
        for name in names {
            let v = if withvalues {
                match db.get_field(key, &name)? {
                    Some(v) => Some(v),
                    None => continue,
                }
            } else {
                None
            };
            picks.push((name, v));
        }
    }
    drop(slot);
    // RESP3 pairs each field with its value; RESP2 is one flat array.
    let resp3 = ctx.conn.protocol == basalt_resp::Protocol::Resp3;
    ctx.array(if withvalues && !resp3 {
        2 * picks.len()
    } else {
        picks.len()
    });
    for (name, v) in &picks {
        if let Some(v) = v {
            if resp3 {
                ctx.array(2);
            }
            ctx.bulk(name);
            ctx.bulk(v);
        } else {
            ctx.bulk(name);
        }
    }
    Ok(())
}

/// HSCAN / SSCAN options after the cursor: `MATCH pattern`, `COUNT n`.
#[derive(Debug)]
pub struct ScanArgs<'a> {
    /// The glob, if any (`*` is dropped: it matches everything).
    pub pattern: Option<&'a [u8]>,
    /// The COUNT hint (default 10).
    pub count: usize,
}

/// Parses a SCAN-family cursor: an unsigned 64-bit decimal.
pub fn scan_cursor(arg: &[u8]) -> Result<u64> {
    std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::err("invalid cursor"))
}

/// Parses `[MATCH pattern] [COUNT count]` from `args[from..]`.
pub fn scan_args<'a>(args: &'a Args<'a>, from: usize) -> Result<ScanArgs<'a>> {
    let mut out = ScanArgs {
        pattern: None,
        count: 10,
    };
    let mut j = from;
    while j < args.len() {
        let more = args.len() - j - 1;
        if is(&args[j], "count") && more >= 1 {
            let c = int_arg(&args[j + 1])?;
            if c < 1 {
                return Err(Error::Syntax);
            }
            out.count = c.min(1 << 20) as usize;
            j += 2;
        } else if is(&args[j], "match") && more >= 1 {
            out.pattern = args.get(j + 1).filter(|p| *p != b"*");
            j += 2;
        } else {
            return Err(Error::Syntax);
        }
    }
    Ok(out)
}

/// FNV-1a: a fixed hash of a member name, so cursors stay valid across
/// calls and restarts. Mapped into `1..u64::MAX` so that a cursor past a
/// member is never 0 (0 means "done").
fn scan_hash(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h % (u64::MAX - 1) + 1
}

/// One step of HSCAN / SSCAN over `names` (every member, from memory).
///
/// Members are visited in the order of a fixed hash of their names and the
/// cursor is the next hash value, so, as with Redis's reverse-binary
/// cursor, a member present for the whole scan is returned at least once
/// whatever is added or removed in between. `all_at_once` (Redis's small
/// encodings) returns everything with cursor 0, as Redis does. Each step
/// looks at every name, so the step size grows with the collection
/// (at least 1/128 of it; COUNT is a hint) to keep a full scan O(n).
pub fn scan_names(
    names: Vec<Vec<u8>>,
    cursor: u64,
    count: usize,
    all_at_once: bool,
) -> (Vec<Vec<u8>>, u64) {
    if all_at_once {
        return (names, 0);
    }
    let (batch, next) = scan_step(names.into_iter().map(|n| (n, ())), cursor, count);
    (batch.into_iter().map(|(n, ())| n).collect(), next)
}

/// The walk of [`scan_names`] over (name, payload) pairs: the step starting
/// at `cursor` in the order of the names' fixed hash, and the next cursor
/// (0 when done). ZSCAN walks a sorted set's (member, score) this way.
pub fn scan_step<K: AsRef<[u8]>, T>(
    items: impl IntoIterator<Item = (K, T)>,
    cursor: u64,
    count: usize,
) -> (Vec<(K, T)>, u64) {
    let mut rest: Vec<(u64, K, T)> = items
        .into_iter()
        .map(|(k, t)| (scan_hash(k.as_ref()), k, t))
        .filter(|(h, ..)| *h >= cursor)
        .collect();
    let step = count.max(rest.len() / 128).max(1);
    if rest.len() <= step {
        return (rest.into_iter().map(|(_, k, t)| (k, t)).collect(), 0);
    }
    rest.select_nth_unstable_by_key(step - 1, |(h, ..)| *h);
    let last = rest[step - 1].0;
    // Members sharing the last hash go in this batch too.
    let mut batch = Vec::with_capacity(step);
    let mut more = false;
    for (h, k, t) in rest {
        if h <= last {
            batch.push((k, t));
        } else {
            more = true;
        }
    }
    (batch, if more { last + 1 } else { 0 })
}

fn hscan(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let cursor = scan_cursor(&args[2])?;
    let slot = ctx.slot();
    let Some(len) = read_len(ctx, slot.db(), key, TAG_HASH)? else {
        drop(slot);
        ctx.array(2);
        ctx.bulk(b"0");
        ctx.array(0);
        return Ok(());
    };
    let opts = scan_args(&args, 3)?;
    let db = slot.db().expect("exists");
    let small = len <= LISTPACK_ENTRIES;
    let (names, next) = scan_names(db.field_names(key)?, cursor, opts.count, small);
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        if opts.pattern.is_some_and(|p| !glob::matches(p, &n, false)) {
            continue;
        }
        if let Some(v) = db.get_field(key, &n)? {
            out.push((n, v));
        }
    }
    drop(slot);
    ctx.array(2);
    ctx.bulk(next.to_string().as_bytes());
    ctx.array(out.len() * 2);
    for (n, v) in &out {
        ctx.bulk(n);
        ctx.bulk(v);
    }
    Ok(())
}

/// OBJECT ENCODING of a hash of `len` fields: `listpack` while Redis 7.0
/// would keep it one (at most 128 fields, names and values at most 64
/// bytes), else `hashtable`. (Redis never converts back; Basalt answers
/// from the hash's current contents.)
pub fn encoding(db: &Db, key: &[u8], len: usize) -> Result<&'static str> {
    if len > LISTPACK_ENTRIES {
        return Ok("hashtable");
    }
    let small = db
        .fields(key)?
        .iter()
        .all(|(f, v)| f.len() <= LISTPACK_VALUE && v.len() <= LISTPACK_VALUE);
    Ok(if small { "listpack" } else { "hashtable" })
}
