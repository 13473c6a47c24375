//! Opening a directory of arbitrary bytes. The input is a list of files
//! (`[kind][id][len u16][bytes]`…) written into an empty directory as
//! `BASALT`, data, hint and victims files of one shard. Then:
//! `Db::open` returns `Ok` or `Err` (never panics, hangs or allocates
//! absurdly), and every key it lists reads back `Ok` or `Err`;
//! `check` returns; and after a successful `repair`, `Db::open` succeeds.
//!
//! CRC32C is a wall a mutating fuzzer rarely gets through, so a kind byte
//! with bit 0x40 asks the harness to re-sign the file: it walks records or
//! hint entries by their own length fields and rewrites each CRC (and a
//! hint's footer), so semantic nonsense with valid checksums is explored
//! too. Bit 0x80 prepends a valid file header.
#![no_main]

use std::path::Path;

use basalt_engine::format::{self, FileHeader, Origin};
use basalt_engine::{check, repair, CheckOptions, Db, Options, SyncPolicy};
use libfuzzer_sys::fuzz_target;

fn opts() -> Options {
    Options::default()
        .shards(1)
        .max_file_size(1 << 16)
        .sync(SyncPolicy::Never)
        .background_compaction(false)
        .active_expiry(false)
}

fn u32_at(b: &[u8], i: usize) -> usize {
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap()) as usize
}

/// Rewrites the CRC of every record that its own header frames.
fn sign_records(b: &mut [u8]) {
    let mut off = format::FILE_HEADER_LEN;
    while off + format::RECORD_HEADER_LEN <= b.len() {
        let len = format::RECORD_HEADER_LEN
            .saturating_add(u32_at(b, off + 24))
            .saturating_add(u32_at(b, off + 28))
            .saturating_add(u32_at(b, off + 32));
        if len > b.len() - off {
            return;
        }
        let crc = crc32c::crc32c(&b[off + 4..off + len]);
        b[off..off + 4].copy_from_slice(&crc.to_le_bytes());
        off += len;
    }
}

/// Rewrites the CRC of every hint entry and of the footer.
fn sign_hint(b: &mut [u8]) {
    if b.len() < format::FILE_HEADER_LEN + format::HINT_FOOTER_LEN {
        return;
    }
    let body_end = b.len() - format::HINT_FOOTER_LEN;
    let mut off = format::FILE_HEADER_LEN;
    while off + format::HINT_ENTRY_HEADER_LEN <= body_end {
        let len = format::HINT_ENTRY_HEADER_LEN
            .saturating_add(u32_at(b, off + 24))
            .saturating_add(u32_at(b, off + 28));
        if len > body_end - off {
            break;
        }
        let crc = crc32c::crc32c(&b[off + 4..off + len]);
        b[off..off + 4].copy_from_slice(&crc.to_le_bytes());
        off += len;
    }
    let foot = &mut b[body_end..];
    foot[0..8].copy_from_slice(&format::HINT_FOOTER_MAGIC);
    let crc = crc32c::crc32c(&foot[0..24]);
    foot[24..28].copy_from_slice(&crc.to_le_bytes());
}

fn meta(shards: u32) -> Vec<u8> {
    let mut b = b"BSLTMETA".to_vec();
    b.extend_from_slice(&format::FORMAT_VERSION.to_le_bytes());
    b.extend_from_slice(&shards.to_le_bytes());
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

fn write_files(dir: &Path, mut data: &[u8]) {
    let shard = dir.join("shard-0000");
    std::fs::create_dir_all(&shard).unwrap();
    std::fs::write(dir.join("BASALT"), meta(1)).unwrap();
    for _ in 0..8 {
        if data.len() < 4 {
            return;
        }
        let (kind, id) = (data[0], data[1] % 8 + 1);
        let len = (u16::from_le_bytes([data[2], data[3]]) as usize).min(data.len() - 4);
        let mut bytes = Vec::with_capacity(len + 32);
        let origin = if kind & 0x20 != 0 {
            Origin::Compaction
        } else {
            Origin::Log
        };
        let magic = match kind & 3 {
            0 => Some(format::DATA_MAGIC),
            1 => Some(format::HINT_MAGIC),
            _ => None,
        };
        if let (true, Some(m)) = (kind & 0x80 != 0, magic) {
            bytes.extend_from_slice(
                &FileHeader {
                    origin,
                    base_seq: 1,
                }
                .encode(&m),
            );
        }
        bytes.extend_from_slice(&data[4..4 + len]);
        data = &data[4 + len..];
        if kind & 0x40 != 0 {
            match kind & 3 {
                0 => sign_records(&mut bytes),
                1 => sign_hint(&mut bytes),
                _ => {}
            }
        }
        let path = match kind & 3 {
            0 => shard.join(format!("{id:010}.data")),
            1 => shard.join(format!("{id:010}.hint")),
            2 => shard.join(format!("{id:010}.victims")),
            _ => dir.join("BASALT"),
        };
        std::fs::write(path, bytes).unwrap();
    }
}

fuzz_target!(|data: &[u8]| {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    write_files(&dir, data);
    if let Ok(db) = Db::open(&dir, opts()) {
        let (keys, _) = db.scan(0, 1000);
        for k in keys {
            let _ = db.get(&k);
            let _ = db.fields(&k);
        }
        let _ = db.close();
    }
    let _ = check(&dir, &CheckOptions::default());
    if repair(&dir, &CheckOptions::default()).is_ok() {
        let report = check(&dir, &CheckOptions::default()).expect("check after repair");
        assert!(
            report.is_clean(),
            "repair left damage: {:#?}",
            report.damage
        );
        match Db::open(&dir, opts()) {
            Ok(db) => {
                let (keys, _) = db.scan(0, 1000);
                for k in keys {
                    let _ = db.get(&k);
                }
                let _ = db.close();
            }
            Err(e) => panic!("open after repair failed: {e}"),
        }
    }
});
