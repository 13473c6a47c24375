//! Expiry commands (Redis `expire.c`): EXPIRE PEXPIRE EXPIREAT PEXPIREAT
//! (NX XX GT LT), TTL PTTL EXPIRETIME PEXPIRETIME PERSIST.
//!
//! Every deadline is computed from the command's start time (`ctx.now_ms`),
//! so a write is a function of its arguments and that time.

use basalt_resp::Args;

use super::flags::*;
use super::strings::invalid_expire;
use super::{def, int_arg, is, CommandDef, Ctx, Error, Group, Result};
use crate::notify::GENERIC;

const G: Group = Group::Generic;

/// The expiry family's table.
pub const COMMANDS: &[CommandDef] = &[
    def(
        "expire",
        -3,
        WRITE | FAST,
        (1, 1, 1),
        G,
        "1.0.0",
        "Sets the expiration time of a key in seconds.",
        expire,
    ),
    def(
        "pexpire",
        -3,
        WRITE | FAST,
        (1, 1, 1),
        G,
        "2.6.0",
        "Sets the expiration time of a key in milliseconds.",
        pexpire,
    ),
    def(
        "expireat",
        -3,
        WRITE | FAST,
        (1, 1, 1),
        G,
        "1.2.0",
        "Sets the expiration time of a key to a Unix timestamp.",
        expireat,
    ),
    def(
        "pexpireat",
        -3,
        WRITE | FAST,
        (1, 1, 1),
        G,
        "2.6.0",
        "Sets the expiration time of a key to a Unix milliseconds timestamp.",
        pexpireat,
    ),
    def(
        "ttl",
        2,
        READONLY | FAST,
        (1, 1, 1),
        G,
        "1.0.0",
        "Returns the expiration time in seconds of a key.",
        ttl,
    ),
    def(
        "pttl",
        2,
        READONLY | FAST,
        (1, 1, 1),
        G,
        "2.6.0",
        "Returns the expiration time in milliseconds of a key.",
        pttl,
    ),
    def(
        "expiretime",
        2,
        READONLY | FAST,
        (1, 1, 1),
        G,
        "7.0.0",
        "Returns the expiration time of a key as a Unix timestamp.",
        expiretime,
    ),
    def(
        "pexpiretime",
        2,
        READONLY | FAST,
        (1, 1, 1),
        G,
        "7.0.0",
        "Returns the expiration time of a key as a Unix milliseconds timestamp.",
        pexpiretime,
    ),
    def(
        "persist",
        2,
        WRITE | FAST,
        (1, 1, 1),
        G,
        "2.2.0",
        "Removes the expiration time of a key.",
        persist,
    ),
];

#[derive(Default)]
struct Cond {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

fn expire_generic(ctx: &mut Ctx<'_>, args: Args<'_>, seconds: bool, absolute: bool) -> Result {
    let key = &args[1];
    let mut c = Cond::default();
    for a in args.iter().skip(3) {
        if is(a, "nx") {
            c.nx = true;
        } else if is(a, "xx") {
            c.xx = true;
        } else if is(a, "gt") {
            c.gt = true;
        } else if is(a, "lt") {
            c.lt = true;
        } else {
            return Err(Error::err(format!(
                "Unsupported option {}",
                String::from_utf8_lossy(a)
            )));
        }
    }
    if c.nx && (c.xx || c.gt || c.lt) {
        return Err(Error::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if c.gt && c.lt {
        return Err(Error::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    let mut when = int_arg(&args[2])?;
    if seconds {
        if !(i64::MIN / 1000..=i64::MAX / 1000).contains(&when) {
            return Err(invalid_expire(ctx.cmd.name));
        }
        when *= 1000;
    }
    let base = if absolute { 0 } else { ctx.now_ms as i64 };
    if when > i64::MAX - base {
        return Err(invalid_expire(ctx.cmd.name));
    }
    when += base;
    let slot = ctx.slot();
    let Some(db) = slot.db() else {
        drop(slot);
        ctx.int(0);
        return Ok(());
    };
    let _g = ctx.lock(key);
    let Some(meta) = db.meta(key) else {
        drop(slot);
        ctx.int(0);
        return Ok(());
    };
    let current = meta.expires_at.map(|t| t as i64);
    let refused = (c.nx && current.is_some())
        || (c.xx && current.is_none())
        || (c.gt && current.is_none_or(|cur| when <= cur))
        || (c.lt && current.is_some_and(|cur| when >= cur));
    if refused {
        drop(slot);
        ctx.int(0);
        return Ok(());
    }
    if when <= ctx.now_ms as i64 {
        db.delete(key)?;
        ctx.notify(GENERIC, "del", key);
    } else {
        db.expire(key, when as u64)?;
        ctx.notify(GENERIC, "expire", key);
    }
    drop(slot);
    ctx.int(1);
    Ok(())
}

fn expire(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    expire_generic(ctx, args, true, false)
}

fn pexpire(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    expire_generic(ctx, args, false, false)
}

fn expireat(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    expire_generic(ctx, args, true, true)
}

fn pexpireat(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    expire_generic(ctx, args, false, true)
}

/// -2 if the key does not exist, -1 if it has no expiry, else the expiry.
fn ttl_generic(ctx: &mut Ctx<'_>, key: &[u8], ms: bool, absolute: bool) -> Result {
    let meta = ctx.slot().db().and_then(|db| db.meta(key));
    ctx.looked_up(key, meta.is_some());
    let reply = match meta {
        None => -2,
        Some(m) => match m.expires_at {
            None => -1,
            Some(at) => {
                let at = at as i64;
                match (absolute, ms) {
                    (true, true) => at,
                    // Rounded to the nearest second without overflowing
                    // near i64::MAX (Redis answers the true quotient).
                    (true, false) => ((at as i128 + 500) / 1000) as i64,
                    (false, true) => (at - ctx.now_ms as i64).max(0),
                    (false, false) => {
                        (((at - ctx.now_ms as i64).max(0) as i128 + 500) / 1000) as i64
                    }
                }
            }
        },
    };
    ctx.int(reply);
    Ok(())
}

fn ttl(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    ttl_generic(ctx, &args[1], false, false)
}

fn pttl(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    ttl_generic(ctx, &args[1], true, false)
}

fn expiretime(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    ttl_generic(ctx, &args[1], false, true)
}

fn pexpiretime(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    ttl_generic(ctx, &args[1], true, true)
}

fn persist(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let slot = ctx.slot();
    let done = match slot.db() {
        Some(db) => {
            let _g = ctx.lock(key);
            let done = db.persist(key)?;
            if done {
                ctx.notify(GENERIC, "persist", key);
            }
            done
        }
        None => false,
    };
    drop(slot);
    ctx.int(done as i64);
    Ok(())
}
