//! The engine's one error type.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong in the engine. Messages name the operation
/// and the file they concern.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What the engine was doing ("write", "fsync", "open", ...).
        op: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// A record or file failed its checks somewhere other than the torn tail
    /// of the active file.
    #[error("corrupt data in {path} at offset {offset}: {reason}")]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// Byte offset of the damaged record or header.
        offset: u64,
        /// What check failed.
        reason: String,
    },
    /// Another process (or another `Db` in this one) holds the directory.
    #[error("data directory {path} is locked by another process (lock file {path}/LOCK)")]
    Locked {
        /// The data directory.
        path: PathBuf,
    },
    /// An earlier write or fsync failed; the engine refuses writes until it
    /// is reopened, because it can no longer promise what is on disk.
    #[error("engine is read-only after an earlier failure: {0}")]
    Poisoned(String),
    /// A map operation on a key that holds a plain value, or a value
    /// operation on a key that holds a map.
    #[error("key holds a {found}, not a {expected}")]
    WrongKind {
        /// What the operation needs ("value" or "map").
        expected: &'static str,
        /// What the key holds.
        found: &'static str,
    },
    /// A key, field or value is larger than the format can store.
    #[error("{what} too large: {len} bytes (limit {limit})")]
    TooLarge {
        /// "key", "field" or "value".
        what: &'static str,
        /// The offending length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The options cannot be used.
    #[error("invalid options: {0}")]
    InvalidOptions(String),
}

/// `Result` with the engine's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
