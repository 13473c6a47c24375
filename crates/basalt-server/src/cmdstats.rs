//! Per-command call counters and run time: INFO `commandstats` and the
//! `basalt_command*` metrics of `GET /metrics`.
//!
//! The one idea a reader needs: **each thread counts into its own stripe.**
//! Every command adds to four counters (calls, nanoseconds, failed,
//! rejected) in a table indexed by the command's position in the command
//! table. The table is repeated [`STRIPES`] times; a thread picks its
//! stripe once (round robin) and keeps it, so two workers running GET at
//! the same time touch different cache lines, and stripes are padded apart
//! so their edges never share one. A command costs two relaxed atomic adds
//! (three when it fails) on a line its thread owns; reading sums the
//! stripes. The time comes from one clock read per command: the connection
//! reads the clock after each command and charges it the time since the
//! previous reading (the batch start, or the previous command's end), see
//! `Conn::tick`.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Copies of the counter table; threads beyond this many share stripes
/// (still correct, the adds are atomic).
pub const STRIPES: usize = 16;

/// Counters of one command in one stripe (32 bytes: two per cache line).
#[derive(Debug, Default)]
#[repr(C, align(32))]
struct Counters {
    calls: AtomicU64,
    nanos: AtomicU64,
    failed: AtomicU64,
    rejected: AtomicU64,
}

/// Padding between stripes, in `Counters` (128 bytes: two cache lines, so
/// the adjacent-line prefetcher does not pair two stripes either).
const PAD: usize = 4;

/// Per-command counters for the whole server.
#[derive(Debug)]
pub struct CommandStats {
    cells: Box<[Counters]>,
    stride: usize,
    commands: usize,
}

/// One command's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Times the handler ran.
    pub calls: u64,
    /// Nanoseconds spent in it.
    pub nanos: u64,
    /// Runs that replied with an error.
    pub failed: u64,
    /// Refused before running (wrong arity, not allowed in this context).
    pub rejected: u64,
}

thread_local! {
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

#[inline]
fn my_stripe() -> usize {
    STRIPE.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
        s.set(v);
        v
    })
}

impl CommandStats {
    /// Counters for `commands` commands (the size of the command table).
    pub fn new(commands: usize) -> CommandStats {
        let stride = commands.next_multiple_of(2) + PAD;
        let cells = (0..STRIPES * stride + PAD)
            .map(|_| Counters::default())
            .collect();
        CommandStats {
            cells,
            stride,
            commands,
        }
    }

    #[inline]
    fn mine(&self, idx: usize) -> &Counters {
        &self.cells[PAD + my_stripe() * self.stride + idx]
    }

    /// Counts one run of command `idx` that took `nanos`.
    #[inline]
    pub fn record(&self, idx: usize, nanos: u64, failed: bool) {
        let c = self.mine(idx);
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.nanos.fetch_add(nanos, Ordering::Relaxed);
        if failed {
            c.failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a call of command `idx` refused before its handler ran.
    #[inline]
    pub fn reject(&self, idx: usize) {
        self.mine(idx).rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// The totals of command `idx` across stripes.
    pub fn totals(&self, idx: usize) -> Totals {
        let mut t = Totals::default();
        for s in 0..STRIPES {
            let c = &self.cells[PAD + s * self.stride + idx];
            t.calls += c.calls.load(Ordering::Relaxed);
            t.nanos += c.nanos.load(Ordering::Relaxed);
            t.failed += c.failed.load(Ordering::Relaxed);
            t.rejected += c.rejected.load(Ordering::Relaxed);
        }
        t
    }

    /// Every command with anything counted, in command-table order, with
    /// its name.
    pub fn snapshot(&self) -> Vec<(&'static str, Totals)> {
        crate::commands::all()
            .enumerate()
            .take(self.commands)
            .map(|(i, c)| (c.name, self.totals(i)))
            .filter(|(_, t)| *t != Totals::default())
            .collect()
    }

    /// Clears every counter (CONFIG RESETSTAT).
    pub fn reset(&self) {
        for c in self.cells.iter() {
            c.calls.store(0, Ordering::Relaxed);
            c.nanos.store(0, Ordering::Relaxed);
            c.failed.store(0, Ordering::Relaxed);
            c.rejected.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_many_threads_add_up_and_reset_clears_them() {
        let st = std::sync::Arc::new(CommandStats::new(3));
        let handles: Vec<_> = (0..20)
            .map(|_| {
                let st = st.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        st.record(1, 10, false);
                    }
                    st.record(2, 5, true);
                    st.reject(0);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(
            st.totals(1),
            Totals {
                calls: 2000,
                nanos: 20000,
                failed: 0,
                rejected: 0
            }
        );
        assert_eq!(st.totals(2).failed, 20);
        assert_eq!(st.totals(0).rejected, 20);
        st.reset();
        assert_eq!(st.totals(1), Totals::default());
    }
}
