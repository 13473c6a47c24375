//! Applying a combined Raft entry's independent writes on several threads.
//!
//! The one idea a reader needs: **writes to different keys commute, so an
//! entry's commands may run on several threads at once, provided every
//! node gives each write the same sequence number and the entry stays one
//! crash-atomic batch.** A replicated node applies each committed entry
//! (the leader's group commit of many clients' proposals, `repl::combine`)
//! under the exec gate, so no read sees it half done; applied one command
//! after another it is bound by one thread (about 1.7 us per SET on the
//! 16-core device, `docs/benchmarks.md`).
//!
//! - **Placing** ([`place`]): a proposal joins the lanes when it is a plain
//!   run of commands (not a transaction, not a blocked client's retry, not
//!   an HTTP or expiry write) whose every command is one of
//!   [`records_bound`]'s (string writes, deletions, hash field and set
//!   member writes: commands whose records are bounded by their arguments) with all its keys in one of [`SHARDS`]
//!   fixed shards (CRC32C of the key). Anything else is a barrier: it runs
//!   alone, after everything before it and before everything after it, as
//!   an entry of one does.
//! - **Numbers**: command `k` of proposal `p` writes in a
//!   `basalt_engine::SequenceLane` from `p`'s floor (its 4,096 numbers of
//!   the entry's 2^20) plus the most records `p`'s earlier commands may
//!   write. Placing depends only on the entry's bytes, so every node,
//!   whatever its thread count and whether it spreads a stretch or not,
//!   gives every write the same number: versions agree everywhere.
//! - **Running** ([`Stretch`]): between two barriers, each shard's commands
//!   run in entry order on one thread, the shards spread over the apply
//!   thread and the [`Pool`]'s helpers. A key's writes are all in one shard,
//!   so each key sees them in entry order; writes to different keys in one
//!   entry were concurrent (their clients had no reply yet), so any order
//!   between them is one the leader could have picked. Helpers join the
//!   engine batch the apply thread holds open with the applied-index marker
//!   (`Db::join_batch`), so a crash keeps all of an entry or none of it.
//!   Only observers see an order between keys (keyspace events, MONITOR):
//!   with any pub/sub subscriber or monitor, stretches run on the apply
//!   thread alone, in entry order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

use basalt_resp::{Encoder, Limits, Parsed, Protocol, RequestParser};
use parking_lot::{Condvar, Mutex};

use crate::commands::{self, Conn};
use crate::state::{ClientInfo, Shared};

/// Shards of the fixed partition (the same on every node).
pub(crate) const SHARDS: usize = 64;

/// The most records a command of the lanes' set writes, from its name (as
/// the command table spells it) and argument count (with the name); `None`
/// for any other command (it makes
/// its proposal a barrier). Each key, field or member written costs at
/// most a tombstone of an expired value (`purge_if_expired`) and the write
/// itself: deleting a key of any type is one tombstone (`Db::delete`), a
/// field write or deletion one record (`Db::put_field_tagged`,
/// `Db::delete_field`, the last field's a tombstone instead). A command
/// that fails (arity, wrong type) writes nothing.
fn records_bound(name: &str, argc: usize) -> Option<u64> {
    let n = |k: usize| 2 * k as u64;
    Some(match name {
        "set" | "setex" | "psetex" | "setnx" | "getset" | "getdel" | "getex" | "incr" | "decr"
        | "incrby" | "decrby" | "incrbyfloat" => n(1),
        "del" | "unlink" => n(argc.saturating_sub(1)),
        "mset" | "msetnx" => n(argc.saturating_sub(1) / 2),
        // One key; fields or members after it.
        "hset" | "hmset" => n(argc.saturating_sub(2) / 2),
        "hsetnx" | "hincrby" | "hincrbyfloat" => n(1),
        "hdel" | "sadd" | "srem" => n(argc.saturating_sub(2)),
        _ => return None,
    })
}

/// Whether every command of `commands` (a proposal's, RESP arrays back to
/// back) does work bounded by its own size: the string writes and the hash
/// and set member writes [`records_bound`] knows, less DEL and UNLINK
/// (whose work grows with the size of the keys they drop), GETSET, GETDEL,
/// GETEX and SET with options (which read the old value, or may delete
/// the key, whatever its size). What a node may apply on the thread that
/// runs its Raft tasks (`Applier::bounded`). A plain write also drops
/// whatever else its key holds, as DEL would, and any write drops an
/// expired key it finds; so each command's keys are handed to `key_ok`
/// (whether it writes a string, and one key; MSET's every key) and the
/// commands are bounded only if it says yes to every one: the caller looks
/// at what the key holds now. Only the command names are looked at, by a
/// walk over the bulk strings' lengths (the apply parses each command
/// again anyway); anything that is not plain RESP arrays of bulk strings
/// is not bounded.
pub(crate) fn bounded(commands: &[u8], mut key_ok: impl FnMut(bool, &[u8]) -> bool) -> bool {
    // A command [`records_bound`] knows, less those named above.
    fn known(name: &[u8], argc: usize) -> Option<&'static str> {
        match commands::lookup(name).map(|def| def.name) {
            None | Some("del" | "unlink" | "getset" | "getdel" | "getex") => None,
            Some("set") => (argc == 3).then_some("set"),
            Some(name) => records_bound(name, argc).map(|_| name),
        }
    }
    // Whether argument `i` of command `name` is a key.
    fn is_key(name: &str, i: usize) -> bool {
        match name {
            "mset" | "msetnx" => i % 2 == 1,
            _ => i == 1,
        }
    }
    // Whether `name` writes a string (and so replaces a key of another
    // type): all the known commands but the hash and set ones.
    fn writes_string(name: &str) -> bool {
        !matches!(
            name,
            "hset" | "hmset" | "hsetnx" | "hincrby" | "hincrbyfloat" | "hdel" | "sadd" | "srem"
        )
    }
    // The number after `*` or `$` at `at`, and where its line ends.
    fn number(b: &[u8], at: usize, sigil: u8) -> Option<(usize, usize)> {
        if b.get(at) != Some(&sigil) {
            return None;
        }
        let mut n: usize = 0;
        let mut i = at + 1;
        while let Some(&c) = b.get(i) {
            match c {
                b'0'..=b'9' => n = n.checked_mul(10)?.checked_add((c - b'0') as usize)?,
                b'\r' if b.get(i + 1) == Some(&b'\n') && i > at + 1 => return Some((n, i + 2)),
                _ => return None,
            }
            i += 1;
        }
        None
    }
    let mut pos = 0;
    while pos < commands.len() {
        let Some((argc, mut at)) = number(commands, pos, b'*') else {
            return false;
        };
        if argc == 0 {
            return false;
        }
        let mut name = "";
        for i in 0..argc {
            let Some((len, start)) = number(commands, at, b'$') else {
                return false;
            };
            let Some(end) = start.checked_add(len) else {
                return false;
            };
            if commands.get(end..end + 2) != Some(b"\r\n") {
                return false;
            }
            let arg = &commands[start..end];
            if i == 0 {
                match known(arg, argc) {
                    Some(n) => name = n,
                    None => return false,
                }
            } else if is_key(name, i) && !key_ok(writes_string(name), arg) {
                return false;
            }
            at = end + 2;
        }
        pos = at;
    }
    true
}

/// A key's shard: its CRC32C, which every node computes alike.
fn shard_of_key(key: &[u8]) -> u8 {
    (basalt_engine::crc32c(key) as usize % SHARDS) as u8
}

/// One command of a proposal that may join a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unit {
    /// Its shard.
    pub shard: u8,
    /// Where its sequence numbers start, from its proposal's floor: the
    /// records the proposal's earlier commands may write, at most.
    pub offset: u64,
    /// The most records it writes.
    pub records: u64,
    /// Its bytes in the proposal's commands.
    pub span: std::ops::Range<usize>,
}

/// The commands of a proposal of RESP `commands` (as `repl` encodes them)
/// as units, if every one may join a shard (its keys all in one) and
/// their records fit `budget`, the sequence numbers the proposal owns;
/// `None` makes the proposal a barrier.
pub(crate) fn place(commands: &[u8], budget: u64) -> Option<Vec<Unit>> {
    let mut parser = RequestParser::new(Limits::default());
    let mut pos = 0;
    let mut offset = 0u64;
    let mut units = Vec::new();
    while pos < commands.len() {
        let Ok(Parsed::Command { args, consumed }) = parser.parse(&commands[pos..]) else {
            return None;
        };
        let def = commands::lookup(args.get(0)?)?;
        let records = records_bound(def.name, args.len())?;
        let mut shard = None;
        for i in def.key_positions(args.len()) {
            let s = shard_of_key(&args[i]);
            if *shard.get_or_insert(s) != s {
                return None;
            }
        }
        if offset + records > budget {
            return None;
        }
        units.push(Unit {
            shard: shard?,
            offset,
            records,
            span: pos..pos + consumed,
        });
        offset += records;
        pos += consumed;
    }
    (!units.is_empty()).then_some(units)
}

/// A placed proposal, ready to run.
#[derive(Debug)]
pub(crate) struct Placed {
    /// The database selected when it was sent.
    pub db: usize,
    /// Its replies' protocol.
    pub protocol: Protocol,
    /// The leader's clock when it was proposed.
    pub time_ms: u64,
    /// Its commands (RESP).
    pub commands: Vec<u8>,
    /// The first sequence number it owns.
    pub start: u64,
    /// The seed of its random choices.
    pub seed: u64,
    /// Its commands' places.
    pub units: Vec<Unit>,
}

/// What an apply thread did with a stretch: each command's reply (by its
/// place in the stretch) and the highest number its lanes reached.
type Done = (Vec<(usize, Vec<u8>)>, u64);

/// Proposals between two barriers of one entry, applied command by command
/// (see the module docs).
#[derive(Debug)]
pub(crate) struct Stretch {
    shared: Arc<Shared>,
    /// The stand-in client the commands run as.
    client: Arc<ClientInfo>,
    placed: Vec<Placed>,
    /// Where each proposal's commands start in the stretch's list.
    base: Vec<usize>,
    /// Each shard's commands (proposal, unit), in entry order.
    tasks: Vec<Vec<(usize, usize)>>,
    /// The next task to take.
    next: AtomicUsize,
    /// Helpers' results, and how many helpers have not finished.
    helpers: Mutex<(Vec<std::thread::Result<Done>>, usize)>,
    finished: Condvar,
}

impl Stretch {
    /// A stretch of `placed` proposals, run as `client`.
    pub(crate) fn new(shared: Arc<Shared>, client: Arc<ClientInfo>, placed: Vec<Placed>) -> Self {
        let mut base = Vec::with_capacity(placed.len() + 1);
        base.push(0);
        for p in &placed {
            base.push(base.last().copied().unwrap_or(0) + p.units.len());
        }
        Stretch {
            shared,
            client,
            placed,
            base,
            tasks: Vec::new(),
            next: AtomicUsize::new(0),
            helpers: Mutex::new((Vec::new(), 0)),
            finished: Condvar::new(),
        }
    }

    /// Its commands.
    pub(crate) fn commands(&self) -> usize {
        self.base.last().copied().unwrap_or(0)
    }

    fn conn(&self) -> Conn {
        crate::repl::stand_in(&self.client, 0, 0)
    }

    /// Runs unit `k` of proposal `p` with `conn`, in a lane from its start,
    /// its reply into `out`; returns where the lane ended.
    fn run(
        &self,
        conn: &mut Conn,
        parser: &mut RequestParser,
        p: usize,
        k: usize,
        out: &mut Vec<u8>,
    ) -> u64 {
        let placed = &self.placed[p];
        let unit = &placed.units[k];
        let start = placed.start + unit.offset;
        let lane = basalt_engine::SequenceLane::open(start);
        let _seed = crate::repl::EntrySeed::set(placed.seed);
        conn.db = placed.db;
        conn.protocol = placed.protocol;
        conn.batch_clock = placed.time_ms;
        match parser.parse(&placed.commands[unit.span.clone()]) {
            Ok(Parsed::Command { args, .. }) => {
                commands::execute(&self.shared, conn, out, args);
            }
            _ => Encoder::new(out, conn.protocol).error(b"ERR replication: an unreadable entry"),
        }
        let end = lane.next();
        if end - start > unit.records {
            // `records_bound` is wrong for this command: its numbers may
            // meet the next command's.
            tracing::error!(
                wrote = end - start,
                bound = unit.records,
                "a command applied in a lane wrote more records than its bound"
            );
            debug_assert!(false, "a lane's command ran past its bound");
        }
        end
    }

    /// Runs every command on this thread in entry order (each proposal's
    /// keys fetched ahead together); returns each proposal's reply and the
    /// highest number reached.
    pub(crate) fn run_here(self) -> (Vec<Vec<u8>>, u64) {
        let mut conn = self.conn();
        let mut parser = RequestParser::new(Limits::default());
        let mut replies = Vec::with_capacity(self.placed.len());
        let mut high = 0;
        for (p, placed) in self.placed.iter().enumerate() {
            crate::repl::prefetch_keys(&self.shared, placed.db, &placed.commands, 0);
            let mut reply = Vec::new();
            for k in 0..placed.units.len() {
                high = high.max(self.run(&mut conn, &mut parser, p, k, &mut reply));
            }
            replies.push(reply);
        }
        (replies, high)
    }

    /// Takes tasks until none is left. On a helper thread, its writes join
    /// the engine batch the entries apply in (opened on the apply thread
    /// with the applied-index marker, `basalt_raft`), so that a crash
    /// keeps all of an entry's writes or none.
    fn work(&self) -> Done {
        let raft_db = self.shared.keyspace.raft_db();
        let _joined = raft_db.and_then(|db| db.join_batch());
        let mut conn = self.conn();
        let mut parser = RequestParser::new(Limits::default());
        let mut done = Vec::new();
        let mut high = 0;
        while let Some(task) = self.tasks.get(self.next.fetch_add(1, Ordering::Relaxed)) {
            for &(p, k) in task {
                let mut out = Vec::new();
                high = high.max(self.run(&mut conn, &mut parser, p, k, &mut out));
                done.push((self.base[p] + k, out));
            }
        }
        (done, high)
    }

    /// Runs the shards' commands on this thread and `pool`'s helpers at
    /// once; returns each proposal's reply and the highest number reached.
    /// A helper's panic is raised here.
    pub(crate) fn run_spread(mut self, pool: &Pool) -> (Vec<Vec<u8>>, u64) {
        let mut by_shard: Vec<Vec<(usize, usize)>> = (0..SHARDS).map(|_| Vec::new()).collect();
        for (p, placed) in self.placed.iter().enumerate() {
            for (k, u) in placed.units.iter().enumerate() {
                by_shard[u.shard as usize].push((p, k));
            }
        }
        self.tasks = by_shard.into_iter().filter(|t| !t.is_empty()).collect();
        let helpers = pool.senders.len().min(self.tasks.len().saturating_sub(1));
        self.helpers.lock().1 = helpers;
        let this = Arc::new(self);
        for tx in &pool.senders[..helpers] {
            if tx.send(this.clone()).is_err() {
                // A helper that is gone: its share is taken by the others.
                let mut h = this.helpers.lock();
                h.1 -= 1;
            }
        }
        // The helpers finish before this thread goes on, also when its own
        // share panics: none may write once the apply has unwound.
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| this.work()));
        let mut results = {
            let mut h = this.helpers.lock();
            while h.1 > 0 {
                this.finished.wait(&mut h);
            }
            std::mem::take(&mut h.0)
        };
        let mine = mine.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let mut outs: Vec<Vec<u8>> = vec![Vec::new(); this.commands()];
        let mut high = mine.1;
        for (at, out) in mine.0 {
            outs[at] = out;
        }
        for r in results.drain(..) {
            let (done, h) = r.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            high = high.max(h);
            for (at, out) in done {
                outs[at] = out;
            }
        }
        let mut outs = outs.into_iter();
        let replies = this
            .placed
            .iter()
            .map(|placed| {
                let mut reply = Vec::new();
                for out in outs.by_ref().take(placed.units.len()) {
                    reply.extend_from_slice(&out);
                }
                reply
            })
            .collect();
        (replies, high)
    }
}

/// The threads that apply stretches beside the apply task's own thread
/// (`raft-apply-threads` minus one), each waiting for a stretch to help
/// with; they end when the pool is dropped.
#[derive(Debug)]
pub(crate) struct Pool {
    senders: Vec<mpsc::Sender<Arc<Stretch>>>,
}

impl Pool {
    /// Starts `helpers` threads.
    pub(crate) fn new(helpers: usize) -> Pool {
        let senders = (0..helpers)
            .filter_map(|i| {
                let (tx, rx) = mpsc::channel::<Arc<Stretch>>();
                std::thread::Builder::new()
                    .name(format!("basalt-apply-{}", i + 1))
                    .spawn(move || {
                        while let Ok(stretch) = rx.recv() {
                            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                stretch.work()
                            }));
                            let mut h = stretch.helpers.lock();
                            h.0.push(r);
                            h.1 -= 1;
                            if h.1 == 0 {
                                stretch.finished.notify_one();
                            }
                        }
                    })
                    .map_err(|e| tracing::warn!(error = %e, "starting an apply thread failed"))
                    .ok()
                    .map(|_| tx)
            })
            .collect();
        Pool { senders }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(commands: &[&[&str]]) -> Vec<u8> {
        let mut out = Vec::new();
        for c in commands {
            basalt_resp::write_command(&mut out, c.iter().map(|a| a.as_bytes()));
        }
        out
    }

    /// Two keys with different shards, found by search (the hash is fixed).
    fn keys_in_two_shards() -> (String, String) {
        let a = "a".to_string();
        let b = (0..)
            .map(|i| format!("b{i}"))
            .find(|b| shard_of_key(b.as_bytes()) != shard_of_key(a.as_bytes()))
            .unwrap();
        (a, b)
    }

    #[test]
    fn only_plain_string_hash_and_set_writes_are_bounded() {
        let yes = |_: bool, _: &[u8]| true;
        let mut keys = Vec::new();
        assert!(bounded(
            &resp(&[
                &["SET", "a", "1"],
                &["incr", "b"],
                &["HSet", "h", "f", "v", "g", "w"],
                &["sadd", "s", "m"],
                &["MSET", "x", "1", "y", "2"],
            ]),
            |string, key| {
                keys.push((string, String::from_utf8_lossy(key).into_owned()));
                true
            }
        ));
        // Each command's keys were asked about, and only those, with
        // whether the command writes a string.
        let asked: Vec<(bool, &str)> = keys.iter().map(|(s, k)| (*s, k.as_str())).collect();
        assert_eq!(
            asked,
            [
                (true, "a"),
                (true, "b"),
                (false, "h"),
                (false, "s"),
                (true, "x"),
                (true, "y")
            ]
        );
        assert!(bounded(b"", yes));
        // A key the caller refuses makes the commands unbounded.
        assert!(!bounded(
            &resp(&[&["SET", "a", "1"], &["MSET", "x", "1", "big", "2"]]),
            |_, key| key != b"big"
        ));
        for unbounded in [
            resp(&[&["SET", "a", "1"], &["DEL", "a"]]),
            resp(&[&["unlink", "a"]]),
            resp(&[&["EVAL", "return 1", "0"]]),
            resp(&[&["SUNIONSTORE", "d", "a", "b"]]),
            resp(&[&["FLUSHALL"]]),
            resp(&[&["SETRANGE", "a", "0", "x"]]),
            resp(&[&["SET", "a", "1", "GET"]]),
            resp(&[&["set", "a", "1", "EXAT", "1"]]),
            resp(&[&["GETSET", "a", "1"]]),
            resp(&[&["getdel", "a"]]),
            resp(&[&["GETEX", "a", "PERSIST"]]),
        ] {
            assert!(
                !bounded(&unbounded, yes),
                "{:?}",
                String::from_utf8_lossy(&unbounded)
            );
        }
        // Anything but whole RESP arrays of bulk strings is not.
        let set = resp(&[&["SET", "a", "1"]]);
        for bad in [
            &set[..set.len() - 1],
            &set[..3],
            b"SET a 1\r\n",
            b"*0\r\n",
            b"*1\r\n$3\r\nSETX\r\n",
            b"*1\r\n$\r\nSET\r\n",
            b"*1\r\n$99999999999999999999999\r\nSET\r\n",
        ] {
            assert!(!bounded(bad, yes), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn writes_with_their_keys_in_one_shard_each_are_units_and_anything_else_a_barrier() {
        let (a, b) = keys_in_two_shards();
        let (sa, sb) = (shard_of_key(a.as_bytes()), shard_of_key(b.as_bytes()));
        // Commands of one proposal may go to different shards; each takes
        // numbers after the most its predecessors may write.
        let p = resp(&[
            &["SET", &a, "1"],
            &["incr", &b],
            &["GetDel", &a],
            &["MSET", &a, "x"],
        ]);
        let units = place(&p, 4096).unwrap();
        let shards: Vec<u8> = units.iter().map(|u| u.shard).collect();
        assert_eq!(shards, [sa, sb, sa, sa]);
        let offsets: Vec<u64> = units.iter().map(|u| u.offset).collect();
        assert_eq!(offsets, [0, 2, 4, 6]);
        assert_eq!(units[0].span.start, 0);
        assert_eq!(units[3].span.end, p.len());
        assert!(units.windows(2).all(|w| w[0].span.end == w[1].span.start));
        // A command whose keys are in two shards: a barrier.
        assert_eq!(place(&resp(&[&["DEL", &a, &b]]), 4096), None);
        assert_eq!(place(&resp(&[&["MSET", &a, "1", &b, "2"]]), 4096), None);
        // MSET's values are not keys.
        let two = place(&resp(&[&["MSET", &a, &b]]), 4096).unwrap();
        assert_eq!((two[0].shard, two.len()), (sa, 1));
        // Commands outside the set, keyless ones, and a key-less DEL.
        for other in [
            &["LPUSH", a.as_str(), "v"][..],
            &["ZADD", a.as_str(), "1", "m"],
            &["PUBLISH", "ch", "m"],
            &["SELECT", "1"],
            &["FLUSHALL"],
            &["DEL"],
            &["SETRANGE", a.as_str(), "100000000", "x"],
        ] {
            assert_eq!(
                place(&resp(&[&["SET", &a, "1"], other]), 4096),
                None,
                "{other:?}"
            );
        }
        // Hash and set writes: one key, fields or members after it.
        let h = place(
            &resp(&[
                &["HSET", &a, "f", &b, "g", "v"],
                &["HINCRBYFLOAT", &a, "f", "1.5"],
                &["SADD", &b, &a, "m"],
                &["HDEL", &a, "f", "g", "h"],
            ]),
            4096,
        )
        .unwrap();
        let placed: Vec<(u8, u64, u64)> =
            h.iter().map(|u| (u.shard, u.offset, u.records)).collect();
        assert_eq!(placed, [(sa, 0, 4), (sa, 4, 2), (sb, 6, 4), (sa, 10, 6)]);
        // More records than the proposal's sequence numbers.
        let many: Vec<[&str; 3]> = (0..10).map(|_| ["SET", a.as_str(), "v"]).collect();
        let many: Vec<&[&str]> = many.iter().map(|c| &c[..]).collect();
        assert_eq!(place(&resp(&many), 20).map(|u| u.len()), Some(10));
        assert_eq!(place(&resp(&many), 19), None);
        // An unreadable or empty proposal is a barrier (the one-thread
        // path answers it).
        assert_eq!(place(b"*2\r\n$3\r\nSET\r\n", 4096), None);
        assert_eq!(place(b"", 4096), None);
    }
}
