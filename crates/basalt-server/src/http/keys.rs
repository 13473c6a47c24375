//! `/v1/keys`: string keys with versions. Each operation calls the engine
//! directly under the key's stripe lock, the way SET, DEL and CAS do, so a
//! conditional write (`If-Match`, `If-None-Match: *`) checks the version
//! and writes without any RESP writer in between, and the answer carries
//! the version that very write produced (the ETag, which VERSION returns).
//! The keyspace events are SET's and DEL's: `new`, `set`, `expire`, `del`,
//! and `keymiss` for a GET that finds nothing.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use basalt_engine::VersionedLookup;
use serde_json::json;

use serde::{Deserialize, Serialize};

use super::{etag, parse_etags, Answer, ApiError, ApiResult, Req, Texts};
use crate::notify::{GENERIC, KEY_MISS, NEW, STRING};
use crate::state::{now_ms, Shared};

/// `GET` and `HEAD /v1/keys/{key}`: the value's bytes with its ETag, or
/// with `?format=json` `{"key", "value", "version", "ttl_ms"}` (`ttl_ms`
/// null without an expiry; key and value base64 with `"encoding":
/// "base64"` when either is not UTF-8). `If-None-Match` with the current
/// version (or `*`) answers 304.
pub(crate) async fn get(req: Req) -> ApiResult {
    let key = req.path(0);
    let found = req.locked(|sh| -> ApiResult<_> {
        let slot = sh.keyspace.read(req.db);
        let v = match slot.db() {
            Some(db) => db.get_versioned_or_cold(key)?,
            None => None,
        };
        if v.is_none() {
            sh.pubsub.notify(KEY_MISS, "keymiss", key, req.db);
        }
        Ok(v)
    })?;
    let version = match &found {
        None => return Err(ApiError::not_found("key")),
        Some(VersionedLookup::Here(v)) => v.version,
        Some(VersionedLookup::Cold { version, .. }) => *version,
    };
    if let Some(h) = req.headers.get(header::IF_NONE_MATCH) {
        if parse_etags(h).is_none_or(|tags| tags.contains(&version)) {
            return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, etag(version))]).into_response());
        }
    }
    let v = match found {
        Some(VersionedLookup::Here(v)) => v,
        // Not in memory: a reader thread reads it (crate::readers), after
        // the gate, while this runtime thread serves other requests. The
        // value is the one this version names, whatever happened since.
        Some(VersionedLookup::Cold {
            read,
            version,
            expires_at,
        }) => basalt_engine::Versioned {
            value: req.shared.readers.read_value(read).await?,
            version,
            expires_at,
        },
        None => unreachable!("answered 404 above"),
    };
    let ttl_ms = v.expires_at.map(|at| at.saturating_sub(now_ms()));
    let mut resp = if req.param("format").is_some_and(|f| f == b"json") {
        let t = Texts::for_all([key, v.value.as_slice()]);
        let body = t.mark(json!({
            "key": t.value(key),
            "value": t.value(&v.value),
            "version": v.version,
            "ttl_ms": ttl_ms,
        }));
        super::json_ok(body)
    } else {
        let mut r = v.value.into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        r
    };
    resp.headers_mut().insert(header::ETAG, etag(v.version));
    Ok(resp)
}

/// The `?ttl=` of a PUT as an absolute expiry, with SET EX's rules.
fn expiry(req: &Req) -> ApiResult<Option<u64>> {
    let Some(raw) = req.param("ttl") else {
        return Ok(None);
    };
    let invalid = || ApiError::from_redis("ERR invalid expire time in 'set' command");
    let secs = crate::commands::parse_i64(raw)
        .ok_or_else(|| ApiError::from_redis("ERR value is not an integer or out of range"))?;
    if secs <= 0 || secs > i64::MAX / 1000 {
        return Err(invalid());
    }
    let at = (secs * 1000)
        .checked_add(now_ms() as i64)
        .ok_or_else(invalid)?;
    Ok(Some(at as u64))
}

/// The precondition headers of a write: absent, `*` (`Some(None)`), or
/// the listed versions.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Conditions {
    if_match: Option<Option<Vec<u64>>>,
    if_none_match: Option<Option<Vec<u64>>>,
}

impl Conditions {
    fn of(req: &Req) -> Conditions {
        Conditions {
            if_match: req.headers.get(header::IF_MATCH).map(parse_etags),
            if_none_match: req.headers.get(header::IF_NONE_MATCH).map(parse_etags),
        }
    }

    /// Checks them against the key's current version (0 = absent): 412
    /// with that version when they do not hold.
    fn check(&self, current: u64) -> ApiResult<()> {
        let matches = |tags: &Option<Vec<u64>>| {
            current != 0 && tags.as_ref().is_none_or(|t| t.contains(&current))
        };
        if self.if_match.as_ref().is_some_and(|t| !matches(t)) {
            return Err(ApiError::precondition(current));
        }
        if self.if_none_match.as_ref().is_some_and(matches) {
            return Err(ApiError::precondition(current));
        }
        Ok(())
    }
}

/// A `/v1/keys` write as a log entry of a replicated group carries it
/// (`crate::repl::Proposal::Key`): every node runs the same checks and the
/// same write at the entry's time, so versions (ETags) are equal on every
/// node; the TTL is absolute, computed where the request arrived.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct KeyWrite {
    db: u32,
    #[serde(with = "serde_bytes")]
    key: Vec<u8>,
    op: KeyOp,
    conditions: Conditions,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum KeyOp {
    Put {
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        at: Option<u64>,
    },
    Delete,
}

impl KeyWrite {
    /// Runs it (on the applying node, the exec gate held) and returns the
    /// answer for the client.
    pub(crate) fn apply(&self, sh: &Shared) -> Answer {
        let db = self.db as usize;
        let r = match &self.op {
            KeyOp::Put { value, at } => put_now(sh, db, &self.key, value, *at, &self.conditions)
                .map(|(version, created)| put_answer(version, created)),
            KeyOp::Delete => {
                delete_now(sh, db, &self.key, &self.conditions).map(|()| Answer::no_content())
            }
        };
        r.unwrap_or_else(|e| Answer::from_error(&e))
    }
}

/// Stores `value` at `key` if `cond` holds (the caller holds the exec
/// gate): the new version, and whether the key was created.
fn put_now(
    sh: &Shared,
    db_index: usize,
    key: &[u8],
    value: &[u8],
    at: Option<u64>,
    cond: &Conditions,
) -> ApiResult<(u64, bool)> {
    let db = sh.keyspace.write(db_index)?;
    let _g = sh.keyspace.lock(db_index, key);
    let current = db.version(key);
    cond.check(current)?;
    let version = db.put_with_expiry(key, value, at)?;
    if current == 0 {
        sh.absent_watches.created(db_index, key);
        sh.pubsub.notify(NEW, "new", key, db_index);
    }
    sh.pubsub.notify(STRING, "set", key, db_index);
    if at.is_some() {
        sh.pubsub.notify(GENERIC, "expire", key, db_index);
    }
    Ok((version, current == 0))
}

/// Deletes `key` if `cond` holds (the caller holds the exec gate); 404
/// when there is no such key.
fn delete_now(sh: &Shared, db_index: usize, key: &[u8], cond: &Conditions) -> ApiResult<()> {
    let slot = sh.keyspace.read(db_index);
    let Some(db) = slot.db() else {
        cond.check(0)?;
        return Err(ApiError::not_found("key"));
    };
    let _g = sh.keyspace.lock(db_index, key);
    let current = db.version(key);
    cond.check(current)?;
    if current == 0 || !db.delete(key)? {
        return Err(ApiError::not_found("key"));
    }
    sh.pubsub.notify(GENERIC, "del", key, db_index);
    Ok(())
}

fn put_answer(version: u64, created: bool) -> Answer {
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Answer::json(status, json!({ "version": version }), Some(version))
}

/// Proposes `op` on `key` to the group's log (forwarded to the leader by
/// a follower) and answers what applying it produced.
async fn replicated(req: &Req, repl: &crate::repl::Repl, op: KeyOp) -> ApiResult {
    let w = KeyWrite {
        db: req.db as u32,
        key: req.path(0).to_vec(),
        op,
        conditions: Conditions::of(req),
    };
    let reply = repl
        .propose(&crate::repl::Proposal::Key {
            time_ms: now_ms(),
            write: w,
        })
        .await
        .map_err(|line| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "CLUSTERDOWN", line))?;
    let answer: Answer = bincode::deserialize(&reply).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            format!("unreadable replicated answer: {e}"),
        )
    })?;
    Ok(answer.into_response())
}

/// `PUT /v1/keys/{key}[?ttl=seconds]`: stores the body as the key's string
/// value (replacing a value of any type, as SET does). 201 when it created
/// the key, 200 otherwise, with the new version as ETag and
/// `{"version": n}`. On a node of a replicated group it is a log entry.
pub(crate) async fn put(req: Req) -> ApiResult {
    let at = expiry(&req)?;
    if let Some(repl) = req.shared.repl.get() {
        let value = req.body.to_vec();
        return replicated(&req, repl, KeyOp::Put { value, at }).await;
    }
    let cond = Conditions::of(&req);
    let (version, created) =
        req.locked(|sh| put_now(sh, req.db, req.path(0), &req.body, at, &cond))?;
    req.wrote()?;
    Ok(put_answer(version, created).into_response())
}

/// `DELETE /v1/keys/{key}`: removes the key, whatever its type (DEL).
/// 204, or 404 when there is no such key; `If-Match` makes it conditional.
/// On a node of a replicated group it is a log entry.
pub(crate) async fn delete(req: Req) -> ApiResult {
    if let Some(repl) = req.shared.repl.get() {
        return replicated(&req, repl, KeyOp::Delete).await;
    }
    let cond = Conditions::of(&req);
    req.locked(|sh| delete_now(sh, req.db, req.path(0), &cond))?;
    req.wrote()?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
