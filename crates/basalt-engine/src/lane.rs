//! [`SequenceLane`]: where a thread's writes take their sequence numbers.
//!
//! Every record carries a sequence number, normally drawn from the
//! counter its databases share ([`crate::Options::sequence`]). An embedder
//! that replays the same writes on several machines and wants the same
//! numbers everywhere (a replicated state machine: versions must agree on
//! every node) can run independent writes on several threads at once only
//! if each thread's numbers do not depend on how the threads interleave.
//! A lane gives that: while it is open on a thread, that thread's writes
//! take consecutive numbers from the lane's start instead of the shared
//! counter, whatever other threads do meanwhile.
//!
//! The embedder keeps the rules the shared counter kept by itself:
//! writes of one key on one thread (so its numbers keep growing), the
//! lanes' ranges disjoint (a write batch's members are found by their
//! numbers, see `batch.rs`), and the shared counter raised past every
//! number a lane handed out before writes go back to it.

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    /// The next number this thread's lane hands out; 0 when no lane is open
    /// (0 is never a lane's number: a lane starts above 0).
    static NEXT: Cell<u64> = const { Cell::new(0) };
}

/// An open lane on this thread (see the module docs); closed when dropped.
#[must_use = "the lane is open only while the guard lives"]
#[derive(Debug)]
pub struct SequenceLane {
    previous: u64,
    /// Not `Send`: the lane belongs to the thread that opened it.
    _thread: PhantomData<*const ()>,
}

impl SequenceLane {
    /// Opens a lane on this thread: its writes take `start`, `start + 1`,
    /// ... until the guard drops. `start` must be above 0.
    pub fn open(start: u64) -> SequenceLane {
        assert!(start > 0, "a sequence lane starts above 0");
        SequenceLane {
            previous: NEXT.with(|n| n.replace(start)),
            _thread: PhantomData,
        }
    }

    /// The number the next write on this lane would take (its start plus
    /// the writes so far).
    pub fn next(&self) -> u64 {
        NEXT.with(Cell::get)
    }
}

impl Drop for SequenceLane {
    fn drop(&mut self) {
        NEXT.with(|n| n.set(self.previous));
    }
}

/// The next number of this thread's open lane, advanced; `None` without
/// one (the caller draws from the shared counter).
#[inline]
pub(crate) fn take() -> Option<u64> {
    NEXT.with(|n| {
        let v = n.get();
        if v == 0 {
            None
        } else {
            n.set(v + 1);
            Some(v)
        }
    })
}
