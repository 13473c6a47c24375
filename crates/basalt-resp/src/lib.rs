//! RESP2/RESP3 for Basalt: check, parse and encode Redis protocol frames.
//! No sockets, no engine, no async runtime: bytes in, bytes out.
//!
//! The one idea a reader needs: **the server's read buffer is the storage.**
//! [`RequestParser::parse`] never copies a multibulk argument; it records each
//! argument as a `(start, end)` span into the caller's buffer, in a `Vec` that
//! is reused for every command, and reports how many bytes the command used.
//! A partial command costs nothing: the parser remembers how far it got (which
//! line it was scanning, which bulk length it is waiting for), so when more
//! bytes arrive it resumes instead of rescanning, and waiting for the rest of
//! a 512 MB bulk is one comparison per wakeup. The caller's loop is:
//!
//! ```
//! use basalt_resp::{Encoder, Limits, Parsed, Protocol, RequestParser};
//!
//! let mut parser = RequestParser::new(Limits::default());
//! // One socket wakeup delivered two commands and half of a third.
//! let mut buf = b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$3\r\nGE".to_vec();
//! let mut out = Vec::new();
//! let mut pos = 0;
//! loop {
//!     match parser.parse(&buf[pos..]).expect("valid protocol") {
//!         Parsed::Command { args, consumed } => {
//!             let mut reply = Encoder::new(&mut out, Protocol::Resp2);
//!             match &args[0] {
//!                 b"PING" => reply.simple(b"PONG"),
//!                 _ => reply.null(),
//!             }
//!             pos += consumed;
//!         }
//!         Parsed::Incomplete { consumed } => {
//!             pos += consumed;
//!             break;
//!         }
//!     }
//! }
//! buf.drain(..pos); // keep the partial third command for the next read
//! assert_eq!(out, b"+PONG\r\n$-1\r\n");
//! assert_eq!(buf, b"*2\r\n$3\r\nGE");
//! ```
//!
//! Requests follow Redis 7.0's `processInputBuffer`, `processMultibulkBuffer`
//! and `processInlineBuffer` (networking.c) and `sdssplitargs` (sds.c): same
//! accepted inputs, same protocol error strings. Replies are written by
//! [`Encoder`], which picks the RESP2 or RESP3 spelling of each reply type the
//! way Redis's `addReply*` functions do. [`Frame`] is an owned reply tree with
//! its own parser, for clients and tests.

mod encode;
mod frame;
mod request;

pub use encode::{write_command, Encoder, Protocol};
pub use frame::Frame;
pub use request::{Args, ArgsIter, Limits, Parsed, RequestParser};

/// Everything that can go wrong in this crate.
///
/// The request variants display as the exact message Redis 7.0 sends for
/// the same input (the server replies `-ERR <message>` and then closes the
/// connection, as Redis does; the parser does not try to resynchronize).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A `*<count>` line longer than [`Limits::max_inline_len`] before its `\r`.
    #[error("Protocol error: too big mbulk count string")]
    TooBigMultibulkCount,
    /// The `*<count>` is not a number, or exceeds [`Limits::max_multibulk_len`].
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    /// More than 10 arguments from a client that has not authenticated.
    #[error("Protocol error: unauthenticated multibulk length")]
    UnauthenticatedMultibulkLength,
    /// An argument header that does not start with `$`; carries the byte found.
    #[error("Protocol error: expected '$', got '{}'", display_byte(*.0))]
    ExpectedDollar(u8),
    /// A `$<len>` line longer than [`Limits::max_inline_len`] before its `\r`.
    #[error("Protocol error: too big bulk count string")]
    TooBigBulkCount,
    /// The `$<len>` is not a number, is negative, or exceeds [`Limits::max_bulk_len`].
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// An argument longer than 16384 bytes from a client that has not authenticated.
    #[error("Protocol error: unauthenticated bulk length")]
    UnauthenticatedBulkLength,
    /// An inline command longer than [`Limits::max_inline_len`] before its `\n`.
    #[error("Protocol error: too big inline request")]
    TooBigInline,
    /// An inline command with an unterminated quote, or a closing quote not
    /// followed by a space.
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    /// A reply that is not valid RESP2/RESP3 (only [`Frame::parse`] returns this).
    #[error("invalid RESP frame at byte {offset}: {reason}")]
    InvalidFrame {
        /// Offset into the parsed buffer where the problem was found.
        offset: usize,
        /// What was wrong there.
        reason: &'static str,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How Redis prints the `%c` of "expected '$', got '%c'": its error replies
/// turn `\r` and `\n` into spaces so the reply stays one line. Bytes above
/// 0x7f are shown as the Latin-1 character of the same value (Redis sends the
/// raw byte, which a Rust `String` cannot hold).
fn display_byte(b: u8) -> char {
    match b {
        b'\r' | b'\n' => ' ',
        _ => char::from(b),
    }
}
