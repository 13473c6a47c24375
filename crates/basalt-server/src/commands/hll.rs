//! HyperLogLog commands (Redis `hyperloglog.c`): PFADD, PFCOUNT, PFMERGE,
//! PFDEBUG, PFSELFTEST. A sketch is an ordinary string value in Redis's
//! own representation (`crate::hyperloglog`), so GET, SET, DUMP and RESTORE
//! move sketches between Basalt and Redis unchanged.
//!
//! Every write is a read-modify-write of the value under the key's stripe
//! lock, as SETBIT is; a sketch is at most 12304 bytes. PFCOUNT of one key
//! stores the cardinality it computed back into the header, as Redis does,
//! so the bytes stay Redis's and the next PFCOUNT is a header read. A
//! PFADD that would raise no register is not a write: it is answered from
//! one lock-free look at the bytes it needs (`pfadd_changes_nothing`).

use basalt_engine::Db;
use basalt_resp::Args;

use super::flags::*;
use super::{def, CommandDef, Ctx, Error, Group, Result};
use crate::hyperloglog::{self as hll, Corrupt, REGISTERS};
use crate::notify::{NEW, STRING};

const G: Group = Group::HyperLogLog;

/// The HyperLogLog family's table.
pub const COMMANDS: &[CommandDef] = &[
    def(
        "pfadd",
        -2,
        WRITE | DENYOOM | FAST,
        (1, 1, 1),
        G,
        "2.8.9",
        "Adds the specified elements to the specified HyperLogLog.",
        pfadd,
    ),
    def(
        "pfcount",
        -2,
        READONLY,
        (1, -1, 1),
        G,
        "2.8.9",
        "Return the approximated cardinality of the set(s) observed by the HyperLogLog at key(s).",
        pfcount,
    ),
    def(
        "pfmerge",
        -2,
        WRITE | DENYOOM,
        (1, -1, 1),
        G,
        "2.8.9",
        "Merge N different HyperLogLogs into a single one.",
        pfmerge,
    ),
    def(
        "pfdebug",
        3,
        WRITE | DENYOOM | ADMIN,
        (2, 2, 1),
        G,
        "2.8.9",
        "Internal commands for debugging HyperLogLog values",
        pfdebug,
    ),
    def(
        "pfselftest",
        1,
        ADMIN,
        (0, 0, 0),
        G,
        "2.8.9",
        "An internal command for testing HyperLogLog values",
        pfselftest,
    ),
];

fn not_a_sketch() -> Error {
    Error::Msg("WRONGTYPE Key is not a valid HyperLogLog string value.".into())
}

fn corrupt(_: Corrupt) -> Error {
    Error::Msg("INVALIDOBJ Corrupted HLL object detected".into())
}

/// The sketch at `key` with its expiry, `None` when absent; a string that
/// is not a sketch is Redis's HLL WRONGTYPE.
fn read_sketch(db: &Db, key: &[u8]) -> Result<Option<(Vec<u8>, Option<u64>)>> {
    match db.get_versioned(key)? {
        None => Ok(None),
        Some(v) if hll::is_sketch(&v.value) => Ok(Some((v.value, v.expires_at))),
        Some(_) => Err(not_a_sketch()),
    }
}

/// Elements a PFADD may carry and still take the ranged path.
const RANGED_PFADD: usize = 16;

/// PFADD of a few elements into a dense sketch, touching only the bytes of
/// the registers they land in (a dense sketch is a segmented value in the
/// engine, so a raised register appends one small record). `None` when the
/// key is not a dense sketch (the caller takes the whole-value path).
/// The answer follows `Ctx::ranged_write`'s contract: `None` when the
/// write needs a batch the thread has not opened (nothing written), else
/// `Some(None)` when the key is not a dense sketch (the whole-value path
/// applies) or `Some(Some(changed))`.
fn pfadd_dense_ranged(
    db: &basalt_engine::Db,
    key: &[u8],
    els: &[&[u8]],
) -> Result<Option<Option<bool>>> {
    let Some((h, len)) = db.read_range(key, 0, hll::HDR)? else {
        return Ok(Some(None));
    };
    if !hll::is_sketch_header(&h, len) || !hll::is_dense(&h) {
        return Ok(Some(None));
    }
    // Registers raised, applied to a local copy of their bytes so that two
    // elements of one PFADD see each other.
    let mut bytes: std::collections::BTreeMap<u64, u8> = std::collections::BTreeMap::new();
    let mut dirty = std::collections::BTreeSet::new();
    for e in els {
        let (i, count) = hll::register_of(e);
        let (at, fb) = hll::dense_position(i);
        let at = at as u64;
        let n = if at + 1 < len { 2 } else { 1 };
        if (at..at + n).any(|b| !bytes.contains_key(&b)) {
            let got = db
                .read_range(key, at, n as usize)?
                .map(|(v, _)| v)
                .unwrap_or_default();
            for (k, b) in (at..at + n).enumerate() {
                bytes.entry(b).or_insert(got.get(k).copied().unwrap_or(0));
            }
        }
        let mut w: Vec<u8> = (at..at + n).map(|b| bytes[&b]).collect();
        if count > hll::register_at(&w, fb) {
            hll::set_register_at(&mut w, fb, count);
            for (k, b) in (at..at + n).zip(w) {
                bytes.insert(k, b);
                dirty.insert(k);
            }
        }
    }
    if dirty.is_empty() {
        return Ok(Some(Some(false)));
    }
    // Runs of changed bytes, and the header's stale-cache bit first (a
    // crash between writes then costs a recount, never a wrong count).
    let mut runs: Vec<(u64, Vec<u8>)> = Vec::new();
    for &b in &dirty {
        match runs.last_mut() {
            Some((start, v)) if *start + v.len() as u64 == b => v.push(bytes[&b]),
            _ => runs.push((b, vec![bytes[&b]])),
        }
    }
    let stale = h[15] & 0x80 != 0;
    let writes = runs.len() + usize::from(!stale);
    if writes > 1 && !db.in_batch() {
        return Ok(None);
    }
    // One write outside a batch, or any number inside one; a write the
    // engine needs several records for (the first ranged write of a plain
    // sketch turns it into segments) asks for the batch before writing.
    let mut pending: Vec<(u64, Vec<u8>)> = Vec::with_capacity(writes);
    if !stale {
        pending.push((15, vec![h[15] | 0x80]));
    }
    pending.extend(runs);
    for (at, v) in &pending {
        if db.try_write_range(key, *at, v)?.is_none() {
            return Ok(None);
        }
    }
    Ok(Some(Some(true)))
}

/// Whether a PFADD of `els` would raise no register of the dense sketch
/// at `key`, seen at one instant without the key's lock: the header and
/// each element's register bytes read from the engine's cache of applied
/// segments (`Db::read_ranges_cached`). Then the PFADD changes nothing
/// and is a read: it answers 0 as Redis does, with no write, event or
/// WATCH touch. Into a sketch with many elements almost every PFADD is
/// one, and taking no lock lets a hot sketch's PFADDs run on every worker
/// at once, as reads do. `false` (the locked path decides) when anything
/// was not there to see: not a dense sketch, a segment not cached on
/// this thread, a register across a segment boundary.
fn pfadd_changes_nothing<'e>(
    db: &Db,
    key: &[u8],
    els: impl ExactSizeIterator<Item = &'e [u8]>,
) -> bool {
    // On the stack: at most RANGED_PFADD elements come here.
    let n = els.len();
    debug_assert!(n <= RANGED_PFADD);
    let mut ranges = [(0u64, hll::HDR); RANGED_PFADD + 1];
    let mut wants = [(0u32, 0u8); RANGED_PFADD];
    for (k, e) in els.enumerate().take(RANGED_PFADD) {
        let (i, count) = hll::register_of(e);
        let (at, fb) = hll::dense_position(i);
        ranges[k + 1] = (at as u64, 2);
        wants[k] = (fb, count);
    }
    let mut header = [0u8; hll::HDR];
    let mut raises = false;
    let len = db.read_ranges_cached(key, &ranges[..=n], |k, bytes| {
        if k == 0 {
            if bytes.len() == hll::HDR {
                header.copy_from_slice(bytes);
            }
        } else if bytes.is_empty() {
            raises = true;
        } else {
            let (fb, count) = wants[k - 1];
            raises |= count > hll::register_at(bytes, fb);
        }
    });
    len.is_some_and(|len| !raises && hll::is_sketch_header(&header, len) && hll::is_dense(&header))
}

fn pfadd(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    if args.len() - 2 <= RANGED_PFADD {
        let unchanged = match ctx.slot().db() {
            Some(db) => pfadd_changes_nothing(db, key, (2..args.len()).map(|i| &args[i][..])),
            None => false,
        };
        if unchanged {
            ctx.int(0);
            return Ok(());
        }
        let els: Vec<&[u8]> = (2..args.len()).map(|i| &args[i][..]).collect();
        if let Some(updated) = ctx.ranged_write(key, |db| pfadd_dense_ranged(db, key, &els))? {
            if updated {
                ctx.notify(STRING, "pfadd", key);
            }
            ctx.int(updated as i64);
            return Ok(());
        }
    }
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let found = read_sketch(&db, key)?;
    let created = found.is_none();
    let (mut v, at) = found.unwrap_or_else(|| (hll::new_sketch(), None));
    let mut updated = created;
    for i in 2..args.len() {
        // A corrupt sketch fails the command with nothing stored, even if
        // earlier elements changed registers (Redis keeps those changes in
        // memory; a rejected write here leaves the stored value as it was).
        updated |= hll::add(&mut v, &args[i]).map_err(corrupt)?;
    }
    if updated {
        hll::invalidate(&mut v);
        db.put_with_expiry(key, &v, at)?;
        if created {
            ctx.notify(NEW, "new", key);
        }
        ctx.notify(STRING, "pfadd", key);
    }
    ctx.int(updated as i64);
    Ok(())
}

fn pfcount(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    if args.len() > 2 {
        let slot = ctx.slot();
        let mut max = Box::new([0u8; REGISTERS]);
        for i in 1..args.len() {
            let Some(db) = slot.db() else {
                ctx.keymiss(&args[i]);
                continue;
            };
            let sketch = read_sketch(db, &args[i]);
            ctx.looked_up(&args[i], !matches!(sketch, Ok(None)));
            if let Some((v, _)) = sketch? {
                hll::merge_into(&mut max, &v).map_err(corrupt)?;
            }
        }
        drop(slot);
        ctx.int(hll::count_registers(&max) as i64);
        return Ok(());
    }
    let key = &args[1];
    // The header alone answers a current cached count.
    let cached = {
        let slot = ctx.slot();
        match slot.db() {
            None => None,
            Some(db) => match db.read_range(key, 0, hll::HDR)? {
                None => None,
                Some((h, len)) if hll::is_sketch_header(&h, len) => Some(hll::cached(&h)),
                Some(_) => return Err(not_a_sketch()),
            },
        }
    };
    ctx.looked_up(key, cached.is_some());
    let card = match cached {
        None => 0,
        Some(Some(card)) => card,
        // A stale cache: count, and store the count in the header under
        // the key's lock (the value may have changed since the read).
        Some(None) => ctx.ranged_write(key, |db| {
            Ok(match read_sketch(db, key)? {
                None => Some(0),
                Some((mut v, _)) => match hll::cached(&v) {
                    Some(card) => Some(card),
                    None => {
                        let card = hll::count(&v).map_err(corrupt)?;
                        hll::set_cached(&mut v, card);
                        // Only the 8 header bytes (the TTL stays).
                        db.try_write_range(key, 8, &v[8..hll::HDR])?.map(|_| card)
                    }
                },
            })
        })?,
    };
    ctx.int(card as i64);
    Ok(())
}

fn pfmerge(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let dest: &[u8] = &args[1];
    let db = ctx.db_w()?;
    let n = ctx.conn.db;
    let _g = ctx
        .shared
        .keyspace
        .lock_many((1..args.len()).map(|i| (n, &args[i][..])));
    // The destination is one of the sources, as in Redis.
    let mut max = Box::new([0u8; REGISTERS]);
    let mut any_dense = false;
    let mut target = None;
    for i in 1..args.len() {
        // Every key, the target's too, is a read lookup (Redis).
        let sketch = read_sketch(&db, &args[i]);
        ctx.looked_up(&args[i], !matches!(sketch, Ok(None)));
        if let Some((v, at)) = sketch? {
            any_dense |= hll::is_dense(&v);
            hll::merge_into(&mut max, &v).map_err(corrupt)?;
            if i == 1 {
                target = Some((v, at));
            }
        }
    }
    let created = target.is_none();
    let (mut v, at) = target.unwrap_or_else(|| (hll::new_sketch(), None));
    if any_dense {
        hll::to_dense(&mut v).map_err(corrupt)?;
    }
    for (i, &m) in max.iter().enumerate() {
        if m != 0 {
            hll::raise(&mut v, i, m).map_err(corrupt)?;
        }
    }
    hll::invalidate(&mut v);
    db.put_with_expiry(dest, &v, at)?;
    if created {
        ctx.notify(NEW, "new", dest);
    }
    ctx.notify(STRING, "pfadd", dest);
    ctx.ok();
    Ok(())
}

fn pfdebug(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let sub = String::from_utf8_lossy(&args[1]).into_owned();
    let key = &args[2];
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let Some((mut v, at)) = read_sketch(&db, key)? else {
        return Err(Error::err("The specified key does not exist"));
    };
    match sub.to_ascii_lowercase().as_str() {
        // GETREG and TODENSE leave the sketch dense, as Redis does.
        "getreg" => {
            if !hll::is_dense(&v) {
                hll::to_dense(&mut v).map_err(corrupt)?;
                db.put_with_expiry(key, &v, at)?;
            }
            let regs = hll::registers(&v).map_err(corrupt)?;
            ctx.array(REGISTERS);
            for &r in regs.iter() {
                ctx.int(r as i64);
            }
        }
        "todense" => {
            let convert = !hll::is_dense(&v);
            if convert {
                hll::to_dense(&mut v).map_err(corrupt)?;
                db.put_with_expiry(key, &v, at)?;
            }
            ctx.int(convert as i64);
        }
        "encoding" => ctx.simple(if hll::is_dense(&v) {
            b"dense"
        } else {
            b"sparse"
        }),
        "decode" => {
            if hll::is_dense(&v) {
                return Err(Error::err("HLL encoding is not sparse"));
            }
            ctx.bulk(hll::decode_sparse(&v).as_bytes());
        }
        _ => return Err(Error::err(format!("Unknown PFDEBUG subcommand '{sub}'"))),
    }
    Ok(())
}

/// Checks this build's sketches against themselves: dense registers keep
/// every value at every position, sparse and dense sketches fed the same
/// elements hold the same registers and counts, and estimates stay within
/// five standard errors (1.04 / sqrt(16384) each) up to 100000 elements.
fn pfselftest(ctx: &mut Ctx<'_>, _args: Args<'_>) -> Result {
    let failed = |what: String| Error::Msg(format!("TESTFAILED {what}").into());
    let mut regs = vec![0u8; REGISTERS * 6 / 8];
    let mut rng = super::Rng::from_time();
    let mut want = vec![0u8; REGISTERS];
    for _ in 0..4 {
        for (i, w) in want.iter_mut().enumerate() {
            *w = (rng.next_u64() % 64) as u8;
            hll::dense_put(&mut regs, i, *w);
        }
        for (i, &w) in want.iter().enumerate() {
            if hll::dense_get(&regs, i) != w {
                return Err(failed(format!("Register error at {i}")));
            }
        }
    }
    let mut sparse = hll::new_sketch();
    let mut dense = hll::new_sketch();
    hll::to_dense(&mut dense).map_err(corrupt)?;
    let seed = rng.next_u64();
    let bound = 5.0 * 1.04 / (REGISTERS as f64).sqrt();
    for n in 1..=100_000u64 {
        let e = (seed ^ n).to_le_bytes();
        hll::add(&mut sparse, &e).map_err(corrupt)?;
        hll::add(&mut dense, &e).map_err(corrupt)?;
        if n % 1000 != 0 && n > 10 {
            continue;
        }
        let (a, b) = (
            hll::count(&sparse).map_err(corrupt)?,
            hll::count(&dense).map_err(corrupt)?,
        );
        if a != b {
            return Err(failed(format!(
                "Sparse and dense representations disagree: {a} vs {b}"
            )));
        }
        let err = (b as f64 - n as f64).abs();
        if err > bound * n as f64 && err > 1.0 {
            return Err(failed(format!("too big error. card:{n} abserr:{err}")));
        }
    }
    ctx.ok();
    Ok(())
}
