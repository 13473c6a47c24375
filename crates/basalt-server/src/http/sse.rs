//! `GET /v1/subscribe?channel=...&pattern=...`: pub/sub as Server-Sent
//! Events. Watching a key is subscribing to its keyspace channel,
//! `__keyspace@<db>__:<key>` (with `notify-keyspace-events` enabled, as in
//! Redis).
//!
//! The one idea a reader needs: **an event stream is a pub/sub client of
//! the same hub, bounded the same way.** The request registers a detached
//! client (not in CLIENT LIST, counted by PUBSUB NUMSUB and NUMPAT) and
//! subscribes it; publishers append to its byte-counted mailbox exactly as
//! for a RESP subscriber. A pump task moves the mailbox's messages, as SSE
//! events, into a channel of [`AHEAD`] events that the response body
//! reads; the messages stay charged against the `pubsub` output limit
//! until the channel has accepted them, so a client that stops reading
//! fills the channel, then the mailbox, and past the limit the publisher
//! kills it: the pump unsubscribes and the stream ends. When the HTTP
//! client goes away the body (and so the channel's receiver) is dropped,
//! and the pump unsubscribes too.
//!
//! Events: `subscribe` / `psubscribe` (`{"channel", "count"}`) for each
//! subscription, then `message` (`{"channel", "message"}`) and `pmessage`
//! (`{"pattern", "channel", "message"}`), with `"encoding": "base64"` when
//! one of the strings is not UTF-8. A comment line every
//! [`KEEP_ALIVE`] keeps proxies from closing an idle stream and lets the
//! server notice a vanished client.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use bytes::Bytes;
use serde_json::json;
use tokio::sync::mpsc;

use super::{ApiError, ApiResult, Req, Texts};
use crate::pubsub::Kind;
use crate::state::{ClientInfo, Shared};

/// Events a stream holds between the pump and the response body.
const AHEAD: usize = 8;
/// Interval of the keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The SSE event of one message.
fn message_event(pattern: Option<&Bytes>, channel: &[u8], payload: &[u8]) -> Event {
    let mut texts: Vec<&[u8]> = vec![channel, payload];
    if let Some(p) = pattern {
        texts.push(p);
    }
    let t = Texts::for_all(texts);
    let data = match pattern {
        Some(p) => {
            json!({"pattern": t.value(p), "channel": t.value(channel), "message": t.value(payload)})
        }
        None => json!({"channel": t.value(channel), "message": t.value(payload)}),
    };
    let name = if pattern.is_some() {
        "pmessage"
    } else {
        "message"
    };
    Event::default().event(name).data(t.mark(data).to_string())
}

pub(crate) async fn subscribe(req: Req) -> ApiResult {
    let channels: Vec<Vec<u8>> = req.params_named("channel").map(|c| c.to_vec()).collect();
    let patterns: Vec<Vec<u8>> = req.params_named("pattern").map(|p| p.to_vec()).collect();
    if channels.is_empty() && patterns.is_empty() {
        return Err(ApiError::bad_request(
            "name at least one channel (?channel=) or pattern (?pattern=)",
        ));
    }
    let shared = req.shared.clone();
    let addr = req.state.addr;
    let info = shared.clients.detached(addr, addr, -1);
    let (tx, rx) = mpsc::channel::<Event>(AHEAD);
    let mut first = Vec::new();
    for (kind, names, event) in [
        (Kind::Channel, &channels, "subscribe"),
        (Kind::Pattern, &patterns, "psubscribe"),
    ] {
        for name in names {
            let count = shared.pubsub.subscribe(&info, kind, name);
            let t = Texts::for_all([name.as_slice()]);
            let data = t.mark(json!({"channel": t.value(name), "count": count}));
            first.push(Event::default().event(event).data(data.to_string()));
        }
    }
    let stop = req.state.stop.subscribe();
    tokio::spawn(pump(shared, info, tx, first, stop));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|ev| (Ok::<_, Infallible>(ev), rx))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

/// Unsubscribes the stream's client however the pump ends.
struct Subscription {
    shared: Arc<Shared>,
    info: Arc<ClientInfo>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.shared.pubsub.drop_client(&self.info);
    }
}

/// Moves messages from the client's mailbox into the stream until the
/// client goes away, is killed for its output limit, or the server stops.
async fn pump(
    shared: Arc<Shared>,
    info: Arc<ClientInfo>,
    tx: mpsc::Sender<Event>,
    first: Vec<Event>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let _sub = Subscription {
        shared: shared.clone(),
        info: info.clone(),
    };
    for ev in first {
        if tx.send(ev).await.is_err() {
            return;
        }
    }
    loop {
        tokio::select! {
            biased;
            _ = info.kill.notified() => return,
            _ = stop.wait_for(|s| *s) => return,
            _ = tx.closed() => return,
            _ = info.pubsub.ready() => {}
        }
        if info.killed.load(Ordering::SeqCst) {
            return;
        }
        let (msgs, bytes) = info.pubsub.take_raw();
        for (pattern, channel, payload) in msgs {
            let ev = message_event(pattern.as_ref(), &channel, &payload);
            // Charged until accepted: a stalled reader keeps them counted.
            tokio::select! {
                biased;
                _ = info.kill.notified() => return,
                _ = stop.wait_for(|s| *s) => return,
                sent = tx.send(ev) => if sent.is_err() { return },
            }
        }
        info.pubsub.written(bytes, &shared.pubsub.pubsub_limit());
    }
}
