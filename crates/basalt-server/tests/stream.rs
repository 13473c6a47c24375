//! Streams through real connections: XADD, XLEN, XRANGE, XREVRANGE, XDEL
//! and XTRIM with Redis 7.0's replies, their persistence across a restart,
//! and the id index staying right when other commands change the key.
//! (Replies are also compared with redis-server by
//! `scripts/difftest_streams.py`.)

mod common;

use basalt_resp::Frame;
use common::{bulk, err, ok, TestServer};

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn arr(items: Vec<Frame>) -> Frame {
    Frame::Array(items)
}

/// One entry as XRANGE replies it.
fn entry(id: &str, pairs: &[&str]) -> Frame {
    arr(vec![bulk(id), arr(pairs.iter().map(|p| bulk(p)).collect())])
}

#[test]
fn xadd_assigns_ids_and_xrange_reads_them_back_in_order() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["XADD", "s", "1-1", "a", "1"]), bulk("1-1"));
    assert_eq!(r.cmd(&["XADD", "s", "1-*", "b", "2"]), bulk("1-2"));
    assert_eq!(r.cmd(&["XADD", "s", "3", "c", "3", "d", "4"]), bulk("3-0"));
    assert_eq!(
        r.cmd(&["XADD", "s", "2-0", "x", "y"]),
        err("ERR The ID specified in XADD is equal or smaller than the target stream top item")
    );
    assert_eq!(
        r.cmd(&["XADD", "s", "0-0", "x", "y"]),
        err("ERR The ID specified in XADD must be greater than 0-0")
    );
    let Frame::Bulk(auto) = r.cmd(&["XADD", "s", "*", "e", "5"]) else {
        panic!("XADD * replies the id")
    };
    let auto = String::from_utf8(auto).unwrap();
    assert!(auto.ends_with("-0") && auto.len() > 10, "{auto}");
    assert_eq!(r.cmd(&["XLEN", "s"]), int(4));
    assert_eq!(
        r.cmd(&["XRANGE", "s", "-", "3"]),
        arr(vec![
            entry("1-1", &["a", "1"]),
            entry("1-2", &["b", "2"]),
            entry("3-0", &["c", "3", "d", "4"]),
        ])
    );
    assert_eq!(
        r.cmd(&["XREVRANGE", "s", "(3", "-", "COUNT", "1"]),
        arr(vec![entry("3-0", &["c", "3", "d", "4"])])
    );
    assert_eq!(
        r.cmd(&["XRANGE", "s", "(1-1", "(3-0"]),
        arr(vec![entry("1-2", &["b", "2"])])
    );
    assert_eq!(r.cmd(&["TYPE", "s"]), Frame::Simple(b"stream".to_vec()));
    assert_eq!(r.cmd(&["OBJECT", "ENCODING", "s"]), bulk("stream"));
    assert_eq!(
        r.cmd(&["LPUSH", "s", "x"]),
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
}

#[test]
fn xdel_and_xtrim_remove_entries_and_ids_never_go_back() {
    let s = TestServer::start();
    let mut r = s.raw();
    for i in 1..=10 {
        let id = format!("{i}-0");
        assert_eq!(r.cmd(&["XADD", "s", &id, "n", &i.to_string()]), bulk(&id));
    }
    assert_eq!(r.cmd(&["XDEL", "s", "10-0", "99-0", "5-0"]), int(2));
    assert_eq!(r.cmd(&["XLEN", "s"]), int(8));
    // The top id stays 10-0 although the entry is gone.
    assert_eq!(
        r.cmd(&["XADD", "s", "10-0", "n", "again"]),
        err("ERR The ID specified in XADD is equal or smaller than the target stream top item")
    );
    assert_eq!(r.cmd(&["XTRIM", "s", "MAXLEN", "3"]), int(5));
    assert_eq!(
        r.cmd(&["XRANGE", "s", "-", "+"]),
        arr(vec![
            entry("7-0", &["n", "7"]),
            entry("8-0", &["n", "8"]),
            entry("9-0", &["n", "9"]),
        ])
    );
    assert_eq!(r.cmd(&["XTRIM", "s", "MINID", "9"]), int(2));
    assert_eq!(
        r.cmd(&["XADD", "s", "MAXLEN", "1", "11-0", "n", "11"]),
        bulk("11-0")
    );
    assert_eq!(
        r.cmd(&["XRANGE", "s", "-", "+"]),
        arr(vec![entry("11-0", &["n", "11"])])
    );
    // An emptied stream still exists, as in Redis.
    assert_eq!(r.cmd(&["XTRIM", "s", "MAXLEN", "0"]), int(1));
    assert_eq!(r.cmd(&["EXISTS", "s"]), int(1));
    assert_eq!(r.cmd(&["XLEN", "s"]), int(0));
}

#[test]
fn streams_survive_a_restart_and_other_commands_keep_the_index_right() {
    let s = TestServer::start();
    let mut r = s.raw();
    for i in 1..=200 {
        r.cmd(&["XADD", "s", &format!("{i}-1"), "i", &i.to_string()]);
    }
    r.cmd(&["XDEL", "s", "100-1"]);
    // RENAME and COPY carry the whole stream; the old name's index is gone.
    assert_eq!(r.cmd(&["RENAME", "s", "t"]), ok());
    assert_eq!(r.cmd(&["XLEN", "s"]), int(0));
    assert_eq!(r.cmd(&["COPY", "t", "s"]), int(1));
    assert_eq!(r.cmd(&["XADD", "s", "201-1", "i", "201"]), bulk("201-1"));
    assert_eq!(r.cmd(&["XLEN", "s"]), int(200));
    assert_eq!(r.cmd(&["XLEN", "t"]), int(199));
    // A key replaced by another command is rebuilt, not served stale.
    assert_eq!(r.cmd(&["DEL", "t"]), int(1));
    assert_eq!(r.cmd(&["XADD", "t", "5-5", "x", "y"]), bulk("5-5"));
    assert_eq!(
        r.cmd(&["XRANGE", "t", "-", "+"]),
        arr(vec![entry("5-5", &["x", "y"])])
    );
    let s = s.restart();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["XLEN", "s"]), int(200));
    assert_eq!(
        r.cmd(&["XREVRANGE", "s", "+", "-", "COUNT", "2"]),
        arr(vec![
            entry("201-1", &["i", "201"]),
            entry("200-1", &["i", "200"])
        ])
    );
    assert_eq!(
        r.cmd(&["XRANGE", "s", "99-1", "101-1"]),
        arr(vec![
            entry("99-1", &["i", "99"]),
            entry("101-1", &["i", "101"])
        ])
    );
    assert_eq!(
        r.cmd(&["XADD", "s", "201-1", "i", "again"]),
        err("ERR The ID specified in XADD is equal or smaller than the target stream top item")
    );
}

#[test]
fn stream_writes_publish_keyspace_events() {
    let s = TestServer::start();
    let mut r = s.raw();
    let mut sub = s.raw();
    r.cmd(&["CONFIG", "SET", "notify-keyspace-events", "Kt"]);
    sub.cmd(&["SUBSCRIBE", "__keyspace@0__:s"]);
    r.cmd(&["XADD", "s", "MAXLEN", "1", "1-1", "a", "1"]);
    r.cmd(&["XADD", "s", "MAXLEN", "1", "2-1", "a", "1"]);
    r.cmd(&["XDEL", "s", "2-1"]);
    let event = |name: &str| arr(vec![bulk("message"), bulk("__keyspace@0__:s"), bulk(name)]);
    assert_eq!(sub.read(), event("xadd"));
    assert_eq!(sub.read(), event("xadd"));
    assert_eq!(sub.read(), event("xtrim"));
    assert_eq!(sub.read(), event("xdel"));
}

#[test]
fn blocked_xread_is_woken_by_xadd_and_sees_what_came_after_dollar() {
    let s = TestServer::start();
    let mut w = s.raw();
    assert_eq!(w.cmd(&["XADD", "s", "1-1", "old", "x"]), bulk("1-1"));
    let mut a = s.raw();
    let mut b = s.raw();
    a.send_cmd(&[b"XREAD", b"BLOCK", b"0", b"STREAMS", b"s", b"$"]);
    b.send_cmd(&[
        b"XREAD", b"COUNT", b"5", b"BLOCK", b"10000", b"STREAMS", b"other", b"s", b"0", b"$",
    ]);
    s.wait_blocked(2);
    // Another write that is not to `s` wakes nobody.
    assert_eq!(w.cmd(&["SET", "x", "1"]), ok());
    assert_eq!(w.cmd(&["XADD", "s", "2-1", "new", "y"]), bulk("2-1"));
    let want = arr(vec![arr(vec![
        bulk("s"),
        arr(vec![entry("2-1", &["new", "y"])]),
    ])]);
    assert_eq!(a.read(), want, "both readers get the entry added after `$`");
    assert_eq!(b.read(), want);
    s.wait_blocked(0);
    // A timeout replies a null array.
    assert_eq!(
        a.cmd(&["XREAD", "BLOCK", "20", "STREAMS", "s", "$"]),
        Frame::NullArray
    );
    // Inside MULTI it does not block.
    assert_eq!(a.cmd(&["MULTI"]), ok());
    a.cmd(&["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]);
    assert_eq!(a.cmd(&["EXEC"]), arr(vec![Frame::NullArray]));
}
