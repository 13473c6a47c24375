//! Appends through a writable memory map: the active file is extended ahead
//! of its records with `fallocate` and records are stored into its map, so
//! while it is open the file ends in reserved zeros. These tests prove the
//! rules that keep that invisible and safe:
//! - a crash leaves the zero tail; reopening cuts it and appends continue;
//! - a clean close and sealing cut it, so files at rest end at their last
//!   record (and hint files match them); zeros after a sealed file's last
//!   record stay corruption;
//! - a directory written by the `pwrite` path opens unchanged, and one
//!   written through the map opens on a `pwrite`-only VFS;
//! - a failing `fallocate` falls back to `pwrite` for that file and loses
//!   nothing; a full disk fails the write and poisons, as `pwrite` always did.
//!
//! `kill9.rs` kills a child process writing through the map.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use basalt_engine::vfs::{FileMap, StdFs, VFile, Vfs};
use basalt_engine::{Db, Error, Options, SyncPolicy};

/// The engine's reservation step (`PREALLOCATE_STEP`).
const STEP: u64 = 2 << 20;

fn opts() -> Options {
    Options::default()
        .shards(1)
        .background_compaction(false)
        .active_expiry(false)
        .sync(SyncPolicy::Never)
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:08}").into_bytes()
}

/// A value that names its key and generation; never ends in a zero byte,
/// so a file that ends at its last record does not end in zeros.
fn value(i: u64, gen: u64) -> Vec<u8> {
    let mut v = format!("v{gen}-{i}-").into_bytes();
    let n = 20 + ((i * 37 + gen * 11) % 300) as usize;
    v.extend((0..n).map(|j| (i as usize + j * 7 + gen as usize) as u8 | 1));
    v
}

fn data_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir.join("shard-0000"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "data"))
        .collect();
    v.sort();
    v
}

fn file_len(p: &Path) -> u64 {
    fs::metadata(p).unwrap().len()
}

/// (path of the active file, its real length) from the engine's figures.
fn active_file(db: &Db) -> (PathBuf, u64) {
    let st = db.stats();
    let f = st.files.iter().find(|f| f.active).unwrap();
    let path = db
        .dir()
        .join(format!("shard-{:04}", f.shard))
        .join(format!("{:010}.data", f.id));
    (path, f.total_bytes)
}

/// Copies a database directory (not its lock) while it is open: the copy
/// holds exactly what the page cache holds, which is what a process killed
/// at this moment leaves behind.
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

fn check_all(db: &Db, n: u64, gen: u64, ctx: &str) {
    for i in 0..n {
        assert_eq!(
            db.get(&key(i)).unwrap(),
            Some(value(i, gen)),
            "{ctx}: key {i}"
        );
    }
}

#[test]
fn a_zero_tail_after_the_last_record_is_cut_on_reopen_and_appends_continue() {
    let base = tempfile::tempdir().unwrap();
    let src = base.path().join("src");
    let db = Db::open(&src, opts()).unwrap();
    for i in 0..500 {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    let (active, real_len) = active_file(&db);
    assert_eq!(
        file_len(&active),
        STEP,
        "the active file is extended a reservation step ahead of its records"
    );
    assert!(real_len < STEP);

    // What a kill -9 now would leave.
    let crashed = base.path().join("crashed");
    copy_dir(&src, &crashed);
    drop(db);
    let copy = data_files(&crashed).pop().unwrap();
    assert_eq!(file_len(&copy), STEP);
    let tail = fs::read(&copy).unwrap()[real_len as usize..].to_vec();
    assert!(tail.iter().all(|&b| b == 0), "the reserved tail is zeros");

    let db = Db::open(&crashed, opts()).unwrap();
    assert_eq!(
        file_len(&copy),
        real_len,
        "open cut the zero tail back to the last record"
    );
    check_all(&db, 500, 0, "after the cut");
    // Appends continue where the records end, through the map again.
    for i in 500..1000 {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    assert_eq!(file_len(&copy), STEP);
    drop(db);
    let db = Db::open(&crashed, opts()).unwrap();
    check_all(&db, 1000, 0, "after appending past the cut");
}

#[test]
fn a_clean_close_leaves_the_active_file_at_its_real_length() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..300 {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    let (active, real_len) = active_file(&db);
    assert!(file_len(&active) > real_len, "space is reserved while open");
    db.close().unwrap();
    assert_eq!(file_len(&active), real_len, "close cut the reserved tail");
    assert!(active.with_extension("hint").exists(), "close wrote a hint");
    let bytes = fs::read(&active).unwrap();
    assert_ne!(
        *bytes.last().unwrap(),
        0,
        "the file ends at its last record"
    );

    // The hint describes the cut file, so it is used; the file stays active.
    let db = Db::open(dir.path(), opts()).unwrap();
    check_all(&db, 300, 0, "after a clean close");
    assert_eq!(active_file(&db).1, real_len);
    for i in 0..300 {
        db.put(&key(i), &value(i, 1)).unwrap();
    }
    db.close().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    check_all(&db, 300, 1, "after a second session");
}

#[test]
fn sealing_truncates_the_file_to_its_last_record() {
    let dir = tempfile::tempdir().unwrap();
    // Files of 5 MiB: reservations of 2, 4 and 5 MiB, then a rotation.
    let db = Db::open(dir.path(), opts().max_file_size(5 << 20)).unwrap();
    let mut n = 0;
    while db.stats().files.len() < 3 {
        db.put(&key(n), &value(n, 0)).unwrap();
        n += 1;
    }
    let st = db.stats();
    let sealed: Vec<_> = st.files.iter().filter(|f| !f.active).collect();
    assert_eq!(sealed.len(), 2);
    for f in sealed {
        let path = dir.path().join(format!("shard-0000/{:010}.data", f.id));
        assert_eq!(
            file_len(&path),
            f.total_bytes,
            "sealed file {} ends at its last record",
            f.id
        );
        assert!(f.total_bytes <= 5 << 20 && f.total_bytes > 4 << 20);
    }
    // The hints written for the sealed files match their cut lengths.
    db.flush().unwrap();
    drop(db);
    let db = Db::open(dir.path(), opts().max_file_size(5 << 20)).unwrap();
    check_all(&db, n, 0, "after sealing");
    // (A hint that does not match its data file's length is deleted.)
    for f in db.stats().files.iter().filter(|f| !f.active) {
        let hint = dir.path().join(format!("shard-0000/{:010}.hint", f.id));
        assert!(hint.exists(), "the hint of sealed file {} was used", f.id);
    }
}

#[test]
fn a_zero_tail_on_a_sealed_file_is_corruption_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let o = || opts().max_file_size(64 << 10);
    let db = Db::open(dir.path(), o()).unwrap();
    let mut n = 0;
    while db.stats().files.len() < 3 {
        db.put(&key(n), &value(n, 0)).unwrap();
        n += 1;
    }
    db.close().unwrap();
    // Zeros after the first (sealed) file's last record, and no hint to
    // trust instead: only the newest log file may end in zeros.
    let first = data_files(dir.path()).remove(0);
    let real_len = file_len(&first);
    fs::remove_file(first.with_extension("hint")).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&first)
        .unwrap()
        .set_len(real_len + 4096)
        .unwrap();
    match Db::open(dir.path(), o()) {
        Err(Error::Corrupt { path, offset, .. }) => {
            assert_eq!(path, first);
            assert_eq!(offset, real_len);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

// ------------------------------------------------- VFS wrappers used below

/// Counters and failure budgets shared by a VFS and its files.
#[derive(Debug, Default)]
struct Counts {
    /// `write_all_at` calls past a file's header (record appends).
    record_writes: AtomicU64,
    /// `allocate` calls.
    allocates: AtomicU64,
    /// Calls of `allocate` that still succeed; the next one fails (with
    /// half of the range allocated first). Negative: never fail.
    allocate_budget: AtomicI64,
    /// Record writes that still succeed; the next one fails with ENOSPC.
    /// Negative: never fail.
    write_budget: AtomicI64,
}

impl Counts {
    fn new(allocate_budget: i64, write_budget: i64) -> Arc<Counts> {
        Arc::new(Counts {
            allocate_budget: AtomicI64::new(allocate_budget),
            write_budget: AtomicI64::new(write_budget),
            ..Counts::default()
        })
    }
}

/// Spends one call of a budget; true when the call must fail. One call
/// fails, later ones succeed again (the budget turns negative): whatever is
/// refused afterwards is the engine's own doing.
fn spend(budget: &AtomicI64) -> bool {
    budget.fetch_sub(1, Ordering::SeqCst) == 0
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(28)
}

/// `StdFs`, optionally without the writable map (the `pwrite` path, as
/// every build before appends through maps wrote), counting calls and
/// failing `allocate` and record writes on a budget.
#[derive(Debug)]
struct CountingFs {
    writable_maps: bool,
    counts: Arc<Counts>,
}

struct CountingFile {
    inner: Arc<dyn VFile>,
    writable_maps: bool,
    counts: Arc<Counts>,
}

impl fmt::Debug for CountingFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountingFile").finish_non_exhaustive()
    }
}

impl VFile for CountingFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if offset > 0 {
            self.counts.record_writes.fetch_add(1, Ordering::SeqCst);
            if spend(&self.counts.write_budget) {
                return Err(enospc());
            }
        }
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn map(&self, len: u64) -> Option<FileMap> {
        self.inner.map(len)
    }
    fn map_mut(&self, len: u64) -> Option<FileMap> {
        if self.writable_maps {
            self.inner.map_mut(len)
        } else {
            None
        }
    }
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.counts.allocates.fetch_add(1, Ordering::SeqCst);
        if spend(&self.counts.allocate_budget) {
            // A file system that ran out of space half-way: the file may
            // have grown although the call failed.
            self.inner.allocate(offset, len / 2)?;
            return Err(enospc());
        }
        self.inner.allocate(offset, len)
    }
}

impl Vfs for CountingFs {
    fn create(&self, path: &Path) -> io::Result<Arc<dyn VFile>> {
        Ok(Arc::new(CountingFile {
            inner: StdFs.create(path)?,
            writable_maps: self.writable_maps,
            counts: self.counts.clone(),
        }))
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn VFile>> {
        Ok(Arc::new(CountingFile {
            inner: StdFs.open(path)?,
            writable_maps: self.writable_maps,
            counts: self.counts.clone(),
        }))
    }
}

fn counting(writable_maps: bool, counts: &Arc<Counts>) -> Options {
    opts().vfs(Arc::new(CountingFs {
        writable_maps,
        counts: counts.clone(),
    }))
}

/// Every data file's name and bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    data_files(dir)
        .into_iter()
        .map(|p| {
            let b = fs::read(&p).unwrap();
            (p, b)
        })
        .collect()
}

#[test]
fn a_directory_written_by_the_pwrite_path_opens_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let counts = Counts::new(-1, -1);
    let small = |o: Options| o.max_file_size(64 << 10);
    // Written with pwrite only: sealed files, their hints, an active file
    // closed cleanly, then more records after a crash-like drop of the hint.
    let db = Db::open(dir.path(), small(counting(false, &counts))).unwrap();
    for i in 0..1000 {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    db.close().unwrap();
    assert!(counts.record_writes.load(Ordering::SeqCst) >= 1000);
    assert_eq!(counts.allocates.load(Ordering::SeqCst), 0);
    assert!(data_files(dir.path()).len() > 2);
    let before = snapshot(dir.path());

    // Opened by the map path: nothing on disk changes until it writes.
    let db = Db::open(dir.path(), small(opts())).unwrap();
    check_all(&db, 1000, 0, "pwrite directory, map build");
    assert_eq!(snapshot(dir.path()), before, "open changed a data file");
    for i in 0..1000 {
        db.put(&key(i), &value(i, 1)).unwrap();
    }
    db.close().unwrap();
    // Every file written through the map ends at its last record again.
    for (p, b) in snapshot(dir.path()) {
        assert_ne!(b.last(), Some(&0), "{} ends in zeros", p.display());
    }

    // And the pwrite path reads what the map path wrote.
    let db = Db::open(dir.path(), small(counting(false, &counts))).unwrap();
    check_all(&db, 1000, 1, "map directory, pwrite build");
}

#[test]
fn a_failing_fallocate_falls_back_to_pwrite_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // One reservation succeeds; the second (the first file's next step)
    // fails half-way; the file then appends with pwrite until it is sealed,
    // and the next file reserves again.
    let counts = Counts::new(1, -1);
    let o = || counting(true, &counts).max_file_size(5 << 20);
    let db = Db::open(dir.path(), o()).unwrap();
    let mut n = 0;
    while counts.allocates.load(Ordering::SeqCst) < 2 {
        db.put(&key(n), &value(n, 0)).unwrap();
        n += 1;
    }
    assert_eq!(
        counts.record_writes.load(Ordering::SeqCst),
        1,
        "the fallback"
    );
    let stored = n - 1;
    for i in n..n + 100 {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    n += 100;
    let (active, real_len) = active_file(&db);
    assert_eq!(
        file_len(&active),
        3 << 20,
        "the failed reservation grew the file half-way"
    );
    assert!(real_len < 3 << 20);
    while db.stats().files.len() < 2 {
        db.put(&key(n), &value(n, 0)).unwrap();
        n += 1;
    }
    for i in n..n + 1000 {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    n += 1000;
    assert_eq!(
        counts.allocates.load(Ordering::SeqCst),
        3,
        "two for the first file, one for the next"
    );
    let pwrites = counts.record_writes.load(Ordering::SeqCst);
    assert!(
        stored > 5000,
        "the first 2 MiB went through the map ({stored})"
    );
    // The record that opened the second file and the 1000 after it went
    // through the second file's map.
    assert_eq!(
        pwrites,
        n - stored - 1001,
        "the rest of the first file used pwrite, the second file the map"
    );
    // Sealing cut what the failed reservation had added.
    let st = db.stats();
    let first = st.files.iter().find(|f| !f.active).unwrap();
    let first_path = dir.path().join(format!("shard-0000/{:010}.data", first.id));
    assert_eq!(file_len(&first_path), first.total_bytes);
    check_all(&db, n, 0, "while open");
    db.close().unwrap();

    let db = Db::open(dir.path(), opts().max_file_size(5 << 20)).unwrap();
    check_all(&db, n, 0, "after reopening");
}

#[test]
fn a_full_disk_under_the_map_fails_the_write_and_poisons_like_pwrite() {
    let dir = tempfile::tempdir().unwrap();
    // The first reservation succeeds; then the disk is full: reserving
    // fails, and so does the pwrite the engine falls back to.
    let counts = Counts::new(1, 0);
    let db = Db::open(dir.path(), counting(true, &counts)).unwrap();
    let mut acked = 0;
    let err = loop {
        match db.put(&key(acked), &value(acked, 0)) {
            Ok(_) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 100_000, "the disk never filled");
    };
    assert!(acked > 1000, "the first reservation held {acked} records");
    match &err {
        Error::Io { source, .. } => assert_eq!(source.raw_os_error(), Some(28), "{err}"),
        other => panic!("expected the write's ENOSPC, got {other}"),
    }
    // Poisoned: later writes are refused naming the failure, reads go on.
    counts.write_budget.store(-1, Ordering::SeqCst);
    counts.allocate_budget.store(-1, Ordering::SeqCst);
    match db.put(b"after", b"full") {
        Err(Error::Poisoned(why)) => assert!(why.contains("write"), "{why}"),
        other => panic!("expected Poisoned, got {other:?}"),
    }
    check_all(&db, acked, 0, "reads while poisoned");
    assert!(matches!(db.close(), Err(Error::Poisoned(_))));

    let db = Db::open(dir.path(), opts()).unwrap();
    check_all(&db, acked, 0, "after reopening");
    assert_eq!(db.get(&key(acked)).unwrap(), None, "the failed write");
    assert_eq!(db.len(), acked);
}
