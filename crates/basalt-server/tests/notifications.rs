//! Keyspace notifications: `notify-keyspace-events` validation, the two
//! channel kinds, the exact events (and their order) of a representative
//! command of every family, and `expired` events from the active sweep.

use crate::common;

use std::time::{Duration, Instant};

use basalt_resp::Frame;
use common::{bulk, err, ok, Raw, TestServer};

fn text(f: &Frame) -> String {
    match f {
        Frame::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("not a bulk: {other:?}"),
    }
}

/// A subscriber to every key-event channel, reporting `event key` (or
/// `event@db key` outside db 0) in arrival order.
struct Events {
    sub: Raw,
    ctl: Raw,
}

impl Events {
    fn new(s: &TestServer, flags: &str) -> Events {
        let mut ctl = s.raw();
        assert_eq!(
            ctl.cmd(&["CONFIG", "SET", "notify-keyspace-events", flags]),
            ok()
        );
        let mut sub = s.raw();
        sub.send_cmd(&[b"PSUBSCRIBE", b"__keyevent@*__:*"]);
        let _ = sub.read();
        Events { sub, ctl }
    }

    /// Every event since the last call: a sentinel published after them
    /// marks the end (delivery to one client keeps publish order).
    fn take(&mut self) -> Vec<String> {
        assert_eq!(
            self.ctl.cmd(&["PUBLISH", "__keyevent@0__:sentinel", "end"]),
            Frame::Integer(1)
        );
        let mut out = Vec::new();
        loop {
            let Frame::Array(items) = self.sub.read() else {
                panic!("not a message");
            };
            let channel = text(&items[2]);
            let key = text(&items[3]);
            let rest = channel
                .strip_prefix("__keyevent@")
                .expect("keyevent channel");
            let (db, event) = rest.split_once("__:").expect("db and event");
            if event == "sentinel" {
                return out;
            }
            out.push(if db == "0" {
                format!("{event} {key}")
            } else {
                format!("{event}@{db} {key}")
            });
        }
    }
}

fn run(c: &mut Raw, cmds: &[&[&str]]) {
    for cmd in cmds {
        let r = c.cmd(cmd);
        assert!(!matches!(r, Frame::Error(_)), "{cmd:?}: {r:?}");
    }
}

#[test]
fn keyspace_channel_carries_the_event_and_keyevent_channel_the_key() {
    let s = TestServer::start();
    let mut c = s.raw();
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]),
        ok()
    );
    let mut sub = s.raw();
    sub.send_cmd(&[b"SUBSCRIBE", b"__keyspace@0__:mykey", b"__keyevent@0__:set"]);
    let _ = (sub.read(), sub.read());
    assert_eq!(c.cmd(&["SET", "mykey", "v"]), ok());
    assert_eq!(
        sub.read(),
        Frame::Array(vec![
            bulk("message"),
            bulk("__keyspace@0__:mykey"),
            bulk("set")
        ])
    );
    assert_eq!(
        sub.read(),
        Frame::Array(vec![
            bulk("message"),
            bulk("__keyevent@0__:set"),
            bulk("mykey")
        ])
    );
    // Only K: the key-event channel stays quiet.
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "K$"]),
        ok()
    );
    assert_eq!(c.cmd(&["SET", "mykey", "w"]), ok());
    assert_eq!(
        c.cmd(&["PUBLISH", "__keyevent@0__:set", "marker"]),
        Frame::Integer(1)
    );
    assert_eq!(
        sub.read(),
        Frame::Array(vec![
            bulk("message"),
            bulk("__keyspace@0__:mykey"),
            bulk("set")
        ])
    );
    assert_eq!(
        sub.read(),
        Frame::Array(vec![
            bulk("message"),
            bulk("__keyevent@0__:set"),
            bulk("marker")
        ])
    );
}

#[test]
fn notify_keyspace_events_is_validated_and_normalised_like_redis() {
    let s = TestServer::start();
    let mut c = s.raw();
    let get = |c: &mut Raw| match c.cmd(&["CONFIG", "GET", "notify-keyspace-events"]) {
        Frame::Array(v) => text(&v[1]),
        other => panic!("{other:?}"),
    };
    assert_eq!(get(&mut c), "");
    for (set, shown) in [
        ("KEA", "AKE"),
        ("Ex", "xE"),
        ("Kg$lshzxetd", "AK"),
        ("mE", "Em"),
        ("KEn", "nKE"),
        ("nKEA", "AKE"),
        ("", ""),
    ] {
        assert_eq!(
            c.cmd(&["CONFIG", "SET", "notify-keyspace-events", set]),
            ok()
        );
        assert_eq!(get(&mut c), shown, "{set}");
    }
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]),
        ok()
    );
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KE?"]),
        err("ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")
    );
    assert_eq!(get(&mut c), "AKE", "a rejected value changes nothing");
}

#[test]
fn nothing_is_published_while_notifications_are_off() {
    let s = TestServer::start();
    let mut ev = Events::new(&s, "");
    let mut c = s.raw();
    run(
        &mut c,
        &[&["SET", "k", "v"], &["DEL", "k"], &["LPUSH", "l", "a"]],
    );
    assert_eq!(ev.take(), Vec::<String>::new());
    // Classes without K or E publish nothing either.
    assert_eq!(
        ev.ctl
            .cmd(&["CONFIG", "SET", "notify-keyspace-events", "A"]),
        ok()
    );
    run(&mut c, &[&["SET", "k", "v"]]);
    assert_eq!(ev.take(), Vec::<String>::new());
}

#[test]
fn string_commands_emit_redis_events() {
    let s = TestServer::start();
    let mut ev = Events::new(&s, "KEA");
    let mut c = s.raw();
    run(
        &mut c,
        &[
            &["SET", "s", "1", "EX", "100"],
            &["SET", "s", "2", "KEEPTTL"],
            &["SETNX", "s", "x"],
            &["SETNX", "n", "x"],
            &["SETEX", "e", "100", "v"],
            &["APPEND", "s", "0"],
            &["SETRANGE", "s", "0", "9"],
            &["SETRANGE", "s", "0", ""],
            &["INCR", "i"],
            &["DECRBY", "i", "5"],
            &["INCRBYFLOAT", "f", "1.5"],
            &["GETSET", "s", "3"],
            &["MSET", "a", "1", "b", "2"],
            &["MSETNX", "a", "1", "z", "2"],
            &["GETEX", "s", "PX", "100000"],
            &["GETEX", "s", "PERSIST"],
            &["GETEX", "s", "PERSIST"],
            &["GETDEL", "s"],
            &["GETDEL", "s"],
        ],
    );
    assert_eq!(
        ev.take(),
        [
            "set s",
            "expire s",
            "set s",
            "set n",
            "set e",
            "expire e",
            "append s",
            "setrange s",
            "incrby i",
            "incrby i",
            "incrbyfloat f",
            "set s",
            "set a",
            "set b",
            "expire s",
            "persist s",
            "del s",
        ]
    );
}

#[test]
fn a_setbit_that_changes_nothing_publishes_nothing_and_leaves_watch_alone() {
    // redis-server 7.0.15, side by side: a SETBIT whose bit is already as
    // asked, inside the string, writes nothing (no event, WATCH intact,
    // the key's version unchanged); one that creates or grows the string
    // publishes even when it sets a 0. For small and for segmented
    // (large, cached) values alike.
    let s = TestServer::start();
    let mut ev = Events::new(&s, "KEA");
    let mut c = s.raw();
    for (key, at) in [("small", 9u64), ("large", 300_000)] {
        let version = |c: &mut Raw| c.cmd(&["VERSION", key]);
        let grow = (at + 8).to_string();
        let at_s = at.to_string();
        let below = (at - 2).to_string();
        assert_eq!(c.cmd(&["SETBIT", key, &at_s, "1"]), Frame::Integer(0));
        let before = version(&mut c);
        // Already 1, already 0 (inside the value): nothing happens.
        assert_eq!(c.cmd(&["SETBIT", key, &at_s, "1"]), Frame::Integer(1));
        assert_eq!(c.cmd(&["SETBIT", key, &below, "0"]), Frame::Integer(0));
        assert_eq!(version(&mut c), before);
        // A WATCHed key survives it.
        assert_eq!(c.cmd(&["WATCH", key]), ok());
        assert_eq!(c.cmd(&["SETBIT", key, &at_s, "1"]), Frame::Integer(1));
        assert_eq!(c.cmd(&["MULTI"]), ok());
        c.cmd(&["PING"]);
        assert_eq!(
            c.cmd(&["EXEC"]),
            Frame::Array(vec![Frame::Simple("PONG".into())])
        );
        // Growing the string with a 0 bit, and changing a bit, do publish.
        assert_eq!(c.cmd(&["SETBIT", key, &grow, "0"]), Frame::Integer(0));
        assert_eq!(c.cmd(&["SETBIT", key, &at_s, "0"]), Frame::Integer(1));
        assert_eq!(c.cmd(&["GETBIT", key, &at_s]), Frame::Integer(0));
        assert_eq!(
            ev.take(),
            // Creating, growing, changing ('A' has no `new` events).
            [
                format!("setbit {key}"),
                format!("setbit {key}"),
                format!("setbit {key}")
            ]
        );
    }
    // A key of another type still answers WRONGTYPE.
    c.cmd(&["RPUSH", "list", "a"]);
    assert!(matches!(
        c.cmd(&["SETBIT", "list", "1", "0"]),
        Frame::Error(_)
    ));
}

#[test]
fn a_setbit_that_changes_nothing_after_a_run_of_writing_ones_still_writes_nothing() {
    // A worker whose recent SETBITs all wrote skips the lock-free check
    // for an unchanged bit; the engine's compare under the lock must then
    // keep Redis's rule as the check did: no event, WATCH intact, the
    // version unchanged.
    let s = TestServer::start();
    let mut ev = Events::new(&s, "KEA");
    let mut c = s.raw();
    for (key, at) in [("small", 9u64), ("large", 300_000)] {
        let at_s = at.to_string();
        let next = (at + 1).to_string();
        assert_eq!(c.cmd(&["SETBIT", key, &at_s, "1"]), Frame::Integer(0));
        // Forty SETBITs that each flip a bit.
        for k in 0..40 {
            let (on, was) = if k % 2 == 0 { ("1", 0) } else { ("0", 1) };
            assert_eq!(c.cmd(&["SETBIT", key, &next, on]), Frame::Integer(was));
        }
        let before = c.cmd(&["VERSION", key]);
        assert_eq!(c.cmd(&["WATCH", key]), ok());
        assert_eq!(c.cmd(&["SETBIT", key, &at_s, "1"]), Frame::Integer(1));
        assert_eq!(c.cmd(&["SETBIT", key, &next, "0"]), Frame::Integer(0));
        assert_eq!(c.cmd(&["MULTI"]), ok());
        c.cmd(&["PING"]);
        assert_eq!(
            c.cmd(&["EXEC"]),
            Frame::Array(vec![Frame::Simple("PONG".into())])
        );
        assert_eq!(c.cmd(&["VERSION", key]), before);
        assert_eq!(ev.take(), vec![format!("setbit {key}"); 41]);
    }
}

#[test]
fn generic_commands_emit_redis_events() {
    let s = TestServer::start();
    let mut ev = Events::new(&s, "KEA");
    let mut c = s.raw();
    run(
        &mut c,
        &[
            &["SET", "a", "1"],
            &["SET", "b", "1"],
            &["DEL", "a", "missing", "b"],
            &["SET", "src", "v"],
            &["RENAME", "src", "dst"],
            &["RENAMENX", "dst", "dst"],
            &["COPY", "dst", "cp"],
            &["COPY", "dst", "cp1", "DB", "1"],
            &["MOVE", "cp", "2"],
            &["EXPIRE", "dst", "100"],
            &["PERSIST", "dst"],
            &["PERSIST", "dst"],
            &["PEXPIREAT", "dst", "1"],
            &["SET", "u", "1"],
            &["UNLINK", "u"],
            &["FLUSHALL"],
        ],
    );
    assert_eq!(
        ev.take(),
        [
            "set a",
            "set b",
            "del a",
            "del b",
            "set src",
            "rename_from src",
            "rename_to dst",
            "copy_to cp",
            "copy_to@1 cp1",
            "move_from cp",
            "move_to@2 cp",
            "expire dst",
            "persist dst",
            "del dst",
            "set u",
            "del u",
        ]
    );
}

#[test]
fn hash_commands_emit_redis_events() {
    let s = TestServer::start();
    let mut ev = Events::new(&s, "KEA");
    let mut c = s.raw();
    run(
        &mut c,
        &[
            &["HSET", "h", "a", "1", "b", "2"],
            &["HSETNX", "h", "a", "x"],
            &["HSETNX", "h", "c", "3"],
            &["HINCRBY", "h", "n", "2"],
            &["HINCRBYFLOAT", "h", "x", "0.5"],
            &["HDEL", "h", "zz"],
            &["HDEL", "h", "a", "b"],
            &["HDEL", "h", "c", "n", "x"],
        ],
    );
    assert_eq!(
        ev.take(),
        [
            "hset h",
            "hset h",
            "hincrby h",
            "hincrbyfloat h",
            "hdel h",
            "hdel h",
            "del h"
        ]
    );
}

#[test]
fn set_commands_emit_redis_events() {
    let s = TestServer::start();
    let mut ev = Events::new(&s, "KEA");
    let mut c = s.raw();
    run(
        &mut c,
        &[
            &["SADD", "s", "a", "b", "c"],
            &["SADD", "s", "a"],
            &["SREM", "s", "zz"],
            &["SREM", "s", "a"],
            &["SMOVE", "s", "t", "b"],
            &["SMOVE", "s", "s", "c"],
            &["SADD", "u", "x"],
            &["SINTERSTORE", "dst", "s", "t"],
            &["SUNIONSTORE", "dst", "s", "t"],
            &["SINTERSTORE", "dst", "s", "t"],
            &["SPOP", "u"],
            &["SPOP", "s", "5"],
        ],
    );
    assert_eq!(
        ev.take(),
        [
            "sadd s",
            "srem s",
            "srem s",
            "sadd t",
            "sadd u",
            "sunionstore dst",
            "del dst",
            "spop u",
            "del u",
            "spop s",
            "del s",
        ]
    );
}

#[test]
fn sorted_set_commands_emit_redis_events() {
    let s = TestServer::start();
    let mut ev = Events::new(&s, "KEA");
    let mut c = s.raw();
    run(
        &mut c,
        &[
            &["ZADD", "z", "1", "a", "2", "b", "3", "c"],
            &["ZADD", "z", "1", "a"],
            &["ZINCRBY", "z", "5", "a"],
            &["ZREM", "z", "nope"],
            &["ZREM", "z", "b"],
            &["ZRANGESTORE", "r", "z", "0", "-1"],
            &["ZUNIONSTORE", "u", "2", "z", "r"],
            &["ZINTERSTORE", "r", "1", "missing"],
            &["ZREMRANGEBYSCORE", "u", "0", "6"],
            &["ZPOPMIN", "z"],
            &["ZPOPMAX", "z"],
        ],
    );
    assert_eq!(
        ev.take(),
        [
            "zadd z",
            "zincr z",
            "zrem z",
            "zrangestore r",
            "zunionstore u",
            "del r",
            "zremrangebyscore u",
            "zpopmin z",
            "zpopmax z",
            "del z",
        ]
    );
}

#[test]
fn list_commands_emit_redis_events_including_lmove_and_blocking_pops() {
    let s = TestServer::start();
    let mut ev = Events::new(&s, "KEA");
    let mut c = s.raw();
    run(
        &mut c,
        &[
            &["RPUSH", "l", "a", "b", "c", "b"],
            &["LPUSHX", "none", "x"],
            &["LSET", "l", "0", "A"],
            &["LINSERT", "l", "BEFORE", "c", "x"],
            &["LREM", "l", "0", "b"],
            &["LTRIM", "l", "0", "1"],
            &["LMOVE", "l", "m", "LEFT", "RIGHT"],
            &["RPOPLPUSH", "l", "m"],
            &["LPOP", "m"],
            &["RPOP", "m"],
        ],
    );
    assert_eq!(
        ev.take(),
        [
            "rpush l",
            "lset l",
            "linsert l",
            "lrem l",
            "ltrim l",
            "rpush m",
            "lpop l",
            "lpush m",
            "rpop l",
            "del l",
            "lpop m",
            "rpop m",
            "del m",
        ]
    );
    // A blocked BLPOP served by a push from another client.
    let mut waiter = s.raw();
    waiter.send_cmd(&[b"BLPOP", b"q", b"5"]);
    assert!(common::eventually(Duration::from_secs(5), || {
        match c.cmd(&["INFO", "clients"]) {
            Frame::Bulk(b) | Frame::Verbatim { text: b, .. } => {
                String::from_utf8_lossy(&b).contains("blocked_clients:1")
            }
            _ => false,
        }
    }));
    assert_eq!(c.cmd(&["LPUSH", "q", "job"]), Frame::Integer(1));
    assert_eq!(waiter.read(), Frame::Array(vec![bulk("q"), bulk("job")]));
    assert_eq!(ev.take(), ["lpush q", "lpop q", "del q"]);
}

#[test]
fn new_events_precede_the_event_of_the_write_that_created_the_key() {
    let s = TestServer::start();
    // `A` does not include `n`; `n` alone gives only `new`.
    let mut ev = Events::new(&s, "KEA");
    let mut c = s.raw();
    run(&mut c, &[&["SET", "a", "1"]]);
    assert_eq!(ev.take(), ["set a"]);
    assert_eq!(
        ev.ctl
            .cmd(&["CONFIG", "SET", "notify-keyspace-events", "KEAn"]),
        ok()
    );
    run(
        &mut c,
        &[
            &["SET", "a", "2"],
            &["SET", "b", "1"],
            &["HSET", "h", "f", "v"],
            &["HSET", "h", "g", "v"],
            &["RPUSH", "l", "x"],
            &["LMOVE", "l", "m", "LEFT", "LEFT"],
            &["SADD", "s1", "x"],
            &["SUNIONSTORE", "s1", "s1"],
            &["ZADD", "z", "1", "m"],
            &["INCR", "n"],
            &["RENAME", "a", "b"],
            &["COPY", "b", "h", "REPLACE"],
            &["MOVE", "b", "3"],
        ],
    );
    assert_eq!(
        ev.take(),
        [
            "set a",
            "new b",
            "set b",
            "new h",
            "hset h",
            "hset h",
            "new l",
            "rpush l",
            "new m",
            "lpush m",
            "lpop l",
            "del l",
            "new s1",
            "sadd s1",
            "sunionstore s1",
            "new z",
            "zadd z",
            "new n",
            "incrby n",
            "new b",
            "rename_from a",
            "rename_to b",
            "new h",
            "copy_to h",
            "new@3 b",
            "move_from b",
            "move_to@3 b",
        ]
    );
    assert_eq!(
        ev.ctl
            .cmd(&["CONFIG", "SET", "notify-keyspace-events", "En"]),
        ok()
    );
    run(&mut c, &[&["SET", "fresh", "1"], &["SET", "fresh", "2"]]);
    assert_eq!(ev.take(), ["new fresh"]);
}

#[test]
fn sort_store_emits_new_sortstore_and_del_and_misses_a_missing_source() {
    let s = TestServer::start();
    let mut ev = Events::new(&s, "KEAmn");
    let mut c = s.raw();
    run(
        &mut c,
        &[
            &["RPUSH", "l", "2", "1"],
            &["SORT", "l", "STORE", "dst"],
            &["SORT", "l", "DESC", "STORE", "dst"],
            &["SORT", "l"],
            &["SORT", "nothing", "STORE", "dst"],
            &["SORT", "nothing", "STORE", "dst"],
        ],
    );
    // As Redis 7.0.15 (compared): the source is looked up for reading even
    // with STORE (keymiss), and an empty result deletes the destination.
    assert_eq!(
        ev.take(),
        [
            "new l",
            "rpush l",
            "new dst",
            "sortstore dst",
            "sortstore dst",
            "keymiss nothing",
            "del dst",
            "keymiss nothing",
        ]
    );
}

#[test]
fn keymiss_events_for_reads_that_find_no_key() {
    let s = TestServer::start();
    let mut ev = Events::new(&s, "Em");
    let mut c = s.raw();
    run(
        &mut c,
        &[
            &["SADD", "s", "a"],
            &["SET", "str", "v"],
            &["GET", "nokey"],
            &["GET", "str"],
            &["MGET", "str", "k1", "s"],
            &["HGET", "h", "f"],
            &["LRANGE", "l", "0", "-1"],
            &["ZSCORE", "z", "m"],
            &["SISMEMBER", "s", "zz"],
            &["TTL", "t"],
            &["EXISTS", "e", "s"],
            &["SUNION", "s", "u1", "u2"],
            &["ZUNIONSTORE", "d", "2", "s", "z2"],
            &["COPY", "c", "d"],
            &["SET", "g", "v", "GET"],
            &["OBJECT", "ENCODING", "o"],
            &["DEL", "nokey"],
            &["INCR", "i"],
        ],
    );
    // Writes (DEL, INCR, SADD ...) and OBJECT look keys up without a miss
    // event, as in Redis.
    assert_eq!(
        ev.take(),
        [
            "keymiss nokey",
            "keymiss k1",
            "keymiss h",
            "keymiss l",
            "keymiss z",
            "keymiss t",
            "keymiss e",
            "keymiss u1",
            "keymiss u2",
            "keymiss z2",
            "keymiss c",
            "keymiss g",
        ]
    );
    // Keys are looked up in order until one has the wrong type.
    assert_eq!(
        c.cmd(&["SINTER", "k2", "str", "k3"]),
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    assert_eq!(ev.take(), ["keymiss k2"]);
}

#[test]
fn expired_event_from_the_active_sweep_arrives_without_access() {
    let s = TestServer::start();
    let mut ev = Events::new(&s, "Ex");
    let mut c = s.raw();
    assert_eq!(c.cmd(&["SET", "ttl", "v", "PX", "300"]), ok());
    let deadline = Instant::now() + Duration::from_millis(300);
    // Nobody touches the key: only the sweep can find it.
    let Frame::Array(items) = ev.sub.read() else {
        panic!("not a message");
    };
    let late = Instant::now().saturating_duration_since(deadline);
    assert_eq!(text(&items[2]), "__keyevent@0__:expired");
    assert_eq!(text(&items[3]), "ttl");
    assert!(
        late < Duration::from_millis(1500),
        "expired {late:?} after its deadline"
    );
    assert_eq!(ev.take(), Vec::<String>::new(), "exactly one expired event");
}

#[test]
fn expired_event_fires_once_when_a_write_finds_the_key_expired() {
    let s = TestServer::start();
    let mut ev = Events::new(&s, "KEA");
    let mut c = s.raw();
    assert_eq!(c.cmd(&["SET", "k", "v", "PX", "100"]), ok());
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(c.cmd(&["SET", "k", "w"]), ok());
    assert_eq!(c.cmd(&["DEL", "k"]), Frame::Integer(1));
    assert_eq!(
        ev.take(),
        ["set k", "expire k", "expired k", "set k", "del k"]
    );
}

#[test]
fn expired_event_after_swapdb_names_the_database_the_key_is_in_now() {
    let s = TestServer::start();
    let mut ev = Events::new(&s, "Ex");
    let mut c = s.raw();
    run(
        &mut c,
        &[
            &["SELECT", "1"],
            &["SET", "k", "v", "PX", "400"],
            &["SWAPDB", "0", "1"],
        ],
    );
    let Frame::Array(items) = ev.sub.read() else {
        panic!("not a message");
    };
    assert_eq!(text(&items[2]), "__keyevent@0__:expired");
    assert_eq!(text(&items[3]), "k");
}

#[test]
fn cas_emits_the_events_of_a_set_and_a_mismatch_emits_nothing() {
    let s = TestServer::start();
    let mut ev = Events::new(&s, "KEAn");
    let mut c = s.raw();
    run(&mut c, &[&["CAS", "c", "0", "v", "EX", "100"]]);
    // A version that cannot match: nothing is written, nothing is published.
    assert!(matches!(
        c.cmd(&["CAS", "c", "999999999", "w"]),
        Frame::Error(_)
    ));
    run(&mut c, &[&["SET", "after", "1"]]);
    assert_eq!(
        ev.take(),
        ["new c", "set c", "expire c", "new after", "set after"]
    );
}

#[test]
fn commands_run_by_exec_emit_their_events_in_order() {
    let s = TestServer::start();
    let mut ev = Events::new(&s, "KEA");
    let mut c = s.raw();
    run(
        &mut c,
        &[
            &["MULTI"],
            &["SET", "x", "1"],
            &["INCR", "y"],
            &["DEL", "x"],
            &["EXEC"],
        ],
    );
    assert_eq!(ev.take(), ["set x", "incrby y", "del x"]);
}

#[test]
fn a_set_over_an_expired_key_reports_the_expiry_first_as_redis_does() {
    // redis-server 7.0.15: SET e v PX 30; (60 ms later) SET e again NX
    // publishes set, expire, expired, set, and counts one expired key.
    let s = TestServer::start();
    let mut c = s.raw();
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]),
        ok()
    );
    let mut sub = s.raw();
    sub.send_cmd(&[b"SUBSCRIBE", b"__keyspace@0__:e"]);
    let _ = sub.read();
    assert_eq!(c.cmd(&["SET", "e", "v", "PX", "30"]), ok());
    std::thread::sleep(std::time::Duration::from_millis(60));
    assert_eq!(c.cmd(&["SET", "e", "again", "NX"]), ok());
    for event in ["set", "expire", "expired", "set"] {
        assert_eq!(
            sub.read(),
            Frame::Array(vec![bulk("message"), bulk("__keyspace@0__:e"), bulk(event)]),
            "{event}"
        );
    }
    assert_eq!(c.cmd(&["GET", "e"]), bulk("again"));
    assert_eq!(c.cmd(&["TTL", "e"]), Frame::Integer(-1));
}
