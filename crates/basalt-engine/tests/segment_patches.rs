//! Patch records (`src/segmented.rs`, `FLAG_PATCH`): a write of a few bytes
//! to a segment of a segmented value appends the bytes that differ from a
//! full record of that segment in the active file, not the whole segment.
//! These tests hold the value to a model through patches, seals,
//! compaction, reopening with and without hint files, a crash at any byte
//! of the patches, and `check`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use basalt_engine::{Db, ManualClock, Options, SyncPolicy, SEGMENT_LEN};

fn opts(clock: &Arc<ManualClock>, max_file: u64) -> Options {
    Options::default()
        .shards(1)
        .max_file_size(max_file)
        .sync(SyncPolicy::Never)
        .background_compaction(false)
        .active_expiry(false)
        .clock(clock.clone())
}

fn active_end(db: &Db) -> (u32, u64) {
    let f = db.stats().files.into_iter().find(|f| f.active).unwrap();
    (f.id, f.total_bytes)
}

fn data_bytes(db: &Db) -> u64 {
    db.stats().files.iter().map(|f| f.total_bytes).sum()
}

fn walk(dir: &Path) -> Vec<PathBuf> {
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

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}

/// The data file `id` under `dir` (one shard: `<dir>/0/<shard>/<id>.data`).
fn data_file(dir: &Path, id: u32) -> PathBuf {
    walk(dir)
        .into_iter()
        .find(|p| {
            p.extension().is_some_and(|x| x == "data")
                && p.file_stem()
                    .and_then(|s| s.to_str())
                    .and_then(|s| s.parse::<u32>().ok())
                    == Some(id)
        })
        .expect("the data file")
}

/// A 64 KiB value (128 segments) of a fixed pattern.
fn bitmap() -> Vec<u8> {
    (0..128 * SEGMENT_LEN).map(|i| (i % 253) as u8).collect()
}

#[test]
fn one_byte_writes_append_a_fraction_of_a_segment_and_read_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Db::open(dir.path(), opts(&clock, 64 << 20)).unwrap();
    let mut model = bitmap();
    db.write_range(b"bm", 0, &model).unwrap();
    let before = data_bytes(&db);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let writes = 2000;
    for _ in 0..writes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Anywhere but the last segment (whose record gives the length).
        let at = (x % (127 * SEGMENT_LEN as u64)) as usize;
        let b = (x >> 32) as u8;
        db.write_range(b"bm", at as u64, &[b]).unwrap();
        model[at] = b;
    }
    let grew = data_bytes(&db) - before;
    // A full segment record is SEGMENT_LEN + 46 bytes; a patch of one
    // changed byte about 60, and every ~25th write to a segment rewrites it.
    assert!(
        grew < writes * 200,
        "{writes} one-byte writes appended {grew} bytes"
    );
    assert_eq!(db.get(b"bm").unwrap().unwrap(), model, "read back live");
    assert_eq!(
        db.read_range(b"bm", 1000, 3000).unwrap().unwrap().0,
        model[1000..4000].to_vec()
    );
    assert_eq!(db.value_len(b"bm").unwrap(), Some(model.len() as u64));
    db.close().unwrap();
    let report = basalt_engine::check(dir.path(), &Default::default()).unwrap();
    assert!(report.is_clean(), "check: {report:?}");
    let db = Db::open(dir.path(), opts(&clock, 64 << 20)).unwrap();
    assert_eq!(db.get(b"bm").unwrap().unwrap(), model, "reopened by scan");
}

#[test]
fn patches_survive_seals_compaction_and_reopening_with_and_without_hints() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    // Small files: the writes seal many, so patches meet file boundaries
    // and compaction copies live patches as whole segments.
    let o = || opts(&clock, 48 << 10);
    let db = Db::open(dir.path(), o()).unwrap();
    let mut model = bitmap();
    db.write_range(b"bm", 0, &model).unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for step in 0..3000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = (x % model.len() as u64) as usize;
        let n = 1 + (x >> 40) as usize % 6;
        let n = n.min(model.len() - at);
        let data: Vec<u8> = (0..n).map(|i| (x >> (i * 8)) as u8).collect();
        db.write_range(b"bm", at as u64, &data).unwrap();
        model[at..at + n].copy_from_slice(&data);
        if step % 700 == 699 {
            db.compact().unwrap();
            assert_eq!(db.get(b"bm").unwrap().unwrap(), model, "step {step}");
        }
    }
    assert_eq!(db.get(b"bm").unwrap().unwrap(), model, "live");
    db.close().unwrap();
    assert!(basalt_engine::check(dir.path(), &Default::default())
        .unwrap()
        .is_clean());
    let db = Db::open(dir.path(), o()).unwrap();
    assert_eq!(db.get(b"bm").unwrap().unwrap(), model, "from hints");
    db.compact().unwrap();
    assert_eq!(db.get(b"bm").unwrap().unwrap(), model, "compacted again");
    db.close().unwrap();
    for p in walk(dir.path()) {
        if p.extension().is_some_and(|x| x == "hint") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let db = Db::open(dir.path(), o()).unwrap();
    assert_eq!(db.get(b"bm").unwrap().unwrap(), model, "by scan");
}

#[test]
fn patches_cut_at_any_byte_open_as_one_of_the_states_written() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let clock = Arc::new(ManualClock::new(1_000));
    let o = || opts(&clock, 1 << 20);
    let db = Db::open(&live, o()).unwrap();
    let mut model = bitmap();
    db.write_range(b"bm", 0, &model).unwrap();
    let (id, start) = active_end(&db);
    let mut states = vec![model.clone()];
    for i in 0..40usize {
        // Two segments, so patches and whole rewrites interleave.
        let at = (i % 2) * SEGMENT_LEN + (i * 37) % SEGMENT_LEN;
        model[at] ^= 0x5a;
        db.write_range(b"bm", at as u64, &[model[at]]).unwrap();
        states.push(model.clone());
    }
    let (id_after, end) = active_end(&db);
    assert_eq!(id, id_after, "one file");
    assert!(
        end - start < 40 * 200,
        "patches, not segments: {} bytes",
        end - start
    );
    let after = tmp.path().join("after");
    copy_dir(&live, &after);
    drop(db);
    let data = data_file(&after, id);
    let rel = data.strip_prefix(&after).unwrap().to_path_buf();
    let mut last = 0;
    for cut in (start..end).step_by(37).chain([end]) {
        let dir = tmp.path().join(format!("cut-{cut}"));
        copy_dir(&after, &dir);
        let mut bytes = std::fs::read(dir.join(&rel)).unwrap();
        bytes[cut as usize..end as usize].fill(0);
        std::fs::write(dir.join(&rel), &bytes).unwrap();
        let db = Db::open(&dir, o()).unwrap();
        let got = db.get(b"bm").unwrap().unwrap();
        // A cut keeps a prefix of the writes: the state it opens as is
        // never older than a shorter cut's.
        let at = states
            .iter()
            .position(|s| *s == got)
            .unwrap_or_else(|| panic!("cut at {cut}: not a state that was written"));
        assert!(at >= last, "cut at {cut}: state {at} after state {last}");
        last = at;
        drop(db);
        std::fs::remove_dir_all(&dir).unwrap();
    }
    assert_eq!(
        last,
        states.len() - 1,
        "the uncut file opens as the last state"
    );
}

#[test]
fn check_reports_a_patch_whose_base_is_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Db::open(dir.path(), opts(&clock, 1 << 20)).unwrap();
    db.write_range(b"bm", 0, &bitmap()).unwrap();
    // The conversion's records are batch members, which a patch never
    // names; the first write of segment 0 rewrites it whole, unflagged.
    let (id, seg0) = active_end(&db);
    db.write_range(b"bm", 3, b"x").unwrap();
    let (_, start) = active_end(&db);
    assert!(start - seg0 > SEGMENT_LEN as u64, "a whole segment");
    db.write_range(b"bm", 9, b"y").unwrap();
    db.write_range(b"bm", 20, b"z").unwrap();
    let (_, end) = active_end(&db);
    assert!(end - start < 2 * 200, "two patches");
    db.close().unwrap();
    assert!(basalt_engine::check(dir.path(), &Default::default())
        .unwrap()
        .is_clean());
    // Flip a byte of segment 0's full record: the record itself and both
    // patches built on it are damage.
    let data = data_file(dir.path(), id);
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[seg0 as usize + 100] ^= 1;
    std::fs::write(&data, &bytes).unwrap();
    let report = basalt_engine::check(dir.path(), &Default::default()).unwrap();
    let text = format!("{report:?}");
    assert!(!report.is_clean());
    assert!(text.contains("patch base"), "{text}");
}

#[test]
fn two_databases_with_the_same_file_layout_never_answer_from_each_others_segments() {
    // Patched segments read lately are kept per thread, named by file and
    // offset; two databases written the same way hold records at the same
    // file ids and offsets with different bytes.
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let clock = Arc::new(ManualClock::new(1_000));
    let a = Db::open(d1.path(), opts(&clock, 1 << 20)).unwrap();
    let b = Db::open(d2.path(), opts(&clock, 1 << 20)).unwrap();
    let (mut ma, mut mb) = (bitmap(), bitmap());
    for db in [&a, &b] {
        db.write_range(b"bm", 0, &bitmap()).unwrap();
    }
    for round in 0..50u8 {
        let at = 40 + round as usize;
        a.write_range(b"bm", at as u64, &[round]).unwrap();
        b.write_range(b"bm", at as u64, &[!round]).unwrap();
        ma[at] = round;
        mb[at] = !round;
        // Reads of the same segment through both, alternating, on one
        // thread: each sees its own bytes.
        for _ in 0..2 {
            assert_eq!(a.read_range(b"bm", 0, 128).unwrap().unwrap().0, ma[..128]);
            assert_eq!(b.read_range(b"bm", 0, 128).unwrap().unwrap().0, mb[..128]);
        }
    }
    assert_eq!(a.get(b"bm").unwrap().unwrap(), ma);
    assert_eq!(b.get(b"bm").unwrap().unwrap(), mb);
    // And after a reopen (new files, same ids and offsets).
    a.close().unwrap();
    let a = Db::open(d1.path(), opts(&clock, 1 << 20)).unwrap();
    assert_eq!(a.read_range(b"bm", 0, 128).unwrap().unwrap().0, ma[..128]);
}

#[test]
fn repair_writes_a_patch_whose_base_moves_as_the_whole_segment() {
    // Repair packs a damaged file's good records together, so records after
    // the damage move; a patch names its base by offset.
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Db::open(dir.path(), opts(&clock, 1 << 20)).unwrap();
    let mut model = bitmap();
    db.write_range(b"bm", 0, &model).unwrap();
    let (id, junk) = active_end(&db);
    db.put(b"junk", &[7u8; 100]).unwrap();
    // Segment 0 rewritten whole (the base), then two patches of it.
    for (at, b) in [(3usize, b'x'), (9, b'y'), (20, b'z')] {
        db.write_range(b"bm", at as u64, &[b]).unwrap();
        model[at] = b;
    }
    db.close().unwrap();
    let data = data_file(dir.path(), id);
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[junk as usize + 60] ^= 1;
    std::fs::write(&data, &bytes).unwrap();
    let report = basalt_engine::repair(dir.path(), &Default::default()).unwrap();
    assert_eq!(
        report.dropped.len(),
        1,
        "only the damaged record: {report:?}"
    );
    let after = basalt_engine::check(dir.path(), &Default::default()).unwrap();
    assert!(after.is_clean(), "check after repair: {after:?}");
    let db = Db::open(dir.path(), opts(&clock, 1 << 20)).unwrap();
    assert_eq!(db.get(b"bm").unwrap().unwrap(), model);
    assert_eq!(db.get(b"junk").unwrap(), None);
    db.compact().unwrap();
    assert_eq!(db.get(b"bm").unwrap().unwrap(), model);
}

#[test]
fn no_patch_is_written_while_another_threads_batch_may_still_drop_later_segments() {
    // A batch grows the value (its old last segment and a new one are
    // members) on one thread; another thread writes the old last segment
    // twice meanwhile. A crash before the commit drops the batch, and the
    // old last segment is the last again: it must be a whole record, or
    // the value's length (read off the last segment's record) is wrong.
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Arc::new(Db::open(&live, opts(&clock, 1 << 20)).unwrap());
    let mut model = bitmap();
    db.write_range(b"bm", 0, &model).unwrap();
    let n = model.len();
    let batch = db.batch();
    db.write_range(b"bm", n as u64, b"more").unwrap();
    let other = db.clone();
    std::thread::spawn(move || {
        other.write_range(b"bm", (n - 100) as u64, b"A").unwrap();
        other.write_range(b"bm", (n - 90) as u64, b"B").unwrap();
    })
    .join()
    .unwrap();
    model[n - 100] = b'A';
    model[n - 90] = b'B';
    let crash = tmp.path().join("crash");
    copy_dir(&live, &crash);
    batch.commit().unwrap();
    drop(db);
    let db = Db::open(&crash, opts(&clock, 1 << 20)).unwrap();
    assert_eq!(db.value_len(b"bm").unwrap(), Some(model.len() as u64));
    assert_eq!(db.get(b"bm").unwrap().unwrap(), model);
    let (tail, total) = db.read_range(b"bm", 65000, 1000).unwrap().unwrap();
    assert_eq!((tail, total), (model[65000..].to_vec(), model.len() as u64));
}

/// Which shard's active file grows when `write` runs.
fn shard_written(db: &Db, write: impl FnOnce()) -> (usize, u32, u64) {
    let before: Vec<_> = db.stats().files.into_iter().filter(|f| f.active).collect();
    write();
    let after: Vec<_> = db.stats().files.into_iter().filter(|f| f.active).collect();
    let f = after
        .iter()
        .find(|a| {
            before
                .iter()
                .any(|b| b.shard == a.shard && b.id == a.id && b.total_bytes < a.total_bytes)
        })
        .expect("one shard grew");
    (f.shard, f.id, f.total_bytes)
}

#[test]
fn a_patch_left_last_by_a_batch_lost_in_another_shard_is_written_whole_at_open() {
    // A power loss under `everysec` can keep one shard's file whole and cut
    // another's: here the commit of a batch that grew the value (its
    // commit record is in the other shard, with the batch's last member)
    // is lost, while the patches written after it survive. The patched
    // segment is then the last, and open writes it whole so that the
    // value's length is right.
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let clock = Arc::new(ManualClock::new(1_000));
    let o = || opts(&clock, 1 << 20).shards(2);
    let db = Db::open(&live, o()).unwrap();
    let mut model = bitmap();
    let n = model.len();
    let (shard_bm, _, _) = shard_written(&db, || {
        db.write_range(b"bm", 0, &model).unwrap();
    });
    let other = (0..64)
        .map(|i| format!("other{i}").into_bytes())
        .find(|k| {
            let (s, ..) = shard_written(&db, || {
                db.put(k, b"probe").unwrap();
            });
            s != shard_bm
        })
        .expect("a key in the other shard");
    let batch = db.batch();
    db.write_range(b"bm", n as u64, b"more").unwrap();
    // The batch's last member, so its commit record goes to this shard.
    let (other_shard, other_id, commit_at) = shard_written(&db, || {
        db.put(&other, b"in the batch").unwrap();
    });
    batch.commit().unwrap();
    // No batch in flight: the first write makes segment n/512-1 whole
    // (its record was a batch member), the second is a patch of it.
    let (_, _, before) = shard_written(&db, || {
        db.write_range(b"bm", (n - 100) as u64, b"A").unwrap();
    });
    let (_, _, after) = shard_written(&db, || {
        db.write_range(b"bm", (n - 90) as u64, b"B").unwrap();
    });
    assert!(after - before < 200, "a patch: {} bytes", after - before);
    model[n - 100] = b'A';
    model[n - 90] = b'B';
    let crash = tmp.path().join("crash");
    copy_dir(&live, &crash);
    drop(db);
    // The other shard loses its tail from the commit record on.
    let path = crash
        .join("0")
        .join(format!("shard-{other_shard:04}"))
        .join(format!("{other_id:010}.data"));
    let path = if path.exists() {
        path
    } else {
        crash
            .join(format!("shard-{other_shard:04}"))
            .join(format!("{other_id:010}.data"))
    };
    let mut bytes = std::fs::read(&path).unwrap();
    let end = bytes.len();
    bytes[commit_at as usize..end].fill(0);
    std::fs::write(&path, &bytes).unwrap();
    let db = Db::open(&crash, o()).unwrap();
    assert_eq!(
        db.get(&other).unwrap().as_deref(),
        Some(&b"probe"[..]),
        "the batch is gone"
    );
    assert_eq!(db.value_len(b"bm").unwrap(), Some(n as u64));
    assert_eq!(db.get(b"bm").unwrap().unwrap(), model);
    let (tail, total) = db
        .read_range(b"bm", (n - 200) as u64, 1000)
        .unwrap()
        .unwrap();
    assert_eq!((tail, total), (model[n - 200..].to_vec(), n as u64));
    // And a write to the last segment keeps all of it.
    db.write_range(b"bm", (n - 1) as u64, b"Z").unwrap();
    model[n - 1] = b'Z';
    db.close().unwrap();
    let db = Db::open(&crash, o()).unwrap();
    assert_eq!(db.get(b"bm").unwrap().unwrap(), model);
}

#[test]
fn writes_of_one_segment_taking_turns_on_two_threads_read_back_as_written_everywhere() {
    // Each thread keeps the segments it wrote alone in a cache of its own;
    // the other thread's next write must not build on a stale copy, and
    // every reader (either thread, the files after reopening) must see
    // the last write.
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Db::open(dir.path(), opts(&clock, 64 << 20)).unwrap();
    let mut model = bitmap();
    db.write_range(b"bm", 0, &model).unwrap();
    let seg = 5 * SEGMENT_LEN;
    std::thread::scope(|s| {
        // Made inside the scope: a failed assertion drops the senders, so
        // the threads end and the scope returns the failure.
        let (tx0, rx0) = std::sync::mpsc::channel::<Option<(usize, u8)>>();
        let (tx1, rx1) = std::sync::mpsc::channel::<Option<(usize, u8)>>();
        let (done_tx, done) = std::sync::mpsc::channel::<Vec<u8>>();
        for rx in [rx0, rx1] {
            let (db, done_tx) = (&db, done_tx.clone());
            s.spawn(move || {
                while let Ok(Some((at, b))) = rx.recv() {
                    let mut old = 0;
                    db.modify_range(b"bm", at as u64, 1, |v| {
                        old = v[0];
                        v[0] = b;
                    })
                    .unwrap();
                    // The segment as this thread reads it now (from its
                    // cache), with the byte the write found first.
                    let (now, _) = db
                        .read_range(b"bm", seg as u64, SEGMENT_LEN)
                        .unwrap()
                        .unwrap();
                    let mut reply = vec![old];
                    reply.extend(now);
                    done_tx.send(reply).unwrap();
                }
            });
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..400 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = seg + (x % SEGMENT_LEN as u64) as usize;
            let b = (x >> 40) as u8;
            let tx = if step % 3 == 0 { &tx1 } else { &tx0 };
            tx.send(Some((at, b))).unwrap();
            let reply = done
                .recv_timeout(std::time::Duration::from_secs(10))
                .unwrap();
            assert_eq!(reply[0], model[at], "step {step}: the byte the write found");
            model[at] = b;
            assert_eq!(
                &reply[1..],
                &model[seg..seg + SEGMENT_LEN],
                "step {step}: read back"
            );
        }
        tx0.send(None).unwrap();
        tx1.send(None).unwrap();
    });
    assert_eq!(
        db.get(b"bm").unwrap().unwrap(),
        model,
        "read back on a third thread"
    );
    db.close().unwrap();
    let db = Db::open(dir.path(), opts(&clock, 64 << 20)).unwrap();
    assert_eq!(db.get(b"bm").unwrap().unwrap(), model, "reopened");
}

#[test]
fn a_bitmap_with_more_segments_than_a_threads_cache_holds_reads_back_as_written() {
    // A thread caches at most 4,096 applied segments and empties its cache
    // when full: random one-byte writes over 5,000 segments keep filling
    // and emptying it, so writes alternate between the cached path and the
    // one that reads the segment's records.
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Db::open(dir.path(), opts(&clock, 64 << 20)).unwrap();
    let mut model: Vec<u8> = (0..5000 * SEGMENT_LEN).map(|i| (i % 251) as u8).collect();
    db.write_range(b"big", 0, &model).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for step in 0..30_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = (x % (4999 * SEGMENT_LEN as u64)) as usize;
        let b = (x >> 32) as u8;
        let mut found = 0;
        db.modify_range(b"big", at as u64, 1, |v| {
            found = v[0];
            v[0] = b;
        })
        .unwrap();
        assert_eq!(found, model[at], "step {step}: the byte the write found");
        model[at] = b;
        if step % 5000 == 4999 {
            let probe = (x >> 16) as usize % (model.len() - 600);
            assert_eq!(
                db.read_range(b"big", probe as u64, 600).unwrap().unwrap().0,
                model[probe..probe + 600].to_vec(),
                "step {step}"
            );
        }
    }
    assert_eq!(db.get(b"big").unwrap().unwrap(), model, "read back live");
    db.close().unwrap();
    let report = basalt_engine::check(dir.path(), &Default::default()).unwrap();
    assert!(report.is_clean(), "check: {report:?}");
    let db = Db::open(dir.path(), opts(&clock, 64 << 20)).unwrap();
    assert_eq!(db.get(b"big").unwrap().unwrap(), model, "reopened");
}

#[test]
fn reads_inside_one_whole_segment_are_cached_and_see_every_later_write() {
    // A bitmap written once (whole segments) and then read a byte at a
    // time: each segment read alone is cached as its record; a write, a
    // compaction or a reopen gives the segment a new record, which the
    // next read must see.
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let o = || opts(&clock, 48 << 10);
    let db = Db::open(dir.path(), o()).unwrap();
    let mut model = bitmap();
    db.write_range(b"bm", 0, &model).unwrap();
    let byte = |db: &Db, at: usize| db.read_range(b"bm", at as u64, 1).unwrap().unwrap().0[0];
    for round in 0..3 {
        for at in (0..model.len()).step_by(97) {
            assert_eq!(byte(&db, at), model[at], "round {round}, byte {at}");
            assert_eq!(byte(&db, at), model[at], "round {round}, byte {at} again");
        }
        // Every 7th segment changes; then the files move.
        for at in (0..model.len() - SEGMENT_LEN).step_by(7 * SEGMENT_LEN) {
            let b = model[at].wrapping_add(1 + round as u8);
            db.write_range(b"bm", at as u64, &[b]).unwrap();
            model[at] = b;
            assert_eq!(byte(&db, at), b, "round {round}: read after write at {at}");
        }
        db.compact().unwrap();
    }
    assert_eq!(db.get(b"bm").unwrap().unwrap(), model);
    db.close().unwrap();
    let db = Db::open(dir.path(), o()).unwrap();
    for at in (0..model.len()).step_by(89) {
        assert_eq!(byte(&db, at), model[at], "reopened, byte {at}");
    }
}

#[test]
fn many_small_writes_to_a_few_segments_are_on_disk_as_written_seen_from_another_thread() {
    // The write path of a cached segment diffs only the words it changed
    // since the base: dozens of patches ride on one base, ranges of one to
    // nine bytes cross word edges, and a quarter of the writes put back
    // the byte the base had (a word that differed and no longer does).
    // Reads on another thread (no cache of this one's) and after reopening
    // see the records themselves, so a change missing from a patch shows.
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Db::open(dir.path(), opts(&clock, 1 << 20)).unwrap();
    let segments = 9;
    let base: Vec<u8> = (0..segments * SEGMENT_LEN)
        .map(|i| (i % 241) as u8)
        .collect();
    db.write_range(b"bm", 0, &base).unwrap();
    let mut model = base.clone();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for step in 0..20_000u32 {
        let r = next();
        // Segments 0..8: never the last, so every write may patch.
        let seg = (r % (segments as u64 - 1)) as usize;
        let len = 1 + (r >> 8) as usize % 9;
        let from = seg * SEGMENT_LEN + (r >> 16) as usize % (SEGMENT_LEN - len + 1);
        let put_back = (r >> 40) % 4 == 0;
        let bytes: Vec<u8> = (0..len)
            .map(|k| {
                if put_back {
                    base[from + k]
                } else {
                    (next() >> 24) as u8
                }
            })
            .collect();
        db.modify_range(b"bm", from as u64, len, |v| v.copy_from_slice(&bytes))
            .unwrap();
        model[from..from + len].copy_from_slice(&bytes);
        if step % 2_000 == 1_999 {
            let seen =
                std::thread::scope(|s| s.spawn(|| db.get(b"bm").unwrap().unwrap()).join().unwrap());
            assert!(seen == model, "step {step}: read on another thread");
        }
    }
    db.close().unwrap();
    let report = basalt_engine::check(dir.path(), &Default::default()).unwrap();
    assert!(report.is_clean(), "check: {report:?}");
    let db = Db::open(dir.path(), opts(&clock, 1 << 20)).unwrap();
    assert!(db.get(b"bm").unwrap().unwrap() == model, "reopened");
}

#[test]
fn a_ranged_write_that_changes_nothing_inside_the_value_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let db = Db::open(dir.path(), opts(&clock, 64 << 20)).unwrap();
    db.write_range(b"bm", 0, &bitmap()).unwrap();
    db.put(b"small", b"abc").unwrap();
    let same = |db: &Db, key: &[u8], at: u64| {
        let (version, bytes) = (db.version(key), data_bytes(db));
        let r = db
            .try_modify_range_if_changed(key, at, 1, |b| b[0] = b[0].wrapping_add(0))
            .unwrap()
            .unwrap();
        assert_eq!((db.version(key), data_bytes(db)), (version, bytes), "{at}");
        r
    };
    // A plain value, a segment read from its record, then the same segment
    // from this thread's cache (after a write through it), and the last
    // segment: nothing written, the length reported.
    let total = bitmap().len() as u64;
    assert_eq!(same(&db, b"small", 1), (true, 3, false));
    assert_eq!(
        same(&db, b"bm", 5 * SEGMENT_LEN as u64),
        (true, total, false)
    );
    db.write_range(b"bm", 7 * SEGMENT_LEN as u64, &[9]).unwrap();
    assert_eq!(
        same(&db, b"bm", 7 * SEGMENT_LEN as u64 + 1),
        (true, total, false)
    );
    assert_eq!(same(&db, b"bm", total - 1), (true, total, false));
    // A change is written, once.
    let v = db.version(b"bm");
    let r = db
        .try_modify_range_if_changed(b"bm", 7 * SEGMENT_LEN as u64 + 1, 1, |b| b[0] ^= 1)
        .unwrap()
        .unwrap();
    assert_eq!(r, (true, total, true));
    assert!(db.version(b"bm") > v);
    // Growing or creating writes even a zero.
    let r = db
        .try_modify_range_if_changed(b"small", 10, 1, |_| {})
        .unwrap()
        .unwrap();
    assert_eq!(r, (true, 11, true));
    assert_eq!(db.get(b"small").unwrap().unwrap(), b"abc\0\0\0\0\0\0\0\0");
    let r = db
        .try_modify_range_if_changed(b"new", 0, 1, |_| {})
        .unwrap()
        .unwrap();
    assert_eq!(r, (false, 1, true));
    assert_eq!(db.get(b"new").unwrap().unwrap(), b"\0");
    // After reopening, every value is as written.
    let mut want = bitmap();
    want[7 * SEGMENT_LEN] = 9;
    want[7 * SEGMENT_LEN + 1] ^= 1;
    drop(db);
    let db = Db::open(dir.path(), opts(&clock, 64 << 20)).unwrap();
    assert_eq!(db.get(b"bm").unwrap().unwrap(), want);
}
