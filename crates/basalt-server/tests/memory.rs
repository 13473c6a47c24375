//! MEMORY USAGE counts what a key holds in RAM (its index entry, a map's
//! field table, a sorted set's ordered index), not its bytes on disk; and
//! MEMORY answers Redis's errors.

mod common;

use basalt_resp::Frame;
use common::{err, TestServer};

fn usage(r: &mut common::Raw, key: &str) -> Option<i64> {
    match r.cmd(&["MEMORY", "USAGE", key]) {
        Frame::Integer(n) => Some(n),
        Frame::NullBulk | Frame::Null => None,
        f => panic!("unexpected reply {f:?}"),
    }
}

#[test]
fn memory_usage_counts_the_index_not_the_values_on_disk() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(usage(&mut r, "missing"), None);
    r.cmd(&["SET", "small", "v"]);
    r.cmd(&["SET", "big", &"x".repeat(100_000)]);
    let small = usage(&mut r, "small").unwrap();
    let big = usage(&mut r, "big").unwrap();
    assert!(small > 0);
    // The value is on disk: a 100 KB string costs RAM for its key only.
    assert!(big < 1_000, "big string reports {big} bytes");
    // A TTL adds its entry.
    r.cmd(&["EXPIRE", "small", "100"]);
    assert!(usage(&mut r, "small").unwrap() > small);
    // Maps grow with their field tables; a sorted set adds its index.
    for (n, key) in [(10, "h10"), (1000, "h1000")] {
        let mut args = vec!["HSET".to_string(), key.to_string()];
        for i in 0..n {
            args.push(format!("field-{i}"));
            args.push("v".into());
        }
        let args: Vec<&str> = args.iter().map(|a| a.as_str()).collect();
        r.cmd(&args);
    }
    let h10 = usage(&mut r, "h10").unwrap();
    let h1000 = usage(&mut r, "h1000").unwrap();
    assert!(h1000 > 20 * h10, "h10 {h10}, h1000 {h1000}");
    r.cmd(&["HSET", "h", "field-0", "v"]);
    r.cmd(&["ZADD", "z", "1", "field-0"]);
    assert!(usage(&mut r, "z").unwrap() > usage(&mut r, "h").unwrap());
    // SAMPLES is accepted (nothing is sampled).
    assert_eq!(
        r.cmd(&["MEMORY", "USAGE", "big", "SAMPLES", "0"]),
        Frame::Integer(big)
    );
}

#[test]
fn memory_errors_are_redis_errors() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&["SET", "k", "v"]);
    assert_eq!(
        r.cmd(&["MEMORY", "USAGE", "k", "SAMPLES", "-1"]),
        err("ERR syntax error")
    );
    assert_eq!(
        r.cmd(&["MEMORY", "USAGE", "k", "SAMPLES", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        r.cmd(&["MEMORY", "USAGE", "k", "bogus"]),
        err("ERR syntax error")
    );
    assert_eq!(
        r.cmd(&["MEMORY", "USAGE"]),
        err("ERR wrong number of arguments for 'memory|usage' command")
    );
    assert_eq!(
        r.cmd(&["MEMORY", "STATS", "x"]),
        err("ERR wrong number of arguments for 'memory|stats' command")
    );
    assert_eq!(
        r.cmd(&["MEMORY", "NOSUCH"]),
        err("ERR unknown subcommand 'NOSUCH'. Try MEMORY HELP.")
    );
    assert!(matches!(r.cmd(&["MEMORY", "HELP"]), Frame::Array(l) if l.len() > 2));
}

fn info_field(info: &str, name: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("INFO memory lacks {name}:\n{info}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn info_memory_counts_allocations_apart_from_the_mapped_data_pages() {
    let s = TestServer::start();
    let mut r = s.raw();
    // 32 MiB of values, written through and read back through the maps.
    let value = "v".repeat(1 << 20);
    for i in 0..32 {
        r.cmd(&["SET", &format!("k{i}"), &value]);
    }
    for i in 0..32 {
        assert!(matches!(r.cmd(&["GET", &format!("k{i}")]), Frame::Bulk(_)));
    }
    let Frame::Bulk(info) = r.cmd(&["INFO", "memory"]) else {
        panic!()
    };
    let info = String::from_utf8(info).unwrap();
    let used = info_field(&info, "used_memory");
    let rss = info_field(&info, "used_memory_rss");
    let file = info_field(&info, "basalt_rss_file_bytes");
    let anon = info_field(&info, "basalt_rss_anon_bytes");
    // The data pages are resident through the maps and counted there, not
    // in used_memory (this test process's own allocations are in both).
    assert!(file >= 24 << 20, "mapped resident bytes {file}:\n{info}");
    assert!(used < rss, "used_memory {used} >= rss {rss}:\n{info}");
    assert!(anon + file <= rss + (1 << 20), "{anon} + {file} > {rss}");
    assert!(used > 0);
}

fn oom() -> Frame {
    err("OOM command not allowed when used memory > 'maxmemory'.")
}

#[test]
fn over_maxmemory_commands_that_grow_memory_are_refused_and_the_rest_run() {
    let s = TestServer::start();
    let mut r = s.raw();
    let mut other = s.raw();
    assert_eq!(r.cmd(&["SET", "k", "v"]), common::ok());
    // A transaction queued while under the budget.
    assert_eq!(other.cmd(&["MULTI"]), common::ok());
    assert_eq!(
        other.cmd(&["SET", "queued", "1"]),
        Frame::Simple(b"QUEUED".to_vec())
    );
    // Any process has more than one byte allocated.
    assert_eq!(r.cmd(&["CONFIG", "SET", "maxmemory", "1"]), common::ok());
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "maxmemory"]),
        Frame::Array(vec![common::bulk("maxmemory"), common::bulk("1")])
    );
    assert_eq!(r.cmd(&["SET", "x", "1"]), oom());
    assert_eq!(r.cmd(&["INCR", "n"]), oom());
    assert_eq!(r.cmd(&["RPUSH", "l", "a"]), oom());
    // Reads and deletions go on; nothing was written.
    assert_eq!(r.cmd(&["GET", "k"]), common::bulk("v"));
    assert_eq!(r.cmd(&["EXISTS", "x", "n", "l"]), Frame::Integer(0));
    assert_eq!(r.cmd(&["DEL", "k"]), Frame::Integer(1));
    // EXEC of a queue holding a write is refused whole.
    assert_eq!(
        other.cmd(&["EXEC"]),
        err("EXECABORT Transaction discarded because of: OOM command not allowed when used memory > 'maxmemory'.")
    );
    assert_eq!(other.cmd(&["EXISTS", "queued"]), Frame::Integer(0));
    // A queue may not grow; the transaction is then aborted.
    assert_eq!(r.cmd(&["MULTI"]), common::ok());
    assert_eq!(r.cmd(&["GET", "k"]), oom());
    assert_eq!(
        r.cmd(&["EXEC"]),
        err("EXECABORT Transaction discarded because of previous errors.")
    );
    // A script's write call is refused; the script sees the error.
    let Frame::Error(e) = r.cmd(&["EVAL", "return redis.call('set', 's', '1')", "0"]) else {
        panic!("a script's write under OOM did not fail")
    };
    assert!(String::from_utf8_lossy(&e).starts_with("OOM "), "{e:?}");
    // Unless the script says it may.
    assert_eq!(
        r.cmd(&[
            "EVAL",
            "#!lua flags=allow-oom\nreturn redis.call('set', 's', '1')",
            "0"
        ]),
        common::ok()
    );
    let Frame::Bulk(info) = r.cmd(&["INFO", "memory"]) else {
        panic!()
    };
    let info = String::from_utf8(info).unwrap();
    assert_eq!(info_field(&info, "maxmemory"), 1);
    // Bad values change nothing; 0 lifts the budget.
    assert_eq!(
        r.cmd(&["CONFIG", "SET", "maxmemory", "lots"]),
        err("ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument must be a memory value")
    );
    assert_eq!(r.cmd(&["CONFIG", "SET", "maxmemory", "0"]), common::ok());
    assert_eq!(r.cmd(&["SET", "x", "1"]), common::ok());
    assert_eq!(r.cmd(&["GET", "x"]), common::bulk("1"));
}
