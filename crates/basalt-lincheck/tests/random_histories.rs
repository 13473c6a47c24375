//! Histories recorded from a simulated correct server, with random clients
//! and each operation taking effect at a random instant inside its interval,
//! are always accepted; the same histories with one reply made impossible
//! are always rejected at that reply.

mod common;

use std::time::{Duration, Instant};

use basalt_lincheck::{check, Counter, Options, Register, Verdict};
use common::*;

const SEEDS: u64 = 150;

fn small_workload(rng: &mut Rng) -> Workload {
    Workload {
        clients: 2 + rng.below(6),
        keys: 1 + rng.below(3),
        ops: 10 + rng.below(60) as usize,
        lost_percent: rng.below(8),
        max_latency: 1 + rng.below(20),
    }
}

/// Every run is bounded in steps and time: a failure here is a wrong
/// answer, never a hang.
fn options() -> Options {
    Options::default()
        .max_steps(2_000_000)
        .timeout(Some(Duration::from_secs(20)))
}

#[test]
fn simulated_register_histories_are_linearizable() {
    for seed in 0..SEEDS {
        let workload = small_workload(&mut Rng::new(seed ^ 0xabc));
        let history = simulate_register(seed, &workload);
        let verdict = check(&Register, &history, &options()).unwrap();
        assert_eq!(verdict, Verdict::Linearizable, "seed {seed}, {workload:?}");
    }
}

#[test]
fn simulated_counter_histories_are_linearizable() {
    for seed in 0..SEEDS {
        let workload = small_workload(&mut Rng::new(seed ^ 0xdef));
        let history = simulate_counter(seed, &workload);
        let verdict = check(&Counter, &history, &options()).unwrap();
        assert_eq!(verdict, Verdict::Linearizable, "seed {seed}, {workload:?}");
    }
}

#[test]
fn register_histories_with_one_impossible_read_are_rejected_at_that_read() {
    let mut checked = 0;
    for seed in 0..SEEDS {
        let mut rng = Rng::new(seed ^ 0x123);
        let workload = small_workload(&mut rng);
        let mut history = simulate_register(seed, &workload);
        let Some(bad) = corrupt_one_register_read(&mut rng, &mut history) else {
            continue;
        };
        checked += 1;
        match check(&Register, &history, &options()).unwrap() {
            // The search stops at the first return no order explains; that
            // may be an earlier operation only if the corrupted read forced
            // it, which cannot happen: the prefix before the read is intact.
            Verdict::NotLinearizable { key, op, .. } => {
                assert_eq!(
                    (key.as_str(), op),
                    (history[bad].key.as_str(), bad),
                    "seed {seed}"
                );
            }
            other => {
                panic!("seed {seed}, {workload:?}: corrupted read #{bad} was not caught: {other:?}")
            }
        }
    }
    assert!(
        checked > SEEDS / 2,
        "only {checked} histories had a read to corrupt"
    );
}

#[test]
fn counter_histories_with_one_impossible_reply_are_rejected_at_that_reply() {
    for seed in 0..SEEDS {
        let mut rng = Rng::new(seed ^ 0x456);
        let workload = small_workload(&mut rng);
        let mut history = simulate_counter(seed, &workload);
        let bad = corrupt_one_counter_reply(&mut rng, &mut history);
        match check(&Counter, &history, &options()).unwrap() {
            Verdict::NotLinearizable { key, op, .. } => {
                assert_eq!(
                    (key.as_str(), op),
                    (history[bad].key.as_str(), bad),
                    "seed {seed}"
                );
            }
            other => panic!(
                "seed {seed}, {workload:?}: corrupted reply #{bad} was not caught: {other:?}"
            ),
        }
    }
}

/// The size the cluster tests record: ~10k operations over ~100 keys from
/// 8 clients, with some replies lost. Debug builds must stay within a few
/// seconds; release builds take milliseconds.
#[test]
fn ten_thousand_operations_over_a_hundred_keys_check_quickly() {
    let workload = Workload {
        clients: 8,
        keys: 100,
        ops: 10_000,
        lost_percent: 2,
        max_latency: 50,
    };
    let history = simulate_register(7, &workload);
    let started = Instant::now();
    assert_eq!(
        check(&Register, &history, &options()).unwrap(),
        Verdict::Linearizable
    );
    let elapsed = started.elapsed();
    eprintln!("register, 10k ops / 100 keys / 8 clients: {elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");

    let mut rng = Rng::new(99);
    let mut history = history;
    let bad = corrupt_one_register_read(&mut rng, &mut history).unwrap();
    let started = Instant::now();
    let verdict = check(&Register, &history, &options()).unwrap();
    let elapsed = started.elapsed();
    eprintln!("register, same with one corrupted read: {elapsed:?}");
    assert!(
        matches!(verdict, Verdict::NotLinearizable { op, .. } if op == bad),
        "{verdict:?}"
    );
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");

    let history = simulate_counter(7, &workload);
    let started = Instant::now();
    assert_eq!(
        check(&Counter, &history, &options()).unwrap(),
        Verdict::Linearizable
    );
    let elapsed = started.elapsed();
    eprintln!("counter, 10k ops / 100 keys / 8 clients: {elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
}

/// All clients hammering one key is the hard case for the search: the memo
/// must keep it linear in the history's length.
#[test]
fn one_hot_key_with_ten_clients_checks_quickly() {
    let workload = Workload {
        clients: 10,
        keys: 1,
        ops: 3_000,
        lost_percent: 1,
        max_latency: 30,
    };
    let history = simulate_register(11, &workload);
    let started = Instant::now();
    assert_eq!(
        check(&Register, &history, &options()).unwrap(),
        Verdict::Linearizable
    );
    let elapsed = started.elapsed();
    eprintln!("register, 3k ops on one key / 10 clients: {elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
}
