//! Write batches across a crash: the directory is copied at every record
//! boundary of a batch spanning shards and files (what kill -9 would leave:
//! every append so far, nothing after), and each copy must open with all of
//! the batch or none of it; the same through hint files, after compaction,
//! and with the copy cut inside the last record.

use std::collections::BTreeMap;
use std::path::Path;

use basalt_engine::{Db, Options, SyncPolicy, WriteBatch};

fn opts() -> Options {
    Options::default()
        .shards(4)
        .max_file_size(4 << 10)
        .background_compaction(false)
        .active_expiry(false)
        .sync(SyncPolicy::Never)
}

/// Copies a database directory as a crash would leave it (no LOCK held).
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

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Every plain value and every field (as `key/field`) of the database.
fn contents(db: &Db) -> Model {
    let mut out = Model::new();
    let (mut cursor, mut keys) = (0, Vec::new());
    loop {
        let (ks, next) = db.scan(cursor, 100);
        keys.extend(ks);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    for k in keys {
        match db.get(&k) {
            Ok(Some(v)) => {
                out.insert(k, v);
            }
            _ => {
                for (f, v) in db.fields(&k).unwrap() {
                    let mut name = k.clone();
                    name.push(b'/');
                    name.extend(f);
                    out.insert(name, v);
                }
            }
        }
    }
    out
}

fn key(i: usize) -> Vec<u8> {
    format!("key-{i:03}").into_bytes()
}

/// Writes the state every crash copy starts from.
fn base(db: &Db) {
    for i in 0..30 {
        db.put(&key(i), format!("old-{i}").as_bytes()).unwrap();
    }
    for i in 0..10 {
        db.put_field(b"map", format!("f{i}").as_bytes(), b"old")
            .unwrap();
    }
}

/// The batch's writes, one engine record (or two) each: puts, deletes and
/// field writes in every shard, large enough to rotate files mid-batch.
fn batch_step(db: &Db, i: usize) {
    match i % 4 {
        0 => {
            db.put(&key(i), &vec![b'n'; 300]).unwrap();
        }
        1 => {
            db.delete(&key(i)).unwrap();
        }
        2 => {
            db.put_field(b"map", format!("f{}", i % 10).as_bytes(), b"new")
                .unwrap();
        }
        _ => {
            db.delete_field(b"map", format!("f{}", i % 10).as_bytes())
                .unwrap();
        }
    }
}

fn reopen(dir: &Path) -> Db {
    Db::open(dir, opts()).unwrap()
}

#[test]
fn a_batch_cut_at_every_record_boundary_opens_as_all_or_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let db = Db::open(&live, opts()).unwrap();
    base(&db);
    let before = contents(&db);
    let steps = 24;
    let b = db.batch();
    for i in 0..steps {
        batch_step(&db, i);
        snapshot(&live, &tmp.path().join(format!("cut-{i}")));
    }
    b.commit().unwrap();
    let after = contents(&db);
    assert_ne!(before, after);
    snapshot(&live, &tmp.path().join("committed"));
    drop(db);

    for i in 0..steps {
        let dir = tmp.path().join(format!("cut-{i}"));
        let db = reopen(&dir);
        assert_eq!(contents(&db), before, "cut after write {i}: scan open");
        db.close().unwrap();
        // Again through the hint files the clean close wrote.
        let db = reopen(&dir);
        assert_eq!(contents(&db), before, "cut after write {i}: hint open");
        // Compaction drops the remnant for good; new writes go on.
        db.compact().unwrap();
        db.put(b"after", b"crash").unwrap();
        db.close().unwrap();
        let db = reopen(&dir);
        let mut want = before.clone();
        want.insert(b"after".to_vec(), b"crash".to_vec());
        assert_eq!(contents(&db), want, "cut after write {i}: after compaction");
    }
    let dir = tmp.path().join("committed");
    let db = reopen(&dir);
    assert_eq!(contents(&db), after, "committed: scan open");
    db.compact().unwrap();
    db.close().unwrap();
    let db = reopen(&dir);
    assert_eq!(contents(&db), after, "committed: after compaction");
}

#[test]
fn a_batch_cut_inside_its_last_record_opens_without_it() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let db = Db::open(&live, opts().max_file_size(1 << 20)).unwrap();
    base(&db);
    let before = contents(&db);
    let b = db.batch();
    for i in 0..8 {
        batch_step(&db, i);
    }
    // Cut every shard's newest file inside its last record: a torn tail.
    let cut = tmp.path().join("cut");
    snapshot(&live, &cut);
    b.commit().unwrap();
    drop(db);
    for shard in std::fs::read_dir(&cut).unwrap() {
        let shard = shard.unwrap().path();
        if !shard.is_dir() {
            continue;
        }
        let mut files: Vec<_> = std::fs::read_dir(&shard)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "data"))
            .collect();
        files.sort();
        if let Some(last) = files.last() {
            let len = std::fs::metadata(last).unwrap().len();
            if len > 32 + 10 {
                let f = std::fs::OpenOptions::new().write(true).open(last).unwrap();
                f.set_len(len - 10).unwrap();
            }
        }
    }
    let db = reopen(&cut);
    assert_eq!(contents(&db), before);
}

#[test]
fn write_batch_applies_every_op_and_survives_compaction_and_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Db::open(tmp.path(), opts()).unwrap();
    db.put(b"gone", b"x").unwrap();
    let mut wb = WriteBatch::new();
    wb.put(b"a", b"1")
        .put(b"b", b"2")
        .delete(b"gone")
        .put_field(b"h", 7, b"f", b"v")
        .expire(b"a", u64::MAX / 2);
    db.write(&wb).unwrap();
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(db.expires_at(b"a"), Some(u64::MAX / 2));
    assert_eq!(db.get(b"gone").unwrap(), None);
    // Overwrite everything many times so compaction rewrites the members
    // and, later, can drop the commit records they needed.
    for round in 0..40u32 {
        let mut wb = WriteBatch::new();
        for k in 0..10u32 {
            wb.put(format!("k{k}").as_bytes(), &[round as u8; 200]);
        }
        db.write(&wb).unwrap();
    }
    db.compact().unwrap();
    db.compact().unwrap();
    db.close().unwrap();
    let db = Db::open(tmp.path(), opts()).unwrap();
    assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
    assert_eq!(
        db.get_field(b"h", b"f").unwrap().as_deref(),
        Some(&b"v"[..])
    );
    assert_eq!(db.get(b"gone").unwrap(), None);
    for k in 0..10u32 {
        assert_eq!(
            db.get(format!("k{k}").as_bytes()).unwrap(),
            Some(vec![39u8; 200])
        );
    }
    // Old commit records went with the files compaction rewrote: the
    // directory holds far less than the 40 rounds wrote.
    let st = db.stats();
    assert!(
        st.live_bytes + st.dead_bytes < 40 * 10 * 200 / 2,
        "{} bytes on disk",
        st.live_bytes + st.dead_bytes
    );
    db.close().unwrap();
    // Compaction unflagged and dropped members (some inputs were all
    // garbage): check must not take that for a lost member.
    let report = basalt_engine::check(tmp.path(), &Default::default()).unwrap();
    assert!(report.is_clean(), "{:?}", report.damage);
}

#[test]
fn nested_batches_commit_once_with_the_outermost() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let db = Db::open(&live, opts()).unwrap();
    let outer = db.batch();
    db.put(b"x", b"1").unwrap();
    {
        let inner = db.batch();
        db.put(b"y", b"2").unwrap();
        inner.commit().unwrap();
    }
    // The inner commit wrote nothing: a crash now keeps neither.
    snapshot(&live, &tmp.path().join("cut"));
    outer.commit().unwrap();
    drop(db);
    let db = reopen(&tmp.path().join("cut"));
    assert_eq!(db.get(b"x").unwrap(), None);
    assert_eq!(db.get(b"y").unwrap(), None);
    drop(db);
    let db = reopen(&live);
    assert_eq!(db.get(b"y").unwrap().as_deref(), Some(&b"2"[..]));
}

#[test]
fn a_crash_remnant_is_reported_by_check_as_a_note() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let db = Db::open(&live, opts()).unwrap();
    let b = db.batch();
    db.put(b"p", b"1").unwrap();
    db.put(b"q", b"2").unwrap();
    let cut = tmp.path().join("cut");
    snapshot(&live, &cut);
    b.commit().unwrap();
    drop(db);
    let report = basalt_engine::check(&cut, &Default::default()).unwrap();
    assert!(report.is_clean(), "{:?}", report.damage);
    let remnants = report
        .damage
        .iter()
        .filter(|d| d.kind == basalt_engine::DamageKind::UncommittedBatch)
        .count();
    assert_eq!(remnants, 2, "{:?}", report.damage);
    // The committed copy has none.
    let report = basalt_engine::check(&live, &Default::default()).unwrap();
    assert!(report
        .damage
        .iter()
        .all(|d| d.kind != basalt_engine::DamageKind::UncommittedBatch));
}

/// Data files of every shard with their lengths.
fn data_files(dir: &Path) -> BTreeMap<std::path::PathBuf, u64> {
    let mut out = BTreeMap::new();
    for shard in std::fs::read_dir(dir).unwrap() {
        let shard = shard.unwrap().path();
        if !shard.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&shard).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|e| e == "data") {
                let len = std::fs::metadata(&p).unwrap().len();
                out.insert(p, len);
            }
        }
    }
    out
}

#[test]
fn a_committed_batch_that_lost_a_member_is_ignored_whole_and_reported_by_check() {
    // What a power failure during the batch's fsyncs can leave: the commit
    // on disk, a member in another shard not.
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let o = || opts().max_file_size(1 << 20);
    let db = Db::open(&live, o()).unwrap();
    base(&db);
    let before = contents(&db);
    db.close().unwrap();
    let sizes = data_files(&live);
    let db = Db::open(&live, o()).unwrap();
    let b = db.batch();
    for i in 0..8 {
        db.put(&key(i), b"batch").unwrap();
    }
    b.commit().unwrap();
    let after = contents(&db);
    db.close().unwrap();
    let mut saw_torn = 0;
    for (i, (path, &len)) in data_files(&live).iter().enumerate() {
        let was = sizes.get(path).copied().unwrap_or(32);
        if was == len {
            continue;
        }
        // Cut this shard's part of the batch off a fresh copy.
        let copy = tmp.path().join(format!("copy-{i}"));
        snapshot(&live, &copy);
        let rel = path.strip_prefix(&live).unwrap();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(copy.join(rel))
            .unwrap();
        f.set_len(was).unwrap();
        for hint in std::fs::read_dir(copy.join(rel).parent().unwrap()).unwrap() {
            let h = hint.unwrap().path();
            if h.extension().is_some_and(|e| e == "hint") {
                std::fs::remove_file(h).unwrap();
            }
        }
        let report = basalt_engine::check(&copy, &Default::default()).unwrap();
        let torn = report
            .damage
            .iter()
            .any(|d| d.kind == basalt_engine::DamageKind::TornBatch);
        saw_torn += torn as usize;
        let db = Db::open(&copy, o()).unwrap();
        let got = contents(&db);
        // The shard holding the commit lost it too: plainly uncommitted.
        assert_eq!(got, before, "cut {rel:?}: the batch must be gone whole");
        assert_ne!(got, after);
    }
    assert!(saw_torn > 0, "no cut left a commit without a member");
}

/// Rewrites the format version of `BASALT` and of every data file's header
/// (with their CRCs), and removes the hints: a directory as a build of that
/// version would have left it.
fn set_version(dir: &Path, version: u32) {
    let meta = dir.join("BASALT");
    let mut b = std::fs::read(&meta).unwrap();
    b[8..12].copy_from_slice(&version.to_le_bytes());
    let crc = basalt_engine::crc32c(&b[0..16]);
    b[16..20].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&meta, b).unwrap();
    for path in data_files(dir).keys() {
        let mut b = std::fs::read(path).unwrap();
        b[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = basalt_engine::crc32c(&b[0..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(path, b).unwrap();
        let _ = std::fs::remove_file(path.with_extension("hint"));
    }
}

#[test]
fn version_1_and_2_directories_open_and_a_newer_version_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let v1 = tmp.path().join("v1");
    let db = Db::open(&v1, opts()).unwrap();
    base(&db);
    let before = contents(&db);
    db.close().unwrap();
    set_version(&v1, 1);
    let db = reopen(&v1);
    assert_eq!(contents(&db), before);
    // And it takes batches from now on.
    let b = db.batch();
    db.put(b"new", b"1").unwrap();
    b.commit().unwrap();
    db.close().unwrap();
    assert_eq!(reopen(&v1).get(b"new").unwrap().as_deref(), Some(&b"1"[..]));

    // Version 2 (before patch records) opens as it is, too.
    let v2 = tmp.path().join("v2");
    let db = Db::open(&v2, opts()).unwrap();
    base(&db);
    db.close().unwrap();
    set_version(&v2, 2);
    assert_eq!(contents(&reopen(&v2)), before);
    // Opening marks the directory with this build's version (the records
    // appended from now on may be of a newer kind), so an older build
    // refuses it by name.
    for d in [&v1, &v2] {
        let meta = std::fs::read(d.join("BASALT")).unwrap();
        assert_eq!(u32::from_le_bytes(meta[8..12].try_into().unwrap()), 3);
    }

    let v4 = tmp.path().join("v4");
    let db = Db::open(&v4, opts()).unwrap();
    base(&db);
    db.close().unwrap();
    set_version(&v4, 4);
    let e = Db::open(&v4, opts()).unwrap_err().to_string();
    assert!(e.contains("format version 4"), "{e}");
}

/// A commit log kept in memory that copies both databases' directories
/// (a crash just before the token is written) before it records a token.
#[derive(Debug)]
struct TestLog {
    tokens: std::sync::Mutex<Vec<u64>>,
    dirs: Vec<std::path::PathBuf>,
    copies: std::path::PathBuf,
    fail: std::sync::atomic::AtomicBool,
}

impl basalt_engine::CommitLog for TestLog {
    fn commit(&self, token: u64) -> std::io::Result<()> {
        for (i, d) in self.dirs.iter().enumerate() {
            snapshot(d, &self.copies.join(format!("{token}-{i}")));
        }
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::other("injected commit log failure"));
        }
        self.tokens.lock().unwrap().push(token);
        Ok(())
    }
}

#[test]
fn a_batch_over_two_databases_is_decided_by_its_token_in_the_commit_log() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let log = std::sync::Arc::new(TestLog {
        tokens: Default::default(),
        dirs: vec![a.clone(), b.clone()],
        copies: tmp.path().join("copies"),
        fail: Default::default(),
    });
    let seq = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1));
    let group = basalt_engine::BatchGroup::with_log(log.clone());
    let open = |dir: &Path, known: Vec<u64>| {
        Db::open(
            dir,
            opts()
                .sequence(seq.clone())
                .batch_group(group.clone())
                .commit_oracle(std::sync::Arc::new(move |t| known.contains(&t))),
        )
        .unwrap()
    };
    let (da, db) = (open(&a, vec![]), open(&b, vec![]));
    da.put(b"k", b"in a").unwrap();
    // A MOVE of `k` from a to b: one batch over both databases.
    let batch = group.begin();
    db.put(b"k", b"in a").unwrap();
    da.delete(b"k").unwrap();
    batch.commit().unwrap();
    let token = log.tokens.lock().unwrap()[0];
    drop((da, db));

    // A crash before the token was recorded: neither part counts.
    let ca = open(&log.copies.join(format!("{token}-0")), vec![]);
    let cb = open(&log.copies.join(format!("{token}-1")), vec![]);
    assert_eq!(ca.get(b"k").unwrap().as_deref(), Some(&b"in a"[..]));
    assert_eq!(cb.get(b"k").unwrap(), None);
    drop((ca, cb));
    // With the token: both parts count, and each database names it.
    let (da, db) = (open(&a, vec![token]), open(&b, vec![token]));
    assert_eq!(da.get(b"k").unwrap(), None);
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"in a"[..]));
    assert_eq!(da.commit_tokens(), &[token]);
    assert_eq!(db.commit_tokens(), &[token]);

    // A log that fails: the batch is lost whole, and writes do not resume.
    log.fail.store(true, std::sync::atomic::Ordering::SeqCst);
    let batch = group.begin();
    da.put(b"x", b"1").unwrap();
    db.put(b"y", b"2").unwrap();
    assert!(batch.commit().is_err());
    assert!(da.write_error().is_some() && db.resume_writes().is_err());
    drop((da, db));
    let (da, db) = (open(&a, vec![token]), open(&b, vec![token]));
    assert_eq!(da.get(b"x").unwrap(), None);
    assert_eq!(db.get(b"y").unwrap(), None);
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"in a"[..]));
}

#[test]
fn thousands_of_batches_reopen_whole_while_shards_settle_them_as_they_are_read() {
    // More batch members than a shard keeps before applying the batches it
    // has seen whole (4,096), in files that rotate inside batches, with
    // batches within one key (one shard) and across shards, and a last
    // batch the crash copy holds without its commit.
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let o = || opts().max_file_size(64 << 10);
    let db = Db::open(&live, o()).unwrap();
    base(&db);
    for n in 0..1_500usize {
        let b = db.batch();
        if n % 5 == 0 {
            // Across shards: four keys.
            for j in 0..4 {
                db.put(&key(n * 4 + j), format!("b{n}").as_bytes()).unwrap();
            }
        } else {
            // One key's fields: one shard.
            let map = format!("m{}", n % 37);
            for j in 0..4 {
                db.put_field(
                    map.as_bytes(),
                    format!("f{j}").as_bytes(),
                    format!("b{n}").as_bytes(),
                )
                .unwrap();
            }
        }
        b.commit().unwrap();
    }
    let committed = contents(&db);
    let b = db.batch();
    for j in 0..4 {
        db.put_field(b"m1", format!("f{j}").as_bytes(), b"uncommitted")
            .unwrap();
        db.put(&key(90_000 + j), b"uncommitted").unwrap();
    }
    let cut = tmp.path().join("cut");
    snapshot(&live, &cut);
    b.commit().unwrap();
    drop(db);
    let db = Db::open(&cut, o()).unwrap();
    assert_eq!(contents(&db), committed, "scan open");
    db.close().unwrap();
    let db = Db::open(&cut, o()).unwrap();
    assert_eq!(contents(&db), committed, "hint open");
    db.compact().unwrap();
    db.close().unwrap();
    let db = Db::open(&cut, o()).unwrap();
    assert_eq!(contents(&db), committed, "after compaction");
}

/// The key `k` holds an old value (`old`), then a batch of more than 4,096
/// members (so a shard settles the batches before it while reading), then
/// `k` is deleted in a file that fills with garbage, made a map of tag 2,
/// and only the garbage file is compacted: the delete moves into a
/// compaction output read after the new field's file.
fn recreated_as_a_map(old: impl Fn(&Db)) -> (tempfile::TempDir, Db) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let o = || opts().shards(1).max_file_size(1 << 20);
    let db = Db::open(&dir, o()).unwrap();
    old(&db);
    let b = db.batch();
    for i in 0..4_200 {
        db.put(format!("y{i:05}").as_bytes(), b"live").unwrap();
    }
    b.commit().unwrap();
    db.compact().unwrap();
    assert!(db.delete(b"k").unwrap());
    let big = vec![7u8; 100 << 10];
    for _ in 0..12 {
        db.put(b"g", &big).unwrap();
    }
    db.put_field_tagged(b"k", 2, b"f2", b"new").unwrap();
    db.compact_pass().unwrap();
    db.close().unwrap();
    let db = Db::open(&dir, o()).unwrap();
    (tmp, db)
}

fn tag_of(db: &Db, k: &[u8]) -> Option<u8> {
    match db.meta(k)?.kind {
        basalt_engine::KeyKind::Map { tag, .. } => Some(tag),
        _ => None,
    }
}

#[test]
fn a_map_made_again_with_another_tag_keeps_the_new_tag_after_reopen() {
    for in_batch in [false, true] {
        let (_dir, db) = recreated_as_a_map(|db| {
            let b = in_batch.then(|| db.batch());
            db.put_field_tagged(b"k", 1, b"f1", b"old").unwrap();
            if let Some(b) = b {
                b.commit().unwrap();
            }
        });
        assert_eq!(tag_of(&db, b"k"), Some(2), "in a batch: {in_batch}");
        assert_eq!(
            db.fields(b"k").unwrap(),
            vec![(b"f2".to_vec(), b"new".to_vec())]
        );
    }
}

#[test]
fn a_segmented_value_deleted_and_made_a_map_reopens_as_the_map() {
    // A multi-segment write is a batch of its own.
    let (_dir, db) = recreated_as_a_map(|db| {
        db.write_range(b"k", 0, &vec![1u8; 8000]).unwrap();
    });
    assert_eq!(tag_of(&db, b"k"), Some(2));
    assert_eq!(
        db.fields(b"k").unwrap(),
        vec![(b"f2".to_vec(), b"new".to_vec())]
    );
}

/// A batch's writes spread over threads: a thread that joins the batch
/// another opened writes members of it (a copy taken before the commit
/// opens without them, one taken after with them), a thread that did not
/// join writes plain records (in both copies), and the commit waits for
/// the joined threads to leave.
#[test]
fn writes_of_threads_that_joined_a_batch_commit_with_it_or_vanish_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let db = Db::open(&live, opts()).unwrap();
    base(&db);
    assert!(db.join_batch().is_none(), "no batch open");
    let batch = db.batch();
    db.put(b"owner", b"1").unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            let joined = db.join_batch().expect("the batch is open");
            for i in 0..20 {
                batch_step(&db, i);
            }
            // A nested batch inside the joined one is part of it too.
            let mut w = WriteBatch::new();
            w.put(b"helper-batch", b"x");
            db.write(&w).unwrap();
            drop(joined);
        });
        s.spawn(|| {
            db.put(b"outsider", b"plain").unwrap();
        });
    });
    let before = tmp.path().join("before");
    snapshot(&live, &before);
    batch.commit().unwrap();
    let after = tmp.path().join("after");
    snapshot(&live, &after);
    let committed = contents(&db);
    drop(db);

    let cut = contents(&reopen(&before));
    assert_eq!(cut.get(&b"outsider"[..]), Some(&b"plain".to_vec()));
    assert_eq!(cut.get(&b"owner"[..]), None);
    assert_eq!(cut.get(&b"helper-batch"[..]), None);
    let base_only = {
        let d = tempfile::tempdir().unwrap();
        let db = Db::open(d.path(), opts()).unwrap();
        base(&db);
        db.put(b"outsider", b"plain").unwrap();
        contents(&db)
    };
    assert_eq!(cut, base_only, "none of the batch before its commit");
    let whole = contents(&reopen(&after));
    assert_eq!(whole, committed, "all of it after");
    assert_eq!(whole.get(&b"helper-batch"[..]), Some(&b"x".to_vec()));
}

/// A batch's commit waits for a thread that joined it to leave: what that
/// thread writes after the commit began is still a member, committed with
/// the rest.
#[test]
fn a_batchs_commit_waits_for_the_threads_that_joined_it_to_leave() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let db = Db::open(&live, opts()).unwrap();
    base(&db);
    let batch = db.batch();
    db.put(b"owner", b"1").unwrap();
    let (joined_tx, joined_rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let joined = db.join_batch().expect("the batch is open");
            joined_tx.send(()).unwrap();
            // The owner is committing (or about to) meanwhile.
            std::thread::sleep(std::time::Duration::from_millis(150));
            db.put(b"late", b"member").unwrap();
            drop(joined);
        });
        joined_rx.recv().unwrap();
        let started = std::time::Instant::now();
        batch.commit().unwrap();
        assert!(
            started.elapsed() >= std::time::Duration::from_millis(100),
            "the commit did not wait for the joined thread"
        );
    });
    let after = tmp.path().join("after");
    snapshot(&live, &after);
    drop(db);
    let whole = contents(&reopen(&after));
    assert_eq!(whole.get(&b"late"[..]), Some(&b"member".to_vec()));
    assert_eq!(whole.get(&b"owner"[..]), Some(&b"1".to_vec()));
}
