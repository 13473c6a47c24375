//! `--collections N`: memory per member of one big hash and one big sorted
//! set, Basalt against Redis.
//!
//! The one idea: a member's cost is the server's RSS growth while one
//! collection grows from nothing to N members, divided by N. For each
//! structure both servers start fresh (same flags as the throughput runs),
//! settle, have their RSS read, receive the same N commands from this
//! program's own pipelined client (one command per member, batches of
//! [`BATCH`] on one connection), settle again and have their RSS read
//! again. "Settled" means no AOF rewrite in progress (Redis forks one once
//! its AOF passes 64 MiB) and VmRSS steady within 0.5 % over one second.
//!
//! - hash: `HSET bench:hash field:<i> <16-byte value>`;
//! - sorted set: `ZADD bench:zset <i> member:<i>` (score i).
//!
//! Both VmRSS (what the OS charges, file-backed mapped pages included) and
//! RssAnon (heap only) are recorded; the ratio uses VmRSS. Basalt's data
//! directory growth per member is reported beside it (Redis's AOF too, for
//! information: its size depends on whether a rewrite ran).

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde::Serialize;

use super::client::{cmd, filler, Conn};
use super::{group, Reply, Server, ServerKind, Tools};
use crate::sysinfo;

/// Commands per pipelined batch.
pub(super) const BATCH: usize = 1000;
/// Bytes of each hash field's value.
pub(super) const VALUE_BYTES: usize = 16;
/// Longest wait for a server to settle before its RSS is read anyway.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Structure {
    Hash,
    Zset,
}

impl Structure {
    const BOTH: [Structure; 2] = [Structure::Hash, Structure::Zset];

    fn name(self) -> &'static str {
        match self {
            Structure::Hash => "hash",
            Structure::Zset => "zset",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Structure::Hash => "bench:hash",
            Structure::Zset => "bench:zset",
        }
    }

    /// The fill command, as the report states it.
    fn described(self) -> String {
        match self {
            Structure::Hash => format!("HSET bench:hash field:<i> <{VALUE_BYTES}-byte value>"),
            Structure::Zset => "ZADD bench:zset <i> member:<i>".into(),
        }
    }

    fn command(self, i: u64) -> Vec<Vec<u8>> {
        match self {
            Structure::Hash => cmd([
                b"HSET".as_slice(),
                self.key().as_bytes(),
                format!("field:{i}").as_bytes(),
                &filler(VALUE_BYTES, i),
            ]),
            Structure::Zset => cmd([
                "ZADD".to_string(),
                self.key().into(),
                i.to_string(),
                format!("member:{i}"),
            ]),
        }
    }

    fn len_command(self) -> &'static str {
        match self {
            Structure::Hash => "HLEN",
            Structure::Zset => "ZCARD",
        }
    }
}

/// One server's figures for one structure.
#[derive(Debug, Clone, Serialize)]
pub(super) struct MemRecord {
    pub(super) structure: Structure,
    pub(super) server: ServerKind,
    pub(super) members: u64,
    pub(super) fill_command: String,
    pub(super) rss_before: u64,
    pub(super) rss_after: u64,
    pub(super) rss_anon_before: u64,
    pub(super) rss_anon_after: u64,
    /// VmRSS growth per member.
    pub(super) rss_bytes_per_member: f64,
    /// RssAnon growth per member.
    pub(super) anon_bytes_per_member: f64,
    pub(super) data_dir_bytes_before: u64,
    pub(super) data_dir_bytes_after: u64,
    pub(super) data_dir_bytes_per_member: f64,
    /// Wall time of the pipelined fill (one client, batches of [`BATCH`]).
    pub(super) fill_seconds: f64,
    /// Time waited after the fill for the server to settle.
    pub(super) settle_seconds: f64,
    /// False if it was still changing after the settle limit.
    pub(super) settled: bool,
}

/// Redis against Basalt for one structure.
#[derive(Debug, Clone, Serialize)]
pub(super) struct MemSummary {
    pub(super) structure: Structure,
    pub(super) members: u64,
    pub(super) redis_rss_bytes_per_member: f64,
    pub(super) basalt_rss_bytes_per_member: f64,
    /// basalt / redis.
    pub(super) rss_ratio: f64,
    pub(super) basalt_data_dir_bytes_per_member: f64,
    pub(super) redis_data_dir_bytes_per_member: f64,
}

/// Runs the fills; returns every server's record, the summaries and the
/// server command lines.
pub(super) fn run(
    members: u64,
    tools: &Tools,
    pinned: bool,
    base: &Path,
    startup: Duration,
    timeout: Duration,
) -> Result<(Vec<MemRecord>, Vec<MemSummary>, Vec<String>)> {
    let mut records = Vec::new();
    let mut lines = Vec::new();
    for (n, structure) in Structure::BOTH.into_iter().enumerate() {
        let mut servers = Vec::new();
        for kind in ServerKind::BOTH {
            let s = Server::start(kind, tools, pinned, base, startup)?;
            eprintln!(
                "[collections] started {} for the {} fill (pid {}): {}",
                kind.name(),
                structure.name(),
                s.pid(),
                s.command_line
            );
            lines.push(s.command_line.clone());
            servers.push(s);
        }
        // Alternate which server fills first.
        if n % 2 == 1 {
            servers.reverse();
        }
        for s in &mut servers {
            let r = fill_one(s, structure, members, timeout)
                .with_context(|| format!("{} fill of {}", structure.name(), s.kind.name()))?;
            eprintln!(
                "[collections] {} {:<6} {} members: RSS {:+.1} MiB = {:.1} B/member (anon {:.1}), \
                 data dir {:.1} B/member, fill {:.1} s, settled in {:.1} s{}",
                structure.name(),
                s.kind.name(),
                group(members as f64),
                (r.rss_after as f64 - r.rss_before as f64) / (1 << 20) as f64,
                r.rss_bytes_per_member,
                r.anon_bytes_per_member,
                r.data_dir_bytes_per_member,
                r.fill_seconds,
                r.settle_seconds,
                if r.settled { "" } else { " (NOT settled)" }
            );
            records.push(r);
        }
        // Stops both and removes their directories before the next pair.
        drop(servers);
    }
    let summary = Structure::BOTH
        .into_iter()
        .filter_map(|st| {
            let of = |k: ServerKind| records.iter().find(|r| r.structure == st && r.server == k);
            let (r, b) = (of(ServerKind::Redis)?, of(ServerKind::Basalt)?);
            Some(MemSummary {
                structure: st,
                members,
                redis_rss_bytes_per_member: r.rss_bytes_per_member,
                basalt_rss_bytes_per_member: b.rss_bytes_per_member,
                rss_ratio: b.rss_bytes_per_member / r.rss_bytes_per_member,
                basalt_data_dir_bytes_per_member: b.data_dir_bytes_per_member,
                redis_data_dir_bytes_per_member: r.data_dir_bytes_per_member,
            })
        })
        .collect();
    Ok((records, summary, lines))
}

fn fill_one(s: &mut Server, st: Structure, members: u64, timeout: Duration) -> Result<MemRecord> {
    let mut conn = Conn::open(s.port, timeout)?;
    settle(s, &mut conn)?;
    let before = sysinfo::rss_of(s.pid()).context("read the server's RSS")?;
    let dir_before = sysinfo::dir_bytes(&s.data_dir())?;

    let t0 = Instant::now();
    conn.send_all(members, BATCH, |i| st.command(i))?;
    let fill_seconds = t0.elapsed().as_secs_f64();
    s.setup_requests += members;
    let len = conn.integer(cmd([st.len_command(), st.key()]))?;
    ensure!(
        u64::try_from(len)? == members,
        "{} {} is {len} after {members} distinct members were added",
        st.len_command(),
        st.key()
    );

    let t1 = Instant::now();
    let settled = settle(s, &mut conn)?;
    let settle_seconds = t1.elapsed().as_secs_f64();
    s.ensure_running()?;
    let after = sysinfo::rss_of(s.pid()).context("read the server's RSS")?;
    let dir_after = sysinfo::dir_bytes(&s.data_dir())?;
    let per = |a: u64, b: u64| (b as f64 - a as f64) / members as f64;
    Ok(MemRecord {
        structure: st,
        server: s.kind,
        members,
        fill_command: st.described(),
        rss_before: before.total,
        rss_after: after.total,
        rss_anon_before: before.anon,
        rss_anon_after: after.anon,
        rss_bytes_per_member: per(before.total, after.total),
        anon_bytes_per_member: per(before.anon, after.anon),
        data_dir_bytes_before: dir_before,
        data_dir_bytes_after: dir_after,
        data_dir_bytes_per_member: per(dir_before, dir_after),
        fill_seconds,
        settle_seconds,
        settled,
    })
}

/// Waits until no AOF rewrite runs and VmRSS has stayed within 0.5 % for a
/// second (or [`SETTLE_LIMIT`] passes: then `false`).
fn settle(s: &mut Server, conn: &mut Conn) -> Result<bool> {
    let start = Instant::now();
    let mut recent: Vec<u64> = Vec::new();
    while start.elapsed() < SETTLE_LIMIT {
        s.ensure_running()?;
        let rewriting = info_flag(conn, "persistence", "aof_rewrite_in_progress")?
            || info_flag(conn, "persistence", "aof_rewrite_scheduled")?;
        let rss = sysinfo::rss_of(s.pid()).map_or(0, |r| r.total);
        recent.push(rss);
        if recent.len() > 5 {
            recent.remove(0);
        }
        let (lo, hi) = (
            recent.iter().copied().min().unwrap_or(0),
            recent.iter().copied().max().unwrap_or(0),
        );
        if !rewriting && recent.len() == 5 && (hi - lo) as f64 <= 0.005 * hi as f64 {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Ok(false)
}

/// Whether `INFO <section>` reports `<field>:1`. A field the server does not
/// report counts as 0.
fn info_flag(conn: &mut Conn, section: &str, field: &str) -> Result<bool> {
    let text = match conn.call(cmd(["INFO", section]))? {
        Reply::Bulk(Some(b)) => String::from_utf8_lossy(&b).into_owned(),
        _ => return Ok(false),
    };
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .any(|(k, v)| k == field && v.trim() == "1"))
}

/// The memory table.
pub(super) fn report(records: &[MemRecord], summary: &[MemSummary]) -> String {
    let mut s = String::new();
    let Some(first) = summary.first() else {
        return s;
    };
    let _ = writeln!(
        s,
        "== memory per member: one collection of {} members on fresh servers ==",
        group(first.members as f64)
    );
    for st in Structure::BOTH {
        let _ = writeln!(s, "  {:<5} {}", st.name(), st.described());
    }
    let _ = writeln!(
        s,
        "one command per member, pipelined in batches of {BATCH} on one connection; RSS read \
         before and after, each time once no AOF rewrite ran and VmRSS held within 0.5 % for 1 s"
    );
    let _ = writeln!(
        s,
        "{:<6} {:>16} {:>17} {:>7} {:>17} {:>16} {:>16}",
        "", "redis VmRSS", "basalt VmRSS", "b/r", "basalt data dir", "redis AOF dir", "RssAnon r/b"
    );
    let _ = writeln!(
        s,
        "{:<6} {:>16} {:>17} {:>7} {:>17} {:>16} {:>16}",
        "", "B/member", "B/member", "", "B/member", "B/member", "B/member"
    );
    for x in summary {
        let anon = |k: ServerKind| {
            records
                .iter()
                .find(|r| r.structure == x.structure && r.server == k)
                .map_or("-".to_string(), |r| {
                    format!("{:.1}", r.anon_bytes_per_member)
                })
        };
        let _ = writeln!(
            s,
            "{:<6} {:>16.1} {:>17.1} {:>6.2}x {:>17.1} {:>16.1} {:>16}",
            x.structure.name(),
            x.redis_rss_bytes_per_member,
            x.basalt_rss_bytes_per_member,
            x.rss_ratio,
            x.basalt_data_dir_bytes_per_member,
            x.redis_data_dir_bytes_per_member,
            format!("{}/{}", anon(ServerKind::Redis), anon(ServerKind::Basalt)),
        );
    }
    for r in records.iter().filter(|r| !r.settled) {
        let _ = writeln!(
            s,
            "  WARNING: {} {} had not settled after {:.0} s; its figure is a snapshot",
            r.server.name(),
            r.structure.name(),
            r.settle_seconds
        );
    }
    let _ = writeln!(s);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_commands_name_distinct_members_with_the_stated_sizes() {
        let h = Structure::Hash.command(7);
        assert_eq!(
            h[..3],
            [
                b"HSET".to_vec(),
                b"bench:hash".to_vec(),
                b"field:7".to_vec()
            ]
        );
        assert_eq!(h[3].len(), VALUE_BYTES);
        assert_eq!(
            Structure::Zset.command(7),
            cmd(["ZADD", "bench:zset", "7", "member:7"])
        );
    }
}
