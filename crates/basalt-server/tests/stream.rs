//! Streams through real connections: XADD, XLEN, XRANGE, XREVRANGE, XDEL
//! and XTRIM with Redis 7.0's replies, their persistence across a restart,
//! and the id index staying right when other commands change the key.
//! (Replies are also compared with redis-server by
//! `scripts/difftest_streams.py`.)

use crate::common;

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

#[test]
fn consumer_groups_deliver_each_entry_once_and_survive_a_restart() {
    let s = TestServer::start();
    let mut r = s.raw();
    for i in 1..=20 {
        r.cmd(&["XADD", "q", &format!("{i}-0"), "job", &i.to_string()]);
    }
    assert_eq!(r.cmd(&["XGROUP", "CREATE", "q", "workers", "0"]), ok());
    // Four consumers on four connections take entries concurrently.
    let addr = s.addr();
    let takers: Vec<_> = (0..4)
        .map(|w| {
            std::thread::spawn(move || {
                let mut c = common::Raw::connect(addr);
                let name = format!("w{w}");
                let mut got = Vec::new();
                for _ in 0..20 {
                    let reply = c.cmd(&[
                        "XREADGROUP",
                        "GROUP",
                        "workers",
                        &name,
                        "COUNT",
                        "2",
                        "STREAMS",
                        "q",
                        ">",
                    ]);
                    let Frame::Array(streams) = reply else { break };
                    let Frame::Array(ref pair) = streams[0] else {
                        panic!()
                    };
                    let Frame::Array(ref entries) = pair[1] else {
                        panic!()
                    };
                    for e in entries {
                        let Frame::Array(ref e) = *e else { panic!() };
                        let Frame::Bulk(ref id) = e[0] else { panic!() };
                        got.push(String::from_utf8(id.clone()).unwrap());
                    }
                }
                (name, got)
            })
        })
        .collect();
    let mut all: Vec<String> = Vec::new();
    let mut by: Vec<(String, Vec<String>)> = Vec::new();
    for t in takers {
        let (name, got) = t.join().unwrap();
        all.extend(got.iter().cloned());
        by.push((name, got));
    }
    all.sort_by_key(|id| id.split('-').next().unwrap().parse::<u64>().unwrap());
    let want: Vec<String> = (1..=20).map(|i| format!("{i}-0")).collect();
    assert_eq!(all, want, "every entry delivered exactly once");
    // Acknowledge half of them; the rest stay pending across a restart.
    let (first, ids) = &by.iter().find(|(_, g)| !g.is_empty()).unwrap().clone();
    let mut ack = vec!["XACK", "q", "workers"];
    ack.extend(ids.iter().map(String::as_str));
    assert_eq!(r.cmd(&ack), int(ids.len() as i64));
    let pending = 20 - ids.len() as i64;
    let s = s.restart();
    let mut r = s.raw();
    let Frame::Array(summary) = r.cmd(&["XPENDING", "q", "workers"]) else {
        panic!("XPENDING summary")
    };
    assert_eq!(summary[0], int(pending));
    // The consumer that acked has nothing pending; the others' history is back.
    let reply = r.cmd(&["XREADGROUP", "GROUP", "workers", first, "STREAMS", "q", "0"]);
    assert_eq!(reply, arr(vec![arr(vec![bulk("q"), arr(vec![])])]));
    assert_eq!(
        r.cmd(&[
            "XREADGROUP",
            "GROUP",
            "workers",
            "late",
            "STREAMS",
            "q",
            ">"
        ]),
        Frame::NullArray,
        "nothing new after a restart"
    );
    let Frame::Array(rows) = r.cmd(&["XPENDING", "q", "workers", "-", "+", "100"]) else {
        panic!("XPENDING rows")
    };
    assert_eq!(rows.len() as i64, pending);
}

#[test]
fn blocked_xreadgroup_gets_the_next_new_entry() {
    let s = TestServer::start();
    let mut w = s.raw();
    assert_eq!(
        w.cmd(&["XGROUP", "CREATE", "q", "g", "$", "MKSTREAM"]),
        ok()
    );
    let mut a = s.raw();
    a.send_cmd(&[
        b"XREADGROUP",
        b"GROUP",
        b"g",
        b"alice",
        b"BLOCK",
        b"0",
        b"STREAMS",
        b"q",
        b">",
    ]);
    s.wait_blocked(1);
    assert_eq!(w.cmd(&["XADD", "q", "7-1", "k", "v"]), bulk("7-1"));
    assert_eq!(
        a.read(),
        arr(vec![arr(vec![
            bulk("q"),
            arr(vec![entry("7-1", &["k", "v"])])
        ])])
    );
    let Frame::Array(rows) = w.cmd(&["XPENDING", "q", "g", "IDLE", "0", "-", "+", "10", "alice"])
    else {
        panic!("XPENDING rows")
    };
    assert_eq!(rows.len(), 1);
    let Frame::Array(ref row) = rows[0] else {
        panic!()
    };
    assert_eq!(row[0], bulk("7-1"));
    assert_eq!(row[1], bulk("alice"));
    assert_eq!(row[3], int(1));
    assert_eq!(w.cmd(&["XACK", "q", "g", "7-1"]), int(1));
    assert_eq!(
        w.cmd(&["XACK", "q", "g", "7-1"]),
        int(0),
        "acknowledged once"
    );
}

/// The ids in an XREADGROUP / XRANGE reply's first stream (or entries).
fn ids_of(entries: &Frame) -> Vec<String> {
    let Frame::Array(entries) = entries else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|e| match e {
            Frame::Array(e) => match &e[0] {
                Frame::Bulk(id) => Some(String::from_utf8(id.clone()).unwrap()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

#[test]
fn kill_9_while_consumers_read_and_ack_loses_no_entry_and_acks_none_twice() {
    use common::binary::{Conn, Server};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "everysec", "65536");
    let mut c = Conn::connect(server.addr).unwrap();
    let all: Vec<String> = (1..=300).map(|i| format!("{i}-0")).collect();
    for id in &all {
        c.cmd(&[b"XADD", b"q", id.as_bytes(), b"n", b"x"]).unwrap();
    }
    c.cmd(&[b"XGROUP", b"CREATE", b"q", b"g", b"0"]).unwrap();
    // Read 5 at a time and acknowledge them, until about half are done,
    // then kill -9 with reads and acks in flight from a second client.
    let mut acked: Vec<String> = Vec::new();
    for _ in 0..30 {
        let reply = c
            .cmd(&[
                b"XREADGROUP",
                b"GROUP",
                b"g",
                b"w",
                b"COUNT",
                b"5",
                b"STREAMS",
                b"q",
                b">",
            ])
            .unwrap();
        let Frame::Array(streams) = reply else { break };
        let Frame::Array(pair) = &streams[0] else {
            panic!()
        };
        let got = ids_of(&pair[1]);
        let mut cmd: Vec<&[u8]> = vec![b"XACK", b"q", b"g"];
        cmd.extend(got.iter().map(|s| s.as_bytes()));
        assert_eq!(c.cmd(&cmd).unwrap(), int(got.len() as i64));
        acked.extend(got);
    }
    let addr = server.addr;
    let busy = std::thread::spawn(move || {
        let Ok(mut c) = Conn::connect(addr) else {
            return;
        };
        for _ in 0..1000 {
            let Ok(reply) = c.cmd(&[
                b"XREADGROUP",
                b"GROUP",
                b"g",
                b"x",
                b"COUNT",
                b"3",
                b"STREAMS",
                b"q",
                b">",
            ]) else {
                return;
            };
            let Frame::Array(streams) = reply else { return };
            let Frame::Array(pair) = &streams[0] else {
                return;
            };
            let got = ids_of(&pair[1]);
            let mut cmd: Vec<&[u8]> = vec![b"XACK", b"q", b"g"];
            cmd.extend(got.iter().map(|s| s.as_bytes()));
            if c.cmd(&cmd).is_err() {
                return;
            }
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(20));
    server.kill();
    let _ = busy.join();
    let server = Server::start(dir.path(), "everysec", "65536");
    let mut c = Conn::connect(server.addr).unwrap();
    // Everything is still in the stream (acks do not delete entries).
    let range = c.cmd(&[b"XRANGE", b"q", b"-", b"+"]).unwrap();
    assert_eq!(ids_of(&range), all);
    // Pending entries: none that this test saw acknowledged.
    let rows = c
        .cmd(&[b"XPENDING", b"q", b"g", b"-", b"+", b"1000"])
        .unwrap();
    let pending = ids_of(&rows);
    for id in &acked {
        assert!(
            !pending.contains(id),
            "{id} was acknowledged and is pending again"
        );
    }
    // Not delivered yet: what `>` still gives. Every entry is exactly one of
    // pending, delivered-and-acked (by either client) or undelivered.
    let rest = c
        .cmd(&[
            b"XREADGROUP",
            b"GROUP",
            b"g",
            b"after",
            b"STREAMS",
            b"q",
            b">",
        ])
        .unwrap();
    let undelivered = match rest {
        Frame::Array(streams) => match &streams[0] {
            Frame::Array(pair) => ids_of(&pair[1]),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    for id in &undelivered {
        assert!(!pending.contains(id) && !acked.contains(id), "{id} twice");
    }
    // The undelivered are exactly the tail after the group's last id.
    if let Some(first) = undelivered.first() {
        let at = all.iter().position(|id| id == first).unwrap();
        assert_eq!(
            &all[at..],
            &undelivered[..],
            "a gap in what is left to deliver"
        );
    }
    assert!(
        acked.len() >= 100,
        "the test acknowledged {} first",
        acked.len()
    );
}

#[test]
fn xclaim_and_xautoclaim_move_idle_entries_and_drop_deleted_ones() {
    let s = TestServer::start();
    let mut r = s.raw();
    for i in 1..=4 {
        r.cmd(&["XADD", "s", &format!("{i}-1"), "f", &i.to_string()]);
    }
    r.cmd(&["XGROUP", "CREATE", "s", "g", "0"]);
    r.cmd(&["XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">"]);
    // Nothing is idle for an hour yet.
    assert_eq!(
        r.cmd(&["XCLAIM", "s", "g", "b", "3600000", "1-1"]),
        arr(vec![])
    );
    // IDLE backdates the delivery, so a later min-idle-time finds it.
    assert_eq!(
        r.cmd(&["XCLAIM", "s", "g", "b", "0", "1-1", "IDLE", "7200000", "JUSTID"]),
        arr(vec![bulk("1-1")])
    );
    assert_eq!(
        r.cmd(&["XAUTOCLAIM", "s", "g", "c", "3600000", "0"]),
        arr(vec![
            bulk("0-0"),
            arr(vec![entry("1-1", &["f", "1"])]),
            arr(vec![])
        ])
    );
    r.cmd(&["XDEL", "s", "2-1"]);
    assert_eq!(
        r.cmd(&["XAUTOCLAIM", "s", "g", "c", "0", "0", "JUSTID"]),
        arr(vec![
            bulk("0-0"),
            arr(vec![bulk("1-1"), bulk("3-1"), bulk("4-1")]),
            arr(vec![bulk("2-1")])
        ])
    );
    let Frame::Array(summary) = r.cmd(&["XPENDING", "s", "g"]) else {
        panic!()
    };
    assert_eq!(summary[0], int(3), "the deleted entry left the PEL");
    assert_eq!(
        summary[3],
        arr(vec![arr(vec![bulk("c"), bulk("3")])]),
        "everything is c's now"
    );
}

#[test]
fn xinfo_reports_lengths_groups_lag_and_the_full_form() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["XADD", "s", "1-1", "a", "1"]);
    r.cmd(&["XADD", "s", "2-1", "b", "2"]);
    r.cmd(&["XGROUP", "CREATE", "s", "g", "0"]);
    r.cmd(&[
        "XREADGROUP",
        "GROUP",
        "g",
        "c",
        "COUNT",
        "1",
        "STREAMS",
        "s",
        ">",
    ]);
    let info = |r: &mut common::Raw, args: &[&str]| -> Vec<Frame> {
        match r.cmd(args) {
            Frame::Array(v) => v,
            other => panic!("{other:?}"),
        }
    };
    let stream = info(&mut r, &["XINFO", "STREAM", "s"]);
    assert_eq!(stream[0..2], [bulk("length"), int(2)]);
    assert_eq!(stream[6..8], [bulk("last-generated-id"), bulk("2-1")]);
    assert_eq!(stream[10..12], [bulk("entries-added"), int(2)]);
    assert_eq!(
        stream[16..18],
        [bulk("first-entry"), entry("1-1", &["a", "1"])]
    );
    let groups = info(&mut r, &["XINFO", "GROUPS", "s"]);
    assert_eq!(
        groups[0],
        arr(vec![
            bulk("name"),
            bulk("g"),
            bulk("consumers"),
            int(1),
            bulk("pending"),
            int(1),
            bulk("last-delivered-id"),
            bulk("1-1"),
            bulk("entries-read"),
            int(1),
            bulk("lag"),
            int(1),
        ])
    );
    let full = info(&mut r, &["XINFO", "STREAM", "s", "FULL", "COUNT", "1"]);
    assert_eq!(full[14], bulk("entries"));
    assert_eq!(full[15], arr(vec![entry("1-1", &["a", "1"])]));
    // After a restart the counters are derived from the entries.
    let s = s.restart();
    let mut r = s.raw();
    let stream = info(&mut r, &["XINFO", "STREAM", "s"]);
    assert_eq!(stream[10..12], [bulk("entries-added"), int(2)]);
    let groups = info(&mut r, &["XINFO", "GROUPS", "s"]);
    let Frame::Array(ref g) = groups[0] else {
        panic!()
    };
    assert_eq!(g[9..12], [int(1), bulk("lag"), int(1)]);
}

#[test]
fn a_stream_expires_and_works_in_a_transaction() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["XADD", "s", "1-1", "a", "1"]);
    r.cmd(&["XGROUP", "CREATE", "s", "g", "0"]);
    assert_eq!(r.cmd(&["PEXPIRE", "s", "50"]), int(1));
    assert!(
        common::eventually(std::time::Duration::from_secs(5), || r
            .cmd(&["EXISTS", "s"])
            == int(0)),
        "the stream expired"
    );
    assert_eq!(r.cmd(&["XLEN", "s"]), int(0));
    // A new stream under the name starts from scratch (no stale index).
    assert_eq!(r.cmd(&["XADD", "s", "1-1", "b", "2"]), bulk("1-1"));
    assert_eq!(r.cmd(&["MULTI"]), ok());
    r.cmd(&["XADD", "s", "2-1", "c", "3"]);
    r.cmd(&["XRANGE", "s", "-", "+"]);
    assert_eq!(
        r.cmd(&["EXEC"]),
        arr(vec![
            bulk("2-1"),
            arr(vec![entry("1-1", &["b", "2"]), entry("2-1", &["c", "3"])])
        ])
    );
}

/// A small xorshift for the randomized test below.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// What a stream looks like from outside: its entries, its XINFO (without
/// times), and each group's pending summary.
fn snapshot(r: &mut common::Raw, key: &str) -> Vec<Frame> {
    let mut out = vec![
        r.cmd(&["XRANGE", key, "-", "+"]),
        r.cmd(&["XINFO", "STREAM", key]),
    ];
    let groups = r.cmd(&["XINFO", "GROUPS", key]);
    if let Frame::Array(gs) = &groups {
        for g in gs {
            if let Frame::Array(fields) = g {
                if let Frame::Bulk(name) = &fields[1] {
                    let name = String::from_utf8(name.clone()).unwrap();
                    out.push(r.cmd(&["XPENDING", key, &name]));
                }
            }
        }
    }
    out.push(groups);
    out
}

#[test]
fn random_stream_histories_read_the_same_after_a_restart() {
    for seed in 1..=6u64 {
        let mut s = TestServer::start();
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut r = s.raw();
        for _ in 0..300 {
            let ms = rng.below(40).to_string();
            let id = format!("{}-{}", ms, rng.below(3));
            let g = ["g1", "g2"][rng.below(2) as usize];
            let c = ["a", "b", "c"][rng.below(3) as usize];
            match rng.below(12) {
                0..=3 => {
                    let idarg = if rng.below(3) == 0 {
                        format!("{ms}-*")
                    } else {
                        id
                    };
                    if rng.below(5) == 0 {
                        r.cmd(&[
                            "XADD",
                            "s",
                            "MAXLEN",
                            &rng.below(10).to_string(),
                            &idarg,
                            "f",
                            "v",
                        ]);
                    } else {
                        r.cmd(&["XADD", "s", &idarg, "f", "v"]);
                    }
                }
                4 => {
                    r.cmd(&["XDEL", "s", &id]);
                }
                5 => {
                    r.cmd(&["XTRIM", "s", "MINID", &ms]);
                }
                6 => {
                    r.cmd(&["XGROUP", "CREATE", "s", g, "0", "MKSTREAM"]);
                }
                7 | 8 => {
                    r.cmd(&[
                        "XREADGROUP",
                        "GROUP",
                        g,
                        c,
                        "COUNT",
                        "2",
                        "STREAMS",
                        "s",
                        ">",
                    ]);
                }
                9 => {
                    r.cmd(&["XACK", "s", g, &id]);
                }
                10 => {
                    r.cmd(&["XCLAIM", "s", g, c, "0", &id, "JUSTID"]);
                }
                _ => {
                    if rng.below(4) == 0 {
                        r.cmd(&["XSETID", "s", &format!("{}-0", 40 + rng.below(5))]);
                    } else {
                        r.cmd(&["XGROUP", "SETID", "s", g, "0"]);
                    }
                }
            }
        }
        // Plain XADDs last: they write no metadata, which the restart
        // must derive.
        for _ in 0..3 {
            r.cmd(&["XADD", "s", "*", "f", "tail"]);
        }
        let before = snapshot(&mut r, "s");
        s = s.restart();
        let mut r = s.raw();
        let after = snapshot(&mut r, "s");
        assert_eq!(
            before, after,
            "seed {seed}: the stream read differently after a restart"
        );
    }
}

#[test]
fn a_blocked_xreadgroup_is_told_when_its_stream_or_group_goes_away() {
    let s = TestServer::start();
    let mut w = s.raw();
    w.cmd(&["XGROUP", "CREATE", "q", "g", "$", "MKSTREAM"]);
    let mut a = s.raw();
    a.send_cmd(&[
        b"XREADGROUP",
        b"GROUP",
        b"g",
        b"c",
        b"BLOCK",
        b"0",
        b"STREAMS",
        b"q",
        b">",
    ]);
    s.wait_blocked(1);
    assert_eq!(w.cmd(&["DEL", "q"]), int(1));
    assert_eq!(a.read(), err("UNBLOCKED the stream key no longer exists"));
    w.cmd(&["XGROUP", "CREATE", "q", "g", "$", "MKSTREAM"]);
    a.send_cmd(&[
        b"XREADGROUP",
        b"GROUP",
        b"g",
        b"c",
        b"BLOCK",
        b"0",
        b"STREAMS",
        b"q",
        b">",
    ]);
    s.wait_blocked(1);
    assert_eq!(w.cmd(&["XGROUP", "DESTROY", "q", "g"]), int(1));
    assert_eq!(
        a.read(),
        err("NOGROUP the consumer group this client was blocked on no longer exists")
    );
    s.wait_blocked(0);
}

/// INFO stats `basalt_stream_index_builds_off_worker`.
fn stream_builds(c: &mut redis::Connection) -> u64 {
    common::info_stat(c, "basalt_stream_index_builds_off_worker")
}

/// `n` entries `1-1` .. `n-1` (field `f`, value the number) in `key`.
fn fill(c: &mut redis::Connection, key: &str, n: u64) {
    let mut pipe = redis::pipe();
    for i in 1..=n {
        pipe.cmd("XADD")
            .arg(key)
            .arg(format!("{i}-1"))
            .arg("f")
            .arg(i)
            .ignore();
    }
    pipe.query::<()>(c).unwrap();
}

/// After a restart no stream has its index in memory: the first command on
/// a big one has it built off the worker and runs again, with its effects
/// once: XADD adds one entry and publishes one event, XREADGROUP over two
/// big streams delivers each entry once and counts its lookups once;
/// before MULTI/EXEC and a script the indexes their keys need are built.
#[test]
fn a_big_streams_index_is_built_off_the_worker_and_the_command_runs_once() {
    let s = TestServer::start();
    let mut c = s.client();
    fill(&mut c, "s1", 9000);
    fill(&mut c, "s2", 9000);
    fill(&mut c, "small", 10);
    for key in ["s1", "s2"] {
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(key)
            .arg("g")
            .arg("0")
            .query(&mut c)
            .unwrap();
    }
    let s = s.restart();
    let mut c = s.client();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("KEA")
        .query(&mut c)
        .unwrap();
    let mut sub = s.raw();
    sub.cmd(&["SUBSCRIBE", "__keyspace@0__:s1"]);

    let len: u64 = redis::cmd("XLEN").arg("small").query(&mut c).unwrap();
    assert_eq!(len, 10);
    assert_eq!(
        stream_builds(&mut c),
        0,
        "a small stream is rebuilt in place"
    );
    let id: String = redis::cmd("XADD")
        .arg("s1")
        .arg("*")
        .arg("f")
        .arg("new")
        .query(&mut c)
        .unwrap();
    assert_eq!(stream_builds(&mut c), 1);
    let len: u64 = redis::cmd("XLEN").arg("s1").query(&mut c).unwrap();
    assert_eq!(len, 9001, "one entry added");
    let _: u64 = redis::cmd("XDEL").arg("s1").arg(&id).query(&mut c).unwrap();
    for event in ["xadd", "xdel"] {
        assert_eq!(
            sub.read(),
            Frame::Array(vec![
                bulk("message"),
                bulk("__keyspace@0__:s1"),
                bulk(event)
            ]),
        );
    }

    // Two big streams, s2 not cached: both built before anything is
    // delivered, each entry delivered once.
    let hits = common::info_stat(&mut c, "keyspace_hits");
    let read: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g")
        .arg("alice")
        .arg("COUNT")
        .arg(5)
        .arg("STREAMS")
        .arg("s1")
        .arg("s2")
        .arg(">")
        .arg(">")
        .query(&mut c)
        .unwrap();
    let redis::Value::Array(streams) = read else {
        panic!("{read:?}")
    };
    assert_eq!(streams.len(), 2);
    assert_eq!(stream_builds(&mut c), 2);
    // Two hits per key, as in Redis 7.0 (a lookup, then one to serve it).
    assert_eq!(common::info_stat(&mut c, "keyspace_hits"), hits + 4);
    for key in ["s1", "s2"] {
        let pending: redis::Value = redis::cmd("XPENDING")
            .arg(key)
            .arg("g")
            .query(&mut c)
            .unwrap();
        let redis::Value::Array(p) = pending else {
            panic!("{pending:?}")
        };
        assert_eq!(p[0], redis::Value::Int(5), "{key}: five delivered once");
    }

    // EXEC runs its queue in place: the index is built before it runs;
    // so does a script's key's.
    let s = s.restart();
    let mut c = s.client();
    let (len,): (u64,) = redis::pipe()
        .atomic()
        .cmd("XLEN")
        .arg("s2")
        .query(&mut c)
        .unwrap();
    assert_eq!(len, 9000);
    assert_eq!(stream_builds(&mut c), 1);
    let len: u64 = redis::cmd("EVAL")
        .arg("return redis.call('xlen', KEYS[1])")
        .arg(1)
        .arg("s1")
        .query(&mut c)
        .unwrap();
    assert_eq!(len, 9000);
    assert_eq!(stream_builds(&mut c), 2);

    // A key named twice: built once, read twice; an XADD that fails after
    // opening the stream (an id too small) leaves nothing that reads as
    // in use: the next command builds again and answers.
    let s = s.restart();
    let mut c = s.client();
    let read: redis::Value = redis::cmd("XREAD")
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg("s1")
        .arg("s1")
        .arg("0")
        .arg("0")
        .query(&mut c)
        .unwrap();
    let redis::Value::Array(streams) = read else {
        panic!("{read:?}")
    };
    assert_eq!(streams.len(), 2);
    assert_eq!(stream_builds(&mut c), 1);
    let e = redis::cmd("XADD")
        .arg("s1")
        .arg("1-1")
        .arg("f")
        .arg("v")
        .query::<String>(&mut c)
        .unwrap_err();
    assert!(e.to_string().contains("equal or smaller"), "{e}");
    let len: u64 = redis::cmd("XLEN").arg("s1").query(&mut c).unwrap();
    assert_eq!(len, 9000);
    assert_eq!(stream_builds(&mut c), 2);
}
