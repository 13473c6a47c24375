//! Pub/sub commands (Redis `pubsub.c`): SUBSCRIBE UNSUBSCRIBE PSUBSCRIBE
//! PUNSUBSCRIBE PUBLISH PUBSUB. Delivery and limits live in
//! `crate::pubsub`; these handlers only change the registry and write the
//! confirmations (RESP2 arrays, RESP3 pushes) with the running count.

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
        "subscribe" | "unsubscribe" | "psubscribe" | "punsubscribe" | "ping" | "quit" | "reset"
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
            let count = info.pubsub.count();
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
            ],
        );
    } else {
        return Err(unknown_subcommand("pubsub", sub));
    }
    Ok(())
}
