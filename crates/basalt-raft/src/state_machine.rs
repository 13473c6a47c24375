//! The replicated state machine: committed entries applied through an
//! [`Applier`], each `apply` call as one crash-atomic engine write batch.
//!
//! The state machine keeps its own small engine database (`<dir>/state`)
//! holding one record, `applied`: the log id of the last applied entry and
//! the last applied membership. Every `apply` opens a write batch of that
//! database's [`BatchGroup`](basalt_engine::BatchGroup), lets the applier
//! write (to any database of the same group: the server opens its databases
//! and this one in one group with a commit log, so the batch is atomic
//! across them), then writes `applied` and commits. After kill -9 an entry
//! is therefore applied with its marker or not at all; on restart openraft
//! applies again exactly the entries after the marker, so no entry is ever
//! applied twice.
//!
//! Snapshots are directories of files the applier produced
//! ([`Applier::checkpoint`]: the server hard-links its engine files, so a
//! snapshot copies no data and holds the exec gate only while it links),
//! kept under `<dir>/snapshots/`:
//!
//! - `snap-<n>/`: the current snapshot: `META` (its log id, membership and
//!   files with their lengths) and `data/` (the files). One at a time; the
//!   one before it is removed once a new one is in place.
//! - `building-<n>/`: a snapshot being built (renamed to `snap-<n>` when
//!   complete; removed at start-up if a crash interrupted it).
//! - `incoming-<n>.archive`: a snapshot being received (see
//!   [`crate::snapshot`]), unpacked into `staged-<n>/` when complete.
//!
//! Installing a received snapshot is crash-safe by an intent file:
//! `<dir>/install` names the staged directory before
//! [`Applier::install`] starts replacing the state, and is removed only
//! after the marker (applied = the snapshot's last log id) is written and
//! fsynced. A node that dies in between finds the intent at start-up and
//! runs the install again (appliers make it idempotent) before openraft
//! reads the marker, so the marker never names a state other than the
//! one on disk.

use std::fmt::Debug;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use basalt_engine::{CheckpointFile, Db, Options};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    EntryPayload, ErrorSubject, ErrorVerb, RaftSnapshotBuilder, SnapshotMeta, StoredMembership,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::log_store::{read_small_file, write_small_file};
use crate::snapshot::{unpack, ArchiveReader, SnapshotData};
use crate::{io_error, Entry, LogId, NodeAddr, NodeId, Response, StorageError, TypeConfig};

/// What the state machine runs for each committed entry. Basalt's server
/// implements it by executing the entry's commands; tests implement a small
/// key-value store.
pub trait Applier: Send + Sync + 'static {
    /// Applies the payload of the committed entry at log `index` and returns
    /// the reply for the client that proposed it. Runs with a write batch of
    /// the state machine's batch group open on this thread: every engine
    /// write it makes to a database of that group commits with the entry's
    /// marker, atomically. Must be deterministic: every node applies the
    /// same entries to the same state and must reach the same state. An
    /// error stops this node's Raft (its engine can no longer be trusted).
    fn apply(&self, index: u64, payload: &[u8]) -> io::Result<Vec<u8>>;

    /// Writes the whole state, as of the last applied entry, into `dir` (a
    /// new directory on the same filesystem as the node's data, so that
    /// files that no longer change can be hard-linked rather than copied)
    /// and returns its files, each with how many of its bytes belong to the
    /// snapshot. Entries may apply concurrently: the applier calls
    /// `captured` exactly once, at the moment its image is of, while no
    /// entry can apply (inside the exclusion [`Applier::enter`] gives
    /// applies), and keeps that exclusion only as long as it must.
    fn checkpoint(&self, dir: &Path, captured: &mut dyn FnMut())
        -> io::Result<Vec<CheckpointFile>>;

    /// Replaces the whole state with a checkpoint made on another node,
    /// whose files are in `dir` (each exactly its length), as of log index
    /// `index`. Runs inside
    /// [`Applier::enter`]'s hold, with no write batch open; may move files
    /// out of `dir`. Must be idempotent: if the node dies during it, it
    /// runs again at the next start, before anything else, with `dir` as
    /// the interrupted run left it.
    fn install(&self, dir: &Path, index: u64) -> io::Result<()>;

    /// Whether applying the payload of a committed entry takes a short
    /// time bounded by its size (no command whose work grows with a key's
    /// size, none that runs a caller's code), so that the state machine may
    /// apply it on the thread that runs openraft's tasks when the node runs
    /// on a current-thread runtime: a long apply there would hold up
    /// heartbeats and RPCs, and the followers would start an election.
    /// Default: false (every apply leaves that thread).
    fn bounded(&self, payload: &[u8]) -> bool {
        let _ = payload;
        false
    }

    /// Called before the state machine opens its write batch for a group of
    /// entries (or a snapshot install); what it returns is held until the
    /// batch has committed. For locks the applier needs that rank above the
    /// engine's batch in its lock order (the server's exec gate). Default:
    /// nothing.
    fn enter(&self) -> Box<dyn Held + '_> {
        Box::new(())
    }

    /// [`Applier::enter`] if what it takes is free now, else `None` (the
    /// apply then waits for it on another thread). Default: `enter`, for
    /// appliers whose `enter` never waits.
    fn try_enter(&self) -> Option<Box<dyn Held + '_>> {
        Some(self.enter())
    }
}

/// Anything [`Applier::enter`] keeps alive (a lock guard, usually).
pub trait Held {}
impl<T: ?Sized> Held for T {}

const APPLIED_KEY: &[u8] = b"applied";

/// A snapshot's `META`: what it is and its files (relative to its
/// `data/`) with their lengths.
#[derive(Clone, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, NodeAddr>,
    files: Vec<(PathBuf, u64)>,
}

impl StoredSnapshot {
    fn files(&self) -> Vec<CheckpointFile> {
        self.files
            .iter()
            .map(|(path, len)| CheckpointFile {
                path: path.clone(),
                len: *len,
            })
            .collect()
    }
}

/// The current snapshot: its directory (`snapshots/snap-<n>`) and `META`.
struct Current {
    dir: PathBuf,
    stored: StoredSnapshot,
}

struct State {
    applied: Option<LogId>,
    membership: StoredMembership<NodeId, NodeAddr>,
    snapshot: Option<Current>,
    builds: u64,
}

/// Names of the snapshot directory's entries: unique for the process's
/// life, and start-up removes what an earlier process left.
static NAMES: AtomicU64 = AtomicU64::new(1);

fn unique(kind: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{kind}-{nanos}-{}", NAMES.fetch_add(1, Ordering::Relaxed))
}

const INTENT: &str = "install";

struct Shared<A> {
    db: Arc<Db>,
    dir: PathBuf,
    applier: A,
    state: Mutex<State>,
    /// `State::applied` as of the last committed batch, readable while a
    /// batch applies (which holds `state` throughout).
    applied_now: Mutex<(Option<LogId>, StoredMembership<NodeId, NodeAddr>)>,
}

/// The state machine. Clones share it (openraft owns one; the embedder may
/// keep another to read [`StateMachine::applied`]).
pub struct StateMachine<A: Applier> {
    shared: Arc<Shared<A>>,
}

impl<A: Applier> Clone for StateMachine<A> {
    fn clone(&self) -> Self {
        StateMachine {
            shared: self.shared.clone(),
        }
    }
}

impl<A: Applier> Debug for StateMachine<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMachine")
            .field("dir", &self.shared.dir)
            .field("applied", &self.applied())
            .finish()
    }
}

fn sm_err(verb: ErrorVerb, e: impl std::error::Error + 'static) -> StorageError {
    io_error(ErrorSubject::StateMachine, verb, e)
}

impl<A: Applier> StateMachine<A> {
    /// Opens the state machine kept in `dir` (its marker database is
    /// `dir/state`, opened with `opts`: give it the batch group of the
    /// databases the applier writes).
    pub fn open(dir: &Path, opts: Options, applier: A) -> io::Result<StateMachine<A>> {
        std::fs::create_dir_all(dir)?;
        let db = Db::open(dir.join("state"), opts).map_err(io::Error::other)?;
        Self::open_with_db(dir, Arc::new(db), applier)
    }

    /// [`StateMachine::open`] with the marker database opened by the caller
    /// (the server opens it with its keyspace, so that the keyspace's
    /// commit log keeps the tokens of its batches). `dir` holds the
    /// snapshot.
    pub fn open_with_db(dir: &Path, db: Arc<Db>, applier: A) -> io::Result<StateMachine<A>> {
        std::fs::create_dir_all(dir)?;
        let (applied, membership) = match db.get(APPLIED_KEY).map_err(io::Error::other)? {
            Some(bytes) => bincode::deserialize(&bytes).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("raft applied marker: {e}"),
                )
            })?,
            None => (None, StoredMembership::default()),
        };
        let intent: Option<String> = read_small_file(dir, INTENT)?;
        let snapshot = Self::tidy_snapshots(dir, intent.as_deref())?;
        let sm = StateMachine {
            shared: Arc::new(Shared {
                db,
                dir: dir.to_path_buf(),
                applier,
                applied_now: Mutex::new((applied, membership.clone())),
                state: Mutex::new(State {
                    applied,
                    membership,
                    snapshot,
                    builds: 0,
                }),
            }),
        };
        if let Some(staged) = intent {
            // A snapshot install was interrupted: finish it before openraft
            // reads the marker.
            tracing::warn!(staged = %staged, "finishing an interrupted snapshot install");
            let staged = sm.snapshots().join(staged);
            let mut st = sm.shared.state.lock();
            sm.finish_install(&mut st, &staged)
                .map_err(|e| io::Error::other(e.to_string()))?;
        }
        Ok(sm)
    }

    fn snapshots(&self) -> PathBuf {
        self.shared.dir.join("snapshots")
    }

    /// At start-up: finds the current snapshot and removes everything else
    /// under `snapshots/` (interrupted builds and receptions, replaced
    /// snapshots) except the staged directory an install intent names.
    fn tidy_snapshots(dir: &Path, keep: Option<&str>) -> io::Result<Option<Current>> {
        // The single-file snapshot of earlier versions.
        match std::fs::remove_file(dir.join("snapshot")) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let root = dir.join("snapshots");
        std::fs::create_dir_all(&root)?;
        let mut best: Option<Current> = None;
        let mut drop = Vec::new();
        for ent in std::fs::read_dir(&root)? {
            let ent = ent?;
            let name = ent.file_name().to_string_lossy().into_owned();
            let path = ent.path();
            if Some(name.as_str()) == keep {
                continue;
            }
            let stored = if name.starts_with("snap-") {
                read_small_file::<StoredSnapshot>(&path, "META")
                    .ok()
                    .flatten()
                    .filter(|st| {
                        let ok = intact(&path, st);
                        if !ok {
                            tracing::warn!(snapshot = %path.display(), "dropping a damaged snapshot");
                        }
                        ok
                    })
            } else {
                None
            };
            match stored {
                Some(stored)
                    if best
                        .as_ref()
                        .is_none_or(|b| b.stored.meta.last_log_id < stored.meta.last_log_id) =>
                {
                    if let Some(old) = best.replace(Current { dir: path, stored }) {
                        drop.push(old.dir);
                    }
                }
                _ => drop.push(path),
            }
        }
        for path in drop {
            remove_any(&path)?;
        }
        Ok(best)
    }

    /// The log id of the last applied entry (of the last batch that
    /// committed). Never waits for a batch that is applying.
    pub fn applied(&self) -> Option<LogId> {
        self.shared.applied_now.lock().0
    }

    /// The applier.
    pub fn applier(&self) -> &A {
        &self.shared.applier
    }

    fn write_marker(&self, st: &State) -> Result<(), StorageError> {
        let bytes = bincode::serialize(&(st.applied, &st.membership))
            .map_err(|e| sm_err(ErrorVerb::Write, e))?;
        self.shared
            .db
            .put(APPLIED_KEY, &bytes)
            .map_err(|e| sm_err(ErrorVerb::Write, e))?;
        Ok(())
    }
}

/// Runs `f` on this thread, handing the runtime worker's other tasks to
/// another thread meanwhile (`block_in_place`), on a multi-threaded
/// runtime; elsewhere as [`off_runtime`]. For the state machine's apply,
/// once per batch of committed entries: a trip through the blocking pool
/// costs two thread wake-ups, each part of every write's latency.
async fn in_place_off_runtime<T: Send + 'static>(
    verb: ErrorVerb,
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        })
        .unwrap_or_else(|panic| Err(panicked(verb, panic))),
        _ => off_runtime(verb, f).await,
    }
}

/// A panic while applying as a storage error, as `spawn_blocking`'s join
/// error is: openraft then stops the node at once, where an unwinding
/// state-machine task would end unnoticed until the next apply.
fn panicked(verb: ErrorVerb, panic: Box<dyn std::any::Any + Send>) -> StorageError {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into());
    sm_err(verb, io::Error::other(format!("applying panicked: {what}")))
}

/// Runs `f` on tokio's blocking pool. Applying entries, building and
/// installing snapshots are synchronous and may take long (a snapshot
/// dumps or restores every key): on the runtime's few worker threads they
/// held up openraft's core and the RPC handlers, so appends timed out and
/// followers started elections under load.
async fn off_runtime<T: Send + 'static>(
    verb: ErrorVerb,
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| sm_err(verb, io::Error::other(e)))?
}

impl<A: Applier> StateMachine<A> {
    /// Applies `entries` in one write batch with the marker (see the
    /// module docs).
    fn apply_now(&self, entries: Vec<Entry>) -> Result<Vec<Response>, StorageError> {
        let st = self.shared.state.lock();
        let held = self.shared.applier.enter();
        self.apply_holding(st, held, entries)
    }

    /// [`StateMachine::apply_now`] if its locks are free now (the state,
    /// then [`Applier::try_enter`]), else the entries back untouched: on
    /// the thread that runs openraft's tasks, waiting for a lock another
    /// thread holds (a read-only script holding the exec gate, a snapshot
    /// holding the state) would hold up heartbeats and RPCs with it.
    fn try_apply_now(
        &self,
        entries: Vec<Entry>,
    ) -> Result<Result<Vec<Response>, StorageError>, Vec<Entry>> {
        let Some(st) = self.shared.state.try_lock() else {
            return Err(entries);
        };
        let Some(held) = self.shared.applier.try_enter() else {
            return Err(entries);
        };
        Ok(self.apply_holding(st, held, entries))
    }

    fn apply_holding(
        &self,
        mut st: parking_lot::MutexGuard<'_, State>,
        held: Box<dyn Held + '_>,
        entries: Vec<Entry>,
    ) -> Result<Vec<Response>, StorageError> {
        let batch = self.shared.db.batch();
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            if st.applied.is_some_and(|a| entry.log_id.index <= a.index) {
                // Already applied (its marker committed with it).
                out.push(Response::default());
                continue;
            }
            let reply = match &entry.payload {
                EntryPayload::Blank => Response::default(),
                EntryPayload::Normal(req) => Response(
                    self.shared
                        .applier
                        .apply(entry.log_id.index, &req.0)
                        .map_err(|e| sm_err(ErrorVerb::Write, e))?,
                ),
                EntryPayload::Membership(m) => {
                    st.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                    Response::default()
                }
            };
            st.applied = Some(entry.log_id);
            out.push(reply);
        }
        self.write_marker(&st)?;
        batch.commit().map_err(|e| sm_err(ErrorVerb::Write, e))?;
        // Before the exclusion ends: a checkpoint reads it inside it.
        *self.shared.applied_now.lock() = (st.applied, st.membership.clone());
        drop(held);
        Ok(out)
    }

    /// Installs the snapshot received into `archive`: unpacks it into a
    /// staged directory, records the intent, and finishes the install.
    fn install_now(
        &self,
        meta: SnapshotMeta<NodeId, NodeAddr>,
        archive: PathBuf,
    ) -> Result<(), StorageError> {
        let snap_err =
            |verb, e: io::Error| io_error(ErrorSubject::Snapshot(Some(meta.signature())), verb, e);
        let mut st = self.shared.state.lock();
        let name = unique("staged");
        let staged = self.snapshots().join(&name);
        std::fs::create_dir(&staged).map_err(|e| snap_err(ErrorVerb::Write, e))?;
        let files = unpack(&archive, &staged.join("data")).map_err(|e| {
            let _ = remove_any(&staged);
            snap_err(ErrorVerb::Write, e)
        })?;
        let _ = std::fs::remove_file(&archive);
        let stored = StoredSnapshot {
            meta: meta.clone(),
            files: files.into_iter().map(|f| (f.path, f.len)).collect(),
        };
        write_small_file(&staged, "META", &stored).map_err(|e| snap_err(ErrorVerb::Write, e))?;
        write_small_file(&self.shared.dir, INTENT, &name)
            .map_err(|e| snap_err(ErrorVerb::Write, e))?;
        self.finish_install(&mut st, &staged)
    }

    /// Runs the applier's install of the snapshot staged in `staged`, then
    /// writes and fsyncs the marker, keeps a checkpoint of the new state as
    /// the current snapshot (the staged files were moved into the state)
    /// and removes the intent and the staged directory.
    fn finish_install(&self, st: &mut State, staged: &Path) -> Result<(), StorageError> {
        let stored: StoredSnapshot = read_small_file(staged, "META")
            .and_then(|m| m.ok_or_else(|| io::Error::other("the staged snapshot has no META")))
            .map_err(|e| io_error(ErrorSubject::Snapshot(None), ErrorVerb::Read, e))?;
        let meta = stored.meta;
        let snap_err =
            |verb, e: io::Error| io_error(ErrorSubject::Snapshot(Some(meta.signature())), verb, e);
        {
            let _held = self.shared.applier.enter();
            self.shared
                .applier
                .install(
                    &staged.join("data"),
                    meta.last_log_id.map_or(0, |l| l.index),
                )
                .map_err(|e| snap_err(ErrorVerb::Write, e))?;
            st.applied = meta.last_log_id;
            st.membership = meta.last_membership.clone();
            self.write_marker(st)?;
            self.shared
                .db
                .sync()
                .map_err(|e| sm_err(ErrorVerb::Write, e))?;
            *self.shared.applied_now.lock() = (st.applied, st.membership.clone());
        }
        // Nothing applies during an install: the point is the snapshot's.
        let (building, files) = self.checkpoint_files(&mut || {})?;
        self.make_current(st, building, files, meta.clone())?;
        remove_any(&self.shared.dir.join(INTENT))
            .and_then(|_| remove_any(staged))
            .map_err(|e| snap_err(ErrorVerb::Delete, e))?;
        Ok(())
    }

    /// Checkpoints the state into a new `building-*` directory, made
    /// durable; `captured` runs at the moment the image is of.
    fn checkpoint_files(
        &self,
        captured: &mut dyn FnMut(),
    ) -> Result<(PathBuf, Vec<CheckpointFile>), StorageError> {
        let snap_err = |verb, e: io::Error| io_error(ErrorSubject::Snapshot(None), verb, e);
        let building = self.snapshots().join(unique("building"));
        std::fs::create_dir_all(&building).map_err(|e| snap_err(ErrorVerb::Write, e))?;
        let started = std::time::Instant::now();
        let files = match self
            .shared
            .applier
            .checkpoint(&building.join("data"), captured)
        {
            Ok(f) => f,
            Err(e) => {
                let _ = remove_any(&building);
                return Err(snap_err(ErrorVerb::Read, e));
            }
        };
        let linked = started.elapsed();
        // Durable before it is named a snapshot: the active files' linked
        // prefixes and the applier's small files may still be in the page
        // cache only (entries apply meanwhile: the gate was held just for
        // the links).
        sync_tree(&building.join("data"), &files).map_err(|e| {
            let _ = remove_any(&building);
            snap_err(ErrorVerb::Write, e)
        })?;
        tracing::info!(
            files = files.len(),
            bytes = files.iter().map(|f| f.len).sum::<u64>(),
            linked_ms = linked.as_millis() as u64,
            took_ms = started.elapsed().as_millis() as u64,
            "snapshot checkpointed"
        );
        Ok((building, files))
    }

    /// Names `building` the current snapshot (as of `meta`), removing the
    /// one before; a snapshot of a later entry that became current
    /// meanwhile (an install) stays, and `building` goes.
    fn make_current(
        &self,
        st: &mut State,
        building: PathBuf,
        files: Vec<CheckpointFile>,
        meta: SnapshotMeta<NodeId, NodeAddr>,
    ) -> Result<(), StorageError> {
        let snap_err = |verb, e: io::Error| io_error(ErrorSubject::Snapshot(None), verb, e);
        if st
            .snapshot
            .as_ref()
            .is_some_and(|c| c.stored.meta.last_log_id > meta.last_log_id)
        {
            return remove_any(&building).map_err(|e| snap_err(ErrorVerb::Delete, e));
        }
        let stored = StoredSnapshot {
            meta,
            files: files.into_iter().map(|f| (f.path, f.len)).collect(),
        };
        let name = building
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .replacen("building", "snap", 1);
        let dir = self.snapshots().join(name);
        write_small_file(&building, "META", &stored)
            .and_then(|_| std::fs::rename(&building, &dir))
            .and_then(|_| std::fs::File::open(self.snapshots())?.sync_all())
            .map_err(|e| snap_err(ErrorVerb::Write, e))?;
        if let Some(old) = st.snapshot.replace(Current { dir, stored }) {
            // A snapshot being sent keeps its files open: removing the
            // directory does not cut the transfer short.
            remove_any(&old.dir).map_err(|e| snap_err(ErrorVerb::Delete, e))?;
        }
        Ok(())
    }

    /// Builds a snapshot of the state. Entries go on applying while it is
    /// built (the applier holds them off only while it links files); the
    /// snapshot is of the last entry applied at that moment.
    fn build_now(&self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let mut at = None;
        let (building, files) = self.checkpoint_files(&mut || {
            at = Some(self.shared.applied_now.lock().clone());
        })?;
        let Some((applied, membership)) = at else {
            let _ = remove_any(&building);
            return Err(io_error(
                ErrorSubject::Snapshot(None),
                ErrorVerb::Read,
                io::Error::other("the applier's checkpoint named no point"),
            ));
        };
        let mut st = self.shared.state.lock();
        st.builds += 1;
        let snapshot_id = match applied {
            Some(l) => format!("{}-{}-{}", l.leader_id, l.index, st.builds),
            None => format!("none-{}", st.builds),
        };
        let meta = SnapshotMeta {
            last_log_id: applied,
            last_membership: membership,
            snapshot_id,
        };
        self.make_current(&mut st, building, files, meta)?;
        let current = st.snapshot.as_ref().expect("a current snapshot");
        Self::open_snapshot(current)
    }

    fn open_snapshot(current: &Current) -> Result<Snapshot<TypeConfig>, StorageError> {
        let meta = current.stored.meta.clone();
        let reader = ArchiveReader::open(&current.dir.join("data"), &current.stored.files())
            .map_err(|e| {
                io_error(
                    ErrorSubject::Snapshot(Some(meta.signature())),
                    ErrorVerb::Read,
                    e,
                )
            })?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(SnapshotData::Out(reader)),
        })
    }
}

/// fsyncs every file of `files` under `root`, then every directory that
/// holds one, deepest first, and `root`.
fn sync_tree(root: &Path, files: &[CheckpointFile]) -> io::Result<()> {
    let mut dirs = vec![root.to_path_buf()];
    for f in files {
        let path = root.join(&f.path);
        std::fs::File::open(&path)?.sync_data()?;
        let mut d = path.parent().map(Path::to_path_buf);
        while let Some(dir) = d {
            if dir == root || !dir.starts_with(root) || dirs.contains(&dir) {
                break;
            }
            d = dir.parent().map(Path::to_path_buf);
            dirs.push(dir);
        }
    }
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in dirs {
        std::fs::File::open(&d)?.sync_all()?;
    }
    Ok(())
}

/// Whether every file of a stored snapshot is there with at least its
/// length (a power loss may have cut an active file back).
fn intact(dir: &Path, stored: &StoredSnapshot) -> bool {
    stored.files.iter().all(|(path, len)| {
        std::fs::metadata(dir.join("data").join(path)).is_ok_and(|m| m.len() >= *len)
    })
}

/// Removes a file or a directory tree; absent is fine.
fn remove_any(path: &Path) -> io::Result<()> {
    let r = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) => Err(e),
    };
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

impl<A: Applier> RaftStateMachine<TypeConfig> for StateMachine<A> {
    type SnapshotBuilder = SnapshotBuilder<A>;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId>, StoredMembership<NodeId, NodeAddr>), StorageError> {
        let st = self.shared.state.lock();
        Ok((st.applied, st.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut entries: Vec<Entry> = entries.into_iter().collect();
        // On a current-thread runtime (a node's own Raft thread) nothing
        // else runs during the apply: only entries the applier calls
        // bounded apply here, and only with their locks free now.
        let current_thread = matches!(
            tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()),
            Ok(tokio::runtime::RuntimeFlavor::CurrentThread)
        );
        if current_thread
            && entries.iter().all(|e| match &e.payload {
                EntryPayload::Normal(req) => self.shared.applier.bounded(&req.0),
                EntryPayload::Blank | EntryPayload::Membership(_) => true,
            })
        {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.try_apply_now(entries)
            })) {
                Ok(Ok(done)) => return done,
                Ok(Err(back)) => entries = back,
                Err(panic) => return Err(panicked(ErrorVerb::Write, panic)),
            }
        }
        let sm = self.clone();
        in_place_off_runtime(ErrorVerb::Write, move || sm.apply_now(entries)).await
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder { sm: self.clone() }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotData>, StorageError> {
        // One reception at a time: an earlier one was abandoned (a newer
        // snapshot, another leader), and its file could be as large as the
        // data set.
        if let Ok(entries) = std::fs::read_dir(self.snapshots()) {
            for e in entries.flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if name.starts_with("incoming-") && name.ends_with(".archive") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let path = self
            .snapshots()
            .join(format!("{}.archive", unique("incoming")));
        SnapshotData::receive_into(path)
            .await
            .map(Box::new)
            .map_err(|e| io_error(ErrorSubject::Snapshot(None), ErrorVerb::Write, e))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, NodeAddr>,
        snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageError> {
        let snap_err = |e: io::Error| {
            io_error(
                ErrorSubject::Snapshot(Some(meta.signature())),
                ErrorVerb::Write,
                e,
            )
        };
        use tokio::io::AsyncWriteExt;
        let path = match *snapshot {
            SnapshotData::In(mut file, path) => {
                file.flush().await.map_err(snap_err)?;
                file.sync_all().await.map_err(snap_err)?;
                path
            }
            // A stored snapshot handed over directly (openraft's storage
            // tests do): its archive is written out first, as if received.
            out @ SnapshotData::Out(_) => {
                let path = self
                    .snapshots()
                    .join(format!("{}.archive", unique("incoming")));
                let mut rx = SnapshotData::receive_into(path.clone())
                    .await
                    .map_err(snap_err)?;
                let mut out = out;
                tokio::io::copy(&mut out, &mut rx).await.map_err(snap_err)?;
                rx.flush().await.map_err(snap_err)?;
                if let SnapshotData::In(file, _) = rx {
                    file.sync_all().await.map_err(snap_err)?;
                }
                path
            }
        };
        let (sm, meta) = (self.clone(), meta.clone());
        off_runtime(ErrorVerb::Write, move || sm.install_now(meta, path)).await
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let st = self.shared.state.lock();
        st.snapshot.as_ref().map(Self::open_snapshot).transpose()
    }
}

/// Builds a snapshot of a [`StateMachine`].
pub struct SnapshotBuilder<A: Applier> {
    sm: StateMachine<A>,
}

impl<A: Applier> Debug for SnapshotBuilder<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotBuilder").finish_non_exhaustive()
    }
}

impl<A: Applier> RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder<A> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let sm = self.sm.clone();
        off_runtime(ErrorVerb::Read, move || sm.build_now()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a multi-threaded runtime the apply runs in place; a panic in it
    /// comes back as a storage error (openraft then stops the node), as it
    /// does through the blocking pool on any other runtime.
    #[test]
    fn a_panicking_apply_is_a_storage_error_on_either_runtime() {
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let single = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for rt in [&multi, &single] {
            let ok = rt.block_on(in_place_off_runtime(ErrorVerb::Write, || Ok(7)));
            assert_eq!(ok.unwrap(), 7);
            let err = rt
                .block_on(in_place_off_runtime::<u8>(ErrorVerb::Write, || {
                    panic!("boom in apply")
                }))
                .unwrap_err();
            assert!(!err.to_string().is_empty());
        }
        // The message names the panic on the in-place path.
        {
            let err = multi
                .block_on(in_place_off_runtime::<u8>(ErrorVerb::Write, || {
                    panic!("boom in apply")
                }))
                .unwrap_err();
            assert!(format!("{err:?}").contains("boom in apply"), "{err:?}");
        }
    }
}
