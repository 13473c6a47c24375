//! The leader's lease: linearizable reads on the leader without a
//! heartbeat round per read.
//!
//! The one idea a reader needs: **a follower that accepted an append from
//! this leader refuses to vote for anyone else for `leader_lease` after
//! it received it** (openraft's follower lease, `election_timeout_max`
//! long), and a new leader needs a majority that overlaps every majority
//! that acknowledged us. So if appends this leader *sent* at `t` or later
//! were accepted by a majority (this node included), no other leader can
//! be elected before `t + leader_lease` by the followers' clocks, unless
//! this node itself grants its vote. The leader counts half of that
//! (`duration`) from its own send times, which leaves room for clocks
//! that run at different rates and for the time an append spends on the
//! wire; and a vote request for a later term received by this node ends
//! the lease at once (recorded here before openraft sees the request).
//!
//! While the lease holds, and this node's state machine has applied an
//! entry of the leader's own term (so every entry committed by earlier
//! leaders is applied too), every entry any node may have applied (and a
//! client may have seen) is at or below the larger of this node's applied
//! index and the highest commit index it has sent to a follower: that is a
//! read index with no round trip. When any of that does not hold (a new leader whose
//! first entry is not applied yet, acknowledgements older than the lease,
//! a higher term seen), the caller falls back to Raft's ReadIndex round.
//!
//! What it assumes, as every lease does: clocks of the nodes advance at
//! rates within a factor of two of each other over a lease (monotonic
//! clocks, not wall time: a wall-clock jump does not matter). What it does
//! not assume: anything about pauses. A check that passed linearizes the
//! read at the check; a leader paused after it serves a read that was
//! concurrent with anything that happened during the pause.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use openraft::Vote;

use crate::{LogId, NodeId, Raft};

/// The last applied entry of this node's state machine.
pub(crate) type AppliedFn = Box<dyn Fn() -> Option<LogId> + Send + Sync>;

/// What one node knows about its lease as a leader (see the module docs).
pub(crate) struct Lease {
    me: NodeId,
    /// How long after an append was sent its acknowledgement keeps the
    /// lease.
    duration: Duration,
    /// Per follower: the term of this node's leadership and the latest
    /// send time of an append it accepted in that term.
    acks: parking_lot::Mutex<HashMap<NodeId, (u64, Instant)>>,
    /// The highest term of any vote request this node received.
    vote_seen: AtomicU64,
    /// The highest commit index this node has sent to a follower (in an
    /// append's `leader_commit`): a follower may have applied, and served
    /// reads of, every entry up to it.
    commit_sent: AtomicU64,
    applied: AppliedFn,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("me", &self.me)
            .field("duration", &self.duration)
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// A lease of `duration` for node `me`, whose applied entry `applied`
    /// reads.
    pub(crate) fn new(me: NodeId, duration: Duration, applied: AppliedFn) -> Lease {
        Lease {
            me,
            duration,
            acks: parking_lot::Mutex::new(HashMap::new()),
            vote_seen: AtomicU64::new(0),
            commit_sent: AtomicU64::new(0),
            applied,
        }
    }

    /// `target` accepted an append sent at `sent` under `vote` (it did not
    /// answer with a higher vote).
    pub(crate) fn acked(&self, target: NodeId, vote: &Vote<NodeId>, sent: Instant) {
        let leader = vote.leader_id();
        if !vote.is_committed() || leader.voted_for() != Some(self.me) {
            return;
        }
        let term = leader.get_term();
        let mut acks = self.acks.lock();
        let e = acks.entry(target).or_insert((term, sent));
        if (term, sent) > *e {
            *e = (term, sent);
        }
    }

    /// This node is about to send an append that tells a follower entries
    /// up to `index` are committed: call it before sending.
    pub(crate) fn sending_commit(&self, index: u64) {
        self.commit_sent.fetch_max(index, Ordering::SeqCst);
    }

    /// This node received a vote request for `term`: call it before the
    /// request reaches openraft, which may grant it.
    pub(crate) fn vote_requested(&self, term: u64) {
        self.vote_seen.fetch_max(term, Ordering::SeqCst);
    }

    /// A read index that needs no round trip, if this node leads under a
    /// valid lease: the highest of its applied index (what it acknowledged)
    /// and the commit index it has sent to followers (what they may have
    /// applied and served: a follower can apply an entry before the
    /// leader does, so the leader's applied index alone let a read on the
    /// leader miss what a read on a follower had just returned; found by
    /// the partition tests' checker). The caller waits until it has applied
    /// that far. `None`: use ReadIndex.
    pub(crate) fn read_index(&self, raft: &Raft) -> Option<u64> {
        let seen = self.vote_seen.load(Ordering::SeqCst);
        let (term, voters) = {
            let m = raft.metrics();
            let m = m.borrow();
            if m.current_leader != Some(self.me) || !m.vote.is_committed() {
                return None;
            }
            let membership = m.membership_config.membership();
            if membership.get_joint_config().len() > 1 {
                // A membership change in flight: two majorities to hold;
                // ReadIndex handles it.
                return None;
            }
            let voters: Vec<NodeId> = membership.voter_ids().collect();
            if !voters.contains(&self.me) {
                // Removed from the group: it leads nobody.
                return None;
            }
            (m.vote.leader_id().get_term(), voters)
        };
        if seen > term {
            return None;
        }
        let applied = (self.applied)()?;
        if applied.leader_id.get_term() != term {
            return None;
        }
        let fresh = Instant::now().checked_sub(self.duration)?;
        let index = applied.index.max(self.commit_sent.load(Ordering::SeqCst));
        self.majority_acked(term, &voters, fresh).then_some(index)
    }

    /// Whether a majority of `voters` (this node included) accepted
    /// appends of `term` that this node sent after `fresh`.
    fn majority_acked(&self, term: u64, voters: &[NodeId], fresh: Instant) -> bool {
        let acks = self.acks.lock();
        let held = voters
            .iter()
            .filter(|&&v| {
                v == self.me
                    || acks
                        .get(&v)
                        .is_some_and(|&(t, sent)| t == term && sent > fresh)
            })
            .count();
        held > voters.len() / 2
    }

    /// Whether this node leads and a majority of the voters (itself
    /// included) accepted appends it sent within `window`: it is not cut
    /// off from its followers (the pre-vote gate, `crate::prevote`).
    pub(crate) fn quorum_within(&self, raft: &Raft, window: Duration) -> bool {
        let (term, voters) = {
            let m = raft.metrics();
            let m = m.borrow();
            if m.current_leader != Some(self.me) {
                return false;
            }
            let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
            (m.vote.leader_id().get_term(), voters)
        };
        let Some(fresh) = Instant::now().checked_sub(window) else {
            return true;
        };
        self.majority_acked(term, &voters, fresh)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(term: u64, leader: NodeId) -> Vote<NodeId> {
        Vote::new_committed(term, leader)
    }

    #[test]
    fn acks_keep_the_latest_send_time_of_this_leaders_term() {
        let l = Lease::new(1, Duration::from_millis(300), Box::new(|| None));
        let t0 = Instant::now();
        l.acked(2, &vote(3, 1), t0);
        l.acked(2, &vote(3, 1), t0 - Duration::from_millis(5));
        assert_eq!(l.acks.lock()[&2], (3, t0), "an older send does not win");
        // Another leader's vote, or an uncommitted one, is not this lease.
        l.acked(3, &vote(3, 2), t0);
        l.acked(3, &Vote::new(4, 1), t0);
        assert!(!l.acks.lock().contains_key(&3));
        l.acked(2, &vote(4, 1), t0 - Duration::from_millis(9));
        assert_eq!(l.acks.lock()[&2].0, 4, "a later term replaces it");
    }
}
