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
//! To every other caller the key is a value: [`Db::get`] assembles it,
//! [`Db::meta`] says [`crate::KeyKind::Value`], the map calls refuse it as
//! they refuse any value, [`Db::put`] and [`Db::delete`] replace or remove
//! it whole, and expiry works as for any key. No record kind is new: a
//! segment is a field record and the map's expiry a map-metadata record,
//! so recovery, hint files and compaction need nothing of their own.
//!
//! Invariants: segments `0..n` all exist; every segment but the last holds
//! exactly [`SEGMENT_LEN`] bytes and the last `1..=SEGMENT_LEN`. A write
//! that changes several records (turning a value into segments, a range
//! across a boundary, growth past the end) runs as one write batch, so a
//! crash keeps all of it or none; and its records enter the index under
//! one lock, so a reader sees the value before or after it, never between.

use std::sync::Arc;

use crate::db::{DataFile, MapEntry};
use crate::format::{Kind, RecordRef, RECORD_HEADER_LEN};
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

fn name(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

/// Length of segment `i` of a value of `total` bytes.
fn segment_len(i: u64, total: u64) -> usize {
    (total - i * SEGMENT_LEN as u64).min(SEGMENT_LEN as u64) as usize
}

/// How one attempt at a ranged write ended.
enum Step {
    /// Written: whether the key existed, and the value's new length.
    Done((bool, u64)),
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
    /// the last segment's location, the segment count, the value's length
    /// and its expiry.
    Segmented {
        wanted: Vec<(u64, Arc<DataFile>, Loc)>,
        last: (Arc<DataFile>, Loc),
        count: u64,
        total: u64,
        expires_at: Option<u64>,
    },
}

impl Db {
    /// What `key` holds, with the locations of segments `first..=last`
    /// (clamped to the segments that exist) taken in one look at the index.
    fn shape(&self, key: &[u8], first: u64, last: u64) -> Result<Shape> {
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
        let wanted = (first..=last.min(count.saturating_sub(1)))
            .map(|i| {
                let (f, l) = at(i);
                (i, f, l)
            })
            .collect();
        let last = at(count - 1);
        // Segments are stored uncompressed, so the last one's length is its
        // record's length less the header, the key and the 8-byte name: the
        // value's length comes from the index alone.
        let tail = last.1.len as u64 - (RECORD_HEADER_LEN + key.len() + 8) as u64;
        Ok(Shape::Segmented {
            wanted,
            last,
            count,
            total: (count - 1) * SEGMENT_LEN as u64 + tail,
            expires_at: if e.has_ttl { idx.expiry_of(key) } else { None },
        })
    }

    fn read_segment(&self, key: &[u8], file: &DataFile, loc: Loc) -> Result<Vec<u8>> {
        let inner = &*self.inner;
        // SAFETY: `file` and `loc` were read from this shard's index
        // (`shape`); the handle keeps the file mapped.
        unsafe { inner.read_with(inner.shard(key), file, loc, |rec| rec.value()) }
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
            out.extend_from_slice(&self.read_segment(key, file, *loc)?);
        }
        Ok(Some((out, expires_at)))
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
        match self.shape(key, first, last)? {
            Shape::Absent => Ok(None),
            Shape::Plain => self.get_with(key, |v| {
                let start = (offset.min(v.len() as u64)) as usize;
                let end = start + len.min(v.len() - start);
                (v[start..end].to_vec(), v.len() as u64)
            }),
            Shape::Segmented { wanted, total, .. } => {
                let mut out = Vec::with_capacity(len.min(total.saturating_sub(offset) as usize));
                for (i, file, loc) in &wanted {
                    let bytes = self.read_segment(key, file, *loc)?;
                    let base = i * seg;
                    let from = offset.saturating_sub(base) as usize;
                    let to = (end - base).min(bytes.len() as u64) as usize;
                    if from < to {
                        out.extend_from_slice(&bytes[from..to]);
                    }
                }
                Ok(Some((out, total)))
            }
        }
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
            .modify_range_impl(key, offset, data.len(), &mut f, false)?
            .map(|(_, len)| len))
    }

    /// [`Db::modify_range`] with [`Db::try_write_range`]'s rule: `None`
    /// (nothing written, `f` perhaps called) when the write needs a batch
    /// the thread has not opened.
    pub fn try_modify_range(
        &self,
        key: &[u8],
        offset: u64,
        len: usize,
        mut f: impl FnMut(&mut [u8]),
    ) -> Result<Option<(bool, u64)>> {
        self.modify_range_impl(key, offset, len, &mut f, false)
    }

    /// Reads bytes `offset .. offset + len` of the value at `key` (zeros
    /// past its end, or for an absent key), lets `f` change them in place,
    /// and writes them back, growing or creating the value as
    /// [`Db::write_range`] does: one look at the index and one read of the
    /// segments involved. Returns whether the key existed and the value's
    /// new length. `len == 0` calls nothing and changes nothing. A write
    /// of several records opens a write batch itself. `f` is called again
    /// if the key changes form under the write (another thread's), and
    /// only its last result is written.
    pub fn modify_range(
        &self,
        key: &[u8],
        offset: u64,
        len: usize,
        mut f: impl FnMut(&mut [u8]),
    ) -> Result<(bool, u64)> {
        Ok(self
            .modify_range_impl(key, offset, len, &mut f, true)?
            .expect("a write allowed to open its batch always runs"))
    }

    fn modify_range_impl(
        &self,
        key: &[u8],
        offset: u64,
        len: usize,
        f: &mut dyn FnMut(&mut [u8]),
        auto_batch: bool,
    ) -> Result<Option<(bool, u64)>> {
        for _ in 0..8 {
            match self.modify_once(key, offset, len, f, auto_batch)? {
                Step::Done(r) => return Ok(Some(r)),
                Step::NeedsBatch => return Ok(None),
                Step::Retry => continue,
            }
        }
        Err(Error::WrongKind {
            expected: "a value",
            found: "a key changing form under every write",
        })
    }

    fn modify_once(
        &self,
        key: &[u8],
        offset: u64,
        len: usize,
        f: &mut dyn FnMut(&mut [u8]),
        auto_batch: bool,
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
                if v.len() < end as usize {
                    v.resize(end as usize, 0);
                }
                f(&mut v[offset as usize..end as usize]);
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
                    match self.put_segments(key, &segments, Some(at), auto_batch)? {
                        Step::Done(_) => Step::Done((existed, v.len() as u64)),
                        other => other,
                    },
                )
            }
            Shape::Segmented {
                wanted,
                count,
                last,
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
                for i in first..=upto {
                    let mut bytes = if i < count {
                        match wanted.iter().find(|(j, ..)| *j == i) {
                            Some((_, file, loc)) => self.read_segment(key, file, *loc)?,
                            None if i == count - 1 => self.read_segment(key, &last.0, last.1)?,
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
                f(&mut window);
                for (i, bytes) in &mut out {
                    if let Some((s, w)) = parts(*i, bytes.len()) {
                        bytes[s].copy_from_slice(&window[w]);
                    }
                }
                let segments: Vec<(u64, &[u8])> = out.iter().map(|(i, b)| (*i, &b[..])).collect();
                Ok(match self.put_segments(key, &segments, None, auto_batch)? {
                    Step::Done(_) => Step::Done((true, new_total)),
                    other => other,
                })
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
                self.read_segment(key, file, *loc)
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
    /// of them enter the index under one lock.
    fn put_segments(
        &self,
        key: &[u8],
        segments: &[(u64, &[u8])],
        replace: Option<Option<u64>>,
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
        let had_value = {
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
            had_value
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
        let mut locs = Vec::with_capacity(segments.len());
        for (i, bytes) in segments {
            // Never compressed: `shape` reads the value's length off the
            // last segment's record length.
            let seq = inner.next_seq();
            let loc = inner.append(
                shard,
                &mut w,
                RecordRef {
                    seq,
                    expiry: 0,
                    kind: Kind::Field,
                    flags: 0,
                    tag: SEGMENTED_TAG,
                    key,
                    field: &name(*i),
                    value: bytes,
                },
            )?;
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
                idx.note_append(loc, Kind::Field);
                let m = idx.maps.get_mut(key).expect("segmented key without a map");
                m.version = loc.seq;
                let old = m.fields.insert(&name(i), loc);
                if let Some(old) = old {
                    idx.sub_live(old);
                }
                idx.add_live(loc);
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
}
