//! The narrow file interface the engine writes and reads through.
//!
//! Only data and hint files go through it; directory listing, renames and
//! removals use `std::fs` directly. Tests wrap [`StdFs`] to fail a write or an
//! fsync after N calls and check that the engine poisons itself and loses
//! nothing it acknowledged.
//!
//! Reads of data files go through a shared memory map when the file system
//! offers one ([`VFile::map`]), so a read of a cached record is a memory
//! copy, not a `pread` system call. A `VFile` that does not map (the default,
//! as in the fault-injection tests) is read with `pread`.
//!
//! Appends to the active file go through a *writable* shared map when the
//! file system offers one ([`VFile::map_mut`]) and can reserve space ahead of
//! the writes ([`VFile::allocate`]): a store into the page cache instead of a
//! `pwrite` system call. Both default to "not available", so a test VFS keeps
//! the `pwrite` path its faults are injected into.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// The size of a memory page.
fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    })
}

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
    /// Maps the first `len` bytes of the file read-write and shared, so the
    /// engine can append by storing into the map (and read through the same
    /// map). `None` (the default) means "append with `write_all_at`"; an
    /// implementation returns a map only where [`VFile::allocate`] works and
    /// a store into allocated space cannot fail for lack of disk space.
    fn map_mut(&self, len: u64) -> Option<FileMap> {
        let _ = len;
        None
    }
    /// Tells the kernel the cached pages of `[offset, offset + len)` will
    /// not be read again soon (`POSIX_FADV_DONTNEED`): compaction reads its
    /// inputs once, and their pages would otherwise push values clients
    /// read out of the page cache. Clean, unmapped pages go; others stay.
    /// Advice only; the default does nothing.
    fn drop_cache(&self, offset: u64, len: u64) {
        let _ = (offset, len);
    }
    /// Reads `[offset, offset + len)` past the page cache (`O_DIRECT`) into
    /// `buf` and returns the bytes, or `Ok(None)` when this file cannot be
    /// read that way (the default; a file system without direct I/O), in
    /// which case the caller reads with [`VFile::read_exact_at`]. A cold
    /// read of a record the clients will likely not read again soon then
    /// neither adds its pages to the page cache nor evicts others for them.
    fn read_direct<'a>(
        &self,
        buf: &'a mut DirectBuf,
        offset: u64,
        len: usize,
    ) -> io::Result<Option<&'a [u8]>> {
        let _ = (buf, offset, len);
        Ok(None)
    }
    /// A direct read of this file aligned to `align` was refused with
    /// `EINVAL` (an alignment the device does not take): below
    /// [`DIRECT_ALIGN`], later direct reads use [`DIRECT_ALIGN`]; at it,
    /// [`VFile::read_direct`] and [`VFile::raw_fd`]`(true)` stop for this
    /// file. (A read planned at the smaller alignment that fails after the
    /// step-up therefore does not stop direct reads.) The default does
    /// nothing.
    fn refuse_direct(&self, align: usize) {
        let _ = align;
    }
    /// The alignment of the offsets and lengths of direct reads of this
    /// file: a power of two that divides [`DIRECT_ALIGN`] (buffers are
    /// always aligned to that). Known once [`VFile::raw_fd`]`(true)` or
    /// [`VFile::read_direct`] has opened the direct descriptor; the default
    /// is [`DIRECT_ALIGN`].
    fn direct_align(&self) -> usize {
        DIRECT_ALIGN
    }
    /// The descriptor to read this file with, for a caller that submits
    /// its reads itself (io_uring): the `O_DIRECT` one with `direct` (reads
    /// must then be aligned as [`VFile::read_direct`]'s are), else the
    /// plain one. `None` (the default) when there is none to hand out: the
    /// caller reads through this trait. The descriptor stays valid while
    /// this `VFile` lives.
    fn raw_fd(&self, direct: bool) -> Option<std::os::fd::RawFd> {
        let _ = direct;
        None
    }
    /// Allocates disk space for `[offset, offset + len)`, extending the file
    /// (with zeros) if it is shorter, like `fallocate(fd, 0, offset, len)`.
    /// After it succeeds, a store through a [`VFile::map_mut`] map into that
    /// range never hits a hole. The default says it is unsupported.
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this file system does not preallocate",
        ))
    }
}

/// A shared memory map of a file's first bytes: read-only, or (for the
/// active file) read-write so that appends are stores into it.
///
/// Shared (`MAP_SHARED`) means the mapping shows the page cache itself: bytes
/// written with `pwrite` after the mapping was made are visible through it as
/// soon as the write returns, and bytes stored into a writable map are in the
/// page cache (dirty, written back by the kernel or by an fsync of the file)
/// as soon as the store is done. The mapping may be longer than the file; the
/// pages past the file's end must never be touched (that raises `SIGBUS`),
/// which is why the only ways in are [`FileMap::range`], whose caller promises
/// the range was written, and [`FileMap::store`], whose caller promises the
/// range lies inside the file and is read by nobody yet.
#[derive(Debug)]
pub struct FileMap {
    map: memmap2::MmapRaw,
    writable: bool,
}

impl FileMap {
    /// Maps `len` bytes of `file` from offset 0, read-only and shared.
    ///
    /// # Safety
    /// The caller must uphold [`FileMap::range`]'s contract for every range
    /// it reads, and must keep any other process from truncating the file
    /// while the map lives (Basalt's directory lock).
    pub unsafe fn new(file: &File, len: u64) -> io::Result<FileMap> {
        let len = map_len(len)?;
        let map = memmap2::MmapOptions::new()
            .len(len)
            .map_raw_read_only(file)?;
        Ok(FileMap::advised(map, false))
    }

    /// Maps `len` bytes of `file` from offset 0, read-write and shared.
    ///
    /// # Safety
    /// As for [`FileMap::new`], and the caller must uphold
    /// [`FileMap::store`]'s contract for every store.
    pub unsafe fn new_writable(file: &File, len: u64) -> io::Result<FileMap> {
        let len = map_len(len)?;
        let map = memmap2::MmapOptions::new().len(len).map_raw(file)?;
        Ok(FileMap::advised(map, true))
    }

    fn advised(map: memmap2::MmapRaw, writable: bool) -> FileMap {
        // Gets read single records at random places: without this hint, a
        // page fault on cold data would read ahead up to 128 KiB around it.
        // Advice only; a kernel that refuses it changes nothing we rely on.
        let _ = map.advise(memmap2::Advice::Random);
        FileMap { map, writable }
    }

    /// Length of the mapping (not of the file).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the mapping is empty.
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Whether [`FileMap::store`] may be used.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Starts loading the cache lines of `[offset, offset + len)` if the
    /// mapping covers them. A hint only: it reads nothing and cannot fault.
    pub fn prefetch(&self, offset: u64, len: usize) {
        let Ok(start) = usize::try_from(offset) else {
            return;
        };
        if start.saturating_add(len) > self.map.len() {
            return;
        }
        let base = self.map.as_ptr();
        let mut at = start;
        while at < start + len {
            crate::keydir::prefetch_read(base.wrapping_add(at));
            at = (at | 63) + 1;
        }
    }

    /// Whether every page of `[offset, offset + len)` is in memory now
    /// (`mincore`), so reading the range through the map takes no disk read.
    /// A range the mapping does not cover, or a failed call, counts as not
    /// resident. The answer can be stale by the time the caller reads: a
    /// page may be evicted in between (the read then faults, as it would
    /// without the check).
    pub fn resident(&self, offset: u64, len: usize) -> bool {
        let Ok(start) = usize::try_from(offset) else {
            return false;
        };
        let Some(end) = start.checked_add(len.max(1)) else {
            return false;
        };
        if end > self.map.len() {
            return false;
        }
        let page = page_size();
        let first = start / page * page;
        let pages = (end - first).div_ceil(page);
        // One byte per page; records above 64 pages (256 KiB) are rare
        // enough to pay for a heap vector.
        let mut small = [0u8; 64];
        let mut large = Vec::new();
        let vec: &mut [u8] = if pages <= small.len() {
            &mut small[..pages]
        } else {
            large.resize(pages, 0);
            &mut large
        };
        // SAFETY: `first..first + pages * page` starts at a page boundary
        // inside the mapping (the mapping starts at one) and `vec` has one
        // byte per page; mincore reads page tables only, never the pages.
        let rc = unsafe {
            libc::mincore(
                self.map.as_ptr().add(first) as *mut libc::c_void,
                pages * page,
                vec.as_mut_ptr(),
            )
        };
        rc == 0 && vec.iter().all(|b| b & 1 == 1)
    }

    /// The bytes `[offset, offset + len)`, or `None` if the mapping does not
    /// cover them (read them with `pread` instead).
    ///
    /// # Safety
    /// Every byte of the range must already have been written to the file
    /// (the write returned or the store was done), lie below the file's
    /// length, and must not be written again while the returned slice lives.
    /// Basalt's data files are append-only and an index entry points only at
    /// a record whose write finished before the entry was published, so
    /// ranges from the index qualify.
    pub unsafe fn range(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(len)?;
        if end > self.map.len() {
            return None;
        }
        // SAFETY: `start..end` lies inside the mapping (checked above), which
        // lives as long as `&self`. The caller promises the bytes are written,
        // inside the file, and immutable for the slice's lifetime, so the
        // shared slice never aliases a concurrent write or store and touching
        // its pages cannot fault past the end of the file. We build the slice
        // from a raw pointer instead of viewing the whole map as a slice,
        // because the unwritten rest of an active file's mapping *is* being
        // written.
        Some(unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(start), len) })
    }

    /// Asks the kernel to fault in, writable, the pages of
    /// `[offset, offset + len)` now (`MADV_POPULATE_WRITE`), so the stores
    /// that follow take no page fault each. Advice only: errors (an old
    /// kernel, a read-only map) are ignored and the stores fault as usual.
    /// The range must lie below the file's length (the kernel reports a
    /// range past it as an error rather than a signal, but there is no
    /// reason to ask).
    pub fn prefault_for_write(&self, offset: u64, len: u64) {
        let (Ok(offset), Ok(len)) = (usize::try_from(offset), usize::try_from(len)) else {
            return;
        };
        if self.writable && offset.saturating_add(len) <= self.map.len() {
            let _ = self
                .map
                .advise_range(memmap2::Advice::PopulateWrite, offset, len);
        }
    }

    /// Copies `bytes` into the file at `offset` through the map. Returns
    /// false (and stores nothing) if the map is read-only or does not cover
    /// the range.
    ///
    /// # Safety
    /// The range must lie below the file's length on a file system where a
    /// store into it needs no new disk space (it was allocated with
    /// [`VFile::allocate`]), so the store cannot fault on a hole or past the
    /// end (`SIGBUS`). No one may read or write the range while the store
    /// runs: Basalt stores only past every location its index holds for the
    /// file (the writer lock serialises the stores), and publishes the
    /// record's location only after the store.
    pub unsafe fn store(&self, offset: u64, bytes: &[u8]) -> bool {
        let Ok(start) = usize::try_from(offset) else {
            return false;
        };
        match start.checked_add(bytes.len()) {
            Some(end) if self.writable && end <= self.map.len() => {}
            _ => return false,
        }
        // SAFETY: the destination lies inside the writable mapping (checked
        // above), which lives as long as `&self`; the source is a separate
        // slice, so they do not overlap. The caller promises the range is
        // allocated file space below its end and that nothing reads or writes
        // it concurrently.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.map.as_mut_ptr().add(start),
                bytes.len(),
            )
        };
        true
    }
}

/// The alignment of direct-read buffers, and of direct reads' offsets and
/// lengths where the file system does not say what it needs: the largest
/// logical block size in common use (a 512-byte-sector disk accepts 4
/// KiB-aligned requests too). Where it does say (`statx`'s
/// `STATX_DIOALIGN`, [`VFile::direct_align`]), reads align to that: a
/// 512-byte-sector disk then reads a 1 KiB record as 1.5-2 KiB, not 4 or
/// 8, and an 8000-byte one as 8-8.5 KiB, not 8 or 12.
pub const DIRECT_ALIGN: usize = 4096;

/// The direct read that holds bytes `offset .. offset + len` at alignment
/// `align` (a power of two): where it starts, where in it those bytes
/// start, and how many bytes it reads.
pub fn aligned_span(offset: u64, len: usize, align: usize) -> (u64, usize, usize) {
    let start = offset / align as u64 * align as u64;
    let skip = (offset - start) as usize;
    (start, skip, (skip + len).next_multiple_of(align))
}

/// One aligned block of a [`DirectBuf`].
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Block([u8; DIRECT_ALIGN]);

/// A heap buffer whose start is aligned for direct I/O
/// ([`VFile::read_direct`]); reused across reads by its owner.
#[derive(Default)]
pub struct DirectBuf {
    blocks: Vec<Block>,
}

impl fmt::Debug for DirectBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectBuf")
            .field("bytes", &(self.blocks.len() * DIRECT_ALIGN))
            .finish()
    }
}

impl DirectBuf {
    /// An empty buffer; it grows on first use.
    pub fn new() -> DirectBuf {
        DirectBuf::default()
    }

    /// The buffer's capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.blocks.len() * DIRECT_ALIGN
    }

    /// `len` bytes starting at a [`DIRECT_ALIGN`]-aligned address, grown
    /// if need be (never shrunk).
    pub fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        let blocks = len.div_ceil(DIRECT_ALIGN);
        if self.blocks.len() < blocks {
            self.blocks.resize(blocks, Block([0; DIRECT_ALIGN]));
        }
        // SAFETY: `Block` is plain bytes with no padding (`repr(C)`, one
        // array), so the blocks are `blocks.len() * DIRECT_ALIGN >= len`
        // contiguous initialised bytes owned by the vector, borrowed mutably
        // for as long as `self` is.
        unsafe { std::slice::from_raw_parts_mut(self.blocks.as_mut_ptr().cast::<u8>(), len) }
    }
}

fn map_len(len: u64) -> io::Result<usize> {
    usize::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "map length overflows"))
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
struct StdFile {
    file: File,
    /// A second descriptor of the same file opened with `O_DIRECT`, made on
    /// the first direct read; `None` inside once the file system refused it.
    direct: std::sync::OnceLock<Option<File>>,
    /// Set when a direct read failed with `EINVAL` (an alignment the device
    /// does not take) at [`DIRECT_ALIGN`]: every later read goes through the
    /// page cache.
    direct_refused: std::sync::atomic::AtomicBool,
    /// The alignment of direct reads: what `statx` reported when the direct
    /// descriptor was opened, [`DIRECT_ALIGN`] until then, and from a
    /// refusal of a smaller one on.
    direct_align: std::sync::atomic::AtomicUsize,
}

/// The alignment of direct I/O offsets and lengths that `file`'s file
/// system reports (`statx`, `STATX_DIOALIGN`, Linux 6.1+), if it reports
/// one usable with [`DIRECT_ALIGN`]-aligned buffers.
fn reported_direct_align(file: &File) -> Option<usize> {
    // SAFETY: a zeroed `statx` is a valid value of the plain struct.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor, an empty NUL-terminated path with
    // AT_EMPTY_PATH (the descriptor's own file), and a struct to fill.
    let r = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut st,
        )
    };
    if r != 0 || st.stx_mask & libc::STATX_DIOALIGN == 0 {
        return None;
    }
    let (offset, mem) = (
        st.stx_dio_offset_align as usize,
        st.stx_dio_mem_align as usize,
    );
    // The memory alignment at most the offset one: a read continued after
    // a short one starts `got` bytes into the buffer, a multiple of the
    // offset alignment.
    (offset.is_power_of_two() && offset <= DIRECT_ALIGN && mem <= offset).then_some(offset)
}

impl StdFile {
    /// The `O_DIRECT` descriptor, opened on first use through
    /// `/proc/self/fd` (so it names this very file even after a rename or
    /// removal); `None` where the file system has no direct I/O.
    fn direct(&self) -> Option<&File> {
        self.direct
            .get_or_init(|| {
                use std::os::unix::fs::OpenOptionsExt;
                let path = format!("/proc/self/fd/{}", self.file.as_raw_fd());
                match OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(&path)
                {
                    Ok(f) => {
                        if let Some(align) = reported_direct_align(&self.file) {
                            self.direct_align
                                .store(align, std::sync::atomic::Ordering::Relaxed);
                        }
                        Some(f)
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "no direct reads for a data file");
                        None
                    }
                }
            })
            .as_ref()
    }
}

impl VFile for StdFile {
    fn refuse_direct(&self, align: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        // The reported alignment first gives way to the safe one.
        if align < DIRECT_ALIGN {
            if self.direct_align.swap(DIRECT_ALIGN, Relaxed) < DIRECT_ALIGN {
                tracing::debug!("a direct read refused its alignment; reading 4 KiB-aligned");
            }
            return;
        }
        self.direct_refused.store(true, Relaxed);
    }
    fn direct_align(&self) -> usize {
        self.direct_align.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn raw_fd(&self, direct: bool) -> Option<std::os::fd::RawFd> {
        if !direct {
            return Some(self.file.as_raw_fd());
        }
        if self
            .direct_refused
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return None;
        }
        self.direct().map(|f| f.as_raw_fd())
    }
    fn read_direct<'a>(
        &self,
        buf: &'a mut DirectBuf,
        offset: u64,
        len: usize,
    ) -> io::Result<Option<&'a [u8]>> {
        if self
            .direct_refused
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Ok(None);
        }
        let Some(direct) = self.direct() else {
            return Ok(None);
        };
        let align = self.direct_align();
        let (start, skip, span) = aligned_span(offset, len, align);
        let want = skip + len;
        let bytes = buf.bytes_mut(span);
        let mut got = 0;
        // The aligned span may run past the end of the file: a short read
        // that still covers the record is enough.
        while got < want {
            match FileExt::read_at(direct, &mut bytes[got..], start + got as u64) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the record lies past the end of the file",
                    ))
                }
                // A direct read ends on a block boundary unless it hit the end.
                Ok(n) if n % align != 0 && got + n < want => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the record lies past the end of the file",
                    ))
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The device wants another alignment than ours: this read
                // through the page cache, later ones at the safe alignment
                // (or, refused at that, through the page cache too).
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && got == 0 => {
                    self.refuse_direct(align);
                    return Ok(None);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Some(&bytes[skip..want]))
    }

    fn drop_cache(&self, offset: u64, len: u64) {
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return;
        };
        // SAFETY: a valid descriptor; advice has no memory effects.
        let _ = unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                offset,
                len,
                libc::POSIX_FADV_DONTNEED,
            )
        };
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(&self.file, buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        FileExt::write_all_at(&self.file, buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
    fn map(&self, len: u64) -> Option<FileMap> {
        // SAFETY: the engine reads through the map only ranges named by its
        // index (written, append-only, never rewritten), truncates a data file
        // only while opening it (before it maps it) or below where readers
        // can reach (the zero tail cut at seal and close), and holds the
        // directory lock that keeps other Basalt processes out.
        match unsafe { FileMap::new(&self.file, len) } {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(error = %e, len, "mapping a data file failed; reading it with pread");
                None
            }
        }
    }
    fn map_mut(&self, len: u64) -> Option<FileMap> {
        if !preallocation_is_reliable(&self.file) {
            return None;
        }
        // SAFETY: as for `map`; in addition the engine stores only into
        // space `allocate` reserved, past every location its index holds for
        // the file, under the shard's writer lock.
        match unsafe { FileMap::new_writable(&self.file, len) } {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(error = %e, len, "mapping a data file for writing failed; appending with pwrite");
                None
            }
        }
    }
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        let (Ok(off), Ok(n)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "allocation range overflows",
            ));
        };
        loop {
            // SAFETY: plain system call on a file descriptor we own; no
            // memory is passed.
            let r = unsafe { libc::fallocate(self.file.as_raw_fd(), 0, off, n) };
            if r == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Whether the file lives on a file system where space reserved with
/// `fallocate` is really there when a page of it is first stored into
/// (ext2/3/4, XFS, tmpfs). On copy-on-write file systems (btrfs, ZFS,
/// bcachefs) a write into preallocated space still needs new blocks, so on
/// a full disk a store through a map would raise `SIGBUS` where `pwrite`
/// returns `ENOSPC`; those, and file systems we do not know, keep `pwrite`.
fn preallocation_is_reliable(file: &File) -> bool {
    const EXT4_SUPER_MAGIC: i64 = 0xEF53;
    const XFS_SUPER_MAGIC: i64 = 0x5846_5342;
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `fstatfs` fills the buffer it is given when it returns 0; we
    // read it only then.
    let st = unsafe {
        if libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) != 0 {
            return false;
        }
        st.assume_init()
    };
    #[allow(clippy::unnecessary_cast)] // `f_type`'s width differs between targets.
    let kind = st.f_type as i64;
    matches!(kind, EXT4_SUPER_MAGIC | XFS_SUPER_MAGIC | TMPFS_MAGIC)
}

impl Vfs for StdFs {
    fn create(&self, path: &Path) -> io::Result<Arc<dyn VFile>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Arc::new(StdFile::random(f)))
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn VFile>> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Arc::new(StdFile::random(f)))
    }
}

impl StdFile {
    /// Wraps `f`, telling the kernel its `pread`s are random
    /// (`POSIX_FADV_RANDOM`): a cold read of one record (`ColdRead`) then
    /// reads that record's pages, not a read-ahead window around them.
    /// Sequential scans (recovery, compaction, hint files) read in large
    /// chunks of their own and lose nothing. Advice only: a refusal changes
    /// nothing we rely on.
    fn random(f: File) -> StdFile {
        // SAFETY: a valid descriptor; advice has no memory effects.
        let _ = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        StdFile {
            file: f,
            direct: std::sync::OnceLock::new(),
            direct_refused: std::sync::atomic::AtomicBool::new(false),
            direct_align: std::sync::atomic::AtomicUsize::new(DIRECT_ALIGN),
        }
    }
}
