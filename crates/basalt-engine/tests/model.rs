//! Property test: random sequences of writes, clock moves, compactions,
//! reopens, write batches and crashes (the directory copied as kill -9
//! leaves it), with every read compared against a plain in-memory model. A
//! crash while a batch is open must bring back the model as it was when the
//! batch began.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use basalt_engine::{Batch, BatchGroup, Db, Error, ManualClock, Options, SyncPolicy};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Put(u8, Vec<u8>),
    PutExpiring(u8, Vec<u8>, u64),
    Delete(u8),
    PutField(u8, u8, Vec<u8>),
    DeleteField(u8, u8),
    TakeField(u8, u8),
    Expire(u8, u64),
    Persist(u8),
    Advance(u64),
    Sweep,
    Compact,
    CompactPass,
    Reopen,
    BeginBatch,
    EndBatch,
    /// kill -9: the directory as it is now, reopened (the old process's
    /// state is dropped).
    Crash,
}

#[derive(Debug, Clone, PartialEq)]
enum Val {
    Value(Vec<u8>),
    Map(BTreeMap<Vec<u8>, Vec<u8>>),
}

#[derive(Debug, Clone)]
struct Entry {
    val: Val,
    expiry: u64,
    version: u64,
}

/// The model: what a reader must see at time `now`.
#[derive(Default, Clone)]
struct Model {
    keys: HashMap<Vec<u8>, Entry>,
}

impl Model {
    fn live(&self, key: &[u8], now: u64) -> Option<&Entry> {
        self.keys
            .get(key)
            .filter(|e| e.expiry == 0 || e.expiry > now)
    }
    fn purge(&mut self, key: &[u8], now: u64) {
        if self
            .keys
            .get(key)
            .is_some_and(|e| e.expiry != 0 && e.expiry <= now)
        {
            self.keys.remove(key);
        }
    }
}

fn key(k: u8) -> Vec<u8> {
    format!("key-{k}").into_bytes()
}
fn field(f: u8) -> Vec<u8> {
    format!("f{f}").into_bytes()
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..12;
    let v = prop::collection::vec(any::<u8>(), 0..300);
    prop_oneof![
        6 => (k.clone(), v.clone()).prop_map(|(k, v)| Op::Put(k, v)),
        2 => (k.clone(), v.clone(), 1u64..5_000).prop_map(|(k, v, t)| Op::PutExpiring(k, v, t)),
        3 => k.clone().prop_map(Op::Delete),
        6 => (k.clone(), 0u8..6, v).prop_map(|(k, f, v)| Op::PutField(k, f, v)),
        3 => (k.clone(), 0u8..6).prop_map(|(k, f)| Op::DeleteField(k, f)),
        2 => (k.clone(), 0u8..6).prop_map(|(k, f)| Op::TakeField(k, f)),
        2 => (k.clone(), 0u64..5_000).prop_map(|(k, t)| Op::Expire(k, t)),
        1 => k.prop_map(Op::Persist),
        2 => (1u64..3_000).prop_map(Op::Advance),
        1 => Just(Op::Sweep),
        1 => Just(Op::Compact),
        2 => Just(Op::CompactPass),
        1 => Just(Op::Reopen),
        2 => Just(Op::BeginBatch),
        2 => Just(Op::EndBatch),
        1 => Just(Op::Crash),
    ]
}

fn open(dir: &Path, clock: &Arc<ManualClock>, compress: bool, group: &Arc<BatchGroup>) -> Db {
    let opts = Options::default()
        .batch_group(group.clone())
        .shards(2)
        .max_file_size(4096)
        .sync(SyncPolicy::Never)
        .background_compaction(false)
        .compaction_threshold(0.3)
        .active_expiry(false)
        .compress_above(compress.then_some(64))
        .clock(clock.clone());
    Db::open(dir, opts).expect("open")
}

fn check(db: &Db, model: &Model, now: u64) {
    // A hint over every kind of key (values, maps, expired, missing) must
    // change nothing that the reads below see.
    let all: Vec<Vec<u8>> = (0..12u8).map(key).collect();
    db.prefetch(&all);
    for k in 0..12u8 {
        let key = key(k);
        let want = model.live(&key, now);
        assert_eq!(db.exists(&key), want.is_some(), "exists({k})");
        match want.map(|e| &e.val) {
            None => {
                assert_eq!(db.get(&key).unwrap(), None, "get({k})");
                assert_eq!(db.get_with(&key, |v| v.to_vec()).unwrap(), None);
                assert_eq!(db.fields_with(&key, &[b"f0"], |_, _| ()).unwrap(), None);
                assert!(db.fields(&key).unwrap().is_empty());
                assert_eq!(db.version(&key), 0);
            }
            Some(Val::Value(v)) => {
                let got = db.get_versioned(&key).unwrap().expect("value present");
                assert_eq!(&got.value, v, "value of {k}");
                assert_eq!(db.get_with(&key, |b| b.to_vec()).unwrap().as_ref(), Some(v));
                assert!(matches!(
                    db.fields_with(&key, &[b"f0"], |_, _| ()),
                    Err(Error::WrongKind { .. })
                ));
                assert_eq!(got.version, want.unwrap().version, "version of {k}");
                let exp = want.unwrap().expiry;
                assert_eq!(got.expires_at, (exp != 0).then_some(exp));
                assert!(matches!(
                    db.get_field(&key, b"f0"),
                    Err(Error::WrongKind { .. })
                ));
            }
            Some(Val::Map(m)) => {
                let mut got: Vec<_> = db.fields(&key).unwrap();
                got.sort();
                let want_fields: Vec<_> = m.iter().map(|(a, b)| (a.clone(), b.clone())).collect();
                assert_eq!(got, want_fields, "fields of {k}");
                for f in 0..6u8 {
                    assert_eq!(
                        db.get_field(&key, &field(f)).unwrap().as_ref(),
                        m.get(&field(f))
                    );
                }
                // All six fields (some absent) in one pass, in order.
                let names: Vec<_> = (0..6u8).map(field).collect();
                let mut seen = Vec::new();
                let n = db
                    .fields_with(&key, &names, |i, v| {
                        seen.push((names[i].clone(), v.to_vec()))
                    })
                    .unwrap();
                let want_seen: Vec<_> = names
                    .iter()
                    .filter_map(|f| m.get(f).map(|v| (f.clone(), v.clone())))
                    .collect();
                assert_eq!(n, Some(want_seen.len()));
                assert_eq!(seen, want_seen, "fields_with of {k}");
                assert!(matches!(
                    db.get_with(&key, |_| ()),
                    Err(Error::WrongKind { .. })
                ));
                assert_eq!(
                    db.version(&key),
                    want.unwrap().version,
                    "map version of {k}"
                );
                assert!(matches!(db.get(&key), Err(Error::WrongKind { .. })));
            }
        }
    }
    // A full scan returns exactly the live keys.
    let mut cursor = 0;
    let mut seen = Vec::new();
    for _ in 0..1000 {
        let (keys, next) = db.scan(cursor, 5);
        seen.extend(keys);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    seen.sort();
    seen.dedup();
    let mut want: Vec<Vec<u8>> = model
        .keys
        .iter()
        .filter(|(_, e)| e.expiry == 0 || e.expiry > now)
        .map(|(k, _)| k.clone())
        .collect();
    want.sort();
    assert_eq!(seen, want, "scan");
}

/// Copies a database directory as a crash leaves it (no LOCK held).
fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}

fn run(ops: Vec<Op>, compress: bool) {
    let root = tempfile::tempdir().unwrap();
    let mut dir = root.path().join("0");
    let mut crashes = 0;
    let clock = Arc::new(ManualClock::new(1_000_000));
    let group = BatchGroup::new();
    let mut db = Some(open(&dir, &clock, compress, &group));
    let mut model = Model::default();
    let mut last_version = 0u64;
    // The open batch, and the model as it was when it began.
    let mut batch: Option<(Batch<'_>, Model)> = None;
    for op in ops {
        let d = db.as_ref().unwrap();
        let now = clock.now_ms_for_test();
        match op {
            Op::Put(k, v) => {
                let ver = d.put(&key(k), &v).unwrap();
                assert!(ver > last_version, "versions grow");
                last_version = ver;
                model.keys.insert(
                    key(k),
                    Entry {
                        val: Val::Value(v),
                        expiry: 0,
                        version: ver,
                    },
                );
            }
            Op::PutExpiring(k, v, t) => {
                let ver = d.put_with_expiry(&key(k), &v, Some(now + t)).unwrap();
                assert!(ver > last_version);
                last_version = ver;
                model.keys.insert(
                    key(k),
                    Entry {
                        val: Val::Value(v),
                        expiry: now + t,
                        version: ver,
                    },
                );
            }
            Op::Delete(k) => {
                model.purge(&key(k), now);
                let existed = d.delete(&key(k)).unwrap();
                assert_eq!(existed, model.keys.remove(&key(k)).is_some(), "delete({k})");
            }
            Op::PutField(k, f, v) => {
                model.purge(&key(k), now);
                let r = d.put_field(&key(k), &field(f), &v);
                match model.keys.get_mut(&key(k)) {
                    Some(Entry {
                        val: Val::Value(_), ..
                    }) => {
                        assert!(
                            matches!(r, Err(Error::WrongKind { .. })),
                            "put_field on a value"
                        );
                    }
                    Some(e) => {
                        let ver = r.unwrap();
                        assert!(ver > last_version);
                        last_version = ver;
                        let Val::Map(m) = &mut e.val else {
                            unreachable!()
                        };
                        m.insert(field(f), v);
                        e.version = ver;
                    }
                    None => {
                        let ver = r.unwrap();
                        assert!(ver > last_version);
                        last_version = ver;
                        let m = BTreeMap::from([(field(f), v)]);
                        model.keys.insert(
                            key(k),
                            Entry {
                                val: Val::Map(m),
                                expiry: 0,
                                version: ver,
                            },
                        );
                    }
                }
            }
            Op::DeleteField(k, f) => {
                model.purge(&key(k), now);
                let r = d.delete_field(&key(k), &field(f));
                match model.keys.get_mut(&key(k)) {
                    Some(Entry {
                        val: Val::Value(_), ..
                    }) => {
                        assert!(matches!(r, Err(Error::WrongKind { .. })));
                    }
                    Some(e) => {
                        let Val::Map(m) = &mut e.val else {
                            unreachable!()
                        };
                        let had = m.remove(&field(f)).is_some();
                        assert_eq!(r.unwrap(), had, "delete_field");
                        if had {
                            e.version = d.stats().next_seq - 1;
                            last_version = e.version;
                        }
                        if m.is_empty() {
                            model.keys.remove(&key(k));
                        }
                    }
                    None => assert!(!r.unwrap()),
                }
            }
            Op::TakeField(k, f) => {
                model.purge(&key(k), now);
                let r = d.take_field(&key(k), &field(f));
                match model.keys.get_mut(&key(k)) {
                    Some(Entry {
                        val: Val::Value(_), ..
                    }) => {
                        assert!(matches!(r, Err(Error::WrongKind { .. })));
                    }
                    Some(e) => {
                        let Val::Map(m) = &mut e.val else {
                            unreachable!()
                        };
                        let had = m.remove(&field(f));
                        assert_eq!(r.unwrap(), had, "take_field");
                        if had.is_some() {
                            e.version = d.stats().next_seq - 1;
                            last_version = e.version;
                        }
                        if m.is_empty() {
                            model.keys.remove(&key(k));
                        }
                    }
                    None => assert_eq!(r.unwrap(), None),
                }
            }
            Op::Expire(k, t) => {
                model.purge(&key(k), now);
                // t == 0 means "now": the key goes away, as in Redis.
                let at = now + t;
                let existed = d.expire(&key(k), at).unwrap();
                assert_eq!(existed, model.keys.contains_key(&key(k)));
                if t == 0 {
                    model.keys.remove(&key(k));
                } else if let Some(e) = model.keys.get_mut(&key(k)) {
                    e.expiry = at;
                    e.version = d.version(&key(k));
                    assert!(e.version > last_version);
                    last_version = e.version;
                }
            }
            Op::Persist(k) => {
                let had = model.live(&key(k), now).is_some_and(|e| e.expiry != 0);
                assert_eq!(d.persist(&key(k)).unwrap(), had, "persist");
                if had {
                    let e = model.keys.get_mut(&key(k)).unwrap();
                    e.expiry = 0;
                    e.version = d.version(&key(k));
                    last_version = e.version;
                }
            }
            Op::Advance(ms) => clock.advance(ms),
            Op::Sweep => {
                d.sweep_expired().unwrap();
                model.keys.retain(|_, e| e.expiry == 0 || e.expiry > now);
            }
            Op::Compact => {
                d.compact().unwrap();
            }
            Op::CompactPass => {
                d.compact_pass().unwrap();
            }
            Op::BeginBatch => {
                if batch.is_none() {
                    batch = Some((group.begin(), model.clone()));
                }
            }
            Op::EndBatch => {
                if let Some((b, _)) = batch.take() {
                    b.commit().unwrap();
                }
            }
            Op::Crash => {
                crashes += 1;
                let copy = root.path().join(crashes.to_string());
                copy_dir(&dir, &copy);
                // The old process goes away (what it does on its way out
                // is not in the copy).
                if let Some((b, before)) = batch.take() {
                    drop(b);
                    model = before;
                }
                drop(db.take());
                dir = copy;
                db = Some(open(&dir, &clock, compress, &group));
                let next = db.as_ref().unwrap().stats().next_seq;
                assert!(next > last_version, "sequence numbers grow after a crash");
            }
            Op::Reopen => {
                // Closing commits what the open batch wrote so far.
                if let Some((_, before)) = batch.as_mut() {
                    *before = model.clone();
                }
                db.take().unwrap().close().unwrap();
                db = Some(open(&dir, &clock, compress, &group));
                let next = db.as_ref().unwrap().stats().next_seq;
                assert!(
                    next > last_version,
                    "sequence numbers keep growing after reopen"
                );
            }
        }
        check(db.as_ref().unwrap(), &model, clock.now_ms_for_test());
    }
    // Finally: compact, reopen, and everything still matches.
    if let Some((b, _)) = batch.take() {
        b.commit().unwrap();
    }
    let d = db.take().unwrap();
    d.compact().unwrap();
    d.close().unwrap();
    let d = open(&dir, &clock, compress, &group);
    check(&d, &model, clock.now_ms_for_test());
}

trait Now {
    fn now_ms_for_test(&self) -> u64;
}
impl Now for ManualClock {
    fn now_ms_for_test(&self) -> u64 {
        basalt_engine::Clock::now_ms(self)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]
    #[test]
    fn random_operations_match_an_in_memory_model(ops in prop::collection::vec(op(), 1..120)) {
        run(ops, false);
    }

    #[test]
    fn random_operations_match_the_model_with_lz4_values(ops in prop::collection::vec(op(), 1..80)) {
        run(ops, true);
    }
}
