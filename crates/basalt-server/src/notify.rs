//! Keyspace notifications (`notify-keyspace-events`): the event classes,
//! Redis 7.0's flag letters, and publishing an event on
//! `__keyspace@<db>__:<key>` (message: the event) and
//! `__keyevent@<db>__:<event>` (message: the key).
//!
//! The one idea a reader needs: commands call `Ctx::notify(class, event,
//! key)` after each change, exactly where Redis calls
//! `notifyKeyspaceEvent`; with notifications off that is one relaxed
//! atomic load and a branch, so the hot path does not pay for the feature.
//! Being the one place every change passes, it also feeds client-side
//! caching invalidations (`crate::tracking`), at one more relaxed load.

use std::sync::atomic::Ordering;

use crate::pubsub::Hub;

/// `K`: publish on `__keyspace@<db>__:<key>`.
pub const KEYSPACE: u32 = 1 << 0;
/// `E`: publish on `__keyevent@<db>__:<event>`.
pub const KEYEVENT: u32 = 1 << 1;
/// `g`: generic commands (DEL, EXPIRE, RENAME, ...).
pub const GENERIC: u32 = 1 << 2;
/// `$`: string commands.
pub const STRING: u32 = 1 << 3;
/// `l`: list commands.
pub const LIST: u32 = 1 << 4;
/// `s`: set commands.
pub const SET: u32 = 1 << 5;
/// `h`: hash commands.
pub const HASH: u32 = 1 << 6;
/// `z`: sorted set commands.
pub const ZSET: u32 = 1 << 7;
/// `x`: expired events.
pub const EXPIRED: u32 = 1 << 8;
/// `e`: evicted events (Basalt never evicts).
pub const EVICTED: u32 = 1 << 9;
/// `t`: stream commands (no streams yet).
pub const STREAM: u32 = 1 << 10;
/// `m`: key-miss events.
pub const KEY_MISS: u32 = 1 << 11;
/// `d`: module events (no modules).
pub const MODULE: u32 = 1 << 12;
/// `n`: `new`, when a write creates a key (not part of `A`).
pub const NEW: u32 = 1 << 13;
/// `A`: alias for `g$lshzxetd`.
pub const ALL: u32 =
    GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The error text CONFIG SET gives for a letter Redis 7.0 does not know.
pub const INVALID: &str = "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.";

/// Parses flag letters (Redis's `keyspaceEventsStringToFlags`).
pub fn parse(s: &[u8]) -> Option<u32> {
    let mut flags = 0;
    for &c in s {
        flags |= match c {
            b'A' => ALL,
            b'g' => GENERIC,
            b'$' => STRING,
            b'l' => LIST,
            b's' => SET,
            b'h' => HASH,
            b'z' => ZSET,
            b'x' => EXPIRED,
            b'e' => EVICTED,
            b'K' => KEYSPACE,
            b'E' => KEYEVENT,
            b't' => STREAM,
            b'm' => KEY_MISS,
            b'd' => MODULE,
            b'n' => NEW,
            _ => return None,
        };
    }
    Some(flags)
}

/// The normalised letters CONFIG GET shows (`keyspaceEventsFlagsToString`).
pub fn render(flags: u32) -> String {
    let mut s = String::new();
    if flags & ALL == ALL {
        s.push('A');
    } else {
        for (bit, c) in [
            (GENERIC, 'g'),
            (STRING, '$'),
            (LIST, 'l'),
            (SET, 's'),
            (HASH, 'h'),
            (ZSET, 'z'),
            (EXPIRED, 'x'),
            (EVICTED, 'e'),
            (STREAM, 't'),
            (MODULE, 'd'),
            (NEW, 'n'),
        ] {
            if flags & bit != 0 {
                s.push(c);
            }
        }
    }
    for (bit, c) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
        if flags & bit != 0 {
            s.push(c);
        }
    }
    s
}

impl Hub {
    /// Whether events of `class` are published (one relaxed load).
    #[inline]
    pub fn notifies(&self, class: u32) -> bool {
        self.events.load(Ordering::Relaxed) & class != 0
    }

    /// Sets `notify-keyspace-events`.
    pub fn set_events(&self, flags: u32) {
        self.events.store(flags, Ordering::Relaxed);
    }

    /// The current `notify-keyspace-events` flags.
    pub fn events(&self) -> u32 {
        self.events.load(Ordering::Relaxed)
    }

    /// Publishes a keyspace event if its class is enabled. Every key
    /// modification passes here, so it is also where client-side caching
    /// learns of changes (`crate::tracking`; one relaxed load when nobody
    /// tracks). `keymiss` is not a change and `new` always comes with the
    /// event of the write that created the key.
    #[inline]
    pub fn notify(&self, class: u32, event: &str, key: &[u8], db: usize) {
        if class & (KEY_MISS | NEW) == 0 {
            self.tracking.invalidate(self, key);
        }
        if self.notifies(class) {
            self.notify_slow(event, key, db);
        }
    }

    #[cold]
    fn notify_slow(&self, event: &str, key: &[u8], db: usize) {
        if self.total.load(Ordering::Relaxed) == 0 {
            return;
        }
        let flags = self.events();
        if flags & KEYSPACE != 0 {
            let mut chan = format!("__keyspace@{db}__:").into_bytes();
            chan.extend_from_slice(key);
            self.publish(&chan, event.as_bytes());
        }
        if flags & KEYEVENT != 0 {
            let chan = format!("__keyevent@{db}__:{event}");
            self.publish(chan.as_bytes(), key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_round_trip_like_redis() {
        assert_eq!(render(parse(b"KEA").unwrap()), "AKE");
        assert_eq!(render(parse(b"Ex").unwrap()), "xE");
        assert_eq!(render(parse(b"Kg$lshzxetd").unwrap()), "AK");
        assert_eq!(render(parse(b"").unwrap()), "");
        assert_eq!(render(parse(b"mK").unwrap()), "Km");
        // `n` is not part of `A`, and `A` hides it when both are set, as
        // in Redis 7.0.15.
        assert_eq!(render(parse(b"KEn").unwrap()), "nKE");
        assert_eq!(render(parse(b"nKEA").unwrap()), "AKE");
        assert_eq!(parse(b"KEA").unwrap() & NEW, 0);
        assert_eq!(parse(b"KE?"), None);
    }
}
