//! Pub/sub through raw RESP and the `redis` crate: Redis 7.0's reply
//! shapes for (P)SUBSCRIBE / (P)UNSUBSCRIBE / PUBLISH / PUBSUB, RESP2
//! subscribed mode, RESP3 pushes, and the output-buffer limit that
//! disconnects a subscriber that never reads.

use crate::common;

use std::time::{Duration, Instant};

use basalt_resp::Frame;
use common::{bulk, err, ok, Raw, TestServer};

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn arr(items: Vec<Frame>) -> Frame {
    Frame::Array(items)
}

fn push(items: Vec<Frame>) -> Frame {
    Frame::Push(items)
}

fn conf(kind: &str, name: &str, count: i64) -> Frame {
    arr(vec![bulk(kind), bulk(name), int(count)])
}

fn message(channel: &str, payload: &str) -> Frame {
    arr(vec![bulk("message"), bulk(channel), bulk(payload)])
}

fn pmessage(pattern: &str, channel: &str, payload: &str) -> Frame {
    arr(vec![
        bulk("pmessage"),
        bulk(pattern),
        bulk(channel),
        bulk(payload),
    ])
}

fn subscribe(raw: &mut Raw, args: &[&str]) -> Vec<Frame> {
    raw.send_cmd(&args.iter().map(|a| a.as_bytes()).collect::<Vec<_>>());
    (1..args.len()).map(|_| raw.read()).collect()
}

#[test]
fn subscribe_then_publish_delivers_messages_in_order() {
    let s = TestServer::start();
    let mut sub = s.raw();
    let mut publ = s.raw();
    assert_eq!(
        subscribe(&mut sub, &["SUBSCRIBE", "a", "b", "a"]),
        vec![
            conf("subscribe", "a", 1),
            conf("subscribe", "b", 2),
            conf("subscribe", "a", 2)
        ]
    );
    assert_eq!(publ.cmd(&["PUBLISH", "a", "one"]), int(1));
    assert_eq!(publ.cmd(&["PUBLISH", "b", "two"]), int(1));
    assert_eq!(publ.cmd(&["PUBLISH", "nobody", "x"]), int(0));
    assert_eq!(publ.cmd(&["PUBLISH", "a", ""]), int(1));
    assert_eq!(sub.read(), message("a", "one"));
    assert_eq!(sub.read(), message("b", "two"));
    assert_eq!(sub.read(), message("a", ""));
    // Many messages keep their order.
    for i in 0..200 {
        assert_eq!(publ.cmd(&["PUBLISH", "a", &i.to_string()]), int(1));
    }
    for i in 0..200 {
        assert_eq!(sub.read(), message("a", &i.to_string()));
    }
}

#[test]
fn patterns_receive_pmessage_and_count_in_publish() {
    let s = TestServer::start();
    let mut sub = s.raw();
    let mut publ = s.raw();
    assert_eq!(
        subscribe(&mut sub, &["PSUBSCRIBE", "news.*", "h?llo", "[ab]*"]),
        vec![
            conf("psubscribe", "news.*", 1),
            conf("psubscribe", "h?llo", 2),
            conf("psubscribe", "[ab]*", 3)
        ]
    );
    assert_eq!(
        subscribe(&mut sub, &["SUBSCRIBE", "news.tech"]),
        vec![conf("subscribe", "news.tech", 4)]
    );
    // One client, two matching subscriptions: two deliveries, channel first.
    assert_eq!(publ.cmd(&["PUBLISH", "news.tech", "x"]), int(2));
    assert_eq!(sub.read(), message("news.tech", "x"));
    assert_eq!(sub.read(), pmessage("news.*", "news.tech", "x"));
    assert_eq!(publ.cmd(&["PUBLISH", "hello", "y"]), int(1));
    assert_eq!(sub.read(), pmessage("h?llo", "hello", "y"));
    assert_eq!(publ.cmd(&["PUBLISH", "apple", "z"]), int(1));
    assert_eq!(sub.read(), pmessage("[ab]*", "apple", "z"));
    assert_eq!(publ.cmd(&["PUBLISH", "cherry", "z"]), int(0));
    // A second subscriber to the same pattern.
    let mut sub2 = s.raw();
    subscribe(&mut sub2, &["PSUBSCRIBE", "news.*"]);
    assert_eq!(publ.cmd(&["PUBLISH", "news.sport", "w"]), int(2));
    assert_eq!(sub.read(), pmessage("news.*", "news.sport", "w"));
    assert_eq!(sub2.read(), pmessage("news.*", "news.sport", "w"));
}

#[test]
fn pathological_pattern_does_not_stall_publish() {
    let s = TestServer::start();
    let mut sub = s.raw();
    let pattern = format!("{}b", "a*".repeat(40));
    subscribe(&mut sub, &["PSUBSCRIBE", &pattern]);
    let channel = "a".repeat(20_000);
    let mut publ = s.raw();
    let t = Instant::now();
    assert_eq!(publ.cmd(&["PUBLISH", &channel, "x"]), int(0));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let matching = format!("{channel}b");
    assert_eq!(publ.cmd(&["PUBLISH", &matching, "x"]), int(1));
    assert_eq!(sub.read(), pmessage(&pattern, &matching, "x"));
}

#[test]
fn unsubscribe_without_arguments_leaves_everything() {
    let s = TestServer::start();
    let mut sub = s.raw();
    // Nothing to leave: one frame with a nil name and count 0.
    assert_eq!(
        sub.cmd(&["UNSUBSCRIBE"]),
        arr(vec![bulk("unsubscribe"), Frame::NullBulk, int(0)])
    );
    assert_eq!(
        sub.cmd(&["PUNSUBSCRIBE"]),
        arr(vec![bulk("punsubscribe"), Frame::NullBulk, int(0)])
    );
    subscribe(&mut sub, &["SUBSCRIBE", "c2", "c1"]);
    subscribe(&mut sub, &["PSUBSCRIBE", "p*"]);
    // Leaving a channel one is not in still confirms with the count.
    assert_eq!(
        sub.cmd(&["UNSUBSCRIBE", "zz"]),
        conf("unsubscribe", "zz", 3)
    );
    sub.send_cmd(&[b"UNSUBSCRIBE"]);
    assert_eq!(sub.read(), conf("unsubscribe", "c1", 2));
    assert_eq!(sub.read(), conf("unsubscribe", "c2", 1));
    // Still subscribed to a pattern: still in subscribed mode.
    assert_eq!(
        sub.cmd(&["GET", "k"]),
        err("ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")
    );
    assert_eq!(sub.cmd(&["PUNSUBSCRIBE"]), conf("punsubscribe", "p*", 0));
    assert_eq!(sub.cmd(&["GET", "k"]), Frame::NullBulk);
}

#[test]
fn subscribed_resp2_client_may_only_ping_subscribe_quit_and_reset() {
    let s = TestServer::start();
    let mut sub = s.raw();
    subscribe(&mut sub, &["SUBSCRIBE", "ch"]);
    assert_eq!(
        sub.cmd(&["SET", "k", "v"]),
        err("ERR Can't execute 'set': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")
    );
    assert_eq!(
        sub.cmd(&["PUBLISH", "ch", "v"]),
        err("ERR Can't execute 'publish': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")
    );
    assert_eq!(
        sub.cmd(&["CLIENT", "LIST"]),
        err("ERR Can't execute 'client|list': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")
    );
    // Arity is checked first, as in Redis.
    assert_eq!(
        sub.cmd(&["GET"]),
        err("ERR wrong number of arguments for 'get' command")
    );
    assert_eq!(sub.cmd_text(&["PING"]), "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    assert_eq!(
        sub.cmd(&["PING", "hi"]),
        arr(vec![bulk("pong"), bulk("hi")])
    );
    // The rejected SET changed nothing.
    let mut other = s.raw();
    assert_eq!(other.cmd(&["EXISTS", "k"]), int(0));
    // RESET leaves subscribed mode and drops the subscriptions.
    assert_eq!(sub.cmd(&["RESET"]), Frame::Simple(b"RESET".to_vec()));
    assert_eq!(sub.cmd(&["PING"]), Frame::Simple(b"PONG".to_vec()));
    assert_eq!(other.cmd(&["PUBLISH", "ch", "x"]), int(0));
    assert_eq!(
        other.cmd(&["PUBSUB", "NUMSUB", "ch"]),
        arr(vec![bulk("ch"), int(0)])
    );
    subscribe(&mut sub, &["SUBSCRIBE", "ch"]);
    assert_eq!(sub.cmd(&["QUIT"]), ok());
    assert!(sub.closed());
    assert!(common::eventually(Duration::from_secs(5), || {
        other.cmd(&["PUBSUB", "NUMSUB", "ch"]) == arr(vec![bulk("ch"), int(0)])
    }));
}

#[test]
fn resp3_subscriber_gets_push_frames_and_runs_any_command() {
    let s = TestServer::start();
    let mut sub = s.raw();
    sub.send(b"HELLO 3\r\n");
    let _ = sub.read();
    sub.send_cmd(&[b"SUBSCRIBE", b"ch"]);
    assert_eq!(
        sub.read(),
        push(vec![bulk("subscribe"), bulk("ch"), int(1)])
    );
    assert_eq!(sub.cmd(&["SET", "k", "v"]), ok());
    assert_eq!(sub.cmd(&["GET", "k"]), bulk("v"));
    assert_eq!(sub.cmd(&["PING"]), Frame::Simple(b"PONG".to_vec()));
    let mut publ = s.raw();
    assert_eq!(publ.cmd(&["PUBLISH", "ch", "hi"]), int(1));
    assert_eq!(
        sub.read(),
        push(vec![bulk("message"), bulk("ch"), bulk("hi")])
    );
    // Its own PUBLISH: the push comes before the reply, as in Redis 7.0.
    sub.send_cmd(&[b"PUBLISH", b"ch", b"me"]);
    assert_eq!(
        sub.read(),
        push(vec![bulk("message"), bulk("ch"), bulk("me")])
    );
    assert_eq!(sub.read(), int(1));
    assert_eq!(
        sub.cmd(&["UNSUBSCRIBE"]),
        push(vec![bulk("unsubscribe"), bulk("ch"), int(0)])
    );
    assert_eq!(
        sub.cmd(&["UNSUBSCRIBE"]),
        push(vec![bulk("unsubscribe"), Frame::Null, int(0)])
    );
}

#[test]
fn pubsub_introspection_counts_channels_subscribers_and_patterns() {
    let s = TestServer::start();
    let mut a = s.raw();
    let mut b = s.raw();
    subscribe(&mut a, &["SUBSCRIBE", "news.tech", "news.art", "misc"]);
    subscribe(&mut b, &["SUBSCRIBE", "news.tech"]);
    subscribe(&mut b, &["PSUBSCRIBE", "x*", "y*"]);
    subscribe(&mut a, &["PSUBSCRIBE", "x*"]);
    let mut c = s.raw();
    assert_eq!(
        c.cmd(&["PUBSUB", "CHANNELS"]),
        arr(vec![bulk("misc"), bulk("news.art"), bulk("news.tech")])
    );
    assert_eq!(
        c.cmd(&["PUBSUB", "CHANNELS", "news.*"]),
        arr(vec![bulk("news.art"), bulk("news.tech")])
    );
    assert_eq!(c.cmd(&["PUBSUB", "CHANNELS", "zz*"]), arr(vec![]));
    assert_eq!(
        c.cmd(&["PUBSUB", "NUMSUB", "news.tech", "misc", "none"]),
        arr(vec![
            bulk("news.tech"),
            int(2),
            bulk("misc"),
            int(1),
            bulk("none"),
            int(0)
        ])
    );
    assert_eq!(c.cmd(&["PUBSUB", "NUMSUB"]), arr(vec![]));
    assert_eq!(c.cmd(&["PUBSUB", "NUMPAT"]), int(2));
    assert_eq!(
        c.cmd(&["PUBSUB", "NUMPAT", "x"]),
        err("ERR wrong number of arguments for 'pubsub|numpat' command")
    );
    assert_eq!(
        c.cmd(&["PUBSUB", "CHANNELS", "a", "b"]),
        err("ERR unknown subcommand or wrong number of arguments for 'CHANNELS'. Try PUBSUB HELP.")
    );
    assert_eq!(
        c.cmd(&["PUBSUB", "FOO"]),
        err("ERR unknown subcommand 'FOO'. Try PUBSUB HELP.")
    );
    match c.cmd(&["PUBSUB", "HELP"]) {
        Frame::Array(lines) => {
            assert_eq!(
                lines[0],
                Frame::Simple(
                    b"PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:".to_vec()
                )
            );
            assert_eq!(
                lines.last().unwrap(),
                &Frame::Simple(b"    Prints this help.".to_vec())
            );
        }
        other => panic!("{other:?}"),
    }
    let mut rc = s.client();
    let info: String = redis::cmd("INFO").arg("stats").query(&mut rc).unwrap();
    assert!(info.contains("pubsub_channels:3\r\n"), "{info}");
    assert!(info.contains("pubsub_patterns:2\r\n"), "{info}");
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut rc).unwrap();
    let lines: Vec<&str> = list.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains(" flags=P ") && l.contains(" sub=3 psub=1 ")),
        "{list}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains(" flags=P ") && l.contains(" sub=1 psub=2 ")),
        "{list}"
    );
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut rc)
        .unwrap();
    assert_eq!(list.lines().count(), 2, "{list}");
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("normal")
        .query(&mut rc)
        .unwrap();
    assert!(list.lines().all(|l| l.contains(" flags=N ")), "{list}");
    // Closing a subscriber drops its subscriptions.
    drop(a);
    assert!(common::eventually(Duration::from_secs(5), || {
        c.cmd(&["PUBSUB", "CHANNELS"]) == arr(vec![bulk("news.tech")])
    }));
    assert_eq!(c.cmd(&["PUBSUB", "NUMPAT"]), int(2));
    assert_eq!(
        c.cmd(&["PUBSUB", "NUMSUB", "news.tech"]),
        arr(vec![bulk("news.tech"), int(1)])
    );
}

#[test]
fn redis_crate_pubsub_round_trip() {
    let s = TestServer::start();
    let mut sub_conn = s.client();
    let mut pubsub = sub_conn.as_pubsub();
    pubsub.subscribe("chan").unwrap();
    pubsub.psubscribe("p.*").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut c = s.client();
    let n: i64 = redis::cmd("PUBLISH")
        .arg("chan")
        .arg("hello")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let n: i64 = redis::cmd("PUBLISH")
        .arg("p.1")
        .arg("world")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let m = pubsub.get_message().unwrap();
    assert_eq!(m.get_channel_name(), "chan");
    assert_eq!(m.get_payload::<String>().unwrap(), "hello");
    let m = pubsub.get_message().unwrap();
    assert_eq!(m.get_channel_name(), "p.1");
    assert_eq!(m.get_pattern::<String>().unwrap(), "p.*");
    assert_eq!(m.get_payload::<String>().unwrap(), "world");
}

#[test]
fn client_output_buffer_limit_config_round_trips() {
    let s = TestServer::start();
    let mut c = s.raw();
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "client-output-buffer-limit"]),
        arr(vec![
            bulk("client-output-buffer-limit"),
            bulk("normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60")
        ])
    );
    assert_eq!(
        c.cmd(&[
            "CONFIG",
            "SET",
            "client-output-buffer-limit",
            "pubsub 1mb 512kb 10 replica 1gb 0 0"
        ]),
        ok()
    );
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "client-output-buffer-limit"]),
        arr(vec![
            bulk("client-output-buffer-limit"),
            bulk("normal 0 0 0 slave 1073741824 0 0 pubsub 1048576 524288 10")
        ])
    );
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "client-output-buffer-limit", "pubsub 1mb 1mb"]),
        err("ERR CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - Wrong number of arguments in buffer limit configuration.")
    );
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "client-output-buffer-limit", "master 1 1 1"]),
        err("ERR CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - Invalid client class specified in buffer limit configuration.")
    );
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "client-output-buffer-limit", "pubsub 1qb 1 1"]),
        err("ERR CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - Error in hard, soft or soft_seconds setting in buffer limit configuration.")
    );
    // Failed sets changed nothing.
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "client-output-buffer-limit"]),
        arr(vec![
            bulk("client-output-buffer-limit"),
            bulk("normal 0 0 0 slave 1073741824 0 0 pubsub 1048576 524288 10")
        ])
    );
}

#[test]
fn subscriber_that_never_reads_is_disconnected_past_the_hard_limit() {
    let s = TestServer::start();
    let mut admin = s.raw();
    assert_eq!(
        admin.cmd(&[
            "CONFIG",
            "SET",
            "client-output-buffer-limit",
            "pubsub 1mb 0 0"
        ]),
        ok()
    );
    let mut slow = s.raw();
    assert_eq!(slow.cmd(&["CLIENT", "SETNAME", "slow"]), ok());
    subscribe(&mut slow, &["SUBSCRIBE", "firehose"]);
    // The slow client now reads nothing. Publish until the server gives up
    // on it (the socket buffers absorb some megabytes first).
    let payload = "x".repeat(256 << 10);
    let mut publ = s.raw();
    let started = Instant::now();
    let mut receivers = 1;
    let mut sent = 0;
    while receivers == 1 && sent < 2000 {
        let t = Instant::now();
        match publ.cmd(&["PUBLISH", "firehose", &payload]) {
            Frame::Integer(n) => receivers = n,
            other => panic!("{other:?}"),
        }
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "PUBLISH waited for a subscriber"
        );
        sent += 1;
        if receivers == 1 && sent % 16 == 0 {
            // Between bursts the others keep being served.
            assert_eq!(admin.cmd(&["PING"]), Frame::Simple(b"PONG".to_vec()));
        }
    }
    assert!(
        common::eventually(Duration::from_secs(10), || {
            publ.cmd(&["PUBLISH", "firehose", "x"]) == int(0)
        }),
        "the slow subscriber was not disconnected after {sent} messages in {:?}",
        started.elapsed()
    );
    assert!(
        slow.closed(),
        "the server kept the slow subscriber's socket open"
    );
    assert_eq!(admin.cmd(&["PING"]), Frame::Simple(b"PONG".to_vec()));
    let info = match admin.cmd(&["INFO", "stats"]) {
        Frame::Bulk(b) | Frame::Verbatim { text: b, .. } => String::from_utf8(b).unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(
        info.contains("client_output_buffer_limit_disconnections:1\r\n"),
        "{info}"
    );
    let list = match admin.cmd(&["CLIENT", "LIST"]) {
        Frame::Bulk(b) | Frame::Verbatim { text: b, .. } => String::from_utf8(b).unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(!list.contains("name=slow "), "{list}");
}

#[test]
fn a_reading_subscriber_is_not_disconnected_under_the_limit() {
    let s = TestServer::start();
    let mut admin = s.raw();
    assert_eq!(
        admin.cmd(&[
            "CONFIG",
            "SET",
            "client-output-buffer-limit",
            "pubsub 1mb 0 0"
        ]),
        ok()
    );
    let mut sub = s.raw();
    subscribe(&mut sub, &["SUBSCRIBE", "c"]);
    let payload = "y".repeat(64 << 10);
    let mut publ = s.raw();
    for _ in 0..64 {
        assert_eq!(publ.cmd(&["PUBLISH", "c", &payload]), int(1));
        assert_eq!(sub.read(), message("c", &payload));
    }
}
