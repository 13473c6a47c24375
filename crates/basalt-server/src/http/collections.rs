//! Hashes, sets, sorted sets, lists (as queues), SCAN and PUBLISH over
//! HTTP. Each route runs the equivalent Redis command through the command
//! table (`Req::command`: the same handler, locks, keyspace events,
//! blocking wakeups and commandstats as over RESP) and shapes its reply as
//! JSON.
//!
//! Shapes: byte strings are JSON strings, or base64 for the whole answer
//! with `"encoding": "base64"` when one of them is not UTF-8. Elements in a
//! request body are either the raw body (one element) or, with
//! `Content-Type: application/json`, a JSON array of strings (or one
//! string), read as base64 when the query says `encoding=base64`. A missing
//! single thing (hash field, set member, sorted-set member) is 404; a
//! missing collection reads as empty, as it does in Redis.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use basalt_resp::Frame;
use serde_json::{json, Value};

use super::{json_ok, ApiError, ApiResult, Req, Texts};

/// A bulk or simple string reply's bytes; `None` for a null.
fn bytes(f: &Frame) -> Option<Vec<u8>> {
    match f {
        Frame::Bulk(b) | Frame::Simple(b) => Some(b.clone()),
        Frame::Verbatim { text, .. } => Some(text.clone()),
        Frame::Integer(n) => Some(n.to_string().into_bytes()),
        _ => None,
    }
}

/// An array or set reply's string elements (a null is empty).
fn strings(f: &Frame) -> Vec<Vec<u8>> {
    match f {
        Frame::Array(items) | Frame::Set(items) => items.iter().filter_map(bytes).collect(),
        Frame::Bulk(_) | Frame::Simple(_) => bytes(f).into_iter().collect(),
        _ => Vec::new(),
    }
}

fn int(f: &Frame) -> i64 {
    match f {
        Frame::Integer(n) => *n,
        Frame::Boolean(b) => *b as i64,
        _ => 0,
    }
}

/// A score as JSON: a number, or the strings "inf" / "-inf".
fn score(f: &Frame) -> Value {
    let v = match f {
        Frame::Double(d) => *d,
        other => bytes(other)
            .and_then(|b| String::from_utf8(b).ok()?.parse().ok())
            .unwrap_or(f64::NAN),
    };
    if v.is_finite() {
        json!(v)
    } else if v > 0.0 {
        json!("inf")
    } else if v < 0.0 {
        json!("-inf")
    } else {
        Value::Null
    }
}

fn strings_json(t: &Texts, items: &[Vec<u8>]) -> Value {
    Value::Array(items.iter().map(|b| t.value(b)).collect())
}

/// The elements of a request body (see the module comment).
pub(super) fn elements(req: &Req) -> ApiResult<Vec<Vec<u8>>> {
    let is_json = req
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return Ok(vec![req.body.to_vec()]);
    }
    let v: Value = serde_json::from_slice(&req.body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?;
    let items: Vec<&Value> = match &v {
        Value::Array(a) => a.iter().collect(),
        s @ Value::String(_) => vec![s],
        _ => {
            return Err(ApiError::bad_request(
                "the body must be a JSON array of strings",
            ))
        }
    };
    if items.is_empty() {
        return Err(ApiError::bad_request("the body names no element"));
    }
    items.into_iter().map(|i| text(req, i)).collect()
}

/// One JSON string of a request, base64-decoded with `?encoding=base64`.
fn text(req: &Req, v: &Value) -> ApiResult<Vec<u8>> {
    use base64::Engine as _;
    let Value::String(s) = v else {
        return Err(ApiError::bad_request("elements must be JSON strings"));
    };
    if req.param("encoding").is_some_and(|e| e == b"base64") {
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(|e| ApiError::bad_request(format!("invalid base64: {e}")))
    } else {
        Ok(s.as_bytes().to_vec())
    }
}

fn raw_or_json(req: &Req, name: &str, value: &[u8]) -> Response {
    if req.param("format").is_some_and(|f| f == b"json") {
        let t = Texts::for_all([value]);
        json_ok(t.mark(json!({ name: t.value(value) })))
    } else {
        let mut r = value.to_vec().into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        r
    }
}

/// 204 when `removed` > 0, else 404 naming `what`.
fn removed(n: i64, what: &str) -> ApiResult {
    if n > 0 {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::not_found(what))
    }
}

// ---------------------------------------------------------------- scan

/// `GET /v1/keys?prefix=&cursor=&count=`: one SCAN step over keys that
/// start with `prefix`: `{"keys": [...], "cursor": "<next, 0 when done>"}`.
pub(crate) async fn scan(req: Req) -> ApiResult {
    let cursor = req.param("cursor").unwrap_or(b"0").to_vec();
    let count = req.int_param("count", 10)?;
    if count < 1 {
        return Err(ApiError::from_redis("ERR syntax error"));
    }
    let mut pattern = Vec::new();
    for &b in req.param("prefix").unwrap_or(b"") {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            pattern.push(b'\\');
        }
        pattern.push(b);
    }
    pattern.push(b'*');
    let count = count.to_string();
    let reply = req
        .command(&[
            b"scan",
            &cursor,
            b"match",
            &pattern,
            b"count",
            count.as_bytes(),
        ])
        .await?;
    let (next, keys) = match &reply {
        Frame::Array(parts) if parts.len() == 2 => {
            (bytes(&parts[0]).unwrap_or_default(), strings(&parts[1]))
        }
        _ => (b"0".to_vec(), Vec::new()),
    };
    let t = Texts::for_all(keys.iter().map(|k| k.as_slice()));
    Ok(json_ok(t.mark(json!({
        "keys": strings_json(&t, &keys),
        "cursor": String::from_utf8_lossy(&next),
    }))))
}

// -------------------------------------------------------------- hashes

/// `GET /v1/hashes/{key}`: `{"fields": {field: value}}` (HGETALL), or with
/// `?keys` the field names `{"fields": [...]}` (HKEYS).
pub(crate) async fn hash_all(req: Req) -> ApiResult {
    let key = req.path(0);
    if req.param("keys").is_some() {
        let names = strings(&req.command(&[b"hkeys", key]).await?);
        let t = Texts::for_all(names.iter().map(|k| k.as_slice()));
        return Ok(json_ok(
            t.mark(json!({ "fields": strings_json(&t, &names) })),
        ));
    }
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = match req.command(&[b"hgetall", key]).await? {
        Frame::Map(m) => m
            .iter()
            .filter_map(|(f, v)| Some((bytes(f)?, bytes(v)?)))
            .collect(),
        _ => Vec::new(),
    };
    let t = Texts::for_all(pairs.iter().flat_map(|(f, v)| [f.as_slice(), v.as_slice()]));
    let mut obj = serde_json::Map::new();
    for (f, v) in &pairs {
        let Value::String(name) = t.value(f) else {
            unreachable!("texts are strings")
        };
        obj.insert(name, t.value(v));
    }
    Ok(json_ok(t.mark(json!({ "fields": obj }))))
}

/// `GET /v1/hashes/{key}/{field}`: the field's bytes (HGET), or
/// `{"value": ...}` with `?format=json`; 404 when absent.
pub(crate) async fn hash_get(req: Req) -> ApiResult {
    let reply = req.command(&[b"hget", req.path(0), req.path(1)]).await?;
    match bytes(&reply) {
        Some(v) => Ok(raw_or_json(&req, "value", &v)),
        None => Err(ApiError::not_found("field")),
    }
}

/// `PUT /v1/hashes/{key}/{field}`: sets the field to the body (HSET); 201
/// `{"created": true}` for a new field, 200 `{"created": false}` otherwise.
pub(crate) async fn hash_put(req: Req) -> ApiResult {
    let n = int(&req
        .command(&[b"hset", req.path(0), req.path(1), &req.body])
        .await?);
    let status = if n > 0 {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, json_ok(json!({ "created": n > 0 }))).into_response())
}

/// `DELETE /v1/hashes/{key}/{field}` (HDEL): 204, or 404.
pub(crate) async fn hash_delete(req: Req) -> ApiResult {
    removed(
        int(&req.command(&[b"hdel", req.path(0), req.path(1)]).await?),
        "field",
    )
}

// ---------------------------------------------------------------- sets

/// `GET /v1/sets/{key}`: `{"members": [...]}` (SMEMBERS).
pub(crate) async fn set_members(req: Req) -> ApiResult {
    let members = strings(&req.command(&[b"smembers", req.path(0)]).await?);
    let t = Texts::for_all(members.iter().map(|m| m.as_slice()));
    Ok(json_ok(
        t.mark(json!({ "members": strings_json(&t, &members) })),
    ))
}

/// `POST /v1/sets/{key}`: adds the body's elements (SADD): `{"added": n}`.
pub(crate) async fn set_add(req: Req) -> ApiResult {
    let items = elements(&req)?;
    let mut args: Vec<&[u8]> = vec![b"sadd", req.path(0)];
    args.extend(items.iter().map(|i| i.as_slice()));
    let n = int(&req.command(&args).await?);
    Ok(json_ok(json!({ "added": n })))
}

/// `GET /v1/sets/{key}/{member}` (SISMEMBER): 200 `{"member": true}`, or
/// 404 when it is not a member.
pub(crate) async fn set_is_member(req: Req) -> ApiResult {
    if int(&req
        .command(&[b"sismember", req.path(0), req.path(1)])
        .await?)
        == 1
    {
        Ok(json_ok(json!({ "member": true })))
    } else {
        Err(ApiError::not_found("member"))
    }
}

/// `DELETE /v1/sets/{key}/{member}` (SREM): 204, or 404.
pub(crate) async fn set_remove(req: Req) -> ApiResult {
    removed(
        int(&req.command(&[b"srem", req.path(0), req.path(1)]).await?),
        "member",
    )
}

// --------------------------------------------------------- sorted sets

/// `GET /v1/zsets/{key}`: a range by rank (`?start=0&stop=-1`, the
/// default) or, with `min` and `max` (Redis syntax: `(1`, `-inf`, `+inf`),
/// by score (ZRANGE ... [BYSCORE]); `?withscores=true` gives
/// `{"members": [{"member", "score"}]}`, otherwise `{"members": [...]}`.
pub(crate) async fn zset_range(req: Req) -> ApiResult {
    let key = req.path(0);
    let withscores = req
        .param("withscores")
        .is_some_and(|v| v.is_empty() || v == b"true" || v == b"1");
    let by_score = req.param("min").is_some() || req.param("max").is_some();
    let (lo, hi) = if by_score {
        (
            req.param("min").unwrap_or(b"-inf").to_vec(),
            req.param("max").unwrap_or(b"+inf").to_vec(),
        )
    } else {
        (
            req.int_param("start", 0)?.to_string().into_bytes(),
            req.int_param("stop", -1)?.to_string().into_bytes(),
        )
    };
    let mut args: Vec<&[u8]> = vec![b"zrange", key, &lo, &hi];
    if by_score {
        args.push(b"byscore");
    }
    if withscores {
        args.push(b"withscores");
    }
    let reply = req.command(&args).await?;
    let Frame::Array(items) = &reply else {
        return Ok(json_ok(json!({ "members": [] })));
    };
    if !withscores {
        let members = strings(&reply);
        let t = Texts::for_all(members.iter().map(|m| m.as_slice()));
        return Ok(json_ok(
            t.mark(json!({ "members": strings_json(&t, &members) })),
        ));
    }
    let pairs: Vec<(Vec<u8>, Value)> = items
        .iter()
        .filter_map(|p| match p {
            Frame::Array(mv) if mv.len() == 2 => Some((bytes(&mv[0])?, score(&mv[1]))),
            _ => None,
        })
        .collect();
    let t = Texts::for_all(pairs.iter().map(|(m, _)| m.as_slice()));
    let members: Vec<Value> = pairs
        .iter()
        .map(|(m, s)| json!({ "member": t.value(m), "score": s }))
        .collect();
    Ok(json_ok(t.mark(json!({ "members": members }))))
}

/// `POST /v1/zsets/{key}` with `{"member": "m", "score": 1.5}` or an array
/// of them (ZADD): `{"added": n}`. A score may also be a string in
/// Redis's syntax (`"+inf"`).
pub(crate) async fn zset_add(req: Req) -> ApiResult {
    let v: Value = serde_json::from_slice(&req.body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?;
    let entries: Vec<&Value> = match &v {
        Value::Array(a) => a.iter().collect(),
        o @ Value::Object(_) => vec![o],
        _ => {
            return Err(ApiError::bad_request(
                "the body must be {\"member\", \"score\"} or an array of them",
            ))
        }
    };
    if entries.is_empty() {
        return Err(ApiError::bad_request("the body names no member"));
    }
    let mut owned: Vec<Vec<u8>> = Vec::with_capacity(entries.len() * 2);
    for e in entries {
        let member = e
            .get("member")
            .ok_or_else(|| ApiError::bad_request("an entry has no \"member\""))?;
        let score = match e.get("score") {
            Some(Value::Number(n)) => n.to_string().into_bytes(),
            Some(Value::String(s)) => s.as_bytes().to_vec(),
            _ => return Err(ApiError::bad_request("an entry has no numeric \"score\"")),
        };
        owned.push(score);
        owned.push(text(&req, member)?);
    }
    let mut args: Vec<&[u8]> = vec![b"zadd", req.path(0)];
    args.extend(owned.iter().map(|a| a.as_slice()));
    let n = int(&req.command(&args).await?);
    Ok(json_ok(json!({ "added": n })))
}

/// `GET /v1/zsets/{key}/{member}` (ZSCORE): `{"score": 1.5}`, or 404.
pub(crate) async fn zset_score(req: Req) -> ApiResult {
    let reply = req.command(&[b"zscore", req.path(0), req.path(1)]).await?;
    match reply {
        Frame::Null | Frame::NullBulk => Err(ApiError::not_found("member")),
        f => Ok(json_ok(json!({ "score": score(&f) }))),
    }
}

/// `DELETE /v1/zsets/{key}/{member}` (ZREM): 204, or 404.
pub(crate) async fn zset_remove(req: Req) -> ApiResult {
    removed(
        int(&req.command(&[b"zrem", req.path(0), req.path(1)]).await?),
        "member",
    )
}

// ------------------------------------------------------------- lists

/// `?side=left|right`, or `default`.
fn side(req: &Req, default: &'static str) -> ApiResult<&'static str> {
    match req.param("side") {
        None => Ok(default),
        Some(b"left") => Ok("left"),
        Some(b"right") => Ok("right"),
        Some(_) => Err(ApiError::bad_request("side must be left or right")),
    }
}

/// `GET /v1/lists/{key}?start=0&stop=-1` (LRANGE): `{"values": [...]}`.
pub(crate) async fn list_range(req: Req) -> ApiResult {
    let start = req.int_param("start", 0)?.to_string();
    let stop = req.int_param("stop", -1)?.to_string();
    let values = strings(
        &req.command(&[b"lrange", req.path(0), start.as_bytes(), stop.as_bytes()])
            .await?,
    );
    let t = Texts::for_all(values.iter().map(|v| v.as_slice()));
    Ok(json_ok(
        t.mark(json!({ "values": strings_json(&t, &values) })),
    ))
}

/// `GET /v1/lists/{key}/length` (LLEN): `{"length": n}`.
pub(crate) async fn list_length(req: Req) -> ApiResult {
    let n = int(&req.command(&[b"llen", req.path(0)]).await?);
    Ok(json_ok(json!({ "length": n })))
}

/// `POST /v1/lists/{key}/push?side=right` (RPUSH; LPUSH with `left`): the
/// body's elements, in order; `{"length": n}` afterwards. A client blocked
/// in BLPOP on the key is served, as with a RESP push.
pub(crate) async fn list_push(req: Req) -> ApiResult {
    let cmd: &[u8] = match side(&req, "right")? {
        "left" => b"lpush",
        _ => b"rpush",
    };
    let items = elements(&req)?;
    let mut args: Vec<&[u8]> = vec![cmd, req.path(0)];
    args.extend(items.iter().map(|i| i.as_slice()));
    let n = int(&req.command(&args).await?);
    Ok(json_ok(json!({ "length": n })))
}

/// `POST /v1/lists/{key}/pop?side=left&count=1` (LPOP; RPOP with `right`):
/// `{"values": [...]}`, empty when the list is.
pub(crate) async fn list_pop(req: Req) -> ApiResult {
    let cmd: &[u8] = match side(&req, "left")? {
        "left" => b"lpop",
        _ => b"rpop",
    };
    let reply = match req.param("count") {
        Some(c) => req.command(&[cmd, req.path(0), c]).await?,
        None => req.command(&[cmd, req.path(0)]).await?,
    };
    let values = strings(&reply);
    let t = Texts::for_all(values.iter().map(|v| v.as_slice()));
    Ok(json_ok(
        t.mark(json!({ "values": strings_json(&t, &values) })),
    ))
}

// ------------------------------------------------------------- pub/sub

/// `POST /v1/publish/{channel}` with the message as body (PUBLISH):
/// `{"receivers": n}` (RESP and HTTP subscribers alike).
pub(crate) async fn publish(req: Req) -> ApiResult {
    let n = int(&req.command(&[b"publish", req.path(0), &req.body]).await?);
    Ok(json_ok(json!({ "receivers": n })))
}
