//! Byte layouts of data files, records and hint files; `docs/file-format.md`
//! is the specification this module implements.
//!
//! Everything is little-endian. Every record carries a CRC32C over all of its
//! bytes after the CRC field, so a torn or flipped record is always caught.

use crate::{Error, Result};

/// Magic at the start of every data file.
pub const DATA_MAGIC: [u8; 8] = *b"BSLTDATA";
/// Magic at the start of every hint file.
pub const HINT_MAGIC: [u8; 8] = *b"BSLTHINT";
/// Magic that opens a hint file's footer.
pub const HINT_FOOTER_MAGIC: [u8; 8] = *b"BSLTHEND";
/// The on-disk format version written by this build.
pub const FORMAT_VERSION: u32 = 3;
/// The oldest format version this build reads. Version 1 files are version 2
/// files that hold no batch members and no commit records, and version 2
/// files are version 3 files that hold no patch records ([`FLAG_PATCH`]),
/// so they are read as they are (and never rewritten just to change their
/// version).
pub const OLDEST_READABLE_VERSION: u32 = 1;

/// Size of a data or hint file header.
pub const FILE_HEADER_LEN: usize = 32;
/// Size of a record header.
pub const RECORD_HEADER_LEN: usize = 36;
/// Offset of the kind byte in a record header; a good record never has a
/// zero there, which is how recovery skips a zero tail quickly.
pub const RECORD_KIND_OFFSET: usize = 20;
/// Size of a hint entry header.
pub const HINT_ENTRY_HEADER_LEN: usize = 40;
/// Size of a hint file footer.
pub const HINT_FOOTER_LEN: usize = 28;

/// Record flag: the value is lz4-compressed (with its length prepended).
pub const FLAG_LZ4: u8 = 1;
/// Record flag: the record is a member of a write batch and takes effect
/// only if the batch's [`Kind::Commit`] record exists (see `batch.rs`).
pub const FLAG_BATCH: u8 = 2;
/// Record flag: a field record of a segmented value (`segmented.rs`) whose
/// value is a [`Patch`]: the bytes that differ from an earlier full record
/// of the same key and field in the same file, not the segment itself.
pub const FLAG_PATCH: u8 = 4;
/// Every flag bit a record may carry.
pub const KNOWN_FLAGS: u8 = FLAG_LZ4 | FLAG_BATCH | FLAG_PATCH;
/// Length of a commit record's key: first and last member sequence number
/// (u64 LE each) and the number of members (u32 LE); 8 more bytes (a u64
/// LE token) in a conditional commit, see [`CommitKey::token`].
pub const COMMIT_KEY_LEN: usize = 20;

/// An LZ4 block expands at most about 255 times (a match of length L costs
/// L/255 bytes); a size prefix claiming more than this is refused.
const MAX_LZ4_RATIO: usize = 256;

/// Who wrote a data file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The shard's writer; only the newest such file may have a torn tail.
    Log = 1,
    /// Compaction; complete and synced before it was renamed into place.
    Compaction = 2,
}

/// The header at offset 0 of data and hint files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// Who wrote the file.
    pub origin: Origin,
    /// The database's next sequence number when the file was created; keeps
    /// sequence numbers growing even after compaction drops every record that
    /// carried the highest ones.
    pub base_seq: u64,
}

impl FileHeader {
    /// Encodes with the given magic.
    pub fn encode(&self, magic: &[u8; 8]) -> [u8; FILE_HEADER_LEN] {
        let mut b = [0u8; FILE_HEADER_LEN];
        b[0..8].copy_from_slice(magic);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12] = self.origin as u8;
        b[16..24].copy_from_slice(&self.base_seq.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks a header; `Err` names what is wrong.
    pub fn decode(b: &[u8], magic: &[u8; 8]) -> std::result::Result<FileHeader, String> {
        if b.len() < FILE_HEADER_LEN {
            return Err(format!(
                "file shorter than its {FILE_HEADER_LEN}-byte header"
            ));
        }
        if &b[0..8] != magic {
            return Err("bad magic".into());
        }
        let crc = u32::from_le_bytes(b[28..32].try_into().unwrap());
        if crc != crc32c::crc32c(&b[0..28]) {
            return Err("header checksum mismatch".into());
        }
        let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
        if !(OLDEST_READABLE_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(format!(
                "format version {version}, this build reads versions {OLDEST_READABLE_VERSION} to {FORMAT_VERSION}"
            ));
        }
        let origin = match b[12] {
            1 => Origin::Log,
            2 => Origin::Compaction,
            o => return Err(format!("unknown file origin {o}")),
        };
        Ok(FileHeader {
            origin,
            base_seq: u64::from_le_bytes(b[16..24].try_into().unwrap()),
        })
    }
}

/// What a record does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Sets a key to a value (replacing a map, if the key held one).
    Put = 1,
    /// Removes a key and, if it held a map, every field of it.
    Delete = 2,
    /// Sets one field of the key's map, creating the map if needed.
    Field = 3,
    /// Removes one field of the key's map.
    DeleteField = 4,
    /// Sets the expiry of the key's map.
    MapMeta = 5,
    /// Commits a write batch: its key holds the batch's first and last
    /// member sequence numbers and its member count ([`CommitKey`]).
    Commit = 6,
}

/// What a [`Kind::Commit`] record's key says: the batch members (records
/// flagged [`FLAG_BATCH`]) of this database with a sequence number in
/// `first..=last` are committed; there are `count` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CommitKey {
    /// Sequence number of the batch's first member.
    pub first: u64,
    /// Sequence number of the batch's last member.
    pub last: u64,
    /// Number of members.
    pub count: u32,
    /// A conditional commit (a batch that wrote to several databases):
    /// it commits only if this token is in the batch group's commit log
    /// ([`crate::CommitLog`]), the one place every database's part is
    /// decided together. `None`: it commits by itself.
    pub token: Option<u64>,
}

impl CommitKey {
    /// The key bytes of the commit record.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(COMMIT_KEY_LEN + 8);
        b.extend_from_slice(&self.first.to_le_bytes());
        b.extend_from_slice(&self.last.to_le_bytes());
        b.extend_from_slice(&self.count.to_le_bytes());
        if let Some(t) = self.token {
            b.extend_from_slice(&t.to_le_bytes());
        }
        b
    }

    /// Reads a commit record's key; `None` if it is not one.
    pub fn decode(b: &[u8]) -> Option<CommitKey> {
        if b.len() != COMMIT_KEY_LEN && b.len() != COMMIT_KEY_LEN + 8 {
            return None;
        }
        let k = CommitKey {
            first: u64::from_le_bytes(b[0..8].try_into().unwrap()),
            last: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            count: u32::from_le_bytes(b[16..20].try_into().unwrap()),
            token: (b.len() > COMMIT_KEY_LEN)
                .then(|| u64::from_le_bytes(b[20..28].try_into().unwrap())),
        };
        (k.first <= k.last && k.count > 0).then_some(k)
    }
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Put,
            2 => Kind::Delete,
            3 => Kind::Field,
            4 => Kind::DeleteField,
            5 => Kind::MapMeta,
            6 => Kind::Commit,
            _ => return None,
        })
    }
    /// Tombstones are kept only while an older record they shadow may exist.
    /// (A commit record is not one: it is accounted as live, see `batch.rs`.)
    pub fn is_tombstone(self) -> bool {
        matches!(self, Kind::Delete | Kind::DeleteField)
    }
}

/// A decoded record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Sequence number: the version this write gave its key.
    pub seq: u64,
    /// Expiry in ms since the epoch, 0 = none.
    pub expiry: u64,
    /// What the record does.
    pub kind: Kind,
    /// `FLAG_*` bits.
    pub flags: u8,
    /// Caller-defined tag of the map (Field and MapMeta records).
    pub tag: u8,
    /// Key length.
    pub key_len: u32,
    /// Field length (0 unless Field or DeleteField).
    pub field_len: u32,
    /// Stored value length (compressed length if `FLAG_LZ4`).
    pub value_len: u32,
}

impl RecordHeader {
    /// Total record length on disk.
    pub fn record_len(&self) -> u64 {
        RECORD_HEADER_LEN as u64
            + self.key_len as u64
            + self.field_len as u64
            + self.value_len as u64
    }

    /// Parses the fixed header (without checking the CRC, which covers the
    /// body too). Returns the stored CRC with it.
    pub fn parse(b: &[u8]) -> std::result::Result<(u32, RecordHeader), &'static str> {
        if b.len() < RECORD_HEADER_LEN {
            return Err("truncated record header");
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let kind = Kind::from_u8(b[20]).ok_or("unknown record kind")?;
        if b[23] != 0 || b[21] & !KNOWN_FLAGS != 0 {
            return Err("reserved header bits set");
        }
        Ok((
            u32_at(0),
            RecordHeader {
                seq: u64_at(4),
                expiry: u64_at(12),
                kind,
                flags: b[21],
                tag: b[22],
                key_len: u32_at(24),
                field_len: u32_at(28),
                value_len: u32_at(32),
            },
        ))
    }
}

/// Inputs shorter than this take the inline loop of [`crc32c_append`];
/// longer ones the `crc32c` crate, whose three-way interleaving wins once
/// there is enough data to split.
const SHORT_CRC: usize = 256;

/// The CRC32C of `data`, as [`crc32c::crc32c`].
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// [`crc32c::crc32c_append`]: the CRC32C of the bytes hashed into `crc`
/// followed by `data`. Short inputs (keys, small records: the common case,
/// several per command) run an inline SSE4.2 loop; the crate's function
/// spends more on its setup than on a key of a dozen bytes (measured: its
/// `crc32c` was 7.6 % of the server's CPU in an RPOP profile, about four
/// short calls per pop).
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() < SHORT_CRC && std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2, checked just above.
        return unsafe { crc32c_finish_sse42(u64::from(!crc), data) };
    }
    crc32c::crc32c_append(crc, data)
}

/// The CRC32C of three buffers at once, as [`crc32c::crc32c`] of each. The
/// CRC instruction takes 3 cycles and can start one every cycle, so one
/// checksum runs at a third of its speed; three interleaved chains keep it
/// busy. Used where many records are checked in a row (a range read).
pub fn crc32c_3(a: &[u8], b: &[u8], c: &[u8]) -> [u32; 3] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2, checked just above.
        return unsafe { crc32c_3_sse42(a, b, c) };
    }
    [crc32c::crc32c(a), crc32c::crc32c(b), crc32c::crc32c(c)]
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn crc32c_3_sse42(a: &[u8], b: &[u8], c: &[u8]) -> [u32; 3] {
    use std::arch::x86_64::_mm_crc32_u64;
    let common = a.len().min(b.len()).min(c.len()) & !7;
    let word = |s: &[u8], i: usize| u64::from_le_bytes(s[i..i + 8].try_into().expect("8 bytes"));
    // The raw register state: initial value all ones, no final inversion.
    let (mut x, mut y, mut z) = (
        u64::from(u32::MAX),
        u64::from(u32::MAX),
        u64::from(u32::MAX),
    );
    let mut i = 0;
    while i < common {
        x = _mm_crc32_u64(x, word(a, i));
        y = _mm_crc32_u64(y, word(b, i));
        z = _mm_crc32_u64(z, word(c, i));
        i += 8;
    }
    [
        crc32c_finish_sse42(x, &a[common..]),
        crc32c_finish_sse42(y, &b[common..]),
        crc32c_finish_sse42(z, &c[common..]),
    ]
}

/// Runs the raw CRC state `crc` over `rest` (whole words, then bytes) and
/// returns the finished checksum.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
#[inline]
fn crc32c_finish_sse42(mut crc: u64, rest: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut words = rest.chunks_exact(8);
    for w in &mut words {
        crc = _mm_crc32_u64(crc, u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    let mut c = crc as u32;
    for &byte in words.remainder() {
        c = _mm_crc32_u8(c, byte);
    }
    !c
}

/// A record to append; the value is already compressed if `flags` says so.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    /// Sequence number.
    pub seq: u64,
    /// Expiry, 0 = none.
    pub expiry: u64,
    /// What it does.
    pub kind: Kind,
    /// `FLAG_*` bits.
    pub flags: u8,
    /// Map tag.
    pub tag: u8,
    /// Key bytes.
    pub key: &'a [u8],
    /// Field bytes.
    pub field: &'a [u8],
    /// Stored value bytes.
    pub value: &'a [u8],
}

impl RecordRef<'_> {
    /// Appends the encoded record to `out` and returns its length.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> usize {
        let start = out.len();
        out.extend_from_slice(&[0u8; 4]);
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.expiry.to_le_bytes());
        out.extend_from_slice(&[self.kind as u8, self.flags, self.tag, 0]);
        out.extend_from_slice(&(self.key.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.field.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.value.len() as u32).to_le_bytes());
        out.extend_from_slice(self.key);
        out.extend_from_slice(self.field);
        out.extend_from_slice(self.value);
        let crc = crc32c(&out[start + 4..]);
        out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
        out.len() - start
    }
}

/// A whole record read back from disk (or seen through a memory map), CRC
/// checked. Borrows its bytes, so a read through a map copies only the value.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The header.
    pub header: RecordHeader,
    /// Header + body bytes.
    pub bytes: &'a [u8],
}

impl<'a> Record<'a> {
    /// Checks and wraps the bytes of exactly one record.
    pub fn from_bytes(bytes: &'a [u8]) -> std::result::Result<Record<'a>, &'static str> {
        Self::from_bytes_with_crc(bytes, crc32c(Self::checked_part(bytes)))
    }

    /// The part of a record's bytes its CRC covers: all after the CRC field
    /// (empty if the bytes are shorter).
    pub fn checked_part(bytes: &[u8]) -> &[u8] {
        bytes.get(4..).unwrap_or_default()
    }

    /// [`Record::from_bytes`] for a caller that has already computed the
    /// CRC32C of [`Record::checked_part`], e.g. with [`crc32c_3`].
    pub fn from_bytes_with_crc(
        bytes: &'a [u8],
        body_crc: u32,
    ) -> std::result::Result<Record<'a>, &'static str> {
        let (crc, header) = RecordHeader::parse(bytes)?;
        if header.record_len() != bytes.len() as u64 {
            return Err("record length does not match its header");
        }
        if crc != body_crc {
            return Err("record checksum mismatch");
        }
        Ok(Record { header, bytes })
    }
    /// The key.
    pub fn key(&self) -> &'a [u8] {
        &self.bytes[RECORD_HEADER_LEN..RECORD_HEADER_LEN + self.header.key_len as usize]
    }
    /// The field (empty unless a field record).
    pub fn field(&self) -> &'a [u8] {
        let s = RECORD_HEADER_LEN + self.header.key_len as usize;
        &self.bytes[s..s + self.header.field_len as usize]
    }
    /// The stored (maybe compressed) value.
    pub fn stored_value(&self) -> &'a [u8] {
        let s = RECORD_HEADER_LEN + self.header.key_len as usize + self.header.field_len as usize;
        &self.bytes[s..]
    }
    /// The value, decompressed, in a new buffer of exactly its size.
    pub fn value(&self) -> std::result::Result<Vec<u8>, &'static str> {
        self.value_ref().map(|v| v.into_owned())
    }
    /// The value, borrowed from the record's bytes unless it has to be
    /// decompressed.
    pub fn value_ref(&self) -> std::result::Result<std::borrow::Cow<'a, [u8]>, &'static str> {
        let stored = self.stored_value();
        if self.header.flags & FLAG_LZ4 != 0 {
            // The size prefix decides the allocation before a byte is
            // decompressed; LZ4 cannot expand past ~255:1, so a bigger claim
            // is damage (or a hostile file), refused before it allocates.
            let claimed = stored
                .get(..4)
                .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
            if claimed > MAX_LZ4_RATIO * stored.len() + 64 {
                return Err("lz4 value claims more bytes than its compressed form can hold");
            }
            lz4_flex::block::decompress_size_prepended(stored)
                .map(std::borrow::Cow::Owned)
                .map_err(|_| "lz4 value does not decompress")
        } else {
            Ok(std::borrow::Cow::Borrowed(stored))
        }
    }
}

/// The value of a patch record ([`FLAG_PATCH`]): the location of its base,
/// a full record of the same key and field earlier in the same data file,
/// and runs of bytes that replace the base's bytes at their offsets.
///
/// Layout: base offset (u32 LE), base record length (u32 LE), then runs of
/// offset (u16 LE), length (u16 LE) and that many bytes, in increasing
/// offset order, none overlapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patch<'a> {
    /// Offset of the base record in the patch's own file.
    pub base_offset: u32,
    /// Length of the base record.
    pub base_len: u32,
    /// The encoded runs.
    pub runs: &'a [u8],
}

/// Whether `rec` may be the base of a patch of segment `field` of `key`
/// (`docs/file-format.md`, "Patch records", rule 1 as every reader checks
/// it): a Field record of that key and field, neither a patch nor
/// compressed.
pub fn is_patch_base(rec: &Record<'_>, key: &[u8], field: &[u8]) -> bool {
    rec.header.kind == Kind::Field
        && rec.header.flags & (FLAG_PATCH | FLAG_LZ4) == 0
        && rec.key() == key
        && rec.field() == field
}

/// Bytes of a patch value before its runs.
pub const PATCH_HEADER_LEN: usize = 8;
/// Bytes of a run before its data.
pub const PATCH_RUN_HEADER_LEN: usize = 4;

impl<'a> Patch<'a> {
    /// Reads a patch value; `Err` names what is malformed. The runs are
    /// checked when applied.
    pub fn decode(v: &'a [u8]) -> std::result::Result<Patch<'a>, &'static str> {
        if v.len() < PATCH_HEADER_LEN {
            return Err("patch shorter than its header");
        }
        Ok(Patch {
            base_offset: u32::from_le_bytes(v[0..4].try_into().unwrap()),
            base_len: u32::from_le_bytes(v[4..8].try_into().unwrap()),
            runs: &v[PATCH_HEADER_LEN..],
        })
    }

    /// Appends the runs where `new` differs from `base` (same length) to
    /// `out`, after the header for `base_offset` and `base_len`: the bytes
    /// that differ are found ([`Patch::mark`] over the whole value), then
    /// encoded ([`Patch::encode_masked`]).
    pub fn encode_diff(
        base_offset: u32,
        base_len: u32,
        base: &[u8],
        new: &[u8],
        out: &mut Vec<u8>,
    ) {
        debug_assert_eq!(base.len(), new.len());
        let mut mask = vec![0u64; Patch::mask_words(new.len())];
        Patch::mark(base, new, 0, new.len(), &mut mask);
        Patch::encode_masked(base_offset, base_len, new, &mask, out);
    }

    /// Words of a byte mask ([`Patch::mark`]) for a value of `len` bytes.
    pub const fn mask_words(len: usize) -> usize {
        len.div_ceil(64)
    }

    /// Sets bit `b` of `mask` (bit `b % 64` of word `b / 64`) for each
    /// byte `b` of `from .. from + len` where `new` differs from `base`
    /// (same length), and clears it where they are equal: the rest of the
    /// mask is left as it is, so a caller that changes a few bytes of a
    /// value keeps its mask of differences current by marking just those.
    /// Equal stretches are compared eight bytes at a time.
    pub fn mark(base: &[u8], new: &[u8], from: usize, len: usize, mask: &mut [u64]) {
        debug_assert_eq!(base.len(), new.len());
        let word = |s: &[u8], i: usize| u64::from_ne_bytes(s[i..i + 8].try_into().unwrap());
        let (mut i, end) = (from, from + len);
        while i < end {
            let (w, bit) = (i / 64, i % 64);
            if i % 8 == 0 && i + 8 <= end && word(base, i) == word(new, i) {
                mask[w] &= !(0xff << bit);
                i += 8;
                continue;
            }
            if base[i] != new[i] {
                mask[w] |= 1 << bit;
            } else {
                mask[w] &= !(1 << bit);
            }
            i += 1;
        }
    }

    /// Appends to `out` the header for `base_offset` and `base_len`, then
    /// the runs of `new` over the bytes `mask` marks ([`Patch::mark`]):
    /// marked bytes closer than a run header are joined into one run (a
    /// few equal bytes cost less than a second header). Reads only the
    /// marked bytes of `new` (and those between them in a joined run), so
    /// its cost is the runs', not the value's.
    pub fn encode_masked(
        base_offset: u32,
        base_len: u32,
        new: &[u8],
        mask: &[u64],
        out: &mut Vec<u8>,
    ) {
        // Every marked byte its own run is the most the runs can take (a
        // joined run spends fewer than a header's bytes on each gap).
        let marked: usize = mask.iter().map(|w| w.count_ones() as usize).sum();
        let at = out.len();
        out.resize(
            at + PATCH_HEADER_LEN + marked * (PATCH_RUN_HEADER_LEN + 1),
            0,
        );
        let n = Patch::encode_masked_into(base_offset, base_len, new, mask, &mut out[at..])
            .expect("room for every byte as a run");
        out.truncate(at + n);
    }

    /// [`Patch::encode_masked`] into `out`: the patch's length, or `None`
    /// (`out` then holds part of it) as soon as it would not fit in `out`.
    /// A writer that wants a patch only up to some size gives a buffer of
    /// that size (on its stack) and stops encoding the moment the patch
    /// outgrows it.
    pub fn encode_masked_into(
        base_offset: u32,
        base_len: u32,
        new: &[u8],
        mask: &[u64],
        out: &mut [u8],
    ) -> Option<usize> {
        debug_assert!(new.len() <= u16::MAX as usize);
        debug_assert!(mask.len() >= Patch::mask_words(new.len()));
        let header = out.get_mut(..PATCH_HEADER_LEN)?;
        header[..4].copy_from_slice(&base_offset.to_le_bytes());
        header[4..].copy_from_slice(&base_len.to_le_bytes());
        let mut n = PATCH_HEADER_LEN;
        let mut emit = |start: usize, end: usize| -> Option<()> {
            let len = end - start;
            let run = out.get_mut(n..n + PATCH_RUN_HEADER_LEN + len)?;
            run[..2].copy_from_slice(&(start as u16).to_le_bytes());
            run[2..4].copy_from_slice(&(len as u16).to_le_bytes());
            // Most runs are a byte or a few: copied without a call.
            for (d, s) in run[PATCH_RUN_HEADER_LEN..].iter_mut().zip(&new[start..end]) {
                *d = *s;
            }
            n += PATCH_RUN_HEADER_LEN + len;
            Some(())
        };
        let mut run: Option<(usize, usize)> = None;
        for (w, &bits) in mask.iter().enumerate() {
            let mut x = bits;
            while x != 0 {
                let b = w * 64 + x.trailing_zeros() as usize;
                x &= x - 1;
                run = match run {
                    Some((start, end)) if b < end + PATCH_RUN_HEADER_LEN => Some((start, b + 1)),
                    Some((start, end)) => {
                        emit(start, end)?;
                        Some((b, b + 1))
                    }
                    None => Some((b, b + 1)),
                };
            }
        }
        if let Some((start, end)) = run {
            emit(start, end)?;
        }
        Some(n)
    }

    /// Writes the runs over `base` (the base record's value): the patched
    /// bytes. `Err` if a run is cut short or reaches past the base.
    pub fn apply(&self, base: &mut [u8]) -> std::result::Result<(), &'static str> {
        let n = base.len();
        self.apply_window(base, 0, n)
    }

    /// [`Patch::apply`] to the bytes `from .. from + window.len()` of a base
    /// value of `value_len` bytes: writes the parts of the runs that fall in
    /// the window. `Err` as for `apply` (every run is checked, in the window
    /// or not).
    pub fn apply_window(
        &self,
        window: &mut [u8],
        from: usize,
        value_len: usize,
    ) -> std::result::Result<(), &'static str> {
        let to = from + window.len();
        let mut r = self.runs;
        while !r.is_empty() {
            if r.len() < PATCH_RUN_HEADER_LEN {
                return Err("patch run header cut short");
            }
            let at = u16::from_le_bytes([r[0], r[1]]) as usize;
            let n = u16::from_le_bytes([r[2], r[3]]) as usize;
            let data = r
                .get(PATCH_RUN_HEADER_LEN..PATCH_RUN_HEADER_LEN + n)
                .ok_or("patch run cut short")?;
            if at + n > value_len {
                return Err("patch run past the end of its base");
            }
            let (lo, hi) = (at.max(from), (at + n).min(to));
            if lo < hi {
                window[lo - from..hi - from].copy_from_slice(&data[lo - at..hi - at]);
            }
            r = &r[PATCH_RUN_HEADER_LEN + n..];
        }
        Ok(())
    }
}

/// One hint entry: where a record is and what it did, without its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HintEntry {
    /// The record's header fields that matter for the index.
    pub seq: u64,
    /// Expiry, 0 = none.
    pub expiry: u64,
    /// Record kind.
    pub kind: Kind,
    /// Record flags.
    pub flags: u8,
    /// Map tag.
    pub tag: u8,
    /// Offset of the record in its data file.
    pub offset: u32,
    /// Length of the record.
    pub record_len: u32,
    /// Key bytes.
    pub key: Vec<u8>,
    /// Field bytes.
    pub field: Vec<u8>,
}

impl HintEntry {
    /// The entry describing the record with header `h` at offset `off`;
    /// `rec` is the record's bytes, from its first byte on.
    pub fn of_record(off: u64, h: &RecordHeader, rec: &[u8]) -> HintEntry {
        let k1 = RECORD_HEADER_LEN + h.key_len as usize;
        HintEntry {
            seq: h.seq,
            expiry: h.expiry,
            kind: h.kind,
            flags: h.flags,
            tag: h.tag,
            offset: off as u32,
            record_len: h.record_len() as u32,
            key: rec[RECORD_HEADER_LEN..k1].to_vec(),
            field: rec[k1..k1 + h.field_len as usize].to_vec(),
        }
    }

    /// Appends the encoded entry to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0u8; 4]);
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.expiry.to_le_bytes());
        out.extend_from_slice(&[self.kind as u8, self.flags, self.tag, 0]);
        out.extend_from_slice(&(self.key.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.field.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.record_len.to_le_bytes());
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&self.field);
        let crc = crc32c::crc32c(&out[start + 4..]);
        out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Encodes a hint file's footer.
pub fn encode_hint_footer(entries: u64, data_len: u64) -> [u8; HINT_FOOTER_LEN] {
    let mut b = [0u8; HINT_FOOTER_LEN];
    b[0..8].copy_from_slice(&HINT_FOOTER_MAGIC);
    b[8..16].copy_from_slice(&entries.to_le_bytes());
    b[16..24].copy_from_slice(&data_len.to_le_bytes());
    let crc = crc32c::crc32c(&b[0..24]);
    b[24..28].copy_from_slice(&crc.to_le_bytes());
    b
}

/// One hint entry borrowed from a hint file's bytes.
#[derive(Debug, Clone, Copy)]
pub struct HintRef<'a> {
    /// Sequence number.
    pub seq: u64,
    /// Expiry, 0 = none.
    pub expiry: u64,
    /// Record kind.
    pub kind: Kind,
    /// Record flags.
    pub flags: u8,
    /// Map tag.
    pub tag: u8,
    /// Offset of the record in its data file.
    pub offset: u32,
    /// Length of the record.
    pub record_len: u32,
    /// Key bytes.
    pub key: &'a [u8],
    /// Field bytes.
    pub field: &'a [u8],
}

/// Checks a whole hint file (header, footer, every entry's CRC, the entry
/// count) and only then calls `f` for each entry, so a damaged hint applies
/// nothing, and a hint describing another length of data than `data_len`
/// (the data file's actual length) is refused the same way. Any damage is an
/// `Err` describing it (the caller then scans the data file instead).
/// The entry count a hint file's footer announces, read from its last
/// bytes alone (unchecked beyond the footer's own CRC: a sizing hint only).
pub fn hint_footer_count(footer: &[u8]) -> Option<u64> {
    if footer.len() != HINT_FOOTER_LEN
        || footer[0..8] != HINT_FOOTER_MAGIC
        || u32::from_le_bytes(footer[24..28].try_into().unwrap()) != crc32c::crc32c(&footer[0..24])
    {
        return None;
    }
    Some(u64::from_le_bytes(footer[8..16].try_into().unwrap()))
}

pub fn read_hint_file<'b>(
    b: &'b [u8],
    data_len: u64,
    mut f: impl FnMut(HintRef<'b>),
) -> std::result::Result<(), String> {
    FileHeader::decode(b, &HINT_MAGIC)?;
    if b.len() < FILE_HEADER_LEN + HINT_FOOTER_LEN {
        return Err("hint file has no footer".into());
    }
    let foot = &b[b.len() - HINT_FOOTER_LEN..];
    if foot[0..8] != HINT_FOOTER_MAGIC
        || u32::from_le_bytes(foot[24..28].try_into().unwrap()) != crc32c::crc32c(&foot[0..24])
    {
        return Err("hint footer missing or damaged".into());
    }
    let count = u64::from_le_bytes(foot[8..16].try_into().unwrap());
    let described = u64::from_le_bytes(foot[16..24].try_into().unwrap());
    if described != data_len {
        return Err(format!(
            "hint describes {described} bytes of data, the data file has {data_len}"
        ));
    }
    let body = &b[FILE_HEADER_LEN..b.len() - HINT_FOOTER_LEN];
    // Two walks: the first checks every entry (so nothing is applied from a
    // damaged file), the second hands them out without checking again.
    let walk =
        |check: bool, visit: &mut dyn FnMut(HintRef<'b>)| -> std::result::Result<u64, String> {
            let mut pos = 0usize;
            let mut n = 0u64;
            while pos < body.len() {
                let at = FILE_HEADER_LEN + pos;
                let rest = &body[pos..];
                if rest.len() < HINT_ENTRY_HEADER_LEN {
                    return Err(format!("truncated hint entry at {at}"));
                }
                let u32_at = |i: usize| u32::from_le_bytes(rest[i..i + 4].try_into().unwrap());
                let u64_at = |i: usize| u64::from_le_bytes(rest[i..i + 8].try_into().unwrap());
                let key_len = u32_at(24) as usize;
                let field_len = u32_at(28) as usize;
                let len = HINT_ENTRY_HEADER_LEN
                    .checked_add(key_len)
                    .and_then(|l| l.checked_add(field_len))
                    .filter(|&l| l <= rest.len())
                    .ok_or_else(|| format!("hint entry at {at} overruns the file"))?;
                if check && u32_at(0) != crc32c::crc32c(&rest[4..len]) {
                    return Err(format!("hint entry checksum mismatch at {at}"));
                }
                let kind = Kind::from_u8(rest[20])
                    .ok_or_else(|| format!("unknown kind in hint entry at {at}"))?;
                let k0 = HINT_ENTRY_HEADER_LEN;
                visit(HintRef {
                    seq: u64_at(4),
                    expiry: u64_at(12),
                    kind,
                    flags: rest[21],
                    tag: rest[22],
                    offset: u32_at(32),
                    record_len: u32_at(36),
                    key: &rest[k0..k0 + key_len],
                    field: &rest[k0 + key_len..len],
                });
                pos += len;
                n += 1;
            }
            Ok(n)
        };
    let n = walk(true, &mut |_| {})?;
    if n != count {
        return Err(format!(
            "hint footer promises {count} entries, file holds {n}"
        ));
    }
    walk(false, &mut f)?;
    Ok(())
}

/// Magic at the start of a compaction's victims marker.
pub const VICTIMS_MAGIC: [u8; 8] = *b"BSLTVICT";

/// Encodes a victims marker: magic, count (u32), the file ids (u32 each),
/// CRC32C of everything before it.
pub fn encode_victims(ids: &[u32]) -> Vec<u8> {
    let mut b = Vec::with_capacity(16 + 4 * ids.len());
    b.extend_from_slice(&VICTIMS_MAGIC);
    b.extend_from_slice(&(ids.len() as u32).to_le_bytes());
    for id in ids {
        b.extend_from_slice(&id.to_le_bytes());
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes a victims marker.
pub fn decode_victims(b: &[u8]) -> std::result::Result<Vec<u32>, String> {
    if b.len() < 16 || b[0..8] != VICTIMS_MAGIC {
        return Err("not a victims marker".into());
    }
    let n = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
    if b.len() != 16 + 4 * n {
        return Err("victims marker has the wrong length".into());
    }
    let body = &b[..b.len() - 4];
    if u32::from_le_bytes(b[b.len() - 4..].try_into().unwrap()) != crc32c::crc32c(body) {
        return Err("victims marker checksum mismatch".into());
    }
    Ok(body[12..]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect())
}

/// Checks that key, field and value fit the format's 32-bit lengths and the
/// engine's limits.
pub fn check_sizes(key: &[u8], field: &[u8], value_len: usize) -> Result<()> {
    const KEY_LIMIT: usize = 512 << 20;
    const VALUE_LIMIT: usize = (u32::MAX as usize) - (1 << 20);
    if key.len() > KEY_LIMIT {
        return Err(Error::TooLarge {
            what: "key",
            len: key.len(),
            limit: KEY_LIMIT,
        });
    }
    if field.len() > KEY_LIMIT {
        return Err(Error::TooLarge {
            what: "field",
            len: field.len(),
            limit: KEY_LIMIT,
        });
    }
    if value_len + key.len() + field.len() > VALUE_LIMIT {
        return Err(Error::TooLarge {
            what: "value",
            len: value_len,
            limit: VALUE_LIMIT - key.len() - field.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod crc_tests {
    use super::*;

    #[test]
    fn the_short_input_path_gives_the_crates_checksums() {
        let data: Vec<u8> = (0..600u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect();
        for len in 0..SHORT_CRC + 40 {
            for start in [0, 1, 3, 8] {
                let d = &data[start..start + len];
                assert_eq!(crc32c(d), crc32c::crc32c(d), "length {len} at {start}");
                for seed in [0, 1, 15, 0xdead_beef] {
                    assert_eq!(
                        crc32c_append(seed, d),
                        crc32c::crc32c_append(seed, d),
                        "length {len} at {start}, seed {seed}"
                    );
                }
            }
        }
    }

    #[test]
    fn crc32c_3_matches_one_checksum_at_a_time_for_any_mix_of_lengths() {
        let data: Vec<u8> = (0..400u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for la in 0..70 {
            for lb in [0, 1, 7, 8, 9, 63, 64, 130, 257] {
                for lc in [0, 5, 16, 130, 300] {
                    let (a, b, c) = (&data[..la], &data[3..3 + lb], &data[11..11 + lc]);
                    assert_eq!(
                        crc32c_3(a, b, c),
                        [crc32c::crc32c(a), crc32c::crc32c(b), crc32c::crc32c(c)],
                        "lengths {la} {lb} {lc}"
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod patch_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A patch of the differences, applied to the base, gives the new
        /// bytes; runs are sorted, in bounds, and never longer than needed
        /// by more than the joins they save.
        #[test]
        fn a_diff_applied_to_its_base_gives_the_new_bytes(
            base in proptest::collection::vec(any::<u8>(), 1..600),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..40),
            edits_window in (any::<usize>(), any::<usize>()),
        ) {
            let mut new = base.clone();
            for &(at, b) in &edits {
                let i = at % new.len();
                new[i] = b;
            }
            let mut v = Vec::new();
            Patch::encode_diff(7, 600, &base, &new, &mut v);
            // A mask kept current by marking only the edited bytes (from
            // any earlier mask of the same base) encodes the same runs.
            let mut mask = vec![0u64; Patch::mask_words(new.len())];
            let mut mid = base.clone();
            for (k, &(at, b)) in edits.iter().enumerate().take(edits.len() / 2) {
                let i = at % mid.len();
                mid[i] = b ^ k as u8;
                Patch::mark(&base, &mid, i, 1, &mut mask);
            }
            for i in 0..new.len() {
                if mid[i] != new[i] {
                    mid[i] = new[i];
                    Patch::mark(&base, &mid, i, 1, &mut mask);
                }
            }
            // Marks of bytes that are equal again are cleared too.
            for (k, &(at, _)) in edits.iter().enumerate() {
                let i = at % new.len();
                let n = (k % 9).min(new.len() - i);
                Patch::mark(&base, &new, i, n, &mut mask);
            }
            let mut masked = Vec::new();
            Patch::encode_masked(7, 600, &new, &mask, &mut masked);
            prop_assert_eq!(&masked, &v);
            // Into a buffer: the same bytes when they fit, `None` when
            // they take even one byte more than it holds.
            let mut buf = vec![0u8; v.len()];
            prop_assert_eq!(Patch::encode_masked_into(7, 600, &new, &mask, &mut buf), Some(v.len()));
            prop_assert_eq!(&buf, &v);
            let mut short = vec![0u8; v.len() - 1];
            prop_assert_eq!(Patch::encode_masked_into(7, 600, &new, &mask, &mut short), None);
            let p = Patch::decode(&v).unwrap();
            prop_assert_eq!((p.base_offset, p.base_len), (7, 600));
            let changed = base.iter().zip(&new).filter(|(a, b)| a != b).count();
            prop_assert!(p.runs.len() <= changed * (PATCH_RUN_HEADER_LEN + 1));
            let mut got = base.clone();
            p.apply(&mut got).unwrap();
            prop_assert_eq!(&got, &new);
            // Any window of the base, patched alone, is that window of the
            // patched bytes.
            let from = edits_window.0 % base.len();
            let to = (from + edits_window.1 % 64).min(base.len());
            let mut window = base[from..to].to_vec();
            p.apply_window(&mut window, from, base.len()).unwrap();
            prop_assert_eq!(&window[..], &new[from..to]);
        }
    }

    #[test]
    fn a_run_past_its_base_or_cut_short_is_refused() {
        let mut b = vec![0u8; 8];
        let run = |at: u16, n: u16, data: &[u8]| {
            let mut v = vec![0u8; PATCH_HEADER_LEN];
            v.extend_from_slice(&at.to_le_bytes());
            v.extend_from_slice(&n.to_le_bytes());
            v.extend_from_slice(data);
            v
        };
        let past = run(6, 3, b"abc");
        assert!(Patch::decode(&past).unwrap().apply(&mut b).is_err());
        let short = run(0, 3, b"ab");
        assert!(Patch::decode(&short).unwrap().apply(&mut b).is_err());
        assert!(Patch::decode(&[0u8; 5]).is_err());
        let ok = run(5, 3, b"abc");
        Patch::decode(&ok).unwrap().apply(&mut b).unwrap();
        assert_eq!(&b[5..], b"abc");
    }
}
