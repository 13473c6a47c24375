//! Process memory and directory helpers (Linux `/proc`; elsewhere the memory
//! figures are simply missing).

use std::fs;
use std::io;
use std::path::Path;

/// Resident memory of this process, in bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rss {
    /// `VmRSS`: everything resident, file-backed pages (mmap) included.
    pub total: u64,
    /// `RssAnon`: heap and other anonymous memory only.
    pub anon: u64,
}

pub fn rss() -> Option<Rss> {
    rss_from("/proc/self/status")
}

/// Resident memory of process `pid` (another process, e.g. a server under test).
pub fn rss_of(pid: u32) -> Option<Rss> {
    rss_from(&format!("/proc/{pid}/status"))
}

fn rss_from(status_path: &str) -> Option<Rss> {
    let status = fs::read_to_string(status_path).ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024)
    };
    Some(Rss {
        total: field("VmRSS:")?,
        anon: field("RssAnon:").unwrap_or(0),
    })
}

/// Hands freed heap back to the OS so an RSS delta measures what the next
/// engine allocates, not what the previous one left in malloc's free lists.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas; it takes no pointers
    // from us and is safe to call at any time from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Total size of the regular files under `dir`.
pub fn dir_bytes(dir: &Path) -> io::Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            total += dir_bytes(&entry.path())?;
        } else if meta.is_file() {
            total += meta.len();
        }
    }
    Ok(total)
}

/// Deletes every file named `*.<ext>` under `dir`; returns how many.
pub fn remove_files_with_extension(dir: &Path, ext: &str) -> io::Result<usize> {
    let mut removed = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            removed += remove_files_with_extension(&path, ext)?;
        } else if path.extension().is_some_and(|e| e == ext) {
            fs::remove_file(&path)?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_read_on_linux() {
        if cfg!(target_os = "linux") {
            let r = rss().expect("VmRSS");
            assert!(r.total > 0 && r.anon > 0 && r.anon <= r.total);
            let by_pid = rss_of(std::process::id()).expect("VmRSS by pid");
            assert!(by_pid.total > 0);
        }
    }

    #[test]
    fn hint_files_are_removed_recursively_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("shard-0")).unwrap();
        fs::write(dir.path().join("shard-0/1.hint"), b"h").unwrap();
        fs::write(dir.path().join("shard-0/1.data"), b"dd").unwrap();
        fs::write(dir.path().join("2.hint"), b"h").unwrap();
        assert_eq!(remove_files_with_extension(dir.path(), "hint").unwrap(), 2);
        assert_eq!(dir_bytes(dir.path()).unwrap(), 2);
    }
}
