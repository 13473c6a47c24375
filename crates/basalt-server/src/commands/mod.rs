//! The command table: every command's name, arity, flags and key positions
//! (Redis's conventions), the single source of truth for dispatch and for
//! `COMMAND`. Each family lives in its own file and exports a `COMMANDS`
//! slice; adding a family is one line in [`FAMILIES`].
//!
//! A handler gets a [`Ctx`] (the connection, the shared state, the output
//! buffer and the command's start time) and the arguments, writes its reply
//! with the `Ctx` helpers, or returns an [`Error`] that [`execute`] turns
//! into the error reply.

pub mod bitmap;
pub mod cnum;
pub mod connection;
pub mod dump;
pub mod expiry;
pub(crate) mod fetch;
pub mod geo;
pub mod hash;
pub mod hll;
pub mod introspection;
pub mod keys;
pub mod list;
pub mod memory;
pub mod pubsub;
pub mod replication;
pub mod server;
pub mod set;
pub mod sort;
pub mod stream;
pub mod stream_group;
pub mod strings;
pub mod transaction;
pub mod version;
pub(crate) mod zbuild;
pub mod zset;

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

use basalt_engine::Db;
use basalt_resp::{Args, Encoder, Protocol};

use crate::keyspace::{DbRead, RedisType, SlotRead};
use crate::state::{ClientInfo, Shared};

/// A command's flags, as `COMMAND INFO` names them.
pub mod flags {
    /// May modify the keyspace.
    pub const WRITE: u32 = 1;
    /// Only reads.
    pub const READONLY: u32 = 1 << 1;
    /// May grow memory.
    pub const DENYOOM: u32 = 1 << 2;
    /// Administrative.
    pub const ADMIN: u32 = 1 << 3;
    /// May block the client.
    pub const BLOCKING: u32 = 1 << 4;
    /// Allowed while loading.
    pub const LOADING: u32 = 1 << 5;
    /// Allowed on a stale replica.
    pub const STALE: u32 = 1 << 6;
    /// O(1) or O(log N).
    pub const FAST: u32 = 1 << 7;
    /// Allowed before AUTH.
    pub const NO_AUTH: u32 = 1 << 8;
    /// Not allowed from scripts.
    pub const NOSCRIPT: u32 = 1 << 9;
    /// Not allowed inside MULTI.
    pub const NO_MULTI: u32 = 1 << 10;
    /// Hidden from MONITOR.
    pub const SKIP_MONITOR: u32 = 1 << 11;
    /// Hidden from SLOWLOG.
    pub const SKIP_SLOWLOG: u32 = 1 << 12;
    /// May replicate even though read-only.
    pub const MAY_REPLICATE: u32 = 1 << 13;
    /// Allowed while a script is busy.
    pub const ALLOW_BUSY: u32 = 1 << 14;
    /// Key positions depend on the arguments.
    pub const MOVABLE_KEYS: u32 = 1 << 15;
    /// A pub/sub command.
    pub const PUBSUB: u32 = 1 << 16;
    /// May be called without keys although it takes key arguments.
    pub const NO_MANDATORY_KEYS: u32 = 1 << 17;
    /// Refused while a replica loads its data in the background.
    pub const NO_ASYNC_LOADING: u32 = 1 << 18;
    /// Runs a script: outside MULTI the connection hands it to the script
    /// thread (`crate::script`). Basalt's own, not shown by COMMAND.
    pub const RUNS_SCRIPT: u32 = 1 << 24;

    /// Names in COMMAND INFO order (Redis 7.0's; like Redis, it does not
    /// show `may_replicate`).
    pub const NAMES: &[(u32, &str)] = &[
        (WRITE, "write"),
        (READONLY, "readonly"),
        (DENYOOM, "denyoom"),
        (ADMIN, "admin"),
        (PUBSUB, "pubsub"),
        (NOSCRIPT, "noscript"),
        (BLOCKING, "blocking"),
        (LOADING, "loading"),
        (STALE, "stale"),
        (SKIP_MONITOR, "skip_monitor"),
        (SKIP_SLOWLOG, "skip_slowlog"),
        (FAST, "fast"),
        (NO_AUTH, "no_auth"),
        (NO_MANDATORY_KEYS, "no_mandatory_keys"),
        (NO_ASYNC_LOADING, "no_async_loading"),
        (NO_MULTI, "no_multi"),
        (MOVABLE_KEYS, "movablekeys"),
        (ALLOW_BUSY, "allow_busy"),
    ];
}

/// The Redis command group (COMMAND DOCS `group`, ACL category).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// Strings.
    String,
    /// Generic key commands.
    Generic,
    /// Connection commands.
    Connection,
    /// Server commands.
    Server,
    /// Hashes.
    Hash,
    /// Sets.
    Set,
    /// Sorted sets.
    SortedSet,
    /// Lists.
    List,
    /// Pub/sub.
    Pubsub,
    /// MULTI, EXEC and friends.
    Transactions,
    /// EVAL, FUNCTION and friends.
    Scripting,
    /// Streams.
    Stream,
    /// Bit operations on strings.
    Bitmap,
    /// Geospatial indexes over sorted sets.
    Geo,
    /// HyperLogLog cardinality estimates.
    HyperLogLog,
    /// Cluster commands (READONLY, READWRITE).
    Cluster,
    /// Sentinel commands.
    Sentinel,
}

impl Group {
    /// The name COMMAND DOCS shows.
    pub fn name(self) -> &'static str {
        match self {
            Group::String => "string",
            Group::Generic => "generic",
            Group::Connection => "connection",
            Group::Server => "server",
            Group::Hash => "hash",
            Group::Set => "set",
            Group::SortedSet => "sorted_set",
            Group::List => "list",
            Group::Pubsub => "pubsub",
            Group::Transactions => "transactions",
            Group::Scripting => "scripting",
            Group::Stream => "stream",
            Group::Bitmap => "bitmap",
            Group::Geo => "geo",
            Group::HyperLogLog => "hyperloglog",
            Group::Cluster => "cluster",
            Group::Sentinel => "sentinel",
        }
    }
}

/// A handler: runs one command, writing its reply to `ctx`.
pub type Handler = fn(&mut Ctx<'_>, Args<'_>) -> Result<()>;

/// One entry of the command table.
#[derive(Debug)]
pub struct CommandDef {
    /// Lower-case name.
    pub name: &'static str,
    /// Redis arity: `n > 0` exactly n arguments (with the name), `-n` at least n.
    pub arity: i32,
    /// Bits of [`flags`].
    pub flags: u32,
    /// Position of the first key (0 = none).
    pub first_key: i32,
    /// Position of the last key (-1 = the last argument).
    pub last_key: i32,
    /// Step between keys.
    pub step: i32,
    /// The command group.
    pub group: Group,
    /// One-line summary (COMMAND DOCS).
    pub summary: &'static str,
    /// Redis version that introduced it (COMMAND DOCS).
    pub since: &'static str,
    /// The code.
    pub run: Handler,
}

impl CommandDef {
    /// Whether the command may write.
    pub fn is_write(&self) -> bool {
        self.flags & flags::WRITE != 0
    }

    /// Whether the command may park its client in the blocking registry:
    /// Redis's `blocking` commands, and WAIT, which Redis does not flag
    /// so (its COMMAND INFO row is Redis's).
    pub fn may_block(&self) -> bool {
        self.flags & flags::BLOCKING != 0 || self.name == "wait"
    }

    /// The argument positions of the command's keys in a call of `argc`
    /// arguments (with the name), by the table's first, last and step;
    /// none for a command without keys. Commands with movable keys
    /// (`flags::MOVABLE_KEYS`) need their own rules on top.
    pub fn key_positions(&self, argc: usize) -> std::iter::StepBy<std::ops::RangeInclusive<usize>> {
        let last = if self.last_key < 0 {
            argc as i64 + self.last_key as i64
        } else {
            self.last_key as i64
        }
        .min(argc as i64 - 1);
        let range = if self.first_key > 0 && last >= self.first_key as i64 {
            self.first_key as usize..=last as usize
        } else {
            // Empty.
            std::ops::RangeInclusive::new(1, 0)
        };
        range.step_by(self.step.max(1) as usize)
    }

    /// Whether `argc` arguments (with the name) fit the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i64;
        let a = self.arity as i64;
        if a > 0 {
            argc == a
        } else {
            argc >= -a
        }
    }
}

/// Every family's table.
const FAMILIES: &[&[CommandDef]] = &[
    strings::COMMANDS,
    replication::COMMANDS,
    bitmap::COMMANDS,
    hll::COMMANDS,
    geo::COMMANDS,
    keys::COMMANDS,
    dump::COMMANDS,
    expiry::COMMANDS,
    connection::COMMANDS,
    server::COMMANDS,
    hash::COMMANDS,
    set::COMMANDS,
    zset::COMMANDS,
    list::COMMANDS,
    sort::COMMANDS,
    memory::COMMANDS,
    introspection::COMMANDS,
    pubsub::COMMANDS,
    transaction::COMMANDS,
    version::COMMANDS,
    crate::script::COMMANDS,
    stream::COMMANDS,
    stream_group::COMMANDS,
];

/// Every command, in table order.
pub fn all() -> impl Iterator<Item = &'static CommandDef> {
    FAMILIES.iter().flat_map(|f| f.iter())
}

/// Longest command name accepted by [`lookup`].
const MAX_NAME: usize = 32;

/// Name -> command. hashbrown's default hasher (foldhash): the lookup runs
/// once per command, and std's SipHash showed up at ~2 % of a GET's CPU.
/// The value is the command and its position in [`all`] (its row in
/// `crate::cmdstats`).
type Table = hashbrown::HashMap<&'static [u8], (&'static CommandDef, usize)>;

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        all()
            .enumerate()
            .map(|(i, c)| (c.name.as_bytes(), (c, i)))
            .collect()
    })
}

/// Finds a command by name, case-insensitively, without allocating.
pub fn lookup(name: &[u8]) -> Option<&'static CommandDef> {
    lookup_indexed(name).map(|(c, _)| c)
}

thread_local! {
    /// The command this thread looked up last: a pipeline mostly repeats
    /// one command, whose name is then compared instead of hashed.
    static LAST_LOOKUP: Cell<Option<(&'static CommandDef, usize)>> = const { Cell::new(None) };
}

/// [`lookup`] with the command's position in [`all`].
pub fn lookup_indexed(name: &[u8]) -> Option<(&'static CommandDef, usize)> {
    if let Some(last) = LAST_LOOKUP.get() {
        if last.0.name.as_bytes().eq_ignore_ascii_case(name) {
            return Some(last);
        }
    }
    if name.len() > MAX_NAME {
        return None;
    }
    let mut buf = [0u8; MAX_NAME];
    let lower = &mut buf[..name.len()];
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    let found = table().get(&*lower).copied();
    if found.is_some() {
        LAST_LOOKUP.set(found);
    }
    found
}

/// Charges `cmd` (by name) one call and the time since `conn.tick`, and
/// moves the tick to now: for commands run outside [`execute`] (EXEC).
pub fn record_call(shared: &Shared, conn: &mut Conn, name: &[u8], failed: bool) {
    if let Some((cmd, idx)) = lookup_indexed(name) {
        let now = crate::state::command_ns();
        let nanos = now.saturating_sub(conn.tick);
        conn.tick = now;
        shared.cmdstats.record(idx, nanos, failed);
        if shared.cmdstats.is_slow(nanos) {
            let argv = [cmd.name.as_bytes()];
            shared
                .cmdstats
                .observe_slow(cmd, argv.into_iter(), &conn.info, nanos);
        }
    }
}

/// A command's failure, turned into an error reply by [`execute`].
#[derive(Debug)]
pub enum Error {
    /// `-ERR syntax error`
    Syntax,
    /// `-WRONGTYPE ...`
    WrongType,
    /// `-ERR value is not an integer or out of range`
    NotInteger,
    /// `-ERR value is not a valid float`
    NotFloat,
    /// `-ERR DB index is out of range`
    DbRange,
    /// `-ERR no such key`
    NoSuchKey,
    /// `-ERR wrong number of arguments for '<name>' command`
    Arity(Cow<'static, str>),
    /// A whole error line without the `-`, e.g. `ERR increment or decrement would overflow`.
    Msg(Cow<'static, str>),
    /// The engine failed.
    Engine(basalt_engine::Error),
}

/// Result of a handler.
pub type Result<T = (), E = Error> = std::result::Result<T, E>;

impl From<basalt_engine::Error> for Error {
    fn from(e: basalt_engine::Error) -> Self {
        match e {
            basalt_engine::Error::WrongKind { .. } => Error::WrongType,
            basalt_engine::Error::TooLarge { .. } => {
                Error::Msg("ERR string exceeds maximum allowed size (proto-max-bulk-len)".into())
            }
            e => Error::Engine(e),
        }
    }
}

impl Error {
    /// `ERR <text>`.
    pub fn err(text: impl Into<Cow<'static, str>>) -> Error {
        let text = text.into();
        Error::Msg(format!("ERR {text}").into())
    }

    /// The reply line, without `-` and CRLF.
    pub fn message(&self) -> Cow<'_, str> {
        match self {
            Error::Syntax => "ERR syntax error".into(),
            Error::WrongType => {
                "WRONGTYPE Operation against a key holding the wrong kind of value".into()
            }
            Error::NotInteger => "ERR value is not an integer or out of range".into(),
            Error::NotFloat => "ERR value is not a valid float".into(),
            Error::DbRange => "ERR DB index is out of range".into(),
            Error::NoSuchKey => "ERR no such key".into(),
            Error::Arity(name) => {
                format!("ERR wrong number of arguments for '{name}' command").into()
            }
            Error::Msg(m) => Cow::Borrowed(m),
            // Redis's reply when its AOF cannot be written, naming the cause.
            Error::Engine(e @ basalt_engine::Error::Poisoned(_)) => {
                let e = e.to_string();
                let why = e.split_once(": ").map_or(&e[..], |(_, w)| w);
                format!("MISCONF Errors writing to the AOF file: {why}").into()
            }
            Error::Engine(e @ basalt_engine::Error::Io { op, .. })
                if matches!(*op, "write" | "create" | "fsync" | "truncate") =>
            {
                format!("MISCONF Errors writing to the AOF file: {e}").into()
            }
            Error::Engine(e) => format!("ERR storage error: {e}").into(),
        }
    }
}

/// What the connection must do after the command's reply.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum After {
    /// Close the connection once the batch's replies are written (QUIT,
    /// CLIENT KILL of itself).
    Close,
    /// Wait this long before the next command (DEBUG SLEEP).
    Sleep(Duration),
    /// Hand the script commands stored in [`Conn::script`] to the script
    /// thread and wait for their replies (`crate::script`).
    Script,
    /// Close without replying and shut the server down (SHUTDOWN).
    Shutdown,
    /// Park until a key this client waits for is signalled, then run the
    /// command again (see `crate::blocking`).
    Block,
}

/// Per-connection state that commands read and change.
#[derive(Debug)]
pub struct Conn {
    /// The selected database.
    pub db: usize,
    /// RESP2 or RESP3 (HELLO).
    pub protocol: Protocol,
    /// The registry entry (name, id, ...).
    pub info: Arc<ClientInfo>,
    /// MULTI queue and watched keys.
    pub tx: crate::tx::TxState,
    /// The wall clock (ms) read once when the connection's current batch
    /// started, so a pipeline of N commands reads the clock once, not N
    /// times; 0 = read it per command (after the batch waited on anything).
    pub batch_clock: u64,
    /// The clock's last reading in ns ([`crate::state::now_ns`]): taken
    /// when a batch starts (the same reading as `batch_clock`), after
    /// anything it waited on, and after each command, which is charged the
    /// time since the previous reading (`crate::cmdstats`).
    pub tick: u64,
    /// Script commands (RESP) waiting to be handed to the script thread
    /// ([`After::Script`]); the buffer travels with the connection and is
    /// reused.
    pub script: Vec<u8>,
    /// Whether the running command may leave a cold read's reply to the
    /// reader threads (`crate::readers`): set by the connection loop around
    /// a plain command whose reply goes straight into the output, never in
    /// EXEC, scripts, HTTP or replicated applies.
    pub may_defer: bool,
    /// Replies the reader threads are producing, in output order.
    pub deferred: Vec<crate::readers::Deferred>,
    /// Whether the running command, if it is one that opens sorted sets or
    /// streams, may leave a big one's missing index to be built off the
    /// worker (`zbuild`): set by the connection loop around a plain
    /// command, never in EXEC, scripts, HTTP or replicated applies.
    pub may_build_index: bool,
    /// The indexes a command left to be built off the worker, taken by
    /// the connection loop, which builds them and runs the command again.
    pub(crate) index_wanted: Vec<zbuild::Wanted>,
}

/// Everything a handler needs.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// Server-wide state.
    pub shared: &'a Shared,
    /// This connection.
    pub conn: &'a mut Conn,
    /// The batch's output buffer.
    pub out: &'a mut Vec<u8>,
    /// Wall-clock ms when the command started; every time a write computes
    /// derives from it (brief decision 9).
    pub now_ms: u64,
    /// What to do after the reply, if anything.
    pub after: Option<After>,
    /// The command being run.
    pub cmd: &'static CommandDef,
    /// The error the command replied was already counted in INFO
    /// errorstats (a script's error that a `redis.call` inside it replied).
    pub error_counted: bool,
    /// A read lookup was counted (INFO keyspace_hits / keyspace_misses).
    pub looked: std::cell::Cell<bool>,
}

impl<'a> Ctx<'a> {
    /// An encoder for the connection's protocol.
    pub fn enc(&mut self) -> Encoder<'_> {
        Encoder::new(self.out, self.conn.protocol)
    }
    /// `+OK`
    pub fn ok(&mut self) {
        self.out.extend_from_slice(b"+OK\r\n");
    }
    /// `+<s>`
    pub fn simple(&mut self, s: &[u8]) {
        self.enc().simple(s)
    }
    /// `:<n>`
    pub fn int(&mut self, n: i64) {
        self.enc().integer(n)
    }
    /// `$<len>\r\n<bytes>`
    pub fn bulk(&mut self, b: &[u8]) {
        self.enc().bulk(b)
    }
    /// Null bulk (RESP2 `$-1`, RESP3 `_`).
    pub fn null(&mut self) {
        self.enc().null()
    }
    /// Bulk or null.
    pub fn opt_bulk(&mut self, b: Option<&[u8]>) {
        match b {
            Some(b) => self.bulk(b),
            None => self.null(),
        }
    }
    /// Array header.
    pub fn array(&mut self, n: usize) {
        self.enc().array(n)
    }
    /// An error reply from a full line such as `ERR ...`.
    pub fn error_line(&mut self, line: &str) {
        self.enc().error(line.as_bytes())
    }

    /// Writes a value that is not in memory as a bulk reply: when this
    /// command may defer, submitted on this worker's io_uring
    /// (`crate::uring`) or else left to a reader thread (`crate::readers`),
    /// its reply coming in this place later; otherwise read here.
    pub fn cold_bulk(&mut self, read: basalt_engine::ColdRead) -> Result<()> {
        let protocol = self.conn.protocol;
        let at = self.out.len();
        if !self.conn.may_defer || !self.shared.readers.enabled() {
            read.read_with(|v| Encoder::new(self.out, protocol).bulk(v))?;
            return Ok(());
        }
        let read = match crate::uring::submit(read, protocol, at) {
            Ok(d) => {
                self.conn.deferred.push(d);
                return Ok(());
            }
            Err(read) => read,
        };
        match self.shared.readers.submit(read, protocol, at) {
            Some(d) => self.conn.deferred.push(d),
            None => return Err(Error::err("cold read could not be queued")),
        }
        Ok(())
    }

    /// Writes a segmented value whose segments are not all in memory as a
    /// bulk reply: when this command may defer, its reads are submitted
    /// now (this worker's io_uring, else the reader threads) and a task on
    /// this worker assembles the value from them once they are back, its
    /// reply coming in this place later; otherwise read here. The value
    /// is the one looked up, whatever writes come after it.
    pub fn cold_value(&mut self, mut value: basalt_engine::ColdValue) -> Result<()> {
        let protocol = self.conn.protocol;
        if !self.conn.may_defer || !self.shared.readers.enabled() {
            let v = value.assemble()?;
            self.bulk(&v);
            return Ok(());
        }
        // A read that cannot be made leaves its segments to the assembly.
        let waits: Vec<_> = value
            .take_reads()
            .into_iter()
            .map(|read| {
                let plan = read.stage_plan();
                (
                    plan,
                    crate::readers::fetch_record(&self.shared.readers, read),
                )
            })
            .collect();
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.conn
            .deferred
            .push(crate::readers::Deferred::new(self.out.len(), rx));
        // On the worker's runtime (one thread): the assembly runs on this
        // worker, between its other tasks.
        tokio::spawn(async move {
            let mut staged = Vec::with_capacity(waits.len());
            for (plan, rx) in waits {
                if let Ok(record) = rx.await {
                    if !record.is_empty() {
                        staged.push((plan, record));
                    }
                }
            }
            if tx.is_closed() {
                // The connection went away: nothing to assemble for.
                return;
            }
            // Staged, assembled and unstaged with no await in between: no
            // other command on this thread runs meanwhile.
            for (plan, record) in &staged {
                basalt_engine::stage_record(plan, record);
            }
            let v = value.assemble();
            for (plan, _) in &staged {
                basalt_engine::unstage_record(plan);
            }
            let reply = crate::readers::reply_or_error(
                v.map(|v| crate::readers::bulk_reply(&v, protocol)),
                protocol,
            );
            let _ = tx.send(reply);
        });
        Ok(())
    }

    /// Read access to the selected database (may be unopened = empty).
    pub fn slot(&self) -> SlotRead<'a> {
        self.shared.keyspace.read(self.conn.db)
    }

    /// The selected database's engine, opened if needed, for a write.
    pub fn db_w(&self) -> Result<DbRead<'a>> {
        Ok(self.shared.keyspace.write(self.conn.db)?)
    }

    /// Publishes a keyspace event for `key` in the selected database, if
    /// `notify-keyspace-events` enables `class` (one relaxed load if not).
    #[inline]
    pub fn notify(&self, class: u32, event: &str, key: &[u8]) {
        self.notify_db(class, event, key, self.conn.db);
    }

    /// A read lookup of `key` that found nothing (Redis's `lookupKeyRead`
    /// missing): counted in INFO `keyspace_misses`, and `keymiss`
    /// published if `notify-keyspace-events` has `m`.
    #[inline]
    pub fn keymiss(&self, key: &[u8]) {
        self.looked.set(true);
        self.shared.lookups.count(false);
        self.notify(crate::notify::KEY_MISS, "keymiss", key);
    }

    /// A read lookup that found its key: counted in INFO `keyspace_hits`.
    /// Called where [`Ctx::keymiss`] would be had the key been absent.
    #[inline]
    pub fn keyhit(&self) {
        self.looked.set(true);
        self.shared.lookups.count(true);
    }

    /// A read lookup counted in keyspace hits or misses that publishes no
    /// `keymiss` (Redis's `LOOKUP_NONOTIFY`: OBJECT).
    #[inline]
    pub fn looked_up_quietly(&self, found: bool) {
        self.looked.set(true);
        self.shared.lookups.count(found);
    }

    /// [`Ctx::keyhit`] or [`Ctx::keymiss`] for a read lookup of `key`.
    #[inline]
    pub fn looked_up(&self, key: &[u8], found: bool) {
        if found {
            self.keyhit();
        } else {
            self.keymiss(key);
        }
    }

    /// The read lookups of a multi-key read (SINTER, ZUNION, ...): a hit
    /// or a `keymiss` for every key of `keys`, in order, stopping after
    /// the first key whose type `accept` refuses (where Redis stops with
    /// WRONGTYPE, that lookup itself a hit).
    pub fn keymiss_each<'k>(
        &self,
        db: Option<&Db>,
        keys: impl IntoIterator<Item = &'k [u8]>,
        accept: impl Fn(RedisType) -> bool,
    ) {
        for key in keys {
            match type_of(db, key) {
                None => self.keymiss(key),
                Some(t) => {
                    self.keyhit();
                    if !accept(t) {
                        return;
                    }
                }
            }
        }
    }

    /// Whether `key` is absent from `db`, asked only when someone wants to
    /// hear of creations: `new` events, or a WATCH of an absent key
    /// (otherwise false after two relaxed loads). A write that finds it
    /// absent publishes `new` once it has created the key.
    #[inline]
    pub fn absent_for_new(&self, db: &Db, key: &[u8]) -> bool {
        self.wants_new() && !db.exists(key)
    }

    /// Whether key creations must be reported ([`Ctx::notify`] with `NEW`):
    /// `new` keyspace events are on, or a connection watches an absent key
    /// (`crate::tx::AbsentWatches`).
    #[inline]
    pub fn wants_new(&self) -> bool {
        self.shared.pubsub.notifies(crate::notify::NEW) || self.shared.absent_watches.any()
    }

    /// [`Ctx::notify`] for a key of database `db` (MOVE, COPY ... DB).
    #[inline]
    pub fn notify_db(&self, class: u32, event: &str, key: &[u8], db: usize) {
        if class == crate::notify::NEW {
            // A creation fails the EXEC of whoever watched the key absent.
            self.shared.absent_watches.created(db, key);
        }
        self.shared.pubsub.notify(class, event, key, db);
    }

    /// Locks the stripe of `key` in the selected database.
    pub fn lock(&self, key: &[u8]) -> parking_lot::MutexGuard<'a, ()> {
        self.shared.keyspace.lock(self.conn.db, key)
    }

    /// Runs a ranged write of `key` (`op` calls the engine's `try_*_range`)
    /// under the key's stripe. When the engine answers that the write needs
    /// several records and so a write batch (`None`, nothing written), it
    /// runs again with the batch opened first and then the stripe: the
    /// order every batched command keeps, so the two never wait on each
    /// other the other way round. A single-record write (one bit, one
    /// segment) takes no batch.
    pub fn ranged_write<R>(
        &self,
        key: &[u8],
        mut op: impl FnMut(&Db) -> Result<Option<R>>,
    ) -> Result<R> {
        {
            let db = self.db_w()?;
            let _g = self.lock(key);
            if let Some(r) = op(&db)? {
                return Ok(r);
            }
        }
        let b = self.shared.keyspace.batch();
        let r = {
            let db = self.db_w()?;
            let _g = self.lock(key);
            op(&db)?
        };
        b.commit()?;
        Ok(r.expect("inside a batch a ranged write needs no other"))
    }
}

/// Writes the error reply `line` and counts it (INFO errorstats): for
/// error replies written outside a command's handler (refusals, EXEC's
/// abort, a failed cold read), which [`execute_found`] does not see.
pub fn refuse(shared: &Shared, out: &mut Vec<u8>, protocol: Protocol, line: &[u8]) {
    let at = out.len();
    Encoder::new(out, protocol).error(line);
    shared.errors.count(&out[at..]);
}

/// Runs one command: lookup, arity check, handler, error reply.
/// Returns the table entry if the handler ran (`None` for an unknown
/// command or a wrong arity) and what the connection must do next.
pub fn execute(
    shared: &Shared,
    conn: &mut Conn,
    out: &mut Vec<u8>,
    args: Args<'_>,
) -> (Option<&'static CommandDef>, Option<After>) {
    let name = &args[0];
    let Some((cmd, idx)) = lookup_indexed(name) else {
        let at = out.len();
        unknown_command(conn.protocol, out, args);
        shared.errors.count(&out[at..]);
        return (None, None);
    };
    execute_found(shared, conn, out, args, cmd, idx)
}

/// [`execute`] of a command already looked up ([`lookup_indexed`]).
pub fn execute_found(
    shared: &Shared,
    conn: &mut Conn,
    out: &mut Vec<u8>,
    args: Args<'_>,
    cmd: &'static CommandDef,
    idx: usize,
) -> (Option<&'static CommandDef>, Option<After>) {
    if !cmd.arity_ok(args.len()) {
        shared.cmdstats.reject(idx);
        let e = Error::Arity(cmd.name.into());
        refuse(shared, out, conn.protocol, e.message().as_bytes());
        return (None, None);
    }
    // A container's subcommand is looked up (and its arity checked) next,
    // as in Redis, and counted on its own row (`config|get`).
    let row = match introspection::route(cmd, idx, &args) {
        Ok(row) => row,
        Err((row, e)) => {
            if let Some(row) = row {
                shared.cmdstats.reject(row);
            }
            refuse(shared, out, conn.protocol, e.message().as_bytes());
            return (None, None);
        }
    };
    if !crate::auth::may_run(shared, &conn.info, cmd.flags) {
        refuse(
            shared,
            out,
            conn.protocol,
            crate::auth::noauth_reply(cmd.name).as_bytes(),
        );
        return (None, None);
    }
    // maxmemory (noeviction): refused before it runs. On a replicated
    // group the node that proposes decides (conn.rs); applies never refuse.
    if cmd.flags & flags::DENYOOM != 0
        && shared.maxmemory.over()
        && shared.repl.get().is_none()
        && !crate::maxmemory::skipped()
    {
        shared.cmdstats.reject(row);
        refuse(shared, out, conn.protocol, crate::maxmemory::OOM.as_bytes());
        return (None, None);
    }
    if conn.protocol == Protocol::Resp2
        && conn.info.pubsub.subscribed()
        && !pubsub::allowed_while_subscribed(cmd.name)
    {
        let line = format!(
            "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
            pubsub::full_name(cmd.name, &args)
        );
        refuse(shared, out, conn.protocol, line.as_bytes());
        shared.cmdstats.reject(row);
        return (None, None);
    }
    let now_ms = match conn.batch_clock {
        0 => crate::state::now_ms(),
        t => t,
    };
    let reply_at = out.len();
    // The engine decides expiry at the command's time (crate::clock).
    let _pinned = crate::clock::pin(now_ms);
    // A command that may write several records runs as one crash-atomic
    // engine batch (committed when `_batch` drops, before the reply leaves).
    let _batch = (cmd.is_write() && may_write_several(cmd.name, args.len()))
        .then(|| shared.keyspace.batch());
    // Client-side caching needs the running client (NOLOOP, and its own
    // invalidations go after its reply); MONITOR shows a script before its
    // calls and a blocked command once (`crate::tracking`, `crate::monitor`).
    let _running = crate::tracking::running(conn.info.id);
    let rerun = cmd.may_block()
        && shared.pubsub.monitors.active()
        && shared.blocking.is_blocked(conn.info.id);
    let script_scope = crate::monitor::before(&shared.pubsub, &conn.info, conn.db, cmd, &args);
    let deferring = zbuild::Deferring::enter(conn.may_build_index && zbuild::may_defer(cmd));
    let mut ctx = Ctx {
        shared,
        conn,
        out,
        now_ms,
        after: None,
        cmd,
        error_counted: false,
        looked: std::cell::Cell::new(false),
    };
    if let Err(e) = (cmd.run)(&mut ctx, args) {
        if let Error::Engine(inner) = &e {
            tracing::error!(command = cmd.name, error = %inner, "storage error");
        }
        let msg = e.message();
        Encoder::new(ctx.out, ctx.conn.protocol).error(msg.as_bytes());
    }
    let (after, error_counted, looked) = (ctx.after, ctx.error_counted, ctx.looked.get());
    let wanted = deferring.wanted();
    if !wanted.is_empty() {
        // It stopped at its first look at a big sorted set whose index is
        // not cached, before any effect: nothing of this run counts or is
        // seen; the connection builds the index and runs it again.
        out.truncate(reply_at);
        conn.index_wanted = wanted;
        return (Some(cmd), None);
    }
    // A read that stopped at WRONGTYPE (`?` past its count) had found its
    // key: Redis counts the lookup as a hit before checking the type.
    if !looked && out[reply_at..].starts_with(b"-WRONGTYPE") && reads_before_type_check(cmd) {
        shared.lookups.count(true);
    }
    drop(script_scope);
    if cmd.flags & flags::READONLY != 0 {
        shared.pubsub.tracking.remember(&conn.info, cmd, &args);
    }
    crate::monitor::after(&shared.pubsub, &conn.info, conn.db, cmd, &args, rerun);
    // Handlers may also write an error line themselves: the reply's first
    // byte says whether the call failed.
    let failed = out.get(reply_at) == Some(&b'-');
    if failed && !error_counted {
        shared.errors.count(&out[reply_at..]);
    }
    // A command that blocks is counted once, by the run that serves it.
    if after != Some(After::Block) {
        let now = crate::state::command_ns();
        let nanos = now.saturating_sub(conn.tick);
        conn.tick = now;
        shared.cmdstats.record(row, nanos, failed);
        // SLOWLOG and LATENCY: one relaxed load unless the run was slow.
        if shared.cmdstats.is_slow(nanos) {
            shared
                .cmdstats
                .observe_slow(cmd, args.iter(), &conn.info, nanos);
        }
    }
    (Some(cmd), after)
}

/// Whether `cmd` looks its key up for reading (Redis's `lookupKeyRead`)
/// before its type check, so a WRONGTYPE reply means a keyspace hit: the
/// read-only commands, and the writes that read their key first.
fn reads_before_type_check(cmd: &CommandDef) -> bool {
    // A script's WRONGTYPE is its call's (counted there) or its own.
    let script = matches!(cmd.name, "eval_ro" | "evalsha_ro" | "fcall_ro");
    (cmd.flags & flags::READONLY != 0 && !script)
        || matches!(
            cmd.name,
            "getdel"
                | "getex"
                | "getset"
                | "set"
                | "sort"
                | "sinterstore"
                | "sunionstore"
                | "sdiffstore"
                | "zunionstore"
                | "zinterstore"
                | "zdiffstore"
                | "zrangestore"
                | "georadius"
                | "georadiusbymember"
                | "geosearchstore"
                | "bitop"
                | "pfmerge"
                | "pfcount"
                | "copy"
                | "lcs"
        )
}

/// Whether write command `name` with `argc` arguments may write more than
/// one engine record, and so must run as a write batch. The common
/// single-record forms (SET, INCR, one-field HSET, one-element pushes, ...)
/// stay plain appends; every other write command is a batch. A single
/// record that also purges an expired key first (a deletion, then the
/// write) needs no batch: either half alone is a state the key could have.
pub fn may_write_several(name: &str, argc: usize) -> bool {
    match name {
        // One record whatever the arguments.
        "set" | "setnx" | "setex" | "psetex" | "getset" | "getdel" | "getex" | "incr" | "decr"
        | "incrby" | "decrby" | "incrbyfloat" | "append" | "setrange" | "expire" | "pexpire"
        | "expireat" | "pexpireat" | "persist" | "hincrby" | "hincrbyfloat" | "hsetnx"
        | "zincrby" | "cas" | "blpop" | "brpop" | "bzpopmin" | "bzpopmax" => false,
        // One record, or (a conversion to segments, a range across a
        // boundary, several registers) a batch they open themselves before
        // the key's lock (`Ctx::ranged_write`, BITFIELD, PFADD's retry).
        "setbit" | "bitfield" | "pfadd" | "pfcount" | "pfmerge" => false,
        // One record unless it trims, when it opens its own batch.
        "xadd" => false,
        // Opens its batch for its deletes only, after the target answered
        // (the blanket batch would hold the batch lock across the network).
        "migrate" => false,
        // One record without a count.
        "lpop" | "rpop" | "spop" | "zpopmin" | "zpopmax" | "del" | "unlink" => argc > 2,
        // One record with one member.
        "lpush" | "rpush" | "lpushx" | "rpushx" | "hdel" | "sadd" | "srem" | "zrem" => argc > 3,
        "hset" | "hmset" | "zadd" => argc > 4,
        _ => true,
    }
}

/// Redis 7.0's reply to an unknown command: the name (at most 128 bytes)
/// and the first arguments, each quoted and followed by a space, until the
/// argument text reaches 128 bytes.
fn unknown_command(protocol: Protocol, out: &mut Vec<u8>, args: Args<'_>) {
    let mut line = b"ERR unknown command '".to_vec();
    let name = &args[0];
    line.extend_from_slice(&name[..name.len().min(128)]);
    line.extend_from_slice(b"', with args beginning with: ");
    let mut tail: Vec<u8> = Vec::new();
    for arg in args.iter().skip(1) {
        if tail.len() >= 128 {
            break;
        }
        let room = 128 - tail.len();
        tail.push(b'\'');
        tail.extend_from_slice(&arg[..arg.len().min(room)]);
        tail.extend_from_slice(b"' ");
    }
    line.extend_from_slice(&tail);
    Encoder::new(out, protocol).error(&line);
}

/// `-ERR unknown subcommand '<sub>'. Try <CMD> HELP.`
pub fn unknown_subcommand(cmd: &str, sub: &[u8]) -> Error {
    let sub = String::from_utf8_lossy(&sub[..sub.len().min(128)]).into_owned();
    Error::Msg(
        format!(
            "ERR unknown subcommand '{sub}'. Try {} HELP.",
            cmd.to_ascii_uppercase()
        )
        .into(),
    )
}

/// Checks a container subcommand's arity (e.g. `config|get`, -3).
pub fn sub_arity(full: &'static str, arity: i32, args: &Args<'_>) -> Result {
    let argc = args.len() as i32;
    let ok = if arity > 0 {
        argc == arity
    } else {
        argc >= -arity
    };
    if ok {
        Ok(())
    } else {
        Err(Error::Arity(full.into()))
    }
}

/// Redis `string2ll`: an optional `-`, then digits with no leading zero
/// (except `0` itself), fitting an i64. No spaces, no `+`.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (neg, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !(b'1'..=b'9').contains(&digits[0]) {
        return None;
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((d - b'0') as u64)?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            None
        } else {
            Some((v as i64).wrapping_neg())
        }
    } else {
        i64::try_from(v).ok()
    }
}

/// [`parse_i64`] or `-ERR value is not an integer or out of range`.
pub fn int_arg(s: &[u8]) -> Result<i64> {
    parse_i64(s).ok_or(Error::NotInteger)
}

/// A float as Redis's `strtod`-based parsing accepts it (hex included):
/// finite, no surrounding spaces.
pub fn parse_f64(s: &[u8]) -> Option<f64> {
    let (v, _) = cnum::strtod(s)?;
    v.is_finite().then_some(v)
}

/// Case-insensitive comparison of an argument with an ASCII word.
pub fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// The Redis type of `key` in `db`, if it exists.
pub fn type_of(db: Option<&Db>, key: &[u8]) -> Option<RedisType> {
    db?.meta(key).map(|m| RedisType::of(&m))
}

/// A small xorshift generator (RANDOMKEY, run ids); not for secrets.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (0 is replaced).
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    /// A generator seeded from the clock and a counter.
    pub fn from_time() -> Rng {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let c = COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Rng::new(t ^ c)
    }
    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Helper for building table entries tersely.
#[allow(clippy::too_many_arguments)]
pub(crate) const fn def(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: (i32, i32, i32),
    group: Group,
    since: &'static str,
    summary: &'static str,
    run: Handler,
) -> CommandDef {
    CommandDef {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        group,
        summary,
        since,
        run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string2ll_rules() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-1"), Some(-1));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-0",
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"9223372036854775808",
            b"1a",
            b"-",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", bad);
        }
    }

    #[test]
    fn table_names_are_lowercase_and_unique() {
        let mut seen = std::collections::HashSet::new();
        for c in all() {
            assert_eq!(c.name, c.name.to_ascii_lowercase());
            assert!(seen.insert(c.name), "duplicate {}", c.name);
            assert!(c.name.len() <= MAX_NAME);
        }
        assert!(lookup(b"GeT").is_some());
    }

    #[test]
    fn single_record_forms_skip_the_batch_and_every_other_write_takes_one() {
        for (name, argc) in [
            ("set", 5),
            ("incr", 2),
            ("del", 2),
            ("lpush", 3),
            ("lpop", 2),
            ("hset", 4),
            ("zadd", 4),
            ("blpop", 4),
        ] {
            assert!(
                !may_write_several(name, argc),
                "{name} with {argc} arguments"
            );
        }
        for (name, argc) in [
            ("mset", 3),
            ("del", 3),
            ("lpush", 4),
            ("lpop", 3),
            ("hset", 6),
            ("zadd", 5),
            ("rename", 3),
            ("sunionstore", 3),
            ("linsert", 5),
            ("lset", 4),
            ("flushdb", 1),
        ] {
            assert!(
                may_write_several(name, argc),
                "{name} with {argc} arguments"
            );
        }
        // Every name in the single-record list is a real write command.
        for name in [
            "set", "getex", "cas", "hsetnx", "bzpopmax", "zincrby", "persist",
        ] {
            assert!(
                lookup(name.as_bytes()).is_some_and(|c| c.is_write()),
                "{name}"
            );
        }
    }
}
