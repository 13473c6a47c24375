//! Compaction running flat out under concurrent writers and readers loses
//! nothing, never shows a reader a value that was not written, and leaves a
//! directory that reopens to the same contents.
//!
//! Two writers own disjoint keys and keep their own model; two readers check
//! that every value they see is one some writer wrote for that key (values
//! carry their key, field and a counter, and filler bytes derived from them);
//! one thread calls `Db::compact` in a loop. Afterwards the database must
//! equal the merged models, before and after a reopen, and after one more
//! compaction and reopen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use basalt_engine::{Db, Options, SyncPolicy};

const WRITERS: usize = 2;
const VALUE_KEYS: u64 = 200;
const MAP_KEYS: u64 = 24;
const FIELDS: u64 = 12;
const RUN_FOR: Duration = Duration::from_secs(3);
const MAX_OPS_PER_WRITER: u64 = 40_000;

fn opts() -> Options {
    Options::default()
        .shards(4)
        .max_file_size(16 << 10)
        .background_compaction(false)
        .active_expiry(false)
        .sync(SyncPolicy::Never)
}

/// A small deterministic generator (xorshift64*), one per thread.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn value_key(w: usize, n: u64) -> Vec<u8> {
    format!("w{w}:v{n}").into_bytes()
}
fn map_key(w: usize, n: u64) -> Vec<u8> {
    format!("w{w}:m{n}").into_bytes()
}
fn field_name(n: u64) -> Vec<u8> {
    format!("f{n}").into_bytes()
}

fn filler(key: &[u8], field: &[u8], counter: u64, len: usize) -> impl Iterator<Item = u8> {
    let seed = (crc32c::crc32c(key) as u64) ^ ((crc32c::crc32c(field) as u64) << 32) ^ counter;
    (0..len as u64).map(move |j| (seed.wrapping_mul(j + 1) >> 17) as u8)
}

/// `key|field|counter|` then filler bytes that depend on all three.
fn encode(key: &[u8], field: &[u8], counter: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 40);
    v.extend_from_slice(key);
    v.push(b'|');
    v.extend_from_slice(field);
    v.push(b'|');
    v.extend_from_slice(counter.to_string().as_bytes());
    v.push(b'|');
    v.extend(filler(key, field, counter, len));
    v
}

/// Checks that `v` is a value written for (`key`, `field`) with a counter
/// not above `max_counter`; returns why not.
fn check_plausible(key: &[u8], field: &[u8], v: &[u8], max_counter: u64) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "{why}: key {:?} field {:?} value {:?}..",
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(field),
            String::from_utf8_lossy(&v[..v.len().min(60)])
        ))
    };
    let mut parts = v.splitn(4, |&b| b == b'|');
    let (Some(k), Some(f), Some(c), Some(rest)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return bad("value is not key|field|counter|filler");
    };
    if k != key || f != field {
        return bad("value belongs to another key or field");
    }
    let Some(counter) = std::str::from_utf8(c)
        .ok()
        .and_then(|c| c.parse::<u64>().ok())
    else {
        return bad("unreadable counter");
    };
    if counter > max_counter {
        return bad("counter beyond anything written yet");
    }
    if !rest
        .iter()
        .copied()
        .eq(filler(key, field, counter, rest.len()))
    {
        return bad("filler bytes do not match");
    }
    Ok(())
}

/// One writer's expected state.
#[derive(Debug, Default, Clone)]
struct Model {
    /// Value keys ever written; `None` once deleted.
    values: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Map keys ever written; an empty map means the key is gone.
    maps: BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl Model {
    fn merge(&mut self, other: Model) {
        self.values.extend(other.values);
        self.maps.extend(other.maps);
    }
    fn live_keys(&self) -> BTreeSet<Vec<u8>> {
        let v = self
            .values
            .iter()
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| k.clone());
        let m = self
            .maps
            .iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(k, _)| k.clone());
        v.chain(m).collect()
    }
}

fn value_len(rng: &mut Rng) -> usize {
    match rng.below(10) {
        0 => 0,
        1..=6 => rng.below(200) as usize,
        7 | 8 => 200 + rng.below(1500) as usize,
        _ => 2000 + rng.below(6000) as usize,
    }
}

/// Writes until the deadline or the op cap; returns the model and op count.
fn writer(
    db: &Db,
    w: usize,
    counter: &AtomicU64,
    deadline: Instant,
) -> Result<(Model, u64), String> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((w as u64 + 1) * 0x1234_5678_9abc));
    let mut model = Model::default();
    let mut ops = 0;
    while ops < MAX_OPS_PER_WRITER && Instant::now() < deadline {
        ops += 1;
        // Publish the counter before the write, so a reader that loads the
        // published counter after its read never sees a higher one.
        let c = counter.fetch_add(1, Ordering::SeqCst) + 1;
        let r = rng.below(100);
        let res = if r < 50 {
            let key = value_key(w, rng.below(VALUE_KEYS));
            let v = encode(&key, b"", c, value_len(&mut rng));
            let res = db.put(&key, &v).map(drop);
            model.values.insert(key, Some(v));
            res
        } else if r < 60 {
            let key = value_key(w, rng.below(VALUE_KEYS));
            let existed = model.values.get(&key).is_some_and(|v| v.is_some());
            let res = db.delete(&key).map(|found| {
                assert_eq!(
                    found,
                    existed,
                    "writer {w}: delete of {:?}",
                    String::from_utf8_lossy(&key)
                );
            });
            model.values.insert(key, None);
            res
        } else if r < 85 {
            let key = map_key(w, rng.below(MAP_KEYS));
            let field = field_name(rng.below(FIELDS));
            let v = encode(&key, &field, c, value_len(&mut rng) / 4);
            let res = db.put_field(&key, &field, &v).map(drop);
            model.maps.entry(key).or_default().insert(field, v);
            res
        } else if r < 97 {
            let key = map_key(w, rng.below(MAP_KEYS));
            let field = field_name(rng.below(FIELDS));
            let existed = model.maps.get(&key).is_some_and(|m| m.contains_key(&field));
            let res = db.delete_field(&key, &field).map(|found| {
                assert_eq!(found, existed, "writer {w}: delete_field result");
            });
            model.maps.entry(key).or_default().remove(&field);
            res
        } else {
            let key = map_key(w, rng.below(MAP_KEYS));
            let res = db.delete(&key).map(drop);
            model.maps.insert(key, BTreeMap::new());
            res
        };
        res.map_err(|e| format!("writer {w}, op {ops}: {e}"))?;
    }
    Ok((model, ops))
}

/// Reads random keys of both writers until told to stop; returns reads done.
fn reader(db: &Db, r: usize, counters: &[AtomicU64], stop: &AtomicBool) -> Result<u64, String> {
    let mut rng = Rng(0xdead_beef_cafe_f00d ^ ((r as u64 + 7) * 0x0101_0101));
    let mut reads = 0u64;
    while !stop.load(Ordering::SeqCst) && reads < 10_000_000 {
        reads += 1;
        let w = rng.below(WRITERS as u64) as usize;
        match rng.below(10) {
            0..=5 => {
                let key = value_key(w, rng.below(VALUE_KEYS));
                if let Some(v) = db.get(&key).map_err(|e| format!("reader {r}: get: {e}"))? {
                    check_plausible(&key, b"", &v, counters[w].load(Ordering::SeqCst))?;
                }
            }
            6..=8 => {
                let key = map_key(w, rng.below(MAP_KEYS));
                let field = field_name(rng.below(FIELDS));
                if let Some(v) = db
                    .get_field(&key, &field)
                    .map_err(|e| format!("reader {r}: get_field: {e}"))?
                {
                    check_plausible(&key, &field, &v, counters[w].load(Ordering::SeqCst))?;
                }
            }
            _ => {
                let key = map_key(w, rng.below(MAP_KEYS));
                let fields = db
                    .fields(&key)
                    .map_err(|e| format!("reader {r}: fields: {e}"))?;
                // Loaded after the read: a value seen was published before.
                let max = counters[w].load(Ordering::SeqCst);
                for (field, v) in fields {
                    check_plausible(&key, &field, &v, max)?;
                }
            }
        }
    }
    Ok(reads)
}

fn all_keys(db: &Db) -> BTreeSet<Vec<u8>> {
    let mut keys = BTreeSet::new();
    let mut cursor = 0;
    for _ in 0..100_000 {
        let (batch, next) = db.scan(cursor, 100);
        keys.extend(batch);
        if next == 0 {
            return keys;
        }
        cursor = next;
    }
    panic!("scan did not finish");
}

/// The whole database equals the model: every value, every field, every
/// deletion, and no other key.
fn assert_matches(db: &Db, model: &Model, ctx: &str) {
    for (key, want) in &model.values {
        let got = db.get(key).unwrap_or_else(|e| panic!("{ctx}: get: {e}"));
        assert!(
            got == *want,
            "{ctx}: key {:?}: got {:?}, want {:?}",
            String::from_utf8_lossy(key),
            got.map(|v| String::from_utf8_lossy(&v[..v.len().min(40)]).into_owned()),
            want.as_ref()
                .map(|v| String::from_utf8_lossy(&v[..v.len().min(40)]).into_owned()),
        );
    }
    for (key, want) in &model.maps {
        let got: BTreeMap<Vec<u8>, Vec<u8>> = db
            .fields(key)
            .unwrap_or_else(|e| panic!("{ctx}: fields: {e}"))
            .into_iter()
            .collect();
        assert!(
            got == *want,
            "{ctx}: map {:?}: fields {:?}, want {:?}",
            String::from_utf8_lossy(key),
            got.keys()
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .collect::<Vec<_>>(),
            want.keys()
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .collect::<Vec<_>>(),
        );
        assert_eq!(
            db.exists(key),
            !want.is_empty(),
            "{ctx}: exists({:?})",
            String::from_utf8_lossy(key)
        );
    }
    let live = model.live_keys();
    assert_eq!(all_keys(db), live, "{ctx}: the set of keys");
    let st = db.stats();
    assert_eq!(st.keys, live.len() as u64, "{ctx}: stats().keys");
    let fields: usize = model.maps.values().map(|m| m.len()).sum();
    assert_eq!(st.fields, fields as u64, "{ctx}: stats().fields");
}

/// A temporary directory, on tmpfs where there is one: compaction and file
/// rotation fsync several times per file, and on a slow disk those fsyncs,
/// not the engine, would set how many compactions interleave with the
/// writers in the time allowed.
fn temp_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

fn reopen(dir: &Path) -> Db {
    Db::open(dir, opts()).expect("reopen")
}

#[test]
fn compaction_loop_under_concurrent_writers_and_readers_loses_nothing_and_reopens_identically() {
    let dir = temp_dir();
    let db = Arc::new(Db::open(dir.path(), opts()).expect("open"));
    let counters: Arc<Vec<AtomicU64>> = Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + RUN_FOR;

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (db, counters) = (db.clone(), counters.clone());
            thread::spawn(move || writer(&db, w, &counters[w], deadline))
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (db, counters, stop) = (db.clone(), counters.clone(), stop.clone());
            thread::spawn(move || reader(&db, r, &counters, &stop))
        })
        .collect();
    let compactor = {
        let (db, stop) = (db.clone(), stop.clone());
        thread::spawn(move || -> Result<(u64, usize), String> {
            let (mut calls, mut files) = (0u64, 0usize);
            while !stop.load(Ordering::SeqCst) && calls < 100_000 {
                let r = db.compact().map_err(|e| format!("compact #{calls}: {e}"))?;
                calls += 1;
                files += r.files_compacted;
                thread::sleep(Duration::from_millis(5));
            }
            Ok((calls, files))
        })
    };

    let mut model = Model::default();
    let mut writes = 0;
    let mut failures = Vec::new();
    for h in writers {
        match h.join().expect("writer panicked") {
            Ok((m, n)) => {
                model.merge(m);
                writes += n;
            }
            Err(e) => failures.push(e),
        }
    }
    stop.store(true, Ordering::SeqCst);
    let mut reads = 0;
    for h in readers {
        match h.join().expect("reader panicked") {
            Ok(n) => reads += n,
            Err(e) => failures.push(e),
        }
    }
    let (compact_calls, files_compacted) = match compactor.join().expect("compactor panicked") {
        Ok(x) => x,
        Err(e) => {
            failures.push(e);
            (0, 0)
        }
    };
    assert!(failures.is_empty(), "failures: {failures:#?}");
    println!("{writes} writes, {reads} reads, {compact_calls} compactions rewriting {files_compacted} files");
    assert!(writes > 1000, "too few writes to mean anything: {writes}");
    assert!(files_compacted > 0, "compaction never rewrote a file");

    let db = Arc::into_inner(db).expect("every thread has finished");
    assert!(
        db.stats().compactions > 0,
        "stats().compactions counts no run"
    );
    assert_matches(&db, &model, "after the concurrent run");
    db.close().expect("close");

    let db = reopen(dir.path());
    assert_matches(&db, &model, "after reopen");

    // Make garbage (overwrite every live value, drop some maps), then a final
    // compaction must shrink the dead bytes, and a reopen see the same.
    let mut c = 10_000_000;
    for (key, v) in model.values.iter_mut() {
        if v.is_some() {
            c += 1;
            let nv = encode(key, b"", c, 300);
            db.put(key, &nv).unwrap();
            *v = Some(nv);
        }
    }
    for (i, (key, m)) in model.maps.iter_mut().enumerate() {
        if i % 3 == 0 && !m.is_empty() {
            db.delete(key).unwrap();
            m.clear();
        }
    }
    let dead_before = db.stats().dead_bytes;
    let report = db.compact().expect("final compact");
    let dead_after = db.stats().dead_bytes;
    assert!(
        report.files_compacted > 0,
        "final compaction rewrote nothing: {report:?}"
    );
    assert!(
        dead_after < dead_before,
        "dead bytes did not shrink: {dead_before} -> {dead_after} ({report:?})"
    );
    assert_matches(&db, &model, "after the final compaction");
    db.close().expect("close");

    let db = reopen(dir.path());
    assert_matches(&db, &model, "after the final compaction and reopen");
    db.close().expect("close");
}
