//! Pub/sub commands (Redis `pubsub.c`): SUBSCRIBE UNSUBSCRIBE PSUBSCRIBE
//! PUNSUBSCRIBE PUBLISH, the sharded SSUBSCRIBE SUNSUBSCRIBE SPUBLISH (one
//! shard: a shard channel is an exact name apart from the classic ones),
//! PUBSUB, and MONITOR, whose lines travel the same mailboxes. Delivery and
//! limits live in `crate::pubsub`; these handlers only change the registry
//! and write the confirmations (RESP2 arrays, RESP3 pushes) with the
//! running count (shard subscriptions are counted apart, as in Redis 7.0).

use basalt_resp::Args;

use super::flags::*;
use super::{def, is, sub_arity, unknown_subcommand, CommandDef, Ctx, Group, Result};
use crate::pubsub::Kind;

const G: Group = Group::Pubsub;

/// The pub/sub family's table.
pub const COMMANDS: &[CommandDef] = &[
    def(
        "subscribe",
        -2,
        PUBSUB | NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        G,
        "2.0.0",
        "Listens for messages published to channels.",
        subscribe,
    ),
    def(
        "unsubscribe",
        -1,
        PUBSUB | NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        G,
        "2.0.0",
        "Stops listening to messages posted to channels.",
        unsubscribe,
    ),
    def(
        "psubscribe",
        -2,
        PUBSUB | NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        G,
        "2.0.0",
        "Listens for messages published to channels that match one or more patterns.",
        psubscribe,
    ),
    def(
        "punsubscribe",
        -1,
        PUBSUB | NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        G,
        "2.0.0",
        "Stops listening to messages published to channels that match one or more patterns.",
        punsubscribe,
    ),
    def(
        "publish",
        3,
        PUBSUB | LOADING | STALE | FAST | MAY_REPLICATE,
        (0, 0, 0),
        G,
        "2.0.0",
        "Posts a message to a channel.",
        publish,
    ),
    def(
        "ssubscribe",
        -2,
        PUBSUB | NOSCRIPT | LOADING | STALE,
        (1, -1, 1),
        G,
        "7.0.0",
        "Listen for messages published to the given shard channels",
        ssubscribe,
    ),
    def(
        "sunsubscribe",
        -1,
        PUBSUB | NOSCRIPT | LOADING | STALE,
        (1, -1, 1),
        G,
        "7.0.0",
        "Stop listening for messages posted to the given shard channels",
        sunsubscribe,
    ),
    def(
        "spublish",
        3,
        PUBSUB | LOADING | STALE | FAST,
        (1, 1, 1),
        G,
        "7.0.0",
        "Post a message to a shard channel",
        spublish,
    ),
    // A server command; here because its lines are mailbox messages.
    def(
        "monitor",
        1,
        ADMIN | NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        Group::Server,
        "1.0.0",
        "Listen for all requests received by the server in real time",
        monitor,
    ),
    def(
        "pubsub",
        -2,
        0,
        (0, 0, 0),
        G,
        "2.8.0",
        "A container for Pub/Sub commands.",
        pubsub,
    ),
];

/// Commands a RESP2 client may run while it has subscriptions.
pub fn allowed_while_subscribed(name: &str) -> bool {
    matches!(
        name,
        "subscribe"
            | "unsubscribe"
            | "psubscribe"
            | "punsubscribe"
            | "ssubscribe"
            | "sunsubscribe"
            | "ping"
            | "quit"
            | "reset"
    )
}

/// Redis's `fullname` of a command for error texts: `client|list` for a
/// container's subcommand, the name otherwise.
pub fn full_name(name: &str, args: &Args<'_>) -> String {
    const CONTAINERS: &[&str] = &["client", "command", "config", "debug", "object", "pubsub"];
    match args.get(1) {
        Some(sub) if CONTAINERS.contains(&name) => {
            format!(
                "{name}|{}",
                String::from_utf8_lossy(sub).to_ascii_lowercase()
            )
        }
        _ => name.to_string(),
    }
}

fn confirm(ctx: &mut Ctx<'_>, what: &[u8], name: Option<&[u8]>, count: i64) {
    let mut e = ctx.enc();
    e.push(3);
    e.bulk(what);
    match name {
        Some(n) => e.bulk(n),
        None => e.null(),
    }
    e.integer(count);
}

fn sub_generic(ctx: &mut Ctx<'_>, args: Args<'_>, kind: Kind, what: &[u8]) -> Result {
    let info = ctx.conn.info.clone();
    for name in args.iter().skip(1) {
        let count = ctx.shared.pubsub.subscribe(&info, kind, name);
        confirm(ctx, what, Some(name), count);
    }
    Ok(())
}

fn unsub_generic(ctx: &mut Ctx<'_>, args: Args<'_>, kind: Kind, what: &[u8]) -> Result {
    let info = ctx.conn.info.clone();
    let hub = &ctx.shared.pubsub;
    if args.len() == 1 {
        let names = hub.subscriptions(&info, kind);
        if names.is_empty() {
            let count = info.pubsub.count_for(kind);
            confirm(ctx, what, None, count);
        }
        for name in names {
            let count = hub.unsubscribe(&info, kind, &name);
            confirm(ctx, what, Some(&name), count);
        }
    } else {
        for name in args.iter().skip(1) {
            let count = hub.unsubscribe(&info, kind, name);
            confirm(ctx, what, Some(name), count);
        }
    }
    Ok(())
}

fn subscribe(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    sub_generic(ctx, args, Kind::Channel, b"subscribe")
}

fn psubscribe(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    sub_generic(ctx, args, Kind::Pattern, b"psubscribe")
}

fn unsubscribe(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    unsub_generic(ctx, args, Kind::Channel, b"unsubscribe")
}

fn punsubscribe(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    unsub_generic(ctx, args, Kind::Pattern, b"punsubscribe")
}

fn ssubscribe(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    sub_generic(ctx, args, Kind::Shard, b"ssubscribe")
}

fn sunsubscribe(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    unsub_generic(ctx, args, Kind::Shard, b"sunsubscribe")
}

fn spublish(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let n = ctx.shared.pubsub.spublish(&args[1], &args[2]);
    ctx.int(n);
    Ok(())
}

/// MONITOR: from now on this connection receives a line per command run
/// by anyone (`crate::monitor`). A second MONITOR is ignored without a
/// reply, and inside EXEC it is refused, as in Redis.
fn monitor(ctx: &mut Ctx<'_>, _args: Args<'_>) -> Result {
    if crate::monitor::in_exec() {
        return Err(super::Error::err(
            "MONITOR isn't allowed for DENY BLOCKING client",
        ));
    }
    let info = ctx.conn.info.clone();
    if ctx.shared.pubsub.monitors.add(&info) {
        ctx.ok();
    }
    Ok(())
}

fn publish(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let n = ctx.shared.pubsub.publish(&args[1], &args[2]);
    ctx.int(n);
    Ok(())
}

fn pubsub(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let sub = &args[1];
    let hub = &ctx.shared.pubsub;
    if is(sub, "channels") {
        sub_arity("pubsub|channels", -2, &args)?;
        if args.len() > 3 {
            return Err(super::Error::err(format!(
                "unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
                String::from_utf8_lossy(&sub[..sub.len().min(128)])
            )));
        }
        let list = hub.channels(args.get(2));
        ctx.array(list.len());
        for c in list {
            ctx.bulk(&c);
        }
    } else if is(sub, "numsub") {
        sub_arity("pubsub|numsub", -2, &args)?;
        let counts: Vec<usize> = args.iter().skip(2).map(|c| hub.numsub(c)).collect();
        ctx.array(counts.len() * 2);
        for (c, n) in args.iter().skip(2).zip(counts) {
            ctx.bulk(c);
            ctx.int(n as i64);
        }
    } else if is(sub, "shardchannels") {
        sub_arity("pubsub|shardchannels", -2, &args)?;
        if args.len() > 3 {
            return Err(super::Error::err(format!(
                "unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
                String::from_utf8_lossy(&sub[..sub.len().min(128)])
            )));
        }
        let list = hub.shard_channels(args.get(2));
        ctx.array(list.len());
        for c in list {
            ctx.bulk(&c);
        }
    } else if is(sub, "shardnumsub") {
        sub_arity("pubsub|shardnumsub", -2, &args)?;
        let counts: Vec<usize> = args.iter().skip(2).map(|c| hub.shard_numsub(c)).collect();
        ctx.array(counts.len() * 2);
        for (c, n) in args.iter().skip(2).zip(counts) {
            ctx.bulk(c);
            ctx.int(n as i64);
        }
    } else if is(sub, "numpat") {
        sub_arity("pubsub|numpat", 2, &args)?;
        let n = hub.pattern_count() as i64;
        ctx.int(n);
    } else if is(sub, "help") {
        sub_arity("pubsub|help", 2, &args)?;
        super::server::help(
            ctx,
            "PUBSUB",
            &[
                "CHANNELS [<pattern>]",
                "    Return the currently active channels matching a <pattern> (default: '*').",
                "NUMPAT",
                "    Return number of subscriptions to patterns.",
                "NUMSUB [<channel> ...]",
                "    Return the number of subscribers for the specified channels, excluding",
                "    pattern subscriptions(default: no channels).",
                "SHARDCHANNELS [<pattern>]",
                "    Return the currently active shard level channels matching a <pattern> (default: '*').",
                "SHARDNUMSUB [<shardchannel> ...]",
                "    Return the number of subscribers for the specified shard level channel(s)",
            ],
        );
    } else {
        return Err(unknown_subcommand("pubsub", sub));
    }
    Ok(())
}
