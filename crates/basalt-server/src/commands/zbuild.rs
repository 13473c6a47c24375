//! A big sorted set's index built off the worker.
//!
//! Every sorted-set command runs on the set's `ZIndex` (`zindex.rs`), which
//! lives in the process-wide `ZCache` and is rebuilt from the engine when
//! the cache lacks it at the key's version: after a restart, after an
//! eviction, or when the key was written outside the sorted-set commands.
//! A rebuild reads every member's record and sorts them: measured, the
//! first ZRANGE of a 1 M-member set after a restart held its worker (and
//! every client on it) for 0.50 s with the files in the page cache and
//! 1.18 s without. So a sorted-set or geo command, SORT or MEMORY USAGE
//! that the connection runs on its own (not in EXEC or a script) runs
//! inside a [`Deferring`] scope ([`may_defer`]):
//! when `ZDb::load` finds a set of at least [`BUILD_OFF_WORKER`] members
//! whose index is not cached, it stops the command there, before any
//! effect (the first thing every such command does with a set is load it,
//! and it loads its sets one at a time, each given back before the next),
//! and names the key. The command's run then leaves no trace (its reply
//! is cut, nothing is counted), and the connection [`build`]s that index
//! (with any other of the command's keys that [`missing`] finds) on tokio's
//! blocking pool while only it waits, then runs the command again, which
//! finds them cached. A command that finds a set missing again after
//! [`MAX_ROUNDS`] builds (writes kept making the builds stale) rebuilds in
//! place, as everything outside the scope does.
//!
//! The build needs no lock of the key: it reads the key's version, the
//! members (one snapshot of the index), and the version again, and checks
//! the index in only if no write came in between (versions only grow, and
//! a write changes the fields and the version under one lock). A write
//! that wins the race costs the build, never a wrong index. Connections
//! waiting for the same set share one build ([`InFlight`]).
//!
//! At most two builds run at once; a build holds its database's slot
//! read-locked, so a FLUSHDB, SWAPDB or DEBUG RELOAD waits for it to end.
//! Not covered (they still rebuild in place): commands inside MULTI/EXEC
//! and scripts, and replicated applies (which run off the Raft thread
//! already).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use basalt_engine::KeyKind;
use basalt_resp::Args;
use parking_lot::Mutex;
use tokio::sync::watch;

use super::zset::ZDb;
use super::{lookup, CommandDef, Group};
use crate::keyspace::TAG_ZSET;
use crate::state::Shared;
use crate::zindex::ZCache;

/// Sorted sets of at least this many members have a missing index built
/// off the worker (a rebuild of this many costs about half a millisecond
/// with the records in memory; smaller ones are rebuilt in place).
pub(crate) const BUILD_OFF_WORKER: usize = 1024;

/// Most keys of one command looked at.
const MAX_KEYS: usize = 16;

/// Most builds one command waits for before it rebuilds in place.
pub(crate) const MAX_ROUNDS: usize = 4;

thread_local! {
    /// Whether the command running on this thread is inside a
    /// [`Deferring`] scope.
    static DEFERRING: Cell<bool> = const { Cell::new(false) };
    /// The index that command left to be built: (generation, key).
    static WANTED: RefCell<Option<(u64, Vec<u8>)>> = const { RefCell::new(None) };
}

/// While alive (and entered `on`), a big sorted set's index that
/// `ZDb::load` finds missing is not rebuilt: the load records the key
/// ([`defer`]) and fails, and [`Deferring::wanted`] then names it.
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

    /// The index the command stopped at, if it stopped at one; leaves the
    /// scope.
    #[inline]
    pub(crate) fn wanted(self) -> Option<(u64, Vec<u8>)> {
        if !self.on {
            return None;
        }
        WANTED.with(|w| w.borrow_mut().take())
    }
}

impl Drop for Deferring {
    fn drop(&mut self) {
        if self.on {
            DEFERRING.with(|d| d.set(false));
            WANTED.with(|w| w.borrow_mut().take());
        }
    }
}

/// Whether `cmd` may stop to have an index built off the worker: the
/// sorted-set and geo commands, SORT and MEMORY (USAGE), none of which
/// has any effect before it loads its sorted sets.
#[inline]
pub(crate) fn may_defer(cmd: &CommandDef) -> bool {
    matches!(cmd.group, Group::SortedSet | Group::Geo)
        || matches!(cmd.name, "sort" | "sort_ro" | "memory")
}

/// Whether the command running on this thread is inside a [`Deferring`]
/// scope.
#[inline]
pub(crate) fn deferring() -> bool {
    DEFERRING.with(|d| d.get())
}

/// Called by `ZDb::load` on a set of at least [`BUILD_OFF_WORKER`] members
/// whose index is not cached: inside a [`Deferring`] scope, records the key
/// and answers true (the load then fails and the command stops); outside,
/// false (the load rebuilds in place).
pub(crate) fn defer(generation: u64, key: &[u8]) -> bool {
    deferring() && {
        WANTED.with(|w| *w.borrow_mut() = Some((generation, key.to_vec())));
        true
    }
}

/// The sorted sets of at least [`BUILD_OFF_WORKER`] members that command
/// `args` (on database `dbi`) names as keys and whose index the cache
/// lacks at their current version, with the database's generation; none
/// for any command outside the sorted-set and geo groups.
pub(crate) fn missing(shared: &Shared, dbi: usize, args: &Args<'_>) -> (u64, Vec<Vec<u8>>) {
    let Some(def) = lookup(&args[0]) else {
        return (0, Vec::new());
    };
    if !matches!(def.group, Group::SortedSet | Group::Geo) {
        return (0, Vec::new());
    }
    let slot = shared.keyspace.read(dbi);
    let Some(z) = ZDb::of(&slot) else {
        return (0, Vec::new());
    };
    let cache = ZCache::global();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut look = |key: &[u8]| {
        let Some(meta) = z.db.meta(key) else {
            return;
        };
        let big = matches!(meta.kind,
            KeyKind::Map { tag: TAG_ZSET, len, .. } if len >= BUILD_OFF_WORKER);
        if big
            && !cache.holds(z.generation, key, meta.version)
            && !keys.iter().any(|k| k[..] == key[..])
        {
            keys.push(key.to_vec());
        }
    };
    // A STORE command's destination (always `args[1]`) is replaced, never
    // read: not built.
    let dst = def.name.ends_with("store").then_some(1);
    // The movable-key rules, else the table's positions (GEORADIUS's
    // source too, which those rules leave out; no allocation on the path
    // every ZADD takes).
    let movable = if def.flags & super::flags::MOVABLE_KEYS != 0 {
        let cmd: Vec<&[u8]> = args.iter().collect();
        super::server::movable_keys(def.name, &cmd)
    } else {
        Vec::new()
    };
    let table = movable.is_empty().then(|| def.key_positions(args.len()));
    for i in movable
        .into_iter()
        .chain(table.into_iter().flatten())
        .filter(|&i| Some(i) != dst)
        .take(MAX_KEYS)
    {
        look(&args[i]);
    }
    (z.generation, keys)
}

/// Builds of one set in flight, by (generation, key): a connection that
/// finds one waits for it instead of building the same index again.
type InFlight = Mutex<HashMap<(u64, Vec<u8>), watch::Receiver<()>>>;

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
    id: (u64, Vec<u8>),
    _done: watch::Sender<()>,
}

impl Drop for Building {
    fn drop(&mut self) {
        in_flight().lock().remove(&self.id);
    }
}

/// Builds the indexes of `keys` (of database `dbi` at `generation`, as
/// [`missing`] found them) on the blocking pool and checks them into the
/// cache; returns once each is built, found built by another connection,
/// or given up (a write came in meanwhile, the database changed, a read
/// failed: the command then rebuilds in place, and reports the error).
pub(crate) async fn build(shared: Arc<Shared>, dbi: usize, generation: u64, keys: Vec<Vec<u8>>) {
    for key in keys {
        let id = (generation, key);
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
                // At most BUILDS_AT_ONCE builds run (each holds a set's
                // members and index in memory); the permit and the
                // in-flight entry go with the task, so waiters wake when
                // the build ends even if this connection is gone by then.
                let Ok(permit) = builds_at_once().clone().acquire_owned().await else {
                    return;
                };
                let shared = shared.clone();
                let key = id.1;
                let _ = tokio::task::spawn_blocking(move || {
                    let _held = (building, permit);
                    let slot = shared.keyspace.read(dbi);
                    if let Some(z) = ZDb::of(&slot).filter(|z| z.generation == generation) {
                        match z.build_index(&key) {
                            Ok(true) => {
                                shared
                                    .stats
                                    .zset_index_builds
                                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            Ok(false) => {}
                            Err(e) => {
                                tracing::debug!(error = ?e, "a sorted set's index was not built off the worker");
                            }
                        }
                    }
                })
                .await;
            }
        }
    }
}
