//! Transaction commands: MULTI EXEC DISCARD WATCH UNWATCH. The queue, the
//! watched versions and the exec gate live in `crate::tx`; these handlers
//! are what runs outside the queue (EXEC inside MULTI is run by
//! `tx::run`, which needs the connection's hold on the gate).

use basalt_resp::Args;

use super::flags::*;
use super::{def, CommandDef, Ctx, Error, Group, Result};

const G: Group = Group::Transactions;

/// The transaction family's table.
pub const COMMANDS: &[CommandDef] = &[
    def(
        "multi",
        1,
        NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY,
        (0, 0, 0),
        G,
        "1.2.0",
        "Starts a transaction.",
        multi,
    ),
    def(
        "exec",
        1,
        NOSCRIPT | LOADING | STALE | SKIP_SLOWLOG,
        (0, 0, 0),
        G,
        "1.2.0",
        "Executes all commands in a transaction.",
        exec,
    ),
    def(
        "discard",
        1,
        NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY,
        (0, 0, 0),
        G,
        "2.0.0",
        "Discards a transaction.",
        discard,
    ),
    def(
        "watch",
        -2,
        NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY,
        (1, -1, 1),
        G,
        "2.2.0",
        "Monitors changes to keys to determine the execution of a transaction.",
        watch,
    ),
    def(
        "unwatch",
        1,
        NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY,
        (0, 0, 0),
        G,
        "2.2.0",
        "Forgets about watched keys of a transaction.",
        unwatch,
    ),
];

fn multi(ctx: &mut Ctx<'_>, _args: Args<'_>) -> Result {
    if ctx.conn.tx.in_multi() {
        return Err(Error::err("MULTI calls can not be nested"));
    }
    ctx.conn.tx.begin(&ctx.conn.info);
    ctx.ok();
    Ok(())
}

/// Only reached outside MULTI (inside, `tx::run` runs EXEC).
fn exec(_ctx: &mut Ctx<'_>, _args: Args<'_>) -> Result {
    Err(Error::err("EXEC without MULTI"))
}

fn discard(ctx: &mut Ctx<'_>, _args: Args<'_>) -> Result {
    if !ctx.conn.tx.in_multi() {
        return Err(Error::err("DISCARD without MULTI"));
    }
    ctx.conn.tx.clear(&ctx.conn.info);
    ctx.ok();
    Ok(())
}

fn watch(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    if ctx.conn.tx.in_multi() {
        return Err(Error::err("WATCH inside MULTI is not allowed"));
    }
    let db = ctx.conn.db;
    let slot = ctx.slot();
    for key in args.iter().skip(1) {
        let version = slot.db().map_or(0, |d| d.version(key));
        ctx.conn
            .tx
            .watch(&ctx.shared.absent_watches, db, key, version);
    }
    drop(slot);
    ctx.ok();
    Ok(())
}

fn unwatch(ctx: &mut Ctx<'_>, _args: Args<'_>) -> Result {
    ctx.conn.tx.unwatch();
    ctx.ok();
    Ok(())
}
