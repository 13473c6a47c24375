//! Shared by the integration tests: shorthand constructors, a seeded random
//! generator, and a simulator that records histories of a real linearizable
//! register or counter, each operation taking effect at a random instant
//! inside its interval.

#![allow(dead_code)] // each test file uses a different part

use std::collections::HashMap;

use basalt_lincheck::{CounterInput, Operation, RegisterInput, RegisterOutput};

pub type RegisterOp = Operation<RegisterInput, RegisterOutput>;
pub type CounterOp = Operation<CounterInput, i64>;

pub fn write(client: u64, key: &str, call: u64, ret: u64, value: &str) -> RegisterOp {
    Operation::completed(
        client,
        key,
        call,
        ret,
        RegisterInput::Write(value.to_string()),
        RegisterOutput::Ok,
    )
}

pub fn read(client: u64, key: &str, call: u64, ret: u64, seen: Option<&str>) -> RegisterOp {
    Operation::completed(
        client,
        key,
        call,
        ret,
        RegisterInput::Read,
        RegisterOutput::Value(seen.map(str::to_string)),
    )
}

pub fn del(client: u64, key: &str, call: u64, ret: u64, existed: bool) -> RegisterOp {
    Operation::completed(
        client,
        key,
        call,
        ret,
        RegisterInput::Delete,
        RegisterOutput::Deleted(existed),
    )
}

pub fn cas(
    client: u64,
    key: &str,
    call: u64,
    ret: u64,
    expected: Option<&str>,
    new: &str,
    swapped: bool,
) -> RegisterOp {
    let input = RegisterInput::CompareAndSet {
        expected: expected.map(str::to_string),
        new: new.to_string(),
    };
    Operation::completed(
        client,
        key,
        call,
        ret,
        input,
        RegisterOutput::Swapped(swapped),
    )
}

pub fn lost_write(client: u64, key: &str, call: u64, value: &str) -> RegisterOp {
    Operation::lost(client, key, call, RegisterInput::Write(value.to_string()))
}

pub fn incr(client: u64, key: &str, call: u64, ret: u64, by: i64, now: i64) -> CounterOp {
    Operation::completed(client, key, call, ret, CounterInput::Incr(by), now)
}

pub fn count(client: u64, key: &str, call: u64, ret: u64, seen: i64) -> CounterOp {
    Operation::completed(client, key, call, ret, CounterInput::Read, seen)
}

/// SplitMix64: small, seedable, good enough to pick test schedules.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `percent`/100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The shape of a simulated workload.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    pub clients: u64,
    pub keys: u64,
    pub ops: usize,
    /// How often a reply is lost; half of the lost operations take effect,
    /// possibly long after their client moved on.
    pub lost_percent: u64,
    /// The longest time from invocation to effect, and from effect to reply.
    pub max_latency: u64,
}

/// When each simulated operation took effect: `None` if it never did.
pub type EffectTimes = Vec<Option<u64>>;

/// Who ran an operation on which key, when it was invoked and when (if ever)
/// its reply came.
type Slot = (u64, String, u64, Option<u64>);

/// Lays out `workload.ops` operations over clients, each client running one
/// operation at a time, and picks when each takes effect. Returns the
/// operations' (client, key, call, ret) and effect times.
fn schedule(rng: &mut Rng, workload: &Workload) -> (Vec<Slot>, EffectTimes) {
    let mut cursors = vec![0u64; workload.clients as usize];
    let mut slots = Vec::with_capacity(workload.ops);
    let mut effects = Vec::with_capacity(workload.ops);
    for _ in 0..workload.ops {
        let client = rng.below(workload.clients);
        let cursor = &mut cursors[client as usize];
        let key = format!("k{}", rng.below(workload.keys));
        let call = *cursor + rng.below(3);
        let effect = call + rng.below(workload.max_latency + 1);
        if rng.percent(workload.lost_percent) {
            // The client times out and moves on; the operation may still
            // land much later, or never.
            let landed = rng.percent(50);
            effects.push(landed.then(|| effect + rng.below(workload.max_latency * 10 + 1)));
            slots.push((client, key, call, None));
            *cursor = call + workload.max_latency;
        } else {
            let ret = effect + rng.below(workload.max_latency + 1);
            effects.push(Some(effect));
            slots.push((client, key, call, Some(ret)));
            // Sometimes the next call starts at the very instant of this
            // reply, which the checker must treat as concurrent.
            *cursor = ret + rng.below(2);
        }
    }
    (slots, effects)
}

/// The operations that took effect, in the order they did.
fn effect_order(effects: &EffectTimes) -> Vec<usize> {
    let mut order: Vec<usize> = (0..effects.len())
        .filter(|&i| effects[i].is_some())
        .collect();
    order.sort_by_key(|&i| (effects[i], i));
    order
}

/// A register history of a correct server: reads, writes of unique values,
/// deletes and compare-and-sets.
pub fn simulate_register(seed: u64, workload: &Workload) -> Vec<RegisterOp> {
    let mut rng = Rng::new(seed);
    let (slots, effects) = schedule(&mut rng, workload);
    let mut written: HashMap<String, Vec<String>> = HashMap::new();
    let mut history: Vec<RegisterOp> = slots
        .into_iter()
        .enumerate()
        .map(|(i, (client, key, call, ret))| {
            let values = written.entry(key.clone()).or_default();
            let input = match rng.below(100) {
                0..40 => RegisterInput::Read,
                40..75 => RegisterInput::Write(format!("v{i}")),
                75..85 => RegisterInput::Delete,
                _ => {
                    // Expect a value this key has probably held, or absent.
                    let n = values.len();
                    let expected = if n == 0 || rng.percent(30) {
                        None
                    } else {
                        Some(values[n - 1 - rng.below(n.min(3) as u64) as usize].clone())
                    };
                    RegisterInput::CompareAndSet {
                        expected,
                        new: format!("v{i}"),
                    }
                }
            };
            if let RegisterInput::Write(v) | RegisterInput::CompareAndSet { new: v, .. } = &input {
                values.push(v.clone());
            }
            Operation {
                client,
                key,
                call,
                ret,
                input,
                output: None,
            }
        })
        .collect();

    let mut state: HashMap<String, String> = HashMap::new();
    for i in effect_order(&effects) {
        let op = &mut history[i];
        let current = state.get(&op.key).cloned();
        let output = match &op.input {
            RegisterInput::Read => RegisterOutput::Value(current),
            RegisterInput::Write(v) => {
                state.insert(op.key.clone(), v.clone());
                RegisterOutput::Ok
            }
            RegisterInput::Delete => RegisterOutput::Deleted(state.remove(&op.key).is_some()),
            RegisterInput::CompareAndSet { expected, new } => {
                let swaps = current == *expected;
                if swaps {
                    state.insert(op.key.clone(), new.clone());
                }
                RegisterOutput::Swapped(swaps)
            }
        };
        if op.ret.is_some() {
            op.output = Some(output);
        }
    }
    history
}

/// A counter history of a correct server: positive increments and reads.
pub fn simulate_counter(seed: u64, workload: &Workload) -> Vec<CounterOp> {
    let mut rng = Rng::new(seed);
    let (slots, effects) = schedule(&mut rng, workload);
    let mut history: Vec<CounterOp> = slots
        .into_iter()
        .map(|(client, key, call, ret)| {
            let input = if rng.percent(60) {
                CounterInput::Incr(1 + rng.below(3) as i64)
            } else {
                CounterInput::Read
            };
            Operation {
                client,
                key,
                call,
                ret,
                input,
                output: None,
            }
        })
        .collect();
    let mut state: HashMap<String, i64> = HashMap::new();
    for i in effect_order(&effects) {
        let op = &mut history[i];
        let value = state.entry(op.key.clone()).or_default();
        if let CounterInput::Incr(by) = op.input {
            *value += by;
        }
        if op.ret.is_some() {
            op.output = Some(*value);
        }
    }
    history
}

/// Changes one completed read of `history` to a value it could not have
/// seen at any instant of its interval, and returns that read's index:
/// a value never written, a value first written after the read returned,
/// or a value overwritten before the read began. `None` if there is no
/// completed read.
pub fn corrupt_one_register_read(rng: &mut Rng, history: &mut [RegisterOp]) -> Option<usize> {
    let reads: Vec<usize> = (0..history.len())
        .filter(|&i| history[i].input == RegisterInput::Read && history[i].ret.is_some())
        .collect();
    if reads.is_empty() {
        return None;
    }
    let r = reads[rng.below(reads.len() as u64) as usize];
    let (key, call, ret) = (
        history[r].key.clone(),
        history[r].call,
        history[r].ret.unwrap(),
    );
    let same_key: Vec<&RegisterOp> = history.iter().filter(|op| op.key == key).collect();
    let writes_of = |op: &RegisterOp| match &op.input {
        RegisterInput::Write(v) | RegisterInput::CompareAndSet { new: v, .. } => Some(v.clone()),
        _ => None,
    };

    // Values are unique per operation, so each has exactly one writer.
    let future: Vec<String> = same_key
        .iter()
        .filter(|op| op.call > ret)
        .filter_map(|op| writes_of(op))
        .collect();
    let stale: Vec<String> = same_key
        .iter()
        .filter(|w| matches!(w.input, RegisterInput::Write(_)))
        .filter(|w| {
            // Overwritten for sure: a later write or delete began after this
            // write's reply and ended before the read began.
            let Some(w_ret) = w.ret else { return false };
            same_key.iter().any(|o| {
                matches!(o.input, RegisterInput::Write(_) | RegisterInput::Delete)
                    && o.call > w_ret
                    && o.ret.is_some_and(|o_ret| o_ret < call)
            })
        })
        .filter_map(|w| writes_of(w))
        .collect();
    let value = match rng.below(3) {
        1 if !future.is_empty() => future[rng.below(future.len() as u64) as usize].clone(),
        2 if !stale.is_empty() => stale[rng.below(stale.len() as u64) as usize].clone(),
        _ => "never-written".to_string(),
    };
    history[r].output = Some(RegisterOutput::Value(Some(value)));
    Some(r)
}

/// Changes one completed counter reply to a value outside every value the
/// counter could hold during the operation, and returns its index. With
/// positive increments the counter only grows, so it is at least the sum of
/// increments that returned before the operation began (plus its own), and
/// at most the sum of every increment invoked before it returned.
pub fn corrupt_one_counter_reply(rng: &mut Rng, history: &mut [CounterOp]) -> usize {
    let done: Vec<usize> = (0..history.len())
        .filter(|&i| history[i].ret.is_some())
        .collect();
    let t = done[rng.below(done.len() as u64) as usize];
    let (key, call, ret) = (
        history[t].key.clone(),
        history[t].call,
        history[t].ret.unwrap(),
    );
    let by = |op: &CounterOp| match op.input {
        CounterInput::Incr(by) => by,
        CounterInput::Read => 0,
    };
    let same_key = history.iter().enumerate().filter(|(_, op)| op.key == key);
    let mut low = by(&history[t]);
    let mut high = 0;
    for (i, op) in same_key {
        if i != t && op.ret.is_some_and(|r| r < call) {
            low += by(op);
        }
        if op.call <= ret {
            high += by(op);
        }
    }
    let value = if low >= 1 && rng.percent(50) {
        low - 1 - rng.below(low as u64) as i64
    } else {
        high + 1 + rng.below(3) as i64
    };
    history[t].output = Some(value);
    t
}
