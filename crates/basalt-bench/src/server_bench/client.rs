//! A minimal pipelining RESP2 client for the benchmark's own setup work:
//! filling and topping up collections, reading their lengths, deleting them.
//!
//! The one idea: a batch of commands is encoded into one buffer, written
//! with one `write_all`, and then exactly one reply per command is read, so
//! a fill of a million members costs a thousand round trips, not a million.
//! Every reply is checked: an error reply fails the benchmark, naming the
//! command, because a fill that silently failed would make every figure
//! after it wrong.

use std::io::{BufReader, BufWriter, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::{read_reply, Reply};

/// One command: its arguments as raw bytes.
pub(super) type Cmd = Vec<Vec<u8>>;

/// Builds a command from anything byte-like.
pub(super) fn cmd<I, A>(args: I) -> Cmd
where
    I: IntoIterator<Item = A>,
    A: AsRef<[u8]>,
{
    args.into_iter().map(|a| a.as_ref().to_vec()).collect()
}

/// One open connection to a server under test.
pub(super) struct Conn {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
    port: u16,
}

impl Conn {
    /// Connects to 127.0.0.1:`port`; every read and write may take up to
    /// `timeout` (DEL of a million-member collection is one slow reply).
    pub(super) fn open(port: u16, timeout: Duration) -> Result<Conn> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let stream = TcpStream::connect_timeout(&addr, timeout)
            .with_context(|| format!("connect to 127.0.0.1:{port}"))?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            reader: BufReader::new(stream.try_clone()?),
            writer: BufWriter::with_capacity(1 << 16, stream),
            port,
        })
    }

    /// Sends every command in `cmds` as one pipelined batch and returns
    /// their replies in order. An error reply fails the whole batch.
    pub(super) fn pipeline(&mut self, cmds: &[Cmd]) -> Result<Vec<Reply>> {
        let mut buf = Vec::new();
        for c in cmds {
            encode(c, &mut buf);
        }
        self.writer
            .write_all(&buf)
            .and_then(|()| self.writer.flush())
            .with_context(|| format!("send {} commands to port {}", cmds.len(), self.port))?;
        let mut replies = Vec::with_capacity(cmds.len());
        for c in cmds {
            let reply = read_reply(&mut self.reader).with_context(|| {
                format!("read the reply to {} from port {}", show(c), self.port)
            })?;
            if let Reply::Error(e) = &reply {
                bail!("{} answered -{e} (port {})", show(c), self.port);
            }
            replies.push(reply);
        }
        Ok(replies)
    }

    /// One command, one reply.
    pub(super) fn call(&mut self, c: Cmd) -> Result<Reply> {
        let mut replies = self.pipeline(std::slice::from_ref(&c))?;
        Ok(replies.pop().expect("one reply per command"))
    }

    /// A command whose reply must be an integer (LLEN, SCARD, DEL, ...).
    pub(super) fn integer(&mut self, c: Cmd) -> Result<i64> {
        let shown = show(&c);
        match self.call(c)? {
            Reply::Integer(n) => Ok(n),
            other => bail!("{shown} answered {other:?}, not an integer"),
        }
    }

    /// Sends `count` commands made by `make(i)` for `i` in `0..count`, in
    /// pipelined batches of `batch`, checking every reply.
    pub(super) fn send_all(
        &mut self,
        count: u64,
        batch: usize,
        mut make: impl FnMut(u64) -> Cmd,
    ) -> Result<()> {
        let mut i = 0;
        while i < count {
            let end = (i + batch as u64).min(count);
            let cmds: Vec<Cmd> = (i..end).map(&mut make).collect();
            self.pipeline(&cmds)?;
            i = end;
        }
        Ok(())
    }
}

/// RESP2 multibulk encoding of one command, appended to `out`.
pub(super) fn encode<A: AsRef<[u8]>>(c: &[A], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", c.len()).as_bytes());
    for a in c {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// A command for error messages: its first two arguments (long values are
/// not worth printing).
fn show(c: &Cmd) -> String {
    let words: Vec<String> = c
        .iter()
        .take(2)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let more = if c.len() > 2 { " ..." } else { "" };
    format!("`{}{more}`", words.join(" "))
}

/// `len` bytes of printable filler that is not one repeated byte, so it
/// looks like redis-benchmark's random payload to any compressor.
pub(super) fn filler(len: usize, seed: u64) -> Vec<u8> {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            // xorshift64: cheap, deterministic, good enough for filler.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ALPHABET[(x % ALPHABET.len() as u64) as usize]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_encoded_as_resp2_multibulk() {
        let mut out = Vec::new();
        encode(&cmd(["HSET", "h", "field:1", ""]), &mut out);
        assert_eq!(
            out,
            b"*4\r\n$4\r\nHSET\r\n$1\r\nh\r\n$7\r\nfield:1\r\n$0\r\n\r\n".to_vec()
        );
        assert_eq!(show(&cmd(["HSET", "h", "f"])), "`HSET h ...`");
    }

    #[test]
    fn filler_has_the_asked_length_and_varies() {
        let a = filler(16, 1);
        assert_eq!(a.len(), 16);
        assert!(a.iter().all(u8::is_ascii_alphanumeric));
        assert_ne!(a, filler(16, 2));
        assert!(a.windows(2).any(|w| w[0] != w[1]));
    }
}
