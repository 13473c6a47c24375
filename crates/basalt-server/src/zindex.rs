//! The in-memory ordered index of a sorted set, and the process-wide cache
//! that keeps one per sorted set.
//!
//! The engine stores a sorted set as a map (member -> 8-byte score) and
//! knows no order. Ranks and ranges need one, so each sorted set in use has
//! a [`ZIndex`]: a skiplist with spans (as Redis's `zskiplist`: every link
//! records how many nodes it skips, so rank lookups and "the node at rank r"
//! are O(log n)) over (score, member), plus a hash table of node ids for
//! member lookups.
//!
//! The one idea a reader needs about the index: **a node is one record in
//! one byte arena**, its levels and its member bytes inline, addressed by a
//! `u32` id (its offset in 8-byte words). A skiplist step reads one record,
//! usually one cache line, where a node with a separately allocated level
//! array costs two misses; and while a search compares the next record on
//! a level, the record it would go to on the level below is prefetched, so
//! the two misses overlap. The member is stored once, in its record: the
//! hash table holds only ids (4 bytes a slot), hashed and compared through
//! the records, and the record also gives the score. Record layout, in
//! little-endian 8-byte words:
//!
//! ```text
//! word 0        score (f64 bits)
//! word 1        back id (bits 0..32) | level count (32..40) | member length (40..64)
//! words 2..2+L  level i: next id (bits 0..32) | span (32..64)
//! [one word]    the member length, only if it is >= 2^24 - 1 (then bits 40..64 are all ones)
//! then          the member bytes, padded to a whole word
//! ```
//!
//! Id 0 is the head record (32 levels, no member); `u32::MAX` is "none".
//! A removed record goes on a free list of its size (exact fit, sizes below
//! 64 words) and is reused by the next record of that size; when the freed
//! words outgrow the live ones the arena is rebuilt in list order (ids
//! change; the hash table keeps its slots and only has its ids rewritten).
//! A score update that keeps the node between its neighbours is done in
//! place; one that moves it unlinks and relinks the same record (same
//! levels, no allocation). All of it is safe code.
//!
//! The one idea a reader needs about the cache ([`ZCache`]): **an index is
//! valid for (engine generation, key, key version)**. Every engine write
//! gives the key a new version, so a sorted set that was rewritten by
//! another command (DEL, RENAME, EXPIRE, a FLUSHDB, a DEBUG RELOAD that
//! swapped the engine, ...) is detected on the next access and rebuilt from
//! the engine's fields. Zset commands hold the key's stripe lock while they
//! use an index, check it out of the cache, change it together with the
//! engine, and check it back in under the key's new version.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use hashbrown::{DefaultHashBuilder, HashTable};
use parking_lot::Mutex;

const NIL: u32 = u32::MAX;
const HEAD: u32 = 0;
const MAX_LEVEL: usize = 32;
/// Words of the head record: score, header, one link per level.
const HEAD_WORDS: usize = 2 + MAX_LEVEL;
/// The member-length field's marker for "the length is in its own word".
const LONG_LEN: u64 = (1 << 24) - 1;
/// Records of fewer words than this are recycled through free lists.
const FREE_CLASSES: usize = 64;
/// The arena is rebuilt when its free words exceed both its live words and
/// this many.
const COMPACT_MIN_WORDS: usize = 4096;

/// A score interval for ZRANGEBYSCORE and friends: `(` makes an end exclusive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreRange {
    /// Lower end.
    pub min: f64,
    /// Whether `min` itself is excluded.
    pub min_ex: bool,
    /// Upper end.
    pub max: f64,
    /// Whether `max` itself is excluded.
    pub max_ex: bool,
}

impl ScoreRange {
    /// Whether `v` is at or above the lower end.
    pub fn gte_min(&self, v: f64) -> bool {
        if self.min_ex {
            v > self.min
        } else {
            v >= self.min
        }
    }
    /// Whether `v` is at or below the upper end.
    pub fn lte_max(&self, v: f64) -> bool {
        if self.max_ex {
            v < self.max
        } else {
            v <= self.max
        }
    }
    /// Whether no score can be in the range.
    pub fn is_empty(&self) -> bool {
        self.min > self.max || (self.min == self.max && (self.min_ex || self.max_ex))
    }
}

/// One end of a lexical range: `-`, `+`, `[member` or `(member`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LexBound {
    /// `-`: below every member.
    NegInf,
    /// `+`: above every member.
    PosInf,
    /// `[m`: m included.
    Incl(Vec<u8>),
    /// `(m`: m excluded.
    Excl(Vec<u8>),
}

/// A lexical interval for ZRANGEBYLEX and friends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LexRange {
    /// Lower end.
    pub min: LexBound,
    /// Upper end.
    pub max: LexBound,
}

impl LexRange {
    /// Whether `m` is at or above the lower end.
    pub fn gte_min(&self, m: &[u8]) -> bool {
        match &self.min {
            LexBound::NegInf => true,
            LexBound::PosInf => false,
            LexBound::Incl(b) => m >= b.as_slice(),
            LexBound::Excl(b) => m > b.as_slice(),
        }
    }
    /// Whether `m` is at or below the upper end.
    pub fn lte_max(&self, m: &[u8]) -> bool {
        match &self.max {
            LexBound::NegInf => false,
            LexBound::PosInf => true,
            LexBound::Incl(b) => m <= b.as_slice(),
            LexBound::Excl(b) => m < b.as_slice(),
        }
    }
    /// Whether no member can be in the range.
    pub fn is_empty(&self) -> bool {
        use LexBound::*;
        match (&self.min, &self.max) {
            (PosInf, _) | (_, NegInf) => true,
            (NegInf, _) | (_, PosInf) => false,
            (Incl(a), Incl(b)) => a > b,
            (Incl(a), Excl(b)) | (Excl(a), Incl(b)) | (Excl(a), Excl(b)) => a >= b,
        }
    }
}

/// A node handle inside one [`ZIndex`]; valid until the index changes.
pub type NodeId = u32;

/// Words of a record with `level` levels and a member of `len` bytes.
fn record_words(level: usize, len: usize) -> usize {
    2 + level + usize::from(len as u64 >= LONG_LEN) + len.div_ceil(8)
}

/// The byte arena holding every record (layout in the module doc).
#[derive(Debug, Default)]
struct Arena {
    bytes: Vec<u8>,
}

impl Arena {
    #[inline]
    fn word(&self, id: u32, w: usize) -> u64 {
        let o = (id as usize + w) * 8;
        u64::from_le_bytes(self.bytes[o..o + 8].try_into().expect("8 bytes"))
    }

    #[inline]
    fn set_word(&mut self, id: u32, w: usize, v: u64) {
        let o = (id as usize + w) * 8;
        self.bytes[o..o + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// Length in words.
    fn words(&self) -> usize {
        self.bytes.len() / 8
    }

    #[inline]
    fn score(&self, id: u32) -> f64 {
        f64::from_bits(self.word(id, 0))
    }

    #[inline]
    fn set_score(&mut self, id: u32, score: f64) {
        self.set_word(id, 0, score.to_bits());
    }

    #[inline]
    fn back(&self, id: u32) -> u32 {
        self.word(id, 1) as u32
    }

    #[inline]
    fn set_back(&mut self, id: u32, back: u32) {
        let h = self.word(id, 1);
        self.set_word(id, 1, (h & !0xFFFF_FFFF) | u64::from(back));
    }

    #[inline]
    fn level(&self, id: u32) -> usize {
        (self.word(id, 1) >> 32) as u8 as usize
    }

    /// (next, span) of `id` at level `i`.
    #[inline]
    fn link(&self, id: u32, i: usize) -> (u32, u32) {
        let l = self.word(id, 2 + i);
        (l as u32, (l >> 32) as u32)
    }

    /// Starts loading the record that follows `id` at level `i - 1`: the
    /// next one a search reads if it stops at `id` on level `i`. A skiplist
    /// walk is a chain of cache misses; this overlaps the miss of the level
    /// below with the comparison on this one.
    #[inline]
    fn prefetch_below(&self, id: u32, i: usize) {
        if i == 0 {
            return;
        }
        let below = self.next_at(id, i - 1);
        if below != NIL {
            basalt_engine::prefetch_read(self.bytes.as_ptr().wrapping_add(below as usize * 8));
        }
    }

    #[inline]
    fn next_at(&self, id: u32, i: usize) -> u32 {
        self.word(id, 2 + i) as u32
    }

    #[inline]
    fn set_link(&mut self, id: u32, i: usize, next: u32, span: u32) {
        self.set_word(id, 2 + i, u64::from(next) | (u64::from(span) << 32));
    }

    #[inline]
    fn set_span(&mut self, id: u32, i: usize, span: u32) {
        let next = self.next_at(id, i);
        self.set_link(id, i, next, span);
    }

    #[inline]
    fn member(&self, id: u32) -> &[u8] {
        let h = self.word(id, 1);
        let level = (h >> 32) as u8 as usize;
        let short = h >> 40;
        let (len, at) = if short == LONG_LEN {
            (self.word(id, 2 + level) as usize, 3 + level)
        } else {
            (short as usize, 2 + level)
        };
        let o = (id as usize + at) * 8;
        &self.bytes[o..o + len]
    }

    /// Record size in words.
    fn size(&self, id: u32) -> usize {
        record_words(self.level(id), self.member(id).len())
    }

    /// Whether the record `id` sorts before (score, member).
    #[inline]
    fn less_than(&self, id: u32, score: f64, member: &[u8]) -> bool {
        let s = self.score(id);
        s < score || (s == score && self.member(id) < member)
    }

    /// Whether (score, member) sorts before the record `id`.
    #[inline]
    fn greater_than(&self, id: u32, score: f64, member: &[u8]) -> bool {
        let s = self.score(id);
        score < s || (s == score && member < self.member(id))
    }

    /// Writes a record at `id` (links and back left to the caller).
    fn write(&mut self, id: u32, level: usize, member: &[u8], score: f64) {
        let len = member.len();
        let long = len as u64 >= LONG_LEN;
        let field = if long { LONG_LEN } else { len as u64 };
        self.set_score(id, score);
        self.set_word(
            id,
            1,
            u64::from(NIL) | ((level as u64) << 32) | (field << 40),
        );
        let mut at = 2 + level;
        if long {
            self.set_word(id, at, len as u64);
            at += 1;
        }
        let o = (id as usize + at) * 8;
        self.bytes[o..o + len].copy_from_slice(member);
        // Zero the padding so a reused record holds no stale bytes.
        let end = o + len.div_ceil(8) * 8;
        self.bytes[o + len..end].fill(0);
    }

    /// A fresh arena holding only the head record.
    fn with_head(capacity_words: usize) -> Arena {
        let mut a = Arena {
            bytes: Vec::with_capacity(capacity_words.max(HEAD_WORDS) * 8),
        };
        a.bytes.resize(HEAD_WORDS * 8, 0);
        a.set_word(HEAD, 1, u64::from(NIL) | ((MAX_LEVEL as u64) << 32));
        for i in 0..MAX_LEVEL {
            a.set_link(HEAD, i, NIL, 0);
        }
        a
    }
}

/// A sorted set's ordered index: (score, member) in order, with ranks.
pub struct ZIndex {
    arena: Arena,
    /// Node ids, hashed by their records' members.
    table: HashTable<u32>,
    hasher: DefaultHashBuilder,
    /// Free list heads by record size in words (`NIL`: empty); a free
    /// record's word 0 holds the next free record of its size.
    free: Vec<u32>,
    /// Words in removed records (reused or not yet).
    free_words: usize,
    level: usize,
    tail: u32,
    len: usize,
    rng: u64,
}

impl std::fmt::Debug for ZIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZIndex")
            .field("len", &self.len)
            .field("level", &self.level)
            .field("arena_words", &self.arena.words())
            .field("free_words", &self.free_words)
            .finish()
    }
}

impl Default for ZIndex {
    fn default() -> Self {
        ZIndex::new()
    }
}

/// `(a_score, a_member) < (b_score, b_member)` in sorted-set order.
fn less(a_score: f64, a_member: &[u8], b_score: f64, b_member: &[u8]) -> bool {
    a_score < b_score || (a_score == b_score && a_member < b_member)
}

/// The predecessor of a position at every level, and (for inserts) its rank.
type Path = [u32; MAX_LEVEL];

impl ZIndex {
    /// An empty index.
    pub fn new() -> ZIndex {
        ZIndex {
            arena: Arena::with_head(HEAD_WORDS),
            table: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            free: Vec::new(),
            free_words: 0,
            level: 1,
            tail: NIL,
            len: 0,
            rng: 0x2545_F491_4F6C_DD1D,
        }
    }

    /// The index of `items`, built in one pass after sorting them, without
    /// a skiplist search per member (a rebuild from the engine's fields).
    /// A member given twice keeps the higher of its scores.
    pub fn from_items(mut items: Vec<(Vec<u8>, f64)>) -> ZIndex {
        items.sort_unstable_by(|a, b| {
            a.1.partial_cmp(&b.1)
                .expect("scores are never NaN")
                .then_with(|| a.0.cmp(&b.0))
        });
        let mut z = ZIndex::new();
        let words: usize = items.iter().map(|(m, _)| record_words(2, m.len())).sum();
        z.arena.bytes.reserve(words * 8);
        let (arena, hasher) = (&z.arena, &z.hasher);
        z.table
            .reserve(items.len(), |&x| hasher.hash_one(arena.member(x)));
        let mut last = [HEAD; MAX_LEVEL];
        let mut last_rank = [0u32; MAX_LEVEL];
        let mut prev = NIL;
        for (n, (member, score)) in items.iter().enumerate() {
            let hash = z.hash(member);
            let arena = &z.arena;
            if z.table
                .find(hash, |&id| arena.member(id) == member)
                .is_some()
            {
                // Not distinct: insert one by one (ascending, so the
                // higher score is set last).
                let mut z = ZIndex::new();
                for (m, s) in &items {
                    z.insert(m, *s);
                }
                return z;
            }
            let level = z.random_level();
            let id = z.alloc(record_words(level, member.len()));
            z.arena.write(id, level, member, *score);
            let (arena, hasher) = (&z.arena, &z.hasher);
            z.table
                .insert_unique(hash, id, |&x| hasher.hash_one(arena.member(x)));
            let rank = n as u32 + 1;
            z.arena.set_back(id, prev);
            for i in 0..level {
                z.arena.set_link(last[i], i, id, rank - last_rank[i]);
                last[i] = id;
                last_rank[i] = rank;
            }
            z.level = z.level.max(level);
            prev = id;
        }
        let len = items.len() as u32;
        for i in 0..z.level {
            z.arena.set_link(last[i], i, NIL, len - last_rank[i]);
        }
        z.tail = prev;
        z.len = items.len();
        z
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no members.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Heap bytes used (the cache's budget unit): the arena's used part and
    /// the hash table's slots (4-byte id plus a control byte each).
    pub fn approx_bytes(&self) -> usize {
        let buckets = if self.table.capacity() == 0 {
            0
        } else {
            (self.table.capacity() * 8 / 7).next_power_of_two()
        };
        self.arena.bytes.len() + buckets * 5 + self.free.len() * 4 + 128
    }

    fn hash(&self, member: &[u8]) -> u64 {
        self.hasher.hash_one(member)
    }

    fn find(&self, member: &[u8]) -> Option<u32> {
        let arena = &self.arena;
        self.table
            .find(self.hash(member), |&id| arena.member(id) == member)
            .copied()
    }

    /// The score of `member`.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.find(member).map(|id| self.arena.score(id))
    }

    /// The member and score of a node.
    pub fn entry(&self, id: NodeId) -> (&[u8], f64) {
        (self.arena.member(id), self.arena.score(id))
    }

    /// The node after `id` in order.
    pub fn next(&self, id: NodeId) -> Option<NodeId> {
        let n = self.arena.next_at(id, 0);
        (n != NIL).then_some(n)
    }

    /// The node before `id` in order.
    pub fn prev(&self, id: NodeId) -> Option<NodeId> {
        let b = self.arena.back(id);
        (b != NIL).then_some(b)
    }

    fn random_level(&mut self) -> usize {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        // Each extra level with probability 1/4: two random bits per level.
        let mut level = 1;
        let mut bits = x;
        while level < MAX_LEVEL && bits & 3 == 0 {
            level += 1;
            bits >>= 2;
        }
        level
    }

    /// Sets `member`'s score, adding it if new. Returns the old score.
    pub fn insert(&mut self, member: &[u8], score: f64) -> Option<f64> {
        debug_assert!(!score.is_nan());
        let hash = self.hash(member);
        let arena = &self.arena;
        if let Some(&id) = self.table.find(hash, |&id| arena.member(id) == member) {
            let old = arena.score(id);
            if old.to_bits() != score.to_bits() {
                self.rescore(id, member, old, score);
            }
            return Some(old);
        }
        let level = self.random_level();
        let id = self.alloc(record_words(level, member.len()));
        self.arena.write(id, level, member, score);
        let (arena, hasher) = (&self.arena, &self.hasher);
        self.table
            .insert_unique(hash, id, |&x| hasher.hash_one(arena.member(x)));
        let (update, rank) = self.search(score, member);
        self.stitch(id, level, update, rank);
        None
    }

    /// Removes `member`. Returns its score.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        let hash = self.hash(member);
        let arena = &self.arena;
        let id = match self
            .table
            .find_entry(hash, |&id| arena.member(id) == member)
        {
            Ok(entry) => entry.remove().0,
            Err(_) => return None,
        };
        let score = self.arena.score(id);
        let update = self.predecessors(id, score, member);
        self.unlink(id, &update);
        if self.len == 0 {
            self.clear();
        } else {
            self.release(id);
        }
        Some(score)
    }

    /// Gives `id`'s node a new score: in place when it stays between its
    /// neighbours, else unlinked and linked again at its new place.
    fn rescore(&mut self, id: u32, member: &[u8], old: f64, new: f64) {
        let a = &self.arena;
        let back = a.back(id);
        let next = a.next_at(id, 0);
        if (back == NIL || a.less_than(back, new, member))
            && (next == NIL || a.greater_than(next, new, member))
        {
            self.arena.set_score(id, new);
            return;
        }
        let update = self.predecessors(id, old, member);
        self.unlink(id, &update);
        self.arena.set_score(id, new);
        let (update, rank) = self.search(new, member);
        let level = self.arena.level(id);
        self.stitch(id, level, update, rank);
    }

    /// The last record before (score, member) at each level, with its rank.
    fn search(&self, score: f64, member: &[u8]) -> (Path, Path) {
        let a = &self.arena;
        let mut update = [HEAD; MAX_LEVEL];
        let mut rank = [0u32; MAX_LEVEL];
        let mut x = HEAD;
        let mut r = 0u32;
        for i in (0..self.level).rev() {
            loop {
                let (nx, span) = a.link(x, i);
                // Where the walk goes if it stops here: loaded while `nx`
                // (usually a cache miss) is compared.
                a.prefetch_below(x, i);
                if nx == NIL || !a.less_than(nx, score, member) {
                    break;
                }
                r += span;
                x = nx;
            }
            update[i] = x;
            rank[i] = r;
        }
        (update, rank)
    }

    /// The predecessors at each level of the linked node `id` at
    /// (score, member); no search for the first node.
    fn predecessors(&self, id: u32, score: f64, member: &[u8]) -> Path {
        if self.arena.back(id) == NIL {
            return [HEAD; MAX_LEVEL];
        }
        let a = &self.arena;
        let mut update = [HEAD; MAX_LEVEL];
        let mut x = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let nx = a.next_at(x, i);
                a.prefetch_below(x, i);
                if nx == NIL || nx == id || !a.less_than(nx, score, member) {
                    break;
                }
                x = nx;
            }
            update[i] = x;
        }
        update
    }

    /// Links the written record `id` (of `level` levels) after the path
    /// found by [`ZIndex::search`].
    fn stitch(&mut self, id: u32, level: usize, mut update: Path, mut rank: Path) {
        let len = self.len as u32;
        let a = &mut self.arena;
        if level > self.level {
            for i in self.level..level {
                rank[i] = 0;
                update[i] = HEAD;
                a.set_link(HEAD, i, NIL, len);
            }
            self.level = level;
        }
        for i in 0..level {
            let (unext, uspan) = a.link(update[i], i);
            let d = rank[0] - rank[i];
            a.set_link(id, i, unext, uspan - d);
            a.set_link(update[i], i, id, d + 1);
        }
        for (i, &u) in update.iter().enumerate().take(self.level).skip(level) {
            let (_, span) = a.link(u, i);
            a.set_span(u, i, span + 1);
        }
        a.set_back(id, if update[0] == HEAD { NIL } else { update[0] });
        let nx = a.next_at(id, 0);
        if nx != NIL {
            a.set_back(nx, id);
        } else {
            self.tail = id;
        }
        self.len += 1;
    }

    /// Unlinks the node `id`, whose predecessors are `update`.
    fn unlink(&mut self, id: u32, update: &Path) {
        let a = &mut self.arena;
        let level = a.level(id);
        for (i, &u) in update.iter().enumerate().take(self.level) {
            let (unext, uspan) = a.link(u, i);
            if i < level {
                debug_assert_eq!(unext, id, "level {i}");
                let (next, span) = a.link(id, i);
                a.set_link(u, i, next, uspan + span - 1);
            } else {
                a.set_link(u, i, unext, uspan - 1);
            }
        }
        let nx = a.next_at(id, 0);
        let back = a.back(id);
        if nx != NIL {
            a.set_back(nx, back);
        } else {
            self.tail = back;
        }
        while self.level > 1 && a.next_at(HEAD, self.level - 1) == NIL {
            self.level -= 1;
        }
        self.len -= 1;
    }

    /// A record of `words` words: a free one of that size, else new.
    fn alloc(&mut self, words: usize) -> u32 {
        if let Some(head) = self.free.get_mut(words) {
            if *head != NIL {
                let id = *head;
                *head = self.arena.word(id, 0) as u32;
                self.free_words -= words;
                return id;
            }
        }
        let id = self.arena.words();
        assert!(
            id + words < NIL as usize,
            "sorted set index over 32 GiB of records"
        );
        self.arena.bytes.resize((id + words) * 8, 0);
        id as u32
    }

    /// Puts an unlinked record on its free list; rebuilds the arena when
    /// the free words outgrow the live ones.
    fn release(&mut self, id: u32) {
        let words = self.arena.size(id);
        self.free_words += words;
        if words < FREE_CLASSES {
            if self.free.is_empty() {
                self.free = vec![NIL; FREE_CLASSES];
            }
            self.arena.set_word(id, 0, u64::from(self.free[words]));
            self.free[words] = id;
        }
        let live = self.arena.words() - self.free_words;
        if self.free_words > live.max(COMPACT_MIN_WORDS) {
            self.compact();
        }
    }

    /// Back to the empty state, giving the memory back.
    fn clear(&mut self) {
        self.arena = Arena::with_head(HEAD_WORDS);
        self.table = HashTable::new();
        self.free = Vec::new();
        self.free_words = 0;
        self.level = 1;
        self.tail = NIL;
    }

    /// Copies the live records, in list order, into a new arena: no free
    /// words, and neighbours in the list are neighbours in memory. The
    /// hash table keeps its slots (a member's hash does not change); only
    /// the ids in them are rewritten.
    fn compact(&mut self) {
        let live = self.arena.words() - self.free_words;
        let mut old = std::mem::replace(&mut self.arena, Arena::with_head(live));
        let new = &mut self.arena;
        let mut last = [HEAD; MAX_LEVEL];
        let mut last_rank = [0u32; MAX_LEVEL];
        let mut rank = 0u32;
        let mut prev = NIL;
        let mut x = old.next_at(HEAD, 0);
        while x != NIL {
            rank += 1;
            let level = old.level(x);
            let words = old.size(x);
            let id = new.words() as u32;
            let o = x as usize * 8;
            new.bytes.extend_from_slice(&old.bytes[o..o + words * 8]);
            new.set_back(id, prev);
            for i in 0..level {
                new.set_link(last[i], i, id, rank - last_rank[i]);
                last[i] = id;
                last_rank[i] = rank;
            }
            let nx = old.next_at(x, 0);
            // The old record now only forwards to its copy.
            old.set_word(x, 0, u64::from(id));
            prev = id;
            x = nx;
        }
        for i in 0..self.level {
            new.set_link(last[i], i, NIL, rank - last_rank[i]);
        }
        self.tail = prev;
        for id in self.table.iter_mut() {
            *id = old.word(*id, 0) as u32;
        }
        let (arena, hasher) = (&self.arena, &self.hasher);
        self.table
            .shrink_to(self.len, |&x| hasher.hash_one(arena.member(x)));
        self.free = Vec::new();
        self.free_words = 0;
    }

    /// The 0-based rank of `member` in ascending order.
    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        let id = self.find(member)?;
        Some(self.rank_of_node(id))
    }

    /// The 0-based rank of a node.
    pub fn rank_of_node(&self, id: NodeId) -> usize {
        let a = &self.arena;
        let score = a.score(id);
        let member = a.member(id);
        let mut rank = 0usize;
        let mut x = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let (nx, span) = a.link(x, i);
                if nx == id {
                    return rank + span as usize - 1;
                }
                a.prefetch_below(x, i);
                if nx == NIL || !a.less_than(nx, score, member) {
                    break;
                }
                rank += span as usize;
                x = nx;
            }
        }
        unreachable!("rank_of_node called for a node not in the list")
    }

    /// The node at 0-based rank `r`.
    pub fn by_rank(&self, r: usize) -> Option<NodeId> {
        if r >= self.len {
            return None;
        }
        let a = &self.arena;
        let target = r + 1;
        let mut traversed = 0usize;
        let mut x = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let (nx, span) = a.link(x, i);
                a.prefetch_below(x, i);
                if nx == NIL || traversed + span as usize > target {
                    break;
                }
                traversed += span as usize;
                x = nx;
            }
            if traversed == target {
                return Some(x);
            }
        }
        None
    }

    /// The last node for which `before` holds, or `HEAD` if none does,
    /// found by descending the levels; `before` must hold for a prefix of
    /// the list (it is a "comes before the range" test).
    fn last_before(&self, before: impl Fn(&Arena, u32) -> bool) -> u32 {
        let a = &self.arena;
        let mut x = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let nx = a.next_at(x, i);
                a.prefetch_below(x, i);
                if nx == NIL || !before(a, nx) {
                    break;
                }
                x = nx;
            }
        }
        x
    }

    /// The first node whose score is in `range`.
    pub fn first_in_score(&self, range: &ScoreRange) -> Option<NodeId> {
        if range.is_empty() || self.len == 0 {
            return None;
        }
        let x = self.last_before(|a, n| !range.gte_min(a.score(n)));
        let x = self.arena.next_at(x, 0);
        (x != NIL && range.lte_max(self.arena.score(x))).then_some(x)
    }

    /// The last node whose score is in `range`.
    pub fn last_in_score(&self, range: &ScoreRange) -> Option<NodeId> {
        if range.is_empty() || self.len == 0 {
            return None;
        }
        let x = self.last_before(|a, n| range.lte_max(a.score(n)));
        (x != HEAD && range.gte_min(self.arena.score(x))).then_some(x)
    }

    /// The first node whose member is in `range` (meaningful when all
    /// scores are equal, as Redis's lexical commands assume).
    pub fn first_in_lex(&self, range: &LexRange) -> Option<NodeId> {
        if range.is_empty() || self.len == 0 {
            return None;
        }
        let x = self.last_before(|a, n| !range.gte_min(a.member(n)));
        let x = self.arena.next_at(x, 0);
        (x != NIL && range.lte_max(self.arena.member(x))).then_some(x)
    }

    /// The last node whose member is in `range`.
    pub fn last_in_lex(&self, range: &LexRange) -> Option<NodeId> {
        if range.is_empty() || self.len == 0 {
            return None;
        }
        let x = self.last_before(|a, n| range.lte_max(a.member(n)));
        (x != HEAD && range.gte_min(self.arena.member(x))).then_some(x)
    }

    /// Every (member, score) in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], f64)> + '_ {
        let a = &self.arena;
        let mut x = a.next_at(HEAD, 0);
        std::iter::from_fn(move || {
            if x == NIL {
                return None;
            }
            let id = x;
            x = a.next_at(id, 0);
            Some((a.member(id), a.score(id)))
        })
    }

    /// The (member, score) pairs from 0-based rank `start` to `end`
    /// inclusive, ascending or (`rev`) descending, where rank counts from
    /// the chosen end.
    pub fn range_by_rank(&self, start: usize, end: usize, rev: bool) -> Vec<(Vec<u8>, f64)> {
        let mut out = Vec::new();
        if start > end || start >= self.len {
            return out;
        }
        let end = end.min(self.len - 1);
        let first = if rev {
            self.by_rank(self.len - 1 - start)
        } else {
            self.by_rank(start)
        };
        let mut cur = first;
        for _ in start..=end {
            let Some(id) = cur else { break };
            let (m, s) = self.entry(id);
            out.push((m.to_vec(), s));
            cur = if rev { self.prev(id) } else { self.next(id) };
        }
        out
    }

    /// Checks the structure's invariants (tests).
    #[doc(hidden)]
    pub fn check(&self) {
        let a = &self.arena;
        let mut count = 0;
        let mut x = a.next_at(HEAD, 0);
        let mut prev = NIL;
        let mut positions = HashMap::new();
        let mut live_words = HEAD_WORDS;
        while x != NIL {
            assert_eq!(a.back(x), prev);
            if prev != NIL {
                assert!(less(a.score(prev), a.member(prev), a.score(x), a.member(x)));
            }
            assert!(a.level(x) >= 1 && a.level(x) <= self.level);
            assert_eq!(self.find(a.member(x)), Some(x), "hash table finds its node");
            count += 1;
            positions.insert(x, count);
            live_words += a.size(x);
            prev = x;
            x = a.next_at(x, 0);
        }
        assert_eq!(prev, self.tail);
        assert_eq!(count, self.len);
        assert_eq!(self.table.len(), self.len);
        assert_eq!(live_words + self.free_words, a.words(), "arena accounting");
        // Every span equals the number of level-0 steps it covers, and a
        // last link's span counts the nodes after its record.
        for i in 0..self.level {
            let mut x = HEAD;
            let mut pos = 0usize;
            loop {
                let (nx, span) = a.link(x, i);
                if nx == NIL {
                    assert_eq!(pos + span as usize, self.len, "level {i} tail span");
                    break;
                }
                assert_eq!(pos + span as usize, positions[&nx], "level {i}");
                pos += span as usize;
                x = nx;
            }
        }
    }
}

/// Default byte budget of [`ZCache`]: 1 GiB of estimated index memory.
pub const DEFAULT_BUDGET: usize = 1 << 30;

const CACHE_SHARDS: usize = 64;

#[derive(Debug)]
struct Cached {
    generation: u64,
    key: Box<[u8]>,
    version: u64,
    /// `None` while a command has the index checked out. The slot stays so
    /// that checking it back in allocates nothing.
    index: Option<ZIndex>,
    /// The index's [`ZIndex::approx_bytes`] (0 while checked out).
    bytes: usize,
    last_used: u64,
}

#[derive(Debug, Default)]
struct CacheShard {
    table: HashTable<Cached>,
}

/// The process-wide cache of sorted-set indexes.
///
/// Entries are keyed by (engine generation, key) and carry the key's engine
/// version when they were stored; a lookup whose version differs rebuilds.
/// The sum of the entries' estimated sizes ([`ZIndex::approx_bytes`]) is
/// bounded by a budget ([`DEFAULT_BUDGET`], [`ZCache::set_budget`]): when a
/// check-in pushes it over, the least recently used entries are dropped
/// until it is under 3/4 of the budget (an index being used is not in the
/// cache, so it is never dropped; a single set bigger than the budget stays
/// cached until something else is used). A dropped index is rebuilt from
/// the engine on its next use, which costs one disk read per member.
#[derive(Debug)]
pub struct ZCache {
    shards: Box<[Mutex<CacheShard>]>,
    bytes: AtomicUsize,
    budget: AtomicUsize,
    tick: AtomicU64,
    hasher: DefaultHashBuilder,
}

impl Default for ZCache {
    fn default() -> Self {
        ZCache::new(DEFAULT_BUDGET)
    }
}

impl ZCache {
    /// A cache with a byte budget.
    pub fn new(budget: usize) -> ZCache {
        ZCache {
            shards: (0..CACHE_SHARDS).map(|_| Mutex::default()).collect(),
            bytes: AtomicUsize::new(0),
            budget: AtomicUsize::new(budget),
            tick: AtomicU64::new(0),
            hasher: DefaultHashBuilder::default(),
        }
    }

    /// The process-wide cache.
    pub fn global() -> &'static ZCache {
        static CACHE: std::sync::OnceLock<ZCache> = std::sync::OnceLock::new();
        CACHE.get_or_init(ZCache::default)
    }

    /// Changes the byte budget.
    pub fn set_budget(&self, bytes: usize) {
        self.budget.store(bytes, Ordering::Relaxed);
    }

    /// Estimated bytes of the cached indexes.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    fn hash(&self, generation: u64, key: &[u8]) -> u64 {
        self.hasher.hash_one((generation, key))
    }

    /// The shard of a hash: bits 32..38, which the shard's own table uses
    /// neither for its bucket (low bits) nor for its tags (top 7 bits).
    fn shard(&self, hash: u64) -> &Mutex<CacheShard> {
        &self.shards[(hash >> 32) as usize % CACHE_SHARDS]
    }

    /// Takes the index of (generation, key) out of the cache if it was
    /// stored at `version`; a stale entry is dropped. The caller holds the
    /// key's stripe lock and gives the index back with [`ZCache::checkin`].
    pub fn checkout(&self, generation: u64, key: &[u8], version: u64) -> Option<ZIndex> {
        let h = self.hash(generation, key);
        let stale = {
            let mut shard = self.shard(h).lock();
            let entry = shard
                .table
                .find_entry(h, |c| c.generation == generation && *c.key == *key)
                .ok()?;
            if entry.get().version == version {
                let c = entry.into_mut();
                let ix = c.index.take()?;
                self.bytes.fetch_sub(c.bytes, Ordering::Relaxed);
                c.bytes = 0;
                return Some(ix);
            }
            entry.remove().0
        };
        self.bytes.fetch_sub(stale.bytes, Ordering::Relaxed);
        None
    }

    /// Whether the cache has the index of (generation, key) at `version`,
    /// or a command has it checked out, whatever the version: that
    /// command holds the key's stripe, may be writing the key right now
    /// (so `version` may be newer than the entry's), and checks the index
    /// back in under the key's version when it is done. A look, under the
    /// shard's lock only.
    pub fn holds(&self, generation: u64, key: &[u8], version: u64) -> bool {
        let h = self.hash(generation, key);
        let shard = self.shard(h).lock();
        shard
            .table
            .find(h, |c| c.generation == generation && *c.key == *key)
            .is_some_and(|c| c.index.is_none() || c.version == version)
    }

    /// Drops the entry of (generation, key), if any.
    pub fn forget(&self, generation: u64, key: &[u8]) {
        let h = self.hash(generation, key);
        let removed = {
            let mut shard = self.shard(h).lock();
            match shard
                .table
                .find_entry(h, |c| c.generation == generation && *c.key == *key)
            {
                Ok(entry) => entry.remove().0,
                Err(_) => return,
            }
        };
        self.bytes.fetch_sub(removed.bytes, Ordering::Relaxed);
    }

    /// Stores the index of (generation, key) as valid at `version`. An
    /// empty index is not stored (the key does not exist).
    pub fn checkin(&self, generation: u64, key: &[u8], version: u64, index: ZIndex) {
        if index.is_empty() || version == 0 {
            self.forget(generation, key);
            return;
        }
        let h = self.hash(generation, key);
        let bytes = index.approx_bytes();
        let last_used = self.tick.fetch_add(1, Ordering::Relaxed);
        let (old, old_bytes) = {
            let mut shard = self.shard(h).lock();
            match shard
                .table
                .find_mut(h, |c| c.generation == generation && *c.key == *key)
            {
                Some(c) => {
                    let old_bytes = std::mem::replace(&mut c.bytes, bytes);
                    c.version = version;
                    c.last_used = last_used;
                    (c.index.replace(index), old_bytes)
                }
                None => {
                    let hasher = &self.hasher;
                    shard.table.insert_unique(
                        h,
                        Cached {
                            generation,
                            key: key.into(),
                            version,
                            index: Some(index),
                            bytes,
                            last_used,
                        },
                        |c| hasher.hash_one((c.generation, &*c.key)),
                    );
                    (None, 0)
                }
            }
        };
        drop(old);
        self.bytes.fetch_sub(old_bytes, Ordering::Relaxed);
        let total = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if total > self.budget.load(Ordering::Relaxed) {
            self.evict(last_used);
        }
    }

    /// Drops least recently used entries (never the one used at `keep`)
    /// until the total is under 3/4 of the budget. Empty slots (indexes
    /// checked out, or dropped by a command that failed) go too: checking
    /// in recreates a slot.
    fn evict(&self, keep: u64) {
        let target = self.budget.load(Ordering::Relaxed) / 4 * 3;
        let mut all: Vec<(u64, u64, Box<[u8]>)> = Vec::new();
        for shard in self.shards.iter() {
            let mut s = shard.lock();
            s.table.retain(|c| c.index.is_some());
            all.extend(
                s.table
                    .iter()
                    .filter(|c| c.last_used != keep)
                    .map(|c| (c.last_used, c.generation, c.key.clone())),
            );
        }
        all.sort_unstable_by_key(|e| e.0);
        for (_, generation, key) in all {
            if self.bytes.load(Ordering::Relaxed) <= target {
                break;
            }
            self.forget(generation, &key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn model_sorted(m: &HashMap<Vec<u8>, f64>) -> Vec<(Vec<u8>, f64)> {
        let mut v: Vec<(Vec<u8>, f64)> = m.iter().map(|(k, s)| (k.clone(), *s)).collect();
        v.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap().then_with(|| a.0.cmp(&b.0)));
        v
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, i8),
        Remove(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u8..40, -5i8..5).prop_map(|(m, s)| Op::Insert(m, s)),
            1 => (0u8..40).prop_map(Op::Remove),
        ]
    }

    proptest! {
        #[test]
        fn skiplist_matches_a_sorted_vec(ops in prop::collection::vec(op(), 1..200),
                                         lo in -6i8..6, hi in -6i8..6,
                                         lo_ex: bool, hi_ex: bool) {
            let mut z = ZIndex::new();
            let mut model: HashMap<Vec<u8>, f64> = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(m, s) => {
                        let m = vec![b'a' + m % 26, m];
                        let s = s as f64 / 2.0;
                        prop_assert_eq!(z.insert(&m, s), model.insert(m.clone(), s));
                    }
                    Op::Remove(m) => {
                        let m = vec![b'a' + m % 26, m];
                        prop_assert_eq!(z.remove(&m), model.remove(&m));
                    }
                }
            }
            z.check();
            let sorted = model_sorted(&model);
            let got: Vec<(Vec<u8>, f64)> = z.iter().map(|(m, s)| (m.to_vec(), s)).collect();
            prop_assert_eq!(&got, &sorted);
            for (r, (m, _)) in sorted.iter().enumerate() {
                prop_assert_eq!(z.rank(m), Some(r));
                let id = z.by_rank(r).unwrap();
                prop_assert_eq!(z.entry(id).0, m.as_slice());
                prop_assert_eq!(z.rank_of_node(id), r);
            }
            prop_assert_eq!(z.by_rank(sorted.len()), None);
            let range = ScoreRange { min: lo as f64 / 2.0, min_ex: lo_ex, max: hi as f64 / 2.0, max_ex: hi_ex };
            let want: Vec<&Vec<u8>> = sorted.iter().filter(|(_, s)| range.gte_min(*s) && range.lte_max(*s)).map(|(m, _)| m).collect();
            let first = z.first_in_score(&range).map(|id| z.entry(id).0.to_vec());
            let last = z.last_in_score(&range).map(|id| z.entry(id).0.to_vec());
            prop_assert_eq!(first.as_ref(), want.first().copied());
            prop_assert_eq!(last.as_ref(), want.last().copied());
            // Lexical ranges over members when all scores are equal.
            let mut flat = ZIndex::new();
            for (m, _) in &sorted {
                flat.insert(m, 0.0);
            }
            let lex = LexRange {
                min: if lo_ex { LexBound::Excl(vec![b'a' + (lo + 6) as u8]) } else { LexBound::Incl(vec![b'a' + (lo + 6) as u8]) },
                max: if hi_ex { LexBound::PosInf } else { LexBound::Incl(vec![b'a' + (hi + 12) as u8]) },
            };
            let mut members: Vec<&Vec<u8>> = sorted.iter().map(|(m, _)| m).collect();
            members.sort();
            let want: Vec<&&Vec<u8>> = members.iter().filter(|m| lex.gte_min(m) && lex.lte_max(m)).collect();
            let first = flat.first_in_lex(&lex).map(|id| flat.entry(id).0.to_vec());
            let last = flat.last_in_lex(&lex).map(|id| flat.entry(id).0.to_vec());
            prop_assert_eq!(first.as_ref(), want.first().map(|m| **m));
            prop_assert_eq!(last.as_ref(), want.last().map(|m| **m));
        }
    }

    #[test]
    fn large_index_ranks_and_removal() {
        let mut z = ZIndex::new();
        for i in 0..5000u32 {
            z.insert(format!("m{i:05}").as_bytes(), (i % 100) as f64);
        }
        z.check();
        for i in (0..5000u32).step_by(3) {
            assert!(z.remove(format!("m{i:05}").as_bytes()).is_some());
        }
        z.check();
        let ranks: Vec<usize> = (0..z.len())
            .map(|r| z.rank_of_node(z.by_rank(r).unwrap()))
            .collect();
        assert_eq!(ranks, (0..z.len()).collect::<Vec<_>>());
    }

    #[test]
    fn score_updates_in_place_and_across_the_list() {
        let mut z = ZIndex::new();
        for i in 0..2000u32 {
            z.insert(format!("m{i}").as_bytes(), f64::from(i));
        }
        let words = z.arena.words();
        // Stays between its neighbours: the record is only rewritten.
        assert_eq!(z.insert(b"m500", 500.5), Some(500.0));
        assert_eq!(z.rank(b"m500"), Some(500));
        // Moves to the front, the back, and past an equal score.
        assert_eq!(z.insert(b"m700", -1.0), Some(700.0));
        assert_eq!(z.rank(b"m700"), Some(0));
        assert_eq!(z.insert(b"m3", 1e9), Some(3.0));
        assert_eq!(z.rank(b"m3"), Some(1999));
        assert_eq!(z.insert(b"m9", 10.0), Some(9.0));
        assert_eq!(z.rank(b"m9"), Some(10), "m10 (10) sorts before m9 (10)");
        assert_eq!(z.insert(b"m0", -0.0), Some(0.0));
        assert_eq!(z.score(b"m0").map(f64::to_bits), Some((-0.0f64).to_bits()));
        assert_eq!(z.arena.words(), words, "updates allocate no record");
        z.check();
    }

    #[test]
    fn removals_recycle_records_and_compact_the_arena() {
        let mut z = ZIndex::new();
        let name = |i: u32| format!("member-{}-{i}", "x".repeat((i % 7) as usize * 5));
        for i in 0..6000u32 {
            z.insert(name(i).as_bytes(), f64::from(i % 50));
        }
        let full = z.arena.words();
        // Pop from the front (no search) and remove from the middle.
        for r in 0..1000 {
            let first = z.by_rank(0).unwrap();
            let m = z.entry(first).0.to_vec();
            assert!(z.remove(&m).is_some(), "pop {r}");
        }
        for i in (0..6000u32).step_by(2) {
            z.remove(name(i).as_bytes());
        }
        z.check();
        assert!(z.arena.words() < full, "compacted");
        assert!(z.free_words <= z.arena.words() / 2);
        for i in 0..6000u32 {
            let m = name(i);
            let want = z.score(m.as_bytes());
            assert_eq!(z.insert(m.as_bytes(), f64::from(i % 13)), want);
        }
        z.check();
        assert_eq!(z.len(), 6000);
        let ranks: Vec<usize> = (0..z.len())
            .map(|r| z.rank_of_node(z.by_rank(r).unwrap()))
            .collect();
        assert_eq!(ranks, (0..6000).collect::<Vec<_>>());
        while let Some(id) = z.by_rank(0) {
            let m = z.entry(id).0.to_vec();
            z.remove(&m);
        }
        assert!(z.is_empty());
        assert_eq!(
            z.arena.words(),
            HEAD_WORDS,
            "an empty index gives its arena back"
        );
        z.check();
    }

    #[test]
    fn members_of_every_length_round_trip() {
        let mut z = ZIndex::new();
        let long = vec![b'L'; LONG_LEN as usize + 5];
        let members: Vec<Vec<u8>> = (0..=17)
            .map(|n| vec![b'a'; n])
            .chain([
                vec![0u8, 255, 0],
                long.clone(),
                vec![b'L'; LONG_LEN as usize],
            ])
            .collect();
        for (i, m) in members.iter().enumerate() {
            assert_eq!(z.insert(m, i as f64), None);
        }
        z.check();
        for (i, m) in members.iter().enumerate() {
            assert_eq!(z.score(m), Some(i as f64));
            assert_eq!(z.entry(z.by_rank(i).unwrap()).0, m.as_slice());
        }
        assert_eq!(z.remove(&long), Some(19.0));
        assert_eq!(z.score(&long), None);
        z.check();
    }

    #[test]
    fn cache_slot_of_a_dropped_index_is_a_miss_and_refills() {
        let cache = ZCache::new(1 << 20);
        let mut z = ZIndex::new();
        z.insert(b"a", 1.0);
        cache.checkin(7, b"k", 1, z);
        let bytes = cache.bytes();
        assert!(bytes > 0);
        let z = cache.checkout(7, b"k", 1).expect("cached");
        assert_eq!(cache.bytes(), 0, "a checked-out index is not counted");
        drop(z); // a command failed half-way
        assert!(cache.checkout(7, b"k", 1).is_none());
        assert!(cache.checkout(8, b"k", 1).is_none(), "other generation");
        let mut z = ZIndex::new();
        z.insert(b"a", 2.0);
        cache.checkin(7, b"k", 2, z);
        assert_eq!(cache.bytes(), bytes);
        assert_eq!(cache.checkout(7, b"k", 2).unwrap().score(b"a"), Some(2.0));
        // An emptied set is not stored, and its slot goes.
        cache.checkin(7, b"k", 3, ZIndex::new());
        assert!(cache.checkout(7, b"k", 3).is_none());
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn built_from_items_equals_built_by_inserts() {
        let items: Vec<(Vec<u8>, f64)> = (0..3000u32)
            .map(|i| {
                (
                    format!("m{}", i * 7919 % 3001).into_bytes(),
                    f64::from(i % 17) - 8.0,
                )
            })
            .chain([(b"z".to_vec(), -0.0), (b"y".to_vec(), 0.0)])
            .collect();
        let bulk = ZIndex::from_items(items.clone());
        bulk.check();
        let mut one_by_one = ZIndex::new();
        for (m, s) in &items {
            one_by_one.insert(m, *s);
        }
        assert!(bulk.iter().eq(one_by_one.iter()));
        for r in (0..bulk.len()).step_by(97) {
            let id = bulk.by_rank(r).unwrap();
            assert_eq!(bulk.rank(bulk.entry(id).0), Some(r));
        }
        // A repeated member keeps its higher score.
        let dup = ZIndex::from_items(vec![
            (b"a".to_vec(), 3.0),
            (b"b".to_vec(), 1.0),
            (b"a".to_vec(), 2.0),
        ]);
        dup.check();
        assert_eq!(dup.score(b"a"), Some(3.0));
        assert_eq!(dup.len(), 2);
        assert!(ZIndex::from_items(Vec::new()).is_empty());
    }

    #[test]
    fn cache_is_keyed_by_version_and_bounded() {
        let cache = ZCache::new(10_000);
        let mut z = ZIndex::new();
        z.insert(b"a", 1.0);
        cache.checkin(1, b"k", 5, z);
        assert!(cache.checkout(1, b"k", 6).is_none(), "stale version");
        assert!(cache.checkout(1, b"k", 5).is_none(), "stale entry dropped");
        for i in 0..100u64 {
            let mut z = ZIndex::new();
            z.insert(b"member", 1.0);
            cache.checkin(1, &i.to_le_bytes(), 1, z);
        }
        assert!(cache.bytes() <= 10_000);
        assert!(cache.checkout(1, &99u64.to_le_bytes(), 1).is_some());
    }
}
