//! The narrow file interface the engine writes and reads through.
//!
//! Only data and hint files go through it; directory listing, renames and
//! removals use `std::fs` directly. Tests wrap [`StdFs`] to fail a write or an
//! fsync after N calls and check that the engine poisons itself and loses
//! nothing it acknowledged.
//!
//! Reads of data files go through a read-only shared memory map when the
//! file system offers one ([`VFile::map`]), so a read of a cached record is a
//! memory copy, not a `pread` system call. A `VFile` that does not map (the
//! default, as in the fault-injection tests) is read with `pread`.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// One open file.
pub trait VFile: Send + Sync + fmt::Debug {
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Flushes the file's data to stable storage (fdatasync).
    fn sync_data(&self) -> io::Result<()>;
    /// The file's current length.
    fn len(&self) -> io::Result<u64>;
    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Maps the first `len` bytes of the file read-only and shared (`len` may
    /// exceed the file's length: the engine maps an active file's future size
    /// up front). `None` means "read this file with `read_exact_at`"; that is
    /// the default, and the engine also falls back to it when mapping fails.
    fn map(&self, len: u64) -> Option<FileMap> {
        let _ = len;
        None
    }
}

/// A read-only, shared memory map of a file's first bytes.
///
/// Shared (`MAP_SHARED`) means the mapping shows the page cache itself: bytes
/// written with `pwrite` after the mapping was made are visible through it as
/// soon as the write returns. The mapping may be longer than the file; the
/// pages past the file's end must never be touched (that raises `SIGBUS`),
/// which is why the only way in is [`FileMap::range`], whose caller promises
/// the range was written.
#[derive(Debug)]
pub struct FileMap {
    map: memmap2::Mmap,
}

impl FileMap {
    /// Maps `len` bytes of `file` from offset 0, read-only and shared.
    ///
    /// # Safety
    /// The caller must uphold [`FileMap::range`]'s contract for every range
    /// it reads, and must keep any other process from truncating the file
    /// while the map lives (Basalt's directory lock).
    pub unsafe fn new(file: &File, len: u64) -> io::Result<FileMap> {
        let len = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "map length overflows"))?;
        // SAFETY: the mapping is read-only; the caller promises (above) that
        // only written, never-again-modified ranges are read through it and
        // that the file is not truncated under it.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map(file)? };
        // Gets read single records at random places: without this hint, a
        // page fault on cold data would read ahead up to 128 KiB around it.
        // Advice only; a kernel that refuses it changes nothing we rely on.
        let _ = map.advise(memmap2::Advice::Random);
        Ok(FileMap { map })
    }

    /// Length of the mapping (not of the file).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the mapping is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The bytes `[offset, offset + len)`, or `None` if the mapping does not
    /// cover them (read them with `pread` instead).
    ///
    /// # Safety
    /// Every byte of the range must already have been written to the file
    /// (the write returned), lie below the file's length, and must not be
    /// written again while the returned slice lives. Basalt's data files are
    /// append-only and an index entry points only at a record whose `pwrite`
    /// returned before the entry was published, so ranges from the index
    /// qualify.
    pub unsafe fn range(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(len)?;
        if end > self.map.len() {
            return None;
        }
        // SAFETY: `start..end` lies inside the mapping (checked above), which
        // lives as long as `&self`. The caller promises the bytes are written,
        // inside the file, and immutable for the slice's lifetime, so the
        // shared slice never aliases a concurrent write and touching its pages
        // cannot fault past the end of the file. We build the slice from a raw
        // pointer instead of dereferencing the whole `Mmap`, because the
        // unwritten rest of an active file's mapping *is* being written.
        Some(unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(start), len) })
    }
}

/// Opens files.
pub trait Vfs: Send + Sync + fmt::Debug + 'static {
    /// Creates a new file for reading and writing, failing if it exists.
    fn create(&self, path: &Path) -> io::Result<Arc<dyn VFile>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn VFile>>;
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdFs;

#[derive(Debug)]
struct StdFile(File);

impl VFile for StdFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(&self.0, buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        FileExt::write_all_at(&self.0, buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn map(&self, len: u64) -> Option<FileMap> {
        // SAFETY: the engine reads through the map only ranges named by its
        // index (written, append-only, never rewritten), truncates a data file
        // only while opening it, before it maps it, and holds the directory
        // lock that keeps other Basalt processes out.
        match unsafe { FileMap::new(&self.0, len) } {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(error = %e, len, "mapping a data file failed; reading it with pread");
                None
            }
        }
    }
}

impl Vfs for StdFs {
    fn create(&self, path: &Path) -> io::Result<Arc<dyn VFile>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Arc::new(StdFile(f)))
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn VFile>> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Arc::new(StdFile(f)))
    }
}
