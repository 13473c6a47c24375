//! Who may talk to the server and how much they may send: the password
//! (`requirepass`, AUTH, HELLO AUTH), protected mode, `maxclients`, and the
//! request limits (`proto-max-bulk-len`, `client-query-buffer-limit`, and
//! Redis's small fixed limits for a client that has not authenticated).
//!
//! The one idea a reader needs: **a connection is either authenticated or
//! it is not, and only the second kind pays.** Each client carries one flag
//! (`ClientInfo::authenticated`), set when it connects if no password is
//! configured, by a successful AUTH / HELLO AUTH, and cleared by RESET while
//! a password is set, as Redis 7.0 does for its `default` user. The command
//! path tests that flag (one relaxed load) before it looks at anything else;
//! the parser's unauthenticated limits follow the same flag, checked once
//! per frame. Changing `requirepass` affects new AUTHs only: clients already
//! in stay in.
//!
//! Redis's user model is reduced to its `default` user: `AUTH default <pw>`
//! and `AUTH <pw>` are the same thing, any other user name is WRONGPASS (the
//! ACL family is not implemented). Passwords are compared in time that
//! depends only on the length of the attempt, never on where it differs
//! from the real one or on the real one's length.
//!
//! Lock order: the password lock is a leaf (nothing else is taken while it
//! is held).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use basalt_resp::RequestParser;
use parking_lot::RwLock;

use crate::config::Config;
use crate::state::{ClientInfo, Shared};

/// `-NOAUTH` for a command sent before AUTH.
pub const NOAUTH: &str = "NOAUTH Authentication required.";
/// `-WRONGPASS` for a wrong user or password.
pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
/// AUTH with only a password while none is configured.
pub const AUTH_WITHOUT_PASSWORD: &str = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?";
/// HELLO without AUTH from a client that has not authenticated.
pub const HELLO_NOAUTH: &str = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time";
/// Sent to a new connection past `maxclients`, which is then closed.
pub const MAXCLIENTS_REPLY: &[u8] = b"-ERR max number of clients reached\r\n";
/// Sent by protected mode to a client from another host, which is then
/// closed. Redis's text, word for word: clients and scripts look for it.
pub const DENIED_REPLY: &[u8] = b"-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

/// File descriptors Redis keeps for itself besides one per client
/// (`CONFIG_MIN_RESERVED_FDS`).
const RESERVED_FDS: u64 = 32;
/// Smallest `proto-max-bulk-len` and `client-query-buffer-limit` (1 MB).
const MIN_BUFFER_LIMIT: u64 = 1 << 20;

/// The security settings in force; CONFIG SET changes them at run time.
#[derive(Debug)]
pub struct Security {
    /// The default user's password; `None` = `nopass`.
    password: RwLock<Option<Vec<u8>>>,
    /// `password.is_some()`, readable without the lock.
    has_password: AtomicBool,
    protected_mode: AtomicBool,
    maxclients: AtomicU64,
    proto_max_bulk_len: AtomicU64,
    query_buffer_limit: AtomicU64,
    /// RESP connections admitted and not yet closed (for `maxclients`).
    connected: AtomicU64,
    /// Connections refused for `maxclients` (INFO `rejected_connections`).
    pub rejected: AtomicU64,
}

impl Security {
    /// The settings the server starts with.
    pub fn new(config: &Config) -> Security {
        let s = Security {
            password: RwLock::new(None),
            has_password: AtomicBool::new(false),
            protected_mode: AtomicBool::new(config.protected_mode),
            maxclients: AtomicU64::new(config.maxclients),
            proto_max_bulk_len: AtomicU64::new(config.proto_max_bulk_len),
            query_buffer_limit: AtomicU64::new(config.client_query_buffer_limit),
            connected: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        };
        s.set_password(config.requirepass.as_deref().unwrap_or("").as_bytes());
        s
    }

    /// Sets the default user's password; empty = no password (Redis's
    /// `requirepass ""`).
    pub fn set_password(&self, pass: &[u8]) {
        let mut p = self.password.write();
        *p = (!pass.is_empty()).then(|| pass.to_vec());
        self.has_password.store(p.is_some(), Ordering::SeqCst);
    }

    /// Whether a password is configured.
    pub fn requires_auth(&self) -> bool {
        self.has_password.load(Ordering::Relaxed)
    }

    /// Whether `user` (absent = `default`) with `pass` would log in. With no
    /// password configured any password is accepted for `default`, as for
    /// Redis's `nopass` user.
    pub fn check_password(&self, user: Option<&[u8]>, pass: &[u8]) -> bool {
        if user.is_some_and(|u| u != b"default") {
            return false;
        }
        match &*self.password.read() {
            None => true,
            Some(real) => constant_time_eq(real, pass),
        }
    }

    /// `protected-mode`.
    pub fn protected_mode(&self) -> bool {
        self.protected_mode.load(Ordering::Relaxed)
    }

    /// `maxclients`.
    pub fn maxclients(&self) -> u64 {
        self.maxclients.load(Ordering::Relaxed)
    }

    /// `proto-max-bulk-len`: the longest argument a client may send and
    /// the longest string SETRANGE / APPEND may build.
    pub fn proto_max_bulk_len(&self) -> u64 {
        self.proto_max_bulk_len.load(Ordering::Relaxed)
    }

    /// `client-query-buffer-limit`.
    pub fn query_buffer_limit(&self) -> u64 {
        self.query_buffer_limit.load(Ordering::Relaxed)
    }
}

/// Compares in time that depends only on `attempt.len()`: every byte of the
/// attempt is compared with a byte of `real` (cycling through it) and the
/// differences are OR-ed together, so neither the position of the first
/// difference nor the real password's length shows in the timing.
fn constant_time_eq(real: &[u8], attempt: &[u8]) -> bool {
    if real.is_empty() {
        return attempt.is_empty();
    }
    let mut diff = (real.len() != attempt.len()) as u8;
    for (i, &b) in attempt.iter().enumerate() {
        diff |= b ^ real[i % real.len()];
    }
    std::hint::black_box(diff) == 0
}

impl Shared {
    /// Whether the RESP server (and the HTTP API) needs a password.
    pub fn requires_auth(&self) -> bool {
        self.security.requires_auth()
    }

    /// Whether `user` (absent = `default`) and `pass` are the server's
    /// credentials; true for any password when none is configured.
    pub fn check_password(&self, user: Option<&[u8]>, pass: &[u8]) -> bool {
        self.security.check_password(user, pass)
    }
}

/// Whether protected mode treats `peer` as local: Redis accepts `127.*`
/// and `::1` (Basalt also an IPv4-mapped `::ffff:127.*`, which is how a
/// dual-stack listener sees a loopback IPv4 client).
pub fn is_local(peer: IpAddr) -> bool {
    match peer {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Whether protected mode refuses a client from `peer` given the settings:
/// on, no password, and the client is not on the loopback interface.
pub fn denied(protected_mode: bool, has_password: bool, peer: IpAddr) -> bool {
    protected_mode && !has_password && !is_local(peer)
}

/// A connection admitted past `maxclients`; counts until dropped.
#[derive(Debug)]
pub struct Admitted<'a>(&'a Security);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.connected.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Admitted<'_> {
    /// Keeps the connection counted past this guard's scope: a connection
    /// that may move between workers (`crate::workers`) is released by
    /// [`release`] when it ends, wherever that is.
    pub fn keep(self) {
        std::mem::forget(self);
    }
}

/// Ends the admission of a connection whose guard was [`Admitted::keep`]t.
pub fn release(security: &Security) {
    security.connected.fetch_sub(1, Ordering::Relaxed);
}

/// Admission of a new connection, in Redis's order: `maxclients` first,
/// then protected mode. `Err` holds the line to write before closing.
pub fn admit(security: &Security, peer: SocketAddr) -> Result<Admitted<'_>, &'static [u8]> {
    let before = security.connected.fetch_add(1, Ordering::Relaxed);
    let admitted = Admitted(security);
    if before >= security.maxclients() {
        security.rejected.fetch_add(1, Ordering::Relaxed);
        return Err(MAXCLIENTS_REPLY);
    }
    if denied(
        security.protected_mode(),
        security.requires_auth(),
        peer.ip(),
    ) {
        tracing::debug!(%peer, "protected mode: connection from a non-loopback address refused");
        return Err(DENIED_REPLY);
    }
    Ok(admitted)
}

/// Whether a command with `flags` may run for this client now: it has
/// authenticated, no password is set, or the command is allowed before
/// AUTH (AUTH, HELLO, QUIT, RESET).
#[inline]
pub fn may_run(shared: &Shared, info: &ClientInfo, flags: u32) -> bool {
    info.authenticated.load(Ordering::Relaxed)
        || flags & crate::commands::flags::NO_AUTH != 0
        || !shared.security.requires_auth()
}

/// The reply to a command refused by [`may_run`]: `-NOAUTH`, which EXEC
/// reports as the reason it discards the transaction, as Redis does.
pub fn noauth_reply(command: &str) -> &'static str {
    if command == "exec" {
        "EXECABORT Transaction discarded because of: NOAUTH Authentication required."
    } else {
        NOAUTH
    }
}

/// Keeps the parser's unauthenticated limits in step with the client (one
/// relaxed load for a client that has authenticated). Called before each
/// frame, so a command pipelined after AUTH gets the full limits.
#[inline]
pub fn sync_parser(shared: &Shared, info: &ClientInfo, parser: &mut RequestParser) {
    let open = info.authenticated.load(Ordering::Relaxed) || !shared.security.requires_auth();
    if parser.limits().authenticated != open {
        parser.limits_mut().authenticated = open;
    }
}

/// Applies `proto-max-bulk-len` to a connection's parser (once per batch).
#[inline]
pub fn sync_bulk_limit(shared: &Shared, parser: &mut RequestParser) {
    let max = usize::try_from(shared.security.proto_max_bulk_len()).unwrap_or(usize::MAX);
    if parser.limits().max_bulk_len != max {
        parser.limits_mut().max_bulk_len = max;
    }
}

/// Whether `unparsed` bytes waiting in a client's query buffer pass
/// `client-query-buffer-limit`; if so, logs the client as Redis does and
/// the caller closes it.
pub fn query_buffer_exceeded(shared: &Shared, info: &ClientInfo, buf: &[u8]) -> bool {
    if (buf.len() as u64) <= shared.security.query_buffer_limit() {
        return false;
    }
    let head = &buf[..buf.len().min(64)];
    tracing::warn!(
        "Closing client that reached max query buffer length: {} (qbuf initial bytes: \"{}\")",
        info.line(),
        head.escape_ascii()
    );
    true
}

/// AUTH / HELLO AUTH: on success marks the client authenticated.
pub fn authenticate(shared: &Shared, info: &ClientInfo, user: Option<&[u8]>, pass: &[u8]) -> bool {
    let ok = shared.check_password(user, pass);
    if ok {
        info.authenticated.store(true, Ordering::Relaxed);
    } else {
        tracing::debug!(id = info.id, addr = %info.addr, "AUTH failed");
    }
    ok
}

/// The authentication state of a new or RESET connection: authenticated
/// exactly when no password is configured.
pub fn set_default_auth(shared: &Shared, info: &ClientInfo) {
    info.authenticated
        .store(!shared.security.requires_auth(), Ordering::Relaxed);
}

// ------------------------------------------------------------ settings

/// Parses a size as Redis's `memtoull` does: digits with an optional unit
/// `b`, `k`, `kb`, `m`, `mb`, `g`, `gb` (any case; `k` = 1000, `kb` = 1024).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.to_ascii_lowercase();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return None;
    }
    let mul: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(mul)
}

/// Parses `yes` / `no` (any case).
pub fn parse_yes_no(s: &str) -> Option<bool> {
    if s.eq_ignore_ascii_case("yes") {
        Some(true)
    } else if s.eq_ignore_ascii_case("no") {
        Some(false)
    } else {
        None
    }
}

/// A checked value for one of this module's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setting {
    /// `requirepass` (empty = none).
    Requirepass(Vec<u8>),
    /// `protected-mode`.
    ProtectedMode(bool),
    /// `maxclients`.
    Maxclients(u64),
    /// `proto-max-bulk-len`.
    ProtoMaxBulkLen(u64),
    /// `client-query-buffer-limit`.
    QueryBufferLimit(u64),
}

/// The settings of this module, as CONFIG GET names them.
pub const SETTINGS: &[&str] = &[
    "requirepass",
    "protected-mode",
    "maxclients",
    "proto-max-bulk-len",
    "client-query-buffer-limit",
];

/// CONFIG GET's value of one of [`SETTINGS`].
pub fn config_get(security: &Security, name: &str) -> String {
    match name {
        "requirepass" => security
            .password
            .read()
            .as_deref()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default(),
        "protected-mode" => if security.protected_mode() {
            "yes"
        } else {
            "no"
        }
        .into(),
        "maxclients" => security.maxclients().to_string(),
        "proto-max-bulk-len" => security.proto_max_bulk_len().to_string(),
        "client-query-buffer-limit" => security.query_buffer_limit().to_string(),
        _ => String::new(),
    }
}

fn size_in_range(value: &str, min: u64) -> Result<u64, String> {
    let n = parse_size(value).ok_or_else(|| "argument must be a memory value".to_string())?;
    if n < min || n > i64::MAX as u64 {
        return Err(format!(
            "argument must be between {min} and {} inclusive",
            i64::MAX
        ));
    }
    Ok(n)
}

/// Checks a value for one of [`SETTINGS`]; the error is the text after
/// Redis's `CONFIG SET failed (possibly related to argument '...') - `.
pub fn config_check(name: &str, value: &[u8]) -> Result<Setting, String> {
    let text = String::from_utf8_lossy(value);
    match name {
        "requirepass" => Ok(Setting::Requirepass(value.to_vec())),
        "protected-mode" => parse_yes_no(&text)
            .map(Setting::ProtectedMode)
            .ok_or_else(|| "argument must be 'yes' or 'no'".into()),
        "maxclients" => {
            let n: i64 = text
                .parse()
                .map_err(|_| "argument couldn't be parsed into an integer".to_string())?;
            if !(1..=u32::MAX as i64).contains(&n) {
                return Err(format!(
                    "argument must be between 1 and {} inclusive",
                    u32::MAX
                ));
            }
            let n = n as u64;
            let possible = raise_fd_limit(n);
            if possible < n {
                return Err(format!(
                    "The operating system is not able to handle the specified number of clients, try with {possible}"
                ));
            }
            Ok(Setting::Maxclients(n))
        }
        "proto-max-bulk-len" => {
            size_in_range(&text, MIN_BUFFER_LIMIT).map(Setting::ProtoMaxBulkLen)
        }
        "client-query-buffer-limit" => {
            size_in_range(&text, MIN_BUFFER_LIMIT).map(Setting::QueryBufferLimit)
        }
        _ => Err("unknown setting".into()),
    }
}

/// [`config_check`] for the configuration file and flags: the same rules,
/// except that `maxclients` is fitted to the open-file limit later, at
/// start-up ([`fit_maxclients`]), instead of being refused.
pub fn config_check_startup(name: &str, value: &[u8]) -> Result<Setting, String> {
    if name == "maxclients" {
        let text = String::from_utf8_lossy(value);
        return match text.parse::<i64>() {
            Ok(n) if (1..=u32::MAX as i64).contains(&n) => Ok(Setting::Maxclients(n as u64)),
            Ok(_) => Err(format!(
                "argument must be between 1 and {} inclusive",
                u32::MAX
            )),
            Err(_) => Err("argument couldn't be parsed into an integer".into()),
        };
    }
    config_check(name, value)
}

/// Lowers `config.maxclients` to what the open-file limit allows after
/// trying to raise it, with Redis's warning.
pub fn fit_maxclients(config: &mut Config) {
    let possible = raise_fd_limit(config.maxclients);
    if possible < config.maxclients {
        tracing::warn!(
            "You requested maxclients of {} requiring at least {} max file descriptors; maxclients has been reduced to {} to compensate for low ulimit",
            config.maxclients,
            config.maxclients + RESERVED_FDS,
            possible.max(1)
        );
        config.maxclients = possible.max(1);
    }
}

/// Applies a value that [`config_check`] accepted.
pub fn config_apply(security: &Security, setting: Setting) {
    match setting {
        Setting::Requirepass(p) => security.set_password(&p),
        Setting::ProtectedMode(v) => security.protected_mode.store(v, Ordering::Relaxed),
        Setting::Maxclients(n) => security.maxclients.store(n, Ordering::Relaxed),
        Setting::ProtoMaxBulkLen(n) => security.proto_max_bulk_len.store(n, Ordering::Relaxed),
        Setting::QueryBufferLimit(n) => security.query_buffer_limit.store(n, Ordering::Relaxed),
    }
}

/// Makes room for `maxclients` connections in the process's open-file
/// limit, raising the soft limit towards the hard one if needed, as Redis's
/// `adjustOpenFilesLimit` does. Returns how many clients the limit allows
/// (at least `maxclients` on success).
pub fn raise_fd_limit(maxclients: u64) -> u64 {
    let wanted = maxclients.saturating_add(RESERVED_FDS);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the rlimit we own and pass by pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return maxclients;
    }
    let cur: u64 = lim.rlim_cur;
    if cur >= wanted {
        return maxclients;
    }
    let target = wanted.min(lim.rlim_max);
    if target > cur {
        let new = libc::rlimit {
            rlim_cur: target,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit only reads the rlimit we pass by pointer.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) } == 0 {
            return target.saturating_sub(RESERVED_FDS).min(maxclients);
        }
    }
    cur.saturating_sub(RESERVED_FDS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_are_local_and_others_are_not() {
        for local in ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"] {
            assert!(is_local(local.parse().unwrap()), "{local}");
        }
        for remote in [
            "192.0.2.2",
            "10.0.0.1",
            "0.0.0.0",
            "fd00::2",
            "::ffff:10.0.0.1",
        ] {
            assert!(!is_local(remote.parse().unwrap()), "{remote}");
        }
    }

    #[test]
    fn protected_mode_denies_only_remote_clients_without_a_password() {
        let remote: IpAddr = "192.0.2.2".parse().unwrap();
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(denied(true, false, remote));
        assert!(!denied(true, true, remote));
        assert!(!denied(false, false, remote));
        assert!(!denied(true, false, local));
    }

    #[test]
    fn passwords_compare_by_content_whatever_the_lengths() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secretsecret"));
        assert!(!constant_time_eq(b"secret", b"sec"));
        assert!(!constant_time_eq(b"secret", b""));
        assert!(!constant_time_eq(b"ab", b"abab"));
    }

    #[test]
    fn sizes_take_redis_units() {
        assert_eq!(parse_size("1mb"), Some(1 << 20));
        assert_eq!(parse_size("1GB"), Some(1 << 30));
        assert_eq!(parse_size("2k"), Some(2000));
        assert_eq!(parse_size("100"), Some(100));
        assert_eq!(parse_size("mb"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("1tb"), None);
    }
}
