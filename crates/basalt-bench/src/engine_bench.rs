//! `basalt-bench engine`: Basalt against RocksDB on the same machine, in the
//! same process, on the same keys.
//!
//! Engines alternate run by run (round 1: A then B, round 2: B then A, ...)
//! so that neither always gets the cooler machine or the warmer page cache,
//! and every figure reported is the median over the rounds. Each run starts
//! from an empty directory and does, in order: fillrandom (every key once,
//! random order), readrandom, overwrite, a 90% read / 10% write mix, then
//! close and two timed reopens (with hint files, and with them deleted).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;

use crate::engines::{BasaltSync, Engine, EngineConfig, EngineKind};
use crate::gen::{permutation, KeyFormat, SplitMix64, ValuePool};
use crate::histogram::Histogram;
use crate::sysinfo;

#[derive(Debug, clap::Args)]
pub struct EngineArgs {
    /// Number of distinct keys loaded by fillrandom.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Operations in each of readrandom, overwrite and mix. Default: --keys.
    #[arg(long)]
    ops: Option<u64>,
    /// Key size in bytes (the key index in zero-padded hex).
    #[arg(long, default_value_t = 16)]
    key_size: usize,
    /// Value size in bytes (random, incompressible).
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Engines to compare, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "basalt,rocksdb")]
    engines: Vec<EngineKind>,
    /// Client threads, the same for every engine.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Runs per engine; the median is reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Parent of the per-run temporary directories. Default: the system temp dir.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write the results as a JSON array to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Basalt's fsync policy. `never` matches RocksDB's sync=false; `everysec`
    /// is Basalt's product default.
    #[arg(long, value_enum, default_value_t = BasaltSync::Never)]
    basalt_sync: BasaltSync,
    /// RocksDB write buffer (memtable) size in MiB.
    #[arg(long, default_value_t = 64)]
    rocksdb_write_buffer_mb: usize,
    /// RocksDB block cache in MiB. Default: the data size and a quarter, so
    /// reads are served from RAM as Basalt's are when the data fits; set it
    /// (small) when the run has less memory than data (a memory cgroup:
    /// `scripts/bench_cold.py --engines`).
    #[arg(long)]
    rocksdb_block_cache_mb: Option<usize>,
    /// Basalt's residency check (`Db::set_residency`): `check` reads a
    /// record that is not in memory with one `pread` instead of faulting
    /// its pages in one by one; what an embedder with more data than RAM
    /// sets. Default: in-place (no check).
    #[arg(long, default_value = "in-place")]
    basalt_residency: String,
    /// Seed for key order, key choice and values.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    FillRandom,
    ReadRandom,
    Overwrite,
    Mix,
}

impl Workload {
    const ALL: [Workload; 4] = [
        Workload::FillRandom,
        Workload::ReadRandom,
        Workload::Overwrite,
        Workload::Mix,
    ];

    fn name(self) -> &'static str {
        match self {
            Workload::FillRandom => "fillrandom",
            Workload::ReadRandom => "readrandom",
            Workload::Overwrite => "overwrite",
            Workload::Mix => "mix90r10w",
        }
    }
}

/// One workload in one run.
#[derive(Debug, Clone, Copy)]
struct Measured {
    ops_per_sec: f64,
    p99_us: f64,
}

/// Everything one engine produced in one round.
#[derive(Debug)]
struct Run {
    engine: EngineKind,
    workloads: Vec<(Workload, Measured)>,
    rss_delta: Option<sysinfo::Rss>,
    index_bytes: Option<u64>,
    disk_bytes: u64,
    reopen: Duration,
    reopen_without_hints: Duration,
    hints_deleted: usize,
}

/// One element of the `--json` array.
#[derive(Debug, Serialize)]
struct JsonResult {
    engine: &'static str,
    workload: &'static str,
    ops_per_sec: f64,
    p99_us: f64,
    keys: u64,
    value_size: usize,
    key_size: usize,
    threads: usize,
    rounds: usize,
}

/// What every worker thread shares.
struct Setup {
    keys: u64,
    ops: u64,
    threads: usize,
    seed: u64,
    format: KeyFormat,
    values: ValuePool,
    order: Vec<u64>,
}

pub fn run(args: EngineArgs) -> Result<()> {
    ensure!(args.keys > 0, "--keys must be at least 1");
    ensure!(args.threads > 0, "--threads must be at least 1");
    ensure!(args.rounds > 0, "--rounds must be at least 1");
    ensure!(args.value_size > 0, "--value-size must be at least 1");
    ensure!(!args.engines.is_empty(), "--engines is empty");
    let mut engines: Vec<EngineKind> = Vec::new();
    for &e in &args.engines {
        if !engines.contains(&e) {
            engines.push(e);
        }
    }

    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&base).with_context(|| format!("create {}", base.display()))?;
    let cfg = EngineConfig {
        data_bytes: args.keys * (args.key_size + args.value_size) as u64,
        basalt_sync: args.basalt_sync,
        rocksdb_write_buffer: args.rocksdb_write_buffer_mb << 20,
        rocksdb_block_cache: args.rocksdb_block_cache_mb.map(|mb| mb << 20),
        basalt_check_residency: match args.basalt_residency.as_str() {
            "check" => true,
            "in-place" => false,
            other => anyhow::bail!("--basalt-residency {other:?}: check or in-place"),
        },
    };
    let setup = Setup {
        keys: args.keys,
        ops: args.ops.unwrap_or(args.keys),
        threads: args.threads,
        seed: args.seed,
        format: KeyFormat::new(args.key_size, args.keys)?,
        values: ValuePool::new(args.value_size, args.seed ^ 0xa11ce),
        order: permutation(args.keys, args.seed),
    };

    println!(
        "basalt-bench engine: {} keys, key {} B, value {} B, {} ops per read/write workload, \
         {} thread(s), {} round(s), dir {}",
        setup.keys,
        args.key_size,
        args.value_size,
        setup.ops,
        setup.threads,
        args.rounds,
        base.display()
    );
    for &e in &engines {
        println!("  {}", e.describe(&cfg));
    }
    println!("  latency: every op timed with Instant, p99 from a log-linear histogram (~3%)");
    println!();

    let mut runs = Vec::new();
    for round in 0..args.rounds {
        let mut order = engines.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        for &engine in &order {
            eprintln!("round {}/{}: {}", round + 1, args.rounds, engine.name());
            let run = run_engine(engine, &setup, &cfg, &base)?;
            runs.push(run);
        }
    }

    let report = report(&engines, &runs, setup.keys);
    print!("{report}");

    if let Some(path) = &args.json {
        let mut out = Vec::new();
        for &e in &engines {
            for w in Workload::ALL {
                let m = median_measured(&runs, e, w);
                out.push(JsonResult {
                    engine: e.name(),
                    workload: w.name(),
                    ops_per_sec: m.ops_per_sec.round(),
                    p99_us: (m.p99_us * 100.0).round() / 100.0,
                    keys: args.keys,
                    value_size: args.value_size,
                    key_size: args.key_size,
                    threads: args.threads,
                    rounds: args.rounds,
                });
            }
        }
        let text = serde_json::to_string_pretty(&out)?;
        std::fs::write(path, text + "\n").with_context(|| format!("write {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn run_engine(
    kind: EngineKind,
    setup: &Setup,
    cfg: &EngineConfig,
    base: &std::path::Path,
) -> Result<Run> {
    let tmp = tempfile::Builder::new()
        .prefix(&format!("basalt-bench-{}-", kind.name()))
        .tempdir_in(base)
        .with_context(|| format!("create a temp dir in {}", base.display()))?;
    let dir = tmp.path();

    sysinfo::release_free_memory();
    let rss_before = sysinfo::rss();
    let db = kind.open(dir, cfg)?;
    let mut workloads = Vec::new();

    let fill = fill_random(&*db, setup)?;
    progress(Workload::FillRandom, fill);
    workloads.push((Workload::FillRandom, fill));
    let rss_delta = match (rss_before, sysinfo::rss()) {
        (Some(a), Some(b)) => Some(sysinfo::Rss {
            total: b.total.saturating_sub(a.total),
            anon: b.anon.saturating_sub(a.anon),
        }),
        _ => None,
    };
    let index_bytes = db.index_bytes();
    let disk_bytes = sysinfo::dir_bytes(dir)?;

    for w in [Workload::ReadRandom, Workload::Overwrite, Workload::Mix] {
        let m = random_ops(&*db, setup, w)?;
        progress(w, m);
        workloads.push((w, m));
    }
    db.close()?;

    let t = Instant::now();
    let db = kind.open(dir, cfg)?;
    let reopen = t.elapsed();
    check_some_keys(&*db, setup)?;
    db.close()?;

    let hints_deleted = sysinfo::remove_files_with_extension(dir, "hint")?;
    let t = Instant::now();
    let db = kind.open(dir, cfg)?;
    let reopen_without_hints = t.elapsed();
    check_some_keys(&*db, setup)?;
    db.close()?;
    eprintln!(
        "  reopen {:.1} ms; after deleting {} hint file(s) {:.1} ms",
        ms(reopen),
        hints_deleted,
        ms(reopen_without_hints)
    );
    tmp.close().context("remove the run's temp dir")?;

    Ok(Run {
        engine: kind,
        workloads,
        rss_delta,
        index_bytes,
        disk_bytes,
        reopen,
        reopen_without_hints,
        hints_deleted,
    })
}

fn progress(w: Workload, m: Measured) {
    eprintln!(
        "  {:<11} {:>12} ops/s  p99 {:>8.1} us",
        w.name(),
        group(m.ops_per_sec),
        m.p99_us
    );
}

/// Runs `work(thread, histogram)` on `setup.threads` threads at once and
/// turns `total_ops` over the wall time into ops/s.
fn parallel<F>(setup: &Setup, total_ops: u64, work: F) -> Result<Measured>
where
    F: Fn(usize, &mut Histogram) -> Result<()> + Sync,
{
    let start = Instant::now();
    let hists: Vec<Result<Histogram>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..setup.threads)
            .map(|t| {
                let work = &work;
                s.spawn(move || {
                    let mut h = Histogram::default();
                    work(t, &mut h).map(|()| h)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("benchmark thread panicked"))
            .collect()
    });
    let elapsed = start.elapsed();
    let mut all = Histogram::default();
    for h in hists {
        all.merge(&h?);
    }
    debug_assert_eq!(all.count(), total_ops);
    Ok(Measured {
        ops_per_sec: total_ops as f64 / elapsed.as_secs_f64(),
        p99_us: all.quantile_ns(0.99) as f64 / 1000.0,
    })
}

/// The share of `total` that thread `t` of `threads` does.
fn share(total: u64, threads: usize, t: usize) -> std::ops::Range<u64> {
    let n = threads as u64;
    let t = t as u64;
    let per = total / n;
    let extra = total % n;
    let start = t * per + t.min(extra);
    let len = per + u64::from(t < extra);
    start..start + len
}

fn fill_random(db: &dyn Engine, setup: &Setup) -> Result<Measured> {
    parallel(setup, setup.keys, |t, hist| {
        let range = share(setup.keys, setup.threads, t);
        let mut rng = SplitMix64::new(setup.seed ^ 0xf111 ^ ((t as u64) << 32));
        let mut key = setup.format.buffer();
        let mut last = Instant::now();
        for &i in &setup.order[range.start as usize..range.end as usize] {
            setup.format.write(i, &mut key);
            db.put(&key, setup.values.pick(&mut rng))?;
            let now = Instant::now();
            hist.record((now - last).as_nanos() as u64);
            last = now;
        }
        Ok(())
    })
}

fn random_ops(db: &dyn Engine, setup: &Setup, w: Workload) -> Result<Measured> {
    let write_percent = match w {
        Workload::ReadRandom => 0,
        Workload::Overwrite => 100,
        Workload::Mix => 10,
        Workload::FillRandom => unreachable!("fillrandom has its own loop"),
    };
    let phase = w as u64 + 1;
    parallel(setup, setup.ops, |t, hist| {
        let range = share(setup.ops, setup.threads, t);
        let mut rng = SplitMix64::new(setup.seed ^ (phase << 56) ^ ((t as u64) << 32));
        let mut key = setup.format.buffer();
        let mut misses = 0u64;
        let mut last = Instant::now();
        for _ in range {
            setup.format.write(rng.below(setup.keys), &mut key);
            let write =
                write_percent == 100 || (write_percent > 0 && rng.below(100) < write_percent);
            if write {
                db.put(&key, setup.values.pick(&mut rng))?;
            } else {
                match db.get(&key)? {
                    Some(len) if len == setup.values.value_size() => {}
                    Some(len) => bail!(
                        "{}: {} returned {len} bytes for {}, expected {}",
                        w.name(),
                        db.name(),
                        String::from_utf8_lossy(&key),
                        setup.values.value_size()
                    ),
                    None => misses += 1,
                }
            }
            let now = Instant::now();
            hist.record((now - last).as_nanos() as u64);
            last = now;
        }
        ensure!(
            misses == 0,
            "{}: {} lost {misses} keys that fillrandom wrote",
            w.name(),
            db.name()
        );
        Ok(())
    })
}

/// After a reopen, a sample of keys must still be there.
fn check_some_keys(db: &dyn Engine, setup: &Setup) -> Result<()> {
    let mut rng = SplitMix64::new(setup.seed ^ 0xc4ec);
    let mut key = setup.format.buffer();
    for _ in 0..1000.min(setup.keys) {
        setup.format.write(rng.below(setup.keys), &mut key);
        ensure!(
            db.get(&key)?.is_some(),
            "{} lost key {} across a reopen",
            db.name(),
            String::from_utf8_lossy(&key)
        );
    }
    Ok(())
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn runs_of(runs: &[Run], e: EngineKind) -> impl Iterator<Item = &Run> {
    runs.iter().filter(move |r| r.engine == e)
}

fn median_measured(runs: &[Run], e: EngineKind, w: Workload) -> Measured {
    let all: Vec<Measured> = runs_of(runs, e)
        .flat_map(|r| r.workloads.iter().filter(|(x, _)| *x == w).map(|(_, m)| *m))
        .collect();
    Measured {
        ops_per_sec: median(all.iter().map(|m| m.ops_per_sec).collect()),
        p99_us: median(all.iter().map(|m| m.p99_us).collect()),
    }
}

fn median_of(runs: &[Run], e: EngineKind, f: impl Fn(&Run) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = runs_of(runs, e).filter_map(f).collect();
    (!v.is_empty()).then(|| median(v))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// 1234567.8 -> "1,234,568".
pub(crate) fn group(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn report(engines: &[EngineKind], runs: &[Run], keys: u64) -> String {
    let rounds = runs_of(runs, engines[0]).count();
    let mut s = String::new();
    let _ = writeln!(s, "median of {rounds} round(s)");
    let _ = write!(s, "{:<11}", "workload");
    for e in engines {
        let _ = write!(s, " {:>14} {:>9}", format!("{} ops/s", e.name()), "p99 us");
    }
    let ratio = engines.contains(&EngineKind::Basalt) && engines.contains(&EngineKind::Rocksdb);
    if ratio {
        let _ = write!(s, " {:>15}", "basalt/rocksdb");
    }
    s.push('\n');
    for w in Workload::ALL {
        let _ = write!(s, "{:<11}", w.name());
        for &e in engines {
            let m = median_measured(runs, e, w);
            let _ = write!(s, " {:>14} {:>9.1}", group(m.ops_per_sec), m.p99_us);
        }
        if ratio {
            let b = median_measured(runs, EngineKind::Basalt, w).ops_per_sec;
            let r = median_measured(runs, EngineKind::Rocksdb, w).ops_per_sec;
            let _ = write!(s, " {:>14.2}x", b / r);
        }
        s.push('\n');
    }

    let _ = writeln!(s);
    for &e in engines {
        let per_key = |_: &Run, x: u64| x as f64 / keys as f64;
        let _ = writeln!(s, "{}:", e.name());
        if let Some(v) = median_of(runs, e, |r| r.rss_delta.map(|d| per_key(r, d.total))) {
            let anon = median_of(runs, e, |r| r.rss_delta.map(|d| per_key(r, d.anon)));
            let _ = writeln!(
                s,
                "  RSS after fillrandom      {:>8.1} B/key (VmRSS delta; anonymous only {:.1} B/key)",
                v,
                anon.unwrap_or(f64::NAN)
            );
        }
        if let Some(v) = median_of(runs, e, |r| r.index_bytes.map(|b| per_key(r, b))) {
            let _ = writeln!(s, "  index memory (own figure) {v:>8.1} B/key");
        }
        if let Some(v) = median_of(runs, e, |r| Some(per_key(r, r.disk_bytes))) {
            let _ = writeln!(s, "  disk after fillrandom     {v:>8.1} B/key");
        }
        if let Some(v) = median_of(runs, e, |r| Some(ms(r.reopen))) {
            let _ = writeln!(s, "  reopen                    {v:>8.1} ms");
        }
        let hints = runs_of(runs, e).map(|r| r.hints_deleted).max().unwrap_or(0);
        if hints > 0 {
            if let Some(v) = median_of(runs, e, |r| Some(ms(r.reopen_without_hints))) {
                let _ = writeln!(
                    s,
                    "  reopen without hint files {v:>8.1} ms ({hints} *.hint deleted)"
                );
            }
        }
    }
    s
}
