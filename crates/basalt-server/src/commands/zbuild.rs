//! Big indexes built off the worker: a sorted set's and a stream's.
//!
//! Every sorted-set command runs on the set's `ZIndex` (`zindex.rs`), kept
//! in the process-wide `ZCache`, and every stream command on the stream's
//! ids in order (`stream.rs`), kept in the streams' cache; each is rebuilt
//! from the engine when its cache lacks it at the key's version: after a
//! restart, after an eviction, or when the key was written by another
//! command (EXPIRE, RENAME, ...). A sorted set's rebuild reads every
//! member's record and sorts them: measured, the first ZRANGE of a
//! 1 M-member set after a restart held its worker (and every client on it)
//! for 0.50 s with the files in the page cache and 1.18 s without; a
//! stream's reads its field names (in memory) and orders them, 0.11-0.14 s
//! for 1 M entries.
//!
//! So a command that may need one ([`may_defer`]) and that the connection
//! runs on its own (not in EXEC or a script) runs inside a [`Deferring`]
//! scope. When `ZDb::load` or `Stream::open` finds a big one
//! ([`ZSET_MEMBERS`], [`STREAM_ENTRIES`]) whose index is not cached, it
//! names the key ([`defer`]) and fails, before the command has had any
//! effect: the first thing each of these commands does with such a key is
//! open it, and a command that opens several, or counts its lookups
//! first, asks about all of them before anything else (`defer_uncached`).
//! The command's run then leaves no trace (its reply is cut, nothing is
//! counted), and the connection [`build`]s those indexes on tokio's
//! blocking pool while only it waits, then runs the command again, which
//! finds them cached. A key built once and missing again (evicted by the
//! next build, made stale by a write), or any after [`MAX_ROUNDS`] builds,
//! is rebuilt in place, as everything outside the scope is.
//!
//! The build needs no lock of the key: it reads the key's version, the
//! index's sources (one snapshot of the engine's index), and the version
//! again, and checks the index in only if no write came in between
//! (versions only grow, and a write changes the fields and the version
//! under one lock). A write that wins the race costs the build, never a
//! wrong index. Connections waiting for the same key share one build
//! ([`InFlight`]).
//!
//! At most two builds run at once; a build holds its database's slot
//! read-locked, so a FLUSHDB, SWAPDB or DEBUG RELOAD waits for it to end.
//! Not covered (they still rebuild in place): commands inside MULTI/EXEC
//! and scripts, and replicated applies (which run off the Raft thread
//! already).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tokio::sync::watch;

use basalt_engine::KeyKind;
use basalt_resp::Args;

use super::zset::ZDb;
use super::{lookup, CommandDef, Error, Group};
use crate::keyspace::{TAG_STREAM, TAG_ZSET};
use crate::state::Shared;
use crate::zindex::ZCache;

/// Sorted sets of at least this many members have a missing index built
/// off the worker (a rebuild of this many costs about half a millisecond
/// with the records in memory; smaller ones are rebuilt in place). Above
/// the engine's `LARGE_MAP_FIELDS`, so that a database whose
/// `Db::large_maps` count is 0 holds none ([`uncached`]'s gate).
pub(crate) const ZSET_MEMBERS: usize = basalt_engine::LARGE_MAP_FIELDS + 1;

/// Streams of at least this many fields (entries, groups and the
/// metadata) have a missing index built off the worker (about a
/// millisecond to rebuild in place).
pub(crate) const STREAM_ENTRIES: usize = 8192;

/// Most builds one command waits for before it rebuilds in place.
pub(crate) const MAX_ROUNDS: usize = 4;

/// Which index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// A sorted set's `ZIndex`.
    ZSet,
    /// A stream's ids and groups.
    Stream,
}

/// An index a command stopped at: its kind, its database's generation
/// (`Slot::generation`) and its key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Wanted {
    pub(crate) kind: Kind,
    pub(crate) generation: u64,
    pub(crate) key: Vec<u8>,
}

thread_local! {
    /// Whether the command running on this thread is inside a
    /// [`Deferring`] scope.
    static DEFERRING: Cell<bool> = const { Cell::new(false) };
    /// The indexes that command left to be built.
    static WANTED: RefCell<Vec<Wanted>> = const { RefCell::new(Vec::new()) };
}

/// While alive (and entered `on`), a big index that `ZDb::load` or
/// `Stream::open` finds missing is not rebuilt: the key is recorded
/// ([`defer`]) and the load fails, and [`Deferring::wanted`] then names
/// what to build.
pub(crate) struct Deferring {
    on: bool,
}

impl Deferring {
    /// Enters the scope if `on`, else changes nothing.
    #[inline]
    pub(crate) fn enter(on: bool) -> Deferring {
        if on {
            DEFERRING.with(|d| d.set(true));
        }
        Deferring { on }
    }

    /// The indexes the command stopped at (none if it ran through);
    /// leaves the scope.
    #[inline]
    pub(crate) fn wanted(self) -> Vec<Wanted> {
        if !self.on {
            return Vec::new();
        }
        WANTED.with(|w| std::mem::take(&mut *w.borrow_mut()))
    }
}

impl Drop for Deferring {
    fn drop(&mut self) {
        if self.on {
            DEFERRING.with(|d| d.set(false));
            WANTED.with(|w| w.borrow_mut().clear());
        }
    }
}

/// Whether `cmd` may stop to have an index built off the worker: the
/// sorted-set, geo and stream commands, SORT and MEMORY (USAGE), none of
/// which has any effect before it opens those keys.
#[inline]
pub(crate) fn may_defer(cmd: &CommandDef) -> bool {
    matches!(cmd.group, Group::SortedSet | Group::Geo | Group::Stream)
        || matches!(cmd.name, "sort" | "sort_ro" | "memory")
}

/// Whether the command running on this thread is inside a [`Deferring`]
/// scope.
#[inline]
pub(crate) fn deferring() -> bool {
    DEFERRING.with(|d| d.get())
}

/// Whether the command running on this thread has stopped at an index
/// (its loads fail from then on; nothing it does counts).
#[inline]
pub(crate) fn stopped() -> bool {
    deferring() && WANTED.with(|w| !w.borrow().is_empty())
}

/// Called on a big key whose index is not cached: inside a [`Deferring`]
/// scope, records it and answers true (the caller then fails with
/// [`stop`], at once or after it has looked at its other keys); outside,
/// false (the caller rebuilds in place).
pub(crate) fn defer(kind: Kind, generation: u64, key: &[u8]) -> bool {
    deferring() && {
        WANTED.with(|w| {
            let mut w = w.borrow_mut();
            if !w.iter().any(|x| x.kind == kind && x.key == key) {
                w.push(Wanted {
                    kind,
                    generation,
                    key: key.to_vec(),
                });
            }
        });
        true
    }
}

/// The error a command stops with after [`defer`] (never seen by a
/// client: the run's reply is cut).
pub(crate) fn stop() -> Error {
    Error::err("index not cached")
}

/// The big sorted sets and streams among `keys` (of database `dbi`) whose
/// indexes are not cached, looked up without their locks (an index a
/// command has out counts as cached): what a transaction or a script,
/// which rebuild in place, would rebuild; built first by the connection.
pub(crate) fn uncached<'k>(
    shared: &Shared,
    dbi: usize,
    keys: impl IntoIterator<Item = &'k [u8]>,
) -> Vec<Wanted> {
    let slot = shared.keyspace.read(dbi);
    // One load while the database holds no map that big (most do not).
    let Some(db) = slot.db().filter(|db| db.large_maps() > 0) else {
        return Vec::new();
    };
    let generation = slot.generation();
    let mut wanted: Vec<Wanted> = Vec::new();
    for key in keys {
        let Some(meta) = db.meta(key) else {
            continue;
        };
        let kind = match meta.kind {
            KeyKind::Map {
                tag: TAG_ZSET, len, ..
            } if len >= ZSET_MEMBERS && !ZCache::global().holds(generation, key, meta.version) => {
                Kind::ZSet
            }
            KeyKind::Map {
                tag: TAG_STREAM,
                len,
                ..
            } if len >= STREAM_ENTRIES
                && !super::stream::is_cached(generation, key, meta.version) =>
            {
                Kind::Stream
            }
            _ => continue,
        };
        if !wanted.iter().any(|w| w.key == key) {
            wanted.push(Wanted {
                kind,
                generation,
                key: key.to_vec(),
            });
        }
    }
    wanted
}

/// The keys of a command that may open indexes ([`may_defer`]) as it reads
/// them: the movable-key rules, else the table's positions (GEORADIUS's
/// source too, which those rules leave out); not a STORE command's
/// destination (always `args[1]`: replaced, never read).
pub(crate) fn read_keys<'a>(args: &Args<'a>) -> Vec<&'a [u8]> {
    let Some(def) = lookup(&args[0]).filter(|d| may_defer(d) && d.arity_ok(args.len())) else {
        return Vec::new();
    };
    let dst = def.name.ends_with("store").then_some(1);
    let movable = if def.flags & super::flags::MOVABLE_KEYS != 0 {
        let cmd: Vec<&[u8]> = args.iter().collect();
        super::server::movable_keys(def.name, &cmd)
    } else {
        Vec::new()
    };
    let table = movable.is_empty().then(|| def.key_positions(args.len()));
    movable
        .into_iter()
        .chain(table.into_iter().flatten())
        .filter(|&i| Some(i) != dst && i < args.len())
        .map(|i| args.get(i).expect("in range"))
        .collect()
}

/// Builds in flight, by (kind, generation, key): a connection that finds
/// one waits for it instead of building the same index again.
type InFlight = Mutex<HashMap<Wanted, watch::Receiver<()>>>;

fn in_flight() -> &'static InFlight {
    static BUILDS: OnceLock<InFlight> = OnceLock::new();
    BUILDS.get_or_init(InFlight::default)
}

/// Most builds running at once, over all connections.
const BUILDS_AT_ONCE: usize = 2;

fn builds_at_once() -> &'static Arc<tokio::sync::Semaphore> {
    static PERMITS: OnceLock<Arc<tokio::sync::Semaphore>> = OnceLock::new();
    PERMITS.get_or_init(|| Arc::new(tokio::sync::Semaphore::new(BUILDS_AT_ONCE)))
}

/// A build registered in [`in_flight`]: dropping it (the build task done,
/// or a connection gone before its task started) removes the entry and
/// wakes the waiters.
struct Building {
    id: Wanted,
    _done: watch::Sender<()>,
}

impl Drop for Building {
    fn drop(&mut self) {
        in_flight().lock().remove(&self.id);
    }
}

/// Builds the indexes `wanted` (of database `dbi`) on the blocking pool
/// and checks them into their caches; returns once each is built, found
/// built by another connection, or given up (a write came in meanwhile,
/// the database changed, a read failed: the command then rebuilds in
/// place, and reports the error).
pub(crate) async fn build(shared: Arc<Shared>, dbi: usize, wanted: Vec<Wanted>) {
    for id in wanted {
        let waiting = {
            let mut builds = in_flight().lock();
            match builds.get(&id) {
                Some(rx) => Err(rx.clone()),
                None => {
                    let (tx, rx) = watch::channel(());
                    builds.insert(id.clone(), rx);
                    Ok(Building {
                        id: id.clone(),
                        _done: tx,
                    })
                }
            }
        };
        match waiting {
            // Another connection builds it: its sender's drop ends this.
            Err(mut rx) => while rx.changed().await.is_ok() {},
            Ok(building) => {
                // At most BUILDS_AT_ONCE builds run (each holds an index
                // and its sources in memory); the permit and the in-flight
                // entry go with the task, so waiters wake when the build
                // ends even if this connection is gone by then.
                let Ok(permit) = builds_at_once().clone().acquire_owned().await else {
                    return;
                };
                let shared = shared.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    let _held = (permit,);
                    let id = &building.id;
                    let slot = shared.keyspace.read(dbi);
                    if slot.generation() != id.generation {
                        return;
                    }
                    let Some(db) = slot.db() else { return };
                    let built = match id.kind {
                        Kind::ZSet => ZDb::of(&slot).map_or(Ok(false), |z| z.build_index(&id.key)),
                        Kind::Stream => super::stream::build_index(db, id.generation, &id.key),
                    };
                    match built {
                        Ok(true) => {
                            let stat = match id.kind {
                                Kind::ZSet => &shared.stats.zset_index_builds,
                                Kind::Stream => &shared.stats.stream_index_builds,
                            };
                            stat.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(false) => {}
                        Err(e) => {
                            tracing::debug!(error = ?e, "an index was not built off the worker");
                        }
                    }
                    drop(slot);
                    drop(building);
                })
                .await;
            }
        }
    }
}
