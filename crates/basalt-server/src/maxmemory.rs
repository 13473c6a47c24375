//! `maxmemory`: a budget for the memory Basalt itself holds.
//!
//! The one idea a reader needs: Basalt's values live on disk, so what grows
//! with the data in RAM is what the allocator holds (the key index, map
//! field tables, sorted-set indexes, client buffers), not the page cache,
//! which the kernel shrinks by itself. `maxmemory` caps the former, as
//! Redis's does with its only policy that loses no data, `noeviction`:
//! over the budget, commands that may grow memory (the `denyoom` flag)
//! answer `-OOM` and change nothing; reads, deletions and every other
//! command go on. A database cannot evict, so other policies are refused.
//!
//! The allocator's figure (`mallinfo2`) walks every arena, so it is read
//! ten times a second by a task, not per command; a command reads one flag.
//! Replicated applies never check it: the leader decided, and a follower
//! that refused an entry would diverge.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Redis's reply to a command refused over the budget.
pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

thread_local! {
    /// Set while a script's call runs: the script checked its own flags.
    static UNCHECKED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the per-command check off on this thread (a script's
/// call, which the script checked against its `allow-oom` flag).
pub fn unchecked<R>(f: impl FnOnce() -> R) -> R {
    let was = UNCHECKED.with(|c| c.replace(true));
    let r = f();
    UNCHECKED.with(|c| c.set(was));
    r
}

/// Whether a command on this thread skips the check ([`unchecked`]).
pub fn skipped() -> bool {
    UNCHECKED.with(|c| c.get())
}

/// The budget and whether the process is over it.
#[derive(Debug, Default)]
pub struct MaxMemory {
    limit: AtomicU64,
    used: AtomicU64,
    over: AtomicBool,
}

impl MaxMemory {
    /// A budget of `limit` bytes; 0 = none.
    pub fn new(limit: u64) -> MaxMemory {
        let m = MaxMemory {
            limit: AtomicU64::new(limit),
            ..MaxMemory::default()
        };
        m.refresh();
        m
    }

    /// The budget in bytes (0 = none).
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Changes the budget (CONFIG SET maxmemory) and looks at once.
    pub fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Relaxed);
        self.refresh();
    }

    /// Reads the allocator's bytes in use and decides whether the process
    /// is over the budget. Does nothing without a budget.
    pub fn refresh(&self) {
        let limit = self.limit();
        if limit == 0 {
            self.over.store(false, Ordering::Relaxed);
            return;
        }
        let used = crate::commands::server::allocated_bytes();
        self.used.store(used, Ordering::Relaxed);
        self.over.store(used > limit, Ordering::Relaxed);
    }

    /// Whether commands that may grow memory must be refused now.
    #[inline]
    pub fn over(&self) -> bool {
        self.over.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_below_what_is_allocated_is_over_and_none_never_is() {
        let none = MaxMemory::new(0);
        assert!(!none.over());
        // Something is allocated in any test process.
        let tiny = MaxMemory::new(1);
        assert!(tiny.over());
        tiny.set_limit(u64::MAX);
        assert!(!tiny.over());
        tiny.set_limit(0);
        assert!(!tiny.over());
    }
}
