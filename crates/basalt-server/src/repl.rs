//! Replication: this server as a node of a Raft group (`basalt-raft`).
//!
//! The one idea a reader needs: **a write runs once per node, at apply
//! time, through the same command table as everywhere else.** On the
//! leader, a connection does not execute a write command; it proposes a
//! [`Proposal`] (the command's RESP bytes, the database, the protocol and
//! the leader's clock reading) and waits. Once a majority holds the entry,
//! every node's state machine hands it to [`ReplApplier::apply`], which
//! runs the command with a stand-in connection on that database, at that
//! time, inside the engine write batch the state machine opened (so the
//! effects commit with the entry's applied marker). On the leader the
//! reply bytes go back to the waiting connection; followers discard them.
//! Every in-memory structure beside the engine (sorted-set index, list
//! caches, keyspace events, tracking invalidations) is kept by the command
//! code itself, so followers keep them exactly as the leader does.
//!
//! Determinism (brief decision 9): a command is a function of the state,
//! its arguments and its time, and the time is the entry's. Versions (the
//! engine's sequence numbers, seen by WATCH, VERSION, CAS and HTTP ETags)
//! are made equal on every node by raising the shared sequence counter to
//! `index << 20` before each entry. A command that picks at random (SPOP)
//! draws from [`entry_random`], seeded by the log index, over an order
//! every node shares, so every node removes the same members.
//!
//! Expiry: no engine sweeps keys on its own in a group. Reads hide expired
//! keys (the engine compares with the command's time); the leader's
//! sweeper proposes [`Proposal::Expire`] for keys it finds expired, and
//! every node deletes them (if still expired at the entry's time), with
//! the `expired` event.
//!
//! A follower forwards a write to the leader over the Raft port and relays
//! the leader's reply (`RaftNode::write`), so any command works on any
//! node. Reads are linearizable on every node: before the first read of
//! a batch, the node passes a read barrier (ReadIndex; on a follower, one
//! request to the leader). A client that sent READONLY skips it and reads
//! what this node has applied.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use basalt_engine::CheckpointFile;
use basalt_raft::{Applier, Held, NodeAddr, NodeConfig, NodeId, RaftNode, WriteError};
use basalt_resp::{Args, Encoder, Frame, Limits, Parsed, Protocol, RequestParser};
use serde::{Deserialize, Serialize};

use crate::commands::{self, After, Conn};
use crate::conn::PREFETCH_AHEAD;
use crate::state::{ClientInfo, Shared};

/// Sequence numbers one entry may use before the next entry's floor.
const SEQ_SHIFT: u32 = 20;
/// Sequence numbers between the floors of a batch's proposals
/// (`BATCH_PROPOSALS` of them fit in one entry's 2^20).
const SUB_SHIFT: u32 = 12;
const _: () = assert!((BATCH_PROPOSALS as u64) << SUB_SHIFT <= 1 << SEQ_SHIFT);

thread_local! {
    /// While an entry applies on this thread: the state of the generator
    /// its random choices draw from (seeded by the log index, so every
    /// node draws the same numbers).
    static ENTRY_RNG: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// Sets the entry's generator for as long as it lives.
pub(crate) struct EntrySeed;

impl EntrySeed {
    pub(crate) fn set(index: u64) -> EntrySeed {
        ENTRY_RNG.with(|c| c.set(Some(index ^ 0x5851_F42D_4C95_7F2D)));
        EntrySeed
    }
}

impl Drop for EntrySeed {
    fn drop(&mut self) {
        ENTRY_RNG.with(|c| c.set(None));
    }
}

/// A random number for a command applying a replicated entry, the same on
/// every node (SplitMix64 over the entry's seed); `None` outside an apply.
/// A command that picks at random (SPOP) must, when this is `Some`, also
/// pick from an order every node shares (the members sorted), not from the
/// engine's index order, which differs between nodes.
pub(crate) fn entry_random() -> Option<u64> {
    ENTRY_RNG.with(|c| {
        let state = c.get()?.wrapping_add(0x9E37_79B9_7F4A_7C15);
        c.set(Some(state));
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Some(z ^ (z >> 31))
    })
}

/// What a log entry carries (bincode).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Proposal {
    /// Commands run on database `db` at `time_ms`, RESP-encoded back to
    /// back. `exec`: run them as a transaction (the reply is the array of
    /// their replies, or a null array if a watched key's version differs).
    Run {
        /// The database selected when the command was sent.
        db: u32,
        /// Encode the reply in RESP3.
        resp3: bool,
        /// The leader's clock (unix ms) when it proposed.
        time_ms: u64,
        /// The commands.
        #[serde(with = "serde_bytes")]
        commands: Vec<u8>,
        /// `Some(watched keys: (db, key, version))` for EXEC.
        exec: Option<Vec<(u32, Vec<u8>, u64)>>,
    },
    /// A blocked client's command run again after one of its keys was
    /// signalled on its node: as [`Proposal::Run`] of one command, except
    /// that a key of another type is skipped rather than failing, as for
    /// a blocked client in Redis (`crate::blocking`).
    Retry {
        /// The database selected when the command was sent.
        db: u32,
        /// Encode the reply in RESP3.
        resp3: bool,
        /// The leader's clock (unix ms) when it proposed.
        time_ms: u64,
        /// The command.
        #[serde(with = "serde_bytes")]
        commands: Vec<u8>,
    },
    /// A write of the HTTP API's `/v1/keys` (PUT, DELETE, with their
    /// preconditions), run at `time_ms`; the reply is its answer (bincode).
    Key {
        /// The proposer's clock (unix ms).
        time_ms: u64,
        /// The write.
        write: crate::http::keys::KeyWrite,
    },
    /// A work-queue operation of the HTTP API (`http::queues`), run as
    /// one program at `time_ms`; the reply is its answer (bincode).
    Queue {
        /// The proposer's clock (unix ms).
        time_ms: u64,
        /// The operation.
        write: crate::http::queues::QueueWrite,
    },
    /// Proposals of several clients in one entry (group commit on the
    /// leader, [`combine`]): each a bincode [`Proposal`] (never a batch,
    /// never a blocking command's run), applied in order; the reply is the
    /// bincode of their replies in order.
    Batch {
        /// The proposals.
        entries: Vec<serde_bytes::ByteBuf>,
    },
    /// Delete these keys of `db` if they have expired at `time_ms`.
    Expire {
        /// The database.
        db: u32,
        /// The leader's clock (unix ms).
        time_ms: u64,
        /// The keys the leader found expired.
        keys: Vec<Vec<u8>>,
    },
}

impl Proposal {
    /// The same command as a blocked client's re-run ([`Proposal::Retry`]).
    pub(crate) fn into_retry(self) -> Proposal {
        match self {
            Proposal::Run {
                db,
                resp3,
                time_ms,
                commands,
                exec: None,
            } => Proposal::Retry {
                db,
                resp3,
                time_ms,
                commands,
            },
            other => other,
        }
    }
}

/// Most commands one entry of a pipeline carries, and most bytes.
const MERGED_COMMANDS: usize = 128;
const MERGED_BYTES: usize = 1 << 20;

/// The replicated writes of one batch of a connection, not proposed yet
/// (`crate::conn`). Consecutive writes (same database and
/// protocol, no EXEC) merge into one entry that runs them in order and
/// answers their replies back to back: a pipeline of 16 SETs is one log
/// entry, one apply and one commit round, not sixteen. Nothing is proposed
/// before [`Pipelined::resolve`], where the entries go to the log in the
/// connection's order.
#[derive(Default)]
pub(crate) struct Pipelined {
    /// Each entry with the number of commands it carries.
    entries: Vec<(Proposal, usize)>,
}

impl Pipelined {
    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds a write, merged into the last entry when it can be.
    pub(crate) fn push(&mut self, p: Proposal) {
        if let (
            Some((
                Proposal::Run {
                    db,
                    resp3,
                    commands,
                    exec: None,
                    ..
                },
                n,
            )),
            Proposal::Run {
                db: db2,
                resp3: resp3_2,
                commands: more,
                exec: None,
                ..
            },
        ) = (self.entries.last_mut(), &p)
        {
            if *db == *db2
                && *resp3 == *resp3_2
                && *n < MERGED_COMMANDS
                && commands.len() + more.len() <= MERGED_BYTES
            {
                if *n == 1 {
                    // Room for a pipeline's worth of such writes at once,
                    // not one doubling after another.
                    commands.reserve((more.len() * 15).min(MERGED_BYTES - commands.len()));
                }
                commands.extend_from_slice(more);
                *n += 1;
                return;
            }
        }
        self.entries.push((p, 1));
    }

    /// Proposes every entry (each sent on its first poll, so they reach the
    /// log in order, in one append when they can), waits for them and
    /// appends their replies in order: an entry that failed answers its
    /// error line once per command it carried. A follower forwards them
    /// one after the other (each is its own request to the leader, and two
    /// in flight could arrive in either order).
    pub(crate) async fn resolve(&mut self, repl: &Repl, out: &mut Vec<u8>, protocol: Protocol) {
        if self.entries.is_empty() {
            return;
        }
        let answer = |out: &mut Vec<u8>, reply: Result<Vec<u8>, String>, n: usize| match reply {
            Ok(bytes) => out.extend_from_slice(&bytes),
            Err(line) => {
                for _ in 0..n {
                    Encoder::new(out, protocol).error(line.as_bytes());
                }
            }
        };
        if !repl.is_leader() {
            for (p, n) in self.entries.drain(..) {
                answer(out, repl.propose(&p).await, n);
            }
            return;
        }
        type Reply<'r> = std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<Vec<u8>, String>> + Send + 'r>,
        >;
        let mut futures: Vec<(Reply<'_>, usize)> = self
            .entries
            .drain(..)
            .map(|(p, n)| {
                // Queued even if leadership moves meanwhile: the combiner
                // keeps their order either way.
                let f: Reply<'_> = Box::pin(async move { repl.propose_queued(&p).await });
                (f, n)
            })
            .collect();
        let mut early = Vec::with_capacity(futures.len());
        for (f, _) in futures.iter_mut() {
            early.push(match futures_util::poll!(f.as_mut()) {
                std::task::Poll::Ready(r) => Some(r),
                std::task::Poll::Pending => None,
            });
        }
        for ((f, n), done) in futures.into_iter().zip(early) {
            let reply = match done {
                Some(r) => r,
                None => f.await,
            };
            answer(out, reply, n);
        }
    }
}

/// What an entry whose command would have blocked answers instead of a
/// reply (after a 0 byte, which starts no RESP reply): the proposer's
/// node blocks the client there, on these keys, and proposes the command
/// again when one is signalled.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WouldBlock {
    /// The entry's log index.
    pub index: u64,
    /// The keys it waits for.
    pub keys: Vec<Vec<u8>>,
    /// Its timeout in ms (`None`: forever).
    pub timeout_ms: Option<u64>,
    /// Keys a re-run skipped for holding another type: their wakeups go
    /// on to the next waiter.
    pub passed: Vec<Vec<u8>>,
}

impl WouldBlock {
    /// Reads it from a reply, if the reply is one.
    pub(crate) fn from_reply(reply: &[u8]) -> Option<WouldBlock> {
        match reply.split_first() {
            Some((0, rest)) => bincode::deserialize(rest).ok(),
            _ => None,
        }
    }

    fn to_reply(&self) -> Vec<u8> {
        let mut out = vec![0];
        out.extend(bincode::serialize(self).expect("plain data"));
        out
    }
}

/// A running replicated node.
#[derive(Debug)]
pub struct Repl {
    /// The Raft node.
    pub node: RaftNode<ReplApplier>,
    /// Every member's Raft address (`--peers`).
    pub peers: BTreeMap<NodeId, String>,
    /// The log index of the entry applying now (or last applied) here.
    applying: Arc<AtomicU64>,
    /// Proposals waiting to join an entry on the leader ([`combine`]).
    combiner: tokio::sync::mpsc::UnboundedSender<Job>,
    /// Where writes' time goes and what the apply threads did (INFO).
    pub stats: Arc<ReplStats>,
    /// Ends the Raft runtime's thread ([`Repl::stop`]).
    raft_thread: parking_lot::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

/// A proposal waiting for the leader's group commit ([`combine`]): its
/// bincode and where its reply goes.
#[derive(Debug)]
struct Job {
    bytes: Vec<u8>,
    /// When it was queued.
    queued: std::time::Instant,
    reply: tokio::sync::oneshot::Sender<Result<Vec<u8>, String>>,
}

/// Proposals in one combined entry, at most.
const BATCH_PROPOSALS: usize = 256;
/// Bytes of proposals in one combined entry, at most (one proposal larger
/// than this still goes, alone).
const BATCH_BYTES: usize = 4 << 20;

/// The largest entry a node applies on its Raft thread (`Applier::bounded`).
const BOUNDED_BYTES: usize = 1 << 20;

/// Whether a write of the kind [`crate::lanes::bounded`] knows, to a key
/// holding `large` now (what `Db::large_map` says), does bounded work. A
/// string write replaces a large map, dropping every field, as DEL would;
/// a hash or set write adds to or removes from one of its type, or fails
/// on another, unless the map expires: a write that finds it expired (by
/// the apply's clock, the proposer's, which this thread cannot foresee)
/// drops it first. So only a large map without an expiry takes a hash or
/// set write in bounded time, and that bound is amortised: the insert
/// that grows the map's field table rehashes it whole, and the first write
/// that breaks a map kept as a run of numbered fields (`Fields`) turns it
/// into a table, both linear in the map's size.
fn drop_is_bounded(string_write: bool, large: Option<basalt_engine::LargeMap>) -> bool {
    match large {
        None => true,
        Some(m) => !string_write && m.expiry == 0,
    }
}

/// Group commit on the leader: proposals of all clients queue here, and
/// whatever queued while `raft-in-flight` entries (`Config::raft_in_flight`,
/// default 4) were in flight goes to the
/// log as one [`Proposal::Batch`] entry, submitted in queue order (so a
/// connection's proposals stay in its order). Under load that is one
/// append, one replication round, one fsync and one apply hand-off for
/// many clients' writes instead of one each; a lone client's proposal goes
/// at once, alone. A node that is not (or no longer) the leader sends each
/// queued proposal its own way ([`Repl::write_bytes`], which forwards).
async fn combine(shared: Weak<Shared>, mut rx: tokio::sync::mpsc::UnboundedReceiver<Job>) {
    let Some(in_flight) = shared.upgrade().map(|s| s.config.raft_in_flight) else {
        return;
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(in_flight));
    while let Some(first) = rx.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut bytes = first.bytes.len();
        let mut jobs = vec![first];
        while jobs.len() < BATCH_PROPOSALS && bytes < BATCH_BYTES {
            match rx.try_recv() {
                Ok(j) => {
                    bytes += j.bytes.len();
                    jobs.push(j);
                }
                Err(_) => break,
            }
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let Some(repl) = shared.repl.get() else {
            return;
        };
        let stats = repl.stats.clone();
        let submitted = std::time::Instant::now();
        let waited: u128 = jobs
            .iter()
            .map(|j| submitted.duration_since(j.queued).as_micros())
            .sum();
        let (payload, single) = if jobs.len() == 1 {
            (jobs[0].bytes.clone(), true)
        } else {
            (encode_batch(jobs.iter().map(|j| &j.bytes[..])), false)
        };
        match repl.node.submit(payload).await {
            Ok(reply) => {
                // Counted once submitted, so the means are over entries
                // that went to the log.
                stats.submitted.fetch_add(1, Ordering::Relaxed);
                stats
                    .submitted_proposals
                    .fetch_add(jobs.len() as u64, Ordering::Relaxed);
                stats.queue_us.fetch_add(waited as u64, Ordering::Relaxed);
                tokio::spawn(async move {
                    let r = reply.await;
                    stats
                        .round_us
                        .fetch_add(submitted.elapsed().as_micros() as u64, Ordering::Relaxed);
                    drop(slot);
                    answer_jobs(jobs, r, single);
                });
            }
            Err(WriteError::ForwardToLeader { .. }) => {
                // No longer the leader: forwarded one by one, here, so
                // that later queued proposals cannot overtake them.
                drop(slot);
                for j in jobs {
                    let r = repl.write_bytes(j.bytes).await;
                    let _ = j.reply.send(r);
                }
            }
            Err(WriteError::Failed(e)) => {
                drop(slot);
                for j in jobs {
                    let _ = j.reply.send(Err(format!("ERR replication: {e}")));
                }
            }
        }
    }
}

/// Hands each job of a combined entry its reply.
fn answer_jobs(jobs: Vec<Job>, r: Result<Vec<u8>, WriteError>, single: bool) {
    let replies: Result<Vec<Vec<u8>>, String> = match r {
        Ok(bytes) if single => Ok(vec![bytes]),
        Ok(bytes) => bincode::deserialize::<Vec<serde_bytes::ByteBuf>>(&bytes)
            .map(|v| v.into_iter().map(|b| b.into_vec()).collect())
            .map_err(|e| format!("ERR replication: a batch's replies: {e}")),
        Err(WriteError::ForwardToLeader { .. }) => Err(NO_LEADER.into()),
        Err(WriteError::Failed(e)) => Err(format!("ERR replication: {e}")),
    };
    match replies {
        Ok(replies) if replies.len() == jobs.len() => {
            for (j, r) in jobs.into_iter().zip(replies) {
                let _ = j.reply.send(Ok(r));
            }
        }
        Ok(replies) => {
            let e = format!(
                "ERR replication: a batch of {} answered {} replies",
                jobs.len(),
                replies.len()
            );
            for j in jobs {
                let _ = j.reply.send(Err(e.clone()));
            }
        }
        Err(e) => {
            for j in jobs {
                let _ = j.reply.send(Err(e.clone()));
            }
        }
    }
}

/// A member of the group as this node sees it.
#[derive(Debug, Clone)]
pub struct Member {
    /// Node id.
    pub id: NodeId,
    /// Raft address.
    pub raft: String,
    /// Client address (empty until published).
    pub client: String,
    /// On the leader: the last log index replicated to it.
    pub matched: Option<u64>,
}

/// What ROLE, INFO and SENTINEL report, read from the Raft metrics.
#[derive(Debug, Clone)]
pub struct View {
    /// This node's id.
    pub me: NodeId,
    /// The current leader, if known.
    pub leader: Option<NodeId>,
    /// The current term.
    pub term: u64,
    /// The last applied log index.
    pub applied: u64,
    /// The last log index.
    pub last_log: u64,
    /// The last log index of this node's current snapshot (0: none).
    pub snapshot: u64,
    /// The log is compacted (purged) up to this index (0: not yet).
    pub purged: u64,
    /// Every voter.
    pub members: Vec<Member>,
    /// The election timeout's upper bound (ms): how long a failover takes
    /// at most after the leader stops answering.
    pub election_ms: u64,
}

impl Member {
    /// The client address as (host, port), both as text; ("", "0") when
    /// not published yet.
    pub fn client_host_port(&self) -> (&str, &str) {
        split_addr(&self.client)
    }
}

/// `host:port` as its two parts (the port after the last colon).
pub fn split_addr(addr: &str) -> (&str, &str) {
    addr.rsplit_once(':').unwrap_or((addr, "0"))
}

impl View {
    /// The leader's entry in `members`.
    pub fn leader_member(&self) -> Option<&Member> {
        let l = self.leader?;
        self.members.iter().find(|m| m.id == l)
    }
}

/// How a command is routed on a replicated node.
pub(crate) enum Route {
    /// Run here, as on a single node (reads, connection commands).
    Local,
    /// Propose it and answer with what applying it returned.
    Propose(Proposal),
    /// Answer this error line.
    Refuse(String),
}

/// Starts the Raft node on a runtime of its own and returns it with that
/// runtime's handle (the proposal combiner runs there too). With
/// `threads` 1 (`raft-threads`, the default) the runtime is a
/// current-thread one on a thread of its own ("basalt-raft"): openraft's
/// core, its replication and state-machine tasks, the RPC server and
/// client and the combiner then wake each other on one thread, where on
/// the server's shared multi-threaded runtime every hand-off between them
/// was a cross-thread wake-up (about eight per entry on a leader,
/// measured), and short entries apply in place on it
/// (`Applier::bounded`). More threads make it a multi-threaded runtime of
/// that many workers.
async fn start_on_raft_thread(
    cfg: NodeConfig,
    db: Arc<basalt_engine::Db>,
    applier: ReplApplier,
    threads: usize,
) -> io::Result<(
    RaftNode<ReplApplier>,
    tokio::runtime::Handle,
    tokio::sync::oneshot::Sender<()>,
)> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (end, ended) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("basalt-raft".into())
        .spawn(move || {
            ON_RAFT_THREAD.with(|on| on.set(true));
            let mut builder = if threads <= 1 {
                tokio::runtime::Builder::new_current_thread()
            } else {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(threads).thread_name("basalt-raft-rt");
                b
            };
            let rt = match builder.enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                let started = RaftNode::start_with_db(cfg, db, applier)
                    .await
                    .map(|node| (node, tokio::runtime::Handle::current()));
                if tx.send(started).is_ok() {
                    // The node's tasks run here until `Repl::stop` (or
                    // for the process's life); the runtime's drop then
                    // ends what is left of them.
                    let _ = ended.await;
                }
            });
        })?;
    let (node, handle) = rx
        .await
        .map_err(|_| io::Error::other("the Raft thread ended while starting"))??;
    Ok((node, handle, end))
}

/// The reply to a write when no leader can take it (an election is under
/// way, or this node is cut off from the majority).
pub const NO_LEADER: &str = "CLUSTERDOWN The group has no leader that can take writes now";

impl Repl {
    /// Starts the node: `config` must name `node_id` and `peers`.
    pub(crate) async fn start(shared: &Arc<Shared>) -> io::Result<Repl> {
        let c = &shared.config;
        let id = c.node_id.expect("a replicated configuration");
        let peers: BTreeMap<NodeId, String> = c.peers.iter().cloned().collect();
        // Without --peers the node waits to be added (`basalt cluster add`):
        // its client host is the bound address (a wildcard is replaced by
        // the leader with the host of its Raft address).
        let bind = c.bind.to_string();
        let (host, port) = match peers.get(&id) {
            Some(own) => split_addr(own),
            None if peers.is_empty() => (bind.as_str(), "0"),
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("--peers does not name this node's id {id}"),
                ))
            }
        };
        let raft_port = c.raft_port.unwrap_or_else(|| port.parse().unwrap_or(0));
        let mut cfg = NodeConfig::new(
            id,
            std::net::SocketAddr::new(c.bind, raft_port),
            c.dir.join("raft"),
        );
        cfg.client_addr = format!("{host}:{}", shared.addr.port());
        cfg.peers = peers.clone();
        cfg.snapshot_every = c.raft_snapshot_every;
        cfg.keep_after_snapshot = cfg.keep_after_snapshot.min(c.raft_snapshot_every);
        cfg.sync = match c.appendfsync {
            crate::Appendfsync::Always => basalt_engine::SyncPolicy::Always,
            crate::Appendfsync::Everysec => basalt_engine::SyncPolicy::EveryMs(1000),
            crate::Appendfsync::No => basalt_engine::SyncPolicy::Never,
        };
        let db = shared
            .keyspace
            .raft_db()
            .expect("keyspace opened for replication")
            .clone();
        let client = shared.clients.detached(shared.addr, shared.addr, -1);
        client.authenticated.store(true, Ordering::Relaxed);
        let applying = Arc::new(AtomicU64::new(0));
        let stats = Arc::new(ReplStats::default());
        let applier = ReplApplier {
            shared: Arc::downgrade(shared),
            client,
            applying: applying.clone(),
            stats: stats.clone(),
            pool: std::sync::OnceLock::new(),
        };
        let (node, raft_rt, raft_thread) =
            start_on_raft_thread(cfg, db, applier, c.raft_threads).await?;
        let (combiner, jobs) = tokio::sync::mpsc::unbounded_channel();
        raft_rt.spawn(combine(Arc::downgrade(shared), jobs));
        Ok(Repl {
            node,
            peers,
            applying,
            combiner,
            stats,
            raft_thread: parking_lot::Mutex::new(Some(raft_thread)),
        })
    }

    /// Stops the Raft node (openraft, its RPC, its other tasks; the log
    /// synced) and ends its runtime's thread: at shutdown, before the
    /// databases close, so that nothing applies into a closed keyspace and
    /// the node stops answering as a member.
    pub(crate) async fn stop(&self) -> io::Result<()> {
        let r = self.node.stop().await;
        if let Some(end) = self.raft_thread.lock().take() {
            let _ = end.send(());
        }
        r
    }

    /// Blocks client `id` (database `db`) on this node after its command's
    /// entry answered `b` ([`WouldBlock`]): registers its waiter unless it
    /// is blocked already (a re-run, re-armed before it was proposed), and
    /// wakes it at once if an entry after `b`'s may have signalled one of
    /// its keys before the waiter was there.
    pub(crate) fn block_here(&self, shared: &Shared, id: u64, db: usize, b: &WouldBlock) {
        if shared.blocking.waiter(id).is_none() {
            let keys: Vec<&[u8]> = b.keys.iter().map(|k| &k[..]).collect();
            let deadline = b
                .timeout_ms
                .map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms));
            shared.blocking.register(id, db, &keys, deadline);
            // Entries store their index before they run: one that started
            // after this load signals the waiter registered above.
            if self.applying.load(Ordering::SeqCst) > b.index {
                shared.blocking.wake(id);
            }
        }
        for k in &b.passed {
            shared.blocking.pass_on(id, db, k);
        }
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.node.id()
    }

    /// How many voters the group has now (learners are not counted).
    pub fn voters(&self) -> usize {
        self.node
            .raft()
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .count()
    }

    /// The group as this node sees it now.
    pub fn view(&self) -> View {
        let m = self.node.raft().metrics().borrow().clone();
        let members = m
            .membership_config
            .membership()
            .nodes()
            .map(|(&id, n)| Member {
                id,
                raft: n.raft.clone(),
                client: n.client.clone(),
                matched: m
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(&id).cloned().flatten())
                    .map(|l| l.index),
            })
            .collect();
        View {
            me: self.node.id(),
            leader: self.node.leader_id(),
            term: m.current_term,
            applied: m.last_applied.map_or(0, |l| l.index),
            last_log: m.last_log_index.unwrap_or(0),
            snapshot: m.snapshot.map_or(0, |l| l.index),
            purged: m.purged.map_or(0, |l| l.index),
            members,
            election_ms: 600,
        }
    }

    /// Waits until a read on this node is linearizable (on the leader
    /// under its lease at once, else a heartbeat round; on a follower one
    /// request to the leader and a wait until this node has applied as
    /// far; at most 2 s).
    /// `Err` is the error line to answer the read with instead.
    pub(crate) async fn read_barrier(&self) -> Result<(), String> {
        self.node
            .read_barrier(Duration::from_secs(2))
            .await
            .map_err(|e| format!("CLUSTERDOWN The group cannot serve a consistent read now: {e}"))
    }

    /// Whether this node is the leader now.
    pub fn is_leader(&self) -> bool {
        self.node.leader_id() == Some(self.node.id())
    }

    /// The leader, if known: its id and addresses.
    pub fn leader(&self) -> Option<(NodeId, NodeAddr)> {
        self.node.leader()
    }

    /// Proposes `p` and returns the reply applying it produced here, or
    /// an error line. On the leader it joins the group commit ([`combine`]):
    /// the proposal is queued when this future is first polled, so
    /// proposals made one after the other reach the log in that order.
    /// Not for a blocking command's run ([`Repl::propose_alone`]).
    pub(crate) async fn propose(&self, p: &Proposal) -> Result<Vec<u8>, String> {
        if !self.is_leader() {
            return self.propose_alone(p).await;
        }
        self.propose_queued(p).await
    }

    /// [`Repl::propose`] through the group commit whether or not this node
    /// leads (the combiner forwards, in queue order, what it cannot
    /// submit): for proposals whose order matters among themselves once
    /// one of them went this way (`Pipelined::resolve` on the leader).
    pub(crate) async fn propose_queued(&self, p: &Proposal) -> Result<Vec<u8>, String> {
        let bytes = bincode::serialize(p).map_err(|e| format!("ERR replication: {e}"))?;
        let (reply, rx) = tokio::sync::oneshot::channel();
        if let Err(e) = self.combiner.send(Job {
            bytes,
            queued: std::time::Instant::now(),
            reply,
        }) {
            return self.write_bytes(e.0.bytes).await;
        }
        rx.await
            .unwrap_or_else(|_| Err("ERR replication: the proposal was dropped".into()))
    }

    /// [`Repl::propose`] in an entry of its own: for a blocking command,
    /// whose entry may answer [`WouldBlock`] with the entry's index (a
    /// later proposal in the same entry could signal its keys before the
    /// client is registered to wait).
    pub(crate) async fn propose_alone(&self, p: &Proposal) -> Result<Vec<u8>, String> {
        let bytes = bincode::serialize(p).map_err(|e| format!("ERR replication: {e}"))?;
        self.write_bytes(bytes).await
    }

    /// Writes one proposal's bincode as an entry (forwarded to the leader
    /// by a follower).
    async fn write_bytes(&self, bytes: Vec<u8>) -> Result<Vec<u8>, String> {
        match self.node.write(bytes).await {
            Ok(reply) => Ok(reply),
            Err(WriteError::ForwardToLeader { .. }) => Err(NO_LEADER.into()),
            Err(WriteError::Failed(e)) => Err(format!("ERR replication: {e}")),
        }
    }

    /// [`Repl::propose`] for a blocking command: while no leader can take
    /// it (an election under way) it is proposed again every 100 ms, for
    /// up to 5 s, as the client is prepared to wait anyway; after that,
    /// the CLUSTERDOWN error. Safe to repeat: that error means the entry
    /// was not appended anywhere (refused, or never sent).
    pub(crate) async fn propose_patiently(&self, p: &Proposal) -> Result<Vec<u8>, String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            match self.propose_alone(p).await {
                Err(line) if line == NO_LEADER && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                r => return r,
            }
        }
    }

    /// Decides how a command from `conn` runs (see [`Route`]).
    pub(crate) fn route(
        &self,
        shared: &Shared,
        conn: &Conn,
        cmd: Option<&'static commands::CommandDef>,
        args: &Args<'_>,
    ) -> Route {
        let Some(cmd) = cmd else {
            return Route::Local;
        };
        if conn.tx.in_multi() {
            // Queued locally; EXEC is routed by `route_exec`.
            return Route::Local;
        }
        if !is_replicated_write(cmd, args) {
            return Route::Local;
        }
        if !cmd.arity_ok(args.len()) || !crate::auth::may_run(shared, &conn.info, cmd.flags) {
            // Answered locally with the same error as anywhere.
            return Route::Local;
        }
        // Sized once: the array header, and per argument its bytes and at
        // most 16 of header and CRLF (growing it was 2 % of a leader's CPU
        // under pipelined SETs).
        let mut wire = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
        match rewrite_evalsha(shared, args) {
            Ok(Some(eval)) => basalt_resp::write_command(&mut wire, eval.iter().map(|a| &a[..])),
            Ok(None) => basalt_resp::write_command(&mut wire, args.iter()),
            Err(line) => return Route::Refuse(line),
        }
        Route::Propose(Proposal::Run {
            db: conn.db as u32,
            resp3: conn.protocol == Protocol::Resp3,
            time_ms: proposal_time(conn),
            commands: wire,
            exec: None,
        })
    }

    /// Routes EXEC of `conn`'s transaction: `None` runs it locally (a
    /// queue without writes, or one EXEC answers EXECABORT for); else the
    /// proposal (the connection has left MULTI).
    pub(crate) fn route_exec(&self, conn: &mut Conn) -> Option<Route> {
        if !crate::tx::queue_writes(conn) {
            return None;
        }
        let (commands, watched) = crate::tx::take_queue(conn)?;
        Some(Route::Propose(Proposal::Run {
            db: conn.db as u32,
            resp3: conn.protocol == Protocol::Resp3,
            time_ms: proposal_time(conn),
            commands,
            exec: Some(watched),
        }))
    }
}

/// The time a write from `conn` is proposed at (unix ms): the clock's
/// reading the connection took after its previous command or at its
/// batch's start (`Conn::tick`), not one more reading per write.
fn proposal_time(conn: &Conn) -> u64 {
    match conn.tick {
        0 => crate::state::now_ms(),
        ns => ns / 1_000_000,
    }
}

/// Whether command `cmd` (looked up from the request) from `conn` must
/// wait for the read barrier: a read (a read-only command, or EXEC of a
/// queue that does not write, which runs locally) from a client that did
/// not ask for stale reads.
pub(crate) fn needs_barrier(conn: &Conn, cmd: Option<&commands::CommandDef>) -> bool {
    if conn.info.stale_reads.load(Ordering::Relaxed) {
        return false;
    }
    match cmd {
        Some(c) if c.name == "exec" => conn.tx.in_multi(),
        Some(c) => c.flags & commands::flags::READONLY != 0 && !conn.tx.in_multi(),
        None => false,
    }
}

/// Whether running `cmd` with `args` changes replicated state, so that a
/// node of a group must go through the log: write commands, scripts that
/// may write, the writing subcommands of FUNCTION and XGROUP, and
/// PUBLISH/SPUBLISH.
pub(crate) fn is_replicated_write(cmd: &commands::CommandDef, args: &Args<'_>) -> bool {
    cmd.is_write()
        || is_script_write(cmd.name)
        || writing_subcommand(cmd.name, args)
        || is_broadcast(cmd.name)
}

/// PUBLISH and SPUBLISH go through the log too, so that every node applies
/// them and delivers the message to its own subscribers: a message
/// published on any node reaches subscribers on every node, in one order.
/// The reply is the number of receivers on the leader (Redis Cluster
/// also counts one node's receivers).
fn is_broadcast(name: &str) -> bool {
    matches!(name, "publish" | "spublish")
}

/// Subcommands of containers that write replicated state: FUNCTION LOAD,
/// DELETE, FLUSH, RESTORE and every XGROUP subcommand but HELP.
fn writing_subcommand(name: &str, args: &Args<'_>) -> bool {
    let sub = || {
        args.get(1)
            .map(|a| a.to_ascii_lowercase())
            .unwrap_or_default()
    };
    match name {
        "function" => matches!(&sub()[..], b"load" | b"delete" | b"flush" | b"restore"),
        "xgroup" => args.len() > 2,
        _ => false,
    }
}

/// Scripts that may write (EVAL, EVALSHA, FCALL; not their `_RO` forms).
fn is_script_write(name: &str) -> bool {
    matches!(name, "eval" | "evalsha" | "fcall")
}

/// EVALSHA becomes EVAL with the script's body, so a follower that never
/// saw SCRIPT LOAD runs it too.
fn rewrite_evalsha(shared: &Shared, args: &Args<'_>) -> Result<Option<Vec<Vec<u8>>>, String> {
    if !args[0].eq_ignore_ascii_case(b"evalsha") || args.len() < 3 {
        return Ok(None);
    }
    let sha = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    let Some(body) = shared.scripts.cached_body(&sha) else {
        return Err("NOSCRIPT No matching script. Please use EVAL.".into());
    };
    let mut v: Vec<Vec<u8>> = vec![b"EVAL".to_vec(), body];
    v.extend(args.iter().skip(2).map(|a| a.to_vec()));
    Ok(Some(v))
}

thread_local! {
    /// Set on the thread that runs a node's Raft tasks
    /// ([`start_on_raft_thread`]), so an apply knows it runs there.
    static ON_RAFT_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The state machine's side of the server: runs committed entries.
pub struct ReplApplier {
    shared: Weak<Shared>,
    /// The stand-in client every entry runs as.
    client: Arc<ClientInfo>,
    /// The index of the entry applying now (see [`Repl::block_here`]).
    applying: Arc<AtomicU64>,
    /// Where writes' time goes and what the apply threads did (INFO).
    stats: Arc<ReplStats>,
    /// The apply threads beside the apply task's (started on first use).
    pool: std::sync::OnceLock<crate::lanes::Pool>,
}

/// Counts of the entries' stretches applied on several threads
/// (`crate::lanes`) and of where a write's time goes, for INFO
/// replication.
#[derive(Debug, Default)]
pub struct ReplStats {
    /// Stretches of proposals applied on the lanes.
    pub stretches: AtomicU64,
    /// Proposals among them.
    pub proposals: AtomicU64,
    /// Entries the leader's group commit submitted, and the proposals in
    /// them.
    pub submitted: AtomicU64,
    /// Proposals in the submitted entries.
    pub submitted_proposals: AtomicU64,
    /// Microseconds proposals waited in the group commit's queue, summed.
    pub queue_us: AtomicU64,
    /// Microseconds from an entry's submission to its reply (replicated,
    /// committed and applied here), summed over entries.
    pub round_us: AtomicU64,
    /// Entries applied here.
    pub applied: AtomicU64,
    /// Those among them applied on the thread that runs the node's Raft
    /// tasks (`Applier::bounded` said yes and its locks were free), not
    /// on the blocking pool.
    pub applied_on_raft_thread: AtomicU64,
    /// Microseconds spent applying them, summed.
    pub apply_us: AtomicU64,
}

impl ReplStats {
    /// `total / n`, 0 when `n` is 0.
    pub fn mean(total: &AtomicU64, n: &AtomicU64) -> u64 {
        let n = n.load(Ordering::Relaxed);
        total.load(Ordering::Relaxed).checked_div(n).unwrap_or(0)
    }
}

impl std::fmt::Debug for ReplApplier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplApplier").finish_non_exhaustive()
    }
}

/// The exec gate held exclusively while entries apply: no local batch
/// (reads) runs in the middle of an entry, so a transaction's or a
/// script's commands are isolated as on a single node.
struct GateHold(Arc<Shared>);

impl GateHold {
    fn new(shared: Arc<Shared>) -> GateHold {
        shared.gate.lock_exclusive_raw();
        GateHold(shared)
    }

    /// [`GateHold::new`] if the gate is free now. (Not `then_some`: a
    /// hold built eagerly and dropped on failure would release a gate it
    /// never took.)
    fn try_new(shared: Arc<Shared>) -> Option<GateHold> {
        if shared.gate.try_lock_exclusive_raw() {
            Some(GateHold(shared))
        } else {
            None
        }
    }
}

impl Drop for GateHold {
    fn drop(&mut self) {
        // SAFETY: taken exclusively in `new`, released once here.
        unsafe { self.0.gate.unlock_exclusive_raw() };
    }
}

fn gone() -> io::Error {
    io::Error::other("the server is shutting down")
}

impl Applier for ReplApplier {
    fn enter(&self) -> Box<dyn Held + '_> {
        match self.shared.upgrade() {
            Some(s) => Box::new(GateHold::new(s)),
            None => Box::new(()),
        }
    }

    fn try_enter(&self) -> Option<Box<dyn Held + '_>> {
        match self.shared.upgrade() {
            Some(s) => GateHold::try_new(s).map(|h| Box::new(h) as Box<dyn Held>),
            None => Some(Box::new(())),
        }
    }

    fn bounded(&self, payload: &[u8]) -> bool {
        // A single proposal may be far larger than a combined entry's
        // cap: past 1 MiB of commands the apply leaves the Raft thread.
        if payload.len() > BOUNDED_BYTES {
            return false;
        }
        let Some(shared) = self.shared.upgrade() else {
            return false;
        };
        let one = |p: &[u8]| match decode_proposal(p) {
            Ok(Proposal::Run {
                db,
                commands,
                exec: None,
                ..
            }) if (db as usize) < shared.keyspace.len() => {
                // Held by SWAPDB, FLUSHDB or a first open: not waited for.
                let Some(slot) = shared.keyspace.try_read(db as usize) else {
                    return false;
                };
                match slot.db().filter(|d| d.large_maps() > 0) {
                    // Nothing any write could drop in more than bounded time.
                    None => crate::lanes::bounded(&commands, |_, _| true),
                    Some(d) => crate::lanes::bounded(&commands, |string, key| {
                        drop_is_bounded(string, d.large_map(key))
                    }),
                }
            }
            _ => false,
        };
        match split_batch(payload) {
            Ok(Some(parts)) => parts.iter().all(|p| one(p)),
            Ok(None) => one(payload),
            Err(_) => false,
        }
    }

    fn apply(&self, index: u64, payload: &[u8]) -> io::Result<Vec<u8>> {
        let started = std::time::Instant::now();
        let r = self.apply_entry(index, payload);
        self.stats.applied.fetch_add(1, Ordering::Relaxed);
        if ON_RAFT_THREAD.with(|on| on.get()) {
            self.stats
                .applied_on_raft_thread
                .fetch_add(1, Ordering::Relaxed);
        }
        self.stats
            .apply_us
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        r
    }

    fn checkpoint(
        &self,
        dir: &Path,
        captured: &mut dyn FnMut(),
    ) -> io::Result<Vec<CheckpointFile>> {
        self.checkpoint_now(dir, captured)
    }

    fn install(&self, dir: &Path, index: u64) -> io::Result<()> {
        // Clients blocked here before the install compare with this index
        // (`Repl::block_here`): entries the snapshot folded in may have
        // signalled their keys.
        self.applying.store(index, Ordering::SeqCst);
        self.install_now(dir)
    }
}

/// The first sequence number proposal `sub` of entry `index` owns.
fn seq_floor(index: u64, sub: u64) -> u64 {
    (index << SEQ_SHIFT) + (sub << SUB_SHIFT)
}

/// The seed of proposal `sub` of entry `index`'s random choices.
fn proposal_seed(index: u64, sub: u64) -> u64 {
    index ^ (sub << 48)
}

/// The protocol a proposal's replies are encoded in.
fn protocol_of(resp3: bool) -> Protocol {
    if resp3 {
        Protocol::Resp3
    } else {
        Protocol::Resp2
    }
}

/// Commands in a stretch between barriers below which it is applied on
/// one thread anyway (handing shards to threads costs more than a few
/// writes).
const LANES_MIN_COMMANDS: usize = 64;

impl ReplApplier {
    /// Applies entry `index` (see [`Applier::apply`]).
    fn apply_entry(&self, index: u64, payload: &[u8]) -> io::Result<Vec<u8>> {
        match split_batch(payload)? {
            Some(entries) => {
                let mut proposals = Vec::with_capacity(entries.len());
                for e in entries {
                    let p = decode_proposal(e)?;
                    if matches!(p, Proposal::Batch { .. }) {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "a batch inside a batch",
                        ));
                    }
                    proposals.push(p);
                }
                let replies: Vec<serde_bytes::ByteBuf> = self
                    .apply_batch(index, proposals)?
                    .into_iter()
                    .map(serde_bytes::ByteBuf::from)
                    .collect();
                bincode::serialize(&replies).map_err(io::Error::other)
            }
            None => self.apply_one(index, 0, decode_proposal(payload)?),
        }
    }

    /// Applies the proposals of a combined entry in order and returns their
    /// replies. Stretches of proposals that `crate::lanes` places go
    /// command by command, each with the sequence numbers its place says,
    /// on several threads where `raft-apply-threads` allows; the others
    /// (barriers) one at a time, as an entry of one.
    fn apply_batch(&self, index: u64, proposals: Vec<Proposal>) -> io::Result<Vec<Vec<u8>>> {
        let shared = self.shared.upgrade().ok_or_else(gone)?;
        let n = proposals.len();
        // Every node places alike, whatever its thread count: the places
        // decide the sequence numbers.
        let plans: Vec<Option<Vec<crate::lanes::Unit>>> = proposals
            .iter()
            .map(|p| match p {
                Proposal::Run {
                    commands,
                    exec: None,
                    ..
                } => crate::lanes::place(commands, 1 << SUB_SHIFT),
                _ => None,
            })
            .collect();
        let mut replies: Vec<Vec<u8>> = Vec::with_capacity(n);
        let mut stretch: Vec<crate::lanes::Placed> = Vec::new();
        for (sub, (p, plan)) in proposals.into_iter().zip(plans).enumerate() {
            match (p, plan) {
                (
                    Proposal::Run {
                        db,
                        resp3,
                        time_ms,
                        commands,
                        ..
                    },
                    Some(units),
                ) => {
                    // Numbers from the proposal's floor, or past what an
                    // earlier write of the entry may have reached: the
                    // counter before a stretch (a barrier may have run past
                    // its 4,096), the previous proposal's most within one.
                    // The one-thread path absorbed such a run-on at the
                    // next proposal's floor; so does this.
                    let floor = seq_floor(index, sub as u64);
                    let reached = match stretch.last() {
                        None => shared.keyspace.seq(),
                        Some(prev) => {
                            prev.start + prev.units.last().map_or(0, |u| u.offset + u.records)
                        }
                    };
                    stretch.push(crate::lanes::Placed {
                        db: db as usize,
                        protocol: protocol_of(resp3),
                        time_ms,
                        commands,
                        start: floor.max(reached),
                        seed: proposal_seed(index, sub as u64),
                        units,
                    });
                }
                (p, _) => {
                    self.apply_stretch(&shared, index, std::mem::take(&mut stretch), &mut replies);
                    replies.push(self.apply_one(index, sub as u64, p)?);
                }
            }
        }
        self.apply_stretch(&shared, index, stretch, &mut replies);
        Ok(replies)
    }

    /// Applies a stretch of placed proposals (between barriers) and appends
    /// their replies: on this thread, or spread over the apply threads when
    /// there are any, the stretch is long enough to pay for handing it out,
    /// and nobody observes the order between keys (pub/sub subscribers,
    /// MONITOR; see `crate::lanes`). The same numbers either way; the
    /// shared counter is raised past them at the end.
    fn apply_stretch(
        &self,
        shared: &Arc<Shared>,
        index: u64,
        placed: Vec<crate::lanes::Placed>,
        replies: &mut Vec<Vec<u8>>,
    ) {
        if placed.is_empty() {
            return;
        }
        self.applying.store(index, Ordering::SeqCst);
        let proposals = placed.len() as u64;
        let stretch = crate::lanes::Stretch::new(shared.clone(), self.client.clone(), placed);
        let observed =
            shared.pubsub.total.load(Ordering::Relaxed) > 0 || shared.pubsub.monitors.active();
        let threads = shared.config.raft_apply_threads;
        let (out, high) = if threads < 2 || stretch.commands() < LANES_MIN_COMMANDS || observed {
            stretch.run_here()
        } else {
            let pool = self
                .pool
                .get_or_init(|| crate::lanes::Pool::new(threads - 1));
            self.stats.stretches.fetch_add(1, Ordering::Relaxed);
            self.stats.proposals.fetch_add(proposals, Ordering::Relaxed);
            stretch.run_spread(pool)
        };
        shared.keyspace.raise_seq(high);
        replies.extend(out);
    }

    /// Applies proposal `sub` of entry `index` (0 for an entry of one;
    /// see [`Applier::apply`]).
    fn apply_one(&self, index: u64, sub: u64, p: Proposal) -> io::Result<Vec<u8>> {
        let shared = &self.shared.upgrade().ok_or_else(gone)?;
        self.applying.store(index, Ordering::SeqCst);
        // A batch's proposals each get a floor of their own (4,096
        // sequence numbers apart; one that writes more runs on from the
        // counter, the same on every node) and a seed of their own.
        shared.keyspace.raise_seq(seq_floor(index, sub));
        let _seed = EntrySeed::set(proposal_seed(index, sub));
        let replay = crate::blocking::Replay::start(matches!(p, Proposal::Retry { .. }));
        let run = match p {
            Proposal::Run {
                db,
                resp3,
                time_ms,
                commands,
                exec,
            } => Ok((db, resp3, time_ms, commands, exec)),
            Proposal::Retry {
                db,
                resp3,
                time_ms,
                commands,
            } => Ok((db, resp3, time_ms, commands, None)),
            expire => Err(expire),
        };
        let reply = match run {
            Ok((db, resp3, time_ms, commands, exec)) => {
                let protocol = protocol_of(resp3);
                let mut conn = self.stand_in(db as usize, time_ms);
                conn.protocol = protocol;
                let mut out = Vec::new();
                match exec {
                    None => {
                        run_commands(shared, &mut conn, &mut out, &commands, false);
                        if let Some((keys, timeout)) = replay.take_blocked() {
                            out = WouldBlock {
                                index,
                                keys,
                                timeout_ms: timeout.map(|t| t.as_millis() as u64),
                                passed: replay.take_passed(),
                            }
                            .to_reply();
                        }
                    }
                    Some(watched) => {
                        let changed = watched.iter().any(|(db, key, version)| {
                            let slot = shared.keyspace.read(*db as usize);
                            slot.db().map_or(0, |d| d.version(key)) != *version
                        });
                        if changed {
                            Encoder::new(&mut out, protocol).null_array();
                        } else {
                            run_commands(shared, &mut conn, &mut out, &commands, true);
                        }
                    }
                }
                out
            }
            Err(Proposal::Expire { db, time_ms, keys }) => {
                let _pinned = crate::clock::pin(time_ms);
                let slot = shared.keyspace.read(db as usize);
                if let Some(d) = slot.db() {
                    for k in &keys {
                        // A write purges an expired key (with its event);
                        // `persist` of an expired key writes only that.
                        d.purge_expired(k).map_err(io::Error::other)?;
                    }
                }
                Vec::new()
            }
            Err(Proposal::Key { time_ms, write }) => {
                let _pinned = crate::clock::pin(time_ms);
                bincode::serialize(&write.apply(shared)).map_err(io::Error::other)?
            }
            Err(Proposal::Queue { time_ms, write }) => {
                let _pinned = crate::clock::pin(time_ms);
                write
                    .apply(shared, self.client.clone(), time_ms)
                    .map_err(io::Error::other)?
            }
            Err(Proposal::Batch { .. }) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a batch inside a batch",
                ))
            }
            Err(Proposal::Run { .. } | Proposal::Retry { .. }) => unreachable!("taken above"),
        };
        Ok(reply)
    }

    fn checkpoint_now(
        &self,
        dir: &Path,
        captured: &mut dyn FnMut(),
    ) -> io::Result<Vec<CheckpointFile>> {
        let shared = self.shared.upgrade().ok_or_else(gone)?;
        // Isolated from applies and local batches like an entry; the gate
        // is held only while the engine files are linked, and the image is
        // of the last entry applied when it was taken.
        let mut files = shared
            .keyspace
            .checkpoint(dir, || {
                let gate = GateHold::new(shared.clone());
                captured();
                gate
            })
            .map_err(io::Error::other)?;
        let mut conn = self.stand_in(0, crate::state::now_ms());
        let functions = match call(&shared, &mut conn, &[b"FUNCTION", b"DUMP"])? {
            Frame::Bulk(b) => b,
            _ => Vec::new(),
        };
        std::fs::write(dir.join("functions"), &functions)?;
        files.push(CheckpointFile {
            path: "functions".into(),
            len: functions.len() as u64,
        });
        Ok(files)
    }

    fn install_now(&self, dir: &Path) -> io::Result<()> {
        let shared = self.shared.upgrade().ok_or_else(gone)?;
        // `enter` holds the gate.
        shared.keyspace.install(dir).map_err(io::Error::other)?;
        let mut conn = self.stand_in(0, crate::state::now_ms());
        let functions = std::fs::read(dir.join("functions"))?;
        let reply = if functions.is_empty() {
            call(&shared, &mut conn, &[b"FUNCTION", b"FLUSH"])?
        } else {
            call(
                &shared,
                &mut conn,
                &[b"FUNCTION", b"RESTORE", &functions, b"FLUSH"],
            )?
        };
        if let Frame::Error(line) | Frame::BlobError(line) = reply {
            return Err(io::Error::other(format!(
                "restoring a snapshot's functions: {}",
                String::from_utf8_lossy(&line)
            )));
        }
        // Every key may have changed: clients tracking keys drop their
        // caches, clients blocked on keys that now hold something re-run.
        let hub = &shared.pubsub;
        if hub.tracking.active() {
            hub.tracking.flushed(hub, &shared.clients.all());
        }
        for n in 0..shared.keyspace.len() {
            let slot = shared.keyspace.read(n);
            if let Some(db) = slot.db() {
                shared.blocking.signal_db(n, |k| db.exists(k));
            }
        }
        Ok(())
    }
}

/// The bincode tag of [`Proposal::Batch`] (its variant index), taken from
/// an empty batch's encoding so that it follows the enum's order.
fn batch_tag() -> [u8; 4] {
    static TAG: std::sync::OnceLock<[u8; 4]> = std::sync::OnceLock::new();
    *TAG.get_or_init(|| {
        let empty = bincode::serialize(&Proposal::Batch {
            entries: Vec::new(),
        })
        .expect("plain data");
        let mut tag = [0; 4];
        tag.copy_from_slice(&empty[..4]);
        tag
    })
}

/// The bincode of a [`Proposal::Batch`] of these proposals' bincode, byte
/// for byte what encoding the owned batch gives (the tag, a u64 count,
/// each proposal as a u64 length and its bytes), written in one buffer
/// without first copying each proposal into one of its own.
fn encode_batch<'a>(parts: impl ExactSizeIterator<Item = &'a [u8]> + Clone) -> Vec<u8> {
    let size = 12 + parts.clone().map(|p| 8 + p.len()).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&batch_tag());
    out.extend_from_slice(&(parts.len() as u64).to_le_bytes());
    for p in parts {
        out.extend_from_slice(&(p.len() as u64).to_le_bytes());
        out.extend_from_slice(p);
    }
    out
}

/// The proposals of a [`Proposal::Batch`]'s bincode, borrowed from it (no
/// copy of each, as decoding the owned batch made); `None` if `payload`
/// is not a batch. Trailing bytes are ignored, as `bincode::deserialize`
/// ignores them.
fn split_batch(payload: &[u8]) -> io::Result<Option<Vec<&[u8]>>> {
    let Some((tag, rest)) = payload.split_first_chunk::<4>() else {
        return Ok(None);
    };
    if *tag != batch_tag() {
        return Ok(None);
    }
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "a malformed batch");
    let (count, mut rest) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
    let count = u64::from_le_bytes(*count);
    let mut parts = Vec::with_capacity((count as usize).min(BATCH_PROPOSALS));
    for _ in 0..count {
        let (len, tail) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
        let len = usize::try_from(u64::from_le_bytes(*len)).map_err(|_| bad())?;
        if tail.len() < len {
            return Err(bad());
        }
        parts.push(&tail[..len]);
        rest = &tail[len..];
    }
    Ok(Some(parts))
}

fn decode_proposal(bytes: &[u8]) -> io::Result<Proposal> {
    bincode::deserialize(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Runs one command (`args`) with `conn` and returns its reply.
fn call(shared: &Shared, conn: &mut Conn, args: &[&[u8]]) -> io::Result<Frame> {
    let mut wire = Vec::new();
    basalt_resp::write_command(&mut wire, args.iter().copied());
    let mut parser = RequestParser::new(Limits::default());
    let Ok(Parsed::Command { args, .. }) = parser.parse(&wire) else {
        return Err(io::Error::other("a snapshot command did not encode"));
    };
    let mut out = Vec::new();
    commands::execute(shared, conn, &mut out, args);
    match Frame::parse(&out) {
        Ok(Some((f, _))) => Ok(f),
        _ => Err(io::Error::other("a snapshot command's reply did not parse")),
    }
}

impl ReplApplier {
    fn stand_in(&self, db: usize, time_ms: u64) -> Conn {
        stand_in(&self.client, db, time_ms)
    }
}

/// The connection replicated commands run with: `client`'s, on database
/// `db`, at `time_ms`.
pub(crate) fn stand_in(client: &Arc<ClientInfo>, db: usize, time_ms: u64) -> Conn {
    Conn {
        db,
        protocol: Protocol::Resp2,
        info: client.clone(),
        tx: Default::default(),
        batch_clock: time_ms,
        tick: crate::state::now_ns(),
        script: Vec::new(),
        may_defer: false,
        deferred: Vec::new(),
        may_build_index: false,
        index_wanted: Vec::new(),
    }
}

/// Runs RESP-encoded `commands` with `conn`; `exec`: under an array header
/// of their count, as EXEC answers.
fn run_commands(shared: &Shared, conn: &mut Conn, out: &mut Vec<u8>, commands: &[u8], exec: bool) {
    let mut parser = RequestParser::new(Limits::default());
    if exec {
        let mut n = 0;
        let mut pos = 0;
        while let Ok(Parsed::Command { consumed, .. }) = parser.parse(&commands[pos..]) {
            pos += consumed;
            n += 1;
        }
        Encoder::new(out, conn.protocol).array(n);
    }
    let mut pos = 0;
    // Where the keys looked at ahead end: each stretch of commands first
    // has its keys' index entries loaded together (`prefetch_keys`).
    let mut ahead = 0;
    while pos < commands.len() {
        if pos >= ahead {
            ahead = prefetch_keys(shared, conn.db, commands, pos);
        }
        let Ok(Parsed::Command { args, consumed }) = parser.parse(&commands[pos..]) else {
            Encoder::new(out, conn.protocol).error(b"ERR replication: an unreadable entry");
            return;
        };
        pos += consumed;
        let (found, after) = commands::execute(shared, conn, out, args);
        if after == Some(After::Block) && exec {
            // A blocking command that would wait inside EXEC answers a
            // null at once, as in Redis. Alone, it wrote nothing and the
            // caller answers `WouldBlock`.
            let mut e = Encoder::new(out, conn.protocol);
            match found.map(|c| c.name) {
                Some("blmove" | "brpoplpush") => e.null(),
                _ => e.null_array(),
            }
        }
    }
}

/// Starts loading the index entries of the first keys of the next
/// [`PREFETCH_AHEAD`] commands of `commands` from `pos` (the argument after
/// the name, where nearly every write names its key), so that applying an
/// entry's writes one after another overlaps their cache misses instead
/// of waiting for each in turn: on a follower under SETs of random keys,
/// the index's two misses per key were 29 % of the process's CPU. A hint:
/// a command that is not a write, or has no key there, only costs a look.
/// Returns where the commands looked at end.
pub(crate) fn prefetch_keys(shared: &Shared, db: usize, commands: &[u8], pos: usize) -> usize {
    let mut parser = RequestParser::new(Limits::default());
    let mut keys: Vec<&[u8]> = Vec::with_capacity(PREFETCH_AHEAD);
    let mut at = pos;
    while keys.len() < PREFETCH_AHEAD && at < commands.len() {
        match parser.parse(&commands[at..]) {
            Ok(Parsed::Command { args, consumed }) => {
                // Entries are RESP (`write_command`), so a key is a slice
                // of `commands`; anything else is passed over.
                if let Some(span) = args.get(1).and_then(|k| crate::conn::span_in(commands, k)) {
                    keys.push(&commands[span]);
                }
                at += consumed;
            }
            // `run_commands` answers the unreadable command.
            _ => return commands.len(),
        }
    }
    if keys.len() >= 2 {
        if let Some(d) = shared.keyspace.read(db).db() {
            d.prefetch_index(&keys);
        }
    }
    at
}

/// The leader's expiry sweep: every 100 ms, while this node leads, finds
/// keys whose expiry has passed (at most 200 per database) and proposes
/// their deletion.
pub(crate) async fn expiry_sweeper(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut shutdown = shared.shutdown_rx();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = Shared::wait_shutdown(&mut shutdown) => return,
        }
        let Some(repl) = shared.repl.get() else {
            continue;
        };
        if !repl.is_leader() {
            continue;
        }
        let now = crate::state::now_ms();
        for db in 0..shared.keyspace.len() {
            let keys = match shared.keyspace.read(db).db() {
                Some(d) => d.expired_keys(now, 200),
                None => continue,
            };
            if keys.is_empty() {
                continue;
            }
            let p = Proposal::Expire {
                db: db as u32,
                time_ms: now,
                keys,
            };
            if let Err(e) = repl.propose(&p).await {
                tracing::debug!("expiry proposal: {e}");
            }
        }
    }
}

/// Sentinel's `+switch-master` event: whenever the leader's client address
/// changes (a failover), every node publishes, to its own subscribers of
/// the `+switch-master` channel, `<master-name> <old ip> <old port> <new
/// ip> <new port>`, as each Sentinel does. Clients that follow failovers
/// by subscription (Jedis's sentinel pool, Lettuce) switch at once.
pub(crate) async fn switch_master_announcer(shared: Arc<Shared>) {
    let Some(repl) = shared.repl.get() else {
        return;
    };
    // The server metrics change with the leader, the vote and the
    // membership only; the full metrics change with every entry, and
    // waking here for each one (a metrics clone and a view built, on
    // every node) was a cross-thread wake-up per entry.
    let mut metrics = repl.node.raft().server_metrics();
    let mut shutdown = shared.shutdown_rx();
    let mut last = String::new();
    let me = repl.node.id();
    loop {
        // Read off the server metrics themselves: openraft sends them
        // before the full metrics, so a view built from those right after
        // a change could still name the old leader, and the change would
        // go unannounced.
        let current = {
            let m = metrics.borrow_and_update();
            let membership = m.membership_config.membership();
            basalt_raft::known_leader(me, m.current_leader, membership)
                .and_then(|l| membership.get_node(&l))
                .map(|n| n.client.clone())
                .unwrap_or_default()
        };
        if !current.is_empty() && current != last {
            if !last.is_empty() {
                let ((oh, op), (nh, np)) = (split_addr(&last), split_addr(&current));
                let msg = format!("{} {oh} {op} {nh} {np}", shared.config.master_name);
                shared.pubsub.publish(b"+switch-master", msg.as_bytes());
            }
            last = current;
        }
        tokio::select! {
            r = metrics.changed() => if r.is_err() { return },
            _ = Shared::wait_shutdown(&mut shutdown) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_hash_or_set_write_to_a_large_map_without_expiry_is_bounded() {
        let large = |expiry| {
            Some(basalt_engine::LargeMap {
                fields: basalt_engine::LARGE_MAP_FIELDS + 1,
                expiry,
            })
        };
        for string_write in [true, false] {
            assert!(drop_is_bounded(string_write, None));
            assert!(!drop_is_bounded(string_write, large(1)));
        }
        assert!(!drop_is_bounded(true, large(0)));
        assert!(drop_is_bounded(false, large(0)));
    }

    fn run(commands: &[u8]) -> Vec<u8> {
        bincode::serialize(&Proposal::Run {
            db: 3,
            resp3: true,
            time_ms: 1_700_000_000_000,
            commands: commands.to_vec(),
            exec: None,
        })
        .unwrap()
    }

    #[test]
    fn a_batch_is_written_and_split_as_bincode_encodes_the_owned_one() {
        let parts = [run(b"*1\r\n$4\r\nPING\r\n"), run(b""), run(&[7; 300])];
        let owned = bincode::serialize(&Proposal::Batch {
            entries: parts
                .iter()
                .map(|p| serde_bytes::ByteBuf::from(p.clone()))
                .collect(),
        })
        .unwrap();
        let written = encode_batch(parts.iter().map(|p| &p[..]));
        assert_eq!(written, owned);
        let split = split_batch(&written).unwrap().unwrap();
        assert_eq!(split, parts.iter().map(|p| &p[..]).collect::<Vec<_>>());
        for (i, p) in split.iter().enumerate() {
            assert!(
                matches!(decode_proposal(p).unwrap(), Proposal::Run { .. }),
                "{i}"
            );
        }
        // Not a batch: left to the owned decoding.
        assert!(split_batch(&parts[0]).unwrap().is_none());
        assert!(split_batch(b"").unwrap().is_none());
        // A batch cut short anywhere is refused, never read past its end.
        for cut in 4..written.len() {
            assert!(split_batch(&written[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(
            split_batch(&encode_batch([].into_iter())).unwrap(),
            Some(vec![])
        );
    }
}
