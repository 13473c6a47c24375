//! `check` and `repair` on real directories: clean, torn tail, flipped bytes
//! in sealed files (record body and record header), bad, mismatching, missing
//! and orphan hints, and a directory held by an open database.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use basalt_engine::format::{self, RecordHeader, FILE_HEADER_LEN};
use basalt_engine::{check, repair, CheckOptions, DamageKind, Db, Error, Options, SyncPolicy};

fn opts() -> Options {
    Options::default()
        .shards(1)
        .max_file_size(4096)
        .sync(SyncPolicy::Never)
        .background_compaction(false)
        .active_expiry(false)
}

fn shard(dir: &Path) -> PathBuf {
    dir.join("shard-0000")
}

fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(shard(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

fn value(i: usize) -> Vec<u8> {
    format!("value-{i}-{}", "x".repeat(90)).into_bytes()
}

/// 60 keys of ~100 bytes in 4 KiB files: several sealed files with hints
/// and an active file, closed cleanly.
fn populated() -> (tempfile::TempDir, PathBuf) {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("db");
    let db = Db::open(&dir, opts()).unwrap();
    for i in 0..60 {
        db.put(format!("key{i:02}").as_bytes(), &value(i)).unwrap();
    }
    db.close().unwrap();
    assert!(files_with_ext(&dir, "data").len() >= 3);
    (base, dir)
}

/// (offset, length, key) of every record of a data file.
fn records(path: &Path) -> Vec<(u64, u64, Vec<u8>)> {
    let b = fs::read(path).unwrap();
    let mut off = FILE_HEADER_LEN;
    let mut out = Vec::new();
    while off < b.len() {
        let (_, h) = RecordHeader::parse(&b[off..]).unwrap();
        let n = h.record_len() as usize;
        let k = off + format::RECORD_HEADER_LEN;
        out.push((off as u64, n as u64, b[k..k + h.key_len as usize].to_vec()));
        off += n;
    }
    out
}

fn flip(path: &Path, at: u64) {
    let mut b = fs::read(path).unwrap();
    b[at as usize] ^= 0x5a;
    fs::write(path, b).unwrap();
}

/// Every key of `populated` except `lost` reads back its value.
fn assert_all_but(dir: &Path, lost: &[&[u8]]) {
    let db = Db::open(dir, opts()).unwrap();
    for i in 0..60 {
        let k = format!("key{i:02}");
        let got = db.get(k.as_bytes()).unwrap();
        if lost.contains(&k.as_bytes()) {
            assert_eq!(got, None, "{k} was dropped");
        } else {
            assert_eq!(got, Some(value(i)), "{k}");
        }
    }
    db.close().unwrap();
}

#[test]
fn a_clean_directory_checks_clean_with_live_bytes_as_open_counts_them() {
    let (_base, dir) = populated();
    // Overwrites and a deletion leave dead bytes behind.
    let db = Db::open(&dir, opts()).unwrap();
    for i in 0..10 {
        db.put(format!("key{i:02}").as_bytes(), &value(i)).unwrap();
    }
    db.delete(b"key59").unwrap();
    db.close().unwrap();
    let db = Db::open(&dir, opts()).unwrap();
    let stats = db.stats();
    db.close().unwrap();

    let report = check(&dir, &CheckOptions::default()).unwrap();
    assert!(report.is_clean());
    assert_eq!(report.damage, vec![], "{:#?}", report.damage);
    assert_eq!(report.shards, 1);
    assert_eq!(report.files.len(), stats.files.len());
    for f in &report.files {
        let s = stats.files.iter().find(|s| s.id == f.id).unwrap();
        assert_eq!(f.live_bytes, s.live_bytes, "file {}", f.id);
        assert_eq!(f.len, s.total_bytes, "file {}", f.id);
        assert_eq!(f.live_bytes + f.dead_bytes + FILE_HEADER_LEN as u64, f.len);
    }
    let records: u64 = report.files.iter().map(|f| f.records).sum();
    assert_eq!(records, 60 + 10 + 1);
    assert!(report.files.iter().map(|f| f.dead_bytes).sum::<u64>() > 0);
    // Checking changes nothing, so a second check agrees.
    assert_eq!(
        check(&dir, &CheckOptions::default()).unwrap().files,
        report.files
    );
}

#[test]
fn a_torn_tail_of_the_newest_file_is_reported_but_not_an_error() {
    let (_base, dir) = populated();
    let last = files_with_ext(&dir, "data").pop().unwrap();
    let _ = fs::remove_file(last.with_extension("hint"));
    let recs = records(&last);
    let (off, len, key) = recs.last().unwrap().clone();
    let f = fs::OpenOptions::new().write(true).open(&last).unwrap();
    f.set_len(off + len - 7).unwrap();

    let report = check(&dir, &CheckOptions::default()).unwrap();
    assert!(report.is_clean(), "{:#?}", report.damage);
    assert_eq!(report.damage.len(), 1, "{:#?}", report.damage);
    let d = &report.damage[0];
    assert_eq!(
        (d.kind, &d.path, d.offset, d.len),
        (DamageKind::TornTail, &last, off, len - 7)
    );
    assert_eq!(d.key.as_deref(), Some(&key[..]));

    let rep = repair(&dir, &CheckOptions::default()).unwrap();
    assert_eq!(rep.dropped.len(), 1);
    assert_eq!(rep.dropped[0].offset, off);
    assert_eq!(fs::metadata(&last).unwrap().len(), off);
    let k = String::from_utf8(key).unwrap();
    assert_all_but(&dir, &[k.as_bytes()]);
}

#[test]
fn a_flipped_byte_in_a_sealed_file_is_an_error_and_repair_drops_exactly_that_record() {
    let (_base, dir) = populated();
    let first = files_with_ext(&dir, "data")[0].clone();
    let recs = records(&first);
    let (off, len, key) = recs[3].clone();
    // A byte of the value: the header still frames the record.
    flip(&first, off + len - 2);

    let report = check(&dir, &CheckOptions::default()).unwrap();
    assert!(!report.is_clean());
    let errors: Vec<_> = report.errors().collect();
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert_eq!(
        (
            errors[0].kind,
            &errors[0].path,
            errors[0].offset,
            errors[0].len
        ),
        (DamageKind::BadRecord, &first, off, len)
    );
    assert_eq!(errors[0].detail, "record checksum mismatch");
    assert_eq!(errors[0].key.as_deref(), Some(&key[..]));
    // The hint still names the lost record.
    assert_eq!(errors[1].kind, DamageKind::HintMismatch);
    // Open trusts the hint and fails only when the record is read.
    let db = Db::open(&dir, opts()).unwrap();
    assert!(matches!(db.get(&key), Err(Error::Corrupt { .. })));
    db.close().unwrap();

    let rep = repair(&dir, &CheckOptions::default()).unwrap();
    assert_eq!(rep.dropped.len(), 1, "{:#?}", rep.dropped);
    let d = &rep.dropped[0];
    assert_eq!((&d.path, d.offset, d.len), (&first, off, len));
    assert_eq!(d.key.as_deref(), Some(&key[..]));
    assert_eq!(rep.rewritten, vec![first.clone()]);
    let again = check(&dir, &CheckOptions::default()).unwrap();
    assert_eq!(again.damage, vec![], "repair leaves a clean directory");
    assert_all_but(&dir, &[&key[..]]);
}

#[test]
fn a_flipped_length_in_a_record_header_resynchronises_at_the_next_record() {
    let (_base, dir) = populated();
    let second = files_with_ext(&dir, "data")[1].clone();
    fs::remove_file(second.with_extension("hint")).unwrap();
    let recs = records(&second);
    let (off, len, key) = recs[5].clone();
    // The value length's low byte: the header parses, its length lies.
    flip(&second, off + 32);

    let report = check(&dir, &CheckOptions::default()).unwrap();
    let errors: Vec<_> = report.errors().collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(
        (errors[0].kind, errors[0].offset, errors[0].len),
        (DamageKind::BadRecord, off, len)
    );
    assert!(
        errors[0].detail.contains("framing lost, resynchronised"),
        "{}",
        errors[0].detail
    );

    let rep = repair(&dir, &CheckOptions::default()).unwrap();
    assert_eq!(rep.dropped.len(), 1);
    assert_eq!((rep.dropped[0].offset, rep.dropped[0].len), (off, len));
    assert!(rep.hints_written.contains(&second.with_extension("hint")));
    assert_eq!(
        check(&dir, &CheckOptions::default()).unwrap().damage,
        vec![]
    );
    assert_all_but(&dir, &[&key[..]]);
}

#[test]
fn a_damaged_hint_is_an_error_and_repair_regenerates_it() {
    let (_base, dir) = populated();
    let hint = files_with_ext(&dir, "hint")[0].clone();
    flip(&hint, 50);
    let report = check(&dir, &CheckOptions::default()).unwrap();
    let errors: Vec<_> = report.errors().collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(
        (errors[0].kind, &errors[0].path),
        (DamageKind::BadHint, &hint)
    );
    assert_eq!(errors[0].detail, "hint entry checksum mismatch at 32");

    let rep = repair(&dir, &CheckOptions::default()).unwrap();
    assert_eq!(rep.dropped, vec![]);
    assert_eq!(rep.removed, vec![hint.clone()]);
    assert_eq!(rep.hints_written, vec![hint.clone()]);
    assert_eq!(
        check(&dir, &CheckOptions::default()).unwrap().damage,
        vec![]
    );
    assert_all_but(&dir, &[]);
}

#[test]
fn a_hint_that_verifies_but_disagrees_with_its_data_file_is_an_error() {
    let (_base, dir) = populated();
    let hint = files_with_ext(&dir, "hint")[0].clone();
    let data = hint.with_extension("data");
    // Re-encode the hint with one entry pointing at the wrong offset.
    let b = fs::read(&hint).unwrap();
    let mut entries = Vec::new();
    format::read_hint_file(&b, fs::metadata(&data).unwrap().len(), |e| {
        entries.push(format::HintEntry {
            seq: e.seq,
            expiry: e.expiry,
            kind: e.kind,
            flags: e.flags,
            tag: e.tag,
            offset: e.offset,
            record_len: e.record_len,
            key: e.key.to_vec(),
            field: e.field.to_vec(),
        })
    })
    .unwrap();
    let real = entries[2].offset;
    entries[2].offset += 1;
    let mut out = b[..FILE_HEADER_LEN].to_vec();
    for e in &entries {
        e.encode_into(&mut out);
    }
    out.extend_from_slice(&format::encode_hint_footer(
        entries.len() as u64,
        fs::metadata(&data).unwrap().len(),
    ));
    fs::write(&hint, out).unwrap();

    let report = check(&dir, &CheckOptions::default()).unwrap();
    let errors: Vec<_> = report.errors().collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(
        (errors[0].kind, &errors[0].path, errors[0].offset),
        (DamageKind::HintMismatch, &hint, real as u64)
    );
    let rep = repair(&dir, &CheckOptions::default()).unwrap();
    assert_eq!(rep.dropped, vec![]);
    assert_eq!(
        check(&dir, &CheckOptions::default()).unwrap().damage,
        vec![]
    );
    assert_all_but(&dir, &[]);
}

#[test]
fn a_missing_hint_is_a_note_and_repair_writes_it() {
    let (_base, dir) = populated();
    let hint = files_with_ext(&dir, "hint")[1].clone();
    fs::remove_file(&hint).unwrap();
    let report = check(&dir, &CheckOptions::default()).unwrap();
    assert!(report.is_clean());
    assert_eq!(report.damage.len(), 1);
    assert_eq!(
        (report.damage[0].kind, &report.damage[0].path),
        (DamageKind::MissingHint, &hint)
    );
    let rep = repair(&dir, &CheckOptions::default()).unwrap();
    assert_eq!(rep.hints_written, vec![hint.clone()]);
    assert_eq!(
        check(&dir, &CheckOptions::default()).unwrap().damage,
        vec![]
    );
    assert_all_but(&dir, &[]);
}

#[test]
fn a_hint_without_its_data_file_is_an_error_and_repair_removes_it() {
    let (_base, dir) = populated();
    let hint = files_with_ext(&dir, "hint")[0].clone();
    let orphan = shard(&dir).join("0000000999.hint");
    fs::copy(&hint, &orphan).unwrap();
    let report = check(&dir, &CheckOptions::default()).unwrap();
    let errors: Vec<_> = report.errors().collect();
    assert_eq!(errors.len(), 1);
    assert_eq!(
        (errors[0].kind, &errors[0].path),
        (DamageKind::OrphanHint, &orphan)
    );
    let rep = repair(&dir, &CheckOptions::default()).unwrap();
    assert_eq!(rep.removed, vec![orphan.clone()]);
    assert!(!orphan.exists());
    assert_all_but(&dir, &[]);
}

#[test]
fn a_bad_file_header_is_an_error_and_repair_keeps_the_records_behind_it() {
    let (_base, dir) = populated();
    let first = files_with_ext(&dir, "data")[0].clone();
    flip(&first, 0);
    let report = check(&dir, &CheckOptions::default()).unwrap();
    let kinds: Vec<_> = report.errors().map(|d| d.kind).collect();
    assert_eq!(
        kinds,
        vec![DamageKind::BadFileHeader],
        "{:#?}",
        report.damage
    );
    assert!(matches!(
        Db::open(&dir, opts()),
        Err(Error::Corrupt { offset: 0, .. })
    ));
    let rep = repair(&dir, &CheckOptions::default()).unwrap();
    assert_eq!(rep.dropped, vec![]);
    assert_eq!(
        check(&dir, &CheckOptions::default()).unwrap().damage,
        vec![]
    );
    assert_all_but(&dir, &[]);
}

#[test]
fn check_refuses_a_directory_an_open_database_holds() {
    let (_base, dir) = populated();
    let db = Db::open(&dir, opts()).unwrap();
    let err = check(&dir, &CheckOptions::default()).unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err}");
    assert!(err.to_string().contains("locked by another process"));
    assert!(matches!(
        repair(&dir, &CheckOptions::default()),
        Err(Error::Locked { .. })
    ));
    db.close().unwrap();
}

#[test]
fn check_of_a_directory_that_is_not_a_database_fails_clearly() {
    let base = tempfile::tempdir().unwrap();
    let err = check(base.path().join("nope"), &CheckOptions::default()).unwrap_err();
    assert!(err.to_string().starts_with("open "), "{err}");
    let err = check(base.path(), &CheckOptions::default()).unwrap_err();
    assert!(err.to_string().contains("BASALT"), "{err}");
}

#[test]
fn progress_reports_every_byte_read() {
    let (_base, dir) = populated();
    let last = Arc::new(AtomicU64::new(0));
    let seen = last.clone();
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    let report = check(
        &dir,
        &CheckOptions::default().progress(move |done, total| {
            assert!(done <= total);
            seen.store(done, Ordering::SeqCst);
            if done == total {
                c.fetch_add(1, Ordering::SeqCst);
            }
        }),
    )
    .unwrap();
    let on_disk: u64 = files_with_ext(&dir, "data")
        .iter()
        .chain(files_with_ext(&dir, "hint").iter())
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(last.load(Ordering::SeqCst), on_disk);
    assert_eq!(report.bytes, on_disk);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn a_damaged_victims_marker_is_an_error_and_repair_removes_it() {
    let (_base, dir) = populated();
    let marker = shard(&dir).join("0000000099.victims");
    let mut b = format::encode_victims(&[1]);
    let last = b.len() - 1;
    b[last] ^= 1;
    fs::write(&marker, b).unwrap();
    let report = check(&dir, &CheckOptions::default()).unwrap();
    let errors: Vec<_> = report.errors().collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(
        (errors[0].kind, &errors[0].path, errors[0].detail.as_str()),
        (
            DamageKind::BadVictims,
            &marker,
            "victims marker checksum mismatch"
        )
    );
    assert!(matches!(Db::open(&dir, opts()), Err(Error::Corrupt { .. })));
    let rep = repair(&dir, &CheckOptions::default()).unwrap();
    assert_eq!(rep.removed, vec![marker.clone()]);
    assert_eq!(rep.dropped, vec![]);
    assert_all_but(&dir, &[]);
}
