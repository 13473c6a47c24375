//! Write stalls (`Options::write_stall_ratio`): when the data files hold
//! more garbage than compaction is allowed to leave behind, writes are
//! delayed until compaction catches up, so a stream of overwrites faster
//! than compaction cannot fill the disk. The maintenance thread decides
//! every 100 ms; these tests poll its decision, bounded in time.

use std::time::{Duration, Instant};

use basalt_engine::{Db, Options, SyncPolicy};

fn wait_for(db: &Db, stalled: bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if db.stats().write_stalled == stalled {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn garbage_past_the_limit_delays_writes_until_compaction_reclaims_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options::default()
            .shards(1)
            .max_file_size(256 << 10)
            .sync(SyncPolicy::Never)
            // Only `compact()` reclaims: the garbage stays until then.
            .background_compaction(false)
            // Garbage above live bytes + 1 MiB delays writes.
            .write_stall(1.0, 1 << 20)
            .delayed_write_rate_mb(1024),
    )
    .unwrap();
    let value = vec![7u8; 8000];
    for i in 0..50u32 {
        db.put(format!("key{i}").as_bytes(), &value).unwrap();
    }
    assert!(wait_for(&db, false), "400 KB of live data and no garbage");
    assert_eq!(db.stats().write_stalls, 0);
    // Overwrites: 2 MB of garbage over 400 KB live.
    for round in 0..5 {
        for i in 0..50u32 {
            let mut v = value.clone();
            v[0] = round;
            db.put(format!("key{i}").as_bytes(), &v).unwrap();
        }
    }
    assert!(wait_for(&db, true), "garbage past the limit delays writes");
    assert_eq!(db.stats().write_stalls, 1);
    // Delayed, not refused: writes go on and read back.
    db.put(b"key0", b"still written").unwrap();
    assert_eq!(
        db.get(b"key0").unwrap().as_deref(),
        Some(&b"still written"[..])
    );
    db.compact().unwrap();
    assert!(wait_for(&db, false), "compaction caught up");
    let st = db.stats();
    assert_eq!(st.write_stalls, 1);
    assert!(st.dead_bytes < st.live_bytes + (1 << 20), "{st:?}");
    assert_eq!(db.get(b"key1").unwrap().unwrap()[0], 4);
}
