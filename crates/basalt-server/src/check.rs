//! `basalt check --dir D [--repair] [--json]`: the engine's offline check
//! (and repair) run over every database directory of a server's data
//! directory, printed for a person (a table per database, the damage list)
//! or as JSON.
//!
//! `D` is either one database's directory (it holds a `BASALT` file) or a
//! server's `--dir`: then every directory DBMAP names and every numbered
//! directory holding a database is checked. Exit status: 0 when every
//! directory opens without losing anything (notes such as a torn tail are
//! printed but fine), 1 when damage was found (with `--repair`: found and
//! repaired, the dropped records listed), 2 on usage or I/O errors,
//! including a directory locked by a running server.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use basalt_engine::{CheckOptions, CheckReport, Damage, RepairReport, Severity};

use crate::config::CheckArgs;

/// Directories smaller than this get no progress bar.
const PROGRESS_MIN_BYTES: u64 = 64 << 20;

/// Runs the subcommand and returns the process exit status.
pub fn run(args: &CheckArgs) -> ExitCode {
    match run_inner(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("basalt check: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The database directories under `dir`, in database order.
fn database_dirs(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if !dir.is_dir() {
        anyhow::bail!("{} is not a directory", dir.display());
    }
    if dir.join("BASALT").exists() {
        return Ok(vec![dir.to_path_buf()]);
    }
    // Names recorded by SWAPDB, then numbered directories.
    let mut names: Vec<String> = Vec::new();
    if let Ok(text) = std::fs::read_to_string(dir.join("DBMAP")) {
        for line in text.lines() {
            let mut it = line.split_whitespace();
            if let (Some(slot), Some(name)) = (it.next(), it.next()) {
                if slot.parse::<usize>().is_ok() && !names.iter().any(|n| n == name) {
                    names.push(name.to_string());
                }
            }
        }
    }
    let mut numbered: Vec<(usize, String)> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| n.parse::<usize>().ok().map(|i| (i, n)))
        .collect();
    numbered.sort();
    for (_, n) in numbered {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    let dirs: Vec<PathBuf> = names
        .into_iter()
        .map(|n| dir.join(n))
        .filter(|d| d.join("BASALT").exists())
        .collect();
    if dirs.is_empty() {
        anyhow::bail!(
            "no Basalt database in {} (no BASALT file in it or in its database directories)",
            dir.display()
        );
    }
    Ok(dirs)
}

fn options(dir: &Path) -> CheckOptions {
    let size = dir_size(dir);
    if !std::io::stderr().is_terminal() || size < PROGRESS_MIN_BYTES {
        return CheckOptions::default();
    }
    let bar = indicatif::ProgressBar::new(size);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {binary_bytes}/{binary_total_bytes} ({eta})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_message(dir.display().to_string());
    CheckOptions::default().progress(move |done, total| {
        bar.set_length(total);
        bar.set_position(done);
        if done >= total {
            bar.finish_and_clear();
        }
    })
}

fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

/// `Ok(true)`: nothing of severity error found anywhere.
fn run_inner(args: &CheckArgs) -> anyhow::Result<bool> {
    let dirs = database_dirs(&args.dir)?;
    let mut results = Vec::new();
    for d in &dirs {
        let opts = options(d);
        let r = if args.repair {
            let rep = basalt_engine::repair(d, &opts)?;
            (rep.before.clone(), Some(rep))
        } else {
            (basalt_engine::check(d, &opts)?, None)
        };
        results.push(r);
    }
    // The FUNCTION libraries (`<dir>/FUNCTIONS`), checksummed as a whole.
    let functions = crate::script::check_functions(&args.dir);
    let functions_ok = !matches!(functions, Some(Err(_)));
    let clean = results.iter().all(|(c, _)| c.is_clean()) && functions_ok;
    let mut out = std::io::stdout().lock();
    if args.json {
        let v = serde_json::json!({
            "dir": args.dir.display().to_string(),
            "clean": clean,
            "databases": results.iter().map(|(c, r)| json_report(c, r.as_ref())).collect::<Vec<_>>(),
            "functions": match &functions {
                None => serde_json::Value::Null,
                Some(Ok(n)) => serde_json::json!({"libraries": n}),
                Some(Err(e)) => serde_json::json!({"error": e}),
            },
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        for (c, r) in &results {
            print_report(&mut out, c, r.as_ref())?;
        }
        match &functions {
            Some(Ok(n)) => writeln!(
                out,
                "FUNCTIONS: {n} librar{}",
                if *n == 1 { "y" } else { "ies" }
            )?,
            Some(Err(e)) => writeln!(out, "FUNCTIONS: ERROR {e}")?,
            None => {}
        }
        let db_errors: usize = results.iter().map(|(c, _)| c.errors().count()).sum();
        let notes: usize = results.iter().map(|(c, _)| c.damage.len()).sum::<usize>() - db_errors;
        // A damaged FUNCTIONS file is an error that --repair does not
        // mend: restore it with FUNCTION RESTORE from a dump.
        let errors = db_errors + usize::from(!functions_ok);
        let status = match (errors, args.repair) {
            (0, _) => "clean",
            (_, false) => "DAMAGED (run with --repair to keep what is readable)",
            (_, true) => "DAMAGED, repaired",
        };
        writeln!(
            out,
            "{} database(s), {} error(s), {} note(s): {status}",
            results.len(),
            errors,
            notes
        )?;
    }
    Ok(clean)
}

fn rel<'a>(base: &Path, p: &'a Path) -> std::borrow::Cow<'a, str> {
    match p.strip_prefix(base) {
        Ok(r) => std::borrow::Cow::Owned(r.display().to_string()),
        Err(_) => p.to_string_lossy(),
    }
}

fn key_text(key: &Option<Vec<u8>>) -> String {
    match key {
        Some(k) => format!(" key \"{}\"", k.escape_ascii()),
        None => String::new(),
    }
}

fn damage_line(base: &Path, d: &Damage) -> String {
    let sev = match d.kind.severity() {
        Severity::Error => "ERROR",
        Severity::Note => "note ",
    };
    format!(
        "  {sev} {} offset {} len {}: {}: {}{}",
        rel(base, &d.path),
        d.offset,
        d.len,
        d.kind.name(),
        d.detail,
        key_text(&d.key)
    )
}

fn print_report(
    out: &mut impl Write,
    c: &CheckReport,
    repair: Option<&RepairReport>,
) -> std::io::Result<()> {
    writeln!(out, "database {} ({} shards)", c.dir.display(), c.shards)?;
    writeln!(
        out,
        "  {:<28} {:>10} {:>14} {:>14}  hint",
        "file", "records", "live bytes", "dead bytes"
    )?;
    for f in &c.files {
        writeln!(
            out,
            "  {:<28} {:>10} {:>14} {:>14}  {}",
            rel(&c.dir, &f.path),
            f.records,
            f.live_bytes,
            f.dead_bytes,
            if f.hint_ok { "ok" } else { "-" }
        )?;
    }
    let live: u64 = c.files.iter().map(|f| f.live_bytes).sum();
    let dead: u64 = c.files.iter().map(|f| f.dead_bytes).sum();
    let records: u64 = c.files.iter().map(|f| f.records).sum();
    writeln!(
        out,
        "  {:<28} {:>10} {:>14} {:>14}",
        "total", records, live, dead
    )?;
    if c.damage.is_empty() {
        writeln!(out, "  no damage")?;
    } else {
        writeln!(out, "  damage:")?;
        for d in &c.damage {
            writeln!(out, "{}", damage_line(&c.dir, d))?;
        }
    }
    if let Some(r) = repair {
        if r.dropped.is_empty() {
            writeln!(out, "  repair dropped nothing")?;
        }
        for d in &r.dropped {
            writeln!(
                out,
                "  dropped {} offset {} len {}{}: {}",
                rel(&c.dir, &d.path),
                d.offset,
                d.len,
                key_text(&d.key),
                d.reason
            )?;
        }
        for p in &r.rewritten {
            writeln!(out, "  rewrote {}", rel(&c.dir, p))?;
        }
        for p in &r.removed {
            writeln!(out, "  removed {}", rel(&c.dir, p))?;
        }
        for p in &r.hints_written {
            writeln!(out, "  wrote hint {}", rel(&c.dir, p))?;
        }
    }
    Ok(())
}

fn json_key(key: &Option<Vec<u8>>) -> serde_json::Value {
    match key {
        Some(k) => serde_json::Value::String(k.escape_ascii().to_string()),
        None => serde_json::Value::Null,
    }
}

fn json_report(c: &CheckReport, repair: Option<&RepairReport>) -> serde_json::Value {
    let mut v = serde_json::json!({
        "dir": c.dir.display().to_string(),
        "shards": c.shards,
        "clean": c.is_clean(),
        "bytes_read": c.bytes,
        "files": c.files.iter().map(|f| serde_json::json!({
            "path": rel(&c.dir, &f.path),
            "shard": f.shard,
            "id": f.id,
            "len": f.len,
            "records": f.records,
            "live_bytes": f.live_bytes,
            "dead_bytes": f.dead_bytes,
            "hint_ok": f.hint_ok,
        })).collect::<Vec<_>>(),
        "damage": c.damage.iter().map(|d| serde_json::json!({
            "path": rel(&c.dir, &d.path),
            "offset": d.offset,
            "len": d.len,
            "kind": d.kind.name(),
            "severity": if d.kind.severity() == Severity::Error { "error" } else { "note" },
            "detail": d.detail,
            "key": json_key(&d.key),
        })).collect::<Vec<_>>(),
    });
    if let Some(r) = repair {
        v["dropped"] = r
            .dropped
            .iter()
            .map(|d| {
                serde_json::json!({
                    "path": rel(&c.dir, &d.path),
                    "offset": d.offset,
                    "len": d.len,
                    "key": json_key(&d.key),
                    "reason": d.reason,
                })
            })
            .collect();
    }
    v
}
