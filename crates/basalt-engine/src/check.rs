//! Offline verification and repair of a database directory: [`check`] reads
//! every data file record by record and every hint file, and reports per
//! file what open would keep and every damage found; [`repair`] keeps every
//! readable record, drops what is not, and leaves a directory that opens.
//!
//! The one idea a reader needs: **check never trusts a length it has not
//! verified.** A record is good only if its header parses and its CRC32C
//! (which covers the header too) matches. After a bad record, the scan goes
//! on at the end the bad header claims only if a good record (or the end of
//! the file) is exactly there; otherwise framing is lost and the scan
//! resynchronises at the next offset where a whole record verifies
//! (`docs/file-format.md`, "Checking and repair"). So one flipped byte costs
//! one record, never the rest of the file.
//!
//! What counts as damage follows recovery: a torn tail or a zero tail of the
//! newest log-origin file of a shard is normal after a crash (a note, not an
//! error; open cuts it); anything else that fails a check is an error.
//! Live bytes are computed by replaying the good records of every file in
//! file order with the same loader open uses, so "live" means "what the
//! index would point at".
//!
//! Both functions take the directory lock, so they refuse a directory a
//! running process has open.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::db::{data_path, hint_path, sync_dir};
use crate::format::{
    self, FileHeader, HintEntry, Origin, RecordHeader, DATA_MAGIC, FILE_HEADER_LEN, HINT_MAGIC,
    RECORD_HEADER_LEN, RECORD_KIND_OFFSET,
};
use crate::recovery::{decode_meta, parse_name, shard_dir, Replay};
use crate::vfs::{StdFs, Vfs};
use crate::{Error, Result};

/// Progress callback: `(bytes done, bytes in total)`.
pub type Progress = Arc<dyn Fn(u64, u64) + Send + Sync>;

/// Options of [`check`] and [`repair`].
#[derive(Clone, Default)]
pub struct CheckOptions {
    /// Called after each file with the bytes read so far and the total
    /// [default: none].
    pub progress: Option<Progress>,
}

impl CheckOptions {
    /// Sets [`CheckOptions::progress`].
    pub fn progress(mut self, f: impl Fn(u64, u64) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }
}

impl fmt::Debug for CheckOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckOptions")
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Normal after a crash; open handles it without losing anything that
    /// was acknowledged.
    Note,
    /// A record or file failed a check: open refuses the directory or data
    /// is lost.
    Error,
}

/// What was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DamageKind {
    /// The newest log file ends in a record that does not verify, with
    /// nothing good after it (a write cut short by a crash).
    TornTail,
    /// The newest log file ends in zeros reserved ahead of appends.
    ZeroTail,
    /// The newest file is shorter than its header (torn while created).
    TornNewFile,
    /// Bytes in a data file that are not a good record, somewhere a torn
    /// tail is not allowed.
    BadRecord,
    /// A data file's header fails its checks.
    BadFileHeader,
    /// A hint file fails its own checks (header, entries, footer, or the
    /// data length it describes).
    BadHint,
    /// A hint file disagrees with the records of its data file.
    HintMismatch,
    /// A hint file whose data file does not exist.
    OrphanHint,
    /// A sealed data file without a hint file (open scans it instead).
    MissingHint,
    /// The directory's `BASALT` metadata file fails its checks.
    BadMeta,
    /// A compaction's victims marker fails its checks.
    BadVictims,
    /// A finished compaction whose inputs open will delete.
    InterruptedCompaction,
    /// An unfinished `.tmp` file that open will delete.
    LeftoverTemp,
    /// Members of a write batch whose commit record is not in the
    /// directory: the process stopped before the batch committed, and open
    /// ignores them (all of the batch, in every shard).
    UncommittedBatch,
    /// A commit record whose batch has fewer members in the directory than
    /// it counts (a member lost, e.g. to a power failure while the batch's
    /// shards were being fsynced): open ignores the whole batch.
    TornBatch,
}

impl DamageKind {
    /// Whether this is normal after a crash or a real error.
    pub fn severity(self) -> Severity {
        use DamageKind::*;
        match self {
            TornTail
            | ZeroTail
            | TornNewFile
            | MissingHint
            | InterruptedCompaction
            | LeftoverTemp
            | UncommittedBatch => Severity::Note,
            BadRecord | BadFileHeader | BadHint | HintMismatch | OrphanHint | BadMeta
            | BadVictims | TornBatch => Severity::Error,
        }
    }

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        use DamageKind::*;
        match self {
            TornTail => "torn tail",
            ZeroTail => "zero tail",
            TornNewFile => "torn new file",
            BadRecord => "bad record",
            BadFileHeader => "bad file header",
            BadHint => "bad hint",
            HintMismatch => "hint mismatch",
            OrphanHint => "orphan hint",
            MissingHint => "missing hint",
            BadMeta => "bad metadata",
            BadVictims => "bad victims marker",
            InterruptedCompaction => "interrupted compaction",
            LeftoverTemp => "leftover temp file",
            UncommittedBatch => "uncommitted batch",
            TornBatch => "torn batch",
        }
    }
}

/// One finding, located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The file concerned.
    pub path: PathBuf,
    /// Byte offset of the damage in that file.
    pub offset: u64,
    /// Bytes affected (0 when the finding is about the whole file).
    pub len: u64,
    /// What was found.
    pub kind: DamageKind,
    /// The failed check, in words.
    pub detail: String,
    /// The key of the damaged record, when its header was readable.
    pub key: Option<Vec<u8>>,
}

/// Figures for one data file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileReport {
    /// The data file.
    pub path: PathBuf,
    /// Shard number.
    pub shard: usize,
    /// File id.
    pub id: u32,
    /// Who wrote it, if its header is readable.
    pub origin: Option<Origin>,
    /// File length.
    pub len: u64,
    /// Good records.
    pub records: u64,
    /// Bytes of records the index would point at after open.
    pub live_bytes: u64,
    /// Every other byte after the header: overwritten and deleted records,
    /// tombstones, damage, reserved zeros.
    pub dead_bytes: u64,
    /// Whether a hint file exists and verifies against the data.
    pub hint_ok: bool,
}

/// What [`check`] found.
#[derive(Debug, Clone)]
pub struct CheckReport {
    /// The directory checked.
    pub dir: PathBuf,
    /// Shard count (from `BASALT`, or the shard directories if it is bad).
    pub shards: usize,
    /// Every data file, by shard then id.
    pub files: Vec<FileReport>,
    /// Every finding, by shard then file.
    pub damage: Vec<Damage>,
    /// Bytes read.
    pub bytes: u64,
}

impl CheckReport {
    /// True when nothing of [`Severity::Error`] was found: the directory
    /// opens without losing anything.
    pub fn is_clean(&self) -> bool {
        self.errors().next().is_none()
    }
    /// The findings of [`Severity::Error`].
    pub fn errors(&self) -> impl Iterator<Item = &Damage> {
        self.damage
            .iter()
            .filter(|d| d.kind.severity() == Severity::Error)
    }
}

/// A byte range [`repair`] removed from a data file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// The data file it was in.
    pub path: PathBuf,
    /// Offset in that file (before repair).
    pub offset: u64,
    /// Length.
    pub len: u64,
    /// The record's key, when its header was readable.
    pub key: Option<Vec<u8>>,
    /// Why it was dropped.
    pub reason: String,
}

/// What [`repair`] did.
#[derive(Debug, Clone)]
pub struct RepairReport {
    /// The check made before repairing.
    pub before: CheckReport,
    /// Every byte range dropped, i.e. every record lost.
    pub dropped: Vec<Dropped>,
    /// Data files rewritten (their readable records, in order) or cut.
    pub rewritten: Vec<PathBuf>,
    /// Files removed (bad, orphan or stale hints, bad markers).
    pub removed: Vec<PathBuf>,
    /// Hint files written.
    pub hints_written: Vec<PathBuf>,
}

/// A range of a data file that is not a good record.
#[derive(Debug, Clone)]
struct BadRange {
    offset: u64,
    len: u64,
    key: Option<Vec<u8>>,
    reason: String,
    /// A torn tail of the newest log file (allowed), not damage.
    torn: bool,
}

/// State of the hint file of one data file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HintState {
    Absent,
    Ok,
    Bad,
}

/// Moves every patch record (`segmented.rs`) whose base is not a good full
/// record of the same key and field earlier in the file, or whose runs do
/// not fit it, from the good records to the bad: open would read it, but
/// reading it would fail.
fn check_patches(b: &[u8], f: &mut DataScan) {
    let mut scratch = Vec::new();
    let good = std::mem::take(&mut f.good);
    for (off, h) in good {
        if h.flags & format::FLAG_PATCH != 0 {
            let bytes = &b[off as usize..(off + h.record_len()) as usize];
            let read = |at: u64, buf: &mut [u8]| {
                let at = at as usize;
                match b.get(at..at + buf.len()) {
                    Some(src) => {
                        buf.copy_from_slice(src);
                        true
                    }
                    None => false,
                }
            };
            scratch.clear();
            if let Err(reason) = crate::compaction::unpatch(off, &h, bytes, read, &mut scratch) {
                let k0 = off as usize + RECORD_HEADER_LEN;
                f.bad.push(BadRange {
                    offset: off,
                    len: h.record_len(),
                    key: Some(b[k0..k0 + h.key_len as usize].to_vec()),
                    reason: reason.into(),
                    torn: false,
                });
                continue;
            }
        }
        f.good.push((off, h));
    }
    f.bad.sort_by_key(|r| r.offset);
}

/// One data file as scanned.
#[derive(Debug)]
struct DataScan {
    id: u32,
    path: PathBuf,
    len: u64,
    header: Option<FileHeader>,
    /// The newest log file of its shard: may end torn or in zeros.
    newest_log: bool,
    /// Good records: (offset, header).
    good: Vec<(u64, RecordHeader)>,
    bad: Vec<BadRange>,
    /// Offset where a reserved zero tail starts.
    zero_tail: Option<u64>,
    hint: HintState,
}

/// One shard directory as scanned.
#[derive(Debug, Default)]
struct ShardScan {
    dir: PathBuf,
    files: Vec<DataScan>,
    orphan_hints: Vec<PathBuf>,
    bad_victims: Vec<PathBuf>,
    /// Bytes of each file the index would point at after open.
    live: BTreeMap<u32, u64>,
    /// The shard's records replayed, until every shard's commits are known.
    replay: Option<Replay>,
    /// Batch members: (file path, offset, sequence number, key).
    members: Vec<(PathBuf, u64, u64, Vec<u8>)>,
}

/// Checks the database directory `dir` without changing anything.
pub fn check(dir: impl AsRef<Path>, opts: &CheckOptions) -> Result<CheckReport> {
    let dir = dir.as_ref();
    let _lock = lock(dir)?;
    let (report, _) = scan_dir(dir, opts)?;
    Ok(report)
}

/// Repairs `dir`: every readable record is kept, every unreadable byte range
/// is dropped (and listed), damaged data files are rewritten with their good
/// records, torn tails are cut, bad and orphan hints are removed and hints
/// are regenerated for every sealed file. Afterwards [`crate::Db::open`]
/// succeeds and every record not listed in [`RepairReport::dropped`] is
/// still there. Note that dropping a damaged tombstone can bring back an
/// older value it deleted; its key is listed.
pub fn repair(dir: impl AsRef<Path>, opts: &CheckOptions) -> Result<RepairReport> {
    let dir = dir.as_ref();
    let _lock = lock(dir)?;
    let (before, shards) = scan_dir(dir, opts)?;
    let mut out = RepairReport {
        before,
        dropped: Vec::new(),
        rewritten: Vec::new(),
        removed: Vec::new(),
        hints_written: Vec::new(),
    };
    if out
        .before
        .damage
        .iter()
        .any(|d| d.kind == DamageKind::BadMeta)
    {
        write_meta(dir, out.before.shards)?;
        out.rewritten.push(dir.join("BASALT"));
    }
    for shard in &shards {
        repair_shard(shard, &mut out)?;
    }
    Ok(out)
}

/// Takes the directory lock as open does; fails with [`Error::Locked`] while
/// a process has the directory open.
fn lock(dir: &Path) -> Result<File> {
    let meta = std::fs::metadata(dir).map_err(|e| Error::io("open", dir, e))?;
    if !meta.is_dir() {
        return Err(Error::io(
            "open",
            dir,
            io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
        ));
    }
    let path = dir.join("LOCK");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io("open", &path, e))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked {
            path: dir.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock", &path, e)),
    }
}

fn file_len(path: &Path) -> Result<u64> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| Error::io("stat", path, e))
}

/// The first `FILE_HEADER_LEN` bytes of a file (fewer if it is shorter)
/// and its length.
fn read_head(path: &Path) -> Result<(Vec<u8>, u64)> {
    use std::io::Read;
    let f = File::open(path).map_err(|e| Error::io("open", path, e))?;
    let len = f.metadata().map_err(|e| Error::io("stat", path, e))?.len();
    let mut b = Vec::with_capacity(FILE_HEADER_LEN);
    f.take(FILE_HEADER_LEN as u64)
        .read_to_end(&mut b)
        .map_err(|e| Error::io("read", path, e))?;
    Ok((b, len))
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io("read", path, e))
}

/// Shard directories present (`shard-NNNN`), by number.
fn shard_dirs_present(dir: &Path) -> Result<BTreeSet<usize>> {
    let mut out = BTreeSet::new();
    for ent in std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))? {
        let ent = ent.map_err(|e| Error::io("list", dir, e))?;
        let name = ent.file_name();
        if let Some(n) = name
            .to_str()
            .and_then(|n| n.strip_prefix("shard-"))
            .filter(|n| n.len() == 4)
            .and_then(|n| n.parse::<usize>().ok())
        {
            out.insert(n);
        }
    }
    Ok(out)
}

fn scan_dir(dir: &Path, opts: &CheckOptions) -> Result<(CheckReport, Vec<ShardScan>)> {
    let mut damage = Vec::new();
    let meta_path = dir.join("BASALT");
    let present = shard_dirs_present(dir)?;
    let shards = match std::fs::read(&meta_path) {
        Ok(b) => match decode_meta(&meta_path, &b) {
            Ok(n) => n,
            Err(e) => {
                // Open creates every shard directory, so their count is the
                // shard count the metadata recorded.
                let n = present.last().map_or(0, |m| m + 1);
                if n == 0 || !n.is_power_of_two() || n > 1024 || present.len() != n {
                    return Err(e);
                }
                damage.push(Damage {
                    path: meta_path.clone(),
                    offset: 0,
                    len: b.len() as u64,
                    kind: DamageKind::BadMeta,
                    detail: format!("{e}; {n} shard directories present"),
                    key: None,
                });
                n
            }
        },
        Err(e) => return Err(Error::io("read", &meta_path, e)),
    };

    // Sizes first, for the progress total.
    let mut total = 0u64;
    let mut listings = Vec::with_capacity(shards);
    for i in 0..shards {
        let sdir = shard_dir(dir, i);
        let mut names = Vec::new();
        match std::fs::read_dir(&sdir) {
            Ok(rd) => {
                for ent in rd {
                    let ent = ent.map_err(|e| Error::io("list", &sdir, e))?;
                    let Ok(name) = ent.file_name().into_string() else {
                        continue;
                    };
                    if let Some((id, ext)) = parse_name(&name) {
                        if ext == "data" || ext == "hint" {
                            total += file_len(&ent.path())?;
                        }
                        names.push((id, ext.to_string(), ent.path()));
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("list", &sdir, e)),
        }
        names.sort();
        listings.push((sdir, names));
    }

    let mut done = 0u64;
    let mut tick = |n: u64| {
        done += n;
        if let Some(p) = &opts.progress {
            p(done, total);
        }
    };
    let mut files = Vec::new();
    let mut scans = Vec::with_capacity(shards);
    for (sdir, names) in listings {
        scans.push(scan_shard(sdir, &names, &mut damage, &mut tick)?);
    }
    // A batch's commit may be in another shard than its members.
    let mut commits: Vec<crate::format::CommitKey> = scans
        .iter()
        .flat_map(|s| s.replay.as_ref().map(|r| r.commits()).unwrap_or_default())
        .collect();
    commits.sort_unstable();
    let mut members: Vec<u64> = scans
        .iter()
        .flat_map(|s| s.members.iter().map(|m| m.2))
        .collect();
    members.sort_unstable();
    let horizon = scans
        .iter()
        .flat_map(|s| s.files.iter())
        .filter_map(|f| f.header)
        .filter(|h| h.origin == Origin::Compaction)
        .map(|h| h.base_seq)
        .max()
        .unwrap_or(0);
    let (commits, torn) = crate::recovery::verify_commits(commits, &members, horizon);
    for (c, found) in torn {
        damage.push(Damage {
            path: dir.to_path_buf(),
            offset: 0,
            len: 0,
            kind: DamageKind::TornBatch,
            detail: format!(
                "the write batch of records {}..={} counts {} members, {found} are in the directory; open ignores all of it",
                c.first, c.last, c.count
            ),
            key: None,
        });
    }
    for scan in &mut scans {
        if let Some(r) = scan.replay.take() {
            scan.live = r.live_bytes(&commits);
        }
        for (path, offset, seq, key) in &scan.members {
            if !crate::recovery::committed(&commits, *seq) {
                damage.push(Damage {
                    path: path.clone(),
                    offset: *offset,
                    len: 0,
                    kind: DamageKind::UncommittedBatch,
                    detail: format!(
                        "record {seq} belongs to a write batch that never committed; open ignores it"
                    ),
                    key: Some(key.clone()),
                });
            }
        }
    }
    for (shard, scan) in scans.iter().enumerate() {
        let live = &scan.live;
        for f in &scan.files {
            let l = live.get(&f.id).copied().unwrap_or(0);
            files.push(FileReport {
                path: f.path.clone(),
                shard,
                id: f.id,
                origin: f.header.map(|h| h.origin),
                len: f.len,
                records: f.good.len() as u64,
                live_bytes: l,
                dead_bytes: f.len.saturating_sub(FILE_HEADER_LEN as u64 + l),
                hint_ok: f.hint == HintState::Ok,
            });
        }
    }
    Ok((
        CheckReport {
            dir: dir.to_path_buf(),
            shards,
            files,
            damage,
            bytes: done,
        },
        scans,
    ))
}

fn scan_shard(
    dir: PathBuf,
    names: &[(u32, String, PathBuf)],
    damage: &mut Vec<Damage>,
    tick: &mut dyn FnMut(u64),
) -> Result<ShardScan> {
    let mut scan = ShardScan {
        dir,
        ..ShardScan::default()
    };
    // Inputs of a finished compaction are deleted by open before it reads.
    let mut victims = BTreeSet::new();
    for (_, ext, path) in names {
        if ext == "victims" {
            match format::decode_victims(&read(path)?) {
                Ok(ids) => {
                    damage.push(Damage {
                        path: path.clone(),
                        offset: 0,
                        len: 0,
                        kind: DamageKind::InterruptedCompaction,
                        detail: format!("open will delete input files {ids:?}"),
                        key: None,
                    });
                    victims.extend(ids);
                }
                Err(reason) => {
                    damage.push(Damage {
                        path: path.clone(),
                        offset: 0,
                        len: file_len(path)?,
                        kind: DamageKind::BadVictims,
                        detail: reason,
                        key: None,
                    });
                    scan.bad_victims.push(path.clone());
                }
            }
        } else if ext.ends_with("tmp") {
            damage.push(Damage {
                path: path.clone(),
                offset: 0,
                len: 0,
                kind: DamageKind::LeftoverTemp,
                detail: "unfinished output; open deletes it".into(),
                key: None,
            });
        }
    }
    let ids: Vec<u32> = names
        .iter()
        .filter(|(id, ext, _)| ext == "data" && !victims.contains(id))
        .map(|(id, _, _)| *id)
        .collect();
    let hints: BTreeSet<u32> = names
        .iter()
        .filter(|(_, ext, _)| ext == "hint")
        .map(|(id, _, _)| *id)
        .collect();
    for &h in &hints {
        if !ids.contains(&h) && !victims.contains(&h) {
            let path = hint_path(&scan.dir, h);
            damage.push(Damage {
                path: path.clone(),
                offset: 0,
                len: file_len(&path)?,
                kind: DamageKind::OrphanHint,
                detail: "no data file with this id".into(),
                key: None,
            });
            scan.orphan_hints.push(path);
        }
    }

    // Headers first: they say which file is the newest log file.
    let max_id = ids.last().copied();
    let mut heads = Vec::new();
    for &id in &ids {
        let path = data_path(&scan.dir, id);
        let (b, len) = read_head(&path)?;
        let header = FileHeader::decode(&b, &DATA_MAGIC);
        if header.is_err() && Some(id) == max_id && len <= FILE_HEADER_LEN as u64 {
            damage.push(Damage {
                path,
                offset: 0,
                len,
                kind: DamageKind::TornNewFile,
                detail: "shorter than its header; open removes it".into(),
                key: None,
            });
            tick(len);
            continue;
        }
        heads.push((id, path, header, len));
    }
    let newest_log = heads
        .iter()
        .filter(|h| matches!(&h.2, Ok(fh) if fh.origin == Origin::Log))
        .map(|h| h.0)
        .max();

    // Good records replayed in file order through open's own loader.
    let mut replay = Replay::default();
    for (id, path, header, _) in heads {
        let b = read(&path)?;
        let len = b.len() as u64;
        let header = match header {
            Ok(h) => Some(h),
            Err(reason) => {
                damage.push(Damage {
                    path: path.clone(),
                    offset: 0,
                    len: FILE_HEADER_LEN.min(b.len()) as u64,
                    kind: DamageKind::BadFileHeader,
                    detail: reason,
                    key: None,
                });
                None
            }
        };
        let newest = Some(id) == newest_log;
        let mut f = DataScan {
            id,
            path,
            len,
            header,
            newest_log: newest,
            good: Vec::new(),
            bad: Vec::new(),
            zero_tail: None,
            hint: HintState::Absent,
        };
        scan_records(&b, &mut f);
        check_patches(&b, &mut f);
        let handle = StdFs
            .open(&f.path)
            .map_err(|e| Error::io("open", &f.path, e))?;
        let origin = f.header.map_or(Origin::Compaction, |h| h.origin);
        replay.add_file(id, origin, len, handle);
        for (off, h) in &f.good {
            let k0 = *off as usize + RECORD_HEADER_LEN;
            let k1 = k0 + h.key_len as usize;
            replay.apply(id, *off, h, &b[k0..k1], &b[k1..k1 + h.field_len as usize]);
            if h.flags & crate::format::FLAG_BATCH != 0 {
                scan.members
                    .push((f.path.clone(), *off, h.seq, b[k0..k1].to_vec()));
            }
        }
        for r in &f.bad {
            damage.push(Damage {
                path: f.path.clone(),
                offset: r.offset,
                len: r.len,
                kind: if r.torn {
                    DamageKind::TornTail
                } else {
                    DamageKind::BadRecord
                },
                detail: r.reason.clone(),
                key: r.key.clone(),
            });
        }
        if let Some(z) = f.zero_tail {
            damage.push(Damage {
                path: f.path.clone(),
                offset: z,
                len: len - z,
                kind: DamageKind::ZeroTail,
                detail: "space reserved ahead of appends; open cuts it".into(),
                key: None,
            });
        }
        tick(len);
        if hints.contains(&id) {
            let hp = hint_path(&scan.dir, id);
            let hb = read(&hp)?;
            tick(hb.len() as u64);
            match compare_hint(&hb, &b, &f) {
                Ok(()) => f.hint = HintState::Ok,
                Err((kind, offset, detail)) => {
                    damage.push(Damage {
                        path: hp,
                        offset,
                        len: 0,
                        kind,
                        detail,
                        key: None,
                    });
                    f.hint = HintState::Bad;
                }
            }
        } else if !newest {
            damage.push(Damage {
                path: hint_path(&scan.dir, id),
                offset: 0,
                len: 0,
                kind: DamageKind::MissingHint,
                detail: "sealed data file has no hint file; open scans the data file".into(),
                key: None,
            });
        }
        scan.files.push(f);
    }
    scan.replay = Some(replay);
    Ok(scan)
}

/// The header of a good record at `off` of `b`, or why there is none.
fn good_record_at(b: &[u8], off: usize) -> std::result::Result<RecordHeader, &'static str> {
    let rest = &b[off..];
    let (crc, h) = RecordHeader::parse(rest)?;
    if h.record_len() > rest.len() as u64 {
        return Err("record runs past the end of the file");
    }
    if crc != crc32c::crc32c(&rest[4..h.record_len() as usize]) {
        return Err("record checksum mismatch");
    }
    Ok(h)
}

/// The first offset at or after `from` where a whole record verifies.
fn next_good_record(b: &[u8], from: usize) -> Option<usize> {
    let last = b.len().checked_sub(RECORD_HEADER_LEN)?;
    (from..=last).find(|&p| {
        // Cheap filters first: a kind byte in 1..=5 and a zero reserved byte.
        (1..=5).contains(&b[p + RECORD_KIND_OFFSET])
            && b[p + 23] == 0
            && good_record_at(b, p).is_ok()
    })
}

/// Walks the records of one data file, resynchronising after damage.
fn scan_records(b: &[u8], f: &mut DataScan) {
    let len = b.len();
    let mut off = FILE_HEADER_LEN;
    while off < len {
        let reason = match good_record_at(b, off) {
            Ok(h) => {
                f.good.push((off as u64, h));
                off += h.record_len() as usize;
                continue;
            }
            Err(reason) => reason,
        };
        if f.newest_log && b[off..].iter().all(|&x| x == 0) {
            f.zero_tail = Some(off as u64);
            return;
        }
        // A header that parses gives the key, and its length is trusted
        // only if a good record (or the end of the file) is exactly there.
        let parsed = RecordHeader::parse(&b[off..]).ok().map(|(_, h)| h);
        let claimed = parsed.and_then(|h| {
            let end = off as u64 + h.record_len();
            (end <= len as u64).then_some((h, end as usize))
        });
        let key = parsed.and_then(|h| {
            let k1 = (off + RECORD_HEADER_LEN).checked_add(h.key_len as usize)?;
            b.get(off + RECORD_HEADER_LEN..k1).map(<[u8]>::to_vec)
        });
        let next = match claimed {
            Some((_, end)) if end == len || good_record_at(b, end).is_ok() => {
                (end < len).then_some(end)
            }
            _ => next_good_record(b, off + 1),
        };
        let end = next.unwrap_or(len);
        let torn = f.newest_log && next.is_none();
        let detail = if claimed.is_some_and(|(_, e)| Some(e) == next || e == len) {
            reason.to_string()
        } else if let Some(n) = next {
            format!("{reason}; framing lost, resynchronised at the next good record at {n}")
        } else {
            format!("{reason}; no good record follows")
        };
        f.bad.push(BadRange {
            offset: off as u64,
            len: (end - off) as u64,
            key,
            reason: detail,
            torn,
        });
        off = end;
    }
}

/// Checks a hint file on its own and against the good records of its data
/// file. `Err` is (kind, offset in the hint file or data file, what).
fn compare_hint(
    hint: &[u8],
    data: &[u8],
    f: &DataScan,
) -> std::result::Result<(), (DamageKind, u64, String)> {
    let mut entries = Vec::new();
    format::read_hint_file(hint, f.len, |e| {
        entries.push(HintEntry {
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
    .map_err(|why| (DamageKind::BadHint, 0, why))?;
    for (i, (off, h)) in f.good.iter().enumerate() {
        let want = HintEntry::of_record(*off, h, &data[*off as usize..]);
        match entries.get(i) {
            Some(e) if *e == want => {}
            Some(e) => {
                return Err((
                    DamageKind::HintMismatch,
                    *off,
                    format!(
                        "hint entry {i} names the record at {} (seq {}), the data file has the record at {off} (seq {})",
                        e.offset, e.seq, h.seq
                    ),
                ))
            }
            None => {
                return Err((
                    DamageKind::HintMismatch,
                    *off,
                    format!("hint has {} entries, the data file has more records", entries.len()),
                ))
            }
        }
    }
    if entries.len() > f.good.len() {
        let e = &entries[f.good.len()];
        return Err((
            DamageKind::HintMismatch,
            e.offset as u64,
            format!(
                "hint entry {} names a record at {} that the data file does not hold",
                f.good.len(),
                e.offset
            ),
        ));
    }
    Ok(())
}

/// Writes `path` through a temp file, fsync and rename.
fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes)
        .and_then(|_| File::open(&tmp)?.sync_all())
        .map_err(|e| Error::io("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io("rename", path, e))?;
    sync_dir(dir)
}

fn write_meta(dir: &Path, shards: usize) -> Result<()> {
    let mut b = Vec::with_capacity(20);
    b.extend_from_slice(b"BSLTMETA");
    b.extend_from_slice(&format::FORMAT_VERSION.to_le_bytes());
    b.extend_from_slice(&(shards as u32).to_le_bytes());
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    write_atomically(dir, &dir.join("BASALT"), &b)
}

fn remove(path: &Path, out: &mut RepairReport) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {
            out.removed.push(path.to_path_buf());
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove", path, e)),
    }
}

fn repair_shard(scan: &ShardScan, out: &mut RepairReport) -> Result<()> {
    // A bad marker was written after its compaction's outputs were durable
    // and before any input was deleted: without it, inputs and outputs
    // coexist and sequence numbers resolve the duplicates.
    for p in scan.bad_victims.iter().chain(&scan.orphan_hints) {
        remove(p, out)?;
    }
    let newest_id = scan.files.iter().map(|f| f.id).max();
    for f in &scan.files {
        let hp = hint_path(&scan.dir, f.id);
        for r in &f.bad {
            out.dropped.push(Dropped {
                path: f.path.clone(),
                offset: r.offset,
                len: r.len,
                key: r.key.clone(),
                reason: r.reason.clone(),
            });
        }
        let only_tail = f.header.is_some() && f.bad.iter().all(|r| r.torn) && f.bad.len() <= 1;
        let cut_to = f.bad.first().map(|r| r.offset).or(f.zero_tail);
        let data = read(&f.path)?;
        // The file as it will be: its bytes and its records' offsets.
        let (bytes, records, origin): (Vec<u8>, Vec<(u64, RecordHeader)>, Origin) =
            if let (true, Some(h)) = (f.bad.is_empty(), f.header) {
                let end = f.zero_tail.unwrap_or(f.len) as usize;
                (data[..end].to_vec(), f.good.clone(), h.origin)
            } else {
                let origin = match f.header {
                    Some(h) => h.origin,
                    // Unknown: only the newest file may be the active log.
                    None if Some(f.id) == newest_id => Origin::Log,
                    None => Origin::Compaction,
                };
                let base_seq = f.header.map_or_else(
                    || f.good.iter().map(|(_, h)| h.seq).min().unwrap_or(0),
                    |h| h.base_seq,
                );
                let mut b = FileHeader { origin, base_seq }.encode(&DATA_MAGIC).to_vec();
                let mut recs = Vec::with_capacity(f.good.len());
                for (off, h) in &f.good {
                    let s = *off as usize;
                    let rec = &data[s..s + h.record_len() as usize];
                    if h.flags & format::FLAG_PATCH == 0 {
                        recs.push((b.len() as u64, *h));
                        b.extend_from_slice(rec);
                        continue;
                    }
                    // A patch names its base by offset, and the records
                    // move: it is written as the whole segment it stands
                    // for (its base was checked by `check_patches`).
                    let read = |at: u64, buf: &mut [u8]| {
                        let at = at as usize;
                        data.get(at..at + buf.len())
                            .map(|src| buf.copy_from_slice(src))
                            .is_some()
                    };
                    let at = b.len() as u64;
                    let whole = crate::compaction::unpatch(*off, h, rec, read, &mut b).map_err(
                        |reason| Error::Corrupt {
                            path: f.path.clone(),
                            offset: *off,
                            reason: reason.into(),
                        },
                    )?;
                    recs.push((at, whole));
                }
                (b, recs, origin)
            };
        let changed = bytes.len() as u64 != f.len || !f.bad.is_empty() || f.header.is_none();
        if changed {
            // The hint (if any) describes the old bytes.
            remove(&hp, out)?;
            if only_tail || (f.bad.is_empty() && f.header.is_some()) {
                let to = cut_to.unwrap_or(f.len);
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&f.path)
                    .map_err(|e| Error::io("open", &f.path, e))?;
                file.set_len(to)
                    .and_then(|_| file.sync_all())
                    .map_err(|e| Error::io("truncate", &f.path, e))?;
            } else {
                write_atomically(&scan.dir, &f.path, &bytes)?;
            }
            out.rewritten.push(f.path.clone());
        } else if f.hint == HintState::Bad {
            remove(&hp, out)?;
        }
        // Every sealed file gets a hint that matches it; the newest log
        // file is appended to again after open and needs none.
        let sealed = !(f.newest_log || (f.header.is_none() && origin == Origin::Log));
        let hint_good = f.hint == HintState::Ok && !changed;
        if sealed && !hint_good {
            let mut b = FileHeader {
                origin,
                base_seq: 0,
            }
            .encode(&HINT_MAGIC)
            .to_vec();
            for (off, h) in &records {
                HintEntry::of_record(*off, h, &bytes[*off as usize..]).encode_into(&mut b);
            }
            b.extend_from_slice(&format::encode_hint_footer(
                records.len() as u64,
                bytes.len() as u64,
            ));
            write_atomically(&scan.dir, &hp, &b)?;
            out.hints_written.push(hp);
        }
    }
    sync_dir(&scan.dir)
}
