//! Pre-vote: a node campaigns only when a majority would vote for it.
//!
//! openraft 0.9 has no pre-vote phase. A follower that stops hearing from
//! the leader (cut off by a partition, or restarted while the leader was
//! backing off from it) starts an election every timeout, each in a higher
//! term; when it can reach the others again, its term makes the leader
//! step down (the leader's appends are refused for their lower term), and
//! the group has no leader for an election (about a second) although
//! nothing failed.
//!
//! The one idea a reader needs: **a node's elections are switched off
//! (openraft's `runtime_config().elect(false)`) unless a majority of the
//! voters, itself included, would grant it a vote now.** Every 50 ms a
//! follower that has not heard from a leader for the followers' lease
//! asks the other voters (`/raft/prevote`, with its last log id); a voter
//! says yes when it has not heard from a leader for that lease either
//! (within it, it would refuse the real vote: openraft's follower lease)
//! and the asker's log is at least as up to date as its own (Raft's
//! election restriction). Only with a majority of yes does the node let
//! openraft's timer start an election. A node cut off from the majority
//! never raises its term, so it rejoins without deposing anyone; when the
//! leader really is gone, the followers' leases run out at the same time
//! as openraft's own election timer would have let them campaign.

use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::storage::RaftLogStorage;
use openraft::ServerState;
use serde::{Deserialize, Serialize};

use crate::lease::Lease;
use crate::log_store::LogStore;
use crate::{LogId, NodeId, Raft};

/// How often a follower that hears no leader asks for pre-votes.
const EVERY: Duration = Duration::from_millis(50);
/// How long a pre-vote request may take.
const ASK_TIMEOUT: Duration = Duration::from_millis(200);

/// A pre-vote request: the asker's last log id.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PreVoteRequest {
    pub(crate) last_log: Option<LogId>,
}

/// What one node knows for pre-votes: when it last heard from a leader.
#[derive(Debug)]
pub(crate) struct PreVote {
    heard: parking_lot::Mutex<Option<Instant>>,
    /// The followers' lease (openraft's `election_timeout_max`).
    lease: Duration,
    log: LogStore,
}

impl PreVote {
    pub(crate) fn new(lease: Duration, log: LogStore) -> PreVote {
        PreVote {
            heard: parking_lot::Mutex::new(None),
            lease,
            log,
        }
    }

    /// An append or snapshot chunk from a leader of this node's term (or a
    /// later one) was accepted.
    pub(crate) fn heard_leader(&self) {
        *self.heard.lock() = Some(Instant::now());
    }

    fn heard_recently(&self) -> bool {
        self.heard
            .lock()
            .is_some_and(|at| at.elapsed() < self.lease)
    }

    async fn last_log(&self) -> Option<LogId> {
        let mut log = self.log.clone();
        log.get_log_state().await.ok().and_then(|s| s.last_log_id)
    }

    /// Whether this node would vote for a candidate with `req`'s log now.
    pub(crate) async fn would_grant(
        &self,
        raft: &Raft,
        lease: &Lease,
        req: &PreVoteRequest,
    ) -> bool {
        if self.heard_recently() {
            return false;
        }
        // A leader that a majority still acknowledges grants nobody; one
        // that has not been acknowledged by a majority for the followers'
        // lease is cut off (an asymmetric link can leave it reachable for
        // this request), and openraft would grant the real vote too.
        if raft.metrics().borrow().state == ServerState::Leader
            && lease.quorum_within(raft, self.lease)
        {
            return false;
        }
        req.last_log >= self.last_log().await
    }
}

/// Switches this node's elections on only while a majority of the voters
/// would vote for it (see the module docs). Runs for the node's life.
pub(crate) async fn gate(raft: Raft, me: NodeId, pre: Arc<PreVote>, client: reqwest::Client) {
    let mut allowed = true;
    let set = |on: bool, allowed: &mut bool| {
        if on != *allowed {
            raft.runtime_config().elect(on);
            *allowed = on;
            tracing::debug!(elections = on, "pre-vote gate");
        }
    };
    loop {
        tokio::time::sleep(EVERY).await;
        let m = raft.metrics().borrow().clone();
        let voters: Vec<(NodeId, String)> = m
            .membership_config
            .membership()
            .voter_ids()
            .filter(|&id| id != me)
            .filter_map(|id| {
                let node = m.membership_config.membership().get_node(&id)?;
                Some((id, node.raft.clone()))
            })
            .collect();
        let is_voter = m
            .membership_config
            .membership()
            .voter_ids()
            .any(|id| id == me);
        if m.state == ServerState::Leader || !is_voter || voters.is_empty() {
            // A leader does not campaign, a learner cannot, a single voter
            // needs nobody.
            set(true, &mut allowed);
            continue;
        }
        if pre.heard_recently() {
            set(false, &mut allowed);
            continue;
        }
        let req = PreVoteRequest {
            last_log: pre.last_log().await,
        };
        let body = bincode::serialize(&req).expect("encodes");
        let mut asks = tokio::task::JoinSet::new();
        for (_, addr) in &voters {
            let (client, body) = (client.clone(), body.clone());
            let url = format!("http://{addr}/raft/prevote");
            asks.spawn(async move {
                let resp = client
                    .post(url)
                    .body(body)
                    .timeout(ASK_TIMEOUT)
                    .send()
                    .await
                    .ok()?;
                let bytes = resp.bytes().await.ok()?;
                bincode::deserialize::<bool>(&bytes).ok()
            });
        }
        let mut yes = 0;
        while let Some(answer) = asks.join_next().await {
            if matches!(answer, Ok(Some(true))) {
                yes += 1;
            }
        }
        let total = voters.len() + 1;
        set((yes + 1) * 2 > total, &mut allowed);
    }
}
