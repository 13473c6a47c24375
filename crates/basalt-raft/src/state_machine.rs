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
//! Snapshots (for now) are the applier's own serialisation of its whole
//! state, kept in memory and in `<dir>/snapshot` (replaced atomically).

use std::fmt::Debug;
use std::io::{self, Cursor};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use basalt_engine::{Db, Options};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    EntryPayload, ErrorSubject, ErrorVerb, RaftSnapshotBuilder, SnapshotMeta, StoredMembership,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::log_store::{read_small_file, write_small_file};
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

    /// The whole state as bytes, as of the last applied entry (no `apply`
    /// runs meanwhile).
    fn snapshot(&self) -> io::Result<Vec<u8>>;

    /// Replaces the whole state with one [`Applier::snapshot`] produced
    /// (on another node). Runs inside a write batch, as `apply` does.
    fn restore(&self, data: &[u8]) -> io::Result<()>;

    /// Called before the state machine opens its write batch for a group of
    /// entries (or a snapshot install); what it returns is held until the
    /// batch has committed. For locks the applier needs that rank above the
    /// engine's batch in its lock order (the server's exec gate). Default:
    /// nothing.
    fn enter(&self) -> Box<dyn Held + '_> {
        Box::new(())
    }
}

/// Anything [`Applier::enter`] keeps alive (a lock guard, usually).
pub trait Held {}
impl<T: ?Sized> Held for T {}

const APPLIED_KEY: &[u8] = b"applied";

#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, NodeAddr>,
    #[serde(with = "serde_bytes")]
    data: Vec<u8>,
}

struct State {
    applied: Option<LogId>,
    membership: StoredMembership<NodeId, NodeAddr>,
    snapshot: Option<Arc<StoredSnapshot>>,
    builds: u64,
}

struct Shared<A> {
    db: Arc<Db>,
    dir: PathBuf,
    applier: A,
    state: Mutex<State>,
    /// `State::applied` as of the last committed batch, readable while a
    /// batch applies (which holds `state` throughout).
    applied_now: Mutex<Option<LogId>>,
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
        let snapshot: Option<StoredSnapshot> = read_small_file(dir, "snapshot")?;
        Ok(StateMachine {
            shared: Arc::new(Shared {
                db,
                dir: dir.to_path_buf(),
                applier,
                applied_now: Mutex::new(applied),
                state: Mutex::new(State {
                    applied,
                    membership,
                    snapshot: snapshot.map(Arc::new),
                    builds: 0,
                }),
            }),
        })
    }

    /// The log id of the last applied entry (of the last batch that
    /// committed). Never waits for a batch that is applying.
    pub fn applied(&self) -> Option<LogId> {
        *self.shared.applied_now.lock()
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
        let mut st = self.shared.state.lock();
        let held = self.shared.applier.enter();
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
        drop(held);
        *self.shared.applied_now.lock() = st.applied;
        Ok(out)
    }

    /// Replaces the state with `stored`'s, in one write batch with the
    /// marker, and keeps it as the current snapshot.
    fn install_now(&self, stored: StoredSnapshot) -> Result<(), StorageError> {
        let meta = &stored.meta;
        let snap_err = |e| {
            io_error(
                ErrorSubject::Snapshot(Some(meta.signature())),
                ErrorVerb::Write,
                e,
            )
        };
        let mut st = self.shared.state.lock();
        let held = self.shared.applier.enter();
        let batch = self.shared.db.batch();
        self.shared
            .applier
            .restore(&stored.data)
            .map_err(snap_err)?;
        st.applied = meta.last_log_id;
        st.membership = meta.last_membership.clone();
        self.write_marker(&st)?;
        batch.commit().map_err(|e| sm_err(ErrorVerb::Write, e))?;
        drop(held);
        *self.shared.applied_now.lock() = st.applied;
        write_small_file(&self.shared.dir, "snapshot", &stored).map_err(snap_err)?;
        st.snapshot = Some(Arc::new(stored));
        Ok(())
    }

    /// Builds a snapshot of the state as of the last applied entry.
    fn build_now(&self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let shared = &self.shared;
        let mut st = shared.state.lock();
        let data = shared
            .applier
            .snapshot()
            .map_err(|e| io_error(ErrorSubject::Snapshot(None), ErrorVerb::Read, e))?;
        st.builds += 1;
        let snapshot_id = match st.applied {
            Some(l) => format!("{}-{}-{}", l.leader_id, l.index, st.builds),
            None => format!("none-{}", st.builds),
        };
        let stored = StoredSnapshot {
            meta: SnapshotMeta {
                last_log_id: st.applied,
                last_membership: st.membership.clone(),
                snapshot_id,
            },
            data,
        };
        write_small_file(&shared.dir, "snapshot", &stored)
            .map_err(|e| io_error(ErrorSubject::Snapshot(None), ErrorVerb::Write, e))?;
        let snap = Snapshot {
            meta: stored.meta.clone(),
            snapshot: Box::new(Cursor::new(stored.data.clone())),
        };
        st.snapshot = Some(Arc::new(stored));
        Ok(snap)
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
        let entries: Vec<Entry> = entries.into_iter().collect();
        let sm = self.clone();
        off_runtime(ErrorVerb::Write, move || sm.apply_now(entries)).await
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder { sm: self.clone() }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, NodeAddr>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: snapshot.into_inner(),
        };
        let sm = self.clone();
        off_runtime(ErrorVerb::Write, move || sm.install_now(stored)).await
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let st = self.shared.state.lock();
        Ok(st.snapshot.as_ref().map(|s| Snapshot {
            meta: s.meta.clone(),
            snapshot: Box::new(Cursor::new(s.data.clone())),
        }))
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
