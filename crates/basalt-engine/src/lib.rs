//! # basalt-engine
//!
//! An embeddable, crash-safe, sharded Bitcask storage engine. Keys and their
//! index live in RAM; values live in append-only data files, so a lookup is
//! one hash probe and one disk read, and a write is one sequential append.
//!
//! ```
//! use basalt_engine::{Db, Options};
//! let dir = tempfile::tempdir().unwrap();
//! let db = Db::open(dir.path(), Options::default()).unwrap();
//! let v1 = db.put(b"greeting", b"hello").unwrap();
//! assert_eq!(db.get(b"greeting").unwrap().as_deref(), Some(&b"hello"[..]));
//! assert_eq!(db.version(b"greeting"), v1);
//! db.put_field(b"user:1", b"name", b"ada").unwrap();
//! assert_eq!(db.get_field(b"user:1", b"name").unwrap().as_deref(), Some(&b"ada"[..]));
//! db.close().unwrap();
//! ```
//!
//! ## Design, and where it departs from the Bitcask paper
//! - **Shards.** The key space is split into N shards (a power of two) by
//!   CRC32C of the key. Each shard has its own directory of data files, its
//!   own active file with a writer lock, and its own index under a
//!   reader-writer lock, so writers to different shards never meet.
//! - **Maps.** A key holds either a value or a map of fields (what a server
//!   needs for hashes, sets, sorted sets and lists). Each field is its own
//!   record, so changing one field of a huge map writes one small record, and
//!   deleting the key drops the whole map with one record.
//! - **Sequence numbers.** Every record carries a database-wide sequence
//!   number; it is the key's version, and recovery uses it to pick the newest
//!   record whatever order files are read in (compaction moves old records
//!   into new files).
//! - **Expiry** lives in the records (values) or in a map-metadata record
//!   (maps). Expired keys are never returned; a background sweep writes a
//!   deletion for each so the data does not linger.
//! - **Durability.** A write has reached the OS before it is acknowledged;
//!   [`SyncPolicy`] decides when it reaches the disk. A failed write or fsync
//!   poisons the engine: later writes fail and say why. A write that
//!   returns an I/O error did not take effect, except under
//!   [`SyncPolicy::Always`] when only its fsync failed: then its outcome is
//!   unknown (it is visible, and may or may not survive a crash).
//! - **Write batches.** [`Db::batch`] (or [`Db::write`] with a
//!   [`WriteBatch`]) makes many writes, to any keys in any shards, one
//!   crash-atomic unit: members are flagged records that count only once
//!   the batch's commit record is in the log. A single write outside a batch
//!   stays one record.
//! - **Segmented values.** A value written a range at a time
//!   ([`Db::write_range`]) and longer than 4 KiB is kept in 512-byte
//!   segments, so changing a few bytes of a large value appends one small
//!   record (a patch of the changed bytes against an earlier copy of the
//!   segment in the same file, or the segment); to every other call it is
//!   a plain value.
//! - **Hint files** list every record of a sealed file without its value;
//!   open reads them (shards in parallel) instead of the data files.
//!
//! The byte layouts are specified in `docs/file-format.md`.

mod batch;
mod check;
mod checkpoint;
mod cold;
mod compaction;
mod db;
mod error;
mod field;
mod fields;
pub mod format;
mod keydir;
mod lane;
mod options;
mod recovery;
mod segmented;
pub mod vfs;

pub use batch::{Batch, BatchGroup, BatchOp, CommitLog, Joined, WriteBatch};
pub use check::{
    check, repair, CheckOptions, CheckReport, Damage, DamageKind, Dropped, FileReport, Progress,
    RepairReport, Severity,
};
pub use checkpoint::CheckpointFile;
pub use cold::{
    clear_staged, cold_read_counts, set_page_cache_budget, stage_record, staged_reads,
    unstage_record, ColdRead, ColdValue, Lookup, ReadPlan, Residency, StagePlan, VersionedLookup,
};
pub use compaction::CompactionReport;
pub use db::{Db, FileStats, KeyKind, KeyMeta, LargeMap, Stats, Versioned, LARGE_MAP_FIELDS};
pub use error::{Error, Result};
pub use format::{crc32c, crc32c_append};
pub use keydir::prefetch_read;
pub use lane::SequenceLane;
pub use options::{Clock, ExpiryListener, ManualClock, Options, SyncPolicy, SystemClock};
pub use segmented::{SEGMENTED_TAG, SEGMENT_ABOVE, SEGMENT_LEN};
