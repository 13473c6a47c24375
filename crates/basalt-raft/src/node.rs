//! A running Raft node: log store, state machine, openraft and the RPC
//! listener, started from a [`NodeConfig`].

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use basalt_engine::{Options, SyncPolicy};
use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{Config, SnapshotPolicy};
use tokio::task::JoinHandle;

use crate::lease::Lease;
use crate::network::{self, Network};
use crate::prevote::PreVote;
use crate::{Applier, LogStore, NodeAddr, NodeId, Raft, Request, StateMachine};

/// How to start a node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's id (`--node-id`).
    pub id: NodeId,
    /// Where the Raft RPC listener binds (`--raft-port`).
    pub raft_listen: SocketAddr,
    /// The address clients reach this node at (`host:port` of its RESP
    /// listener), published to the group so every node can name the
    /// leader's; empty if it has none.
    pub client_addr: String,
    /// Every member's Raft address, this node's included (`--peers`). A
    /// node that finds no Raft state on disk initializes the group with
    /// exactly these members; every member does the same with the same
    /// list, which openraft accepts (the membership entry is identical), so
    /// the group forms with no further step. Empty: wait to be added.
    pub peers: BTreeMap<NodeId, String>,
    /// Directory for the Raft log (`log/`) and state machine (`sm/`).
    pub dir: PathBuf,
    /// When appended log entries are fsynced.
    pub sync: SyncPolicy,
    /// Leader heartbeat interval.
    pub heartbeat: Duration,
    /// Election timeout, drawn at random from this range.
    pub election_timeout: (Duration, Duration),
    /// A snapshot is built after this many entries since the last one (and
    /// the log purged up to it, less `keep_after_snapshot`).
    pub snapshot_every: u64,
    /// Entries kept in the log below a snapshot, so that a follower that
    /// lags by fewer catches up from the log rather than by a snapshot.
    pub keep_after_snapshot: u64,
}

impl NodeConfig {
    /// A configuration with Basalt's defaults (heartbeat 100 ms, elections
    /// after 300-600 ms of silence, a snapshot every 100,000 entries with
    /// 50,000 kept below it, fsync every second).
    pub fn new(id: NodeId, raft_listen: SocketAddr, dir: PathBuf) -> NodeConfig {
        NodeConfig {
            id,
            raft_listen,
            client_addr: String::new(),
            peers: BTreeMap::new(),
            dir,
            sync: SyncPolicy::EveryMs(1000),
            heartbeat: Duration::from_millis(100),
            election_timeout: (Duration::from_millis(300), Duration::from_millis(600)),
            // A snapshot links files (milliseconds); the unpurged log is kept
            // in memory, so this bounds it (~22 MB of 150-byte entries).
            snapshot_every: 100_000,
            keep_after_snapshot: 50_000,
        }
    }
}

/// How long a member other than the lowest-numbered one waits for the
/// group to form before it initializes the group itself.
const INIT_GRACE: Duration = Duration::from_secs(2);

/// Why a write was not applied.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// This node is not the leader; the leader, if one is known.
    #[error("not the leader (leader: {leader:?})")]
    ForwardToLeader {
        /// The current leader's id and addresses.
        leader: Option<(NodeId, NodeAddr)>,
    },
    /// The node cannot take writes (shut down, storage failed, or the write
    /// could not be committed).
    #[error("raft: {0}")]
    Failed(String),
}

/// A started node.
pub struct RaftNode<A: Applier> {
    id: NodeId,
    raft: Raft,
    sm: StateMachine<A>,
    log: LogStore,
    raft_addr: SocketAddr,
    server: JoinHandle<()>,
    publisher: JoinHandle<()>,
    /// The pre-vote gate (`crate::prevote`).
    prevote: JoinHandle<()>,
    /// For read-index requests to the leader.
    http: reqwest::Client,
    /// Read-index rounds shared by concurrent reads.
    reads: Arc<ReadRounds>,
    /// The leader's lease: reads on the leader without a round trip.
    lease: Arc<Lease>,
}

/// Read-index rounds shared by concurrent callers: a caller gets the
/// outcome of the first round that *started* after it called (so the
/// index covers every write acknowledged before its read arrived), and at
/// most one round runs at a time. Fifty clients reading at once cost one
/// heartbeat round (or one request to the leader), not fifty. A round runs
/// in its own task, so a caller that goes away does not stall the others.
pub(crate) struct ReadRounds {
    /// Rounds started so far, and whether one runs now.
    state: parking_lot::Mutex<(u64, bool)>,
    /// The last finished round and its outcome.
    done: tokio::sync::watch::Sender<(u64, Result<u64, String>)>,
}

impl ReadRounds {
    pub(crate) fn new() -> Arc<ReadRounds> {
        Arc::new(ReadRounds {
            state: parking_lot::Mutex::new((0, false)),
            done: tokio::sync::watch::channel((0, Err(String::new()))).0,
        })
    }

    /// A read index from a round that started after this call; `round`
    /// makes one (called only if this caller starts the round).
    pub(crate) async fn index<F, Fut>(
        self: &Arc<Self>,
        timeout: Duration,
        round: F,
    ) -> Result<u64, String>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<u64, String>> + Send + 'static,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut rx = self.done.subscribe();
        let need = self.state.lock().0 + 1;
        let mut round = Some(round);
        loop {
            {
                let v = rx.borrow_and_update();
                if v.0 >= need {
                    return v.1.clone();
                }
            }
            // Start the next round if none runs. Only a caller that still
            // has its maker can (it has not started one yet).
            if round.is_some() {
                let start = {
                    let mut st = self.state.lock();
                    if st.1 {
                        None
                    } else {
                        st.0 += 1;
                        st.1 = true;
                        Some(st.0)
                    }
                };
                if let Some(n) = start {
                    let fut = round.take().expect("checked above")();
                    let me = self.clone();
                    tokio::spawn(async move {
                        let r = fut.await;
                        me.state.lock().1 = false;
                        let _ = me.done.send_replace((n, r));
                    });
                }
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return Err("timed out waiting for a read index".into());
            }
        }
    }
}

impl<A: Applier> std::fmt::Debug for RaftNode<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftNode")
            .field("id", &self.id)
            .field("raft_addr", &self.raft_addr)
            .finish_non_exhaustive()
    }
}

impl<A: Applier> RaftNode<A> {
    /// Opens the node's storage, starts openraft and the RPC listener, and
    /// initializes the group from `cfg.peers` if this node has never been
    /// part of one. `sm_opts` opens the state machine's marker database
    /// (give it the batch group the applier writes under).
    pub async fn start(cfg: NodeConfig, sm_opts: Options, applier: A) -> io::Result<RaftNode<A>> {
        let listener = tokio::net::TcpListener::bind(cfg.raft_listen).await?;
        Self::start_on(cfg, listener, sm_opts, applier).await
    }

    /// [`RaftNode::start`] with the state machine's marker database opened
    /// by the caller (see [`StateMachine::open_with_db`]).
    pub async fn start_with_db(
        cfg: NodeConfig,
        db: Arc<basalt_engine::Db>,
        applier: A,
    ) -> io::Result<RaftNode<A>> {
        let listener = tokio::net::TcpListener::bind(cfg.raft_listen).await?;
        let sm = StateMachine::open_with_db(&cfg.dir.join("sm"), db, applier)?;
        Self::start_inner(cfg, listener, sm).await
    }

    /// [`RaftNode::start`] with the RPC listener already bound (tests bind
    /// ephemeral ports first, to give every node the others' addresses).
    pub async fn start_on(
        cfg: NodeConfig,
        listener: tokio::net::TcpListener,
        sm_opts: Options,
        applier: A,
    ) -> io::Result<RaftNode<A>> {
        let sm = StateMachine::open(&cfg.dir.join("sm"), sm_opts, applier)?;
        Self::start_inner(cfg, listener, sm).await
    }

    async fn start_inner(
        cfg: NodeConfig,
        listener: tokio::net::TcpListener,
        sm: StateMachine<A>,
    ) -> io::Result<RaftNode<A>> {
        let log = LogStore::open(&cfg.dir.join("log"), cfg.sync)?;
        let config = Config {
            cluster_name: "basalt".into(),
            heartbeat_interval: cfg.heartbeat.as_millis() as u64,
            election_timeout_min: cfg.election_timeout.0.as_millis() as u64,
            election_timeout_max: cfg.election_timeout.1.as_millis() as u64,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(cfg.snapshot_every),
            // A follower that lags by less than this after a snapshot
            // catches up from the log, not by a whole snapshot (entries
            // are ~150 bytes in memory: ~7.5 MB for 50,000).
            max_in_snapshot_log_to_keep: cfg.keep_after_snapshot,
            // Per chunk, and the last chunk's answer waits for the install
            // (restoring every key): openraft's 200 ms default timed out
            // installs of a few hundred MB, and every retry restored the
            // whole snapshot again.
            install_snapshot_timeout: 60_000,
            ..Config::default()
        }
        .validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let raft_addr = listener.local_addr()?;
        // Half of the followers' lease (openraft's is the longest election
        // timeout), counted from send times: see `crate::lease`.
        let applied_sm = sm.clone();
        let lease = Arc::new(Lease::new(
            cfg.id,
            cfg.election_timeout.1 / 2,
            Box::new(move || applied_sm.applied()),
        ));
        let raft = Raft::new(
            cfg.id,
            Arc::new(config),
            Network::new(lease.clone()),
            log.clone(),
            sm.clone(),
        )
        .await
        .map_err(|e| io::Error::other(e.to_string()))?;
        // The followers' lease is openraft's longest election timeout.
        let pre = Arc::new(PreVote::new(cfg.election_timeout.1, log.clone()));
        let app = network::router(
            raft.clone(),
            lease.clone(),
            pre.clone(),
            cfg.id,
            cfg.client_addr.clone(),
        );
        let prevote = tokio::spawn(crate::prevote::gate(
            raft.clone(),
            cfg.id,
            pre,
            reqwest::Client::new(),
        ));
        let server = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!("raft RPC listener stopped: {e}");
            }
        });
        let publisher = tokio::spawn(publish_client_addrs(
            raft.clone(),
            cfg.id,
            cfg.client_addr.clone(),
        ));
        let node = RaftNode {
            id: cfg.id,
            raft,
            sm,
            log,
            raft_addr,
            server,
            publisher,
            prevote,
            http: reqwest::Client::new(),
            reads: ReadRounds::new(),
            lease,
        };
        let initialized = node
            .raft
            .is_initialized()
            .await
            .map_err(|e| io::Error::other(e.to_string()))?;
        if !initialized && !cfg.peers.is_empty() {
            let members: BTreeMap<NodeId, NodeAddr> = cfg
                .peers
                .iter()
                .map(|(&id, addr)| {
                    let node = NodeAddr {
                        raft: addr.clone(),
                        client: String::new(),
                    };
                    (id, node)
                })
                .collect();
            // The member with the lowest id initializes at once; the others
            // wait for it (its election reaches them) and initialize only
            // if nothing has after a while (it may be down). When all
            // initialized at once, each campaigned at the same moment, and
            // openraft orders leaders of one term by node id, so a higher
            // id's late candidacy deposed a leader just elected.
            let first = cfg.peers.keys().next() == Some(&cfg.id);
            let raft = node.raft.clone();
            let init = async move {
                if !first {
                    tokio::time::sleep(INIT_GRACE).await;
                    if raft.is_initialized().await.unwrap_or(true) {
                        return Ok(());
                    }
                }
                match raft.initialize(members).await {
                    Ok(()) => Ok(()),
                    // Another member's initialization reached us first.
                    Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
                    Err(e) => Err(io::Error::other(e.to_string())),
                }
            };
            if first {
                init.await?;
            } else {
                tokio::spawn(async move {
                    if let Err(e) = init.await {
                        tracing::error!("initializing the group: {e}");
                    }
                });
            }
        }
        Ok(node)
    }

    /// Proposes `payload` and waits until it is committed by a majority and
    /// applied by the leader; returns the applier's reply there. A node that
    /// knows another node leads forwards the write once to it over the Raft
    /// port (`/raft/write`) and relays its reply; the entry reaches this
    /// node's state machine when it replicates (a read here passes
    /// [`RaftNode::read_barrier`] first, so it sees it).
    /// `ForwardToLeader` means no leader could take it.
    pub async fn write(&self, payload: Vec<u8>) -> Result<Vec<u8>, WriteError> {
        if self.leader_id().is_some_and(|id| id != self.id) {
            if let Some((_, node)) = self.leader() {
                return match network::forward_write(&self.http, &node.raft, payload).await {
                    Ok(reply) => Ok(reply),
                    Err(None) => Err(WriteError::ForwardToLeader { leader: None }),
                    Err(Some(why)) => Err(WriteError::Failed(why)),
                };
            }
        }
        match self.raft.client_write(Request(payload.into())).await {
            Ok(resp) => Ok(resp.data.0),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(WriteError::ForwardToLeader {
                    leader: f.leader_id.zip(f.leader_node),
                })
            }
            Err(e) => Err(WriteError::Failed(e.to_string())),
        }
    }

    /// Submits `payload` to this node's log if this node leads, without
    /// waiting: calls reach the log in the order they are made (a caller
    /// that batches proposals keeps its order). The returned future
    /// resolves to the reply of applying the entry here.
    /// `Err(ForwardToLeader)` when this node does not lead: nothing was
    /// submitted ([`RaftNode::write`] forwards instead).
    pub async fn submit(
        &self,
        payload: Vec<u8>,
    ) -> Result<
        impl std::future::Future<Output = Result<Vec<u8>, WriteError>> + Send + 'static,
        WriteError,
    > {
        if self.leader_id() != Some(self.id) {
            return Err(WriteError::ForwardToLeader { leader: None });
        }
        let rx = self
            .raft
            .client_write_ff(Request(payload.into()))
            .await
            .map_err(|e| WriteError::Failed(e.to_string()))?;
        Ok(async move {
            match rx.await {
                Ok(Ok(resp)) => Ok(resp.data.0),
                Ok(Err(ClientWriteError::ForwardToLeader(f))) => Err(WriteError::ForwardToLeader {
                    leader: f.leader_id.zip(f.leader_node),
                }),
                Ok(Err(e)) => Err(WriteError::Failed(e.to_string())),
                Err(e) => Err(WriteError::Failed(e.to_string())),
            }
        })
    }

    /// Waits until a read served from this node's state machine is
    /// linearizable (Raft's ReadIndex): on the leader, a heartbeat round
    /// confirms it still leads and the entries committed before the call
    /// are applied; on a follower, the leader does that round and names its
    /// commit index, and this node waits (at most `timeout`) until it has
    /// applied that far. An error means the read cannot be made safe now
    /// (no leader known, the leader unreachable or deposed).
    pub async fn read_barrier(&self, timeout: Duration) -> Result<(), String> {
        let index = match self.lease.read_index(&self.raft) {
            // The leader under its lease (`crate::lease`): no round trip.
            Some(index) => index,
            None => self.read_index_round(timeout).await?,
        };
        if self.sm.applied().is_some_and(|a| a.index >= index) {
            return Ok(());
        }
        self.raft
            .wait(Some(timeout))
            .applied_index_at_least(Some(index), "read barrier")
            .await
            .map(|_| ())
            .map_err(|e| format!("not caught up with the leader: {e}"))
    }

    /// A read index from a ReadIndex round (shared with concurrent
    /// callers): a heartbeat round on the leader, one request to the
    /// leader on a follower.
    async fn read_index_round(&self, timeout: Duration) -> Result<u64, String> {
        let (raft, http, me) = (self.raft.clone(), self.http.clone(), self.id);
        self.reads
            .index(timeout, move || async move {
                let m = raft.metrics().borrow().clone();
                let leader = m.current_leader.ok_or("no leader is known")?;
                if leader == me {
                    let fut = raft.get_read_log_id();
                    let (read, _) = tokio::time::timeout(timeout, fut)
                        .await
                        .map_err(|_| "timed out confirming leadership".to_string())?
                        .map_err(|e| e.to_string())?;
                    Ok(read.map_or(0, |l| l.index))
                } else {
                    let node = m
                        .membership_config
                        .membership()
                        .get_node(&leader)
                        .cloned()
                        .ok_or("the leader is not a member")?;
                    network::remote_read_index(&http, &node.raft, timeout).await
                }
            })
            .await
    }

    /// The leader this node knows of.
    pub fn leader_id(&self) -> Option<NodeId> {
        let rx = self.raft.metrics();
        let m = rx.borrow();
        known_leader(self.id, m.current_leader, m.membership_config.membership())
    }

    /// The leader this node knows of, with its addresses.
    pub fn leader(&self) -> Option<(NodeId, NodeAddr)> {
        // Borrowed, not cloned: this runs for every write.
        let rx = self.raft.metrics();
        let m = rx.borrow();
        let id = m.current_leader?;
        let node = m.membership_config.membership().get_node(&id)?.clone();
        Some((id, node))
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The address the Raft RPC listener is bound to.
    pub fn raft_addr(&self) -> SocketAddr {
        self.raft_addr
    }

    /// The openraft handle (metrics, membership changes, linearizable reads).
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// The state machine.
    pub fn state_machine(&self) -> &StateMachine<A> {
        &self.sm
    }

    /// [`RaftNode::shutdown`] for an owner that cannot give the node up
    /// (a server holding it for its life): stops openraft, the RPC
    /// listener and the node's other tasks, and fsyncs the log.
    pub async fn stop(&self) -> io::Result<()> {
        self.publisher.abort();
        self.prevote.abort();
        let r = self.raft.shutdown().await;
        self.server.abort();
        self.log.sync()?;
        r.map_err(|e| io::Error::other(e.to_string()))
    }

    /// Stops openraft and the RPC listener; fsyncs the log.
    pub async fn shutdown(self) -> io::Result<()> {
        let r = self.stop().await;
        let _ = self.server.await;
        r
    }
}

/// The leader node `me` knows of, from openraft's current leader and the
/// membership (`RaftNode::leader_id`, and whoever reads them off a metrics
/// channel): a leader that removed itself from the group may still name
/// itself until it stops; it leads nobody (the others elect a new leader),
/// so it knows of no leader.
pub fn known_leader(
    me: NodeId,
    current: Option<NodeId>,
    membership: &openraft::Membership<NodeId, NodeAddr>,
) -> Option<NodeId> {
    current.filter(|&l| l != me || membership.voter_ids().any(|v| v == me))
}

/// While this node leads, keeps every member's client address in the
/// membership: a member whose address is missing or differs from what it
/// answers on `/raft/hello` gets it set with one `SetNodes` change (only
/// client addresses change, never a Raft address, so the change cannot
/// split the group). Followers read the leader's client address from the
/// membership they replicate.
async fn publish_client_addrs(raft: Raft, me: NodeId, my_client: String) {
    let http = reqwest::Client::new();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        let m = raft.metrics().borrow().clone();
        if m.current_leader != Some(me) || m.running_state.is_err() {
            continue;
        }
        let mut changed = BTreeMap::new();
        for (&id, node) in m.membership_config.membership().nodes() {
            let client = if id == me {
                my_client.clone()
            } else {
                match network::hello(&http, &node.raft).await {
                    Some((nid, client)) if nid == id => with_reachable_host(client, &node.raft),
                    _ => continue,
                }
            };
            if client != node.client {
                let mut n = node.clone();
                n.client = client;
                changed.insert(id, n);
            }
        }
        if changed.is_empty() {
            continue;
        }
        let change = openraft::ChangeMembers::SetNodes(changed);
        if let Err(e) = raft.change_membership(change, false).await {
            tracing::debug!("publishing client addresses: {e}");
        }
    }
}

/// A client address whose host is a wildcard (`0.0.0.0`, `::`: a node
/// that listens on every interface) takes the host of the node's Raft
/// address, which the group reaches it at.
fn with_reachable_host(client: String, raft: &str) -> String {
    let Some((host, port)) = client.rsplit_once(':') else {
        return client;
    };
    if !matches!(host, "0.0.0.0" | "::" | "[::]") {
        return client;
    }
    match raft.rsplit_once(':') {
        Some((raft_host, _)) => format!("{raft_host}:{port}"),
        None => client,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

    #[test]
    fn a_wildcard_client_host_takes_the_raft_host() {
        use super::with_reachable_host as h;
        assert_eq!(h("0.0.0.0:7004".into(), "10.0.0.4:17004"), "10.0.0.4:7004");
        assert_eq!(h("[::]:7004".into(), "db4:17004"), "db4:7004");
        assert_eq!(
            h("127.0.0.1:7004".into(), "10.0.0.4:17004"),
            "127.0.0.1:7004"
        );
    }

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_reads_share_rounds_that_start_after_them() {
        let reads = ReadRounds::new();
        let rounds = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for i in 0..60u64 {
            let (reads, rounds) = (reads.clone(), rounds.clone());
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(i % 7)).await;
                let before = rounds.load(SeqCst);
                let got = reads
                    .index(Duration::from_secs(5), move || async move {
                        let n = rounds.fetch_add(1, SeqCst) + 1;
                        tokio::time::sleep(Duration::from_millis(3)).await;
                        Ok(n)
                    })
                    .await
                    .unwrap();
                assert!(
                    got > before,
                    "round {got} started before the call ({before})"
                );
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let n = rounds.load(SeqCst);
        assert!((2..40).contains(&n), "{n} rounds for 60 concurrent reads");
    }
}
