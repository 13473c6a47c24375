//! `basalt-bench groups`: the consumer-group round trip against
//! redis-server and basalt, side by side (issue 20). redis-benchmark cannot
//! acknowledge what it read, so this drives both servers with its own
//! client: the stream `q` is filled with `--requests` entries (unmeasured),
//! a group is created at 0, then `--clients` consumers each send
//! `XREADGROUP GROUP g c<i> COUNT <P> STREAMS q >` and then `XACK q g` of
//! the ids it got, in turn, until the stream is consumed; P is the pipeline
//! depth (entries per round trip). Reported: entries read and acknowledged
//! per second, and server CPU per entry, medians over the rounds.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use basalt_resp::Frame;

use super::client::encode;
use super::{cpu_times, median_at, ServerArgs, ServerKind, Tools};

#[derive(Debug, clap::Args)]
pub struct GroupsArgs {
    #[command(flatten)]
    common: ServerArgs,
}

#[derive(Debug, Clone, Copy)]
struct Run {
    entries_per_sec: f64,
    cpu_us_per_entry: f64,
}

pub fn run(args: GroupsArgs) -> Result<()> {
    let a = &args.common;
    let tools = Tools::resolve(a)?;
    let base = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let timeout = Duration::from_secs(a.startup_timeout);
    let servers: Vec<super::Server> = ServerKind::BOTH
        .iter()
        .map(|&k| super::Server::start(k, &tools, false, &base, timeout))
        .collect::<Result<_>>()?;
    println!(
        "basalt-bench groups: {} consumers, XREADGROUP COUNT P + XACK, {} entries of {} bytes per run, P {:?}, {} rounds, unpinned",
        a.clients, a.requests, a.data_size, a.pipelines, a.rounds
    );
    for s in &servers {
        println!("  {}: {}", s.kind.name(), s.command_line);
    }
    let mut results: Vec<(u32, ServerKind, Run)> = Vec::new();
    for round in 0..a.rounds {
        for &p in &a.pipelines {
            for s in &servers {
                let r = measure(s, a, p, round)?;
                println!(
                    "  round {} P={p} {}: {:.0} entries/s, {:.2} us server CPU per entry",
                    round + 1,
                    s.kind.name(),
                    r.entries_per_sec,
                    r.cpu_us_per_entry
                );
                results.push((p, s.kind, r));
            }
        }
    }
    println!();
    println!("| P | redis entries/s | basalt entries/s | basalt/redis | redis cpu us/entry | basalt cpu us/entry |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for &p in &a.pipelines {
        let med = |kind: ServerKind, f: fn(&Run) -> f64| median_at(&results, p, kind, f);
        let (r, b) = (
            med(ServerKind::Redis, |r| r.entries_per_sec),
            med(ServerKind::Basalt, |r| r.entries_per_sec),
        );
        println!(
            "| {p} | {r:.0} | {b:.0} | {:.2}x | {:.2} | {:.2} |",
            b / r,
            med(ServerKind::Redis, |r| r.cpu_us_per_entry),
            med(ServerKind::Basalt, |r| r.cpu_us_per_entry)
        );
    }
    Ok(())
}

fn command(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    encode(parts, &mut out);
    out
}

/// Reads one whole reply from `stream` (`buf` keeps what follows it).
pub(super) fn reply(stream: &mut TcpStream, buf: &mut Vec<u8>, chunk: &mut [u8]) -> Result<Frame> {
    loop {
        if let Some((f, used)) = Frame::parse(buf).map_err(|e| anyhow::anyhow!("{e}"))? {
            buf.drain(..used);
            return Ok(f);
        }
        let n = stream.read(chunk).context("read")?;
        if n == 0 {
            bail!("the server closed the connection");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The entry ids of an XREADGROUP reply (one stream).
fn ids(f: &Frame) -> Vec<Vec<u8>> {
    let Frame::Array(streams) = f else {
        return Vec::new();
    };
    let Some(Frame::Array(pair)) = streams.first() else {
        return Vec::new();
    };
    let Some(Frame::Array(entries)) = pair.get(1) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|e| match e {
            Frame::Array(e) => match e.first() {
                Some(Frame::Bulk(id)) => Some(id.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn measure(s: &super::Server, a: &ServerArgs, depth: u32, round: usize) -> Result<Run> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, s.port));
    let connect = || -> Result<TcpStream> {
        let c = TcpStream::connect(addr).context("connect")?;
        c.set_nodelay(true)?;
        c.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(c)
    };
    let mut chunk = vec![0u8; 256 << 10];
    // Unmeasured: a fresh stream of `requests` entries and a group at 0.
    let mut setup = connect()?;
    let mut buf = Vec::new();
    setup.write_all(&command(&[b"DEL", b"q"]))?;
    reply(&mut setup, &mut buf, &mut chunk)?;
    let value = super::client::filler(a.data_size, round as u64 + 3);
    let mut batch = Vec::new();
    let mut sent = 0u64;
    for i in 0..a.requests {
        batch.extend_from_slice(&command(&[b"XADD", b"q", b"*", b"f", &value]));
        sent += 1;
        if sent == 1000 || i + 1 == a.requests {
            setup.write_all(&batch)?;
            batch.clear();
            for _ in 0..sent {
                if let Frame::Error(e) = reply(&mut setup, &mut buf, &mut chunk)? {
                    bail!("{}: XADD: {}", s.kind.name(), String::from_utf8_lossy(&e));
                }
            }
            sent = 0;
        }
    }
    setup.write_all(&command(&[b"XGROUP", b"CREATE", b"q", b"g", b"0"]))?;
    reply(&mut setup, &mut buf, &mut chunk)?;
    let mut clients: Vec<(TcpStream, Vec<u8>, Vec<u8>)> = (0..a.clients)
        .map(|i| Ok((connect()?, Vec::new(), format!("c{i}").into_bytes())))
        .collect::<Result<_>>()?;
    let count = depth.to_string();
    let cpu0 = cpu_times(s.pid())?;
    let started = Instant::now();
    let mut done = 0u64;
    // Every consumer has its XREADGROUP in flight at once, then every
    // consumer its XACK: `--clients` requests in flight, as redis-benchmark
    // keeps them.
    while done < a.requests {
        for (stream, _, name) in &mut clients {
            stream.write_all(&command(&[
                b"XREADGROUP",
                b"GROUP",
                b"g",
                name,
                b"COUNT",
                count.as_bytes(),
                b"STREAMS",
                b"q",
                b">",
            ]))?;
        }
        let mut acks = vec![0usize; clients.len()];
        for (k, (stream, buf, _)) in clients.iter_mut().enumerate() {
            let got = ids(&reply(stream, buf, &mut chunk)?);
            if got.is_empty() {
                continue;
            }
            let mut ack: Vec<&[u8]> = vec![b"XACK", b"q", b"g"];
            ack.extend(got.iter().map(|v| v.as_slice()));
            stream.write_all(&command(&ack))?;
            acks[k] = got.len();
        }
        if acks.iter().all(|&n| n == 0) {
            break;
        }
        for (k, (stream, buf, _)) in clients.iter_mut().enumerate() {
            if acks[k] == 0 {
                continue;
            }
            match reply(stream, buf, &mut chunk)? {
                Frame::Integer(n) if n as usize == acks[k] => done += acks[k] as u64,
                other => bail!("{}: XACK answered {other:?}", s.kind.name()),
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu1 = cpu_times(s.pid())?;
    Ok(Run {
        entries_per_sec: done as f64 / secs,
        cpu_us_per_entry: (cpu1.own - cpu0.own) * 1e6 / done.max(1) as f64,
    })
}
