//! Blocking operations (BLPOP, BLMOVE, BLMPOP, BZPOPMIN, BZMPOP ...): the
//! registry of clients waiting for keys, and the protocol between a
//! handler, the connection loop and the writers that wake them.
//!
//! The one idea a reader needs: **a blocked command is re-run, not
//! resumed.** A handler that finds nothing to serve registers a waiter and
//! returns; the connection loop parks (reading nothing else, as Redis
//! does), and on a wakeup runs the very same command again. The re-run
//! either serves the client or blocks again, keeping its place in line.
//!
//! # Using it from a command (the whole API)
//!
//! 1. Parse the timeout with [`parse_timeout`] (seconds, fractions allowed,
//!    0 = forever, Redis's error texts).
//! 2. Take the stripe locks of the keys, try to serve. If something was
//!    served, reply and return as usual.
//! 3. Otherwise call [`block_on`]`(ctx, keys, timeout)` **while still
//!    holding the stripe locks**, write no reply, and return `Ok(())`. The
//!    handler is run again with the same arguments when a key is signalled;
//!    on a re-run `block_on` keeps the first call's waiter (its place in
//!    each key's FIFO queue and its deadline).
//! 4. Every writer that makes a key servable (a push to a list, a ZADD to a
//!    sorted set, a RENAME/COPY/MOVE onto the key) calls
//!    [`Blocking::signal`]`(db, key)` after its write, while holding or
//!    after releasing the key's stripe. With no blocked client anywhere
//!    this is one atomic load. SWAPDB, which changes every key of two
//!    databases at once, calls [`Blocking::signal_db`].
//!
//! A re-run ([`Blocking::is_blocked`] is true for the client) should treat a
//! key of another type as empty: Redis keeps the client blocked.
//!
//! Inside MULTI/EXEC a blocking command must not park: the executor
//! (`crate::tx`) treats [`After::Block`] as an immediate answer (calls
//! [`Blocking::finish`], replies a null bulk for BLMOVE / BRPOPLPUSH and a
//! null array otherwise), as Redis does.
//!
//! On timeout the connection loop replies with a null array (RESP2 `*-1`,
//! RESP3 `_`), which is what every blocking list and sorted-set command of
//! Redis 7.0 replies; the handler is not run again.
//!
//! # Why no wakeup is lost, and why the order holds
//! A waiter is registered under the stripe lock of the keys it checked, so
//! a push that lands after the check finds it registered. [`Blocking::signal`]
//! wakes the first waiter of the key's queue that has not been woken yet
//! (FIFO: the order in which clients blocked) and marks it. The mark stays
//! while the woken client re-runs; the re-run clears it only when it blocks
//! again ([`block_on`], under the keys' stripe locks, so a push after that
//! check wakes it again), or leaves with [`Blocking::finish`] when served,
//! timed out, unblocked or gone, which signals its keys again: an element
//! its wakeup was meant for goes to the next in line.
//!
//! While a woken waiter has not re-run, nobody behind it in a key's queue
//! may take from that key ([`Blocking::may_take`]; a client that is not
//! blocked counts as behind everyone): a later waiter woken by a second
//! push must not overtake it, however the threads are scheduled. The one
//! behind blocks again and is woken when the one ahead finishes. A re-run
//! that skips a key because it holds another type (a BZPOPMIN woken by an
//! RPUSH) passes the wakeup on to the next waiter behind it
//! ([`Blocking::pass_on`]), so a BLPOP further back is not left waiting
//! while its list holds elements.
//!
//! Wakeups are therefore "at least once": a woken client that finds the
//! key empty (another client took the element first) simply blocks again.
//!
//! # In a replicated group (`crate::repl`)
//! A blocking command is a write, so its runs are log entries that every
//! node applies; an apply must never wait and must decide the same on
//! every node, whatever clients happen to be blocked there. While an entry
//! applies ([`Replay`]), [`block_on`] registers nobody and only records
//! the keys and the timeout (the entry answers "would block" with them),
//! [`Blocking::may_take`] always allows (the registry differs between
//! nodes), [`Blocking::pass_on`] records the key for the proposer, and
//! [`Blocking::is_blocked`] says whether the entry is a re-run. The client
//! itself waits on the node it is connected to: that node registers its
//! waiter (above, unchanged) and is woken by the entries it applies, then
//! proposes the command again (`crate::conn`).
//!
//! # Why keys are served in the order they became ready
//! Redis serves blocked clients after each command (or EXEC), key by key in
//! the order the keys became ready, and a served BLMOVE that pushes onto
//! another waited key makes that key ready last. Here woken clients re-run
//! on their own connections, possibly on two threads at once, so the
//! registry keeps woken waiters in a *line*: a signal puts the waiter it
//! wakes at the back, and only the first of the line holds the *turn* and
//! re-runs; the others wait parked. The turn passes on when the holder
//! blocks again or finishes. When it finishes (served, say), the wakeups
//! passed on to the next waiters of its keys take its place at the front,
//! so a key keeps serving its queue before the next ready key is looked at,
//! as in Redis; a wakeup passed on by [`Blocking::pass_on`] goes right
//! behind the holder. A holder that does not re-run within
//! [`TURN_PATIENCE`] (its connection stuck writing to a client that does
//! not read, say) is stepped over, so one slow client cannot hold up
//! everyone else's blocked commands; it re-runs whenever it gets to it.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use basalt_resp::Args;

use crate::commands::{int_arg, is, sub_arity, After, Ctx, Error, Result};

/// How long the first woken waiter may hold the turn without re-running
/// before the next in line is let through (see the module docs).
pub const TURN_PATIENCE: Duration = Duration::from_millis(50);

/// How a parked client was released by CLIENT UNBLOCK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unblock {
    /// Not released: a key was signalled, re-run the command.
    No,
    /// CLIENT UNBLOCK id [TIMEOUT]: reply as on timeout.
    Timeout,
    /// CLIENT UNBLOCK id ERROR: reply `-UNBLOCKED ...`.
    Error,
}

thread_local! {
    /// Set while a replicated entry applies on this thread.
    static REPLAY: RefCell<Option<ReplayState>> = const { RefCell::new(None) };
}

#[derive(Default)]
struct ReplayState {
    rerun: bool,
    blocked: Option<(Vec<Vec<u8>>, Option<Duration>)>,
    passed: Vec<Vec<u8>>,
}

/// The blocking side of one replicated entry applying on this thread (see
/// the module docs); ends when dropped.
#[derive(Debug)]
pub struct Replay(());

impl Replay {
    /// Starts it; `rerun`: the entry re-runs a blocked client's command.
    pub fn start(rerun: bool) -> Replay {
        REPLAY.with(|r| {
            *r.borrow_mut() = Some(ReplayState {
                rerun,
                ..Default::default()
            })
        });
        Replay(())
    }

    /// What the last command that would have blocked waited for: its keys
    /// and timeout (`None`: forever). Clears it.
    pub fn take_blocked(&self) -> Option<(Vec<Vec<u8>>, Option<Duration>)> {
        REPLAY.with(|r| r.borrow_mut().as_mut()?.blocked.take())
    }

    /// The keys a re-run skipped for holding another type. Clears them.
    pub fn take_passed(&self) -> Vec<Vec<u8>> {
        REPLAY.with(|r| {
            r.borrow_mut()
                .as_mut()
                .map(|s| std::mem::take(&mut s.passed))
                .unwrap_or_default()
        })
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        REPLAY.with(|r| *r.borrow_mut() = None);
    }
}

/// Whether a replicated entry is applying on this thread (a command that
/// would wait answers at once there).
pub fn applying() -> bool {
    replaying().is_some()
}

/// `Some(whether the entry is a re-run)` while an entry applies here.
fn replaying() -> Option<bool> {
    REPLAY.with(|r| r.borrow().as_ref().map(|s| s.rerun))
}

/// One blocked client.
#[derive(Debug)]
pub struct Waiter {
    client: u64,
    db: usize,
    keys: Vec<Vec<u8>>,
    deadline: Option<Instant>,
    /// Woken by a signal (or CLIENT UNBLOCK), and its re-run has neither
    /// blocked again nor finished: signals skip it, and nobody behind it
    /// may take from its keys.
    woken: AtomicBool,
    /// Holds the turn: first in the line of woken waiters (or stepped over
    /// while holding it), so its re-run may go ahead.
    turn: AtomicBool,
    /// 0 = no, 1 = CLIENT UNBLOCK TIMEOUT, 2 = CLIENT UNBLOCK ERROR.
    unblock: AtomicU8,
    notify: Notify,
    /// What the first run decided and its re-runs must reuse (XREAD's `$`
    /// ids: the last ids when it blocked, not when it is woken).
    memo: parking_lot::Mutex<Option<Vec<u8>>>,
}

impl Waiter {
    /// When the wait ends without a signal (`None` = never).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Resolves at the next wakeup or grant of the turn (or at once if one
    /// came since the last call). Cancel-safe. Then check [`Self::has_turn`]
    /// and [`Self::unblock_reason`].
    pub async fn woken(&self) {
        self.notify.notified().await
    }

    /// Whether its re-run may go ahead: it holds the turn.
    pub fn has_turn(&self) -> bool {
        self.turn.load(Ordering::SeqCst)
    }

    /// Whether it was woken and waits in line for the turn.
    pub fn in_line(&self) -> bool {
        self.woken.load(Ordering::SeqCst) && !self.has_turn()
    }

    /// Read by the connection after a wakeup, before re-running: says
    /// whether CLIENT UNBLOCK released it. (The "woken" mark stays until
    /// the re-run blocks again or finishes.)
    pub fn unblock_reason(&self) -> Unblock {
        match self.unblock.load(Ordering::SeqCst) {
            0 => Unblock::No,
            1 => Unblock::Timeout,
            _ => Unblock::Error,
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// (db, key) -> waiters in the order they blocked.
    by_key: HashMap<(usize, Vec<u8>), VecDeque<Arc<Waiter>>>,
    /// client id -> its waiter (a client waits for one command at a time).
    by_client: HashMap<u64, Arc<Waiter>>,
    /// Woken waiters in the order their keys became ready; the first holds
    /// the turn (module docs).
    line: VecDeque<Arc<Waiter>>,
    /// When the first of `line` was given the turn.
    turn_since: Option<Instant>,
}

/// The registry of blocked clients, one per server (in [`crate::Shared`]).
#[derive(Debug, Default)]
pub struct Blocking {
    inner: Mutex<Inner>,
    /// Number of blocked clients: lets [`Blocking::signal`] skip the lock.
    count: AtomicUsize,
    /// Tasks off the connection loop waiting for keys (HTTP long polls).
    watches: KeyWatches,
}

/// Tasks that wait for a key to be signalled without being a blocked
/// client: HTTP long polls and event streams (`crate::http`). They take
/// no place in any key's line and re-check by themselves when woken, so a
/// signal simply wakes all of a key's watchers; a wakeup that comes while
/// a watcher is not waiting is kept for its next wait (`Notify`'s permit),
/// so one between its check and its wait is not lost. Empty almost
/// always: a signal then costs one atomic load.
#[derive(Debug, Default)]
struct KeyWatches {
    by_key: Mutex<WakeupsByKey>,
    count: AtomicUsize,
}

/// (db, key) -> the watchers' wakeups.
type WakeupsByKey = HashMap<(usize, Vec<u8>), Vec<Arc<Notify>>>;

/// A registration of [`Blocking::watch`]; unregisters when dropped.
#[derive(Debug)]
pub struct KeyWatch<'a> {
    blocking: &'a Blocking,
    db: usize,
    keys: Vec<Vec<u8>>,
    notify: Arc<Notify>,
}

impl KeyWatch<'_> {
    /// Waits until one of the keys is signalled (at once if one was since
    /// the last wait).
    pub async fn notified(&self) {
        self.notify.notified().await
    }
}

impl Drop for KeyWatch<'_> {
    fn drop(&mut self) {
        let w = &self.blocking.watches;
        let mut by_key = w.by_key.lock();
        for k in self.keys.drain(..) {
            let entry = (self.db, k);
            if let Some(list) = by_key.get_mut(&entry) {
                list.retain(|n| !Arc::ptr_eq(n, &self.notify));
                if list.is_empty() {
                    by_key.remove(&entry);
                }
            }
        }
        w.count.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Blocking {
    /// Number of blocked clients (INFO `blocked_clients`).
    pub fn blocked_clients(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Registers a task (not a client) that waits for any of `keys` of
    /// `db` to be signalled: see [`KeyWatch`]. Register before checking
    /// the keys, so that a write after the check wakes it.
    pub fn watch(&self, db: usize, keys: &[Vec<u8>]) -> KeyWatch<'_> {
        let notify = Arc::new(Notify::new());
        let mut by_key = self.watches.by_key.lock();
        for k in keys {
            by_key
                .entry((db, k.clone()))
                .or_default()
                .push(notify.clone());
        }
        self.watches.count.fetch_add(1, Ordering::SeqCst);
        KeyWatch {
            blocking: self,
            db,
            keys: keys.to_vec(),
            notify,
        }
    }

    /// Registers `client` as waiting for any of `keys` in `db`, at the back
    /// of each key's queue; if it already waits (a re-run), keeps the
    /// existing waiter and its place.
    pub fn register(
        &self,
        client: u64,
        db: usize,
        keys: &[&[u8]],
        deadline: Option<Instant>,
    ) -> Arc<Waiter> {
        let mut inner = self.inner.lock();
        if let Some(w) = inner.by_client.get(&client).cloned() {
            // A re-run that blocks again.
            Self::rearm_locked(&mut inner, &w);
            return w;
        }
        let mut own: Vec<Vec<u8>> = Vec::with_capacity(keys.len());
        for k in keys {
            if !own.iter().any(|o| o == k) {
                own.push(k.to_vec());
            }
        }
        let w = Arc::new(Waiter {
            client,
            db,
            keys: own,
            deadline,
            woken: AtomicBool::new(false),
            turn: AtomicBool::new(false),
            unblock: AtomicU8::new(0),
            notify: Notify::new(),
            memo: parking_lot::Mutex::new(None),
        });
        for k in &w.keys {
            inner
                .by_key
                .entry((db, k.clone()))
                .or_default()
                .push_back(w.clone());
        }
        inner.by_client.insert(client, w.clone());
        self.count.fetch_add(1, Ordering::SeqCst);
        w
    }

    /// A blocked `client` is about to run its command again off the
    /// connection loop (a proposal in a replicated group): a signal from
    /// now on wakes it again, and the next in line gets the turn, as when
    /// a re-run blocks again. Returns whether it was blocked.
    pub fn rearm(&self, client: u64) -> bool {
        if self.count.load(Ordering::SeqCst) == 0 {
            return false;
        }
        let mut inner = self.inner.lock();
        let Some(w) = inner.by_client.get(&client).cloned() else {
            return false;
        };
        Self::rearm_locked(&mut inner, &w);
        true
    }

    /// A signal from now on wakes `w` again, and the next in line gets the
    /// turn.
    fn rearm_locked(inner: &mut Inner, w: &Arc<Waiter>) {
        w.woken.store(false, Ordering::SeqCst);
        Self::leave_line(inner, w);
        Self::grant(inner);
    }

    /// Wakes the blocked `client` as a signal of one of its keys would (at
    /// the back of the line): a wakeup it may have missed while it was not
    /// registered yet.
    pub fn wake(&self, client: u64) {
        let mut inner = self.inner.lock();
        let Some(w) = inner.by_client.get(&client).cloned() else {
            return;
        };
        Self::wake_first(&mut inner.line, std::iter::once(&w), &mut None);
        Self::grant(&mut inner);
    }

    /// Whether `client` is blocked, i.e. the command running for it now is
    /// a re-run after a wakeup. A re-run skips keys of another type instead
    /// of failing: Redis keeps such a client blocked (a ZADD does not serve
    /// BLPOP), while the first run replies WRONGTYPE.
    pub fn is_blocked(&self, client: u64) -> bool {
        if let Some(rerun) = replaying() {
            return rerun;
        }
        self.count.load(Ordering::SeqCst) != 0 && self.inner.lock().by_client.contains_key(&client)
    }

    /// What the blocked `client`'s first run left for its re-runs.
    pub fn memo(&self, client: u64) -> Option<Vec<u8>> {
        self.waiter(client)?.memo.lock().clone()
    }

    /// Leaves `memo` for the re-runs of the blocked `client`'s command.
    pub fn set_memo(&self, client: u64, memo: Vec<u8>) {
        if let Some(w) = self.waiter(client) {
            *w.memo.lock() = Some(memo);
        }
    }

    /// The waiter of `client`, if it is blocked.
    pub fn waiter(&self, client: u64) -> Option<Arc<Waiter>> {
        self.inner.lock().by_client.get(&client).cloned()
    }

    /// Whether `client` may take from `key` of `db` now: no waiter ahead of
    /// it in the key's queue has been woken and not yet re-run. A client
    /// that is not waiting for the key counts as behind every waiter. A
    /// handler that may not take treats the key as empty (and blocks).
    pub fn may_take(&self, client: u64, db: usize, key: &[u8]) -> bool {
        if self.count.load(Ordering::SeqCst) == 0 || replaying().is_some() {
            return true;
        }
        let inner = self.inner.lock();
        let Some(queue) = Self::queue(&inner.by_key, db, key) else {
            return true;
        };
        for w in queue {
            if w.client == client {
                return true;
            }
            if w.woken.load(Ordering::SeqCst) {
                return false;
            }
        }
        true
    }

    /// A re-run of `client` skipped `key` because it holds another type:
    /// wakes the first waiter behind `client` in the key's queue not woken
    /// yet, which may want that type. Call it under the key's stripe lock.
    pub fn pass_on(&self, client: u64, db: usize, key: &[u8]) {
        if replaying().is_some() {
            REPLAY.with(|r| {
                if let Some(s) = r.borrow_mut().as_mut() {
                    s.passed.push(key.to_vec());
                }
            });
            return;
        }
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut inner = self.inner.lock();
        // Right behind the passer in the line: Redis goes on down the key's
        // queue before it looks at the next ready key.
        let mut at = inner
            .line
            .iter()
            .position(|w| w.client == client)
            .map(|i| i + 1);
        let Inner { by_key, line, .. } = &mut *inner;
        if let Some(queue) = Self::queue(by_key, db, key) {
            Self::wake_first(
                line,
                queue.iter().skip_while(|w| w.client != client).skip(1),
                &mut at,
            );
        }
        Self::grant(&mut inner);
    }

    /// A key of `db` may now serve a blocked client: wakes the first waiter
    /// of its queue not woken yet. Cheap when nobody is blocked.
    pub fn signal(&self, db: usize, key: &[u8]) {
        if self.watches.count.load(Ordering::SeqCst) != 0 {
            if let Some(list) = self.watches.by_key.lock().get(&(db, key.to_vec())) {
                list.iter().for_each(|n| n.notify_one());
            }
        }
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut inner = self.inner.lock();
        Self::signal_locked(&mut inner, db, key, &mut None);
        Self::grant(&mut inner);
    }

    /// The contents of database `db` were replaced wholesale (SWAPDB):
    /// signals every key of `db` that has waiters and that `exists` says
    /// now holds something (Redis's `scanDatabaseForReadyKeys`). A waiter
    /// whose key now holds another type re-runs and blocks again.
    pub fn signal_db(&self, db: usize, exists: impl Fn(&[u8]) -> bool) {
        if self.watches.count.load(Ordering::SeqCst) != 0 {
            for ((d, _), list) in self.watches.by_key.lock().iter() {
                if *d == db {
                    list.iter().for_each(|n| n.notify_one());
                }
            }
        }
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let keys: Vec<Vec<u8>> = self
            .inner
            .lock()
            .by_key
            .keys()
            .filter(|(d, _)| *d == db)
            .map(|(_, k)| k.clone())
            .collect();
        for k in keys {
            if exists(&k) {
                self.signal(db, &k);
            }
        }
    }

    /// Wakes the first waiter of `key` not woken yet and puts it in line at
    /// `*at` (then advanced), or at the back for `None`.
    fn signal_locked(inner: &mut Inner, db: usize, key: &[u8], at: &mut Option<usize>) {
        let Inner { by_key, line, .. } = inner;
        if let Some(queue) = Self::queue(by_key, db, key) {
            Self::wake_first(line, queue.iter(), at);
        }
    }

    /// The waiters of `key` in `db`, in the order they blocked.
    fn queue<'i>(
        by_key: &'i HashMap<(usize, Vec<u8>), VecDeque<Arc<Waiter>>>,
        db: usize,
        key: &[u8],
    ) -> Option<&'i VecDeque<Arc<Waiter>>> {
        // The map is keyed by owned keys; a lookup by (db, &[u8]) would need
        // a custom Borrow, and lookups only get here with clients blocked.
        by_key.get(&(db, key.to_vec()))
    }

    /// Wakes and marks the first of `waiters` not woken yet, and puts it in
    /// `line` at `*at` (then advanced) or, for `None`, at the back. Its
    /// connection is notified so that it can watch for a stalled turn.
    fn wake_first<'w>(
        line: &mut VecDeque<Arc<Waiter>>,
        mut waiters: impl Iterator<Item = &'w Arc<Waiter>>,
        at: &mut Option<usize>,
    ) {
        if let Some(w) = waiters.find(|w| !w.woken.load(Ordering::SeqCst)) {
            w.woken.store(true, Ordering::SeqCst);
            match at {
                Some(i) => {
                    line.insert((*i).min(line.len()), w.clone());
                    *i += 1;
                }
                None => line.push_back(w.clone()),
            }
            w.notify.notify_one();
        }
    }

    /// Gives the turn to the first of the line if it does not hold it yet.
    fn grant(inner: &mut Inner) {
        if let Some(first) = inner.line.front() {
            if !first.turn.swap(true, Ordering::SeqCst) {
                inner.turn_since = Some(Instant::now());
                first.notify.notify_one();
            }
        }
    }

    /// Takes `w` out of the line (and the turn from it); returns where it
    /// stood.
    fn leave_line(inner: &mut Inner, w: &Arc<Waiter>) -> Option<usize> {
        w.turn.store(false, Ordering::SeqCst);
        let i = inner.line.iter().position(|o| Arc::ptr_eq(o, w))?;
        inner.line.remove(i);
        Some(i)
    }

    /// Called by a connection that has waited in line for the turn: if the
    /// holder has kept it for [`TURN_PATIENCE`] without re-running, steps
    /// over it (it keeps its turn and re-runs when it can) and gives the
    /// turn to the next in line.
    pub fn step_over_stalled(&self) {
        let mut inner = self.inner.lock();
        let stalled = inner.line.front().is_some_and(|f| f.has_turn())
            && inner
                .turn_since
                .is_some_and(|t| t.elapsed() >= TURN_PATIENCE);
        if stalled {
            inner.line.pop_front();
            Self::grant(&mut inner);
        }
    }

    /// `client` is no longer blocked (served, timed out, unblocked or
    /// gone): removes its waiter and passes any wakeup on to the next
    /// waiter of each of its keys. Does nothing if it was not blocked.
    pub fn finish(&self, client: u64) {
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut inner = self.inner.lock();
        let Some(w) = inner.by_client.remove(&client) else {
            return;
        };
        self.count.fetch_sub(1, Ordering::SeqCst);
        // The wakeups passed on below take its place in the line.
        let mut at = Self::leave_line(&mut inner, &w);
        for k in &w.keys {
            let id = (w.db, k.clone());
            if let Some(q) = inner.by_key.get_mut(&id) {
                q.retain(|o| !Arc::ptr_eq(o, &w));
                if q.is_empty() {
                    inner.by_key.remove(&id);
                }
            }
        }
        for k in &w.keys {
            Self::signal_locked(&mut inner, w.db, k, &mut at);
        }
        Self::grant(&mut inner);
    }

    /// CLIENT UNBLOCK: releases `client` if it is blocked. Returns whether
    /// it was.
    pub fn unblock(&self, client: u64, how: Unblock) -> bool {
        let inner = self.inner.lock();
        let Some(w) = inner.by_client.get(&client) else {
            return false;
        };
        let v = match how {
            Unblock::No => return false,
            Unblock::Timeout => 1,
            Unblock::Error => 2,
        };
        w.unblock.store(v, Ordering::SeqCst);
        w.woken.store(true, Ordering::SeqCst);
        w.notify.notify_one();
        debug_assert_eq!(w.client, client);
        true
    }
}

/// Blocks the running command on `keys` (see the module docs): registers
/// the connection's waiter (or keeps the one of an earlier run) and tells
/// the connection loop to park. Call it while holding the keys' stripe
/// locks and write no reply.
pub fn block_on(ctx: &mut Ctx<'_>, keys: &[&[u8]], timeout: Option<Duration>) {
    ctx.after = Some(After::Block);
    let recorded = REPLAY.with(|r| match r.borrow_mut().as_mut() {
        Some(s) => {
            s.blocked = Some((keys.iter().map(|k| k.to_vec()).collect(), timeout));
            true
        }
        None => false,
    });
    if recorded {
        return;
    }
    let deadline = timeout.map(|t| Instant::now() + t);
    ctx.shared
        .blocking
        .register(ctx.conn.info.id, ctx.conn.db, keys, deadline);
}

/// CLIENT UNBLOCK <id> [TIMEOUT|ERROR]: `:1` if the client was blocked.
pub fn client_unblock(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    sub_arity("client|unblock", -3, &args)?;
    if args.len() > 4 {
        return Err(Error::err(
            "unknown subcommand or wrong number of arguments for 'UNBLOCK'. Try CLIENT HELP.",
        ));
    }
    let id = int_arg(&args[2])?;
    let how = match args.get(3) {
        None => Unblock::Timeout,
        Some(a) if is(a, "timeout") => Unblock::Timeout,
        Some(a) if is(a, "error") => Unblock::Error,
        Some(_) => {
            return Err(Error::err(
                "CLIENT UNBLOCK reason should be TIMEOUT or ERROR",
            ))
        }
    };
    let done = u64::try_from(id).is_ok_and(|id| ctx.shared.blocking.unblock(id, how));
    ctx.int(done as i64);
    Ok(())
}

/// Redis 7.0's `getTimeoutFromObjectOrReply` for seconds: a float as
/// `strtold` reads it, in whole milliseconds rounding up, computed in
/// `long double` as Redis does; `None` for 0 (block forever). A value
/// whose milliseconds do not fit a long long is "negative" (the
/// conversion gives `LLONG_MIN` on the platforms Redis runs on), and one
/// that fits but overflows when Redis adds the current time blocks for
/// good there (its deadline wraps below every clock reading, and 7.0
/// never times it out): `None` here too, not a `Duration` past what an
/// `Instant` can hold.
pub fn parse_timeout(arg: &[u8], now_ms: u64) -> Result<Option<Duration>> {
    let bad = || Error::err("timeout is not a float or out of range");
    // What `string2ld` accepts (hex floats included).
    let secs = crate::commands::cnum::LongDouble::parse(arg).ok_or_else(bad)?;
    let ms = match secs.ceil_thousandths() {
        Some(ms) if ms >= 0 => ms,
        _ => return Err(Error::err("timeout is negative")),
    };
    if ms == 0 || ms > i64::MAX - now_ms as i64 {
        return Ok(None);
    }
    Ok(Some(Duration::from_millis(ms as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_follow_redis() {
        let now = 1_700_000_000_000;
        assert_eq!(parse_timeout(b"0", now).unwrap(), None);
        assert_eq!(parse_timeout(b"-0.0001", now).unwrap(), None);
        assert_eq!(
            parse_timeout(b"0.0001", now).unwrap(),
            Some(Duration::from_millis(1))
        );
        assert_eq!(
            parse_timeout(b"1.5", now).unwrap(),
            Some(Duration::from_millis(1500))
        );
        // Up to LLONG_MAX ms is taken, exactly (redis-server 7.0.15 side by
        // side); past what a deadline can hold, it waits for good.
        for forever in [&b"9223372036854775"[..], b"9223372036854775.807"] {
            assert_eq!(parse_timeout(forever, now).unwrap(), None, "{forever:?}");
        }
        assert_eq!(
            parse_timeout(b"9223300000000000", now).unwrap(),
            Some(Duration::from_millis(9_223_300_000_000_000_000))
        );
        for neg in [
            &b"-1"[..],
            b"inf",
            b"-inf",
            b"1e400",
            b"9.3e15",
            b"9223372036854775.808",
            b"9223372036854776",
            b"-9223372036854775808.5",
        ] {
            assert_eq!(
                parse_timeout(neg, now).unwrap_err().message(),
                "ERR timeout is negative"
            );
        }
        for bad in [&b"abc"[..], b"", b" 1", b"1 ", b"nan", b"1.5e"] {
            assert_eq!(
                parse_timeout(bad, now).unwrap_err().message(),
                "ERR timeout is not a float or out of range"
            );
        }
    }

    #[test]
    fn signal_wakes_in_fifo_order_and_finish_passes_it_on() {
        let b = Blocking::default();
        let w1 = b.register(1, 0, &[b"k"], None);
        let w2 = b.register(2, 0, &[b"k", b"j"], None);
        assert_eq!(b.blocked_clients(), 2);
        b.signal(0, b"k");
        assert!(w1.woken.load(Ordering::SeqCst));
        assert!(!w2.woken.load(Ordering::SeqCst));
        // A second signal goes to the next waiter, not the already-woken one.
        b.signal(0, b"k");
        assert!(w2.woken.load(Ordering::SeqCst));
        assert_eq!(w2.unblock_reason(), Unblock::No);
        // w2's re-run found nothing and blocked again: signals reach it.
        b.register(2, 0, &[b"k", b"j"], None);
        assert!(!w2.woken.load(Ordering::SeqCst));
        // w1 leaves without serving: its wakeup passes on to w2.
        b.finish(1);
        assert!(w2.woken.load(Ordering::SeqCst));
        b.finish(2);
        assert_eq!(b.blocked_clients(), 0);
        assert!(b.inner.lock().by_key.is_empty());
    }

    #[test]
    fn a_woken_waiter_is_not_overtaken_by_one_behind_it() {
        let b = Blocking::default();
        let _w1 = b.register(1, 0, &[b"k"], None);
        let w2 = b.register(2, 0, &[b"k"], None);
        assert!(b.may_take(1, 0, b"k") && b.may_take(2, 0, b"k"));
        // Two pushes wake both; w2's re-run comes first and must wait.
        b.signal(0, b"k");
        b.signal(0, b"k");
        assert!(b.may_take(1, 0, b"k"));
        assert!(!b.may_take(2, 0, b"k"), "w1 is ahead and woken");
        assert!(!b.may_take(9, 0, b"k"), "a newcomer is behind everyone");
        assert!(b.may_take(2, 0, b"other"), "other keys are not held up");
        assert!(b.may_take(2, 1, b"k"), "nor the same key in another db");
        // w2 blocks again; when w1 is served and leaves, w2 is woken.
        b.register(2, 0, &[b"k"], None);
        assert!(!w2.woken.load(Ordering::SeqCst));
        b.finish(1);
        assert!(w2.woken.load(Ordering::SeqCst));
        assert!(b.may_take(2, 0, b"k"));
    }

    #[test]
    fn a_rerun_that_skips_a_key_of_another_type_passes_the_wakeup_back() {
        let b = Blocking::default();
        let w1 = b.register(1, 0, &[b"k"], None);
        let w2 = b.register(2, 0, &[b"k"], None);
        let w3 = b.register(3, 0, &[b"k"], None);
        b.signal(0, b"k");
        assert!(w1.woken.load(Ordering::SeqCst));
        // w1 wanted a sorted set and found a list: the next in line is woken.
        b.pass_on(1, 0, b"k");
        assert!(w2.woken.load(Ordering::SeqCst));
        assert!(!w3.woken.load(Ordering::SeqCst));
        b.register(1, 0, &[b"k"], None);
        // The next signal goes to w1 again (first not woken), the one after
        // to w3 (w2 has not re-run yet).
        b.signal(0, b"k");
        assert!(w1.woken.load(Ordering::SeqCst));
        b.signal(0, b"k");
        assert!(w3.woken.load(Ordering::SeqCst));
        // Passing on never wakes anyone ahead: w3 is last, nobody follows.
        b.register(1, 0, &[b"k"], None);
        b.register(3, 0, &[b"k"], None);
        b.pass_on(3, 0, b"k");
        assert!(!w1.woken.load(Ordering::SeqCst));
        assert!(!w3.woken.load(Ordering::SeqCst));
    }

    fn line(b: &Blocking) -> Vec<u64> {
        b.inner.lock().line.iter().map(|w| w.client).collect()
    }

    #[test]
    fn woken_waiters_take_turns_in_the_order_their_keys_became_ready() {
        let b = Blocking::default();
        let w1 = b.register(1, 0, &[b"q"], None);
        let w2 = b.register(2, 0, &[b"r"], None);
        b.signal(0, b"r");
        b.signal(0, b"q");
        assert_eq!(line(&b), [2, 1]);
        assert!(w2.has_turn() && !w2.in_line());
        assert!(!w1.has_turn() && w1.in_line());
        // w2 is served and leaves: w1 gets the turn.
        b.finish(2);
        assert!(w1.has_turn());
        assert_eq!(line(&b), [1]);
        // w1's re-run blocks again: it leaves the line and the turn.
        b.register(1, 0, &[b"q"], None);
        assert!(!w1.has_turn() && !w1.in_line());
        assert!(line(&b).is_empty());
    }

    #[test]
    fn a_finished_holder_hands_its_place_to_the_next_waiter_of_its_key() {
        let b = Blocking::default();
        let _a1 = b.register(1, 0, &[b"a"], None);
        let a2 = b.register(2, 0, &[b"a"], None);
        let _m = b.register(3, 0, &[b"b"], None);
        b.signal(0, b"a");
        b.signal(0, b"b");
        assert_eq!(line(&b), [1, 3]);
        // a1 served: the next waiter of `a` goes first, before the mover.
        b.finish(1);
        assert_eq!(line(&b), [2, 3]);
        assert!(a2.has_turn());
        // A wakeup passed on by a holder goes right behind it.
        let _z = b.register(4, 0, &[b"a"], None);
        b.pass_on(2, 0, b"a");
        assert_eq!(line(&b), [2, 4, 3]);
    }

    #[test]
    fn a_holder_that_stalls_is_stepped_over_after_the_patience() {
        let b = Blocking::default();
        let w1 = b.register(1, 0, &[b"x"], None);
        let w2 = b.register(2, 0, &[b"y"], None);
        b.signal(0, b"x");
        b.signal(0, b"y");
        b.step_over_stalled();
        assert!(w1.has_turn() && !w2.has_turn(), "not before the patience");
        b.inner.lock().turn_since = Some(Instant::now() - TURN_PATIENCE);
        b.step_over_stalled();
        assert!(w2.has_turn(), "the next one goes ahead");
        assert!(w1.has_turn(), "the stalled one may still re-run");
        assert_eq!(line(&b), [2]);
        // When the stalled one finally finishes, nothing is disturbed.
        b.finish(1);
        assert_eq!(line(&b), [2]);
        assert!(w2.has_turn());
    }
}
