//! Work queues and topics over HTTP (`docs/queues.md`) through a real
//! HTTP client, with RESP clients looking at the same keys: priorities,
//! visibility timeouts and redelivery, tokens acknowledged at most once,
//! nack/touch, dead letters, capacity, delays, long polls, lock, purge,
//! stats, the event stream, topics, restarts, concurrent workers, and
//! workers that keep going while the server is killed with SIGKILL.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::binary::Server;
use common::http::Http;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

impl Http {
    fn post(&self, path: &str, body: &[u8]) -> (StatusCode, Value) {
        let (s, _, b) = self.send(Method::POST, path, &[], Some(body.to_vec()));
        let v = if b.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&b).unwrap()
        };
        (s, v)
    }

    fn push(&self, queue: &str, item: &str, query: &str) -> Value {
        let (s, v) = self.post(
            &format!("/v1/queues/{queue}/items?{query}"),
            item.as_bytes(),
        );
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v
    }

    /// A take: `None` on 204.
    fn take(&self, queue: &str, worker: &str, query: &str) -> Option<Value> {
        let (s, v) = self.post(
            &format!("/v1/queues/{queue}/take?worker={worker}&{query}"),
            b"",
        );
        match s {
            StatusCode::OK => Some(v),
            StatusCode::NO_CONTENT => None,
            other => panic!("take answered {other}: {v}"),
        }
    }

    fn token_op(&self, queue: &str, op: &str, token: &Value) -> (StatusCode, Value) {
        self.post(
            &format!("/v1/queues/{queue}/{op}/{}", token.as_str().unwrap()),
            b"",
        )
    }

    /// Sends a long-poll request, runs `meanwhile` 300 ms later, and
    /// returns the request's JSON answer.
    fn long_poll(&self, method: Method, path: &str, meanwhile: impl FnOnce()) -> Value {
        let request = self.client.request(method, self.url(path)).send();
        let answer = self
            .rt
            .spawn(async move { request.await.unwrap().json::<Value>().await.unwrap() });
        std::thread::sleep(Duration::from_millis(300));
        meanwhile();
        self.rt.block_on(answer).unwrap()
    }

    fn stats(&self, queue: &str) -> Value {
        let (s, v) = self.json(Method::GET, &format!("/v1/queues/{queue}"), None);
        assert_eq!(s, StatusCode::OK, "{v}");
        v
    }
}

fn configure(h: &Http, queue: &str, settings: Value) {
    let (s, v) = h.json(Method::PUT, &format!("/v1/queues/{queue}"), Some(settings));
    assert_eq!(s, StatusCode::OK, "{v}");
}

#[test]
fn higher_priorities_are_served_first_and_each_priority_in_order() {
    let h = Http::start();
    h.push("jobs", "low-1", "priority=0");
    h.push("jobs", "normal-1", "");
    h.push("jobs", "high-1", "priority=2");
    h.push("jobs", "low-2", "priority=0");
    h.push("jobs", "high-2", "priority=2");
    let mut order = Vec::new();
    while let Some(d) = h.take("jobs", "w", "") {
        order.push(d["item"].as_str().unwrap().to_string());
        assert_eq!(d["deliveries"], 1);
    }
    assert_eq!(
        order,
        ["high-1", "high-2", "normal-1", "low-1", "low-2"],
        "priority 2 first, then 1, then 0; oldest first within one"
    );
    // The same keys from RESP: a stream per priority with the group.
    let mut r = h.redis();
    let len: i64 = redis::cmd("XLEN")
        .arg("queue:{jobs}:2")
        .query(&mut r)
        .unwrap();
    assert_eq!(len, 2, "in flight until acknowledged");
    let kind: String = redis::cmd("TYPE")
        .arg("queue:{jobs}:0")
        .query(&mut r)
        .unwrap();
    assert_eq!(kind, "stream");
}

#[test]
fn an_unacknowledged_item_comes_back_after_the_timeout_and_only_the_latest_token_acks() {
    let h = Http::start();
    configure(&h, "q", json!({"visibility_timeout": 0.5}));
    h.push("q", "job", "");
    let first = h.take("q", "a", "").unwrap();
    assert_eq!(h.take("q", "b", ""), None, "invisible while in flight");
    std::thread::sleep(Duration::from_millis(600));
    let second = h.take("q", "b", "").unwrap();
    assert_eq!(second["item"], "job");
    assert_eq!(second["deliveries"], 2);
    assert_eq!(second["id"], first["id"], "the same item");
    assert_ne!(second["token"], first["token"]);

    let (s, v) = h.token_op("q", "ack", &first["token"]);
    assert_eq!(s, StatusCode::CONFLICT, "a late ack after redelivery");
    assert_eq!(v["code"], "STALE_TOKEN");
    assert_eq!(
        h.stats("q")["in_flight"],
        1,
        "the refused ack changed nothing"
    );

    let (s, v) = h.token_op("q", "ack", &second["token"]);
    assert_eq!((s, v), (StatusCode::OK, json!({"acked": true})));
    let (s, _) = h.token_op("q", "ack", &second["token"]);
    assert_eq!(s, StatusCode::CONFLICT, "acknowledged once only");
    let stats = h.stats("q");
    assert_eq!(stats["total"], 0);
    let mut r = h.redis();
    let len: i64 = redis::cmd("XLEN").arg("queue:{q}:1").query(&mut r).unwrap();
    assert_eq!(len, 0, "an acknowledged item is removed");

    let (s, v) = h.post("/v1/queues/q/ack/not-a-token", b"");
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, _) = h.post("/v1/queues/q/ack/7-1-0-1", b"");
    assert_eq!(s, StatusCode::BAD_REQUEST, "priority out of range");
}

#[test]
fn nack_releases_at_once_and_touch_restarts_the_timeout() {
    let h = Http::start();
    configure(&h, "q", json!({"visibility_timeout": 1}));
    h.push("q", "one", "");
    let d = h.take("q", "a", "").unwrap();
    let (s, v) = h.token_op("q", "nack", &d["token"]);
    assert_eq!((s, v), (StatusCode::OK, json!({"released": true})));
    let stats = h.stats("q");
    assert_eq!(
        (stats["ready"].as_i64(), stats["in_flight"].as_i64()),
        (Some(1), Some(0)),
        "a released item counts as ready"
    );
    let again = h.take("q", "b", "").unwrap();
    assert_eq!(again["item"], "one");
    assert_eq!(again["deliveries"], 2, "the count carries over a nack");

    // Touch twice across more than one timeout: never redelivered.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(450));
        let (s, v) = h.token_op("q", "touch", &again["token"]);
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["visible_in_ms"], 1000);
        assert_eq!(h.take("q", "c", ""), None);
    }
    std::thread::sleep(Duration::from_millis(1100));
    let third = h.take("q", "c", "").unwrap();
    assert_eq!(third["deliveries"], 3, "once the touches stop it times out");
    let (s, _) = h.token_op("q", "touch", &again["token"]);
    assert_eq!(s, StatusCode::CONFLICT, "a stale token cannot touch");
}

#[test]
fn items_move_to_the_dead_letters_after_max_deliveries() {
    let h = Http::start();
    configure(
        &h,
        "q",
        json!({"visibility_timeout": 0.1, "max_deliveries": 2}),
    );
    h.push("q", "poison", "priority=2");
    h.push("q", "fine", "priority=0");
    for n in 1..=2 {
        let d = h.take("q", "w", "").unwrap();
        assert_eq!(
            (d["item"].as_str(), d["deliveries"].as_i64()),
            (Some("poison"), Some(n))
        );
        std::thread::sleep(Duration::from_millis(150));
    }
    // The third delivery would exceed the limit: dead-lettered, and the
    // take goes on to the next item.
    let d = h.take("q", "w", "").unwrap();
    assert_eq!(d["item"], "fine");
    let (s, dead) = h.json(Method::GET, "/v1/queues/q/dead", None);
    assert_eq!(s, StatusCode::OK);
    let items = dead["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["item"], "poison");
    assert_eq!(items[0]["deliveries"], 2);
    assert_eq!(items[0]["priority"], 2);
    assert_eq!(items[0]["worker"], "w");
    let stats = h.stats("q");
    assert_eq!(stats["dead"], 1);
    assert_eq!(stats["total"], 1, "only `fine` is left, in flight");
    let (s, v) = h.post("/v1/queues/q/purge?dead=true", b"");
    assert_eq!((s, v), (StatusCode::OK, json!({"purged": 1})));
    assert_eq!(h.stats("q")["dead"], 0);
}

#[test]
fn a_full_queue_refuses_pushes_with_507_and_pushes_nothing() {
    let h = Http::start();
    configure(&h, "q", json!({"capacity": 3}));
    h.push("q", "1", "");
    h.push("q", "2", "delay=60");
    let (s, _, b) = h.send(
        Method::POST,
        "/v1/queues/q/items",
        &[("content-type", "application/json")],
        Some(br#"["3", "4"]"#.to_vec()),
    );
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(s, StatusCode::INSUFFICIENT_STORAGE);
    assert_eq!(v["code"], "QUEUE_FULL");
    assert_eq!(v["capacity"], 3);
    assert_eq!(h.stats("q")["total"], 2, "all or nothing");
    h.push("q", "3", "");
    // Acknowledging makes room.
    let d = h.take("q", "w", "").unwrap();
    h.token_op("q", "ack", &d["token"]);
    h.push("q", "4", "");
    assert_eq!(h.stats("q")["total"], 3);
}

#[test]
fn a_delayed_item_is_taken_only_once_due_and_wakes_a_long_poll() {
    let h = Http::start();
    let v = h.push("q", "later", "delay=1&priority=2");
    assert_eq!(v["delayed"], true);
    let stats = h.stats("q");
    assert_eq!(
        (stats["delayed"].as_i64(), stats["ready"].as_i64()),
        (Some(1), Some(0))
    );
    assert_eq!(stats["priorities"][0]["delayed"], 1);
    assert_eq!(h.take("q", "w", ""), None, "not due yet");
    let t = Instant::now();
    let d = h.take("q", "w", "wait=5").unwrap();
    let waited = t.elapsed();
    assert_eq!(d["item"], "later");
    assert_eq!(d["priority"], 2);
    assert!(
        waited >= Duration::from_millis(700) && waited < Duration::from_millis(2500),
        "taken when due, not at the end of the wait: {waited:?}"
    );
}

#[test]
fn a_long_poll_take_is_woken_by_a_push_over_http_or_resp() {
    let h = Http::start();
    h.push("q", "warm-up", "");
    let d = h.take("q", "w", "").unwrap();
    h.token_op("q", "ack", &d["token"]);

    let take = "/v1/queues/q/take?worker=w&wait=10";
    let t = Instant::now();
    let got = h.long_poll(Method::POST, take, || {
        h.push("q", "hello", "");
    });
    assert_eq!(got["item"], "hello");
    assert!(t.elapsed() < Duration::from_secs(5), "woken, not timed out");

    // An XADD from a RESP client onto the queue's stream wakes it too.
    let mut r = h.redis();
    let t = Instant::now();
    let got = h.long_poll(Method::POST, take, || {
        let _: String = redis::cmd("XADD")
            .arg("queue:{q}:1")
            .arg("*")
            .arg("item")
            .arg("from-resp")
            .query(&mut r)
            .unwrap();
    });
    assert_eq!(got["item"], "from-resp");
    assert!(t.elapsed() < Duration::from_secs(5));

    let t = Instant::now();
    assert_eq!(h.take("q", "w", "wait=0.3"), None);
    assert!(t.elapsed() >= Duration::from_millis(300), "waited it out");
}

#[test]
fn a_locked_queue_delivers_nothing_until_unlocked() {
    let h = Http::start();
    let (s, _) = h.post("/v1/queues/q/lock", b"");
    assert_eq!(s, StatusCode::NOT_FOUND, "no such queue yet");
    h.push("q", "x", "");
    let (s, v) = h.post("/v1/queues/q/lock", b"");
    assert_eq!((s, v), (StatusCode::OK, json!({"locked": true})));
    assert_eq!(h.take("q", "w", ""), None);
    h.push("q", "y", "");
    assert_eq!(h.stats("q")["locked"], true);
    assert_eq!(h.stats("q")["ready"], 2, "pushes are still taken");
    let took = h.long_poll(Method::POST, "/v1/queues/q/take?worker=w&wait=10", || {
        let (s, _) = h.post("/v1/queues/q/unlock", b"");
        assert_eq!(s, StatusCode::OK);
    });
    assert_eq!(took["item"], "x", "an unlock wakes the long poll");
    assert_eq!(h.stats("q")["locked"], false);
}

#[test]
fn purge_removes_one_priority_or_everything() {
    let h = Http::start();
    h.push("q", "a", "priority=0");
    h.push("q", "b", "priority=0&delay=60");
    h.push("q", "c", "priority=2");
    h.push("q", "d", "priority=2&delay=60");
    let taken = h.take("q", "w", "").unwrap();
    assert_eq!(taken["item"], "c");
    let (s, v) = h.post("/v1/queues/q/purge?priority=2", b"");
    assert_eq!((s, v), (StatusCode::OK, json!({"purged": 2})));
    let (s, _) = h.token_op("q", "ack", &taken["token"]);
    assert_eq!(s, StatusCode::CONFLICT, "a purged delivery cannot be acked");
    let stats = h.stats("q");
    assert_eq!(
        (stats["ready"].as_i64(), stats["delayed"].as_i64()),
        (Some(1), Some(1))
    );
    let (_, v) = h.post("/v1/queues/q/purge", b"");
    assert_eq!(v, json!({"purged": 2}));
    assert_eq!(h.stats("q")["total"], 0);
    h.push("q", "e", "priority=2");
    assert_eq!(
        h.take("q", "w", "").unwrap()["item"],
        "e",
        "usable after a purge"
    );
    let (s, _) = h.post("/v1/queues/q/purge?priority=9", b"");
    assert_eq!(s, StatusCode::BAD_REQUEST);
}

#[test]
fn stats_list_and_delete_describe_the_queues() {
    let h = Http::start();
    assert_eq!(
        h.json(Method::GET, "/v1/queues/none", None).0,
        StatusCode::NOT_FOUND
    );
    configure(
        &h,
        "b",
        json!({"capacity": 10, "visibility_timeout": 5, "max_deliveries": 0}),
    );
    h.push("a", "x", "priority=2");
    h.push("a", "y", "");
    h.push("a", "z", "");
    h.take("a", "alice", "").unwrap();
    h.take("a", "bob", "").unwrap();
    let (_, list) = h.json(Method::GET, "/v1/queues", None);
    assert_eq!(list, json!({"queues": ["a", "b"]}));
    let a = h.stats("a");
    assert_eq!(
        (
            a["ready"].as_i64(),
            a["in_flight"].as_i64(),
            a["total"].as_i64()
        ),
        (Some(1), Some(2), Some(3))
    );
    assert_eq!(
        a["priorities"][0],
        json!({"priority": 2, "ready": 0, "in_flight": 1, "delayed": 0})
    );
    assert_eq!(
        a["priorities"][1],
        json!({"priority": 1, "ready": 1, "in_flight": 1, "delayed": 0})
    );
    let workers: Vec<(&str, i64)> = a["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["worker"].as_str().unwrap(),
                w["in_flight"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(workers, [("alice", 1), ("bob", 1)]);
    assert_eq!(
        h.stats("b")["settings"],
        json!({"capacity": 10, "visibility_timeout": 5.0, "max_deliveries": 0})
    );
    let (s, v) = h.json(Method::PUT, "/v1/queues/b", Some(json!({"visibility": 1})));
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, _) = h.json(
        Method::PUT,
        "/v1/queues/b",
        Some(json!({"visibility_timeout": 0})),
    );
    assert_eq!(s, StatusCode::BAD_REQUEST);

    let (s, v) = h.json(Method::DELETE, "/v1/queues/a", None);
    assert_eq!((s, v), (StatusCode::OK, json!({"deleted": true})));
    let mut r = h.redis();
    let keys: Vec<String> = redis::cmd("KEYS").arg("queue:{a}*").query(&mut r).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    let (_, list) = h.json(Method::GET, "/v1/queues", None);
    assert_eq!(list, json!({"queues": ["b"]}));
}

#[test]
fn bad_requests_are_clear_json_errors_and_change_nothing() {
    let h = Http::start();
    let (s, v) = h.post("/v1/queues/q/take", b"");
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(v["error"].as_str().unwrap().contains("worker"), "{v}");
    let (s, _) = h.post("/v1/queues/q/items?priority=3", b"x");
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = h.post("/v1/queues/q/items?delay=-1", b"x");
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = h.post("/v1/queues/q/take?worker=w&wait=301", b"");
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = h.post("/v1/queues//items", b"x");
    assert_eq!(s, StatusCode::BAD_REQUEST, "an empty queue name");
    assert_eq!(
        h.json(Method::GET, "/v1/queues", None).1,
        json!({"queues": []})
    );

    // A key of the queue holding another type: 409 WRONGTYPE, not a crash.
    let mut r = h.redis();
    let _: () = redis::cmd("SET")
        .arg("queue:{w}:1")
        .arg("oops")
        .query(&mut r)
        .unwrap();
    let (s, v) = h.post("/v1/queues/w/items", b"x");
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["code"], "WRONGTYPE");
    let (s, _) = h.post("/v1/queues/w/take?worker=a", b"");
    assert_eq!(s, StatusCode::CONFLICT);
    let v: String = redis::cmd("GET").arg("queue:{w}:1").query(&mut r).unwrap();
    assert_eq!(v, "oops");
}

#[test]
fn the_event_stream_sends_items_up_to_the_prefetch_and_the_next_after_an_ack() {
    let h = Http::start();
    for i in 0..3 {
        h.push("q", &format!("item-{i}"), "");
    }
    let client = h.client.clone();
    let url = h.url("/v1/queues/q/events?worker=sse&prefetch=2");
    let events: Vec<Value> = h.rt.block_on(async {
        let mut resp = client.get(&url).send().await.unwrap();
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let mut buf = String::new();
        let mut events = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut acked = false;
        while events.len() < 3 {
            let chunk = tokio::time::timeout_at(deadline, resp.chunk())
                .await
                .expect("events in time")
                .unwrap()
                .unwrap();
            buf.push_str(std::str::from_utf8(&chunk).unwrap());
            while let Some(end) = buf.find("\n\n") {
                let block: String = buf.drain(..end + 2).collect();
                if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) {
                    assert!(block.starts_with("event: item"), "{block}");
                    events.push(serde_json::from_str::<Value>(data).unwrap());
                }
            }
            if events.len() == 2 && !acked {
                // Two in flight: the third waits for an ack.
                tokio::time::sleep(Duration::from_millis(300)).await;
                assert!(buf.is_empty(), "no third event before an ack: {buf}");
                let token = events[0]["token"].as_str().unwrap();
                let ack = client
                    .post(format!("{}/v1/queues/q/ack/{token}", h.base))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(ack.status(), StatusCode::OK);
                acked = true;
            }
        }
        events
    });
    let items: Vec<&str> = events.iter().map(|e| e["item"].as_str().unwrap()).collect();
    assert_eq!(items, ["item-0", "item-1", "item-2"]);
    assert_eq!(h.stats("q")["workers"][0]["in_flight"], 2);
}

#[test]
fn a_topic_keeps_its_last_messages_by_index_and_long_polls_for_new_ones() {
    let h = Http::start();
    for i in 1..=5 {
        let (s, v) = h.post("/v1/topics/news?retention=3", format!("m{i}").as_bytes());
        assert_eq!((s, v), (StatusCode::CREATED, json!({"index": i})));
    }
    let (s, v) = h.json(Method::GET, "/v1/topics/news?from=1", None);
    assert_eq!(s, StatusCode::OK);
    let got: Vec<(i64, &str)> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["index"].as_i64().unwrap(), m["message"].as_str().unwrap()))
        .collect();
    assert_eq!(got, [(3, "m3"), (4, "m4"), (5, "m5")], "the last 3 kept");
    assert_eq!(
        (v["first"].as_i64(), v["next"].as_i64()),
        (Some(3), Some(6))
    );
    let (_, v) = h.json(Method::GET, "/v1/topics/news?from=4&count=1", None);
    assert_eq!(v["messages"][0]["message"], "m4");
    assert_eq!(v["next"], 5);

    let t = Instant::now();
    let v = h.long_poll(Method::GET, "/v1/topics/news?from=6&wait=10", || {
        let (s, _) = h.post("/v1/topics/news", b"m6");
        assert_eq!(s, StatusCode::CREATED);
    });
    assert_eq!(
        v["messages"][0],
        json!({"index": 6, "message": "m6", "time": v["messages"][0]["time"]})
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    let (_, v) = h.json(Method::GET, "/v1/topics/news?from=7&wait=0.2", None);
    assert_eq!(v["messages"], json!([]));
    assert_eq!(v["next"], 7);
}

#[test]
fn queues_survive_a_restart_with_their_deliveries_and_tokens() {
    let h = Http::start();
    configure(&h, "q", json!({"capacity": 100, "visibility_timeout": 60}));
    h.push("q", "a", "priority=2");
    h.push("q", "b", "");
    h.push("q", "c", "delay=60");
    let d = h.take("q", "w", "").unwrap();
    let before = h.stats("q");
    let h = h.restart();
    let mut after = h.stats("q");
    for w in after["workers"].as_array_mut().unwrap() {
        w["idle_ms"] = json!(0);
    }
    let mut before = before;
    for w in before["workers"].as_array_mut().unwrap() {
        w["idle_ms"] = json!(0);
    }
    assert_eq!(after, before);
    let (s, _) = h.token_op("q", "ack", &d["token"]);
    assert_eq!(s, StatusCode::OK, "a token outlives a restart");
    assert_eq!(h.take("q", "w", "").unwrap()["item"], "b");
}

#[test]
fn concurrent_workers_get_each_item_once() {
    let h = Arc::new(Http::start());
    let n = 200;
    let items: Vec<String> = (0..n).map(|i| format!("\"job-{i}\"")).collect();
    let (s, _, _) = h.send(
        Method::POST,
        "/v1/queues/q/items",
        &[("content-type", "application/json")],
        Some(format!("[{}]", items.join(",")).into_bytes()),
    );
    assert_eq!(s, StatusCode::CREATED);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (h, seen) = (h.clone(), seen.clone());
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                while Instant::now() < deadline {
                    let Some(d) = h.take("q", &format!("w{w}"), "") else {
                        return;
                    };
                    let (s, _) = h.token_op("q", "ack", &d["token"]);
                    assert_eq!(s, StatusCode::OK);
                    seen.lock()
                        .unwrap()
                        .push(d["item"].as_str().unwrap().to_string());
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let seen = seen.lock().unwrap();
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(seen.len(), n, "each item taken and acked once");
    assert_eq!(unique.len(), n);
    assert_eq!(h.stats("q")["total"], 0);
}

/// Workers take and ack while the server is killed with SIGKILL and
/// restarted: every pushed item is acknowledged, none twice. An ack whose
/// answer was lost with the server may or may not have happened; it is
/// retried, and if it had happened the retry gets 409 (the item is gone).
#[test]
fn workers_acknowledge_every_item_exactly_once_across_a_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "always", "1mb");
    let base = Arc::new(Mutex::new(format!("http://{}", server.http)));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let n = 300;
    rt.block_on(async {
        let url = format!("{}/v1/queues/q", base.lock().unwrap());
        let r = client
            .put(&url)
            .body(r#"{"visibility_timeout": 1, "max_deliveries": 0}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        for i in 0..n {
            let r = client
                .post(format!("{url}/items"))
                .body(format!("job-{i}"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::CREATED);
        }
    });
    // item -> acks answered 200; and acks whose answer was lost.
    let acked: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
    let unsure: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (base, client, acked, unsure, stop) = (
                base.clone(),
                client.clone(),
                acked.clone(),
                unsure.clone(),
                stop.clone(),
            );
            rt.spawn(async move {
                use std::sync::atomic::Ordering;
                let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
                while !stop.load(Ordering::SeqCst) && tokio::time::Instant::now() < deadline {
                    let b = base.lock().unwrap().clone();
                    let taken = client
                        .post(format!("{b}/v1/queues/q/take?worker=w{w}&wait=0.5"))
                        .send()
                        .await;
                    let d: Value = match taken {
                        Ok(r) if r.status() == StatusCode::OK => match r.json().await {
                            Ok(v) => v,
                            Err(_) => continue,
                        },
                        Ok(_) => continue,
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let item = d["item"].as_str().unwrap().to_string();
                    let token = d["token"].as_str().unwrap().to_string();
                    // Ack, retrying through a restart.
                    let mut lost = false;
                    for _ in 0..100 {
                        let b = base.lock().unwrap().clone();
                        match client
                            .post(format!("{b}/v1/queues/q/ack/{token}"))
                            .send()
                            .await
                        {
                            Ok(r) if r.status() == StatusCode::OK => {
                                *acked.lock().unwrap().entry(item.clone()).or_default() += 1;
                                break;
                            }
                            Ok(r) if r.status() == StatusCode::CONFLICT => {
                                if lost {
                                    unsure.lock().unwrap().insert(item.clone());
                                }
                                break;
                            }
                            _ => {
                                lost = true;
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        }
                    }
                }
            })
        })
        .collect();
    // Kill once about a third is acknowledged.
    let t = Instant::now();
    while acked.lock().unwrap().len() < n / 3 && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill();
    let server = Server::start(dir.path(), "always", "1mb");
    *base.lock().unwrap() = format!("http://{}", server.http);
    let t = Instant::now();
    let done = |acked: &BTreeMap<String, u32>, unsure: &BTreeSet<String>| {
        (0..n)
            .map(|i| format!("job-{i}"))
            .all(|k| acked.contains_key(&k) || unsure.contains(&k))
    };
    while !done(&acked.lock().unwrap(), &unsure.lock().unwrap())
        && t.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for w in workers {
        rt.block_on(w).unwrap();
    }
    let acked = acked.lock().unwrap();
    let unsure = unsure.lock().unwrap();
    let twice: Vec<_> = acked.iter().filter(|(_, &c)| c > 1).collect();
    assert!(twice.is_empty(), "acknowledged twice: {twice:?}");
    let missing: Vec<String> = (0..n)
        .map(|i| format!("job-{i}"))
        .filter(|k| !acked.contains_key(k) && !unsure.contains(k))
        .collect();
    assert!(missing.is_empty(), "never acknowledged: {missing:?}");
    for k in unsure.iter() {
        assert!(
            !acked.contains_key(k),
            "{k}: acked after an ack that went through"
        );
    }
    let stats: Value = rt.block_on(async {
        let b = base.lock().unwrap().clone();
        client
            .get(format!("{b}/v1/queues/q"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    });
    assert_eq!(stats["total"], 0, "nothing left: {stats}");
    assert_eq!(stats["dead"], 0);
}

#[test]
fn queue_and_topic_routes_need_the_password_like_every_route() {
    let h = Http::start_with(|c| c.requirepass = Some("secret".into()));
    let (s, v) = h.post("/v1/queues/q/items", b"x");
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
    assert_eq!(v["code"], "NOAUTH");
    let (s, _) = h.post("/v1/topics/t", b"x");
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let auth = [("authorization", "Bearer secret")];
    let (s, _, _) = h.send(
        Method::POST,
        "/v1/queues/q/items",
        &auth,
        Some(b"x".to_vec()),
    );
    assert_eq!(s, StatusCode::CREATED);
    let (s, _, b) = h.send(Method::POST, "/v1/queues/q/take?worker=w", &auth, None);
    assert_eq!(s, StatusCode::OK, "{}", String::from_utf8_lossy(&b));
}
