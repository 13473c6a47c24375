//! The redis-benchmark 7.0 tests this benchmark can run, and how each one
//! is run so that both servers get the same work from the same state.
//!
//! The one idea: redis-benchmark's collection tests all hit **one fixed key**
//! per type (`LPUSH mylist`, `SADD myset element:__rand_int__`,
//! `HSET myhash element:__rand_int__ <data>`, `ZADD myzset <score>
//! element:__rand_int__`, `LPOP mylist`, `SPOP myset`, `ZPOPMIN myzset`,
//! `LRANGE mylist 0 99`), so what a test measures depends on what the tests
//! before it left in that key. A pop on an empty key is a cheap nil reply,
//! not a pop; redis-benchmark's `-t lrange_100` is really two runs (an
//! `LPUSH (needed to benchmark LRANGE)` fill, then the LRANGEs) whose CPU
//! time cannot be told apart. So this benchmark:
//!
//! - runs the selected tests in redis-benchmark's own order (the order one
//!   `-t a,b,c` invocation would use: pushes before pops), whatever order
//!   `--tests` lists them in;
//! - before each round and pipeline depth, deletes the collection keys the
//!   selected tests use, on both servers;
//! - before a pop test, tops the key up to `-n` members with its own
//!   pipelined client (unmeasured), so every measured request pops one;
//! - runs `lrange_N` as a fresh list of `max(N, -n)` elements filled by its
//!   own client (unmeasured, as redis-benchmark's LPUSH step but outside the
//!   timing), then the custom command `LRANGE mylist 0 N-1`, reported under
//!   redis-benchmark's own name `LRANGE_N (first N elements)`;
//! - reads the key's length before and after every measured collection
//!   run, so the report shows what each test found and left.

use anyhow::{bail, ensure, Result};

use super::client::{cmd, filler, Conn};

/// Commands per pipelined batch in the unmeasured setup.
const SETUP_BATCH: usize = 1000;

/// A collection key redis-benchmark uses, one per type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Coll {
    List,
    Set,
    Hash,
    Zset,
}

impl Coll {
    /// The key, as redis-benchmark 7.0 names it outside cluster mode.
    pub(super) fn key(self) -> &'static str {
        match self {
            Coll::List => "mylist",
            Coll::Set => "myset",
            Coll::Hash => "myhash",
            Coll::Zset => "myzset",
        }
    }

    /// The command that reads its length.
    pub(super) fn len_command(self) -> &'static str {
        match self {
            Coll::List => "LLEN",
            Coll::Set => "SCARD",
            Coll::Hash => "HLEN",
            Coll::Zset => "ZCARD",
        }
    }
}

/// What a collection test does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Effect {
    /// Adds (or overwrites) one member per request.
    Push,
    /// Removes one member per request; needs `-n` members first.
    Pop,
    /// Reads the first N elements; needs a list of at least N.
    Range(u32),
}

/// One selectable test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TestSpec {
    /// The `-t` name (`lrange` is accepted as `lrange_100`).
    pub(super) name: &'static str,
    /// The key it works on and how, for collection tests.
    pub(super) collection: Option<(Coll, Effect)>,
    /// Whether it reads or writes the `key:__rand_int__` string keys (so the
    /// unmeasured SET warm-up matters to it).
    pub(super) string_keys: bool,
    /// A custom command redis-benchmark sends instead of `-t <name>` (the
    /// scripting tests), reported under `name` in upper case.
    pub(super) command: Option<&'static [&'static str]>,
}

/// The script of the `eval` and `evalsha` tests (issue 19's benchmark).
pub(super) const SET_SCRIPT: &str = "return redis.call('set',KEYS[1],ARGV[1])";

/// `SET_SCRIPT`'s SHA1, which `SCRIPT LOAD` (run before `evalsha`) returns.
pub(super) const SET_SCRIPT_SHA: &str = "c686f316aaf1eb01d5a4de1b0b63cd233010e63d";

impl TestSpec {
    /// How redis-benchmark is told to run it: `-t <name>`, or for
    /// `lrange_N` the custom command (its fill is done beforehand).
    pub(super) fn invocation(&self) -> Vec<String> {
        if let Some(command) = self.command {
            return command.iter().map(|s| s.to_string()).collect();
        }
        match self.collection {
            Some((coll, Effect::Range(n))) => vec![
                "LRANGE".into(),
                coll.key().into(),
                "0".into(),
                (n - 1).to_string(),
            ],
            _ => vec!["-t".into(), self.name.into()],
        }
    }

    /// The name redis-benchmark's CSV gives the custom `LRANGE` command,
    /// replaced by the name `-t lrange_N` would print.
    pub(super) fn rename(&self, csv_test: &str) -> String {
        if self.command.is_some() {
            return self.name.to_ascii_uppercase();
        }
        match self.collection {
            Some((_, Effect::Range(n))) if csv_test.eq_ignore_ascii_case(&self.custom_title()) => {
                format!("LRANGE_{n} (first {n} elements)")
            }
            _ => csv_test.to_string(),
        }
    }

    fn custom_title(&self) -> String {
        self.invocation().join(" ")
    }
}

const fn plain(name: &'static str, string_keys: bool) -> TestSpec {
    TestSpec {
        name,
        collection: None,
        string_keys,
        command: None,
    }
}

const fn coll(name: &'static str, c: Coll, e: Effect) -> TestSpec {
    TestSpec {
        name,
        collection: Some((c, e)),
        string_keys: false,
        command: None,
    }
}

const fn custom(name: &'static str, command: &'static [&'static str]) -> TestSpec {
    TestSpec {
        name,
        collection: None,
        string_keys: true,
        command: Some(command),
    }
}

/// redis-benchmark 7.0's tests in the order it runs them, less the ones
/// Basalt does not serve (7.0 has no `xadd` test; Basalt has no streams).
/// `ping` runs both PING tests in one invocation.
pub(super) const CATALOG: &[TestSpec] = &[
    plain("ping_inline", false),
    plain("ping_mbulk", false),
    plain("ping", false),
    plain("set", true),
    plain("get", true),
    plain("incr", false),
    coll("lpush", Coll::List, Effect::Push),
    coll("rpush", Coll::List, Effect::Push),
    coll("lpop", Coll::List, Effect::Pop),
    coll("rpop", Coll::List, Effect::Pop),
    coll("sadd", Coll::Set, Effect::Push),
    coll("hset", Coll::Hash, Effect::Push),
    coll("spop", Coll::Set, Effect::Pop),
    coll("zadd", Coll::Zset, Effect::Push),
    coll("zpopmin", Coll::Zset, Effect::Pop),
    coll("lrange_100", Coll::List, Effect::Range(100)),
    coll("lrange_300", Coll::List, Effect::Range(300)),
    coll("lrange_500", Coll::List, Effect::Range(500)),
    coll("lrange_600", Coll::List, Effect::Range(600)),
    plain("mset", true),
    // Not redis-benchmark tests: its custom-command mode with a script that
    // SETs `key:__rand_int__` (EVALSHA after an unmeasured SCRIPT LOAD).
    custom("eval", &["EVAL", SET_SCRIPT, "1", "key:__rand_int__", "v"]),
    custom(
        "evalsha",
        &["EVALSHA", SET_SCRIPT_SHA, "1", "key:__rand_int__", "v"],
    ),
    // Streams (issue 20): appends to one stream, then reads of its first
    // 100 entries (the stream the xadd runs filled).
    custom(
        "xadd",
        &["XADD", "mystream", "*", "myfield", "__rand_int__"],
    ),
    custom(
        "xrange_100",
        &["XRANGE", "mystream", "-", "+", "COUNT", "100"],
    ),
];

/// Resolves `--tests` into catalogue entries in redis-benchmark's order,
/// without duplicates. Unknown names are an error that lists the known ones.
pub(super) fn select(names: &[String]) -> Result<Vec<TestSpec>> {
    let mut picked = Vec::new();
    for raw in names {
        let name = raw.trim().to_ascii_lowercase();
        let name = if name == "lrange" {
            "lrange_100".to_string()
        } else {
            name
        };
        let Some(i) = CATALOG.iter().position(|t| t.name == name) else {
            let known: Vec<&str> = CATALOG.iter().map(|t| t.name).collect();
            bail!(
                "unknown test {raw:?} in --tests: the redis-benchmark 7.0 tests Basalt serves are {} \
                 (and `lrange` for lrange_100)",
                known.join(",")
            );
        };
        if !picked.contains(&i) {
            picked.push(i);
        }
    }
    if picked.is_empty() {
        bail!("--tests is empty");
    }
    picked.sort_unstable();
    Ok(picked.into_iter().map(|i| CATALOG[i]).collect())
}

/// The collection keys the tests use, each once.
pub(super) fn collections_of(tests: &[TestSpec]) -> Vec<Coll> {
    let mut out: Vec<Coll> = tests
        .iter()
        .filter_map(|t| t.collection)
        .map(|(c, _)| c)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// A collection's length (LLEN, SCARD, HLEN or ZCARD; 0 when absent).
pub(super) fn length(conn: &mut Conn, c: Coll) -> Result<u64> {
    let n = conn.integer(cmd([c.len_command(), c.key()]))?;
    Ok(u64::try_from(n)?)
}

/// Deletes the collection keys, so a round starts from nothing.
pub(super) fn reset(conn: &mut Conn, colls: &[Coll]) -> Result<()> {
    if !colls.is_empty() {
        conn.integer(cmd(
            std::iter::once("DEL").chain(colls.iter().map(|c| c.key()))
        ))?;
    }
    Ok(())
}

/// What the unmeasured setup before one measured collection run found and
/// did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Prepared {
    pub(super) coll: Coll,
    /// The key's length when the measured run starts.
    pub(super) len_before: u64,
    /// Members this program added first (pop top-up, LRANGE fill).
    pub(super) added: u64,
    /// Commands the setup sent (length reads included).
    pub(super) commands: u64,
}

/// Brings the key of a collection test into the state the module doc
/// promises: a pop finds at least `requests` members, an `lrange_N` a fresh
/// list of `max(N, requests)` elements of `data_size` bytes, a push finds
/// whatever the tests before it left. Plain tests need nothing (`None`).
pub(super) fn prepare(
    conn: &mut Conn,
    spec: &TestSpec,
    requests: u64,
    data_size: usize,
) -> Result<Option<Prepared>> {
    let Some((c, effect)) = spec.collection else {
        return Ok(None);
    };
    let found = length(conn, c)?;
    let mut commands = 1;
    let (target, fresh) = match effect {
        Effect::Push => (found, false),
        Effect::Pop => (found.max(requests), false),
        Effect::Range(n) => (requests.max(u64::from(n)), true),
    };
    let start = if fresh {
        conn.integer(cmd(["DEL", c.key()]))?;
        commands += 1;
        0
    } else {
        found
    };
    let added = target - start;
    // Top-up members are named `fill:<i>`, never `element:<digits>` like
    // redis-benchmark's, so they cannot collide with what is there.
    conn.send_all(added, SETUP_BATCH, |i| match c {
        Coll::List => cmd([
            b"RPUSH".as_slice(),
            c.key().as_bytes(),
            &filler(data_size, i),
        ]),
        Coll::Set => cmd(["SADD".to_string(), c.key().into(), format!("fill:{i}")]),
        Coll::Zset => cmd([
            "ZADD".to_string(),
            c.key().into(),
            i.to_string(),
            format!("fill:{i}"),
        ]),
        Coll::Hash => cmd([
            b"HSET".as_slice(),
            c.key().as_bytes(),
            format!("fill:{i}").as_bytes(),
            &filler(data_size, i),
        ]),
    })?;
    commands += added;
    let len_before = if added > 0 || fresh {
        commands += 1;
        let now = length(conn, c)?;
        ensure!(
            now == target,
            "{} {} holds {now} members after the setup, expected {target}",
            c.len_command(),
            c.key()
        );
        now
    } else {
        found
    };
    Ok(Some(Prepared {
        coll: c,
        len_before,
        added,
        commands,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(t: &[TestSpec]) -> Vec<&'static str> {
        t.iter().map(|t| t.name).collect()
    }

    #[test]
    fn tests_run_in_redis_benchmarks_order_so_pushes_precede_pops() {
        let asked: Vec<String> = ["zpopmin", "lpop", "LPUSH", "zadd", "lrange", "set", "lpop"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let got = select(&asked).unwrap();
        assert_eq!(
            names(&got),
            ["set", "lpush", "lpop", "zadd", "zpopmin", "lrange_100"]
        );
        assert_eq!(collections_of(&got), [Coll::List, Coll::Zset]);
    }

    #[test]
    fn unknown_and_unserved_tests_are_refused_by_name() {
        let err = select(&["geoadd".to_string()]).unwrap_err().to_string();
        assert!(
            err.starts_with("unknown test \"geoadd\" in --tests"),
            "{err}"
        );
        assert!(err.contains("lpush,rpush,lpop"), "{err}");
        assert!(select(&[]).is_err());
    }

    #[test]
    fn lrange_runs_as_a_custom_command_reported_under_its_test_name() {
        let t = select(&["lrange_300".to_string()]).unwrap()[0];
        assert_eq!(t.invocation(), ["LRANGE", "mylist", "0", "299"]);
        assert_eq!(
            t.rename("LRANGE mylist 0 299"),
            "LRANGE_300 (first 300 elements)"
        );
        let set = select(&["set".to_string()]).unwrap()[0];
        assert_eq!(set.invocation(), ["-t", "set"]);
        assert_eq!(set.rename("SET"), "SET");
    }
}
