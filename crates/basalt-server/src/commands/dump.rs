//! DUMP and RESTORE (Redis `cluster.c`): a key's value as a Redis 7.0
//! payload (`crate::rdb`), and a key made from one, so values move between
//! Basalt and redis-server in either direction.
//!
//! The one idea a reader needs: **RESTORE decodes the whole payload before
//! it touches the key.** A payload that fails its checksum or does not
//! decode changes nothing; one that decodes is written as any other
//! multi-record write (deletion of the old key, every field, the expiry) in
//! one crash-atomic batch under the key's stripe, through the same engine
//! calls the type's own commands use, so the in-memory indexes (sorted
//! sets, lists, streams) see a new version and rebuild themselves.
//!
//! Basalt keeps no access clock, so IDLETIME and FREQ are checked as Redis
//! checks them and then have no effect.

use basalt_engine::Db;
use basalt_resp::Args;

use super::flags::*;
use super::{def, int_arg, is, CommandDef, Ctx, Error, Group, Result};
use crate::keyspace::{RedisType, TAG_HASH, TAG_LIST, TAG_SET, TAG_ZSET};
use crate::notify::{GENERIC, NEW};
use crate::rdb::{self, Value};

const G: Group = Group::Generic;

/// DUMP and RESTORE.
#[rustfmt::skip]
pub const COMMANDS: &[CommandDef] = &[
    def("dump", 2, READONLY, (1, 1, 1), G, "2.6.0", "Return a serialized version of the value stored at the specified key.", dump),
    def("restore", -4, WRITE | DENYOOM, (1, 1, 1), G, "2.6.0", "Create a key using the provided serialized value, previously obtained using DUMP.", restore),
];

/// The value at `key`, if any. The caller holds the key's stripe, so a
/// collection is read whole at one version.
fn read_value(db: &Db, generation: u64, key: &[u8]) -> Result<Option<Value>> {
    let Some(meta) = db.meta(key) else {
        return Ok(None);
    };
    Ok(Some(match RedisType::of(&meta) {
        RedisType::String => match db.get(key)? {
            Some(v) => Value::String(v),
            None => return Ok(None),
        },
        RedisType::Hash => Value::Hash(db.fields(key)?),
        RedisType::Set => Value::Set(db.field_names(key)?),
        RedisType::ZSet => {
            let mut items = Vec::new();
            for (member, v) in db.fields(key)? {
                let score = super::zset::decode_score(key, &v)?;
                items.push((member, score));
            }
            Value::ZSet(items)
        }
        RedisType::List => {
            let mut items = Vec::new();
            for (f, v) in db.fields(key)? {
                let pos = super::list::field_pos(&f)
                    .ok_or_else(|| Error::err("list element with a damaged position"))?;
                items.push((pos, v));
            }
            items.sort_unstable_by_key(|(p, _)| *p);
            Value::List(items.into_iter().map(|(_, v)| v).collect())
        }
        RedisType::Stream => match super::stream::export(db, generation, key)? {
            Some(s) => Value::Stream(s),
            None => return Ok(None),
        },
        RedisType::Unknown => return Err(Error::WrongType),
    }))
}

/// Writes `value` under `key`, which does not exist (the caller deleted
/// it), with its expiry (ms since the epoch, in the future).
fn write_value(db: &Db, key: &[u8], value: &Value, expires_at: Option<u64>) -> Result {
    let map = |tag: u8, fields: &mut dyn Iterator<Item = (&[u8], &[u8])>| -> Result {
        for (f, v) in fields {
            db.put_field_tagged(key, tag, f, v)?;
        }
        Ok(())
    };
    match value {
        Value::String(v) => {
            db.put_with_expiry(key, v, expires_at)?;
            return Ok(());
        }
        Value::Hash(pairs) => map(TAG_HASH, &mut pairs.iter().map(|(f, v)| (&f[..], &v[..])))?,
        Value::Set(members) => map(TAG_SET, &mut members.iter().map(|m| (&m[..], &b""[..])))?,
        Value::ZSet(items) => {
            // -0 is kept as 0, as ZADD stores it (`zset::ZDb::set`).
            let scores: Vec<[u8; 8]> = items
                .iter()
                .map(|(_, s)| super::zset::encode_score(s + 0.0))
                .collect();
            map(
                TAG_ZSET,
                &mut items
                    .iter()
                    .zip(&scores)
                    .map(|((m, _), s)| (&m[..], &s[..])),
            )?
        }
        Value::List(items) => {
            for (i, v) in items.iter().enumerate() {
                db.put_field_tagged(key, TAG_LIST, &super::list::pos_field(i as i64), v)?;
            }
        }
        Value::Stream(s) => super::stream::import(db, key, s)?,
    }
    if let Some(at) = expires_at {
        db.expire(key, at)?;
    }
    Ok(())
}

fn dump(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let slot = ctx.slot();
    let value = match slot.db() {
        Some(db) => {
            let _g = ctx.lock(key);
            read_value(db, slot.generation(), key)?
        }
        None => None,
    };
    drop(slot);
    match value {
        Some(v) => {
            let payload = rdb::encode(&v);
            ctx.bulk(&payload);
        }
        None => {
            ctx.keymiss(key);
            ctx.null();
        }
    }
    Ok(())
}

/// RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f], with
/// Redis's order of checks: options, an existing key, the TTL, the payload.
fn restore(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let (mut replace, mut absttl) = (false, false);
    let (mut idle, mut freq): (Option<i64>, Option<i64>) = (None, None);
    let mut j = 4;
    while j < args.len() {
        let more = args.len() - j - 1;
        if is(&args[j], "replace") {
            replace = true;
        } else if is(&args[j], "absttl") {
            absttl = true;
        } else if is(&args[j], "idletime") && more >= 1 && freq.is_none() {
            let v = int_arg(&args[j + 1])?;
            if v < 0 {
                return Err(Error::err("Invalid IDLETIME value, must be >= 0"));
            }
            idle = Some(v);
            j += 1;
        } else if is(&args[j], "freq") && more >= 1 && idle.is_none() {
            let v = int_arg(&args[j + 1])?;
            if !(0..=255).contains(&v) {
                return Err(Error::err("Invalid FREQ value, must be >= 0 and <= 255"));
            }
            freq = Some(v);
            j += 1;
        } else {
            return Err(Error::Syntax);
        }
        j += 1;
    }
    let guard = ctx.db_w()?;
    let db = &*guard;
    let _g = ctx.lock(key);
    if !replace && db.exists(key) {
        return Err(Error::Msg("BUSYKEY Target key name already exists.".into()));
    }
    let ttl = int_arg(&args[2])?;
    if ttl < 0 {
        return Err(Error::err("Invalid TTL value, must be >= 0"));
    }
    let value = rdb::decode(&args[3]).map_err(|e| match e {
        rdb::Error::Footer => Error::err("DUMP payload version or checksum are wrong"),
        rdb::Error::Format(_) => Error::err("Bad data format"),
    })?;
    let expires_at = match ttl {
        0 => None,
        t if absttl => Some(t as u64),
        t => Some(ctx.now_ms.saturating_add(t as u64)),
    };
    let n = ctx.conn.db;
    if expires_at.is_some_and(|at| at <= ctx.now_ms) {
        // Already expired: the key is not created, and a replaced one is
        // deleted (Redis says `del`).
        if replace && db.delete(key)? {
            ctx.notify(GENERIC, "del", key);
            ctx.shared.blocking.signal(n, key);
        }
        ctx.ok();
        return Ok(());
    }
    if replace {
        db.delete(key)?;
    }
    write_value(db, key, &value, expires_at)?;
    drop(_g);
    drop(guard);
    // Redis adds the key anew (`new`), then says `restore`.
    ctx.notify(NEW, "new", key);
    ctx.notify(GENERIC, "restore", key);
    // A list, sorted set or stream arriving may serve a blocked client.
    ctx.shared.blocking.signal(n, key);
    ctx.ok();
    Ok(())
}
