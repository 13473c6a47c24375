//! Opening a directory: lock it, load every shard's files in parallel (hint
//! files where they are valid, a scan of the data file otherwise), cut a
//! torn tail or the zeros reserved past the last record off the newest log
//! file, and rebuild the index.
//!
//! The one idea: files may be loaded in any order, because compaction writes
//! old records into new files. Every record carries its sequence number, and
//! the loader keeps, per key and per field, only what the highest sequence
//! number says; tombstones seen while loading are remembered (in maps that
//! are dropped when loading ends) so an older record met later cannot
//! resurrect what they deleted.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use hashbrown::HashMap;
use parking_lot::{Condvar, Mutex, RwLock};

use crate::db::{
    data_path, hint_path, sync_dir, Counters, DataFile, Db, FileInfo, Index, Inner, MapEntry,
    Shard, Writer,
};
use crate::format::{
    self, CommitKey, FileHeader, Kind, Origin, RecordHeader, DATA_MAGIC, FILE_HEADER_LEN,
    FLAG_BATCH, RECORD_HEADER_LEN,
};
use crate::keydir::{Loc, MAP_FILE};
use crate::options::Options;
use crate::vfs::VFile;
use crate::{Error, Result};

const META_MAGIC: [u8; 8] = *b"BSLTMETA";
const READ_CHUNK: usize = 4 << 20;

/// Reads a file front to back through a large buffer.
pub(crate) struct SeqReader<'a> {
    file: &'a dyn VFile,
    len: u64,
    start: u64,
    buf: Vec<u8>,
    /// Drop each chunk's cached pages once the reader moves past it (a
    /// file read once: compaction's inputs).
    drop_behind: bool,
    /// Called before each read of the file (a caller that holds a lock
    /// between records releases it: no lock is held across I/O).
    before_read: Option<&'a dyn Fn()>,
}

impl<'a> SeqReader<'a> {
    pub fn new(file: &'a dyn VFile, len: u64) -> Self {
        SeqReader {
            file,
            len,
            start: 0,
            buf: Vec::new(),
            drop_behind: false,
            before_read: None,
        }
    }
    /// Bytes `[off, off + n)`; the caller keeps `off + n <= len`.
    pub fn get(&mut self, off: u64, n: usize) -> io::Result<&[u8]> {
        let end = self.start + self.buf.len() as u64;
        if off < self.start || off + n as u64 > end {
            if self.drop_behind && !self.buf.is_empty() {
                self.file.drop_cache(self.start, self.buf.len() as u64);
            }
            let want = (n.max(READ_CHUNK) as u64).min(self.len - off) as usize;
            if let Some(f) = self.before_read {
                f();
            }
            self.buf.resize(want, 0);
            self.file.read_exact_at(&mut self.buf, off)?;
            self.start = off;
        }
        let s = (off - self.start) as usize;
        Ok(&self.buf[s..s + n])
    }
}

/// Where a scan stopped.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ScanEnd {
    /// At the end of the file, every record good.
    Clean,
    /// At a record that failed its checks.
    Bad { offset: u64, reason: String },
}

/// Calls `f(offset, header, record bytes)` for each good record from
/// `FILE_HEADER_LEN` on, stopping at the end or at the first bad record.
pub(crate) fn scan_records(
    file: &dyn VFile,
    len: u64,
    path: &Path,
    f: impl FnMut(u64, &RecordHeader, &[u8]) -> Result<()>,
) -> Result<ScanEnd> {
    scan_records_with(file, len, path, false, f)
}

/// [`scan_records`] that, with `drop_behind`, drops the pages it has read
/// from the page cache as it goes ([`VFile::drop_cache`]), the last ones
/// included: for a file read once.
pub(crate) fn scan_records_with(
    file: &dyn VFile,
    len: u64,
    path: &Path,
    drop_behind: bool,
    f: impl FnMut(u64, &RecordHeader, &[u8]) -> Result<()>,
) -> Result<ScanEnd> {
    scan_records_hooked(file, len, path, drop_behind, &|| {}, f)
}

/// [`scan_records_with`] that calls `before_read` before each read of the
/// file.
pub(crate) fn scan_records_hooked(
    file: &dyn VFile,
    len: u64,
    path: &Path,
    drop_behind: bool,
    before_read: &dyn Fn(),
    mut f: impl FnMut(u64, &RecordHeader, &[u8]) -> Result<()>,
) -> Result<ScanEnd> {
    let mut r = SeqReader::new(file, len);
    r.drop_behind = drop_behind;
    r.before_read = Some(before_read);
    let end = scan_with(&mut r, len, path, &mut f);
    if drop_behind {
        file.drop_cache(0, len);
    }
    end
}

fn scan_with(
    r: &mut SeqReader<'_>,
    len: u64,
    path: &Path,
    f: &mut impl FnMut(u64, &RecordHeader, &[u8]) -> Result<()>,
) -> Result<ScanEnd> {
    let mut off = FILE_HEADER_LEN as u64;
    while off < len {
        match check_record_at(r, off, len) {
            Ok(Ok(h)) => {
                let n = h.record_len() as usize;
                let bytes = r.get(off, n).map_err(|e| Error::io("read", path, e))?;
                f(off, &h, bytes)?;
                off += n as u64;
            }
            Ok(Err(reason)) => {
                return Ok(ScanEnd::Bad {
                    offset: off,
                    reason: reason.into(),
                })
            }
            Err(e) => return Err(Error::io("read", path, e)),
        }
    }
    Ok(ScanEnd::Clean)
}

/// Checks the record at `off`: header, length and CRC.
pub(crate) fn check_record_at(
    r: &mut SeqReader<'_>,
    off: u64,
    len: u64,
) -> io::Result<std::result::Result<RecordHeader, &'static str>> {
    if len - off < RECORD_HEADER_LEN as u64 {
        return Ok(Err("truncated record header"));
    }
    let (crc, h) = match RecordHeader::parse(r.get(off, RECORD_HEADER_LEN)?) {
        Ok(x) => x,
        Err(e) => return Ok(Err(e)),
    };
    if h.record_len() > len - off {
        return Ok(Err("record runs past the end of the file"));
    }
    let bytes = r.get(off, h.record_len() as usize)?;
    if crc != crc32c::crc32c(&bytes[4..]) {
        return Ok(Err("record checksum mismatch"));
    }
    Ok(Ok(h))
}

/// Bytes checked for zeros at a time when skipping a zero run.
const ZERO_SKIP: u64 = 64 << 10;

/// The first offset in `[from, len)` holding a byte that is not zero.
fn next_nonzero(r: &mut SeqReader<'_>, mut from: u64, len: u64) -> io::Result<Option<u64>> {
    while from < len {
        let n = (len - from).min(ZERO_SKIP) as usize;
        if let Some(i) = r.get(from, n)?.iter().position(|&b| b != 0) {
            return Ok(Some(from + i as u64));
        }
        from += n as u64;
    }
    Ok(None)
}

/// What follows a bad record in the newest log file.
#[derive(Debug, PartialEq, Eq)]
enum AfterBad {
    /// Only zeros, from the bad record's first byte on: the space reserved
    /// ahead of appends through the map, never written (or a record whose
    /// pages never reached the disk).
    Zeros,
    /// Something that is not a good record, then nothing good: a torn tail.
    Torn,
    /// A good record at this offset: damage in the middle of the file.
    GoodRecord(u64),
}

/// Whether any good record starts after `from`: tells a torn tail (nothing
/// good follows) from damage in the middle of a file. A good record's kind
/// byte is never zero, so runs of zeros (a reserved tail is megabytes of
/// them) are skipped a chunk at a time rather than tried at every offset.
fn classify_after_bad(file: &dyn VFile, from: u64, len: u64) -> io::Result<AfterBad> {
    let mut r = SeqReader::new(file, len);
    if next_nonzero(&mut r, from, len)?.is_none() {
        return Ok(AfterBad::Zeros);
    }
    let mut off = from + 1;
    while off + RECORD_HEADER_LEN as u64 <= len {
        let Some(kind_at) = next_nonzero(&mut r, off + format::RECORD_KIND_OFFSET as u64, len)?
        else {
            break;
        };
        off = kind_at - format::RECORD_KIND_OFFSET as u64;
        if off + RECORD_HEADER_LEN as u64 > len {
            break;
        }
        if let Ok(Ok(_)) = check_record_at(&mut r, off, len) {
            return Ok(AfterBad::GoodRecord(off));
        }
        off += 1;
    }
    Ok(AfterBad::Torn)
}

/// One record as the loader sees it (from a hint entry or a scan).
struct Item<'a> {
    kind: Kind,
    flags: u8,
    tag: u8,
    expiry: u64,
    key: &'a [u8],
    field: &'a [u8],
    loc: Loc,
}

/// (key, field).
type FieldKey = (Box<[u8]>, Box<[u8]>);

/// Rebuilds one shard's index from records met in any order.
#[derive(Default)]
struct Loader {
    idx: Index,
    dead_keys: HashMap<Box<[u8]>, u64>,
    dead_fields: HashMap<FieldKey, u64>,
    metas: HashMap<Box<[u8]>, (Loc, u64)>,
    max_seq: u64,
    /// Batch members met, applied once every shard's commits are known
    /// (or sooner, see [`Loader::settle_local`]).
    pending: Vec<Pending>,
    /// Commit records met, and where they are, whose batches wait for
    /// every shard's commits.
    commits: Vec<(CommitKey, Loc)>,
    /// Commit records whose batches [`Loader::settle_local`] applied, and
    /// where they are.
    settled: Vec<(CommitKey, Loc)>,
    /// Sequence numbers of the members it applied: they still count as
    /// flagged records in the directory-wide check ([`verify_commits`]).
    settled_members: Vec<u64>,
    /// Whether batch members are applied as soon as this shard shows their
    /// batch whole (open does; `check`'s replay keeps every batch for the
    /// directory-wide count).
    settle_early: bool,
    /// `pending` length at which [`Loader::settle_local`] runs next.
    settle_at: usize,
}

/// Pending batch members at which a loader first settles what it can.
const SETTLE_MIN: usize = 4096;

/// A batch member waiting for its batch's commit to be known.
struct Pending {
    kind: Kind,
    tag: u8,
    expiry: u64,
    key: Box<[u8]>,
    field: Box<[u8]>,
    loc: Loc,
}

impl Pending {
    /// The member as the loader applies it, once its batch is committed.
    fn item(&self) -> Item<'_> {
        Item {
            kind: self.kind,
            flags: 0,
            tag: self.tag,
            expiry: self.expiry,
            key: &self.key,
            field: &self.field,
            loc: self.loc,
        }
    }
}

/// Splits `commits` into the batches that hold (sorted) and those whose
/// members are not all there, with how many were found. `members` are the
/// sequence numbers of every flagged record of the directory (sorted);
/// `horizon` is the highest base sequence of its compaction outputs. Only
/// a batch whose first member is at or above the horizon can be counted:
/// no compaction touched it, so every member is still a flagged record.
/// One whose count falls short lost a member to a power failure (its
/// shards are fsynced together, not in order) and is treated as not
/// committed, so that it is not applied in part.
pub(crate) fn verify_commits(
    commits: Vec<CommitKey>,
    members: &[u64],
    horizon: u64,
) -> (Vec<CommitKey>, Vec<(CommitKey, usize)>) {
    let mut torn = Vec::new();
    let kept = commits
        .into_iter()
        .filter(|c| {
            if c.first < horizon {
                return true;
            }
            let from = members.partition_point(|&s| s < c.first);
            let to = members.partition_point(|&s| s <= c.last);
            let found = to - from;
            if found == c.count as usize {
                return true;
            }
            torn.push((*c, found));
            false
        })
        .collect();
    (kept, torn)
}

/// Whether a commit of `commits` (sorted) covers sequence number `seq`.
pub(crate) fn committed(commits: &[CommitKey], seq: u64) -> bool {
    let i = commits.partition_point(|c| c.first <= seq);
    i > 0 && commits[i - 1].last >= seq
}

impl Loader {
    fn apply(&mut self, it: Item<'_>) {
        let seq = it.loc.seq;
        self.max_seq = self.max_seq.max(seq);
        if let Some(f) = self.idx.files.get_mut(&it.loc.file) {
            f.note_record(seq, it.kind, it.loc.len as u64);
            if it.flags & FLAG_BATCH != 0 {
                f.min_flagged = f.min_flagged.min(seq);
            }
        }
        if it.kind == Kind::Commit {
            // A commit record whose key does not parse commits nothing;
            // `check` reports it.
            if let Some(c) = CommitKey::decode(it.key) {
                self.commits.push((c, it.loc));
            }
            return;
        }
        if it.flags & FLAG_BATCH != 0 {
            self.pending.push(Pending {
                kind: it.kind,
                tag: it.tag,
                expiry: it.expiry,
                key: it.key.into(),
                field: it.field.into(),
                loc: it.loc,
            });
            if self.settle_early && self.pending.len() >= self.settle_at.max(SETTLE_MIN) {
                self.settle_local();
                self.settle_at = self.pending.len() * 2;
            }
            return;
        }
        self.apply_state(it);
    }

    /// Applies now the members of every batch whose commit record this
    /// shard has met, that needs no commit log (no token), and whose
    /// members are all here: as many flagged records waiting in its
    /// sequence range as the commit counts. Exact whatever the order of
    /// records: a member applied here is covered by a commit that open's
    /// directory-wide check must then accept, or open reads again.
    /// Keeping every member until all shards are read cost a copy of its
    /// key and field per record: a directory of values written in
    /// segments (each segment a batch member) held 300 MB of them at once
    /// to open 134 k keys. The directory-wide check still runs on every
    /// commit and member ([`verify_commits`]); should it reject a batch
    /// this applied (another shard holding flagged records in its range),
    /// open reads the directory again without settling early.
    fn settle_local(&mut self) {
        if self.pending.is_empty() || self.commits.is_empty() {
            return;
        }
        self.pending.sort_unstable_by_key(|p| p.loc.seq);
        let mut settle = vec![false; self.pending.len()];
        let mut any = false;
        let pending = &self.pending;
        let settled = &mut self.settled;
        self.commits.retain(|&(c, loc)| {
            if c.token.is_some() {
                return true;
            }
            let from = pending.partition_point(|p| p.loc.seq < c.first);
            let to = pending.partition_point(|p| p.loc.seq <= c.last);
            if to - from != c.count as usize {
                return true;
            }
            settle[from..to].fill(true);
            settled.push((c, loc));
            any = true;
            false
        });
        if !any {
            return;
        }
        let mut keep = Vec::with_capacity(self.pending.len());
        for (p, now) in std::mem::take(&mut self.pending).into_iter().zip(settle) {
            if !now {
                keep.push(p);
                continue;
            }
            self.settled_members.push(p.loc.seq);
            self.apply_state(p.item());
        }
        self.pending = keep;
    }

    /// Applies the batch members whose batch `commits` (sorted, from every
    /// shard) commits; returns the sequence numbers of the others.
    fn resolve(&mut self, commits: &[CommitKey]) -> Vec<u64> {
        let mut aborted = Vec::new();
        for p in std::mem::take(&mut self.pending) {
            if committed(commits, p.loc.seq) {
                self.apply_state(p.item());
            } else {
                aborted.push(p.loc.seq);
            }
        }
        aborted
    }

    /// Applies one record's effect on the index (sequence numbers decide).
    fn apply_state(&mut self, it: Item<'_>) {
        let seq = it.loc.seq;
        // The empty checks skip hash probes in the common case: a directory
        // of plain values with few deletions.
        let key_dead_at = if self.dead_keys.is_empty() {
            0
        } else {
            self.dead_keys.get(it.key).copied().unwrap_or(0)
        };
        match it.kind {
            Kind::Put => {
                if key_dead_at >= seq {
                    return;
                }
                let old = self.idx.keys.get(it.key);
                if old.is_some_and(|e| e.loc.seq >= seq) {
                    return;
                }
                if !self.idx.maps.is_empty() {
                    if let Some(m) = self.idx.maps.get(it.key) {
                        if m.fields.values().any(|l| l.seq > seq) {
                            return;
                        }
                        self.idx.maps.remove(it.key);
                    }
                }
                self.idx.keys.insert(it.key, it.loc, it.expiry != 0);
                if it.expiry != 0 || old.is_some_and(|e| e.has_ttl) {
                    self.idx.set_expiry(it.key, it.expiry);
                }
            }
            Kind::Delete => {
                if key_dead_at < seq {
                    self.dead_keys.insert(it.key.into(), seq);
                }
                if let Some(e) = self.idx.keys.get(it.key) {
                    if e.loc.seq < seq {
                        self.idx.keys.remove(it.key);
                        self.idx.set_expiry(it.key, 0);
                    }
                }
                if let Some(m) = self.idx.maps.get_mut(it.key) {
                    m.fields.retain(|_, l| l.seq > seq);
                    if m.fields.is_empty() {
                        self.idx.maps.remove(it.key);
                    }
                }
            }
            Kind::Field => {
                if key_dead_at >= seq {
                    return;
                }
                let fk = (Box::from(it.key), Box::from(it.field));
                if self.dead_fields.get(&fk).is_some_and(|&s| s >= seq) {
                    return;
                }
                if let Some(e) = self.idx.keys.get(it.key) {
                    if e.loc.seq > seq {
                        return;
                    }
                    self.idx.keys.remove(it.key);
                    self.idx.set_expiry(it.key, 0);
                }
                let m = self.idx.maps.entry(fk.0).or_insert_with(|| MapEntry {
                    tag: it.tag,
                    ..MapEntry::default()
                });
                // The newest field names the map's kind: an older field
                // met first may be of the key's earlier life, whose delete
                // is read later (from a compaction output, or in another
                // order when a shard settles a batch early).
                if seq > m.version {
                    m.tag = it.tag;
                }
                m.version = m.version.max(seq);
                match m.fields.get_mut(&fk.1[..]) {
                    Some(l) if l.seq >= seq => {}
                    Some(l) => *l = it.loc,
                    None => {
                        m.fields.insert(&fk.1, it.loc);
                    }
                }
            }
            Kind::DeleteField => {
                let fk = (Box::from(it.key), Box::from(it.field));
                let e = self.dead_fields.entry(fk).or_insert(0);
                *e = (*e).max(seq);
                if let Some(m) = self.idx.maps.get_mut(it.key) {
                    if m.fields.get(it.field).is_some_and(|l| l.seq < seq) {
                        m.fields.swap_remove(it.field);
                        if m.fields.is_empty() {
                            self.idx.maps.remove(it.key);
                        }
                    }
                }
            }
            Kind::Commit => {}
            Kind::MapMeta => {
                if key_dead_at >= seq {
                    return;
                }
                match self.metas.get_mut(it.key) {
                    Some((l, _)) if l.seq >= seq => {}
                    Some(slot) => *slot = (it.loc, it.expiry),
                    None => {
                        self.metas.insert(it.key.into(), (it.loc, it.expiry));
                    }
                }
            }
        }
    }

    /// Joins map metadata and field tombstones to their maps, puts map keys
    /// into the key index and computes live bytes per file.
    fn finish(mut self) -> (Index, u64) {
        for m in self.idx.maps.values_mut() {
            m.fields.shrink_to_run();
            m.version = m.fields.values().map(|l| l.seq).max().unwrap_or(0);
        }
        for (key, (loc, expiry)) in std::mem::take(&mut self.metas) {
            if self.dead_keys.get(&key).is_some_and(|&s| s >= loc.seq) {
                continue;
            }
            if let Some(m) = self.idx.maps.get_mut(&key) {
                m.meta = Some(loc);
                m.expiry = expiry;
                m.version = m.version.max(loc.seq);
            }
        }
        // Commit records are accounted as live: compaction decides when
        // they may go, not the garbage threshold.
        let commit_locs: Vec<Loc> = self
            .commits
            .iter()
            .map(|&(_, l)| l)
            .chain(self.settled.iter().map(|&(_, l)| l))
            .collect();
        for ((key, _), seq) in std::mem::take(&mut self.dead_fields) {
            let dead_at = self.dead_keys.get(&key).copied().unwrap_or(0);
            if let Some(m) = self.idx.maps.get_mut(&key) {
                if seq > dead_at {
                    m.version = m.version.max(seq);
                }
            }
        }
        let mut idx = self.idx;
        idx.large.rebuild(&idx.maps);
        let maps: Vec<(Box<[u8]>, u64, u64)> = idx
            .maps
            .iter()
            .map(|(k, m)| (k.clone(), m.version, m.expiry))
            .collect();
        for (key, version, expiry) in maps {
            let loc = Loc {
                file: MAP_FILE,
                offset: 0,
                len: 0,
                seq: version,
            };
            idx.keys.insert(&key, loc, expiry != 0);
            idx.set_expiry(&key, expiry);
        }
        let mut live: Vec<Loc> = Vec::new();
        idx.keys.for_each(|_, e| {
            if e.loc.file != MAP_FILE {
                live.push(e.loc);
            }
        });
        for m in idx.maps.values() {
            live.extend(m.fields.values());
            live.extend(m.meta);
        }
        for l in live.into_iter().chain(commit_locs) {
            idx.add_live(l);
        }
        (idx, self.max_seq)
    }
}

/// Replays records in file order exactly as open does, for `check`: which
/// bytes of each file the index would keep.
#[derive(Default)]
pub(crate) struct Replay {
    loader: Loader,
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay").finish_non_exhaustive()
    }
}

impl Replay {
    /// Registers a data file before its records are applied.
    pub fn add_file(&mut self, fid: u32, origin: Origin, len: u64, handle: Arc<dyn VFile>) {
        self.loader
            .idx
            .files
            .insert(fid, FileInfo::new(DataFile::new(handle, 0), origin, len));
    }

    /// Applies one good record of file `fid` found at `offset`.
    pub fn apply(&mut self, fid: u32, offset: u64, h: &RecordHeader, key: &[u8], field: &[u8]) {
        self.loader.apply(Item {
            kind: h.kind,
            flags: h.flags,
            tag: h.tag,
            expiry: h.expiry,
            key,
            field,
            loc: Loc {
                file: fid,
                offset: offset as u32,
                len: h.record_len() as u32,
                seq: h.seq,
            },
        });
    }

    /// The commit records met so far.
    pub fn commits(&self) -> Vec<CommitKey> {
        self.loader.commits.iter().map(|&(c, _)| c).collect()
    }

    /// Live bytes per file once everything is applied, batch members
    /// counted only where `commits` (sorted, from every shard) commits them.
    pub fn live_bytes(mut self, commits: &[CommitKey]) -> std::collections::BTreeMap<u32, u64> {
        self.loader.resolve(commits);
        let (idx, _) = self.loader.finish();
        idx.files.iter().map(|(&id, f)| (id, f.live)).collect()
    }
}

struct LoadedShard {
    index: Index,
    writer: Writer,
    next_file: u32,
    max_seq: u64,
    pending_hints: Vec<u32>,
    /// Batch members of this shard no commit covers.
    aborted: Vec<u64>,
}

/// A shard whose files are read, before its batch members are resolved.
struct ScannedShard {
    loader: Loader,
    /// Highest base sequence of the shard's compaction outputs.
    compaction_base: u64,
    active: Option<(u32, Arc<dyn VFile>, u64, bool)>,
    pending_hints: Vec<u32>,
    max_id: Option<u32>,
}

/// Hint entries read ahead of the one being applied (see `load_shard`).
const PREFETCH_AHEAD: usize = 8;

/// A hint file's bytes, mapped read-only (no copy, no fresh anonymous
/// memory to fault in). Hint files are never changed once renamed into
/// place, and the directory lock keeps other processes out.
fn map_hint(path: &Path) -> std::result::Result<memmap2::Mmap, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    // SAFETY: the file is not modified or truncated while mapped (see above);
    // the map is dropped before the shard finishes loading.
    unsafe { memmap2::MmapOptions::new().populate().map(&file) }.map_err(|e| e.to_string())
}

pub(crate) fn parse_name(name: &str) -> Option<(u32, &str)> {
    let (stem, ext) = name.split_once('.')?;
    if stem.len() != 10 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stem.parse().ok()?, ext))
}

/// Reads one shard's files into a loader (phase 1 of open).
fn scan_shard(
    dir: &Path,
    opts: &Options,
    base_seq: &AtomicU64,
    settle_early: bool,
) -> Result<ScannedShard> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
    finish_interrupted_compactions(dir)?;
    let mut ids = Vec::new();
    let mut hints = std::collections::HashSet::new();
    for ent in std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))? {
        let ent = ent.map_err(|e| Error::io("list", dir, e))?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        match parse_name(name) {
            Some((n, "data")) => ids.push(n),
            Some((n, "hint")) => {
                hints.insert(n);
            }
            Some((_, ext)) if ext.ends_with("tmp") => {
                // Unfinished compaction output or hint: the inputs are intact.
                let p = ent.path();
                std::fs::remove_file(&p).map_err(|e| Error::io("remove", &p, e))?;
            }
            _ => {
                tracing::warn!(file = %ent.path().display(), "ignoring unknown file in shard directory")
            }
        }
    }
    ids.sort_unstable();
    let max_id = ids.last().copied();
    // A hint whose data file is gone (its file was compacted while the hint
    // was being written) describes nothing.
    for orphan in hints.iter().filter(|h| ids.binary_search(h).is_err()) {
        let p = hint_path(dir, *orphan);
        std::fs::remove_file(&p).map_err(|e| Error::io("remove", &p, e))?;
    }

    // Headers first: they say which file is the newest log file, the only
    // one allowed a torn tail.
    let mut files: Vec<(u32, Arc<dyn VFile>, u64, FileHeader)> = Vec::new();
    for &fid in &ids {
        let path = data_path(dir, fid);
        let handle = opts
            .vfs
            .open(&path)
            .map_err(|e| Error::io("open", &path, e))?;
        let len = handle.len().map_err(|e| Error::io("stat", &path, e))?;
        let mut hb = [0u8; FILE_HEADER_LEN];
        let hdr = if len >= FILE_HEADER_LEN as u64 {
            handle
                .read_exact_at(&mut hb, 0)
                .map_err(|e| Error::io("read", &path, e))?;
            FileHeader::decode(&hb, &DATA_MAGIC)
        } else {
            Err("file shorter than its header".into())
        };
        match hdr {
            Ok(h) => {
                base_seq.fetch_max(h.base_seq, Ordering::SeqCst);
                files.push((fid, handle, len, h));
            }
            // A crash while creating the newest file leaves it without a
            // complete header and without records: nothing to lose.
            Err(_) if Some(fid) == max_id && len <= FILE_HEADER_LEN as u64 => {
                tracing::warn!(file = %path.display(), "removing a data file torn while it was created");
                drop(handle);
                std::fs::remove_file(&path).map_err(|e| Error::io("remove", &path, e))?;
                let h = hint_path(dir, fid);
                if hints.remove(&fid) {
                    std::fs::remove_file(&h).map_err(|e| Error::io("remove", &h, e))?;
                }
            }
            Err(reason) => {
                return Err(Error::Corrupt {
                    path,
                    offset: 0,
                    reason,
                })
            }
        }
    }
    let last_log = files
        .iter()
        .filter(|f| f.3.origin == Origin::Log)
        .map(|f| f.0)
        .max();
    let compaction_base = files
        .iter()
        .filter(|f| f.3.origin == Origin::Compaction)
        .map(|f| f.3.base_seq)
        .max()
        .unwrap_or(0);

    let mut loader = Loader {
        settle_early,
        ..Loader::default()
    };
    // Size the index once from the hint footers (an upper bound when keys
    // were overwritten across files; the excess is given back below).
    let expected: u64 = hints.iter().filter_map(|&h| hint_entries(dir, h)).sum();
    loader
        .idx
        .keys
        .reserve(usize::try_from(expected).unwrap_or(0).min(1 << 32));
    let mut pending_hints = Vec::new();
    let mut active: Option<(u32, Arc<dyn VFile>, u64, bool)> = None;
    for (fid, handle, mut len, hdr) in files {
        let path = data_path(dir, fid);
        // Not mapped yet: a torn tail may still be cut off below, and a file
        // is never truncated while it is mapped. The real entry (with its
        // map) replaces this one once the file's length is final.
        loader.idx.files.insert(
            fid,
            FileInfo::new(DataFile::new(handle.clone(), 0), hdr.origin, len),
        );
        let mut from_hint = false;
        if hints.contains(&fid) {
            let hp = hint_path(dir, fid);
            let applied = map_hint(&hp).and_then(|bytes| {
                // Checked whole before the first entry is applied. Entries
                // are applied a few behind the one being read, with the
                // table slot of each prefetched when it is read: the
                // inserts then rarely wait for memory.
                let mut window: VecDeque<Item<'_>> = VecDeque::with_capacity(PREFETCH_AHEAD + 1);
                format::read_hint_file(&bytes, len, |e| {
                    let it = Item {
                        kind: e.kind,
                        flags: e.flags,
                        tag: e.tag,
                        expiry: e.expiry,
                        key: e.key,
                        field: e.field,
                        loc: Loc {
                            file: fid,
                            offset: e.offset,
                            len: e.record_len,
                            seq: e.seq,
                        },
                    };
                    let keys = &loader.idx.keys;
                    keys.prefetch(keys.hash_key(it.key));
                    window.push_back(it);
                    if window.len() > PREFETCH_AHEAD {
                        loader.apply(window.pop_front().unwrap());
                    }
                })?;
                for it in window {
                    loader.apply(it);
                }
                Ok(())
            });
            match applied {
                Ok(()) => from_hint = true,
                Err(why) => {
                    tracing::warn!(hint = %hp.display(), %why, "hint file unusable; scanning the data file instead");
                    std::fs::remove_file(&hp).map_err(|e| Error::io("remove", &hp, e))?;
                }
            }
        }
        if !from_hint {
            let end = scan_records(&*handle, len, &path, |off, h, bytes| {
                let k0 = RECORD_HEADER_LEN;
                let k1 = k0 + h.key_len as usize;
                loader.apply(Item {
                    kind: h.kind,
                    flags: h.flags,
                    tag: h.tag,
                    expiry: h.expiry,
                    key: &bytes[k0..k1],
                    field: &bytes[k1..k1 + h.field_len as usize],
                    loc: Loc {
                        file: fid,
                        offset: off as u32,
                        len: h.record_len() as u32,
                        seq: h.seq,
                    },
                });
                Ok(())
            })?;
            if let ScanEnd::Bad { offset, reason } = end {
                if Some(fid) != last_log {
                    return Err(Error::Corrupt {
                        path,
                        offset,
                        reason,
                    });
                }
                match classify_after_bad(&*handle, offset, len)
                    .map_err(|e| Error::io("read", &path, e))?
                {
                    AfterBad::GoodRecord(later) => {
                        return Err(Error::Corrupt {
                            path,
                            offset,
                            reason: format!("{reason}, and a good record follows at {later}"),
                        });
                    }
                    // The normal state after a crash while appending
                    // through the map: nothing was lost.
                    AfterBad::Zeros => {
                        tracing::info!(file = %path.display(), offset, dropped = len - offset,
                            "cutting the reserved zero tail off the newest log file")
                    }
                    AfterBad::Torn => {
                        tracing::warn!(file = %path.display(), offset, dropped = len - offset, %reason,
                            "cutting a torn tail off the newest log file")
                    }
                }
                handle
                    .set_len(offset)
                    .and_then(|_| handle.sync_data())
                    .map_err(|e| Error::io("truncate", &path, e))?;
                len = offset;
                loader.idx.files.get_mut(&fid).unwrap().total = len;
            }
        }
        // The newest log file stays the active file if it has room: map as
        // much as it may grow to, writable so appends can go through the
        // map. Others are sealed: map what they hold.
        loader.idx.files.get_mut(&fid).unwrap().handle =
            if Some(fid) == last_log && len < opts.max_file_size {
                DataFile::appendable(handle.clone(), opts.max_file_size)
            } else {
                DataFile::new(handle.clone(), len)
            };
        if Some(fid) == last_log {
            active = Some((fid, handle, len, from_hint));
        } else if !from_hint && hdr.origin == Origin::Log {
            pending_hints.push(fid);
        }
    }
    // What is left waits for the other shards' commits.
    loader.settle_local();

    Ok(ScannedShard {
        loader,
        compaction_base,
        active,
        pending_hints,
        max_id,
    })
}

/// Applies the shard's committed batch members, builds its index and its
/// writer (phase 2 of open, once `commits` holds every shard's commits).
fn finish_shard(
    opts: &Options,
    id: usize,
    dir: &Path,
    base_seq: &AtomicU64,
    scanned: ScannedShard,
    commits: &[CommitKey],
) -> Result<LoadedShard> {
    let ScannedShard {
        mut loader,
        compaction_base: _,
        active,
        mut pending_hints,
        max_id,
    } = scanned;
    let aborted = loader.resolve(commits);
    if !aborted.is_empty() {
        tracing::info!(
            shard = id,
            records = aborted.len(),
            "ignoring the members of a write batch that was not committed (a crash remnant)"
        );
    }
    let (mut index, max_seq) = loader.finish();
    index.keys.shrink_to_fit();
    let mut next_file = max_id.map_or(1, |m| m + 1);
    let writer = match active {
        // Keep appending to the newest log file; its hint (from a clean
        // close) goes stale with the first append, so it goes first.
        Some((fid, handle, len, had_hint)) if len < opts.max_file_size => {
            if had_hint {
                let hp = hint_path(dir, fid);
                std::fs::remove_file(&hp).map_err(|e| Error::io("remove", &hp, e))?;
            }
            // The index's `DataFile` wraps the same handle, writable-mapped.
            drop(handle);
            let info = index.files.get_mut(&fid).unwrap();
            info.active = true;
            Writer::new(fid, &info.handle, len)
        }
        other => {
            if let Some((fid, _, _, false)) = other {
                pending_hints.push(fid);
            }
            let fid = next_file;
            next_file += 1;
            let path = data_path(dir, fid);
            let handle = opts
                .vfs
                .create(&path)
                .map_err(|e| Error::io("create", &path, e))?;
            let hdr = FileHeader {
                origin: Origin::Log,
                base_seq: base_seq.load(Ordering::SeqCst).max(max_seq + 1),
            }
            .encode(&DATA_MAGIC);
            handle
                .write_all_at(&hdr, 0)
                .and_then(|_| handle.sync_data())
                .map_err(|e| Error::io("write", &path, e))?;
            sync_dir(dir)?;
            let data = DataFile::appendable(handle, opts.max_file_size);
            let mut info = FileInfo::new(data.clone(), Origin::Log, FILE_HEADER_LEN as u64);
            info.active = true;
            index.files.insert(fid, info);
            Writer::new(fid, &data, FILE_HEADER_LEN as u64)
        }
    };
    tracing::debug!(
        shard = id,
        keys = index.keys.len(),
        files = index.files.len(),
        "shard loaded"
    );
    Ok(LoadedShard {
        index,
        writer,
        next_file,
        max_seq,
        pending_hints,
        aborted,
    })
}

/// The entry count in the footer of `<id>.hint`, if it has a valid one,
/// capped by how many entries the file can hold: the footer is checked only
/// by its own CRC here, and a damaged or hostile one must not size the index
/// (a count of 2^32 once reserved 64 GiB).
fn hint_entries(dir: &Path, id: u32) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(hint_path(dir, id)).ok()?;
    let len = f.metadata().ok()?.len();
    let mut foot = [0u8; format::HINT_FOOTER_LEN];
    let at = len.checked_sub(format::HINT_FOOTER_LEN as u64)?;
    f.read_exact_at(&mut foot, at).ok()?;
    let room = at.saturating_sub(FILE_HEADER_LEN as u64) / format::HINT_ENTRY_HEADER_LEN as u64;
    format::hint_footer_count(&foot).map(|n| n.min(room))
}

/// A compaction that wrote its victims marker had made its outputs durable;
/// deleting the inputs it lists completes it. Only then are files listed.
fn finish_interrupted_compactions(dir: &Path) -> Result<()> {
    for ent in std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))? {
        let p = ent.map_err(|e| Error::io("list", dir, e))?.path();
        if p.extension().is_some_and(|e| e == "victims") {
            let b = std::fs::read(&p).map_err(|e| Error::io("read", &p, e))?;
            let ids = format::decode_victims(&b).map_err(|reason| Error::Corrupt {
                path: p.clone(),
                offset: 0,
                reason,
            })?;
            tracing::info!(marker = %p.display(), files = ids.len(), "finishing an interrupted compaction");
            crate::compaction::remove_files_in(dir, &ids)?;
            std::fs::remove_file(&p).map_err(|e| Error::io("remove", &p, e))?;
            sync_dir(dir)?;
        }
    }
    Ok(())
}

/// Checks the `BASALT` metadata file's bytes and returns the shard count.
pub(crate) fn decode_meta(path: &Path, b: &[u8]) -> Result<usize> {
    let bad = |reason: &str| Error::Corrupt {
        path: path.to_path_buf(),
        offset: 0,
        reason: reason.into(),
    };
    if b.len() != 20 || b[0..8] != META_MAGIC {
        return Err(bad("not a Basalt directory metadata file"));
    }
    if u32::from_le_bytes(b[16..20].try_into().unwrap()) != crc32c::crc32c(&b[0..16]) {
        return Err(bad("metadata checksum mismatch"));
    }
    let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
    if !(format::OLDEST_READABLE_VERSION..=format::FORMAT_VERSION).contains(&version) {
        return Err(bad(&format!(
            "format version {version}, this build reads versions {} to {}",
            format::OLDEST_READABLE_VERSION,
            format::FORMAT_VERSION
        )));
    }
    let n = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
    if !n.is_power_of_two() || n > 1024 {
        return Err(bad("invalid shard count"));
    }
    Ok(n)
}

/// Reads the directory's shard count from `BASALT`, writing the file for a
/// new directory. A directory an older build wrote is marked with this
/// build's version before anything is appended: the files it keeps say
/// their own (older) version, but records this build appends to the active
/// one may be of a newer kind (a patch), and an older build must refuse the
/// directory by its version rather than take such a record for damage (and
/// cut it off as a torn tail).
fn read_or_write_meta(dir: &Path, shards: usize) -> Result<usize> {
    let path = dir.join("BASALT");
    match std::fs::read(&path) {
        Ok(b) => {
            let n = decode_meta(&path, &b)?;
            let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
            if version < format::FORMAT_VERSION {
                write_meta(dir, n)?;
            }
            Ok(n)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => write_meta(dir, shards),
        Err(e) => Err(Error::io("read", &path, e)),
    }
}

/// Writes `BASALT` (this build's version, `shards`) atomically.
fn write_meta(dir: &Path, shards: usize) -> Result<usize> {
    let path = dir.join("BASALT");
    let mut b = Vec::with_capacity(20);
    b.extend_from_slice(&META_MAGIC);
    b.extend_from_slice(&format::FORMAT_VERSION.to_le_bytes());
    b.extend_from_slice(&(shards as u32).to_le_bytes());
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    let tmp = dir.join("BASALT.tmp");
    std::fs::write(&tmp, &b)
        .and_then(|_| std::fs::File::open(&tmp)?.sync_all())
        .map_err(|e| Error::io("write", &tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io("rename", &path, e))?;
    sync_dir(dir)?;
    Ok(shards)
}

impl Db {
    /// Opens (creating if needed) the database in `dir`.
    ///
    /// Takes an exclusive lock on `dir/LOCK` (a second open fails with
    /// [`Error::Locked`]), loads every shard in parallel and starts the
    /// background threads the options ask for.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Db> {
        let started = Instant::now();
        opts.validate()?;
        let dir: PathBuf = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("create directory", &dir, e))?;
        let lock_path = dir.join("LOCK");
        let lock_file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| Error::io("open", &lock_path, e))?;
        match lock_file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(Error::Locked { path: dir }),
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("lock", &lock_path, e)),
        }
        let nshards = read_or_write_meta(&dir, opts.shards)?;
        if nshards != opts.shards {
            tracing::info!(
                recorded = nshards,
                requested = opts.shards,
                "using the shard count recorded in the directory"
            );
        }
        // A shared counter is the floor for files created now, so an empty
        // directory records in its first header what was already handed out.
        let floor = opts
            .sequence
            .as_ref()
            .map_or(1, |c| c.load(Ordering::SeqCst));
        let base_seq = AtomicU64::new(floor.max(1));
        // Two phases: a batch's members may lie in any shard and its commit
        // in another, so members are applied only once every shard's
        // commit records are known, except for those a shard shows whole
        // on its own (`Loader::settle_local`); the directory-wide check
        // below must agree with each of those, or the directory is read
        // again without settling early.
        let mut settle_early = true;
        let (scanned, commits, torn, tokens) = loop {
            let scanned: Vec<Result<ScannedShard>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..nshards)
                    .map(|i| {
                        let (opts, dir, base_seq) = (&opts, &dir, &base_seq);
                        s.spawn(move || {
                            scan_shard(&shard_dir(dir, i), opts, base_seq, settle_early)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("shard loader panicked"))
                    .collect()
            });
            let scanned = scanned.into_iter().collect::<Result<Vec<_>>>()?;
            let mut commits: Vec<CommitKey> = scanned
                .iter()
                .flat_map(|s| s.loader.commits.iter().chain(&s.loader.settled))
                .map(|&(c, _)| c)
                .collect();
            commits.sort_unstable();
            let mut members: Vec<u64> = scanned
                .iter()
                .flat_map(|s| {
                    let pending = s.loader.pending.iter().map(|p| p.loc.seq);
                    pending.chain(s.loader.settled_members.iter().copied())
                })
                .collect();
            members.sort_unstable();
            let horizon = scanned.iter().map(|s| s.compaction_base).max().unwrap_or(0);
            // A conditional commit counts only if its token is in the
            // group's commit log.
            commits.retain(|c| match c.token {
                None => true,
                Some(t) => opts.commit_oracle.as_ref().is_some_and(|o| o(t)),
            });
            let mut tokens: Vec<u64> = commits.iter().filter_map(|c| c.token).collect();
            tokens.sort_unstable();
            tokens.dedup();
            let (commits, torn) = verify_commits(commits, &members, horizon);
            let applied_torn = torn.iter().any(|(c, _)| {
                scanned
                    .iter()
                    .any(|s| s.loader.settled.iter().any(|(d, _)| d == c))
            });
            if applied_torn && settle_early {
                tracing::warn!(
                    "a write batch one shard showed whole fails the directory-wide count; \
                     reading the directory again, every batch waiting for every shard"
                );
                settle_early = false;
                continue;
            }
            break (scanned, commits, torn, tokens);
        };
        for (c, found) in torn {
            tracing::warn!(
                first = c.first,
                last = c.last,
                members = c.count,
                found,
                "a committed write batch lost members (power failure while it was being fsynced?); ignoring all of it"
            );
        }
        let loaded: Vec<Result<LoadedShard>> = std::thread::scope(|s| {
            let handles: Vec<_> = scanned
                .into_iter()
                .enumerate()
                .map(|(i, sc)| {
                    let (opts, dir, base_seq, commits) = (&opts, &dir, &base_seq, &commits);
                    s.spawn(move || {
                        finish_shard(opts, i, &shard_dir(dir, i), base_seq, sc, commits)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("shard loader panicked"))
                .collect()
        });
        let mut shards = Vec::with_capacity(nshards);
        let mut aborted = Vec::new();
        let mut next_seq = base_seq.load(Ordering::SeqCst).max(1);
        let large_maps = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for (i, l) in loaded.into_iter().enumerate() {
            let mut l = l?;
            l.index.large.attach(&large_maps);
            aborted.extend_from_slice(&l.aborted);
            next_seq = next_seq.max(l.max_seq + 1);
            let w = &l.writer;
            shards.push(Shard {
                id: i,
                dir: shard_dir(&dir, i),
                synced: Mutex::new((w.file_id, w.len)),
                appended: AtomicU64::new(((w.file_id as u64) << 32) | w.len),
                written: AtomicU64::new(0),
                index: RwLock::new(l.index),
                writer: Mutex::new(l.writer),
                next_file: AtomicU32::new(l.next_file),
                pending_hints: Mutex::new(
                    l.pending_hints.into_iter().map(|id| (id, None)).collect(),
                ),
            });
        }
        let seq = match &opts.sequence {
            Some(counter) => {
                counter.fetch_max(next_seq, Ordering::SeqCst);
                counter.clone()
            }
            None => Arc::new(AtomicU64::new(next_seq)),
        };
        aborted.sort_unstable();
        let group = opts.batch_group.clone().unwrap_or_default();
        let inner = Arc::new_cyclic(|me| Inner {
            group,
            me: me.clone(),
            open_first: AtomicU64::new(u64::MAX),
            stalled: AtomicBool::new(false),
            stalls: AtomicU64::new(0),
            aborted,
            tokens,
            dir,
            opts,
            shards,
            seq,
            poisoned: AtomicBool::new(false),
            poison_reason: Mutex::new(None),
            poison_site: Mutex::new(None),
            batch_lost: AtomicBool::new(false),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            counters: Counters::default(),
            expiry_paused_until: AtomicU64::new(0),
            residency: std::sync::atomic::AtomicU8::new(crate::cold::Residency::InPlace as u8),
            compaction: Mutex::new(()),
            deleting: parking_lot::RwLock::new(()),
            lock_file,
            large_maps,
        });
        let workers = crate::compaction::spawn_workers(&inner);
        let db = Db {
            inner,
            workers,
            closed: false,
        };
        if !db.inner.aborted.is_empty() {
            // A failure here costs that value its length, not the open.
            if let Err(e) = db.write_patched_last_segments_whole() {
                tracing::error!(error = %e, "writing patched last segments whole failed");
            }
        }
        tracing::info!(dir = %db.inner.dir.display(), keys = db.len(), ms = started.elapsed().as_millis() as u64, "opened");
        Ok(db)
    }
}

pub(crate) fn shard_dir(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("shard-{i:04}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::RecordRef;
    use crate::vfs::{StdFs, Vfs};

    fn record(seq: u64) -> Vec<u8> {
        let mut b = Vec::new();
        RecordRef {
            seq,
            expiry: 0,
            kind: Kind::Put,
            flags: 0,
            tag: 0,
            key: b"k",
            field: &[],
            value: b"v",
        }
        .encode_into(&mut b);
        b
    }

    /// A file of `len` zero bytes with `parts` written at their offsets.
    fn file_with(dir: &Path, len: u64, parts: &[(u64, &[u8])]) -> Arc<dyn VFile> {
        let f = StdFs.create(&dir.join("f")).unwrap();
        f.set_len(len).unwrap();
        for (off, b) in parts {
            f.write_all_at(b, *off).unwrap();
        }
        f
    }

    #[test]
    fn what_follows_a_bad_record_is_told_apart_across_long_zero_runs() {
        let dir = tempfile::tempdir().unwrap();
        let len = 9 << 20;
        let garbage: &[u8] = &[0xAB; 20];
        let rec = record(7);
        /// (name, bytes written at their offsets, expected answer)
        type Case<'a> = (&'a str, Vec<(u64, &'a [u8])>, AfterBad);
        let cases: [Case<'_>; 4] = [
            ("only zeros", vec![], AfterBad::Zeros),
            ("garbage then zeros", vec![(1000, garbage)], AfterBad::Torn),
            (
                "a record megabytes later at an odd offset",
                vec![(1000, garbage), ((7 << 20) + 3, &rec)],
                AfterBad::GoodRecord((7 << 20) + 3),
            ),
            (
                "a record right after the zeros start",
                vec![(1001, &rec)],
                AfterBad::GoodRecord(1001),
            ),
        ];
        for (name, parts, want) in cases {
            let sub = dir.path().join(name.replace(' ', "-"));
            std::fs::create_dir(&sub).unwrap();
            let f = file_with(&sub, len, &parts);
            assert_eq!(classify_after_bad(&*f, 1000, len).unwrap(), want, "{name}");
        }
    }
}
