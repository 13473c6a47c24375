//! HyperLogLog through a real server: PFADD, PFCOUNT, PFMERGE, PFDEBUG and
//! PFSELFTEST, with sketches compared byte for byte with ones captured from
//! redis-server 7.0.15.

use crate::common;

use basalt_resp::Frame;
use common::{err, ok, TestServer};

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn elements(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("e{i}")).collect()
}

fn cmd_bytes(r: &mut common::Raw, args: &[&[u8]]) -> Frame {
    r.send_cmd(args);
    r.read()
}

fn pfadd(r: &mut common::Raw, key: &str, els: &[String]) -> Frame {
    let mut cmd = vec!["PFADD", key];
    cmd.extend(els.iter().map(|s| s.as_str()));
    r.cmd(&cmd)
}

#[test]
fn a_small_sketch_has_redis_bytes_and_pfcount_caches_its_count_in_the_header() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["PFADD", "h", "a", "b", "c"]), int(1));
    assert_eq!(r.cmd(&["PFADD", "h", "a"]), int(0), "no register changed");
    // Captured from redis-server 7.0.15: PFADD h a b c; GET h.
    let stale = hex("48594c4c01000000000000000000008060f38050b1844bfb80425a");
    assert_eq!(r.cmd(&["GET", "h"]), Frame::Bulk(stale));
    assert_eq!(r.cmd(&["PFCOUNT", "h"]), int(3));
    let cached = hex("48594c4c01000000030000000000000060f38050b1844bfb80425a");
    assert_eq!(
        r.cmd(&["GET", "h"]),
        Frame::Bulk(cached),
        "count 3, cache valid"
    );
    assert_eq!(
        r.cmd(&["PFDEBUG", "ENCODING", "h"]),
        Frame::Simple("sparse".into())
    );
    assert_eq!(
        r.cmd(&["PFDEBUG", "DECODE", "h"]),
        Frame::Bulk(b"Z:8436 v:1,1 Z:4274 v:2,1 Z:3068 v:1,1 Z:603".to_vec())
    );
}

#[test]
fn a_big_sketch_turns_dense_and_counts_and_merges_as_redis_does() {
    let s = TestServer::start();
    let mut r = s.raw();
    pfadd(&mut r, "d", &elements(5000));
    assert_eq!(
        r.cmd(&["PFDEBUG", "ENCODING", "d"]),
        Frame::Simple("dense".into())
    );
    // redis-server 7.0.15 for the same 5000 elements.
    assert_eq!(r.cmd(&["PFCOUNT", "d"]), int(4968));
    let Frame::Array(regs) = r.cmd(&["PFDEBUG", "GETREG", "d"]) else {
        panic!("GETREG answers an array");
    };
    assert_eq!(regs.len(), 16384);
    let (mut sum, mut weighted) = (0i64, 0i64);
    for (i, f) in regs.iter().enumerate() {
        let Frame::Integer(v) = f else {
            panic!("{f:?}")
        };
        sum += v;
        weighted += i as i64 * v;
    }
    assert_eq!((sum, weighted), (8952, 73870353), "Redis's registers");
    r.cmd(&["PFADD", "h", "a", "b", "c"]);
    assert_eq!(r.cmd(&["PFCOUNT", "h", "d"]), int(4972), "the union");
    assert_eq!(r.cmd(&["PFCOUNT", "h", "d", "missing"]), int(4972));
    assert_eq!(r.cmd(&["PFMERGE", "u", "h", "d"]), ok());
    assert_eq!(r.cmd(&["PFCOUNT", "u"]), int(4972));
    assert_eq!(
        r.cmd(&["PFDEBUG", "ENCODING", "u"]),
        Frame::Simple("dense".into())
    );
    assert_eq!(r.cmd(&["PFMERGE", "empty"]), ok(), "a merge of nothing");
    assert_eq!(r.cmd(&["PFCOUNT", "empty"]), int(0));
    assert_eq!(r.cmd(&["PFDEBUG", "TODENSE", "h"]), int(1));
    assert_eq!(r.cmd(&["PFDEBUG", "TODENSE", "h"]), int(0), "already dense");
    assert_eq!(r.cmd(&["PFCOUNT", "h"]), int(3));
}

#[test]
fn sketches_and_their_expiry_survive_a_restart() {
    let s = TestServer::start();
    let mut r = s.raw();
    pfadd(&mut r, "d", &elements(3000));
    r.cmd(&["PFADD", "s", "x", "y"]);
    r.cmd(&["EXPIRE", "s", "1000"]);
    let before = (r.cmd(&["GET", "d"]), r.cmd(&["GET", "s"]));
    let s = s.restart();
    let mut r = s.raw();
    assert_eq!((r.cmd(&["GET", "d"]), r.cmd(&["GET", "s"])), before);
    assert_eq!(r.cmd(&["PFCOUNT", "s"]), int(2));
    assert!(
        matches!(r.cmd(&["TTL", "s"]), Frame::Integer(t) if t > 900),
        "PFCOUNT keeps the TTL"
    );
}

#[test]
fn values_that_are_not_sketches_are_refused_and_left_unchanged() {
    let s = TestServer::start();
    let mut r = s.raw();
    let not_hll = err("WRONGTYPE Key is not a valid HyperLogLog string value.");
    r.cmd(&["SET", "str", "hello"]);
    assert_eq!(r.cmd(&["PFADD", "str", "a"]), not_hll);
    assert_eq!(r.cmd(&["PFCOUNT", "str"]), not_hll);
    assert_eq!(r.cmd(&["PFMERGE", "str", "x"]), not_hll);
    assert_eq!(r.cmd(&["PFMERGE", "dst", "str"]), not_hll);
    assert_eq!(r.cmd(&["EXISTS", "dst"]), int(0), "nothing created");
    assert_eq!(r.cmd(&["GET", "str"]), Frame::Bulk(b"hello".to_vec()));
    r.cmd(&["RPUSH", "list", "a"]);
    assert_eq!(
        r.cmd(&["PFADD", "list", "a"]),
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    // A sparse sketch whose runs cover one register too few.
    let mut bad = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80".to_vec();
    bad.extend_from_slice(&[0x7f, 0xfe]);
    cmd_bytes(&mut r, &[b"SET", b"bad", &bad]);
    let corrupt = err("INVALIDOBJ Corrupted HLL object detected");
    assert_eq!(r.cmd(&["PFCOUNT", "bad"]), corrupt);
    assert_eq!(r.cmd(&["PFCOUNT", "bad", "str2"]), corrupt);
    assert_eq!(r.cmd(&["PFDEBUG", "TODENSE", "bad"]), corrupt);
    let mut many = vec![b"PFADD".to_vec(), b"bad".to_vec()];
    many.extend(elements(3000).into_iter().map(String::into_bytes));
    let many: Vec<&[u8]> = many.iter().map(|v| &v[..]).collect();
    assert_eq!(cmd_bytes(&mut r, &many), corrupt);
    assert_eq!(
        r.cmd(&["GET", "bad"]),
        Frame::Bulk(bad),
        "a failed PFADD stores nothing"
    );
    assert_eq!(
        r.cmd(&["PFDEBUG", "GETREG", "nokey"]),
        err("ERR The specified key does not exist")
    );
    r.cmd(&["PFADD", "h", "a"]);
    assert_eq!(
        r.cmd(&["PFDEBUG", "NOPE", "h"]),
        err("ERR Unknown PFDEBUG subcommand 'NOPE'")
    );
    assert_eq!(
        r.cmd(&["PFDEBUG", "DECODE", "h", "x"]),
        err("ERR wrong number of arguments for 'pfdebug' command")
    );
    assert_eq!(r.cmd(&["PFSELFTEST"]), ok());
}

#[test]
fn a_pfadd_that_raises_no_register_is_a_read_and_one_that_raises_writes() {
    // Into a dense sketch kept in segments, a PFADD whose registers are
    // all high enough is answered from the thread's cache without the
    // key's lock: it must answer 0 and leave no trace (no event, no WATCH
    // touch), while one that raises a register still writes.
    let s = TestServer::start();
    let mut r = s.raw();
    pfadd(&mut r, "d", &elements(5000));
    // Small PFADDs take the ranged path: the sketch becomes segments and
    // the registers they raise are patches this connection's thread caches.
    let again: Vec<String> = (0..300).map(|i| format!("x{i}")).collect();
    let mut raised = 0;
    for e in &again {
        if r.cmd(&["PFADD", "d", e]) == int(1) {
            raised += 1;
        }
    }
    assert!(raised > 0, "some of 300 new elements raise a register");
    let count = r.cmd(&["PFCOUNT", "d"]);
    let mut watcher = s.raw();
    assert_eq!(watcher.cmd(&["WATCH", "d"]), ok());
    let mut events = s.raw();
    assert_eq!(
        events.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KA"]),
        ok()
    );
    events.cmd(&["SUBSCRIBE", "__keyspace@0__:d"]);
    for e in &again {
        assert_eq!(r.cmd(&["PFADD", "d", e]), int(0), "{e} is in already");
    }
    assert_eq!(
        r.cmd(&["PFADD", "d", "x1", "x2", "x3"]),
        int(0),
        "several elements"
    );
    assert_eq!(r.cmd(&["PFCOUNT", "d"]), count, "the count is the same");
    assert_eq!(watcher.cmd(&["MULTI"]), ok());
    watcher.cmd(&["PING"]);
    assert_eq!(
        watcher.cmd(&["EXEC"]),
        Frame::Array(vec![Frame::Simple("PONG".into())]),
        "no PFADD of nothing touched the watched key"
    );
    assert_eq!(r.cmd(&["EXPIRE", "d", "1000"]), int(1));
    let Frame::Array(first) = events.read() else {
        panic!("a keyspace message")
    };
    assert_eq!(
        first.last(),
        Some(&common::bulk("expire")),
        "no event before EXPIRE's"
    );
    // A fresh element that raises a register is still written.
    let fresh = (0..500)
        .map(|i| format!("fresh{i}"))
        .find(|e| r.cmd(&["PFADD", "d", e]) == int(1))
        .expect("one of 500 fresh elements raises a register");
    assert_eq!(r.cmd(&["PFADD", "d", &fresh]), int(0));
    assert_ne!(r.cmd(&["PFCOUNT", "d"]), count, "the count moved");
    let Frame::Array(next) = events.read() else {
        panic!("a keyspace message")
    };
    assert_eq!(next.last(), Some(&common::bulk("pfadd")));
}
