//! `basalt-bench families`: issue 22's command families (bitmaps,
//! HyperLogLog, geo) against redis-server and basalt, side by side.
//!
//! redis-benchmark cannot send these: it writes `__rand_int__` as twelve
//! digits with leading zeros, which SETBIT and GETBIT refuse as offsets.
//! So, as `tx` does, this drives both servers with its own client from one
//! thread: `--clients` connections, each with `--pipelines` commands in
//! flight, every reply read before the next batch. Commands come from 4096
//! pre-encoded batches per test (65536 distinct commands at P=16), so the
//! loop does no formatting.
//!
//! Tests, in this order (each leaves what the next reads):
//! - `setbit`: `SETBIT mybitmap <random offset below 8388608> 1` on a
//!   bitmap sized to 1 MB beforehand (unmeasured), so every SETBIT works
//!   on a 1 MB string. Its commands repeat (see above), so after the first
//!   cycle nearly every one finds its bit already set and changes nothing
//!   (Redis and Basalt then write nothing);
//! - `setbit-flip`: the same, but the second half of the batches clears
//!   the bits the first half set, in the same order, so every SETBIT
//!   changes its bit: the cost of a SETBIT that writes;
//! - `getbit`: `GETBIT mybitmap <random offset>`;
//! - `bitcount`: `BITCOUNT mybitmap` (the whole 1 MB);
//! - `pfadd`: `PFADD myhll element:<random below --keyspace>`;
//! - `pfcount`: `PFCOUNT myhll` (the cached count after the first);
//! - `geoadd`: `GEOADD mygeo <lon in [1,2)> <lat in [4,5)>
//!   member:<random below --keyspace>`;
//! - `geosearch`: `GEOSEARCH mygeo FROMLONLAT 1.5 4.5 BYRADIUS 1 km COUNT
//!   10 ASC`.
//!
//! Every round runs each test on both servers, redis first in even rounds
//! and basalt first in odd ones; the report gives medians over rounds.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::client::{cmd, encode, Conn};
use super::{cpu_times, ServerArgs, ServerKind, Tools};

#[derive(Debug, clap::Args)]
pub struct FamiliesArgs {
    #[command(flatten)]
    common: ServerArgs,
    /// Tests to run, comma separated (run in the module's order).
    #[arg(
        long = "family-tests",
        value_delimiter = ',',
        default_value = "setbit,setbit-flip,getbit,bitcount,pfadd,pfcount,geoadd,geosearch"
    )]
    family_tests: Vec<String>,
}

const TESTS: &[&str] = &[
    "setbit",
    "setbit-flip",
    "getbit",
    "bitcount",
    "pfadd",
    "pfcount",
    "geoadd",
    "geosearch",
];

/// Bits in the bitmap the bit tests use: 1 MB.
const BITMAP_BITS: u64 = 8 * 1024 * 1024;

/// Pre-encoded batches per test.
const BATCHES: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Run {
    ops_per_sec: f64,
    cpu_us_per_op: f64,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// One command of `test`, with fresh random arguments.
fn command(test: &str, rng: &mut Rng, keyspace: u64) -> Vec<String> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    match test {
        "setbit" | "setbit-flip" => vec![
            "SETBIT".into(),
            "mybitmap".into(),
            (rng.next() % BITMAP_BITS).to_string(),
            "1".into(),
        ],
        "getbit" => vec![
            "GETBIT".into(),
            "mybitmap".into(),
            (rng.next() % BITMAP_BITS).to_string(),
        ],
        "bitcount" => s(&["BITCOUNT", "mybitmap"]),
        "pfadd" => vec![
            "PFADD".into(),
            "myhll".into(),
            format!("element:{}", rng.next() % keyspace),
        ],
        "pfcount" => s(&["PFCOUNT", "myhll"]),
        "geoadd" => vec![
            "GEOADD".into(),
            "mygeo".into(),
            format!("{:.6}", 1.0 + (rng.next() % 1_000_000) as f64 / 1e6),
            format!("{:.6}", 4.0 + (rng.next() % 1_000_000) as f64 / 1e6),
            format!("member:{}", rng.next() % keyspace),
        ],
        "geosearch" => s(&[
            "GEOSEARCH",
            "mygeo",
            "FROMLONLAT",
            "1.5",
            "4.5",
            "BYRADIUS",
            "1",
            "km",
            "COUNT",
            "10",
            "ASC",
        ]),
        other => unreachable!("unknown test {other}"),
    }
}

pub fn run(args: FamiliesArgs) -> Result<()> {
    let a = &args.common;
    let mut tests = Vec::new();
    for t in &args.family_tests {
        let t = t.trim().to_ascii_lowercase();
        if !TESTS.contains(&t.as_str()) {
            bail!("unknown test {t:?}: the tests are {}", TESTS.join(","));
        }
        tests.push(t);
    }
    tests.sort_by_key(|t| TESTS.iter().position(|x| x == t));
    tests.dedup();
    let tools = Tools::resolve(a)?;
    let base = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let timeout = Duration::from_secs(a.startup_timeout);
    let servers: Vec<super::Server> = ServerKind::BOTH
        .iter()
        .map(|&k| super::Server::start(k, &tools, false, &base, timeout))
        .collect::<Result<_>>()?;
    println!(
        "basalt-bench families: {} connections, {} requests per run, pipelines {:?}, \
         members from {}, {} rounds, unpinned",
        a.clients, a.requests, a.pipelines, a.keyspace, a.rounds
    );
    for s in &servers {
        println!("  {}: {}", s.kind.name(), s.command_line);
        // The 1 MB bitmap, unmeasured.
        let mut c = Conn::open(s.port, timeout)?;
        let last = (BITMAP_BITS - 1).to_string();
        c.integer(cmd(["SETBIT", "mybitmap", last.as_str(), "0"]))?;
    }
    let mut results: Vec<(String, u32, ServerKind, Run)> = Vec::new();
    for round in 0..a.rounds {
        for &p in &a.pipelines {
            for t in &tests {
                let mut order: Vec<&super::Server> = servers.iter().collect();
                if round % 2 == 1 {
                    order.reverse();
                }
                for s in order {
                    let r = measure(s, a, t, p, round as u64)?;
                    println!(
                        "  round {} P={p} {t} {}: {:.0} ops/s, {:.2} us server CPU per op",
                        round + 1,
                        s.kind.name(),
                        r.ops_per_sec,
                        r.cpu_us_per_op
                    );
                    results.push((t.clone(), p, s.kind, r));
                }
            }
        }
    }
    println!();
    println!("| test | P | redis ops/s | basalt ops/s | basalt/redis | redis cpu us/op | basalt cpu us/op |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for &p in &a.pipelines {
        for t in &tests {
            let med = |kind: ServerKind, f: fn(&Run) -> f64| {
                let mut v: Vec<f64> = results
                    .iter()
                    .filter(|(n, q, k, _)| n == t && *q == p && *k == kind)
                    .map(|(_, _, _, r)| f(r))
                    .collect();
                v.sort_by(|x, y| x.total_cmp(y));
                v[v.len() / 2]
            };
            let (r, b) = (
                med(ServerKind::Redis, |r| r.ops_per_sec),
                med(ServerKind::Basalt, |r| r.ops_per_sec),
            );
            println!(
                "| {} | {p} | {r:.0} | {b:.0} | {:.2}x | {:.2} | {:.2} |",
                t.to_ascii_uppercase(),
                b / r,
                med(ServerKind::Redis, |r| r.cpu_us_per_op),
                med(ServerKind::Basalt, |r| r.cpu_us_per_op)
            );
        }
    }
    Ok(())
}

fn measure(s: &super::Server, a: &ServerArgs, test: &str, depth: u32, seed: u64) -> Result<Run> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, s.port));
    let mut clients: Vec<(TcpStream, Vec<u8>, usize)> = (0..a.clients)
        .map(|_| -> Result<_> {
            let stream = TcpStream::connect(addr).context("connect")?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(Duration::from_secs(30)))?;
            Ok((stream, Vec::new(), 0))
        })
        .collect::<Result<_>>()?;
    // The same commands for both servers in a round.
    let mut rng = Rng((seed + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let commands: Vec<Vec<Vec<String>>> = (0..BATCHES)
        .map(|_| {
            (0..depth)
                .map(|_| command(test, &mut rng, a.keyspace))
                .collect()
        })
        .collect();
    let batches: Vec<Vec<u8>> = (0..BATCHES)
        .map(|b| {
            let mut out = Vec::new();
            if test == "setbit-flip" && b >= BATCHES / 2 {
                // The second half clears what the first half set, half a
                // cycle later (the batches go out in order, every reply
                // read before the next round): each SETBIT finds its bit
                // the other way.
                for c in &commands[b - BATCHES / 2] {
                    encode(
                        &[c[0].as_str(), c[1].as_str(), c[2].as_str(), "0"],
                        &mut out,
                    );
                }
            } else {
                for c in &commands[b] {
                    encode(c, &mut out);
                }
            }
            out
        })
        .collect();
    let cpu0 = cpu_times(s.pid())?;
    let started = Instant::now();
    let mut done = 0u64;
    let mut next = 0usize;
    let mut chunk = vec![0u8; 256 << 10];
    while done < a.requests {
        for (stream, _, owed) in &mut clients {
            stream.write_all(&batches[next % BATCHES]).context("send")?;
            next += 1;
            *owed = depth as usize;
        }
        for (stream, buf, owed) in &mut clients {
            while *owed > 0 {
                let n = stream.read(&mut chunk).context("read")?;
                if n == 0 {
                    bail!("{} closed the connection", s.kind.name());
                }
                buf.extend_from_slice(&chunk[..n]);
                let mut at = 0;
                while *owed > 0 {
                    match reply_len(&buf[at..]) {
                        Some(Ok(len)) => {
                            at += len;
                            *owed -= 1;
                        }
                        Some(Err(e)) => bail!("{} answered {e}", s.kind.name()),
                        None => break,
                    }
                }
                buf.drain(..at);
            }
        }
        done += depth as u64 * clients.len() as u64;
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu1 = cpu_times(s.pid())?;
    Ok(Run {
        ops_per_sec: done as f64 / secs,
        cpu_us_per_op: (cpu1.own - cpu0.own) * 1e6 / done as f64,
    })
}

/// The length of the complete RESP2 reply at the start of `b`, `None` if
/// it is not all there yet, an error for an error reply.
fn reply_len(b: &[u8]) -> Option<Result<usize, String>> {
    let nl = b.windows(2).position(|w| w == b"\r\n")?;
    let line = &b[1..nl];
    let num = || std::str::from_utf8(line).ok()?.parse::<i64>().ok();
    match b[0] {
        b'+' | b':' => Some(Ok(nl + 2)),
        b'-' => Some(Err(String::from_utf8_lossy(&b[..nl]).into_owned())),
        b'$' => {
            let n = num()?;
            if n < 0 {
                return Some(Ok(nl + 2));
            }
            let end = nl + 2 + n as usize + 2;
            (b.len() >= end).then_some(Ok(end))
        }
        b'*' => {
            let n = num()?;
            let mut at = nl + 2;
            for _ in 0..n.max(0) {
                match reply_len(&b[at..])? {
                    Ok(len) => at += len,
                    Err(e) => return Some(Err(e)),
                }
            }
            Some(Ok(at))
        }
        _ => Some(Err(format!(
            "an unexpected line {:?}",
            String::from_utf8_lossy(&b[..nl])
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_measured_only_when_complete() {
        assert_eq!(reply_len(b":1\r\n"), Some(Ok(4)));
        assert_eq!(reply_len(b"$3\r\nab"), None);
        assert_eq!(reply_len(b"$3\r\nabc\r\n"), Some(Ok(9)));
        let arr = b"*2\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n$-1\r\n";
        assert_eq!(reply_len(arr), Some(Ok(arr.len())));
        assert_eq!(reply_len(&arr[..arr.len() - 1]), None);
        assert!(matches!(reply_len(b"-ERR x\r\n"), Some(Err(_))));
    }

    #[test]
    fn every_test_makes_a_command_with_fresh_arguments() {
        let mut rng = Rng(7);
        for t in TESTS {
            let c = command(t, &mut rng, 1000);
            assert_eq!(
                Some(c[0].to_ascii_lowercase().as_str()),
                t.split('-').next()
            );
        }
        let a = command("setbit", &mut rng, 1000);
        let b = command("setbit", &mut rng, 1000);
        assert_ne!(a[2], b[2]);
    }
}
