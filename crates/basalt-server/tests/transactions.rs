//! MULTI / EXEC / DISCARD / WATCH through real connections: Redis 7.0's
//! replies and errors, WATCH against every kind of change, isolation of EXEC
//! from other clients, and blocking commands inside a transaction. Every
//! loop is bounded in count and time.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use basalt_resp::Frame;
use common::{bulk, err, eventually, ok, Raw, TestServer};

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn arr(items: Vec<Frame>) -> Frame {
    Frame::Array(items)
}

fn queued() -> Frame {
    Frame::Simple(b"QUEUED".to_vec())
}

const EXECABORT: &str = "EXECABORT Transaction discarded because of previous errors.";

/// WATCH `key` on `r`, let `change` run on another connection, then
/// MULTI / PING / EXEC: the EXEC reply.
fn exec_after(s: &TestServer, key: &str, change: &[&[&str]]) -> Frame {
    let mut r = s.raw();
    let mut other = s.raw();
    assert_eq!(r.cmd(&["WATCH", key]), ok());
    for c in change {
        other.cmd(c);
    }
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["PING"]), queued());
    r.cmd(&["EXEC"])
}

fn pong() -> Frame {
    arr(vec![Frame::Simple(b"PONG".to_vec())])
}

#[test]
fn commands_inside_multi_reply_queued_and_exec_replies_each_result() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["SET", "a", "1"]), queued());
    assert_eq!(r.cmd(&["INCR", "a"]), queued());
    assert_eq!(r.cmd(&["GET", "a"]), queued());
    assert_eq!(r.cmd(&["LPUSH", "l", "x", "y"]), queued());
    // Nothing ran yet.
    assert_eq!(s.raw().cmd(&["EXISTS", "a"]), int(0));
    assert_eq!(r.cmd(&["EXEC"]), arr(vec![ok(), int(2), bulk("2"), int(2)]));
    assert_eq!(r.cmd(&["GET", "a"]), bulk("2"));
    // An empty transaction replies an empty array.
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["EXEC"]), arr(vec![]));
}

#[test]
fn redis_crate_atomic_pipeline_runs_as_a_transaction() {
    let s = TestServer::start();
    let mut c = s.client();
    let (a, b): (i64, i64) = redis::pipe()
        .atomic()
        .cmd("INCR")
        .arg("n")
        .cmd("INCRBY")
        .arg("n")
        .arg(10)
        .query(&mut c)
        .unwrap();
    assert_eq!((a, b), (1, 11));
}

#[test]
fn misuse_errors_match_redis() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["EXEC"]), err("ERR EXEC without MULTI"));
    assert_eq!(r.cmd(&["DISCARD"]), err("ERR DISCARD without MULTI"));
    assert_eq!(r.cmd(&["MULTI"]), ok());
    // Neither error aborts the transaction.
    assert_eq!(r.cmd(&["MULTI"]), err("ERR MULTI calls can not be nested"));
    assert_eq!(
        r.cmd(&["WATCH", "x"]),
        err("ERR WATCH inside MULTI is not allowed")
    );
    assert_eq!(r.cmd(&["SET", "x", "1"]), queued());
    assert_eq!(r.cmd(&["EXEC"]), arr(vec![ok()]));
    // The connection is out of MULTI again.
    assert_eq!(r.cmd(&["EXEC"]), err("ERR EXEC without MULTI"));
}

#[test]
fn queuing_error_makes_exec_abort_and_nothing_runs() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["SET", "a", "1"]), queued());
    assert_eq!(
        r.cmd(&["NOSUCHCMD", "x"]),
        err("ERR unknown command 'NOSUCHCMD', with args beginning with: 'x' ")
    );
    assert_eq!(r.cmd(&["SET", "b", "2"]), queued());
    assert_eq!(r.cmd(&["EXEC"]), err(EXECABORT));
    assert_eq!(
        r.cmd(&["MGET", "a", "b"]),
        arr(vec![Frame::NullBulk, Frame::NullBulk])
    );

    // A wrong arity does the same.
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(
        r.cmd(&["GET"]),
        err("ERR wrong number of arguments for 'get' command")
    );
    assert_eq!(r.cmd(&["EXEC"]), err(EXECABORT));

    // So does a command not allowed in a transaction (SAVE, SHUTDOWN).
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(
        r.cmd(&["SAVE"]),
        err("ERR Command not allowed inside a transaction")
    );
    assert_eq!(r.cmd(&["EXEC"]), err(EXECABORT));
    assert_eq!(r.cmd(&["EXISTS", "a"]), int(0));
}

#[test]
fn runtime_error_inside_exec_is_that_commands_reply_and_the_rest_runs() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["SET", "s", "text"]);
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["INCR", "s"]), queued());
    assert_eq!(r.cmd(&["LPUSH", "s", "x"]), queued());
    assert_eq!(r.cmd(&["SET", "t", "1"]), queued());
    assert_eq!(
        r.cmd(&["EXEC"]),
        arr(vec![
            err("ERR value is not an integer or out of range"),
            err("WRONGTYPE Operation against a key holding the wrong kind of value"),
            ok(),
        ])
    );
    assert_eq!(r.cmd(&["GET", "t"]), bulk("1"));
}

#[test]
fn discard_drops_the_queue_and_the_watches() {
    let s = TestServer::start();
    let mut r = s.raw();
    let mut other = s.raw();
    assert_eq!(r.cmd(&["WATCH", "w"]), ok());
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["SET", "a", "1"]), queued());
    assert_eq!(r.cmd(&["DISCARD"]), ok());
    assert_eq!(r.cmd(&["EXISTS", "a"]), int(0));
    // The watch on w is gone: a change to it does not fail the next EXEC.
    other.cmd(&["SET", "w", "changed"]);
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["PING"]), queued());
    assert_eq!(r.cmd(&["EXEC"]), pong());
}

#[test]
fn watch_race_between_two_connections() {
    let s = TestServer::start();
    let mut a = s.raw();
    let mut b = s.raw();
    a.cmd(&["SET", "balance", "10"]);

    // b writes the watched key between WATCH and EXEC: EXEC replies nil and
    // runs nothing.
    assert_eq!(a.cmd(&["WATCH", "balance"]), ok());
    assert_eq!(b.cmd(&["INCRBY", "balance", "5"]), int(15));
    assert_eq!(a.cmd(&["MULTI"]), ok());
    assert_eq!(a.cmd(&["SET", "balance", "0"]), queued());
    assert_eq!(a.cmd(&["EXEC"]), Frame::NullArray);
    assert_eq!(a.cmd(&["GET", "balance"]), bulk("15"));

    // Untouched: EXEC runs. Reads by others do not count as changes.
    assert_eq!(a.cmd(&["WATCH", "balance"]), ok());
    assert_eq!(b.cmd(&["GET", "balance"]), bulk("15"));
    assert_eq!(a.cmd(&["MULTI"]), ok());
    assert_eq!(a.cmd(&["SET", "balance", "0"]), queued());
    assert_eq!(a.cmd(&["EXEC"]), arr(vec![ok()]));

    // After EXEC the key is no longer watched.
    b.cmd(&["SET", "balance", "99"]);
    assert_eq!(a.cmd(&["MULTI"]), ok());
    assert_eq!(a.cmd(&["PING"]), queued());
    assert_eq!(a.cmd(&["EXEC"]), pong());

    // RESP3: the failed EXEC is a null.
    assert!(matches!(a.cmd(&["HELLO", "3"]), Frame::Map(_)));
    assert_eq!(a.cmd(&["WATCH", "balance"]), ok());
    b.cmd(&["SET", "balance", "1"]);
    assert_eq!(a.cmd(&["MULTI"]), ok());
    assert_eq!(a.cmd(&["PING"]), queued());
    assert_eq!(a.cmd(&["EXEC"]), Frame::Null);
}

#[test]
fn watch_sees_writes_of_every_kind_and_ignores_no_ops() {
    let s = TestServer::start();
    let mut setup = s.raw();
    setup.cmd(&["SET", "k", "v"]);
    setup.cmd(&["HSET", "h", "f", "1"]);
    setup.cmd(&["SADD", "st", "m"]);
    // Changes.
    let changes: &[&[&str]] = &[
        &["SET", "k", "v"],
        &["APPEND", "k", "x"],
        &["EXPIRE", "k", "100"],
        &["PERSIST", "k"],
        &["DEL", "k"],
    ];
    for change in changes {
        setup.cmd(&["SET", "k", "v"]);
        setup.cmd(&["EXPIRE", "k", "100"]);
        assert_eq!(
            exec_after(&s, "k", &[change]),
            Frame::NullArray,
            "{change:?} must touch the key"
        );
    }
    assert_eq!(
        exec_after(&s, "h", &[&["HSET", "h", "g", "2"]]),
        Frame::NullArray
    );
    assert_eq!(
        exec_after(&s, "h", &[&["HDEL", "h", "g"]]),
        Frame::NullArray
    );
    assert_eq!(
        exec_after(&s, "st", &[&["RENAME", "st", "st2"]]),
        Frame::NullArray
    );
    // A key deleted and re-created with the same value is a change.
    setup.cmd(&["SET", "r", "same"]);
    assert_eq!(
        exec_after(&s, "r", &[&["DEL", "r"], &["SET", "r", "same"]]),
        Frame::NullArray
    );
    // Not changes: reads, and writes that change nothing (as in Redis).
    setup.cmd(&["SADD", "st3", "m"]);
    assert_eq!(
        exec_after(
            &s,
            "st3",
            &[
                &["SMEMBERS", "st3"],
                &["SADD", "st3", "m"],
                &["SREM", "st3", "absent"],
                &["EXPIRE", "nokey", "10"],
            ]
        ),
        pong()
    );
    setup.cmd(&["ZADD", "z3", "1", "m"]);
    assert_eq!(
        exec_after(&s, "z3", &[&["ZADD", "z3", "1", "m"], &["ZREM", "z3", "x"]]),
        pong()
    );
    // A missing key that stays missing is untouched.
    assert_eq!(exec_after(&s, "missing", &[&["DEL", "missing"]]), pong());
}

#[test]
fn watch_remembers_the_database_of_the_key() {
    let s = TestServer::start();
    let mut r = s.raw();
    let mut other = s.raw();
    r.cmd(&["SET", "x", "1"]);
    assert_eq!(r.cmd(&["WATCH", "x"]), ok());
    assert_eq!(r.cmd(&["SELECT", "1"]), ok());
    // x of db 1 is another key.
    other.cmd(&["SELECT", "1"]);
    other.cmd(&["SET", "x", "other db"]);
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["PING"]), queued());
    assert_eq!(r.cmd(&["EXEC"]), pong());
    // x of db 0 is the watched one, even with db 1 selected.
    assert_eq!(r.cmd(&["WATCH", "x"]), ok()); // db 1's x
    other.cmd(&["SELECT", "0"]);
    assert_eq!(r.cmd(&["SELECT", "0"]), ok());
    assert_eq!(r.cmd(&["WATCH", "x"]), ok()); // db 0's x
    other.cmd(&["SET", "x", "2"]);
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["PING"]), queued());
    assert_eq!(r.cmd(&["EXEC"]), Frame::NullArray);
}

#[test]
fn watched_key_that_expires_before_exec_fails_it() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["SET", "e", "v", "PX", "100"]);
    assert_eq!(r.cmd(&["WATCH", "e"]), ok());
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["PING"]), queued());
    assert_eq!(r.cmd(&["EXEC"]), Frame::NullArray);

    // A key already expired when watched, then removed, is untouched.
    r.cmd(&["SET", "gone", "v", "PX", "1"]);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(r.cmd(&["WATCH", "gone"]), ok());
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["PING"]), queued());
    assert_eq!(r.cmd(&["EXEC"]), pong());
}

#[test]
fn flushall_flushdb_and_swapdb_touch_watched_keys_only_if_they_existed() {
    let s = TestServer::start();
    let mut setup = s.raw();
    setup.cmd(&["SET", "x", "1"]);
    assert_eq!(exec_after(&s, "x", &[&["FLUSHALL"]]), Frame::NullArray);
    setup.cmd(&["SET", "x", "1"]);
    assert_eq!(exec_after(&s, "x", &[&["FLUSHDB"]]), Frame::NullArray);
    // Missing before and after: untouched.
    assert_eq!(exec_after(&s, "x", &[&["FLUSHALL"]]), pong());
    assert_eq!(exec_after(&s, "x", &[&["FLUSHDB"]]), pong());

    // SWAPDB: a watched key that exists in either database is touched.
    setup.cmd(&["SET", "x", "1"]);
    assert_eq!(
        exec_after(&s, "x", &[&["SWAPDB", "0", "1"]]),
        Frame::NullArray
    );
    // x now lives in db 1 only; db 0's x is missing, swapping it back in is
    // a change.
    assert_eq!(
        exec_after(&s, "x", &[&["SWAPDB", "0", "1"]]),
        Frame::NullArray
    );
    // Same value in both databases is still a different key.
    setup.cmd(&["SELECT", "1"]);
    setup.cmd(&["SET", "x", "1"]);
    setup.cmd(&["SELECT", "0"]);
    assert_eq!(
        exec_after(&s, "x", &[&["SWAPDB", "0", "1"]]),
        Frame::NullArray
    );
    // Missing in both: untouched.
    assert_eq!(exec_after(&s, "nowhere", &[&["SWAPDB", "0", "1"]]), pong());
}

#[test]
fn debug_reload_does_not_touch_watched_keys_and_keeps_versions() {
    let s = TestServer::start();
    let mut setup = s.raw();
    setup.cmd(&["SET", "x", "1"]);
    let Frame::Integer(before) = setup.cmd(&["VERSION", "x"]) else {
        panic!("VERSION replies an integer");
    };
    assert_eq!(exec_after(&s, "x", &[&["DEBUG", "RELOAD"]]), pong());
    assert_eq!(setup.cmd(&["VERSION", "x"]), int(before));
}

#[test]
fn exec_of_flushdb_swapdb_and_debug_reload_does_not_deadlock() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["SET", "a", "1"]);
    assert_eq!(r.cmd(&["MULTI"]), ok());
    for c in [
        &["SET", "a", "2"][..],
        &["SWAPDB", "0", "1"],
        &["DEBUG", "RELOAD"],
        &["SELECT", "1"],
        &["GET", "a"],
        &["FLUSHDB"],
        &["FLUSHALL"],
    ] {
        assert_eq!(r.cmd(c), queued());
    }
    assert_eq!(
        r.cmd(&["EXEC"]),
        arr(vec![ok(), ok(), ok(), ok(), bulk("2"), ok(), ok()])
    );
    // SELECT inside the transaction stays in effect afterwards.
    assert_eq!(r.cmd(&["SET", "in1", "v"]), ok());
    let mut c0 = s.raw();
    assert_eq!(c0.cmd(&["EXISTS", "in1"]), int(0));
}

#[test]
fn select_inside_multi_changes_the_db_for_the_following_commands() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["SET", "k", "db0"]), queued());
    assert_eq!(r.cmd(&["SELECT", "2"]), queued());
    assert_eq!(r.cmd(&["SET", "k", "db2"]), queued());
    assert_eq!(r.cmd(&["EXEC"]), arr(vec![ok(), ok(), ok()]));
    assert_eq!(r.cmd(&["GET", "k"]), bulk("db2"));
    assert_eq!(r.cmd(&["SELECT", "0"]), ok());
    assert_eq!(r.cmd(&["GET", "k"]), bulk("db0"));
}

#[test]
fn quit_and_reset_inside_multi_run_at_once() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["WATCH", "w"]), ok());
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["SET", "a", "1"]), queued());
    assert_eq!(r.cmd(&["RESET"]), Frame::Simple(b"RESET".to_vec()));
    // Out of MULTI, queue dropped, watches gone.
    assert_eq!(r.cmd(&["EXEC"]), err("ERR EXEC without MULTI"));
    assert_eq!(r.cmd(&["EXISTS", "a"]), int(0));
    s.raw().cmd(&["SET", "w", "changed"]);
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["PING"]), queued());
    assert_eq!(r.cmd(&["EXEC"]), pong());

    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["SET", "a", "1"]), queued());
    assert_eq!(r.cmd(&["QUIT"]), ok());
    assert!(r.closed());
    assert_eq!(s.raw().cmd(&["EXISTS", "a"]), int(0));
}

#[test]
fn unwatch_forgets_the_watched_keys() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["WATCH", "a", "b"]), ok());
    s.raw().cmd(&["SET", "a", "1"]);
    assert_eq!(r.cmd(&["UNWATCH"]), ok());
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["PING"]), queued());
    assert_eq!(r.cmd(&["EXEC"]), pong());
}

#[test]
fn client_list_shows_multi_count_and_flag() {
    let s = TestServer::start();
    let mut r = s.raw();
    let line = |r: &mut Raw| match r.cmd(&["CLIENT", "INFO"]) {
        Frame::Bulk(b) | Frame::Verbatim { text: b, .. } => String::from_utf8(b).unwrap(),
        other => panic!("unexpected {other:?}"),
    };
    let l = line(&mut r);
    assert!(l.contains(" flags=N ") && l.contains(" multi=-1 "), "{l}");
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["SET", "a", "1"]), queued());
    assert_eq!(r.cmd(&["SET", "b", "1"]), queued());
    let mut other = s.raw();
    let Frame::Bulk(list) = other.cmd(&["CLIENT", "LIST"]) else {
        panic!("CLIENT LIST replies a bulk string");
    };
    let list = String::from_utf8(list).unwrap();
    assert!(
        list.lines()
            .any(|l| l.contains(" flags=x ") && l.contains(" multi=2 ")),
        "{list}"
    );
    assert_eq!(r.cmd(&["DISCARD"]), ok());
    let l = line(&mut r);
    assert!(l.contains(" flags=N ") && l.contains(" multi=-1 "), "{l}");
}

#[test]
fn blpop_inside_multi_does_not_block() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["BLPOP", "empty", "0"]), queued());
    assert_eq!(r.cmd(&["RPUSH", "full", "x"]), queued());
    assert_eq!(r.cmd(&["BLPOP", "full", "0"]), queued());
    assert_eq!(r.cmd(&["BZPOPMIN", "empty", "0"]), queued());
    assert_eq!(
        r.cmd(&["BLMOVE", "empty", "d", "LEFT", "LEFT", "0"]),
        queued()
    );
    assert_eq!(r.cmd(&["BRPOPLPUSH", "empty", "d", "0"]), queued());
    assert_eq!(
        r.cmd(&["EXEC"]),
        arr(vec![
            Frame::NullArray,
            int(1),
            arr(vec![bulk("full"), bulk("x")]),
            Frame::NullArray,
            Frame::NullBulk,
            Frame::NullBulk,
        ])
    );
    assert_eq!(
        s.handle
            .as_ref()
            .unwrap()
            .shared()
            .blocking
            .blocked_clients(),
        0
    );
    assert_eq!(r.cmd(&["PING"]), Frame::Simple(b"PONG".to_vec()));
}

#[test]
fn client_blocked_before_exec_is_served_only_after_it() {
    let s = TestServer::start();
    let shared = s.handle.as_ref().unwrap().shared().clone();
    let mut waiter = s.raw();
    waiter.send_cmd(&[b"BLPOP", b"q", b"0"]);
    assert!(eventually(Duration::from_secs(5), || shared
        .blocking
        .blocked_clients()
        == 1));
    let mut r = s.raw();
    // The push wakes the waiter, but it may only run after EXEC: by then
    // the element is gone and it stays blocked.
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["RPUSH", "q", "taken"]), queued());
    assert_eq!(r.cmd(&["LPOP", "q"]), queued());
    assert_eq!(r.cmd(&["EXEC"]), arr(vec![int(1), bulk("taken")]));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(shared.blocking.blocked_clients(), 1);
    // A transaction that leaves an element serves it.
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["RPUSH", "q", "a", "b"]), queued());
    assert_eq!(r.cmd(&["LPOP", "q"]), queued());
    assert_eq!(r.cmd(&["EXEC"]), arr(vec![int(2), bulk("a")]));
    assert_eq!(waiter.read(), arr(vec![bulk("q"), bulk("b")]));
}

#[test]
fn exec_is_isolated_from_other_clients() {
    let s = TestServer::start();
    let mut w = s.client();
    let _: () = redis::cmd("MSET")
        .arg("a")
        .arg(0)
        .arg("b")
        .arg(0)
        .query(&mut w)
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let url = s.url();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (stop, url) = (stop.clone(), url.clone());
            std::thread::spawn(move || {
                let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
                let mut reads = 0u64;
                let deadline = Instant::now() + Duration::from_secs(20);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let (a, b): (i64, i64) =
                        redis::cmd("MGET").arg("a").arg("b").query(&mut c).unwrap();
                    assert_eq!(a, b, "a reader saw half of an EXEC");
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut n = 0;
    while n < 1000 && Instant::now() < deadline {
        let (a, b): (i64, i64) = redis::pipe()
            .atomic()
            .cmd("INCR")
            .arg("a")
            .cmd("INCR")
            .arg("b")
            .query(&mut w)
            .unwrap();
        assert_eq!(a, b);
        n += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(
        n > 50 && reads > 50,
        "too little overlap: {n} EXECs, {reads} reads"
    );
}

#[test]
fn exec_that_wrote_counts_as_writes() {
    let s = TestServer::start();
    let mut r = s.raw();
    let changes = |r: &mut Raw| -> i64 {
        let Frame::Bulk(info) = r.cmd(&["INFO", "persistence"]) else {
            panic!("INFO replies a bulk string");
        };
        let info = String::from_utf8(info).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let before = changes(&mut r);
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["SET", "a", "1"]), queued());
    assert_eq!(r.cmd(&["SET", "b", "1"]), queued());
    assert_eq!(r.cmd(&["GET", "a"]), queued());
    assert_eq!(r.cmd(&["EXEC"]), arr(vec![ok(), ok(), bulk("1")]));
    assert_eq!(changes(&mut r) - before, 2);
}

#[test]
fn exec_under_appendfsync_always_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = basalt_server::Config::ephemeral(dir.path());
    config.appendfsync = basalt_server::Appendfsync::Always;
    let s = TestServer::start_with(config, dir);
    let mut r = s.raw();
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["SET", "a", "1"]), queued());
    assert_eq!(r.cmd(&["RPUSH", "l", "x"]), queued());
    assert_eq!(r.cmd(&["EXEC"]), arr(vec![ok(), int(1)]));
    let s = s.restart();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["GET", "a"]), bulk("1"));
    assert_eq!(r.cmd(&["LLEN", "l"]), int(1));
}

/// Redis fails the EXEC when a key watched while absent was created in
/// between, even if it is gone again by EXEC (its version reads "absent"
/// at both ends). Found by a differential test against redis-server 7.0.15.
#[test]
fn a_key_watched_while_absent_that_comes_and_goes_fails_the_exec() {
    let s = TestServer::start();
    let cases: &[&[&[&str]]] = &[
        &[&["SET", "k", "a"], &["DEL", "k"]],
        &[&["LPUSH", "k", "x"], &["LPOP", "k"]],
        &[&["SET", "k", "a"], &["EXPIRE", "k", "0"]],
        &[&["SET", "k", "a"], &["GETDEL", "k"]],
        &[&["SET", "k", "a"], &["RENAME", "k", "j"]],
        &[&["SET", "k", "a"], &["MOVE", "k", "1"]],
        &[&["SET", "k", "a"], &["FLUSHALL"]],
        &[&["HSET", "k", "f", "v"], &["HDEL", "k", "f"]],
        &[&["SET", "src", "a"], &["COPY", "src", "k"], &["DEL", "k"]],
    ];
    for change in cases {
        assert_eq!(exec_after(&s, "k", change), Frame::NullArray, "{change:?}");
    }
    // Swapped in from another database and swapped out again.
    let mut setup = s.raw();
    setup.cmd(&["FLUSHALL"]);
    setup.cmd(&["SELECT", "1"]);
    setup.cmd(&["SET", "k", "in db 1"]);
    assert_eq!(
        exec_after(&s, "k", &[&["SWAPDB", "0", "1"], &["SWAPDB", "0", "1"]]),
        Frame::NullArray
    );
    // The watcher's own create-and-delete counts too.
    let mut r = s.raw();
    assert_eq!(r.cmd(&["WATCH", "mine"]), ok());
    r.cmd(&["SET", "mine", "1"]);
    r.cmd(&["DEL", "mine"]);
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["PING"]), queued());
    assert_eq!(r.cmd(&["EXEC"]), Frame::NullArray);
}

#[test]
fn a_key_watched_while_absent_that_stays_absent_lets_the_exec_run() {
    let s = TestServer::start();
    // Other keys created, the key itself never.
    assert_eq!(
        exec_after(&s, "k", &[&["SET", "other", "1"], &["DEL", "other"]]),
        pong()
    );
    // UNWATCH and DISCARD forget the registration: a later creation does
    // not fail a later transaction that does not watch the key.
    let mut r = s.raw();
    let mut other = s.raw();
    assert_eq!(r.cmd(&["WATCH", "k"]), ok());
    assert_eq!(r.cmd(&["UNWATCH"]), ok());
    other.cmd(&["SET", "k", "1"]);
    other.cmd(&["DEL", "k"]);
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["PING"]), queued());
    assert_eq!(r.cmd(&["EXEC"]), pong());
    assert_eq!(r.cmd(&["WATCH", "k"]), ok());
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["DISCARD"]), ok());
    other.cmd(&["SET", "k", "1"]);
    other.cmd(&["DEL", "k"]);
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["EXEC"]), arr(vec![]));
}

#[test]
fn exec_with_arguments_aborts_the_transaction_as_redis_does() {
    let s = TestServer::start();
    let mut r = s.raw();
    let abort =
        "EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command";
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["SET", "k", "1"]), queued());
    assert_eq!(r.cmd(&["EXEC", "x"]), err(abort));
    // Out of MULTI: the next command runs.
    assert_eq!(r.cmd(&["GET", "k"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["EXEC", "x"]), err(abort));
    assert_eq!(r.cmd(&["EXEC"]), err("ERR EXEC without MULTI"));
}

/// Each script runs inside one MULTI/EXEC; after a restart the keys must
/// hold what the transaction left. A transaction is one write batch, so
/// anything it wrote that did not get its commit record would be gone
/// after the restart: these cover the batches that a database closing or
/// changing in the middle (DEBUG RELOAD, FLUSHDB, FLUSHALL, SELECT, MOVE)
/// must still commit.
#[test]
fn writes_of_a_transaction_that_reloads_flushes_or_changes_databases_survive_a_restart() {
    type Script<'a> = (&'a [&'a [&'a str]], &'a [(usize, &'a str, Option<&'a str>)]);
    let cases: [Script<'_>; 5] = [
        (
            &[&["SET", "a", "1"], &["DEBUG", "RELOAD"], &["SET", "b", "2"]],
            &[(0, "a", Some("1")), (0, "b", Some("2"))],
        ),
        (
            &[&["SET", "a", "1"], &["FLUSHDB"], &["SET", "b", "2"]],
            &[(0, "a", None), (0, "b", Some("2"))],
        ),
        (
            &[&["SET", "x", "1"], &["SELECT", "1"], &["SET", "y", "2"]],
            &[(0, "x", Some("1")), (1, "y", Some("2")), (1, "x", None)],
        ),
        (
            &[&["SET", "m", "v"], &["MOVE", "m", "2"], &["SET", "n", "w"]],
            &[(0, "m", None), (2, "m", Some("v")), (0, "n", Some("w"))],
        ),
        (
            &[
                &["SELECT", "3"],
                &["SET", "p", "1"],
                &["FLUSHALL"],
                &["SET", "q", "2"],
                &["SELECT", "0"],
                &["SET", "r", "3"],
            ],
            &[(3, "p", None), (3, "q", Some("2")), (0, "r", Some("3"))],
        ),
    ];
    for (script, want) in cases {
        let s = TestServer::start();
        let mut r = s.raw();
        assert_eq!(r.cmd(&["MULTI"]), ok());
        for c in script {
            assert_eq!(r.cmd(c), queued(), "{c:?}");
        }
        let reply = r.cmd(&["EXEC"]);
        assert!(
            matches!(&reply, Frame::Array(v) if v.len() == script.len()),
            "{reply:?}"
        );
        drop(r);
        let s = s.restart();
        let mut r = s.raw();
        for &(db, key, value) in want {
            assert_eq!(r.cmd(&["SELECT", &db.to_string()]), ok());
            let got = r.cmd(&["GET", key]);
            let expect = value.map_or(Frame::NullBulk, bulk);
            assert_eq!(got, expect, "{script:?}: db {db} key {key}");
        }
    }
}
