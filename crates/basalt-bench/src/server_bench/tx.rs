//! `basalt-bench tx`: MULTI/EXEC transactions against redis-server and
//! basalt, side by side. redis-benchmark sends one command per request and
//! cannot send a transaction, so this drives both servers with its own
//! client: `--clients` connections, each sending `--pipelines` transactions
//! (`MULTI`, `--commands` x `SET key:<random> <value>`, `EXEC`) at a time
//! and reading every reply before the next batch, all from one thread (as
//! redis-benchmark is one thread). Servers start as in `server` (same
//! flags, same durability), each round runs every pipeline depth against
//! redis then basalt, and the report gives medians over the rounds.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::{cpu_times, median_at, ServerArgs, ServerKind, Tools};

#[derive(Debug, clap::Args)]
pub struct TxArgs {
    #[command(flatten)]
    common: ServerArgs,
    /// SETs per transaction.
    #[arg(long, default_value_t = 10)]
    commands: usize,
}

/// One measured run.
#[derive(Debug, Clone, Copy)]
struct Run {
    tx_per_sec: f64,
    cpu_us_per_tx: f64,
}

pub fn run(args: TxArgs) -> Result<()> {
    let a = &args.common;
    let tools = Tools::resolve(a)?;
    let base = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let timeout = Duration::from_secs(a.startup_timeout);
    let servers: Vec<super::Server> = ServerKind::BOTH
        .iter()
        .map(|&k| super::Server::start(k, &tools, false, &base, timeout))
        .collect::<Result<_>>()?;
    let per_run = a.requests / (args.commands as u64 + 2);
    println!(
        "basalt-bench tx: {} connections, MULTI + {} x SET (-d {}, keys from {}) + EXEC, \
         {per_run} transactions per run, pipelines {:?}, {} rounds, unpinned",
        a.clients, args.commands, a.data_size, a.keyspace, a.pipelines, a.rounds
    );
    for s in &servers {
        println!("  {}: {}", s.kind.name(), s.command_line);
    }
    let mut results: Vec<(u32, ServerKind, Run)> = Vec::new();
    for round in 0..a.rounds {
        for &p in &a.pipelines {
            for s in &servers {
                let r = measure(s, a, args.commands, p, per_run, round as u64)?;
                println!(
                    "  round {} P={p} {}: {:.0} tx/s ({:.0} commands/s), {:.2} us server CPU per tx",
                    round + 1,
                    s.kind.name(),
                    r.tx_per_sec,
                    r.tx_per_sec * (args.commands + 2) as f64,
                    r.cpu_us_per_tx
                );
                results.push((p, s.kind, r));
            }
        }
    }
    println!();
    println!(
        "| P | redis tx/s | basalt tx/s | basalt/redis | redis cpu us/tx | basalt cpu us/tx |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for &p in &a.pipelines {
        let med = |kind: ServerKind, f: fn(&Run) -> f64| median_at(&results, p, kind, f);
        let (rt, bt) = (
            med(ServerKind::Redis, |r| r.tx_per_sec),
            med(ServerKind::Basalt, |r| r.tx_per_sec),
        );
        println!(
            "| {p} | {rt:.0} | {bt:.0} | {:.2}x | {:.2} | {:.2} |",
            bt / rt,
            med(ServerKind::Redis, |r| r.cpu_us_per_tx),
            med(ServerKind::Basalt, |r| r.cpu_us_per_tx)
        );
    }
    Ok(())
}

/// One connection with `depth` transactions in flight at a time.
struct Client {
    stream: TcpStream,
    /// Replies read but not yet counted.
    buf: Vec<u8>,
    /// Top-level replies still owed for the batch in flight.
    owed: usize,
    /// Elements still to read of the array being read.
    in_array: usize,
}

fn measure(
    s: &super::Server,
    a: &ServerArgs,
    commands: usize,
    depth: u32,
    total_tx: u64,
    seed: u64,
) -> Result<Run> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, s.port));
    let mut clients: Vec<Client> = (0..a.clients)
        .map(|_| -> Result<Client> {
            let stream = TcpStream::connect(addr).context("connect")?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(Duration::from_secs(30)))?;
            Ok(Client {
                stream,
                buf: Vec::new(),
                owed: 0,
                in_array: 0,
            })
        })
        .collect::<Result<_>>()?;
    let value = super::client::filler(a.data_size, seed + 7);
    let mut rng = (seed + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    // A few dozen different batches, encoded once, sent in turn: keys vary
    // like redis-benchmark's -r without encoding costs in the loop.
    let batches: Vec<Vec<u8>> = (0..64)
        .map(|_| {
            let mut out = Vec::new();
            for _ in 0..depth {
                out.extend_from_slice(b"*1\r\n$5\r\nMULTI\r\n");
                for _ in 0..commands {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let key = format!("key:{:012}", rng % a.keyspace);
                    out.extend_from_slice(
                        format!(
                            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n",
                            key.len(),
                            value.len()
                        )
                        .as_bytes(),
                    );
                    out.extend_from_slice(&value);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"*1\r\n$4\r\nEXEC\r\n");
            }
            out
        })
        .collect();
    let per_batch = depth as u64;
    let replies_per_tx = commands + 2;
    let cpu0 = cpu_times(s.pid())?;
    let started = Instant::now();
    let mut done = 0u64;
    let mut next = 0usize;
    let mut chunk = vec![0u8; 256 << 10];
    while done < total_tx {
        for c in &mut clients {
            c.stream
                .write_all(&batches[next % batches.len()])
                .context("send")?;
            next += 1;
            c.owed = replies_per_tx * depth as usize;
        }
        for c in &mut clients {
            while c.owed > 0 {
                let n = c.stream.read(&mut chunk).context("read")?;
                if n == 0 {
                    bail!("{} closed the connection", s.kind.name());
                }
                c.buf.extend_from_slice(&chunk[..n]);
                count_replies(c, s.kind)?;
            }
        }
        done += per_batch * clients.len() as u64;
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu1 = cpu_times(s.pid())?;
    Ok(Run {
        tx_per_sec: done as f64 / secs,
        cpu_us_per_tx: (cpu1.own - cpu0.own) * 1e6 / done as f64,
    })
}

/// Consumes complete reply lines from `c.buf`, counting top-level replies
/// against `c.owed`. Only simple strings and arrays of them are expected
/// (`+OK`, `+QUEUED`, EXEC's `*N`); an error reply fails the benchmark.
fn count_replies(c: &mut Client, kind: ServerKind) -> Result<()> {
    let mut at = 0;
    while let Some(nl) = c.buf[at..].windows(2).position(|w| w == b"\r\n") {
        let line = &c.buf[at..at + nl];
        at += nl + 2;
        match line.first() {
            Some(b'-') => bail!(
                "{} answered -{}",
                kind.name(),
                String::from_utf8_lossy(&line[1..])
            ),
            Some(b'*') if c.in_array == 0 => {
                let n: usize = std::str::from_utf8(&line[1..])?.parse()?;
                if n == 0 {
                    c.owed -= 1;
                } else {
                    c.in_array = n;
                }
            }
            Some(b'+') if c.in_array > 0 => {
                c.in_array -= 1;
                if c.in_array == 0 {
                    c.owed -= 1;
                }
            }
            Some(b'+') => c.owed -= 1,
            _ => bail!(
                "{} answered an unexpected line {:?}",
                kind.name(),
                String::from_utf8_lossy(line)
            ),
        }
    }
    c.buf.drain(..at);
    Ok(())
}
