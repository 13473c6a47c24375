//! Options for [`crate::Db::open`], each default documented beside it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::vfs::{StdFs, Vfs};

/// When appended records are forced to stable storage with fsync.
///
/// Whatever the policy, every write has reached the operating system (a
/// `write` call returned) before the engine acknowledges it, so killing the
/// process never loses an acknowledged write; the policy decides what a power
/// failure or kernel crash can lose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// fsync before every acknowledgement. Concurrent writers to one shard
    /// share one fsync (group commit).
    Always,
    /// A background thread fsyncs every this many milliseconds (Redis's
    /// `appendfsync everysec` is `EveryMs(1000)`).
    EveryMs(u64),
    /// Never fsync except when a file is sealed, on [`crate::Db::sync`] and on
    /// close; the OS writes back when it likes.
    Never,
}

/// The time source for expiry. Tests use [`ManualClock`] to move time by hand.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to; for deterministic tests.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock reading `ms`.
    pub fn new(ms: u64) -> Self {
        ManualClock(AtomicU64::new(ms))
    }
    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
    /// Sets the clock.
    pub fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Called with the key each time the active sweep removes an expired key
/// (after the deletion is in the log).
pub type ExpiryListener = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// How to open a [`crate::Db`].
#[derive(Clone)]
pub struct Options {
    /// Number of shards, a power of two between 1 and 1024. Each shard has its
    /// own files, index and locks; a key's CRC32C picks its shard. The count is
    /// recorded in the directory on first open and the recorded value wins
    /// afterwards. Default: 8.
    pub shards: usize,
    /// A data file is sealed and a new one started once it reaches this many
    /// bytes. At most 4 GiB - 1 (offsets are 32-bit). Default: 128 MiB.
    pub max_file_size: u64,
    /// fsync policy. Default: `SyncPolicy::EveryMs(1000)`.
    pub sync: SyncPolicy,
    /// A sealed file is compacted in the background once this fraction of it
    /// is garbage (overwritten, deleted or expired records). Default: 0.5.
    pub compaction_threshold: f64,
    /// Background compaction reads at most this many MiB per second, so it
    /// cannot starve foreground I/O. 0 = unlimited. Default: 64.
    pub compaction_rate_mb: u64,
    /// Writes are delayed while compaction's backlog (the reclaimable
    /// bytes of sealed files past [`Options::compaction_threshold`]) is
    /// more than this many times the live bytes plus
    /// [`Options::write_stall_slack`]: compaction has fallen behind the
    /// writers, and the disk would otherwise fill. With background
    /// compaction off, a stall lasts until [`crate::Db::compact`];
    /// `f64::INFINITY` turns stalls off. Default: 2.0.
    pub write_stall_ratio: f64,
    /// See [`Options::write_stall_ratio`]. Default: 256 MiB.
    pub write_stall_slack: u64,
    /// While writes are delayed, each thread that writes sleeps long enough
    /// that it appends at most this many MiB per second. Default: 64.
    pub delayed_write_rate_mb: u64,
    /// Run compaction in a background thread. When false, only
    /// [`crate::Db::compact`] compacts. Default: true.
    pub background_compaction: bool,
    /// The background thread writes a sealed log file's hint file once the
    /// file has been sealed this long ([`crate::Db::flush`], compaction of
    /// everything and close write them at once). A file compacted away
    /// before then never gets one: under churn (queues, overwrites) files
    /// often die young, and their hint, about a third of the file's size
    /// rewritten after a scan of the whole file, would be written for
    /// nothing. The cost: an open after a crash scans the files sealed in
    /// the last `hint_delay` instead of reading their hints. Default: 10 s.
    pub hint_delay: Duration,
    /// Remove expired keys in the background (100 ms sweeps), writing a
    /// deletion to the log for each. When false, expired keys are still never
    /// returned, but they stay on disk until overwritten. Default: true.
    pub active_expiry: bool,
    /// Values of at least this many bytes are stored lz4-compressed.
    /// `None` = never compress. Default: `None`.
    pub compress_above: Option<usize>,
    /// The time source for expiry. Default: the system clock.
    pub clock: Arc<dyn Clock>,
    /// Called for each key the active sweep expires. Default: none.
    pub expiry_listener: Option<ExpiryListener>,
    /// The file system. Default: the real one; tests inject faults here.
    pub vfs: Arc<dyn Vfs>,
    /// A sequence counter shared with other databases. Every `Db` opened
    /// with the same counter draws its sequence numbers (the keys' versions)
    /// from it, so versions are distinct and increasing across all of them,
    /// and a database created empty starts above every number already handed
    /// out (that floor is written into its first file's header, so it
    /// survives a restart). Open raises the counter to at least the next
    /// number the directory needs. Default: none (a counter of its own).
    pub sequence: Option<Arc<AtomicU64>>,
    /// A batch group shared with other databases: one write batch
    /// ([`crate::BatchGroup::begin`]) then covers writes to every database of
    /// the group made on the thread that began it, and batches of the group
    /// run one at a time. Default: none (a group of its own, see
    /// [`crate::Db::batch`]).
    pub batch_group: Option<Arc<crate::BatchGroup>>,
    /// Answers, at open, whether a conditional commit's token is in the
    /// batch group's [`crate::CommitLog`] (a batch that wrote to several
    /// databases counts only if so). Default: none, and then no
    /// conditional commit counts.
    pub commit_oracle: Option<CommitOracle>,
}

/// See [`Options::commit_oracle`].
pub type CommitOracle = Arc<dyn Fn(u64) -> bool + Send + Sync>;

impl Default for Options {
    fn default() -> Self {
        Options {
            shards: 8,
            max_file_size: 128 << 20,
            sync: SyncPolicy::EveryMs(1000),
            compaction_threshold: 0.5,
            compaction_rate_mb: 64,
            write_stall_ratio: 2.0,
            write_stall_slack: 256 << 20,
            delayed_write_rate_mb: 64,
            background_compaction: true,
            hint_delay: Duration::from_secs(10),
            active_expiry: true,
            compress_above: None,
            clock: Arc::new(SystemClock),
            expiry_listener: None,
            vfs: Arc::new(StdFs),
            sequence: None,
            batch_group: None,
            commit_oracle: None,
        }
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("shards", &self.shards)
            .field("max_file_size", &self.max_file_size)
            .field("sync", &self.sync)
            .field("compaction_threshold", &self.compaction_threshold)
            .field("compaction_rate_mb", &self.compaction_rate_mb)
            .field("write_stall_ratio", &self.write_stall_ratio)
            .field("write_stall_slack", &self.write_stall_slack)
            .field("delayed_write_rate_mb", &self.delayed_write_rate_mb)
            .field("background_compaction", &self.background_compaction)
            .field("hint_delay", &self.hint_delay)
            .field("active_expiry", &self.active_expiry)
            .field("compress_above", &self.compress_above)
            .field("clock", &self.clock)
            .field("expiry_listener", &self.expiry_listener.is_some())
            .field("sequence", &self.sequence)
            .finish_non_exhaustive()
    }
}

impl Options {
    /// Sets [`Options::shards`].
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = n;
        self
    }
    /// Sets [`Options::max_file_size`].
    pub fn max_file_size(mut self, bytes: u64) -> Self {
        self.max_file_size = bytes;
        self
    }
    /// Sets [`Options::sync`].
    pub fn sync(mut self, policy: SyncPolicy) -> Self {
        self.sync = policy;
        self
    }
    /// Sets [`Options::compaction_threshold`].
    pub fn compaction_threshold(mut self, fraction: f64) -> Self {
        self.compaction_threshold = fraction;
        self
    }
    /// Sets [`Options::compaction_rate_mb`].
    pub fn compaction_rate_mb(mut self, mb_per_sec: u64) -> Self {
        self.compaction_rate_mb = mb_per_sec;
        self
    }
    /// Sets [`Options::write_stall_ratio`] and [`Options::write_stall_slack`].
    pub fn write_stall(mut self, ratio: f64, slack: u64) -> Self {
        self.write_stall_ratio = ratio;
        self.write_stall_slack = slack;
        self
    }
    /// Sets [`Options::delayed_write_rate_mb`].
    pub fn delayed_write_rate_mb(mut self, mb_per_sec: u64) -> Self {
        self.delayed_write_rate_mb = mb_per_sec;
        self
    }
    /// Sets [`Options::background_compaction`].
    pub fn background_compaction(mut self, on: bool) -> Self {
        self.background_compaction = on;
        self
    }
    /// Sets [`Options::hint_delay`].
    pub fn hint_delay(mut self, delay: Duration) -> Self {
        self.hint_delay = delay;
        self
    }
    /// Sets [`Options::active_expiry`].
    pub fn active_expiry(mut self, on: bool) -> Self {
        self.active_expiry = on;
        self
    }
    /// Sets [`Options::compress_above`].
    pub fn compress_above(mut self, bytes: Option<usize>) -> Self {
        self.compress_above = bytes;
        self
    }
    /// Sets [`Options::clock`].
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
    /// Sets [`Options::expiry_listener`].
    pub fn expiry_listener(mut self, f: ExpiryListener) -> Self {
        self.expiry_listener = Some(f);
        self
    }
    /// Sets [`Options::commit_oracle`].
    pub fn commit_oracle(mut self, oracle: CommitOracle) -> Self {
        self.commit_oracle = Some(oracle);
        self
    }
    /// Sets [`Options::batch_group`].
    pub fn batch_group(mut self, group: Arc<crate::BatchGroup>) -> Self {
        self.batch_group = Some(group);
        self
    }
    /// Sets [`Options::sequence`].
    pub fn sequence(mut self, counter: Arc<AtomicU64>) -> Self {
        self.sequence = Some(counter);
        self
    }
    /// Sets [`Options::vfs`].
    pub fn vfs(mut self, vfs: Arc<dyn Vfs>) -> Self {
        self.vfs = vfs;
        self
    }

    pub(crate) fn validate(&self) -> crate::Result<()> {
        use crate::Error::InvalidOptions;
        if !self.shards.is_power_of_two() || self.shards > 1024 {
            return Err(InvalidOptions(format!(
                "shards must be a power of two between 1 and 1024, got {}",
                self.shards
            )));
        }
        if self.max_file_size < 4096 || self.max_file_size > u32::MAX as u64 {
            return Err(InvalidOptions(format!(
                "max_file_size must be between 4096 and {}, got {}",
                u32::MAX,
                self.max_file_size
            )));
        }
        if !(self.compaction_threshold > 0.0 && self.compaction_threshold <= 1.0) {
            return Err(InvalidOptions(format!(
                "compaction_threshold must be in (0, 1], got {}",
                self.compaction_threshold
            )));
        }
        if let SyncPolicy::EveryMs(0) = self.sync {
            return Err(InvalidOptions(
                "SyncPolicy::EveryMs needs a period > 0".into(),
            ));
        }
        Ok(())
    }
}
