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

#[test]
fn an_lz4_value_claiming_4_gib_is_refused_without_allocating_it() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("db");
    Db::open(&dir, opts()).unwrap().close().unwrap();
    // A record whose CRC is right but whose lz4 size prefix says 4 GiB.
    let mut file = FileHeader {
        origin: Origin::Log,
        base_seq: 1,
    }
    .encode(&format::DATA_MAGIC)
    .to_vec();
    let mut value = 0xFFFF_FF00u32.to_le_bytes().to_vec();
    value.extend_from_slice(&[0x1f, 0x00, 0x01, 0x00]);
    format::RecordRef {
        seq: 5,
        expiry: 0,
        kind: format::Kind::Put,
        flags: format::FLAG_LZ4,
        tag: 0,
        key: b"bomb",
        field: &[],
        value: &value,
    }
    .encode_into(&mut file);
    fs::write(dir.join("shard-0000").join("0000000009.data"), file).unwrap();

    let db = Db::open(&dir, opts()).unwrap();
    let err = db.get(b"bomb").unwrap_err();
    assert!(
        err.to_string()
            .contains("lz4 value claims more bytes than its compressed form can hold"),
        "{err}"
    );
    // A real, highly compressible value still reads back.
    let db = {
        db.close().unwrap();
        Db::open(&dir, opts().compress_above(Some(64))).unwrap()
    };
    let zeros = vec![0u8; 4 << 20];
    db.put(b"zeros", &zeros).unwrap();
    assert_eq!(db.get(b"zeros").unwrap(), Some(zeros));
    db.close().unwrap();
}
