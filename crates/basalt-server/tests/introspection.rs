//! SLOWLOG, LATENCY, MEMORY STATS / MALLOC-STATS / DOCTOR, LOLWUT,
//! COMMAND GETKEYSANDFLAGS / LIST / DOCS and the subcommand rows of
//! COMMAND, INFO commandstats and LATENCY HISTOGRAM through a real server,
//! with raw RESP where Redis 7.0's exact reply shape matters.

use crate::common;

use basalt_resp::Frame;
use common::{bulk, err, ok, Raw, TestServer};

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn simple(s: &str) -> Frame {
    Frame::Simple(s.as_bytes().to_vec())
}

fn array(f: Frame) -> Vec<Frame> {
    match f {
        Frame::Array(a) => a,
        f => panic!("expected an array, got {f:?}"),
    }
}

fn text(f: Frame) -> String {
    match f {
        Frame::Bulk(b) => String::from_utf8(b).unwrap(),
        Frame::Verbatim { format, text } => {
            assert_eq!(&format, b"txt");
            String::from_utf8(text).unwrap()
        }
        f => panic!("expected text, got {f:?}"),
    }
}

/// Runs a script that keeps the server busy for at least `ms` (it reads
/// TIME until that much has passed), so one command is surely slow.
fn slow_eval(r: &mut Raw, ms: u64) {
    let script = format!(
        "local t = redis.call('TIME') local s = t[1] * 1000000 + t[2] local n = s \
         repeat local x = redis.call('TIME') n = x[1] * 1000000 + x[2] until n - s > {} \
         return 1",
        ms * 1000
    );
    assert_eq!(r.cmd(&["EVAL", &script, "0"]), int(1));
}

/// The argv of a SLOWLOG GET entry.
fn entry_argv(e: &Frame) -> Vec<String> {
    let Frame::Array(fields) = e else {
        panic!("entry {e:?}")
    };
    assert_eq!(fields.len(), 6, "id, time, µs, argv, peer, name");
    array(fields[3].clone()).into_iter().map(text).collect()
}

#[test]
fn slowlog_records_every_command_at_threshold_zero_with_redis_truncation_and_redaction() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(
        r.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]),
        ok()
    );
    assert_eq!(r.cmd(&["SLOWLOG", "RESET"]), ok());
    assert_eq!(r.cmd(&["CLIENT", "SETNAME", "prober"]), ok());
    let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    let mut del = vec!["DEL"];
    del.extend(keys.iter().map(|k| k.as_str()));
    assert_eq!(r.cmd(&del), int(0));
    let long = "x".repeat(200);
    assert_eq!(r.cmd(&["SET", "big", &long]), ok());
    // Secrets never reach the log.
    r.cmd(&["AUTH", "user", "secret"]);
    r.cmd(&[
        "HELLO", "2", "AUTH", "default", "secret", "SETNAME", "prober",
    ]);
    r.cmd(&["CONFIG", "SET", "requirepass", ""]);
    let log = array(r.cmd(&["SLOWLOG", "GET", "-1"]));
    let argvs: Vec<Vec<String>> = log.iter().map(entry_argv).collect();
    // Newest first.
    assert_eq!(argvs[0], ["CONFIG", "SET", "requirepass", "(redacted)"]);
    assert_eq!(
        argvs[1],
        [
            "HELLO",
            "2",
            "AUTH",
            "(redacted)",
            "(redacted)",
            "SETNAME",
            "prober"
        ]
    );
    assert_eq!(argvs[2], ["AUTH", "(redacted)", "(redacted)"]);
    assert_eq!(
        argvs[3][2],
        format!("{}... (72 more bytes)", "x".repeat(128))
    );
    assert_eq!(argvs[4].len(), 32);
    assert_eq!(argvs[4][0], "DEL");
    assert_eq!(argvs[4][30], "k29");
    assert_eq!(argvs[4][31], "... (10 more arguments)");
    assert_eq!(argvs[5], ["CLIENT", "SETNAME", "prober"]);
    assert_eq!(argvs[6], ["SLOWLOG", "RESET"]);
    // Ids count down from the newest; each entry names the client.
    let Frame::Array(newest) = &log[0] else {
        unreachable!()
    };
    let Frame::Array(oldest) = &log[6] else {
        unreachable!()
    };
    match (&newest[0], &oldest[0]) {
        (Frame::Integer(a), Frame::Integer(b)) => assert_eq!(a - b, 6),
        other => panic!("ids {other:?}"),
    }
    let peer = r.stream.local_addr().unwrap().to_string();
    assert_eq!(newest[4], bulk(&peer));
    assert_eq!(newest[5], bulk("prober"));
    // The entry of SETNAME already carries the name; RESET's had none.
    let Frame::Array(reset) = &log[6] else {
        unreachable!()
    };
    assert_eq!(reset[5], bulk(""));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(matches!(newest[1], Frame::Integer(t) if (now - t).abs() < 60));
    // Seven entries and the GET -1 just logged; GET 0 is empty.
    assert_eq!(array(r.cmd(&["SLOWLOG", "GET"])).len(), 8);
    for i in 0..5 {
        r.cmd(&["SET", &format!("more{i}"), "v"]);
    }
    // Default count is 10.
    assert_eq!(array(r.cmd(&["SLOWLOG", "GET"])).len(), 10);
    assert_eq!(array(r.cmd(&["SLOWLOG", "GET", "0"])).len(), 0);
    assert_eq!(array(r.cmd(&["SLOWLOG", "GET", "2"])).len(), 2);
}

#[test]
fn slowlog_keeps_the_newest_max_len_entries_and_reset_empties_it() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["CONFIG", "SET", "slowlog-max-len", "3"]), ok());
    assert_eq!(
        r.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]),
        ok()
    );
    for i in 0..10 {
        r.cmd(&["SET", &format!("k{i}"), "v"]);
    }
    assert_eq!(r.cmd(&["SLOWLOG", "LEN"]), int(3));
    let log = array(r.cmd(&["SLOWLOG", "GET", "-1"]));
    // GET itself is logged after it answers; LEN is the newest here.
    let argvs: Vec<Vec<String>> = log.iter().map(entry_argv).collect();
    assert_eq!(
        argvs,
        [
            vec!["SLOWLOG", "LEN"],
            vec!["SET", "k9", "v"],
            vec!["SET", "k8", "v"]
        ]
    );
    // Lowering the length trims at once.
    assert_eq!(r.cmd(&["CONFIG", "SET", "slowlog-max-len", "1"]), ok());
    assert_eq!(r.cmd(&["SLOWLOG", "LEN"]), int(1));
    // -1 turns logging off (that CONFIG SET is already judged by it).
    assert_eq!(
        r.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "-1"]),
        ok()
    );
    assert_eq!(r.cmd(&["SLOWLOG", "RESET"]), ok());
    r.cmd(&["SET", "k", "v"]);
    assert_eq!(r.cmd(&["SLOWLOG", "LEN"]), int(0));
    assert_eq!(r.cmd(&["SLOWLOG", "GET"]), Frame::Array(vec![]));
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "slowlog*"]),
        Frame::Array(vec![
            bulk("slowlog-log-slower-than"),
            bulk("-1"),
            bulk("slowlog-max-len"),
            bulk("1"),
        ])
    );
}

#[test]
fn slowlog_logs_only_what_reaches_the_threshold_and_skips_exec_but_not_its_commands() {
    let s = TestServer::start();
    let mut r = s.raw();
    // Default threshold: 10 ms.
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "slowlog-log-slower-than"]),
        Frame::Array(vec![bulk("slowlog-log-slower-than"), bulk("10000")])
    );
    r.cmd(&["SET", "fast", "v"]);
    slow_eval(&mut r, 15);
    let log = array(r.cmd(&["SLOWLOG", "GET"]));
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(entry_argv(&log[0])[0], "EVAL");
    let Frame::Array(e) = &log[0] else {
        unreachable!()
    };
    assert!(matches!(e[2], Frame::Integer(us) if us >= 15_000), "{e:?}");
    // EXEC is skip_slowlog; the commands it runs are logged.
    assert_eq!(
        r.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]),
        ok()
    );
    assert_eq!(r.cmd(&["SLOWLOG", "RESET"]), ok());
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["INCR", "n"]), simple("QUEUED"));
    assert_eq!(r.cmd(&["EXEC"]), Frame::Array(vec![int(1)]));
    let names: Vec<String> = array(r.cmd(&["SLOWLOG", "GET"]))
        .iter()
        .map(|e| entry_argv(e)[0].to_ascii_lowercase())
        .collect();
    assert_eq!(names, ["incr", "multi", "slowlog"]);
}

#[test]
fn slowlog_and_monitor_settings_refuse_bad_values_with_redis_errors() {
    let s = TestServer::start();
    let mut r = s.raw();
    for (args, reply) in [
        (
            &["SLOWLOG", "GET", "-2"][..],
            err("ERR count should be greater than or equal to -1"),
        ),
        (
            &["SLOWLOG", "GET", "abc"],
            err("ERR count should be greater than or equal to -1"),
        ),
        (
            &["SLOWLOG", "GET", "1", "2"],
            err("ERR unknown subcommand or wrong number of arguments for 'GET'. Try SLOWLOG HELP."),
        ),
        (
            &["SLOWLOG", "LEN", "1"],
            err("ERR wrong number of arguments for 'slowlog|len' command"),
        ),
        (
            &["SLOWLOG", "FOO"],
            err("ERR unknown subcommand 'FOO'. Try SLOWLOG HELP."),
        ),
        (
            &["SLOWLOG"],
            err("ERR wrong number of arguments for 'slowlog' command"),
        ),
        (
            &["LATENCY", "HISTORY"],
            err("ERR wrong number of arguments for 'latency|history' command"),
        ),
        (
            &["LATENCY", "NOPE"],
            err("ERR unknown subcommand 'NOPE'. Try LATENCY HELP."),
        ),
        (
            &["CONFIG", "SET", "slowlog-log-slower-than", "-5"],
            err("ERR CONFIG SET failed (possibly related to argument 'slowlog-log-slower-than') - argument must be between -1 and 9223372036854775807 inclusive"),
        ),
        (
            &["CONFIG", "SET", "slowlog-max-len", "-1"],
            err("ERR CONFIG SET failed (possibly related to argument 'slowlog-max-len') - argument must be between 0 and 9223372036854775807 inclusive"),
        ),
        (
            &["CONFIG", "SET", "latency-monitor-threshold", "-1"],
            err("ERR CONFIG SET failed (possibly related to argument 'latency-monitor-threshold') - argument must be between 0 and 9223372036854775807 inclusive"),
        ),
        (
            &["CONFIG", "SET", "slowlog-max-len", "abc"],
            err("ERR CONFIG SET failed (possibly related to argument 'slowlog-max-len') - argument couldn't be parsed into an integer"),
        ),
    ] {
        assert_eq!(r.cmd(args), reply, "{args:?}");
    }
    // A refused CONFIG SET changed nothing.
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "latency-monitor-threshold"]),
        Frame::Array(vec![bulk("latency-monitor-threshold"), bulk("0")])
    );
    let help = array(r.cmd(&["SLOWLOG", "HELP"]));
    assert_eq!(
        help[0],
        simple("SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")
    );
    assert_eq!(help.len(), 12);
    assert_eq!(array(r.cmd(&["LATENCY", "HELP"])).len(), 17);
}

#[test]
fn latency_events_appear_over_the_threshold_and_reset_clears_them() {
    let s = TestServer::start();
    let mut r = s.raw();
    // Off by default: nothing is recorded.
    slow_eval(&mut r, 5);
    assert_eq!(r.cmd(&["LATENCY", "LATEST"]), Frame::Array(vec![]));
    assert!(text(r.cmd(&["LATENCY", "DOCTOR"])).contains("latency-monitor-threshold"));
    assert_eq!(
        r.cmd(&["CONFIG", "SET", "latency-monitor-threshold", "5"]),
        ok()
    );
    r.cmd(&["SET", "k", "v"]);
    slow_eval(&mut r, 12);
    let latest = array(r.cmd(&["LATENCY", "LATEST"]));
    assert_eq!(latest.len(), 1, "only the slow EVAL: {latest:?}");
    let ev = array(latest[0].clone());
    assert_eq!(ev[0], bulk("command"));
    let (Frame::Integer(time), Frame::Integer(last), Frame::Integer(max)) =
        (&ev[1], &ev[2], &ev[3])
    else {
        panic!("{ev:?}")
    };
    assert!(*last >= 12 && max >= last, "{ev:?}");
    let history = array(r.cmd(&["LATENCY", "HISTORY", "command"]));
    assert_eq!(history, vec![Frame::Array(vec![int(*time), int(*last)])]);
    assert_eq!(
        r.cmd(&["LATENCY", "HISTORY", "nosuch"]),
        Frame::Array(vec![])
    );
    let graph = text(r.cmd(&["LATENCY", "GRAPH", "command"]));
    assert!(
        graph.starts_with(&format!(
            "command - high {last} ms, low {last} ms (all time high {max} ms)\n{}\n",
            "-".repeat(80)
        )),
        "{graph}"
    );
    assert_eq!(
        r.cmd(&["LATENCY", "GRAPH", "nosuch"]),
        err("ERR No samples available for event 'nosuch'")
    );
    let doctor = text(r.cmd(&["LATENCY", "DOCTOR"]));
    assert!(doctor.contains("1. command: 1 latency spikes"), "{doctor}");
    // RESET names events (unknown ones count nothing) or clears all.
    assert_eq!(r.cmd(&["LATENCY", "RESET", "nosuch"]), int(0));
    assert_eq!(r.cmd(&["LATENCY", "RESET", "command", "nosuch"]), int(1));
    assert_eq!(r.cmd(&["LATENCY", "LATEST"]), Frame::Array(vec![]));
    slow_eval(&mut r, 6);
    assert_eq!(r.cmd(&["LATENCY", "RESET"]), int(1));
    assert_eq!(r.cmd(&["LATENCY", "RESET"]), int(0));
}

#[test]
fn latency_histogram_counts_every_call_in_redis_power_of_two_buckets() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["HELLO", "3"]);
    for _ in 0..5 {
        r.cmd(&["SET", "k", "v"]);
    }
    // RESP3: {set: {calls: 5, histogram_usec: {bucket: cumulative, ...}}}.
    let reply = r.cmd_text(&["LATENCY", "HISTOGRAM", "set", "nosuch", "get"]);
    assert!(
        reply.starts_with(
            "%1\r\n$3\r\nset\r\n%2\r\n$5\r\ncalls\r\n:5\r\n$14\r\nhistogram_usec\r\n%"
        ),
        "{reply:?}"
    );
    let Frame::Map(top) = r.cmd(&["LATENCY", "HISTOGRAM", "set"]) else {
        panic!("a map")
    };
    let Frame::Map(fields) = &top[0].1 else {
        panic!("a map")
    };
    let Frame::Map(buckets) = &fields[1].1 else {
        panic!("a map")
    };
    let labels = [1, 2, 4, 8, 16, 33, 66, 132, 264, 528, 1056, 2113];
    let mut last = 0;
    for (k, v) in buckets {
        let (Frame::Integer(k), Frame::Integer(v)) = (k, v) else {
            panic!("{k:?} {v:?}")
        };
        assert!(labels.contains(k) || *k > 2113, "bucket {k}");
        assert!(*v > last, "cumulative counts grow");
        last = *v;
    }
    assert_eq!(last, 5);
    // RESP2: the same as flat arrays; no argument = every command run.
    r.cmd(&["HELLO", "2"]);
    let all = array(r.cmd(&["LATENCY", "HISTOGRAM"]));
    let names: Vec<Frame> = all.iter().step_by(2).cloned().collect();
    assert!(names.contains(&bulk("set")) && names.contains(&bulk("hello")));
    // CONFIG RESETSTAT clears the histograms.
    assert_eq!(r.cmd(&["CONFIG", "RESETSTAT"]), ok());
    assert_eq!(
        r.cmd(&["LATENCY", "HISTOGRAM", "set"]),
        Frame::Array(vec![])
    );
}

#[test]
fn memory_stats_answers_redis_field_names_with_basalt_figures() {
    let s = TestServer::start();
    let mut r = s.raw();
    for k in ["a", "b", "c"] {
        r.cmd(&["SET", k, "v"]);
    }
    let stats = array(r.cmd(&["MEMORY", "STATS"]));
    let names: Vec<String> = stats.iter().step_by(2).cloned().map(text).collect();
    assert_eq!(
        names,
        [
            "peak.allocated",
            "total.allocated",
            "startup.allocated",
            "replication.backlog",
            "clients.slaves",
            "clients.normal",
            "cluster.links",
            "aof.buffer",
            "lua.caches",
            "functions.caches",
            "db.0",
            "overhead.total",
            "keys.count",
            "keys.bytes-per-key",
            "dataset.bytes",
            "dataset.percentage",
            "peak.percentage",
            "allocator.allocated",
            "allocator.active",
            "allocator.resident",
            "allocator-fragmentation.ratio",
            "allocator-fragmentation.bytes",
            "allocator-rss.ratio",
            "allocator-rss.bytes",
            "rss-overhead.ratio",
            "rss-overhead.bytes",
            "fragmentation",
            "fragmentation.bytes",
        ]
    );
    let value = |name: &str| stats[names.iter().position(|n| n == name).unwrap() * 2 + 1].clone();
    assert_eq!(value("keys.count"), int(3));
    let Frame::Array(db0) = value("db.0") else {
        panic!("db.0 is a map")
    };
    assert_eq!(db0[0], bulk("overhead.hashtable.main"));
    assert!(matches!(db0[1], Frame::Integer(n) if n > 0));
    assert!(matches!(value("total.allocated"), Frame::Integer(n) if n > 0));
    // Ratios are doubles: bulk strings in RESP2, `,` in RESP3.
    assert!(text(value("fragmentation")).parse::<f64>().is_ok());
    r.cmd(&["HELLO", "3"]);
    assert!(r
        .cmd_text(&["MEMORY", "STATS"])
        .contains("$13\r\nfragmentation\r\n,"));
    // MALLOC-STATS, DOCTOR and PURGE answer; extra arguments are refused.
    assert!(!text(r.cmd(&["MEMORY", "MALLOC-STATS"])).is_empty());
    assert!(!text(r.cmd(&["MEMORY", "DOCTOR"])).is_empty());
    assert_eq!(r.cmd(&["MEMORY", "PURGE"]), ok());
    assert_eq!(
        r.cmd(&["MEMORY", "DOCTOR", "x"]),
        err("ERR wrong number of arguments for 'memory|doctor' command")
    );
}

#[test]
fn lolwut_draws_basalt_art_and_its_version_line_in_redis_reply_types() {
    let s = TestServer::start();
    let mut r = s.raw();
    let art = match r.cmd(&["LOLWUT"]) {
        Frame::Bulk(b) => String::from_utf8(b).unwrap(),
        f => panic!("RESP2 LOLWUT is a bulk string, got {f:?}"),
    };
    let last = art.lines().last().unwrap();
    assert_eq!(
        last,
        format!(
            "Basalt ver. {} (Redis ver. 7.0.15 compatible)",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert!(art.lines().count() > 5);
    assert_ne!(text(r.cmd(&["LOLWUT", "VERSION", "6"])), art);
    assert_eq!(
        r.cmd(&["LOLWUT", "VERSION", "x"]),
        err("ERR value is not an integer or out of range")
    );
    r.cmd(&["HELLO", "3"]);
    assert!(matches!(r.cmd(&["LOLWUT"]), Frame::Verbatim { .. }));
}

#[test]
fn command_getkeysandflags_reports_redis_key_spec_flags() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["HELLO", "3"]);
    // Byte for byte what redis-server 7.0.15 answers.
    for (args, want) in [
        (
            &["COMMAND", "GETKEYSANDFLAGS", "LMOVE", "a", "b", "LEFT", "RIGHT"][..],
            "*2\r\n*2\r\n$1\r\na\r\n~3\r\n+RW\r\n+access\r\n+delete\r\n*2\r\n$1\r\nb\r\n~2\r\n+RW\r\n+insert\r\n",
        ),
        (
            &["COMMAND", "GETKEYSANDFLAGS", "set", "a", "b"],
            "*1\r\n*2\r\n$1\r\na\r\n~2\r\n+OW\r\n+update\r\n",
        ),
        (
            &["COMMAND", "GETKEYSANDFLAGS", "set", "a", "b", "GET"],
            "*1\r\n*2\r\n$1\r\na\r\n~3\r\n+RW\r\n+access\r\n+update\r\n",
        ),
        (
            &["COMMAND", "GETKEYSANDFLAGS", "sort", "k", "store", "d"],
            "*2\r\n*2\r\n$1\r\nk\r\n~2\r\n+RO\r\n+access\r\n*2\r\n$1\r\nd\r\n~2\r\n+OW\r\n+update\r\n",
        ),
        (
            &["COMMAND", "GETKEYSANDFLAGS", "zunionstore", "d", "2x", "a", "b"],
            "*3\r\n*2\r\n$1\r\na\r\n~0\r\n*2\r\n$1\r\nb\r\n~0\r\n*2\r\n$1\r\nd\r\n~0\r\n",
        ),
        (
            &["COMMAND", "GETKEYSANDFLAGS", "object", "encoding", "k"],
            "*1\r\n*2\r\n$1\r\nk\r\n~1\r\n+RO\r\n",
        ),
        (&["COMMAND", "GETKEYSANDFLAGS", "eval", "s", "0"], "*0\r\n"),
        (
            &["COMMAND", "GETKEYS", "xread", "streams", "a", "b", "0", "0"],
            "*2\r\n$1\r\na\r\n$1\r\nb\r\n",
        ),
        (
            &["COMMAND", "GETKEYSANDFLAGS", "ping", "x"],
            "-ERR The command has no key arguments\r\n",
        ),
        (
            &["COMMAND", "GETKEYSANDFLAGS", "nosuch", "x"],
            "-ERR Invalid command specified\r\n",
        ),
        (
            &["COMMAND", "GETKEYSANDFLAGS", "get", "a", "b"],
            "-ERR Invalid number of arguments specified for command\r\n",
        ),
        (
            &["COMMAND", "GETKEYSANDFLAGS", "get"],
            "-ERR wrong number of arguments for 'command|getkeysandflags' command\r\n",
        ),
    ] {
        assert_eq!(r.cmd_text(args), want, "{args:?}");
    }
}

#[test]
fn command_list_filters_and_docs_cover_every_command() {
    let s = TestServer::start();
    let mut r = s.raw();
    // Subcommands too, after their container, in Redis 7.0.15's order.
    assert_eq!(
        r.cmd(&["COMMAND", "LIST", "FILTERBY", "PATTERN", "slow*"]),
        Frame::Array(
            [
                "slowlog",
                "slowlog|len",
                "slowlog|reset",
                "slowlog|help",
                "slowlog|get"
            ]
            .map(bulk)
            .to_vec()
        )
    );
    let hll = array(r.cmd(&["COMMAND", "LIST", "FILTERBY", "ACLCAT", "hyperloglog"]));
    assert!(hll.contains(&bulk("pfadd")) && !hll.contains(&bulk("get")));
    assert_eq!(
        r.cmd(&["COMMAND", "LIST", "FILTERBY", "MODULE", "x"]),
        Frame::Array(vec![])
    );
    for bad in [
        &["COMMAND", "LIST", "FILTERBY", "foo", "bar"][..],
        &["COMMAND", "LIST", "foo"],
        &["COMMAND", "LIST", "FILTERBY", "PATTERN"],
    ] {
        assert_eq!(r.cmd(bad), err("ERR syntax error"), "{bad:?}");
    }
    let Frame::Integer(count) = r.cmd(&["COMMAND", "COUNT"]) else {
        panic!("count")
    };
    let list = array(r.cmd(&["COMMAND", "LIST"]));
    let top = list.iter().filter(|n| !text((*n).clone()).contains('|'));
    assert_eq!(top.count() as i64, count, "COUNT counts no subcommand");
    // DOCS: one entry per command, Redis's words for Redis's commands.
    let docs = array(r.cmd(&["COMMAND", "DOCS"]));
    assert_eq!(docs.len() as i64, 2 * count);
    let get = array(r.cmd(&["COMMAND", "DOCS", "get"]));
    let fields = array(get[1].clone());
    assert_eq!(
        &fields[..8],
        &[
            bulk("summary"),
            bulk("Get the value of a key"),
            bulk("since"),
            bulk("1.0.0"),
            bulk("group"),
            bulk("string"),
            bulk("complexity"),
            bulk("O(1)"),
        ]
    );
    assert_eq!(fields[8], bulk("arguments"));
    // COMMAND INFO agrees with the table and shows Redis's key specs.
    let info = array(r.cmd(&["COMMAND", "INFO", "slowlog", "lolwut"]));
    let slowlog = array(info[0].clone());
    assert_eq!(slowlog[1], int(-2));
    let lolwut = array(info[1].clone());
    assert_eq!(
        lolwut[2],
        Frame::Array(vec![simple("readonly"), simple("fast")])
    );
}

#[test]
fn monitoring_settings_come_from_the_start_up_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = basalt_server::Config::ephemeral(dir.path());
    config.slowlog_log_slower_than = 0;
    config.slowlog_max_len = 2;
    config.latency_monitor_threshold = 7;
    let s = TestServer::start_with(config, dir);
    let mut r = s.raw();
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "latency-monitor-threshold"]),
        Frame::Array(vec![bulk("latency-monitor-threshold"), bulk("7")])
    );
    for _ in 0..5 {
        r.cmd(&["PING"]);
    }
    assert_eq!(r.cmd(&["SLOWLOG", "LEN"]), int(2));
}

/// A RESP3 set of simple strings.
fn simple_set(names: &[&str]) -> Frame {
    Frame::Set(names.iter().map(|n| simple(n)).collect())
}

/// A RESP3 set of bulk strings.
fn bulk_set(names: &[&str]) -> Frame {
    Frame::Set(names.iter().map(|n| bulk(n)).collect())
}

/// The names of a COMMAND INFO row's subcommand rows.
fn sub_names(row: &[Frame]) -> Vec<String> {
    array(row[9].clone())
        .into_iter()
        .map(|sub| text(array(sub)[0].clone()))
        .collect()
}

// Every expected row below is what redis-server 7.0.15 answers.

#[test]
fn command_info_gives_containers_redis_rows_with_their_subcommands_rows() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["HELLO", "3"]);
    let config = array(array(r.cmd(&["COMMAND", "INFO", "config"]))[0].clone());
    // The container's own row: no flags, no keys, @slow (its subcommands
    // carry admin, noscript, ...).
    assert_eq!(
        &config[..9],
        &[
            bulk("config"),
            int(-2),
            Frame::Set(vec![]),
            int(0),
            int(0),
            int(0),
            simple_set(&["@slow"]),
            Frame::Set(vec![]),
            Frame::Set(vec![]),
        ]
    );
    // An array of rows in Redis's order; CONFIG REWRITE, which Basalt does
    // not run, is left out.
    assert_eq!(
        sub_names(&config),
        [
            "config|set",
            "config|resetstat",
            "config|get",
            "config|help"
        ]
    );
    let set = array(array(config[9].clone())[0].clone());
    assert_eq!(
        set,
        [
            bulk("config|set"),
            int(-4),
            simple_set(&["admin", "noscript", "loading", "stale"]),
            int(0),
            int(0),
            int(0),
            simple_set(&["@admin", "@slow", "@dangerous"]),
            bulk_set(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
            Frame::Set(vec![]),
            Frame::Set(vec![]),
        ]
    );
    // A subcommand by its full name, in any case: the same row.
    assert_eq!(
        r.cmd(&["COMMAND", "INFO", "CONFIG|SET"]),
        Frame::Array(vec![Frame::Array(set)])
    );
    // OBJECT's key is its subcommands', not the container's.
    let object = array(array(r.cmd(&["COMMAND", "INFO", "object"]))[0].clone());
    assert_eq!(
        &object[2..7],
        &[
            Frame::Set(vec![]),
            int(0),
            int(0),
            int(0),
            simple_set(&["@slow"])
        ]
    );
    let encoding = array(array(r.cmd(&["COMMAND", "INFO", "object|encoding"]))[0].clone());
    assert_eq!(
        &encoding[..8],
        &[
            bulk("object|encoding"),
            int(3),
            simple_set(&["readonly"]),
            int(2),
            int(2),
            int(1),
            simple_set(&["@keyspace", "@read", "@slow"]),
            bulk_set(&["nondeterministic_output"]),
        ]
    );
    let Frame::Set(specs) = &encoding[8] else {
        panic!("key specs {:?}", encoding[8])
    };
    assert_eq!(specs.len(), 1);
    // CLIENT SETINFO (Redis 7.2) runs but is not listed, as 7.0.15 has none.
    let client = array(array(r.cmd(&["COMMAND", "INFO", "client"]))[0].clone());
    let names = sub_names(&client);
    assert_eq!(names.len(), 16);
    assert!(names.contains(&"client|id".to_string()));
    assert!(!names.contains(&"client|setinfo".to_string()));
    // A command without subcommands sends an empty set.
    let get = array(array(r.cmd(&["COMMAND", "INFO", "get"]))[0].clone());
    assert_eq!(get[9], Frame::Set(vec![]));
    // Names Redis does not resolve.
    for name in [
        "config|rewrite",
        "config|nosuch",
        "get|x",
        "object|",
        "|",
        "object|freq|x",
        "client|setinfo",
    ] {
        assert_eq!(
            r.cmd(&["COMMAND", "INFO", name]),
            Frame::Array(vec![Frame::Null]),
            "{name}"
        );
    }
    // COMMAND (everything) has the same container rows.
    let all = array(r.cmd(&["COMMAND"]));
    let row = all
        .into_iter()
        .map(array)
        .find(|row| row[0] == bulk("config"))
        .unwrap();
    assert_eq!(row, config);
}

#[test]
fn command_docs_maps_each_containers_subcommands_and_answers_full_names() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["HELLO", "3"]);
    let Frame::Map(top) = r.cmd(&["COMMAND", "DOCS", "config"]) else {
        panic!("a map")
    };
    let Frame::Map(fields) = &top[0].1 else {
        panic!("a map")
    };
    let keys: Vec<String> = fields.iter().map(|(k, _)| text(k.clone())).collect();
    assert_eq!(
        keys,
        ["summary", "since", "group", "complexity", "subcommands"]
    );
    let Frame::Map(subs) = &fields[4].1 else {
        panic!("a map")
    };
    let names: Vec<String> = subs.iter().map(|(k, _)| text(k.clone())).collect();
    assert_eq!(
        names,
        [
            "config|set",
            "config|resetstat",
            "config|get",
            "config|help"
        ]
    );
    // A subcommand's docs, in the map and by its full name.
    let Frame::Map(get) = r.cmd(&["COMMAND", "DOCS", "Config|Get"]) else {
        panic!("a map")
    };
    assert_eq!(get[0].0, bulk("config|get"));
    assert_eq!(get[0].1, subs[2].1);
    let Frame::Map(get_fields) = &get[0].1 else {
        panic!("a map")
    };
    assert_eq!(
        get_fields[0],
        (
            bulk("summary"),
            bulk("Get the values of configuration parameters")
        )
    );
    assert_eq!(
        r.cmd(&["COMMAND", "DOCS", "config|rewrite", "get|x"]),
        Frame::Map(vec![])
    );
    // A command without subcommands has no `subcommands` field.
    let Frame::Map(top) = r.cmd(&["COMMAND", "DOCS", "get"]) else {
        panic!("a map")
    };
    let Frame::Map(fields) = &top[0].1 else {
        panic!("a map")
    };
    assert!(!fields.iter().any(|(k, _)| *k == bulk("subcommands")));
}

#[test]
fn command_list_names_subcommands_and_filters_them_like_redis() {
    let s = TestServer::start();
    let mut r = s.raw();
    let names = |r: &mut Raw, args: &[&str]| -> Vec<String> {
        array(r.cmd(args)).into_iter().map(text).collect()
    };
    let list = names(&mut r, &["COMMAND", "LIST"]);
    let at = list.iter().position(|n| n == "config").unwrap();
    assert_eq!(
        &list[at..at + 5],
        [
            "config",
            "config|set",
            "config|resetstat",
            "config|get",
            "config|help"
        ]
    );
    assert!(!list.contains(&"config|rewrite".to_string()));
    // Every subcommand COMMAND shows, and nothing else.
    let Frame::Array(all) = r.cmd(&["COMMAND"]) else {
        panic!("an array")
    };
    let mut want = Vec::new();
    for row in all.into_iter().map(array) {
        want.push(text(row[0].clone()));
        if matches!(row[9], Frame::Array(_)) {
            want.extend(sub_names(&row));
        }
    }
    assert_eq!(list, want);
    // PATTERN matches full names, case-insensitively.
    assert_eq!(
        names(
            &mut r,
            &["COMMAND", "LIST", "FILTERBY", "PATTERN", "CONFIG|S*"]
        ),
        ["config|set"]
    );
    let gets = names(&mut r, &["COMMAND", "LIST", "FILTERBY", "PATTERN", "*|get"]);
    assert_eq!(gets, ["config|get", "slowlog|get"]);
    // ACLCAT reads each subcommand's own categories.
    let admin = names(&mut r, &["COMMAND", "LIST", "FILTERBY", "ACLCAT", "admin"]);
    for n in [
        "config|get",
        "client|kill",
        "slowlog|reset",
        "latency|reset",
    ] {
        assert!(admin.contains(&n.to_string()), "{n}");
    }
    for n in ["config", "config|help", "client|id", "get"] {
        assert!(!admin.contains(&n.to_string()), "{n}");
    }
}

/// INFO commandstats as `name -> calls,rejected_calls,failed_calls`.
fn commandstats(c: &mut redis::Connection) -> Vec<(String, String)> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    info.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .map(|l| {
            let (name, fields) = l.split_once(':').unwrap();
            let f: Vec<&str> = fields.split(',').collect();
            let pick = |k: &str| f.iter().find(|x| x.starts_with(k)).unwrap().to_string();
            (
                name.to_string(),
                format!(
                    "{},{},{}",
                    pick("calls="),
                    pick("rejected_calls="),
                    pick("failed_calls=")
                ),
            )
        })
        .collect()
}

#[test]
fn commandstats_and_latency_histogram_count_a_subcommand_not_its_container() {
    let s = TestServer::start();
    let mut c = s.client();
    let run = |c: &mut redis::Connection, args: &[&str]| -> redis::RedisResult<redis::Value> {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(c)
    };
    assert!(run(&mut c, &["CONFIG", "RESETSTAT"]).is_ok());
    assert!(run(&mut c, &["CONFIG", "SET", "hz", "10"]).is_ok());
    assert!(run(&mut c, &["CONFIG", "GET", "hz"]).is_ok());
    assert!(run(&mut c, &["CLIENT", "ID"]).is_ok());
    assert!(run(&mut c, &["OBJECT", "ENCODING", "nokey"]).is_ok());
    // Refused before running, with Redis's words: the container's arity,
    // an unknown subcommand (counted nowhere), a subcommand's arity.
    let refused = [
        (
            &["CONFIG"][..],
            "wrong number of arguments for 'config' command",
        ),
        (
            &["CONFIG", "NOSUCH"],
            "unknown subcommand 'NOSUCH'. Try CONFIG HELP.",
        ),
        (
            &["CONFIG", "REWRITE"],
            "unknown subcommand 'REWRITE'. Try CONFIG HELP.",
        ),
        (
            &["CONFIG", "GET"],
            "wrong number of arguments for 'config|get' command",
        ),
        (
            &["OBJECT"],
            "wrong number of arguments for 'object' command",
        ),
        (
            &["OBJECT", "FREQ"],
            "wrong number of arguments for 'object|freq' command",
        ),
        (
            &["XINFO", "STREAM"],
            "wrong number of arguments for 'xinfo|stream' command",
        ),
    ];
    for (args, want) in refused {
        let e = run(&mut c, args).unwrap_err();
        assert!(e.to_string().contains(want), "{args:?}: {e}");
    }
    // A failure inside the subcommand is its failed call.
    assert!(run(&mut c, &["CONFIG", "SET", "no-such-parameter", "1"]).is_err());
    let stats = commandstats(&mut c);
    let row = |name: &str| {
        stats
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("none")
    };
    let expect = [
        ("config", "calls=0,rejected_calls=1,failed_calls=0"),
        (
            "config|resetstat",
            "calls=1,rejected_calls=0,failed_calls=0",
        ),
        ("config|set", "calls=2,rejected_calls=0,failed_calls=1"),
        ("config|get", "calls=1,rejected_calls=1,failed_calls=0"),
        ("client|id", "calls=1,rejected_calls=0,failed_calls=0"),
        ("object", "calls=0,rejected_calls=1,failed_calls=0"),
        ("object|encoding", "calls=1,rejected_calls=0,failed_calls=0"),
        ("object|freq", "calls=0,rejected_calls=1,failed_calls=0"),
        ("xinfo|stream", "calls=0,rejected_calls=1,failed_calls=0"),
    ];
    for (name, want) in expect {
        assert_eq!(row(name), want, "cmdstat_{name} in {stats:?}");
    }
    for name in ["config|nosuch", "config|rewrite", "client", "xinfo"] {
        assert_eq!(row(name), "none", "cmdstat_{name} in {stats:?}");
    }
    // Each container's subcommands follow it.
    let names: Vec<&str> = stats.iter().map(|(n, _)| n.as_str()).collect();
    let at = names.iter().position(|n| *n == "config").unwrap();
    assert!(names[at + 1..at + 4]
        .iter()
        .all(|n| n.starts_with("config|")));
    // CLIENT SETINFO, which Redis 7.0.15 does not have, counts as CLIENT.
    assert!(run(&mut c, &["CLIENT", "SETINFO", "lib-name", "x"]).is_ok());
    assert_eq!(
        commandstats(&mut c)
            .into_iter()
            .find(|(n, _)| n == "client")
            .map(|(_, v)| v),
        Some("calls=1,rejected_calls=0,failed_calls=0".to_string())
    );
    // LATENCY HISTOGRAM: a row per subcommand; a container's name gives
    // its subcommands' rows, a full name that one row.
    let mut r = s.raw();
    r.cmd(&["HELLO", "3"]);
    let rows = |r: &mut Raw, args: &[&str]| -> Vec<(String, Frame)> {
        let Frame::Map(m) = r.cmd(args) else {
            panic!("a map")
        };
        m.into_iter()
            .map(|(k, v)| {
                let Frame::Map(f) = v else { panic!("a map") };
                (text(k), f[0].1.clone())
            })
            .collect()
    };
    assert_eq!(
        rows(&mut r, &["LATENCY", "HISTOGRAM", "config"]),
        [
            ("config|set".to_string(), int(2)),
            ("config|resetstat".to_string(), int(1)),
            ("config|get".to_string(), int(1)),
        ]
    );
    assert_eq!(
        rows(&mut r, &["LATENCY", "HISTOGRAM", "CONFIG|GET", "nosuch|x"]),
        [("config|get".to_string(), int(1))]
    );
    let all: Vec<String> = rows(&mut r, &["LATENCY", "HISTOGRAM"])
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    for n in [
        "client",
        "client|id",
        "object|encoding",
        "config|set",
        "hello",
    ] {
        assert!(all.contains(&n.to_string()), "{n} in {all:?}");
    }
    assert!(!all.contains(&"object|freq".to_string()), "never ran");
}

#[test]
fn every_listed_subcommand_runs_and_the_others_are_unknown() {
    // Redis 7.0.15's subcommands of Basalt's containers, from the data
    // COMMAND serves.
    let data: serde_json::Value =
        serde_json::from_str(include_str!("../src/commands/redis_commands.json")).unwrap();
    let s = TestServer::start();
    let mut r = s.raw();
    let Frame::Array(all) = r.cmd(&["COMMAND"]) else {
        panic!("an array")
    };
    let mut checked = 0;
    for row in all.into_iter().map(array) {
        let name = text(row[0].clone());
        let Some(redis_subs) = data[&name]["subcommands"].as_array() else {
            continue;
        };
        let listed = sub_names(&row);
        for sub in redis_subs {
            let sub = sub.as_str().unwrap();
            let full = format!("{name}|{sub}");
            // Alone, a subcommand that takes arguments is refused by its
            // arity; one that takes none runs. Neither is unknown.
            let reply = r.cmd(&[&name, sub]);
            let unknown = matches!(&reply, Frame::Error(e)
                if String::from_utf8_lossy(e).starts_with("ERR unknown subcommand '"));
            assert_eq!(
                unknown,
                !listed.contains(&full),
                "{full}: listed {}, replied {reply:?}",
                listed.contains(&full)
            );
            checked += 1;
        }
    }
    assert!(checked >= 80, "{checked}");
}

/// A field of `INFO stats` as text.
fn stats_field(r: &mut Raw, name: &str) -> String {
    let info = text(r.cmd(&["INFO", "stats"]));
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {info}"))
        .to_string()
}

#[test]
fn info_stats_reports_instantaneous_rates_and_expired_keys_and_resetstat_clears_them() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(stats_field(&mut r, "instantaneous_ops_per_sec"), "0");
    assert_eq!(stats_field(&mut r, "instantaneous_input_kbps"), "0.00");
    // About 40 k commands a second for half a second: the rate over the
    // last 1.6 s must show them while they run.
    let mut busy = s.raw();
    let batch: Vec<u8> = (0..2000).flat_map(|_| common::resp(&["PING"])).collect();
    let mut seen = 0u64;
    let started = std::time::Instant::now();
    for _ in 0..10 {
        busy.send(&batch);
        for _ in 0..2000 {
            busy.read();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        seen = seen.max(
            stats_field(&mut r, "instantaneous_ops_per_sec")
                .parse()
                .unwrap(),
        );
    }
    assert!(
        seen >= 1000,
        "{seen} ops/s seen while 20,000 PINGs ran for {:?}",
        started.elapsed()
    );
    let kbps: f64 = stats_field(&mut r, "instantaneous_input_kbps")
        .parse()
        .unwrap();
    assert!(kbps > 0.0, "input {kbps} KiB/s");
    // Idle again: the rate falls back to this test's own INFO calls.
    assert!(
        common::eventually(std::time::Duration::from_secs(5), || {
            stats_field(&mut r, "instantaneous_ops_per_sec")
                .parse::<u64>()
                .unwrap()
                < 100
        }),
        "the rate decays once the load stops"
    );
    // Keys removed because they expired, however they were found.
    assert_eq!(stats_field(&mut r, "expired_keys"), "0");
    for k in ["e1", "e2", "e3"] {
        assert_eq!(r.cmd(&["SET", k, "v", "PX", "30"]), common::ok());
    }
    r.cmd(&["SET", "kept", "v", "EX", "100"]);
    std::thread::sleep(std::time::Duration::from_millis(60));
    // A write finds one expired; the sweep finds the others.
    assert_eq!(r.cmd(&["SET", "e1", "again", "NX"]), common::ok());
    assert!(
        common::eventually(std::time::Duration::from_secs(10), || {
            stats_field(&mut r, "expired_keys") == "3"
        }),
        "three keys expired: {}",
        stats_field(&mut r, "expired_keys")
    );
    assert_eq!(r.cmd(&["CONFIG", "RESETSTAT"]), common::ok());
    assert_eq!(stats_field(&mut r, "expired_keys"), "0");
    assert_eq!(stats_field(&mut r, "instantaneous_ops_per_sec"), "0");
}

/// INFO errorstats as (code, count) lines, in order.
fn errorstats(r: &mut Raw) -> Vec<String> {
    let info = text(r.cmd(&["INFO", "errorstats"]));
    let mut lines = info.lines();
    assert_eq!(lines.next(), Some("# Errorstats"), "{info}");
    lines
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn errorstats_count_every_error_reply_by_code_as_redis_does() {
    // The counts redis-server 7.0.15 gives for this sequence (compared side
    // by side): refusals and handler errors, errors inside EXEC's reply,
    // an EXECABORT, and a script's errors counted once whether a
    // `redis.call` raised them, a `redis.pcall` returned them or the
    // script made them.
    let s = TestServer::start();
    let mut r = s.raw();
    assert!(errorstats(&mut r).is_empty());
    assert_eq!(stats_field(&mut r, "total_error_replies"), "0");
    for c in [
        &["SET", "s", "1"][..],
        &["LPUSH", "l", "a"],
        &["NOSUCHCMD", "x"],
        &["GET"],
        &["LPOP", "s"],
        &["INCR", "l"],
        &["SET", "s", "1", "XX", "NX"],
        &["EVALSHA", "0000000000000000000000000000000000000000", "0"],
        &["EVAL", "return redis.call('incr','l')", "0"],
        &["EVAL", "return redis.pcall('incr','l')", "0"],
        &["EVAL", "redis.pcall('incr','l'); return 1", "0"],
        &["EVAL", "return {err='MYERR custom'}", "0"],
        &["EVAL", "return {err='nospace'}", "0"],
        &["MULTI"],
        &["INCR", "l"],
        &["SET", "s", "2"],
        &["EXEC"],
        &["MULTI"],
        &["GET"],
        &["EXEC"],
        &["CONFIG", "GET"],
        &["SELECT", "99"],
    ] {
        r.cmd(c);
    }
    assert_eq!(
        errorstats(&mut r),
        [
            "errorstat_ERR:count=7",
            "errorstat_EXECABORT:count=1",
            "errorstat_MYERR:count=1",
            "errorstat_NOSCRIPT:count=1",
            "errorstat_WRONGTYPE:count=6",
        ]
    );
    assert_eq!(stats_field(&mut r, "total_error_replies"), "16");
    // Default INFO has the section (after CPU, before Cluster).
    let info = text(r.cmd(&["INFO"]));
    let at = |h: &str| info.find(h).unwrap_or_else(|| panic!("no {h}"));
    assert!(at("# CPU") < at("# Errorstats") && at("# Errorstats") < at("# Cluster"));
    assert_eq!(r.cmd(&["CONFIG", "RESETSTAT"]), common::ok());
    assert!(errorstats(&mut r).is_empty());
    assert_eq!(stats_field(&mut r, "total_error_replies"), "0");
}

#[test]
fn keyspace_hits_and_misses_count_read_lookups_as_redis_does() {
    // redis-server 7.0.15 gives 12 hits and 8 misses for this sequence:
    // writes count nothing, a read of the wrong type is a hit, every key
    // of a multi-key read counts (MGET, EXISTS, SINTER, BITOP's sources,
    // PFCOUNT), and a script's call counts as the command would.
    let s = TestServer::start();
    let mut r = s.raw();
    for c in [
        &["SET", "s", "v"][..],
        &["LPUSH", "l", "a"],
        &["SADD", "st", "m"],
        &["HSET", "h", "f", "v"],
    ] {
        r.cmd(c);
    }
    assert_eq!(stats_field(&mut r, "keyspace_hits"), "0");
    assert_eq!(stats_field(&mut r, "keyspace_misses"), "0");
    for c in [
        &["GET", "s"][..],
        &["GET", "nope"],
        &["MGET", "s", "nope", "l"],
        &["EXISTS", "s", "nope"],
        &["TYPE", "l"],
        &["GET", "l"],
        &["HGET", "h", "f"],
        &["HGET", "nope", "f"],
        &["SINTER", "st", "nope"],
        &["INCR", "cnt"],
        &["SET", "s2", "x"],
        &["BITOP", "OR", "dst", "s", "nope"],
        &["PFCOUNT", "nope1", "nope2"],
        &["LRANGE", "l", "0", "-1"],
        &["TTL", "s"],
        &["EVAL", "return redis.call('get','s')", "0"],
    ] {
        r.cmd(c);
    }
    assert_eq!(stats_field(&mut r, "keyspace_hits"), "12");
    assert_eq!(stats_field(&mut r, "keyspace_misses"), "8");
    assert_eq!(r.cmd(&["CONFIG", "RESETSTAT"]), common::ok());
    assert_eq!(stats_field(&mut r, "keyspace_hits"), "0");
    assert_eq!(stats_field(&mut r, "keyspace_misses"), "0");
}

#[test]
fn scripts_count_each_error_once_and_streams_and_object_count_their_lookups_as_redis_does() {
    // Counts from redis-server 7.0.15 for each case alone (after CONFIG
    // RESETSTAT): (total_error_replies, keyspace_hits, keyspace_misses).
    let s = TestServer::start();
    let mut r = s.raw();
    type Case<'a> = (&'a [&'a str], (u64, u64, u64));
    let cases: &[Case<'_>] = &[
        // Errors nested in a script's reply are error replies.
        (&["EVAL", "return {1, redis.error_reply('X y'), {err='Z w'}}", "0"], (2, 0, 0)),
        // A refused pcall counts even when the script swallows it.
        (&["EVAL", "redis.pcall('nosuch'); return 1", "0"], (1, 0, 0)),
        (&["EVAL", "redis.pcall('get'); return 1", "0"], (1, 0, 0)),
        // A call's error passed on, even edited, is not counted again ...
        (&["EVAL", "local e=redis.pcall('incr','l'); e.err='X '..e.err; return e", "0"], (1, 0, 0)),
        (&["EVAL", "local e=redis.pcall('incr','l'); redis.pcall('incrby','s','x'); return e", "0"], (2, 0, 0)),
        // ... but the same words made by the script are its own error.
        (&["EVAL", "local r=redis.pcall('get','l'); return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')", "0"], (2, 1, 0)),
        (&["EVAL_RO", "return redis.call('get','l')", "0"], (1, 1, 0)),
        // XREAD looks each key up twice; SPOP is a write lookup; OBJECT
        // counts without a keymiss.
        (&["XREAD", "STREAMS", "x", "nx", "0", "0"], (0, 2, 2)),
        (&["XINFO", "STREAM", "nx"], (1, 0, 1)),
        (&["XPENDING", "x", "g"], (0, 1, 0)),
        (&["SPOP", "S"], (0, 0, 0)),
        (&["SPOP", "nx"], (0, 0, 0)),
        (&["OBJECT", "ENCODING", "nx"], (0, 0, 1)),
        // SORT looks up its key, then each key its BY and GET patterns
        // name (w_1 exists, w_2 and w_3 do not; o_* none).
        (&["SORT", "nums", "BY", "w_*", "GET", "o_*"], (0, 2, 5)),
    ];
    for (cmd, want) in cases {
        r.cmd(&["FLUSHALL"]);
        r.cmd(&["SET", "s", "v"]);
        r.cmd(&["LPUSH", "l", "a"]);
        r.cmd(&["SADD", "S", "a", "b"]);
        r.cmd(&["XADD", "x", "1-1", "a", "b"]);
        r.cmd(&["XGROUP", "CREATE", "x", "g", "0"]);
        r.cmd(&["RPUSH", "nums", "3", "1", "2"]);
        r.cmd(&["SET", "w_1", "5"]);
        assert_eq!(r.cmd(&["CONFIG", "RESETSTAT"]), common::ok());
        r.cmd(cmd);
        let got = (
            stats_field(&mut r, "total_error_replies").parse().unwrap(),
            stats_field(&mut r, "keyspace_hits").parse().unwrap(),
            stats_field(&mut r, "keyspace_misses").parse().unwrap(),
        );
        assert_eq!(got, *want, "{cmd:?}");
    }
}

/// INFO latencystats' lines after its header, as (command, [(percentile,
/// µs)]).
fn latencystats(r: &mut Raw) -> Vec<(String, Vec<(String, f64)>)> {
    let info = text(r.cmd(&["INFO", "latencystats"]));
    let mut lines = info.lines();
    assert_eq!(lines.next(), Some("# Latencystats"), "{info}");
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (name, values) = l
                .strip_prefix("latency_percentiles_usec_")
                .and_then(|l| l.split_once(':'))
                .unwrap_or_else(|| panic!("{l}"));
            let values = values
                .split(',')
                .filter(|v| !v.is_empty())
                .map(|v| {
                    let (p, us) = v.split_once('=').unwrap_or_else(|| panic!("{l}"));
                    let (_, decimals) = us.split_once('.').unwrap_or_else(|| panic!("{l}"));
                    assert_eq!(decimals.len(), 3, "µs with 3 decimals: {l}");
                    (p.to_string(), us.parse().unwrap())
                })
                .collect();
            (name.to_string(), values)
        })
        .collect()
}

#[test]
fn latencystats_report_each_commands_run_time_percentiles_and_follow_their_settings() {
    let s = TestServer::start();
    let mut r = s.raw();
    // Not a default section; `all` and `everything` have it before Cluster.
    let default = text(r.cmd(&["INFO"]));
    assert!(!default.contains("# Latencystats"), "{default}");
    let all = text(r.cmd(&["INFO", "everything"]));
    let headers: Vec<&str> = all.lines().filter(|l| l.starts_with('#')).collect();
    let at = headers.iter().position(|h| *h == "# Latencystats").unwrap();
    assert_eq!(
        (headers[at - 1], headers[at + 1]),
        ("# Errorstats", "# Cluster")
    );
    assert_eq!(r.cmd(&["CONFIG", "RESETSTAT"]), ok());
    for i in 0..20 {
        r.cmd(&["SET", &format!("k{i}"), "v"]);
    }
    r.cmd(&["GET", "k1"]);
    r.cmd(&["CONFIG", "GET", "maxmemory"]);
    // One call that surely runs at least 5 ms.
    slow_eval(&mut r, 5);
    let stats = latencystats(&mut r);
    let names: Vec<&str> = stats.iter().map(|(n, _)| n.as_str()).collect();
    for want in ["set", "get", "eval", "config|get", "config|resetstat"] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    for (name, values) in &stats {
        let ps: Vec<&str> = values.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(ps, ["p50", "p99", "p99.9"], "{name}");
        assert!(
            values.windows(2).all(|w| w[0].1 <= w[1].1),
            "{name}: {values:?}"
        );
    }
    let eval = &stats.iter().find(|(n, _)| n == "eval").unwrap().1;
    assert!(
        (5000.0..1_000_000.0).contains(&eval[0].1),
        "a 5 ms script reads 5-1000 ms: {eval:?}"
    );
    // The percentiles are a setting, checked as Redis checks them.
    assert_eq!(
        r.cmd(&[
            "CONFIG",
            "SET",
            "latency-tracking-info-percentiles",
            "0 99.99 100"
        ]),
        ok()
    );
    for (bad, why) in [
        (
            "abc",
            "Invalid latency-tracking-info-percentiles parameters",
        ),
        (
            "50 101",
            "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]",
        ),
    ] {
        assert_eq!(
            r.cmd(&["CONFIG", "SET", "latency-tracking-info-percentiles", bad]),
            err(&format!(
                "ERR CONFIG SET failed (possibly related to argument 'latency-tracking-info-percentiles') - {why}"
            ))
        );
    }
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "latency-tracking-info-percentiles"]),
        Frame::Array(vec![
            bulk("latency-tracking-info-percentiles"),
            bulk("0 99.99 100")
        ])
    );
    let stats = latencystats(&mut r);
    let set = &stats.iter().find(|(n, _)| n == "set").unwrap().1;
    let ps: Vec<&str> = set.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(ps, ["p0", "p99.99", "p100"]);
    // Tracking off: nothing recorded or shown; LATENCY HISTOGRAM still
    // reads what was recorded before, as in Redis.
    let gets = |r: &mut Raw| {
        let all = array(r.cmd(&["LATENCY", "HISTOGRAM", "get"]));
        let fields = array(all[1].clone());
        fields[1].clone()
    };
    assert_eq!(gets(&mut r), int(1));
    assert_eq!(r.cmd(&["CONFIG", "SET", "latency-tracking", "no"]), ok());
    assert_eq!(
        r.cmd(&["CONFIG", "SET", "latency-tracking", "maybe"]),
        err("ERR CONFIG SET failed (possibly related to argument 'latency-tracking') - argument must be 'yes' or 'no'")
    );
    for _ in 0..3 {
        r.cmd(&["GET", "k1"]);
    }
    assert!(latencystats(&mut r).is_empty());
    assert_eq!(gets(&mut r), int(1));
    assert_eq!(r.cmd(&["CONFIG", "SET", "latency-tracking", "yes"]), ok());
    r.cmd(&["GET", "k1"]);
    assert_eq!(gets(&mut r), int(2));
    // RESETSTAT forgets every command's histogram.
    assert_eq!(r.cmd(&["CONFIG", "RESETSTAT"]), ok());
    let after = latencystats(&mut r);
    assert_eq!(
        after.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["config|resetstat"]
    );
}
