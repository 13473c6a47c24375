//! kill -9 never loses an acknowledged write.
//!
//! The test binary runs itself again as a child (`child_writer_process`,
//! which does nothing unless `BASALT_KILL9_DIR` is set). The child writes a
//! deterministic script of puts, overwrites, field writes and deletions with
//! the default `SyncPolicy::EveryMs(1000)`, small files (so files rotate and
//! background compaction runs) and prints `ack <op> <i>` after each write
//! returns Ok. The parent kills it with SIGKILL mid-stream, reopens the
//! directory and checks every acknowledged step against a model; then a new
//! child continues on the recovered directory, three rounds in all.
//!
//! The step after the last acknowledged one may have been in flight: its key
//! may show the state before or after it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use basalt_engine::{Db, KeyKind, Options};

const DIR_ENV: &str = "BASALT_KILL9_DIR";
const START_ENV: &str = "BASALT_KILL9_START";
const PROFILE_ENV: &str = "BASALT_KILL9_PROFILE";
/// The child gives up by itself after this long, should the parent vanish.
const CHILD_LIFETIME: Duration = Duration::from_secs(40);

fn opts() -> Options {
    // Default sync policy: EveryMs(1000). 64 KiB files rotate every few
    // dozen writes; the script overwrites a lot, so background compaction
    // (threshold 0.5, run once a second) finds work.
    Options::default().shards(4).max_file_size(64 << 10)
}

/// Files big enough that the child never rotates: every record is stored
/// through the active file's writable map, into space reserved megabytes
/// ahead, so the kill leaves a zero tail behind the last record.
fn map_opts() -> Options {
    Options::default().shards(2).max_file_size(64 << 20)
}

fn opts_for(profile: &str) -> Options {
    match profile {
        "map" => map_opts(),
        _ => opts(),
    }
}

// ------------------------------------------------------------- the script

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Put {
        key: String,
        value: Vec<u8>,
    },
    Delete {
        key: String,
    },
    PutField {
        key: String,
        field: String,
        value: Vec<u8>,
    },
    DeleteField {
        key: String,
        field: String,
    },
}

impl Step {
    fn name(&self) -> &'static str {
        match self {
            Step::Put { .. } => "put",
            Step::Delete { .. } => "del",
            Step::PutField { .. } => "field",
            Step::DeleteField { .. } => "delfield",
        }
    }
    fn key(&self) -> &str {
        match self {
            Step::Put { key, .. }
            | Step::Delete { key }
            | Step::PutField { key, .. }
            | Step::DeleteField { key, .. } => key,
        }
    }
}

/// Value sizes from empty to 16 KiB, most of them small.
fn value_for(i: u64) -> Vec<u8> {
    const SIZES: [usize; 8] = [0, 7, 40, 120, 300, 900, 2500, 16 << 10];
    let len = SIZES[(i.wrapping_mul(2_654_435_761) >> 7) as usize % SIZES.len()];
    let mut v = format!("v{i}|").into_bytes();
    v.extend((0..len).map(|j| (i as usize).wrapping_mul(13).wrapping_add(j * 7) as u8));
    v
}

/// Step `i` of the script. Value keys (`k*`) and map keys (`m*`) never mix.
/// 1500 value keys are overwritten over and over, which makes garbage.
fn step(i: u64) -> Step {
    match i % 20 {
        0..=10 => Step::Put {
            key: format!("k{}", i % 1500),
            value: value_for(i),
        },
        11 | 12 => Step::Delete {
            key: format!("k{}", (i * 7919) % 1500),
        },
        13..=16 => Step::PutField {
            key: format!("m{}", (i / 20) % 40),
            field: format!("f{}", (i * 31) % 23),
            value: value_for(i),
        },
        17 | 18 => Step::DeleteField {
            key: format!("m{}", (i / 20) % 40),
            field: format!("f{}", (i * 17) % 23),
        },
        _ => Step::Delete {
            key: format!("m{}", (i / 20 + 7) % 40),
        },
    }
}

fn run_step(db: &Db, s: &Step) -> basalt_engine::Result<()> {
    match s {
        Step::Put { key, value } => db.put(key.as_bytes(), value).map(drop),
        Step::Delete { key } => db.delete(key.as_bytes()).map(drop),
        Step::PutField { key, field, value } => db
            .put_field(key.as_bytes(), field.as_bytes(), value)
            .map(drop),
        Step::DeleteField { key, field } => {
            db.delete_field(key.as_bytes(), field.as_bytes()).map(drop)
        }
    }
}

// -------------------------------------------------------------- the model

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Value(Vec<u8>),
    Map(BTreeMap<Vec<u8>, Vec<u8>>),
}

#[derive(Debug, Clone, Default)]
struct Model {
    entries: BTreeMap<String, Entry>,
    touched: BTreeSet<String>,
}

impl Model {
    fn apply(&mut self, s: &Step) {
        self.touched.insert(s.key().to_string());
        match s {
            Step::Put { key, value } => {
                self.entries
                    .insert(key.clone(), Entry::Value(value.clone()));
            }
            Step::Delete { key } => {
                self.entries.remove(key);
            }
            Step::PutField { key, field, value } => {
                match self
                    .entries
                    .entry(key.clone())
                    .or_insert_with(|| Entry::Map(BTreeMap::new()))
                {
                    Entry::Map(m) => {
                        m.insert(field.clone().into_bytes(), value.clone());
                    }
                    Entry::Value(_) => unreachable!("value and map keys never mix"),
                }
            }
            Step::DeleteField { key, field } => {
                if let Some(Entry::Map(m)) = self.entries.get_mut(key) {
                    m.remove(field.as_bytes());
                    if m.is_empty() {
                        self.entries.remove(key);
                    }
                }
            }
        }
    }
}

fn db_entry(db: &Db, key: &str) -> Option<Entry> {
    let key = key.as_bytes();
    match db.meta(key)?.kind {
        KeyKind::Value { .. } => Some(Entry::Value(
            db.get(key).expect("get").expect("meta says it exists"),
        )),
        KeyKind::Map { .. } => Some(Entry::Map(
            db.fields(key).expect("fields").into_iter().collect(),
        )),
    }
}

fn all_keys(db: &Db) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut cursor = 0;
    for _ in 0..100_000 {
        let (batch, next) = db.scan(cursor, 256);
        keys.extend(
            batch
                .into_iter()
                .map(|k| String::from_utf8(k).expect("utf-8 key")),
        );
        if next == 0 {
            return keys;
        }
        cursor = next;
    }
    panic!("scan did not finish");
}

/// Checks the reopened database against the model; `unsure` is the step that
/// may have been in flight. Returns the model with `unsure` settled the way
/// the database shows it.
fn verify(db: &Db, mut model: Model, unsure: &Step, ctx: &str) -> Model {
    let mut after = model.clone();
    after.apply(unsure);
    for key in model
        .touched
        .iter()
        .chain(std::iter::once(&unsure.key().to_string()))
    {
        let got = db_entry(db, key);
        let want = model.entries.get(key).cloned();
        if got == want {
            continue;
        }
        let alt = after.entries.get(key).cloned();
        assert!(
            key == unsure.key() && got == alt,
            "{ctx}: key {key}: the database has {:?}, acknowledged writes say {:?}",
            got.as_ref().map(short),
            want.as_ref().map(short)
        );
    }
    for key in all_keys(db) {
        assert!(
            model.entries.contains_key(&key) || key == unsure.key(),
            "{ctx}: key {key} is in the database but was never written or was deleted"
        );
    }
    if db_entry(db, unsure.key()) != model.entries.get(unsure.key()).cloned() {
        model.apply(unsure);
    }
    model
}

fn short(e: &Entry) -> String {
    match e {
        Entry::Value(v) => format!(
            "value {:?}.. ({} bytes)",
            String::from_utf8_lossy(&v[..v.len().min(12)]),
            v.len()
        ),
        Entry::Map(m) => format!("map of {} fields", m.len()),
    }
}

// -------------------------------------------------------------- the child

/// The child's body. Without `BASALT_KILL9_DIR` (a normal test run) it does
/// nothing.
#[test]
fn child_writer_process() {
    let Some(dir) = std::env::var_os(DIR_ENV) else {
        return;
    };
    let start: u64 = std::env::var(START_ENV).unwrap().parse().unwrap();
    let profile = std::env::var(PROFILE_ENV).unwrap_or_default();
    let db = Db::open(&dir, opts_for(&profile)).expect("child: open");
    let out = std::io::stdout();
    // libtest has printed "test child_writer_process ... " without a newline.
    writeln!(out.lock()).unwrap();
    let began = Instant::now();
    let mut i = start;
    while began.elapsed() < CHILD_LIFETIME {
        let s = step(i);
        run_step(&db, &s).unwrap_or_else(|e| panic!("child: step {i} {s:?}: {e}"));
        let mut o = out.lock();
        writeln!(o, "ack {} {i}", s.name()).unwrap();
        if i.is_multiple_of(500) {
            writeln!(o, "compactions {}", db.stats().compactions).unwrap();
        }
        o.flush().unwrap();
        drop(o);
        // A little slower than flat out, so a round lasts long enough for the
        // once-a-second background compaction to run.
        if i.is_multiple_of(4) {
            std::thread::sleep(Duration::from_micros(500));
        }
        i += 1;
    }
    panic!("child: the parent never killed me");
}

// ------------------------------------------------------------- the parent

/// Kills the child if the parent panics before it does.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What one child round produced.
struct Round {
    /// Acknowledged steps, in order.
    acked: Vec<u64>,
    /// Highest compaction count the child reported.
    compactions: u64,
}

fn spawn_child(dir: &Path, profile: &str, start: u64, stderr_path: &Path) -> KillOnDrop {
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_writer_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, dir)
        .env(START_ENV, start.to_string())
        .env(PROFILE_ENV, profile)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(stderr_path).unwrap()))
        .spawn()
        .expect("spawn child");
    KillOnDrop(child)
}

/// Records one line of the child's output.
fn take(line: String, round: &mut Round) {
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("ack"), Some(name), Some(i), None) => {
            let Ok(i) = i.parse::<u64>() else { return };
            assert_eq!(step(i).name(), name, "child acked step {i} as {name}");
            round.acked.push(i);
        }
        (Some("compactions"), Some(n), None, None) => {
            if let Ok(n) = n.parse() {
                round.compactions = round.compactions.max(n);
            }
        }
        _ => {}
    }
}

/// Runs one child from step `start` until it has acknowledged at least
/// `min_acks` steps and run for `min_time`, then SIGKILLs it.
fn run_round(
    dir: &Path,
    profile: &str,
    start: u64,
    min_acks: usize,
    min_time: Duration,
    stderr_path: &Path,
) -> Round {
    let mut child = spawn_child(dir, profile, start, stderr_path);
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        // `lines` yields a final unterminated line too; a line cut by the
        // kill fails to parse and is ignored below, like any unacked step.
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let began = Instant::now();
    let deadline = began + Duration::from_secs(15);
    let mut round = Round {
        acked: Vec::new(),
        compactions: 0,
    };
    while round.acked.len() < min_acks || began.elapsed() < min_time {
        let now = Instant::now();
        assert!(
            now < deadline,
            "child acknowledged only {} steps in 15 s; its stderr: {}",
            round.acked.len(),
            std::fs::read_to_string(stderr_path).unwrap_or_default()
        );
        match rx.recv_timeout(deadline - now) {
            Ok(line) => take(line, &mut round),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!(
                "child exited after {} acks; its stderr: {}",
                round.acked.len(),
                std::fs::read_to_string(stderr_path).unwrap_or_default()
            ),
        }
    }
    // SIGKILL, mid-write.
    child.0.kill().expect("kill child");
    let status = child.0.wait().expect("wait child");
    assert!(
        !status.success(),
        "the child was killed, not finished: {status:?}"
    );
    // Acks still in the pipe were acknowledged before the kill: count them.
    reader.join().unwrap();
    while let Ok(line) = rx.try_recv() {
        take(line, &mut round);
    }
    round
}

#[test]
fn sigkill_mid_write_never_loses_an_acknowledged_write_over_three_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let db_dir = dir.path().join("db");
    let stderr_path = dir.path().join("child.stderr");
    let mut model = Model::default();
    let mut start = 0u64;
    let mut compactions = 0;
    let mut files_seen = 0;
    for round_no in 0..3 {
        // The middle round runs past a second so background compaction runs
        // in the child; the others stop at a varying count.
        let (min_acks, min_time) = match round_no {
            0 => (2000, Duration::ZERO),
            1 => (2500, Duration::from_millis(2000)),
            _ => (3100, Duration::ZERO),
        };
        let round = run_round(&db_dir, "small", start, min_acks, min_time, &stderr_path);
        compactions = compactions.max(round.compactions);
        let last = *round.acked.last().unwrap();
        for (n, &i) in round.acked.iter().enumerate() {
            assert_eq!(i, start + n as u64, "round {round_no}: acks out of order");
            model.apply(&step(i));
        }
        let unsure = step(last + 1);

        let db = Db::open(&db_dir, opts().background_compaction(false))
            .unwrap_or_else(|e| panic!("round {round_no}: reopen after kill -9: {e}"));
        let ctx = format!(
            "round {round_no} (steps {start}..={last}, maybe {})",
            last + 1
        );
        model = verify(&db, model, &unsure, &ctx);
        let st = db.stats();
        files_seen = files_seen.max(st.files.len());
        println!(
            "round {round_no}: {} acks, child reported {} compactions, reopened with {} keys in {} files",
            round.acked.len(),
            round.compactions,
            st.keys,
            st.files.len()
        );
        drop(db);
        // The in-flight step is settled; the next child starts after it.
        start = last + 2;
    }
    assert!(
        files_seen > 8,
        "files should have rotated (saw at most {files_seen} files)"
    );
    assert!(
        compactions > 0,
        "background compaction never ran in a child"
    );
}

/// Every data file's (name, length) on disk.
fn data_file_lens(db_dir: &Path) -> Vec<(String, u64)> {
    let mut v = Vec::new();
    for shard in std::fs::read_dir(db_dir).unwrap() {
        let shard = shard.unwrap().path();
        if !shard.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&shard).unwrap() {
            let f = f.unwrap();
            let name = f.file_name().into_string().unwrap();
            if name.ends_with(".data") {
                v.push((name, f.metadata().unwrap().len()));
            }
        }
    }
    v
}

#[test]
fn sigkill_while_appending_through_the_map_keeps_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let db_dir = dir.path().join("db");
    let stderr_path = dir.path().join("child.stderr");
    let mut model = Model::default();
    let mut start = 0u64;
    for (round_no, min_acks) in [(0, 1500), (1, 2600)] {
        let round = run_round(
            &db_dir,
            "map",
            start,
            min_acks,
            Duration::ZERO,
            &stderr_path,
        );
        let last = *round.acked.last().unwrap();
        for (n, &i) in round.acked.iter().enumerate() {
            assert_eq!(i, start + n as u64, "round {round_no}: acks out of order");
            model.apply(&step(i));
        }
        // The child stored its records through maps of files reserved 2 MiB
        // at a time: each active file ends in zeros past its last record.
        let mut lens = data_file_lens(&db_dir);
        lens.sort();
        assert!(
            lens.iter().all(|(_, len)| len % (2 << 20) == 0),
            "round {round_no}: files not extended in reservation steps: {lens:?}"
        );

        let db = Db::open(&db_dir, map_opts().background_compaction(false))
            .unwrap_or_else(|e| panic!("round {round_no}: reopen after kill -9: {e}"));
        let ctx = format!(
            "map round {round_no} (steps {start}..={last}, maybe {})",
            last + 1
        );
        model = verify(&db, model, &step(last + 1), &ctx);
        // Open cut every zero tail: each file ends at its last record.
        let mut cut = data_file_lens(&db_dir);
        cut.sort();
        assert_ne!(lens, cut, "round {round_no}: nothing was cut");
        let st = db.stats();
        for (name, len) in data_file_lens(&db_dir) {
            let f = st
                .files
                .iter()
                .find(|f| name == format!("{:010}.data", f.id) && f.total_bytes == len);
            assert!(
                f.is_some(),
                "round {round_no}: {name} is {len} bytes, not cut to its records"
            );
        }
        println!(
            "map round {round_no}: {} acks, reopened with {} keys in {} files",
            round.acked.len(),
            st.keys,
            st.files.len()
        );
        drop(db);
        start = last + 2;
    }
}

// ------------------------------------- a kill between compaction's unlinks

fn shard_files(shard_dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(shard_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".data") || n.ends_with(".hint"))
        .collect()
}

/// Compaction deletes its input files one by one after its outputs are
/// durable. A kill between two of those unlinks leaves some inputs behind.
/// If a tombstone was dropped (not copied to the output) because every
/// older record lived in the inputs, and the input holding the tombstone is
/// unlinked before an input holding a record it shadows, the deleted key
/// would come back. The engine guards the unlinks with a `.victims` marker
/// (see docs/file-format.md) that open uses to finish the deletions.
///
/// The kill cannot be timed from outside, so this recreates the directory
/// it leaves: run the compaction to the end, then put back the input that
/// is unlinked after the tombstone's file (inputs go in ascending id order),
/// exactly as it was on disk before the compaction, next to the marker the
/// compaction had written before its first unlink.
#[test]
fn kill_between_compaction_input_deletions_never_resurrects_a_deleted_key() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || {
        Options::default()
            .shards(1)
            .background_compaction(false)
            .active_expiry(false)
    };
    let shard = dir.path().join("shard-0000");
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put(b"doomed", b"old value").unwrap();
    for i in 0..50u32 {
        db.put(b"churn", &i.to_le_bytes()).unwrap();
    }
    // Rewrites the first log file: "doomed" now lives in a compaction output.
    db.compact().unwrap();
    let output = db
        .stats()
        .files
        .into_iter()
        .find(|f| f.compacted)
        .expect("a compaction output")
        .id;
    // The tombstone goes to the active log file, whose id is *lower* than
    // the output's (it was created by the rotation that preceded it).
    assert!(db.delete(b"doomed").unwrap());
    let tomb_file = db.stats().files.into_iter().find(|f| f.active).unwrap().id;
    assert!(
        tomb_file < output,
        "setup: tombstone file {tomb_file}, output {output}"
    );

    let saved: Vec<(String, Vec<u8>)> = shard_files(&shard)
        .into_iter()
        .filter(|n| n.starts_with(&format!("{output:010}.")))
        .map(|n| (n.clone(), std::fs::read(shard.join(&n)).unwrap()))
        .collect();
    assert!(!saved.is_empty());

    // Compacts the tombstone's file and the output together.
    let report = db.compact().unwrap();
    assert!(report.files_compacted >= 2, "{report:?}");
    assert_eq!(db.get(b"doomed").unwrap(), None);
    drop(db);
    // The state a kill leaves after the tombstone file was unlinked and
    // before the output was.
    let left = shard_files(&shard);
    assert!(!left
        .iter()
        .any(|n| n.starts_with(&format!("{tomb_file:010}."))));
    for (name, bytes) in &saved {
        std::fs::write(shard.join(name), bytes).unwrap();
    }
    let marker = shard.join(format!("{:010}.victims", output + 100));
    std::fs::write(
        &marker,
        basalt_engine::format::encode_victims(&[tomb_file, output]),
    )
    .unwrap();

    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(
        db.get(b"doomed").unwrap(),
        None,
        "a deleted key came back after a kill between compaction's unlinks"
    );
    assert_eq!(
        db.get(b"churn").unwrap(),
        Some(49u32.to_le_bytes().to_vec())
    );
    // Open finished the interrupted deletions and removed the marker.
    let left = shard_files(&shard);
    assert!(
        !left
            .iter()
            .any(|n| n.starts_with(&format!("{output:010}."))),
        "{left:?}"
    );
    assert!(!marker.exists());
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get(b"doomed").unwrap(), None);
}
