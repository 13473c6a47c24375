//! Files crafted to pass the cheap checks open makes before the expensive
//! ones: open must refuse or ignore them without panicking or reserving
//! memory they only promise. Each case is a crash the `open_dir` fuzz
//! target found (see docs/testing.md).

use std::fs;

use basalt_engine::format::{self, FileHeader, Origin, HINT_MAGIC};
use basalt_engine::{Db, Options, SyncPolicy};

fn opts() -> Options {
    Options::default()
        .shards(1)
        .sync(SyncPolicy::Never)
        .background_compaction(false)
        .active_expiry(false)
}

#[test]
fn a_hint_footer_promising_billions_of_entries_does_not_size_the_index() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("db");
    let db = Db::open(&dir, opts()).unwrap();
    db.put(b"k", b"v").unwrap();
    db.close().unwrap();
    let shard = dir.join("shard-0000");
    let data = shard.join("0000000001.data");
    // A hint with no entries whose footer (CRC and all) promises 2^40.
    let mut hint = FileHeader {
        origin: Origin::Log,
        base_seq: 0,
    }
    .encode(&HINT_MAGIC)
    .to_vec();
    hint.extend_from_slice(&format::encode_hint_footer(
        1 << 40,
        fs::metadata(&data).unwrap().len(),
    ));
    fs::write(shard.join("0000000001.hint"), hint).unwrap();

    // The hint fails its entry count, so the data file is scanned.
    let db = Db::open(&dir, opts()).unwrap();
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    db.close().unwrap();
}
