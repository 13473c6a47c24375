//! Server commands: COMMAND CLIENT INFO CONFIG TIME LASTSAVE SAVE BGSAVE
//! DEBUG SHUTDOWN.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::Duration;

use basalt_resp::{Args, Encoder};

use super::connection::{bad_client_name, valid_client_name, REDIS_VERSION};
use super::flags::*;
use super::introspection::Named;
use super::{
    def, is, lookup, parse_f64, parse_i64, sub_arity, unknown_subcommand, After, CommandDef, Ctx,
    Error, Group, Result,
};
use crate::config::Appendfsync;
use crate::glob;
use crate::state::now_ms;

const G: Group = Group::Server;

/// The server family's table.
pub const COMMANDS: &[CommandDef] = &[
    def(
        "command",
        -1,
        LOADING | STALE,
        (0, 0, 0),
        G,
        "2.8.13",
        "Returns detailed information about all commands.",
        command,
    ),
    def(
        "client",
        -2,
        NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        Group::Connection,
        "2.4.0",
        "A container for client connection commands.",
        client,
    ),
    def(
        "info",
        -1,
        LOADING | STALE,
        (0, 0, 0),
        G,
        "1.0.0",
        "Returns information and statistics about the server.",
        info,
    ),
    def(
        "config",
        -2,
        ADMIN | NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        G,
        "2.0.0",
        "A container for server configuration commands.",
        config,
    ),
    def(
        "time",
        1,
        LOADING | STALE | FAST,
        (0, 0, 0),
        G,
        "2.6.0",
        "Returns the server time.",
        time,
    ),
    def(
        "lastsave",
        1,
        LOADING | STALE | FAST,
        (0, 0, 0),
        G,
        "1.0.0",
        "Returns the Unix timestamp of the last successful save to disk.",
        lastsave,
    ),
    def(
        "save",
        1,
        ADMIN | NOSCRIPT | NO_ASYNC_LOADING | NO_MULTI,
        (0, 0, 0),
        G,
        "1.0.0",
        "Synchronously saves the database(s) to disk.",
        save,
    ),
    def(
        "bgsave",
        -1,
        ADMIN | NOSCRIPT | NO_ASYNC_LOADING,
        (0, 0, 0),
        G,
        "1.0.0",
        "Asynchronously saves the database(s) to disk.",
        bgsave,
    ),
    def(
        "debug",
        -2,
        ADMIN | NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        G,
        "1.0.0",
        "A container for debugging commands.",
        debug,
    ),
    def(
        "shutdown",
        -1,
        ADMIN | NOSCRIPT | LOADING | STALE | NO_MULTI | ALLOW_BUSY,
        (0, 0, 0),
        G,
        "1.0.0",
        "Synchronously saves the database(s) to disk and shuts down the Redis server.",
        shutdown,
    ),
];

/// Writes a `<CMD> HELP` reply: the header, `lines`, and HELP itself.
pub(crate) fn help(ctx: &mut Ctx<'_>, cmd: &str, lines: &[&str]) {
    ctx.array(lines.len() + 3);
    ctx.simple(
        format!("{cmd} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:").as_bytes(),
    );
    for l in lines {
        ctx.simple(l.as_bytes());
    }
    ctx.simple(b"HELP");
    ctx.simple(b"    Prints this help.");
}

// ---------------------------------------------------------------- COMMAND

/// Commands Redis puts in @dangerous without the admin flag.
const DANGEROUS: &[&str] = &[
    "info",
    "keys",
    "migrate",
    "restore",
    "restore-asking",
    "role",
];

/// Commands whose categories Redis 7.0 sets by hand rather than from
/// their flags and group: containers (their subcommands carry the real
/// ones), and a few that Redis files under other categories.
const CATEGORIES_AS_REDIS: &[(&str, &[&str])] = &[
    ("acl", &["@slow"]),
    ("client", &["@slow"]),
    ("cluster", &["@slow"]),
    ("command", &["@slow", "@connection"]),
    ("config", &["@slow"]),
    ("dbsize", &["@keyspace", "@read", "@fast"]),
    ("flushall", &["@keyspace", "@write", "@slow", "@dangerous"]),
    ("flushdb", &["@keyspace", "@write", "@slow", "@dangerous"]),
    ("function", &["@slow"]),
    ("lastsave", &["@admin", "@fast", "@dangerous"]),
    ("latency", &["@slow"]),
    ("memory", &["@slow"]),
    ("module", &["@slow"]),
    ("object", &["@slow"]),
    ("pubsub", &["@slow"]),
    ("readonly", &["@fast", "@connection"]),
    ("readwrite", &["@fast", "@connection"]),
    ("role", &["@admin", "@fast", "@dangerous"]),
    ("script", &["@slow"]),
    ("slowlog", &["@slow"]),
    (
        "sort",
        &[
            "@write",
            "@set",
            "@sortedset",
            "@list",
            "@slow",
            "@dangerous",
        ],
    ),
    (
        "sort_ro",
        &[
            "@read",
            "@set",
            "@sortedset",
            "@list",
            "@slow",
            "@dangerous",
        ],
    ),
    ("swapdb", &["@keyspace", "@write", "@fast", "@dangerous"]),
    ("xgroup", &["@slow"]),
    ("xinfo", &["@slow"]),
];

/// A command's ACL categories, in the order of Redis's category table
/// (`ACL CAT`), as COMMAND INFO lists them.
fn categories(c: &CommandDef) -> Vec<&'static str> {
    if let Some((_, cats)) = CATEGORIES_AS_REDIS.iter().find(|(n, _)| *n == c.name) {
        return cats.to_vec();
    }
    let group = |g: Group| c.group == g;
    let admin = c.flags & ADMIN != 0;
    let dangerous = admin || DANGEROUS.contains(&c.name);
    [
        ("@keyspace", group(Group::Generic)),
        ("@read", c.flags & READONLY != 0 && !group(Group::Scripting)),
        ("@write", c.flags & WRITE != 0),
        ("@set", group(Group::Set)),
        ("@sortedset", group(Group::SortedSet)),
        ("@list", group(Group::List)),
        ("@hash", group(Group::Hash)),
        ("@string", group(Group::String)),
        ("@bitmap", group(Group::Bitmap)),
        ("@hyperloglog", group(Group::HyperLogLog)),
        ("@geo", group(Group::Geo)),
        ("@stream", group(Group::Stream)),
        ("@pubsub", group(Group::Pubsub)),
        ("@admin", admin),
        ("@fast", c.flags & FAST != 0),
        ("@slow", c.flags & FAST == 0),
        ("@blocking", c.flags & BLOCKING != 0),
        ("@dangerous", dangerous),
        ("@connection", group(Group::Connection)),
        ("@transaction", group(Group::Transactions)),
        ("@scripting", group(Group::Scripting)),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect()
}

fn command_info(e: &mut Encoder<'_>, c: &CommandDef) {
    // A container: Redis's row and its subcommands' rows.
    if super::introspection::write_container_info(e, c) {
        return;
    }
    e.array(10);
    e.bulk(c.name.as_bytes());
    e.integer(c.arity as i64);
    let names: Vec<&str> = NAMES
        .iter()
        .filter(|(bit, _)| c.flags & bit != 0)
        .map(|(_, n)| *n)
        .collect();
    e.set(names.len());
    for n in names {
        e.simple(n.as_bytes());
    }
    e.integer(c.first_key as i64);
    e.integer(c.last_key as i64);
    e.integer(c.step as i64);
    let cats = categories(c);
    e.set(cats.len());
    for cat in cats {
        e.simple(cat.as_bytes());
    }
    // Tips and key specs as redis-server 7.0.15 reports them for the Redis
    // commands Basalt has (`introspection::redis_meta`); Redis 7.0 sends
    // key specs and subcommands as RESP3 sets.
    let meta = super::introspection::redis_meta(c.name);
    match meta {
        Some(m) => super::introspection::write_tagged(e, &m.tips),
        None => e.set(0),
    }
    if let Some(m) = meta {
        super::introspection::write_tagged(e, &m.key_specs);
    } else if c.first_key > 0 {
        // One range key spec derived from first/last/step.
        e.set(1);
        e.map(3);
        e.bulk(b"flags");
        e.array(1);
        e.simple(if c.flags & WRITE != 0 { b"RW" } else { b"RO" });
        e.bulk(b"begin_search");
        e.map(2);
        e.bulk(b"type");
        e.bulk(b"index");
        e.bulk(b"spec");
        e.map(1);
        e.bulk(b"index");
        e.integer(c.first_key as i64);
        e.bulk(b"find_keys");
        e.map(2);
        e.bulk(b"type");
        e.bulk(b"range");
        e.bulk(b"spec");
        e.map(3);
        e.bulk(b"lastkey");
        e.integer(if c.last_key < 0 {
            c.last_key as i64
        } else {
            (c.last_key - c.first_key) as i64
        });
        e.bulk(b"keystep");
        e.integer(c.step as i64);
        e.bulk(b"limit");
        e.integer(0);
    } else {
        e.set(0);
    }
    e.set(0); // subcommands
}

fn command_docs(e: &mut Encoder<'_>, c: &CommandDef) {
    e.bulk(c.name.as_bytes());
    // A Redis command: redis-server 7.0.15's docs, word for word (summary,
    // since, group, complexity, history, arguments, ...; the subcommands
    // Basalt runs), see `introspection::redis_meta`. The table's summaries
    // follow later Redis documentation.
    if let Some(d) = super::introspection::redis_meta(c.name).and_then(|m| m.docs.as_ref()) {
        super::introspection::write_docs(e, c, d);
        return;
    }
    // Basalt's own: what the table says.
    e.map(3);
    e.bulk(b"summary");
    e.bulk(c.summary.as_bytes());
    e.bulk(b"since");
    e.bulk(c.since.as_bytes());
    e.bulk(b"group");
    e.bulk(c.group.name().as_bytes());
}

fn command(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    if args.len() == 1 {
        let all: Vec<_> = super::all().collect();
        let mut e = ctx.enc();
        e.array(all.len());
        for c in all {
            command_info(&mut e, c);
        }
        return Ok(());
    }
    let sub = &args[1];
    if is(sub, "count") {
        sub_arity("command|count", 2, &args)?;
        ctx.int(super::all().count() as i64);
    } else if is(sub, "info") {
        let mut e = ctx.enc();
        if args.len() == 2 {
            let all: Vec<_> = super::all().collect();
            e.array(all.len());
            for c in all {
                command_info(&mut e, c);
            }
        } else {
            e.array(args.len() - 2);
            for name in args.iter().skip(2) {
                match super::introspection::lookup_named(name) {
                    Some(Named::Command(c)) => command_info(&mut e, c),
                    Some(Named::Sub(s)) => super::introspection::write_sub_info(&mut e, s),
                    None => e.null(),
                }
            }
        }
    } else if is(sub, "docs") {
        let found: Vec<Named> = if args.len() == 2 {
            super::all().map(Named::Command).collect()
        } else {
            args.iter()
                .skip(2)
                .filter_map(super::introspection::lookup_named)
                .collect()
        };
        let mut e = ctx.enc();
        e.map(found.len());
        for n in found {
            match n {
                Named::Command(c) => command_docs(&mut e, c),
                Named::Sub(s) => {
                    e.bulk(s.full.as_bytes());
                    super::introspection::write_sub_docs(&mut e, s);
                }
            }
        }
    } else if is(sub, "list") {
        // Subcommands too (`config|get`), after their container, as Redis
        // lists them (COMMAND COUNT counts only commands).
        let all = super::introspection::list_names;
        let names: Vec<&str> = match args.len() {
            2 => all().map(|(n, _)| n).collect(),
            5 if is(&args[2], "filterby") => {
                let what = &args[3];
                let arg = &args[4];
                if is(what, "pattern") {
                    all()
                        .filter(|(n, _)| glob::matches(arg, n.as_bytes(), true))
                        .map(|(n, _)| n)
                        .collect()
                } else if is(what, "aclcat") {
                    let want = format!("@{}", String::from_utf8_lossy(arg).to_ascii_lowercase());
                    all()
                        .filter(|(n, sub)| match sub {
                            Some(s) => super::introspection::sub_categories(s).contains(&&*want),
                            None => lookup(n.as_bytes())
                                .is_some_and(|c| categories(c).contains(&&*want)),
                        })
                        .map(|(n, _)| n)
                        .collect()
                } else if is(what, "module") {
                    Vec::new()
                } else {
                    return Err(Error::Syntax);
                }
            }
            _ => return Err(Error::Syntax),
        };
        ctx.array(names.len());
        for n in names {
            ctx.bulk(n.as_bytes());
        }
    } else if is(sub, "getkeys") {
        sub_arity("command|getkeys", -4, &args)?;
        get_keys(ctx, args, false)?;
    } else if is(sub, "getkeysandflags") {
        sub_arity("command|getkeysandflags", -4, &args)?;
        get_keys(ctx, args, true)?;
    } else if is(sub, "help") {
        help(
            ctx,
            "COMMAND",
            &[
                "(no subcommand)",
                "    Return details about all Redis commands.",
                "COUNT",
                "    Return the total number of commands in this Redis server.",
                "LIST",
                "    Return a list of all commands in this Redis server.",
                "INFO [<command-name> ...]",
                "    Return details about multiple Redis commands.",
                "    If no command names are given, documentation details for all",
                "    commands are returned.",
                "DOCS [<command-name> ...]",
                "    Return documentation details about multiple Redis commands.",
                "    If no command names are given, documentation details for all",
                "    commands are returned.",
                "GETKEYS <full-command>",
                "    Return the keys from a full Redis command.",
                "GETKEYSANDFLAGS <full-command>",
                "    Return the keys and the access flags from a full Redis command.",
            ],
        );
    } else {
        return Err(unknown_subcommand("command", sub));
    }
    Ok(())
}

/// COMMAND GETKEYS / GETKEYSANDFLAGS: the keys of the command in
/// `args[2..]`, found through Redis's key specs where they are complete
/// (`introspection::keys_by_spec`), else through the command's own key
/// finder (`movable_keys`, first/last/step), as Redis falls back to its
/// `getkeys_proc`. With flags, each key comes with its key spec's flags
/// (SORT's own finder gives its key RO/access and STORE's OW/update, the
/// others none, as in Redis 7.0).
fn get_keys(ctx: &mut Ctx<'_>, args: Args<'_>, with_flags: bool) -> Result {
    {
        let Some(c) = lookup(&args[2]) else {
            return Err(Error::err("Invalid command specified"));
        };
        // A container's keys are its subcommand's (OBJECT ENCODING key):
        // Redis looks the subcommand up, with its own arity and key specs.
        let mut spec_name = std::borrow::Cow::Borrowed(c.name);
        let mut arity = c.arity;
        let mut has_keys = c.first_key > 0 || c.flags & MOVABLE_KEYS != 0;
        let container = super::introspection::redis_meta(c.name)
            .filter(|m| !m.subcommands.is_empty() && args.len() > 3);
        if let Some(m) = container {
            let sub = String::from_utf8_lossy(&args[3]).to_ascii_lowercase();
            if !m.subcommands.contains(&sub) {
                return Err(Error::err("Invalid command specified"));
            }
            spec_name = format!("{}|{sub}", c.name).into();
            has_keys = false;
        }
        let meta = super::introspection::redis_meta(&spec_name);
        if let Some(m) = meta.filter(|m| m.arity != 0) {
            arity = m.arity;
        }
        has_keys |= meta.is_some_and(|m| super::introspection::has_key_specs(&m.key_specs));
        if !has_keys {
            return Err(Error::err("The command has no key arguments"));
        }
        let argc = args.len() - 2;
        if !(if arity > 0 {
            argc as i32 == arity
        } else {
            argc as i32 >= -arity
        }) {
            return Err(Error::err(
                "Invalid number of arguments specified for command",
            ));
        }
        let cmd: Vec<&[u8]> = args.iter().skip(2).collect();
        let by_spec = super::introspection::keys_by_spec(&spec_name, &cmd)
            .filter(|k| !k.is_empty() || c.flags & NO_MANDATORY_KEYS != 0);
        if let Some(keys) = by_spec {
            let mut e = ctx.enc();
            e.array(keys.len());
            for (i, flags) in keys {
                if with_flags {
                    e.array(2);
                }
                e.bulk(&args[2 + i]);
                if with_flags {
                    e.set(flags.len());
                    for f in flags {
                        e.simple(f.as_bytes());
                    }
                }
            }
            return Ok(());
        }
        let keys: Vec<usize> = if c.flags & MOVABLE_KEYS != 0 {
            let keys = movable_keys(c.name, &cmd);
            // A script may declare no keys (Redis answers an empty list).
            if keys.is_empty() && c.flags & NO_MANDATORY_KEYS == 0 {
                return Err(Error::err("Invalid arguments specified for command"));
            }
            keys
        } else {
            if c.first_key == 0 {
                return Err(Error::err("The command has no key arguments"));
            }
            c.key_positions(argc).collect()
        };
        let mut e = ctx.enc();
        e.array(keys.len());
        for (n, i) in keys.into_iter().enumerate() {
            if with_flags {
                e.array(2);
            }
            e.bulk(&args[2 + i]);
            if with_flags {
                let flags = super::introspection::proc_key_flags(c.name, n, &cmd);
                e.set(flags.len());
                for f in flags {
                    e.simple(f.as_bytes());
                }
            }
        }
    }
    Ok(())
}

// ----------------------------------------------------------------- CLIENT

/// Tells every open database's expiry sweep to wait `ms` (`None`:
/// resume). A later pause with an earlier deadline does not shorten it.
fn pause_expiry(ctx: &Ctx<'_>, ms: Option<u64>) {
    for n in 0..ctx.shared.keyspace.len() {
        if let Some(db) = ctx.shared.keyspace.read(n).db() {
            db.pause_expiry(ms);
        }
    }
}

fn client(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let sub = &args[1];
    let info = ctx.conn.info.clone();
    if is(sub, "id") {
        sub_arity("client|id", 2, &args)?;
        ctx.int(info.id as i64);
    } else if is(sub, "setname") {
        sub_arity("client|setname", 3, &args)?;
        if !valid_client_name(&args[2]) {
            return Err(bad_client_name());
        }
        *info.name.lock() = args[2].to_vec();
        ctx.ok();
    } else if is(sub, "getname") {
        sub_arity("client|getname", 2, &args)?;
        let name = info.name.lock().clone();
        ctx.opt_bulk((!name.is_empty()).then_some(&name[..]));
    } else if is(sub, "info") {
        sub_arity("client|info", 2, &args)?;
        let line = info.line() + "\n";
        ctx.enc().verbatim(b"txt", line.as_bytes());
    } else if is(sub, "list") {
        let mut ids: Option<Vec<u64>> = None;
        // None = any; Some(true) = pubsub clients; Some(false) = normal.
        let mut pubsub_type: Option<bool> = None;
        let mut j = 2;
        while j < args.len() {
            if is(&args[j], "type") && j + 1 < args.len() {
                let t = &args[j + 1];
                if !(is(t, "normal") || is(t, "master") || is(t, "replica") || is(t, "pubsub")) {
                    return Err(Error::err(format!(
                        "Unknown client type '{}'",
                        String::from_utf8_lossy(t)
                    )));
                }
                if is(t, "normal") || is(t, "pubsub") {
                    pubsub_type = Some(is(t, "pubsub"));
                } else {
                    ids = Some(Vec::new());
                }
                j += 2;
            } else if is(&args[j], "id") && j + 1 < args.len() {
                let mut v = ids.take().unwrap_or_default();
                for a in args.iter().skip(j + 1) {
                    match super::parse_i64(a) {
                        Some(id) if id > 0 => v.push(id as u64),
                        _ => return Err(Error::err("Invalid client ID")),
                    }
                }
                ids = Some(v);
                j = args.len();
            } else {
                return Err(Error::Syntax);
            }
        }
        let mut text = String::new();
        for c in ctx.shared.clients.all() {
            if ids.as_ref().is_none_or(|ids| ids.contains(&c.id))
                && pubsub_type.is_none_or(|p| c.pubsub.subscribed() == p)
            {
                text.push_str(&c.line());
                text.push('\n');
            }
        }
        ctx.enc().verbatim(b"txt", text.as_bytes());
    } else if is(sub, "kill") {
        client_kill(ctx, args)?;
    } else if is(sub, "setinfo") {
        sub_arity("client|setinfo", 4, &args)?;
        let attr = &args[2];
        let slot = if is(attr, "lib-name") {
            &info.lib_name
        } else if is(attr, "lib-ver") {
            &info.lib_ver
        } else {
            return Err(Error::err(format!(
                "Unrecognized option '{}'",
                String::from_utf8_lossy(attr)
            )));
        };
        if !valid_client_name(&args[3]) {
            return Err(Error::err(format!(
                "{} cannot contain spaces, newlines or special characters.",
                String::from_utf8_lossy(attr).to_ascii_lowercase()
            )));
        }
        *slot.lock() = args[3].to_vec();
        ctx.ok();
    } else if is(sub, "no-evict") {
        sub_arity("client|no-evict", 3, &args)?;
        if is(&args[2], "on") {
            info.no_evict.store(true, Ordering::Relaxed);
        } else if is(&args[2], "off") {
            info.no_evict.store(false, Ordering::Relaxed);
        } else {
            return Err(Error::Syntax);
        }
        ctx.ok();
    } else if is(sub, "unblock") {
        crate::blocking::client_unblock(ctx, args)?;
    } else if is(sub, "tracking") {
        sub_arity("client|tracking", -3, &args)?;
        client_tracking(ctx, args)?;
    } else if is(sub, "caching") {
        sub_arity("client|caching", 3, &args)?;
        let t = &info.pubsub.tracking;
        if !t.is_on() {
            return Err(Error::err("CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"));
        }
        let opts = t.options();
        if is(&args[2], "yes") {
            if !opts.optin {
                return Err(Error::err(
                    "CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
                ));
            }
        } else if is(&args[2], "no") {
            if !opts.optout {
                return Err(Error::err(
                    "CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
                ));
            }
        } else {
            return Err(Error::Syntax);
        }
        info.pubsub
            .modes
            .fetch_or(crate::pubsub::modes::CACHING, Ordering::Relaxed);
        ctx.ok();
    } else if is(sub, "getredir") {
        sub_arity("client|getredir", 2, &args)?;
        let t = &info.pubsub.tracking;
        let id = if t.is_on() {
            t.options().redirect as i64
        } else {
            -1
        };
        ctx.int(id);
    } else if is(sub, "trackinginfo") {
        sub_arity("client|trackinginfo", 2, &args)?;
        client_trackinginfo(ctx);
    } else if is(sub, "reply") {
        sub_arity("client|reply", 3, &args)?;
        use crate::pubsub::modes::{REPLY_OFF, REPLY_SKIP, REPLY_SKIP_NEXT};
        let modes = &info.pubsub.modes;
        if is(&args[2], "on") {
            modes.fetch_and(
                !(REPLY_OFF | REPLY_SKIP | REPLY_SKIP_NEXT),
                Ordering::Relaxed,
            );
            ctx.ok();
        } else if is(&args[2], "off") {
            modes.fetch_or(REPLY_OFF, Ordering::Relaxed);
        } else if is(&args[2], "skip") {
            if modes.load(Ordering::Relaxed) & REPLY_OFF == 0 {
                modes.fetch_or(REPLY_SKIP_NEXT, Ordering::Relaxed);
            }
        } else {
            return Err(Error::Syntax);
        }
    } else if is(sub, "pause") {
        sub_arity("client|pause", -3, &args)?;
        if args.len() > 4 {
            return Err(Error::err(format!(
                "unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
                String::from_utf8_lossy(sub)
            )));
        }
        use crate::monitor::PauseMode;
        let mode = match args.get(3) {
            None => PauseMode::All,
            Some(m) if is(m, "write") => PauseMode::Write,
            Some(m) if is(m, "all") => PauseMode::All,
            Some(_) => return Err(Error::err("CLIENT PAUSE mode must be WRITE or ALL")),
        };
        let timeout = crate::monitor::pause_timeout(&args[2]).map_err(|e| Error::Msg(e.into()))?;
        ctx.shared
            .pubsub
            .pause
            .pause(std::time::Instant::now() + timeout, mode);
        // Keys are not expired while clients are paused (as in Redis): the
        // engines' sweeps wait for the deadline.
        pause_expiry(ctx, Some(timeout.as_millis() as u64));
        ctx.ok();
    } else if is(sub, "unpause") {
        sub_arity("client|unpause", 2, &args)?;
        ctx.shared.pubsub.pause.unpause();
        pause_expiry(ctx, None);
        ctx.ok();
    } else if is(sub, "help") {
        help(
            ctx,
            "CLIENT",
            &[
                "CACHING (YES|NO)",
                "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
                "GETREDIR",
                "    Return the client ID we are redirecting to when tracking is enabled.",
                "GETNAME",
                "    Return the name of the current connection.",
                "ID",
                "    Return the ID of the current connection.",
                "INFO",
                "    Return information about the current client connection.",
                "KILL <ip:port>",
                "    Kill connection made from <ip:port>.",
                "KILL <option> <value> [<option> <value> [...]]",
                "    Kill connections. Options are:",
                "    * ADDR (<ip:port>|<unixsocket>:0)",
                "      Kill connections made from the specified address",
                "    * LADDR (<ip:port>|<unixsocket>:0)",
                "      Kill connections made to specified local address",
                "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
                "      Kill connections by type.",
                "    * USER <username>",
                "      Kill connections authenticated by <username>.",
                "    * SKIPME (YES|NO)",
                "      Skip killing current connection (default: yes).",
                "LIST [options ...]",
                "    Return information about client connections. Options:",
                "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
                "      Return clients of specified type.",
                "UNPAUSE",
                "    Stop the current client pause, resuming traffic.",
                "PAUSE <timeout> [WRITE|ALL]",
                "    Suspend all, or just write, clients for <timeout> milliseconds.",
                "REPLY (ON|OFF|SKIP)",
                "    Control the replies sent to the current connection.",
                "SETNAME <name>",
                "    Assign the name <name> to the current connection.",
                "UNBLOCK <clientid> [TIMEOUT|ERROR]",
                "    Unblock the specified blocked client.",
                "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
                "         [OPTIN] [OPTOUT] [NOLOOP]",
                "    Control server assisted client side caching.",
                "TRACKINGINFO",
                "    Report tracking status for the current connection.",
                "NO-EVICT (ON|OFF)",
                "    Protect current client connection from eviction.",
            ],
        );
    } else {
        return Err(unknown_subcommand("client", sub));
    }
    Ok(())
}

/// CLIENT TRACKING ON|OFF [REDIRECT id] [BCAST] [PREFIX p]... [OPTIN]
/// [OPTOUT] [NOLOOP], checked in Redis 7.0's order (`crate::tracking`).
fn client_tracking(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let info = ctx.conn.info.clone();
    let mut opts = crate::tracking::Options::default();
    let mut target = std::sync::Weak::new();
    let mut j = 3;
    while j < args.len() {
        let more = j + 1 < args.len();
        let a = &args[j];
        if is(a, "redirect") && more {
            j += 1;
            if opts.redirect != 0 {
                return Err(Error::err(
                    "A client can only redirect to a single other client",
                ));
            }
            let id = super::int_arg(&args[j])?;
            let found = ctx
                .shared
                .clients
                .all()
                .into_iter()
                .find(|c| id > 0 && c.id == id as u64);
            let Some(found) = found else {
                return Err(Error::err(
                    "The client ID you want redirect to does not exist",
                ));
            };
            target = std::sync::Arc::downgrade(&found);
            opts.redirect = id as u64;
        } else if is(a, "bcast") {
            opts.bcast = true;
        } else if is(a, "optin") {
            opts.optin = true;
        } else if is(a, "optout") {
            opts.optout = true;
        } else if is(a, "noloop") {
            opts.noloop = true;
        } else if is(a, "prefix") && more {
            j += 1;
            opts.prefixes.push(bytes::Bytes::copy_from_slice(&args[j]));
        } else {
            return Err(Error::Syntax);
        }
        j += 1;
    }
    let tracking = &ctx.shared.pubsub.tracking;
    if is(&args[2], "on") {
        let t = &info.pubsub.tracking;
        let old = t.is_on().then(|| t.options());
        if !opts.bcast && !opts.prefixes.is_empty() {
            return Err(Error::err(
                "PREFIX option requires BCAST mode to be enabled",
            ));
        }
        if old.as_ref().is_some_and(|o| o.bcast != opts.bcast) {
            return Err(Error::err("You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode."));
        }
        if opts.bcast && (opts.optin || opts.optout) {
            return Err(Error::err("OPTIN and OPTOUT are not compatible with BCAST"));
        }
        if opts.optin && opts.optout {
            return Err(Error::err(
                "You can't specify both OPTIN mode and OPTOUT mode",
            ));
        }
        if old
            .as_ref()
            .is_some_and(|o| (opts.optin && o.optout) || (opts.optout && o.optin))
        {
            return Err(Error::err("You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode."));
        }
        if opts.bcast {
            let existing = old.map(|o| o.prefixes).unwrap_or_default();
            let overlap = |a: &[u8], b: &[u8]| {
                let n = a.len().min(b.len());
                a[..n] == b[..n]
            };
            for (i, p) in opts.prefixes.iter().enumerate() {
                if let Some(e) = existing.iter().find(|e| overlap(e, p)) {
                    return Err(Error::err(format!(
                        "Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                        String::from_utf8_lossy(p),
                        String::from_utf8_lossy(e)
                    )));
                }
                if let Some(q) = opts.prefixes[i + 1..].iter().find(|q| overlap(p, q)) {
                    return Err(Error::err(format!(
                        "Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                        String::from_utf8_lossy(p),
                        String::from_utf8_lossy(q)
                    )));
                }
            }
        }
        tracking.enable(&info, opts, target);
    } else if is(&args[2], "off") {
        tracking.disable(&info);
    } else {
        return Err(Error::Syntax);
    }
    ctx.ok();
    Ok(())
}

/// CLIENT TRACKINGINFO: flags, redirect, prefixes (Redis 7.0's shape).
fn client_trackinginfo(ctx: &mut Ctx<'_>) {
    let t = &ctx.conn.info.pubsub.tracking;
    let on = t.is_on();
    let opts = t.options();
    let caching =
        ctx.conn.info.pubsub.modes.load(Ordering::Relaxed) & crate::pubsub::modes::CACHING != 0;
    let mut flags: Vec<&str> = Vec::new();
    if !on {
        flags.push("off");
    } else {
        flags.push("on");
        if opts.bcast {
            flags.push("bcast");
        }
        if opts.optin {
            flags.push("optin");
            if caching {
                flags.push("caching-yes");
            }
        }
        if opts.optout {
            flags.push("optout");
            if caching {
                flags.push("caching-no");
            }
        }
        if opts.noloop {
            flags.push("noloop");
        }
        if t.broken_redirect() {
            flags.push("broken_redirect");
        }
    }
    let mut prefixes = if on { opts.prefixes } else { Vec::new() };
    prefixes.sort();
    let mut e = ctx.enc();
    e.map(3);
    e.bulk(b"flags");
    e.set(flags.len());
    for f in flags {
        e.bulk(f.as_bytes());
    }
    e.bulk(b"redirect");
    e.integer(if on { opts.redirect as i64 } else { -1 });
    e.bulk(b"prefixes");
    e.array(prefixes.len());
    for p in prefixes {
        e.bulk(&p);
    }
}

fn client_kill(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    sub_arity("client|kill", -3, &args)?;
    let me = ctx.conn.info.id;
    if args.len() == 3 {
        // Old form: CLIENT KILL addr:port -> +OK or an error.
        let addr = String::from_utf8_lossy(&args[2]).into_owned();
        let target = ctx
            .shared
            .clients
            .all()
            .into_iter()
            .find(|c| c.addr.to_string() == addr);
        let Some(target) = target else {
            return Err(Error::err("No such client"));
        };
        ctx.ok();
        if target.id == me {
            ctx.after = Some(After::Close);
        } else {
            target.kill();
        }
        return Ok(());
    }
    let (mut id, mut addr, mut laddr, mut user) = (None, None, None, None);
    // None = normal and pubsub clients; Some(p) = only pubsub (p) or only
    // normal (!p); master/replica match nobody.
    let mut typ: Option<Option<bool>> = Some(None);
    let mut skipme = true;
    let mut j = 2;
    while j < args.len() {
        if j + 1 >= args.len() {
            return Err(Error::Syntax);
        }
        let (opt, val) = (&args[j], &args[j + 1]);
        if is(opt, "id") {
            match super::parse_i64(val) {
                Some(v) if v > 0 => id = Some(v as u64),
                _ => return Err(Error::err("client-id should be greater than 0")),
            }
        } else if is(opt, "addr") {
            addr = Some(String::from_utf8_lossy(val).into_owned());
        } else if is(opt, "laddr") {
            laddr = Some(String::from_utf8_lossy(val).into_owned());
        } else if is(opt, "user") {
            user = Some(val.to_vec());
        } else if is(opt, "type") {
            if is(val, "normal") {
                typ = Some(Some(false));
            } else if is(val, "pubsub") {
                typ = Some(Some(true));
            } else if is(val, "master") || is(val, "replica") || is(val, "slave") {
                typ = None;
            } else {
                return Err(Error::err(format!(
                    "Unknown client type '{}'",
                    String::from_utf8_lossy(val)
                )));
            }
        } else if is(opt, "skipme") {
            if is(val, "yes") {
                skipme = true;
            } else if is(val, "no") {
                skipme = false;
            } else {
                return Err(Error::Syntax);
            }
        } else {
            return Err(Error::Syntax);
        }
        j += 2;
    }
    let mut killed = 0;
    for c in ctx.shared.clients.all() {
        let hit = typ.is_some_and(|t| t.is_none_or(|p| c.pubsub.subscribed() == p))
            && id.is_none_or(|i| c.id == i)
            && addr.as_ref().is_none_or(|a| c.addr.to_string() == *a)
            && laddr.as_ref().is_none_or(|a| c.laddr.to_string() == *a)
            && user.as_ref().is_none_or(|u| u == b"default")
            && !(skipme && c.id == me);
        if hit {
            killed += 1;
            if c.id == me {
                ctx.after = Some(After::Close);
            } else {
                c.kill();
            }
        }
    }
    ctx.int(killed);
    Ok(())
}

// ------------------------------------------------------------------- INFO

fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b < 1024.0 {
        format!("{bytes}B")
    } else if b < 1024.0 * 1024.0 {
        format!("{:.2}K", b / 1024.0)
    } else if b < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2}M", b / 1024.0 / 1024.0)
    } else {
        format!("{:.2}G", b / 1024.0 / 1024.0 / 1024.0)
    }
}

/// Resident set size from /proc (0 where unavailable).
/// Bytes the allocator has handed out and not had back: glibc's
/// `mallinfo2` (in-use chunks of every arena plus the chunks it mapped on
/// their own). What Redis calls `used_memory`; 0 where it is unknown.
pub(crate) fn allocated_bytes() -> u64 {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's statistics.
        let m = unsafe { libc::mallinfo2() };
        (m.uordblks + m.hblkhd) as u64
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        0
    }
}

/// `(anonymous, file-backed)` resident bytes of this process
/// (`RssAnon`, `RssFile` of /proc/self/status): the heap and stacks, and
/// the data files' pages seen through their maps.
pub(crate) fn resident_split() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name| proc_kb_field(&status, name).unwrap_or(0);
    (field("RssAnon:"), field("RssFile:"))
}

/// The `name` line of a /proc file in `kB` (/proc/meminfo,
/// /proc/self/status), in bytes.
pub(crate) fn proc_kb_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

pub(crate) fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn cpu_times() -> (f64, f64) {
    // SAFETY: getrusage writes into the zeroed struct we pass and has no
    // other effect.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (t(ru.ru_stime), t(ru.ru_utime))
}

/// INFO `replication` of a node in a replicated group: Redis's fields,
/// with offsets that are Raft log indexes (`crate::repl`).
fn replication_info(out: &mut String, sh: &crate::Shared) {
    let repl = sh.repl.get().expect("checked by the caller");
    let v = repl.view();
    let mut kv = |k: &str, val: String| {
        let _ = write!(out, "{k}:{val}\r\n");
    };
    if v.leader == Some(v.me) {
        let followers: Vec<_> = v.members.iter().filter(|m| m.id != v.me).collect();
        kv("role", "master".into());
        kv("connected_slaves", followers.len().to_string());
        for (i, m) in followers.iter().enumerate() {
            let (ip, port) = m.client_host_port();
            let offset = m.matched.unwrap_or(0);
            let state = if m.matched.is_some() {
                "online"
            } else {
                "wait_bgsave"
            };
            let lag = v.last_log.saturating_sub(offset);
            kv(
                &format!("slave{i}"),
                format!("ip={ip},port={port},state={state},offset={offset},lag={lag}"),
            );
        }
    } else {
        let leader = v.leader_member();
        let (host, port) = leader.map_or(("", "0"), |m| m.client_host_port());
        kv("role", "slave".into());
        kv("master_host", host.into());
        kv("master_port", port.into());
        kv(
            "master_link_status",
            if leader.is_some() { "up" } else { "down" }.into(),
        );
        kv("master_last_io_seconds_ago", "0".into());
        kv("master_sync_in_progress", "0".into());
        kv("slave_read_repl_offset", v.applied.to_string());
        kv("slave_repl_offset", v.applied.to_string());
        kv("slave_priority", "100".into());
        kv("slave_read_only", "1".into());
        kv("replica_announced", "1".into());
        kv("connected_slaves", "0".into());
    }
    kv("master_failover_state", "no-failover".into());
    kv("master_replid", format!("{:040x}", v.term));
    kv(
        "master_replid2",
        "0000000000000000000000000000000000000000".into(),
    );
    kv("master_repl_offset", v.applied.to_string());
    kv("second_repl_offset", "-1".into());
    kv("repl_backlog_active", "1".into());
    kv("basalt_raft_node_id", v.me.to_string());
    kv("basalt_raft_term", v.term.to_string());
    kv("basalt_raft_last_log_index", v.last_log.to_string());
    kv("basalt_raft_snapshot_index", v.snapshot.to_string());
    kv("basalt_raft_purged_index", v.purged.to_string());
    kv("basalt_raft_threads", sh.config.raft_threads.to_string());
    kv(
        "basalt_raft_apply_threads",
        sh.config.raft_apply_threads.to_string(),
    );
    kv(
        "basalt_raft_lane_stretches",
        repl.stats.stretches.load(Ordering::Relaxed).to_string(),
    );
    kv(
        "basalt_raft_lane_proposals",
        repl.stats.proposals.load(Ordering::Relaxed).to_string(),
    );
    // Where a write's time goes, means since start (`repl::ReplStats`).
    let l = &repl.stats;
    let mean = crate::repl::ReplStats::mean;
    kv(
        "basalt_raft_entries_submitted",
        l.submitted.load(Ordering::Relaxed).to_string(),
    );
    kv(
        "basalt_raft_proposals_per_entry",
        format!(
            "{:.2}",
            l.submitted_proposals.load(Ordering::Relaxed) as f64
                / l.submitted.load(Ordering::Relaxed).max(1) as f64
        ),
    );
    kv(
        "basalt_raft_queue_mean_us",
        mean(&l.queue_us, &l.submitted_proposals).to_string(),
    );
    kv(
        "basalt_raft_round_mean_us",
        mean(&l.round_us, &l.submitted).to_string(),
    );
    kv(
        "basalt_raft_entries_applied",
        l.applied.load(Ordering::Relaxed).to_string(),
    );
    kv(
        "basalt_raft_entries_applied_on_raft_thread",
        l.applied_on_raft_thread.load(Ordering::Relaxed).to_string(),
    );
    kv(
        "basalt_raft_apply_mean_us",
        mean(&l.apply_us, &l.applied).to_string(),
    );
    kv(
        "basalt_raft_leader_id",
        v.leader.map_or("none".into(), |l| l.to_string()),
    );
}

const SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "keyspace",
    "commandstats",
    "errorstats",
    "latencystats",
    "cluster",
];

/// The INFO text for the named sections (lower-case).
pub fn info_text(ctx: &Ctx<'_>, sections: &[String]) -> String {
    let sh = ctx.shared;
    let all = sections.is_empty()
        || sections
            .iter()
            .any(|s| s == "all" || s == "default" || s == "everything");
    let want = |s: &str| all || sections.iter().any(|x| x == s);
    let mut out = String::new();
    let mut n = 0;
    let mut head = |out: &mut String, title: &str| {
        if n > 0 {
            out.push_str("\r\n");
        }
        n += 1;
        let _ = write!(out, "# {title}\r\n");
    };
    macro_rules! kv {
        ($out:expr, $k:expr, $v:expr) => {
            let _ = write!($out, "{}:{}\r\n", $k, $v);
        };
    }
    let uptime = sh.started.elapsed().as_secs();
    if want("server") {
        head(&mut out, "Server");
        kv!(out, "redis_version", REDIS_VERSION);
        kv!(out, "basalt_version", env!("CARGO_PKG_VERSION"));
        kv!(out, "redis_git_sha1", "00000000");
        kv!(out, "redis_git_dirty", 0);
        kv!(out, "redis_build_id", "0");
        kv!(out, "redis_mode", "standalone");
        kv!(
            out,
            "os",
            format!("{} {}", std::env::consts::OS, std::env::consts::ARCH)
        );
        kv!(out, "arch_bits", usize::BITS);
        kv!(out, "monotonic_clock", "POSIX clock_gettime");
        kv!(out, "multiplexing_api", "epoll");
        kv!(out, "process_id", std::process::id());
        kv!(out, "process_supervised", "no");
        kv!(out, "run_id", sh.run_id);
        kv!(out, "tcp_port", sh.addr.port());
        kv!(out, "server_time_usec", now_ms() * 1000);
        kv!(out, "uptime_in_seconds", uptime);
        kv!(out, "uptime_in_days", uptime / 86400);
        kv!(out, "hz", 10);
        kv!(out, "configured_hz", 10);
        kv!(
            out,
            "executable",
            std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        );
        kv!(
            out,
            "config_file",
            sh.config
                .config_file
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        );
    }
    if want("clients") {
        head(&mut out, "Clients");
        kv!(out, "connected_clients", sh.clients.len());
        kv!(out, "cluster_connections", 0);
        kv!(out, "maxclients", sh.security.maxclients());
        kv!(out, "blocked_clients", sh.blocking.blocked_clients());
        kv!(out, "tracking_clients", sh.pubsub.tracking.client_count());
        kv!(out, "clients_in_timeout_table", 0);
    }
    if want("memory") {
        head(&mut out, "Memory");
        let rss = rss_bytes();
        let index: u64 = (0..sh.keyspace.len())
            .map(|n| sh.keyspace.figures(n).index_bytes)
            .sum();
        // used_memory is what the allocator holds (the index, caches,
        // buffers), as in Redis; the resident size also counts the data
        // files' pages mapped in, which the kernel may drop at any time,
        // so it is split out: basalt_rss_file_bytes (the maps) and
        // basalt_rss_anon_bytes (heap and stacks).
        let used = match allocated_bytes() {
            0 => rss,
            n => n,
        };
        let (anon, file) = resident_split();
        kv!(out, "used_memory", used);
        kv!(out, "used_memory_human", human(used));
        kv!(out, "used_memory_rss", rss);
        kv!(out, "used_memory_rss_human", human(rss));
        kv!(out, "basalt_index_bytes", index);
        kv!(out, "basalt_rss_anon_bytes", anon);
        kv!(out, "basalt_rss_file_bytes", file);
        let (scripts, libraries, functions) = crate::script::info(&sh.scripts);
        kv!(
            out,
            "used_memory_vm_eval",
            crate::script::lua_memory(&sh.scripts)
        );
        kv!(out, "number_of_cached_scripts", scripts);
        kv!(out, "number_of_functions", functions);
        kv!(out, "number_of_libraries", libraries);
        let max = sh.maxmemory.limit();
        kv!(out, "maxmemory", max);
        kv!(out, "maxmemory_human", human(max));
        kv!(out, "maxmemory_policy", "noeviction");
        kv!(out, "mem_allocator", "libc");
    }
    if want("persistence") {
        head(&mut out, "Persistence");
        kv!(out, "loading", 0);
        kv!(out, "async_loading", 0);
        kv!(
            out,
            "rdb_changes_since_last_save",
            sh.stats.dirty.load(Ordering::Relaxed)
        );
        kv!(out, "rdb_bgsave_in_progress", 0);
        kv!(
            out,
            "rdb_last_save_time",
            sh.lastsave.load(Ordering::Relaxed)
        );
        kv!(out, "rdb_last_bgsave_status", "ok");
        kv!(out, "aof_enabled", 1);
        kv!(out, "aof_rewrite_in_progress", 0);
        let write_error = sh.keyspace.write_error();
        kv!(
            out,
            "aof_last_write_status",
            if write_error.is_some() { "err" } else { "ok" }
        );
        // Basalt's own: why writes are refused (empty when they are not).
        kv!(
            out,
            "basalt_write_error",
            write_error.unwrap_or_default().replace(['\r', '\n'], " ")
        );
        kv!(out, "appendfsync", sh.settings.appendfsync().as_str());
    }
    if want("stats") {
        head(&mut out, "Stats");
        let st = &sh.stats;
        kv!(
            out,
            "total_connections_received",
            st.connections.load(Ordering::Relaxed)
        );
        let (ops, input_kbps, output_kbps) = st.rates();
        kv!(
            out,
            "total_commands_processed",
            st.commands.load(Ordering::Relaxed)
        );
        kv!(out, "instantaneous_ops_per_sec", ops);
        kv!(
            out,
            "total_net_input_bytes",
            st.net_input.load(Ordering::Relaxed)
        );
        kv!(
            out,
            "total_net_output_bytes",
            st.net_output.load(Ordering::Relaxed)
        );
        kv!(out, "instantaneous_input_kbps", format!("{input_kbps:.2}"));
        kv!(
            out,
            "instantaneous_output_kbps",
            format!("{output_kbps:.2}")
        );
        kv!(
            out,
            "rejected_connections",
            sh.security.rejected.load(Ordering::Relaxed)
        );
        kv!(out, "unexpected_error_replies", 0);
        kv!(out, "total_error_replies", sh.errors.total());
        kv!(
            out,
            "basalt_rejected_commands",
            st.rejected.load(Ordering::Relaxed)
        );
        kv!(
            out,
            "basalt_client_worker_moves",
            st.client_moves.load(Ordering::Relaxed)
        );
        kv!(
            out,
            "basalt_zset_index_builds_off_worker",
            st.zset_index_builds.load(Ordering::Relaxed)
        );
        kv!(
            out,
            "basalt_stream_index_builds_off_worker",
            st.stream_index_builds.load(Ordering::Relaxed)
        );
        kv!(
            out,
            "basalt_cold_reads",
            sh.readers.served.load(Ordering::Relaxed)
        );
        kv!(
            out,
            "basalt_cold_reads_io_uring",
            crate::uring::READS.load(Ordering::Relaxed)
        );
        kv!(
            out,
            "basalt_io_uring_rings",
            crate::uring::RINGS.load(Ordering::Relaxed)
        );
        kv!(
            out,
            "basalt_io_uring_depth",
            crate::uring::DEPTH.load(Ordering::Relaxed)
        );
        kv!(
            out,
            "basalt_cold_reads_staged",
            basalt_engine::staged_reads()
        );
        let (direct, cached) = basalt_engine::cold_read_counts();
        kv!(out, "basalt_disk_reads_direct", direct);
        kv!(out, "basalt_disk_reads_cached", cached);
        let (mut stalls, mut stalled) = (0u64, 0u64);
        for n in 0..sh.keyspace.len() {
            if let Some(db) = sh.keyspace.read(n).db() {
                let st = db.stats();
                stalls += st.write_stalls;
                stalled += u64::from(st.write_stalled);
            }
        }
        kv!(out, "basalt_write_stalls", stalls);
        kv!(out, "basalt_write_stalled", stalled);
        kv!(out, "expired_keys", st.expired.load(Ordering::Relaxed));
        kv!(out, "evicted_keys", 0);
        let (hits, misses) = sh.lookups.totals();
        kv!(out, "keyspace_hits", hits);
        kv!(out, "keyspace_misses", misses);
        kv!(out, "pubsub_channels", sh.pubsub.channel_count());
        kv!(out, "pubsub_patterns", sh.pubsub.pattern_count());
        kv!(out, "pubsubshard_channels", sh.pubsub.shard_channel_count());
        let (keys, items, prefixes) = sh.pubsub.tracking.totals();
        kv!(out, "tracking_total_keys", keys);
        kv!(out, "tracking_total_items", items);
        kv!(out, "tracking_total_prefixes", prefixes);
        // Redis 7.0 has no such counter; later Redis versions use this name.
        kv!(
            out,
            "client_output_buffer_limit_disconnections",
            sh.pubsub.disconnections.load(Ordering::Relaxed)
        );
    }
    if want("replication") && sh.repl.get().is_some() {
        head(&mut out, "Replication");
        replication_info(&mut out, sh);
    } else if want("replication") {
        head(&mut out, "Replication");
        kv!(out, "role", "master");
        kv!(out, "connected_slaves", 0);
        kv!(out, "master_failover_state", "no-failover");
        kv!(out, "master_replid", sh.run_id);
        kv!(
            out,
            "master_replid2",
            "0000000000000000000000000000000000000000"
        );
        kv!(out, "master_repl_offset", 0);
        kv!(out, "second_repl_offset", -1);
        kv!(out, "repl_backlog_active", 0);
    }
    if want("cpu") {
        head(&mut out, "CPU");
        let (sys, user) = cpu_times();
        kv!(out, "used_cpu_sys", format!("{sys:.6}"));
        kv!(out, "used_cpu_user", format!("{user:.6}"));
    }
    // Not part of the default set (as in Redis): only when named, or with
    // `all` / `everything`.
    let named = |s: &str| {
        sections
            .iter()
            .any(|x| x == s || x == "all" || x == "everything")
    };
    if named("commandstats") {
        head(&mut out, "Commandstats");
        for (name, t) in sh.cmdstats.snapshot() {
            let usec = t.nanos / 1000;
            let per_call = if t.calls > 0 {
                t.nanos as f64 / 1000.0 / t.calls as f64
            } else {
                0.0
            };
            let _ = write!(
                out,
                "cmdstat_{name}:calls={},usec={usec},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}\r\n",
                t.calls, t.rejected, t.failed
            );
        }
    }
    if want("errorstats") {
        head(&mut out, "Errorstats");
        for (code, n) in sh.errors.codes() {
            let _ = write!(
                out,
                "errorstat_{}:count={n}\r\n",
                String::from_utf8_lossy(&code)
            );
        }
    }
    if named("latencystats") {
        head(&mut out, "Latencystats");
        out.push_str(&sh.cmdstats.latency_percentiles());
    }
    if want("cluster") {
        head(&mut out, "Cluster");
        // Basalt does not shard (yet): clients read this to pick a mode.
        kv!(out, "cluster_enabled", 0);
    }
    if want("keyspace") {
        head(&mut out, "Keyspace");
        for db in 0..sh.keyspace.len() {
            let f = sh.keyspace.figures(db);
            if f.keys > 0 {
                let _ = write!(
                    out,
                    "db{db}:keys={},expires={},avg_ttl=0\r\n",
                    f.keys, f.expires
                );
            }
        }
    }
    out
}

fn info(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let sections: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .filter(|s| {
            SECTIONS.contains(&s.as_str()) || s == "all" || s == "default" || s == "everything"
        })
        .collect();
    let text = if args.len() > 1 && sections.is_empty() {
        String::new()
    } else {
        info_text(ctx, &sections)
    };
    ctx.enc().verbatim(b"txt", text.as_bytes());
    Ok(())
}

// ----------------------------------------------------------------- CONFIG

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Fixed at start-up.
    Immutable,
    /// appendfsync.
    Appendfsync,
    /// Any integer; accepted and recorded, no effect.
    Int,
    /// yes/no; accepted and recorded, no effect.
    Bool,
    /// Any string; accepted and recorded, no effect.
    Str,
    /// notify-keyspace-events.
    NotifyEvents,
    /// client-output-buffer-limit.
    ObufLimit,
    /// A setting of `crate::auth` (password, protected mode, limits).
    Security,
    /// busy-reply-threshold / lua-time-limit (ms, >= 0).
    BusyMs,
    /// Slow log and latency monitor thresholds (`crate::cmdstats`).
    Monitor,
    /// maxmemory (`crate::maxmemory`).
    MaxMemory,
}

/// Settings CONFIG knows: (name, kind, default). Immutable ones read their
/// value from the running configuration.
const PARAMS: &[(&str, Kind, &str)] = &[
    ("port", Kind::Immutable, ""),
    ("bind", Kind::Immutable, ""),
    ("dir", Kind::Immutable, ""),
    ("http-port", Kind::Immutable, ""),
    ("data-file-size", Kind::Immutable, ""),
    ("cold-readers", Kind::Immutable, ""),
    ("io-uring", Kind::Immutable, ""),
    ("read-residency", Kind::Immutable, ""),
    ("databases", Kind::Immutable, ""),
    ("loglevel", Kind::Immutable, ""),
    ("appendfsync", Kind::Appendfsync, ""),
    ("appendonly", Kind::Immutable, "yes"),
    ("proto-max-bulk-len", Kind::Security, ""),
    ("client-query-buffer-limit", Kind::Security, ""),
    ("requirepass", Kind::Security, ""),
    ("protected-mode", Kind::Security, ""),
    ("maxmemory", Kind::MaxMemory, ""),
    ("maxmemory-policy", Kind::Immutable, "noeviction"),
    ("maxclients", Kind::Security, ""),
    ("save", Kind::Str, ""),
    ("timeout", Kind::Int, "0"),
    ("tcp-keepalive", Kind::Int, "300"),
    ("hz", Kind::Int, "10"),
    ("notify-keyspace-events", Kind::NotifyEvents, ""),
    ("client-output-buffer-limit", Kind::ObufLimit, ""),
    ("slowlog-log-slower-than", Kind::Monitor, ""),
    ("slowlog-max-len", Kind::Monitor, ""),
    ("latency-monitor-threshold", Kind::Monitor, ""),
    ("latency-tracking", Kind::Monitor, ""),
    ("latency-tracking-info-percentiles", Kind::Monitor, ""),
    ("maxmemory-samples", Kind::Int, "5"),
    ("activerehashing", Kind::Bool, "yes"),
    ("lazyfree-lazy-eviction", Kind::Bool, "no"),
    ("lazyfree-lazy-expire", Kind::Bool, "no"),
    ("lazyfree-lazy-server-del", Kind::Bool, "no"),
    ("lazyfree-lazy-user-del", Kind::Bool, "no"),
    ("lazyfree-lazy-user-flush", Kind::Bool, "no"),
    ("hash-max-listpack-entries", Kind::Int, "128"),
    ("hash-max-listpack-value", Kind::Int, "64"),
    ("hash-max-ziplist-entries", Kind::Int, "128"),
    ("hash-max-ziplist-value", Kind::Int, "64"),
    ("set-max-intset-entries", Kind::Int, "512"),
    ("set-max-listpack-entries", Kind::Int, "128"),
    ("set-max-listpack-value", Kind::Int, "64"),
    ("zset-max-listpack-entries", Kind::Int, "128"),
    ("zset-max-listpack-value", Kind::Int, "64"),
    ("zset-max-ziplist-entries", Kind::Int, "128"),
    ("zset-max-ziplist-value", Kind::Int, "64"),
    ("list-max-listpack-size", Kind::Int, "-2"),
    ("list-max-ziplist-size", Kind::Int, "-2"),
    ("list-compress-depth", Kind::Int, "0"),
    ("busy-reply-threshold", Kind::BusyMs, ""),
    ("lua-time-limit", Kind::BusyMs, ""),
    ("stream-node-max-bytes", Kind::Int, "4096"),
    ("stream-node-max-entries", Kind::Int, "100"),
];

fn param_value(ctx: &Ctx<'_>, name: &'static str, kind: Kind, default: &str) -> String {
    let c = &ctx.shared.config;
    match name {
        "port" => ctx.shared.addr.port().to_string(),
        "bind" => c.bind.to_string(),
        "dir" => std::fs::canonicalize(&c.dir)
            .unwrap_or_else(|_| c.dir.clone())
            .display()
            .to_string(),
        "databases" => c.databases.to_string(),
        // The bound port (0 = the HTTP API is off).
        "http-port" => c.http_port.unwrap_or(0).to_string(),
        "data-file-size" => c.data_file_size.to_string(),
        "cold-readers" => c.cold_readers.to_string(),
        "io-uring" => c.io_uring.name().to_string(),
        "read-residency" => c.read_residency.name().to_string(),
        "loglevel" => c.loglevel.clone(),
        "appendfsync" => ctx.shared.settings.appendfsync().as_str().to_string(),
        "notify-keyspace-events" => crate::notify::render(ctx.shared.pubsub.events()),
        "client-output-buffer-limit" => ctx.shared.pubsub.limits().render(),
        _ if kind == Kind::BusyMs => ctx.shared.gate.busy().threshold_ms().to_string(),
        _ if kind == Kind::Monitor => ctx.shared.cmdstats.config_get(name).unwrap_or_default(),
        _ if kind == Kind::MaxMemory => ctx.shared.maxmemory.limit().to_string(),
        _ if kind == Kind::Security => crate::auth::config_get(&ctx.shared.security, name),
        _ if kind == Kind::Immutable => default.to_string(),
        _ => ctx
            .shared
            .settings
            .extra
            .lock()
            .get(name)
            .cloned()
            .unwrap_or_else(|| default.to_string()),
    }
}

fn set_failed(name: &str, why: &str) -> Error {
    Error::err(format!(
        "CONFIG SET failed (possibly related to argument '{name}') - {why}"
    ))
}

fn config(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let sub = &args[1];
    if is(sub, "get") {
        sub_arity("config|get", -3, &args)?;
        let mut found: Vec<(&'static str, String)> = Vec::new();
        for &(name, kind, default) in PARAMS {
            if args
                .iter()
                .skip(2)
                .any(|p| glob::matches(p, name.as_bytes(), true))
            {
                found.push((name, param_value(ctx, name, kind, default)));
            }
        }
        let mut e = ctx.enc();
        e.map(found.len());
        for (k, v) in found {
            e.bulk(k.as_bytes());
            e.bulk(v.as_bytes());
        }
    } else if is(sub, "set") {
        sub_arity("config|set", -4, &args)?;
        if !args.len().is_multiple_of(2) {
            return Err(Error::Arity("config|set".into()));
        }
        // Validate everything first, then apply: all or nothing, as in Redis.
        let mut changes: Vec<(&'static str, Kind, String)> = Vec::new();
        let mut limits = ctx.shared.pubsub.limits();
        let mut security: Vec<crate::auth::Setting> = Vec::new();
        let mut monitor: Vec<(&'static str, crate::cmdstats::Setting)> = Vec::new();
        for j in (2..args.len()).step_by(2) {
            let name = String::from_utf8_lossy(&args[j]).to_ascii_lowercase();
            let value = String::from_utf8_lossy(&args[j + 1]).into_owned();
            let Some(&(pname, kind, _)) = PARAMS.iter().find(|(n, _, _)| *n == name) else {
                return Err(Error::err(format!(
                    "Unknown option or number of arguments for CONFIG SET - '{name}'"
                )));
            };
            match kind {
                Kind::Immutable => return Err(set_failed(pname, "can't set immutable config")),
                Kind::Appendfsync if Appendfsync::parse(value.as_bytes()).is_none() => {
                    return Err(set_failed(
                        pname,
                        "argument(s) must be one of the following: everysec, always, no",
                    ))
                }
                Kind::BusyMs if value.parse::<u64>().is_err() => {
                    return Err(set_failed(
                        pname,
                        "argument couldn't be parsed into an integer",
                    ))
                }
                Kind::Int if value.parse::<i64>().is_err() => {
                    return Err(set_failed(
                        pname,
                        "argument couldn't be parsed into an integer",
                    ))
                }
                Kind::Bool
                    if !(value.eq_ignore_ascii_case("yes") || value.eq_ignore_ascii_case("no")) =>
                {
                    return Err(set_failed(pname, "argument must be 'yes' or 'no'"))
                }
                Kind::NotifyEvents if crate::notify::parse(value.as_bytes()).is_none() => {
                    return Err(set_failed(pname, crate::notify::INVALID))
                }
                Kind::ObufLimit => {
                    limits = limits
                        .parse_update(&value)
                        .map_err(|why| set_failed(pname, why))?;
                }
                Kind::Monitor => {
                    let setting =
                        crate::cmdstats::CommandStats::config_check(pname, value.as_bytes())
                            .map_err(|why| set_failed(pname, why))?;
                    monitor.push((pname, setting));
                    continue;
                }
                Kind::MaxMemory if crate::auth::parse_size(&value).is_none() => {
                    return Err(set_failed(pname, "argument must be a memory value"))
                }
                Kind::Security => {
                    let setting = crate::auth::config_check(pname, &args[j + 1])
                        .map_err(|why| set_failed(pname, &why))?;
                    security.push(setting);
                    continue;
                }
                _ => {}
            }
            changes.push((pname, kind, value));
        }
        for setting in security {
            crate::auth::config_apply(&ctx.shared.security, setting);
        }
        for (name, setting) in monitor {
            ctx.shared.cmdstats.config_set(name, setting);
        }
        for (name, kind, value) in changes {
            match kind {
                Kind::Appendfsync => {
                    if let Some(a) = Appendfsync::parse(value.as_bytes()) {
                        ctx.shared.settings.set_appendfsync(a);
                    }
                }
                Kind::NotifyEvents => {
                    if let Some(flags) = crate::notify::parse(value.as_bytes()) {
                        ctx.shared.pubsub.set_events(flags);
                    }
                }
                Kind::ObufLimit => ctx.shared.pubsub.set_limits(limits),
                Kind::MaxMemory => {
                    if let Some(n) = crate::auth::parse_size(&value) {
                        ctx.shared.maxmemory.set_limit(n);
                    }
                }
                Kind::BusyMs => {
                    if let Ok(ms) = value.parse::<u64>() {
                        ctx.shared.gate.busy().set_threshold_ms(ms);
                    }
                }
                Kind::Bool => {
                    ctx.shared
                        .settings
                        .extra
                        .lock()
                        .insert(name, value.to_ascii_lowercase());
                }
                _ => {
                    ctx.shared.settings.extra.lock().insert(name, value);
                }
            }
        }
        ctx.ok();
    } else if is(sub, "resetstat") {
        sub_arity("config|resetstat", 2, &args)?;
        let st = &ctx.shared.stats;
        for c in [
            &st.commands,
            &st.connections,
            &st.net_input,
            &st.net_output,
            &st.rejected,
            &st.expired,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        *st.instantaneous.lock() = Default::default();
        ctx.shared.cmdstats.reset();
        ctx.shared.errors.reset();
        ctx.shared.lookups.reset();
        ctx.ok();
    } else if is(sub, "help") {
        help(
            ctx,
            "CONFIG",
            &[
                "GET <pattern>",
                "    Return parameters matching the glob-like <pattern> and their values.",
                "SET <directive> <value>",
                "    Set the configuration <directive> to <value>.",
                "RESETSTAT",
                "    Reset statistics reported by the INFO command.",
            ],
        );
    } else {
        return Err(unknown_subcommand("config", sub));
    }
    Ok(())
}

// ------------------------------------------------------ TIME, SAVE & co.

fn time(ctx: &mut Ctx<'_>, _args: Args<'_>) -> Result {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    ctx.array(2);
    ctx.bulk(d.as_secs().to_string().as_bytes());
    ctx.bulk(d.subsec_micros().to_string().as_bytes());
    Ok(())
}

fn lastsave(ctx: &mut Ctx<'_>, _args: Args<'_>) -> Result {
    let t = ctx.shared.lastsave.load(Ordering::Relaxed);
    ctx.int(t as i64);
    Ok(())
}

/// Writes pending hint files and fsyncs every database.
fn save_now(ctx: &Ctx<'_>) -> Result {
    ctx.shared.keyspace.sync_all()?;
    ctx.shared
        .lastsave
        .store(now_ms() / 1000, Ordering::Relaxed);
    ctx.shared.stats.dirty.store(0, Ordering::Relaxed);
    Ok(())
}

fn save(ctx: &mut Ctx<'_>, _args: Args<'_>) -> Result {
    save_now(ctx)?;
    ctx.ok();
    Ok(())
}

fn bgsave(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    match args.len() {
        1 => {}
        2 if is(&args[1], "schedule") => {}
        _ => return Err(Error::Syntax),
    }
    // Nothing to serialize: the data is already in the log. A flush and
    // fsync is quick, so it runs before the reply.
    save_now(ctx)?;
    ctx.simple(b"Background saving started");
    Ok(())
}

fn debug(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let sub = &args[1];
    if is(sub, "sleep") {
        sub_arity("debug|sleep", 3, &args)?;
        let secs = parse_f64(&args[2]).unwrap_or(0.0).max(0.0);
        ctx.after = Some(After::Sleep(Duration::from_secs_f64(secs.min(1e6))));
        ctx.ok();
    } else if is(sub, "reload") {
        ctx.shared.keyspace.reload()?;
        ctx.ok();
    } else if is(sub, "help") {
        help(
            ctx,
            "DEBUG",
            &[
                "RELOAD",
                "    Close and reopen every database (recovery from the files).",
                "SLEEP <seconds>",
                "    Stop the server for <seconds>. Decimals allowed.",
            ],
        );
    } else {
        return Err(unknown_subcommand("debug", sub));
    }
    Ok(())
}

fn shutdown(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let (mut save, mut nosave, mut abort) = (false, false, false);
    for a in args.iter().skip(1) {
        if is(a, "nosave") {
            nosave = true;
        } else if is(a, "save") {
            save = true;
        } else if is(a, "now") || is(a, "force") {
        } else if is(a, "abort") {
            abort = true;
        } else {
            return Err(Error::Syntax);
        }
    }
    if (save && nosave) || (abort && args.len() > 2) {
        return Err(Error::Syntax);
    }
    if abort {
        return Err(Error::err("No shutdown in progress."));
    }
    // Every acknowledged write is already in the log; shutdown always syncs
    // and closes the engines, whatever SAVE / NOSAVE say.
    ctx.after = Some(After::Shutdown);
    Ok(())
}

/// C's `atoi`, which Redis's key extraction uses for numkeys: leading
/// space, a sign, digits up to the first non-digit (0 if none).
fn atoi(b: &[u8]) -> i64 {
    let mut i = 0;
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        i += 1;
    }
    let neg = i < b.len() && b[i] == b'-';
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    let mut n: i64 = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        n = n.saturating_mul(10).saturating_add(i64::from(b[i] - b'0'));
        i += 1;
    }
    if neg {
        -n
    } else {
        n
    }
}

/// The key positions of a command whose keys move with its arguments
/// (COMMAND GETKEYS), as Redis 7.0's key extraction finds them; empty
/// when the arguments name no valid key set (numkeys out of range).
/// `cmd[0]` is the command's name.
pub(crate) fn movable_keys(name: &str, cmd: &[&[u8]]) -> Vec<usize> {
    // `numkeys` at `at`, the keys right after it, and a destination at
    // `store`. Redis reads numkeys through the command's key specs first
    // (a strict integer; the destination comes first), and when that
    // fails through its older extraction with `atoi` (destination last).
    let numbered = |at: usize, store: Option<usize>| -> Vec<usize> {
        let Some(arg) = cmd.get(at) else {
            return Vec::new();
        };
        let first = at + 1;
        let fits = |n: i64| n >= 1 && n <= (cmd.len() - first) as i64;
        let (n, store_first) = match parse_i64(arg) {
            Some(n) if fits(n) => (n, true),
            _ => match atoi(arg) {
                n if fits(n) => (n, false),
                _ => return Vec::new(),
            },
        };
        let keys = first..first + n as usize;
        match (store, store_first) {
            (Some(d), true) => std::iter::once(d).chain(keys).collect(),
            (Some(d), false) => keys.chain(std::iter::once(d)).collect(),
            (None, _) => keys.collect(),
        }
    };
    match name {
        "zunionstore" | "zinterstore" | "zdiffstore" => numbered(2, Some(1)),
        "zunion" | "zinter" | "zdiff" | "zintercard" | "sintercard" | "lmpop" | "zmpop" => {
            numbered(1, None)
        }
        "blmpop" | "bzmpop" => numbered(2, None),
        "xread" | "xreadgroup" => {
            // The keys are the first half of what follows STREAMS.
            let Some(at) = cmd.iter().position(|a| is(a, "streams")) else {
                return Vec::new();
            };
            let rest = cmd.len() - at - 1;
            if rest == 0 || !rest.is_multiple_of(2) {
                return Vec::new();
            }
            (at + 1..at + 1 + rest / 2).collect()
        }
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" => {
            // Redis reads numkeys strictly here, and no keys is a valid set.
            match cmd.get(2).and_then(|a| parse_i64(a)) {
                Some(n) if n >= 1 && n <= cmd.len() as i64 - 3 => (3..3 + n as usize).collect(),
                _ => Vec::new(),
            }
        }
        "migrate" => {
            // The key, or with KEYS (and an empty key) what follows it.
            match super::dump::MigrateOptions::read(cmd).keys_at {
                Some(_) if !cmd.get(3).is_some_and(|k| k.is_empty()) => Vec::new(),
                Some(at) => (at + 1..cmd.len()).collect(),
                None => vec![3],
            }
        }
        "sort" | "sort_ro" => {
            // The key, and the last STORE's destination (SORT skips the
            // arguments of LIMIT, GET and BY while looking for it).
            let mut keys = vec![1];
            let mut store = None;
            let mut i = 2;
            while i < cmd.len() {
                if is(cmd[i], "limit") {
                    i += 2;
                } else if is(cmd[i], "get") || is(cmd[i], "by") {
                    i += 1;
                } else if name == "sort" && is(cmd[i], "store") && i + 1 < cmd.len() {
                    store = Some(i + 1);
                }
                i += 1;
            }
            keys.extend(store);
            keys
        }
        _ => Vec::new(),
    }
}
