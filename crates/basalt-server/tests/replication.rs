//! Three `basalt` processes on 127.0.0.1 forming a Raft group from the
//! same `--peers`: writes go through the leader and reach every node with
//! the same versions, followers forward writes to the leader, ROLE,
//! INFO and the SENTINEL commands name the leader, the leader's expiry
//! reaches every node, and kill -9 of the leader under write load loses no
//! acknowledged write. Every wait is bounded.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{Connection, RedisResult, Value};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Node {
    id: u64,
    port: u16,
    raft_port: u16,
    http_port: u16,
    child: Option<Child>,
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

struct Group {
    dir: tempfile::TempDir,
    nodes: Vec<Node>,
    peers: String,
    /// Environment every node starts with (settings as `BASALT_*`).
    env: Vec<(&'static str, &'static str)>,
    /// More environment for the node of each index.
    node_env: Vec<Vec<(&'static str, &'static str)>>,
    /// One group at a time in this test binary: nine debug processes of
    /// three groups on two cores delay heartbeats past the election
    /// timeout, and the timing assertions would measure the machine.
    _serial: Option<std::sync::MutexGuard<'static, ()>>,
}

static SERIAL: Mutex<()> = Mutex::new(());

impl Group {
    fn start() -> Group {
        Group::start_with(&[])
    }

    /// A group whose nodes start with `env` set.
    fn start_with(env: &[(&'static str, &'static str)]) -> Group {
        Group::start_each(env, &[])
    }

    /// A group whose nodes start with `env` set, and node `i` with
    /// `node_env[i]` too.
    fn start_each(
        env: &[(&'static str, &'static str)],
        node_env: &[&[(&'static str, &'static str)]],
    ) -> Group {
        let mut serial = Some(
            SERIAL
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        // A port found free can be taken before the node binds it (by an
        // outgoing connection's ephemeral port): then the node exits at
        // start-up, and the group starts again on other ports.
        for attempt in 1..=3 {
            let dir = tempfile::tempdir().unwrap();
            let nodes: Vec<Node> = (1..=3)
                .map(|id| Node {
                    id,
                    port: free_port(),
                    raft_port: free_port(),
                    http_port: free_port(),
                    child: None,
                })
                .collect();
            let peers = nodes
                .iter()
                .map(|n| format!("{}@127.0.0.1:{}", n.id, n.raft_port))
                .collect::<Vec<_>>()
                .join(",");
            let mut g = Group {
                dir,
                nodes,
                peers,
                env: env.to_vec(),
                node_env: node_env.iter().map(|e| e.to_vec()).collect(),
                _serial: serial.take(),
            };
            match (0..3).try_for_each(|i| g.try_spawn(i)) {
                Ok(()) => return g,
                Err(e) if attempt < 3 => {
                    eprintln!("group start, attempt {attempt}: {e}; again on other ports");
                    serial = g._serial.take();
                }
                Err(e) => panic!("group start: {e}"),
            }
        }
        unreachable!("returned or panicked above")
    }

    /// Starts a node that is not in `--peers` (it waits for `basalt cluster
    /// add`); returns its index.
    fn add_node(&mut self) -> usize {
        self.nodes.push(Node {
            id: self.nodes.len() as u64 + 1,
            port: free_port(),
            raft_port: free_port(),
            http_port: free_port(),
            child: None,
        });
        let i = self.nodes.len() - 1;
        self.spawn(i);
        i
    }

    /// Starts node `i` (again) with its flags and waits for its banner.
    fn spawn(&mut self, i: usize) {
        self.try_spawn(i).unwrap();
    }

    /// [`Group::spawn`], or why the node did not start. Nodes past the
    /// first three were not in `--peers`: they start without it and wait
    /// to be added.
    fn try_spawn(&mut self, i: usize) -> Result<(), String> {
        let n = &self.nodes[i];
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_basalt"));
        if i < 3 {
            cmd.args(["--peers", &self.peers]);
        }
        let mut child = cmd
            .args(["--port", &n.port.to_string()])
            .args(["--http-port", &n.http_port.to_string()])
            .args([
                "--node-id",
                &n.id.to_string(),
                "--raft-port",
                &n.raft_port.to_string(),
            ])
            .args(["--loglevel", "info"])
            .env("BASALT_DIR", self.dir.path().join(format!("n{}", n.id)))
            .env("NO_COLOR", "1")
            .envs(self.env.iter().copied())
            .envs(self.node_env.get(i).into_iter().flatten().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if !sent && line.contains("ready on ") {
                    let _ = tx.send(());
                    sent = true;
                }
            }
        });
        if let Err(e) = rx.recv_timeout(Duration::from_secs(30)) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("node {} gave no start-up banner: {e}", i + 1));
        }
        self.nodes[i].child = Some(child);
        Ok(())
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            c.kill().unwrap(); // SIGKILL
            c.wait().unwrap();
        }
    }

    fn conn(&self, i: usize) -> Connection {
        let url = format!("redis://127.0.0.1:{}/", self.nodes[i].port);
        let c = redis::Client::open(url).unwrap();
        c.get_connection_with_timeout(Duration::from_secs(5))
            .unwrap()
    }

    fn alive(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].child.is_some())
            .collect()
    }

    /// `basalt cluster --via <node i's Raft address> <args>`: exit code
    /// and output.
    fn cluster(&self, i: usize, args: &[&str]) -> (i32, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_basalt"))
            .args([
                "cluster",
                "--via",
                &format!("127.0.0.1:{}", self.nodes[i].raft_port),
            ])
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code().unwrap_or(-1), text)
    }

    /// Waits (at most 15 s) until the live nodes agree on a leader among
    /// them; returns its index.
    fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let mut seen = Vec::new();
            for i in self.alive() {
                let mut c = self.conn(i);
                let addr: RedisResult<Option<(String, String)>> = redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg("basalt")
                    .query(&mut c);
                seen.push(addr.ok().flatten().map(|(_, p)| p));
            }
            if let Some(Some(port)) = seen.first() {
                if seen.iter().all(|s| s.as_ref() == Some(port)) {
                    if let Some(i) = self
                        .alive()
                        .into_iter()
                        .find(|&i| self.nodes[i].port.to_string() == *port)
                    {
                        return i;
                    }
                }
            }
            assert!(Instant::now() < deadline, "no agreed leader: {seen:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (at most 15 s) until `f` holds on every live node.
    fn eventually(&self, what: &str, f: impl Fn(&mut Connection) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if self.alive().into_iter().all(|i| f(&mut self.conn(i))) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not on every node within 15 s: {what}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn get(c: &mut Connection, k: &str) -> Option<String> {
    redis::cmd("GET").arg(k).query(c).unwrap()
}

#[test]
fn writes_through_the_leader_reach_every_node_with_the_same_versions() {
    let g = Group::start();
    let l = g.leader();
    let mut c = g.conn(l);
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    let n: i64 = redis::cmd("INCRBY").arg("n").arg(5).query(&mut c).unwrap();
    assert_eq!(n, 5);
    let _: i64 = redis::cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("1")
        .arg("g")
        .arg("2")
        .query(&mut c)
        .unwrap();
    let _: i64 = redis::cmd("ZADD")
        .arg("z")
        .arg(1)
        .arg("a")
        .arg(2)
        .arg("b")
        .query(&mut c)
        .unwrap();
    let (a, b): (i64, String) = redis::pipe()
        .atomic()
        .cmd("INCR")
        .arg("n")
        .cmd("SET")
        .arg("t")
        .arg("x")
        .arg("GET")
        .query(&mut c)
        .map(|(a, b): (i64, Option<String>)| (a, b.unwrap_or_default()))
        .unwrap();
    assert_eq!((a, b.as_str()), (6, ""));
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        .query(&mut c)
        .unwrap();
    let via_sha: i64 = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(1)
        .arg("n")
        .arg(10)
        .query(&mut c)
        .unwrap();
    assert_eq!(via_sha, 16);
    let version: i64 = redis::cmd("VERSION").arg("n").query(&mut c).unwrap();
    g.eventually("every write, with the leader's version", |c| {
        let n: Option<String> = redis::cmd("GET").arg("n").query(c).unwrap();
        let v: i64 = redis::cmd("VERSION").arg("n").query(c).unwrap();
        let z: Vec<String> = redis::cmd("ZRANGE")
            .arg("z")
            .arg(0)
            .arg(-1)
            .query(c)
            .unwrap();
        let h: Option<String> = redis::cmd("HGET").arg("h").arg("g").query(c).unwrap();
        n.as_deref() == Some("16")
            && v == version
            && z == ["a", "b"]
            && h.as_deref() == Some("2")
            && get(c, "k").as_deref() == Some("v")
            && get(c, "t").as_deref() == Some("x")
    });
    for i in (0..3).filter(|&i| i != l) {
        let mut f = g.conn(i);
        // A follower forwards writes to the leader: the reply is the
        // leader's, and the write is on every node.
        let key = format!("via{i}");
        let n: i64 = redis::cmd("INCRBY").arg(&key).arg(7).query(&mut f).unwrap();
        assert_eq!(n, 7);
        let (a, b): (i64, i64) = redis::pipe()
            .atomic()
            .cmd("INCR")
            .arg(&key)
            .cmd("INCR")
            .arg(&key)
            .query(&mut f)
            .unwrap();
        assert_eq!((a, b), (8, 9));
        assert_eq!(get(&mut f, &key).as_deref(), Some("9"), "read your write");
        let role: Vec<Value> = redis::cmd("ROLE").query(&mut f).unwrap();
        assert_eq!(role[0], Value::BulkString(b"slave".to_vec()));
        assert_eq!(role[2], Value::Int(g.nodes[l].port as i64));
        let info: String = redis::cmd("INFO").arg("replication").query(&mut f).unwrap();
        assert!(info.contains("role:slave"), "{info}");
        assert!(
            info.contains(&format!("master_port:{}", g.nodes[l].port)),
            "{info}"
        );
        let info: String = redis::cmd("INFO").arg("cluster").query(&mut f).unwrap();
        assert!(info.contains("cluster_enabled:0"), "{info}");
    }
    g.eventually("the forwarded writes on every node", |c| {
        get(c, "via0").or(get(c, "via1")).is_some() && get(c, "via2").or(get(c, "via1")).is_some()
    });
    let role: Vec<Value> = redis::cmd("ROLE").query(&mut c).unwrap();
    assert_eq!(role[0], Value::BulkString(b"master".to_vec()));
    let Value::Array(replicas) = &role[2] else {
        panic!("{role:?}")
    };
    assert_eq!(replicas.len(), 2);
    let info: String = redis::cmd("INFO").arg("replication").query(&mut c).unwrap();
    assert!(
        info.contains("role:master") && info.contains("connected_slaves:2"),
        "{info}"
    );
    let masters: Vec<Vec<String>> = redis::cmd("SENTINEL").arg("masters").query(&mut c).unwrap();
    let m = &masters[0];
    let field = |k: &str| m.iter().position(|x| x == k).map(|p| m[p + 1].clone());
    assert_eq!(field("port"), Some(g.nodes[l].port.to_string()));
    assert_eq!(field("flags").as_deref(), Some("master"));
    assert_eq!(field("num-other-sentinels").as_deref(), Some("2"));
}

#[test]
fn the_leader_expires_keys_on_every_node() {
    let g = Group::start();
    let l = g.leader();
    let mut c = g.conn(l);
    let _: () = redis::cmd("SET")
        .arg("short")
        .arg("v")
        .arg("PX")
        .arg(300)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("long")
        .arg("v")
        .arg("EX")
        .arg(100)
        .query(&mut c)
        .unwrap();
    g.eventually("the expired key deleted, the other kept", |c| {
        let keys: i64 = redis::cmd("DBSIZE").query(c).unwrap();
        keys == 1 && get(c, "long").is_some()
    });
}

#[test]
fn kill_9_of_the_leader_under_writes_loses_no_acknowledged_write() {
    let mut g = Group::start();
    let ports: Vec<u16> = g.nodes.iter().map(|n| n.port).collect();
    // Each acknowledged key with when its SET was sent.
    let acked: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let (acked, stop, ports) = (acked.clone(), stop.clone(), ports.clone());
            std::thread::spawn(move || {
                let mut seq = 0u64;
                let mut conn: Option<Connection> = None;
                let mut target = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let c = match conn.as_mut() {
                        Some(c) => c,
                        None => {
                            target = (target + 1) % ports.len();
                            let url = format!("redis://127.0.0.1:{}/", ports[target]);
                            match redis::Client::open(url)
                                .unwrap()
                                .get_connection_with_timeout(Duration::from_millis(300))
                            {
                                Ok(c) => {
                                    let _ = c.set_read_timeout(Some(Duration::from_secs(3)));
                                    conn.insert(c)
                                }
                                Err(_) => {
                                    std::thread::sleep(Duration::from_millis(20));
                                    continue;
                                }
                            }
                        }
                    };
                    let key = format!("w{w}:{seq}");
                    let sent = Instant::now();
                    match redis::cmd("SET").arg(&key).arg(seq).query::<()>(c) {
                        Ok(()) => {
                            acked.lock().unwrap().push((key, sent));
                            seq += 1;
                        }
                        // No leader now, a dead node or a lost
                        // reply: try another node. The key may or may not
                        // exist; only acknowledged keys are checked.
                        Err(_) => {
                            conn = None;
                            seq += 1;
                        }
                    }
                }
            })
        })
        .collect();
    let mut recoveries = Vec::new();
    for _round in 0..2 {
        std::thread::sleep(Duration::from_millis(700));
        let l = g.leader();
        let killed_at = Instant::now();
        g.kill(l);
        // Until a write sent after the kill is acknowledged.
        let deadline = Instant::now() + Duration::from_secs(15);
        while !acked
            .lock()
            .unwrap()
            .iter()
            .any(|(_, sent)| *sent > killed_at)
        {
            assert!(
                Instant::now() < deadline,
                "no write sent after the kill acknowledged within 15 s"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        recoveries.push(killed_at.elapsed());
        let nl = g.leader();
        eprintln!(
            "new leader {} agreed on by the live nodes {:?} after the kill",
            g.nodes[nl].id,
            killed_at.elapsed()
        );
        g.spawn(l);
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let acked: Vec<String> = acked
        .lock()
        .unwrap()
        .iter()
        .map(|(k, _)| k.clone())
        .collect();
    assert!(
        acked.len() > 50,
        "too few writes to mean anything: {}",
        acked.len()
    );
    eprintln!(
        "{} writes acknowledged; writes resumed {recoveries:?} after each kill",
        acked.len()
    );
    g.eventually("every acknowledged write on every node", |c| {
        let mut pipe = redis::pipe();
        for k in &acked {
            pipe.cmd("EXISTS").arg(k);
        }
        let found: Vec<i64> = pipe.query(c).unwrap();
        found.iter().all(|&e| e == 1)
    });
    for r in &recoveries {
        assert!(
            *r < Duration::from_secs(5),
            "writes resumed only after {r:?}"
        );
    }
}

#[test]
fn a_read_on_a_follower_sees_every_write_acknowledged_before_it() {
    let g = Group::start();
    let l = g.leader();
    let f = (0..3).find(|&i| i != l).unwrap();
    let (mut lc, mut fc) = (g.conn(l), g.conn(f));
    for i in 0..100 {
        let _: () = redis::cmd("SET").arg("k").arg(i).query(&mut lc).unwrap();
        // Without the read barrier the follower would often answer the
        // value before (it applies a heartbeat later).
        assert_eq!(get(&mut fc, "k"), Some(i.to_string()), "write {i}");
    }
    // READONLY: this connection reads what the follower has, without the
    // barrier; READWRITE turns the barrier back on.
    let _: () = redis::cmd("READONLY").query(&mut fc).unwrap();
    assert!(get(&mut fc, "k").is_some());
    let _: () = redis::cmd("READWRITE").query(&mut fc).unwrap();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("last")
        .query(&mut lc)
        .unwrap();
    assert_eq!(get(&mut fc, "k").as_deref(), Some("last"));
}

mod history {
    //! Clients that record every operation for the linearizability checker.

    use super::*;
    use basalt_lincheck::{
        check, Counter, CounterInput, Operation, Options, Register, RegisterInput, RegisterOutput,
        Verdict,
    };

    type RegOp = Operation<RegisterInput, RegisterOutput>;
    type CountOp = Operation<CounterInput, i64>;

    #[derive(Default)]
    pub struct Recorded {
        pub registers: Vec<RegOp>,
        pub counters: Vec<CountOp>,
    }

    enum Outcome<T> {
        Ok(T),
        /// Refused (READONLY, CLUSTERDOWN: no leader took it, or a read
        /// that cannot be made consistent): it did not take effect.
        Refused,
        /// The connection failed: it may or may not have taken effect.
        Lost,
    }

    fn run<T: redis::FromRedisValue>(c: &mut Option<Connection>, cmd: &redis::Cmd) -> Outcome<T> {
        let Some(conn) = c.as_mut() else {
            return Outcome::Refused;
        };
        match cmd.query::<T>(conn) {
            Ok(v) => Outcome::Ok(v),
            // Only these say the write was not applied; any other error
            // (a forwarding failure, a lost connection) leaves it unknown.
            Err(e) if e.kind() == redis::ErrorKind::ReadOnly || e.code() == Some("CLUSTERDOWN") => {
                Outcome::Refused
            }
            Err(_) => {
                *c = None;
                Outcome::Lost
            }
        }
    }

    /// One client: writes to the node it believes leads, reads from any
    /// node, for as long as `stop` is unset.
    pub fn client(
        id: u64,
        ports: Vec<u16>,
        start: Instant,
        stop: Arc<AtomicBool>,
        out: Arc<Mutex<Recorded>>,
    ) {
        let now = || start.elapsed().as_micros() as u64;
        let connect = |port: u16| {
            let url = format!("redis://127.0.0.1:{port}/");
            let c = redis::Client::open(url).ok()?;
            let c = c
                .get_connection_with_timeout(Duration::from_millis(300))
                .ok()?;
            c.set_read_timeout(Some(Duration::from_secs(4))).ok()?;
            Some(c)
        };
        let mut conns: Vec<Option<Connection>> = ports.iter().map(|&p| connect(p)).collect();
        let mut writer = 0usize;
        let mut rng = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            let r = next();
            let reg = format!("r{}", r % 3);
            let cnt = format!("n{}", (r >> 8) % 2);
            let node = (r >> 16) as usize % ports.len();
            for (i, c) in conns.iter_mut().enumerate() {
                if c.is_none() {
                    *c = connect(ports[i]);
                }
            }
            match (r >> 24) % 4 {
                0 => {
                    let v = format!("c{id}-{n}");
                    let call = now();
                    let res = run::<()>(&mut conns[writer], redis::cmd("SET").arg(&reg).arg(&v));
                    let input = RegisterInput::Write(v);
                    let op = match res {
                        Outcome::Ok(()) => Some(Operation::completed(
                            id,
                            reg,
                            call,
                            now(),
                            input,
                            RegisterOutput::Ok,
                        )),
                        Outcome::Lost => Some(Operation::lost(id, reg, call, input)),
                        Outcome::Refused => {
                            writer = (writer + 1) % ports.len();
                            None
                        }
                    };
                    if let Some(op) = op {
                        out.lock().unwrap().registers.push(op);
                    }
                }
                1 => {
                    let call = now();
                    if let Outcome::Ok(v) =
                        run::<Option<String>>(&mut conns[node], redis::cmd("GET").arg(&reg))
                    {
                        let op = Operation::completed(
                            id,
                            reg,
                            call,
                            now(),
                            RegisterInput::Read,
                            RegisterOutput::Value(v),
                        );
                        out.lock().unwrap().registers.push(op);
                    }
                }
                2 => {
                    let call = now();
                    let res = run::<i64>(&mut conns[writer], redis::cmd("INCR").arg(&cnt));
                    let op = match res {
                        Outcome::Ok(v) => Some(Operation::completed(
                            id,
                            cnt,
                            call,
                            now(),
                            CounterInput::Incr(1),
                            v,
                        )),
                        Outcome::Lost => {
                            Some(Operation::lost(id, cnt, call, CounterInput::Incr(1)))
                        }
                        Outcome::Refused => {
                            writer = (writer + 1) % ports.len();
                            None
                        }
                    };
                    if let Some(op) = op {
                        out.lock().unwrap().counters.push(op);
                    }
                }
                _ => {
                    let call = now();
                    if let Outcome::Ok(v) =
                        run::<Option<i64>>(&mut conns[node], redis::cmd("GET").arg(&cnt))
                    {
                        let op = Operation::completed(
                            id,
                            cnt,
                            call,
                            now(),
                            CounterInput::Read,
                            v.unwrap_or(0),
                        );
                        out.lock().unwrap().counters.push(op);
                    }
                }
            }
            if conns[writer].is_none() {
                writer = (writer + 1) % ports.len();
            }
        }
    }

    pub fn verify(rec: &Recorded) {
        let opts = Options::default().timeout(Some(Duration::from_secs(30)));
        let v = check(&Register, &rec.registers, &opts).unwrap();
        assert_eq!(v, Verdict::Linearizable, "registers: {v}");
        let v = check(&Counter, &rec.counters, &opts).unwrap();
        assert_eq!(v, Verdict::Linearizable, "counters: {v}");
    }
}

#[test]
fn histories_across_leader_kills_are_linearizable() {
    let mut g = Group::start();
    g.leader();
    let ports: Vec<u16> = g.nodes.iter().map(|n| n.port).collect();
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let rec: Arc<Mutex<history::Recorded>> = Arc::default();
    let clients: Vec<_> = (1..=4)
        .map(|id| {
            let (ports, stop, rec) = (ports.clone(), stop.clone(), rec.clone());
            std::thread::spawn(move || history::client(id, ports, start, stop, rec))
        })
        .collect();
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(1000));
        let l = g.leader();
        g.kill(l);
        std::thread::sleep(Duration::from_millis(1200));
        g.spawn(l);
    }
    std::thread::sleep(Duration::from_millis(1000));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let rec = rec.lock().unwrap();
    eprintln!(
        "{} register and {} counter operations recorded",
        rec.registers.len(),
        rec.counters.len()
    );
    assert!(rec.registers.len() > 100 && rec.counters.len() > 100);
    history::verify(&rec);
}

#[test]
fn a_message_published_on_any_node_reaches_subscribers_on_every_node() {
    let g = Group::start();
    let l = g.leader();
    let followers: Vec<usize> = (0..3).filter(|&i| i != l).collect();
    let mut subs: Vec<Connection> = (0..3).map(|i| g.conn(i)).collect();
    let mut pubsubs: Vec<redis::PubSub<'_>> = subs.iter_mut().map(|c| c.as_pubsub()).collect();
    for p in &mut pubsubs {
        p.subscribe("news").unwrap();
        p.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    // From a follower: forwarded, applied on every node, delivered by each.
    let mut f = g.conn(followers[0]);
    let receivers: i64 = redis::cmd("PUBLISH")
        .arg("news")
        .arg("hello")
        .query(&mut f)
        .unwrap();
    assert_eq!(receivers, 1, "the leader's own subscriber");
    let mut c = g.conn(l);
    let _: i64 = redis::cmd("PUBLISH")
        .arg("news")
        .arg("again")
        .query(&mut c)
        .unwrap();
    for (i, p) in pubsubs.iter_mut().enumerate() {
        for want in ["hello", "again"] {
            let msg = p.get_message().unwrap();
            let got: String = msg.get_payload().unwrap();
            assert_eq!(got, want, "subscriber on node {i}");
        }
    }
}

#[test]
fn a_pipeline_of_writes_and_reads_answers_in_order_on_leader_and_follower() {
    let g = Group::start();
    let l = g.leader();
    let f = (0..3).find(|&i| i != l).unwrap();
    for (node, key) in [(l, "on-leader"), (f, "on-follower")] {
        let mut c = g.conn(node);
        let mut pipe = redis::pipe();
        for i in 0..200 {
            pipe.cmd("INCR").arg(key);
            if i % 50 == 49 {
                // A read in the middle sees every write before it.
                pipe.cmd("GET").arg(key);
            }
        }
        let replies: Vec<i64> = pipe.query(&mut c).unwrap();
        let mut want = Vec::new();
        for i in 0..200 {
            want.push(i + 1);
            if i % 50 == 49 {
                want.push(i + 1);
            }
        }
        assert_eq!(replies, want, "{key}");
    }
    g.eventually("both counters at 200 everywhere", |c| {
        get(c, "on-leader").as_deref() == Some("200")
            && get(c, "on-follower").as_deref() == Some("200")
    });
    // Consecutive writes share one entry on the leader: an error in the
    // middle answers for its command alone, in its place.
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", g.nodes[l].port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"SET s a\r\nINCR s\r\nSET s b\r\nRPUSH s x\r\nGET s\r\n")
        .unwrap();
    let want: &[u8] = b"+OK\r\n-ERR value is not an integer or out of range\r\n+OK\r\n\
        -WRONGTYPE Operation against a key holding the wrong kind of value\r\n$1\r\nb\r\n";
    let mut got = Vec::new();
    let mut chunk = [0u8; 1024];
    while got.len() < want.len() {
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
}

#[test]
fn every_node_announces_a_failover_on_switch_master() {
    let mut g = Group::start();
    let l = g.leader();
    let f = (0..3).find(|&i| i != l).unwrap();
    let mut sub = g.conn(f);
    let mut ps = sub.as_pubsub();
    ps.subscribe("+switch-master").unwrap();
    ps.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let old = g.nodes[l].port;
    g.kill(l);
    let msg: String = ps.get_message().unwrap().get_payload().unwrap();
    let new = g.nodes[g.leader()].port;
    assert_eq!(
        msg,
        format!("mymaster 127.0.0.1 {old} 127.0.0.1 {new}"),
        "Sentinel's +switch-master format"
    );
}

/// A raw HTTP/1.1 GET: the status code and the body.
fn http_get(port: u16, path: &str) -> (u16, Vec<u8>) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let head_end = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let status = std::str::from_utf8(&resp[9..12]).unwrap().parse().unwrap();
    (status, resp[head_end + 4..].to_vec())
}

#[test]
fn an_http_read_on_a_follower_sees_every_write_acknowledged_before_it() {
    let g = Group::start();
    let l = g.leader();
    let f = (0..3).find(|&i| i != l).unwrap();
    let mut lc = g.conn(l);
    for i in 0..30 {
        let _: () = redis::cmd("SET").arg("hk").arg(i).query(&mut lc).unwrap();
        let (status, body) = http_get(g.nodes[f].http_port, "/v1/keys/hk");
        assert_eq!(status, 200);
        assert_eq!(body, i.to_string().into_bytes(), "write {i}");
    }
}

#[test]
fn spop_removes_the_same_members_on_every_node() {
    let g = Group::start();
    let l = g.leader();
    let f = (0..3).find(|&i| i != l).unwrap();
    let mut c = g.conn(l);
    let members: Vec<String> = (0..200).map(|i| format!("m{i}")).collect();
    let _: i64 = redis::cmd("SADD")
        .arg("s")
        .arg(&members)
        .query(&mut c)
        .unwrap();
    let mut popped: Vec<String> = redis::cmd("SPOP").arg("s").arg(15).query(&mut c).unwrap();
    let one: String = redis::cmd("SPOP").arg("s").query(&mut g.conn(f)).unwrap();
    popped.push(one);
    // Inside a script too (its writes replicate as one entry).
    let from_script: String = redis::cmd("EVAL")
        .arg("return redis.call('SPOP', KEYS[1])")
        .arg(1)
        .arg("s")
        .query(&mut c)
        .unwrap();
    popped.push(from_script);
    popped.sort();
    popped.dedup();
    assert_eq!(popped.len(), 17, "distinct members popped");
    let mut want: Vec<String> = members
        .into_iter()
        .filter(|m| !popped.contains(m))
        .collect();
    want.sort();
    g.eventually("the same 183 members on every node", |c| {
        let mut have: Vec<String> = redis::cmd("SMEMBERS").arg("s").query(c).unwrap();
        have.sort();
        have == want
    });
}

/// Each node runs its Raft tasks on one thread and applies short entries
/// (plain string, hash and set writes) there; anything else, such as a
/// script, is applied off that thread, so a script that runs longer than
/// an election timeout (300-600 ms) on every node holds up no heartbeat:
/// the term and the leader stay, and the write after it commits. (Checked:
/// with every entry applied on the Raft thread, a 3.3 s script left the
/// group without a leader, and the write after it was refused.)
#[test]
fn a_script_longer_than_an_election_timeout_keeps_the_leader_and_the_term() {
    let g = Group::start();
    let l = g.leader();
    let mut c = g.conn(l);
    let _: () = redis::cmd("SET")
        .arg("before")
        .arg("1")
        .query(&mut c)
        .unwrap();
    let term = info_field(&mut c, "basalt_raft_term");
    // A busy loop of a few seconds on every node (the loop count is in
    // the entry, so each node runs the same), then one write.
    let started = Instant::now();
    let n: i64 = redis::cmd("EVAL")
        .arg(
            "local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i % 7 end \
             redis.call('SET', KEYS[1], x) return x",
        )
        .arg(1)
        .arg("busy")
        .arg(200_000_000)
        .query(&mut c)
        .unwrap();
    let took = started.elapsed();
    assert!(n > 0);
    let _: () = redis::cmd("SET")
        .arg("after")
        .arg("2")
        .query(&mut c)
        .unwrap();
    g.eventually(
        "every node applied the script and the write after it",
        |c| {
            let busy: Option<i64> = redis::cmd("GET").arg("busy").query(c).unwrap();
            let after: Option<String> = redis::cmd("GET").arg("after").query(c).unwrap();
            busy == Some(n) && after.as_deref() == Some("2")
        },
    );
    for i in 0..3 {
        let mut c = g.conn(i);
        assert_eq!(
            info_field(&mut c, "basalt_raft_term"),
            term,
            "node {i}: an election during a script of {took:?}"
        );
    }
    assert_eq!(
        g.leader(),
        l,
        "the leader changed during a script of {took:?}"
    );
}

/// A read-only script runs on one node alone, holding its exec gate for
/// as long as it runs; a write applied meanwhile waits for the gate off
/// the Raft thread, so heartbeats go on: no election, on the leader or on
/// both followers, and the write commits once the scripts end. (Checked:
/// with the apply waiting for the gate on the Raft thread, a 3 s EVAL_RO
/// on the leader beside one SET cost the group its leader.)
#[test]
fn a_read_only_script_holding_a_nodes_gate_keeps_the_leader_and_the_term() {
    let g = Group::start();
    let l = g.leader();
    let term = info_field(&mut g.conn(l), "basalt_raft_term");
    let busy = "local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i % 7 end return x";
    for (round, on) in [vec![l], (0..3).filter(|&i| i != l).collect()]
        .into_iter()
        .enumerate()
    {
        let scripts: Vec<_> = on
            .iter()
            .map(|&i| {
                let mut c = g.conn(i);
                std::thread::spawn(move || {
                    let started = Instant::now();
                    let _: i64 = redis::cmd("EVAL_RO")
                        .arg(busy)
                        .arg(0)
                        .arg(200_000_000)
                        .query(&mut c)
                        .unwrap();
                    started.elapsed()
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        // Through a node whose gate no script holds (a follower forwards
        // it), so the write is proposed while the scripts run.
        let via = (0..3).find(|i| !on.contains(i)).unwrap_or(l);
        let key = format!("during{round}");
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("1")
            .query(&mut g.conn(via))
            .unwrap();
        let took: Vec<Duration> = scripts.into_iter().map(|t| t.join().unwrap()).collect();
        for i in 0..3 {
            assert_eq!(
                info_field(&mut g.conn(i), "basalt_raft_term"),
                term,
                "round {round}: node {i} saw an election during scripts of {took:?}"
            );
        }
        assert_eq!(g.leader(), l, "round {round}: scripts of {took:?}");
    }
}

/// Entries applied on node connection `c` so far, and those among them
/// applied on its Raft thread.
fn applied_counts(c: &mut Connection) -> (u64, u64) {
    (
        info_field(c, "basalt_raft_entries_applied"),
        info_field(c, "basalt_raft_entries_applied_on_raft_thread"),
    )
}

/// An HSET of `fields` fields to `key`, one command.
fn hset_fields(c: &mut Connection, key: &str, fields: usize) {
    let mut hset = redis::cmd("HSET");
    hset.arg(key);
    for i in 0..fields {
        hset.arg(format!("f{i}")).arg(i);
    }
    let _: i64 = hset.query(c).unwrap();
}

/// A string write over a key holding a collection of more than 1,024
/// fields drops them all, as DEL would, in time that grows with the
/// collection: no node applies it on the thread that also sends its
/// heartbeats. Plain writes to other keys, and hash writes to the large
/// hash itself, still apply there; a hash write to a large hash with an
/// expiry does not (the write may find it expired and drop it first).
#[test]
fn a_string_write_over_a_large_collection_is_applied_off_the_raft_thread_on_every_node() {
    let g = Group::start();
    let l = g.leader();
    let mut c = g.conn(l);
    hset_fields(&mut c, "big", 1100);
    // The leader has applied a write when it answers.
    let (a0, t0) = applied_counts(&mut c);
    let _: () = redis::cmd("SET")
        .arg("small")
        .arg("1")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        applied_counts(&mut c),
        (a0 + 1, t0 + 1),
        "a SET of a new key"
    );
    let _: i64 = redis::cmd("HSET")
        .arg("big")
        .arg("extra")
        .arg("1")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        applied_counts(&mut c),
        (a0 + 2, t0 + 2),
        "an HSET to the large hash"
    );
    g.eventually("every node holds the large hash", |c| {
        redis::cmd("HLEN").arg("big").query::<i64>(c).unwrap() == 1101
    });
    let before: Vec<(u64, u64)> = (0..3).map(|i| applied_counts(&mut g.conn(i))).collect();

    let _: () = redis::cmd("SET")
        .arg("big")
        .arg("now a string")
        .query(&mut c)
        .unwrap();
    for (i, &(applied, on_thread)) in before.iter().enumerate() {
        let mut n = g.conn(i);
        until("the node applied the SET", || {
            applied_counts(&mut n).0 > applied
        });
        assert_eq!(
            applied_counts(&mut n),
            (applied + 1, on_thread),
            "node {i}: the SET over the large hash"
        );
        assert_eq!(get(&mut n, "big").as_deref(), Some("now a string"));
    }

    hset_fields(&mut c, "expiring", 1100);
    let _: i64 = redis::cmd("EXPIRE")
        .arg("expiring")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    let (a1, t1) = applied_counts(&mut c);
    let _: i64 = redis::cmd("HSET")
        .arg("expiring")
        .arg("extra")
        .arg("1")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        applied_counts(&mut c),
        (a1 + 1, t1),
        "an HSET to a large hash with an expiry"
    );
}

#[test]
fn scripts_that_write_what_srandmember_or_randomkey_picked_write_the_same_on_every_node() {
    let g = Group::start();
    let l = g.leader();
    let mut c = g.conn(l);
    let members: Vec<String> = (0..100).map(|i| format!("m{i}")).collect();
    let _: i64 = redis::cmd("SADD")
        .arg("src")
        .arg(&members)
        .query(&mut c)
        .unwrap();
    let script = "local m = redis.call('SRANDMEMBER', KEYS[1]) \
                  local few = redis.call('SRANDMEMBER', KEYS[1], -3) \
                  redis.call('SADD', KEYS[2], m, unpack(few)) return m";
    for _ in 0..10 {
        let _: String = redis::cmd("EVAL")
            .arg(script)
            .arg(2)
            .arg("src")
            .arg("dst")
            .query(&mut c)
            .unwrap();
    }
    let mut want: Vec<String> = redis::cmd("SMEMBERS").arg("dst").query(&mut c).unwrap();
    want.sort();
    assert!(want.len() > 10, "the picks vary: {want:?}");
    g.eventually("the same picks written on every node", |c| {
        let mut have: Vec<String> = redis::cmd("SMEMBERS").arg("dst").query(c).unwrap();
        have.sort();
        have == want
    });
    // RANDOMKEY too: the key a script picked and wrote is the same key on
    // every node.
    for i in 0..50 {
        let _: () = redis::cmd("SET")
            .arg(format!("rk{i}"))
            .arg(i)
            .query(&mut c)
            .unwrap();
    }
    let script = "local k = redis.call('RANDOMKEY') redis.call('RPUSH', KEYS[1], k) return k";
    for _ in 0..10 {
        let _: String = redis::cmd("EVAL")
            .arg(script)
            .arg(1)
            .arg("rkpicks")
            .query(&mut c)
            .unwrap();
    }
    let want: Vec<String> = redis::cmd("LRANGE")
        .arg("rkpicks")
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    let mut distinct = want.clone();
    distinct.sort();
    distinct.dedup();
    assert!(distinct.len() > 3, "the picks vary: {want:?}");
    g.eventually("the same RANDOMKEY picks on every node", |c| {
        let have: Vec<String> = redis::cmd("LRANGE")
            .arg("rkpicks")
            .arg(0)
            .arg(-1)
            .query(c)
            .unwrap();
        have == want
    });
}

/// Consumers blocked in BLPOP on every node, a producer pushing slowly on
/// a follower: every element is popped exactly once, and the consumers'
/// clients block where they are connected (not only on the leader).
#[test]
fn consumers_blocked_on_every_node_pop_each_element_once() {
    let g = Group::start();
    let l = g.leader();
    let f = (0..3).find(|&i| i != l).unwrap();
    const N: usize = 60;
    let done = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = (0..6)
        .map(|k| {
            let mut c = g.conn(k % 3);
            let done = done.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(60);
                while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
                    let r: Option<(String, String)> =
                        redis::cmd("BLPOP").arg("q").arg(1).query(&mut c).unwrap();
                    if let Some((_, v)) = r {
                        got.push(v);
                    }
                }
                got
            })
        })
        .collect();
    // Give every consumer time to block on the empty list.
    std::thread::sleep(Duration::from_millis(300));
    let mut p = g.conn(f);
    for i in 0..N {
        let _: i64 = redis::cmd("RPUSH").arg("q").arg(i).query(&mut p).unwrap();
        if i % 10 == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    g.eventually("the list drained", |c| {
        redis::cmd("LLEN").arg("q").query::<i64>(c).unwrap() == 0
    });
    done.store(true, Ordering::SeqCst);
    let per_consumer: Vec<Vec<String>> = consumers.into_iter().map(|t| t.join().unwrap()).collect();
    let mut all: Vec<usize> = per_consumer
        .iter()
        .flatten()
        .map(|v| v.parse().unwrap())
        .collect();
    all.sort();
    assert_eq!(all, (0..N).collect::<Vec<_>>(), "each element popped once");
    let nodes_served = (0..3)
        .filter(|&node| (0..6).any(|k| k % 3 == node && !per_consumer[k].is_empty()))
        .count();
    assert!(nodes_served >= 2, "consumers on followers are served too");
}

/// BLPOP's timeout, BLMOVE and XREADGROUP BLOCK waiting on a follower, and
/// a client blocked on a follower that outlives a failover.
#[test]
fn blocking_commands_wait_on_a_follower_and_survive_a_failover() {
    let mut g = Group::start();
    let l = g.leader();
    let f = (0..3).find(|&i| i != l).unwrap();
    let mut fc = g.conn(f);
    // Nothing comes: the timeout's null, after about the timeout.
    let t = Instant::now();
    let r: Option<(String, String)> = redis::cmd("BLPOP")
        .arg("empty")
        .arg(0.3)
        .query(&mut fc)
        .unwrap();
    assert_eq!(r, None);
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(5));

    // BLMOVE on a follower, served by a push on the leader: the move is
    // on every node.
    let mover = {
        let mut c = g.conn(f);
        std::thread::spawn(move || -> Option<String> {
            redis::cmd("BLMOVE")
                .arg("src")
                .arg("dst")
                .arg("LEFT")
                .arg("RIGHT")
                .arg(10)
                .query(&mut c)
                .unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let mut lc = g.conn(l);
    let _: i64 = redis::cmd("RPUSH")
        .arg("src")
        .arg("x")
        .query(&mut lc)
        .unwrap();
    assert_eq!(mover.join().unwrap().as_deref(), Some("x"));
    g.eventually("the moved element on every node", |c| {
        redis::cmd("LRANGE")
            .arg("dst")
            .arg(0)
            .arg(-1)
            .query::<Vec<String>>(c)
            .unwrap()
            == ["x"]
    });

    // XREADGROUP BLOCK on a follower, served by XADD on the leader.
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("st")
        .arg("g")
        .arg("$")
        .arg("MKSTREAM")
        .query(&mut lc)
        .unwrap();
    let reader = {
        let mut c = g.conn(f);
        std::thread::spawn(move || -> Value {
            redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg("g")
                .arg("c1")
                .arg("BLOCK")
                .arg(10_000)
                .arg("STREAMS")
                .arg("st")
                .arg(">")
                .query(&mut c)
                .unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let id: String = redis::cmd("XADD")
        .arg("st")
        .arg("*")
        .arg("f")
        .arg("v")
        .query(&mut lc)
        .unwrap();
    let got = format!("{:?}", reader.join().unwrap());
    assert!(got.contains(&id), "the entry read: {got}");
    g.eventually("the entry pending for c1 on every node", |c| {
        let v: Value = redis::cmd("XPENDING").arg("st").arg("g").query(c).unwrap();
        matches!(&v, Value::Array(a) if a.first() == Some(&Value::Int(1)))
    });

    // A client blocked on a follower outlives the leader: killed, a new
    // leader elected, a push served to the waiting client.
    let waiter = {
        let mut c = g.conn(f);
        std::thread::spawn(move || -> Option<(String, String)> {
            redis::cmd("BLPOP")
                .arg("later")
                .arg(30)
                .query(&mut c)
                .unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    g.kill(l);
    // Sent while no leader is elected yet: it waits the election out
    // instead of answering CLUSTERDOWN.
    let o = (0..3).find(|&i| i != l && i != f).unwrap();
    let during = {
        let mut c = g.conn(o);
        std::thread::spawn(move || -> RedisResult<Option<(String, String)>> {
            redis::cmd("BLPOP").arg("during").arg(30).query(&mut c)
        })
    };
    let nl = g.leader();
    let mut c = g.conn(nl);
    let _: i64 = redis::cmd("RPUSH")
        .arg("later")
        .arg("y")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        waiter.join().unwrap(),
        Some(("later".to_string(), "y".to_string()))
    );
    let _: i64 = redis::cmd("RPUSH")
        .arg("during")
        .arg("z")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        during
            .join()
            .unwrap()
            .expect("BLPOP sent during the election"),
        Some(("during".to_string(), "z".to_string()))
    );
}

/// Membership changes online: a fourth node started without `--peers` is
/// added through a follower, catches up and votes (after a member is
/// removed and the old leader killed, the remaining two, one of them the
/// new node, elect a leader and keep every write); adding a node nobody
/// answers for is refused and changes nothing.
#[test]
fn a_node_added_online_catches_up_and_votes_and_a_removed_node_leaves() {
    let mut g = Group::start();
    let l = g.leader();
    let f = (0..3).find(|&i| i != l).unwrap();
    let other = (0..3).find(|&i| i != l && i != f).unwrap();
    let mut lc = g.conn(l);
    for i in 0..100 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .query(&mut lc)
            .unwrap();
    }
    g.add_node();
    let new = format!("4@127.0.0.1:{}", g.nodes[3].raft_port);
    let (code, out) = g.cluster(f, &["add", &new]);
    assert_eq!(code, 0, "cluster add: {out}");
    assert!(
        out.contains("\n4 127.0.0.1:") && out.contains(" voter"),
        "{out}"
    );
    let mut c4 = g.conn(3);
    assert_eq!(get(&mut c4, "k99").as_deref(), Some("99"), "caught up");
    let role: Vec<Value> = redis::cmd("ROLE").query(&mut c4).unwrap();
    assert_eq!(role[0], Value::BulkString(b"slave".to_vec()));

    // A node nobody answers for is not added.
    let (code, out) = g.cluster(l, &["add", &format!("9@127.0.0.1:{}", free_port())]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("no Basalt node answers"), "{out}");
    let (_, members) = g.cluster(l, &["members"]);
    assert_eq!(members.lines().count(), 4, "{members}");

    // Remove a follower; then the old leader dies: node 4 and the
    // remaining original node are a majority of three and carry on.
    let (code, out) = g.cluster(l, &["remove", &g.nodes[f].id.to_string()]);
    assert_eq!(code, 0, "cluster remove: {out}");
    assert_eq!(out.lines().count(), 3, "{out}");
    g.kill(f);
    let _: () = redis::cmd("SET")
        .arg("before")
        .arg("kill")
        .query(&mut lc)
        .unwrap();
    g.kill(l);
    let nl = g.leader();
    assert!(
        nl == other || nl == 3,
        "the new leader is a remaining member"
    );
    let mut c = g.conn(nl);
    let _: () = redis::cmd("SET")
        .arg("after")
        .arg("kill")
        .query(&mut c)
        .unwrap();
    for i in [other, 3] {
        let mut c = g.conn(i);
        assert_eq!(get(&mut c, "before").as_deref(), Some("kill"));
        assert_eq!(get(&mut c, "after").as_deref(), Some("kill"));
        assert_eq!(get(&mut c, "k0").as_deref(), Some("0"));
    }
}

/// A raw HTTP/1.1 request: the status, the ETag (if any) and the body.
fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &str,
    body: &[u8],
) -> (u16, Option<String>, Vec<u8>) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let head_end = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&resp[..head_end]).into_owned();
    let status = head[9..12].parse().unwrap();
    let etag = head.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .strip_prefix("etag: ")
            .map(|v| v.trim_matches('"').to_string())
    });
    (status, etag, resp[head_end + 4..].to_vec())
}

/// The HTTP API's writes work on every node: `/v1/keys` PUT and DELETE
/// (with their preconditions) and the command-backed collection routes
/// are log entries, so every node answers the same ETag and data.
#[test]
fn http_writes_on_any_node_reach_every_node_with_the_same_etag() {
    let g = Group::start();
    let l = g.leader();
    let f = (0..3).find(|&i| i != l).unwrap();
    let hp = |i: usize| g.nodes[i].http_port;
    let (status, etag, _) = http(hp(f), "PUT", "/v1/keys/doc?ttl=100", "", b"v1");
    assert_eq!(status, 201);
    let etag = etag.unwrap();
    let ttl: i64 = redis::cmd("TTL").arg("doc").query(&mut g.conn(f)).unwrap();
    assert!(ttl > 90 && ttl <= 100, "the PUT's ttl: {ttl}");
    for i in 0..3 {
        let (status, tag, body) = http(hp(i), "GET", "/v1/keys/doc", "", b"");
        assert_eq!(
            (status, tag.as_deref(), &body[..]),
            (200, Some(&etag[..]), &b"v1"[..]),
            "node {i}"
        );
    }
    // A stale If-Match fails alike on any node; the current one succeeds.
    let stale = "If-Match: \"1\"\r\n";
    let (status, tag, _) = http(hp(l), "PUT", "/v1/keys/doc", stale, b"v2");
    assert_eq!((status, tag.as_deref()), (412, Some(&etag[..])));
    let current = format!("If-Match: \"{etag}\"\r\n");
    let (status, tag2, _) = http(hp(f), "PUT", "/v1/keys/doc", &current, b"v2");
    assert_eq!(status, 200);
    assert_ne!(tag2.as_deref(), Some(&etag[..]));
    let mut c = g.conn(l);
    assert_eq!(get(&mut c, "doc").as_deref(), Some("v2"));
    let ttl: i64 = redis::cmd("TTL").arg("doc").query(&mut c).unwrap();
    assert_eq!(ttl, -1, "a PUT without ?ttl clears it, as SET does");
    // A collection route (HSET underneath), then DELETE on another node.
    let (status, _, _) = http(hp(f), "PUT", "/v1/hashes/h/f", "", b"1");
    assert!(status == 200 || status == 201, "{status}");
    let (status, _, _) = http(hp(l), "DELETE", "/v1/keys/doc", "", b"");
    assert_eq!(status, 204);
    g.eventually("the hash and the delete on every node", |c| {
        let h: Option<String> = redis::cmd("HGET").arg("h").arg("f").query(c).unwrap();
        h.as_deref() == Some("1") && get(c, "doc").is_none()
    });
}

/// Removing the leader: the other two elect a leader among themselves and
/// take writes, and the removed node no longer calls itself master (its
/// writes answer `-CLUSTERDOWN` until it is stopped).
#[test]
fn a_removed_leader_hands_over_and_stops_calling_itself_master() {
    let g = Group::start();
    let l = g.leader();
    let f = (0..3).find(|&i| i != l).unwrap();
    let (code, out) = g.cluster(f, &["remove", &g.nodes[l].id.to_string()]);
    assert_eq!(code, 0, "cluster remove: {out}");
    let rest: Vec<usize> = (0..3).filter(|&i| i != l).collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    let new = loop {
        let roles: Vec<String> = rest
            .iter()
            .map(|&i| {
                let r: Vec<Value> = redis::cmd("ROLE").query(&mut g.conn(i)).unwrap();
                match &r[0] {
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    other => format!("{other:?}"),
                }
            })
            .collect();
        if let Some(k) = roles.iter().position(|r| r == "master") {
            break rest[k];
        }
        assert!(Instant::now() < deadline, "no new leader: {roles:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let _: () = redis::cmd("SET")
        .arg("after")
        .arg("remove")
        .query(&mut g.conn(new))
        .unwrap();
    let role: Vec<Value> = redis::cmd("ROLE").query(&mut g.conn(l)).unwrap();
    assert_eq!(role[0], Value::BulkString(b"slave".to_vec()), "{role:?}");
    let r: RedisResult<()> = redis::cmd("SET").arg("x").arg("y").query(&mut g.conn(l));
    let e = r.unwrap_err();
    assert_eq!(e.code(), Some("CLUSTERDOWN"), "{e}");
}

/// Waits (at most 15 s) until `f` holds.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !f() {
        assert!(Instant::now() < deadline, "not within 15 s: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A field of INFO replication on node connection `c`.
fn info_field(c: &mut Connection, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("replication").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("INFO replication has no {field}: {info}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_node_added_after_the_log_was_compacted_installs_a_snapshot_of_every_type() {
    // A snapshot every 50 entries, 50 kept below it: the log a new node
    // would need is gone after a few hundred writes.
    let mut g = Group::start_with(&[("BASALT_RAFT_SNAPSHOT_EVERY", "50")]);
    let l = g.leader();
    let mut c = g.conn(l);
    let lib = "#!lua name=snaplib\nredis.register_function('hello', function() return 'hi' end)";
    let _: () = redis::pipe()
        .cmd("SET")
        .arg("s")
        .arg("v")
        .ignore()
        .cmd("SET")
        .arg("ttl")
        .arg("v")
        .arg("PX")
        .arg(600_000)
        .ignore()
        .cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("v")
        .ignore()
        .cmd("ZADD")
        .arg("z")
        .arg(1)
        .arg("a")
        .arg(2.5)
        .arg("b")
        .ignore()
        .cmd("RPUSH")
        .arg("l")
        .arg("a")
        .arg("b")
        .arg("c")
        .ignore()
        .cmd("SADD")
        .arg("st")
        .arg("x")
        .ignore()
        .cmd("XADD")
        .arg("x")
        .arg("1-1")
        .arg("f")
        .arg("v")
        .ignore()
        .cmd("FUNCTION")
        .arg("LOAD")
        .arg(lib)
        .ignore()
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut c).unwrap();
    let _: () = redis::cmd("SET")
        .arg("in3")
        .arg("yes")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SELECT").arg(0).query(&mut c).unwrap();
    for i in 0..300 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .query(&mut c)
            .unwrap();
    }
    let _: () = redis::cmd("DEL").arg("k7").query(&mut c).unwrap();
    until("the leader compacted its log", || {
        info_field(&mut c, "basalt_raft_purged_index") >= 100
    });
    g.add_node();
    let (code, out) = g.cluster(
        l,
        &["add", &format!("4@127.0.0.1:{}", g.nodes[3].raft_port)],
    );
    assert_eq!(code, 0, "cluster add: {out}");
    let mut n4 = g.conn(3);
    let _: () = redis::cmd("READONLY").query(&mut n4).unwrap();
    // The DEL of k7 is the last write: a snapshot taken between k299 and
    // it may reach node 4 a moment before the entry does, so wait for both
    // (k7 existed before k299, so absent with k299 present means deleted).
    until("node 4 caught up", || {
        get(&mut n4, "k299").is_some() && get(&mut n4, "k7").is_none()
    });
    assert!(info_field(&mut n4, "basalt_raft_snapshot_index") > 0);
    let check = |n: &mut Connection| {
        assert_eq!(get(n, "s").as_deref(), Some("v"));
        assert_eq!(get(n, "k299").as_deref(), Some("299"));
        assert_eq!(get(n, "k7"), None);
        let pttl: i64 = redis::cmd("PTTL").arg("ttl").query(n).unwrap();
        assert!(pttl > 0 && pttl <= 600_000, "{pttl}");
        let hv: Option<String> = redis::cmd("HGET").arg("h").arg("f").query(n).unwrap();
        assert_eq!(hv.as_deref(), Some("v"));
        let z: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg("z")
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(n)
            .unwrap();
        assert_eq!(z, vec![("a".to_string(), 1.0), ("b".to_string(), 2.5)]);
        let l: Vec<String> = redis::cmd("LRANGE")
            .arg("l")
            .arg(0)
            .arg(-1)
            .query(n)
            .unwrap();
        assert_eq!(l, ["a", "b", "c"]);
        let x: i64 = redis::cmd("XLEN").arg("x").query(n).unwrap();
        assert_eq!(x, 1);
        let f: String = redis::cmd("FCALL_RO")
            .arg("hello")
            .arg(0)
            .query(n)
            .unwrap_or_else(|_| redis::cmd("FCALL").arg("hello").arg(0).query(n).unwrap());
        assert_eq!(f, "hi");
        let _: () = redis::cmd("SELECT").arg(3).query(n).unwrap();
        assert_eq!(get(n, "in3").as_deref(), Some("yes"));
        let _: () = redis::cmd("SELECT").arg(0).query(n).unwrap();
    };
    check(&mut n4);
    // The same versions as the leader's.
    let etag = |i: usize| http(g.nodes[i].http_port, "GET", "/v1/keys/s", "", b"").1;
    assert!(etag(l).is_some());
    assert_eq!(etag(3), etag(l));
    // Its files hold the snapshot: after kill -9 it comes back with it,
    // and entries after the snapshot apply on top.
    g.kill(3);
    let _: () = redis::cmd("SET")
        .arg("after")
        .arg("restart")
        .query(&mut c)
        .unwrap();
    g.spawn(3);
    let mut n4 = g.conn(3);
    let _: () = redis::cmd("READONLY").query(&mut n4).unwrap();
    until("node 4 caught up after its restart", || {
        get(&mut n4, "after").is_some()
    });
    check(&mut n4);
}

/// WAIT in a group: on the leader, the followers holding the client's
/// writes (both of them, once replicated; never more, so asking for three
/// waits the timeout); on a follower, the majority Raft guarantees for
/// every acknowledged write (1 of 3).
#[test]
fn wait_counts_the_followers_that_hold_the_clients_writes() {
    let g = Group::start();
    let l = g.leader();
    let mut c = g.conn(l);
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    let n: i64 = redis::cmd("WAIT").arg(2).arg(5000).query(&mut c).unwrap();
    assert_eq!(n, 2, "both followers hold the write");
    let started = Instant::now();
    let n: i64 = redis::cmd("WAIT").arg(3).arg(200).query(&mut c).unwrap();
    assert_eq!(n, 2, "there are only two followers");
    assert!(started.elapsed() >= Duration::from_millis(200), "it waited");
    let f = (0..3).find(|&i| i != l).unwrap();
    let mut fc = g.conn(f);
    let _: () = redis::cmd("SET").arg("k2").arg("v").query(&mut fc).unwrap();
    let n: i64 = redis::cmd("WAIT").arg(1).arg(0).query(&mut fc).unwrap();
    assert_eq!(n, 1);
    let n: i64 = redis::cmd("WAIT").arg(2).arg(100).query(&mut fc).unwrap();
    assert_eq!(n, 1);
}

/// The JSON body of an HTTP answer.
fn json_body(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(body)))
}

#[test]
fn a_work_queue_hands_each_item_out_once_across_nodes_and_tokens_work_on_any_node() {
    let g = Group::start();
    let l = g.leader();
    let f = (0..3).find(|&i| i != l).unwrap();
    let o = (0..3).find(|&i| i != l && i != f).unwrap();
    let hp = |i: usize| g.nodes[i].http_port;
    let (s, _, b) = http(
        hp(f),
        "PUT",
        "/v1/queues/jobs",
        "",
        br#"{"visibility_timeout": 30}"#,
    );
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    // A take that waits on one follower is woken by a push on the other.
    let waiter = {
        let port = hp(o);
        std::thread::spawn(move || {
            http(
                port,
                "POST",
                "/v1/queues/jobs/take?worker=w1&wait=10",
                "",
                b"",
            )
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    for item in ["a", "b", "c"] {
        let (s, _, b) = http(hp(f), "POST", "/v1/queues/jobs/items", "", item.as_bytes());
        assert_eq!(s, 201, "{}", String::from_utf8_lossy(&b));
    }
    let (s, _, b) = waiter.join().unwrap();
    assert_eq!(s, 200, "the waiting take got an item");
    let first = json_body(&b);
    // The rest is taken from every node: each item once.
    let mut taken = vec![first["item"].as_str().unwrap().to_string()];
    let mut tokens = vec![(o, first["token"].as_str().unwrap().to_string())];
    for i in [l, f, o, l] {
        let (s, _, b) = http(
            hp(i),
            "POST",
            &format!("/v1/queues/jobs/take?worker=w{i}"),
            "",
            b"",
        );
        if s == 204 {
            continue;
        }
        assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
        let d = json_body(&b);
        taken.push(d["item"].as_str().unwrap().to_string());
        tokens.push((i, d["token"].as_str().unwrap().to_string()));
    }
    taken.sort();
    assert_eq!(taken, ["a", "b", "c"]);
    // A token acks on another node than the one that handed it out, once.
    let (i, token) = &tokens[0];
    let other = (i + 1) % 3;
    let (s, _, _) = http(
        hp(other),
        "POST",
        &format!("/v1/queues/jobs/ack/{token}"),
        "",
        b"",
    );
    assert_eq!(s, 200);
    let (s, _, _) = http(
        hp(*i),
        "POST",
        &format!("/v1/queues/jobs/ack/{token}"),
        "",
        b"",
    );
    assert_eq!(s, 409, "a token acks once, wherever");
    // Every node tells the same stats (after a read barrier on each).
    let stats: Vec<(i64, i64)> = (0..3)
        .map(|i| {
            let (s, _, b) = http(hp(i), "GET", "/v1/queues/jobs", "", b"");
            assert_eq!(s, 200);
            let v = json_body(&b);
            (
                v["ready"].as_i64().unwrap(),
                v["in_flight"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(stats, vec![(0, 2); 3]);
    // An error answer travels back whole (404 for an unknown queue).
    let (s, _, b) = http(hp(f), "GET", "/v1/queues/nope", "", b"");
    assert_eq!(s, 404, "{}", String::from_utf8_lossy(&b));
    assert_eq!(json_body(&b)["code"], "NOT_FOUND");
}

#[test]
fn concurrent_clients_writes_share_entries_and_keep_each_clients_order() {
    let g = Group::start();
    let l = g.leader();
    let mut lc = g.conn(l);
    let before = info_field(&mut lc, "basalt_raft_last_log_index");
    // 20 clients, 50 round trips each: 1,000 proposals while at most 4
    // entries are in flight, so they queue and go in shared entries.
    let clients: Vec<_> = (0..20)
        .map(|t| {
            let mut c = g.conn(l);
            std::thread::spawn(move || {
                for i in 0..50 {
                    let n: i64 = redis::cmd("RPUSH")
                        .arg(format!("list:{t}"))
                        .arg(i)
                        .query(&mut c)
                        .unwrap();
                    assert_eq!(n, i + 1, "client {t}: its own reply, in its order");
                    let _: i64 = redis::cmd("INCR").arg("total").query(&mut c).unwrap();
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let entries = info_field(&mut lc, "basalt_raft_last_log_index") - before;
    eprintln!("2,000 writes of 20 clients took {entries} log entries");
    assert!(entries < 2_000, "2,000 writes took {entries} entries");
    let want: Vec<String> = (0..50).map(|i| i.to_string()).collect();
    g.eventually("every list in order and the total on every node", |c| {
        let _: () = redis::cmd("READONLY").query(c).unwrap();
        let total: Option<i64> = redis::cmd("GET").arg("total").query(c).unwrap();
        total == Some(1000)
            && (0..20).all(|t| {
                let l: Vec<String> = redis::cmd("LRANGE")
                    .arg(format!("list:{t}"))
                    .arg(0)
                    .arg(-1)
                    .query(c)
                    .unwrap();
                l == want
            })
    });
}

/// With four apply threads on two nodes and one on the third, 12 clients
/// pipeline string writes (SET, GETSET, DEL and now and then an MSET of
/// their own keys; INCR of counters they all share) while the leader
/// combines them into entries whose commands apply on several threads at
/// once where a node has them. Each client's replies are
/// what its own writes in its order give, the shared counters count every
/// INCR, and every node ends with the same values and the same versions.
#[test]
fn writes_applied_on_several_threads_give_every_node_the_same_values_and_versions() {
    // Nodes with 4, 4 and 1 apply threads: versions may not depend on how
    // a node spreads an entry.
    let threads = ["4", "4", "1"];
    let g = Group::start_each(
        &[],
        &[
            &[("BASALT_RAFT_APPLY_THREADS", threads[0])],
            &[("BASALT_RAFT_APPLY_THREADS", threads[1])],
            &[("BASALT_RAFT_APPLY_THREADS", threads[2])],
        ],
    );
    let l = g.leader();
    let clients: Vec<_> = (0..12)
        .map(|t| {
            let mut c = g.conn(l);
            std::thread::spawn(move || {
                let mut model: std::collections::HashMap<String, String> = Default::default();
                let mut fields: std::collections::HashMap<String, i64> = Default::default();
                let mut members: std::collections::HashSet<String> = Default::default();
                let mut last_incr = [0i64; 4];
                for round in 0..30 {
                    let mut pipe = redis::pipe();
                    let mut expect: Vec<Option<Value>> = Vec::new();
                    for i in 0..16 {
                        let own = |x: usize| format!("own:{t}:{}", x % 6);
                        match i % 4 {
                            0 => {
                                let v = format!("{round}:{i}");
                                pipe.cmd("SET").arg(own(i)).arg(&v);
                                model.insert(own(i), v);
                                expect.push(Some(Value::Okay));
                            }
                            1 => {
                                pipe.cmd("INCR").arg(format!("shared:{}", i / 4));
                                expect.push(None);
                            }
                            2 => {
                                let v = format!("g{round}:{i}");
                                pipe.cmd("GETSET").arg(own(i + 1)).arg(&v);
                                let old = model.insert(own(i + 1), v);
                                expect.push(Some(
                                    old.map_or(Value::Nil, |o| Value::BulkString(o.into_bytes())),
                                ));
                            }
                            _ => {
                                pipe.cmd("DEL").arg(own(i + 2));
                                let n = model.remove(&own(i + 2)).is_some() as i64;
                                expect.push(Some(Value::Int(n)));
                            }
                        }
                    }
                    // A hash and a set of the client's own.
                    let f = format!("f{}", round % 3);
                    let n = fields.entry(f.clone()).or_insert(0);
                    *n += 1;
                    pipe.cmd("HINCRBY").arg(format!("h:{t}")).arg(&f).arg(1);
                    expect.push(Some(Value::Int(*n)));
                    let m = format!("m{}", round % 7);
                    pipe.cmd("SADD").arg(format!("s:{t}")).arg(&m);
                    expect.push(Some(Value::Int(members.insert(m) as i64)));
                    if round % 4 == 3 {
                        pipe.cmd("HDEL").arg(format!("h:{t}")).arg("f0").arg("nope");
                        expect.push(Some(Value::Int(fields.remove("f0").is_some() as i64)));
                        pipe.cmd("SREM").arg(format!("s:{t}")).arg("m0");
                        expect.push(Some(Value::Int(members.remove("m0") as i64)));
                    }
                    if round % 5 == 0 {
                        pipe.cmd("MSET")
                            .arg(format!("own:{t}:0"))
                            .arg("m0")
                            .arg(format!("own:{t}:1"))
                            .arg("m1");
                        model.insert(format!("own:{t}:0"), "m0".into());
                        model.insert(format!("own:{t}:1"), "m1".into());
                        expect.push(Some(Value::Okay));
                    }
                    let replies: Vec<Value> = pipe.query(&mut c).unwrap();
                    assert_eq!(replies.len(), expect.len());
                    for (i, (got, want)) in replies.iter().zip(&expect).enumerate() {
                        match want {
                            Some(w) => assert_eq!(got, w, "client {t} round {round} command {i}"),
                            None => {
                                let Value::Int(n) = got else {
                                    panic!("INCR answered {got:?}")
                                };
                                let k = i / 4;
                                assert!(
                                    *n > last_incr[k],
                                    "client {t}: counter {k} went {} -> {n}",
                                    last_incr[k]
                                );
                                last_incr[k] = *n;
                            }
                        }
                    }
                }
                let mut hash: Vec<(String, String)> = fields
                    .into_iter()
                    .map(|(f, n)| (f, n.to_string()))
                    .collect();
                hash.sort();
                let mut set: Vec<String> = members.into_iter().collect();
                set.sort();
                (model, hash, set)
            })
        })
        .collect();
    let mut want: std::collections::BTreeMap<String, Option<String>> = Default::default();
    let mut collections = Vec::new();
    for (t, c) in clients.into_iter().enumerate() {
        for x in 0..6 {
            want.insert(format!("own:{t}:{x}"), None);
        }
        let (model, hash, set) = c.join().unwrap();
        for (k, v) in model {
            want.insert(k, Some(v));
        }
        collections.push((t, hash, set));
    }
    for k in 0..4 {
        want.insert(format!("shared:{k}"), Some("360".into()));
    }
    // Values and versions as the leader has them, the same on every node.
    let versions = |c: &mut Connection| -> Vec<(String, Option<String>, i64)> {
        let _: () = redis::cmd("READONLY").query(c).unwrap();
        want.keys()
            .map(|k| {
                let v: i64 = redis::cmd("VERSION").arg(k).query(c).unwrap();
                (k.clone(), get(c, k), v)
            })
            .collect()
    };
    // The hashes and sets: contents as each client's model says, versions
    // the leader's, on every node.
    // (hash version, its fields, set version, its members) per client.
    type Collections = Vec<(i64, Vec<(String, String)>, i64, Vec<String>)>;
    let maps = |c: &mut Connection| -> Collections {
        let _: () = redis::cmd("READONLY").query(c).unwrap();
        collections
            .iter()
            .map(|(t, _, _)| {
                let (h, s) = (format!("h:{t}"), format!("s:{t}"));
                let mut hash: Vec<(String, String)> =
                    redis::cmd("HGETALL").arg(&h).query(c).unwrap();
                hash.sort();
                let mut set: Vec<String> = redis::cmd("SMEMBERS").arg(&s).query(c).unwrap();
                set.sort();
                let hv: i64 = redis::cmd("VERSION").arg(&h).query(c).unwrap();
                let sv: i64 = redis::cmd("VERSION").arg(&s).query(c).unwrap();
                (hv, hash, sv, set)
            })
            .collect()
    };
    let maps_on_leader = maps(&mut g.conn(l));
    for ((_, hash, set), (_, got_hash, _, got_set)) in collections.iter().zip(&maps_on_leader) {
        assert_eq!(got_hash, hash);
        assert_eq!(got_set, set);
    }
    g.eventually("the leader's hashes and sets, with its versions", |c| {
        maps(c) == maps_on_leader
    });
    let on_leader = versions(&mut g.conn(l));
    let values: Vec<(String, Option<String>)> = on_leader
        .iter()
        .map(|(k, v, _)| (k.clone(), v.clone()))
        .collect();
    let wanted: Vec<(String, Option<String>)> = want.clone().into_iter().collect();
    assert_eq!(values, wanted);
    g.eventually("the leader's values and versions", |c| {
        versions(c) == on_leader
    });
    for (i, node_threads) in threads.iter().enumerate() {
        let stretches = info_field(&mut g.conn(i), "basalt_raft_lane_stretches");
        if *node_threads == "1" {
            assert_eq!(stretches, 0, "node {i} has one apply thread");
        } else {
            assert!(stretches > 0, "node {i} applied nothing on several threads");
        }
        eprintln!("node {i}: {stretches} stretches on the apply threads");
        // Every node applied the entries and timed it.
        assert!(info_field(&mut g.conn(i), "basalt_raft_entries_applied") > 0);
    }
    // The leader's group commit: entries of several proposals each, each
    // round timed.
    let mut lc = g.conn(l);
    let entries = info_field(&mut lc, "basalt_raft_entries_submitted");
    assert!(entries > 0);
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut lc)
        .unwrap();
    let per_entry: f64 = info
        .lines()
        .find_map(|l| l.strip_prefix("basalt_raft_proposals_per_entry:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(per_entry > 1.0, "{info}");
    assert!(info_field(&mut lc, "basalt_raft_round_mean_us") > 0);
}

/// With four apply threads, a follower killed with SIGKILL while it
/// applies pipelined INCRs from many clients (an entry's commands spread
/// over its threads) and started again re-applies the entries after its
/// last applied one: every counter on it ends equal to the leader's, each
/// INCR counted once, whatever moment the kill hit.
#[test]
fn a_follower_killed_while_applying_on_several_threads_counts_every_incr_once() {
    let mut g = Group::start_with(&[("BASALT_RAFT_APPLY_THREADS", "4")]);
    let l = g.leader();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..16)
        .map(|t| {
            let mut c = g.conn(l);
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut rounds = 0;
                while !stop.load(Ordering::Relaxed) && rounds < 2_000 {
                    let mut pipe = redis::pipe();
                    for i in 0..32 {
                        pipe.cmd("INCR").arg(format!("c:{t}:{}", i % 4));
                    }
                    // A slow machine may see an election: the pipeline (one
                    // entry) then may or may not have been applied.
                    if pipe.query::<Vec<i64>>(&mut c).is_err() {
                        return (rounds, true);
                    }
                    rounds += 1;
                }
                (rounds, false)
            })
        })
        .collect();
    let follower = (0..3).find(|&i| i != l).unwrap();
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(300));
        g.kill(follower);
        g.spawn(follower);
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let rounds: Vec<(i64, bool)> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let counters = |c: &mut Connection| -> Vec<Option<i64>> {
        let _: () = redis::cmd("READONLY").query(c).unwrap();
        (0..16)
            .flat_map(|t| (0..4).map(move |k| format!("c:{t}:{k}")))
            .map(|k| redis::cmd("GET").arg(k).query(c).unwrap())
            .collect()
    };
    // The leader (now) counts each acknowledged pipeline once, and the
    // one a client saw fail at most once.
    let on_leader = counters(&mut g.conn(g.leader()));
    for (t, &(r, uncertain)) in rounds.iter().enumerate() {
        for k in 0..4 {
            let got = on_leader[t * 4 + k].unwrap_or(0);
            let ok = got == 8 * r || (uncertain && got == 8 * (r + 1));
            assert!(
                ok,
                "client {t} counter {k}: {got} after {r} acknowledged pipelines"
            );
        }
    }
    assert!(
        rounds.iter().map(|r| r.0).sum::<i64>() > 50,
        "too few writes: {rounds:?}"
    );
    g.eventually("every node's counters equal the leader's", |c| {
        counters(c) == on_leader
    });
    let stretches = info_field(&mut g.conn(follower), "basalt_raft_lane_stretches")
        + info_field(&mut g.conn(l), "basalt_raft_lane_stretches");
    assert!(stretches > 0, "nothing applied on several threads");
}
