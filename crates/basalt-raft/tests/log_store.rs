//! The Raft log on disk: what survives a reopen, a torn tail, truncation,
//! purging, and what damage is refused.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use basalt_engine::SyncPolicy;
use basalt_raft::{Entry, LogStore, Request};
use openraft::storage::{RaftLogReaderExt, RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, EntryPayload, LogId, RaftLogReader, Vote};
use tempfile::TempDir;

fn entry(term: u64, index: u64) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
        payload: EntryPayload::Normal(Request(format!("payload {index}").into_bytes().into())),
    }
}

async fn indexes(log: &mut LogStore) -> Vec<u64> {
    log.try_get_log_entries(0..u64::MAX)
        .await
        .unwrap()
        .iter()
        .map(|e| e.log_id.index)
        .collect()
}

fn segments(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("log-"))
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn entries_and_vote_survive_a_reopen() {
    let t = TempDir::new().unwrap();
    {
        let mut log = LogStore::open(t.path(), SyncPolicy::EveryMs(1000)).unwrap();
        log.blocking_append((1..=10).map(|i| entry(1, i)))
            .await
            .unwrap();
        log.save_vote(&Vote::new_committed(3, 2)).await.unwrap();
    }
    let mut log = LogStore::open(t.path(), SyncPolicy::EveryMs(1000)).unwrap();
    assert_eq!(indexes(&mut log).await, (1..=10).collect::<Vec<_>>());
    assert_eq!(
        log.read_vote().await.unwrap(),
        Some(Vote::new_committed(3, 2))
    );
    let e = log.try_get_log_entry(7).await.unwrap().unwrap();
    assert_eq!(
        e.payload,
        EntryPayload::Normal(Request(b"payload 7".to_vec().into()))
    );
}

#[tokio::test]
async fn a_torn_last_entry_is_cut_off_and_appends_go_on_after_it() {
    let t = TempDir::new().unwrap();
    {
        let mut log = LogStore::open(t.path(), SyncPolicy::Always).unwrap();
        log.blocking_append((1..=5).map(|i| entry(1, i)))
            .await
            .unwrap();
    }
    let seg = t.path().join(&segments(t.path())[0]);
    let full = std::fs::metadata(&seg).unwrap().len();
    // A crash in the middle of writing entry 5: drop its last 3 bytes.
    OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(full - 3)
        .unwrap();
    let mut log = LogStore::open(t.path(), SyncPolicy::Always).unwrap();
    assert_eq!(indexes(&mut log).await, vec![1, 2, 3, 4]);
    log.blocking_append([entry(2, 5), entry(2, 6)])
        .await
        .unwrap();
    drop(log);
    let mut log = LogStore::open(t.path(), SyncPolicy::Always).unwrap();
    assert_eq!(indexes(&mut log).await, vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(
        log.try_get_log_entry(5)
            .await
            .unwrap()
            .unwrap()
            .log_id
            .leader_id
            .term,
        2
    );
}

#[tokio::test]
async fn garbage_after_the_last_entry_is_cut_off() {
    let t = TempDir::new().unwrap();
    {
        let mut log = LogStore::open(t.path(), SyncPolicy::Always).unwrap();
        log.blocking_append((1..=3).map(|i| entry(1, i)))
            .await
            .unwrap();
    }
    let seg = t.path().join(&segments(t.path())[0]);
    let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&[200, 0, 0, 0, 1, 2, 3, 4, 9, 9, 9]).unwrap();
    let mut log = LogStore::open(t.path(), SyncPolicy::Always).unwrap();
    assert_eq!(indexes(&mut log).await, vec![1, 2, 3]);
}

#[tokio::test]
async fn truncation_and_purge_hold_across_segments_and_reopens() {
    let t = TempDir::new().unwrap();
    let open = || LogStore::open_with_segment_bytes(t.path(), SyncPolicy::EveryMs(1000), 200);
    {
        let mut log = open().unwrap();
        log.blocking_append((1..=40).map(|i| entry(1, i)))
            .await
            .unwrap();
        assert!(segments(t.path()).len() > 5, "small segments roll over");
        log.truncate(LogId::new(CommittedLeaderId::new(1, 1), 31))
            .await
            .unwrap();
        log.blocking_append((31..=35).map(|i| entry(2, i)))
            .await
            .unwrap();
        log.purge(LogId::new(CommittedLeaderId::new(1, 1), 12))
            .await
            .unwrap();
    }
    let mut log = open().unwrap();
    assert_eq!(indexes(&mut log).await, (13..=35).collect::<Vec<_>>());
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id.unwrap().index, 12);
    assert_eq!(state.last_log_id.unwrap().index, 35);
    assert_eq!(
        log.try_get_log_entry(31)
            .await
            .unwrap()
            .unwrap()
            .log_id
            .leader_id
            .term,
        2
    );
    // No segment that holds only purged entries is left.
    let first_kept: u64 = segments(t.path())[0]["log-".len()..].parse().unwrap();
    assert!(
        first_kept <= 13 && first_kept > 1,
        "first segment starts at {first_kept}"
    );
    // Everything purged: the state still names the last entry.
    log.purge(LogId::new(CommittedLeaderId::new(2, 1), 35))
        .await
        .unwrap();
    drop(log);
    let mut log = open().unwrap();
    assert!(indexes(&mut log).await.is_empty());
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id.unwrap().index, 35);
    log.blocking_append([entry(2, 36)]).await.unwrap();
    assert_eq!(indexes(&mut log).await, vec![36]);
}

#[tokio::test]
async fn damage_in_a_sealed_segment_is_an_error_not_a_silent_loss() {
    let t = TempDir::new().unwrap();
    {
        let mut log = LogStore::open_with_segment_bytes(t.path(), SyncPolicy::Always, 200).unwrap();
        log.blocking_append((1..=20).map(|i| entry(1, i)))
            .await
            .unwrap();
    }
    let first = t.path().join(&segments(t.path())[0]);
    let mut bytes = std::fs::read(&first).unwrap();
    let n = bytes.len();
    bytes[n - 2] ^= 0xff;
    std::fs::write(&first, bytes).unwrap();
    let err = LogStore::open_with_segment_bytes(t.path(), SyncPolicy::Always, 200).unwrap_err();
    assert!(err.to_string().contains("CRC"), "{err}");
}

#[tokio::test]
async fn a_purge_past_the_last_entry_then_appends_far_ahead_reopen_cleanly() {
    // What installing a snapshot newer than the whole log does.
    let t = TempDir::new().unwrap();
    {
        let mut log = LogStore::open(t.path(), SyncPolicy::EveryMs(1000)).unwrap();
        log.blocking_append((1..=10).map(|i| entry(1, i)))
            .await
            .unwrap();
        log.purge(LogId::new(CommittedLeaderId::new(3, 2), 500))
            .await
            .unwrap();
        log.blocking_append((501..=503).map(|i| entry(3, i)))
            .await
            .unwrap();
    }
    let mut log = LogStore::open(t.path(), SyncPolicy::EveryMs(1000)).unwrap();
    assert_eq!(indexes(&mut log).await, vec![501, 502, 503]);
    assert_eq!(segments(t.path()), vec![format!("log-{:020}", 501)]);
}
