//! List commands (Redis `t_list.c`), stored in the engine as a map tagged
//! [`TAG_LIST`] whose fields are **positions**.
//!
//! The one idea a reader needs: an element lives in the field named by its
//! position, an `i64` encoded big-endian with the sign bit flipped (so byte
//! order is numeric order), and positions are dense from `head` to
//! `head + len - 1`. A push writes one field just outside the ends, a pop
//! deletes one at an end, and LINDEX / LSET / LRANGE read or write fields by
//! position directly: one record per element pushed or popped, one disk
//! read per element returned.
//!
//! `head` is not stored: the engine knows the length (`meta`), and an
//! in-memory cache maps (slot generation, db, key) to the head it last saw,
//! valid while the key's engine version is the one recorded with it. A miss
//! (first touch since start-up, a RENAME, a write from elsewhere) rebuilds
//! it from the field names, which are in memory: O(len) without disk
//! reads. Every list write holds the key's stripe lock and refreshes the
//! cache before releasing it; reads take the stripe too, so a reader never
//! sees a half-done LINSERT.
//!
//! Commands that change the middle (LINSERT, LREM) shift the elements on
//! the cheaper side of the change by rewriting their fields: O(elements
//! moved) records. The rewrites run in the order that never leaves a hole,
//! so a crash in the middle can leave one element duplicated next to its
//! old place, but never loses one nor breaks the dense layout. LTRIM only
//! deletes at the ends.
//!
//! Blocking pops (BLPOP BRPOP BLMOVE BRPOPLPUSH BLMPOP) follow
//! `crate::blocking`; every push signals its key.

use hashbrown::HashMap;

use basalt_engine::{Db, KeyKind};
use basalt_resp::{Args, Encoder};
use parking_lot::Mutex;

use super::flags::*;
use super::{def, int_arg, is, parse_i64, CommandDef, Ctx, Error, Group, Result};
use crate::blocking::{block_on, parse_timeout};
use crate::keyspace::{SlotRead, TAG_LIST};
use crate::notify::{GENERIC, LIST, NEW};

const G: Group = Group::List;

/// The list family's table.
pub const COMMANDS: &[CommandDef] = &[
    def("lpush", -3, WRITE | DENYOOM | FAST, (1, 1, 1), G, "1.0.0", "Prepends one or more elements to a list. Creates the key if it doesn't exist.", lpush),
    def("rpush", -3, WRITE | DENYOOM | FAST, (1, 1, 1), G, "1.0.0", "Appends one or more elements to a list. Creates the key if it doesn't exist.", rpush),
    def("lpushx", -3, WRITE | DENYOOM | FAST, (1, 1, 1), G, "2.2.0", "Prepends one or more elements to a list only when the list exists.", lpushx),
    def("rpushx", -3, WRITE | DENYOOM | FAST, (1, 1, 1), G, "2.2.0", "Appends an element to a list only when the list exists.", rpushx),
    def("lpop", -2, WRITE | FAST, (1, 1, 1), G, "1.0.0", "Returns the first elements in a list after removing it. Deletes the list if the last element was popped.", lpop),
    def("rpop", -2, WRITE | FAST, (1, 1, 1), G, "1.0.0", "Returns and removes the last elements of a list. Deletes the list if the last element was popped.", rpop),
    def("llen", 2, READONLY | FAST, (1, 1, 1), G, "1.0.0", "Returns the length of a list.", llen),
    def("lrange", 4, READONLY, (1, 1, 1), G, "1.0.0", "Returns a range of elements from a list.", lrange),
    def("lindex", 3, READONLY, (1, 1, 1), G, "1.0.0", "Returns an element from a list by its index.", lindex),
    def("lset", 4, WRITE | DENYOOM, (1, 1, 1), G, "1.0.0", "Sets the value of an element in a list by its index.", lset),
    def("linsert", 5, WRITE | DENYOOM, (1, 1, 1), G, "2.2.0", "Inserts an element before or after another element in a list.", linsert),
    def("lrem", 4, WRITE, (1, 1, 1), G, "1.0.0", "Removes elements from a list. Deletes the list if the last element was removed.", lrem),
    def("ltrim", 4, WRITE, (1, 1, 1), G, "1.0.0", "Removes elements from both ends a list. Deletes the list if all elements were trimmed.", ltrim),
    def("lpos", -3, READONLY, (1, 1, 1), G, "6.0.6", "Returns the index of matching elements in a list.", lpos),
    def("lmove", 5, WRITE | DENYOOM, (1, 2, 1), G, "6.2.0", "Returns an element after popping it from one list and pushing it to another. Deletes the list if the last element was moved.", lmove),
    def("rpoplpush", 3, WRITE | DENYOOM, (1, 2, 1), G, "1.2.0", "Returns the last element of a list after removing and pushing it to another list. Deletes the list if the last element was popped.", rpoplpush),
    def("lmpop", -4, WRITE | MOVABLE_KEYS, (0, 0, 0), G, "7.0.0", "Returns multiple elements from a list after removing them. Deletes the list if the last element was popped.", lmpop),
    def("blpop", -3, WRITE | NOSCRIPT | BLOCKING, (1, -2, 1), G, "2.0.0", "Removes and returns the first element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.", blpop),
    def("brpop", -3, WRITE | NOSCRIPT | BLOCKING, (1, -2, 1), G, "2.0.0", "Removes and returns the last element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.", brpop),
    def("blmove", 6, WRITE | DENYOOM | NOSCRIPT | BLOCKING, (1, 2, 1), G, "6.2.0", "Pops an element from a list, pushes it to another list and returns it. Blocks until an element is available otherwise. Deletes the list if the last element was moved.", blmove),
    def("brpoplpush", 4, WRITE | DENYOOM | NOSCRIPT | BLOCKING, (1, 2, 1), G, "2.2.0", "Pops an element from a list, pushes it to another list and returns it. Block until an element is available otherwise. Deletes the list if the last element was popped.", brpoplpush),
    def("blmpop", -5, WRITE | BLOCKING | MOVABLE_KEYS, (0, 0, 0), G, "7.0.0", "Pops the first element from one of multiple lists. Blocks until an element is available otherwise. Deletes the list if the last element was popped.", blmpop),
];

// ------------------------------------------------------------ positions

/// The field name of position `p`: big-endian with the sign bit flipped,
/// so that byte order is numeric order.
pub fn pos_field(p: i64) -> [u8; 8] {
    ((p as u64) ^ (1 << 63)).to_be_bytes()
}

/// The position a field name encodes.
pub fn field_pos(f: &[u8]) -> Option<i64> {
    let b: [u8; 8] = f.try_into().ok()?;
    Some((u64::from_be_bytes(b) ^ (1 << 63)) as i64)
}

// ---------------------------------------------------------------- cache

const CACHE_SHARDS: usize = 64;
/// Entries per (shard, database) before the shard's map is dropped.
const CACHE_MAX: usize = 1 << 14;

/// (slot generation, db) -> key -> (engine version, head position).
/// hashbrown's default hasher (foldhash): std's SipHash of the key showed
/// up at ~3 % of an LPUSH.
type CacheMap = HashMap<(u64, usize), HashMap<Box<[u8]>, (u64, i64)>>;

fn cache_shard(key: &[u8]) -> &'static Mutex<CacheMap> {
    static SHARDS: std::sync::OnceLock<Vec<Mutex<CacheMap>>> = std::sync::OnceLock::new();
    let shards = SHARDS.get_or_init(|| {
        (0..CACHE_SHARDS)
            .map(|_| Mutex::new(HashMap::new()))
            .collect()
    });
    &shards[basalt_engine::crc32c(key) as usize % CACHE_SHARDS]
}

// ----------------------------------------------------------------- list

/// Which end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Left,
    Right,
}

impl End {
    /// The keyspace event of a push at this end.
    fn push_event(self) -> &'static str {
        match self {
            End::Left => "lpush",
            End::Right => "rpush",
        }
    }

    /// The keyspace event of a pop from this end.
    fn pop_event(self) -> &'static str {
        match self {
            End::Left => "lpop",
            End::Right => "rpop",
        }
    }
}

/// Keyspace events after elements left `key` (Redis's
/// `listElementsRemoved`): the pop, then `del` if the list is gone.
fn popped_events(ctx: &Ctx<'_>, key: &[u8], end: End, now_empty: bool) {
    ctx.notify(LIST, end.pop_event(), key);
    if now_empty {
        ctx.notify(GENERIC, "del", key);
    }
}

fn end_arg(a: &[u8]) -> Result<End> {
    if is(a, "left") {
        Ok(End::Left)
    } else if is(a, "right") {
        Ok(End::Right)
    } else {
        Err(Error::Syntax)
    }
}

/// One list key in one open database. The caller holds the key's stripe.
struct List<'a> {
    db: &'a Db,
    gen: u64,
    dbi: usize,
    key: &'a [u8],
    /// First position and length (`len == 0`: no key).
    head: i64,
    len: i64,
    /// The engine keeps the list's fields as a run and told us its first
    /// name: the cache is neither needed nor updated.
    run: bool,
}

impl<'a> List<'a> {
    /// Loads the list's bounds; WRONGTYPE if the key holds something else.
    fn load(db: &'a Db, gen: u64, dbi: usize, key: &'a [u8]) -> Result<List<'a>> {
        let mut l = List {
            db,
            gen,
            dbi,
            key,
            head: 0,
            len: 0,
            run: false,
        };
        let Some(meta) = db.meta(key) else {
            // A list created now starts as a run: pushes at the ends.
            l.run = true;
            return Ok(l);
        };
        let (len, run) = match meta.kind {
            KeyKind::Map {
                tag: TAG_LIST,
                len,
                run,
            } => (len as i64, run),
            _ => return Err(Error::WrongType),
        };
        // Positions only ever change at the ends (pushes, pops, trims) keep
        // the engine's run form: its first name is the head.
        if let Some(base) = run {
            l.head = field_pos(&base.to_be_bytes()).unwrap_or_default();
            l.len = len;
            l.run = true;
            return Ok(l);
        }
        let cached = cache_shard(key)
            .lock()
            .get(&(gen, dbi))
            .and_then(|m| m.get(key).copied());
        let head = match cached {
            Some((v, head)) if v == meta.version => head,
            _ => {
                let names = db.field_names(key)?;
                let mut lo = i64::MAX;
                let mut hi = i64::MIN;
                for p in names.iter().filter_map(|f| field_pos(f)) {
                    lo = lo.min(p);
                    hi = hi.max(p);
                }
                if names.is_empty() {
                    return Ok(l);
                }
                if hi.wrapping_sub(lo).wrapping_add(1) != len {
                    tracing::warn!(
                        key = %String::from_utf8_lossy(key),
                        "list positions are not dense; missing elements read as absent"
                    );
                }
                l.remember(meta.version, lo);
                lo
            }
        };
        l.head = head;
        l.len = len;
        Ok(l)
    }

    fn remember(&self, version: u64, head: i64) {
        let mut shard = cache_shard(self.key).lock();
        if shard.len() > 8 {
            // Engines replaced by FLUSHDB / DEBUG RELOAD leave generations
            // nobody asks for again.
            shard.clear();
        }
        let m = shard.entry((self.gen, self.dbi)).or_default();
        // Updating in place keeps the common case (a push to a cached
        // list) free of allocation.
        if let Some(e) = m.get_mut(self.key) {
            *e = (version, head);
            return;
        }
        if m.len() >= CACHE_MAX {
            m.clear();
        }
        m.insert(self.key.into(), (version, head));
    }

    /// Records the bounds after a write (the caller still holds the stripe).
    /// A list that was a run needs nothing: if this write broke the run
    /// (an insertion or removal in the middle), the next load scans once.
    fn commit(&self) {
        if self.len > 0 && !self.run {
            self.remember(self.db.version(self.key), self.head);
        }
    }

    fn exists(&self) -> bool {
        self.len > 0
    }

    /// Element at index `i` (0-based from the head, in range).
    fn get(&self, i: i64) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get_field(self.key, &pos_field(self.head + i))?)
    }

    fn put_at(&self, pos: i64, v: &[u8]) -> Result {
        self.db
            .put_field_tagged(self.key, TAG_LIST, &pos_field(pos), v)?;
        Ok(())
    }

    fn push(&mut self, end: End, v: &[u8]) -> Result {
        if self.len == 0 {
            self.head = 0;
        }
        match end {
            End::Left => {
                self.put_at(self.head - 1, v)?;
                self.head -= 1;
            }
            End::Right => self.put_at(self.head + self.len, v)?,
        }
        self.len += 1;
        Ok(())
    }

    /// Pushes `items` one by one at `end` and records the bounds, also
    /// after a failed push (those before it stay).
    fn push_all<'v>(&mut self, end: End, items: impl IntoIterator<Item = &'v [u8]>) -> Result {
        let r = items.into_iter().try_for_each(|v| self.push(end, v));
        self.commit();
        r
    }

    /// Pops one element (the list must not be empty).
    fn pop(&mut self, end: End) -> Result<Vec<u8>> {
        let pos = match end {
            End::Left => self.head,
            End::Right => self.head + self.len - 1,
        };
        let v = self
            .db
            .take_field(self.key, &pos_field(pos))?
            .unwrap_or_default();
        if end == End::Left {
            self.head += 1;
        }
        self.len -= 1;
        Ok(v)
    }

    fn pop_many(&mut self, end: End, count: i64) -> Result<Vec<Vec<u8>>> {
        let n = count.min(self.len);
        let mut out = Vec::with_capacity(n as usize);
        for _ in 0..n {
            out.push(self.pop(end)?);
        }
        Ok(out)
    }

    /// Removes the element at one end without reading it.
    fn drop_end(&mut self, end: End) -> Result {
        let pos = match end {
            End::Left => self.head,
            End::Right => self.head + self.len - 1,
        };
        self.db.delete_field(self.key, &pos_field(pos))?;
        if end == End::Left {
            self.head += 1;
        }
        self.len -= 1;
        Ok(())
    }

    /// Reads indexes `from..to`.
    fn range(&self, from: i64, to: i64) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::with_capacity((to - from).max(0) as usize);
        for i in from..to {
            if let Some(v) = self.get(i)? {
                out.push(v);
            }
        }
        Ok(out)
    }

    /// Makes the elements at indexes `from..from + old.len()` (holding
    /// `old`) become `new`, moving only that segment. With `keep_left` the
    /// segment's first position stays put and the segment must reach the
    /// tail; otherwise its last position stays put and it must start at the
    /// head. Writes go in the order that never leaves a hole (see the
    /// module docs); unchanged fields are not rewritten.
    fn rewrite(&mut self, from: i64, old: &[Vec<u8>], new: &[Vec<u8>], keep_left: bool) -> Result {
        let (ol, nl) = (old.len() as i64, new.len() as i64);
        let grow = nl > ol;
        if keep_left {
            debug_assert_eq!(from + ol, self.len);
            let start = self.head + from;
            let write = |j: i64| -> Result {
                if j >= ol || old[j as usize] != new[j as usize] {
                    self.put_at(start + j, &new[j as usize])?;
                }
                Ok(())
            };
            if grow {
                for j in (0..nl).rev() {
                    write(j)?;
                }
            } else {
                for j in 0..nl {
                    write(j)?;
                }
                for j in (nl..ol).rev() {
                    self.db.delete_field(self.key, &pos_field(start + j))?;
                }
            }
            self.len += nl - ol;
        } else {
            debug_assert_eq!(from, 0);
            let end = self.head + ol - 1;
            let new_head = end - nl + 1;
            // Position new_head + j gets new[j]; it held old[j + nl - ol].
            let write = |j: i64| -> Result {
                let o = j + ol - nl;
                if o < 0 || old[o as usize] != new[j as usize] {
                    self.put_at(new_head + j, &new[j as usize])?;
                }
                Ok(())
            };
            if grow {
                for j in 0..nl {
                    write(j)?;
                }
            } else {
                for j in (0..nl).rev() {
                    write(j)?;
                }
                for p in self.head..new_head {
                    self.db.delete_field(self.key, &pos_field(p))?;
                }
            }
            self.head = new_head;
            self.len += nl - ol;
        }
        Ok(())
    }
}

// ------------------------------------------------------------- helpers

/// The commands [`cold_reads_after`] fetches ahead for.
pub(crate) const READS_AT_ENDS: &[&[u8]] = &[
    b"lmpop",
    b"blmpop",
    b"lpop",
    b"rpop",
    b"lindex",
    b"lmove",
    b"blmove",
    b"rpoplpush",
    b"brpoplpush",
    b"blpop",
    b"brpop",
];

/// Most elements one pop with a count fetches ahead.
const FETCH_POPPED: i64 = 16;

/// Most bytes one list command fetches ahead (staged bytes are held until
/// the command ends).
const FETCH_BYTES: usize = 1 << 20;

/// Elements that the commands queued before one (in one EXEC) will have
/// popped from each list's ends by the time it runs, as far as
/// [`cold_reads_after`] counted them: the list at a key is then its
/// elements less the first `left` and the last `right`.
#[derive(Debug, Default)]
pub(crate) struct Popped(HashMap<Vec<u8>, (i64, i64)>);

/// The reads of the elements a list command is about to read that are not
/// in memory, for the connection to fetch ahead of it (`conn.rs`): LPOP and
/// RPOP (with a count, its first 16, at most 1 MiB in all), LINDEX, the source end of LMOVE,
/// BLMOVE, RPOPLPUSH and BRPOPLPUSH, and the first non-empty list of BLPOP,
/// BRPOP, LMPOP and BLMPOP (the one they pop from when they do not block).
/// The list's head is looked up without its stripe and without scanning or
/// remembering: a list whose head is not known yet is read as before, and
/// one changed meanwhile only makes the fetch useless, never a reply wrong
/// (staged records are found by where they lie).
///
/// Inside one EXEC, each list is taken as the pops queued before the
/// command (`popped`) will leave it: two LPOPs of one list fetch its first
/// and its second element, and a list they empty is skipped by a BLPOP
/// over several. The command's own pops are added to `popped`. Pushes and
/// other writes in the queue are not followed: what they change only makes
/// a fetch useless.
pub(crate) fn cold_reads_after(
    db: &Db,
    gen: u64,
    dbi: usize,
    args: &Args<'_>,
    popped: &mut Popped,
) -> Vec<basalt_engine::ColdRead> {
    let name = |n: &str| is(&args[0], n);
    let first = || vec![&args[1]];
    let (keys, end, index, count): (Vec<&[u8]>, End, Option<i64>, i64) =
        if name("lpop") || name("rpop") {
            let end = if name("lpop") { End::Left } else { End::Right };
            let count = match args.get(2) {
                None => 1,
                Some(c) => match parse_i64(c) {
                    Some(n) if n > 0 => n.min(FETCH_POPPED),
                    _ => return Vec::new(),
                },
            };
            (first(), end, None, count)
        } else if name("lindex") && args.len() == 3 {
            match parse_i64(&args[2]) {
                Some(i) => (first(), End::Left, Some(i), 1),
                None => return Vec::new(),
            }
        } else if (name("lmove") && args.len() == 5) || (name("blmove") && args.len() == 6) {
            match end_arg(&args[3]) {
                Ok(end) => (first(), end, None, 1),
                Err(_) => return Vec::new(),
            }
        } else if name("rpoplpush") || name("brpoplpush") {
            (first(), End::Right, None, 1)
        } else if (name("blpop") || name("brpop")) && args.len() >= 3 {
            // The keys, then the timeout.
            let end = if name("blpop") { End::Left } else { End::Right };
            let keys = args.iter().skip(1).take(args.len() - 2).collect();
            (keys, end, None, 1)
        } else if name("lmpop") || name("blmpop") {
            match mpop_args(args, if name("lmpop") { 1 } else { 2 }) {
                Ok((keys, end, count)) => (keys, end, None, count.min(FETCH_POPPED)),
                Err(_) => return Vec::new(),
            }
        } else {
            return Vec::new();
        };
    // The first key holding a non-empty list is the one popped (a key of
    // another type is an error: nothing to fetch).
    for key in keys {
        let Some(meta) = db.meta(key) else {
            continue;
        };
        let KeyKind::Map {
            tag: TAG_LIST,
            len,
            run,
        } = meta.kind
        else {
            return Vec::new();
        };
        let (left, right) = popped.0.get(key).copied().unwrap_or((0, 0));
        let rest = len as i64 - left - right;
        if rest <= 0 {
            continue;
        }
        if index.is_none() {
            let taken = count.min(rest);
            let e = popped.0.entry(key.to_vec()).or_default();
            match end {
                End::Left => e.0 += taken,
                End::Right => e.1 += taken,
            }
        }
        return end_reads(
            db,
            gen,
            dbi,
            key,
            (run, meta.version),
            (left, rest),
            end,
            index,
            count,
        );
    }
    Vec::new()
}

/// [`cold_reads_after`] for the list at `key` (its run form if any, its
/// version), of which the `rest` elements from the `skip`th on will be
/// there when the command runs.
#[allow(clippy::too_many_arguments)]
fn end_reads(
    db: &Db,
    gen: u64,
    dbi: usize,
    key: &[u8],
    (run, version): (Option<u64>, u64),
    (skip, rest): (i64, i64),
    end: End,
    index: Option<i64>,
    count: i64,
) -> Vec<basalt_engine::ColdRead> {
    let head = match run {
        Some(base) => field_pos(&base.to_be_bytes()),
        None => cache_shard(key)
            .lock()
            .get(&(gen, dbi))
            .and_then(|m| m.get(key).copied())
            .filter(|&(v, _)| v == version)
            .map(|(_, head)| head),
    };
    let Some(head) = head else {
        return Vec::new();
    };
    // The list as the command will find it.
    let (head, len) = (head + skip, rest);
    let positions: Vec<i64> = match (index, end) {
        (Some(i), _) => {
            let i = if i < 0 { i.saturating_add(len) } else { i };
            if !(0..len).contains(&i) {
                return Vec::new();
            }
            vec![head + i]
        }
        (None, End::Left) => (0..count.min(len)).map(|i| head + i).collect(),
        (None, End::Right) => (0..count.min(len)).map(|i| head + len - 1 - i).collect(),
    };
    let mut bytes = 0;
    positions
        .into_iter()
        .filter_map(|p| db.cold_field_read(key, &pos_field(p)).ok().flatten())
        .take_while(|read| {
            bytes += read.record_len();
            bytes <= FETCH_BYTES
        })
        .collect()
}

/// Every element of the list at `key`, head first (empty if there is
/// none; WRONGTYPE for another type). The caller holds the key's stripe.
pub(crate) fn elements(db: &Db, gen: u64, dbi: usize, key: &[u8]) -> Result<Vec<Vec<u8>>> {
    let l = List::load(db, gen, dbi, key)?;
    l.range(0, l.len)
}

/// Replaces whatever `key` holds (and its expiry) with a list of `items`,
/// head first; `items` must not be empty. The caller holds the key's stripe.
pub(crate) fn replace(db: &Db, gen: u64, dbi: usize, key: &[u8], items: &[Vec<u8>]) -> Result {
    db.delete(key)?;
    let mut l = List::load(db, gen, dbi, key)?;
    l.push_all(End::Right, items.iter().map(|v| &v[..]))
}

/// The selected database, opened (for commands that may create a list).
pub(crate) fn slot_w<'a>(ctx: &Ctx<'a>) -> Result<SlotRead<'a>> {
    for _ in 0..8 {
        let slot = ctx.slot();
        if slot.db().is_some() {
            return Ok(slot);
        }
        drop(slot);
        drop(ctx.db_w()?);
    }
    Err(Error::err("database busy, try again"))
}

/// Redis's `getPositiveLongFromObjectOrReply` for a pop count.
fn pop_count(arg: &[u8]) -> Result<i64> {
    parse_i64(arg)
        .filter(|n| *n >= 0)
        .ok_or_else(|| Error::err("value is out of range, must be positive"))
}

fn bulks(ctx: &mut Ctx<'_>, items: &[Vec<u8>]) {
    ctx.array(items.len());
    for v in items {
        ctx.bulk(v);
    }
}

/// Redis's range normalisation (LRANGE): `None` if empty, else the
/// inclusive index range.
fn norm_range(start: i64, end: i64, len: i64) -> Option<(i64, i64)> {
    let start = if start < 0 {
        start.saturating_add(len)
    } else {
        start
    }
    .max(0);
    let end = if end < 0 {
        end.saturating_add(len)
    } else {
        end
    };
    if start > end || start >= len {
        return None;
    }
    Some((start, end.min(len - 1)))
}

// ------------------------------------------------------------- commands

fn push_generic(ctx: &mut Ctx<'_>, args: Args<'_>, end: End, only_existing: bool) -> Result {
    let key = &args[1];
    let slot = slot_w(ctx)?;
    let db = slot.db().expect("opened");
    let _g = ctx.lock(key);
    let mut l = List::load(db, slot.generation(), ctx.conn.db, key)?;
    if only_existing && !l.exists() {
        drop(_g);
        ctx.int(0);
        return Ok(());
    }
    let created = !l.exists();
    l.push_all(end, args.iter().skip(2))?;
    if created {
        ctx.notify(NEW, "new", key);
    }
    ctx.notify(LIST, end.push_event(), key);
    ctx.shared.blocking.signal(ctx.conn.db, key);
    let n = l.len;
    drop(_g);
    ctx.int(n);
    Ok(())
}

fn lpush(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    push_generic(ctx, args, End::Left, false)
}

fn rpush(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    push_generic(ctx, args, End::Right, false)
}

fn lpushx(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    push_generic(ctx, args, End::Left, true)
}

fn rpushx(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    push_generic(ctx, args, End::Right, true)
}

fn pop_generic(ctx: &mut Ctx<'_>, args: Args<'_>, end: End) -> Result {
    if args.len() > 3 {
        return Err(Error::Arity(ctx.cmd.name.into()));
    }
    let count = match args.get(2) {
        Some(a) => Some(pop_count(a)?),
        None => None,
    };
    let key = &args[1];
    let slot = ctx.slot();
    let popped = match slot.db() {
        None => None,
        Some(db) => {
            let _g = ctx.lock(key);
            let mut l = List::load(db, slot.generation(), ctx.conn.db, key)?;
            if !l.exists() {
                None
            } else {
                let r = l.pop_many(end, count.unwrap_or(1));
                l.commit();
                let items = r?;
                if !items.is_empty() {
                    popped_events(ctx, key, end, l.len == 0);
                }
                Some(items)
            }
        }
    };
    drop(slot);
    match (popped, count) {
        (None, Some(_)) => ctx.enc().null_array(),
        (None, None) => ctx.null(),
        (Some(items), Some(_)) => bulks(ctx, &items),
        (Some(items), None) => ctx.opt_bulk(items.first().map(|v| &v[..])),
    }
    Ok(())
}

fn lpop(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    pop_generic(ctx, args, End::Left)
}

fn rpop(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    pop_generic(ctx, args, End::Right)
}

fn llen(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let meta = ctx.slot().db().and_then(|db| db.meta(&args[1]));
    ctx.looked_up(&args[1], meta.is_some());
    let n = match meta {
        None => 0,
        Some(m) => match m.kind {
            KeyKind::Map {
                tag: TAG_LIST, len, ..
            } => len as i64,
            _ => return Err(Error::WrongType),
        },
    };
    ctx.int(n);
    Ok(())
}

fn lrange(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let start = int_arg(&args[2])?;
    let end = int_arg(&args[3])?;
    let key = &args[1];
    let slot = ctx.slot();
    let Some(db) = slot.db() else {
        ctx.keymiss(key);
        ctx.array(0);
        return Ok(());
    };
    let _g = ctx.lock(key);
    let l = List::load(db, slot.generation(), ctx.conn.db, key)?;
    ctx.looked_up(key, l.exists());
    let Some((a, b)) = norm_range(start, end, l.len) else {
        drop(slot);
        ctx.array(0);
        return Ok(());
    };
    // One engine pass over the whole range, each value encoded straight
    // from the mapped file into the output, after the count a list's dense
    // positions promise. A missing position (damage) must not make the
    // reply lie about its length: the header is then rewritten; an error
    // takes back everything written here.
    let names: Vec<[u8; 8]> = (a..=b).map(|i| pos_field(l.head + i)).collect();
    let start = ctx.out.len();
    ctx.array(names.len());
    let body_at = ctx.out.len();
    let mut enc = Encoder::new(ctx.out, ctx.conn.protocol);
    let n = match db.fields_with(key, &names, |_, v| enc.bulk(v)) {
        Ok(n) => n.unwrap_or(0),
        Err(e) => {
            ctx.out.truncate(start);
            return Err(e.into());
        }
    };
    drop(slot);
    if n != names.len() {
        let body = ctx.out.split_off(body_at);
        ctx.out.truncate(start);
        ctx.array(n);
        ctx.out.extend_from_slice(&body);
    }
    Ok(())
}

fn lindex(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let slot = ctx.slot();
    let v = match slot.db() {
        None => {
            ctx.keymiss(key);
            None
        }
        Some(db) => {
            let _g = ctx.lock(key);
            let l = List::load(db, slot.generation(), ctx.conn.db, key)?;
            if !l.exists() {
                ctx.keymiss(key);
                None
            } else {
                ctx.keyhit();
                let i = int_arg(&args[2])?;
                let i = if i < 0 { i.saturating_add(l.len) } else { i };
                if (0..l.len).contains(&i) {
                    l.get(i)?
                } else {
                    None
                }
            }
        }
    };
    drop(slot);
    ctx.opt_bulk(v.as_deref());
    Ok(())
}

fn lset(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let slot = ctx.slot();
    let Some(db) = slot.db() else {
        return Err(Error::NoSuchKey);
    };
    let _g = ctx.lock(key);
    let l = List::load(db, slot.generation(), ctx.conn.db, key)?;
    if !l.exists() {
        return Err(Error::NoSuchKey);
    }
    let i = int_arg(&args[2])?;
    let i = if i < 0 { i.saturating_add(l.len) } else { i };
    if !(0..l.len).contains(&i) {
        return Err(Error::err("index out of range"));
    }
    let r = l.put_at(l.head + i, &args[3]);
    l.commit();
    r?;
    ctx.notify(LIST, "lset", key);
    drop(_g);
    drop(slot);
    ctx.ok();
    Ok(())
}

fn linsert(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let after = if is(&args[2], "after") {
        true
    } else if is(&args[2], "before") {
        false
    } else {
        return Err(Error::Syntax);
    };
    let (key, pivot, elem) = (&args[1], &args[3], &args[4]);
    let slot = ctx.slot();
    let Some(db) = slot.db() else {
        drop(slot);
        ctx.int(0);
        return Ok(());
    };
    let _g = ctx.lock(key);
    let mut l = List::load(db, slot.generation(), ctx.conn.db, key)?;
    if !l.exists() {
        drop(_g);
        drop(slot);
        ctx.int(0);
        return Ok(());
    }
    // Scan from the head, keeping what was read: the cheaper shift may be
    // of exactly those elements.
    let mut prefix: Vec<Vec<u8>> = Vec::new();
    let mut found = None;
    for i in 0..l.len {
        let v = l.get(i)?.unwrap_or_default();
        let hit = v == pivot;
        prefix.push(v);
        if hit {
            found = Some(i);
            break;
        }
    }
    let Some(i) = found else {
        drop(_g);
        drop(slot);
        ctx.int(-1);
        return Ok(());
    };
    let ins = if after { i + 1 } else { i };
    let r = if ins <= l.len - ins {
        // Shift the elements before the insertion point one to the left.
        let old = &prefix[..ins as usize];
        let mut new = old.to_vec();
        new.push(elem.to_vec());
        l.rewrite(0, old, &new, false)
    } else {
        // Shift the elements from the insertion point one to the right.
        let old = l.range(ins, l.len)?;
        let mut new = Vec::with_capacity(old.len() + 1);
        new.push(elem.to_vec());
        new.extend_from_slice(&old);
        l.rewrite(ins, &old, &new, true)
    };
    l.commit();
    r?;
    ctx.notify(LIST, "linsert", key);
    let n = l.len;
    drop(_g);
    drop(slot);
    ctx.int(n);
    Ok(())
}

fn lrem(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let count = int_arg(&args[2])?;
    let (key, elem) = (&args[1], &args[3]);
    let slot = ctx.slot();
    let Some(db) = slot.db() else {
        drop(slot);
        ctx.int(0);
        return Ok(());
    };
    let _g = ctx.lock(key);
    let mut l = List::load(db, slot.generation(), ctx.conn.db, key)?;
    if !l.exists() {
        drop(_g);
        drop(slot);
        ctx.int(0);
        return Ok(());
    }
    let vals = l.range(0, l.len)?;
    let n = vals.len();
    let limit = if count == 0 {
        usize::MAX
    } else {
        count.unsigned_abs().min(usize::MAX as u64) as usize
    };
    let mut remove = vec![false; n];
    let mut removed = 0usize;
    let order: Box<dyn Iterator<Item = usize>> = if count < 0 {
        Box::new((0..n).rev())
    } else {
        Box::new(0..n)
    };
    for i in order {
        if removed == limit {
            break;
        }
        if vals[i] == elem {
            remove[i] = true;
            removed += 1;
        }
    }
    if removed > 0 {
        let lo = remove.iter().position(|r| *r).expect("removed > 0");
        let hi = remove.iter().rposition(|r| *r).expect("removed > 0");
        let keep = |range: std::ops::Range<usize>| -> Vec<Vec<u8>> {
            range
                .filter(|&i| !remove[i])
                .map(|i| vals[i].clone())
                .collect()
        };
        let r = if removed == n {
            db.delete(key).map(|_| ()).map_err(Error::from)
        } else if n - lo <= hi + 1 {
            l.rewrite(lo as i64, &vals[lo..], &keep(lo..n), true)
        } else {
            l.rewrite(0, &vals[..=hi], &keep(0..hi + 1), false)
        };
        l.commit();
        r?;
        ctx.notify(LIST, "lrem", key);
        if removed == n {
            ctx.notify(GENERIC, "del", key);
        }
    }
    drop(_g);
    drop(slot);
    ctx.int(removed as i64);
    Ok(())
}

fn ltrim(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let start = int_arg(&args[2])?;
    let end = int_arg(&args[3])?;
    let key = &args[1];
    let slot = ctx.slot();
    if let Some(db) = slot.db() {
        let _g = ctx.lock(key);
        let mut l = List::load(db, slot.generation(), ctx.conn.db, key)?;
        if l.exists() {
            let (left, right) = match norm_range(start, end, l.len) {
                None => (l.len, 0),
                Some((a, b)) => (a, l.len - b - 1),
            };
            if left == l.len {
                db.delete(key)?;
                ctx.notify(LIST, "ltrim", key);
                ctx.notify(GENERIC, "del", key);
            } else {
                let mut r = Ok(());
                for _ in 0..left {
                    r = l.drop_end(End::Left);
                    if r.is_err() {
                        break;
                    }
                }
                for _ in 0..right {
                    if r.is_err() {
                        break;
                    }
                    r = l.drop_end(End::Right);
                }
                l.commit();
                r?;
                ctx.notify(LIST, "ltrim", key);
            }
        }
    }
    drop(slot);
    ctx.ok();
    Ok(())
}

fn lpos(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let (key, elem) = (&args[1], &args[2]);
    let mut rank: i64 = 1;
    let mut count: Option<i64> = None;
    let mut maxlen: i64 = 0;
    let mut j = 3;
    while j < args.len() {
        let Some(val) = args.get(j + 1) else {
            return Err(Error::Syntax);
        };
        let opt = &args[j];
        if is(opt, "rank") {
            rank = int_arg(val)?;
            if rank == 0 {
                return Err(Error::err(
                    "RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list",
                ));
            }
        } else if is(opt, "count") {
            count = Some(
                parse_i64(val)
                    .filter(|c| *c >= 0)
                    .ok_or_else(|| Error::err("COUNT can't be negative"))?,
            );
        } else if is(opt, "maxlen") {
            maxlen = parse_i64(val)
                .filter(|c| *c >= 0)
                .ok_or_else(|| Error::err("MAXLEN can't be negative"))?;
        } else {
            return Err(Error::Syntax);
        }
        j += 2;
    }
    // Redis 7.0 negates RANK in a long: LONG_MIN stays negative and then
    // matches from the first hit, which is RANK -1.
    if rank == i64::MIN {
        rank = -1;
    }
    let slot = ctx.slot();
    let mut hits: Vec<i64> = Vec::new();
    if let Some(db) = slot.db() {
        let _g = ctx.lock(key);
        let l = List::load(db, slot.generation(), ctx.conn.db, key)?;
        ctx.looked_up(key, l.exists());
        let want = match count {
            Some(0) => i64::MAX,
            Some(c) => c,
            None => 1,
        };
        let skip = rank.unsigned_abs() - 1;
        let scan = if maxlen == 0 {
            l.len
        } else {
            maxlen.min(l.len)
        };
        let mut matched: u64 = 0;
        for step in 0..scan {
            let i = if rank > 0 { step } else { l.len - 1 - step };
            if l.get(i)?.as_deref() == Some(elem) {
                matched += 1;
                if matched > skip {
                    hits.push(i);
                    if hits.len() as i64 >= want {
                        break;
                    }
                }
            }
        }
    }
    if slot.db().is_none() {
        ctx.keymiss(key);
    }
    drop(slot);
    match count {
        Some(_) => {
            ctx.array(hits.len());
            for h in hits {
                ctx.int(h);
            }
        }
        None => match hits.first() {
            Some(&h) => ctx.int(h),
            None => ctx.null(),
        },
    }
    Ok(())
}

fn is_list_or_absent(db: &Db, key: &[u8]) -> bool {
    db.meta(key)
        .is_none_or(|m| matches!(m.kind, KeyKind::Map { tag: TAG_LIST, .. }))
}

/// LMOVE's body: pops from `src`'s `from` end and pushes to `dst`'s `to`
/// end. `None` if `src` is empty. The caller holds both stripes.
fn move_one(
    ctx: &Ctx<'_>,
    db: &Db,
    gen: u64,
    src: &[u8],
    dst: &[u8],
    from: End,
    to: End,
) -> Result<Option<Vec<u8>>> {
    let dbi = ctx.conn.db;
    let mut s = List::load(db, gen, dbi, src)?;
    if !s.exists() {
        return Ok(None);
    }
    if src == dst {
        // Push the copy first, then drop the original: the key never
        // empties on the way (its TTL survives a one-element rotation).
        let i = match from {
            End::Left => 0,
            End::Right => s.len - 1,
        };
        let v = s.get(i)?.unwrap_or_default();
        let r = s.push(to, &v).and_then(|_| s.drop_end(from));
        s.commit();
        r?;
        ctx.notify(LIST, to.push_event(), dst);
        ctx.notify(LIST, from.pop_event(), src);
        ctx.shared.blocking.signal(dbi, dst);
        return Ok(Some(v));
    }
    let mut d = List::load(db, gen, dbi, dst)?;
    let created = !d.exists();
    let v = s.pop(from);
    s.commit();
    let v = v?;
    let r = d.push(to, &v);
    d.commit();
    r?;
    if created {
        ctx.notify(NEW, "new", dst);
    }
    ctx.notify(LIST, to.push_event(), dst);
    popped_events(ctx, src, from, s.len == 0);
    ctx.shared.blocking.signal(dbi, dst);
    Ok(Some(v))
}

fn lmove_generic(
    ctx: &mut Ctx<'_>,
    src: &[u8],
    dst: &[u8],
    from: End,
    to: End,
    block: Option<&[u8]>,
) -> Result {
    let timeout = match block {
        Some(t) => Some(parse_timeout(t, ctx.now_ms)?),
        None => None,
    };
    let slot = ctx.slot();
    let n = ctx.conn.db;
    let guards = ctx.shared.keyspace.lock_many([(n, src), (n, dst)]);
    let id = ctx.conn.info.id;
    let rerun = timeout.is_some() && ctx.shared.blocking.is_blocked(id);
    let v = match slot.db() {
        None => None,
        // A woken client ahead in the source's queue is served first.
        Some(_) if timeout.is_some() && !ctx.shared.blocking.may_take(id, n, src) => None,
        Some(db) => match move_one(ctx, db, slot.generation(), src, dst, from, to) {
            // Only the source can be of another type before anything moved.
            Err(Error::WrongType) if rerun && !is_list_or_absent(db, src) => {
                ctx.shared.blocking.pass_on(id, n, src);
                None
            }
            r => r?,
        },
    };
    match (v, timeout) {
        (Some(v), _) => {
            drop(guards);
            drop(slot);
            ctx.bulk(&v);
        }
        (None, Some(t)) => block_on(ctx, &[src], t),
        (None, None) => {
            drop(guards);
            drop(slot);
            ctx.null();
        }
    }
    Ok(())
}

fn lmove(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let from = end_arg(&args[3])?;
    let to = end_arg(&args[4])?;
    lmove_generic(ctx, &args[1], &args[2], from, to, None)
}

fn rpoplpush(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    lmove_generic(ctx, &args[1], &args[2], End::Right, End::Left, None)
}

fn blmove(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let from = end_arg(&args[3])?;
    let to = end_arg(&args[4])?;
    lmove_generic(ctx, &args[1], &args[2], from, to, Some(&args[5]))
}

fn brpoplpush(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    lmove_generic(
        ctx,
        &args[1],
        &args[2],
        End::Right,
        End::Left,
        Some(&args[3]),
    )
}

/// Pops up to `count` elements from the first non-empty list of `keys`
/// (WRONGTYPE at the first key holding something else), blocking if
/// `timeout` is given and all are empty. `multi` picks LMPOP's reply
/// (`[key, [elements]]`) over BLPOP's (`[key, element]`).
fn pop_first(
    ctx: &mut Ctx<'_>,
    keys: &[&[u8]],
    end: End,
    count: i64,
    timeout: Option<Option<std::time::Duration>>,
    multi: bool,
) -> Result {
    let slot = ctx.slot();
    let n = ctx.conn.db;
    // Locked even when the database is unopened, so a push cannot slip
    // between the check and the registration of the waiter.
    let guards = ctx.shared.keyspace.lock_many(keys.iter().map(|k| (n, *k)));
    let mut served = None;
    let id = ctx.conn.info.id;
    let rerun = timeout.is_some() && ctx.shared.blocking.is_blocked(id);
    if let Some(db) = slot.db() {
        for &key in keys {
            // A woken client ahead in this key's queue is served first.
            if timeout.is_some() && !ctx.shared.blocking.may_take(id, n, key) {
                continue;
            }
            let mut l = match List::load(db, slot.generation(), n, key) {
                Err(Error::WrongType) if rerun => {
                    ctx.shared.blocking.pass_on(id, n, key);
                    continue;
                }
                r => r?,
            };
            if l.exists() {
                let r = l.pop_many(end, count);
                l.commit();
                let items = r?;
                popped_events(ctx, key, end, l.len == 0);
                served = Some((key, items));
                break;
            }
        }
    }
    match served {
        Some((key, items)) => {
            drop(guards);
            drop(slot);
            ctx.array(2);
            ctx.bulk(key);
            if multi {
                bulks(ctx, &items);
            } else {
                ctx.bulk(&items[0]);
            }
        }
        None => match timeout {
            Some(t) => block_on(ctx, keys, t),
            None => {
                drop(guards);
                drop(slot);
                ctx.enc().null_array();
            }
        },
    }
    Ok(())
}

fn bpop(ctx: &mut Ctx<'_>, args: Args<'_>, end: End) -> Result {
    let timeout = parse_timeout(&args[args.len() - 1], ctx.now_ms)?;
    let keys: Vec<&[u8]> = (1..args.len() - 1).map(|i| &args[i]).collect();
    pop_first(ctx, &keys, end, 1, Some(timeout), false)
}

fn blpop(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    bpop(ctx, args, End::Left)
}

fn brpop(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    bpop(ctx, args, End::Right)
}

/// Parses `numkeys key... LEFT|RIGHT [COUNT n]` from `args[at]`.
fn mpop_args<'a>(args: &Args<'a>, at: usize) -> Result<(Vec<&'a [u8]>, End, i64)> {
    let numkeys = parse_i64(&args[at])
        .filter(|n| *n > 0)
        .ok_or_else(|| Error::err("numkeys should be greater than 0"))?;
    let where_at = (at as u64 + 1).saturating_add(numkeys as u64);
    if where_at >= args.len() as u64 {
        return Err(Error::Syntax);
    }
    let where_at = where_at as usize;
    let keys: Vec<&[u8]> = (at + 1..where_at)
        .map(|i| args.get(i).expect("in range"))
        .collect();
    let end = end_arg(&args[where_at])?;
    let mut count = None;
    let mut j = where_at + 1;
    while j < args.len() {
        if is(&args[j], "count") && count.is_none() && j + 1 < args.len() {
            count = Some(
                parse_i64(&args[j + 1])
                    .filter(|c| *c > 0)
                    .ok_or_else(|| Error::err("count should be greater than 0"))?,
            );
            j += 2;
        } else {
            return Err(Error::Syntax);
        }
    }
    Ok((keys, end, count.unwrap_or(1)))
}

fn lmpop(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let (keys, end, count) = mpop_args(&args, 1)?;
    pop_first(ctx, &keys, end, count, None, true)
}

fn blmpop(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    // Redis parses numkeys, LEFT|RIGHT and COUNT before the timeout.
    let (keys, end, count) = mpop_args(&args, 2)?;
    let timeout = parse_timeout(&args[1], ctx.now_ms)?;
    pop_first(ctx, &keys, end, count, Some(timeout), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_fields_sort_like_positions() {
        let ps = [i64::MIN, -1_000_000, -2, -1, 0, 1, 2, 1 << 40, i64::MAX];
        for w in ps.windows(2) {
            assert!(pos_field(w[0]) < pos_field(w[1]));
        }
        for p in ps {
            assert_eq!(field_pos(&pos_field(p)), Some(p));
        }
    }

    #[test]
    fn ranges_normalise_like_redis() {
        assert_eq!(norm_range(0, -1, 3), Some((0, 2)));
        assert_eq!(norm_range(-100, 100, 3), Some((0, 2)));
        assert_eq!(norm_range(2, 1, 3), None);
        assert_eq!(norm_range(3, 5, 3), None);
        assert_eq!(norm_range(-1, -1, 3), Some((2, 2)));
        assert_eq!(norm_range(i64::MIN, i64::MAX, 3), Some((0, 2)));
    }
}
