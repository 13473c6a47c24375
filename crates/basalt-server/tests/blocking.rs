//! Blocking list pops across real connections: who is served, in which
//! order, timeouts, chaining through BLMOVE, and clients that leave while
//! blocked. Every wait is bounded (the raw client's 10 s read timeout, and
//! `eventually` with a deadline).

use crate::common;

use std::time::{Duration, Instant};

use basalt_resp::Frame;
use common::{bulk, err, eventually, Raw, TestServer};

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn pair(key: &str, v: &str) -> Frame {
    Frame::Array(vec![bulk(key), bulk(v)])
}

fn blocked(s: &TestServer) -> usize {
    s.blocked_clients()
}

fn wait_blocked(s: &TestServer, n: usize) {
    s.wait_blocked(n)
}

/// Sends a command without reading its reply.
fn send(r: &mut Raw, args: &[&str]) {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    r.send_cmd(&args);
}

#[test]
fn blpop_is_served_by_a_push_from_another_connection() {
    let s = TestServer::start();
    let mut waiter = s.raw();
    let mut pusher = s.raw();
    send(&mut waiter, &["BLPOP", "other", "q", "0"]);
    wait_blocked(&s, 1);
    assert_eq!(pusher.cmd(&["RPUSH", "q", "hello"]), int(1));
    assert_eq!(waiter.read(), pair("q", "hello"));
    wait_blocked(&s, 0);
    assert_eq!(
        pusher.cmd(&["EXISTS", "q"]),
        int(0),
        "the element was taken"
    );
    // With data present nothing blocks; BRPOP takes from the tail.
    assert_eq!(pusher.cmd(&["RPUSH", "q", "a", "b"]), int(2));
    assert_eq!(waiter.cmd(&["BRPOP", "q", "0"]), pair("q", "b"));
    assert_eq!(
        waiter.cmd(&["BLMPOP", "0", "1", "q", "LEFT", "COUNT", "5"]),
        Frame::Array(vec![bulk("q"), Frame::Array(vec![bulk("a")])])
    );
}

#[test]
fn blocked_clients_are_served_in_the_order_they_blocked() {
    let s = TestServer::start();
    let mut first = s.raw();
    let mut second = s.raw();
    let mut third = s.raw();
    let mut pusher = s.raw();
    send(&mut first, &["BLPOP", "q", "0"]);
    wait_blocked(&s, 1);
    send(&mut second, &["BLPOP", "q", "0"]);
    wait_blocked(&s, 2);
    send(&mut third, &["BLPOP", "q", "0"]);
    wait_blocked(&s, 3);
    assert_eq!(pusher.cmd(&["RPUSH", "q", "1"]), int(1));
    assert_eq!(first.read(), pair("q", "1"));
    wait_blocked(&s, 2);
    assert_eq!(pusher.cmd(&["RPUSH", "q", "2"]), int(1));
    assert_eq!(
        second.read(),
        pair("q", "2"),
        "second in line is served second"
    );
    wait_blocked(&s, 1);
    // Clients served, then blocked again, go to the back of the line.
    send(&mut first, &["BLPOP", "q", "0"]);
    wait_blocked(&s, 2);
    // One push of two elements serves the next two, in order.
    assert_eq!(pusher.cmd(&["RPUSH", "q", "3", "4"]), int(2));
    let (a, b) = (third.read(), first.read());
    wait_blocked(&s, 0);
    // Both were woken by the same push; each got one element, exactly once.
    let mut got = vec![a, b];
    got.sort_by_key(|f| format!("{f:?}"));
    assert_eq!(got, vec![pair("q", "3"), pair("q", "4")]);
    assert_eq!(pusher.cmd(&["LLEN", "q"]), int(0));
}

#[test]
fn fractional_timeouts_reply_with_a_null_array() {
    let s = TestServer::start();
    let mut r = s.raw();
    let started = Instant::now();
    assert_eq!(r.cmd(&["BLPOP", "q", "0.2"]), Frame::NullArray);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(190), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(
        r.cmd(&["BLMOVE", "q", "d", "LEFT", "RIGHT", "0.05"]),
        Frame::NullArray
    );
    assert_eq!(r.cmd(&["BRPOPLPUSH", "q", "d", "0.05"]), Frame::NullArray);
    assert_eq!(
        r.cmd(&["BLMPOP", "0.05", "2", "q", "p", "LEFT"]),
        Frame::NullArray
    );
    assert_eq!(blocked(&s), 0);
    // RESP3 null.
    let _ = r.cmd(&["HELLO", "3"]);
    assert_eq!(r.cmd(&["BRPOP", "q", "0.05"]), Frame::Null);
    // Bad timeouts never block.
    assert_eq!(r.cmd(&["BLPOP", "q", "-1"]), err("ERR timeout is negative"));
    assert_eq!(
        r.cmd(&["BLPOP", "q", "soon"]),
        err("ERR timeout is not a float or out of range")
    );
    assert_eq!(
        r.cmd(&["BLMPOP", "x", "1", "q", "LEFT"]),
        err("ERR timeout is not a float or out of range")
    );
    assert_eq!(
        r.cmd(&["BLPOP", "q"]),
        err("ERR wrong number of arguments for 'blpop' command")
    );
}

#[test]
fn blmove_chains_to_a_client_blocked_on_the_destination() {
    let s = TestServer::start();
    let mut mover = s.raw();
    let mut sink = s.raw();
    let mut pusher = s.raw();
    send(&mut mover, &["BLMOVE", "a", "b", "LEFT", "RIGHT", "0"]);
    wait_blocked(&s, 1);
    send(&mut sink, &["BLPOP", "b", "0"]);
    wait_blocked(&s, 2);
    assert_eq!(pusher.cmd(&["LPUSH", "a", "x"]), int(1));
    assert_eq!(mover.read(), bulk("x"));
    assert_eq!(sink.read(), pair("b", "x"));
    wait_blocked(&s, 0);
    // RPOPLPUSH (non-blocking) wakes a client blocked on its destination.
    send(&mut sink, &["BRPOPLPUSH", "c", "d", "0"]);
    wait_blocked(&s, 1);
    assert_eq!(pusher.cmd(&["RPUSH", "src", "y"]), int(1));
    assert_eq!(pusher.cmd(&["RPOPLPUSH", "src", "c"]), bulk("y"));
    assert_eq!(sink.read(), bulk("y"));
    assert_eq!(
        pusher.cmd(&["LRANGE", "d", "0", "-1"]),
        Frame::Array(vec![bulk("y")])
    );
}

#[test]
fn a_client_that_disconnects_while_blocked_does_not_steal_a_later_push() {
    let s = TestServer::start();
    let mut leaver = s.raw();
    let mut stayer = s.raw();
    let mut pusher = s.raw();
    send(&mut leaver, &["BLPOP", "q", "0"]);
    wait_blocked(&s, 1);
    send(&mut stayer, &["BLPOP", "q", "0"]);
    wait_blocked(&s, 2);
    drop(leaver);
    wait_blocked(&s, 1);
    assert_eq!(pusher.cmd(&["RPUSH", "q", "v"]), int(1));
    assert_eq!(stayer.read(), pair("q", "v"));
    wait_blocked(&s, 0);
}

#[test]
fn client_kill_and_client_unblock_release_a_blocked_client() {
    let s = TestServer::start();
    let mut victim = s.raw();
    let mut admin = s.raw();
    let id = match victim.cmd(&["CLIENT", "ID"]) {
        Frame::Integer(n) => n.to_string(),
        f => panic!("{f:?}"),
    };
    send(&mut victim, &["BLPOP", "q", "0"]);
    wait_blocked(&s, 1);
    assert_eq!(admin.cmd(&["CLIENT", "UNBLOCK", &id]), int(1));
    assert_eq!(victim.read(), Frame::NullArray);
    send(&mut victim, &["BRPOP", "q", "0"]);
    wait_blocked(&s, 1);
    assert_eq!(admin.cmd(&["CLIENT", "UNBLOCK", &id, "ERROR"]), int(1));
    assert_eq!(
        victim.read(),
        err("UNBLOCKED client unblocked via CLIENT UNBLOCK")
    );
    assert_eq!(
        admin.cmd(&["CLIENT", "UNBLOCK", &id]),
        int(0),
        "not blocked now"
    );
    assert_eq!(
        admin.cmd(&["CLIENT", "UNBLOCK", &id, "LATER"]),
        err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
    );
    send(&mut victim, &["BLPOP", "q", "0"]);
    wait_blocked(&s, 1);
    assert_eq!(admin.cmd(&["CLIENT", "KILL", "ID", &id]), int(1));
    wait_blocked(&s, 0);
    assert!(victim.closed());
    assert_eq!(admin.cmd(&["RPUSH", "q", "kept"]), int(1));
    assert_eq!(admin.cmd(&["LPOP", "q"]), bulk("kept"));
}

#[test]
fn commands_pipelined_after_a_blocked_one_wait_for_it() {
    let s = TestServer::start();
    let mut r = s.raw();
    let mut pusher = s.raw();
    let mut batch = Vec::new();
    basalt_resp::write_command(&mut batch, [&b"PING"[..], b"first"]);
    basalt_resp::write_command(&mut batch, [&b"BLPOP"[..], b"q", b"0"]);
    basalt_resp::write_command(&mut batch, [&b"LLEN"[..], b"q"]);
    r.send(&batch);
    assert_eq!(
        r.read(),
        bulk("first"),
        "replies before the block leave at once"
    );
    wait_blocked(&s, 1);
    assert_eq!(pusher.cmd(&["RPUSH", "q", "a", "b"]), int(2));
    assert_eq!(r.read(), pair("q", "a"));
    assert_eq!(r.read(), int(1), "LLEN ran after BLPOP was served");
}

#[test]
fn wrong_types_and_served_keys_in_blocking_pops() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SET", "s", "v"]), common::ok());
    assert_eq!(
        r.cmd(&["BLPOP", "empty", "s", "0"]),
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    assert_eq!(r.cmd(&["RPUSH", "l2", "x"]), int(1));
    // The first non-empty key in argument order is served.
    assert_eq!(r.cmd(&["BLPOP", "empty", "l2", "s", "0"]), pair("l2", "x"));
    assert_eq!(blocked(&s), 0);
}

#[test]
fn a_key_that_changed_type_while_blocked_does_not_fail_the_waiter() {
    let s = TestServer::start();
    let mut waiter = s.raw();
    let mut other = s.raw();
    send(&mut waiter, &["BLPOP", "k1", "k2", "0"]);
    wait_blocked(&s, 1);
    // As in Redis: k1 turning into a string does not concern the blocked
    // client; the push to k2 serves it.
    assert_eq!(other.cmd(&["SET", "k1", "str"]), common::ok());
    assert_eq!(other.cmd(&["RPUSH", "k2", "v"]), int(1));
    assert_eq!(waiter.read(), pair("k2", "v"));
    wait_blocked(&s, 0);
    // A fresh BLPOP still reports the wrong type at once.
    assert_eq!(
        waiter.cmd(&["BLPOP", "k1", "k2", "0"]),
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
}

#[test]
fn a_push_skipped_by_a_sorted_set_waiter_reaches_a_list_waiter_behind_it() {
    let s = TestServer::start();
    let mut zwaiter = s.raw();
    let mut lwaiter = s.raw();
    let mut other = s.raw();
    send(&mut zwaiter, &["BZPOPMIN", "k", "0"]);
    wait_blocked(&s, 1);
    send(&mut lwaiter, &["BLPOP", "k", "0"]);
    wait_blocked(&s, 2);
    // The push wakes the first in line, which wants a sorted set: it stays
    // blocked and hands the wakeup on, as Redis serves the list waiter.
    assert_eq!(other.cmd(&["RPUSH", "k", "a"]), int(1));
    assert_eq!(lwaiter.read(), pair("k", "a"));
    wait_blocked(&s, 1);
    assert_eq!(other.cmd(&["ZADD", "k", "1", "m"]), int(1));
    assert_eq!(
        zwaiter.read(),
        Frame::Array(vec![bulk("k"), bulk("m"), bulk("1")])
    );
    wait_blocked(&s, 0);
}

#[test]
fn info_counts_blocked_clients() {
    let s = TestServer::start();
    let mut waiter = s.raw();
    let mut other = s.raw();
    send(&mut waiter, &["BRPOP", "q", "0"]);
    wait_blocked(&s, 1);
    let info = match other.cmd(&["INFO", "clients"]) {
        Frame::Bulk(b) => String::from_utf8(b).unwrap(),
        f => panic!("{f:?}"),
    };
    assert!(info.contains("blocked_clients:1\r\n"), "{info}");
    assert_eq!(other.cmd(&["LPUSH", "q", "x"]), int(1));
    assert_eq!(waiter.read(), pair("q", "x"));
}

// ------------------------------------------------------------ sorted sets
//
// Replies below were compared byte for byte with redis-server 7.0.15.

fn arr(items: Vec<Frame>) -> Frame {
    Frame::Array(items)
}

/// BZPOPMIN/BZPOPMAX's reply: `[key, member, score]` (RESP2 score as bulk).
fn zpopped(key: &str, member: &str, score: &str) -> Frame {
    arr(vec![bulk(key), bulk(member), bulk(score)])
}

#[test]
fn bzpopmin_is_served_by_a_zadd_from_another_connection() {
    let s = TestServer::start();
    let mut waiter = s.raw();
    let mut adder = s.raw();
    send(&mut waiter, &["BZPOPMIN", "other", "z", "0"]);
    wait_blocked(&s, 1);
    assert_eq!(adder.cmd(&["ZADD", "z", "2", "b", "1.5", "a"]), int(2));
    assert_eq!(waiter.read(), zpopped("z", "a", "1.5"));
    wait_blocked(&s, 0);
    assert_eq!(adder.cmd(&["ZCARD", "z"]), int(1), "one member was taken");
    // With members present nothing blocks; BZPOPMAX takes the highest, and
    // the first non-empty key in argument order is served.
    assert_eq!(adder.cmd(&["ZADD", "z", "3", "c"]), int(1));
    assert_eq!(
        waiter.cmd(&["BZPOPMAX", "empty", "z", "0"]),
        zpopped("z", "c", "3")
    );
    // ZINCRBY creating a set wakes a waiter too.
    send(&mut waiter, &["BZPOPMAX", "y", "0"]);
    wait_blocked(&s, 1);
    assert_eq!(adder.cmd(&["ZINCRBY", "y", "5", "m"]), bulk("5"));
    assert_eq!(waiter.read(), zpopped("y", "m", "5"));
    wait_blocked(&s, 0);
    // A ZADD that adds nothing (XX on a missing key) serves nobody.
    send(&mut waiter, &["BZPOPMIN", "x", "0.3"]);
    wait_blocked(&s, 1);
    assert_eq!(adder.cmd(&["ZADD", "x", "XX", "1", "m"]), int(0));
    assert_eq!(waiter.read(), Frame::NullArray);
    // Wrong types: WRONGTYPE at once, before any later key is tried.
    assert_eq!(adder.cmd(&["SET", "s", "v"]), common::ok());
    assert_eq!(
        waiter.cmd(&["BZPOPMIN", "nokey", "s", "z", "0"]),
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    assert_eq!(blocked(&s), 0);
}

#[test]
fn bzpopmax_times_out_with_a_fractional_timeout() {
    let s = TestServer::start();
    let mut r = s.raw();
    let started = Instant::now();
    assert_eq!(r.cmd(&["BZPOPMAX", "z", "0.2"]), Frame::NullArray);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(190), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(
        r.cmd(&["BZMPOP", "0.05", "2", "z", "y", "MIN"]),
        Frame::NullArray
    );
    assert_eq!(blocked(&s), 0);
    // Errors: the timeout is checked before the keys (BZPOPMIN), after
    // numkeys, MIN|MAX and COUNT (BZMPOP), as in Redis.
    assert_eq!(r.cmd(&["ZADD", "z", "1", "a"]), int(1));
    assert_eq!(
        r.cmd(&["BZPOPMIN", "z", "-1"]),
        err("ERR timeout is negative")
    );
    assert_eq!(
        r.cmd(&["BZPOPMIN", "z", "soon"]),
        err("ERR timeout is not a float or out of range")
    );
    assert_eq!(
        r.cmd(&["BZPOPMAX", "z"]),
        err("ERR wrong number of arguments for 'bzpopmax' command")
    );
    assert_eq!(
        r.cmd(&["BZMPOP", "x", "0", "z", "MIN"]),
        err("ERR numkeys should be greater than 0")
    );
    assert_eq!(
        r.cmd(&["BZMPOP", "x", "1", "z", "MIN"]),
        err("ERR timeout is not a float or out of range")
    );
    assert_eq!(
        r.cmd(&["BZMPOP", "0", "1", "z", "FOO"]),
        err("ERR syntax error")
    );
    assert_eq!(
        r.cmd(&["BZMPOP", "0", "2", "z", "MIN"]),
        err("ERR syntax error")
    );
    assert_eq!(
        r.cmd(&["BZMPOP", "0", "1", "z", "MIN", "COUNT", "0"]),
        err("ERR count should be greater than 0")
    );
    assert_eq!(
        r.cmd(&["BZMPOP", "0", "1", "z", "MIN", "COUNT", "1", "COUNT", "2"]),
        err("ERR syntax error")
    );
    assert_eq!(
        r.cmd(&["BZMPOP", "-1", "1", "z", "MIN"]),
        err("ERR timeout is negative")
    );
    assert_eq!(
        r.cmd(&["BZMPOP", "0", "1"]),
        err("ERR wrong number of arguments for 'bzmpop' command")
    );
    // BLMPOP too checks numkeys before the timeout.
    assert_eq!(
        r.cmd(&["BLMPOP", "x", "0", "l", "LEFT"]),
        err("ERR numkeys should be greater than 0")
    );
    assert_eq!(r.cmd(&["ZCARD", "z"]), int(1), "bad input changed nothing");
    // RESP3: a null on timeout, the score as a double when served.
    let _ = r.cmd(&["HELLO", "3"]);
    assert_eq!(r.cmd(&["BZPOPMAX", "none", "0.05"]), Frame::Null);
    assert_eq!(r.cmd(&["BZMPOP", "0.05", "1", "none", "MAX"]), Frame::Null);
    assert_eq!(
        r.cmd(&["BZPOPMAX", "z", "0"]),
        arr(vec![bulk("z"), bulk("a"), Frame::Double(1.0)])
    );
    assert_eq!(blocked(&s), 0);
}

#[test]
fn bzmpop_with_count_takes_up_to_count_members_from_one_key() {
    let s = TestServer::start();
    let mut waiter = s.raw();
    let mut adder = s.raw();
    send(
        &mut waiter,
        &["BZMPOP", "0", "2", "x", "y", "MAX", "COUNT", "2"],
    );
    wait_blocked(&s, 1);
    assert_eq!(
        adder.cmd(&["ZADD", "y", "1", "a", "2", "b", "3", "c"]),
        int(3)
    );
    assert_eq!(
        waiter.read(),
        arr(vec![
            bulk("y"),
            arr(vec![
                arr(vec![bulk("c"), bulk("3")]),
                arr(vec![bulk("b"), bulk("2")])
            ])
        ])
    );
    wait_blocked(&s, 0);
    assert_eq!(
        adder.cmd(&["ZRANGE", "y", "0", "-1", "WITHSCORES"]),
        arr(vec![bulk("a"), bulk("1")])
    );
    // A COUNT larger than the set takes all of it and deletes the key.
    assert_eq!(
        waiter.cmd(&["BZMPOP", "0", "3", "n1", "y", "n2", "MIN", "COUNT", "10"]),
        arr(vec![bulk("y"), arr(vec![arr(vec![bulk("a"), bulk("1")])])])
    );
    assert_eq!(adder.cmd(&["EXISTS", "y"]), int(0));
    // RESP3: nested [member, score] pairs with double scores.
    let _ = waiter.cmd(&["HELLO", "3"]);
    assert_eq!(adder.cmd(&["ZADD", "y", "1.5", "a", "2", "b"]), int(2));
    assert_eq!(
        waiter.cmd(&["BZMPOP", "0", "1", "y", "MIN", "COUNT", "5"]),
        arr(vec![
            bulk("y"),
            arr(vec![
                arr(vec![bulk("a"), Frame::Double(1.5)]),
                arr(vec![bulk("b"), Frame::Double(2.0)])
            ])
        ])
    );
}

#[test]
fn sorted_set_waiters_are_served_in_the_order_they_blocked() {
    let s = TestServer::start();
    let mut first = s.raw();
    let mut second = s.raw();
    let mut adder = s.raw();
    send(&mut first, &["BZPOPMIN", "z", "0"]);
    wait_blocked(&s, 1);
    send(&mut second, &["BZPOPMIN", "other", "z", "0"]);
    wait_blocked(&s, 2);
    // One ZADD of two members serves both, first in line first.
    assert_eq!(adder.cmd(&["ZADD", "z", "2", "b", "1", "a"]), int(2));
    assert_eq!(first.read(), zpopped("z", "a", "1"));
    assert_eq!(second.read(), zpopped("z", "b", "2"));
    wait_blocked(&s, 0);
    assert_eq!(adder.cmd(&["EXISTS", "z"]), int(0));
    // One member serves one client; the second keeps waiting in its place.
    send(&mut first, &["BZPOPMAX", "z", "0"]);
    wait_blocked(&s, 1);
    send(&mut second, &["BZMPOP", "0", "1", "z", "MAX"]);
    wait_blocked(&s, 2);
    assert_eq!(adder.cmd(&["ZADD", "z", "1", "m"]), int(1));
    assert_eq!(first.read(), zpopped("z", "m", "1"));
    wait_blocked(&s, 1);
    assert_eq!(adder.cmd(&["ZADD", "z", "2", "n"]), int(1));
    assert_eq!(
        second.read(),
        arr(vec![bulk("z"), arr(vec![arr(vec![bulk("n"), bulk("2")])])])
    );
    wait_blocked(&s, 0);
}

#[test]
fn blpop_is_woken_by_a_rename_of_a_list_onto_its_key() {
    let s = TestServer::start();
    let mut waiter = s.raw();
    let mut other = s.raw();
    send(&mut waiter, &["BLPOP", "dst", "0"]);
    wait_blocked(&s, 1);
    assert_eq!(other.cmd(&["RPUSH", "src", "x", "y"]), int(2));
    assert_eq!(other.cmd(&["RENAME", "src", "dst"]), common::ok());
    assert_eq!(waiter.read(), pair("dst", "x"));
    wait_blocked(&s, 0);
    assert_eq!(
        other.cmd(&["LRANGE", "dst", "0", "-1"]),
        arr(vec![bulk("y")])
    );
    // RENAMENX of a sorted set wakes a BZPOPMIN.
    send(&mut waiter, &["BZPOPMIN", "zdst", "0"]);
    wait_blocked(&s, 1);
    assert_eq!(other.cmd(&["ZADD", "zsrc", "1", "m"]), int(1));
    assert_eq!(other.cmd(&["RENAMENX", "zsrc", "zdst"]), int(1));
    assert_eq!(waiter.read(), zpopped("zdst", "m", "1"));
    wait_blocked(&s, 0);
}

#[test]
fn copy_move_swapdb_and_zset_stores_wake_waiters() {
    let s = TestServer::start();
    let mut waiter = s.raw();
    let mut other = s.raw();
    // COPY.
    send(&mut waiter, &["BZPOPMIN", "zc", "0"]);
    wait_blocked(&s, 1);
    assert_eq!(other.cmd(&["ZADD", "zs", "1", "m"]), int(1));
    assert_eq!(other.cmd(&["COPY", "zs", "zc"]), int(1));
    assert_eq!(waiter.read(), zpopped("zc", "m", "1"));
    wait_blocked(&s, 0);
    // ZUNIONSTORE with a non-empty result.
    send(&mut waiter, &["BZPOPMIN", "u", "0"]);
    wait_blocked(&s, 1);
    assert_eq!(other.cmd(&["ZUNIONSTORE", "u", "1", "zs"]), int(1));
    assert_eq!(waiter.read(), zpopped("u", "m", "1"));
    wait_blocked(&s, 0);
    // ZRANGESTORE: an empty result serves nobody, a non-empty one does.
    send(&mut waiter, &["BZPOPMAX", "rs", "0"]);
    wait_blocked(&s, 1);
    assert_eq!(
        other.cmd(&["ZRANGESTORE", "rs", "nothing", "0", "-1"]),
        int(0)
    );
    assert_eq!(other.cmd(&["ZADD", "zs", "2", "n"]), int(1));
    assert_eq!(other.cmd(&["ZRANGESTORE", "rs", "zs", "0", "-1"]), int(2));
    assert_eq!(waiter.read(), zpopped("rs", "n", "2"));
    wait_blocked(&s, 0);
    // MOVE into the waiter's database.
    assert_eq!(waiter.cmd(&["SELECT", "1"]), common::ok());
    send(&mut waiter, &["BZPOPMAX", "zm", "0"]);
    wait_blocked(&s, 1);
    assert_eq!(other.cmd(&["ZADD", "zm", "2", "n"]), int(1));
    assert_eq!(other.cmd(&["MOVE", "zm", "1"]), int(1));
    assert_eq!(waiter.read(), zpopped("zm", "n", "2"));
    wait_blocked(&s, 0);
    // SWAPDB bringing a list under the waited key.
    send(&mut waiter, &["BLPOP", "ls", "0"]);
    wait_blocked(&s, 1);
    assert_eq!(other.cmd(&["RPUSH", "ls", "v"]), int(1));
    assert_eq!(other.cmd(&["SWAPDB", "0", "1"]), common::ok());
    assert_eq!(waiter.read(), pair("ls", "v"));
    wait_blocked(&s, 0);
}

#[test]
fn keys_made_ready_by_one_exec_are_served_in_the_order_they_became_ready() {
    // Redis serves the ready keys one after the other, in the order the
    // transaction made them ready; a served BLMOVE's push comes after.
    for (first, b_gets, r_left) in [("r", "x", "y"), ("q", "y", "x")] {
        let s = TestServer::start();
        let mut mover = s.raw();
        let mut popper = s.raw();
        let mut p = s.raw();
        send(&mut mover, &["BLMOVE", "q", "r", "RIGHT", "LEFT", "0"]);
        wait_blocked(&s, 1);
        send(&mut popper, &["BLPOP", "r", "0"]);
        wait_blocked(&s, 2);
        assert_eq!(p.cmd(&["MULTI"]), common::ok());
        let (k1, v1, k2, v2) = if first == "r" {
            ("r", "x", "q", "y")
        } else {
            ("q", "y", "r", "x")
        };
        p.cmd(&["RPUSH", k1, v1]);
        p.cmd(&["RPUSH", k2, v2]);
        assert_eq!(p.cmd(&["EXEC"]), Frame::Array(vec![int(1), int(1)]));
        assert_eq!(mover.read(), bulk("y"), "{first} ready first");
        assert_eq!(popper.read(), pair("r", b_gets), "{first} ready first");
        assert_eq!(
            p.cmd(&["LRANGE", "r", "0", "-1"]),
            Frame::Array(vec![bulk(r_left)]),
            "{first} ready first"
        );
        wait_blocked(&s, 0);
    }
}

#[test]
fn a_key_keeps_serving_its_queue_before_the_next_ready_key() {
    // EXEC makes `a` ready with two elements, then `b`. Redis serves both
    // waiters of `a` before the BLMOVE on `b`, whose push onto `a` then
    // finds nobody left waiting there.
    let s = TestServer::start();
    let mut a1 = s.raw();
    let mut a2 = s.raw();
    let mut mover = s.raw();
    let mut p = s.raw();
    send(&mut a1, &["BLPOP", "a", "0"]);
    wait_blocked(&s, 1);
    send(&mut a2, &["BLPOP", "a", "0"]);
    wait_blocked(&s, 2);
    send(&mut mover, &["BLMOVE", "b", "a", "LEFT", "LEFT", "0"]);
    wait_blocked(&s, 3);
    p.cmd(&["MULTI"]);
    p.cmd(&["RPUSH", "a", "1", "2"]);
    p.cmd(&["RPUSH", "b", "m"]);
    assert_eq!(p.cmd(&["EXEC"]), Frame::Array(vec![int(2), int(1)]));
    assert_eq!(a1.read(), pair("a", "1"));
    assert_eq!(a2.read(), pair("a", "2"));
    assert_eq!(mover.read(), bulk("m"));
    assert_eq!(
        p.cmd(&["LRANGE", "a", "0", "-1"]),
        Frame::Array(vec![bulk("m")])
    );
    wait_blocked(&s, 0);
}

#[test]
fn a_woken_client_that_does_not_read_its_replies_does_not_hold_up_others() {
    // `stuck` pipelines a GET of a value far larger than the socket buffers
    // and a BLPOP, and reads nothing: its connection cannot finish writing,
    // so when its key is made ready first it cannot take its turn. The
    // client woken next is served anyway, after a short patience.
    let s = TestServer::start();
    let mut p = s.raw();
    let big = "v".repeat(16 << 20);
    assert_eq!(p.cmd(&["SET", "big", &big]), common::ok());
    drop(big);
    let mut stuck = s.raw();
    let mut other = s.raw();
    let mut pipeline = Vec::new();
    for args in [&["GET", "big"][..], &["BLPOP", "k1", "0"]] {
        pipeline.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            pipeline.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
    }
    stuck.send(&pipeline);
    wait_blocked(&s, 1);
    send(&mut other, &["BLPOP", "k2", "0"]);
    wait_blocked(&s, 2);
    p.cmd(&["MULTI"]);
    p.cmd(&["RPUSH", "k1", "a"]);
    p.cmd(&["RPUSH", "k2", "b"]);
    let started = Instant::now();
    assert_eq!(p.cmd(&["EXEC"]), Frame::Array(vec![int(1), int(1)]));
    assert_eq!(other.read(), pair("k2", "b"));
    assert!(started.elapsed() < Duration::from_secs(5));
    // Once it reads, the stuck client gets its GET and then its element.
    match stuck.read() {
        Frame::Bulk(v) => assert_eq!(v.len(), 16 << 20),
        f => panic!("expected the big value, got {f:?}"),
    }
    assert_eq!(stuck.read(), pair("k1", "a"));
    wait_blocked(&s, 0);
}

#[test]
fn many_blocked_clients_lose_and_duplicate_nothing_under_concurrent_pushes() {
    // Consumers block with no timeout on three keys, movers shuttle
    // elements from `c` to `a`, producers push from plain commands and from
    // transactions touching two keys. A lost wakeup leaves an element in a
    // list while every consumer sleeps; a double serve duplicates one.
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};
    const PRODUCERS: usize = 3;
    const PER_PRODUCER: usize = 400;
    const TOTAL: usize = PRODUCERS * PER_PRODUCER;
    const CONSUMERS: usize = 4;
    let s = TestServer::start();
    let consumed: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut threads = Vec::new();
    for _ in 0..CONSUMERS {
        let mut c = s.raw();
        let consumed = consumed.clone();
        threads.push(std::thread::spawn(move || loop {
            match c.cmd(&["BLPOP", "a", "b", "c", "0"]) {
                Frame::Array(kv) => match &kv[1] {
                    Frame::Bulk(v) if v == b"stop" => return,
                    Frame::Bulk(v) => consumed
                        .lock()
                        .unwrap()
                        .push(String::from_utf8(v.clone()).unwrap()),
                    f => panic!("unexpected element {f:?}"),
                },
                f => panic!("unexpected BLPOP reply {f:?}"),
            }
        }));
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut mover_ids = Vec::new();
    let mut movers = Vec::new();
    for _ in 0..2 {
        let mut m = s.raw();
        let stop = stop.clone();
        let Frame::Integer(id) = m.cmd(&["CLIENT", "ID"]) else {
            panic!("CLIENT ID")
        };
        mover_ids.push(id.to_string());
        movers.push(std::thread::spawn(move || loop {
            match m.cmd(&["BLMOVE", "c", "a", "RIGHT", "LEFT", "0"]) {
                Frame::Bulk(_) => {}
                // Released by CLIENT UNBLOCK at the end.
                Frame::NullArray | Frame::Null | Frame::NullBulk => {}
                f => panic!("unexpected BLMOVE reply {f:?}"),
            }
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
        }));
    }
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let mut c = s.raw();
            std::thread::spawn(move || {
                let keys = ["a", "b", "c"];
                let mut j = 0;
                while j < PER_PRODUCER {
                    let v = format!("p{p}-{j}");
                    if j % 3 == 2 && j + 1 < PER_PRODUCER {
                        let w = format!("p{p}-{}", j + 1);
                        c.cmd(&["MULTI"]);
                        c.cmd(&["RPUSH", keys[j % 3], &v]);
                        c.cmd(&["LPUSH", keys[(j + 1) % 3], &w]);
                        assert!(matches!(c.cmd(&["EXEC"]), Frame::Array(_)));
                        j += 2;
                    } else {
                        c.cmd(&["RPUSH", keys[(j + p) % 3], &v]);
                        j += 1;
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    let mut admin = s.raw();
    let all_consumed = eventually(Duration::from_secs(20), || {
        consumed.lock().unwrap().len() >= TOTAL
    });
    let left: Vec<Frame> = ["a", "b", "c"]
        .iter()
        .map(|k| admin.cmd(&["LLEN", k]))
        .collect();
    assert!(
        all_consumed,
        "consumed {} of {TOTAL}; left in a, b, c: {left:?}",
        consumed.lock().unwrap().len()
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let movers_done = eventually(Duration::from_secs(5), || {
        for id in &mover_ids {
            admin.cmd(&["CLIENT", "UNBLOCK", id]);
        }
        movers.iter().all(|m| m.is_finished())
    });
    assert!(movers_done, "a mover did not stop");
    for m in movers {
        m.join().unwrap();
    }
    for _ in 0..CONSUMERS {
        admin.cmd(&["RPUSH", "b", "stop"]);
    }
    for t in threads {
        t.join().unwrap();
    }
    let got = consumed.lock().unwrap();
    let distinct: HashSet<&String> = got.iter().collect();
    assert_eq!(got.len(), TOTAL, "an element was served twice");
    assert_eq!(distinct.len(), TOTAL);
    wait_blocked(&s, 0);
}

/// WAIT on a single node answers as a Redis master with no replicas: `0`,
/// at once when no replica is asked for, else once its timeout passed;
/// blocked meanwhile (CLIENT LIST `b`, INFO's blocked_clients, CLIENT
/// UNBLOCK), at once inside EXEC, refused in scripts, Redis's errors.
#[test]
fn wait_answers_like_a_redis_master_without_replicas() {
    let s = TestServer::start();
    let mut c = s.raw();
    let mut admin = s.raw();
    assert_eq!(c.cmd(&["SET", "k", "v"]), common::ok());
    assert_eq!(c.cmd(&["WAIT", "0", "0"]), int(0));
    assert_eq!(c.cmd(&["WAIT", "-3", "0"]), int(0));
    let started = Instant::now();
    assert_eq!(c.cmd(&["WAIT", "1", "150"]), int(0));
    assert!(started.elapsed() >= Duration::from_millis(150), "it waited");
    for (args, line) in [
        (
            &["WAIT", "x", "0"][..],
            "ERR value is not an integer or out of range",
        ),
        (
            &["WAIT", "1", "1.5"],
            "ERR timeout is not an integer or out of range",
        ),
        (&["WAIT", "1", "-1"], "ERR timeout is negative"),
        (
            &["WAIT", "1"],
            "ERR wrong number of arguments for 'wait' command",
        ),
    ] {
        assert_eq!(c.cmd(args), err(line), "{args:?}");
    }
    assert_eq!(c.cmd(&["MULTI"]), common::ok());
    assert_eq!(
        c.cmd(&["WAIT", "1", "0"]),
        Frame::Simple(b"QUEUED".to_vec())
    );
    assert_eq!(c.cmd(&["EXEC"]), Frame::Array(vec![int(0)]));
    match c.cmd(&["EVAL", "return redis.call('wait', 0, 0)", "0"]) {
        Frame::Error(e) => assert!(
            String::from_utf8_lossy(&e)
                .starts_with("ERR This Redis command is not allowed from script"),
            "{}",
            String::from_utf8_lossy(&e)
        ),
        f => panic!("{f:?}"),
    }
    // No limit: blocked until released, with its count (TIMEOUT) or the
    // error (ERROR).
    let id = match c.cmd(&["CLIENT", "ID"]) {
        Frame::Integer(n) => n.to_string(),
        f => panic!("{f:?}"),
    };
    for (how, reply) in [
        ("TIMEOUT", int(0)),
        (
            "ERROR",
            err("UNBLOCKED client unblocked via CLIENT UNBLOCK"),
        ),
    ] {
        send(&mut c, &["WAIT", "1", "0"]);
        wait_blocked(&s, 1);
        let list = match admin.cmd(&["CLIENT", "LIST", "ID", &id]) {
            Frame::Bulk(b) => String::from_utf8(b).unwrap(),
            f => panic!("{f:?}"),
        };
        assert!(
            list.contains(" flags=b ") && list.contains(" cmd=wait "),
            "{list}"
        );
        assert_eq!(admin.cmd(&["CLIENT", "UNBLOCK", &id, how]), int(1));
        assert_eq!(c.read(), reply, "{how}");
        wait_blocked(&s, 0);
    }
    assert_eq!(c.cmd(&["GET", "k"]), bulk("v"));
}
