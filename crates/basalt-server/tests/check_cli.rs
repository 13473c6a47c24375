//! `basalt check` run as the real binary on a server's data directory:
//! exit codes, the report's lines, `--repair` and `--json`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use basalt_engine::format::{RecordHeader, FILE_HEADER_LEN, RECORD_HEADER_LEN};
use basalt_resp::Frame;
use common::{bulk, ok, TestServer};

fn basalt_check(args: &[&str]) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .arg("check")
        .args(args)
        .env_remove("BASALT_DIR")
        .output()
        .unwrap();
    (
        status.code().unwrap(),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

/// A server directory with `victim` and 200 strings (`k0`..`k199`), shut
/// down cleanly.
fn populated() -> tempfile::TempDir {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["SET", "victim", "doomed value"]), ok());
    for i in 0..200 {
        assert_eq!(
            r.cmd(&["SET", &format!("k{i}"), &format!("value {i}")]),
            ok()
        );
    }
    let TestServer { handle, dir } = s;
    handle.unwrap().shutdown().unwrap();
    dir
}

fn data_files(db: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for shard in std::fs::read_dir(db).unwrap() {
        let shard = shard.unwrap().path();
        if !shard.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&shard).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "data") {
                out.push(f);
            }
        }
    }
    out.sort();
    out
}

/// (file, offset, length, key) of every record, by file.
fn records(db: &Path) -> Vec<(PathBuf, u64, u64, Vec<u8>)> {
    let mut out = Vec::new();
    for path in data_files(db) {
        let b = std::fs::read(&path).unwrap();
        let mut off = FILE_HEADER_LEN;
        while off < b.len() {
            let (_, h) = RecordHeader::parse(&b[off..]).unwrap();
            let k = &b[off + RECORD_HEADER_LEN..off + RECORD_HEADER_LEN + h.key_len as usize];
            out.push((path.clone(), off as u64, h.record_len(), k.to_vec()));
            off += h.record_len() as usize;
        }
    }
    out
}

/// (file, offset, length) of the record whose key is `key`.
fn find_record(db: &Path, key: &[u8]) -> (PathBuf, u64, u64) {
    let (f, off, len, _) = records(db)
        .into_iter()
        .find(|r| r.3 == key)
        .expect("no record for the key");
    (f, off, len)
}

fn rel(db: &Path, p: &Path) -> String {
    p.strip_prefix(db).unwrap().display().to_string()
}

#[test]
fn a_clean_server_directory_exits_0_with_a_table_per_file() {
    let dir = populated();
    let (code, out, err) = basalt_check(&["--dir", dir.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let db = dir.path().join("0");
    assert!(
        out.contains(&format!("database {} (", db.display())),
        "{out}"
    );
    assert!(
        out.contains("records     live bytes     dead bytes  hint"),
        "{out}"
    );
    for f in data_files(&db) {
        assert!(out.contains(&rel(&db, &f)), "{out}");
    }
    assert!(out.contains("  no damage\n"), "{out}");
    assert!(
        out.ends_with("1 database(s), 0 error(s), 0 note(s): clean\n"),
        "{out}"
    );
}

#[test]
fn a_flipped_byte_exits_1_and_repair_drops_exactly_that_record() {
    let dir = populated();
    let db = dir.path().join("0");
    let (file, off, len) = find_record(&db, b"victim");
    let mut b = std::fs::read(&file).unwrap();
    b[(off + len - 3) as usize] ^= 0xff;
    std::fs::write(&file, b).unwrap();
    let d = dir.path().to_str().unwrap();

    let (code, out, _) = basalt_check(&["--dir", d]);
    assert_eq!(code, 1, "{out}");
    let line = format!(
        "  ERROR {} offset {off} len {len}: bad record: record checksum mismatch key \"victim\"",
        rel(&db, &file)
    );
    assert!(out.lines().any(|l| l == line), "no line {line:?} in\n{out}");
    assert!(
        out.ends_with("DAMAGED (run with --repair to keep what is readable)\n"),
        "{out}"
    );

    let (code, out, _) = basalt_check(&["--dir", d, "--repair"]);
    assert_eq!(code, 1, "damage was found (and repaired): {out}");
    let dropped: Vec<&str> = out.lines().filter(|l| l.contains("dropped ")).collect();
    assert_eq!(
        dropped,
        vec![format!(
            "  dropped {} offset {off} len {len} key \"victim\": record checksum mismatch",
            rel(&db, &file)
        )],
        "{out}"
    );
    assert!(out.ends_with(": DAMAGED, repaired\n"), "{out}");

    let (code, out, _) = basalt_check(&["--dir", d]);
    assert_eq!(code, 0, "clean after repair: {out}");

    let s = TestServer::start_in(dir);
    let mut r = s.raw();
    assert_eq!(r.cmd(&["GET", "victim"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["DBSIZE"]), Frame::Integer(200));
    assert_eq!(r.cmd(&["GET", "k123"]), bulk("value 123"));
}

#[test]
fn a_torn_tail_is_a_note_and_exits_0() {
    let dir = populated();
    let db = dir.path().join("0");
    let (file, off, len, _) = records(&db).pop().unwrap();
    // As a crash leaves it: no hint for the active file, the last record
    // cut short.
    let _ = std::fs::remove_file(file.with_extension("hint"));
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.set_len(off + len - 5).unwrap();

    let (code, out, _) = basalt_check(&["--dir", dir.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let prefix = format!(
        "  note  {} offset {off} len {}: torn tail: ",
        rel(&db, &file),
        len - 5
    );
    assert!(out.lines().any(|l| l.starts_with(&prefix)), "{out}");
    assert!(out.ends_with("0 error(s), 1 note(s): clean\n"), "{out}");
}

#[test]
fn json_output_lists_files_and_damage() {
    let dir = populated();
    let db = dir.path().join("0");
    let (file, off, len) = find_record(&db, b"k7");
    let mut b = std::fs::read(&file).unwrap();
    b[off as usize + 8] ^= 1; // a byte of the sequence number
    std::fs::write(&file, b).unwrap();
    let (code, out, _) = basalt_check(&["--dir", db.to_str().unwrap(), "--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["clean"], false);
    let dbs = v["databases"].as_array().unwrap();
    assert_eq!(dbs.len(), 1);
    let damage = dbs[0]["damage"].as_array().unwrap();
    let errors: Vec<_> = damage.iter().filter(|d| d["severity"] == "error").collect();
    let kinds: Vec<_> = errors.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    // The clean shutdown's hint still names the damaged record.
    assert_eq!(kinds, ["bad record", "hint mismatch"], "{out}");
    assert_eq!(errors[0]["kind"], "bad record");
    assert_eq!(errors[0]["offset"], off);
    assert_eq!(errors[0]["len"], len);
    assert_eq!(errors[0]["key"], "k7");
    assert_eq!(errors[0]["path"], rel(&db, &file));
    assert!(dbs[0]["files"].as_array().unwrap().len() >= 2);
}

#[test]
fn a_directory_a_server_holds_exits_2_and_says_so() {
    let s = TestServer::start();
    let (code, out, err) = basalt_check(&["--dir", s.dir.path().to_str().unwrap()]);
    assert_eq!(code, 2, "{out}");
    assert!(err.contains("is locked by another process"), "{err}");
}

#[test]
fn usage_errors_exit_2() {
    let (code, _, err) = basalt_check(&[]);
    assert_eq!(code, 2);
    assert!(err.contains("--dir <DIR>"), "{err}");
    let empty = tempfile::tempdir().unwrap();
    let (code, _, err) = basalt_check(&["--dir", empty.path().to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with("basalt check: no Basalt database in "),
        "{err}"
    );
}

#[test]
fn check_counts_the_function_libraries_and_reports_a_damaged_functions_file() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(
        r.cmd(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=lib\nredis.register_function('f', function() return 1 end)"
        ]),
        bulk("lib")
    );
    let TestServer { handle, dir: tmp } = s;
    handle.unwrap().shutdown().unwrap();
    let dir = tmp.path().to_path_buf();
    let d = dir.to_str().unwrap();
    let (code, out, _) = basalt_check(&["--dir", d]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("FUNCTIONS: 1 library"), "{out}");
    let path = dir.join("FUNCTIONS");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[20] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    let (code, out, _) = basalt_check(&["--dir", d]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FUNCTIONS: ERROR"), "{out}");
}
