//! Crash harness: clients write while the real `basalt` binary is killed
//! with SIGKILL at a random moment; after a restart on the same directory
//! every acknowledged effect must be there, and nothing else.
//!
//! Each client owns its keys (strings set and deleted, INCR counters,
//! hashes with HSET/HDEL, lists with RPUSH/LPOP) and talks over one
//! connection, one command at a time, so it knows for each key the state
//! its last acknowledged command left and, when the kill came, the one
//! command still in flight, whose effect may or may not have landed. After
//! the restart each key must show the acknowledged state or, for the key
//! of the in-flight command, the state after it. Anything else is counted:
//! an acknowledged write missing is *lost*, a deleted key, field or popped
//! element back is *resurrected*, a value nobody wrote is a *phantom*.
//!
//! SIGKILL ends the process, not the machine: the page cache survives, and
//! the server acknowledges a write only once it reached the OS, so no
//! appendfsync mode may lose anything here (power loss is another matter:
//! see the durability section of docs/architecture.md). Every mode runs.
//!
//! A short run is part of `cargo test`. A long one:
//! `BASALT_CRASH_ROUNDS=50 cargo test --release -p basalt-server --test crash -- --nocapture`
//! (also `BASALT_CRASH_CLIENTS`, `BASALT_CRASH_SECONDS` per round,
//! `BASALT_CRASH_MODES=always,everysec,no,everysec:16kb`; a mode may name a `--data-file-size`, `BASALT_CRASH_SEED`).

mod common;

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use basalt_resp::Frame;
use common::binary::{check_clean, Conn, Knobs, Rng, Server};

const STRINGS: u64 = 24;
const COUNTERS: u64 = 3;
const HASHES: u64 = 3;
const FIELDS: u64 = 8;
const LISTS: u64 = 3;

/// A write whose reply never came.
#[derive(Debug, Clone)]
enum Op {
    Set(String, String),
    Del(String),
    Incr(String),
    HSet(String, String, String),
    HDel(String, String),
    RPush(String, String),
    LPop(String),
}

/// Tallies of one verification.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    acked: u64,
    lost: u64,
    resurrected: u64,
    phantom: u64,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, o: Tally) {
        self.acked += o.acked;
        self.lost += o.lost;
        self.resurrected += o.resurrected;
        self.phantom += o.phantom;
    }
}

/// What one client knows about its keys.
#[derive(Debug, Clone)]
struct Model {
    id: usize,
    rng: Rng,
    next_value: u64,
    /// Acknowledged state of each string key (None = deleted/never set).
    strings: HashMap<String, Option<String>>,
    counters: HashMap<String, i64>,
    /// Acknowledged fields of each hash.
    hashes: HashMap<String, HashMap<String, String>>,
    lists: HashMap<String, VecDeque<String>>,
    /// Every value ever written by this client: tells lost from phantom.
    written: HashSet<String>,
    inflight: Option<Op>,
    acked: u64,
    /// Problems seen in replies while writing.
    errors: Vec<String>,
}

impl Model {
    fn new(id: usize, seed: u64) -> Model {
        Model {
            id,
            rng: Rng(seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
            next_value: 0,
            strings: HashMap::new(),
            counters: HashMap::new(),
            hashes: HashMap::new(),
            lists: HashMap::new(),
            written: HashSet::new(),
            inflight: None,
            acked: 0,
            errors: Vec::new(),
        }
    }

    fn value(&mut self) -> String {
        self.next_value += 1;
        let v = format!("c{}-v{}", self.id, self.next_value);
        self.written.insert(v.clone());
        v
    }

    fn pick(&mut self) -> Op {
        let c = self.id;
        let r = self.rng.below(100);
        match r {
            0..=39 => {
                let k = format!("c{c}:s{}", self.rng.below(STRINGS));
                let v = self.value();
                Op::Set(k, v)
            }
            40..=49 => Op::Del(format!("c{c}:s{}", self.rng.below(STRINGS))),
            50..=64 => Op::Incr(format!("c{c}:n{}", self.rng.below(COUNTERS))),
            65..=76 => {
                let k = format!("c{c}:h{}", self.rng.below(HASHES));
                let f = format!("f{}", self.rng.below(FIELDS));
                let v = self.value();
                Op::HSet(k, f, v)
            }
            77..=82 => Op::HDel(
                format!("c{c}:h{}", self.rng.below(HASHES)),
                format!("f{}", self.rng.below(FIELDS)),
            ),
            83..=93 => {
                let k = format!("c{c}:l{}", self.rng.below(LISTS));
                let v = self.value();
                Op::RPush(k, v)
            }
            _ => Op::LPop(format!("c{c}:l{}", self.rng.below(LISTS))),
        }
    }

    /// Sends one write and records its acknowledged effect; `Err` when the
    /// connection broke (the op stays in flight).
    fn step(&mut self, conn: &mut Conn) -> std::io::Result<()> {
        let op = self.pick();
        self.inflight = Some(op.clone());
        let b = |s: &String| s.as_bytes().to_vec();
        let args: Vec<Vec<u8>> = match &op {
            Op::Set(k, v) => vec![b"SET".to_vec(), b(k), b(v)],
            Op::Del(k) => vec![b"DEL".to_vec(), b(k)],
            Op::Incr(k) => vec![b"INCR".to_vec(), b(k)],
            Op::HSet(k, f, v) => vec![b"HSET".to_vec(), b(k), b(f), b(v)],
            Op::HDel(k, f) => vec![b"HDEL".to_vec(), b(k), b(f)],
            Op::RPush(k, v) => vec![b"RPUSH".to_vec(), b(k), b(v)],
            Op::LPop(k) => vec![b"LPOP".to_vec(), b(k)],
        };
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let reply = conn.cmd(&refs)?;
        self.inflight = None;
        self.acked += 1;
        let mut bad = |what: String| self.errors.push(what);
        match op {
            Op::Set(k, v) => {
                if reply != Frame::Simple("OK".into()) {
                    bad(format!("SET {k}: {reply:?}"));
                }
                self.strings.insert(k, Some(v));
            }
            Op::Del(k) => {
                let had = self.strings.get(&k).is_some_and(Option::is_some);
                if reply != Frame::Integer(had as i64) {
                    bad(format!("DEL {k}: {reply:?}, model had {had}"));
                }
                self.strings.insert(k, None);
            }
            Op::Incr(k) => {
                let want = self.counters.get(&k).copied().unwrap_or(0) + 1;
                if reply != Frame::Integer(want) {
                    bad(format!("INCR {k}: {reply:?}, model {want}"));
                }
                self.counters.insert(k, want);
            }
            Op::HSet(k, f, v) => {
                let h = self.hashes.entry(k.clone()).or_default();
                let new = !h.contains_key(&f);
                if reply != Frame::Integer(new as i64) {
                    bad(format!("HSET {k} {f}: {reply:?}, model new={new}"));
                }
                h.insert(f, v);
            }
            Op::HDel(k, f) => {
                let had = self
                    .hashes
                    .get_mut(&k)
                    .is_some_and(|h| h.remove(&f).is_some());
                if reply != Frame::Integer(had as i64) {
                    bad(format!("HDEL {k} {f}: {reply:?}, model had {had}"));
                }
            }
            Op::RPush(k, v) => {
                let l = self.lists.entry(k.clone()).or_default();
                l.push_back(v);
                if reply != Frame::Integer(l.len() as i64) {
                    bad(format!("RPUSH {k}: {reply:?}, model length {}", l.len()));
                }
            }
            Op::LPop(k) => {
                let front = self.lists.entry(k.clone()).or_default().pop_front();
                let want = match front {
                    Some(v) => Frame::Bulk(v.into_bytes()),
                    None => Frame::NullBulk,
                };
                if reply != want {
                    bad(format!("LPOP {k}: {reply:?}, model {want:?}"));
                }
            }
        }
        Ok(())
    }

    fn classify_string(&self, acked: &Option<String>, seen: &Option<String>, t: &mut Tally) {
        match (acked, seen) {
            (Some(_), None) => t.lost += 1,
            (None, Some(v)) if self.written.contains(v) => t.resurrected += 1,
            (Some(_), Some(v)) if self.written.contains(v) => t.lost += 1,
            (_, Some(_)) => t.phantom += 1,
            (None, None) => {}
        }
    }

    /// Reads every key back after a restart, counts what disagrees with
    /// the acknowledged state (allowing the in-flight op either way), then
    /// adopts what the server shows, so the next round starts from it.
    fn verify(&mut self, conn: &mut Conn, problems: &mut Vec<String>) -> Tally {
        let mut t = Tally::default();
        let inflight = self.inflight.take();
        let c = self.id;
        for i in 0..STRINGS {
            let k = format!("c{c}:s{i}");
            let seen = match conn.cmd(&[b"GET", k.as_bytes()]).unwrap() {
                Frame::Bulk(v) => Some(String::from_utf8(v.to_vec()).unwrap()),
                Frame::NullBulk => None,
                other => panic!("GET {k}: {other:?}"),
            };
            let acked = self.strings.get(&k).cloned().flatten();
            let after = match &inflight {
                Some(Op::Set(ik, v)) if *ik == k => Some(Some(v.clone())),
                Some(Op::Del(ik)) if *ik == k => Some(None),
                _ => None,
            };
            if seen != acked && after.as_ref() != Some(&seen) {
                self.classify_string(&acked, &seen, &mut t);
                problems.push(format!(
                    "{k}: acked {acked:?}, in flight {after:?}, seen {seen:?}"
                ));
            }
            self.strings.insert(k, seen);
        }
        for i in 0..COUNTERS {
            let k = format!("c{c}:n{i}");
            let seen: i64 = match conn.cmd(&[b"GET", k.as_bytes()]).unwrap() {
                Frame::Bulk(v) => std::str::from_utf8(&v).unwrap().parse().unwrap(),
                Frame::NullBulk => 0,
                other => panic!("GET {k}: {other:?}"),
            };
            let acked = self.counters.get(&k).copied().unwrap_or(0);
            let extra = matches!(&inflight, Some(Op::Incr(ik)) if *ik == k) as i64;
            if seen < acked {
                t.lost += 1;
                problems.push(format!("{k}: acked {acked}, seen {seen}"));
            } else if seen > acked + extra {
                t.phantom += 1;
                problems.push(format!(
                    "{k}: acked {acked} (+{extra} in flight), seen {seen}"
                ));
            }
            self.counters.insert(k, seen);
        }
        for i in 0..HASHES {
            let k = format!("c{c}:h{i}");
            let seen: HashMap<String, String> = match conn.cmd(&[b"HGETALL", k.as_bytes()]).unwrap()
            {
                Frame::Array(items) => items
                    .chunks(2)
                    .map(|p| match (&p[0], &p[1]) {
                        (Frame::Bulk(f), Frame::Bulk(v)) => (
                            String::from_utf8(f.to_vec()).unwrap(),
                            String::from_utf8(v.to_vec()).unwrap(),
                        ),
                        other => panic!("HGETALL {k}: {other:?}"),
                    })
                    .collect(),
                other => panic!("HGETALL {k}: {other:?}"),
            };
            let acked = self.hashes.get(&k).cloned().unwrap_or_default();
            for f in 0..FIELDS {
                let f = format!("f{f}");
                let (a, s) = (acked.get(&f).cloned(), seen.get(&f).cloned());
                let after = match &inflight {
                    Some(Op::HSet(ik, iff, v)) if *ik == k && *iff == f => Some(Some(v.clone())),
                    Some(Op::HDel(ik, iff)) if *ik == k && *iff == f => Some(None),
                    _ => None,
                };
                if s != a && after.as_ref() != Some(&s) {
                    self.classify_string(&a, &s, &mut t);
                    problems.push(format!(
                        "{k} {f}: acked {a:?}, in flight {after:?}, seen {s:?}"
                    ));
                }
            }
            self.hashes.insert(k, seen);
        }
        for i in 0..LISTS {
            let k = format!("c{c}:l{i}");
            let seen: VecDeque<String> =
                match conn.cmd(&[b"LRANGE", k.as_bytes(), b"0", b"-1"]).unwrap() {
                    Frame::Array(items) => items
                        .into_iter()
                        .map(|f| match f {
                            Frame::Bulk(v) => String::from_utf8(v.to_vec()).unwrap(),
                            other => panic!("LRANGE {k}: {other:?}"),
                        })
                        .collect(),
                    other => panic!("LRANGE {k}: {other:?}"),
                };
            let acked = self.lists.get(&k).cloned().unwrap_or_default();
            let mut after = acked.clone();
            match &inflight {
                Some(Op::RPush(ik, v)) if *ik == k => after.push_back(v.clone()),
                Some(Op::LPop(ik)) if *ik == k => {
                    after.pop_front();
                }
                _ => {}
            }
            if seen != acked && seen != after {
                if seen.len() < acked.len() || acked.iter().any(|v| !seen.contains(v)) {
                    t.lost += 1;
                }
                if seen
                    .iter()
                    .any(|v| !acked.contains(v) && self.written.contains(v))
                {
                    t.resurrected += 1;
                }
                if seen.iter().any(|v| !self.written.contains(v)) {
                    t.phantom += 1;
                }
                problems.push(format!("{k}: acked {acked:?}, seen {seen:?}"));
            }
            self.lists.insert(k, seen);
        }
        t.acked = std::mem::take(&mut self.acked);
        t
    }
}

/// One appendfsync mode, optionally with a data file size: `everysec`
/// (the server's 32 MiB files, which this workload never fills) or
/// `everysec:16kb` (files sealed every few hundred writes, so the kills
/// also land in file rotation, hint writing and compaction).
fn run_mode(spec: &str, rounds: usize, clients: usize, seconds: f64, seed: u64) -> Tally {
    let (mode, file_size) = spec.split_once(':').unwrap_or((spec, "32mb"));
    let dir = tempfile::tempdir().unwrap();
    let mut models: Vec<Model> = (0..clients).map(|c| Model::new(c, seed)).collect();
    let mut killer = Rng(seed ^ 0xdead_beef | 1);
    let mut total = Tally::default();
    let mut problems = Vec::new();
    for round in 0..rounds {
        let server = Server::start(dir.path(), mode, file_size);
        let addr = server.addr;
        let handles: Vec<_> = models
            .drain(..)
            .map(|mut m| {
                std::thread::spawn(move || {
                    if let Ok(mut conn) = Conn::connect(addr) {
                        // Until the server dies under the connection.
                        while m.step(&mut conn).is_ok() {}
                    }
                    m
                })
            })
            .collect();
        // A random moment in the second half of the round.
        let ms = (seconds * 1000.0) as u64;
        let wait = ms / 2 + killer.below(ms / 2 + 1);
        std::thread::sleep(Duration::from_millis(wait));
        server.kill();
        models = handles.into_iter().map(|h| h.join().unwrap()).collect();

        let server = Server::start(dir.path(), mode, file_size);
        let mut conn = Conn::connect(server.addr).unwrap();
        let mut round_tally = Tally::default();
        for m in &mut models {
            round_tally += m.verify(&mut conn, &mut problems);
            problems.extend(m.errors.drain(..).map(|e| format!("client {}: {e}", m.id)));
        }
        println!(
            "appendfsync {spec} round {}: killed after {wait} ms, {} writes acknowledged, {} lost, {} resurrected, {} phantom",
            round + 1,
            round_tally.acked,
            round_tally.lost,
            round_tally.resurrected,
            round_tally.phantom
        );
        total += round_tally;
        server.kill();
    }
    // What the last kill left must check clean (a torn tail is only a note).
    check_clean(dir.path(), &mut problems);
    assert!(problems.is_empty(), "appendfsync {spec}: {problems:#?}");
    total
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_write_in_any_appendfsync_mode() {
    let Knobs {
        rounds,
        clients,
        seconds,
        modes,
        seed,
    } = Knobs::from_env("BASALT_CRASH_ROUNDS");
    println!("crash harness: seed {seed} (BASALT_CRASH_SEED), {rounds} rounds x {clients} clients x {seconds} s per mode");
    let started = Instant::now();
    let mut grand = Tally::default();
    for mode in &modes {
        let t = run_mode(mode, rounds, clients, seconds, seed);
        println!(
            "appendfsync {mode}: {rounds} rounds, {} writes acknowledged, {} lost, {} resurrected, {} phantom",
            t.acked, t.lost, t.resurrected, t.phantom
        );
        grand += t;
    }
    println!(
        "crash harness: {} writes acknowledged, {} lost, {} resurrected, {} phantom in {:.1} s",
        grand.acked,
        grand.lost,
        grand.resurrected,
        grand.phantom,
        started.elapsed().as_secs_f64()
    );
    assert!(grand.acked > 0, "no write was acknowledged");
    assert_eq!((grand.lost, grand.resurrected, grand.phantom), (0, 0, 0));
}
