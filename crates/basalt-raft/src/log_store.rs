//! The Raft log and vote on disk.
//!
//! Layout of the log directory:
//! - `log-<first index, 20 digits>`: segment files. Each starts with the
//!   12-byte header `BSLTRLOG` + format version (u32 LE, 1), then entries,
//!   each `[payload length u32 LE][CRC32C of payload u32 LE][payload]`, the
//!   payload being the bincode of an openraft entry. Entries are
//!   consecutive across segments; a segment is sealed (fsynced) at
//!   [`SEGMENT_BYTES`] and a new one starts with the next index.
//! - `vote`, `purged`: the last vote and the last purged log id, each
//!   `[length u32][CRC32C u32][bincode]`, replaced atomically (temporary
//!   file, fsync, rename, fsync of the directory) before the call returns.
//!
//! Every unpurged entry is also kept in memory (the state machine's
//! snapshots purge the log, which bounds it), so readers never touch the
//! disk.
//!
//! Durability of appends follows [`SyncPolicy`]: `Always` fsyncs before
//! openraft is told the entries are flushed (a power loss of a majority
//! loses no acknowledged write); `EveryMs`/`Never` report them flushed once
//! `write` returned (they survive kill -9 of the process), and a background
//! thread fsyncs the active segment every interval. Votes are fsynced
//! whatever the policy.
//!
//! On open, a torn tail (short or CRC-failing last entry of the last
//! segment, from a crash mid-append) is cut off; damage anywhere else is an
//! error. Truncation removes later segments from the last one down before
//! cutting the first, and purging records `purged` before deleting
//! segments, so a crash in between leaves a log without holes.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::ops::RangeBounds;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use basalt_engine::SyncPolicy;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{ErrorSubject, ErrorVerb, RaftLogId, RaftLogReader, Vote};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{io_error, Entry, LogId, NodeId, StorageError, TypeConfig};

/// Segment files are sealed and a new one started past this size.
pub const SEGMENT_BYTES: u64 = 64 << 20;

const MAGIC: &[u8; 8] = b"BSLTRLOG";
const VERSION: u32 = 1;
const HEADER: u64 = 12;
/// Largest entry accepted when reading back (a sanity bound against a
/// corrupt length field).
const MAX_ENTRY: u32 = 1 << 30;

/// The Raft log store. Clones share one log (openraft's log reader is a
/// clone).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.inner.lock();
        f.debug_struct("LogStore")
            .field("dir", &g.dir)
            .field("entries", &g.entries.len())
            .field("segments", &g.segments.len())
            .finish()
    }
}

struct Segment {
    file: File,
    len: u64,
    /// Index the next entry appended to this segment must have.
    next: u64,
}

struct Stored {
    entry: Entry,
    /// First index of the segment holding the entry, and its offset there.
    segment: u64,
    offset: u64,
}

struct Inner {
    dir: PathBuf,
    policy: SyncPolicy,
    segment_bytes: u64,
    entries: BTreeMap<u64, Stored>,
    /// Segments by the index of their first entry; the last is active.
    segments: BTreeMap<u64, Segment>,
    vote: Option<Vote<NodeId>>,
    purged: Option<LogId>,
    /// Appends so far, and how many of them the last fsync of the active
    /// segment covered: the log is dirty while they differ. The syncer,
    /// which fsyncs without holding the lock, covers only the appends made
    /// before it took its handle.
    appends: u64,
    synced: u64,
    /// Set when an I/O error left the files in doubt: every later write
    /// fails.
    failed: Option<String>,
}

fn err_write(e: io::Error) -> StorageError {
    io_error(ErrorSubject::Logs, ErrorVerb::Write, e)
}

fn corrupt(path: &Path, offset: u64, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("raft log {} at offset {offset}: {why}", path.display()),
    )
}

fn segment_path(dir: &Path, first: u64) -> PathBuf {
    dir.join(format!("log-{first:020}"))
}

fn encode<T: Serialize>(v: &T) -> io::Result<Vec<u8>> {
    let payload = bincode::serialize(v).map_err(io::Error::other)?;
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&l| l <= MAX_ENTRY)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "raft entry over 1 GiB"))?;
    let mut out = Vec::with_capacity(payload.len() + 8);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Writes `v` to `dir/name` atomically and durably.
pub(crate) fn write_small_file<T: Serialize>(dir: &Path, name: &str, v: &T) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(&encode(v)?)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    File::open(dir)?.sync_all()
}

pub(crate) fn read_small_file<T: DeserializeOwned>(
    dir: &Path,
    name: &str,
) -> io::Result<Option<T>> {
    let path = dir.join(name);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if bytes.len() < 8 {
        return Err(corrupt(&path, 0, "short file"));
    }
    let len = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
    let payload = &bytes[8..];
    if payload.len() != len || crc32c::crc32c(payload) != crc {
        return Err(corrupt(&path, 0, "length or CRC mismatch"));
    }
    bincode::deserialize(payload)
        .map(Some)
        .map_err(|e| corrupt(&path, 8, &e.to_string()))
}

impl LogStore {
    /// Opens (creating if needed) the log in `dir`, repairing a torn tail.
    pub fn open(dir: &Path, policy: SyncPolicy) -> io::Result<LogStore> {
        Self::open_with_segment_bytes(dir, policy, SEGMENT_BYTES)
    }

    /// [`LogStore::open`] with segments sealed past `segment_bytes` instead
    /// of [`SEGMENT_BYTES`] (tests use small segments).
    pub fn open_with_segment_bytes(
        dir: &Path,
        policy: SyncPolicy,
        segment_bytes: u64,
    ) -> io::Result<LogStore> {
        std::fs::create_dir_all(dir)?;
        let vote = read_small_file(dir, "vote")?;
        let purged: Option<LogId> = read_small_file(dir, "purged")?;
        let mut firsts = Vec::new();
        for ent in std::fs::read_dir(dir)? {
            let name = ent?.file_name();
            let name = name.to_string_lossy();
            if let Some(n) = name.strip_prefix("log-") {
                if let Ok(first) = n.parse::<u64>() {
                    firsts.push(first);
                }
            }
        }
        firsts.sort_unstable();
        let mut inner = Inner {
            dir: dir.to_path_buf(),
            policy,
            segment_bytes,
            entries: BTreeMap::new(),
            segments: BTreeMap::new(),
            vote,
            purged,
            appends: 0,
            synced: 0,
            failed: None,
        };
        let purged_index = purged.map(|l| l.index);
        for (i, &first) in firsts.iter().enumerate() {
            let last_segment = i + 1 == firsts.len();
            let next_first = firsts.get(i + 1).copied();
            // A segment whose entries all lie at or below the purge point is
            // a leftover of a purge interrupted by a crash.
            if let (Some(p), Some(next)) = (purged_index, next_first) {
                if next <= p + 1 {
                    std::fs::remove_file(segment_path(dir, first))?;
                    continue;
                }
            }
            inner.load_segment(first, last_segment)?;
        }
        // Consecutive indexes, starting right after the purge point.
        let mut expect = inner.entries.keys().next().copied();
        if let (Some(p), Some(first)) = (purged_index, expect) {
            if first > p + 1 {
                return Err(corrupt(dir, 0, "a hole after the purged entries"));
            }
        }
        for &idx in inner.entries.keys() {
            if Some(idx) != expect {
                return Err(corrupt(dir, 0, &format!("entry {idx} is not consecutive")));
            }
            expect = Some(idx + 1);
        }
        let store = LogStore {
            inner: Arc::new(Mutex::new(inner)),
        };
        if let SyncPolicy::EveryMs(ms) = policy {
            spawn_syncer(
                Arc::downgrade(&store.inner),
                Duration::from_millis(ms.max(1)),
            );
        }
        Ok(store)
    }

    /// Forces every appended entry to stable storage.
    pub fn sync(&self) -> io::Result<()> {
        self.inner.lock().sync_active()
    }
}

/// The background fsync of `EveryMs`: [`sync_unlocked`] every interval,
/// until the log is dropped.
fn spawn_syncer(inner: Weak<Mutex<Inner>>, every: Duration) {
    let _ = std::thread::Builder::new()
        .name("basalt-raftlog-sync".into())
        .spawn(move || loop {
            std::thread::sleep(every);
            let Some(inner) = inner.upgrade() else { return };
            sync_unlocked(&inner, || {});
        });
}

/// Fsyncs the active segment, if anything was appended since the last
/// fsync, on a second handle of the file and without the log's lock:
/// appends (on the Raft thread, which also sends the heartbeats) go on
/// while the disk works, instead of waiting out the fsync once per
/// interval. `during` runs where the fsync does, outside the lock (tests
/// append there). An append that came in meanwhile keeps the log dirty
/// for the next round.
fn sync_unlocked(inner: &Mutex<Inner>, during: impl FnOnce()) {
    let (file, appends) = {
        let mut g = inner.lock();
        if !g.dirty() || g.failed.is_some() {
            return;
        }
        let Some((_, seg)) = g.segments.iter().next_back() else {
            return;
        };
        match seg.file.try_clone() {
            Ok(f) => (f, g.appends),
            Err(e) => {
                tracing::error!("raft log fsync failed: {e}");
                g.failed = Some(format!("fsync: {e}"));
                return;
            }
        }
    };
    // Every entry appended before the handle was taken is in this file or
    // in a segment sealed (fsynced) since.
    during();
    let r = file.sync_data();
    let mut g = inner.lock();
    match r {
        Ok(()) => g.synced = g.synced.max(appends),
        Err(e) => {
            tracing::error!("raft log fsync failed: {e}");
            g.failed = Some(format!("fsync: {e}"));
        }
    }
}

impl Inner {
    fn load_segment(&mut self, first: u64, last_segment: bool) -> io::Result<()> {
        let path = segment_path(&self.dir, first);
        let mut file = OpenOptions::new().read(true).write(true).open(&path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        if bytes.len() < HEADER as usize {
            if last_segment {
                // Created, header not yet written whole: start it again.
                file.set_len(0)?;
                file.write_all_at(&header(), 0)?;
                file.sync_all()?;
                let seg = Segment {
                    file,
                    len: HEADER,
                    next: first,
                };
                self.segments.insert(first, seg);
                return Ok(());
            }
            return Err(corrupt(&path, 0, "short header"));
        }
        if &bytes[..8] != MAGIC || bytes[8..12] != VERSION.to_le_bytes() {
            return Err(corrupt(&path, 0, "not a Basalt raft log segment"));
        }
        let mut off = HEADER as usize;
        let mut expect_index = first;
        let good_end = loop {
            if off == bytes.len() {
                break off;
            }
            let torn = |why: &str| -> io::Result<usize> {
                if last_segment {
                    tracing::warn!(
                        "raft log {}: cutting a torn tail at {off}: {why}",
                        path.display()
                    );
                    Ok(off)
                } else {
                    Err(corrupt(&path, off as u64, why))
                }
            };
            if bytes.len() - off < 8 {
                break torn("short entry header")?;
            }
            let len = u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap());
            let crc = u32::from_le_bytes(bytes[off + 4..off + 8].try_into().unwrap());
            if len > MAX_ENTRY || bytes.len() - off - 8 < len as usize {
                break torn("short entry")?;
            }
            let payload = &bytes[off + 8..off + 8 + len as usize];
            if crc32c::crc32c(payload) != crc {
                break torn("CRC mismatch")?;
            }
            let entry: Entry = bincode::deserialize(payload)
                .map_err(|e| corrupt(&path, off as u64, &e.to_string()))?;
            if entry.get_log_id().index != expect_index {
                return Err(corrupt(&path, off as u64, "entry index out of order"));
            }
            if self
                .purged
                .is_none_or(|p| entry.get_log_id().index > p.index)
            {
                self.entries.insert(
                    expect_index,
                    Stored {
                        entry,
                        segment: first,
                        offset: off as u64,
                    },
                );
            }
            expect_index += 1;
            off += 8 + len as usize;
        };
        if good_end < bytes.len() {
            file.set_len(good_end as u64)?;
            file.sync_all()?;
        }
        self.segments.insert(
            first,
            Segment {
                file,
                len: good_end as u64,
                next: expect_index,
            },
        );
        Ok(())
    }

    fn check(&self) -> Result<(), StorageError> {
        match &self.failed {
            Some(why) => Err(err_write(io::Error::other(format!(
                "the raft log failed earlier and refuses writes: {why}"
            )))),
            None => Ok(()),
        }
    }

    fn fail(&mut self, e: io::Error) -> StorageError {
        self.failed = Some(e.to_string());
        err_write(e)
    }

    fn sync_active(&mut self) -> io::Result<()> {
        if let Some((_, seg)) = self.segments.iter().next_back() {
            seg.file.sync_data()?;
        }
        self.synced = self.appends;
        Ok(())
    }

    /// Whether entries were appended since the last fsync of the active
    /// segment.
    fn dirty(&self) -> bool {
        self.appends != self.synced
    }

    fn new_segment(&mut self, first: u64) -> io::Result<()> {
        if self.dirty() {
            self.sync_active()?;
        }
        let path = segment_path(&self.dir, first);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        file.write_all_at(&header(), 0)?;
        file.sync_all()?;
        File::open(&self.dir)?.sync_all()?;
        let seg = Segment {
            file,
            len: HEADER,
            next: first,
        };
        self.segments.insert(first, seg);
        Ok(())
    }

    fn append(&mut self, entries: Vec<Entry>) -> io::Result<()> {
        for entry in entries {
            let index = entry.get_log_id().index;
            // A new segment when the active one is full, or when the entry
            // does not follow its last one (the log was purged past its
            // end by a snapshot install): a segment's entries are always
            // consecutive from its first.
            let need_new = match self.segments.iter().next_back() {
                None => true,
                Some((_, seg)) => seg.len >= self.segment_bytes || seg.next != index,
            };
            if need_new {
                self.new_segment(index)?;
            }
            let rec = encode(&entry)?;
            let (&first, seg) = self.segments.iter_mut().next_back().expect("a segment");
            seg.file.write_all_at(&rec, seg.len)?;
            let offset = seg.len;
            seg.len += rec.len() as u64;
            seg.next = index + 1;
            self.appends += 1;
            self.entries.insert(
                index,
                Stored {
                    entry,
                    segment: first,
                    offset,
                },
            );
        }
        if self.policy == SyncPolicy::Always {
            self.sync_active()?;
        }
        Ok(())
    }

    fn truncate(&mut self, index: u64) -> io::Result<()> {
        let Some(at) = self.entries.get(&index).map(|s| (s.segment, s.offset)) else {
            return Ok(());
        };
        // Later segments first, highest first: a crash leaves a prefix.
        let later: Vec<u64> = self
            .segments
            .range(at.0 + 1..)
            .map(|(&f, _)| f)
            .rev()
            .collect();
        for first in later {
            self.segments.remove(&first);
            std::fs::remove_file(segment_path(&self.dir, first))?;
        }
        let seg = self.segments.get_mut(&at.0).expect("segment of an entry");
        seg.file.set_len(at.1)?;
        seg.file.sync_all()?;
        seg.len = at.1;
        seg.next = index;
        self.entries.split_off(&index);
        Ok(())
    }

    fn purge(&mut self, log_id: LogId) -> io::Result<()> {
        write_small_file(&self.dir, "purged", &log_id)?;
        self.purged = Some(log_id);
        let keep = self.entries.split_off(&(log_id.index + 1));
        self.entries = keep;
        // Drop whole segments below the purge point (never the active one).
        let firsts: Vec<u64> = self.segments.keys().copied().collect();
        for pair in firsts.windows(2) {
            if pair[1] <= log_id.index + 1 {
                self.segments.remove(&pair[0]);
                std::fs::remove_file(segment_path(&self.dir, pair[0]))?;
            }
        }
        Ok(())
    }
}

fn header() -> [u8; HEADER as usize] {
    let mut h = [0u8; HEADER as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..].copy_from_slice(&VERSION.to_le_bytes());
    h
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let g = self.inner.lock();
        Ok(g.entries
            .range(range)
            .map(|(_, s)| s.entry.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let g = self.inner.lock();
        let last = g
            .entries
            .values()
            .next_back()
            .map(|s| *s.entry.get_log_id());
        Ok(LogState {
            last_purged_log_id: g.purged,
            last_log_id: last.or(g.purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        let mut g = self.inner.lock();
        g.check()?;
        if let Err(e) = write_small_file(&g.dir, "vote", vote) {
            return Err(io_error(ErrorSubject::Vote, ErrorVerb::Write, e));
        }
        g.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        Ok(self.inner.lock().vote)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut g = self.inner.lock();
        g.check()?;
        let entries: Vec<Entry> = entries.into_iter().collect();
        match g.append(entries) {
            Ok(()) => {
                drop(g);
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let msg = e.to_string();
                let err = g.fail(e);
                drop(g);
                callback.log_io_completed(Err(io::Error::other(msg)));
                Err(err)
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut g = self.inner.lock();
        g.check()?;
        g.truncate(log_id.index).map_err(|e| g.fail(e))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut g = self.inner.lock();
        g.check()?;
        g.purge(log_id).map_err(|e| g.fail(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, EntryPayload, LogId};

    fn entry(index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    #[test]
    fn the_syncers_fsync_neither_holds_the_log_nor_marks_later_appends_synced() {
        let t = tempfile::TempDir::new().unwrap();
        // A long interval: the test drives the syncer's step itself.
        let log = LogStore::open(t.path(), SyncPolicy::EveryMs(3_600_000)).unwrap();
        log.inner.lock().append(vec![entry(1)]).unwrap();
        assert!(log.inner.lock().dirty());
        // While the step fsyncs, the log is free: an append goes in at
        // once, and the log stays dirty for it.
        sync_unlocked(&log.inner, || {
            let mut g = log.inner.try_lock().expect("the fsync holds the log");
            g.append(vec![entry(2)]).unwrap();
        });
        assert!(
            log.inner.lock().dirty(),
            "an append during the fsync was marked synced"
        );
        // The next step, with nothing appended meanwhile, clears it.
        sync_unlocked(&log.inner, || {});
        assert!(!log.inner.lock().dirty());
        // Nothing to do now: the step returns without calling `during`.
        sync_unlocked(&log.inner, || panic!("fsynced a clean log"));
    }
}
