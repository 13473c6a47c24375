//! Lua scripting through real connections: EVAL and friends, SCRIPT,
//! FUNCTION and FCALL with Redis 7.0's replies and errors, the conversions
//! between Lua and RESP both ways, the sandbox, isolation, BUSY and SCRIPT
//! KILL, and functions and script batches across kill -9 (the real binary).
//! Every loop is bounded in count and time.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use basalt_resp::Frame;
use common::binary::{Conn, Server};
use common::{bulk, err, eventually, ok, TestServer};

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn arr(items: Vec<Frame>) -> Frame {
    Frame::Array(items)
}

fn simple(s: &str) -> Frame {
    Frame::Simple(s.as_bytes().to_vec())
}

/// Every string of a reply, joined by spaces.
fn flatten(f: &Frame) -> String {
    match f {
        Frame::Bulk(b) | Frame::Simple(b) => String::from_utf8_lossy(b).into_owned(),
        Frame::Array(items) | Frame::Set(items) => {
            items.iter().map(flatten).collect::<Vec<_>>().join(" ")
        }
        Frame::Map(pairs) => pairs
            .iter()
            .map(|(k, v)| format!("{} {}", flatten(k), flatten(v)))
            .collect::<Vec<_>>()
            .join(" "),
        other => format!("{other:?}"),
    }
}

/// The SHA1 EVAL names a script by.
fn sha(body: &str) -> String {
    basalt_server::script::sha1_hex(body.as_bytes())
}

/// An error raised at line 1 of `body`, as Redis 7.0 words it.
fn raised(msg: &str, body: &str) -> Frame {
    err(&format!("{msg} script: {}, on @user_script:1.", sha(body)))
}

#[test]
fn lua_values_convert_to_resp_as_in_redis() {
    let s = TestServer::start();
    let mut r = s.raw();
    let eval = |r: &mut common::Raw, body: &str| r.cmd(&["EVAL", body, "0"]);
    assert_eq!(eval(&mut r, "return 42"), int(42));
    assert_eq!(eval(&mut r, "return 3.99"), int(3), "numbers truncate");
    assert_eq!(eval(&mut r, "return -3.99"), int(-3));
    assert_eq!(eval(&mut r, "return 'hi'"), bulk("hi"));
    assert_eq!(eval(&mut r, "return true"), int(1));
    assert_eq!(eval(&mut r, "return false"), Frame::NullBulk);
    assert_eq!(eval(&mut r, "return nil"), Frame::NullBulk);
    assert_eq!(
        eval(&mut r, "return {1, 'two', {3, 'four'}, 5.5, nil, 6}"),
        arr(vec![
            int(1),
            bulk("two"),
            arr(vec![int(3), bulk("four")]),
            int(5)
        ]),
        "an array stops at the first nil"
    );
    assert_eq!(eval(&mut r, "return {ok = 'FINE'}"), simple("FINE"));
    assert_eq!(
        eval(&mut r, "return redis.status_reply('DONE')"),
        simple("DONE")
    );
    assert_eq!(eval(&mut r, "return {err = 'MYERR bad'}"), err("MYERR bad"));
    assert_eq!(
        eval(&mut r, "return redis.error_reply('My Error')"),
        err("My Error")
    );
    assert_eq!(eval(&mut r, "return {}"), arr(vec![]));
    // KEYS and ARGV.
    assert_eq!(
        r.cmd(&[
            "EVAL",
            "return {KEYS[1], KEYS[2], ARGV[1], #ARGV}",
            "2",
            "k1",
            "k2",
            "a1",
            "a2"
        ]),
        arr(vec![bulk("k1"), bulk("k2"), bulk("a1"), int(2)])
    );
    // RESP3 types after redis.setresp(3) reach a RESP3 client as such.
    r.cmd(&["HELLO", "3"]);
    assert_eq!(
        eval(&mut r, "redis.setresp(3) return {double = 1.5}"),
        Frame::Double(1.5)
    );
    assert_eq!(
        eval(&mut r, "redis.setresp(3) return true"),
        Frame::Boolean(true)
    );
    assert_eq!(
        eval(&mut r, "return {map = {a = 1}}"),
        Frame::Map(vec![(bulk("a"), int(1))])
    );
    assert_eq!(eval(&mut r, "return nil"), Frame::Null);
}

#[test]
fn command_replies_convert_to_lua_as_in_redis() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["HSET", "h", "f", "v"]);
    r.cmd(&["SET", "n", "7"]);
    let eval = |r: &mut common::Raw, body: &str| r.cmd(&["EVAL", body, "0"]);
    assert_eq!(eval(&mut r, "return redis.call('incr', 'n')"), int(8));
    assert_eq!(
        eval(&mut r, "return type(redis.call('get', 'missing'))"),
        bulk("boolean"),
        "a null bulk is false"
    );
    assert_eq!(
        eval(&mut r, "return redis.call('ping').ok"),
        bulk("PONG"),
        "a status is an ok table"
    );
    assert_eq!(
        eval(&mut r, "return redis.call('hgetall', 'h')"),
        arr(vec![bulk("f"), bulk("v")])
    );
    // With RESP3 the map arrives as {map = {...}}; a missing key is nil.
    assert_eq!(
        eval(
            &mut r,
            "redis.setresp(3) local m = redis.call('hgetall', 'h') return m.map.f"
        ),
        bulk("v")
    );
    assert_eq!(
        eval(
            &mut r,
            "redis.setresp(3) return type(redis.call('get', 'missing'))"
        ),
        bulk("nil")
    );
    assert_eq!(
        eval(&mut r, "return redis.call('set', 'x', 3.5)"),
        ok(),
        "numbers are passed as their shortest text"
    );
    assert_eq!(r.cmd(&["GET", "x"]), bulk("3.5"));
}

#[test]
fn errors_from_commands_raise_and_pcall_returns_them() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["SET", "str", "x"]);
    let body = "return redis.call('lpush', 'str', 'a')";
    assert_eq!(
        r.cmd(&["EVAL", body, "0"]),
        raised(
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            body
        )
    );
    let body = "return redis.pcall('lpush', 'str', 'a')";
    assert_eq!(
        r.cmd(&["EVAL", body, "0"]),
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    let body = "local e = redis.pcall('incr') return e.err";
    assert_eq!(
        r.cmd(&["EVAL", body, "0"]),
        bulk("ERR Wrong number of args calling Redis command from script")
    );
    for (body, msg) in [
        (
            "return redis.call('nosuch')",
            "ERR Unknown Redis command called from script",
        ),
        (
            "return redis.call('multi')",
            "ERR This Redis command is not allowed from script",
        ),
        (
            "return redis.call('eval', 'return 1', '0')",
            "ERR This Redis command is not allowed from script",
        ),
        (
            "return redis.call('get', {})",
            "ERR Lua redis lib command arguments must be strings or integers",
        ),
        ("error('boom')", "ERR user_script:1: boom"),
        ("error({err = 'CUSTOM failure'})", "CUSTOM failure"),
        (
            "return redis.setresp(4)",
            "ERR RESP version must be 2 or 3.",
        ),
    ] {
        assert_eq!(r.cmd(&["EVAL", body, "0"]), raised(msg, body), "{body}");
    }
    assert_eq!(
        r.cmd(&["EVAL", "return (", "0"]),
        err("ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'")
    );
    // A failed script leaves the server serving.
    assert_eq!(r.cmd(&["PING"]), simple("PONG"));
}

#[test]
fn eval_argument_errors_and_the_script_cache() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(
        r.cmd(&["EVAL", "return 1", "-1"]),
        err("ERR Number of keys can't be negative")
    );
    assert_eq!(
        r.cmd(&["EVAL", "return 1", "2", "a"]),
        err("ERR Number of keys can't be greater than number of args")
    );
    assert_eq!(
        r.cmd(&["EVAL", "return 1", "x"]),
        err("ERR value is not an integer or out of range")
    );
    let noscript = err("NOSCRIPT No matching script. Please use EVAL.");
    let body = "return ARGV[1]";
    let id = sha(body);
    assert_eq!(r.cmd(&["EVALSHA", &id, "0", "x"]), noscript);
    assert_eq!(r.cmd(&["SCRIPT", "LOAD", body]), bulk(&id));
    assert_eq!(r.cmd(&["EVALSHA", &id, "0", "x"]), bulk("x"));
    assert_eq!(
        r.cmd(&["EVALSHA", &id.to_uppercase(), "0", "y"]),
        bulk("y"),
        "SHAs are case-insensitive"
    );
    assert_eq!(r.cmd(&["EVALSHA", &id[..39], "0"]), noscript);
    assert_eq!(
        r.cmd(&[
            "SCRIPT",
            "EXISTS",
            &id,
            "0000000000000000000000000000000000000000"
        ]),
        arr(vec![int(1), int(0)])
    );
    // EVAL caches too.
    assert_eq!(r.cmd(&["EVAL", "return 2", "0"]), int(2));
    assert_eq!(r.cmd(&["EVALSHA", &sha("return 2"), "0"]), int(2));
    assert_eq!(r.cmd(&["SCRIPT", "FLUSH"]), ok());
    assert_eq!(r.cmd(&["EVALSHA", &id, "0", "x"]), noscript);
    assert_eq!(
        r.cmd(&["SCRIPT", "KILL"]),
        err("NOTBUSY No scripts in execution right now.")
    );
    assert_eq!(
        r.cmd(&["SCRIPT", "FLUSH", "NOW"]),
        err("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
    );
    assert_eq!(
        r.cmd(&["COMMAND", "GETKEYS", "EVAL", "return 1", "2", "a", "b", "c"]),
        arr(vec![bulk("a"), bulk("b")])
    );
    assert_eq!(
        r.cmd(&["COMMAND", "GETKEYS", "FCALL", "f", "1", "k", "v"]),
        arr(vec![bulk("k")])
    );
}

#[test]
fn the_sandbox_refuses_globals_system_libraries_and_changes_to_tables() {
    let s = TestServer::start();
    let mut r = s.raw();
    let readonly = "Attempt to modify a readonly table";
    for (body, msg) in [
        ("x = 1", format!("ERR user_script:1: {readonly}")),
        ("redis.call = nil", format!("ERR user_script:1: {readonly}")),
        ("string.upper = nil", format!("ERR user_script:1: {readonly}")),
        ("_G.y = 2", format!("ERR user_script:1: {readonly}")),
        ("rawset(_G, 'z', 1)", format!("ERR {readonly}")),
        ("setmetatable(_G, nil)", format!("ERR {readonly}")),
        ("table.insert(_G, 1)", format!("ERR {readonly}")),
        (
            "return undefined_thing",
            "ERR user_script:1: Script attempted to access nonexistent global variable 'undefined_thing'".into(),
        ),
    ] {
        assert_eq!(r.cmd(&["EVAL", body, "0"]), raised(&msg, body), "{body}");
    }
    for lib in [
        "os", "io", "debug", "dofile", "loadfile", "print", "require", "setfenv", "getfenv",
    ] {
        let body = format!("return {lib}");
        assert_eq!(
            r.cmd(&["EVAL", &body, "0"]),
            raised(
                &format!("ERR user_script:1: Script attempted to access nonexistent global variable '{lib}'"),
                &body
            ),
            "{lib} is not available"
        );
    }
    // Code loaded at run time is sandboxed too.
    let body = "local f = loadstring('q = 1') f()";
    assert_eq!(
        r.cmd(&["EVAL", body, "0"]),
        err(&format!(
            "ERR [string \"q = 1\"]:1: {readonly} script: {}, on q = 1:1.",
            sha(body)
        ))
    );
    // Nothing a script tried leaked into the next one.
    assert_eq!(
        r.cmd(&[
            "EVAL",
            "return {type(rawget(_G, 'x')), type(string.upper)}",
            "0"
        ]),
        arr(vec![bulk("nil"), bulk("function")])
    );
    assert_eq!(
        r.cmd(&["EVAL", "return redis.sha1hex('')", "0"]),
        bulk("da39a3ee5e6b4b0d3255bfef95601890afd80709")
    );
    assert_eq!(r.cmd(&["EVAL", "return _VERSION", "0"]), bulk("Lua 5.1"));
}

#[test]
fn read_only_scripts_and_functions_refuse_writes() {
    let s = TestServer::start();
    let mut r = s.raw();
    let body = "return redis.call('set', 'k', 'v')";
    assert_eq!(
        r.cmd(&["EVAL_RO", body, "0"]),
        raised(
            "ERR Write commands are not allowed from read-only scripts.",
            body
        )
    );
    assert_eq!(r.cmd(&["EXISTS", "k"]), int(0));
    r.cmd(&["SET", "k", "v"]);
    assert_eq!(
        r.cmd(&["EVAL_RO", "return redis.call('get', KEYS[1])", "1", "k"]),
        bulk("v")
    );
    let body = "#!lua flags=no-writes\nreturn redis.call('del', 'k')";
    assert_eq!(
        r.cmd(&["EVAL", body, "0"]),
        err(&format!(
            "ERR Write commands are not allowed from read-only scripts. script: {}, on @user_script:2.",
            sha(body)
        ))
    );
    let body = "#!lua\nreturn redis.call('del', 'k')";
    assert_eq!(
        r.cmd(&["EVAL_RO", body, "0"]),
        err("ERR Can not execute a script with write flag using *_ro command.")
    );
    assert_eq!(
        r.cmd(&["EVAL", "#!lua flags=bogus\nreturn 1", "0"]),
        err("ERR Unexpected flag in script shebang: bogus")
    );
    assert_eq!(r.cmd(&["EVAL", body, "0"]), int(1));
}

const LIB: &str = "#!lua name=mylib
local function set(keys, args) return redis.call('set', keys[1], args[1]) end
redis.register_function('myset', set)
redis.register_function{function_name = 'myget', callback = function(keys) return redis.call('get', keys[1]) end,
  flags = {'no-writes'}, description = 'reads a key'}";

#[test]
fn functions_load_list_call_delete_dump_and_restore() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["FUNCTION", "LOAD", LIB]), bulk("mylib"));
    assert_eq!(
        r.cmd(&["FUNCTION", "LOAD", LIB]),
        err("ERR Library 'mylib' already exists")
    );
    assert_eq!(r.cmd(&["FUNCTION", "LOAD", "REPLACE", LIB]), bulk("mylib"));
    assert_eq!(r.cmd(&["FCALL", "myset", "1", "k", "v"]), ok());
    assert_eq!(r.cmd(&["FCALL_RO", "myget", "1", "k"]), bulk("v"));
    assert_eq!(
        r.cmd(&["FCALL_RO", "myset", "1", "k", "v"]),
        err("ERR Can not execute a script with write flag using *_ro command.")
    );
    assert_eq!(
        r.cmd(&["FCALL", "nosuch", "0"]),
        err("ERR Function not found")
    );
    for (code, msg) in [
        ("return 1", "ERR Missing library metadata"),
        ("#!lua\nreturn 1", "ERR Library name was not given"),
        ("#!js name=x\nreturn 1", "ERR Engine 'js' not found"),
        ("#!lua name=x\nreturn 1", "ERR No functions registered"),
        (
            "#!lua name=x\nredis.register_function('myset', function() end)",
            "ERR Function myset already exists",
        ),
        (
            "#!lua name=x\nredis.register_function{function_name='f', callback=function() end, flags={'bad'}}",
            "ERR Error registering functions: ERR unknown flag given",
        ),
        (
            "#!lua name=x\nredis.call('ping')",
            "ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'call'",
        ),
    ] {
        assert_eq!(r.cmd(&["FUNCTION", "LOAD", code]), err(msg), "{code}");
    }
    let listed = r.cmd(&["FUNCTION", "LIST", "WITHCODE"]);
    let Frame::Array(libs) = listed else {
        panic!("{listed:?}")
    };
    assert_eq!(libs.len(), 1);
    let text = flatten(&libs[0]);
    for part in [
        "mylib",
        "myset",
        "myget",
        "reads a key",
        "no-writes",
        "library_code",
    ] {
        assert!(text.contains(part), "{part} in {text}");
    }
    let Frame::Bulk(dump) = r.cmd(&["FUNCTION", "DUMP"]) else {
        panic!("DUMP is a bulk string")
    };
    assert_eq!(r.cmd(&["FUNCTION", "FLUSH"]), ok());
    assert_eq!(
        r.cmd(&["FCALL", "myget", "1", "k"]),
        err("ERR Function not found")
    );
    let mut raw_restore = Vec::new();
    basalt_resp::write_command(
        &mut raw_restore,
        [&b"FUNCTION"[..], b"RESTORE", &dump].iter().copied(),
    );
    r.send(&raw_restore);
    assert_eq!(r.read(), ok());
    assert_eq!(r.cmd(&["FCALL", "myget", "1", "k"]), bulk("v"));
    assert_eq!(
        r.cmd(&["FUNCTION", "RESTORE", "garbage"]),
        err("ERR DUMP payload version or checksum are wrong")
    );
    assert_eq!(r.cmd(&["FUNCTION", "DELETE", "mylib"]), ok());
    assert_eq!(
        r.cmd(&["FUNCTION", "DELETE", "mylib"]),
        err("ERR Library not found")
    );
    assert_eq!(r.cmd(&["FUNCTION", "LIST"]), arr(vec![]));
}

#[test]
fn commands_run_by_scripts_notify_and_wake_blocked_clients() {
    let s = TestServer::start();
    let mut sub = s.raw();
    let mut r = s.raw();
    r.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]);
    sub.cmd(&["SUBSCRIBE", "__keyspace@0__:q"]);
    let mut blocked = s.raw();
    blocked.send_cmd(&[b"BLPOP", b"q", b"5"]);
    s.wait_blocked(1);
    assert_eq!(
        r.cmd(&[
            "EVAL",
            "return redis.call('rpush', KEYS[1], 'job')",
            "1",
            "q"
        ]),
        int(1)
    );
    assert_eq!(blocked.read(), arr(vec![bulk("q"), bulk("job")]));
    let event = sub.read();
    assert_eq!(
        event,
        arr(vec![
            bulk("message"),
            bulk("__keyspace@0__:q"),
            bulk("rpush")
        ])
    );
    // A blocking command inside a script answers at once (BLPOP itself is
    // refused from scripts, as in Redis 7.0; BLMPOP is allowed).
    assert_eq!(
        r.cmd(&[
            "EVAL",
            "return redis.call('blmpop', 0, 1, 'empty', 'LEFT')",
            "0"
        ]),
        Frame::NullBulk
    );
}

#[test]
fn a_script_may_not_ask_xread_or_xreadgroup_to_block() {
    // Redis 7.0 refuses the BLOCK option from scripts outright (whatever
    // the timeout, before reading it), naming the command as the script
    // wrote it; pcall hands the error back as a table.
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["XADD", "x", "1-1", "f", "v"]);
    r.cmd(&["XGROUP", "CREATE", "x", "g", "0"]);
    for (body, name) in [
        ("return redis.call('xread', 'BLOCK', '0', 'STREAMS', 'x', '$')", "xread"),
        ("return redis.call('XREAD', 'BLOCK', 'soon', 'STREAMS', 'x', '0')", "XREAD"),
        (
            "return redis.call('XREADGROUP', 'GROUP', 'g', 'c', 'BLOCK', '10', 'STREAMS', 'x', '>')",
            "XREADGROUP",
        ),
    ] {
        assert_eq!(
            r.cmd(&["EVAL", body, "0"]),
            raised(
                &format!("ERR {name} command is not allowed with BLOCK option from scripts"),
                body
            )
        );
    }
    let body = "return redis.pcall('xread', 'BLOCK', '0', 'STREAMS', 'x', '0')";
    assert_eq!(
        r.cmd(&["EVAL", body, "0"]),
        err("ERR xread command is not allowed with BLOCK option from scripts")
    );
    // An option before BLOCK is still checked first; without BLOCK the
    // reads answer; the group's last id did not move.
    assert_eq!(
        r.cmd(&[
            "EVAL",
            "return redis.pcall('xread', 'COUNT', 'x', 'BLOCK', '0', 'STREAMS', 'x', '0')",
            "0"
        ]),
        err("ERR value is not an integer or out of range")
    );
    let read = r.cmd(&[
        "EVAL",
        "return redis.call('xread', 'STREAMS', 'x', '0')",
        "0",
    ]);
    assert!(flatten(&read).contains("1-1"), "{read:?}");
    let pending = r.cmd(&["XPENDING", "x", "g"]);
    assert_eq!(
        flatten(&pending),
        flatten(&arr(vec![
            int(0),
            Frame::NullBulk,
            Frame::NullBulk,
            Frame::NullArray
        ]))
    );
}

/// INFO's `rdb_changes_since_last_save`.
fn changes(r: &mut common::Raw) -> i64 {
    let info = r.cmd_text(&["INFO", "persistence"]);
    info.lines()
        .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("rdb_changes_since_last_save in INFO")
}

#[test]
fn scripts_queued_in_multi_run_inside_exec_and_count_as_writes() {
    let s = TestServer::start();
    let mut r = s.raw();
    let before = changes(&mut r);
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(
        r.cmd(&[
            "EVAL",
            "return redis.call('set', KEYS[1], ARGV[1])",
            "1",
            "k",
            "v"
        ]),
        simple("QUEUED")
    );
    assert_eq!(
        r.cmd(&["EVAL", "return redis.call('get', KEYS[1])", "1", "k"]),
        simple("QUEUED")
    );
    assert_eq!(r.cmd(&["EXEC"]), arr(vec![ok(), bulk("v")]));
    assert_eq!(
        changes(&mut r),
        before + 1,
        "the writing script counts, the reading one not"
    );
    assert_eq!(
        r.cmd(&["EVAL", "return redis.call('incr', 'n')", "0"]),
        int(1)
    );
    assert_eq!(changes(&mut r), before + 2);
    assert_eq!(
        r.cmd(&["EVAL", "return redis.call('get', 'n')", "0"]),
        bulk("1")
    );
    assert_eq!(changes(&mut r), before + 2);
}

#[test]
fn a_pipeline_of_scripts_and_commands_replies_in_order() {
    let s = TestServer::start();
    let mut r = s.raw();
    let mut wire = Vec::new();
    for i in 0..300 {
        let n = i.to_string();
        basalt_resp::write_command(
            &mut wire,
            [
                &b"EVAL"[..],
                b"return redis.call('rpush', KEYS[1], ARGV[1])",
                b"1",
                b"l",
                n.as_bytes(),
            ]
            .iter()
            .copied(),
        );
        if i % 7 == 0 {
            basalt_resp::write_command(&mut wire, [&b"LLEN"[..], b"l"].iter().copied());
        }
    }
    r.send(&wire);
    for i in 0..300 {
        assert_eq!(r.read(), int(i + 1), "EVAL {i}");
        if i % 7 == 0 {
            assert_eq!(r.read(), int(i + 1), "LLEN after EVAL {i}");
        }
    }
}

#[test]
fn a_script_runs_isolated_from_other_clients() {
    let s = TestServer::start();
    let mut setup = s.raw();
    setup.cmd(&["MSET", "a", "0", "b", "0"]);
    let stop = Arc::new(AtomicBool::new(false));
    let addr = s.addr();
    let reader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut r = common::Raw::connect(addr);
            let mut reads = 0;
            let deadline = Instant::now() + Duration::from_secs(20);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let Frame::Array(v) = r.cmd(&["MGET", "a", "b"]) else {
                    panic!("MGET")
                };
                assert_eq!(v[0], v[1], "a reader saw half a script");
                reads += 1;
            }
            reads
        })
    };
    let mut w = s.raw();
    let body = "for i = 1, 50 do redis.call('incr', 'a') redis.call('incr', 'b') end return redis.call('get', 'a')";
    for round in 1..=40 {
        assert_eq!(w.cmd(&["EVAL", body, "0"]), bulk(&(round * 50).to_string()));
    }
    stop.store(true, Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
}

/// A WAIT whose timeout passes while a long script holds the server is
/// answered BUSY, and is no longer blocked: the client's next blocking
/// command blocks afresh (on its own keys, woken by a push), and INFO's
/// blocked clients come back to 0.
#[test]
fn a_wait_refused_busy_leaves_its_client_unblocked() {
    let s = TestServer::start();
    let mut admin = s.raw();
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "busy-reply-threshold", "50"]),
        ok()
    );
    let mut waiter = s.raw();
    waiter.send_cmd(&[b"WAIT", b"1", b"1000"]);
    s.wait_blocked(1);
    let body = "while true do end";
    let mut runner = s.raw();
    runner.send_cmd(&[b"EVAL", body.as_bytes(), b"0"]);
    let busy = err(
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
    );
    // Busy well before the WAIT's second is up.
    assert!(eventually(Duration::from_millis(900), || {
        admin.cmd(&["PING"]) == busy
    }));
    assert_eq!(
        waiter.read(),
        busy,
        "the timed-out WAIT ran again while busy"
    );
    assert_eq!(s.blocked_clients(), 0);
    assert_eq!(admin.cmd(&["SCRIPT", "KILL"]), ok());
    assert_eq!(
        runner.read(),
        raised("ERR Script killed by user with SCRIPT KILL...", body)
    );
    waiter.send_cmd(&[b"BLPOP", b"q", b"5"]);
    s.wait_blocked(1);
    assert_eq!(admin.cmd(&["RPUSH", "q", "x"]), Frame::Integer(1));
    assert_eq!(
        waiter.read(),
        Frame::Array(vec![bulk("q"), bulk("x")]),
        "a fresh block on its own key"
    );
    s.wait_blocked(0);
}

#[test]
fn a_long_script_gets_busy_replies_and_script_kill_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = basalt_server::Config::ephemeral(dir.path());
    config.http_port = Some(0);
    let s = TestServer::start_with(config, dir);
    let http = s.handle.as_ref().unwrap().http_addr().unwrap();
    let mut admin = s.raw();
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "busy-reply-threshold", "100"]),
        ok()
    );
    assert_eq!(
        admin.cmd(&["CONFIG", "GET", "lua-time-limit"]),
        arr(vec![bulk("lua-time-limit"), bulk("100")])
    );
    let body = "while true do end";
    let mut runner = s.raw();
    runner.send_cmd(&[b"EVAL", body.as_bytes(), b"0"]);
    let busy = err(
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
    );
    let mut other = s.raw();
    assert!(
        eventually(Duration::from_secs(10), || other.cmd(&["GET", "x"]) == busy),
        "other clients get BUSY"
    );
    assert_eq!(
        other.cmd(&["FUNCTION", "KILL"]),
        busy,
        "FUNCTION KILL does not stop an EVAL"
    );
    // The HTTP API answers 503 BUSY too.
    let status = http_status(http, "/v1/keys/x");
    assert!(status.contains(" 503 "), "{status}");
    assert_eq!(other.cmd(&["SCRIPT", "KILL"]), ok());
    assert_eq!(
        runner.read(),
        raised("ERR Script killed by user with SCRIPT KILL...", body)
    );
    assert_eq!(other.cmd(&["SET", "x", "1"]), ok(), "serving again");
    // A script cannot catch its kill with pcall and loop on.
    let body =
        "while true do pcall(function() local i = 0 while i < 1000000 do i = i + 1 end end) end";
    runner.send_cmd(&[b"EVAL", body.as_bytes(), b"0"]);
    assert!(eventually(Duration::from_secs(10), || other.cmd(&["PING"]) == busy));
    assert_eq!(other.cmd(&["SCRIPT", "KILL"]), ok());
    assert_eq!(
        runner.read(),
        raised("ERR Script killed by user with SCRIPT KILL...", body)
    );
    // A script that wrote cannot be killed; it finishes on its own.
    let body = "redis.call('set', 'w', '1') local t = redis.call('time') \
        local stop = t[1] * 1000000 + t[2] + 600000 \
        local i = 0 \
        while true do i = i + 1 if i % 100000 == 0 then \
        local n = redis.call('time') if n[1] * 1000000 + n[2] > stop then return i end end end";
    runner.send_cmd(&[b"EVAL", body.as_bytes(), b"0"]);
    assert!(eventually(Duration::from_secs(10), || other.cmd(&["PING"]) == busy));
    assert_eq!(
        other.cmd(&["SCRIPT", "KILL"]),
        err("UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.")
    );
    assert!(matches!(runner.read(), Frame::Integer(n) if n > 0));
    assert_eq!(other.cmd(&["GET", "w"]), bulk("1"));
}

/// The status line of `GET path` on the HTTP API.
fn http_status(addr: std::net::SocketAddr, path: &str) -> String {
    use std::io::{BufRead, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(s).read_line(&mut line).unwrap();
    line
}

/// Waits until `c` answers BUSY (a script has run past the threshold).
fn wait_busy(c: &mut Conn) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match c.cmd(&[b"PING"]).unwrap() {
            Frame::Error(e) if e.starts_with(b"BUSY") => return,
            _ => {}
        }
        assert!(Instant::now() < deadline, "the script never got busy");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn functions_survive_kill_9_and_a_killed_scripts_writes_vanish_whole() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "everysec", "1048576");
    let mut c = Conn::connect(server.addr).unwrap();
    assert_eq!(
        c.cmd(&[b"FUNCTION", b"LOAD", LIB.as_bytes()]).unwrap(),
        bulk("mylib")
    );
    assert_eq!(c.cmd(&[b"SET", b"before", b"1"]).unwrap(), ok());
    c.cmd(&[b"CONFIG", b"SET", b"busy-reply-threshold", b"50"])
        .unwrap();
    // A script writes 200 keys and then never ends; it is killed -9 while
    // it runs: none of its writes may survive, everything acknowledged
    // before must.
    let mut runner = Conn::connect(server.addr).unwrap();
    let body = b"for i = 1, 200 do redis.call('set', 'k' .. i, i) end while true do end";
    let mut wire = Vec::new();
    basalt_resp::write_command(&mut wire, [&b"EVAL"[..], body, b"0"].iter().copied());
    std::io::Write::write_all(runner.stream_mut(), &wire).unwrap();
    let mut other = Conn::connect(server.addr).unwrap();
    wait_busy(&mut other);
    server.kill();
    let server = Server::start(dir.path(), "everysec", "1048576");
    let mut c = Conn::connect(server.addr).unwrap();
    assert_eq!(c.cmd(&[b"GET", b"before"]).unwrap(), bulk("1"));
    assert_eq!(
        c.cmd(&[b"DBSIZE"]).unwrap(),
        int(1),
        "no key of the torn script"
    );
    assert_eq!(
        c.cmd(&[b"FCALL", b"myset", b"1", b"k", b"v"]).unwrap(),
        ok(),
        "the library came back"
    );
    assert_eq!(
        c.cmd(&[b"FCALL_RO", b"myget", b"1", b"k"]).unwrap(),
        bulk("v")
    );
}

#[test]
fn shutdown_nosave_stops_the_server_while_a_script_is_busy() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "everysec", "1048576");
    let mut c = Conn::connect(server.addr).unwrap();
    c.cmd(&[b"CONFIG", b"SET", b"busy-reply-threshold", b"50"])
        .unwrap();
    let mut runner = Conn::connect(server.addr).unwrap();
    let mut wire = Vec::new();
    basalt_resp::write_command(
        &mut wire,
        [
            &b"EVAL"[..],
            b"redis.call('set', 'half', '1') while true do end",
            b"0",
        ]
        .iter()
        .copied(),
    );
    std::io::Write::write_all(runner.stream_mut(), &wire).unwrap();
    wait_busy(&mut c);
    assert!(
        c.cmd(&[b"SHUTDOWN", b"NOSAVE"]).is_err(),
        "the connection closes without a reply"
    );
    let addr = server.addr;
    assert!(
        eventually(Duration::from_secs(10), || Conn::connect(addr).is_err()),
        "the server stopped"
    );
    drop(server);
    let server = Server::start(dir.path(), "everysec", "1048576");
    let mut c = Conn::connect(server.addr).unwrap();
    assert_eq!(c.cmd(&[b"EXISTS", b"half"]).unwrap(), int(0));
}
