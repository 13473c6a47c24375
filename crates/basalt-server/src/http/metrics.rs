//! `GET /metrics` (Prometheus text exposition, every name `basalt_*`),
//! `GET /health` (liveness: 200 as soon as the HTTP listener runs) and
//! `GET /ready` (503 while the databases load, 200 after), plus the
//! middleware that counts HTTP requests by method, route and status.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State as AxState};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{json_ok, ApiError, State};
use crate::state::Shared;

/// Counts every answer by (method, matched route, status); requests that
/// match no route count under `unmatched`, so a scan of random URLs does
/// not grow the table.
pub(crate) async fn count_requests(
    AxState(state): AxState<Arc<State>>,
    req: Request,
    next: Next,
) -> Response {
    let method = req.method().as_str().to_owned();
    let route = match req.extensions().get::<MatchedPath>() {
        Some(p) => p.as_str().to_owned(),
        None => "unmatched".to_owned(),
    };
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    *state
        .requests
        .lock()
        .entry((method, route, status))
        .or_insert(0) += 1;
    resp
}

pub(crate) async fn health() -> Response {
    json_ok(json!({"status": "ok"}))
}

/// 200 once the databases are loaded; 503 `LOADING` before, and 503
/// `SHUTTING_DOWN` once the server is stopping (so a balancer drains it).
pub(crate) async fn ready(AxState(state): AxState<Arc<State>>) -> Response {
    match state.shared.get() {
        None => ApiError::loading().into_response(),
        Some(sh) if sh.shutting_down() || *state.stop.borrow() => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "SHUTTING_DOWN",
            "the server is shutting down",
        )
        .into_response(),
        Some(sh) => match sh.keyspace.write_error() {
            // Reads work, writes do not: not ready for a load balancer.
            Some(why) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "WRITE_ERROR",
                format!("writes are refused: {why}"),
            )
            .into_response(),
            None => json_ok(json!({"status": "ready"})),
        },
    }
}

/// Escapes a Prometheus label value.
fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

pub(crate) async fn metrics(AxState(state): AxState<Arc<State>>) -> Response {
    let mut out = String::new();
    family(
        &mut out,
        "basalt_loading",
        "gauge",
        "1 while the databases are loading.",
    );
    let shared = state.shared.get().cloned();
    let _ = writeln!(out, "basalt_loading {}", shared.is_none() as u8);
    if let Some(sh) = &shared {
        server_metrics(&mut out, sh);
    }
    family(
        &mut out,
        "basalt_http_requests_total",
        "counter",
        "HTTP requests answered, by method, route and status.",
    );
    let mut reqs: Vec<_> = state
        .requests
        .lock()
        .iter()
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    reqs.sort();
    for ((method, route, status), n) in reqs {
        let _ = writeln!(
            out,
            "basalt_http_requests_total{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {n}",
            label(&route)
        );
    }
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

fn server_metrics(out: &mut String, sh: &Shared) {
    let cmds = sh.cmdstats.snapshot();
    family(
        out,
        "basalt_commands_total",
        "counter",
        "Commands run, by command (INFO commandstats calls).",
    );
    for (name, t) in &cmds {
        let _ = writeln!(
            out,
            "basalt_commands_total{{command=\"{name}\"}} {}",
            t.calls
        );
    }
    family(
        out,
        "basalt_command_duration_seconds_total",
        "counter",
        "Time spent running each command (INFO commandstats usec).",
    );
    for (name, t) in &cmds {
        let _ = writeln!(
            out,
            "basalt_command_duration_seconds_total{{command=\"{name}\"}} {:.9}",
            t.nanos as f64 / 1e9
        );
    }
    family(
        out,
        "basalt_command_failed_total",
        "counter",
        "Commands that replied with an error, by command.",
    );
    for (name, t) in &cmds {
        let _ = writeln!(
            out,
            "basalt_command_failed_total{{command=\"{name}\"}} {}",
            t.failed
        );
    }
    family(
        out,
        "basalt_command_rejected_total",
        "counter",
        "Commands refused before running (arity, context), by command.",
    );
    for (name, t) in &cmds {
        let _ = writeln!(
            out,
            "basalt_command_rejected_total{{command=\"{name}\"}} {}",
            t.rejected
        );
    }

    let mut dbs = Vec::new();
    let (mut live, mut dead, mut compactions, mut index) = (0u64, 0u64, 0u64, 0u64);
    let (mut stalls, mut stalled) = (0u64, 0u64);
    for n in 0..sh.keyspace.len() {
        let slot = sh.keyspace.read(n);
        if let Some(db) = slot.db() {
            let st = db.stats();
            dbs.push((n, st.keys, st.keys_with_expiry));
            live += st.live_bytes;
            dead += st.dead_bytes;
            compactions += st.compactions;
            index += st.index_bytes;
            stalls += st.write_stalls;
            stalled += u64::from(st.write_stalled);
        }
    }
    family(
        out,
        "basalt_keys",
        "gauge",
        "Keys per database (including expired keys not yet swept).",
    );
    for (n, keys, _) in &dbs {
        let _ = writeln!(out, "basalt_keys{{db=\"{n}\"}} {keys}");
    }
    family(
        out,
        "basalt_keys_with_expiry",
        "gauge",
        "Keys with a TTL per database.",
    );
    for (n, _, expires) in &dbs {
        let _ = writeln!(out, "basalt_keys_with_expiry{{db=\"{n}\"}} {expires}");
    }
    let gauges: [(&str, &str, &str, u64); 11] = [
        (
            "basalt_memory_rss_bytes",
            "gauge",
            "Resident set size of the process.",
            crate::commands::server::rss_bytes(),
        ),
        (
            "basalt_memory_index_bytes",
            "gauge",
            "RAM held by the key indexes.",
            index,
        ),
        (
            "basalt_disk_live_bytes",
            "gauge",
            "Bytes of live records in data files.",
            live,
        ),
        (
            "basalt_disk_dead_bytes",
            "gauge",
            "Bytes of garbage and tombstones in data files (what compaction reclaims).",
            dead,
        ),
        (
            "basalt_compactions_total",
            "counter",
            "Compaction runs finished since the databases were opened.",
            compactions,
        ),
        (
            "basalt_write_stalls_total",
            "counter",
            "Times writes started being delayed because compaction fell behind.",
            stalls,
        ),
        (
            "basalt_write_stalled",
            "gauge",
            "Databases whose writes are being delayed now.",
            stalled,
        ),
        (
            "basalt_connected_clients",
            "gauge",
            "Open RESP connections.",
            sh.clients.len() as u64,
        ),
        (
            "basalt_connections_received_total",
            "counter",
            "RESP connections accepted.",
            sh.stats.connections.load(Ordering::Relaxed),
        ),
        (
            "basalt_pubsub_channels",
            "gauge",
            "Channels with at least one subscriber.",
            sh.pubsub.channel_count() as u64,
        ),
        (
            "basalt_uptime_seconds",
            "gauge",
            "Seconds since the server started.",
            sh.started.elapsed().as_secs(),
        ),
    ];
    for (name, kind, help, v) in gauges {
        family(out, name, kind, help);
        let _ = writeln!(out, "{name} {v}");
    }
}
