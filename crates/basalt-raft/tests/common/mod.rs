//! A small replicated key-value store over the engine, the applier the
//! tests drive Raft with, and its commit log (what the server's keyspace
//! does with its databases, in miniature).

#![allow(dead_code)]

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use basalt_engine::{BatchGroup, CheckpointFile, CommitLog, Db, Options, SyncPolicy};
use basalt_raft::Applier;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// A client request of the test store.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Op {
    /// Sets a key; replies with the previous value (empty if none).
    Set(Vec<u8>, Vec<u8>),
    /// Adds one to a decimal counter; replies with the new value.
    Incr(Vec<u8>),
    /// Deletes a key; replies "1" or "0".
    Del(Vec<u8>),
}

impl Op {
    pub fn bytes(&self) -> Vec<u8> {
        bincode::serialize(self).unwrap()
    }
}

/// Batch tokens of the group, in a file (fsynced per token).
#[derive(Debug)]
pub struct FileCommitLog {
    file: Mutex<File>,
    tokens: Mutex<HashSet<u64>>,
}

impl FileCommitLog {
    pub fn open(path: &Path) -> Arc<FileCommitLog> {
        let mut tokens = HashSet::new();
        if let Ok(mut f) = File::open(path) {
            let mut b = Vec::new();
            f.read_to_end(&mut b).unwrap();
            for c in b.chunks_exact(8) {
                tokens.insert(u64::from_le_bytes(c.try_into().unwrap()));
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        Arc::new(FileCommitLog {
            file: Mutex::new(file),
            tokens: Mutex::new(tokens),
        })
    }
    pub fn contains(&self, t: u64) -> bool {
        self.tokens.lock().contains(&t)
    }
}

impl CommitLog for FileCommitLog {
    fn commit(&self, token: u64) -> io::Result<()> {
        self.file.lock().write_all(&token.to_le_bytes())?;
        self.tokens.lock().insert(token);
        Ok(())
    }
}

/// The key-value applier: its data in its own engine database, in one
/// batch group (with a commit log) with the state machine's marker.
#[derive(Debug)]
pub struct KvApplier {
    pub db: Db,
    log: Arc<FileCommitLog>,
    /// Makes the next install stop with an error part-way (a crash during
    /// an install, for tests).
    pub fail_next_install: AtomicBool,
    /// Held while entries apply and while a checkpoint links files.
    gate: Mutex<()>,
}

/// Opens the test store under `dir`: returns the applier and the options
/// for the state machine's marker database (same group and oracle).
pub fn open_kv(dir: &Path) -> (KvApplier, Options) {
    std::fs::create_dir_all(dir).unwrap();
    let log = FileCommitLog::open(&dir.join("COMMITS"));
    let group = BatchGroup::with_log(log.clone());
    let opts = || {
        let log = log.clone();
        Options::default()
            .sync(SyncPolicy::EveryMs(1000))
            .batch_group(group.clone())
            .commit_oracle(Arc::new(move |t| log.contains(t)))
    };
    let db = Db::open(dir.join("kv"), opts()).unwrap();
    let applier = KvApplier {
        db,
        log: log.clone(),
        fail_next_install: AtomicBool::new(false),
        gate: Mutex::new(()),
    };
    (applier, opts())
}

impl Applier for KvApplier {
    fn enter(&self) -> Box<dyn basalt_raft::Held + '_> {
        Box::new(self.gate.lock())
    }

    fn apply(&self, _index: u64, payload: &[u8]) -> io::Result<Vec<u8>> {
        let op: Op = bincode::deserialize(payload).map_err(io::Error::other)?;
        let e = io::Error::other;
        Ok(match op {
            Op::Set(k, v) => {
                let old = self.db.get(&k).map_err(e)?.unwrap_or_default();
                self.db.put(&k, &v).map_err(e)?;
                old
            }
            Op::Incr(k) => {
                let old = self.db.get(&k).map_err(e)?.unwrap_or_default();
                let n: u64 = std::str::from_utf8(&old)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let new = (n + 1).to_string().into_bytes();
                self.db.put(&k, &new).map_err(e)?;
                new
            }
            Op::Del(k) => {
                if self.db.delete(&k).map_err(e)? {
                    b"1".to_vec()
                } else {
                    b"0".to_vec()
                }
            }
        })
    }

    /// The engine's checkpoint of the store, and the group's tokens (its
    /// batches' commits are conditional on them).
    fn checkpoint(
        &self,
        dir: &Path,
        captured: &mut dyn FnMut(),
    ) -> io::Result<Vec<CheckpointFile>> {
        std::fs::create_dir_all(dir)?;
        // No entry applies while the files are linked (`enter`).
        let gate = self.gate.lock();
        captured();
        let mut files = self
            .db
            .checkpoint(&dir.join("kv"))
            .map_err(io::Error::other)?;
        drop(gate);
        for f in &mut files {
            f.path = Path::new("kv").join(&f.path);
        }
        let tokens: Vec<u8> = self
            .log
            .tokens
            .lock()
            .iter()
            .flat_map(|t| t.to_le_bytes())
            .collect();
        std::fs::write(dir.join("tokens"), &tokens)?;
        files.push(CheckpointFile {
            path: "tokens".into(),
            len: tokens.len() as u64,
        });
        Ok(files)
    }

    /// Opens the received store and copies it over this one (the server
    /// swaps directories instead; copying keeps this applier small).
    fn install(&self, dir: &Path, _index: u64) -> io::Result<()> {
        let e = io::Error::other;
        let tokens: HashSet<u64> = std::fs::read(dir.join("tokens"))?
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let theirs = Db::open(
            dir.join("kv"),
            Options::default().commit_oracle(Arc::new(move |t| tokens.contains(&t))),
        )
        .map_err(e)?;
        let mut cursor = 0;
        let mut keep = HashSet::new();
        loop {
            let (keys, next) = theirs.scan(cursor, 1000);
            if self.fail_next_install.swap(false, Ordering::SeqCst) {
                return Err(io::Error::other("install interrupted (test)"));
            }
            for k in keys {
                if let Some(v) = theirs.get(&k).map_err(e)? {
                    self.db.put(&k, &v).map_err(e)?;
                    keep.insert(k);
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        for k in self.keys() {
            if !keep.contains(&k) {
                self.db.delete(&k).map_err(e)?;
            }
        }
        theirs.close().map_err(e)
    }
}

impl KvApplier {
    pub fn keys(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut cursor = 0;
        loop {
            let (keys, next) = self.db.scan(cursor, 1000);
            out.extend(keys);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        out.sort();
        out.dedup();
        out
    }

    /// Every (key, value), sorted.
    pub fn dump(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.keys()
            .into_iter()
            .filter_map(|k| self.db.get(&k).unwrap().map(|v| (k, v)))
            .collect()
    }
}

pub fn tmp_path(t: &tempfile::TempDir, name: &str) -> PathBuf {
    t.path().join(name)
}
