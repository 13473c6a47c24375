//! Raft RPC between nodes: openraft's messages as bincode bodies of HTTP/1.1
//! POSTs to the node's Raft port (`/raft/append`, `/raft/vote`,
//! `/raft/snapshot`), served by axum and sent by reqwest with keep-alive
//! connections. The answer body is the bincode of the callee's
//! `Result<response, RaftError>`; transport failures become openraft's
//! `Unreachable` (the replication stream backs off and retries).

use std::future::Future;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::lease::Lease;
use crate::prevote::{PreVote, PreVoteRequest};
use crate::{NodeAddr, NodeId, Raft, TypeConfig};

/// What the RPC handlers share: the node, its lease and its pre-vote
/// state.
#[derive(Clone)]
struct Rpc {
    raft: Raft,
    lease: Arc<Lease>,
    pre: Arc<PreVote>,
}

/// The axum routes that serve a node's Raft RPC, and `/raft/hello`, which
/// answers this node's id and client address (bincode of `(u64, String)`).
pub(crate) fn router(
    raft: Raft,
    lease: Arc<Lease>,
    pre: Arc<PreVote>,
    id: NodeId,
    client_addr: String,
) -> Router {
    let hello_body = bincode::serialize(&(id, client_addr)).expect("encodes");
    Router::new()
        .route("/raft/append", post(append))
        .route("/raft/vote", post(vote))
        .route("/raft/prevote", post(prevote))
        .route("/raft/snapshot", post(snapshot))
        .route("/raft/read_index", post(read_index))
        .route("/raft/write", post(forwarded_write))
        .route("/raft/admin", post(admin))
        .with_state(Rpc { raft, lease, pre })
        .route(
            "/raft/hello",
            get(move || async move { hello_body.clone() }),
        )
        // axum's 2 MB default refused snapshot chunks (openraft sends up
        // to 3 MiB) and appends of large values: a follower that needed a
        // snapshot never caught up. The Raft port is the group's own
        // (trusted, like Redis Cluster's bus): bodies are bounded by what
        // openraft sends, one chunk or one batch of entries.
        .layer(axum::extract::DefaultBodyLimit::disable())
}

/// ReadIndex for a follower (bincode of `Result<u64, String>`): the log
/// index a read must wait for. While the leader's lease holds
/// ([`Lease::read_index`]), its applied index at once; otherwise it
/// confirms with a heartbeat round that it still leads and answers its
/// commit index.
async fn read_index(State(rpc): State<Rpc>) -> Result<Vec<u8>, (StatusCode, String)> {
    let r: Result<u64, String> = match rpc.lease.read_index(&rpc.raft) {
        Some(index) => Ok(index),
        None => match rpc.raft.get_read_log_id().await {
            Ok((read, _applied)) => Ok(read.map_or(0, |l| l.index)),
            Err(e) => Err(e.to_string()),
        },
    };
    encode(&r)
}

/// A membership request (`basalt cluster ...`), sent to any member's
/// Raft port; a member that does not lead passes it on to the leader once.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum AdminRequest {
    /// Add node `id` at Raft address `raft`: as a learner until it has
    /// caught up (by snapshot if the log it needs is purged), then as a
    /// voter.
    Add {
        /// Its node id.
        id: NodeId,
        /// Its Raft address (`host:port`).
        raft: String,
    },
    /// Remove node `id` from the group.
    Remove {
        /// Its node id.
        id: NodeId,
    },
    /// Describe the members.
    Members,
    /// Passed on by a member that does not lead: the leader answers it
    /// without passing it on again.
    Forwarded(Box<AdminRequest>),
}

/// Serves [`AdminRequest`]s (bincode of `Result<String, String>`: a
/// report to print, or why it failed).
async fn admin(State(rpc): State<Rpc>, body: Bytes) -> Result<Vec<u8>, (StatusCode, String)> {
    let req: AdminRequest = decode(&body)?;
    encode(&serve_admin(&rpc.raft, req).await)
}

async fn serve_admin(raft: &Raft, req: AdminRequest) -> Result<String, String> {
    use openraft::ChangeMembers;
    let (forwarded, req) = match req {
        AdminRequest::Forwarded(r) => (true, *r),
        r => (false, r),
    };
    if let AdminRequest::Members = req {
        return Ok(describe(raft));
    }
    let (me, leader) = {
        let m = raft.metrics().borrow().clone();
        let addr = m
            .current_leader
            .and_then(|l| m.membership_config.membership().get_node(&l).cloned());
        (m.id, m.current_leader.zip(addr))
    };
    match leader {
        Some((l, _)) if l == me => {}
        Some((_, node)) if !forwarded => {
            return admin_request(&node.raft, AdminRequest::Forwarded(Box::new(req))).await;
        }
        _ => return Err("no leader is known now; try again".into()),
    }
    // One membership change at a time: the leader's own publishing of
    // client addresses may be in flight, so a conflict is retried.
    let mut tries = 0;
    loop {
        let r = match &req {
            AdminRequest::Add { id, raft: addr } => {
                if tries == 0 {
                    check_new_member(raft, *id, addr).await?;
                }
                let node = NodeAddr {
                    raft: addr.clone(),
                    client: String::new(),
                };
                match raft.add_learner(*id, node, false).await {
                    Ok(added) => {
                        caught_up(raft, *id, added.log_id.index).await?;
                        raft.change_membership(
                            ChangeMembers::AddVoterIds([*id].into_iter().collect()),
                            false,
                        )
                        .await
                    }
                    Err(e) => Err(e),
                }
            }
            AdminRequest::Remove { id } => {
                raft.change_membership(
                    ChangeMembers::RemoveVoters([*id].into_iter().collect()),
                    false,
                )
                .await
            }
            AdminRequest::Members | AdminRequest::Forwarded(_) => unreachable!("handled above"),
        };
        match r {
            Ok(_) => return Ok(describe(raft)),
            Err(e) => {
                tries += 1;
                if tries >= 20 || !another_change_in_progress(&e) {
                    return Err(e.to_string());
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

/// Whether a membership change was refused only because another one is
/// not committed yet (openraft allows one at a time): the leader's own
/// publishing of client addresses, which a new learner's address starts,
/// so worth trying again shortly.
fn another_change_in_progress(
    e: &openraft::error::RaftError<NodeId, openraft::error::ClientWriteError<NodeId, NodeAddr>>,
) -> bool {
    use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
    matches!(
        e,
        RaftError::APIError(ClientWriteError::ChangeMembershipError(
            ChangeMembershipError::InProgress(_)
        ))
    )
}

/// Before adding node `id` at `addr`: it is not a member yet, and a
/// Basalt node with that id answers there (a typo would otherwise make an
/// unreachable voter, which costs the group its tolerance of a failure).
async fn check_new_member(raft: &Raft, id: NodeId, addr: &str) -> Result<(), String> {
    let known = raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .get_node(&id)
        .is_some();
    if known {
        return Err(format!("node {id} is a member already"));
    }
    match hello(&reqwest::Client::new(), addr).await {
        Some((answered, _)) if answered == id => Ok(()),
        Some((answered, _)) => Err(format!(
            "the node at {addr} is node {answered}, not node {id}"
        )),
        None => Err(format!(
            "no Basalt node answers at {addr} (start it with --node-id {id} and its --raft-port, without --peers)"
        )),
    }
}

/// How long a new member may take to catch up before it votes.
const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(300);

/// Waits until the learner `id` has replicated the log up to `index`
/// (the entry that added it); if it does not within [`CATCH_UP`], takes
/// it out again and fails.
async fn caught_up(raft: &Raft, id: NodeId, index: u64) -> Result<(), String> {
    let done = raft
        .wait(Some(CATCH_UP))
        .metrics(
            |m| {
                m.replication
                    .as_ref()
                    .and_then(|r| r.get(&id).cloned().flatten())
                    .is_some_and(|l| l.index >= index)
            },
            "new member caught up",
        )
        .await;
    if done.is_ok() {
        return Ok(());
    }
    let _ = raft
        .change_membership(
            openraft::ChangeMembers::RemoveNodes([id].into_iter().collect()),
            false,
        )
        .await;
    Err(format!(
        "node {id} did not catch up within {} s; it was not added",
        CATCH_UP.as_secs()
    ))
}

/// The members as this node sees them: one line each, `id raft-address
/// client-address role`, the leader marked.
fn describe(raft: &Raft) -> String {
    let m = raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let voters: std::collections::BTreeSet<NodeId> = membership.voter_ids().collect();
    let mut out = String::new();
    for (id, node) in membership.nodes() {
        let role = if Some(*id) == m.current_leader {
            "leader"
        } else if voters.contains(id) {
            "voter"
        } else {
            "learner"
        };
        let client = if node.client.is_empty() {
            "-"
        } else {
            &node.client
        };
        out.push_str(&format!("{id} {} {client} {role}\n", node.raft));
    }
    out
}

/// Sends `req` to the member at `raft_addr` (see [`AdminRequest`]) and
/// returns its report. Adding a node waits until it has caught up: up to
/// ten minutes.
pub async fn admin_request(raft_addr: &str, req: AdminRequest) -> Result<String, String> {
    let body = bincode::serialize(&req).map_err(|e| e.to_string())?;
    let timeout = std::time::Duration::from_secs(600);
    post_answer(
        &reqwest::Client::new(),
        raft_addr,
        "/raft/admin",
        body,
        timeout,
        raft_addr,
    )
    .await
}

/// POSTs `body` to `path` on the node at `raft_addr` and reads its answer,
/// a bincode `Result<T, String>`; a transport failure or an unreadable
/// answer is an error naming `who`.
async fn post_answer<T: DeserializeOwned>(
    client: &reqwest::Client,
    raft_addr: &str,
    path: &str,
    body: Vec<u8>,
    timeout: std::time::Duration,
    who: &str,
) -> Result<T, String> {
    let resp = client
        .post(format!("http://{raft_addr}{path}"))
        .timeout(timeout)
        .body(body)
        .send()
        .await
        .map_err(|e| format!("{who} did not answer: {e}"))?;
    let bytes = resp
        .bytes()
        .await
        .map_err(|e| format!("{who}'s answer: {e}"))?;
    bincode::deserialize::<Result<T, String>>(&bytes).map_err(|e| format!("{who}'s answer: {e}"))?
}

/// Why a forwarded write was not applied (see [`forwarded_write`]).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub enum ForwardFailure {
    /// The node asked is not the leader (any more).
    NotLeader,
    /// The write could not be committed.
    Failed(String),
}

/// A write a follower forwards: the request body is the entry's payload;
/// the leader proposes it and answers (bincode) `Result<reply,
/// ForwardFailure>` once it is committed and applied. A follower forwards
/// at most once: a node that is not the leader answers `NotLeader`.
async fn forwarded_write(
    State(rpc): State<Rpc>,
    body: Bytes,
) -> Result<Vec<u8>, (StatusCode, String)> {
    use openraft::error::ClientWriteError;
    let r: Result<Vec<u8>, ForwardFailure> = match rpc.raft.client_write(crate::Request(body)).await
    {
        Ok(resp) => Ok(resp.data.0),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => {
            Err(ForwardFailure::NotLeader)
        }
        Err(e) => Err(ForwardFailure::Failed(e.to_string())),
    };
    encode(&r)
}

/// Sends a write to the leader at `raft_addr` (see [`forwarded_write`]).
/// `Err(None)`: it was not applied (the node is not the leader, or could
/// not be reached at all); `Err(Some(why))`: the write failed or its
/// outcome is unknown (the connection failed after sending).
pub async fn forward_write(
    client: &reqwest::Client,
    raft_addr: &str,
    payload: Vec<u8>,
) -> Result<Vec<u8>, Option<String>> {
    let resp = client
        .post(format!("http://{raft_addr}/raft/write"))
        .timeout(std::time::Duration::from_secs(10))
        .body(payload)
        .send()
        .await
        .map_err(|e| {
            if e.is_connect() {
                // Never sent: the write was not applied (as if no leader).
                None
            } else {
                Some(format!("forwarding to the leader: {e}"))
            }
        })?;
    let bytes = resp
        .bytes()
        .await
        .map_err(|e| Some(format!("the leader's answer: {e}")))?;
    let r: Result<Vec<u8>, ForwardFailure> =
        bincode::deserialize(&bytes).map_err(|e| Some(format!("the leader's answer: {e}")))?;
    r.map_err(|f| match f {
        ForwardFailure::NotLeader => None,
        ForwardFailure::Failed(why) => Some(why),
    })
}

/// Asks the leader at `raft_addr` for a read index (see [`read_index`]).
pub async fn remote_read_index(
    client: &reqwest::Client,
    raft_addr: &str,
    timeout: std::time::Duration,
) -> Result<u64, String> {
    post_answer(
        client,
        raft_addr,
        "/raft/read_index",
        Vec::new(),
        timeout,
        "the leader",
    )
    .await
}

/// Asks the node at `raft_addr` for its id and client address.
pub async fn hello(client: &reqwest::Client, raft_addr: &str) -> Option<(NodeId, String)> {
    let resp = client
        .get(format!("http://{raft_addr}/raft/hello"))
        .timeout(std::time::Duration::from_secs(1))
        .send()
        .await
        .ok()?;
    let bytes = resp.bytes().await.ok()?;
    bincode::deserialize(&bytes).ok()
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, (StatusCode, String)> {
    bincode::deserialize(body).map_err(|e| (StatusCode::BAD_REQUEST, format!("bad RPC body: {e}")))
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, (StatusCode, String)> {
    bincode::serialize(v).map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

async fn append(State(rpc): State<Rpc>, body: Bytes) -> Result<Vec<u8>, (StatusCode, String)> {
    let req: AppendEntriesRequest<TypeConfig> = decode(&body)?;
    let r = rpc.raft.append_entries(req).await;
    if matches!(&r, Ok(resp) if !matches!(resp, AppendEntriesResponse::HigherVote(_))) {
        rpc.pre.heard_leader();
    }
    encode(&r)
}

/// `/raft/prevote` (bincode of `bool`): whether this node would vote for
/// the asker now (`crate::prevote`).
async fn prevote(State(rpc): State<Rpc>, body: Bytes) -> Result<Vec<u8>, (StatusCode, String)> {
    let req: PreVoteRequest = decode(&body)?;
    encode(&rpc.pre.would_grant(&rpc.raft, &rpc.lease, &req).await)
}

async fn vote(State(rpc): State<Rpc>, body: Bytes) -> Result<Vec<u8>, (StatusCode, String)> {
    let req: VoteRequest<NodeId> = decode(&body)?;
    // Before openraft may grant it: a lease this node holds as leader ends.
    rpc.lease.vote_requested(req.vote.leader_id().get_term());
    encode(&rpc.raft.vote(req).await)
}

async fn snapshot(State(rpc): State<Rpc>, body: Bytes) -> Result<Vec<u8>, (StatusCode, String)> {
    let req: InstallSnapshotRequest<TypeConfig> = decode(&body)?;
    let vote = req.vote;
    let r = rpc.raft.install_snapshot(req).await;
    if matches!(&r, Ok(resp) if resp.vote == vote) {
        rpc.pre.heard_leader();
    }
    encode(&r)
}

/// Makes [`Connection`]s to the group's nodes; one HTTP client (and its
/// connection pool) for all of them.
#[derive(Clone, Debug)]
pub(crate) struct Network {
    client: reqwest::Client,
    lease: Arc<Lease>,
}

impl Network {
    pub(crate) fn new(lease: Arc<Lease>) -> Network {
        Network {
            client: reqwest::Client::new(),
            lease,
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &NodeAddr) -> Connection {
        Connection {
            client: self.client.clone(),
            lease: self.lease.clone(),
            target,
            base: format!("http://{}", node.raft),
        }
    }
}

/// RPC to one node.
#[derive(Debug)]
pub(crate) struct Connection {
    client: reqwest::Client,
    lease: Arc<Lease>,
    target: NodeId,
    base: String,
}

impl Connection {
    fn call<Req, Resp, E>(
        &self,
        path: &'static str,
        req: &Req,
        option: &RPCOption,
    ) -> impl Future<Output = Result<Resp, RPCError<NodeId, NodeAddr, E>>> + Send + 'static
    where
        Req: Serialize,
        Resp: DeserializeOwned + Send + 'static,
        E: std::error::Error + DeserializeOwned + Send + 'static,
    {
        let body = bincode::serialize(req);
        let request = self
            .client
            .post(format!("{}{path}", self.base))
            .timeout(option.hard_ttl());
        let target = self.target;
        async move {
            let body = body.map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
            let resp = request.body(body).send().await.map_err(transport_error)?;
            let status = resp.status();
            let bytes = resp.bytes().await.map_err(transport_error)?;
            if !status.is_success() {
                let msg = String::from_utf8_lossy(&bytes).into_owned();
                return Err(RPCError::Network(NetworkError::new(
                    &std::io::Error::other(format!("{status}: {msg}")),
                )));
            }
            let answer: Result<Resp, E> = bincode::deserialize(&bytes)
                .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
            answer.map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
        }
    }
}

/// A transport failure as openraft should treat it. Only a node that
/// cannot be connected to is `Unreachable`, which makes openraft back off
/// (100 ms without sending anything to it, [`Connection::backoff`]). A request that timed out or
/// broke off is a `Network` error, retried at once: an append times out
/// after one heartbeat interval, and backing off from a node that is only
/// slow for a moment (a loaded machine) stopped the heartbeats long enough
/// for it to start an election (seen under SET load at P=16).
fn transport_error<E>(e: reqwest::Error) -> RPCError<NodeId, NodeAddr, E>
where
    E: std::error::Error,
{
    if e.is_connect() {
        RPCError::Unreachable(Unreachable::new(&e))
    } else {
        RPCError::Network(NetworkError::new(&e))
    }
}

type RpcResult<T, E = RaftError<NodeId>> = Result<T, RPCError<NodeId, NodeAddr, E>>;

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        if let Some(c) = &rpc.leader_commit {
            self.lease.sending_commit(c.index);
        }
        let sent = std::time::Instant::now();
        let r = self.call("/raft/append", &rpc, &option).await;
        if let Ok(resp) = &r {
            // Accepted this leader's vote (a log conflict too): the
            // follower's lease runs from when it got this append.
            if !matches!(resp, AppendEntriesResponse::HigherVote(_)) {
                self.lease.acked(self.target, &rpc.vote, sent);
            }
        }
        r
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        self.call("/raft/snapshot", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>> {
        self.call("/raft/vote", &rpc, &option).await
    }

    /// After a refused connection, try again after one heartbeat interval
    /// (openraft's default waits 500 ms). A member that starts a moment
    /// after the others was otherwise left without heartbeats past its
    /// election timeout, campaigned, and deposed the fresh leader: with
    /// openraft's ordering of leaders within a term by node id, even in
    /// the same term. A connection attempt every 100 ms to a node that is
    /// down costs nothing worth saving.
    fn backoff(&self) -> openraft::network::Backoff {
        openraft::network::Backoff::new(std::iter::repeat(std::time::Duration::from_millis(100)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::error::{ChangeMembershipError, ClientWriteError, InProgress, LearnerNotFound};

    #[test]
    fn only_a_change_already_in_progress_is_retried() {
        // What openraft 0.9 answers when the leader's own publishing of
        // client addresses is uncommitted: its text never said "in
        // progress", which the first version of the retry looked for.
        let busy: RaftError<NodeId, ClientWriteError<NodeId, NodeAddr>> =
            RaftError::APIError(ClientWriteError::ChangeMembershipError(
                ChangeMembershipError::InProgress(InProgress {
                    committed: None,
                    membership_log_id: None,
                }),
            ));
        assert!(another_change_in_progress(&busy));
        assert!(busy.to_string().contains("already undergoing"));
        let other: RaftError<NodeId, ClientWriteError<NodeId, NodeAddr>> =
            RaftError::APIError(ClientWriteError::ChangeMembershipError(
                ChangeMembershipError::LearnerNotFound(LearnerNotFound { node_id: 4 }),
            ));
        assert!(!another_change_in_progress(&other));
    }
}
