//! SLOWLOG, LATENCY and LOLWUT: what the server tells about its own speed
//! (Redis `slowlog.c`, `latency.c`) and itself.
//!
//! The data comes from `crate::cmdstats`, which every command's run time
//! already passes through: a run at or over `slowlog-log-slower-than` (µs)
//! becomes a slow-log entry, a run at or over `latency-monitor-threshold`
//! (ms, 0 = off) a sample of the `command` or `fast-command` latency event,
//! and every run lands in its command's histogram (LATENCY HISTOGRAM). The
//! latency events are the ones Basalt really has: `command`,
//! `fast-command`, and `aof-fsync-always` when the group-commit fsync of
//! `appendfsync always` is recorded by the connection.
//!
//! It also keeps what redis-server 7.0.15 says about its commands
//! (`redis_commands.json`), which COMMAND INFO / DOCS serve, and from it
//! the subcommands of each container Basalt runs (`config|get`, ...):
//! dispatch looks a subcommand up before running it, as Redis does
//! ([`route`]), so that INFO commandstats, LATENCY HISTOGRAM and COMMAND
//! give each its own row.

use std::fmt::Write as _;

use basalt_resp::Args;

use super::flags::*;
use super::{
    def, int_arg, is, lookup_indexed, parse_i64, sub_arity, unknown_subcommand, CommandDef, Ctx,
    Error, Group, Result,
};
use crate::cmdstats::{bucket_label_us, Series};

const G: Group = Group::Server;

/// The table.
pub const COMMANDS: &[CommandDef] = &[
    def(
        "slowlog",
        -2,
        0,
        (0, 0, 0),
        G,
        "2.2.12",
        "A container for slow log commands.",
        slowlog,
    ),
    def(
        "latency",
        -2,
        0,
        (0, 0, 0),
        G,
        "2.8.13",
        "A container for latency diagnostics commands.",
        latency,
    ),
    def(
        "lolwut",
        -1,
        READONLY | FAST,
        (0, 0, 0),
        G,
        "5.0.0",
        "Displays computer art and the Redis version",
        lolwut,
    ),
];

// ---------------------------------------------------------------- SLOWLOG

fn slowlog(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let sub = &args[1];
    if is(sub, "get") {
        sub_arity("slowlog|get", -2, &args)?;
        if args.len() > 3 {
            return Err(subcommand_syntax("slowlog", sub));
        }
        let count = match args.get(2) {
            None => 10,
            Some(a) => match parse_i64(a) {
                Some(-1) => usize::MAX,
                Some(n) if n >= 0 => n as usize,
                _ => return Err(Error::err("count should be greater than or equal to -1")),
            },
        };
        let entries = ctx.shared.cmdstats.slowlog_get(count);
        let mut e = ctx.enc();
        e.array(entries.len());
        for s in entries {
            e.array(6);
            e.integer(s.id as i64);
            e.integer(s.time as i64);
            e.integer(s.micros as i64);
            e.array(s.argv.len());
            for a in &s.argv {
                e.bulk(a);
            }
            e.bulk(s.peer.as_bytes());
            e.bulk(&s.name);
        }
    } else if is(sub, "len") {
        sub_arity("slowlog|len", 2, &args)?;
        ctx.int(ctx.shared.cmdstats.slowlog_len() as i64);
    } else if is(sub, "reset") {
        sub_arity("slowlog|reset", 2, &args)?;
        ctx.shared.cmdstats.slowlog_reset();
        ctx.ok();
    } else if is(sub, "help") {
        sub_arity("slowlog|help", 2, &args)?;
        super::server::help(
            ctx,
            "SLOWLOG",
            &[
                "GET [<count>]",
                "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
                "    Entries are made of:",
                "    id, timestamp, time in microseconds, arguments array, client IP and port,",
                "    client name",
                "LEN",
                "    Return the length of the slowlog.",
                "RESET",
                "    Reset the slowlog.",
            ],
        );
    } else {
        return Err(unknown_subcommand("slowlog", sub));
    }
    Ok(())
}

/// Redis's `addReplySubcommandSyntaxError`: a known subcommand with
/// arguments its handler does not take.
fn subcommand_syntax(cmd: &str, sub: &[u8]) -> Error {
    let sub = String::from_utf8_lossy(&sub[..sub.len().min(128)]).into_owned();
    Error::err(format!(
        "unknown subcommand or wrong number of arguments for '{sub}'. Try {} HELP.",
        cmd.to_ascii_uppercase()
    ))
}

// ---------------------------------------------------------------- LATENCY

fn latency(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let sub = &args[1];
    let st = &ctx.shared.cmdstats;
    if is(sub, "latest") {
        sub_arity("latency|latest", 2, &args)?;
        let events = st.latency_events();
        let mut e = ctx.enc();
        e.array(events.len());
        for (name, series) in events {
            let (time, ms) = series.latest().unwrap_or((0, 0));
            e.array(4);
            e.bulk(name.as_bytes());
            e.integer(time as i64);
            e.integer(ms as i64);
            e.integer(series.max as i64);
        }
    } else if is(sub, "history") {
        sub_arity("latency|history", 3, &args)?;
        let series = find_event(ctx, &args[2]);
        let mut e = ctx.enc();
        match series {
            None => e.array(0),
            Some(s) => {
                e.array(s.samples().len());
                for (time, ms) in s.samples() {
                    e.array(2);
                    e.integer(time as i64);
                    e.integer(ms as i64);
                }
            }
        }
    } else if is(sub, "reset") {
        sub_arity("latency|reset", -2, &args)?;
        let names: Vec<&[u8]> = args.iter().skip(2).collect();
        let n = st.latency_reset(&names);
        ctx.int(n as i64);
    } else if is(sub, "graph") {
        sub_arity("latency|graph", 3, &args)?;
        let Some(series) = find_event(ctx, &args[2]).filter(|s| s.samples().len() > 0) else {
            return Err(Error::err(format!(
                "No samples available for event '{}'",
                String::from_utf8_lossy(&args[2])
            )));
        };
        let name = String::from_utf8_lossy(&args[2]).into_owned();
        let text = graph(&name, &series, crate::state::now_ms() / 1000);
        ctx.enc().verbatim(b"txt", text.as_bytes());
    } else if is(sub, "doctor") {
        sub_arity("latency|doctor", 2, &args)?;
        let text = doctor(ctx);
        ctx.enc().verbatim(b"txt", text.as_bytes());
    } else if is(sub, "histogram") {
        sub_arity("latency|histogram", -2, &args)?;
        histogram(ctx, args);
    } else if is(sub, "help") {
        sub_arity("latency|help", 2, &args)?;
        super::server::help(
            ctx,
            "LATENCY",
            &[
                "DOCTOR",
                "    Return a human readable latency analysis report.",
                "GRAPH <event>",
                "    Return an ASCII latency graph for the <event> class.",
                "HISTORY <event>",
                "    Return time-latency samples for the <event> class.",
                "LATEST",
                "    Return the latest latency samples for all events.",
                "RESET [<event> ...]",
                "    Reset latency data of one or more <event> classes.",
                "    (default: reset all data for all event classes)",
                "HISTOGRAM [COMMAND ...]",
                "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
                "    If no commands are specified then all histograms are replied.",
            ],
        );
    } else {
        return Err(unknown_subcommand("latency", sub));
    }
    Ok(())
}

fn find_event(ctx: &Ctx<'_>, name: &[u8]) -> Option<Series> {
    ctx.shared
        .cmdstats
        .latency_events()
        .into_iter()
        .find(|(e, _)| e.as_bytes() == name)
        .map(|(_, s)| s)
}

/// LATENCY HISTOGRAM: per command, its calls and the cumulative count at
/// each power-of-two bucket that gained samples, as Redis reports its
/// HDR histograms (`{calls, histogram_usec: {bucket_us: count, ...}}`).
/// A subcommand has its own row (`config|get`), as in Redis: a container's
/// name gives the container's row (only a Basalt-only subcommand such as
/// CLIENT SETINFO counts there) and then its subcommands' rows, a
/// `container|sub` name that one row. Commands never run, and unknown
/// names, are left out.
fn histogram(ctx: &mut Ctx<'_>, args: Args<'_>) {
    // (name, counter row) of each command asked for.
    let mut asked: Vec<(&'static str, usize)> = Vec::new();
    let with_subs = |asked: &mut Vec<_>, c: &'static CommandDef, idx: usize| {
        asked.push((c.name, idx));
        asked.extend(subcommands(idx).iter().map(|s| (s.full, s.row)));
    };
    if args.len() == 2 {
        for (idx, c) in super::all().enumerate() {
            with_subs(&mut asked, c, idx);
        }
    } else {
        for name in args.iter().skip(2) {
            if name.contains(&b'|') {
                if let Some(s) = lookup_subcommand(name) {
                    asked.push((s.full, s.row));
                }
            } else if let Some((c, idx)) = lookup_indexed(name) {
                with_subs(&mut asked, c, idx);
            }
        }
    }
    let st = &ctx.shared.cmdstats;
    // (command, [(bucket µs, cumulative count)], calls)
    type Row = (&'static str, Vec<(u64, u64)>, u64);
    let mut rows: Vec<Row> = Vec::new();
    for (name, row) in asked {
        let h = st.histogram(row);
        let mut cumulative = 0;
        let mut points = Vec::new();
        for (b, n) in h.iter().enumerate() {
            if *n > 0 {
                cumulative += n;
                points.push((bucket_label_us(b), cumulative));
            }
        }
        if cumulative > 0 {
            rows.push((name, points, cumulative));
        }
    }
    let mut e = ctx.enc();
    e.map(rows.len());
    for (name, points, calls) in rows {
        e.bulk(name.as_bytes());
        e.map(2);
        e.bulk(b"calls");
        e.integer(calls as i64);
        e.bulk(b"histogram_usec");
        e.map(points.len());
        for (us, n) in points {
            e.integer(us as i64);
            e.integer(n as i64);
        }
    }
}

/// A compact age: `12s`, `3m`, `5h`, `2d`.
fn age(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// LATENCY GRAPH: a header like Redis's, then one column per sample (the
/// latest 80), four rows high, scaled between the lowest and the highest
/// sample, and each sample's age written downwards under its column.
fn graph(name: &str, s: &Series, now: u64) -> String {
    const WIDTH: usize = 80;
    const ROWS: u64 = 4;
    let samples: Vec<(u64, u64)> = s.samples().collect();
    let samples = &samples[samples.len().saturating_sub(WIDTH)..];
    let high = samples.iter().map(|p| p.1).max().unwrap_or(0);
    let low = samples.iter().map(|p| p.1).min().unwrap_or(0);
    let mut out = format!(
        "{name} - high {high} ms, low {low} ms (all time high {} ms)\n{}\n",
        s.max,
        "-".repeat(WIDTH)
    );
    // Height in half rows, 1..=2*ROWS.
    let height = |v: u64| -> u64 {
        if high == low {
            2 * ROWS
        } else {
            1 + (v - low) * (2 * ROWS - 1) / (high - low)
        }
    };
    for row in (0..ROWS).rev() {
        let line: String = samples
            .iter()
            .map(|&(_, v)| {
                // The column's top cell is '#' (a full row) or '_' (half).
                let h = height(v);
                let top = (h - 1) / 2;
                match row.cmp(&top) {
                    std::cmp::Ordering::Less => '|',
                    std::cmp::Ordering::Equal if h % 2 == 0 => '#',
                    std::cmp::Ordering::Equal => '_',
                    std::cmp::Ordering::Greater => ' ',
                }
            })
            .collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let labels: Vec<Vec<char>> = samples
        .iter()
        .map(|&(t, _)| age(now.saturating_sub(t)).chars().collect())
        .collect();
    let depth = labels.iter().map(Vec::len).max().unwrap_or(0);
    for i in 0..depth {
        let line: String = labels
            .iter()
            .map(|l| l.get(i).copied().unwrap_or(' '))
            .collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// LATENCY DOCTOR: per event its spikes, average, mean deviation, period
/// and worst, and what may help, in Basalt's words.
fn doctor(ctx: &Ctx<'_>) -> String {
    let events = ctx.shared.cmdstats.latency_events();
    let threshold = ctx
        .shared
        .cmdstats
        .config_get("latency-monitor-threshold")
        .unwrap_or_default();
    if events.is_empty() {
        return if threshold == "0" {
            "The latency monitor is off (latency-monitor-threshold is 0), so no latency spike \
             was recorded. Turn it on with 'CONFIG SET latency-monitor-threshold <milliseconds>'.\n"
                .to_string()
        } else {
            "No latency spike was observed during the lifetime of this Basalt instance.\n"
                .to_string()
        };
    }
    let mut out = String::from(
        "Latency spikes were observed in this Basalt instance. Here is what the monitor saw:\n\n",
    );
    for (i, (name, s)) in events.iter().enumerate() {
        let v: Vec<(u64, u64)> = s.samples().collect();
        let n = v.len().max(1) as f64;
        let avg = v.iter().map(|p| p.1 as f64).sum::<f64>() / n;
        let mad = v.iter().map(|p| (p.1 as f64 - avg).abs()).sum::<f64>() / n;
        let period = match (v.first(), v.last()) {
            (Some(a), Some(b)) if v.len() > 1 => (b.0 - a.0) as f64 / (v.len() - 1) as f64,
            _ => 0.0,
        };
        let _ = writeln!(
            out,
            "{}. {name}: {} latency spikes (average {:.0}ms, mean deviation {:.0}ms, period {:.2} sec). Worst all time event {}ms.",
            i + 1,
            v.len(),
            avg,
            mad,
            period,
            s.max
        );
    }
    out.push_str("\nWhat may help:\n\n");
    let slow = ctx
        .shared
        .cmdstats
        .config_get("slowlog-log-slower-than")
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(-1);
    let th_us = threshold.parse::<i64>().unwrap_or(0) * 1000;
    if slow < 0 || slow > th_us {
        let _ = writeln!(
            out,
            "- The slow log does not record commands as slow as the latency monitor's threshold. Please use 'CONFIG SET slowlog-log-slower-than {th_us}'."
        );
    }
    if events.iter().any(|(e, _)| e.ends_with("command")) {
        out.push_str(
            "- Check SLOWLOG GET to see which commands were slow, and LATENCY HISTOGRAM for the distribution of each command's run time. Commands over large hashes, sets, sorted sets or lists (HGETALL, SMEMBERS, ZRANGE over everything, KEYS) read every member from disk.\n",
        );
    }
    if events.iter().any(|(e, _)| e.starts_with("aof-fsync")) {
        out.push_str(
            "- fsync under 'appendfsync always' waits for the disk. A faster disk, or 'appendfsync everysec' (at most one second of writes at risk on a power loss; a crash of the process alone loses nothing), shortens it.\n",
        );
    }
    out
}

// ------------------------------------------- Redis's command metadata

/// What redis-server 7.0.15 says about the Redis commands Basalt has
/// (COMMAND DOCS beyond summary/since/group, COMMAND INFO tips and key
/// specs), written by `scripts/difftest_commands.py --write-data` in a
/// tagged JSON form that keeps the RESP3 types: `{"%": [[k, v], ...]}` a
/// map, `{"~": [...]}` a set, `{"+": s}` a simple string, a JSON string a
/// bulk string, a number an integer, a list an array.
const REDIS_COMMANDS: &str = include_str!("redis_commands.json");

/// One command's entry of [`REDIS_COMMANDS`].
#[derive(Debug, serde::Deserialize)]
pub(crate) struct RedisMeta {
    /// COMMAND INFO's tips (a set).
    pub tips: serde_json::Value,
    /// COMMAND INFO's key specs (a set of maps).
    pub key_specs: serde_json::Value,
    /// COMMAND DOCS (a map, without subcommands).
    #[serde(default)]
    pub docs: Option<serde_json::Value>,
    /// A container's subcommand names in Redis's order (each has its own
    /// `name|sub` entry).
    #[serde(default)]
    pub subcommands: Vec<String>,
    /// A subcommand's arity (0 for top-level commands: the table has it).
    #[serde(default)]
    pub arity: i32,
    /// COMMAND INFO's flags (a set), for containers and subcommands; a
    /// plain command's come from the table.
    #[serde(default)]
    pub flags: Option<serde_json::Value>,
    /// COMMAND INFO's first key, last key and step, for containers and
    /// subcommands.
    #[serde(default)]
    pub keys: Option<[i64; 3]>,
    /// COMMAND INFO's ACL categories (a set), for containers and
    /// subcommands.
    #[serde(default)]
    pub acl_categories: Option<serde_json::Value>,
}

type MetaMap = std::collections::HashMap<String, RedisMeta>;

fn redis_data() -> &'static MetaMap {
    static DATA: std::sync::OnceLock<MetaMap> = std::sync::OnceLock::new();
    DATA.get_or_init(|| serde_json::from_str(REDIS_COMMANDS).unwrap_or_default())
}

/// The metadata of command `name` (or subcommand `name|sub`), if Redis has it.
pub(crate) fn redis_meta(name: &str) -> Option<&'static RedisMeta> {
    redis_data().get(name)
}

// ---------------------------------------------------------- subcommands

/// Subcommands Redis 7.0.15 has that Basalt does not run: dispatch
/// answers Redis's "unknown subcommand" and COMMAND leaves them out.
const NOT_RUN: &[&str] = &["config|rewrite"];

/// Basalt's subcommands that Redis 7.0.15 does not have (CLIENT SETINFO
/// came with Redis 7.2): they run, are counted as their container, and
/// COMMAND does not list them, as 7.0.15 would not.
const BASALT_ONLY: &[&str] = &["client|setinfo"];

/// A container's subcommand that Basalt runs, with what Redis 7.0.15 says
/// of it. Redis looks subcommands up before it runs anything: arity
/// errors name `container|sub`, and INFO commandstats, LATENCY HISTOGRAM
/// and COMMAND give each subcommand its own row.
#[derive(Debug)]
pub(crate) struct Subcommand {
    /// `container|sub`, lower-case.
    pub full: &'static str,
    /// `sub`.
    pub name: &'static str,
    /// Its row in `crate::cmdstats` (after the command table's rows).
    pub row: usize,
    /// Redis's COMMAND INFO and DOCS of it.
    pub meta: &'static RedisMeta,
}

#[derive(Debug)]
struct Registry {
    /// Every container's subcommands, container by container in table
    /// order, each container's in Redis's order.
    subs: Vec<Subcommand>,
    /// Per command-table position, its range of `subs`.
    ranges: Vec<std::ops::Range<usize>>,
}

fn registry() -> &'static Registry {
    static REG: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    REG.get_or_init(|| {
        let data = redis_data();
        let commands = super::all().count();
        let mut subs = Vec::new();
        let mut ranges = Vec::with_capacity(commands);
        for c in super::all() {
            let start = subs.len();
            for sub in redis_meta(c.name).map_or(&[][..], |m| &m.subcommands[..]) {
                let full = format!("{}|{sub}", c.name);
                if NOT_RUN.contains(&full.as_str()) {
                    continue;
                }
                if let Some((full, meta)) = data.get_key_value(&full) {
                    subs.push(Subcommand {
                        full: full.as_str(),
                        name: &full[c.name.len() + 1..],
                        row: commands + subs.len(),
                        meta,
                    });
                }
            }
            ranges.push(start..subs.len());
        }
        Registry { subs, ranges }
    })
}

/// The subcommands Basalt runs of the command at table position `idx`
/// (empty for a command that is no container).
pub(crate) fn subcommands(idx: usize) -> &'static [Subcommand] {
    let r = registry();
    r.ranges
        .get(idx)
        .map_or(&[][..], |range| &r.subs[range.clone()])
}

/// How many subcommand rows `crate::cmdstats` keeps after the table's.
pub(crate) fn subcommand_count() -> usize {
    registry().subs.len()
}

/// Subcommand `container|sub` (any case) as Redis's `lookupCommandBySds`
/// finds it: exactly two parts, the first a container.
pub(crate) fn lookup_subcommand(full: &[u8]) -> Option<&'static Subcommand> {
    let bar = full.iter().position(|&b| b == b'|')?;
    let (container, sub) = (&full[..bar], &full[bar + 1..]);
    let (_, idx) = lookup_indexed(container)?;
    subcommands(idx).iter().find(|s| is(sub, s.name))
}

/// A name COMMAND INFO / DOCS answers: a command or `container|sub`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Named {
    /// A command of the table.
    Command(&'static CommandDef),
    /// A subcommand.
    Sub(&'static Subcommand),
}

/// [`super::lookup`], or [`lookup_subcommand`] for a name with a `|`.
pub(crate) fn lookup_named(name: &[u8]) -> Option<Named> {
    if name.contains(&b'|') {
        lookup_subcommand(name).map(Named::Sub)
    } else {
        super::lookup(name).map(Named::Command)
    }
}

/// Dispatch's subcommand step, run after the command's own arity check,
/// as Redis's `processCommand` looks a container's subcommand up: the
/// counter row of the run (`idx`, or the subcommand's row), or the error
/// to reply with the row it is counted against (an unknown subcommand is
/// counted nowhere; a wrong arity is a rejected call of the subcommand).
/// For a command that is no container this is one lookup by position.
#[inline]
pub(crate) fn route(
    cmd: &CommandDef,
    idx: usize,
    args: &Args<'_>,
) -> std::result::Result<usize, (Option<usize>, Error)> {
    let subs = subcommands(idx);
    if subs.is_empty() || args.len() < 2 {
        return Ok(idx);
    }
    let sub = &args[1];
    match subs.iter().find(|s| is(sub, s.name)) {
        Some(s) => match sub_arity(s.full, s.meta.arity, args) {
            Ok(()) => Ok(s.row),
            Err(e) => Err((Some(s.row), e)),
        },
        None if BASALT_ONLY.iter().any(|f| {
            f.strip_prefix(cmd.name)
                .and_then(|rest| rest.strip_prefix('|'))
                .is_some_and(|name| is(sub, name))
        }) =>
        {
            Ok(idx)
        }
        None => Err((None, unknown_subcommand(cmd.name, sub))),
    }
}

/// Names as COMMAND LIST gives them: every command, each container
/// followed by its subcommands (`config`, `config|set`, ...).
pub(crate) fn list_names() -> impl Iterator<Item = (&'static str, Option<&'static Subcommand>)> {
    super::all().enumerate().flat_map(|(idx, c)| {
        std::iter::once((c.name, None)).chain(subcommands(idx).iter().map(|s| (s.full, Some(s))))
    })
}

/// A subcommand's ACL categories (`@admin`, ...).
pub(crate) fn sub_categories(s: &Subcommand) -> Vec<&'static str> {
    s.meta
        .acl_categories
        .as_ref()
        .map(items)
        .unwrap_or_default()
        .iter()
        .filter_map(|c| c.get("+").and_then(|s| s.as_str()))
        .collect()
}

/// COMMAND INFO's row of a container as Redis 7.0.15 gives it (its own
/// flags, key positions and ACL categories, which Basalt's table does not
/// keep: the table's flags are what the container's code needs, e.g.
/// NOSCRIPT for every CLIENT subcommand), then its subcommands' rows.
/// False, writing nothing, for a command that is no container.
pub(crate) fn write_container_info(e: &mut basalt_resp::Encoder<'_>, c: &CommandDef) -> bool {
    let Some((_, idx)) = lookup_indexed(c.name.as_bytes()) else {
        return false;
    };
    let subs = subcommands(idx);
    let Some(m) = redis_meta(c.name).filter(|m| m.flags.is_some() && !subs.is_empty()) else {
        return false;
    };
    write_row(e, c.name, c.arity, m);
    // An array (a command without subcommands sends an empty set).
    e.array(subs.len());
    for s in subs {
        write_sub_info(e, s);
    }
    true
}

/// COMMAND INFO's row of a subcommand.
pub(crate) fn write_sub_info(e: &mut basalt_resp::Encoder<'_>, s: &Subcommand) {
    write_row(e, s.full, s.meta.arity, s.meta);
    e.set(0);
}

/// The nine first fields of a COMMAND INFO row from Redis's data.
fn write_row(e: &mut basalt_resp::Encoder<'_>, name: &str, arity: i32, m: &RedisMeta) {
    let empty_set = serde_json::json!({ "~": [] });
    e.array(10);
    e.bulk(name.as_bytes());
    e.integer(arity as i64);
    write_tagged(e, m.flags.as_ref().unwrap_or(&empty_set));
    for k in m.keys.unwrap_or_default() {
        e.integer(k);
    }
    write_tagged(e, m.acl_categories.as_ref().unwrap_or(&empty_set));
    write_tagged(e, &m.tips);
    write_tagged(e, &m.key_specs);
}

/// COMMAND DOCS of a Redis command (`docs` is its map from Redis's data),
/// with, for a container, the `subcommands` map of those Basalt runs,
/// last as Redis puts it.
pub(crate) fn write_docs(
    e: &mut basalt_resp::Encoder<'_>,
    c: &CommandDef,
    docs: &serde_json::Value,
) {
    let subs = lookup_indexed(c.name.as_bytes()).map_or(&[][..], |(_, idx)| subcommands(idx));
    let pairs = docs.get("%").and_then(|p| p.as_array());
    let (Some(pairs), false) = (pairs, subs.is_empty()) else {
        write_tagged(e, docs);
        return;
    };
    e.map(pairs.len() + 1);
    for p in pairs {
        write_tagged(e, p.get(0).unwrap_or(&serde_json::Value::Null));
        write_tagged(e, p.get(1).unwrap_or(&serde_json::Value::Null));
    }
    e.bulk(b"subcommands");
    e.map(subs.len());
    for s in subs {
        e.bulk(s.full.as_bytes());
        write_sub_docs(e, s);
    }
}

/// COMMAND DOCS's map of a subcommand.
pub(crate) fn write_sub_docs(e: &mut basalt_resp::Encoder<'_>, s: &Subcommand) {
    match &s.meta.docs {
        Some(d) => write_tagged(e, d),
        None => e.map(0),
    }
}

/// Writes a tagged value (see [`REDIS_COMMANDS`]) in the client's protocol.
pub(crate) fn write_tagged(e: &mut basalt_resp::Encoder<'_>, v: &serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Null => e.null(),
        Value::Bool(b) => e.boolean(*b),
        Value::Number(n) => e.integer(n.as_i64().unwrap_or(0)),
        Value::String(s) => e.bulk(s.as_bytes()),
        Value::Array(items) => {
            e.array(items.len());
            for i in items {
                write_tagged(e, i);
            }
        }
        Value::Object(o) => {
            if let Some(Value::Array(pairs)) = o.get("%") {
                e.map(pairs.len());
                for p in pairs {
                    write_tagged(e, p.get(0).unwrap_or(&Value::Null));
                    write_tagged(e, p.get(1).unwrap_or(&Value::Null));
                }
            } else if let Some(Value::Array(items)) = o.get("~") {
                e.set(items.len());
                for i in items {
                    write_tagged(e, i);
                }
            } else if let Some(Value::String(s)) = o.get("+") {
                e.simple(s.as_bytes());
            } else {
                e.null();
            }
        }
    }
}

/// A tagged map's value for `key`.
fn field<'v>(map: &'v serde_json::Value, key: &str) -> Option<&'v serde_json::Value> {
    map.get("%")?
        .as_array()?
        .iter()
        .find(|p| p.get(0).and_then(|k| k.as_str()) == Some(key))?
        .get(1)
}

/// A tagged set's or array's items.
fn items(v: &serde_json::Value) -> &[serde_json::Value] {
    v.get("~")
        .and_then(|s| s.as_array())
        .or_else(|| v.as_array())
        .map_or(&[], |a| a.as_slice())
}

/// A key spec's flag names (`RW`, `access`, ...).
fn spec_flags(spec: &serde_json::Value) -> Vec<&'static str> {
    field(spec, "flags")
        .map(items)
        .unwrap_or_default()
        .iter()
        .filter_map(|f| f.get("+").and_then(|s| s.as_str()))
        .map(|s| {
            KEY_FLAG_NAMES
                .iter()
                .find(|n| **n == s)
                .copied()
                .unwrap_or("unknown")
        })
        .collect()
}

/// Whether tagged key specs name any real key (a spec without `not_key`).
pub(crate) fn has_key_specs(specs: &serde_json::Value) -> bool {
    items(specs)
        .iter()
        .any(|s| !spec_flags(s).contains(&"not_key"))
}

/// Key-spec flag names Redis 7.0 reports.
const KEY_FLAG_NAMES: &[&str] = &[
    "RO",
    "RW",
    "OW",
    "RM",
    "access",
    "update",
    "insert",
    "delete",
    "not_key",
    "incomplete",
    "variable_flags",
];

/// The keys of `argv` (`argv[0]` the command) with each key's flags, found
/// through Redis's key specs of `cmd` the way Redis 7.0 reads them: a
/// spec begins at an index or after a keyword (searched from `startfrom`,
/// backwards when negative), then takes a range (`lastkey` relative to the
/// start, or from the end when negative, `limit` dividing what is left)
/// or a count (`keynumidx` names the argument holding it, the keys follow
/// at `firstkey`). `None` when the specs cannot say (a spec of unknown
/// type, an incomplete one, a count that is not an integer, positions out
/// of range): the caller falls back to the command's own key finder.
pub(crate) fn keys_by_spec(name: &str, argv: &[&[u8]]) -> Option<Vec<(usize, Vec<&'static str>)>> {
    let meta = redis_meta(name)?;
    let argc = argv.len() as i64;
    let specs = items(&meta.key_specs);
    // Flags that depend on the arguments come from the command's own
    // finder ([`proc_key_flags`]).
    if specs
        .iter()
        .any(|s| spec_flags(s).contains(&"variable_flags"))
    {
        return None;
    }
    let mut out = Vec::new();
    for spec in specs {
        let flags = spec_flags(spec);
        if flags.contains(&"not_key") {
            continue;
        }
        let bs = field(spec, "begin_search")?;
        let bs_spec = field(bs, "spec")?;
        let num = |m: &serde_json::Value, k: &str| field(m, k).and_then(|v| v.as_i64());
        let first = match field(bs, "type").and_then(|t| t.as_str())? {
            "index" => num(bs_spec, "index")?,
            "keyword" => {
                let word = field(bs_spec, "keyword")?.as_str()?.as_bytes();
                let from = num(bs_spec, "startfrom")?;
                let (start, end, dir) = if from > 0 {
                    (from, argc - 1, 1)
                } else {
                    (argc + from, 1, -1)
                };
                let mut found = 0;
                let mut i = start;
                while i != end && (1..argc).contains(&i) {
                    if argv[i as usize].eq_ignore_ascii_case(word) {
                        found = i + 1;
                        break;
                    }
                    i += dir;
                }
                if found == 0 {
                    continue;
                }
                found
            }
            _ => return None,
        };
        let fk = field(spec, "find_keys")?;
        let fk_spec = field(fk, "spec")?;
        let (first, last, step) = match field(fk, "type").and_then(|t| t.as_str())? {
            "range" => {
                let lastkey = num(fk_spec, "lastkey")?;
                let limit = num(fk_spec, "limit")?;
                let last = if lastkey >= 0 {
                    first + lastkey
                } else if limit == 0 {
                    argc + lastkey
                } else {
                    first + ((argc - first) / limit + lastkey)
                };
                (first, last, num(fk_spec, "keystep")?)
            }
            "keynum" => {
                let at = first + num(fk_spec, "keynumidx")?;
                let n = parse_i64(argv.get(at as usize)?).filter(|n| *n >= 0)?;
                let first = first + num(fk_spec, "firstkey")?;
                (first, first + n - 1, num(fk_spec, "keystep")?)
            }
            _ => return None,
        };
        if last >= argc || last < first || first >= argc || step < 1 {
            return None;
        }
        let mut i = first;
        while i <= last {
            out.push((i as usize, flags.clone()));
            i += step;
        }
        if flags.contains(&"incomplete") {
            return None;
        }
    }
    Some(out)
}

/// The flags Redis 7.0's own key finders (`getkeys_proc`) give the `n`th
/// key of `argv` when the key specs cannot: SORT's key is read and its
/// STORE destination overwritten; SET reads its key only with GET;
/// BITFIELD writes unless every operation is a GET; MIGRATE reads and
/// deletes its keys; the others give none.
pub(crate) fn proc_key_flags(name: &str, n: usize, argv: &[&[u8]]) -> &'static [&'static str] {
    const RO_ACCESS: &[&str] = &["RO", "access"];
    const RW_ACCESS_UPDATE: &[&str] = &["RW", "access", "update"];
    match name {
        "sort" | "sort_ro" if n == 0 => RO_ACCESS,
        "sort" | "sort_ro" => &["OW", "update"],
        "set" if argv.iter().skip(3).any(|a| is(a, "get")) => RW_ACCESS_UPDATE,
        "set" => &["OW", "update"],
        "migrate" => &["RW", "access", "delete"],
        "bitfield" => {
            let mut i = 2;
            while i < argv.len() {
                let rest = argv.len() - i - 1;
                if is(argv[i], "get") && rest >= 2 {
                    i += 3;
                } else if is(argv[i], "overflow") && rest >= 1 {
                    i += 2;
                } else {
                    return RW_ACCESS_UPDATE;
                }
            }
            RO_ACCESS
        }
        _ => &[],
    }
}

// ----------------------------------------------------------------- LOLWUT

/// LOLWUT [VERSION v]: a small field of basalt columns (their hexagonal
/// tops, as seen from above) drawn from the arguments, then the version
/// line. `VERSION` must be an integer, as in Redis; other arguments are
/// ignored except that VERSION picks the pattern.
fn lolwut(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let mut version: i64 = 0;
    if args.len() >= 3 && is(&args[1], "version") {
        version = int_arg(&args[2])?;
    }
    let text = lolwut_text(version);
    ctx.enc().verbatim(b"txt", text.as_bytes());
    Ok(())
}

fn lolwut_text(version: i64) -> String {
    // A honeycomb of columns; each column's height (its shade) comes from
    // a small hash of its position and the version.
    const SHADES: &[u8] = b" .:-=+*#%@";
    let mut out = String::new();
    let (cols, rows) = (12u64, 5u64);
    for r in 0..rows {
        for half in 0..2 {
            if r % 2 == 1 {
                out.push_str("   ");
            }
            for c in 0..cols {
                let mut h = (version as u64)
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .wrapping_add(r * 131 + c * 7919);
                h ^= h >> 29;
                h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
                h ^= h >> 32;
                let shade = SHADES[(h % SHADES.len() as u64) as usize] as char;
                if half == 0 {
                    let _ = write!(out, "/{shade}{shade}{shade}\\ ");
                } else {
                    let _ = write!(out, "\\{shade}{shade}{shade}/ ");
                }
            }
            let trimmed = out.trim_end_matches(' ').len();
            out.truncate(trimmed);
            out.push('\n');
        }
    }
    let _ = writeln!(
        out,
        "\nBasalt columns, seen from above.\nBasalt ver. {} (Redis ver. {} compatible)",
        env!("CARGO_PKG_VERSION"),
        super::connection::REDIS_VERSION
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_draws_one_column_per_sample_with_its_age_below() {
        let mut s = Series::default();
        // Series::add is private to cmdstats; build through the public
        // path instead.
        let st = crate::cmdstats::CommandStats::new(1);
        st.config_set(
            "latency-monitor-threshold",
            crate::cmdstats::Setting::Int(1),
        );
        st.latency_sample_if_needed("command", 50);
        if let Some((_, got)) = st.latency_events().into_iter().next() {
            s = got;
        }
        let now = s.latest().unwrap().0 + 12;
        let text = graph("command", &s, now);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "command - high 50 ms, low 50 ms (all time high 50 ms)"
        );
        assert_eq!(lines[1].len(), 80);
        assert_eq!(&lines[2..6], &["#", "|", "|", "|"]);
        assert_eq!(&lines[6..], &["1", "2", "s"]);
    }

    #[test]
    fn subcommand_rows_follow_the_table_and_agree_with_redis_data() {
        for full in NOT_RUN {
            assert!(redis_meta(full).is_some(), "{full} is Redis's");
            assert!(lookup_subcommand(full.as_bytes()).is_none(), "{full}");
        }
        for full in BASALT_ONLY {
            assert!(redis_meta(full).is_none(), "{full} is not Redis 7.0.15's");
            let container = full.split('|').next().unwrap();
            assert!(super::super::lookup(container.as_bytes()).is_some());
        }
        let commands = super::super::all().count();
        let mut next = commands;
        for (idx, c) in super::super::all().enumerate() {
            for s in subcommands(idx) {
                assert_eq!(s.row, next, "{}", s.full);
                next += 1;
                assert_eq!(s.full, format!("{}|{}", c.name, s.name));
                assert!(s.meta.arity != 0 && s.meta.flags.is_some() && s.meta.keys.is_some());
                assert!(s.meta.acl_categories.is_some() && s.meta.docs.is_some());
                let found = lookup_subcommand(s.full.to_ascii_uppercase().as_bytes());
                assert_eq!(found.map(|f| f.row), Some(s.row));
            }
        }
        assert_eq!(next - commands, subcommand_count());
        assert!(subcommand_count() >= 80, "{}", subcommand_count());
    }

    #[test]
    fn lolwut_ends_with_the_version_line() {
        let t = lolwut_text(5);
        assert!(t.ends_with("compatible)\n"), "{t}");
        assert!(t.contains("Basalt ver. "));
        assert_ne!(lolwut_text(5), lolwut_text(6));
    }
}
