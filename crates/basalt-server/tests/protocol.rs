//! The connection loop over raw TCP: pipelines, inline commands, protocol
//! errors (reply, close, others unaffected) and output backpressure.

use crate::common;

use std::io::{Read, Write};
use std::time::Duration;

use basalt_resp::Frame;
use common::{bulk, err, ok, TestServer};

fn pong() -> Frame {
    Frame::Simple(b"PONG".to_vec())
}

#[test]
fn pipeline_of_10000_commands_in_one_write() {
    let s = TestServer::start();
    let mut r = s.raw();
    let mut out = Vec::new();
    for i in 0..5000 {
        let k = format!("key:{i}");
        let v = format!("value:{i}");
        basalt_resp::write_command(&mut out, [b"SET".as_slice(), k.as_bytes(), v.as_bytes()]);
        basalt_resp::write_command(&mut out, [b"GET".as_slice(), k.as_bytes()]);
    }
    r.send(&out);
    for i in 0..5000 {
        assert_eq!(r.read(), ok());
        assert_eq!(r.read(), bulk(&format!("value:{i}")));
    }
    assert_eq!(r.cmd(&["DBSIZE"]), Frame::Integer(5000));
}

#[test]
fn pipelines_split_at_every_byte_boundary() {
    let s = TestServer::start();
    let mut r = s.raw();
    let mut out = Vec::new();
    basalt_resp::write_command(&mut out, [&b"SET"[..], b"k", b"a\r\nb"]);
    basalt_resp::write_command(&mut out, [&b"GET"[..], b"k"]);
    out.extend_from_slice(b"PING\r\n");
    for byte in &out {
        r.send(std::slice::from_ref(byte));
    }
    assert_eq!(r.read(), ok());
    assert_eq!(r.read(), Frame::Bulk(b"a\r\nb".to_vec()));
    assert_eq!(r.read(), pong());
}

#[test]
fn inline_commands_work_like_redis_cli_and_telnet() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.send(b"SET greeting \"hello world\"\r\nGET greeting\r\nset k 'x y'\nget k\nPING\r\n\r\n");
    assert_eq!(r.read(), ok());
    assert_eq!(r.read(), bulk("hello world"));
    assert_eq!(r.read(), ok());
    assert_eq!(r.read(), bulk("x y"));
    assert_eq!(r.read(), pong());
}

/// A pipeline of inline GETs and SETs longer than the look-ahead's
/// threshold (the batch's keys are prefetched): an inline command's
/// arguments are not in the read buffer, which once made the look-ahead
/// slice out of range and kill the connection.
#[test]
fn pipelines_of_inline_gets_and_sets_are_answered_in_order() {
    let s = TestServer::start();
    let mut r = s.raw();
    let sets: Vec<u8> = (0..20)
        .flat_map(|i| format!("SET key{i} v{i}\r\n").into_bytes())
        .collect();
    r.send(&sets);
    for _ in 0..20 {
        assert_eq!(r.read(), ok());
    }
    let gets: Vec<u8> = (0..20)
        .flat_map(|i| format!("GET key{i}\r\n").into_bytes())
        .collect();
    r.send(&gets);
    for i in 0..20 {
        assert_eq!(r.read(), bulk(&format!("v{i}")));
    }
    assert_eq!(r.cmd(&["PING"]), pong());
}

#[test]
fn big_values_round_trip() {
    let s = TestServer::start();
    let mut c = s.client();
    let value: Vec<u8> = (0..8 << 20).map(|i| (i % 251) as u8).collect();
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg(&value)
        .query(&mut c)
        .unwrap();
    let got: Vec<u8> = redis::cmd("GET").arg("big").query(&mut c).unwrap();
    assert_eq!(got, value);
}

/// Sends `input` on a fresh connection and expects `reply` then a close,
/// while a second connection keeps being served.
fn assert_protocol_error(s: &TestServer, input: &[u8], reply: &str) {
    let mut bystander = s.raw();
    assert_eq!(bystander.cmd(&["SET", "still", "here"]), ok());
    let mut r = s.raw();
    r.send(input);
    assert_eq!(
        r.read(),
        err(reply),
        "input {:?}",
        String::from_utf8_lossy(&input[..input.len().min(40)])
    );
    assert!(r.closed(), "connection stays open after {reply}");
    assert_eq!(bystander.cmd(&["GET", "still"]), bulk("here"));
}

#[test]
fn bad_protocol_input_gets_an_error_and_closes_only_that_connection() {
    let s = TestServer::start();
    assert_protocol_error(
        &s,
        b"*1\r\n$2000000000\r\n",
        "ERR Protocol error: invalid bulk length",
    );
    assert_protocol_error(
        &s,
        b"*3000000000\r\n",
        "ERR Protocol error: invalid multibulk length",
    );
    assert_protocol_error(
        &s,
        b"*1\r\n$1073741824\r\n",
        "ERR Protocol error: invalid bulk length",
    );
    assert_protocol_error(
        &s,
        &vec![b'x'; 70 * 1024],
        "ERR Protocol error: too big inline request",
    );
    assert_protocol_error(
        &s,
        b"*1\r\nfoo\r\n",
        "ERR Protocol error: expected '$', got 'f'",
    );
    assert_protocol_error(
        &s,
        b"GET \"a\r\n",
        "ERR Protocol error: unbalanced quotes in request",
    );
    // Replies to the commands before the bad one are sent first.
    let mut r = s.raw();
    r.send(b"PING\r\n*1\r\n$-5\r\n");
    assert_eq!(r.read(), pong());
    assert_eq!(r.read(), err("ERR Protocol error: invalid bulk length"));
    assert!(r.closed());
}

#[test]
fn negative_multibulk_count_is_an_empty_command_as_in_redis() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.send(b"*-10\r\n*0\r\n*1\r\n$4\r\nPING\r\n");
    assert_eq!(r.read(), pong());
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |p| p * 4096)
}

#[test]
fn a_client_that_never_reads_cannot_grow_server_memory() {
    let s = TestServer::start();
    let mut r = s.raw();
    let value = "v".repeat(256 * 1024);
    assert_eq!(r.cmd(&["SET", "big", &value]), ok());
    let before = rss_bytes();
    // 8000 GETs would be 2 GB of replies; the client reads none of them.
    let mut flood = std::net::TcpStream::connect(s.addr()).unwrap();
    flood
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut cmds = Vec::new();
    for _ in 0..8000 {
        basalt_resp::write_command(&mut cmds, [&b"GET"[..], b"big"]);
    }
    // The server stops reading once its output is stuck, so this write may
    // itself time out; either way it must not take the server down.
    let _ = flood.write_all(&cmds);
    std::thread::sleep(Duration::from_millis(300));
    let grown = rss_bytes().saturating_sub(before);
    assert!(
        grown < 400 << 20,
        "server memory grew by {} MB",
        grown >> 20
    );
    // Everyone else is still served.
    assert_eq!(r.cmd(&["PING"]), pong());
    // Reading a little unblocks the flooder's connection, which still works.
    let mut chunk = vec![0u8; 1 << 20];
    flood
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert!(flood.read(&mut chunk).unwrap() > 0);
}

#[test]
fn redis_cli_works_if_installed() {
    let Ok(out) = std::process::Command::new("redis-cli")
        .arg("--version")
        .output()
    else {
        eprintln!("redis-cli not installed; skipping");
        return;
    };
    if !out.status.success() {
        return;
    }
    let s = TestServer::start();
    let port = s.addr().port().to_string();
    let run = |args: &[&str]| {
        let o = std::process::Command::new("redis-cli")
            .args(["-p", &port])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8(o.stdout).unwrap()
    };
    assert_eq!(run(&["SET", "cli", "value with spaces"]), "OK\n");
    assert_eq!(run(&["GET", "cli"]), "value with spaces\n");
    assert_eq!(run(&["INCR", "n"]), "1\n");
    // Interactive mode sends what a person types.
    let mut child = std::process::Command::new("redis-cli")
        .args(["-p", &port])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"PING\nGET cli\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("PONG") && text.contains("value with spaces"),
        "{text}"
    );
}
