//! Recovery: torn tails are cut, damage elsewhere is refused with the file and
//! offset, bad or missing hint files fall back to scanning, and the directory
//! lock keeps a second opener out.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use basalt_engine::{Db, Error, Options, SyncPolicy};

fn opts() -> Options {
    Options::default()
        .shards(1)
        .sync(SyncPolicy::Never)
        .background_compaction(false)
        .active_expiry(false)
}

fn shard_dir(dir: &Path) -> PathBuf {
    dir.join("shard-0000")
}

fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(shard_dir(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

/// Closes cleanly, then removes the active file's hint, which leaves the
/// directory exactly as a crash after the last write would.
fn close_as_if_crashed(db: Db) {
    let dir = db.dir().to_path_buf();
    db.close().unwrap();
    let last = files_with_ext(&dir, "data").pop().unwrap();
    let _ = fs::remove_file(last.with_extension("hint"));
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else if e.file_name() != "LOCK" {
            fs::copy(e.path(), dest).unwrap();
        }
    }
}

#[test]
fn cutting_the_last_record_at_every_byte_keeps_earlier_records_and_appends_work() {
    let base = tempfile::tempdir().unwrap();
    let src = base.path().join("src");
    let db = Db::open(&src, opts()).unwrap();
    db.put(b"one", b"first").unwrap();
    db.put_field(b"map", b"f", b"field value").unwrap();
    // Where the last record will start: the active file's real length (on
    // disk it is longer while open, by the space reserved for appends).
    let before_last = db
        .stats()
        .files
        .iter()
        .find(|f| f.active)
        .unwrap()
        .total_bytes;
    db.put(b"last", &[7u8; 50]).unwrap();
    close_as_if_crashed(db);
    let data = files_with_ext(&src, "data").pop().unwrap();
    let full = fs::metadata(&data).unwrap().len();
    assert!(full > before_last);

    for cut in before_last..full {
        let dir = base.path().join(format!("cut{cut}"));
        copy_dir(&src, &dir);
        let f = OpenOptions::new()
            .write(true)
            .open(files_with_ext(&dir, "data").pop().unwrap())
            .unwrap();
        f.set_len(cut).unwrap();
        drop(f);
        let db = Db::open(&dir, opts()).unwrap_or_else(|e| panic!("open after cut at {cut}: {e}"));
        assert_eq!(
            db.get(b"one").unwrap().as_deref(),
            Some(&b"first"[..]),
            "cut {cut}"
        );
        assert_eq!(
            db.get_field(b"map", b"f").unwrap().as_deref(),
            Some(&b"field value"[..])
        );
        assert_eq!(
            db.get(b"last").unwrap(),
            None,
            "torn record dropped at cut {cut}"
        );
        db.put(b"after", b"works").unwrap();
        close_as_if_crashed(db);
        let db = Db::open(&dir, opts()).unwrap();
        assert_eq!(db.get(b"after").unwrap().as_deref(), Some(&b"works"[..]));
        assert_eq!(db.get(b"one").unwrap().as_deref(), Some(&b"first"[..]));
        db.close().unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }
}

fn append_to_active(dir: &Path, bytes: &[u8]) {
    let data = files_with_ext(dir, "data").pop().unwrap();
    OpenOptions::new()
        .append(true)
        .open(data)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

#[test]
fn trailing_zeros_and_garbage_after_the_last_record_are_cut() {
    for (name, tail) in [
        ("zeros", vec![0u8; 4096]),
        (
            "garbage",
            (0..3000u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                .collect(),
        ),
        ("half a header", vec![0xAB; 20]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts()).unwrap();
        for i in 0..10 {
            db.put(format!("k{i}").as_bytes(), format!("v{i}").as_bytes())
                .unwrap();
        }
        close_as_if_crashed(db);
        let data = files_with_ext(dir.path(), "data").pop().unwrap();
        let good_len = fs::metadata(&data).unwrap().len();
        append_to_active(dir.path(), &tail);
        let db = Db::open(dir.path(), opts()).unwrap();
        for i in 0..10 {
            assert_eq!(
                db.get(format!("k{i}").as_bytes()).unwrap().unwrap(),
                format!("v{i}").as_bytes(),
                "{name}"
            );
        }
        assert_eq!(
            fs::metadata(&data).unwrap().len(),
            good_len,
            "{name}: tail cut back to the last good record"
        );
        db.put(b"new", b"value").unwrap();
        db.close().unwrap();
        let db = Db::open(dir.path(), opts()).unwrap();
        assert_eq!(
            db.get(b"new").unwrap().as_deref(),
            Some(&b"value"[..]),
            "{name}"
        );
    }
}

fn flip_byte(path: &Path, offset: u64) {
    let mut b = fs::read(path).unwrap();
    b[offset as usize] ^= 0x40;
    fs::write(path, b).unwrap();
}

/// Writes enough to seal at least one file (max file size 4 KiB).
fn db_with_sealed_file(dir: &Path) -> Db {
    let db = Db::open(dir, opts().max_file_size(4096)).unwrap();
    for i in 0..100 {
        db.put(format!("key{i:03}").as_bytes(), &[b'v'; 80])
            .unwrap();
    }
    assert!(files_with_ext(dir, "data").len() >= 2);
    db
}

#[test]
fn a_flipped_byte_in_a_sealed_file_is_an_error_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_with_sealed_file(dir.path());
    db.close().unwrap();
    let sealed = files_with_ext(dir.path(), "data")[0].clone();
    // Without a hint, open scans the file and finds the damage.
    fs::remove_file(sealed.with_extension("hint")).unwrap();
    flip_byte(&sealed, 1000);
    match Db::open(dir.path(), opts()) {
        Err(Error::Corrupt { path, offset, .. }) => {
            assert_eq!(path, sealed);
            assert!(
                (32..=1000).contains(&offset),
                "offset {offset} is the damaged record's"
            );
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn a_flipped_byte_under_a_valid_hint_is_caught_when_the_record_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_with_sealed_file(dir.path());
    db.close().unwrap();
    let sealed = files_with_ext(dir.path(), "data")[0].clone();
    // The first record's value starts after the 32-byte file header, the
    // 36-byte record header and the 6-byte key.
    flip_byte(&sealed, 32 + 36 + 6 + 10);
    let db = Db::open(dir.path(), opts()).unwrap();
    match db.get(b"key000") {
        Err(Error::Corrupt { path, offset, .. }) => {
            assert_eq!(path, sealed);
            assert_eq!(offset, 32);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(
        db.get(b"key099").unwrap().unwrap(),
        vec![b'v'; 80],
        "other records still read"
    );
}

#[test]
fn damage_in_the_middle_of_the_active_file_is_an_error_not_a_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..20 {
        db.put(format!("k{i}").as_bytes(), &[b'v'; 40]).unwrap();
    }
    close_as_if_crashed(db);
    let data = files_with_ext(dir.path(), "data").pop().unwrap();
    let len_before = fs::metadata(&data).unwrap().len();
    flip_byte(&data, 200);
    let err = Db::open(dir.path(), opts()).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("good record follows"), "{err}");
    assert_eq!(
        fs::metadata(&data).unwrap().len(),
        len_before,
        "nothing was cut"
    );
}

#[test]
fn missing_or_damaged_hint_files_fall_back_to_scanning() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_with_sealed_file(dir.path());
    db.put_field(b"m", b"a", b"1").unwrap();
    db.expire(b"key050", u64::MAX / 2).unwrap();
    let v = db.version(b"key050");
    db.close().unwrap();
    let hints = files_with_ext(dir.path(), "hint");
    assert!(
        hints.len() >= 2,
        "sealed files and the closed active file have hints"
    );
    fs::remove_file(&hints[0]).unwrap();
    let len = fs::metadata(&hints[1]).unwrap().len();
    flip_byte(&hints[1], len / 2);
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..100 {
        assert_eq!(
            db.get(format!("key{i:03}").as_bytes()).unwrap().unwrap(),
            vec![b'v'; 80]
        );
    }
    assert_eq!(
        db.get_field(b"m", b"a").unwrap().as_deref(),
        Some(&b"1"[..])
    );
    assert_eq!(db.version(b"key050"), v, "versions survive");
    assert_eq!(
        db.expires_at(b"key050"),
        Some(u64::MAX / 2),
        "expiry survives"
    );
    db.close().unwrap();
    // The damaged hint was replaced or removed; the next open is clean too.
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.len(), 101);
}

#[test]
fn a_second_open_of_the_same_directory_fails_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let err = Db::open(dir.path(), opts()).unwrap_err();
    assert!(matches!(err, Error::Locked { .. }));
    assert!(err.to_string().contains("locked"), "{err}");
    db.close().unwrap();
    Db::open(dir.path(), opts()).expect("the lock is released on close");
}

#[test]
fn the_shard_count_recorded_in_the_directory_wins() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts().shards(4)).unwrap();
    for i in 0..50 {
        db.put(format!("k{i}").as_bytes(), b"v").unwrap();
    }
    db.close().unwrap();
    let db = Db::open(dir.path(), opts().shards(16)).unwrap();
    for i in 0..50 {
        assert!(db.exists(format!("k{i}").as_bytes()));
    }
}
