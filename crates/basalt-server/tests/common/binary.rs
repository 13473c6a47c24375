//! The real `basalt` binary for crash tests: started on a free port over
//! a directory, killed with SIGKILL (no shutdown code runs), and a client
//! connection that reports I/O errors instead of panicking when the server
//! dies under it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use basalt_resp::Frame;

pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// xorshift64*: enough randomness for choosing operations, reproducible
/// from the printed seed.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The real binary on a free port.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// The HTTP API's address.
    pub http: SocketAddr,
}

impl Server {
    pub fn start(dir: &Path, appendfsync: &str, file_size: &str) -> Server {
        // A free port for the HTTP API (0 turns it off).
        let http = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port()
            .to_string();
        let mut child = Command::new(env!("CARGO_BIN_EXE_basalt"))
            .args([
                "--port",
                "0",
                "--http-port",
                &http,
                "--loglevel",
                "info",
                "--databases",
                "4",
            ])
            .args(["--appendfsync", appendfsync])
            .args(["--data-file-size", file_size])
            .env("BASALT_DIR", dir)
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            let mut http = None;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("HTTP API on http://").nth(1) {
                    http = rest.split_whitespace().next().map(|a| a.to_string());
                }
                if !sent {
                    if let Some(rest) = line.split("ready on ").nth(1) {
                        let resp = rest.split_whitespace().next().unwrap().to_string();
                        let _ = tx.send((resp, http.take().expect("HTTP API line first")));
                        sent = true;
                    }
                }
            }
        });
        let (addr, http) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("no start-up banner");
        Server {
            child,
            addr: addr.parse().unwrap(),
            http: http.parse().unwrap(),
        }
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One connection that reports I/O errors instead of panicking (the server
/// dies under it).
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn connect(addr: SocketAddr) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: Vec::new(),
        })
    }

    /// The socket, to send without waiting for a reply.
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    pub fn cmd(&mut self, args: &[&[u8]]) -> std::io::Result<Frame> {
        let mut out = Vec::new();
        basalt_resp::write_command(&mut out, args.iter().copied());
        self.stream.write_all(&out)?;
        loop {
            if let Some((frame, used)) = Frame::parse(&self.buf).map_err(std::io::Error::other)? {
                self.buf.drain(..used);
                return Ok(frame);
            }
            let mut chunk = [0u8; 16 << 10];
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// The crash harnesses' knobs, from the environment.
#[derive(Debug)]
pub struct Knobs {
    /// Kill-and-restart rounds per mode.
    pub rounds: usize,
    /// Client threads.
    pub clients: usize,
    /// Seconds per round (the kill comes in its second half).
    pub seconds: f64,
    /// appendfsync modes, each optionally `mode:data-file-size`.
    pub modes: Vec<String>,
    /// Drives the clients' choices and the kill times; printed to replay.
    pub seed: u64,
}

impl Knobs {
    /// `rounds_var` (3 by default), `BASALT_CRASH_CLIENTS` (3),
    /// `BASALT_CRASH_SECONDS` (0.6), `BASALT_CRASH_MODES` (every mode and
    /// `everysec:16kb`), `BASALT_CRASH_SEED` (the clock).
    pub fn from_env(rounds_var: &str) -> Knobs {
        Knobs {
            rounds: env_or(rounds_var, 3usize),
            clients: env_or("BASALT_CRASH_CLIENTS", 3usize),
            seconds: env_or("BASALT_CRASH_SECONDS", 0.6f64),
            modes: std::env::var("BASALT_CRASH_MODES")
                .unwrap_or_else(|_| "always,everysec,no,everysec:16kb".into())
                .split(',')
                .map(|m| m.trim().to_string())
                .collect(),
            seed: env_or(
                "BASALT_CRASH_SEED",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64,
            ),
        }
    }
}

/// What the last kill left in database 0 of `dir` must check clean (a torn
/// tail or an uncommitted batch is only a note): adds each error to
/// `problems`.
pub fn check_clean(dir: &Path, problems: &mut Vec<String>) {
    let report = basalt_engine::check(dir.join("0"), &Default::default()).unwrap();
    for d in report.errors() {
        problems.push(format!("check: {d:?}"));
    }
}
