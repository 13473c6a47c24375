//! State shared by every connection: configuration, the keyspace, the
//! client registry (CLIENT LIST / KILL) and counters (INFO).
//!
//! Counters are bumped once per batch, not once per command, so the hot
//! path does not fight over one cache line.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tokio::sync::{watch, Notify};

use crate::config::{Appendfsync, Config};
use crate::keyspace::Keyspace;

/// Milliseconds since the Unix epoch, from the wall clock (the engine's
/// clock is the same [`basalt_engine::SystemClock`]).
pub fn now_ms() -> u64 {
    now_ns() / 1_000_000
}

/// Nanoseconds since the Unix epoch, from the wall clock: one reading
/// serves both a batch's time (`now_ns() / 1_000_000` is [`now_ms`]) and
/// command timing (`Conn::tick`; differences saturate at 0 if the clock
/// steps back). It also anchors this thread's [`command_ns`].
pub fn now_ns() -> u64 {
    let wall = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    };
    let Some(counter) = COUNTER.get() else {
        return wall();
    };
    // The counter read on both sides of the wall clock: a thread
    // descheduled between them would anchor the wall clock to a later
    // count, and ticks from it would run behind (go back in time).
    let before = counter.raw();
    let now = wall();
    let after = counter.raw();
    ANCHOR.set(anchor(now, counter.delta_as_nanos(before, after), after));
    now
}

/// The anchor a wall-clock reading `wall` makes when the counter read
/// `after` right after it and `spent` ns passed between the counter reads
/// around it: none (the wall clock is read again) when they were further
/// apart than [`ANCHOR_READ_NS`].
fn anchor(wall: u64, spent: u64, after: u64) -> (u64, u64) {
    if spent < ANCHOR_READ_NS {
        (wall, after)
    } else {
        (0, 0)
    }
}

/// Longest the counter reads around a wall-clock read may be apart for it
/// to anchor [`command_ns`] (the read itself takes about 30 ns).
const ANCHOR_READ_NS: u64 = 20_000;

/// The CPU's time-stamp counter, calibrated against the monotonic clock
/// ([`start_command_clock`]); unset until calibrated, or where the CPU has
/// none it trusts (quanta then reads the OS clock, no faster).
static COUNTER: OnceLock<quanta::Clock> = OnceLock::new();

/// Longest a thread's anchor serves [`command_ns`] before the wall clock
/// is read again: the counter's drift from the wall clock over it is a
/// few nanoseconds.
const ANCHOR_SPAN_NS: u64 = 1_000_000;

thread_local! {
    /// This thread's last [`now_ns`] and the counter's value then.
    static ANCHOR: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// Calibrates the counter [`command_ns`] reads, on a thread of its own
/// (quanta spends up to 200 ms on it); until it is done, commands are
/// timed with [`now_ns`].
pub fn start_command_clock() {
    if COUNTER.get().is_some() {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("basalt-clock".into())
        .spawn(|| {
            let clock = quanta::Clock::new();
            let _ = COUNTER.set(clock);
        });
}

/// [`now_ns`] for timing one command (`Conn::tick`, commandstats,
/// SLOWLOG, LATENCY): this thread's last wall-clock reading plus the
/// time-stamp counter's nanoseconds since it, a third of a wall-clock
/// read's cost (9 against 30 ns here, once per command); the wall clock
/// itself when that reading is more than [`ANCHOR_SPAN_NS`] old or the
/// counter is not calibrated.
pub fn command_ns() -> u64 {
    if let Some(counter) = COUNTER.get() {
        let (wall, at) = ANCHOR.get();
        if let Some(t) = from_anchor(wall, counter.delta_as_nanos(at, counter.raw())) {
            return t;
        }
    }
    now_ns()
}

/// The time `since` ns (by the counter) after anchor `wall`; `None` when
/// there is no anchor (0) or it is [`ANCHOR_SPAN_NS`] old or older.
fn from_anchor(wall: u64, since: u64) -> Option<u64> {
    (wall != 0 && since < ANCHOR_SPAN_NS).then_some(wall + since)
}

/// Server-wide counters for INFO.
#[derive(Debug, Default)]
pub struct Stats {
    /// Commands executed (including those that replied with an error).
    pub commands: AtomicU64,
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Bytes read from clients.
    pub net_input: AtomicU64,
    /// Bytes written to clients.
    pub net_output: AtomicU64,
    /// Commands rejected as unknown or with a wrong arity.
    pub rejected: AtomicU64,
    /// Write commands executed since the last SAVE (Redis's `dirty`).
    pub dirty: AtomicU64,
    /// Connections moved to the worker thread that owns their hot key
    /// (`crate::workers`).
    pub client_moves: AtomicU64,
    /// Sorted-set indexes built off the worker and cached
    /// (`commands::zbuild`).
    pub zset_index_builds: AtomicU64,
    /// Stream indexes built off the worker and cached
    /// (`commands::zbuild`).
    pub stream_index_builds: AtomicU64,
    /// INFO's `instantaneous_*` rates, sampled ten times a second.
    pub instantaneous: Mutex<Instantaneous>,
    /// Keys removed because they expired (INFO's `expired_keys`), counted
    /// by the engines' expiry listener, so FLUSHDB or SWAPDB, which give a
    /// database another engine, do not reset it; CONFIG RESETSTAT does.
    pub expired: Arc<AtomicU64>,
}

/// Samples [`Instantaneous`] keeps per rate: INFO reports their mean, the
/// rate over the last 1.6 s, as Redis does (`STATS_METRIC_SAMPLES`).
const RATE_SAMPLES: usize = 16;

/// One rate: the counter's last reading and the per-second rates between
/// the last [`RATE_SAMPLES`] readings.
#[derive(Debug, Default)]
struct Rate {
    last: u64,
    samples: [f64; RATE_SAMPLES],
}

impl Rate {
    /// Records the rate since the last reading, `elapsed_ms` (> 0) ago.
    fn sample(&mut self, at: usize, reading: u64, elapsed_ms: u64) {
        let per_sec = reading.saturating_sub(self.last) as f64 * 1000.0 / elapsed_ms as f64;
        self.samples[at] = per_sec;
        self.last = reading;
    }

    fn mean(&self) -> f64 {
        self.samples.iter().sum::<f64>() / RATE_SAMPLES as f64
    }
}

/// INFO's `instantaneous_ops_per_sec`, `instantaneous_input_kbps` and
/// `instantaneous_output_kbps`: commands and network bytes per second over
/// the last 16 samples, taken every 100 ms by the server's timer
/// ([`Stats::sample_rates`]), as Redis's `serverCron` takes them.
#[derive(Debug, Default)]
pub struct Instantaneous {
    at: usize,
    last_ms: u64,
    ops: Rate,
    input: Rate,
    output: Rate,
}

impl Stats {
    /// Takes one sample of each rate (called every 100 ms).
    pub fn sample_rates(&self) {
        let now = now_ms();
        let mut i = self.instantaneous.lock();
        let (ops, input, output) = (
            self.commands.load(Ordering::Relaxed),
            self.net_input.load(Ordering::Relaxed),
            self.net_output.load(Ordering::Relaxed),
        );
        if i.last_ms != 0 && now <= i.last_ms {
            // No time passed (a clock step back): nothing to rate.
            return;
        }
        if i.last_ms == 0 {
            // The first reading only sets the baseline.
            i.ops.last = ops;
            i.input.last = input;
            i.output.last = output;
        } else {
            let (at, elapsed) = (i.at, now - i.last_ms);
            i.ops.sample(at, ops, elapsed);
            i.input.sample(at, input, elapsed);
            i.output.sample(at, output, elapsed);
            i.at = (at + 1) % RATE_SAMPLES;
        }
        i.last_ms = now;
    }

    /// Commands per second, and network input and output in KiB per
    /// second, over the last 1.6 s.
    pub fn rates(&self) -> (u64, f64, f64) {
        let i = self.instantaneous.lock();
        (
            i.ops.mean() as u64,
            i.input.mean() / 1024.0,
            i.output.mean() / 1024.0,
        )
    }
}

/// What CLIENT LIST shows about one connection, shared between the
/// connection task and the registry.
#[derive(Debug)]
pub struct ClientInfo {
    /// Client id (CLIENT ID), unique for the server's life.
    pub id: u64,
    /// Peer address.
    pub addr: SocketAddr,
    /// Local address.
    pub laddr: SocketAddr,
    /// Socket file descriptor.
    pub fd: i32,
    /// When the connection was accepted.
    pub created: Instant,
    /// CLIENT SETNAME.
    pub name: Mutex<Vec<u8>>,
    /// CLIENT SETINFO LIB-NAME.
    pub lib_name: Mutex<Vec<u8>>,
    /// CLIENT SETINFO LIB-VER.
    pub lib_ver: Mutex<Vec<u8>>,
    /// Selected database.
    pub db: AtomicUsize,
    /// Protocol version (2 or 3).
    pub resp: AtomicU8,
    /// Last command's name (the one it waits in while blocked).
    pub last_cmd: Mutex<&'static str>,
    /// Parked in a blocking command (BLPOP, WAIT, ...): CLIENT LIST's `b`.
    pub blocked: AtomicBool,
    /// ms since the epoch of the last batch.
    pub last_active_ms: AtomicU64,
    /// CLIENT NO-EVICT (recorded; Basalt does not evict).
    pub no_evict: AtomicBool,
    /// READONLY on a node of a replicated group: this client's reads skip
    /// the read barrier and may be stale (`crate::repl`).
    pub stale_reads: AtomicBool,
    /// Set by CLIENT KILL; the connection closes after its batch.
    pub killed: AtomicBool,
    /// Wakes the connection when it is killed.
    pub kill: Notify,
    /// Subscriptions and pending pub/sub messages.
    pub pubsub: crate::pubsub::Mailbox,
    /// Commands queued since MULTI, -1 when not in MULTI.
    pub multi: AtomicI64,
    /// Whether the client may run every command (`crate::auth`).
    pub authenticated: AtomicBool,
}

impl ClientInfo {
    /// The connection's CLIENT LIST / CLIENT INFO line (without newline).
    pub fn line(&self) -> String {
        let now = now_ms();
        let last = self.last_active_ms.load(Ordering::Relaxed);
        let multi = self.multi.load(Ordering::Relaxed);
        format!(
            "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db={} sub={} psub={} ssub={} multi={} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user=default redir={} resp={} lib-name={} lib-ver={}",
            self.id,
            self.addr,
            self.laddr,
            self.fd,
            String::from_utf8_lossy(&self.name.lock()),
            self.created.elapsed().as_secs(),
            now.saturating_sub(last) / 1000,
            {
                let mut flags = String::new();
                if self.pubsub.subscribed() {
                    flags.push('P');
                }
                if multi >= 0 {
                    flags.push('x');
                }
                if self.blocked.load(Ordering::Relaxed) {
                    flags.push('b');
                }
                // Client-side caching, in Redis's letter order.
                let t = &self.pubsub.tracking;
                if t.is_on() {
                    flags.push('t');
                    if t.broken_redirect() {
                        flags.push('R');
                    }
                    if t.options().bcast {
                        flags.push('B');
                    }
                }
                if flags.is_empty() {
                    flags.push('N');
                }
                flags
            },
            self.db.load(Ordering::Relaxed),
            self.pubsub.channel_count(),
            self.pubsub.pattern_count(),
            self.pubsub.shard_count(),
            multi,
            self.last_cmd.lock(),
            {
                // Redis: the redirect id (0 for none) while tracking, else -1.
                let t = &self.pubsub.tracking;
                if t.is_on() {
                    t.options().redirect as i64
                } else {
                    -1
                }
            },
            self.resp.load(Ordering::Relaxed),
            String::from_utf8_lossy(&self.lib_name.lock()),
            String::from_utf8_lossy(&self.lib_ver.lock()),
        )
    }

    /// Asks the connection to close.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::SeqCst);
        self.kill.notify_one();
    }
}

/// Every open connection, by id.
#[derive(Debug, Default)]
pub struct Clients {
    map: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
    next_id: AtomicU64,
}

impl Clients {
    /// Registers a new connection.
    pub fn register(&self, addr: SocketAddr, laddr: SocketAddr, fd: i32) -> Arc<ClientInfo> {
        let info = self.detached(addr, laddr, fd);
        self.map.lock().insert(info.id, info.clone());
        info
    }

    /// A client with a fresh id that is not listed (CLIENT LIST does not
    /// show it): the HTTP API's internal clients and SSE subscribers.
    pub fn detached(&self, addr: SocketAddr, laddr: SocketAddr, fd: i32) -> Arc<ClientInfo> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        Arc::new(ClientInfo {
            id,
            addr,
            laddr,
            fd,
            created: Instant::now(),
            name: Mutex::new(Vec::new()),
            lib_name: Mutex::new(Vec::new()),
            lib_ver: Mutex::new(Vec::new()),
            db: AtomicUsize::new(0),
            resp: AtomicU8::new(2),
            last_cmd: Mutex::new("NULL"),
            blocked: AtomicBool::new(false),
            last_active_ms: AtomicU64::new(now_ms()),
            no_evict: AtomicBool::new(false),
            stale_reads: AtomicBool::new(false),
            killed: AtomicBool::new(false),
            kill: Notify::new(),
            pubsub: Default::default(),
            multi: AtomicI64::new(-1),
            authenticated: AtomicBool::new(true),
        })
    }

    /// Forgets a closed connection.
    pub fn unregister(&self, id: u64) {
        self.map.lock().remove(&id);
    }

    /// A snapshot of the open connections, by id.
    pub fn all(&self) -> Vec<Arc<ClientInfo>> {
        self.map.lock().values().cloned().collect()
    }

    /// Number of open connections.
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Whether no connection is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Settings that CONFIG SET may change while the server runs.
#[derive(Debug)]
pub struct Settings {
    /// Current appendfsync (0 always, 1 everysec, 2 no). Switching to or
    /// from `always` takes effect at the next batch; the engine's background
    /// fsync period stays what it was at start-up.
    appendfsync: AtomicU8,
    /// Accepted-and-recorded values of settings Basalt has no use for
    /// (encoding knobs and the like), by name.
    pub extra: Mutex<BTreeMap<&'static str, String>>,
}

impl Settings {
    /// The current appendfsync policy.
    pub fn appendfsync(&self) -> Appendfsync {
        match self.appendfsync.load(Ordering::Relaxed) {
            0 => Appendfsync::Always,
            1 => Appendfsync::Everysec,
            _ => Appendfsync::No,
        }
    }

    /// Changes the appendfsync policy.
    pub fn set_appendfsync(&self, a: Appendfsync) {
        let v = match a {
            Appendfsync::Always => 0,
            Appendfsync::Everysec => 1,
            Appendfsync::No => 2,
        };
        self.appendfsync.store(v, Ordering::Relaxed);
    }
}

/// Everything connections share.
#[derive(Debug)]
pub struct Shared {
    /// The configuration the server started with.
    pub config: Config,
    /// The bound address.
    pub addr: SocketAddr,
    /// The databases.
    pub keyspace: Keyspace,
    /// Open connections.
    pub clients: Clients,
    /// Counters.
    pub stats: Stats,
    /// Runtime settings (CONFIG SET).
    pub settings: Settings,
    /// When the server started.
    pub started: Instant,
    /// Random hex id of this run (INFO run_id).
    pub run_id: String,
    /// Unix seconds of the last successful SAVE (or start-up).
    pub lastsave: AtomicU64,
    /// Clients blocked on keys (BLPOP and friends).
    pub blocking: crate::blocking::Blocking,
    /// Pub/sub subscriptions, keyspace notification settings, output limits.
    pub pubsub: Arc<crate::pubsub::Hub>,
    /// Held shared by every batch, exclusively by EXEC (`crate::tx`).
    pub gate: crate::tx::Gate,
    /// Keys watched while absent, marked when created (`crate::tx`).
    pub absent_watches: Arc<crate::tx::AbsentWatches>,
    /// Per-command calls and time (INFO commandstats, /metrics).
    pub cmdstats: crate::cmdstats::CommandStats,
    /// Error replies by code (INFO errorstats, `total_error_replies`).
    pub errors: crate::cmdstats::ErrorStats,
    /// Read lookups that found their key, and that did not (INFO
    /// `keyspace_hits`, `keyspace_misses`).
    pub lookups: crate::cmdstats::Lookups,
    /// Password, protected mode, client and request limits (`crate::auth`).
    pub security: crate::auth::Security,
    /// The Lua interpreter, cached scripts and function libraries.
    pub scripts: crate::script::Scripts,
    /// This node's Raft group membership, if replicated (`crate::repl`).
    pub repl: std::sync::OnceLock<crate::repl::Repl>,
    /// Threads for reads of values not in memory (`crate::readers`).
    pub readers: crate::readers::ColdReaders,
    /// The `maxmemory` budget (`crate::maxmemory`).
    pub maxmemory: crate::maxmemory::MaxMemory,
    shutdown: watch::Sender<bool>,
}

impl Shared {
    /// Sets every open database's residency mode from `read-residency`,
    /// the data files' size and the memory budget (`crate::readers`).
    /// Called at start-up and every second.
    pub(crate) fn apply_residency(&self) {
        let policy = self.config.read_residency;
        let data: u64 = (0..self.keyspace.len())
            .filter_map(|n| self.keyspace.read(n).db().map(|db| db.data_bytes()))
            .sum();
        let budget = crate::readers::memory_budget();
        basalt_engine::set_page_cache_budget(budget);
        let mode = if self.readers.enabled() {
            policy.residency(data, budget)
        } else {
            basalt_engine::Residency::InPlace
        };
        self.keyspace.set_residency(mode);
        for n in 0..self.keyspace.len() {
            if let Some(db) = self.keyspace.read(n).db() {
                if db.residency() != mode {
                    tracing::info!(db = n, data_bytes = data, ?mode, "read residency");
                    db.set_residency(mode);
                }
            }
        }
    }

    pub(crate) fn new(
        config: Config,
        addr: SocketAddr,
        keyspace: Keyspace,
        pubsub: Arc<crate::pubsub::Hub>,
        scripts: crate::script::Scripts,
        stats: Stats,
    ) -> Shared {
        let settings = Settings {
            appendfsync: AtomicU8::new(0),
            extra: Mutex::new(BTreeMap::new()),
        };
        settings.set_appendfsync(config.appendfsync);
        let seed = now_ms() ^ ((std::process::id() as u64) << 32) ^ (addr.port() as u64);
        let mut rng = crate::commands::Rng::new(seed);
        let run_id = (0..40)
            .map(|_| char::from(b"0123456789abcdef"[(rng.next_u64() % 16) as usize]))
            .collect();
        Shared {
            readers: crate::readers::ColdReaders::start(config.cold_readers),
            maxmemory: crate::maxmemory::MaxMemory::new(config.maxmemory),
            security: crate::auth::Security::new(&config),
            config,
            addr,
            keyspace,
            clients: Clients::default(),
            stats,
            settings,
            started: Instant::now(),
            run_id,
            lastsave: AtomicU64::new(now_ms() / 1000),
            blocking: Default::default(),
            pubsub,
            gate: Default::default(),
            absent_watches: Default::default(),
            cmdstats: crate::cmdstats::CommandStats::new(crate::commands::all().count()),
            errors: Default::default(),
            lookups: Default::default(),
            scripts,
            repl: std::sync::OnceLock::new(),
            shutdown: watch::channel(false).0,
        }
    }

    /// Asks the server to stop: stop accepting, finish batches, sync, close.
    pub fn request_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Whether shutdown was requested.
    pub fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Resolves once shutdown has been requested.
    pub async fn wait_shutdown(rx: &mut watch::Receiver<bool>) {
        let _ = rx.wait_for(|s| *s).await.map(|_| ());
    }

    /// A receiver that sees the shutdown request.
    pub fn shutdown_rx(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_time_is_its_anchor_plus_the_counter_within_the_span_only() {
        assert_eq!(from_anchor(1_000, 0), Some(1_000));
        assert_eq!(from_anchor(1_000, 999_999), Some(1_000_999));
        assert_eq!(from_anchor(1_000, ANCHOR_SPAN_NS), None, "too old");
        assert_eq!(from_anchor(0, 5), None, "no anchor");
        assert_eq!(anchor(7, 30, 99), (7, 99));
        assert_eq!(anchor(7, ANCHOR_READ_NS, 99), (0, 0), "read too slowly");
    }

    #[test]
    fn command_time_from_the_counter_stays_near_the_wall_clock() {
        start_command_clock();
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        while COUNTER.get().is_none() && Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(
            COUNTER.get().is_some(),
            "the counter was not calibrated in 5 s"
        );
        // Only rounds read without a pause (this thread descheduled, or
        // the wall clock stepped) are judged; most are on any machine.
        let mut judged = 0;
        for _ in 0..2000 {
            let before = now_ns();
            std::thread::sleep(std::time::Duration::from_micros(50));
            let cmd = command_ns();
            let after = now_ns();
            if after < before || after - before > 900_000 || ANCHOR.get().0 == 0 {
                continue;
            }
            judged += 1;
            // Taken between the two wall-clock readings, give or take
            // the counter's drift and a read's length.
            assert!(cmd + 20_000 >= before, "{cmd} before {before}");
            assert!(cmd <= after + 20_000, "{cmd} after {after}");
        }
        assert!(judged >= 100, "only {judged} rounds ran without a pause");
        // Past the anchor's span the wall clock is read again (a new
        // anchor).
        let before = now_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        command_ns();
        let anchored = ANCHOR.get().0;
        // (0: that reading itself was paused, and anchors nothing.)
        assert!(anchored == 0 || anchored >= before + 2_000_000);
    }
}
