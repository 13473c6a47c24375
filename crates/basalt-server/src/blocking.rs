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

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use basalt_resp::Args;

use crate::commands::{int_arg, is, sub_arity, After, Ctx, Error, Result};

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
    /// 0 = no, 1 = CLIENT UNBLOCK TIMEOUT, 2 = CLIENT UNBLOCK ERROR.
    unblock: AtomicU8,
    notify: Notify,
}

impl Waiter {
    /// When the wait ends without a signal (`None` = never).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Resolves at the next signal (or at once if one came since the last
    /// call). Cancel-safe.
    pub async fn woken(&self) {
        self.notify.notified().await
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
}

/// The registry of blocked clients, one per server (in [`crate::Shared`]).
#[derive(Debug, Default)]
pub struct Blocking {
    inner: Mutex<Inner>,
    /// Number of blocked clients: lets [`Blocking::signal`] skip the lock.
    count: AtomicUsize,
}

impl Blocking {
    /// Number of blocked clients (INFO `blocked_clients`).
    pub fn blocked_clients(&self) -> usize {
        self.count.load(Ordering::Relaxed)
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
        if let Some(w) = inner.by_client.get(&client) {
            // A re-run that blocks again: a signal from now on wakes it.
            w.woken.store(false, Ordering::SeqCst);
            return w.clone();
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
            unblock: AtomicU8::new(0),
            notify: Notify::new(),
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

    /// Whether `client` is blocked, i.e. the command running for it now is
    /// a re-run after a wakeup. A re-run skips keys of another type instead
    /// of failing: Redis keeps such a client blocked (a ZADD does not serve
    /// BLPOP), while the first run replies WRONGTYPE.
    pub fn is_blocked(&self, client: u64) -> bool {
        self.count.load(Ordering::SeqCst) != 0 && self.inner.lock().by_client.contains_key(&client)
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
        if self.count.load(Ordering::SeqCst) == 0 {
            return true;
        }
        let inner = self.inner.lock();
        let Some(queue) = Self::queue(&inner, db, key) else {
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
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let inner = self.inner.lock();
        if let Some(queue) = Self::queue(&inner, db, key) {
            Self::wake_first(queue.iter().skip_while(|w| w.client != client).skip(1));
        }
    }

    /// A key of `db` may now serve a blocked client: wakes the first waiter
    /// of its queue not woken yet. Cheap when nobody is blocked.
    pub fn signal(&self, db: usize, key: &[u8]) {
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let inner = self.inner.lock();
        Self::signal_locked(&inner, db, key);
    }

    /// The contents of database `db` were replaced wholesale (SWAPDB):
    /// signals every key of `db` that has waiters and that `exists` says
    /// now holds something (Redis's `scanDatabaseForReadyKeys`). A waiter
    /// whose key now holds another type re-runs and blocks again.
    pub fn signal_db(&self, db: usize, exists: impl Fn(&[u8]) -> bool) {
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

    fn signal_locked(inner: &Inner, db: usize, key: &[u8]) {
        if let Some(queue) = Self::queue(inner, db, key) {
            Self::wake_first(queue.iter());
        }
    }

    /// The waiters of `key` in `db`, in the order they blocked.
    fn queue<'i>(inner: &'i Inner, db: usize, key: &[u8]) -> Option<&'i VecDeque<Arc<Waiter>>> {
        // The map is keyed by owned keys; a lookup by (db, &[u8]) would need
        // a custom Borrow, and lookups only get here with clients blocked.
        inner.by_key.get(&(db, key.to_vec()))
    }

    /// Wakes and marks the first of `waiters` not woken yet.
    fn wake_first<'w>(mut waiters: impl Iterator<Item = &'w Arc<Waiter>>) {
        if let Some(w) = waiters.find(|w| !w.woken.load(Ordering::SeqCst)) {
            w.woken.store(true, Ordering::SeqCst);
            w.notify.notify_one();
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
            Self::signal_locked(&inner, w.db, k);
        }
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
    let deadline = timeout.map(|t| Instant::now() + t);
    ctx.shared
        .blocking
        .register(ctx.conn.info.id, ctx.conn.db, keys, deadline);
    ctx.after = Some(After::Block);
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

/// Redis's `getTimeoutFromObjectOrReply` for seconds: a float as `strtold`
/// reads it, turned into whole milliseconds rounding up; `None` for 0
/// (block forever).
pub fn parse_timeout(arg: &[u8], now_ms: u64) -> Result<Option<Duration>> {
    let bad = || Error::err("timeout is not a float or out of range");
    // What `string2ld` accepts (hex floats included), then in an f64, whose
    // range covers every timeout Redis can keep (past it: infinite).
    let secs = crate::commands::cnum::LongDouble::parse(arg)
        .ok_or_else(bad)?
        .to_f64();
    let ms = (secs * 1000.0).ceil();
    // Redis converts to a long long; values that do not fit come out as
    // LLONG_MIN on the platforms it runs on, hence "negative".
    if !(ms > -9.223_372_036_854_775e18 && ms < 9.223_372_036_854_775e18) || ms < 0.0 {
        return Err(Error::err("timeout is negative"));
    }
    let ms = ms as i64;
    if ms == 0 {
        return Ok(None);
    }
    if ms > i64::MAX - now_ms as i64 {
        return Err(Error::err("timeout is out of range"));
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
        for neg in [&b"-1"[..], b"inf", b"-inf", b"1e400", b"9.3e15"] {
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
}
