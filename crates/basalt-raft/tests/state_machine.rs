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
        payload: EntryPayload::Normal(Request(Op::Incr(b"c".to_vec()).bytes().into())),
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

/// Sends `snap` to `to` as openraft does: its archive into a receiving
/// file, then the install.
async fn send(
    snap: openraft::storage::Snapshot<basalt_raft::TypeConfig>,
    to: &mut StateMachine<common::KvApplier>,
) -> Result<(), basalt_raft::StorageError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut data = snap.snapshot;
    let mut bytes = Vec::new();
    data.read_to_end(&mut bytes).await.unwrap();
    let mut rx = to.begin_receiving_snapshot().await.unwrap();
    rx.write_all(&bytes).await.unwrap();
    to.install_snapshot(&snap.meta, rx).await
}

async fn build(
    sm: &mut StateMachine<common::KvApplier>,
) -> openraft::storage::Snapshot<basalt_raft::TypeConfig> {
    use openraft::RaftSnapshotBuilder;
    sm.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_snapshot_restores_state_and_marker_on_another_state_machine() {
    let (a, b) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let mut sm_a = open(&a);
    sm_a.apply((1..=9).map(incr)).await.unwrap();
    let snap = build(&mut sm_a).await;
    assert_eq!(snap.meta.last_log_id.unwrap().index, 9);
    // Applied after the snapshot: not in it.
    sm_a.apply((10..=12).map(incr)).await.unwrap();
    let mut sm_b = open(&b);
    sm_b.apply((1..=2).map(incr)).await.unwrap();
    let id = snap.meta.snapshot_id.clone();
    send(snap, &mut sm_b).await.unwrap();
    assert_eq!(counter(&sm_b).as_deref(), Some(&b"9"[..]));
    drop(sm_b);
    let mut sm_b = open(&b);
    assert_eq!(counter(&sm_b).as_deref(), Some(&b"9"[..]));
    assert_eq!(sm_b.applied_state().await.unwrap().0.unwrap().index, 9);
    let current = sm_b.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta.snapshot_id, id);
    // The installed node's own snapshot serves a third node.
    let c = TempDir::new().unwrap();
    let mut sm_c = open(&c);
    send(current, &mut sm_c).await.unwrap();
    assert_eq!(counter(&sm_c).as_deref(), Some(&b"9"[..]));
}

#[tokio::test]
async fn an_install_interrupted_by_a_crash_is_finished_at_the_next_start() {
    let (a, b) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let mut sm_a = open(&a);
    sm_a.apply((1..=7).map(incr)).await.unwrap();
    let snap = build(&mut sm_a).await;
    let mut sm_b = open(&b);
    sm_b.apply((1..=3).map(incr)).await.unwrap();
    // The applier fails half-way, as a process killed during the install
    // would stop: the intent and the staged files stay.
    sm_b.applier()
        .fail_next_install
        .store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(send(snap, &mut sm_b).await.is_err());
    assert!(b.path().join("sm/install").exists());
    drop(sm_b);
    let mut sm_b = open(&b);
    assert!(!b.path().join("sm/install").exists());
    assert_eq!(counter(&sm_b).as_deref(), Some(&b"7"[..]));
    assert_eq!(sm_b.applied_state().await.unwrap().0.unwrap().index, 7);
    // Entries after the snapshot apply on top of it.
    sm_b.apply((8..=9).map(incr)).await.unwrap();
    assert_eq!(counter(&sm_b).as_deref(), Some(&b"9"[..]));
    let left: Vec<_> = std::fs::read_dir(b.path().join("sm/snapshots"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left.len(), 1, "only the current snapshot is left: {left:?}");
    assert!(left[0].starts_with("snap-"), "{left:?}");
}

#[tokio::test]
async fn a_snapshot_whose_files_were_cut_short_is_dropped_at_start_up() {
    let t = TempDir::new().unwrap();
    {
        let mut sm = open(&t);
        sm.apply((1..=4).map(incr)).await.unwrap();
        build(&mut sm).await;
        assert!(sm.get_current_snapshot().await.unwrap().is_some());
    }
    // A power loss cut a file of the snapshot back (an active file's
    // prefix that never reached the disk).
    let snaps = t.path().join("sm/snapshots");
    let snap = std::fs::read_dir(&snaps)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let data = std::fs::read_dir(snap.join("data/kv/shard-0000"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "data"))
        .unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(10)
        .unwrap();
    // The node still starts; it has no snapshot until it builds one.
    let mut sm = open(&t);
    assert!(sm.get_current_snapshot().await.unwrap().is_none());
    let snap = build(&mut sm).await;
    assert_eq!(snap.meta.last_log_id.unwrap().index, 4);
}
