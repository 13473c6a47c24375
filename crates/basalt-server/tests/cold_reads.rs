//! GETs whose values are read by the reader threads (`crate::readers`):
//! with `read-residency all-cold` every GET of a one-record value takes
//! that path, so these tests drive it on a small data set. Replies keep
//! the connection's order, each GET sees the value at its turn in the
//! pipeline, the paths that cannot wait (EXEC, scripts, CLIENT REPLY) still
//! answer correctly, values stay whole while writers and compaction move
//! them, and a damaged record is an error for its key only.

mod common;

use std::time::{Duration, Instant};

use basalt_server::config::IoUring;
use basalt_server::readers::Policy;
use basalt_server::Config;
use common::{bulk, ok, TestServer};
use redis::Value;

/// Held by every test here: INFO's cold-read counters are the process's,
/// and `cargo test` runs the tests of this file in parallel threads, so a
/// test's counts would otherwise include another's reads.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn cold_server(file_size: u64) -> TestServer {
    cold_server_with(file_size, true)
}

/// With `io_uring`, the workers submit cold reads through their rings
/// (`crate::uring`) where the kernel allows; without, the reader threads
/// read them all.
fn cold_server_with(file_size: u64, io_uring: bool) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::ephemeral(dir.path());
    config.read_residency = Policy::AllCold;
    config.cold_readers = 4;
    config.data_file_size = file_size;
    config.io_uring = if io_uring { IoUring::Yes } else { IoUring::No };
    TestServer::start_with(config, dir)
}

/// An INFO stats field as a number.
fn stat(c: &mut redis::Connection, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("stats").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("{field} in INFO stats"))
        .trim()
        .parse()
        .unwrap()
}

/// Checks that a server started with `io_uring` served cold reads through
/// its rings, where this kernel gives the workers rings at all.
fn check_ring_use(c: &mut redis::Connection, io_uring: bool, ring_reads_before: u64) {
    if !io_uring {
        return;
    }
    if stat(c, "basalt_io_uring_rings") == 0 {
        eprintln!("no io_uring here: the reader threads served every cold read");
        return;
    }
    let ring_reads = stat(c, "basalt_cold_reads_io_uring") - ring_reads_before;
    assert!(ring_reads > 0, "the rings served no cold read");
}

/// INFO stats `basalt_cold_reads`: reads the reader threads served.
fn cold_reads_served(c: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("stats").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("basalt_cold_reads:"))
        .expect("basalt_cold_reads in INFO stats")
        .trim()
        .parse()
        .unwrap()
}

fn value(key: usize, gen: usize) -> String {
    // Long enough to span pages, and naming its key and generation.
    let body = format!("{key}:{gen};");
    body.repeat(1 + (key * 7 + gen) % 900)
}

#[test]
fn a_pipeline_of_cold_gets_answers_in_order_with_the_value_at_each_turn() {
    let _serial = serial();
    for io_uring in [true, false] {
        a_pipeline_of_cold_gets_answers_in_order(io_uring);
    }
}

fn a_pipeline_of_cold_gets_answers_in_order(io_uring: bool) {
    let server = cold_server_with(1 << 20, io_uring);
    let mut c = server.client();
    let ring_reads_before = stat(&mut c, "basalt_cold_reads_io_uring");
    let mut pipe = redis::pipe();
    let mut expected: Vec<Value> = Vec::new();
    let mut model: std::collections::HashMap<usize, String> = Default::default();
    for i in 0..3000usize {
        let key = i % 97;
        match i % 5 {
            0 | 3 => {
                let v = value(key, i);
                pipe.cmd("SET").arg(format!("k{key}")).arg(&v);
                expected.push(Value::Okay);
                model.insert(key, v);
            }
            4 if i % 2 == 0 => {
                pipe.cmd("DEL").arg(format!("k{key}"));
                expected.push(Value::Int(model.remove(&key).is_some() as i64));
            }
            4 => {
                // Three keys at once, cold values in their places.
                let keys = [key, (key + 1) % 97, (key + 40) % 97];
                let mut cmd = redis::cmd("MGET");
                for k in keys {
                    cmd.arg(format!("k{k}"));
                }
                pipe.add_command(cmd);
                expected.push(Value::Array(
                    keys.iter()
                        .map(|k| match model.get(k) {
                            Some(v) => Value::BulkString(v.clone().into_bytes()),
                            None => Value::Nil,
                        })
                        .collect(),
                ));
            }
            _ => {
                pipe.cmd("GET").arg(format!("k{key}"));
                expected.push(match model.get(&key) {
                    Some(v) => Value::BulkString(v.clone().into_bytes()),
                    None => Value::Nil,
                });
            }
        }
    }
    let got: Vec<Value> = pipe.query(&mut c).unwrap();
    assert_eq!(got.len(), expected.len());
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g, e, "reply {i}");
    }
    let served = cold_reads_served(&mut c);
    assert!(served >= 500, "only {served} GETs went through the readers");
    check_ring_use(&mut c, io_uring, ring_reads_before);
    let settings: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("cold-readers")
        .arg("read-residency")
        .arg("io-uring")
        .query(&mut c)
        .unwrap();
    let ring = if io_uring { "yes" } else { "no" };
    assert_eq!(
        settings,
        [
            "cold-readers",
            "4",
            "io-uring",
            ring,
            "read-residency",
            "all-cold"
        ]
    );
}

#[test]
fn transactions_scripts_reply_modes_and_resp3_read_cold_values_correctly() {
    let _serial = serial();
    let server = cold_server(1 << 20);
    let mut raw = server.raw();
    let v = value(1, 1);
    assert_eq!(raw.cmd(&["SET", "k", &v]), ok());
    // In EXEC: read in place by the thread running the transaction.
    raw.send(&common::resp(&["MULTI"]));
    raw.send(&common::resp(&["GET", "k"]));
    raw.send(&common::resp(&["SET", "k", "after"]));
    raw.send(&common::resp(&["GET", "k"]));
    raw.send(&common::resp(&["EXEC"]));
    assert_eq!(raw.read(), ok());
    assert_eq!(raw.read(), basalt_resp::Frame::Simple(b"QUEUED".to_vec()));
    assert_eq!(raw.read(), basalt_resp::Frame::Simple(b"QUEUED".to_vec()));
    assert_eq!(raw.read(), basalt_resp::Frame::Simple(b"QUEUED".to_vec()));
    assert_eq!(
        raw.read(),
        basalt_resp::Frame::Array(vec![bulk(&v), ok(), bulk("after")])
    );
    // A script's redis.call.
    assert_eq!(
        raw.cmd(&["EVAL", "return redis.call('get', KEYS[1])", "1", "k"]),
        bulk("after")
    );
    // CLIENT REPLY SKIP drops the next reply only, cold or not.
    raw.send(&common::resp(&["CLIENT", "REPLY", "SKIP"]));
    raw.send(&common::resp(&["GET", "k"]));
    raw.send(&common::resp(&["SET", "k2", "second"]));
    raw.send(&common::resp(&["GET", "k2"]));
    assert_eq!(raw.read(), ok());
    assert_eq!(raw.read(), bulk("second"));
    // RESP3: the same bulk strings, a null for a missing key.
    raw.cmd(&["HELLO", "3"]);
    assert_eq!(raw.cmd(&["GET", "k"]), bulk("after"));
    assert_eq!(raw.cmd(&["GET", "nothing"]), basalt_resp::Frame::Null);
}

#[test]
fn cold_reads_return_whole_values_while_writers_and_compaction_move_them() {
    let _serial = serial();
    for io_uring in [true, false] {
        cold_reads_stay_whole_under_writers_and_compaction(io_uring);
    }
}

fn cold_reads_stay_whole_under_writers_and_compaction(io_uring: bool) {
    // Small data files: rotations and compactions all the time.
    let server = cold_server_with(64 << 10, io_uring);
    let deadline = Instant::now() + Duration::from_secs(3);
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let mut c = server.client();
            std::thread::spawn(move || {
                let mut gen = 0;
                while Instant::now() < deadline && gen < 20_000 {
                    gen += 1;
                    let key = (gen * 13 + w) % 50;
                    if gen % 9 == 0 {
                        let _: i64 = redis::cmd("DEL")
                            .arg(format!("k{key}"))
                            .query(&mut c)
                            .unwrap();
                    } else {
                        let _: () = redis::cmd("SET")
                            .arg(format!("k{key}"))
                            .arg(value(key, gen))
                            .query(&mut c)
                            .unwrap();
                    }
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let mut c = server.client();
            std::thread::spawn(move || {
                let mut seen = 0;
                let mut rounds = 0;
                while Instant::now() < deadline && rounds < 5_000 {
                    rounds += 1;
                    let mut pipe = redis::pipe();
                    for key in 0..50 {
                        pipe.cmd("GET").arg(format!("k{key}"));
                    }
                    let got: Vec<Option<String>> = pipe.query(&mut c).unwrap();
                    for (key, v) in got.into_iter().enumerate() {
                        let Some(v) = v else { continue };
                        seen += 1;
                        let (head, _) = v.split_once(';').expect("a generation mark");
                        let (k, gen) = head.split_once(':').unwrap();
                        assert_eq!(k.parse::<usize>().unwrap(), key, "k{key} holds {head}");
                        assert_eq!(v, value(key, gen.parse().unwrap()), "k{key} torn");
                    }
                }
                seen
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let seen: usize = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(seen > 100, "only {seen} values read");
}

#[test]
fn a_damaged_record_is_an_error_for_its_key_and_the_server_keeps_serving() {
    let _serial = serial();
    for io_uring in [true, false] {
        a_damaged_record_is_an_error_for_its_key(io_uring);
    }
}

fn a_damaged_record_is_an_error_for_its_key(io_uring: bool) {
    let server = cold_server_with(1 << 20, io_uring);
    let mut c = server.client();
    let marked = "DAMAGE-ME-".repeat(50);
    let _: () = redis::cmd("SET")
        .arg("bad")
        .arg(&marked)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("good")
        .arg("fine")
        .query(&mut c)
        .unwrap();
    // Flip a byte of the value where it lies in its data file.
    let mut damaged = 0;
    for entry in walk(server.dir.path()) {
        if entry.extension().is_none_or(|e| e != "data") {
            continue;
        }
        let mut bytes = std::fs::read(&entry).unwrap();
        if let Some(at) = find(&bytes, marked.as_bytes()) {
            bytes[at + 7] ^= 0x20;
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&entry)
                .unwrap();
            f.write_all_at(&bytes[at + 7..at + 8], (at + 7) as u64)
                .unwrap();
            damaged += 1;
        }
    }
    assert_eq!(damaged, 1, "the value's record was not found");
    let bad: redis::RedisResult<Option<String>> = redis::cmd("GET").arg("bad").query(&mut c);
    let e = bad.unwrap_err();
    assert!(e.to_string().contains("corrupt"), "{e}");
    let good: Option<String> = redis::cmd("GET").arg("good").query(&mut c).unwrap();
    assert_eq!(good.as_deref(), Some("fine"));
    // In MGET the damaged value is an error in its place, the others whole.
    let mut raw = server.raw();
    let basalt_resp::Frame::Array(items) = raw.cmd(&["MGET", "good", "bad", "missing"]) else {
        panic!("MGET did not answer an array")
    };
    assert_eq!(items[0], bulk("fine"));
    assert!(
        matches!(&items[1], basalt_resp::Frame::Error(e) if String::from_utf8_lossy(e).contains("corrupt")),
        "{:?}",
        items[1]
    );
    assert_eq!(items[2], basalt_resp::Frame::NullBulk);
    let _: () = redis::cmd("SET")
        .arg("new")
        .arg("value")
        .query(&mut c)
        .unwrap();
    let new: Option<String> = redis::cmd("GET").arg("new").query(&mut c).unwrap();
    assert_eq!(new.as_deref(), Some("value"));
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn http_get_of_a_cold_value_answers_the_value_and_its_version() {
    let _serial = serial();
    let h = common::http::Http::start_with(|c| {
        c.read_residency = Policy::AllCold;
        c.cold_readers = 2;
    });
    let mut c = h.redis();
    let v = value(3, 3);
    let _: () = redis::cmd("SET").arg("k").arg(&v).query(&mut c).unwrap();
    let version: u64 = redis::cmd("VERSION").arg("k").query(&mut c).unwrap();
    let (status, headers, body) = h.send(reqwest::Method::GET, "/v1/keys/k", &[], None);
    assert_eq!(status, reqwest::StatusCode::OK);
    assert_eq!(body, v.as_bytes());
    assert_eq!(
        headers.get("etag").unwrap().to_str().unwrap(),
        format!("\"{version}\"")
    );
    // The JSON form and a conditional GET go the same way.
    let (status, json) = h.json(reqwest::Method::GET, "/v1/keys/k?format=json", None);
    assert_eq!(status, reqwest::StatusCode::OK);
    assert_eq!(json["value"], serde_json::json!(v));
    let etag = format!("\"{version}\"");
    let (status, _, _) = h.send(
        reqwest::Method::GET,
        "/v1/keys/k",
        &[("if-none-match", &etag)],
        None,
    );
    assert_eq!(status, reqwest::StatusCode::NOT_MODIFIED);
    let served = cold_reads_served(&mut c);
    // The two reads; the 304 needed no value.
    assert_eq!(served, 2, "{served} cold reads");
}

#[test]
fn hget_of_cold_fields_answers_in_pipeline_order() {
    let _serial = serial();
    let server = cold_server(1 << 20);
    let mut c = server.client();
    let mut pipe = redis::pipe();
    for i in 0..300usize {
        let field = format!("f{}", i % 13);
        if i % 4 == 0 {
            pipe.cmd("HSET").arg("h").arg(&field).arg(value(i % 13, i));
        } else if i % 4 == 3 {
            // HMGET: two fields (one maybe missing) in their places.
            pipe.cmd("HMGET")
                .arg("h")
                .arg(&field)
                .arg("never")
                .arg(format!("f{}", (i + 5) % 13));
        } else {
            pipe.cmd("HGET").arg("h").arg(&field);
        }
    }
    let got: Vec<Value> = pipe.query(&mut c).unwrap();
    // Replay the model: the last HSET of each field before the HGET.
    let mut model: std::collections::HashMap<String, String> = Default::default();
    for (i, g) in got.iter().enumerate() {
        let field = format!("f{}", i % 13);
        let val = |f: &str| match model.get(f) {
            Some(v) => Value::BulkString(v.clone().into_bytes()),
            None => Value::Nil,
        };
        if i % 4 == 0 {
            let created = model.insert(field, value(i % 13, i)).is_none();
            assert_eq!(g, &Value::Int(created as i64), "HSET {i}");
        } else if i % 4 == 3 {
            let want = Value::Array(vec![
                val(&field),
                Value::Nil,
                val(&format!("f{}", (i + 5) % 13)),
            ]);
            assert_eq!(g, &want, "HMGET {i}");
        } else {
            let want = match model.get(&field) {
                Some(v) => Value::BulkString(v.clone().into_bytes()),
                None => Value::Nil,
            };
            assert_eq!(g, &want, "HGET {i}");
        }
    }
    assert!(
        cold_reads_served(&mut c) > 0,
        "no HGET went through the readers"
    );
    let mut raw = server.raw();
    assert_eq!(raw.cmd(&["SET", "s", "x"]), ok());
    assert_eq!(
        raw.cmd(&["HGET", "s", "f"]),
        common::err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    assert_eq!(
        raw.cmd(&["HGET", "h", "nothing"]),
        basalt_resp::Frame::NullBulk
    );
    assert_eq!(
        raw.cmd(&["HGET", "nokey", "f"]),
        basalt_resp::Frame::NullBulk
    );
}

#[test]
fn hgetall_lrange_and_xrange_of_cold_maps_read_their_records_ahead_and_answer_in_order() {
    let _serial = serial();
    for io_uring in [true, false] {
        whole_map_reads_of_cold_maps(io_uring);
    }
}

fn whole_map_reads_of_cold_maps(io_uring: bool) {
    // Small data files, so the records lie in sealed files too.
    let server = cold_server_with(64 << 10, io_uring);
    let mut c = server.client();
    let staged_before = stat(&mut c, "basalt_cold_reads_staged");
    let mut hash: Vec<(String, String)> = Vec::new();
    for i in 0..60 {
        let (f, v) = (format!("f{i}"), value(i, 1));
        let _: () = redis::cmd("HSET")
            .arg("h")
            .arg(&f)
            .arg(&v)
            .query(&mut c)
            .unwrap();
        hash.push((f, v));
    }
    let list: Vec<String> = (0..40).map(|i| value(i + 100, 2)).collect();
    for v in &list {
        let _: () = redis::cmd("RPUSH").arg("l").arg(v).query(&mut c).unwrap();
    }
    let mut ids = Vec::new();
    for i in 0..30 {
        let id: String = redis::cmd("XADD")
            .arg("s")
            .arg("*")
            .arg("v")
            .arg(value(i + 200, 3))
            .query(&mut c)
            .unwrap();
        ids.push(id);
    }
    // More fields than are read ahead: read as before, still right.
    for i in 0..300 {
        let _: () = redis::cmd("HSET")
            .arg("big")
            .arg(format!("f{i}"))
            .arg(value(i, 4))
            .query(&mut c)
            .unwrap();
    }
    // One pipeline: whole-map reads between writes that change the maps.
    let mut pipe = redis::pipe();
    pipe.cmd("HGETALL").arg("h");
    pipe.cmd("HSET").arg("h").arg("f0").arg("changed");
    pipe.cmd("HVALS").arg("h");
    pipe.cmd("LRANGE").arg("l").arg(0).arg(-1);
    pipe.cmd("RPUSH").arg("l").arg("tail");
    pipe.cmd("LRANGE").arg("l").arg(-2).arg(-1);
    pipe.cmd("XRANGE").arg("s").arg("-").arg("+");
    pipe.cmd("XREVRANGE")
        .arg("s")
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(2);
    pipe.cmd("HGETALL").arg("big");
    pipe.cmd("GET").arg("missing");
    #[allow(clippy::type_complexity)]
    let (h1, _, vals, l1, _, l2, s1, s2, big, missing): (
        std::collections::HashMap<String, String>,
        i64,
        Vec<String>,
        Vec<String>,
        i64,
        Vec<String>,
        Vec<(String, Vec<(String, String)>)>,
        Vec<(String, Vec<(String, String)>)>,
        std::collections::HashMap<String, String>,
        Option<String>,
    ) = pipe.query(&mut c).unwrap();
    let expected: std::collections::HashMap<String, String> = hash.iter().cloned().collect();
    assert_eq!(h1, expected);
    let mut after: Vec<String> = hash.iter().skip(1).map(|(_, v)| v.clone()).collect();
    after.push("changed".into());
    let mut vals = vals;
    vals.sort();
    after.sort();
    assert_eq!(vals, after);
    assert_eq!(l1, list);
    assert_eq!(l2, [list[39].clone(), "tail".to_string()]);
    assert_eq!(s1.len(), 30);
    for (i, (id, entry)) in s1.iter().enumerate() {
        assert_eq!(id, &ids[i]);
        assert_eq!(entry, &[("v".to_string(), value(i + 200, 3))]);
    }
    assert_eq!(
        s2.iter().map(|e| e.0.clone()).collect::<Vec<_>>(),
        [ids[29].clone(), ids[28].clone()]
    );
    assert_eq!(big.len(), 300);
    assert_eq!(big["f299"], value(299, 4));
    assert_eq!(missing, None);
    // The small maps' records were read ahead and used (all-cold counts
    // every record as missing).
    let staged = stat(&mut c, "basalt_cold_reads_staged") - staged_before;
    assert!(
        staged >= 60 + 40 + 30,
        "only {staged} reads used read-ahead records"
    );
}

#[test]
fn a_database_reopened_by_flushall_checks_residency_from_its_first_read() {
    let _serial = serial();
    let server = cold_server(64 << 10);
    let mut c = server.client();
    // Enough to seal data files: FLUSHALL then sets the database's files
    // aside and opens a fresh one.
    for i in 0..60 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(value(i, 1))
            .query(&mut c)
            .unwrap();
    }
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    let _: () = redis::cmd("SET").arg("k").arg("v2").query(&mut c).unwrap();
    // At once, not after the next once-a-second look at the memory budget.
    let before = cold_reads_served(&mut c);
    let v: Option<String> = redis::cmd("GET").arg("k").query(&mut c).unwrap();
    assert_eq!(v.as_deref(), Some("v2"));
    assert_eq!(
        cold_reads_served(&mut c),
        before + 1,
        "the GET was not cold"
    );
}

#[test]
fn exec_fetches_its_cold_reads_ahead_and_answers_each_at_its_turn() {
    let _serial = serial();
    for io_uring in [true, false] {
        exec_cold_reads(io_uring);
    }
}

fn exec_cold_reads(io_uring: bool) {
    // Small data files, so the records lie in sealed files too.
    let server = cold_server_with(64 << 10, io_uring);
    let mut c = server.client();
    for i in 0..40 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(value(i, 1))
            .query(&mut c)
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg("h")
            .arg(format!("f{i}"))
            .arg(value(i + 100, 1))
            .query(&mut c)
            .unwrap();
    }
    let ring_before = stat(&mut c, "basalt_cold_reads_io_uring");
    let staged_before = stat(&mut c, "basalt_cold_reads_staged");
    type Replies = (
        String,
        Vec<Option<String>>,
        String,
        Vec<Option<String>>,
        std::collections::HashMap<String, String>,
        String,
        Option<String>,
    );
    let got: Replies = redis::pipe()
        .atomic()
        .cmd("GET")
        .arg("k1")
        .cmd("MGET")
        .arg("k2")
        .arg("nothing")
        .arg("k3")
        .cmd("HGET")
        .arg("h")
        .arg("f5")
        .cmd("HMGET")
        .arg("h")
        .arg("f6")
        .arg("nofield")
        .cmd("HGETALL")
        .arg("h")
        // A write inside the transaction: the GET after it reads the new
        // record, not the one fetched ahead.
        .cmd("SET")
        .arg("k1")
        .arg("changed")
        .ignore()
        .cmd("GET")
        .arg("k1")
        .cmd("GET")
        .arg("missing")
        .query(&mut c)
        .unwrap();
    assert_eq!(got.0, value(1, 1));
    assert_eq!(got.1, [Some(value(2, 1)), None, Some(value(3, 1))]);
    assert_eq!(got.2, value(105, 1));
    assert_eq!(got.3, [Some(value(106, 1)), None]);
    assert_eq!(got.4.len(), 40);
    for i in 0..40 {
        assert_eq!(got.4[&format!("f{i}")], value(i + 100, 1));
    }
    assert_eq!(got.5, "changed");
    assert_eq!(got.6, None);
    // GET, MGET's two values, HGET, HMGET's field and the 40 fields of
    // HGETALL were read from records fetched ahead (all-cold counts every
    // record as missing).
    let staged = stat(&mut c, "basalt_cold_reads_staged") - staged_before;
    assert!(
        staged >= 1 + 2 + 1 + 1 + 40,
        "only {staged} reads used fetched records"
    );
    check_ring_use(&mut c, io_uring, ring_before);
    // A transaction with a queuing error fetches nothing and is refused.
    let staged_before = stat(&mut c, "basalt_cold_reads_staged");
    let mut raw = server.raw();
    raw.send(&common::resp(&["MULTI"]));
    raw.send(&common::resp(&["GET", "k4"]));
    raw.send(&common::resp(&["NOSUCHCOMMAND"]));
    raw.send(&common::resp(&["EXEC"]));
    assert_eq!(raw.read(), ok());
    assert_eq!(raw.read(), basalt_resp::Frame::Simple(b"QUEUED".to_vec()));
    assert!(matches!(raw.read(), basalt_resp::Frame::Error(_)));
    assert!(matches!(raw.read(), basalt_resp::Frame::Error(e) if e.starts_with(b"EXECABORT")));
    assert_eq!(stat(&mut c, "basalt_cold_reads_staged"), staged_before);
    // The connection goes on serving cold reads.
    assert_eq!(raw.cmd(&["GET", "k4"]), bulk(&value(4, 1)));
    // An HMGET of more cold fields than one EXEC fetches (256 reads): the
    // fields that fit are fetched, not none of them.
    let mut hset = redis::cmd("HSET");
    hset.arg("wide");
    for i in 0..300 {
        hset.arg(format!("f{i}")).arg(value(i + 1000, 1));
    }
    let _: () = hset.query(&mut c).unwrap();
    let staged_before = stat(&mut c, "basalt_cold_reads_staged");
    let mut hmget = redis::cmd("HMGET");
    hmget.arg("wide");
    for i in 0..300 {
        hmget.arg(format!("f{i}"));
    }
    let (got,): (Vec<String>,) = redis::pipe()
        .atomic()
        .add_command(hmget)
        .query(&mut c)
        .unwrap();
    assert_eq!(got.len(), 300);
    for (i, v) in got.iter().enumerate() {
        assert_eq!(*v, value(i + 1000, 1));
    }
    let staged = stat(&mut c, "basalt_cold_reads_staged") - staged_before;
    assert!(
        staged >= 256,
        "only {staged} of HMGET's fields were fetched"
    );
}

#[test]
fn scripts_keys_are_fetched_ahead_and_read_from_staged_records() {
    let _serial = serial();
    for io_uring in [true, false] {
        script_cold_reads(io_uring);
    }
}

fn script_cold_reads(io_uring: bool) {
    let server = cold_server_with(64 << 10, io_uring);
    let mut c = server.client();
    for i in 0..30 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(value(i, 2))
            .query(&mut c)
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg("h")
            .arg(format!("f{i}"))
            .arg(value(i + 100, 2))
            .query(&mut c)
            .unwrap();
    }
    let staged_before = stat(&mut c, "basalt_cold_reads_staged");
    let body = "return {redis.call('get', KEYS[1]), redis.call('hget', KEYS[2], 'f3'), \
                #redis.call('hgetall', KEYS[2]), redis.call('get', KEYS[3])}";
    let got: (String, String, i64, Option<String>) = redis::cmd("EVAL")
        .arg(body)
        .arg(3)
        .arg("k7")
        .arg("h")
        .arg("missing")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, (value(7, 2), value(103, 2), 60, None));
    // A pipeline of scripts goes in one hand-over: each one's keys are
    // fetched, and each reads its own values.
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return redis.call('get', KEYS[1])")
        .query(&mut c)
        .unwrap();
    let mut pipe = redis::pipe();
    for i in 10..20 {
        pipe.cmd("EVALSHA").arg(&sha).arg(1).arg(format!("k{i}"));
    }
    let values: Vec<String> = pipe.query(&mut c).unwrap();
    assert_eq!(values, (10..20).map(|i| value(i, 2)).collect::<Vec<_>>());
    // The GET, the field, the 30 fields of HGETALL and the ten EVALSHAs'
    // values were read from records fetched ahead (all-cold counts every
    // record as missing).
    let staged = stat(&mut c, "basalt_cold_reads_staged") - staged_before;
    assert!(
        staged >= 1 + 1 + 30 + 10,
        "only {staged} reads used fetched records"
    );
    // Long values are fetched within the hand-over's budget (1 MiB) key by
    // key: three strings of 800 segments (about 440 KiB of records each)
    // do not all fit, and the one that does not is left out whole, so the
    // key after it still gets its read.
    for name in ["long1", "long2", "long3"] {
        let _: i64 = redis::cmd("SETRANGE")
            .arg(name)
            .arg(0)
            .arg(vec![b'x'; 800 * 512])
            .query(&mut c)
            .unwrap();
    }
    let (got, staged): (String, u64) = staged_by(
        &mut c,
        redis::cmd("EVAL")
            .arg("return redis.call('get', KEYS[4])")
            .arg(4)
            .arg("long1")
            .arg("long2")
            .arg("long3")
            .arg("k5"),
    );
    assert_eq!(got, value(5, 2));
    assert_eq!(staged, 1, "k5's value was fetched after the long keys");
    // Nothing staged outlives its scripts: a write, then a script reads
    // the new value.
    let _: () = redis::cmd("SET")
        .arg("k7")
        .arg("new")
        .query(&mut c)
        .unwrap();
    let again: String = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(1)
        .arg("k7")
        .query(&mut c)
        .unwrap();
    assert_eq!(again, "new");
}

#[test]
fn list_pops_and_lindex_of_cold_elements_are_fetched_ahead() {
    let _serial = serial();
    for io_uring in [true, false] {
        list_cold_reads(io_uring);
    }
}

fn list_cold_reads(io_uring: bool) {
    let server = cold_server_with(64 << 10, io_uring);
    let mut c = server.client();
    let items: Vec<String> = (0..40).map(|i| value(i, 3)).collect();
    for v in &items {
        let _: () = redis::cmd("RPUSH").arg("q").arg(v).query(&mut c).unwrap();
    }
    let staged_before = stat(&mut c, "basalt_cold_reads_staged");
    let first: String = redis::cmd("LPOP").arg("q").query(&mut c).unwrap();
    assert_eq!(first, items[0]);
    let last: Vec<String> = redis::cmd("RPOP").arg("q").arg(3).query(&mut c).unwrap();
    assert_eq!(
        last,
        [items[39].clone(), items[38].clone(), items[37].clone()]
    );
    let fifth: String = redis::cmd("LINDEX").arg("q").arg(5).query(&mut c).unwrap();
    assert_eq!(fifth, items[6]);
    let from_end: String = redis::cmd("LINDEX").arg("q").arg(-1).query(&mut c).unwrap();
    assert_eq!(from_end, items[36]);
    let moved: String = redis::cmd("LMOVE")
        .arg("q")
        .arg("q2")
        .arg("LEFT")
        .arg("RIGHT")
        .query(&mut c)
        .unwrap();
    assert_eq!(moved, items[1]);
    let moved: String = redis::cmd("RPOPLPUSH")
        .arg("q")
        .arg("q2")
        .query(&mut c)
        .unwrap();
    assert_eq!(moved, items[36]);
    let popped: (String, String) = redis::cmd("BLPOP").arg("q").arg(0).query(&mut c).unwrap();
    assert_eq!(popped, ("q".to_string(), items[2].clone()));
    let none: Option<String> = redis::cmd("LINDEX")
        .arg("q")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(none, None);
    // Each element read above came from a record fetched ahead (all-cold
    // counts every record as missing): 1 + 3 + 2 + 1 + 1 + 1.
    let elements_read = 9;
    let staged = stat(&mut c, "basalt_cold_reads_staged") - staged_before;
    assert!(
        staged >= elements_read,
        "only {staged} reads used fetched records"
    );
    let rest: Vec<String> = redis::cmd("LRANGE")
        .arg("q")
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    assert_eq!(rest, items[3..36].to_vec());
    // In EXEC: each end's element is fetched before the transaction runs,
    // LINDEX's as the LPOP before it leaves the list.
    let staged_before = stat(&mut c, "basalt_cold_reads_staged");
    let got: (String, String, String) = redis::pipe()
        .atomic()
        .cmd("LPOP")
        .arg("q")
        .cmd("LINDEX")
        .arg("q")
        .arg(0)
        .cmd("RPOP")
        .arg("q")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, (items[3].clone(), items[4].clone(), items[35].clone()));
    let staged = stat(&mut c, "basalt_cold_reads_staged") - staged_before;
    assert!(
        staged >= 3,
        "only {staged} reads used fetched records in EXEC"
    );
    // LMPOP, BLMPOP and BLPOP fetch from the first list that is not empty
    // ("none" does not exist), the one they pop.
    let staged_before = stat(&mut c, "basalt_cold_reads_staged");
    let got: (String, Vec<String>) = redis::cmd("LMPOP")
        .arg(2)
        .arg("none")
        .arg("q")
        .arg("LEFT")
        .arg("COUNT")
        .arg(2)
        .query(&mut c)
        .unwrap();
    assert_eq!(got, ("q".into(), vec![items[4].clone(), items[5].clone()]));
    let got: (String, Vec<String>) = redis::cmd("BLMPOP")
        .arg(0)
        .arg(2)
        .arg("none")
        .arg("q")
        .arg("RIGHT")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, ("q".into(), vec![items[34].clone()]));
    let got: (String, String) = redis::cmd("BLPOP")
        .arg("none")
        .arg("q")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(got, ("q".into(), items[6].clone()));
    let staged = stat(&mut c, "basalt_cold_reads_staged") - staged_before;
    assert!(
        staged >= 4,
        "only {staged} of 4 popped elements came from fetched records"
    );
    // Pops of one list queued in one EXEC: each fetches the element the
    // pops before it leave at that end.
    let staged_before = stat(&mut c, "basalt_cold_reads_staged");
    let got: (String, String, Vec<String>, (String, String)) = redis::pipe()
        .atomic()
        .cmd("LPOP")
        .arg("q")
        .cmd("LPOP")
        .arg("q")
        .cmd("RPOP")
        .arg("q")
        .arg(2)
        .cmd("BLPOP")
        .arg("q")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        got,
        (
            items[7].clone(),
            items[8].clone(),
            vec![items[33].clone(), items[32].clone()],
            ("q".into(), items[9].clone())
        )
    );
    let staged = stat(&mut c, "basalt_cold_reads_staged") - staged_before;
    assert!(
        staged >= 5,
        "only {staged} of 5 elements popped in one EXEC came from fetched records"
    );
}

#[test]
fn sort_by_and_get_keys_of_a_set_are_fetched_ahead() {
    let _serial = serial();
    for io_uring in [true, false] {
        sort_cold_reads(io_uring);
    }
}

fn sort_cold_reads(io_uring: bool) {
    let server = cold_server_with(64 << 10, io_uring);
    let mut c = server.client();
    // Members 0..20; weight_i is a string (20 - i), obj_i a hash.
    for i in 0..20usize {
        let _: () = redis::cmd("SADD").arg("s").arg(i).query(&mut c).unwrap();
        let _: () = redis::cmd("ZADD")
            .arg("z")
            .arg(i)
            .arg(i)
            .query(&mut c)
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg(format!("weight_{i}"))
            .arg(20 - i)
            .query(&mut c)
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg(format!("obj_{i}"))
            .arg("name")
            .arg(value(i, 2))
            .query(&mut c)
            .unwrap();
    }
    let expected: Vec<String> = (0..20).rev().map(|i| value(i, 2)).collect();
    for key in ["s", "z"] {
        let (got, staged): (Vec<String>, u64) = staged_by(
            &mut c,
            redis::cmd("SORT")
                .arg(key)
                .arg("BY")
                .arg("weight_*")
                .arg("GET")
                .arg("obj_*->name"),
        );
        assert_eq!(got, expected, "SORT {key}");
        // 20 weights and 20 fields, all-cold: every one counts as missing.
        assert!(
            staged >= 40,
            "SORT {key}: only {staged} of 40 reads fetched"
        );
    }
    // With LIMIT only the BY keys are fetched; SORT_RO too.
    let (got, staged): (Vec<String>, u64) = staged_by(
        &mut c,
        redis::cmd("SORT_RO")
            .arg("s")
            .arg("BY")
            .arg("weight_*")
            .arg("LIMIT")
            .arg(0)
            .arg(3)
            .arg("GET")
            .arg("obj_*->name"),
    );
    assert_eq!(got, expected[..3]);
    assert!(
        staged >= 20,
        "SORT_RO with LIMIT: only {staged} of 20 weights fetched"
    );
    // A list's elements are read where SORT reads them; its BY keys are not
    // fetched (nothing to check but the reply).
    let _: () = redis::cmd("RPUSH")
        .arg("l")
        .arg(3)
        .arg(1)
        .query(&mut c)
        .unwrap();
    let got: Vec<String> = redis::cmd("SORT")
        .arg("l")
        .arg("BY")
        .arg("weight_*")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, ["3", "1"]);
}

/// Runs `cmd` and returns its reply with how many of the records it read
/// came from bytes fetched ahead (INFO `basalt_cold_reads_staged`).
fn staged_by<T: redis::FromRedisValue>(c: &mut redis::Connection, cmd: &redis::Cmd) -> (T, u64) {
    let before = stat(c, "basalt_cold_reads_staged");
    let reply: T = cmd.query(c).unwrap();
    (reply, stat(c, "basalt_cold_reads_staged") - before)
}

#[test]
fn string_bit_and_hash_field_reads_of_cold_records_are_fetched_ahead() {
    let _serial = serial();
    for io_uring in [true, false] {
        value_cold_reads(io_uring);
    }
}

fn value_cold_reads(io_uring: bool) {
    let server = cold_server_with(64 << 10, io_uring);
    let mut c = server.client();
    let ring_before = stat(&mut c, "basalt_cold_reads_io_uring");
    for i in 0..12 {
        let _: () = redis::cmd("SET")
            .arg(format!("s{i}"))
            .arg(value(i, 1))
            .query(&mut c)
            .unwrap();
    }
    // A bitmap of 12,501 bytes: 25 segments of 512 bytes.
    for bit in [3u64, 700, 4_000, 100_000] {
        let _: i64 = redis::cmd("SETBIT")
            .arg("bm")
            .arg(bit)
            .arg(1)
            .query(&mut c)
            .unwrap();
    }
    let _: () = redis::cmd("HSET")
        .arg("h")
        .arg("f")
        .arg(value(50, 1))
        .arg("n")
        .arg(41)
        .query(&mut c)
        .unwrap();
    let v = |i: usize| value(i, 1);

    // Whole values: each command finds its key's record staged.
    let (got, staged): (String, u64) = staged_by(&mut c, redis::cmd("GETDEL").arg("s0"));
    assert_eq!((got, staged >= 1), (v(0), true), "GETDEL");
    let (got, staged): (String, u64) =
        staged_by(&mut c, redis::cmd("GETEX").arg("s1").arg("PX").arg(600_000));
    assert_eq!((got, staged >= 1), (v(1), true), "GETEX");
    let (got, staged): (String, u64) = staged_by(&mut c, redis::cmd("GETSET").arg("s2").arg("x"));
    assert_eq!((got, staged >= 1), (v(2), true), "GETSET");
    let (got, staged): (String, u64) =
        staged_by(&mut c, redis::cmd("SET").arg("s3").arg("y").arg("GET"));
    assert_eq!((got, staged >= 1), (v(3), true), "SET GET");
    let (got, staged): (usize, u64) = staged_by(&mut c, redis::cmd("STRLEN").arg("s4"));
    assert_eq!((got, staged >= 1), (v(4).len(), true), "STRLEN");
    let (got, staged): (String, u64) =
        staged_by(&mut c, redis::cmd("GETRANGE").arg("s5").arg(2).arg(6));
    assert_eq!(
        (got, staged >= 1),
        (v(5)[2..7].to_string(), true),
        "GETRANGE"
    );
    let (got, staged): (String, u64) =
        staged_by(&mut c, redis::cmd("GETRANGE").arg("s6").arg(-4).arg(-1));
    let tail = v(6)[v(6).len() - 4..].to_string();
    assert_eq!((got, staged >= 1), (tail, true), "GETRANGE from the end");
    let (got, staged): (usize, u64) =
        staged_by(&mut c, redis::cmd("SETRANGE").arg("s7").arg(1).arg("ab"));
    assert_eq!((got, staged >= 1), (v(7).len(), true), "SETRANGE");
    let (got, staged): (usize, u64) =
        staged_by(&mut c, redis::cmd("LCS").arg("s8").arg("s9").arg("LEN"));
    assert!(got > 0, "LCS LEN {got}");
    assert!(staged >= 2, "LCS used {staged} fetched records");
    let (dumped, staged): (Vec<u8>, u64) = staged_by(&mut c, redis::cmd("DUMP").arg("s10"));
    assert!(staged >= 1, "DUMP used {staged} fetched records");
    let _: () = redis::cmd("RESTORE")
        .arg("copy")
        .arg(0)
        .arg(dumped)
        .query(&mut c)
        .unwrap();
    let copy: String = redis::cmd("GET").arg("copy").query(&mut c).unwrap();
    assert_eq!(copy, v(10));
    let s7: String = redis::cmd("GET").arg("s7").query(&mut c).unwrap();
    assert_eq!(&s7[1..3], "ab");

    // Bits: one segment for GETBIT, SETBIT and BITFIELD, two for a range
    // across a boundary, every segment for BITCOUNT and BITPOS.
    let (got, staged): (i64, u64) = staged_by(&mut c, redis::cmd("GETBIT").arg("bm").arg(100_000));
    assert_eq!((got, staged), (1, 1), "GETBIT");
    let (got, staged): (i64, u64) =
        staged_by(&mut c, redis::cmd("SETBIT").arg("bm").arg(50_000).arg(1));
    assert_eq!((got, staged), (0, 1), "SETBIT");
    let (got, staged): (Vec<u8>, u64) =
        staged_by(&mut c, redis::cmd("GETRANGE").arg("bm").arg(510).arg(513));
    assert_eq!((got, staged), (vec![0; 4], 2), "GETRANGE across segments");
    let (got, staged): (Vec<i64>, u64) = staged_by(
        &mut c,
        redis::cmd("BITFIELD")
            .arg("bm")
            .arg("SET")
            .arg("u8")
            .arg("#100")
            .arg(255),
    );
    // The field's segment is read for its old value, then for the write:
    // both times from the one record fetched.
    assert_eq!((got, staged), (vec![0], 2), "BITFIELD SET");
    let (got, staged): (i64, u64) = staged_by(&mut c, redis::cmd("BITCOUNT").arg("bm"));
    assert_eq!(got, 13, "BITCOUNT");
    assert!(
        staged >= 20,
        "BITCOUNT used {staged} fetched segments of 25"
    );
    let (got, staged): (i64, u64) = staged_by(&mut c, redis::cmd("BITPOS").arg("bm").arg(1).arg(1));
    assert_eq!((got, staged >= 1), (700, true), "BITPOS");

    // A bitmap longer than 256 segments (600: 307,200 bytes): its reads
    // are fetched ahead too (a sample of its segments first, all of them
    // then, all-cold finding every one missing).
    for bit in [1u64, 2_000_000, 2_457_599] {
        let _: i64 = redis::cmd("SETBIT")
            .arg("long")
            .arg(bit)
            .arg(1)
            .query(&mut c)
            .unwrap();
    }
    let (got, staged): (i64, u64) = staged_by(&mut c, redis::cmd("BITCOUNT").arg("long"));
    assert_eq!(got, 3, "BITCOUNT of 600 segments");
    assert!(
        staged >= 590,
        "BITCOUNT used {staged} fetched segments of 600"
    );
    let (got, staged): (Vec<u8>, u64) = staged_by(
        &mut c,
        redis::cmd("GETRANGE").arg("long").arg(0).arg(299_999),
    );
    assert_eq!(got.len(), 300_000);
    assert_eq!(got[0], 0b0100_0000, "bit 1");
    assert!(
        staged >= 580,
        "GETRANGE used {staged} fetched segments of 586"
    );
    // BITOP over two long sources fetches both.
    for bit in [5u64, 2_400_000] {
        let _: i64 = redis::cmd("SETBIT")
            .arg("long2")
            .arg(bit)
            .arg(1)
            .query(&mut c)
            .unwrap();
    }
    let (got, staged): (i64, u64) = staged_by(
        &mut c,
        redis::cmd("BITOP")
            .arg("OR")
            .arg("both")
            .arg("long")
            .arg("long2"),
    );
    assert_eq!(got, 307_200, "BITOP's result length");
    assert!(
        staged >= 1150,
        "BITOP used {staged} fetched segments of 1,186"
    );
    let count: i64 = redis::cmd("BITCOUNT").arg("both").query(&mut c).unwrap();
    assert_eq!(count, 5);
    // A BITFIELD that writes fields far apart fetches no more than its
    // fields' own segments (not the 600 between them).
    let (got, staged): (Vec<i64>, u64) = staged_by(
        &mut c,
        redis::cmd("BITFIELD")
            .arg("long")
            .arg("SET")
            .arg("u8")
            .arg(8)
            .arg(255)
            .arg("SET")
            .arg("u8")
            .arg(2_457_592)
            .arg(3),
    );
    assert_eq!(got, vec![0, 1]);
    assert!(staged <= 4, "BITFIELD used {staged} fetched segments");

    // Hash fields.
    let (got, staged): (usize, u64) = staged_by(&mut c, redis::cmd("HSTRLEN").arg("h").arg("f"));
    assert_eq!((got, staged >= 1), (v(50).len(), true), "HSTRLEN");
    let (got, staged): (i64, u64) =
        staged_by(&mut c, redis::cmd("HINCRBY").arg("h").arg("n").arg(1));
    assert_eq!((got, staged >= 1), (42, true), "HINCRBY");
    let (got, staged): ((String, Vec<String>), u64) =
        staged_by(&mut c, redis::cmd("HSCAN").arg("h").arg(0));
    assert_eq!(got.0, "0");
    assert_eq!(got.1.len(), 4, "HSCAN {:?}", got.1);
    assert!(staged >= 2, "HSCAN used {staged} fetched records");
    let (got, staged): (Vec<String>, u64) = staged_by(
        &mut c,
        redis::cmd("HRANDFIELD").arg("h").arg(2).arg("WITHVALUES"),
    );
    assert_eq!(got.len(), 4, "HRANDFIELD {got:?}");
    assert!(staged >= 2, "HRANDFIELD used {staged} fetched records");

    // A hash of more than 128 fields is walked by HSCAN a part at a time:
    // only the fields of each step are fetched, and only those MATCH keeps.
    let mut big = redis::cmd("HSET");
    big.arg("big");
    for i in 0..200 {
        big.arg(format!("f{i}")).arg(i);
    }
    let _: () = big.query(&mut c).unwrap();
    let (mut cursor, mut seen) = (0u64, std::collections::BTreeSet::new());
    for _ in 0..1_000 {
        let ((next, got), staged): ((u64, Vec<String>), u64) =
            staged_by(&mut c, redis::cmd("HSCAN").arg("big").arg(cursor));
        let fields = got.len() as u64 / 2;
        assert!(fields < 200, "a step of {fields} fields");
        assert_eq!(staged, fields, "each field of the step, and only those");
        seen.extend(got.chunks(2).map(|p| p[0].clone()));
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    assert_eq!((cursor, seen.len()), (0, 200), "the scan saw every field");
    let ((_, got), staged): ((u64, Vec<String>), u64) = staged_by(
        &mut c,
        redis::cmd("HSCAN").arg("h").arg(0).arg("MATCH").arg("n"),
    );
    assert_eq!((got.len(), staged), (2, 1), "HSCAN with MATCH");

    // The same reads inside EXEC are fetched before it runs.
    let (got, staged): ((String, i64, usize), u64) = {
        let before = stat(&mut c, "basalt_cold_reads_staged");
        let got = redis::pipe()
            .atomic()
            .cmd("GETRANGE")
            .arg("s11")
            .arg(0)
            .arg(3)
            // A segment no command read or wrote alone (those are kept in
            // the worker's cache, and read there).
            .cmd("GETBIT")
            .arg("bm")
            .arg(80_000)
            .cmd("HSTRLEN")
            .arg("h")
            .arg("f")
            .query(&mut c)
            .unwrap();
        (got, stat(&mut c, "basalt_cold_reads_staged") - before)
    };
    assert_eq!(got, (v(11)[..4].to_string(), 0, v(50).len()));
    assert!(staged >= 3, "EXEC used {staged} fetched records");
    check_ring_use(&mut c, io_uring, ring_before);
}

#[test]
fn get_of_a_cold_segmented_value_is_assembled_off_the_worker_in_pipeline_order() {
    let _serial = serial();
    for io_uring in [true, false] {
        segmented_get(io_uring);
    }
}

fn segmented_get(io_uring: bool) {
    let server = cold_server_with(64 << 10, io_uring);
    let mut c = server.client();
    // Built by ranged writes, 40,000 bytes: a segmented value of 79
    // segments.
    let mut big: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    for (i, chunk) in big.chunks(4_000).enumerate() {
        let _: i64 = redis::cmd("SETRANGE")
            .arg("big")
            .arg(i * 4_000)
            .arg(chunk)
            .query(&mut c)
            .unwrap();
    }
    let staged_before = stat(&mut c, "basalt_cold_reads_staged");
    let ring_before = stat(&mut c, "basalt_cold_reads_io_uring");
    // Each GET answers the value at its turn, though the value is read
    // after the commands behind it have run.
    type Replies = (Vec<u8>, i64, Vec<u8>, Vec<Option<Vec<u8>>>);
    let (first, len, second, both): Replies = redis::pipe()
        .cmd("GET")
        .arg("big")
        // Across two segments: a write of one segment alone is kept in
        // its worker's cache of segments written, and the lone GET below
        // would then read it there rather than from fetched records.
        .cmd("SETRANGE")
        .arg("big")
        .arg(510)
        .arg("XYZW")
        .cmd("GET")
        .arg("big")
        .cmd("MGET")
        .arg("big")
        .arg("none")
        .query(&mut c)
        .unwrap();
    assert_eq!(first, big, "the first GET");
    assert_eq!(len, 40_000);
    big[510..514].copy_from_slice(b"XYZW");
    assert_eq!(second, big, "the GET after the write");
    assert_eq!(both, vec![Some(big.clone()), None]);
    let staged = stat(&mut c, "basalt_cold_reads_staged") - staged_before;
    assert!(
        staged >= 2 * 79,
        "only {staged} segments came from fetched records"
    );
    check_ring_use(&mut c, io_uring, ring_before);
    // A GET alone: its own reads go through the rings (where there are
    // any), and its segments come from them.
    let (ring_before, staged_before) = (
        stat(&mut c, "basalt_cold_reads_io_uring"),
        stat(&mut c, "basalt_cold_reads_staged"),
    );
    let got: Vec<u8> = redis::cmd("GET").arg("big").query(&mut c).unwrap();
    assert_eq!(got, big);
    check_ring_use(&mut c, io_uring, ring_before);
    let staged = stat(&mut c, "basalt_cold_reads_staged") - staged_before;
    assert!(staged >= 79, "only {staged} segments staged for a lone GET");
    // Inside EXEC its segments are fetched before the transaction runs.
    let staged_before = stat(&mut c, "basalt_cold_reads_staged");
    let (got,): (Vec<u8>,) = redis::pipe()
        .atomic()
        .cmd("GET")
        .arg("big")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, big);
    let staged = stat(&mut c, "basalt_cold_reads_staged") - staged_before;
    assert!(staged >= 79, "only {staged} segments fetched for EXEC");
}
