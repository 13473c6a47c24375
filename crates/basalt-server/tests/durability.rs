//! Data survives restarts, kill -9 and shutdown; the data directory is
//! locked while a server runs and released when it stops.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use basalt_resp::Frame;
use common::{bulk, ok, Raw, TestServer};

#[test]
fn restart_keeps_data_ttls_and_databases() {
    let s = TestServer::start();
    {
        let mut r = s.raw();
        r.cmd(&["SET", "plain", "v"]);
        r.cmd(&["SET", "ttl", "v", "EX", "1000"]);
        r.cmd(&["SET", "gone", "v"]);
        r.cmd(&["DEL", "gone"]);
        r.cmd(&["SELECT", "9"]);
        r.cmd(&["SET", "in9", "nine"]);
        r.cmd(&["SELECT", "4"]);
        r.cmd(&["SET", "in4", "four"]);
        r.cmd(&["FLUSHDB"]);
        r.cmd(&["SELECT", "2"]);
        r.cmd(&["SET", "in2", "two"]);
        assert_eq!(r.cmd(&["SWAPDB", "2", "3"]), ok());
    }
    let s = s.restart();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["GET", "plain"]), bulk("v"));
    assert!(matches!(r.cmd(&["TTL", "ttl"]), Frame::Integer(n) if (990..=1000).contains(&n)));
    assert_eq!(r.cmd(&["EXISTS", "gone"]), Frame::Integer(0));
    r.cmd(&["SELECT", "9"]);
    assert_eq!(r.cmd(&["GET", "in9"]), bulk("nine"));
    r.cmd(&["SELECT", "4"]);
    assert_eq!(r.cmd(&["DBSIZE"]), Frame::Integer(0));
    r.cmd(&["SELECT", "3"]);
    assert_eq!(
        r.cmd(&["GET", "in2"]),
        bulk("two"),
        "SWAPDB survives a restart"
    );
    r.cmd(&["SELECT", "2"]);
    assert_eq!(r.cmd(&["DBSIZE"]), Frame::Integer(0));
}

#[test]
fn a_second_server_on_the_same_directory_is_refused() {
    let s = TestServer::start();
    let err = basalt_server::start(basalt_server::Config::ephemeral(s.dir.path())).unwrap_err();
    assert!(format!("{err:#}").contains("locked"), "{err:#}");
}

/// The real binary, started on a free port; its address read from the
/// start-up banner.
struct Binary {
    child: Child,
    addr: SocketAddr,
}

impl Binary {
    fn start(dir: &std::path::Path, extra: &[&str]) -> Binary {
        let mut child = Command::new(env!("CARGO_BIN_EXE_basalt"))
            .args(["--port", "0", "--http-port", "0", "--loglevel", "info"])
            .args(extra)
            .env("BASALT_DIR", dir)
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if !sent {
                    if let Some(rest) = line.split("ready on ").nth(1) {
                        let addr = rest.split_whitespace().next().unwrap().to_string();
                        let _ = tx.send(addr);
                        sent = true;
                    }
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("no start-up banner")
            .parse()
            .unwrap();
        Binary { child, addr }
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(std::time::Instant::now() < deadline, "server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kill_9_keeps_acknowledged_writes(appendfsync: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Binary::start(dir.path(), &["--appendfsync", appendfsync]);
    let mut r = Raw::connect(b.addr);
    let mut out = Vec::new();
    for i in 0..2000 {
        let k = format!("k{i}");
        basalt_resp::write_command(&mut out, [b"SET".as_slice(), k.as_bytes(), k.as_bytes()]);
    }
    r.send(&out);
    for _ in 0..2000 {
        assert_eq!(r.read(), ok());
    }
    assert_eq!(r.cmd(&["INCRBY", "counter", "7"]), Frame::Integer(7));
    // SIGKILL: no shutdown code runs.
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    let b2 = Binary::start(dir.path(), &[]);
    let mut r = Raw::connect(b2.addr);
    assert_eq!(r.cmd(&["DBSIZE"]), Frame::Integer(2001));
    assert_eq!(r.cmd(&["GET", "k1999"]), bulk("k1999"));
    assert_eq!(r.cmd(&["GET", "counter"]), bulk("7"));
}

#[test]
fn kill_9_keeps_acknowledged_writes_everysec() {
    kill_9_keeps_acknowledged_writes("everysec");
}

#[test]
fn kill_9_keeps_acknowledged_writes_always() {
    kill_9_keeps_acknowledged_writes("always");
}

#[test]
fn sigterm_syncs_releases_the_lock_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Binary::start(dir.path(), &[]);
    let mut r = Raw::connect(b.addr);
    assert_eq!(r.cmd(&["SET", "k", "v"]), ok());
    // SAFETY: sending a signal to our own child process.
    unsafe {
        libc::kill(b.child.id() as i32, libc::SIGTERM);
    }
    assert!(b.wait_exit().success());
    assert!(r.closed());
    // The directory lock is released: the engine opens it directly.
    let db =
        basalt_engine::Db::open(dir.path().join("0"), basalt_engine::Options::default()).unwrap();
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
}

#[test]
fn shutdown_command_stops_the_binary_with_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Binary::start(dir.path(), &[]);
    let mut other = Raw::connect(b.addr);
    let mut r = Raw::connect(b.addr);
    assert_eq!(r.cmd(&["SET", "k", "v"]), ok());
    r.send_cmd(&[b"SHUTDOWN", b"NOSAVE"]);
    assert!(r.try_read().is_none(), "SHUTDOWN closes without a reply");
    assert!(b.wait_exit().success());
    assert!(other.closed());
    let b2 = Binary::start(dir.path(), &[]);
    assert_eq!(Raw::connect(b2.addr).cmd(&["GET", "k"]), bulk("v"));
}

#[test]
fn help_documents_flags_and_defaults() {
    let out = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "--port",
        "--bind",
        "--dir",
        "--appendfsync",
        "--config",
        "--databases",
        "default: 6379",
        "default: ./data",
        "BASALT_PORT",
        "--http-port",
        "default: 7379",
        "BASALT_HTTP_PORT",
    ] {
        assert!(text.contains(needle), "--help lacks {needle}:\n{text}");
    }
}

#[test]
fn config_file_and_environment_precedence() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("basalt.toml");
    std::fs::write(&file, "databases = 4\nappendfsync = \"always\"\n").unwrap();
    let data = dir.path().join("data");
    let b = Binary::start(
        &data,
        &["--config", file.to_str().unwrap(), "--appendfsync", "no"],
    );
    let mut r = Raw::connect(b.addr);
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "databases"]),
        Frame::Array(vec![bulk("databases"), bulk("4")])
    );
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "appendfsync"]),
        Frame::Array(vec![bulk("appendfsync"), bulk("no")]),
        "the flag wins over the file"
    );
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "dir"]),
        Frame::Array(vec![
            bulk("dir"),
            bulk(&std::fs::canonicalize(&data).unwrap().display().to_string())
        ]),
        "BASALT_DIR is read"
    );
}
