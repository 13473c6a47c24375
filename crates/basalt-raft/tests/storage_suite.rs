//! openraft's own storage test suite, run against Basalt's log store and
//! state machine (real files in a temporary directory).

mod common;

use basalt_engine::SyncPolicy;
use basalt_raft::{LogStore, StateMachine, StorageError, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use tempfile::TempDir;

struct Builder {
    sync: SyncPolicy,
}

impl StoreBuilder<TypeConfig, LogStore, StateMachine<common::KvApplier>, TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore, StateMachine<common::KvApplier>), StorageError> {
        let dir = TempDir::new().unwrap();
        let log = LogStore::open(&dir.path().join("log"), self.sync).unwrap();
        let (applier, opts) = common::open_kv(&dir.path().join("data"));
        let sm = StateMachine::open(&dir.path().join("sm"), opts, applier).unwrap();
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes_with_fsync_every_second() {
    Suite::test_all(Builder {
        sync: SyncPolicy::EveryMs(1000),
    })
    .unwrap();
}

#[test]
fn openraft_storage_suite_passes_with_fsync_always() {
    Suite::test_all(Builder {
        sync: SyncPolicy::Always,
    })
    .unwrap();
}
