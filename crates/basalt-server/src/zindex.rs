//! The in-memory ordered index of a sorted set, and the process-wide cache
//! that keeps one per sorted set.
//!
//! The engine stores a sorted set as a map (member -> 8-byte score) and
//! knows no order. Ranks and ranges need one, so each sorted set in use has
//! a [`ZIndex`]: a skiplist with spans (as Redis's `zskiplist`: every link
//! records how many nodes it skips, so rank lookups and "the node at rank r"
//! are O(log n)) over (score, member), plus a member -> score hash map.
//! Nodes live in one arena `Vec` addressed by `u32` ids, so the list holds
//! no pointers and no `unsafe`.
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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

const NIL: u32 = u32::MAX;
const HEAD: u32 = 0;
const MAX_LEVEL: usize = 32;

#[derive(Debug, Clone, Copy)]
struct Level {
    next: u32,
    span: u32,
}

#[derive(Debug)]
struct Node {
    member: Box<[u8]>,
    score: f64,
    back: u32,
    levels: Box<[Level]>,
}

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

/// A sorted set's ordered index: (score, member) in order, with ranks.
#[derive(Debug)]
pub struct ZIndex {
    nodes: Vec<Node>,
    free: Vec<u32>,
    level: usize,
    tail: u32,
    len: usize,
    scores: HashMap<Box<[u8]>, f64>,
    rng: u64,
    /// Bytes of members stored (for the cache's budget).
    member_bytes: usize,
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

impl ZIndex {
    /// An empty index.
    pub fn new() -> ZIndex {
        ZIndex {
            nodes: vec![Node {
                member: Box::default(),
                score: 0.0,
                back: NIL,
                levels: vec![Level { next: NIL, span: 0 }; MAX_LEVEL].into_boxed_slice(),
            }],
            free: Vec::new(),
            level: 1,
            tail: NIL,
            len: 0,
            scores: HashMap::new(),
            rng: 0x2545_F491_4F6C_DD1D,
            member_bytes: 0,
        }
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no members.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Approximate heap bytes used (the cache's budget unit).
    pub fn approx_bytes(&self) -> usize {
        // Per member: the node (~40 bytes + levels, 1.33 on average at
        // p = 1/4), the member twice (node and hash map) and the map slot.
        self.len * 120 + self.member_bytes * 2 + 256
    }

    /// The score of `member`.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).copied()
    }

    /// The member and score of a node.
    pub fn entry(&self, id: NodeId) -> (&[u8], f64) {
        let n = &self.nodes[id as usize];
        (&n.member, n.score)
    }

    /// The node after `id` in order.
    pub fn next(&self, id: NodeId) -> Option<NodeId> {
        let n = self.nodes[id as usize].levels[0].next;
        (n != NIL).then_some(n)
    }

    /// The node before `id` in order.
    pub fn prev(&self, id: NodeId) -> Option<NodeId> {
        let b = self.nodes[id as usize].back;
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

    fn next_at(&self, x: u32, i: usize) -> u32 {
        self.nodes[x as usize].levels[i].next
    }

    /// Sets `member`'s score, adding it if new. Returns the old score.
    pub fn insert(&mut self, member: &[u8], score: f64) -> Option<f64> {
        debug_assert!(!score.is_nan());
        if let Some(old) = self.scores.get_mut(member) {
            let prev = *old;
            if prev == score && prev.to_bits() == score.to_bits() {
                return Some(prev);
            }
            *old = score;
            let (removed, _) = self
                .unlink(prev, member)
                .expect("member in map but not in list");
            self.link(removed.member, score);
            return Some(prev);
        }
        self.scores.insert(member.into(), score);
        self.member_bytes += member.len();
        self.link(member.into(), score);
        None
    }

    /// Removes `member`. Returns its score.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        let score = self.scores.remove(member)?;
        self.member_bytes -= member.len();
        self.unlink(score, member)
            .expect("member in map but not in list");
        Some(score)
    }

    fn link(&mut self, member: Box<[u8]>, score: f64) {
        let mut update = [HEAD; MAX_LEVEL];
        let mut rank = [0u32; MAX_LEVEL];
        let mut x = HEAD;
        for i in (0..self.level).rev() {
            rank[i] = if i == self.level - 1 { 0 } else { rank[i + 1] };
            loop {
                let nx = self.next_at(x, i);
                if nx == NIL {
                    break;
                }
                let n = &self.nodes[nx as usize];
                if !less(n.score, &n.member, score, &member) {
                    break;
                }
                rank[i] += self.nodes[x as usize].levels[i].span;
                x = nx;
            }
            update[i] = x;
        }
        let lvl = self.random_level();
        if lvl > self.level {
            for i in self.level..lvl {
                rank[i] = 0;
                update[i] = HEAD;
                self.nodes[HEAD as usize].levels[i].span = self.len as u32;
            }
            self.level = lvl;
        }
        let node = Node {
            member,
            score,
            back: NIL,
            levels: vec![Level { next: NIL, span: 0 }; lvl].into_boxed_slice(),
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.nodes[id as usize] = node;
                id
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        for i in 0..lvl {
            let u = update[i] as usize;
            let ul = self.nodes[u].levels[i];
            self.nodes[id as usize].levels[i] = Level {
                next: ul.next,
                span: ul.span - (rank[0] - rank[i]),
            };
            self.nodes[u].levels[i] = Level {
                next: id,
                span: rank[0] - rank[i] + 1,
            };
        }
        for (i, &u) in update.iter().enumerate().take(self.level).skip(lvl) {
            self.nodes[u as usize].levels[i].span += 1;
        }
        self.nodes[id as usize].back = if update[0] == HEAD { NIL } else { update[0] };
        let nx = self.nodes[id as usize].levels[0].next;
        if nx != NIL {
            self.nodes[nx as usize].back = id;
        } else {
            self.tail = id;
        }
        self.len += 1;
    }

    /// Unlinks the node (score, member); returns it with its old id.
    fn unlink(&mut self, score: f64, member: &[u8]) -> Option<(Node, u32)> {
        let mut update = [HEAD; MAX_LEVEL];
        let mut x = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let nx = self.next_at(x, i);
                if nx == NIL {
                    break;
                }
                let n = &self.nodes[nx as usize];
                if !less(n.score, &n.member, score, member) {
                    break;
                }
                x = nx;
            }
            update[i] = x;
        }
        let id = self.next_at(x, 0);
        if id == NIL {
            return None;
        }
        {
            let n = &self.nodes[id as usize];
            if n.score != score || &*n.member != member {
                return None;
            }
        }
        for (i, &u) in update.iter().enumerate().take(self.level) {
            let u = u as usize;
            if self.nodes[u].levels[i].next == id {
                let own = self.nodes[id as usize].levels[i];
                self.nodes[u].levels[i].span += own.span;
                self.nodes[u].levels[i].span -= 1;
                self.nodes[u].levels[i].next = own.next;
            } else {
                self.nodes[u].levels[i].span -= 1;
            }
        }
        let (nx, back) = {
            let n = &self.nodes[id as usize];
            (n.levels[0].next, n.back)
        };
        if nx != NIL {
            self.nodes[nx as usize].back = back;
        } else {
            self.tail = back;
        }
        while self.level > 1 && self.next_at(HEAD, self.level - 1) == NIL {
            self.level -= 1;
        }
        self.len -= 1;
        let node = std::mem::replace(
            &mut self.nodes[id as usize],
            Node {
                member: Box::default(),
                score: 0.0,
                back: NIL,
                levels: Box::default(),
            },
        );
        self.free.push(id);
        if self.len == 0 {
            // Give the arena back once the set is empty.
            self.nodes.truncate(1);
            self.free.clear();
        }
        Some((node, id))
    }

    /// The 0-based rank of `member` in ascending order.
    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        let score = self.score(member)?;
        Some(self.rank_of(score, member) - 1)
    }

    /// 1-based rank of an existing (score, member).
    fn rank_of(&self, score: f64, member: &[u8]) -> usize {
        let mut rank = 0usize;
        let mut x = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let nx = self.next_at(x, i);
                if nx == NIL {
                    break;
                }
                let n = &self.nodes[nx as usize];
                if !(less(n.score, &n.member, score, member)
                    || (n.score == score && &*n.member == member))
                {
                    break;
                }
                rank += self.nodes[x as usize].levels[i].span as usize;
                x = nx;
            }
            if x != HEAD && &*self.nodes[x as usize].member == member {
                return rank;
            }
        }
        unreachable!("rank_of called for a member not in the list")
    }

    /// The 0-based rank of a node.
    pub fn rank_of_node(&self, id: NodeId) -> usize {
        let n = &self.nodes[id as usize];
        self.rank_of(n.score, &n.member) - 1
    }

    /// The node at 0-based rank `r`.
    pub fn by_rank(&self, r: usize) -> Option<NodeId> {
        if r >= self.len {
            return None;
        }
        let target = r + 1;
        let mut traversed = 0usize;
        let mut x = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let nx = self.next_at(x, i);
                let span = self.nodes[x as usize].levels[i].span as usize;
                if nx == NIL || traversed + span > target {
                    break;
                }
                traversed += span;
                x = nx;
            }
            if traversed == target {
                return Some(x);
            }
        }
        None
    }

    /// The first node whose score is in `range`.
    pub fn first_in_score(&self, range: &ScoreRange) -> Option<NodeId> {
        if range.is_empty() || self.len == 0 {
            return None;
        }
        let mut x = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let nx = self.next_at(x, i);
                if nx == NIL || range.gte_min(self.nodes[nx as usize].score) {
                    break;
                }
                x = nx;
            }
        }
        let x = self.next_at(x, 0);
        (x != NIL && range.lte_max(self.nodes[x as usize].score)).then_some(x)
    }

    /// The last node whose score is in `range`.
    pub fn last_in_score(&self, range: &ScoreRange) -> Option<NodeId> {
        if range.is_empty() || self.len == 0 {
            return None;
        }
        let mut x = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let nx = self.next_at(x, i);
                if nx == NIL || !range.lte_max(self.nodes[nx as usize].score) {
                    break;
                }
                x = nx;
            }
        }
        (x != HEAD && range.gte_min(self.nodes[x as usize].score)).then_some(x)
    }

    /// The first node whose member is in `range` (meaningful when all
    /// scores are equal, as Redis's lexical commands assume).
    pub fn first_in_lex(&self, range: &LexRange) -> Option<NodeId> {
        if range.is_empty() || self.len == 0 {
            return None;
        }
        let mut x = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let nx = self.next_at(x, i);
                if nx == NIL || range.gte_min(&self.nodes[nx as usize].member) {
                    break;
                }
                x = nx;
            }
        }
        let x = self.next_at(x, 0);
        (x != NIL && range.lte_max(&self.nodes[x as usize].member)).then_some(x)
    }

    /// The last node whose member is in `range`.
    pub fn last_in_lex(&self, range: &LexRange) -> Option<NodeId> {
        if range.is_empty() || self.len == 0 {
            return None;
        }
        let mut x = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let nx = self.next_at(x, i);
                if nx == NIL || !range.lte_max(&self.nodes[nx as usize].member) {
                    break;
                }
                x = nx;
            }
        }
        (x != HEAD && range.gte_min(&self.nodes[x as usize].member)).then_some(x)
    }

    /// Every (member, score) in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], f64)> + '_ {
        let mut x = self.next_at(HEAD, 0);
        std::iter::from_fn(move || {
            if x == NIL {
                return None;
            }
            let n = &self.nodes[x as usize];
            x = n.levels[0].next;
            Some((&*n.member, n.score))
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
        let mut count = 0;
        let mut x = self.next_at(HEAD, 0);
        let mut prev = NIL;
        while x != NIL {
            let n = &self.nodes[x as usize];
            assert_eq!(n.back, prev);
            if prev != NIL {
                let p = &self.nodes[prev as usize];
                assert!(less(p.score, &p.member, n.score, &n.member));
            }
            assert_eq!(self.scores.get(&*n.member).copied(), Some(n.score));
            count += 1;
            prev = x;
            x = n.levels[0].next;
        }
        assert_eq!(prev, self.tail);
        assert_eq!(count, self.len);
        assert_eq!(self.scores.len(), self.len);
        // Every span equals the number of level-0 steps it covers.
        for i in 0..self.level {
            let mut x = HEAD;
            let mut pos = 0usize;
            let mut positions = HashMap::new();
            let mut y = self.next_at(HEAD, 0);
            let mut p = 1;
            while y != NIL {
                positions.insert(y, p);
                p += 1;
                y = self.next_at(y, 0);
            }
            loop {
                let nx = self.next_at(x, i);
                if nx == NIL {
                    break;
                }
                let span = self.nodes[x as usize].levels[i].span as usize;
                assert_eq!(pos + span, positions[&nx], "level {i}");
                pos += span;
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
    version: u64,
    index: ZIndex,
    bytes: usize,
    last_used: u64,
}

#[derive(Debug, Default)]
struct CacheShard {
    /// Keyed by the engine generation (8 bytes LE) followed by the key.
    map: HashMap<Vec<u8>, Cached>,
}

/// The process-wide cache of sorted-set indexes.
///
/// Entries are keyed by (engine generation, key) and carry the key's engine
/// version when they were stored; a lookup whose version differs rebuilds.
/// The sum of the entries' estimated sizes ([`ZIndex::approx_bytes`]) is
/// bounded by a budget ([`DEFAULT_BUDGET`], [`ZCache::set_budget`]): when a
/// check-in pushes it over, the least recently used entries are dropped
/// until it is under 3/4 of the budget (an entry being used is never in the
/// map, so it is never dropped; a single set bigger than the budget stays
/// cached until something else is used). A dropped index is rebuilt from
/// the engine on its next use, which costs one disk read per member.
#[derive(Debug)]
pub struct ZCache {
    shards: Box<[Mutex<CacheShard>]>,
    bytes: AtomicUsize,
    budget: AtomicUsize,
    tick: AtomicU64,
}

impl Default for ZCache {
    fn default() -> Self {
        ZCache::new(DEFAULT_BUDGET)
    }
}

fn cache_key(generation: u64, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + key.len());
    k.extend_from_slice(&generation.to_le_bytes());
    k.extend_from_slice(key);
    k
}

impl ZCache {
    /// A cache with a byte budget.
    pub fn new(budget: usize) -> ZCache {
        ZCache {
            shards: (0..CACHE_SHARDS).map(|_| Mutex::default()).collect(),
            bytes: AtomicUsize::new(0),
            budget: AtomicUsize::new(budget),
            tick: AtomicU64::new(0),
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

    fn shard(&self, ck: &[u8]) -> &Mutex<CacheShard> {
        let h = crc32c::crc32c(ck) as usize;
        &self.shards[h % CACHE_SHARDS]
    }

    /// Takes the index of (generation, key) out of the cache if it was
    /// stored at `version`; a stale entry is dropped. The caller holds the
    /// key's stripe lock and gives the index back with [`ZCache::checkin`].
    pub fn checkout(&self, generation: u64, key: &[u8], version: u64) -> Option<ZIndex> {
        let ck = cache_key(generation, key);
        let c = self.shard(&ck).lock().map.remove(&ck)?;
        self.bytes.fetch_sub(c.bytes, Ordering::Relaxed);
        (c.version == version).then_some(c.index)
    }

    /// Drops the entry of (generation, key), if any.
    pub fn forget(&self, generation: u64, key: &[u8]) {
        let ck = cache_key(generation, key);
        if let Some(c) = self.shard(&ck).lock().map.remove(&ck) {
            self.bytes.fetch_sub(c.bytes, Ordering::Relaxed);
        }
    }

    /// Stores the index of (generation, key) as valid at `version`. An
    /// empty index is not stored (the key does not exist).
    pub fn checkin(&self, generation: u64, key: &[u8], version: u64, index: ZIndex) {
        if index.is_empty() || version == 0 {
            return;
        }
        let ck = cache_key(generation, key);
        let bytes = index.approx_bytes();
        let last_used = self.tick.fetch_add(1, Ordering::Relaxed);
        let old = self.shard(&ck).lock().map.insert(
            ck,
            Cached {
                version,
                index,
                bytes,
                last_used,
            },
        );
        if let Some(old) = old {
            self.bytes.fetch_sub(old.bytes, Ordering::Relaxed);
        }
        let total = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if total > self.budget.load(Ordering::Relaxed) {
            self.evict(last_used);
        }
    }

    /// Drops least recently used entries (never the one used at `keep`)
    /// until the total is under 3/4 of the budget.
    fn evict(&self, keep: u64) {
        let target = self.budget.load(Ordering::Relaxed) / 4 * 3;
        let mut all: Vec<(u64, usize, Vec<u8>)> = Vec::new();
        for (i, shard) in self.shards.iter().enumerate() {
            let s = shard.lock();
            all.extend(
                s.map
                    .iter()
                    .filter(|(_, c)| c.last_used != keep)
                    .map(|(k, c)| (c.last_used, i, k.clone())),
            );
        }
        all.sort_unstable_by_key(|e| e.0);
        for (_, i, k) in all {
            if self.bytes.load(Ordering::Relaxed) <= target {
                break;
            }
            if let Some(c) = self.shards[i].lock().map.remove(&k) {
                self.bytes.fetch_sub(c.bytes, Ordering::Relaxed);
            }
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
