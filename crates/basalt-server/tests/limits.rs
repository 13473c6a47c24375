//! Request limits and the integer-overflow / resource classes from Redis's
//! CVE history. Each bad input gets Redis 7.0.15's exact reply (checked
//! against a real redis-server) while another client keeps being served.

use crate::common;

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use basalt_resp::Frame;
use basalt_server::Config;
use common::{bulk, err, ok, Raw, TestServer};

const I64_MIN: &str = "-9223372036854775808";
const I64_MAX: &str = "9223372036854775807";
const MINUS_I64_MAX: &str = "-9223372036854775807";
/// -(LONG_MAX / 2) - 1: past what WITHSCORES / WITHVALUES allow.
const PAST_HALF: &str = "-4611686018427387904";
const OUT_OF_RANGE: &str = "ERR value is out of range";
const OUT_OF_LONG_RANGE: &str =
    "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807";
const TOO_BIG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

fn pong() -> Frame {
    Frame::Simple(b"PONG".to_vec())
}

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn arr(items: Vec<Frame>) -> Frame {
    Frame::Array(items)
}

fn bulks(items: &[&str]) -> Frame {
    arr(items.iter().map(|s| bulk(s)).collect())
}

/// Runs `f` while a second client keeps writing and reading; asserts it was
/// served before, during and after.
fn while_others_are_served<T>(s: &TestServer, f: impl FnOnce() -> T) -> T {
    let addr = s.addr();
    // The password servers here use "secret".
    let password = s.handle.as_ref().unwrap().shared().requires_auth();
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let (ready_tx, ready_rx) = mpsc::channel();
    let bystander = {
        let stop = stop.clone();
        let served = served.clone();
        thread::spawn(move || {
            let mut r = Raw::connect(addr);
            if password {
                assert_eq!(r.cmd(&["AUTH", "secret"]), ok());
            }
            assert_eq!(r.cmd(&["PING"]), pong());
            ready_tx.send(()).unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut i = 0u64;
            // At least one round trip, however quick `f` is.
            loop {
                let v = i.to_string();
                assert_eq!(r.cmd(&["SET", "bystander", &v]), ok());
                assert_eq!(r.cmd(&["GET", "bystander"]), bulk(&v));
                served.fetch_add(1, Ordering::SeqCst);
                i += 1;
                if stop.load(Ordering::SeqCst) || Instant::now() > deadline {
                    break;
                }
                thread::sleep(Duration::from_millis(2));
            }
        })
    };
    ready_rx.recv().unwrap();
    let out = f();
    stop.store(true, Ordering::SeqCst);
    bystander.join().expect("the other client was served");
    assert!(served.load(Ordering::SeqCst) >= 1);
    let mut after = Raw::connect(addr);
    if password {
        assert_eq!(after.cmd(&["AUTH", "secret"]), ok());
    }
    assert_eq!(after.cmd(&["PING"]), pong());
    out
}

fn with_password() -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Config::ephemeral(dir.path());
    c.requirepass = Some("secret".into());
    TestServer::start_with(c, dir)
}

fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    basalt_resp::write_command(&mut out, args.iter().copied());
    out
}

// ------------------------------------------------------------ limits

#[test]
fn unauthenticated_client_sending_more_than_10_arguments_is_closed() {
    let s = with_password();
    while_others_are_served(&s, || {
        let mut r = s.raw();
        let ten: Vec<&[u8]> = std::iter::once(&b"MSET"[..])
            .chain(std::iter::repeat_n(&b"a"[..], 9))
            .collect();
        r.send(&command(&ten));
        assert_eq!(r.read(), err("NOAUTH Authentication required."));
        let mut eleven = ten.clone();
        eleven.push(b"a");
        r.send(&command(&eleven));
        assert_eq!(
            r.read(),
            err("ERR Protocol error: unauthenticated multibulk length")
        );
        assert!(r.closed());
        // The count is checked before an empty command is skipped.
        let mut r = s.raw();
        r.send(b"*0\r\n*11\r\n");
        assert_eq!(
            r.read(),
            err("ERR Protocol error: unauthenticated multibulk length")
        );
        assert!(r.closed());
    });
}

#[test]
fn unauthenticated_bulk_over_16_kb_is_closed() {
    let s = with_password();
    while_others_are_served(&s, || {
        let mut r = s.raw();
        let fits = vec![b'x'; 16384];
        r.send_cmd(&[b"ECHO", &fits]);
        assert_eq!(r.read(), err("NOAUTH Authentication required."));
        let mut r = s.raw();
        r.send(b"*2\r\n$4\r\nECHO\r\n$16385\r\n");
        assert_eq!(
            r.read(),
            err("ERR Protocol error: unauthenticated bulk length")
        );
        assert!(r.closed());
    });
}

#[test]
fn a_command_pipelined_after_auth_gets_the_full_limits() {
    let s = with_password();
    let mut r = s.raw();
    let mut bytes = command(&[b"AUTH", b"secret"]);
    let big = vec![b'v'; 100_000];
    let mut mset: Vec<&[u8]> = vec![b"MSET"];
    for _ in 0..6 {
        mset.push(b"k");
        mset.push(&big);
    }
    bytes.extend_from_slice(&command(&mset));
    r.send(&bytes);
    assert_eq!(r.read(), ok());
    assert_eq!(r.read(), ok());
    assert_eq!(r.cmd(&["STRLEN", "k"]), int(100_000));
}

#[test]
fn without_a_password_big_commands_need_no_auth() {
    let s = TestServer::start();
    let mut r = s.raw();
    let big = vec![b'v'; 20_000];
    let mut mset: Vec<&[u8]> = vec![b"MSET"];
    for _ in 0..6 {
        mset.push(b"k");
        mset.push(&big);
    }
    r.send_cmd(&mset);
    assert_eq!(r.read(), ok());
}

#[test]
fn proto_max_bulk_len_limits_arguments_and_the_strings_commands_build() {
    let s = TestServer::start();
    let mut admin = s.raw();
    assert_eq!(admin.cmd(&["SET", "s", "hello"]), ok());
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "proto-max-bulk-len", "1mb"]),
        ok()
    );
    while_others_are_served(&s, || {
        let mut r = s.raw();
        r.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048577\r\n");
        assert_eq!(r.read(), err("ERR Protocol error: invalid bulk length"));
        assert!(r.closed());
        let mut r = s.raw();
        assert_eq!(r.cmd(&["SETRANGE", "s", "1048576", "x"]), err(TOO_BIG));
        assert_eq!(r.cmd(&["SETRANGE", "s", "1048570", "x"]), int(1048571));
        let tail = "y".repeat(10);
        assert_eq!(r.cmd(&["APPEND", "s", &tail]), err(TOO_BIG));
        assert_eq!(r.cmd(&["STRLEN", "s"]), int(1048571));
    });
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "proto-max-bulk-len", "512mb"]),
        ok()
    );
    assert_eq!(admin.cmd(&["APPEND", "s", "yy"]), int(1048573));
}

#[test]
fn a_client_whose_query_buffer_passes_the_limit_is_closed() {
    let s = TestServer::start();
    let mut admin = s.raw();
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "client-query-buffer-limit", "1mb"]),
        ok()
    );
    while_others_are_served(&s, || {
        let mut r = s.raw();
        // A 3 MB argument that never completes: the buffer passes 1 MB.
        let _ = r
            .stream
            .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3000000\r\n");
        let chunk = vec![b'z'; 64 << 10];
        for _ in 0..24 {
            if r.stream.write_all(&chunk).is_err() {
                break;
            }
        }
        assert!(r.closed());
    });
    assert_eq!(admin.cmd(&["EXISTS", "k"]), int(0));
    // Below the limit the same kind of argument is fine.
    let mut r = s.raw();
    let v = vec![b'z'; 500_000];
    r.send_cmd(&[b"SET", b"k", &v]);
    assert_eq!(r.read(), ok());
}

// ------------------------------------------------------------ CVE classes

#[test]
fn setrange_past_proto_max_bulk_len_or_at_huge_offsets_is_refused() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SET", "s", "hello"]), ok());
    while_others_are_served(&s, || {
        for offset in ["536870912", "4294967296", I64_MAX] {
            assert_eq!(r.cmd(&["SETRANGE", "s", offset, "x"]), err(TOO_BIG));
            assert_eq!(r.cmd(&["SETRANGE", "nokey", offset, "x"]), err(TOO_BIG));
        }
        assert_eq!(
            r.cmd(&["SETRANGE", "s", "-1", "x"]),
            err("ERR offset is out of range")
        );
        assert_eq!(
            r.cmd(&["SETRANGE", "s", I64_MIN, "x"]),
            err("ERR offset is out of range")
        );
        assert_eq!(r.cmd(&["SETRANGE", "nokey", "536870912", ""]), int(0));
    });
    assert_eq!(r.cmd(&["GET", "s"]), bulk("hello"));
    assert_eq!(r.cmd(&["EXISTS", "nokey"]), int(0));
}

#[test]
fn getrange_with_extreme_start_and_end() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SET", "s", "hello"]), ok());
    while_others_are_served(&s, || {
        let cases = [
            (I64_MIN, I64_MAX, bulk("hello")),
            (I64_MAX, I64_MIN, bulk("")),
            (I64_MIN, I64_MIN, bulk("h")),
            (I64_MAX, I64_MAX, bulk("")),
            ("0", I64_MIN, bulk("h")),
            ("-1", I64_MAX, bulk("o")),
            (
                "0",
                "9223372036854775808",
                err("ERR value is not an integer or out of range"),
            ),
        ];
        for (start, end, want) in cases {
            assert_eq!(r.cmd(&["GETRANGE", "s", start, end]), want, "{start} {end}");
        }
        assert_eq!(r.cmd(&["SUBSTR", "s", I64_MIN, I64_MAX]), bulk("hello"));
    });
}

#[test]
fn random_member_counts_near_i64_min_are_out_of_range() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SADD", "set", "a", "b", "c"]), int(3));
    assert_eq!(r.cmd(&["ZADD", "z", "1", "a", "2", "b"]), int(2));
    assert_eq!(r.cmd(&["HSET", "h", "f", "1", "g", "2"]), int(2));
    while_others_are_served(&s, || {
        for cmd in ["SRANDMEMBER", "ZRANDMEMBER", "HRANDFIELD"] {
            for key in ["set", "z", "h", "nosuch"] {
                // The count is checked before the key's type.
                assert_eq!(
                    r.cmd(&[cmd, key, I64_MIN]),
                    err(OUT_OF_LONG_RANGE),
                    "{cmd} {key}"
                );
            }
        }
        for (cmd, key, with) in [
            ("ZRANDMEMBER", "z", "WITHSCORES"),
            ("HRANDFIELD", "h", "WITHVALUES"),
        ] {
            for count in [MINUS_I64_MAX, PAST_HALF, I64_MAX] {
                assert_eq!(
                    r.cmd(&[cmd, key, count, with]),
                    err(OUT_OF_RANGE),
                    "{cmd} {count}"
                );
            }
            assert_eq!(
                r.cmd(&[cmd, "nosuch", I64_MIN, with]),
                err(OUT_OF_LONG_RANGE)
            );
        }
        // A huge positive count is just "all of them".
        match r.cmd(&["SRANDMEMBER", "set", I64_MAX]) {
            Frame::Array(items) => assert_eq!(items.len(), 3),
            other => panic!("{other:?}"),
        }
        match r.cmd(&["HRANDFIELD", "h", I64_MAX]) {
            Frame::Array(items) => assert_eq!(items.len(), 2),
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn float_increments_never_store_nan_or_infinity() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["HSET", "h", "x", "1.5"]), int(1));
    assert_eq!(r.cmd(&["SET", "f", "1.5"]), ok());
    while_others_are_served(&s, || {
        for inc in ["inf", "-inf", "+inf"] {
            assert_eq!(
                r.cmd(&["HINCRBYFLOAT", "h", "x", inc]),
                err("ERR value is NaN or Infinity")
            );
            assert_eq!(
                r.cmd(&["INCRBYFLOAT", "f", inc]),
                err("ERR increment would produce NaN or Infinity")
            );
        }
        assert_eq!(
            r.cmd(&["HINCRBYFLOAT", "h", "x", "nan"]),
            err("ERR value is not a valid float")
        );
        assert_eq!(
            r.cmd(&["INCRBYFLOAT", "f", "nan"]),
            err("ERR value is not a valid float")
        );
        // In a long double, as Redis: past its range (~1.19e4932) the sum
        // is infinite and refused instead of stored.
        assert_eq!(r.cmd(&["SET", "big", "1e4932"]), ok());
        assert_eq!(
            r.cmd(&["INCRBYFLOAT", "big", "1e4932"]),
            err("ERR increment would produce NaN or Infinity")
        );
    });
    assert_eq!(r.cmd(&["HGET", "h", "x"]), bulk("1.5"));
    assert_eq!(r.cmd(&["GET", "f"]), bulk("1.5"));
    assert_eq!(r.cmd(&["GET", "big"]), bulk("1e4932"));
}

#[test]
fn msetnx_with_repeated_keys_or_odd_arity() {
    let s = TestServer::start();
    let mut r = s.raw();
    while_others_are_served(&s, || {
        assert_eq!(r.cmd(&["MSETNX", "k1", "v1", "k1", "v2"]), int(1));
        assert_eq!(r.cmd(&["GET", "k1"]), bulk("v2"));
        let arity = err("ERR wrong number of arguments for 'msetnx' command");
        assert_eq!(r.cmd(&["MSETNX", "k2", "v1", "k3"]), arity);
        assert_eq!(r.cmd(&["MSETNX"]), arity);
        assert_eq!(r.cmd(&["MSETNX", "k1", "x", "k4", "y"]), int(0));
    });
    assert_eq!(r.cmd(&["EXISTS", "k2", "k3", "k4"]), int(0));
}

#[test]
fn huge_and_nested_glob_patterns_answer_fast() {
    let s = TestServer::start();
    let mut r = s.raw();
    let long_a = "a".repeat(200);
    assert_eq!(r.cmd(&["MSET", &long_a, "1", "k2", "2", "[a]", "3"]), ok());
    let patterns = [
        "*a".repeat(50_000) + "b",
        "a*".repeat(50_000) + "b",
        "[".repeat(50_000),
        "[[".repeat(20_000) + "a]]",
        "[a-".repeat(20_000),
        "[^".repeat(30_000),
        "\\".repeat(1000),
    ];
    while_others_are_served(&s, || {
        for p in &patterns {
            let t = Instant::now();
            assert_eq!(r.cmd(&["KEYS", p]), arr(vec![]), "{}", &p[..20]);
            assert_eq!(
                r.cmd(&["SCAN", "0", "MATCH", p, "COUNT", "100"]),
                arr(vec![bulk("0"), arr(vec![])])
            );
            assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        }
        // PSUBSCRIBE with the worst one, then a PUBLISH that must try it.
        let mut sub = s.raw();
        let huge = &patterns[0];
        match sub.cmd(&["PSUBSCRIBE", huge]) {
            Frame::Array(items) => assert_eq!(items[2], int(1)),
            other => panic!("{other:?}"),
        }
        let t = Instant::now();
        assert_eq!(r.cmd(&["PUBLISH", &long_a, "m"]), int(0));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    });
}

#[test]
fn list_and_sorted_set_ranges_with_extreme_indexes_and_counts() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["RPUSH", "l", "a", "b", "c"]), int(3));
    assert_eq!(r.cmd(&["ZADD", "z", "1", "a", "2", "b", "3", "c"]), int(3));
    while_others_are_served(&s, || {
        assert_eq!(
            r.cmd(&["LRANGE", "l", I64_MIN, I64_MAX]),
            bulks(&["a", "b", "c"])
        );
        assert_eq!(r.cmd(&["LRANGE", "l", I64_MAX, I64_MIN]), arr(vec![]));
        assert_eq!(r.cmd(&["LRANGE", "l", I64_MIN, I64_MIN]), arr(vec![]));
        assert_eq!(r.cmd(&["LINDEX", "l", I64_MIN]), Frame::NullBulk);
        assert_eq!(
            r.cmd(&["LSET", "l", I64_MIN, "x"]),
            err("ERR index out of range")
        );
        assert_eq!(r.cmd(&["LPOS", "l", "a", "RANK", I64_MIN]), int(0));
        assert_eq!(r.cmd(&["LPOS", "l", "a", "RANK", I64_MAX]), Frame::NullBulk);
        assert_eq!(
            r.cmd(&["LPOS", "l", "a", "RANK", MINUS_I64_MAX]),
            Frame::NullBulk
        );
        assert_eq!(
            r.cmd(&["LPOS", "l", "a", "COUNT", "-1"]),
            err("ERR COUNT can't be negative")
        );
        assert_eq!(
            r.cmd(&["LPOS", "l", "a", "COUNT", I64_MAX]),
            arr(vec![int(0)])
        );
        assert_eq!(
            r.cmd(&["LPOS", "l", "a", "MAXLEN", "-1"]),
            err("ERR MAXLEN can't be negative")
        );
        assert_eq!(r.cmd(&["LPOS", "l", "a", "MAXLEN", I64_MAX]), int(0));
        assert_eq!(
            r.cmd(&["LPOP", "l", "-1"]),
            err("ERR value is out of range, must be positive")
        );
        assert_eq!(
            r.cmd(&["ZRANGE", "z", I64_MIN, I64_MAX]),
            bulks(&["a", "b", "c"])
        );
        assert_eq!(r.cmd(&["ZRANGE", "z", I64_MAX, I64_MIN]), arr(vec![]));
        assert_eq!(
            r.cmd(&["ZREVRANGE", "z", I64_MIN, I64_MAX]),
            bulks(&["c", "b", "a"])
        );
        assert_eq!(
            r.cmd(&["ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", I64_MAX, I64_MIN]),
            arr(vec![])
        );
        assert_eq!(
            r.cmd(&["ZRANGE", "z", "0", "-1", "BYSCORE", "LIMIT", I64_MIN, I64_MAX]),
            arr(vec![])
        );
        assert_eq!(r.cmd(&["ZREMRANGEBYRANK", "z", I64_MIN, I64_MIN]), int(0));
        assert_eq!(r.cmd(&["LTRIM", "l", I64_MIN, I64_MAX]), ok());
    });
    assert_eq!(r.cmd(&["LLEN", "l"]), int(3));
    assert_eq!(r.cmd(&["ZCARD", "z"]), int(3));
}

#[test]
fn intercard_limit_and_numkeys_out_of_range() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SADD", "s1", "a", "b"]), int(2));
    assert_eq!(r.cmd(&["SADD", "s2", "a", "b"]), int(2));
    assert_eq!(r.cmd(&["ZADD", "z", "1", "a"]), int(1));
    while_others_are_served(&s, || {
        let negative = err("ERR LIMIT can't be negative");
        assert_eq!(
            r.cmd(&["SINTERCARD", "2", "s1", "s2", "LIMIT", "-1"]),
            negative
        );
        assert_eq!(
            r.cmd(&["SINTERCARD", "2", "s1", "s2", "LIMIT", I64_MIN]),
            negative
        );
        assert_eq!(
            r.cmd(&["ZINTERCARD", "2", "z", "z", "LIMIT", "-1"]),
            negative
        );
        assert_eq!(
            r.cmd(&["SINTERCARD", I64_MAX, "s1", "s2"]),
            err("ERR Number of keys can't be greater than number of args")
        );
        assert_eq!(
            r.cmd(&["SINTERCARD", "-1", "s1"]),
            err("ERR numkeys should be greater than 0")
        );
        assert_eq!(
            r.cmd(&["ZINTERCARD", I64_MAX, "z"]),
            err("ERR syntax error")
        );
        assert_eq!(
            r.cmd(&["ZINTERCARD", I64_MIN, "z"]),
            err("ERR at least 1 input key is needed for 'zintercard' command")
        );
        assert_eq!(
            r.cmd(&["SINTERCARD", "2", "s1", "s2", "LIMIT", "0"]),
            int(2)
        );
    });
}

#[test]
fn blocking_timeouts_that_are_negative_huge_or_not_numbers() {
    let s = TestServer::start();
    let mut r = s.raw();
    while_others_are_served(&s, || {
        let negative = err("ERR timeout is negative");
        let not_float = err("ERR timeout is not a float or out of range");
        // Redis 7.0 reports overflowing timeouts as negative too.
        for t in ["-1", "inf", "1e300", I64_MAX, "-0.5"] {
            let t0 = Instant::now();
            assert_eq!(r.cmd(&["BLPOP", "nokey", t]), negative, "{t}");
            assert!(t0.elapsed() < Duration::from_secs(2));
        }
        for t in ["nan", "abc", ""] {
            assert_eq!(r.cmd(&["BLPOP", "nokey", t]), not_float, "{t}");
        }
        assert_eq!(r.cmd(&["BRPOP", "nokey", I64_MIN]), negative);
        assert_eq!(r.cmd(&["BLMOVE", "a", "b", "LEFT", "LEFT", "-1"]), negative);
        assert_eq!(r.cmd(&["BZPOPMIN", "nokey", "1e300"]), negative);
        assert_eq!(r.cmd(&["BLMPOP", "-1", "2", "a", "b", "LEFT"]), negative);
        assert_eq!(r.cmd(&["BLMPOP", "1e300", "1", "a", "LEFT"]), negative);
        assert_eq!(
            r.cmd(&["BLMPOP", "0.01", "1", "a", "LEFT", "COUNT", "-1"]),
            err("ERR count should be greater than 0")
        );
        assert_eq!(
            r.cmd(&["BLMPOP", "0.01", I64_MAX, "a", "LEFT"]),
            err("ERR syntax error")
        );
    });
}
