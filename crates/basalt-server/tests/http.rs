//! The HTTP/JSON API through a real HTTP client (reqwest) next to real
//! RESP clients on the same in-process server: keys with versions and
//! conditional requests, collections, SSE subscriptions, metrics, the
//! OpenAPI document, body limits and readiness.

use crate::common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use basalt_server::Config;
use common::http::Http;
use common::{eventually, TestServer};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

fn etag_of(version: i64) -> String {
    format!("\"{version}\"")
}

// ------------------------------------------------------------------ keys

#[test]
fn put_then_get_returns_the_bytes_with_the_version_as_etag() {
    let h = Http::start();
    let mut r = h.redis();
    let (status, etag, body) = h.put("/v1/keys/greeting", b"hello", &[]);
    assert_eq!(status, StatusCode::CREATED);
    let version: i64 = redis::cmd("VERSION").arg("greeting").query(&mut r).unwrap();
    assert!(version > 0);
    assert_eq!(etag.as_deref(), Some(etag_of(version).as_str()));
    assert_eq!(body, json!({ "version": version }));

    let (status, headers, bytes) = h.send(Method::GET, "/v1/keys/greeting", &[], None);
    assert_eq!(status, StatusCode::OK);
    assert_eq!(bytes, b"hello");
    assert_eq!(headers["etag"], etag_of(version).as_str());
    assert_eq!(headers["content-type"], "application/octet-stream");

    let (status, etag2, _) = h.put("/v1/keys/greeting", b"again", &[]);
    assert_eq!(status, StatusCode::OK, "replacing is 200, creating 201");
    let v2: i64 = redis::cmd("VERSION").arg("greeting").query(&mut r).unwrap();
    assert!(v2 > version);
    assert_eq!(etag2.unwrap(), etag_of(v2));
}

#[test]
fn get_with_format_json_shows_key_value_version_and_ttl() {
    let h = Http::start();
    let mut r = h.redis();
    h.put("/v1/keys/plain", b"text", &[]);
    let v: i64 = redis::cmd("VERSION").arg("plain").query(&mut r).unwrap();
    let (s, doc) = h.json(Method::GET, "/v1/keys/plain?format=json", None);
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        doc,
        json!({"key": "plain", "value": "text", "version": v, "ttl_ms": null})
    );

    h.put("/v1/keys/short?ttl=100", b"x", &[]);
    let (_, doc) = h.json(Method::GET, "/v1/keys/short?format=json", None);
    let ttl = doc["ttl_ms"].as_i64().unwrap();
    assert!(ttl > 90_000 && ttl <= 100_000, "{ttl}");

    let _: () = redis::cmd("SET")
        .arg("bin")
        .arg(&[0u8, 159, 146, 150][..])
        .query(&mut r)
        .unwrap();
    let (_, doc) = h.json(Method::GET, "/v1/keys/bin?format=json", None);
    assert_eq!(doc["encoding"], "base64");
    assert_eq!(
        doc["key"], "Ymlu",
        "every byte string of the answer is base64"
    );
    assert_eq!(doc["value"], "AJ+Slg==");
}

#[test]
fn a_missing_key_is_404_and_a_key_of_another_type_is_409_wrongtype() {
    let h = Http::start();
    let mut r = h.redis();
    let (s, v) = h.json(Method::GET, "/v1/keys/nope", None);
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(v, json!({"error": "no such key", "code": "NOT_FOUND"}));

    let _: () = redis::cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("v")
        .query(&mut r)
        .unwrap();
    let (s, v) = h.json(Method::GET, "/v1/keys/h", None);
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(
        v,
        json!({"error": "WRONGTYPE Operation against a key holding the wrong kind of value", "code": "WRONGTYPE"})
    );
    // PUT replaces a value of any type, as SET does.
    let (s, _, _) = h.put("/v1/keys/h", b"now a string", &[]);
    assert_eq!(s, StatusCode::OK);
    let t: String = redis::cmd("TYPE").arg("h").query(&mut r).unwrap();
    assert_eq!(t, "string");
}

#[test]
fn if_match_put_writes_on_the_current_version_and_answers_412_otherwise() {
    let h = Http::start();
    let mut r = h.redis();
    let (_, etag, _) = h.put("/v1/keys/doc", b"v1", &[]);
    let etag = etag.unwrap();
    let current: i64 = redis::cmd("VERSION").arg("doc").query(&mut r).unwrap();

    let (s, h412, body) = h.put("/v1/keys/doc", b"stale", &[("if-match", "\"999999\"")]);
    assert_eq!(s, StatusCode::PRECONDITION_FAILED);
    assert_eq!(h412.unwrap(), etag, "the 412 carries the current version");
    assert_eq!(
        body,
        json!({"error": format!("the key's version is {current}"), "code": "PRECONDITION_FAILED", "version": current})
    );
    let v: String = redis::cmd("GET").arg("doc").query(&mut r).unwrap();
    assert_eq!(v, "v1", "nothing was written");

    let (s, new_etag, _) = h.put("/v1/keys/doc", b"v2", &[("if-match", &etag)]);
    assert_eq!(s, StatusCode::OK);
    assert_ne!(new_etag.unwrap(), etag);
    let v: String = redis::cmd("GET").arg("doc").query(&mut r).unwrap();
    assert_eq!(v, "v2");

    // If-Match on a key that does not exist never holds.
    let (s, _, body) = h.put("/v1/keys/absent", b"x", &[("if-match", "*")]);
    assert_eq!(s, StatusCode::PRECONDITION_FAILED);
    assert_eq!(body["version"], 0);
}

#[test]
fn if_none_match_star_creates_only() {
    let h = Http::start();
    let (s, _, _) = h.put("/v1/keys/once", b"first", &[("if-none-match", "*")]);
    assert_eq!(s, StatusCode::CREATED);
    let (s, etag, body) = h.put("/v1/keys/once", b"second", &[("if-none-match", "*")]);
    assert_eq!(s, StatusCode::PRECONDITION_FAILED);
    assert_eq!(body["code"], "PRECONDITION_FAILED");
    assert_eq!(etag.unwrap(), etag_of(body["version"].as_i64().unwrap()));
    assert_eq!(h.get("/v1/keys/once").1, b"first");
}

#[test]
fn delete_honours_if_match_and_reports_missing_keys() {
    let h = Http::start();
    let mut r = h.redis();
    let (_, etag, _) = h.put("/v1/keys/gone", b"x", &[]);
    let (s, _, _) = h.send(
        Method::DELETE,
        "/v1/keys/gone",
        &[("if-match", "\"12345\"")],
        None,
    );
    assert_eq!(s, StatusCode::PRECONDITION_FAILED);
    let n: i64 = redis::cmd("EXISTS").arg("gone").query(&mut r).unwrap();
    assert_eq!(n, 1);
    let (s, _, body) = h.send(
        Method::DELETE,
        "/v1/keys/gone",
        &[("if-match", &etag.unwrap())],
        None,
    );
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert!(body.is_empty());
    let n: i64 = redis::cmd("EXISTS").arg("gone").query(&mut r).unwrap();
    assert_eq!(n, 0);
    let (s, v) = h.json(Method::DELETE, "/v1/keys/gone", None);
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(v["code"], "NOT_FOUND");
    // DELETE removes any type (DEL).
    let _: () = redis::cmd("SADD").arg("s").arg("m").query(&mut r).unwrap();
    assert_eq!(
        h.send(Method::DELETE, "/v1/keys/s", &[], None).0,
        StatusCode::NO_CONTENT
    );
}

#[test]
fn head_answers_existence_and_etag_without_a_body_and_get_answers_304_when_unchanged() {
    let h = Http::start();
    let (_, etag, _) = h.put("/v1/keys/k", b"12345", &[]);
    let etag = etag.unwrap();
    let (s, headers, body) = h.send(Method::HEAD, "/v1/keys/k", &[], None);
    assert_eq!(s, StatusCode::OK);
    assert_eq!(headers["etag"], etag.as_str());
    assert_eq!(headers["content-length"], "5");
    assert!(body.is_empty());
    assert_eq!(
        h.send(Method::HEAD, "/v1/keys/nothing", &[], None).0,
        StatusCode::NOT_FOUND
    );

    let (s, headers, body) = h.send(Method::GET, "/v1/keys/k", &[("if-none-match", &etag)], None);
    assert_eq!(s, StatusCode::NOT_MODIFIED);
    assert_eq!(headers["etag"], etag.as_str());
    assert!(body.is_empty());
    let (s, _, _) = h.send(
        Method::GET,
        "/v1/keys/k",
        &[("if-none-match", "\"999999\"")],
        None,
    );
    assert_eq!(s, StatusCode::OK);
}

#[test]
fn binary_keys_and_values_round_trip_through_percent_encoding() {
    let h = Http::start();
    let mut r = h.redis();
    let key: &[u8] = b"a/b \x00\xff%";
    let value: Vec<u8> = (0..=255u8).collect();
    let (s, _, _) = h.put("/v1/keys/a%2Fb%20%00%FF%25", &value, &[]);
    assert_eq!(s, StatusCode::CREATED);
    let got: Vec<u8> = redis::cmd("GET").arg(key).query(&mut r).unwrap();
    assert_eq!(got, value, "HTTP write, RESP read");
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(b"\xfe\x00".as_slice())
        .query(&mut r)
        .unwrap();
    assert_eq!(
        h.get("/v1/keys/a%2Fb%20%00%FF%25").1,
        b"\xfe\x00",
        "RESP write, HTTP read"
    );
    let (s, v) = h.json(Method::GET, "/v1/keys/bad%zz", None);
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["code"], "BAD_REQUEST");
}

#[test]
fn resp_and_http_see_each_others_writes_in_every_database() {
    let h = Http::start();
    let mut r = h.redis();
    let _: () = redis::cmd("SET")
        .arg("from-resp")
        .arg("r")
        .arg("EX")
        .arg(50)
        .query(&mut r)
        .unwrap();
    let (_, doc) = h.json(Method::GET, "/v1/keys/from-resp?format=json", None);
    assert_eq!(doc["value"], "r");
    assert!(doc["ttl_ms"].as_i64().unwrap() > 40_000);
    h.put("/v1/keys/from-http", b"h", &[]);
    let v: String = redis::cmd("GET").arg("from-http").query(&mut r).unwrap();
    assert_eq!(v, "h");

    let (s, _, _) = h.put("/v1/keys/elsewhere?db=3", b"three", &[]);
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(h.get("/v1/keys/elsewhere").0, StatusCode::NOT_FOUND);
    let _: () = redis::cmd("SELECT").arg(3).query(&mut r).unwrap();
    let v: String = redis::cmd("GET").arg("elsewhere").query(&mut r).unwrap();
    assert_eq!(v, "three");
    let (s, v) = h.json(Method::GET, "/v1/keys/x?db=99", None);
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        v,
        json!({"error": "ERR DB index is out of range", "code": "ERR"})
    );
}

#[test]
fn put_with_ttl_sets_an_expiry_and_a_bad_ttl_is_400() {
    let h = Http::start();
    let mut r = h.redis();
    h.put("/v1/keys/t?ttl=30", b"x", &[]);
    let ttl: i64 = redis::cmd("TTL").arg("t").query(&mut r).unwrap();
    assert!(ttl > 25 && ttl <= 30, "{ttl}");
    let (s, _, v) = h.put("/v1/keys/t2?ttl=0", b"x", &[]);
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        v,
        json!({"error": "ERR invalid expire time in 'set' command", "code": "ERR"})
    );
    let (s, _, v) = h.put("/v1/keys/t2?ttl=soon", b"x", &[]);
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["error"], "ERR value is not an integer or out of range");
    let n: i64 = redis::cmd("EXISTS").arg("t2").query(&mut r).unwrap();
    assert_eq!(n, 0, "a refused PUT changes nothing");
}

#[test]
fn if_match_read_modify_write_loses_no_update_against_resp_incr() {
    let h = Http::start();
    let mut r = h.redis();
    h.put("/v1/keys/counter", b"0", &[]);
    let addr = h.server.addr();
    let resp_writer = std::thread::spawn(move || {
        let mut c = redis::Client::open(format!("redis://{addr}/"))
            .unwrap()
            .get_connection()
            .unwrap();
        for _ in 0..100 {
            let _: i64 = redis::cmd("INCR").arg("counter").query(&mut c).unwrap();
        }
    });
    let mut done = 0;
    let mut attempts = 0;
    while done < 100 {
        attempts += 1;
        assert!(attempts < 20_000, "too many conflicts");
        let (_, doc) = h.json(Method::GET, "/v1/keys/counter?format=json", None);
        let n: i64 = doc["value"].as_str().unwrap().parse().unwrap();
        let tag = etag_of(doc["version"].as_i64().unwrap());
        let (s, _, _) = h.put(
            "/v1/keys/counter",
            (n + 1).to_string().as_bytes(),
            &[("if-match", &tag)],
        );
        match s {
            StatusCode::OK => done += 1,
            StatusCode::PRECONDITION_FAILED => {}
            other => panic!("unexpected {other}"),
        }
    }
    resp_writer.join().unwrap();
    let v: i64 = redis::cmd("GET").arg("counter").query(&mut r).unwrap();
    assert_eq!(v, 200, "every INCR and every conditional PUT counted");
}

#[test]
fn scan_walks_keys_by_prefix_with_a_cursor() {
    let h = Http::start();
    let mut r = h.redis();
    for i in 0..40 {
        let _: () = redis::cmd("SET")
            .arg(format!("user:{i}"))
            .arg(i)
            .query(&mut r)
            .unwrap();
    }
    for i in 0..5 {
        let _: () = redis::cmd("SET")
            .arg(format!("other:{i}"))
            .arg(i)
            .query(&mut r)
            .unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg("us*r:x")
        .arg(1)
        .query(&mut r)
        .unwrap();
    let mut seen = BTreeSet::new();
    let mut cursor = "0".to_string();
    for round in 0.. {
        assert!(round < 200, "the scan did not finish");
        let (s, v) = h.json(
            Method::GET,
            &format!("/v1/keys?prefix=user%3A&count=7&cursor={cursor}"),
            None,
        );
        assert_eq!(s, StatusCode::OK);
        for k in v["keys"].as_array().unwrap() {
            seen.insert(k.as_str().unwrap().to_string());
        }
        cursor = v["cursor"].as_str().unwrap().to_string();
        if cursor == "0" {
            break;
        }
    }
    let expected: BTreeSet<String> = (0..40).map(|i| format!("user:{i}")).collect();
    assert_eq!(seen, expected);
    // Glob characters in the prefix are literal.
    let (_, v) = h.json(Method::GET, "/v1/keys?prefix=us*&count=1000", None);
    assert_eq!(v, json!({"keys": ["us*r:x"], "cursor": "0"}));
    let (s, v) = h.json(Method::GET, "/v1/keys?cursor=abc", None);
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["error"], "ERR invalid cursor");
}

// ----------------------------------------------------------- collections

#[test]
fn hash_fields_are_set_read_listed_and_deleted() {
    let h = Http::start();
    let mut r = h.redis();
    let (s, _, v) = h.put("/v1/hashes/user:1/name", b"Ada", &[]);
    assert_eq!((s, v), (StatusCode::CREATED, json!({"created": true})));
    let (s, _, v) = h.put("/v1/hashes/user:1/name", b"Ada L.", &[]);
    assert_eq!((s, v), (StatusCode::OK, json!({"created": false})));
    let _: () = redis::cmd("HSET")
        .arg("user:1")
        .arg("born")
        .arg("1815")
        .query(&mut r)
        .unwrap();
    assert_eq!(
        h.get("/v1/hashes/user:1/name"),
        (StatusCode::OK, b"Ada L.".to_vec())
    );
    let (_, v) = h.json(Method::GET, "/v1/hashes/user:1/born?format=json", None);
    assert_eq!(v, json!({"value": "1815"}));
    let (_, v) = h.json(Method::GET, "/v1/hashes/user:1", None);
    assert_eq!(v, json!({"fields": {"name": "Ada L.", "born": "1815"}}));
    let (_, v) = h.json(Method::GET, "/v1/hashes/user:1?keys", None);
    let mut names: Vec<String> = serde_json::from_value(v["fields"].clone()).unwrap();
    names.sort();
    assert_eq!(names, ["born", "name"]);
    let (s, v) = h.json(Method::GET, "/v1/hashes/user:1/missing", None);
    assert_eq!(
        (s, v["code"].clone()),
        (StatusCode::NOT_FOUND, json!("NOT_FOUND"))
    );
    assert_eq!(
        h.send(Method::DELETE, "/v1/hashes/user:1/born", &[], None)
            .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        h.send(Method::DELETE, "/v1/hashes/user:1/born", &[], None)
            .0,
        StatusCode::NOT_FOUND
    );
    let n: i64 = redis::cmd("HLEN").arg("user:1").query(&mut r).unwrap();
    assert_eq!(n, 1);
    let (_, v) = h.json(Method::GET, "/v1/hashes/nobody", None);
    assert_eq!(v, json!({"fields": {}}), "a missing hash reads as empty");
    h.put("/v1/keys/str", b"x", &[]);
    let (s, v) = h.json(Method::GET, "/v1/hashes/str", None);
    assert_eq!(
        (s, v["code"].clone()),
        (StatusCode::CONFLICT, json!("WRONGTYPE"))
    );
    let (s, _, _) = h.put("/v1/hashes/str/f", b"x", &[]);
    assert_eq!(s, StatusCode::CONFLICT);
}

#[test]
fn set_members_are_added_checked_listed_and_removed() {
    let h = Http::start();
    let mut r = h.redis();
    let (s, _, b) = h.send(
        Method::POST,
        "/v1/sets/tags",
        &[],
        Some(b"raw one".to_vec()),
    );
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        serde_json::from_slice::<Value>(&b).unwrap(),
        json!({"added": 1})
    );
    let (_, v) = h.json(
        Method::POST,
        "/v1/sets/tags",
        Some(json!(["a", "b", "raw one"])),
    );
    assert_eq!(v, json!({"added": 2}));
    let (_, v) = h.json(
        Method::POST,
        "/v1/sets/tags?encoding=base64",
        Some(json!(["/w=="])),
    );
    assert_eq!(v, json!({"added": 1}));
    let is: bool = redis::cmd("SISMEMBER")
        .arg("tags")
        .arg(b"\xff".as_slice())
        .query(&mut r)
        .unwrap();
    assert!(is);
    let (_, v) = h.json(Method::GET, "/v1/sets/tags", None);
    assert_eq!(v["encoding"], "base64", "one member is not UTF-8");
    assert_eq!(v["members"].as_array().unwrap().len(), 4);
    let _: () = redis::cmd("SREM")
        .arg("tags")
        .arg(b"\xff".as_slice())
        .query(&mut r)
        .unwrap();
    let (_, v) = h.json(Method::GET, "/v1/sets/tags", None);
    let mut members: Vec<String> = serde_json::from_value(v["members"].clone()).unwrap();
    members.sort();
    assert_eq!(members, ["a", "b", "raw one"]);
    assert_eq!(
        h.json(Method::GET, "/v1/sets/tags/a", None),
        (StatusCode::OK, json!({"member": true}))
    );
    assert_eq!(
        h.json(Method::GET, "/v1/sets/tags/zzz", None).0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        h.send(Method::DELETE, "/v1/sets/tags/raw%20one", &[], None)
            .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        h.send(Method::DELETE, "/v1/sets/tags/raw%20one", &[], None)
            .0,
        StatusCode::NOT_FOUND
    );
    let n: i64 = redis::cmd("SCARD").arg("tags").query(&mut r).unwrap();
    assert_eq!(n, 2);
    let (s, v) = h.json(Method::POST, "/v1/sets/tags", Some(json!([])));
    assert_eq!(
        (s, v["code"].clone()),
        (StatusCode::BAD_REQUEST, json!("BAD_REQUEST"))
    );
    let (s, _) = h.json(
        Method::POST,
        "/v1/sets/tags",
        Some(json!({"not": "an array"})),
    );
    assert_eq!(s, StatusCode::BAD_REQUEST);
}

#[test]
fn sorted_set_members_are_scored_ranged_and_removed() {
    let h = Http::start();
    let mut r = h.redis();
    let (_, v) = h.json(
        Method::POST,
        "/v1/zsets/board",
        Some(json!({"member": "ann", "score": 10})),
    );
    assert_eq!(v, json!({"added": 1}));
    let (_, v) = h.json(
        Method::POST,
        "/v1/zsets/board",
        Some(json!([{"member": "bob", "score": 2.5}, {"member": "cy", "score": "+inf"}, {"member": "ann", "score": 1}])),
    );
    assert_eq!(v, json!({"added": 2}));
    let s: f64 = redis::cmd("ZSCORE")
        .arg("board")
        .arg("ann")
        .query(&mut r)
        .unwrap();
    assert_eq!(s, 1.0);
    assert_eq!(
        h.json(Method::GET, "/v1/zsets/board/bob", None).1,
        json!({"score": 2.5})
    );
    assert_eq!(
        h.json(Method::GET, "/v1/zsets/board/cy", None).1,
        json!({"score": "inf"})
    );
    assert_eq!(
        h.json(Method::GET, "/v1/zsets/board/nobody", None).0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        h.json(Method::GET, "/v1/zsets/board", None).1,
        json!({"members": ["ann", "bob", "cy"]})
    );
    assert_eq!(
        h.json(
            Method::GET,
            "/v1/zsets/board?start=1&stop=1&withscores=true",
            None
        )
        .1,
        json!({"members": [{"member": "bob", "score": 2.5}]})
    );
    assert_eq!(
        h.json(
            Method::GET,
            "/v1/zsets/board?min=(1&max=%2Binf&withscores=true",
            None
        )
        .1,
        json!({"members": [{"member": "bob", "score": 2.5}, {"member": "cy", "score": "inf"}]})
    );
    let (s, v) = h.json(Method::GET, "/v1/zsets/board?min=x&max=1", None);
    assert_eq!(
        (s, v["error"].clone()),
        (
            StatusCode::BAD_REQUEST,
            json!("ERR min or max is not a float")
        )
    );
    let (s, v) = h.json(
        Method::POST,
        "/v1/zsets/board",
        Some(json!({"member": "x", "score": "high"})),
    );
    assert_eq!(
        (s, v["error"].clone()),
        (
            StatusCode::BAD_REQUEST,
            json!("ERR value is not a valid float")
        )
    );
    assert_eq!(
        h.send(Method::DELETE, "/v1/zsets/board/bob", &[], None).0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        h.send(Method::DELETE, "/v1/zsets/board/bob", &[], None).0,
        StatusCode::NOT_FOUND
    );
    let n: i64 = redis::cmd("ZCARD").arg("board").query(&mut r).unwrap();
    assert_eq!(n, 2);
}

#[test]
fn lists_work_as_queues_from_both_sides() {
    let h = Http::start();
    let mut r = h.redis();
    let (_, v) = h.json(
        Method::POST,
        "/v1/lists/jobs/push",
        Some(json!(["a", "b", "c"])),
    );
    assert_eq!(v, json!({"length": 3}));
    let (_, _, b) = h.send(
        Method::POST,
        "/v1/lists/jobs/push?side=left",
        &[],
        Some(b"z".to_vec()),
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&b).unwrap(),
        json!({"length": 4})
    );
    let all: Vec<String> = redis::cmd("LRANGE")
        .arg("jobs")
        .arg(0)
        .arg(-1)
        .query(&mut r)
        .unwrap();
    assert_eq!(all, ["z", "a", "b", "c"]);
    assert_eq!(
        h.json(Method::GET, "/v1/lists/jobs", None).1,
        json!({"values": ["z", "a", "b", "c"]})
    );
    assert_eq!(
        h.json(Method::GET, "/v1/lists/jobs?start=1&stop=2", None).1,
        json!({"values": ["a", "b"]})
    );
    assert_eq!(
        h.json(Method::GET, "/v1/lists/jobs/length", None).1,
        json!({"length": 4})
    );
    assert_eq!(
        h.json(Method::POST, "/v1/lists/jobs/pop", None).1,
        json!({"values": ["z"]})
    );
    assert_eq!(
        h.json(Method::POST, "/v1/lists/jobs/pop?side=right&count=2", None)
            .1,
        json!({"values": ["c", "b"]})
    );
    assert_eq!(
        h.json(Method::POST, "/v1/lists/jobs/pop?count=5", None).1,
        json!({"values": ["a"]})
    );
    assert_eq!(
        h.json(Method::POST, "/v1/lists/jobs/pop", None).1,
        json!({"values": []})
    );
    assert_eq!(
        h.json(Method::GET, "/v1/lists/jobs/length", None).1,
        json!({"length": 0})
    );
    let (s, v) = h.json(Method::POST, "/v1/lists/jobs/pop?side=middle", None);
    assert_eq!(
        (s, v["code"].clone()),
        (StatusCode::BAD_REQUEST, json!("BAD_REQUEST"))
    );
    let (s, v) = h.json(Method::POST, "/v1/lists/jobs/pop?count=-1", None);
    assert_eq!(
        (s, v["error"].clone()),
        (
            StatusCode::BAD_REQUEST,
            json!("ERR value is out of range, must be positive")
        )
    );
}

#[test]
fn an_http_push_serves_a_resp_client_blocked_in_blpop() {
    let h = Http::start();
    let addr = h.server.addr();
    let waiter = std::thread::spawn(move || {
        let mut c = redis::Client::open(format!("redis://{addr}/"))
            .unwrap()
            .get_connection()
            .unwrap();
        let got: (String, String) = redis::cmd("BLPOP").arg("q").arg(5).query(&mut c).unwrap();
        got
    });
    let mut r = h.redis();
    assert!(eventually(Duration::from_secs(5), || {
        let info: String = redis::cmd("INFO").arg("clients").query(&mut r).unwrap();
        info.contains("blocked_clients:1")
    }));
    let (_, _, b) = h.send(
        Method::POST,
        "/v1/lists/q/push",
        &[],
        Some(b"job-1".to_vec()),
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&b).unwrap(),
        json!({"length": 1})
    );
    assert_eq!(
        waiter.join().unwrap(),
        ("q".to_string(), "job-1".to_string())
    );
}

#[test]
fn an_http_publish_reaches_resp_subscribers_and_counts_them() {
    let h = Http::start();
    let mut sub = h.server.raw();
    sub.cmd(&["SUBSCRIBE", "news"]);
    let (s, _, b) = h.send(
        Method::POST,
        "/v1/publish/news",
        &[],
        Some(b"hello".to_vec()),
    );
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        serde_json::from_slice::<Value>(&b).unwrap(),
        json!({"receivers": 1})
    );
    assert_eq!(
        sub.read(),
        basalt_resp::Frame::Array(vec![
            common::bulk("message"),
            common::bulk("news"),
            common::bulk("hello")
        ])
    );
    assert_eq!(
        h.json(Method::POST, "/v1/publish/nobody", None).1,
        json!({"receivers": 0})
    );
}

// ------------------------------------------------------------------ SSE

/// Reads server-sent events from a streaming response.
struct Events {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl Events {
    async fn open(h: &Http, query: &str) -> Events {
        let resp = h
            .client
            .get(h.url(&format!("/v1/subscribe?{query}")))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        Events {
            resp,
            buf: Vec::new(),
        }
    }

    /// The next event as (name, data JSON), skipping keep-alive comments.
    async fn next(&mut self, within: Duration) -> (String, Value) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let block = String::from_utf8(self.buf[..end].to_vec()).unwrap();
                self.buf.drain(..end + 2);
                let mut name = String::new();
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if name.is_empty() && data.is_empty() {
                    continue;
                }
                return (name, serde_json::from_str(&data).unwrap());
            }
            let chunk = tokio::time::timeout_at(deadline, self.resp.chunk())
                .await
                .expect("no event in time")
                .unwrap()
                .expect("stream ended");
            self.buf.extend_from_slice(&chunk);
        }
    }
}

fn numsub(r: &mut redis::Connection, channel: &str) -> i64 {
    let v: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(r)
        .unwrap();
    v.1
}

#[test]
fn an_sse_stream_gets_a_resp_publish_and_a_key_change_within_100_ms() {
    let h = Http::start_with(|c| {
        c.notify_keyspace_events = basalt_server::notify::parse(b"KA").unwrap()
    });
    let mut r = h.redis();
    h.rt.block_on(async {
        let mut ev = Events::open(&h, "channel=news&channel=__keyspace%400__%3Awatched&pattern=logs.*").await;
        assert_eq!(ev.next(Duration::from_secs(5)).await, ("subscribe".into(), json!({"channel": "news", "count": 1})));
        assert_eq!(
            ev.next(Duration::from_secs(5)).await,
            ("subscribe".into(), json!({"channel": "__keyspace@0__:watched", "count": 2}))
        );
        assert_eq!(
            ev.next(Duration::from_secs(5)).await,
            ("psubscribe".into(), json!({"channel": "logs.*", "count": 3}))
        );

        let n: i64 = redis::cmd("PUBLISH").arg("news").arg("extra!").query(&mut r).unwrap();
        assert_eq!(n, 1);
        let t = Instant::now();
        let got = ev.next(Duration::from_secs(5)).await;
        assert!(t.elapsed() < Duration::from_millis(100), "{:?}", t.elapsed());
        assert_eq!(got, ("message".into(), json!({"channel": "news", "message": "extra!"})));

        let _: () = redis::cmd("SET").arg("watched").arg("1").query(&mut r).unwrap();
        let t = Instant::now();
        let got = ev.next(Duration::from_secs(5)).await;
        assert!(t.elapsed() < Duration::from_millis(100), "{:?}", t.elapsed());
        assert_eq!(got, ("message".into(), json!({"channel": "__keyspace@0__:watched", "message": "set"})));

        let _: i64 = redis::cmd("PUBLISH").arg("logs.db").arg(b"\xff\x00".as_slice()).query(&mut r).unwrap();
        assert_eq!(
            ev.next(Duration::from_secs(5)).await,
            (
                "pmessage".into(),
                json!({"pattern": "bG9ncy4q", "channel": "bG9ncy5kYg==", "message": "/wA=", "encoding": "base64"})
            )
        );
    });
    let (s, v) = h.json(Method::GET, "/v1/subscribe", None);
    assert_eq!(
        (s, v["code"].clone()),
        (StatusCode::BAD_REQUEST, json!("BAD_REQUEST"))
    );
}

#[test]
fn an_sse_client_that_goes_away_is_unsubscribed() {
    let h = Http::start();
    let mut r = h.redis();
    h.rt.block_on(async {
        let mut ev = Events::open(&h, "channel=leaving").await;
        ev.next(Duration::from_secs(5)).await;
        assert_eq!(numsub(&mut r, "leaving"), 1);
        let n: i64 = redis::cmd("PUBLISH")
            .arg("leaving")
            .arg("x")
            .query(&mut r)
            .unwrap();
        assert_eq!(n, 1, "the HTTP subscriber counts as a receiver");
        drop(ev);
    });
    assert!(
        eventually(Duration::from_secs(5), || numsub(&mut r, "leaving") == 0),
        "PUBSUB NUMSUB did not drop to 0"
    );
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut r).unwrap();
    assert_eq!(
        list.lines().count(),
        1,
        "stream clients are not listed: {list}"
    );
}

#[test]
fn an_sse_client_that_stops_reading_is_dropped_at_the_pubsub_limit() {
    let h = Http::start_with(|c| {
        c.client_output_buffer_limit = c
            .client_output_buffer_limit
            .parse_update("pubsub 256kb 0 0")
            .unwrap()
    });
    let mut r = h.redis();
    // A raw socket that sends the request and then never reads.
    let addr: SocketAddr = h.base.trim_start_matches("http://").parse().unwrap();
    let mut stalled = std::net::TcpStream::connect(addr).unwrap();
    stalled
        .write_all(b"GET /v1/subscribe?channel=firehose HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || numsub(
        &mut r, "firehose"
    ) == 1));
    let payload = vec![b'x'; 64 << 10];
    let mut published = 0;
    while numsub(&mut r, "firehose") == 1 {
        published += 1;
        assert!(published < 2000, "the stalled stream was never dropped");
        let _: i64 = redis::cmd("PUBLISH")
            .arg("firehose")
            .arg(&payload)
            .query(&mut r)
            .unwrap();
    }
    let info: String = redis::cmd("INFO").arg("stats").query(&mut r).unwrap();
    assert!(
        info.contains("client_output_buffer_limit_disconnections:1"),
        "{info}"
    );
    let mut sink = [0u8; 16];
    let _ = stalled.read(&mut sink);
}

// -------------------------------------------------------------- metrics

#[test]
fn metrics_expose_the_named_families_and_count_commands_and_requests() {
    let h = Http::start();
    let mut r = h.redis();
    let _: () = redis::cmd("SET").arg("m").arg("1").query(&mut r).unwrap();
    for _ in 0..3 {
        let _: String = redis::cmd("GET").arg("m").query(&mut r).unwrap();
    }
    h.get("/v1/keys/missing");
    let (s, headers, body) = h.send(Method::GET, "/metrics", &[], None);
    assert_eq!(s, StatusCode::OK);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = String::from_utf8(body).unwrap();
    for needle in [
        "basalt_commands_total{command=\"get\"} 3\n",
        "basalt_commands_total{command=\"set\"} 1\n",
        "basalt_command_duration_seconds_total{command=\"get\"} ",
        "basalt_keys{db=\"0\"} 1\n",
        "basalt_memory_rss_bytes ",
        "basalt_memory_index_bytes ",
        "basalt_disk_live_bytes ",
        "basalt_disk_dead_bytes ",
        "basalt_compactions_total ",
        "basalt_connected_clients 1\n",
        "basalt_loading 0\n",
        "basalt_http_requests_total{method=\"GET\",route=\"/v1/keys/{key}\",status=\"404\"} 1\n",
        "# TYPE basalt_commands_total counter\n",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    let _: String = redis::cmd("GET").arg("m").query(&mut r).unwrap();
    let text = String::from_utf8(h.get("/metrics").1).unwrap();
    assert!(text.contains("basalt_commands_total{command=\"get\"} 4\n"));
}

#[test]
fn info_commandstats_counts_calls_failures_and_rejections_and_resetstat_clears_them() {
    let h = Http::start();
    let mut raw = h.server.raw();
    raw.cmd(&["SET", "s", "text"]);
    raw.cmd(&["GET", "s"]);
    raw.cmd(&["GET", "s"]);
    raw.cmd(&["GET"]);
    raw.cmd(&["INCR", "s"]);
    let info = raw.cmd_text(&["INFO", "commandstats"]);
    assert!(info.contains("# Commandstats\r\n"), "{info}");
    let line = |name: &str| {
        info.lines()
            .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
            .unwrap_or_else(|| panic!("no cmdstat_{name} in {info}"))
            .to_string()
    };
    let get = line("get");
    assert!(get.starts_with("cmdstat_get:calls=2,usec="), "{get}");
    assert!(get.ends_with(",rejected_calls=1,failed_calls=0"), "{get}");
    assert!(line("incr").ends_with(",rejected_calls=0,failed_calls=1"));
    assert!(line("set").contains("usec_per_call="));
    assert!(
        !raw.cmd_text(&["INFO"]).contains("Commandstats"),
        "not in the default set"
    );
    assert!(raw.cmd_text(&["INFO", "all"]).contains("cmdstat_get:"));
    raw.cmd(&["CONFIG", "RESETSTAT"]);
    let info = raw.cmd_text(&["INFO", "commandstats"]);
    assert!(!info.contains("cmdstat_get"), "{info}");
}

// ----------------------------------------------- openapi, limits, errors

#[test]
fn the_openapi_document_parses_and_names_every_route() {
    let h = Http::start();
    let (s, doc) = h.json(Method::GET, "/v1/openapi.json", None);
    assert_eq!(s, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.0"));
    let mut documented = BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops
            .as_object()
            .unwrap()
            .keys()
            .filter(|m| *m != "parameters")
        {
            documented.insert((method.clone(), path.clone()));
        }
    }
    let served: BTreeSet<(String, String)> = basalt_server::http::routes()
        .into_iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented, served);
    // And every documented route answers (not the router's 404).
    for (method, path) in &served {
        let path = path
            .replace("{key}", "k")
            .replace("{field}", "f")
            .replace("{member}", "m")
            .replace("{channel}", "c");
        if path == "/v1/subscribe" {
            continue;
        }
        let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let (s, _, b) = h.send(m, &path, &[], Some(b"1".to_vec()));
        let routed =
            s != StatusCode::NOT_FOUND || !String::from_utf8_lossy(&b).contains("no such route");
        assert!(routed, "{method} {path} is not routed");
    }
}

#[test]
fn a_body_past_the_limit_is_413_and_changes_nothing() {
    let h = Http::start_with(|c| c.http_max_body = 1024);
    let mut r = h.redis();
    let (s, _, v) = h.put("/v1/keys/big", &vec![b'x'; 2000], &[]);
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(v["code"], "PAYLOAD_TOO_LARGE");
    let n: i64 = redis::cmd("EXISTS").arg("big").query(&mut r).unwrap();
    assert_eq!(n, 0);
    let (s, _, _) = h.put("/v1/keys/big", &vec![b'x'; 1000], &[]);
    assert_eq!(s, StatusCode::CREATED);
}

#[test]
fn unknown_routes_and_methods_answer_json_errors() {
    let h = Http::start();
    let (s, v) = h.json(Method::GET, "/v2/nothing", None);
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(v, json!({"error": "no such route", "code": "NOT_FOUND"}));
    let (s, v) = h.json(Method::PATCH, "/v1/keys/k", None);
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(v["code"], "METHOD_NOT_ALLOWED");
    let (s, v) = h.json(Method::GET, "/health", None);
    assert_eq!((s, v), (StatusCode::OK, json!({"status": "ok"})));
}

/// One HTTP/1.1 request over a plain socket: (status, body).
fn raw_http(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text[9..12].parse().unwrap();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

#[test]
fn ready_is_503_while_loading_and_200_after_and_health_is_always_200() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::ephemeral(dir.path());
    config.http_port = Some(0);
    let mut seen = None;
    let handle = basalt_server::start_with_loading_hook(config, |addr| {
        // The HTTP listener serves; the databases are not loaded yet.
        let addr = addr.unwrap();
        seen = Some((
            addr,
            raw_http(addr, "/ready"),
            raw_http(addr, "/health"),
            raw_http(addr, "/v1/keys/k"),
            raw_http(addr, "/metrics"),
        ));
    })
    .unwrap();
    let (addr, ready, health, key, metrics) = seen.unwrap();
    assert_eq!(ready.0, 503);
    assert_eq!(
        serde_json::from_str::<Value>(&ready.1).unwrap(),
        json!({"error": "LOADING Basalt is loading the dataset in memory", "code": "LOADING"})
    );
    assert_eq!(health.0, 200);
    assert_eq!(key.0, 503);
    assert_eq!(metrics.0, 200);
    assert!(metrics.1.contains("basalt_loading 1\n"));
    assert_eq!(Some(addr), handle.http_addr());
    let (status, body) = raw_http(addr, "/ready");
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"status": "ready"})
    );
    handle.shutdown().unwrap();
}

#[test]
fn ready_turns_503_while_the_server_is_stopping() {
    let h = Http::start();
    assert_eq!(
        h.json(Method::GET, "/ready", None),
        (StatusCode::OK, json!({"status": "ready"}))
    );
    // A RESP connection in the middle of a batch holds the shutdown open.
    let mut sleeper = h.server.raw();
    sleeper.send_cmd(&[b"DEBUG", b"SLEEP", b"1"]);
    std::thread::sleep(Duration::from_millis(100));
    h.server
        .handle
        .as_ref()
        .unwrap()
        .shared()
        .request_shutdown();
    let (s, v) = h.json(Method::GET, "/ready", None);
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        v,
        json!({"error": "the server is shutting down", "code": "SHUTTING_DOWN"})
    );
    assert_eq!(h.json(Method::GET, "/health", None).0, StatusCode::OK);
}

// ------------------------------------------------------------- security

#[test]
fn with_a_password_every_data_route_needs_bearer_or_basic_credentials() {
    use base64::Engine;
    let h = Http::start_with(|c| c.requirepass = Some("secret".into()));
    let basic = |user_pass: &str| {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_pass)
        )
    };
    // No credentials: 401 NOAUTH, with a challenge; nothing is written.
    let (s, hd, b) = h.send(Method::PUT, "/v1/keys/k", &[], Some(b"v".to_vec()));
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(hd["www-authenticate"], "Basic realm=\"basalt\"");
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(v["code"], "NOAUTH");
    // Wrong password, wrong user, a scheme we do not know: 401 WRONGPASS.
    for auth in [
        "Bearer nope".to_string(),
        basic("default:nope"),
        basic("alice:secret"),
        "Digest secret".to_string(),
    ] {
        let (s, _, b) = h.send(Method::GET, "/v1/keys/k", &[("authorization", &auth)], None);
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{auth}");
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["code"], "WRONGPASS", "{auth}");
    }
    // The password as a bearer token or as Basic with or without `default`.
    let (s, _, _) = h.send(
        Method::PUT,
        "/v1/keys/k",
        &[("authorization", "Bearer secret")],
        Some(b"v1".to_vec()),
    );
    assert_eq!(s, StatusCode::CREATED);
    for auth in [basic("default:secret"), basic(":secret")] {
        let (s, _, b) = h.send(Method::GET, "/v1/keys/k", &[("authorization", &auth)], None);
        assert_eq!((s, b), (StatusCode::OK, b"v1".to_vec()), "{auth}");
    }
    // Metrics are data too; health and readiness stay open.
    assert_eq!(h.get("/metrics").0, StatusCode::UNAUTHORIZED);
    assert_eq!(h.get("/health").0, StatusCode::OK);
    assert_eq!(h.get("/ready").0, StatusCode::OK);
    // RESP with the same password sees the HTTP write.
    let addr = h.server.addr();
    let mut r = redis::Client::open(format!("redis://:secret@{addr}"))
        .unwrap()
        .get_connection()
        .unwrap();
    let v: String = redis::cmd("GET").arg("k").query(&mut r).unwrap();
    assert_eq!(v, "v1");
}

/// A non-loopback address of this machine, if it has one.
fn outside_address() -> Option<std::net::IpAddr> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    for probe in ["192.0.2.1:9", "10.255.255.1:9", "8.8.8.8:53"] {
        if sock.connect(probe).is_ok() {
            if let Ok(addr) = sock.local_addr() {
                if !addr.ip().is_loopback() && !addr.ip().is_unspecified() {
                    return Some(addr.ip());
                }
            }
        }
    }
    None
}

#[test]
fn protected_mode_answers_403_denied_to_http_clients_from_other_addresses() {
    let Some(ip) = outside_address() else {
        eprintln!("no non-loopback address: covered by auth::tests only");
        return;
    };
    let h = Http::start_with(|c| c.bind = std::net::IpAddr::from([0, 0, 0, 0]));
    let port = h
        .server
        .handle
        .as_ref()
        .unwrap()
        .http_addr()
        .unwrap()
        .port();
    let outside = format!("http://{ip}:{port}/v1/keys/k");
    let (s, body) = h.rt.block_on(async {
        let r = h.client.get(&outside).send().await.unwrap();
        (r.status(), r.bytes().await.unwrap())
    });
    assert_eq!(s, StatusCode::FORBIDDEN);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["code"], "DENIED");
    // The loopback interface is served.
    let local = format!("http://127.0.0.1:{port}/v1/keys/k");
    let s =
        h.rt.block_on(async { h.client.get(&local).send().await.unwrap().status() });
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[test]
fn config_get_reports_the_bound_http_port_and_zero_when_http_is_off() {
    let h = Http::start();
    let port = h
        .server
        .handle
        .as_ref()
        .unwrap()
        .http_addr()
        .unwrap()
        .port();
    let mut c = h.server.client();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("http-port")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, vec!["http-port".to_string(), port.to_string()]);
    assert_ne!(port, 0);
    let set: redis::RedisResult<String> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("http-port")
        .arg("1234")
        .query(&mut c);
    assert!(set.is_err(), "http-port is read-only: {set:?}");

    let off = TestServer::start();
    let mut c = off.client();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("http-port")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, vec!["http-port".to_string(), "0".to_string()]);
    let size: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("data-file-size")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        size,
        vec!["data-file-size".to_string(), (32u64 << 20).to_string()]
    );
}
