//! Reads a caller may run elsewhere: values whose bytes are not in memory.
//!
//! The one idea a reader needs: a value is read in place from the file's
//! memory map, which is a memory copy when its pages are cached and a page
//! fault that waits for the disk when they are not. A server thread that
//! takes that fault stops serving every client it carries. So
//! [`Db::get_or_cold`] looks first: a record whose pages are all resident
//! (`mincore`, [`crate::vfs::FileMap::resident`]) is read in place as
//! before, and one that is not comes back as a [`ColdRead`], a detached
//! read the caller hands to a thread that may wait (`pread`, so a failing
//! disk is an error for that key, not a `SIGBUS` for the process).
//!
//! Under a mode other than `InPlace` every other read checks as well
//! (`Inner::read_with`) and reads a record that is not resident with one
//! `pread` on the calling thread, instead of faulting its pages in one
//! after the other.
//!
//! The check costs a system call per read, which a data set that fits in
//! memory should not pay: [`Residency`] says when to look, and the caller
//! (who knows the memory budget) sets it with [`Db::set_residency`].
//!
//! A `ColdRead` holds the file (an `Arc`, so compaction may delete the file
//! meanwhile: the open descriptor keeps its bytes) and the record's place,
//! which no one writes again: the value it returns is the one the key held
//! when it was looked up, as an in-place read at that moment would have.

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::vfs::DirectBuf;

use crate::db::{DataFile, Found, ValueAt};
use crate::format::Record;
use crate::keydir::Loc;
use crate::{Db, Error, Result, Versioned};

/// Consecutive checks that must find their record resident before the
/// check is sampled.
const SAMPLE_AFTER: u32 = 64;
/// While sampled, one read in this many is checked.
const SAMPLE_EVERY: u32 = 16;

/// Most bytes of records one command fetches ahead and holds staged
/// ([`Db::cold_spans`], [`Db::cold_range_reads`]).
pub(crate) const MAX_STAGED: u64 = 16 << 20;

thread_local! {
    /// (resident checks in a row, reads left to skip) of this thread.
    static SAMPLE: std::cell::Cell<(u32, u32)> = const { std::cell::Cell::new((0, 0)) };
}

/// Whether `[offset, offset + len)` of `map` looks resident under
/// [`Residency::Check`]. `mincore` costs about a third of a warm read, so
/// once 64 checks in a row have found their pages resident only one read
/// in 16 is checked (the others are read in place, as if resident); the
/// first check that finds a page missing makes every read check again. A
/// skipped read of a page that has just been evicted faults in place, as
/// every read did before checks existed: at most the miss rate that 64
/// resident checks in a row allow.
fn looks_resident(map: &crate::vfs::FileMap, offset: u64, len: usize) -> bool {
    SAMPLE.with(|s| {
        let (streak, skip) = s.get();
        if skip > 0 {
            s.set((streak, skip - 1));
            return true;
        }
        let resident = map.resident(offset, len);
        if resident {
            let streak = streak.saturating_add(1);
            let skip = if streak >= SAMPLE_AFTER {
                SAMPLE_EVERY - 1
            } else {
                0
            };
            s.set((streak, skip));
        } else {
            s.set((0, 0));
        }
        resident
    })
}

/// Most slots of the admission table ([`admit`]): 4 MiB of counters, of
/// which only the slots in use are ever touched.
const ADMIT_SLOTS_MAX: usize = 1 << 20;
/// Fewest slots, whatever the budget.
const ADMIT_SLOTS_MIN: usize = 1 << 10;

/// The admission table: per slot, a tag of the record a cold read fetched
/// past the page cache last ([`admit`]).
static SEEN: [AtomicU32; ADMIT_SLOTS_MAX] = [const { AtomicU32::new(0) }; ADMIT_SLOTS_MAX];
/// Slots in use, minus one (a power of two minus one).
static ADMIT_MASK: AtomicUsize = AtomicUsize::new((1 << 16) - 1);
/// Cold reads made past the page cache, and through it.
static READS_DIRECT: AtomicU64 = AtomicU64::new(0);
static READS_CACHED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's buffer for direct reads, kept between reads (taken
    /// out while one runs, so a nested read allocates its own).
    static DIRECT: Cell<Option<DirectBuf>> = const { Cell::new(None) };
}

/// A direct-read buffer larger than this is dropped after its read rather
/// than kept by the thread.
const KEEP_BUF: usize = 256 << 10;

/// Sizes the admission window from the memory the page cache may hold for
/// this process's data (the server passes its memory budget): a cold record
/// read again while about half of that budget's pages would still hold it
/// is admitted to the page cache ([`admit`]). Process-wide, like the page
/// cache.
pub fn set_page_cache_budget(bytes: u64) {
    let pages = (bytes / 2 / crate::vfs::DIRECT_ALIGN as u64) as usize;
    let slots = match pages.checked_next_power_of_two() {
        Some(p) if p > pages => p / 2,
        Some(p) => p,
        None => ADMIT_SLOTS_MAX,
    }
    .clamp(ADMIT_SLOTS_MIN, ADMIT_SLOTS_MAX);
    ADMIT_MASK.store(slots - 1, Ordering::Relaxed);
}

/// Cold reads so far, process-wide: (past the page cache, through it).
pub fn cold_read_counts() -> (u64, u64) {
    (
        READS_DIRECT.load(Ordering::Relaxed),
        READS_CACHED.load(Ordering::Relaxed),
    )
}

/// Whether a cold read of the record at `offset` of the file `uid` should
/// go through the page cache (and so leave the record resident for the
/// next read) rather than past it. Records are admitted on their second
/// cold read within a window: the table holds, per slot, a tag of the last
/// record read past the cache; a read that finds its own tag is a repeat
/// and is admitted, one that does not leaves its tag. With as many slots as
/// about half the budget's pages, a record's tag survives roughly as long
/// as the page cache would have kept the record, so what is admitted is
/// what a cache would have served again, and a scan or a uniformly random
/// read of a data set much larger than memory mostly stays out.
fn admit(uid: u64, offset: u32) -> bool {
    // splitmix64's finaliser over both halves: neighbouring offsets and
    // files land far apart.
    let mut h = uid.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(offset);
    h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^= h >> 31;
    let slot = &SEEN[h as usize & ADMIT_MASK.load(Ordering::Relaxed)];
    let tag = (h >> 32) as u32 | 1;
    if slot.swap(tag, Ordering::Relaxed) == tag {
        slot.store(0, Ordering::Relaxed);
        true
    } else {
        false
    }
}

thread_local! {
    /// Record bytes fetched ahead of the command this thread runs next
    /// ([`stage_record`]), by (file uid, offset); taken by the reads that
    /// need them ([`take_staged`]), the rest dropped by [`clear_staged`].
    static STAGED: std::cell::RefCell<hashbrown::HashMap<(u64, u32), Vec<u8>>> =
        std::cell::RefCell::new(hashbrown::HashMap::new());
    /// Whether `STAGED` holds anything: one thread-local load per read.
    static ANY_STAGED: Cell<bool> = const { Cell::new(false) };
}

/// Reads served from staged bytes (INFO `basalt_cold_reads_staged`).
static READS_STAGED: AtomicU64 = AtomicU64::new(0);

/// Where the records a [`ColdRead`] fetches lie, for [`stage_record`]: a
/// file that is never reused and offsets that are never rewritten, so
/// staged bytes are the records' whoever reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagePlan {
    uid: u64,
    /// Where the bytes read start.
    base: u32,
    /// Each record's (offset, length) in the file.
    records: Vec<(u32, u32)>,
}

/// Makes the records in `bytes` (what a [`ColdRead`] fetched, checked with
/// [`ColdRead::check_record`]) what this thread's next reads of those
/// records use instead of the disk, until [`clear_staged`]. A command
/// whose records are not in memory is run this way: its reads are made
/// where waiting harms no one, staged on the thread that runs it, and the
/// command then runs in place as usual.
pub fn stage_record(plan: &StagePlan, bytes: &[u8]) {
    STAGED.with(|s| {
        let mut s = s.borrow_mut();
        for &(offset, len) in &plan.records {
            let at = (offset - plan.base) as usize;
            if let Some(rec) = bytes.get(at..at + len as usize) {
                s.insert((plan.uid, offset), rec.to_vec());
            }
        }
    });
    ANY_STAGED.set(true);
}

/// Drops the records of `plan` that [`stage_record`] left on this thread,
/// and only those: what another command staged stays.
pub fn unstage_record(plan: &StagePlan) {
    if !ANY_STAGED.get() {
        return;
    }
    STAGED.with(|s| {
        let mut s = s.borrow_mut();
        for &(offset, _) in &plan.records {
            s.remove(&(plan.uid, offset));
        }
        if s.is_empty() {
            ANY_STAGED.set(false);
        }
    });
}

/// Drops whatever [`stage_record`] left on this thread.
pub fn clear_staged() {
    if ANY_STAGED.replace(false) {
        STAGED.with(|s| s.borrow_mut().clear());
    }
}

/// Whether this thread has staged records (reads then look for theirs).
pub(crate) fn any_staged() -> bool {
    ANY_STAGED.get()
}

/// The staged bytes of the record at `loc` of the file `uid`, if any. They
/// stay staged until [`clear_staged`]: a transaction may read a record
/// twice (HGET of a field, then HGETALL of its hash).
pub(crate) fn take_staged(uid: u64, loc: Loc) -> Option<Vec<u8>> {
    if !ANY_STAGED.get() {
        return None;
    }
    let bytes = STAGED.with(|s| s.borrow().get(&(uid, loc.offset)).cloned())?;
    if bytes.len() != loc.len as usize {
        return None;
    }
    READS_STAGED.fetch_add(1, Ordering::Relaxed);
    Some(bytes)
}

/// Reads served from staged bytes so far, process-wide.
pub fn staged_reads() -> u64 {
    READS_STAGED.load(Ordering::Relaxed)
}

/// Whether a cold read of the record at `loc` of `file` should go past
/// the page cache: not while the file is being appended to (its newest
/// pages may be dirty), nor when [`admit`] lets the record in.
fn choose_direct(file: &DataFile, loc: Loc) -> bool {
    !file.is_appending() && !admit(file.uid, loc.offset)
}

/// Reads the record at `loc` of `file` from the disk and calls `f` with its
/// bytes (unchecked: the caller parses them): past the page cache
/// (`O_DIRECT`, [`crate::vfs::VFile::read_direct`]) with `direct` (see
/// [`choose_direct`]) where the file can, else with `pread` through the
/// cache.
fn read_chosen<R>(
    file: &DataFile,
    loc: Loc,
    direct: bool,
    f: impl FnOnce(&[u8]) -> R,
) -> std::io::Result<R> {
    if direct {
        let mut buf = DIRECT.take().unwrap_or_default();
        let read = file
            .file
            .read_direct(&mut buf, loc.offset as u64, loc.len as usize);
        let r = match read {
            Ok(Some(bytes)) => {
                READS_DIRECT.fetch_add(1, Ordering::Relaxed);
                Ok(f(bytes))
            }
            Ok(None) => read_counted(file, loc, f),
            Err(e) => Err(e),
        };
        if buf.capacity() <= KEEP_BUF {
            DIRECT.set(Some(buf));
        }
        return r;
    }
    read_counted(file, loc, f)
}

/// [`read_cached`], counted as a cold read through the cache.
fn read_counted<R>(file: &DataFile, loc: Loc, f: impl FnOnce(&[u8]) -> R) -> std::io::Result<R> {
    let r = read_cached(file, loc, f)?;
    READS_CACHED.fetch_add(1, Ordering::Relaxed);
    Ok(r)
}

/// Reads the record at `loc` of `file` as a [`ColdRead`] would: past the
/// page cache unless [`choose_direct`] says otherwise.
pub(crate) fn read_alone<R>(
    file: &DataFile,
    loc: Loc,
    f: impl FnOnce(&[u8]) -> R,
) -> std::io::Result<R> {
    read_chosen(file, loc, choose_direct(file, loc), f)
}

/// Reads the record at `loc` of `file` with `pread`, through the page
/// cache.
pub(crate) fn read_cached<R>(
    file: &DataFile,
    loc: Loc,
    f: impl FnOnce(&[u8]) -> R,
) -> std::io::Result<R> {
    let mut buf = vec![0u8; loc.len as usize];
    file.file.read_exact_at(&mut buf, loc.offset as u64)?;
    Ok(f(&buf))
}

/// When [`Db::get_or_cold`] checks whether a record is in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Residency {
    /// Never: every read is served in place (the data set fits in memory).
    InPlace = 0,
    /// Reads ask the kernel which pages are resident (`mincore`): every
    /// read, or one in 16 while the checks keep finding pages resident
    /// ([`looks_resident`]).
    Check = 1,
    /// Every read of one record is handed back as cold, resident or not:
    /// for tests and for measuring the cost of the detour.
    AllCold = 2,
}

impl Residency {
    fn from_u8(b: u8) -> Residency {
        match b {
            1 => Residency::Check,
            2 => Residency::AllCold,
            _ => Residency::InPlace,
        }
    }
}

/// What [`Db::get_or_cold`] found.
#[derive(Debug)]
pub enum Lookup<R> {
    /// The key does not exist (or has expired).
    Absent,
    /// The value was in memory: the caller's function's result.
    Here(R),
    /// The value is on disk only: read it with [`ColdRead::read_with`],
    /// where waiting for the disk harms no one.
    Cold(ColdRead),
    /// A segmented value whose segments are not all in memory: make its
    /// reads where waiting harms no one, stage them, then assemble it
    /// ([`ColdValue`]).
    ColdValue(ColdValue),
}

/// A segmented value (`segmented.rs`) whose segments are not all in
/// memory, as [`Db::get_or_cold`] found it: where each segment's record
/// is, and the reads of those not in memory (neighbours merged into
/// spans). Records never change, so assembling it later gives the value
/// as it was when looked up, whatever happened to the key meanwhile.
pub struct ColdValue {
    inner: Arc<crate::db::Inner>,
    key: Box<[u8]>,
    parts: Vec<(Arc<DataFile>, Loc)>,
    reads: Vec<ColdRead>,
}

impl std::fmt::Debug for ColdValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColdValue")
            .field("segments", &self.parts.len())
            .field("reads", &self.reads.len())
            .finish()
    }
}

impl ColdValue {
    pub(crate) fn new(
        inner: Arc<crate::db::Inner>,
        key: &[u8],
        parts: Vec<(Arc<DataFile>, Loc)>,
        reads: Vec<ColdRead>,
    ) -> ColdValue {
        ColdValue {
            inner,
            key: key.into(),
            parts,
            reads,
        }
    }

    /// Whether reads remain to be taken ([`ColdValue::take_reads`]).
    pub(crate) fn has_reads(&self) -> bool {
        !self.reads.is_empty()
    }

    /// The reads to make (taken once): each a span of segment records,
    /// whose checked bytes ([`ColdRead::read_record`], or a planned read
    /// and [`ColdRead::check_record`]) go to [`stage_record`] on the
    /// thread that then calls [`ColdValue::assemble`].
    pub fn take_reads(&mut self) -> Vec<ColdRead> {
        std::mem::take(&mut self.reads)
    }

    /// The value: every segment in order, from this thread's staged bytes
    /// where they are, from the files otherwise (a read not staged, or a
    /// patch's base).
    pub fn assemble(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.parts.len() * crate::SEGMENT_LEN);
        for (file, loc) in &self.parts {
            out.extend_from_slice(&self.inner.read_segment(&self.key, file, *loc)?);
        }
        Ok(out)
    }
}

/// What [`Db::get_versioned_or_cold`] found for a key that exists.
#[derive(Debug)]
pub enum VersionedLookup {
    /// The value was in memory.
    Here(Versioned),
    /// The value is on disk only; its version and expiry are known.
    Cold {
        /// The read to make where waiting is harmless.
        read: ColdRead,
        /// The key's version (the record's sequence number).
        version: u64,
        /// The key's expiry, ms since the epoch.
        expires_at: Option<u64>,
    },
}

/// A read of one value record, detached from the index: `Send`, and valid
/// whatever happens to the key or its file afterwards.
#[derive(Debug)]
pub struct ColdRead {
    file: Arc<DataFile>,
    loc: Loc,
    key: Box<[u8]>,
    path: PathBuf,
    /// Whether [`ColdRead::plan`] chose a direct read: a retry of a planned
    /// read keeps that choice rather than asking [`admit`] again (which
    /// would find the plan's own tag and admit the record).
    planned: Option<bool>,
    /// For a read of several records at once ([`Db::cold_field_reads`]):
    /// each record's place, all inside `loc` (which then spans them, and
    /// is no record itself). Empty for a read of one record.
    members: Vec<Loc>,
}

impl ColdRead {
    /// Reads the record from the file (`pread`: a read error is an
    /// [`Error::Io`] naming the file, never a signal), checks it (CRC, the
    /// key) and calls `f` with the value.
    pub fn read_with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        // Fetched ahead for the command running now ([`stage_record`]):
        // no disk read on this thread. Checked again all the same.
        if let Some(record) = take_staged(self.file.uid, self.loc) {
            return self.finish(&record, f);
        }
        let direct = match self.planned {
            Some(direct) => direct,
            None => choose_direct(&self.file, self.loc),
        };
        read_chosen(&self.file, self.loc, direct, |bytes| self.finish(bytes, f))
            .map_err(|e| Error::io("read", self.path.clone(), e))?
    }

    /// What the read fetches: its file's uid (never reused in a process),
    /// the offset there and the length (a span of a map's records starts
    /// where its first record does). Two reads with the same place fetch
    /// the same bytes.
    pub fn place(&self) -> (u64, u32, u32) {
        (self.file.uid, self.loc.offset, self.loc.len)
    }

    /// The record's length in bytes (what the read will fetch).
    pub fn record_len(&self) -> usize {
        self.loc.len as usize
    }

    /// Plans this read for a caller that submits it itself (io_uring):
    /// which descriptor, where and how much, chosen as [`ColdRead::read_with`]
    /// would (past the page cache unless the record is admitted or in the
    /// active file). `None` when the file hands out no descriptor: read it
    /// with `read_with`. The caller reads `len` bytes at `offset` of `fd`
    /// (a direct read's aligned to the file's
    /// [`crate::vfs::VFile::direct_align`])
    /// into a buffer aligned to [`crate::vfs::DIRECT_ALIGN`] (a
    /// [`DirectBuf`]), keeps this `ColdRead` alive until the read is done
    /// (it keeps the descriptor open), and passes the bytes from `skip` on
    /// to [`ColdRead::finish`].
    pub fn plan(&mut self) -> Option<ReadPlan> {
        let vfile = &self.file.file;
        let offset = self.loc.offset as u64;
        let len = self.loc.len as usize;
        let direct = *self
            .planned
            .get_or_insert_with(|| choose_direct(&self.file, self.loc));
        if direct {
            if let Some(fd) = vfile.raw_fd(true) {
                let align = vfile.direct_align();
                let (start, skip, span) = crate::vfs::aligned_span(offset, len, align);
                READS_DIRECT.fetch_add(1, Ordering::Relaxed);
                return Some(ReadPlan {
                    direct: true,
                    fd,
                    offset: start,
                    len: span,
                    align,
                    skip,
                    record_len: len,
                });
            }
        }
        let fd = vfile.raw_fd(false)?;
        READS_CACHED.fetch_add(1, Ordering::Relaxed);
        Some(ReadPlan {
            direct: false,
            fd,
            offset,
            len,
            align: 1,
            skip: 0,
            record_len: len,
        })
    }

    /// Where the records this read fetches are, for [`stage_record`].
    pub fn stage_plan(&self) -> StagePlan {
        let records = if self.members.is_empty() {
            vec![(self.loc.offset, self.loc.len)]
        } else {
            self.members.iter().map(|l| (l.offset, l.len)).collect()
        };
        StagePlan {
            uid: self.file.uid,
            base: self.loc.offset,
            records,
        }
    }

    /// Reads the bytes of this read's record, or of all its records
    /// ([`Db::cold_field_reads`]), checked with
    /// [`ColdRead::check_record`], for [`stage_record`].
    pub fn read_record(&self) -> Result<Vec<u8>> {
        let direct = match self.planned {
            Some(direct) => direct,
            None => choose_direct(&self.file, self.loc),
        };
        read_chosen(&self.file, self.loc, direct, |bytes| {
            self.check_record(bytes).map(|()| bytes.to_vec())
        })
        .map_err(|e| Error::io("read", self.path.clone(), e))?
    }

    /// Checks the bytes a planned read fetched: each record's CRC and key,
    /// as [`ColdRead::finish`] does for one.
    pub fn check_record(&self, bytes: &[u8]) -> Result<()> {
        if self.members.is_empty() {
            return self.finish(bytes, |_| ());
        }
        for m in &self.members {
            let at = (m.offset - self.loc.offset) as usize;
            let rec = bytes
                .get(at..at + m.len as usize)
                .ok_or_else(|| Error::Corrupt {
                    path: self.path.clone(),
                    offset: m.offset as u64,
                    reason: "the read came back short".into(),
                })?;
            let rec = Record::from_bytes(rec).map_err(|reason| Error::Corrupt {
                path: self.path.clone(),
                offset: m.offset as u64,
                reason: reason.into(),
            })?;
            if rec.key() != &*self.key {
                return Err(Error::Corrupt {
                    path: self.path.clone(),
                    offset: m.offset as u64,
                    reason: "record holds another key than the index says".into(),
                });
            }
        }
        Ok(())
    }

    /// For a caller whose planned direct read, aligned to `align` (its
    /// [`ReadPlan::align`]), failed with `EINVAL` (the device wants
    /// another alignment): later direct reads of the file align to 4 KiB
    /// if `align` was less, else later reads of the file go through the
    /// page cache; this one, retried with [`ColdRead::read_with`], goes
    /// through the page cache either way.
    pub fn refuse_direct(&mut self, align: usize) {
        self.file.file.refuse_direct(align);
        self.planned = Some(false);
    }

    /// Checks the record bytes a planned read fetched (CRC, the key) and
    /// calls `f` with the value, as [`ColdRead::read_with`] would. `record`
    /// must hold at least the record ([`ReadPlan::record`] cuts it out).
    pub fn finish<R>(&self, record: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let corrupt = |reason: &str| Error::Corrupt {
            path: self.path.clone(),
            offset: self.loc.offset as u64,
            reason: reason.into(),
        };
        let rec = Record::from_bytes(record).map_err(corrupt)?;
        if rec.key() != &*self.key {
            return Err(corrupt("record holds another key than the index says"));
        }
        let value = rec.value_ref().map_err(corrupt)?;
        Ok(f(&value))
    }
}

/// A read [`ColdRead::plan`] chose for a caller to submit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPlan {
    /// Whether `fd` is the `O_DIRECT` descriptor.
    pub direct: bool,
    /// The descriptor to read from (`O_DIRECT` or not).
    pub fd: std::os::fd::RawFd,
    /// Where to read (a multiple of `align`).
    pub offset: u64,
    /// How many bytes to read (a multiple of `align`).
    pub len: usize,
    /// The alignment of `offset` and `len`: the file's
    /// [`crate::vfs::VFile::direct_align`] when the descriptor is direct,
    /// else 1.
    pub align: usize,
    /// Where in the bytes read the record starts.
    pub skip: usize,
    record_len: usize,
}

impl ReadPlan {
    /// The record within the `got` bytes a read of this plan returned, or
    /// `None` if the read came back too short to hold it.
    pub fn record<'a>(&self, got: &'a [u8]) -> Option<&'a [u8]> {
        got.get(self.skip..self.skip + self.record_len)
    }
}

/// Whether the record at `loc` of `file` looks resident under
/// [`Residency::Check`] ([`looks_resident`]); a file without a map never
/// does (its read is a `pread`).
pub(crate) fn record_resident(file: &DataFile, loc: Loc) -> bool {
    file.map_ref()
        .is_some_and(|m| looks_resident(m, loc.offset as u64, loc.len as usize))
}

thread_local! {
    /// The buffer [`Db::get_or_cold`] copies small resident values into.
    static SMALL: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`SMALL`]'s buffer while a lookup has it out: back when dropped.
struct SmallBuf(Vec<u8>);

impl Drop for SmallBuf {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.0);
        SMALL.with(|b| *b.borrow_mut() = v);
    }
}

impl Db {
    /// Sets when [`Db::get_or_cold`] checks residency. Takes effect for the
    /// next lookup on any thread.
    pub fn set_residency(&self, r: Residency) {
        self.inner.residency.store(r as u8, Ordering::Relaxed);
    }

    /// The detached read of the record at `loc` of `file` (which holds
    /// `key`) when it is not to be read in place now under `mode` (not
    /// [`Residency::InPlace`]); `None` when it looks resident.
    pub(crate) fn cold_read(
        &self,
        mode: Residency,
        key: &[u8],
        file: &Arc<DataFile>,
        loc: Loc,
    ) -> Option<ColdRead> {
        if mode == Residency::Check && record_resident(file, loc) {
            return None;
        }
        Some(ColdRead {
            file: file.clone(),
            loc,
            key: key.into(),
            path: self.inner.shard(key).data_path(loc.file),
            planned: None,
            members: Vec::new(),
        })
    }

    /// Like [`Db::get_field`], but a field whose record is not in memory
    /// comes back as [`Lookup::Cold`]; a resident one as [`Lookup::Here`]
    /// with its bytes. Under [`Residency::InPlace`] nothing is checked.
    pub fn get_field_or_cold(&self, key: &[u8], field: &[u8]) -> Result<Lookup<Vec<u8>>> {
        let mode = self.residency();
        if mode == Residency::InPlace {
            return Ok(match self.get_field(key, field)? {
                Some(v) => Lookup::Here(v),
                None => Lookup::Absent,
            });
        }
        let Some((file, loc)) = self.locate_field(key, field)? else {
            return Ok(Lookup::Absent);
        };
        if let Some(read) = self.cold_read(mode, key, &file, loc) {
            return Ok(Lookup::Cold(read));
        }
        let inner = &*self.inner;
        // SAFETY: `loc` and `file` were read from this shard's index; checked
        // just now, so no second look.
        let v = unsafe {
            inner.read_with_checked(inner.shard(key), &file, loc, false, false, |rec| {
                rec.value()
            })
        }?;
        Ok(Lookup::Here(v))
    }

    /// Like [`Db::get_versioned`], but a value whose record is not in
    /// memory comes back as a [`ColdRead`] with the version and expiry it
    /// belongs to, for the caller to read elsewhere. Under
    /// [`Residency::InPlace`] nothing is checked.
    pub fn get_versioned_or_cold(&self, key: &[u8]) -> Result<Option<VersionedLookup>> {
        let mode = self.residency();
        if mode == Residency::InPlace {
            return Ok(self.get_versioned(key)?.map(VersionedLookup::Here));
        }
        let (file, loc, expires_at) = loop {
            match self.locate_value(key)? {
                None => return Ok(None),
                Some(Found::Record(r)) => break r,
                Some(Found::Segments { .. }) => {
                    if let Some(v) = self.get_versioned(key)? {
                        return Ok(Some(VersionedLookup::Here(v)));
                    }
                }
            }
        };
        if let Some(read) = self.cold_read(mode, key, &file, loc) {
            return Ok(Some(VersionedLookup::Cold {
                read,
                version: loc.seq,
                expires_at,
            }));
        }
        let value = self.read_value_checked(key, &file, loc, false, |v| v.to_vec())?;
        Ok(Some(VersionedLookup::Here(Versioned {
            value,
            version: loc.seq,
            expires_at,
        })))
    }

    /// The read of `key`'s whole value when its record is not in memory,
    /// for a caller that runs it elsewhere and stages its bytes
    /// ([`stage_record`]) before a command reads the value in place (what
    /// [`ColdRead::read_with`] and the engine's own reads then use). `None`
    /// when the key is absent, its value is in memory or segmented (small
    /// records), or residency is not checked ([`Residency::InPlace`]).
    pub fn cold_value_read(&self, key: &[u8]) -> Result<Option<ColdRead>> {
        let mode = self.residency();
        if mode == Residency::InPlace {
            return Ok(None);
        }
        Ok(match self.locate_value(key)? {
            Some(Found::Record((file, loc, _))) => self.cold_read(mode, key, &file, loc),
            _ => None,
        })
    }

    /// Like [`Db::cold_value_read`], for the record of one field of the
    /// map at `key`.
    pub fn cold_field_read(&self, key: &[u8], field: &[u8]) -> Result<Option<ColdRead>> {
        let mode = self.residency();
        if mode == Residency::InPlace {
            return Ok(None);
        }
        Ok(match self.locate_field(key, field)? {
            Some((file, loc)) => self.cold_read(mode, key, &file, loc),
            None => None,
        })
    }

    /// The reads of every field record of the map at `key` that is not in
    /// memory, for a caller that runs them elsewhere and stages their bytes
    /// ([`stage_record`]) before reading the map in place. Records of one
    /// file that lie close together (a map's fields are mostly written
    /// together) are read together: one read per span of up to 256 KiB
    /// with gaps of at most 4 KiB, where one read per record would fetch
    /// the same blocks again and again. Empty when residency is not
    /// checked ([`Residency::InPlace`]), when the key is not a map or has
    /// more than `4 * cap` records, or when more than `cap` records or 16
    /// MiB are missing (those commands read as before). Under
    /// [`Residency::AllCold`] every record counts as missing.
    pub fn cold_field_reads(&self, key: &[u8], cap: usize) -> Vec<ColdRead> {
        let mode = self.residency();
        if mode == Residency::InPlace {
            return Vec::new();
        }
        let inner = &*self.inner;
        let shard = inner.shard(key);
        // The map's records, under the index lock; nothing more for a map
        // too large to fetch ahead (the scan itself would cost too much).
        let locs: Vec<(Arc<DataFile>, Loc)> = {
            let idx = shard.index.read();
            let Ok(Some(m)) = Self::live_map(inner, &idx, key) else {
                return Vec::new();
            };
            if m.fields.len() > cap.saturating_mul(4) {
                return Vec::new();
            }
            m.fields
                .values()
                .filter_map(|loc| Some((idx.files.get(&loc.file)?.handle.clone(), loc)))
                .collect()
        };
        self.cold_spans(key, mode, locs, cap)
    }

    /// The reads of those of `locs` (records of `key`) that are not in
    /// memory under `mode`, records of one file that lie close together
    /// merged into one read (spans of up to 256 KiB with gaps of at most 4
    /// KiB), with one look at residency per run of neighbouring records.
    /// Empty when more than `cap` records or 16 MiB are missing.
    pub(crate) fn cold_spans(
        &self,
        key: &[u8],
        mode: Residency,
        mut locs: Vec<(Arc<DataFile>, Loc)>,
        cap: usize,
    ) -> Vec<ColdRead> {
        const GAP: u64 = 4096;
        const SPAN: u64 = 256 << 10;
        let shard = self.inner.shard(key);
        locs.sort_by_key(|(_, l)| (l.file, l.offset));
        // Which are in memory: one `mincore` per run of neighbouring
        // records (a map's records mostly lie together), not per record.
        let mut missing: Vec<(Arc<DataFile>, Loc)> = Vec::new();
        let mut bytes = 0u64;
        let mut i = 0;
        while i < locs.len() {
            let first = locs[i].1;
            let mut end = first.offset as u64 + first.len as u64;
            let mut j = i + 1;
            while j < locs.len()
                && locs[j].1.file == first.file
                && (locs[j].1.offset as u64) < end + GAP
                && locs[j].1.offset as u64 + locs[j].1.len as u64 - first.offset as u64 <= SPAN
            {
                end = end.max(locs[j].1.offset as u64 + locs[j].1.len as u64);
                j += 1;
            }
            let file = &locs[i].0;
            let absent = mode == Residency::AllCold
                || file.map_ref().is_none_or(|map| {
                    !map.resident(first.offset as u64, (end - first.offset as u64) as usize)
                });
            if absent {
                for (file, loc) in &locs[i..j] {
                    bytes += loc.len as u64;
                    if missing.len() == cap || bytes > MAX_STAGED {
                        return Vec::new();
                    }
                    missing.push((file.clone(), *loc));
                }
            }
            i = j;
        }
        let mut reads: Vec<ColdRead> = Vec::new();
        for (file, loc) in missing {
            if let Some(last) = reads.last_mut() {
                let end = last.loc.offset as u64 + last.loc.len as u64;
                let new_end = loc.offset as u64 + loc.len as u64;
                if last.loc.file == loc.file
                    && (loc.offset as u64) < end + GAP
                    && new_end - last.loc.offset as u64 <= SPAN
                    && new_end > end
                {
                    if last.members.is_empty() {
                        last.members.push(last.loc);
                    }
                    last.members.push(loc);
                    last.loc.len = (new_end - last.loc.offset as u64) as u32;
                    continue;
                }
            }
            reads.push(ColdRead {
                path: shard.data_path(loc.file),
                file,
                loc,
                key: key.into(),
                planned: None,
                members: Vec::new(),
            });
        }
        reads
    }

    /// Bytes of every data file (live and garbage): what reads may touch,
    /// to compare with the memory the page cache can hold. Cheap: one read
    /// lock per shard and a sum over its files.
    pub fn data_bytes(&self) -> u64 {
        self.inner
            .shards
            .iter()
            .map(|s| s.index.read().files.values().map(|f| f.total).sum::<u64>())
            .sum()
    }

    /// The current [`Residency`].
    pub fn residency(&self) -> Residency {
        Residency::from_u8(self.inner.residency.load(Ordering::Relaxed))
    }

    /// Like [`Db::get_with`], but a value whose record is not in memory is
    /// not read here: it comes back as [`Lookup::Cold`] for the caller to
    /// read where waiting is harmless. Under [`Residency::InPlace`] (the
    /// default) nothing is checked and it answers what `get_with` would. A
    /// small value read in place is copied while the index is read-locked
    /// (`Db::locate_value_or_copy`) and `f` sees the copy. A segmented value
    /// is assembled here (its segments are small records read in place); a
    /// file without a map is cold (its read is a `pread`).
    pub fn get_or_cold<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Lookup<R>> {
        let mode = self.residency();
        // A small value to be read in place is copied under the index's
        // lock (no file handle cloned), into this thread's buffer, taken
        // out while `f` runs (which may read again) and put back on the
        // way out, whichever it is.
        let mut small = SmallBuf(SMALL.with(|b| std::mem::take(&mut *b.borrow_mut())));
        let (file, loc, _) = loop {
            small.0.clear();
            match self.locate_value_or_copy(key, Some((&mut small.0, mode)))? {
                ValueAt::Absent => return Ok(Lookup::Absent),
                ValueAt::Copied => return Ok(Lookup::Here(f(&small.0))),
                ValueAt::At(Found::Record(r)) => break r,
                // Assembled in place, as `get_with` does.
                ValueAt::At(Found::Segments { .. }) if mode == Residency::InPlace => {
                    if let Some((v, _)) = self.assemble(key)? {
                        return Ok(Lookup::Here(f(&v)));
                    }
                }
                ValueAt::At(Found::Segments { .. }) => match self.segments_or_cold(key, mode)? {
                    Some(Ok(v)) => return Ok(Lookup::Here(f(&v))),
                    Some(Err(cold)) => return Ok(Lookup::ColdValue(cold)),
                    None => {}
                },
            }
        };
        if mode == Residency::InPlace {
            return self
                .read_value_checked(key, &file, loc, false, f)
                .map(Lookup::Here);
        }
        if let Some(read) = self.cold_read(mode, key, &file, loc) {
            return Ok(Lookup::Cold(read));
        }
        // Checked just now: no second look.
        self.read_value_checked(key, &file, loc, false, f)
            .map(Lookup::Here)
    }
}
