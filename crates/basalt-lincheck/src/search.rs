//! The search for one key: Wing & Gong's backtracking with Lowe's memo.
//!
//! The one idea a reader needs: the history is a doubly linked list of call
//! and return events in time order, and linearizing an operation *lifts* its
//! two events out of the list. Walking the list from the head, every call met
//! before the first return is an operation that may take effect next; meeting
//! a return means the operation it belongs to has not been linearized yet,
//! although it had to be by then, so the search backtracks. A memo of
//! `(set of linearized operations, model state)` pairs cuts every branch that
//! reaches a configuration already explored: from the same configuration the
//! same future follows, whatever order led there.
//!
//! An operation without a response has no return event, so it never forces a
//! backtrack: the search may linearize it wherever its call has been met, or
//! never. Reaching the tail of the list therefore means every completed
//! operation has been placed, and the history is linearizable.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::mem;
use std::time::Instant;

use crate::Model;

/// One operation of a single key's history, borrowed from the caller's.
#[derive(Debug)]
pub(crate) struct KeyOp<'a, I, O> {
    pub(crate) call: u64,
    pub(crate) ret: Option<u64>,
    pub(crate) input: &'a I,
    pub(crate) output: Option<&'a O>,
}

// Manual impls: a derive would demand `I: Clone, O: Clone`.
impl<I, O> Clone for KeyOp<'_, I, O> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<I, O> Copy for KeyOp<'_, I, O> {}

/// What one key's search may spend.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_steps: u64,
    pub(crate) deadline: Option<Instant>,
    pub(crate) max_memo_bytes: usize,
}

/// Why a search stopped without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GaveUp {
    Steps(u64),
    Deadline,
    Memory(usize),
}

#[derive(Debug)]
pub(crate) enum Outcome {
    /// `order` is the linearization found, if it was asked for.
    Linearizable {
        order: Option<Vec<usize>>,
    },
    /// `furthest` is the operation whose return event was the furthest the
    /// search reached. Reaching the return of operation `j` means every
    /// operation that returned before it had been placed in a valid order,
    /// so the history before that return is linearizable.
    Violation {
        furthest: usize,
    },
    GaveUp(GaveUp),
}

/// How often the wall clock is read, in steps.
const CLOCK_EVERY: u64 = 4096;
const HEAD: usize = 0;
const NONE: usize = usize::MAX;

/// Where the walk is.
#[derive(Debug, Clone, Copy)]
enum Cursor {
    /// At a node of the list.
    At(usize),
    /// Undoing the last choice.
    Backtrack,
}

/// A choice on the stack: the call linearized, the state before it, and
/// where to resume when it is undone.
#[derive(Debug)]
struct Frame<S> {
    call: usize,
    state: S,
    resume: Resume,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// Try the next candidate after the call.
    Next,
    /// The choice was a read-only operation taken without alternatives: if
    /// it failed, the configuration before it fails too.
    Forced,
}

/// Searches for a linearization of `ops`, all on one key, and returns it if
/// `want_order`.
///
/// One refinement of the classic walk, which does not change the answer: an
/// operation the model calls read-only (a read, given the value it saw) is
/// linearized as soon as it is a candidate and the state agrees, and the
/// alternatives to that choice are never tried. That is safe: any valid
/// completion can be reordered to take it first, because nothing that must
/// precede it is still unplaced (that operation's return would come first in
/// the list) and it changes no state on its way. Without this, reads
/// concurrent with writes multiply the orders to visit.
pub(crate) fn search<M: Model>(
    model: &M,
    ops: &[KeyOp<'_, M::Input, M::Output>],
    limits: &Limits,
    want_order: bool,
) -> Outcome {
    let mut list = EventList::new(ops);
    let read_only: Vec<bool> = ops
        .iter()
        .map(|op| model.is_read_only(op.input, op.output))
        .collect();
    let mut linearized = Bitset::new(ops.len());
    let mut memo: HashSet<(Bitset, M::State), BuildHasherDefault<FxHasher>> = HashSet::default();
    // A rough per-entry cost: the bitset's words and box, the state, and the
    // hash table's own slot overhead. Heap data inside the state is not seen.
    let entry_bytes = linearized.words.len() * 8 + mem::size_of::<(Bitset, M::State)>() + 16;
    let mut stack: Vec<Frame<M::State>> = Vec::new();
    let mut state = model.init();
    let mut furthest_return = NONE;

    let mut cursor = Cursor::At(list.next[HEAD]);
    let mut steps: u64 = 0;
    loop {
        steps += 1;
        if steps > limits.max_steps {
            return Outcome::GaveUp(GaveUp::Steps(limits.max_steps));
        }
        if steps.is_multiple_of(CLOCK_EVERY) {
            if limits.deadline.is_some_and(|d| Instant::now() >= d) {
                return Outcome::GaveUp(GaveUp::Deadline);
            }
            if memo.len().saturating_mul(entry_bytes) > limits.max_memo_bytes {
                return Outcome::GaveUp(GaveUp::Memory(limits.max_memo_bytes));
            }
        }

        // The call to try next.
        let call = match cursor {
            Cursor::At(entry) if entry == list.tail => {
                // Every completed operation is placed; the lost ones left may
                // simply never have taken effect.
                let order =
                    want_order.then(|| stack.iter().map(|frame| list.op[frame.call]).collect());
                return Outcome::Linearizable { order };
            }
            Cursor::At(entry) if !list.is_call[entry] => {
                // This return's operation should have been placed by now, and
                // nothing later may go before it: undo the last choice.
                if furthest_return == NONE || entry > furthest_return {
                    furthest_return = entry;
                }
                cursor = Cursor::Backtrack;
                continue;
            }
            Cursor::At(entry) => entry,
            Cursor::Backtrack => {
                let Some(frame) = stack.pop() else {
                    return Outcome::Violation {
                        furthest: list.op[furthest_return],
                    };
                };
                state = frame.state;
                linearized.clear(list.op[frame.call]);
                list.unlift(frame.call);
                cursor = match frame.resume {
                    Resume::Next => Cursor::At(list.next[frame.call]),
                    Resume::Forced => Cursor::Backtrack,
                };
                continue;
            }
        };

        let op = list.op[call];
        let KeyOp { input, output, .. } = ops[op];
        cursor = Cursor::At(list.next[call]);
        let Some(next_state) = model.step(&state, input, output) else {
            continue;
        };
        linearized.set(op);
        if memo.insert((linearized.clone(), next_state.clone())) {
            let resume = if read_only[op] {
                Resume::Forced
            } else {
                Resume::Next
            };
            stack.push(Frame {
                call,
                state: mem::replace(&mut state, next_state),
                resume,
            });
            list.lift(call);
            cursor = Cursor::At(list.next[HEAD]);
        } else {
            // Seen before, so explored before, and it failed. For a
            // read-only operation that means this configuration fails too.
            linearized.clear(op);
            if read_only[op] {
                cursor = Cursor::Backtrack;
            }
        }
    }
}

/// Call and return events sorted by time, as a doubly linked list over
/// arrays. Node 0 is the head sentinel, the last node the tail sentinel, and
/// node numbers between follow time order, so a larger node is a later event.
#[derive(Debug)]
struct EventList {
    next: Vec<usize>,
    prev: Vec<usize>,
    op: Vec<usize>,
    is_call: Vec<bool>,
    /// The return node of each operation, `NONE` for a lost response.
    ret_node: Vec<usize>,
    tail: usize,
}

impl EventList {
    fn new<I, O>(ops: &[KeyOp<'_, I, O>]) -> Self {
        // At equal times calls sort before returns, so an operation invoked
        // at the instant another returned counts as concurrent with it: clocks
        // have finite resolution, and the checker must not invent an order.
        let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(ops.len() * 2);
        for (i, op) in ops.iter().enumerate() {
            events.push((op.call, true, i));
            if let Some(ret) = op.ret {
                events.push((ret, false, i));
            }
        }
        events.sort_unstable_by_key(|&(time, is_call, i)| (time, !is_call, i));

        let nodes = events.len() + 2;
        let tail = nodes - 1;
        let mut list = EventList {
            next: (1..=nodes).collect(),
            prev: (0..nodes).map(|n| n.wrapping_sub(1)).collect(),
            op: vec![NONE; nodes],
            is_call: vec![false; nodes],
            ret_node: vec![NONE; ops.len()],
            tail,
        };
        for (pos, &(_, is_call, i)) in events.iter().enumerate() {
            let node = pos + 1;
            list.op[node] = i;
            list.is_call[node] = is_call;
            if !is_call {
                list.ret_node[i] = node;
            }
        }
        list
    }

    /// Removes a call node and its operation's return node.
    fn lift(&mut self, call: usize) {
        self.unlink(call);
        let ret = self.ret_node[self.op[call]];
        if ret != NONE {
            self.unlink(ret);
        }
    }

    /// Undoes `lift`, in reverse order.
    fn unlift(&mut self, call: usize) {
        let ret = self.ret_node[self.op[call]];
        if ret != NONE {
            self.relink(ret);
        }
        self.relink(call);
    }

    fn unlink(&mut self, node: usize) {
        let (prev, next) = (self.prev[node], self.next[node]);
        self.next[prev] = next;
        self.prev[next] = prev;
    }

    fn relink(&mut self, node: usize) {
        let (prev, next) = (self.prev[node], self.next[node]);
        self.next[prev] = node;
        self.prev[next] = node;
    }
}

/// The set of linearized operations, one bit per operation of the key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Bitset {
    words: Box<[u64]>,
}

impl Bitset {
    fn new(bits: usize) -> Self {
        Bitset {
            words: vec![0; bits.div_ceil(64)].into_boxed_slice(),
        }
    }

    fn set(&mut self, bit: usize) {
        self.words[bit / 64] |= 1 << (bit % 64);
    }

    fn clear(&mut self, bit: usize) {
        self.words[bit / 64] &= !(1 << (bit % 64));
    }
}

/// The Fx hash (rustc's): the memo hashes a bitset and a small state per
/// step, where std's SipHash costs more than the rest of the step.
#[derive(Debug, Default)]
struct FxHasher {
    hash: u64,
}

impl FxHasher {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(Self::SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        for &byte in chunks.remainder() {
            self.add(u64::from(byte));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op<'a>(call: u64, ret: Option<u64>) -> KeyOp<'a, (), ()> {
        KeyOp {
            call,
            ret,
            input: &(),
            output: None,
        }
    }

    #[test]
    fn events_sort_calls_before_returns_at_equal_times() {
        // Op 0 returns at 5 and op 1 is invoked at 5: the call comes first.
        let list = EventList::new(&[op(0, Some(5)), op(5, Some(9))]);
        let mut order = Vec::new();
        let mut node = list.next[HEAD];
        while node != list.tail {
            order.push((list.op[node], list.is_call[node]));
            node = list.next[node];
        }
        assert_eq!(order, [(0, true), (1, true), (0, false), (1, false)]);
    }

    #[test]
    fn lift_and_unlift_restore_the_list() {
        let mut list = EventList::new(&[op(0, Some(3)), op(1, Some(2)), op(4, None)]);
        let before = (list.next.clone(), list.prev.clone());
        let call0 = 1;
        let call1 = 2;
        list.lift(call1);
        list.lift(call0);
        // Only op 2's call remains: it never returned.
        let lost = list.next[HEAD];
        assert_eq!(list.op[lost], 2);
        assert_eq!(list.next[lost], list.tail);
        list.lift(lost);
        assert_eq!(list.next[HEAD], list.tail);
        list.unlift(lost);
        list.unlift(call0);
        list.unlift(call1);
        assert_eq!((list.next.clone(), list.prev.clone()), before);
    }

    #[test]
    fn bitset_sets_and_clears_across_words() {
        let mut set = Bitset::new(130);
        set.set(0);
        set.set(64);
        set.set(129);
        assert_eq!(&*set.words, &[1, 1, 2]);
        set.clear(64);
        assert_eq!(&*set.words, &[1, 0, 2]);
    }
}
