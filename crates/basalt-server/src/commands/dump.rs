//! DUMP, RESTORE and MIGRATE (Redis `cluster.c`): a key's value as a
//! Redis 7.0 payload (`crate::rdb`), a key made from one, and keys moved to
//! another server (Basalt or redis-server) as RESTOREs, so values move
//! between Basalt and redis-server in either direction.
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

/// DUMP, RESTORE and MIGRATE.
#[rustfmt::skip]
pub const COMMANDS: &[CommandDef] = &[
    def("dump", 2, READONLY, (1, 1, 1), G, "2.6.0", "Return a serialized version of the value stored at the specified key.", dump),
    def("restore", -4, WRITE | DENYOOM, (1, 1, 1), G, "2.6.0", "Create a key using the provided serialized value, previously obtained using DUMP.", restore),
    def("migrate", -6, WRITE | MOVABLE_KEYS, (3, 3, 1), G, "2.6.0", "Atomically transfer a key from a Redis instance to another one.", migrate),
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
    ctx.looked_up(key, value.is_some());
    match value {
        Some(v) => {
            let payload = rdb::encode(&v);
            ctx.bulk(&payload);
        }
        None => ctx.null(),
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

/// MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE]
/// [AUTH password] [AUTH2 username password] [KEYS key [key ...]]: sends
/// each existing key to the target as `RESTORE key ttl payload [REPLACE]`
/// (after AUTH and SELECT), then deletes each key the target took, unless
/// COPY. Redis's replies: `+OK`, `+NOKEY` when no key exists, `-IOERR ...`
/// when the target cannot be reached or answers nothing, `-ERR Target
/// instance replied with error: ...` with the first error the target gave.
///
/// Like Redis, it talks to the target synchronously, within `timeout` ms
/// per step (1000 when not positive): this connection's worker waits, and
/// so does an EXEC or a script (which need the exec gate alone) anywhere,
/// as Redis's whole server does. Unlike Redis it holds no key while it waits:
/// the keys are read under their stripes, sent, and a key is deleted only
/// if no write changed it meanwhile (a write that came in between is kept,
/// and the target has the value from before it). Each call opens its own
/// connection (Redis keeps one per target for 10 s, which saves a round
/// trip, not an outcome). Not in a replicated group: every node would
/// send the keys.
fn migrate(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let argv: Vec<&[u8]> = args.iter().collect();
    let options = MigrateOptions::read(&argv);
    if options.bad {
        return Err(Error::Syntax);
    }
    let (first_key, num_keys) =
        match options.keys_at {
            Some(_) if !args[3].is_empty() => return Err(Error::err(
                "When using MIGRATE KEYS option, the key argument must be set to the empty string",
            )),
            Some(at) => (at + 1, args.len() - at - 1),
            None => (3, 1),
        };
    let (copy, replace) = (options.copy, options.replace);
    let auth = options
        .auth
        .map(|(user, pass)| (user.map(|u| argv[u]), argv[pass]));
    let timeout = int_arg(&args[5])?;
    let dbid = int_arg(&args[4])?;
    let timeout =
        std::time::Duration::from_millis(if timeout <= 0 { 1000 } else { timeout as u64 });
    if ctx.shared.repl.get().is_some() {
        return Err(Error::err(
            "MIGRATE is not supported in a replicated group (every node would send the keys)",
        ));
    }
    let keys: Vec<&[u8]> = (first_key..first_key + num_keys)
        .map(|i| &args[i][..])
        .collect();
    // Read what to send, each key at one version, with its TTL.
    struct Item<'k> {
        key: &'k [u8],
        version: u64,
        ttl: i64,
        payload: Vec<u8>,
    }
    let mut items: Vec<Item<'_>> = Vec::new();
    {
        let slot = ctx.slot();
        let n = ctx.conn.db;
        let _g = ctx.shared.keyspace.lock_many(keys.iter().map(|k| (n, *k)));
        for &key in &keys {
            let found = match slot.db() {
                Some(db) => match (db.meta(key), read_value(db, slot.generation(), key)?) {
                    (Some(meta), Some(v)) => Some((meta.expires_at, db.version(key), v)),
                    _ => None,
                },
                None => None,
            };
            let Some((expires_at, version, value)) = found else {
                ctx.keymiss(key);
                continue;
            };
            ctx.keyhit();
            let ttl = match expires_at {
                None => 0,
                Some(at) => {
                    let left = at as i64 - crate::state::now_ms() as i64;
                    if left < 0 {
                        continue;
                    }
                    left.max(1)
                }
            };
            items.push(Item {
                key,
                version,
                ttl,
                payload: rdb::encode(&value),
            });
        }
    }
    if items.is_empty() {
        ctx.simple(b"NOKEY");
        return Ok(());
    }
    // The request: AUTH, SELECT, one RESTORE per key.
    let mut wire = Vec::new();
    if let Some((user, pass)) = auth {
        match user {
            Some(u) => basalt_resp::write_command(&mut wire, [&b"AUTH"[..], u, pass]),
            None => basalt_resp::write_command(&mut wire, [&b"AUTH"[..], pass]),
        }
    }
    basalt_resp::write_command(&mut wire, [&b"SELECT"[..], dbid.to_string().as_bytes()]);
    for it in &items {
        let ttl = it.ttl.to_string();
        let mut cmd: Vec<&[u8]> = vec![b"RESTORE", it.key, ttl.as_bytes(), &it.payload];
        if replace {
            cmd.push(b"REPLACE");
        }
        basalt_resp::write_command(&mut wire, cmd);
    }
    let host = String::from_utf8_lossy(&args[1]).into_owned();
    let port = String::from_utf8_lossy(&args[2]).into_owned();
    let connecting = || Error::Msg("IOERR error or timeout connecting to the client".into());
    let io = |writing: bool| {
        Error::Msg(
            format!(
                "IOERR error or timeout {} to target instance",
                if writing { "writing" } else { "reading" }
            )
            .into(),
        )
    };
    use std::io::{BufRead, Write};
    use std::net::ToSocketAddrs;
    // The port as Redis reads it (`atoi`: leading digits, else 0).
    let port = port
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0u64, |n, d| {
            n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
        }) as u16;
    let addr = (host.as_str(), port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(connecting)?;
    // Redis connects without blocking and waits until the socket is
    // writable: a refused connection shows only when it writes.
    let stream = match std::net::TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Err(io(true)),
        Err(_) => return Err(connecting()),
    };
    let _ = stream.set_nodelay(true);
    stream
        .set_write_timeout(Some(timeout))
        .and_then(|_| stream.set_read_timeout(Some(timeout)))
        .map_err(|_| connecting())?;
    (&stream).write_all(&wire).map_err(|_| io(true))?;
    let mut reader = std::io::BufReader::new(&stream);
    // One status line per command, as Redis reads them (`syncReadLine`).
    let line = |reader: &mut std::io::BufReader<&std::net::TcpStream>| -> Option<Vec<u8>> {
        // At most 1 KiB, as Redis's `syncReadLine` (a longer line is cut;
        // its rest is read as the next reply).
        let mut l = Vec::new();
        match std::io::Read::take(&mut *reader, 1024).read_until(b'\n', &mut l) {
            Ok(n) if n > 0 && (l.ends_with(b"\n") || n == 1024) => {
                while l.last().is_some_and(|&b| b == b'\n' || b == b'\r') {
                    l.pop();
                }
                Some(l)
            }
            _ => None,
        }
    };
    let auth_reply = match auth {
        Some(_) => Some(line(&mut reader).ok_or_else(|| io(false))?),
        None => None,
    };
    let select_reply = line(&mut reader).ok_or_else(|| io(false))?;
    let before = auth_reply
        .filter(|r| r.first() == Some(&b'-'))
        .or_else(|| (select_reply.first() == Some(&b'-')).then_some(select_reply));
    let mut target_error: Option<Vec<u8>> = None;
    let mut taken = Vec::new();
    let mut socket_error = false;
    for it in &items {
        let Some(r) = line(&mut reader) else {
            socket_error = true;
            break;
        };
        if before.is_some() || r.first() == Some(&b'-') {
            if target_error.is_none() {
                target_error = Some(before.clone().unwrap_or(r));
            }
        } else if !copy {
            taken.push(it);
        }
    }
    drop(reader);
    drop(stream);
    // Delete what the target took, each key only at the version sent.
    if !taken.is_empty() {
        // Crash-atomic, as the one DEL Redis propagates; opened before the
        // database and the keys' stripes, as `execute` opens its batches.
        let _batch = (taken.len() > 1).then(|| ctx.shared.keyspace.batch());
        let slot = ctx.slot();
        let n = ctx.conn.db;
        if let Some(db) = slot.db() {
            let _g = ctx
                .shared
                .keyspace
                .lock_many(taken.iter().map(|it| (n, it.key)));
            for it in &taken {
                if db.version(it.key) == it.version && db.delete(it.key)? {
                    ctx.notify(GENERIC, "del", it.key);
                    ctx.shared.blocking.signal(n, it.key);
                }
            }
        }
    }
    if let Some(e) = target_error {
        return Err(Error::Msg(
            format!(
                "ERR Target instance replied with error: {}",
                String::from_utf8_lossy(&e[1..])
            )
            .into(),
        ));
    }
    if socket_error {
        return Err(io(false));
    }
    ctx.ok();
    Ok(())
}

/// MIGRATE's options (from argument 6 of `args`, `args[0]` the name) as
/// Redis reads them, for the command, its key finder (COMMAND GETKEYS) and
/// the redaction of its secrets (MONITOR, SLOWLOG).
#[derive(Debug, Default)]
pub(crate) struct MigrateOptions {
    pub copy: bool,
    pub replace: bool,
    /// The last AUTH or AUTH2: the positions of its user (AUTH2) and
    /// password.
    pub auth: Option<(Option<usize>, usize)>,
    /// The positions of every AUTH and AUTH2 value.
    pub secrets: Vec<usize>,
    /// Where KEYS is (the keys follow it); nothing after it is an option.
    pub keys_at: Option<usize>,
    /// An unknown option, or AUTH / AUTH2 short of its values: the command
    /// answers a syntax error (the key finder passes over an unknown one).
    pub bad: bool,
}

impl MigrateOptions {
    pub(crate) fn read(args: &[&[u8]]) -> MigrateOptions {
        let mut o = MigrateOptions::default();
        let mut i = 6;
        while i < args.len() {
            let more = args.len() - 1 - i;
            let a = args[i];
            if is(a, "copy") {
                o.copy = true;
            } else if is(a, "replace") {
                o.replace = true;
            } else if is(a, "auth") || is(a, "auth2") {
                let user = is(a, "auth2");
                if more < 1 + user as usize {
                    o.bad = true;
                    break;
                }
                o.auth = Some((user.then_some(i + 1), i + 1 + user as usize));
                o.secrets.extend((i + 1)..=(i + 1 + user as usize));
                i += 1 + user as usize;
            } else if is(a, "keys") {
                o.keys_at = Some(i);
                break;
            } else {
                o.bad = true;
            }
            i += 1;
        }
        o
    }
}
