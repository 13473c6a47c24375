//! String commands (Redis `t_string.c`): values stored as plain engine
//! values. Read-modify-write commands hold their key's stripe lock from the
//! read to the write, so INCR from many clients never loses an update.
//! Commands that modify a string in place in Redis (APPEND, SETRANGE, INCR*)
//! keep the key's TTL; commands that replace it (SET, GETSET) drop it unless
//! KEEPTTL.

use basalt_engine::{Db, Lookup};
use basalt_resp::{Args, Encoder};

use super::cnum::LongDouble;
use super::flags::*;
use super::{def, int_arg, is, parse_i64, CommandDef, Ctx, Error, Group, Result};
use crate::notify::{GENERIC, NEW, STRING};

/// The largest string SETRANGE / APPEND may build: `proto-max-bulk-len`
/// (512 MB unless configured otherwise).
fn max_string(ctx: &Ctx<'_>) -> u64 {
    ctx.shared.security.proto_max_bulk_len()
}

const G: Group = Group::String;

/// The string family's table.
pub const COMMANDS: &[CommandDef] = &[
    def("get", 2, READONLY | FAST, (1, 1, 1), G, "1.0.0", "Returns the string value of a key.", get),
    def("set", -3, WRITE | DENYOOM, (1, 1, 1), G, "1.0.0", "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.", set),
    def("setnx", 3, WRITE | DENYOOM | FAST, (1, 1, 1), G, "1.0.0", "Set the string value of a key only when the key doesn't exist.", setnx),
    def("setex", 4, WRITE | DENYOOM, (1, 1, 1), G, "2.0.0", "Sets the string value and expiration time of a key. Creates the key if it doesn't exist.", setex),
    def("psetex", 4, WRITE | DENYOOM, (1, 1, 1), G, "2.6.0", "Sets both string value and expiration time in milliseconds of a key. The key is created if it doesn't exist.", psetex),
    def("getset", 3, WRITE | DENYOOM | FAST, (1, 1, 1), G, "1.0.0", "Returns the previous string value of a key after setting it to a new value.", getset),
    def("getdel", 2, WRITE | FAST, (1, 1, 1), G, "6.2.0", "Returns the string value of a key after deleting the key.", getdel),
    def("getex", -2, WRITE | FAST, (1, 1, 1), G, "6.2.0", "Returns the string value of a key after setting its expiration time.", getex),
    def("mget", -2, READONLY | FAST, (1, -1, 1), G, "1.0.0", "Atomically returns the string values of one or more keys.", mget),
    def("mset", -3, WRITE | DENYOOM, (1, -1, 2), G, "1.0.1", "Atomically creates or modifies the string values of one or more keys.", mset),
    def("msetnx", -3, WRITE | DENYOOM, (1, -1, 2), G, "1.0.1", "Atomically modifies the string values of one or more keys only when all keys don't exist.", msetnx),
    def("append", 3, WRITE | DENYOOM | FAST, (1, 1, 1), G, "2.0.0", "Appends a string to the value of a key. Creates the key if it doesn't exist.", append),
    def("strlen", 2, READONLY | FAST, (1, 1, 1), G, "2.2.0", "Returns the length of a string value.", strlen),
    def("getrange", 4, READONLY, (1, 1, 1), G, "2.4.0", "Returns a substring of the string stored at a key.", getrange),
    def("substr", 4, READONLY, (1, 1, 1), G, "1.0.0", "Returns a substring from a string value.", getrange),
    def("lcs", -3, READONLY, (1, 2, 1), G, "7.0.0", "Finds the longest common substring.", lcs),
    def("setrange", 4, WRITE | DENYOOM, (1, 1, 1), G, "2.2.0", "Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist.", setrange),
    def("incr", 2, WRITE | DENYOOM | FAST, (1, 1, 1), G, "1.0.0", "Increments the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.", incr),
    def("decr", 2, WRITE | DENYOOM | FAST, (1, 1, 1), G, "1.0.0", "Decrements the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.", decr),
    def("incrby", 3, WRITE | DENYOOM | FAST, (1, 1, 1), G, "1.0.0", "Increments the integer value of a key by a number. Uses 0 as initial value if the key doesn't exist.", incrby),
    def("decrby", 3, WRITE | DENYOOM | FAST, (1, 1, 1), G, "1.0.0", "Decrements a number from the integer value of a key. Uses 0 as initial value if the key doesn't exist.", decrby),
    def("incrbyfloat", 3, WRITE | DENYOOM | FAST, (1, 1, 1), G, "2.6.0", "Increment the floating point value of a key by a number. Uses 0 as initial value if the key doesn't exist.", incrbyfloat),
];

/// A string value, `None` if absent, WRONGTYPE if the key holds a map.
pub fn read_string(db: Option<&Db>, key: &[u8]) -> Result<Option<Vec<u8>>> {
    match db {
        Some(db) => Ok(db.get(key)?),
        None => Ok(None),
    }
}

/// A string with its expiry (for commands that keep the TTL).
fn read_with_ttl(db: &Db, key: &[u8]) -> Result<Option<(Vec<u8>, Option<u64>)>> {
    Ok(db.get_versioned(key)?.map(|v| (v.value, v.expires_at)))
}

fn get(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let slot = ctx.slot();
    let found = match slot.db() {
        Some(db) => reply_value(ctx, db, &args[1])?,
        None => false,
    };
    ctx.looked_up(&args[1], found);
    if !found {
        ctx.null();
    }
    Ok(())
}

/// Writes the value of `key` as a bulk reply and says whether it exists
/// (nothing is written when it does not). The value goes from the
/// engine's mapped file straight into the reply; one that is not in
/// memory is read by a reader thread instead (crate::readers), its reply
/// left to come, or here when this command may not wait for one.
fn reply_value(ctx: &mut Ctx<'_>, db: &Db, key: &[u8]) -> Result<bool> {
    let protocol = ctx.conn.protocol;
    let mut enc = Encoder::new(ctx.out, protocol);
    Ok(match db.get_or_cold(key, |v| enc.bulk(v))? {
        Lookup::Absent => false,
        Lookup::Here(()) => true,
        Lookup::Cold(read) => {
            ctx.cold_bulk(read)?;
            true
        }
        Lookup::ColdValue(value) => {
            ctx.cold_value(value)?;
            true
        }
    })
}

/// Which expiry option a SET / GETEX carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Ex,
    Px,
    ExAt,
    PxAt,
}

#[derive(Debug, Default)]
struct SetOpts<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    expire: Option<(Unit, &'a [u8])>,
}

/// Redis's `parseExtendedStringArgumentsOrReply`: the same acceptance rules
/// (a repeated option is allowed, conflicting ones are a syntax error).
fn parse_opts<'a>(args: &Args<'a>, from: usize, for_set: bool) -> Result<SetOpts<'a>> {
    let mut o = SetOpts::default();
    let mut j = from;
    while j < args.len() {
        let a = args.get(j).expect("in range");
        let next = args.get(j + 1);
        let has_exp = o.expire.is_some();
        let exp_is = |u: Unit| o.expire.map(|(x, _)| x) == Some(u);
        let only_exp = |u: Unit| !o.keepttl && !o.persist && (!has_exp || exp_is(u));
        if for_set && is(a, "nx") && !o.xx {
            o.nx = true;
        } else if for_set && is(a, "xx") && !o.nx {
            o.xx = true;
        } else if for_set && is(a, "get") {
            o.get = true;
        } else if for_set && is(a, "keepttl") && !o.persist && !has_exp {
            o.keepttl = true;
        } else if !for_set && is(a, "persist") && !has_exp && !o.keepttl {
            o.persist = true;
        } else if let (Some(unit), Some(n)) = (unit_of(a), next) {
            if !only_exp(unit) {
                return Err(Error::Syntax);
            }
            o.expire = Some((unit, n));
            j += 1;
        } else {
            return Err(Error::Syntax);
        }
        j += 1;
    }
    Ok(o)
}

fn unit_of(a: &[u8]) -> Option<Unit> {
    if is(a, "ex") {
        Some(Unit::Ex)
    } else if is(a, "px") {
        Some(Unit::Px)
    } else if is(a, "exat") {
        Some(Unit::ExAt)
    } else if is(a, "pxat") {
        Some(Unit::PxAt)
    } else {
        None
    }
}

/// `invalid expire time in '<cmd>' command`
pub fn invalid_expire(cmd: &str) -> Error {
    Error::Msg(format!("ERR invalid expire time in '{cmd}' command").into())
}

/// Redis's `getExpireMillisecondsOrReply`: the absolute expiry in ms.
fn expire_ms(ctx: &Ctx<'_>, unit: Unit, arg: &[u8]) -> Result<u64> {
    let v = int_arg(arg)?;
    let seconds = matches!(unit, Unit::Ex | Unit::ExAt);
    if v <= 0 || (seconds && v > i64::MAX / 1000) {
        return Err(invalid_expire(ctx.cmd.name));
    }
    let mut ms = if seconds { v * 1000 } else { v };
    if matches!(unit, Unit::Ex | Unit::Px) {
        ms = ms
            .checked_add(ctx.now_ms as i64)
            .ok_or_else(|| invalid_expire(ctx.cmd.name))?;
    }
    Ok(ms as u64)
}

/// The shared body of SET, SETNX, SETEX and PSETEX.
fn set_generic(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    value: &[u8],
    o: &SetOpts<'_>,
    abort: Option<i64>,
    ok: Option<i64>,
) -> Result {
    let at = match o.expire {
        Some((unit, arg)) => Some(expire_ms(ctx, unit, arg)?),
        None => None,
    };
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let old = if o.get { Some(db.get(key)?) } else { None };
    if let Some(old) = &old {
        ctx.looked_up(key, old.is_some());
    }
    // Only NX and XX need to know whether the key exists: a plain SET
    // skips the extra index probe.
    let found = match &old {
        Some(v) => v.is_some(),
        None if o.nx || o.xx => db.exists(key),
        None => false,
    };
    if (o.nx && found) || (o.xx && !found) {
        match (&old, abort) {
            (Some(v), _) => ctx.opt_bulk(v.as_deref()),
            (None, Some(n)) => ctx.int(n),
            (None, None) => ctx.null(),
        }
        return Ok(());
    }
    let at = if o.keepttl { db.expires_at(key) } else { at };
    let created = match &old {
        Some(v) => v.is_none() && ctx.wants_new(),
        None if o.nx || o.xx => !found && ctx.wants_new(),
        None => ctx.absent_for_new(&db, key),
    };
    db.put_with_expiry(key, value, at)?;
    if created {
        ctx.notify(NEW, "new", key);
    }
    ctx.notify(STRING, "set", key);
    if o.expire.is_some() {
        ctx.notify(GENERIC, "expire", key);
    }
    match (&old, ok) {
        (Some(v), _) => ctx.opt_bulk(v.as_deref()),
        (None, Some(n)) => ctx.int(n),
        (None, None) => ctx.ok(),
    }
    Ok(())
}

fn set(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let o = parse_opts(&args, 3, true)?;
    set_generic(ctx, &args[1], &args[2], &o, None, None)
}

fn setnx(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let o = SetOpts {
        nx: true,
        ..SetOpts::default()
    };
    set_generic(ctx, &args[1], &args[2], &o, Some(0), Some(1))
}

fn setex(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let o = SetOpts {
        expire: Some((Unit::Ex, &args[2])),
        ..SetOpts::default()
    };
    set_generic(ctx, &args[1], &args[3], &o, None, None)
}

fn psetex(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let o = SetOpts {
        expire: Some((Unit::Px, &args[2])),
        ..SetOpts::default()
    };
    set_generic(ctx, &args[1], &args[3], &o, None, None)
}

fn getset(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let old = db.get(key)?;
    ctx.looked_up(key, old.is_some());
    db.put(key, &args[2])?;
    if old.is_none() {
        ctx.notify(NEW, "new", key);
    }
    ctx.notify(STRING, "set", key);
    ctx.opt_bulk(old.as_deref());
    Ok(())
}

fn getdel(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let slot = ctx.slot();
    let Some(db) = slot.db() else {
        ctx.keymiss(key);
        ctx.null();
        return Ok(());
    };
    let _g = ctx.lock(key);
    let old = db.get(key)?;
    ctx.looked_up(key, old.is_some());
    if old.is_some() && db.delete(key)? {
        ctx.notify(GENERIC, "del", key);
    }
    ctx.opt_bulk(old.as_deref());
    Ok(())
}

fn getex(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let o = parse_opts(&args, 2, false)?;
    let slot = ctx.slot();
    let Some(db) = slot.db() else {
        ctx.keymiss(key);
        ctx.null();
        return Ok(());
    };
    let _g = ctx.lock(key);
    let Some(v) = db.get(key)? else {
        ctx.keymiss(key);
        ctx.null();
        return Ok(());
    };
    ctx.keyhit();
    // As Redis: the time is checked only once the key is found to be a
    // string (a missing key answers nil whatever the time says).
    let at = match o.expire {
        Some((unit, arg)) => Some(expire_ms(ctx, unit, arg)?),
        None => None,
    };
    if let Some(at) = at {
        // A time already past deletes the key (engine: expire <= now).
        db.expire(key, at)?;
        if at <= ctx.now_ms {
            ctx.notify(GENERIC, "del", key);
        } else {
            ctx.notify(GENERIC, "expire", key);
        }
    } else if o.persist && db.persist(key)? {
        ctx.notify(GENERIC, "persist", key);
    }
    ctx.bulk(&v);
    Ok(())
}

fn mget(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let slot = ctx.slot();
    let db = slot.db();
    ctx.array(args.len() - 1);
    for key in args.iter().skip(1) {
        // Each value as GET writes it (a cold one may come from a reader
        // thread, in its place in the array). Keys of other types read as
        // nil, as in Redis (and are found); a value that cannot be read
        // (a disk error, a damaged record) is an error in its place.
        match db.map(|db| reply_value(ctx, db, key)) {
            Some(Ok(true)) => ctx.keyhit(),
            Some(Err(Error::WrongType)) => {
                ctx.keyhit();
                ctx.null();
            }
            Some(Err(e)) => {
                let line = e.message().into_owned();
                ctx.error_line(&line);
            }
            Some(Ok(false)) | None => {
                ctx.keymiss(key);
                ctx.null();
            }
        }
    }
    Ok(())
}

fn pairs_arity(ctx: &Ctx<'_>, args: &Args<'_>) -> Result {
    if args.len().is_multiple_of(2) {
        return Err(Error::Arity(ctx.cmd.name.into()));
    }
    Ok(())
}

fn mset(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    pairs_arity(ctx, &args)?;
    let n = ctx.conn.db;
    let db = ctx.db_w()?;
    let _g = ctx
        .shared
        .keyspace
        .lock_many(args.iter().skip(1).step_by(2).map(|k| (n, k)));
    for j in (1..args.len()).step_by(2) {
        let created = ctx.absent_for_new(&db, &args[j]);
        db.put(&args[j], &args[j + 1])?;
        if created {
            ctx.notify(NEW, "new", &args[j]);
        }
        ctx.notify(STRING, "set", &args[j]);
    }
    ctx.ok();
    Ok(())
}

fn msetnx(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    pairs_arity(ctx, &args)?;
    let n = ctx.conn.db;
    let db = ctx.db_w()?;
    let _g = ctx
        .shared
        .keyspace
        .lock_many(args.iter().skip(1).step_by(2).map(|k| (n, k)));
    if args.iter().skip(1).step_by(2).any(|k| db.exists(k)) {
        ctx.int(0);
        return Ok(());
    }
    for j in (1..args.len()).step_by(2) {
        let created = ctx.absent_for_new(&db, &args[j]);
        db.put(&args[j], &args[j + 1])?;
        if created {
            ctx.notify(NEW, "new", &args[j]);
        }
        ctx.notify(STRING, "set", &args[j]);
    }
    ctx.int(1);
    Ok(())
}

fn too_big() -> Error {
    Error::err("string exceeds maximum allowed size (proto-max-bulk-len)")
}

fn append(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let piece = &args[2];
    let limit = max_string(ctx);
    // A ranged write at the end: a long value gets one or two segments
    // appended, not rewritten (`basalt_engine::SEGMENT_ABOVE`).
    let (created, len) = ctx.ranged_write(key, |db| {
        let old_len = db.value_len(key)?;
        if old_len.unwrap_or(0) + piece.len() as u64 > limit {
            return Err(too_big());
        }
        let len = if piece.is_empty() {
            // Still a write, as in Redis (it creates an empty string and
            // counts as a modification for WATCH): one record.
            let (v, at) = read_with_ttl(db, key)?.unwrap_or_default();
            db.put_with_expiry(key, &v, at)?;
            Some(v.len() as u64)
        } else {
            db.try_write_range(key, old_len.unwrap_or(0), piece)?
        };
        Ok(len.map(|len| (old_len.is_none(), len)))
    })?;
    if created {
        ctx.notify(NEW, "new", key);
    }
    ctx.notify(STRING, "append", key);
    ctx.int(len as i64);
    Ok(())
}

fn strlen(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    // The index's stored length counts the record's encoding, not the
    // value, so the value is read (one disk read, like GET; one segment of
    // a segmented value).
    let len = match ctx.slot().db() {
        Some(db) => db.value_len(&args[1])?,
        None => None,
    };
    ctx.looked_up(&args[1], len.is_some());
    ctx.int(len.unwrap_or(0) as i64);
    Ok(())
}

fn getrange(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let mut start = int_arg(&args[2])?;
    let mut end = int_arg(&args[3])?;
    let slot = ctx.slot();
    let Some(db) = slot.db() else {
        drop(slot);
        ctx.keymiss(&args[1]);
        ctx.bulk(b"");
        return Ok(());
    };
    // Only the bytes asked for are read (the segments holding them, for a
    // segmented value); a range from the end needs the length first.
    let (v, base, len) = if start >= 0 && end >= start {
        let n = usize::try_from((end - start).saturating_add(1)).unwrap_or(usize::MAX);
        match db.read_range(&args[1], start as u64, n)? {
            Some((v, len)) => (v, start, len as i64),
            None => (Vec::new(), 0, -1),
        }
    } else {
        match db.get(&args[1])? {
            Some(v) => {
                let len = v.len() as i64;
                (v, 0, len)
            }
            None => (Vec::new(), 0, -1),
        }
    };
    drop(slot);
    ctx.looked_up(&args[1], len >= 0);
    let len = len.max(0);
    if start < 0 && end < 0 && start > end {
        ctx.bulk(b"");
        return Ok(());
    }
    if start < 0 {
        start = len.saturating_add(start);
    }
    if end < 0 {
        end = len.saturating_add(end);
    }
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end || len == 0 {
        ctx.bulk(b"");
    } else {
        // `v` holds bytes `base..` of the value.
        let (from, to) = ((start - base) as usize, (end - base) as usize);
        ctx.bulk(&v[from.min(v.len())..(to + 1).min(v.len())]);
    }
    Ok(())
}

/// `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]`: the longest
/// common subsequence of two strings (a missing key is the empty string),
/// by the classic dynamic program over the prefixes, walked back from the
/// ends as Redis walks it, so ties resolve the same way: the subsequence
/// itself, its length (LEN), or the matching ranges (IDX) from the last
/// to the first, those shorter than MINMATCHLEN left out.
fn lcs(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let read = |ctx: &Ctx<'_>, key: &[u8]| match read_string(ctx.slot().db(), key) {
        Err(Error::WrongType) => Err(Error::err("The specified keys must contain string values")),
        other => other,
    };
    // Both keys are looked up before either's type is checked (Redis).
    let (a, b) = (read(ctx, &args[1]), read(ctx, &args[2]));
    for (key, v) in [(&args[1], &a), (&args[2], &b)] {
        ctx.looked_up(key, !matches!(v, Ok(None)));
    }
    let (a, b) = (a?, b?);
    let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());
    let (mut len_only, mut idx, mut with_len, mut min_len) = (false, false, false, 0i64);
    let mut i = 3;
    while i < args.len() {
        let o = &args[i];
        if is(o, "idx") {
            idx = true;
        } else if is(o, "len") {
            len_only = true;
        } else if is(o, "withmatchlen") {
            with_len = true;
        } else if is(o, "minmatchlen") && i + 1 < args.len() {
            min_len = int_arg(&args[i + 1])?.max(0);
            i += 1;
        } else {
            return Err(Error::Syntax);
        }
        i += 1;
    }
    if idx && len_only {
        return Err(Error::err(
            "If you want both the length and indexes, please just use IDX.",
        ));
    }
    // The table of LCS lengths of every pair of prefixes, as u32 (Redis's
    // bound on its transient memory is the same).
    let (n, m) = (a.len(), b.len());
    let cells = (n as u128 + 1) * (m as u128 + 1);
    if cells * 4 > ctx.shared.security.proto_max_bulk_len() as u128 {
        return Err(Error::err(
            "Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        ));
    }
    let w = m + 1;
    let mut dp = vec![0u32; (n + 1) * w];
    for i in 1..=n {
        for j in 1..=m {
            dp[i * w + j] = if a[i - 1] == b[j - 1] {
                dp[(i - 1) * w + j - 1] + 1
            } else {
                dp[(i - 1) * w + j].max(dp[i * w + j - 1])
            };
        }
    }
    let total = dp[n * w + m] as usize;
    if len_only {
        ctx.int(total as i64);
        return Ok(());
    }
    // Walk back from the ends: a match takes both bytes; otherwise go
    // toward the larger of the two sub-problems (j on a tie). Contiguous
    // matches form a range, closed by a step that is not a match or by
    // reaching the start of either string.
    let mut out = vec![0u8; total];
    let mut k = total;
    let mut ranges: Vec<[usize; 4]> = Vec::new();
    let mut open: Option<[usize; 4]> = None; // a_start, a_end, b_start, b_end
    let (mut i, mut j) = (n, m);
    while i > 0 && j > 0 {
        let mut close = false;
        if a[i - 1] == b[j - 1] {
            out[k - 1] = a[i - 1];
            k -= 1;
            match &mut open {
                None => open = Some([i - 1, i - 1, j - 1, j - 1]),
                Some(r) => {
                    r[0] -= 1;
                    r[2] -= 1;
                }
            }
            if i == 1 || j == 1 {
                close = true;
            }
            i -= 1;
            j -= 1;
        } else {
            if dp[(i - 1) * w + j] > dp[i * w + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            close = open.is_some();
        }
        if close {
            let r = open.take().expect("an open range");
            if min_len == 0 || (r[1] - r[0] + 1) as i64 >= min_len {
                ranges.push(r);
            }
        }
    }
    if !idx {
        ctx.bulk(&out);
        return Ok(());
    }
    let mut e = ctx.enc();
    e.map(2);
    e.bulk(b"matches");
    e.array(ranges.len());
    for r in &ranges {
        e.array(2 + with_len as usize);
        e.array(2);
        e.integer(r[0] as i64);
        e.integer(r[1] as i64);
        e.array(2);
        e.integer(r[2] as i64);
        e.integer(r[3] as i64);
        if with_len {
            e.integer((r[1] - r[0] + 1) as i64);
        }
    }
    e.bulk(b"len");
    e.integer(total as i64);
    Ok(())
}

fn setrange(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let offset = int_arg(&args[2])?;
    if offset < 0 {
        return Err(Error::err("offset is out of range"));
    }
    let piece = &args[3];
    if piece.is_empty() {
        // Changes nothing and creates nothing, as in Redis.
        let len = match ctx.slot().db() {
            Some(db) => db.value_len(key)?,
            None => None,
        };
        ctx.int(len.unwrap_or(0) as i64);
        return Ok(());
    }
    let limit = max_string(ctx);
    // A ranged write: a long value has only the segments it covers
    // rewritten (`basalt_engine::Db::write_range`). The type is checked
    // before the length, as Redis does.
    let (old_len, len) = ctx.ranged_write(key, |db| {
        let old_len = db.value_len(key)?;
        if offset as u64 + piece.len() as u64 > limit {
            return Err(too_big());
        }
        Ok(db
            .try_write_range(key, offset as u64, piece)?
            .map(|len| (old_len, len)))
    })?;
    if old_len.is_none() {
        ctx.notify(NEW, "new", key);
    }
    ctx.notify(STRING, "setrange", key);
    ctx.int(len as i64);
    Ok(())
}

fn incr_by(ctx: &mut Ctx<'_>, key: &[u8], incr: i64) -> Result {
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let (old, at, created) = match read_with_ttl(&db, key)? {
        Some((v, at)) => (parse_i64(&v).ok_or(Error::NotInteger)?, at, false),
        None => (0, None, true),
    };
    let new = old
        .checked_add(incr)
        .ok_or_else(|| Error::err("increment or decrement would overflow"))?;
    let mut buf = Vec::with_capacity(20);
    use std::io::Write as _;
    let _ = write!(buf, "{new}");
    db.put_with_expiry(key, &buf, at)?;
    if created {
        ctx.notify(NEW, "new", key);
    }
    ctx.notify(STRING, "incrby", key);
    ctx.int(new);
    Ok(())
}

fn incr(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    incr_by(ctx, &args[1], 1)
}

fn decr(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    incr_by(ctx, &args[1], -1)
}

fn incrby(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let n = int_arg(&args[2])?;
    incr_by(ctx, &args[1], n)
}

fn decrby(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let n = int_arg(&args[2])?;
    if n == i64::MIN {
        return Err(Error::err("decrement would overflow"));
    }
    incr_by(ctx, &args[1], -n)
}

fn incrbyfloat(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let (old, at, created) = match read_with_ttl(&db, key)? {
        Some((v, at)) => (LongDouble::parse(&v).ok_or(Error::NotFloat)?, at, false),
        None => (LongDouble::zero(), None, true),
    };
    let incr = LongDouble::parse(&args[2]).ok_or(Error::NotFloat)?;
    // In 80 bits and printed `%.17Lf` as Redis does (0.1 + 0.2 = "0.3").
    let new = old.plus(incr);
    if !new.is_finite() {
        return Err(Error::err("increment would produce NaN or Infinity"));
    }
    let text = new.to_human();
    db.put_with_expiry(key, text.as_bytes(), at)?;
    if created {
        ctx.notify(NEW, "new", key);
    }
    ctx.notify(STRING, "incrbyfloat", key);
    ctx.bulk(text.as_bytes());
    Ok(())
}
