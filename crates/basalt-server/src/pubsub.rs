//! Pub/sub delivery: the registry of subscriptions ([`Hub`]), each client's
//! bounded queue of pending messages ([`Mailbox`]) and the output-buffer
//! limits that disconnect a subscriber that does not keep up.
//!
//! The one idea a reader needs: **PUBLISH never waits for a subscriber.** A
//! publisher appends the message to each receiver's mailbox (a short lock,
//! no I/O) and wakes its connection; the subscriber's own connection task
//! encodes and writes the messages (RESP2 arrays or RESP3 pushes). A
//! mailbox counts the bytes it holds until they are written to the socket;
//! past the `pubsub` class of `client-output-buffer-limit` (hard limit at
//! once, soft limit when exceeded for longer than its seconds) the
//! publisher marks the subscriber dead and asks its connection to close,
//! as Redis does with `freeClientAsync`.
//!
//! Lock order: the hub's registry lock, then a mailbox's locks. Publishing
//! may happen with engine locks held (keyspace events, the expiry
//! listener), so nothing here ever calls into the keyspace.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use basalt_resp::{Encoder, Protocol};
use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;

use crate::glob;
use crate::state::ClientInfo;

/// One output-buffer limit class: bytes (0 = none) and seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObufLimit {
    /// Disconnect as soon as this many bytes are pending. 0 = no limit.
    pub hard: u64,
    /// Disconnect once this many bytes stay pending for `soft_secs`. 0 = none.
    pub soft: u64,
    /// See `soft`.
    pub soft_secs: u64,
}

/// `client-output-buffer-limit` for the three classes Redis knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObufLimits {
    /// Normal clients (recorded; Basalt bounds their replies by backpressure).
    pub normal: ObufLimit,
    /// Replicas (recorded; there is no replication yet).
    pub replica: ObufLimit,
    /// Clients with subscriptions: enforced on their mailbox.
    pub pubsub: ObufLimit,
}

impl Default for ObufLimits {
    /// Redis's defaults: `normal 0 0 0 slave 256mb 64mb 60 pubsub 32mb 8mb 60`.
    fn default() -> Self {
        ObufLimits {
            normal: ObufLimit {
                hard: 0,
                soft: 0,
                soft_secs: 0,
            },
            replica: ObufLimit {
                hard: 256 << 20,
                soft: 64 << 20,
                soft_secs: 60,
            },
            pubsub: ObufLimit {
                hard: 32 << 20,
                soft: 8 << 20,
                soft_secs: 60,
            },
        }
    }
}

impl ObufLimits {
    /// Applies a `client-output-buffer-limit` value (`<class> <hard> <soft>
    /// <seconds>` repeated) to a copy of `self`, with Redis's error texts.
    pub fn parse_update(&self, value: &str) -> Result<ObufLimits, &'static str> {
        let words: Vec<&str> = value.split_whitespace().collect();
        if !words.len().is_multiple_of(4) {
            return Err("Wrong number of arguments in buffer limit configuration.");
        }
        let mut next = *self;
        for w in words.chunks(4) {
            let class = w[0].to_ascii_lowercase();
            let slot = match class.as_str() {
                "normal" => &mut next.normal,
                "slave" | "replica" => &mut next.replica,
                "pubsub" => &mut next.pubsub,
                _ => return Err("Invalid client class specified in buffer limit configuration."),
            };
            let bad = "Error in hard, soft or soft_seconds setting in buffer limit configuration.";
            let hard = crate::auth::parse_size(w[1]).ok_or(bad)?;
            let soft = crate::auth::parse_size(w[2]).ok_or(bad)?;
            let secs = w[3].parse::<i64>().ok().filter(|s| *s >= 0).ok_or(bad)? as u64;
            *slot = ObufLimit {
                hard,
                soft,
                soft_secs: secs,
            };
        }
        Ok(next)
    }

    /// The value CONFIG GET shows (bytes, Redis's class names).
    pub fn render(&self) -> String {
        let one =
            |name: &str, l: &ObufLimit| format!("{name} {} {} {}", l.hard, l.soft, l.soft_secs);
        format!(
            "{} {} {}",
            one("normal", &self.normal),
            one("slave", &self.replica),
            one("pubsub", &self.pubsub)
        )
    }
}

/// What a pending message carries.
#[derive(Debug)]
enum Body {
    /// A PUBLISH (`message`, `pmessage`) or SPUBLISH (`smessage`) delivery.
    Pub {
        pattern: Option<Bytes>,
        channel: Bytes,
        payload: Bytes,
        shard: bool,
    },
    /// A client-side caching invalidation (`crate::tracking`): the keys,
    /// or `None` for every key (after a flush). `bcast` is the prefix of a
    /// BCAST message, which later keys for the same prefix join while it
    /// waits to be written (as Redis gathers them per event loop turn).
    Invalidate {
        keys: Option<Vec<Bytes>>,
        bcast: Option<Bytes>,
    },
    /// `tracking-redir-broken <id>`: the redirect target is gone.
    RedirBroken(u64),
    /// Already encoded, the same in both protocols (MONITOR lines).
    Raw(Bytes),
}

/// One pending message.
#[derive(Debug)]
struct Msg {
    body: Body,
    /// Caused by the receiver's own command: written after that command's
    /// reply (Redis 7.0 holds such invalidations until the reply is out).
    after_reply: bool,
}

/// The channel RESP2 clients receive redirected invalidations on.
pub const INVALIDATE_CHANNEL: &[u8] = b"__redis__:invalidate";

fn bulk_len(n: usize) -> usize {
    // `$<digits>\r\n<bytes>\r\n`
    let digits = n.checked_ilog10().map_or(1, |d| d as usize + 1);
    1 + digits + 2 + n + 2
}

impl Msg {
    fn publish(pattern: Option<Bytes>, channel: Bytes, payload: Bytes, shard: bool) -> Msg {
        Msg {
            body: Body::Pub {
                pattern,
                channel,
                payload,
                shard,
            },
            after_reply: false,
        }
    }

    /// Bytes the message takes on the wire (what the limits count).
    fn wire_len(&self) -> usize {
        match &self.body {
            Body::Pub {
                pattern,
                channel,
                payload,
                shard,
            } => {
                let head = if pattern.is_some() {
                    4 + bulk_len(8) // `*4\r\n` + `$8\r\npmessage\r\n`
                } else {
                    // `*3\r\n` + `$7\r\nmessage\r\n` (one more for smessage)
                    4 + bulk_len(7) + *shard as usize
                };
                head + pattern.as_ref().map_or(0, |p| bulk_len(p.len()))
                    + bulk_len(channel.len())
                    + bulk_len(payload.len())
            }
            Body::Invalidate { keys, .. } => {
                4 + bulk_len(INVALIDATE_CHANNEL.len())
                    + 8
                    + keys
                        .as_ref()
                        .map_or(5, |k| k.iter().map(|k| bulk_len(k.len())).sum())
            }
            Body::RedirBroken(_) => 4 + bulk_len(21) + 22,
            Body::Raw(b) => b.len(),
        }
    }

    fn encode(&self, out: &mut Vec<u8>, protocol: Protocol) {
        let mut e = Encoder::new(out, protocol);
        match &self.body {
            Body::Pub {
                pattern,
                channel,
                payload,
                shard,
            } => {
                match pattern {
                    Some(p) => {
                        e.push(4);
                        e.bulk(b"pmessage");
                        e.bulk(p);
                    }
                    None => {
                        e.push(3);
                        e.bulk(if *shard { b"smessage" } else { b"message" });
                    }
                }
                e.bulk(channel);
                e.bulk(payload);
            }
            Body::Invalidate { keys, .. } => {
                if protocol == Protocol::Resp3 {
                    e.push(2);
                    e.bulk(b"invalidate");
                } else {
                    // A RESP2 redirect target in Pub/Sub mode.
                    e.push(3);
                    e.bulk(b"message");
                    e.bulk(INVALIDATE_CHANNEL);
                }
                match keys {
                    Some(keys) => {
                        e.array(keys.len());
                        for k in keys {
                            e.bulk(k);
                        }
                    }
                    None => e.null(),
                }
            }
            Body::RedirBroken(id) => {
                e.push(2);
                e.bulk(b"tracking-redir-broken");
                e.integer(*id as i64);
            }
            Body::Raw(b) => out.extend_from_slice(b),
        }
    }
}

/// Bits of [`Mailbox::modes`]: what the connection loop must do after a
/// command (none set on almost every connection: one relaxed load).
pub mod modes {
    /// CLIENT REPLY OFF: no replies.
    pub const REPLY_OFF: u32 = 1;
    /// CLIENT REPLY SKIP just ran: the next command's reply is dropped.
    pub const REPLY_SKIP_NEXT: u32 = 1 << 1;
    /// This command's reply is dropped (the command after SKIP).
    pub const REPLY_SKIP: u32 = 1 << 2;
    /// CLIENT CACHING YES/NO: applies to the next command (or transaction).
    pub const CACHING: u32 = 1 << 3;
}

#[derive(Debug, Default)]
struct Queue {
    msgs: VecDeque<Msg>,
    /// Bytes queued plus bytes taken for writing and not yet written.
    bytes: usize,
    /// When `bytes` first reached the soft limit (cleared below it).
    soft_since: Option<Instant>,
}

/// A client's subscriptions and pending messages. Lives in its
/// [`ClientInfo`], so the registry can reach it from a publisher.
#[derive(Debug, Default)]
pub struct Mailbox {
    channels: Mutex<BTreeSet<Bytes>>,
    patterns: Mutex<BTreeSet<Bytes>>,
    shard_channels: Mutex<BTreeSet<Bytes>>,
    nchannels: AtomicUsize,
    npatterns: AtomicUsize,
    nshard: AtomicUsize,
    /// `nchannels + npatterns + nshard`, so the per-command subscribed-mode
    /// check is one load.
    nall: AtomicUsize,
    /// CLIENT TRACKING state (`crate::tracking`).
    pub(crate) tracking: crate::tracking::ClientTracking,
    /// Per-command connection modes the loop looks at after each command
    /// with one load: CLIENT REPLY and CLIENT CACHING ([`modes`]).
    pub(crate) modes: AtomicU32,
    /// In MONITOR mode.
    pub(crate) monitor: AtomicBool,
    /// The connection has ended (a redirect to it is broken).
    pub(crate) closed: AtomicBool,
    queue: Mutex<Queue>,
    /// Something was queued since the connection last drained.
    pending: AtomicBool,
    /// Over its output limit: takes no more messages; its connection closes.
    dead: AtomicBool,
    ready: Notify,
}

impl Mailbox {
    /// Channel subscriptions (CLIENT LIST `sub=`).
    pub fn channel_count(&self) -> usize {
        self.nchannels.load(Ordering::Relaxed)
    }

    /// Pattern subscriptions (CLIENT LIST `psub=`).
    pub fn pattern_count(&self) -> usize {
        self.npatterns.load(Ordering::Relaxed)
    }

    /// Shard channel subscriptions (CLIENT LIST `ssub=`).
    pub fn shard_count(&self) -> usize {
        self.nshard.load(Ordering::Relaxed)
    }

    /// Whether the client has any subscription (Redis's `CLIENT_PUBSUB`).
    #[inline]
    pub fn subscribed(&self) -> bool {
        self.nall.load(Ordering::Relaxed) > 0
    }

    /// Channel and pattern subscriptions (the count in (P)(UN)SUBSCRIBE
    /// replies; shard channels are counted apart, as in Redis 7.0).
    pub fn count(&self) -> i64 {
        (self.nchannels.load(Ordering::Relaxed) + self.npatterns.load(Ordering::Relaxed)) as i64
    }

    /// The count an (un)subscribe reply of `kind` shows.
    pub fn count_for(&self, kind: Kind) -> i64 {
        match kind {
            Kind::Shard => self.nshard.load(Ordering::Relaxed) as i64,
            _ => self.count(),
        }
    }

    /// Whether messages wait to be written (one atomic load).
    pub fn has_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Resolves when a message was queued since the last drain (or at once
    /// if one was). Cancel-safe.
    pub async fn ready(&self) {
        self.ready.notified().await
    }

    /// Encodes every queued message into `out`; returns their byte count,
    /// which stays charged against the limits until [`Mailbox::written`].
    pub fn take(&self, out: &mut Vec<u8>, protocol: Protocol) -> usize {
        self.pending.store(false, Ordering::Release);
        let mut q = self.queue.lock();
        let mut n = 0;
        while let Some(m) = q.msgs.pop_front() {
            n += m.wire_len();
            m.encode(out, protocol);
        }
        n
    }

    /// [`Mailbox::take`] that puts the messages the client's own command
    /// caused (its invalidations) in `after` instead of `out`.
    fn take_split(&self, out: &mut Vec<u8>, after: &mut Vec<u8>, protocol: Protocol) -> usize {
        self.pending.store(false, Ordering::Release);
        let mut q = self.queue.lock();
        let mut n = 0;
        while let Some(m) = q.msgs.pop_front() {
            n += m.wire_len();
            m.encode(
                if m.after_reply {
                    &mut *after
                } else {
                    &mut *out
                },
                protocol,
            );
        }
        n
    }

    /// Like [`Mailbox::take`], for a subscriber that is not a RESP
    /// connection (the HTTP API's event streams): every queued message as
    /// (pattern, channel, payload), and their RESP byte count, which stays
    /// charged against the limits until [`Mailbox::written`].
    pub fn take_raw(&self) -> (Vec<(Option<Bytes>, Bytes, Bytes)>, usize) {
        self.pending.store(false, Ordering::Release);
        let mut q = self.queue.lock();
        let mut n = 0;
        let msgs = q
            .msgs
            .drain(..)
            .filter_map(|m| {
                n += m.wire_len();
                match m.body {
                    Body::Pub {
                        pattern,
                        channel,
                        payload,
                        ..
                    } => Some((pattern, channel, payload)),
                    _ => None,
                }
            })
            .collect();
        (msgs, n)
    }

    /// `n` bytes from [`Mailbox::take`] reached the socket.
    pub fn written(&self, n: usize, limit: &ObufLimit) {
        let mut q = self.queue.lock();
        q.bytes = q.bytes.saturating_sub(n);
        if limit.soft == 0 || (q.bytes as u64) < limit.soft {
            q.soft_since = None;
        }
    }

    /// Queues a message; returns false if this pushed the client over its
    /// limit (the caller disconnects it) or it already was.
    fn push(&self, msg: Msg, limit: &ObufLimit) -> bool {
        if self.dead.load(Ordering::Relaxed) {
            return true;
        }
        let mut guard = self.queue.lock();
        let q = &mut *guard;
        if let Body::Invalidate {
            keys: Some(keys),
            bcast: Some(prefix),
        } = &msg.body
        {
            // A BCAST key joins the message for its prefix still waiting
            // here, once (Redis sends each prefix's keys of one event loop
            // turn as one message).
            if let Some(Msg {
                body:
                    Body::Invalidate {
                        keys: Some(waiting),
                        bcast: Some(p),
                    },
                after_reply,
            }) = q.msgs.back_mut()
            {
                if p == prefix && *after_reply == msg.after_reply {
                    for k in keys {
                        if !waiting.contains(k) {
                            q.bytes += bulk_len(k.len());
                            waiting.push(k.clone());
                        }
                    }
                    return true;
                }
            }
        }
        q.bytes += msg.wire_len();
        q.msgs.push_back(msg);
        let bytes = q.bytes as u64;
        let mut over = limit.hard > 0 && bytes >= limit.hard;
        if limit.soft > 0 && bytes >= limit.soft {
            match q.soft_since {
                None => q.soft_since = Some(Instant::now()),
                Some(t) => over |= t.elapsed() > Duration::from_secs(limit.soft_secs),
            }
        } else {
            q.soft_since = None;
        }
        if over {
            self.dead.store(true, Ordering::Relaxed);
            q.msgs.clear();
            return false;
        }
        drop(guard);
        if !self.pending.swap(true, Ordering::AcqRel) {
            self.ready.notify_one();
        }
        true
    }
}

#[derive(Debug, Default)]
struct Registry {
    /// channel -> subscribers by client id.
    channels: HashMap<Bytes, BTreeMap<u64, Arc<ClientInfo>>>,
    /// pattern -> subscribers by client id.
    patterns: HashMap<Bytes, BTreeMap<u64, Arc<ClientInfo>>>,
    /// shard channel -> subscribers by client id (SSUBSCRIBE).
    shard: HashMap<Bytes, BTreeMap<u64, Arc<ClientInfo>>>,
}

/// The server's pub/sub state (in [`crate::Shared`]).
#[derive(Debug)]
pub struct Hub {
    reg: RwLock<Registry>,
    /// Subscriptions of any kind, server-wide: publishing to nobody is one
    /// atomic load.
    pub(crate) total: AtomicUsize,
    /// `notify-keyspace-events` as flag bits (see [`crate::notify`]).
    pub(crate) events: AtomicU32,
    limits: Mutex<ObufLimits>,
    pubsub_hard: AtomicU64,
    pubsub_soft: AtomicU64,
    pubsub_soft_secs: AtomicU64,
    /// Clients closed for passing their output-buffer limit (INFO).
    pub disconnections: AtomicU64,
    /// Client-side caching: who may hold which keys (`crate::tracking`).
    pub tracking: crate::tracking::Tracking,
    /// MONITOR clients (`crate::monitor`).
    pub monitors: crate::monitor::Monitors,
    /// CLIENT PAUSE (`crate::monitor`).
    pub pause: crate::monitor::Pause,
}

impl Default for Hub {
    fn default() -> Self {
        let hub = Hub {
            reg: RwLock::new(Registry::default()),
            total: AtomicUsize::new(0),
            events: AtomicU32::new(0),
            limits: Mutex::new(ObufLimits::default()),
            pubsub_hard: AtomicU64::new(0),
            pubsub_soft: AtomicU64::new(0),
            pubsub_soft_secs: AtomicU64::new(0),
            disconnections: AtomicU64::new(0),
            tracking: Default::default(),
            monitors: Default::default(),
            pause: Default::default(),
        };
        hub.set_limits(ObufLimits::default());
        hub
    }
}

/// Which kind of subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// SUBSCRIBE: an exact channel name.
    Channel,
    /// PSUBSCRIBE: a glob pattern.
    Pattern,
    /// SSUBSCRIBE: a shard channel (one shard here: an exact name).
    Shard,
}

impl Hub {
    /// The current `client-output-buffer-limit`.
    pub fn limits(&self) -> ObufLimits {
        *self.limits.lock()
    }

    /// Replaces `client-output-buffer-limit`.
    pub fn set_limits(&self, l: ObufLimits) {
        *self.limits.lock() = l;
        self.pubsub_hard.store(l.pubsub.hard, Ordering::Relaxed);
        self.pubsub_soft.store(l.pubsub.soft, Ordering::Relaxed);
        self.pubsub_soft_secs
            .store(l.pubsub.soft_secs, Ordering::Relaxed);
    }

    /// The pubsub class limit, without a lock.
    pub fn pubsub_limit(&self) -> ObufLimit {
        ObufLimit {
            hard: self.pubsub_hard.load(Ordering::Relaxed),
            soft: self.pubsub_soft.load(Ordering::Relaxed),
            soft_secs: self.pubsub_soft_secs.load(Ordering::Relaxed),
        }
    }

    /// Subscribes `client`; returns its subscription count afterwards.
    pub fn subscribe(&self, client: &Arc<ClientInfo>, kind: Kind, name: &[u8]) -> i64 {
        let mb = &client.pubsub;
        let mut reg = self.reg.write();
        let (own, counter, map) = match kind {
            Kind::Channel => (&mb.channels, &mb.nchannels, &mut reg.channels),
            Kind::Pattern => (&mb.patterns, &mb.npatterns, &mut reg.patterns),
            Kind::Shard => (&mb.shard_channels, &mb.nshard, &mut reg.shard),
        };
        let name = Bytes::copy_from_slice(name);
        if own.lock().insert(name.clone()) {
            counter.fetch_add(1, Ordering::Relaxed);
            mb.nall.fetch_add(1, Ordering::Relaxed);
            self.total.fetch_add(1, Ordering::Relaxed);
            map.entry(name)
                .or_default()
                .insert(client.id, client.clone());
        }
        mb.count_for(kind)
    }

    /// Unsubscribes `client` from `name`; returns its count afterwards.
    pub fn unsubscribe(&self, client: &ClientInfo, kind: Kind, name: &[u8]) -> i64 {
        let mb = &client.pubsub;
        let mut reg = self.reg.write();
        let (own, counter, map) = match kind {
            Kind::Channel => (&mb.channels, &mb.nchannels, &mut reg.channels),
            Kind::Pattern => (&mb.patterns, &mb.npatterns, &mut reg.patterns),
            Kind::Shard => (&mb.shard_channels, &mb.nshard, &mut reg.shard),
        };
        if own.lock().remove(name) {
            counter.fetch_sub(1, Ordering::Relaxed);
            mb.nall.fetch_sub(1, Ordering::Relaxed);
            self.total.fetch_sub(1, Ordering::Relaxed);
            if let Some(subs) = map.get_mut(name) {
                subs.remove(&client.id);
                if subs.is_empty() {
                    map.remove(name);
                }
            }
        }
        mb.count_for(kind)
    }

    /// The client's channels or patterns, in byte order.
    pub fn subscriptions(&self, client: &ClientInfo, kind: Kind) -> Vec<Bytes> {
        let own = match kind {
            Kind::Channel => &client.pubsub.channels,
            Kind::Pattern => &client.pubsub.patterns,
            Kind::Shard => &client.pubsub.shard_channels,
        };
        own.lock().iter().cloned().collect()
    }

    /// Drops every subscription of a client, and its tracking, MONITOR and
    /// CLIENT REPLY / CACHING modes (RESET, disconnect).
    pub fn drop_client(&self, client: &ClientInfo) {
        self.tracking.disable(client);
        self.monitors.remove(client);
        client.pubsub.modes.store(0, Ordering::Relaxed);
        if !client.pubsub.subscribed() {
            return;
        }
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            for name in self.subscriptions(client, kind) {
                self.unsubscribe(client, kind, &name);
            }
        }
    }

    /// Delivers `payload` on `channel` to its subscribers and the matching
    /// patterns'; returns how many clients received it (PUBLISH's reply).
    pub fn publish(&self, channel: &[u8], payload: &[u8]) -> i64 {
        if self.total.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        let limit = self.pubsub_limit();
        let channel = Bytes::copy_from_slice(channel);
        let payload = Bytes::copy_from_slice(payload);
        let mut over: Vec<Arc<ClientInfo>> = Vec::new();
        let mut n = 0;
        {
            let reg = self.reg.read();
            let mut deliver = |c: &Arc<ClientInfo>, pattern: Option<&Bytes>| {
                n += 1;
                let msg = Msg::publish(pattern.cloned(), channel.clone(), payload.clone(), false);
                if !c.pubsub.push(msg, &limit) {
                    over.push(c.clone());
                }
            };
            if let Some(subs) = reg.channels.get(&channel) {
                for c in subs.values() {
                    deliver(c, None);
                }
            }
            for (pattern, subs) in &reg.patterns {
                if glob::matches(pattern, &channel, false) {
                    for c in subs.values() {
                        deliver(c, Some(pattern));
                    }
                }
            }
        }
        for c in over {
            self.over_limit(&c);
        }
        n
    }

    fn over_limit(&self, c: &ClientInfo) {
        self.disconnections.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            id = c.id,
            addr = %c.addr,
            "client closed for overcoming of output buffer limits (pubsub class)",
        );
        c.kill();
    }

    /// SPUBLISH: delivers `payload` to the subscribers of shard channel
    /// `channel` (patterns never match shard channels).
    pub fn spublish(&self, channel: &[u8], payload: &[u8]) -> i64 {
        if self.total.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        let limit = self.pubsub_limit();
        let mut over: Vec<Arc<ClientInfo>> = Vec::new();
        let mut n = 0;
        {
            let reg = self.reg.read();
            if let Some(subs) = reg.shard.get(channel) {
                let channel = Bytes::copy_from_slice(channel);
                let payload = Bytes::copy_from_slice(payload);
                for c in subs.values() {
                    n += 1;
                    let msg = Msg::publish(None, channel.clone(), payload.clone(), true);
                    if !c.pubsub.push(msg, &limit) {
                        over.push(c.clone());
                    }
                }
            }
        }
        for c in over {
            self.over_limit(&c);
        }
        n
    }

    /// Queues a tracking invalidation for `to` (`keys` `None`: every key;
    /// `bcast`: the prefix of a BCAST message). `after_reply`: `to` runs
    /// the command that caused it.
    pub(crate) fn push_invalidation(
        &self,
        to: &ClientInfo,
        keys: Option<Vec<Bytes>>,
        bcast: Option<Bytes>,
        after_reply: bool,
    ) {
        let msg = Msg {
            body: Body::Invalidate { keys, bcast },
            after_reply,
        };
        if !to.pubsub.push(msg, &self.pubsub_limit()) {
            self.over_limit(to);
        }
    }

    /// Tells `to` that its redirect target `id` is gone.
    pub(crate) fn push_redir_broken(&self, to: &ClientInfo, id: u64, after_reply: bool) {
        let msg = Msg {
            body: Body::RedirBroken(id),
            after_reply,
        };
        if !to.pubsub.push(msg, &self.pubsub_limit()) {
            self.over_limit(to);
        }
    }

    /// Queues an encoded line (MONITOR) for `to`.
    pub(crate) fn push_raw(&self, to: &ClientInfo, line: Bytes) {
        let msg = Msg {
            body: Body::Raw(line),
            after_reply: false,
        };
        if !to.pubsub.push(msg, &self.pubsub_limit()) {
            self.over_limit(to);
        }
    }

    /// Shard channels with at least one subscriber (INFO
    /// `pubsubshard_channels`).
    pub fn shard_channel_count(&self) -> usize {
        self.reg.read().shard.len()
    }

    /// Active shard channels matching `pattern` (all if `None`).
    pub fn shard_channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        sorted_matching(self.reg.read().shard.keys(), pattern)
    }

    /// Subscribers of one shard channel.
    pub fn shard_numsub(&self, channel: &[u8]) -> usize {
        self.reg.read().shard.get(channel).map_or(0, |s| s.len())
    }

    /// Channels with at least one subscriber (INFO `pubsub_channels`).
    pub fn channel_count(&self) -> usize {
        self.reg.read().channels.len()
    }

    /// Patterns with at least one subscriber (PUBSUB NUMPAT, INFO
    /// `pubsub_patterns`).
    pub fn pattern_count(&self) -> usize {
        self.reg.read().patterns.len()
    }

    /// Active channels matching `pattern` (all if `None`).
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        sorted_matching(self.reg.read().channels.keys(), pattern)
    }

    /// Subscribers of one channel (patterns not counted).
    pub fn numsub(&self, channel: &[u8]) -> usize {
        self.reg.read().channels.get(channel).map_or(0, |s| s.len())
    }
}

/// The names matching `pattern` (all if `None`), sorted (PUBSUB CHANNELS
/// and SHARDCHANNELS).
fn sorted_matching<'a>(
    names: impl Iterator<Item = &'a Bytes>,
    pattern: Option<&[u8]>,
) -> Vec<Bytes> {
    let mut v: Vec<Bytes> = names
        .filter(|c| pattern.is_none_or(|p| glob::matches(p, c, false)))
        .cloned()
        .collect();
    v.sort();
    v
}

/// Puts the client's pending messages into its batch output after a
/// command ran. Redis adds a message to the output buffer the moment it is
/// published, so a message caused by (or arriving during) a command goes
/// before that command's reply, which started at `reply_at`, except after
/// a (P)SUBSCRIBE, whose confirmation comes first. The messages leave with
/// the batch's write, which backpressure bounds, so they stop counting
/// against the limit now.
pub(crate) fn write_pending(
    info: &ClientInfo,
    hub: &Hub,
    out: &mut Vec<u8>,
    reply_at: usize,
    cmd: Option<&crate::commands::CommandDef>,
    protocol: Protocol,
) {
    let subscribe =
        cmd.is_some_and(|c| matches!(c.name, "subscribe" | "psubscribe" | "ssubscribe"));
    let mut after = Vec::new();
    let n = if subscribe || reply_at >= out.len() {
        info.pubsub.take_split(out, &mut after, protocol)
    } else {
        let mut msgs = Vec::new();
        let n = info.pubsub.take_split(&mut msgs, &mut after, protocol);
        out.splice(reply_at..reply_at, msgs);
        n
    };
    out.extend_from_slice(&after);
    info.pubsub.written(n, &hub.pubsub_limit());
}

/// Writes the client's pending messages while its connection is idle (or
/// parked). Returns `Ok(false)` if the client was killed meanwhile (for
/// passing its output limit): the connection must close.
pub(crate) async fn deliver<W>(
    stream: &mut W,
    info: &ClientInfo,
    hub: &Hub,
    protocol: Protocol,
    stats: &crate::state::Stats,
) -> std::io::Result<bool>
where
    W: tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    let mut out = Vec::new();
    loop {
        if info.killed.load(Ordering::SeqCst) {
            return Ok(false);
        }
        out.clear();
        let n = info.pubsub.take(&mut out, protocol);
        if out.is_empty() {
            return Ok(true);
        }
        // A subscriber that does not read blocks this write; a publisher
        // that finds it over its limit kills it, which ends the wait.
        tokio::select! {
            biased;
            _ = info.kill.notified() => return Ok(false),
            r = stream.write_all(&out) => r?,
        }
        stats
            .net_output
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        info.pubsub.written(n, &hub.pubsub_limit());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(payload: usize) -> Msg {
        Msg::publish(
            None,
            Bytes::from_static(b"c"),
            Bytes::from(vec![b'x'; payload]),
            false,
        )
    }

    #[test]
    fn hard_limit_counts_bytes_until_written() {
        let mb = Mailbox::default();
        let limit = ObufLimit {
            hard: 3000,
            soft: 0,
            soft_secs: 0,
        };
        assert!(mb.push(msg(1000), &limit));
        assert!(mb.push(msg(1000), &limit));
        // Taken for writing but not yet written: still counted.
        let mut out = Vec::new();
        let n = mb.take(&mut out, Protocol::Resp2);
        assert!(out.starts_with(b"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1000\r\n"));
        assert_eq!(n, out.len(), "wire_len matches the encoding");
        assert!(
            !mb.push(msg(1000), &limit),
            "2 written-pending + 1 queued pass 3000 bytes"
        );
        assert!(mb.dead.load(Ordering::Relaxed));
        // A dead mailbox takes nothing more (and is not reported twice).
        assert!(mb.push(msg(1), &limit));
        assert_eq!(mb.take(&mut Vec::new(), Protocol::Resp2), 0);

        let mb = Mailbox::default();
        assert!(mb.push(msg(1000), &limit));
        let n = mb.take(&mut Vec::new(), Protocol::Resp3);
        mb.written(n, &limit);
        for _ in 0..2 {
            assert!(mb.push(msg(1000), &limit));
        }
    }

    #[test]
    fn soft_limit_disconnects_only_when_exceeded_for_longer_than_its_seconds() {
        let limit = ObufLimit {
            hard: 0,
            soft: 1500,
            soft_secs: 0,
        };
        let mb = Mailbox::default();
        assert!(mb.push(msg(1000), &limit));
        assert!(
            mb.push(msg(1000), &limit),
            "first time over: the clock starts"
        );
        std::thread::sleep(Duration::from_millis(5));
        assert!(
            !mb.push(msg(10), &limit),
            "still over after the grace period"
        );

        // Dropping below the soft limit resets the clock.
        let limit = ObufLimit {
            hard: 0,
            soft: 1500,
            soft_secs: 60,
        };
        let mb = Mailbox::default();
        assert!(mb.push(msg(2000), &limit));
        let n = mb.take(&mut Vec::new(), Protocol::Resp2);
        mb.written(n, &limit);
        assert!(mb.queue.lock().soft_since.is_none());
        assert!(mb.push(msg(2000), &limit));
        assert!(mb.push(msg(2000), &limit), "within 60 s of going over");
    }

    #[test]
    fn obuf_limits_parse_units_and_classes() {
        let l = ObufLimits::default()
            .parse_update("pubsub 1mb 512kb 10 replica 1g 0 0")
            .unwrap();
        assert_eq!(l.pubsub.hard, 1 << 20);
        assert_eq!(l.pubsub.soft, 512 << 10);
        assert_eq!(l.pubsub.soft_secs, 10);
        assert_eq!(l.replica.hard, 1_000_000_000);
        assert_eq!(
            ObufLimits::default().render(),
            "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
        );
        assert!(ObufLimits::default().parse_update("pubsub 1mb").is_err());
        assert!(ObufLimits::default().parse_update("foo 1 1 1").is_err());
        assert!(ObufLimits::default()
            .parse_update("pubsub 1xb 1 1")
            .is_err());
        assert!(ObufLimits::default().parse_update("pubsub 1 1 -1").is_err());
    }
}
