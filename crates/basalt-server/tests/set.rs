//! Set commands through the `redis` crate and raw RESP: Redis 7.0's
//! replies and errors, the generic key commands on sets, sets surviving
//! restart and compaction, and a property test of random hash and set
//! operations against an in-memory model across restarts.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashSet};

use basalt_resp::Frame;
use common::{bulk, err, ok, TestServer};
use proptest::prelude::*;
use redis::Commands;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn arr(items: Vec<Frame>) -> Frame {
    Frame::Array(items)
}

fn members(c: &mut redis::Connection, key: &str) -> BTreeSet<String> {
    c.smembers(key).unwrap()
}

fn set_of(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The bulk strings of an array or set reply, sorted.
fn sorted(f: Frame) -> Vec<String> {
    let items = match f {
        Frame::Array(i) | Frame::Set(i) => i,
        other => panic!("{other:?}"),
    };
    let mut out: Vec<String> = items
        .into_iter()
        .map(|i| match i {
            Frame::Bulk(b) => String::from_utf8(b).unwrap(),
            other => panic!("{other:?}"),
        })
        .collect();
    out.sort();
    out
}

#[test]
fn set_commands_happy_paths() {
    let s = TestServer::start();
    let mut c = s.client();
    let n: i64 = c.sadd("s", &["a", "b", "c", "a"]).unwrap();
    assert_eq!(n, 3);
    let n: i64 = c.sadd("s", "a").unwrap();
    assert_eq!(n, 0);
    assert_eq!(members(&mut c, "s"), set_of(&["a", "b", "c"]));
    assert!(members(&mut c, "nokey").is_empty());
    let n: i64 = c.scard("s").unwrap();
    assert_eq!(n, 3);
    let n: i64 = c.scard("nokey").unwrap();
    assert_eq!(n, 0);
    assert!(c.sismember::<_, _, bool>("s", "a").unwrap());
    assert!(!c.sismember::<_, _, bool>("s", "z").unwrap());
    assert!(!c.sismember::<_, _, bool>("nokey", "z").unwrap());
    let m: Vec<i64> = redis::cmd("SMISMEMBER")
        .arg("s")
        .arg("a")
        .arg("z")
        .arg("c")
        .query(&mut c)
        .unwrap();
    assert_eq!(m, [1, 0, 1]);
    let m: Vec<i64> = redis::cmd("SMISMEMBER")
        .arg("nokey")
        .arg("a")
        .query(&mut c)
        .unwrap();
    assert_eq!(m, [0]);
    let n: i64 = c.srem("s", &["a", "z"]).unwrap();
    assert_eq!(n, 1);
    let n: i64 = c.srem("nokey", "a").unwrap();
    assert_eq!(n, 0);
    // SMOVE
    let _: i64 = c.sadd("dst", "x").unwrap();
    let n: i64 = c.smove("s", "dst", "b").unwrap();
    assert_eq!(n, 1);
    let n: i64 = c.smove("s", "dst", "nope").unwrap();
    assert_eq!(n, 0);
    let n: i64 = c.smove("nokey", "dst", "x").unwrap();
    assert_eq!(n, 0);
    let n: i64 = c.smove("dst", "dst", "x").unwrap();
    assert_eq!(n, 1);
    let n: i64 = c.smove("dst", "dst", "nope").unwrap();
    assert_eq!(n, 0);
    assert_eq!(members(&mut c, "s"), set_of(&["c"]));
    assert_eq!(members(&mut c, "dst"), set_of(&["b", "x"]));
    // Moving the last member removes the source and creates the target.
    let n: i64 = c.smove("s", "fresh", "c").unwrap();
    assert_eq!(n, 1);
    let e: bool = c.exists("s").unwrap();
    assert!(!e);
    assert_eq!(members(&mut c, "fresh"), set_of(&["c"]));
}

#[test]
fn set_algebra_and_store_variants() {
    let s = TestServer::start();
    let mut c = s.client();
    let _: i64 = c.sadd("a", &["1", "2", "3", "4"]).unwrap();
    let _: i64 = c.sadd("b", &["3", "4", "5"]).unwrap();
    let _: i64 = c.sadd("c", &["4", "5", "6"]).unwrap();
    let inter: BTreeSet<String> = c.sinter(&["a", "b", "c"]).unwrap();
    assert_eq!(inter, set_of(&["4"]));
    let inter: BTreeSet<String> = c.sinter(&["a", "nokey"]).unwrap();
    assert!(inter.is_empty());
    let union: BTreeSet<String> = c.sunion(&["a", "b", "nokey"]).unwrap();
    assert_eq!(union, set_of(&["1", "2", "3", "4", "5"]));
    let diff: BTreeSet<String> = c.sdiff(&["a", "b", "nokey"]).unwrap();
    assert_eq!(diff, set_of(&["1", "2"]));
    let diff: BTreeSet<String> = c.sdiff(&["nokey", "a"]).unwrap();
    assert!(diff.is_empty());
    let n: i64 = c.sinterstore("dst", &["a", "b"]).unwrap();
    assert_eq!(n, 2);
    assert_eq!(members(&mut c, "dst"), set_of(&["3", "4"]));
    let n: i64 = c.sunionstore("dst", &["b", "c"]).unwrap();
    assert_eq!(n, 4);
    assert_eq!(members(&mut c, "dst"), set_of(&["3", "4", "5", "6"]));
    // The destination may be a source.
    let n: i64 = c.sdiffstore("dst", &["dst", "a"]).unwrap();
    assert_eq!(n, 2);
    assert_eq!(members(&mut c, "dst"), set_of(&["5", "6"]));
    // An empty result removes the destination, whatever it held.
    let _: () = c.set("str", "x").unwrap();
    let n: i64 = c.sinterstore("str", &["a", "nokey"]).unwrap();
    assert_eq!(n, 0);
    let e: bool = c.exists("str").unwrap();
    assert!(!e);
    let _: () = c.set("str", "x").unwrap();
    let n: i64 = c.sunionstore("str", &["a"]).unwrap();
    assert_eq!(n, 4);
    let t: String = redis::cmd("TYPE").arg("str").query(&mut c).unwrap();
    assert_eq!(t, "set");

    let mut r = s.raw();
    assert_eq!(r.cmd(&["SINTERCARD", "2", "a", "b"]), int(2));
    assert_eq!(r.cmd(&["SINTERCARD", "1", "a", "LIMIT", "3"]), int(3));
    assert_eq!(r.cmd(&["SINTERCARD", "1", "a", "LIMIT", "0"]), int(4));
    assert_eq!(r.cmd(&["SINTERCARD", "2", "a", "nokey"]), int(0));
    assert_eq!(
        r.cmd(&["SINTERCARD", "0", "a"]),
        err("ERR numkeys should be greater than 0")
    );
    assert_eq!(
        r.cmd(&["SINTERCARD", "x", "a"]),
        err("ERR numkeys should be greater than 0")
    );
    assert_eq!(
        r.cmd(&["SINTERCARD", "3", "a", "b"]),
        err("ERR Number of keys can't be greater than number of args")
    );
    assert_eq!(
        r.cmd(&["SINTERCARD", "1", "a", "LIMIT", "-1"]),
        err("ERR LIMIT can't be negative")
    );
    assert_eq!(
        r.cmd(&["SINTERCARD", "1", "a", "FOO", "1"]),
        err("ERR syntax error")
    );
    assert_eq!(r.cmd(&["HSET", "h", "f", "v"]), int(1));
    for cmd in [
        vec!["SINTER", "a", "h"],
        vec!["SUNION", "a", "h"],
        vec!["SDIFF", "a", "h"],
        vec!["SINTERSTORE", "d", "a", "h"],
        vec!["SUNIONSTORE", "d", "a", "h"],
        vec!["SDIFFSTORE", "d", "a", "h"],
        vec!["SINTERCARD", "2", "a", "h"],
        vec!["SMOVE", "a", "h", "1"],
        vec!["SMOVE", "h", "a", "1"],
    ] {
        assert_eq!(r.cmd(&cmd), err(WRONGTYPE), "{cmd:?}");
    }
    // Redis 7.0 checks every key's type, also after a missing key.
    assert_eq!(r.cmd(&["SINTER", "nokey", "h"]), err(WRONGTYPE));
    assert_eq!(r.cmd(&["SINTERCARD", "2", "nokey", "h"]), err(WRONGTYPE));
    assert_eq!(r.cmd(&["SMOVE", "nokey", "h", "1"]), int(0));
    // RESP3: set replies are sets.
    let _ = r.cmd(&["HELLO", "3"]);
    match r.cmd(&["SUNION", "a", "b"]) {
        Frame::Set(items) => assert_eq!(items.len(), 5),
        other => panic!("{other:?}"),
    }
    assert_eq!(r.cmd(&["SMEMBERS", "nokey"]), Frame::Set(vec![]));
}

#[test]
fn set_errors_match_redis() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SET", "str", "x"]), ok());
    assert_eq!(r.cmd(&["HSET", "h", "f", "v"]), int(1));
    for key in ["str", "h"] {
        for cmd in [
            vec!["SADD", key, "m"],
            vec!["SREM", key, "m"],
            vec!["SISMEMBER", key, "m"],
            vec!["SMISMEMBER", key, "m"],
            vec!["SMEMBERS", key],
            vec!["SCARD", key],
            vec!["SPOP", key],
            vec!["SPOP", key, "2"],
            vec!["SRANDMEMBER", key],
            vec!["SRANDMEMBER", key, "2"],
            vec!["SSCAN", key, "0"],
        ] {
            assert_eq!(r.cmd(&cmd), err(WRONGTYPE), "{cmd:?}");
        }
    }
    assert_eq!(r.cmd(&["SADD", "s", "m"]), int(1));
    assert_eq!(r.cmd(&["GET", "s"]), err(WRONGTYPE));
    assert_eq!(r.cmd(&["HGET", "s", "m"]), err(WRONGTYPE));
    for (cmd, name) in [
        (vec!["SADD", "s"], "sadd"),
        (vec!["SREM", "s"], "srem"),
        (vec!["SISMEMBER", "s"], "sismember"),
        (vec!["SMISMEMBER", "s"], "smismember"),
        (vec!["SCARD"], "scard"),
        (vec!["SPOP"], "spop"),
        (vec!["SMOVE", "a", "b"], "smove"),
        (vec!["SINTERSTORE", "d"], "sinterstore"),
        (vec!["SINTERCARD", "1"], "sintercard"),
        (vec!["SSCAN", "s"], "sscan"),
    ] {
        assert_eq!(
            r.cmd(&cmd),
            err(&format!(
                "ERR wrong number of arguments for '{name}' command"
            )),
            "{cmd:?}"
        );
    }
    assert_eq!(
        r.cmd(&["SPOP", "s", "-1"]),
        err("ERR value is out of range, must be positive")
    );
    assert_eq!(
        r.cmd(&["SPOP", "nokey", "x"]),
        err("ERR value is out of range, must be positive")
    );
    assert_eq!(r.cmd(&["SPOP", "s", "1", "2"]), err("ERR syntax error"));
    assert_eq!(
        r.cmd(&["SRANDMEMBER", "s", "1", "2"]),
        err("ERR syntax error")
    );
    assert_eq!(
        r.cmd(&["SRANDMEMBER", "s", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        r.cmd(&["SRANDMEMBER", "s", "-9223372036854775808"]),
        err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
    );
    assert_eq!(r.cmd(&["SSCAN", "s", "x"]), err("ERR invalid cursor"));
    assert_eq!(
        r.cmd(&["SSCAN", "s", "0", "COUNT", "0"]),
        err("ERR syntax error")
    );
    assert_eq!(
        r.cmd(&["SSCAN", "s", "0", "MATCH"]),
        err("ERR syntax error")
    );
    assert_eq!(r.cmd(&["SCARD", "s"]), int(1));
}

#[test]
fn spop_and_srandmember() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SPOP", "nokey"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["SPOP", "nokey", "2"]), arr(vec![]));
    assert_eq!(r.cmd(&["SRANDMEMBER", "nokey"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["SRANDMEMBER", "nokey", "2"]), arr(vec![]));
    let all: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
    let mut args = vec!["SADD", "s"];
    args.extend(all.iter().map(|s| s.as_str()));
    assert_eq!(r.cmd(&args), int(20));
    let universe: HashSet<String> = all.iter().cloned().collect();

    let Frame::Bulk(one) = r.cmd(&["SRANDMEMBER", "s"]) else {
        panic!()
    };
    assert!(universe.contains(&String::from_utf8(one).unwrap()));
    let five = sorted(r.cmd(&["SRANDMEMBER", "s", "5"]));
    assert_eq!(five.len(), 5);
    assert_eq!(five.iter().collect::<HashSet<_>>().len(), 5, "distinct");
    assert!(five.iter().all(|m| universe.contains(m)));
    assert_eq!(sorted(r.cmd(&["SRANDMEMBER", "s", "100"])).len(), 20);
    assert_eq!(r.cmd(&["SRANDMEMBER", "s", "0"]), arr(vec![]));
    let many = sorted(r.cmd(&["SRANDMEMBER", "s", "-50"]));
    assert_eq!(many.len(), 50);
    assert!(many.iter().all(|m| universe.contains(m)));
    assert_eq!(
        r.cmd(&["SCARD", "s"]),
        int(20),
        "SRANDMEMBER removes nothing"
    );

    let mut left = universe.clone();
    let Frame::Bulk(p) = r.cmd(&["SPOP", "s"]) else {
        panic!()
    };
    assert!(left.remove(&String::from_utf8(p).unwrap()));
    let popped = sorted(r.cmd(&["SPOP", "s", "7"]));
    assert_eq!(popped.len(), 7);
    for m in &popped {
        assert!(left.remove(m), "{m} popped twice or never there");
    }
    assert_eq!(r.cmd(&["SPOP", "s", "0"]), arr(vec![]));
    assert_eq!(r.cmd(&["SCARD", "s"]), int(12));
    let rest = sorted(r.cmd(&["SPOP", "s", "100"]));
    assert_eq!(rest.into_iter().collect::<HashSet<_>>(), left);
    assert_eq!(
        r.cmd(&["EXISTS", "s"]),
        int(0),
        "popping everything removes the key"
    );
    // RESP3: SPOP with a count is a set, SRANDMEMBER with a count an array.
    assert_eq!(r.cmd(&["SADD", "s", "a", "b"]), int(2));
    let _ = r.cmd(&["HELLO", "3"]);
    assert!(matches!(r.cmd(&["SRANDMEMBER", "s", "2"]), Frame::Array(_)));
    assert!(matches!(r.cmd(&["SPOP", "s", "1"]), Frame::Set(_)));
}

#[test]
fn spop_drains_a_big_set_without_repeats() {
    let s = TestServer::start();
    let mut c = s.client();
    let members: Vec<String> = (0..20_000).map(|i| format!("member:{i}")).collect();
    for chunk in members.chunks(1000) {
        let _: i64 = c.sadd("big", chunk).unwrap();
    }
    let mut seen = HashSet::new();
    let mut pipe = redis::pipe();
    for _ in 0..5_000 {
        pipe.cmd("SPOP").arg("big");
    }
    let popped: Vec<String> = pipe.query(&mut c).unwrap();
    for p in popped {
        assert!(seen.insert(p));
    }
    let n: i64 = c.scard("big").unwrap();
    assert_eq!(n, 15_000);
    let rest: Vec<String> = c.smembers("big").unwrap();
    for m in rest {
        assert!(seen.insert(m));
    }
    assert_eq!(seen.len(), 20_000);
}

#[test]
fn sscan_intsets_and_big_sets() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(
        r.cmd(&["SSCAN", "nokey", "0"]),
        arr(vec![bulk("0"), arr(vec![])])
    );
    assert_eq!(r.cmd(&["SADD", "ints", "1", "2", "3"]), int(3));
    assert_eq!(
        r.cmd(&["SSCAN", "ints", "0", "MATCH", "2"]),
        arr(vec![bulk("0"), arr(vec![bulk("2")])])
    );
    let mut c = s.client();
    let all: Vec<String> = (0..700).map(|i| format!("m{i}")).collect();
    let _: i64 = c.sadd("big", &all).unwrap();
    let mut cursor = "0".to_string();
    let mut seen = HashSet::new();
    let mut calls = 0;
    loop {
        let Frame::Array(mut reply) = r.cmd(&["SSCAN", "big", &cursor]) else {
            panic!()
        };
        calls += 1;
        assert!(calls < 1000);
        for m in sorted(reply.pop().unwrap()) {
            seen.insert(m);
        }
        let Frame::Bulk(next) = reply.pop().unwrap() else {
            panic!()
        };
        cursor = String::from_utf8(next).unwrap();
        if cursor == "0" {
            break;
        }
    }
    assert!(calls > 5);
    assert_eq!(seen, all.into_iter().collect::<HashSet<_>>());
}

#[test]
fn generic_key_commands_on_a_set() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SADD", "s", "1", "2", "3"]), int(3));
    assert_eq!(r.cmd(&["TYPE", "s"]), Frame::Simple(b"set".to_vec()));
    assert_eq!(r.cmd(&["OBJECT", "ENCODING", "s"]), bulk("intset"));
    assert_eq!(r.cmd(&["SADD", "s", "x"]), int(1));
    assert_eq!(r.cmd(&["OBJECT", "ENCODING", "s"]), bulk("hashtable"));
    assert_eq!(r.cmd(&["SREM", "s", "x"]), int(1));
    let mut args = vec!["SADD".to_string(), "wide".to_string()];
    args.extend((0..513).map(|i| i.to_string()));
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    assert_eq!(r.cmd(&args), int(513));
    assert_eq!(r.cmd(&["OBJECT", "ENCODING", "wide"]), bulk("hashtable"));
    assert_eq!(r.cmd(&["PEXPIRE", "s", "100000"]), int(1));
    assert_eq!(r.cmd(&["RENAME", "s", "s2"]), ok());
    assert!(matches!(r.cmd(&["PTTL", "s2"]), Frame::Integer(t) if t > 99_000));
    assert_eq!(r.cmd(&["RENAMENX", "s2", "wide"]), int(0));
    assert_eq!(r.cmd(&["COPY", "s2", "s3"]), int(1));
    assert!(matches!(r.cmd(&["PTTL", "s3"]), Frame::Integer(t) if t > 99_000));
    assert_eq!(r.cmd(&["COPY", "s2", "wide", "REPLACE"]), int(1));
    assert_eq!(r.cmd(&["SCARD", "wide"]), int(3));
    assert_eq!(r.cmd(&["MOVE", "s3", "1"]), int(1));
    assert_eq!(r.cmd(&["SELECT", "1"]), ok());
    assert_eq!(
        sorted(r.cmd(&["SMEMBERS", "s3"])),
        vec!["1".to_string(), "2".into(), "3".into()]
    );
    assert_eq!(r.cmd(&["SELECT", "0"]), ok());
    assert_eq!(r.cmd(&["HSET", "h", "f", "v"]), int(1));
    match r.cmd(&["SCAN", "0", "TYPE", "set", "COUNT", "1000"]) {
        Frame::Array(parts) => assert_eq!(sorted(parts[1].clone()), vec!["s2", "wide"]),
        other => panic!("{other:?}"),
    }
    assert_eq!(r.cmd(&["DEBUG", "RELOAD"]), ok());
    assert_eq!(r.cmd(&["SCARD", "s2"]), int(3));
    assert_eq!(r.cmd(&["TYPE", "s2"]), Frame::Simple(b"set".to_vec()));
    assert_eq!(r.cmd(&["DEL", "s2", "wide", "h"]), int(3));
    assert_eq!(r.cmd(&["EXISTS", "s2"]), int(0));
}

fn compact_offline(s: TestServer) -> TestServer {
    let mut s = s;
    s.handle.take().unwrap().shutdown().unwrap();
    let db =
        basalt_engine::Db::open(s.dir.path().join("0"), basalt_engine::Options::default()).unwrap();
    db.compact().unwrap();
    db.close().unwrap();
    TestServer::start_in(s.dir)
}

#[test]
fn sets_survive_restart_and_compaction() {
    let s = TestServer::start();
    let mut c = s.client();
    let all: Vec<String> = (0..500).map(|i| format!("m{i}")).collect();
    let _: i64 = c.sadd("s", &all).unwrap();
    let _: i64 = c.srem("s", &all[..200]).unwrap();
    let _: Vec<String> = redis::cmd("SPOP").arg("s").arg(50).query(&mut c).unwrap();
    let _: i64 = c.sunionstore("copy", "s").unwrap();
    let _: i64 = c.sadd("gone", "x").unwrap();
    let _: i64 = c.srem("gone", "x").unwrap();
    let want = members(&mut c, "s");
    assert_eq!(want.len(), 250);
    drop(c);
    let s = s.restart();
    let mut c = s.client();
    assert_eq!(members(&mut c, "s"), want);
    assert_eq!(members(&mut c, "copy"), want);
    drop(c);
    let s = compact_offline(s);
    let mut c = s.client();
    assert_eq!(members(&mut c, "s"), want);
    let e: bool = c.exists("gone").unwrap();
    assert!(!e);
}

/// One step of the property test.
#[derive(Debug, Clone)]
enum Op {
    HSet(u8, u8, u8),
    HDel(u8, u8),
    HIncrBy(u8, u8, i8),
    SAdd(u8, u8),
    SRem(u8, u8),
    SPop(u8),
    SMove(u8, u8, u8),
    SInterStore(u8, u8, u8),
    Del(u8),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..4;
    let f = 0u8..6;
    prop_oneof![
        4 => (k.clone(), f.clone(), any::<u8>()).prop_map(|(k, f, v)| Op::HSet(k, f, v)),
        2 => (k.clone(), f.clone()).prop_map(|(k, f)| Op::HDel(k, f)),
        2 => (k.clone(), f.clone(), any::<i8>()).prop_map(|(k, f, n)| Op::HIncrBy(k, f, n)),
        4 => (k.clone(), f.clone()).prop_map(|(k, m)| Op::SAdd(k, m)),
        2 => (k.clone(), f.clone()).prop_map(|(k, m)| Op::SRem(k, m)),
        1 => k.clone().prop_map(Op::SPop),
        1 => (k.clone(), k.clone(), f.clone()).prop_map(|(a, b, m)| Op::SMove(a, b, m)),
        1 => (k.clone(), k.clone(), k.clone()).prop_map(|(d, a, b)| Op::SInterStore(d, a, b)),
        1 => k.clone().prop_map(Op::Del),
        1 => Just(Op::Restart),
    ]
}

/// What a key holds in the model.
#[derive(Debug, Clone, PartialEq)]
enum Val {
    Hash(BTreeMap<String, String>),
    Set(BTreeSet<String>),
}

fn hkey(k: u8) -> String {
    format!("h{k}")
}
fn skey(k: u8) -> String {
    format!("s{k}")
}

fn check(c: &mut redis::Connection, model: &BTreeMap<String, Val>) {
    for k in 0..4 {
        let (h, s) = (hkey(k), skey(k));
        let got: BTreeMap<String, String> = c.hgetall(&h).unwrap();
        match model.get(&h) {
            Some(Val::Hash(m)) => assert_eq!(&got, m, "{h}"),
            _ => assert!(got.is_empty(), "{h}"),
        }
        let got: BTreeSet<String> = c.smembers(&s).unwrap();
        match model.get(&s) {
            Some(Val::Set(m)) => assert_eq!(&got, m, "{s}"),
            _ => assert!(got.is_empty(), "{s}"),
        }
    }
}

fn run_ops(ops: Vec<Op>) {
    let mut s = TestServer::start();
    let mut c = s.client();
    let mut model: BTreeMap<String, Val> = BTreeMap::new();
    for op in ops {
        match op {
            Op::HSet(k, f, v) => {
                let _: i64 = c.hset(hkey(k), format!("f{f}"), v.to_string()).unwrap();
                let e = model
                    .entry(hkey(k))
                    .or_insert_with(|| Val::Hash(BTreeMap::new()));
                let Val::Hash(m) = e else { unreachable!() };
                m.insert(format!("f{f}"), v.to_string());
            }
            Op::HDel(k, f) => {
                let n: i64 = c.hdel(hkey(k), format!("f{f}")).unwrap();
                let mut had = false;
                if let Some(Val::Hash(m)) = model.get_mut(&hkey(k)) {
                    had = m.remove(&format!("f{f}")).is_some();
                    if m.is_empty() {
                        model.remove(&hkey(k));
                    }
                }
                assert_eq!(n, had as i64);
            }
            Op::HIncrBy(k, f, n) => {
                let e = model
                    .entry(hkey(k))
                    .or_insert_with(|| Val::Hash(BTreeMap::new()));
                let Val::Hash(m) = e else { unreachable!() };
                let field = format!("f{f}");
                let old = m
                    .get(&field)
                    .map(|v| v.parse::<i64>().unwrap())
                    .unwrap_or(0);
                let got: i64 = c.hincr(hkey(k), &field, n as i64).unwrap();
                assert_eq!(got, old + n as i64);
                m.insert(field, got.to_string());
            }
            Op::SAdd(k, m) => {
                let n: i64 = c.sadd(skey(k), format!("m{m}")).unwrap();
                let e = model
                    .entry(skey(k))
                    .or_insert_with(|| Val::Set(BTreeSet::new()));
                let Val::Set(set) = e else { unreachable!() };
                assert_eq!(n, set.insert(format!("m{m}")) as i64);
            }
            Op::SRem(k, m) => {
                let n: i64 = c.srem(skey(k), format!("m{m}")).unwrap();
                let mut had = false;
                if let Some(Val::Set(set)) = model.get_mut(&skey(k)) {
                    had = set.remove(&format!("m{m}"));
                    if set.is_empty() {
                        model.remove(&skey(k));
                    }
                }
                assert_eq!(n, had as i64);
            }
            Op::SPop(k) => {
                let got: Option<String> = c.spop(skey(k)).unwrap();
                match (got, model.get_mut(&skey(k))) {
                    (None, None) => {}
                    (Some(m), Some(Val::Set(set))) => {
                        assert!(set.remove(&m), "popped {m} not in the model");
                        if set.is_empty() {
                            model.remove(&skey(k));
                        }
                    }
                    other => panic!("{other:?}"),
                }
            }
            Op::SMove(a, b, m) => {
                let member = format!("m{m}");
                let n: i64 = c.smove(skey(a), skey(b), &member).unwrap();
                let had = matches!(model.get(&skey(a)), Some(Val::Set(s)) if s.contains(&member));
                assert_eq!(n, had as i64);
                if had && a != b {
                    if let Some(Val::Set(s)) = model.get_mut(&skey(a)) {
                        s.remove(&member);
                        if s.is_empty() {
                            model.remove(&skey(a));
                        }
                    }
                    let e = model
                        .entry(skey(b))
                        .or_insert_with(|| Val::Set(BTreeSet::new()));
                    let Val::Set(s) = e else { unreachable!() };
                    s.insert(member);
                }
            }
            Op::SInterStore(d, a, b) => {
                let n: i64 = c.sinterstore(skey(d), &[skey(a), skey(b)]).unwrap();
                let get = |k: u8| match model.get(&skey(k)) {
                    Some(Val::Set(s)) => s.clone(),
                    _ => BTreeSet::new(),
                };
                let inter: BTreeSet<String> = get(a).intersection(&get(b)).cloned().collect();
                assert_eq!(n, inter.len() as i64);
                if inter.is_empty() {
                    model.remove(&skey(d));
                } else {
                    model.insert(skey(d), Val::Set(inter));
                }
            }
            Op::Del(k) => {
                let _: i64 = c.del(&[hkey(k), skey(k)]).unwrap();
                model.remove(&hkey(k));
                model.remove(&skey(k));
            }
            Op::Restart => {
                drop(c);
                s = s.restart();
                c = s.client();
                check(&mut c, &model);
            }
        }
    }
    check(&mut c, &model);
    drop(c);
    let s = s.restart();
    let mut c = s.client();
    check(&mut c, &model);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn random_hash_and_set_operations_match_a_model_across_restarts(
        ops in proptest::collection::vec(op(), 1..60)
    ) {
        run_ops(ops);
    }
}
