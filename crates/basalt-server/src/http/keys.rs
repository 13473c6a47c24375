//! `/v1/keys`: string keys with versions. Each operation calls the engine
//! directly under the key's stripe lock, the way SET, DEL and CAS do, so a
//! conditional write (`If-Match`, `If-None-Match: *`) checks the version
//! and writes without any RESP writer in between, and the answer carries
//! the version that very write produced (the ETag, which VERSION returns).
//! The keyspace events are SET's and DEL's: `new`, `set`, `expire`, `del`,
//! and `keymiss` for a GET that finds nothing.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use serde_json::json;

use super::{etag, parse_etags, ApiError, ApiResult, Req, Texts};
use crate::notify::{GENERIC, KEY_MISS, NEW, STRING};
use crate::state::now_ms;

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
            Some(db) => db.get_versioned(key)?,
            None => None,
        };
        if v.is_none() {
            sh.pubsub.notify(KEY_MISS, "keymiss", key, req.db);
        }
        Ok(v)
    })?;
    let Some(v) = found else {
        return Err(ApiError::not_found("key"));
    };
    if let Some(h) = req.headers.get(header::IF_NONE_MATCH) {
        if parse_etags(h).is_none_or(|tags| tags.contains(&v.version)) {
            return Ok(
                (StatusCode::NOT_MODIFIED, [(header::ETAG, etag(v.version))]).into_response(),
            );
        }
    }
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

/// Checks `If-Match` / `If-None-Match` against the key's current version
/// (0 = absent): 412 with that version when they do not hold.
fn preconditions(req: &Req, current: u64) -> ApiResult<()> {
    if let Some(h) = req.headers.get(header::IF_MATCH) {
        let ok = current != 0 && parse_etags(h).is_none_or(|tags| tags.contains(&current));
        if !ok {
            return Err(ApiError::precondition(current));
        }
    }
    if let Some(h) = req.headers.get(header::IF_NONE_MATCH) {
        let exists_matches =
            current != 0 && parse_etags(h).is_none_or(|tags| tags.contains(&current));
        if exists_matches {
            return Err(ApiError::precondition(current));
        }
    }
    Ok(())
}

/// `PUT /v1/keys/{key}[?ttl=seconds]`: stores the body as the key's string
/// value (replacing a value of any type, as SET does). 201 when it created
/// the key, 200 otherwise, with the new version as ETag and
/// `{"version": n}`.
pub(crate) async fn put(req: Req) -> ApiResult {
    let key = req.path(0);
    let at = expiry(&req)?;
    let (version, created) = req.locked(|sh| -> ApiResult<_> {
        let db = sh.keyspace.write(req.db)?;
        let _g = sh.keyspace.lock(req.db, key);
        let current = db.version(key);
        preconditions(&req, current)?;
        let version = db.put_with_expiry(key, &req.body, at)?;
        if current == 0 {
            sh.absent_watches.created(req.db, key);
            sh.pubsub.notify(NEW, "new", key, req.db);
        }
        sh.pubsub.notify(STRING, "set", key, req.db);
        if at.is_some() {
            sh.pubsub.notify(GENERIC, "expire", key, req.db);
        }
        Ok((version, current == 0))
    })?;
    req.wrote()?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut resp = (status, super::json_ok(json!({ "version": version }))).into_response();
    resp.headers_mut().insert(header::ETAG, etag(version));
    Ok(resp)
}

/// `DELETE /v1/keys/{key}`: removes the key, whatever its type (DEL).
/// 204, or 404 when there is no such key; `If-Match` makes it conditional.
pub(crate) async fn delete(req: Req) -> ApiResult {
    let key = req.path(0);
    req.locked(|sh| -> ApiResult<()> {
        let slot = sh.keyspace.read(req.db);
        let Some(db) = slot.db() else {
            preconditions(&req, 0)?;
            return Err(ApiError::not_found("key"));
        };
        let _g = sh.keyspace.lock(req.db, key);
        let current = db.version(key);
        preconditions(&req, current)?;
        if current == 0 || !db.delete(key)? {
            return Err(ApiError::not_found("key"));
        }
        sh.pubsub.notify(GENERIC, "del", key, req.db);
        Ok(())
    })?;
    req.wrote()?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
