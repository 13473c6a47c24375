//! The HTTP/JSON API: keys with versions, collections, live subscriptions
//! as Server-Sent Events, Prometheus metrics, health and readiness. Served
//! by axum from the same process and runtime as the RESP server, on its own
//! port (`--http-port`, default 7379, 0 = off) of the same address.
//!
//! The one idea a reader needs: **HTTP is another client of the same
//! keyspace, not a second implementation of it.** Every operation holds the
//! server-wide exec gate shared (as a RESP batch does, so EXEC stays
//! isolated from HTTP too) around synchronous code, never across an await.
//! Two routes lead into the keyspace:
//! - keys (`keys.rs`) call the engine directly under the key's stripe lock,
//!   as SET, DEL and CAS do, because a conditional write must check the
//!   version and write under one lock and the reply must carry the version
//!   that write produced; they publish the same keyspace events;
//! - collections, scan and publish (`collections.rs`) run the equivalent
//!   command through the command table (`commands::execute`) with an
//!   internal RESP3 client on the requested database and turn its reply
//!   into JSON, so types, notifications, blocking wakeups and INFO
//!   commandstats are exactly those of RESP.
//!
//! Routes live in one table ([`endpoints`]); the router is built from it and
//! the test that checks `openapi.json` reads it through [`routes`]. All
//! routes pass through [`auth_layer`] (the password and protected mode, as
//! on the RESP port) and the request counter of `metrics.rs`.
//!
//! Start-up: [`HttpServer::start`] binds and serves before the databases
//! are loaded; until [`HttpServer::set_ready`] every data route answers 503
//! `LOADING`, `/health` 200 and `/ready` 503.

mod collections;
pub(crate) mod keys;
mod metrics;
pub(crate) mod queues;
mod sse;

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, MatchedPath, Request};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::{Json, Router};
use basalt_resp::{Frame, Limits, Parsed, Protocol, RequestParser};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::commands::{self, Conn};
use crate::config::{Appendfsync, Config};
use crate::state::{ClientInfo, Shared};

/// The OpenAPI 3.0 document of every route (checked in; `GET /v1/openapi.json`).
pub const OPENAPI: &str = include_str!("openapi.json");

/// State of the HTTP side, shared by every request.
#[derive(Debug)]
pub(crate) struct State {
    /// Set once the databases are loaded.
    shared: OnceLock<Arc<Shared>>,
    /// The internal client the command-table route runs as (not listed in
    /// CLIENT LIST).
    client: OnceLock<Arc<ClientInfo>>,
    /// Flips to true when the server stops: event streams end.
    stop: watch::Sender<bool>,
    /// Requests by (method, route, status), for `/metrics`.
    requests: Mutex<HashMap<(String, String, u16), u64>>,
    addr: SocketAddr,
}

/// The running HTTP listener.
#[derive(Debug)]
pub struct HttpServer {
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpServer {
    /// Binds `config.bind:port` and serves (answering 503 until
    /// [`HttpServer::set_ready`]).
    pub async fn start(config: &Config, port: u16) -> std::io::Result<HttpServer> {
        let listener = tokio::net::TcpListener::bind((config.bind, port)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            shared: OnceLock::new(),
            client: OnceLock::new(),
            stop: watch::channel(false).0,
            requests: Mutex::new(HashMap::new()),
            addr,
        });
        let app = router(state.clone(), config.http_max_body);
        let mut stop = state.stop.subscribe();
        let task = tokio::spawn(async move {
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            });
            if let Err(e) = serve.await {
                tracing::warn!(error = %e, "HTTP server ended with an error");
            }
        });
        Ok(HttpServer { state, task })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.state.addr
    }

    /// The databases are loaded: serve them.
    pub fn set_ready(&self, shared: Arc<Shared>) {
        let client = shared
            .clients
            .detached(self.state.addr, self.state.addr, -1);
        let _ = self.state.client.set(client);
        let _ = self.state.shared.set(shared);
    }

    /// Stops accepting, ends event streams, and waits (at most `grace`)
    /// for requests in flight.
    pub async fn stop(self, grace: Duration) {
        self.state.stop.send_replace(true);
        let mut task = self.task;
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            tracing::warn!("HTTP requests did not finish in time; closing them");
            task.abort();
        }
    }
}

/// One route: method, path (axum syntax) and handler.
type Endpoint = (&'static str, &'static str, MethodRouter<Arc<State>>);

fn ep<H, T>(method: &'static str, path: &'static str, handler: H) -> Endpoint
where
    H: axum::handler::Handler<T, Arc<State>>,
    T: 'static,
{
    let filter = match method {
        "get" => MethodFilter::GET,
        "head" => MethodFilter::HEAD,
        "put" => MethodFilter::PUT,
        "post" => MethodFilter::POST,
        "delete" => MethodFilter::DELETE,
        _ => unreachable!("no route uses {method}"),
    };
    (method, path, on(filter, handler))
}

/// Every route of the API, the single list the router and the OpenAPI
/// test share.
fn endpoints() -> Vec<Endpoint> {
    use collections as c;
    vec![
        ep("get", "/health", metrics::health),
        ep("get", "/ready", metrics::ready),
        ep("get", "/metrics", metrics::metrics),
        ep("get", "/v1/openapi.json", openapi),
        ep("get", "/v1/keys", c::scan),
        ep("get", "/v1/keys/{key}", keys::get),
        ep("head", "/v1/keys/{key}", keys::get),
        ep("put", "/v1/keys/{key}", keys::put),
        ep("delete", "/v1/keys/{key}", keys::delete),
        ep("get", "/v1/hashes/{key}", c::hash_all),
        ep("get", "/v1/hashes/{key}/{field}", c::hash_get),
        ep("put", "/v1/hashes/{key}/{field}", c::hash_put),
        ep("delete", "/v1/hashes/{key}/{field}", c::hash_delete),
        ep("get", "/v1/sets/{key}", c::set_members),
        ep("post", "/v1/sets/{key}", c::set_add),
        ep("get", "/v1/sets/{key}/{member}", c::set_is_member),
        ep("delete", "/v1/sets/{key}/{member}", c::set_remove),
        ep("get", "/v1/zsets/{key}", c::zset_range),
        ep("post", "/v1/zsets/{key}", c::zset_add),
        ep("get", "/v1/zsets/{key}/{member}", c::zset_score),
        ep("delete", "/v1/zsets/{key}/{member}", c::zset_remove),
        ep("get", "/v1/lists/{key}", c::list_range),
        ep("get", "/v1/lists/{key}/length", c::list_length),
        ep("post", "/v1/lists/{key}/push", c::list_push),
        ep("post", "/v1/lists/{key}/pop", c::list_pop),
        ep("post", "/v1/publish/{channel}", c::publish),
        ep("get", "/v1/subscribe", sse::subscribe),
        ep("get", "/v1/queues", queues::list),
        ep("get", "/v1/queues/{queue}", queues::stats),
        ep("put", "/v1/queues/{queue}", queues::configure),
        ep("delete", "/v1/queues/{queue}", queues::delete),
        ep("post", "/v1/queues/{queue}/items", queues::push),
        ep("post", "/v1/queues/{queue}/take", queues::take_route),
        ep("post", "/v1/queues/{queue}/ack/{token}", queues::ack),
        ep("post", "/v1/queues/{queue}/nack/{token}", queues::nack),
        ep("post", "/v1/queues/{queue}/touch/{token}", queues::touch),
        ep("get", "/v1/queues/{queue}/events", queues::events),
        ep("post", "/v1/queues/{queue}/lock", queues::lock),
        ep("post", "/v1/queues/{queue}/unlock", queues::unlock),
        ep("post", "/v1/queues/{queue}/purge", queues::purge),
        ep("get", "/v1/queues/{queue}/dead", queues::dead),
        ep("post", "/v1/topics/{topic}", queues::publish),
        ep("get", "/v1/topics/{topic}", queues::read_topic),
    ]
}

/// Every (method, path) the router serves, lower-case methods, OpenAPI
/// path syntax (which is axum's).
pub fn routes() -> Vec<(&'static str, &'static str)> {
    endpoints().into_iter().map(|(m, p, _)| (m, p)).collect()
}

fn router(state: Arc<State>, max_body: usize) -> Router {
    let mut r: Router<Arc<State>> = Router::new();
    for (_, path, handler) in endpoints() {
        r = r.route(path, handler);
    }
    r.fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            read_barrier_layer,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), auth_layer))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            metrics::count_requests,
        ))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(state)
}

/// Every route passes here first: the RESP side's security rules, applied
/// to HTTP. With `requirepass` set, a request must carry the password as
/// `Authorization: Bearer <password>` or `Basic base64(user:password)` (the
/// user, if given, must be `default`), else 401 `NOAUTH`, or `WRONGPASS`
/// for a wrong one. Without a password and with protected mode on, a client
/// from a non-loopback address gets 403 `DENIED`, as a RESP client gets
/// `-DENIED`. `/health` and `/ready` stay open to load balancers (they say
/// nothing about the data), and nothing is checked while the databases load
/// (every data route answers 503 then).
async fn auth_layer(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path();
    if path == "/health" || path == "/ready" {
        return next.run(req).await;
    }
    let Some(shared) = state.shared.get() else {
        return next.run(req).await;
    };
    if shared.requires_auth() {
        let Some(h) = req.headers().get(header::AUTHORIZATION) else {
            return unauthorized("NOAUTH", "Authentication required.");
        };
        let ok = match credentials(h.as_bytes()) {
            Some((user, pass)) => shared.check_password(user.as_deref(), &pass),
            None => false,
        };
        if !ok {
            return unauthorized(
                "WRONGPASS",
                "invalid username-password pair or user is disabled.",
            );
        }
    } else if crate::auth::denied(shared.security.protected_mode(), false, peer.ip()) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "DENIED",
            "Basalt is running in protected mode: no password is set and the client is \
             not on the loopback interface. Set --requirepass, or --protected-mode no.",
        )
        .into_response();
    }
    next.run(req).await
}

/// On a node of a replicated group, a GET or HEAD passes the read barrier
/// first (`crate::repl`, as a RESP batch's first read does), so HTTP reads
/// are linearizable on every node; 503 `CLUSTERDOWN` when it cannot be
/// passed. `/health`, `/ready` and `/metrics` describe the node itself and
/// skip it.
async fn read_barrier_layer(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path();
    let reads = req.method() == axum::http::Method::GET || req.method() == axum::http::Method::HEAD;
    if reads && !matches!(path, "/health" | "/ready" | "/metrics") {
        if let Some(repl) = state.shared.get().and_then(|s| s.repl.get()) {
            if let Err(line) = repl.read_barrier().await {
                return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "CLUSTERDOWN", line)
                    .into_response();
            }
        }
    }
    next.run(req).await
}

/// `(user, password)` from an `Authorization` header value: `Bearer <password>`
/// or `Basic base64(user:password)` (an empty user is the default one).
/// `None` when it is neither.
fn credentials(h: &[u8]) -> Option<(Option<Vec<u8>>, Vec<u8>)> {
    use base64::Engine;
    let (scheme, rest) = h.split_at(h.iter().position(|&b| b == b' ')?);
    let rest = rest.trim_ascii();
    if scheme.eq_ignore_ascii_case(b"bearer") {
        return Some((None, rest.to_vec()));
    }
    if scheme.eq_ignore_ascii_case(b"basic") {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let colon = raw.iter().position(|&b| b == b':')?;
        // An empty user (`curl -u :password`) means the default user.
        let user = (colon > 0).then(|| raw[..colon].to_vec());
        return Some((user, raw[colon + 1..].to_vec()));
    }
    None
}

fn unauthorized(code: &'static str, message: &str) -> Response {
    let mut r =
        ApiError::new(StatusCode::UNAUTHORIZED, code, format!("{code} {message}")).into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"basalt\""),
    );
    r
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "METHOD_NOT_ALLOWED",
        "method not allowed on this route",
    )
}

// ------------------------------------------------------------------ errors

/// An error answer: `{"error": "...", "code": "..."}` with a status, plus
/// the current version (`"version"` and an `ETag`) for a failed
/// precondition. Serializable: a replicated queue operation's entry
/// returns it to the node that proposed it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct ApiError {
    #[serde(with = "status_code")]
    status: StatusCode,
    code: Cow<'static, str>,
    message: String,
    version: Option<u64>,
    /// One more number field of the body (`"capacity"` of `QUEUE_FULL`).
    extra: Option<(Cow<'static, str>, u64)>,
}

/// `StatusCode` as its number.
mod status_code {
    use axum::http::StatusCode;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(s: &StatusCode, ser: S) -> Result<S::Ok, S::Error> {
        ser.serialize_u16(s.as_u16())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<StatusCode, D::Error> {
        StatusCode::from_u16(u16::deserialize(de)?).map_err(serde::de::Error::custom)
    }
}

impl ApiError {
    /// 503 on a node of a replicated group for a write that reached a
    /// path that runs on this node only (every route proposes its writes
    /// to the log; this guards against one that would not): refused
    /// rather than applied to one node only.
    pub(crate) fn replicated() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "REPLICATED",
            "this write does not run locally on a node of a replicated group",
        )
    }

    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code: Cow::Borrowed(code),
            message: message.into(),
            version: None,
            extra: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "BAD_REQUEST", message)
    }

    fn not_found(what: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            format!("no such {what}"),
        )
    }

    fn busy() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "BUSY",
            "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        )
    }

    fn loading() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "LOADING",
            "LOADING Basalt is loading the dataset in memory",
        )
    }

    /// 412 with the key's current version (0 = absent).
    fn precondition(current: u64) -> ApiError {
        ApiError {
            version: Some(current),
            ..ApiError::new(
                StatusCode::PRECONDITION_FAILED,
                "PRECONDITION_FAILED",
                format!("the key's version is {current}"),
            )
        }
    }

    /// An error reply of a command, by its Redis code: WRONGTYPE is 409, a
    /// storage failure 500, anything else 400.
    fn from_redis(line: &str) -> ApiError {
        let (status, code) = if line.starts_with("WRONGTYPE") {
            (StatusCode::CONFLICT, "WRONGTYPE")
        } else if line.starts_with("ERR storage error") {
            (StatusCode::INTERNAL_SERVER_ERROR, "STORAGE")
        } else if line.starts_with("ERR") {
            (StatusCode::BAD_REQUEST, "ERR")
        } else {
            (StatusCode::BAD_REQUEST, "BAD_REQUEST")
        };
        ApiError::new(status, code, line)
    }
}

impl From<commands::Error> for ApiError {
    fn from(e: commands::Error) -> Self {
        if let commands::Error::Engine(inner) = &e {
            tracing::error!(error = %inner, "storage error (HTTP)");
        }
        ApiError::from_redis(&e.message())
    }
}

impl From<basalt_engine::Error> for ApiError {
    fn from(e: basalt_engine::Error) -> Self {
        commands::Error::from(e).into()
    }
}

impl ApiError {
    /// The answer's status, JSON body and ETag version.
    fn parts(&self) -> (StatusCode, serde_json::Value, Option<u64>) {
        let mut body = json!({"error": self.message, "code": self.code});
        if let Some(v) = self.version {
            body["version"] = json!(v);
        }
        if let Some((name, v)) = &self.extra {
            body[name.as_ref()] = json!(v);
        }
        (self.status, body, self.version)
    }
}

/// An answer in plain parts: what a replicated HTTP write's entry returns
/// to the node that proposed it (`keys::KeyWrite`, `queues::QueueWrite`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Answer {
    status: u16,
    /// The JSON body; `None` for no body.
    body: Option<Vec<u8>>,
    etag: Option<u64>,
}

impl Answer {
    fn json(status: StatusCode, body: Value, etag: Option<u64>) -> Answer {
        Answer {
            status: status.as_u16(),
            body: Some(body.to_string().into_bytes()),
            etag,
        }
    }

    fn no_content() -> Answer {
        Answer {
            status: StatusCode::NO_CONTENT.as_u16(),
            body: None,
            etag: None,
        }
    }

    fn from_error(e: &ApiError) -> Answer {
        let (status, body, etag) = e.parts();
        Answer {
            status: status.as_u16(),
            body: Some(body.to_string().into_bytes()),
            etag,
        }
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = match self.body {
            Some(b) => (status, [(header::CONTENT_TYPE, "application/json")], b).into_response(),
            None => status.into_response(),
        };
        if let Some(v) = self.etag {
            resp.headers_mut().insert(header::ETAG, etag(v));
        }
        resp
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body, version) = self.parts();
        let mut resp = (status, Json(body)).into_response();
        if let Some(v) = version {
            resp.headers_mut().insert(header::ETAG, etag(v));
        }
        resp
    }
}

type ApiResult<T = Response> = Result<T, ApiError>;

// ----------------------------------------------------------------- requests

/// Everything a handler needs, extracted once: the server (or 503 while
/// loading), path parameters percent-decoded to bytes, the query, the
/// headers, the body (bounded by `DefaultBodyLimit`: 413 past it) and the
/// database (`?db=N`, default 0).
pub(crate) struct Req {
    shared: Arc<Shared>,
    state: Arc<State>,
    params: Vec<Vec<u8>>,
    query: Vec<(String, Vec<u8>)>,
    headers: HeaderMap,
    body: Bytes,
    db: usize,
}

impl FromRequest<Arc<State>> for Req {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<State>) -> ApiResult<Req> {
        let Some(shared) = state.shared.get().cloned() else {
            return Err(ApiError::loading());
        };
        let (parts, body) = req.into_parts();
        // The parameters are cut from the raw path by the route's template
        // (axum's own extractors insist on UTF-8; keys are bytes).
        let template = parts
            .extensions
            .get::<MatchedPath>()
            .map_or("", |m| m.as_str());
        let params = template
            .split('/')
            .zip(parts.uri.path().split('/'))
            .filter(|(t, _)| t.starts_with('{'))
            .map(|(_, raw)| percent_decode(raw.as_bytes(), false))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ApiError::bad_request("invalid percent-encoding in the path"))?;
        let query = parse_query(parts.uri.query().unwrap_or(""))
            .ok_or_else(|| ApiError::bad_request("invalid percent-encoding in the query"))?;
        let headers = parts.headers.clone();
        let body = Bytes::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(|e| {
                if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "PAYLOAD_TOO_LARGE",
                        "request body larger than the limit (proto-max-bulk-len)",
                    )
                } else {
                    ApiError::new(e.status(), "BAD_REQUEST", e.body_text())
                }
            })?;
        let mut r = Req {
            shared,
            state: state.clone(),
            params,
            query,
            headers,
            body,
            db: 0,
        };
        if let Some(db) = r.param("db") {
            let n = parse_uint(db).ok_or_else(|| ApiError::bad_request("db must be a number"))?;
            if n >= r.shared.keyspace.len() as u64 {
                return Err(ApiError::from_redis("ERR DB index is out of range"));
            }
            r.db = n as usize;
        }
        Ok(r)
    }
}

impl Req {
    /// Path parameter `i` (0 = the key).
    fn path(&self, i: usize) -> &[u8] {
        &self.params[i]
    }

    /// The first query parameter named `name`.
    fn param(&self, name: &str) -> Option<&[u8]> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }

    /// Every value of the repeatable query parameter `name`.
    fn params_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.query
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }

    /// A query parameter as an integer, or `default` if absent.
    fn int_param(&self, name: &str, default: i64) -> ApiResult<i64> {
        match self.param(name) {
            None => Ok(default),
            Some(v) => commands::parse_i64(v)
                .ok_or_else(|| ApiError::bad_request(format!("{name} must be an integer"))),
        }
    }

    /// Runs `f` holding the exec gate shared, as a RESP batch runs its
    /// commands: EXEC and scripts never interleave with it. While a script
    /// has run past `busy-reply-threshold` the answer is 503 `BUSY`, as a
    /// RESP client gets `-BUSY`. `f` must not block on anything but the
    /// keyspace's own locks.
    fn locked<T>(&self, f: impl FnOnce(&Shared) -> ApiResult<T>) -> ApiResult<T> {
        let gate = self.shared.gate.enter();
        if !gate.held() {
            return Err(ApiError::busy());
        }
        f(&self.shared)
    }

    /// After a write: counts it (INFO's changes since save) and, under
    /// `appendfsync always`, syncs before the answer leaves, as a RESP
    /// batch does.
    fn wrote(&self) -> ApiResult<()> {
        wrote(&self.shared, self.db)
    }

    /// A read command on this node, for code that cannot wait (a poll's
    /// check): see [`Req::command`].
    fn read_command(&self, args: &[&[u8]]) -> ApiResult<Frame> {
        let mut wire = Vec::new();
        basalt_resp::write_command(&mut wire, args.iter().copied());
        let mut parser = RequestParser::new(Limits::default());
        let Ok(Parsed::Command { args, .. }) = parser.parse(&wire) else {
            return Err(ApiError::bad_request("argument too large"));
        };
        self.run_local(args)
    }

    /// Runs one command through the command table on the request's
    /// database as an internal RESP3 client, holding the exec gate, and
    /// returns its reply; an error reply becomes an [`ApiError`]. On a node
    /// of a replicated group a write is proposed to the log instead (and
    /// forwarded to the leader by a follower), as a RESP client's is.
    async fn command(&self, args: &[&[u8]]) -> ApiResult<Frame> {
        let mut wire = Vec::new();
        basalt_resp::write_command(&mut wire, args.iter().copied());
        let mut parser = RequestParser::new(Limits::default());
        let Ok(Parsed::Command { args, .. }) = parser.parse(&wire) else {
            return Err(ApiError::bad_request("argument too large"));
        };
        if let Some(repl) = self.shared.repl.get() {
            if commands::lookup(&args[0])
                .is_some_and(|c| crate::repl::is_replicated_write(c, &args))
            {
                let p = crate::repl::Proposal::Run {
                    db: self.db as u32,
                    resp3: true,
                    time_ms: crate::state::now_ms(),
                    commands: wire.clone(),
                    exec: None,
                };
                let reply = repl.propose(&p).await.map_err(|line| {
                    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "CLUSTERDOWN", line)
                })?;
                return reply_frame(&reply);
            }
        }
        self.run_local(args)
    }

    /// [`Req::command`] for a command that runs on this node (a read, or
    /// any command off a replicated group), without waiting.
    fn run_local(&self, args: basalt_resp::Args<'_>) -> ApiResult<Frame> {
        if self.shared.repl.get().is_some()
            && commands::lookup(&args[0])
                .is_some_and(|c| crate::repl::is_replicated_write(c, &args))
        {
            return Err(ApiError::replicated());
        }
        let info = self.state.client.get().expect("set with shared").clone();
        let mut conn = Conn {
            db: self.db,
            protocol: Protocol::Resp3,
            info,
            tx: Default::default(),
            batch_clock: 0,
            tick: crate::state::now_ns(),
            script: Vec::new(),
            may_defer: false,
            deferred: Vec::new(),
            may_build_index: false,
            index_wanted: Vec::new(),
        };
        let mut out = Vec::new();
        let (found, _) = self.locked(|sh| Ok(commands::execute(sh, &mut conn, &mut out, args)))?;
        self.shared
            .stats
            .commands
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let frame = reply_frame(&out)?;
        if found.is_some_and(|c| c.is_write()) {
            self.wrote()?;
        }
        Ok(frame)
    }
}

/// A command's RESP reply as a frame; an error reply as an [`ApiError`].
fn reply_frame(out: &[u8]) -> ApiResult<Frame> {
    let frame = match Frame::parse(out) {
        Ok(Some((f, _))) => f,
        _ => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "INTERNAL",
                "unreadable command reply",
            ))
        }
    };
    if let Frame::Error(line) | Frame::BlobError(line) = &frame {
        return Err(ApiError::from_redis(&String::from_utf8_lossy(line)));
    }
    Ok(frame)
}

// ------------------------------------------------------- atomic programs

/// Runs `f`, a small program of Redis commands ([`Atomic::call`]) on
/// database `db`, as one isolated and crash-atomic unit, the way EXEC runs
/// a transaction and the script thread a script: holding the exec gate
/// exclusively (no RESP batch, EXEC, script or other HTTP request runs
/// meanwhile), inside one engine write batch, with one clock reading for
/// all its commands. Between the commands `f` decides what to run next
/// from their replies, which a MULTI cannot. 503 `BUSY` while a script is
/// busy. `f` must check before it writes: an error it returns after a
/// write does not undo the write.
pub(crate) fn atomically<T>(
    shared: &Shared,
    state: &State,
    db: usize,
    f: impl FnOnce(&mut Atomic<'_>) -> ApiResult<T>,
) -> ApiResult<T> {
    if shared.repl.get().is_some() {
        // On a group a program runs as a log entry (`queues::QueueWrite`).
        return Err(ApiError::replicated());
    }
    let mut gate = shared.gate.enter();
    if !gate.held() {
        return Err(ApiError::busy());
    }
    let info = state.client.get().expect("set with shared").clone();
    let (r, writes) = gate.exclusive(|| {
        let now_ns = crate::state::now_ns();
        let _batch = shared.keyspace.batch();
        run_program(shared, info, db, now_ns / 1_000_000, now_ns, f)
    });
    if writes > 0 {
        wrote(shared, db)?;
    }
    r
}

/// Runs program `f` on database `db` at `now_ms` as client `info`; the
/// caller holds the exec gate exclusively and has a write batch open
/// ([`atomically`], or a replicated entry's apply). Returns `f`'s result
/// and how many writes it made.
pub(crate) fn run_program<T>(
    shared: &Shared,
    info: Arc<crate::state::ClientInfo>,
    db: usize,
    now_ms: u64,
    now_ns: u64,
    f: impl FnOnce(&mut Atomic<'_>) -> ApiResult<T>,
) -> (ApiResult<T>, u64) {
    let mut a = Atomic {
        shared,
        conn: Conn {
            db,
            protocol: Protocol::Resp2,
            info,
            tx: Default::default(),
            batch_clock: now_ms,
            tick: now_ns,
            script: Vec::new(),
            may_defer: false,
            deferred: Vec::new(),
            may_build_index: false,
            index_wanted: Vec::new(),
        },
        out: Vec::new(),
        wire: Vec::new(),
        writes: 0,
    };
    let r = f(&mut a);
    (r, a.writes)
}

/// The commands of an [`atomically`] program.
pub(crate) struct Atomic<'a> {
    shared: &'a Shared,
    conn: Conn,
    out: Vec<u8>,
    wire: Vec<u8>,
    writes: u64,
}

impl Atomic<'_> {
    /// The program's clock (unix ms), the same for all its commands.
    pub(crate) fn now_ms(&self) -> u64 {
        self.conn.batch_clock
    }

    /// Runs one command (RESP2 replies); an error reply is `Err` with its
    /// line (`WRONGTYPE ...`, `NOGROUP ...`).
    pub(crate) fn try_call(&mut self, args: &[&[u8]]) -> Result<Frame, String> {
        self.wire.clear();
        basalt_resp::write_command(&mut self.wire, args.iter().copied());
        let mut parser = RequestParser::new(Limits::default());
        let Ok(Parsed::Command { args, .. }) = parser.parse(&self.wire) else {
            return Err("ERR argument too large".into());
        };
        self.out.clear();
        let (found, after) = commands::execute(self.shared, &mut self.conn, &mut self.out, args);
        debug_assert!(after.is_none(), "a queue program runs no blocking command");
        self.shared
            .stats
            .commands
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if found.is_some_and(|c| c.is_write()) {
            self.writes += 1;
        }
        match Frame::parse(&self.out) {
            Ok(Some((Frame::Error(line) | Frame::BlobError(line), _))) => {
                Err(String::from_utf8_lossy(&line).into_owned())
            }
            Ok(Some((f, _))) => Ok(f),
            _ => Err("ERR unreadable command reply".into()),
        }
    }

    /// [`Atomic::try_call`] with an error reply as an [`ApiError`].
    pub(crate) fn call(&mut self, args: &[&[u8]]) -> ApiResult<Frame> {
        self.try_call(args).map_err(|e| ApiError::from_redis(&e))
    }
}

/// After a write on `db`: counts it (INFO's changes since save) and, under
/// `appendfsync always`, syncs before the answer leaves, as a RESP batch
/// does.
fn wrote(shared: &Shared, db: usize) -> ApiResult<()> {
    shared
        .stats
        .dirty
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if shared.settings.appendfsync() == Appendfsync::Always {
        if let Some(db) = shared.keyspace.read(db).db() {
            db.sync()?;
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ helpers

/// `"<version>"`, the strong ETag of a key's version.
fn etag(version: u64) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{version}\"")).expect("digits are a valid header")
}

/// A precondition header's versions: `*` as `None`, otherwise each listed
/// entity tag (weak ones compare by their value, as If-None-Match does).
/// An entity tag that is not a version can never match: `Some(vec![])`.
fn parse_etags(v: &HeaderValue) -> Option<Vec<u64>> {
    let s = v.to_str().unwrap_or("").trim();
    if s == "*" {
        return None;
    }
    Some(
        s.split(',')
            .filter_map(|t| {
                let t = t.trim();
                let t = t.strip_prefix("W/").unwrap_or(t);
                t.strip_prefix('"')?.strip_suffix('"')?.parse().ok()
            })
            .collect(),
    )
}

/// Decodes `%XX` escapes (and `+` as a space in a query) to bytes; `None`
/// for a malformed escape.
fn percent_decode(s: &[u8], plus_is_space: bool) -> Option<Vec<u8>> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' => {
                let hi = hex(*s.get(i + 1)?)?;
                let lo = hex(*s.get(i + 2)?)?;
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(out)
}

/// `a=1&b=x%20y&b=z` as (name, bytes) pairs in order; names are UTF-8.
fn parse_query(q: &str) -> Option<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = String::from_utf8(percent_decode(k.as_bytes(), true)?).ok()?;
        out.push((k, percent_decode(v.as_bytes(), true)?));
    }
    Some(out)
}

fn parse_uint(s: &[u8]) -> Option<u64> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Bytes as JSON: a string when they are UTF-8, otherwise `None` (the
/// caller then base64-encodes the whole answer's byte strings).
fn utf8(b: &[u8]) -> Option<&str> {
    std::str::from_utf8(b).ok()
}

/// Byte strings of one answer: all as JSON strings when every one is UTF-8,
/// otherwise all base64 (the answer then says `"encoding": "base64"`).
struct Texts {
    base64: bool,
}

impl Texts {
    fn for_all<'a>(items: impl IntoIterator<Item = &'a [u8]>) -> Texts {
        Texts {
            base64: !items.into_iter().all(|b| utf8(b).is_some()),
        }
    }

    fn value(&self, b: &[u8]) -> Value {
        use base64::Engine as _;
        if self.base64 {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        } else {
            Value::String(utf8(b).expect("checked").to_owned())
        }
    }

    /// Adds `"encoding": "base64"` to `obj` when needed.
    fn mark(&self, mut obj: Value) -> Value {
        if self.base64 {
            obj["encoding"] = json!("base64");
        }
        obj
    }
}

fn json_ok(v: Value) -> Response {
    Json(v).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_gives_bytes_and_rejects_bad_escapes() {
        assert_eq!(
            percent_decode(b"a%2Fb%00%ff", false).unwrap(),
            b"a/b\x00\xff"
        );
        assert_eq!(percent_decode(b"a+b", true).unwrap(), b"a b");
        assert_eq!(percent_decode(b"a+b", false).unwrap(), b"a+b");
        assert!(percent_decode(b"%4", false).is_none());
        assert!(percent_decode(b"%zz", false).is_none());
        let q = parse_query("channel=a&channel=b%20c&count=").unwrap();
        assert_eq!(q.len(), 3);
        assert_eq!(q[1].1, b"b c");
    }

    #[test]
    fn etags_parse_strong_weak_lists_and_star() {
        assert_eq!(parse_etags(&HeaderValue::from_static("*")), None);
        assert_eq!(
            parse_etags(&HeaderValue::from_static("\"7\"")),
            Some(vec![7])
        );
        assert_eq!(
            parse_etags(&HeaderValue::from_static("W/\"7\", \"9\"")),
            Some(vec![7, 9])
        );
        assert_eq!(
            parse_etags(&HeaderValue::from_static("\"abc\"")),
            Some(vec![])
        );
    }

    #[test]
    fn the_openapi_document_names_exactly_the_routes() {
        let doc: Value = serde_json::from_str(OPENAPI).unwrap();
        let mut documented: Vec<(String, String)> = Vec::new();
        for (path, ops) in doc["paths"].as_object().unwrap() {
            for method in ops.as_object().unwrap().keys() {
                if method != "parameters" {
                    documented.push((method.clone(), path.clone()));
                }
            }
        }
        let mut served: Vec<(String, String)> = routes()
            .into_iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        documented.sort();
        served.sort();
        assert_eq!(documented, served);
    }
}
