//! Background work: compaction, hint files, periodic fsync, the expiry sweep,
//! and closing.
//!
//! Compaction rewrites the live records of sealed files into new files and
//! deletes the old ones. It never holds a lock while doing I/O: it checks a
//! record's liveness under the shard's index read lock, appends it to its
//! output, and repoints the index entry only if the entry still points at the
//! old place, so a write that raced it always wins. Tombstones are kept while
//! a file outside the compaction could hold an older record they shadow (any
//! file whose smallest sequence number is below the tombstone's).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::db::{sync_dir, DataFile, Db, FileInfo, Inner, Shard};
use crate::format::{
    self, CommitKey, FileHeader, HintEntry, Kind, Origin, Patch, Record, RecordHeader, RecordRef,
    FILE_HEADER_LEN, FLAG_BATCH, FLAG_PATCH, HINT_MAGIC, RECORD_HEADER_LEN,
};
use crate::keydir::Loc;
use crate::options::SyncPolicy;
use crate::recovery::{scan_records, scan_records_hooked, ScanEnd};
use crate::vfs::VFile;
use crate::{Error, Result};

/// What one [`Db::compact`] call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionReport {
    /// Files rewritten and deleted.
    pub files_compacted: usize,
    /// Bytes read from them.
    pub bytes_read: u64,
    /// Bytes written to new files.
    pub bytes_written: u64,
}

impl CompactionReport {
    fn add(&mut self, o: &CompactionReport) {
        self.files_compacted += o.files_compacted;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
    }
}

pub(crate) fn spawn_workers(inner: &Arc<Inner>) -> Vec<JoinHandle<()>> {
    let mut v = Vec::new();
    let i = inner.clone();
    v.push(
        std::thread::Builder::new()
            .name("basalt-maint".into())
            .spawn(move || maintenance_loop(&i))
            .expect("spawn basalt-maint"),
    );
    if inner.opts.background_compaction {
        let i = inner.clone();
        v.push(
            std::thread::Builder::new()
                .name("basalt-compact".into())
                .spawn(move || compaction_loop(&i))
                .expect("spawn basalt-compact"),
        );
    }
    v
}

/// Sleeps up to `d`; returns true when the database is closing.
fn wait(inner: &Inner, d: Duration) -> bool {
    let mut stop = inner.stop.lock();
    if !*stop {
        inner.wake.wait_for(&mut stop, d);
    }
    *stop
}

fn maintenance_loop(inner: &Inner) {
    crate::db::NO_STALL.with(|n| n.set(true));
    let tick = match inner.opts.sync {
        SyncPolicy::EveryMs(p) => Duration::from_millis(p.min(100)),
        _ => Duration::from_millis(100),
    };
    let mut last_sync = Instant::now();
    while !wait(inner, tick) {
        if let SyncPolicy::EveryMs(p) = inner.opts.sync {
            if last_sync.elapsed() >= Duration::from_millis(p) {
                last_sync = Instant::now();
                for s in &inner.shards {
                    if inner.check_writable().is_ok() {
                        // A failure poisons the engine and is logged there.
                        let _ = inner.sync_shard(s);
                    }
                }
            }
        }
        if let Some(_g) = inner.compaction.try_lock() {
            for s in &inner.shards {
                if let Err(e) = write_pending_hints(inner, s, Some(inner.opts.hint_delay)) {
                    tracing::warn!(shard = s.id, error = %e, "writing hint files failed; the data files will be scanned on open");
                }
            }
        }
        inner.update_stall();
        let paused = inner.expiry_paused_until.load(Ordering::Relaxed) > inner.now();
        if inner.opts.active_expiry && !paused {
            for s in &inner.shards {
                if inner.check_writable().is_err() {
                    break;
                }
                if let Err(e) = inner.sweep_shard(s, 1000) {
                    tracing::warn!(shard = s.id, error = %e, "expiry sweep failed");
                }
            }
        }
    }
}

fn compaction_loop(inner: &Inner) {
    // After a pass that reclaimed space the next one starts at once: under
    // a stream of overwrites the garbage grows as fast as clients write,
    // and a second's pause per pass let it outgrow the disk.
    let mut reclaimed = false;
    loop {
        let stop = if reclaimed {
            *inner.stop.lock()
        } else {
            wait(inner, Duration::from_secs(1))
        };
        if stop {
            break;
        }
        reclaimed = false;
        if inner.check_writable().is_err() {
            continue;
        }
        match compaction_pass(inner, true) {
            Ok(r) => reclaimed = r.bytes_read > r.bytes_written + (1 << 20),
            // Writes stop; `Db::resume_writes` may start them (and this
            // loop) again once the cause is gone (a full disk).
            Err(e) => {
                inner.poison(e);
            }
        }
    }
}

/// Compaction may read this many bytes for every byte writers append,
/// beyond its base rate ([`crate::Options::compaction_rate_mb`]): files
/// are compacted once half garbage, so reading twice what is written
/// reclaims garbage as fast as overwrites make it.
const WRITE_CREDIT: u64 = 2;

/// Bytes appended by writers to every shard since open.
fn bytes_appended(inner: &Inner) -> u64 {
    inner
        .shards
        .iter()
        .map(|s| s.written.load(Ordering::Relaxed))
        .sum()
}

/// Most files compacted together to drop a file's tombstones.
const TOMBSTONE_SET_MAX: usize = 16;

/// A file whose tombstones (with its garbage) pass the threshold, together
/// with every file that may hold a record they shadow, so compacting the
/// set drops them; empty when there is none, or the set would be too big.
///
/// Tombstones are kept while a file outside the compaction holds records as
/// old as them (`compact_files`), and compaction outputs carry old records,
/// so a file full of deletions (a queue's pops) compacted alone kept them
/// all: it never reached the garbage threshold and stayed on disk for good.
/// Compacting it with every sealed file whose oldest record is not newer
/// than its newest one (and only while the active file is newer still)
/// leaves no file outside that could hold a shadowed record. Tombstones are
/// counted from 64 KiB on, so a file holding only the few that must stay
/// (the newest deletion of each live map, which carries its version) is
/// not rewritten again and again.
fn tombstone_victims(
    files: &std::collections::BTreeMap<u32, FileInfo>,
    threshold: f64,
) -> Vec<u32> {
    let active_min = files
        .values()
        .filter(|f| f.active)
        .map(|f| f.min_seq)
        .min()
        .unwrap_or(u64::MAX);
    let Some(f) = files
        .values()
        .filter(|f| {
            !f.active
                && f.tombstones >= 64 << 10
                && f.max_seq < active_min
                && (f.reclaimable() + f.tombstones) as f64 >= threshold * f.total as f64
        })
        .min_by_key(|f| f.min_seq)
    else {
        return Vec::new();
    };
    let set: Vec<u32> = files
        .iter()
        .filter(|(_, g)| !g.active && g.min_seq <= f.max_seq)
        .map(|(&id, _)| id)
        .collect();
    if set.len() > TOMBSTONE_SET_MAX {
        return Vec::new();
    }
    set
}

/// Compacts, in every shard, the sealed files past the garbage threshold.
fn compaction_pass(inner: &Inner, throttle: bool) -> Result<CompactionReport> {
    let _g = inner.compaction.lock();
    let mut total = CompactionReport::default();
    for s in &inner.shards {
        let victims: Vec<u32> = {
            let idx = s.index.read();
            let threshold = inner.opts.compaction_threshold;
            let garbage: Vec<u32> = idx
                .files
                .iter()
                .filter(|(_, f)| {
                    !f.active
                        && f.total > FILE_HEADER_LEN as u64
                        && f.reclaimable() as f64 >= threshold * f.total as f64
                })
                .map(|(&id, _)| id)
                .take(8)
                .collect();
            if garbage.is_empty() {
                tombstone_victims(&idx.files, threshold)
            } else {
                garbage
            }
        };
        if !victims.is_empty() {
            total.add(&compact_files(inner, s, &victims, throttle)?);
        }
        if *inner.stop.lock() {
            break;
        }
    }
    Ok(total)
}

/// Writes hint files for sealed log files that have none yet: those sealed
/// at least `min_age` ago, or all of them with `None`.
pub(crate) fn write_pending_hints(
    inner: &Inner,
    shard: &Shard,
    min_age: Option<Duration>,
) -> Result<()> {
    let ids: Vec<u32> = {
        let mut pending = shard.pending_hints.lock();
        let due = |sealed: &Option<Instant>| match (min_age, sealed) {
            (Some(age), Some(at)) => at.elapsed() >= age,
            _ => true,
        };
        let ids = pending
            .iter()
            .filter(|(_, at)| due(at))
            .map(|&(id, _)| id)
            .collect();
        pending.retain(|(_, at)| !due(at));
        ids
    };
    for id in ids {
        let file = {
            let idx = shard.index.read();
            idx.files
                .get(&id)
                .map(|f| (f.handle.file.clone(), f.total, f.origin))
        };
        // Compacted away meanwhile: nothing to do.
        let Some((handle, len, origin)) = file else {
            continue;
        };
        write_hint_for_file(inner, shard, id, &*handle, len, origin)?;
    }
    Ok(())
}

/// Scans a sealed data file and writes its hint file.
pub(crate) fn write_hint_for_file(
    inner: &Inner,
    shard: &Shard,
    id: u32,
    handle: &dyn VFile,
    len: u64,
    origin: Origin,
) -> Result<()> {
    let path = shard.data_path(id);
    let mut entries = Vec::new();
    let mut count = 0u64;
    let end = scan_records(handle, len, &path, |off, h, bytes| {
        HintEntry::of_record(off, h, bytes).encode_into(&mut entries);
        count += 1;
        Ok(())
    })?;
    if let ScanEnd::Bad { offset, reason } = end {
        return Err(Error::Corrupt {
            path,
            offset,
            reason,
        });
    }
    write_hint(inner, shard, id, origin, &entries, count, len)
}

fn write_hint(
    _inner: &Inner,
    shard: &Shard,
    id: u32,
    origin: Origin,
    entries: &[u8],
    count: u64,
    data_len: u64,
) -> Result<()> {
    let path = shard.hint_path(id);
    let tmp = path.with_extension("hint.tmp");
    let mut b = Vec::with_capacity(FILE_HEADER_LEN + entries.len() + format::HINT_FOOTER_LEN);
    b.extend_from_slice(
        &FileHeader {
            origin,
            base_seq: 0,
        }
        .encode(&HINT_MAGIC),
    );
    b.extend_from_slice(entries);
    b.extend_from_slice(&format::encode_hint_footer(count, data_len));
    std::fs::write(&tmp, &b)
        .and_then(|_| std::fs::File::open(&tmp)?.sync_all())
        .map_err(|e| Error::io("write", &tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io("rename", &path, e))?;
    sync_dir(&shard.dir)
}

/// One compaction output file being written.
struct Output {
    id: u32,
    file: Arc<dyn VFile>,
    /// The index's handle of the file: appending until `finish` syncs it.
    data: Arc<DataFile>,
    len: u64,
    buf: Vec<u8>,
    hints: Vec<u8>,
    count: u64,
}

/// An index entry to repoint once its record is in an output file.
struct Move {
    kind: Kind,
    key: Box<[u8]>,
    field: Box<[u8]>,
    from: (u32, u32),
    to: Loc,
}

struct Compactor<'a> {
    inner: &'a Inner,
    shard: &'a Shard,
    out: Option<Output>,
    done: Vec<Output>,
    moves: Vec<Move>,
    written: u64,
}

impl Compactor<'_> {
    fn output(&mut self, need: u64) -> Result<&mut Output> {
        let full = self.out.as_ref().is_some_and(|o| {
            o.len + o.buf.len() as u64 > FILE_HEADER_LEN as u64
                && o.len + o.buf.len() as u64 + need > self.inner.opts.max_file_size
        });
        if full {
            self.flush()?;
            let o = self.out.take().unwrap();
            self.done.push(o);
        }
        if self.out.is_none() {
            let id = self.shard.next_file.fetch_add(1, Ordering::SeqCst);
            let tmp = self.shard.data_path(id).with_extension("data.tmp");
            let file = self
                .inner
                .create_data_file(self.shard, Origin::Compaction, &tmp)?;
            // Readers follow repointed entries into the output while it is
            // still being written, so it is mapped as far as it may grow.
            let data = DataFile::new(file.clone(), self.inner.opts.max_file_size);
            // Its newest pages are dirty until `finish` syncs it: cold
            // reads of it go through the page cache until then.
            data.set_appending(true);
            let info = FileInfo::new(data.clone(), Origin::Compaction, FILE_HEADER_LEN as u64);
            self.shard.index.write().files.insert(id, info);
            self.out = Some(Output {
                id,
                file,
                data,
                len: FILE_HEADER_LEN as u64,
                buf: Vec::new(),
                hints: Vec::new(),
                count: 0,
            });
        }
        Ok(self.out.as_mut().unwrap())
    }

    /// Writes the buffered records, then repoints the index at them.
    fn flush(&mut self) -> Result<()> {
        let Some(o) = self.out.as_mut() else {
            return Ok(());
        };
        if !o.buf.is_empty() {
            let path = self.shard.data_path(o.id);
            o.file
                .write_all_at(&o.buf, o.len)
                .map_err(|e| Error::io("write", path, e))?;
            o.len += o.buf.len() as u64;
            self.written += o.buf.len() as u64;
            o.buf.clear();
        }
        let mut idx = self.shard.index.write();
        if let Some(f) = idx.files.get_mut(&o.id) {
            f.total = o.len;
        }
        for m in self.moves.drain(..) {
            let (fid, off) = m.from;
            let same = |l: &Loc| l.file == fid && l.offset == off;
            let moved = match m.kind {
                Kind::Put => idx.keys.update_if(&m.key, fid, off, m.to),
                Kind::Field => match idx
                    .maps
                    .get_mut(&m.key)
                    .and_then(|mp| mp.fields.get_mut(&m.field[..]))
                {
                    Some(l) if same(l) => {
                        *l = m.to;
                        true
                    }
                    _ => false,
                },
                Kind::MapMeta => match idx.maps.get_mut(&m.key) {
                    Some(mp) if mp.meta.as_ref().is_some_and(same) => {
                        mp.meta = Some(m.to);
                        true
                    }
                    _ => false,
                },
                // Not in the index, but accounted as live (see `batch.rs`).
                Kind::Commit => true,
                Kind::Delete | Kind::DeleteField => false,
            };
            if moved {
                if let Some(f) = idx.files.get_mut(&fid) {
                    f.live = f.live.saturating_sub(m.to.len as u64);
                }
                idx.add_live(m.to);
            }
        }
        Ok(())
    }

    /// Makes the outputs durable and visible under their final names.
    fn finish(mut self) -> Result<u64> {
        self.flush()?;
        if let Some(o) = self.out.take() {
            self.done.push(o);
        }
        for o in &self.done {
            let path = self.shard.data_path(o.id);
            o.file
                .sync_data()
                .map_err(|e| Error::io("fsync", &path, e))?;
            o.data.set_appending(false);
            write_hint(
                self.inner,
                self.shard,
                o.id,
                Origin::Compaction,
                &o.hints,
                o.count,
                o.len,
            )?;
            let tmp = path.with_extension("data.tmp");
            std::fs::rename(&tmp, &path).map_err(|e| Error::io("rename", &path, e))?;
        }
        sync_dir(&self.shard.dir)?;
        Ok(self.written)
    }
}

/// Bytes compaction reads between two looks at its rate limit.
const THROTTLE_STEP: u64 = 256 << 10;
/// Dead records whose liveness one read lock of the index checks.
const HOLD_RECORDS: u32 = 64;
/// Records between two offers of that lock to a parked writer.
const BUMP_EVERY: u32 = 8;
/// The shortest sleep the rate limit takes (shorter leads are let run).
const THROTTLE_MIN_SLEEP: Duration = Duration::from_millis(2);
/// The longest: the allowance grows with writes, so it is looked at again.
const THROTTLE_MAX_SLEEP: Duration = Duration::from_millis(100);

/// Rewrites the live records of `victims` (sealed files of `shard`) and
/// deletes them. The caller holds `inner.compaction`.
pub(crate) fn compact_files(
    inner: &Inner,
    shard: &Shard,
    victims: &[u32],
    throttle: bool,
) -> Result<CompactionReport> {
    // A compaction that may drop or unflag batch members, or that deletes
    // compaction outputs, always leaves an output behind (empty if nothing
    // is kept), and takes the shard's earlier empty outputs along: so the
    // highest base sequence of the compaction outputs in a directory never
    // goes down. Recovery and `check` rely on it: a batch whose first
    // member is at or above it was never touched by compaction, and must
    // have all of its members still flagged (see `batch.rs`).
    let (victims, force_output) = {
        let idx = shard.index.read();
        let mut v = victims.to_vec();
        let touches = v.iter().any(|id| {
            idx.files
                .get(id)
                .is_some_and(|f| f.min_flagged != u64::MAX || f.origin == Origin::Compaction)
        });
        if touches {
            let empty: Vec<u32> = idx
                .files
                .iter()
                .filter(|(id, f)| {
                    !f.active
                        && f.origin == Origin::Compaction
                        && f.total == FILE_HEADER_LEN as u64
                        && !v.contains(id)
                })
                .map(|(&id, _)| id)
                .collect();
            v.extend(empty);
        }
        (v, touches)
    };
    let victims = &victims[..];
    let (inputs, oldest_other) = {
        let idx = shard.index.read();
        let inputs: Vec<(u32, Arc<dyn VFile>, u64)> = victims
            .iter()
            .filter_map(|id| {
                idx.files
                    .get(id)
                    .filter(|f| !f.active)
                    .map(|f| (*id, f.handle.file.clone(), f.total))
            })
            .collect();
        let oldest_other = idx
            .files
            .iter()
            .filter(|(id, _)| !victims.contains(id))
            .map(|(_, f)| f.min_seq)
            .min()
            .unwrap_or(u64::MAX);
        (inputs, oldest_other)
    };
    // Write batches (see `batch.rs`). Members below `committed_below`
    // belong to batches that were committed before this point (the open
    // batch's first member is read before the counter), and the fsync of
    // every shard below makes those commits durable: their copies may drop
    // the flag. `flag_floor` is the lowest flagged record anywhere in the
    // database; a commit record whose last member is below it commits
    // nothing that is still flagged and can go.
    let open_first = inner.open_first.load(Ordering::SeqCst);
    let committed_below = open_first.min(inner.seq.load(Ordering::SeqCst));
    // (An active file's members are counted in its writer until it is
    // sealed; the writer lock keeps a seal from moving them in between.)
    let flag_floor = inner
        .shards
        .iter()
        .map(|s| {
            let w = s.writer.lock();
            let idx = s.index.read();
            idx.files
                .values()
                .map(|f| f.min_flagged)
                .fold(w.min_flagged, u64::min)
        })
        .min()
        .unwrap_or(u64::MAX);
    let has_flagged = {
        let idx = shard.index.read();
        victims
            .iter()
            .any(|id| idx.files.get(id).is_some_and(|f| f.min_flagged != u64::MAX))
    };
    if has_flagged {
        for s in &inner.shards {
            inner.sync_shard(s)?;
        }
    }
    let mut unflagged = Vec::new();
    let mut whole = Vec::new();
    let rate = if throttle {
        inner.opts.compaction_rate_mb << 20
    } else {
        0
    };
    let started = Instant::now();
    let appended_at_start = bytes_appended(inner);
    let mut read = 0u64;
    // The throttle looks at the clock once per THROTTLE_STEP bytes read and
    // sleeps only when at least THROTTLE_MIN_SLEEP ahead: checked per record
    // (a queue's records are ~100 bytes) it read the clock and slept tens of
    // thousands of times a second, a quarter of a core of overhead.
    let mut next_check = THROTTLE_STEP;
    let mut c = Compactor {
        inner,
        shard,
        out: None,
        done: Vec::new(),
        moves: Vec::new(),
        written: 0,
    };
    if force_output {
        c.output(0)?;
    }
    // The index read lock that liveness checks hold across consecutive
    // dead records (`HOLD_RECORDS` at most, yielding to a parked writer
    // every `BUMP_EVERY`): taken per record, its lock and unlock were most
    // of the compaction thread's time under a stream of small overwrites,
    // on a line the shard's writer takes for every write. Released before
    // a live record is copied (its base read, the output written, the
    // index write-locked), before a throttle sleep and before the scan
    // reads the file.
    let held: std::cell::RefCell<Option<parking_lot::RwLockReadGuard<'_, crate::db::Index>>> =
        std::cell::RefCell::new(None);
    let release = || *held.borrow_mut() = None;
    let mut held_for = 0u32;
    for (fid, handle, len) in &inputs {
        let fid = *fid;
        let path = shard.data_path(fid);
        // Read once: its pages leave the page cache as the scan passes
        // them, so compaction does not push out what clients read.
        let end = scan_records_hooked(&**handle, *len, &path, true, &release, |off, h, bytes| {
            read += bytes.len() as u64;
            // While writes are delayed compaction is the bottleneck: no
            // limit then.
            if rate > 0 && read >= next_check && !inner.stalled.load(Ordering::Relaxed) {
                next_check = read + THROTTLE_STEP;
                // The allowance: the base rate, plus WRITE_CREDIT times
                // what writers appended meanwhile (so compaction keeps up
                // with overwrites however fast they come). Ahead of it,
                // sleep until the base rate alone would catch up, at most
                // THROTTLE_MAX_SLEEP before looking again.
                let credit = WRITE_CREDIT * (bytes_appended(inner) - appended_at_start);
                let allowed = (rate as f64 * started.elapsed().as_secs_f64()) as u64 + credit;
                if let Some(over) = read.checked_sub(allowed) {
                    let ahead =
                        Duration::from_secs_f64(over as f64 / rate as f64).min(THROTTLE_MAX_SLEEP);
                    if ahead >= THROTTLE_MIN_SLEEP {
                        release();
                        std::thread::sleep(ahead);
                    }
                }
            }
            let k1 = RECORD_HEADER_LEN + h.key_len as usize;
            let key = &bytes[RECORD_HEADER_LEN..k1];
            let field = &bytes[k1..k1 + h.field_len as usize];
            let off32 = off as u32;
            let here = |l: &Loc| l.file == fid && l.offset == off32;
            let flagged = h.flags & FLAG_BATCH != 0;
            if flagged && inner.aborted.binary_search(&h.seq).is_ok() {
                // A member of a batch that was never committed: it never
                // took effect, tombstone or not.
                return Ok(());
            }
            let mut guard = held.borrow_mut();
            match guard.as_mut() {
                Some(g) if held_for < HOLD_RECORDS => {
                    if held_for.is_multiple_of(BUMP_EVERY) {
                        parking_lot::RwLockReadGuard::bump(g);
                    }
                }
                _ => {
                    *guard = None;
                    *guard = Some(shard.index.read());
                    held_for = 0;
                }
            }
            held_for += 1;
            let keep = {
                let idx = guard.as_ref().expect("taken above");
                match h.kind {
                    Kind::Put => idx.keys.get(key).is_some_and(|e| here(&e.loc)),
                    Kind::Field => idx
                        .maps
                        .get(key)
                        .and_then(|m| m.fields.get(field))
                        .is_some_and(|l| here(&l)),
                    Kind::MapMeta => idx
                        .maps
                        .get(key)
                        .and_then(|m| m.meta.as_ref())
                        .is_some_and(here),
                    Kind::Delete => oldest_other < h.seq,
                    // Also kept while it is the newest change of a map that
                    // lives, so the map's version (which counts field
                    // deletions) survives a restart; older deletions of a
                    // live map go, or a queue's pops would pile up forever.
                    Kind::DeleteField => {
                        oldest_other < h.seq
                            || idx.maps.get(key).is_some_and(|m| m.version <= h.seq)
                    }
                    Kind::Commit => CommitKey::decode(key).is_some_and(|c| c.last >= flag_floor),
                }
            };
            if !keep {
                return Ok(());
            }
            *guard = None;
            drop(guard);
            // A live patch is copied as the full record it stands for; its
            // base lies earlier in this same file (`segmented.rs`), which
            // is read here with `pread` (the scan has dropped its pages).
            let (bytes, h) = if h.flags & FLAG_PATCH != 0 {
                whole.clear();
                let read = |at: u64, buf: &mut [u8]| handle.read_exact_at(buf, at).is_ok();
                let h =
                    unpatch(off, h, bytes, read, &mut whole).map_err(|reason| Error::Corrupt {
                        path: path.clone(),
                        offset: off,
                        reason: reason.into(),
                    })?;
                (&whole[..], h)
            } else {
                (bytes, *h)
            };
            let h = &h;
            // A committed, durable member is copied as a plain record.
            let (bytes, flags, flagged) = if flagged && h.seq < committed_below {
                unflagged.clear();
                unflagged.extend_from_slice(bytes);
                unflagged[21] &= !FLAG_BATCH;
                let crc = crc32c::crc32c(&unflagged[4..]);
                unflagged[0..4].copy_from_slice(&crc.to_le_bytes());
                (&unflagged[..], h.flags & !FLAG_BATCH, false)
            } else {
                (bytes, h.flags, flagged)
            };
            let o = c.output(bytes.len() as u64)?;
            let to = Loc {
                file: o.id,
                offset: (o.len + o.buf.len() as u64) as u32,
                len: bytes.len() as u32,
                seq: h.seq,
            };
            o.buf.extend_from_slice(bytes);
            HintEntry {
                seq: h.seq,
                expiry: h.expiry,
                kind: h.kind,
                flags,
                tag: h.tag,
                offset: to.offset,
                record_len: to.len,
                key: key.to_vec(),
                field: field.to_vec(),
            }
            .encode_into(&mut o.hints);
            o.count += 1;
            let big = o.buf.len() >= 1 << 20;
            {
                let mut idx = shard.index.write();
                if let Some(f) = idx.files.get_mut(&to.file) {
                    f.note_record(h.seq, h.kind, to.len as u64);
                    if flagged {
                        f.min_flagged = f.min_flagged.min(h.seq);
                    }
                }
            }
            c.moves.push(Move {
                kind: h.kind,
                key: key.into(),
                field: field.into(),
                from: (fid, off32),
                to,
            });
            if big {
                c.flush()?;
            }
            Ok(())
        })?;
        release();
        if let ScanEnd::Bad { offset, reason } = end {
            return Err(Error::Corrupt {
                path,
                offset,
                reason,
            });
        }
    }
    let written = c.finish()?;
    // A record dropped above as overwritten may be overwritten only by a
    // member of a batch still open: a crash before its commit must find
    // the old record. So the inputs go only when no batch is open (the
    // group's lock, held for the unlinks only), after an fsync of every
    // shard so the batches committed meanwhile are durable. From inside an
    // open batch (a compaction the batch's own thread asked for) the inputs
    // stay: their live records are in the outputs now, so a later
    // compaction deletes them.
    for s in &inner.shards {
        inner.sync_shard(s)?;
    }
    // A close waits for this thread, maybe from inside a batch: the wait
    // for the group gives up when the database is closing.
    let mut no_open_batch = None;
    while !crate::batch::in_batch(inner) && no_open_batch.is_none() && !*inner.stop.lock() {
        no_open_batch = inner.group.quiesce(Duration::from_millis(10));
    }
    if no_open_batch.is_none() {
        return Ok(CompactionReport {
            files_compacted: 0,
            bytes_read: read,
            bytes_written: written,
        });
    }
    // The outputs are durable. The inputs go next, but not one by one
    // unguarded: a crash between two unlinks could leave a record whose
    // tombstone was dropped with an input already gone. So first a marker
    // lists every input; open finishes the job if it finds one.
    let ids: Vec<u32> = inputs.iter().map(|(id, _, _)| *id).collect();
    // Not while a checkpoint links files (`Db::checkpoint`).
    let _deleting = inner.deleting.read();
    let marker = write_victims_marker(shard, &ids)?;
    {
        let mut idx = shard.index.write();
        for id in &ids {
            idx.files.remove(id);
        }
    }
    remove_files(shard, &ids)?;
    std::fs::remove_file(&marker).map_err(|e| Error::io("remove", &marker, e))?;
    sync_dir(&shard.dir)?;
    inner.counters.compactions.fetch_add(1, Ordering::Relaxed);
    inner
        .counters
        .compaction_read
        .fetch_add(read, Ordering::Relaxed);
    inner
        .counters
        .compaction_written
        .fetch_add(written, Ordering::Relaxed);
    tracing::debug!(
        shard = shard.id,
        files = inputs.len(),
        read,
        written,
        "compacted"
    );
    Ok(CompactionReport {
        files_compacted: inputs.len(),
        bytes_read: read,
        bytes_written: written,
    })
}

/// Writes `<id>.victims`: the ids of compaction inputs to delete.
fn write_victims_marker(shard: &Shard, ids: &[u32]) -> Result<std::path::PathBuf> {
    let id = shard.next_file.fetch_add(1, Ordering::SeqCst);
    let path = shard.dir.join(format!("{id:010}.victims"));
    let tmp = path.with_extension("victims.tmp");
    let b = format::encode_victims(ids);
    std::fs::write(&tmp, &b)
        .and_then(|_| std::fs::File::open(&tmp)?.sync_all())
        .map_err(|e| Error::io("write", &tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io("rename", &path, e))?;
    sync_dir(&shard.dir)?;
    Ok(path)
}

/// Deletes the data and hint files of `ids` (already-missing ones are fine).
pub(crate) fn remove_files(shard: &Shard, ids: &[u32]) -> Result<()> {
    remove_files_in(&shard.dir, ids)
}

pub(crate) fn remove_files_in(dir: &std::path::Path, ids: &[u32]) -> Result<()> {
    for &id in ids {
        for p in [crate::db::data_path(dir, id), crate::db::hint_path(dir, id)] {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("remove", &p, e)),
            }
        }
    }
    Ok(())
}

impl Db {
    /// Compacts now, unthrottled: seals every shard's active file, then
    /// rewrites every sealed file that holds garbage or tombstones.
    ///
    /// Called with a write batch open on this thread, it compacts only if
    /// no background compaction is running (which may be waiting for the
    /// batch to end), and keeps the files it rewrote until a later
    /// compaction (see `compact_files`).
    pub fn compact(&self) -> Result<CompactionReport> {
        let inner = &*self.inner;
        inner.check_writable()?;
        let _g = if crate::batch::in_batch(inner) {
            match inner.compaction.try_lock() {
                Some(g) => g,
                None => return Ok(CompactionReport::default()),
            }
        } else {
            inner.compaction.lock()
        };
        let mut total = CompactionReport::default();
        for s in &inner.shards {
            {
                let mut w = s.writer.lock();
                if w.len > FILE_HEADER_LEN as u64 {
                    inner.rotate(s, &mut w)?;
                }
            }
            let victims: Vec<u32> = {
                let idx = s.index.read();
                idx.files
                    .iter()
                    .filter(|(_, f)| !f.active && (f.reclaimable() > 0 || f.tombstones > 0))
                    .map(|(&id, _)| id)
                    .collect()
            };
            if !victims.is_empty() {
                total.add(&compact_files(inner, s, &victims, false).map_err(|e| inner.poison(e))?);
            }
            write_pending_hints(inner, s, None)?;
        }
        Ok(total)
    }

    /// Runs one pass of what background compaction does, now and
    /// unthrottled: compacts the sealed files whose garbage is past
    /// [`crate::Options::compaction_threshold`]. Does nothing when called
    /// with a write batch open on this thread.
    pub fn compact_pass(&self) -> Result<CompactionReport> {
        self.inner.check_writable()?;
        if crate::batch::in_batch(&self.inner) {
            // A background pass may be waiting for this batch to end.
            return Ok(CompactionReport::default());
        }
        compaction_pass(&self.inner, false).map_err(|e| self.inner.poison(e))
    }

    /// Stops the background threads, cuts the space reserved past each
    /// active file's last record, fsyncs, writes hint files for the active
    /// files (so the next open reads hints only) and releases the directory
    /// lock.
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    pub(crate) fn shutdown(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        let inner = &*self.inner;
        // A batch this thread has open commits its part here first: its
        // members must not lose their commit to a close (DEBUG RELOAD or
        // FLUSHDB inside EXEC).
        if let Err(e) = crate::batch::commit_early(inner) {
            tracing::warn!(error = %e, "close: committing the open batch failed");
        }
        *inner.stop.lock() = true;
        inner.wake.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        // A poisoned engine cannot promise its last writes reached the disk:
        // closing it reports why instead of claiming success.
        let mut result = inner.check_writable();
        if result.is_ok() {
            let _g = inner.compaction.lock();
            for s in &inner.shards {
                let r = inner
                    .cut_active_tail(s)
                    .and_then(|_| inner.sync_shard(s))
                    .and_then(|_| {
                        write_pending_hints(inner, s, None)?;
                        let (id, len, handle) = {
                            let w = s.writer.lock();
                            (w.file_id, w.len, w.file.clone())
                        };
                        write_hint_for_file(inner, s, id, &*handle, len, Origin::Log)
                    });
                if let Err(e) = r {
                    tracing::warn!(shard = s.id, error = %e, "close: sync or hint failed");
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
            }
        }
        let _ = inner.lock_file.unlock();
        result
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::warn!(error = %e, "closing the database failed");
        }
    }
}

/// The full record a patch record (header `h`, bytes `bytes`, at offset
/// `off` of its file) stands for, encoded into `out`: its base, read from
/// the same file with `read(offset, buf)`, with the patch's runs applied,
/// under the patch's sequence number. Returns the new record's header.
pub(crate) fn unpatch(
    off: u64,
    h: &RecordHeader,
    bytes: &[u8],
    read: impl FnOnce(u64, &mut [u8]) -> bool,
    out: &mut Vec<u8>,
) -> std::result::Result<RecordHeader, &'static str> {
    let k1 = RECORD_HEADER_LEN + h.key_len as usize;
    let key = &bytes[RECORD_HEADER_LEN..k1];
    let field = &bytes[k1..k1 + h.field_len as usize];
    let p = Patch::decode(&bytes[k1 + h.field_len as usize..])?;
    if u64::from(p.base_offset) + u64::from(p.base_len) > off {
        return Err("patch names a base that does not precede it");
    }
    let mut base = vec![0u8; p.base_len as usize];
    if !read(u64::from(p.base_offset), &mut base) {
        return Err("patch base unreadable");
    }
    let rec = Record::from_bytes(&base).map_err(|_| "patch base is not a good record")?;
    if !format::is_patch_base(&rec, key, field) {
        return Err("patch base is not a full record of its segment");
    }
    let mut value = rec.stored_value().to_vec();
    p.apply(&mut value)?;
    let flags = h.flags & !FLAG_PATCH;
    RecordRef {
        seq: h.seq,
        expiry: h.expiry,
        kind: h.kind,
        flags,
        tag: h.tag,
        key,
        field,
        value: &value,
    }
    .encode_into(out);
    Ok(RecordHeader {
        flags,
        value_len: value.len() as u32,
        ..*h
    })
}
