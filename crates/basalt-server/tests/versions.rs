//! Per-key versions (the Basalt extensions VERSION and CAS) through real
//! connections: every kind of write makes a key's version grow, versions
//! survive DEBUG RELOAD, compaction and a restart, never go back after
//! FLUSHDB / SWAPDB, and CAS lets exactly one of many racing writers win.

use crate::common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use basalt_resp::Frame;
use common::{bulk, err, ok, Raw, TestServer};

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn version(r: &mut Raw, key: &str) -> i64 {
    match r.cmd(&["VERSION", key]) {
        Frame::Integer(v) => v,
        other => panic!("VERSION replied {other:?}"),
    }
}

#[test]
fn version_is_zero_for_a_missing_key_and_grows_with_every_write_type() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(version(&mut r, "nokey"), 0);
    let writes: &[&[&str]] = &[
        &["SET", "s", "1"],
        &["SET", "s", "1"],
        &["INCR", "s"],
        &["APPEND", "s", "0"],
        &["SETRANGE", "s", "0", "9"],
        &["EXPIRE", "s", "100"],
        &["PERSIST", "s"],
        &["GETEX", "s", "EX", "50"],
        &["HSET", "h", "f", "1"],
        &["HINCRBY", "h", "f", "2"],
        &["HSET", "h", "g", "1"],
        &["HDEL", "h", "g"],
        &["SADD", "st", "a", "b"],
        &["SREM", "st", "a"],
        &["ZADD", "z", "1", "m", "2", "n"],
        &["ZINCRBY", "z", "5", "m"],
        &["ZREM", "z", "n"],
        &["RPUSH", "l", "a", "b", "c"],
        &["LPOP", "l"],
        &["LSET", "l", "0", "x"],
        &["LPUSH", "l", "y"],
        &["PEXPIRE", "l", "100000"],
    ];
    let mut last = 0;
    for w in writes {
        let key = w[1];
        let before = version(&mut r, key);
        let reply = r.cmd(w);
        assert!(!matches!(reply, Frame::Error(_)), "{w:?}: {reply:?}");
        let after = version(&mut r, key);
        assert!(after > before, "{w:?} did not change the version");
        assert!(after > last, "versions are one growing sequence");
        last = after;
    }
    // RENAME: the destination gets a new version, the source is gone.
    assert_eq!(r.cmd(&["RENAME", "h", "h2"]), ok());
    assert!(version(&mut r, "h2") > last);
    assert_eq!(version(&mut r, "h"), 0);
    // Reads do not change it.
    let v = version(&mut r, "s");
    r.cmd(&["GET", "s"]);
    r.cmd(&["TTL", "s"]);
    assert_eq!(version(&mut r, "s"), v);
}

#[test]
fn deleted_or_expired_key_has_version_zero_and_recreation_is_newer() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["SET", "k", "v"]);
    let v1 = version(&mut r, "k");
    assert_eq!(r.cmd(&["DEL", "k"]), int(1));
    assert_eq!(version(&mut r, "k"), 0);
    r.cmd(&["SET", "k", "v"]);
    assert!(version(&mut r, "k") > v1);
    r.cmd(&["SET", "e", "v", "PX", "50"]);
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(version(&mut r, "e"), 0);
}

#[test]
fn versions_survive_debug_reload_compaction_and_restart() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["SET", "s", "v"]);
    r.cmd(&["HSET", "h", "a", "1", "b", "2"]);
    r.cmd(&["HDEL", "h", "b"]); // the newest write to h is a field deletion
    r.cmd(&["SADD", "st", "m"]);
    r.cmd(&["EXPIRE", "st", "1000"]);
    r.cmd(&["RPUSH", "l", "a"]);
    for i in 0..300 {
        r.cmd(&["SET", "churn", &i.to_string()]);
    }
    let keys = ["s", "h", "st", "l"];
    let before: Vec<i64> = keys.iter().map(|k| version(&mut r, k)).collect();
    assert!(before.iter().all(|&v| v > 0));

    assert_eq!(r.cmd(&["DEBUG", "RELOAD"]), ok());
    let now: Vec<i64> = keys.iter().map(|k| version(&mut r, k)).collect();
    assert_eq!(now, before, "after DEBUG RELOAD");

    s.handle
        .as_ref()
        .unwrap()
        .shared()
        .keyspace
        .read(0)
        .db()
        .unwrap()
        .compact()
        .unwrap();
    let now: Vec<i64> = keys.iter().map(|k| version(&mut r, k)).collect();
    assert_eq!(now, before, "after compaction");

    let s = s.restart();
    let mut r = s.raw();
    let now: Vec<i64> = keys.iter().map(|k| version(&mut r, k)).collect();
    assert_eq!(now, before, "after restart");
    // And new writes continue above every version seen before.
    let churn = version(&mut r, "churn");
    r.cmd(&["SET", "new", "v"]);
    assert!(version(&mut r, "new") > churn);
}

#[test]
fn versions_never_go_back_after_flushdb_and_swapdb() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SELECT", "3"]), ok());
    for i in 0..100 {
        r.cmd(&["SET", "k", &i.to_string()]);
    }
    let high = version(&mut r, "k");
    assert_eq!(r.cmd(&["FLUSHDB"]), ok());
    assert_eq!(version(&mut r, "k"), 0);
    // Another database (its own engine) continues above, too.
    assert_eq!(r.cmd(&["SELECT", "5"]), ok());
    r.cmd(&["SET", "k", "v"]);
    assert!(version(&mut r, "k") > high);
    let high = version(&mut r, "k");
    assert_eq!(r.cmd(&["SWAPDB", "5", "3"]), ok());
    assert_eq!(version(&mut r, "k"), 0);
    assert_eq!(r.cmd(&["SELECT", "3"]), ok());
    assert_eq!(version(&mut r, "k"), high);
    assert_eq!(r.cmd(&["FLUSHDB"]), ok());
    assert_eq!(r.cmd(&["SELECT", "5"]), ok());
    assert_eq!(r.cmd(&["FLUSHDB"]), ok());

    // Every record that carried a high version is gone (db 0 never held
    // one), then a restart: the floor was recorded.
    let s = s.restart();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SELECT", "3"]), ok());
    r.cmd(&["SET", "k", "again"]);
    assert!(version(&mut r, "k") > high);
}

#[test]
fn cas_writes_only_when_the_version_matches() {
    let s = TestServer::start();
    let mut r = s.raw();
    // 0 = only if the key does not exist.
    let Frame::Integer(v1) = r.cmd(&["CAS", "k", "0", "first"]) else {
        panic!("CAS replies the new version");
    };
    assert_eq!(version(&mut r, "k"), v1);
    assert_eq!(r.cmd(&["GET", "k"]), bulk("first"));
    assert_eq!(
        r.cmd(&["CAS", "k", "0", "other"]),
        err(&format!("VERSIONMISMATCH {v1}"))
    );
    assert_eq!(
        r.cmd(&["CAS", "k", &(v1 - 1).to_string(), "other"]),
        err(&format!("VERSIONMISMATCH {v1}"))
    );
    assert_eq!(r.cmd(&["GET", "k"]), bulk("first"));
    let Frame::Integer(v2) = r.cmd(&["CAS", "k", &v1.to_string(), "second"]) else {
        panic!("CAS replies the new version");
    };
    assert!(v2 > v1);
    assert_eq!(r.cmd(&["GET", "k"]), bulk("second"));
    // A missing key mismatches with its current version, 0.
    assert_eq!(
        r.cmd(&["CAS", "missing", "5", "x"]),
        err("VERSIONMISMATCH 0")
    );
    assert_eq!(r.cmd(&["EXISTS", "missing"]), int(0));
}

#[test]
fn cas_sets_an_expiry_and_replaces_other_types() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["CAS", "t", "0", "v", "EX", "100"]);
    let Frame::Integer(ttl) = r.cmd(&["TTL", "t"]) else {
        panic!()
    };
    assert!((99..=100).contains(&ttl), "{ttl}");
    let v = version(&mut r, "t");
    r.cmd(&["CAS", "t", &v.to_string(), "w", "PX", "5000"]);
    let Frame::Integer(pttl) = r.cmd(&["PTTL", "t"]) else {
        panic!()
    };
    assert!((4000..=5000).contains(&pttl), "{pttl}");
    // Without an option the expiry goes, as with SET.
    let v = version(&mut r, "t");
    r.cmd(&["CAS", "t", &v.to_string(), "x"]);
    assert_eq!(r.cmd(&["TTL", "t"]), int(-1));

    r.cmd(&["HSET", "h", "f", "1"]);
    let v = version(&mut r, "h");
    let Frame::Integer(_) = r.cmd(&["CAS", "h", &v.to_string(), "now a string"]) else {
        panic!("CAS with a matching version overwrites any type")
    };
    assert_eq!(r.cmd(&["TYPE", "h"]), Frame::Simple(b"string".to_vec()));
    assert_eq!(r.cmd(&["GET", "h"]), bulk("now a string"));
}

#[test]
fn cas_argument_errors_match_sets_and_change_nothing() {
    let s = TestServer::start();
    let mut r = s.raw();
    let cases: &[(&[&str], &str)] = &[
        (
            &["CAS", "k", "abc", "v"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["CAS", "k", "-1", "v"],
            "ERR value is not an integer or out of range",
        ),
        (&["CAS", "k", "0", "v", "EX"], "ERR syntax error"),
        (&["CAS", "k", "0", "v", "NX"], "ERR syntax error"),
        (
            &["CAS", "k", "0", "v", "EX", "1", "PX", "1"],
            "ERR syntax error",
        ),
        (
            &["CAS", "k", "0", "v", "EX", "x"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["CAS", "k", "0", "v", "EX", "0"],
            "ERR invalid expire time in 'cas' command",
        ),
        (
            &["CAS", "k", "0", "v", "PX", "-5"],
            "ERR invalid expire time in 'cas' command",
        ),
        (
            &["CAS", "k", "0", "v", "EX", "9223372036854775807"],
            "ERR invalid expire time in 'cas' command",
        ),
        (
            &["CAS", "k", "0"],
            "ERR wrong number of arguments for 'cas' command",
        ),
        (
            &["VERSION"],
            "ERR wrong number of arguments for 'version' command",
        ),
        (
            &["VERSION", "a", "b"],
            "ERR wrong number of arguments for 'version' command",
        ),
    ];
    for (args, e) in cases {
        assert_eq!(r.cmd(args), err(e), "{args:?}");
    }
    assert_eq!(r.cmd(&["EXISTS", "k"]), int(0));
    // A repeated option is allowed, as with SET.
    let Frame::Integer(_) = r.cmd(&["CAS", "k", "0", "v", "EX", "5", "EX", "100"]) else {
        panic!("repeated EX is accepted");
    };
    assert!(matches!(r.cmd(&["TTL", "k"]), Frame::Integer(t) if t > 90));
}

#[test]
fn of_many_concurrent_cas_with_one_version_exactly_one_wins() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["SET", "counter", "start"]);
    for round in 0..5 {
        let v = version(&mut r, "counter");
        let threads = 8;
        let barrier = Arc::new(Barrier::new(threads));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, addr) = (barrier.clone(), s.addr());
                std::thread::spawn(move || {
                    let mut c = Raw::connect(addr);
                    let value = format!("r{round}t{t}");
                    barrier.wait();
                    (
                        value.clone(),
                        c.cmd(&["CAS", "counter", &v.to_string(), &value]),
                    )
                })
            })
            .collect();
        let results: Vec<(String, Frame)> =
            handles.into_iter().map(|h| h.join().unwrap()).collect();
        let winners: Vec<&(String, Frame)> = results
            .iter()
            .filter(|(_, f)| matches!(f, Frame::Integer(_)))
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        let (value, Frame::Integer(new)) = winners[0] else {
            unreachable!()
        };
        for (_, f) in &results {
            if !matches!(f, Frame::Integer(_)) {
                assert_eq!(f, &err(&format!("VERSIONMISMATCH {new}")));
            }
        }
        assert_eq!(r.cmd(&["GET", "counter"]), bulk(value));
        assert_eq!(version(&mut r, "counter"), *new);
    }
}

#[test]
fn version_and_cas_are_in_the_command_table() {
    let s = TestServer::start();
    let mut c = s.client();
    let info: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("version")
        .arg("cas")
        .query(&mut c)
        .unwrap();
    assert_eq!(info.len(), 2);
    assert!(info.iter().all(|v| !matches!(v, redis::Value::Nil)));
}

#[test]
fn versions_never_go_back_after_flushdb_and_restart() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SELECT", "3"]), ok());
    for i in 0..100 {
        r.cmd(&["SET", "k", &i.to_string()]);
    }
    let high = version(&mut r, "k");
    // The only records with high versions go with db 3's directory.
    assert_eq!(r.cmd(&["FLUSHDB"]), ok());
    let s = s.restart();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SELECT", "3"]), ok());
    r.cmd(&["SET", "k", "again"]);
    assert!(version(&mut r, "k") > high);
}
