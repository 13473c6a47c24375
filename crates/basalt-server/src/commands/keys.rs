//! Generic key commands (Redis `db.c`, `object.c`): DEL EXISTS TYPE RENAME
//! KEYS SCAN RANDOMKEY DBSIZE FLUSHDB FLUSHALL TOUCH COPY MOVE SWAPDB OBJECT.
//!
//! Copying a key (RENAME, COPY, MOVE) reads it and writes it again under
//! the destination name, value or every field of a map, with its expiry;
//! both keys' stripes are held throughout, so other clients never see a
//! half-done copy. (The engine has no multi-record transaction, so a crash
//! in the middle of a RENAME can leave both names; see the compatibility
//! notes.)

use basalt_engine::{Db, KeyKind};
use basalt_resp::Args;

use super::connection::db_index;
use super::flags::*;
use super::{
    def, int_arg, is, sub_arity, unknown_subcommand, CommandDef, Ctx, Error, Group, Result, Rng,
};
use crate::glob;
use crate::keyspace::{RedisType, SlotRead, TAG_HASH, TAG_LIST, TAG_SET, TAG_STREAM, TAG_ZSET};
use crate::notify::{GENERIC, NEW};

const G: Group = Group::Generic;

/// The generic family's table.
pub const COMMANDS: &[CommandDef] = &[
    def("del", -2, WRITE, (1, -1, 1), G, "1.0.0", "Deletes one or more keys.", del),
    def("unlink", -2, WRITE | FAST, (1, -1, 1), G, "4.0.0", "Asynchronously deletes one or more keys.", del),
    def("exists", -2, READONLY | FAST, (1, -1, 1), G, "1.0.0", "Determines whether one or more keys exist.", exists),
    def("touch", -2, READONLY | FAST, (1, -1, 1), G, "3.2.1", "Returns the number of existing keys out of those specified after updating the time they were last accessed.", exists),
    def("type", 2, READONLY | FAST, (1, 1, 1), G, "1.0.0", "Determines the type of value stored at a key.", type_),
    def("rename", 3, WRITE, (1, 2, 1), G, "1.0.0", "Renames a key and overwrites the destination.", rename),
    def("renamenx", 3, WRITE | FAST, (1, 2, 1), G, "1.0.0", "Renames a key only when the target key name doesn't exist.", renamenx),
    def("keys", 2, READONLY, (0, 0, 0), G, "1.0.0", "Returns all key names that match a pattern.", keys),
    def("scan", -2, READONLY, (0, 0, 0), G, "2.8.0", "Iterates over the key names in the database.", scan),
    def("randomkey", 1, READONLY, (0, 0, 0), G, "1.0.0", "Returns a random key name from the database.", randomkey),
    def("dbsize", 1, READONLY | FAST, (0, 0, 0), Group::Server, "1.0.0", "Returns the number of keys in the database.", dbsize),
    def("flushdb", -1, WRITE, (0, 0, 0), Group::Server, "1.0.0", "Remove all keys from the current database.", flushdb),
    def("flushall", -1, WRITE, (0, 0, 0), Group::Server, "1.0.0", "Removes all keys from all databases.", flushall),
    def("copy", -3, WRITE | DENYOOM, (1, 2, 1), G, "6.2.0", "Copies the value of a key to a new key.", copy),
    def("move", 3, WRITE | FAST, (1, 1, 1), G, "1.0.0", "Moves a key to another database.", move_),
    def("swapdb", 3, WRITE | FAST, (0, 0, 0), Group::Server, "4.0.0", "Swaps two Redis databases.", swapdb),
    def("object", -2, READONLY, (2, 2, 1), G, "2.2.3", "A container for object introspection commands.", object),
];

fn del(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let slot = ctx.slot();
    let Some(db) = slot.db() else {
        ctx.int(0);
        return Ok(());
    };
    let n = ctx.conn.db;
    let _g = ctx
        .shared
        .keyspace
        .lock_many(args.iter().skip(1).map(|k| (n, k)));
    let mut count = 0;
    for key in args.iter().skip(1) {
        if db.delete(key)? {
            ctx.notify(GENERIC, "del", key);
            // A client blocked in XREADGROUP on a deleted stream is told
            // so (others re-run and wait again).
            ctx.shared.blocking.signal(n, key);
            count += 1;
        }
    }
    ctx.int(count);
    Ok(())
}

fn exists(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let slot = ctx.slot();
    let db = slot.db();
    let mut count = 0;
    for key in args.iter().skip(1) {
        if db.is_some_and(|db| db.exists(key)) {
            ctx.keyhit();
            count += 1;
        } else {
            ctx.keymiss(key);
        }
    }
    ctx.int(count as i64);
    Ok(())
}

fn type_(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let t = super::type_of(ctx.slot().db(), &args[1]);
    ctx.looked_up(&args[1], t.is_some());
    let t = t.map_or("none", RedisType::name);
    ctx.simple(t.as_bytes());
    Ok(())
}

/// Writes `src`'s contents and expiry (from `from`) under `dst` (in `to`),
/// replacing `dst`. Returns false if `src` does not exist. The caller holds
/// both keys' stripes.
pub fn copy_key(from: &Db, src: &[u8], to: &Db, dst: &[u8]) -> Result<bool> {
    let Some(meta) = from.meta(src) else {
        return Ok(false);
    };
    match meta.kind {
        KeyKind::Value { .. } => {
            let Some(v) = from.get_versioned(src)? else {
                return Ok(false);
            };
            to.put_with_expiry(dst, &v.value, v.expires_at)?;
        }
        KeyKind::Map { tag, .. } => {
            let fields = from.fields(src)?;
            to.delete(dst)?;
            for (f, v) in &fields {
                to.put_field_tagged(dst, tag, f, v)?;
            }
            if let Some(at) = meta.expires_at {
                to.expire(dst, at)?;
            }
        }
    }
    Ok(true)
}

fn rename_generic(ctx: &mut Ctx<'_>, args: Args<'_>, nx: bool) -> Result {
    let (src, dst) = (&args[1], &args[2]);
    let slot = ctx.slot();
    let Some(db) = slot.db() else {
        return Err(Error::NoSuchKey);
    };
    let n = ctx.conn.db;
    let _g = ctx.shared.keyspace.lock_many([(n, src), (n, dst)]);
    if !db.exists(src) {
        return Err(Error::NoSuchKey);
    }
    if src == dst {
        if nx {
            ctx.int(0);
        } else {
            ctx.ok();
        }
        return Ok(());
    }
    if nx && db.exists(dst) {
        ctx.int(0);
        return Ok(());
    }
    if !copy_key(db, src, db, dst)? {
        return Err(Error::NoSuchKey);
    }
    db.delete(src)?;
    // Redis deletes the destination and adds it again: always `new`.
    ctx.notify(NEW, "new", dst);
    ctx.notify(GENERIC, "rename_from", src);
    ctx.notify(GENERIC, "rename_to", dst);
    // A list or sorted set arriving under `dst` may serve a blocked client.
    ctx.shared.blocking.signal(n, dst);
    if nx {
        ctx.int(1);
    } else {
        ctx.ok();
    }
    Ok(())
}

fn rename(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    rename_generic(ctx, args, false)
}

fn renamenx(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    rename_generic(ctx, args, true)
}

fn keys(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let pattern = &args[1];
    let all = pattern == b"*";
    let slot = ctx.slot();
    let mut found = Vec::new();
    if let Some(db) = slot.db() {
        let mut cursor = 0;
        loop {
            let (batch, next) = db.scan(cursor, 1024);
            found.extend(
                batch
                    .into_iter()
                    .filter(|k| all || glob::matches(pattern, k, false)),
            );
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    drop(slot);
    ctx.array(found.len());
    for k in &found {
        ctx.bulk(k);
    }
    Ok(())
}

fn scan(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let cursor: u64 = std::str::from_utf8(&args[1])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::err("invalid cursor"))?;
    let mut count = 10usize;
    let mut pattern: Option<&[u8]> = None;
    let mut want: Option<Option<RedisType>> = None;
    let mut j = 2;
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
        } else if is(&args[j], "type") && more >= 1 {
            want = Some(RedisType::parse(&args[j + 1]));
            j += 2;
        } else {
            return Err(Error::Syntax);
        }
    }
    let slot = ctx.slot();
    let (keys, next) = match slot.db() {
        Some(db) => {
            let (mut keys, next) = db.scan(cursor, count);
            keys.retain(|k| {
                pattern.is_none_or(|p| glob::matches(p, k, false))
                    && want.is_none_or(|t| t.is_some() && super::type_of(Some(db), k) == t)
            });
            (keys, next)
        }
        None => (Vec::new(), 0),
    };
    drop(slot);
    ctx.array(2);
    ctx.bulk(next.to_string().as_bytes());
    ctx.array(keys.len());
    for k in &keys {
        ctx.bulk(k);
    }
    Ok(())
}

/// A random key: a scan from a random shard, then a random pick among the
/// keys it returns (not uniform over keys, as Redis's is not either).
fn random_key(db: &Db) -> Option<Vec<u8>> {
    if db.is_empty() {
        return None;
    }
    if let Some(r) = crate::repl::entry_random() {
        return replicated_random_key(db, r);
    }
    let mut rng = Rng::from_time();
    // The engine's cursor holds the shard number in its top 16 bits; a
    // shard past the last one just ends the scan.
    let shard = rng.next_u64() % 8;
    let mut cursor = shard << 48;
    let mut wrapped = false;
    for _ in 0..1_000_000 {
        let (keys, next) = db.scan(cursor, 64);
        if !keys.is_empty() {
            let i = (rng.next_u64() % keys.len() as u64) as usize;
            return keys.into_iter().nth(i);
        }
        if next == 0 {
            if wrapped {
                return None;
            }
            wrapped = true;
            cursor = 0;
        } else {
            cursor = next;
        }
    }
    None
}

/// Every key of `db`, by a whole scan (expired keys are not listed; a key
/// may come twice if writes run meanwhile, as with SCAN).
pub(crate) fn all_keys(db: &Db) -> Vec<Vec<u8>> {
    let mut all = Vec::new();
    let mut cursor = 0;
    loop {
        let (keys, next) = db.scan(cursor, 1000);
        all.extend(keys);
        if next == 0 {
            return all;
        }
        cursor = next;
    }
}

/// RANDOMKEY inside a replicated entry (a script, EXEC): every node must
/// pick the same key, and the engine's scan order differs between nodes,
/// so the pick is the key at position `r mod n` in sorted order, `r` drawn
/// from the entry's seed. O(n) in the database's keys.
fn replicated_random_key(db: &Db, r: u64) -> Option<Vec<u8>> {
    let mut all = all_keys(db);
    if all.is_empty() {
        return None;
    }
    let i = (r % all.len() as u64) as usize;
    all.select_nth_unstable(i);
    Some(all.swap_remove(i))
}

fn randomkey(ctx: &mut Ctx<'_>, _args: Args<'_>) -> Result {
    let k = ctx.slot().db().and_then(random_key);
    ctx.opt_bulk(k.as_deref());
    Ok(())
}

fn dbsize(ctx: &mut Ctx<'_>, _args: Args<'_>) -> Result {
    let n = ctx.slot().db().map_or(0, |db| db.len());
    ctx.int(n as i64);
    Ok(())
}

fn flush_mode(args: &Args<'_>) -> Result {
    match args.len() {
        1 => Ok(()),
        2 if is(&args[1], "async") || is(&args[1], "sync") => Ok(()),
        _ => Err(Error::Syntax),
    }
}

fn flushdb(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    flush_mode(&args)?;
    ctx.shared.keyspace.flush_db(ctx.conn.db)?;
    ctx.ok();
    flushed(ctx);
    Ok(())
}

/// Tells tracking clients that every key is invalid (Redis's
/// `trackingInvalidateKeysOnFlush`).
fn flushed(ctx: &Ctx<'_>) {
    let hub = &ctx.shared.pubsub;
    if hub.tracking.active() {
        hub.tracking.flushed(hub, &ctx.shared.clients.all());
    }
}

fn flushall(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    flush_mode(&args)?;
    for n in 0..ctx.shared.keyspace.len() {
        ctx.shared.keyspace.flush_db(n)?;
    }
    ctx.ok();
    flushed(ctx);
    Ok(())
}

/// Read guards on two different databases, taken in ascending order, with
/// `dst` opened. `None` if `src` has never been opened (it is empty).
fn two_slots<'a>(
    ctx: &Ctx<'a>,
    src: usize,
    dst: usize,
) -> Result<Option<(SlotRead<'a>, SlotRead<'a>)>> {
    let ks = &ctx.shared.keyspace;
    for _ in 0..8 {
        if ks.read(src).db().is_none() {
            return Ok(None);
        }
        drop(ks.write(dst)?);
        let (a, b) = if src < dst {
            let a = ks.read(src);
            (a, ks.read(dst))
        } else {
            let b = ks.read(dst);
            (ks.read(src), b)
        };
        if a.db().is_none() {
            return Ok(None);
        }
        if b.db().is_some() {
            return Ok(Some((a, b)));
        }
        // A FLUSHDB closed the destination in between; try again.
    }
    Err(Error::err("database busy, try again"))
}

fn copy(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let (src, dst) = (&args[1], &args[2]);
    let mut to = ctx.conn.db;
    let mut replace = false;
    let mut j = 3;
    while j < args.len() {
        if is(&args[j], "replace") {
            replace = true;
            j += 1;
        } else if is(&args[j], "db") && j + 1 < args.len() {
            to = db_index(ctx, &args[j + 1])?;
            j += 2;
        } else {
            return Err(Error::Syntax);
        }
    }
    let from = ctx.conn.db;
    if from == to && src == dst {
        return Err(Error::err("source and destination objects are the same"));
    }
    // Slots before stripes (the keyspace's lock order).
    let ks = &ctx.shared.keyspace;
    let copied = if from == to {
        let db = ctx.db_w()?;
        let _g = ks.lock_many([(from, src), (to, dst)]);
        let found = db.exists(src);
        ctx.looked_up(src, found);
        if found && (replace || !db.exists(dst)) {
            copy_key(&db, src, &db, dst)?
        } else {
            false
        }
    } else {
        match two_slots(ctx, from, to)? {
            None => {
                ctx.keymiss(src);
                false
            }
            Some((a, b)) => {
                let _g = ks.lock_many([(from, src), (to, dst)]);
                let (a, b) = (a.db().expect("checked"), b.db().expect("checked"));
                let found = a.exists(src);
                ctx.looked_up(src, found);
                if found && (replace || !b.exists(dst)) {
                    copy_key(a, src, b, dst)?
                } else {
                    false
                }
            }
        }
    };
    if copied {
        // As RENAME: a replaced destination is deleted and added again.
        ctx.notify_db(NEW, "new", dst, to);
        ctx.notify_db(GENERIC, "copy_to", dst, to);
        ctx.shared.blocking.signal(to, dst);
    }
    ctx.int(copied as i64);
    Ok(())
}

fn move_(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let to = db_index(ctx, &args[2])?;
    let from = ctx.conn.db;
    if from == to {
        return Err(Error::err("source and destination objects are the same"));
    }
    let moved = match two_slots(ctx, from, to)? {
        None => false,
        Some((a, b)) => {
            let _g = ctx.shared.keyspace.lock_many([(from, key), (to, key)]);
            let (a, b) = (a.db().expect("checked"), b.db().expect("checked"));
            if !a.exists(key) || b.exists(key) {
                false
            } else if copy_key(a, key, b, key)? {
                a.delete(key)?;
                true
            } else {
                false
            }
        }
    };
    if moved {
        // MOVE only moves onto an absent key: it always creates one.
        ctx.notify_db(NEW, "new", key, to);
        ctx.notify_db(GENERIC, "move_from", key, from);
        ctx.notify_db(GENERIC, "move_to", key, to);
        ctx.shared.blocking.signal(to, key);
    }
    ctx.int(moved as i64);
    Ok(())
}

fn swapdb(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let parse = |arg: &[u8], what: &'static str| -> Result<i64> {
        super::parse_i64(arg)
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or_else(|| Error::err(what))
    };
    let a = parse(&args[1], "invalid first DB index")?;
    let b = parse(&args[2], "invalid second DB index")?;
    let len = ctx.shared.keyspace.len() as i64;
    if !(0..len).contains(&a) || !(0..len).contains(&b) {
        return Err(Error::DbRange);
    }
    ctx.shared.keyspace.swap(a as usize, b as usize)?;
    // Clients blocked in either database may now find their keys; a key
    // watched while absent that now exists fails that EXEC (as Redis's
    // touchAllWatchedKeysInDb), even if a second swap takes it away again.
    for d in [a as usize, b as usize] {
        let slot = ctx.shared.keyspace.read(d);
        let db = slot.db();
        let exists = |k: &[u8]| db.is_some_and(|db| db.exists(k));
        ctx.shared.blocking.signal_db(d, exists);
        ctx.shared.absent_watches.created_where(d, exists);
    }
    ctx.ok();
    Ok(())
}

/// OBJECT ENCODING's answer: what Redis 7.0 would use for this key.
fn encoding(db: &Db, key: &[u8]) -> Result<Option<&'static str>> {
    let Some(meta) = db.meta(key) else {
        return Ok(None);
    };
    Ok(Some(match meta.kind {
        KeyKind::Value { .. } => {
            let Some(v) = db.get(key)? else {
                return Ok(None);
            };
            if v.len() <= 20 && super::parse_i64(&v).is_some() {
                "int"
            } else if v.len() <= 44 {
                "embstr"
            } else {
                "raw"
            }
        }
        KeyKind::Map { tag, len, .. } => match tag {
            TAG_HASH => super::hash::encoding(db, key, len)?,
            TAG_SET => super::set::encoding(db, key, len)?,
            TAG_ZSET if len <= 128 => "listpack",
            TAG_ZSET => "skiplist",
            TAG_LIST => "quicklist",
            TAG_STREAM => "stream",
            _ => "hashtable",
        },
    }))
}

fn object(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let sub = &args[1];
    if is(sub, "help") {
        sub_arity("object|help", 2, &args)?;
        let lines: &[&str] = &[
            "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "ENCODING <key>",
            "    Return the kind of internal representation used in order to store the value",
            "    associated with a <key>.",
            "FREQ <key>",
            "    Return the access logarithmic access frequency counter associated with a <key>.",
            "IDLETIME <key>",
            "    Return the idle time associated with a <key>.",
            "REFCOUNT <key>",
            "    Return the number of references of the value associated with the specified",
            "    <key>.",
            "HELP",
            "    Prints this help.",
        ];
        ctx.array(lines.len());
        for l in lines {
            ctx.simple(l.as_bytes());
        }
        return Ok(());
    }
    let full = if is(sub, "encoding") {
        "object|encoding"
    } else if is(sub, "freq") {
        "object|freq"
    } else if is(sub, "idletime") {
        "object|idletime"
    } else if is(sub, "refcount") {
        "object|refcount"
    } else {
        return Err(unknown_subcommand("object", sub));
    };
    sub_arity(full, 3, &args)?;
    let key = &args[2];
    let slot = ctx.slot();
    let found = slot.db().filter(|db| db.exists(key));
    ctx.looked_up_quietly(found.is_some());
    let Some(db) = found else {
        drop(slot);
        ctx.null();
        return Ok(());
    };
    match full {
        "object|encoding" => {
            let enc = encoding(db, key)?;
            drop(slot);
            match enc {
                Some(e) => ctx.bulk(e.as_bytes()),
                None => ctx.null(),
            }
        }
        "object|freq" => {
            return Err(Error::err(
                "An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
            ))
        }
        // Basalt does not track access times: every key reads as just used.
        "object|idletime" => {
            drop(slot);
            ctx.int(0)
        }
        _ => {
            // Redis shares the objects of small integers (refcount INT_MAX).
            let shared_int = matches!(
                db.get(key).ok().flatten().as_deref().and_then(super::parse_i64),
                Some(0..=9999)
            );
            drop(slot);
            ctx.int(if shared_int { i32::MAX as i64 } else { 1 })
        }
    }
    Ok(())
}
