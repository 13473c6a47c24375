//! ROLE, WAIT and the SENTINEL commands clients use to find the leader of
//! a replicated group (`crate::repl`), answered from the Raft state.
//!
//! The one idea a reader needs: **every node of a group is also its own
//! Sentinel.** A Sentinel-aware client (redis-py `Sentinel`, Jedis, Lettuce,
//! go-redis's failover client) is given the nodes' client addresses as its
//! "sentinels", asks any of them for the master of its service, and gets
//! the Raft leader's client address; after a failover it asks again (its
//! writes to the old leader answer `-READONLY`). A node answers for any
//! master name, since it knows one group. On a single node, ROLE answers
//! `master` with no replicas and SENTINEL is refused as Redis refuses it
//! outside Sentinel mode.

use basalt_resp::{Args, Encoder};

use super::flags::*;
use super::{def, is, CommandDef, Ctx, Error, Group, Result};
use crate::repl::{Member, View};

/// ROLE, READONLY, READWRITE, WAIT and SENTINEL.
#[rustfmt::skip]
pub const COMMANDS: &[CommandDef] = &[
    def("role", 1, NOSCRIPT | LOADING | STALE | FAST, (0, 0, 0), Group::Server, "2.8.12", "Return the role of the instance in the context of replication.", role),
    def("readonly", 1, FAST | LOADING | STALE, (0, 0, 0), Group::Cluster, "3.0.0", "Enables read queries for a connection to a Redis Cluster replica node.", readonly),
    def("readwrite", 1, FAST | LOADING | STALE, (0, 0, 0), Group::Cluster, "3.0.0", "Disables read queries for a connection to a Redis Cluster replica node.", readwrite),
    // Not BLOCKING and in the connection group: Redis 7.0's flags
    // (`noscript`) and ACL categories (`@slow @connection`); its docs say
    // "generic" (redis_commands.json).
    def("wait", 3, NOSCRIPT, (0, 0, 0), Group::Connection, "3.0.0", "Wait for the synchronous replication of all the write commands sent in the context of the current connection.", wait),
    def("sentinel", -2, ADMIN | NOSCRIPT | LOADING | STALE, (0, 0, 0), Group::Sentinel, "2.8.4", "Sentinel commands: the leader of a replicated Basalt group (GET-MASTER-ADDR-BY-NAME, MASTERS, MASTER, REPLICAS, SLAVES, SENTINELS, MYID).", sentinel),
];

/// READONLY: on a node of a replicated group, this connection's reads skip
/// the read barrier and may be stale (what the node has applied), as reads
/// from a Redis Cluster replica after READONLY. A single node answers as a
/// Redis server without cluster support.
fn readonly(ctx: &mut Ctx<'_>, _args: Args<'_>) -> Result<()> {
    set_stale_reads(ctx, true)
}

/// READWRITE: back to linearizable reads.
fn readwrite(ctx: &mut Ctx<'_>, _args: Args<'_>) -> Result<()> {
    set_stale_reads(ctx, false)
}

fn set_stale_reads(ctx: &mut Ctx<'_>, on: bool) -> Result<()> {
    if ctx.shared.repl.get().is_none() {
        return Err(Error::Msg(
            "ERR This instance has cluster support disabled".into(),
        ));
    }
    ctx.conn
        .info
        .stale_reads
        .store(on, std::sync::atomic::Ordering::Relaxed);
    ctx.ok();
    Ok(())
}

fn role(ctx: &mut Ctx<'_>, _args: Args<'_>) -> Result<()> {
    let Some(repl) = ctx.shared.repl.get() else {
        let mut e = ctx.enc();
        e.array(3);
        e.bulk(b"master");
        e.integer(0);
        e.array(0);
        return Ok(());
    };
    let v = repl.view();
    if v.leader == Some(v.me) {
        let followers: Vec<_> = v.members.iter().filter(|m| m.id != v.me).collect();
        let mut e = ctx.enc();
        e.array(3);
        e.bulk(b"master");
        e.integer(v.applied as i64);
        e.array(followers.len());
        for m in followers {
            let (ip, port) = m.client_host_port();
            e.array(3);
            e.bulk(ip.as_bytes());
            e.bulk(port.as_bytes());
            e.bulk(m.matched.unwrap_or(0).to_string().as_bytes());
        }
    } else {
        let leader = v.leader_member();
        let (ip, port) = leader.map_or(("", "0"), |m| m.client_host_port());
        let port: i64 = port.parse().unwrap_or(0);
        let mut e = ctx.enc();
        e.array(5);
        e.bulk(b"slave");
        e.bulk(ip.as_bytes());
        e.integer(port);
        e.bulk(if leader.is_some() {
            b"connected"
        } else {
            b"connect"
        });
        e.integer(v.applied as i64);
    }
    Ok(())
}

fn sentinel(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result<()> {
    let Some(repl) = ctx.shared.repl.get() else {
        // What redis-server answers outside Sentinel mode.
        return Err(Error::Msg(
            format!(
                "ERR unknown command 'SENTINEL', with args beginning with: {}",
                args.iter()
                    .skip(1)
                    .map(|a| format!("'{}' ", String::from_utf8_lossy(a)))
                    .collect::<String>()
            )
            .into(),
        ));
    };
    let sub = &args[1];
    let v = repl.view();
    let name = args.get(2).unwrap_or(b"");
    if is(sub, "get-master-addr-by-name") && args.len() == 3 {
        match v.leader_member().filter(|m| !m.client.is_empty()) {
            Some(m) => {
                let (ip, port) = m.client_host_port();
                let mut e = ctx.enc();
                e.array(2);
                e.bulk(ip.as_bytes());
                e.bulk(port.as_bytes());
            }
            None => ctx.null(),
        }
    } else if is(sub, "masters") && args.len() == 2 {
        // Listed once its client address is known (the leader publishes
        // it within a fraction of a second of its election).
        let n = usize::from(v.leader_member().is_some_and(|m| !m.client.is_empty()));
        ctx.array(n);
        if n == 1 {
            let name = ctx.shared.config.master_name.clone();
            master_entry(&mut ctx.enc(), &v, name.as_bytes());
        }
    } else if is(sub, "master") && args.len() == 3 {
        if v.leader_member().is_none_or(|m| m.client.is_empty()) {
            return Err(Error::Msg("ERR No such master with that name".into()));
        }
        master_entry(&mut ctx.enc(), &v, name);
    } else if (is(sub, "replicas") || is(sub, "slaves")) && args.len() == 3 {
        let leader = v.leader;
        let followers: Vec<_> = v.members.iter().filter(|m| Some(m.id) != leader).collect();
        let (mhost, mport) = v
            .leader_member()
            .map_or(("", "0"), |m| m.client_host_port());
        let mut e = ctx.enc();
        e.array(followers.len());
        for m in followers {
            let mut fields = instance_fields(m.client.clone(), m, "slave", &v);
            fields.extend([
                ("info-refresh", "0".into()),
                ("role-reported", "slave".into()),
                ("role-reported-time", "0".into()),
                ("master-link-down-time", "0".into()),
                ("master-link-status", "ok".into()),
                ("master-host", mhost.into()),
                ("master-port", mport.into()),
                ("slave-priority", "100".into()),
                ("slave-repl-offset", m.matched.unwrap_or(0).to_string()),
                ("replica-announced", "1".into()),
            ]);
            fields_map(&mut e, &fields);
        }
    } else if is(sub, "sentinels") && args.len() == 3 {
        let others: Vec<_> = v.members.iter().filter(|m| m.id != v.me).collect();
        let mut e = ctx.enc();
        e.array(others.len());
        for m in others {
            let mut fields = instance_fields(format!("basalt-node-{}", m.id), m, "sentinel", &v);
            fields.extend([
                ("last-hello-message", "0".into()),
                ("voted-leader", "?".into()),
                ("voted-leader-epoch", "0".into()),
            ]);
            fields_map(&mut e, &fields);
        }
    } else if is(sub, "myid") && args.len() == 2 {
        ctx.bulk(format!("basalt-node-{}", v.me).as_bytes());
    } else {
        return Err(Error::Msg(
            format!(
                "ERR Unknown sentinel subcommand '{}'",
                String::from_utf8_lossy(sub)
            )
            .into(),
        ));
    }
    Ok(())
}

/// One master's fields, as Sentinel lists them (flat pairs in RESP2, a
/// map in RESP3).
fn master_entry(e: &mut Encoder<'_>, v: &View, name: &[u8]) {
    let leader = v.leader_member().expect("checked by the caller");
    let others = v.members.len().saturating_sub(1);
    let name = String::from_utf8_lossy(name).into_owned();
    let mut fields = instance_fields(name, leader, "master", v);
    fields.extend([
        ("info-refresh", "0".into()),
        ("role-reported", "master".into()),
        ("role-reported-time", "0".into()),
        ("config-epoch", v.term.to_string()),
        ("num-slaves", others.to_string()),
        ("num-other-sentinels", others.to_string()),
        ("quorum", (v.members.len() / 2 + 1).to_string()),
        ("failover-timeout", v.election_ms.to_string()),
        ("parallel-syncs", "1".into()),
    ]);
    fields_map(e, &fields);
}

/// The fields Sentinel lists first for every instance (master, replica or
/// sentinel): its name, address, run id, flags and link state.
fn instance_fields(name: String, m: &Member, flags: &str, v: &View) -> Vec<(&'static str, String)> {
    let (ip, port) = m.client_host_port();
    vec![
        ("name", name),
        ("ip", ip.into()),
        ("port", port.into()),
        ("runid", format!("basalt-node-{}", m.id)),
        ("flags", flags.into()),
        ("link-pending-commands", "0".into()),
        ("link-refcount", "1".into()),
        ("last-ping-sent", "0".into()),
        ("last-ok-ping-reply", "0".into()),
        ("last-ping-reply", "0".into()),
        ("down-after-milliseconds", v.election_ms.to_string()),
    ]
}

fn fields_map(e: &mut Encoder<'_>, fields: &[(&str, String)]) {
    e.map(fields.len());
    for (k, val) in fields {
        e.bulk(k.as_bytes());
        e.bulk(val.as_bytes());
    }
}

/// How often a WAIT blocked on a node of a group looks again at what its
/// followers hold (a single node has no replicas: it waits its timeout).
const WAIT_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// WAIT numreplicas timeout: how many replicas hold this connection's
/// writes, once `numreplicas` do or `timeout` ms (0: no limit) passed.
///
/// A single node has none: `0`, at once when `numreplicas` <= 0, else after
/// the timeout, as a Redis master without replicas answers. On the leader
/// of a group, the followers whose log reaches the last index of the
/// leader's log when WAIT first ran: every write of this connection was
/// answered, so committed and in that log, before WAIT, so that count never
/// overstates (it may wait for other clients' entries too). On a
/// follower, which does not see the others' logs, the count Raft
/// guarantees for every acknowledged write: a majority holds it, so the
/// leader's quorum less one (1 of 3, 2 of 5). Redis refuses WAIT on a
/// replica; a Basalt follower forwards writes, so a client of it may ask.
/// Inside EXEC, and while an entry applies, it answers at once.
fn wait(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result<()> {
    let need = super::int_arg(&args[1])?;
    let timeout = match super::parse_i64(&args[2]) {
        None => return Err(Error::err("timeout is not an integer or out of range")),
        Some(t) if t < 0 => return Err(Error::err("timeout is negative")),
        // Redis 7.0 takes any positive timeout (one past the clock's range
        // never comes).
        Some(t) => t as u64,
    };
    let id = ctx.conn.info.id;
    let blocking = &ctx.shared.blocking;
    // A re-run carries what the first run saw: the index to reach and the
    // deadline (unix ms, 0: none).
    let rerun = blocking.is_blocked(id);
    let memo = rerun
        .then(|| blocking.memo(id))
        .flatten()
        .filter(|m| m.len() == 16);
    let (target, deadline_ms) = match memo {
        Some(m) => (
            u64::from_le_bytes(m[..8].try_into().expect("8 bytes")),
            u64::from_le_bytes(m[8..].try_into().expect("8 bytes")),
        ),
        // The last index in the leader's log when WAIT first runs: at or
        // above every write answered so far, this client's included (its
        // applied index may not yet show the entry just answered, and a
        // leader elected a moment ago may not have applied what it
        // forwarded as a follower). The deadline from the clock now, not
        // the batch's reading.
        None => (
            ctx.shared.repl.get().map_or(0, |r| r.view().last_log),
            if timeout == 0 {
                0
            } else {
                crate::state::now_ms().saturating_add(timeout)
            },
        ),
    };
    let acked = acked_replicas(ctx, target);
    let now = crate::state::now_ms();
    let over = deadline_ms != 0 && now >= deadline_ms;
    let released = rerun
        && blocking
            .waiter(id)
            .is_some_and(|w| !matches!(w.unblock_reason(), crate::blocking::Unblock::No));
    if acked >= need || over || released || crate::monitor::in_exec() || crate::blocking::applying()
    {
        if rerun {
            blocking.finish(id);
        }
        ctx.int(acked);
        return Ok(());
    }
    // Wait: until the deadline on a single node; in a group, a look again
    // every WAIT_POLL (a fresh waiter each time, with the same memo).
    // A deadline centuries away is none (a timer that far would overflow).
    let left = (deadline_ms != 0 && deadline_ms - now < 1 << 40)
        .then(|| std::time::Duration::from_millis(deadline_ms - now));
    let step = match (ctx.shared.repl.get(), left) {
        (None, left) => left,
        (Some(_), Some(left)) => Some(left.min(WAIT_POLL)),
        (Some(_), None) => Some(WAIT_POLL),
    };
    if rerun {
        blocking.finish(id);
    }
    crate::blocking::block_on(ctx, &[], step);
    let mut memo = target.to_le_bytes().to_vec();
    memo.extend_from_slice(&deadline_ms.to_le_bytes());
    ctx.shared.blocking.set_memo(id, memo);
    Ok(())
}

/// The replicas WAIT counts as holding log index `target` (see [`wait`]).
fn acked_replicas(ctx: &Ctx<'_>, target: u64) -> i64 {
    let Some(repl) = ctx.shared.repl.get() else {
        return 0;
    };
    let v = repl.view();
    if v.leader == Some(v.me) {
        v.members
            .iter()
            .filter(|m| m.id != v.me && m.matched.unwrap_or(0) >= target)
            .count() as i64
    } else {
        // A quorum of the voters (learners are not in it) less this one.
        (repl.voters() / 2) as i64
    }
}
