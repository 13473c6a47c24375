//! MEMORY USAGE and MEMORY HELP (Redis `object.c`).
//!
//! Redis counts the bytes a key and its value take in RAM. Basalt keeps
//! values (and every field's contents) in its data files, so its answer is
//! what the key really holds in memory: its index entry, a map's field
//! table, its expiry entry and, for a sorted set, its ordered index. A
//! large string therefore reports a few dozen bytes; its size on disk is
//! what STRLEN (or the HTTP API) tells. The other MEMORY subcommands
//! (STATS, DOCTOR, MALLOC-STATS, PURGE) are not implemented and answer
//! Redis's unknown-subcommand error.

use basalt_resp::Args;

use super::flags::*;
use super::{
    def, is, parse_i64, sub_arity, unknown_subcommand, CommandDef, Ctx, Error, Group, Result,
};
use crate::keyspace::RedisType;

/// The table.
pub const COMMANDS: &[CommandDef] = &[def(
    "memory",
    -2,
    READONLY,
    (0, 0, 0),
    Group::Server,
    "4.0.0",
    "A container for memory diagnostics commands.",
    memory,
)];

fn memory(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let sub = &args[1];
    if is(sub, "help") {
        sub_arity("memory|help", 2, &args)?;
        super::server::help(
            ctx,
            "MEMORY",
            &[
                "USAGE <key> [SAMPLES <count>]",
                "    Return memory in bytes used by <key> in RAM: its index entry, a hash's,",
                "    set's or list's field table and a sorted set's ordered index. Values live",
                "    on disk and are not counted. SAMPLES is accepted and ignored (nothing",
                "    is sampled).",
            ],
        );
        return Ok(());
    }
    if !is(sub, "usage") {
        return Err(unknown_subcommand("memory", sub));
    }
    sub_arity("memory|usage", -3, &args)?;
    let mut j = 3;
    while j < args.len() {
        if is(&args[j], "samples") && j + 1 < args.len() {
            match parse_i64(&args[j + 1]) {
                None => return Err(Error::err("value is not an integer or out of range")),
                Some(n) if n < 0 => return Err(Error::Syntax),
                Some(_) => {}
            }
            j += 2;
        } else {
            return Err(Error::Syntax);
        }
    }
    let key = &args[2];
    let slot = ctx.slot();
    let Some(db) = slot.db() else {
        drop(slot);
        ctx.null();
        return Ok(());
    };
    let _g = ctx.lock(key);
    let Some(mut bytes) = db.key_memory(key) else {
        drop(slot);
        ctx.null();
        return Ok(());
    };
    let is_zset = db
        .meta(key)
        .is_some_and(|m| RedisType::of(&m) == RedisType::ZSet);
    if is_zset {
        let z = super::zset::ZDb::of(&slot).expect("opened");
        if let Some(ix) = z.load(key)? {
            bytes += ix.approx_bytes();
            z.put_back(key, ix);
        }
    }
    drop(_g);
    drop(slot);
    ctx.int(bytes as i64);
    Ok(())
}
