//! The database handle: shards, the write path, the read path.
//!
//! Each shard has a writer mutex (its active file) and an index `RwLock`.
//! A write takes the writer lock, appends one record (a store into the
//! active file's writable map, or one `pwrite` where the file system offers
//! no map), then takes the index lock for the few nanoseconds it needs to
//! point the key at the record. A read takes the index lock in shared mode
//! just long enough to copy the record's location and an `Arc` of its file,
//! then reads without any lock; an unlinked file stays readable through that
//! `Arc`, which is how compaction can delete files under readers' feet.
//!
//! Reads go through a shared memory map of the data file (see
//! [`DataFile`]), so a read of cached data makes no system call: it checks
//! the record's CRC in place and copies out only the value. Appends go
//! through the same map, into space reserved ahead of them with `fallocate`
//! (see [`Writer`]), so a write of a small record makes no system call either.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Instant;

use hashbrown::{HashMap, HashSet};
use parking_lot::{Condvar, Mutex, RwLock};

use crate::batch::BatchGroup;
use crate::fields::Fields;
use crate::format::{
    self, FileHeader, Kind, Origin, Record, RecordRef, DATA_MAGIC, FLAG_BATCH, FLAG_LZ4,
};
use crate::keydir::{Keydir, Loc, MAP_FILE};
use crate::options::{Options, SyncPolicy};
use crate::segmented::SEGMENTED_TAG;
use crate::vfs::{FileMap, VFile};
use crate::{Error, Result};

/// A value's file, location and expiry, as `Db::locate_value` finds them.
pub(crate) type Located = (Arc<DataFile>, Loc, Option<u64>);

/// Where `Db::locate_value` found a value: one record, or the segments of
/// a segmented value (`segmented.rs`).
pub(crate) enum Found {
    Record(Located),
    Segments { version: u64 },
}

/// What [`Db::locate_value_or_copy`] found.
pub(crate) enum ValueAt {
    Absent,
    /// Where the value is.
    At(Found),
    /// The value, copied where the caller asked.
    Copied,
}

/// Largest record whose value [`Db::locate_value_or_copy`] copies under the
/// index's read lock (a writer of the shard waits for the copy).
pub(crate) const COPY_UNDER_LOCK: u32 = 4096;
/// A value read together with its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The value.
    pub value: Vec<u8>,
    /// The sequence number of the key's last write.
    pub version: u64,
    /// Expiry in ms since the epoch, if any.
    pub expires_at: Option<u64>,
}

/// What a key holds, from the index alone (no disk read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// A plain value of this many bytes on disk (compressed size if compressed).
    Value {
        /// Stored length of the value.
        stored_len: u32,
    },
    /// A map with this tag and number of fields.
    Map {
        /// The caller's tag, given when the map was created.
        tag: u8,
        /// Number of fields.
        len: usize,
        /// `Some(base)` when the field names are exactly the 8-byte
        /// big-endian numbers `base, base + 1, ..., base + len - 1` (a map
        /// kept as a run, see `fields.rs`): the lowest name, with no need
        /// to look at the fields. `None` for any other map.
        run: Option<u64>,
    },
}

/// A key's metadata from the index alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyMeta {
    /// Value or map.
    pub kind: KeyKind,
    /// The sequence number of the key's last write.
    pub version: u64,
    /// Expiry in ms since the epoch, if any.
    pub expires_at: Option<u64>,
}

/// Per-file figures in [`Stats`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStats {
    /// Shard number.
    pub shard: usize,
    /// File id (its name).
    pub id: u32,
    /// Whether this is the shard's active (appended) file.
    pub active: bool,
    /// Whether compaction wrote it.
    pub compacted: bool,
    /// File size.
    pub total_bytes: u64,
    /// Bytes of records the index points at.
    pub live_bytes: u64,
    /// Bytes of tombstones (kept while they may shadow older records).
    pub tombstone_bytes: u64,
}

impl FileStats {
    /// Bytes that are neither live records nor tombstones nor the header.
    pub fn garbage_bytes(&self) -> u64 {
        self.total_bytes
            .saturating_sub(format::FILE_HEADER_LEN as u64)
            .saturating_sub(self.live_bytes + self.tombstone_bytes)
    }
}

/// A snapshot of the engine's figures.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Keys in the index (values and maps, including expired keys the sweep
    /// has not removed yet).
    pub keys: u64,
    /// Keys holding maps.
    pub maps: u64,
    /// Fields across all maps.
    pub fields: u64,
    /// Keys with an expiry.
    pub keys_with_expiry: u64,
    /// Estimated bytes of RAM held by the index.
    pub index_bytes: u64,
    /// Every data file.
    pub files: Vec<FileStats>,
    /// Sum of live bytes.
    pub live_bytes: u64,
    /// Sum of bytes that are not live (garbage and tombstones).
    pub dead_bytes: u64,
    /// Compaction runs finished.
    pub compactions: u64,
    /// Bytes compaction read.
    pub compaction_bytes_read: u64,
    /// Bytes compaction wrote.
    pub compaction_bytes_written: u64,
    /// Keys removed by expiry.
    pub expired_keys: u64,
    /// The next sequence number to be handed out.
    pub next_seq: u64,
    /// Writes are being delayed now: the data files hold more garbage
    /// than [`crate::Options::write_stall_ratio`] allows.
    pub write_stalled: bool,
    /// Times writes started being delayed since open.
    pub write_stalls: u64,
}

/// One map: its fields' locations and its own metadata.
#[derive(Debug, Default)]
pub(crate) struct MapEntry {
    pub tag: u8,
    pub version: u64,
    pub expiry: u64,
    /// Location of the MapMeta record holding the expiry, if any.
    pub meta: Option<Loc>,
    pub fields: Fields,
}

/// A data file as readers see it: its handle and, when the file system maps
/// files, a shared map of it (writable for the file appends go to).
///
/// Readers clone the `Arc` under the index lock and read with no lock held.
/// Compaction may unlink the file meanwhile: the open handle and the map
/// (which keeps the inode alive by itself) go away only when the last `Arc`
/// drops, so a read in flight never sees a vanished file.
///
/// The map of a file that may still grow (the active file, a compaction
/// output) covers `max_file_size` bytes from the start, past the file's end;
/// bytes written later show through it because a shared map *is* the page
/// cache. Only ranges the index points at are ever read through it, and
/// those were written before the index pointed at them and are never written
/// again (see `docs/architecture.md`, "Reads through memory maps").
#[derive(Debug)]
pub(crate) struct DataFile {
    pub file: Arc<dyn VFile>,
    map: Option<FileMap>,
    /// Unique in this process for as long as it runs (never reused, unlike
    /// a file id, which is per shard and database, or an address): names
    /// this file's records in caches that must not hold the file open.
    pub uid: u64,
    /// Whether this is a shard's active file, appended to (and possibly
    /// holding dirty pages), until [`Inner::rotate`] seals it.
    appending: AtomicBool,
}

/// Bytes of a record's start that [`Db::prefetch`] loads.
const PREFETCH_HEAD: usize = 512;

/// The next [`DataFile::uid`].
static NEXT_FILE_UID: AtomicU64 = AtomicU64::new(1);

impl DataFile {
    /// Wraps `file`, mapping its first `map_len` bytes read-only if the VFS
    /// can.
    pub fn new(file: Arc<dyn VFile>, map_len: u64) -> Arc<DataFile> {
        let map = if map_len > 0 { file.map(map_len) } else { None };
        let uid = NEXT_FILE_UID.fetch_add(1, Ordering::Relaxed);
        Arc::new(DataFile {
            file,
            map,
            uid,
            appending: AtomicBool::new(false),
        })
    }

    /// Wraps a file that is to become a shard's active file, mapping its
    /// first `map_len` bytes writable if the VFS offers that (appends are
    /// then stores into the map), else read-only, else not at all.
    pub fn appendable(file: Arc<dyn VFile>, map_len: u64) -> Arc<DataFile> {
        let map = file.map_mut(map_len).or_else(|| file.map(map_len));
        let uid = NEXT_FILE_UID.fetch_add(1, Ordering::Relaxed);
        Arc::new(DataFile {
            file,
            map,
            uid,
            appending: AtomicBool::new(true),
        })
    }

    /// Whether this file is still being appended to: a shard's active file
    /// (see [`DataFile::appendable`]) or a compaction output not yet
    /// synced. Its newest pages may be dirty, so cold reads of it go
    /// through the page cache (a direct read would first write them back).
    pub fn is_appending(&self) -> bool {
        self.appending.load(Ordering::Relaxed)
    }

    /// Sets [`DataFile::is_appending`].
    pub fn set_appending(&self, appending: bool) {
        self.appending.store(appending, Ordering::Relaxed);
    }

    /// [`FileMap::prefault_for_write`] of this file's map, if it has one.
    fn prefault_for_write(&self, offset: u64, len: u64) {
        if let Some(map) = self.map.as_ref() {
            map.prefault_for_write(offset, len);
        }
    }

    /// Length of the writable map, or `None` when appends must use `pwrite`.
    fn writable_len(&self) -> Option<u64> {
        self.map
            .as_ref()
            .filter(|m| m.is_writable())
            .map(|m| m.len() as u64)
    }

    /// The bytes of the record at `loc` from the map, or `None` when the
    /// file is not mapped or the map does not reach that far (a record
    /// bigger than `max_file_size`, written alone into a fresh file).
    ///
    /// # Safety
    /// `loc` must come from the index (under its lock) of the shard owning
    /// this file, so the record was fully written before `loc` was published
    /// and is never written again.
    pub(crate) unsafe fn mapped(&self, loc: Loc) -> Option<&[u8]> {
        let map = self.map.as_ref()?;
        // SAFETY: the caller promises `loc` is an index entry: its bytes were
        // written (their `pwrite` returned) before the entry was published,
        // lie below the file's length, and the append-only file never writes
        // them again; nothing truncates a file that is open (see
        // `FileMap::range`).
        unsafe { map.range(loc.offset as u64, loc.len as usize) }
    }

    /// The file's map, if it has one.
    pub(crate) fn map_ref(&self) -> Option<&FileMap> {
        self.map.as_ref()
    }

    /// Whether reads go through a memory map.
    #[cfg(test)]
    pub fn is_mapped(&self) -> bool {
        self.map.is_some()
    }
}

/// How far ahead of the write position an active file's space is reserved
/// (`fallocate`) for stores through its map. Small enough that an almost
/// empty database does not hold a large file per shard (at most this much
/// per shard is ever reserved and unused), large enough that the
/// `fallocate` call is rare: one per ~14,000 records of 150 bytes.
pub(crate) const PREALLOCATE_STEP: u64 = 2 << 20;

/// How many bytes of reserved space ahead of the write position are faulted
/// in at once (one `madvise` instead of a page fault every 4 KiB).
pub(crate) const PREFAULT_STEP: u64 = 64 << 10;

/// How far ahead of the stores the prefault thread is asked to fault in
/// pages ([`prefault_ahead`]), in one request each time the stores come
/// within this distance of what was asked: one wake-up of that thread per
/// 256 KiB appended (a wake-up per 64 KiB cost the writer a tenth of what
/// it saved).
pub(crate) const PREFAULT_AHEAD: u64 = 256 << 10;

/// Faults in `len` bytes of `data`'s writable map from `offset` on the
/// process's prefault thread (`basalt-prefault`, started by the first
/// call), so that the writer's stores find the pages in without the
/// `madvise` on its own thread: measured, faulting in the pages a hot
/// write stream fills was a tenth of its writer's time (see
/// `docs/architecture.md`). Advice only, like
/// [`FileMap::prefault_for_write`]: a writer that outruns the thread takes
/// page faults, as it would without any advice, and if the thread cannot
/// be started the pages are faulted in here. The request holds the file
/// until it is served; a range past the file's end by then (the file was
/// sealed and its reserved tail cut) is refused by the kernel and ignored.
fn prefault_ahead(data: &Arc<DataFile>, offset: u64, len: u64) {
    type Request = (Arc<DataFile>, u64, u64);
    static QUEUE: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Request>>> =
        std::sync::OnceLock::new();
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("basalt-prefault".into())
            .spawn(move || {
                for (data, offset, len) in rx {
                    data.prefault_for_write(offset, len);
                }
            })
            .ok()
            .map(|_| tx)
    });
    let sent = queue
        .as_ref()
        .is_some_and(|tx| tx.send((data.clone(), offset, len)).is_ok());
    if !sent {
        data.prefault_for_write(offset, len);
    }
}

/// Appending by storing into the active file's writable map.
#[derive(Debug)]
pub(crate) struct MapAppend {
    /// The active file as readers see it; its map is writable.
    pub data: Arc<DataFile>,
    /// Length of that map: no store reaches past it.
    pub map_len: u64,
    /// Space below this offset is allocated on disk and inside the file, so
    /// a store below it cannot fault.
    pub allocated: u64,
    /// Pages below this offset were faulted in writable ahead of the stores,
    /// or asked to be ([`prefault_ahead`]).
    pub prefaulted: u64,
}

thread_local! {
    /// Bytes this thread appended (outside batches) to one database
    /// (its `Inner`'s address) while its writes were delayed, not slept
    /// off yet (`Inner::delay_if_stalled`).
    static STALL_DEBT: std::cell::Cell<(usize, u64)> = const { std::cell::Cell::new((0, 0)) };
    /// Set on the engine's own threads (the maintenance thread's expiry
    /// sweep writes too): they never sleep for a stall.
    pub(crate) static NO_STALL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A delayed writer sleeps once it owes this many bytes.
const STALL_STEP: u64 = 64 << 10;
/// The longest one delayed write sleeps.
const STALL_MAX_SLEEP: std::time::Duration = std::time::Duration::from_millis(100);

/// Bookkeeping for one data file.
#[derive(Debug)]
pub(crate) struct FileInfo {
    pub handle: Arc<DataFile>,
    pub origin: Origin,
    pub total: u64,
    pub live: u64,
    pub tombstones: u64,
    pub min_seq: u64,
    pub max_seq: u64,
    /// Lowest sequence number of a batch member ([`FLAG_BATCH`]) in the
    /// file; `u64::MAX` if it holds none. Compaction keeps the commit
    /// records a flagged record may still need (see `batch.rs`).
    pub min_flagged: u64,
    pub active: bool,
}

impl FileInfo {
    pub fn new(handle: Arc<DataFile>, origin: Origin, total: u64) -> Self {
        FileInfo {
            handle,
            origin,
            total,
            live: 0,
            tombstones: 0,
            min_seq: u64::MAX,
            max_seq: 0,
            min_flagged: u64::MAX,
            active: false,
        }
    }
    pub fn note_record(&mut self, seq: u64, kind: Kind, len: u64) {
        self.min_seq = self.min_seq.min(seq);
        self.max_seq = self.max_seq.max(seq);
        if kind.is_tombstone() {
            self.tombstones += len;
        }
    }
    /// Bytes compaction would reclaim.
    pub fn reclaimable(&self) -> u64 {
        self.total
            .saturating_sub(format::FILE_HEADER_LEN as u64)
            .saturating_sub(self.live + self.tombstones)
    }
}

/// What [`Db::large_map`] found at a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LargeMap {
    /// Its fields (segments, for a value kept as segments).
    pub fields: usize,
    /// Its expiry, ms since the epoch; 0 for none. May be past: an expired
    /// map stays until it is purged.
    pub expiry: u64,
}

/// A shard's index: keys, maps, expiries, files.
#[derive(Debug, Default)]
pub(crate) struct Index {
    pub keys: Keydir,
    pub maps: HashMap<Box<[u8]>, MapEntry>,
    pub expires: HashMap<Box<[u8]>, u64>,
    pub queue: BTreeSet<(u64, Box<[u8]>)>,
    pub files: BTreeMap<u32, FileInfo>,
    /// The maps of more than [`LARGE_MAP_FIELDS`] fields.
    pub large: LargeMaps,
}

/// A map holds "many" fields above this: dropping it (a write that
/// replaces it, DEL) then costs time linear in them, about 50 ns each.
/// [`Db::large_maps`] counts such maps.
pub const LARGE_MAP_FIELDS: usize = 1024;

/// A shard's maps of more than [`LARGE_MAP_FIELDS`] fields (expired ones
/// not yet purged included), and the database-wide count they add to.
/// Updated only where a map's field count crosses the line or the map
/// goes, so a field write pays one comparison.
#[derive(Debug, Default)]
pub(crate) struct LargeMaps {
    keys: HashSet<Box<[u8]>>,
    total: Arc<AtomicUsize>,
}

impl LargeMaps {
    /// Counts this shard's maps into `total` (the database's), from now on.
    pub fn attach(&mut self, total: &Arc<AtomicUsize>) {
        total.fetch_add(self.keys.len(), Ordering::AcqRel);
        self.total = total.clone();
    }
    /// The map at `key` now has `len` fields, one more than before.
    #[inline]
    pub fn grew(&mut self, key: &[u8], len: usize) {
        if len == LARGE_MAP_FIELDS + 1 && self.keys.insert(key.into()) {
            self.total.fetch_add(1, Ordering::AcqRel);
        }
    }
    /// The map at `key` now has `len` fields, one fewer than before.
    #[inline]
    pub fn shrank(&mut self, key: &[u8], len: usize) {
        if len == LARGE_MAP_FIELDS {
            self.forget(key);
        }
    }
    /// The map at `key`, of `len` fields, is gone.
    #[inline]
    pub fn dropped(&mut self, key: &[u8], len: usize) {
        if len > LARGE_MAP_FIELDS {
            self.forget(key);
        }
    }
    fn forget(&mut self, key: &[u8]) {
        if self.keys.remove(key) {
            self.total.fetch_sub(1, Ordering::AcqRel);
        }
    }
    /// Rebuilt from the maps (at open).
    pub fn rebuild(&mut self, maps: &HashMap<Box<[u8]>, MapEntry>) {
        let before = self.keys.len();
        self.keys = maps
            .iter()
            .filter(|(_, m)| m.fields.len() > LARGE_MAP_FIELDS)
            .map(|(k, _)| k.clone())
            .collect();
        self.total.fetch_sub(before, Ordering::AcqRel);
        self.total.fetch_add(self.keys.len(), Ordering::AcqRel);
    }
    pub fn contains(&self, key: &[u8]) -> bool {
        !self.keys.is_empty() && self.keys.contains(key)
    }
}

impl Index {
    pub fn add_live(&mut self, loc: Loc) {
        if let Some(f) = self.files.get_mut(&loc.file) {
            f.live += loc.len as u64;
        }
    }
    pub fn sub_live(&mut self, loc: Loc) {
        if let Some(f) = self.files.get_mut(&loc.file) {
            f.live = f.live.saturating_sub(loc.len as u64);
        }
    }
    pub fn note_append(&mut self, loc: Loc, kind: Kind) {
        if let Some(f) = self.files.get_mut(&loc.file) {
            f.total = f.total.max(loc.offset as u64 + loc.len as u64);
            f.note_record(loc.seq, kind, loc.len as u64);
        }
    }
    pub fn expiry_of(&self, key: &[u8]) -> Option<u64> {
        self.expires.get(key).copied()
    }
    pub fn set_expiry(&mut self, key: &[u8], at: u64) {
        let old = if at == 0 {
            self.expires.remove(key)
        } else {
            self.expires.insert(key.into(), at)
        };
        if let Some(old) = old {
            self.queue.remove(&(old, Box::from(key)));
        }
        if at != 0 {
            self.queue.insert((at, key.into()));
        }
    }
    /// Drops a key entirely (value or map) from the index, fixing accounting.
    pub fn remove_key(&mut self, key: &[u8]) {
        let Some(e) = self.keys.remove(key) else {
            return;
        };
        if e.has_ttl {
            self.set_expiry(key, 0);
        }
        if e.loc.file == MAP_FILE {
            self.drop_map(key);
        } else {
            self.sub_live(e.loc);
        }
    }
    /// Drops the map of `key` (not its keydir entry), fixing accounting.
    fn drop_map(&mut self, key: &[u8]) {
        if let Some(m) = self.maps.remove(key) {
            self.large.dropped(key, m.fields.len());
            for loc in m.fields.values() {
                self.sub_live(loc);
            }
            if let Some(meta) = m.meta {
                self.sub_live(meta);
            }
        }
    }
    /// Points `key` at a value record.
    /// Makes `key` a plain value at `loc` with `expiry` (0: none), and
    /// says whether what it replaced had expired at `now` (the write
    /// removed an expired key, as a purge would have).
    pub fn set_value(&mut self, key: &[u8], loc: Loc, expiry: u64, now: u64) -> bool {
        // One probe of the keydir: `insert` returns what the key held.
        let old = self.keys.insert(key, loc, expiry != 0);
        // Only a key with the TTL flag costs a probe of `expires`.
        let expired =
            old.is_some_and(|e| e.has_ttl) && self.expiry_of(key).is_some_and(|t| t <= now);
        match old {
            Some(e) if e.loc.file == MAP_FILE => self.drop_map(key),
            Some(e) => self.sub_live(e.loc),
            None => {}
        }
        // The TTL flag says whether `expires` holds the key, so a key that
        // had no expiry and gets none needs no probe of it.
        if expiry != 0 || old.is_some_and(|e| e.has_ttl) {
            self.set_expiry(key, expiry);
        }
        self.add_live(loc);
        expired
    }
    /// Whether the key exists and has expired at `now`.
    pub fn is_expired(&self, key: &[u8], has_ttl: bool, now: u64) -> bool {
        has_ttl && self.expiry_of(key).is_some_and(|t| t <= now)
    }
    pub fn memory_bytes(&self) -> usize {
        let mut n = self.keys.memory_bytes();
        for (k, m) in &self.maps {
            n += map_bytes(k, m);
        }
        n += self.expires.capacity() * (16 + 8 + 1);
        n += self.expires.keys().map(|k| expiry_bytes(k)).sum::<usize>();
        n
    }

    /// What one key holds in this index, estimated as [`Index::memory_bytes`]
    /// counts it: its keydir entry, its map, its expiry entry.
    fn key_bytes(&self, key: &[u8], is_map: bool, has_ttl: bool) -> usize {
        let mut n = crate::keydir::entry_bytes(key.len());
        if is_map {
            n += self.maps.get(key).map_or(0, |m| map_bytes(key, m));
        }
        if has_ttl {
            // The expiry table's slot (at a typical load) and its entries.
            n += expiry_bytes(key) + 32;
        }
        n
    }
}

/// Memory of one map: its entry in the maps table and its field table.
fn map_bytes(key: &[u8], m: &MapEntry) -> usize {
    key.len() + 96 + m.fields.memory_bytes()
}

/// Memory of one expiry entry (the key twice: table and order).
fn expiry_bytes(key: &[u8]) -> usize {
    2 * (key.len() + 8) + 48
}

/// The shard's active file.
///
/// Where the VFS offers a writable map, a record is appended by copying it
/// into the map at `len`, into space reserved ahead with `fallocate` in
/// [`PREALLOCATE_STEP`]s. The file is then longer than its records: it ends
/// in zeros up to `reserved`, which sealing and a clean close cut off (and
/// recovery, after a crash). Without a map, or once reserving space failed
/// for this file, records are appended with `pwrite` as before.
#[derive(Debug)]
pub(crate) struct Writer {
    pub file_id: u32,
    pub file: Arc<dyn VFile>,
    /// End of the last record: where the next one goes.
    pub len: u64,
    pub buf: Vec<u8>,
    /// Set while appends go through the map.
    pub map: Option<MapAppend>,
    /// The furthest the file may have been extended by reserving space
    /// (also by a reservation that failed half-way); past `len` means a zero
    /// tail to cut off.
    pub reserved: u64,
    /// Lowest sequence number of a batch member appended to this file by
    /// this writer (`u64::MAX`: none). Kept here, under the writer lock the
    /// append holds anyway, and moved into the file's
    /// [`FileInfo::min_flagged`] when the file is sealed.
    pub min_flagged: u64,
}

impl Writer {
    /// The writer of active file `file_id` whose records end at `len`;
    /// `data` is the file as the index holds it.
    pub fn new(file_id: u32, data: &Arc<DataFile>, len: u64) -> Writer {
        let map = data.writable_len().map(|map_len| MapAppend {
            data: data.clone(),
            map_len,
            allocated: len,
            prefaulted: len,
        });
        Writer {
            file_id,
            file: data.file.clone(),
            len,
            buf: Vec::new(),
            map,
            reserved: len,
            min_flagged: u64::MAX,
        }
    }

    /// Whether appends currently go through the map.
    #[cfg(test)]
    pub fn appends_through_map(&self) -> bool {
        self.map.is_some()
    }
}

pub(crate) struct Shard {
    pub id: usize,
    pub dir: PathBuf,
    pub index: RwLock<Index>,
    pub writer: Mutex<Writer>,
    /// (file id, offset) known to be on stable storage.
    pub synced: Mutex<(u32, u64)>,
    /// (file id << 32) | end offset of the last append.
    pub appended: AtomicU64,
    /// Bytes appended by writers since open (compaction's rate limit
    /// grows with them).
    pub written: AtomicU64,
    pub next_file: AtomicU32,
    /// Sealed log files whose hint file is still to be written.
    /// Sealed log files without a hint file yet, with when each was sealed
    /// (`None`: found without one at open, due at once); see
    /// [`crate::Options::hint_delay`].
    pub pending_hints: Mutex<Vec<(u32, Option<Instant>)>>,
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shard")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Shard {
    pub fn data_path(&self, id: u32) -> PathBuf {
        data_path(&self.dir, id)
    }
    pub fn hint_path(&self, id: u32) -> PathBuf {
        hint_path(&self.dir, id)
    }
}

pub(crate) fn data_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("{id:010}.data"))
}
pub(crate) fn hint_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("{id:010}.hint"))
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub compactions: AtomicU64,
    pub compaction_read: AtomicU64,
    pub compaction_written: AtomicU64,
    pub expired: AtomicU64,
}

pub(crate) struct Inner {
    pub dir: PathBuf,
    pub opts: Options,
    pub shards: Vec<Shard>,
    /// The next sequence number; shared with other databases when
    /// [`Options::sequence`] is set.
    pub seq: Arc<AtomicU64>,
    pub poisoned: AtomicBool,
    pub poison_reason: Mutex<Option<String>>,
    /// What failed first, when it was a write or a file creation (the only
    /// failures [`Db::resume_writes`] recovers from): the operation and file.
    pub poison_site: Mutex<Option<(&'static str, PathBuf)>>,
    /// A batch wrote members and could not commit them: memory shows them,
    /// the disk will not after a restart, so writes must not resume.
    pub batch_lost: AtomicBool,
    pub stop: Mutex<bool>,
    pub wake: Condvar,
    pub counters: Counters,
    /// The background expiry sweep waits until this time (ms since the
    /// epoch, the engine's clock); 0 = not paused. [`Db::pause_expiry`].
    pub expiry_paused_until: AtomicU64,
    /// How [`Db::get_or_cold`] decides residency ([`Residency`] as a byte).
    pub residency: std::sync::atomic::AtomicU8,
    /// One compaction at a time (background or on demand).
    pub compaction: Mutex<()>,
    /// Held shared while compaction deletes its inputs, exclusively while
    /// a checkpoint links files: no file disappears during a checkpoint.
    pub deleting: parking_lot::RwLock<()>,
    pub lock_file: std::fs::File,
    /// The batch group (see `batch.rs`): one open batch at a time.
    pub group: Arc<BatchGroup>,
    /// This `Inner`, for an open batch to commit into later.
    pub me: Weak<Inner>,
    /// Sequence number of the open batch's first member in this database,
    /// `u64::MAX` when none is open: compaction treats flagged records from
    /// here on as uncommitted.
    pub open_first: AtomicU64,
    /// Sequence numbers of batch members recovery found uncommitted (crash
    /// remnants), sorted: compaction drops them.
    pub aborted: Vec<u64>,
    /// Writes are delayed: compaction has fallen behind (see
    /// [`crate::Options::write_stall_ratio`]); set by the maintenance
    /// thread.
    pub stalled: AtomicBool,
    /// Times writes started being delayed.
    pub stalls: AtomicU64,
    /// Tokens of the conditional commits recovery accepted (see
    /// [`Db::commit_tokens`]).
    pub tokens: Vec<u64>,
    /// How many maps hold more than [`LARGE_MAP_FIELDS`] fields, over all
    /// shards ([`LargeMaps`]).
    pub large_maps: Arc<std::sync::atomic::AtomicUsize>,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inner")
            .field("dir", &self.dir)
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

/// An open database. `Send + Sync`: share it between threads with an `Arc`.
///
/// Dropping it closes it (see [`Db::close`] to see errors).
pub struct Db {
    pub(crate) inner: Arc<Inner>,
    pub(crate) workers: Vec<JoinHandle<()>>,
    pub(crate) closed: bool,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db").field("dir", &self.inner.dir).finish()
    }
}

pub(crate) fn shard_of(key: &[u8], n: usize) -> usize {
    crate::format::crc32c(key) as usize & (n - 1)
}

fn pack(file: u32, off: u64) -> u64 {
    ((file as u64) << 32) | off
}

impl Inner {
    pub fn now(&self) -> u64 {
        self.opts.clock.now_ms()
    }

    pub fn shard(&self, key: &[u8]) -> &Shard {
        &self.shards[shard_of(key, self.shards.len())]
    }

    pub fn check_writable(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            let why = self.poison_reason.lock().clone().unwrap_or_default();
            return Err(Error::Poisoned(why));
        }
        Ok(())
    }

    /// Records the first failure; every later write is refused with it.
    pub fn poison(&self, err: Error) -> Error {
        let mut r = self.poison_reason.lock();
        if r.is_none() {
            tracing::error!(error = %err, "engine poisoned: refusing further writes");
            *r = Some(err.to_string());
            *self.poison_site.lock() = match &err {
                Error::Io { op, path, .. } if matches!(*op, "write" | "create") => {
                    Some((*op, path.clone()))
                }
                _ => None,
            };
        }
        self.poisoned.store(true, Ordering::Release);
        err
    }

    /// The next sequence number: from this thread's [`crate::SequenceLane`]
    /// if one is open, else from the shared counter.
    #[inline]
    pub(crate) fn next_seq(&self) -> u64 {
        match crate::lane::take() {
            Some(seq) => seq,
            None => self.seq.fetch_add(1, Ordering::SeqCst),
        }
    }

    /// Appends one record to the active file; the caller holds the writer
    /// lock. The bytes have reached the OS (the page cache) when this
    /// returns: stored through the active file's map or written with
    /// `pwrite`.
    ///
    /// A record that would take the active file past `max_file_size` first
    /// rotates it, so that a failed rotation fails *this* write before it
    /// takes effect (rotating after the append would report an error for a
    /// write that is already in the log).
    ///
    /// On a thread with a batch of this database's group open, the record
    /// is a batch member: flagged, and counted for the batch's commit.
    pub fn append(&self, shard: &Shard, w: &mut Writer, mut rec: RecordRef<'_>) -> Result<Loc> {
        let member = crate::batch::in_batch(self);
        if member {
            rec.flags |= FLAG_BATCH;
            crate::batch::before_member(self, rec.seq);
        }
        w.buf.clear();
        let len = rec.encode_into(&mut w.buf);
        if !self.fits_active(w, len as u64) {
            self.rotate(shard, w)?;
        }
        if !self.store_mapped(shard, w) {
            if let Err(e) = w.file.write_all_at(&w.buf, w.len) {
                return Err(self.poison(Error::io("write", shard.data_path(w.file_id), e)));
            }
        }
        let loc = Loc {
            file: w.file_id,
            offset: w.len as u32,
            len: len as u32,
            seq: rec.seq,
        };
        w.len += len as u64;
        shard
            .appended
            .store(pack(w.file_id, w.len), Ordering::Release);
        shard.written.fetch_add(len as u64, Ordering::Relaxed);
        if !member && self.stalled.load(Ordering::Relaxed) {
            let me = self as *const Inner as usize;
            STALL_DEBT.with(|d| {
                let (owner, owed) = d.get();
                let owed = if owner == me { owed } else { 0 };
                d.set((me, owed + len as u64));
            });
        }
        if w.buf.capacity() > 4 << 20 {
            w.buf = Vec::new();
        }
        if member {
            crate::batch::note_member(self, shard.id, rec.seq);
            w.min_flagged = w.min_flagged.min(rec.seq);
        }
        Ok(loc)
    }

    /// Whether a record of `len` bytes goes into the active file without
    /// sealing it first (a file past its size limit is sealed, unless the
    /// record is its first).
    pub(crate) fn fits_active(&self, w: &Writer, len: u64) -> bool {
        w.len <= format::FILE_HEADER_LEN as u64 || w.len + len <= self.opts.max_file_size
    }

    /// Stores the encoded record `w.buf` at `w.len` through the active
    /// file's writable map, reserving space first if the store would reach
    /// past what is reserved. Returns false when the record must be written
    /// with `pwrite` instead: no writable map, the record runs past the map
    /// (a record bigger than `max_file_size`, alone in its file), or
    /// reserving space failed, after which this file is appended with
    /// `pwrite` until it is sealed (on a full disk that `pwrite` fails with
    /// the clear error and poisoning a write always gave).
    fn store_mapped(&self, shard: &Shard, w: &mut Writer) -> bool {
        let Some(m) = w.map.as_mut() else {
            return false;
        };
        let end = w.len + w.buf.len() as u64;
        if end > m.map_len {
            return false;
        }
        // Space is reserved, and faulted in, ahead of the stores.
        let ahead = (end + PREFAULT_AHEAD).min(m.map_len);
        if ahead > m.allocated {
            let from = m.allocated.max(w.len);
            let to = ahead.next_multiple_of(PREALLOCATE_STEP).min(m.map_len);
            // Even a failed reservation may have extended the file.
            w.reserved = w.reserved.max(to);
            if let Err(e) = w.file.allocate(from, to - from) {
                tracing::warn!(file = %shard.data_path(w.file_id).display(), error = %e,
                    "reserving space for the active file failed; appending to it with pwrite");
                w.map = None;
                return false;
            }
            m.allocated = to;
        }
        if end > m.prefaulted {
            // This store reaches pages not asked for yet (a file's first
            // record, a record longer than the step): faulted in here.
            let from = m.prefaulted.max(w.len);
            let to = end.next_multiple_of(PREFAULT_STEP).min(m.allocated);
            m.data.prefault_for_write(from, to - from);
            m.prefaulted = to;
        }
        if ahead > m.prefaulted {
            // The next step, on the prefault thread, while this thread
            // goes on storing into the pages already in.
            let from = m.prefaulted;
            let to = ahead.next_multiple_of(PREFAULT_AHEAD).min(m.allocated);
            prefault_ahead(&m.data, from, to - from);
            m.prefaulted = to;
        }
        // SAFETY: `w.len..end` lies below `m.allocated`, which `allocate`
        // reserved on disk and inside the file, so the store cannot fault on
        // a hole or past the end of the file; it lies inside the map (checked
        // above). It lies at or past the end of every record of this file, so
        // no index entry points into it and no reader reads it until the
        // caller publishes the record's location after this returns; the
        // writer lock (held by our caller) keeps other stores out. Nothing
        // truncates the file below `w.len` while it is open.
        unsafe {
            m.data
                .map
                .as_ref()
                .is_some_and(|map| map.store(w.len, &w.buf))
        }
    }

    /// Cuts the zero tail reserved past the active file's last record (at
    /// seal and on a clean close, so that a file at rest ends at its last
    /// record). The caller holds the writer lock and syncs the file after.
    /// No reader can reach the bytes cut: no index entry points past `w.len`,
    /// and the map stays as long as it was.
    fn cut_reserved_tail(&self, shard: &Shard, w: &mut Writer) -> Result<bool> {
        if w.reserved <= w.len {
            return Ok(false);
        }
        if let Err(e) = w.file.set_len(w.len) {
            return Err(self.poison(Error::io("truncate", shard.data_path(w.file_id), e)));
        }
        w.reserved = w.len;
        if let Some(m) = w.map.as_mut() {
            m.allocated = w.len;
            m.prefaulted = w.len;
        }
        Ok(true)
    }

    /// Cuts the active file's reserved zero tail and makes the cut durable:
    /// a clean close leaves every data file at its real length.
    pub fn cut_active_tail(&self, shard: &Shard) -> Result<()> {
        let mut w = shard.writer.lock();
        if self.cut_reserved_tail(shard, &mut w)? {
            if let Err(e) = w.file.sync_data() {
                return Err(self.poison(Error::io("fsync", shard.data_path(w.file_id), e)));
            }
        }
        Ok(())
    }

    /// Called after every write, still holding the writer lock: (after the
    /// lock is dropped) fsyncs under `SyncPolicy::Always`.
    /// Inside a batch the fsync waits for the batch's commit.
    pub(crate) fn finish_write(
        &self,
        shard: &Shard,
        w: parking_lot::MutexGuard<'_, Writer>,
    ) -> Result<()> {
        if self.opts.sync == SyncPolicy::Always && !crate::batch::in_batch(self) {
            let (id, end, file) = (w.file_id, w.len, w.file.clone());
            drop(w);
            self.sync_upto(shard, id, end, &file)?;
        } else {
            drop(w);
        }
        self.delay_if_stalled();
        Ok(())
    }

    /// While writes are delayed, sleeps off what this thread appended,
    /// at [`crate::Options::delayed_write_rate_mb`], once it owes at least
    /// `STALL_STEP` bytes (so small writes sleep rarely, not each a little).
    /// Never inside a batch (its group's lock would be held asleep).
    fn delay_if_stalled(&self) {
        let me = self as *const Inner as usize;
        let (owner, owed) = STALL_DEBT.with(|d| d.get());
        if owed == 0 || owner != me {
            return;
        }
        if !self.stalled.load(Ordering::Relaxed) {
            STALL_DEBT.with(|d| d.set((me, 0)));
            return;
        }
        if owed < STALL_STEP || crate::batch::in_batch(self) || NO_STALL.with(|n| n.get()) {
            return;
        }
        STALL_DEBT.with(|d| d.set((me, 0)));
        let rate = (self.opts.delayed_write_rate_mb.max(1) << 20) as f64;
        // One sleep is at most STALL_MAX_SLEEP: a single huge write owes
        // more, and the rest is forgiven rather than paid by a later,
        // unrelated write.
        let secs = (owed as f64 / rate).min(STALL_MAX_SLEEP.as_secs_f64());
        std::thread::sleep(std::time::Duration::from_secs_f64(secs));
    }

    /// Whether writes must be delayed now, from the data files' live and
    /// total bytes, with hysteresis: delayed above the limit, resumed once
    /// the garbage is back under three quarters of it. Called by the
    /// maintenance thread.
    pub(crate) fn update_stall(&self) {
        // The garbage compaction would pick up (sealed files past the
        // threshold, tombstones excluded): what it is behind on. Garbage
        // in the active files, or below the threshold, is not its backlog.
        let threshold = self.opts.compaction_threshold;
        let (mut live, mut backlog) = (0u64, 0u64);
        for s in &self.shards {
            let idx = s.index.read();
            for f in idx.files.values() {
                live += f.live;
                let r = f.reclaimable();
                if !f.active && r as f64 >= threshold * f.total as f64 {
                    backlog += r;
                }
            }
        }
        let dead = backlog as f64;
        let limit = self.opts.write_stall_ratio * live as f64 + self.opts.write_stall_slack as f64;
        let was = self.stalled.load(Ordering::Relaxed);
        let now = if was {
            dead > 0.75 * limit
        } else {
            dead > limit
        };
        if now != was {
            self.stalled.store(now, Ordering::Relaxed);
            if now {
                self.stalls.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    dead_bytes = dead as u64,
                    live_bytes = live,
                    "compaction has fallen behind the writers; delaying writes until it catches up"
                );
            } else {
                tracing::info!(
                    dead_bytes = dead as u64,
                    live_bytes = live,
                    "compaction caught up; writes are no longer delayed"
                );
            }
        }
    }

    /// Group commit: one fsync covers every append that finished before it.
    pub fn sync_upto(&self, shard: &Shard, id: u32, end: u64, file: &Arc<dyn VFile>) -> Result<()> {
        let mut synced = shard.synced.lock();
        if synced.0 == id && synced.1 >= end {
            return Ok(());
        }
        let latest = shard.appended.load(Ordering::Acquire);
        let target = if (latest >> 32) as u32 == id {
            (latest & 0xffff_ffff).max(end)
        } else {
            end
        };
        if let Err(e) = file.sync_data() {
            return Err(self.poison(Error::io("fsync", shard.data_path(id), e)));
        }
        *synced = (id, target);
        Ok(())
    }

    /// fsyncs the shard's active file.
    pub fn sync_shard(&self, shard: &Shard) -> Result<()> {
        let (id, end, file) = {
            let w = shard.writer.lock();
            (w.file_id, w.len, w.file.clone())
        };
        self.sync_upto(shard, id, end, &file)
    }

    /// Creates a new data file with its header written and synced.
    pub fn create_data_file(
        &self,
        shard: &Shard,
        origin: Origin,
        path: &Path,
    ) -> Result<Arc<dyn VFile>> {
        let file = self
            .opts
            .vfs
            .create(path)
            .map_err(|e| Error::io("create", path, e))?;
        let hdr = FileHeader {
            origin,
            base_seq: self.seq.load(Ordering::SeqCst),
        }
        .encode(&DATA_MAGIC);
        file.write_all_at(&hdr, 0)
            .map_err(|e| Error::io("write", path, e))?;
        file.sync_data().map_err(|e| Error::io("fsync", path, e))?;
        sync_dir(&shard.dir)?;
        Ok(file)
    }

    /// Seals the active file (cut its reserved zero tail, fsync) and starts
    /// a new one. The cut is durable before the next file exists, so only
    /// the newest log file can ever end in zeros.
    pub fn rotate(&self, shard: &Shard, w: &mut Writer) -> Result<()> {
        self.cut_reserved_tail(shard, w)?;
        if let Err(e) = w.file.sync_data() {
            return Err(self.poison(Error::io("fsync", shard.data_path(w.file_id), e)));
        }
        let id = shard.next_file.fetch_add(1, Ordering::SeqCst);
        let file = match self.create_data_file(shard, Origin::Log, &shard.data_path(id)) {
            Ok(f) => f,
            Err(e) => return Err(self.poison(e)),
        };
        let old = w.file_id;
        let data = DataFile::appendable(file, self.opts.max_file_size);
        {
            let mut idx = shard.index.write();
            if let Some(f) = idx.files.get_mut(&old) {
                f.active = false;
                f.handle.set_appending(false);
                f.min_flagged = f.min_flagged.min(w.min_flagged);
            }
            let mut info = FileInfo::new(data.clone(), Origin::Log, format::FILE_HEADER_LEN as u64);
            info.active = true;
            idx.files.insert(id, info);
        }
        *shard.synced.lock() = (id, format::FILE_HEADER_LEN as u64);
        let buf = std::mem::take(&mut w.buf);
        *w = Writer::new(id, &data, format::FILE_HEADER_LEN as u64);
        w.buf = buf;
        shard.pending_hints.lock().push((old, Some(Instant::now())));
        Ok(())
    }

    /// Reads the record at `loc`, checks its length and CRC, and hands it to
    /// `f`; an `Err` from `f` is reported as corruption at `loc`. The record
    /// is seen in place through the file's map when there is one (no system
    /// call, no copy: `f` copies what it keeps), else read with one `pread`.
    ///
    /// # Safety
    /// `loc` must have been read from `shard`'s index (under its lock), and
    /// `file` must be the file the index lists under `loc.file`.
    pub unsafe fn read_with<R>(
        &self,
        shard: &Shard,
        file: &DataFile,
        loc: Loc,
        f: impl FnOnce(Record<'_>) -> std::result::Result<R, &'static str>,
    ) -> Result<R> {
        let check = self.residency.load(Ordering::Relaxed) != crate::cold::Residency::InPlace as u8;
        // SAFETY: the caller's promise, passed on.
        unsafe { self.read_with_checked(shard, file, loc, check, false, f) }
    }

    /// [`Inner::read_with`]; with `check`, a record whose pages are not all
    /// in memory is read with one `pread` rather than through the map (past
    /// the page cache unless admitted when it is `lone`, a key's whole value
    /// read on its own; through it otherwise, see below),
    /// where each of its pages would be a fault and a disk read in turn
    /// (and a failing disk a `SIGBUS` rather than an error).
    ///
    /// # Safety
    /// As for [`Inner::read_with`].
    pub unsafe fn read_with_checked<R>(
        &self,
        shard: &Shard,
        file: &DataFile,
        loc: Loc,
        check: bool,
        lone: bool,
        f: impl FnOnce(Record<'_>) -> std::result::Result<R, &'static str>,
    ) -> Result<R> {
        let corrupt = |reason: &str| Error::Corrupt {
            path: shard.data_path(loc.file),
            offset: loc.offset as u64,
            reason: reason.into(),
        };
        // Bytes a caller fetched ahead for the command now running
        // (`Db::cold_field_reads`, `cold::stage_record`).
        if let Some(bytes) = crate::cold::take_staged(file.uid, loc) {
            let rec = Record::from_bytes(&bytes).map_err(corrupt)?;
            return f(rec).map_err(corrupt);
        }
        // (A file without a map is read with `pread` anyway.)
        let cold = check && file.map_ref().is_some() && !crate::cold::record_resident(file, loc);
        let mapped = if cold {
            None
        } else {
            // SAFETY: the caller promises `loc` is an index entry of this file.
            unsafe { file.mapped(loc) }
        };
        let parse = |bytes: &[u8]| {
            let rec = Record::from_bytes(bytes).map_err(corrupt)?;
            f(rec).map_err(corrupt)
        };
        // Not resident, or a file without a map: one `pread`, through the
        // page cache. These reads come in runs (a map's fields, a large
        // value's segments), and their records share blocks: read past the
        // cache one by one, each would fetch its blocks again (measured:
        // 3.5x the bytes and 0.4x the HGETALLs). Reads made elsewhere go
        // past it (`ColdRead`, `Db::cold_field_reads`).
        let read = match mapped {
            Some(bytes) => return parse(bytes),
            // A key's whole value, read alone: as a `ColdRead` would be.
            None if cold && lone => crate::cold::read_alone(file, loc, parse),
            None => crate::cold::read_cached(file, loc, parse),
        };
        read.map_err(|e| Error::io("read", shard.data_path(loc.file), e))?
    }

    pub(crate) fn encode_value<'a>(
        &self,
        value: &'a [u8],
        scratch: &'a mut Vec<u8>,
    ) -> (u8, &'a [u8]) {
        match self.opts.compress_above {
            Some(min) if value.len() >= min => {
                *scratch = lz4_flex::block::compress_prepend_size(value);
                if scratch.len() < value.len() {
                    (FLAG_LZ4, &scratch[..])
                } else {
                    (0, value)
                }
            }
            _ => (0, value),
        }
    }

    /// If `key` has expired, writes its deletion to the log and drops it, as
    /// the sweep would. Caller holds the writer lock. Returns whether it did.
    pub(crate) fn purge_if_expired(
        &self,
        shard: &Shard,
        w: &mut Writer,
        key: &[u8],
        deadline: Option<u64>,
    ) -> Result<bool> {
        let now = self.now();
        let expired = {
            let idx = shard.index.read();
            matches!(
                (idx.keys.get(key), idx.expiry_of(key)),
                (Some(e), Some(t)) if e.has_ttl && t <= now && deadline.is_none_or(|d| d == t)
            )
        };
        if !expired {
            return Ok(false);
        }
        let seq = self.next_seq();
        let loc = self.append(shard, w, tombstone(seq, key))?;
        {
            let mut idx = shard.index.write();
            idx.note_append(loc, Kind::Delete);
            idx.remove_key(key);
        }
        self.note_expired(key);
        Ok(true)
    }

    /// Counts a key removed because it expired and tells the expiry
    /// listener.
    pub(crate) fn note_expired(&self, key: &[u8]) {
        self.counters.expired.fetch_add(1, Ordering::Relaxed);
        if let Some(l) = &self.opts.expiry_listener {
            l(key);
        }
    }

    /// Removes up to `limit` keys of one shard whose deadline has passed.
    /// Returns how many it removed.
    pub fn sweep_shard(&self, shard: &Shard, limit: usize) -> Result<usize> {
        let now = self.now();
        let due: Vec<(u64, Box<[u8]>)> = {
            let idx = shard.index.read();
            idx.queue
                .iter()
                .take_while(|(t, _)| *t <= now)
                .take(limit)
                .cloned()
                .collect()
        };
        let mut n = 0;
        for (t, key) in due {
            self.check_writable()?;
            let mut w = shard.writer.lock();
            if self.purge_if_expired(shard, &mut w, &key, Some(t))? {
                n += 1;
            }
            self.finish_write(shard, w)?;
        }
        Ok(n)
    }
}

/// SplitMix64: a tiny seeded generator for [`Db::random_fields`].
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (n > 0), without modulo bias worth noticing.
    fn below(&mut self, n: usize) -> usize {
        ((self.next() as u128 * n as u128) >> 64) as usize
    }
}

pub(crate) fn tombstone(seq: u64, key: &[u8]) -> RecordRef<'_> {
    RecordRef {
        seq,
        expiry: 0,
        kind: Kind::Delete,
        flags: 0,
        tag: 0,
        key,
        field: &[],
        value: &[],
    }
}

pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("fsync directory", dir, e))
}

impl Db {
    /// Stores `value` under `key` with no expiry, replacing whatever the key
    /// held (a value or a whole map). Returns the write's sequence number,
    /// which is the key's new version.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<u64> {
        self.put_with_expiry(key, value, None)
    }

    /// Like [`Db::put`], with an expiry in ms since the Unix epoch. An expiry
    /// already in the past stores nothing and deletes the key, as Redis does,
    /// and returns 0: the version of a key that does not exist.
    pub fn put_with_expiry(
        &self,
        key: &[u8],
        value: &[u8],
        expires_at: Option<u64>,
    ) -> Result<u64> {
        let inner = &*self.inner;
        format::check_sizes(key, &[], value.len())?;
        inner.check_writable()?;
        if let Some(at) = expires_at {
            if at <= inner.now() {
                self.delete(key)?;
                return Ok(0);
            }
        }
        let mut scratch = Vec::new();
        let (flags, stored) = inner.encode_value(value, &mut scratch);
        let shard = inner.shard(key);
        let mut w = shard.writer.lock();
        let seq = inner.next_seq();
        let expiry = expires_at.unwrap_or(0);
        let loc = inner.append(
            shard,
            &mut w,
            RecordRef {
                seq,
                expiry,
                kind: Kind::Put,
                flags,
                tag: 0,
                key,
                field: &[],
                value: stored,
            },
        )?;
        let replaced_expired = {
            let mut idx = shard.index.write();
            idx.note_append(loc, Kind::Put);
            idx.set_value(key, loc, expiry, inner.now())
        };
        if replaced_expired {
            // What a purge before the write would have reported; the new
            // record shadows the old one, so no tombstone is needed.
            inner.note_expired(key);
        }
        inner.finish_write(shard, w)?;
        Ok(seq)
    }

    /// Removes a key and, if it holds a map, all of its fields, with one
    /// record. Returns whether the key existed (expired keys do not).
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        let inner = &*self.inner;
        inner.check_writable()?;
        let shard = inner.shard(key);
        let mut w = shard.writer.lock();
        if inner.purge_if_expired(shard, &mut w, key, None)? {
            inner.finish_write(shard, w)?;
            return Ok(false);
        }
        if shard.index.read().keys.get(key).is_none() {
            return Ok(false);
        }
        let seq = inner.next_seq();
        let loc = inner.append(shard, &mut w, tombstone(seq, key))?;
        {
            let mut idx = shard.index.write();
            idx.note_append(loc, Kind::Delete);
            idx.remove_key(key);
        }
        inner.finish_write(shard, w)?;
        Ok(true)
    }

    /// Whether the key exists (and has not expired).
    pub fn exists(&self, key: &[u8]) -> bool {
        self.meta(key).is_some()
    }

    /// The key's kind, version and expiry, from memory.
    /// How many maps of more than [`LARGE_MAP_FIELDS`] fields (collections,
    /// and values kept as segments, whose fields are 512-byte segments:
    /// over 512 KiB) this database holds, expired ones not yet purged
    /// included. A write that replaces such a map, or finds it expired,
    /// drops every field of it, in time linear in them: a caller that must
    /// not spend that on some thread checks this count first (one atomic
    /// load) and [`Db::large_map`] per key only when it is not zero.
    pub fn large_maps(&self) -> usize {
        self.inner.large_maps.load(Ordering::Acquire)
    }

    /// The map of more than [`LARGE_MAP_FIELDS`] fields at `key`, expired
    /// or not (a write drops an expired one as it would a live one): its
    /// field count and its expiry (ms since the epoch, 0 for none, perhaps
    /// past). `None` for any other key.
    pub fn large_map(&self, key: &[u8]) -> Option<LargeMap> {
        let idx = self.inner.shard(key).index.read();
        if !idx.large.contains(key) {
            return None;
        }
        let m = idx.maps.get(key)?;
        Some(LargeMap {
            fields: m.fields.len(),
            expiry: idx.expiry_of(key).unwrap_or(0),
        })
    }

    pub fn meta(&self, key: &[u8]) -> Option<KeyMeta> {
        let inner = &*self.inner;
        let shard = inner.shard(key);
        let idx = shard.index.read();
        let e = idx.keys.get(key)?;
        let expires_at = if e.has_ttl { idx.expiry_of(key) } else { None };
        if expires_at.is_some_and(|t| t <= inner.now()) {
            return None;
        }
        if e.loc.file == MAP_FILE {
            let m = idx.maps.get(key)?;
            if m.tag == SEGMENTED_TAG {
                // A segmented value is a value to every caller; its stored
                // size is about its segments' (not summed: O(1) here).
                let stored = m.fields.len() as u64 * crate::segmented::SEGMENT_LEN as u64;
                return Some(KeyMeta {
                    kind: KeyKind::Value {
                        stored_len: stored.min(u32::MAX as u64) as u32,
                    },
                    version: m.version,
                    expires_at,
                });
            }
            Some(KeyMeta {
                kind: KeyKind::Map {
                    tag: m.tag,
                    len: m.fields.len(),
                    run: m.fields.run_base(),
                },
                version: m.version,
                expires_at,
            })
        } else {
            Some(KeyMeta {
                kind: KeyKind::Value {
                    stored_len: e.loc.len,
                },
                version: e.loc.seq,
                expires_at,
            })
        }
    }

    /// Estimated bytes of memory the index holds for `key`: its keydir
    /// entry, the field table of a map, its expiry entry. Values and fields'
    /// contents live in the data files and are not counted. `None` if the
    /// key does not exist (or has expired).
    pub fn key_memory(&self, key: &[u8]) -> Option<usize> {
        let inner = &*self.inner;
        let idx = inner.shard(key).index.read();
        let e = idx.keys.get(key)?;
        if idx.is_expired(key, e.has_ttl, inner.now()) {
            return None;
        }
        Some(idx.key_bytes(key, e.loc.file == MAP_FILE, e.has_ttl))
    }

    /// The key's version: the sequence number of its last write, 0 if absent.
    pub fn version(&self, key: &[u8]) -> u64 {
        self.meta(key).map_or(0, |m| m.version)
    }

    /// Pauses the background expiry sweep for `ms` milliseconds from now
    /// (a pause already running longer keeps its end), or with `None`
    /// resumes it. Expired keys stay invisible to reads meanwhile; only
    /// their deletion records (and the expiry listener's calls) wait. What
    /// a server's CLIENT PAUSE needs.
    pub fn pause_expiry(&self, ms: Option<u64>) {
        let until = &self.inner.expiry_paused_until;
        match ms {
            None => until.store(0, Ordering::Relaxed),
            Some(ms) => {
                until.fetch_max(self.inner.now().saturating_add(ms), Ordering::Relaxed);
            }
        }
    }

    /// Whether the calling thread has a write batch of this database's
    /// group open ([`Db::batch`]): its writes are members of it.
    pub fn in_batch(&self) -> bool {
        crate::batch::in_batch(&self.inner)
    }

    /// The value of a key, or `None`. A key holding a map is an
    /// [`Error::WrongKind`].
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.get_versioned(key)?.map(|v| v.value))
    }

    /// The value with its version and expiry.
    pub fn get_versioned(&self, key: &[u8]) -> Result<Option<Versioned>> {
        // A segmented value replaced between the two looks (by a plain
        // value, a map, a delete) is looked up again, so a reader never
        // sees "absent" for a key that only changed form.
        let (file, loc, expires_at) = loop {
            match self.locate_value(key)? {
                None => return Ok(None),
                Some(Found::Record(r)) => break r,
                Some(Found::Segments { version }) => {
                    if let Some((value, expires_at)) = self.assemble(key)? {
                        return Ok(Some(Versioned {
                            value,
                            version,
                            expires_at,
                        }));
                    }
                }
            }
        };
        let value = self.read_value(key, &file, loc, |v| v.to_vec())?;
        Ok(Some(Versioned {
            value,
            version: loc.seq,
            expires_at,
        }))
    }

    /// Calls `f` with the key's value seen in place: no copy is made unless
    /// the value is compressed or its file is not mapped. `None` when the
    /// key does not exist. The fast path for a caller that only forwards
    /// the bytes (a server writing a reply).
    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        let (file, loc, _) = loop {
            match self.locate_value(key)? {
                None => return Ok(None),
                Some(Found::Record(r)) => break r,
                // Assembled into one buffer: a segmented value is not one
                // record to read in place. Looked up again if it changed
                // form meanwhile (as in `get_versioned`).
                Some(Found::Segments { .. }) => {
                    if let Some((v, _)) = self.assemble(key)? {
                        return Ok(Some(f(&v)));
                    }
                }
            }
        };
        self.read_value(key, &file, loc, f).map(Some)
    }

    /// Hints that `keys` are about to be read (a pipelined batch of GETs):
    /// starts loading the memory their lookups will touch in three passes
    /// (index slot, index entry, the record in its mapped file), so the
    /// cache misses of the different keys overlap instead of following one
    /// another. Looks at no more than 32 keys; changes nothing.
    ///
    /// The index of every shard the keys live in is read-locked once for
    /// all passes, before any, with `try_read` (a locked instruction per
    /// key would order the loads and undo the overlap); if one of them is
    /// being written, it gives up.
    pub fn prefetch<K: AsRef<[u8]>>(&self, keys: &[K]) {
        self.prefetch_passes(keys, true)
    }

    /// [`Db::prefetch`] of the index alone (its slot and entry for each
    /// key), for keys about to be written: a write replaces the record, so
    /// loading the old one would only spend memory bandwidth. A batch of
    /// writes applied one after another (a replicated log entry) then
    /// overlaps the index's cache misses across keys.
    pub fn prefetch_index<K: AsRef<[u8]>>(&self, keys: &[K]) {
        self.prefetch_passes(keys, false)
    }

    fn prefetch_passes<K: AsRef<[u8]>>(&self, keys: &[K], records: bool) {
        let inner = &*self.inner;
        let keys = &keys[..keys.len().min(32)];
        let n = inner.shards.len();
        // Only the shards the keys live in: each read lock taken is a
        // locked instruction on a line every worker's reads share, so a
        // pipeline of GETs of one hot key takes one, not one per shard.
        let mut guards: Vec<Option<_>> = Vec::new();
        guards.resize_with(n, || None);
        let mut at = [(0usize, 0u64); 32];
        // All locks first: a locked instruction between two prefetches
        // would order them.
        for (k, slot) in keys.iter().zip(at.iter_mut()) {
            let s = shard_of(k.as_ref(), n);
            if guards[s].is_none() {
                match inner.shards[s].index.try_read() {
                    Some(g) => guards[s] = Some(g),
                    None => return,
                }
            }
            slot.0 = s;
        }
        let guard = |s: usize| guards[s].as_ref().expect("locked above");
        for (k, slot) in keys.iter().zip(at.iter_mut()) {
            let idx = guard(slot.0);
            slot.1 = idx.keys.hash_key(k.as_ref());
            idx.keys.prefetch(slot.1);
        }
        for &(s, h) in &at[..keys.len()] {
            guard(s).keys.prefetch_entry(h);
        }
        if !records {
            return;
        }
        for (k, &(s, _)) in keys.iter().zip(at.iter()) {
            let idx = guard(s);
            if let Some(e) = idx.keys.get(k.as_ref()) {
                if e.loc.file != MAP_FILE {
                    if let Some(map) = idx
                        .files
                        .get(&e.loc.file)
                        .and_then(|f| f.handle.map.as_ref())
                    {
                        // The record's head: a large value's later lines
                        // stream in behind the copy that reads them, and
                        // 32 of them would not fit in the cache anyway.
                        map.prefetch(e.loc.offset as u64, (e.loc.len as usize).min(PREFETCH_HEAD));
                    }
                }
            }
        }
    }

    /// Where the value of `key` is: its file, location and expiry.
    pub(crate) fn locate_value(&self, key: &[u8]) -> Result<Option<Found>> {
        Ok(match self.locate_value_or_copy(key, None)? {
            ValueAt::At(found) => Some(found),
            ValueAt::Absent | ValueAt::Copied => None,
        })
    }

    /// [`Db::locate_value`] that, given `small`, copies a value of a
    /// record of at most [`COPY_UNDER_LOCK`] bytes that is to be read in
    /// place under the residency mode given (always under `InPlace`, when
    /// its pages look resident under `Check`) into it while the index is
    /// still read-locked, and answers [`ValueAt::Copied`] (never without
    /// `small`). No file handle is cloned then: an `Arc`'s count
    /// taken and dropped per read is a locked instruction on a line every
    /// worker's reads of that file share (measured: a fifth of a hot key's
    /// GET). Only a copy of at most 4 KiB holds the lock: not a compressed
    /// value (decompressed after the unlock), not a file without a map
    /// (read with `pread`), not a record residency says is not in memory
    /// (under `Check` the sampled look may miss a page that just left,
    /// a fault under the lock then, as it would have been one on the
    /// worker), and callers' closures run after it is released.
    pub(crate) fn locate_value_or_copy(
        &self,
        key: &[u8],
        small: Option<(&mut Vec<u8>, crate::cold::Residency)>,
    ) -> Result<ValueAt> {
        let inner = &*self.inner;
        let shard = inner.shard(key);
        let idx = shard.index.read();
        let Some(e) = idx.keys.get(key) else {
            return Ok(ValueAt::Absent);
        };
        let expires_at = if e.has_ttl { idx.expiry_of(key) } else { None };
        if expires_at.is_some_and(|t| t <= inner.now()) {
            return Ok(ValueAt::Absent);
        }
        if e.loc.file == MAP_FILE {
            return match idx.maps.get(key) {
                Some(m) if m.tag == SEGMENTED_TAG => {
                    Ok(ValueAt::At(Found::Segments { version: m.version }))
                }
                _ => Err(Error::WrongKind {
                    expected: "value",
                    found: "map",
                }),
            };
        }
        let f = idx
            .files
            .get(&e.loc.file)
            .expect("index points at a missing file");
        // Small, mapped (no `pread` under the lock), and to be read in
        // place: resident, or not checked.
        let copy = small.filter(|(_, mode)| {
            e.loc.len <= COPY_UNDER_LOCK
                && f.handle.map_ref().is_some()
                && match mode {
                    crate::cold::Residency::InPlace => true,
                    crate::cold::Residency::Check => crate::cold::record_resident(&f.handle, e.loc),
                    crate::cold::Residency::AllCold => false,
                }
        });
        if let Some((out, _)) = copy {
            // SAFETY: `e.loc` is this shard's index entry for `key`, in
            // `f`, read under the lock still held.
            let copied = unsafe {
                inner.read_with_checked(shard, &f.handle, e.loc, false, true, |rec| {
                    if rec.key() != key {
                        return Err("record holds another key than the index says");
                    }
                    // A compressed value (small stored, maybe large whole)
                    // is decompressed after the unlock.
                    if rec.header.flags & crate::format::FLAG_LZ4 != 0 {
                        return Ok(false);
                    }
                    out.extend_from_slice(&rec.value_ref()?);
                    Ok(true)
                })
            }?;
            if copied {
                return Ok(ValueAt::Copied);
            }
        }
        Ok(ValueAt::At(Found::Record((
            f.handle.clone(),
            e.loc,
            expires_at,
        ))))
    }

    /// Reads the value record of `key` at `loc` and hands its value to `f`.
    pub(crate) fn read_value<R>(
        &self,
        key: &[u8],
        file: &DataFile,
        loc: Loc,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let check =
            self.inner.residency.load(Ordering::Relaxed) != crate::cold::Residency::InPlace as u8;
        self.read_value_checked(key, file, loc, check, f)
    }

    /// [`Db::read_value`] with the residency check on or off
    /// ([`Inner::read_with_checked`]).
    pub(crate) fn read_value_checked<R>(
        &self,
        key: &[u8],
        file: &DataFile,
        loc: Loc,
        check: bool,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let inner = &*self.inner;
        let shard = inner.shard(key);
        // SAFETY: `loc` and `file` were read from this shard's index
        // (`locate_value`).
        unsafe {
            inner.read_with_checked(shard, file, loc, check, true, |rec| {
                if rec.key() != key {
                    return Err("record holds another key than the index says");
                }
                Ok(f(&rec.value_ref()?))
            })
        }
    }

    /// The expiry of a key in ms since the epoch; `None` if the key has none
    /// or does not exist.
    pub fn expires_at(&self, key: &[u8]) -> Option<u64> {
        self.meta(key).and_then(|m| m.expires_at)
    }

    /// Sets the key's expiry (ms since the epoch). A time not in the future
    /// deletes the key. Returns whether the key exists(ed).
    pub fn expire(&self, key: &[u8], at: u64) -> Result<bool> {
        self.set_expiry(key, at)
    }

    /// Removes the key's expiry. Returns whether it had one.
    pub fn persist(&self, key: &[u8]) -> Result<bool> {
        if self.expires_at(key).is_none() {
            return Ok(false);
        }
        self.set_expiry(key, 0)
    }

    fn set_expiry(&self, key: &[u8], at: u64) -> Result<bool> {
        let inner = &*self.inner;
        inner.check_writable()?;
        if at != 0 && at <= inner.now() {
            return self.delete(key);
        }
        let shard = inner.shard(key);
        let mut w = shard.writer.lock();
        if inner.purge_if_expired(shard, &mut w, key, None)? {
            inner.finish_write(shard, w)?;
            return Ok(false);
        }
        let (entry, file, tag) = {
            let idx = shard.index.read();
            let Some(e) = idx.keys.get(key) else {
                return Ok(false);
            };
            if e.loc.file == MAP_FILE {
                (e, None, idx.maps.get(key).map_or(0, |m| m.tag))
            } else {
                (e, Some(idx.files[&e.loc.file].handle.clone()), 0)
            }
        };
        let seq = inner.next_seq();
        match file {
            // A value: rewrite it with the new expiry, so every value record
            // is self-contained and recovery needs no cross-record joins.
            Some(file) => {
                // SAFETY: `entry.loc` and `file` were read from this shard's
                // index above.
                let (flags, stored) = unsafe {
                    inner.read_with(shard, &file, entry.loc, |rec| {
                        Ok((rec.header.flags & FLAG_LZ4, rec.stored_value().to_vec()))
                    })
                }?;
                let loc = inner.append(
                    shard,
                    &mut w,
                    RecordRef {
                        seq,
                        expiry: at,
                        kind: Kind::Put,
                        flags,
                        tag: 0,
                        key,
                        field: &[],
                        value: &stored,
                    },
                )?;
                let mut idx = shard.index.write();
                idx.note_append(loc, Kind::Put);
                // Purged above if it had expired.
                idx.set_value(key, loc, at, 0);
            }
            None => {
                let loc = inner.append(
                    shard,
                    &mut w,
                    RecordRef {
                        seq,
                        expiry: at,
                        kind: Kind::MapMeta,
                        flags: 0,
                        tag,
                        key,
                        field: &[],
                        value: &[],
                    },
                )?;
                let mut idx = shard.index.write();
                idx.note_append(loc, Kind::MapMeta);
                let old = {
                    let m = idx.maps.get_mut(key).expect("map key without a map");
                    m.version = seq;
                    m.expiry = at;
                    m.meta.replace(loc)
                };
                if let Some(old) = old {
                    idx.sub_live(old);
                }
                idx.add_live(loc);
                idx.keys.set_ttl_flag(key, at != 0);
                idx.set_expiry(key, at);
            }
        }
        inner.finish_write(shard, w)?;
        Ok(true)
    }

    /// Sets one field of the map at `key`, creating the map (tag 0) if the key
    /// does not exist. Returns the write's sequence number.
    pub fn put_field(&self, key: &[u8], field: &[u8], value: &[u8]) -> Result<u64> {
        self.put_field_tagged(key, 0, field, value)
            .map(|(seq, _)| seq)
    }

    /// Like [`Db::put_field`]; `tag` is recorded when this write creates the
    /// map (a caller's type marker, e.g. hash vs set) and ignored otherwise.
    /// Returns the sequence number and whether the field is new.
    pub fn put_field_tagged(
        &self,
        key: &[u8],
        tag: u8,
        field: &[u8],
        value: &[u8],
    ) -> Result<(u64, bool)> {
        let inner = &*self.inner;
        format::check_sizes(key, field, value.len())?;
        inner.check_writable()?;
        let mut scratch = Vec::new();
        let (flags, stored) = inner.encode_value(value, &mut scratch);
        let shard = inner.shard(key);
        let mut w = shard.writer.lock();
        inner.purge_if_expired(shard, &mut w, key, None)?;
        // Whether the field is new comes from the insert below (one lookup
        // of the field, not two): the writer lock held from here on means
        // nothing else changes the map's fields meanwhile.
        let tag = {
            let idx = shard.index.read();
            let value = Err(Error::WrongKind {
                expected: "map",
                found: "value",
            });
            match idx.keys.get(key) {
                Some(e) if e.loc.file != MAP_FILE => return value,
                // A segmented value is a value (`segmented.rs`).
                Some(_) if idx.maps[key].tag == SEGMENTED_TAG => return value,
                Some(_) => idx.maps[key].tag,
                None if tag == SEGMENTED_TAG => {
                    return Err(Error::WrongKind {
                        expected: "a map tag other than 255",
                        found: "the segmented-value tag",
                    })
                }
                None => tag,
            }
        };
        let seq = inner.next_seq();
        let loc = inner.append(
            shard,
            &mut w,
            RecordRef {
                seq,
                expiry: 0,
                kind: Kind::Field,
                flags,
                tag,
                key,
                field,
                value: stored,
            },
        )?;
        let created = {
            let mut idx = shard.index.write();
            idx.note_append(loc, Kind::Field);
            if idx.keys.get(key).is_none() {
                idx.keys.insert(
                    key,
                    Loc {
                        file: MAP_FILE,
                        offset: 0,
                        len: 0,
                        seq,
                    },
                    false,
                );
                idx.maps.insert(
                    key.into(),
                    MapEntry {
                        tag,
                        ..MapEntry::default()
                    },
                );
            }
            let m = idx.maps.get_mut(key).expect("map key without a map");
            m.version = seq;
            let old = m.fields.insert(field, loc);
            let len = m.fields.len();
            match old {
                Some(old) => idx.sub_live(old),
                None => idx.large.grew(key, len),
            }
            idx.add_live(loc);
            old.is_none()
        };
        inner.finish_write(shard, w)?;
        Ok((seq, created))
    }

    /// One field of the map at `key`.
    pub fn get_field(&self, key: &[u8], field: &[u8]) -> Result<Option<Vec<u8>>> {
        let inner = &*self.inner;
        let shard = inner.shard(key);
        let Some((file, loc)) = self.locate_field(key, field)? else {
            return Ok(None);
        };
        // SAFETY: `loc` and `file` were read from this shard's index.
        unsafe { inner.read_with(shard, &file, loc, |rec| rec.value()) }.map(Some)
    }

    /// Where field `field` of the map at `key` is: its file and location.
    pub(crate) fn locate_field(
        &self,
        key: &[u8],
        field: &[u8],
    ) -> Result<Option<(Arc<DataFile>, Loc)>> {
        let inner = &*self.inner;
        let shard = inner.shard(key);
        let idx = shard.index.read();
        let Some(m) = Self::live_map(inner, &idx, key)? else {
            return Ok(None);
        };
        let Some(loc) = m.fields.get(field) else {
            return Ok(None);
        };
        Ok(Some((idx.files[&loc.file].handle.clone(), loc)))
    }

    /// Reads several fields of the map at `key` in one pass: one lookup of
    /// the key and one clock read for all of them. `f(i, value)` is called
    /// for each `fields[i]` that exists, in order, with the value seen in
    /// place (no copy unless compressed). Returns how many fields were
    /// found, or `None` when the key does not exist; a key holding a value
    /// is an [`Error::WrongKind`].
    pub fn fields_with<F: AsRef<[u8]>>(
        &self,
        key: &[u8],
        fields: &[F],
        mut f: impl FnMut(usize, &[u8]),
    ) -> Result<Option<usize>> {
        let inner = &*self.inner;
        let shard = inner.shard(key);
        // Locations first, under the index lock; the reads happen without
        // it. Each distinct file is held once (fields written together
        // mostly share one).
        let mut files: Vec<(u32, Arc<DataFile>)> = Vec::new();
        let mut found: Vec<(usize, usize, Loc)> = Vec::with_capacity(fields.len());
        {
            let idx = shard.index.read();
            let Some(m) = Self::live_map(inner, &idx, key)? else {
                return Ok(None);
            };
            for (i, field) in fields.iter().enumerate() {
                let Some(loc) = m.fields.get(field.as_ref()) else {
                    continue;
                };
                let fi = match files.iter().position(|(id, _)| *id == loc.file) {
                    Some(fi) => fi,
                    None => {
                        files.push((loc.file, idx.files[&loc.file].handle.clone()));
                        files.len() - 1
                    }
                };
                found.push((i, fi, loc));
            }
        }
        // Mapped records are checked three at a time (`crc32c_3`: three
        // checksum chains keep the CRC unit busy); one that is not mapped,
        // or fails, goes through `read_with`, which reports the damage.
        let read_one = |i: usize, fi: usize, loc: Loc, f: &mut dyn FnMut(usize, &[u8])| {
            // SAFETY: `loc` and the file were read from this shard's index.
            unsafe {
                inner.read_with(shard, &files[fi].1, loc, |rec| {
                    f(i, &rec.value_ref()?);
                    Ok(())
                })
            }
        };
        // Under a residency check, a group whose records are not all in
        // memory goes through `read_one` too (a read past the page cache,
        // never a page fault per page in place), and so does every group
        // while records fetched ahead are staged (`cold::stage_record`).
        let check =
            inner.residency.load(Ordering::Relaxed) != crate::cold::Residency::InPlace as u8;
        let mut rest = &found[..];
        while let [a, b, c, tail @ ..] = rest {
            let group = [*a, *b, *c];
            let in_memory = !crate::cold::any_staged()
                && (!check
                    || group
                        .iter()
                        .all(|&(_, fi, loc)| crate::cold::record_resident(&files[fi].1, loc)));
            let bytes = group.map(|(_, fi, loc)| {
                if in_memory {
                    // SAFETY: as in `read_one`.
                    unsafe { files[fi].1.mapped(loc) }
                } else {
                    None
                }
            });
            if let [Some(x), Some(y), Some(z)] = bytes {
                let part = Record::checked_part;
                let crcs = format::crc32c_3(part(x), part(y), part(z));
                for (j, rec) in [x, y, z].into_iter().enumerate() {
                    let (i, fi, loc) = group[j];
                    match Record::from_bytes_with_crc(rec, crcs[j]).and_then(|r| r.value_ref()) {
                        Ok(v) => f(i, &v),
                        Err(_) => read_one(i, fi, loc, &mut f)?,
                    }
                }
            } else {
                for (i, fi, loc) in group {
                    read_one(i, fi, loc, &mut f)?;
                }
            }
            rest = tail;
        }
        for &(i, fi, loc) in rest {
            read_one(i, fi, loc, &mut f)?;
        }
        Ok(Some(found.len()))
    }

    pub(crate) fn live_map<'a>(
        inner: &Inner,
        idx: &'a Index,
        key: &[u8],
    ) -> Result<Option<&'a MapEntry>> {
        let Some(e) = idx.keys.get(key) else {
            return Ok(None);
        };
        if idx.is_expired(key, e.has_ttl, inner.now()) {
            return Ok(None);
        }
        let m = idx.maps.get(key);
        if e.loc.file != MAP_FILE || m.is_some_and(|m| m.tag == SEGMENTED_TAG) {
            return Err(Error::WrongKind {
                expected: "map",
                found: "value",
            });
        }
        Ok(m)
    }

    /// Removes one field. Removing the last field removes the key, with one
    /// key-level record. Returns whether the field existed.
    pub fn delete_field(&self, key: &[u8], field: &[u8]) -> Result<bool> {
        Ok(self.remove_field(key, field, false)?.is_some())
    }

    /// Removes one field and returns its value (`None` if it did not
    /// exist): [`Db::get_field`] and [`Db::delete_field`] in one step, with
    /// one lookup of the field instead of three. What a queue's pop wants.
    pub fn take_field(&self, key: &[u8], field: &[u8]) -> Result<Option<Vec<u8>>> {
        self.remove_field(key, field, true)
    }

    /// Removes `field` of the map at `key`, reading its value first when
    /// `read` (else the returned value is empty). `None` if it did not exist.
    fn remove_field(&self, key: &[u8], field: &[u8], read: bool) -> Result<Option<Vec<u8>>> {
        let inner = &*self.inner;
        inner.check_writable()?;
        let shard = inner.shard(key);
        let mut w = shard.writer.lock();
        if inner.purge_if_expired(shard, &mut w, key, None)? {
            inner.finish_write(shard, w)?;
            return Ok(None);
        }
        // Only writers change a map's set of fields, and we hold the
        // writer lock: the field's position found here stays valid until
        // the removal below (compaction only rewrites locations).
        let (pos, loc, last, file) = {
            let idx = shard.index.read();
            let Some(m) = Self::live_map(inner, &idx, key)? else {
                return Ok(None);
            };
            let Some((pos, loc)) = m.fields.get_full(field) else {
                return Ok(None);
            };
            let file = read.then(|| idx.files[&loc.file].handle.clone());
            (pos, loc, m.fields.len() == 1, file)
        };
        let value = match file {
            // SAFETY: `loc` and `file` were read from this shard's index
            // above, and the writer lock held since keeps them current.
            Some(file) => unsafe { inner.read_with(shard, &file, loc, |rec| rec.value()) }?,
            None => Vec::new(),
        };
        let seq = inner.next_seq();
        if last {
            let loc = inner.append(shard, &mut w, tombstone(seq, key))?;
            let mut idx = shard.index.write();
            idx.note_append(loc, Kind::Delete);
            idx.remove_key(key);
        } else {
            let loc = inner.append(
                shard,
                &mut w,
                RecordRef {
                    seq,
                    expiry: 0,
                    kind: Kind::DeleteField,
                    flags: 0,
                    tag: 0,
                    key,
                    field,
                    value: &[],
                },
            )?;
            let mut idx = shard.index.write();
            idx.note_append(loc, Kind::DeleteField);
            let m = idx.maps.get_mut(key).expect("map key without a map");
            m.version = seq;
            debug_assert_eq!(m.fields.name_at(pos).as_deref(), Some(field));
            if let Some(old) = m.fields.swap_remove_index(pos) {
                let len = m.fields.len();
                idx.large.shrank(key, len);
                idx.sub_live(old);
            }
        }
        inner.finish_write(shard, w)?;
        Ok(Some(value))
    }

    /// The field names of the map at `key`, from memory (no order promised).
    pub fn field_names(&self, key: &[u8]) -> Result<Vec<Vec<u8>>> {
        let inner = &*self.inner;
        let idx = inner.shard(key).index.read();
        Ok(Self::live_map(inner, &idx, key)?
            .map(|m| m.fields.iter().map(|(f, _)| f.to_vec()).collect())
            .unwrap_or_default())
    }

    /// Whether the map at `key` has `field`, from memory (no disk read).
    pub fn contains_field(&self, key: &[u8], field: &[u8]) -> Result<bool> {
        let inner = &*self.inner;
        let idx = inner.shard(key).index.read();
        Ok(Self::live_map(inner, &idx, key)?.is_some_and(|m| m.fields.contains_key(field)))
    }

    /// Field names of the map at `key` picked at random, from memory (no
    /// disk read), in O(`count`) whatever the map's size.
    ///
    /// With `distinct`, up to `count` different fields (every field, in no
    /// promised order, if `count` is at least the map's length); without it,
    /// exactly `count` independent picks, which may repeat. Empty if the key
    /// does not exist. `seed` drives the choice, so the same seed on the same
    /// map gives the same answer.
    pub fn random_fields(
        &self,
        key: &[u8],
        count: usize,
        distinct: bool,
        seed: u64,
    ) -> Result<Vec<Vec<u8>>> {
        let inner = &*self.inner;
        let idx = inner.shard(key).index.read();
        let Some(m) = Self::live_map(inner, &idx, key)? else {
            return Ok(Vec::new());
        };
        let n = m.fields.len();
        if n == 0 || count == 0 {
            return Ok(Vec::new());
        }
        let name = |i: usize| m.fields.name_at(i).expect("index below len").to_vec();
        let mut rng = SplitMix(seed);
        if !distinct {
            return Ok((0..count).map(|_| name(rng.below(n))).collect());
        }
        if count >= n {
            return Ok((0..n).map(name).collect());
        }
        // Floyd's sampling: `count` distinct indexes with `count` draws.
        let mut picked: hashbrown::HashSet<usize> = hashbrown::HashSet::with_capacity(count);
        let mut order = Vec::with_capacity(count);
        for j in n - count..n {
            let t = rng.below(j + 1);
            let i = if picked.insert(t) { t } else { j };
            if i == j {
                picked.insert(j);
            }
            order.push(i);
        }
        Ok(order.into_iter().map(name).collect())
    }

    /// Every (field, value) of the map at `key` (no order promised).
    pub fn fields(&self, key: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let inner = &*self.inner;
        let shard = inner.shard(key);
        let locs: Vec<(Arc<DataFile>, Loc)> = {
            let idx = shard.index.read();
            match Self::live_map(inner, &idx, key)? {
                None => return Ok(Vec::new()),
                Some(m) => m
                    .fields
                    .values()
                    .map(|l| (idx.files[&l.file].handle.clone(), l))
                    .collect(),
            }
        };
        let mut out = Vec::with_capacity(locs.len());
        for (file, loc) in locs {
            // SAFETY: `loc` and `file` were read from this shard's index above.
            let fv = unsafe {
                inner.read_with(shard, &file, loc, |rec| {
                    Ok((rec.field().to_vec(), rec.value()?))
                })
            }?;
            out.push(fv);
        }
        Ok(out)
    }

    /// A resumable scan over keys: call with cursor 0, then with each cursor
    /// returned, until it returns 0. Every key that exists for the whole scan
    /// is returned at least once; no order is promised. `count` is a hint of
    /// how many keys to look at per call.
    pub fn scan(&self, cursor: u64, count: usize) -> (Vec<Vec<u8>>, u64) {
        let inner = &*self.inner;
        let now = inner.now();
        let mut shard_no = (cursor >> 48) as usize;
        let mut pos = cursor & ((1 << 48) - 1);
        let mut out = Vec::new();
        let count = count.max(1);
        while shard_no < inner.shards.len() {
            let idx = inner.shards[shard_no].index.read();
            let next = idx
                .keys
                .scan(pos, count.saturating_sub(out.len()).max(1), |k, e| {
                    if !idx.is_expired(k, e.has_ttl, now) {
                        out.push(k.to_vec());
                    }
                    true
                });
            drop(idx);
            if next != 0 {
                return (out, ((shard_no as u64) << 48) | next);
            }
            shard_no += 1;
            pos = 0;
            if out.len() >= count {
                if shard_no < inner.shards.len() {
                    return (out, (shard_no as u64) << 48);
                }
                break;
            }
        }
        (out, 0)
    }

    /// Number of keys (including expired keys not yet swept).
    pub fn len(&self) -> u64 {
        self.inner
            .shards
            .iter()
            .map(|s| s.index.read().keys.len() as u64)
            .sum()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// fsyncs every shard's active file.
    pub fn sync(&self) -> Result<()> {
        self.inner.check_writable()?;
        for s in &self.inner.shards {
            self.inner.sync_shard(s)?;
        }
        Ok(())
    }

    /// Writes the hint files of sealed files that do not have one yet and
    /// reports a poisoned engine. (Writes are handed to the OS before they
    /// are acknowledged, so there is no write buffer to flush.)
    pub fn flush(&self) -> Result<()> {
        self.inner.check_writable()?;
        for s in &self.inner.shards {
            crate::compaction::write_pending_hints(&self.inner, s, None)?;
        }
        Ok(())
    }

    /// Up to `limit` keys whose expiry is at or before `now`, earliest
    /// first, without removing them. With the sweep off
    /// ([`Options::active_expiry`]), an embedder that decides expiry itself
    /// (a replicated leader) finds them here and removes each with
    /// [`Db::purge_expired`].
    pub fn expired_keys(&self, now: u64, limit: usize) -> Vec<Vec<u8>> {
        let mut due: Vec<(u64, Vec<u8>)> = Vec::new();
        for s in &self.inner.shards {
            let idx = s.index.read();
            due.extend(
                idx.queue
                    .iter()
                    .take_while(|(t, _)| *t <= now)
                    .take(limit)
                    .map(|(t, k)| (*t, k.to_vec())),
            );
        }
        due.sort();
        due.truncate(limit);
        due.into_iter().map(|(_, k)| k).collect()
    }

    /// Removes `key` if its expiry has passed (at the clock's time), as the
    /// sweep does: a deletion record and the expiry listener's call.
    /// Returns whether it did.
    pub fn purge_expired(&self, key: &[u8]) -> Result<bool> {
        let inner = &*self.inner;
        inner.check_writable()?;
        let shard = inner.shard(key);
        let mut w = shard.writer.lock();
        let purged = inner.purge_if_expired(shard, &mut w, key, None)?;
        inner.finish_write(shard, w)?;
        Ok(purged)
    }

    /// Removes keys whose expiry has passed, writing a deletion for each, as
    /// the background sweep does. Returns how many it removed.
    pub fn sweep_expired(&self) -> Result<usize> {
        let mut n = 0;
        for s in &self.inner.shards {
            n += self.inner.sweep_shard(s, usize::MAX)?;
        }
        Ok(n)
    }

    /// A snapshot of the engine's figures.
    pub fn stats(&self) -> Stats {
        let inner = &*self.inner;
        let mut st = Stats {
            compactions: inner.counters.compactions.load(Ordering::Relaxed),
            compaction_bytes_read: inner.counters.compaction_read.load(Ordering::Relaxed),
            compaction_bytes_written: inner.counters.compaction_written.load(Ordering::Relaxed),
            expired_keys: inner.counters.expired.load(Ordering::Relaxed),
            next_seq: inner.seq.load(Ordering::SeqCst),
            write_stalled: inner.stalled.load(Ordering::Relaxed),
            write_stalls: inner.stalls.load(Ordering::Relaxed),
            ..Stats::default()
        };
        for s in &inner.shards {
            let idx = s.index.read();
            st.keys += idx.keys.len() as u64;
            st.maps += idx.maps.len() as u64;
            st.fields += idx
                .maps
                .values()
                .map(|m| m.fields.len() as u64)
                .sum::<u64>();
            st.keys_with_expiry += idx.expires.len() as u64;
            st.index_bytes += idx.memory_bytes() as u64;
            for (&id, f) in &idx.files {
                let fs = FileStats {
                    shard: s.id,
                    id,
                    active: f.active,
                    compacted: f.origin == Origin::Compaction,
                    total_bytes: f.total,
                    live_bytes: f.live,
                    tombstone_bytes: f.tombstones,
                };
                st.live_bytes += fs.live_bytes;
                st.dead_bytes += fs.total_bytes.saturating_sub(fs.live_bytes);
                st.files.push(fs);
            }
        }
        st
    }

    /// The tokens of the conditional commits (batches over several
    /// databases, see [`crate::BatchGroup`]) that counted when this
    /// database opened: a [`crate::CommitLog`] must keep at least these
    /// (and any recorded since); an embedder may forget the others.
    pub fn commit_tokens(&self) -> &[u64] {
        &self.inner.tokens
    }

    /// Why the engine refuses writes (the first write or fsync failure), or
    /// `None` while it accepts them. One atomic load when all is well.
    pub fn write_error(&self) -> Option<String> {
        let inner = &*self.inner;
        if !inner.poisoned.load(Ordering::Acquire) {
            return None;
        }
        Some(inner.poison_reason.lock().clone().unwrap_or_default())
    }

    /// Accepts writes again after a failed write, once the cause is gone
    /// (typically a full disk that has space again). Returns `Ok(false)` if
    /// writes were not refused, `Ok(true)` once they are accepted again.
    ///
    /// Safe only because a failed write never took effect: every shard's
    /// active file is cut back to the end of its last good record (dropping
    /// a partly written record and any reserved space) and fsynced, and a
    /// data file whose creation failed half-way is removed, before the
    /// engine accepts a write. Refused (the engine stays read-only, and a
    /// restart is the way back) when the first failure was an fsync (the
    /// kernel may have dropped pages the engine believed written), damage,
    /// or a write batch that wrote members but could not commit them
    /// (memory shows them, the disk will not after a restart). A failure
    /// while resuming leaves the engine refusing writes.
    pub fn resume_writes(&self) -> Result<bool> {
        let inner = &*self.inner;
        if !inner.poisoned.load(Ordering::Acquire) {
            return Ok(false);
        }
        let why = inner.poison_reason.lock().clone().unwrap_or_default();
        let site = inner.poison_site.lock().clone();
        let Some((_, path)) = site.filter(|_| !inner.batch_lost.load(Ordering::Acquire)) else {
            return Err(Error::Poisoned(format!(
                "{why} (not resumable: reopen the database)"
            )));
        };
        for shard in &inner.shards {
            let mut w = shard.writer.lock();
            // A file created for a rotation whose header failed is not
            // part of the database: the writer still appends to its file.
            // (A compaction output, `.data.tmp`, stays: the index may point
            // into it, and the next open deletes it with its inputs intact.)
            if path.parent() == Some(shard.dir.as_path())
                && path.extension().is_some_and(|e| e == "data")
                && path != shard.data_path(w.file_id)
                && !shard
                    .index
                    .read()
                    .files
                    .keys()
                    .any(|&id| shard.data_path(id) == path)
            {
                match std::fs::remove_file(&path) {
                    Ok(()) => sync_dir(&shard.dir)?,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io("remove", &path, e)),
                }
            }
            let on_disk = w
                .file
                .len()
                .map_err(|e| Error::io("stat", shard.data_path(w.file_id), e))?;
            w.reserved = w.reserved.max(on_disk);
            inner.cut_reserved_tail(shard, &mut w)?;
            if let Err(e) = w.file.sync_data() {
                return Err(inner.poison(Error::io("fsync", shard.data_path(w.file_id), e)));
            }
        }
        *inner.poison_reason.lock() = None;
        *inner.poison_site.lock() = None;
        inner.poisoned.store(false, Ordering::Release);
        tracing::info!(dir = %inner.dir.display(), after = %why, "writes resumed");
        Ok(true)
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options::default()
            .shards(1)
            .max_file_size(8 << 10)
            .background_compaction(false)
            .active_expiry(false)
            .sync(SyncPolicy::Never)
    }

    /// The location and file of `key`, as a reader copies them out of the
    /// index before reading.
    fn lookup(db: &Db, key: &[u8]) -> (Arc<DataFile>, Loc) {
        let shard = db.inner.shard(key);
        let idx = shard.index.read();
        let loc = idx.keys.get(key).unwrap().loc;
        (idx.files[&loc.file].handle.clone(), loc)
    }

    #[test]
    fn every_file_of_the_real_file_system_is_mapped() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts()).unwrap();
        for i in 0..300u32 {
            db.put(&i.to_le_bytes(), &[i as u8; 100]).unwrap();
        }
        db.compact().unwrap();
        db.put(b"x", b"y").unwrap();
        db.close().unwrap();
        let db = Db::open(dir.path(), opts()).unwrap();
        db.put(b"z", b"w").unwrap();
        let idx = db.inner.shards[0].index.read();
        assert!(idx.files.len() > 2);
        for (id, f) in &idx.files {
            assert!(f.handle.is_mapped(), "file {id} is not mapped");
        }
    }

    #[test]
    fn the_real_file_system_appends_through_the_map_and_reads_the_stores() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts().max_file_size(1 << 20)).unwrap();
        for i in 0..20_000u32 {
            db.put(&i.to_le_bytes(), &[i as u8; 100]).unwrap();
            if i % 997 == 0 {
                assert_eq!(db.get(&i.to_le_bytes()).unwrap(), Some(vec![i as u8; 100]));
            }
        }
        let shard = &db.inner.shards[0];
        let w = shard.writer.lock();
        assert!(w.appends_through_map());
        // Reserved up to the map's end (the file size here), not beyond.
        assert_eq!(w.map.as_ref().unwrap().allocated, 1 << 20);
        assert_eq!(w.file.len().unwrap(), 1 << 20);
        drop(w);
        for i in 0..20_000u32 {
            assert_eq!(db.get(&i.to_le_bytes()).unwrap(), Some(vec![i as u8; 100]));
        }
    }

    /// Whether `madvise(MADV_POPULATE_WRITE)` works here, asked of a
    /// scratch anonymous page.
    fn populate_write_works() -> bool {
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        // SAFETY: a fresh private anonymous page, advised, then unmapped;
        // nothing else refers to it.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return false;
            }
            let ok = libc::madvise(p, 4096, MADV_POPULATE_WRITE) == 0;
            libc::munmap(p, 4096);
            ok
        }
    }

    #[test]
    fn appending_faults_in_the_space_ahead_of_the_stores_on_the_prefault_thread() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts().max_file_size(8 << 20)).unwrap();
        for i in 0..1000u32 {
            db.put(&i.to_le_bytes(), &[i as u8; 100]).unwrap();
        }
        let shard = &db.inner.shards[0];
        let (map, end) = {
            let w = shard.writer.lock();
            let m = w.map.as_ref().expect("appends through the map");
            (m.data.clone(), w.len)
        };
        // Past the step the writer faults in itself, up to where the
        // prefault thread was asked to go.
        let from = end.next_multiple_of(PREFAULT_STEP);
        let len = (end + PREFAULT_AHEAD - from) as usize;
        let map = map.map.as_ref().expect("mapped");
        if !populate_write_works() {
            eprintln!("skipped: this kernel has no MADV_POPULATE_WRITE (before 5.14)");
            return;
        }
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while !map.resident(from, len) {
            assert!(
                Instant::now() < deadline,
                "{len} bytes from {from} not faulted in ahead of the stores at {end}"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        for i in 0..1000u32 {
            assert_eq!(db.get(&i.to_le_bytes()).unwrap(), Some(vec![i as u8; 100]));
        }
    }

    #[test]
    fn a_reader_holding_a_file_reads_it_after_compaction_deleted_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts()).unwrap();
        for i in 0..200u32 {
            db.put(&i.to_le_bytes(), &[i as u8; 100]).unwrap();
        }
        // Make most of the first files garbage, so compaction deletes them.
        for i in 0..190u32 {
            db.put(&i.to_le_bytes(), &[!(i as u8); 100]).unwrap();
        }
        let key = 195u32.to_le_bytes();
        let (file, loc) = lookup(&db, &key);
        let path = db.inner.shards[0].data_path(loc.file);
        assert!(path.exists());
        db.compact().unwrap();
        assert!(!path.exists(), "compaction should have deleted {path:?}");
        assert_ne!(lookup(&db, &key).1.file, loc.file);
        // The reader's Arc keeps the unlinked file mapped and readable.
        let shard = db.inner.shard(&key);
        // SAFETY: `loc` and `file` were read from the index (before the
        // compaction; the record's bytes never change).
        let v = unsafe { db.inner.read_with(shard, &file, loc, |r| r.value()) }.unwrap();
        assert_eq!(v, vec![195u8; 100]);
        assert_eq!(db.get(&key).unwrap(), Some(vec![195u8; 100]));
    }
}
