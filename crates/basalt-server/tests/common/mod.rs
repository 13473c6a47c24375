//! Helpers shared by the integration tests: an in-process server on an
//! ephemeral port with its own temporary directory, and a raw RESP client
//! that shows replies byte for byte.

#![allow(dead_code)]

pub mod binary;
pub mod http;

use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use basalt_resp::Frame;
use basalt_server::{Config, ServerHandle};

/// A server running in-process plus the directory it owns.
pub struct TestServer {
    pub handle: Option<ServerHandle>,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    pub fn start() -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir)
    }

    pub fn start_in(dir: tempfile::TempDir) -> TestServer {
        let handle = basalt_server::start(Config::ephemeral(dir.path())).unwrap();
        TestServer {
            handle: Some(handle),
            dir,
        }
    }

    pub fn start_with(config: Config, dir: tempfile::TempDir) -> TestServer {
        let handle = basalt_server::start(config).unwrap();
        TestServer {
            handle: Some(handle),
            dir,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.handle.as_ref().unwrap().addr()
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr())
    }

    pub fn client(&self) -> redis::Connection {
        let c = redis::Client::open(self.url()).unwrap();
        c.get_connection_with_timeout(Duration::from_secs(5))
            .unwrap()
    }

    pub fn raw(&self) -> Raw {
        Raw::connect(self.addr())
    }

    /// How many clients are blocked (BLPOP and friends) right now.
    pub fn blocked_clients(&self) -> usize {
        self.handle
            .as_ref()
            .unwrap()
            .shared()
            .blocking
            .blocked_clients()
    }

    /// Waits (up to 5 s) until exactly `n` clients are blocked.
    pub fn wait_blocked(&self, n: usize) {
        assert!(
            eventually(Duration::from_secs(5), || self.blocked_clients() == n),
            "expected {n} blocked clients, have {}",
            self.blocked_clients()
        );
    }

    /// Shuts the server down and starts a new one on the same directory.
    pub fn restart(mut self) -> TestServer {
        self.handle.take().unwrap().shutdown().unwrap();
        TestServer::start_in(self.dir)
    }
}

/// A client that sends raw bytes and parses replies with `basalt_resp::Frame`.
pub struct Raw {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    pub fn connect(addr: SocketAddr) -> Raw {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Raw {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Sends a command as a multibulk array.
    pub fn send_cmd(&mut self, args: &[&[u8]]) {
        let mut out = Vec::new();
        basalt_resp::write_command(&mut out, args.iter().copied());
        self.send(&out);
    }

    /// Reads one reply (panics on timeout or close).
    pub fn read(&mut self) -> Frame {
        self.try_read().expect("connection closed before a reply")
    }

    /// Reads one reply, or `None` if the server closed the connection.
    pub fn try_read(&mut self) -> Option<Frame> {
        loop {
            if let Some((frame, used)) = Frame::parse(&self.buf).unwrap() {
                self.buf.drain(..used);
                return Some(frame);
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("read failed: {e}"),
            }
        }
    }

    /// Sends a command and reads its reply.
    pub fn cmd(&mut self, args: &[&str]) -> Frame {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.send_cmd(&args);
        self.read()
    }

    /// Sends a command and returns its reply encoded back as RESP text, for
    /// byte-exact comparisons with what Redis sends.
    pub fn cmd_text(&mut self, args: &[&str]) -> String {
        let f = self.cmd(args);
        let mut out = Vec::new();
        f.write(&mut out, basalt_resp::Protocol::Resp3);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// True once the server has closed the connection (within 5 s).
    pub fn closed(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        self.stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        while Instant::now() < deadline {
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => return true,
            }
        }
        false
    }
}

pub fn err(text: &str) -> Frame {
    Frame::Error(text.as_bytes().to_vec())
}

pub fn bulk(text: &str) -> Frame {
    Frame::Bulk(text.as_bytes().to_vec())
}

pub fn ok() -> Frame {
    Frame::Simple(b"OK".to_vec())
}

/// Polls `f` every 20 ms until it returns true or `timeout` passes.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One command as RESP2 multibulk bytes.
pub fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// Reads one whole reply (nested arrays included); returns its first line.
pub fn read_reply(r: &mut impl BufRead) -> String {
    let mut line = String::new();
    r.read_line(&mut line).expect("a reply within 20 s");
    assert!(line.ends_with("\r\n"), "torn reply line {line:?}");
    let n = || line[1..].trim().parse::<i64>().unwrap();
    match line.as_bytes()[0] {
        b'$' if n() >= 0 => {
            let mut body = vec![0u8; n() as usize + 2];
            r.read_exact(&mut body).unwrap();
        }
        b'*' | b'~' | b'>' => {
            for _ in 0..n().max(0) {
                read_reply(r);
            }
        }
        // RESP3 maps: a key and a value per entry.
        b'%' => {
            for _ in 0..2 * n().max(0) {
                read_reply(r);
            }
        }
        _ => {}
    }
    line
}

/// A numeric field of INFO stats.
pub fn info_stat(c: &mut redis::Connection, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("stats").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("INFO stats names {field}"))
        .trim()
        .parse()
        .unwrap()
}

/// `basalt_client_worker_moves` from INFO stats.
pub fn worker_moves(c: &mut redis::Connection) -> u64 {
    info_stat(c, "basalt_client_worker_moves")
}
