//! Stream consumer groups: XGROUP, XREADGROUP, XACK and XPENDING (issue
//! 20; XCLAIM, XAUTOCLAIM and XINFO come next).
//!
//! A group lives in the stream's map beside the entries
//! (`docs/file-format.md`): `g` + name holds its last delivered id and
//! entries read, `c` + group + consumer a consumer's seen time, and `p` +
//! group + id one pending entry (its consumer, delivery time and count).
//! So delivering an entry writes one pending field (plus the group's and the
//! consumer's), acknowledging it deletes one, and a group's state is loaded
//! with the stream's index (`Stream::open`) from those fields alone. Every
//! command that writes several of them runs as one write batch.

use std::collections::{BTreeMap, BTreeSet};

use basalt_engine::Db;
use basalt_resp::Args;

use super::stream::{parse_bound, parse_id, read_args, Id, ReadArgs, Stream};
use super::{def, flags::*, is, parse_i64, sub_arity, CommandDef, Ctx, Error, Group, Result};
use crate::keyspace::TAG_STREAM;
use crate::notify::STREAM;

const G: Group = Group::Stream;

/// The consumer-group commands.
pub const COMMANDS: &[CommandDef] = &[
    def(
        "xgroup",
        -2,
        0,
        (0, 0, 0),
        G,
        "5.0.0",
        "A container for consumer groups commands",
        xgroup,
    ),
    def(
        "xreadgroup",
        -7,
        WRITE | BLOCKING | MOVABLE_KEYS,
        (0, 0, 0),
        G,
        "5.0.0",
        "Return new entries from a stream using a consumer group, or access the history of the pending entries for a given consumer. Can block.",
        xreadgroup,
    ),
    def(
        "xack",
        -4,
        WRITE | FAST,
        (1, 1, 1),
        G,
        "5.0.0",
        "Marks a pending message as correctly processed, effectively removing it from the pending entries list of the consumer group. Return value of the command is the number of messages successfully acknowledged, that is, the IDs we were actually able to resolve in the PEL.",
        xack,
    ),
    def(
        "xpending",
        -3,
        READONLY,
        (1, 1, 1),
        G,
        "5.0.0",
        "Return information and entries from a stream consumer group pending entries list, that are messages fetched but never acknowledged.",
        xpending,
    ),
    def(
        "xinfo",
        -2,
        0,
        (0, 0, 0),
        G,
        "5.0.0",
        "A container for stream introspection commands",
        xinfo,
    ),
    def(
        "xclaim",
        -6,
        WRITE | FAST,
        (1, 1, 1),
        G,
        "5.0.0",
        "Changes (or acquires) ownership of a message in a consumer group, as if the message was delivered to the specified consumer.",
        xclaim,
    ),
    def(
        "xautoclaim",
        -6,
        WRITE | FAST,
        (1, 1, 1),
        G,
        "6.2.0",
        "Changes (or acquires) ownership of messages in a consumer group, as if the messages were delivered to the specified consumer.",
        xautoclaim,
    ),
];

/// An entry delivered and not yet acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pending {
    consumer: Vec<u8>,
    delivered_ms: u64,
    count: u64,
}

/// A consumer of a group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Consumer {
    seen_ms: u64,
    pending: BTreeSet<Id>,
}

/// A consumer group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct GroupState {
    last: Id,
    entries_read: i64,
    pel: BTreeMap<Id, Pending>,
    consumers: BTreeMap<Vec<u8>, Consumer>,
}

/// A stream's groups by name.
pub(super) type Groups = BTreeMap<Vec<u8>, GroupState>;

fn group_field(name: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(1 + name.len());
    f.push(b'g');
    f.extend_from_slice(name);
    f
}

/// `tag` + group length (u32 LE) + group: the prefix of a group's
/// consumer (`c`) and pending (`p`) fields.
fn prefix(tag: u8, group: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(5 + group.len() + 16);
    f.push(tag);
    f.extend_from_slice(&(group.len() as u32).to_le_bytes());
    f.extend_from_slice(group);
    f
}

fn consumer_field(group: &[u8], consumer: &[u8]) -> Vec<u8> {
    let mut f = prefix(b'c', group);
    f.extend_from_slice(consumer);
    f
}

fn pending_field(group: &[u8], id: Id) -> Vec<u8> {
    let mut f = prefix(b'p', group);
    f.extend_from_slice(&id.ms.to_be_bytes());
    f.extend_from_slice(&id.seq.to_be_bytes());
    f
}

/// Splits a `c` or `p` field name into (group, rest).
fn split(name: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(name.get(1..5)?.try_into().ok()?) as usize;
    let group = name.get(5..5 + len)?;
    Some((group, &name[5 + len..]))
}

fn damaged() -> Error {
    Error::err("stream consumer group data is damaged")
}

/// Loads the groups of the stream at `key` from its fields (`names` are
/// all its field names).
pub(super) fn load(db: &Db, key: &[u8], names: &[Vec<u8>]) -> Result<Groups> {
    let wanted: Vec<&Vec<u8>> = names
        .iter()
        .filter(|n| matches!(n.first(), Some(b'g' | b'c' | b'p')))
        .collect();
    let mut groups = Groups::new();
    if wanted.is_empty() {
        return Ok(groups);
    }
    let mut values: Vec<Option<Vec<u8>>> = vec![None; wanted.len()];
    db.fields_with(key, &wanted, |i, v| values[i] = Some(v.to_vec()))?;
    // Groups first, then their consumers and pending entries.
    for (name, v) in wanted.iter().zip(&values) {
        if name[0] == b'g' {
            let v = v.as_ref().ok_or_else(damaged)?;
            if v.len() != 24 {
                return Err(damaged());
            }
            groups.insert(
                name[1..].to_vec(),
                GroupState {
                    last: Id {
                        ms: u64::from_be_bytes(v[..8].try_into().map_err(|_| damaged())?),
                        seq: u64::from_be_bytes(v[8..16].try_into().map_err(|_| damaged())?),
                    },
                    entries_read: i64::from_le_bytes(v[16..].try_into().map_err(|_| damaged())?),
                    ..Default::default()
                },
            );
        }
    }
    for (name, v) in wanted.iter().zip(&values) {
        let v = v.as_ref().ok_or_else(damaged)?;
        match name[0] {
            b'c' => {
                let (group, consumer) = split(name).ok_or_else(damaged)?;
                let g = groups.get_mut(group).ok_or_else(damaged)?;
                let seen = u64::from_le_bytes(
                    v.get(..8)
                        .ok_or_else(damaged)?
                        .try_into()
                        .map_err(|_| damaged())?,
                );
                g.consumers.entry(consumer.to_vec()).or_default().seen_ms = seen;
            }
            b'p' => {
                let (group, id) = split(name).ok_or_else(damaged)?;
                if id.len() != 16 || v.len() < 16 {
                    return Err(damaged());
                }
                let id = Id {
                    ms: u64::from_be_bytes(id[..8].try_into().map_err(|_| damaged())?),
                    seq: u64::from_be_bytes(id[8..].try_into().map_err(|_| damaged())?),
                };
                let g = groups.get_mut(group).ok_or_else(damaged)?;
                let p = Pending {
                    delivered_ms: u64::from_le_bytes(v[..8].try_into().map_err(|_| damaged())?),
                    count: u64::from_le_bytes(v[8..16].try_into().map_err(|_| damaged())?),
                    consumer: v[16..].to_vec(),
                };
                g.consumers
                    .entry(p.consumer.clone())
                    .or_default()
                    .pending
                    .insert(id);
                g.pel.insert(id, p);
            }
            _ => {}
        }
    }
    Ok(groups)
}

/// Writes a group's field: its last delivered id and entries read.
fn save_group(db: &Db, key: &[u8], name: &[u8], last: Id, entries_read: i64) -> Result {
    let mut v = [0u8; 24];
    v[..8].copy_from_slice(&last.ms.to_be_bytes());
    v[8..16].copy_from_slice(&last.seq.to_be_bytes());
    v[16..].copy_from_slice(&entries_read.to_le_bytes());
    db.put_field_tagged(key, TAG_STREAM, &group_field(name), &v)?;
    Ok(())
}

/// Writes a consumer's field (when the consumer is created: its seen time
/// is kept in memory from then on; after a restart it is the time it was
/// created, which only XINFO would show).
fn save_consumer(db: &Db, key: &[u8], group: &[u8], name: &[u8], seen_ms: u64) -> Result {
    db.put_field_tagged(
        key,
        TAG_STREAM,
        &consumer_field(group, name),
        &seen_ms.to_le_bytes(),
    )?;
    Ok(())
}

/// The consumer `name` of `g`, created (and written) if new; its seen time
/// becomes `now`.
fn touch_consumer<'g>(
    db: &Db,
    key: &[u8],
    gname: &[u8],
    g: &'g mut GroupState,
    name: &[u8],
    now: u64,
) -> Result<&'g mut Consumer> {
    if !g.consumers.contains_key(name) {
        save_consumer(db, key, gname, name, now)?;
    }
    let c = g.consumers.entry(name.to_vec()).or_default();
    c.seen_ms = now;
    Ok(c)
}

fn save_pending(db: &Db, key: &[u8], group: &[u8], id: Id, p: &Pending) -> Result {
    let mut v = Vec::with_capacity(16 + p.consumer.len());
    v.extend_from_slice(&p.delivered_ms.to_le_bytes());
    v.extend_from_slice(&p.count.to_le_bytes());
    v.extend_from_slice(&p.consumer);
    db.put_field_tagged(key, TAG_STREAM, &pending_field(group, id), &v)?;
    Ok(())
}

/// DUMP: the groups as a payload carries them.
pub(super) fn export(groups: &Groups) -> Vec<crate::rdb::StreamGroup> {
    groups
        .iter()
        .map(|(name, g)| crate::rdb::StreamGroup {
            name: name.clone(),
            last_id: g.last.into(),
            entries_read: g.entries_read,
            pending: g
                .pel
                .iter()
                .map(|(id, p)| crate::rdb::StreamPending {
                    id: (*id).into(),
                    consumer: p.consumer.clone(),
                    delivered_ms: p.delivered_ms,
                    count: p.count,
                })
                .collect(),
            consumers: g
                .consumers
                .iter()
                .map(|(name, c)| crate::rdb::StreamConsumer {
                    name: name.clone(),
                    seen_ms: c.seen_ms,
                })
                .collect(),
        })
        .collect()
}

/// RESTORE: writes `groups` into the stream at `key` (the caller holds its
/// stripe): each group's, consumer's and pending entry's field.
pub(super) fn import(db: &Db, key: &[u8], groups: &[crate::rdb::StreamGroup]) -> Result {
    for g in groups {
        save_group(db, key, &g.name, g.last_id.into(), g.entries_read)?;
        for c in &g.consumers {
            save_consumer(db, key, &g.name, &c.name, c.seen_ms)?;
        }
        for p in &g.pending {
            let pending = Pending {
                consumer: p.consumer.clone(),
                delivered_ms: p.delivered_ms,
                count: p.count,
            };
            save_pending(db, key, &g.name, p.id.into(), &pending)?;
        }
    }
    Ok(())
}

const NEED_KEY: &str = "The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.";

fn nogroup(group: &[u8], key: &[u8]) -> Error {
    Error::Msg(
        format!(
            "NOGROUP No such consumer group '{}' for key name '{}'",
            String::from_utf8_lossy(group),
            String::from_utf8_lossy(key)
        )
        .into(),
    )
}

const XGROUP_HELP: &[&str] = &[
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
];

/// `ENTRIESREAD n` options of CREATE and SETID from `args[at..]`.
fn entries_read_opt(
    args: &Args<'_>,
    at: usize,
    mkstream_ok: bool,
    sub: &[u8],
) -> Result<(bool, Option<i64>)> {
    let mut mkstream = false;
    let mut read = None;
    let mut i = at;
    while i < args.len() {
        if mkstream_ok && is(&args[i], "mkstream") {
            mkstream = true;
            i += 1;
        } else if is(&args[i], "entriesread") && i + 1 < args.len() {
            let n = parse_i64(&args[i + 1]).ok_or(Error::NotInteger)?;
            if n < -1 {
                return Err(Error::err("value for ENTRIESREAD must be positive or -1"));
            }
            read = Some(n);
            i += 2;
        } else {
            return Err(Error::err(format!(
                "unknown subcommand or wrong number of arguments for '{}'. Try XGROUP HELP.",
                String::from_utf8_lossy(sub)
            )));
        }
    }
    Ok((mkstream, read))
}

/// XGROUP CREATE | SETID | DESTROY | CREATECONSUMER | DELCONSUMER | HELP.
fn xgroup(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let sub = &args[1];
    let (full, arity, name) = if is(sub, "create") {
        ("xgroup|create", -5, "create")
    } else if is(sub, "setid") {
        ("xgroup|setid", -5, "setid")
    } else if is(sub, "destroy") {
        ("xgroup|destroy", 4, "destroy")
    } else if is(sub, "createconsumer") {
        ("xgroup|createconsumer", 5, "createconsumer")
    } else if is(sub, "delconsumer") {
        ("xgroup|delconsumer", 5, "delconsumer")
    } else if is(sub, "help") {
        sub_arity("xgroup|help", 2, &args)?;
        ctx.array(XGROUP_HELP.len());
        for l in XGROUP_HELP {
            ctx.simple(l.as_bytes());
        }
        return Ok(());
    } else {
        return Err(super::unknown_subcommand("xgroup", sub));
    };
    sub_arity(full, arity, &args)?;
    let key = &args[2];
    let group = &args[3];
    let (mkstream, entries_read) = match name {
        "create" => entries_read_opt(&args, 5, true, sub)?,
        "setid" => entries_read_opt(&args, 5, false, sub)?,
        _ => (false, None),
    };
    let slot = ctx.slot();
    let generation = slot.generation();
    drop(slot);
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let mut s = match Stream::open(&db, generation, key)? {
        Some(s) => s,
        None if name == "create" && mkstream => Stream::empty(&db, generation, key),
        None => return Err(Error::err(NEED_KEY)),
    };
    let id_for = |s: &Stream<'_>, arg: &[u8]| -> Result<Id> {
        if arg == b"$" {
            Ok(s.meta.last)
        } else {
            parse_id(arg, 0, false)
        }
    };
    let reply: std::result::Result<i64, ()> = match name {
        "create" => {
            let last = id_for(&s, &args[4])?;
            if s.groups.contains_key(group) {
                s.close();
                return Err(Error::Msg(
                    "BUSYGROUP Consumer Group name already exists".into(),
                ));
            }
            let g = GroupState {
                last,
                entries_read: entries_read.unwrap_or(-1),
                ..Default::default()
            };
            save_group(&db, key, group, g.last, g.entries_read)?;
            s.groups.insert(group.to_vec(), g);
            Err(())
        }
        "setid" => {
            let last = id_for(&s, &args[4])?;
            let Some(g) = s.groups.get_mut(group) else {
                s.close();
                return Err(nogroup(group, key));
            };
            g.last = last;
            g.entries_read = entries_read.unwrap_or(-1);
            save_group(&db, key, group, g.last, g.entries_read)?;
            Err(())
        }
        "destroy" => match s.groups.remove(group) {
            Some(g) => {
                // The stream stays when its last group goes, entries or
                // not: its metadata field keeps the map alive.
                s.save_meta()?;
                for id in g.pel.keys() {
                    db.delete_field(key, &pending_field(group, *id))?;
                }
                for c in g.consumers.keys() {
                    db.delete_field(key, &consumer_field(group, c))?;
                }
                db.delete_field(key, &group_field(group))?;
                Ok(1)
            }
            None => Ok(0),
        },
        "createconsumer" => {
            let now = ctx.now_ms;
            let Some(g) = s.groups.get_mut(group) else {
                s.close();
                return Err(nogroup(group, key));
            };
            if g.consumers.contains_key(&args[4]) {
                Ok(0)
            } else {
                let c = Consumer {
                    seen_ms: now,
                    ..Default::default()
                };
                save_consumer(&db, key, group, &args[4], now)?;
                g.consumers.insert(args[4].to_vec(), c);
                Ok(1)
            }
        }
        _ => {
            // delconsumer
            let Some(g) = s.groups.get_mut(group) else {
                s.close();
                return Err(nogroup(group, key));
            };
            match g.consumers.remove(&args[4]) {
                Some(c) => {
                    for id in &c.pending {
                        g.pel.remove(id);
                        db.delete_field(key, &pending_field(group, *id))?;
                    }
                    db.delete_field(key, &consumer_field(group, &args[4]))?;
                    Ok(c.pending.len() as i64)
                }
                None => Ok(0),
            }
        }
    };
    s.close();
    drop(db);
    match name {
        "create" => ctx.notify(STREAM, "xgroup-create", key),
        "setid" => ctx.notify(STREAM, "xgroup-setid", key),
        "destroy" if reply == Ok(1) => {
            ctx.notify(STREAM, "xgroup-destroy", key);
            // Clients blocked in XREADGROUP on the group are told.
            ctx.shared.blocking.signal(ctx.conn.db, key);
        }
        "createconsumer" if reply == Ok(1) => ctx.notify(STREAM, "xgroup-createconsumer", key),
        "delconsumer" => ctx.notify(STREAM, "xgroup-delconsumer", key),
        _ => {}
    }
    match reply {
        Ok(n) => ctx.int(n),
        Err(()) => ctx.ok(),
    }
    Ok(())
}

/// XREADGROUP GROUP group consumer [COUNT n] [BLOCK ms] [NOACK] STREAMS key... id...
fn xreadgroup(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let ReadArgs {
        count,
        block,
        noack,
        group,
        keys,
        ids_at,
    } = read_args(&args, true)?;
    let Some((gname, consumer)) = group else {
        return Err(Error::err("Missing GROUP option for XREADGROUP"));
    };
    let n = keys.len();
    // `>` or an id; `$` means nothing here.
    let mut wants: Vec<Option<Id>> = Vec::with_capacity(n);
    for k in 0..n {
        let arg = &args[ids_at + k];
        if arg == b">" {
            wants.push(None);
        } else if arg == b"$" {
            return Err(Error::err("The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set."));
        } else {
            wants.push(Some(parse_id(arg, 0, false)?));
        }
    }
    let now = ctx.now_ms;
    let slot = ctx.slot();
    let generation = slot.generation();
    drop(slot);
    let db = ctx.db_w()?;
    let mut sorted: Vec<&[u8]> = keys.clone();
    sorted.sort_unstable();
    sorted.dedup();
    let guards: Vec<_> = sorted.iter().map(|k| ctx.lock(k)).collect();
    super::stream::defer_uncached(&db, generation, sorted.iter().copied())?;
    let rerun = block.is_some() && ctx.shared.blocking.is_blocked(ctx.conn.info.id);
    let mut streams: Vec<Stream<'_>> = Vec::with_capacity(n);
    for key in &keys {
        let s = match super::stream::open_read(ctx, &db, generation, key) {
            Ok(Some(s)) if s.groups.contains_key(gname) => s,
            Ok(other) => {
                let gone = other.is_none();
                if let Some(s) = other {
                    s.close();
                }
                for s in streams {
                    s.close();
                }
                if rerun {
                    // What a blocked client waited on went away (Redis 7.0's
                    // words).
                    return Err(Error::Msg(if gone {
                        "UNBLOCKED the stream key no longer exists".into()
                    } else {
                        "NOGROUP the consumer group this client was blocked on no longer exists"
                            .into()
                    }));
                }
                return Err(Error::Msg(
                    format!(
                        "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                        String::from_utf8_lossy(key),
                        String::from_utf8_lossy(gname)
                    )
                    .into(),
                ));
            }
            Err(e) => {
                for s in streams {
                    s.close();
                }
                return Err(e);
            }
        };
        streams.push(s);
    }
    // Redis 7.0 looks every key up again to serve it: a second hit each.
    for _ in &keys {
        ctx.keyhit();
    }
    let limit = if count == 0 { usize::MAX } else { count };
    // What each stream answers: (index, ids, whether the entries are history).
    let mut out: Vec<(usize, Vec<Id>, bool)> = Vec::new();
    // Streams whose group got this consumer now (`xgroup-createconsumer`).
    let mut created: Vec<usize> = Vec::new();
    for (k, s) in streams.iter_mut().enumerate() {
        let g = s.groups.get_mut(gname).expect("checked above");
        let existed = g.consumers.contains_key(consumer);
        // A history read makes the consumer exist; a `>` read only when it
        // gets something (as in Redis).
        match wants[k] {
            Some(from) => {
                if !existed {
                    created.push(k);
                }
                let c = touch_consumer(&db, s.key, gname, g, consumer, now)?;
                // History: this consumer's pending entries after `from`.
                let ids: Vec<Id> = match from.next() {
                    Some(after) => c.pending.range(after..).take(limit).copied().collect(),
                    None => Vec::new(),
                };
                for id in &ids {
                    if let Some(p) = g.pel.get_mut(id) {
                        p.delivered_ms = now;
                        p.count += 1;
                        let p = p.clone();
                        save_pending(&db, s.key, gname, *id, &p)?;
                    }
                }
                out.push((k, ids, true));
            }
            None => {
                let Some(next) = g.last.next() else {
                    continue;
                };
                let ids: Vec<Id> = s.ids.range(next..).take(limit).copied().collect();
                if ids.is_empty() {
                    continue;
                }
                let g = s.groups.get_mut(gname).expect("checked above");
                if !existed {
                    created.push(k);
                }
                touch_consumer(&db, s.key, gname, g, consumer, now)?;
                for id in &ids {
                    // Redis's read counter: counted while it is valid and
                    // no deletion lies ahead, else estimated again.
                    if *id > g.last {
                        if g.entries_read != -1
                            && !super::stream::has_tombstones(&s.ids, s.meta.max_deleted, *id)
                        {
                            g.entries_read += 1;
                        } else if s.meta.added > 0 {
                            g.entries_read = super::stream::estimate(&s.ids, &s.meta, *id);
                        }
                        g.last = *id;
                    }
                    if !noack {
                        // An entry already pending (the group's id was set
                        // back) changes owner.
                        if let Some(old) = g.pel.get(id).map(|p| p.consumer.clone()) {
                            if let Some(oc) = g.consumers.get_mut(&old) {
                                oc.pending.remove(id);
                            }
                        }
                        let p = Pending {
                            consumer: consumer.to_vec(),
                            delivered_ms: now,
                            count: 1,
                        };
                        save_pending(&db, s.key, gname, *id, &p)?;
                        g.pel.insert(*id, p);
                        g.consumers
                            .entry(consumer.to_vec())
                            .or_default()
                            .pending
                            .insert(*id);
                    }
                }
                save_group(&db, s.key, gname, g.last, g.entries_read)?;
                out.push((k, ids, false));
            }
        }
    }
    if out.is_empty() {
        for s in streams {
            s.close();
        }
        drop(db);
        match block {
            // Only `>` reads block, and they had nothing.
            Some(timeout) => crate::blocking::block_on(ctx, &keys, timeout),
            None => ctx.enc().null_array(),
        }
        drop(guards);
        return Ok(());
    }
    let resp3 = ctx.conn.protocol == basalt_resp::Protocol::Resp3;
    if resp3 {
        ctx.enc().map(out.len());
    } else {
        ctx.array(out.len());
    }
    let mut result = Ok(());
    for (k, ids, history) in &out {
        if !resp3 {
            ctx.array(2);
        }
        ctx.bulk(keys[*k]);
        let s = &streams[*k];
        if *history {
            // Entries deleted since delivery answer [id, nil].
            match s.entries(ctx.conn.protocol, ids, true) {
                Ok(body) => {
                    ctx.array(ids.len());
                    ctx.out.extend_from_slice(&body);
                }
                Err(e) => result = Err(e),
            }
        } else {
            result = s.reply(ctx, ids);
        }
        if result.is_err() {
            break;
        }
    }
    for s in streams {
        s.close();
    }
    drop(db);
    drop(guards);
    for k in created {
        ctx.notify(STREAM, "xgroup-createconsumer", keys[k]);
    }
    result
}

/// XACK key group id [id ...]
fn xack(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let gname = &args[2];
    let ids = args
        .iter()
        .skip(3)
        .map(|a| parse_id(a, 0, false))
        .collect::<Result<Vec<Id>>>()?;
    let slot = ctx.slot();
    let generation = slot.generation();
    drop(slot);
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let Some(mut s) = super::stream::open_read(ctx, &db, generation, key)? else {
        drop(db);
        ctx.int(0);
        return Ok(());
    };
    let mut acked = 0;
    if let Some(g) = s.groups.get_mut(gname) {
        for id in ids {
            if let Some(p) = g.pel.remove(&id) {
                if let Some(c) = g.consumers.get_mut(&p.consumer) {
                    c.pending.remove(&id);
                }
                db.delete_field(key, &pending_field(gname, id))?;
                acked += 1;
            }
        }
    }
    s.close();
    drop(db);
    ctx.int(acked);
    Ok(())
}

/// XPENDING key group [[IDLE min-idle] start end count [consumer]]
fn xpending(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let gname = &args[2];
    let mut i = 3;
    let mut idle: Option<u64> = None;
    let mut range = None;
    if args.len() > 3 {
        if is(&args[3], "idle") && args.len() > 4 {
            let n = parse_i64(&args[4]).ok_or(Error::NotInteger)?;
            idle = Some(n.max(0) as u64);
            i = 5;
        }
        if args.len() < i + 3 || args.len() > i + 4 {
            return Err(Error::Syntax);
        }
        let start = parse_bound(&args[i], true)?;
        let end = parse_bound(&args[i + 1], false)?;
        let count = parse_i64(&args[i + 2]).ok_or(Error::NotInteger)?;
        let consumer = args.get(i + 3);
        range = Some((start, end, count, consumer));
    }
    let slot = ctx.slot();
    let Some(db) = slot.db() else {
        drop(slot);
        return Err(Error::Msg(
            format!(
                "NOGROUP No such key '{}' or consumer group '{}'",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(gname)
            )
            .into(),
        ));
    };
    let _g = ctx.lock(key);
    let s = super::stream::open_read(ctx, db, slot.generation(), key)?;
    let Some(g) = s.as_ref().and_then(|s| s.groups.get(gname)) else {
        if let Some(s) = s {
            s.close();
        }
        return Err(Error::Msg(
            format!(
                "NOGROUP No such key '{}' or consumer group '{}'",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(gname)
            )
            .into(),
        ));
    };
    match range {
        None => {
            ctx.array(4);
            ctx.int(g.pel.len() as i64);
            if g.pel.is_empty() {
                ctx.null();
                ctx.null();
                ctx.enc().null_array();
            } else {
                let first = g.pel.keys().next().expect("not empty").text();
                let last = g.pel.keys().next_back().expect("not empty").text();
                ctx.bulk(first.as_bytes());
                ctx.bulk(last.as_bytes());
                let with: Vec<(&Vec<u8>, usize)> = g
                    .consumers
                    .iter()
                    .filter(|(_, c)| !c.pending.is_empty())
                    .map(|(n, c)| (n, c.pending.len()))
                    .collect();
                ctx.array(with.len());
                for (name, n) in with {
                    ctx.array(2);
                    ctx.bulk(name);
                    ctx.bulk(n.to_string().as_bytes());
                }
            }
        }
        Some((start, end, count, consumer)) => {
            let now = ctx.now_ms;
            let mut rows: Vec<(Id, &Pending)> = Vec::new();
            if let (Some(lo), Some(hi)) = (start, end) {
                if lo <= hi && count > 0 {
                    let ids: Box<dyn Iterator<Item = &Id>> = match consumer {
                        Some(c) => match g.consumers.get(c) {
                            Some(c) => Box::new(c.pending.range(lo..=hi)),
                            None => Box::new(std::iter::empty()),
                        },
                        None => Box::new(g.pel.range(lo..=hi).map(|(id, _)| id)),
                    };
                    for id in ids {
                        let Some(p) = g.pel.get(id) else { continue };
                        if let Some(min) = idle {
                            if now.saturating_sub(p.delivered_ms) < min {
                                continue;
                            }
                        }
                        rows.push((*id, p));
                        if rows.len() as i64 >= count {
                            break;
                        }
                    }
                }
            }
            ctx.array(rows.len());
            for (id, p) in rows {
                ctx.array(4);
                ctx.bulk(id.text().as_bytes());
                ctx.bulk(&p.consumer);
                ctx.int(now.saturating_sub(p.delivered_ms) as i64);
                ctx.int(p.count as i64);
            }
        }
    }
    s.into_iter().for_each(Stream::close);
    drop(slot);
    Ok(())
}

const XINFO_HELP: &[&str] = &[
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
];

/// A group's lag (Redis's `streamReplyWithCGLag`); `None` when unknown.
fn lag(s: &Stream<'_>, g: &GroupState) -> Option<i64> {
    let added = s.meta.added as i64;
    if added == 0 {
        return Some(0);
    }
    if g.entries_read != -1 && !s.has_tombstones(g.last) {
        return Some(added - g.entries_read);
    }
    match s.estimate(g.last) {
        -1 => None,
        read => Some(added - read),
    }
}

/// XINFO STREAM key | GROUPS key | CONSUMERS key group | HELP.
fn xinfo(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let sub = &args[1];
    if is(sub, "help") {
        sub_arity("xinfo|help", 2, &args)?;
        ctx.array(XINFO_HELP.len());
        for l in XINFO_HELP {
            ctx.simple(l.as_bytes());
        }
        return Ok(());
    }
    // XINFO STREAM key FULL [COUNT n]: entries and pending lists up to n
    // (default 10, 0 = all).
    let mut full: Option<usize> = None;
    let which = if is(sub, "stream") {
        let bad = || {
            Error::err(format!(
                "unknown subcommand or wrong number of arguments for '{}'. Try XINFO HELP.",
                String::from_utf8_lossy(sub)
            ))
        };
        match args.len() {
            3 => {}
            4 if is(&args[3], "full") => full = Some(10),
            6 if is(&args[3], "full") && is(&args[4], "count") => {
                let n = parse_i64(&args[5]).ok_or(Error::NotInteger)?;
                full = Some(n.max(0) as usize);
            }
            _ => return Err(bad()),
        }
        0
    } else if is(sub, "groups") {
        sub_arity("xinfo|groups", 3, &args)?;
        1
    } else if is(sub, "consumers") {
        sub_arity("xinfo|consumers", 4, &args)?;
        2
    } else {
        return Err(super::unknown_subcommand("xinfo", sub));
    };
    let key = &args[2];
    let slot = ctx.slot();
    let Some(db) = slot.db() else {
        return Err(Error::err("no such key"));
    };
    let _g = ctx.lock(key);
    let Some(s) = super::stream::open_read(ctx, db, slot.generation(), key)? else {
        return Err(Error::err("no such key"));
    };
    let now = ctx.now_ms;
    let map = |ctx: &mut Ctx<'_>, n: usize| ctx.enc().map(n);
    let mut buf = [0u8; 41];
    let result = match which {
        0 if full.is_some() => xinfo_full(ctx, &s, full.unwrap_or(10)),
        0 => {
            map(ctx, 10);
            info_head(ctx, &s);
            ctx.bulk(b"groups");
            ctx.int(s.groups.len() as i64);
            let mut r = Ok(());
            for (name, pick) in [
                ("first-entry", s.ids.iter().next()),
                ("last-entry", s.ids.iter().next_back()),
            ] {
                ctx.bulk(name.as_bytes());
                match pick {
                    Some(id) => match s.entries(ctx.conn.protocol, &[*id], false) {
                        Ok(body) => ctx.out.extend_from_slice(&body),
                        Err(e) => {
                            r = Err(e);
                            break;
                        }
                    },
                    None => ctx.null(),
                }
            }
            r
        }
        1 => {
            ctx.array(s.groups.len());
            for (name, g) in &s.groups {
                map(ctx, 6);
                ctx.bulk(b"name");
                ctx.bulk(name);
                ctx.bulk(b"consumers");
                ctx.int(g.consumers.len() as i64);
                ctx.bulk(b"pending");
                ctx.int(g.pel.len() as i64);
                ctx.bulk(b"last-delivered-id");
                ctx.bulk(super::stream::id_text(g.last, &mut buf));
                read_and_lag(ctx, &s, g);
            }
            Ok(())
        }
        _ => match s.groups.get(&args[3][..]) {
            None => Err(nogroup(&args[3], key)),
            Some(g) => {
                ctx.array(g.consumers.len());
                for (name, c) in &g.consumers {
                    map(ctx, 3);
                    ctx.bulk(b"name");
                    ctx.bulk(name);
                    ctx.bulk(b"pending");
                    ctx.int(c.pending.len() as i64);
                    ctx.bulk(b"idle");
                    ctx.int(now.saturating_sub(c.seen_ms) as i64);
                }
                Ok(())
            }
        },
    };
    s.close();
    drop(slot);
    result
}

/// The seven fields XINFO STREAM starts with, plain and FULL.
fn info_head(ctx: &mut Ctx<'_>, s: &Stream<'_>) {
    let mut buf = [0u8; 41];
    ctx.bulk(b"length");
    ctx.int(s.len() as i64);
    // Basalt keeps no radix tree: these are what Redis's would hold with
    // its default 100 entries per node.
    let nodes = s.len().div_ceil(100) as i64;
    ctx.bulk(b"radix-tree-keys");
    ctx.int(nodes);
    ctx.bulk(b"radix-tree-nodes");
    ctx.int(nodes + 1);
    ctx.bulk(b"last-generated-id");
    ctx.bulk(super::stream::id_text(s.meta.last, &mut buf));
    ctx.bulk(b"max-deleted-entry-id");
    ctx.bulk(super::stream::id_text(s.meta.max_deleted, &mut buf));
    ctx.bulk(b"entries-added");
    ctx.int(s.meta.added as i64);
    ctx.bulk(b"recorded-first-entry-id");
    ctx.bulk(super::stream::id_text(s.first_id(), &mut buf));
}

/// A group's `entries-read` and `lag` fields (nil where unknown).
fn read_and_lag(ctx: &mut Ctx<'_>, s: &Stream<'_>, g: &GroupState) {
    ctx.bulk(b"entries-read");
    if g.entries_read == -1 {
        ctx.null();
    } else {
        ctx.int(g.entries_read);
    }
    ctx.bulk(b"lag");
    match lag(s, g) {
        Some(n) => ctx.int(n),
        None => ctx.null(),
    }
}

/// XINFO STREAM key FULL: everything, lists cut at `count` (0 = all).
fn xinfo_full(ctx: &mut Ctx<'_>, s: &Stream<'_>, count: usize) -> Result {
    let limit = if count == 0 { usize::MAX } else { count };
    let mut buf = [0u8; 41];
    ctx.enc().map(9);
    info_head(ctx, s);
    ctx.bulk(b"entries");
    let ids: Vec<Id> = s.ids.iter().take(limit).copied().collect();
    s.reply(ctx, &ids)?;
    ctx.bulk(b"groups");
    ctx.array(s.groups.len());
    for (name, g) in &s.groups {
        ctx.enc().map(7);
        ctx.bulk(b"name");
        ctx.bulk(name);
        ctx.bulk(b"last-delivered-id");
        ctx.bulk(super::stream::id_text(g.last, &mut buf));
        read_and_lag(ctx, s, g);
        ctx.bulk(b"pel-count");
        ctx.int(g.pel.len() as i64);
        ctx.bulk(b"pending");
        let pel: Vec<(&Id, &Pending)> = g.pel.iter().take(limit).collect();
        ctx.array(pel.len());
        for (id, p) in pel {
            ctx.array(4);
            ctx.bulk(super::stream::id_text(*id, &mut buf));
            ctx.bulk(&p.consumer);
            ctx.int(p.delivered_ms as i64);
            ctx.int(p.count as i64);
        }
        ctx.bulk(b"consumers");
        ctx.array(g.consumers.len());
        for (cname, c) in &g.consumers {
            ctx.enc().map(4);
            ctx.bulk(b"name");
            ctx.bulk(cname);
            ctx.bulk(b"seen-time");
            ctx.int(c.seen_ms as i64);
            ctx.bulk(b"pel-count");
            ctx.int(c.pending.len() as i64);
            ctx.bulk(b"pending");
            let mine: Vec<&Id> = c.pending.iter().take(limit).collect();
            ctx.array(mine.len());
            for id in mine {
                let p = g.pel.get(id);
                ctx.array(3);
                ctx.bulk(super::stream::id_text(*id, &mut buf));
                ctx.int(p.map_or(0, |p| p.delivered_ms as i64));
                ctx.int(p.map_or(0, |p| p.count as i64));
            }
        }
    }
    Ok(())
}

/// `NOGROUP No such key '<key>' or consumer group '<group>'`.
fn nokey_or_group(key: &[u8], group: &[u8]) -> Error {
    Error::Msg(
        format!(
            "NOGROUP No such key '{}' or consumer group '{}'",
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(group)
        )
        .into(),
    )
}

/// Gives pending entry `id` of group `gname` to `consumer` (creating the
/// consumer), with its new delivery time and count, and writes it.
#[allow(clippy::too_many_arguments)]
fn hand_to(
    db: &Db,
    key: &[u8],
    gname: &[u8],
    g: &mut GroupState,
    id: Id,
    consumer: &[u8],
    delivered_ms: u64,
    count: u64,
) -> Result {
    if let Some(old) = g.pel.get(&id).map(|p| p.consumer.clone()) {
        if let Some(c) = g.consumers.get_mut(&old) {
            c.pending.remove(&id);
        }
    }
    if !g.consumers.contains_key(consumer) {
        save_consumer(db, key, gname, consumer, delivered_ms)?;
    }
    let p = Pending {
        consumer: consumer.to_vec(),
        delivered_ms,
        count,
    };
    save_pending(db, key, gname, id, &p)?;
    g.pel.insert(id, p);
    g.consumers
        .entry(consumer.to_vec())
        .or_default()
        .pending
        .insert(id);
    Ok(())
}

/// Drops pending entry `id` of `g` (its stream entry is gone).
fn drop_pending(db: &Db, key: &[u8], gname: &[u8], g: &mut GroupState, id: Id) -> Result {
    if let Some(p) = g.pel.remove(&id) {
        if let Some(c) = g.consumers.get_mut(&p.consumer) {
            c.pending.remove(&id);
        }
        db.delete_field(key, &pending_field(gname, id))?;
    }
    Ok(())
}

/// XCLAIM key group consumer min-idle-time id... [IDLE ms] [TIME ms]
/// [RETRYCOUNT n] [FORCE] [JUSTID] [LASTID id]
fn xclaim(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let (key, gname, consumer) = (&args[1], &args[2], &args[3]);
    let min_idle = parse_i64(&args[4])
        .ok_or_else(|| Error::err("Invalid min-idle-time argument for XCLAIM"))?
        .max(0) as u64;
    let mut ids = Vec::new();
    let mut i = 5;
    while i < args.len() {
        match parse_id(&args[i], 0, false) {
            Ok(id) => ids.push(id),
            Err(_) => break,
        }
        i += 1;
    }
    let now = ctx.now_ms;
    let mut delivered = now;
    let mut retry: Option<u64> = None;
    let (mut force, mut justid, mut lastid) = (false, false, None);
    while i < args.len() {
        let more = args.len() - i - 1;
        let a = &args[i];
        if is(a, "force") {
            force = true;
        } else if is(a, "justid") {
            justid = true;
        } else if is(a, "idle") && more > 0 {
            i += 1;
            let n = parse_i64(&args[i])
                .ok_or_else(|| Error::err("Invalid IDLE option argument for XCLAIM"))?;
            delivered = now.saturating_sub(n.max(0) as u64);
        } else if is(a, "time") && more > 0 {
            i += 1;
            let n = parse_i64(&args[i])
                .ok_or_else(|| Error::err("Invalid TIME option argument for XCLAIM"))?;
            delivered = n.max(0) as u64;
        } else if is(a, "retrycount") && more > 0 {
            i += 1;
            let n = parse_i64(&args[i])
                .ok_or_else(|| Error::err("Invalid RETRYCOUNT option argument for XCLAIM"))?;
            retry = Some(n.max(0) as u64);
        } else if is(a, "lastid") && more > 0 {
            i += 1;
            lastid = Some(parse_id(&args[i], 0, false)?);
        } else {
            return Err(Error::err(format!(
                "Unrecognized XCLAIM option '{}'",
                String::from_utf8_lossy(a)
            )));
        }
        i += 1;
    }
    let slot = ctx.slot();
    let generation = slot.generation();
    drop(slot);
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let Some(mut s) = super::stream::open_read(ctx, &db, generation, key)? else {
        return Err(nokey_or_group(key, gname));
    };
    let Some(mut g) = s.groups.remove(gname) else {
        s.close();
        return Err(nokey_or_group(key, gname));
    };
    let existed = g.consumers.contains_key(consumer);
    if let Some(l) = lastid {
        if l > g.last {
            g.last = l;
            save_group(&db, key, gname, g.last, g.entries_read)?;
        }
    }
    let mut claimed = Vec::new();
    for id in ids {
        let pending = g.pel.get(&id).cloned();
        let in_stream = s.ids.contains(&id);
        let count = match pending {
            None if force && in_stream => 1,
            None => continue,
            Some(_) if !in_stream => {
                drop_pending(&db, key, gname, &mut g, id)?;
                continue;
            }
            Some(p) => {
                if min_idle > 0 && now.saturating_sub(p.delivered_ms) < min_idle {
                    continue;
                }
                if justid {
                    p.count
                } else {
                    p.count + 1
                }
            }
        };
        let count = retry.unwrap_or(count);
        hand_to(&db, key, gname, &mut g, id, consumer, delivered, count)?;
        claimed.push(id);
    }
    // The consumer exists (and was seen) only if it claimed something, as
    // in Redis.
    if !claimed.is_empty() {
        touch_consumer(&db, key, gname, &mut g, consumer, now)?;
    }
    let new_consumer = !existed && !claimed.is_empty();
    s.groups.insert(gname.to_vec(), g);
    let r = if justid {
        ctx.array(claimed.len());
        for id in &claimed {
            ctx.bulk(id.text().as_bytes());
        }
        Ok(())
    } else {
        s.reply(ctx, &claimed)
    };
    s.close();
    drop(db);
    if new_consumer {
        ctx.notify(STREAM, "xgroup-createconsumer", key);
    }
    r
}

/// XAUTOCLAIM key group consumer min-idle-time start [COUNT n] [JUSTID]
fn xautoclaim(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let (key, gname, consumer) = (&args[1], &args[2], &args[3]);
    let min_idle = parse_i64(&args[4])
        .ok_or_else(|| Error::err("Invalid min-idle-time argument for XAUTOCLAIM"))?
        .max(0) as u64;
    let start = parse_bound(&args[5], true)?.unwrap_or(Id::MAX);
    let mut count = 100usize;
    let mut justid = false;
    let mut i = 6;
    while i < args.len() {
        if is(&args[i], "count") && i + 1 < args.len() {
            let n = parse_i64(&args[i + 1]).ok_or(Error::NotInteger)?;
            if n < 1 {
                return Err(Error::err("COUNT must be > 0"));
            }
            count = n as usize;
            i += 2;
        } else if is(&args[i], "justid") {
            justid = true;
            i += 1;
        } else {
            return Err(Error::Syntax);
        }
    }
    let now = ctx.now_ms;
    let slot = ctx.slot();
    let generation = slot.generation();
    drop(slot);
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let Some(mut s) = super::stream::open_read(ctx, &db, generation, key)? else {
        return Err(nokey_or_group(key, gname));
    };
    let Some(mut g) = s.groups.remove(gname) else {
        s.close();
        return Err(nokey_or_group(key, gname));
    };
    let existed = g.consumers.contains_key(consumer);
    let mut attempts = count.saturating_mul(10);
    let mut claimed = Vec::new();
    let mut deleted = Vec::new();
    let candidates: Vec<Id> = g.pel.range(start..).map(|(id, _)| *id).collect();
    let mut next = Id::MIN;
    let mut it = candidates.into_iter();
    for id in it.by_ref() {
        if attempts == 0 || claimed.len() >= count {
            next = id;
            break;
        }
        attempts -= 1;
        if !s.ids.contains(&id) {
            drop_pending(&db, key, gname, &mut g, id)?;
            deleted.push(id);
            continue;
        }
        let p = g.pel.get(&id).cloned().expect("from the PEL");
        if min_idle > 0 && now.saturating_sub(p.delivered_ms) < min_idle {
            continue;
        }
        let n = if justid { p.count } else { p.count + 1 };
        hand_to(&db, key, gname, &mut g, id, consumer, now, n)?;
        claimed.push(id);
    }
    // The consumer exists (and was seen) only if it claimed something, as
    // in Redis.
    if !claimed.is_empty() {
        touch_consumer(&db, key, gname, &mut g, consumer, now)?;
    }
    let new_consumer = !existed && !claimed.is_empty();
    s.groups.insert(gname.to_vec(), g);
    ctx.array(3);
    let mut buf = [0u8; 41];
    ctx.bulk(super::stream::id_text(next, &mut buf));
    let r = if justid {
        ctx.array(claimed.len());
        for id in &claimed {
            ctx.bulk(id.text().as_bytes());
        }
        Ok(())
    } else {
        s.reply(ctx, &claimed)
    };
    if r.is_ok() {
        ctx.array(deleted.len());
        for id in &deleted {
            ctx.bulk(id.text().as_bytes());
        }
    }
    s.close();
    drop(db);
    if new_consumer {
        ctx.notify(STREAM, "xgroup-createconsumer", key);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_field_names_split_back() {
        let f = pending_field(b"grp", Id { ms: 3, seq: 4 });
        let (g, rest) = split(&f).unwrap();
        assert_eq!(g, b"grp");
        assert_eq!(rest.len(), 16);
        let c = consumer_field(b"", b"alice");
        assert_eq!(split(&c).unwrap(), (&b""[..], &b"alice"[..]));
    }
}
