//! Basalt through its embedded API.

use std::path::Path;

use anyhow::{Context, Result};
use basalt_engine::{Db, Options, SyncPolicy};

use super::{BasaltSync, Engine, EngineConfig};

pub struct BasaltEngine {
    db: Db,
}

fn sync_policy(cfg: &EngineConfig) -> SyncPolicy {
    match cfg.basalt_sync {
        BasaltSync::Never => SyncPolicy::Never,
        BasaltSync::Everysec => SyncPolicy::EveryMs(1000),
    }
}

pub fn describe(cfg: &EngineConfig) -> String {
    format!(
        "basalt: sync={:?} (every write reaches the OS before put returns; no fsync per write), \
         residency {}, default options otherwise (8 shards, compression off)",
        sync_policy(cfg),
        if cfg.basalt_check_residency {
            "check (cold records read with pread)"
        } else {
            "in-place"
        }
    )
}

impl BasaltEngine {
    pub fn open(dir: &Path, cfg: &EngineConfig) -> Result<Self> {
        let opts = Options {
            sync: sync_policy(cfg),
            ..Options::default()
        };
        let db =
            Db::open(dir, opts).with_context(|| format!("open basalt at {}", dir.display()))?;
        if cfg.basalt_check_residency {
            db.set_residency(basalt_engine::Residency::Check);
        }
        Ok(BasaltEngine { db })
    }
}

impl Engine for BasaltEngine {
    fn name(&self) -> &'static str {
        "basalt"
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db.put(key, value)?;
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.db.get(key)?.map(|v| v.len()))
    }

    fn index_bytes(&self) -> Option<u64> {
        Some(self.db.stats().index_bytes)
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.close()?;
        Ok(())
    }
}
