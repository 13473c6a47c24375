//! Server configuration: command-line flags, `BASALT_*` environment
//! variables and an optional TOML file, merged with the precedence
//! flags > environment > file > defaults.
//!
//! clap reads flags and environment variables together (a flag wins over its
//! variable); every field is an `Option` so that "not given" can fall through
//! to the file and then to the default written next to each field in
//! [`Config`].

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, ValueEnum};
use serde::Deserialize;

/// When writes reach stable storage (Redis's `appendfsync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Appendfsync {
    /// fsync before the replies of every batch that wrote (group commit)
    Always,
    /// fsync once a second in the background (the default)
    Everysec,
    /// leave write-back to the operating system
    No,
}

impl Appendfsync {
    /// The name Redis uses, as CONFIG GET shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Appendfsync::Always => "always",
            Appendfsync::Everysec => "everysec",
            Appendfsync::No => "no",
        }
    }

    /// Parses Redis's spelling (case-insensitive).
    pub fn parse(s: &[u8]) -> Option<Self> {
        match s.to_ascii_lowercase().as_slice() {
            b"always" => Some(Appendfsync::Always),
            b"everysec" => Some(Appendfsync::Everysec),
            b"no" => Some(Appendfsync::No),
            _ => None,
        }
    }
}

/// The `basalt` command line. A bare `basalt [flags]` runs the server.
///
/// Server flags are a flattened [`ServerArgs`]; subcommands sit beside them
/// (`args_conflicts_with_subcommands`), so adding one never changes a server
/// flag, and `main` runs the server when `command` is `None`.
#[derive(Debug, Parser)]
#[command(
    name = "basalt",
    version,
    about = "Basalt: a persistent Redis-compatible key-value server",
    long_about = None,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// Server settings.
    #[command(flatten)]
    pub server: ServerArgs,
    /// A tool to run instead of the server.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands of `basalt`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Verify every record and hint file of a data directory offline (the
    /// server must not be running on it); exit 0 clean, 1 damaged, 2 error
    Check(CheckArgs),
    /// Change or show the members of a replicated group, online
    Cluster(ClusterArgs),
}

/// Flags of `basalt cluster`.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// The Raft address (host:raftport) of any member of the group
    #[arg(long)]
    pub via: String,
    /// What to do
    #[command(subcommand)]
    pub action: ClusterAction,
}

/// What `basalt cluster` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ClusterAction {
    /// Add a node started with --node-id and --raft-port and no --peers:
    /// it catches up as a learner, then votes. Takes id@host:raftport
    Add {
        /// The new node as id@host:raftport
        node: String,
    },
    /// Remove a node from the group (stop its process afterwards)
    Remove {
        /// The node's id
        id: u64,
    },
    /// List the members: id, Raft address, client address, role
    Members,
}

/// Flags of `basalt check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// The server's data directory (every database in it is checked) or
    /// one database's directory
    #[arg(long)]
    pub dir: PathBuf,
    /// Keep every readable record, drop what is not, write a clean
    /// directory state and print exactly what was dropped
    #[arg(long)]
    pub repair: bool,
    /// Print the report as JSON on stdout
    #[arg(long)]
    pub json: bool,
}

/// Flags of the server. Each also reads `BASALT_<NAME>` from the environment.
#[derive(Debug, Default, Clone, Args)]
pub struct ServerArgs {
    /// TCP port to listen on; 0 picks a free port [default: 6379]
    #[arg(long, env = "BASALT_PORT")]
    pub port: Option<u16>,
    /// Address to bind [default: 127.0.0.1]
    #[arg(long, env = "BASALT_BIND")]
    pub bind: Option<IpAddr>,
    /// Port of the HTTP/JSON API (on the same address); 0 turns it off [default: 7379]
    #[arg(long, env = "BASALT_HTTP_PORT")]
    pub http_port: Option<u16>,
    /// Data directory; database N lives in <dir>/<N> [default: ./data]
    #[arg(long, env = "BASALT_DIR")]
    pub dir: Option<PathBuf>,
    /// When writes are fsynced [default: everysec]
    #[arg(long, env = "BASALT_APPENDFSYNC", value_enum)]
    pub appendfsync: Option<Appendfsync>,
    /// Number of numbered databases (SELECT 0..N-1) [default: 16]
    #[arg(long, env = "BASALT_DATABASES")]
    pub databases: Option<u32>,
    /// Worker threads serving connections; 0 = one per CPU [default: 0]
    #[arg(long, env = "BASALT_THREADS")]
    pub threads: Option<usize>,
    /// Log level or tracing filter, e.g. info, debug, basalt_server=trace [default: info]
    #[arg(long, env = "BASALT_LOGLEVEL")]
    pub loglevel: Option<String>,
    /// Keyspace notification classes, Redis's letters (e.g. KEA) [default: none]
    #[arg(long, env = "BASALT_NOTIFY_KEYSPACE_EVENTS")]
    pub notify_keyspace_events: Option<String>,
    /// Output limits, e.g. "pubsub 32mb 8mb 60" [default: normal 0 0 0 slave 256mb 64mb 60 pubsub 32mb 8mb 60]
    #[arg(long, env = "BASALT_CLIENT_OUTPUT_BUFFER_LIMIT")]
    pub client_output_buffer_limit: Option<String>,
    /// TOML file with the same keys as these flags (port, bind, dir,
    /// appendfsync, databases, threads, loglevel, notify-keyspace-events,
    /// client-output-buffer-limit, http-port, requirepass, protected-mode,
    /// maxclients, proto-max-bulk-len, client-query-buffer-limit,
    /// data-file-size, maxmemory, cold-readers, read-residency,
    /// slowlog-log-slower-than, slowlog-max-len,
    /// latency-monitor-threshold); flags and environment win over it
    #[arg(long, env = "BASALT_CONFIG")]
    pub config: Option<PathBuf>,
    // --- Security and limits (crate::auth).
    /// Password of the default user (AUTH); empty = none [default: none]
    #[arg(long, env = "BASALT_REQUIREPASS", hide_env_values = true)]
    pub requirepass: Option<String>,
    /// Refuse clients from other hosts while no password is set: yes|no [default: yes]
    #[arg(long, env = "BASALT_PROTECTED_MODE")]
    pub protected_mode: Option<String>,
    /// Most simultaneous clients [default: 10000]
    #[arg(long, env = "BASALT_MAXCLIENTS")]
    pub maxclients: Option<u64>,
    /// Longest argument a client may send, e.g. 512mb [default: 512mb]
    #[arg(long, env = "BASALT_PROTO_MAX_BULK_LEN")]
    pub proto_max_bulk_len: Option<String>,
    /// Most unparsed input per client before it is closed, e.g. 1gb [default: 1gb]
    #[arg(long, env = "BASALT_CLIENT_QUERY_BUFFER_LIMIT")]
    pub client_query_buffer_limit: Option<String>,
    /// Largest data file of each shard before a new one starts, e.g. 32mb;
    /// only sealed files are compacted [default: 32mb]
    #[arg(long, env = "BASALT_DATA_FILE_SIZE")]
    pub data_file_size: Option<String>,
    /// Budget for the memory Basalt holds (index, buffers; not the page
    /// cache), e.g. 2gb: over it, commands that may grow memory answer
    /// -OOM (Redis's noeviction); 0 = none [default: 0]
    #[arg(long, env = "BASALT_MAXMEMORY")]
    pub maxmemory: Option<String>,
    /// Threads that read values not in memory, so a disk read never stalls
    /// a worker; 0 = every read in place [default: 32]
    #[arg(long, env = "BASALT_COLD_READERS")]
    pub cold_readers: Option<usize>,
    /// Whether connection workers submit cold reads themselves through
    /// io_uring (yes) or hand them all to the cold readers (no); auto: yes
    /// with at most 4 workers, no with more; the readers serve them anyway
    /// where io_uring is missing [default: auto]
    #[arg(long, env = "BASALT_IO_URING")]
    pub io_uring: Option<String>,
    /// When a GET checks that its value is in memory before reading it in
    /// place: auto (while the data files exceed half the memory budget),
    /// check, in-place (never), all-cold (every GET through the readers)
    /// [default: auto]
    #[arg(long, env = "BASALT_READ_RESIDENCY")]
    pub read_residency: Option<String>,
    // --- Slow log and latency monitor (crate::cmdstats).
    /// Log commands that run at least this many microseconds (SLOWLOG); -1 = off, 0 = all [default: 10000]
    #[arg(
        long,
        env = "BASALT_SLOWLOG_LOG_SLOWER_THAN",
        allow_negative_numbers = true
    )]
    pub slowlog_log_slower_than: Option<i64>,
    /// Most SLOWLOG entries kept [default: 128]
    #[arg(long, env = "BASALT_SLOWLOG_MAX_LEN", allow_negative_numbers = true)]
    pub slowlog_max_len: Option<i64>,
    /// Record latency events of at least this many milliseconds (LATENCY); 0 = off [default: 0]
    #[arg(
        long,
        env = "BASALT_LATENCY_MONITOR_THRESHOLD",
        allow_negative_numbers = true
    )]
    pub latency_monitor_threshold: Option<i64>,
    /// Record each command's run-time histogram (INFO latencystats, LATENCY HISTOGRAM): yes or no [default: yes]
    #[arg(long, env = "BASALT_LATENCY_TRACKING")]
    pub latency_tracking: Option<String>,
    /// Percentiles INFO latencystats prints, space-separated [default: "50 99 99.9"]
    #[arg(long, env = "BASALT_LATENCY_TRACKING_INFO_PERCENTILES")]
    pub latency_tracking_info_percentiles: Option<String>,
    // --- Replication (crate::repl).
    /// This node's id in a replicated group: with --peers to form the group,
    /// or with --raft-port alone to wait for `basalt cluster add`
    #[arg(long, env = "BASALT_NODE_ID")]
    pub node_id: Option<u64>,
    /// Port of this node's Raft RPC listener [default: its port in --peers]
    #[arg(long, env = "BASALT_RAFT_PORT")]
    pub raft_port: Option<u16>,
    /// The group's members as id@host:raftport, comma separated, this node included
    #[arg(long, env = "BASALT_PEERS")]
    pub peers: Option<String>,
    /// The master name SENTINEL MASTERS lists for the group [default: mymaster]
    #[arg(long, env = "BASALT_MASTER_NAME")]
    pub master_name: Option<String>,
    /// Raft log entries between snapshots; the log is compacted after each
    /// [default: 100000]
    #[arg(long, env = "BASALT_RAFT_SNAPSHOT_EVERY")]
    pub raft_snapshot_every: Option<u64>,
    /// Group commit: combined log entries the leader keeps in flight
    /// (proposed and not yet applied) [default: 4]
    #[arg(long, env = "BASALT_RAFT_IN_FLIGHT")]
    pub raft_in_flight: Option<usize>,
    /// Threads that apply a combined entry's independent writes at once
    /// (1 to 64; 0 or `auto`: a quarter of the CPUs, 1 to 8) [default: auto]
    #[arg(long, env = "BASALT_RAFT_APPLY_THREADS", value_parser = parse_apply_threads)]
    pub raft_apply_threads: Option<usize>,
    /// Threads that run the node's Raft tasks (openraft, its RPC, the
    /// proposal combiner): 1 runs them all on one thread, more on a
    /// multi-threaded runtime of that many (1 to 64) [default: 1]
    #[arg(long, env = "BASALT_RAFT_THREADS")]
    pub raft_threads: Option<usize>,
}

/// The contents of a `--config` TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    port: Option<u16>,
    bind: Option<IpAddr>,
    dir: Option<PathBuf>,
    appendfsync: Option<Appendfsync>,
    databases: Option<u32>,
    threads: Option<usize>,
    loglevel: Option<String>,
    #[serde(rename = "notify-keyspace-events")]
    notify_keyspace_events: Option<String>,
    #[serde(rename = "client-output-buffer-limit")]
    client_output_buffer_limit: Option<String>,
    #[serde(rename = "http-port")]
    http_port: Option<u16>,
    // Security and limits (crate::auth).
    requirepass: Option<String>,
    #[serde(rename = "protected-mode")]
    protected_mode: Option<String>,
    maxclients: Option<u64>,
    #[serde(rename = "proto-max-bulk-len")]
    proto_max_bulk_len: Option<String>,
    #[serde(rename = "client-query-buffer-limit")]
    client_query_buffer_limit: Option<String>,
    #[serde(rename = "data-file-size")]
    data_file_size: Option<String>,
    maxmemory: Option<String>,
    #[serde(rename = "cold-readers")]
    cold_readers: Option<usize>,
    #[serde(rename = "io-uring")]
    io_uring: Option<String>,
    #[serde(rename = "read-residency")]
    read_residency: Option<String>,
    // Slow log and latency monitor (crate::cmdstats).
    #[serde(rename = "slowlog-log-slower-than")]
    slowlog_log_slower_than: Option<i64>,
    #[serde(rename = "slowlog-max-len")]
    slowlog_max_len: Option<i64>,
    #[serde(rename = "latency-monitor-threshold")]
    latency_monitor_threshold: Option<i64>,
    #[serde(rename = "latency-tracking")]
    latency_tracking: Option<String>,
    #[serde(rename = "latency-tracking-info-percentiles")]
    latency_tracking_info_percentiles: Option<String>,
    #[serde(rename = "node-id")]
    node_id: Option<u64>,
    #[serde(rename = "raft-port")]
    raft_port: Option<u16>,
    peers: Option<String>,
    #[serde(rename = "master-name")]
    master_name: Option<String>,
    #[serde(rename = "raft-snapshot-every")]
    raft_snapshot_every: Option<u64>,
    #[serde(rename = "raft-in-flight")]
    raft_in_flight: Option<usize>,
    #[serde(rename = "raft-apply-threads")]
    raft_apply_threads: Option<usize>,
    #[serde(rename = "raft-threads")]
    raft_threads: Option<usize>,
}

/// The merged configuration the server runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// TCP port; 0 = ephemeral. Default: 6379.
    pub port: u16,
    /// Bind address. Default: 127.0.0.1.
    pub bind: IpAddr,
    /// Data directory. Default: `./data`.
    pub dir: PathBuf,
    /// fsync policy. Default: everysec.
    pub appendfsync: Appendfsync,
    /// Number of databases. Default: 16.
    pub databases: u32,
    /// Connection worker threads, each with its own single-threaded tokio
    /// runtime (`crate::workers`; the HTTP API's runtime gets as many); 0 =
    /// one per CPU. Default: 0. On a machine where the clients share the CPUs
    /// with the server (a benchmark on the same box), fewer threads than
    /// CPUs can serve more: see `docs/benchmarks.md`.
    pub threads: usize,
    /// Tracing filter. Default: `info`.
    pub loglevel: String,
    /// The config file read, if any (CONFIG GET shows nothing for it).
    pub config_file: Option<PathBuf>,
    /// `notify-keyspace-events` as flag bits (`crate::notify`). Default: 0
    /// (off).
    pub notify_keyspace_events: u32,
    /// `client-output-buffer-limit`. Default: Redis's (`normal 0 0 0 slave
    /// 256mb 64mb 60 pubsub 32mb 8mb 60`).
    pub client_output_buffer_limit: crate::pubsub::ObufLimits,
    /// Port of the HTTP API on `bind`: `None` = off (`--http-port 0`),
    /// `Some(0)` = an ephemeral port (tests). Default: `Some(7379)`.
    pub http_port: Option<u16>,
    /// Largest HTTP request body accepted (413 beyond). Default: 512 MiB,
    /// Redis's `proto-max-bulk-len`.
    pub http_max_body: usize,
    // Security and limits (crate::auth).
    /// `requirepass`: the default user's password. Default: none.
    pub requirepass: Option<String>,
    /// `protected-mode`: without a password, refuse non-loopback clients.
    /// Default: yes.
    pub protected_mode: bool,
    /// `maxclients`. Default: 10000 (lowered at start-up if the open-file
    /// limit cannot be raised to fit, as Redis does).
    pub maxclients: u64,
    /// `proto-max-bulk-len` in bytes. Default: 512 MB.
    pub proto_max_bulk_len: u64,
    /// `client-query-buffer-limit` in bytes. Default: 1 GB.
    pub client_query_buffer_limit: u64,
    /// `data-file-size`: the largest data file of each shard, in bytes
    /// (4 KiB to 4 GiB - 1). Default: 32 MiB ([`crate::keyspace::DATA_FILE_SIZE`]).
    pub data_file_size: u64,
    /// `maxmemory` in bytes (`crate::maxmemory`); 0 = none. Default: 0.
    pub maxmemory: u64,
    /// `cold-readers`: threads reading values that are not in memory
    /// (`crate::readers`); 0 = none. Default: 32.
    pub cold_readers: usize,
    /// `io-uring`: whether workers submit cold reads through io_uring
    /// (`crate::uring`) or the reader threads read them all
    /// ([`Config::uses_io_uring`]). Default: auto.
    pub io_uring: IoUring,
    /// `read-residency`: when GET checks residency. Default: auto.
    pub read_residency: crate::readers::Policy,
    /// `slowlog-log-slower-than` in µs (SLOWLOG): -1 = off, 0 = every
    /// command. Default: 10000.
    pub slowlog_log_slower_than: i64,
    /// `slowlog-max-len`: entries SLOWLOG keeps. Default: 128.
    pub slowlog_max_len: i64,
    /// `latency-monitor-threshold` in ms (LATENCY): 0 = off. Default: 0.
    pub latency_monitor_threshold: i64,
    /// `latency-tracking`: record per-command run-time histograms. Default: yes.
    pub latency_tracking: bool,
    /// `latency-tracking-info-percentiles`: what INFO latencystats prints,
    /// as given (checked by `hdr::parse_percentiles`). Default: "50 99 99.9".
    pub latency_tracking_info_percentiles: String,
    /// `node-id`: this node's id in a replicated group (`crate::repl`);
    /// `None`: a single node. Default: none.
    pub node_id: Option<u64>,
    /// `raft-port`: the Raft RPC port. Default: this node's port in `peers`.
    pub raft_port: Option<u16>,
    /// `peers`: every member of the group as (id, `host:raftport`).
    pub peers: Vec<(u64, String)>,
    /// `master-name`: the name SENTINEL MASTERS gives the group (the other
    /// SENTINEL subcommands answer for any name). Default: `mymaster`.
    pub master_name: String,
    /// `raft-snapshot-every`: Raft log entries between snapshots (the log
    /// is compacted after each, keeping at most 50,000 entries, and never
    /// more than this number, for followers that lag a little). Default:
    /// 100,000.
    pub raft_snapshot_every: u64,
    /// `raft-in-flight`: how many combined log entries the leader keeps in
    /// flight (proposed, not yet applied); proposals that arrive meanwhile
    /// queue and go together in the next entry (`repl::combine`). Default:
    /// 4, between 1 and 256.
    pub raft_in_flight: usize,
    /// `raft-apply-threads`: threads that apply the independent writes of
    /// one combined entry at once (`repl::lanes`); 1 applies every entry
    /// on one thread. Default (`auto`, 0): a quarter of the CPUs, between 1
    /// and 8.
    pub raft_apply_threads: usize,
    /// `raft-threads`: threads that run the node's Raft tasks (openraft's
    /// core, replication and state-machine tasks, the Raft RPC server and
    /// client, the proposal combiner). 1 (the default): one thread with a
    /// current-thread runtime, where those tasks hand work to each other
    /// without waking another thread, and short entries apply in place
    /// (`repl::start_on_raft_thread`); more: a multi-threaded runtime of
    /// that many workers.
    pub raft_threads: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            port: 6379,
            bind: IpAddr::from([127, 0, 0, 1]),
            dir: PathBuf::from("./data"),
            appendfsync: Appendfsync::Everysec,
            databases: 16,
            threads: 0,
            loglevel: "info".into(),
            config_file: None,
            notify_keyspace_events: 0,
            client_output_buffer_limit: crate::pubsub::ObufLimits::default(),
            http_port: Some(7379),
            http_max_body: 512 << 20,
            requirepass: None,
            protected_mode: true,
            maxclients: 10000,
            proto_max_bulk_len: 512 << 20,
            client_query_buffer_limit: 1 << 30,
            data_file_size: crate::keyspace::DATA_FILE_SIZE,
            maxmemory: 0,
            cold_readers: 32,
            io_uring: IoUring::Auto,
            read_residency: crate::readers::Policy::Auto,
            slowlog_log_slower_than: 10_000,
            slowlog_max_len: 128,
            latency_monitor_threshold: 0,
            latency_tracking: true,
            latency_tracking_info_percentiles: "50 99 99.9".into(),
            node_id: None,
            raft_port: None,
            peers: Vec::new(),
            master_name: "mymaster".into(),
            raft_snapshot_every: 100_000,
            raft_in_flight: 4,
            raft_apply_threads: auto_apply_threads(),
            raft_threads: 1,
        }
    }
}

/// The `io-uring` setting: who issues cold reads (`crate::uring`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoUring {
    /// Each worker's io_uring with at most [`IoUring::AUTO_MAX_WORKERS`]
    /// workers, the reader threads with more.
    Auto,
    /// Each worker's io_uring (the reader threads where the kernel has none).
    Yes,
    /// The reader threads.
    No,
}

impl IoUring {
    /// Workers up to which `auto` means io_uring. Measured at two points
    /// (`docs/benchmarks.md`): with 2 workers the rings matched the reader
    /// threads' cold GETs/s with a lower p99; with 16 (a 16-core machine)
    /// the threads served more at P=1 (32 reads in flight against up to 50
    /// from the rings: the disk slowed every read past its knee), somewhat
    /// fewer at P=16, with a far lower worst case for a hot key. Where
    /// between the two the rings stop paying is not measured.
    pub const AUTO_MAX_WORKERS: usize = 4;

    fn parse(v: &str) -> Option<IoUring> {
        match v.to_ascii_lowercase().as_str() {
            "auto" => Some(IoUring::Auto),
            "yes" => Some(IoUring::Yes),
            "no" => Some(IoUring::No),
            _ => None,
        }
    }

    /// The setting's name (CONFIG GET).
    pub fn name(self) -> &'static str {
        match self {
            IoUring::Auto => "auto",
            IoUring::Yes => "yes",
            IoUring::No => "no",
        }
    }
}

impl Config {
    /// Connection workers the server runs: `threads`, or one per CPU.
    pub fn workers(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }

    /// Whether the workers submit cold reads through io_uring (`io-uring`,
    /// `auto` resolved by [`Config::workers`]).
    pub fn uses_io_uring(&self) -> bool {
        match self.io_uring {
            IoUring::Auto => self.workers() <= IoUring::AUTO_MAX_WORKERS,
            IoUring::Yes => true,
            IoUring::No => false,
        }
    }

    /// A configuration for tests: port 0 on 127.0.0.1, data in `dir`, no
    /// HTTP API.
    pub fn ephemeral(dir: impl AsRef<Path>) -> Self {
        Config {
            port: 0,
            http_port: None,
            dir: dir.as_ref().to_path_buf(),
            ..Config::default()
        }
    }

    /// Merges flags/environment (already combined by clap) over the file
    /// named by `--config`, over the defaults.
    pub fn from_args(args: ServerArgs) -> anyhow::Result<Config> {
        let file = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    anyhow::anyhow!("cannot read config file {}: {e}", path.display())
                })?;
                toml::from_str::<FileConfig>(&text)
                    .map_err(|e| anyhow::anyhow!("invalid config file {}: {e}", path.display()))?
            }
            None => FileConfig::default(),
        };
        let d = Config::default();
        let databases = args.databases.or(file.databases).unwrap_or(d.databases);
        if databases == 0 || databases > 1024 {
            anyhow::bail!("databases must be between 1 and 1024, got {databases}");
        }
        let threads = args.threads.or(file.threads).unwrap_or(d.threads);
        if threads > 1024 {
            anyhow::bail!("threads must be between 0 (one per CPU) and 1024, got {threads}");
        }
        let events = match args.notify_keyspace_events.or(file.notify_keyspace_events) {
            Some(v) => crate::notify::parse(v.as_bytes()).ok_or_else(|| {
                anyhow::anyhow!("notify-keyspace-events {v:?}: {}", crate::notify::INVALID)
            })?,
            None => d.notify_keyspace_events,
        };
        let limits = match args
            .client_output_buffer_limit
            .or(file.client_output_buffer_limit)
        {
            Some(v) => d
                .client_output_buffer_limit
                .parse_update(&v)
                .map_err(|e| anyhow::anyhow!("client-output-buffer-limit {v:?}: {e}"))?,
            None => d.client_output_buffer_limit,
        };
        // Security and limits (crate::auth), checked as CONFIG SET checks them.
        let setting =
            |name: &str, v: Option<String>| -> anyhow::Result<Option<crate::auth::Setting>> {
                v.map(|v| {
                    crate::auth::config_check_startup(name, v.as_bytes())
                        .map_err(|e| anyhow::anyhow!("{name} {v:?}: {e}"))
                })
                .transpose()
            };
        use crate::auth::Setting as S;
        let requirepass = args
            .requirepass
            .or(file.requirepass)
            .filter(|p| !p.is_empty());
        let protected_mode = match setting(
            "protected-mode",
            args.protected_mode.or(file.protected_mode),
        )? {
            Some(S::ProtectedMode(v)) => v,
            _ => d.protected_mode,
        };
        let maxclients = match setting(
            "maxclients",
            args.maxclients.or(file.maxclients).map(|n| n.to_string()),
        )? {
            Some(S::Maxclients(n)) => n,
            _ => d.maxclients,
        };
        let proto_max_bulk_len = match setting(
            "proto-max-bulk-len",
            args.proto_max_bulk_len.or(file.proto_max_bulk_len),
        )? {
            Some(S::ProtoMaxBulkLen(n)) => n,
            _ => d.proto_max_bulk_len,
        };
        let client_query_buffer_limit = match setting(
            "client-query-buffer-limit",
            args.client_query_buffer_limit
                .or(file.client_query_buffer_limit),
        )? {
            Some(S::QueryBufferLimit(n)) => n,
            _ => d.client_query_buffer_limit,
        };
        let data_file_size = match args.data_file_size.or(file.data_file_size) {
            Some(v) => crate::auth::parse_size(&v)
                .filter(|n| (4096..=u32::MAX as u64).contains(n))
                .ok_or_else(|| {
                    anyhow::anyhow!("data-file-size {v:?}: must be a size from 4kb to 4gb - 1")
                })?,
            None => d.data_file_size,
        };
        let maxmemory = match args.maxmemory.or(file.maxmemory) {
            Some(v) => crate::auth::parse_size(&v).ok_or_else(|| {
                anyhow::anyhow!("maxmemory {v:?}: must be a memory value such as 2gb")
            })?,
            None => d.maxmemory,
        };
        let cold_readers = match args.cold_readers.or(file.cold_readers) {
            Some(n) if n > 1024 => anyhow::bail!("cold-readers {n}: at most 1024"),
            Some(n) => n,
            None => d.cold_readers,
        };
        let io_uring = match args.io_uring.or(file.io_uring) {
            Some(v) => IoUring::parse(&v)
                .ok_or_else(|| anyhow::anyhow!("io-uring {v:?}: must be auto, yes or no"))?,
            None => d.io_uring,
        };
        let read_residency = match args.read_residency.or(file.read_residency) {
            Some(v) => crate::readers::Policy::parse(&v).ok_or_else(|| {
                anyhow::anyhow!("read-residency {v:?}: must be auto, check, in-place or all-cold")
            })?,
            None => d.read_residency,
        };
        // Slow log and latency monitor, checked as CONFIG SET checks them.
        use crate::cmdstats::{CommandStats, Setting};
        let monitor = |name: &str, v: Option<i64>, default: i64| -> anyhow::Result<i64> {
            match v {
                Some(v) => match CommandStats::config_check(name, v.to_string().as_bytes()) {
                    Ok(Setting::Int(v)) => Ok(v),
                    Ok(_) => Ok(default),
                    Err(e) => Err(anyhow::anyhow!("{name} {v}: {e}")),
                },
                None => Ok(default),
            }
        };
        let latency_tracking = match args.latency_tracking.or(file.latency_tracking) {
            Some(v) => match CommandStats::config_check("latency-tracking", v.as_bytes()) {
                Ok(Setting::Switch(on)) => on,
                _ => anyhow::bail!("latency-tracking {v:?}: must be yes or no"),
            },
            None => d.latency_tracking,
        };
        let latency_tracking_info_percentiles = match args
            .latency_tracking_info_percentiles
            .or(file.latency_tracking_info_percentiles)
        {
            Some(v) => match crate::hdr::parse_percentiles(v.as_bytes()) {
                Ok(_) => v,
                Err(e) => anyhow::bail!("latency-tracking-info-percentiles {v:?}: {e}"),
            },
            None => d.latency_tracking_info_percentiles,
        };
        let slowlog_log_slower_than = monitor(
            "slowlog-log-slower-than",
            args.slowlog_log_slower_than
                .or(file.slowlog_log_slower_than),
            d.slowlog_log_slower_than,
        )?;
        let slowlog_max_len = monitor(
            "slowlog-max-len",
            args.slowlog_max_len.or(file.slowlog_max_len),
            d.slowlog_max_len,
        )?;
        let latency_monitor_threshold = monitor(
            "latency-monitor-threshold",
            args.latency_monitor_threshold
                .or(file.latency_monitor_threshold),
            d.latency_monitor_threshold,
        )?;
        let node_id = args.node_id.or(file.node_id);
        let peers = match args.peers.or(file.peers) {
            Some(list) => parse_peers(&list)?,
            None => Vec::new(),
        };
        let raft_port = args.raft_port.or(file.raft_port);
        match node_id {
            None if !peers.is_empty() => {
                anyhow::bail!("--peers needs --node-id (this node's id among them)")
            }
            Some(_) if peers.is_empty() && raft_port.is_none() => anyhow::bail!(
                "--node-id needs --peers (to form a group) or --raft-port (to wait for `basalt cluster add`)"
            ),
            Some(id) if !peers.is_empty() && !peers.iter().any(|(p, _)| *p == id) => {
                anyhow::bail!("--peers does not list this node's id {id}")
            }
            _ => {}
        }
        Ok(Config {
            node_id,
            raft_port,
            peers,
            master_name: args
                .master_name
                .or(file.master_name)
                .unwrap_or(d.master_name),
            raft_snapshot_every: match args.raft_snapshot_every.or(file.raft_snapshot_every) {
                Some(0) => anyhow::bail!("raft-snapshot-every must be at least 1"),
                Some(n) => n,
                None => d.raft_snapshot_every,
            },
            raft_in_flight: match args.raft_in_flight.or(file.raft_in_flight) {
                Some(n @ 1..=256) => n,
                Some(_) => anyhow::bail!("raft-in-flight must be between 1 and 256"),
                None => d.raft_in_flight,
            },
            raft_apply_threads: match args.raft_apply_threads.or(file.raft_apply_threads) {
                Some(0) | None => d.raft_apply_threads,
                Some(n @ 1..=64) => n,
                Some(_) => anyhow::bail!("raft-apply-threads must be between 1 and 64 (0: auto)"),
            },
            raft_threads: match args.raft_threads.or(file.raft_threads) {
                None => d.raft_threads,
                Some(n @ 1..=64) => n,
                Some(_) => anyhow::bail!("raft-threads must be between 1 and 64"),
            },
            slowlog_log_slower_than,
            slowlog_max_len,
            latency_monitor_threshold,
            latency_tracking,
            latency_tracking_info_percentiles,
            data_file_size,
            maxmemory,
            cold_readers,
            io_uring,
            read_residency,
            requirepass,
            protected_mode,
            maxclients,
            proto_max_bulk_len,
            client_query_buffer_limit,
            notify_keyspace_events: events,
            client_output_buffer_limit: limits,
            port: args.port.or(file.port).unwrap_or(d.port),
            http_port: match args.http_port.or(file.http_port) {
                Some(0) => None,
                Some(p) => Some(p),
                None => d.http_port,
            },
            http_max_body: d.http_max_body,
            bind: args.bind.or(file.bind).unwrap_or(d.bind),
            dir: args.dir.or(file.dir).unwrap_or(d.dir),
            appendfsync: args
                .appendfsync
                .or(file.appendfsync)
                .unwrap_or(d.appendfsync),
            databases,
            threads,
            loglevel: args.loglevel.or(file.loglevel).unwrap_or(d.loglevel),
            config_file: args.config,
        })
    }
}

/// `--raft-apply-threads`: a count, or `auto` (0).
fn parse_apply_threads(s: &str) -> Result<usize, String> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(0);
    }
    s.parse()
        .map_err(|_| format!("expected a number of threads or auto, got {s:?}"))
}

/// `raft-apply-threads auto`: a quarter of the CPUs, between 1 and 8 (an
/// entry's commands take a small share of a node's work; the connection
/// threads, the Raft runtime and the other nodes of a group on one machine
/// need the rest).
fn auto_apply_threads() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cpus / 4).clamp(1, 8)
}

/// Parses `--peers`: `id@host:port` items, comma separated.
pub fn parse_peers(list: &str) -> anyhow::Result<Vec<(u64, String)>> {
    let mut out: Vec<(u64, String)> = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let bad = || anyhow::anyhow!("--peers item {item:?}: expected id@host:port");
        let (id, addr) = item.split_once('@').ok_or_else(bad)?;
        let id: u64 = id.parse().map_err(|_| bad())?;
        let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(bad());
        }
        if out.iter().any(|(p, _)| *p == id) {
            anyhow::bail!("--peers names node {id} twice");
        }
        out.push((id, addr.to_string()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_file_and_file_over_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("basalt.toml");
        std::fs::write(
            &path,
            "port = 7000\ndir = \"/tmp/x\"\nappendfsync = \"always\"\n",
        )
        .unwrap();
        let cli = Cli::try_parse_from([
            "basalt",
            "--config",
            path.to_str().unwrap(),
            "--port",
            "7001",
        ])
        .unwrap();
        let c = Config::from_args(cli.server).unwrap();
        assert_eq!(c.port, 7001);
        assert_eq!(c.dir, PathBuf::from("/tmp/x"));
        assert_eq!(c.appendfsync, Appendfsync::Always);
        assert_eq!(c.databases, 16);
        assert_eq!(c.bind, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(c.http_port, Some(7379));
    }

    #[test]
    fn http_port_comes_from_flag_or_file_and_zero_turns_it_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("basalt.toml");
        std::fs::write(&path, "http-port = 8080\n").unwrap();
        let cli = Cli::try_parse_from(["basalt", "--config", path.to_str().unwrap()]).unwrap();
        assert_eq!(Config::from_args(cli.server).unwrap().http_port, Some(8080));
        let cli = Cli::try_parse_from([
            "basalt",
            "--config",
            path.to_str().unwrap(),
            "--http-port",
            "0",
        ])
        .unwrap();
        assert_eq!(Config::from_args(cli.server).unwrap().http_port, None);
    }

    #[test]
    fn threads_come_from_flag_or_file_and_absurd_counts_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("basalt.toml");
        std::fs::write(&path, "threads = 3\n").unwrap();
        let from_file = ServerArgs {
            config: Some(path.clone()),
            ..ServerArgs::default()
        };
        assert_eq!(Config::from_args(from_file).unwrap().threads, 3);
        let cli = Cli::try_parse_from([
            "basalt",
            "--config",
            path.to_str().unwrap(),
            "--threads",
            "1",
        ])
        .unwrap();
        assert_eq!(Config::from_args(cli.server).unwrap().threads, 1);
        assert_eq!(Config::from_args(ServerArgs::default()).unwrap().threads, 0);
        let cli = Cli::try_parse_from(["basalt", "--threads", "5000"]).unwrap();
        let err = Config::from_args(cli.server).unwrap_err().to_string();
        assert!(err.contains("threads must be between"), "{err}");
    }

    #[test]
    fn notification_and_output_limit_settings_come_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("basalt.toml");
        std::fs::write(
            &path,
            "notify-keyspace-events = \"KEA\"\nclient-output-buffer-limit = \"pubsub 1mb 0 0\"\n",
        )
        .unwrap();
        let args = ServerArgs {
            config: Some(path.clone()),
            ..ServerArgs::default()
        };
        let c = Config::from_args(args).unwrap();
        assert_eq!(crate::notify::render(c.notify_keyspace_events), "AKE");
        assert_eq!(c.client_output_buffer_limit.pubsub.hard, 1 << 20);
        assert_eq!(c.client_output_buffer_limit.pubsub.soft, 0);
        std::fs::write(&path, "notify-keyspace-events = \"KE?\"\n").unwrap();
        let args = ServerArgs {
            config: Some(path),
            ..ServerArgs::default()
        };
        assert!(Config::from_args(args).is_err());
    }

    #[test]
    fn data_file_size_comes_from_file_or_flag_and_out_of_range_sizes_are_refused() {
        assert_eq!(
            Config::from_args(ServerArgs::default())
                .unwrap()
                .data_file_size,
            32 << 20
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("basalt.toml");
        std::fs::write(&path, "data-file-size = \"8mb\"\n").unwrap();
        let args = ServerArgs {
            config: Some(path.clone()),
            ..ServerArgs::default()
        };
        assert_eq!(Config::from_args(args).unwrap().data_file_size, 8 << 20);
        let cli = Cli::try_parse_from([
            "basalt",
            "--config",
            path.to_str().unwrap(),
            "--data-file-size",
            "64kb",
        ])
        .unwrap();
        assert_eq!(
            Config::from_args(cli.server).unwrap().data_file_size,
            64 << 10
        );
        for bad in ["100", "4gb", "lots", ""] {
            let cli = Cli::try_parse_from(["basalt", "--data-file-size", bad]).unwrap();
            let e = Config::from_args(cli.server).unwrap_err().to_string();
            assert!(e.contains("data-file-size"), "{bad}: {e}");
        }
    }

    #[test]
    fn security_settings_come_from_file_and_flags_and_bad_values_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("basalt.toml");
        std::fs::write(
            &path,
            "requirepass = \"filepw\"\nprotected-mode = \"no\"\nmaxclients = 50\nproto-max-bulk-len = \"2mb\"\nclient-query-buffer-limit = \"64mb\"\n",
        )
        .unwrap();
        let args = ServerArgs {
            config: Some(path.clone()),
            ..ServerArgs::default()
        };
        let c = Config::from_args(args).unwrap();
        assert_eq!(c.requirepass.as_deref(), Some("filepw"));
        assert!(!c.protected_mode);
        assert_eq!(c.maxclients, 50);
        assert_eq!(c.proto_max_bulk_len, 2 << 20);
        assert_eq!(c.client_query_buffer_limit, 64 << 20);
        let cli = Cli::try_parse_from([
            "basalt",
            "--config",
            path.to_str().unwrap(),
            "--requirepass",
            "flagpw",
            "--protected-mode",
            "yes",
        ])
        .unwrap();
        let c = Config::from_args(cli.server).unwrap();
        assert_eq!(c.requirepass.as_deref(), Some("flagpw"));
        assert!(c.protected_mode);
        let d = Config::from_args(ServerArgs::default()).unwrap();
        assert_eq!(d.requirepass, None);
        assert!(d.protected_mode);
        assert_eq!(d.maxclients, 10000);
        for bad in [
            &["basalt", "--protected-mode", "maybe"][..],
            &["basalt", "--maxclients", "0"],
            &["basalt", "--proto-max-bulk-len", "10"],
        ] {
            let cli = Cli::try_parse_from(bad).unwrap();
            assert!(Config::from_args(cli.server).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn slowlog_and_latency_settings_come_from_file_and_flags_and_bad_values_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("basalt.toml");
        std::fs::write(
            &path,
            "slowlog-log-slower-than = -1\nslowlog-max-len = 5\nlatency-monitor-threshold = 3\n\
             latency-tracking = \"no\"\nlatency-tracking-info-percentiles = \"90 99.99\"\n",
        )
        .unwrap();
        let args = ServerArgs {
            config: Some(path.clone()),
            ..ServerArgs::default()
        };
        let c = Config::from_args(args).unwrap();
        assert_eq!(c.slowlog_log_slower_than, -1);
        assert_eq!(c.slowlog_max_len, 5);
        assert_eq!(c.latency_monitor_threshold, 3);
        assert!(!c.latency_tracking);
        assert_eq!(c.latency_tracking_info_percentiles, "90 99.99");
        let cli = Cli::try_parse_from([
            "basalt",
            "--config",
            path.to_str().unwrap(),
            "--slowlog-log-slower-than",
            "0",
        ])
        .unwrap();
        assert_eq!(
            Config::from_args(cli.server)
                .unwrap()
                .slowlog_log_slower_than,
            0
        );
        let d = Config::from_args(ServerArgs::default()).unwrap();
        assert_eq!(
            (
                d.slowlog_log_slower_than,
                d.slowlog_max_len,
                d.latency_monitor_threshold
            ),
            (10_000, 128, 0)
        );
        for bad in [
            &["basalt", "--slowlog-log-slower-than", "-2"][..],
            &["basalt", "--slowlog-max-len", "-1"],
            &["basalt", "--latency-monitor-threshold", "-1"],
            &["basalt", "--latency-tracking", "maybe"],
            &["basalt", "--latency-tracking-info-percentiles", "50 101"],
        ] {
            let cli = Cli::try_parse_from(bad).unwrap();
            assert!(Config::from_args(cli.server).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn raft_threads_is_one_by_default_and_comes_from_file_or_flag() {
        let from = |argv: &[&str]| {
            let cli = Cli::try_parse_from(argv).unwrap();
            Config::from_args(cli.server).map(|c| c.raft_threads)
        };
        assert_eq!(from(&["basalt"]).unwrap(), 1);
        assert_eq!(from(&["basalt", "--raft-threads", "4"]).unwrap(), 4);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("basalt.toml");
        std::fs::write(&path, "raft-threads = 3\n").unwrap();
        let path = path.to_str().unwrap();
        assert_eq!(from(&["basalt", "--config", path]).unwrap(), 3);
        for bad in ["0", "65"] {
            let e = from(&["basalt", &format!("--raft-threads={bad}")])
                .unwrap_err()
                .to_string();
            assert!(e.contains("raft-threads"), "{bad}: {e}");
        }
    }

    #[test]
    fn raft_apply_threads_is_auto_by_default_and_comes_from_file_or_flag() {
        let from = |argv: &[&str]| {
            let cli = Cli::try_parse_from(argv).map_err(|e| anyhow::anyhow!("{e}"))?;
            Config::from_args(cli.server).map(|c| c.raft_apply_threads)
        };
        let auto = auto_apply_threads();
        assert!((1..=8).contains(&auto));
        assert_eq!(from(&["basalt"]).unwrap(), auto);
        assert_eq!(
            from(&["basalt", "--raft-apply-threads", "auto"]).unwrap(),
            auto
        );
        assert_eq!(
            from(&["basalt", "--raft-apply-threads", "0"]).unwrap(),
            auto
        );
        assert_eq!(from(&["basalt", "--raft-apply-threads", "6"]).unwrap(), 6);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("basalt.toml");
        std::fs::write(&path, "raft-apply-threads = 3\n").unwrap();
        assert_eq!(
            from(&["basalt", "--config", path.to_str().unwrap()]).unwrap(),
            3
        );
        for bad in ["65", "many", "-1"] {
            let e = from(&["basalt", &format!("--raft-apply-threads={bad}")])
                .unwrap_err()
                .to_string();
            assert!(e.contains("raft-apply-threads"), "{bad}: {e}");
        }
    }

    #[test]
    fn raft_in_flight_comes_from_file_or_flag_and_out_of_range_counts_are_refused() {
        let from = |argv: &[&str]| {
            let cli = Cli::try_parse_from(argv).unwrap();
            Config::from_args(cli.server).map(|c| c.raft_in_flight)
        };
        assert_eq!(from(&["basalt"]).unwrap(), 4);
        assert_eq!(from(&["basalt", "--raft-in-flight", "16"]).unwrap(), 16);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("basalt.toml");
        std::fs::write(&path, "raft-in-flight = 32\n").unwrap();
        assert_eq!(
            from(&["basalt", "--config", path.to_str().unwrap()]).unwrap(),
            32
        );
        for bad in ["0", "257"] {
            let e = from(&["basalt", "--raft-in-flight", bad])
                .unwrap_err()
                .to_string();
            assert!(e.contains("raft-in-flight"), "{bad}: {e}");
        }
    }

    #[test]
    fn io_uring_auto_uses_rings_only_with_few_workers_and_yes_or_no_overrides_it() {
        let from = |argv: &[&str]| {
            let cli = Cli::try_parse_from(argv).unwrap();
            Config::from_args(cli.server).map(|c| (c.io_uring, c.uses_io_uring()))
        };
        assert_eq!(
            from(&["basalt", "--threads", "2"]).unwrap(),
            (IoUring::Auto, true)
        );
        assert_eq!(
            from(&["basalt", "--threads", "4"]).unwrap(),
            (IoUring::Auto, true)
        );
        assert_eq!(
            from(&["basalt", "--threads", "16"]).unwrap(),
            (IoUring::Auto, false)
        );
        let yes = ["basalt", "--threads", "16", "--io-uring", "YES"];
        assert_eq!(from(&yes).unwrap(), (IoUring::Yes, true));
        let no = ["basalt", "--threads", "2", "--io-uring", "no"];
        assert_eq!(from(&no).unwrap(), (IoUring::No, false));
        let e = from(&["basalt", "--io-uring", "maybe"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be auto, yes or no"), "{e}");
    }

    #[test]
    fn unknown_file_keys_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("basalt.toml");
        std::fs::write(&path, "prot = 1\n").unwrap();
        let args = ServerArgs {
            config: Some(path),
            ..ServerArgs::default()
        };
        assert!(Config::from_args(args).is_err());
    }

    #[test]
    fn a_node_id_needs_peers_or_a_raft_port_to_wait_for_cluster_add() {
        let with = |node_id: Option<u64>, peers: Option<&str>, raft_port: Option<u16>| {
            Config::from_args(ServerArgs {
                node_id,
                peers: peers.map(str::to_string),
                raft_port,
                ..ServerArgs::default()
            })
        };
        let err = |r: anyhow::Result<Config>| r.unwrap_err().to_string();
        assert!(err(with(None, Some("1@h:1"), None)).contains("--peers needs --node-id"));
        assert!(err(with(Some(4), None, None)).contains("or --raft-port"));
        assert!(err(with(Some(4), Some("1@h:1"), None)).contains("does not list this node's id 4"));
        let joining = with(Some(4), None, Some(17004)).unwrap();
        assert!(joining.peers.is_empty() && joining.raft_port == Some(17004));
        assert_eq!(with(Some(1), Some("1@h:1"), None).unwrap().peers.len(), 1);
    }
}
