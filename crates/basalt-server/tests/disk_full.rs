//! Out of disk: the server runs on a small tmpfs that fills up. Writes must
//! then answer Redis's `-MISCONF` error naming the cause, INFO must say
//! `aof_last_write_status:err` with the reason, `/ready` must answer 503,
//! reads must go on; once space is back, writes must resume without a
//! restart, and after a restart every acknowledged write must be there.
//!
//! Mounting a tmpfs needs root (as CI and the development machine have);
//! elsewhere the test says it was skipped and passes.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use basalt_server::Config;
use common::{eventually, TestServer};

/// A tmpfs mounted for the test, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

fn info_field(con: &mut redis::Connection, field: &str) -> String {
    let info: String = redis::cmd("INFO").arg("persistence").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
        .trim()
        .to_string()
}

#[test]
fn a_full_disk_refuses_writes_with_misconf_and_writes_resume_once_space_is_back() {
    let outer = tempfile::tempdir().unwrap();
    let mnt = outer.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let Some(_fs) = Tmpfs::mount(&mnt, "48m") else {
        println!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    // Ballast, removed later to give the space back.
    let ballast = mnt.join("ballast");
    std::fs::write(&ballast, vec![1u8; 12 << 20]).unwrap();
    let dir = tempfile::tempdir_in(&mnt).unwrap();
    let mut config = Config::ephemeral(dir.path());
    config.http_port = Some(0);
    config.databases = 1;
    let server = TestServer::start_with(config, dir);
    let http = server.handle.as_ref().unwrap().http_addr().unwrap();
    let mut con = server.client();
    assert_eq!(http_get(http, "/ready").0, 200);

    // Fill the disk with acknowledged writes until one is refused.
    let value = vec![b'v'; 64 << 10];
    let mut acked = Vec::new();
    let mut refusal = None;
    for i in 0..2000 {
        let key = format!("key:{i}");
        match redis::cmd("SET")
            .arg(&key)
            .arg(&value)
            .query::<String>(&mut con)
        {
            Ok(_) => acked.push(key),
            Err(e) => {
                refusal = Some(e);
                break;
            }
        }
    }
    let refusal = refusal.expect("the 48 MiB tmpfs never filled up");
    let text = format!("{refusal:?}");
    assert!(
        text.contains("MISCONF") && text.contains("Errors writing to the AOF file"),
        "{text}"
    );
    assert!(text.contains("No space left on device"), "{text}");
    assert!(acked.len() > 10, "only {} writes fitted", acked.len());

    // Refused, reported, still readable.
    let again: redis::RedisResult<String> = redis::cmd("SET").arg("x").arg("y").query(&mut con);
    assert!(format!("{:?}", again.unwrap_err()).contains("MISCONF"));
    assert_eq!(info_field(&mut con, "aof_last_write_status"), "err");
    assert!(info_field(&mut con, "basalt_write_error").contains("No space left"));
    let (status, body) = http_get(http, "/ready");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("WRITE_ERROR"), "{body}");
    let first: Vec<u8> = redis::cmd("GET").arg(&acked[0]).query(&mut con).unwrap();
    assert_eq!(first, value);

    // Space comes back: writes resume by themselves.
    std::fs::remove_file(&ballast).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || {
            redis::cmd("SET")
                .arg("after")
                .arg("space")
                .query::<String>(&mut con)
                .is_ok()
        }),
        "writes did not resume"
    );
    assert_eq!(info_field(&mut con, "aof_last_write_status"), "ok");
    assert_eq!(http_get(http, "/ready").0, 200);

    // Nothing acknowledged was lost, across a restart too.
    drop(con);
    let server = server.restart();
    let mut con = server.client();
    for key in &acked {
        let got: Option<Vec<u8>> = redis::cmd("GET").arg(key).query(&mut con).unwrap();
        assert_eq!(got.as_deref(), Some(&value[..]), "{key}");
    }
    let after: String = redis::cmd("GET").arg("after").query(&mut con).unwrap();
    assert_eq!(after, "space");
    drop(con);
    drop(server);
}
