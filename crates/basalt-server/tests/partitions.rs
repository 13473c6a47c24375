//! Partitions: three `basalt` processes, each in its own Linux network
//! namespace, joined by veth links to one bridge, while the network is cut
//! and healed under four recording clients (SET/GET on three registers,
//! INCR/GET on two counters; writes to the node a client believes leads,
//! reads on any node; client 1 only writes). Every history goes to
//! `basalt-lincheck`; afterwards every node must hold the same data and a
//! write must succeed within a bounded time.
//!
//! The network of one test (names and subnet unique to the test, so tests
//! run in parallel):
//!
//! ```text
//!  root namespace             bslt-<sfx>-br                 bslt-<sfx>-nI
//!  clients, 10.77.X.1         br0 (bridge)                  10.77.X.(10+I)
//!  bslt<sfx>h ── veth ── host ─┤
//!                              ├─ p1 ── veth ── eth0        basalt 1
//!                              ├─ p2 ── veth ── eth0        basalt 2
//!                              └─ p3 ── veth ── eth0        basalt 3
//! ```
//!
//! The bridge has a namespace of its own: with `br_netfilter` loaded, a
//! bridge in the root namespace would pass its frames through the host's
//! iptables FORWARD chain (Docker sets it to DROP); a fresh namespace has no
//! rules.
//!
//! Two kinds of cut, both plain iproute2 (`tc netem` would need
//! `sch_netem`, and filtering by peer `iptables`; the kernel these tests
//! were written on has neither netem nor the tc drop action):
//! - **link down** ([`Cut::LinkDown`]): the node's port on the bridge goes
//!   down. The node reaches nobody and nobody reaches it, clients included;
//!   packets vanish as on a pulled cable, so open connections hang until a
//!   timeout.
//! - **peers cut** ([`Cut::Peers`]): blackhole routes between the node and
//!   the other nodes; clients still reach it. A cut-off leader keeps taking
//!   client calls: its writes cannot commit, and its reads must be refused
//!   rather than served stale, which is what the read barrier is for.
//!
//! The tests need root and `ip netns`; without them each prints why it
//! skips and passes. Server logs (`--loglevel info`) and the recorded
//! histories (in `basalt-lincheck`'s line format) are written to the test's
//! temporary directory, which is kept, and its path printed, when a test
//! fails or `BASALT_TEST_KEEP` is set.

use std::collections::hash_map::RandomState;
use std::fmt::Write as _;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use basalt_lincheck::{
    check, Counter, CounterInput, Operation, Options, Register, RegisterInput, RegisterOutput,
    Verdict,
};
use redis::Connection;

const NODES: usize = 3;
const ALL: [usize; NODES] = [0, 1, 2];
/// Every node has an address of its own, so the ports can be fixed.
const PORT: u16 = 6379;
const RAFT_PORT: u16 = 16379;
/// The workload's keys: three registers and two counters.
const REGISTERS: [&str; 3] = ["r0", "r1", "r2"];
const COUNTERS: [&str; 2] = ["n0", "n1"];
/// A client gives up connecting after this long, and on a reply after
/// `READ_TIMEOUT` (longer than the server's 2 s read barrier, so a refused
/// read arrives as `-CLUSTERDOWN` rather than as a timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);
const READ_TIMEOUT: Duration = Duration::from_millis(2500);

/// A number different in every call and every process.
fn random() -> u64 {
    let mut h = RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    h.finish()
}

/// xorshift64: seeded, so a printed seed replays a test's choices.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs `program args`; `Err` carries what it printed on failure.
fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{program}`: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `ip -n <ns> args`.
fn ipn(ns: &str, args: &[&str]) -> Result<String, String> {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    run("ip", &all)
}

/// Why these tests cannot run here, if they cannot.
fn unsupported() -> Option<String> {
    match run("id", &["-u"]) {
        Ok(uid) if uid.trim() == "0" => {}
        Ok(uid) => return Some(format!("not root (uid {})", uid.trim())),
        Err(e) => return Some(e),
    }
    let probe = format!("bslt-probe-{:08x}", random() as u32);
    if let Err(e) = run("ip", &["netns", "add", &probe]) {
        return Some(format!("`ip netns` is unavailable: {e}"));
    }
    let _ = run("ip", &["netns", "del", &probe]);
    None
}

/// How a node is cut off (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    LinkDown,
    Peers,
}

/// What is cut now, and what has been done to the network for it.
#[derive(Debug, Default)]
struct Cuts {
    down: [bool; NODES],
    peers: [bool; NODES],
    /// `link_down[i]`: node i's bridge port is down.
    link_down: [bool; NODES],
    /// `blackholed[a][b]`: node a's namespace drops packets to node b.
    blackholed: [[bool; NODES]; NODES],
}

/// One test's namespaces, links and subnet; removed on drop.
#[derive(Debug)]
struct Net {
    sfx: String,
    /// The subnet is 10.77.`x`.0/24.
    x: u8,
    /// Held (locked) while the subnet is in use by this process.
    _lock: File,
    /// The namespaces created so far, deleted on drop.
    namespaces: Vec<String>,
    /// The root namespace's end of the clients' link.
    host_if: String,
    cuts: Mutex<Cuts>,
}

impl Net {
    /// Builds the network drawn in the module's documentation.
    fn create() -> Result<Net, String> {
        let sfx = format!("{:06x}", random() & 0xff_ffff);
        let (x, lock) = claim_subnet()?;
        let mut net = Net {
            host_if: format!("bslt{sfx}h"),
            sfx,
            x,
            _lock: lock,
            namespaces: Vec::new(),
            cuts: Mutex::default(),
        };
        // From here on, a failure drops `net`, which removes what exists.
        let br = net.bridge_ns();
        net.add_namespace(&br)?;
        ipn(&br, &["link", "add", "br0", "type", "bridge"])?;
        ipn(&br, &["link", "set", "br0", "up"])?;
        for i in 0..NODES {
            let ns = net.node_ns(i);
            net.add_namespace(&ns)?;
            let port = Net::port(i);
            ipn(
                &br,
                &[
                    "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns,
                ],
            )?;
            ipn(&br, &["link", "set", &port, "master", "br0"])?;
            ipn(&br, &["link", "set", &port, "up"])?;
            let cidr = format!("{}/24", net.node_ip(i));
            ipn(&ns, &["addr", "add", &cidr, "dev", "eth0"])?;
            ipn(&ns, &["link", "set", "eth0", "up"])?;
        }
        run(
            "ip",
            &[
                "link",
                "add",
                &net.host_if,
                "type",
                "veth",
                "peer",
                "name",
                "host",
                "netns",
                &br,
            ],
        )?;
        ipn(&br, &["link", "set", "host", "master", "br0"])?;
        ipn(&br, &["link", "set", "host", "up"])?;
        let cidr = format!("{}/24", net.host_ip());
        run("ip", &["addr", "add", &cidr, "dev", &net.host_if])?;
        run("ip", &["link", "set", &net.host_if, "up"])?;
        Ok(net)
    }

    fn add_namespace(&mut self, ns: &str) -> Result<(), String> {
        run("ip", &["netns", "add", ns])?;
        self.namespaces.push(ns.to_string());
        ipn(ns, &["link", "set", "lo", "up"])?;
        Ok(())
    }

    fn bridge_ns(&self) -> String {
        format!("bslt-{}-br", self.sfx)
    }

    fn node_ns(&self, i: usize) -> String {
        format!("bslt-{}-n{}", self.sfx, i + 1)
    }

    /// Node `i`'s port on the bridge (in the bridge's namespace).
    fn port(i: usize) -> String {
        format!("p{}", i + 1)
    }

    fn node_ip(&self, i: usize) -> String {
        format!("10.77.{}.{}", self.x, 11 + i)
    }

    fn host_ip(&self) -> String {
        format!("10.77.{}.1", self.x)
    }

    /// Cuts node `i` off (in addition to any cut it already has).
    fn cut(&self, i: usize, how: Cut) {
        let mut c = self.cuts.lock().unwrap();
        match how {
            Cut::LinkDown => c.down[i] = true,
            Cut::Peers => c.peers[i] = true,
        }
        self.apply(&mut c);
    }

    /// Reconnects node `i` (a peers cut of another node still separates
    /// the two).
    fn heal(&self, i: usize) {
        let mut c = self.cuts.lock().unwrap();
        c.down[i] = false;
        c.peers[i] = false;
        self.apply(&mut c);
    }

    fn heal_all(&self) {
        let mut c = self.cuts.lock().unwrap();
        c.down = [false; NODES];
        c.peers = [false; NODES];
        self.apply(&mut c);
    }

    fn is_cut(&self, i: usize) -> bool {
        let c = self.cuts.lock().unwrap();
        c.down[i] || c.peers[i]
    }

    /// Brings links and routes in line with `c.down` and `c.peers`.
    fn apply(&self, c: &mut Cuts) {
        let br = self.bridge_ns();
        for i in 0..NODES {
            if c.down[i] != c.link_down[i] {
                let state = if c.down[i] { "down" } else { "up" };
                ipn(&br, &["link", "set", &Net::port(i), state]).unwrap();
                c.link_down[i] = c.down[i];
            }
        }
        for a in 0..NODES {
            for b in (0..NODES).filter(|&b| b != a) {
                let want = c.peers[a] || c.peers[b];
                if want != c.blackholed[a][b] {
                    let verb = if want { "replace" } else { "del" };
                    let dst = format!("{}/32", self.node_ip(b));
                    ipn(&self.node_ns(a), &["route", verb, "blackhole", &dst]).unwrap();
                    c.blackholed[a][b] = want;
                }
            }
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Deleting a namespace destroys the veth ends in it, and with them
        // their peers (the root namespace's `host_if` among them).
        for ns in self.namespaces.iter().rev() {
            if let Err(e) = run("ip", &["netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
        let _ = run("ip", &["link", "del", &self.host_if]);
    }
}

/// Picks a /24 in 10.77.0.0/16 that no address of the root namespace uses
/// and no other test process holds (a lock file in the temp directory,
/// released when the process exits however it exits).
fn claim_subnet() -> Result<(u8, File), String> {
    let used = run("ip", &["-o", "-4", "addr", "show"])?;
    let start = random();
    for k in 0..254 {
        let x = ((start + k) % 254 + 1) as u8;
        if used.contains(&format!(" 10.77.{x}.")) {
            continue;
        }
        let path = std::env::temp_dir().join(format!("bslt-net-10.77.{x}.lock"));
        let f = File::options()
            .create(true)
            .write(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if f.try_lock().is_ok() {
            return Ok((x, f));
        }
    }
    Err("no free /24 in 10.77.0.0/16".into())
}

/// Three `basalt` processes in their namespaces.
struct Cluster {
    tag: &'static str,
    procs: Vec<Option<Child>>,
    dir: Option<tempfile::TempDir>,
    // Last: the processes are killed (in `drop`) before the network goes.
    net: Net,
}

impl Cluster {
    /// Builds the network and starts the group; `None` (after saying why)
    /// where these tests cannot run.
    fn start(tag: &'static str) -> Option<Cluster> {
        if let Some(why) = unsupported() {
            eprintln!(
                "SKIPPED {tag}: {why}. The partition tests need root and `ip netns` \
                 (network namespaces, veth, bridge); see docs/testing.md."
            );
            return None;
        }
        let net = Net::create().unwrap_or_else(|e| panic!("{tag}: building the network: {e}"));
        let dir = tempfile::Builder::new()
            .prefix("bslt-partitions-")
            .tempdir()
            .unwrap();
        eprintln!(
            "{tag}: namespaces bslt-{}-{{br,n1,n2,n3}}, subnet 10.77.{}.0/24, logs in {}",
            net.sfx,
            net.x,
            dir.path().display()
        );
        let mut c = Cluster {
            tag,
            procs: (0..NODES).map(|_| None).collect(),
            dir: Some(dir),
            net,
        };
        for i in 0..NODES {
            c.spawn(i);
        }
        for i in 0..NODES {
            c.wait_ready(i);
        }
        c.wait_leader(&ALL, Duration::from_secs(20));
        Some(c)
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().unwrap().path()
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.dir().join(format!("n{}.log", i + 1))
    }

    fn addrs(&self) -> Vec<String> {
        (0..NODES)
            .map(|i| format!("{}:{PORT}", self.net.node_ip(i)))
            .collect()
    }

    fn spawn(&mut self, i: usize) {
        let peers = (0..NODES)
            .map(|j| format!("{}@{}:{RAFT_PORT}", j + 1, self.net.node_ip(j)))
            .collect::<Vec<_>>()
            .join(",");
        let log = File::create(self.log_path(i)).unwrap();
        let err = log.try_clone().unwrap();
        let data = self.dir().join(format!("n{}", i + 1));
        let child = Command::new("ip")
            .args(["netns", "exec", &self.net.node_ns(i)])
            .arg(env!("CARGO_BIN_EXE_basalt"))
            .args(["--port", &PORT.to_string(), "--http-port", "0"])
            .args(["--bind", &self.net.node_ip(i)])
            // Clients come from another address than the node's own.
            .args(["--protected-mode", "no"])
            .arg("--dir")
            .arg(&data)
            .args(["--node-id", &(i + 1).to_string()])
            .args(["--raft-port", &RAFT_PORT.to_string()])
            .args(["--peers", &peers, "--loglevel", "info"])
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap();
        self.procs[i] = Some(child);
    }

    /// Waits (at most 30 s) until node `i` answers PING from the root
    /// namespace, through the bridge.
    fn wait_ready(&mut self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut c) = self.conn(i) {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return;
                }
            }
            if let Some(status) = self.procs[i].as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "{}: node {} exited at start-up ({status}):\n{}",
                    self.tag,
                    i + 1,
                    self.log_tail(i, 30)
                );
            }
            assert!(
                Instant::now() < deadline,
                "{}: node {} not answering within 30 s:\n{}",
                self.tag,
                i + 1,
                self.log_tail(i, 30)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn conn(&self, i: usize) -> redis::RedisResult<Connection> {
        let url = format!("redis://{}:{PORT}/", self.net.node_ip(i));
        let c = redis::Client::open(url)?.get_connection_with_timeout(CONNECT_TIMEOUT)?;
        c.set_read_timeout(Some(READ_TIMEOUT))?;
        c.set_write_timeout(Some(READ_TIMEOUT))?;
        Ok(c)
    }

    /// The node that node `i` names as leader, if it answers.
    fn named_leader(&self, i: usize) -> Option<usize> {
        let mut c = self.conn(i).ok()?;
        sentinel_leader(&mut c, &self.addrs())
    }

    /// Waits until every node of `among` names the same leader, one of
    /// `among`; returns it.
    fn wait_leader(&self, among: &[usize], within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            let seen: Vec<Option<usize>> = among.iter().map(|&i| self.named_leader(i)).collect();
            if let Some(Some(l)) = seen.first() {
                if among.contains(l) && seen.iter().all(|s| *s == Some(*l)) {
                    return *l;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{}: nodes {among:?} agree on no leader among them within {within:?}; \
                 they name {seen:?}",
                self.tag
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Node `i`'s Raft term (`INFO replication`), if it answers.
    fn term(&self, i: usize) -> Option<u64> {
        let mut c = self.conn(i).ok()?;
        let info: String = redis::cmd("INFO").arg("replication").query(&mut c).ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("basalt_raft_term:"))?
            .trim()
            .parse()
            .ok()
    }

    /// What node `i` has applied (READONLY: no read barrier), for `keys`.
    fn local_view(&self, i: usize, keys: &[&str]) -> Option<Vec<Option<String>>> {
        let mut c = self.conn(i).ok()?;
        redis::cmd("READONLY").query::<()>(&mut c).ok()?;
        redis::cmd("MGET").arg(keys).query(&mut c).ok()
    }

    /// Once the network is whole: a write through the leader succeeds
    /// within `within`, then every node's own state holds it and the same
    /// values for the workload's keys, and a linearizable read on every
    /// node sees the same. Returns how long the write took to succeed.
    fn converge(&self, within: Duration) -> Duration {
        let t0 = Instant::now();
        let token = format!("t{:x}", random());
        let addrs = self.addrs();
        loop {
            let written = (0..NODES).any(|i| {
                let Ok(mut c) = self.conn(i) else {
                    return false;
                };
                let Some(l) = sentinel_leader(&mut c, &addrs) else {
                    return false;
                };
                let Ok(mut lc) = self.conn(l) else {
                    return false;
                };
                redis::cmd("SET")
                    .arg("final")
                    .arg(&token)
                    .query::<()>(&mut lc)
                    .is_ok()
            });
            if written {
                break;
            }
            assert!(
                t0.elapsed() < within,
                "{}: no write succeeded within {within:?} of healing",
                self.tag
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let wrote = t0.elapsed();
        let keys: Vec<&str> = REGISTERS
            .iter()
            .chain(&COUNTERS)
            .copied()
            .chain(["final"])
            .collect();
        let deadline = Instant::now() + within;
        let view = loop {
            let views: Vec<_> = (0..NODES).map(|i| self.local_view(i, &keys)).collect();
            let first = views[0].clone();
            if let Some(v) = &first {
                let whole = v.last().unwrap().as_deref() == Some(token.as_str());
                if whole && views.iter().all(|w| w.as_ref() == Some(v)) {
                    break v.clone();
                }
            }
            assert!(
                Instant::now() < deadline,
                "{}: nodes hold different data {within:?} after the last write \
                 (keys {keys:?}, token {token}): {views:?}",
                self.tag
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        for i in 0..NODES {
            loop {
                let got = self.conn(i).ok().and_then(|mut c| {
                    redis::cmd("MGET")
                        .arg(&keys)
                        .query::<Vec<Option<String>>>(&mut c)
                        .ok()
                });
                if let Some(got) = got {
                    assert_eq!(
                        got,
                        view,
                        "{}: a linearizable read on node {}",
                        self.tag,
                        i + 1
                    );
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{}: node {} serves no linearizable read after healing",
                    self.tag,
                    i + 1
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        wrote
    }

    /// Writes the histories to the test directory and asserts that both
    /// are linearizable.
    fn verify(&self, rec: &Recorded) {
        std::fs::write(self.dir().join("registers.hist"), rec.register_lines()).unwrap();
        std::fs::write(self.dir().join("counters.hist"), rec.counter_lines()).unwrap();
        let opts = Options::default().timeout(Some(Duration::from_secs(60)));
        let t = Instant::now();
        let v = check(&Register, &rec.registers, &opts).unwrap();
        assert!(
            v == Verdict::Linearizable,
            "{}: registers ({}): {v}",
            self.tag,
            self.dir().join("registers.hist").display()
        );
        let v = check(&Counter, &rec.counters, &opts).unwrap();
        assert!(
            v == Verdict::Linearizable,
            "{}: counters ({}): {v}",
            self.tag,
            self.dir().join("counters.hist").display()
        );
        eprintln!("{}: linearizable (checked in {:?})", self.tag, t.elapsed());
    }

    fn log_tail(&self, i: usize, lines: usize) -> String {
        let text = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in self.procs.iter_mut() {
            if let Some(mut c) = p.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let keep = std::env::var_os("BASALT_TEST_KEEP").is_some();
        if std::thread::panicking() {
            for i in 0..NODES {
                eprintln!(
                    "--- {}: last lines of node {}'s log ---\n{}",
                    self.tag,
                    i + 1,
                    self.log_tail(i, 20)
                );
            }
        }
        if std::thread::panicking() || keep {
            if let Some(dir) = self.dir.take() {
                eprintln!(
                    "{}: logs and histories kept in {}",
                    self.tag,
                    dir.keep().display()
                );
            }
        }
    }
}

/// Asks `SENTINEL get-master-addr-by-name` on `c` (briefly: a node cut off
/// by a link down would hold the caller for the whole read timeout) and
/// maps the answer to an index of `addrs`.
fn sentinel_leader(c: &mut Connection, addrs: &[String]) -> Option<usize> {
    c.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    let reply: Option<(String, String)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg("basalt")
        .query(c)
        .ok()?;
    c.set_read_timeout(Some(READ_TIMEOUT)).ok()?;
    let (host, port) = reply?;
    addrs.iter().position(|a| *a == format!("{host}:{port}"))
}

type RegOp = Operation<RegisterInput, RegisterOutput>;
type CountOp = Operation<CounterInput, i64>;

/// Every client's operations, and what happened to the ones left out.
#[derive(Debug, Default)]
struct Recorded {
    registers: Vec<RegOp>,
    counters: Vec<CountOp>,
    stats: Stats,
}

#[derive(Debug, Default, Clone)]
struct Stats {
    acked_writes: u64,
    /// `-CLUSTERDOWN` or `-READONLY`: not applied.
    refused_writes: u64,
    /// No reply (timeout, connection error): maybe applied.
    lost_writes: u64,
    /// Another error reply to a write: recorded as maybe applied too.
    failed_writes: u64,
    first_write_error: Option<String>,
    reads: u64,
    /// `-CLUSTERDOWN` and other error replies to reads.
    refused_reads: u64,
    /// Reads without a reply; not recorded.
    lost_reads: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.acked_writes += o.acked_writes;
        self.refused_writes += o.refused_writes;
        self.lost_writes += o.lost_writes;
        self.failed_writes += o.failed_writes;
        if self.first_write_error.is_none() {
            self.first_write_error.clone_from(&o.first_write_error);
        }
        self.reads += o.reads;
        self.refused_reads += o.refused_reads;
        self.lost_reads += o.lost_reads;
    }
}

impl Recorded {
    /// Writes invoked at or after `from` and acknowledged by `to`
    /// (microseconds on the workload's clock).
    fn acked_writes_between(&self, from: u64, to: u64) -> usize {
        let within = |call: u64, ret: Option<u64>| call >= from && ret.is_some_and(|r| r <= to);
        let regs = self
            .registers
            .iter()
            .filter(|o| matches!(o.input, RegisterInput::Write(_)) && within(o.call, o.ret));
        let counts = self
            .counters
            .iter()
            .filter(|o| matches!(o.input, CounterInput::Incr(_)) && within(o.call, o.ret));
        regs.count() + counts.count()
    }

    /// Writes acknowledged in each `step` from `from` to `to`, by the time
    /// of their acknowledgement (microseconds on the workload's clock).
    fn acked_writes_per(&self, from: u64, to: u64, step: u64) -> Vec<usize> {
        let mut buckets = vec![0; to.saturating_sub(from).div_ceil(step) as usize];
        let rets = self
            .registers
            .iter()
            .filter(|o| matches!(o.input, RegisterInput::Write(_)))
            .filter_map(|o| o.ret);
        let counts = self
            .counters
            .iter()
            .filter(|o| matches!(o.input, CounterInput::Incr(_)))
            .filter_map(|o| o.ret);
        for r in rets.chain(counts).filter(|&r| r >= from && r < to) {
            buckets[((r - from) / step) as usize] += 1;
        }
        buckets
    }

    /// The longest time from `from` to `to` without a write acknowledged
    /// (microseconds on the workload's clock).
    fn longest_gap_between_acked_writes(&self, from: u64, to: u64) -> Duration {
        let regs = self
            .registers
            .iter()
            .filter(|o| matches!(o.input, RegisterInput::Write(_)))
            .filter_map(|o| o.ret);
        let counts = self
            .counters
            .iter()
            .filter(|o| matches!(o.input, CounterInput::Incr(_)))
            .filter_map(|o| o.ret);
        let mut times: Vec<u64> = regs.chain(counts).filter(|&r| r > from && r < to).collect();
        times.extend([from, to]);
        times.sort_unstable();
        let gap = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        Duration::from_micros(gap)
    }

    /// The register history in `basalt-lincheck`'s line format.
    fn register_lines(&self) -> String {
        let mut s = String::from("# client key invoked returned op args -> output\n");
        for o in &self.registers {
            let ret = o.ret.map_or("-".into(), |r| r.to_string());
            let _ = write!(s, "{} {} {} {ret} ", o.client, o.key, o.call);
            let _ = match (&o.input, &o.output) {
                (RegisterInput::Write(v), Some(_)) => writeln!(s, "write {v} -> ok"),
                (RegisterInput::Write(v), None) => writeln!(s, "write {v}"),
                (_, Some(RegisterOutput::Value(Some(v)))) => writeln!(s, "read -> {v}"),
                _ => writeln!(s, "read -> nil"),
            };
        }
        s
    }

    /// The counter history in `basalt-lincheck`'s line format.
    fn counter_lines(&self) -> String {
        let mut s = String::from("# client key invoked returned op args -> output\n");
        for o in &self.counters {
            let ret = o.ret.map_or("-".into(), |r| r.to_string());
            let _ = write!(s, "{} {} {} {ret} ", o.client, o.key, o.call);
            let _ = match (&o.input, o.output) {
                (CounterInput::Incr(n), Some(v)) => writeln!(s, "incr {n} -> {v}"),
                (CounterInput::Incr(n), None) => writeln!(s, "incr {n}"),
                (CounterInput::Read, v) => writeln!(s, "read -> {}", v.unwrap_or(0)),
            };
        }
        s
    }
}

/// Clients running until [`Workload::finish`]. Client 1 only writes, so
/// it never waits on a read from a node behind a downed link; the others
/// mix reads and writes.
struct Workload {
    start: Instant,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Recorded>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workload {
    fn start(addrs: Vec<String>, clients: u64) -> Workload {
        let seed = random();
        eprintln!("workload seed {seed:#x}");
        let start = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let out: Arc<Mutex<Recorded>> = Arc::default();
        let threads = (1..=clients)
            .map(|id| {
                let (addrs, stop, out) = (addrs.clone(), stop.clone(), out.clone());
                let seed = seed.wrapping_add(id.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                let write_only = id == 1;
                std::thread::spawn(move || client(id, write_only, seed, &addrs, start, &stop, &out))
            })
            .collect();
        Workload {
            start,
            stop,
            out,
            threads,
        }
    }

    /// Now, in microseconds on the clock of the recorded operations.
    fn now(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    fn finish(self) -> Recorded {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        let rec = std::mem::take(&mut *self.out.lock().unwrap());
        eprintln!(
            "{} register and {} counter operations recorded; {:?}",
            rec.registers.len(),
            rec.counters.len(),
            rec.stats
        );
        rec
    }
}

/// A client's connection to one node, reopened on demand but not more
/// often than every 500 ms (a node behind a downed link costs the whole
/// connect timeout).
struct Slot {
    addr: String,
    conn: Option<Connection>,
    retry_at: Instant,
}

impl Slot {
    fn get(&mut self) -> Option<&mut Connection> {
        if self.conn.is_none() && Instant::now() >= self.retry_at {
            let open = || -> redis::RedisResult<Connection> {
                let c = redis::Client::open(format!("redis://{}/", self.addr))?
                    .get_connection_with_timeout(CONNECT_TIMEOUT)?;
                c.set_read_timeout(Some(READ_TIMEOUT))?;
                c.set_write_timeout(Some(READ_TIMEOUT))?;
                Ok(c)
            };
            match open() {
                Ok(c) => self.conn = Some(c),
                Err(_) => self.retry_at = Instant::now() + Duration::from_millis(500),
            }
        }
        self.conn.as_mut()
    }

    /// After an I/O error or timeout: the connection may still deliver the
    /// late reply, so it is never used again.
    fn drop_conn(&mut self) {
        self.conn = None;
    }
}

/// Which node leads, by the majority of the answers of the nodes it can
/// reach (a leader cut off from its peers still names itself).
fn discover(slots: &mut [Slot], addrs: &[String]) -> Option<usize> {
    let mut votes = [0usize; NODES];
    for s in slots.iter_mut() {
        let Some(c) = s.get() else { continue };
        match sentinel_leader(c, addrs) {
            Some(l) => votes[l] += 1,
            None => s.drop_conn(),
        }
    }
    let best = (0..NODES).max_by_key(|&i| votes[i])?;
    (votes[best] > 0).then_some(best)
}

/// One client: SET and INCR on the node it believes leads, GET on a random
/// node (unless `write_only`), recording each call until `stop`.
fn client(
    id: u64,
    write_only: bool,
    seed: u64,
    addrs: &[String],
    start: Instant,
    stop: &AtomicBool,
    out: &Mutex<Recorded>,
) {
    let now = || start.elapsed().as_micros() as u64;
    let mut slots: Vec<Slot> = addrs
        .iter()
        .map(|a| Slot {
            addr: a.clone(),
            conn: None,
            retry_at: Instant::now(),
        })
        .collect();
    let mut rng = Rng::new(seed);
    let mut writer: Option<usize> = None;
    let mut regs: Vec<RegOp> = Vec::new();
    let mut counts: Vec<CountOp> = Vec::new();
    let mut st = Stats::default();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let reg = REGISTERS[rng.below(REGISTERS.len() as u64) as usize];
        let cnt = COUNTERS[rng.below(COUNTERS.len() as u64) as usize];
        let kind = if write_only {
            rng.below(2) * 2
        } else {
            rng.below(4)
        };
        if kind == 0 || kind == 2 {
            // A write: SET (kind 0) or INCR (kind 2), on the leader.
            let w = match writer {
                Some(w) => w,
                None => match discover(&mut slots, addrs) {
                    Some(w) => *writer.insert(w),
                    None => {
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                },
            };
            let Some(c) = slots[w].get() else {
                writer = None;
                continue;
            };
            let value = format!("c{id}-{n}");
            let call = now();
            let res = if kind == 0 {
                redis::cmd("SET")
                    .arg(reg)
                    .arg(&value)
                    .query::<()>(c)
                    .map(|()| None)
            } else {
                redis::cmd("INCR").arg(cnt).query::<i64>(c).map(Some)
            };
            let ret = now();
            let mut applied = None;
            match res {
                Ok(v) => {
                    st.acked_writes += 1;
                    applied = Some((Some(ret), v));
                }
                // Not applied: no leader could take it (`-CLUSTERDOWN`: this
                // node's proposal, or the one it forwarded, was refused or
                // truncated by a new leader before it committed), or a
                // follower that does not forward refused it (`-READONLY`).
                Err(e)
                    if matches!(
                        e.kind(),
                        redis::ErrorKind::ClusterDown | redis::ErrorKind::ReadOnly
                    ) =>
                {
                    st.refused_writes += 1;
                    writer = None;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => {
                    // No reply, or an error reply whose meaning for the
                    // write is unknown: it may have been applied.
                    if e.code().is_some() {
                        st.failed_writes += 1;
                        st.first_write_error.get_or_insert_with(|| e.to_string());
                    } else {
                        st.lost_writes += 1;
                        slots[w].drop_conn();
                    }
                    writer = None;
                    applied = Some((None, None));
                }
            }
            if let Some((ret, v)) = applied {
                if kind == 0 {
                    let input = RegisterInput::Write(value);
                    regs.push(match ret {
                        Some(r) => {
                            Operation::completed(id, reg, call, r, input, RegisterOutput::Ok)
                        }
                        None => Operation::lost(id, reg, call, input),
                    });
                } else {
                    let input = CounterInput::Incr(1);
                    counts.push(match (ret, v) {
                        (Some(r), Some(v)) => Operation::completed(id, cnt, call, r, input, v),
                        _ => Operation::lost(id, cnt, call, input),
                    });
                }
            }
        } else {
            // A read (GET), on any node.
            let node = rng.below(NODES as u64) as usize;
            let Some(c) = slots[node].get() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            let key = if kind == 1 { reg } else { cnt };
            let call = now();
            let res = redis::cmd("GET").arg(key).query::<Option<String>>(c);
            let ret = now();
            match res {
                Ok(v) => {
                    st.reads += 1;
                    if kind == 1 {
                        let out = RegisterOutput::Value(v);
                        regs.push(Operation::completed(
                            id,
                            reg,
                            call,
                            ret,
                            RegisterInput::Read,
                            out,
                        ));
                    } else {
                        let v = v.map_or(0, |s| s.parse::<i64>().unwrap());
                        counts.push(Operation::completed(
                            id,
                            cnt,
                            call,
                            ret,
                            CounterInput::Read,
                            v,
                        ));
                    }
                }
                Err(e) if e.code().is_some() => st.refused_reads += 1,
                Err(_) => {
                    st.lost_reads += 1;
                    slots[node].drop_conn();
                }
            }
        }
    }
    let mut out = out.lock().unwrap();
    out.registers.extend(regs);
    out.counters.extend(counts);
    out.stats.add(&st);
}

fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// The leader loses its links to both followers (clients still reach it)
/// for 5 s: the followers elect a new leader, the old one neither commits
/// a write nor serves a read in the meantime, and after healing it steps
/// down and catches up.
#[test]
fn a_leader_cut_off_from_its_followers_is_replaced_and_the_history_is_linearizable() {
    let Some(c) = Cluster::start("leader_isolated") else {
        return;
    };
    let w = Workload::start(c.addrs(), 4);
    sleep_ms(1500);
    let old = c.wait_leader(&ALL, Duration::from_secs(10));
    let others: Vec<usize> = ALL.iter().copied().filter(|&i| i != old).collect();
    let cut_at = w.now();
    let t = Instant::now();
    c.net.cut(old, Cut::Peers);
    let new = c.wait_leader(&others, Duration::from_secs(10));
    let elected = t.elapsed();
    std::thread::sleep(Duration::from_secs(5).saturating_sub(t.elapsed()));
    let healed_at = w.now();
    c.net.heal_all();
    sleep_ms(3000);
    let end = w.now();
    let rec = w.finish();
    let after_heal = rec.acked_writes_between(healed_at, end);
    eprintln!(
        "after healing: {after_heal} writes acknowledged in {:.1} s, longest time without one {:?}",
        (end - healed_at) as f64 / 1e6,
        rec.longest_gap_between_acked_writes(healed_at, end)
    );
    let during = rec.acked_writes_between(cut_at, healed_at);
    eprintln!(
        "leader {} cut off; node {} elected after {elected:?}; {during} writes \
         acknowledged during the cut",
        old + 1,
        new + 1
    );
    let wrote = c.converge(Duration::from_secs(15));
    eprintln!("a write succeeded {wrote:?} after the workload stopped");
    assert!(
        rec.stats.acked_writes > 50 && rec.stats.reads > 50,
        "too little happened to mean anything: {:?}",
        rec.stats
    );
    assert!(
        during > 0,
        "no write acknowledged while the leader was cut off"
    );
    assert!(after_heal > 0, "no write acknowledged after healing");
    c.verify(&rec);
}

/// A follower's link goes down for 4 s: the leader and the other follower
/// keep acknowledging writes throughout (never 1 s without one), and once
/// the link is back the follower catches up.
#[test]
fn writes_continue_while_a_follower_is_cut_off_and_it_catches_up() {
    let Some(c) = Cluster::start("follower_isolated") else {
        return;
    };
    let w = Workload::start(c.addrs(), 4);
    sleep_ms(1500);
    let leader = c.wait_leader(&ALL, Duration::from_secs(10));
    let f = (leader + 1 + (random() % 2) as usize) % NODES;
    let term_before = c.term(leader);
    let before_from = w.now();
    sleep_ms(1000);
    let cut_at = w.now();
    c.net.cut(f, Cut::LinkDown);
    sleep_ms(4000);
    let healed_at = w.now();
    c.net.heal(f);
    sleep_ms(3000);
    let end = w.now();
    let rec = w.finish();
    let after_heal = rec.acked_writes_between(healed_at, end);
    eprintln!(
        "after healing: {after_heal} writes acknowledged in {:.1} s, longest time without one {:?}",
        (end - healed_at) as f64 / 1e6,
        rec.longest_gap_between_acked_writes(healed_at, end)
    );
    let secs = |from: u64, to: u64| (to - from) as f64 / 1e6;
    let during = rec.acked_writes_between(cut_at, healed_at);
    let ahead = rec.acked_writes_between(before_from, cut_at);
    eprintln!(
        "follower {} cut off: {during} writes acknowledged in the {:.1} s cut ({:.0}/s; \
         {:.0}/s in the second before)",
        f + 1,
        secs(cut_at, healed_at),
        during as f64 / secs(cut_at, healed_at),
        ahead as f64 / secs(before_from, cut_at)
    );
    let gap = rec.longest_gap_between_acked_writes(cut_at, healed_at);
    eprintln!(
        "writes acknowledged per 500 ms, from 1 s before the cut to 1 s after healing: {:?}; \
         longest time without one during the cut: {gap:?}",
        rec.acked_writes_per(before_from, healed_at + 1_000_000, 500_000)
    );
    let wrote = c.converge(Duration::from_secs(15));
    eprintln!("a write succeeded {wrote:?} after the workload stopped");
    let after = c.wait_leader(&ALL, Duration::from_secs(10));
    eprintln!(
        "leader before the cut: node {} (term {term_before:?}); after healing: node {} \
         (term {:?}; the follower's term while cut off: {:?})",
        leader + 1,
        after + 1,
        c.term(after),
        c.term(f)
    );
    assert!(after_heal > 0, "no write acknowledged after healing");
    // Pre-vote (`basalt-raft` `prevote.rs`): cut off from the majority, the
    // follower never campaigned, so its return deposed nobody.
    assert_eq!(
        (after, c.term(after)),
        (leader, term_before),
        "the follower's return started an election"
    );
    assert!(
        during >= 20,
        "only {during} writes acknowledged while one follower was cut off"
    );
    // Client 1 writes only, so nothing of its own waits on the cut-off node.
    assert!(
        gap < Duration::from_secs(1),
        "writes stopped for {gap:?} while one follower was cut off"
    );
    c.verify(&rec);
}

/// For 5 s, every 200-500 ms a random node is cut off (link down or peers
/// cut, at random) or reconnected; then the network heals.
#[test]
fn flapping_links_keep_the_history_linearizable_and_the_group_converges() {
    let Some(c) = Cluster::start("flapping") else {
        return;
    };
    let w = Workload::start(c.addrs(), 4);
    sleep_ms(1000);
    let seed = random();
    let mut rng = Rng::new(seed);
    let mut toggles = Vec::new();
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let i = rng.below(NODES as u64) as usize;
        if c.net.is_cut(i) {
            c.net.heal(i);
            toggles.push(format!("+{}", i + 1));
        } else {
            let how = if rng.below(2) == 0 {
                Cut::LinkDown
            } else {
                Cut::Peers
            };
            c.net.cut(i, how);
            toggles.push(format!("-{}{how:?}", i + 1));
        }
        sleep_ms(200 + rng.below(301));
    }
    let healed_at = w.now();
    c.net.heal_all();
    sleep_ms(3000);
    let end = w.now();
    let rec = w.finish();
    eprintln!(
        "after healing: {} writes acknowledged in {:.1} s, longest time without one {:?}",
        rec.acked_writes_between(healed_at, end),
        (end - healed_at) as f64 / 1e6,
        rec.longest_gap_between_acked_writes(healed_at, end)
    );
    eprintln!("flapping seed {seed:#x}: {}", toggles.join(" "));
    let wrote = c.converge(Duration::from_secs(15));
    eprintln!("a write succeeded {wrote:?} after the workload stopped");
    assert!(toggles.len() >= 8, "{toggles:?}");
    assert!(
        rec.stats.acked_writes > 20,
        "too few writes acknowledged to mean anything: {:?}",
        rec.stats
    );
    c.verify(&rec);
}
