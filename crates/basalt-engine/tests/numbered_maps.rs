//! Maps whose field names are consecutive 8-byte numbers (how the server
//! stores a list's positions) are held as runs, not hash tables
//! (`src/fields.rs`). Through the public API they must behave exactly like
//! any other map: across pushes and pops at both ends, a removal from the
//! middle that breaks the run, compaction, and reopening.

use std::collections::BTreeMap;
use std::sync::Arc;

use basalt_engine::{Db, ManualClock, Options, SyncPolicy};

fn opts(clock: &Arc<ManualClock>) -> Options {
    Options::default()
        .shards(1)
        .max_file_size(16 << 10)
        .sync(SyncPolicy::Never)
        .background_compaction(false)
        .active_expiry(false)
        .clock(clock.clone())
}

fn name(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// Every field of `key` read back, by number.
fn contents(db: &Db, key: &[u8]) -> BTreeMap<u64, Vec<u8>> {
    db.fields(key)
        .unwrap()
        .into_iter()
        .map(|(f, v)| (u64::from_be_bytes(f[..].try_into().unwrap()), v))
        .collect()
}

#[test]
fn a_queue_shaped_map_survives_pops_a_middle_removal_compaction_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    let mut model: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mid = 1u64 << 63;
    // Pushes at both ends, with pops in between (a queue's churn).
    let (mut head, mut tail) = (mid, mid);
    for i in 0..600u64 {
        let v = format!("value-{i}").into_bytes();
        if i % 3 == 0 {
            head -= 1;
            db.put_field(b"q", &name(head), &v).unwrap();
            model.insert(head, v);
        } else {
            db.put_field(b"q", &name(tail), &v).unwrap();
            model.insert(tail, v);
            tail += 1;
        }
        if i % 5 == 4 {
            let got = db.take_field(b"q", &name(head)).unwrap();
            assert_eq!(got, model.remove(&head));
            head += 1;
        }
    }
    // Overwrites in place and a read by number.
    db.put_field(b"q", &name(head + 3), b"rewritten").unwrap();
    model.insert(head + 3, b"rewritten".to_vec());
    assert_eq!(
        db.get_field(b"q", &name(head + 3)).unwrap().as_deref(),
        Some(&b"rewritten"[..])
    );
    assert_eq!(db.get_field(b"q", &name(head - 1)).unwrap(), None);
    assert_eq!(db.get_field(b"q", &name(tail)).unwrap(), None);
    assert_eq!(contents(&db, b"q"), model);

    // A second map that loses a middle field: no longer a run.
    for i in 0..50u64 {
        db.put_field(b"holey", &name(i), b"h").unwrap();
    }
    assert!(db.delete_field(b"holey", &name(25)).unwrap());
    db.put_field(b"holey", &name(25), b"back").unwrap();
    db.put_field(b"holey", b"not-a-number", b"n").unwrap();

    db.compact().unwrap();
    assert_eq!(contents(&db, b"q"), model);
    db.close().unwrap();

    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    assert_eq!(contents(&db, b"q"), model);
    let holey = db.fields(b"holey").unwrap();
    assert_eq!(holey.len(), 51);
    assert_eq!(
        db.get_field(b"holey", &name(25)).unwrap().as_deref(),
        Some(&b"back"[..])
    );
    // After reopening, the queue keeps working at both ends.
    db.put_field(b"q", &name(head - 1), b"front").unwrap();
    db.put_field(b"q", &name(tail), b"back").unwrap();
    assert_eq!(
        db.take_field(b"q", &name(tail)).unwrap().as_deref(),
        Some(&b"back"[..])
    );
    assert_eq!(
        db.take_field(b"q", &name(head - 1)).unwrap().as_deref(),
        Some(&b"front"[..])
    );
    assert_eq!(contents(&db, b"q"), model);
    let picks = db.random_fields(b"q", 10, true, 7).unwrap();
    assert_eq!(picks.len(), 10);
    for p in picks {
        assert!(model.contains_key(&u64::from_be_bytes(p[..].try_into().unwrap())));
    }
}

/// The `run` a map's metadata reports.
fn run_of(db: &Db, key: &[u8]) -> Option<u64> {
    match db.meta(key).unwrap().kind {
        basalt_engine::KeyKind::Map { run, .. } => run,
        k => panic!("not a map: {k:?}"),
    }
}

#[test]
fn map_metadata_names_the_first_field_of_a_run_until_the_run_breaks() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    let mid = 1u64 << 63;
    for i in 0..10 {
        db.put_field(b"q", &name(mid + i), b"v").unwrap();
    }
    assert_eq!(run_of(&db, b"q"), Some(mid));
    db.put_field(b"q", &name(mid - 1), b"front").unwrap();
    assert_eq!(run_of(&db, b"q"), Some(mid - 1));
    db.take_field(b"q", &name(mid - 1)).unwrap();
    db.take_field(b"q", &name(mid)).unwrap();
    assert_eq!(run_of(&db, b"q"), Some(mid + 1));
    db.take_field(b"q", &name(mid + 9)).unwrap();
    assert_eq!(run_of(&db, b"q"), Some(mid + 1));
    // A map of other names is not a run.
    db.put_field(b"h", b"name", b"v").unwrap();
    assert_eq!(run_of(&db, b"h"), None);
    // A removal from the middle breaks the run for good.
    db.delete_field(b"q", &name(mid + 4)).unwrap();
    assert_eq!(run_of(&db, b"q"), None);
    db.put_field(b"q", &name(mid + 4), b"back").unwrap();
    assert_eq!(run_of(&db, b"q"), None);
    // Reopened from its files, a queue is a run again.
    db.put_field(b"r", &name(7), b"a").unwrap();
    db.put_field(b"r", &name(8), b"b").unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    assert_eq!(run_of(&db, b"r"), Some(7));
}
