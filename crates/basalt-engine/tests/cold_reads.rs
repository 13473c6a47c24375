//! Cold reads (`Db::get_or_cold`): a value whose pages are not in memory
//! comes back as a detached read that returns what the key held when it
//! was looked up, whatever happens to the key and its file afterwards; a
//! resident value is read in place; a failing disk read is an error for
//! that key, and reads go on.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use basalt_engine::vfs::{FileMap, StdFs, VFile, Vfs};
use basalt_engine::{Db, Error, Lookup, Options, Residency, SyncPolicy};

fn opts() -> Options {
    Options::default()
        .shards(1)
        .max_file_size(16 << 10)
        .background_compaction(false)
        .active_expiry(false)
        .sync(SyncPolicy::Never)
}

fn value(i: u64, gen: u64) -> Vec<u8> {
    let mut v = format!("v{gen}-{i}-").into_bytes();
    v.resize(3000 + (i as usize * 131) % 5000, b'a' + (gen % 26) as u8);
    v
}

/// Held by the tests that count staged reads: the counter is the
/// process's, and `cargo test` runs tests in parallel threads.
static STAGING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn staging() -> std::sync::MutexGuard<'static, ()> {
    STAGING.lock().unwrap_or_else(|e| e.into_inner())
}

fn read_cold(db: &Db, key: &[u8]) -> Vec<u8> {
    match db.get_or_cold(key, |v| v.to_vec()).unwrap() {
        Lookup::Cold(c) => c.read_with(|v| v.to_vec()).unwrap(),
        other => panic!("expected a cold read of {key:?}, got {other:?}"),
    }
}

#[test]
fn a_cold_read_returns_what_the_key_held_at_lookup_after_overwrite_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.set_residency(Residency::AllCold);
    for i in 0..40 {
        db.put(format!("k{i}").as_bytes(), &value(i, 1)).unwrap();
    }
    // Looked up now, read later.
    let pending: Vec<_> = (0..40)
        .map(
            |i| match db.get_or_cold(format!("k{i}").as_bytes(), |_| ()).unwrap() {
                Lookup::Cold(c) => c,
                other => panic!("k{i}: {other:?}"),
            },
        )
        .collect();
    // Every key overwritten or deleted, and the files that held the first
    // values compacted away.
    for i in 0..40 {
        if i % 3 == 0 {
            db.delete(format!("k{i}").as_bytes()).unwrap();
        } else {
            db.put(format!("k{i}").as_bytes(), &value(i, 2)).unwrap();
        }
    }
    let report = db.compact().unwrap();
    assert!(
        report.files_compacted > 0,
        "compaction removed no file: {report:?}"
    );
    for (i, c) in pending.iter().enumerate() {
        let got = c.read_with(|v| v.to_vec()).unwrap();
        assert_eq!(got, value(i as u64, 1), "k{i}");
    }
    // New lookups see the new state.
    for i in 0..40u64 {
        let key = format!("k{i}");
        if i % 3 == 0 {
            assert!(matches!(
                db.get_or_cold(key.as_bytes(), |_| ()).unwrap(),
                Lookup::Absent
            ));
        } else {
            assert_eq!(read_cold(&db, key.as_bytes()), value(i, 2));
        }
    }
}

#[test]
fn in_place_mode_never_hands_a_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.residency(), Residency::InPlace);
    db.put(b"k", &value(7, 1)).unwrap();
    match db.get_or_cold(b"k", |v| v.to_vec()).unwrap() {
        Lookup::Here(v) => assert_eq!(v, value(7, 1)),
        other => panic!("{other:?}"),
    }
}

/// Drops the clean cached pages of every data file under `dir`.
fn drop_cached_pages(dir: &Path) {
    for shard in std::fs::read_dir(dir).unwrap() {
        let shard = shard.unwrap().path();
        if !shard.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&shard).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|e| e == "data") {
                let file = File::open(&p).unwrap();
                file.sync_all().unwrap();
                // SAFETY: a valid descriptor; advice has no memory effects.
                let rc = unsafe {
                    libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED)
                };
                assert_eq!(rc, 0);
            }
        }
    }
}

#[test]
fn under_check_a_value_out_of_memory_is_read_past_the_cache_once_and_served_in_place_once_read_again(
) {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        for i in 0..20 {
            db.put(format!("k{i}").as_bytes(), &value(i, 1)).unwrap();
        }
        db.close().unwrap();
    }
    // Reopened: the files are mapped but no page was touched through the
    // maps, so advice can drop them from the page cache.
    let db = Db::open(dir.path(), opts()).unwrap();
    db.set_residency(Residency::Check);
    drop_cached_pages(dir.path());
    let (direct_before, _) = basalt_engine::cold_read_counts();
    let (mut cold, mut twice) = (0, 0);
    for i in 0..20u64 {
        let key = format!("k{i}");
        // A value out of memory is cold; its first cold read goes past the
        // page cache (where the file system can), so it may be cold once
        // more; that second read admits it, and from then on it is read in
        // place.
        let mut reads = 0;
        loop {
            match db.get_or_cold(key.as_bytes(), |v| v.to_vec()).unwrap() {
                Lookup::Cold(c) => {
                    reads += 1;
                    assert!(reads <= 2, "{key} still cold after {reads} cold reads");
                    assert_eq!(c.read_with(|v| v.to_vec()).unwrap(), value(i, 1));
                }
                Lookup::Here(v) => {
                    assert_eq!(v, value(i, 1));
                    break;
                }
                Lookup::Absent => panic!("{key} absent"),
                Lookup::ColdValue(_) => panic!("{key} is no segmented value"),
            }
        }
        cold += usize::from(reads > 0);
        twice += usize::from(reads == 2);
    }
    // Some file systems (tmpfs) cannot drop pages; there every read is warm.
    if cold == 0 {
        eprintln!("no page could be dropped here; the cold branch was not taken");
        return;
    }
    let (direct_after, _) = basalt_engine::cold_read_counts();
    if direct_after > direct_before {
        assert!(
            twice > 0,
            "reads went past the cache, yet no key was cold twice"
        );
    } else {
        eprintln!("no direct reads on this file system: every cold read went through the cache");
    }
}

#[test]
fn direct_reads_return_the_bytes_at_any_offset_and_length_and_refuse_past_the_end() {
    use basalt_engine::vfs::DirectBuf;
    let dir = tempfile::tempdir().unwrap();
    let file = StdFs.create(&dir.path().join("f")).unwrap();
    let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    file.write_all_at(&data, 0).unwrap();
    file.sync_data().unwrap();
    let mut buf = DirectBuf::new();
    let cases = [
        (0, 1),
        (0, 4096),
        (1, 4095),
        (4095, 2),
        // Around 512-byte blocks, the alignment of a disk with 512-byte
        // logical sectors (statx).
        (511, 2),
        (512, 512),
        (1000, 100),
        (1500, 1100),
        (100, 9000),
        (8191, 8193),
        (19_999, 1),
        (16_000, 4000),
        (0, 20_000),
    ];
    for (off, len) in cases {
        match file.read_direct(&mut buf, off as u64, len).unwrap() {
            Some(bytes) => assert_eq!(bytes, &data[off..off + len], "({off}, {len})"),
            None => {
                eprintln!("this file system has no direct reads; nothing to check");
                return;
            }
        }
    }
    for (off, len) in [(19_999, 2), (20_000, 1), (30_000, 10)] {
        let err = file.read_direct(&mut buf, off, len).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "({off}, {len})");
    }
}

/// `StdFs` whose reads fail with EIO while `failing` is set.
#[derive(Debug)]
struct FailingReads {
    failing: Arc<AtomicBool>,
}

struct FailingFile {
    inner: Arc<dyn VFile>,
    failing: Arc<AtomicBool>,
}

impl fmt::Debug for FailingFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FailingFile")
    }
}

impl VFile for FailingFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
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
}

impl Vfs for FailingReads {
    fn create(&self, path: &Path) -> io::Result<Arc<dyn VFile>> {
        Ok(Arc::new(FailingFile {
            inner: StdFs.create(path)?,
            failing: self.failing.clone(),
        }))
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn VFile>> {
        Ok(Arc::new(FailingFile {
            inner: StdFs.open(path)?,
            failing: self.failing.clone(),
        }))
    }
}

#[test]
fn a_failing_disk_read_is_an_error_for_that_key_and_reads_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let failing = Arc::new(AtomicBool::new(false));
    let db = Db::open(
        dir.path(),
        opts().vfs(Arc::new(FailingReads {
            failing: failing.clone(),
        })),
    )
    .unwrap();
    db.put(b"a", &value(1, 1)).unwrap();
    db.put(b"b", &value(2, 1)).unwrap();
    db.set_residency(Residency::AllCold);
    let Lookup::Cold(a) = db.get_or_cold(b"a", |_| ()).unwrap() else {
        panic!("not cold")
    };
    failing.store(true, Ordering::SeqCst);
    match a.read_with(|v| v.to_vec()) {
        Err(Error::Io { path, source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::EIO));
            assert!(path.extension().is_some_and(|e| e == "data"), "{path:?}");
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
    failing.store(false, Ordering::SeqCst);
    // The same read and others succeed once the disk answers again; writes
    // were never affected.
    assert_eq!(a.read_with(|v| v.to_vec()).unwrap(), value(1, 1));
    assert_eq!(read_cold(&db, b"b"), value(2, 1));
    db.put(b"c", b"after").unwrap();
    assert_eq!(read_cold(&db, b"c"), b"after");
}

#[test]
fn a_cold_field_read_returns_the_field_at_lookup_after_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.set_residency(Residency::AllCold);
    db.put_field(b"h", b"f", &value(1, 1)).unwrap();
    db.put_field(b"h", b"g", &value(2, 1)).unwrap();
    let Lookup::Cold(f) = db.get_field_or_cold(b"h", b"f").unwrap() else {
        panic!("not cold")
    };
    db.put_field(b"h", b"f", &value(1, 2)).unwrap();
    assert_eq!(f.read_with(|v| v.to_vec()).unwrap(), value(1, 1));
    match db.get_field_or_cold(b"h", b"f").unwrap() {
        Lookup::Cold(c) => assert_eq!(c.read_with(|v| v.to_vec()).unwrap(), value(1, 2)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        db.get_field_or_cold(b"h", b"missing").unwrap(),
        Lookup::Absent
    ));
    assert!(matches!(
        db.get_field_or_cold(b"nothing", b"f").unwrap(),
        Lookup::Absent
    ));
    db.set_residency(Residency::InPlace);
    match db.get_field_or_cold(b"h", b"g").unwrap() {
        Lookup::Here(v) => assert_eq!(v, value(2, 1)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn after_a_run_of_resident_checks_only_a_sample_is_checked_until_one_misses() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), opts().max_file_size(4 << 20)).unwrap();
        for i in 0..200 {
            db.put(format!("k{i:03}").as_bytes(), &value(i, 1)).unwrap();
        }
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), opts().max_file_size(4 << 20)).unwrap();
    db.set_residency(Residency::Check);
    let read = |i: u64| match db
        .get_or_cold(format!("k{i:03}").as_bytes(), |v| v.to_vec())
        .unwrap()
    {
        Lookup::Here(v) => {
            assert_eq!(v, value(i, 1));
            true
        }
        Lookup::Cold(c) => {
            assert_eq!(c.read_with(|v| v.to_vec()).unwrap(), value(i, 1));
            false
        }
        Lookup::Absent => panic!("k{i} absent"),
        Lookup::ColdValue(_) => panic!("k{i} is no segmented value"),
    };
    // Just written: resident, and 64 resident checks in a row start sampling.
    for i in 0..64 {
        assert!(read(i), "k{i} not resident right after it was written");
    }
    drop_cached_pages(dir.path());
    // Sampling: the next reads are mostly taken as resident (read in place)
    // until a sampled check finds a page missing; from then on every read
    // is checked and every dropped value is cold.
    let here: Vec<bool> = (64..120).map(read).collect();
    let first_cold = here.iter().position(|h| !h);
    let Some(first_cold) = first_cold else {
        eprintln!("no page could be dropped here; nothing to observe");
        return;
    };
    assert!(
        first_cold < 16,
        "a missing page went unchecked for {first_cold} reads"
    );
    assert!(
        first_cold > 0,
        "the read right after 64 resident checks was checked"
    );
    // (A cold read's pages may hold the start of the next record, so a
    // neighbour can be resident; a skipped run would be 15 in a row.)
    let after = &here[first_cold..];
    let resident = after.iter().filter(|h| **h).count();
    assert!(
        resident * 10 <= after.len(),
        "after a miss every read is checked again: {here:?}"
    );
}

/// Reads what `plan` says with one `pread`, as a ring would.
fn read_planned(plan: &basalt_engine::ReadPlan, buf: &mut basalt_engine::vfs::DirectBuf) -> usize {
    let bytes = buf.bytes_mut(plan.len);
    // SAFETY: `bytes` is `plan.len` writable bytes; the descriptor is open
    // while the `ColdRead` that planned it lives.
    let n = unsafe {
        libc::pread(
            plan.fd,
            bytes.as_mut_ptr().cast(),
            plan.len,
            plan.offset as libc::off_t,
        )
    };
    assert!(n >= 0, "{}", io::Error::last_os_error());
    n as usize
}

#[test]
fn a_planned_read_of_a_sealed_file_is_direct_and_aligned_and_refusing_direct_reads_sticks() {
    use basalt_engine::vfs::{DirectBuf, DIRECT_ALIGN};
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.set_residency(Residency::AllCold);
    // Enough values to seal several 16 KiB files.
    for i in 0..20 {
        db.put(format!("k{i}").as_bytes(), &value(i, 1)).unwrap();
    }
    let mut buf = DirectBuf::new();
    let (mut direct, mut refused) = (0, false);
    for i in 0..20u64 {
        let key = format!("k{i}");
        let Lookup::Cold(mut read) = db.get_or_cold(key.as_bytes(), |_| ()).unwrap() else {
            panic!("{key} not cold under all-cold");
        };
        let plan = read.plan().expect("StdFs hands out descriptors");
        if plan.direct {
            direct += 1;
            // The file system's alignment (statx), at most a page.
            assert!(
                plan.align.is_power_of_two() && DIRECT_ALIGN.is_multiple_of(plan.align),
                "{plan:?}"
            );
            assert_eq!(plan.offset % plan.align as u64, 0, "{plan:?}");
            assert_eq!(plan.len % plan.align, 0, "{plan:?}");
            assert!(plan.skip < plan.align, "{plan:?}");
        } else {
            assert_eq!(plan.align, 1, "{plan:?}");
        }
        let n = read_planned(&plan, &mut buf);
        let record = plan
            .record(&buf.bytes_mut(plan.len)[..n])
            .expect("the read holds the record");
        let got = read.finish(record, |v| v.to_vec()).unwrap();
        assert_eq!(got, value(i, 1), "{key}");
        // A short read holds no record.
        assert!(plan.record(&buf.bytes_mut(plan.len)[..plan.skip]).is_none());
        if plan.direct && !refused {
            // As a ring does when the device refuses the alignment: the
            // retry goes through the page cache; later reads of this file
            // align to a page if they aligned to less, and once refused at
            // a page they go through the page cache for good.
            // Later reads are of the next keys, in the same file (a
            // second read of one record would be admitted to the page
            // cache whatever the refusal).
            let smaller = plan.align < DIRECT_ALIGN;
            read.refuse_direct(plan.align);
            assert_eq!(read.read_with(|v| v.to_vec()).unwrap(), value(i, 1));
            let next = |j: u64| {
                let key = format!("k{j}");
                let Lookup::Cold(mut read) = db.get_or_cold(key.as_bytes(), |_| ()).unwrap() else {
                    panic!("{key} not cold under all-cold");
                };
                (read.plan().unwrap(), read)
            };
            let mut j = i + 1;
            if smaller {
                let (again, mut read) = next(j);
                assert!(
                    again.direct && again.align == DIRECT_ALIGN,
                    "k{j}: {again:?}"
                );
                assert_eq!(again.fd, plan.fd, "k{j} lies in k{i}'s file");
                // A late refusal of a read planned at the smaller alignment
                // (one in flight at the step-up) does not stop direct reads.
                read.refuse_direct(plan.align);
                j += 1;
                let (again, mut read) = next(j);
                assert!(
                    again.direct && again.align == DIRECT_ALIGN,
                    "k{j}: {again:?}"
                );
                let n = read_planned(&again, &mut buf);
                let record = again.record(&buf.bytes_mut(again.len)[..n]).unwrap();
                assert_eq!(read.finish(record, |v| v.to_vec()).unwrap(), value(j, 1));
                read.refuse_direct(again.align);
                j += 1;
            }
            let (again, _) = next(j);
            assert!(!again.direct, "k{j}: direct after refusal: {again:?}");
            refused = true;
        }
    }
    if direct == 0 {
        eprintln!("no direct reads on this file system; nothing planned direct");
    }
}

#[test]
fn a_maps_cold_fields_are_read_in_spans_staged_and_used_until_cleared() {
    let _staging = staging();
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts().max_file_size(1 << 20)).unwrap();
    db.set_residency(Residency::AllCold);
    for i in 0..30u64 {
        let v = value(i, 1);
        db.put_field(b"h", format!("f{i:02}").as_bytes(), &v[..v.len() / 4])
            .unwrap();
    }
    // Written together, the fields lie together: a few reads, not 30.
    let reads = db.cold_field_reads(b"h", 256);
    assert!(
        !reads.is_empty() && reads.len() < 5,
        "{} reads",
        reads.len()
    );
    assert!(db.cold_field_reads(b"h", 10).is_empty(), "over the cap");
    assert!(db.cold_field_reads(b"missing", 256).is_empty());
    let before = basalt_engine::staged_reads();
    for read in &reads {
        let bytes = read.read_record().unwrap();
        read.check_record(&bytes).unwrap();
        basalt_engine::stage_record(&read.stage_plan(), &bytes);
    }
    let mut got = db.fields(b"h").unwrap();
    got.sort();
    let want: Vec<_> = (0..30u64)
        .map(|i| {
            let v = value(i, 1);
            (format!("f{i:02}").into_bytes(), v[..v.len() / 4].to_vec())
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        basalt_engine::staged_reads() - before,
        30,
        "each field from its staged bytes"
    );
    // Staged until cleared: a second read of the map (a transaction's
    // HGET then HGETALL) uses them too; after the clear, the file.
    assert_eq!(db.fields(b"h").unwrap().len(), 30);
    assert_eq!(basalt_engine::staged_reads() - before, 60);
    basalt_engine::clear_staged();
    assert_eq!(db.fields(b"h").unwrap().len(), 30);
    assert_eq!(basalt_engine::staged_reads() - before, 60);
    // Damaged bytes are refused before they could be staged.
    let read = &reads[0];
    let mut bytes = read.read_record().unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    assert!(read.check_record(&bytes).is_err());
}

#[test]
fn a_values_cold_range_reads_are_the_records_holding_the_range_and_staged_ones_are_read() {
    let _staging = staging();
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts().max_file_size(1 << 20)).unwrap();
    let seg = basalt_engine::SEGMENT_LEN as u64;
    // 40 segments, then a plain value and a map.
    let long: Vec<u8> = (0..40 * seg).map(|i| (i % 251) as u8).collect();
    db.write_range(b"seg", 0, &long).unwrap();
    db.put(b"plain", &value(1, 1)).unwrap();
    db.put_field(b"map", b"f", b"v").unwrap();
    assert!(
        db.cold_range_reads(b"seg", 0, 10, 256, 256).is_empty(),
        "nothing is checked in place"
    );
    db.set_residency(Residency::AllCold);
    // How many segment records a ranged read then took from what the
    // reads fetched (neighbouring segments come in one read). Each on a
    // thread of its own: a thread caches the segments it read alone, and
    // a cached segment needs nothing fetched.
    let staged_here = |from: u64, len: u64, cap: usize| {
        let reads = db.cold_range_reads(b"seg", from, len, cap, cap);
        if reads.is_empty() {
            return 0;
        }
        assert!(
            reads.len() <= 2,
            "{} reads: neighbours are merged",
            reads.len()
        );
        for read in reads {
            let bytes = read.read_record().unwrap();
            read.check_record(&bytes).unwrap();
            basalt_engine::stage_record(&read.stage_plan(), &bytes);
        }
        let before = basalt_engine::staged_reads();
        let (got, total) = db
            .read_range(b"seg", from, len.min(40 * seg) as usize)
            .unwrap()
            .unwrap();
        let at = from.min(total) as usize;
        assert_eq!(got, &long[at..(at + got.len())]);
        basalt_engine::clear_staged();
        basalt_engine::staged_reads() - before
    };
    let staged = |from: u64, len: u64, cap: usize| {
        std::thread::scope(|s| s.spawn(|| staged_here(from, len, cap)).join().unwrap())
    };
    assert_eq!(staged(seg + 5, 10, 256), 1, "inside one segment");
    assert_eq!(staged(seg - 5, 10, 256), 2, "across a boundary");
    assert_eq!(staged(0, u64::MAX, 256), 40, "the whole value");
    assert_eq!(
        staged(38 * seg, u64::MAX, 4),
        2,
        "from a segment to the end"
    );
    assert_eq!(staged(0, u64::MAX, 10), 0, "more segments than the cap");
    assert_eq!(staged(0, 20 * seg, 10), 0, "a range of more than the cap");
    assert_eq!(staged(0, 10 * seg, 10), 10, "a range of the cap");
    assert_eq!(staged(100 * seg, 10, 256), 0, "past the end");
    assert!(
        db.cold_range_reads(b"seg", 0, 0, 256, 256).is_empty(),
        "an empty range"
    );
    let plain = db.cold_range_reads(b"plain", 5, 1, 256, 256);
    assert_eq!(plain.len(), 1, "a plain value's record, whole");
    assert!(plain[0].record_len() > value(1, 1).len());
    assert!(db.cold_range_reads(b"map", 0, 10, 256, 256).is_empty());
    assert!(db.cold_range_reads(b"missing", 0, 10, 256, 256).is_empty());
}

#[test]
fn a_long_range_is_sampled_first_and_fetched_whole_up_to_its_cap() {
    let _staging = staging();
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts().max_file_size(1 << 20)).unwrap();
    let seg = basalt_engine::SEGMENT_LEN as u64;
    // 600 segments, then enough else that their file is sealed (and
    // mapped: its residency can be looked at).
    let long: Vec<u8> = (0..600 * seg).map(|i| (i % 249) as u8).collect();
    db.write_range(b"seg", 0, &long).unwrap();
    for i in 0..40 {
        db.put(format!("filler{i}").as_bytes(), &[7u8; 64 << 10])
            .unwrap();
    }
    db.set_residency(Residency::Check);
    assert!(
        db.cold_range_reads(b"seg", 0, u64::MAX, 256, 1024)
            .is_empty(),
        "in memory: a sample of four segments says so, nothing to read"
    );
    db.set_residency(Residency::AllCold);
    assert!(
        db.cold_range_reads(b"seg", 0, u64::MAX, 256, 512)
            .is_empty(),
        "more segments than the long cap"
    );
    let plain = db.cold_range_reads(b"filler3", 0, u64::MAX, 256, 1024);
    assert_eq!(plain.len(), 1, "a plain value: its record, whole");
    assert!(
        db.cold_range_reads(b"seg", 700 * seg, u64::MAX, 256, 1024)
            .is_empty(),
        "past the end"
    );
    let staged = std::thread::scope(|s| {
        s.spawn(|| {
            let reads = db.cold_range_reads(b"seg", 0, u64::MAX, 256, 1024);
            assert!(
                !reads.is_empty() && reads.len() <= 4,
                "{} reads",
                reads.len()
            );
            for read in reads {
                let bytes = read.read_record().unwrap();
                read.check_record(&bytes).unwrap();
                basalt_engine::stage_record(&read.stage_plan(), &bytes);
            }
            let before = basalt_engine::staged_reads();
            let (got, total) = db.read_range(b"seg", 0, long.len()).unwrap().unwrap();
            assert_eq!((got.len() as u64, total), (600 * seg, 600 * seg));
            assert_eq!(got, long);
            basalt_engine::clear_staged();
            basalt_engine::staged_reads() - before
        })
        .join()
        .unwrap()
    });
    assert_eq!(staged, 600, "every segment read from what was fetched");
}

#[test]
fn a_cold_segmented_value_assembles_as_it_was_at_lookup_from_staged_spans() {
    let _staging = staging();
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts().max_file_size(1 << 20)).unwrap();
    let seg = basalt_engine::SEGMENT_LEN as u64;
    let long: Vec<u8> = (0..20 * seg).map(|i| (i % 253) as u8).collect();
    db.write_range(b"seg", 0, &long).unwrap();
    // In memory: assembled at once.
    db.set_residency(Residency::Check);
    match db.get_or_cold(b"seg", |v| v.to_vec()).unwrap() {
        Lookup::Here(v) => assert_eq!(v, long),
        other => panic!("a resident segmented value: {other:?}"),
    }
    db.set_residency(Residency::AllCold);
    let Lookup::ColdValue(mut cold) = db.get_or_cold(b"seg", |v| v.to_vec()).unwrap() else {
        panic!("a cold segmented value");
    };
    // Written over after the lookup: the assembly gives the value looked up.
    db.write_range(b"seg", 3 * seg, b"changed").unwrap();
    let reads = cold.take_reads();
    assert!(
        !reads.is_empty() && reads.len() <= 2,
        "{} reads",
        reads.len()
    );
    assert!(cold.take_reads().is_empty(), "taken once");
    let mut plans = Vec::new();
    for read in &reads {
        let bytes = read.read_record().unwrap();
        basalt_engine::stage_record(&read.stage_plan(), &bytes);
        plans.push(read.stage_plan());
    }
    let before = basalt_engine::staged_reads();
    assert_eq!(cold.assemble().unwrap(), long);
    assert_eq!(
        basalt_engine::staged_reads() - before,
        20,
        "every segment staged"
    );
    for plan in &plans {
        basalt_engine::unstage_record(plan);
    }
    // Unstaged: assembled from the files, the same bytes.
    assert_eq!(cold.assemble().unwrap(), long);
    assert_eq!(basalt_engine::staged_reads() - before, 20);
    let mut now = long.clone();
    now[3 * seg as usize..3 * seg as usize + 7].copy_from_slice(b"changed");
    assert_eq!(db.get(b"seg").unwrap().unwrap(), now);
}

#[test]
fn a_segment_cached_on_the_thread_is_not_fetched_again() {
    let _staging = staging();
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts().max_file_size(1 << 20)).unwrap();
    let seg = basalt_engine::SEGMENT_LEN as u64;
    // 16 segments (a value of at most 4 KiB stays one record).
    let long: Vec<u8> = (0..16 * seg).map(|i| (i % 251) as u8).collect();
    db.write_range(b"seg", 0, &long).unwrap();
    db.set_residency(Residency::AllCold);
    std::thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(
                db.cold_range_reads(b"seg", 3 * seg + 1, 2, 256, 256).len(),
                1,
                "not read yet on this thread: fetched"
            );
            // Read alone here (from the disk), so kept in this thread's cache.
            let (got, _) = db.read_range(b"seg", 3 * seg + 1, 2).unwrap().unwrap();
            assert_eq!(got, &long[(3 * seg + 1) as usize..(3 * seg + 3) as usize]);
            assert!(
                db.cold_range_reads(b"seg", 3 * seg + 1, 2, 256, 256)
                    .is_empty(),
                "cached here: nothing to fetch"
            );
            // A range over segments 3 and 4 fetches only segment 4.
            let reads = db.cold_range_reads(b"seg", 4 * seg - 2, 4, 256, 256);
            assert_eq!(reads.len(), 1);
        })
        .join()
        .unwrap();
        // Another thread has no copy: it fetches.
        s.spawn(|| {
            assert_eq!(
                db.cold_range_reads(b"seg", 3 * seg + 1, 2, 256, 256).len(),
                1
            );
        })
        .join()
        .unwrap();
    });
}

#[test]
fn small_and_large_values_read_in_place_under_every_mode_give_their_bytes() {
    // Values up to a few KiB are copied while the index is locked (no file
    // handle cloned); larger ones are read through a cloned handle. Either
    // way, in place or checked for residency, compressed or not, after a
    // seal, an overwrite and an expiry, the bytes are the key's; and the
    // reader's closure may itself read (the copy's buffer is not held).
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(basalt_engine::ManualClock::new(1_000));
    let db = Db::open(
        dir.path(),
        opts()
            .compress_above(Some(2048))
            .clock(clock.clone())
            .max_file_size(64 << 10),
    )
    .unwrap();
    // Records of 4,096 bytes and less are copied under the lock. Sizes
    // are incompressible (random bytes) unless negative: those are runs of
    // one byte that LZ4 shrinks to a small record.
    let sizes = [0i64, 1, 100, 4000, 4050, 4100, 9000, -9000];
    let v = |n: i64, gen: u8| -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (gen as u64) << 32 ^ n as u64;
        (0..n.unsigned_abs())
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if n < 0 {
                    gen
                } else {
                    x as u8
                }
            })
            .collect()
    };
    for mode in [Residency::InPlace, Residency::Check] {
        db.set_residency(mode);
        for gen in 0..3u8 {
            for &n in &sizes {
                db.put(format!("k{n}").as_bytes(), &v(n, gen)).unwrap();
            }
            // A key whose closure reads another key.
            for &n in &sizes {
                let key = format!("k{n}");
                let got = match db
                    .get_or_cold(key.as_bytes(), |x| {
                        let inner = match db.get_or_cold(b"k100", |y| y.to_vec()).unwrap() {
                            Lookup::Here(y) => y,
                            other => panic!("k100 under {mode:?}: {other:?}"),
                        };
                        (x.to_vec(), inner)
                    })
                    .unwrap()
                {
                    Lookup::Here(x) => x,
                    other => panic!("{key} under {mode:?}: {other:?}"),
                };
                assert!(got.0 == v(n, gen), "{key} under {mode:?}, generation {gen}");
                assert!(got.1 == v(100, gen), "k100 inside {key}'s read");
            }
        }
        db.put_with_expiry(
            b"short",
            b"lived",
            Some(basalt_engine::Clock::now_ms(&*clock) + 10),
        )
        .unwrap();
        assert!(matches!(
            db.get_or_cold(b"short", |x| x.to_vec()).unwrap(),
            Lookup::Here(x) if x == b"lived"
        ));
        clock.advance(11);
        assert!(matches!(
            db.get_or_cold(b"short", |x| x.to_vec()).unwrap(),
            Lookup::Absent
        ));
        assert!(matches!(
            db.get_or_cold(b"never", |x| x.to_vec()).unwrap(),
            Lookup::Absent
        ));
    }
}
