//! A linearizability checker for histories recorded against Basalt.
//!
//! A test drives a cluster with several clients, records every operation with
//! the time it was invoked and the time its reply arrived, and asks [`check`]
//! whether some total order of the operations (a *linearization*) explains
//! every reply while respecting real time: an operation that returned before
//! another was invoked must come first. If none exists, the cluster lost a
//! write, served a stale read, or otherwise broke the illusion of one copy.
//!
//! # How it searches
//!
//! The checker follows Wing & Gong's backtracking search with Lowe's
//! memoization, the algorithm of Porcupine and Knossos's linear checker:
//!
//! - **Per key.** Linearizability is local (P-compositional): a history is
//!   linearizable exactly when each key's sub-history is. The history is split
//!   by [`Operation::key`] and each key is searched on its own, in key order,
//!   so the search space is exponential only in one key's concurrency.
//! - **Events in a linked list.** A key's calls and returns are sorted by time
//!   into a doubly linked list. The search walks it from the head: a call met
//!   before any return may take effect next, so the search tries it against
//!   the [`Model`] and, if the model accepts the output, removes the call and
//!   its return from the list and starts again from the head. Meeting a
//!   return means its operation should already have taken effect: the search
//!   undoes its last choice and tries the next candidate.
//! - **Memo.** Every configuration reached, a bitset of the operations
//!   linearized so far plus the model state, is remembered; reaching one again
//!   by another order is cut at once, since the same future follows from it.
//!   This is what makes thousands of operations per key cheap.
//! - **Reads go first.** An operation that cannot change the state (a read,
//!   a failed compare-and-set: see [`Model::is_read_only`]) is placed as soon
//!   as it is a candidate and the state agrees with its reply, and no
//!   alternative is tried: any valid order can be rearranged to place it
//!   there. Reads concurrent with writes would otherwise multiply the orders
//!   to visit.
//! - **Lost replies.** An operation whose reply never came (a timeout, a
//!   killed node, a reset connection) has no response time: it is concurrent
//!   with everything after its invocation, and it may take effect or not. Its
//!   output, if any, is not checked.
//! - **Equal times** count as concurrent: an operation invoked at the instant
//!   another returned may be ordered before it. Clocks have finite resolution
//!   and the checker must not invent an order that was not observed.
//! - **Budget.** [`Options`] bounds the search steps per key, the wall time of
//!   the whole check and the memo's memory; past them a key is reported
//!   [`Verdict::Unknown`] instead of hanging the test.
//!
//! When a key is not linearizable, the explanation names the operation whose
//! response no order can explain: the key's history up to that response is
//! the smallest prefix that cannot be linearized, with the operations still
//! awaiting a reply at that instant treated as pending. The explanation shows
//! that operation, the ones concurrent with it, and one valid order of the
//! history just before its response, with the state after each operation.
//! Explaining costs a few more searches of the key, done only on failure.
//!
//! # Example
//!
//! ```
//! use basalt_lincheck::{check, Operation, Options, Register, RegisterInput as In, RegisterOutput as Out, Verdict};
//!
//! let v = |s: &str| Some(s.to_string());
//! let history = vec![
//!     // Client 1 writes "a" during [0, 10]; client 2 then reads nothing.
//!     Operation::completed(1, "k", 0, 10, In::Write("a".into()), Out::Ok),
//!     Operation::completed(2, "k", 20, 30, In::Read, Out::Value(None)),
//! ];
//! let verdict = check(&Register, &history, &Options::default()).unwrap();
//! assert!(matches!(verdict, Verdict::NotLinearizable { ref key, op: 1, .. } if key == "k"));
//!
//! // Had the read overlapped the write, either answer would do.
//! let history = vec![
//!     Operation::completed(1, "k", 0, 10, In::Write("a".into()), Out::Ok),
//!     Operation::completed(2, "k", 5, 30, In::Read, Out::Value(None)),
//!     Operation::completed(3, "k", 6, 7, In::Read, Out::Value(v("a"))),
//! ];
//! assert_eq!(check(&Register, &history, &Options::default()).unwrap(), Verdict::Linearizable);
//! ```
//!
//! # The line format
//!
//! [`parse_history`] reads a history written one operation per line, so a
//! recorder in any language can feed the checker; the `basalt-lincheck`
//! binary checks such a file. Blank lines and lines starting with `#` are
//! ignored. Every other line is whitespace-separated words:
//!
//! ```text
//! <client> <key> <invoked> <returned> <op> [<arg>...] [-> <output>]
//! ```
//!
//! - `client`: an unsigned integer naming the client; it is only reported.
//! - `key`: the key; the history is checked per key.
//! - `invoked`, `returned`: unsigned integers on one clock shared by all
//!   clients, in any unit (nanoseconds of a monotonic clock, say).
//!   `returned` is `-` when the reply never came; such an operation may or
//!   may not have taken effect and takes no output (or `-> ?`).
//! - `-> <output>`: the reply; `-> ?` or no arrow at all when the operation
//!   returned but its reply is unknown (it did take effect).
//! - A word containing whitespace, `"` or `\`, or a value spelled `nil`, `?`
//!   or `->`, is written in double quotes with `\"`, `\\`, `\n`, `\r`, `\t`
//!   escapes. A bare `nil` is the absent value; a quoted `"nil"` is text.
//!
//! The register model ([`Register`], `--model register`, the default):
//!
//! | line                     | Redis command      | reply                           |
//! |--------------------------|--------------------|---------------------------------|
//! | `read -> v`, `read -> nil` | `GET k`          | the value, `nil` if absent      |
//! | `write v -> ok`          | `SET k v`          | `ok`                            |
//! | `del -> 1`, `del -> 0`   | `DEL k`            | whether the key existed         |
//! | `cas old new -> true`    | `SET k new NX` when `old` is `nil`; a script otherwise | whether it swapped (`true`/`false` or `1`/`0`) |
//!
//! The counter model ([`Counter`], `--model counter`):
//!
//! | line          | Redis command | reply                                   |
//! |---------------|---------------|-----------------------------------------|
//! | `incr n -> v` | `INCRBY k n`  | the value after the increment           |
//! | `read -> v`   | `GET k`       | the value; `nil` (absent) reads as `0`  |
//!
//! For example:
//!
//! ```text
//! # client key invoked returned op args -> output
//! 1 user:7 100 180 write alice -> ok
//! 2 user:7 150 210 read -> alice
//! 3 user:7 160 - write bob
//! 2 user:7 220 260 del -> 1
//! 1 user:7 300 340 cas nil "carol d" -> true
//! ```
//!
//! `basalt-lincheck [--model register|counter] [--max-steps N]
//! [--timeout-secs S] <file|->` prints the verdict and exits 0 when the
//! history is linearizable, 1 when it is not, 2 when the budget ran out
//! first, and 3 when the file could not be read or parsed.

#![forbid(unsafe_code)]

mod format;
mod models;
mod search;

use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Write as _;
use std::hash::Hash;
use std::time::{Duration, Instant};

pub use format::{parse_history, LineModel, Token};
pub use models::{quote, Counter, CounterInput, Register, RegisterInput, RegisterOutput, Value};

use search::{search, GaveUp, KeyOp, Limits, Outcome};

/// What a key's operations mean: a sequential specification the history is
/// checked against.
pub trait Model {
    /// The key's state. It is hashed into the memo, so keep it small.
    type State: Clone + Eq + Hash + fmt::Debug;
    type Input: fmt::Debug;
    type Output: fmt::Debug;

    /// The state of a key nobody has written.
    fn init(&self) -> Self::State;

    /// Applies `input` to `state`. Returns the next state if `output` is a
    /// reply the operation could give in `state`, or `None` if it could not.
    /// `output` is `None` when the reply was not observed: then any reply
    /// goes, and the next state must follow from `state` and `input` alone.
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: Option<&Self::Output>,
    ) -> Option<Self::State>;

    /// Whether the operation with this output leaves the state unchanged in
    /// every state where [`step`](Model::step) accepts it: a read, a delete
    /// that found nothing, a compare-and-set that failed. The search then
    /// linearizes it as soon as it may, without trying alternatives, which
    /// keeps reads concurrent with writes cheap. Answering `true` wrongly
    /// makes the checker miss linearizations; `false` is always safe.
    /// Default: `false`.
    fn is_read_only(&self, input: &Self::Input, output: Option<&Self::Output>) -> bool {
        let _ = (input, output);
        false
    }

    /// Checks that `output` is the kind of reply `input` gives (a read
    /// answers a value, not `OK`), so a recorder's mistake is reported as
    /// [`Error::InvalidOperation`] rather than as a violation.
    fn validate(&self, input: &Self::Input, output: &Self::Output) -> Result<(), String> {
        let _ = (input, output);
        Ok(())
    }

    /// An operation for explanations, e.g. `write v -> ok`.
    fn describe_op(&self, input: &Self::Input, output: Option<&Self::Output>) -> String {
        match output {
            Some(output) => format!("{input:?} -> {output:?}"),
            None => format!("{input:?} -> ?"),
        }
    }

    /// A state for explanations.
    fn describe_state(&self, state: &Self::State) -> String {
        format!("{state:?}")
    }
}

/// One client call, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation<I, O> {
    /// Who made the call; only reported.
    pub client: u64,
    /// The key the call touched. Keys are checked independently.
    pub key: String,
    /// When the call was sent, on a clock shared by all clients.
    pub call: u64,
    /// When the reply arrived; `None` if it never did, or the call failed
    /// in a way that leaves open whether it took effect. Such an operation
    /// may take effect at any time after `call`, or never.
    pub ret: Option<u64>,
    pub input: I,
    /// The reply; `None` when it is unknown, which is always the case when
    /// `ret` is `None`.
    pub output: Option<O>,
}

impl<I, O> Operation<I, O> {
    /// An operation that returned `output` at `ret`.
    pub fn completed(
        client: u64,
        key: impl Into<String>,
        call: u64,
        ret: u64,
        input: I,
        output: O,
    ) -> Self {
        Operation {
            client,
            key: key.into(),
            call,
            ret: Some(ret),
            input,
            output: Some(output),
        }
    }

    /// An operation whose reply was lost: it may or may not have taken
    /// effect.
    pub fn lost(client: u64, key: impl Into<String>, call: u64, input: I) -> Self {
        Operation {
            client,
            key: key.into(),
            call,
            ret: None,
            input,
            output: None,
        }
    }
}

/// A recorded history for model `M`.
pub type History<M> = Vec<Operation<<M as Model>::Input, <M as Model>::Output>>;

/// How much a check may spend before it answers [`Verdict::Unknown`].
#[derive(Debug, Clone)]
pub struct Options {
    max_steps: u64,
    timeout: Option<Duration>,
    max_memo_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_steps: 20_000_000,
            timeout: Some(Duration::from_secs(60)),
            max_memo_bytes: 1 << 30,
        }
    }
}

impl Options {
    /// The search steps allowed per key (one step tries one event).
    /// Default: 20 million, about 5 s of search in a release build when every
    /// step finds a new configuration, far less otherwise.
    pub fn max_steps(mut self, steps: u64) -> Self {
        self.max_steps = steps;
        self
    }

    /// The wall time allowed for the whole check; `None` for no limit. Keys
    /// still unchecked when it runs out are reported unknown. Default: 60 s.
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// The memory the memo of one key may use, estimated from its entry
    /// count. Default: 1 GiB.
    pub fn max_memo_bytes(mut self, bytes: usize) -> Self {
        self.max_memo_bytes = bytes;
        self
    }
}

/// The answer for a whole history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every key's operations have a valid order.
    Linearizable,
    /// The first key (in key order) whose operations have no valid order.
    NotLinearizable {
        key: String,
        /// The index, in the checked history, of the operation whose
        /// response no order explains: the history of `key` up to that
        /// response is the smallest prefix that cannot be linearized.
        op: usize,
        /// A human-readable account, several lines long.
        explanation: String,
    },
    /// No key was found broken, but these keys ran out of budget.
    Unknown {
        keys: Vec<String>,
        explanation: String,
    },
}

impl Verdict {
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable)
    }

    /// The `basalt-lincheck` exit status: 0 linearizable, 1 not, 2 unknown.
    pub fn exit_code(&self) -> u8 {
        match self {
            Verdict::Linearizable => 0,
            Verdict::NotLinearizable { .. } => 1,
            Verdict::Unknown { .. } => 2,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Linearizable => f.write_str("linearizable"),
            Verdict::NotLinearizable { explanation, .. } => {
                write!(f, "NOT linearizable: {explanation}")
            }
            Verdict::Unknown { explanation, .. } => write!(f, "unknown: {explanation}"),
        }
    }
}

/// Why a history could not be checked at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// An operation is malformed: it returned before it was invoked, has an
    /// output but no response, or its output does not fit its input.
    InvalidOperation { index: usize, reason: String },
    /// A line of the line format could not be read (lines count from 1).
    Parse { line: usize, reason: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidOperation { index, reason } => {
                write!(f, "operation #{index} is invalid: {reason}")
            }
            Error::Parse { line, reason } => write!(f, "line {line}: {reason}"),
        }
    }
}

impl std::error::Error for Error {}

/// Checks whether `history` is linearizable under `model`, key by key.
/// Stops at the first key (in key order) found not linearizable.
pub fn check<M: Model>(
    model: &M,
    history: &[Operation<M::Input, M::Output>],
    options: &Options,
) -> Result<Verdict, Error> {
    validate(model, history)?;
    let limits = Limits {
        max_steps: options.max_steps,
        // A timeout too large to add is no limit.
        deadline: options.timeout.and_then(|t| Instant::now().checked_add(t)),
        max_memo_bytes: options.max_memo_bytes,
    };
    let mut by_key: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (index, op) in history.iter().enumerate() {
        by_key.entry(op.key.as_str()).or_default().push(index);
    }

    let mut unknown = Vec::new();
    for (key, indexes) in by_key {
        let ops: Vec<KeyOp<'_, M::Input, M::Output>> = indexes
            .iter()
            .map(|&i| {
                let op = &history[i];
                KeyOp {
                    call: op.call,
                    ret: op.ret,
                    input: &op.input,
                    output: op.output.as_ref(),
                }
            })
            .collect();
        match search(model, &ops, &limits, false) {
            Outcome::Linearizable { .. } => {}
            Outcome::Violation { furthest } => {
                let (culprit, explanation) =
                    explain(model, key, history, &indexes, &ops, furthest, &limits);
                return Ok(Verdict::NotLinearizable {
                    key: key.to_string(),
                    op: indexes[culprit],
                    explanation,
                });
            }
            Outcome::GaveUp(why) => unknown.push((key, why)),
        }
    }
    if unknown.is_empty() {
        return Ok(Verdict::Linearizable);
    }
    let mut explanation = format!(
        "{} key(s) could not be decided within the budget:",
        unknown.len()
    );
    const SHOWN: usize = 5;
    for (key, why) in unknown.iter().take(SHOWN) {
        let why = match why {
            GaveUp::Steps(steps) => format!("gave up after {steps} search steps"),
            GaveUp::Deadline => format!(
                "ran out of time (timeout {:?})",
                options.timeout.unwrap_or_default()
            ),
            GaveUp::Memory(bytes) => format!("the memo outgrew {} MiB", bytes >> 20),
        };
        let _ = write!(explanation, "\n  key {}: {why}", quote(key));
    }
    if unknown.len() > SHOWN {
        let _ = write!(explanation, "\n  ... and {} more", unknown.len() - SHOWN);
    }
    Ok(Verdict::Unknown {
        keys: unknown
            .into_iter()
            .map(|(key, _)| key.to_string())
            .collect(),
        explanation,
    })
}

fn validate<M: Model>(model: &M, history: &[Operation<M::Input, M::Output>]) -> Result<(), Error> {
    for (index, op) in history.iter().enumerate() {
        let invalid = |reason: String| Error::InvalidOperation { index, reason };
        match (op.ret, &op.output) {
            (Some(ret), _) if ret < op.call => {
                return Err(invalid(format!(
                    "it returned at {ret}, before it was invoked at {}",
                    op.call
                )));
            }
            (None, Some(output)) => {
                return Err(invalid(format!(
                    "it has an output ({output:?}) but no response time"
                )));
            }
            (Some(_), Some(output)) => model.validate(&op.input, output).map_err(invalid)?,
            _ => {}
        }
    }
    Ok(())
}

/// How many operations an explanation lists in each of its sections.
const LISTED: usize = 10;

/// One key's operations, with the events in the search's order.
struct KeyHistory<'h, 'a, M: Model> {
    model: &'h M,
    history: &'h [Operation<M::Input, M::Output>],
    /// The index in `history` of each of the key's operations.
    indexes: &'h [usize],
    ops: &'h [KeyOp<'a, M::Input, M::Output>],
    /// The key's operations that returned, in the order of their returns.
    returns: Vec<usize>,
}

/// The key's history up to one return event: what an observer knew at that
/// instant. Operations invoked by then but not returned are pending: their
/// replies are not checked, and they may or may not have taken effect yet.
struct Prefix<'a, I, O> {
    ops: Vec<KeyOp<'a, I, O>>,
    /// The key-local index of each of `ops`.
    local: Vec<usize>,
    pending: usize,
}

impl<'a, M: Model> KeyHistory<'_, 'a, M> {
    /// Events sort by (time, calls before returns, operation), as in the
    /// search; this is the sort key of a return event.
    fn return_key(&self, j: usize) -> (u64, u8, usize) {
        (self.ops[j].ret.expect("a returned operation"), 1, j)
    }

    /// The prefix ending with the `n`th return (counting from 0); `None`
    /// ends just before the first return.
    fn prefix(&self, n: Option<usize>) -> Prefix<'a, M::Input, M::Output> {
        let cut = self.return_key(self.returns[n.unwrap_or(0)]);
        let mut prefix = Prefix {
            ops: Vec::new(),
            local: Vec::new(),
            pending: 0,
        };
        for (j, op) in self.ops.iter().enumerate() {
            if (op.call, 0, j) > cut {
                continue;
            }
            let returned = n.is_some() && op.ret.is_some() && self.return_key(j) <= cut;
            prefix.pending += usize::from(!returned);
            prefix.ops.push(KeyOp {
                ret: op.ret.filter(|_| returned),
                output: op.output.filter(|_| returned),
                ..*op
            });
            prefix.local.push(j);
        }
        prefix
    }

    fn describe(&self, local: usize, show_output: bool) -> String {
        let op = &self.history[self.indexes[local]];
        let ret = op.ret.map_or_else(|| "-".to_string(), |r| r.to_string());
        let output = op.output.as_ref().filter(|_| show_output);
        format!(
            "#{} client {} [{}, {}] {}",
            self.indexes[local],
            op.client,
            op.call,
            ret,
            self.model.describe_op(&op.input, output)
        )
    }
}

/// Finds the smallest prefix of the key's history that cannot be linearized
/// and explains it. Returns the key-local index of the operation whose
/// response ends that prefix, and the explanation.
///
/// The failed search reached the return of `furthest`, so the history before
/// that return is linearizable. The history up to it usually is not, but it
/// may be: an operation still pending there is checked in the full history,
/// where its wrong reply may be what blocked `furthest`. Linearizability of
/// prefixes is monotone (a longer prefix only adds constraints), so a binary
/// search between that return and the end finds the first failing one.
fn explain<M: Model>(
    model: &M,
    key: &str,
    history: &[Operation<M::Input, M::Output>],
    indexes: &[usize],
    ops: &[KeyOp<'_, M::Input, M::Output>],
    furthest: usize,
    limits: &Limits,
) -> (usize, String) {
    let mut returns: Vec<usize> = (0..ops.len()).filter(|&j| ops[j].ret.is_some()).collect();
    returns.sort_unstable_by_key(|&j| (ops[j].ret, j));
    let h = KeyHistory {
        model,
        history,
        indexes,
        ops,
        returns,
    };

    // Invariant: the prefix through return `lo` is linearizable (`None`: the
    // empty prefix), the one through return `hi` is not.
    let first = h
        .returns
        .iter()
        .position(|&j| j == furthest)
        .expect("furthest returned");
    let mut lo = first.checked_sub(1);
    let mut hi = h.returns.len() - 1;
    let mut exact = true;
    let mut probe = first;
    while lo.map_or(hi > 0, |lo| hi - lo > 1) {
        match search(model, &h.prefix(Some(probe)).ops, limits, false) {
            Outcome::Violation { .. } => hi = probe,
            Outcome::Linearizable { .. } => lo = Some(probe),
            Outcome::GaveUp(_) => {
                exact = false;
                break;
            }
        }
        probe = lo.map_or(hi / 2, |lo| lo + (hi - lo) / 2);
    }
    let culprit = h.returns[hi];
    let failing = h.prefix(Some(hi));

    let mut text = format!(
        "key {}: no valid order explains the response of {}\n  the history of {} up to that response ({} operations, {} of them pending) cannot be linearized; {}",
        quote(key),
        h.describe(culprit, true),
        quote(key),
        failing.ops.len(),
        failing.pending,
        if exact {
            "the history before it can"
        } else {
            "the budget ran out before shorter prefixes were ruled out"
        },
    );

    let bad = ops[culprit];
    let bad_ret = bad.ret.expect("the culprit returned");
    let concurrent: Vec<usize> = (0..ops.len())
        .filter(|&j| {
            j != culprit && ops[j].call <= bad_ret && ops[j].ret.is_none_or(|r| r >= bad.call)
        })
        .collect();
    if concurrent.is_empty() {
        let _ = write!(
            text,
            "\n  no operation is concurrent with #{}",
            indexes[culprit]
        );
    } else {
        let _ = write!(
            text,
            "\n  operations concurrent with #{}:",
            indexes[culprit]
        );
        for &j in concurrent.iter().take(LISTED) {
            let _ = write!(text, "\n    {}", h.describe(j, true));
        }
        if concurrent.len() > LISTED {
            let _ = write!(text, "\n    ... and {} more", concurrent.len() - LISTED);
        }
    }
    if exact {
        explain_earlier_order(&h, hi.checked_sub(1), culprit, limits, &mut text);
    }
    (culprit, text)
}

/// Appends one valid order of the prefix through return `through`, with the
/// state after each operation: what the culprit's reply fails to follow.
fn explain_earlier_order<M: Model>(
    h: &KeyHistory<'_, '_, M>,
    through: Option<usize>,
    culprit: usize,
    limits: &Limits,
    text: &mut String,
) {
    let earlier = h.prefix(through);
    let Outcome::Linearizable {
        order: Some(mut order),
    } = search(h.model, &earlier.ops, limits, true)
    else {
        let _ = write!(
            text,
            "\n  (no valid order of the earlier history is shown: the budget ran out)"
        );
        return;
    };
    // The search places pending operations eagerly; leave out each one the
    // order stays valid without, latest first, so the order shows only what
    // had to happen.
    for i in (0..order.len()).rev() {
        if earlier.ops[order[i]].ret.is_none() {
            let without: Vec<usize> = order[..i].iter().chain(&order[i + 1..]).copied().collect();
            if replays(h.model, &earlier.ops, &without) {
                order = without;
            }
        }
    }
    let mut state = h.model.init();
    let mut lines = Vec::with_capacity(order.len());
    for &p in &order {
        let op = earlier.ops[p];
        let Some(next) = h.model.step(&state, op.input, op.output) else {
            break;
        };
        state = next;
        let pending = if op.ret.is_none() && h.ops[earlier.local[p]].ret.is_some() {
            " (no reply yet)"
        } else {
            ""
        };
        lines.push(format!(
            "{}{pending}  => {}",
            h.describe(earlier.local[p], op.output.is_some()),
            h.model.describe_state(&state)
        ));
    }
    let culprit = h.indexes[culprit];
    if lines.is_empty() {
        let _ = write!(
            text,
            "\n  before that response no operation had to take effect: the state could be the initial {}",
            h.model.describe_state(&state),
        );
        return;
    }
    let skipped = lines.len().saturating_sub(LISTED);
    let _ = write!(
        text,
        "\n  one valid order of the history before that response ({} operations{}; state after each):",
        lines.len(),
        if skipped > 0 {
            format!(", the last {LISTED} shown")
        } else {
            String::new()
        },
    );
    for line in &lines[skipped..] {
        let _ = write!(text, "\n    {line}");
    }
    let _ = write!(text, "\n  #{culprit}'s reply fits no such order");
}

/// Whether `order` is a valid sequence of `ops` under the model.
fn replays<M: Model>(model: &M, ops: &[KeyOp<'_, M::Input, M::Output>], order: &[usize]) -> bool {
    let mut state = model.init();
    for &p in order {
        match model.step(&state, ops[p].input, ops[p].output) {
            Some(next) => state = next,
            None => return false,
        }
    }
    true
}
