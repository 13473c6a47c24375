//! Write batches: many records, in any shards, that a crash leaves all of or
//! none of.
//!
//! The one idea: **a batch member counts only if its commit record exists.**
//! While a batch is open on a thread, every record that thread appends to a
//! database of the batch's group carries [`FLAG_BATCH`]; ending the batch
//! appends one [`Kind::Commit`] record per database it touched, naming the
//! first and last member sequence number and the member count. Recovery
//! applies a flagged record only if a commit record covers its sequence
//! number; without one (the process died before the commit was appended)
//! every member is ignored, whichever shard files they landed in. Because
//! the commit is appended after every member has reached the OS, a process
//! crash (kill -9) cannot keep the commit and lose a member.
//!
//! Batches of one group run one at a time (the group's lock is held from
//! [`BatchGroup::begin`] to the end), so the flagged records of a database
//! with sequence numbers in `first..=last` are exactly one batch's members:
//! members need no batch id, and a single-key write outside a batch stays
//! one unflagged record, as fast as before. Writes of other threads may
//! interleave with a batch's in the log; they are not flagged and do not
//! belong to it.
//!
//! Writes inside a batch take effect in memory at once (a later read in the
//! same batch sees them; so does any other thread: isolation is the
//! caller's business, the server has its key locks and EXEC gate). There is
//! no rollback: a batch ends by committing, also when its guard is dropped.
//!
//! Compaction keeps the rule true: a flagged record copied into an output
//! loses its flag only once its batch is committed and durable (see
//! `compaction.rs`), and a commit record is dropped only when no file of
//! its database still holds a flagged record at or below its last member.
//! Members of a batch that was never committed (a crash remnant recovery
//! found) are dropped by compaction, tombstones included.

use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::db::Inner;
use crate::format::{CommitKey, Kind, RecordRef};
use crate::options::SyncPolicy;
use crate::{Db, Result};

/// The databases whose writes one batch may cover, and the lock that runs
/// their batches one at a time. A [`Db`] opened without
/// [`crate::Options::batch_group`] has a group of its own.
///
/// A batch that wrote to several databases commits each database's part
/// with a *conditional* commit record carrying a token, and then records
/// the token in the group's [`CommitLog`]: that one write decides every
/// part together, and each database's recovery asks the log (through
/// [`crate::Options::commit_oracle`]) whether the token is there. Without a
/// log, each database's part commits by itself (atomic per database).
#[derive(Debug, Default)]
pub struct BatchGroup {
    lock: Mutex<()>,
    log: Option<Arc<dyn CommitLog>>,
    /// Threads that joined the open batch ([`Db::join_batch`]).
    helpers: Mutex<Helpers>,
    /// Signalled when the last joined thread leaves.
    helpers_left: Condvar,
}

/// The threads that joined a group's open batch.
#[derive(Default)]
struct Helpers {
    /// Whether a batch is open (between its outermost begin and its end).
    open: bool,
    /// Joined threads that have not left yet.
    active: usize,
    /// What the threads that left wrote.
    touched: Vec<Touched>,
}

/// Where a [`BatchGroup`] records the batches that wrote to several of its
/// databases (see there). The embedder keeps it (a small append-only file
/// beside the databases, say) and answers [`crate::Options::commit_oracle`]
/// from it when a database opens.
pub trait CommitLog: Send + Sync + std::fmt::Debug {
    /// Records `token`, durably enough for the databases' sync policy:
    /// from then on, also after a crash, the conditional commits carrying
    /// it count. Called once every part's commit record is in its log. An
    /// error leaves the batch uncommitted (its members vanish on reopen).
    fn commit(&self, token: u64) -> std::io::Result<()>;
}

/// What an open batch wrote to one database.
struct Touched {
    inner: Weak<Inner>,
    /// Address of the database's `Inner`, to find its entry.
    addr: usize,
    first: u64,
    last: u64,
    count: u32,
    /// Shard of the last member: the commit record goes there.
    coord: usize,
    /// Shards written (for `SyncPolicy::Always`), one bit per shard.
    dirty: Vec<u64>,
}

thread_local! {
    /// Address of the group whose batch this thread has open; 0 for none.
    static ACTIVE: Cell<usize> = const { Cell::new(0) };
    /// How many guards of the open batch are alive (batches nest).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// The databases the open batch wrote to.
    static TOUCHED: RefCell<Vec<Touched>> = const { RefCell::new(Vec::new()) };
}

impl BatchGroup {
    /// A new group (give it to [`crate::Options::batch_group`] of each
    /// database that should share batches).
    pub fn new() -> Arc<BatchGroup> {
        Arc::new(BatchGroup::default())
    }

    /// A new group whose batches over several databases commit through
    /// `log` (see [`BatchGroup`]).
    pub fn with_log(log: Arc<dyn CommitLog>) -> Arc<BatchGroup> {
        Arc::new(BatchGroup {
            log: Some(log),
            ..BatchGroup::default()
        })
    }

    /// Waits until no batch of the group is open and keeps new ones out
    /// while the guard lives (compaction deletes its inputs under it).
    /// Gives up after `wait` (`None`).
    pub(crate) fn quiesce(&self, wait: std::time::Duration) -> Option<MutexGuard<'_, ()>> {
        self.lock.try_lock_for(wait)
    }

    fn addr(&self) -> usize {
        self as *const BatchGroup as usize
    }

    /// Whether a batch of this group is open on some thread (its lock is
    /// held from the batch's first member until its commit is decided).
    pub(crate) fn busy(&self) -> bool {
        self.lock.is_locked()
    }

    /// Opens a batch on the calling thread: until the returned guard ends
    /// (by [`Batch::commit`] or by being dropped), every write this thread
    /// makes to a database of this group is a member of it. Waits while
    /// another thread has a batch of this group open. Inside an open batch
    /// of this group, returns a nested guard that joins it (the outermost
    /// guard commits).
    ///
    /// # Panics
    /// If the thread has a batch of another group open.
    pub fn begin(&self) -> Batch<'_> {
        let active = ACTIVE.with(Cell::get);
        if active == self.addr() {
            DEPTH.with(|d| d.set(d.get() + 1));
            return Batch {
                group: self,
                guard: None,
                done: false,
            };
        }
        assert_eq!(active, 0, "a batch of another group is open on this thread");
        let guard = self.lock.lock();
        self.helpers.lock().open = true;
        ACTIVE.with(|a| a.set(self.addr()));
        DEPTH.with(|d| d.set(1));
        Batch {
            group: self,
            guard: Some(guard),
            done: false,
        }
    }
}

/// An open write batch; see [`BatchGroup::begin`] and [`Db::batch`].
#[must_use = "a batch commits when it ends; keep it alive while writing"]
pub struct Batch<'a> {
    group: &'a BatchGroup,
    /// The group's lock (the outermost guard only).
    guard: Option<MutexGuard<'a, ()>>,
    done: bool,
}

impl std::fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("outermost", &self.guard.is_some())
            .finish()
    }
}

impl Batch<'_> {
    /// Ends the batch: appends a commit record to every database it wrote
    /// to (and, under [`SyncPolicy::Always`], fsyncs the shards it wrote).
    /// Once this returns `Ok`, a crash keeps every member; an error means
    /// the engine is poisoned and the batch may be lost as a whole. A nested
    /// guard commits nothing (the outermost one does).
    pub fn commit(mut self) -> Result<()> {
        self.end()
    }

    fn end(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        let depth = DEPTH.with(|d| {
            let n = d.get() - 1;
            d.set(n);
            n
        });
        if depth > 0 {
            return Ok(());
        }
        // Commit records are not members: the thread leaves the batch first.
        ACTIVE.with(|a| a.set(0));
        let mut touched = TOUCHED.with(|t| std::mem::take(&mut *t.borrow_mut()));
        // Threads that joined finish their writes first; theirs are members.
        let joined = {
            let mut h = self.group.helpers.lock();
            while h.active > 0 {
                self.group.helpers_left.wait(&mut h);
            }
            h.open = false;
            std::mem::take(&mut h.touched)
        };
        for j in joined {
            merge_touched(&mut touched, j);
        }
        // Several databases and a log: conditional commits, then the token
        // (the batch's last member: sequence numbers are unique).
        let token = match &self.group.log {
            Some(_) if touched.len() > 1 => touched.iter().map(|t| t.last).max(),
            _ => None,
        };
        let mut first_err = None;
        for t in &touched {
            if let Err(e) = commit_one(t, token) {
                first_err.get_or_insert(e);
            }
        }
        if let (Some(token), Some(log), None) = (token, &self.group.log, &first_err) {
            if let Err(e) = log.commit(token) {
                for t in &touched {
                    if let Some(inner) = t.inner.upgrade() {
                        let err = crate::Error::io(
                            "record in the commit log",
                            inner.dir.clone(),
                            std::io::Error::new(e.kind(), e.to_string()),
                        );
                        first_err.get_or_insert(inner.poison(err));
                    }
                }
            }
        }
        // Members in memory that a restart will not show: no resuming.
        if first_err.is_some() {
            for t in &touched {
                if let Some(inner) = t.inner.upgrade() {
                    inner.batch_lost.store(true, Ordering::Release);
                }
            }
        }
        drop(self.guard.take());
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.end() {
            tracing::error!(error = %e, "committing a write batch failed");
        }
    }
}

/// Writes the commit record of what an ended batch wrote to one database
/// (conditional on `token` when the batch wrote to several).
fn commit_one(t: &Touched, token: Option<u64>) -> Result<()> {
    let Some(inner) = t.inner.upgrade() else {
        // The database was dropped meanwhile: nothing to commit into.
        return Ok(());
    };
    if let Err(e) = inner.check_writable() {
        // The members are in memory and will not be after a restart.
        inner.batch_lost.store(true, Ordering::Release);
        return Err(e);
    }
    let shard = &inner.shards[t.coord];
    let key = CommitKey {
        first: t.first,
        last: t.last,
        count: t.count,
        token,
    }
    .encode();
    {
        let mut w = shard.writer.lock();
        let seq = inner.next_seq();
        let loc = inner
            .append(
                shard,
                &mut w,
                RecordRef {
                    seq,
                    expiry: 0,
                    kind: Kind::Commit,
                    flags: 0,
                    tag: 0,
                    key: &key,
                    field: &[],
                    value: &[],
                },
            )
            .inspect_err(|_| inner.batch_lost.store(true, Ordering::Release))?;
        let mut idx = shard.index.write();
        idx.note_append(loc, Kind::Commit);
        idx.add_live(loc);
    }
    // Compaction may clear the flags of this batch's members from now on.
    inner.open_first.store(u64::MAX, Ordering::SeqCst);
    if inner.opts.sync == SyncPolicy::Always {
        for (i, s) in inner.shards.iter().enumerate() {
            if i == t.coord || t.dirty[i / 64] & (1 << (i % 64)) != 0 {
                inner.sync_shard(s)?;
            }
        }
    }
    Ok(())
}

/// Whether the calling thread has a batch of `inner`'s group open: the
/// record about to be appended is then a member. One thread-local read.
#[inline]
pub(crate) fn in_batch(inner: &Inner) -> bool {
    let active = ACTIVE.with(Cell::get);
    active != 0 && active == inner.group.addr()
}

/// Called before a member with sequence number `seq` is appended to shard
/// `shard` of `inner`: from here on compaction treats sequence numbers from
/// the batch's first member on as uncommitted.
pub(crate) fn before_member(inner: &Inner, seq: u64) {
    inner.open_first.fetch_min(seq, Ordering::SeqCst);
}

impl std::fmt::Debug for Helpers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Helpers")
            .field("open", &self.open)
            .field("active", &self.active)
            .field("databases", &self.touched.len())
            .finish()
    }
}

/// Adds what one thread wrote to a database (`t`) to `all`.
fn merge_touched(all: &mut Vec<Touched>, t: Touched) {
    match all.iter_mut().find(|e| e.addr == t.addr) {
        Some(e) => {
            e.first = e.first.min(t.first);
            e.last = e.last.max(t.last);
            e.count += t.count;
            for (d, x) in e.dirty.iter_mut().zip(&t.dirty) {
                *d |= x;
            }
        }
        None => all.push(t),
    }
}

/// A thread's membership in a batch that another thread opened
/// ([`Db::join_batch`]); leaves it when dropped.
#[must_use = "the thread is in the batch only while the guard lives"]
#[derive(Debug)]
pub struct Joined<'a> {
    group: &'a BatchGroup,
    /// Not `Send`: the membership belongs to the thread that joined.
    _thread: std::marker::PhantomData<*const ()>,
}

impl Drop for Joined<'_> {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.set(0));
        DEPTH.with(|d| d.set(0));
        let mine = TOUCHED.with(|t| std::mem::take(&mut *t.borrow_mut()));
        let mut h = self.group.helpers.lock();
        for t in mine {
            merge_touched(&mut h.touched, t);
        }
        h.active -= 1;
        if h.active == 0 {
            self.group.helpers_left.notify_all();
        }
    }
}

/// Records a member appended to shard `shard` of `inner`.
pub(crate) fn note_member(inner: &Inner, shard: usize, seq: u64) {
    let addr = inner as *const Inner as usize;
    TOUCHED.with(|t| {
        let mut t = t.borrow_mut();
        let e = match t.iter().position(|e| e.addr == addr) {
            Some(i) => &mut t[i],
            None => {
                t.push(Touched {
                    inner: inner.me.clone(),
                    addr,
                    first: seq,
                    last: seq,
                    count: 0,
                    coord: shard,
                    dirty: vec![0; inner.shards.len().div_ceil(64)],
                });
                t.last_mut().unwrap()
            }
        };
        e.first = e.first.min(seq);
        e.last = e.last.max(seq);
        e.count += 1;
        e.coord = shard;
        e.dirty[shard / 64] |= 1 << (shard % 64);
    });
}

/// Commits what the calling thread's open batch wrote to `inner` now (the
/// database is about to close; the rest of the batch commits at its end).
pub(crate) fn commit_early(inner: &Inner) -> Result<()> {
    if !in_batch(inner) {
        return Ok(());
    }
    let addr = inner as *const Inner as usize;
    let mine = TOUCHED.with(|t| {
        let mut t = t.borrow_mut();
        t.iter()
            .position(|e| e.addr == addr)
            .map(|i| t.swap_remove(i))
    });
    match mine {
        Some(t) => commit_one(&t, None),
        None => Ok(()),
    }
}

/// One write of a [`WriteBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOp {
    /// [`Db::put_with_expiry`].
    Put {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
        /// Expiry in ms since the epoch.
        expires_at: Option<u64>,
    },
    /// [`Db::delete`]: the key, a value or a whole map.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
    /// [`Db::put_field_tagged`].
    PutField {
        /// The map's key.
        key: Vec<u8>,
        /// The map's tag, if this write creates it.
        tag: u8,
        /// The field.
        field: Vec<u8>,
        /// Its value.
        value: Vec<u8>,
    },
    /// [`Db::delete_field`].
    DeleteField {
        /// The map's key.
        key: Vec<u8>,
        /// The field.
        field: Vec<u8>,
    },
    /// [`Db::expire`] (0 = [`Db::persist`]).
    Expire {
        /// The key.
        key: Vec<u8>,
        /// Expiry in ms since the epoch; 0 removes it.
        at: u64,
    },
}

/// A list of writes applied by [`Db::write`] as one crash-atomic batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<BatchOp>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds a put of `value` under `key`.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.put_with_expiry(key, value, None)
    }
    /// Adds a put with an expiry.
    pub fn put_with_expiry(&mut self, key: &[u8], value: &[u8], at: Option<u64>) -> &mut Self {
        self.ops.push(BatchOp::Put {
            key: key.into(),
            value: value.into(),
            expires_at: at,
        });
        self
    }
    /// Adds the removal of `key` (a value or a whole map).
    pub fn delete(&mut self, key: &[u8]) -> &mut Self {
        self.ops.push(BatchOp::Delete { key: key.into() });
        self
    }
    /// Adds a field write (the map gets `tag` if this creates it).
    pub fn put_field(&mut self, key: &[u8], tag: u8, field: &[u8], value: &[u8]) -> &mut Self {
        self.ops.push(BatchOp::PutField {
            key: key.into(),
            tag,
            field: field.into(),
            value: value.into(),
        });
        self
    }
    /// Adds a field removal.
    pub fn delete_field(&mut self, key: &[u8], field: &[u8]) -> &mut Self {
        self.ops.push(BatchOp::DeleteField {
            key: key.into(),
            field: field.into(),
        });
        self
    }
    /// Adds an expiry change (0 removes the expiry).
    pub fn expire(&mut self, key: &[u8], at: u64) -> &mut Self {
        self.ops.push(BatchOp::Expire {
            key: key.into(),
            at,
        });
        self
    }
    /// The writes, in order.
    pub fn ops(&self) -> &[BatchOp] {
        &self.ops
    }
    /// Number of writes.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

impl Db {
    /// Opens a write batch on the calling thread (see [`BatchGroup::begin`]):
    /// every write this thread makes to this database (and to the others of
    /// its [`crate::Options::batch_group`]) until the guard ends is one
    /// crash-atomic unit.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = basalt_engine::Db::open(dir.path(), Default::default()).unwrap();
    /// let b = db.batch();
    /// db.put(b"from", b"")?;
    /// db.put(b"to", b"100")?;
    /// b.commit()?; // after a crash: both or neither
    /// # Ok::<(), basalt_engine::Error>(())
    /// ```
    pub fn batch(&self) -> Batch<'_> {
        self.inner.group.begin()
    }

    /// Makes the calling thread's writes to the databases of this one's
    /// group members of the batch another thread has open, until the guard
    /// drops: for spreading one batch's independent writes over threads.
    /// The batch's end waits for every joined thread to leave, and commits
    /// their writes with its own. `None` if no batch of the group is open
    /// (the writes are then plain ones), or if this thread has a batch of
    /// its own open (it is a member already, or of another group).
    ///
    /// The caller keeps each key's writes on one thread, as the batch
    /// itself does not order threads' writes.
    pub fn join_batch(&self) -> Option<Joined<'_>> {
        let group = &*self.inner.group;
        if ACTIVE.with(Cell::get) != 0 {
            return None;
        }
        {
            let mut h = group.helpers.lock();
            if !h.open {
                return None;
            }
            h.active += 1;
        }
        ACTIVE.with(|a| a.set(group.addr()));
        DEPTH.with(|d| d.set(1));
        Some(Joined {
            group,
            _thread: std::marker::PhantomData,
        })
    }

    /// Applies `batch` in order as one crash-atomic unit. Each write checks
    /// its sizes before anything is written; an error (a key holding the
    /// wrong kind for a field write) stops the batch there, and what was
    /// already applied is committed, as in Redis's EXEC. Readers on other
    /// threads may see a prefix while it runs.
    pub fn write(&self, batch: &WriteBatch) -> Result<()> {
        for op in &batch.ops {
            let (key, field, len) = match op {
                BatchOp::Put { key, value, .. } => (key, &[][..], value.len()),
                BatchOp::PutField {
                    key, field, value, ..
                } => (key, &field[..], value.len()),
                BatchOp::Delete { key } | BatchOp::Expire { key, .. } => (key, &[][..], 0),
                BatchOp::DeleteField { key, field } => (key, &field[..], 0),
            };
            crate::format::check_sizes(key, field, len)?;
        }
        let b = self.batch();
        let mut result = Ok(());
        for op in &batch.ops {
            let r = match op {
                BatchOp::Put {
                    key,
                    value,
                    expires_at,
                } => self.put_with_expiry(key, value, *expires_at).map(drop),
                BatchOp::Delete { key } => self.delete(key).map(drop),
                BatchOp::PutField {
                    key,
                    tag,
                    field,
                    value,
                } => self.put_field_tagged(key, *tag, field, value).map(drop),
                BatchOp::DeleteField { key, field } => self.delete_field(key, field).map(drop),
                BatchOp::Expire { key, at } if *at == 0 => self.persist(key).map(drop),
                BatchOp::Expire { key, at } => self.expire(key, *at).map(drop),
            };
            if let Err(e) = r {
                result = Err(e);
                break;
            }
        }
        let committed = b.commit();
        result.and(committed)
    }
}
