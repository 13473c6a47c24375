//! The engines under test, behind one small trait.
//!
//! The harness only needs put, get and a name; everything engine-specific
//! (options, durability, memory figures) stays in the engine's module, so a
//! third engine is one more file and one more [`EngineKind`] variant.

use std::path::Path;

use anyhow::Result;

mod basalt;
mod rocks;

/// One open database. Shared by reference across benchmark threads.
pub trait Engine: Send + Sync {
    /// Short name used in tables and JSON (`basalt`, `rocksdb`).
    fn name(&self) -> &'static str;
    /// Stores `value` under `key`; returns once the write is acknowledged.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Looks `key` up; returns the value's length so that an engine which can
    /// read without copying (RocksDB's pinned reads) is not made to copy.
    fn get(&self, key: &[u8]) -> Result<Option<usize>>;
    /// The engine's own estimate of the memory it keeps per key (its index),
    /// in bytes, if it has one.
    fn index_bytes(&self) -> Option<u64> {
        None
    }
    /// Flushes and closes, releasing the directory.
    fn close(self: Box<Self>) -> Result<()>;
}

/// Which engines exist; the `--engines` list names these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineKind {
    Basalt,
    Rocksdb,
}

/// Basalt's fsync policy for the run (RocksDB never fsyncs per write either).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BasaltSync {
    /// fsync only when a file is sealed and on close: like RocksDB `sync=false`.
    Never,
    /// The product default: a background fsync every second.
    Everysec,
}

/// Settings shared by every engine in a run.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Approximate size of the data set in bytes; RocksDB sizes its block
    /// cache from it so reads are served from RAM as they are for Basalt.
    pub data_bytes: u64,
    pub basalt_sync: BasaltSync,
    /// RocksDB memtable size in bytes.
    pub rocksdb_write_buffer: usize,
    /// RocksDB block cache in bytes; `None`: sized from `data_bytes`.
    pub rocksdb_block_cache: Option<usize>,
    /// Basalt checks residency before reading in place.
    pub basalt_check_residency: bool,
}

impl EngineKind {
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Basalt => "basalt",
            EngineKind::Rocksdb => "rocksdb",
        }
    }

    pub fn open(self, dir: &Path, cfg: &EngineConfig) -> Result<Box<dyn Engine>> {
        Ok(match self {
            EngineKind::Basalt => Box::new(basalt::BasaltEngine::open(dir, cfg)?),
            EngineKind::Rocksdb => Box::new(rocks::RocksEngine::open(dir, cfg)?),
        })
    }

    /// One line saying how durable an acknowledged write is, and any
    /// configuration a reader needs to judge the comparison.
    pub fn describe(self, cfg: &EngineConfig) -> String {
        match self {
            EngineKind::Basalt => basalt::describe(cfg),
            EngineKind::Rocksdb => rocks::describe(cfg),
        }
    }
}
