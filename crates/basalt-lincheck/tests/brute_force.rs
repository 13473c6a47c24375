//! The checker agrees with a brute-force search over every order of small
//! random histories, linearizable or not, and the operation it blames ends
//! the smallest prefix that cannot be linearized.

mod common;

use basalt_lincheck::{
    check, Counter, CounterInput, Model, Operation, Options, Register, RegisterInput,
    RegisterOutput, Verdict,
};
use common::Rng;

/// Tries every order that respects real time (an operation that returned
/// strictly before another was invoked goes first), with each lost operation
/// either placed or left out.
fn brute_force<M: Model>(model: &M, ops: &[Operation<M::Input, M::Output>]) -> bool {
    fn extend<M: Model>(
        model: &M,
        ops: &[Operation<M::Input, M::Output>],
        placed: &mut Vec<bool>,
        state: &M::State,
    ) -> bool {
        let unplaced_completed = (0..ops.len()).any(|i| !placed[i] && ops[i].ret.is_some());
        if !unplaced_completed {
            return true;
        }
        for i in 0..ops.len() {
            if placed[i] {
                continue;
            }
            // Some unplaced operation returned before this one began.
            let blocked = (0..ops.len())
                .any(|j| !placed[j] && j != i && ops[j].ret.is_some_and(|r| r < ops[i].call));
            if blocked {
                continue;
            }
            if let Some(next) = model.step(state, &ops[i].input, ops[i].output.as_ref()) {
                placed[i] = true;
                let found = extend(model, ops, placed, &next);
                placed[i] = false;
                if found {
                    return true;
                }
            }
        }
        false
    }
    extend(model, ops, &mut vec![false; ops.len()], &model.init())
}

/// The history as an observer saw it at the return of `ops[culprit]`
/// (`before`: just before it), in the checker's event order: calls before
/// returns at equal times, then by index. Unreturned operations are lost.
fn prefix<I: Clone, O: Clone>(
    ops: &[Operation<I, O>],
    culprit: usize,
    before: bool,
) -> Vec<Operation<I, O>> {
    let cut = (ops[culprit].ret.unwrap(), 1, culprit);
    ops.iter()
        .enumerate()
        .filter(|(j, op)| (op.call, 0, *j) < cut)
        .map(|(j, op)| {
            let key = (op.ret.unwrap_or(u64::MAX), 1, j);
            let returned = op.ret.is_some() && if before { key < cut } else { key <= cut };
            Operation {
                ret: op.ret.filter(|_| returned),
                output: op.output.clone().filter(|_| returned),
                ..op.clone()
            }
        })
        .collect()
}

fn random_intervals(rng: &mut Rng, n: usize) -> Vec<(u64, Option<u64>)> {
    (0..n)
        .map(|_| {
            let call = rng.below(20);
            let ret = (!rng.percent(15)).then(|| call + rng.below(8));
            (call, ret)
        })
        .collect()
}

fn agree<M: Model>(model: &M, history: &[Operation<M::Input, M::Output>], seed: u64) -> bool
where
    M::Input: Clone,
    M::Output: Clone,
{
    let expected = brute_force(model, history);
    let verdict = check(model, history, &Options::default()).unwrap();
    assert_eq!(
        verdict.is_linearizable(),
        expected,
        "seed {seed}: {history:#?}\n{verdict}"
    );
    if let Verdict::NotLinearizable { op, .. } = verdict {
        assert!(
            !brute_force(model, &prefix(history, op, false)),
            "seed {seed}: prefix through #{op} is fine"
        );
        assert!(
            brute_force(model, &prefix(history, op, true)),
            "seed {seed}: prefix before #{op} fails"
        );
    }
    expected
}

#[test]
fn register_verdicts_match_brute_force_on_small_random_histories() {
    let values = ["a", "b", "c"];
    let (mut yes, mut no) = (0, 0);
    for seed in 0..5000 {
        let mut rng = Rng::new(seed);
        let n = 1 + rng.below(8) as usize;
        let pick = |rng: &mut Rng| values[rng.below(3) as usize].to_string();
        let history: Vec<Operation<RegisterInput, RegisterOutput>> = random_intervals(&mut rng, n)
            .into_iter()
            .enumerate()
            .map(|(i, (call, ret))| {
                let (input, output) = match rng.below(4) {
                    0 => {
                        let seen = (!rng.percent(30)).then(|| pick(&mut rng));
                        (RegisterInput::Read, RegisterOutput::Value(seen))
                    }
                    1 => (RegisterInput::Write(pick(&mut rng)), RegisterOutput::Ok),
                    2 => (
                        RegisterInput::Delete,
                        RegisterOutput::Deleted(rng.percent(50)),
                    ),
                    _ => {
                        let expected = (!rng.percent(40)).then(|| pick(&mut rng));
                        let input = RegisterInput::CompareAndSet {
                            expected,
                            new: pick(&mut rng),
                        };
                        (input, RegisterOutput::Swapped(rng.percent(50)))
                    }
                };
                Operation {
                    client: i as u64,
                    key: "k".to_string(),
                    call,
                    ret,
                    input,
                    output: ret.map(|_| output),
                }
            })
            .collect();
        if agree(&Register, &history, seed) {
            yes += 1;
        } else {
            no += 1;
        }
    }
    // Both answers must be well represented for the comparison to mean much.
    assert!(yes > 1000 && no > 1000, "{yes} linearizable, {no} not");
}

#[test]
fn counter_verdicts_match_brute_force_on_small_random_histories() {
    let (mut yes, mut no) = (0, 0);
    for seed in 0..5000 {
        let mut rng = Rng::new(seed ^ 0x5eed);
        let n = 1 + rng.below(8) as usize;
        let inputs: Vec<CounterInput> = (0..n)
            .map(|_| {
                if rng.percent(60) {
                    CounterInput::Incr(rng.below(3) as i64)
                } else {
                    CounterInput::Read
                }
            })
            .collect();
        // Replies within what the increments can reach, so that about half
        // of the histories are linearizable.
        let total: i64 = inputs
            .iter()
            .map(|i| {
                if let CounterInput::Incr(by) = i {
                    *by
                } else {
                    0
                }
            })
            .sum();
        let history: Vec<Operation<CounterInput, i64>> = random_intervals(&mut rng, n)
            .into_iter()
            .zip(inputs)
            .enumerate()
            .map(|(i, ((call, ret), input))| {
                let floor = if let CounterInput::Incr(by) = input {
                    by
                } else {
                    0
                };
                let output = floor + rng.below((total - floor + 1) as u64) as i64;
                Operation {
                    client: i as u64,
                    key: "c".to_string(),
                    call,
                    ret,
                    input,
                    output: ret.map(|_| output),
                }
            })
            .collect();
        if agree(&Counter, &history, seed) {
            yes += 1;
        } else {
            no += 1;
        }
    }
    assert!(yes > 1000 && no > 1000, "{yes} linearizable, {no} not");
}
