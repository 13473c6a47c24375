//! Background compaction honours `compaction_rate_mb`: with no writer
//! appending (whose bytes raise the allowance), it cannot read faster than
//! the rate, however it batches its looks at the clock.

use std::time::{Duration, Instant};

use basalt_engine::{Db, Options, SyncPolicy};

#[test]
fn background_compaction_reads_no_faster_than_its_rate() {
    let dir = tempfile::tempdir().unwrap();
    let rate_mb = 2;
    let opts = |background| {
        Options::default()
            .shards(1)
            .max_file_size(1 << 20)
            .sync(SyncPolicy::Never)
            .compaction_rate_mb(rate_mb)
            .background_compaction(background)
    };
    // About 6 MiB of small records (a queue's size), then every key
    // overwritten: the first files are all garbage. Written with no
    // background compaction: while writers append, compaction may also
    // read twice what they append (it keeps up with overwrites), so the
    // base rate is measured with no writer.
    {
        let db = Db::open(dir.path(), opts(false)).unwrap();
        let value = [7u8; 100];
        let keys = 6 * (1 << 20) / 130;
        for _ in 0..2 {
            for i in 0..keys {
                db.put(format!("key-{i:08}").as_bytes(), &value).unwrap();
            }
        }
        db.close().unwrap();
    }
    // No compaction can have started before this instant.
    let started = Instant::now();
    let db = Db::open(dir.path(), opts(true)).unwrap();
    let deadline = started + Duration::from_secs(60);
    // Bytes read are counted as each compaction pass finishes; wait for
    // most of the garbage (passes come at most once a second).
    let want = 5u64 << 20;
    while db.stats().compaction_bytes_read < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let read = db.stats().compaction_bytes_read as f64;
    assert!(
        read >= want as f64,
        "compaction read only {read} bytes in 60 s"
    );
    // Each pass may run ahead by one 256 KiB step plus 2 ms before the
    // limit makes it sleep; at most one pass starts per second.
    let rate = (rate_mb << 20) as f64;
    let allowed = elapsed * rate + (elapsed + 2.0) * 0.3 * (1 << 20) as f64;
    assert!(
        read <= allowed,
        "read {read} bytes in {elapsed:.2} s, more than {rate_mb} MiB/s allows"
    );
    db.close().unwrap();
}
