//! `Db::random_fields` and `Db::contains_field`: random picks come from the
//! map's current fields, distinct when asked, repeatable for a seed, and
//! stay right as fields are removed (swap-removal reorders the table) and
//! after a reopen.

use std::collections::HashSet;

use basalt_engine::{Db, Options};

fn names(db: &Db, key: &[u8]) -> HashSet<Vec<u8>> {
    db.field_names(key).unwrap().into_iter().collect()
}

#[test]
fn random_fields_pick_live_fields_distinct_or_repeated() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert!(db.random_fields(b"none", 3, true, 1).unwrap().is_empty());
    for i in 0..100u32 {
        db.put_field_tagged(b"m", 2, format!("f{i}").as_bytes(), b"")
            .unwrap();
    }
    // Remove every third field: swap_remove moves later fields around.
    for i in (0..100u32).step_by(3) {
        assert!(db.delete_field(b"m", format!("f{i}").as_bytes()).unwrap());
    }
    let live = names(&db, b"m");
    assert_eq!(live.len(), 66);
    assert!(db.contains_field(b"m", b"f1").unwrap());
    assert!(!db.contains_field(b"m", b"f0").unwrap());
    assert!(!db.contains_field(b"none", b"f1").unwrap());

    for seed in 0..50u64 {
        let picks = db.random_fields(b"m", 10, true, seed).unwrap();
        assert_eq!(picks.len(), 10);
        let set: HashSet<_> = picks.iter().cloned().collect();
        assert_eq!(set.len(), 10, "distinct picks repeat");
        assert!(set.is_subset(&live));
        assert_eq!(picks, db.random_fields(b"m", 10, true, seed).unwrap());
    }
    let all = db.random_fields(b"m", 1000, true, 7).unwrap();
    assert_eq!(all.into_iter().collect::<HashSet<_>>(), live);
    let repeated = db.random_fields(b"m", 500, false, 9).unwrap();
    assert_eq!(repeated.len(), 500);
    assert!(repeated.iter().all(|f| live.contains(f)));
    // 500 picks over 66 fields: every field is very likely seen; require most.
    let seen: HashSet<_> = repeated.into_iter().collect();
    assert!(seen.len() > 50, "picks are not spread: {}", seen.len());

    db.put(b"plain", b"v").unwrap();
    assert!(db.random_fields(b"plain", 1, true, 1).is_err());
    assert!(db.contains_field(b"plain", b"x").is_err());
    db.close().unwrap();

    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(names(&db, b"m"), live);
    let picks = db.random_fields(b"m", 66, true, 3).unwrap();
    assert_eq!(picks.into_iter().collect::<HashSet<_>>(), live);
    db.close().unwrap();
}
