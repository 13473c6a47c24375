//! Transactions (MULTI / EXEC / DISCARD / WATCH): the per-connection queue,
//! the watched keys, and the server-wide **exec gate** that makes EXEC
//! isolated.
//!
//! The one idea a reader needs: **every batch holds the gate shared, EXEC
//! holds it exclusively.** A connection takes the gate (a reader-writer
//! lock) in shared mode when it starts running the commands of a socket
//! wakeup and lets go before anything that awaits (writing replies, a
//! blocking park, DEBUG SLEEP) and at the end of the batch: one atomic
//! operation per batch, none per command. EXEC lets go of its own shared
//! hold, takes the gate exclusively, which waits for every batch in flight
//! to finish and keeps new ones out, compares the watched keys' versions and
//! runs the queued commands. So no other client's command runs between the
//! commands of a transaction, and no client sees half of one. A blocked
//! client woken by a push inside EXEC re-runs its command only once it can
//! take the gate again, that is after EXEC.
//!
//! WATCH records each key's engine version (the sequence number of its last
//! write, 0 when absent or expired); EXEC fails (null array) if any differs.
//! Versions come from one counter shared by every database (see
//! `Keyspace`), so a key deleted and re-created, FLUSHDB, SWAPDB or an
//! expiry all show as a different number. A key absent at WATCH and absent
//! again at EXEC reads 0 both times, yet Redis fails the EXEC if the key was
//! created in between (a SET then a DEL, a push then a pop): versions cannot
//! tell, so such keys are also registered in [`AbsentWatches`], and every
//! key creation (the places that publish the `new` keyspace event) marks
//! the connections watching it.
//!
//! Lock order: exec gate, then database slot locks, then key stripes, then
//! the blocking registry and engine locks. Nothing takes the gate while
//! holding any other lock, and a holder of the gate never awaits.
//!
//! Queued commands are kept re-encoded as RESP in one buffer and parsed
//! again by EXEC, so queuing costs one copy and no allocation per argument.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use basalt_resp::{Args, Encoder, Limits, Parsed, RequestParser};
use parking_lot::lock_api::RawRwLock as _;

use crate::commands::{self, flags, After, CommandDef, Conn};
use crate::state::{ClientInfo, Shared};

/// The server-wide reader-writer lock that serialises EXEC against every
/// other batch. A raw lock, so the connection task (which must stay `Send`
/// across awaits) can hold it through [`Entered`]; every holder releases it
/// before it awaits.
///
/// It also knows which connection workers hold it shared (one bit each, for
/// the first 64), so an EXEC that finds it held by another worker counts as
/// contention with that worker (`crate::workers`): connections that keep
/// running transactions then gather on one worker, whose EXECs find no
/// other batch to wait for, instead of each EXEC parking the other worker
/// and waking it again.
///
/// A script holds it exclusively too, for as long as it runs; once it has
/// run past `busy-reply-threshold` ([`BusyClock`]), a connection that
/// waits for the gate stops waiting and runs in *busy mode*: every command
/// answers `-BUSY` except SCRIPT KILL, FUNCTION KILL, SHUTDOWN NOSAVE and
/// the connection commands, which run without the gate (see [`run`]).
pub struct Gate(
    parking_lot::RawRwLock,
    std::sync::atomic::AtomicU64,
    BusyClock,
);

/// When the running script started, and how long it may run before other
/// clients get `-BUSY` (`busy-reply-threshold`, alias `lua-time-limit`).
#[derive(Debug)]
pub struct BusyClock {
    /// `crate::state::now_ns` when the script started; 0 = none runs.
    since: std::sync::atomic::AtomicU64,
    threshold_ms: std::sync::atomic::AtomicU64,
}

impl BusyClock {
    /// A script starts (at `now_ns`).
    pub fn start(&self, now_ns: u64) {
        self.since.store(now_ns.max(1), Ordering::Release);
    }
    /// The script ended.
    pub fn stop(&self) {
        self.since.store(0, Ordering::Release);
    }
    /// When the running script started (0 = none).
    pub fn since_ns(&self) -> u64 {
        self.since.load(Ordering::Acquire)
    }
    /// Whether a script has run past the threshold.
    pub fn is_busy(&self) -> bool {
        let since = self.since_ns();
        since != 0
            && crate::state::now_ns().saturating_sub(since)
                >= self
                    .threshold_ms
                    .load(Ordering::Relaxed)
                    .saturating_mul(1_000_000)
    }
    /// `busy-reply-threshold` in ms.
    pub fn threshold_ms(&self) -> u64 {
        self.threshold_ms.load(Ordering::Relaxed)
    }
    /// Sets `busy-reply-threshold`.
    pub fn set_threshold_ms(&self, ms: u64) {
        self.threshold_ms.store(ms, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gate")
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate(
            parking_lot::RawRwLock::INIT,
            std::sync::atomic::AtomicU64::new(0),
            BusyClock {
                since: std::sync::atomic::AtomicU64::new(0),
                threshold_ms: std::sync::atomic::AtomicU64::new(5000),
            },
        )
    }
}

impl Gate {
    /// This worker's bit in the holders' mask (none off the workers).
    fn bit() -> u64 {
        let w = crate::workers::current();
        if w < 64 {
            1 << w
        } else {
            0
        }
    }

    /// Notes that this worker holds (or stopped holding) the gate shared.
    fn mark(&self, held: bool) {
        let bit = Self::bit();
        if bit != 0 {
            if held {
                self.1.fetch_or(bit, Ordering::Relaxed);
            } else {
                self.1.fetch_and(!bit, Ordering::Relaxed);
            }
        }
    }

    /// Another worker holding the gate shared now, if any.
    fn other_holder(&self) -> u8 {
        let others = self.1.load(Ordering::Relaxed) & !Self::bit();
        if others == 0 {
            crate::workers::NOT_A_WORKER
        } else {
            others.trailing_zeros() as u8
        }
    }

    /// The running script's clock.
    pub fn busy(&self) -> &BusyClock {
        &self.2
    }

    /// Takes the gate shared, unless a script holding it has run past the
    /// threshold (then `false`: busy mode).
    fn lock_shared_unless_busy(&self) -> bool {
        use parking_lot::lock_api::RawRwLockTimed as _;
        if self.0.try_lock_shared() {
            return true;
        }
        loop {
            if self.2.is_busy() {
                return false;
            }
            if self
                .0
                .try_lock_shared_for(std::time::Duration::from_millis(2))
            {
                return true;
            }
        }
    }

    /// Holds the gate shared for a batch, or not at all while a script is
    /// busy ([`Entered::held`] says which).
    pub fn enter(&self) -> Entered<'_> {
        let held = self.lock_shared_unless_busy();
        if held {
            self.mark(true);
        }
        Entered { gate: self, held }
    }

    /// A hold that does not hold yet: [`Entered::hold`] takes the gate when
    /// a command needs it.
    pub fn lazy(&self) -> Entered<'_> {
        Entered {
            gate: self,
            held: false,
        }
    }

    /// Takes the gate exclusively until [`Gate::unlock_exclusive_raw`]
    /// (the Raft apply path, which holds it across a call it does not own).
    pub(crate) fn lock_exclusive_raw(&self) {
        self.0.lock_exclusive();
    }

    /// [`Gate::lock_exclusive_raw`] if the gate is free now: `false`, and
    /// nothing taken, if anyone holds it.
    pub(crate) fn try_lock_exclusive_raw(&self) -> bool {
        self.0.try_lock_exclusive()
    }

    /// Releases what [`Gate::lock_exclusive_raw`] took.
    ///
    /// # Safety
    /// The caller took the gate with `lock_exclusive_raw` and has not
    /// released it.
    pub(crate) unsafe fn unlock_exclusive_raw(&self) {
        // SAFETY: the caller promises an exclusive hold.
        unsafe { self.0.unlock_exclusive() };
    }

    /// Runs `f` holding the gate exclusively (the script thread).
    pub(crate) fn exclusive<R>(&self, f: impl FnOnce() -> R) -> R {
        self.0.lock_exclusive();
        struct Unlock<'g>(&'g Gate);
        impl Drop for Unlock<'_> {
            fn drop(&mut self) {
                // SAFETY: locked exclusively just above.
                unsafe { self.0 .0.unlock_exclusive() };
            }
        }
        let _unlock = Unlock(self);
        f()
    }
}

/// A batch's shared hold on the [`Gate`]; released on drop.
#[derive(Debug)]
pub struct Entered<'a> {
    gate: &'a Gate,
    held: bool,
}

impl Entered<'_> {
    /// Lets go (before an await). Idempotent.
    pub fn release(&mut self) {
        if self.held {
            self.held = false;
            self.gate.mark(false);
            // SAFETY: this value took the shared lock and has not released it.
            unsafe { self.gate.0.unlock_shared() };
        }
    }

    /// Takes the gate shared again (after an await), unless a script is
    /// busy. Idempotent.
    pub fn hold(&mut self) {
        if !self.held && self.gate.lock_shared_unless_busy() {
            self.gate.mark(true);
            self.held = true;
        }
    }

    /// Whether the gate is held (not in busy mode).
    pub fn held(&self) -> bool {
        self.held
    }

    /// Runs `f` holding the gate exclusively (no other batch runs).
    pub(crate) fn exclusive<R>(&mut self, f: impl FnOnce() -> R) -> R {
        self.release();
        if !self.gate.0.try_lock_exclusive() {
            crate::workers::note_contention(self.gate.other_holder());
            self.gate.0.lock_exclusive();
        }
        struct Unlock<'g>(&'g Gate);
        impl Drop for Unlock<'_> {
            fn drop(&mut self) {
                // SAFETY: locked exclusively just above.
                unsafe { self.0 .0.unlock_exclusive() };
            }
        }
        let unlock = Unlock(self.gate);
        let r = f();
        drop(unlock);
        self.hold();
        r
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

/// One database's absent watched keys and their watchers' flags.
type WatchersByKey = HashMap<Vec<u8>, Vec<Arc<AtomicBool>>>;

/// Keys that some connection watches while they do not exist: (db, key)
/// -> the flags of the connections watching it. A creation of such a key
/// sets their flags, and their EXEC fails. Empty almost always, so a
/// creation costs one atomic load.
#[derive(Debug, Default)]
pub struct AbsentWatches {
    /// Registered (db, key) pairs.
    count: AtomicUsize,
    by_db: Mutex<HashMap<usize, WatchersByKey>>,
}

impl AbsentWatches {
    /// Whether any absent key is watched.
    #[inline]
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// `key` of database `db` was just created: marks its watchers.
    #[inline]
    pub fn created(&self, db: usize, key: &[u8]) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        if let Some(flags) = self.by_db.lock().get(&db).and_then(|m| m.get(key)) {
            for f in flags {
                f.store(true, Ordering::Release);
            }
        }
    }

    /// Marks the watchers of every key of `db` for which `exists` holds
    /// (after SWAPDB, which brings keys in without creating them).
    pub fn created_where(&self, db: usize, exists: impl Fn(&[u8]) -> bool) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        if let Some(keys) = self.by_db.lock().get(&db) {
            for (key, flags) in keys {
                if exists(key) {
                    for f in flags {
                        f.store(true, Ordering::Release);
                    }
                }
            }
        }
    }

    fn register(&self, db: usize, key: &[u8], flag: &Arc<AtomicBool>) {
        let mut by_db = self.by_db.lock();
        let flags = by_db
            .entry(db)
            .or_default()
            .entry(key.to_vec())
            .or_default();
        if flags.is_empty() {
            self.count.fetch_add(1, Ordering::Release);
        }
        flags.push(flag.clone());
    }

    fn unregister(&self, db: usize, key: &[u8], flag: &Arc<AtomicBool>) {
        let mut by_db = self.by_db.lock();
        let Some(keys) = by_db.get_mut(&db) else {
            return;
        };
        let Some(flags) = keys.get_mut(key) else {
            return;
        };
        flags.retain(|f| !Arc::ptr_eq(f, flag));
        if flags.is_empty() {
            keys.remove(key);
            self.count.fetch_sub(1, Ordering::Release);
            if keys.is_empty() {
                by_db.remove(&db);
            }
        }
    }
}

/// This connection's watches of absent keys (see [`AbsentWatches`]).
#[derive(Debug)]
struct Absent {
    registry: Arc<AbsentWatches>,
    /// Set when one of `keys` is created.
    touched: Arc<AtomicBool>,
    keys: Vec<(usize, Vec<u8>)>,
}

impl Absent {
    fn clear(&mut self) {
        for (db, key) in self.keys.drain(..) {
            self.registry.unregister(db, &key, &self.touched);
        }
        self.touched.store(false, Ordering::Release);
    }
}

impl Drop for Absent {
    fn drop(&mut self) {
        self.clear();
    }
}

/// The commands queued since MULTI.
#[derive(Debug, Default)]
struct Queue {
    /// The commands, re-encoded as RESP multibulk.
    bytes: Vec<u8>,
    count: usize,
    /// A queuing error happened: EXEC replies EXECABORT.
    dirty: bool,
    /// A queued command may open a sorted set's or a stream's index
    /// (`commands::zbuild::may_defer`).
    opens_indexes: bool,
}

/// A connection's transaction state (in [`Conn`]).
#[derive(Debug, Default)]
pub struct TxState {
    multi: Option<Queue>,
    /// (db, key) -> the version the key had when WATCH ran.
    watched: HashMap<(usize, Vec<u8>), u64>,
    /// The watched keys that were absent (version 0), registered to see a
    /// creation.
    absent: Option<Absent>,
}

impl TxState {
    /// Whether the connection is between MULTI and EXEC/DISCARD.
    pub fn in_multi(&self) -> bool {
        self.multi.is_some()
    }

    /// The queued commands (RESP multibulk) of a transaction EXEC would
    /// run: `None` outside MULTI or after a queuing error.
    pub(crate) fn queued(&self) -> Option<&[u8]> {
        self.multi
            .as_ref()
            .filter(|q| !q.dirty)
            .map(|q| q.bytes.as_slice())
    }

    /// [`TxState::queued`] when a queued command may open a sorted set's or
    /// a stream's index (`commands::zbuild`).
    pub(crate) fn queued_opening_indexes(&self) -> Option<&[u8]> {
        self.queued()
            .filter(|_| self.multi.as_ref().is_some_and(|q| q.opens_indexes))
    }

    /// MULTI: starts queuing.
    pub fn begin(&mut self, info: &ClientInfo) {
        self.multi = Some(Queue::default());
        info.multi.store(0, Ordering::Relaxed);
    }

    /// DISCARD, EXEC and RESET: forgets the queue and the watched keys.
    pub fn clear(&mut self, info: &ClientInfo) {
        self.multi = None;
        self.unwatch();
        info.multi.store(-1, Ordering::Relaxed);
    }

    /// UNWATCH.
    pub fn unwatch(&mut self) {
        self.watched.clear();
        if let Some(a) = &mut self.absent {
            a.clear();
        }
    }

    /// WATCH of one key: remembers its version, unless it is already watched
    /// (the first version stays, so a change since then is still seen); an
    /// absent key (version 0) is also registered in `registry`.
    pub fn watch(&mut self, registry: &Arc<AbsentWatches>, db: usize, key: &[u8], version: u64) {
        match self.watched.entry((db, key.to_vec())) {
            std::collections::hash_map::Entry::Occupied(_) => return,
            std::collections::hash_map::Entry::Vacant(v) => v.insert(version),
        };
        if version == 0 {
            let a = self.absent.get_or_insert_with(|| Absent {
                registry: registry.clone(),
                touched: Arc::new(AtomicBool::new(false)),
                keys: Vec::new(),
            });
            a.registry.register(db, key, &a.touched);
            a.keys.push((db, key.to_vec()));
        }
    }

    fn flag(&mut self) {
        if let Some(q) = &mut self.multi {
            q.dirty = true;
        }
    }
}

/// What [`run`] did, for the connection loop's bookkeeping.
pub type Ran = (Option<&'static CommandDef>, Option<After>, u64);

/// Runs or queues one command: the connection loop's entry point instead
/// of [`commands::execute`]. Returns the command's table entry (`None` if
/// rejected), what the connection must do next, and how many write
/// commands ran (for `appendfsync always` and the dirty counter).
pub fn run(
    shared: &Shared,
    conn: &mut Conn,
    out: &mut Vec<u8>,
    args: Args<'_>,
    gate: &mut Entered<'_>,
) -> Ran {
    if !conn.tx.in_multi() && !shared.gate.busy().is_busy() {
        if let Some(cmd) = crate::script::handed_over(&args) {
            // The connection hands it to the script thread, which takes the
            // gate itself: this batch need not hold it.
            conn.script.clear();
            basalt_resp::write_command(&mut conn.script, args.iter());
            return (Some(cmd), Some(After::Script), 0);
        }
    }
    gate.hold();
    if !gate.held() {
        return busy(shared, conn, out, args);
    }
    if args.len() > 1 && args[0].eq_ignore_ascii_case(b"exec") {
        // Redis rejects a malformed EXEC by aborting the transaction (and
        // says so in the same words outside one).
        conn.tx.clear(&conn.info);
        commands::refuse(
            shared,
            out,
            conn.protocol,
            b"EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command",
        );
        if let Some((_, idx)) = commands::lookup_indexed(b"exec") {
            shared.cmdstats.reject(idx);
        }
        return (None, None, 0);
    }
    if !conn.tx.in_multi() {
        let (found, after) = commands::execute(shared, conn, out, args);
        let writes = found.is_some_and(|c| c.is_write()) as u64;
        return (found, after, writes);
    }
    // Queuing: Redis's processCommand checks in this order.
    let cmd = commands::lookup(&args[0]).filter(|c| c.arity_ok(args.len()));
    let Some(cmd) = cmd else {
        // Unknown or wrong arity: the same error as outside MULTI (execute
        // runs nothing for these), and EXEC will abort.
        conn.tx.flag();
        commands::execute(shared, conn, out, args);
        return (None, None, 0);
    };
    if cmd.flags & flags::NO_MULTI != 0 {
        conn.tx.flag();
        commands::refuse(
            shared,
            out,
            conn.protocol,
            b"ERR Command not allowed inside a transaction",
        );
        return (None, None, 0);
    }
    if shared.maxmemory.over() {
        // Over maxmemory a queue may not grow, and an EXEC that would run
        // a command that may grow memory is refused, as in Redis.
        let refuse = match cmd.name {
            "exec" => queue_denyoom(conn),
            "discard" | "multi" | "watch" | "quit" | "reset" => false,
            _ => true,
        };
        if refuse {
            if let Some((_, idx)) = commands::lookup_indexed(&args[0]) {
                shared.cmdstats.reject(idx);
            }
            if cmd.name == "exec" {
                conn.tx.clear(&conn.info);
                let line = format!(
                    "EXECABORT Transaction discarded because of: {}",
                    crate::maxmemory::OOM
                );
                commands::refuse(shared, out, conn.protocol, line.as_bytes());
            } else {
                conn.tx.flag();
                commands::refuse(shared, out, conn.protocol, crate::maxmemory::OOM.as_bytes());
            }
            return (None, None, 0);
        }
    }
    match cmd.name {
        "exec" => {
            let at = out.len();
            let ran = exec(shared, conn, out, gate);
            let failed = out.get(at) == Some(&b'-');
            commands::record_call(shared, conn, b"exec", failed);
            ran
        }
        "discard" | "multi" | "watch" | "quit" | "reset" => {
            let (found, after) = commands::execute(shared, conn, out, args);
            (found, after, 0)
        }
        _ => {
            let q = conn.tx.multi.as_mut().expect("in MULTI");
            basalt_resp::write_command(&mut q.bytes, args.iter());
            q.count += 1;
            q.opens_indexes |= commands::zbuild::may_defer(cmd);
            conn.info.multi.store(q.count as i64, Ordering::Relaxed);
            Encoder::new(out, conn.protocol).simple(b"QUEUED");
            (Some(cmd), None, 0)
        }
    }
}

/// A command while a script is busy (the gate is not held): the kill
/// commands, SHUTDOWN NOSAVE and the connection commands run; every other
/// command answers `-BUSY` (and, inside MULTI, fails the transaction).
fn busy(shared: &Shared, conn: &mut Conn, out: &mut Vec<u8>, args: Args<'_>) -> Ran {
    let arg_is = |i: usize, w: &str| args.get(i).is_some_and(|a| commands::is(a, w));
    let allowed = match commands::lookup(&args[0]) {
        // Unknown commands and wrong arities get their own errors.
        None => true,
        Some(c) if !c.arity_ok(args.len()) => true,
        Some(c) if c.name == "script" || c.name == "function" => {
            arg_is(1, "kill") || (c.name == "function" && arg_is(1, "stats"))
        }
        Some(c) if c.name == "shutdown" => {
            if args.iter().skip(1).any(|a| commands::is(a, "nosave")) {
                // Redis exits without waiting for the script. Every
                // acknowledged write has reached the OS; the script's own
                // writes are an uncommitted batch, which the next start
                // discards whole, as after kill -9.
                tracing::warn!("SHUTDOWN NOSAVE while a script runs: exiting now");
                std::process::exit(0);
            }
            false
        }
        Some(c) => c.flags & flags::ALLOW_BUSY != 0 && !matches!(c.name, "exec" | "watch"),
    };
    if allowed {
        let (found, after) = commands::execute(shared, conn, out, args);
        return (found, after, 0);
    }
    conn.tx.flag();
    commands::refuse(
        shared,
        out,
        conn.protocol,
        shared.scripts.busy_reply().as_bytes(),
    );
    (None, None, 0)
}

/// EXEC inside MULTI: EXECABORT after a queuing error; otherwise, holding
/// the gate exclusively, a null array if a watched key changed, or every
/// queued command's reply in one array.
/// Whether EXEC of `conn`'s transaction would run a write (a write command
/// or a script that may write), so a replicated node must propose it. A
/// queue with a queuing error is not (EXEC answers EXECABORT locally).
pub(crate) fn queue_writes(conn: &Conn) -> bool {
    let Some(queue) = &conn.tx.multi else {
        return false;
    };
    if queue.dirty {
        return false;
    }
    let mut parser = RequestParser::new(Limits::default());
    let mut pos = 0;
    while let Ok(Parsed::Command { args, consumed }) = parser.parse(&queue.bytes[pos..]) {
        pos += consumed;
        if let Some(c) = commands::lookup(&args[0]) {
            if crate::repl::is_replicated_write(c, &args) {
                return true;
            }
        }
    }
    false
}

/// Watched keys as (database, key, version), as a replicated EXEC carries
/// them.
pub(crate) type Watched = Vec<(u32, Vec<u8>, u64)>;

/// Whether `conn`'s queued transaction holds a command that may grow
/// memory (`denyoom`), which maxmemory refuses.
fn queue_denyoom(conn: &Conn) -> bool {
    let Some(queue) = &conn.tx.multi else {
        return false;
    };
    let mut parser = RequestParser::new(Limits::default());
    let mut pos = 0;
    while let Ok(Parsed::Command { args, consumed }) = parser.parse(&queue.bytes[pos..]) {
        pos += consumed;
        if commands::lookup(&args[0]).is_some_and(|c| c.flags & flags::DENYOOM != 0) {
            return true;
        }
    }
    false
}

/// Takes `conn`'s transaction out for a replicated EXEC: the queued
/// commands (RESP) and the watched keys with their versions; the
/// connection leaves MULTI. `None` if it is not in MULTI.
pub(crate) fn take_queue(conn: &mut Conn) -> Option<(Vec<u8>, Watched)> {
    let queue = conn.tx.multi.take()?;
    let watched = std::mem::take(&mut conn.tx.watched)
        .into_iter()
        .map(|((db, key), version)| (db as u32, key, version))
        .collect();
    conn.tx.clear(&conn.info);
    Some((queue.bytes, watched))
}

fn exec(shared: &Shared, conn: &mut Conn, out: &mut Vec<u8>, gate: &mut Entered<'_>) -> Ran {
    let me = commands::lookup(b"exec");
    let queue = conn.tx.multi.take().expect("in MULTI");
    let watched = std::mem::take(&mut conn.tx.watched);
    // Creations happen in batches, and every batch ends before EXEC holds
    // the gate alone: read under the gate below, the flag is final. Its
    // registrations stay until `absent` is dropped, after the gate.
    let absent = conn.tx.absent.take();
    conn.tx.clear(&conn.info);
    if queue.dirty {
        commands::refuse(
            shared,
            out,
            conn.protocol,
            b"EXECABORT Transaction discarded because of previous errors.",
        );
        return (me, None, 0);
    }
    gate.exclusive(|| {
        // The wait for the gate is nobody's command time.
        conn.tick = crate::state::now_ns();
        let changed = absent
            .as_ref()
            .is_some_and(|a| a.touched.load(Ordering::Acquire))
            || watched.iter().any(|((db, key), &version)| {
                let slot = shared.keyspace.read(*db);
                slot.db().map_or(0, |d| d.version(key)) != version
            });
        if changed {
            Encoder::new(out, conn.protocol).null_array();
            return (me, None, 0);
        }
        Encoder::new(out, conn.protocol).array(queue.count);
        // Every write of the transaction is one crash-atomic engine batch
        // (each command's own batch nests in it), committed before the
        // replies leave.
        let _batch = shared.keyspace.batch();
        let mut parser = RequestParser::new(Limits::default());
        let mut pos = 0;
        let mut writes = 0;
        let mut after: Option<After> = None;
        let mut sleep = std::time::Duration::ZERO;
        while pos < queue.bytes.len() {
            let Ok(Parsed::Command { args, consumed }) = parser.parse(&queue.bytes[pos..]) else {
                // Only well-formed commands were queued.
                unreachable!("a queued command does not parse");
            };
            pos += consumed;
            let (found, a) = commands::execute(shared, conn, out, args);
            // A script wrote if it called a write command.
            let script_wrote = found.is_some_and(|c| c.flags & flags::RUNS_SCRIPT != 0)
                && shared.scripts.take_wrote();
            if found.is_some_and(|c| c.is_write()) || script_wrote {
                writes += 1;
            }
            match a {
                None => {}
                // Inside a transaction a blocking command does not block:
                // it answers at once with a null, as in Redis, where the
                // moves reply a null bulk and the pops a null array.
                Some(After::Block) => {
                    shared.blocking.finish(conn.info.id);
                    let mut e = Encoder::new(out, conn.protocol);
                    match found.map(|c| c.name) {
                        Some("blmove" | "brpoplpush") => e.null(),
                        _ => e.null_array(),
                    }
                }
                Some(After::Sleep(d)) => sleep += d,
                // Only `run` hands scripts over; inside EXEC they run inline.
                Some(After::Script) => {}
                Some(After::Close) if after != Some(After::Shutdown) => after = Some(After::Close),
                Some(After::Close) => {}
                Some(After::Shutdown) => after = Some(After::Shutdown),
            }
        }
        if after.is_none() && !sleep.is_zero() {
            // DEBUG SLEEP inside EXEC delays this client after the
            // transaction (with the gate released), not the whole server.
            after = Some(After::Sleep(sleep));
        }
        (me, after, writes)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_watches_mark_their_watchers_and_unregister_when_dropped() {
        let registry = Arc::new(AbsentWatches::default());
        let mut a = TxState::default();
        let mut b = TxState::default();
        a.watch(&registry, 0, b"k", 0);
        a.watch(&registry, 0, b"present", 7); // not absent: not registered
        b.watch(&registry, 0, b"k", 0);
        b.watch(&registry, 1, b"k", 0);
        assert!(registry.any());
        registry.created(1, b"k");
        let touched = |t: &TxState| t.absent.as_ref().unwrap().touched.load(Ordering::Acquire);
        assert!(!touched(&a), "another database's key");
        assert!(touched(&b));
        registry.created(0, b"present");
        assert!(!touched(&a));
        registry.created(0, b"k");
        assert!(touched(&a));
        a.unwatch();
        assert!(!touched(&a), "UNWATCH resets the flag");
        registry.created(0, b"k");
        assert!(!touched(&a), "and unregisters");
        drop(b);
        assert!(
            !registry.any(),
            "a dropped connection leaves nothing behind"
        );
    }
}
