//! Connection commands: PING ECHO QUIT RESET HELLO SELECT.

use std::sync::atomic::Ordering;

use basalt_resp::{Args, Protocol};

use super::flags::*;
use super::{def, is, parse_i64, After, CommandDef, Ctx, Error, Group, Result};

const G: Group = Group::Connection;

/// The version Basalt reports to clients (HELLO, INFO): the Redis release
/// whose behaviour it follows, so client libraries enable the right features.
pub const REDIS_VERSION: &str = "7.0.15";

/// The connection family's table.
pub const COMMANDS: &[CommandDef] = &[
    def(
        "ping",
        -1,
        FAST,
        (0, 0, 0),
        G,
        "1.0.0",
        "Returns the server's liveliness response.",
        ping,
    ),
    def(
        "echo",
        2,
        FAST | LOADING | STALE,
        (0, 0, 0),
        G,
        "1.0.0",
        "Returns the given string.",
        echo,
    ),
    def(
        "quit",
        -1,
        ALLOW_BUSY | NOSCRIPT | LOADING | STALE | FAST | NO_AUTH,
        (0, 0, 0),
        G,
        "1.0.0",
        "Closes the connection.",
        quit,
    ),
    def(
        "reset",
        1,
        NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY,
        (0, 0, 0),
        G,
        "6.2.0",
        "Resets the connection.",
        reset,
    ),
    def(
        "hello",
        -1,
        NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY,
        (0, 0, 0),
        G,
        "6.0.0",
        "Handshakes with the Redis server.",
        hello,
    ),
    def(
        "select",
        2,
        LOADING | STALE | FAST,
        (0, 0, 0),
        G,
        "1.0.0",
        "Changes the selected database.",
        select,
    ),
    def(
        "auth",
        -2,
        NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY,
        (0, 0, 0),
        G,
        "1.0.0",
        "Authenticates the connection.",
        auth,
    ),
];

fn ping(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    if args.len() <= 2 && ctx.conn.protocol == Protocol::Resp2 && ctx.conn.info.pubsub.subscribed()
    {
        // Redis's reply in RESP2 subscribed mode: a pub/sub-shaped array.
        ctx.array(2);
        ctx.bulk(b"pong");
        ctx.bulk(args.get(1).unwrap_or(b""));
        return Ok(());
    }
    match args.len() {
        1 => ctx.simple(b"PONG"),
        2 => ctx.bulk(&args[1]),
        _ => return Err(Error::Arity("ping".into())),
    }
    Ok(())
}

fn echo(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    ctx.bulk(&args[1]);
    Ok(())
}

fn quit(ctx: &mut Ctx<'_>, _args: Args<'_>) -> Result {
    ctx.ok();
    ctx.after = Some(After::Close);
    Ok(())
}

fn reset(ctx: &mut Ctx<'_>, _args: Args<'_>) -> Result {
    ctx.conn.tx.clear(&ctx.conn.info);
    ctx.conn.db = 0;
    ctx.conn.protocol = Protocol::Resp2;
    let info = &ctx.conn.info;
    info.db.store(0, Ordering::Relaxed);
    info.resp.store(2, Ordering::Relaxed);
    info.no_evict.store(false, Ordering::Relaxed);
    info.name.lock().clear();
    ctx.shared.pubsub.drop_client(info);
    // Back to the default user: authenticated only if no password is set.
    crate::auth::set_default_auth(ctx.shared, info);
    ctx.simple(b"RESET");
    Ok(())
}

/// Whether a client name is acceptable: printable ASCII without spaces.
pub fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

/// `ERR Client names cannot contain spaces, newlines or special characters.`
pub fn bad_client_name() -> Error {
    Error::err("Client names cannot contain spaces, newlines or special characters.")
}

/// AUTH [user] password, for Redis's `default` user (`crate::auth`).
fn auth(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let (user, pass) = match args.len() {
        2 => {
            if !ctx.shared.requires_auth() {
                return Err(Error::Msg(crate::auth::AUTH_WITHOUT_PASSWORD.into()));
            }
            (None, &args[1])
        }
        3 => (Some(&args[1]), &args[2]),
        _ => return Err(Error::Syntax),
    };
    if !crate::auth::authenticate(ctx.shared, &ctx.conn.info, user, pass) {
        return Err(Error::Msg(crate::auth::WRONGPASS.into()));
    }
    ctx.ok();
    Ok(())
}

fn hello(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let mut proto = None;
    if args.len() >= 2 {
        let v = parse_i64(&args[1])
            .ok_or_else(|| Error::err("Protocol version is not an integer or out of range"))?;
        if !(2..=3).contains(&v) {
            return Err(Error::Msg("NOPROTO unsupported protocol version".into()));
        }
        proto = Some(v);
        let mut j = 2;
        while j < args.len() {
            let more = args.len() - j - 1;
            if is(&args[j], "auth") && more >= 2 {
                if !crate::auth::authenticate(
                    ctx.shared,
                    &ctx.conn.info,
                    Some(&args[j + 1]),
                    &args[j + 2],
                ) {
                    return Err(Error::Msg(crate::auth::WRONGPASS.into()));
                }
                j += 3;
            } else if is(&args[j], "setname") && more >= 1 {
                if !valid_client_name(&args[j + 1]) {
                    return Err(bad_client_name());
                }
                // Redis 7.0 names the client as it reads the option, so the
                // name stays even if a later option or the NOAUTH check
                // below fails.
                *ctx.conn.info.name.lock() = args[j + 1].to_vec();
                j += 2;
            } else {
                return Err(Error::err(format!(
                    "Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(&args[j])
                )));
            }
        }
    }
    // As in Redis, HELLO's own NOAUTH looks at the client's flag only.
    if !ctx.conn.info.authenticated.load(Ordering::Relaxed) {
        return Err(Error::Msg(crate::auth::HELLO_NOAUTH.into()));
    }
    if let Some(v) = proto {
        ctx.conn.protocol = if v == 3 {
            Protocol::Resp3
        } else {
            Protocol::Resp2
        };
        ctx.conn.info.resp.store(v as u8, Ordering::Relaxed);
    }
    let id = ctx.conn.info.id as i64;
    let resp = if ctx.conn.protocol == Protocol::Resp3 {
        3
    } else {
        2
    };
    let mut e = ctx.enc();
    e.map(7);
    e.bulk(b"server");
    e.bulk(b"redis");
    e.bulk(b"version");
    e.bulk(REDIS_VERSION.as_bytes());
    e.bulk(b"proto");
    e.integer(resp);
    e.bulk(b"id");
    e.integer(id);
    e.bulk(b"mode");
    e.bulk(b"standalone");
    e.bulk(b"role");
    e.bulk(b"master");
    e.bulk(b"modules");
    e.array(0);
    Ok(())
}

/// Parses a database index argument: not a number is
/// `value is not an integer or out of range`; out of range is
/// `DB index is out of range`.
pub fn db_index(ctx: &Ctx<'_>, arg: &[u8]) -> Result<usize> {
    let n = parse_i64(arg)
        .filter(|n| i32::try_from(*n).is_ok())
        .ok_or(Error::NotInteger)?;
    if n < 0 || n as usize >= ctx.shared.keyspace.len() {
        return Err(Error::DbRange);
    }
    Ok(n as usize)
}

fn select(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let n = db_index(ctx, &args[1])?;
    ctx.conn.db = n;
    ctx.conn.info.db.store(n, Ordering::Relaxed);
    ctx.ok();
    Ok(())
}
