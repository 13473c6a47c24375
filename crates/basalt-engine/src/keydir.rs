//! The compact in-memory index of one shard: key -> where its latest record is.
//!
//! The one idea: entries do not get a heap allocation each. Every entry
//! (a 24-byte location header followed by the key bytes) is appended to a
//! 1 MiB page, and the hash table holds only an 8-byte slot per key: a
//! reference (page id, offset) plus 15 bits of the key's hash. That avoids
//! the allocator's per-object overhead and the 16-byte fat pointer a
//! `Box<[u8]>` key would cost, which is how the index stays near 24 + key
//! length + ~12 bytes per key.
//!
//! The table is open addressing with linear probing, written here rather
//! than taken from hashbrown because a lookup is the hottest path of both a
//! GET and opening a directory, and it is bound by cache misses: hashbrown
//! keeps control bytes and slots in separate arrays (two misses before the
//! key is even compared), while a slot here carries its own tag, so a probe
//! costs one miss in the table and one in the arena for the matching key.
//! The slot a key starts probing at is known from its hash alone, so callers
//! with several keys in hand (opening a directory, a pipelined batch) can
//! [`Keydir::prefetch`] it ahead. Removal shifts later entries of the probe
//! run back (no tombstones), so lookups never slow down with churn.
//!
//! Removing a key marks its entry dead; a page that is more than half dead
//! is evacuated into the newest page and dropped. Page ids only grow, so a
//! scan cursor (page id, offset) never misses a key that lives throughout the
//! scan: moved entries land after every cursor (they may be returned twice,
//! as Redis's SCAN allows).
//!
//! Entry layout, little-endian:
//! `key_len: u32 (bit 31 = has expiry, bit 30 = dead) | file: u32 |
//!  offset: u32 | len: u32 | seq: u64 | key bytes`.

use std::collections::VecDeque;
use std::hash::BuildHasher;

/// Where a record lives, and its sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Loc {
    /// Data file id, or [`MAP_FILE`] when the key holds a map.
    pub file: u32,
    /// Byte offset of the record in the file.
    pub offset: u32,
    /// Record length.
    pub len: u32,
    /// Sequence number of the record (the key's version).
    pub seq: u64,
}

/// `Loc::file` of a key whose contents are a map (kept in the shard's maps).
pub const MAP_FILE: u32 = u32::MAX;

const PAGE_SIZE: usize = 1 << 20;
const HDR: usize = 24;

/// Bytes one key of `key_len` bytes takes in a keydir: its entry in a page
/// and its table slot at a typical load (8 bytes at 60-80 % full).
pub fn entry_bytes(key_len: usize) -> usize {
    HDR + key_len + 12
}
/// Slot bit: occupied (an empty slot is 0).
const OCC: u64 = 1 << 63;
/// Slot bits 48..63: the low 15 bits of the key's hash (the high bits pick
/// the home slot, see [`home`]).
const TAG_SHIFT: u32 = 48;
const TAG_MASK: u64 = 0x7fff << TAG_SHIFT;
/// Slot bits 0..48: the entry reference, `page << OFFSET_BITS | offset`.
const REF_MASK: u64 = (1 << TAG_SHIFT) - 1;
/// Page ids must fit the 28 bits a reference gives them: 2^28 MiB of
/// entries appended in one process's life.
const MAX_PAGES: u64 = 1 << (TAG_SHIFT - OFFSET_BITS);
/// Grow when more than 4/5 of the slots are used (linear probing stays
/// short: ~3 slots per hit, ~13 per miss at the worst, mostly one line).
const LOAD_NUM: usize = 4;
const LOAD_DEN: usize = 5;
const TTL_BIT: u32 = 1 << 31;
const DEAD_BIT: u32 = 1 << 30;
const LEN_MASK: u32 = DEAD_BIT - 1;
/// Cursor encoding: page id in the high bits, offset in the low 20.
const OFFSET_BITS: u32 = 20;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;

#[derive(Debug)]
struct Page {
    buf: Vec<u8>,
    dead: usize,
}

/// An entry as stored, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Where the record is.
    pub loc: Loc,
    /// Whether the key has an expiry (kept in the shard's expiry table).
    pub has_ttl: bool,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct Keydir {
    /// 4, 5, 6 or 7 times a power of two many slots (or none); see
    /// [`buckets_for`].
    slots: Vec<u64>,
    /// Occupied slots.
    len: usize,
    hasher: hashbrown::DefaultHashBuilder,
    pages: VecDeque<Option<Page>>,
    /// Page id of `pages[0]`.
    base: u64,
    live_bytes: usize,
}

fn r(page: u64, off: usize) -> u64 {
    (page << OFFSET_BITS) | off as u64
}

fn tag(h: u64) -> u64 {
    ((h & 0x7fff) << TAG_SHIFT) | OCC
}

/// The slot where a key with hash `h` starts probing in a table of `n`
/// slots: the high bits of `h` scaled to `n` (a multiply and a shift, no
/// division), so `n` need not be a power of two.
#[inline(always)]
fn home(h: u64, n: usize) -> usize {
    ((h as u128 * n as u128) >> 64) as usize
}

/// The slot after `i` on a probe run, wrapping at `n`.
#[inline(always)]
fn next(i: usize, n: usize) -> usize {
    if i + 1 == n {
        0
    } else {
        i + 1
    }
}

/// How far `to` lies after `from` going forward cyclically in `n` slots.
#[inline(always)]
fn dist(from: usize, to: usize, n: usize) -> usize {
    if to >= from {
        to - from
    } else {
        to + n - from
    }
}

/// Slots needed so `n` keys stay under the load limit (0 for none).
///
/// Table sizes run through 4, 5, 6 and 7 times a power of two (steps of at
/// most 1.25x) rather than powers of two alone: right after a doubling a
/// power-of-two table is only 40% full, and its slots then cost 20 bytes per
/// key instead of the 10 to 12.5 they cost here.
fn buckets_for(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let need = (n * LOAD_DEN).div_ceil(LOAD_NUM).max(8);
    // The smallest 4·2^k, 5·2^k, 6·2^k or 7·2^k that is >= need; with
    // 4·base <= need < 8·base one of the five multiples of base fits.
    let base = 1usize << (need / 4).ilog2();
    (4..=8)
        .map(|m| m * base)
        .find(|&s| s >= need)
        .expect("8 * base >= need")
}

/// Asks the CPU to start loading the cache line of `p`: a hint, never a
/// read the program sees, so any address is fine. Exported for the
/// server's own in-memory indexes.
#[inline(always)]
pub fn prefetch_read<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address,
    // and SSE (which provides it) is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl Keydir {
    /// Number of keys.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Makes room for `additional` more keys without growing. Open uses it
    /// with the entry counts of the hint files, so loading does not rehash
    /// the table (one cache miss per key per doubling) as it grows.
    pub fn reserve(&mut self, additional: usize) {
        let want = buckets_for(self.len.saturating_add(additional));
        if want > self.slots.len() {
            self.rebuild(want);
        }
    }

    /// Gives back table capacity beyond what the keys need (after a
    /// [`Keydir::reserve`] that overestimated).
    pub fn shrink_to_fit(&mut self) {
        let want = buckets_for(self.len);
        if want < self.slots.len() {
            self.rebuild(want);
        }
    }

    /// Moves every slot into a table of `buckets` slots.
    ///
    /// The live entries are found by walking the pages in order rather than
    /// the old slots, so computing each key's hash reads memory
    /// sequentially; only the write into the new table is a random access,
    /// and it is prefetched a few entries ahead.
    fn rebuild(&mut self, buckets: usize) {
        self.slots = Vec::new();
        if buckets == 0 {
            return;
        }
        let mut slots = vec![0u64; buckets];
        let n_slots = buckets;
        fn place(slots: &mut [u64], h: u64, rf: u64) {
            let n = slots.len();
            let mut i = home(h, n);
            while slots[i] != 0 {
                i = next(i, n);
            }
            slots[i] = tag(h) | rf;
        }
        const AHEAD: usize = 8;
        let mut window = [(0u64, 0u64); AHEAD];
        let mut n = 0usize;
        for (idx, p) in self.pages.iter().enumerate() {
            let Some(p) = p else { continue };
            let id = self.base + idx as u64;
            let mut off = 0;
            while off < p.buf.len() {
                let raw = u32::from_le_bytes(p.buf[off..off + 4].try_into().unwrap());
                let klen = (raw & LEN_MASK) as usize;
                if raw & DEAD_BIT == 0 {
                    let h = self.hasher.hash_one(&p.buf[off + HDR..off + HDR + klen]);
                    prefetch_read(&slots[home(h, n_slots)]);
                    let w = &mut window[n % AHEAD];
                    if n >= AHEAD {
                        place(&mut slots, w.0, w.1);
                    }
                    *w = (h, r(id, off));
                    n += 1;
                }
                off += HDR + klen;
            }
        }
        for k in n.saturating_sub(AHEAD)..n {
            let (h, rf) = window[k % AHEAD];
            place(&mut slots, h, rf);
        }
        self.slots = slots;
    }

    /// Bytes of memory held: table slots plus page buffers.
    pub fn memory_bytes(&self) -> usize {
        let pages: usize = self
            .pages
            .iter()
            .flatten()
            .map(|p| p.buf.capacity() + std::mem::size_of::<Page>())
            .sum();
        self.slots.capacity() * 8 + pages
    }

    /// The hash [`Keydir::prefetch`] takes.
    pub fn hash_key(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Starts loading the table slot where a lookup of the key with hash
    /// `h` begins, so a lookup a little later does not wait for memory.
    #[inline]
    pub fn prefetch(&self, h: u64) {
        if !self.slots.is_empty() {
            prefetch_read(&self.slots[home(h, self.slots.len())]);
        }
    }

    /// Starts loading the entry of the first slot on `h`'s probe run whose
    /// tag matches (the entry a lookup will compare), without waiting for
    /// it. Call after [`Keydir::prefetch`] had time to bring the slot in.
    #[inline]
    pub fn prefetch_entry(&self, h: u64) {
        if self.slots.is_empty() {
            return;
        }
        let n = self.slots.len();
        let t = tag(h);
        let mut i = home(h, n);
        loop {
            let s = self.slots[i];
            if s == 0 {
                return;
            }
            if s & (TAG_MASK | OCC) == t {
                let rf = s & REF_MASK;
                if let Some(Some(p)) = self.pages.get(((rf >> OFFSET_BITS) - self.base) as usize) {
                    prefetch_read(p.buf.as_ptr().wrapping_add((rf & OFFSET_MASK) as usize));
                }
                return;
            }
            i = next(i, n);
        }
    }

    /// The slot holding `key` (`Ok`), or the empty slot where its probe
    /// ended (`Err`; `usize::MAX` when the table has no slots).
    fn find(&self, h: u64, key: &[u8]) -> Result<usize, usize> {
        if self.slots.is_empty() {
            return Err(usize::MAX);
        }
        let n = self.slots.len();
        let t = tag(h);
        let mut i = home(h, n);
        loop {
            let s = self.slots[i];
            if s == 0 {
                return Err(i);
            }
            if s & (TAG_MASK | OCC) == t && self.key_of(s & REF_MASK) == key {
                return Ok(i);
            }
            i = next(i, n);
        }
    }

    /// Empties slot `i`, moving later entries of its probe run back so no
    /// lookup ever needs a tombstone.
    fn vacate(&mut self, i: usize) {
        let n = self.slots.len();
        let mut hole = i;
        let mut j = next(i, n);
        loop {
            let s = self.slots[j];
            if s == 0 {
                break;
            }
            let at = home(self.hasher.hash_one(self.key_of(s & REF_MASK)), n);
            // `s` may fill the hole unless its home lies after the hole
            // (cyclically) on the way to `j`.
            if dist(at, j, n) >= dist(hole, j, n) {
                self.slots[hole] = s;
                hole = j;
            }
            j = next(j, n);
        }
        self.slots[hole] = 0;
        self.len -= 1;
    }

    fn page(&self, id: u64) -> &Page {
        self.pages[(id - self.base) as usize]
            .as_ref()
            .expect("reference to a dropped keydir page")
    }

    fn bytes_at(&self, rf: u64) -> &[u8] {
        let p = self.page(rf >> OFFSET_BITS);
        &p.buf[(rf & OFFSET_MASK) as usize..]
    }

    fn key_of(&self, rf: u64) -> &[u8] {
        let b = self.bytes_at(rf);
        let klen = (u32::from_le_bytes(b[0..4].try_into().unwrap()) & LEN_MASK) as usize;
        &b[HDR..HDR + klen]
    }

    fn entry_of(&self, rf: u64) -> Entry {
        decode(self.bytes_at(rf))
    }

    /// Looks a key up.
    pub fn get(&self, key: &[u8]) -> Option<Entry> {
        let h = self.hasher.hash_one(key);
        let i = self.find(h, key).ok()?;
        Some(self.entry_of(self.slots[i] & REF_MASK))
    }

    /// Inserts or replaces; returns the previous entry.
    pub fn insert(&mut self, key: &[u8], loc: Loc, has_ttl: bool) -> Option<Entry> {
        if buckets_for(self.len + 1) > self.slots.len() {
            self.rebuild(buckets_for(self.len + 1));
        }
        let h = self.hasher.hash_one(key);
        match self.find(h, key) {
            Ok(i) => {
                let rf = self.slots[i] & REF_MASK;
                let old = self.entry_of(rf);
                self.write_entry(rf, loc, has_ttl);
                Some(old)
            }
            Err(i) => {
                let rf = self.append(key, loc, has_ttl);
                self.slots[i] = tag(h) | rf;
                self.len += 1;
                None
            }
        }
    }

    /// Changes the location of `key` only if it still points at
    /// (`file`, `offset`); compaction uses this so a write that raced it wins.
    pub fn update_if(&mut self, key: &[u8], file: u32, offset: u32, loc: Loc) -> bool {
        let h = self.hasher.hash_one(key);
        let Ok(i) = self.find(h, key) else {
            return false;
        };
        let rf = self.slots[i] & REF_MASK;
        let e = self.entry_of(rf);
        if e.loc.file != file || e.loc.offset != offset {
            return false;
        }
        self.write_entry(rf, loc, e.has_ttl);
        true
    }

    /// Sets or clears the expiry flag of an existing key.
    pub fn set_ttl_flag(&mut self, key: &[u8], has_ttl: bool) {
        let h = self.hasher.hash_one(key);
        if let Ok(i) = self.find(h, key) {
            let rf = self.slots[i] & REF_MASK;
            let e = self.entry_of(rf);
            self.write_entry(rf, e.loc, has_ttl);
        }
    }

    /// Removes a key; returns its entry.
    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let h = self.hasher.hash_one(key);
        let i = self.find(h, key).ok()?;
        let rf = self.slots[i] & REF_MASK;
        let old = self.entry_of(rf);
        self.vacate(i);
        self.kill(rf);
        Some(old)
    }

    /// Visits every key with its entry.
    pub fn for_each(&self, mut f: impl FnMut(&[u8], Entry)) {
        for p in self.pages.iter().flatten() {
            let mut off = 0;
            while off < p.buf.len() {
                let b = &p.buf[off..];
                let raw = u32::from_le_bytes(b[0..4].try_into().unwrap());
                let klen = (raw & LEN_MASK) as usize;
                if raw & DEAD_BIT == 0 {
                    f(&b[HDR..HDR + klen], decode(b));
                }
                off += HDR + klen;
            }
        }
    }

    /// Resumable scan: visits keys from `cursor` (0 = start) until `f`
    /// returns false or roughly `budget` entries (live or dead) have been
    /// looked at. Returns the cursor to continue from, 0 when done.
    pub fn scan(&self, cursor: u64, budget: usize, mut f: impl FnMut(&[u8], Entry) -> bool) -> u64 {
        let mut page = (cursor >> OFFSET_BITS).max(self.base);
        let mut off = if (cursor >> OFFSET_BITS) < self.base {
            0
        } else {
            (cursor & ((1 << OFFSET_BITS) - 1)) as usize
        };
        let mut seen = 0;
        let end = self.base + self.pages.len() as u64;
        while page < end {
            if let Some(p) = &self.pages[(page - self.base) as usize] {
                while off < p.buf.len() {
                    if seen >= budget {
                        return (page << OFFSET_BITS) | off as u64;
                    }
                    let b = &p.buf[off..];
                    let raw = u32::from_le_bytes(b[0..4].try_into().unwrap());
                    let klen = (raw & LEN_MASK) as usize;
                    off += HDR + klen;
                    seen += 1;
                    if raw & DEAD_BIT == 0 && !f(&b[HDR..HDR + klen], decode(b)) {
                        return if off < p.buf.len() {
                            (page << OFFSET_BITS) | off as u64
                        } else {
                            (page + 1) << OFFSET_BITS
                        };
                    }
                }
            }
            page += 1;
            off = 0;
        }
        0
    }

    fn write_entry(&mut self, rf: u64, loc: Loc, has_ttl: bool) {
        let id = rf >> OFFSET_BITS;
        let off = (rf & OFFSET_MASK) as usize;
        let base = self.base;
        let p = self.pages[(id - base) as usize].as_mut().unwrap();
        let b = &mut p.buf[off..off + HDR];
        let raw = u32::from_le_bytes(b[0..4].try_into().unwrap());
        let raw = if has_ttl {
            raw | TTL_BIT
        } else {
            raw & !TTL_BIT
        };
        b[0..4].copy_from_slice(&raw.to_le_bytes());
        b[4..8].copy_from_slice(&loc.file.to_le_bytes());
        b[8..12].copy_from_slice(&loc.offset.to_le_bytes());
        b[12..16].copy_from_slice(&loc.len.to_le_bytes());
        b[16..24].copy_from_slice(&loc.seq.to_le_bytes());
    }

    fn append(&mut self, key: &[u8], loc: Loc, has_ttl: bool) -> u64 {
        let need = HDR + key.len();
        let fits =
            matches!(self.pages.back(), Some(Some(p)) if p.buf.len() + need <= p.buf.capacity());
        if !fits {
            // Oversized keys get a page of their own; offsets stay < 2^20.
            self.pages.push_back(Some(Page {
                buf: Vec::with_capacity(PAGE_SIZE.max(need)),
                dead: 0,
            }));
        }
        let id = self.base + self.pages.len() as u64 - 1;
        assert!(id < MAX_PAGES, "keydir page ids exhausted");
        let p = self.pages.back_mut().unwrap().as_mut().unwrap();
        let off = p.buf.len();
        let mut raw = key.len() as u32;
        if has_ttl {
            raw |= TTL_BIT;
        }
        p.buf.extend_from_slice(&raw.to_le_bytes());
        p.buf.extend_from_slice(&[0u8; HDR - 4]);
        p.buf.extend_from_slice(key);
        self.live_bytes += need;
        let rf = r(id, off);
        self.write_entry(rf, loc, has_ttl);
        rf
    }

    fn kill(&mut self, rf: u64) {
        let id = rf >> OFFSET_BITS;
        let off = (rf & OFFSET_MASK) as usize;
        let idx = (id - self.base) as usize;
        let is_last = idx + 1 == self.pages.len();
        let p = self.pages[idx].as_mut().unwrap();
        let raw = u32::from_le_bytes(p.buf[off..off + 4].try_into().unwrap());
        p.buf[off..off + 4].copy_from_slice(&(raw | DEAD_BIT).to_le_bytes());
        let size = HDR + (raw & LEN_MASK) as usize;
        p.dead += size;
        self.live_bytes -= size;
        if !is_last && p.dead * 2 > p.buf.len() {
            self.evacuate(idx);
        }
    }

    /// Moves the live entries of page `idx` to the newest page and drops it.
    fn evacuate(&mut self, idx: usize) {
        let page = self.pages[idx].take().unwrap();
        let id = self.base + idx as u64;
        let mut off = 0;
        while off < page.buf.len() {
            let b = &page.buf[off..];
            let raw = u32::from_le_bytes(b[0..4].try_into().unwrap());
            let klen = (raw & LEN_MASK) as usize;
            if raw & DEAD_BIT == 0 {
                let key = &b[HDR..HDR + klen];
                let e = decode(b);
                self.live_bytes -= HDR + klen;
                let new = self.append(key, e.loc, e.has_ttl);
                let old = r(id, off);
                let h = self.hasher.hash_one(key);
                let n = self.slots.len();
                let mut i = home(h, n);
                while self.slots[i] & REF_MASK != old {
                    assert!(
                        self.slots[i] != 0,
                        "live keydir entry missing from the table"
                    );
                    i = next(i, n);
                }
                self.slots[i] = tag(h) | new;
            }
            off += HDR + klen;
        }
        while let Some(None) = self.pages.front() {
            self.pages.pop_front();
            self.base += 1;
        }
    }
}

fn decode(b: &[u8]) -> Entry {
    let raw = u32::from_le_bytes(b[0..4].try_into().unwrap());
    Entry {
        loc: Loc {
            file: u32::from_le_bytes(b[4..8].try_into().unwrap()),
            offset: u32::from_le_bytes(b[8..12].try_into().unwrap()),
            len: u32::from_le_bytes(b[12..16].try_into().unwrap()),
            seq: u64::from_le_bytes(b[16..24].try_into().unwrap()),
        },
        has_ttl: raw & TTL_BIT != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn loc(n: u64) -> Loc {
        Loc {
            file: n as u32,
            offset: (n * 3) as u32,
            len: 7,
            seq: n,
        }
    }

    #[test]
    fn insert_get_remove_match_a_hashmap_through_page_evacuations() {
        let mut kd = Keydir::default();
        let mut model = HashMap::new();
        // Enough keys to fill several pages, then remove most so pages evacuate.
        for i in 0..60_000u64 {
            let k = format!("key-{i:08}-{}", "x".repeat((i % 17) as usize));
            assert_eq!(kd.insert(k.as_bytes(), loc(i), i % 3 == 0), None);
            model.insert(k, i);
        }
        let keys: Vec<String> = model.keys().cloned().collect();
        for (n, k) in keys.iter().enumerate() {
            if n % 4 != 0 {
                let e = kd.remove(k.as_bytes()).unwrap();
                assert_eq!(e.loc, loc(model[k]));
                model.remove(k);
            }
        }
        assert!(kd.base > 0, "mostly-dead pages were evacuated and dropped");
        assert_eq!(kd.len(), model.len());
        for (k, &i) in &model {
            let e = kd.get(k.as_bytes()).unwrap();
            assert_eq!(e.loc, loc(i));
            assert_eq!(e.has_ttl, i % 3 == 0);
        }
        let mut seen = 0;
        kd.for_each(|_, _| seen += 1);
        assert_eq!(seen, model.len());
    }

    #[test]
    fn scan_with_cursor_returns_every_key_that_lived_throughout() {
        let mut kd = Keydir::default();
        for i in 0..50_000u64 {
            kd.insert(format!("k{i}").as_bytes(), loc(i), false);
        }
        let mut found = std::collections::HashSet::new();
        let mut cursor = 0;
        let mut rounds = 0;
        loop {
            cursor = kd.scan(cursor, 1000, |k, _| {
                found.insert(k.to_vec());
                true
            });
            // Churn between calls: remove and add keys outside the stable set.
            if rounds < 40 {
                for j in 0..500u64 {
                    let k = format!("k{}", 25_000 + rounds * 500 + j);
                    kd.remove(k.as_bytes());
                    kd.insert(format!("new{rounds}-{j}").as_bytes(), loc(j), false);
                }
            }
            rounds += 1;
            if cursor == 0 || rounds > 10_000 {
                break;
            }
        }
        for i in 0..25_000u64 {
            assert!(found.contains(format!("k{i}").as_bytes()), "k{i} missed");
        }
    }

    #[test]
    fn random_churn_with_reserve_and_shrink_matches_a_hashmap() {
        // A small key space and many removals exercise long probe runs,
        // wrap-around at the end of the table and the backward shift.
        let mut kd = Keydir::default();
        let mut model: HashMap<Vec<u8>, u64> = HashMap::new();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for op in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = format!("k{}", x % 3_000).into_bytes();
            match x >> 58 {
                0..=30 => {
                    let old = kd.insert(&key, loc(op), false).map(|e| e.loc.seq);
                    assert_eq!(old, model.insert(key, op));
                }
                31..=61 => {
                    let old = kd.remove(&key).map(|e| e.loc.seq);
                    assert_eq!(old, model.remove(&key));
                }
                62 => kd.reserve((x % 5_000) as usize),
                _ => kd.shrink_to_fit(),
            }
            if op % 20_000 == 0 {
                assert_eq!(kd.len(), model.len());
                for (k, &seq) in &model {
                    assert_eq!(kd.get(k).map(|e| e.loc.seq), Some(seq));
                }
            }
        }
        assert_eq!(kd.len(), model.len());
        for i in 0..3_000u64 {
            let k = format!("k{i}").into_bytes();
            assert_eq!(kd.get(&k).map(|e| e.loc.seq), model.get(&k).copied());
        }
        kd.shrink_to_fit();
        assert!(kd.slots.len() <= buckets_for(model.len()).max(8));
    }

    #[test]
    fn table_sizes_step_by_at_most_a_quarter_and_keep_the_load_limit() {
        assert_eq!(buckets_for(0), 0);
        assert_eq!(buckets_for(1), 8);
        // 125 000 keys (one of 8 shards at 1 M keys): 5 * 2^15 slots, not 2^18.
        assert_eq!(buckets_for(125_000), 163_840);
        let mut prev = 8;
        for n in 1..200_000usize {
            let b = buckets_for(n);
            assert!(b * LOAD_NUM >= n * LOAD_DEN, "{n} keys in {b} slots");
            let m = b >> b.trailing_zeros();
            assert!(
                matches!(m, 1 | 5 | 3 | 7),
                "{b} is not 4, 5, 6 or 7 times 2^k"
            );
            assert!(b >= prev && b * 4 <= prev * 5 || b == prev, "{prev} -> {b}");
            prev = b;
        }
    }

    #[test]
    fn update_if_only_moves_an_entry_still_at_the_expected_place() {
        let mut kd = Keydir::default();
        kd.insert(b"a", loc(1), true);
        assert!(!kd.update_if(b"a", 9, 9, loc(5)));
        assert!(kd.update_if(b"a", 1, 3, loc(5)));
        let e = kd.get(b"a").unwrap();
        assert_eq!(e.loc, loc(5));
        assert!(e.has_ttl);
        assert!(!kd.update_if(b"missing", 1, 3, loc(5)));
    }
}
