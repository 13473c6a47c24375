//! Segmented values (`src/segmented.rs`): a value written in ranges is kept
//! as fixed-size segments once it is longer than `SEGMENT_ABOVE`, and to
//! every other call it stays a plain value. These tests hold it to a model
//! (a `Vec<u8>` per key) through conversion, growth, overwrites,
//! compaction, reopening and a crash in the middle of a conversion.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use basalt_engine::{
    Db, Error, KeyKind, ManualClock, Options, SyncPolicy, SEGMENTED_TAG, SEGMENT_ABOVE, SEGMENT_LEN,
};

fn opts(clock: &Arc<ManualClock>) -> Options {
    Options::default()
        .shards(2)
        .max_file_size(64 << 10)
        .sync(SyncPolicy::Never)
        .background_compaction(false)
        .active_expiry(false)
        // Plain values are compressed; segments never are (their length is
        // read off the record's).
        .compress_above(Some(100))
        .clock(clock.clone())
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn check_all(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, what: &str) {
    for (k, v) in model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "{what}: get {k:?}");
        assert_eq!(
            db.value_len(k).unwrap(),
            Some(v.len() as u64),
            "{what}: len"
        );
        assert!(
            matches!(db.meta(k).unwrap().kind, KeyKind::Value { .. }),
            "{what}: a value"
        );
    }
}

#[test]
fn ranged_writes_match_a_model_through_conversion_compaction_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let keys: Vec<Vec<u8>> = (0..4).map(|i| format!("bits{i}").into_bytes()).collect();
    for step in 0..1500 {
        let k = &keys[rng.below(keys.len() as u64) as usize];
        match rng.below(20) {
            // Mostly small ranged writes anywhere up to 3x the threshold.
            0..=13 => {
                let offset = rng.below(3 * SEGMENT_ABOVE as u64 + 700);
                let len = match rng.below(4) {
                    0 => 1 + rng.below(2 * SEGMENT_LEN as u64) as usize,
                    _ => 1 + rng.below(9) as usize,
                };
                let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                let new_len = db.write_range(k, offset, &data).unwrap();
                let v = model.entry(k.clone()).or_default();
                let end = offset as usize + len;
                if v.len() < end {
                    v.resize(end, 0);
                }
                v[offset as usize..end].copy_from_slice(&data);
                assert_eq!(new_len, v.len() as u64, "step {step}");
            }
            14..=16 => {
                let offset = rng.below(4 * SEGMENT_ABOVE as u64);
                let len = rng.below(3 * SEGMENT_LEN as u64) as usize;
                let got = db.read_range(k, offset, len).unwrap();
                let want = model.get(k).map(|v| {
                    let s = (offset as usize).min(v.len());
                    let e = (s + len).min(v.len());
                    (v[s..e].to_vec(), v.len() as u64)
                });
                assert_eq!(got, want, "step {step}: read_range {offset}+{len}");
            }
            17 => {
                // A plain put replaces whatever the key held.
                let v: Vec<u8> = (0..rng.below(300)).map(|i| i as u8).collect();
                db.put(k, &v).unwrap();
                model.insert(k.clone(), v);
            }
            18 => {
                db.delete(k).unwrap();
                model.remove(k);
            }
            _ => {
                // An empty write creates nothing and changes nothing.
                let before = db.get(k).unwrap();
                db.write_range(k, rng.below(10_000), b"").unwrap();
                assert_eq!(db.get(k).unwrap(), before);
            }
        }
    }
    assert!(
        model.values().any(|v| v.len() > SEGMENT_ABOVE),
        "the run made segmented values"
    );
    check_all(&db, &model, "live");
    db.compact().unwrap();
    check_all(&db, &model, "after compaction");
    db.close().unwrap();
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    check_all(&db, &model, "reopened from hints");
    db.compact().unwrap();
    db.close().unwrap();
    // Without hint files: a scan of the data files.
    for e in walk(dir.path()) {
        if e.extension().is_some_and(|x| x == "hint") {
            std::fs::remove_file(e).unwrap();
        }
    }
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    check_all(&db, &model, "reopened by scan");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_segmented_value_is_a_value_to_every_other_call_and_keeps_its_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    db.put_with_expiry(b"k", &[7u8; 100], Some(50_000)).unwrap();
    // Growing past the threshold turns it into segments, keeping the TTL.
    let n = db
        .write_range(b"k", 10 * SEGMENT_LEN as u64, b"xyz")
        .unwrap();
    assert_eq!(n, 10 * SEGMENT_LEN as u64 + 3);
    assert_eq!(db.expires_at(b"k"), Some(50_000));
    let v1 = db.version(b"k");
    db.write_range(b"k", 5, b"!").unwrap();
    assert!(db.version(b"k") > v1, "a ranged write is a new version");
    assert_eq!(db.expires_at(b"k"), Some(50_000));
    let v = db.get(b"k").unwrap().unwrap();
    assert_eq!(&v[..6], &[7, 7, 7, 7, 7, b'!']);
    // A length running past any value reads to the end.
    let (tail, total) = db.read_range(b"k", 511, usize::MAX).unwrap().unwrap();
    assert_eq!((tail.len() as u64, total), (n - 511, n));
    assert_eq!(&tail[..], &v[511..]);
    assert_eq!(&v[v.len() - 3..], b"xyz");
    // Map calls see a value.
    let wrong = |r: Result<_, Error>| matches!(r, Err(Error::WrongKind { .. }));
    assert!(wrong(db.get_field(b"k", &0u64.to_be_bytes()).map(drop)));
    assert!(wrong(db.put_field(b"k", b"f", b"v").map(drop)));
    assert!(wrong(db.fields(b"k").map(drop)));
    assert!(wrong(
        db.put_field_tagged(b"new", SEGMENTED_TAG, b"f", b"v")
            .map(drop)
    ));
    // Ranged writes refuse a map.
    db.put_field(b"map", b"f", b"v").unwrap();
    assert!(wrong(db.write_range(b"map", 0, b"x").map(drop)));
    assert!(wrong(db.read_range(b"map", 0, 1).map(drop)));
    // PERSIST, then expiry by time.
    assert!(db.persist(b"k").unwrap());
    assert_eq!(db.expires_at(b"k"), None);
    db.expire(b"k", 60_000).unwrap();
    clock.set(60_001);
    assert_eq!(db.get(b"k").unwrap(), None);
    assert_eq!(db.value_len(b"k").unwrap(), None);
    // A ranged write to an expired key starts from nothing.
    assert_eq!(db.write_range(b"k", 2, b"a").unwrap(), 3);
    assert_eq!(db.get(b"k").unwrap().unwrap(), b"\0\0a");
}

/// Copies a database directory as a crash would leave it (no LOCK).
fn snapshot(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            snapshot(&e.path(), &to);
        } else if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}

#[test]
fn a_conversion_torn_at_any_byte_opens_as_the_old_value_or_the_new_one() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let clock = Arc::new(ManualClock::new(1_000));
    let one_shard = || opts(&clock).shards(1).max_file_size(1 << 20);
    let db = Db::open(&live, one_shard()).unwrap();
    let old: Vec<u8> = (0..3 * SEGMENT_ABOVE).map(|i| (i % 251) as u8).collect();
    db.put(b"k", &old).unwrap();
    // The active file is preallocated (appends go through a map), so its
    // records end where the index says, not at the file's length; a torn
    // write is zeros from the cut on, as recovery reads a zero tail.
    let active_end = |db: &Db| {
        let f = db.stats().files.into_iter().find(|f| f.active).unwrap();
        (f.id, f.total_bytes)
    };
    let (id, before) = active_end(&db);
    db.write_range(b"k", 100, b"NEW").unwrap();
    let (id_after, after) = active_end(&db);
    assert_eq!(id, id_after, "one file");
    assert!(
        after > before + old.len() as u64,
        "the segments were appended"
    );
    let mut new = old.clone();
    new[100..103].copy_from_slice(b"NEW");
    snapshot(&live, &tmp.path().join("after"));
    drop(db);
    let data_file = walk(&tmp.path().join("after"))
        .into_iter()
        .find(|p| {
            p.extension().is_some_and(|x| x == "data")
                && p.file_stem()
                    .and_then(|s| s.to_str())
                    .and_then(|s| s.parse::<u32>().ok())
                    == Some(id)
        })
        .unwrap();
    let rel = data_file
        .strip_prefix(tmp.path().join("after"))
        .unwrap()
        .to_path_buf();
    let mut cuts = 0;
    let (mut saw_new, mut saw_old) = (false, false);
    for cut in (before..after).step_by(211).chain([after]) {
        let dir = tmp.path().join(format!("cut-{cut}"));
        snapshot(&tmp.path().join("after"), &dir);
        let mut bytes = std::fs::read(dir.join(&rel)).unwrap();
        bytes[cut as usize..after as usize].fill(0);
        std::fs::write(dir.join(&rel), &bytes).unwrap();
        let db = Db::open(&dir, one_shard()).unwrap();
        let got = db.get(b"k").unwrap().unwrap();
        assert!(
            got == old || got == new,
            "cut at {cut}: a mix of old and new"
        );
        saw_new |= got == new;
        saw_old |= got == old;
        cuts += 1;
    }
    assert!(cuts > 10 && saw_new && saw_old, "{cuts} cuts");
}

#[test]
fn a_value_turned_into_segments_again_does_not_bring_back_an_older_life() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Db::open(dir.path(), opts(&clock).shards(1)).unwrap();
    // A segmented life with a TTL, then a plain value, then segments again.
    db.write_range(b"k", 0, &[1u8; 10_240]).unwrap();
    db.expire(b"k", 5_000).unwrap();
    db.put(b"k", b"x").unwrap();
    db.write_range(b"k", 0, &[2u8; 5_000]).unwrap();
    assert_eq!(db.expires_at(b"k"), None);
    let want = vec![2u8; 5_000];
    assert_eq!(db.get(b"k").unwrap().unwrap(), want);
    db.compact().unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), opts(&clock).shards(1)).unwrap();
    assert_eq!(db.expires_at(b"k"), None, "the old expiry stays dead");
    assert_eq!(db.value_len(b"k").unwrap(), Some(5_000));
    assert_eq!(db.get(b"k").unwrap().unwrap(), want, "no old segment back");
    clock.set(6_000);
    assert_eq!(db.get(b"k").unwrap().unwrap(), want, "not expired");
}

#[test]
fn a_reader_never_sees_a_key_vanish_while_it_changes_between_plain_and_segmented() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Arc::new(Db::open(dir.path(), opts(&clock)).unwrap());
    db.put(b"k", b"x").unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rounds = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && rounds < 20_000 {
                db.write_range(b"k", 0, &[3u8; 5_000]).unwrap();
                db.put(b"k", b"x").unwrap();
                rounds += 1;
            }
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(800);
    let mut reads = 0;
    while std::time::Instant::now() < deadline {
        let v = db.get(b"k").unwrap();
        assert!(v.is_some(), "read {reads}: the key vanished");
        let n = v.unwrap().len();
        assert!(n == 1 || n == 5_000, "a torn value of {n} bytes");
        reads += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert!(reads > 100);
}

#[test]
fn try_write_range_asks_for_a_batch_instead_of_opening_one() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Db::open(dir.path(), opts(&clock)).unwrap();
    // One record: written.
    assert_eq!(db.try_write_range(b"k", 0, b"abc").unwrap(), Some(3));
    // Turning it into segments takes several records: refused, unchanged.
    assert_eq!(db.try_write_range(b"k", 9_000, b"z").unwrap(), None);
    assert_eq!(db.get(b"k").unwrap().unwrap(), b"abc");
    // Inside a batch it runs.
    let b = db.batch();
    assert_eq!(db.try_write_range(b"k", 9_000, b"z").unwrap(), Some(9_001));
    b.commit().unwrap();
    // A patch of one segment needs no batch.
    assert_eq!(db.try_write_range(b"k", 10, b"q").unwrap(), Some(9_001));
    assert_eq!(&db.read_range(b"k", 9, 3).unwrap().unwrap().0, b"\0q\0");
}
