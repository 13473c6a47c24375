//! Each command family through real clients (the `redis` crate) and raw
//! RESP, asserting Redis 7.0's replies and error strings.

use crate::common;

use std::time::Duration;

use basalt_resp::Frame;
use common::{bulk, err, eventually, ok, TestServer};
use redis::Commands;

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn arr(items: Vec<Frame>) -> Frame {
    Frame::Array(items)
}

#[test]
fn strings_through_the_redis_crate() {
    let s = TestServer::start();
    let mut c = s.client();
    let _: () = c.set("greeting", "hello").unwrap();
    let v: String = c.get("greeting").unwrap();
    assert_eq!(v, "hello");
    let n: i64 = c.incr("counter", 5).unwrap();
    assert_eq!(n, 5);
    let n: i64 = c.decr("counter", 2).unwrap();
    assert_eq!(n, 3);
    let _: () = c.mset(&[("a", "1"), ("b", "2")]).unwrap();
    let vals: Vec<Option<String>> = c.mget(&["a", "b", "missing"]).unwrap();
    assert_eq!(vals, vec![Some("1".into()), Some("2".into()), None]);
    let len: usize = c.append("a", "23").unwrap();
    assert_eq!(len, 3);
    let f: f64 = c.incr("float", 1.5f64).unwrap();
    assert_eq!(f, 1.5);
    let missing: Option<String> = c.get("nope").unwrap();
    assert_eq!(missing, None);
}

#[test]
fn binary_safe_keys_and_values() {
    let s = TestServer::start();
    let mut c = s.client();
    let key: Vec<u8> = vec![0, b'\r', b'\n', 255, b' ', 0];
    let value: Vec<u8> = (0..=255u8).chain([b'\r', b'\n', 0]).collect();
    let _: () = c.set(&key, &value).unwrap();
    let got: Vec<u8> = c.get(&key).unwrap();
    assert_eq!(got, value);
    let keys: Vec<Vec<u8>> = c.keys("*").unwrap();
    assert_eq!(keys, vec![key]);
}

#[test]
fn set_options_and_errors() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SET", "k", "v1"]), ok());
    assert_eq!(r.cmd(&["SET", "k", "v2", "NX"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["SET", "k", "v2", "XX", "GET"]), bulk("v1"));
    assert_eq!(r.cmd(&["SET", "new", "x", "XX"]), Frame::NullBulk);
    assert_eq!(
        r.cmd(&["SET", "k", "v", "NX", "XX"]),
        err("ERR syntax error")
    );
    assert_eq!(
        r.cmd(&["SET", "k", "v", "EX", "10", "PX", "5"]),
        err("ERR syntax error")
    );
    assert_eq!(r.cmd(&["SET", "k", "v", "EX"]), err("ERR syntax error"));
    assert_eq!(
        r.cmd(&["SET", "k", "v", "EX", "0"]),
        err("ERR invalid expire time in 'set' command")
    );
    assert_eq!(
        r.cmd(&["SET", "k", "v", "EX", "9223372036854775807"]),
        err("ERR invalid expire time in 'set' command")
    );
    assert_eq!(
        r.cmd(&["SET", "k", "v", "EX", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(r.cmd(&["SET", "k", "v", "EX", "100"]), ok());
    assert_eq!(r.cmd(&["TTL", "k"]), int(100));
    assert_eq!(r.cmd(&["SET", "k", "w", "KEEPTTL"]), ok());
    assert_eq!(r.cmd(&["TTL", "k"]), int(100));
    assert_eq!(r.cmd(&["SET", "k", "w"]), ok());
    assert_eq!(r.cmd(&["TTL", "k"]), int(-1));
    assert_eq!(r.cmd(&["SET", "k", "w", "PXAT", "1"]), ok());
    assert_eq!(r.cmd(&["GET", "k"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["SETNX", "k", "1"]), int(1));
    assert_eq!(r.cmd(&["SETNX", "k", "2"]), int(0));
    assert_eq!(
        r.cmd(&["SETEX", "k", "0", "v"]),
        err("ERR invalid expire time in 'setex' command")
    );
    assert_eq!(
        r.cmd(&["PSETEX", "k", "-5", "v"]),
        err("ERR invalid expire time in 'psetex' command")
    );
    assert_eq!(r.cmd(&["PSETEX", "k", "100000", "v"]), ok());
    assert_eq!(r.cmd(&["TTL", "k"]), int(100));
}

#[test]
fn get_family() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["SET", "k", "old"]);
    assert_eq!(r.cmd(&["GETSET", "k", "new"]), bulk("old"));
    assert_eq!(r.cmd(&["GETSET", "none", "x"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["GETDEL", "k"]), bulk("new"));
    assert_eq!(r.cmd(&["GETDEL", "k"]), Frame::NullBulk);
    r.cmd(&["SET", "k", "v"]);
    assert_eq!(r.cmd(&["GETEX", "k", "EX", "50"]), bulk("v"));
    assert_eq!(r.cmd(&["TTL", "k"]), int(50));
    assert_eq!(r.cmd(&["GETEX", "k", "PERSIST"]), bulk("v"));
    assert_eq!(r.cmd(&["TTL", "k"]), int(-1));
    assert_eq!(
        r.cmd(&["GETEX", "k", "EX", "1", "PERSIST"]),
        err("ERR syntax error")
    );
    assert_eq!(
        r.cmd(&["GETEX", "k", "EX", "0"]),
        err("ERR invalid expire time in 'getex' command")
    );
    assert_eq!(r.cmd(&["GETEX", "k", "PXAT", "1"]), bulk("v"));
    assert_eq!(r.cmd(&["EXISTS", "k"]), int(0));
    // As Redis, the time is checked only on a string that exists.
    assert_eq!(r.cmd(&["GETEX", "nokey", "EX", "abc"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["GETEX", "nokey", "PX", "0"]), Frame::NullBulk);
    r.cmd(&["RPUSH", "list", "x"]);
    assert_eq!(
        r.cmd(&["GETEX", "list", "EX", "-1"]),
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    r.cmd(&["SET", "k", "v"]);
    assert_eq!(
        r.cmd(&["GETEX", "k", "EX", "abc"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        r.cmd(&["TTL", "k"]),
        int(-1),
        "a failed GETEX changes nothing"
    );
    assert_eq!(
        r.cmd(&["MSET", "a", "1", "b"]),
        err("ERR wrong number of arguments for 'mset' command")
    );
    assert_eq!(r.cmd(&["MSETNX", "a", "1", "b", "2"]), int(1));
    assert_eq!(r.cmd(&["MSETNX", "a", "1", "c", "2"]), int(0));
    assert_eq!(r.cmd(&["EXISTS", "c"]), int(0));
}

#[test]
fn ranges_and_lengths() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["SET", "k", "Hello World"]);
    assert_eq!(r.cmd(&["STRLEN", "k"]), int(11));
    assert_eq!(r.cmd(&["STRLEN", "none"]), int(0));
    assert_eq!(r.cmd(&["GETRANGE", "k", "0", "4"]), bulk("Hello"));
    assert_eq!(r.cmd(&["GETRANGE", "k", "-5", "-1"]), bulk("World"));
    assert_eq!(r.cmd(&["GETRANGE", "k", "5", "2"]), bulk(""));
    assert_eq!(r.cmd(&["GETRANGE", "k", "0", "100"]), bulk("Hello World"));
    assert_eq!(r.cmd(&["GETRANGE", "none", "0", "-1"]), bulk(""));
    assert_eq!(r.cmd(&["SETRANGE", "k", "6", "Redis"]), int(11));
    assert_eq!(r.cmd(&["GET", "k"]), bulk("Hello Redis"));
    assert_eq!(r.cmd(&["SETRANGE", "pad", "3", "x"]), int(4));
    assert_eq!(r.cmd(&["GET", "pad"]), Frame::Bulk(b"\0\0\0x".to_vec()));
    assert_eq!(r.cmd(&["SETRANGE", "empty", "0", ""]), int(0));
    assert_eq!(r.cmd(&["EXISTS", "empty"]), int(0));
    assert_eq!(
        r.cmd(&["SETRANGE", "k", "-1", "x"]),
        err("ERR offset is out of range")
    );
    assert_eq!(
        r.cmd(&["SETRANGE", "k", "536870911", "xx"]),
        err("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
    );
    r.cmd(&["SET", "t", "a", "EX", "100"]);
    assert_eq!(r.cmd(&["APPEND", "t", "bc"]), int(3));
    assert_eq!(r.cmd(&["TTL", "t"]), int(100), "APPEND keeps the TTL");
}

#[test]
fn counters() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["INCR", "n"]), int(1));
    assert_eq!(r.cmd(&["INCRBY", "n", "41"]), int(42));
    assert_eq!(r.cmd(&["DECRBY", "n", "2"]), int(40));
    assert_eq!(r.cmd(&["DECR", "n"]), int(39));
    assert_eq!(
        r.cmd(&["INCRBY", "n", "x"]),
        err("ERR value is not an integer or out of range")
    );
    r.cmd(&["SET", "max", "9223372036854775807"]);
    assert_eq!(
        r.cmd(&["INCR", "max"]),
        err("ERR increment or decrement would overflow")
    );
    assert_eq!(
        r.cmd(&["DECRBY", "n", "-9223372036854775808"]),
        err("ERR decrement would overflow")
    );
    for bad in [" 1", "01", "+1", "1.0", "abc"] {
        r.cmd(&["SET", "bad", bad]);
        assert_eq!(
            r.cmd(&["INCR", "bad"]),
            err("ERR value is not an integer or out of range"),
            "{bad}"
        );
    }
    assert_eq!(r.cmd(&["INCRBYFLOAT", "f", "10.5"]), bulk("10.5"));
    assert_eq!(r.cmd(&["INCRBYFLOAT", "f", "0.1"]), bulk("10.6"));
    assert_eq!(r.cmd(&["INCRBYFLOAT", "f", "-5e0"]), bulk("5.6"));
    assert_eq!(
        r.cmd(&["INCRBYFLOAT", "f", "abc"]),
        err("ERR value is not a valid float")
    );
    assert_eq!(
        r.cmd(&["INCRBYFLOAT", "f", "inf"]),
        err("ERR increment would produce NaN or Infinity")
    );
    // Redis adds in a long double and prints 17 decimals, zeros trimmed
    // (replies checked against redis-server 7.0.15).
    r.cmd(&["SET", "f", "0.1"]);
    assert_eq!(r.cmd(&["INCRBYFLOAT", "f", "0.2"]), bulk("0.3"));
    assert_eq!(r.cmd(&["GET", "f"]), bulk("0.3"));
    r.cmd(&["SET", "f", "9223372036854775807"]);
    assert_eq!(
        r.cmd(&["INCRBYFLOAT", "f", "1"]),
        bulk("9223372036854775808")
    );
    r.cmd(&["SET", "f", "-0"]);
    assert_eq!(r.cmd(&["INCRBYFLOAT", "f", "-0"]), bulk("0"));
    assert_eq!(r.cmd(&["INCRBYFLOAT", "hex", "0x10"]), bulk("16"));
    match r.cmd(&["INCRBYFLOAT", "huge", "1e400"]) {
        Frame::Bulk(b) => {
            assert_eq!(b.len(), 401);
            assert!(b.starts_with(b"100000000000000000002818806839"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        r.cmd(&["INCRBYFLOAT", "f", "1e99999"]),
        err("ERR value is not a valid float")
    );
    r.cmd(&["SET", "t", "1", "EX", "100"]);
    r.cmd(&["INCR", "t"]);
    assert_eq!(r.cmd(&["TTL", "t"]), int(100), "INCR keeps the TTL");
}

#[test]
fn concurrent_incr_loses_no_update() {
    let s = TestServer::start();
    let addr = s.addr();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut r = common::Raw::connect(addr);
                for _ in 0..250 {
                    r.cmd(&["INCR", "shared"]);
                    r.cmd(&["APPEND", "log", "x"]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut r = s.raw();
    assert_eq!(r.cmd(&["GET", "shared"]), bulk("1000"));
    assert_eq!(r.cmd(&["STRLEN", "log"]), int(1000));
}

#[test]
fn wrong_arity_and_unknown_commands() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(
        r.cmd(&["GET"]),
        err("ERR wrong number of arguments for 'get' command")
    );
    assert_eq!(
        r.cmd(&["get", "a", "b"]),
        err("ERR wrong number of arguments for 'get' command")
    );
    assert_eq!(
        r.cmd(&["FOO", "a", "b"]),
        err("ERR unknown command 'FOO', with args beginning with: 'a' 'b' ")
    );
    assert_eq!(
        r.cmd(&["FOO"]),
        err("ERR unknown command 'FOO', with args beginning with: ")
    );
    let long = "x".repeat(200);
    let expected = format!(
        "ERR unknown command 'foo', with args beginning with: '{}' ",
        "x".repeat(128)
    );
    assert_eq!(r.cmd(&["foo", &long, "next"]), err(&expected));
    // The connection is still usable.
    assert_eq!(r.cmd(&["PING"]), Frame::Simple(b"PONG".to_vec()));
    assert_eq!(
        r.cmd(&["CLIENT", "FOO"]),
        err("ERR unknown subcommand 'FOO'. Try CLIENT HELP.")
    );
    assert_eq!(
        r.cmd(&["CLIENT", "ID", "x"]),
        err("ERR wrong number of arguments for 'client|id' command")
    );
}

#[test]
fn wrongtype_on_map_keys() {
    // Maps come from the engine directly until the hash/set families exist.
    let dir = tempfile::tempdir().unwrap();
    {
        let db = basalt_engine::Db::open(dir.path().join("0"), basalt_engine::Options::default())
            .unwrap();
        db.put_field_tagged(b"h", basalt_server::keyspace::TAG_HASH, b"f", b"v")
            .unwrap();
        db.close().unwrap();
    }
    let s = TestServer::start_in(dir);
    let mut r = s.raw();
    let wt = err("WRONGTYPE Operation against a key holding the wrong kind of value");
    assert_eq!(r.cmd(&["TYPE", "h"]), Frame::Simple(b"hash".to_vec()));
    assert_eq!(r.cmd(&["GET", "h"]), wt);
    assert_eq!(r.cmd(&["INCR", "h"]), wt);
    assert_eq!(r.cmd(&["APPEND", "h", "x"]), wt);
    assert_eq!(r.cmd(&["STRLEN", "h"]), wt);
    assert_eq!(r.cmd(&["SET", "h", "v", "GET"]), wt);
    assert_eq!(r.cmd(&["MGET", "h"]), arr(vec![Frame::NullBulk]));
    assert_eq!(r.cmd(&["OBJECT", "ENCODING", "h"]), bulk("listpack"));
    assert_eq!(r.cmd(&["RENAME", "h", "h2"]), ok());
    assert_eq!(r.cmd(&["TYPE", "h2"]), Frame::Simple(b"hash".to_vec()));
    assert_eq!(r.cmd(&["SET", "h2", "plain"]), ok());
    assert_eq!(r.cmd(&["TYPE", "h2"]), Frame::Simple(b"string".to_vec()));
}

#[test]
fn key_commands() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&[
        "MSET", "a", "1", "b", "2", "user:1", "x", "user:2", "y", "user:10", "z",
    ]);
    assert_eq!(r.cmd(&["EXISTS", "a", "a", "nope"]), int(2));
    assert_eq!(r.cmd(&["TOUCH", "a", "nope"]), int(1));
    assert_eq!(r.cmd(&["TYPE", "a"]), Frame::Simple(b"string".to_vec()));
    assert_eq!(r.cmd(&["TYPE", "nope"]), Frame::Simple(b"none".to_vec()));
    assert_eq!(r.cmd(&["DBSIZE"]), int(5));
    let Frame::Array(mut keys) = r.cmd(&["KEYS", "user:?"]) else {
        panic!()
    };
    keys.sort_by_key(|f| format!("{f:?}"));
    assert_eq!(keys, vec![bulk("user:1"), bulk("user:2")]);
    let Frame::Array(keys) = r.cmd(&["KEYS", "user:[^2]*"]) else {
        panic!()
    };
    assert_eq!(keys.len(), 2);
    assert_eq!(r.cmd(&["DEL", "a", "b", "nope"]), int(2));
    assert_eq!(r.cmd(&["UNLINK", "user:10"]), int(1));
    assert_eq!(r.cmd(&["RENAME", "nope", "x"]), err("ERR no such key"));
    assert_eq!(r.cmd(&["RENAME", "user:1", "u1"]), ok());
    assert_eq!(r.cmd(&["RENAMENX", "u1", "user:2"]), int(0));
    assert_eq!(r.cmd(&["RENAMENX", "u1", "u2"]), int(1));
    assert_eq!(r.cmd(&["GET", "u2"]), bulk("x"));
    let rk = r.cmd(&["RANDOMKEY"]);
    assert!(rk == bulk("u2") || rk == bulk("user:2"), "{rk:?}");
    assert_eq!(r.cmd(&["COPY", "u2", "u3"]), int(1));
    assert_eq!(r.cmd(&["COPY", "u2", "u3"]), int(0));
    assert_eq!(r.cmd(&["COPY", "u2", "u3", "REPLACE"]), int(1));
    assert_eq!(
        r.cmd(&["COPY", "u2", "u2"]),
        err("ERR source and destination objects are the same")
    );
    assert_eq!(r.cmd(&["COPY", "u2", "u2", "DB", "3"]), int(1));
    assert_eq!(
        r.cmd(&["COPY", "u2", "x", "DB", "99"]),
        err("ERR DB index is out of range")
    );
    assert_eq!(r.cmd(&["MOVE", "u3", "3"]), int(1));
    assert_eq!(r.cmd(&["MOVE", "u3", "3"]), int(0));
    assert_eq!(
        r.cmd(&["MOVE", "u2", "0"]),
        err("ERR source and destination objects are the same")
    );
    assert_eq!(r.cmd(&["SELECT", "3"]), ok());
    assert_eq!(r.cmd(&["DBSIZE"]), int(2));
    assert_eq!(
        r.cmd(&["SELECT", "16"]),
        err("ERR DB index is out of range")
    );
    assert_eq!(r.cmd(&["SWAPDB", "0", "3"]), ok());
    assert_eq!(
        r.cmd(&["EXISTS", "user:2"]),
        int(1),
        "db 3 now holds what db 0 held"
    );
    assert_eq!(
        r.cmd(&["SWAPDB", "x", "1"]),
        err("ERR invalid first DB index")
    );
    assert_eq!(r.cmd(&["FLUSHDB"]), ok());
    assert_eq!(r.cmd(&["DBSIZE"]), int(0));
    assert_eq!(r.cmd(&["SELECT", "0"]), ok());
    assert_eq!(r.cmd(&["DBSIZE"]), int(2));
    assert_eq!(r.cmd(&["FLUSHALL", "BAD"]), err("ERR syntax error"));
    assert_eq!(r.cmd(&["FLUSHALL"]), ok());
    assert_eq!(r.cmd(&["DBSIZE"]), int(0));
    assert_eq!(r.cmd(&["RANDOMKEY"]), Frame::NullBulk);
}

#[test]
fn scan_visits_every_key_once_with_match_and_type() {
    let s = TestServer::start();
    let mut c = s.client();
    for i in 0..500 {
        let _: () = c.set(format!("k:{i}"), i).unwrap();
    }
    let _: () = c.set("other", 1).unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("k:*")
            .arg("COUNT")
            .arg(37)
            .arg("TYPE")
            .arg("string")
            .query(&mut c)
            .unwrap();
        for k in keys {
            assert!(k.starts_with("k:"));
            seen.insert(k);
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(seen.len(), 500);
    let (_, keys): (u64, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("COUNT")
        .arg(10000)
        .arg("TYPE")
        .arg("hash")
        .query(&mut c)
        .unwrap();
    assert!(keys.is_empty());
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SCAN", "x"]), err("ERR invalid cursor"));
    assert_eq!(r.cmd(&["SCAN", "0", "COUNT", "0"]), err("ERR syntax error"));
}

#[test]
fn object_subcommands() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["SET", "i", "123"]);
    r.cmd(&["SET", "s", "hello"]);
    r.cmd(&["SET", "l", &"x".repeat(100)]);
    assert_eq!(r.cmd(&["OBJECT", "ENCODING", "i"]), bulk("int"));
    assert_eq!(r.cmd(&["OBJECT", "ENCODING", "s"]), bulk("embstr"));
    assert_eq!(r.cmd(&["OBJECT", "ENCODING", "l"]), bulk("raw"));
    assert_eq!(r.cmd(&["OBJECT", "ENCODING", "none"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["OBJECT", "REFCOUNT", "i"]), int(2147483647));
    assert_eq!(r.cmd(&["OBJECT", "REFCOUNT", "l"]), int(1));
    assert_eq!(r.cmd(&["OBJECT", "IDLETIME", "l"]), int(0));
    assert!(
        matches!(r.cmd(&["OBJECT", "FREQ", "l"]), Frame::Error(e) if e.starts_with(b"ERR An LFU maxmemory policy is not selected"))
    );
    assert!(matches!(r.cmd(&["OBJECT", "HELP"]), Frame::Array(a) if a.len() > 4));
}

#[test]
fn expiry_commands() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["SET", "k", "v"]);
    assert_eq!(r.cmd(&["TTL", "k"]), int(-1));
    assert_eq!(r.cmd(&["TTL", "none"]), int(-2));
    assert_eq!(r.cmd(&["EXPIRE", "none", "10"]), int(0));
    assert_eq!(r.cmd(&["EXPIRE", "k", "100", "XX"]), int(0));
    assert_eq!(r.cmd(&["EXPIRE", "k", "100", "GT"]), int(0));
    assert_eq!(r.cmd(&["EXPIRE", "k", "100", "NX"]), int(1));
    assert_eq!(r.cmd(&["EXPIRE", "k", "200", "NX"]), int(0));
    assert_eq!(r.cmd(&["EXPIRE", "k", "50", "GT"]), int(0));
    assert_eq!(r.cmd(&["EXPIRE", "k", "500", "GT"]), int(1));
    assert_eq!(r.cmd(&["EXPIRE", "k", "600", "LT"]), int(0));
    assert_eq!(r.cmd(&["PEXPIRE", "k", "300000", "LT"]), int(1));
    assert_eq!(r.cmd(&["TTL", "k"]), int(300));
    let pttl = match r.cmd(&["PTTL", "k"]) {
        Frame::Integer(n) => n,
        f => panic!("{f:?}"),
    };
    assert!((299_000..=300_000).contains(&pttl));
    assert_eq!(
        r.cmd(&["EXPIRE", "k", "1", "NX", "XX"]),
        err("ERR NX and XX, GT or LT options at the same time are not compatible")
    );
    assert_eq!(
        r.cmd(&["EXPIRE", "k", "1", "GT", "LT"]),
        err("ERR GT and LT options at the same time are not compatible")
    );
    assert_eq!(
        r.cmd(&["EXPIRE", "k", "1", "FOO"]),
        err("ERR Unsupported option FOO")
    );
    assert_eq!(
        r.cmd(&["EXPIRE", "k", "9223372036854775807"]),
        err("ERR invalid expire time in 'expire' command")
    );
    assert_eq!(r.cmd(&["PEXPIREAT", "k", "99999999999999"]), int(1));
    assert_eq!(r.cmd(&["PEXPIRETIME", "k"]), int(99999999999999));
    assert_eq!(r.cmd(&["EXPIRETIME", "k"]), int(100000000000));
    assert_eq!(r.cmd(&["PERSIST", "k"]), int(1));
    assert_eq!(r.cmd(&["PERSIST", "k"]), int(0));
    assert_eq!(r.cmd(&["EXPIRETIME", "k"]), int(-1));
    assert_eq!(r.cmd(&["EXPIREAT", "k", "1"]), int(1));
    assert_eq!(r.cmd(&["EXISTS", "k"]), int(0));
    r.cmd(&["SET", "k", "v"]);
    assert_eq!(r.cmd(&["EXPIRE", "k", "-1"]), int(1));
    assert_eq!(r.cmd(&["GET", "k"]), Frame::NullBulk);
}

#[test]
fn ttls_expire() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["SET", "a", "1", "PX", "100"]);
    r.cmd(&["SET", "b", "1"]);
    r.cmd(&["PEXPIRE", "b", "100"]);
    r.cmd(&["SET", "c", "1", "EX", "100"]);
    assert!(eventually(Duration::from_secs(5), || {
        r.cmd(&["EXISTS", "a", "b"]) == int(0)
    }));
    assert_eq!(r.cmd(&["GET", "a"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["TTL", "b"]), int(-2));
    assert_eq!(r.cmd(&["EXISTS", "c"]), int(1));
}

#[test]
fn connection_commands() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["PING"]), Frame::Simple(b"PONG".to_vec()));
    assert_eq!(r.cmd(&["PING", "hi"]), bulk("hi"));
    assert_eq!(
        r.cmd(&["PING", "a", "b"]),
        err("ERR wrong number of arguments for 'ping' command")
    );
    assert_eq!(r.cmd(&["ECHO", "x"]), bulk("x"));
    assert_eq!(
        r.cmd(&["HELLO", "4"]),
        err("NOPROTO unsupported protocol version")
    );
    assert_eq!(
        r.cmd(&["HELLO", "x"]),
        err("ERR Protocol version is not an integer or out of range")
    );
    assert_eq!(
        r.cmd(&["HELLO", "3", "FOO"]),
        err("ERR Syntax error in HELLO option 'FOO'")
    );
    assert_eq!(
        r.cmd(&["HELLO", "3", "AUTH", "bob", "pw"]),
        err("WRONGPASS invalid username-password pair or user is disabled.")
    );
    let Frame::Map(hello) = r.cmd(&["HELLO", "3", "AUTH", "default", "pw", "SETNAME", "me"]) else {
        panic!("HELLO 3 replies with a map")
    };
    let get = |k: &str| {
        hello
            .iter()
            .find(|(key, _)| *key == bulk(k))
            .map(|(_, v)| v.clone())
    };
    assert_eq!(get("server"), Some(bulk("redis")));
    assert_eq!(get("version"), Some(bulk("7.0.15")));
    assert_eq!(get("proto"), Some(int(3)));
    assert_eq!(get("mode"), Some(bulk("standalone")));
    assert_eq!(get("role"), Some(bulk("master")));
    assert_eq!(get("modules"), Some(arr(vec![])));
    // RESP3 now: nulls are `_`.
    assert_eq!(r.cmd(&["GET", "none"]), Frame::Null);
    assert_eq!(r.cmd(&["CLIENT", "GETNAME"]), bulk("me"));
    r.cmd(&["SELECT", "5"]);
    assert_eq!(r.cmd(&["RESET"]), Frame::Simple(b"RESET".to_vec()));
    assert_eq!(
        r.cmd(&["GET", "none"]),
        Frame::NullBulk,
        "RESET goes back to RESP2"
    );
    assert_eq!(r.cmd(&["CLIENT", "GETNAME"]), Frame::NullBulk);
    assert_eq!(
        r.cmd(&["SELECT", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(r.cmd(&["QUIT"]), ok());
    assert!(r.closed());
}

#[test]
fn client_commands() {
    let s = TestServer::start();
    let mut a = s.raw();
    let mut b = s.raw();
    let Frame::Integer(id_b) = b.cmd(&["CLIENT", "ID"]) else {
        panic!()
    };
    assert_eq!(a.cmd(&["CLIENT", "SETNAME", "alpha"]), ok());
    assert_eq!(
        a.cmd(&["CLIENT", "SETNAME", "a b"]),
        err("ERR Client names cannot contain spaces, newlines or special characters.")
    );
    assert_eq!(a.cmd(&["CLIENT", "SETINFO", "LIB-NAME", "mylib"]), ok());
    assert_eq!(a.cmd(&["CLIENT", "NO-EVICT", "on"]), ok());
    assert_eq!(
        a.cmd(&["CLIENT", "NO-EVICT", "maybe"]),
        err("ERR syntax error")
    );
    let Frame::Bulk(list) = a.cmd(&["CLIENT", "LIST"]) else {
        panic!()
    };
    let list = String::from_utf8(list).unwrap();
    assert_eq!(list.lines().count(), 2, "{list}");
    assert!(list.contains("name=alpha"), "{list}");
    assert!(list.contains("lib-name=mylib"), "{list}");
    let Frame::Bulk(me) = a.cmd(&["CLIENT", "INFO"]) else {
        panic!()
    };
    assert!(String::from_utf8(me).unwrap().contains("cmd=client"));
    assert_eq!(
        a.cmd(&["CLIENT", "KILL", "1.2.3.4:5"]),
        err("ERR No such client")
    );
    assert_eq!(a.cmd(&["CLIENT", "KILL", "ID", &id_b.to_string()]), int(1));
    assert!(b.closed());
    assert_eq!(a.cmd(&["PING"]), Frame::Simple(b"PONG".to_vec()));
}

#[test]
fn server_commands() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["SET", "k", "v", "EX", "100"]);
    let Frame::Bulk(info) = r.cmd(&["INFO"]) else {
        panic!()
    };
    let info = String::from_utf8(info).unwrap();
    for field in [
        "# Server\r\n",
        "redis_version:7.0.15\r\n",
        "arch_bits:64\r\n",
        "redis_mode:standalone\r\n",
        "connected_clients:1\r\n",
        "used_memory:",
        "total_commands_processed:",
        "role:master\r\n",
        "# Keyspace\r\ndb0:keys=1,expires=1,avg_ttl=0\r\n",
    ] {
        assert!(info.contains(field), "INFO lacks {field:?}:\n{info}");
    }
    assert!(info.contains(&format!("tcp_port:{}\r\n", s.addr().port())));
    let Frame::Bulk(only) = r.cmd(&["INFO", "keyspace"]) else {
        panic!()
    };
    assert!(String::from_utf8(only)
        .unwrap()
        .starts_with("# Keyspace\r\n"));
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "appendfsync"]),
        arr(vec![bulk("appendfsync"), bulk("everysec")])
    );
    assert_eq!(
        r.cmd(&["CONFIG", "SET", "hash-max-listpack-entries", "512"]),
        ok()
    );
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "hash-max-listpack-entries"]),
        arr(vec![bulk("hash-max-listpack-entries"), bulk("512")])
    );
    let Frame::Array(many) = r.cmd(&["CONFIG", "GET", "*max-*-entries"]) else {
        panic!()
    };
    assert!(many.len() >= 8);
    assert_eq!(
        r.cmd(&["CONFIG", "SET", "nope", "1"]),
        err("ERR Unknown option or number of arguments for CONFIG SET - 'nope'")
    );
    assert_eq!(
        r.cmd(&["CONFIG", "SET", "port", "1"]),
        err("ERR CONFIG SET failed (possibly related to argument 'port') - can't set immutable config")
    );
    assert_eq!(r.cmd(&["CONFIG", "SET", "appendfsync", "always"]), ok());
    assert_eq!(r.cmd(&["SET", "durable", "1"]), ok());
    assert_eq!(r.cmd(&["CONFIG", "RESETSTAT"]), ok());
    let Frame::Array(t) = r.cmd(&["TIME"]) else {
        panic!()
    };
    assert_eq!(t.len(), 2);
    assert!(matches!(r.cmd(&["LASTSAVE"]), Frame::Integer(n) if n > 1_600_000_000));
    assert_eq!(r.cmd(&["SAVE"]), ok());
    assert_eq!(
        r.cmd(&["BGSAVE"]),
        Frame::Simple(b"Background saving started".to_vec())
    );
    let started = std::time::Instant::now();
    assert_eq!(r.cmd(&["DEBUG", "SLEEP", "0.2"]), ok());
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(r.cmd(&["DEBUG", "RELOAD"]), ok());
    assert_eq!(r.cmd(&["GET", "durable"]), bulk("1"));
    assert_eq!(
        r.cmd(&["SHUTDOWN", "ABORT"]),
        err("ERR No shutdown in progress.")
    );
}

#[test]
fn command_introspection() {
    let s = TestServer::start();
    let mut r = s.raw();
    let Frame::Integer(count) = r.cmd(&["COMMAND", "COUNT"]) else {
        panic!()
    };
    assert!(count >= 60, "{count}");
    let Frame::Array(all) = r.cmd(&["COMMAND"]) else {
        panic!()
    };
    assert_eq!(all.len() as i64, count);
    let Frame::Array(info) = r.cmd(&["COMMAND", "INFO", "get", "nope"]) else {
        panic!()
    };
    assert_eq!(info[1], Frame::NullBulk);
    let Frame::Array(get) = &info[0] else {
        panic!()
    };
    assert_eq!(get.len(), 10);
    assert_eq!(get[0], bulk("get"));
    assert_eq!(get[1], int(2));
    assert_eq!(
        get[2],
        arr(vec![
            Frame::Simple(b"readonly".to_vec()),
            Frame::Simple(b"fast".to_vec())
        ])
    );
    assert_eq!((&get[3], &get[4], &get[5]), (&int(1), &int(1), &int(1)));
    let Frame::Array(list) = r.cmd(&["COMMAND", "LIST"]) else {
        panic!()
    };
    assert!(list.contains(&bulk("incrbyfloat")));
    let Frame::Array(docs) = r.cmd(&["COMMAND", "DOCS", "set"]) else {
        panic!()
    };
    assert_eq!(docs[0], bulk("set"));
    assert_eq!(
        r.cmd(&["COMMAND", "GETKEYS", "mset", "a", "1", "b", "2"]),
        arr(vec![bulk("a"), bulk("b")])
    );
}

#[test]
fn command_getkeys_finds_the_keys_of_commands_whose_keys_move() {
    let s = TestServer::start();
    let mut r = s.raw();
    let keys = |r: &mut common::Raw, cmd: &str| -> Frame {
        let mut args = vec!["COMMAND", "GETKEYS"];
        args.extend(cmd.split(' '));
        r.cmd(&args)
    };
    let names = |k: &[&str]| arr(k.iter().map(|k| bulk(k)).collect());
    // Each compared with redis-server 7.0.15.
    for (cmd, want) in [
        ("ZUNIONSTORE d 2 a b WEIGHTS 1 2", &["d", "a", "b"][..]),
        // numkeys read by C's atoi when not a plain integer: the
        // destination then comes last, as in Redis.
        ("ZINTERSTORE d 2x a b", &["a", "b", "d"]),
        ("ZDIFF 2 a b WITHSCORES", &["a", "b"]),
        ("SINTERCARD 2 a b LIMIT 1", &["a", "b"]),
        ("ZINTERCARD 1 a", &["a"]),
        ("LMPOP 2 a b LEFT COUNT 2", &["a", "b"]),
        ("BLMPOP 0 2 a b RIGHT", &["a", "b"]),
        ("ZMPOP 1 z MIN", &["z"]),
        ("BZMPOP 1.5 1 z MAX", &["z"]),
        ("SORT l BY w_* LIMIT 0 1 STORE d GET x STORE e", &["l", "e"]),
        ("SORT_RO l STORE d", &["l"]),
    ] {
        assert_eq!(keys(&mut r, cmd), names(want), "{cmd}");
    }
    for cmd in ["ZUNIONSTORE d 0 a", "ZUNIONSTORE d 3 a b", "LMPOP x a LEFT"] {
        assert_eq!(
            keys(&mut r, cmd),
            err("ERR Invalid arguments specified for command"),
            "{cmd}"
        );
    }
}

#[test]
fn concurrent_multi_db_commands_do_not_deadlock() {
    let s = TestServer::start();
    let addr = s.addr();
    let scripts: Vec<Vec<Vec<&'static str>>> = vec![
        vec![
            vec!["SET", "k", "v"],
            vec!["MOVE", "k", "1"],
            vec!["INCR", "n"],
        ],
        vec![
            vec!["SELECT", "1"],
            vec!["MOVE", "k", "0"],
            vec!["COPY", "k", "k2", "DB", "0", "REPLACE"],
        ],
        vec![
            vec!["SWAPDB", "0", "1"],
            vec!["DBSIZE"],
            vec!["SWAPDB", "1", "2"],
        ],
        vec![
            vec!["SELECT", "2"],
            vec!["FLUSHDB"],
            vec!["MSET", "k", "1", "n", "2"],
            vec!["RENAME", "k", "k3"],
        ],
        vec![
            vec!["DEBUG", "RELOAD"],
            vec!["FLUSHALL"],
            vec!["SET", "k", "v"],
        ],
    ];
    let threads: Vec<_> = scripts
        .into_iter()
        .map(|script| {
            std::thread::spawn(move || {
                let mut r = common::Raw::connect(addr);
                for _ in 0..15 {
                    for cmd in &script {
                        // Errors (e.g. RENAME of a missing key) are fine; a
                        // hang is not (the read times out after 10 s).
                        r.cmd(cmd);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a client hung or panicked");
    }
    assert_eq!(s.raw().cmd(&["PING"]), Frame::Simple(b"PONG".to_vec()));
}

#[test]
fn a_server_with_one_worker_thread_serves_blocking_and_plain_clients() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = basalt_server::Config::ephemeral(dir.path());
    config.threads = 1;
    let s = TestServer::start_with(config, dir);
    // A client parked in BLPOP must not stop the single worker from
    // serving another client, whose push then wakes it.
    let addr = s.addr();
    let blocked = std::thread::spawn(move || {
        let mut c = redis::Client::open(format!("redis://{addr}/"))
            .unwrap()
            .get_connection()
            .unwrap();
        let got: Option<(String, String)> =
            redis::cmd("BLPOP").arg("q").arg(5).query(&mut c).unwrap();
        got
    });
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut c = s.client();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    let v: String = redis::cmd("GET").arg("k").query(&mut c).unwrap();
    assert_eq!(v, "v");
    let _: i64 = redis::cmd("RPUSH").arg("q").arg("x").query(&mut c).unwrap();
    assert_eq!(
        blocked.join().unwrap(),
        Some(("q".to_string(), "x".to_string()))
    );
}

#[test]
fn lcs_answers_the_subsequence_its_length_and_the_matching_ranges() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["MSET", "key1", "ohmytext", "key2", "mynewtext"]);
    assert_eq!(r.cmd(&["LCS", "key1", "key2"]), bulk("mytext"));
    assert_eq!(r.cmd(&["LCS", "key1", "key2", "LEN"]), int(6));
    let range = |a: i64, b: i64| arr(vec![int(a), int(b)]);
    assert_eq!(
        r.cmd(&["LCS", "key1", "key2", "IDX"]),
        arr(vec![
            bulk("matches"),
            arr(vec![
                arr(vec![range(4, 7), range(5, 8)]),
                arr(vec![range(2, 3), range(0, 1)]),
            ]),
            bulk("len"),
            int(6),
        ])
    );
    assert_eq!(
        r.cmd(&[
            "LCS",
            "key1",
            "key2",
            "IDX",
            "MINMATCHLEN",
            "4",
            "WITHMATCHLEN"
        ]),
        arr(vec![
            bulk("matches"),
            arr(vec![arr(vec![range(4, 7), range(5, 8), int(4)])]),
            bulk("len"),
            int(6),
        ])
    );
    assert_eq!(
        r.cmd(&["LCS", "nokey", "key2"]),
        bulk(""),
        "missing is empty"
    );
    r.cmd(&["HSET", "h", "f", "v"]);
    assert_eq!(
        r.cmd(&["LCS", "key1", "h"]),
        err("ERR The specified keys must contain string values")
    );
    assert_eq!(
        r.cmd(&["LCS", "key1", "key2", "LEN", "IDX"]),
        err("ERR If you want both the length and indexes, please just use IDX.")
    );
    assert_eq!(
        r.cmd(&["LCS", "key1", "key2", "MINMATCHLEN"]),
        err("ERR syntax error")
    );
    // The table would pass proto-max-bulk-len (512 MB): refused, not built.
    let big = "a".repeat(12_000);
    r.cmd(&["MSET", "big1", &big, "big2", &big]);
    assert_eq!(
        r.cmd(&["LCS", "big1", "big2", "LEN"]),
        err("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len")
    );
}

#[test]
fn bitmaps_set_count_find_and_combine_bits_of_strings() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SETBIT", "b", "7", "1"]), int(0));
    assert_eq!(r.cmd(&["SETBIT", "b", "7", "1"]), int(1), "the old bit");
    assert_eq!(r.cmd(&["GET", "b"]), bulk("\x01"));
    assert_eq!(r.cmd(&["SETBIT", "b", "17", "1"]), int(0));
    assert_eq!(r.cmd(&["STRLEN", "b"]), int(3), "grown with zero bytes");
    assert_eq!(r.cmd(&["GETBIT", "b", "17"]), int(1));
    assert_eq!(r.cmd(&["GETBIT", "b", "1000"]), int(0));
    r.cmd(&["SET", "f", "foobar"]);
    assert_eq!(r.cmd(&["BITCOUNT", "f"]), int(26));
    assert_eq!(r.cmd(&["BITCOUNT", "f", "1", "1"]), int(6));
    assert_eq!(r.cmd(&["BITCOUNT", "f", "5", "30", "BIT"]), int(17));
    r.cmd(&["SET", "p", "\u{0}\u{ff}\u{f0}"]);
    assert_eq!(r.cmd(&["BITPOS", "p", "1"]), int(8));
    r.cmd(&["SET", "ones", "\u{7f}"]);
    r.cmd(&["SETBIT", "ones", "0", "1"]);
    assert_eq!(
        r.cmd(&["BITPOS", "ones", "0"]),
        int(8),
        "zeros after the end"
    );
    assert_eq!(
        r.cmd(&["BITPOS", "ones", "0", "0", "-1"]),
        int(-1),
        "not with an end"
    );
    assert_eq!(r.cmd(&["BITPOS", "missing", "1"]), int(-1));
    r.cmd(&["SET", "x", "\u{f}"]);
    r.cmd(&["SET", "y", "\u{3c}"]);
    assert_eq!(r.cmd(&["BITOP", "AND", "d", "x", "y"]), int(1));
    assert_eq!(r.cmd(&["GET", "d"]), bulk("\u{c}"));
    assert_eq!(r.cmd(&["BITOP", "XOR", "d", "x", "y"]), int(1));
    assert_eq!(r.cmd(&["GET", "d"]), bulk("\u{33}"));
    assert_eq!(r.cmd(&["BITOP", "OR", "d", "nokey"]), int(0));
    assert_eq!(r.cmd(&["EXISTS", "d"]), int(0), "an empty result deletes");
    assert_eq!(
        r.cmd(&["BITOP", "NOT", "d", "x", "y"]),
        err("ERR BITOP NOT must be called with a single source key.")
    );
    assert_eq!(
        r.cmd(&["SETBIT", "b", "-1", "1"]),
        err("ERR bit offset is not an integer or out of range")
    );
    assert_eq!(
        r.cmd(&["SETBIT", "b", "1", "2"]),
        err("ERR bit is not an integer or out of range")
    );
    assert_eq!(
        r.cmd(&["BITPOS", "b", "2"]),
        err("ERR The bit argument must be 1 or 0.")
    );
    r.cmd(&["HSET", "h", "f", "v"]);
    let wrongtype = err("WRONGTYPE Operation against a key holding the wrong kind of value");
    assert_eq!(r.cmd(&["SETBIT", "h", "1", "1"]), wrongtype);
    assert_eq!(r.cmd(&["BITOP", "OR", "d", "x", "h"]), wrongtype);
}

#[test]
fn bitfields_read_write_and_overflow_integers_at_any_bit_offset() {
    let s = TestServer::start();
    let mut r = s.raw();
    let null = Frame::NullBulk;
    assert_eq!(
        r.cmd(&["BITFIELD", "bf", "SET", "u8", "#1", "200", "GET", "u8", "8", "GET", "i8", "8"]),
        arr(vec![int(0), int(200), int(-56)]),
        "SET answers the old value; #1 is the second u8"
    );
    assert_eq!(r.cmd(&["GET", "bf"]), Frame::Bulk(vec![0, 200]));
    assert_eq!(
        r.cmd(&[
            "BITFIELD", "bf", "INCRBY", "u8", "8", "100", "OVERFLOW", "SAT", "INCRBY", "u8", "8",
            "250"
        ]),
        arr(vec![int(44), int(255)]),
        "wraps by default, then saturates"
    );
    assert_eq!(
        r.cmd(&[
            "BITFIELD", "bf", "OVERFLOW", "FAIL", "INCRBY", "i8", "8", "-200", "INCRBY", "i8", "8",
            "-1"
        ]),
        arr(vec![null.clone(), int(-2)]),
        "FAIL refuses the overflowing write only"
    );
    assert_eq!(
        r.cmd(&[
            "BITFIELD",
            "bf",
            "SET",
            "i64",
            "0",
            "-9223372036854775808",
            "INCRBY",
            "i64",
            "0",
            "-1"
        ]),
        arr(vec![int(0xfe << 48), int(9223372036854775807)]),
        "i64 wraps at its limits"
    );
    assert_eq!(
        r.cmd(&["BITFIELD_RO", "nokey", "GET", "u63", "5", "GET", "i1", "0"]),
        arr(vec![int(0), int(0)]),
        "a missing key reads as zeros and is not created"
    );
    assert_eq!(r.cmd(&["EXISTS", "nokey"]), int(0));
    assert_eq!(
        r.cmd(&["BITFIELD", "grow", "OVERFLOW", "FAIL", "SET", "u2", "100", "7"]),
        arr(vec![null])
    );
    assert_eq!(
        r.cmd(&["STRLEN", "grow"]),
        int(13),
        "grown to the written bit even on FAIL"
    );
    let before = r.cmd(&["GET", "bf"]);
    for (args, e) in [
        (vec!["SET", "u64", "0", "1"], "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is."),
        (vec!["SET", "I8", "0", "1"], "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is."),
        (vec!["SET", "u8", "-1", "1"], "ERR bit offset is not an integer or out of range"),
        (vec!["SET", "u8", "0", "x"], "ERR value is not an integer or out of range"),
        (vec!["OVERFLOW", "MAYBE"], "ERR Invalid OVERFLOW type specified"),
        (vec!["SET", "u8", "0", "1", "GET", "u8"], "ERR syntax error"),
    ] {
        let mut cmd = vec!["BITFIELD", "bf"];
        cmd.extend(args.iter().copied());
        assert_eq!(r.cmd(&cmd), err(e), "{args:?}");
    }
    assert_eq!(
        r.cmd(&["GET", "bf"]),
        before,
        "a rejected command writes nothing"
    );
    assert_eq!(
        r.cmd(&["BITFIELD_RO", "bf", "GET", "u8", "0", "SET", "u8", "0", "1"]),
        err("ERR BITFIELD_RO only supports the GET subcommand")
    );
    r.cmd(&["LPUSH", "l", "x"]);
    assert_eq!(
        r.cmd(&["BITFIELD", "l", "GET", "u8", "0"]),
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
}

/// Ranged writes that need several records (a range across a segment
/// boundary, a conversion) take the write batch before the key's lock, as
/// batched commands do; taking them the other way round deadlocked the
/// server within a few dozen rounds of these three clients.
#[test]
fn ranged_writes_beside_batched_commands_on_one_key_never_deadlock() {
    let s = TestServer::start();
    let mut setup = s.client();
    let big = "x".repeat(10_000);
    let _: () = redis::cmd("SETRANGE")
        .arg("k")
        .arg(0)
        .arg(&big)
        .query(&mut setup)
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let mut c = s.client();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            std::thread::spawn(move || {
                for i in 0..300 {
                    if std::time::Instant::now() > deadline {
                        break;
                    }
                    let r: redis::RedisResult<redis::Value> = match w {
                        0 => redis::cmd("SETRANGE")
                            .arg("k")
                            .arg(508)
                            .arg("abcdefgh")
                            .query(&mut c),
                        1 => redis::cmd("SETBIT")
                            .arg("k")
                            .arg(7 + i % 64)
                            .arg(1)
                            .query(&mut c),
                        _ => redis::pipe()
                            .atomic()
                            .cmd("APPEND")
                            .arg("k")
                            .arg("yz")
                            .cmd("SETRANGE")
                            .arg("k")
                            .arg(1020)
                            .arg("0123456789")
                            .query(&mut c),
                    };
                    r.unwrap_or_else(|e| panic!("worker {w} round {i}: {e}"));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let len: i64 = redis::cmd("STRLEN").arg("k").query(&mut setup).unwrap();
    assert!(len >= 10_000);
}
