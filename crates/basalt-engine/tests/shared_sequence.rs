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
