//! Segmented values: values a caller changes in place, a range at a time.
//!
//! The one idea a reader needs: a value longer than [`SEGMENT_ABOVE`] bytes
//! that is written with [`Db::write_range`] (a bit of a bitmap, a range of
//! a string, an append) is kept as a map of fixed-size segments tagged
//! [`SEGMENTED_TAG`]: field `i` (8 bytes, big-endian) holds bytes
//! `i * SEGMENT_LEN ..`. A ranged write then appends the one segment it
//! touches (two at a boundary) instead of the whole value, and the segments
//! are a run of numbered fields (`fields.rs`), 24 bytes of index each.
//!
//! A write that changes a few bytes of a segment other than the last, with
//! no batch open, appends a *patch* instead ([`FLAG_PATCH`]): the runs of
//! bytes where the segment differs from a full record of it earlier in the
//! active file (its base), up to [`PATCH_WRITE_MAX`] bytes of runs. Each patch
//! names the base, not the patch before it, so a read is at most two
//! records; the next patch after a seal, or one that would carry too much,
//! writes the whole segment again. A patch never names a record in another
//! file, so compaction, which copies a live patch as the full segment it
//! stands for, never meets a patch whose base is gone.
//!
//! To every other caller the key is a value: [`Db::get`] assembles it,
//! [`Db::meta`] says [`crate::KeyKind::Value`], the map calls refuse it as
//! they refuse any value, [`Db::put`] and [`Db::delete`] replace or remove
//! it whole, and expiry works as for any key. No record kind is new: a
//! segment is a field record and the map's expiry a map-metadata record,
//! so recovery and hint files need nothing of their own.
//!
//! Invariants: segments `0..n` all exist; every segment but the last holds
//! exactly [`SEGMENT_LEN`] bytes and the last `1..=SEGMENT_LEN`. A write
//! that changes several records (turning a value into segments, a range
//! across a boundary, growth past the end) runs as one write batch, so a
//! crash keeps all of it or none; and its records enter the index under
//! one lock, so a reader sees the value before or after it, never between.

use std::sync::Arc;

use crate::db::{DataFile, Index, Inner, MapEntry, Shard, Writer};
use crate::format::{
    is_patch_base, Kind, Patch, Record, RecordRef, FLAG_BATCH, FLAG_PATCH, PATCH_HEADER_LEN,
    RECORD_HEADER_LEN,
};
use crate::keydir::{Loc, MAP_FILE};
use crate::{Db, Error, Result};

/// The map tag of a segmented value. Callers' maps may use any other tag;
/// [`Db::put_field_tagged`] refuses this one.
pub const SEGMENTED_TAG: u8 = 0xff;

/// Bytes per segment: a ranged write of a few bytes appends a record of
/// about this size.
pub const SEGMENT_LEN: usize = 512;

/// A ranged write leaves a value of at most this many bytes as one record
/// (rewriting it costs no more than a few segments); a longer one becomes
/// segmented.
pub const SEGMENT_ABOVE: usize = 4096;

/// The most bytes of runs a patch may carry (what a reader accepts).
pub const PATCH_MAX: usize = SEGMENT_LEN / 4;

/// The most bytes of runs this build writes in a patch; a write that
/// would need more writes the whole segment. A random bit flip costs a
/// 5-byte run, so about 12 of them ride on one base before it is written
/// again, which is about where the bytes appended per write are fewest:
/// a segment's record is ~560 bytes and a patch ~60 plus its runs, so the
/// k-th patch after a base costs 60 + 5k, and a base every n writes comes
/// to (560 + 60 n + 2.5 n (n + 1)) / (n + 1) bytes a write, lowest (129)
/// near n = 12, against 142 at n = 25 (`PATCH_MAX`, which writers used
/// before: measured in `docs/benchmarks.md`).
const PATCH_WRITE_MAX: usize = SEGMENT_LEN / 8;

/// Where a patch of a segment would point: the segment's index entry as it
/// was read, and the full record a patch may name, with its bytes.
struct PatchFrom {
    i: u64,
    head: Loc,
    base: Loc,
    base_bytes: Vec<u8>,
}

/// A full record of a segment that a patch may name, and its bytes.
type Base = (Loc, Vec<u8>);

/// The base a segment just written is cached with ([`Db::put_segments`]):
/// the one its patch names, the record itself (a full record outside any
/// batch), or none (a batch member may not be named).
enum CachedBase {
    Of(Loc, Box<[u8]>),
    Itself,
    None,
}

/// Segments read or written lately on this thread, applied: a hot
/// segment (a sketch's header, patched by every PFADD that raises a
/// register; a bit of a bitmap set again and again) is then one lookup
/// instead of two records read and checked, and a ranged write of it
/// (`Db::modify_cached`) reads no record at all. Keyed by the record's
/// file ([`DataFile::uid`], never reused) and offset: a record never
/// changes, so an entry never goes stale, it only stops being asked for.
/// At most [`PATCHED_MAX`] entries per thread.
struct Patched {
    bytes: Box<[u8]>,
    /// What [`Db::read_segment_from`] answers for the base: `None` when
    /// the read that filled the entry did not ask (a write's read then
    /// misses), `Some(None)` when the base may not be named.
    base: Option<Option<(Loc, Box<[u8]>)>>,
    /// The bytes of `bytes` that differ from the base's ([`Patch::mark`]),
    /// once a write from the cache has compared them; `None` for an entry
    /// filled by a read or a general write. Each later write marks only the
    /// bytes it changed, so its patch ([`Patch::encode_masked`]) costs its
    /// runs, not a comparison of the segment with its base.
    diff: Option<DiffMask>,
}

/// A segment's byte mask of differences from its base.
type DiffMask = [u64; Patch::mask_words(SEGMENT_LEN)];

/// Entries of one thread's cache of applied segments: with their bases,
/// about 1 KiB each, so at most about 4 MiB per thread, which holds every
/// segment of a 2 MB bitmap. A write drops the entry of the record it
/// replaces; a full cache is emptied (a hash table offers no cheap victim,
/// and a working set larger than the cache would miss anyway).
const PATCHED_MAX: usize = 4096;

/// Entries are boxed: a write from the cache takes its entry out and puts
/// it back under the new record's location, which moves a pointer rather
/// than the entry (about 150 bytes with its mask).
type PatchedMap = hashbrown::HashMap<(u64, u32), Box<Patched>>;

thread_local! {
    static PATCHED: std::cell::RefCell<PatchedMap> =
        std::cell::RefCell::new(PatchedMap::new());
}

/// `f` of this thread's cached applied segment for the record at `loc` of
/// `file`, if it is cached (`None` otherwise, or if `f` says so).
fn cached<R>(file: &DataFile, loc: Loc, f: impl FnOnce(&Patched) -> Option<R>) -> Option<R> {
    PATCHED.with(|c| c.borrow().get(&(file.uid, loc.offset)).and_then(|e| f(e)))
}

/// Caches the applied segment of the record at `loc` of `file` on this
/// thread.
fn cache(file: &DataFile, loc: Loc, bytes: Box<[u8]>, base: Option<Option<(Loc, Box<[u8]>)>>) {
    cache_uid(file.uid, loc, bytes, base)
}

/// [`cache`] for the file whose [`DataFile::uid`] is `uid`.
fn cache_uid(uid: u64, loc: Loc, bytes: Box<[u8]>, base: Option<Option<(Loc, Box<[u8]>)>>) {
    PATCHED.with(|c| {
        insert_bounded(
            &mut c.borrow_mut(),
            (uid, loc.offset),
            Box::new(Patched {
                bytes,
                base,
                diff: None,
            }),
        )
    });
}

fn insert_bounded(c: &mut PatchedMap, at: (u64, u32), e: Box<Patched>) {
    if c.len() >= PATCHED_MAX && !c.contains_key(&at) {
        c.clear();
    }
    c.insert(at, e);
}

/// Drops this thread's entry for the record at `offset` of the file whose
/// [`DataFile::uid`] is `uid` (a segment's record just replaced).
fn uncache(uid: u64, offset: u32) {
    PATCHED.with(|c| c.borrow_mut().remove(&(uid, offset)));
}

/// What the record at a segment's index entry is: a full record (what the
/// reader made of it), or a patch.
enum Head<R> {
    Full(R),
    Patch(PatchHead),
}

/// A patch as read: where its base is, its runs (at most `PATCH_MAX`
/// bytes, as this module writes them), and its segment's name.
struct PatchHead {
    base: Loc,
    runs: [u8; PATCH_MAX],
    runs_len: usize,
    field: [u8; 8],
}

fn name(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

/// Length of segment `i` of a value of `total` bytes.
fn segment_len(i: u64, total: u64) -> usize {
    (total - i * SEGMENT_LEN as u64).min(SEGMENT_LEN as u64) as usize
}

/// Bytes of a segment's record holding `value_len` bytes of value (a
/// segment or a patch): the header, the key, the 8-byte name, the value.
#[inline]
fn segment_record_len(key: &[u8], value_len: usize) -> usize {
    RECORD_HEADER_LEN + key.len() + 8 + value_len
}

/// A segmented value's length, from the index alone: segments are stored
/// uncompressed and the last is never a patch, so the last one's length is
/// its record's length less the header, the key and the name.
#[inline]
fn segmented_len(m: &MapEntry, key: &[u8]) -> Option<u64> {
    let count = m.fields.len() as u64;
    let last = m.fields.get(&name(count.checked_sub(1)?))?;
    Some((count - 1) * SEGMENT_LEN as u64 + u64::from(last.len) - segment_record_len(key, 0) as u64)
}

/// The map of the segmented value at `key` and the value's length, if the
/// key holds one that has not expired at `now`.
#[inline]
fn live_segmented<'i>(idx: &'i Index, key: &[u8], now: u64) -> Option<(&'i MapEntry, u64)> {
    let e = idx.keys.get(key)?;
    if e.loc.file != MAP_FILE || idx.is_expired(key, e.has_ttl, now) {
        return None;
    }
    let m = idx.maps.get(key)?;
    if m.tag != SEGMENTED_TAG {
        return None;
    }
    Some((m, segmented_len(m, key)?))
}

/// Makes `loc` (just appended) the record of segment `i` of the segmented
/// value at `key`: the value's version becomes the record's and its live
/// bytes move from the record it replaces, which comes back.
#[inline]
fn index_segment(idx: &mut Index, key: &[u8], i: u64, loc: Loc) -> Option<Loc> {
    idx.note_append(loc, Kind::Field);
    let m = idx.maps.get_mut(key).expect("segmented key without a map");
    m.version = loc.seq;
    let old = m.fields.insert(&name(i), loc);
    let len = m.fields.len();
    match old {
        Some(old) => idx.sub_live(old),
        None => idx.large.grew(key, len),
    }
    idx.add_live(loc);
    old
}

/// Appends the record of segment `i` of the value at `key`: `value` is the
/// whole segment, or with `patch` a patch of it. The caller holds the
/// shard's writer lock.
#[inline]
fn append_segment(
    inner: &Inner,
    shard: &Shard,
    w: &mut Writer,
    key: &[u8],
    i: u64,
    patch: bool,
    value: &[u8],
) -> Result<Loc> {
    let seq = inner.next_seq();
    inner.append(
        shard,
        w,
        RecordRef {
            seq,
            expiry: 0,
            kind: Kind::Field,
            flags: if patch { FLAG_PATCH } else { 0 },
            tag: SEGMENTED_TAG,
            key,
            field: &name(i),
            value,
        },
    )
}

/// Room for the longest patch this build writes, on the stack.
struct PatchBuf([u8; PATCH_HEADER_LEN + PATCH_WRITE_MAX]);

impl Default for PatchBuf {
    fn default() -> Self {
        PatchBuf([0; PATCH_HEADER_LEN + PATCH_WRITE_MAX])
    }
}

/// Encodes into `out` the patch of segment bytes `new` against the full
/// record at `base`, over the bytes `mask` marks, if a patch may be
/// written: its runs come to at most [`PATCH_WRITE_MAX`] bytes (encoding
/// stops as soon as they outgrow it) and its record fits the active file
/// without sealing it (so the base stays in the patch's file). Its length,
/// or `None`: the whole segment is written instead. The caller holds the
/// writer lock.
fn encode_patch(
    inner: &Inner,
    w: &Writer,
    key: &[u8],
    base: Loc,
    new: &[u8],
    mask: &[u64],
    out: &mut PatchBuf,
) -> Option<usize> {
    Patch::encode_masked_into(base.offset, base.len, new, mask, &mut out.0)
        .filter(|&n| inner.fits_active(w, segment_record_len(key, n) as u64))
}

/// How one attempt at a ranged write ended.
/// The longest range [`Db::try_modify_range_if_changed`] compares.
const UNCHANGED_MAX: usize = 8;

enum Step {
    /// Written: whether the key existed, and the value's new length.
    Done((bool, u64)),
    /// Nothing written: the key exists, the range lies inside its value
    /// and the closure left its bytes as they were (asked for with
    /// `skip_unchanged`); the value's length.
    Unchanged(u64),
    /// Several records to write, no batch open, and the caller may not
    /// open one here (`try_` calls).
    NeedsBatch,
    /// The key changed under the write (expired, or changed form); nothing
    /// was written.
    Retry,
}

/// What a key holds, for a ranged read or write.
enum Shape {
    Absent,
    /// A plain value record.
    Plain,
    /// A segmented value: the segments asked for (index, file, location),
    /// the segment count, the value's length
    /// and its expiry.
    Segmented {
        wanted: Vec<(u64, Arc<DataFile>, Loc)>,
        count: u64,
        total: u64,
        expires_at: Option<u64>,
        /// `wanted` holds a sample of the range's segments (its ends and
        /// one in every `most` between, at least four), not all of it
        /// ([`Db::shape_sampled`]).
        sampled: bool,
    },
}

impl Db {
    /// What `key` holds, with the locations of segments `first..=last`
    /// (clamped to the segments that exist) taken in one look at the index.
    fn shape(&self, key: &[u8], first: u64, last: u64) -> Result<Shape> {
        self.shape_sampled(key, first, last, u64::MAX)
    }

    /// [`Db::shape`], but a range (clamped) of more than `most` segments
    /// gives only a sample of them, `sampled`: its first, its last and one
    /// in every `most` between (at least four in all), whose residency
    /// stands for the range's.
    fn shape_sampled(&self, key: &[u8], first: u64, last: u64, most: u64) -> Result<Shape> {
        let inner = &*self.inner;
        let idx = inner.shard(key).index.read();
        let Some(e) = idx.keys.get(key) else {
            return Ok(Shape::Absent);
        };
        if idx.is_expired(key, e.has_ttl, inner.now()) {
            return Ok(Shape::Absent);
        }
        if e.loc.file != MAP_FILE {
            return Ok(Shape::Plain);
        }
        let m = &idx.maps[key];
        if m.tag != SEGMENTED_TAG {
            return Err(Error::WrongKind {
                expected: "value",
                found: "map",
            });
        }
        let count = m.fields.len() as u64;
        let at = |i: u64| {
            let loc = m.fields.get(&name(i)).expect("segments form a run");
            (idx.files[&loc.file].handle.clone(), loc)
        };
        let last = last.min(count.saturating_sub(1));
        let with = |i: u64| {
            let (f, l) = at(i);
            (i, f, l)
        };
        let sampled = first <= last && last - first >= most;
        let wanted = if sampled {
            // One segment in every `most`, at least four, the last too.
            let step = ((last - first) / 3).clamp(1, most) as usize;
            (first..last)
                .step_by(step)
                .chain(std::iter::once(last))
                .map(with)
                .collect()
        } else {
            (first..=last).map(with).collect()
        };
        Ok(Shape::Segmented {
            wanted,
            count,
            total: segmented_len(m, key).expect("segments form a run"),
            expires_at: if e.has_ttl { idx.expiry_of(key) } else { None },
            sampled,
        })
    }

    /// The whole of a segmented value (`None` if the key stopped being one
    /// meanwhile), with its expiry. What [`Db::get`] returns for it.
    pub(crate) fn assemble(&self, key: &[u8]) -> Result<Option<(Vec<u8>, Option<u64>)>> {
        let Shape::Segmented {
            wanted, expires_at, ..
        } = self.shape(key, 0, u64::MAX)?
        else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(wanted.len() * SEGMENT_LEN);
        for (_, file, loc) in &wanted {
            out.extend_from_slice(&self.inner.read_segment(key, file, *loc)?);
        }
        Ok(Some((out, expires_at)))
    }

    /// The whole segmented value at `key` when its segments are in memory
    /// under `mode` (or it is too large to fetch: more than 64 span reads
    /// or 16 MiB read), read here; else what reading it elsewhere needs.
    /// `None` if the key stopped being a segmented value meanwhile. A
    /// patched segment's base is read where the value is assembled.
    pub(crate) fn segments_or_cold(
        &self,
        key: &[u8],
        mode: crate::Residency,
    ) -> Result<Option<std::result::Result<Vec<u8>, crate::ColdValue>>> {
        let Shape::Segmented { wanted, .. } = self.shape(key, 0, u64::MAX)? else {
            return Ok(None);
        };
        // Most span reads, and bytes read (gaps between records included),
        // one GET hands out; a value needing more is read here, as before.
        const MAX_READS: usize = 64;
        const MAX_BYTES: usize = 16 << 20;
        let parts: Vec<(Arc<DataFile>, Loc)> = wanted.into_iter().map(|(_, f, l)| (f, l)).collect();
        // The sampled check of each record first (after a run of resident
        // checks, one in 16 is a `mincore`): a warm value costs what it
        // did; only one found missing is looked at run by run.
        let all_resident = mode == crate::Residency::Check
            && parts
                .iter()
                .all(|(file, loc)| crate::cold::record_resident(file, *loc));
        let mut reads = Vec::new();
        if !all_resident {
            reads = self.cold_spans(key, mode, parts.clone(), parts.len());
            let bytes: usize = reads.iter().map(crate::ColdRead::record_len).sum();
            if reads.len() > MAX_READS || bytes > MAX_BYTES {
                reads.clear();
            }
        }
        let value = crate::cold::ColdValue::new(self.inner.clone(), key, parts, reads);
        Ok(Some(if value.has_reads() {
            Err(value)
        } else {
            // In memory, or too much to read elsewhere: read here.
            Ok(value.assemble()?)
        }))
    }

    /// The value's length in bytes, `None` if the key does not exist; a
    /// key holding a map is an [`Error::WrongKind`]. Reads one segment of a
    /// segmented value, not all of it.
    pub fn value_len(&self, key: &[u8]) -> Result<Option<u64>> {
        match self.shape(key, 1, 0)? {
            Shape::Absent => Ok(None),
            Shape::Plain => Ok(self.get_with(key, |v| v.len() as u64)?),
            Shape::Segmented { total, .. } => Ok(Some(total)),
        }
    }

    /// The reads of the records holding bytes `offset .. offset + len` of
    /// the value at `key` that are not in memory, for a caller that runs
    /// them elsewhere and stages their bytes ([`crate::stage_record`])
    /// before reading or changing that range in place ([`Db::read_range`],
    /// [`Db::modify_range`], [`Db::get`]): a plain value's record (read
    /// whole, whatever the range: its CRC covers all of it), or the records
    /// of the segments of a segmented value that hold the range, neighbours
    /// merged into one read as for a map's fields
    /// ([`Db::cold_field_reads`]). A segment whose record is a patch is
    /// fetched as the patch; its base, earlier in the file being appended
    /// to, is read where it is needed. Empty when residency is not checked,
    /// when the key holds no value, or when the range covers more than
    /// `long_cap` of the value's segments.
    ///
    /// A range of more than `cap` segments (up to `long_cap`, and records
    /// of at most 16 MiB together) is not looked at whole at once: looking
    /// at every segment's record costs more than a warm value's read itself
    /// (a BITCOUNT of a 1 MB bitmap reads 2,048 segments). The one look at
    /// the index that gives a short range's segments gives, for a long one,
    /// how many it covers and where a sample of them lies (its first, its
    /// last, and one in every `cap` between: at least four, 65 for 16,384
    /// segments); each of those gets a `mincore` of its record (no sampled
    /// check), and only if one of them is not in memory is the whole range
    /// looked at. Pass `long_cap <= cap` for no such ranges.
    pub fn cold_range_reads(
        &self,
        key: &[u8],
        offset: u64,
        len: u64,
        cap: usize,
        long_cap: usize,
    ) -> Vec<crate::ColdRead> {
        let mode = self.residency();
        if mode == crate::Residency::InPlace || len == 0 || cap == 0 {
            return Vec::new();
        }
        let seg = SEGMENT_LEN as u64;
        let end = offset.saturating_add(len);
        let (first, last) = (offset / seg, (end - 1) / seg);
        // One look at the index: the range's segments when at most `cap`,
        // else a sample of them (whatever the value's size: it may grow
        // meanwhile).
        let wanted = match self.shape_sampled(key, first, last, cap as u64) {
            // A plain value is one record, whatever the range.
            Ok(Shape::Plain) => return self.plain_reads(key),
            Ok(Shape::Segmented {
                wanted,
                sampled: false,
                ..
            }) => wanted,
            Ok(Shape::Segmented { wanted, count, .. }) => {
                // More than `cap` segments: fetched only up to `long_cap`
                // of them, when their records (at least the segments and
                // the key each) fit what one command may hold staged, and
                // when one of the sample is not in memory.
                let last = last.min(count - 1);
                let n = last - first + 1;
                let least = n.saturating_mul(seg + key.len() as u64);
                if n > long_cap as u64
                    || least > crate::cold::MAX_STAGED
                    || Self::probes_resident(mode, &wanted)
                {
                    return Vec::new();
                }
                match self.shape(key, first, last) {
                    Ok(Shape::Segmented { wanted, .. }) => wanted,
                    // Rewritten as a plain value meanwhile.
                    Ok(Shape::Plain) => return self.plain_reads(key),
                    _ => return Vec::new(),
                }
            }
            _ => return Vec::new(),
        };
        // A segment this thread has cached needs no read: the command
        // reads it from the cache here.
        let wanted: Vec<_> = wanted
            .into_iter()
            .filter(|(_, file, loc)| cached(file, *loc, |_| Some(())).is_none())
            .collect();
        if let [(_, file, loc)] = &wanted[..] {
            // One record: the sampled residency check of a lone read (a
            // hot bitmap's GETBIT costs no `mincore`).
            return self.cold_read(mode, key, file, *loc).into_iter().collect();
        }
        let most = wanted.len().max(cap);
        let locs = wanted.into_iter().map(|(_, f, l)| (f, l)).collect();
        let reads = self.cold_spans(key, mode, locs, most);
        if reads.len() > cap {
            // A long range of scattered segments (SETBITs among other
            // writes): more separate reads than a short range may make
            // (`cold_spans` gives at most `most`).
            return Vec::new();
        }
        reads
    }

    /// A plain value's one record, as [`Db::cold_range_reads`] gives it.
    fn plain_reads(&self, key: &[u8]) -> Vec<crate::ColdRead> {
        self.cold_value_read(key)
            .ok()
            .flatten()
            .into_iter()
            .collect()
    }

    /// Whether the segments [`Db::shape_sampled`] gave for a long range
    /// are in memory under `mode` (or cached on this thread):
    /// [`Db::cold_range_reads`]' look at it. Each is a `mincore` of its
    /// record: not the sampled check of a lone read, which on a busy warm
    /// thread answers "resident" for 15 of 16 checks without looking.
    /// False under [`crate::Residency::AllCold`].
    fn probes_resident(mode: crate::Residency, probes: &[(u64, Arc<DataFile>, Loc)]) -> bool {
        mode == crate::Residency::Check
            && probes.iter().all(|(_, file, loc)| {
                cached(file, *loc, |_| Some(())).is_some()
                    || file
                        .map_ref()
                        .is_some_and(|map| map.resident(loc.offset as u64, loc.len as usize))
            })
    }

    /// Up to `len` bytes of the value from byte `offset` (fewer at its end,
    /// none past it) and the value's whole length; `None` if the key does
    /// not exist. Reads only the segments the range covers.
    pub fn read_range(
        &self,
        key: &[u8],
        offset: u64,
        len: usize,
    ) -> Result<Option<(Vec<u8>, u64)>> {
        let seg = SEGMENT_LEN as u64;
        // The end of the range, saturated: a length may run past any value.
        let end = offset.saturating_add(len as u64);
        let (first, last) = if len == 0 {
            (1, 0)
        } else {
            (offset / seg, (end - 1) / seg)
        };
        if first == last {
            if let Some(hit) = self.read_range_cached(key, offset, end) {
                return Ok(Some(hit));
            }
        }
        match self.shape(key, first, last)? {
            Shape::Absent => Ok(None),
            Shape::Plain => self.get_with(key, |v| {
                let start = (offset.min(v.len() as u64)) as usize;
                let end = start + len.min(v.len() - start);
                (v[start..end].to_vec(), v.len() as u64)
            }),
            Shape::Segmented { wanted, total, .. } => {
                let mut out = Vec::with_capacity(len.min(total.saturating_sub(offset) as usize));
                // A read inside one segment (a GETBIT, a register) caches
                // the segment even when its record is whole: a read-mostly
                // bitmap's next read of it is then a copy, not a record
                // read and checked. A longer read (a scan) caches only
                // patched segments, so it does not flush the cache.
                let alone = wanted.len() == 1;
                for (i, file, loc) in &wanted {
                    let base = i * seg;
                    let from = offset.saturating_sub(base) as usize;
                    let to = (end - base).min(seg) as usize;
                    self.inner
                        .read_segment_window(key, file, *loc, from, to, alone, &mut out)?;
                }
                Ok(Some((out, total)))
            }
        }
    }

    /// [`Db::read_range`] of bytes `offset .. end` of a segmented value
    /// when they lie in one segment that this thread has cached: one look
    /// at the index, no record read. `None` when any of that does not hold.
    fn read_range_cached(&self, key: &[u8], offset: u64, end: u64) -> Option<(Vec<u8>, u64)> {
        let mut out = Vec::new();
        let total =
            self.read_ranges_cached(key, &[(offset, (end - offset) as usize)], |_, b| {
                out.extend_from_slice(b)
            })?;
        Some((out, total))
    }

    /// Several ranged reads of a segmented value seen at one instant,
    /// from this thread's cache of applied segments: under one look at the
    /// index, `f(k, bytes)` gets range `k` of `ranges` (`(offset, len)`,
    /// cut at the value's end, as [`Db::read_range`] cuts it), and the
    /// value's length comes back. `None` unless the key is a live
    /// segmented value and every range lies in one segment (no empty
    /// range, none past the value's last segment) whose record this thread
    /// has cached; `f` may then have seen some of the ranges, which the
    /// caller drops. What a read-only check of a few bytes of a hot value
    /// (a PFADD that raises no register) needs without the key's lock.
    pub fn read_ranges_cached(
        &self,
        key: &[u8],
        ranges: &[(u64, usize)],
        mut f: impl FnMut(usize, &[u8]),
    ) -> Option<u64> {
        let seg = SEGMENT_LEN as u64;
        let inner = &*self.inner;
        let idx = inner.shard(key).index.read();
        let (m, total) = live_segmented(&idx, key, inner.now())?;
        let count = m.fields.len() as u64;
        PATCHED.with(|c| {
            let c = c.borrow();
            for (k, &(offset, len)) in ranges.iter().enumerate() {
                let end = offset.checked_add(len as u64)?;
                let i = offset / seg;
                if len == 0 || (end - 1) / seg != i || i >= count {
                    return None;
                }
                let head = m.fields.get(&name(i))?;
                let uid = idx.files.get(&head.file)?.handle.uid;
                let bytes = &c.get(&(uid, head.offset))?.bytes;
                let to = ((end - i * seg) as usize).min(bytes.len());
                let from = ((offset - i * seg) as usize).min(to);
                f(k, &bytes[from..to]);
            }
            Some(total)
        })
    }

    /// Writes `data` at byte `offset` of the value at `key`, growing it
    /// with zero bytes as needed and creating it if absent; the key keeps
    /// its expiry. Returns the value's new length. Empty `data` changes
    /// nothing (and creates nothing). A key holding a map is an
    /// [`Error::WrongKind`].
    ///
    /// Not atomic with respect to another writer of the same key between
    /// its read and its write: callers serialise writers of a key (the
    /// server holds the key's lock), as for any read-modify-write.
    pub fn write_range(&self, key: &[u8], offset: u64, data: &[u8]) -> Result<u64> {
        let (_, len) = self.modify_range(key, offset, data.len(), |b| b.copy_from_slice(data))?;
        Ok(len)
    }

    /// [`Db::write_range`] for a caller that holds a lock of its own which
    /// a batch must not be opened under (a server's key lock: its batched
    /// commands take the batch first, then the key). When the write needs
    /// several records and the thread has no batch open, nothing is
    /// written and `None` comes back: open the batch, then call again.
    pub fn try_write_range(&self, key: &[u8], offset: u64, data: &[u8]) -> Result<Option<u64>> {
        let mut f = |b: &mut [u8]| b.copy_from_slice(data);
        Ok(self
            .modify_range_impl(key, offset, data.len(), &mut f, false, false)?
            .map(|(_, len, _)| len))
    }

    /// [`Db::modify_range`] with [`Db::try_write_range`]'s rule: `None`
    /// (nothing written, `f` perhaps called) when the write needs a batch
    /// the thread has not opened. `f` must not call into this database,
    /// as for [`Db::modify_range`].
    pub fn try_modify_range(
        &self,
        key: &[u8],
        offset: u64,
        len: usize,
        mut f: impl FnMut(&mut [u8]),
    ) -> Result<Option<(bool, u64)>> {
        Ok(self
            .modify_range_impl(key, offset, len, &mut f, false, false)?
            .map(|(existed, total, _)| (existed, total)))
    }

    /// [`Db::try_modify_range`] that writes nothing when `f` leaves the
    /// bytes as they were and the range lies inside the existing value
    /// (a SETBIT of a bit already as asked: Redis then publishes nothing
    /// and leaves WATCH alone). Returns whether the key existed, the
    /// value's length and whether anything was written. A write that
    /// creates or grows the value always writes. Ranges of more than 8
    /// bytes are always written.
    pub fn try_modify_range_if_changed(
        &self,
        key: &[u8],
        offset: u64,
        len: usize,
        mut f: impl FnMut(&mut [u8]),
    ) -> Result<Option<(bool, u64, bool)>> {
        self.modify_range_impl(key, offset, len, &mut f, false, true)
    }

    /// Reads bytes `offset .. offset + len` of the value at `key` (zeros
    /// past its end, or for an absent key), lets `f` change them in place,
    /// and writes them back, growing or creating the value as
    /// [`Db::write_range`] does: one look at the index and one read of the
    /// segments involved. Returns whether the key existed and the value's
    /// new length. `len == 0` calls nothing and changes nothing. A write
    /// of several records opens a write batch itself. `f` is called again
    /// if the key changes form under the write (another thread's), and
    /// only its last result is written. `f` must only change the bytes it
    /// is given, never call into this database: it may run under the
    /// shard's writer lock (`Db::modify_cached`).
    pub fn modify_range(
        &self,
        key: &[u8],
        offset: u64,
        len: usize,
        mut f: impl FnMut(&mut [u8]),
    ) -> Result<(bool, u64)> {
        let (existed, total, _) = self
            .modify_range_impl(key, offset, len, &mut f, true, false)?
            .expect("a write allowed to open its batch always runs");
        Ok((existed, total))
    }

    fn modify_range_impl(
        &self,
        key: &[u8],
        offset: u64,
        len: usize,
        f: &mut dyn FnMut(&mut [u8]),
        auto_batch: bool,
        skip_unchanged: bool,
    ) -> Result<Option<(bool, u64, bool)>> {
        // Only small ranges are compared (kept on the stack before `f`).
        let skip_unchanged = skip_unchanged && len <= UNCHANGED_MAX;
        if let Some(done) = self.modify_cached(key, offset, len, f, skip_unchanged)? {
            return Ok(Some(done));
        }
        for _ in 0..8 {
            match self.modify_once(key, offset, len, f, auto_batch, skip_unchanged)? {
                Step::Done((existed, total)) => return Ok(Some((existed, total, true))),
                Step::Unchanged(total) => return Ok(Some((true, total, false))),
                Step::NeedsBatch => return Ok(None),
                Step::Retry => continue,
            }
        }
        Err(Error::WrongKind {
            expected: "a value",
            found: "a key changing form under every write",
        })
    }

    /// The common ranged write (a SETBIT, a PFADD's register) done from
    /// this thread's cache of applied segments, reading no record: the
    /// range lies in one segment that is not the last (so the value keeps
    /// its length), no batch is open or in flight, and that segment's
    /// record lies in the active file and is cached here with the base a
    /// patch may name. The cached bytes are changed and the patch against
    /// the base appended (the whole segment when the patch would carry too
    /// much or the file is full), exactly what [`Db::modify_once`] writes.
    /// `None`, with `f` not called and nothing written, when any of that
    /// does not hold: the general path then reads the segment, and caches
    /// what it writes for the next time. `f` runs under the shard's writer
    /// lock (so the segment cannot change between the look and the write):
    /// callers' closures only change the bytes they are given.
    fn modify_cached(
        &self,
        key: &[u8],
        offset: u64,
        len: usize,
        f: &mut dyn FnMut(&mut [u8]),
        skip_unchanged: bool,
    ) -> Result<Option<(bool, u64, bool)>> {
        let seg = SEGMENT_LEN as u64;
        let i = offset / seg;
        if len == 0 || (offset + len as u64 - 1) / seg != i || self.in_batch() {
            return Ok(None);
        }
        let inner = &*self.inner;
        inner.check_writable()?;
        let shard = inner.shard(key);
        // The segment's record, its file's uid and the value's length, if
        // the key is a live segmented value and segment `i` not its last.
        let look = || {
            let idx = shard.index.read();
            let (m, total) = live_segmented(&idx, key, inner.now())?;
            if i + 1 >= m.fields.len() as u64 {
                return None;
            }
            let head = m.fields.get(&name(i))?;
            let uid = idx.files.get(&head.file)?.handle.uid;
            Some((head, uid, total))
        };
        // Cached here whole, with a base in the segment's own file, the
        // active one. All of it is looked at under the shard's writer lock
        // (one look at the index), so the segment's record cannot change
        // between the look and the write; a write this path cannot take (a
        // short plain value, a segment not cached here) costs that lock and
        // the look. The entry leaves the cache while it is checked and
        // written: the old record stops being the segment's, and one borrow
        // of the cache serves the whole write (nothing below reads the
        // cache: `f` only changes the bytes it is given, and an append never
        // reads a segment).
        let r = PATCHED.with(|c| {
            let mut c = c.borrow_mut();
            let mut w = shard.writer.lock();
            // As in `patch_of`, under the writer lock: a batch begun later
            // appends its members to this shard after this record.
            if inner.group.busy() {
                return None;
            }
            let (head, uid, total) = look()?;
            if head.file != w.file_id {
                return None;
            }
            let at = (uid, head.offset);
            let mut entry = c.remove(&at)?;
            let usable = entry.bytes.len() == SEGMENT_LEN
                && matches!(&entry.base, Some(Some((b, bytes)))
                    if b.file == head.file && bytes.len() == SEGMENT_LEN);
            if !usable {
                // Not written here after all: the entry goes back as it was.
                c.insert(at, entry);
                return None;
            }
            let Some(Some((base, base_bytes))) = &entry.base else {
                unreachable!("checked above");
            };
            let (base, from) = (*base, (offset - i * seg) as usize);
            let mut before = [0u8; UNCHANGED_MAX];
            if skip_unchanged {
                before[..len].copy_from_slice(&entry.bytes[from..from + len]);
            }
            f(&mut entry.bytes[from..from + len]);
            if skip_unchanged && entry.bytes[from..from + len] == before[..len] {
                // Nothing to write (never the last segment here, so the
                // value keeps its length): the entry goes back as it was.
                c.insert(at, entry);
                return Some(Ok((w, total, false)));
            }
            // The bytes that differ from the base: all of them compared the
            // first time, then only those `f` was given.
            let diff = match &mut entry.diff {
                Some(diff) => {
                    Patch::mark(base_bytes, &entry.bytes, from, len, diff);
                    diff
                }
                None => {
                    let mut diff = DiffMask::default();
                    Patch::mark(base_bytes, &entry.bytes, 0, SEGMENT_LEN, &mut diff);
                    entry.diff.insert(diff)
                }
            };
            let mut v = PatchBuf::default();
            let n = encode_patch(inner, &w, key, base, &entry.bytes, diff, &mut v);
            let patch = n.is_some();
            let value: &[u8] = match n {
                Some(n) => &v.0[..n],
                None => &entry.bytes,
            };
            // On an error the changed entry is dropped: the old record
            // stays the segment's, and is read again when next asked for.
            let loc = match append_segment(inner, shard, &mut w, key, i, patch, value) {
                Ok(loc) => loc,
                Err(e) => return Some(Err(e)),
            };
            let mut idx = shard.index.write();
            index_segment(&mut idx, key, i, loc);
            if let Some(file) = idx.files.get(&loc.file) {
                // A whole record, outside any batch, is the next patch's base.
                if !patch {
                    entry.base = Some(Some((loc, entry.bytes.clone())));
                    entry.diff = Some(DiffMask::default());
                }
                insert_bounded(&mut c, (file.handle.uid, loc.offset), entry);
            }
            drop(idx);
            Some(Ok((w, total, true)))
        });
        match r {
            None => Ok(None),
            Some(Err(e)) => Err(e),
            Some(Ok((w, total, false))) => {
                drop(w);
                Ok(Some((true, total, false)))
            }
            Some(Ok((w, total, true))) => {
                inner.finish_write(shard, w)?;
                Ok(Some((true, total, true)))
            }
        }
    }

    fn modify_once(
        &self,
        key: &[u8],
        offset: u64,
        len: usize,
        f: &mut dyn FnMut(&mut [u8]),
        auto_batch: bool,
        skip_unchanged: bool,
    ) -> Result<Step> {
        let end = offset + len as u64;
        if len == 0 {
            let n = self.value_len(key)?;
            return Ok(Step::Done((n.is_some(), n.unwrap_or(0))));
        }
        let seg = SEGMENT_LEN as u64;
        match self.shape(key, offset / seg, (end - 1) / seg)? {
            Shape::Absent | Shape::Plain => {
                let (mut v, at, existed) = match self.get_versioned(key)? {
                    Some(v) => (v.value, v.expires_at, true),
                    None => (Vec::new(), None, false),
                };
                let inside = existed && v.len() >= end as usize;
                if v.len() < end as usize {
                    v.resize(end as usize, 0);
                }
                let range = offset as usize..end as usize;
                let mut before = [0u8; UNCHANGED_MAX];
                if skip_unchanged && inside {
                    before[..len].copy_from_slice(&v[range.clone()]);
                }
                f(&mut v[range.clone()]);
                if skip_unchanged && inside && v[range] == before[..len] {
                    return Ok(Step::Unchanged(v.len() as u64));
                }
                if v.len() <= SEGMENT_ABOVE {
                    self.put_with_expiry(key, &v, at)?;
                    return Ok(Step::Done((existed, v.len() as u64)));
                }
                let segments: Vec<(u64, &[u8])> = v
                    .chunks(SEGMENT_LEN)
                    .enumerate()
                    .map(|(i, c)| (i as u64, c))
                    .collect();
                Ok(
                    match self.put_segments(key, &segments, Some(at), None, auto_batch)? {
                        Step::Done(_) => Step::Done((existed, v.len() as u64)),
                        other => other,
                    },
                )
            }
            Shape::Segmented {
                wanted,
                count,
                total,
                ..
            } => {
                let new_total = total.max(end);
                // Segments to write: those the range covers, and when the
                // value grows, the old last one (filled up with zeros) and
                // every new one up to the range.
                let first = if end > total {
                    (offset / seg).min(count - 1)
                } else {
                    offset / seg
                };
                let upto = if end > total {
                    (new_total - 1) / seg
                } else {
                    (end - 1) / seg
                };
                let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
                // One segment, not the last (whose record's length gives
                // the value's), and no growth: the write may be a patch.
                let patchable = first == upto && end <= total && first + 1 < count;
                let mut patch_from = None;
                for i in first..=upto {
                    let mut bytes = if i < count {
                        match wanted.iter().find(|(j, ..)| *j == i) {
                            Some((_, file, loc)) if patchable => {
                                let (b, base) =
                                    self.inner.read_segment_from(key, file, *loc, true)?;
                                patch_from = base.map(|(base, base_bytes)| PatchFrom {
                                    i,
                                    head: *loc,
                                    base,
                                    base_bytes,
                                });
                                b
                            }
                            Some((_, file, loc)) => self.inner.read_segment(key, file, *loc)?,
                            None => self.get_segment_of(key, i)?,
                        }
                    } else {
                        Vec::new()
                    };
                    bytes.resize(segment_len(i, new_total), 0);
                    out.push((i, bytes));
                }
                // The range, gathered from its segments, changed by `f`,
                // and scattered back.
                let mut window = vec![0u8; len];
                let parts = |i: u64, n: usize| {
                    let base = i * seg;
                    let from = offset.max(base);
                    let to = end.min(base + n as u64);
                    (from < to).then(|| {
                        (
                            (from - base) as usize..(to - base) as usize,
                            (from - offset) as usize..(to - offset) as usize,
                        )
                    })
                };
                for (i, bytes) in &out {
                    if let Some((s, w)) = parts(*i, bytes.len()) {
                        window[w].copy_from_slice(&bytes[s]);
                    }
                }
                let mut before = [0u8; UNCHANGED_MAX];
                let inside = skip_unchanged && end <= total;
                if inside {
                    before[..len].copy_from_slice(&window);
                }
                f(&mut window);
                if inside && window[..] == before[..len] {
                    return Ok(Step::Unchanged(total));
                }
                for (i, bytes) in &mut out {
                    if let Some((s, w)) = parts(*i, bytes.len()) {
                        bytes[s].copy_from_slice(&window[w]);
                    }
                }
                let segments: Vec<(u64, &[u8])> = out.iter().map(|(i, b)| (*i, &b[..])).collect();
                let patch = patch_from.as_ref();
                Ok(
                    match self.put_segments(key, &segments, None, patch, auto_batch)? {
                        Step::Done(_) => Step::Done((true, new_total)),
                        other => other,
                    },
                )
            }
        }
    }

    /// Segment `i` of a segmented value, looked up on its own (a segment
    /// between the range written and the old end, which `shape` did not
    /// collect).
    fn get_segment_of(&self, key: &[u8], i: u64) -> Result<Vec<u8>> {
        match self.shape(key, i, i)? {
            Shape::Segmented { wanted, .. } if !wanted.is_empty() => {
                let (_, file, loc) = &wanted[0];
                self.inner.read_segment(key, file, *loc)
            }
            _ => Err(Error::WrongKind {
                expected: "segmented value",
                found: "something else",
            }),
        }
    }

    /// Writes segments (index, bytes) of the segmented value at `key`.
    /// With `replace: Some(expiry)` the key's plain value (or nothing) is
    /// replaced by these segments, which must then be all of them, and the
    /// expiry carried over. Several records form one write batch, and all
    /// of them enter the index under one lock. With `patch`, one segment is
    /// written as a patch of the base named there if it may be (see
    /// [`Db::patch_of`]).
    fn put_segments(
        &self,
        key: &[u8],
        segments: &[(u64, &[u8])],
        replace: Option<Option<u64>>,
        patch: Option<&PatchFrom>,
        auto_batch: bool,
    ) -> Result<Step> {
        let inner = &*self.inner;
        for (_, b) in segments {
            crate::format::check_sizes(key, &name(0), b.len())?;
        }
        inner.check_writable()?;
        // A replacement always writes several records (a tombstone or
        // several segments), so this is decided before any lock: the batch
        // comes first, then the writer lock.
        let records = segments.len() + usize::from(replace.is_some());
        if records > 1 && !auto_batch && !self.in_batch() {
            return Ok(Step::NeedsBatch);
        }
        let batch = (records > 1).then(|| self.batch());
        let shard = inner.shard(key);
        let mut w = shard.writer.lock();
        inner.purge_if_expired(shard, &mut w, key, None)?;
        // What the key holds now, under the writer lock: a patch needs the
        // segmented value `shape` saw; a replacement a plain value or
        // nothing. Anything else (it expired, or another thread changed
        // it) makes the caller look again; nothing is written.
        let (had_value, patch_head_unchanged) = {
            let idx = shard.index.read();
            let (ok, had_value) = match idx.keys.get(key) {
                None => (replace.is_some(), false),
                Some(e) if e.loc.file != MAP_FILE => (replace.is_some(), true),
                Some(_) => (
                    replace.is_none() && idx.maps[key].tag == SEGMENTED_TAG,
                    false,
                ),
            };
            if !ok {
                return Ok(Step::Retry);
            }
            // A patch is written only over the index entry it was read from.
            let unchanged = patch.is_some_and(|p| {
                idx.maps.get(key).and_then(|m| m.fields.get(&name(p.i))) == Some(p.head)
            });
            (had_value, unchanged)
        };
        // Replacing a value: a tombstone first, so that no older record of
        // the key (an earlier segmented life's segments or expiry, which
        // only the value's record shadowed) comes back once compaction
        // drops that record, or at recovery.
        let dead = if had_value {
            let seq = inner.next_seq();
            Some(inner.append(shard, &mut w, crate::db::tombstone(seq, key))?)
        } else {
            None
        };
        let patched = match (patch, segments) {
            (Some(p), [one])
                if patch_head_unchanged
                    && replace.is_none()
                    && batch.is_none()
                    && !self.in_batch() =>
            {
                self.patch_of(&w, key, p, *one)
            }
            _ => None,
        };
        // A lone segment written over the value (a SETBIT, a PFADD's
        // register) is cached on this thread as written, with the base a
        // later patch of it would name: the next write of a hot segment
        // then reads no record at all. Not for a replacement, whose
        // records may be batch members of a bigger write.
        let through = match (segments, replace) {
            ([(_, bytes)], None) => {
                let base = match (&patched, patch) {
                    (Some(_), Some(p)) => CachedBase::Of(p.base, p.base_bytes.as_slice().into()),
                    // A full record outside any batch may be a base itself.
                    (None, _) if batch.is_none() && !self.in_batch() => CachedBase::Itself,
                    _ => CachedBase::None,
                };
                Some((Box::<[u8]>::from(*bytes), base))
            }
            _ => None,
        };
        let mut locs = Vec::with_capacity(segments.len());
        for (i, bytes) in segments {
            // Never compressed: `segmented_len` reads the value's length
            // off the last segment's record length.
            let loc = match &patched {
                Some(v) => append_segment(inner, shard, &mut w, key, *i, true, v)?,
                None => append_segment(inner, shard, &mut w, key, *i, false, bytes)?,
            };
            locs.push((*i, loc));
        }
        let meta = match replace {
            Some(Some(at)) => {
                let seq = inner.next_seq();
                let loc = inner.append(
                    shard,
                    &mut w,
                    RecordRef {
                        seq,
                        expiry: at,
                        kind: Kind::MapMeta,
                        flags: 0,
                        tag: SEGMENTED_TAG,
                        key,
                        field: &[],
                        value: &[],
                    },
                )?;
                Some((loc, at))
            }
            _ => None,
        };
        {
            let mut idx = shard.index.write();
            if let Some(loc) = dead {
                idx.note_append(loc, Kind::Delete);
            }
            if replace.is_some() {
                idx.remove_key(key);
                let first = locs.first().map_or(0, |(_, l)| l.seq);
                idx.keys.insert(
                    key,
                    Loc {
                        file: MAP_FILE,
                        offset: 0,
                        len: 0,
                        seq: first,
                    },
                    false,
                );
                idx.maps.insert(
                    key.into(),
                    MapEntry {
                        tag: SEGMENTED_TAG,
                        ..MapEntry::default()
                    },
                );
            }
            for &(i, loc) in &locs {
                if let Some(old) = index_segment(&mut idx, key, i, loc) {
                    if let Some(file) = idx.files.get(&old.file) {
                        uncache(file.handle.uid, old.offset);
                    }
                }
            }
            if let (Some((bytes, base)), [(_, loc)]) = (through, &locs[..]) {
                if let Some(file) = idx.files.get(&loc.file) {
                    let base = match base {
                        CachedBase::Of(l, b) => Some((l, b)),
                        CachedBase::Itself => Some((*loc, bytes.clone())),
                        CachedBase::None => None,
                    };
                    cache_uid(file.handle.uid, *loc, bytes, Some(base));
                }
            }
            if let Some((loc, at)) = meta {
                idx.note_append(loc, Kind::MapMeta);
                let m = idx.maps.get_mut(key).expect("segmented key without a map");
                m.version = loc.seq;
                m.expiry = at;
                m.meta = Some(loc);
                idx.add_live(loc);
                idx.keys.set_ttl_flag(key, true);
                idx.set_expiry(key, at);
            }
        }
        inner.finish_write(shard, w)?;
        if let Some(b) = batch {
            b.commit()?;
        }
        Ok(Step::Done((true, 0)))
    }

    /// The value of a patch record that writes `bytes` as segment `i`, if
    /// one may (the caller has checked that the segment's index entry is
    /// still the one read): its base lies in the active file (a patch never names a record in another
    /// file, so compaction always finds a patch's base in the file it
    /// copies), the record fits there without sealing it, and the runs
    /// come to at most [`PATCH_WRITE_MAX`] bytes. The caller holds the writer
    /// lock and no batch is open.
    fn patch_of(
        &self,
        w: &crate::db::Writer,
        key: &[u8],
        p: &PatchFrom,
        (i, bytes): (u64, &[u8]),
    ) -> Option<Vec<u8>> {
        if i != p.i
            || p.base.file != w.file_id
            || bytes.len() != p.base_bytes.len()
            || bytes.len() > SEGMENT_LEN
        {
            return None;
        }
        // Segment i is not the last now; it must not become the last after
        // a crash either, which it would if the later segments were members
        // of a batch (another thread's: batches do not isolate writers)
        // that never commits, and `shape` would then read the value's
        // length off a patch. No batch of the group in flight: every batch
        // member in the index has its commit in the log (and, for a batch
        // that wrote to several databases, in the commit log).
        if self.inner.group.busy() {
            return None;
        }
        let mut mask = DiffMask::default();
        Patch::mark(&p.base_bytes, bytes, 0, bytes.len(), &mut mask);
        let mut v = PatchBuf::default();
        let n = encode_patch(&self.inner, w, key, p.base, bytes, &mask, &mut v)?;
        Some(v.0[..n].to_vec())
    }

    /// Writes whole the last segment of every segmented value whose last
    /// segment's record is a patch, and returns how many it wrote. A
    /// patch is never written for the last segment, but it becomes the
    /// last when the later segments were members of a batch that recovery
    /// found uncommitted: a power loss under `appendfsync everysec` can
    /// keep a patch written after a batch's commit and lose the commit
    /// (another shard's file). `shape` reads the value's length off the
    /// last segment's record, so it must be whole. Called by open, only
    /// when recovery dropped an uncommitted batch.
    pub(crate) fn write_patched_last_segments_whole(&self) -> Result<usize> {
        let inner = &*self.inner;
        let mut written = 0;
        for shard in &inner.shards {
            let lasts: Vec<(Vec<u8>, u64, Arc<DataFile>, Loc)> = {
                let idx = shard.index.read();
                idx.maps
                    .iter()
                    .filter(|(_, m)| m.tag == SEGMENTED_TAG && !m.fields.is_empty())
                    .filter_map(|(k, m)| {
                        let i = m.fields.len() as u64 - 1;
                        let loc = m.fields.get(&name(i))?;
                        let file = idx.files.get(&loc.file)?.handle.clone();
                        Some((k.to_vec(), i, file, loc))
                    })
                    .collect()
            };
            for (key, i, file, loc) in lasts {
                // SAFETY: `file` and `loc` were read from this shard's index.
                let patched = unsafe {
                    inner.read_with(shard, &file, loc, |rec| {
                        Ok(rec.header.flags & FLAG_PATCH != 0)
                    })?
                };
                if !patched {
                    continue;
                }
                let (bytes, _) = self.inner.read_segment_from(&key, &file, loc, false)?;
                if !matches!(
                    self.put_segments(&key, &[(i, &bytes)], None, None, true)?,
                    Step::Done(_)
                ) {
                    // It expired or changed meanwhile: nothing to fix.
                    continue;
                }
                tracing::warn!(key = %String::from_utf8_lossy(&key), segment = i,
                    "the last segment of a segmented value was a patch after recovery dropped an uncommitted batch; wrote it whole");
                written += 1;
            }
        }
        Ok(written)
    }
}

/// Reads of a segment's record (a full record, or a patch applied to its
/// base), on the engine's shared state: what [`Db`]'s ranged reads use,
/// and what a [`crate::ColdValue`] assembles with after its reads.
impl crate::db::Inner {
    pub(crate) fn read_segment(&self, key: &[u8], file: &DataFile, loc: Loc) -> Result<Vec<u8>> {
        Ok(self.read_segment_from(key, file, loc, false)?.0)
    }

    /// Appends bytes `from .. to` of the segment whose record is at `loc`
    /// (fewer at its end) to `out`: what [`Db::read_segment`] gives, without
    /// copying the rest of the segment (a GETBIT wants one byte of 512).
    #[allow(clippy::too_many_arguments)]
    fn read_segment_window(
        &self,
        key: &[u8],
        file: &DataFile,
        loc: Loc,
        from: usize,
        to: usize,
        cache_whole: bool,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let window = |bytes: &[u8], out: &mut Vec<u8>| {
            let to = to.min(bytes.len());
            if from < to {
                out.extend_from_slice(&bytes[from..to]);
            }
        };
        let hit = cached(file, loc, |e| {
            window(&e.bytes, out);
            Some(())
        });
        if hit.is_some() {
            return Ok(());
        }
        let head = self.read_head(key, file, loc, |rec| {
            let v = rec.value_ref()?;
            window(&v, out);
            Ok(cache_whole.then(|| Box::<[u8]>::from(&v[..])))
        })?;
        let p = match head {
            Head::Full(Some(bytes)) => {
                // Not asked for a base: the write path reads it again.
                cache(file, loc, bytes, None);
                return Ok(());
            }
            Head::Full(None) => return Ok(()),
            Head::Patch(p) => p,
        };
        let (bytes, _) = self.apply_patch(key, file, loc, &p, false)?;
        window(&bytes, out);
        // Kept for the next read of this segment on this thread (a hot
        // sketch header is read by every PFADD and PFCOUNT).
        cache(file, loc, bytes.into(), None);
        Ok(())
    }

    /// The bytes of the segment whose record is at `loc`, a full record or
    /// a patch applied to its base. With `want_base`, also the full record
    /// a new patch of this segment may name, with its bytes: the record
    /// itself or the patch's base, unless that is a batch member (a patch
    /// is not one, and must not outlive a batch that never committed).
    fn read_segment_from(
        &self,
        key: &[u8],
        file: &DataFile,
        loc: Loc,
        want_base: bool,
    ) -> Result<(Vec<u8>, Option<Base>)> {
        let hit = cached(file, loc, |e| {
            let base = match (&e.base, want_base) {
                (_, false) => None,
                (None, true) => return None,
                (Some(b), true) => b.as_ref().map(|(l, b)| (*l, b.to_vec())),
            };
            Some((e.bytes.to_vec(), base))
        });
        if let Some(hit) = hit {
            return Ok(hit);
        }
        let head = self.read_head(key, file, loc, |rec| {
            Ok((rec.value()?, rec.header.flags & FLAG_BATCH == 0))
        })?;
        let p = match head {
            Head::Full((v, may_base)) => {
                let base = (want_base && may_base).then(|| (loc, v.clone()));
                return Ok((v, base));
            }
            Head::Patch(p) => p,
        };
        let (bytes, base) = self.apply_patch(key, file, loc, &p, want_base)?;
        cache(
            file,
            loc,
            bytes.as_slice().into(),
            want_base.then(|| base.as_ref().map(|(l, b)| (*l, b.as_slice().into()))),
        );
        Ok((bytes, base))
    }

    /// Reads the record at a segment's index entry `loc`: a full record is
    /// handed to `full`; a patch comes back as what reading its base needs.
    fn read_head<R>(
        &self,
        key: &[u8],
        file: &DataFile,
        loc: Loc,
        full: impl FnOnce(Record<'_>) -> std::result::Result<R, &'static str>,
    ) -> Result<Head<R>> {
        let inner = self;
        // SAFETY: `file` and `loc` were read from this shard's index
        // (`shape`); the handle keeps the file mapped.
        unsafe {
            inner.read_with(inner.shard(key), file, loc, |rec| {
                if rec.header.flags & FLAG_PATCH == 0 {
                    return full(rec).map(Head::Full);
                }
                let p = Patch::decode(rec.stored_value())?;
                let mut runs = [0u8; PATCH_MAX];
                runs.get_mut(..p.runs.len())
                    .ok_or("patch longer than a patch may be")?
                    .copy_from_slice(p.runs);
                Ok(Head::Patch(PatchHead {
                    base: Loc {
                        file: loc.file,
                        offset: p.base_offset,
                        len: p.base_len,
                        seq: 0,
                    },
                    runs,
                    runs_len: p.runs.len(),
                    field: rec
                        .field()
                        .try_into()
                        .map_err(|_| "segment name not 8 bytes")?,
                }))
            })
        }
    }

    /// The segment a patch (at `loc`) stands for: its base, read and
    /// checked, with the runs applied. With `want_base`, also the base's
    /// location and bytes, if a new patch may name it (not a batch member).
    fn apply_patch(
        &self,
        key: &[u8],
        file: &DataFile,
        loc: Loc,
        p: &PatchHead,
        want_base: bool,
    ) -> Result<(Vec<u8>, Option<Base>)> {
        let inner = self;
        let shard = inner.shard(key);
        let corrupt = |reason: &str| Error::Corrupt {
            path: shard.data_path(loc.file),
            offset: loc.offset as u64,
            reason: reason.into(),
        };
        if u64::from(p.base.offset) + u64::from(p.base.len) > u64::from(loc.offset) {
            return Err(corrupt("patch names a base that does not precede it"));
        }
        // SAFETY: the base lies in the same file before the patch, which is
        // an index entry: its bytes were written before the patch's, below
        // the file's length, and are never written again.
        let (mut bytes, may_base) = unsafe {
            inner.read_with(shard, file, p.base, |rec| {
                if !is_patch_base(&rec, key, &p.field) {
                    return Err("patch base is not a full record of its segment");
                }
                Ok((
                    rec.stored_value().to_vec(),
                    rec.header.flags & FLAG_BATCH == 0,
                ))
            })?
        };
        let base = (want_base && may_base).then(|| (p.base, bytes.clone()));
        Patch {
            base_offset: p.base.offset,
            base_len: p.base.len,
            runs: &p.runs[..p.runs_len],
        }
        .apply(&mut bytes)
        .map_err(corrupt)?;
        Ok((bytes, base))
    }
}
