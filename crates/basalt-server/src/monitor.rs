//! MONITOR and CLIENT PAUSE: two server-wide switches every command looks
//! at with one relaxed load each, and which cost nothing more while off.
//!
//! MONITOR clients get one line per executed command, as Redis 7.0 writes
//! it: `+<unix secs>.<micros> [<db> <addr>] "arg" ...`, each argument
//! quoted with Redis's `sdscatrepr` escapes. A line is fed after the
//! command ran (scripts before, so their own calls, shown as `[<db> lua]`,
//! follow them); administrative commands are not shown, AUTH's and HELLO's
//! secrets are `(redacted)`, and a blocked command is shown once, when it
//! first runs. Lines travel through the monitor's mailbox like pub/sub
//! messages, so a slow monitor never slows the command it watches.
//!
//! CLIENT PAUSE makes the connections wait before running a command that
//! the pause covers (every command for ALL; for WRITE the commands that
//! may write or replicate, EXEC and scripts), until CLIENT UNPAUSE or the
//! deadline; commands already running are not interrupted.

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use basalt_resp::Args;
use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::commands::{flags, is, CommandDef};
use crate::pubsub::Hub;
use crate::state::ClientInfo;

thread_local! {
    /// Set while a script runs on this thread: its calls show as `lua`.
    static IN_SCRIPT: Cell<bool> = const { Cell::new(false) };
    /// Set while EXEC runs its queue on this thread (Redis's
    /// `CLIENT_DENY_BLOCKING`: MONITOR is refused there).
    static IN_EXEC: Cell<bool> = const { Cell::new(false) };
}

/// Marks a script running on this thread until dropped.
#[derive(Debug)]
pub struct ScriptScope(bool);

impl Drop for ScriptScope {
    fn drop(&mut self) {
        IN_SCRIPT.with(|c| c.set(self.0));
    }
}

/// Marks EXEC running on this thread until dropped.
#[derive(Debug)]
pub struct ExecScope(bool);

impl ExecScope {
    /// Enters EXEC.
    pub fn enter() -> ExecScope {
        ExecScope(IN_EXEC.with(|c| c.replace(true)))
    }
}

impl Drop for ExecScope {
    fn drop(&mut self) {
        IN_EXEC.with(|c| c.set(self.0));
    }
}

/// Whether EXEC is running its queue on this thread.
pub fn in_exec() -> bool {
    IN_EXEC.with(|c| c.get())
}

/// The MONITOR clients.
#[derive(Debug, Default)]
pub struct Monitors {
    count: AtomicUsize,
    list: Mutex<Vec<Arc<ClientInfo>>>,
}

impl Monitors {
    /// Whether anyone monitors (one relaxed load).
    #[inline]
    pub fn active(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// MONITOR: `false` if `c` already monitors.
    pub fn add(&self, c: &Arc<ClientInfo>) -> bool {
        if c.pubsub.monitor.swap(true, Ordering::Relaxed) {
            return false;
        }
        let mut l = self.list.lock();
        l.push(c.clone());
        self.count.store(l.len(), Ordering::Relaxed);
        true
    }

    /// Forgets `c` (RESET, disconnect).
    pub fn remove(&self, c: &ClientInfo) {
        if !c.pubsub.monitor.swap(false, Ordering::Relaxed) {
            return;
        }
        let mut l = self.list.lock();
        l.retain(|m| m.id != c.id);
        self.count.store(l.len(), Ordering::Relaxed);
    }

    /// Feeds the line for `args`, run by `client` on database `db`.
    #[cold]
    fn feed(&self, hub: &Hub, client: &ClientInfo, db: usize, args: &Args<'_>) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let mut line = format!("+{}.{:06} [{db} ", now.as_secs(), now.subsec_micros()).into_bytes();
        if IN_SCRIPT.with(|c| c.get()) {
            line.extend_from_slice(b"lua");
        } else {
            line.extend_from_slice(client.addr.to_string().as_bytes());
        }
        line.push(b']');
        let redacted = redacted(args);
        for (i, a) in args.iter().enumerate() {
            line.push(b' ');
            if redacted.contains(&i) {
                line.extend_from_slice(b"\"(redacted)\"");
            } else {
                repr(&mut line, a);
            }
        }
        line.extend_from_slice(b"\r\n");
        let line = Bytes::from(line);
        let list = self.list.lock().clone();
        for m in list {
            hub.push_raw(&m, line.clone());
        }
    }
}

/// Before a command runs: feeds a script command (shown before its own
/// calls) and marks the script scope. The returned scope lives as long as
/// the handler.
#[inline]
pub fn before(
    hub: &Hub,
    client: &ClientInfo,
    db: usize,
    cmd: &CommandDef,
    args: &Args<'_>,
) -> Option<ScriptScope> {
    if cmd.flags & flags::RUNS_SCRIPT == 0 {
        return None;
    }
    if hub.monitors.active() {
        hub.monitors.feed(hub, client, db, args);
    }
    Some(ScriptScope(IN_SCRIPT.with(|c| c.replace(true))))
}

/// After a command ran: feeds it, unless it is a script (fed before), an
/// administrative command, or the re-run of a blocked one (`rerun`).
#[inline]
pub fn after(
    hub: &Hub,
    client: &ClientInfo,
    db: usize,
    cmd: &CommandDef,
    args: &Args<'_>,
    rerun: bool,
) {
    if hub.monitors.active()
        && cmd.flags & (flags::ADMIN | flags::SKIP_MONITOR | flags::RUNS_SCRIPT) == 0
        && !rerun
    {
        hub.monitors.feed(hub, client, db, args);
    }
}

/// Feeds EXEC, which the transaction code runs outside the table's path.
pub fn exec(hub: &Hub, client: &ClientInfo, db: usize, args: &Args<'_>) {
    if hub.monitors.active() {
        hub.monitors.feed(hub, client, db, args);
    }
}

/// Argument positions Redis shows as `(redacted)`.
fn redacted(args: &Args<'_>) -> Vec<usize> {
    let name = &args[0];
    if is(name, "auth") {
        return (1..args.len()).collect();
    }
    let mut v = Vec::new();
    if is(name, "hello") {
        let mut i = 2;
        while i < args.len() {
            if is(&args[i], "auth") && i + 2 < args.len() {
                v.extend([i + 1, i + 2]);
                i += 3;
            } else if is(&args[i], "setname") {
                i += 2;
            } else {
                i += 1;
            }
        }
    } else if is(name, "migrate") {
        let all: Vec<&[u8]> = args.iter().collect();
        v = crate::commands::dump::MigrateOptions::read(&all).secrets;
    }
    v
}

/// Redis's `sdscatrepr`: a double-quoted string with C escapes.
pub fn repr(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for &c in s {
        match c {
            b'\\' | b'"' => {
                out.push(b'\\');
                out.push(c);
            }
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            7 => out.extend_from_slice(b"\\a"),
            8 => out.extend_from_slice(b"\\b"),
            0x20..=0x7e => out.push(c),
            _ => out.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

/// What a pause holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PauseMode {
    /// Commands that may write (and EXEC, scripts).
    Write = 1,
    /// Every command.
    All = 2,
}

/// CLIENT PAUSE state.
#[derive(Debug, Default)]
pub struct Pause {
    /// 0 = none, else a [`PauseMode`].
    mode: AtomicU8,
    end: Mutex<Option<Instant>>,
    changed: Notify,
}

impl Pause {
    /// Whether a pause may be in force (one relaxed load).
    #[inline]
    pub fn active(&self) -> bool {
        self.mode.load(Ordering::Relaxed) != 0
    }

    /// CLIENT PAUSE: the stricter mode and the later deadline win.
    pub fn pause(&self, until: Instant, mode: PauseMode) {
        let mut end = self.end.lock();
        if end.is_none_or(|e| until > e) {
            *end = Some(until);
        }
        self.mode.fetch_max(mode as u8, Ordering::Relaxed);
        self.changed.notify_waiters();
    }

    /// CLIENT UNPAUSE (or the deadline passed).
    pub fn unpause(&self) {
        let mut end = self.end.lock();
        *end = None;
        self.mode.store(0, Ordering::Relaxed);
        self.changed.notify_waiters();
    }

    /// How long a command with `may_write` must still wait (`None`: run).
    fn holds(&self, may_write: bool) -> Option<Instant> {
        let mode = self.mode.load(Ordering::Relaxed);
        if mode == 0 || (mode == PauseMode::Write as u8 && !may_write) {
            return None;
        }
        let end = (*self.end.lock())?;
        if Instant::now() >= end {
            self.unpause();
            return None;
        }
        Some(end)
    }

    /// Whether the command `args` is held back now, and until when. As in
    /// Redis the check comes before queuing in MULTI; EXEC counts as a
    /// write (its queue is not looked at).
    pub fn holds_command(&self, args: &Args<'_>) -> Option<Instant> {
        let may_write = match crate::commands::lookup(&args[0]) {
            Some(c) if c.name == "exec" => true,
            Some(c) if c.flags & flags::RUNS_SCRIPT != 0 => c.flags & flags::READONLY == 0,
            Some(c) => c.flags & (flags::WRITE | flags::MAY_REPLICATE) != 0,
            None => false,
        };
        self.holds(may_write)
    }

    /// Waits until the pause ends or changes (then the caller asks again).
    pub async fn wait(&self, until: Instant) {
        // Asked again at least every 100 ms: a change between the caller's
        // check and this wait is not lost for long.
        let until = until.min(Instant::now() + Duration::from_millis(100));
        tokio::select! {
            _ = self.changed.notified() => {}
            _ = tokio::time::sleep_until(until.into()) => {}
        }
    }
}

/// Parses CLIENT PAUSE's timeout as Redis does (ms, not negative).
pub fn pause_timeout(arg: &[u8]) -> Result<Duration, &'static str> {
    match crate::commands::parse_i64(arg) {
        None => Err("ERR timeout is not an integer or out of range"),
        Some(n) if n < 0 => Err("ERR timeout is negative"),
        Some(n) => Ok(Duration::from_millis(n as u64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_escapes_like_sdscatrepr() {
        let mut v = Vec::new();
        repr(&mut v, b"k\n\"\x01\xc3\xa9\\ \t\r\x07\x08");
        assert_eq!(
            String::from_utf8(v).unwrap(),
            r#""k\n\"\x01\xc3\xa9\\ \t\r\a\b""#
        );
    }
}
