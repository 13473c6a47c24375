//! FUNCTION libraries: parsing a library's metadata line, registering its
//! functions, and keeping the set of libraries on disk.
//!
//! The libraries live in `<dir>/FUNCTIONS`, written whole on every change
//! (a new file, fsync, rename over the old one, fsync of the directory)
//! before FUNCTION LOAD / DELETE / FLUSH / RESTORE replies, so a loaded
//! library survives kill -9 and power loss, and a crash mid-write leaves
//! the previous set. It is a few kilobytes that change rarely, so a whole
//! rewrite is simpler and as safe as records in the engine's log. The same
//! bytes are the FUNCTION DUMP payload.
//!
//! Format (little-endian): `BSLTFUNC`, format version u32 (1), library
//! count u32, then per library its code as u32 length + bytes, then a
//! CRC32C of everything before it (u32).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use mlua::Function;

/// The file's name in the data directory.
pub(crate) const FILE: &str = "FUNCTIONS";
const MAGIC: &[u8; 8] = b"BSLTFUNC";
const VERSION: u32 = 1;

/// `no-writes`: the function may not call write commands (FCALL_RO may run it).
pub(crate) const NO_WRITES: u32 = 1;
/// `allow-oom`.
pub(crate) const ALLOW_OOM: u32 = 1 << 1;
/// `allow-stale`.
pub(crate) const ALLOW_STALE: u32 = 1 << 2;
/// `no-cluster`.
pub(crate) const NO_CLUSTER: u32 = 1 << 3;
/// `allow-cross-slot-keys`.
pub(crate) const ALLOW_CROSS_SLOT: u32 = 1 << 4;

/// Flag names, in the order FUNCTION LIST shows them.
pub(crate) const FLAG_NAMES: &[(u32, &str)] = &[
    (NO_WRITES, "no-writes"),
    (ALLOW_OOM, "allow-oom"),
    (ALLOW_STALE, "allow-stale"),
    (NO_CLUSTER, "no-cluster"),
    (ALLOW_CROSS_SLOT, "allow-cross-slot-keys"),
];

/// A flag by name.
pub(crate) fn flag(name: &[u8]) -> Option<u32> {
    FLAG_NAMES
        .iter()
        .find(|(_, n)| n.as_bytes() == name)
        .map(|(f, _)| *f)
}

/// One registered function.
#[derive(Debug, Clone)]
pub(crate) struct FunctionDef {
    pub name: String,
    pub f: Function,
    pub flags: u32,
    pub description: Option<Vec<u8>>,
}

/// One loaded library.
#[derive(Debug)]
pub(crate) struct Library {
    pub name: String,
    pub code: Vec<u8>,
    pub functions: Vec<FunctionDef>,
}

/// Whether `name` is a valid library or function name: letters, digits
/// and underscores, at least one.
pub(crate) fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

/// Reads a library's first line, `#!lua name=<name>`: its name, or the
/// error reply.
pub(crate) fn metadata(code: &[u8]) -> Result<String, String> {
    if !code.starts_with(b"#!") {
        return Err("ERR Missing library metadata".into());
    }
    let Some(end) = code.iter().position(|&b| b == b'\n') else {
        return Err("ERR Invalid library metadata".into());
    };
    let line = String::from_utf8_lossy(&code[2..end]).into_owned();
    let mut parts = line.split(' ').filter(|p| !p.is_empty());
    let engine = parts.next().unwrap_or("");
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("ERR Engine '{engine}' not found"));
    }
    let mut name = None;
    for p in parts {
        match p.strip_prefix("name=") {
            Some(_) if name.is_some() => {
                return Err(
                    "ERR Invalid metadata value, name argument was given multiple times".into(),
                )
            }
            Some(n) => name = Some(n.to_string()),
            None => return Err(format!("ERR Invalid metadata value given: {p}")),
        }
    }
    let name = name.ok_or_else(|| "ERR Library name was not given".to_string())?;
    if !valid_name(name.as_bytes()) {
        return Err("ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".into());
    }
    Ok(name)
}

/// The libraries' code in the file / DUMP format.
pub(crate) fn encode<'a>(codes: impl ExactSizeIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(codes.len() as u32).to_le_bytes());
    for c in codes {
        out.extend_from_slice(&(c.len() as u32).to_le_bytes());
        out.extend_from_slice(c);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The libraries' code from [`encode`]'s bytes, or `None` if they are not
/// such bytes (wrong magic, version or checksum, truncated).
pub(crate) fn decode(bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
    if bytes.len() < 20 || &bytes[..8] != MAGIC {
        return None;
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().ok()?) {
        return None;
    }
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(body.get(at..at + 4)?.try_into().ok()?))
    };
    if u32_at(8)? != VERSION {
        return None;
    }
    let count = u32_at(12)? as usize;
    let mut at = 16;
    let mut codes = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let len = u32_at(at)? as usize;
        at += 4;
        codes.push(body.get(at..at + len)?.to_vec());
        at += len;
    }
    (at == body.len()).then_some(codes)
}

/// Replaces `<dir>/FUNCTIONS` with `bytes`, durably: once this returns
/// `Ok`, a crash keeps the new set; before, the old one.
pub(crate) fn save(dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let path = dir.join(FILE);
    let tmp: PathBuf = dir.join(format!("{FILE}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// The saved libraries' code (none if the file does not exist).
pub(crate) fn load(dir: &Path) -> std::io::Result<Vec<Vec<u8>>> {
    let path = dir.join(FILE);
    match std::fs::read(&path) {
        Ok(bytes) => decode(&bytes).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{} is damaged (bad magic, version or checksum)",
                    path.display()
                ),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_format_round_trips_and_rejects_damage() {
        let codes: Vec<&[u8]> = vec![b"#!lua name=a\nx", b"", b"#!lua name=b\ny"];
        let bytes = encode(codes.iter().copied());
        assert_eq!(
            decode(&bytes).unwrap(),
            codes.iter().map(|c| c.to_vec()).collect::<Vec<_>>()
        );
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 1;
            assert!(decode(&bad).is_none(), "flipped byte {i}");
        }
        assert!(decode(&bytes[..bytes.len() - 1]).is_none());
        assert!(decode(b"garbage").is_none());
    }

    #[test]
    fn metadata_line_rules() {
        assert_eq!(metadata(b"#!lua name=lib\nreturn").unwrap(), "lib");
        assert_eq!(metadata(b"#!LUA  name=x\n").unwrap(), "x");
        assert!(metadata(b"return 1")
            .unwrap_err()
            .contains("Missing library metadata"));
        assert!(metadata(b"#!lua name=x")
            .unwrap_err()
            .contains("Invalid library metadata"));
        assert!(metadata(b"#!lua\n")
            .unwrap_err()
            .contains("name was not given"));
        assert!(metadata(b"#!py name=x\n")
            .unwrap_err()
            .contains("Engine 'py'"));
        assert!(metadata(b"#!lua name=x a=b\n").unwrap_err().contains("a=b"));
        assert!(metadata(b"#!lua name=a name=b\n")
            .unwrap_err()
            .contains("multiple times"));
        assert!(metadata(b"#!lua name=a-b\n")
            .unwrap_err()
            .contains("Library names"));
    }
}
