//! The HTTP API's test client: an in-process server with the HTTP port
//! on an ephemeral port, a reqwest client and its runtime.

use basalt_server::Config;
use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::TestServer;

/// A server with the HTTP API on an ephemeral port, and a client runtime.
pub struct Http {
    pub server: TestServer,
    pub base: String,
    pub client: reqwest::Client,
    pub rt: tokio::runtime::Runtime,
}

impl Http {
    pub fn start() -> Http {
        Self::start_with(|_| {})
    }

    pub fn start_with(tweak: impl FnOnce(&mut Config)) -> Http {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::ephemeral(dir.path());
        config.http_port = Some(0);
        tweak(&mut config);
        let server = TestServer::start_with(config, dir);
        let addr = server.handle.as_ref().unwrap().http_addr().unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        Http {
            server,
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
            rt,
        }
    }

    /// Stops the server cleanly and starts it again on the same directory
    /// (new ports), keeping the client.
    pub fn restart(self) -> Http {
        let Http {
            mut server,
            client,
            rt,
            ..
        } = self;
        server.handle.take().unwrap().shutdown().unwrap();
        let mut config = Config::ephemeral(server.dir.path());
        config.http_port = Some(0);
        let server = TestServer::start_with(config, server.dir);
        let addr = server.handle.as_ref().unwrap().http_addr().unwrap();
        Http {
            server,
            base: format!("http://{addr}"),
            client,
            rt,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Sends a request and returns status, headers and body.
    pub fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> (StatusCode, reqwest::header::HeaderMap, Vec<u8>) {
        self.rt.block_on(async {
            let mut rb = self.client.request(method, self.url(path));
            for (k, v) in headers {
                rb = rb.header(*k, *v);
            }
            if let Some(b) = body {
                rb = rb.body(b);
            }
            let resp = rb.send().await.unwrap();
            let status = resp.status();
            let headers = resp.headers().clone();
            let body = resp.bytes().await.unwrap().to_vec();
            (status, headers, body)
        })
    }

    pub fn get(&self, path: &str) -> (StatusCode, Vec<u8>) {
        let (s, _, b) = self.send(Method::GET, path, &[], None);
        (s, b)
    }

    pub fn json(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let headers: &[(&str, &str)] = if body.is_some() {
            &[("content-type", "application/json")]
        } else {
            &[]
        };
        let (s, _, b) = self.send(
            method,
            path,
            headers,
            body.map(|v| v.to_string().into_bytes()),
        );
        let v = if b.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&b)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&b)))
        };
        (s, v)
    }

    pub fn put(
        &self,
        path: &str,
        body: &[u8],
        headers: &[(&str, &str)],
    ) -> (StatusCode, Option<String>, Value) {
        let (s, h, b) = self.send(Method::PUT, path, headers, Some(body.to_vec()));
        let etag = h.get("etag").map(|v| v.to_str().unwrap().to_string());
        (s, etag, serde_json::from_slice(&b).unwrap_or(Value::Null))
    }

    pub fn redis(&self) -> redis::Connection {
        self.server.client()
    }
}
