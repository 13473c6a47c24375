//! The count of large maps (`Db::large_maps`, `Db::large_map`): maps of more
//! than `LARGE_MAP_FIELDS` fields, which a write replacing them drops in
//! time linear in their fields. A replicated server asks it before applying
//! an entry on the thread that also sends its heartbeats, so the count must
//! follow every way a map grows, shrinks, goes, expires and comes back at
//! open.

use std::sync::Arc;

use basalt_engine::{
    Db, LargeMap, ManualClock, Options, SyncPolicy, LARGE_MAP_FIELDS, SEGMENT_LEN,
};

fn opts(clock: &Arc<ManualClock>) -> Options {
    Options::default()
        .shards(4)
        .sync(SyncPolicy::Never)
        .background_compaction(false)
        .active_expiry(false)
        .clock(clock.clone())
}

/// A new database in a temporary directory, with its clock.
fn fresh() -> (tempfile::TempDir, Arc<ManualClock>, Db) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    (dir, clock, db)
}

fn fill(db: &Db, key: &[u8], fields: usize) {
    for i in 0..fields {
        db.put_field(key, format!("f{i}").as_bytes(), b"v").unwrap();
    }
}

#[test]
fn a_map_counts_as_large_from_the_field_past_the_line_until_it_falls_back_or_goes() {
    let (_dir, _, db) = fresh();
    fill(&db, b"small", 10);
    fill(&db, b"h", LARGE_MAP_FIELDS);
    assert_eq!(db.large_maps(), 0, "exactly at the line is not large");
    assert_eq!(db.large_map(b"h"), None);

    db.put_field(b"h", b"one-more", b"v").unwrap();
    assert_eq!(db.large_maps(), 1);
    assert_eq!(
        db.large_map(b"h"),
        Some(LargeMap {
            fields: LARGE_MAP_FIELDS + 1,
            expiry: 0
        })
    );
    assert_eq!(db.large_map(b"small"), None);
    assert_eq!(db.large_map(b"absent"), None);

    // Overwriting a field changes nothing; removing one crosses back.
    db.put_field(b"h", b"f0", b"w").unwrap();
    assert_eq!(db.large_maps(), 1);
    assert!(db.delete_field(b"h", b"f1").unwrap());
    assert_eq!(db.large_maps(), 0);
    assert_eq!(db.large_map(b"h"), None);
    db.take_field(b"h", b"f2").unwrap().expect("field there");
    db.put_field(b"h", b"f1", b"v").unwrap();
    db.put_field(b"h", b"f2", b"v").unwrap();
    assert_eq!(db.large_maps(), 1);

    // A plain value written over it drops it; so does a delete.
    db.put(b"h", b"now a string").unwrap();
    assert_eq!(db.large_maps(), 0);
    assert_eq!(db.large_map(b"h"), None);
    fill(&db, b"h2", LARGE_MAP_FIELDS + 5);
    fill(&db, b"h3", LARGE_MAP_FIELDS + 1);
    assert_eq!(db.large_maps(), 2);
    assert!(db.delete(b"h2").unwrap());
    assert_eq!(db.large_maps(), 1);
    assert_eq!(
        db.large_map(b"h3").map(|m| m.fields),
        Some(LARGE_MAP_FIELDS + 1)
    );
}

#[test]
fn an_expired_large_map_counts_until_it_is_purged_and_shows_its_expiry() {
    let (_dir, clock, db) = fresh();
    fill(&db, b"h", LARGE_MAP_FIELDS + 1);
    assert!(db.expire(b"h", 1_000_500).unwrap());
    assert_eq!(
        db.large_map(b"h"),
        Some(LargeMap {
            fields: LARGE_MAP_FIELDS + 1,
            expiry: 1_000_500
        })
    );
    clock.advance(1_000);
    // Gone to readers, still in the index: a write would drop it.
    assert!(!db.exists(b"h"));
    assert_eq!(db.large_maps(), 1);
    assert_eq!(db.large_map(b"h").map(|m| m.expiry), Some(1_000_500));
    db.purge_expired(b"h").unwrap();
    assert_eq!(db.large_maps(), 0);
    assert_eq!(db.large_map(b"h"), None);

    // A persisted one reports no expiry.
    fill(&db, b"p", LARGE_MAP_FIELDS + 1);
    assert!(db.expire(b"p", 9_000_000).unwrap());
    assert!(db.persist(b"p").unwrap());
    assert_eq!(db.large_map(b"p").map(|m| m.expiry), Some(0));
}

#[test]
fn a_value_kept_as_more_than_the_line_of_segments_is_a_large_map() {
    let (_dir, _, db) = fresh();
    let line = (LARGE_MAP_FIELDS * SEGMENT_LEN) as u64;
    // A bit at the last byte of the line's segments: exactly the line.
    db.write_range(b"bits", line - 1, &[1]).unwrap();
    assert_eq!(db.large_maps(), 0);
    // One byte further needs one more segment.
    db.write_range(b"bits", line, &[1]).unwrap();
    assert_eq!(db.large_maps(), 1);
    assert_eq!(
        db.large_map(b"bits").map(|m| m.fields),
        Some(LARGE_MAP_FIELDS + 1)
    );
    db.put(b"bits", b"short").unwrap();
    assert_eq!(db.large_maps(), 0);
}

#[test]
fn the_count_is_rebuilt_at_open_from_what_the_files_hold() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    {
        let db = Db::open(dir.path(), opts(&clock)).unwrap();
        fill(&db, b"a", LARGE_MAP_FIELDS + 1);
        fill(&db, b"b", LARGE_MAP_FIELDS + 2);
        fill(&db, b"c", LARGE_MAP_FIELDS + 1);
        // `b` stays large after losing one, `c` does not.
        assert!(db.delete_field(b"b", b"f0").unwrap());
        assert!(db.delete_field(b"c", b"f0").unwrap());
        assert_eq!(db.large_maps(), 2);
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    assert_eq!(db.large_maps(), 2);
    assert!(db.large_map(b"a").is_some());
    assert!(db.large_map(b"b").is_some());
    assert_eq!(db.large_map(b"c"), None);
    // And it keeps counting from there.
    assert!(db.delete(b"a").unwrap());
    assert_eq!(db.large_maps(), 1);
}
