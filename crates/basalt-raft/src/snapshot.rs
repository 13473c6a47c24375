//! Snapshots as files: what a node keeps, sends and receives.
//!
//! A snapshot is a directory of files the [`Applier`](crate::Applier)
//! produced with [`Applier::checkpoint`](crate::Applier::checkpoint) (for
//! the server: hard links of the engine's data files, so building one
//! copies no data), each with the length that belongs to it. To send one,
//! the files are presented to openraft as one byte stream, an *archive*,
//! read on the fly from the files themselves; a receiving node writes the
//! chunks openraft delivers into a file and then unpacks it into a
//! directory of the same shape.
//!
//! Archive layout (little-endian):
//!
//! | size | field |
//! |---|---|
//! | 8 | magic `BSLTSNAP` |
//! | 4 | version (1) |
//! | 4 | manifest length M |
//! | M | manifest: bincode `Vec<(String, u64)>`, each file's relative path (`/`-separated) and length |
//! | 4 | CRC32C of the manifest |
//!
//! then, for every file of the manifest in its order, its bytes and the
//! CRC32C of those bytes (4 bytes).

use std::fs::File;
use std::future::Future;
use std::io::{self, BufReader, BufWriter, Read, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use basalt_engine::CheckpointFile;
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

const MAGIC: &[u8; 8] = b"BSLTSNAP";
const VERSION: u32 = 1;

/// Longest manifest accepted from a peer (a million files' names).
const MAX_MANIFEST: usize = 256 << 20;

/// openraft's snapshot data: an archive being read from a stored snapshot
/// (sending), or a file being written by received chunks.
#[derive(Debug)]
pub enum SnapshotData {
    /// A stored snapshot, read as an archive.
    Out(ArchiveReader),
    /// A snapshot being received into the file at the path.
    In(tokio::fs::File, PathBuf),
}

impl SnapshotData {
    /// A file at `path` (created, truncated) to receive a snapshot into.
    pub(crate) async fn receive_into(path: PathBuf) -> io::Result<SnapshotData> {
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .await?;
        Ok(SnapshotData::In(file, path))
    }
}

/// The files of a stored snapshot presented as one archive; reads are
/// positioned reads of the files (from the page cache, mostly: they were
/// just written or are the engine's hot files). Read through
/// [`SnapshotData`]'s `AsyncRead`, every read of the files runs on the
/// runtime's blocking pool, never on the task that polls: openraft sends
/// snapshots from a node's Raft thread, which also sends its heartbeats,
/// and a read of a cold file, or the CRC of a whole file when a chunk is
/// read again out of order, can take seconds.
#[derive(Debug)]
pub struct ArchiveReader {
    /// The files, while no read is in flight.
    archive: Option<Archive>,
    /// The read in flight on the blocking pool: the archive comes back
    /// with where it read and what.
    pending: Option<tokio::task::JoinHandle<ArchiveRead>>,
    /// Bytes read at `ready_at`, not yet handed out.
    ready: Vec<u8>,
    ready_at: u64,
    total: u64,
    /// Where the next byte handed out comes from.
    pos: u64,
}

/// A read of the archive done on the blocking pool: the archive, where it
/// read, and the bytes.
type ArchiveRead = (Archive, u64, io::Result<Vec<u8>>);

/// Bytes the blocking pool reads per trip (what openraft asks for, within
/// these bounds).
const READ_MIN: usize = 64 << 10;
const READ_MAX: usize = 4 << 20;

#[derive(Debug)]
struct Archive {
    header: Vec<u8>,
    /// Open handles (a file unlinked later stays readable), lengths, and
    /// each file's start in the archive.
    files: Vec<(File, u64, u64)>,
    /// CRC32C of each file's bytes once known.
    crcs: Vec<Option<u32>>,
    /// The CRC of file `.0` over its first `.1` bytes, while it is being
    /// read from the start in order.
    running: Option<(usize, u64, u32)>,
    total: u64,
}

impl ArchiveReader {
    /// An archive of the files `files` under `root`.
    pub fn open(root: &Path, files: &[CheckpointFile]) -> io::Result<ArchiveReader> {
        let manifest: Vec<(String, u64)> = files
            .iter()
            .map(|f| Ok((rel_string(&f.path)?, f.len)))
            .collect::<io::Result<_>>()?;
        let m = bincode::serialize(&manifest).map_err(io::Error::other)?;
        let mut header = Vec::with_capacity(20 + m.len());
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&VERSION.to_le_bytes());
        header.extend_from_slice(&(m.len() as u32).to_le_bytes());
        header.extend_from_slice(&m);
        header.extend_from_slice(&crc32c::crc32c(&m).to_le_bytes());
        let mut pos = header.len() as u64;
        let mut open = Vec::with_capacity(files.len());
        for f in files {
            let handle = File::open(root.join(&f.path))?;
            let have = handle.metadata()?.len();
            if have < f.len {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "snapshot file {} has {have} bytes, fewer than its {}",
                        f.path.display(),
                        f.len
                    ),
                ));
            }
            open.push((handle, f.len, pos));
            pos += f.len + 4;
        }
        Ok(ArchiveReader {
            archive: Some(Archive {
                header,
                crcs: vec![None; open.len()],
                files: open,
                running: None,
                total: pos,
            }),
            pending: None,
            ready: Vec::new(),
            ready_at: 0,
            total: pos,
            pos: 0,
        })
    }

    /// The archive's length in bytes.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether the archive is empty (never: it has a header).
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// `AsyncRead::poll_read`: bytes from `pos`, read on the blocking pool
    /// (inline only outside a runtime).
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            if self.ready_at == self.pos && !self.ready.is_empty() {
                let n = self.ready.len().min(buf.remaining());
                buf.put_slice(&self.ready[..n]);
                self.ready.drain(..n);
                self.pos += n as u64;
                self.ready_at = self.pos;
                return Poll::Ready(Ok(()));
            }
            if let Some(h) = self.pending.as_mut() {
                let done = std::task::ready!(Pin::new(h).poll(cx));
                self.pending = None;
                let (archive, at, read) = done.map_err(|e| {
                    io::Error::other(format!("reading the snapshot's files failed: {e}"))
                })?;
                self.archive = Some(archive);
                // Read before a seek moved `pos`: asked again below.
                if at == self.pos {
                    self.ready = read?;
                    self.ready_at = at;
                    if self.ready.is_empty() {
                        return Poll::Ready(Ok(()));
                    }
                }
                continue;
            }
            if self.pos >= self.total || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            let mut archive = self.archive.take().ok_or_else(|| {
                io::Error::other("an earlier failed read left the snapshot unreadable")
            })?;
            let (at, want) = (self.pos, buf.remaining().clamp(READ_MIN, READ_MAX));
            let read = move || {
                let mut v = vec![0u8; want];
                let r = archive.read_at(at, &mut v).map(|n| {
                    v.truncate(n);
                    v
                });
                (archive, at, r)
            };
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => self.pending = Some(rt.spawn_blocking(read)),
                Err(_) => {
                    let (archive, at, r) = read();
                    self.archive = Some(archive);
                    self.ready = r?;
                    self.ready_at = at;
                    if self.ready.is_empty() {
                        return Poll::Ready(Ok(()));
                    }
                }
            }
        }
    }
}

impl Archive {
    /// Fills `out` from the archive at `pos`; returns how many bytes (0 at
    /// the end).
    fn read_at(&mut self, pos: u64, out: &mut [u8]) -> io::Result<usize> {
        if pos >= self.total || out.is_empty() {
            return Ok(0);
        }
        let h = self.header.len() as u64;
        if pos < h {
            let n = out.len().min((h - pos) as usize);
            out[..n].copy_from_slice(&self.header[pos as usize..pos as usize + n]);
            return Ok(n);
        }
        // The file whose region (bytes, then CRC) holds `pos`.
        let i = self.files.partition_point(|&(_, _, start)| start <= pos) - 1;
        let (len, start) = (self.files[i].1, self.files[i].2);
        let at = pos - start;
        if at < len {
            let want = out.len().min((len - at) as usize);
            let n = self.files[i].0.read_at(&mut out[..want], at)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "a snapshot file shrank while being sent",
                ));
            }
            self.running = match self.running {
                _ if at == 0 => Some((i, n as u64, crc32c::crc32c(&out[..n]))),
                Some((j, done, crc)) if j == i && done == at => {
                    Some((i, done + n as u64, crc32c::crc32c_append(crc, &out[..n])))
                }
                _ => None,
            };
            if let Some((j, done, crc)) = self.running {
                if done == len {
                    self.crcs[j] = Some(crc);
                }
            }
            return Ok(n);
        }
        let crc = match self.crcs[i] {
            Some(c) => c,
            None => {
                let c = file_crc(&self.files[i].0, len)?;
                self.crcs[i] = Some(c);
                c
            }
        };
        let bytes = crc.to_le_bytes();
        let off = (at - len) as usize;
        let n = out.len().min(4 - off);
        out[..n].copy_from_slice(&bytes[off..off + n]);
        Ok(n)
    }
}

fn file_crc(f: &File, len: u64) -> io::Result<u32> {
    let mut crc = 0;
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < len {
        let want = buf.len().min((len - at) as usize);
        let n = f.read_at(&mut buf[..want], at)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        at += n as u64;
    }
    Ok(crc)
}

/// A relative path as the archive names it: `/`-separated normal parts.
fn rel_string(p: &Path) -> io::Result<String> {
    let mut parts = Vec::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => parts.push(s.to_str().ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "non-UTF-8 snapshot file name")
            })?),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("snapshot file path {} is not plain relative", p.display()),
                ))
            }
        }
    }
    Ok(parts.join("/"))
}

/// The path an archive names, checked: relative, no `..`, no empty part.
fn safe_rel(s: &str) -> io::Result<PathBuf> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("snapshot archive names an unsafe path {s:?}"),
        )
    };
    let mut out = PathBuf::new();
    for part in s.split('/') {
        if part.is_empty() || part == "." || part == ".." || part.contains('\0') {
            return Err(bad());
        }
        out.push(part);
    }
    if out.as_os_str().is_empty() {
        return Err(bad());
    }
    Ok(out)
}

/// Unpacks the archive in the file `archive` into `dest` (created; must
/// not exist): every file written whole, its CRC checked, fsynced, and
/// every directory fsynced. Returns the files.
pub fn unpack(archive: &Path, dest: &Path) -> io::Result<Vec<CheckpointFile>> {
    let corrupt = |why: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("snapshot archive {}: {why}", archive.display()),
        )
    };
    let mut r = BufReader::with_capacity(1 << 20, File::open(archive)?);
    let mut head = [0u8; 16];
    r.read_exact(&mut head)?;
    if &head[..8] != MAGIC {
        return Err(corrupt("not a Basalt snapshot".into()));
    }
    let version = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(corrupt(format!("unknown version {version}")));
    }
    let mlen = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes")) as usize;
    if mlen > MAX_MANIFEST {
        return Err(corrupt(format!("manifest of {mlen} bytes")));
    }
    let mut m = vec![0u8; mlen];
    r.read_exact(&mut m)?;
    let mut crc = [0u8; 4];
    r.read_exact(&mut crc)?;
    if u32::from_le_bytes(crc) != crc32c::crc32c(&m) {
        return Err(corrupt("manifest CRC mismatch".into()));
    }
    let manifest: Vec<(String, u64)> =
        bincode::deserialize(&m).map_err(|e| corrupt(format!("manifest: {e}")))?;
    std::fs::create_dir(dest)?;
    let mut dirs = vec![dest.to_path_buf()];
    let mut out = Vec::with_capacity(manifest.len());
    let mut buf = vec![0u8; 1 << 20];
    for (name, len) in manifest {
        let rel = safe_rel(&name)?;
        let path = dest.join(&rel);
        let parent = path.parent().expect("under dest").to_path_buf();
        if !dirs.contains(&parent) {
            std::fs::create_dir_all(&parent)?;
            dirs.push(parent);
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        let mut w = BufWriter::with_capacity(1 << 20, &file);
        let mut left = len;
        let mut crc = 0;
        while left > 0 {
            let want = buf.len().min(left as usize);
            r.read_exact(&mut buf[..want])?;
            crc = crc32c::crc32c_append(crc, &buf[..want]);
            w.write_all(&buf[..want])?;
            left -= want as u64;
        }
        w.flush()?;
        drop(w);
        let mut want = [0u8; 4];
        r.read_exact(&mut want)?;
        if u32::from_le_bytes(want) != crc {
            return Err(corrupt(format!("CRC mismatch in {name}")));
        }
        file.sync_all()?;
        out.push(CheckpointFile { path: rel, len });
    }
    if r.read(&mut [0u8; 1])? != 0 {
        return Err(corrupt("bytes after the last file".into()));
    }
    // Deepest first, so a directory's entry in its parent is synced after
    // its own entries.
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in dirs {
        File::open(&d)?.sync_all()?;
    }
    Ok(out)
}

impl AsyncRead for SnapshotData {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SnapshotData::Out(a) => a.poll_read(cx, buf),
            SnapshotData::In(f, _) => Pin::new(f).poll_read(cx, buf),
        }
    }
}

impl AsyncSeek for SnapshotData {
    fn start_seek(self: Pin<&mut Self>, to: SeekFrom) -> io::Result<()> {
        match self.get_mut() {
            SnapshotData::Out(a) => {
                let target = match to {
                    SeekFrom::Start(n) => Some(n),
                    SeekFrom::End(d) => a.total.checked_add_signed(d),
                    SeekFrom::Current(d) => a.pos.checked_add_signed(d),
                };
                a.pos = target.ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, "seek before the start")
                })?;
                Ok(())
            }
            SnapshotData::In(f, _) => Pin::new(f).start_seek(to),
        }
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        match self.get_mut() {
            SnapshotData::Out(a) => Poll::Ready(Ok(a.pos)),
            SnapshotData::In(f, _) => Pin::new(f).poll_complete(cx),
        }
    }
}

fn read_only() -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, "a stored snapshot is read-only")
}

impl AsyncWrite for SnapshotData {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            SnapshotData::Out(_) => Poll::Ready(Err(read_only())),
            SnapshotData::In(f, _) => Pin::new(f).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SnapshotData::Out(_) => Poll::Ready(Ok(())),
            SnapshotData::In(f, _) => Pin::new(f).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SnapshotData::Out(_) => Poll::Ready(Ok(())),
            SnapshotData::In(f, _) => Pin::new(f).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

    fn files(root: &Path, spec: &[(&str, &[u8], u64)]) -> Vec<CheckpointFile> {
        spec.iter()
            .map(|(name, bytes, len)| {
                let p = root.join(name);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, bytes).unwrap();
                CheckpointFile {
                    path: name.into(),
                    len: *len,
                }
            })
            .collect()
    }

    /// Sends `a` to a receiving file in chunks of `chunk` bytes, as
    /// openraft does (seek to the offset, read, write at the offset).
    async fn transfer(a: ArchiveReader, to: PathBuf, chunk: usize) -> PathBuf {
        let mut out = SnapshotData::Out(a);
        let mut into = SnapshotData::receive_into(to.clone()).await.unwrap();
        let end = out.seek(SeekFrom::End(0)).await.unwrap();
        let mut off = 0;
        while off < end {
            out.seek(SeekFrom::Start(off)).await.unwrap();
            let mut buf = Vec::with_capacity(chunk);
            while buf.len() < chunk {
                if out.read_buf(&mut buf).await.unwrap() == 0 {
                    break;
                }
            }
            into.seek(SeekFrom::Start(off)).await.unwrap();
            into.write_all(&buf).await.unwrap();
            off += buf.len() as u64;
        }
        into.flush().await.unwrap();
        to
    }

    #[tokio::test]
    async fn an_archive_sent_in_chunks_unpacks_into_the_same_files_cut_to_their_lengths() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let fs = files(
            &src,
            &[
                ("BASALT", b"meta", 4),
                ("db0/shard-0000/0000000001.data", &big, big.len() as u64),
                // Still growing: only its first 5 bytes belong.
                ("db0/shard-0000/0000000002.data", b"01234567", 5),
                ("empty", b"", 0),
            ],
        );
        for chunk in [7, 4096, 1 << 20] {
            let a = ArchiveReader::open(&src, &fs).unwrap();
            let got = transfer(a, t.path().join(format!("in-{chunk}")), chunk).await;
            let dest = t.path().join(format!("out-{chunk}"));
            let unpacked = unpack(&got, &dest).unwrap();
            assert_eq!(unpacked, fs);
            assert_eq!(
                std::fs::read(dest.join("db0/shard-0000/0000000001.data")).unwrap(),
                big
            );
            assert_eq!(
                std::fs::read(dest.join("db0/shard-0000/0000000002.data")).unwrap(),
                b"01234"
            );
        }
    }

    /// The archive of `files` under `src`, read from start to end.
    async fn archive_bytes(src: &Path, files: &[CheckpointFile]) -> Vec<u8> {
        let mut whole = Vec::new();
        SnapshotData::Out(ArchiveReader::open(src, files).unwrap())
            .read_to_end(&mut whole)
            .await
            .unwrap();
        whole
    }

    #[tokio::test]
    async fn a_chunk_read_again_out_of_order_gives_the_same_bytes_and_crcs() {
        // openraft sends a chunk again after a failed send: the reader
        // seeks back into a file it was reading in order (its running CRC
        // is then lost, and the file's CRC is computed whole, on the
        // blocking pool) and must give the same archive.
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        let big: Vec<u8> = (0..1_000_000u32).map(|i| (i * 13 % 241) as u8).collect();
        let fs = files(&src, &[("a", &big, big.len() as u64), ("b", b"tail", 4)]);
        let whole = archive_bytes(&src, &fs).await;
        let mut d = SnapshotData::Out(ArchiveReader::open(&src, &fs).unwrap());
        let chunk = 300_000u64;
        let mut got = Vec::new();
        let mut off = 0u64;
        let mut retried = false;
        while off < whole.len() as u64 {
            d.seek(SeekFrom::Start(off)).await.unwrap();
            let mut buf = vec![0u8; chunk as usize];
            let mut n = 0;
            while n < buf.len() {
                let k = d.read(&mut buf[n..]).await.unwrap();
                if k == 0 {
                    break;
                }
                n += k;
            }
            if off == chunk && !retried {
                // The second chunk "failed": sent again from its start.
                retried = true;
                continue;
            }
            got.extend_from_slice(&buf[..n]);
            off += n as u64;
        }
        assert!(retried);
        assert_eq!(got, whole);
        let path = t.path().join("in");
        std::fs::write(&path, &got).unwrap();
        assert_eq!(unpack(&path, &t.path().join("out")).unwrap(), fs);
    }

    #[tokio::test]
    async fn a_seek_while_a_read_is_in_flight_hands_out_the_bytes_of_the_new_position() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        let big: Vec<u8> = (0..500_000u32).map(|i| (i * 7 % 253) as u8).collect();
        let fs = files(&src, &[("a", &big, big.len() as u64)]);
        let whole = archive_bytes(&src, &fs).await;
        let mut d = SnapshotData::Out(ArchiveReader::open(&src, &fs).unwrap());
        for (from, to) in [(0u64, 200_000u64), (100, 400_000), (300_000, 7)] {
            d.seek(SeekFrom::Start(from)).await.unwrap();
            // One poll: the read goes to the blocking pool (most likely
            // still in flight when the seek below moves the position).
            let mut first = [0u8; 1000];
            let _ = std::future::poll_fn(|cx| {
                let mut rb = ReadBuf::new(&mut first);
                Poll::Ready(Pin::new(&mut d).poll_read(cx, &mut rb))
            })
            .await;
            d.seek(SeekFrom::Start(to)).await.unwrap();
            let mut got = vec![0u8; 50_000];
            d.read_exact(&mut got).await.unwrap();
            assert_eq!(
                got,
                whole[to as usize..to as usize + 50_000],
                "from {from} to {to}"
            );
        }
    }

    #[tokio::test]
    async fn a_damaged_archive_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        let fs = files(&src, &[("a", b"hello world", 11)]);
        let got = transfer(
            ArchiveReader::open(&src, &fs).unwrap(),
            t.path().join("in"),
            1 << 20,
        )
        .await;
        let mut bytes = std::fs::read(&got).unwrap();
        let at = bytes.len() - 8;
        bytes[at] ^= 1;
        std::fs::write(&got, &bytes).unwrap();
        let err = unpack(&got, &t.path().join("out")).unwrap_err();
        assert!(err.to_string().contains("CRC mismatch in a"), "{err}");
        // Truncated.
        std::fs::write(&got, &bytes[..bytes.len() - 2]).unwrap();
        assert!(unpack(&got, &t.path().join("out2")).is_err());
    }

    #[test]
    fn archive_paths_that_climb_out_are_refused() {
        for bad in ["../x", "/etc/passwd", "a//b", "a/./b", ""] {
            assert!(safe_rel(bad).is_err(), "{bad}");
        }
        assert_eq!(safe_rel("a/b").unwrap(), Path::new("a/b"));
    }

    #[tokio::test]
    async fn reading_a_stored_snapshot_to_its_end_gives_the_archive_length() {
        let t = tempfile::tempdir().unwrap();
        let fs = files(t.path(), &[("x", b"abc", 3)]);
        let a = ArchiveReader::open(t.path(), &fs).unwrap();
        let total = a.len();
        let mut d = SnapshotData::Out(a);
        let mut all = Vec::new();
        d.read_to_end(&mut all).await.unwrap();
        assert_eq!(all.len() as u64, total);
        assert!(d.write_all(b"no").await.is_err());
    }
}
