//! Hash commands through the `redis` crate and raw RESP: Redis 7.0's
//! replies and errors, the generic key commands on hashes, and hashes
//! surviving restart and compaction.

use crate::common;

use std::collections::{BTreeMap, HashSet};

use basalt_resp::Frame;
use common::{bulk, err, ok, TestServer};
use redis::Commands;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn arr(items: Vec<Frame>) -> Frame {
    Frame::Array(items)
}

fn hgetall(c: &mut redis::Connection, key: &str) -> BTreeMap<String, String> {
    c.hgetall(key).unwrap()
}

#[test]
fn hash_commands_happy_paths() {
    let s = TestServer::start();
    let mut c = s.client();
    let n: i64 = redis::cmd("HSET")
        .arg("h")
        .arg("a")
        .arg("1")
        .arg("b")
        .arg("2")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 2);
    let n: i64 = c.hset("h", "a", "10").unwrap();
    assert_eq!(n, 0, "updating a field is not an addition");
    let v: String = c.hget("h", "a").unwrap();
    assert_eq!(v, "10");
    let v: Option<String> = c.hget("h", "zz").unwrap();
    assert_eq!(v, None);
    let v: Option<String> = c.hget("nokey", "a").unwrap();
    assert_eq!(v, None);
    let vals: Vec<Option<String>> = redis::cmd("HMGET")
        .arg("h")
        .arg("a")
        .arg("zz")
        .arg("b")
        .query(&mut c)
        .unwrap();
    assert_eq!(vals, vec![Some("10".into()), None, Some("2".into())]);
    let vals: Vec<Option<String>> = redis::cmd("HMGET")
        .arg("nokey")
        .arg("a")
        .query(&mut c)
        .unwrap();
    assert_eq!(vals, vec![None]);
    let _: () = redis::cmd("HMSET")
        .arg("h")
        .arg("c")
        .arg("3")
        .arg("d")
        .arg("")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        hgetall(&mut c, "h"),
        [("a", "10"), ("b", "2"), ("c", "3"), ("d", "")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    );
    let n: i64 = c.hlen("h").unwrap();
    assert_eq!(n, 4);
    let n: i64 = c.hlen("nokey").unwrap();
    assert_eq!(n, 0);
    let mut keys: Vec<String> = c.hkeys("h").unwrap();
    keys.sort();
    assert_eq!(keys, ["a", "b", "c", "d"]);
    let mut vals: Vec<String> = c.hvals("h").unwrap();
    vals.sort();
    assert_eq!(vals, ["", "10", "2", "3"]);
    let empty: Vec<String> = c.hkeys("nokey").unwrap();
    assert!(empty.is_empty());
    let n: i64 = redis::cmd("HSTRLEN")
        .arg("h")
        .arg("a")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 2);
    let n: i64 = redis::cmd("HSTRLEN")
        .arg("h")
        .arg("x")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 0);
    assert!(c.hexists::<_, _, bool>("h", "a").unwrap());
    assert!(!c.hexists::<_, _, bool>("h", "x").unwrap());
    assert!(!c.hexists::<_, _, bool>("nokey", "x").unwrap());
    let n: i64 = c.hset_nx("h", "a", "99").unwrap();
    assert_eq!(n, 0);
    let n: i64 = c.hset_nx("h", "e", "5").unwrap();
    assert_eq!(n, 1);
    let n: i64 = c.hincr("h", "e", 10).unwrap();
    assert_eq!(n, 15);
    let n: i64 = c.hincr("h", "new", -3).unwrap();
    assert_eq!(n, -3);
    let f: f64 = c.hincr("h", "f", 10.5f64).unwrap();
    assert_eq!(f, 10.5);
    let f: String = redis::cmd("HINCRBYFLOAT")
        .arg("h")
        .arg("f")
        .arg("0.1")
        .query(&mut c)
        .unwrap();
    assert_eq!(f, "10.6");
    let n: i64 = c.hdel("h", &["a", "b", "nope"]).unwrap();
    assert_eq!(n, 2);
    let n: i64 = c.hdel("nokey", "a").unwrap();
    assert_eq!(n, 0);
    // Removing the last field removes the key.
    let _: () = c.hset("single", "only", "1").unwrap();
    let n: i64 = c.hdel("single", "only").unwrap();
    assert_eq!(n, 1);
    let exists: bool = c.exists("single").unwrap();
    assert!(!exists);
}

#[test]
fn hash_errors_match_redis() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SET", "str", "x"]), ok());
    assert_eq!(r.cmd(&["SADD", "set", "m"]), int(1));
    for key in ["str", "set"] {
        for cmd in [
            vec!["HSET", key, "f", "v"],
            vec!["HSETNX", key, "f", "v"],
            vec!["HMSET", key, "f", "v"],
            vec!["HGET", key, "f"],
            vec!["HMGET", key, "f"],
            vec!["HDEL", key, "f"],
            vec!["HEXISTS", key, "f"],
            vec!["HLEN", key],
            vec!["HSTRLEN", key, "f"],
            vec!["HKEYS", key],
            vec!["HVALS", key],
            vec!["HGETALL", key],
            vec!["HINCRBY", key, "f", "1"],
            vec!["HINCRBYFLOAT", key, "f", "1"],
            vec!["HRANDFIELD", key],
            vec!["HRANDFIELD", key, "2"],
            vec!["HSCAN", key, "0"],
        ] {
            assert_eq!(r.cmd(&cmd), err(WRONGTYPE), "{cmd:?}");
        }
    }
    assert_eq!(r.cmd(&["HSET", "h", "f", "v"]), int(1));
    assert_eq!(r.cmd(&["GET", "h"]), err(WRONGTYPE));
    assert_eq!(r.cmd(&["SADD", "h", "m"]), err(WRONGTYPE));
    assert_eq!(r.cmd(&["APPEND", "h", "x"]), err(WRONGTYPE));
    for (cmd, name) in [
        (vec!["HSET", "h"], "hset"),
        (vec!["HSET", "h", "f"], "hset"),
        (vec!["HSET", "h", "f", "v", "g"], "hset"),
        (vec!["HMSET", "h", "f"], "hmset"),
        (vec!["HMSET", "h", "f", "v", "g"], "hmset"),
        (vec!["HGET", "h"], "hget"),
        (vec!["HDEL", "h"], "hdel"),
        (vec!["HLEN"], "hlen"),
        (vec!["HINCRBY", "h", "f"], "hincrby"),
        (vec!["HSCAN", "h"], "hscan"),
        (vec!["HRANDFIELD"], "hrandfield"),
    ] {
        assert_eq!(
            r.cmd(&cmd),
            err(&format!(
                "ERR wrong number of arguments for '{name}' command"
            )),
            "{cmd:?}"
        );
    }
    // Nothing was written by the failed HSETs.
    assert_eq!(r.cmd(&["HLEN", "h"]), int(1));

    assert_eq!(
        r.cmd(&["HSET", "h", "s", "abc", "big", "9223372036854775807"]),
        int(2)
    );
    assert_eq!(
        r.cmd(&["HINCRBY", "h", "f", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        r.cmd(&["HINCRBY", "h", "s", "1"]),
        err("ERR hash value is not an integer")
    );
    assert_eq!(
        r.cmd(&["HINCRBY", "h", "big", "1"]),
        err("ERR increment or decrement would overflow")
    );
    assert_eq!(r.cmd(&["HINCRBY", "h", "big", "-1"]), int(i64::MAX - 1));
    assert_eq!(
        r.cmd(&["HINCRBYFLOAT", "h", "f", "nan"]),
        err("ERR value is not a valid float")
    );
    assert_eq!(
        r.cmd(&["HINCRBYFLOAT", "h", "f", "abc"]),
        err("ERR value is not a valid float")
    );
    assert_eq!(
        r.cmd(&["HINCRBYFLOAT", "h", "s", "1"]),
        err("ERR hash value is not a float")
    );
    assert_eq!(r.cmd(&["HINCRBYFLOAT", "h", "n", "1.5"]), bulk("1.5"));
    assert_eq!(r.cmd(&["HINCRBYFLOAT", "h", "n", "5.0e3"]), bulk("5001.5"));
    assert_eq!(
        r.cmd(&["HINCRBYFLOAT", "h", "n", "inf"]),
        err("ERR value is NaN or Infinity")
    );
    assert_eq!(r.cmd(&["HGET", "h", "n"]), bulk("5001.5"));
    // In a long double, as Redis (replies from redis-server 7.0.15).
    assert_eq!(r.cmd(&["HINCRBYFLOAT", "h", "d", "1.1"]), bulk("1.1"));
    assert_eq!(r.cmd(&["HINCRBYFLOAT", "h", "d", "2.2"]), bulk("3.3"));
    r.cmd(&["HSET", "h", "sp", " 3"]);
    assert_eq!(
        r.cmd(&["HINCRBYFLOAT", "h", "sp", "1e400"]),
        err("ERR hash value is not a float")
    );
    match r.cmd(&["HINCRBYFLOAT", "h", "big", "1e400"]) {
        Frame::Bulk(b) => assert_eq!(b.len(), 401),
        other => panic!("{other:?}"),
    }
}

#[test]
fn hrandfield_counts_and_withvalues() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["HRANDFIELD", "nokey"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["HRANDFIELD", "nokey", "3"]), arr(vec![]));
    assert_eq!(r.cmd(&["HSET", "h", "a", "1", "b", "2", "c", "3"]), int(3));
    let fields: HashSet<Vec<u8>> = [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()].into();
    let Frame::Bulk(one) = r.cmd(&["HRANDFIELD", "h"]) else {
        panic!("not a bulk")
    };
    assert!(fields.contains(&one));
    let names = |f: Frame| -> Vec<Vec<u8>> {
        match f {
            Frame::Array(items) => items
                .into_iter()
                .map(|i| match i {
                    Frame::Bulk(b) => b,
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("{other:?}"),
        }
    };
    let two = names(r.cmd(&["HRANDFIELD", "h", "2"]));
    assert_eq!(two.len(), 2);
    assert_ne!(two[0], two[1]);
    assert!(two.iter().all(|f| fields.contains(f)));
    let all = names(r.cmd(&["HRANDFIELD", "h", "100"]));
    assert_eq!(all.into_iter().collect::<HashSet<_>>(), fields);
    assert_eq!(r.cmd(&["HRANDFIELD", "h", "0"]), arr(vec![]));
    let many = names(r.cmd(&["HRANDFIELD", "h", "-10"]));
    assert_eq!(many.len(), 10, "a negative count may repeat");
    assert!(many.iter().all(|f| fields.contains(f)));
    // RESP2 WITHVALUES: a flat array, each field followed by its value.
    let flat = names(r.cmd(&["HRANDFIELD", "h", "-4", "WITHVALUES"]));
    assert_eq!(flat.len(), 8);
    for pair in flat.chunks(2) {
        let want = match &pair[0][..] {
            b"a" => b"1",
            b"b" => b"2",
            b"c" => b"3",
            other => panic!("{other:?}"),
        };
        assert_eq!(pair[1], want);
    }
    assert_eq!(
        r.cmd(&["HRANDFIELD", "h", "1", "foo"]),
        err("ERR syntax error")
    );
    assert_eq!(
        r.cmd(&["HRANDFIELD", "h", "1", "WITHVALUES", "x"]),
        err("ERR syntax error")
    );
    assert_eq!(
        r.cmd(&["HRANDFIELD", "h", "x", "y"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        r.cmd(&["HRANDFIELD", "h", "-9223372036854775808"]),
        err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
    );
    assert_eq!(
        r.cmd(&["HRANDFIELD", "nokey", "9223372036854775807", "WITHVALUES"]),
        err("ERR value is out of range")
    );
    // RESP3 WITHVALUES: an array of [field, value] pairs.
    let _ = r.cmd(&["HELLO", "3"]);
    match r.cmd(&["HRANDFIELD", "h", "2", "WITHVALUES"]) {
        Frame::Array(pairs) => {
            assert_eq!(pairs.len(), 2);
            for p in pairs {
                let Frame::Array(p) = p else { panic!("{p:?}") };
                assert_eq!(p.len(), 2);
            }
        }
        other => panic!("{other:?}"),
    }
    match r.cmd(&["HGETALL", "h"]) {
        Frame::Map(pairs) => assert_eq!(pairs.len(), 3),
        other => panic!("{other:?}"),
    }
}

fn scan_all(r: &mut common::Raw, cmd: &str, key: &str, extra: &[&str]) -> (Vec<Vec<u8>>, usize) {
    let mut cursor = "0".to_string();
    let mut out = Vec::new();
    let mut calls = 0;
    loop {
        let mut args = vec![cmd, key, &cursor];
        args.extend_from_slice(extra);
        let Frame::Array(mut reply) = r.cmd(&args) else {
            panic!("not an array")
        };
        calls += 1;
        assert!(calls < 10_000, "scan does not end");
        let Frame::Array(items) = reply.pop().unwrap() else {
            panic!()
        };
        let Frame::Bulk(next) = reply.pop().unwrap() else {
            panic!()
        };
        for i in items {
            let Frame::Bulk(b) = i else { panic!() };
            out.push(b);
        }
        cursor = String::from_utf8(next).unwrap();
        if cursor == "0" {
            return (out, calls);
        }
    }
}

#[test]
fn hscan_small_and_large_hashes() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(
        r.cmd(&["HSCAN", "nokey", "0"]),
        arr(vec![bulk("0"), arr(vec![])])
    );
    assert_eq!(r.cmd(&["HSCAN", "nokey", "x"]), err("ERR invalid cursor"));
    assert_eq!(r.cmd(&["HSET", "small", "a", "1", "b", "2"]), int(2));
    let (items, calls) = scan_all(&mut r, "HSCAN", "small", &[]);
    assert_eq!(calls, 1, "a listpack-sized hash comes back in one reply");
    assert_eq!(
        items,
        vec![b"a".to_vec(), b"1".to_vec(), b"b".to_vec(), b"2".to_vec()]
    );
    assert_eq!(
        r.cmd(&["HSCAN", "small", "0", "COUNT", "0"]),
        err("ERR syntax error")
    );
    assert_eq!(
        r.cmd(&["HSCAN", "small", "0", "NOVALUES"]),
        err("ERR syntax error")
    );
    assert_eq!(
        r.cmd(&["HSCAN", "small", "0", "MATCH", "a"]),
        arr(vec![bulk("0"), arr(vec![bulk("a"), bulk("1")])])
    );

    let mut c = s.client();
    let pairs: Vec<(String, String)> = (0..1000)
        .map(|i| (format!("f{i}"), format!("v{i}")))
        .collect();
    let _: () = c.hset_multiple("big", &pairs).unwrap();
    let (items, calls) = scan_all(&mut r, "HSCAN", "big", &["COUNT", "50"]);
    assert!(calls > 5, "a big hash is scanned in steps ({calls})");
    let mut seen = HashSet::new();
    for p in items.chunks(2) {
        let f = String::from_utf8(p[0].clone()).unwrap();
        assert_eq!(p[1], format!("v{}", &f[1..]).into_bytes());
        seen.insert(f);
    }
    assert_eq!(seen.len(), 1000);

    // Fields present for the whole scan are returned even while others are
    // removed and added between the steps.
    let mut cursor = "0".to_string();
    let mut seen = HashSet::new();
    let mut step = 0;
    loop {
        let Frame::Array(mut reply) = r.cmd(&["HSCAN", "big", &cursor, "COUNT", "20"]) else {
            panic!()
        };
        let Frame::Array(items) = reply.pop().unwrap() else {
            panic!()
        };
        let Frame::Bulk(next) = reply.pop().unwrap() else {
            panic!()
        };
        for p in items.chunks(2) {
            let Frame::Bulk(f) = &p[0] else { panic!() };
            seen.insert(String::from_utf8(f.clone()).unwrap());
        }
        // Remove two of the fields numbered >= 500 and add a new one.
        let _: i64 = c
            .hdel(
                "big",
                &[
                    format!("f{}", 500 + 2 * step),
                    format!("f{}", 501 + 2 * step),
                ],
            )
            .unwrap();
        let _: i64 = c.hset("big", format!("new{step}"), "x").unwrap();
        step += 1;
        cursor = String::from_utf8(next).unwrap();
        if cursor == "0" {
            break;
        }
    }
    for i in 0..500 {
        assert!(seen.contains(&format!("f{i}")), "f{i} missed");
    }
    let (items, _) = scan_all(&mut r, "HSCAN", "big", &["MATCH", "f99*", "COUNT", "100"]);
    let mut matched: Vec<Vec<u8>> = items.chunks(2).map(|p| p[0].clone()).collect();
    matched.sort();
    assert_eq!(matched.len(), 11);
    assert_eq!(matched[0], b"f99");
}

#[test]
fn generic_key_commands_on_a_hash() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["HSET", "h", "a", "1", "b", "2"]), int(2));
    assert_eq!(r.cmd(&["TYPE", "h"]), Frame::Simple(b"hash".to_vec()));
    assert_eq!(r.cmd(&["EXISTS", "h", "nokey"]), int(1));
    assert_eq!(r.cmd(&["OBJECT", "ENCODING", "h"]), bulk("listpack"));
    assert_eq!(r.cmd(&["EXPIRE", "h", "100"]), int(1));
    assert_eq!(r.cmd(&["TTL", "h"]), int(100));
    // Writing a field keeps the TTL.
    assert_eq!(r.cmd(&["HSET", "h", "c", "3"]), int(1));
    assert_eq!(r.cmd(&["TTL", "h"]), int(100));
    assert_eq!(r.cmd(&["RENAME", "h", "h2"]), ok());
    assert_eq!(r.cmd(&["EXISTS", "h"]), int(0));
    assert_eq!(r.cmd(&["TTL", "h2"]), int(100));
    assert_eq!(r.cmd(&["TYPE", "h2"]), Frame::Simple(b"hash".to_vec()));
    assert_eq!(r.cmd(&["HGET", "h2", "c"]), bulk("3"));
    assert_eq!(r.cmd(&["SET", "str", "x"]), ok());
    assert_eq!(r.cmd(&["RENAMENX", "h2", "str"]), int(0));
    // RENAME over an existing hash replaces it entirely.
    assert_eq!(r.cmd(&["HSET", "other", "zz", "9"]), int(1));
    assert_eq!(r.cmd(&["RENAME", "h2", "other"]), ok());
    assert_eq!(r.cmd(&["HEXISTS", "other", "zz"]), int(0));
    assert_eq!(r.cmd(&["HLEN", "other"]), int(3));
    assert_eq!(r.cmd(&["PERSIST", "other"]), int(1));
    assert_eq!(r.cmd(&["TTL", "other"]), int(-1));
    assert_eq!(r.cmd(&["COPY", "other", "cp"]), int(1));
    assert_eq!(r.cmd(&["COPY", "other", "cp"]), int(0));
    assert_eq!(r.cmd(&["HSET", "other", "d", "4"]), int(1));
    assert_eq!(r.cmd(&["COPY", "other", "cp", "REPLACE"]), int(1));
    assert_eq!(r.cmd(&["HLEN", "cp"]), int(4));
    assert_eq!(r.cmd(&["COPY", "other", "cp", "DB", "1"]), int(1));
    assert_eq!(r.cmd(&["MOVE", "cp", "2"]), int(1));
    assert_eq!(r.cmd(&["EXISTS", "cp"]), int(0));
    assert_eq!(r.cmd(&["SELECT", "1"]), ok());
    assert_eq!(r.cmd(&["HGET", "cp", "d"]), bulk("4"));
    assert_eq!(r.cmd(&["SELECT", "2"]), ok());
    assert_eq!(r.cmd(&["HLEN", "cp"]), int(4));
    assert_eq!(r.cmd(&["SELECT", "0"]), ok());
    // SCAN TYPE picks hashes out.
    assert_eq!(r.cmd(&["SADD", "set", "m"]), int(1));
    match r.cmd(&["SCAN", "0", "TYPE", "hash", "COUNT", "1000"]) {
        Frame::Array(parts) => assert_eq!(parts[1], arr(vec![bulk("other")])),
        other => panic!("{other:?}"),
    }
    // Encoding follows the size and value length, as Redis's would.
    assert_eq!(r.cmd(&["HSET", "other", "long", &"x".repeat(65)]), int(1));
    assert_eq!(r.cmd(&["OBJECT", "ENCODING", "other"]), bulk("hashtable"));
    let mut args = vec!["HSET".to_string(), "wide".to_string()];
    for i in 0..129 {
        args.push(format!("f{i}"));
        args.push("v".into());
    }
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    assert_eq!(r.cmd(&args), int(129));
    assert_eq!(r.cmd(&["OBJECT", "ENCODING", "wide"]), bulk("hashtable"));
    assert_eq!(r.cmd(&["DEBUG", "RELOAD"]), ok());
    assert_eq!(r.cmd(&["HLEN", "wide"]), int(129));
    assert_eq!(r.cmd(&["HGET", "other", "long"]), bulk(&"x".repeat(65)));
    assert_eq!(r.cmd(&["DEL", "wide", "other"]), int(2));
    assert_eq!(r.cmd(&["HLEN", "wide"]), int(0));
    assert_eq!(r.cmd(&["PEXPIRE", "set", "1"]), int(1));
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(
        r.cmd(&["HSET", "set", "f", "v"]),
        int(1),
        "an expired set is gone"
    );
}

/// Stops the server, compacts database 0 with the engine directly, starts
/// a new server on the same directory.
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
fn hashes_survive_restart_and_compaction() {
    let s = TestServer::start();
    let mut c = s.client();
    let pairs: Vec<(String, String)> = (0..300)
        .map(|i| (format!("f{i}"), format!("v{i}")))
        .collect();
    let _: () = c.hset_multiple("h", &pairs).unwrap();
    for i in 0..100 {
        let _: i64 = c.hdel("h", format!("f{i}")).unwrap();
    }
    let _: i64 = c.hincr("h", "counter", 7).unwrap();
    let _: bool = c.expire("h", 1000).unwrap();
    let _: () = c.hset("gone", "a", "1").unwrap();
    let _: i64 = c.del("gone").unwrap();
    let want = hgetall(&mut c, "h");
    assert_eq!(want.len(), 201);
    drop(c);

    let s = s.restart();
    let mut c = s.client();
    assert_eq!(hgetall(&mut c, "h"), want);
    let ttl: i64 = c.ttl("h").unwrap();
    assert!(ttl > 990, "{ttl}");
    let gone: bool = c.exists("gone").unwrap();
    assert!(!gone);
    drop(c);

    let s = compact_offline(s);
    let mut c = s.client();
    assert_eq!(hgetall(&mut c, "h"), want);
    let gone: bool = c.exists("gone").unwrap();
    assert!(!gone);
    let n: i64 = c.hincr("h", "counter", 1).unwrap();
    assert_eq!(n, 8);
}
