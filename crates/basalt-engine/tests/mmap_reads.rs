//! Reads through memory maps return exactly what was written: from the
//! active file right after the write (same thread and other threads), after
//! rotations, after compaction deleted the files they were in, after reopen,
//! and for records too big for the map (read with `pread` instead).
//!
//! The real file system maps every data file; the fault-injection tests
//! cover the `pread` path of a VFS that does not map, `crash_recovery.rs`
//! reads and appends after a torn tail was cut off (before mapping), and
//! `concurrent_compaction.rs` reads while compaction deletes files.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use basalt_engine::{Db, Options, SyncPolicy};

fn opts() -> Options {
    Options::default()
        .shards(2)
        .max_file_size(8 << 10)
        .background_compaction(false)
        .active_expiry(false)
        .sync(SyncPolicy::Never)
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:08}").into_bytes()
}

/// A value that names its key and generation, with a length that varies so
/// records straddle page and file boundaries.
fn value(i: u64, gen: u64) -> Vec<u8> {
    let mut v = format!("v{gen}-{i}-").into_bytes();
    let n = 20 + ((i * 37 + gen * 11) % 300) as usize;
    v.extend((0..n).map(|j| (i as usize + j * 7 + gen as usize) as u8));
    v
}

fn data_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flat_map(|shard| {
            std::fs::read_dir(shard.unwrap().path())
                .into_iter()
                .flatten()
        })
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".data")
        })
        .count()
}

#[test]
fn read_right_after_write_across_rotations() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..2_000 {
        db.put(&key(i), &value(i, 0)).unwrap();
        // The record was appended a moment ago to the active file's map.
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
    // Many rotations happened: every sealed file still reads back.
    assert!(db.stats().files.len() > 20);
    for i in 0..2_000 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
}

#[test]
fn other_threads_read_records_the_moment_they_are_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), opts()).unwrap());
    const N: u64 = 6_000;
    // Keys below `done` have been acknowledged by the writer.
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (db, done, stop) = (db.clone(), done.clone(), stop.clone());
            thread::spawn(move || {
                let mut checked = 0u64;
                let mut x = 0x9e37_79b9_7f4a_7c15u64 + t;
                while !stop.load(Ordering::Acquire) {
                    let n = done.load(Ordering::Acquire);
                    if n == 0 {
                        continue;
                    }
                    // The newest key and a random older one.
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    for i in [n - 1, x % n] {
                        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, 0)), "key {i}");
                        checked += 1;
                    }
                }
                checked
            })
        })
        .collect();
    for i in 0..N {
        db.put(&key(i), &value(i, 0)).unwrap();
        done.store(i + 1, Ordering::Release);
    }
    stop.store(true, Ordering::Release);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}

#[test]
fn compaction_outputs_and_deleted_inputs_read_correctly() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for gen in 0..3 {
        for i in 0..1_000 {
            db.put(&key(i), &value(i, gen)).unwrap();
        }
    }
    let before = data_files(dir.path());
    let report = db.compact().unwrap();
    assert!(report.files_compacted > 0);
    assert!(data_files(dir.path()) < before);
    for i in 0..1_000 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, 2)), "key {i}");
    }
    // Writes after compaction land in a fresh active file; both read.
    for i in 0..500 {
        db.put(&key(i), &value(i, 3)).unwrap();
    }
    for i in 0..1_000 {
        let gen = if i < 500 { 3 } else { 2 };
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, gen)), "key {i}");
    }
}

#[test]
fn reads_after_reopen_and_appends_to_the_reopened_active_file() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        for i in 0..1_500 {
            db.put(&key(i), &value(i, 0)).unwrap();
        }
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..1_500 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
    // The reopened active file keeps growing through its map.
    for i in 1_500..1_600 {
        db.put(&key(i), &value(i, 1)).unwrap();
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, 1)), "key {i}");
    }
    db.close().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..1_600 {
        let gen = if i < 1_500 { 0 } else { 1 };
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, gen)), "key {i}");
    }
}

#[test]
fn records_bigger_than_the_map_are_read_with_pread() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts().shards(1)).unwrap();
    // max_file_size is 8 KiB, so the map of each file is 8 KiB: a 20 KiB
    // record sits alone in its file and runs past the map.
    let big: Vec<u8> = (0..20_000u32).map(|i| (i * 31) as u8).collect();
    db.put(b"small-before", b"a").unwrap();
    db.put(b"big", &big).unwrap();
    db.put(b"small-after", b"b").unwrap();
    assert_eq!(db.get(b"big").unwrap(), Some(big.clone()));
    assert_eq!(db.get(b"small-before").unwrap(), Some(b"a".to_vec()));
    assert_eq!(db.get(b"small-after").unwrap(), Some(b"b".to_vec()));
    db.close().unwrap();
    let db = Db::open(dir.path(), opts().shards(1)).unwrap();
    assert_eq!(db.get(b"big").unwrap(), Some(big));
}

#[test]
fn compressed_values_and_map_fields_read_through_maps() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts().compress_above(Some(64))).unwrap();
    let long = b"abcdefgh".repeat(100);
    db.put(b"c", &long).unwrap();
    assert_eq!(db.get(b"c").unwrap(), Some(long.clone()));
    for f in 0..200u32 {
        db.put_field(b"h", &f.to_le_bytes(), &long[..(f as usize % 90) + 1])
            .unwrap();
    }
    assert_eq!(
        db.get_field(b"h", &7u32.to_le_bytes()).unwrap(),
        Some(long[..8].to_vec())
    );
    let mut all = db.fields(b"h").unwrap();
    all.sort();
    assert_eq!(all.len(), 200);
    for (f, v) in all {
        let f = u32::from_le_bytes(f.try_into().unwrap());
        assert_eq!(v, long[..(f as usize % 90) + 1].to_vec());
    }
    // An expiry change rewrites the value from its mapped record.
    assert!(db.expire(b"c", u64::MAX / 2).unwrap());
    assert_eq!(db.get(b"c").unwrap(), Some(long));
}

/// Range reads check records three at a time: every count of fields (whole
/// groups and remainders) comes back in order, and a record damaged on disk
/// in the middle of a group fails the read naming the damage instead of
/// returning its bytes.
#[test]
fn range_reads_of_fields_check_every_record_and_report_damage() {
    let dir = tempfile::tempdir().unwrap();
    let o = opts().shards(1).max_file_size(1 << 20);
    let db = Db::open(dir.path(), o.clone()).unwrap();
    let names: Vec<Vec<u8>> = (0..8u64).map(|i| format!("f{i}").into_bytes()).collect();
    for (i, n) in names.iter().enumerate() {
        let mut v = format!("damage-me-{i}:").into_bytes();
        v.extend(value(i as u64, 1));
        db.put_field(b"map", n, &v).unwrap();
    }
    let expect = |i: usize| {
        let mut v = format!("damage-me-{i}:").into_bytes();
        v.extend(value(i as u64, 1));
        v
    };
    for count in 0..=8 {
        let mut got = Vec::new();
        let n = db
            .fields_with(b"map", &names[..count], |i, v| got.push((i, v.to_vec())))
            .unwrap();
        assert_eq!(n, Some(count));
        let want: Vec<(usize, Vec<u8>)> = (0..count).map(|i| (i, expect(i))).collect();
        assert_eq!(got, want, "{count} fields");
    }
    // Flip one byte of field 4's value in the data file (the map sees it).
    let shard = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap();
    let file = std::fs::read_dir(&shard)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "data"))
        .unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes
        .windows(12)
        .position(|w| w == b"damage-me-4:")
        .expect("field 4's value is in the file");
    bytes[at + 3] ^= 0x20;
    use std::os::unix::fs::FileExt;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .write_all_at(&bytes[at + 3..at + 4], (at + 3) as u64)
        .unwrap();
    let r = db.fields_with(b"map", &names, |_, _| ());
    assert!(
        matches!(r, Err(basalt_engine::Error::Corrupt { .. })),
        "a damaged record must fail the read: {r:?}"
    );
    // Fields outside the damaged one still read.
    let mut got = 0;
    db.fields_with(b"map", &names[..3], |_, _| got += 1)
        .unwrap();
    assert_eq!(got, 3);
}
