//! Background compaction honours `compaction_rate_mb`: it cannot read
//! faster than the rate, however it batches its looks at the clock.

use std::time::{Duration, Instant};

use basalt_engine::{Db, Options, SyncPolicy};

#[test]
fn background_compaction_reads_no_faster_than_its_rate() {
    let dir = tempfile::tempdir().unwrap();
    let rate_mb = 2;
    let db = Db::open(
        dir.path(),
        Options::default()
            .shards(1)
            .max_file_size(1 << 20)
            .sync(SyncPolicy::Never)
            .compaction_rate_mb(rate_mb),
    )
    .unwrap();
    // About 6 MiB of small records (a queue's size), then every key
    // overwritten: the first files are all garbage.
    let value = [7u8; 100];
    let keys = 6 * (1 << 20) / 130;
    for round in 0..2 {
        for i in 0..keys {
            db.put(format!("key-{i:08}").as_bytes(), &value).unwrap();
        }
        if round == 0 {
            db.flush().unwrap();
        }
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    while db.stats().compactions == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = started.elapsed();
    let st = db.stats();
    assert!(st.compactions > 0, "no background compaction within 60 s");
    let read = st.compaction_bytes_read as f64;
    assert!(read > 3.0 * (1 << 20) as f64, "read only {read} bytes");
    // The limit allows a step of 256 KiB plus 2 ms of lead before it sleeps.
    let allowed = elapsed.as_secs_f64() * (rate_mb << 20) as f64 + (1 << 20) as f64;
    assert!(
        read <= allowed,
        "read {read} bytes in {elapsed:?}, more than {rate_mb} MiB/s allows"
    );
    db.close().unwrap();
}
