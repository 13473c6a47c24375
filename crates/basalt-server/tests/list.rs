//! List commands through real clients: Redis 7.0's replies and errors, the
//! edges (negative indexes, empty results, WRONGTYPE, arity, bad numbers),
//! shifts in the middle, and lists surviving restart and compaction; plus a
//! property test against a `VecDeque` model across restarts.

use crate::common;

use std::collections::VecDeque;

use basalt_resp::Frame;
use common::{bulk, err, ok, TestServer};
use proptest::prelude::*;
use redis::Commands;

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn arr(items: &[&str]) -> Frame {
    Frame::Array(items.iter().map(|s| bulk(s)).collect())
}

fn ints(items: &[i64]) -> Frame {
    Frame::Array(items.iter().map(|n| int(*n)).collect())
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn lrange(c: &mut redis::Connection, key: &str) -> Vec<String> {
    c.lrange(key, 0, -1).unwrap()
}

#[test]
fn push_pop_and_length_through_the_redis_crate() {
    let s = TestServer::start();
    let mut c = s.client();
    let n: i64 = c.rpush("l", &["a", "b", "c"]).unwrap();
    assert_eq!(n, 3);
    let n: i64 = c.lpush("l", &["x", "y"]).unwrap();
    assert_eq!(n, 5);
    assert_eq!(lrange(&mut c, "l"), ["y", "x", "a", "b", "c"]);
    let v: String = c.lpop("l", None).unwrap();
    assert_eq!(v, "y");
    let v: String = c.rpop("l", None).unwrap();
    assert_eq!(v, "c");
    let n: i64 = c.llen("l").unwrap();
    assert_eq!(n, 3);
    let v: Vec<String> = c.lpop("l", std::num::NonZeroUsize::new(2)).unwrap();
    assert_eq!(v, ["x", "a"]);
    let v: Vec<String> = c.rpop("l", std::num::NonZeroUsize::new(5)).unwrap();
    assert_eq!(v, ["b"]);
    let exists: bool = c.exists("l").unwrap();
    assert!(!exists, "popping the last element removes the key");
    let n: i64 = c.lpush_exists("l", "z").unwrap();
    assert_eq!(n, 0);
    let n: i64 = c.rpush_exists("l", "z").unwrap();
    assert_eq!(n, 0);
    let _: i64 = c.rpush("l", "a").unwrap();
    let n: i64 = c.rpush_exists("l", &["b", "c"]).unwrap();
    assert_eq!(n, 3);
    let n: i64 = c.lpush_exists("l", "0").unwrap();
    assert_eq!(n, 4);
    assert_eq!(lrange(&mut c, "l"), ["0", "a", "b", "c"]);
    let t: String = redis::cmd("TYPE").arg("l").query(&mut c).unwrap();
    assert_eq!(t, "list");
}

#[test]
fn pop_replies_and_count_errors() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["RPUSH", "l", "a", "b", "c", "b"]), int(4));
    assert_eq!(r.cmd(&["LPOP", "l", "0"]), Frame::Array(vec![]));
    assert_eq!(r.cmd(&["LPOP", "nokey"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["LPOP", "nokey", "2"]), Frame::NullArray);
    assert_eq!(r.cmd(&["RPOP", "nokey", "0"]), Frame::NullArray);
    for bad in ["-1", "x", "1.5"] {
        assert_eq!(
            r.cmd(&["LPOP", "l", bad]),
            err("ERR value is out of range, must be positive")
        );
    }
    assert_eq!(
        r.cmd(&["LPOP", "l", "1", "2"]),
        err("ERR wrong number of arguments for 'lpop' command")
    );
    assert_eq!(
        r.cmd(&["RPOP"]),
        err("ERR wrong number of arguments for 'rpop' command")
    );
    assert_eq!(
        r.cmd(&["LPUSH", "l"]),
        err("ERR wrong number of arguments for 'lpush' command")
    );
    assert_eq!(r.cmd(&["RPOP", "l", "2"]), arr(&["b", "c"]));
    assert_eq!(r.cmd(&["LLEN", "l"]), int(2));
    assert_eq!(r.cmd(&["LLEN", "nokey"]), int(0));
}

#[test]
fn ranges_and_indexes_with_negative_and_out_of_range_values() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["RPUSH", "l", "a", "b", "c", "d", "e"]), int(5));
    assert_eq!(
        r.cmd(&["LRANGE", "l", "0", "-1"]),
        arr(&["a", "b", "c", "d", "e"])
    );
    assert_eq!(r.cmd(&["LRANGE", "l", "-2", "-1"]), arr(&["d", "e"]));
    assert_eq!(r.cmd(&["LRANGE", "l", "-100", "1"]), arr(&["a", "b"]));
    assert_eq!(r.cmd(&["LRANGE", "l", "3", "100"]), arr(&["d", "e"]));
    assert_eq!(r.cmd(&["LRANGE", "l", "3", "1"]), arr(&[]));
    assert_eq!(r.cmd(&["LRANGE", "l", "5", "10"]), arr(&[]));
    assert_eq!(r.cmd(&["LRANGE", "nokey", "0", "-1"]), arr(&[]));
    assert_eq!(
        r.cmd(&["LRANGE", "l", "a", "1"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(r.cmd(&["LINDEX", "l", "0"]), bulk("a"));
    assert_eq!(r.cmd(&["LINDEX", "l", "-1"]), bulk("e"));
    assert_eq!(r.cmd(&["LINDEX", "l", "-6"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["LINDEX", "l", "5"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["LINDEX", "nokey", "x"]), Frame::NullBulk);
    assert_eq!(
        r.cmd(&["LINDEX", "l", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(r.cmd(&["LSET", "l", "-1", "E"]), ok());
    assert_eq!(r.cmd(&["LSET", "l", "0", "A"]), ok());
    assert_eq!(
        r.cmd(&["LSET", "l", "5", "v"]),
        err("ERR index out of range")
    );
    assert_eq!(
        r.cmd(&["LSET", "l", "-6", "v"]),
        err("ERR index out of range")
    );
    assert_eq!(r.cmd(&["LSET", "nokey", "0", "v"]), err("ERR no such key"));
    assert_eq!(r.cmd(&["LSET", "nokey", "x", "v"]), err("ERR no such key"));
    assert_eq!(
        r.cmd(&["LSET", "l", "x", "v"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        r.cmd(&["LRANGE", "l", "0", "-1"]),
        arr(&["A", "b", "c", "d", "E"])
    );
}

#[test]
fn linsert_lrem_and_ltrim_shift_elements_in_the_middle() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["RPUSH", "l", "a", "b", "c", "d"]), int(4));
    // Near the head (shifts the left part) and near the tail (the right).
    assert_eq!(r.cmd(&["LINSERT", "l", "BEFORE", "a", "0"]), int(5));
    assert_eq!(r.cmd(&["LINSERT", "l", "after", "d", "z"]), int(6));
    assert_eq!(r.cmd(&["LINSERT", "l", "AFTER", "b", "b2"]), int(7));
    assert_eq!(r.cmd(&["LINSERT", "l", "BEFORE", "d", "c2"]), int(8));
    assert_eq!(
        r.cmd(&["LRANGE", "l", "0", "-1"]),
        arr(&["0", "a", "b", "b2", "c", "c2", "d", "z"])
    );
    assert_eq!(r.cmd(&["LINSERT", "l", "BEFORE", "nope", "x"]), int(-1));
    assert_eq!(r.cmd(&["LINSERT", "nokey", "BEFORE", "a", "x"]), int(0));
    assert_eq!(
        r.cmd(&["LINSERT", "l", "MIDDLE", "a", "x"]),
        err("ERR syntax error")
    );
    assert_eq!(r.cmd(&["LINDEX", "l", "-1"]), bulk("z"));
    assert_eq!(r.cmd(&["LINDEX", "l", "0"]), bulk("0"));

    assert_eq!(
        r.cmd(&["RPUSH", "r", "x", "a", "x", "b", "x", "c", "x"]),
        int(7)
    );
    assert_eq!(r.cmd(&["LREM", "r", "1", "x"]), int(1));
    assert_eq!(
        r.cmd(&["LRANGE", "r", "0", "-1"]),
        arr(&["a", "x", "b", "x", "c", "x"])
    );
    assert_eq!(r.cmd(&["LREM", "r", "-2", "x"]), int(2));
    assert_eq!(
        r.cmd(&["LRANGE", "r", "0", "-1"]),
        arr(&["a", "x", "b", "c"])
    );
    assert_eq!(r.cmd(&["LREM", "r", "0", "nope"]), int(0));
    assert_eq!(r.cmd(&["RPUSH", "r", "x", "x"]), int(6));
    assert_eq!(r.cmd(&["LREM", "r", "0", "x"]), int(3));
    assert_eq!(r.cmd(&["LRANGE", "r", "0", "-1"]), arr(&["a", "b", "c"]));
    assert_eq!(r.cmd(&["LREM", "nokey", "0", "x"]), int(0));
    assert_eq!(
        r.cmd(&["LREM", "r", "x", "a"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(r.cmd(&["RPUSH", "all", "x", "x"]), int(2));
    assert_eq!(r.cmd(&["LREM", "all", "0", "x"]), int(2));
    assert_eq!(r.cmd(&["EXISTS", "all"]), int(0));

    assert_eq!(r.cmd(&["RPUSH", "t", "1", "2", "3", "4", "5"]), int(5));
    assert_eq!(r.cmd(&["LTRIM", "t", "1", "-2"]), ok());
    assert_eq!(r.cmd(&["LRANGE", "t", "0", "-1"]), arr(&["2", "3", "4"]));
    assert_eq!(r.cmd(&["LTRIM", "t", "-100", "100"]), ok());
    assert_eq!(r.cmd(&["LLEN", "t"]), int(3));
    assert_eq!(r.cmd(&["LTRIM", "t", "2", "1"]), ok());
    assert_eq!(r.cmd(&["EXISTS", "t"]), int(0));
    assert_eq!(r.cmd(&["LTRIM", "nokey", "0", "1"]), ok());
    assert_eq!(
        r.cmd(&["LTRIM", "t", "x", "1"]),
        err("ERR value is not an integer or out of range")
    );
}

#[test]
fn lpos_rank_count_and_maxlen() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["RPUSH", "l", "a", "b", "c", "b", "d", "b"]), int(6));
    assert_eq!(r.cmd(&["LPOS", "l", "b"]), int(1));
    assert_eq!(r.cmd(&["LPOS", "l", "b", "RANK", "2"]), int(3));
    assert_eq!(r.cmd(&["LPOS", "l", "b", "RANK", "-1"]), int(5));
    assert_eq!(r.cmd(&["LPOS", "l", "b", "RANK", "4"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["LPOS", "l", "b", "COUNT", "0"]), ints(&[1, 3, 5]));
    assert_eq!(r.cmd(&["LPOS", "l", "b", "COUNT", "2"]), ints(&[1, 3]));
    assert_eq!(
        r.cmd(&["LPOS", "l", "b", "RANK", "-2", "COUNT", "0"]),
        ints(&[3, 1])
    );
    assert_eq!(r.cmd(&["LPOS", "l", "b", "MAXLEN", "1"]), Frame::NullBulk);
    assert_eq!(
        r.cmd(&["LPOS", "l", "b", "MAXLEN", "4", "COUNT", "0"]),
        ints(&[1, 3])
    );
    assert_eq!(r.cmd(&["LPOS", "l", "zz", "COUNT", "0"]), ints(&[]));
    assert_eq!(r.cmd(&["LPOS", "nokey", "b"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["LPOS", "nokey", "b", "COUNT", "1"]), ints(&[]));
    assert_eq!(
        r.cmd(&["LPOS", "l", "b", "RANK", "0"]),
        err("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list")
    );
    assert_eq!(
        r.cmd(&["LPOS", "l", "b", "COUNT", "-1"]),
        err("ERR COUNT can't be negative")
    );
    assert_eq!(
        r.cmd(&["LPOS", "l", "b", "MAXLEN", "x"]),
        err("ERR MAXLEN can't be negative")
    );
    assert_eq!(
        r.cmd(&["LPOS", "l", "b", "RANK", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(r.cmd(&["LPOS", "l", "b", "RANK"]), err("ERR syntax error"));
    assert_eq!(
        r.cmd(&["LPOS", "l", "b", "FOO", "1"]),
        err("ERR syntax error")
    );
}

#[test]
fn lmove_rpoplpush_and_lmpop() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["RPUSH", "src", "1", "2", "3"]), int(3));
    assert_eq!(r.cmd(&["LMOVE", "src", "dst", "LEFT", "RIGHT"]), bulk("1"));
    assert_eq!(r.cmd(&["RPOPLPUSH", "src", "dst"]), bulk("3"));
    assert_eq!(r.cmd(&["LRANGE", "dst", "0", "-1"]), arr(&["3", "1"]));
    // Rotation of one list, including a one-element list (keeps its TTL).
    assert_eq!(r.cmd(&["RPUSH", "rot", "a", "b", "c"]), int(3));
    assert_eq!(r.cmd(&["LMOVE", "rot", "rot", "RIGHT", "LEFT"]), bulk("c"));
    assert_eq!(r.cmd(&["LMOVE", "rot", "rot", "LEFT", "LEFT"]), bulk("c"));
    assert_eq!(r.cmd(&["LRANGE", "rot", "0", "-1"]), arr(&["c", "a", "b"]));
    assert_eq!(r.cmd(&["RPUSH", "one", "x"]), int(1));
    assert_eq!(r.cmd(&["EXPIRE", "one", "100"]), int(1));
    assert_eq!(r.cmd(&["RPOPLPUSH", "one", "one"]), bulk("x"));
    assert_eq!(r.cmd(&["TTL", "one"]), int(100));
    assert_eq!(
        r.cmd(&["LMOVE", "nokey", "dst", "LEFT", "LEFT"]),
        Frame::NullBulk
    );
    assert_eq!(
        r.cmd(&["LMOVE", "src", "dst", "UP", "LEFT"]),
        err("ERR syntax error")
    );
    assert_eq!(r.cmd(&["SET", "str", "v"]), ok());
    assert_eq!(
        r.cmd(&["LMOVE", "src", "str", "LEFT", "LEFT"]),
        err(WRONGTYPE)
    );
    assert_eq!(
        r.cmd(&["LMOVE", "nokey", "str", "LEFT", "LEFT"]),
        Frame::NullBulk
    );
    assert_eq!(
        r.cmd(&["LRANGE", "src", "0", "-1"]),
        arr(&["2"]),
        "nothing moved"
    );

    assert_eq!(r.cmd(&["RPUSH", "m", "a", "b", "c"]), int(3));
    assert_eq!(
        r.cmd(&["LMPOP", "2", "nokey", "m", "RIGHT", "COUNT", "2"]),
        Frame::Array(vec![bulk("m"), arr(&["c", "b"])])
    );
    assert_eq!(
        r.cmd(&["LMPOP", "1", "m", "left", "count", "10"]),
        Frame::Array(vec![bulk("m"), arr(&["a"])])
    );
    assert_eq!(r.cmd(&["LMPOP", "1", "m", "LEFT"]), Frame::NullArray);
    assert_eq!(
        r.cmd(&["LMPOP", "0", "m", "LEFT"]),
        err("ERR numkeys should be greater than 0")
    );
    assert_eq!(r.cmd(&["LMPOP", "2", "a", "b"]), err("ERR syntax error"));
    assert_eq!(r.cmd(&["LMPOP", "1", "a", "MID"]), err("ERR syntax error"));
    assert_eq!(
        r.cmd(&["LMPOP", "1", "a", "LEFT", "COUNT", "0"]),
        err("ERR count should be greater than 0")
    );
    assert_eq!(
        r.cmd(&["LMPOP", "1", "a", "LEFT", "COUNT", "1", "COUNT", "2"]),
        err("ERR syntax error")
    );
    assert_eq!(
        r.cmd(&["LMPOP", "2", "nokey", "str", "LEFT"]),
        err(WRONGTYPE)
    );
}

#[test]
fn wrong_types_are_refused_and_change_nothing() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SET", "s", "v"]), ok());
    for cmd in [
        vec!["LPUSH", "s", "x"],
        vec!["RPUSHX", "s", "x"],
        vec!["LPOP", "s"],
        vec!["LLEN", "s"],
        vec!["LRANGE", "s", "0", "1"],
        vec!["LINDEX", "s", "0"],
        vec!["LSET", "s", "0", "x"],
        vec!["LINSERT", "s", "BEFORE", "a", "b"],
        vec!["LREM", "s", "0", "a"],
        vec!["LTRIM", "s", "0", "1"],
        vec!["LPOS", "s", "a"],
        vec!["RPOPLPUSH", "s", "d"],
        vec!["BLPOP", "nokey", "s", "0"],
    ] {
        assert_eq!(r.cmd(&cmd), err(WRONGTYPE), "{cmd:?}");
    }
    assert_eq!(r.cmd(&["GET", "s"]), bulk("v"));
    // A list is not a string either, nor another collection's member.
    assert_eq!(r.cmd(&["RPUSH", "l", "a"]), int(1));
    assert_eq!(r.cmd(&["GET", "l"]), err(WRONGTYPE));
    assert_eq!(r.cmd(&["HSET", "h", "f", "v"]), int(1));
    assert_eq!(r.cmd(&["LPUSH", "h", "x"]), err(WRONGTYPE));
    assert_eq!(r.cmd(&["LLEN", "h"]), err(WRONGTYPE));
}

#[test]
fn lists_work_with_key_commands() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["RPUSH", "l", "a", "b", "c"]), int(3));
    assert_eq!(r.cmd(&["LPUSH", "l", "z"]), int(4));
    assert_eq!(r.cmd(&["RENAME", "l", "m"]), ok());
    assert_eq!(
        r.cmd(&["LRANGE", "m", "0", "-1"]),
        arr(&["z", "a", "b", "c"])
    );
    assert_eq!(r.cmd(&["LPUSH", "m", "y"]), int(5));
    assert_eq!(r.cmd(&["COPY", "m", "n"]), int(1));
    assert_eq!(r.cmd(&["RPOP", "n"]), bulk("c"));
    assert_eq!(r.cmd(&["LLEN", "m"]), int(5));
    assert_eq!(r.cmd(&["OBJECT", "ENCODING", "m"]), bulk("quicklist"));
    assert_eq!(r.cmd(&["DEL", "m"]), int(1));
    assert_eq!(r.cmd(&["LRANGE", "m", "0", "-1"]), arr(&[]));
    assert_eq!(r.cmd(&["RPUSH", "m", "fresh"]), int(1));
    assert_eq!(r.cmd(&["LINDEX", "m", "0"]), bulk("fresh"));
    assert_eq!(r.cmd(&["DEBUG", "RELOAD"]), ok());
    assert_eq!(
        r.cmd(&["LRANGE", "n", "0", "-1"]),
        arr(&["y", "z", "a", "b"])
    );
}

/// Stops the server, compacts database 0 with the engine directly, starts
/// a new server on the same directory.
fn compact_offline(mut s: TestServer) -> TestServer {
    s.handle.take().unwrap().shutdown().unwrap();
    let db =
        basalt_engine::Db::open(s.dir.path().join("0"), basalt_engine::Options::default()).unwrap();
    db.compact().unwrap();
    db.close().unwrap();
    TestServer::start_in(s.dir)
}

#[test]
fn lists_survive_restart_and_compaction() {
    let s = TestServer::start();
    let mut c = s.client();
    let items: Vec<String> = (0..300).map(|i| format!("v{i}")).collect();
    let _: i64 = c.rpush("l", &items).unwrap();
    let _: Vec<String> = c.lpop("l", std::num::NonZeroUsize::new(50)).unwrap();
    let _: i64 = c.lpush("l", "head").unwrap();
    let _: i64 = c.linsert_before("l", "v100", "mid").unwrap();
    let _: i64 = c.lrem("l", 1, "v200").unwrap();
    let _: () = c.lset("l", -1, "tail").unwrap();
    let _: () = c.ltrim("l", 0, -2).unwrap();
    let _: bool = c.expire("l", 1000).unwrap();
    let _: i64 = c.rpush("gone", "x").unwrap();
    let _: Option<String> = c.rpop("gone", None).unwrap();
    let want = lrange(&mut c, "l");
    assert_eq!(want.len(), 250);
    assert_eq!(want[0], "head");
    drop(c);

    let s = s.restart();
    let mut c = s.client();
    assert_eq!(lrange(&mut c, "l"), want);
    let ttl: i64 = c.ttl("l").unwrap();
    assert!(ttl > 990, "{ttl}");
    let gone: bool = c.exists("gone").unwrap();
    assert!(!gone);
    // The head position is rebuilt from the field names after a restart.
    let _: i64 = c.lpush("l", "new-head").unwrap();
    let first: String = c.lindex("l", 0).unwrap();
    assert_eq!(first, "new-head");
    let want = lrange(&mut c, "l");
    drop(c);

    let s = compact_offline(s);
    let mut c = s.client();
    assert_eq!(lrange(&mut c, "l"), want);
    let gone: bool = c.exists("gone").unwrap();
    assert!(!gone);
}

/// A child server process, killed (SIGKILL) when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the `basalt` binary on `dir` and returns it with its address.
fn spawn_binary(dir: &std::path::Path) -> (Child, std::net::SocketAddr) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["--port", "0", "--http-port", "0", "--loglevel", "info"])
        .env("BASALT_DIR", dir)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.split("ready on ").nth(1) {
                let _ = tx.send(rest.split_whitespace().next().unwrap().to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("no start-up banner")
        .parse()
        .unwrap();
    (Child(child), addr)
}

#[test]
fn kill_9_keeps_acknowledged_list_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (child, addr) = spawn_binary(dir.path());
    let mut r = common::Raw::connect(addr);
    let mut out = Vec::new();
    let mut want: VecDeque<String> = VecDeque::new();
    for i in 0..500 {
        let v = format!("v{i}");
        let cmd = if i % 3 == 0 { &b"LPUSH"[..] } else { b"RPUSH" };
        basalt_resp::write_command(&mut out, [cmd, b"l", v.as_bytes()]);
        if i % 3 == 0 {
            want.push_front(v);
        } else {
            want.push_back(v);
        }
    }
    r.send(&out);
    for i in 0..500 {
        assert_eq!(r.read(), int(i + 1));
    }
    assert_eq!(r.cmd(&["LINSERT", "l", "BEFORE", "v250", "ins"]), int(501));
    let at = want.iter().position(|v| v == "v250").unwrap();
    want.insert(at, "ins".into());
    assert_eq!(r.cmd(&["LREM", "l", "0", "v100"]), int(1));
    want.retain(|v| v != "v100");
    assert_eq!(
        r.cmd(&["LPOP", "l"]),
        bulk(want.pop_front().unwrap().as_str())
    );
    // SIGKILL: no shutdown code runs.
    drop(child);
    let (_child, addr) = spawn_binary(dir.path());
    let mut r = common::Raw::connect(addr);
    let items: Vec<&str> = want.iter().map(|s| s.as_str()).collect();
    assert_eq!(r.cmd(&["LRANGE", "l", "0", "-1"]), arr(&items));
    assert_eq!(r.cmd(&["LLEN", "l"]), int(want.len() as i64));
}

#[derive(Debug, Clone)]
enum Op {
    Push(bool, Vec<u8>),
    Pop(bool, usize),
    Set(i64, u8),
    Insert(bool, u8, u8),
    Rem(i64, u8),
    Trim(i64, i64),
    Move(bool, bool),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), proptest::collection::vec(0u8..6, 1..4)).prop_map(|(l, v)| Op::Push(l, v)),
        2 => (any::<bool>(), 0usize..4).prop_map(|(l, n)| Op::Pop(l, n)),
        1 => (-8i64..8, 0u8..6).prop_map(|(i, v)| Op::Set(i, v)),
        2 => (any::<bool>(), 0u8..6, 0u8..6).prop_map(|(a, p, v)| Op::Insert(a, p, v)),
        2 => (-3i64..4, 0u8..6).prop_map(|(c, v)| Op::Rem(c, v)),
        1 => (-8i64..8, -8i64..8).prop_map(|(a, b)| Op::Trim(a, b)),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(a, b)| Op::Move(a, b)),
        1 => Just(Op::Restart),
    ]
}

fn norm(i: i64, len: i64) -> i64 {
    if i < 0 {
        i + len
    } else {
        i
    }
}

/// Applies `op` to the model (key "l", LMOVE to and from "l2").
fn apply(m: &mut VecDeque<u8>, m2: &mut VecDeque<u8>, op: &Op) {
    let len = m.len() as i64;
    match op {
        Op::Push(left, vs) => {
            for v in vs {
                if *left {
                    m.push_front(*v)
                } else {
                    m.push_back(*v)
                }
            }
        }
        Op::Pop(left, n) => {
            for _ in 0..(*n).max(1) {
                if *left {
                    m.pop_front();
                } else {
                    m.pop_back();
                }
            }
        }
        Op::Set(i, v) => {
            let i = norm(*i, len);
            if (0..len).contains(&i) {
                m[i as usize] = *v;
            }
        }
        Op::Insert(after, p, v) => {
            if let Some(i) = m.iter().position(|x| x == p) {
                m.insert(if *after { i + 1 } else { i }, *v);
            }
        }
        Op::Rem(count, v) => {
            let limit = if *count == 0 {
                usize::MAX
            } else {
                count.unsigned_abs() as usize
            };
            let mut idx: Vec<usize> = (0..m.len()).filter(|&i| m[i] == *v).collect();
            if *count < 0 {
                idx.reverse();
            }
            idx.truncate(limit);
            idx.sort_unstable();
            for i in idx.into_iter().rev() {
                m.remove(i);
            }
        }
        Op::Trim(a, b) => {
            let a = norm(*a, len).max(0);
            let b = norm(*b, len);
            if a > b || a >= len {
                m.clear();
            } else {
                let b = b.min(len - 1);
                *m = m.range(a as usize..=b as usize).copied().collect();
            }
        }
        Op::Move(from_left, to_left) => {
            let v = if *from_left {
                m.pop_front()
            } else {
                m.pop_back()
            };
            if let Some(v) = v {
                if *to_left {
                    m2.push_front(v)
                } else {
                    m2.push_back(v)
                }
            }
        }
        Op::Restart => {}
    }
}

fn send(c: &mut redis::Connection, op: &Op) {
    let side = |l: bool| if l { "LEFT" } else { "RIGHT" };
    let mut cmd;
    match op {
        Op::Push(left, vs) => {
            cmd = redis::cmd(if *left { "LPUSH" } else { "RPUSH" });
            cmd.arg("l");
            for v in vs {
                cmd.arg(v.to_string());
            }
        }
        Op::Pop(left, n) => {
            cmd = redis::cmd(if *left { "LPOP" } else { "RPOP" });
            cmd.arg("l").arg((*n).max(1));
        }
        Op::Set(i, v) => {
            cmd = redis::cmd("LSET");
            cmd.arg("l").arg(*i).arg(v.to_string());
        }
        Op::Insert(after, p, v) => {
            cmd = redis::cmd("LINSERT");
            cmd.arg("l")
                .arg(if *after { "AFTER" } else { "BEFORE" })
                .arg(p.to_string())
                .arg(v.to_string());
        }
        Op::Rem(count, v) => {
            cmd = redis::cmd("LREM");
            cmd.arg("l").arg(*count).arg(v.to_string());
        }
        Op::Trim(a, b) => {
            cmd = redis::cmd("LTRIM");
            cmd.arg("l").arg(*a).arg(*b);
        }
        Op::Move(f, t) => {
            cmd = redis::cmd("LMOVE");
            cmd.arg("l").arg("l2").arg(side(*f)).arg(side(*t));
        }
        Op::Restart => unreachable!(),
    }
    // Errors (LSET out of range, LSET on a missing key) are part of the
    // model: they change nothing.
    let _: redis::Value = cmd.query(c).unwrap_or(redis::Value::Nil);
}

fn check(c: &mut redis::Connection, key: &str, m: &VecDeque<u8>) {
    let got: Vec<u8> = lrange(c, key).iter().map(|s| s.parse().unwrap()).collect();
    let want: Vec<u8> = m.iter().copied().collect();
    assert_eq!(got, want, "{key}");
    let n: usize = c.llen(key).unwrap();
    assert_eq!(n, m.len());
    if let Some(last) = m.back() {
        let v: String = c.lindex(key, -1).unwrap();
        assert_eq!(v, last.to_string());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn random_list_operations_match_a_vecdeque_across_restarts(
        ops in proptest::collection::vec(op(), 1..60)
    ) {
        let mut s = TestServer::start();
        let mut c = s.client();
        let mut m = VecDeque::new();
        let mut m2 = VecDeque::new();
        for op in &ops {
            if let Op::Restart = op {
                drop(c);
                s = s.restart();
                c = s.client();
            } else {
                send(&mut c, op);
                apply(&mut m, &mut m2, op);
            }
            check(&mut c, "l", &m);
        }
        check(&mut c, "l2", &m2);
        drop(c);
        let s = s.restart();
        let mut c = s.client();
        check(&mut c, "l", &m);
        check(&mut c, "l2", &m2);
    }
}
