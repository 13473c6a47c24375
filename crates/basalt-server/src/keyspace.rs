//! The keyspace: Redis's numbered databases, each its own engine [`Db`], plus
//! the striped key locks that make read-modify-write commands atomic.
//!
//! The one idea a reader needs: **the engine is thread-safe per operation,
//! the server adds atomicity per command.** A write command first takes the
//! stripe lock(s) of its key(s) (hash of db and key into [`STRIPES`]
//! mutexes, taken in sorted order so multi-key commands cannot deadlock),
//! then reads, computes and writes. Plain reads take no stripe.
//!
//! Database `n` lives in `<dir>/<name>` where `name` is `n` unless a SWAPDB
//! recorded otherwise in `<dir>/DBMAP` (written atomically: temp file, fsync,
//! rename). A database is opened at start-up if its directory exists (db 0
//! always), otherwise on its first write. FLUSHDB renames the directory to a
//! `*.trash` name (atomic), deletes it and starts empty, so a crash halfway
//! never brings part of the data back; left-over trash is removed at start-up.
//!
//! Expiry events: each engine is opened with an expiry listener that calls
//! the server's hook with the database *number* the engine currently
//! serves. The number lives in an `Arc<AtomicUsize>` that travels with the
//! engine inside its [`Slot`]; SWAPDB rewrites it for both slots, so an
//! expiry after a swap is reported under the new number.
//!
//! Every database draws its sequence numbers (the keys' versions, VERSION,
//! CAS and WATCH) from one shared counter, so versions only grow across
//! FLUSHDB, SWAPDB and DEBUG RELOAD. Its floor is also recorded in DBMAP
//! (`seq <n>`) when a database is flushed, so a restart after FLUSHDB of a
//! database whose directory is gone does not hand out old numbers again.
//!
//! Lock order: the exec gate (`crate::tx`), then the write batch
//! ([`Keyspace::batch`], for commands that write several records), then
//! slot locks (ascending db index), then stripe locks (ascending stripe). Slot write locks (SWAPDB, FLUSHDB, DEBUG RELOAD) are never held
//! while taking a stripe.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use basalt_engine::{Batch, BatchGroup, Db, KeyKind, KeyMeta, Options, SyncPolicy};
use parking_lot::{Mutex, MutexGuard, RwLock};

use crate::brlock::{BrLock, MappedReadGuard, ReadGuard, WriteGuard};

/// Read access to a database's [`Slot`] ([`Keyspace::read`]).
pub type SlotRead<'a> = ReadGuard<'a, Slot>;

/// A database's engine, its slot read-locked ([`Keyspace::write`]).
pub type DbRead<'a> = MappedReadGuard<'a, Db>;

/// Default largest data file of a server database's shards (the
/// `data-file-size` setting). Smaller than the
/// engine's 128 MiB default because only sealed files are compacted: with 8
/// shards, a server under overwrites held 8 x 128 MiB of mostly dead
/// records in its active files (1 GiB of disk for 250 MB of data after 13 M
/// SETs over 1 M keys). At 32 MiB the garbage that waits for a seal is at
/// most 256 MiB per database.
pub const DATA_FILE_SIZE: u64 = 32 << 20;

/// Number of key-stripe mutexes.
pub const STRIPES: usize = 1024;

/// Engine map tag of a Redis hash.
pub const TAG_HASH: u8 = 1;
/// Engine map tag of a Redis set.
pub const TAG_SET: u8 = 2;
/// Engine map tag of a Redis sorted set.
pub const TAG_ZSET: u8 = 3;
/// Engine map tag of a Redis list.
pub const TAG_LIST: u8 = 4;
/// Engine map tag of a stream (`commands::stream`).
pub const TAG_STREAM: u8 = 5;

/// The Redis type of a key, from its engine metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisType {
    /// A plain engine value.
    String,
    /// Map tagged [`TAG_HASH`].
    Hash,
    /// Map tagged [`TAG_SET`].
    Set,
    /// Map tagged [`TAG_ZSET`].
    ZSet,
    /// Map tagged [`TAG_LIST`].
    List,
    /// Map tagged [`TAG_STREAM`].
    Stream,
    /// A map with a tag this server does not know.
    Unknown,
}

impl RedisType {
    /// The type of a key from its metadata.
    pub fn of(meta: &KeyMeta) -> RedisType {
        match meta.kind {
            KeyKind::Value { .. } => RedisType::String,
            KeyKind::Map { tag, .. } => match tag {
                TAG_HASH => RedisType::Hash,
                TAG_SET => RedisType::Set,
                TAG_ZSET => RedisType::ZSet,
                TAG_LIST => RedisType::List,
                TAG_STREAM => RedisType::Stream,
                _ => RedisType::Unknown,
            },
        }
    }

    /// The name TYPE replies with.
    pub fn name(self) -> &'static str {
        match self {
            RedisType::String => "string",
            RedisType::Hash => "hash",
            RedisType::Set => "set",
            RedisType::ZSet => "zset",
            RedisType::List => "list",
            RedisType::Stream => "stream",
            RedisType::Unknown => "none",
        }
    }

    /// Parses a TYPE name (SCAN ... TYPE), case-insensitive.
    pub fn parse(name: &[u8]) -> Option<RedisType> {
        Some(match name.to_ascii_lowercase().as_slice() {
            b"string" => RedisType::String,
            b"hash" => RedisType::Hash,
            b"set" => RedisType::Set,
            b"zset" => RedisType::ZSet,
            b"list" => RedisType::List,
            b"stream" => RedisType::Stream,
            _ => return None,
        })
    }
}

/// Called with (database number, key) each time an engine removes an
/// expired key (the active sweep, or a write that finds the key expired).
pub type ExpiredHook = Arc<dyn Fn(usize, &[u8]) + Send + Sync>;

struct Hook(Option<ExpiredHook>);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Hook(set)"
        } else {
            "Hook(none)"
        })
    }
}

/// One numbered database: its engine (if opened) and its directory name.
#[derive(Debug)]
pub struct Slot {
    db: Option<Db>,
    name: String,
    generation: u64,
    /// The database number this engine serves now (its expiry listener
    /// reads it; SWAPDB updates it).
    number: Arc<AtomicUsize>,
}

/// Source of [`Slot::generation`] values, unique for the process's life.
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

impl Slot {
    /// The engine, if this database has been opened.
    pub fn db(&self) -> Option<&Db> {
        self.db.as_ref()
    }

    /// Identifies the engine instance this slot holds: it changes whenever
    /// the slot gets a different engine (first open, FLUSHDB, DEBUG RELOAD)
    /// and travels with the engine through SWAPDB. Engine versions are only
    /// unique within one engine, so an in-memory cache of a key's contents
    /// is valid for (generation, key, version).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn set_db(&mut self, db: Db) {
        self.db = Some(db);
        self.generation = GENERATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Figures for INFO's keyspace section.
#[derive(Debug, Clone, Copy, Default)]
pub struct DbFigures {
    /// Keys (including expired ones the sweep has not removed).
    pub keys: u64,
    /// Keys with an expiry.
    pub expires: u64,
    /// Bytes of index RAM.
    pub index_bytes: u64,
}

/// One key stripe: the lock, and which connection worker took it last, so
/// a worker that has to wait for it can tell whom it waited for (a hot key
/// then gets one owner thread, see `crate::workers`).
#[derive(Debug, Default)]
struct Stripe {
    lock: Mutex<()>,
    holder: AtomicU8,
}

impl Stripe {
    #[inline]
    fn take(&self) -> MutexGuard<'_, ()> {
        let guard = match self.lock.try_lock() {
            Some(g) => g,
            None => {
                crate::workers::note_contention(self.holder.load(Ordering::Relaxed));
                self.lock.lock()
            }
        };
        self.holder
            .store(crate::workers::current(), Ordering::Relaxed);
        guard
    }
}

/// All databases and the key stripes.
#[derive(Debug)]
pub struct Keyspace {
    root: PathBuf,
    slots: Box<[BrLock<Slot>]>,
    stripes: Box<[Stripe]>,
    sync: SyncPolicy,
    /// Largest data file of each shard (`data-file-size`).
    file_size: u64,
    /// Serializes writes of DBMAP; mirrors each slot's directory name.
    names: Mutex<Vec<String>>,
    trash_seq: AtomicU64,
    /// Set by [`Keyspace::close`]: no database opens again.
    closed: AtomicBool,
    on_expired: Hook,
    /// The sequence counter every database shares (engine `Options::sequence`).
    seq: Arc<AtomicU64>,
    /// The write-batch group every database shares (engine
    /// `Options::batch_group`): one batch covers a command's writes to
    /// any of them.
    group: Arc<BatchGroup>,
    /// `<dir>/BATCHES`: the group's commit log, which decides the batches
    /// that wrote to several databases (MOVE, COPY ... DB, EXEC after
    /// SELECT) as one unit.
    log: Arc<BatchLog>,
    /// A node of a replicated group: no active expiry sweep in any engine.
    replicated: bool,
    /// The Raft state machine's marker database, in the same batch group.
    raft_db: Option<Arc<Db>>,
    /// The residency mode the server last chose for every database
    /// (`Shared::apply_residency`), given to one as it opens, so a database
    /// reopened by FLUSHALL or opened by its first write checks as the
    /// others do from the start, not from the next second.
    residency: parking_lot::Mutex<basalt_engine::Residency>,
    /// `residency` is not `InPlace` ([`Keyspace::reads_may_be_cold`]).
    reads_may_be_cold: AtomicBool,
}

/// Magic and version at the start of `BATCHES`.
const BATCH_LOG_MAGIC: &[u8; 8] = b"BSLTBLOG";
const BATCH_LOG_VERSION: u32 = 1;
const BATCH_LOG_HEADER: usize = 12;
/// An entry: the token (u64 LE) and the CRC32C of those 8 bytes (u32 LE).
const BATCH_LOG_ENTRY: usize = 12;

/// The commit log of the batches that wrote to several databases (see
/// `basalt_engine::BatchGroup`): a token is appended once every database's
/// conditional commit is in its own log, and a database's recovery counts
/// a conditional commit only if its token is here. Appends reach the page
/// cache at once (kill -9 keeps them) and are fsynced with the databases
/// (every second, or per batch under `appendfsync always`). A torn last
/// entry is cut at open. At start-up the log is rewritten with only the
/// tokens some database still holds a commit record for.
#[derive(Debug)]
pub struct BatchLog {
    path: PathBuf,
    file: Mutex<std::fs::File>,
    tokens: RwLock<std::collections::HashSet<u64>>,
    dirty: AtomicBool,
}

impl BatchLog {
    fn entry(token: u64) -> [u8; BATCH_LOG_ENTRY] {
        let mut e = [0u8; BATCH_LOG_ENTRY];
        e[..8].copy_from_slice(&token.to_le_bytes());
        let crc = basalt_engine::crc32c(&e[..8]);
        e[8..].copy_from_slice(&crc.to_le_bytes());
        e
    }

    fn header() -> Vec<u8> {
        let mut h = BATCH_LOG_MAGIC.to_vec();
        h.extend_from_slice(&BATCH_LOG_VERSION.to_le_bytes());
        h
    }

    /// Opens `<root>/BATCHES` (creating it), reading its tokens and cutting
    /// a torn or damaged tail.
    fn open(root: &Path) -> KsResult<BatchLog> {
        let path = root.join("BATCHES");
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_err("read", &path, e)),
        };
        let mut tokens = std::collections::HashSet::new();
        let mut good = 0;
        if bytes.len() >= BATCH_LOG_HEADER {
            if bytes[..BATCH_LOG_HEADER] != Self::header()[..] {
                return Err(basalt_engine::Error::Corrupt {
                    path,
                    offset: 0,
                    reason: "not a Basalt batch log (or an unknown version)".into(),
                });
            }
            good = BATCH_LOG_HEADER;
            for e in bytes[BATCH_LOG_HEADER..].chunks_exact(BATCH_LOG_ENTRY) {
                let token = u64::from_le_bytes(e[..8].try_into().expect("8 bytes"));
                if e != Self::entry(token) {
                    break;
                }
                tokens.insert(token);
                good += BATCH_LOG_ENTRY;
            }
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| io_err("open", &path, e))?;
        if good < bytes.len() || bytes.len() < BATCH_LOG_HEADER {
            if good < bytes.len() {
                tracing::warn!(file = %path.display(), offset = good, "cutting a torn batch log entry");
            }
            let fix = |f: &std::fs::File| -> std::io::Result<()> {
                f.set_len(good as u64)?;
                if good == 0 {
                    use std::io::Write as _;
                    (&*f).write_all(&Self::header())?;
                }
                f.sync_all()
            };
            fix(&file).map_err(|e| io_err("write", &path, e))?;
        }
        Ok(BatchLog {
            path,
            file: Mutex::new(file),
            tokens: RwLock::new(tokens),
            dirty: AtomicBool::new(false),
        })
    }

    fn contains(&self, token: u64) -> bool {
        self.tokens.read().contains(&token)
    }

    /// fsyncs what was appended since the last call.
    pub fn sync(&self) -> KsResult<()> {
        if self.dirty.swap(false, Ordering::AcqRel) {
            self.file
                .lock()
                .sync_data()
                .map_err(|e| io_err("fsync", &self.path, e))?;
        }
        Ok(())
    }

    /// Rewrites the log with only `keep` (temp file, fsync, rename).
    fn rewrite(&self, root: &Path, keep: std::collections::HashSet<u64>) -> KsResult<()> {
        let tmp = self.path.with_extension("tmp");
        let mut b = Self::header();
        for &t in &keep {
            b.extend_from_slice(&Self::entry(t));
        }
        std::fs::write(&tmp, &b)
            .and_then(|_| std::fs::File::open(&tmp)?.sync_all())
            .map_err(|e| io_err("write", &tmp, e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| io_err("rename", &self.path, e))?;
        sync_dir(root)?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(|e| io_err("open", &self.path, e))?;
        *self.file.lock() = file;
        *self.tokens.write() = keep;
        Ok(())
    }
}

impl basalt_engine::CommitLog for BatchLog {
    fn commit(&self, token: u64) -> std::io::Result<()> {
        self.file.lock().write_all(&Self::entry(token))?;
        self.tokens.write().insert(token);
        self.dirty.store(true, Ordering::Release);
        Ok(())
    }
}

/// Errors of the keyspace layer (opening, flushing, swapping databases).
pub type KsResult<T> = Result<T, basalt_engine::Error>;

fn io_err(op: &'static str, path: &Path, e: std::io::Error) -> basalt_engine::Error {
    basalt_engine::Error::Io {
        op,
        path: path.to_path_buf(),
        source: e,
    }
}

impl Keyspace {
    /// Opens `databases` databases under `root`: reads DBMAP, removes trash
    /// left by an interrupted FLUSHDB, opens db 0 and every database whose
    /// directory exists.
    pub fn open(
        root: &Path,
        databases: usize,
        sync: SyncPolicy,
        file_size: u64,
        on_expired: Option<ExpiredHook>,
    ) -> KsResult<Keyspace> {
        Self::open_replicated(root, databases, sync, file_size, on_expired, None)
    }

    /// [`Keyspace::open`] for a node of a replicated group: also opens the
    /// Raft state machine's marker database at `raft_state` in the same
    /// batch group (its batches' tokens are kept in `BATCHES` like every
    /// database's), and turns the engines' active expiry sweep off: only
    /// the leader expires keys, through the Raft log (`crate::repl`).
    pub fn open_replicated(
        root: &Path,
        databases: usize,
        sync: SyncPolicy,
        file_size: u64,
        on_expired: Option<ExpiredHook>,
        raft_state: Option<&Path>,
    ) -> KsResult<Keyspace> {
        let replicated = raft_state.is_some();
        let on_expired = Hook(on_expired);
        std::fs::create_dir_all(root).map_err(|e| io_err("create directory", root, e))?;
        let mut names: Vec<String> = (0..databases).map(|n| n.to_string()).collect();
        let seq = Arc::new(AtomicU64::new(1));
        let log = Arc::new(BatchLog::open(root)?);
        let group = BatchGroup::with_log(log.clone());
        let map_path = root.join("DBMAP");
        match std::fs::read_to_string(&map_path) {
            Ok(text) => {
                for line in text.lines() {
                    let mut it = line.split_whitespace();
                    let (first, second) = (it.next(), it.next());
                    if let (Some("seq"), Some(n)) = (first, second) {
                        // The version floor recorded at the last FLUSHDB.
                        seq.fetch_max(n.parse().unwrap_or(1), Ordering::SeqCst);
                        continue;
                    }
                    if let (Some(slot), Some(name)) = (first, second) {
                        if let Ok(slot) = slot.parse::<usize>() {
                            if slot < databases {
                                names[slot] = name.to_string();
                            }
                        }
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("read", &map_path, e)),
        }
        if let Ok(entries) = std::fs::read_dir(root) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                if name.to_string_lossy().ends_with(".trash") {
                    let path = entry.path();
                    std::fs::remove_dir_all(&path).map_err(|e| io_err("remove", &path, e))?;
                }
            }
        }
        let mut slots = Vec::with_capacity(databases);
        for (n, name) in names.iter().enumerate() {
            let dir = root.join(name);
            let number = Arc::new(AtomicUsize::new(n));
            let db = if n == 0 || dir.is_dir() {
                Some(Db::open(
                    &dir,
                    Self::options(sync, file_size, (&seq, &group, &log), &on_expired, &number)
                        .active_expiry(!replicated),
                )?)
            } else {
                None
            };
            slots.push(BrLock::new(Slot {
                db,
                name: name.clone(),
                generation: GENERATIONS.fetch_add(1, Ordering::Relaxed),
                number,
            }));
        }
        let raft_db = match raft_state {
            Some(path) => {
                let no_hook = Hook(None);
                let number = Arc::new(AtomicUsize::new(usize::MAX));
                let opts = Self::options(sync, file_size, (&seq, &group, &log), &no_hook, &number)
                    .active_expiry(false);
                Some(Arc::new(Db::open(path, opts)?))
            }
            None => None,
        };
        // Keep only the tokens a database still holds a commit for (every
        // database with a directory is open now; the others hold nothing).
        let referenced: std::collections::HashSet<u64> = slots
            .iter()
            .filter_map(|s| s.read().db().map(|db| db.commit_tokens().to_vec()))
            .flatten()
            .chain(raft_db.iter().flat_map(|db| db.commit_tokens().to_vec()))
            .collect();
        if *log.tokens.read() != referenced {
            log.rewrite(root, referenced)?;
        }
        Ok(Keyspace {
            root: root.to_path_buf(),
            slots: slots.into_boxed_slice(),
            stripes: (0..STRIPES).map(|_| Stripe::default()).collect(),
            sync,
            file_size,
            names: Mutex::new(names),
            trash_seq: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            on_expired,
            seq,
            group,
            log,
            replicated,
            raft_db,
            residency: parking_lot::Mutex::new(basalt_engine::Residency::InPlace),
            reads_may_be_cold: AtomicBool::new(false),
        })
    }

    /// Sets the residency mode databases get as they open (see the field).
    pub fn set_residency(&self, mode: basalt_engine::Residency) {
        *self.residency.lock() = mode;
        self.reads_may_be_cold
            .store(mode != basalt_engine::Residency::InPlace, Ordering::Relaxed);
    }

    /// Whether the databases check residency (their reads may be cold):
    /// one load, for the paths that fetch reads ahead to skip the
    /// database lookup when nothing can be cold.
    pub fn reads_may_be_cold(&self) -> bool {
        self.reads_may_be_cold.load(Ordering::Relaxed)
    }

    /// The Raft state machine's marker database (replicated nodes only).
    pub fn raft_db(&self) -> Option<&Arc<Db>> {
        self.raft_db.as_ref()
    }

    /// Raises the shared sequence counter to at least `floor`. A replicated
    /// node raises it to the log index times 2^20 before each entry, so the
    /// versions an entry's writes get are the same on every node
    /// (`crate::repl`).
    pub fn raise_seq(&self, floor: u64) {
        self.seq.fetch_max(floor, Ordering::SeqCst);
    }

    /// The shared sequence counter: the number the next write outside a
    /// `basalt_engine::SequenceLane` takes.
    pub fn seq(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    fn options(
        sync: SyncPolicy,
        file_size: u64,
        (seq, group, log): (&Arc<AtomicU64>, &Arc<BatchGroup>, &Arc<BatchLog>),
        hook: &Hook,
        number: &Arc<AtomicUsize>,
    ) -> Options {
        let opts = Options::default()
            .clock(Arc::new(crate::clock::CommandClock))
            .sync(sync)
            .sequence(seq.clone())
            .batch_group(group.clone())
            .commit_oracle({
                let log = log.clone();
                Arc::new(move |t| log.contains(t))
            })
            .max_file_size(file_size);
        match &hook.0 {
            Some(f) => {
                let (f, number) = (f.clone(), number.clone());
                opts.expiry_listener(Arc::new(move |key: &[u8]| {
                    f(number.load(Ordering::Relaxed), key)
                }))
            }
            None => opts,
        }
    }

    fn open_slot(&self, slot: &mut Slot) -> KsResult<()> {
        let dir = self.root.join(&slot.name);
        let opts = Self::options(
            self.sync,
            self.file_size,
            (&self.seq, &self.group, &self.log),
            &self.on_expired,
            &slot.number,
        )
        .active_expiry(!self.replicated);
        let db = Db::open(&dir, opts)?;
        db.set_residency(*self.residency.lock());
        slot.set_db(db);
        Ok(())
    }

    /// Opens a crash-atomic write batch on the calling thread: every
    /// engine write it makes, to any database, until the guard ends is
    /// one unit after a crash (see `basalt_engine::Batch`). Batches run one
    /// at a time; take it before any slot or stripe lock (lock order:
    /// exec gate, batch, slots, stripes).
    pub fn batch(&self) -> Batch<'_> {
        self.group.begin()
    }

    /// Why writes are refused, if a database's engine refuses them (a
    /// write failed: typically a full disk). `None` when all is well.
    pub fn write_error(&self) -> Option<String> {
        self.slots
            .iter()
            .find_map(|s| s.read().db().and_then(|db| db.write_error()))
    }

    /// Lets every database that refuses writes after a failed write take
    /// them again, if that is safe (`basalt_engine::Db::resume_writes`):
    /// called every second while [`Keyspace::write_error`] says something,
    /// so writes resume by themselves once the disk has space again.
    pub fn resume_writes(&self) {
        for (n, slot) in self.slots.iter().enumerate() {
            let slot = slot.read();
            let Some(db) = slot.db().filter(|db| db.write_error().is_some()) else {
                continue;
            };
            match db.resume_writes() {
                Ok(true) => tracing::warn!(db = n, "database takes writes again"),
                Ok(false) => {}
                Err(e) => tracing::debug!(db = n, error = %e, "writes stay refused"),
            }
        }
    }

    /// Number of databases.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Always false: there is at least one database.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The data directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Read access to database `n` (its engine may be unopened: empty).
    pub fn read(&self, n: usize) -> SlotRead<'_> {
        self.slots[n].read()
    }

    /// [`Keyspace::read`] unless that would wait (SWAPDB, FLUSHDB or a
    /// first open holds or awaits the slot): then `None`.
    pub fn try_read(&self, n: usize) -> Option<SlotRead<'_>> {
        self.slots[n].try_read()
    }

    /// Database `n`'s engine, opening it if this is its first write.
    pub fn write(&self, n: usize) -> KsResult<DbRead<'_>> {
        let slot = self.slots[n].read();
        if slot.db.is_some() {
            return Ok(ReadGuard::map(slot, |s| s.db.as_ref().expect("checked")));
        }
        drop(slot);
        let mut slot = self.slots[n].write();
        if self.closed.load(Ordering::SeqCst) {
            return Err(basalt_engine::Error::Poisoned(
                "the server is shutting down".into(),
            ));
        }
        if slot.db.is_none() {
            self.open_slot(&mut slot)?;
        }
        let slot = WriteGuard::downgrade(slot);
        Ok(ReadGuard::map(slot, |s| {
            s.db.as_ref().expect("just opened")
        }))
    }

    fn stripe_of(db: usize, key: &[u8]) -> usize {
        let h = basalt_engine::crc32c_append(db as u32, key);
        (h.wrapping_mul(0x9E37_79B1) >> 22) as usize % STRIPES
    }

    /// Locks the stripe of one key.
    pub fn lock(&self, db: usize, key: &[u8]) -> MutexGuard<'_, ()> {
        self.stripes[Self::stripe_of(db, key)].take()
    }

    /// Locks the stripes of several (db, key) pairs, in sorted order without
    /// duplicates.
    pub fn lock_many<'k>(
        &self,
        keys: impl IntoIterator<Item = (usize, &'k [u8])>,
    ) -> Vec<MutexGuard<'_, ()>> {
        let mut idx: Vec<usize> = keys
            .into_iter()
            .map(|(db, k)| Self::stripe_of(db, k))
            .collect();
        idx.sort_unstable();
        idx.dedup();
        idx.into_iter().map(|i| self.stripes[i].take()).collect()
    }

    /// Key count and figures of database `n` (zeros if unopened).
    pub fn figures(&self, n: usize) -> DbFigures {
        let slot = self.read(n);
        match slot.db() {
            Some(db) => {
                let st = db.stats();
                DbFigures {
                    keys: st.keys,
                    expires: st.keys_with_expiry,
                    index_bytes: st.index_bytes,
                }
            }
            None => DbFigures::default(),
        }
    }

    /// A fresh `*.trash` name for database directory `name` (removed at
    /// start-up if a crash left it).
    fn trash_path(&self, name: &str) -> PathBuf {
        self.root.join(format!(
            "{name}.{}.{}.trash",
            std::process::id(),
            self.trash_seq.fetch_add(1, Ordering::Relaxed)
        ))
    }

    /// Removes every key of database `n`: its directory is renamed away
    /// (atomic), deleted, and the database starts empty.
    pub fn flush_db(&self, n: usize) -> KsResult<()> {
        let mut slot = self.slots[n].write();
        let Some(db) = slot.db.take() else {
            return Ok(());
        };
        db.close()?;
        // Record how far versions went before the records carrying them go.
        self.write_map(&self.names.lock())?;
        let dir = self.root.join(&slot.name);
        let trash = self.trash_path(&slot.name);
        std::fs::rename(&dir, &trash).map_err(|e| io_err("rename", &dir, e))?;
        sync_dir(&self.root)?;
        std::fs::remove_dir_all(&trash).map_err(|e| io_err("remove", &trash, e))?;
        if n == 0 {
            self.open_slot(&mut slot)?;
        }
        Ok(())
    }

    /// Hard-links every open database into `dir/db<n>` (see
    /// `basalt_engine::Db::checkpoint`) and writes `dir/databases` (their
    /// numbers) and `dir/tokens` (the batch log's tokens, on which their
    /// conditional commits depend). Returns the files, relative to `dir`.
    /// `exclude` keeps writers out (the caller's exec gate, taken first:
    /// lock order gate, then slots) while the files are linked; compaction
    /// deletes nothing meanwhile (`basalt_engine::Db::checkpoint`).
    pub fn checkpoint<G>(
        &self,
        dir: &Path,
        exclude: impl FnOnce() -> G,
    ) -> KsResult<Vec<basalt_engine::CheckpointFile>> {
        std::fs::create_dir_all(dir).map_err(|e| io_err("create directory", dir, e))?;
        let _excluded = exclude();
        let mut files = Vec::new();
        let mut numbers = String::new();
        for (n, slot) in self.slots.iter().enumerate() {
            let slot = slot.read();
            let Some(db) = slot.db() else { continue };
            let name = format!("db{n}");
            for mut f in db.checkpoint(&dir.join(&name))? {
                f.path = Path::new(&name).join(&f.path);
                files.push(f);
            }
            numbers.push_str(&format!("{n}\n"));
        }
        let mut tokens: Vec<u64> = self.log.tokens.read().iter().copied().collect();
        drop(_excluded);
        tokens.sort_unstable();
        let tokens: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        for (name, bytes) in [("databases", numbers.as_bytes()), ("tokens", &tokens[..])] {
            let path = dir.join(name);
            std::fs::write(&path, bytes).map_err(|e| io_err("write", &path, e))?;
            files.push(basalt_engine::CheckpointFile {
                path: name.into(),
                len: bytes.len() as u64,
            });
        }
        Ok(files)
    }

    /// Replaces every database with the one of a checkpoint in `dir` (see
    /// [`Keyspace::checkpoint`]; a database the checkpoint lacks becomes
    /// empty): adds the checkpoint's tokens to the batch log (fsynced),
    /// then for each database closes it, renames its directory away,
    /// renames the checkpoint's into its place and opens it. Idempotent:
    /// a database whose directory was already moved in is left as it is,
    /// so an install interrupted by a crash can run again. The caller
    /// holds the exec gate.
    pub fn install(&self, dir: &Path) -> KsResult<()> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read(&path).map_err(|e| io_err("read", &path, e))
        };
        let numbers = read("databases")?;
        let have: Vec<usize> = String::from_utf8_lossy(&numbers)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        let tokens = read("tokens")?;
        {
            use basalt_engine::CommitLog as _;
            for t in tokens.chunks_exact(8) {
                let t = u64::from_le_bytes(t.try_into().expect("8 bytes"));
                if !self.log.contains(t) {
                    self.log
                        .commit(t)
                        .map_err(|e| io_err("write", &self.log.path, e))?;
                }
            }
            self.log.sync()?;
        }
        for (n, slot) in self.slots.iter().enumerate() {
            let mut slot = slot.write();
            let staged = dir.join(format!("db{n}"));
            if have.contains(&n) && !staged.exists() {
                // Moved in by an earlier, interrupted run.
                if slot.db.is_none() {
                    self.open_slot(&mut slot)?;
                }
                continue;
            }
            if let Some(db) = slot.db.take() {
                db.close()?;
            }
            let target = self.root.join(&slot.name);
            let trash = self.trash_path(&slot.name);
            if target.exists() {
                std::fs::rename(&target, &trash).map_err(|e| io_err("rename", &target, e))?;
            }
            if have.contains(&n) {
                std::fs::rename(&staged, &target).map_err(|e| io_err("rename", &staged, e))?;
            }
            sync_dir(&self.root)?;
            if trash.exists() {
                std::fs::remove_dir_all(&trash).map_err(|e| io_err("remove", &trash, e))?;
            }
            if have.contains(&n) || n == 0 {
                self.open_slot(&mut slot)?;
            }
        }
        Ok(())
    }

    /// Swaps databases `a` and `b` (SWAPDB), recording the new directory
    /// names in DBMAP before the swap becomes visible.
    pub fn swap(&self, a: usize, b: usize) -> KsResult<()> {
        if a == b {
            return Ok(());
        }
        let (lo, hi) = (a.min(b), a.max(b));
        let mut g_lo = self.slots[lo].write();
        let mut g_hi = self.slots[hi].write();
        let mut names = self.names.lock();
        names.swap(lo, hi);
        if let Err(e) = self.write_map(&names) {
            names.swap(lo, hi);
            return Err(e);
        }
        std::mem::swap(&mut *g_lo, &mut *g_hi);
        g_lo.number.store(lo, Ordering::Relaxed);
        g_hi.number.store(hi, Ordering::Relaxed);
        Ok(())
    }

    fn write_map(&self, names: &[String]) -> KsResult<()> {
        let mut text = String::new();
        for (i, name) in names.iter().enumerate() {
            text.push_str(&format!("{i} {name}\n"));
        }
        text.push_str(&format!("seq {}\n", self.seq.load(Ordering::SeqCst)));
        let tmp = self.root.join("DBMAP.tmp");
        let path = self.root.join("DBMAP");
        let mut f = std::fs::File::create(&tmp).map_err(|e| io_err("create", &tmp, e))?;
        f.write_all(text.as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(|e| io_err("write", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io_err("rename", &tmp, e))?;
        sync_dir(&self.root)
    }

    /// fsyncs every open database (and writes pending hint files).
    pub fn sync_all(&self) -> KsResult<()> {
        for slot in self.slots.iter() {
            if let Some(db) = slot.read().db() {
                db.flush()?;
                db.sync()?;
            }
        }
        Ok(())
    }

    /// Closes and reopens every open database (DEBUG RELOAD).
    pub fn reload(&self) -> KsResult<()> {
        for slot in self.slots.iter() {
            let mut slot = slot.write();
            if let Some(db) = slot.db.take() {
                db.close()?;
                self.open_slot(&mut slot)?;
            }
        }
        Ok(())
    }

    /// fsyncs the batch log if it has new entries (with the databases'
    /// own fsyncs: every second, or per batch under `appendfsync always`).
    pub fn sync_batch_log(&self) -> KsResult<()> {
        self.log.sync()
    }

    /// Closes every database, releasing the directory locks. Later reads
    /// see empty databases and writes fail; call this once nothing runs.
    pub fn close(&self) -> KsResult<()> {
        self.closed.store(true, Ordering::SeqCst);
        let mut first = self.log.sync().err();
        for slot in self.slots.iter() {
            if let Some(db) = slot.write().db.take() {
                if let Err(e) = db.close() {
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}

fn sync_dir(dir: &Path) -> KsResult<()> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_err("fsync directory", dir, e))
}
