//! Crash harness for multi-record writes: clients run MULTI/EXEC blocks,
//! MSETs, RENAMEs of hashes and SUNIONSTOREs whose results obey known
//! invariants, while the real `basalt` binary is killed with SIGKILL at
//! random moments. After each restart no invariant may be broken (a write
//! cut in half shows as keys that disagree, a hash with missing fields,
//! both names of a RENAME, a partial union) and every acknowledged batch
//! must be there whole.
//!
//! The invariants, per client `c` (its keys never meet another client's):
//! - `tx:c:0..4` (spread over the shards) are always equal: one EXEC sets
//!   all five to the same stamp, and an INCR of `tx:c:n` counts the EXECs;
//! - `ms:c:0..9` are always equal: one MSET sets all ten;
//! - exactly one of `rn:c:a`, `rn:c:b` exists and holds all 12 fields: a
//!   RENAME moves it back and forth;
//! - `un:c` is absent or holds exactly the 40 members of the union of two
//!   fixed sets: SUNIONSTORE rewrites it, a DEL removes it;
//! - `mv:c` is in exactly one of databases 0 and 1: MOVE sends it back and
//!   forth (two engines, decided by one entry in `BATCHES`).
//!
//! A short run is part of `cargo test`. A long one:
//! `BASALT_BATCH_CRASH_ROUNDS=30 cargo test --release -p basalt-server --test batch_crash -- --nocapture`
//! (also `BASALT_CRASH_CLIENTS`, `BASALT_CRASH_SECONDS`, `BASALT_CRASH_MODES`,
//! `BASALT_CRASH_SEED` as in `crash.rs`).

mod common;

use std::time::Duration;

use basalt_resp::Frame;
use common::binary::{check_clean, Conn, Knobs, Rng, Server};

const TX_KEYS: usize = 5;
const MSET_KEYS: usize = 10;
const HASH_FIELDS: usize = 12;
const UNION: usize = 40;

/// A batch whose reply never came: its effect may or may not be there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Exec(u64),
    Mset(u64),
    Rename,
    Union,
    DelUnion,
    Move,
}

/// What one client knows.
#[derive(Debug)]
struct Client {
    id: usize,
    rng: Rng,
    stamp: u64,
    /// Acknowledged: the EXEC stamp, the number of EXECs, the MSET stamp,
    /// where the renamed hash is (`true` = `a`), whether the union exists.
    tx: u64,
    execs: u64,
    ms: u64,
    at_a: bool,
    union: bool,
    /// Which database holds `mv:c` (acknowledged).
    mv_db: u8,
    in_flight: Option<Op>,
    ready: bool,
}

fn bulk_u64(f: &Frame) -> Option<u64> {
    match f {
        Frame::Bulk(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

impl Client {
    fn new(id: usize, seed: u64) -> Client {
        Client {
            id,
            rng: Rng((seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1),
            stamp: 0,
            tx: 0,
            execs: 0,
            ms: 0,
            at_a: true,
            union: false,
            mv_db: 0,
            in_flight: None,
            ready: false,
        }
    }

    fn k(&self, name: &str) -> String {
        format!("{name}:{}", self.id)
    }

    /// Writes the fixed data (once, acknowledged before any kill counts).
    fn setup(&mut self, c: &mut Conn) -> std::io::Result<()> {
        let a = self.k("rn:a");
        let mut args: Vec<Vec<u8>> = vec![b"HSET".to_vec(), a.into_bytes()];
        for f in 0..HASH_FIELDS {
            args.push(format!("f{f}").into_bytes());
            args.push(format!("v{f}").into_bytes());
        }
        let refs: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
        c.cmd(&refs)?;
        for (s, range) in [("s1", 0..UNION / 2 + 5), ("s2", UNION / 2 - 5..UNION)] {
            let key = self.k(s);
            let mut args: Vec<Vec<u8>> = vec![b"SADD".to_vec(), key.into_bytes()];
            args.extend(range.map(|m| format!("m{m}").into_bytes()));
            let refs: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
            c.cmd(&refs)?;
        }
        let mv = self.k("mv");
        c.cmd(&[b"SET", mv.as_bytes(), b"here"])?;
        self.ready = true;
        Ok(())
    }

    fn step(&mut self, c: &mut Conn) -> std::io::Result<()> {
        self.stamp += 1;
        let op = match self.rng.below(6) {
            0 | 1 => Op::Exec(self.stamp),
            2 => Op::Mset(self.stamp),
            3 => Op::Rename,
            4 => Op::Move,
            _ if self.union && self.rng.below(3) == 0 => Op::DelUnion,
            _ => Op::Union,
        };
        self.in_flight = Some(op);
        match op {
            Op::Exec(v) => {
                c.cmd(&[b"MULTI"])?;
                for i in 0..TX_KEYS {
                    let k = self.k(&format!("tx:{i}"));
                    c.cmd(&[b"SET", k.as_bytes(), v.to_string().as_bytes()])?;
                }
                let n = self.k("tx:n");
                c.cmd(&[b"INCR", n.as_bytes()])?;
                let r = c.cmd(&[b"EXEC"])?;
                assert!(matches!(r, Frame::Array(_)), "EXEC replied {r:?}");
                self.tx = v;
                self.execs += 1;
            }
            Op::Mset(v) => {
                let keys: Vec<String> =
                    (0..MSET_KEYS).map(|i| self.k(&format!("ms:{i}"))).collect();
                let v = v.to_string();
                let mut args: Vec<&[u8]> = vec![b"MSET"];
                for k in &keys {
                    args.push(k.as_bytes());
                    args.push(v.as_bytes());
                }
                c.cmd(&args)?;
                self.ms = self.stamp;
            }
            Op::Rename => {
                let (a, b) = (self.k("rn:a"), self.k("rn:b"));
                let (from, to) = if self.at_a { (a, b) } else { (b, a) };
                let r = c.cmd(&[b"RENAME", from.as_bytes(), to.as_bytes()])?;
                assert_eq!(r, Frame::Simple("OK".into()), "RENAME");
                self.at_a = !self.at_a;
            }
            Op::Union => {
                let (d, s1, s2) = (self.k("un"), self.k("s1"), self.k("s2"));
                let r = c.cmd(&[b"SUNIONSTORE", d.as_bytes(), s1.as_bytes(), s2.as_bytes()])?;
                assert_eq!(r, Frame::Integer(UNION as i64), "SUNIONSTORE");
                self.union = true;
            }
            Op::DelUnion => {
                let d = self.k("un");
                c.cmd(&[b"DEL", d.as_bytes()])?;
                self.union = false;
            }
            Op::Move => {
                let (from, to) = if self.mv_db == 0 {
                    (b"0", b"1")
                } else {
                    (b"1", b"0")
                };
                let mv = self.k("mv");
                c.cmd(&[b"SELECT", from])?;
                let r = c.cmd(&[b"MOVE", mv.as_bytes(), to])?;
                c.cmd(&[b"SELECT", b"0"])?;
                assert_eq!(r, Frame::Integer(1), "MOVE");
                self.mv_db = 1 - self.mv_db;
            }
        }
        self.in_flight = None;
        Ok(())
    }

    /// Checks the invariants and the acknowledged state; returns problems.
    fn verify(&mut self, c: &mut Conn) -> Vec<String> {
        let mut bad = Vec::new();
        let id = self.id;
        if !self.ready {
            return bad;
        }
        let get = |c: &mut Conn, k: String| bulk_u64(&c.cmd(&[b"GET", k.as_bytes()]).unwrap());
        // EXEC: five equal keys and a counter, acknowledged or in flight.
        let tx: Vec<Option<u64>> = (0..TX_KEYS)
            .map(|i| get(c, self.k(&format!("tx:{i}"))))
            .collect();
        let n = get(c, self.k("tx:n")).unwrap_or(0);
        if tx.iter().any(|v| *v != tx[0]) {
            bad.push(format!("client {id}: EXEC torn: {tx:?}"));
        }
        let tx0 = tx[0].unwrap_or(0);
        match self.in_flight {
            Some(Op::Exec(v)) if tx0 == v && n == self.execs + 1 => {
                self.tx = v;
                self.execs += 1;
            }
            _ if tx0 == self.tx && n == self.execs => {}
            _ => bad.push(format!(
                "client {id}: EXEC state {tx0}/{n}, acknowledged {}/{} (in flight {:?})",
                self.tx, self.execs, self.in_flight
            )),
        }
        // MSET: ten equal keys.
        let ms: Vec<Option<u64>> = (0..MSET_KEYS)
            .map(|i| get(c, self.k(&format!("ms:{i}"))))
            .collect();
        if ms.iter().any(|v| *v != ms[0]) {
            bad.push(format!("client {id}: MSET torn: {ms:?}"));
        }
        let ms0 = ms[0].unwrap_or(0);
        match self.in_flight {
            Some(Op::Mset(v)) if ms0 == v => self.ms = v,
            _ if ms0 == self.ms => {}
            _ => bad.push(format!(
                "client {id}: MSET state {ms0}, acknowledged {}",
                self.ms
            )),
        }
        // RENAME: exactly one name, all fields.
        let len = |c: &mut Conn, k: String| match c.cmd(&[b"HLEN", k.as_bytes()]).unwrap() {
            Frame::Integer(n) => n as usize,
            f => panic!("HLEN replied {f:?}"),
        };
        let (la, lb) = (len(c, self.k("rn:a")), len(c, self.k("rn:b")));
        match (la, lb) {
            (HASH_FIELDS, 0) | (0, HASH_FIELDS) => {
                let at_a = la == HASH_FIELDS;
                if at_a != self.at_a && self.in_flight != Some(Op::Rename) {
                    bad.push(format!("client {id}: RENAME acknowledged but undone"));
                }
                self.at_a = at_a;
            }
            _ => bad.push(format!(
                "client {id}: RENAME torn: a has {la} fields, b has {lb}"
            )),
        }
        // SUNIONSTORE: absent or whole.
        let card = match c.cmd(&[b"SCARD", self.k("un").as_bytes()]).unwrap() {
            Frame::Integer(n) => n as usize,
            f => panic!("SCARD replied {f:?}"),
        };
        match card {
            0 => {
                if self.union && !matches!(self.in_flight, Some(Op::DelUnion)) {
                    bad.push(format!("client {id}: acknowledged SUNIONSTORE lost"));
                }
                self.union = false;
            }
            UNION => {
                if !self.union && !matches!(self.in_flight, Some(Op::Union)) {
                    bad.push(format!("client {id}: acknowledged DEL of the union undone"));
                }
                self.union = true;
            }
            n => bad.push(format!("client {id}: SUNIONSTORE torn: {n} members")),
        }
        // MOVE: in exactly one database.
        let mv = self.k("mv");
        let mut exists = |db: &[u8]| {
            c.cmd(&[b"SELECT", db]).unwrap();
            let e = c.cmd(&[b"EXISTS", mv.as_bytes()]).unwrap() == Frame::Integer(1);
            c.cmd(&[b"SELECT", b"0"]).unwrap();
            e
        };
        match (exists(b"0"), exists(b"1")) {
            (true, false) | (false, true) => {
                let now = if exists(b"0") { 0 } else { 1 };
                if now != self.mv_db && self.in_flight != Some(Op::Move) {
                    bad.push(format!("client {id}: acknowledged MOVE undone"));
                }
                self.mv_db = now;
            }
            (a, b) => bad.push(format!("client {id}: MOVE torn: in db 0 {a}, in db 1 {b}")),
        }
        self.in_flight = None;
        bad
    }
}

fn run_mode(spec: &str, rounds: usize, clients: usize, seconds: f64, seed: u64) -> u64 {
    let (mode, file_size) = spec.split_once(':').unwrap_or((spec, "32mb"));
    let dir = tempfile::tempdir().unwrap();
    let mut all: Vec<Client> = (0..clients).map(|c| Client::new(c, seed)).collect();
    let mut killer = Rng(seed ^ 0x0bad_cafe | 1);
    let mut problems = Vec::new();
    let mut stamps = 0;
    for round in 0..rounds {
        let server = Server::start(dir.path(), mode, file_size);
        let addr = server.addr;
        let handles: Vec<_> = all
            .drain(..)
            .map(|mut cl| {
                std::thread::spawn(move || {
                    if let Ok(mut conn) = Conn::connect(addr) {
                        if cl.ready || cl.setup(&mut conn).is_ok() {
                            while cl.step(&mut conn).is_ok() {}
                        }
                    }
                    cl
                })
            })
            .collect();
        let ms = (seconds * 1000.0) as u64;
        let wait = ms / 2 + killer.below(ms / 2 + 1);
        std::thread::sleep(Duration::from_millis(wait));
        server.kill();
        all = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let server = Server::start(dir.path(), mode, file_size);
        let mut conn = Conn::connect(server.addr).unwrap();
        let before = problems.len();
        for cl in &mut all {
            problems.extend(cl.verify(&mut conn));
            stamps = stamps.max(cl.stamp);
        }
        println!(
            "appendfsync {spec} round {}: killed after {wait} ms, {} problems",
            round + 1,
            problems.len() - before
        );
        server.kill();
    }
    check_clean(dir.path(), &mut problems);
    assert!(problems.is_empty(), "appendfsync {spec}: {problems:#?}");
    stamps
}

#[test]
fn sigkill_never_tears_an_exec_mset_rename_or_store_in_any_appendfsync_mode() {
    let k = Knobs::from_env("BASALT_BATCH_CRASH_ROUNDS");
    println!(
        "batch crash harness: seed {}, {} rounds x {} clients x {} s per mode",
        k.seed, k.rounds, k.clients, k.seconds
    );
    let mut steps = 0;
    for mode in &k.modes {
        steps += run_mode(mode, k.rounds, k.clients, k.seconds, k.seed);
    }
    assert!(steps > 0, "no batch was written");
}

#[test]
fn writes_to_several_databases_survive_sigkill_once_acknowledged() {
    // MOVE and a transaction over two databases are decided by one token
    // in the batch log: acknowledged, they survive SIGKILL whole.
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "everysec", "32mb");
    let mut c = Conn::connect(server.addr).unwrap();
    let ok = Frame::Simple("OK".into());
    assert_eq!(c.cmd(&[b"SET", b"moved", b"v"]).unwrap(), ok);
    assert_eq!(
        c.cmd(&[b"MOVE", b"moved", b"2"]).unwrap(),
        Frame::Integer(1)
    );
    assert_eq!(c.cmd(&[b"MULTI"]).unwrap(), ok);
    for cmd in [
        &[&b"SET"[..], b"a", b"1"][..],
        &[b"SELECT", b"3"],
        &[b"SET", b"b", b"2"],
    ] {
        assert_eq!(c.cmd(cmd).unwrap(), Frame::Simple("QUEUED".into()));
    }
    assert!(matches!(c.cmd(&[b"EXEC"]).unwrap(), Frame::Array(_)));
    server.kill();
    let server = Server::start(dir.path(), "everysec", "32mb");
    let mut c = Conn::connect(server.addr).unwrap();
    let get = |c: &mut Conn, db: &[u8], key: &[u8]| {
        c.cmd(&[b"SELECT", db]).unwrap();
        c.cmd(&[b"GET", key]).unwrap()
    };
    let bulk = |s: &str| Frame::Bulk(s.as_bytes().to_vec());
    assert_eq!(get(&mut c, b"0", b"moved"), Frame::NullBulk);
    assert_eq!(get(&mut c, b"2", b"moved"), bulk("v"));
    assert_eq!(get(&mut c, b"0", b"a"), bulk("1"));
    assert_eq!(get(&mut c, b"3", b"b"), bulk("2"));
    // The log holds the two tokens the databases still need.
    let log = std::fs::read(dir.path().join("BATCHES")).unwrap();
    assert_eq!(log.len(), 12 + 2 * 12, "header and two tokens");
    server.kill();
}
