//! When a sealed log file gets its hint file (`Options::hint_delay`): the
//! background thread writes it once the file has been sealed that long;
//! `flush` and `close` write every pending one at once; a file compacted
//! away before its hint was due never gets one; and a sealed file without a
//! hint still opens with all its keys (it is scanned).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use basalt_engine::{Db, Options, SyncPolicy};

fn opts(hint_delay: Duration) -> Options {
    Options::default()
        .shards(1)
        .max_file_size(64 << 10)
        .sync(SyncPolicy::Never)
        .background_compaction(false)
        .active_expiry(false)
        .hint_delay(hint_delay)
}

fn with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir.join("shard-0000"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:06}").into_bytes()
}

/// Writes keys 0..n (round `r` in each value) until at least `files` data
/// files exist, and returns n.
fn fill_until(db: &Db, dir: &Path, files: usize, r: u32) -> u32 {
    let mut n = 0;
    while with_ext(dir, "data").len() < files {
        assert!(n < 100_000, "the files never sealed");
        db.put(&key(n), format!("{r}-{}", "v".repeat(200)).as_bytes())
            .unwrap();
        n += 1;
    }
    n
}

fn check(db: &Db, n: u32, r: u32) {
    for i in 0..n {
        let v = db.get(&key(i)).unwrap().expect("key present");
        assert!(v.starts_with(format!("{r}-").as_bytes()), "key {i}");
    }
}

#[test]
fn the_background_thread_writes_a_sealed_files_hint_once_it_is_due() {
    let dir = tempfile::tempdir().unwrap();
    let delay = Duration::from_millis(1500);
    let start = Instant::now();
    let db = Db::open(dir.path(), opts(delay)).unwrap();
    let n = fill_until(&db, dir.path(), 2, 0);
    assert!(
        with_ext(dir.path(), "hint").is_empty(),
        "no hint right after the seal"
    );
    let give_up = Instant::now() + Duration::from_secs(20);
    while with_ext(dir.path(), "hint").is_empty() {
        assert!(Instant::now() < give_up, "the hint was never written");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        start.elapsed() >= delay,
        "written {:?} after the first write, before the delay",
        start.elapsed()
    );
    let first = &with_ext(dir.path(), "data")[0];
    assert!(
        first.with_extension("hint").exists(),
        "the sealed file's hint"
    );
    drop(db);
    let db = Db::open(dir.path(), opts(delay)).unwrap();
    check(&db, n, 0);
}

#[test]
fn flush_writes_the_hints_that_are_not_due_yet() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(Duration::from_secs(3600))).unwrap();
    let n = fill_until(&db, dir.path(), 3, 0);
    assert!(with_ext(dir.path(), "hint").is_empty());
    db.flush().unwrap();
    let data = with_ext(dir.path(), "data");
    let hints = with_ext(dir.path(), "hint");
    assert_eq!(
        hints.len(),
        data.len() - 1,
        "every sealed file, not the active one"
    );
    for d in &data[..data.len() - 1] {
        assert!(d.with_extension("hint").exists(), "{d:?}");
    }
    db.close().unwrap();
    let db = Db::open(dir.path(), opts(Duration::from_secs(3600))).unwrap();
    check(&db, n, 0);
}

#[test]
fn a_file_compacted_away_before_its_hint_is_due_never_gets_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(Duration::from_secs(3600))).unwrap();
    let n = fill_until(&db, dir.path(), 2, 0);
    let first = with_ext(dir.path(), "data")[0].clone();
    // Every key overwritten: the first file is all garbage.
    for i in 0..n {
        db.put(&key(i), format!("1-{}", "w".repeat(200)).as_bytes())
            .unwrap();
    }
    let report = db.compact().unwrap();
    assert!(report.files_compacted >= 1);
    assert!(!first.exists(), "the garbage file was compacted away");
    assert!(
        !first.with_extension("hint").exists(),
        "and never got a hint"
    );
    db.flush().unwrap();
    assert!(!first.with_extension("hint").exists());
    check(&db, n, 1);
    db.close().unwrap();
    let db = Db::open(dir.path(), opts(Duration::from_secs(3600))).unwrap();
    check(&db, n, 1);
}

#[test]
fn a_crash_before_a_hint_is_due_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(Duration::from_secs(3600))).unwrap();
    let n = fill_until(&db, dir.path(), 4, 0);
    // Dropping without close stops the threads but writes no hint for the
    // sealed files (the state a kill -9 leaves, as far as hints go).
    std::mem::forget(db);
    assert!(with_ext(dir.path(), "hint").is_empty());
    // The lock is the dead opener's; a second opener in this process would
    // be refused, so copy the files as a crash would leave them.
    let copy = tempfile::tempdir().unwrap();
    let shard = copy.path().join("shard-0000");
    fs::create_dir_all(&shard).unwrap();
    for e in fs::read_dir(dir.path().join("shard-0000")).unwrap() {
        let p = e.unwrap().path();
        fs::copy(&p, shard.join(p.file_name().unwrap())).unwrap();
    }
    for e in fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() && p.file_name().unwrap() != "LOCK" {
            fs::copy(&p, copy.path().join(p.file_name().unwrap())).unwrap();
        }
    }
    let db = Db::open(copy.path(), opts(Duration::from_secs(3600))).unwrap();
    check(&db, n, 0);
}
