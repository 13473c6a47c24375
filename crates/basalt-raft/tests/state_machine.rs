//! The state machine applies each entry once: its marker commits with the
//! entry's effects, survives a reopen, and an entry offered again is not
//! applied again.

mod common;

use basalt_raft::{Entry, Request, StateMachine};
use common::Op;
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload, LogId, Membership};
use tempfile::TempDir;

fn incr(index: u64) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Request(Op::Incr(b"c".to_vec()).bytes())),
    }
}

fn open(t: &TempDir) -> StateMachine<common::KvApplier> {
    let (applier, opts) = common::open_kv(&t.path().join("data"));
    StateMachine::open(&t.path().join("sm"), opts, applier).unwrap()
}

fn counter(sm: &StateMachine<common::KvApplier>) -> Option<Vec<u8>> {
    sm.applier().db.get(b"c").unwrap()
}

#[tokio::test]
async fn entries_offered_again_after_a_reopen_are_not_applied_twice() {
    let t = TempDir::new().unwrap();
    {
        let mut sm = open(&t);
        let replies = sm.apply((1..=5).map(incr)).await.unwrap();
        assert_eq!(replies.last().unwrap().0, b"5");
    }
    let mut sm = open(&t);
    let (applied, _) = sm.applied_state().await.unwrap();
    assert_eq!(applied.unwrap().index, 5);
    assert_eq!(counter(&sm).as_deref(), Some(&b"5"[..]));
    // openraft would start after the marker; even if 3..=7 came again,
    // only 6 and 7 take effect.
    let replies = sm.apply((3..=7).map(incr)).await.unwrap();
    assert_eq!(replies.len(), 5);
    assert_eq!(replies[4].0, b"7");
    assert_eq!(counter(&sm).as_deref(), Some(&b"7"[..]));
}

#[tokio::test]
async fn membership_entries_are_remembered_with_the_marker() {
    let t = TempDir::new().unwrap();
    {
        let mut sm = open(&t);
        let m = Membership::new(vec![[1u64, 2, 3].into_iter().collect()], None);
        let e = Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 1),
            payload: EntryPayload::Membership(m),
        };
        sm.apply([e, incr(2)]).await.unwrap();
    }
    let mut sm = open(&t);
    let (applied, membership) = sm.applied_state().await.unwrap();
    assert_eq!(applied.unwrap().index, 2);
    assert_eq!(membership.log_id().unwrap().index, 1);
    let voters: Vec<u64> = membership.membership().voter_ids().collect();
    assert_eq!(voters, vec![1, 2, 3]);
}

#[tokio::test]
async fn a_snapshot_restores_state_and_marker_on_another_state_machine() {
    use openraft::RaftSnapshotBuilder;
    let (a, b) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let mut sm_a = open(&a);
    sm_a.apply((1..=9).map(incr)).await.unwrap();
    let snap = sm_a
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    assert_eq!(snap.meta.last_log_id.unwrap().index, 9);
    let mut sm_b = open(&b);
    sm_b.apply((1..=2).map(incr)).await.unwrap();
    sm_b.install_snapshot(&snap.meta, snap.snapshot)
        .await
        .unwrap();
    drop(sm_b);
    let mut sm_b = open(&b);
    assert_eq!(counter(&sm_b).as_deref(), Some(&b"9"[..]));
    assert_eq!(sm_b.applied_state().await.unwrap().0.unwrap().index, 9);
    let current = sm_b.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta.snapshot_id, snap.meta.snapshot_id);
}
