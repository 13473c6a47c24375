//! Databases opened with one shared sequence counter hand out distinct,
//! increasing versions, and an empty database created after others starts
//! above them, also after it is reopened on its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use basalt_engine::{Db, Options, SyncPolicy};

fn opts(counter: &Arc<AtomicU64>) -> Options {
    Options::default()
        .shards(2)
        .sync(SyncPolicy::Never)
        .background_compaction(false)
        .sequence(counter.clone())
}

#[test]
fn two_databases_sharing_a_counter_never_reuse_a_version() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let counter = Arc::new(AtomicU64::new(1));
    let a = Db::open(a_dir.path(), opts(&counter)).unwrap();
    let b = Db::open(b_dir.path(), opts(&counter)).unwrap();
    let mut seen = Vec::new();
    for i in 0..20u32 {
        seen.push(a.put(b"k", &i.to_le_bytes()).unwrap());
        seen.push(b.put(b"k", &i.to_le_bytes()).unwrap());
    }
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert_eq!(b.version(b"k"), *seen.last().unwrap());
    assert_eq!(counter.load(Ordering::SeqCst), seen.last().unwrap() + 1);
}

#[test]
fn an_empty_database_starts_above_the_counter_and_keeps_that_floor_on_reopen() {
    let (old_dir, new_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let counter = Arc::new(AtomicU64::new(1));
    let old = Db::open(old_dir.path(), opts(&counter)).unwrap();
    for i in 0..1000u32 {
        old.put(&i.to_le_bytes(), b"v").unwrap();
    }
    let high = old.version(&999u32.to_le_bytes());
    old.close().unwrap();

    // A fresh directory opened with the counter continues above it.
    let fresh = Db::open(new_dir.path(), opts(&counter)).unwrap();
    let v = fresh.put(b"k", b"v").unwrap();
    assert!(v > high, "{v} <= {high}");
    fresh.close().unwrap();

    // Reopened alone (no shared counter), it still does: the floor is in
    // its files.
    let alone = Db::open(new_dir.path(), Options::default().sync(SyncPolicy::Never)).unwrap();
    assert_eq!(alone.version(b"k"), v);
    let w = alone.put(b"other", b"v").unwrap();
    assert!(w > v);

    // An empty directory that saw no write keeps the floor too.
    let empty_dir = tempfile::tempdir().unwrap();
    let counter2 = Arc::new(AtomicU64::new(high + 500));
    Db::open(empty_dir.path(), opts(&counter2))
        .unwrap()
        .close()
        .unwrap();
    let reopened = Db::open(empty_dir.path(), Options::default()).unwrap();
    assert!(reopened.put(b"k", b"v").unwrap() >= high + 500);
}

#[test]
fn opening_raises_a_lower_shared_counter() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default().sync(SyncPolicy::Never)).unwrap();
    let mut last = 0;
    for i in 0..50u32 {
        last = db.put(&i.to_le_bytes(), b"v").unwrap();
    }
    db.close().unwrap();
    let counter = Arc::new(AtomicU64::new(1));
    let db = Db::open(dir.path(), opts(&counter)).unwrap();
    assert!(counter.load(Ordering::SeqCst) > last);
    assert!(db.put(b"k", b"v").unwrap() > last);
}

/// Two threads write at once, each in a lane of its own: each thread's
/// versions are its lane's numbers in its order, whatever the interleaving;
/// a write batch inside a lane commits with the lane's numbers; and once
/// the counter is raised past the lanes, later writes win over them, also
/// after a reopen.
#[test]
fn writes_in_sequence_lanes_take_the_lanes_numbers_whatever_the_interleaving() {
    let dir = tempfile::tempdir().unwrap();
    let counter = Arc::new(AtomicU64::new(1));
    let db = Db::open(dir.path(), opts(&counter)).unwrap();
    let starts = [10_000u64, 20_000];
    let ends: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = starts
            .iter()
            .enumerate()
            .map(|(t, &start)| {
                let db = &db;
                s.spawn(move || {
                    let lane = basalt_engine::SequenceLane::open(start);
                    let mut versions = Vec::new();
                    for i in 0..200u32 {
                        let key = format!("t{t}:{}", i % 50);
                        versions.push(db.put(key.as_bytes(), &i.to_le_bytes()).unwrap());
                    }
                    let mut batch = basalt_engine::WriteBatch::new();
                    batch.put(format!("t{t}:batch:a").as_bytes(), b"a");
                    batch.put(format!("t{t}:batch:b").as_bytes(), b"b");
                    db.write(&batch).unwrap();
                    let expected: Vec<u64> = (start..start + 200).collect();
                    assert_eq!(versions, expected);
                    assert_eq!(db.version(format!("t{t}:batch:a").as_bytes()), start + 200);
                    assert_eq!(db.version(format!("t{t}:batch:b").as_bytes()), start + 201);
                    lane.next()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Two members and the batch's commit record.
    assert_eq!(ends, vec![10_203, 20_203]);
    // The shared counter was not touched by the lanes.
    assert!(counter.load(Ordering::SeqCst) < 10_000);
    // Outside a lane the thread draws from the counter again; raised past
    // the lanes, a later write of a lane's key wins.
    counter.fetch_max(30_000, Ordering::SeqCst);
    let v = db.put(b"t0:7", b"after").unwrap();
    assert_eq!(v, 30_000);
    db.close().unwrap();
    let db = Db::open(dir.path(), opts(&Arc::new(AtomicU64::new(1)))).unwrap();
    assert_eq!(db.get(b"t0:7").unwrap().as_deref(), Some(&b"after"[..]));
    assert_eq!(db.version(b"t0:7"), 30_000);
    assert_eq!(db.get(b"t1:batch:b").unwrap().as_deref(), Some(&b"b"[..]));
    assert_eq!(db.version(b"t1:8"), 20_000 + 158);
    assert_eq!(
        db.get(b"t1:8").unwrap().as_deref(),
        Some(&158u32.to_le_bytes()[..])
    );
}
