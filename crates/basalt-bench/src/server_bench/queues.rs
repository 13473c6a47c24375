//! `basalt-bench queues`: Basalt's HTTP work queue (`docs/queues.md`)
//! beside the same work on redis-server's streams over RESP, which is what
//! a Redis user builds a queue from. `--clients` connections, each with
//! one request in flight (its own thread, so latencies are per request):
//! - push: `--requests` items of `--data-size` bytes; basalt
//!   `POST /v1/queues/bench/items`, redis `XADD q * item <v>`;
//! - work: the connections take and acknowledge until the queue is empty;
//!   basalt `POST .../take?worker=w<i>` + `POST .../ack/<token>`, redis
//!   `XREADGROUP GROUP g w<i> COUNT 1 STREAMS q >` + `XACK q g <id>`.
//!
//! The two are not the same work: Basalt's take also looks for expired
//! deliveries and dead letters over three priorities, its ack also deletes
//! the entry, and every queue operation holds the exec gate exclusively
//! inside one write batch; its requests are HTTP/1.1 with JSON replies.
//! The ratio says what a user gets for moving a streams-based queue onto
//! the HTTP one. Reported: per-phase throughput and latency quantiles,
//! medians over the rounds, servers alternating within each round.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use basalt_resp::Frame;

use super::client::encode;
use super::groups::reply;
use super::{median_at, ServerArgs, ServerKind, Tools};
use crate::histogram::Histogram;

#[derive(Debug, clap::Args)]
pub struct QueuesArgs {
    #[command(flatten)]
    common: ServerArgs,
}

#[derive(Debug, Clone, Copy)]
struct Run {
    push_per_sec: f64,
    push_p50_us: f64,
    push_p99_us: f64,
    /// Items taken and acknowledged per second.
    work_per_sec: f64,
    take_p99_us: f64,
    ack_p99_us: f64,
}

pub fn run(args: QueuesArgs) -> Result<()> {
    let a = &args.common;
    ensure!(
        a.clients > 0 && a.requests > 0,
        "--clients and --requests must be positive"
    );
    let tools = Tools::resolve(a)?;
    let base = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let timeout = Duration::from_secs(a.startup_timeout);
    let servers: Vec<super::Server> = ServerKind::BOTH
        .iter()
        .map(|&k| super::Server::start_http(k, &tools, false, &base, timeout, true))
        .collect::<Result<_>>()?;
    println!(
        "basalt-bench queues: {} connections (one request in flight each), {} items of {} bytes per run, {} rounds, unpinned",
        a.clients, a.requests, a.data_size, a.rounds
    );
    for s in &servers {
        println!("  {}: {}", s.kind.name(), s.command_line);
    }
    let mut results: Vec<(u32, ServerKind, Run)> = Vec::new();
    for round in 0..a.rounds {
        for s in &servers {
            let r = measure(s, a, round)?;
            println!(
                "  round {} {}: push {:.0}/s (p50 {:.0} us, p99 {:.0} us), take+ack {:.0} items/s (take p99 {:.0} us, ack p99 {:.0} us)",
                round + 1,
                s.kind.name(),
                r.push_per_sec,
                r.push_p50_us,
                r.push_p99_us,
                r.work_per_sec,
                r.take_p99_us,
                r.ack_p99_us
            );
            results.push((1, s.kind, r));
        }
    }
    let med = |kind: ServerKind, f: fn(&Run) -> f64| median_at(&results, 1, kind, f);
    println!();
    println!("| phase | redis streams (RESP) | basalt queue (HTTP) | basalt/redis | redis p99 us | basalt p99 us |");
    println!("|---|---:|---:|---:|---:|---:|");
    let (r, b) = (
        med(ServerKind::Redis, |r| r.push_per_sec),
        med(ServerKind::Basalt, |r| r.push_per_sec),
    );
    println!(
        "| push | {r:.0}/s | {b:.0}/s | {:.2}x | {:.0} | {:.0} |",
        b / r,
        med(ServerKind::Redis, |r| r.push_p99_us),
        med(ServerKind::Basalt, |r| r.push_p99_us)
    );
    let (r, b) = (
        med(ServerKind::Redis, |r| r.work_per_sec),
        med(ServerKind::Basalt, |r| r.work_per_sec),
    );
    println!(
        "| take + ack | {r:.0} items/s | {b:.0} items/s | {:.2}x | take {:.0}, ack {:.0} | take {:.0}, ack {:.0} |",
        b / r,
        med(ServerKind::Redis, |r| r.take_p99_us),
        med(ServerKind::Redis, |r| r.ack_p99_us),
        med(ServerKind::Basalt, |r| r.take_p99_us),
        med(ServerKind::Basalt, |r| r.ack_p99_us)
    );
    Ok(())
}

/// One connection of either kind.
trait Worker: Send {
    fn push(&mut self, item: &[u8]) -> Result<()>;
    /// Takes one item; `None` when the queue is empty. Returns the ack's
    /// argument.
    fn take(&mut self) -> Result<Option<Vec<u8>>>;
    fn ack(&mut self, handle: &[u8]) -> Result<()>;
}

fn connect(port: u16) -> Result<TcpStream> {
    let c = TcpStream::connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).context("connect")?;
    c.set_nodelay(true)?;
    c.set_read_timeout(Some(Duration::from_secs(30)))?;
    Ok(c)
}

/// Redis streams over RESP.
struct Resp {
    stream: TcpStream,
    buf: Vec<u8>,
    chunk: Vec<u8>,
    out: Vec<u8>,
    name: Vec<u8>,
}

impl Resp {
    fn call(&mut self, parts: &[&[u8]]) -> Result<Frame> {
        self.out.clear();
        encode(parts, &mut self.out);
        self.stream.write_all(&self.out)?;
        match reply(&mut self.stream, &mut self.buf, &mut self.chunk)? {
            Frame::Error(e) => bail!("redis: {}", String::from_utf8_lossy(&e)),
            f => Ok(f),
        }
    }
}

impl Worker for Resp {
    fn push(&mut self, item: &[u8]) -> Result<()> {
        self.call(&[b"XADD", b"q", b"*", b"item", item]).map(drop)
    }

    fn take(&mut self) -> Result<Option<Vec<u8>>> {
        let name = self.name.clone();
        let got = self.call(&[
            b"XREADGROUP",
            b"GROUP",
            b"g",
            &name,
            b"COUNT",
            b"1",
            b"STREAMS",
            b"q",
            b">",
        ])?;
        // [[q, [[id, [f, v]]]]]
        let id = match got {
            Frame::Array(streams) => streams.into_iter().next().and_then(|s| match s {
                Frame::Array(mut pair) if pair.len() == 2 => match pair.pop() {
                    Some(Frame::Array(entries)) => match entries.into_iter().next() {
                        Some(Frame::Array(e)) => match e.into_iter().next() {
                            Some(Frame::Bulk(id)) => Some(id),
                            _ => None,
                        },
                        _ => None,
                    },
                    _ => None,
                },
                _ => None,
            }),
            _ => None,
        };
        Ok(id)
    }

    fn ack(&mut self, id: &[u8]) -> Result<()> {
        match self.call(&[b"XACK", b"q", b"g", id])? {
            Frame::Integer(1) => Ok(()),
            other => bail!("XACK answered {other:?}"),
        }
    }
}

/// Basalt's HTTP queue, over one HTTP/1.1 keep-alive connection.
struct Http {
    stream: TcpStream,
    buf: Vec<u8>,
    chunk: Vec<u8>,
    out: Vec<u8>,
    worker: String,
}

impl Http {
    /// Sends a POST and returns (status, body).
    fn post(&mut self, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>)> {
        self.out.clear();
        write!(
            self.out,
            "POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )?;
        self.out.extend_from_slice(body);
        self.stream.write_all(&self.out)?;
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = std::str::from_utf8(&self.buf[..end]).context("response head")?;
                let status: u16 = head
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .context("status line")?;
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                if self.buf.len() >= end + 4 + len {
                    let body = self.buf[end + 4..end + 4 + len].to_vec();
                    self.buf.drain(..end + 4 + len);
                    return Ok((status, body));
                }
            }
            let n = self.stream.read(&mut self.chunk).context("read")?;
            if n == 0 {
                bail!("basalt closed the HTTP connection");
            }
            self.buf.extend_from_slice(&self.chunk[..n]);
        }
    }
}

impl Worker for Http {
    fn push(&mut self, item: &[u8]) -> Result<()> {
        match self.post("/v1/queues/bench/items", item)? {
            (201, _) => Ok(()),
            (s, b) => bail!("push answered {s}: {}", String::from_utf8_lossy(&b)),
        }
    }

    fn take(&mut self) -> Result<Option<Vec<u8>>> {
        let path = format!("/v1/queues/bench/take?worker={}", self.worker);
        match self.post(&path, b"")? {
            (204, _) => Ok(None),
            (200, body) => {
                let v: serde_json::Value = serde_json::from_slice(&body)?;
                let token = v["token"].as_str().context("a token")?;
                Ok(Some(token.as_bytes().to_vec()))
            }
            (s, b) => bail!("take answered {s}: {}", String::from_utf8_lossy(&b)),
        }
    }

    fn ack(&mut self, token: &[u8]) -> Result<()> {
        let path = format!("/v1/queues/bench/ack/{}", String::from_utf8_lossy(token));
        match self.post(&path, b"")? {
            (200, _) => Ok(()),
            (s, b) => bail!("ack answered {s}: {}", String::from_utf8_lossy(&b)),
        }
    }
}

fn resp(s: &super::Server, i: u32) -> Result<Resp> {
    Ok(Resp {
        stream: connect(s.port)?,
        buf: Vec::new(),
        chunk: vec![0; 64 << 10],
        out: Vec::new(),
        name: format!("w{i}").into_bytes(),
    })
}

fn worker(s: &super::Server, i: u32) -> Result<Box<dyn Worker>> {
    Ok(match s.kind {
        ServerKind::Redis => Box::new(resp(s, i)?),
        ServerKind::Basalt => Box::new(Http {
            stream: connect(s.http_port.context("basalt without its HTTP port")?)?,
            buf: Vec::new(),
            chunk: vec![0; 64 << 10],
            out: Vec::new(),
            worker: format!("w{i}"),
        }),
    })
}

/// Latencies of a phase: one histogram per kind of request.
type Latencies = [Histogram; 2];

/// A phase's elapsed time, its workers back, and their latencies.
type Phase = (Duration, Vec<Box<dyn Worker>>, Latencies);

/// Runs `f` on every worker in its own thread at once; returns the
/// elapsed time and the merged histograms `f` filled.
fn phase<F>(workers: Vec<Box<dyn Worker>>, f: F) -> Result<Phase>
where
    F: Fn(usize, &mut dyn Worker, &mut Latencies) -> Result<()> + Send + Sync,
{
    let f = Arc::new(f);
    let started = Instant::now();
    let results: Vec<Result<(Box<dyn Worker>, Latencies)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = workers
            .into_iter()
            .enumerate()
            .map(|(i, mut w)| {
                let f = f.clone();
                scope.spawn(move || {
                    let mut h = [Histogram::default(), Histogram::default()];
                    f(i, w.as_mut(), &mut h)?;
                    Ok((w, h))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker thread"))
            .collect()
    });
    let elapsed = started.elapsed();
    let mut merged = [Histogram::default(), Histogram::default()];
    let mut back = Vec::new();
    for r in results {
        let (w, h) = r?;
        merged[0].merge(&h[0]);
        merged[1].merge(&h[1]);
        back.push(w);
    }
    Ok((elapsed, back, merged))
}

fn us(h: &Histogram, q: f64) -> f64 {
    h.quantile_ns(q) as f64 / 1000.0
}

fn measure(s: &super::Server, a: &ServerArgs, round: usize) -> Result<Run> {
    // A fresh queue.
    match s.kind {
        ServerKind::Redis => {
            let mut r = resp(s, 0)?;
            r.call(&[b"DEL", b"q"])?;
            r.call(&[b"XGROUP", b"CREATE", b"q", b"g", b"$", b"MKSTREAM"])?;
        }
        ServerKind::Basalt => {
            let mut c = connect(s.http_port.context("HTTP port")?)?;
            c.write_all(
                b"DELETE /v1/queues/bench HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n",
            )?;
            let mut sink = Vec::new();
            c.read_to_end(&mut sink)?;
            ensure!(
                sink.starts_with(b"HTTP/1.1 200"),
                "DELETE answered {}",
                String::from_utf8_lossy(&sink)
            );
        }
    }
    let workers: Vec<Box<dyn Worker>> = (0..a.clients)
        .map(|i| worker(s, i))
        .collect::<Result<_>>()?;
    let value = super::client::filler(a.data_size, round as u64 + 3);
    let (clients, total) = (a.clients as u64, a.requests);
    let (pushed, workers, push_h) = phase(workers, |i, w, h| {
        let mine = total / clients + u64::from((i as u64) < total % clients);
        for _ in 0..mine {
            let t = Instant::now();
            w.push(&value)?;
            h[0].record(t.elapsed().as_nanos() as u64);
        }
        Ok(())
    })?;
    let (worked, _, work_h) = phase(workers, |_, w, h| loop {
        let t = Instant::now();
        let Some(handle) = w.take()? else {
            return Ok(());
        };
        h[0].record(t.elapsed().as_nanos() as u64);
        let t = Instant::now();
        w.ack(&handle)?;
        h[1].record(t.elapsed().as_nanos() as u64);
    })?;
    ensure!(
        work_h[1].count() == total,
        "{}: {} items acknowledged of {total} pushed",
        s.kind.name(),
        work_h[1].count()
    );
    Ok(Run {
        push_per_sec: total as f64 / pushed.as_secs_f64(),
        push_p50_us: us(&push_h[0], 0.5),
        push_p99_us: us(&push_h[0], 0.99),
        work_per_sec: total as f64 / worked.as_secs_f64(),
        take_p99_us: us(&work_h[0], 0.99),
        ack_p99_us: us(&work_h[1], 0.99),
    })
}
