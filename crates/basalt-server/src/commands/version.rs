//! Per-key versions, a Basalt extension: VERSION reads the engine version
//! of a key (the sequence number of its last write, 0 when absent), CAS
//! writes a string only if the key's version is still the one the client
//! read. Versions come from one counter shared by every database, so they
//! only grow: a key deleted and re-created, flushed or swapped in from
//! another database never shows an old number again.

use crate::notify::{GENERIC, NEW, STRING};
use basalt_resp::Args;

use super::flags::*;
use super::strings::invalid_expire;
use super::{def, int_arg, is, CommandDef, Ctx, Error, Group, Result};

/// The version family's table.
pub const COMMANDS: &[CommandDef] = &[
    def(
        "version",
        2,
        READONLY | FAST,
        (1, 1, 1),
        Group::Generic,
        "basalt",
        "Returns the version of a key (0 if it does not exist).",
        version,
    ),
    def(
        "cas",
        -4,
        WRITE | DENYOOM,
        (1, 1, 1),
        Group::String,
        "basalt",
        "Sets the string value of a key only if its version matches.",
        cas,
    ),
];

fn version(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let v = ctx.slot().db().map_or(0, |db| db.version(&args[1]));
    ctx.int(v as i64);
    Ok(())
}

/// CAS key version value [EX seconds | PX milliseconds]
fn cas(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let (key, value) = (&args[1], &args[3]);
    let expected = int_arg(&args[2])?;
    if expected < 0 {
        return Err(Error::NotInteger);
    }
    // SET's option rules: the same option may repeat, EX with PX is a
    // syntax error, a missing number is a syntax error.
    let mut expire: Option<(bool, &[u8])> = None;
    let mut j = 4;
    while j < args.len() {
        let a = &args[j];
        let seconds = if is(a, "ex") {
            true
        } else if is(a, "px") {
            false
        } else {
            return Err(Error::Syntax);
        };
        let Some(n) = args.get(j + 1) else {
            return Err(Error::Syntax);
        };
        if expire.is_some_and(|(s, _)| s != seconds) {
            return Err(Error::Syntax);
        }
        expire = Some((seconds, n));
        j += 2;
    }
    let at = match expire {
        None => None,
        Some((seconds, n)) => {
            let v = int_arg(n)?;
            if v <= 0 || (seconds && v > i64::MAX / 1000) {
                return Err(invalid_expire("cas"));
            }
            let ms = if seconds { v * 1000 } else { v };
            let at = ms
                .checked_add(ctx.now_ms as i64)
                .ok_or_else(|| invalid_expire("cas"))?;
            Some(at as u64)
        }
    };
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let current = db.version(key);
    if current != expected as u64 {
        return Err(Error::Msg(format!("VERSIONMISMATCH {current}").into()));
    }
    let new = db.put_with_expiry(key, value, at)?;
    // The events of a SET with the same options.
    if current == 0 {
        ctx.notify(NEW, "new", key);
    }
    ctx.notify(STRING, "set", key);
    if expire.is_some() {
        ctx.notify(GENERIC, "expire", key);
    }
    ctx.int(new as i64);
    Ok(())
}
