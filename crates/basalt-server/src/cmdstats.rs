//! Per-command call counters, run time and latency histograms (INFO
//! `commandstats` and `latencystats`, LATENCY HISTOGRAM, the
//! `basalt_command*` metrics of `GET /metrics`), and the two logs fed by
//! the same measurement: the slow log (SLOWLOG) and the latency monitor
//! (LATENCY).
//!
//! The one idea a reader needs: **each thread counts into its own stripe.**
//! Every command adds to four counters (calls, nanoseconds, failed,
//! rejected) and one histogram slot in a table indexed by the command's
//! position in the command table; a container's subcommands (`config|get`)
//! have rows of their own after those, where dispatch counts them, as
//! Redis counts a subcommand and not its container
//! (`commands::introspection::route`). The table is repeated [`STRIPES`] times;
//! a thread picks its stripe once (round robin) and keeps it, so two
//! workers running GET at the same time touch different cache lines, and
//! stripes are padded apart so their edges never share one. A command
//! costs three relaxed atomic adds (four when it fails) on lines its thread
//! owns; reading sums the stripes. The histograms are Redis's own layout
//! (`crate::hdr`: 3,072 slots, 24 KiB), so one is allocated for a command
//! and a stripe on the first call that stripe counts, as Redis allocates
//! a command's on its first call: 24 KiB per command and thread that ran
//! it, not for all 400 rows of every stripe. The time comes from one clock read per
//! command: the connection reads the clock after each command and charges
//! it the time since the previous reading (the batch start, or the previous
//! command's end), see `Conn::tick`.
//!
//! The logs cost one relaxed load and a compare per command while no
//! command is slower than the lower of their thresholds ([`CommandStats::is_slow`]);
//! only a slow command takes a lock ([`CommandStats::observe_slow`]).

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::hdr;

/// Copies of the counter table; threads beyond this many share stripes
/// (still correct, the adds are atomic).
pub const STRIPES: usize = 16;

/// Counters of one command in one stripe (32 bytes: two per cache line).
#[derive(Debug, Default)]
#[repr(C, align(32))]
struct Counters {
    calls: AtomicU64,
    nanos: AtomicU64,
    failed: AtomicU64,
    rejected: AtomicU64,
}

/// Padding between stripes, in `Counters` (128 bytes: two cache lines, so
/// the adjacent-line prefetcher does not pair two stripes either).
const PAD: usize = 4;

/// LATENCY HISTOGRAM's buckets: powers of two of nanoseconds from 2^10
/// (about 1 µs) to 2^30 (about 1.07 s), where Redis reads its per-command
/// HDR histograms with a log-2 iterator from 1024 ns. Redis caps a sample
/// at 1 s, so 2^30 is the last.
const BUCKETS: usize = 21;
/// The first bucket's power of two.
const FIRST_POW: u32 = 10;

/// Read lookups of keys that found the key and that did not (INFO
/// `keyspace_hits` / `keyspace_misses`), counted where Redis's
/// `lookupKeyRead` counts them: the commands' reads that also publish
/// `keymiss` when the key is absent (`Ctx::keymiss`, `Ctx::keyhit`). A
/// GET counts once, so each thread adds to its own stripe (a line of its
/// own) and INFO sums them.
pub struct Lookups {
    stripes: Box<[LookupStripe]>,
}

#[derive(Default)]
#[repr(align(128))]
struct LookupStripe {
    hits: AtomicU64,
    misses: AtomicU64,
}

impl Default for Lookups {
    fn default() -> Self {
        Lookups {
            stripes: (0..STRIPES).map(|_| LookupStripe::default()).collect(),
        }
    }
}

impl std::fmt::Debug for Lookups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (hits, misses) = self.totals();
        f.debug_struct("Lookups")
            .field("hits", &hits)
            .field("misses", &misses)
            .finish()
    }
}

impl Lookups {
    /// Counts one read lookup of a key that was found (`true`) or not.
    #[inline]
    pub fn count(&self, found: bool) {
        let s = &self.stripes[my_stripe()];
        if found {
            s.hits.fetch_add(1, Ordering::Relaxed);
        } else {
            s.misses.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// (hits, misses) since the start or the last reset.
    pub fn totals(&self) -> (u64, u64) {
        self.stripes.iter().fold((0, 0), |(h, m), s| {
            (
                h + s.hits.load(Ordering::Relaxed),
                m + s.misses.load(Ordering::Relaxed),
            )
        })
    }

    /// Forgets every count (CONFIG RESETSTAT).
    pub fn reset(&self) {
        for s in self.stripes.iter() {
            s.hits.store(0, Ordering::Relaxed);
            s.misses.store(0, Ordering::Relaxed);
        }
    }
}

/// Distinct error codes [`ErrorStats`] counts one by one; replies with a
/// code first seen after that count only in the total. Redis 7.0 keeps
/// every code it meets, so a script returning `{err = <random>}` grows its
/// table without bound; a bound keeps INFO and memory small. The codes
/// Basalt's own replies use are far fewer than this, so only invented
/// codes can be left out.
pub const ERROR_CODES_MAX: usize = 1024;

/// Error replies sent to clients, by code (INFO `errorstats`) and in all
/// (`total_error_replies`), as Redis counts them: every error a command
/// replied, whether at the top level, inside EXEC's reply or to a script's
/// `redis.call`/`redis.pcall`, and every refusal (unknown command, wrong
/// arity, NOAUTH, OOM, EXECABORT). Errors are rare on the hot path, so a
/// lock guards the table.
#[derive(Debug, Default)]
pub struct ErrorStats {
    total: AtomicU64,
    codes: Mutex<std::collections::BTreeMap<Vec<u8>, u64>>,
}

/// The code of an error reply (`-WRONGTYPE Operation...` -> `WRONGTYPE`):
/// what follows the `-` up to the first space within the first 32 bytes;
/// `ERR` when there is none (Redis's rule).
pub fn error_code(reply: &[u8]) -> &[u8] {
    let Some(rest) = reply.strip_prefix(b"-") else {
        return b"ERR";
    };
    match reply[..reply.len().min(32)].iter().position(|&b| b == b' ') {
        Some(space) => &rest[..space - 1],
        None => b"ERR",
    }
}

impl ErrorStats {
    /// Counts the error reply that starts `reply` (`-CODE text\r\n...`).
    pub fn count(&self, reply: &[u8]) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let code = error_code(reply);
        let mut codes = self.codes.lock();
        if let Some(n) = codes.get_mut(code) {
            *n += 1;
        } else if codes.len() < ERROR_CODES_MAX {
            codes.insert(code.to_vec(), 1);
        }
    }

    /// Error replies counted since the start or the last reset.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Each code and its count, in byte order (as Redis lists them).
    pub fn codes(&self) -> Vec<(Vec<u8>, u64)> {
        self.codes
            .lock()
            .iter()
            .map(|(c, n)| (c.clone(), *n))
            .collect()
    }

    /// Forgets every count (CONFIG RESETSTAT).
    pub fn reset(&self) {
        self.total.store(0, Ordering::Relaxed);
        self.codes.lock().clear();
    }
}

/// Per-command counters for the whole server, and the slow log and latency
/// monitor they feed.
#[derive(Debug)]
pub struct CommandStats {
    cells: Box<[Counters]>,
    stride: usize,
    /// Counter rows: the commands', then the subcommands'.
    rows: usize,
    /// `STRIPES * rows` latency histograms (`crate::hdr` slots), each
    /// allocated by the first call its stripe counts for its row.
    hist: Box<[OnceLock<Box<[AtomicU64]>>]>,
    /// `latency-tracking`: whether calls are recorded in `hist`.
    tracking: AtomicBool,
    /// `latency-tracking-info-percentiles`.
    percentiles: Mutex<Vec<f64>>,
    /// Nanoseconds from which a command is looked at by [`Self::observe_slow`]:
    /// the lower of the two logs' thresholds; `u64::MAX` = both are off.
    watch_ns: AtomicU64,
    /// `slowlog-log-slower-than` in µs; negative = off.
    slowlog_us: AtomicI64,
    /// `slowlog-max-len`.
    slowlog_max: AtomicU64,
    /// `latency-monitor-threshold` in ms; 0 = off.
    latency_ms: AtomicU64,
    slowlog: Mutex<SlowLog>,
    latency: Mutex<Vec<(&'static str, Series)>>,
}

/// One command's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Times the handler ran.
    pub calls: u64,
    /// Nanoseconds spent in it.
    pub nanos: u64,
    /// Runs that replied with an error.
    pub failed: u64,
    /// Refused before running (wrong arity, not allowed in this context).
    pub rejected: u64,
}

thread_local! {
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

#[inline]
fn my_stripe() -> usize {
    STRIPE.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
        s.set(v);
        v
    })
}

/// LATENCY HISTOGRAM's bucket of a recorded value `v` ([`hdr::sample`]):
/// Redis reports bucket `2^k` with the samples up to that value's highest
/// HDR equivalent, `2^k + 2^(k-7) - 1` (two significant digits), so an
/// HDR slot never straddles two buckets.
#[inline]
fn bucket(v: u64) -> usize {
    // Smallest k with v < 2^k, at least FIRST_POW.
    let k = (64 - (v | ((1 << FIRST_POW) - 1)).leading_zeros()).max(FIRST_POW);
    let k = if k > FIRST_POW && v < (1u64 << (k - 1)) + (1u64 << (k - 8)) {
        k - 1
    } else {
        k
    };
    (k - FIRST_POW) as usize
}

/// The value Redis prints for bucket `b`: its highest equivalent value in
/// µs (`1, 2, 4, 8, 16, 33, 66, 132, ...`).
pub fn bucket_label_us(b: usize) -> u64 {
    let k = b as u32 + FIRST_POW;
    ((1u64 << k) + (1u64 << (k - 7)) - 1) / 1000
}

impl CommandStats {
    /// Counters for `commands` commands (the size of the command table)
    /// and, after them, every subcommand Basalt runs
    /// (`commands::introspection::subcommands`), with Redis's default
    /// thresholds (slow log 10 ms, 128 entries; latency monitor off).
    pub fn new(commands: usize) -> CommandStats {
        let rows = commands + crate::commands::introspection::subcommand_count();
        let stride = rows.next_multiple_of(2) + PAD;
        let cells = (0..STRIPES * stride + PAD)
            .map(|_| Counters::default())
            .collect();
        let hist = (0..STRIPES * rows).map(|_| OnceLock::new()).collect();
        let st = CommandStats {
            cells,
            stride,
            rows,
            hist,
            tracking: AtomicBool::new(true),
            percentiles: Mutex::new(vec![50.0, 99.0, 99.9]),
            watch_ns: AtomicU64::new(u64::MAX),
            slowlog_us: AtomicI64::new(10_000),
            slowlog_max: AtomicU64::new(128),
            latency_ms: AtomicU64::new(0),
            slowlog: Mutex::new(SlowLog::default()),
            latency: Mutex::new(Vec::new()),
        };
        st.update_watch();
        st
    }

    #[inline]
    fn mine(&self, idx: usize) -> &Counters {
        &self.cells[PAD + my_stripe() * self.stride + idx]
    }

    /// Counts one run of row `idx` (a command's position in the table, or
    /// a subcommand's row) that took `nanos`.
    #[inline]
    pub fn record(&self, idx: usize, nanos: u64, failed: bool) {
        let stripe = my_stripe();
        let c = &self.cells[PAD + stripe * self.stride + idx];
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.nanos.fetch_add(nanos, Ordering::Relaxed);
        if failed {
            c.failed.fetch_add(1, Ordering::Relaxed);
        }
        if idx < self.rows && self.tracking.load(Ordering::Relaxed) {
            let h = self.hist[stripe * self.rows + idx]
                .get_or_init(|| (0..hdr::LEN).map(|_| AtomicU64::new(0)).collect());
            h[hdr::index(hdr::sample(nanos))].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a call of command `idx` refused before its handler ran.
    #[inline]
    pub fn reject(&self, idx: usize) {
        self.mine(idx).rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// The totals of command `idx` across stripes.
    pub fn totals(&self, idx: usize) -> Totals {
        let mut t = Totals::default();
        for s in 0..STRIPES {
            let c = &self.cells[PAD + s * self.stride + idx];
            t.calls += c.calls.load(Ordering::Relaxed);
            t.nanos += c.nanos.load(Ordering::Relaxed);
            t.failed += c.failed.load(Ordering::Relaxed);
            t.rejected += c.rejected.load(Ordering::Relaxed);
        }
        t
    }

    /// Command `idx`'s latency histogram summed across stripes, with its
    /// total; `None` if no call was recorded since the last reset.
    fn latencies(&self, idx: usize) -> Option<(Vec<u64>, u64)> {
        if idx >= self.rows {
            return None;
        }
        let mut counts = vec![0u64; hdr::LEN];
        let mut any = false;
        for s in 0..STRIPES {
            if let Some(h) = self.hist[s * self.rows + idx].get() {
                any = true;
                for (c, n) in counts.iter_mut().zip(h.iter()) {
                    *c += n.load(Ordering::Relaxed);
                }
            }
        }
        let total = counts.iter().sum();
        (any && total > 0).then_some((counts, total))
    }

    /// Command `idx`'s run-time histogram across stripes in LATENCY
    /// HISTOGRAM's buckets: the count of each ([`bucket_label_us`] names
    /// them), not cumulative.
    pub fn histogram(&self, idx: usize) -> [u64; BUCKETS] {
        let mut out = [0u64; BUCKETS];
        if let Some((counts, _)) = self.latencies(idx) {
            for (i, n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
                out[bucket(hdr::lowest(i))] += n;
            }
        }
        out
    }

    /// INFO `latencystats`' lines: each command and subcommand with calls
    /// recorded, in [`Self::snapshot`]'s order, with its value in µs at
    /// each configured percentile (`latency_percentiles_usec_get:p50=1.003,
    /// ...`); nothing while `latency-tracking` is off, as in Redis.
    pub fn latency_percentiles(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        if !self.tracking.load(Ordering::Relaxed) {
            return out;
        }
        let percentiles = self.percentiles.lock().clone();
        for (name, row) in self.rows_by_name() {
            let Some((counts, total)) = self.latencies(row) else {
                continue;
            };
            let _ = write!(out, "latency_percentiles_usec_{name}:");
            for (j, p) in percentiles.iter().enumerate() {
                let v = hdr::value_at_percentile(&counts, total, *p);
                let sep = if j + 1 < percentiles.len() { "," } else { "" };
                let _ = write!(
                    out,
                    "p{}={:.3}{sep}",
                    hdr::format_percentile(*p),
                    v as f64 / 1000.0
                );
            }
            out.push_str("\r\n");
        }
        out
    }

    /// Every command and subcommand row with its name (`config|get` for a
    /// subcommand, as INFO names it), in command-table order, each
    /// container's subcommands after it.
    fn rows_by_name(&self) -> impl Iterator<Item = (&'static str, usize)> + '_ {
        use crate::commands::introspection::subcommands;
        crate::commands::all()
            .enumerate()
            .flat_map(|(i, c)| {
                std::iter::once((c.name, i)).chain(subcommands(i).iter().map(|s| (s.full, s.row)))
            })
            .filter(|(_, row)| *row < self.rows)
    }

    /// Every command and subcommand with anything counted, in
    /// command-table order, each container's subcommands after it, with
    /// its name (`config|get` for a subcommand, as INFO commandstats
    /// names it).
    pub fn snapshot(&self) -> Vec<(&'static str, Totals)> {
        self.rows_by_name()
            .map(|(name, row)| (name, self.totals(row)))
            .filter(|(_, t)| *t != Totals::default())
            .collect()
    }

    /// Clears every counter and histogram (CONFIG RESETSTAT).
    pub fn reset(&self) {
        for c in self.cells.iter() {
            c.calls.store(0, Ordering::Relaxed);
            c.nanos.store(0, Ordering::Relaxed);
            c.failed.store(0, Ordering::Relaxed);
            c.rejected.store(0, Ordering::Relaxed);
        }
        for h in self.hist.iter().filter_map(OnceLock::get) {
            for n in h.iter() {
                n.store(0, Ordering::Relaxed);
            }
        }
    }

    // ------------------------------------------- slow log, latency monitor

    /// Whether a run of `nanos` must be shown to [`Self::observe_slow`]:
    /// one relaxed load, on the hot path after every command.
    #[inline]
    pub fn is_slow(&self, nanos: u64) -> bool {
        nanos >= self.watch_ns.load(Ordering::Relaxed)
    }

    fn update_watch(&self) {
        let slow = match self.slowlog_us.load(Ordering::Relaxed) {
            us if us < 0 => u64::MAX,
            us => (us as u64).saturating_mul(1000),
        };
        let lat = match self.latency_ms.load(Ordering::Relaxed) {
            0 => u64::MAX,
            ms => ms.saturating_mul(1_000_000),
        };
        self.watch_ns.store(slow.min(lat), Ordering::Relaxed);
    }

    /// Logs a run that [`Self::is_slow`] picked: a slow-log entry if it
    /// reached `slowlog-log-slower-than` (unless the command is flagged
    /// `skip_slowlog`), and a `command` / `fast-command` latency sample if
    /// it reached `latency-monitor-threshold`, as Redis's `call()` does.
    pub fn observe_slow<'a>(
        &self,
        cmd: &crate::commands::CommandDef,
        args: impl ExactSizeIterator<Item = &'a [u8]>,
        client: &crate::state::ClientInfo,
        nanos: u64,
    ) {
        use crate::commands::flags::{FAST, SKIP_SLOWLOG};
        let us = nanos / 1000;
        let lat_ms = self.latency_ms.load(Ordering::Relaxed);
        if lat_ms > 0 && us / 1000 >= lat_ms {
            let event = if cmd.flags & FAST != 0 {
                "fast-command"
            } else {
                "command"
            };
            self.add_latency_sample(event, us / 1000);
        }
        let th = self.slowlog_us.load(Ordering::Relaxed);
        if th < 0 || us < th as u64 || cmd.flags & SKIP_SLOWLOG != 0 {
            return;
        }
        let max = self.slowlog_max.load(Ordering::Relaxed) as usize;
        let entry = SlowEntry {
            id: 0,
            time: crate::state::now_ms() / 1000,
            micros: us,
            argv: slowlog_argv(cmd.name, args),
            peer: client.addr.to_string(),
            name: client.name.lock().clone(),
        };
        let mut log = self.slowlog.lock();
        let entry = SlowEntry {
            id: log.next_id,
            ..entry
        };
        log.next_id += 1;
        log.entries.push_front(entry);
        log.entries.truncate(max);
    }

    /// Adds a sample of `ms` to latency event `event` if the latency
    /// monitor is on and `ms` reaches its threshold (Redis's
    /// `latencyAddSampleIfNeeded`).
    pub fn latency_sample_if_needed(&self, event: &'static str, ms: u64) {
        let th = self.latency_ms.load(Ordering::Relaxed);
        if th > 0 && ms >= th {
            self.add_latency_sample(event, ms);
        }
    }

    fn add_latency_sample(&self, event: &'static str, ms: u64) {
        let now = crate::state::now_ms() / 1000;
        let mut events = self.latency.lock();
        let at = match events.iter().position(|(e, _)| *e == event) {
            Some(i) => i,
            None => {
                events.push((event, Series::default()));
                events.len() - 1
            }
        };
        events[at].1.add(now, ms);
    }

    /// The slow log, newest first, at most `count` entries.
    pub fn slowlog_get(&self, count: usize) -> Vec<SlowEntry> {
        self.slowlog
            .lock()
            .entries
            .iter()
            .take(count)
            .cloned()
            .collect()
    }

    /// Entries in the slow log.
    pub fn slowlog_len(&self) -> usize {
        self.slowlog.lock().entries.len()
    }

    /// Empties the slow log (ids keep counting, as in Redis).
    pub fn slowlog_reset(&self) {
        self.slowlog.lock().entries.clear();
    }

    /// Every latency event with samples: (name, series), oldest event first.
    pub fn latency_events(&self) -> Vec<(&'static str, Series)> {
        self.latency.lock().clone()
    }

    /// Forgets the named events (all when `names` is empty); returns how
    /// many existed.
    pub fn latency_reset(&self, names: &[&[u8]]) -> usize {
        let mut events = self.latency.lock();
        if names.is_empty() {
            let n = events.len();
            events.clear();
            return n;
        }
        let before = events.len();
        events.retain(|(e, _)| !names.contains(&e.as_bytes()));
        before - events.len()
    }

    /// The value of a monitoring setting for CONFIG GET, if `name` is one.
    pub fn config_get(&self, name: &str) -> Option<String> {
        Some(match name {
            "slowlog-log-slower-than" => self.slowlog_us.load(Ordering::Relaxed).to_string(),
            "slowlog-max-len" => self.slowlog_max.load(Ordering::Relaxed).to_string(),
            "latency-monitor-threshold" => self.latency_ms.load(Ordering::Relaxed).to_string(),
            "latency-tracking" => {
                if self.tracking.load(Ordering::Relaxed) {
                    "yes".into()
                } else {
                    "no".into()
                }
            }
            "latency-tracking-info-percentiles" => self
                .percentiles
                .lock()
                .iter()
                .map(|p| hdr::format_percentile(*p))
                .collect::<Vec<_>>()
                .join(" "),
            _ => return None,
        })
    }

    /// Checks a CONFIG SET value (or a start-up one) for a monitoring
    /// setting: the value to apply, or Redis's complaint.
    pub fn config_check(name: &str, value: &[u8]) -> Result<Setting, &'static str> {
        match name {
            "latency-tracking" => {
                return if value.eq_ignore_ascii_case(b"yes") {
                    Ok(Setting::Switch(true))
                } else if value.eq_ignore_ascii_case(b"no") {
                    Ok(Setting::Switch(false))
                } else {
                    Err("argument must be 'yes' or 'no'")
                };
            }
            "latency-tracking-info-percentiles" => {
                return hdr::parse_percentiles(value).map(Setting::Percentiles)
            }
            _ => {}
        }
        let v = std::str::from_utf8(value)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or("argument couldn't be parsed into an integer")?;
        let min = if name == "slowlog-log-slower-than" {
            -1
        } else {
            0
        };
        if v < min {
            return Err(if min < 0 {
                "argument must be between -1 and 9223372036854775807 inclusive"
            } else {
                "argument must be between 0 and 9223372036854775807 inclusive"
            });
        }
        Ok(Setting::Int(v))
    }

    /// Applies a value [`Self::config_check`] accepted (CONFIG SET, start-up).
    pub fn config_set(&self, name: &str, setting: Setting) {
        let v = match setting {
            Setting::Int(v) => v,
            Setting::Switch(on) => {
                self.tracking.store(on, Ordering::Relaxed);
                return;
            }
            Setting::Percentiles(list) => {
                *self.percentiles.lock() = list;
                return;
            }
        };
        match name {
            "slowlog-log-slower-than" => self.slowlog_us.store(v, Ordering::Relaxed),
            "slowlog-max-len" => {
                self.slowlog_max.store(v.max(0) as u64, Ordering::Relaxed);
                self.slowlog.lock().entries.truncate(v.max(0) as usize);
            }
            "latency-monitor-threshold" => {
                self.latency_ms.store(v.max(0) as u64, Ordering::Relaxed)
            }
            _ => return,
        }
        self.update_watch();
    }

    /// Applies the start-up configuration's monitoring settings (once, when
    /// the server has opened its databases; MEMORY STATS takes its
    /// `startup.allocated` figure here too).
    pub fn configure(&self, config: &crate::config::Config) {
        crate::commands::memory::note_startup();
        let int = |name, v| self.config_set(name, Setting::Int(v));
        int("slowlog-log-slower-than", config.slowlog_log_slower_than);
        int("slowlog-max-len", config.slowlog_max_len);
        int(
            "latency-monitor-threshold",
            config.latency_monitor_threshold,
        );
        self.config_set("latency-tracking", Setting::Switch(config.latency_tracking));
        self.config_set(
            "latency-tracking-info-percentiles",
            Setting::Percentiles(
                hdr::parse_percentiles(config.latency_tracking_info_percentiles.as_bytes())
                    .unwrap_or_else(|_| vec![50.0, 99.0, 99.9]),
            ),
        );
    }
}

/// A checked value of a monitoring setting ([`CommandStats::config_check`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Setting {
    /// A threshold or length (`slowlog-*`, `latency-monitor-threshold`).
    Int(i64),
    /// `latency-tracking`.
    Switch(bool),
    /// `latency-tracking-info-percentiles`.
    Percentiles(Vec<f64>),
}

// ------------------------------------------------------------- slow log

/// Settings names of the slow log and latency monitor (CONFIG GET/SET).
pub const SETTINGS: &[&str] = &[
    "slowlog-log-slower-than",
    "slowlog-max-len",
    "latency-monitor-threshold",
    "latency-tracking",
    "latency-tracking-info-percentiles",
];

/// One slow-log entry (SLOWLOG GET).
#[derive(Debug, Clone)]
pub struct SlowEntry {
    /// Unique, increasing id.
    pub id: u64,
    /// Unix seconds when it was logged.
    pub time: u64,
    /// Run time in µs.
    pub micros: u64,
    /// The arguments, truncated and redacted as Redis shows them.
    pub argv: Vec<Vec<u8>>,
    /// The client's `ip:port`.
    pub peer: String,
    /// The client's name (CLIENT SETNAME), empty if none.
    pub name: Vec<u8>,
}

#[derive(Debug, Default)]
struct SlowLog {
    next_id: u64,
    /// Newest first.
    entries: VecDeque<SlowEntry>,
}

/// Most arguments an entry keeps; the last kept one says how many more there were.
const SLOWLOG_MAX_ARGC: usize = 32;
/// Longest argument an entry keeps, in bytes.
const SLOWLOG_MAX_ARGLEN: usize = 128;
const REDACTED: &[u8] = b"(redacted)";

/// The arguments as the slow log keeps them: at most 32 (the 32nd becomes
/// `... (N more arguments)`), each at most 128 bytes (then `... (N more
/// bytes)`), with secrets replaced by `(redacted)` where Redis redacts
/// them: every AUTH argument, HELLO's AUTH username and password, and the
/// value of a CONFIG SET of a password setting.
fn slowlog_argv<'a>(name: &str, args: impl ExactSizeIterator<Item = &'a [u8]>) -> Vec<Vec<u8>> {
    let argc = args.len();
    let kept = argc.min(SLOWLOG_MAX_ARGC);
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(kept);
    let mut hello_auth = usize::MAX;
    let mut config_set = false;
    // MIGRATE's AUTH and AUTH2 values (the arguments are looked at twice
    // only for MIGRATE).
    let args: Vec<&[u8]> = args.collect();
    let migrate = if name == "migrate" {
        crate::commands::dump::MigrateOptions::read(&args).secrets
    } else {
        Vec::new()
    };
    for (i, a) in args.into_iter().enumerate().take(kept) {
        if kept != argc && i == kept - 1 {
            out.push(format!("... ({} more arguments)", argc - kept + 1).into_bytes());
            break;
        }
        let redact = match name {
            "auth" => i >= 1,
            "hello" => {
                if i >= 2 && hello_auth == usize::MAX && a.eq_ignore_ascii_case(b"auth") {
                    hello_auth = i;
                }
                hello_auth != usize::MAX && (i == hello_auth + 1 || i == hello_auth + 2)
            }
            "config" => {
                if i == 1 {
                    config_set = a.eq_ignore_ascii_case(b"set");
                }
                config_set
                    && i >= 3
                    && i % 2 == 1
                    && out.get(i - 1).is_some_and(|k| {
                        [&b"requirepass"[..], b"masterauth", b"masteruser"]
                            .iter()
                            .any(|s| k.eq_ignore_ascii_case(s))
                    })
            }
            "migrate" => migrate.contains(&i),
            _ => false,
        };
        if redact {
            out.push(REDACTED.to_vec());
        } else if a.len() > SLOWLOG_MAX_ARGLEN {
            let mut v = a[..SLOWLOG_MAX_ARGLEN].to_vec();
            v.extend_from_slice(
                format!("... ({} more bytes)", a.len() - SLOWLOG_MAX_ARGLEN).as_bytes(),
            );
            out.push(v);
        } else {
            out.push(a.to_vec());
        }
    }
    out
}

// ------------------------------------------------------ latency monitor

/// Samples kept per latency event (Redis's `LATENCY_TS_LEN`).
const SERIES_LEN: usize = 160;

/// One latency event's samples: at most one per second (the highest),
/// the latest [`SERIES_LEN`] seconds that had one, and the all-time max.
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// (unix seconds, ms), oldest first.
    samples: VecDeque<(u64, u64)>,
    /// The highest sample ever added.
    pub max: u64,
}

impl Series {
    fn add(&mut self, now: u64, ms: u64) {
        self.max = self.max.max(ms);
        if let Some(last) = self.samples.back_mut() {
            if last.0 == now {
                last.1 = last.1.max(ms);
                return;
            }
        }
        if self.samples.len() == SERIES_LEN {
            self.samples.pop_front();
        }
        self.samples.push_back((now, ms));
    }

    /// (unix seconds, ms), oldest first.
    pub fn samples(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        self.samples.iter().copied()
    }

    /// The newest sample.
    pub fn latest(&self) -> Option<(u64, u64)> {
        self.samples.back().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_many_threads_add_up_and_reset_clears_them() {
        let st = std::sync::Arc::new(CommandStats::new(3));
        let handles: Vec<_> = (0..20)
            .map(|_| {
                let st = st.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        st.record(1, 10, false);
                    }
                    st.record(2, 5, true);
                    st.reject(0);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(
            st.totals(1),
            Totals {
                calls: 2000,
                nanos: 20000,
                failed: 0,
                rejected: 0
            }
        );
        assert_eq!(st.totals(2).failed, 20);
        assert_eq!(st.totals(0).rejected, 20);
        assert_eq!(st.histogram(1)[0], 2000);
        st.reset();
        assert_eq!(st.totals(1), Totals::default());
        assert_eq!(st.histogram(1), [0; BUCKETS]);
    }

    #[test]
    fn error_codes_are_the_first_word_or_err() {
        assert_eq!(
            error_code(b"-WRONGTYPE Operation against a key\r\n"),
            b"WRONGTYPE"
        );
        assert_eq!(error_code(b"-ERR syntax error\r\n"), b"ERR");
        assert_eq!(error_code(b"-nospace\r\n"), b"ERR");
        // A space past the first 32 bytes is not looked for.
        assert_eq!(
            error_code(b"-ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGHIJ x\r\n"),
            b"ERR"
        );
        assert_eq!(
            error_code(b"-ABCDEFGHIJKLMNOPQRSTUVWXYZABCD x\r\n"),
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZABCD"
        );
        let st = ErrorStats::default();
        for i in 0..ERROR_CODES_MAX + 5 {
            st.count(format!("-C{i} x\r\n").as_bytes());
        }
        st.count(b"-C0 again\r\n");
        st.count(b"-C999 new\r\n");
        assert_eq!(st.total(), ERROR_CODES_MAX as u64 + 7);
        let codes = st.codes();
        assert_eq!(codes.len(), ERROR_CODES_MAX);
        assert_eq!(codes[0], (b"C0".to_vec(), 2));
        assert_eq!(codes[1].0, b"C1".to_vec());
        assert_eq!(codes[2].0, b"C10".to_vec(), "byte order, as Redis's");
        st.reset();
        assert_eq!((st.total(), st.codes().len()), (0, 0));
    }

    #[test]
    fn histogram_buckets_match_redis_labels() {
        // Labels Redis 7.0 prints for its power-of-two buckets.
        let labels: Vec<u64> = (0..BUCKETS).map(bucket_label_us).collect();
        assert_eq!(&labels[..8], &[1, 2, 4, 8, 16, 33, 66, 132]);
        assert_eq!(labels[10], 1056);
        assert_eq!(labels[15], 33816);
        assert_eq!(labels[BUCKETS - 1], 1082130);
        // A run lands in the first bucket whose label covers its whole µs.
        for (us, label) in [
            (0, 1),
            (1, 1),
            (2, 2),
            (3, 4),
            (5, 8),
            (16, 16),
            (17, 33),
            (33, 33),
            (34, 66),
            (5_000_000, 1082130),
        ] {
            assert_eq!(
                bucket_label_us(bucket(hdr::sample(us * 1000 + 999))),
                label,
                "{us} µs"
            );
        }
    }

    #[test]
    fn slowlog_argv_truncates_and_redacts_like_redis() {
        let long = vec![b'x'; 200];
        let args: Vec<&[u8]> = vec![b"set", b"k", &long];
        let v = slowlog_argv("set", args.into_iter());
        assert_eq!(v[2].len(), 128 + b"... (72 more bytes)".len());
        assert!(v[2].ends_with(b"... (72 more bytes)"));
        let many: Vec<Vec<u8>> = (0..40).map(|i| format!("k{i}").into_bytes()).collect();
        let v = slowlog_argv("del", many.iter().map(|a| &a[..]));
        assert_eq!(v.len(), 32);
        assert_eq!(v[31], b"... (9 more arguments)");
        let v = slowlog_argv(
            "hello",
            [&b"hello"[..], b"3", b"AUTH", b"u", b"p", b"setname", b"n"].into_iter(),
        );
        assert_eq!(
            v,
            [
                &b"hello"[..],
                b"3",
                b"AUTH",
                REDACTED,
                REDACTED,
                b"setname",
                b"n"
            ]
        );
        let v = slowlog_argv(
            "config",
            [&b"config"[..], b"set", b"requirepass", b"pw", b"hz", b"5"].into_iter(),
        );
        assert_eq!(
            v,
            [
                &b"config"[..],
                b"set",
                b"requirepass",
                REDACTED,
                b"hz",
                b"5"
            ]
        );
        let v = slowlog_argv("auth", [&b"auth"[..], b"u", b"p"].into_iter());
        assert_eq!(v, [&b"auth"[..], REDACTED, REDACTED]);
        // MIGRATE's AUTH2 values, not a key named "auth" after KEYS.
        let m: [&[u8]; 13] = [
            b"migrate", b"h", b"1", b"", b"0", b"100", b"AUTH2", b"u", b"p", b"KEYS", b"k",
            b"auth", b"x",
        ];
        let v = slowlog_argv("migrate", m.into_iter());
        let mut want = m.to_vec();
        want[7] = REDACTED;
        want[8] = REDACTED;
        assert_eq!(v, want);
    }

    #[test]
    fn latency_series_keeps_the_worst_sample_of_each_second_and_160_seconds() {
        let mut s = Series::default();
        s.add(10, 5);
        s.add(10, 9);
        s.add(10, 7);
        assert_eq!(s.samples().collect::<Vec<_>>(), [(10, 9)]);
        for t in 11..400 {
            s.add(t, 1);
        }
        assert_eq!(s.samples().len(), SERIES_LEN);
        assert_eq!(s.max, 9);
        assert_eq!(s.latest(), Some((399, 1)));
    }

    #[test]
    fn thresholds_pick_what_the_slow_path_sees() {
        let st = CommandStats::new(1);
        assert!(!st.is_slow(9_999_999));
        assert!(st.is_slow(10_000_000));
        st.config_set("slowlog-log-slower-than", Setting::Int(-1));
        assert!(!st.is_slow(u64::MAX - 1));
        st.config_set("latency-monitor-threshold", Setting::Int(2));
        assert!(st.is_slow(2_000_000));
        assert!(!st.is_slow(1_999_999));
        st.config_set("slowlog-log-slower-than", Setting::Int(0));
        assert!(st.is_slow(0));
        assert!(CommandStats::config_check("slowlog-log-slower-than", b"-2").is_err());
        assert!(CommandStats::config_check("slowlog-max-len", b"-1").is_err());
        assert_eq!(
            CommandStats::config_check("slowlog-max-len", b"7"),
            Ok(Setting::Int(7))
        );
    }
}
