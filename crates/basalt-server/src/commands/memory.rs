//! MEMORY USAGE, STATS, MALLOC-STATS, DOCTOR, PURGE and HELP (Redis
//! `object.c`).
//!
//! Redis counts the bytes a key and its value take in RAM. Basalt keeps
//! values (and every field's contents) in its data files, so its answer is
//! what the key really holds in memory: its index entry, a map's field
//! table, its expiry entry and, for a sorted set, its ordered index. A
//! large string therefore reports a few dozen bytes; its size on disk is
//! what STRLEN (or the HTTP API) tells.
//!
//! MEMORY STATS answers Redis's fields from what Basalt can measure: the
//! allocator's own figures (glibc `mallinfo2`, the allocator Basalt runs
//! on), the resident size from `/proc`, and each database's key count and
//! index bytes. What Basalt does not track separately (client buffers,
//! script caches, the expires table, which lives in the index entries) is
//! 0, and `peak.allocated` is the highest figure seen by MEMORY STATS or
//! at start-up, not a continuous peak.

use std::sync::atomic::{AtomicU64, Ordering};

use basalt_resp::Args;

use super::{
    def, is, parse_i64, sub_arity, unknown_subcommand, CommandDef, Ctx, Error, Group, Result,
};
use crate::keyspace::RedisType;

/// The table.
pub const COMMANDS: &[CommandDef] = &[def(
    "memory",
    -2,
    0,
    (0, 0, 0),
    Group::Server,
    "4.0.0",
    "A container for memory diagnostics commands.",
    memory,
)];

/// Bytes the allocator has handed out and not got back (glibc: in-use
/// chunks of the heap arenas plus mmapped chunks); 0 where unknown.
pub fn allocated_bytes() -> u64 {
    allocator().0
}

/// (allocated, obtained from the system) per glibc's `mallinfo2`.
fn allocator() -> (u64, u64) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's counters and
        // returns them by value.
        let m = unsafe { libc::mallinfo2() };
        ((m.uordblks + m.hblkhd) as u64, (m.arena + m.hblkhd) as u64)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        (0, 0)
    }
}

/// Allocated bytes when the server finished starting (`startup.allocated`).
static STARTUP: AtomicU64 = AtomicU64::new(0);
/// The highest allocated figure seen (`peak.allocated`).
static PEAK: AtomicU64 = AtomicU64::new(0);

/// Notes the allocation at start-up (called once the databases are open).
pub fn note_startup() {
    let a = allocated_bytes();
    STARTUP.store(a, Ordering::Relaxed);
    PEAK.fetch_max(a, Ordering::Relaxed);
}

fn memory(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let sub = &args[1];
    if is(sub, "help") {
        sub_arity("memory|help", 2, &args)?;
        super::server::help(
            ctx,
            "MEMORY",
            &[
                "DOCTOR",
                "    Return memory problems reports.",
                "MALLOC-STATS",
                "    Return internal statistics report from the memory allocator.",
                "PURGE",
                "    Attempt to purge dirty pages for reclamation by the allocator.",
                "STATS",
                "    Return information about the memory usage of the server.",
                "USAGE <key> [SAMPLES <count>]",
                "    Return memory in bytes used by <key> in RAM: its index entry, a hash's,",
                "    set's or list's field table and a sorted set's ordered index. Values live",
                "    on disk and are not counted. SAMPLES is accepted and ignored (nothing",
                "    is sampled).",
            ],
        );
        return Ok(());
    }
    if is(sub, "stats") {
        sub_arity("memory|stats", 2, &args)?;
        stats(ctx);
        return Ok(());
    }
    if is(sub, "malloc-stats") {
        sub_arity("memory|malloc-stats", 2, &args)?;
        let text = malloc_stats();
        ctx.enc().verbatim(b"txt", text.as_bytes());
        return Ok(());
    }
    if is(sub, "doctor") {
        sub_arity("memory|doctor", 2, &args)?;
        let text = doctor(ctx);
        ctx.enc().verbatim(b"txt", text.as_bytes());
        return Ok(());
    }
    if is(sub, "purge") {
        sub_arity("memory|purge", 2, &args)?;
        // glibc gives free memory at the top of the heap and whole free
        // pages back to the system; Redis does the same with jemalloc.
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only walks the allocator's free lists.
        unsafe {
            libc::malloc_trim(0);
        }
        ctx.ok();
        return Ok(());
    }
    if !is(sub, "usage") {
        return Err(unknown_subcommand("memory", sub));
    }
    sub_arity("memory|usage", -3, &args)?;
    let mut j = 3;
    while j < args.len() {
        if is(&args[j], "samples") && j + 1 < args.len() {
            match parse_i64(&args[j + 1]) {
                None => return Err(Error::err("value is not an integer or out of range")),
                Some(n) if n < 0 => return Err(Error::Syntax),
                Some(_) => {}
            }
            j += 2;
        } else {
            return Err(Error::Syntax);
        }
    }
    let key = &args[2];
    let slot = ctx.slot();
    let Some(db) = slot.db() else {
        drop(slot);
        ctx.null();
        return Ok(());
    };
    let _g = ctx.lock(key);
    let Some(mut bytes) = db.key_memory(key) else {
        drop(slot);
        ctx.null();
        return Ok(());
    };
    let is_zset = db
        .meta(key)
        .is_some_and(|m| RedisType::of(&m) == RedisType::ZSet);
    if is_zset {
        let z = super::zset::ZDb::of(&slot).expect("opened");
        if let Some(ix) = z.load(key)? {
            bytes += ix.approx_bytes();
            z.put_back(key, ix);
        }
    }
    drop(_g);
    drop(slot);
    ctx.int(bytes as i64);
    Ok(())
}

/// The figures MEMORY STATS and MEMORY DOCTOR work from.
struct Figures {
    peak: u64,
    total: u64,
    startup: u64,
    /// (db, keys, index bytes) of each database with keys.
    dbs: Vec<(usize, u64, u64)>,
    overhead: u64,
    keys: u64,
    dataset: u64,
    active: u64,
    rss: u64,
}

fn figures(ctx: &Ctx<'_>) -> Figures {
    let sh = ctx.shared;
    let (total, active) = allocator();
    let peak = PEAK.fetch_max(total, Ordering::Relaxed).max(total);
    let startup = STARTUP.load(Ordering::Relaxed);
    let dbs: Vec<(usize, u64, u64)> = (0..sh.keyspace.len())
        .map(|n| (n, sh.keyspace.figures(n)))
        .filter(|(_, f)| f.keys > 0)
        .map(|(n, f)| (n, f.keys, f.index_bytes))
        .collect();
    let keys = dbs.iter().map(|d| d.1).sum();
    let overhead = startup + dbs.iter().map(|d| d.2).sum::<u64>();
    Figures {
        peak,
        total,
        startup,
        overhead,
        keys,
        dataset: total.saturating_sub(overhead),
        dbs,
        active,
        rss: super::server::rss_bytes(),
    }
}

/// Redis computes its ratios as C floats; the same rounding here.
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        (a as f32 / b as f32) as f64
    }
}

fn stats(ctx: &mut Ctx<'_>) {
    let f = figures(ctx);
    let net = f.total.saturating_sub(f.startup);
    let mut e = ctx.enc();
    e.map(27 + f.dbs.len());
    let int = |e: &mut basalt_resp::Encoder<'_>, k: &str, v: u64| {
        e.bulk(k.as_bytes());
        e.integer(v as i64);
    };
    int(&mut e, "peak.allocated", f.peak);
    int(&mut e, "total.allocated", f.total);
    int(&mut e, "startup.allocated", f.startup);
    int(&mut e, "replication.backlog", 0);
    int(&mut e, "clients.slaves", 0);
    int(&mut e, "clients.normal", 0);
    int(&mut e, "cluster.links", 0);
    int(&mut e, "aof.buffer", 0);
    int(&mut e, "lua.caches", 0);
    int(&mut e, "functions.caches", 0);
    for &(n, _, index) in &f.dbs {
        e.bulk(format!("db.{n}").as_bytes());
        e.map(3);
        int(&mut e, "overhead.hashtable.main", index);
        int(&mut e, "overhead.hashtable.expires", 0);
        int(&mut e, "overhead.hashtable.slot-to-keys", 0);
    }
    int(&mut e, "overhead.total", f.overhead);
    int(&mut e, "keys.count", f.keys);
    int(
        &mut e,
        "keys.bytes-per-key",
        net.checked_div(f.keys).unwrap_or(0),
    );
    int(&mut e, "dataset.bytes", f.dataset);
    e.bulk(b"dataset.percentage");
    e.double(ratio(f.dataset, net) * 100.0);
    e.bulk(b"peak.percentage");
    e.double(ratio(f.total, f.peak) * 100.0);
    int(&mut e, "allocator.allocated", f.total);
    int(&mut e, "allocator.active", f.active);
    int(&mut e, "allocator.resident", f.rss);
    e.bulk(b"allocator-fragmentation.ratio");
    e.double(ratio(f.active, f.total));
    int(
        &mut e,
        "allocator-fragmentation.bytes",
        f.active.saturating_sub(f.total),
    );
    e.bulk(b"allocator-rss.ratio");
    e.double(ratio(f.rss, f.active));
    int(
        &mut e,
        "allocator-rss.bytes",
        f.rss.saturating_sub(f.active),
    );
    // The allocator's resident figure is the process's: no overhead between.
    e.bulk(b"rss-overhead.ratio");
    e.double(ratio(f.rss, f.rss));
    int(&mut e, "rss-overhead.bytes", 0);
    e.bulk(b"fragmentation");
    e.double(ratio(f.rss, f.total));
    int(&mut e, "fragmentation.bytes", f.rss.saturating_sub(f.total));
}

/// MEMORY MALLOC-STATS: glibc's own report (`malloc_info`, XML), or
/// Redis's answer for an allocator without one.
fn malloc_stats() -> String {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let mut buf: *mut libc::c_char = std::ptr::null_mut();
        let mut len: libc::size_t = 0;
        // SAFETY: open_memstream allocates a buffer it owns until fclose,
        // which sets `buf` and `len`; malloc_info writes into the stream.
        // The buffer is copied out, then freed with the allocator's free.
        unsafe {
            let f = libc::open_memstream(&mut buf, &mut len);
            if !f.is_null() {
                let ok = malloc_info(0, f) == 0;
                libc::fclose(f);
                if !buf.is_null() {
                    let text = std::slice::from_raw_parts(buf as *const u8, len).to_vec();
                    libc::free(buf.cast());
                    if ok {
                        return String::from_utf8_lossy(&text).into_owned();
                    }
                }
            }
        }
    }
    "Stats not supported for the current allocator".to_string()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" {
    /// glibc: writes the allocator's state as XML to `stream`.
    fn malloc_info(options: libc::c_int, stream: *mut libc::FILE) -> libc::c_int;
}

/// MEMORY DOCTOR: a short report in Basalt's words on what stands out.
fn doctor(ctx: &Ctx<'_>) -> String {
    let f = figures(ctx);
    if f.total < 5 << 20 {
        return "This instance is empty or uses very little memory, so there is nothing to \
                diagnose yet.\n"
            .to_string();
    }
    let mut issues = Vec::new();
    if f.peak > f.total.saturating_mul(3) / 2 {
        issues.push(format!(
            "Peak memory: the allocated memory once reached {} bytes, over 150% of the {} bytes allocated now; the resident size may stay high after such a peak (MEMORY PURGE may give some back).",
            f.peak, f.total
        ));
    }
    if f.total > 0 && f.rss > f.total.saturating_mul(14) / 10 && f.rss - f.total > 10 << 20 {
        issues.push(format!(
            "High fragmentation: the resident size ({} bytes) is {:.2} times the allocated memory ({} bytes).",
            f.rss,
            ratio(f.rss, f.total),
            f.total
        ));
    }
    if issues.is_empty() {
        return "No memory problem was found. Keys and their index live in RAM (the largest \
                part here); values live on disk and are not counted.\n"
            .to_string();
    }
    let mut out = String::from("Memory problems were found:\n\n");
    for i in issues {
        out.push_str(" * ");
        out.push_str(&i);
        out.push_str("\n\n");
    }
    out
}
