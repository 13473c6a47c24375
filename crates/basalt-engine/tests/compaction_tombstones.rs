//! A deleted or expired key never comes back: not after a compaction that
//! rewrites only the file holding its tombstone, and not after a restart.

use std::sync::Arc;

use basalt_engine::{Db, ManualClock, Options, SyncPolicy};

fn opts(clock: &Arc<ManualClock>) -> Options {
    Options::default()
        .shards(1)
        .max_file_size(4096)
        .sync(SyncPolicy::Never)
        .background_compaction(false)
        .active_expiry(false)
        .clock(clock.clone())
}

/// Fills the active file with live keys so it is sealed mostly live.
fn fill_live(db: &Db, prefix: &str) {
    for i in 0..40 {
        db.put(format!("{prefix}{i}").as_bytes(), &[b'x'; 100])
            .unwrap();
    }
}

/// Fills files with overwrites of one key, so they are sealed mostly garbage.
fn fill_garbage(db: &Db) {
    for _ in 0..80 {
        db.put(b"churn", &[b'g'; 100]).unwrap();
    }
}

#[test]
fn deleted_key_stays_deleted_when_only_the_tombstone_file_is_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    db.put(b"victim", b"old value").unwrap();
    fill_live(&db, "a");
    db.delete(b"victim").unwrap();
    fill_garbage(&db);
    let files_before = db.stats().files.len();
    let r = db.compact_pass().unwrap();
    assert!(
        r.files_compacted >= 1,
        "the garbage file was compacted: {r:?}"
    );
    let st = db.stats();
    assert!(
        st.files
            .iter()
            .any(|f| f.live_bytes > 0 && !f.compacted && !f.active),
        "the mostly-live file holding the old value was left alone ({files_before} files before)"
    );
    assert_eq!(db.get(b"victim").unwrap(), None);
    db.close().unwrap();

    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    assert_eq!(
        db.get(b"victim").unwrap(),
        None,
        "tombstone survived compaction"
    );
    db.compact().unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    assert_eq!(db.get(b"victim").unwrap(), None, "and a full compaction");
    assert_eq!(db.get(b"a7").unwrap().unwrap(), vec![b'x'; 100]);
}

#[test]
fn expired_key_stays_gone_after_sweep_compaction_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    db.put(b"victim", b"forever").unwrap();
    fill_live(&db, "a");
    db.put_with_expiry(b"victim", b"short-lived", Some(2_000))
        .unwrap();
    fill_live(&db, "b");
    clock.advance(5_000);
    assert_eq!(
        db.get(b"victim").unwrap(),
        None,
        "expired keys are never returned"
    );
    assert_eq!(db.sweep_expired().unwrap(), 1);
    fill_garbage(&db);
    db.compact_pass().unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    assert_eq!(db.get(b"victim").unwrap(), None);
    db.compact().unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    assert_eq!(db.get(b"victim").unwrap(), None);
    assert_eq!(
        db.stats().keys,
        81,
        "only the live keys (a*, b*, churn) remain in the index"
    );
}

#[test]
fn expired_map_does_not_come_back_after_restart_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    db.put_field(b"h", b"f1", b"v1").unwrap();
    db.expire(b"h", 2_000).unwrap();
    db.put_field(b"h", b"f2", b"v2").unwrap();
    fill_live(&db, "a");
    clock.advance(5_000);
    db.close().unwrap();
    // Reopened after the deadline, before any sweep wrote a deletion.
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    assert!(db.fields(b"h").unwrap().is_empty());
    db.compact().unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    assert!(!db.exists(b"h"));
    assert!(db.fields(b"h").unwrap().is_empty());
}

/// A queue: many fields pushed, most of them deleted again while the map
/// lives. The files the deletions fill hold tombstones, not garbage, and
/// compaction outputs carry the map's old live fields, so a file of
/// tombstones compacted alone would keep every one of them. The background
/// policy compacts such a file together with the files its tombstones may
/// shadow; the tombstones go, and nothing comes back after a restart.
#[test]
fn a_file_full_of_field_deletions_is_reclaimed_and_the_map_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let opts = |c: &Arc<ManualClock>| opts(c).max_file_size(256 << 10);
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    let field = |i: u32| format!("f{i:06}").into_bytes();
    for i in 0..20_000 {
        db.put_field(b"q", &field(i), &[b'v'; 24]).unwrap();
    }
    // The oldest fields stay; compact the pushes' files first, as the
    // background thread would have, so their survivors sit in an output.
    for i in 1_000..20_000 {
        db.delete_field(b"q", &field(i)).unwrap();
    }
    let tombstones = |db: &Db| -> u64 { db.stats().files.iter().map(|f| f.tombstone_bytes).sum() };
    let disk = |db: &Db| -> u64 { db.stats().files.iter().map(|f| f.total_bytes).sum() };
    let (t0, d0) = (tombstones(&db), disk(&db));
    assert!(t0 > 400 << 10, "the deletions wrote tombstones: {t0}");
    // Seal the last file of deletions behind newer writes.
    for i in 0..6_000 {
        db.put(format!("other{i}").as_bytes(), &[b'o'; 40]).unwrap();
    }
    let version = db.version(b"q");
    for _ in 0..10 {
        if db.compact_pass().unwrap().files_compacted == 0 {
            break;
        }
    }
    let (t1, d1) = (tombstones(&db), disk(&db));
    assert!(
        t1 * 4 < t0,
        "tombstones {t0} -> {t1} bytes (disk {d0} -> {d1})"
    );
    assert_eq!(db.version(b"q"), version);
    db.close().unwrap();

    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    let mut names = db.field_names(b"q").unwrap();
    names.sort();
    assert_eq!(names, (0..1_000).map(field).collect::<Vec<_>>());
    assert_eq!(db.get_field(b"q", &field(7)).unwrap(), Some(vec![b'v'; 24]));
    assert_eq!(db.get_field(b"q", &field(1_234)).unwrap(), None);
    assert_eq!(db.version(b"q"), version, "the map's version survives");
}
