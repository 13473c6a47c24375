//! RocksDB through the `rocksdb` crate, configured for a fair in-RAM
//! comparison: WAL on without fsync per write, one 64 MiB memtable size for
//! every run, a block cache as big as the data (so reads, like Basalt's index
//! lookups, do not depend on the page cache alone) and a 10-bit bloom filter
//! (what db_bench and most deployments use for point lookups).

use std::path::Path;

use anyhow::{Context, Result};
use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Options, WriteOptions, DB};

use super::{Engine, EngineConfig};

pub struct RocksEngine {
    db: DB,
    write_opts: WriteOptions,
}

fn cache_bytes(cfg: &EngineConfig) -> usize {
    if let Some(n) = cfg.rocksdb_block_cache {
        return n;
    }
    // The data plus a quarter for block overhead, at least 8 MiB.
    let want = cfg.data_bytes + cfg.data_bytes / 4;
    usize::try_from(want).unwrap_or(usize::MAX).max(8 << 20)
}

pub fn describe(cfg: &EngineConfig) -> String {
    format!(
        "rocksdb {}: WAL on, sync=false (every write reaches the OS, no fsync per write), \
         write_buffer={} MiB, block cache={} MiB (LRU), bloom 10 bits/key, \
         no compression, otherwise default options",
        ROCKSDB_VERSION,
        cfg.rocksdb_write_buffer >> 20,
        cache_bytes(cfg) >> 20
    )
}

/// The crate version this binary links; the C++ library version follows it.
const ROCKSDB_VERSION: &str = "crate 0.25";

impl RocksEngine {
    pub fn open(dir: &Path, cfg: &EngineConfig) -> Result<Self> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_write_buffer_size(cfg.rocksdb_write_buffer);
        opts.set_compression_type(DBCompressionType::None);

        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&Cache::new_lru_cache(cache_bytes(cfg)));
        table.set_bloom_filter(10.0, false);
        opts.set_block_based_table_factory(&table);

        let db =
            DB::open(&opts, dir).with_context(|| format!("open rocksdb at {}", dir.display()))?;
        let mut write_opts = WriteOptions::default();
        write_opts.set_sync(false);
        write_opts.disable_wal(false);
        Ok(RocksEngine { db, write_opts })
    }
}

impl Engine for RocksEngine {
    fn name(&self) -> &'static str {
        "rocksdb"
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db.put_opt(key, value, &self.write_opts)?;
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.db.get_pinned(key)?.map(|v| v.len()))
    }

    /// Index and filter blocks held by the open SST readers (outside the
    /// block cache, as configured). Memtables are not counted: they hold
    /// values too, and are bounded by the write buffer size.
    fn index_bytes(&self) -> Option<u64> {
        self.db
            .property_int_value("rocksdb.estimate-table-readers-mem")
            .ok()
            .flatten()
    }

    fn close(self: Box<Self>) -> Result<()> {
        // Flush the WAL so a reopen measures recovery of a cleanly closed DB,
        // as Basalt's close does.
        self.db.flush_wal(true)?;
        drop(self);
        Ok(())
    }
}
