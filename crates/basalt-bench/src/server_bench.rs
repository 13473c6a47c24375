//! `basalt-bench server`: the `basalt` server against `redis-server`, both
//! driven by the same `redis-benchmark` on the same machine, in the same run.
//!
//! The one idea: every figure is a ratio of two servers that got identical
//! work. Both servers start with the same durability (an append-only log,
//! `appendfsync everysec`), then for every round, pipeline depth and test each
//! server gets the same `redis-benchmark` invocation, in an order that flips
//! round by round so neither always runs on the cooler machine. Around every
//! invocation the server's CPU time is read from `/proc/<pid>/stat`, so besides
//! ops/s we report server CPU per request: the figure that still counts when
//! the client, not the server, is the bottleneck (P=1 on a 2-core machine,
//! where `redis-benchmark` itself saturates a core).
//!
//! Each test gets its own `redis-benchmark -t <test>` invocation (rather than
//! one `-t set,get`) so that the CPU time measured around it belongs to that
//! test alone.
//!
//! String keyspace state carries over between runs (no FLUSHALL): round 2's
//! SET overwrites what round 1 wrote, and GET hits whatever SET left. Both
//! servers see the same sequence of invocations. redis-benchmark seeds its
//! random keys afresh on every invocation, so the two keyspaces are alike in
//! size and distribution, not key for key; DBSIZE at the end is checked
//! against the other server and against the expected number of distinct
//! keys. An unmeasured warm-up SET pass before round 1 keeps round 1 from
//! being the only "fill an empty server" round.
//!
//! Collection tests (`lpush`, `spop`, `zadd`, `lrange_100`, ...) each hit one
//! fixed key, so they get equal state another way (see [`catalog`]): the
//! tests run in redis-benchmark's own order (pushes before pops); before
//! every round and pipeline depth both servers have those keys deleted;
//! before a pop test the key is topped up to `-n` members, and before
//! `lrange_N` the list is refilled, by this program's own pipelined client
//! outside the measured window; every collection run records the key's
//! length before and after, so the report shows what each test found and
//! left.
//!
//! `--collections N` then measures memory per member on fresh servers (see
//! [`collections`]).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;

use crate::engine_bench::{group, median};
use crate::sysinfo;

mod catalog;
mod client;
mod collections;
pub mod families;
pub mod groups;
pub mod queues;
pub mod tx;

use catalog::{Coll, TestSpec};
use client::Conn;

/// The CPU the server is pinned to with `--pin`; `redis-benchmark` gets
/// [`CLIENT_CPU`].
const SERVER_CPU: usize = 1;
const CLIENT_CPU: usize = 0;

#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// The `basalt` binary. Default: $BASALT_BIN, then `basalt` beside this
    /// executable, then $CARGO_TARGET_DIR/release/basalt, then this
    /// workspace's target/release/basalt, then `basalt` on PATH.
    #[arg(long)]
    basalt_bin: Option<PathBuf>,
    /// The `redis-server` binary. Default: `redis-server` on PATH, installed
    /// with `apt-get install -y redis-server redis-tools` if missing.
    #[arg(long)]
    redis_server: Option<PathBuf>,
    /// The `redis-benchmark` binary. Default: on PATH, installed as above.
    #[arg(long)]
    redis_benchmark: Option<PathBuf>,
    /// Requests per redis-benchmark run (`-n`).
    #[arg(short = 'n', long, default_value_t = 1_000_000)]
    requests: u64,
    /// Keys are drawn at random from this many (`-r`).
    #[arg(long, default_value_t = 1_000_000)]
    keyspace: u64,
    /// Value size in bytes (`-d`).
    #[arg(long, default_value_t = 100)]
    data_size: usize,
    /// Parallel connections (`-c`).
    #[arg(long, default_value_t = 50)]
    clients: u32,
    /// Pipeline depths (`-P`), comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pipelines: Vec<u32>,
    /// redis-benchmark tests (`-t`), comma separated: any of ping_inline,
    /// ping_mbulk, ping, set, get, incr, lpush, rpush, lpop, rpop, sadd,
    /// hset, spop, zadd, zpopmin, lrange (= lrange_100), lrange_300,
    /// lrange_500, lrange_600, mset; and `eval` / `evalsha`, a custom command
    /// running `return redis.call('set',KEYS[1],ARGV[1])` on
    /// `key:__rand_int__`; `xadd` (`XADD mystream * myfield <rand>`) and
    /// `xrange_100` (`XRANGE mystream - + COUNT 100`, run after xadd). Each test is its own invocation, so its
    /// server CPU time is its own; they run in redis-benchmark's own order
    /// (pushes before pops), whatever the order given here.
    #[arg(long, value_delimiter = ',', default_value = "set,get")]
    tests: Vec<String>,
    /// Rounds; every figure reported is the median over the rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Unmeasured SET requests (at the deepest pipeline) sent to each server
    /// before round 1, so round 1 overwrites like the later rounds instead of
    /// filling an empty keyspace. Default: --requests if a test uses the
    /// `key:` strings (set, get, mset), else 0; 0 skips the warm-up.
    #[arg(long)]
    warmup: Option<u64>,
    /// Memory per member: on fresh servers, fill one hash with this many
    /// fields (`field:<i>`, 16-byte values) and, on another fresh pair, one
    /// sorted set with this many members (`member:<i>`, score i), and report
    /// each server's RSS growth per member and Basalt's data-dir bytes per
    /// member. 0 skips it.
    #[arg(long, default_value_t = 1_000_000)]
    collections: u64,
    /// CPU pinning with `taskset`: `off` (default) lets the servers and
    /// redis-benchmark float over all cores; `on` (or a bare `--pin`) pins
    /// the server to CPU 1 and redis-benchmark to CPU 0; `both` runs
    /// everything twice, unpinned then pinned, each with fresh servers.
    #[arg(long, value_enum, num_args = 0..=1, default_value_t = Pin::Off, default_missing_value = "on")]
    pin: Pin,
    /// Parent of the servers' temporary data directories. Default: the
    /// system temp dir.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Also write the raw runs and the medians as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Seconds to wait for a server to answer PING after it starts.
    #[arg(long, default_value_t = 60)]
    startup_timeout: u64,
    /// Seconds one redis-benchmark invocation may take before it is killed
    /// and the benchmark fails.
    #[arg(long, default_value_t = 900)]
    run_timeout: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Pin {
    Off,
    On,
    Both,
}

impl Pin {
    /// The pinning modes to run, as "pinned?" flags.
    fn modes(self) -> &'static [bool] {
        match self {
            Pin::Off => &[false],
            Pin::On => &[true],
            Pin::Both => &[false, true],
        }
    }
}

fn pin_label(pinned: bool) -> &'static str {
    if pinned {
        "pinned"
    } else {
        "unpinned"
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
enum ServerKind {
    Redis,
    Basalt,
}

impl ServerKind {
    const BOTH: [ServerKind; 2] = [ServerKind::Redis, ServerKind::Basalt];

    fn name(self) -> &'static str {
        match self {
            ServerKind::Redis => "redis",
            ServerKind::Basalt => "basalt",
        }
    }
}

/// The external programs this benchmark runs.
#[derive(Debug)]
struct Tools {
    redis_server: PathBuf,
    redis_benchmark: PathBuf,
    basalt: PathBuf,
    /// Needed only with `--pin`.
    taskset: Option<PathBuf>,
}

impl Tools {
    fn resolve(args: &ServerArgs) -> Result<Tools> {
        let basalt = match &args.basalt_bin {
            Some(p) => p.clone(),
            None => find_basalt().context(
                "no `basalt` binary found: build it with \
                 `cargo build --release -p basalt-server` and pass --basalt-bin PATH",
            )?,
        };
        ensure!(
            basalt.is_file(),
            "basalt binary {} does not exist",
            basalt.display()
        );
        if basalt.components().any(|c| c.as_os_str() == "debug") {
            eprintln!(
                "warning: {} looks like a debug build; numbers will not mean much",
                basalt.display()
            );
        }

        let mut redis_server = args
            .redis_server
            .clone()
            .or_else(|| find_on_path("redis-server"));
        let mut redis_benchmark = args
            .redis_benchmark
            .clone()
            .or_else(|| find_on_path("redis-benchmark"));
        if redis_server.is_none() || redis_benchmark.is_none() {
            install_redis()?;
            redis_server = redis_server.or_else(|| find_on_path("redis-server"));
            redis_benchmark = redis_benchmark.or_else(|| find_on_path("redis-benchmark"));
        }
        let missing = |what: &str| {
            format!(
                "{what} not found after `apt-get install -y redis-server redis-tools`; \
                 install Debian's redis-server and redis-tools or pass --{what} PATH"
            )
        };
        let redis_server = redis_server.with_context(|| missing("redis-server"))?;
        let redis_benchmark = redis_benchmark.with_context(|| missing("redis-benchmark"))?;

        let taskset = find_on_path("taskset");
        if args.pin != Pin::Off {
            ensure!(
                taskset.is_some(),
                "--pin needs `taskset` (util-linux) on PATH"
            );
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            ensure!(
                cpus >= 2,
                "--pin needs 2 CPUs (server on CPU {SERVER_CPU}, redis-benchmark on CPU \
                 {CLIENT_CPU}); this process may use {cpus}"
            );
        }
        Ok(Tools {
            redis_server,
            redis_benchmark,
            basalt,
            taskset,
        })
    }

    fn server_bin(&self, kind: ServerKind) -> &Path {
        match kind {
            ServerKind::Redis => &self.redis_server,
            ServerKind::Basalt => &self.basalt,
        }
    }

    /// `taskset -c CPU` to put in front of a command when pinning, else nothing.
    fn pin_prefix(&self, pinned: bool, cpu: usize) -> Vec<String> {
        match (&self.taskset, pinned) {
            (Some(t), true) => vec![t.display().to_string(), "-c".into(), cpu.to_string()],
            _ => Vec::new(),
        }
    }
}

/// Where a `basalt` binary usually is; see `--basalt-bin`.
fn find_basalt() -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os("BASALT_BIN") {
        candidates.push(PathBuf::from(p));
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join("basalt"));
    }
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        candidates.push(Path::new(&t).join("release/basalt"));
    }
    candidates.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/basalt"));
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .or_else(|| find_on_path("basalt"))
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// `apt-get install -y redis-server redis-tools`, with its output shown; if
/// that fails (stale package lists), `apt-get update` and try once more.
fn install_redis() -> Result<()> {
    let install = ["install", "-y", "redis-server", "redis-tools"];
    let apt = |args: &[&str]| -> Result<ExitStatus> {
        eprintln!(
            "redis-server or redis-benchmark missing; running: apt-get {}",
            args.join(" ")
        );
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .status()
            .context("run apt-get (is this a Debian/Ubuntu machine?)")
    };
    if apt(&install)?.success() {
        return Ok(());
    }
    let update = apt(&["update"])?;
    let retry = apt(&install)?;
    ensure!(
        retry.success(),
        "`apt-get install -y redis-server redis-tools` failed ({retry}; apt-get update: {update}); \
         install Debian's redis-server and redis-tools by hand or pass \
         --redis-server and --redis-benchmark"
    );
    Ok(())
}

/// A running server under test. Dropping it stops the process (SIGTERM, then
/// SIGKILL after a few seconds), waits for it, and removes its directory.
#[derive(Debug)]
struct Server {
    kind: ServerKind,
    port: u16,
    child: Child,
    /// The exact command line, for the report.
    command_line: String,
    /// Holds `data/` (the server's --dir) and `server.log` (its stdout+stderr).
    /// Declared after `child` only for clarity: `Drop::drop` below stops the
    /// process before any field (this directory) is dropped.
    tmp: tempfile::TempDir,
    /// Commands this program sent itself (collection setup, fills), for the
    /// per-request CPU total at the end.
    setup_requests: u64,
    /// Basalt's HTTP API port, when started with it ([`Server::start_http`]).
    http_port: Option<u16>,
}

impl Server {
    fn start(
        kind: ServerKind,
        tools: &Tools,
        pinned: bool,
        base: &Path,
        startup_timeout: Duration,
    ) -> Result<Server> {
        Self::start_http(kind, tools, pinned, base, startup_timeout, false)
    }

    /// [`Server::start`], with Basalt's HTTP API on a free port if `http`.
    fn start_http(
        kind: ServerKind,
        tools: &Tools,
        pinned: bool,
        base: &Path,
        startup_timeout: Duration,
        http: bool,
    ) -> Result<Server> {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("basalt-bench-{}-", kind.name()))
            .tempdir_in(base)
            .with_context(|| format!("create a temp dir in {}", base.display()))?;
        let data = tmp.path().join("data");
        fs::create_dir(&data).with_context(|| format!("create {}", data.display()))?;
        let port = free_port()?;
        let port_s = port.to_string();
        let http_port = match (kind, http) {
            (ServerKind::Basalt, true) => Some(free_port()?),
            _ => None,
        };
        let http_s = http_port.map_or("0".to_string(), |p| p.to_string());
        let data_s = data.display().to_string();
        let server_args: Vec<&str> = match kind {
            ServerKind::Redis => vec![
                "--port",
                &port_s,
                "--bind",
                "127.0.0.1",
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--dir",
                &data_s,
            ],
            ServerKind::Basalt => vec![
                "--port",
                &port_s,
                "--bind",
                "127.0.0.1",
                "--dir",
                &data_s,
                "--appendfsync",
                "everysec",
                // Off (0) unless the HTTP API is measured.
                "--http-port",
                &http_s,
            ],
        };
        let mut argv = tools.pin_prefix(pinned, SERVER_CPU);
        argv.push(tools.server_bin(kind).display().to_string());
        argv.extend(server_args.iter().map(|s| s.to_string()));

        let log_path = tmp.path().join("server.log");
        let log = fs::File::create(&log_path)
            .with_context(|| format!("create {}", log_path.display()))?;
        // `taskset -c N prog` execs `prog`, so the child's pid is the server's.
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {}", shell_line(&argv)))?;
        let mut server = Server {
            kind,
            port,
            child,
            command_line: shell_line(&argv),
            tmp,
            setup_requests: 0,
            http_port,
        };
        server.wait_ready(startup_timeout)?;
        Ok(server)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn data_dir(&self) -> PathBuf {
        self.tmp.path().join("data")
    }

    /// Polls PING until the server answers PONG, it exits, or `timeout` passes.
    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "{} exited during startup ({status}): {}\n{}",
                    self.kind.name(),
                    self.command_line,
                    self.log_tail()
                );
            }
            match call(self.port, &["PING"], Duration::from_millis(500)) {
                Ok(Reply::Simple(s)) if s == "PONG" => return Ok(()),
                Ok(other) if start.elapsed() > timeout => bail!(
                    "{} answered PING with {other:?}, not PONG: {}",
                    self.kind.name(),
                    self.command_line
                ),
                _ if start.elapsed() > timeout => bail!(
                    "{} did not answer PING on port {} within {:?}: {}\n{}",
                    self.kind.name(),
                    self.port,
                    timeout,
                    self.command_line,
                    self.log_tail()
                ),
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// The last lines of the server's output, for error messages.
    fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.tmp.path().join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n");
        format!("--- last lines of its output ---\n{tail}")
    }

    fn ensure_running(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "{} died ({status}): {}\n{}",
                self.kind.name(),
                self.command_line,
                self.log_tail()
            );
        }
        Ok(())
    }

    fn cpu(&self) -> Result<CpuTimes> {
        cpu_times(self.pid())
    }

    fn dbsize(&self) -> Result<i64> {
        match call(self.port, &["DBSIZE"], Duration::from_secs(10))? {
            Reply::Integer(n) => Ok(n),
            other => bail!("{} answered DBSIZE with {other:?}", self.kind.name()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) takes no pointers; `pid` is our own child, not
            // yet reaped (try_wait above), so the pid cannot have been reused.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("{} ignored SIGTERM for 10 s; killing it", self.kind.name());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port that was free a moment ago (the OS picks it; the race with other
/// programs is accepted: a server that cannot bind fails its PING wait).
fn free_port() -> Result<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("bind 127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// One RESP reply, as far as this benchmark needs to understand it.
#[derive(Debug, PartialEq)]
enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    /// `*N` with its elements read; `*-1` is `None`.
    Array(Option<Vec<Reply>>),
    /// RESP3 types, not needed here (the benchmark speaks RESP2).
    Other(String),
}

/// Sends one command on a fresh connection and reads its reply.
fn call(port: u16, args: &[&str], timeout: Duration) -> Result<Reply> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        let _ = write!(req, "${}\r\n{a}\r\n", a.len());
    }
    stream.write_all(req.as_bytes())?;
    read_reply(&mut BufReader::new(stream))
}

fn read_reply(r: &mut impl BufRead) -> Result<Reply> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    ensure!(line.ends_with("\r\n"), "truncated RESP reply {line:?}");
    let line = &line[..line.len() - 2];
    let (kind, rest) = line.split_at(line.len().min(1));
    Ok(match kind {
        "+" => Reply::Simple(rest.to_string()),
        "-" => Reply::Error(rest.to_string()),
        ":" => Reply::Integer(
            rest.parse()
                .with_context(|| format!("bad integer {line:?}"))?,
        ),
        "$" => {
            let len: i64 = rest
                .parse()
                .with_context(|| format!("bad bulk length {line:?}"))?;
            if len < 0 {
                Reply::Bulk(None)
            } else {
                let mut buf = vec![0; len as usize + 2];
                r.read_exact(&mut buf)?;
                buf.truncate(len as usize);
                Reply::Bulk(Some(buf))
            }
        }
        "*" => {
            let len: i64 = rest
                .parse()
                .with_context(|| format!("bad array length {line:?}"))?;
            if len < 0 {
                Reply::Array(None)
            } else {
                let items = (0..len).map(|_| read_reply(r)).collect::<Result<_>>()?;
                Reply::Array(Some(items))
            }
        }
        _ => Reply::Other(line.to_string()),
    })
}

/// CPU seconds a server process has used, split in two because they arrive
/// differently.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
struct CpuTimes {
    /// User + system time of all the process's threads (`/proc/<pid>/stat`
    /// fields 14, 15): Redis's main and fsync threads, Basalt's runtime and
    /// its in-process compaction.
    own: f64,
    /// User + system time of children it has reaped (fields 16, 17): Redis's
    /// forked AOF rewrites. It lands in one lump when the child is reaped,
    /// in whichever run that happens, so it is kept out of the per-request
    /// figures and reported as a total at the end instead.
    children: f64,
}

/// The median of `f` over the runs at pipeline depth `p` against `kind`
/// (the `tx` and `groups` runs alternate servers and repeat).
fn median_at<R>(
    results: &[(u32, ServerKind, R)],
    p: u32,
    kind: ServerKind,
    f: fn(&R) -> f64,
) -> f64 {
    let mut v: Vec<f64> = results
        .iter()
        .filter(|(q, k, _)| *q == p && *k == kind)
        .map(|(_, _, r)| f(r))
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn cpu_times(pid: u32) -> Result<CpuTimes> {
    let path = format!("/proc/{pid}/stat");
    let stat = fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    let (own, children) =
        parse_stat_ticks(&stat).with_context(|| format!("parse {path}: {stat:?}"))?;
    let hz = clock_ticks_per_second();
    Ok(CpuTimes {
        own: own as f64 / hz,
        children: children as f64 / hz,
    })
}

/// (utime + stime, cutime + cstime) in clock ticks from the text of a
/// `/proc/<pid>/stat`.
fn parse_stat_ticks(stat: &str) -> Option<(u64, u64)> {
    // The command name (field 2) is in parentheses and may hold spaces or
    // ')', so count fields from the last ')'. After it: state is field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some((field(14)? + field(15)?, field(16)? + field(17)?))
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf takes no pointers and has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// CPU seconds used by this process's reaped children so far (here: every
/// redis-benchmark run), from getrusage(RUSAGE_CHILDREN).
fn children_cpu_seconds() -> f64 {
    // SAFETY: an all-zero rusage is a valid value of a plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage for the call to fill in.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return f64::NAN;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// One line of `redis-benchmark --csv` output.
#[derive(Debug, Clone, PartialEq)]
struct CsvRow {
    test: String,
    rps: f64,
    /// Present from redis-benchmark 7 on.
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
}

/// Parses `redis-benchmark --csv` output:
/// `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...` then
/// one quoted line per test. Older versions print no header and only
/// `"TEST","rps"`; that is accepted too. Other lines (warnings) are skipped.
fn parse_csv(text: &str) -> Result<Vec<CsvRow>> {
    let mut columns: Vec<String> = vec!["test".into(), "rps".into()];
    let mut rows = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| l.starts_with('"')) {
        let cells = split_csv_line(line);
        if cells.first().map(String::as_str) == Some("test") {
            columns = cells;
            continue;
        }
        let cell = |name: &str| -> Option<&str> {
            let i = columns.iter().position(|c| c == name)?;
            cells.get(i).map(String::as_str)
        };
        let number = |name: &str| -> Option<f64> { cell(name)?.parse().ok() };
        rows.push(CsvRow {
            test: cell("test")
                .context("CSV line without a test name")?
                .to_string(),
            rps: number("rps").with_context(|| format!("no rps in CSV line {line:?}"))?,
            p50_ms: number("p50_latency_ms"),
            p99_ms: number("p99_latency_ms"),
        });
    }
    ensure!(
        !rows.is_empty(),
        "no result lines in redis-benchmark output:\n{text}"
    );
    Ok(rows)
}

/// Splits one CSV line with `"quoted"` cells (`""` is a quote inside one).
fn split_csv_line(line: &str) -> Vec<String> {
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cell.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => cells.push(std::mem::take(&mut cell)),
            _ => cell.push(c),
        }
    }
    cells.push(cell);
    cells
}

/// `argv` as one line a shell would run the same way.
fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `argv` to completion, killing it after `timeout`; returns its stdout.
fn run_to_completion(argv: &[String], timeout: Duration) -> Result<String> {
    let line = shell_line(argv);
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("start {line}"))?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_string(&mut s);
            }
            s
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            bail!("timed out after {timeout:?} (killed): {line}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = stdout.join().unwrap_or_default();
    let err = stderr.join().unwrap_or_default();
    ensure!(
        status.success(),
        "{line} failed ({status})\nstdout:\n{out}\nstderr:\n{err}"
    );
    if !err.trim().is_empty() {
        eprintln!("  redis-benchmark said on stderr: {}", err.trim());
    }
    Ok(out)
}

/// One server's result for one test in one redis-benchmark invocation.
#[derive(Debug, Clone, Serialize)]
struct Sample {
    pinned: bool,
    round: usize,
    pipeline: u32,
    server: ServerKind,
    /// As redis-benchmark names it: "SET", "GET", "LRANGE_100 (first 100
    /// elements)", ...
    test: String,
    /// The `--tests` name that selected it: "set", "lrange_100", ...
    benchmark_test: String,
    /// Collection tests: the key, its length as the measured run began and
    /// ended, and the members this program added to it first (a pop's
    /// top-up, an LRANGE's fill), outside the measured window.
    key: Option<String>,
    len_before: Option<u64>,
    len_after: Option<u64>,
    setup_added: Option<u64>,
    ops_per_sec: f64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    /// Server CPU (user + system, all threads) during the invocation.
    server_cpu_s: f64,
    server_cpu_us_per_op: f64,
    /// CPU of server children reaped during the invocation (Redis AOF
    /// rewrites); not in `server_cpu_us_per_op`.
    server_children_cpu_s: f64,
    /// redis-benchmark's own CPU over the invocation.
    client_cpu_s: f64,
    /// The same per request: where redis-benchmark saturates a core (P=1),
    /// what a server costs its client decides the throughput.
    client_cpu_us_per_op: f64,
    wall_s: f64,
}

/// What each server looked like after all runs of one pinning mode.
#[derive(Debug, Clone, Serialize)]
struct ServerEnd {
    pinned: bool,
    server: ServerKind,
    command_line: String,
    rss_bytes: Option<u64>,
    dbsize: Option<i64>,
    /// How many of the collection keys the tests use exist at the end.
    collection_keys: Option<i64>,
    data_dir_bytes: Option<u64>,
    /// All CPU since the server started, warm-up included.
    cpu: Option<CpuTimes>,
    /// Requests sent to it in all, warm-up and setup included.
    requests: u64,
}

/// The medians for one (pinning, test, pipeline): the table's row.
#[derive(Debug, Clone, Serialize)]
struct Summary {
    pinned: bool,
    test: String,
    benchmark_test: String,
    pipeline: u32,
    redis_ops_per_sec: f64,
    basalt_ops_per_sec: f64,
    ops_ratio: f64,
    redis_cpu_us_per_op: f64,
    basalt_cpu_us_per_op: f64,
    cpu_ratio: f64,
    /// redis-benchmark's CPU per request against Basalt / against Redis.
    client_cpu_ratio: f64,
    redis_p50_ms: Option<f64>,
    redis_p99_ms: Option<f64>,
    basalt_p50_ms: Option<f64>,
    basalt_p99_ms: Option<f64>,
    rounds: usize,
    /// Collection tests: the key and the medians of its length before and
    /// after the measured runs, and of the members added first.
    key: Option<String>,
    redis_len_before: Option<f64>,
    redis_len_after: Option<f64>,
    basalt_len_before: Option<f64>,
    basalt_len_after: Option<f64>,
    redis_setup_added: Option<f64>,
    basalt_setup_added: Option<f64>,
}

#[derive(Debug, Serialize)]
struct JsonOut<'a> {
    requests: u64,
    keyspace: u64,
    data_size: usize,
    clients: u32,
    pipelines: &'a [u32],
    tests: &'a [&'a str],
    rounds: usize,
    warmup_requests: u64,
    cpus: usize,
    redis_benchmark_commands: &'a [String],
    summary: &'a [Summary],
    servers: &'a [ServerEnd],
    samples: &'a [Sample],
    /// `--collections`: members per collection (0: not run).
    collection_members: u64,
    collection_summary: &'a [collections::MemSummary],
    collection_records: &'a [collections::MemRecord],
}

/// The fixed parts of every redis-benchmark invocation.
struct Plan<'a> {
    args: &'a ServerArgs,
    tools: &'a Tools,
    timeout: Duration,
}

impl Plan<'_> {
    /// The invocation: `test` is `-t <name>` or a custom command (which
    /// must come after every option).
    fn argv(
        &self,
        port: u16,
        test: &[String],
        requests: u64,
        pipeline: u32,
        pinned: bool,
    ) -> Vec<String> {
        let a = self.args;
        let mut argv = self.tools.pin_prefix(pinned, CLIENT_CPU);
        argv.push(self.tools.redis_benchmark.display().to_string());
        for s in [
            "-h".to_string(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string(),
            "-n".into(),
            requests.to_string(),
            "-r".into(),
            a.keyspace.to_string(),
            "-d".into(),
            a.data_size.to_string(),
            "-c".into(),
            a.clients.to_string(),
            "-P".into(),
            pipeline.to_string(),
            "--csv".into(),
        ] {
            argv.push(s);
        }
        argv.extend(test.iter().cloned());
        argv
    }

    /// Runs one redis-benchmark invocation against `server` and measures the
    /// server's CPU time around it.
    fn measure(
        &self,
        server: &mut Server,
        spec: &TestSpec,
        pipeline: u32,
        pinned: bool,
        round: usize,
        commands: &mut Vec<String>,
    ) -> Result<Vec<Sample>> {
        let argv = self.argv(
            server.port,
            &spec.invocation(),
            self.args.requests,
            pipeline,
            pinned,
        );
        let line = shell_line(&argv);
        if !commands.contains(&line) {
            commands.push(line);
        }
        server.ensure_running()?;
        if spec.name == "evalsha" {
            // Unmeasured: the script EVALSHA names.
            let mut conn = Conn::open(server.port, self.timeout)?;
            let sha = conn.call(client::cmd(["SCRIPT", "LOAD", catalog::SET_SCRIPT]))?;
            ensure!(
                matches!(&sha, Reply::Bulk(Some(b)) if b == catalog::SET_SCRIPT_SHA.as_bytes()),
                "SCRIPT LOAD on {} answered {sha:?}",
                server.kind.name()
            );
            server.setup_requests += 1;
        }
        // Unmeasured: bring the collection key into the state the test needs.
        let mut setup = None;
        if spec.collection.is_some() {
            let mut conn = Conn::open(server.port, self.timeout)?;
            let prepared =
                catalog::prepare(&mut conn, spec, self.args.requests, self.args.data_size)
                    .with_context(|| format!("prepare {} on {}", spec.name, server.kind.name()))?;
            setup = prepared.map(|p| (conn, p));
        }
        let cpu0 = server.cpu()?;
        let client0 = children_cpu_seconds();
        let t0 = Instant::now();
        let out = run_to_completion(&argv, self.timeout);
        let wall_s = t0.elapsed().as_secs_f64();
        let client_cpu_s = children_cpu_seconds() - client0;
        // A server that crashed is the likelier story than a client failure.
        server.ensure_running()?;
        let rows = parse_csv(&out?)?;
        let cpu1 = server.cpu()?;
        let server_cpu_s = cpu1.own - cpu0.own;
        let server_children_cpu_s = cpu1.children - cpu0.children;
        let mut state = None;
        if let Some((mut conn, p)) = setup {
            let after = catalog::length(&mut conn, p.coll)?;
            server.setup_requests += p.commands + 1;
            state = Some((p, after));
        }
        // One invocation is one test, except `-t ping`, which runs two; their
        // CPU cannot be split, so it is shared out per request.
        let ops = self.args.requests as f64 * rows.len() as f64;
        Ok(rows
            .into_iter()
            .map(|r| Sample {
                pinned,
                round,
                pipeline,
                server: server.kind,
                test: spec.rename(&r.test),
                benchmark_test: spec.name.to_string(),
                key: state.map(|(p, _)| p.coll.key().to_string()),
                len_before: state.map(|(p, _)| p.len_before),
                len_after: state.map(|(_, after)| after),
                setup_added: state.map(|(p, _)| p.added),
                ops_per_sec: r.rps,
                p50_ms: r.p50_ms,
                p99_ms: r.p99_ms,
                server_cpu_s,
                server_cpu_us_per_op: server_cpu_s * 1e6 / ops,
                server_children_cpu_s,
                client_cpu_s,
                client_cpu_us_per_op: client_cpu_s * 1e6 / ops,
                wall_s,
            })
            .collect())
    }
}

pub fn run(args: ServerArgs) -> Result<()> {
    ensure!(args.requests > 0, "--requests must be at least 1");
    ensure!(args.keyspace > 0, "--keyspace must be at least 1");
    ensure!(args.clients > 0, "--clients must be at least 1");
    ensure!(args.rounds > 0, "--rounds must be at least 1");
    ensure!(!args.pipelines.is_empty(), "--pipelines is empty");
    ensure!(
        args.pipelines.iter().all(|&p| p > 0),
        "pipeline depths must be at least 1"
    );
    let specs = catalog::select(&args.tests)?;
    let colls = catalog::collections_of(&specs);
    let tools = Tools::resolve(&args)?;
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    fs::create_dir_all(&base).with_context(|| format!("create {}", base.display()))?;
    let default_warmup = if specs.iter().any(|t| t.string_keys) {
        args.requests
    } else {
        0
    };
    let warmup = args.warmup.unwrap_or(default_warmup);
    let deepest = *args.pipelines.iter().max().expect("checked non-empty");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let test_names: Vec<&str> = specs.iter().map(|t| t.name).collect();

    println!(
        "basalt-bench server: redis-benchmark -n {} -r {} -d {} -c {}, pipelines {:?}, tests {} \
         (redis-benchmark's own order), {} round(s), warm-up {} SET at P={} per server",
        args.requests,
        args.keyspace,
        args.data_size,
        args.clients,
        args.pipelines,
        test_names.join(","),
        args.rounds,
        warmup,
        deepest
    );
    if !colls.is_empty() {
        let keys: Vec<&str> = colls.iter().map(|c| c.key()).collect();
        println!(
            "  collection tests: the same state on both servers: {} deleted before every round and \
             pipeline depth; before a pop test the key is topped up to -n members, before LRANGE_N \
             the list is refilled with max(N, -n) elements of -d bytes (this program's own pipelined \
             client, outside the measured window); lengths before/after each run are reported",
            keys.join(" ")
        );
    }
    if args.collections > 0 {
        println!(
            "  memory per member: fresh servers, one hash of {n} fields, one sorted set of {n} \
             members (see the last table)",
            n = group(args.collections as f64)
        );
    }
    println!(
        "  redis-server    {} ({})",
        tools.redis_server.display(),
        version_of(&tools.redis_server)
    );
    println!(
        "  redis-benchmark {} ({})",
        tools.redis_benchmark.display(),
        version_of(&tools.redis_benchmark)
    );
    println!("  basalt          {}", tools.basalt.display());
    println!(
        "  machine: {cpus} CPU(s) for this process; redis-benchmark and the server under test share \
         them, and whatever else runs on the machine competes too (load average at start: {})",
        load_average()
    );
    println!();

    let plan = Plan {
        args: &args,
        tools: &tools,
        timeout: Duration::from_secs(args.run_timeout),
    };
    let startup = Duration::from_secs(args.startup_timeout);
    let mut samples = Vec::new();
    let mut ends = Vec::new();
    let mut commands = Vec::new();
    let mut server_lines = Vec::new();
    for &pinned in args.pin.modes() {
        let mut servers = Vec::new();
        for kind in ServerKind::BOTH {
            let s = Server::start(kind, &tools, pinned, &base, startup)?;
            eprintln!(
                "[{}] started {} (pid {}): {}",
                pin_label(pinned),
                kind.name(),
                s.pid(),
                s.command_line
            );
            server_lines.push(format!("[{}] {}", pin_label(pinned), s.command_line));
            servers.push(s);
        }

        if warmup > 0 {
            for s in &mut servers {
                let set = ["-t".to_string(), "set".into()];
                let argv = plan.argv(s.port, &set, warmup, deepest, pinned);
                eprintln!(
                    "[{}] warm-up {}: {}",
                    pin_label(pinned),
                    s.kind.name(),
                    shell_line(&argv)
                );
                run_to_completion(&argv, plan.timeout)
                    .with_context(|| format!("warm-up of {}", s.kind.name()))?;
            }
        }

        for round in 0..args.rounds {
            for &pipeline in &args.pipelines {
                // Every round and depth starts the collection tests from nothing.
                for s in &mut servers {
                    if !colls.is_empty() {
                        let mut conn = Conn::open(s.port, plan.timeout)?;
                        catalog::reset(&mut conn, &colls)
                            .with_context(|| format!("reset {}", s.kind.name()))?;
                        s.setup_requests += 1;
                    }
                }
                for spec in &specs {
                    // Flip the order every round so neither server always goes first.
                    let order: Vec<usize> = if round % 2 == 0 {
                        vec![0, 1]
                    } else {
                        vec![1, 0]
                    };
                    for i in order {
                        let got = plan.measure(
                            &mut servers[i],
                            spec,
                            pipeline,
                            pinned,
                            round,
                            &mut commands,
                        )?;
                        for s in &got {
                            progress(s, args.rounds);
                        }
                        samples.extend(got);
                    }
                }
            }
        }

        for s in &mut servers {
            s.ensure_running()?;
            let measured = samples
                .iter()
                .filter(|x| x.pinned == pinned && x.server == s.kind)
                .count() as u64
                * args.requests;
            ends.push(ServerEnd {
                pinned,
                server: s.kind,
                command_line: s.command_line.clone(),
                rss_bytes: sysinfo::rss_of(s.pid()).map(|r| r.total),
                dbsize: s
                    .dbsize()
                    .map_err(|e| eprintln!("DBSIZE on {}: {e:#}", s.kind.name()))
                    .ok(),
                collection_keys: count_existing(s, &colls, plan.timeout)
                    .map_err(|e| eprintln!("EXISTS on {}: {e:#}", s.kind.name()))
                    .ok(),
                data_dir_bytes: sysinfo::dir_bytes(&s.data_dir()).ok(),
                cpu: s.cpu().ok(),
                requests: warmup + measured + s.setup_requests,
            });
        }
        // Stops both servers and removes their directories.
        drop(servers);
    }

    let (mem_records, mem_summary) = if args.collections > 0 {
        let pinned = args.pin.modes()[0];
        let (records, summary, lines) = collections::run(
            args.collections,
            &tools,
            pinned,
            &base,
            startup,
            plan.timeout,
        )?;
        server_lines.extend(
            lines
                .into_iter()
                .map(|l| format!("[collections, {}] {l}", pin_label(pinned))),
        );
        (records, summary)
    } else {
        (Vec::new(), Vec::new())
    };

    let summary = summarize(&samples);
    println!("server command lines:");
    for l in &server_lines {
        println!("  {l}");
    }
    println!("redis-benchmark command lines (each run once per round):");
    for l in &commands {
        println!("  {l}");
    }
    println!();
    print!("{}", report(&summary, &ends, &args, &specs, warmup, cpus));
    print!("{}", collections::report(&mem_records, &mem_summary));
    println!("load average at the end: {}", load_average());

    if let Some(path) = &args.json {
        let out = JsonOut {
            requests: args.requests,
            keyspace: args.keyspace,
            data_size: args.data_size,
            clients: args.clients,
            pipelines: &args.pipelines,
            tests: &test_names,
            rounds: args.rounds,
            warmup_requests: warmup,
            cpus,
            redis_benchmark_commands: &commands,
            summary: &summary,
            servers: &ends,
            samples: &samples,
            collection_members: args.collections,
            collection_summary: &mem_summary,
            collection_records: &mem_records,
        };
        let text = serde_json::to_string_pretty(&out)?;
        fs::write(path, text + "\n").with_context(|| format!("write {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// How many of `colls`' keys exist on `s` (one `EXISTS k1 k2 ...`).
fn count_existing(s: &Server, colls: &[Coll], timeout: Duration) -> Result<i64> {
    if colls.is_empty() {
        return Ok(0);
    }
    let mut conn = Conn::open(s.port, timeout)?;
    conn.integer(client::cmd(
        std::iter::once("EXISTS").chain(colls.iter().map(|c| c.key())),
    ))
}

fn progress(s: &Sample, rounds: usize) {
    let children = if s.server_children_cpu_s > 0.0 {
        format!(" +{:.2} s reaped child", s.server_children_cpu_s)
    } else {
        String::new()
    };
    let state = match (&s.key, s.len_before, s.len_after) {
        (Some(k), Some(b), Some(a)) => format!(
            "  {k} {} -> {}{}",
            group(b as f64),
            group(a as f64),
            match s.setup_added {
                Some(n) if n > 0 => format!(" ({} added first)", group(n as f64)),
                _ => String::new(),
            }
        ),
        _ => String::new(),
    };
    eprintln!(
        "[{}] round {}/{} P={:<3} {:<10} {:<6} {:>11} ops/s  p50/p99 {} ms  server cpu {:.2} s ({:.2} us/op){}  \
         redis-benchmark cpu {:.2} s of {:.2} s wall{}",
        pin_label(s.pinned),
        s.round + 1,
        rounds,
        s.pipeline,
        s.test,
        s.server.name(),
        group(s.ops_per_sec),
        latency_pair(s.p50_ms, s.p99_ms),
        s.server_cpu_s,
        s.server_cpu_us_per_op,
        children,
        s.client_cpu_s,
        s.wall_s,
        state
    );
}

/// `redis-server --version` / `redis-benchmark --version`, first line.
fn version_of(bin: &Path) -> String {
    Command::new(bin)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "version unknown".into())
}

fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Medians per (pinning, test, pipeline), in the order the runs happened.
fn summarize(samples: &[Sample]) -> Vec<Summary> {
    let mut keys: Vec<(bool, String, u32)> = Vec::new();
    for s in samples {
        let k = (s.pinned, s.test.clone(), s.pipeline);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    // Group by pinning, then pipeline, then test order of appearance.
    keys.sort_by_key(|(pinned, _, pipeline)| (*pinned, *pipeline));
    keys.into_iter()
        .map(|(pinned, test, pipeline)| {
            let of = |kind: ServerKind| -> Vec<&Sample> {
                samples
                    .iter()
                    .filter(|s| {
                        s.pinned == pinned
                            && s.test == test
                            && s.pipeline == pipeline
                            && s.server == kind
                    })
                    .collect()
            };
            let (r, b) = (of(ServerKind::Redis), of(ServerKind::Basalt));
            let med =
                |v: &[&Sample], f: fn(&Sample) -> f64| median(v.iter().map(|s| f(s)).collect());
            let med_opt = |v: &[&Sample], f: fn(&Sample) -> Option<f64>| {
                let xs: Vec<f64> = v.iter().filter_map(|s| f(s)).collect();
                (!xs.is_empty()).then(|| median(xs))
            };
            let (r_ops, b_ops) = (med(&r, |s| s.ops_per_sec), med(&b, |s| s.ops_per_sec));
            let (r_cpu, b_cpu) = (
                med(&r, |s| s.server_cpu_us_per_op),
                med(&b, |s| s.server_cpu_us_per_op),
            );
            let b_first = b.first().copied();
            let len = |v: &[&Sample], f: fn(&Sample) -> Option<u64>| {
                let xs: Vec<f64> = v.iter().filter_map(|s| f(s).map(|x| x as f64)).collect();
                (!xs.is_empty()).then(|| median(xs))
            };
            Summary {
                pinned,
                pipeline,
                benchmark_test: b_first.map_or(String::new(), |s| s.benchmark_test.clone()),
                key: b_first.and_then(|s| s.key.clone()),
                redis_len_before: len(&r, |s| s.len_before),
                redis_len_after: len(&r, |s| s.len_after),
                basalt_len_before: len(&b, |s| s.len_before),
                basalt_len_after: len(&b, |s| s.len_after),
                redis_setup_added: len(&r, |s| s.setup_added),
                basalt_setup_added: len(&b, |s| s.setup_added),
                redis_ops_per_sec: r_ops,
                basalt_ops_per_sec: b_ops,
                ops_ratio: b_ops / r_ops,
                redis_cpu_us_per_op: r_cpu,
                basalt_cpu_us_per_op: b_cpu,
                cpu_ratio: b_cpu / r_cpu,
                client_cpu_ratio: med(&b, |s| s.client_cpu_us_per_op)
                    / med(&r, |s| s.client_cpu_us_per_op),
                redis_p50_ms: med_opt(&r, |s| s.p50_ms),
                redis_p99_ms: med_opt(&r, |s| s.p99_ms),
                basalt_p50_ms: med_opt(&b, |s| s.p50_ms),
                basalt_p99_ms: med_opt(&b, |s| s.p99_ms),
                rounds: r.len().min(b.len()),
                test,
            }
        })
        .collect()
}

/// Distinct `key:` strings expected after all SET requests (warm-up
/// included), when SET is the only test that creates string keys:
/// `keyspace * (1 - (1 - 1/keyspace)^draws)`. Collection tests create at most
/// their own fixed keys, counted apart ([`ServerEnd::collection_keys`]).
fn expected_dbsize(args: &ServerArgs, specs: &[TestSpec], warmup: u64) -> Option<f64> {
    let mut sets = 0u64;
    for t in specs {
        match t.name {
            "set" => sets += 1,
            "get" | "ping" | "ping_inline" | "ping_mbulk" => {}
            _ if t.collection.is_some() => {}
            _ => return None,
        }
    }
    let draws = warmup + args.rounds as u64 * args.pipelines.len() as u64 * sets * args.requests;
    let k = args.keyspace as f64;
    Some(k * (1.0 - (1.0 - 1.0 / k).powf(draws as f64)))
}

fn latency_pair(p50: Option<f64>, p99: Option<f64>) -> String {
    let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.3}"));
    format!("{}/{}", f(p50), f(p99))
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or("-".into(), |b| {
        format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
    })
}

fn report(
    summary: &[Summary],
    ends: &[ServerEnd],
    args: &ServerArgs,
    specs: &[TestSpec],
    warmup: u64,
    cpus: usize,
) -> String {
    let mut s = String::new();
    let w = summary
        .iter()
        .map(|x| x.test.len())
        .max()
        .unwrap_or(0)
        .max(6);
    let pins: BTreeSet<bool> = summary.iter().map(|x| x.pinned).collect();
    for pinned in pins {
        let rounds = summary
            .iter()
            .filter(|x| x.pinned == pinned)
            .map(|x| x.rounds)
            .min()
            .unwrap_or(0);
        let _ = writeln!(s, "== {} ==", pin_label(pinned));
        if pinned {
            let _ = writeln!(
                s,
                "cores: server pinned to CPU {SERVER_CPU} (taskset, from its start: a tokio server \
                 sizes its runtime to 1 CPU), redis-benchmark to CPU {CLIENT_CPU}; other processes \
                 on the machine are not pinned away"
            );
        } else {
            let _ = writeln!(
                s,
                "cores: not pinned; the server, redis-benchmark and anything else on the machine \
                 share all {cpus} CPU(s)"
            );
        }
        let _ = writeln!(
            s,
            "median of {rounds} round(s); -n {} -r {} -d {} -c {}; ops/s and latency as \
             redis-benchmark reports them; cpu = server user+system time per request from /proc (all threads; forked children apart, below); \
             client = redis-benchmark's CPU per request against basalt / against redis",
            args.requests, args.keyspace, args.data_size, args.clients
        );
        let _ = writeln!(
            s,
            "{:<w$} {:>3} {:>12} {:>12} {:>7} {:>10} {:>10} {:>7} {:>7} {:>15} {:>15}",
            "test",
            "P",
            "redis ops/s",
            "basalt ops/s",
            "b/r",
            "redis cpu",
            "basalt cpu",
            "b/r",
            "client",
            "redis p50/p99",
            "basalt p50/p99"
        );
        let _ = writeln!(
            s,
            "{:<w$} {:>3} {:>12} {:>12} {:>7} {:>10} {:>10} {:>7} {:>7} {:>15} {:>15}",
            "", "", "", "", "", "us/op", "us/op", "", "b/r", "ms", "ms"
        );
        for x in summary.iter().filter(|x| x.pinned == pinned) {
            let _ = writeln!(
                s,
                "{:<w$} {:>3} {:>12} {:>12} {:>6.2}x {:>10.2} {:>10.2} {:>6.2}x {:>6.2}x {:>15} {:>15}",
                x.test,
                x.pipeline,
                group(x.redis_ops_per_sec),
                group(x.basalt_ops_per_sec),
                x.ops_ratio,
                x.redis_cpu_us_per_op,
                x.basalt_cpu_us_per_op,
                x.cpu_ratio,
                x.client_cpu_ratio,
                latency_pair(x.redis_p50_ms, x.redis_p99_ms),
                latency_pair(x.basalt_p50_ms, x.basalt_p99_ms),
            );
        }
        let with_keys: Vec<&Summary> = summary
            .iter()
            .filter(|x| x.pinned == pinned && x.key.is_some())
            .collect();
        if !with_keys.is_empty() {
            let _ = writeln!(
                s,
                "collection keys: length when the measured run began -> when it ended (medians), \
                 and members this program added first, unmeasured:"
            );
            let n = |x: Option<f64>| x.map_or("-".to_string(), group);
            for x in with_keys {
                let (r0, r1) = (x.redis_len_before, x.redis_len_after);
                let (b0, b1) = (x.basalt_len_before, x.basalt_len_after);
                let same = r0 == b0 && r1 == b1;
                let lens = if same {
                    format!("{} -> {}", n(b0), n(b1))
                } else {
                    format!(
                        "redis {} -> {}, basalt {} -> {}",
                        n(r0),
                        n(r1),
                        n(b0),
                        n(b1)
                    )
                };
                let added = match (x.redis_setup_added, x.basalt_setup_added) {
                    (Some(r), Some(b)) if r == b && b > 0.0 => {
                        format!("  ({} added first)", group(b))
                    }
                    (Some(r), Some(b)) if r != b => {
                        format!("  (added first: redis {}, basalt {})", group(r), group(b))
                    }
                    _ => String::new(),
                };
                let _ = writeln!(
                    s,
                    "  {:<w$} P={:<3} {:<7} {lens}{added}",
                    x.test,
                    x.pipeline,
                    x.key.as_deref().unwrap_or("")
                );
            }
        }
        let _ = writeln!(s, "after all runs:");
        let mine: Vec<&ServerEnd> = ends.iter().filter(|e| e.pinned == pinned).collect();
        for e in &mine {
            let _ = writeln!(
                s,
                "  {:<6} RSS {:>10}  DBSIZE {:>9}  data dir {:>10}  cpu {}",
                e.server.name(),
                mib(e.rss_bytes),
                e.dbsize.map_or("-".into(), |n| group(n as f64)),
                mib(e.data_dir_bytes),
                e.cpu.map_or("-".into(), |c| format!(
                    "{:.1} s own + {:.1} s reaped children (AOF rewrites) = {:.2} us per request \
                     over all {} requests incl. warm-up and setup",
                    c.own,
                    c.children,
                    (c.own + c.children) * 1e6 / e.requests as f64,
                    group(e.requests as f64)
                )),
            );
        }
        if let Some(expected) = expected_dbsize(args, specs, warmup) {
            let colls: Vec<String> = mine
                .iter()
                .filter_map(|e| e.collection_keys.filter(|&n| n > 0))
                .map(|n| n.to_string())
                .collect();
            let plus = if colls.is_empty() {
                String::new()
            } else {
                format!(
                    " + the collection keys left ({} on redis/basalt)",
                    colls.join("/")
                )
            };
            let _ = writeln!(
                s,
                "  expected DBSIZE ~ {} (distinct keys among the SET requests' random draws){plus}",
                group(expected)
            );
        }
        let sizes: Vec<i64> = mine.iter().filter_map(|e| e.dbsize).collect();
        if let [a, b] = sizes[..] {
            // Random draws differ per invocation: allow a few standard deviations.
            let slack = 5.0 * (args.keyspace as f64).sqrt() + 0.001 * a.max(b) as f64;
            if (a - b).abs() as f64 > slack {
                let _ = writeln!(
                    s,
                    "  WARNING: the servers got the same requests but their key counts differ by \
                     more than chance explains ({a} vs {b})"
                );
            }
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(
        s,
        "note: string keyspace state carries over between runs (no FLUSHALL), the same sequence for \
         both servers (redis-benchmark draws its random keys afresh per run); GET misses keys SET \
         never drew (hit rate ~ DBSIZE / -r). Collection keys are deleted before every round and \
         pipeline depth, and topped up/refilled before pops and LRANGE, on both servers alike."
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_of_redis_benchmark_7_is_parsed_by_header() {
        let out = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\
                   \"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                   \"SET\",\"12626.26\",\"3.824\",\"0.072\",\"3.303\",\"7.591\",\"11.703\",\"18.655\"\n\
                   \"GET\",\"11655.01\",\"4.039\",\"0.072\",\"3.111\",\"10.503\",\"15.695\",\"75.903\"\n";
        let rows = parse_csv(out).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[0],
            CsvRow {
                test: "SET".into(),
                rps: 12626.26,
                p50_ms: Some(3.303),
                p99_ms: Some(11.703)
            }
        );
        assert_eq!(rows[1].test, "GET");
        assert_eq!(rows[1].p99_ms, Some(15.695));
    }

    #[test]
    fn csv_without_header_and_with_noise_is_parsed() {
        let out = "WARNING: Could not fetch server CONFIG\n\"MSET (10 keys)\",\"500.00\"\n";
        let rows = parse_csv(out).unwrap();
        assert_eq!(rows[0].test, "MSET (10 keys)");
        assert_eq!(rows[0].rps, 500.0);
        assert_eq!(rows[0].p99_ms, None);
        assert!(parse_csv("ERROR: connection refused\n").is_err());
    }

    #[test]
    fn csv_cells_keep_commas_and_quotes_inside_quotes() {
        assert_eq!(
            split_csv_line(r#""a,b","c""d",e"#),
            vec!["a,b", "c\"d", "e"]
        );
    }

    #[test]
    fn proc_stat_ticks_survive_odd_command_names() {
        // Fields 14..17 are 7, 3, 2, 1: 10 own ticks, 3 of children.
        let stat = "1234 (re dis) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 4 0";
        assert_eq!(parse_stat_ticks(stat), Some((10, 3)));
        assert_eq!(parse_stat_ticks("garbage"), None);
        assert!(cpu_times(std::process::id()).unwrap().own >= 0.0);
    }

    #[test]
    fn shell_lines_quote_empty_and_special_arguments() {
        let argv: Vec<String> = ["redis-server", "--save", "", "--dir", "/tmp/a b"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(shell_line(&argv), "redis-server --save '' --dir '/tmp/a b'");
    }

    #[test]
    fn resp_replies_are_read() {
        let mut r = BufReader::new(&b"+PONG\r\n:42\r\n$3\r\nabc\r\n$-1\r\n-ERR no\r\n"[..]);
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Simple("PONG".into()));
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Integer(42));
        assert_eq!(
            read_reply(&mut r).unwrap(),
            Reply::Bulk(Some(b"abc".to_vec()))
        );
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Bulk(None));
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Error("ERR no".into()));
    }

    #[test]
    fn resp_arrays_are_read_whole_so_a_pipeline_stays_in_step() {
        let mut r = BufReader::new(&b"*2\r\n$1\r\na\r\n:1\r\n*-1\r\n*0\r\n:7\r\n"[..]);
        assert_eq!(
            read_reply(&mut r).unwrap(),
            Reply::Array(Some(vec![
                Reply::Bulk(Some(b"a".to_vec())),
                Reply::Integer(1)
            ]))
        );
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Array(None));
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Array(Some(vec![])));
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Integer(7));
    }
}
