//! Client-side caching (CLIENT TRACKING) against a real server, byte for
//! byte as redis-server 7.0.15 sends it: RESP3 pushes on the tracking
//! connection, RESP2 redirection to a `__redis__:invalidate` subscriber,
//! BCAST prefixes, OPTIN/OPTOUT with CLIENT CACHING, NOLOOP, and
//! invalidations from every write path (commands, MULTI/EXEC, EVAL, key
//! expiry, FLUSHALL, the HTTP API). Also CLIENT REPLY, CLIENT PAUSE,
//! MONITOR and sharded pub/sub, whose replies share the same machinery.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::http::Http;
use common::TestServer;

/// A raw connection that compares what arrives with exact bytes.
struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn new(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        Conn { s, buf: Vec::new() }
    }

    fn resp3(addr: SocketAddr) -> Conn {
        let mut c = Conn::new(addr);
        c.send(&["HELLO", "3"]);
        c.read_until(b"modules\r\n*0\r\n");
        c
    }

    fn send(&mut self, args: &[&str]) {
        let mut out = Vec::new();
        basalt_resp::write_command(&mut out, args.iter().map(|a| a.as_bytes()));
        self.s.write_all(&out).unwrap();
    }

    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 65536];
        match self.s.read(&mut chunk) {
            Ok(0) => panic!("connection closed"),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(_) => false,
        }
    }

    /// Waits (up to 5 s) for exactly `want` next.
    fn expect(&mut self, want: &[u8]) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.buf.len() < want.len() && Instant::now() < deadline {
            self.fill();
        }
        let n = want.len().min(self.buf.len());
        assert_eq!(
            String::from_utf8_lossy(&self.buf[..n]),
            String::from_utf8_lossy(want)
        );
        self.buf.drain(..n);
    }

    /// Waits (up to `secs`) for `want` next, with nothing before it.
    fn expect_within(&mut self, want: &[u8], secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while self.buf.len() < want.len() && Instant::now() < deadline {
            self.fill();
        }
        self.expect(want);
    }

    fn read_until(&mut self, end: &[u8]) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(i) = self.buf.windows(end.len()).position(|w| w == end) {
                self.buf.drain(..i + end.len());
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no {:?}",
                String::from_utf8_lossy(end)
            );
            self.fill();
        }
    }

    /// Sends a command and expects exactly `want`.
    fn cmd(&mut self, args: &[&str], want: &[u8]) {
        self.send(args);
        self.expect(want);
    }

    /// Asserts that nothing arrives for 200 ms.
    fn silent(&mut self) {
        let deadline = Instant::now() + Duration::from_millis(200);
        while Instant::now() < deadline {
            self.fill();
        }
        assert_eq!(String::from_utf8_lossy(&self.buf), "", "unexpected data");
    }

    fn id(&mut self) -> String {
        self.send(&["CLIENT", "ID"]);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.buf.ends_with(b"\r\n") && Instant::now() < deadline {
            self.fill();
        }
        let line = String::from_utf8(std::mem::take(&mut self.buf)).unwrap();
        line.trim_start_matches(':').trim_end().to_string()
    }
}

fn inval(key: &str) -> Vec<u8> {
    format!(
        ">2\r\n$10\r\ninvalidate\r\n*1\r\n${}\r\n{key}\r\n",
        key.len()
    )
    .into_bytes()
}

const NULL_INVAL: &[u8] = b">2\r\n$10\r\ninvalidate\r\n_\r\n";

// ------------------------------------------------------------- tracking

#[test]
fn resp3_tracking_invalidates_each_read_key_once_when_another_client_writes() {
    let srv = TestServer::start();
    let mut t = Conn::resp3(srv.addr());
    let mut w = Conn::new(srv.addr());
    t.cmd(&["CLIENT", "TRACKING", "ON"], b"+OK\r\n");
    t.cmd(&["GET", "k1"], b"_\r\n");
    t.cmd(&["MGET", "k2", "k3"], b"*2\r\n_\r\n_\r\n");
    w.cmd(&["SET", "k1", "v"], b"+OK\r\n");
    t.expect(&inval("k1"));
    w.cmd(&["MSET", "k2", "x", "k3", "y"], b"+OK\r\n");
    t.expect(&inval("k2"));
    t.expect(&inval("k3"));
    // Forgotten after the first change: not read again, not told again.
    w.cmd(&["SET", "k1", "v2"], b"+OK\r\n");
    t.silent();
    // Keys are global: a change in another database invalidates too.
    t.cmd(&["GET", "k1"], b"$2\r\nv2\r\n");
    w.cmd(&["SELECT", "3"], b"+OK\r\n");
    w.cmd(&["SET", "k1", "other-db"], b"+OK\r\n");
    t.expect(&inval("k1"));
    t.cmd(
        &["CLIENT", "TRACKINGINFO"],
        b"%3\r\n$5\r\nflags\r\n~1\r\n$2\r\non\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n",
    );
}

#[test]
fn own_writes_are_invalidated_after_the_reply_including_multi_exec_and_eval() {
    let srv = TestServer::start();
    let mut t = Conn::resp3(srv.addr());
    t.cmd(&["CLIENT", "TRACKING", "ON"], b"+OK\r\n");
    t.cmd(&["GET", "k"], b"_\r\n");
    t.cmd(&["SET", "k", "1"], &[&b"+OK\r\n"[..], &inval("k")].concat());
    t.cmd(&["GET", "k"], b"$1\r\n1\r\n");
    t.cmd(&["MULTI"], b"+OK\r\n");
    t.cmd(&["SET", "k", "2"], b"+QUEUED\r\n");
    t.cmd(&["GET", "k"], b"+QUEUED\r\n");
    t.cmd(
        &["EXEC"],
        &[&b"*2\r\n+OK\r\n$1\r\n2\r\n"[..], &inval("k")].concat(),
    );
    // Keys read by a script's calls are remembered for the caller.
    t.cmd(
        &["EVAL", "return redis.call('get', KEYS[1])", "1", "k"],
        b"$1\r\n2\r\n",
    );
    let mut w = Conn::new(srv.addr());
    w.cmd(
        &["EVAL", "return redis.call('set', KEYS[1], 'e')", "1", "k"],
        b"+OK\r\n",
    );
    t.expect(&inval("k"));
}

#[test]
fn redirect_to_a_resp2_subscriber_sends_messages_on_the_invalidate_channel() {
    let srv = TestServer::start();
    let mut r = Conn::new(srv.addr());
    let rid = r.id();
    r.cmd(
        &["SUBSCRIBE", "__redis__:invalidate"],
        b"*3\r\n$9\r\nsubscribe\r\n$20\r\n__redis__:invalidate\r\n:1\r\n",
    );
    let mut t = Conn::new(srv.addr());
    t.cmd(&["CLIENT", "TRACKING", "ON", "REDIRECT", &rid], b"+OK\r\n");
    t.cmd(&["CLIENT", "GETREDIR"], format!(":{rid}\r\n").as_bytes());
    t.cmd(&["GET", "r1"], b"$-1\r\n");
    let mut w = Conn::new(srv.addr());
    w.cmd(&["SET", "r1", "1"], b"+OK\r\n");
    r.expect(b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$2\r\nr1\r\n");
    w.cmd(&["FLUSHALL"], b"+OK\r\n");
    r.expect(b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n");
    // The RESP2 tracking connection itself never receives pushes.
    t.silent();
}

#[test]
fn a_gone_redirect_target_is_reported_with_tracking_redir_broken() {
    let srv = TestServer::start();
    let mut gone = Conn::new(srv.addr());
    let gid = gone.id();
    let mut t = Conn::resp3(srv.addr());
    t.cmd(&["CLIENT", "TRACKING", "ON", "REDIRECT", &gid], b"+OK\r\n");
    t.cmd(&["GET", "k"], b"_\r\n");
    drop(gone);
    let mut w = Conn::new(srv.addr());
    // The target's disconnect is noticed by its connection task.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut c = Conn::new(srv.addr());
        c.send(&["CLIENT", "LIST", "ID", &gid]);
        c.read_until(b"\r\n");
        c.fill();
        if !String::from_utf8_lossy(&c.buf).contains("id=") || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    w.cmd(&["SET", "k", "1"], b"+OK\r\n");
    t.expect(format!(">2\r\n$21\r\ntracking-redir-broken\r\n:{gid}\r\n").as_bytes());
    t.cmd(
        &["CLIENT", "TRACKINGINFO"],
        format!("%3\r\n$5\r\nflags\r\n~2\r\n$2\r\non\r\n$15\r\nbroken_redirect\r\n$8\r\nredirect\r\n:{gid}\r\n$8\r\nprefixes\r\n*0\r\n").as_bytes(),
    );
}

#[test]
fn bcast_reports_matching_prefixes_and_noloop_skips_own_changes() {
    let srv = TestServer::start();
    let mut t = Conn::resp3(srv.addr());
    let mut w = Conn::new(srv.addr());
    t.cmd(
        &[
            "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "bc:", "NOLOOP",
        ],
        b"+OK\r\n",
    );
    t.cmd(
        &["CLIENT", "TRACKINGINFO"],
        b"%3\r\n$5\r\nflags\r\n~3\r\n$2\r\non\r\n$5\r\nbcast\r\n$6\r\nnoloop\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*1\r\n$3\r\nbc:\r\n",
    );
    t.cmd(
        &["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "bc:x"],
        b"-ERR Prefix 'bc:x' overlaps with an existing prefix 'bc:'. Prefixes for a single client must not overlap.\r\n",
    );
    t.cmd(&["SET", "bc:own", "1"], b"+OK\r\n");
    w.cmd(&["SET", "other", "1"], b"+OK\r\n");
    w.cmd(&["SET", "bc:2", "1"], b"+OK\r\n");
    t.expect(&inval("bc:2"));
    t.silent();
}

#[test]
fn optin_remembers_only_after_caching_yes_and_optout_skips_after_caching_no() {
    let srv = TestServer::start();
    let mut t = Conn::resp3(srv.addr());
    let mut w = Conn::new(srv.addr());
    t.cmd(&["CLIENT", "TRACKING", "ON", "OPTIN"], b"+OK\r\n");
    t.cmd(
        &["CLIENT", "CACHING", "NO"],
        b"-ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.\r\n",
    );
    t.cmd(&["GET", "o1"], b"_\r\n");
    t.cmd(&["CLIENT", "CACHING", "YES"], b"+OK\r\n");
    t.cmd(
        &["CLIENT", "TRACKINGINFO"],
        b"%3\r\n$5\r\nflags\r\n~3\r\n$2\r\non\r\n$5\r\noptin\r\n$11\r\ncaching-yes\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n",
    );
    t.cmd(&["GET", "o2"], b"_\r\n");
    t.cmd(&["GET", "o3"], b"_\r\n"); // CACHING applied to one command only
    w.cmd(&["MSET", "o1", "1", "o2", "2", "o3", "3"], b"+OK\r\n");
    t.expect(&inval("o2"));
    t.silent();
    t.cmd(&["CLIENT", "TRACKING", "OFF"], b"+OK\r\n");
    t.cmd(&["CLIENT", "TRACKING", "ON", "OPTOUT"], b"+OK\r\n");
    t.cmd(&["CLIENT", "CACHING", "NO"], b"+OK\r\n");
    t.cmd(&["GET", "p1"], b"_\r\n");
    t.cmd(&["GET", "p2"], b"_\r\n");
    w.cmd(&["MSET", "p1", "1", "p2", "2"], b"+OK\r\n");
    t.expect(&inval("p2"));
    t.silent();
}

#[test]
fn flushall_sends_the_null_invalidation_after_the_reply() {
    let srv = TestServer::start();
    let mut t = Conn::resp3(srv.addr());
    let mut other = Conn::resp3(srv.addr());
    t.cmd(&["CLIENT", "TRACKING", "ON"], b"+OK\r\n");
    other.cmd(&["CLIENT", "TRACKING", "ON", "BCAST"], b"+OK\r\n");
    t.cmd(&["FLUSHALL"], &[&b"+OK\r\n"[..], NULL_INVAL].concat());
    other.expect(NULL_INVAL);
}

#[test]
fn key_expiry_invalidates_a_tracked_key_without_any_access() {
    let srv = TestServer::start();
    let mut t = Conn::resp3(srv.addr());
    let mut w = Conn::new(srv.addr());
    w.cmd(&["SET", "ttl", "v", "PX", "100"], b"+OK\r\n");
    t.cmd(&["CLIENT", "TRACKING", "ON"], b"+OK\r\n");
    t.cmd(&["GET", "ttl"], b"$1\r\nv\r\n");
    t.expect_within(&inval("ttl"), 20);
}

#[test]
fn an_http_api_write_invalidates_a_tracked_key() {
    let h = Http::start();
    let mut t = Conn::resp3(h.server.addr());
    t.cmd(&["CLIENT", "TRACKING", "ON"], b"+OK\r\n");
    t.cmd(&["GET", "web"], b"_\r\n");
    t.cmd(&["SMEMBERS", "webset"], b"~0\r\n");
    let (status, _, _) = h.put("/v1/keys/web", b"hello", &[]);
    assert!(status.is_success(), "{status}");
    t.expect(&inval("web"));
    let (status, _) = h.json(
        reqwest::Method::POST,
        "/v1/sets/webset",
        Some(serde_json::json!(["a"])),
    );
    assert!(status.is_success(), "{status}");
    t.expect(&inval("webset"));
}

#[test]
fn tracking_errors_and_info_counters_match_redis() {
    let srv = TestServer::start();
    let mut c = Conn::new(srv.addr());
    for (args, want) in [
        (
            &["CLIENT", "TRACKING"][..],
            &b"-ERR wrong number of arguments for 'client|tracking' command\r\n"[..],
        ),
        (&["CLIENT", "TRACKING", "maybe"], b"-ERR syntax error\r\n"),
        (
            &["CLIENT", "TRACKING", "ON", "REDIRECT", "99999"],
            b"-ERR The client ID you want redirect to does not exist\r\n",
        ),
        (
            &["CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT"],
            b"-ERR You can't specify both OPTIN mode and OPTOUT mode\r\n",
        ),
        (
            &["CLIENT", "TRACKING", "ON", "PREFIX", "a"],
            b"-ERR PREFIX option requires BCAST mode to be enabled\r\n",
        ),
        (
            &["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a", "PREFIX", "ab"],
            b"-ERR Prefix 'a' overlaps with another provided prefix 'ab'. Prefixes for a single client must not overlap.\r\n",
        ),
        (
            &["CLIENT", "TRACKING", "ON", "BCAST", "OPTIN"],
            b"-ERR OPTIN and OPTOUT are not compatible with BCAST\r\n",
        ),
        (
            &["CLIENT", "CACHING", "YES"],
            b"-ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled\r\n",
        ),
        (&["CLIENT", "GETREDIR"], b":-1\r\n"),
        (
            &["CLIENT", "TRACKINGINFO"],
            b"*6\r\n$5\r\nflags\r\n*1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n",
        ),
    ] {
        c.cmd(args, want);
    }
    c.cmd(&["CLIENT", "TRACKING", "ON"], b"+OK\r\n");
    c.cmd(&["GET", "a"], b"$-1\r\n");
    let mut b = Conn::new(srv.addr());
    b.cmd(
        &["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "x"],
        b"+OK\r\n",
    );
    let mut info = redis::Client::open(srv.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let text: String = redis::cmd("INFO")
        .arg("everything")
        .query(&mut info)
        .unwrap();
    for line in [
        "tracking_clients:2",
        "tracking_total_keys:1",
        "tracking_total_items:1",
        "tracking_total_prefixes:1",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
}

// ------------------------------------------------- CLIENT REPLY / PAUSE

#[test]
fn client_reply_off_and_skip_drop_replies_but_not_pushes() {
    let srv = TestServer::start();
    let mut c = Conn::resp3(srv.addr());
    c.cmd(&["CLIENT", "TRACKING", "ON"], b"+OK\r\n");
    c.cmd(&["GET", "t"], b"_\r\n");
    c.send(&["CLIENT", "REPLY", "OFF"]);
    c.send(&["SET", "t", "1"]);
    c.send(&["PING"]);
    c.cmd(
        &["CLIENT", "REPLY", "ON"],
        &[&inval("t")[..], b"+OK\r\n"].concat(),
    );
    c.send(&["CLIENT", "REPLY", "SKIP"]);
    c.send(&["PING", "a"]);
    c.cmd(&["PING", "b"], b"$1\r\nb\r\n");
    c.cmd(&["CLIENT", "REPLY", "maybe"], b"-ERR syntax error\r\n");
}

#[test]
fn client_pause_write_holds_writes_until_unpause_and_lets_reads_run() {
    let srv = TestServer::start();
    let mut admin = Conn::new(srv.addr());
    let mut c = Conn::new(srv.addr());
    c.cmd(&["SET", "k", "0"], b"+OK\r\n");
    admin.cmd(&["CLIENT", "PAUSE", "20000", "WRITE"], b"+OK\r\n");
    c.cmd(&["GET", "k"], b"$1\r\n0\r\n");
    c.send(&["SET", "k", "1"]);
    c.send(&["GET", "k"]);
    c.silent();
    admin.cmd(&["CLIENT", "UNPAUSE"], b"+OK\r\n");
    c.expect(b"+OK\r\n$1\r\n1\r\n");
    // ALL holds reads too; the deadline ends it.
    admin.cmd(&["CLIENT", "PAUSE", "300"], b"+OK\r\n");
    let started = Instant::now();
    c.cmd(&["GET", "k"], b"$1\r\n1\r\n");
    assert!(started.elapsed() >= Duration::from_millis(200));
    for (args, want) in [
        (
            &["CLIENT", "PAUSE", "abc"][..],
            &b"-ERR timeout is not an integer or out of range\r\n"[..],
        ),
        (&["CLIENT", "PAUSE", "-1"], b"-ERR timeout is negative\r\n"),
        (
            &["CLIENT", "PAUSE", "10", "foo"],
            b"-ERR CLIENT PAUSE mode must be WRITE or ALL\r\n",
        ),
    ] {
        admin.cmd(args, want);
    }
}

// ---------------------------------------------------------------- MONITOR

#[test]
fn monitor_shows_commands_in_redis_format_redacts_secrets_and_is_refused_in_exec() {
    let srv = TestServer::start();
    let mut m = Conn::new(srv.addr());
    m.cmd(&["MONITOR"], b"+OK\r\n");
    let mut c = Conn::new(srv.addr());
    c.cmd(&["MULTI"], b"+OK\r\n");
    c.cmd(&["MONITOR"], b"+QUEUED\r\n");
    c.cmd(
        &["EXEC"],
        b"*1\r\n-ERR MONITOR isn't allowed for DENY BLOCKING client\r\n",
    );
    c.cmd(&["SET", "k\n\"\u{1}é", "v"], b"+OK\r\n");
    c.send(&["AUTH", "secret"]);
    c.read_until(b"\r\n");
    c.cmd(&["EVAL", "return redis.call('get', 'k')", "0"], b"$-1\r\n");
    c.cmd(&["CONFIG", "GET", "port"], b"*2\r\n$4\r\nport\r\n");
    c.read_until(b"\r\n");
    c.read_until(b"\r\n");
    let deadline = Instant::now() + Duration::from_secs(5);
    while m.buf.iter().filter(|&&b| b == b'\n').count() < 6 && Instant::now() < deadline {
        m.fill();
    }
    let text = String::from_utf8_lossy(&m.buf).into_owned();
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            // "+<secs>.<micros> [0 <addr>] ..." -> "[0 <addr>] ..."
            let (ts, rest) = l.split_once(' ').unwrap();
            assert!(ts.starts_with('+') && ts.contains('.') && ts.len() == 1 + 10 + 1 + 6);
            rest.replace(&c.s.local_addr().unwrap().to_string(), "ADDR")
        })
        .collect();
    assert_eq!(
        lines,
        [
            // Arguments as the client sent them (Redis does not lower them).
            "[0 ADDR] \"MULTI\"",
            "[0 ADDR] \"EXEC\"",
            "[0 ADDR] \"SET\" \"k\\n\\\"\\x01\\xc3\\xa9\" \"v\"",
            "[0 ADDR] \"AUTH\" \"(redacted)\"",
            "[0 ADDR] \"EVAL\" \"return redis.call('get', 'k')\" \"0\"",
            "[0 lua] \"get\" \"k\"",
        ]
    );
}

// ------------------------------------------------------ sharded pub/sub

#[test]
fn sharded_pubsub_replies_in_resp2_and_resp3_with_shard_counts() {
    let srv = TestServer::start();
    let mut s = Conn::new(srv.addr());
    let mut p = Conn::new(srv.addr());
    s.cmd(
        &["SSUBSCRIBE", "a", "b"],
        b"*3\r\n$10\r\nssubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$10\r\nssubscribe\r\n$1\r\nb\r\n:2\r\n",
    );
    s.cmd(
        &["SUBSCRIBE", "x"],
        b"*3\r\n$9\r\nsubscribe\r\n$1\r\nx\r\n:1\r\n",
    );
    s.cmd(
        &["GET", "x"],
        b"-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n",
    );
    p.cmd(&["SPUBLISH", "a", "hi"], b":1\r\n");
    p.cmd(&["PUBLISH", "a", "hi"], b":0\r\n");
    s.expect(b"*3\r\n$8\r\nsmessage\r\n$1\r\na\r\n$2\r\nhi\r\n");
    p.cmd(
        &["PUBSUB", "SHARDCHANNELS"],
        b"*2\r\n$1\r\na\r\n$1\r\nb\r\n",
    );
    p.cmd(&["PUBSUB", "SHARDCHANNELS", "b*"], b"*1\r\n$1\r\nb\r\n");
    p.cmd(
        &["PUBSUB", "SHARDNUMSUB", "a", "zz"],
        b"*4\r\n$1\r\na\r\n:1\r\n$2\r\nzz\r\n:0\r\n",
    );
    p.cmd(&["PUBSUB", "CHANNELS"], b"*1\r\n$1\r\nx\r\n");
    s.cmd(
        &["SUNSUBSCRIBE", "a", "q"],
        b"*3\r\n$12\r\nsunsubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$12\r\nsunsubscribe\r\n$1\r\nq\r\n:1\r\n",
    );
    s.cmd(
        &["SUNSUBSCRIBE"],
        b"*3\r\n$12\r\nsunsubscribe\r\n$1\r\nb\r\n:0\r\n",
    );
    s.cmd(
        &["SUNSUBSCRIBE"],
        b"*3\r\n$12\r\nsunsubscribe\r\n$-1\r\n:0\r\n",
    );
    s.cmd(
        &["UNSUBSCRIBE"],
        b"*3\r\n$11\r\nunsubscribe\r\n$1\r\nx\r\n:0\r\n",
    );

    let mut s3 = Conn::resp3(srv.addr());
    s3.cmd(
        &["SSUBSCRIBE", "a"],
        b">3\r\n$10\r\nssubscribe\r\n$1\r\na\r\n:1\r\n",
    );
    p.cmd(&["SPUBLISH", "a", "m"], b":1\r\n");
    s3.expect(b">3\r\n$8\r\nsmessage\r\n$1\r\na\r\n$1\r\nm\r\n");
    s3.cmd(&["GET", "x"], b"_\r\n");
    s3.cmd(
        &["SUNSUBSCRIBE"],
        b">3\r\n$12\r\nsunsubscribe\r\n$1\r\na\r\n:0\r\n",
    );
    p.cmd(
        &["SPUBLISH", "a"],
        b"-ERR wrong number of arguments for 'spublish' command\r\n",
    );
}

#[test]
fn client_list_shows_tracking_flags_the_redirect_and_shard_subscriptions() {
    let s = TestServer::start();
    let mut r = s.raw();
    let field = |line: &str, name: &str| -> String {
        line.split(' ')
            .find_map(|f| f.strip_prefix(&format!("{name}=")[..]).map(str::to_string))
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    let info = |r: &mut common::Raw| match r.cmd(&["CLIENT", "INFO"]) {
        basalt_resp::Frame::Bulk(b) | basalt_resp::Frame::Verbatim { text: b, .. } => {
            String::from_utf8(b).unwrap()
        }
        other => panic!("{other:?}"),
    };
    let plain = info(&mut r);
    assert_eq!(
        (field(&plain, "flags"), field(&plain, "redir")),
        ("N".into(), "-1".into())
    );
    r.cmd(&["CLIENT", "TRACKING", "ON"]);
    let on = info(&mut r);
    assert_eq!(
        (field(&on, "flags"), field(&on, "redir")),
        ("t".into(), "0".into()),
        "tracking without a redirect: redir=0, as Redis"
    );
    let mut target = s.raw();
    let id = match target.cmd(&["CLIENT", "ID"]) {
        basalt_resp::Frame::Integer(n) => n.to_string(),
        other => panic!("{other:?}"),
    };
    r.cmd(&["CLIENT", "TRACKING", "OFF"]);
    r.cmd(&["CLIENT", "TRACKING", "ON", "REDIRECT", &id, "BCAST"]);
    let bcast = info(&mut r);
    assert_eq!(
        (field(&bcast, "flags"), field(&bcast, "redir")),
        ("tB".into(), id.clone())
    );
    let mut sub = Conn::new(s.addr());
    sub.send(&["SSUBSCRIBE", "a", "b"]);
    sub.read_until(b":2\r\n");
    let Some(line) = (match r.cmd(&["CLIENT", "LIST"]) {
        basalt_resp::Frame::Bulk(b) | basalt_resp::Frame::Verbatim { text: b, .. } => {
            String::from_utf8(b).unwrap()
        }
        other => panic!("{other:?}"),
    })
    .lines()
    .find(|l| l.contains("cmd=ssubscribe"))
    .map(str::to_string) else {
        panic!("the subscriber is listed");
    };
    assert_eq!(
        (field(&line, "flags"), field(&line, "ssub")),
        ("P".into(), "2".into())
    );
}

#[test]
fn keys_do_not_expire_while_clients_are_paused_and_do_after_unpause() {
    let s = TestServer::start();
    let mut admin = Conn::new(s.addr());
    admin.cmd(
        &["CONFIG", "SET", "notify-keyspace-events", "Ex"],
        b"+OK\r\n",
    );
    let mut sub = Conn::new(s.addr());
    sub.send(&["SUBSCRIBE", "__keyevent@0__:expired"]);
    sub.read_until(b":1\r\n");
    admin.cmd(&["SET", "k", "v", "PX", "150"], b"+OK\r\n");
    admin.cmd(&["CLIENT", "PAUSE", "20000", "WRITE"], b"+OK\r\n");
    std::thread::sleep(Duration::from_millis(1200));
    // Expired to readers, but not deleted: no event while paused.
    admin.cmd(&["GET", "k"], b"$-1\r\n");
    sub.silent();
    admin.cmd(&["CLIENT", "UNPAUSE"], b"+OK\r\n");
    let event = b"*3\r\n$7\r\nmessage\r\n$22\r\n__keyevent@0__:expired\r\n$1\r\nk\r\n";
    sub.expect_within(event, 10);
}
