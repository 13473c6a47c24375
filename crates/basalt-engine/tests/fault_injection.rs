//! Fault injection through the `Vfs` trait: a write, an fsync or a file
//! creation fails after a budget of successful calls (optionally after
//! writing a torn prefix), and the engine must
//! - fail the operation that hit the fault,
//! - refuse every later write with `Error::Poisoned` naming that fault,
//!   even though the (injected) fault is transient and the disk works again,
//! - keep serving reads,
//! - and, reopened on the real file system, hold every write it acknowledged.
//!
//! Each scenario replays one deterministic script of puts, field writes and
//! deletions against a `BTreeMap` model, with the fault placed at several
//! points of the script so it lands on different kinds of operation.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use basalt_engine::vfs::{StdFs, VFile, Vfs};
use basalt_engine::{Db, Error, KeyKind, Options, SyncPolicy};

const INJECTED_WRITE: &str = "injected write failure";
const INJECTED_SYNC: &str = "injected fsync failure";
const INJECTED_CREATE: &str = "injected create failure";

/// A budget that is off until armed.
const OFF: i64 = i64::MAX;

/// When to fail. Each budget counts the calls that still succeed; the call
/// that finds it at zero fails, and later calls succeed again (a transient
/// fault), so any refusal afterwards is the engine's own doing.
#[derive(Debug)]
struct Plan {
    writes: AtomicI64,
    header_writes: AtomicI64,
    syncs: AtomicI64,
    creates: AtomicI64,
    /// A failing write first writes the first half of its buffer.
    torn: AtomicBool,
    /// Torn writes done: (file, offset, bytes written).
    torn_writes: Mutex<Vec<(PathBuf, u64, u64)>>,
    /// How many faults fired.
    fired: AtomicI64,
}

impl Plan {
    fn new() -> Arc<Plan> {
        Arc::new(Plan {
            writes: AtomicI64::new(OFF),
            header_writes: AtomicI64::new(OFF),
            syncs: AtomicI64::new(OFF),
            creates: AtomicI64::new(OFF),
            torn: AtomicBool::new(false),
            torn_writes: Mutex::new(Vec::new()),
            fired: AtomicI64::new(0),
        })
    }

    /// Spends one call of `budget`; true when this call must fail.
    fn hit(&self, budget: &AtomicI64) -> bool {
        let mut fire = false;
        let _ = budget.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            fire = n == 0;
            if n == OFF || n < 0 {
                None
            } else {
                Some(n - 1)
            }
        });
        if fire {
            self.fired.fetch_add(1, Ordering::SeqCst);
        }
        fire
    }
}

/// `StdFs` with faults.
#[derive(Debug)]
struct FaultyFs {
    inner: StdFs,
    plan: Arc<Plan>,
}

struct FaultyFile {
    inner: Arc<dyn VFile>,
    path: PathBuf,
    plan: Arc<Plan>,
}

impl fmt::Debug for FaultyFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyFile")
            .field("path", &self.path)
            .finish()
    }
}

impl VFile for FaultyFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let fail = self.plan.hit(&self.plan.writes)
            | (offset == 0 && self.plan.hit(&self.plan.header_writes));
        if fail {
            if self.plan.torn.load(Ordering::SeqCst) && buf.len() > 1 {
                let half = &buf[..buf.len() / 2];
                self.inner.write_all_at(half, offset)?;
                self.plan.torn_writes.lock().unwrap().push((
                    self.path.clone(),
                    offset,
                    half.len() as u64,
                ));
            }
            return Err(io::Error::other(INJECTED_WRITE));
        }
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        if self.plan.hit(&self.plan.syncs) {
            return Err(io::Error::other(INJECTED_SYNC));
        }
        self.inner.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

impl Vfs for FaultyFs {
    fn create(&self, path: &Path) -> io::Result<Arc<dyn VFile>> {
        if self.plan.hit(&self.plan.creates) {
            return Err(io::Error::other(INJECTED_CREATE));
        }
        let inner = self.inner.create(path)?;
        Ok(Arc::new(FaultyFile {
            inner,
            path: path.to_path_buf(),
            plan: self.plan.clone(),
        }))
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn VFile>> {
        let inner = self.inner.open(path)?;
        Ok(Arc::new(FaultyFile {
            inner,
            path: path.to_path_buf(),
            plan: self.plan.clone(),
        }))
    }
}

// ---------------------------------------------------------------- the model

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Value(Vec<u8>),
    Map(BTreeMap<Vec<u8>, Vec<u8>>),
}

#[derive(Debug, Clone)]
enum Op {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        key: Vec<u8>,
    },
    PutField {
        key: Vec<u8>,
        field: Vec<u8>,
        value: Vec<u8>,
    },
    DeleteField {
        key: Vec<u8>,
        field: Vec<u8>,
    },
}

impl Op {
    fn key(&self) -> &[u8] {
        match self {
            Op::Put { key, .. }
            | Op::Delete { key }
            | Op::PutField { key, .. }
            | Op::DeleteField { key, .. } => key,
        }
    }

    fn run(&self, db: &Db) -> basalt_engine::Result<()> {
        match self {
            Op::Put { key, value } => db.put(key, value).map(drop),
            Op::Delete { key } => db.delete(key).map(drop),
            Op::PutField { key, field, value } => db.put_field(key, field, value).map(drop),
            Op::DeleteField { key, field } => db.delete_field(key, field).map(drop),
        }
    }

    fn apply(&self, model: &mut Model) {
        model.touched.insert(self.key().to_vec());
        match self {
            Op::Put { key, value } => {
                model
                    .entries
                    .insert(key.clone(), Entry::Value(value.clone()));
            }
            Op::Delete { key } => {
                model.entries.remove(key);
            }
            Op::PutField { key, field, value } => {
                let e = model
                    .entries
                    .entry(key.clone())
                    .or_insert_with(|| Entry::Map(BTreeMap::new()));
                match e {
                    Entry::Map(m) => {
                        m.insert(field.clone(), value.clone());
                    }
                    Entry::Value(_) => unreachable!("the script keeps value and map keys apart"),
                }
            }
            Op::DeleteField { key, field } => {
                if let Some(Entry::Map(m)) = model.entries.get_mut(key) {
                    m.remove(field);
                    if m.is_empty() {
                        model.entries.remove(key);
                    }
                }
            }
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Model {
    entries: BTreeMap<Vec<u8>, Entry>,
    /// Every key the script ever wrote, so deleted ones are checked absent.
    touched: BTreeSet<Vec<u8>>,
}

/// A value whose bytes say which step wrote it.
fn value_for(i: usize, len: usize) -> Vec<u8> {
    let mut v = format!("v{i}:").into_bytes();
    v.extend((0..len).map(|j| (i * 31 + j * 7) as u8));
    v
}

/// The deterministic script: step `i`. Value keys `k*` and map keys `m*`
/// never mix, so no step is a `WrongKind` error.
fn step(i: usize, value_len: impl Fn(usize) -> usize) -> Op {
    let len = value_len(i);
    match i % 10 {
        0..=4 => Op::Put {
            key: format!("k{}", (i * 7) % 16).into_bytes(),
            value: value_for(i, len),
        },
        5 | 6 => Op::PutField {
            key: format!("m{}", i % 4).into_bytes(),
            field: format!("f{}", i % 6).into_bytes(),
            value: value_for(i, len),
        },
        7 => Op::Delete {
            key: format!("k{}", (i * 3) % 16).into_bytes(),
        },
        8 => Op::DeleteField {
            key: format!("m{}", i % 4).into_bytes(),
            field: format!("f{}", (i + 1) % 6).into_bytes(),
        },
        _ => Op::Delete {
            key: format!("m{}", (i / 10) % 4).into_bytes(),
        },
    }
}

fn small_value(i: usize) -> usize {
    (i * 131) % 300
}

/// What the database holds for `key`, read through the public API.
fn db_entry(db: &Db, key: &[u8]) -> Option<Entry> {
    let meta = db.meta(key)?;
    match meta.kind {
        KeyKind::Value { .. } => Some(Entry::Value(
            db.get(key).expect("get").expect("meta says the key exists"),
        )),
        KeyKind::Map { .. } => Some(Entry::Map(
            db.fields(key).expect("fields").into_iter().collect(),
        )),
    }
}

fn all_keys(db: &Db) -> BTreeSet<Vec<u8>> {
    let mut keys = BTreeSet::new();
    let mut cursor = 0;
    for _ in 0..100_000 {
        let (batch, next) = db.scan(cursor, 100);
        keys.extend(batch);
        if next == 0 {
            return keys;
        }
        cursor = next;
    }
    panic!("scan did not finish");
}

/// Checks the database against the model. `unsure` is an operation that
/// failed after its record may have reached the OS: its key may show the
/// state before or after it.
fn assert_matches(db: &Db, model: &Model, unsure: Option<&Op>, ctx: &str) {
    let after = unsure.map(|op| {
        let mut m = model.clone();
        op.apply(&mut m);
        m
    });
    let mut keys = model.touched.clone();
    keys.extend(unsure.map(|op| op.key().to_vec()));
    for key in &keys {
        let got = db_entry(db, key);
        let want = model.entries.get(key).cloned();
        if got == want {
            continue;
        }
        let alt = after.as_ref().and_then(|m| m.entries.get(key).cloned());
        let is_unsure_key = unsure.is_some_and(|op| op.key() == key.as_slice());
        assert!(
            is_unsure_key && got == alt,
            "{ctx}: key {:?}: database has {got:?}, model has {want:?} (unsure op {unsure:?})",
            String::from_utf8_lossy(key)
        );
    }
    let live: BTreeSet<Vec<u8>> = model.entries.keys().cloned().collect();
    for key in all_keys(db) {
        let is_unsure_key = unsure.is_some_and(|op| op.key() == key.as_slice());
        assert!(
            live.contains(&key) || is_unsure_key,
            "{ctx}: unexpected key {:?} in the database",
            String::from_utf8_lossy(&key)
        );
    }
}

/// Asserts `r` is `Error::Poisoned` naming the original fault.
fn assert_poisoned<T: fmt::Debug>(
    r: basalt_engine::Result<T>,
    what: &str,
    op: &str,
    injected: &str,
) {
    match r {
        Err(Error::Poisoned(reason)) => assert!(
            reason.contains(injected) && reason.contains(op),
            "{what}: poison reason {reason:?} does not name the {op} failure {injected:?}"
        ),
        other => panic!("{what} after the fault: expected Err(Poisoned), got {other:?}"),
    }
}

/// Every write entry point refuses with the original reason.
fn assert_refuses_every_write(db: &Db, op: &str, injected: &str) {
    assert_poisoned(db.put(b"k1", b"after"), "put", op, injected);
    assert_poisoned(
        db.put(b"never-written", b"x"),
        "put of a new key",
        op,
        injected,
    );
    assert_poisoned(
        db.put_with_expiry(b"k2", b"x", Some(u64::MAX / 2)),
        "put_with_expiry",
        op,
        injected,
    );
    assert_poisoned(db.delete(b"k1"), "delete", op, injected);
    assert_poisoned(
        db.delete(b"no-such-key"),
        "delete of a missing key",
        op,
        injected,
    );
    assert_poisoned(db.put_field(b"m1", b"f9", b"x"), "put_field", op, injected);
    assert_poisoned(db.delete_field(b"m1", b"f1"), "delete_field", op, injected);
    assert_poisoned(db.expire(b"k1", u64::MAX / 2), "expire", op, injected);
    assert_poisoned(db.sync(), "sync", op, injected);
    assert_poisoned(db.flush(), "flush", op, injected);
    assert_poisoned(db.compact(), "compact", op, injected);
}

fn faulty_opts(plan: &Arc<Plan>) -> Options {
    Options::default()
        .shards(4)
        .background_compaction(false)
        .active_expiry(false)
        .vfs(Arc::new(FaultyFs {
            inner: StdFs,
            plan: plan.clone(),
        }))
}

fn real_opts() -> Options {
    Options::default()
        .shards(4)
        .background_compaction(false)
        .active_expiry(false)
}

/// Runs the script until an operation fails; returns the model of what was
/// acknowledged and the failed operation. Panics if nothing fails.
fn run_until_failure(
    db: &Db,
    steps: usize,
    value_len: impl Fn(usize) -> usize + Copy,
) -> (Model, Op, Error) {
    let mut model = Model::default();
    for i in 0..steps {
        let op = step(i, value_len);
        match op.run(db) {
            Ok(()) => op.apply(&mut model),
            Err(e) => return (model, op, e),
        }
    }
    panic!("no operation failed in {steps} steps");
}

fn assert_io_error(e: &Error, want_op: &str, injected: &str) {
    match e {
        Error::Io { op, source, .. } => {
            assert_eq!(*op, want_op, "failed op of {e}");
            assert!(
                source.to_string().contains(injected),
                "error {e} does not carry {injected:?}"
            );
        }
        other => panic!("expected an Io error for the fault, got {other:?}"),
    }
}

/// After a reopen the engine takes writes again and they survive another one.
fn assert_writable_after_reopen(
    dir: &Path,
    mut model: Model,
    from: usize,
    value_len: impl Fn(usize) -> usize + Copy,
) {
    {
        let db = Db::open(dir, real_opts()).expect("reopen");
        for i in from..from + 60 {
            let op = step(i, value_len);
            op.run(&db)
                .unwrap_or_else(|e| panic!("step {i} after reopen: {e}"));
            op.apply(&mut model);
        }
        assert_matches(&db, &model, None, "writes after reopen");
        db.close().expect("close");
    }
    let db = Db::open(dir, real_opts()).expect("second reopen");
    assert_matches(&db, &model, None, "second reopen");
}

fn write_failure_scenario(torn: bool) {
    // Fault points chosen so the failing step is a put, a field write, a
    // deletion and a field deletion in turn, early and late in the script.
    for budget in [0, 3, 5, 7, 18, 40, 77] {
        let dir = tempfile::tempdir().unwrap();
        let plan = Plan::new();
        plan.torn.store(torn, Ordering::SeqCst);
        let db = Db::open(dir.path(), faulty_opts(&plan).sync(SyncPolicy::Never)).expect("open");
        plan.writes.store(budget, Ordering::SeqCst);

        let (model, failed, err) = run_until_failure(&db, 400, small_value);
        let ctx = format!("write budget {budget}, torn {torn}, failed {failed:?}");
        assert_io_error(&err, "write", INJECTED_WRITE);
        assert_eq!(plan.fired.load(Ordering::SeqCst), 1, "{ctx}");
        assert_refuses_every_write(&db, "write", INJECTED_WRITE);
        // Reads go on, and the failed write is not visible.
        assert_matches(
            &db,
            &model,
            None,
            &format!("{ctx}: reads on the poisoned engine"),
        );
        drop(db);

        let torn_writes = plan.torn_writes.lock().unwrap().clone();
        if torn {
            assert_eq!(torn_writes.len(), 1, "{ctx}: one torn write expected");
            let (path, offset, written) = &torn_writes[0];
            let len = std::fs::metadata(path).unwrap().len();
            assert_eq!(
                len,
                offset + written,
                "{ctx}: the torn prefix is on disk before reopen"
            );
        }

        let db = Db::open(dir.path(), real_opts()).expect("reopen on the real file system");
        assert_matches(&db, &model, None, &format!("{ctx}: after reopen"));
        if torn {
            let (path, offset, _) = &torn_writes[0];
            let len = std::fs::metadata(path).unwrap().len();
            assert_eq!(
                len,
                *offset,
                "{ctx}: reopen cuts the torn record off {}",
                path.display()
            );
        }
        drop(db);
        assert_writable_after_reopen(dir.path(), model, 1000, small_value);
    }
}

#[test]
fn failed_write_poisons_the_engine_and_reopen_keeps_every_acknowledged_write() {
    write_failure_scenario(false);
}

#[test]
fn torn_write_poisons_the_engine_and_reopen_cuts_it_keeping_every_acknowledged_write() {
    write_failure_scenario(true);
}

#[test]
fn failed_fsync_under_sync_always_poisons_the_engine_and_reopen_keeps_acknowledged_writes() {
    for budget in [0, 4, 6, 9, 31] {
        let dir = tempfile::tempdir().unwrap();
        let plan = Plan::new();
        let db = Db::open(dir.path(), faulty_opts(&plan).sync(SyncPolicy::Always)).expect("open");
        plan.syncs.store(budget, Ordering::SeqCst);

        let (model, failed, err) = run_until_failure(&db, 400, small_value);
        let ctx = format!("fsync budget {budget}, failed {failed:?}");
        assert_io_error(&err, "fsync", INJECTED_SYNC);
        assert_refuses_every_write(&db, "fsync", INJECTED_SYNC);
        // The failed write reached the OS before its fsync failed, so it may
        // be visible; every acknowledged one must be.
        assert_matches(
            &db,
            &model,
            Some(&failed),
            &format!("{ctx}: reads on the poisoned engine"),
        );
        // Closing cannot claim the data is safe: it reports the poisoning.
        match db.close() {
            Err(basalt_engine::Error::Poisoned(why)) => {
                assert!(why.contains(INJECTED_SYNC), "{ctx}: {why}")
            }
            other => panic!("{ctx}: close of a poisoned engine returned {other:?}"),
        }

        let db = Db::open(dir.path(), real_opts()).expect("reopen on the real file system");
        assert_matches(&db, &model, Some(&failed), &format!("{ctx}: after reopen"));
        // Settle the unsure step the way the database did before writing on.
        let mut model = model;
        if db_entry(&db, failed.key()) != model.entries.get(failed.key()).cloned() {
            failed.apply(&mut model);
        }
        drop(db);
        assert_writable_after_reopen(dir.path(), model, 1000, small_value);
    }
}

/// Values of 200..700 bytes in 4 KiB files: a rotation every few writes.
fn rotating_value(i: usize) -> usize {
    200 + (i * 131) % 500
}

/// Runs the script on 4 KiB files with the fault armed by `arm`, expecting
/// the failure inside a rotation; checks poisoning and recovery.
fn rotation_failure_scenario(
    name: &str,
    sync: SyncPolicy,
    op: &str,
    injected: &str,
    arm: impl Fn(&Plan),
) {
    for round in 0..3i64 {
        let dir = tempfile::tempdir().unwrap();
        let plan = Plan::new();
        plan.torn.store(true, Ordering::SeqCst);
        let opts = faulty_opts(&plan).shards(1).max_file_size(4096).sync(sync);
        let db = Db::open(dir.path(), opts).expect("open");
        arm(&plan);
        // Later rounds fail a later rotation.
        for _ in 0..round {
            for b in [&plan.creates, &plan.header_writes, &plan.syncs] {
                let _ = b.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                    (n != OFF).then(|| n + 2)
                });
            }
        }
        let files_before = data_files(dir.path());

        let (model, failed, err) = run_until_failure(&db, 2000, rotating_value);
        let ctx = format!("{name}, round {round}, failed {failed:?}");
        assert_io_error(&err, op, injected);
        assert!(
            data_files(dir.path()).len() > files_before.len(),
            "{ctx}: the fault should come after at least one good rotation"
        );
        assert_refuses_every_write(&db, op, injected);
        // A full file is rotated *before* the record is appended, so the
        // write that failed in the rotation never took effect.
        assert_matches(
            &db,
            &model,
            None,
            &format!("{ctx}: reads on the poisoned engine"),
        );
        drop(db);

        let db = Db::open(dir.path(), real_opts()).expect("reopen on the real file system");
        assert_matches(&db, &model, None, &format!("{ctx}: after reopen"));
        drop(db);
        // Plenty of further rotations on the recovered directory.
        assert_writable_after_reopen(dir.path(), model, 5000, rotating_value);
    }
}

fn data_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for shard in std::fs::read_dir(dir).unwrap() {
        let shard = shard.unwrap().path();
        if !shard.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&shard).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|e| e == "data") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn failed_creation_of_the_next_file_during_rotation_poisons_and_reopen_keeps_acknowledged_writes() {
    rotation_failure_scenario(
        "create fails",
        SyncPolicy::Never,
        "create",
        INJECTED_CREATE,
        |p| p.creates.store(2, Ordering::SeqCst),
    );
}

#[test]
fn torn_header_of_the_next_file_during_rotation_poisons_and_reopen_removes_it() {
    rotation_failure_scenario(
        "header write torn",
        SyncPolicy::Never,
        "write",
        INJECTED_WRITE,
        |p| p.header_writes.store(2, Ordering::SeqCst),
    );
}

#[test]
fn failed_fsync_sealing_a_full_file_during_rotation_poisons_and_reopen_keeps_acknowledged_writes() {
    // Under SyncPolicy::Never the only fsyncs are the rotation's: the seal of
    // the full file, then the new file's header. Budget 4 fails the third
    // rotation's seal (seal, header, seal, header, *seal*).
    rotation_failure_scenario(
        "seal fsync fails",
        SyncPolicy::Never,
        "fsync",
        INJECTED_SYNC,
        |p| p.syncs.store(4, Ordering::SeqCst),
    );
}

#[test]
fn failed_fsync_of_the_next_files_header_during_rotation_poisons_and_reopen_keeps_acknowledged_writes(
) {
    // Budget 3: seal, header, seal, *header*.
    rotation_failure_scenario(
        "header fsync fails",
        SyncPolicy::Never,
        "fsync",
        INJECTED_SYNC,
        |p| p.syncs.store(3, Ordering::SeqCst),
    );
}

#[test]
fn after_a_failed_or_torn_write_writes_resume_without_a_reopen_and_nothing_is_lost() {
    for (budget, torn) in [(0, false), (5, true), (18, false), (40, true), (77, true)] {
        let dir = tempfile::tempdir().unwrap();
        let plan = Plan::new();
        plan.torn.store(torn, Ordering::SeqCst);
        let db = Db::open(dir.path(), faulty_opts(&plan).sync(SyncPolicy::Never)).expect("open");
        plan.writes.store(budget, Ordering::SeqCst);
        let (mut model, failed, _) = run_until_failure(&db, 400, small_value);
        let ctx = format!("write budget {budget}, torn {torn}, failed {failed:?}");
        let why = db.write_error().expect("refusing writes");
        assert!(why.contains(INJECTED_WRITE), "{ctx}: {why}");
        // The fault was transient: the disk takes writes again.
        assert!(db.resume_writes().expect("resume"), "{ctx}");
        assert_eq!(db.write_error(), None, "{ctx}");
        assert!(
            !db.resume_writes().unwrap(),
            "{ctx}: nothing left to resume"
        );
        for i in 2000..2060 {
            let op = step(i, small_value);
            op.run(&db)
                .unwrap_or_else(|e| panic!("{ctx}: step {i} after resume: {e}"));
            op.apply(&mut model);
        }
        assert_matches(&db, &model, None, &format!("{ctx}: after resume"));
        db.close().expect("close");
        let db = Db::open(dir.path(), real_opts()).expect("reopen");
        assert_matches(&db, &model, None, &format!("{ctx}: after reopen"));
    }
}

#[test]
fn after_a_failed_fsync_writes_do_not_resume() {
    let dir = tempfile::tempdir().unwrap();
    let plan = Plan::new();
    let db = Db::open(dir.path(), faulty_opts(&plan).sync(SyncPolicy::Always)).expect("open");
    plan.syncs.store(3, Ordering::SeqCst);
    let (_, _, err) = run_until_failure(&db, 400, small_value);
    assert_io_error(&err, "fsync", INJECTED_SYNC);
    let e = db
        .resume_writes()
        .expect_err("an fsync failure is not resumable");
    assert!(e.to_string().contains("not resumable"), "{e}");
    assert!(db.write_error().is_some());
    assert_refuses_every_write(&db, "fsync", INJECTED_SYNC);
}

#[test]
fn a_batch_cut_by_a_failed_write_keeps_the_engine_read_only_until_reopen_and_is_gone_after() {
    let dir = tempfile::tempdir().unwrap();
    let plan = Plan::new();
    let db = Db::open(dir.path(), faulty_opts(&plan).sync(SyncPolicy::Never)).expect("open");
    db.put(b"before", b"1").unwrap();
    plan.writes.store(3, Ordering::SeqCst);
    let b = db.batch();
    let mut failed = false;
    for i in 0..10u32 {
        if db.put(format!("batch-{i}").as_bytes(), b"x").is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed);
    assert!(
        b.commit().is_err(),
        "a batch cut by a failure cannot commit"
    );
    let e = db
        .resume_writes()
        .expect_err("memory holds members the disk lacks");
    assert!(e.to_string().contains("not resumable"), "{e}");
    drop(db);
    let db = Db::open(dir.path(), real_opts()).expect("reopen");
    assert_eq!(db.get(b"before").unwrap().as_deref(), Some(&b"1"[..]));
    for i in 0..10u32 {
        assert_eq!(db.get(format!("batch-{i}").as_bytes()).unwrap(), None);
    }
}

#[test]
fn after_a_torn_header_of_the_next_file_writes_resume_and_the_torn_file_is_gone() {
    for (name, arm) in [
        (
            "torn header",
            (|p: &Plan| p.header_writes.store(1, Ordering::SeqCst)) as fn(&Plan),
        ),
        ("failed create", |p: &Plan| {
            p.creates.store(1, Ordering::SeqCst)
        }),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let plan = Plan::new();
        plan.torn.store(true, Ordering::SeqCst);
        let opts = faulty_opts(&plan).shards(1).max_file_size(4096);
        let db = Db::open(dir.path(), opts.sync(SyncPolicy::Never)).expect("open");
        arm(&plan);
        let (mut model, failed, _) = run_until_failure(&db, 2000, rotating_value);
        let ctx = format!("{name}, failed {failed:?}");
        assert!(db.resume_writes().expect("resume"), "{ctx}");
        for i in 3000..3100 {
            let op = step(i, rotating_value);
            op.run(&db)
                .unwrap_or_else(|e| panic!("{ctx}: step {i} after resume: {e}"));
            op.apply(&mut model);
        }
        assert_matches(&db, &model, None, &format!("{ctx}: after resume"));
        drop(db);
        // No half-created file is left in the middle to refuse the open.
        let db = Db::open(dir.path(), real_opts()).expect("reopen");
        assert_matches(&db, &model, None, &format!("{ctx}: after reopen"));
    }
}

#[test]
fn a_write_failing_or_torn_at_any_record_of_a_batch_leaves_none_of_it_after_reopen() {
    // Twelve members over four shards, then the commit: the fault lands on
    // each of those thirteen writes in turn, whole or torn in half.
    for torn in [false, true] {
        for budget in 0..13i64 {
            let dir = tempfile::tempdir().unwrap();
            let plan = Plan::new();
            plan.torn.store(torn, Ordering::SeqCst);
            let db =
                Db::open(dir.path(), faulty_opts(&plan).sync(SyncPolicy::Never)).expect("open");
            for i in 0..12u32 {
                db.put(format!("k{i}").as_bytes(), b"before").unwrap();
            }
            plan.writes.store(budget, Ordering::SeqCst);
            let b = db.batch();
            let mut written = 0;
            for i in 0..12u32 {
                if db.put(format!("k{i}").as_bytes(), b"batch").is_err() {
                    break;
                }
                written += 1;
            }
            let committed = b.commit();
            let ctx = format!("budget {budget}, torn {torn}, {written} members written");
            // (A batch that wrote nothing has nothing to commit.)
            assert!(
                committed.is_err() || written == 0,
                "{ctx}: the batch must not commit"
            );
            drop(db);
            for pass in ["scan", "hints"] {
                let db = Db::open(dir.path(), real_opts()).expect("reopen");
                for i in 0..12u32 {
                    assert_eq!(
                        db.get(format!("k{i}").as_bytes()).unwrap().as_deref(),
                        Some(&b"before"[..]),
                        "{ctx}, {pass}: k{i}"
                    );
                }
                if pass == "hints" {
                    db.compact().unwrap();
                }
                db.close().unwrap();
            }
            let db = Db::open(dir.path(), real_opts()).expect("reopen after compaction");
            for i in 0..12u32 {
                assert_eq!(
                    db.get(format!("k{i}").as_bytes()).unwrap().as_deref(),
                    Some(&b"before"[..]),
                    "{ctx}, after compaction: k{i}"
                );
            }
        }
    }
}
