//! Client-side caching (CLIENT TRACKING, Redis 7.0 `tracking.c`): which
//! clients may hold which keys, and the invalidation messages they get
//! when those keys change.
//!
//! The one idea a reader needs: **every key modification already passes
//! `Hub::notify`** (the keyspace-notification hook that commands, EXEC,
//! scripts, the HTTP API and the expiry hook all call), so that is where
//! invalidation hooks in. With nobody tracking, the cost there is one
//! relaxed load of [`Tracking::active`]; reads pay one relaxed load of the
//! client's own flag (`remember`).
//!
//! Two modes, as in Redis:
//! - default: after a read-only command the keys it named (from the
//!   command table's key positions) are remembered for the client; the
//!   first change of such a key sends `invalidate [key]` and forgets the
//!   key (every client that read it is told once).
//! - BCAST: the client names prefixes (none = every key); each change of a
//!   matching key is sent, nothing is remembered.
//!
//! Messages are RESP3 pushes on the tracking connection, or go to the
//! REDIRECT target: a RESP3 client as a push, a RESP2 client in Pub/Sub
//! mode as a message on `__redis__:invalidate`. A redirect target that has
//! gone away is reported to a RESP3 tracking client with
//! `tracking-redir-broken <id>` when a message would have been sent.
//!
//! The table is global, not per database, as in Redis: a key name changed
//! in any database invalidates it. Lock order: the table, then mailboxes.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use basalt_resp::Args;
use bytes::Bytes;
use parking_lot::Mutex;

use crate::commands::{flags, CommandDef};
use crate::pubsub::{modes, Hub};
use crate::state::ClientInfo;

thread_local! {
    /// The client whose command runs on this thread (0 = none): the
    /// "current client" NOLOOP and the after-the-reply ordering need.
    static CURRENT: Cell<u64> = const { Cell::new(0) };
}

/// Marks the client running a command on this thread until dropped.
#[derive(Debug)]
pub struct Running(u64);

/// Notes that client `id` runs a command on this thread.
#[inline]
pub fn running(id: u64) -> Running {
    Running(CURRENT.with(|c| c.replace(id)))
}

impl Drop for Running {
    #[inline]
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

fn current() -> u64 {
    CURRENT.with(|c| c.get())
}

/// One client's tracking options (CLIENT TRACKING ON ...).
#[derive(Debug, Default, Clone)]
pub struct Options {
    /// BCAST mode.
    pub bcast: bool,
    /// OPTIN: remember keys only after CLIENT CACHING YES.
    pub optin: bool,
    /// OPTOUT: remember keys unless CLIENT CACHING NO.
    pub optout: bool,
    /// Not told about its own changes.
    pub noloop: bool,
    /// REDIRECT target id (0 = none).
    pub redirect: u64,
    /// BCAST prefixes, in the order given.
    pub prefixes: Vec<Bytes>,
}

#[derive(Debug, Default)]
struct State {
    opts: Options,
    /// The redirect target, resolved when tracking was turned on.
    target: Weak<ClientInfo>,
    /// A message found the target gone (CLIENT TRACKINGINFO `broken_redirect`).
    broken: bool,
}

/// A client's tracking state (in its mailbox).
#[derive(Debug, Default)]
pub struct ClientTracking {
    on: AtomicBool,
    state: Mutex<State>,
}

impl ClientTracking {
    /// Whether CLIENT TRACKING is on (one relaxed load).
    #[inline]
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// The options in force (meaningless when off).
    pub fn options(&self) -> Options {
        self.state.lock().opts.clone()
    }

    /// Whether a message found the redirect target gone.
    pub fn broken_redirect(&self) -> bool {
        self.state.lock().broken
    }
}

type Clients = BTreeMap<u64, Weak<ClientInfo>>;

#[derive(Debug, Default)]
struct Table {
    /// key -> the clients that read it (default mode).
    keys: HashMap<Bytes, Clients>,
    /// Client ids stored across `keys` (INFO `tracking_total_items`).
    items: u64,
    /// BCAST prefix -> its clients.
    prefixes: BTreeMap<Bytes, Clients>,
}

/// The server-wide tracking table (in `Hub`).
#[derive(Debug, Default)]
pub struct Tracking {
    /// Clients with tracking on (INFO `tracking_clients`).
    clients: AtomicUsize,
    table: Mutex<Table>,
}

impl Tracking {
    /// Whether any client tracks (one relaxed load).
    #[inline]
    pub fn active(&self) -> bool {
        self.clients.load(Ordering::Relaxed) > 0
    }

    /// INFO `tracking_clients`.
    pub fn client_count(&self) -> usize {
        self.clients.load(Ordering::Relaxed)
    }

    /// INFO `tracking_total_keys`, `tracking_total_items`,
    /// `tracking_total_prefixes`.
    pub fn totals(&self) -> (usize, u64, usize) {
        let t = self.table.lock();
        (t.keys.len(), t.items, t.prefixes.len())
    }

    /// CLIENT TRACKING ON: replaces `client`'s options (`target` is the
    /// live redirect client, if `opts.redirect` is set).
    pub fn enable(&self, client: &Arc<ClientInfo>, opts: Options, target: Weak<ClientInfo>) {
        let ct = &client.pubsub.tracking;
        // Lock order: the table, then a client's state (as `invalidate`).
        let mut t = self.table.lock();
        let mut st = ct.state.lock();
        if !ct.on.swap(true, Ordering::Relaxed) {
            self.clients.fetch_add(1, Ordering::Relaxed);
        }
        if opts.bcast {
            let prefixes: Vec<Bytes> = if opts.prefixes.is_empty() {
                vec![Bytes::new()]
            } else {
                opts.prefixes.clone()
            };
            for p in prefixes {
                t.prefixes
                    .entry(p)
                    .or_default()
                    .insert(client.id, Arc::downgrade(client));
            }
        }
        // Prefixes accumulate across calls (Redis adds to the client's set).
        let mut all = if st.opts.bcast && opts.bcast {
            std::mem::take(&mut st.opts.prefixes)
        } else {
            Vec::new()
        };
        for p in &opts.prefixes {
            if !all.contains(p) {
                all.push(p.clone());
            }
        }
        if opts.bcast && all.is_empty() {
            // BCAST without PREFIX: every key (the empty prefix).
            all.push(Bytes::new());
        }
        st.opts = Options {
            prefixes: all,
            ..opts
        };
        st.target = target;
        st.broken = false;
    }

    /// CLIENT TRACKING OFF, RESET, disconnect. Default-mode entries are
    /// left in the table and dropped lazily, as Redis does.
    pub fn disable(&self, client: &ClientInfo) {
        let ct = &client.pubsub.tracking;
        let mut t = self.table.lock();
        let mut st = ct.state.lock();
        if !ct.on.swap(false, Ordering::Relaxed) {
            return;
        }
        self.clients.fetch_sub(1, Ordering::Relaxed);
        if st.opts.bcast {
            let mut prefixes = std::mem::take(&mut st.opts.prefixes);
            if prefixes.is_empty() {
                prefixes.push(Bytes::new());
            }
            for p in prefixes {
                if let Some(c) = t.prefixes.get_mut(&p) {
                    c.remove(&client.id);
                    if c.is_empty() {
                        t.prefixes.remove(&p);
                    }
                }
            }
        }
        st.opts = Options::default();
        st.target = Weak::new();
        st.broken = false;
        client
            .pubsub
            .modes
            .fetch_and(!modes::CACHING, Ordering::Relaxed);
    }

    /// `key` changed (any database): tells whoever may hold it.
    #[inline]
    pub fn invalidate(&self, hub: &Hub, key: &[u8]) {
        if self.active() {
            self.invalidate_slow(hub, key);
        }
    }

    #[cold]
    fn invalidate_slow(&self, hub: &Hub, key: &[u8]) {
        let origin = current();
        let mut t = self.table.lock();
        let key = Bytes::copy_from_slice(key);
        for (prefix, clients) in &t.prefixes {
            if !key.starts_with(prefix) {
                continue;
            }
            for c in clients.values().filter_map(Weak::upgrade) {
                send(hub, &c, origin, Some(vec![key.clone()]), Some(prefix), true);
            }
        }
        let Some(readers) = t.keys.remove(&key) else {
            return;
        };
        t.items -= readers.len() as u64;
        for c in readers.values().filter_map(Weak::upgrade) {
            let opts_bcast = c.pubsub.tracking.state.lock().opts.bcast;
            // Keys read before a switch to BCAST are not reported.
            if c.pubsub.tracking.is_on() && !opts_bcast {
                send(hub, &c, origin, Some(vec![key.clone()]), None, true);
            }
        }
    }

    /// FLUSHDB / FLUSHALL: every tracking client gets the null
    /// invalidation ("every key"), and the table is emptied.
    pub fn flushed(&self, hub: &Hub, clients: &[Arc<ClientInfo>]) {
        if !self.active() {
            return;
        }
        let origin = current();
        {
            let mut t = self.table.lock();
            t.keys.clear();
            t.items = 0;
        }
        for c in clients {
            if c.pubsub.tracking.is_on() {
                send(hub, c, origin, None, None, false);
            }
        }
    }

    /// After read-only command `cmd` of `client` ran: remembers its keys
    /// (default mode, subject to OPTIN/OPTOUT and CLIENT CACHING).
    #[inline]
    pub fn remember(&self, client: &Arc<ClientInfo>, cmd: &CommandDef, args: &Args<'_>) {
        if client.pubsub.tracking.is_on() && cmd.flags & flags::RUNS_SCRIPT == 0 {
            self.remember_slow(client, cmd, args);
        }
    }

    #[cold]
    fn remember_slow(&self, client: &Arc<ClientInfo>, cmd: &CommandDef, args: &Args<'_>) {
        let opts = client.pubsub.tracking.options();
        if opts.bcast {
            return;
        }
        let caching = client.pubsub.modes.load(Ordering::Relaxed) & modes::CACHING != 0;
        if (opts.optin && !caching) || (opts.optout && caching) {
            return;
        }
        let keys = key_positions(cmd, args);
        if keys.is_empty() {
            return;
        }
        let mut t = self.table.lock();
        for i in keys {
            let ids = t.keys.entry(Bytes::copy_from_slice(&args[i])).or_default();
            if ids.insert(client.id, Arc::downgrade(client)).is_none() {
                t.items += 1;
            }
        }
    }
}

/// Sends one invalidation for tracking client `c` (to it or its redirect
/// target), as Redis's `sendTrackingMessage`. `noloop_applies`: skip it if
/// `c` is in NOLOOP mode and caused the change itself.
fn send(
    hub: &Hub,
    c: &Arc<ClientInfo>,
    origin: u64,
    keys: Option<Vec<Bytes>>,
    bcast: Option<&Bytes>,
    noloop_applies: bool,
) {
    let mut st = c.pubsub.tracking.state.lock();
    if noloop_applies && st.opts.noloop && c.id == origin {
        return;
    }
    let mut dest = c.clone();
    let mut redirected = false;
    if st.opts.redirect != 0 {
        match st
            .target
            .upgrade()
            .filter(|t| !t.pubsub.closed.load(Ordering::Relaxed))
        {
            Some(t) => {
                dest = t;
                redirected = true;
            }
            None => {
                st.broken = true;
                if c.resp.load(Ordering::Relaxed) == 3 {
                    hub.push_redir_broken(c, st.opts.redirect, c.id == origin);
                }
                return;
            }
        }
    }
    drop(st);
    let resp3 = dest.resp.load(Ordering::Relaxed) == 3;
    if !(resp3 || redirected && dest.pubsub.subscribed()) {
        // RESP2 without a redirect has no way to receive pushes.
        return;
    }
    hub.push_invalidation(&dest, keys, bcast.cloned(), dest.id == origin);
}

/// The argument positions of `cmd`'s keys, from the command table (and the
/// argument-dependent rules of the read-only commands with movable keys).
fn key_positions(cmd: &CommandDef, args: &Args<'_>) -> Vec<usize> {
    let argc = args.len();
    if cmd.flags & flags::MOVABLE_KEYS != 0 {
        let numkeys = |at: usize| -> Vec<usize> {
            let n = args
                .get(at)
                .and_then(crate::commands::parse_i64)
                .unwrap_or(0)
                .max(0) as usize;
            (at + 1..(at + 1 + n).min(argc)).collect()
        };
        return match cmd.name {
            "zunion" | "zinter" | "zdiff" | "sintercard" | "zintercard" => numkeys(1),
            "sort_ro" => vec![1],
            "xread" => match (1..argc).find(|&i| crate::commands::is(&args[i], "streams")) {
                Some(s) => {
                    let n = (argc - s - 1) / 2;
                    (s + 1..s + 1 + n).collect()
                }
                None => Vec::new(),
            },
            _ => Vec::new(),
        };
    }
    cmd.key_positions(argc).collect()
}
