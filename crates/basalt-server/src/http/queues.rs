//! Work queues and topics over HTTP (`docs/queues.md`): push, take with a
//! visibility timeout, ack/nack/touch by token, priorities, delays,
//! dead-lettering, capacity, lock, purge, stats, long polls and an event
//! stream; topics that keep their last N messages by index.
//!
//! The one idea a reader needs: **a queue is a handful of ordinary keys
//! (streams, a consumer group, a sorted set, a hash), and every queue
//! operation is one small program of stream commands run atomically**
//! ([`super::atomically`]: the exec gate held exclusively, one engine
//! write batch). So a queue is persistent and crash-atomic exactly as the
//! streams are, a RESP client sees it (and may XREADGROUP from it), and no
//! interleaving of HTTP requests, RESP commands, EXEC or scripts can hand
//! one delivery to two workers.
//!
//! Keys of queue `Q` (all share the hash tag `{Q}`):
//! - `queue:{Q}`: hash of the settings; exists for every queue;
//! - `queue:{Q}:P` for P in 0..=2: the stream of priority P (2 is served
//!   first), with the consumer group `workers`. An item is an entry (field
//!   `item`); an item in flight is a pending entry of the group, owned by
//!   the worker (the consumer), its delivery count the deliveries;
//! - `queue:{Q}:delayed:P` and `queue:{Q}:due`: delayed items (stream per
//!   priority, and a sorted set `P:<id>` by due time in unix ms), moved
//!   into `queue:{Q}:P` once due by the next push, take or stats;
//! - `queue:{Q}:dead`: the dead letters.
//!
//! A delivery's token is `P-<ms>-<seq>-<deliveries>`: the entry and the
//! delivery count it was handed out with. Ack, nack and touch check that
//! the entry is still pending with that count, so a token is refused (409)
//! once its item has been delivered again, acknowledged, dead-lettered or
//! purged: each delivery is acknowledged at most once.
//!
//! Topic `T` is the stream `topic:{T}` whose ids are `0-<index>`, so
//! `XADD topic:{T} MAXLEN N 0-* ...` numbers the messages 1, 2, 3 and
//! keeps the last N, and reading from an index is an XRANGE.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use basalt_resp::Frame;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{atomically, ApiError, ApiResult, Atomic, Req, State, Texts};
use crate::state::Shared;

/// The consumer group of every priority stream.
const GROUP: &[u8] = b"workers";
/// Priority levels: 0 (low) to 2 (high), as hustmq's.
const LEVELS: u8 = 3;
/// The priority of a push that names none.
const DEFAULT_PRIORITY: u8 = 1;
/// Longest long poll, in seconds.
const MAX_WAIT_S: f64 = 300.0;
/// A long poll re-checks at least this often: a visibility timeout that
/// runs out signals nothing.
const RECHECK: Duration = Duration::from_secs(1);
/// Workers idle for longer than this are no longer listed in stats
/// (unless they hold items).
const SEEN_RECENTLY_MS: i64 = 60_000;
/// Delayed items moved into their streams by one operation, at most.
const PROMOTE_PER_OP: &str = "1000";
/// Keep-alive comment interval of the event stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

// ------------------------------------------------------------------ names

/// The keys of one queue.
struct Names {
    conf: Vec<u8>,
    ready: Vec<Vec<u8>>,
    delayed: Vec<Vec<u8>>,
    due: Vec<u8>,
    dead: Vec<u8>,
}

impl Names {
    fn of(queue: &[u8]) -> Names {
        let base = [b"queue:{".as_slice(), queue, b"}"].concat();
        let with = |suffix: &str| [base.as_slice(), suffix.as_bytes()].concat();
        Names {
            ready: (0..LEVELS).map(|p| with(&format!(":{p}"))).collect(),
            delayed: (0..LEVELS)
                .map(|p| with(&format!(":delayed:{p}")))
                .collect(),
            due: with(":due"),
            dead: with(":dead"),
            conf: base,
        }
    }

    fn all(&self) -> Vec<&[u8]> {
        let mut keys: Vec<&[u8]> = vec![&self.conf, &self.due, &self.dead];
        keys.extend(self.ready.iter().map(|k| k.as_slice()));
        keys.extend(self.delayed.iter().map(|k| k.as_slice()));
        keys
    }
}

/// The keys of the request's queue; 400 for an empty name.
fn names(req: &Req) -> ApiResult<Names> {
    match req.path(0) {
        [] => Err(ApiError::bad_request("the queue name is empty")),
        q => Ok(Names::of(q)),
    }
}

// --------------------------------------------------------------- settings

/// A queue's settings (the hash `queue:{Q}`).
#[derive(Debug, Clone, Copy)]
struct Settings {
    /// Most items (ready, in flight, delayed) the queue holds; 0 = no limit.
    capacity: u64,
    visibility_ms: u64,
    /// Deliveries after which an expired item is dead-lettered; 0 = never.
    max_deliveries: u64,
    locked: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            capacity: 0,
            visibility_ms: 30_000,
            max_deliveries: 5,
            locked: false,
        }
    }
}

impl Settings {
    fn json(&self) -> Value {
        json!({
            "capacity": self.capacity,
            "visibility_timeout": self.visibility_ms as f64 / 1000.0,
            "max_deliveries": self.max_deliveries,
        })
    }

    /// Writes them (creating the queue).
    fn save(&self, a: &mut Atomic<'_>, n: &Names) -> ApiResult<()> {
        let (c, v, m) = (
            self.capacity.to_string(),
            self.visibility_ms.to_string(),
            self.max_deliveries.to_string(),
        );
        a.call(&[
            b"hset",
            &n.conf,
            b"capacity",
            c.as_bytes(),
            b"visibility_timeout_ms",
            v.as_bytes(),
            b"max_deliveries",
            m.as_bytes(),
            b"locked",
            if self.locked { b"1" } else { b"0" },
        ])?;
        Ok(())
    }
}

/// The queue's settings, `None` when there is no such queue.
fn settings(a: &mut Atomic<'_>, n: &Names) -> ApiResult<Option<Settings>> {
    let fields = match a.call(&[b"hgetall", &n.conf])? {
        Frame::Array(f) if !f.is_empty() => f,
        _ => return Ok(None),
    };
    let mut s = Settings::default();
    for pair in fields.chunks(2) {
        let (Some(k), Some(v)) = (bulk(&pair[0]), pair.get(1).and_then(bulk)) else {
            continue;
        };
        let v: u64 = std::str::from_utf8(v)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        match k {
            b"capacity" => s.capacity = v,
            b"visibility_timeout_ms" => s.visibility_ms = v.max(1),
            b"max_deliveries" => s.max_deliveries = v,
            b"locked" => s.locked = v != 0,
            _ => {}
        }
    }
    Ok(Some(s))
}

/// The settings, or 404 for a queue that does not exist.
fn existing(a: &mut Atomic<'_>, n: &Names) -> ApiResult<Settings> {
    settings(a, n)?.ok_or_else(|| ApiError::not_found("queue"))
}

// ------------------------------------------------------------ reply shapes

fn bulk(f: &Frame) -> Option<&[u8]> {
    match f {
        Frame::Bulk(b) | Frame::Simple(b) => Some(b),
        _ => None,
    }
}

fn items(f: &Frame) -> &[Frame] {
    match f {
        Frame::Array(a) => a,
        _ => &[],
    }
}

fn int(f: &Frame) -> i64 {
    match f {
        Frame::Integer(n) => *n,
        _ => 0,
    }
}

/// An entry reply `[id, [field, value, ...]]` as (id, value of `field`).
fn entry<'f>(f: &'f Frame, field: &[u8]) -> Option<(&'f [u8], Option<&'f [u8]>)> {
    let e = items(f);
    let id = bulk(e.first()?)?;
    let fields = items(e.get(1)?);
    let value = fields
        .chunks(2)
        .find(|p| bulk(&p[0]) == Some(field))
        .and_then(|p| p.get(1).and_then(bulk));
    Some((id, value))
}

/// Runs a command on a priority stream's group; `None` when the stream or
/// its group is gone (NOGROUP, or XINFO's "no such key"), which for a
/// queue reads as "nothing there".
fn group_call(a: &mut Atomic<'_>, args: &[&[u8]]) -> ApiResult<Option<Frame>> {
    match a.try_call(args) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.starts_with("NOGROUP") || e == "ERR no such key" => Ok(None),
        Err(e) => Err(ApiError::from_redis(&e)),
    }
}

// ------------------------------------------------------------ parameters

fn float_param(req: &Req, name: &str, default: f64, max: f64) -> ApiResult<f64> {
    let Some(v) = req.param(name) else {
        return Ok(default);
    };
    match std::str::from_utf8(v)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
    {
        Some(x) if x.is_finite() && (0.0..=max).contains(&x) => Ok(x),
        _ => Err(ApiError::bad_request(format!(
            "{name} must be a number of seconds from 0 to {max}"
        ))),
    }
}

fn priority_param(req: &Req) -> ApiResult<Option<u8>> {
    match req.param("priority") {
        None => Ok(None),
        Some(p) => match p {
            [d @ b'0'..=b'9'] if d - b'0' < LEVELS => Ok(Some(d - b'0')),
            _ => Err(ApiError::bad_request(format!(
                "priority must be 0 to {} (higher is served first)",
                LEVELS - 1
            ))),
        },
    }
}

fn worker_param(req: &Req) -> ApiResult<Vec<u8>> {
    match req.param("worker") {
        Some(w) if !w.is_empty() => Ok(w.to_vec()),
        _ => Err(ApiError::bad_request(
            "name the worker taking items: ?worker=<name>",
        )),
    }
}

// ------------------------------------------------------------ operations

/// Moves the delayed items that are due into their priority streams.
fn promote(a: &mut Atomic<'_>, n: &Names) -> ApiResult<()> {
    let now = a.now_ms().to_string();
    let due = a.call(&[
        b"zrangebyscore",
        &n.due,
        b"-inf",
        now.as_bytes(),
        b"LIMIT",
        b"0",
        PROMOTE_PER_OP.as_bytes(),
    ])?;
    for member in items(&due).iter().filter_map(bulk) {
        a.call(&[b"zrem", &n.due, member])?;
        let Some((p, id)) = split_member(member) else {
            continue;
        };
        let got = a.call(&[b"xrange", &n.delayed[p as usize], id, id])?;
        let Some((_, Some(item))) = items(&got).first().and_then(|e| entry(e, b"item")) else {
            continue;
        };
        let item = item.to_vec();
        a.call(&[b"xdel", &n.delayed[p as usize], id])?;
        add_ready(a, n, p, &item)?;
    }
    Ok(())
}

/// `P:<id>` of the due set.
fn split_member(m: &[u8]) -> Option<(u8, &[u8])> {
    match m {
        [d @ b'0'..=b'9', b':', id @ ..] if d - b'0' < LEVELS => Some((d - b'0', id)),
        _ => None,
    }
}

/// Appends a ready item to priority `p` (creating the stream and its group
/// on first use); returns the entry id.
fn add_ready(a: &mut Atomic<'_>, n: &Names, p: u8, item: &[u8]) -> ApiResult<Vec<u8>> {
    let key = &n.ready[p as usize];
    if int(&a.call(&[b"exists", key])?) == 0 {
        a.call(&[b"xgroup", b"create", key, GROUP, b"0", b"MKSTREAM"])?;
    }
    let id = a.call(&[b"xadd", key, b"*", b"item", item])?;
    Ok(bulk(&id).unwrap_or_default().to_vec())
}

/// Items the queue holds: ready, in flight and delayed.
fn held(a: &mut Atomic<'_>, n: &Names) -> ApiResult<u64> {
    let mut total = int(&a.call(&[b"zcard", &n.due])?);
    for key in &n.ready {
        total += int(&a.call(&[b"xlen", key])?);
    }
    Ok(total.max(0) as u64)
}

/// One delivery handed to a worker.
#[derive(Debug, Serialize, Deserialize)]
struct Delivery {
    priority: u8,
    #[serde(with = "serde_bytes")]
    id: Vec<u8>,
    #[serde(with = "serde_bytes")]
    item: Vec<u8>,
    deliveries: i64,
    visibility_ms: u64,
}

impl Delivery {
    fn json(&self) -> Value {
        let id = format!("{}-{}", self.priority, String::from_utf8_lossy(&self.id));
        let t = Texts::for_all([self.item.as_slice()]);
        t.mark(json!({
            "item": t.value(&self.item),
            "token": format!("{id}-{}", self.deliveries),
            "id": id,
            "priority": self.priority,
            "deliveries": self.deliveries,
            "visible_in_ms": self.visibility_ms,
        }))
    }
}

/// Moves an expired delivery to the dead letters.
fn dead_letter(
    a: &mut Atomic<'_>,
    n: &Names,
    p: u8,
    id: &[u8],
    deliveries: i64,
    worker: &[u8],
) -> ApiResult<()> {
    let key = &n.ready[p as usize];
    let got = a.call(&[b"xrange", key, id, id])?;
    // An entry without an `item` field (written from RESP) is dead-lettered
    // with an empty item rather than dropped.
    if let Some((_, item)) = items(&got).first().and_then(|e| entry(e, b"item")) {
        let item = item.unwrap_or_default().to_vec();
        let (pr, d) = (p.to_string(), deliveries.to_string());
        let orig = [pr.as_bytes(), b"-", id].concat();
        a.call(&[
            b"xadd",
            &n.dead,
            b"*",
            b"item",
            &item,
            b"priority",
            pr.as_bytes(),
            b"deliveries",
            d.as_bytes(),
            b"id",
            &orig,
            b"worker",
            worker,
        ])?;
    }
    a.call(&[b"xack", key, GROUP, id])?;
    a.call(&[b"xdel", key, id])?;
    Ok(())
}

/// Hands the next item to `worker`, or `None` when nothing is ready (or
/// the queue is locked or absent). See `docs/queues.md` for the order.
fn take(a: &mut Atomic<'_>, n: &Names, s: &Settings, worker: &[u8]) -> ApiResult<Option<Delivery>> {
    promote(a, n)?;
    let vis = s.visibility_ms.to_string();
    for p in (0..LEVELS).rev() {
        let key = n.ready[p as usize].clone();
        // Redeliveries first: the oldest entry whose timeout ran out.
        let expired: &[&[u8]] = &[
            b"xpending",
            &key,
            GROUP,
            b"IDLE",
            vis.as_bytes(),
            b"-",
            b"+",
            b"1",
        ];
        while let Some(pending) = group_call(a, expired)? {
            let Some(row) = items(&pending).first().map(items) else {
                break;
            };
            let (Some(id), Some(owner)) = (row.first().and_then(bulk), row.get(1).and_then(bulk))
            else {
                break;
            };
            let (id, owner) = (id.to_vec(), owner.to_vec());
            let count = row.get(3).map_or(0, int);
            if s.max_deliveries > 0 && count as u64 >= s.max_deliveries {
                dead_letter(a, n, p, &id, count, &owner)?;
                continue;
            }
            let claimed = a.call(&[b"xclaim", &key, GROUP, worker, vis.as_bytes(), &id])?;
            if let Some((_, item)) = items(&claimed).first().and_then(|e| entry(e, b"item")) {
                return Ok(Some(Delivery {
                    priority: p,
                    id,
                    item: item.unwrap_or_default().to_vec(),
                    deliveries: count + 1,
                    visibility_ms: s.visibility_ms,
                }));
            }
            // The entry was deleted behind the queue's back (XDEL from
            // RESP): XCLAIM dropped it from the pending list; go on.
        }
        // Then the oldest item never delivered.
        let read: &[&[u8]] = &[
            b"xreadgroup",
            b"GROUP",
            GROUP,
            worker,
            b"COUNT",
            b"1",
            b"STREAMS",
            &key,
            b">",
        ];
        let got = match group_call(a, read)? {
            Some(f) => f,
            None => {
                // A stream whose group was destroyed from RESP: recreate
                // it from the start.
                if int(&a.call(&[b"exists", &key])?) == 0 {
                    continue;
                }
                a.call(&[b"xgroup", b"create", &key, GROUP, b"0"])?;
                a.call(read)?
            }
        };
        // [[key, [[id, [field, value]]]]]
        let first = items(&got)
            .first()
            .and_then(|s| items(s).get(1))
            .and_then(|es| items(es).first());
        if let Some((id, item)) = first.and_then(|e| entry(e, b"item")) {
            return Ok(Some(Delivery {
                priority: p,
                id: id.to_vec(),
                item: item.unwrap_or_default().to_vec(),
                deliveries: 1,
                visibility_ms: s.visibility_ms,
            }));
        }
    }
    Ok(None)
}

/// A token's parts: priority, entry id, deliveries.
fn parse_token(t: &[u8]) -> ApiResult<(u8, Vec<u8>, i64)> {
    let bad = || ApiError::bad_request("malformed token (expected P-<ms>-<seq>-<deliveries>)");
    let s = std::str::from_utf8(t).map_err(|_| bad())?;
    let parts: Vec<&str> = s.split('-').collect();
    let [p, ms, seq, d] = parts.as_slice() else {
        return Err(bad());
    };
    let p: u8 = p.parse().map_err(|_| bad())?;
    let (ms, seq, d): (u64, u64, i64) = (
        ms.parse().map_err(|_| bad())?,
        seq.parse().map_err(|_| bad())?,
        d.parse().map_err(|_| bad())?,
    );
    if p >= LEVELS || d < 1 {
        return Err(bad());
    }
    Ok((p, format!("{ms}-{seq}").into_bytes(), d))
}

fn stale() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "STALE_TOKEN",
        "the token's delivery is over: the item was delivered again, acknowledged, \
         dead-lettered or purged since",
    )
}

/// Checks that the token's delivery is still the item's current one;
/// returns (stream key, entry id, owner).
fn current(a: &mut Atomic<'_>, n: &Names, token: &[u8]) -> ApiResult<(Vec<u8>, Vec<u8>, Vec<u8>)> {
    let (p, id, d) = parse_token(token)?;
    let key = n.ready[p as usize].clone();
    let Some(pending) = group_call(a, &[b"xpending", &key, GROUP, &id, &id, b"1"])? else {
        return Err(stale());
    };
    let row = items(&pending).first().map(items).unwrap_or(&[]);
    let owner = row.get(1).and_then(bulk).map(|o| o.to_vec());
    match (owner, row.get(3).map(int)) {
        (Some(owner), Some(count)) if count == d => Ok((key, id, owner)),
        _ => Err(stale()),
    }
}

// ------------------------------------------------------------ long polls

/// What a long poll's attempt found, and when (unix ms) to look again
/// if it found nothing and knows a time.
type Attempt<T> = ApiResult<(Option<T>, Option<u64>)>;

/// Runs `attempt` until it gives something or `wait` has passed, woken by
/// a signal on one of `keys` (a push, an ack, a nack) and re-checking at
/// least every [`RECHECK`] (and at `wake_at`, unix ms, when the attempt
/// names a time such as a delayed item's). Ends early when the server
/// stops.
async fn poll<T, F: std::future::Future<Output = Attempt<T>>>(
    shared: &Shared,
    state: &State,
    db: usize,
    keys: &[Vec<u8>],
    wait: Duration,
    mut attempt: impl FnMut() -> F,
) -> ApiResult<Option<T>> {
    let (got, _) = attempt().await?;
    if got.is_some() || wait.is_zero() {
        return Ok(got);
    }
    let deadline = Instant::now() + wait;
    let watch = shared.blocking.watch(db, keys);
    let mut stop = state.stop.subscribe();
    loop {
        let (got, wake_at) = attempt().await?;
        if got.is_some() {
            return Ok(got);
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        let mut nap = (deadline - now).min(RECHECK);
        // A time already past (a due item a locked queue holds back)
        // leaves the recheck as it is: no spinning.
        if let Some(in_ms) = wake_at.and_then(|at| at.checked_sub(crate::state::now_ms())) {
            nap = nap.min(Duration::from_millis(in_ms.max(1)));
        }
        tokio::select! {
            _ = watch.notified() => {}
            _ = tokio::time::sleep(nap) => {}
            _ = stop.wait_for(|s| *s) => return Ok(None),
        }
    }
}

/// The earliest due time of a delayed item, if any.
fn next_due(a: &mut Atomic<'_>, n: &Names) -> ApiResult<Option<u64>> {
    let first = a.call(&[b"zrange", &n.due, b"0", b"0", b"WITHSCORES"])?;
    Ok(items(&first)
        .get(1)
        .and_then(bulk)
        .and_then(|s| std::str::from_utf8(s).ok()?.parse::<f64>().ok())
        .map(|s| s as u64))
}

/// The keys whose signals may make an item available to a take.
fn wake_keys(n: &Names) -> Vec<Vec<u8>> {
    let mut k = n.ready.clone();
    k.push(n.conf.clone());
    // A delayed push: the wait shortens to its due time.
    k.push(n.due.clone());
    k
}

// ----------------------------------------------------------------- routes

/// `GET /v1/queues`
pub(crate) async fn list(req: Req) -> ApiResult {
    let mut names = Vec::new();
    let mut cursor = b"0".to_vec();
    loop {
        let reply = req
            .command(&[
                b"scan",
                &cursor,
                b"MATCH",
                b"queue:{*}",
                b"COUNT",
                b"1000",
                b"TYPE",
                b"hash",
            ])
            .await?;
        let parts = items(&reply);
        cursor = parts.first().and_then(bulk).unwrap_or(b"0").to_vec();
        for key in parts
            .get(1)
            .map(items)
            .unwrap_or(&[])
            .iter()
            .filter_map(bulk)
        {
            if let Some(q) = key
                .strip_prefix(b"queue:{")
                .and_then(|k| k.strip_suffix(b"}"))
            {
                names.push(q.to_vec());
            }
        }
        if cursor == b"0" {
            break;
        }
    }
    names.sort();
    names.dedup();
    let t = Texts::for_all(names.iter().map(|q| q.as_slice()));
    let list: Vec<Value> = names.iter().map(|q| t.value(q)).collect();
    Ok(super::json_ok(t.mark(json!({ "queues": list }))))
}

// ------------------------------------------------- operations that write

/// A queue operation as a unit: one atomic program ([`super::atomically`])
/// where the request arrived, or, on a node of a replicated group, a log
/// entry (`crate::repl::Proposal::Queue`) that every node runs the same
/// way at the entry's time, so every node's queue holds the same
/// deliveries, tokens and dead letters. What it answers travels back to
/// the node the request came to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct QueueWrite {
    db: u32,
    #[serde(with = "serde_bytes")]
    queue: Vec<u8>,
    op: QueueOp,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum QueueOp {
    Configure {
        capacity: Option<u64>,
        max_deliveries: Option<u64>,
        visibility_ms: Option<u64>,
    },
    /// Stats promote due delayed items, so they write too.
    Stats,
    Delete,
    Push {
        priority: u8,
        delay_ms: u64,
        items: Vec<Vec<u8>>,
    },
    /// One take attempt (a long poll makes several).
    Take {
        worker: Vec<u8>,
        prefetch: Option<usize>,
    },
    Ack {
        token: Vec<u8>,
    },
    Nack {
        token: Vec<u8>,
        delay_ms: u64,
    },
    Touch {
        token: Vec<u8>,
    },
    Lock {
        locked: bool,
    },
    Purge {
        only: Option<u8>,
        dead: bool,
    },
}

/// What a queue operation answers.
#[derive(Debug, Serialize, Deserialize)]
enum QueueOut {
    /// A JSON answer.
    Json(super::Answer),
    /// A take attempt: the delivery, or when to look again (unix ms).
    Take(Option<Delivery>, Option<u64>),
}

impl QueueOut {
    fn json(status: StatusCode, v: Value) -> QueueOut {
        QueueOut::Json(super::Answer::json(status, v, None))
    }

    fn into_response(self) -> axum::response::Response {
        match self {
            QueueOut::Json(answer) => answer.into_response(),
            QueueOut::Take(Some(d), _) => super::json_ok(d.json()),
            QueueOut::Take(None, _) => StatusCode::NO_CONTENT.into_response(),
        }
    }

    fn into_attempt(self) -> Attempt<Delivery> {
        match self {
            QueueOut::Take(d, at) => Ok((d, at)),
            QueueOut::Json(_) => Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "INTERNAL",
                "a take answered something else",
            )),
        }
    }
}

impl QueueWrite {
    /// Runs the operation's program (the caller holds the exec gate and a
    /// write batch: [`super::atomically`] or the replicated apply).
    fn program(&self, a: &mut Atomic<'_>) -> ApiResult<QueueOut> {
        let n = Names::of(&self.queue);
        let queue = &self.queue;
        let db = self.db as usize;
        match &self.op {
            QueueOp::Configure {
                capacity,
                max_deliveries,
                visibility_ms,
            } => {
                let mut s = settings(a, &n)?.unwrap_or_default();
                s.capacity = capacity.unwrap_or(s.capacity);
                s.max_deliveries = max_deliveries.unwrap_or(s.max_deliveries);
                s.visibility_ms = visibility_ms.unwrap_or(s.visibility_ms);
                s.save(a, &n)?;
                // Takes waiting on a locked or absent queue re-check.
                a.shared.blocking.signal(db, &n.conf);
                Ok(QueueOut::json(StatusCode::OK, s.json()))
            }
            QueueOp::Stats => {
                let body = stats_of(a, &n, queue)?;
                Ok(QueueOut::json(StatusCode::OK, body))
            }
            QueueOp::Delete => {
                let existed = int(&a.call(&[b"exists", &n.conf])?) == 1;
                let mut args: Vec<&[u8]> = vec![b"del"];
                args.extend(n.all());
                a.call(&args)?;
                Ok(QueueOut::json(
                    StatusCode::OK,
                    json!({ "deleted": existed }),
                ))
            }
            QueueOp::Push {
                priority,
                delay_ms,
                items: new,
            } => {
                let (p, delay_ms) = (*priority, *delay_ms);
                let s = match settings(a, &n)? {
                    Some(s) => s,
                    None => {
                        let s = Settings::default();
                        s.save(a, &n)?;
                        s
                    }
                };
                promote(a, &n)?;
                if s.capacity > 0 && held(a, &n)? + new.len() as u64 > s.capacity {
                    return Err(ApiError {
                        extra: Some(("capacity".into(), s.capacity)),
                        ..ApiError::new(
                            StatusCode::INSUFFICIENT_STORAGE,
                            "QUEUE_FULL",
                            format!(
                                "queue {} is full (capacity {})",
                                String::from_utf8_lossy(queue),
                                s.capacity
                            ),
                        )
                    });
                }
                let mut ids = Vec::with_capacity(new.len());
                for item in new.iter() {
                    let id = if delay_ms == 0 {
                        add_ready(a, &n, p, item)?
                    } else {
                        let key = &n.delayed[p as usize];
                        let id = a.call(&[b"xadd", key, b"*", b"item", item])?;
                        let id = bulk(&id).unwrap_or_default().to_vec();
                        let at = (a.now_ms() + delay_ms).to_string();
                        let member = [format!("{p}:").as_bytes(), &id].concat();
                        a.call(&[b"zadd", &n.due, at.as_bytes(), &member])?;
                        id
                    };
                    ids.push(format!("{p}-{}", String::from_utf8_lossy(&id)));
                }

                let body = json!({ "ids": ids, "priority": p, "delayed": delay_ms > 0 });
                Ok(QueueOut::json(StatusCode::CREATED, body))
            }
            QueueOp::Take { worker, prefetch } => {
                // An absent or locked queue hands out nothing, whatever is due.
                let Some(s) = settings(a, &n)?.filter(|s| !s.locked) else {
                    return Ok(QueueOut::Take(None, None));
                };
                if let Some(max) = prefetch {
                    if in_flight_of(a, &n, &s, worker)? >= *max {
                        return Ok(QueueOut::Take(None, None));
                    }
                }
                match take(a, &n, &s, worker)? {
                    Some(d) => Ok(QueueOut::Take(Some(d), None)),
                    None => Ok(QueueOut::Take(None, next_due(a, &n)?)),
                }
            }
            QueueOp::Ack { token } => {
                let (key, id, _) = current(a, &n, token)?;
                a.call(&[b"xack", &key, GROUP, &id])?;
                a.call(&[b"xdel", &key, &id])?;
                // Event streams waiting for their worker's in-flight count
                // to drop.
                a.shared.blocking.signal(db, &key);
                Ok(QueueOut::json(StatusCode::OK, json!({ "acked": true })))
            }
            QueueOp::Nack { token, delay_ms } => {
                let s = existing(a, &n)?;
                let (key, id, owner) = current(a, &n, token)?;
                // Idle = timeout - delay: due again after `delay`; JUSTID
                // keeps the delivery count (the next take counts one more).
                let idle = s.visibility_ms.saturating_sub(*delay_ms).to_string();
                a.call(&[
                    b"xclaim",
                    &key,
                    GROUP,
                    &owner,
                    b"0",
                    &id,
                    b"IDLE",
                    idle.as_bytes(),
                    b"JUSTID",
                ])?;
                a.shared.blocking.signal(db, &key);
                Ok(QueueOut::json(StatusCode::OK, json!({ "released": true })))
            }
            QueueOp::Touch { token } => {
                let s = existing(a, &n)?;
                let (key, id, owner) = current(a, &n, token)?;
                a.call(&[b"xclaim", &key, GROUP, &owner, b"0", &id, b"JUSTID"])?;
                let body = json!({ "visible_in_ms": s.visibility_ms });
                Ok(QueueOut::json(StatusCode::OK, body))
            }
            QueueOp::Lock { locked } => {
                existing(a, &n)?;
                let flag: &[u8] = if *locked { b"1" } else { b"0" };
                a.call(&[b"hset", &n.conf, b"locked", flag])?;
                a.shared.blocking.signal(db, &n.conf);
                Ok(QueueOut::json(StatusCode::OK, json!({ "locked": locked })))
            }
            QueueOp::Purge { only, dead } => {
                let (only, dead) = (*only, *dead);
                let purged: i64 = (|| -> ApiResult<i64> {
                    existing(a, &n)?;
                    if dead {
                        let len = int(&a.call(&[b"xlen", &n.dead])?);
                        a.call(&[b"del", &n.dead])?;
                        return Ok(len);
                    }
                    let levels: Vec<u8> = match only {
                        Some(p) => vec![p],
                        None => (0..LEVELS).collect(),
                    };
                    let mut purged = 0;
                    for &p in &levels {
                        let (ready, delayed) = (&n.ready[p as usize], &n.delayed[p as usize]);
                        purged +=
                            int(&a.call(&[b"xlen", ready])?) + int(&a.call(&[b"xlen", delayed])?);
                        a.call(&[b"del", ready, delayed])?;
                    }
                    if only.is_none() {
                        a.call(&[b"del", &n.due])?;
                    } else {
                        let all = a.call(&[b"zrange", &n.due, b"0", b"-1"])?;
                        let gone: Vec<&[u8]> = items(&all)
                            .iter()
                            .filter_map(bulk)
                            .filter(|m| split_member(m).is_some_and(|(p, _)| levels.contains(&p)))
                            .collect();
                        if !gone.is_empty() {
                            let mut args: Vec<&[u8]> = vec![b"zrem", &n.due];
                            args.extend(gone);
                            a.call(&args)?;
                        }
                    }

                    Ok(purged)
                })()?;
                Ok(QueueOut::json(StatusCode::OK, json!({ "purged": purged })))
            }
        }
    }

    /// Runs it on the applying node of a replicated group (the exec gate
    /// held, the entry's write batch open, the clock pinned to `time_ms`):
    /// the answer for the node that proposed it.
    pub(crate) fn apply(
        &self,
        shared: &Shared,
        client: Arc<crate::state::ClientInfo>,
        time_ms: u64,
    ) -> Result<Vec<u8>, String> {
        let (r, _) = super::run_program(
            shared,
            client,
            self.db as usize,
            time_ms,
            time_ms.saturating_mul(1_000_000),
            |a| self.program(a),
        );
        bincode::serialize(&r).map_err(|e| e.to_string())
    }
}

/// Runs `op` on the request's queue: atomically here, or as a log entry
/// on a node of a replicated group (forwarded to the leader by a
/// follower).
async fn run(
    shared: &Shared,
    state: &State,
    db: usize,
    queue: &[u8],
    op: QueueOp,
) -> ApiResult<QueueOut> {
    let w = QueueWrite {
        db: db as u32,
        queue: queue.to_vec(),
        op,
    };
    let Some(repl) = shared.repl.get() else {
        return atomically(shared, state, db, |a| w.program(a));
    };
    let reply = repl
        .propose(&crate::repl::Proposal::Queue {
            time_ms: crate::state::now_ms(),
            write: w,
        })
        .await
        .map_err(|line| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "CLUSTERDOWN", line))?;
    bincode::deserialize::<ApiResult<QueueOut>>(&reply).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            format!("unreadable replicated answer: {e}"),
        )
    })?
}

/// [`run`] for a route: the operation's answer as the response.
async fn respond(req: &Req, op: QueueOp) -> ApiResult {
    names(req)?;
    Ok(run(&req.shared, &req.state, req.db, req.path(0), op)
        .await?
        .into_response())
}

/// The body of a queue's stats (see `GET /v1/queues/{queue}`).
fn stats_of(a: &mut Atomic<'_>, n: &Names, queue: &[u8]) -> ApiResult<Value> {
    let s = existing(a, n)?;
    promote(a, n)?;
    let mut levels = Vec::new();
    let (mut ready, mut in_flight, mut delayed) = (0, 0, 0);
    // worker -> (in flight, idle ms)
    let mut workers: Vec<(Vec<u8>, i64, i64)> = Vec::new();
    for p in (0..LEVELS).rev() {
        let key = &n.ready[p as usize];
        let len = int(&a.call(&[b"xlen", key])?);
        // Deliveries past their visibility timeout (timed out or
        // nacked) are ready again, not in flight.
        let rows = group_call(a, &[b"xpending", key, GROUP, b"-", b"+", b"1000000000"])?
            .unwrap_or(Frame::Array(Vec::new()));
        let mut pending = 0;
        for row in items(&rows).iter().filter(|row| live(row, &s)) {
            pending += 1;
            let Some(owner) = items(row).get(1).and_then(bulk) else {
                continue;
            };
            match workers.iter_mut().find(|w| w.0 == owner) {
                Some(w) => w.1 += 1,
                None => workers.push((owner.to_vec(), 1, i64::MAX)),
            }
        }
        let later = int(&a.call(&[b"xlen", &n.delayed[p as usize]])?);
        levels.push(json!({
            "priority": p, "ready": len - pending, "in_flight": pending, "delayed": later,
        }));
        ready += len - pending;
        in_flight += pending;
        delayed += later;
        let Some(consumers) = group_call(a, &[b"xinfo", b"consumers", key, GROUP])? else {
            continue;
        };
        // The workers' last take (a consumer's seen time).
        for c in items(&consumers) {
            let (mut name, mut idle) = (None, i64::MAX);
            for pair in items(c).chunks(2) {
                match (bulk(&pair[0]), pair.get(1)) {
                    (Some(b"name"), Some(v)) => name = bulk(v).map(|v| v.to_vec()),
                    (Some(b"idle"), Some(v)) => idle = int(v),
                    _ => {}
                }
            }
            let Some(name) = name else { continue };
            match workers.iter_mut().find(|w| w.0 == name) {
                Some(w) => w.2 = w.2.min(idle),
                None => workers.push((name, 0, idle)),
            }
        }
    }
    let dead = int(&a.call(&[b"xlen", &n.dead])?);
    workers.retain(|w| w.1 > 0 || w.2 <= SEEN_RECENTLY_MS);
    workers.sort_by(|x, y| x.0.cmp(&y.0));
    let mut texts: Vec<&[u8]> = vec![&queue];
    texts.extend(workers.iter().map(|w| w.0.as_slice()));
    let t = Texts::for_all(texts);
    let workers: Vec<Value> = workers
            .iter()
            .map(|(name, pending, idle)| {
                json!({"worker": t.value(name), "in_flight": pending, "idle_ms": idle})
            })
            .collect();
    Ok(t.mark(json!({
        "queue": t.value(queue),
        "ready": ready,
        "in_flight": in_flight,
        "delayed": delayed,
        "dead": dead,
        "total": ready + in_flight + delayed,
        "priorities": levels,
        "workers": workers,
        "locked": s.locked,
        "settings": s.json(),
    })))
}

/// `PUT /v1/queues/{queue}`: settings (creates the queue).
pub(crate) async fn configure(req: Req) -> ApiResult {
    let body: Value = if req.body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?
    };
    let Value::Object(fields) = &body else {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    };
    let uint = |name: &str| -> ApiResult<Option<u64>> {
        match fields.get(name) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                ApiError::bad_request(format!("{name} must be a non-negative integer"))
            }),
        }
    };
    let capacity = uint("capacity")?;
    let max_deliveries = uint("max_deliveries")?;
    let visibility_ms = match fields.get("visibility_timeout") {
        None => None,
        Some(v) => match v.as_f64() {
            Some(s) if s > 0.0 && s <= 86_400.0 * 365.0 => Some(((s * 1000.0) as u64).max(1)),
            _ => {
                return Err(ApiError::bad_request(
                    "visibility_timeout must be a positive number of seconds",
                ))
            }
        },
    };
    if let Some(k) = fields.keys().find(|k| {
        !matches!(
            k.as_str(),
            "capacity" | "visibility_timeout" | "max_deliveries"
        )
    }) {
        return Err(ApiError::bad_request(format!("unknown setting {k:?}")));
    }
    let op = QueueOp::Configure {
        capacity,
        max_deliveries,
        visibility_ms,
    };
    respond(&req, op).await
}

/// `GET /v1/queues/{queue}`: stats.
pub(crate) async fn stats(req: Req) -> ApiResult {
    respond(&req, QueueOp::Stats).await
}

/// `DELETE /v1/queues/{queue}`
pub(crate) async fn delete(req: Req) -> ApiResult {
    respond(&req, QueueOp::Delete).await
}

/// `POST /v1/queues/{queue}/items?priority=P&delay=S`
pub(crate) async fn push(req: Req) -> ApiResult {
    let priority = priority_param(&req)?.unwrap_or(DEFAULT_PRIORITY);
    let delay_ms = (float_param(&req, "delay", 0.0, 86_400.0 * 365.0)? * 1000.0) as u64;
    let items = super::collections::elements(&req)?;
    let op = QueueOp::Push {
        priority,
        delay_ms,
        items,
    };
    respond(&req, op).await
}

/// One take attempt for a long poll: the delivery, or when to look again.
async fn try_take(
    shared: &Shared,
    state: &State,
    db: usize,
    queue: &[u8],
    worker: &[u8],
    prefetch: Option<usize>,
) -> Attempt<Delivery> {
    let op = QueueOp::Take {
        worker: worker.to_vec(),
        prefetch,
    };
    run(shared, state, db, queue, op).await?.into_attempt()
}

/// Items `worker` holds in flight (its deliveries whose visibility
/// timeout has not run out, nacked ones excluded), over all priorities.
fn in_flight_of(a: &mut Atomic<'_>, n: &Names, s: &Settings, worker: &[u8]) -> ApiResult<usize> {
    let mut held = 0;
    for key in &n.ready {
        if let Some(f) = group_call(
            a,
            &[b"xpending", key, GROUP, b"-", b"+", b"1000000", worker],
        )? {
            held += items(&f).iter().filter(|row| live(row, s)).count();
        }
    }
    Ok(held)
}

/// Whether an extended XPENDING row `[id, consumer, idle, count]` is a
/// delivery still in flight (not past its visibility timeout).
fn live(row: &Frame, s: &Settings) -> bool {
    items(row).get(2).map_or(0, int) < s.visibility_ms as i64
}

/// `POST /v1/queues/{queue}/take?worker=W&wait=S`
pub(crate) async fn take_route(req: Req) -> ApiResult {
    let worker = worker_param(&req)?;
    let wait = Duration::from_secs_f64(float_param(&req, "wait", 0.0, MAX_WAIT_S)?);
    let n = names(&req)?;
    let keys = wake_keys(&n);
    let (shared, state, db, queue) = (&req.shared, &req.state, req.db, req.path(0));
    let worker = &worker;
    let got = poll(shared, state, db, &keys, wait, || {
        try_take(shared, state, db, queue, worker, None)
    })
    .await?;
    Ok(match got {
        Some(d) => super::json_ok(d.json()),
        None => StatusCode::NO_CONTENT.into_response(),
    })
}

/// `POST /v1/queues/{queue}/ack/{token}`
pub(crate) async fn ack(req: Req) -> ApiResult {
    let token = req.path(1).to_vec();
    respond(&req, QueueOp::Ack { token }).await
}

/// `POST /v1/queues/{queue}/nack/{token}?delay=S`
pub(crate) async fn nack(req: Req) -> ApiResult {
    let delay_ms = (float_param(&req, "delay", 0.0, 86_400.0 * 365.0)? * 1000.0) as u64;
    let token = req.path(1).to_vec();
    respond(&req, QueueOp::Nack { token, delay_ms }).await
}

/// `POST /v1/queues/{queue}/touch/{token}`
pub(crate) async fn touch(req: Req) -> ApiResult {
    let token = req.path(1).to_vec();
    respond(&req, QueueOp::Touch { token }).await
}

/// `POST /v1/queues/{queue}/lock`
pub(crate) async fn lock(req: Req) -> ApiResult {
    respond(&req, QueueOp::Lock { locked: true }).await
}

/// `POST /v1/queues/{queue}/unlock`
pub(crate) async fn unlock(req: Req) -> ApiResult {
    respond(&req, QueueOp::Lock { locked: false }).await
}

/// `POST /v1/queues/{queue}/purge?priority=P` (or `?dead=true`)
pub(crate) async fn purge(req: Req) -> ApiResult {
    let only = priority_param(&req)?;
    let dead = match req.param("dead") {
        None | Some(b"false") | Some(b"0") => false,
        Some(b"true") | Some(b"1") => true,
        Some(_) => return Err(ApiError::bad_request("dead must be true or false")),
    };
    if dead && only.is_some() {
        return Err(ApiError::bad_request(
            "purge either one priority or the dead letters",
        ));
    }
    respond(&req, QueueOp::Purge { only, dead }).await
}

/// `GET /v1/queues/{queue}/dead?count=N`
pub(crate) async fn dead(req: Req) -> ApiResult {
    let count = req.int_param("count", 100)?;
    if count < 1 {
        return Err(ApiError::bad_request("count must be positive"));
    }
    let n = names(&req)?;
    let c = count.to_string();
    let got = req
        .command(&[b"xrange", &n.dead, b"-", b"+", b"COUNT", c.as_bytes()])
        .await?;
    // RESP3: [[id, [f, v, ...]]] as with RESP2 (no map for an entry).
    // (dead-letter id, its fields)
    type Row = (Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>);
    let mut rows: Vec<Row> = Vec::new();
    for e in items(&got) {
        let parts = items(e);
        let Some(id) = parts.first().and_then(bulk) else {
            continue;
        };
        let fields = parts.get(1).map(items).unwrap_or(&[]);
        let pairs = fields
            .chunks(2)
            .filter_map(|p| Some((bulk(&p[0])?.to_vec(), bulk(p.get(1)?)?.to_vec())))
            .collect();
        rows.push((id.to_vec(), pairs));
    }
    // Every byte string of the answer: the items, workers and ids.
    let t = Texts::for_all(
        rows.iter()
            .flat_map(|(_, f)| f.iter().map(|(_, v)| v.as_slice())),
    );
    let out: Vec<Value> = rows
        .iter()
        .map(|(dead_id, fields)| {
            let get = |k: &[u8]| fields.iter().find(|f| f.0 == k).map(|f| f.1.as_slice());
            let num = |k: &[u8]| {
                get(k)
                    .and_then(|v| std::str::from_utf8(v).ok()?.parse::<i64>().ok())
                    .unwrap_or(0)
            };
            json!({
                "dead_id": String::from_utf8_lossy(dead_id),
                "id": t.value(get(b"id").unwrap_or_default()),
                "item": t.value(get(b"item").unwrap_or_default()),
                "priority": num(b"priority"),
                "deliveries": num(b"deliveries"),
                "worker": t.value(get(b"worker").unwrap_or_default()),
            })
        })
        .collect();
    Ok(super::json_ok(t.mark(json!({ "items": out }))))
}

/// `GET /v1/queues/{queue}/events?worker=W&prefetch=N`: deliveries as
/// Server-Sent Events, each taken for `W` while it holds fewer than `N`
/// in flight (acks make room).
pub(crate) async fn events(req: Req) -> ApiResult {
    let worker = worker_param(&req)?;
    let prefetch = req.int_param("prefetch", 1)?;
    if !(1..=1000).contains(&prefetch) {
        return Err(ApiError::bad_request("prefetch must be 1 to 1000"));
    }
    let (shared, state, db) = (req.shared.clone(), req.state.clone(), req.db);
    let n = names(&req)?;
    let queue = req.path(0).to_vec();
    let (tx, rx) = mpsc::channel::<Event>(1);
    tokio::spawn(async move {
        let keys = wake_keys(&n);
        let forever = Duration::from_secs(3600);
        loop {
            let (sh, st, q, w) = (&shared, &state, &queue, &worker);
            let got = tokio::select! {
                got = poll(sh, st, db, &keys, forever, || {
                    try_take(sh, st, db, q, w, Some(prefetch as usize))
                }) => got,
                _ = tx.closed() => return,
            };
            let failed = got.is_err();
            let ev = match got {
                Ok(Some(d)) => Event::default().event("item").data(d.json().to_string()),
                Ok(None) if *state.stop.borrow() => return,
                Ok(None) => continue,
                Err(e) => Event::default()
                    .event("error")
                    .data(json!({"error": e.message, "code": e.code}).to_string()),
            };
            // A delivery the client never received times out and comes
            // back, as for a worker that died holding it.
            if tx.send(ev).await.is_err() {
                return;
            }
            if failed {
                // The same error would come back at once: retry slowly.
                tokio::time::sleep(RECHECK).await;
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|ev| (Ok::<_, Infallible>(ev), rx))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

// ----------------------------------------------------------------- topics

fn topic_key(t: &[u8]) -> Vec<u8> {
    [b"topic:{".as_slice(), t, b"}"].concat()
}

/// The index of a topic id `0-<index>`.
fn index_of(id: &[u8]) -> Option<u64> {
    std::str::from_utf8(id.strip_prefix(b"0-")?)
        .ok()?
        .parse()
        .ok()
}

/// `POST /v1/topics/{topic}?retention=N`
pub(crate) async fn publish(req: Req) -> ApiResult {
    let retention = req.int_param("retention", 1000)?;
    if !(1..=10_000_000).contains(&retention) {
        return Err(ApiError::bad_request("retention must be 1 to 10000000"));
    }
    let key = topic_key(req.path(0));
    let (r, now) = (retention.to_string(), crate::state::now_ms().to_string());
    let id = req
        .command(&[
            b"xadd",
            &key,
            b"MAXLEN",
            r.as_bytes(),
            b"0-*",
            b"message",
            &req.body,
            b"time",
            now.as_bytes(),
        ])
        .await?;
    let index = bulk(&id).and_then(index_of).ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "WRONGTYPE",
            "the topic's stream holds ids that are not topic indexes",
        )
    })?;
    Ok((StatusCode::CREATED, axum::Json(json!({ "index": index }))).into_response())
}

/// `GET /v1/topics/{topic}?from=I&count=N&wait=S`
pub(crate) async fn read_topic(req: Req) -> ApiResult {
    let from = req.int_param("from", 1)?.max(1) as u64;
    let count = req.int_param("count", 100)?;
    if !(1..=10_000).contains(&count) {
        return Err(ApiError::bad_request("count must be 1 to 10000"));
    }
    let wait = Duration::from_secs_f64(float_param(&req, "wait", 0.0, MAX_WAIT_S)?);
    let key = topic_key(req.path(0));
    let (start, c) = (format!("0-{from}"), count.to_string());
    // (the messages, the first message)
    let read = || -> Attempt<(Frame, Frame)> {
        let got = req.read_command(&[
            b"xrange",
            &key,
            start.as_bytes(),
            b"+",
            b"COUNT",
            c.as_bytes(),
        ])?;
        if items(&got).is_empty() {
            return Ok((None, None));
        }
        let first = req.read_command(&[b"xrange", &key, b"-", b"+", b"COUNT", b"1"])?;
        Ok((Some((got, first)), None))
    };
    let keys = [key.clone()];
    let got = poll(&req.shared, &req.state, req.db, &keys, wait, || {
        std::future::ready(read())
    })
    .await?;
    let (messages, first) = match got {
        Some(x) => x,
        None => (
            Frame::Array(Vec::new()),
            req.command(&[b"xrange", &key, b"-", b"+", b"COUNT", b"1"])
                .await?,
        ),
    };
    let first = items(&first)
        .first()
        .and_then(|e| items(e).first())
        .and_then(bulk)
        .and_then(index_of)
        .unwrap_or(0);
    let rows: Vec<(u64, &[u8], i64)> = items(&messages)
        .iter()
        .filter_map(|e| {
            let (id, msg) = entry(e, b"message")?;
            let time = entry(e, b"time")
                .and_then(|(_, t)| std::str::from_utf8(t?).ok()?.parse().ok())
                .unwrap_or(0);
            Some((index_of(id)?, msg.unwrap_or_default(), time))
        })
        .collect();
    let next = rows
        .last()
        .map_or(from.max(first), |r| r.0.saturating_add(1));
    let t = Texts::for_all(rows.iter().map(|r| r.1));
    let list: Vec<Value> = rows
        .iter()
        .map(|(i, m, time)| json!({"index": i, "message": t.value(m), "time": time}))
        .collect();
    Ok(super::json_ok(t.mark(json!({
        "messages": list,
        "first": first,
        "next": next,
    }))))
}
