//! Checkpoints: an image of a database made of hard links, for copying a
//! database elsewhere (a Raft snapshot, a backup) without copying its data.
//!
//! Sealed data files, hint files and compaction markers never change once
//! they have their final name, so a link to one is a frozen copy. The active
//! file of each shard still grows; its link shares the inode, so the image
//! records how many of its bytes belong to it (the writer's end of records
//! at the time of the call) and whoever copies the image copies only that
//! prefix. The image is what a crash at the moment of the call would leave
//! on disk, which open already knows how to read. Compaction deletes no
//! file while the files are linked (it waits, holding nothing writers
//! need, on `Inner::deleting`), so the image is one point in time across
//! all shards: a compaction output may appear beside its inputs, as after
//! a crash, but no input goes before every shard is linked.

use std::path::{Path, PathBuf};

use crate::db::{sync_dir, Db};
use crate::error::{Error, Result};
use crate::recovery::{parse_name, shard_dir};

/// One file of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointFile {
    /// Path relative to the checkpoint's directory.
    pub path: PathBuf,
    /// How many bytes, from the start, belong to the image: the whole file,
    /// except for a shard's active file, which goes on growing after the
    /// checkpoint (the link shares its inode).
    pub len: u64,
}

/// How often one shard's listing is retried when a listed file is gone
/// before it is linked (compaction deletes nothing meanwhile, so only a
/// file removed by something else).
const ATTEMPTS: usize = 100;

impl Db {
    /// Hard-links an image of the database into `dest` (created; it must
    /// not exist and must be on the same filesystem) and returns its files.
    /// The directories are fsynced; the part of each shard's active file
    /// that belongs to the image may not be on disk yet (the writer fsyncs
    /// on its own schedule): fsync the listed files before relying on the
    /// image surviving a power loss (the Raft snapshot does).
    ///
    /// The image holds every write that returned before the call. The
    /// caller keeps writes to this database from running during the call
    /// (the server holds its exec gate): a write that runs concurrently may
    /// be in the image or not, and a batch that runs concurrently may be
    /// torn in it (open then ignores its members, as after a crash).
    /// Compaction may run, but deletes nothing until the call returns;
    /// hint files may appear (each complete when named).
    pub fn checkpoint(&self, dest: &Path) -> Result<Vec<CheckpointFile>> {
        let _no_deletions = self.inner.deleting.write();
        std::fs::create_dir(dest).map_err(|e| Error::io("create directory", dest, e))?;
        let mut files = Vec::new();
        let meta = self.inner.dir.join("BASALT");
        link(&meta, &dest.join("BASALT"))?;
        files.push(CheckpointFile {
            path: "BASALT".into(),
            len: file_len(&dest.join("BASALT"))?,
        });
        for (i, shard) in self.inner.shards.iter().enumerate() {
            let rel = shard_dir(Path::new(""), i);
            let to = dest.join(&rel);
            let mut attempt = 0;
            let linked = loop {
                attempt += 1;
                match link_shard(&shard.dir, &to, shard_end(shard)) {
                    Ok(linked) => break linked,
                    Err(Raced) if attempt < ATTEMPTS => {
                        std::fs::remove_dir_all(&to).map_err(|e| Error::io("remove", &to, e))?;
                    }
                    Err(Raced) => {
                        return Err(Error::io(
                            "link",
                            &shard.dir,
                            std::io::Error::other("files kept disappearing while being linked"),
                        ))
                    }
                    Err(Failed(e)) => return Err(e),
                }
            };
            sync_dir(&to)?;
            files.extend(linked.into_iter().map(|(name, len)| CheckpointFile {
                path: rel.join(name),
                len,
            }));
        }
        sync_dir(dest)?;
        Ok(files)
    }
}

/// The active file's id and the end of its records.
fn shard_end(shard: &crate::db::Shard) -> (u32, u64) {
    let w = shard.writer.lock();
    (w.file_id, w.len)
}

enum LinkError {
    /// A listed file was gone when linked.
    Raced,
    Failed(Error),
}
use LinkError::{Failed, Raced};

/// Links the data, hint and victims files of one shard directory (not the
/// unfinished `*.tmp` ones) into `to` (created).
fn link_shard(
    from: &Path,
    to: &Path,
    (active, active_len): (u32, u64),
) -> std::result::Result<Vec<(String, u64)>, LinkError> {
    std::fs::create_dir(to).map_err(|e| Failed(Error::io("create directory", to, e)))?;
    let mut out = Vec::new();
    let entries = std::fs::read_dir(from).map_err(|e| Failed(Error::io("list", from, e)))?;
    for ent in entries {
        let ent = ent.map_err(|e| Failed(Error::io("list", from, e)))?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((id, ext)) = parse_name(name) else {
            continue;
        };
        if !matches!(ext, "data" | "hint" | "victims") {
            continue;
        }
        let target = to.join(name);
        match std::fs::hard_link(ent.path(), &target) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Raced),
            Err(e) => return Err(Failed(Error::io("link", ent.path(), e))),
        }
        let len = if ext == "data" && id == active {
            active_len
        } else {
            file_len(&target).map_err(Failed)?
        };
        out.push((name.to_string(), len));
    }
    out.sort();
    Ok(out)
}

fn link(from: &Path, to: &Path) -> Result<()> {
    std::fs::hard_link(from, to).map_err(|e| Error::io("link", from, e))
}

fn file_len(path: &Path) -> Result<u64> {
    Ok(std::fs::metadata(path)
        .map_err(|e| Error::io("stat", path, e))?
        .len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Options;

    /// Copies a checkpoint's files (each cut to its length) into `to`.
    fn materialize(from: &Path, files: &[CheckpointFile], to: &Path) {
        for f in files {
            let bytes = std::fs::read(from.join(&f.path)).unwrap();
            let dst = to.join(&f.path);
            std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
            std::fs::write(dst, &bytes[..f.len as usize]).unwrap();
        }
    }

    #[test]
    fn a_checkpoint_opens_as_the_database_was_even_after_later_writes() {
        let dir = tempfile::tempdir().unwrap();
        let opts = || Options::default().max_file_size(4096).shards(2);
        let db = Db::open(dir.path().join("db"), opts()).unwrap();
        for i in 0..200u32 {
            db.put(format!("k{i}").as_bytes(), &[b'x'; 100]).unwrap();
        }
        db.put_field(b"h", b"f", b"1").unwrap();
        db.delete(b"k7").unwrap();
        let cp = dir.path().join("cp");
        let files = db.checkpoint(&cp).unwrap();
        assert!(files.iter().any(|f| f.path.ends_with("BASALT")));
        // Written after the checkpoint: into the same active files (the
        // links share them) and into new ones.
        for i in 0..200u32 {
            db.put(format!("k{i}").as_bytes(), b"later").unwrap();
        }
        db.put(b"k7", b"back").unwrap();
        db.compact().unwrap();
        let copy = dir.path().join("copy");
        materialize(&cp, &files, &copy);
        let img = Db::open(&copy, opts()).unwrap();
        assert_eq!(img.len(), 200);
        assert_eq!(img.get(b"k7").unwrap(), None);
        for i in (0..200u32).filter(|&i| i != 7) {
            let v = img.get(format!("k{i}").as_bytes()).unwrap();
            assert_eq!(v.as_deref(), Some(&[b'x'; 100][..]), "k{i}");
        }
        assert_eq!(
            img.get_field(b"h", b"f").unwrap().as_deref(),
            Some(&b"1"[..])
        );
        assert_eq!(db.get(b"k8").unwrap().as_deref(), Some(&b"later"[..]));
    }

    #[test]
    fn a_checkpoint_into_an_existing_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path().join("db"), Options::default()).unwrap();
        std::fs::create_dir(dir.path().join("cp")).unwrap();
        assert!(db.checkpoint(&dir.path().join("cp")).is_err());
    }
}
